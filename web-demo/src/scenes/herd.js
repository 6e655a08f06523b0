// Scene 2: many waiters on one lock. Left, the core's ordered wait queue: a release wakes
// exactly one waiter. Right, for contrast, the naive alternative — clients that were told
// "busy" watch the key, everyone is notified on release and they all race to re-acquire
// with try-locks against a second real core. The Busy answers are counted as wasted wake-ups.
// Both lanes use the real core; only the herd's "notify everyone" is the (bad) client design.

import { nextTime, rng } from './common.js';

const LOCK = 'jobs/nightly';
const N = 7; // one holder + six waiters
const HOLD = 2; // seconds each holder works

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
  for (const id of Q) emit({ op: 'core', node: 'queue', by: id, input: { type: 'openSession', ttl: 1000 } });
  for (const id of H) emit({ op: 'core', node: 'herd', by: id, input: { type: 'openSession', ttl: 1000 } });
  for (const id of Q) emit({ op: 'core', node: 'queue', by: id, input: { type: 'acquire', session: w.clients[id].session, lock: LOCK, mode: 'exclusive', wait: 'forever' } });
  for (const id of H) {
    const outs = emit({ op: 'core', node: 'herd', by: id, input: { type: 'acquire', session: w.clients[id].session, lock: LOCK, mode: 'exclusive', wait: 'none' } });
    if (outs.some((o) => o.type === 'busy')) emit({ op: 'client', id, mem: { watching: true } });
  }
  emit({
    op: 'caption',
    text: `Seven clients want ${JSON.stringify(LOCK)}. Left: the lock was held, so each request joins an ordered wait queue and the client sets a watch; there is no polling. ` +
      `Right, for contrast: each client got "busy" from a try-lock and watches the key, to be told when it frees.`,
  });
}

function step(w, emit, P) {
  const t = nextTime(w, emit);
  if (t === 0) return setup(w, emit);
  const ev = { q: null, h: null };
  // Ordered queue: the holder releases after HOLD seconds; the core grants exactly one waiter.
  for (const id of Q) {
    const c = w.clients[id];
    if (c.status !== 'running') continue;
    if (c.holding && c.mem.since == null) emit({ op: 'client', id, mem: { since: t } });
    else if (c.holding && t - c.mem.since >= HOLD) {
      const outs = emit({ op: 'core', node: 'queue', by: id, input: { type: 'release', session: c.session, lock: LOCK } });
      emit({ op: 'client', id, mem: { finished: true } });
      const woken = outs.filter((o) => o.type === 'granted');
      for (const g of woken) {
        const wid = w.sessions[`queue:${g.session}`];
        emit({ op: 'client', id: wid, mem: { wakeups: w.clients[wid].mem.wakeups + 1 } });
      }
      ev.q = { released: c.name, woken: woken.map((g) => w.clients[w.sessions[`queue:${g.session}`]].name), token: woken[0]?.token };
    }
  }
  // Herd: the holder releases; the naive watch notifies every watcher; all race with try-locks.
  for (const id of H) {
    const c = w.clients[id];
    if (c.status !== 'running') continue;
    if (c.holding && c.mem.since == null) emit({ op: 'client', id, mem: { since: t } });
    else if (c.holding && t - c.mem.since >= HOLD) {
      emit({ op: 'core', node: 'herd', by: id, input: { type: 'release', session: c.session, lock: LOCK } });
      emit({ op: 'client', id, mem: { finished: true } });
      const watchers = H.filter((x) => w.clients[x].mem.watching && w.clients[x].status === 'running');
      // The race order is seeded (same seed, same race) so the replay is exact.
      const r = rng(P.seed * 7919 + t);
      const order = watchers.map((x) => [r(), x]).sort((a, b) => a[0] - b[0]).map((p) => p[1]);
      let winner = null;
      let busy = 0;
      for (const x of order) {
        const cx = w.clients[x];
        const outs = emit({ op: 'core', node: 'herd', by: x, input: { type: 'acquire', session: cx.session, lock: LOCK, mode: 'exclusive', wait: 'none' } });
        const won = outs.some((o) => o.type === 'granted');
        const isBusy = outs.some((o) => o.type === 'busy');
        if (won) winner = cx.name;
        if (isBusy) busy += 1;
        emit({ op: 'client', id: x, mem: { wakeups: cx.mem.wakeups + 1, wasted: cx.mem.wasted + (isBusy ? 1 : 0), watching: !won } });
      }
      ev.h = { released: c.name, woke: order.length, busy, winner };
    }
  }
  const parts = [];
  if (ev.q) parts.push(`Left: ${ev.q.released} releases; the core grants exactly one waiter, ${ev.q.woken.join(', ') || 'nobody'}${ev.q.token ? ` (token ${ev.q.token})` : ''}. Nobody else wakes.`);
  if (ev.h) parts.push(`Right: ${ev.h.released} releases; all ${ev.h.woke} watchers wake and race to re-acquire. ${ev.h.winner ?? 'Nobody'} wins; the core answers "busy" to the other ${ev.h.busy} — wasted wake-ups.`);
  if (parts.length) emit({ op: 'caption', text: parts.join(' ') });
  const left = [...Q, ...H].filter((id) => w.clients[id].status === 'running' && !w.clients[id].mem.finished);
  const someoneHolds = left.some((id) => w.clients[id].holding);
  if (left.length === 0 || !someoneHolds || t >= 60) {
    const o = outcome(w);
    emit({
      op: 'caption',
      text: `Why a wait queue with ordered grants: on release, exactly one waiter is notified (${o.queue.wakeups} wake-ups, ${o.queue.wasted} wasted). ` +
        `Notifying everyone and letting them race is a thundering herd: ${o.herd.wakeups} wake-ups, ${o.herd.wasted} of them wasted on "busy" — grant storms at scale.`,
    });
    emit({ op: 'done' });
  }
}

function laneStats(w, lane, node) {
  const cs = lane.map((id) => w.clients[id]);
  return {
    wakeups: cs.reduce((n, c) => n + c.mem.wakeups, 0),
    wasted: cs.reduce((n, c) => n + c.mem.wasted, 0),
    grants: w.log.filter((l) => l.src === w.nodes[node].label && l.text.startsWith('granted')).length,
  };
}

function outcome(w) {
  return { queue: laneStats(w, Q, 'queue'), herd: laneStats(w, H, 'herd') };
}

export const herd = {
  key: 'herd',
  title: '2 · Wait queue vs thundering herd',
  short: 'Wait queue',
  lede: 'Many waiters on one lock. An ordered wait queue wakes exactly one; notifying everyone wakes them all to fight.',
  fencingSwitch: false,
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
    // side by side when wide, stacked on a phone
    const at = narrow ? [[200, 170], [200, 510]] : [[200, 170], [600, 170]];
    const nodes = [
      { id: 'queue', kind: 'hub', x: at[0][0], y: at[0][1], title: 'Ordered wait queue' },
      { id: 'herd', kind: 'hub', x: at[1][0], y: at[1][1], title: 'Notify all (herd)' },
    ];
    [Q, H].forEach((lane, li) =>
      lane.forEach((id, i) => {
        const a = -Math.PI / 2 + (i * 2 * Math.PI) / N;
        nodes.push({ id, kind: 'client', small: true, x: at[li][0] + Math.cos(a) * 128, y: at[li][1] + Math.sin(a) * 112 });
      }),
    );
    return narrow ? { width: 400, height: 680, nodes, onlyGrantLabels: true } : { height: 340, nodes, onlyGrantLabels: true };
  },
};
