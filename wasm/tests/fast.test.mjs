// The typed fast path (acquireFast / releaseFast, replyValue, pendingEvents, takeEvents,
// lastError) against the object API: the same inputs applied to two services, one through
// each path, must give the same reply, number, events, error and snapshot bytes at every
// step, refusals included; a refusal made before the core changes nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LockService, hex, rng, seed } from './pkg.mjs';

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
function both(obj, fast, input) {
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
  return [code, err ? err.code : null];
}

function pair() {
  const obj = new LockService(caps);
  const fast = new LockService(caps);
  for (let i = 0; i < 3; i++) {
    assert.equal(obj.openSession(0, 50).reply.session, fast.openSession(0, 50).reply.session);
  }
  return [obj, fast];
}

test('acquire and release through the fast path: codes, tokens, positions and events', () => {
  const [obj, fast] = pair();
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
  assert.equal(fast.takeEvents()[0].kind, 'granted');
  obj.release(1, 1, 'a');
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
  assert.ok(fast.takeEvents().some((e) => e.kind === 'session_expired'));
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
    const [c, got] = both(obj, fast, input);
    assert.equal(got, code, JSON.stringify(input));
    assert.equal(c < 0, code !== null, JSON.stringify(input));
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
