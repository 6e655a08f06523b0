// The typed fast path (acquireFast / releaseFast, replyValue, pendingEvents, takeEvents,
// lastError) against the object API, and its id calls (internName, acquireFastId /
// releaseFastId) against both: the same inputs applied to three services, one through
// each path, must give the same reply, number, events, error and snapshot bytes at every
// step, refusals included; a refusal made before the core changes nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LockService, hex, rng, seed, thrown } from './pkg.mjs';

const caps = { sessions: 4, locks: 4, claims: 8 };
const KINDS = ['opened', 'kept_alive', 'closed', 'granted', 'queued', 'busy', 'released',
  'cancelled', 'hold_ended', 'wait_ended', 'ticked', 'watching', 'unwatched'];
const MODES = ['exclusive', 'shared'];
const WAITS = ['none', 'forever'];

// The object API's options for the fast path's codes (codes out of range are passed on
// as values the object API refuses the same way: bad_argument).
function options(mode, wait, until, request, count, limit) {
  const m = mode === 2 ? { permits: count, limit } : (MODES[mode] ?? `mode ${mode}`);
  const w = wait === 2 ? { until } : (WAITS[wait] ?? `wait ${wait}`);
  return request === undefined ? { mode: m, wait: w } : { mode: m, wait: w, request };
}

// The value replyValue() gives for an object reply.
function value(reply) {
  return reply.token ?? reply.position ?? reply.session ?? reply.expiresAt ?? reply.now ??
    reply.holders ?? 0;
}

// Applies one input to both services and asserts they agree; returns the reply code and
// the object API's error code (null when it answered).
// The id-path service that follows each `fast` service (see pair()).
const twins = new WeakMap();

function both(obj, fast, input) {
  const ids = twins.get(fast);
  const before = hex(fast.snapshot());
  let answer, err;
  try {
    answer = input.kind === 'acquire'
      ? obj.acquire(input.now, input.session, input.lock,
        options(input.mode, input.wait, input.until, input.request, input.count, input.limit))
      : obj.release(input.now, input.session, input.lock, input.request);
  } catch (e) {
    err = e;
  }
  const code = input.kind === 'acquire'
    ? fast.acquireFast(input.now, input.session, input.lock, input.mode, input.wait,
      input.until, input.request, input.count, input.limit)
    : fast.releaseFast(input.now, input.session, input.lock, input.request);
  const events = fast.takeEvents();
  assert.equal(fast.pendingEvents(), 0);
  const what = JSON.stringify(input);
  if (err) {
    assert.equal(code, -err.errno, `${what}: errno ${err.code}`);
    const fe = fast.lastError();
    assert.equal(fe.code, err.code, what);
    // The same text, but for a mode or wait code out of its list (the object API names
    // the strings it takes there, the fast path the codes): among these inputs, the
    // bad_argument of a name that is a string is the lone surrogate's, whose text is shared.
    const codeRefused = err.code === 'bad_argument' && typeof input.lock === 'string' && !/[\ud800-\udfff]/.test(input.lock);
    if (!codeRefused) assert.equal(fe.message, err.message, what);
    assert.equal(fe.constructor, err.constructor, what);
    assert.deepEqual(events, err.events ?? [], what);
    assert.equal(fast.lastError(), null, 'lastError is read once');
    if (['out_of_range', 'bad_argument'].includes(err.code)) {
      assert.equal(hex(fast.snapshot()), before, `${what}: a refused argument changes nothing`);
    }
  } else {
    assert.equal(KINDS[code], answer.reply.kind, what);
    assert.equal(fast.replyValue(), value(answer.reply), what);
    assert.deepEqual(events, answer.events, what);
    assert.equal(fast.lastError(), null);
  }
  assert.equal(hex(fast.snapshot()), hex(obj.snapshot()), `${what}: same state`);
  if (ids) byId(ids, input, code, events, err, fast);
  return [code, err ? err.code : null];
}

// The id of a lock name on the service `ids` (interned on first use), or null for a value
// internName refuses (a name no lock can have: the string paths' own refusals cover it).
function idOf(ids, lock) {
  ids.interned ??= new Map();
  if (!ids.interned.has(lock)) {
    let id = null;
    try { id = ids.internName(lock); } catch { /* not a name */ }
    ids.interned.set(lock, id);
  }
  return ids.interned.get(lock);
}

