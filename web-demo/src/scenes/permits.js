// Scene 8: permits that leak. A pool of three database connections guarded by a semaphore
// of three permits, told twice. Left: the design of a counter semaphore in Redis (as
// Redisson's RSemaphore keeps one: a key holds the number of free permits; acquire takes one
// if any is left, else waits for a message on the key's channel; release adds one back and
// publishes). It is SIMULATED here, in this file — it is not fencelock: no sessions, no
// owners, no expiry. Right: the same story on fencelock, the real core in wasm: each worker
// opens a labelled session, acquires `{permits: 1, limit: 3}`, heartbeats; a dashboard
// session watches the semaphore and is told every holder change (HolderChanged events).
// worker-2 crashes holding its permit: on the left the permit never comes back and the
// waiters wait forever; on the right its session expires after its timeout, the permit
// returns, and the head of the FIFO queue is granted with a new fencing token.

import { nextTime, heartbeat, milestone, readInboxes } from './common.js';

const LOCK = 'db/pool';
const LIMIT = 3;
const HB = 2; // seconds between heartbeats
const FOREVER = Infinity;

// The five workers: the same processes on both sides. worker-1 and worker-3 are long-running
// consumers that keep their connection for as long as they run; worker-2 runs a short job;
// worker-4 and worker-5 arrive a second later with short jobs.
const WORKERS = [
  { n: 1, pid: 4702, want: 0, hold: FOREVER },
  { n: 2, pid: 4711, want: 0, hold: 5 },
  { n: 3, pid: 4718, want: 0, hold: FOREVER },
  { n: 4, pid: 4730, want: 1, hold: 'job' },
  { n: 5, pid: 4736, want: 1, hold: 'job' },
];
const CRASH = { n: 2, at: 3 };
const WATCHER = { id: 'dash', name: 'dashboard', label: 'dashboard (pid 4800)' };

const C = WORKERS.map((x) => `c${x.n}`); // the counter side
const F = WORKERS.map((x) => `f${x.n}`); // the fencelock side
const labelOf = (x) => `worker-${x.n} (pid ${x.pid})`;
const spec = (id) => WORKERS[Number(id.slice(1)) - 1];
const holdOf = (x, P) => (x.hold === 'job' ? P.job : x.hold);
const perm = { permits: 1, limit: LIMIT };

// ------------------------------------------------------------------ the simulated counter

/**
 * The counter side's own records (World.apply routes `{op: 'custom'}` here). This is the
 * simulation of the Redis design, and the only place its rule lives: `take` succeeds while
 * the key says a permit is free; `give` adds one back. Nothing records who took what.
 */
