// Scene 3: leader election with the same mechanism. The fencing token is the epoch; the old
// leader's action bounces off a FenceGate downstream.

import { nextTime, tickAll, heartbeat, deadlineOf } from './common.js';

const ELECTION = 'election/orders-primary';
const IDS = ['N1', 'N2', 'N3'];
const ctx = { node: 'svc', store: 'db', lock: ELECTION, hb: 3 };
const PAUSE_AT = 5;

function setup(w, emit, P) {
  emit({ op: 'node', create: true, node: 'svc', label: 'Lock service' });
  emit({ op: 'store', create: true, store: 'db', label: 'Orders DB', resource: 'orders', lock: ELECTION, node: 'svc', fencing: P.fencing });
  for (const id of IDS) emit({ op: 'client', create: true, id, name: id, group: 'svc', keeper: { interval: 3, margin: 2 }, mem: { lastHb: 0, acts: 0 } });
  emit({ op: 'history', node: 'svc', lock: ELECTION, count: 6 });
  for (const id of IDS) emit({ op: 'core', node: 'svc', by: id, input: { type: 'openSession', ttl: P.ttl } });
  for (const id of IDS) emit({ op: 'core', node: 'svc', by: id, input: { type: 'campaign', session: w.clients[id].session, election: ELECTION } });
  const l = w.nodes.svc.core.leader(ELECTION);
  emit({
    op: 'caption',
    text: `Every candidate tries acquire(${JSON.stringify(ELECTION)}); the winner is leader and the losers watch. ` +
      `${w.sessions[`svc:${l.session}`]} leads with epoch ${l.epoch}: the fencing token doubles as the epoch number, and every action it takes downstream carries it.`,
  });
}

function step(w, emit, P) {
  const t = nextTime(w, emit);
  if (t === 0) return setup(w, emit, P);
  const outs = tickAll(w, emit, t).svc || [];
  const n1 = w.clients.N1;
  const ev = { acts: [], expired: outs.filter((o) => o.type === 'sessionExpired'), granted: outs.filter((o) => o.type === 'granted'), paused: false, rejoined: null };
  if (n1.status === 'paused' && n1.pausedBy === 'gc' && t === n1.mem.resumeAt) emit({ op: 'client', id: 'N1', set: { status: 'running', pausedBy: null } });
  const freeze = t === PAUSE_AT && n1.status === 'running' && n1.holding;
  for (const id of IDS) {
    const c = w.clients[id];
    if (c.status !== 'running') continue;
    if (c.holding && c.mem.ledSince == null) emit({ op: 'client', id, mem: { ledSince: t, nextAct: t } });
    // A leader acts every 2 s, each action stamped with its epoch (the token it believes it
    // holds), after checking its lease by its own clock (the core's SessionKeeper).
    const act = (late) => {
      emit({ op: 'write', store: 'db', by: id, token: c.token, data: `orders batch #${c.mem.acts + 1} (epoch ${c.token})` });
      emit({ op: 'client', id, mem: { acts: c.mem.acts + 1, nextAct: t + 2, prepared: null } });
      ev.acts.push({ id, row: w.stores.db.rows.at(-1), late });
    };
    if (c.holding && c.token != null && c.mem.prepared) act(true);
    else if (c.holding && c.token != null && !c.mem.steppedDown && t >= (c.mem.nextAct ?? t)) {
      const lease = w.lease(id);
      if (lease && lease.state !== 'safe') {
        emit({ op: 'client', id, mem: { steppedDown: t } });
        emit({ op: 'note', src: c.name, text: `${c.name}'s lease by its own clock: ${lease.state} — it stops acting as leader`, cls: 'warn' });
        ev.stepped = { id, lease };
      } else if (freeze && id === 'N1') {
        // the check passed; the pause strikes between the check and the send
        emit({ op: 'client', id, mem: { prepared: true } });
        emit({ op: 'client', id, set: { status: 'paused', pausedBy: 'gc' }, mem: { resumeAt: t + P.pause } });
        ev.paused = { lease };
        continue;
      } else act(false);
    }
    if (c.inbox.length) emit({ op: 'inbox', id });
    if (c.lost && c.mem.rejoinedAt == null) {
      // It learnt it is no longer leader: a fresh session, and back into the election.
      emit({ op: 'core', node: 'svc', by: id, input: { type: 'openSession', ttl: P.ttl } });
      const q = emit({ op: 'core', node: 'svc', by: id, input: { type: 'campaign', session: w.clients[id].session, election: ELECTION } });
      emit({ op: 'client', id, set: { lost: false }, mem: { rejoinedAt: t, ledSince: null, lastHb: t } });
      ev.rejoined = { id, out: q[0] };
    }
    heartbeat(w, emit, id, ctx);
  }
  const text = caption(w, ev, P);
  if (text) emit({ op: 'caption', text });
  const survived = n1.mem.rejoinedAt == null && n1.status === 'running' && t >= PAUSE_AT + P.pause + 4;
  const cap = Math.max(40, PAUSE_AT + P.pause + 3 * P.ttl);
  // a leader the core lists whose process is dead is not an ending: wait for its expiry
  const l = w.nodes.svc.core.leader(ELECTION);
  const liveLeader = !l || w.clients[w.sessions[`svc:${l.session}`]]?.status === 'running';
  if ((n1.mem.rejoinedAt != null && t >= n1.mem.rejoinedAt + 2 && liveLeader) || survived || t >= cap) {
    emit({
      op: 'caption',
      text: !survived && n1.mem.rejoinedAt == null
        ? `The story went another way: ${leaderNow(w)}. Whoever leads, every action carries its epoch, and the downstream check refuses an older one.`
        : survived
        ? `N1's pause was shorter than the session timeout, so it never lost leadership: one leader throughout. A longer pause would have produced two self-believed leaders — and only the epoch check downstream keeps that harmless.`
        : `One detail interviewers probe: a leader that loses contact must stop acting before its session would expire, stepping down at session timeout − safety margin by its own clock. ` +
          `But a pause can strike between that check and the act — which is why the epoch travels with every action and the downstream check has the last word.`,
    });
    emit({ op: 'done' });
  }
}