// Applies `input` through the id calls and asserts the string fast path's answer (`code`,
// its events, the object API's error `err`) and the string path's service `fast`: its
// reply's number and its snapshot bytes, just checked against the object API's.
function byId(ids, input, code, events, err, fast) {
  const id = idOf(ids, input.lock);
  const what = `${JSON.stringify(input)} by id`;
  if (id === null) {
    // Keep the id service in step: apply the input through the string path.
    if (input.kind === 'acquire') {
      ids.acquireFast(input.now, input.session, input.lock, input.mode, input.wait,
        input.until, input.request, input.count, input.limit);
    } else {
      ids.releaseFast(input.now, input.session, input.lock, input.request);
    }
    ids.takeEvents(); ids.lastError();
    return;
  }
  const c = input.kind === 'acquire'
    ? ids.acquireFastId(input.now, input.session, id, input.mode, input.wait, input.until,
      input.request, input.count, input.limit)
    : ids.releaseFastId(input.now, input.session, id, input.request);
  assert.equal(c, code, what);
  assert.deepEqual(ids.takeEvents(), events, what);
  if (err) {
    const e = ids.lastError();
    assert.equal(e.code, err.code, what);
    assert.equal(e.constructor, err.constructor, what);
    // the same text but where the object API names its mode/wait strings
    if (err.code !== 'bad_argument') assert.equal(e.message, err.message, what);
  } else {
    assert.equal(ids.lastError(), null, what);
    assert.equal(ids.replyValue(), fast.replyValue(), what);
  }
  assert.equal(hex(ids.snapshot()), hex(fast.snapshot()), `${what}: same state`);
}

function pair() {
  const obj = new LockService(caps);
  const fast = new LockService(caps);
  const ids = new LockService(caps);
  for (let i = 0; i < 3; i++) {
    assert.equal(obj.openSession(0, 50).reply.session, fast.openSession(0, 50).reply.session);
    ids.openSession(0, 50);
  }
  twins.set(fast, ids);
  return [obj, fast, ids];
}

test('acquire and release through the fast path: codes, tokens, positions and events', () => {
  const [obj, fast, ids] = pair();
  const A = (session, lock, mode, wait, extra = {}) => ({ kind: 'acquire', now: 1, session, lock, mode, wait, ...extra });
  const R = (session, lock, extra = {}) => ({ kind: 'release', now: 1, session, lock, ...extra });
  assert.equal(both(obj, fast, A(1, 'a', 0, 0))[0], 3); // granted
  assert.equal(fast.replyValue(), 1); // token 1
  assert.equal(both(obj, fast, A(2, 'a', 0, 0))[0], 5); // busy
  assert.equal(both(obj, fast, A(2, 'a', 0, 1))[0], 4); // queued
  assert.equal(fast.replyValue(), 1); // position 1
  assert.equal(both(obj, fast, A(3, 'a', 0, 2, { until: 9 }))[0], 4);
  assert.equal(fast.replyValue(), 2);
  // Release: session 2 is granted, as an event, which takeEvents() returns as objects.
  fast.releaseFast(1, 1, 'a');
  assert.equal(fast.pendingEvents(), 1);
  const granted = fast.takeEvents();
  assert.equal(granted[0].kind, 'granted');
  obj.release(1, 1, 'a');
  assert.equal(ids.releaseFastId(1, 1, idOf(ids, 'a')), 6);
  assert.deepEqual(ids.takeEvents(), granted);
  assert.equal(both(obj, fast, R(2, 'a', { request: 1 }))[0], 6);
  assert.equal(both(obj, fast, R(2, 'a', { request: 1 }))[0], 6, 'a repeated request replays');
  assert.equal(both(obj, fast, A(1, 's', 2, 0, { count: 2, limit: 3 }))[0], 3);
  assert.equal(both(obj, fast, A(2, 's', 2, 0, { count: 1, limit: 3 }))[0], 3);
  assert.equal(both(obj, fast, A(3, 's', 2, 0, { count: 1, limit: 3 }))[0], 5);
  assert.equal(both(obj, fast, A(3, 'h', 1, 0))[0], 3);
  assert.equal(both(obj, fast, A(1, 'h', 1, 0, { request: 7 }))[0], 3);
  // Events accumulate until taken; a later expiry is reported through takeEvents().
  fast.acquireFast(100, 1, 'x', 0, 0); // session 1 expired: refused, with the advance's events
  assert.equal(fast.lastError().code, 'unknown_session');
  assert.ok(fast.pendingEvents() > 0);
  const expired = fast.takeEvents();
  assert.ok(expired.some((e) => e.kind === 'session_expired'));
  assert.equal(ids.acquireFastId(100, 1, idOf(ids, 'x'), 0, 0), -ids.lastError().errno);
  assert.deepEqual(ids.takeEvents(), expired);
  assert.equal(hex(ids.snapshot()), hex(fast.snapshot()));
});