function apply(w, r) {
  const k = w.custom.counter;
  const c = r.id ? w.clients[r.id] : null;
  switch (r.kind) {
    case 'start':
      w.custom.counter = { free: LIMIT, limit: LIMIT };
      w.custom.facts = { grants: [], expiries: [], crashes: [], releases: [], maxInUse: 0 };
      return;
    case 'take': {
      if (k.free >= 1) {
        k.free -= 1;
        c.holding = true;
        c.grantedAt = w.t;
        c.waiting = null;
        w.closeSpan(c.id, 'wait');
        w.spans.push({ lane: c.id, from: w.t, to: null, kind: 'hold', label: 'has a permit' });
        w.addLog('Redis (sim.)', `${c.name}: acquire → the key had ${k.free + 1} free, now ${k.free}: a permit`, 'out good');
        w.flashes.push({ from: 'counter', to: c.id, label: 'permit', kind: 'good' });
      } else if (c.waiting == null) {
        c.waiting = 1;
        w.spans.push({ lane: c.id, from: w.t, to: null, kind: 'wait', label: 'waits for a release' });
        w.addLog('Redis (sim.)', `${c.name}: acquire → 0 free: it subscribes to the key's channel and waits for a release message`, 'out warn');
        w.flashes.push({ from: 'counter', to: c.id, label: '0 free', kind: 'warn' });
      }
      return;
    }
    case 'give':
      k.free += 1;
      c.holding = false;
      c.mem.finished = true;
      w.closeSpan(c.id, 'hold');
      w.addLog('Redis (sim.)', `${c.name}: release → ${k.free} free, and a message on the channel`, 'out');
      w.flashes.push({ from: c.id, to: 'counter', label: 'release', kind: 'msg' });
      return;
    case 'leak':
      // the page sees the process die; the key does not: the permit stays taken
      c.mem.leaked = true;
      w.spans.push({ lane: c.id, from: w.t, to: null, kind: 'leak', label: 'permit leaked' });
      w.addLog('Redis (sim.)', `${c.name} died holding a permit; the key still says ${k.free} free and nothing will ever add it back`, 'bad');
      return;
    case 'orphan':
      // fencelock side: the process is gone, its session (and permit) live until expiry
      c.mem.orphan = true;
      w.spans.push({ lane: c.id, from: w.t, to: null, kind: 'leak', label: `session alive, process gone` });
      return;
    case 'expired':
      w.closeSpan(c.id, 'leak');
      w.closeSpan(c.id, 'hold');
      c.mem.orphan = false;
      return;
    case 'fact':
      w.custom.facts[r.list].push({ t: w.t, ...r.fact });
      return;
    case 'peak':
      w.custom.facts.maxInUse = Math.max(w.custom.facts.maxInUse, r.inUse);
      return;
    default:
      throw new Error(`unknown scene op ${r.kind}`);
  }
}

// ------------------------------------------------------------------ the script

function setup(w, emit, P) {
  emit({ op: 'custom', kind: 'start' });
  emit({ op: 'node', create: true, node: 'svc', label: 'fencelock', group: 'svc', config: { sessions: 16, locks: 8, claims: 32, lockDelay: 0 } });
  for (const x of WORKERS) {
    emit({ op: 'client', create: true, id: `c${x.n}`, name: `worker-${x.n} (counter)`, group: 'counter', mem: { short: `w${x.n}`, label: labelOf(x) } });
    emit({ op: 'client', create: true, id: `f${x.n}`, name: `worker-${x.n}`, group: 'svc', mem: { short: `w${x.n}`, label: labelOf(x) } });
  }
  emit({ op: 'client', create: true, id: WATCHER.id, name: WATCHER.name, group: 'svc', mem: { short: 'dash', label: WATCHER.label } });
  // the dashboard opens a labelled session (it watches the semaphore's name from t=1)
  emit({ op: 'core', node: 'svc', by: WATCHER.id, input: { type: 'openLabeled', ttl: P.ttl, label: WATCHER.label } });
  for (const x of WORKERS) emit({ op: 'core', node: 'svc', by: `f${x.n}`, input: { type: 'openLabeled', ttl: P.ttl, label: labelOf(x) } });
  const did = act(w, emit, P);
  milestone(w, emit, 'three permits taken', ['counter', 'svc']);
  const g = did.fl.grants.map((x) => `${w.clients[x.id].mem.short} token ${x.token}`).join(', ');
  emit({
    op: 'caption',
    text: `Five workers share a pool of ${LIMIT} database connections, guarded by a semaphore of ${LIMIT} permits named ${JSON.stringify(LOCK)}. ` +
      `worker-1, worker-2 and worker-3 take one each. Left, a counter in Redis (simulated here; Redisson's RSemaphore is one such design): the key now says 0 free — and nothing more. ` +
      `Right, fencelock: each worker opened a session with a label, and each grant is a claim with its own fencing token (${g}). A dashboard has a session too; it will watch ${JSON.stringify(LOCK)}.`,
  });
}