function leaderNow(w) {
  const l = w.nodes.svc.core.leader(ELECTION);
  return l ? `${w.sessions[`svc:${l.session}`]} leads with epoch ${l.epoch}` : 'nobody leads right now';
}

function caption(w, ev, P) {
  const act = ev.acts.find((a) => a.late) || ev.acts.find((a) => w.clients[a.id].mem.ledSince === w.t) || null;
  if (act && act.late) {
    const r = act.row;
    if (!r.accepted)
      return `${act.id} wakes and sends the action it prepared before the pause, stamped epoch ${r.token} — its lease check passed back then. Downstream systems reject epoch n once they have seen n + 1: the old leader's action bounces (${r.token} < ${r.highest}). A brief overlap of two self-believed leaders is tolerable.`;
    if (r.stale) return `${act.id} wakes and acts with epoch ${r.token} — and the orders DB, checking nothing, takes it: two leaders acted (split brain).`;
    return `${act.id} wakes within its session timeout: still leader, its action with epoch ${r.token} is legitimate.`;
  }
  if (ev.rejoined) {
    const o = ev.rejoined.out;
    return `${ev.rejoined.id} learns it is no longer leader and rejoins the election with a new session: it watches from the wait queue (position ${o?.position}).`;
  }
  if (ev.paused)
    return `N1 checks its lease by its own clock (safe until t=${ev.paused.lease?.until}), prepares an action stamped epoch ${w.clients.N1.token} — and freezes in a ${P.pause}-second pause before sending it. Its heartbeats stop.`;
  if (ev.stepped) return `${ev.stepped.id}'s own clock says its lease is ${ev.stepped.lease.state}: it steps down and stops acting — a gap with no leader rather than two leaders.`;
  if (ev.expired.length) {
    const g = ev.granted[0];
    return `Leader death means session expiry, then the next waiter is promoted with epoch + 1` +
      (g ? `: ${w.sessions[`svc:${g.session}`]} leads with epoch ${g.token}.` : '.') +
      ` N1 is still paused and still believes it leads.`;
  }
  if (act) return `${act.id} acts downstream with epoch ${act.row.token}. ${P.fencing ? `The orders DB records epoch ${act.row.token} as the highest it has seen.` : 'The orders DB takes it without looking.'}`;
  const n1 = w.clients.N1;
  if (n1.status === 'paused' && n1.pausedBy === 'gc') {
    const d = deadlineOf(w, 'svc', n1);
    return d != null
      ? `N1 is frozen; N2 and N3 heartbeat and watch. The service will expire N1's session at t=${d} unless a heartbeat arrives.`
      : `N2 leads and acts with its epoch. N1 is still frozen, an old leader that does not know it.`;
  }
  return null;
}

export const election = {
  key: 'election',
  title: '3 · Leader election',
  short: 'Election',
  lede: 'Election is the acquire path with a longer lease. The fencing token doubles as the epoch number.',
  fencingSwitch: true,
  lock: ELECTION,
  tryThis: [
    'Turn the epoch check off: the old leader\'s action lands (split brain).',
    "Make N1's pause 6 s: shorter than the timeout, it stays leader.",
    'Kill N2 after it is promoted: N3 becomes leader with the next epoch.',
  ],
  params: {
    fencing: { label: 'downstream checks the epoch', type: 'switch', value: true },
    ttl: { label: 'session timeout', type: 'range', min: 6, max: 20, step: 1, value: 10, unit: 's' },
    pause: { label: "old leader's pause", type: 'range', min: 2, max: 30, step: 1, value: 14, unit: 's' },
  },
  lanes: [...IDS.map((id) => ({ id, label: id })), { id: 'svc', label: 'Lock service' }, { id: 'db', label: 'Orders DB' }],
  clients: IDS,
  step,
  outcome(w) {
    const l = w.nodes.svc.core.leader(ELECTION);
    const rows = w.stores.db.rows;
    return {
      leader: l ? w.sessions[`svc:${l.session}`] : null,
      epoch: l ? l.epoch : null,
      bounced: rows.filter((r) => !r.accepted).map((r) => ({ by: r.byId, token: r.token, highest: r.highest })),
      corrupted: w.stores.db.corrupted,
      highest: w.highest('db'),
    };
  },
  layout: (w, narrow) =>
    narrow
      ? {
          width: 400,
          height: 550,
          nodes: [
            { id: 'N1', kind: 'client', x: 70, y: 50 },
            { id: 'N2', kind: 'client', x: 200, y: 50 },
            { id: 'N3', kind: 'client', x: 330, y: 50 },
            { id: 'svc', kind: 'service', x: 200, y: 235, lock: ELECTION },
            { id: 'db', kind: 'store', x: 200, y: 445 },
          ],
        }
      : {
    height: 350,
    nodes: [
      { id: 'N1', kind: 'client', x: 110, y: 52 },
      { id: 'N2', kind: 'client', x: 110, y: 165 },
      { id: 'N3', kind: 'client', x: 110, y: 278 },
      { id: 'svc', kind: 'service', x: 400, y: 170, lock: ELECTION },
      { id: 'db', kind: 'store', x: 690, y: 170 },
    ],
  },
};