test('every refusal gives the object API error, as minus its errno, and changes nothing', () => {
  const [obj, fast] = pair();
  both(obj, fast, { kind: 'acquire', now: 2, session: 1, lock: 'held', mode: 0, wait: 0 });
  const A = (over) => ({ kind: 'acquire', now: 2, session: 2, lock: 'l', mode: 0, wait: 0, ...over });
  const R = (over) => ({ kind: 'release', now: 2, session: 2, lock: 'held', ...over });
  const cases = [
    [A({ now: -1 }), 'out_of_range'], [A({ now: 1.5 }), 'out_of_range'],
    [A({ now: NaN }), 'out_of_range'], [A({ now: 2 ** 53 }), 'out_of_range'],
    [A({ session: Infinity }), 'out_of_range'], [A({ request: -3 }), 'out_of_range'],
    [A({ mode: 3 }), 'bad_argument'], [A({ mode: 0.5 }), 'bad_argument'],
    [A({ wait: 7 }), 'bad_argument'], [A({ wait: 2 }), 'out_of_range'],
    [A({ mode: 2, count: 1 }), 'out_of_range'], [A({ mode: 2, count: 1, limit: 2 ** 32 }), 'out_of_range'],
    [A({ lock: 42 }), 'bad_argument'], [A({ lock: 'bad\ud800' }), 'bad_argument'],
    [A({ lock: '' }), 'empty_name'], [A({ lock: 'n'.repeat(65) }), 'name_too_long'],
    [A({ lock: 'x'.repeat(70000) }), 'name_too_long'],
    [A({ session: 9 }), 'unknown_session'], [A({ now: 1 }), 'time_went_backwards'],
    [A({ mode: 2, count: 0, limit: 2 }), 'bad_permits'], [A({ mode: 2, count: 3, limit: 2 }), 'bad_permits'],
    [A({ lock: 'held', mode: 2, count: 1, limit: 2 }), 'limit_mismatch'],
    [A({ session: 1, lock: 'held', mode: 1 }), 'mode_mismatch'],
    [R({}), 'not_holder'], [R({ now: 0.1 }), 'out_of_range'], [R({ lock: null }), 'bad_argument'],
    [R({ session: 1, request: 5 }), null],
    [R({ session: 1, request: 4 }), 'stale_request'],
  ];
  for (const [input, code] of cases) {
    const before = hex(fast.snapshot());
    const [c, got] = both(obj, fast, input);
    assert.equal(got, code, JSON.stringify(input));
    assert.equal(c < 0, code !== null, JSON.stringify(input));
    // Each is refused before the core, or by it at the service's own time (or earlier):
    // nothing changed, not even the time.
    if (code !== null) assert.equal(hex(fast.snapshot()), before, `${JSON.stringify(input)}: changed`);
  }
});