/** Every worker's move this step (both sides). Returns what happened, for the caption. */
function act(w, emit, P) {
  const t = w.t;
  const did = { fl: { grants: [], released: [], queued: [], expired: [] }, ctr: { took: [], gave: [], wait: [] } };
  // fencelock: time passes in the core (a silent session expires; its permit goes to the queue)
  if (t > 0) note(w, emit, did, emit({ op: 'core', node: 'svc', input: { type: 'tick', now: t }, quiet: true }));
  for (const id of F) {
    const c = w.clients[id];
    const x = spec(id);
    // a worker you resumed first reads what reached it while it was paused (a grant, an expiry)
    readInboxes(w, emit, [id]);
    if (c.status !== 'running' || c.lost || c.mem.finished) continue;
    if (c.holding && t >= c.grantedAt + holdOf(x, P)) {
      note(w, emit, did, emit({ op: 'core', node: 'svc', by: id, input: { type: 'release', session: c.session, lock: LOCK } }));
      did.fl.released.push(id);
      emit({ op: 'custom', kind: 'fact', list: 'releases', fact: { id } });
      emit({ op: 'client', id, mem: { finished: true } });
      note(w, emit, did, emit({ op: 'core', node: 'svc', by: id, input: { type: 'closeSession', session: c.session }, quiet: true }));
    } else if (!c.mem.asked && t >= x.want) {
      emit({ op: 'client', id, mem: { asked: true } });
      note(w, emit, did, emit({ op: 'core', node: 'svc', by: id, input: { type: 'acquire', session: c.session, lock: LOCK, mode: perm, wait: 'forever' } }), id);
    }
  }
  // the dashboard, resumed, reads the holder changes it was sent while paused, in order
  readInboxes(w, emit, [WATCHER.id]);
  for (const id of [...F, WATCHER.id]) heartbeat(w, emit, id, { node: 'svc', hb: HB, hideHeartbeats: true });
  // the counter: a holder done with its job gives its permit back; a worker asks; a waiter
  // that hears of a free permit tries again (in the order they began waiting)
  for (const id of C) {
    const c = w.clients[id];
    const x = spec(id);
    if (c.status !== 'running' || c.mem.finished) continue;
    if (c.holding && t >= c.grantedAt + holdOf(x, P)) {
      emit({ op: 'custom', kind: 'give', id });
      did.ctr.gave.push(id);
    } else if (!c.mem.asked && t >= x.want) {
      emit({ op: 'client', id, mem: { asked: true } });
      emit({ op: 'custom', kind: 'take', id });
      (w.clients[id].holding ? did.ctr.took : did.ctr.wait).push(id);
    }
  }
  for (const id of C) {
    const c = w.clients[id];
    if (c.status === 'running' && c.waiting != null && w.custom.counter.free > 0) {
      emit({ op: 'custom', kind: 'take', id });
      if (w.clients[id].holding) did.ctr.took.push(id);
    }
  }
  // the core's permits in use, kept for the ending (never above the limit: the core's rule)
  const p = w.nodes.svc.core.permits(LOCK);
  if (p && p.inUse > w.custom.facts.maxInUse) emit({ op: 'custom', kind: 'peak', inUse: p.inUse });
  return did;
}

/** Notes the core's answers that the caption and the ending need, as facts of this run. */
function note(w, emit, did, outs, asker) {
  for (const o of outs || []) {
    const id = w.sessions[`svc:${o.session}`];
    if (o.type === 'granted' && id !== WATCHER.id) {
      did.fl.grants.push({ id, token: o.token });
      emit({ op: 'custom', kind: 'fact', list: 'grants', fact: { id, token: o.token } });
    }
    if (o.type === 'queued' && id === asker) did.fl.queued.push({ id, position: o.position });
    if (o.type === 'sessionExpired' && id) {
      const c = w.clients[id];
      did.fl.expired.push(id);
      emit({ op: 'custom', kind: 'fact', list: 'expiries', fact: { id, token: c.token } });
      if (c.mem.orphan || c.status === 'dead') emit({ op: 'custom', kind: 'expired', id });
    }
  }
}

