// Scene 6: Redlock, after Martin Kleppmann's "How to do distributed locking" and the Redis
// documentation's description of the algorithm. Left: five independent lock cores N1–N5 (five
// real wasm LockService instances, no replication between them), each with its own clock. A
// client acquires on a majority: it opens a session whose ttl is the lock's validity on each
// node and try-locks there with a random value of its own; it holds the lock if 3 of 5 said
// "granted" and the validity has not run out by its own clock. Every "granted" and "busy" and
// every expiry is a core's. Right: the same two clients against one consensus lock service
// (sessions, keep-alives) whose grants carry a fencing token.
//
// Two things go wrong on the left, as in the critique: (a) N3's clock jumps forward, A's key
// there expires early and B collects N3–N5 while A still believes; (b) A pauses after
// acquiring, its validity runs out, B acquires, A wakes and writes. A storage that "checks
// tokens" cannot help Redlock: its value is random, so the storage's order of values is a coin
// toss. The consensus side's token grows with every grant, and the same check refuses the
// stale write.

import { nextTime, milestone, rng, deadlineOf } from './common.js';
import { storeVerdict } from './facts.js';
import { isMajority } from '../world.js';

const LOCK = 'orders/batch';
const NODES = ['N1', 'N2', 'N3', 'N4', 'N5'];
const TTL = 10; // the lock's validity, in each node's seconds (Redlock's PX)
const DRIFT = 1; // the client's allowance for clock drift (Redlock subtracts it)
const CTTL = 10; // the consensus side's session timeout
const HB = 3; // its keep-alive interval

/** The node's own clock: the scene's time plus what its clock has jumped. */
export const nodeNow = (w, node) => Math.max(w.t, 0) + (w.custom.skew?.[node] ?? 0);

/** A client's random value for its n-th attempt (seeded, so a replay is exact). */
function valueOf(seed, id, attempt) {
  const r = rng(seed * 7919 + (id === 'A' ? 0 : 1000) + attempt * 31);
  r();
  return 1000 + Math.floor(r() * 9000);
}

/** The Redlock nodes whose core lists a grant of LOCK to one of client `id`'s sessions. */
export function heldOn(w, id) {
  return NODES.filter((n) => {
    const node = w.nodes[n];
    return node && node.alive && node.core.holders(LOCK).some((h) => w.sessions[`${n}:${h.session}`] === id);
  });
}

function apply(w, r) {
  switch (r.kind) {
    case 'skew':
      w.custom.skew ??= {};
      w.custom.skew[r.node] = (w.custom.skew[r.node] ?? 0) + r.by;
      w.addLog(w.nodes[r.node].label, `${w.nodes[r.node].label}'s clock jumps ${r.by} s forward (now reads t=${nodeNow(w, r.node)})`, 'bad');
      w.marks.push({ t: w.t, lane: r.lane ?? 'store', kind: 'crash', label: `${r.node} clock +${r.by}` });
      return;
    case 'own':
      // which client a node's session belongs to (the client learnt it from the node's reply)
      w.sessions[`${r.node}:${r.session}`] = r.id;
      return;
    case 'span':
      if (r.open) w.spans.push({ lane: r.lane, from: w.t, to: null, kind: r.span, label: r.label });
      else w.closeSpan(r.lane, r.span);
      return;
    case 'fact':
      w.custom.facts ??= { grants: [], expiries: [], locks: [] };
      w.custom.facts[r.list].push({ t: w.t, ...r.fact });
      return;
    default:
      throw new Error(`unknown scene op ${r.kind}`);
  }
}

const facts = (w) => w.custom.facts ?? { grants: [], expiries: [], locks: [] };