test('random acquire/release sequences agree with the object API step by step', () => {
  const r = rng(seed);
  const [obj, fast] = pair();
  let now = 0;
  for (let i = 0; i < 400; i++) {
    if (r.chance(10)) now += r.below(8);
    const session = 1 + r.below(4); // 4 is unknown
    const lock = r.pick(['a', 'b', 's']);
    const request = r.chance(20) ? r.below(6) : undefined;
    if (r.chance(55)) {
      const mode = lock === 's' ? 2 : r.below(2);
      const wait = r.below(3);
      both(obj, fast, { kind: 'acquire', now, session, lock, mode, wait, until: now + r.below(5),
        request, count: 1 + r.below(2), limit: 3 });
    } else {
      both(obj, fast, { kind: 'release', now, session, lock, request });
    }
  }
});

test('internName: names are judged as every lock name is, and the table is bounded', () => {
  const svc = new LockService({ sessions: 2, locks: 2, claims: 4 });
  const ERR = (fn) => { const e = thrown(fn); return [e.code, e.errno, e.constructor.name]; };
  assert.deepEqual(ERR(() => svc.internName(42)), ['bad_argument', 702, 'TypeError']);
  assert.deepEqual(ERR(() => svc.internName('bad\ud800')), ['bad_argument', 702, 'TypeError']);
  assert.deepEqual(ERR(() => svc.internName('')), ['empty_name', 201, 'Error']);
  assert.equal(thrown(() => svc.internName('n'.repeat(65))).len, 65);
  assert.equal(thrown(() => svc.internName('x'.repeat(70000))).len, 70000);
  const a = svc.internName('a');
  const a2 = svc.internName('a'); // a second row: each call stores a new one
  assert.deepEqual([a, a2], [1, 2]);
  const full = thrown(() => svc.internName('b'));
  assert.deepEqual([full.code, full.errno, full.table], ['capacity_exceeded', 301, 'names']);
  assert.equal(full.message, 'capacity exceeded: the names table is full');
  // Both ids name the same lock; a forgotten id is unknown, its row reused with a new id.
  const s = svc.openSession(0, 10).reply.session;
  assert.equal(svc.acquireFastId(0, s, a, 0, 0), 3);
  const token = svc.replyValue();
  assert.equal(svc.acquireFastId(0, s, a2, 0, 0), 3); // already held: the same token
  assert.equal(svc.replyValue(), token, 'the other id names the same lock');
  svc.forgetName(a);
  const unknown = thrown(() => svc.forgetName(a));
  assert.deepEqual([unknown.code, unknown.errno, unknown.nameId], ['unknown_name', 704, a]);
  assert.equal(unknown.message, 'unknown name id 1 (not given by internName, or forgotten)');
  const b = svc.internName('b');
  assert.equal(b, 2 ** 32 + 1, 'row 0 again, in its next generation');
  assert.deepEqual(svc.holders('a').length, 1, 'forgetting a name leaves its locks alone');
  assert.equal(svc.releaseFastId(0, s, a2), 6);
  for (const bad of [-1, 1.5, NaN, 2 ** 53, Infinity]) {
    assert.equal(thrown(() => svc.forgetName(bad)).code, 'out_of_range', String(bad));
  }
  // An id is a number: another value is refused as out_of_range, never converted ("2",
  // true, [2] or an object whose valueOf gives 2 must not forget id 2; a symbol or a
  // bigint past 2^53 must not throw the engine's untyped TypeError).
  for (const bad of ['2', true, null, [2], { valueOf: () => 2 }, Symbol('2'), 2n ** 64n - 1n]) {
    const e = thrown(() => svc.forgetName(bad));
    assert.deepEqual([e.code, e.errno, e.constructor.name], ['out_of_range', 701, 'RangeError'], String(bad));
  }
  assert.equal(svc.acquireFastId(0, s, a2, 0, 0), 3, 'id 2 is still interned');
  assert.equal(svc.releaseFastId(0, s, a2), 6);
  // a bigint past 2^53 - 1 is out of range, named by its own digits (not a rounded number)
  const big = thrown(() => svc.forgetName(2n ** 64n - 1n));
  assert.equal(big.message, 'out of range: nameId must be at most 2^53-1, got 18446744073709551615');
  assert.equal(thrown(() => svc.forgetName(2n ** 53n)).message, 'out of range: nameId must be at most 2^53-1, got 9007199254740992');
  svc.forgetName(BigInt(a2)); // a bigint is a u64 as anywhere: it names id 2
  assert.equal(thrown(() => svc.forgetName(a2)).code, 'unknown_name');
  // A service with no lock rows has no names; a restored one starts with none.
  assert.equal(thrown(() => new LockService({ sessions: 1, locks: 0, claims: 1 }).internName('a')).table, 'names');
  const copy = LockService.restore(svc.snapshot(), svc.capacity());
  assert.equal(thrown(() => copy.forgetName(b)).code, 'unknown_name');
  assert.equal(copy.internName('c'), 1);
});

