// Scene 2: many waiters on one lock. Left, the core's ordered wait queue: a release wakes
// exactly one waiter. Right, for contrast, the naive alternative — clients that were told
// "busy" watch the key, everyone is notified on release and they all race to re-acquire
// with try-locks against a second real core. The Busy answers are counted as wasted wake-ups.
// Both lanes use the real core; only the herd's "notify everyone" is the (bad) client design.

import { nextTime, tickAll, heartbeat, rng, milestone, readInboxes } from './common.js';

const LOCK = 'jobs/nightly';
const N = 7; // one holder + six waiters
const HOLD = 2; // seconds each holder works
const TTL = 6; // session timeout: a killed client's session expires after this

const ids = (lane) => Array.from({ length: N }, (_, i) => `${lane}${i}`);
const Q = ids('q');
const H = ids('h');

function setup(w, emit) {
  emit({ op: 'node', create: true, node: 'queue', label: 'Ordered queue', group: 'queue' });
  emit({ op: 'node', create: true, node: 'herd', label: 'Herd', group: 'herd' });
  [Q, H].forEach((lane, li) =>
    lane.forEach((id, i) =>
      emit({ op: 'client', create: true, id, name: i === 0 ? 'H' : `C${i}`, group: li ? 'herd' : 'queue', mem: { wakeups: 0, wasted: 0, watching: false } }),
    ),
  );
  for (const id of Q) emit({ op: 'core', node: 'queue', by: id, input: { type: 'openSession', ttl: TTL } });
  for (const id of H) emit({ op: 'core', node: 'herd', by: id, input: { type: 'openSession', ttl: TTL } });
  for (const id of Q) emit({ op: 'core', node: 'queue', by: id, input: { type: 'acquire', session: w.clients[id].session, lock: LOCK, mode: 'exclusive', wait: 'forever' } });
  for (const id of H) {
    const outs = emit({ op: 'core', node: 'herd', by: id, input: { type: 'acquire', session: w.clients[id].session, lock: LOCK, mode: 'exclusive', wait: 'none' } });
    if (outs.some((o) => o.type === 'busy')) emit({ op: 'client', id, mem: { watching: true } });
  }
  milestone(w, emit, 'seven clients wait', ['queue', 'herd']);
  emit({
    op: 'caption',
    text: `Seven clients want ${JSON.stringify(LOCK)}. Left: the lock was held, so each request joins an ordered wait queue, and the service tells a waiter when it is its turn (a Granted event); there is no polling. ` +
      `Right, for contrast: each client got "busy" from a try-lock and watches the key, to be told when it frees.`,
  });
}

