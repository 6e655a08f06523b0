// The model: one scene's world at one point in time. It owns real fencelock cores (wasm
// LockService instances), the storage (a real FenceGate when "checks fencing tokens" is on,
// else a dumb last-writer-wins store) and the clients' own beliefs. It changes ONLY through
// `apply(record)`; a scene script decides which records to emit, the timeline keeps them,
// and replaying the same records into a fresh World gives the same state (the cores are
// deterministic). Nothing here decides who holds a lock: that is read from core outputs.

/** Short human form of a core output, for the log. */
export function fmtOutput(o) {
  // the log shows what the wasm binding returned, not the note the demo made of it: a reply
  // as `reply to session 2: granted {mode: "exclusive", token: 34}`, an event as
  // `session_expired {session: 2}` (the core's own kind names and fields)
  const { kind, ...fields } = o.wire ?? { kind: o.type, ...o };
  const parts = Object.entries(fields)
    .filter(([k]) => k !== 'type')
    .map(([k, v]) => `${k}: ${typeof v === 'string' || (v && typeof v === 'object') ? JSON.stringify(v) : v}`);
  const body = `${kind} {${parts.join(', ')}}`;
  return o.replyTo !== undefined && kind !== 'opened' ? `reply to session ${o.replyTo}: ${body}` : o.replyTo !== undefined ? `reply: ${body}` : body;
}

/** Short human form of an input (the record of what was fed to a core). */
export function fmtInput(i) {
  const args = Object.entries(i)
    .filter(([k]) => k !== 'type')
    .map(([k, v]) => `${k}: ${typeof v === 'number' ? v : JSON.stringify(v)}`);
  return `${i.type}(${args.join(', ')})`;
}

const clone = (v) => (v === undefined ? v : JSON.parse(JSON.stringify(v)));

/**
 * Redlock's rule, the one home of it on this page: `got` of `of` nodes is a majority. (Client
 * logic of the design scene 6 contrasts, not a fencelock rule.)
 */
export function isMajority(got, of) {
  return got * 2 > of;
}

export class World {
  /**
   * @param api   the wasm module ({LockService, FenceGate})
   * @param scene the scene definition (for custom ops and lanes)
   * @param params the scene's parameters (sliders, switches)
   */
  constructor(api, scene, params) {
    this.api = api;
    this.scene = scene;
    this.params = params;
    this.t = -1; // the clock of the scene (seconds); -1 = before the first step
    this.step = 0;
    this.nodes = {}; // name -> {name, label, core: LockService, alive, group}
    this.clients = {}; // id -> client (beliefs + status)
    this.sessions = {}; // `${group}:${session}` -> client id
    this.stores = {}; // name -> storage
    this.log = []; // {t, src, text, cls}
    this.marks = []; // {t, lane, kind, label}
    this.spans = []; // {lane, from, to|null, kind, label}
    this.flashes = []; // this step's messages {from, to, label, kind}
    this.caption = '';
    this.done = false;
    this.outcome = null;
    this.custom = {}; // scene-owned state, changed only by the scene's own apply hook
    this.keepers = {}; // client id -> the core's SessionKeeper: the client's own view of its lease
    this.milestone = null; // the story milestone reached in this step, if any {n, label, focus}
    this.milestones = []; // every milestone so far {t, n, label}
  }

  dispose() {
    for (const n of Object.values(this.nodes)) n.core.free?.();
    for (const s of Object.values(this.stores)) s.gate?.free?.();
    for (const k of Object.values(this.keepers)) k.free?.();
  }

  /** The client's lease by its own clock (the core's SessionKeeper) at `at` (default now), or null. */
  lease(id, at = this.t) {
    const k = this.keepers[id];
    return k ? k.lease(at) : null;
  }

  // ------------------------------------------------------------------ apply