function setup(w, emit, P) {
  for (const n of NODES) emit({ op: 'node', create: true, node: n, label: n, group: n });
  emit({ op: 'node', create: true, node: 'svc', label: 'Consensus lock service', group: 'svc' });
  emit({ op: 'store', create: true, store: 'store', label: 'Storage (Redlock)', resource: 'orders', lock: LOCK, quorum: NODES, fencing: P.fencing });
  emit({ op: 'store', create: true, store: 'store2', label: 'Storage (consensus)', resource: 'orders', lock: LOCK, node: 'svc', fencing: P.fencing });
  const jump = P.scenario === 'jump';
  // Redlock clients: A acquires at t=1, writes part 1, then part 2 (checking its validity by
  // its own clock first); B tries at t=4 and, while it fails, every 4 s.
  const jobsA = [
    { at: 1, do: 'lock' },
    { at: 2, do: 'write', part: 'part 1' },
    { at: jump ? 7 : 3, do: 'write', part: 'part 2', check: true, pause: !jump },
    { rel: 1, do: 'unlock' },
  ];
  const jobsB = [
    { at: 4, do: 'lock', retry: 4 },
    { rel: 1, do: 'write', part: 'part 1' },
    { rel: 2, do: 'write', part: 'part 2', check: true },
    { rel: 3, do: 'unlock' },
  ];
  emit({ op: 'client', create: true, id: 'A', name: 'A', group: 'redlock', mem: { jobs: jobsA, next: 0, attempts: 0 } });
  emit({ op: 'client', create: true, id: 'B', name: 'B', group: 'redlock', mem: { jobs: jobsB, next: 0, attempts: 0 } });
  // Consensus clients: CA holds from t=0 (its session kept alive every 3 s), CB waits in the queue.
  const keeper = { interval: HB, margin: 2 };
  // (a): A sends part 2 right after part 1; the network holds it up and it arrives at t=5
  const jobsCA = jump
    ? [{ at: 2, do: 'write', part: 'part 1', then: { part: 'part 2', arrive: 5 } }, { at: 6, do: 'release' }]
    : [{ at: 2, do: 'write', part: 'part 1' }, { at: 3, do: 'write', part: 'part 2', pause: true }, { rel: 1, do: 'release' }];
  const jobsCB = [
    { rel: 1, do: 'write', part: 'part 1' },
    { rel: 2, do: 'write', part: 'part 2' },
    { rel: 3, do: 'release' },
  ];
  emit({ op: 'client', create: true, id: 'CA', name: 'A', group: 'svc', keeper, mem: { jobs: jobsCA, next: 0 } });
  emit({ op: 'client', create: true, id: 'CB', name: 'B', group: 'svc', keeper, mem: { jobs: jobsCB, next: 0 } });
  emit({ op: 'core', node: 'svc', by: 'CA', input: { type: 'openSession', now: 0, ttl: CTTL } });
  const ga = emit({ op: 'core', node: 'svc', by: 'CA', input: { type: 'acquire', now: 0, session: w.clients.CA.session, lock: LOCK, wait: 'forever' } });
  // (b): B is already waiting; (a): B arrives on the right when it does on the left
  if (!jump) consensusArrive(w, emit, 'CB');
  const tok = ga.find((o) => o.type === 'granted')?.token;
  emit({ op: 'client', id: 'CA', mem: { base: 0 } });
  emit({ op: 'custom', kind: 'fact', list: 'grants', fact: { side: 'consensus', id: 'CA', token: tok } });
  milestone(w, emit, 'five nodes', ['N1', 'N2', 'N3', 'N4', 'N5']);
  emit({
    op: 'caption',
    text: `Left, Redlock: five independent lock nodes N1–N5, each a real core with its own clock, no replication between them. A client holds the lock if a majority (3 of 5) grant it, each for a validity of ${TTL} s by that node's clock. ` +
      `Right, for contrast: one consensus lock service whose grants carry a fencing token; there A already holds ${LOCK} with token ${tok}` +
      (jump ? '; B asks for it when it does on the left.' : ' and B is in its wait queue.'),
  });
}

/** Client `id` opens a session on the consensus service and asks for the lock (waiting). */
function consensusArrive(w, emit, id) {
  emit({ op: 'core', node: 'svc', by: id, input: { type: 'openSession', now: nodeNow(w, 'svc'), ttl: CTTL } });
  const outs = emit({ op: 'core', node: 'svc', by: id, input: { type: 'acquire', now: nodeNow(w, 'svc'), session: w.clients[id].session, lock: LOCK, wait: 'forever' } });
  const g = outs.find((o) => o.type === 'granted');
  if (g) {
    emit({ op: 'client', id, mem: { base: w.t } });
    emit({ op: 'custom', kind: 'fact', list: 'grants', fact: { side: 'consensus', id, token: g.token } });
  }
  return g ? { id, token: g.token } : null;
}

