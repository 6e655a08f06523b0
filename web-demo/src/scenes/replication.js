// Scene 4: a comparison of two replication designs, built from several real core instances that
// replicate an input log. Left: a single Redis-style primary that answers at once and ships
// its log to a replica asynchronously (lagging). Right: a consensus group of three where an
// entry is acknowledged only once a majority has applied it. Each core decides its own grants;
// this file only moves log entries between cores and decides when a client hears the answer.

import { nextTime, milestone, readInboxes } from './common.js';

const LOCK = 'jobs/reindex';
const RAFT_LAG = { N2: 1, N3: 3 }; // N3 sits behind a slow link

function init(w) {
  w.custom = {
    redis: { group: 'redis', log: [], applied: { P: 0, R: 0 }, outs: { P: [], R: [] }, head: 'P', acked: 0 },
    raft: { group: 'raft', log: [], applied: { N1: 0, N2: 0, N3: 0 }, outs: { N1: [], N2: [], N3: [] }, head: 'N1', acked: 0 },
  };
}

/** The scene's own ops: move log entries and deliver answers. Called by World.apply. */
function apply(w, r) {
  if (r.kind === 'init') return init(w);
  const L = w.custom[r.lane];
  switch (r.kind) {
    case 'append': {
      L.log.push({ input: r.input, by: r.by, t: w.t });
      w.addLog(w.nodes[L.head].label, `log entry #${L.log.length} appended: ${r.input.type}${r.input.lock ? ` ${JSON.stringify(r.input.lock)}` : ''} from ${w.clients[r.by].name}`, 'in');
      w.flashes.push({ from: r.by, to: L.head, label: r.input.type === 'openSession' ? 'open' : r.input.type, kind: 'msg' });
      return;
    }
    case 'apply': {
      const i = L.applied[r.node];
      const e = L.log[i];
      const outs = w.applyCore({ op: 'core', node: r.node, by: e.by, input: e.input, deliver: false, quiet: true, via: `applies log entry #${i + 1} (from ${w.clients[e.by].name})` });
      L.outs[r.node][i] = outs;
      L.applied[r.node] = i + 1;
      if (r.node !== L.head) w.flashes.push({ from: L.head, to: r.node, label: `#${i + 1}`, kind: 'repl' });
      return;
    }
    case 'ack': {
      const e = L.log[r.index];
      for (const o of L.outs[r.node][r.index] || []) w.route(L.group, o, w.clients[e.by]);
      L.acked = Math.max(L.acked, r.index + 1);
      w.addLog(w.nodes[r.node].label, `acknowledged entry #${r.index + 1} to ${w.clients[e.by].name}${r.why ? ` (${r.why})` : ''}`, 'note');
      return;
    }
    case 'promote': {
      L.head = r.node;
      if (r.truncate) L.log = L.log.slice(0, L.applied[r.node]);
      w.nodes[r.node].label = r.label;
      w.addLog(r.node, r.text, 'warn');
      return;
    }
    default:
      throw new Error(`unknown scene op ${r.kind}`);
  }
}

function setup(w, emit) {
  emit({ op: 'custom', kind: 'init' });
  emit({ op: 'node', create: true, node: 'P', label: 'Primary', group: 'redis' });
  emit({ op: 'node', create: true, node: 'R', label: 'Replica', group: 'redis' });
  for (const n of ['N1', 'N2', 'N3']) emit({ op: 'node', create: true, node: n, label: n === 'N1' ? 'N1 leader' : n, group: 'raft' });
  for (const [id, name, group] of [['A1', 'A', 'redis'], ['B1', 'B', 'redis'], ['A2', 'A', 'raft'], ['B2', 'B', 'raft']]) emit({ op: 'client', create: true, id, name, group });
  for (const id of ['A1', 'B1']) redisRequest(w, emit, id, { type: 'openSession', ttl: 100000 });
  for (const id of ['A2', 'B2']) raftRequest(w, emit, id, { type: 'openSession', ttl: 100000 });
  milestone(w, emit, 'two designs', ['P', 'N1']);
  emit({
    op: 'caption',
    text: `Two ways to replicate the same lock service. Left: single Redis — the primary answers at once and ships its log to the replica asynchronously. ` +
      `Right: consensus — three core replicas, and an entry is acknowledged only once a majority has applied it. A and B open sessions on both.`,
  });
}