function step(w, emit, P) {
  const t = nextTime(w, emit);
  if (t === 0) return setup(w, emit);
  const ev = { q: null, h: null };
  // Time passes in both cores: a holder you killed stops heartbeating and its session expires.
  const ticked = tickAll(w, emit, t);
  const qOuts = [...(ticked.queue || [])];
  const hOuts = [...(ticked.herd || [])];
  // A client you resumed first reads what reached it while it was paused (a grant, an expiry).
  readInboxes(w, emit, [...Q, ...H]);
  // Ordered queue: the holder releases after HOLD seconds; the core grants exactly one waiter.
  let qReleaser = qOuts.some((o) => o.type === 'released' && o.reason === 'expired') ? 'the killed holder\'s expired session' : null;
  for (const id of Q) {
    const c = w.clients[id];
    if (c.status !== 'running') continue;
    if (c.holding && c.mem.since == null) emit({ op: 'client', id, mem: { since: t } });
    else if (c.holding && t - c.mem.since >= HOLD) {
      qOuts.push(...emit({ op: 'core', node: 'queue', by: id, input: { type: 'release', session: c.session, lock: LOCK } }));
      emit({ op: 'core', node: 'queue', by: id, input: { type: 'closeSession', session: c.session }, quiet: true });
      emit({ op: 'client', id, mem: { finished: true } });
      qReleaser = c.name;
    }
  }
  const woken = qOuts.filter((o) => o.type === 'granted').map((g) => w.sessions[`queue:${g.session}`]);
  for (const wid of woken) emit({ op: 'client', id: wid, mem: { wakeups: w.clients[wid].mem.wakeups + 1 } });
  if (qReleaser) ev.q = { released: qReleaser, woken: woken.map((id) => w.clients[id].name), wokenIds: woken, token: qOuts.find((o) => o.type === 'granted')?.token };
  // Herd: the holder releases; the naive watch notifies every watcher; all race with try-locks.
  let hReleaser = hOuts.some((o) => o.type === 'released' && o.reason === 'expired') ? 'the killed holder\'s expired session' : null;
  for (const id of H) {
    const c = w.clients[id];
    if (c.status !== 'running') continue;
    if (c.holding && c.mem.since == null) emit({ op: 'client', id, mem: { since: t } });
    else if (c.holding && t - c.mem.since >= HOLD) {
      hOuts.push(...emit({ op: 'core', node: 'herd', by: id, input: { type: 'release', session: c.session, lock: LOCK } }));
      emit({ op: 'core', node: 'herd', by: id, input: { type: 'closeSession', session: c.session }, quiet: true });
      emit({ op: 'client', id, mem: { finished: true } });
      hReleaser = c.name;
    }
  }
  if (hOuts.some((o) => o.type === 'released')) {
    // the naive design: every watcher is told, and all of them race
    const watchers = H.filter((x) => w.clients[x].mem.watching && w.clients[x].status === 'running');
    // The race order is seeded (same seed, same race) so the replay is exact.
    const r = rng(P.seed * 7919 + t);
    const order = watchers.map((x) => [r(), x]).sort((a, b) => a[0] - b[0]).map((p) => p[1]);
    let winner = null;
    let winnerId = null;
    let busy = 0;
    for (const x of order) {
      const cx = w.clients[x];
      const outs = emit({ op: 'core', node: 'herd', by: x, input: { type: 'acquire', session: cx.session, lock: LOCK, mode: 'exclusive', wait: 'none' } });
      const won = outs.some((o) => o.type === 'granted');
      const isBusy = outs.some((o) => o.type === 'busy');
      if (won) (winner = cx.name), (winnerId = x);
      if (isBusy) busy += 1;
      emit({ op: 'client', id: x, mem: { wakeups: cx.mem.wakeups + 1, wasted: cx.mem.wasted + (isBusy ? 1 : 0), watching: !won } });
    }
    ev.h = { released: hReleaser, woke: order.length, busy, winner, winnerId };
  }
  // Live clients heartbeat (quietly) so that only a killed or paused one expires.
  for (const id of [...Q, ...H]) heartbeat(w, emit, id, { node: w.clients[id].group, hb: 2, hideHeartbeats: true });
  const parts = [];
  if (ev.q) {
    const who = ev.q.woken;
    parts.push(
      who.length
        ? `Left: ${ev.q.released} releases; the core grants the lock to exactly one waiter, the head of its wait queue: ${who.join(', ')} (token ${ev.q.token}). Nobody else wakes.`
        : `Left: ${ev.q.released} releases; the wait queue is empty, so nobody is woken.`,
    );
  }
  if (ev.h) {
    parts.push(
      ev.h.woke
        ? `Right: ${ev.h.released} releases; all ${ev.h.woke} watchers wake and race to re-acquire with a try-lock. ${ev.h.winner ?? 'Nobody'} wins; the core answers "busy" to the other ${ev.h.busy} — wasted wake-ups.`
        : `Right: ${ev.h.released} releases; nobody is watching any more.`,
    );
  }
  // done when both locks are free and nobody is left waiting or watching
  const idle = ['queue', 'herd'].every((n) => w.nodes[n].core.holders(LOCK).length === 0 && w.nodes[n].core.waiters(LOCK).length === 0);
  const watching = H.some((id) => w.clients[id].mem.watching && w.clients[id].status === 'running');
  if ((idle && !watching) || t >= 60) {
    const o = outcome(w);
    milestone(w, emit, 'outcome', ['queue', 'herd'], true);
    emit({
      op: 'caption',
      text: `${parts.length ? `${parts.join(' ')} ` : ''}Outcome: on the left each release woke at most one waiter (${o.queue.wakeups} wake-ups, ${o.queue.wasted} wasted). ` +
        `On the right every release woke every watcher: ${o.herd.wakeups} wake-ups, ${o.herd.wasted} of them wasted on "busy" — a thundering herd, grant storms at scale.`,
    });
    emit({ op: 'done' });
    return;
  }
  if (parts.length) {
    // the first release on each side, and any release after a kill, is a stop of the story
    const firstQ = ev.q && !w.milestones.some((m) => m.label.startsWith('release'));
    const expiry = (ev.q && ev.q.released.includes('expired')) || (ev.h && ev.h.released.includes('expired'));
    // the spot is on who woke: the one the queue granted, the herd's race winner
    const woke = [...(ev.q?.wokenIds ?? []), ...(ev.h?.winnerId ? [ev.h.winnerId] : [])];
    if (firstQ || expiry) milestone(w, emit, expiry ? 'release by expiry' : 'release: one vs all', woke.length ? woke : ['queue', 'herd']);
    emit({ op: 'caption', text: parts.join(' ') });
  }
}