  apply(r) {
    switch (r.op) {
      case 'time':
        this.t = r.t;
        this.step += 1;
        this.flashes = [];
        this.milestone = null;
        return;
      case 'node':
        return this.applyNode(r);
      case 'client':
        return this.applyClient(r);
      case 'store':
        return this.applyStore(r);
      case 'core':
        return this.applyCore(r);
      case 'history':
        return this.applyHistory(r);
      case 'write':
        return this.applyWrite(r);
      case 'inbox':
        return this.readInbox(r.id);
      case 'caption':
        this.caption = r.text;
        return;
      case 'milestone':
        // story bookkeeping only: which step is a stop of the guided story, and what to show
        this.milestone = { n: r.n, label: r.label, focus: r.focus || [], yours: !!r.yours };
        this.milestones.push({ t: this.t, n: r.n, label: r.label, yours: !!r.yours });
        return;
      case 'note':
        this.addLog(r.src || 'scene', r.text, r.cls || 'note');
        return;
      case 'flash':
        this.flashes.push({ from: r.from, to: r.to, label: r.label, kind: r.kind || 'msg' });
        return;
      case 'mark':
        this.marks.push({ t: this.t, lane: r.lane, kind: r.kind, label: r.label });
        return;
      case 'done':
        this.done = true;
        this.outcome = r.outcome ?? this.scene.outcome?.(this) ?? null;
        return;
      case 'custom':
        return this.scene.apply(this, r);
      default:
        throw new Error(`unknown record op ${r.op}`);
    }
  }

  addLog(src, text, cls = '') {
    this.log.push({ t: this.t, src, text, cls });
  }

  applyNode(r) {
    if (r.create) {
      const cfg = { sessions: 16, locks: 8, claims: 32, lockDelay: 0, ...r.config };
      this.nodes[r.node] = {
        name: r.node,
        label: r.label || r.node,
        group: r.group || r.node,
        // a replayed recording starts from its snapshot (checked before the page shows it)
        core: r.restore ? this.api.LockService.restore(r.restore.snapshot, r.restore.capacity) : new this.api.LockService(cfg),
        alive: true,
      };
      return;
    }
    Object.assign(this.nodes[r.node], clone(r.set));
    if (r.set?.alive === false) {
      this.addLog(r.node, `${this.nodes[r.node].label} crashed`, 'bad');
      this.marks.push({ t: this.t, lane: r.node, kind: 'crash', label: 'crash' });
    }
  }

  applyClient(r) {
    if (r.create) {
      this.clients[r.id] = {
        id: r.id,
        name: r.name || r.id,
        group: r.group,
        status: 'running', // running | paused | dead
        pausedBy: null,
        session: null,
        token: null, // the token the client BELIEVES it holds
        holding: false,
        waiting: null, // queue position while queued
        lost: false, // it has learnt its session/lock is gone
        grantedAt: null, // when it heard "granted" (its job's clock)
        expiresAt: null,
        inbox: [], // outputs that reached it while paused
        mem: clone(r.mem) || {},
        keeper: clone(r.keeper) || null, // {interval, margin}: this client keeps a SessionKeeper
        sentAt: null, // when its latest open/keep-alive was sent (to acknowledge it)
      };
      return;
    }
    const c = this.clients[r.id];
    const before = c.status;
    if (r.set) Object.assign(c, clone(r.set));
    if (r.mem) Object.assign(c.mem, clone(r.mem));
    if (before !== c.status) {
      if (c.status === 'paused') {
        this.spans.push({ lane: c.id, from: this.t, to: null, kind: 'pause', label: c.pausedBy === 'gc' ? 'GC pause' : 'paused' });
        this.addLog(c.name, c.pausedBy === 'gc' ? `${c.name} enters a stop-the-world GC pause` : `${c.name} paused (by you)`, 'warn');
      } else if (before === 'paused') {
        this.closeSpan(c.id, 'pause');
        if (c.status === 'running') this.addLog(c.name, `${c.name} resumes`, 'warn');
      }
      if (c.status === 'dead') {
        this.closeSpan(c.id, 'hold');
        this.closeSpan(c.id, 'wait');
        // a scene's own crash says so (mem.crashed); your kill is a kill
        this.addLog(c.name, `${c.name} ${c.mem.crashed ? 'crashed' : 'was killed'}`, 'bad');
        this.marks.push({ t: this.t, lane: c.id, kind: 'crash', label: c.mem.crashed ? 'crashed' : 'killed' });
      }
    }
  }