/** Redis-style: the primary applies and answers immediately; the replica catches up later. */
function redisRequest(w, emit, id, input) {
  const L = w.custom.redis;
  // the entry carries the head's time: every replica applies it at that time, whenever it does
  emit({ op: 'custom', kind: 'append', lane: 'redis', by: id, input: { ...input, now: Math.max(w.t, 0) } });
  emit({ op: 'custom', kind: 'apply', lane: 'redis', node: L.head });
  emit({ op: 'custom', kind: 'ack', lane: 'redis', node: L.head, index: L.log.length - 1, why: 'at once, before any replica has it' });
}

/** Consensus: the leader appends and applies; the answer waits for a majority. */
function raftRequest(w, emit, id, input) {
  const L = w.custom.raft;
  emit({ op: 'custom', kind: 'append', lane: 'raft', by: id, input: { ...input, now: Math.max(w.t, 0) } });
  emit({ op: 'custom', kind: 'apply', lane: 'raft', node: L.head });
}

function withSession(w, id, input) {
  return { ...input, session: w.clients[id].session };
}

function step(w, emit, P) {
  const t = nextTime(w, emit);
  if (t === 0) return setup(w, emit);
  const Rd = w.custom.redis;
  const Rf = w.custom.raft;
  const ev = [];
  // A client you resumed first reads what reached it while it was paused (an acknowledged grant).
  readInboxes(w, emit, ['A1', 'B1', 'A2', 'B2']);
  // Replication: followers apply what the head shipped, each with its own lag.
  if (w.nodes[Rd.head].alive) {
    for (const n of ['P', 'R']) {
      if (n === Rd.head || !w.nodes[n].alive) continue;
      while (Rd.applied[n] < Rd.log.length && Rd.log[Rd.applied[n]].t <= t - P.lag) emit({ op: 'custom', kind: 'apply', lane: 'redis', node: n });
    }
  }
  if (w.nodes[Rf.head].alive) {
    for (const n of ['N1', 'N2', 'N3']) {
      if (n === Rf.head || !w.nodes[n].alive) continue;
      const lag = Rf.head === 'N1' ? RAFT_LAG[n] : 1;
      while (Rf.applied[n] < Rf.log.length && Rf.log[Rf.applied[n]].t <= t - lag) emit({ op: 'custom', kind: 'apply', lane: 'raft', node: n });
    }
    // Commit: acknowledge each entry a majority (2 of 3) has applied.
    for (let i = Rf.acked; i < Rf.log.length; i += 1) {
      const have = Object.values(Rf.applied).filter((a) => a > i).length;
      if (have < 2) break;
      emit({ op: 'custom', kind: 'ack', lane: 'raft', node: Rf.head, index: i, why: `a majority (${have} of 3) applied it` });
      ev.push('commit');
    }
  }
  const run = (id) => w.clients[id].status === 'running';
  const acquire = { type: 'acquire', lock: LOCK, mode: 'exclusive', wait: 'forever' };
  let text = null;
  if (t === 1) text = `The replicas begin applying the session entries, each at its own lag. On the right, once two of three have applied them, the leader acknowledges the sessions to A and B.`;
  const who = (id) => w.clients[id];
  const down = (id) => `${who(id).name} is ${who(id).status === 'dead' ? 'dead' : 'paused'}`;
  if (t === 2) {
    const left = run('A1') ? (redisRequest(w, emit, 'A1', withSession(w, 'A1', acquire)), true) : false;
    const right = run('A2') ? (raftRequest(w, emit, 'A2', withSession(w, 'A2', acquire)), true) : false;
    const g = w.clients.A1.token;
    text = `${left ? `Left: A asks for the lock; the primary grants it and acknowledges at once (token ${g ?? '—'}); the entry has not reached the replica yet.` : `Left: ${down('A1')}, so it asks for nothing.`} ` +
      `${right ? 'Right: A asks too; the leader has applied the entry, but A hears nothing until a majority has.' : `Right: ${down('A2')}, so it asks for nothing.`}`;
  }
  if (t === 3) {
    emit({ op: 'node', node: 'P', set: { alive: false } });
    const a2 = w.clients.A2;
    text = `Left: the primary dies ${Rd.applied.R < Rd.log.length ? `before the replica has everything (it has applied ${Rd.applied.R} of ${Rd.log.length} entries)` : 'after the replica applied everything it had'}. ` +
      (a2.holding ? `Right: N2 applied the entry, a majority has it, and only now is A told: granted, token ${a2.token}.` : a2.waiting ? `Right: a majority has A's request: A is queued.` : 'Right: nothing new for A.');
  }
  if (t === 4) {
    emit({ op: 'custom', kind: 'promote', lane: 'redis', node: 'R', truncate: true, label: 'Replica (promoted)', text: `failover: the replica is promoted with the ${Rd.applied.R} entries it had applied` });
    emit({ op: 'node', node: 'N1', set: { alive: false } });
    text = `Left: failover — the replica is promoted, with only the ${Rd.applied.R} entries it had applied. Right: the leader N1 dies too.`;
  }
  if (t === 5) {
    const best = ['N2', 'N3'].filter((n) => w.nodes[n].alive).sort((a, b) => Rf.applied[b] - Rf.applied[a])[0];
    emit({ op: 'custom', kind: 'promote', lane: 'raft', node: best, label: `${best} leader`, text: `election: ${best} becomes leader (it has every acknowledged entry)` });
    text = `Right: ${best} is elected — a node with every acknowledged entry, so ${w.clients.A2.holding ? 'the grant to A survives' : 'every acknowledged answer survives'} the failover. N3 catches up from it.`;
  }
  if (t === 6) {
    const b1 = run('B1') ? (redisRequest(w, emit, 'B1', withSession(w, 'B1', acquire)), w.clients.B1) : null;
    const b2 = run('B2') ? (raftRequest(w, emit, 'B2', withSession(w, 'B2', acquire)), true) : false;
    const a1 = w.clients.A1;
    text = b1 && b1.holding
      ? `Left: B acquires the "same" lock on the promoted replica and is granted (token ${b1.token}).` +
        (a1.holding && a1.status !== 'dead' ? ` A was told "granted" too: two holders, each with a legitimate grant — and even the token counter was lost with the primary.` : ' A holds nothing here, so this time one holder.')
      : `${b1 ? (b1.waiting ? 'Left: B asks and is queued.' : `Left: B asks the promoted replica and is refused (unknown_session): the replica never applied B's session, so the failover lost the sessions too.`) : `Left: ${down('B1')}, so it asks for nothing.`} ${b2 ? 'Right: B asks too.' : `Right: ${down('B2')}.`}`;
  }
  if (t === 7) {
    const b2 = w.clients.B2;
    text = b2.waiting
      ? `Right: the new leader queued B (position ${b2.waiting}) and a majority applied it: A is still the single holder. This refuses rather than double-grants, the right bias for correctness.`
      : b2.holding
        ? `Right: a majority applied B's request and B is granted (token ${b2.token}): A does not hold the lock here.`
        : null;
  }
  const stops = { 2: ['A asks', ['P', 'N1']], 3: ['primary dies', ['P', 'R', 'A2']], 4: ['failover', ['R', 'N1']], 5: ['new leader', ['N2', 'N3']], 6: ['B asks', ['R', 'B1']], 7: ['B queued', ['B2']] };
  if (stops[t] && t < 8 && text) milestone(w, emit, stops[t][0], stops[t][1]);
  if (text && t < 8) emit({ op: 'caption', text });
  if (t >= 8) {
    milestone(w, emit, 'outcome', ['R', 'N2'], true);
    const o = outcome(w);
    emit({
      op: 'caption',
      text: `Outcome — single Redis: ${holders(o.redis)}. Consensus: ${holders(o.raft)}${o.raft.queued.length ? `, ${o.raft.queued.join(', ')} waiting` : ''}. ` +
        (o.redis.holders.length > 1
          ? 'Asynchronous replication lost the lock in the failover; the replicated state machine did not. '
          : o.redis.forgotten.length
            ? `Asynchronous replication lost ${o.redis.forgotten.map((h) => `${h.name}'s grant (token ${h.token})`).join(', ')} in the failover: the promoted replica lists no such holder, so the next client to ask is granted the lock while ${o.redis.forgotten.map((h) => h.name).join(', ')} still believes it holds it; the replicated state machine lost nothing. `
            : 'This time the failover lost nothing that mattered — asynchronous replication is safe only by luck. ') +
        'Neither stops a paused holder: that still takes a fencing token.',
    });
    emit({ op: 'done' });
  }
}