function step(w, emit, P) {
  const t = nextTime(w, emit);
  if (t === 0) return setup(w, emit, P);
  const crashed = [];
  // the dashboard begins to watch: it is told the holders there are now, then every change
  let watched = null;
  if (t === 1 && w.clients[WATCHER.id].status === 'running' && w.clients[WATCHER.id].session != null) {
    const outs = emit({ op: 'core', node: 'svc', by: WATCHER.id, input: { type: 'watch', session: w.clients[WATCHER.id].session, lock: LOCK } });
    watched = outs.filter((o) => o.type === 'holderChanged' && o.change === 'holding').map((o) => o.label);
  }
  // the crash: worker-2 dies holding its permit (kill -9, out of memory, a lost machine)
  if (P.crash && t === CRASH.at) {
    for (const id of [`c${CRASH.n}`, `f${CRASH.n}`]) {
      if (w.clients[id].status === 'dead') continue;
      emit({ op: 'client', id, set: { status: 'dead' }, mem: { crashed: true } });
      crashed.push(id);
    }
  }
  // a process that died holding a permit (the crash, or your kill): on the left the permit
  // is lost for good; on the right the session holds it until it expires
  for (const id of C) {
    const c = w.clients[id];
    if (c.status === 'dead' && c.holding && !c.mem.leaked) emit({ op: 'custom', kind: 'leak', id });
  }
  for (const id of F) {
    const c = w.clients[id];
    if (c.status === 'dead' && c.holding && !c.mem.orphan && !c.mem.gone && c.session != null && w.nodes.svc.core.session(c.session)) {
      emit({ op: 'custom', kind: 'orphan', id });
      emit({ op: 'client', id, mem: { gone: true } });
      emit({ op: 'custom', kind: 'fact', list: 'crashes', fact: { id, token: c.token, until: w.nodes.svc.core.session(c.session).expiresAt } });
    }
  }
  const did = act(w, emit, P);
  const parts = [];
  const name = (id) => w.clients[id].mem.label;
  const fl = (id) => w.clients[id];
  if (crashed.length) {
    const f = w.clients[`f${CRASH.n}`];
    const until = f.session != null ? w.nodes.svc.core.session(f.session)?.expiresAt : null;
    milestone(w, emit, 'worker-2 crashes', [`c${CRASH.n}`, `f${CRASH.n}`]);
    parts.push(
      `worker-2 (pid 4711) crashes holding its permit — kill -9, out of memory, a lost machine: it will never release. ` +
        `Left: the key still counts the permit as taken (${w.custom.counter.free} free), and nothing in Redis knows whose it was. ` +
        (until != null ? `Right: the service still lists worker-2 as a holder, because its session is alive until its timeout runs out with no heartbeat: until t=${until}.` : 'Right: its session is already gone.'),
    );
  }
  if (did.fl.queued.length && did.ctr.wait.length && t <= 1) {
    milestone(w, emit, 'two wait', [...did.fl.queued.map((q) => q.id), ...did.ctr.wait]);
    parts.push(
      `${did.fl.queued.map((q) => q.id).map((id) => `worker-${spec(id).n}`).join(' and ')} ask for a permit. None is free. ` +
        `Left: each subscribes to the key's channel and waits for a release message. Right: each joins the semaphore's FIFO queue (${did.fl.queued.map((q) => `#${q.position}`).join(', ')}).` +
        (watched ? ` The dashboard begins to watch ${JSON.stringify(LOCK)} and is told who holds it now: ${watched.length ? watched.join(', ') : 'nobody'}.` : ''),
    );
  }
  for (const id of did.fl.expired) {
    if (id === WATCHER.id) continue;
    const c = fl(id);
    const exp = w.custom.facts.expiries.findLast((e) => e.id === id);
    const next = did.fl.grants.find((g) => g.id !== id);
    milestone(w, emit, `${c.mem.short}'s session expires`, ['svc', ...(next ? [next.id] : [])]);
    if (!c.holding && exp?.token == null) {
      parts.push(`Right: ${name(id)}'s session expired at t=${t} (no heartbeat in time); it held no permit.`);
      continue;
    }
    parts.push(
      `Right: no heartbeat from ${name(id)} in time: the service expires its session at t=${t} (timeout ${P.ttl} s) and its permit (token ${exp?.token ?? '?'}) returns.` +
        (next ? ` The head of the queue, ${name(next.id)}, is granted with a new fencing token, ${next.token} — higher than any token granted before, so a resource that only this holder uses (a connection of its own, say) can refuse anything the old holder still sends with its lower one. A semaphore's holders hold different tokens at once, so one highest-token check over the whole pool would refuse them too. The dashboard is told: expired, then granted.` : ' Nobody is waiting.') +
        ` Left: nothing happens — nothing can: the key has no idea a process died.`,
    );
  }
  for (const id of did.fl.released) {
    const next = did.fl.grants.find((g) => g.id !== id);
    if (next && !w.milestones.some((m) => m.label === 'release → next in line')) milestone(w, emit, 'release → next in line', [id, next.id]);
    parts.push(`Right: ${name(id)} is done and releases; ${next ? `${name(next.id)}, next in line, is granted token ${next.token}.` : 'nobody is waiting.'}`);
  }
  if (did.ctr.gave.length) parts.push(`Left: ${did.ctr.gave.map((id) => w.clients[id].mem.short).join(', ')} gives its permit back${did.ctr.took.length ? ` and ${did.ctr.took.map((id) => w.clients[id].mem.short).join(', ')}, told by the release message, takes it` : ''}: the key says ${w.custom.counter.free} free.`);
  // the end: nothing on the right can change any more (nobody to serve, no session to expire,
  // no job pending), or a minute has gone by
  if (settled(w, P) || t >= 60) {
    const o = outcome(w);
    milestone(w, emit, 'outcome', ['counter', 'svc'], true);
    // the ending alone: it names every expiry and grant of the run, this step's included
    emit({ op: 'caption', text: ending(w, o, P) });
    emit({ op: 'done' });
    return;
  }
  if (parts.length) emit({ op: 'caption', text: parts.join(' ') });
  else if (w.custom.facts.crashes.length || w.clients[`c${CRASH.n}`].mem.leaked) {
    const waiting = C.filter((id) => w.clients[id].waiting != null && w.clients[id].status !== 'dead');
    const orphan = F.find((id) => w.clients[id].mem.orphan);
    emit({
      op: 'caption',
      text: (waiting.length ? `Left: ${waiting.map((id) => w.clients[id].mem.short).join(' and ')} still wait, ${w.custom.counter.free} free. ` : '') +
        (orphan ? `Right: ${name(orphan)}'s session lives on without its process until t=${w.nodes.svc.core.session(w.clients[orphan].session)?.expiresAt}.` : 'Right: the queue moves as holders finish.'),
    });
  }
}