  closeSpan(lane, kind) {
    for (const s of this.spans) if (s.lane === lane && s.kind === kind && s.to === null) s.to = this.t;
  }

  applyStore(r) {
    if (r.create) {
      this.stores[r.store] = {
        name: r.store,
        label: r.label || r.store,
        resource: r.resource,
        lock: r.lock, // the lock that is meant to protect it (to SHOW corruption, not to decide)
        node: r.node,
        quorum: r.quorum || null, // Redlock's nodes: the writer holds if a majority lists it
        fencing: !!r.fencing,
        http: !!r.http,
        gate: r.fencing ? new this.api.FenceGate(r.rows ?? 4) : null,
        rows: [], // {t, by, token, data, accepted, stale, reason}
        contents: {}, // part -> {by, token, stale}: what the resource holds now
        corrupted: false,
      };
    }
  }

  /** Feeds one input to a core and routes its outputs (or its error) to the clients. */
  applyCore(r) {
    const node = this.nodes[r.node];
    const by = r.by ? this.clients[r.by] : null;
    const input = r.input;
    if (!node.alive) {
      this.addLog(r.node, `${node.label} is down: ${fmtInput(input)} lost`, 'bad');
      return [];
    }
    const opens = input.type === 'openSession' || input.type === 'openLabeled';
    if (by?.keeper && (opens || input.type === 'keepAlive')) {
      if (opens) {
        this.keepers[by.id]?.free?.();
        this.keepers[by.id] = new this.api.SessionKeeper(input.ttl, by.keeper.interval, by.keeper.margin);
      }
      this.keepers[by.id].keepAliveSent(this.t);
      by.sentAt = this.t;
    }
    let outs;
    try {
      // every input carries the host's clock: a tick its own `now`, anything else the scene's time
      outs = notesOf(input, callCore(node.core, input, input.now ?? Math.max(this.t, 0)));
    } catch (e) {
      if (!e || typeof e.code !== 'string') throw e;
      // the advance to the input's now stands even when the input is refused: its events count
      this.deliver(node, r, by, notesOf(input, { reply: {}, events: e.events ?? [] }));
      this.addLog(node.label, `refused ${fmtInput(input)}: ${e.code} (errno ${e.errno}) — ${e.message}`, 'bad');
      if (by && (e.code === 'unknown_session')) {
        // The service's answer is how a client learns its session is gone.
        this.learnLost(by, `its ${input.type} was refused: ${e.code}`);
      }
      if (by) this.flashes.push({ from: by.id, to: r.node, label: `${input.type} ✗`, kind: 'bad' });
      return [];
    }
    if (input.type !== 'tick' || outs.length) {
      // (opening a session is bookkeeping: not drawn, so the first frame shows the acquire)
      if (by && r.quiet !== true && !opens) this.flashes.push({ from: by.id, to: r.node, label: shortInput(input), kind: 'msg' });
    }
    if (r.via) this.addLog(node.label, `${r.via}: ${fmtInput(input)}`, 'in');
    else if (input.type !== 'tick' && !(r.quiet && (input.type === 'keepAlive' || input.type === 'watch'))) {
      this.addLog(by ? by.name : node.label, `→ ${node.label}: ${fmtInput(input)}`, 'in');
    }
    this.deliver(node, r, by, outs);
    return outs;
  }

  /** Logs a core's notes and routes them to the clients (unless the record says not to). */
  deliver(node, r, by, outs) {
    for (const o of outs) {
      const cls = { granted: 'good', sessionExpired: 'bad', released: o.reason === 'expired' ? 'bad' : '', busy: 'warn', queued: '' }[o.type] ?? '';
      if (!(r.quiet && o.type === 'sessionRenewed')) this.addLog(node.label, fmtOutput(o), `out ${cls}`);
      if (r.deliver === false) continue;
      this.route(node.group, o, by);
    }
    if (r.deliver !== false) this.requeue(node);
  }