test('an unknown or forgotten id is refused before the core: nothing changes, not even time', () => {
  const svc = new LockService(caps);
  const s = svc.openSession(0, 5).reply.session;
  const id = svc.internName('l');
  assert.equal(svc.acquireFastId(1, s, id, 0, 0), 3);
  svc.forgetName(id);
  const before = hex(svc.snapshot());
  // now 9 would expire the session: the refusal comes first, so it does not
  for (const [call, bad] of [
    [() => svc.acquireFastId(9, s, id, 0, 0), id], [() => svc.releaseFastId(9, s, id), id],
    [() => svc.acquireFastId(9, s, 0, 0, 0), 0], [() => svc.releaseFastId(9, s, 77), 77],
    [() => svc.acquireFastId(9, s, 2 ** 32 + 1, 0, 0), 2 ** 32 + 1],
  ]) {
    assert.equal(call(), -704);
    const e = svc.lastError();
    assert.deepEqual([e.code, e.nameId], ['unknown_name', bad]);
    assert.equal(svc.pendingEvents(), 0);
    assert.equal(hex(svc.snapshot()), before);
  }
  // The number checks come first, in acquire's order: now, session, then the id.
  assert.equal(svc.acquireFastId(-1, s, id, 0, 0), -701);
  assert.match(svc.lastError().message, /^out of range: now /);
  assert.equal(svc.acquireFastId(9, s, 0.5, 0, 0), -701);
  assert.match(svc.lastError().message, /^out of range: nameId /);
  assert.equal(svc.acquireFastId(9, s, id, 7, 0), -704, 'the id before the mode');
  svc.lastError();
  assert.equal(hex(svc.snapshot()), before);
  // A live id of the same name reaches the same lock: released by its holder.
  const again = svc.internName('l');
  assert.equal(svc.releaseFastId(1, s, again), 6);
  assert.equal(svc.replyValue(), 1);
});

test('the events the fast path keeps stop at the event limit: buffer_too_small, nothing changed', () => {
  // Watches off: one input emits at most sessions + 2 x claims = 2 + 2 x 2 = 6 events.
  const svc = new LockService({ sessions: 2, locks: 2, claims: 2, maxWatchers: 0 });
  const bound = 6;
  assert.equal(svc.eventLimit(), 2 * bound, 'the default: twice the bound');
  const a = svc.openSession(0, 1000).reply.session;
  const b = svc.openSession(0, 1000).reply.session;
  assert.equal(svc.acquireFast(0, a, 'l', 0, 0), 3);
  // The bound is the core's max_events at capacity: every session open, every claim held
  // or awaited (watches off).
  assert.equal(svc.acquireFast(0, b, 'l', 0, 1), 4);
  assert.equal(svc.maxEvents(), bound);
  assert.equal(svc.releaseFast(0, a, 'l'), 6);
  assert.equal(svc.pendingEvents(), 1);
  // The events are never taken: each round hands the lock on, one grant kept per round.
  let holder = b, waiter = a, t = 1, refused;
  for (; t < 100 && refused === undefined; t++) {
    for (const acquiring of [true, false]) {
      const before = hex(svc.snapshot());
      const kept = svc.pendingEvents();
      const code = acquiring ? svc.acquireFast(t, waiter, 'l', 0, 1) : svc.releaseFast(t, holder, 'l');
      if (code < 0) {
        const err = svc.lastError();
        assert.equal(err.code, 'buffer_too_small');
        assert.equal(code, -err.errno);
        assert.equal(hex(svc.snapshot()), before, 'a refused call changed the service');
        assert.equal(svc.pendingEvents(), kept, 'a refused call kept events');
        refused = { t, acquiring, kept };
        break;
      }
      assert.equal(code, acquiring ? 4 : 6);
      assert.ok(svc.pendingEvents() <= 2 * bound);
    }
    if (refused === undefined) [holder, waiter] = [waiter, holder];
  }
  assert.ok(refused, 'the kept events grew past the limit');
  assert.ok(refused.kept + svc.maxEvents() > 2 * bound, 'refused only when they might not fit');
  assert.equal(svc.takeEvents().length, refused.kept);
  const again = refused.acquiring
    ? svc.acquireFast(refused.t, waiter, 'l', 0, 1)
    : svc.releaseFast(refused.t, holder, 'l');
  assert.equal(again, refused.acquiring ? 4 : 6, 'once taken, the same call is applied');
});