/** Nothing left that can change on the fencelock side, and the story has had time to show it. */
function settled(w, P) {
  if (w.t < 8) return false;
  const core = w.nodes.svc.core;
  if (core.waiters(LOCK).length) {
    // a waiter is served only when a permit can come back: a holder with an end, or a session that can expire
    const ends = F.some((id) => {
      const c = w.clients[id];
      if (!c.holding) return false;
      return c.status !== 'running' || holdOf(spec(id), P) !== FOREVER;
    });
    if (ends) return false;
  }
  for (const id of F) {
    const c = w.clients[id];
    if (c.status === 'dead' || c.status === 'paused') {
      if (c.session != null && core.session(c.session) && (c.holding || c.waiting != null || c.status === 'paused')) return false;
      continue;
    }
    if (c.mem.finished) continue;
    if (!c.mem.asked) return false;
    if (c.holding && holdOf(spec(id), P) !== FOREVER) return false;
  }
  for (const id of C) {
    const c = w.clients[id];
    if (c.status === 'running' && !c.mem.finished && (!c.mem.asked || (c.holding && holdOf(spec(id), P) !== FOREVER))) return false;
  }
  return true;
}

function outcome(w) {
  const f = w.custom.facts;
  const core = w.nodes.svc.core;
  const p = core.permits(LOCK);
  return {
    counter: {
      free: w.custom.counter.free,
      leaked: C.filter((id) => w.clients[id].mem.leaked).map((id) => w.clients[id].mem.label),
      waiting: C.filter((id) => w.clients[id].waiting != null && w.clients[id].status !== 'dead').map((id) => w.clients[id].mem.label),
    },
    fencelock: {
      inUse: p ? p.inUse : 0,
      maxInUse: f.maxInUse,
      grants: f.grants.map((g) => ({ t: g.t, label: w.clients[g.id].mem.label, token: g.token })),
      expiries: f.expiries.filter((e) => e.id !== WATCHER.id).map((e) => ({ t: e.t, label: w.clients[e.id].mem.label, token: e.token })),
      waiting: core.waiters(LOCK).map((q) => q.label),
    },
    feed: (w.clients[WATCHER.id].feed ?? []).length,
  };
}

