// The "scene" of an opened recording: each recorded line is one step, replayed into a fresh
// wasm core restored from the recording's snapshot (and, for storage lines, a real
// FenceGate), so the page shows the same timeline as the scenes: sessions, holds, queues,
// tokens, expiries, refused writes. The whole recording was already replayed and checked
// line by line (recording.js, verifyRecording) before this scene is built; here every line
// is applied again through the same checks, so the picture is the core's, never the file's.

import { applyEntry } from '../recording.js';
import { notesOf } from '../world.js';
import { storeVerdict } from './facts.js';
import { fmtTime, ticksFor } from '../units.js';

const unhex = (s) => Uint8Array.from(s.match(/../g) ?? [], (b) => parseInt(b, 16));
const MAX_LANES = 8;

/** The sessions, locks and resources a recording names, in order of first mention. */
function cast(rec) {
  const sessions = [];
  const locks = new Map();
  const resources = [];
  const see = (s) => s != null && !sessions.includes(s) && sessions.push(s);
  for (const e of rec.entries) {
    if (e.kind === 'admit') {
      if (!resources.includes(e.admit.resource)) resources.push(e.admit.resource);
      continue;
    }
    if (e.reply?.kind === 'opened') see(e.reply.session);
    see(e.input.session);
    if (e.input.lock) locks.set(e.input.lock, (locks.get(e.input.lock) ?? 0) + 1);
    for (const ev of e.events) {
      see(ev.session);
      if (ev.lock) locks.set(ev.lock, (locks.get(ev.lock) ?? 0) + 1);
    }
  }
  return { sessions, locks: [...locks.entries()].sort((a, b) => b[1] - a[1]).map(([l]) => l), resources };
}

const sid = (s) => `s${s}`;

/** A short form of a recorded input for the log. */
function fmt(i) {
  const args = Object.entries(i).filter(([k]) => k !== 'kind').map(([k, v]) => `${k}: ${typeof v === 'string' ? JSON.stringify(v) : JSON.stringify(v)}`);
  return `${i.kind}(${args.join(', ')})`;
}

/**
 * Builds the scene of a verified recording `rec` (from verifyRecording) named `name`.
 * `lock` picks the lock the service box shows (default: the most mentioned).
 */