// wasm32's usize is 32 bits: a service whose event bound passes 2^32 - 1 (many holds and
// many watches, with maxWatchers as large) must judge its kept events as a 64-bit host
// does, not saturate the bound and refuse every fast call once one event is kept.
test('an event bound past 2^32 does not refuse the fast path once an event is kept', () => {
  const n = 46341; // holds and watches: n + 2n + (2n + 1) x n > 2^32 - 1
  const svc = new LockService({ sessions: 3, locks: 2 * n + 1, claims: 2 * n + 2, maxWatchers: n });
  const s = svc.openSession(0, 1000).reply.session;
  for (let i = 0; i < n; i++) {
    assert.equal(svc.acquireFast(0, s, `h${i}`, 0, 0), 3);
    assert.deepEqual(svc.watch(0, s, `w${i}`), { reply: { kind: 'watching', holders: 0 }, events: [] });
  }
  const bound = 3 + 2 * (n + 2) + (2 * (n + 2) + 1) * n;
  assert.ok(svc.maxEvents() >= 2 ** 32 - 1, 'the current bound passes a 32-bit usize');
  // One event kept: a release that grants a waiter.
  const a = svc.openSession(0, 1000).reply.session;
  const b = svc.openSession(0, 1000).reply.session;
  assert.equal(svc.acquireFast(0, a, 'q', 0, 0), 3);
  assert.equal(svc.acquireFast(0, b, 'q', 0, 1), 4);
  assert.equal(svc.releaseFast(0, a, 'q'), 6);
  assert.equal(svc.pendingEvents(), 1);
  const code = svc.releaseFast(0, b, 'q');
  assert.equal(code, 6, `refused: ${JSON.stringify(svc.lastError())}`);
  assert.equal(svc.pendingEvents(), 1);
  // The bound passes what a 32-bit limit can say: the largest limit is taken (as many as
  // this target holds), and one below the bound is still refused.
  assert.ok(bound > 2 ** 32 - 1);
  svc.setEventLimit(2 ** 32 - 1);
  assert.equal(svc.eventLimit(), 2 ** 32 - 1);
  assert.equal(svc.acquireFast(0, a, 'q', 0, 1), 3, `refused: ${JSON.stringify(svc.lastError())}`);
  assert.equal(thrown(() => svc.setEventLimit(2 ** 32 - 2)).code, 'bad_argument');
});

test('setEventLimit takes any limit from the bound up and refuses a lower one', () => {
  const svc = new LockService({ sessions: 3, locks: 3, claims: 4 }); // 4 watchers
  const bound = 3 + 2 * 4 + (2 * 4 + 1) * 4;
  assert.equal(svc.eventLimit(), 2 * bound);
  const low = thrown(() => svc.setEventLimit(bound - 1));
  assert.deepEqual([low.code, low.constructor.name], ['bad_argument', 'TypeError']);
  for (const bad of [-1, 1.5, NaN, 2 ** 53]) {
    assert.equal(thrown(() => svc.setEventLimit(bad)).code, 'out_of_range');
  }
  assert.equal(svc.eventLimit(), 2 * bound, 'a refused limit changes nothing');
  svc.setEventLimit(bound);
  assert.equal(svc.eventLimit(), bound);
  // Past what a wasm32 memory could hold, a limit is kept as 2^32 - 1.
  svc.setEventLimit(Number.MAX_SAFE_INTEGER);
  assert.equal(svc.eventLimit(), 2 ** 32 - 1);
  // A snapshot carries no limit: a restored service has the default for its capacity and
  // the snapshot's maxWatchers (here 0: sessions + 2 x claims).
  const off = new LockService({ sessions: 2, locks: 2, claims: 3, maxWatchers: 0 });
  const copy = LockService.restore(off.snapshot(), { sessions: 5, locks: 2, claims: 6 });
  assert.equal(copy.eventLimit(), 2 * (5 + 2 * 6));
});