function holders(lane) {
  const n = lane.holders.length;
  return `${n} holder${n === 1 ? '' : 's'}${n ? ` (${lane.holders.map((h) => `${h.name} with ${h.token}`).join(', ')})` : ''}`;
}

/**
 * Each side's ending: the clients told "granted" (holders), the waiting ones, and — what the
 * core of the side's head says — the told holders whose grant it does not list (forgotten).
 * `head` names the node that serves the side now and `serving` says whether it is up (while
 * no node is up, nothing is listed: a grant is forgotten only by a node that answers).
 */
function outcome(w) {
  const lane = (ids, L) => {
    const head = w.nodes[L.head];
    const listed = head?.alive ? head.core.holders(LOCK).map((h) => w.sessions[`${L.group}:${h.session}`]) : [];
    const told = ids.filter((id) => w.clients[id].holding);
    const who = (id) => ({ name: w.clients[id].name, token: w.clients[id].token });
    return {
      holders: told.map(who),
      queued: ids.filter((id) => w.clients[id].waiting).map((id) => w.clients[id].name),
      forgotten: told.filter((id) => !listed.includes(id)).map(who),
      head: L.head === 'R' ? 'the promoted replica' : L.head === 'P' ? 'the primary' : `the leader ${L.head}`,
      serving: !!head?.alive,
    };
  };
  return { redis: lane(['A1', 'B1'], w.custom.redis), raft: lane(['A2', 'B2'], w.custom.raft) };
}