  /**
   * Keeps each waiter's queue position the core's: a Queued answer says where a client
   * joined the queue, and every grant ahead of it moves it up without telling it. After each
   * input, a waiter whose place in the core's queue (`waiters(lock)`) changed gets a new
   * wait span labelled with its place now, so the timeline's bar says what the stage says.
   */
  requeue(node) {
    if (!node.alive) return;
    // lock -> each waiting session's place in the core's queue, read once per input (a map,
    // so that a recording with thousands of waiters costs O(waiters) an input, not their square)
    const lines = new Map();
    for (const c of Object.values(this.clients)) {
      if (c.group !== node.group || c.waiting == null || c.waitLock == null || c.status === 'dead' || !c.session) continue;
      if (!lines.has(c.waitLock)) lines.set(c.waitLock, new Map(node.core.waiters(c.waitLock).map((q, at) => [q.session, at])));
      const i = lines.get(c.waitLock).get(c.session) ?? -1;
      if (i < 0 || i + 1 === c.waiting) continue; // granted or gone: the outputs said so
      c.waiting = i + 1;
      const label = `queued #${c.waiting}`;
      const open = this.spans.find((s) => s.lane === c.id && s.kind === 'wait' && s.to === null);
      if (open && open.from === this.t) open.label = label; // moved up in the step it joined: one bar
      else {
        this.closeSpan(c.id, 'wait');
        this.spans.push({ lane: c.id, from: this.t, to: null, kind: 'wait', label });
      }
    }
  }

  applyHistory(r) {
    if (!r.count) return;
    // Earlier runs of the job: real acquire/release cycles that advance the core's revision,
    // so the scene's first grant carries a token well past 1 (34, 42, ...), as a lock that
    // has been in use for a while would.
    const core = this.nodes[r.node].core;
    const now = Math.max(this.t, 0);
    const { session } = core.openSession(now, 1_000_000).reply;
    let first = null;
    let last = null;
    for (let i = 0; i < r.count; i += 1) {
      const { token } = core.acquire(now, session, r.lock, { mode: 'exclusive', wait: 'none' }).reply;
      first ??= token;
      last = token;
      core.release(now, session, r.lock);
    }
    core.closeSession(now, session);
    this.addLog(this.nodes[r.node].label, `history: ${r.count} earlier runs of ${JSON.stringify(r.lock)} were granted tokens ${first}–${last} (real acquire/release inputs)`, 'note');
  }

  /** Routes one output to the client whose session it names. */
  route(group, o, by) {
    if (o.type === 'sessionOpened' && by) {
      this.sessions[`${group}:${o.session}`] = by.id;
      this.keepers[by.id]?.keepAliveAcked(by.sentAt);
      by.session = o.session;
      by.expiresAt = o.expiresAt;
      by.lost = false;
      return;
    }
    const id = this.sessions[`${group}:${o.session}`];
    const c = id && this.clients[id];
    if (!c) return;
    // the service lane shows the service's truth, whether or not the client can hear it
    if (o.type === 'granted') this.marks.push({ t: this.t, lane: 'svc', kind: 'grant', label: `grant ${o.token} → ${c.name}`, short: `${o.token}→${c.name}` });
    if (o.type === 'released' && o.reason === 'expired') this.marks.push({ t: this.t, lane: 'svc', kind: 'expire', label: `expired ${c.name}, released ${o.token}`, short: `${c.name} expired` });
    else if (o.type === 'released') this.marks.push({ t: this.t, lane: 'svc', kind: 'release', label: `${c.name} released ${o.token}` });
    if (c.status === 'dead') return;
    if (c.status === 'paused' && (o.type === 'granted' || o.type === 'released' || o.type === 'sessionExpired' || o.type === 'holderChanged')) {
      c.inbox.push(o); // a paused process reads nothing; it finds this when it resumes
      this.closeSpanFor(c, o);
      return;
    }
    this.believe(c, o);
  }