test('only JS numbers are numbers: anything else is refused before the core, and its valueOf never runs', () => {
  const svc = new LockService(caps);
  const s = svc.acquireFast(0, 1, 'x', 0, 0); // no session yet: unknown_session, a core refusal
  assert.equal(svc.lastError().code, 'unknown_session', String(s));
  svc.openSession(0, 100);
  const id = svc.internName('x');
  const before = hex(svc.snapshot());
  let calls = 0;
  // An argument whose conversion frees the service under the call (a use after free in
  // wasm memory if the engine ran it at the boundary), and one that counts.
  const freeing = { valueOf() { calls++; svc.free(); return 1; } };
  const counting = { valueOf() { calls++; return 1; }, toString() { calls++; return '1'; } };
  const refused = (c, code) => {
    assert.ok(c < 0, `refused, not ${c}`);
    assert.equal(svc.lastError().code, code);
  };
  for (const bad of [freeing, counting, '1', true, null, 1n, [1]]) {
    refused(svc.acquireFast(bad, 1, 'x', 0, 0), 'out_of_range');
    refused(svc.acquireFast(0, bad, 'x', 0, 0), 'out_of_range');
    refused(svc.acquireFast(0, 1, 'x', bad, 0), 'bad_argument');
    refused(svc.acquireFast(0, 1, 'x', 0, bad), 'bad_argument');
    refused(svc.acquireFast(0, 1, 'x', 0, 2, bad), 'out_of_range');
    refused(svc.releaseFast(bad, 1, 'x'), 'out_of_range');
    refused(svc.acquireFastId(0, 1, bad, 0, 0), 'out_of_range');
    refused(svc.releaseFastId(0, bad, id), 'out_of_range');
    if (bad !== null) {
      // an optional number: null and undefined are none, anything else is refused
      refused(svc.acquireFast(0, 1, 'x', 0, 0, undefined, bad), 'out_of_range');
      refused(svc.releaseFastId(0, 1, id, bad), 'out_of_range');
      refused(svc.acquireFast(0, 1, 'x', 2, 0, undefined, undefined, bad, 2), 'out_of_range');
    }
    assert.equal(thrown(() => svc.setEventLimit(bad)).code, 'out_of_range');
  }
  assert.equal(calls, 0, 'no valueOf or toString ran');
  assert.equal(hex(svc.snapshot()), before, 'nothing changed');
  // and the service is whole: the same calls with numbers work
  assert.equal(svc.acquireFast(0, 1, 'x', 0, 0, null, null), 3);
  assert.equal(svc.releaseFastId(0, 1, id, undefined), 6);
});

test('short names cross through the name buffer: every encoding agrees with the object API', () => {
  const [obj, fast] = pair();
  const A = (lock, over) => ({ kind: 'acquire', now: 2, session: 1, lock, mode: 0, wait: 0, ...over });
  const R = (lock, over) => ({ kind: 'release', now: 2, session: 1, lock, ...over });
  // [name, the object API's error for it or null]: at the 64-byte limit in one-, two-,
  // three- and four-byte characters, one character past it (still at most 64 UTF-16
  // units, so still through the buffer), past 64 units (the general way), a lone
  // surrogate (the general way), and names that differ only past their first bytes.
  const cases = [
    ['n'.repeat(64), null], ['é'.repeat(32), null], ['漢'.repeat(21) + 'x', null],
    ['😀'.repeat(16), null], ['é'.repeat(33), 'name_too_long'], ['漢'.repeat(22), 'name_too_long'],
    ['😀'.repeat(17), 'name_too_long'], ['n'.repeat(65), 'name_too_long'],
    ['a\ud800b', 'bad_argument'], ['lock/1', null], ['lock/12', null], ['lock/1\u0000', null],
  ];
  for (const [lock, code] of cases) {
    assert.equal(both(obj, fast, A(lock))[1], code, lock);
    if (code === null) {
      assert.deepEqual(fast.holders(lock).map((h) => h.session), [1], lock);
      assert.equal(both(obj, fast, R(lock))[1], null, lock);
    }
  }
  // A shorter name after a longer one reads only its own bytes.
  assert.equal(both(obj, fast, A('é'.repeat(32)))[1], null);
  assert.equal(both(obj, fast, A('é'))[1], null);
  assert.deepEqual(fast.holders('é').map((h) => h.session), [1]);
  assert.deepEqual(fast.holders('é'.repeat(32)).map((h) => h.session), [1]);
});