/** One Redlock acquisition attempt by client `id` now: returns {count, nodes, busy, lost}. */
function redlockAcquire(w, emit, id, P) {
  const c = w.clients[id];
  const attempt = c.mem.attempts + 1;
  const value = valueOf(P.seed, id, attempt);
  // (a): at A's attempt N4 and N5 are cut off from A by the network; its requests are lost
  const reachable = P.scenario === 'jump' && id === 'A' ? ['N1', 'N2', 'N3'] : NODES;
  const got = [];
  const busy = [];
  for (const n of NODES) {
    if (!reachable.includes(n)) {
      emit({ op: 'flash', from: id, to: n, label: 'lost', kind: 'bad' });
      emit({ op: 'note', src: c.name, text: `${c.name} → ${n}: no answer (the network between them is down)`, cls: 'warn' });
      continue;
    }
    const now = nodeNow(w, n);
    const opened = emit({ op: 'core', node: n, by: id, deliver: false, quiet: true, input: { type: 'openSession', now, ttl: TTL } });
    const session = opened.find((o) => o.type === 'sessionOpened')?.session;
    if (session == null) continue;
    emit({ op: 'custom', kind: 'own', node: n, session, id });
    const outs = emit({ op: 'core', node: n, by: id, deliver: false, quiet: true, input: { type: 'acquire', now, session, lock: LOCK, wait: 'none' } });
    if (outs.some((o) => o.type === 'granted')) {
      got.push({ node: n, session });
      emit({ op: 'flash', from: n, to: id, label: 'ok', kind: 'good' });
    } else {
      busy.push(n);
      emit({ op: 'flash', from: n, to: id, label: 'busy', kind: 'warn' });
      // a node that said busy keeps no session of ours
      emit({ op: 'core', node: n, by: id, deliver: false, quiet: true, input: { type: 'closeSession', now, session } });
    }
  }
  const ok = isMajority(got.length, NODES.length);
  if (ok) {
    const validUntil = w.t + TTL - DRIFT;
    emit({ op: 'client', id, set: { holding: true, token: value, lost: false }, mem: { attempts: attempt, held: got, validUntil, base: w.t, value } });
    emit({ op: 'custom', kind: 'span', open: true, lane: id, span: 'hold', label: `holds ${value}` });
    emit({ op: 'note', src: c.name, text: `${c.name} holds ${JSON.stringify(LOCK)} on ${got.length} of 5 (${got.map((g) => g.node).join(', ')}) with random value ${value}; valid until t=${validUntil} by its own clock`, cls: 'good' });
  } else {
    // Redlock: a failed attempt unlocks every node it did get
    for (const g of got) emit({ op: 'core', node: g.node, by: id, deliver: false, quiet: true, input: { type: 'closeSession', now: nodeNow(w, g.node), session: g.session } });
    emit({ op: 'client', id, mem: { attempts: attempt, held: [] } });
    emit({ op: 'note', src: c.name, text: `${c.name} got ${got.length} of 5: no majority, it unlocks what it got and retries later`, cls: 'warn' });
  }
  emit({ op: 'custom', kind: 'fact', list: 'locks', fact: { id, ok, count: got.length, nodes: got.map((g) => g.node), busy, value } });
  return { ok, count: got.length, nodes: got.map((g) => g.node), busy, value };
}

function redlockUnlock(w, emit, id) {
  const c = w.clients[id];
  for (const g of c.mem.held ?? []) {
    // unlock only where the node still has our session (Redlock deletes only its own value)
    if (w.nodes[g.node].core.session(g.session)) emit({ op: 'core', node: g.node, by: id, deliver: false, quiet: true, input: { type: 'closeSession', now: nodeNow(w, g.node), session: g.session } });
  }
  emit({ op: 'client', id, set: { holding: false, token: null }, mem: { held: [] } });
  emit({ op: 'custom', kind: 'span', open: false, lane: id, span: 'hold' });
}

const dueOf = (c, job) => (job.at != null ? (c.mem.retryAt ?? job.at) : c.mem.base != null ? c.mem.base + job.rel : Infinity);