function laneStats(w, lane) {
  const cs = lane.map((id) => w.clients[id]);
  return {
    wakeups: cs.reduce((n, c) => n + c.mem.wakeups, 0),
    wasted: cs.reduce((n, c) => n + c.mem.wasted, 0),
  };
}

function outcome(w) {
  return { queue: laneStats(w, Q), herd: laneStats(w, H) };
}

export const herd = {
  key: 'herd',
  title: '2 · Wait queue vs thundering herd',
  short: 'Wait queue',
  lede: 'Many waiters on one lock. An ordered wait queue wakes exactly one; notifying everyone wakes them all to fight.',
  fencingSwitch: false,
  tryThis: [
    'Step through one release at a time and count the arrows on each side.',
    'Kill the holder H on the left: its session expires and the queue still wakes one.',
    'Change the race seed: a different winner, the same waste.',
  ],
  params: {
    seed: { label: 'race seed (herd)', type: 'range', min: 1, max: 9, step: 1, value: 1, unit: '' },
  },
  lanes: null,
  clients: [...Q, ...H],
  step,
  outcome,
  laneIds: { queue: Q, herd: H },
  lock: LOCK,
  layout: (w, narrow) => {
    // side by side when wide, stacked (flatter rings) on a phone
    const at = narrow ? [[200, 132], [200, 400]] : [[200, 170], [600, 170]];
    const [rx, ry] = narrow ? [134, 84] : [128, 112];
    const dy = narrow ? { titleDy: 114, countDy: 132 } : {};
    const nodes = [
      { id: 'queue', kind: 'hub', x: at[0][0], y: at[0][1], title: 'Ordered wait queue', ...dy },
      { id: 'herd', kind: 'hub', x: at[1][0], y: at[1][1], title: 'Notify all (herd)', ...dy },
    ];
    [Q, H].forEach((lane, li) =>
      lane.forEach((id, i) => {
        const a = -Math.PI / 2 + (i * 2 * Math.PI) / N;
        nodes.push({ id, kind: 'client', small: true, x: at[li][0] + Math.cos(a) * rx, y: at[li][1] + Math.sin(a) * ry });
      }),
    );
    return narrow ? { width: 400, height: 544, nodes, onlyGrantLabels: true } : { height: 340, nodes, onlyGrantLabels: true };
  },
};