export const replication = {
  key: 'replication',
  title: '4 · Async replica vs consensus',
  short: 'Replication',
  lede: 'The primary can acknowledge the lock and die before the replica sees it. A consensus group answers only what a majority has.',
  fencingSwitch: false,
  tryThis: [
    'Set the replica lag to 1: it happens to keep up — safe by luck, not design.',
    'Watch the acknowledgement on the right wait for the second replica.',
  ],
  params: {
    lag: { label: 'replica lag (async side)', type: 'range', min: 1, max: 4, step: 1, value: 2, unit: ' steps' },
  },
  lanes: null,
  clients: ['A1', 'B1', 'A2', 'B2'],
  step,
  apply,
  outcome,
  lock: LOCK,
  layout: (w, narrow) =>
    narrow
      ? {
          width: 400,
          height: 600,
          nodes: [
            { id: 'P', kind: 'replica', x: 110, y: 100, lane: 'redis', title: 'Primary' },
            { id: 'R', kind: 'replica', x: 290, y: 100, lane: 'redis', title: 'Replica' },
            { id: 'A1', kind: 'client', x: 110, y: 240 },
            { id: 'B1', kind: 'client', x: 290, y: 240 },
            { id: 'N1', kind: 'replica', x: 75, y: 405, lane: 'raft', title: 'N1' },
            { id: 'N2', kind: 'replica', x: 200, y: 405, lane: 'raft', title: 'N2' },
            { id: 'N3', kind: 'replica', x: 325, y: 405, lane: 'raft', title: 'N3' },
            { id: 'A2', kind: 'client', x: 140, y: 545 },
            { id: 'B2', kind: 'client', x: 260, y: 545 },
          ],
          panels: [
            { x: 6, y: 6, w: 388, h: 288, title: 'Single Redis, asynchronous replica' },
            { x: 6, y: 310, w: 388, h: 288, title: 'Consensus: 3 core replicas, majority' },
          ],
        }
      : {
    nodes: [
      // Replica boxes are 110 wide (render.js drawReplica): the right panel holds three with
      // 21-24 between them and its edges, the left one two, so no box meets a border.
      { id: 'P', kind: 'replica', x: 97, y: 100, lane: 'redis', title: 'Primary' },
      { id: 'R', kind: 'replica', x: 267, y: 100, lane: 'redis', title: 'Replica' },
      { id: 'A1', kind: 'client', x: 97, y: 240 },
      { id: 'B1', kind: 'client', x: 267, y: 240 },
      { id: 'N1', kind: 'replica', x: 448, y: 100, lane: 'raft', title: 'N1' },
      { id: 'N2', kind: 'replica', x: 582, y: 100, lane: 'raft', title: 'N2' },
      { id: 'N3', kind: 'replica', x: 716, y: 100, lane: 'raft', title: 'N3' },
      { id: 'A2', kind: 'client', x: 515, y: 240 },
      { id: 'B2', kind: 'client', x: 649, y: 240 },
    ],
    panels: [
      { x: 8, y: 6, w: 348, h: 288, title: 'Single Redis, asynchronous replica' },
      { x: 372, y: 6, w: 420, h: 288, title: 'Consensus: 3 core replicas, majority' },
    ],
  },
};