/** Runs at most one due job of client `id`; returns what it did. */
function runJobs(w, emit, id, P, side) {
  const c = w.clients[id];
  const m = c.mem;
  const job = m.jobs[m.next];
  if (c.status !== 'running' || !job || m.finished) return null;
  if (c.lost) {
    emit({ op: 'client', id, mem: { finished: true } });
    return { kind: 'gave-up', id };
  }
  if (w.t < dueOf(c, job)) return null;
  const advance = () => emit({ op: 'client', id, mem: { next: m.next + 1, finished: m.next + 1 >= m.jobs.length, retryAt: null } });
  const store = side === 'redlock' ? 'store' : 'store2';
  switch (job.do) {
    case 'lock': {
      const r = redlockAcquire(w, emit, id, P);
      if (r.ok) advance();
      else emit({ op: 'client', id, mem: { retryAt: w.t + job.retry } });
      return { kind: 'lock', id, ...r };
    }
    case 'write': {
      if (side === 'redlock' && job.check && m.prepared !== m.next && w.t >= m.validUntil) {
        // an honest Redlock client checks its validity by its own clock before acting
        emit({ op: 'client', id, mem: { finished: true } });
        emit({ op: 'note', src: c.name, text: `${c.name}'s validity ran out at t=${m.validUntil} by its own clock: it stops`, cls: 'warn' });
        return { kind: 'stepped-down', id };
      }
      if (job.pause && m.prepared !== m.next) {
        // the check passed; a stop-the-world pause strikes between the check and the write
        emit({ op: 'client', id, set: { status: 'paused', pausedBy: 'gc' }, mem: { prepared: m.next, resumeAt: w.t + P.pause } });
        return { kind: 'paused', id, left: side === 'redlock' ? m.validUntil - w.t : null };
      }
      const token = c.token;
      if (token == null) return null;
      emit({ op: 'write', store, by: id, token, data: `${job.part} by ${c.name}`, part: job.part, what: side === 'redlock' ? 'value' : 'token' });
      const row = w.stores[store].rows.at(-1);
      if (job.then) {
        // the next write leaves now too, and the network holds it up until `arrive`
        emit({ op: 'client', id, mem: { inflight: { token, part: job.then.part, arrive: job.then.arrive, sent: w.t } } });
        emit({ op: 'note', src: c.name, text: `${c.name} sends ${job.then.part} with token ${token}; the network delays it (it arrives at t=${job.then.arrive})`, cls: 'warn' });
      }
      advance();
      return { kind: 'write', id, row };
    }
    case 'unlock':
      redlockUnlock(w, emit, id);
      advance();
      return { kind: 'unlock', id };
    case 'release': {
      // Stamped with the service's clock, as every consensus-side input is: after a jump
      // the scene's time is behind it, and the core would refuse the input as time gone back.
      if (c.session && c.holding) emit({ op: 'core', node: 'svc', by: id, input: { type: 'release', now: nodeNow(w, 'svc'), session: c.session, lock: LOCK } });
      if (c.session && !c.lost) emit({ op: 'core', node: 'svc', by: id, input: { type: 'closeSession', now: nodeNow(w, 'svc'), session: c.session } });
      advance();
      return { kind: 'release', id };
    }
    default:
      return null;
  }
}