test('the name buffer follows the memory when it grows, and a freed service is never written', () => {
  const a = new LockService(caps);
  const s = a.openSession(0, 100).reply.session;
  assert.equal(a.acquireFast(1, s, 'before', 0, 0), 3);
  // A service this large grows the module's memory, which detaches every view of it.
  const big = new LockService({ sessions: 100_000, locks: 100_000, claims: 200_000 });
  assert.equal(a.acquireFast(1, s, 'after', 0, 0), 3);
  assert.deepEqual(a.locks(), ['before', 'after']);
  assert.equal(a.releaseFast(1, s, 'after'), 6);
  big.free();
  // A freed service's buffer may be another service's memory by now: the call must fail
  // as any call on a freed service does, and write nothing there. Services of several
  // sizes are made after the free, so that one of them (whichever the allocator places
  // there) holds its rows where the freed buffer was: a stray write would change it.
  const before = hex(a.snapshot());
  for (let n = 1; n <= 24; n++) {
    const gone = new LockService(caps);
    gone.openSession(0, 100);
    assert.equal(gone.acquireFast(1, 1, 'x', 0, 0), 3); // its buffer's view is made
    gone.free();
    const b = new LockService({ sessions: n, locks: n, claims: 2 * n });
    const t = b.openSession(0, 100).reply.session;
    assert.equal(b.acquireFast(1, t, 'kept', 0, 0), 3);
    const bBefore = hex(b.snapshot());
    assert.throws(() => gone.acquireFast(1, 1, 'z'.repeat(64), 0, 0), /null pointer|freed/i);
    assert.throws(() => gone.releaseFast(1, 1, 'z'.repeat(64)), /null pointer|freed/i);
    assert.equal(hex(b.snapshot()), bBefore, `a service of ${n} rows`);
    assert.equal(b.releaseFast(1, t, 'kept'), 6);
    b.free();
  }
  assert.equal(hex(a.snapshot()), before);
  // The buffer's entry points are the glue's alone.
  for (const m of ['nameBuffer', 'acquireFastBuf', 'releaseFastBuf']) {
    assert.equal(LockService.prototype[m], undefined, m);
  }
});

// The fast paths call the generated methods with Function.prototype.call as it was when
// the module loaded: a page that replaced it (here, with one that frees the service) runs
// nothing between the guard's check and the call into wasm.
test('a replaced Function.prototype.call runs in no fast path', () => {
  const svc = new LockService(caps);
  const s = svc.openSession(0, 100).reply.session;
  const id = svc.internName('l');
  const call = Function.prototype.call;
  let called = 0;
  Function.prototype.call = function freeing() { called += 1; svc.free(); return 0; };
  let codes;
  try {
    codes = [
      svc.acquireFastId(1, s, id, 0, 0),
      svc.releaseFastId(1, s, id),
      svc.acquireFast(1, s, 'x'.repeat(70), 0, 0), // too long for the buffer: the general way
      svc.releaseFast(1, s, 'é'.repeat(40)),
    ];
    svc.setEventLimit(100);
  } finally {
    Function.prototype.call = call;
  }
  assert.equal(called, 0, 'the replaced call ran');
  assert.deepEqual(codes.slice(0, 2), [3, 6]);
  assert.equal(svc.now(), 1, 'the service is alive');
  svc.free();
});