export function replayScene(rec, name, { lock } = {}) {
  const { sessions, locks, resources } = cast(rec);
  const shown = sessions.slice(0, MAX_LANES);
  const t0 = rec.entries[0]?.now ?? 0;
  const { tickMs, tickSaid } = rec;
  // the lock the service box shows (a picture only: a write is judged against its own lock)
  const mainLock = lock ?? locks[0] ?? '';
  // token -> {session, lock}, from the recorded grants and releases so far: kept in the
  // world, so every replay into a fresh World (a scrub back) starts from none, as the first
  // pass did
  const tokenOwner = (w) => (w.custom.tokenOwner ??= new Map());

  /**
   * Whose write a token is: the recorded grant (or release) that named it, held while the
   * core still lists that session's hold of that lock with that token (one read); else the
   * session the core lists as holding some lock with that token (a hold from before the
   * recording began: every lock is looked at, but only for a token no line named); else
   * null — a token the page cannot place.
   */
  function placeToken(w, token) {
    const core = w.nodes.svc.core;
    const owner = tokenOwner(w).get(token);
    if (owner) {
      const h = core.hold(owner.session, owner.lock);
      return { ...owner, held: h != null && Number(h.token) === token };
    }
    for (const l of core.locks()) {
      const h = core.holders(l).find((x) => Number(x.token) === token);
      if (h) return { session: Number(h.session), lock: l, held: true };
    }
    return null;
  }

  function ensureClient(w, s) {
    if (s == null || w.clients[sid(s)]) return w.clients[sid(s)];
    w.applyClient({ create: true, id: sid(s), name: `S${s}`, group: 'svc' });
    w.clients[sid(s)].session = s;
    w.sessions[`svc:${s}`] = sid(s);
    return w.clients[sid(s)];
  }

  /** The store of a recorded resource: the first one is the scene's "store". */
  const storeOf = (resource) => (resources.indexOf(resource) === 0 ? 'store' : `store:${resource}`);

  /** Who writes with a token the page cannot place (no holder the core lists, no recorded grant). */
  function unknownWriter(w) {
    if (!w.clients.writer) w.applyClient({ create: true, id: 'writer', name: 'unknown', group: 'svc' });
    return w.clients.writer;
  }

  function apply(w, r) {
    if (r.kind !== 'entry') throw new Error(`unknown scene op ${r.kind}`);
    const e = rec.entries[r.i];
    w.custom.i = r.i + 1;
    w.custom.line = e.line;
    const node = w.nodes.svc;
    if (e.kind === 'admit') {
      // the writer and the lock its token is a grant of, from the core (see placeToken); the
      // write is stale only if that session no longer holds that lock with it
      const owner = placeToken(w, e.admit.token);
      w.custom.admit = owner;
      const by = ensureClient(w, owner?.session) ?? unknownWriter(w);
      const store = storeOf(e.admit.resource);
      w.applyWrite({ store, by: by.id, token: e.admit.token, data: `write with token ${e.admit.token}`, lock: owner?.lock, unknown: !owner });
      return;
    }
    let answer;
    try {
      answer = applyEntry(w.api, node.core, new Map(), e);
    } catch (err) {
      // verified before the scene was built: a difference now is a bug of the page, say so
      w.addLog('replay', `line ${e.line}: ${err.message}`, 'bad');
      return;
    }
    const by = e.reply?.kind === 'opened' ? ensureClient(w, e.reply.session) : ensureClient(w, e.input.session);
    for (const ev of answer.events ?? []) ensureClient(w, ev.session);
    if (e.input.kind !== 'tick') w.addLog(by?.name ?? 'host', `→ service (line ${e.line}): ${fmt(e.input)}`, 'in');
    if (answer.error) {
      w.addLog('Lock service', `refused ${e.input.kind}: ${answer.error}`, 'bad');
      if (by) w.flashes.push({ from: by.id, to: 'svc', label: `${e.input.kind} ✗`, kind: 'bad' });
      if (by && answer.error === 'unknown_session') w.learnLost(by, `its ${e.input.kind} was refused: unknown_session`);
      w.deliver(node, {}, null, notesOf(e.input, { reply: {}, events: answer.events }));
      return;
    }
    if (by && e.input.kind !== 'open_session' && e.input.kind !== 'open_labeled') w.flashes.push({ from: by.id, to: 'svc', label: e.input.kind.replace('_', ' '), kind: e.input.kind === 'keep_alive' ? 'hb' : 'msg' });
    if (e.reply?.kind === 'opened') {
      by.expiresAt = e.reply.expiresAt;
      by.lost = false;
    }
    const notes = notesOf(e.input, answer).filter((n) => n.type !== 'sessionOpened');
    for (const n of notes) {
      // a grant names its token; so does the end of a hold granted before the recording began
      if (n.type === 'granted' || (n.type === 'released' && !tokenOwner(w).has(n.token))) tokenOwner(w).set(n.token, { session: n.session, lock: n.lock });
    }
    w.deliver(node, {}, by, notes);
  }

  /** This step's caption and milestone, from the answer the core gave. */
  function describe(w, e) {
    const who = (s) => `session ${s}`;
    // t counts from the first line; with the header's tick_ms it carries its unit (exact)
    const at = `t=${tickSaid ? fmtTime(e.now - t0, tickMs) : e.now - t0} (now ${e.now}, line ${e.line})`;
    if (e.kind === 'admit') {
      // the row this line wrote, in its own resource's store (the stage draws the first
      // resource's; a refusal by another's is shown on the writer)
      const store = storeOf(e.admit.resource);
      const row = w.stores[store]?.rows.at(-1);
      const owner = w.custom.admit;
      const lk = owner && JSON.stringify(owner.lock);
      const whose = !owner
        ? ''
        : owner.held
          ? ` (${who(owner.session)}'s: the core lists it holding ${lk} with token ${e.admit.token})`
          : ` (${who(owner.session)}'s grant of ${lk}, which the core no longer lists)`;
      const what = `${at}: a write to ${JSON.stringify(e.admit.resource)} with token ${e.admit.token}${whose}`;
      const unknown = owner ? '' : ' Its writer is unknown: no session the core lists holds a lock with that token, and no recorded grant gave it, so the page calls the write neither current nor stale.';
      if (row && !row.accepted) return { text: `${what} is refused by the fence: ${e.admit.token} < ${row.highest}.${unknown}`, label: `${e.admit.token} refused`, focus: [store === 'store' ? store : owner && sid(owner.session)] };
      if (row?.stale) return { text: `${what} is accepted: a stale write landed — the fence had seen no token above ${w.highest(store) ?? e.admit.token}, and ${who(owner.session)} no longer holds ${lk} with it.`, label: `${e.admit.token} stale, landed`, focus: [store === 'store' ? store : sid(owner.session)] };
      return { text: `${what} is accepted; the fence's highest is ${w.highest(store) ?? e.admit.token}.${unknown}`, label: null };
    }
    const parts = [];
    let label = null;
    let focus = [];
    const r = e.reply;
    if (e.error && e.input.kind === 'release_hold') {
      // a forced release of a hold named by its token: the session no longer holds the lock
      // with it (the core, after this line, says whether it holds the lock again, and with what)
      const lock = JSON.stringify(e.input.lock);
      const held = e.error === 'not_holder' && w.nodes.svc?.core.holders(e.input.lock).find((h) => h.session === e.input.session);
      const why = e.error !== 'not_holder' ? '' : held ? ` (it holds ${lock} with token ${held.token} now${held.token > e.input.token ? ', a later hold,' : ','} which stays)` : ` (it does not hold ${lock})`;
      parts.push(`${who(e.input.session)}'s release_hold of ${lock} with token ${e.input.token} is refused: ${e.error}${why}.`);
      label = `${e.input.kind} ✗`;
      focus = [sid(e.input.session)];
    } else if (e.error) {
      parts.push(`${e.input.session != null ? who(e.input.session) : 'the host'}'s ${e.input.kind} is refused: ${e.error}.`);
      label = `${e.input.kind} ✗`;
      focus = [sid(e.input.session)];
    } else if (r.kind === 'opened') parts.push(`${who(r.session)} opens${e.input.label ? ` as ${JSON.stringify(e.input.label)}` : ''}, expiring at now ${r.expiresAt}.`);
    else if (r.kind === 'watching') parts.push(`${who(e.input.session)} watches ${JSON.stringify(e.input.lock)} (${r.holders} holder${r.holders === 1 ? '' : 's'} now).`);
    else if (r.kind === 'unwatched') parts.push(`${who(e.input.session)} stops watching ${JSON.stringify(e.input.lock)}.`);
    else if (r.kind === 'granted') {
      parts.push(`${who(e.input.session)} is granted ${JSON.stringify(e.input.lock)} with token ${r.token}.`);
      label = `${who(e.input.session)} gets ${r.token}`;
      focus = [sid(e.input.session), 'svc'];
    } else if (r.kind === 'queued') parts.push(`${who(e.input.session)} waits for ${JSON.stringify(e.input.lock)} (queue position ${r.position}).`);
    else if (r.kind === 'busy') parts.push(`${who(e.input.session)} is told ${JSON.stringify(e.input.lock)} is busy.`);
    else if (r.kind === 'released' && e.input.kind === 'release_hold') parts.push(`${who(e.input.session)}'s hold of ${JSON.stringify(e.input.lock)} with token ${r.token} is released by its token (release_hold).`);
    else if (r.kind === 'released') parts.push(`${who(e.input.session)} releases ${JSON.stringify(e.input.lock)} (token ${r.token}).`);
    else if (r.kind === 'kept_alive') parts.push(`${who(e.input.session)} keeps its session alive, now until ${r.expiresAt}.`);
    else if (r.kind === 'closed') parts.push(`${who(e.input.session)} closes its session.`);
    else if (r.kind === 'ticked') parts.push(`The service's clock reaches ${r.now}.`);
    else parts.push(`${e.input.kind}: ${r.kind}.`);
    for (const ev of e.events) {
      if (ev.kind === 'session_expired') {
        parts.push(`${who(ev.session)} expired (no keep-alive in time).`);
        label = `${who(ev.session)} expires`;
        focus = ['svc'];
      } else if (ev.kind === 'granted') {
        parts.push(`${who(ev.session)}, waiting, is granted ${JSON.stringify(ev.lock)} with token ${ev.token}.`);
        label = `${who(ev.session)} gets ${ev.token}`;
        focus = ['svc', sid(ev.session)];
      } else if (ev.kind === 'released') parts.push(`${who(ev.session)}'s hold of ${JSON.stringify(ev.lock)} (token ${ev.token}) is released: ${ev.reason}.`);
      else if (ev.kind === 'wait_timed_out') parts.push(`${who(ev.session)}'s wait for ${JSON.stringify(ev.lock)} timed out.`);
      else if (ev.kind === 'holder_changed') parts.push(`${who(ev.session)}, watching ${JSON.stringify(ev.lock)}, is told: ${ev.change} ${ev.label ? JSON.stringify(ev.label) : who(ev.holder)} (token ${ev.token}).`);
    }
    return { text: `${at}: ${parts.join(' ')}`, label, focus };
  }

  function step(w, emit) {
    const i = w.custom.i ?? -1;
    if (i < 0) {
      emit({ op: 'time', t: 0 });
      emit({ op: 'node', create: true, node: 'svc', label: 'Lock service', group: 'svc', restore: { snapshot: unhex(rec.header.snapshot), capacity: rec.header.capacity } });
      resources.forEach((res, k) => emit({ op: 'store', create: true, store: k === 0 ? 'store' : `store:${res}`, label: res.length <= 12 ? `Storage · ${res}` : 'Storage', resource: res, lock: mainLock, node: 'svc', fencing: true, rows: 1 }));
      emit({ op: 'custom', kind: 'start' });
      emit({ op: 'caption', text: `The recording's start: a core restored from its snapshot (${rec.header.capacity.sessions} sessions, ${rec.header.capacity.locks} locks). Play, step or scrub through its ${rec.entries.length} lines.` });
      return;
    }
    const e = rec.entries[i];
    if (!e) {
      emit({ op: 'time', t: w.t });
      emit({ op: 'milestone', n: null, label: 'end of recording', focus: [] });
      emit({ op: 'caption', text: `End of the recording: ${rec.entries.length} lines replayed into a fresh core, every answer the same as recorded.` });
      emit({ op: 'done' });
      return;
    }
    emit({ op: 'time', t: e.now - t0 });
    emit({ op: 'custom', kind: 'entry', i });
    const d = describe(w, e);
    if (d.label) emit({ op: 'milestone', n: w.milestones.filter((m) => m.n != null).length + 1, label: d.label, focus: d.focus.filter(Boolean) });
    emit({ op: 'caption', text: d.text });
  }

  const lanes = [...shown.map((s) => ({ id: sid(s), label: `S${s}` })), ...(resources.length ? [{ id: 'store', label: 'Storage' }] : [])];
  return {
    key: 'replay',
    title: `Recording · ${name}`,
    short: 'Recording',
    lede: `${rec.entries.length} recorded lines from ${rec.header.source ?? 'a host'}, replayed into a fresh core from the recorded snapshot. Search by lock name or session to jump to it.`,
    params: {},
    tryThis: null,
    lock: mainLock,
    locks,
    sessions,
    maxSteps: rec.entries.length + 2,
    tickMs, // one tick of `now`, in ms (the header's tick_ms; a second when it says nothing)
    laneWindow: ticksFor(120, tickMs), // a long recording's timeline shows the 120 s up to the cursor
    lanes,
    clients: shown.map(sid),
    step,
    apply(w, r) {
      if (r.kind === 'start') {
        w.custom.i = 0;
        return;
      }
      apply(w, r);
    },
    outcome: () => null,
    // the store's banner means what it means in the scenes (a recording's storage lines carry
    // no data, so it never sees a stale writer's data beside another's: at most a stale write)
    verdict: (w, store = 'store') => storeVerdict(w, store),
    /** The steps (1-based) whose line names `q` (a lock, a resource, or a session number). */
    find(q) {
      const query = q.trim().replace(/^session\s+/i, '');
      if (!query) return [];
      const num = /^\d+$/.test(query) ? Number(query) : null;
      const hits = [];
      rec.entries.forEach((e, i) => {
        const names = [e.input?.lock, e.admit?.resource, ...(e.events ?? []).map((x) => x.lock)].filter(Boolean);
        const ss = [e.input?.session, e.reply?.session, ...(e.events ?? []).map((x) => x.session)].filter((x) => x != null);
        if ((num != null && ss.includes(num)) || names.some((n) => n.includes(query))) hits.push(i + 2); // step 1 is the setup
      });
      return hits;
    },
    layout: (w, narrow) => {
      const n = shown.length;
      if (narrow) {
        const rows = Math.ceil(n / 4);
        const top = 44;
        // a session appears when the recording first names it; the places are fixed
        const nodes = shown.map((s, k) => ({ id: sid(s), kind: 'client', x: 60 + (k % 4) * 94, y: top + Math.floor(k / 4) * 84, small: true, noLease: true })).filter((x) => w.clients[x.id]);
        const sy = top + rows * 84 + 30;
        nodes.push({ id: 'svc', kind: 'service', x: 200, y: sy, lock: mainLock, compact: true });
        if (resources.length) nodes.push({ id: 'store', kind: 'store', x: 200, y: sy + 100, compact: true });
        return { width: 400, height: sy + (resources.length ? 150 : 50), nodes };
      }
      const H = Math.max(300, 40 + n * 64);
      const nodes = shown.map((s, k) => ({ id: sid(s), kind: 'client', x: 90, y: 34 + k * 64, small: true, side: 'right', noLease: true })).filter((x) => w.clients[x.id]);
      nodes.push({ id: 'svc', kind: 'service', x: 440, y: H / 2, lock: mainLock });
      if (resources.length) nodes.push({ id: 'store', kind: 'store', x: 690, y: H / 2 });
      return { width: 800, height: H, nodes };
    },
  };
}