function ending(w, o, P) {
  const out = ['Outcome.'];
  const since = (label) => {
    const id = C.find((x) => w.clients[x].mem.label === label);
    return w.spans.find((s) => s.lane === id && s.kind === 'wait')?.from;
  };
  if (o.counter.waiting.length && o.counter.free === 0) {
    out.push(
      `Left, the counter: ${o.counter.waiting.map((l) => `${l.split(' (')[0]} has waited since t=${since(l)}`).join(', ')} — and will wait forever: the key says 0 free` +
        (o.counter.leaked.length ? `, and ${o.counter.leaked.length} of its ${LIMIT} permits belong${o.counter.leaked.length === 1 ? 's' : ''} to a process that no longer exists (${o.counter.leaked.map((l) => l.split(' (')[0]).join(', ')}).` : '.') +
        ' Only someone resetting the key by hand gets them back — and a reset while the holders are alive lets too many in.',
    );
  } else if (o.counter.leaked.length) out.push(`Left, the counter: ${o.counter.leaked.length} permit${o.counter.leaked.length === 1 ? ' is' : 's are'} gone for good (${o.counter.leaked.map((l) => l.split(' (')[0]).join(', ')}): the pool has ${LIMIT - o.counter.leaked.length} from now on.`);
  else out.push('Left, the counter: no process died holding a permit, so the count stayed right.');
  const served = o.fencelock.grants.filter((g) => g.t > 0);
  if (o.fencelock.expiries.length) {
    out.push(
      `Right, fencelock: ${o.fencelock.expiries.map((e) => `${e.label.split(' (')[0]}'s permit came back when its session expired at t=${e.t}`).join('; ')}` +
        (served.length ? `; ${served.map((g) => `${g.label.split(' (')[0]} was granted token ${g.token} at t=${g.t}`).join(', ')}, in the order they asked` : '') + '.',
    );
  } else out.push(`Right, fencelock: ${served.length ? `${served.map((g) => `${g.label.split(' (')[0]} got token ${g.token} at t=${g.t}`).join(', ')}, in the order they asked` : 'nobody new was served'}.`);
  if (o.fencelock.waiting.length) out.push(`Still queued: ${o.fencelock.waiting.map((l) => l.split(' (')[0]).join(', ')}.`);
  out.push(`Permits in use never went above ${LIMIT} (at most ${o.fencelock.maxInUse}); the dashboard read ${o.feed} holder changes as they happened.`);
  return out.join(' ');
}

const badge = (w, c) => {
  if (c.id === WATCHER.id) return { text: c.lost ? 'lost its session' : 'watching', cls: c.lost ? 'lost' : 'waits' };
  if (c.group !== 'counter') return null; // the fencelock side: the core's answers, as everywhere
  if (c.holding) return { text: 'permit', cls: 'holds' };
  if (c.waiting != null) return { text: 'waiting', cls: 'waits' };
  if (c.mem.finished) return { text: 'done', cls: 'idle' };
  return { text: 'idle', cls: 'idle' };
};