function step(w, emit, P) {
  const t = nextTime(w, emit);
  if (t === 0) return setup(w, emit, P);
  const ev = { did: [], expired: [], granted: [], jumped: false, woke: [] };
  if (P.scenario === 'jump' && t === 3 && P.jump > 0) {
    // A's deadline by the consensus service's clock before the jump, for the caption
    ev.deadlineCA = deadlineOf(w, 'svc', w.clients.CA);
    // the jump: N3's clock (say, an NTP correction or an operator) — and, on the right, the
    // consensus service's leader clock, by the same amount
    emit({ op: 'custom', kind: 'skew', node: 'N3', by: P.jump });
    emit({ op: 'custom', kind: 'skew', node: 'svc', by: P.jump, lane: 'store2' });
    ev.jumped = true;
  }
  // every live node advances to its own clock
  for (const n of [...NODES, 'svc']) {
    const outs = emit({ op: 'core', node: n, input: { type: 'tick', now: nodeNow(w, n) }, quiet: true, deliver: n === 'svc' });
    for (const o of outs) {
      const id = w.sessions[`${w.nodes[n].group}:${o.session}`];
      if (o.type === 'sessionExpired' && id) ev.expired.push({ node: n, id });
      if (o.type === 'granted' && n === 'svc' && id) {
        ev.granted.push({ id, token: o.token });
        emit({ op: 'client', id, mem: { base: t } });
        emit({ op: 'custom', kind: 'fact', list: 'grants', fact: { side: 'consensus', id, token: o.token } });
      }
      if (o.type === 'sessionExpired' && n === 'svc' && id) emit({ op: 'custom', kind: 'fact', list: 'expiries', fact: { side: 'consensus', id } });
    }
  }
  if (P.scenario === 'jump' && t === 3 && w.clients.CB.status === 'running') {
    const g = consensusArrive(w, emit, 'CB');
    if (g) ev.granted.push(g);
  }
  for (const id of ['A', 'B', 'CA', 'CB']) {
    const c = w.clients[id];
    if (c.status === 'paused' && c.pausedBy === 'gc' && t === c.mem.resumeAt) {
      emit({ op: 'client', id, set: { status: 'running', pausedBy: null } });
      ev.woke.push(id);
    }
  }
  for (const id of ['B', 'A']) {
    const d = runJobs(w, emit, id, P, 'redlock');
    if (d) ev.did.push(d);
  }
  for (const id of ['CB', 'CA']) {
    // a waiter granted when the holder released: its job's clock starts now
    if (w.clients[id].holding && w.clients[id].mem.base == null) emit({ op: 'client', id, mem: { base: t } });
    const d = runJobs(w, emit, id, P, 'consensus');
    if (d) ev.did.push(d);
    const c = w.clients[id];
    if (c.inbox.length && c.status === 'running') emit({ op: 'inbox', id });
    if (c.status === 'running' && !c.lost && c.session && !c.mem.finished && t % HB === 2) {
      emit({ op: 'core', node: 'svc', by: id, input: { type: 'keepAlive', now: nodeNow(w, 'svc'), session: c.session }, quiet: true });
      emit({ op: 'flash', from: id, to: 'svc', label: '♥', kind: 'hb' });
    }
  }
  // a write that was held up in the network arrives, whatever its sender knows by now
  for (const id of ['CA', 'CB']) {
    const f = w.clients[id].mem.inflight;
    if (!f || f.arrive !== t) continue;
    emit({ op: 'write', store: 'store2', by: id, token: f.token, data: `${f.part} by ${w.clients[id].name}`, part: f.part, what: 'token' });
    emit({ op: 'client', id, mem: { inflight: null } });
    ev.did.push({ kind: 'write', id, row: w.stores.store2.rows.at(-1), inflight: f });
  }
  const said = caption(w, ev, P);
  const busy = ['A', 'B', 'CA', 'CB'].some((id) => {
    const c = w.clients[id];
    return (c.status === 'running' && !c.mem.finished) || (c.status === 'paused' && c.pausedBy === 'gc') || c.mem.inflight;
  });
  const over = !busy || t >= 40;
  if (said?.label && !over) milestone(w, emit, said.label, said.focus);
  if (over) {
    milestone(w, emit, 'outcome', ['store', 'store2'], true);
    emit({ op: 'caption', text: `${said?.text ? `${said.text} ` : ''}${ending(w)}` });
    emit({ op: 'done' });
  } else if (said) emit({ op: 'caption', text: said.text });
}

const list = (xs) => (xs.length <= 1 ? xs.join('') : `${xs.slice(0, -1).join(', ')} and ${xs.at(-1)}`);

/** What one write did, in words (from the storage's row). */
function writeWords(w, d) {
  const r = d.row;
  const side = d.id === 'A' || d.id === 'B' ? 'Redlock' : 'consensus';
  const what = side === 'Redlock' ? 'value' : 'token';
  if (!r.accepted) return `${side}: ${r.by}'s write with ${what} ${r.token} is refused (${r.token} < ${r.highest}).`;
  if (r.stale) return `${side}: ${r.by}'s write with ${what} ${r.token} lands although ${r.by} no longer holds the lock.`;
  return `${side}: ${r.by} writes ${r.data.split(' by ')[0]} with ${what} ${r.token}.`;
}