  closeSpanFor(c, o) {
    // The lane shows the service's truth: the hold ends when the core says so, even if the
    // paused client has not heard yet.
    if (o.type === 'released' || o.type === 'sessionExpired') {
      this.closeSpan(c.id, 'hold');
      if (o.type === 'released') this.spans.push({ lane: c.id, from: this.t, to: null, kind: 'ghost', label: `still believes ${o.token}` });
    }
  }

  believe(c, o) {
    switch (o.type) {
      case 'granted':
        c.token = o.token;
        c.holding = true;
        c.grantedAt = this.t;
        c.waiting = null;
        this.closeSpan(c.id, 'wait');
        this.spans.push({ lane: c.id, from: this.t, to: null, kind: 'hold', label: `holds ${o.token}` });
        this.flashes.push({ from: this.nodeOfGroup(c.group), to: c.id, label: `granted ${o.token}`, kind: 'good' });
        break;
      case 'queued':
        c.waiting = o.position;
        c.waitLock = o.lock;
        this.spans.push({ lane: c.id, from: this.t, to: null, kind: 'wait', label: `queued #${o.position}` });
        this.flashes.push({ from: this.nodeOfGroup(c.group), to: c.id, label: `queued #${o.position}`, kind: 'msg' });
        break;
      case 'busy':
        this.flashes.push({ from: this.nodeOfGroup(c.group), to: c.id, label: 'busy', kind: 'warn' });
        break;
      case 'sessionRenewed':
        c.expiresAt = o.expiresAt;
        if (c.sentAt != null) this.keepers[c.id]?.keepAliveAcked(c.sentAt);
        break;
      case 'released':
        this.closeSpan(c.id, 'hold');
        this.closeSpan(c.id, 'ghost');
        if (o.token === c.token) {
          c.holding = false;
          c.token = null;
        }
        break;
      case 'sessionExpired':
        this.closeSpan(c.id, 'wait');
        this.learnLost(c, 'the service expired its session');
        break;
      case 'sessionClosed':
        // its holds end with their own released notes; a wait ends with the session
        c.session = null;
        this.endWait(c);
        break;
      case 'waitCancelled':
      case 'waitTimedOut':
        if (o.lock === c.waitLock) this.endWait(c);
        break;
      case 'holderChanged':
        // a watcher's news of a holder of the lock it watches, in the order it reads them
        (c.feed ??= []).push({ t: this.t, lock: o.lock, holder: o.holder, mode: o.mode, token: o.token, change: o.change, label: o.label });
        break;
      default:
        break;
    }
  }

  /** The client is no longer in a queue: its badge and its timeline bar say so. */
  endWait(c) {
    c.waiting = null;
    c.waitLock = null;
    this.closeSpan(c.id, 'wait');
  }

  learnLost(c, why) {
    if (c.lost) return;
    this.keepers[c.id]?.sessionLost();
    c.lost = true;
    c.holding = false;
    c.token = null;
    c.waiting = null;
    this.closeSpan(c.id, 'ghost');
    this.closeSpan(c.id, 'hold');
    this.addLog(c.name, `${c.name} learns it lost the lock: ${why}`, 'warn');
  }

  readInbox(id) {
    const c = this.clients[id];
    const pending = c.inbox;
    c.inbox = [];
    for (const o of pending) {
      if (o.type === 'granted' || o.type === 'holderChanged') this.believe(c, o);
      else if (o.type === 'released' && o.token === c.token) this.learnLost(c, `its hold ${o.token} was released (${o.reason}) while it was paused`);
      else if (o.type === 'sessionExpired') this.learnLost(c, 'its session expired while it was paused');
    }
  }

  nodeOfGroup(group) {
    const n = Object.values(this.nodes).find((x) => x.group === group && x.alive);
    return n ? n.name : group;
  }