export const permits = {
  key: 'permits',
  title: '8 · Permits that leak',
  short: 'Permits',
  lede: 'A semaphore of three permits and a worker that crashes holding one. A counter never gets it back; a session that expires does.',
  fencingSwitch: false,
  tryThis: [
    'Step to t=3 and watch worker-2 crash: the left pool shrinks to two for good, the right one only until its session expires.',
    'Shorten the session timeout: the right side gets the permit back sooner. Lengthen it: the wait grows — but it ends.',
    'Kill worker-1 on either side: on the left a second permit leaks; on the right its session expires too and the next waiter gets it.',
    'Switch the crash off: both sides serve worker-4 and worker-5.',
  ],
  params: {
    crash: { label: 'worker-2 crashes at t=3', type: 'switch', value: true },
    ttl: { label: 'session timeout (fencelock)', type: 'range', min: 3, max: 12, step: 1, value: 5, unit: 's' },
    job: { label: 'worker-4 and worker-5 jobs', type: 'range', min: 2, max: 6, step: 1, value: 3, unit: 's' },
  },
  lock: LOCK,
  limit: LIMIT,
  sides: { counter: C, fencelock: F },
  // a phone's lane names are shorter: "Redis" for the simulated counter, "core" for fencelock's
  lanes: [...C.map((id, i) => ({ id, label: `counter · w${i + 1}`, short: `Redis w${i + 1}` })), ...F.map((id, i) => ({ id, label: `fencelock · w${i + 1}`, short: `core w${i + 1}` }))],
  legend: '<span class="k hold"></span>holds a permit <span class="k wait"></span>waits / queued <span class="k leak"></span>a permit held for a dead process <span class="k pause"></span>paused <span class="k grant">◆</span>grant',
  clients: [...C, ...F, WATCHER.id],
  step,
  apply,
  outcome,
  badge,
  layout: (w, narrow) => {
    const row = (ids, x0, y, dx, withDash) =>
      [...ids, ...(withDash ? [WATCHER.id] : [])].map((id, i) => ({ id, kind: 'client', small: true, noLease: true, short: w.clients[id]?.mem.short, x: x0 + i * dx, y, badgeDy: i % 2 ? 16 : 0 }));
    if (narrow) {
      return {
        width: 400,
        height: 598,
        nodes: [
          { id: 'counter', kind: 'counter', x: 200, y: 88, w: 372, h: 104, compact: true },
          ...row(C, 40, 170, 80, false),
          { id: 'svc', kind: 'sema', x: 200, y: 334, w: 372, h: 122, compact: true },
          ...row(F, 36, 428, 63, true),
          { id: 'feed', kind: 'feed', node: 'svc', watcher: WATCHER.id, x: 200, y: 535, w: 372, h: 100, compact: true },
        ],
        panels: [
          { x: 4, y: 4, w: 392, h: 230, title: 'A counter in Redis (simulated, not fencelock)' },
          { x: 4, y: 240, w: 392, h: 354, title: 'fencelock: sessions, labels, a watch' },
        ],
      };
    }
    return {
      width: 800,
      height: 502,
      nodes: [
        { id: 'counter', kind: 'counter', x: 202, y: 126, w: 360, h: 164 },
        ...row(C, 58, 252, 72, false),
        { id: 'ctr-note', kind: 'note', x: 202, y: 406, w: 360, h: 150, title: 'Who could a dashboard watch?', lines: ['Nobody: the key holds a number, not holders.', 'A waiter hears "a permit was released" —', 'never whose, and never that one was lost.', 'A crashed holder sends no message at all.'] },
        { id: 'svc', kind: 'sema', x: 598, y: 126, w: 360, h: 164 },
        ...row(F, 444, 252, 62, true),
        { id: 'feed', kind: 'feed', node: 'svc', watcher: WATCHER.id, x: 598, y: 406, w: 360, h: 150 },
      ],
      panels: [
        { x: 8, y: 6, w: 388, h: 488, title: 'A counter in Redis (simulated here, not fencelock)' },
        { x: 404, y: 6, w: 388, h: 488, title: 'fencelock: sessions, labels, a queue, a watch' },
      ],
    };
  },
};