function caption(w, ev, P) {
  const locks = ev.did.filter((d) => d.kind === 'lock');
  const writes = ev.did.filter((d) => d.kind === 'write');
  const paused = ev.did.filter((d) => d.kind === 'paused');
  const parts = [];
  let label = null;
  let focus = [];
  if (ev.jumped) {
    const rl = ev.expired.filter((e) => e.node !== 'svc');
    const cs = ev.expired.filter((e) => e.node === 'svc');
    parts.push(`N3's clock jumps ${P.jump} s forward (a clock step, as NTP or an operator can make) and now reads t=${nodeNow(w, 'N3')}. ` +
      (rl.length ? `By that clock ${list(rl.map((e) => w.clients[e.id].name))}'s key on N3 has expired: N3 releases it. ` : `No key on N3 expires by it. `) +
      `${w.clients.A.holding ? `A cannot know: by its own clock its validity runs to t=${w.clients.A.mem.validUntil}.` : ''}`);
    if (cs.length || ev.granted.length)
      parts.push(`On the right the same jump hits the consensus service's clock: ${cs.length ? `by it A's session (kept alive to t=${ev.deadlineCA} by the old clock) has expired` : `A's session survives it`}${ev.granted.length ? `; B arrives and is granted token ${ev.granted[0].token}` : ''} ` +
        `(the worst case: fencelock's server counts its time from the leader's monotonic clock, which a clock step does not move).`);
    label = 'N3 clock jumps';
    focus = ['N3'];
  } else {
    const rl = ev.expired.filter((e) => e.node !== 'svc');
    if (rl.length) {
      const who = [...new Set(rl.map((e) => w.clients[e.id].name))];
      parts.push(`${list(who)}'s keys expire on ${list([...new Set(rl.map((e) => e.node))])} (${TTL} s by each node's clock): the nodes release the lock.` +
        (w.clients.A.status === 'paused' && w.clients.A.holding ? ` A, paused, still believes it holds it.` : ''));
      label = 'keys expire';
      focus = [...new Set(rl.map((e) => e.node))];
    }
    const cs = ev.expired.filter((e) => e.node === 'svc');
    if (cs.length || ev.granted.length) {
      parts.push(`Consensus: ${cs.length ? `A's session expired (no keep-alive for ${CTTL} s)` : 'the lock was released'}${ev.granted.length ? `; B, first in the queue, is granted token ${ev.granted[0].token}` : ''}.`);
      label ??= ev.granted.length ? `B gets ${ev.granted[0].token}` : 'A expires';
      focus = focus.concat(['svc']);
    }
  }
  for (const d of locks) {
    const c = w.clients[d.id];
    if (d.ok) {
      const other = d.id === 'B' && w.clients.A.holding ? ` A still believes it holds the lock too (on ${heldOn(w, 'A').length} of 5 nodes now): two clients hold "the" lock.` : '';
      parts.push(`${c.name} acquires on ${d.count} of 5 (${list(d.nodes)})${d.busy.length ? `; ${list(d.busy)} said busy` : ''} with random value ${d.value} — a majority, so it holds the lock, valid until t=${c.mem.validUntil} by its own clock.${other}`);
      label = `${c.name} holds ${d.count}/5`;
      focus = [d.id, ...d.nodes];
    } else {
      parts.push(`${c.name} tries to acquire: ${d.count} of 5 granted${d.busy.length ? `, ${list(d.busy)} busy` : ''}. No majority: it unlocks what it got and will retry.`);
    }
  }
  for (const d of paused) {
    const c = w.clients[d.id];
    if (d.id === 'A') parts.push(`Redlock: A checks its validity by its own clock (${d.left} s left) and is about to write part 2 — then a ${P.pause}-second stop-the-world pause.`);
    else parts.push(`Consensus: A${c.token != null ? ` (token ${c.token})` : ''} hits the same pause before its write.`);
    label = 'A pauses';
    focus = ['A', 'CA'];
  }
  if (ev.woke.length) parts.push(`A wakes after ${P.pause} s on both sides and writes without checking again: on the left its validity check passed before the pause; on the right it had not checked at all.`);
  for (const d of writes) parts.push(`${d.inflight ? `A's part 2, sent with token ${d.inflight.token} at t=${d.inflight.sent} and held up in the network, arrives. ` : ''}${writeWords(w, d)}`);
  const bad = writes.filter((d) => !d.row.accepted || d.row.stale);
  if (writes.length && !label) {
    label = bad.length ? `${bad[0].row.by} ${bad[0].row.accepted ? 'lands' : 'refused'} ${bad[0].row.token}` : `${writes[0].row.by} writes`;
    focus = [...new Set(writes.map((d) => (d.id.startsWith('C') ? 'store2' : 'store')))];
  } else if (writes.some((d) => d.row.stale || !d.row.accepted)) {
    focus = focus.concat(['store', 'store2']);
  }
  if (!parts.length) {
    if (w.clients.A.status === 'paused') return { text: `A is paused (t=${w.t}). Its Redlock keys run out by the nodes' clocks; its consensus session runs out without keep-alives.` };
    return null;
  }
  // milestones: acquisitions, the jump, the pause, expiries and the writes that matter
  const milestoneWorthy = label && (locks.some((d) => d.ok) || ev.jumped || paused.length || ev.expired.length || ev.granted.length || bad.length || writes.some((d) => d.id === 'A' && d.row.data.startsWith('part 1')) || writes.some((d) => d.id === 'B'));
  return milestoneWorthy ? { text: parts.join(' '), label, focus } : { text: parts.join(' ') };
}

function sideWords(w, store, what) {
  const s = w.stores[store];
  const v = storeVerdict(w, store);
  const out = [];
  for (const r of v.refused) out.push(`${r.by}'s ${what} ${r.token} refused (${r.token} < ${r.highest})${r.legit ? ' while it held the lock' : ''}`);
  for (const r of v.stale) out.push(`${r.by}'s stale ${r.token} landed`);
  if (v.corrupted) out.push('data corrupted');
  if (!out.length) out.push(s.fencing ? 'every write legitimate' : 'no stale write landed');
  return out.join('; ');
}

function ending(w) {
  const rl = storeVerdict(w, 'store');
  const cs = storeVerdict(w, 'store2');
  const fenced = w.stores.store.fencing;
  const out = [`Outcome — Redlock: ${sideWords(w, 'store', 'value')}. Consensus: ${sideWords(w, 'store2', 'token')}.`];
  const legitRefused = rl.refused.filter((r) => r.legit);
  if (fenced) {
    if (rl.stale.length || legitRefused.length)
      out.push(`Checking tokens cannot help Redlock: its values are random, so their order means nothing — the storage ${list([legitRefused.length ? 'turned away the rightful holder' : '', rl.stale.length ? 'let a stale writer through' : ''].filter(Boolean))}.`);
    else if (rl.refused.length) out.push(`Redlock's stale write was refused only because its random value happened to be lower: that is luck, not order.`);
    if (cs.refused.length) out.push(`The consensus service's token grows with every grant: that is an order a storage can check.`);
  } else {
    out.push(`Nothing checked anything: turn on "storage checks tokens" — it saves the consensus side, not Redlock.`);
  }
  return out.join(' ');
}

function outcome(w) {
  const side = (store) => {
    const s = w.stores[store];
    const v = storeVerdict(w, store);
    return {
      accepted: s.rows.filter((r) => r.accepted).map((r) => r.token),
      refused: v.refused.map((r) => ({ token: r.token, highest: r.highest, by: r.by, legit: !!r.legit })),
      stale: v.stale.map((r) => r.token),
      corrupted: v.corrupted,
      safe: !v.stale.length && !v.refused.some((r) => r.legit),
    };
  };
  return { redlock: side('store'), consensus: side('store2') };
}

/** The badge of a Redlock client: how many nodes really list its value now. */
function badge(w, c) {
  if (c.group !== 'redlock' || c.status === 'dead') return null;
  if (c.holding && c.token != null) {
    const n = heldOn(w, c.id).length;
    return isMajority(n, NODES.length) ? { text: `holds ${c.token} · ${n}/${NODES.length}`, cls: 'holds' } : { text: `believes ${c.token} · ${n}/${NODES.length}`, cls: 'stale' };
  }
  if (c.lost) return { text: 'lost the lock', cls: 'lost' };
  if (c.mem.finished) return { text: 'done', cls: 'idle' };
  return { text: c.mem.attempts ? 'no majority' : 'idle', cls: 'idle' };
}

export const redlock = {
  key: 'redlock',
  title: '6 · Redlock vs a fencing token',
  short: 'Redlock',
  lede: 'Five independent nodes, a majority, a validity time — and clocks and pauses that break it. A random value cannot be fenced; a token can.',
  tryThis: [
    'Switch "storage checks tokens" off and on: the consensus side is saved by it, Redlock is not.',
    'Choose "A pauses after acquiring": the validity runs out while A sleeps.',
    'Change the seed of the random values: sometimes the storage refuses the rightful holder, sometimes the stale one — a coin toss.',
    'Set the clock jump to 0: B gets its majority only after A is done — and a storage that orders random values may still refuse B, the rightful holder.',
  ],
  params: {
    fencing: { label: 'storage checks tokens', type: 'switch', value: true },
    scenario: { label: 'what goes wrong', type: 'choice', value: 'jump', options: [['jump', 'N3\'s clock jumps'], ['pause', 'A pauses after acquiring']] },
    jump: { label: 'clock jump on N3', type: 'range', min: 0, max: 20, step: 1, value: 10, unit: 's' },
    pause: { label: 'A\'s pause', type: 'range', min: 1, max: 30, step: 1, value: 15, unit: 's' },
    seed: { label: 'seed of the random values', type: 'range', min: 1, max: 9, step: 1, value: 1, unit: '' },
  },
  lock: LOCK,
  lanes: [
    { id: 'A', label: 'Redlock A' },
    { id: 'B', label: 'Redlock B' },
    { id: 'store', label: 'Storage (RL)' },
    { id: 'CA', label: 'Consensus A' },
    { id: 'CB', label: 'Consensus B' },
    { id: 'store2', label: 'Storage (C)' },
  ],
  clients: ['A', 'B', 'CA', 'CB'],
  step,
  apply,
  outcome,
  badge,
  verdict: (w, store = 'store') => storeVerdict(w, store),
  layout: (w, narrow) =>
    narrow
      ? {
          width: 400,
          height: 600,
          nodes: [
            ...NODES.map((id, i) => ({ id, kind: 'rlnode', x: 48 + i * 76, y: 88, w: 68 })),
            { id: 'A', kind: 'client', x: 36, y: 156, side: 'right', small: true },
            { id: 'B', kind: 'client', x: 36, y: 202, side: 'right', small: true },
            { id: 'store', kind: 'store', x: 200, y: 270, compact: true },
            { id: 'svc', kind: 'service', x: 200, y: 402, lock: LOCK, compact: true },
            { id: 'CA', kind: 'client', x: 36, y: 478, side: 'right', small: true, noLease: true },
            { id: 'CB', kind: 'client', x: 236, y: 478, side: 'right', small: true, noLease: true },
            { id: 'store2', kind: 'store', x: 200, y: 544, compact: true },
          ],
          panels: [
            { x: 6, y: 6, w: 388, h: 314, title: 'Redlock: 5 independent nodes' },
            { x: 6, y: 328, w: 388, h: 268, title: 'Consensus + fencing token' },
          ],
        }
      : {
          width: 800,
          height: 532,
          nodes: [
            ...NODES.map((id, i) => ({ id, kind: 'rlnode', x: 60 + i * 90, y: 86, w: 80 })),
            { id: 'A', kind: 'client', x: 110, y: 210 },
            { id: 'B', kind: 'client', x: 370, y: 210 },
            { id: 'store', kind: 'store', x: 240, y: 412 },
            { id: 'svc', kind: 'service', x: 640, y: 125, lock: LOCK },
            { id: 'CA', kind: 'client', x: 565, y: 248, small: true, noLease: true },
            { id: 'CB', kind: 'client', x: 715, y: 248, small: true, noLease: true },
            { id: 'store2', kind: 'store', x: 640, y: 412 },
          ],
          panels: [
            { x: 8, y: 6, w: 470, h: 520, title: 'Redlock: 5 independent nodes, own clocks' },
            { x: 488, y: 6, w: 304, h: 520, title: 'Consensus + fencing token' },
          ],
        },
};