  /** A write to the storage carrying a token. The gate (if any) decides; nothing else does. */
  applyWrite(r) {
    const s = this.stores[r.store];
    const c = this.clients[r.by];
    const row = { t: this.t, by: c.name, byId: c.id, token: r.token, data: r.data, part: r.part ?? null, accepted: true, stale: false, reason: '' };
    if (s.gate) {
      // What the gate had seen when this write arrived, asked of the gate itself (captions
      // explain an acceptance by it).
      row.highestBefore = s.gate.highest(s.resource);
      try {
        s.gate.admit(s.resource, r.token);
      } catch (e) {
        if (!e || typeof e.code !== 'string') throw e;
        row.accepted = false;
        row.reason = e.code === 'stale' ? `stale: ${e.token} < ${e.highest}` : e.code;
        row.highest = e.highest;
      }
    }
    // Show what the fence would have prevented (or wrongly refused): does the lock service
    // (the core; for Redlock a majority of its cores) still list this writer's grant? It is
    // only an observation for the picture; neither store acts on it. The lock is the
    // store's, or the one a record names (a recording's write is judged against the lock
    // whose grant its token was); a write whose token the page cannot place (`unknown`) is
    // judged neither current nor stale.
    const lock = r.lock ?? s.lock;
    if (r.unknown) row.unknown = true;
    else {
      const current = this.writerHolds(s, c, r.token, lock);
      if (row.accepted && !current) {
        row.stale = true;
        s.corrupted = true;
      }
      if (!row.accepted && current) row.legit = true;
    }
    // What the lock service listed for that lock as the write arrived (observations for the
    // captions): its holders, as client ids, and the lock-delay it was held back by.
    const node = this.nodes[s.node];
    if (!s.quorum && node?.alive && lock) {
      row.holders = node.core.holders(lock).map((h) => this.sessions[`${node.group}:${h.session}`] ?? null);
      const until = node.core.lockDelayUntil(lock);
      row.delayUntil = until == null ? null : Number(until);
    }
    if (row.accepted && r.part) s.contents[r.part] = { by: c.name, token: r.token, stale: row.stale };
    s.rows.push(row);
    const status = s.http ? (row.accepted ? '200 OK' : '412 Precondition Failed') : row.accepted ? 'accepted' : 'refused';
    row.status = status;
    const what = `${c.name} writes ${JSON.stringify(r.data)} with ${r.what ?? 'token'} ${r.token} → ${status}${row.reason ? ` (${row.reason})` : ''}${row.unknown ? ' (writer unknown: no holder or recorded grant has this token)' : ''}`;
    this.addLog(s.label, what, row.accepted ? (row.stale ? 'bad' : 'good') : 'refused');
    this.flashes.push({ from: c.id, to: r.store, label: `write ${r.token}`, kind: row.accepted ? (row.stale ? 'bad' : 'good') : 'refused' });
    this.marks.push({ t: this.t, lane: c.id, kind: row.accepted ? (row.stale ? 'corrupt' : 'ok') : 'refused', label: `${r.token}` });
    this.marks.push({ t: this.t, lane: r.store, kind: row.accepted ? (row.stale ? 'corrupt' : 'ok') : 'refused', label: row.accepted ? `${r.token} ${s.http ? '200' : '✓'}` : `${r.token} ${s.http ? '412' : '✗'}` });
    // (a dead sender learns nothing: its write was already on the wire)
    if (!row.accepted && c.status !== 'dead') this.learnLost(c, `the storage refused token ${r.token} (highest ${row.highest})`);
  }

  /** Does the core (or a majority of the quorum's cores) list `c`'s grant of `token` of `lock` now? */
  writerHolds(s, c, token, lock = s.lock) {
    if (s.quorum) {
      const mine = s.quorum.filter((n) => {
        const node = this.nodes[n];
        return node && node.alive && node.core.holders(lock).some((h) => this.sessions[`${node.group}:${h.session}`] === c.id);
      });
      return isMajority(mine.length, s.quorum.length);
    }
    const node = this.nodes[s.node];
    const holders = node && node.alive && lock ? node.core.holders(lock) : [];
    return holders.some((h) => h.token === token && this.sessions[`${node.group}:${h.session}`] === c.id);
  }

