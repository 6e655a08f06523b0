// Client behaviour shared by the scenes: what a worker process does (heartbeat, run its job,
// write with the token it believes it holds). None of this decides who holds a lock — the
// core's outputs do; these are the *clients*, which may be wrong (that is the story).

/** Starts the next step: advances the scene clock. Returns the new time. */
export function nextTime(w, emit) {
  const t = w.t + 1;
  emit({ op: 'time', t });
  return t;
}

/** Feeds `tick(now)` to every live core. Returns the outputs per node. */
export function tickAll(w, emit, t) {
  const all = {};
  for (const n of Object.values(w.nodes)) {
    if (n.alive) all[n.name] = emit({ op: 'core', node: n.name, input: { type: 'tick', now: t }, quiet: true });
  }
  return all;
}

/** The session's deadline as the core reports it (null if the core no longer has it). */
export function deadlineOf(w, node, c) {
  if (!c.session) return null;
  const info = w.nodes[node].core.session(c.session);
  return info ? info.expiresAt : null;
}

/**
 * One step of a worker client: if running, run at most one due job action, then read what
 * reached it while paused, then heartbeat if due. A job is a list of actions with times
 * relative to the client's grant (`rel`) or absolute (`at`).
 *
 * Returns a list of what it did ({kind, ...}) for the scene's captions.
 */
export function runWorker(w, emit, id, ctx) {
  const c = w.clients[id];
  const did = [];
  if (c.status !== 'running') return did;
  const m = c.mem;
  const t = w.t;
  // 1. the job (one action a step, so each is visible)
  if (!m.finished) {
    const job = m.jobs[m.next ?? 0];
    if (c.lost) {
      emit({ op: 'client', id, mem: { finished: true } });
      emit({ op: 'note', src: c.name, text: `${c.name} stops work: it knows it lost the lock`, cls: 'warn' });
      did.push({ kind: 'gave-up' });
    } else if (job) {
      const due = job.at != null ? job.at : c.grantedAt != null ? c.grantedAt + job.rel : Infinity;
      const idx = m.next ?? 0;
      const prepared = m.prepared === idx;
      const lease = w.lease(id);
      if (t >= due && (c.holding || c.token != null)) {
        if (!prepared && job.do === 'write' && m.checksLease && lease && lease.state !== 'safe') {
          // An honest client checks its lease by its own clock before each action and stops
          // when it cannot be sure: erring toward unavailability rather than unsafety.
          emit({ op: 'client', id, mem: { finished: true } });
          emit({ op: 'note', src: c.name, text: `${c.name} checks its lease by its own clock: ${lease.state} — it stops acting`, cls: 'warn' });
          did.push({ kind: 'stepped-down', lease });
          return did;
        }
        if (!prepared && ctx.freezeAfterCheck?.(w, id, job)) {
          // The check passed; the pause strikes between the check and the use.
          emit({ op: 'client', id, mem: { prepared: idx } });
          did.push({ kind: 'prepared', job, lease });
          return did;
        }
        const late = t > due;
        if (job.do === 'write') {
          emit({ op: 'write', store: ctx.store, by: id, token: c.token, data: job.data, part: job.part });
          did.push({ kind: 'write', row: w.stores[ctx.store].rows.at(-1), late: late || prepared });
        } else if (job.do === 'release') {
          const outs = emit({ op: 'core', node: ctx.node, by: id, input: { type: 'release', session: c.session, lock: ctx.lock } });
          did.push({ kind: 'release', outs });
        }
        const next = idx + 1;
        emit({ op: 'client', id, mem: { next, prepared: null, finished: next >= m.jobs.length } });
        if (next >= m.jobs.length && !c.lost && c.session) {
          const outs = emit({ op: 'core', node: ctx.node, by: id, input: { type: 'closeSession', session: c.session } });
          did.push({ kind: 'closed', outs });
        }
      }
    }
  }
  // 2. what arrived while it was paused
  if (c.inbox.length) {
    emit({ op: 'inbox', id });
    did.push({ kind: 'inbox' });
  }
  // 3. heartbeat
  heartbeat(w, emit, id, ctx);
  return did;
}

/**
 * Does this client still send keep-alives? A running process with a session, work left, and
 * no news that it lost the lock. (Client behaviour, for the heartbeat and the captions.)
 */
export function heartbeats(c) {
  return c.status === 'running' && !c.lost && !!c.session && !c.mem.finished;
}

/** Sends a keep-alive when one is due (every `hb` seconds since the last one sent). */
export function heartbeat(w, emit, id, ctx) {
  const c = w.clients[id];
  if (!heartbeats(c)) return;
  if (w.t - (c.mem.lastHb ?? 0) < ctx.hb) return;
  emit({ op: 'client', id, mem: { lastHb: w.t } });
  emit({ op: 'core', node: ctx.node, by: id, input: { type: 'keepAlive', session: c.session }, quiet: true });
  if (!ctx.hideHeartbeats) emit({ op: 'flash', from: id, to: ctx.node, label: '♥', kind: 'hb' });
}

/** Clients that still have something to do. */
export function active(w, ids) {
  return ids.filter((id) => w.clients[id].status !== 'dead' && !w.clients[id].mem.finished);
}

/** A tiny seeded PRNG (mulberry32) for the herd's race order: same seed, same race. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Marks this step as a stop of the guided story: `label` names it on the time axis, `focus`
 * lists the stage nodes that changed (highlighted). Numbered ①, ②, … in the order reached;
 * `n: null` is the outcome. Story bookkeeping only: it decides nothing.
 */
export function milestone(w, emit, label, focus = [], outcome = false) {
  const n = outcome ? null : w.milestones.filter((m) => m.n != null).length + 1;
  emit({ op: 'milestone', n, label, focus });
}

/** The client id that a core output's session belongs to (in the node group `group`). */
export function whoseSession(w, group, session) {
  return w.sessions[`${group}:${session}`] ?? null;
}

/**
 * A running client you resumed first reads what reached it while it was paused (a grant,
 * an expiry, a watcher's news), in order: each of `ids` that is running with anything in
 * its inbox.
 */
export function readInboxes(w, emit, ids) {
  for (const id of ids) if (w.clients[id].status === 'running' && w.clients[id].inbox.length) emit({ op: 'inbox', id });
}