  highest(storeName) {
    const s = this.stores[storeName];
    if (!s.gate) return null;
    return s.gate.highest(s.resource);
  }
}

function shortInput(i) {
  switch (i.type) {
    case 'keepAlive':
      return 'heartbeat';
    case 'openSession':
      return 'open session';
    case 'acquire':
      return i.wait === 'none' ? 'try-lock' : 'acquire';
    default:
      return i.type;
  }
}

/**
 * Dispatches an input record to the wasm API's typed methods, stamped with the host's
 * clock `now`. Returns the core's answer: `{reply, events}`.
 */
export function callCore(core, i, now) {
  const acquire = { mode: i.mode || 'exclusive', wait: i.wait ?? 'forever' };
  switch (i.type) {
    case 'openSession':
      return core.openSession(now, i.ttl);
    case 'openLabeled':
      return core.handle({ kind: 'open_labeled', now, ttl: i.ttl, label: i.label });
    case 'watch':
      return core.handle({ kind: 'watch', now, session: i.session, lock: i.lock });
    case 'unwatch':
      return core.handle({ kind: 'unwatch', now, session: i.session, lock: i.lock });
    case 'keepAlive':
      return core.keepAlive(now, i.session);
    case 'closeSession':
      return core.closeSession(now, i.session);
    case 'acquire':
      return core.acquire(now, i.session, i.lock, acquire);
    case 'release':
      return core.release(now, i.session, i.lock);
    case 'cancel':
      return core.cancel(now, i.session, i.lock);
    case 'campaign':
      return core.campaign(now, i.session, i.election);
    case 'resign':
      return core.resign(now, i.session, i.election);
    case 'tick':
      return core.tick(now);
    default:
      throw new Error(`unknown input ${i.type}`);
  }
}

// Event kinds (the core's Output::kind()) in the words of the demo's notes.
const EVENT_NOTE = { granted: 'granted', released: 'released', session_expired: 'sessionExpired', wait_timed_out: 'waitTimedOut', holder_changed: 'holderChanged' };

/**
 * The demo's log and clients speak in notes — what the service told which session —
 * named as the scenes and the log know them ({type: 'granted', session, lock, mode,
 * token}, {type: 'sessionExpired', session}, …). The caller's reply becomes the note for
 * the caller's own session (with the lock it asked about), first; each event becomes the
 * note for the session it names, in order.
 */
export function notesOf(input, { reply, events }) {
  const session = input.session;
  const lock = input.lock ?? input.election;
  const own = {
    opened: () => ({ type: 'sessionOpened', session: reply.session, expiresAt: reply.expiresAt }),
    kept_alive: () => ({ type: 'sessionRenewed', session, expiresAt: reply.expiresAt }),
    closed: () => ({ type: 'sessionClosed', session }),
    granted: () => ({ type: 'granted', session, lock, mode: reply.mode, token: reply.token }),
    queued: () => ({ type: 'queued', session, lock, mode: reply.mode, position: reply.position }),
    busy: () => ({ type: 'busy', session, lock }),
    released: () => ({ type: 'released', session, lock, token: reply.token, reason: 'released' }),
    cancelled: () => ({ type: 'waitCancelled', session, lock }),
    watching: () => ({ type: 'watching', session, lock, holders: reply.holders }),
    unwatched: () => ({ type: 'unwatched', session, lock }),
  }[reply.kind];
  // a tick's reply ("ticked") tells no session anything
  const notes = own ? [own()] : [];
  // each note keeps the reply or event it was made from, unenumerated (routing and the
  // timeline read the note; the log prints this, verbatim)
  const keep = (note, wire, replyTo) => Object.defineProperties(note, { wire: { value: { ...wire } }, replyTo: { value: replyTo } });
  if (own) keep(notes[0], reply, reply.kind === 'opened' ? reply.session : session);
  for (const e of events) {
    const { kind, ...fields } = e;
    notes.push(keep({ type: EVENT_NOTE[kind] ?? kind, ...fields }, e, undefined));
  }
  return notes;
}
