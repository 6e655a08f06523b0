// Every bad-input case: each call throws an Error (RangeError for numbers out of range,
// TypeError for wrong types/shapes) with the right .code and .errno, and leaves the
// state exactly as it was (snapshot() byte-identical, no events). The error precedence
// is the core's (docs/SPEC.md §5): a multi-fault input gets the error the core gives.
import os from 'node:os';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { wasm, LockService, FenceGate, SessionKeeper, hex, thrown, varint } from './pkg.mjs';

// The kinds come from the binding (core's Error::EXAMPLES, then its own four), never
// from a list written out here.
const kinds = wasm.errorKinds();
const ERRNO = Object.fromEntries(kinds.map((k) => [k.code, k.errno]));

test('errorKinds(): every core kind once, with its stable number, then the binding\'s', () => {
  assert.equal(new Set(kinds.map((k) => k.code)).size, kinds.length, 'a code twice');
  assert.equal(new Set(kinds.map((k) => k.errno)).size, kinds.length, 'an errno twice');
  assert.deepEqual(kinds.slice(-4), [
    { code: 'out_of_range', errno: 701 },
    { code: 'bad_argument', errno: 702 },
    { code: 'out_of_memory', errno: 703 },
    { code: 'unknown_name', errno: 704 },
  ]);
  // a sample of the core's, incl. the keeper's new kind
  for (const [code, errno] of [['unknown_session', 101], ['time_went_backwards', 205], ['stale', 401], ['unknown_keep_alive', 601]]) {
    assert.equal(ERRNO[code], errno, code);
  }
  // in code order, core kinds below 700
  const core = kinds.slice(0, -4).map((k) => k.errno);
  assert.deepEqual(core, [...core].sort((a, b) => a - b));
  assert.ok(core.every((n) => n > 100 && n < 700));
});

function expectError(err, code) {
  assert.equal(err.code, code, `code (message: ${err.message})`);
  assert.equal(err.errno, ERRNO[code], 'errno');
  assert.equal(typeof err.message, 'string');
  assert.ok(err.message.length > 0);
  if (code === 'out_of_range') assert.ok(err instanceof RangeError, 'out_of_range is a RangeError');
  else if (code === 'bad_argument') assert.ok(err instanceof TypeError, 'bad_argument is a TypeError');
  else assert.ok(!(err instanceof RangeError) && !(err instanceof TypeError), `${code} is a plain Error`);
}

/** A service in a non-trivial state at now = 100: a (1) holds "held" (request 5), b (2) waits for it. */
const NOW = 100;
const X = (wait = 'none', request) => ({ mode: 'exclusive', wait, request });
function busyService() {
  const svc = new LockService({ sessions: 3, locks: 3, claims: 4, maxNameLen: 8 });
  svc.tick(NOW);
  svc.openSession(NOW, 50); // a = 1
  svc.openSession(NOW, 50); // b = 2
  svc.acquire(NOW, 1, 'held', X('none', 5));
  svc.acquire(NOW, 2, 'held', X('forever'));
  svc.acquire(NOW, 1, 'rd', { mode: 'shared', wait: 'none' });
  return svc;
}

const BIG = 2 ** 53;
const revoked = () => {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy; // every operation on it throws, even Array.isArray
};
const detached = () => {
  const b = new Uint8Array([6, 120]);
  structuredClone(b.buffer, { transfer: [b.buffer] });
  return b;
};
const numberGarbage = [
  ['negative', -1], ['fractional', 1.5], ['2^53', BIG], ['huge', 1e300], ['NaN', NaN],
  ['Infinity', Infinity], ['-Infinity', -Infinity], ['a numeric string', '5'], ['a negative bigint', -5n],
  ['a bigint past u64', 2n ** 64n],
  ['null', null], ['undefined', undefined], ['an object', { valueOf: () => 3 }], ['a boolean', true],
];

// [name, call, code]: each runs against a fresh busyService(), at its own now (100), so a
// refused input changes nothing at all.
const serviceCases = [
  // numbers: wrong type, negative, fractional, > 2^53 - 1, in every numeric position
  ...numberGarbage.flatMap(([what, v]) => [
    [`openSession(ttl: ${what})`, (s) => s.openSession(NOW, v), 'out_of_range'],
    [`openSession(now: ${what})`, (s) => s.openSession(v, 5), 'out_of_range'],
    [`tick(now: ${what})`, (s) => s.tick(v), 'out_of_range'],
    [`keepAlive(session: ${what})`, (s) => s.keepAlive(NOW, v), 'out_of_range'],
    [`keepAlive(now: ${what})`, (s) => s.keepAlive(v, 1), 'out_of_range'],
    [`acquire(session: ${what})`, (s) => s.acquire(NOW, v, 'x', X()), 'out_of_range'],
    [`release(now: ${what})`, (s) => s.release(v, 1, 'held'), 'out_of_range'],
    [`session(id: ${what})`, (s) => s.session(v), 'out_of_range'],
  ]),
  ...numberGarbage
    .filter(([, v]) => v !== null && v !== undefined) // null/undefined = no request number
    .flatMap(([what, v]) => [
      [`keepAlive(request: ${what})`, (s) => s.keepAlive(NOW, 1, v), 'out_of_range'],
      [`release(request: ${what})`, (s) => s.release(NOW, 1, 'held', v), 'out_of_range'],
      [`acquire(request: ${what})`, (s) => s.acquire(NOW, 2, 'x', X('none', v)), 'out_of_range'],
      [`acquire(wait.until: ${what})`, (s) => s.acquire(NOW, 2, 'x', X({ until: v })), 'out_of_range'],
    ]),
  ['closeSession(-0.5)', (s) => s.closeSession(NOW, -0.5), 'out_of_range'],
  ['cancel(1.5, …)', (s) => s.cancel(NOW, 1.5, 'held'), 'out_of_range'],
  ['campaign(2^53, …)', (s) => s.campaign(NOW, BIG, 'e'), 'out_of_range'],
  ['resign(-1, …)', (s) => s.resign(NOW, -1, 'e'), 'out_of_range'],
  ['handle({tick, now: -1})', (s) => s.handle({ kind: 'tick', now: -1 }), 'out_of_range'],
  ['handle({open_session, ttl: "3"})', (s) => s.handle({ kind: 'open_session', now: NOW, ttl: '3' }), 'out_of_range'],
  ['handle({acquire, no now})', (s) => s.handle({ kind: 'acquire', session: 1, lock: 'x', mode: 'shared', wait: 'none' }), 'out_of_range'],
  ['handle({acquire, no session})', (s) => s.handle({ kind: 'acquire', now: NOW, lock: 'x', mode: 'shared', wait: 'none' }), 'out_of_range'],
  // wrong types and shapes (no core call can be made with them)
  ['acquire(lock: 5)', (s) => s.acquire(NOW, 1, 5, X()), 'bad_argument'],
  ['acquire(lock: String object)', (s) => s.acquire(NOW, 1, new String('x'), X()), 'bad_argument'],
  ['acquire(lock: lone surrogate)', (s) => s.acquire(NOW, 1, 'a\ud800', X()), 'bad_argument'],
  ['acquire(options: undefined)', (s) => s.acquire(NOW, 1, 'x'), 'bad_argument'],
  ['acquire(options: "exclusive")', (s) => s.acquire(NOW, 1, 'x', 'exclusive'), 'bad_argument'],
  ['acquire(mode: "upgrade")', (s) => s.acquire(NOW, 1, 'x', { mode: 'upgrade', wait: 'none' }), 'bad_argument'],
  ['acquire(mode: undefined)', (s) => s.acquire(NOW, 1, 'x', { wait: 'none' }), 'bad_argument'],
  ['acquire(wait: "sometimes")', (s) => s.acquire(NOW, 1, 'x', X('sometimes')), 'bad_argument'],
  ['acquire(wait: 5)', (s) => s.acquire(NOW, 1, 'x', X(5)), 'bad_argument'],
  ['acquire(wait: [])', (s) => s.acquire(NOW, 1, 'x', X([])), 'bad_argument'],
  ['acquire(wait: undefined)', (s) => s.acquire(NOW, 1, 'x', { mode: 'exclusive' }), 'bad_argument'],
  ['acquire(wait: {})', (s) => s.acquire(NOW, 1, 'x', X({})), 'out_of_range'],
  ['release(lock: null)', (s) => s.release(NOW, 1, null), 'bad_argument'],
  ['cancel(lock: {})', (s) => s.cancel(NOW, 2, {}), 'bad_argument'],
  ['campaign(election: 1)', (s) => s.campaign(NOW, 1, 1), 'bad_argument'],
  ['holders(lock: 1)', (s) => s.holders(1), 'bad_argument'],
  ['hold(lock: 1)', (s) => s.hold(1, 1), 'bad_argument'],
  ['hold(session: -1)', (s) => s.hold(-1, 'x'), 'out_of_range'],
  ['waiters(lock: undefined)', (s) => s.waiters(), 'bad_argument'],
  ['leader(election: null)', (s) => s.leader(null), 'bad_argument'],
  ['lockDelayUntil(lock: [])', (s) => s.lockDelayUntil([]), 'bad_argument'],
  ['handle(null)', (s) => s.handle(null), 'bad_argument'],
  ['handle("tick")', (s) => s.handle('tick'), 'bad_argument'],
  ['handle([])', (s) => s.handle([]), 'bad_argument'],
  ['handle({kind: "explode"})', (s) => s.handle({ kind: 'explode', now: NOW }), 'bad_argument'],
  // the kind is judged before any other field: no now, or a bad one, is not what is wrong
  ['handle({kind: "explode"}) without now', (s) => s.handle({ kind: 'explode' }), 'bad_argument'],
  ['handle({kind: "explode", now: -1})', (s) => s.handle({ kind: 'explode', now: -1 }), 'bad_argument'],
  ['handle({now: -1}) (no kind)', (s) => s.handle({ now: -1 }), 'bad_argument'],
  ['handle({type: "tick"}) (the key is kind)', (s) => s.handle({ type: 'tick', now: NOW }), 'bad_argument'],
  ['handle({kind: "campaign"}) (not a core input)', (s) => s.handle({ kind: 'campaign', now: NOW, session: 1, election: 'e' }), 'bad_argument'],
  ['handle(throwing getter)', (s) => s.handle({ get kind() { throw new Error('boom'); } }), 'bad_argument'],
  ['handle(getter that re-enters the service)', (s) => s.handle({ kind: 'tick', get now() { return s.tick(200); } }), 'bad_argument'],
  ['handle(revoked proxy)', (s) => s.handle(revoked()), 'bad_argument'],
  ['acquire(wait: revoked proxy)', (s) => s.acquire(NOW, 1, 'x', X(revoked())), 'bad_argument'],
  ['acquire(options: revoked proxy)', (s) => s.acquire(NOW, 1, 'x', revoked()), 'bad_argument'],
  ['handleFrame(revoked proxy)', (s) => s.handleFrame(revoked()), 'bad_argument'],
  ['handleFrame(a detached Uint8Array)', (s) => s.handleFrame(detached()), 'bad_argument'],
  ['handleFrame("0664")', (s) => s.handleFrame('0664'), 'bad_argument'],
  ['handleFrame([6, 100])', (s) => s.handleFrame([6, 100]), 'bad_argument'],
  ['handleFrame(ArrayBuffer)', (s) => s.handleFrame(new ArrayBuffer(2)), 'bad_argument'],
  ['handleFrame(Uint16Array)', (s) => s.handleFrame(new Uint16Array([6, 100])), 'bad_argument'],
  // unknown session, every input that names one
  ['keepAlive(unknown)', (s) => s.keepAlive(NOW, 99), 'unknown_session'],
  ['closeSession(unknown)', (s) => s.closeSession(NOW, 99), 'unknown_session'],
  ['acquire(unknown)', (s) => s.acquire(NOW, 99, 'x', X()), 'unknown_session'],
  ['release(unknown)', (s) => s.release(NOW, 99, 'held'), 'unknown_session'],
  ['cancel(unknown)', (s) => s.cancel(NOW, 99, 'held'), 'unknown_session'],
  ['campaign(unknown)', (s) => s.campaign(NOW, 99, 'e'), 'unknown_session'],
  ['resign(unknown)', (s) => s.resign(NOW, 99, 'e'), 'unknown_session'],
  ['handle({keep_alive, unknown})', (s) => s.handle({ kind: 'keep_alive', now: NOW, session: 0 }), 'unknown_session'],
  // multi-fault inputs: the core's precedence, not a check of the binding's own first
  ['acquire(unknown session, empty name)', (s) => s.acquire(NOW, 99, '', X()), 'unknown_session'],
  ['release(unknown session, name over 64 bytes)', (s) => s.release(NOW, 99, 'x'.repeat(65)), 'unknown_session'],
  ['cancel(unknown session, name of 2^16 + 1 characters)', (s) => s.cancel(NOW, 99, 'x'.repeat(2 ** 16 + 1)), 'unknown_session'],
  ['handle({acquire, unknown session, empty name})', (s) => s.handle({ kind: 'acquire', now: NOW, session: 99, lock: '', mode: 'shared', wait: 'none' }), 'unknown_session'],
  ['acquire(time backwards, unknown session, empty name)', (s) => s.acquire(NOW - 1, 99, '', X()), 'time_went_backwards'],
  ['acquire(empty name, stale request)', (s) => s.acquire(NOW, 1, '', X('none', 1)), 'empty_name'],
  ['keepAlive(stale request) at a later now', (s) => s.keepAlive(NOW, 1, 4), 'stale_request'],
  ['acquire(stale request, full claim pool)', (s) => s.acquire(NOW, 2, 'new2', X('none', 0)), 'stale_request', (s) => s.acquire(NOW, 2, 'new', X('none', 1))],
  ['openSession(ttl 0, full session table)', (s) => s.openSession(NOW, 0), 'bad_ttl', (s) => s.openSession(NOW, 5)],
  // the core's rules
  ['release by a non-holder', (s) => s.release(NOW, 2, 'held'), 'not_holder'],
  ['cancel without a wait', (s) => s.cancel(NOW, 1, 'held'), 'not_queued'],
  ['resign from an election never joined', (s) => s.resign(NOW, 1, 'e'), 'not_queued'],
  ['acquire twice while queued', (s) => s.acquire(NOW, 2, 'held', X('forever')), 'already_queued'],
  ['acquire in the other mode', (s) => s.acquire(NOW, 1, 'rd', X()), 'mode_mismatch'],
  ['an older request number', (s) => s.keepAlive(NOW, 1, 4), 'stale_request'],
  ['the latest request number for another input', (s) => s.keepAlive(NOW, 1, 5), 'request_reused'],
  ['an empty lock name', (s) => s.acquire(NOW, 1, '', X()), 'empty_name'],
  ['a name over maxNameLen', (s) => s.acquire(NOW, 1, '123456789', X()), 'name_too_long'],
  ['a name over 64 bytes', (s) => s.acquire(NOW, 1, 'x'.repeat(65), X()), 'name_too_long'],
  ['a name of 2^16 + 1 characters (never copied in)', (s) => s.release(NOW, 1, 'x'.repeat(2 ** 16 + 1)), 'name_too_long'],
  ['ttl 0', (s) => s.openSession(NOW, 0), 'bad_ttl'],
  ['time going backwards', (s) => s.tick(99), 'time_went_backwards'],
  ['an input with a now in the past', (s) => s.keepAlive(99, 1), 'time_went_backwards'],
  ['a ttl that overflows u64', (s) => s.openSession(NOW, 2n ** 64n - 1n), 'deadline_overflow'],
  ['a full session table', (s) => s.openSession(NOW, 5), 'capacity_exceeded', (s) => s.openSession(NOW, 5)],
  ['a full claim pool', (s) => s.acquire(NOW, 2, 'new2', X()), 'capacity_exceeded', (s) => s.acquire(NOW, 2, 'new', X())],
  ['a full lock table', (s) => s.acquire(NOW, 2, 'l3', X()), 'capacity_exceeded', (s) => s.release(NOW, 1, 'rd') && s.acquire(NOW, 2, 'l1', X()) && s.acquire(NOW, 2, 'l2', X())],
  // bad frames
  ['an empty frame', (s) => s.handleFrame(new Uint8Array([])), 'bad_frame'],
  ['an unknown input variant', (s) => s.handleFrame(new Uint8Array([0x2a])), 'bad_frame'],
  ['a truncated frame', (s) => s.handleFrame(new Uint8Array([0x03, 0x64, 0x01])), 'bad_frame'],
  ['trailing bytes', (s) => s.handleFrame(new Uint8Array([0x06, 0x64, 0x00])), 'bad_frame'],
  ['a bad varint', (s) => s.handleFrame(new Uint8Array([0x00, ...Array(11).fill(0xff)])), 'bad_frame'],
  ['a name of 65 bytes', (s) => s.handleFrame(new Uint8Array([0x03, 0x64, 0x01, 65, ...Array(65).fill(0x61), 0, 0, 0])), 'bad_frame'],
  ['a frame with invalid UTF-8', (s) => s.handleFrame(new Uint8Array([0x04, 0x64, 0x01, 0x01, 0xff, 0x00])), 'bad_frame'],
  ['a huge frame', (s) => s.handleFrame(new Uint8Array(100_000)), 'bad_frame'],
  ['a 64 MiB frame (refused before it is copied in)', (s) => s.handleFrame(new Uint8Array(64 << 20)), 'bad_frame'],
  // OpenSession{now: 100, ttl: u64::MAX} through a frame
  ['a frame whose ttl overflows u64', (s) => s.handleFrame(new Uint8Array([0x00, 0x64, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])), 'deadline_overflow'],
];

for (const [name, call, code, setup] of serviceCases) {
  test(`LockService refuses ${name}: ${code}, nothing changed`, () => {
    const svc = busyService();
    if (setup) setup(svc);
    const before = hex(svc.snapshot());
    const poll = svc.pollTimeout();
    const err = thrown(() => call(svc));
    expectError(err, code);
    assert.equal(hex(svc.snapshot()), before, 'the snapshot changed');
    assert.equal(svc.pollTimeout(), poll);
    // a refused input at the service's own now emitted nothing
    if (err.events !== undefined) assert.deepEqual(err.events, []);
    if (err.eventFrames !== undefined) assert.deepEqual(err.eventFrames, []);
    // and the service still works afterwards
    assert.deepEqual(svc.tick(NOW).events, []);
  });
}

test('error details: stale_request, request_reused, time_went_backwards, capacity_exceeded, unknown_session', () => {
  const svc = busyService();
  const e1 = thrown(() => svc.keepAlive(NOW, 1, 4));
  assert.equal(e1.request, 4);
  assert.equal(e1.latest, 5);
  const reused = thrown(() => svc.keepAlive(NOW, 1, 5));
  assert.deepEqual([reused.code, reused.request, reused.latest], ['request_reused', 5, undefined]);
  const e2 = thrown(() => svc.tick(7));
  assert.deepEqual([e2.now, e2.requested], [100, 7]);
  svc.openSession(NOW, 1);
  const e3 = thrown(() => svc.openSession(NOW, 1));
  assert.equal(e3.table, 'sessions');
  assert.match(e3.message, /sessions table is full/);
  assert.equal(thrown(() => svc.release(NOW, 42, 'x')).session, 42);
  assert.equal(thrown(() => svc.acquire(NOW, 1, 'rd', X())).held, 'shared');
  const long = thrown(() => svc.acquire(NOW, 1, 'x'.repeat(70), X()));
  assert.deepEqual([long.len, long.max], [70, 8]);
  // a name never copied in reports its UTF-16 length (a lower bound of its bytes)
  const huge = thrown(() => svc.acquire(NOW, 1, 'y'.repeat(70_000), X()));
  assert.deepEqual([huge.code, huge.len, huge.max], ['name_too_long', 70_000, 8]);
  // A lone surrogate is bad_argument at any length, a name never copied in as well, and
  // refused before the core advances time (as C's INVALID_UTF8 and Python's are).
  const before = svc.snapshot();
  for (const lock of ['a\ud800'.repeat(40_000), 'a\ud800']) {
    assert.equal(thrown(() => svc.acquire(NOW + 5, 1, lock, X())).code, 'bad_argument');
    assert.deepEqual(svc.snapshot(), before, 'nothing changed, time included');
  }
});

test('constructor refuses bad configs and capacities', () => {
  const cases = [
    [undefined, 'bad_argument'],
    [null, 'bad_argument'],
    [[8, 8, 8], 'bad_argument'],
    ['sessions=8', 'bad_argument'],
    [{}, 'out_of_range'],
    [{ sessions: 8, locks: 8 }, 'out_of_range'],
    [{ sessions: -1, locks: 8, claims: 8 }, 'out_of_range'],
    [{ sessions: 8, locks: 1.5, claims: 8 }, 'out_of_range'],
    [{ sessions: 8, locks: 8, claims: BIG }, 'out_of_range'],
    [{ sessions: 8, locks: 8, claims: 8, lockDelay: -1 }, 'out_of_range'],
    [{ sessions: 8, locks: 8, claims: 8, maxNameLen: 2 ** 32 }, 'out_of_range'],
    [{ sessions: 8, locks: 8, claims: 8, maxNameLen: 0 }, 'bad_config'],
    [{ sessions: 8, locks: 8, claims: 8, maxNameLen: 65 }, 'bad_config'],
    [{ sessions: 2 ** 31, locks: 8, claims: 8 }, 'bad_config'],
    [{ sessions: 2 ** 31 - 1, locks: 8, claims: 8 }, 'out_of_memory'],
    [{ sessions: 8, locks: 8, claims: 2 ** 30 }, 'out_of_memory'],
  ];
  cases.push([revoked(), 'bad_argument']);
  for (const [config, code] of cases) {
    expectError(thrown(() => new LockService(config)), code);
  }
  // The core's order: a bad config before a table over the row limit, both before anything
  // is allocated.
  const both = thrown(() => new LockService({ sessions: 2 ** 31, locks: 8, claims: 8, maxNameLen: 0 }));
  expectError(both, 'bad_config');
  assert.match(both.message, /max_name_len/, 'the config is judged before the rows');
  const oversized = thrown(() => new LockService({ sessions: 2 ** 31 - 1, locks: 8, claims: 8, maxNameLen: 65 }));
  expectError(oversized, 'bad_config');
  // after all that, the module still allocates and works
  const svc = new LockService({ sessions: 1, locks: 1, claims: 1 });
  assert.equal(svc.openSession(0, 1).reply.kind, 'opened');
});

test('restore refuses bad snapshots with the right code', () => {
  const svc = busyService();
  const good = svc.snapshot();
  const caps = { sessions: 3, locks: 3, claims: 4 };
  const flip = (i, v) => {
    const b = good.slice();
    b[i] = v;
    return b;
  };
  const cases = [
    [new Uint8Array([]), caps, 'bad_magic'],
    [new Uint8Array([1, 2, 3, 4, 5, 6]), caps, 'bad_magic'],
    [flip(0, 0x58), caps, 'bad_magic'],
    [flip(4, 9), caps, 'unsupported_version'],
    [good.slice(0, good.length - 3), caps, 'corrupt_snapshot'],
    [new Uint8Array([...good, 0]), caps, 'corrupt_snapshot'],
    [good, { sessions: 1, locks: 3, claims: 4 }, 'capacity_exceeded'],
    [good, { sessions: 3, locks: 3, claims: 1 }, 'capacity_exceeded'],
    [Array.from(good), caps, 'bad_argument'],
    [hex(good), caps, 'bad_argument'],
    [good, null, 'bad_argument'],
    [good, revoked(), 'bad_argument'],
    [revoked(), caps, 'bad_argument'],
    [detached(), caps, 'bad_argument'],
    [good, { sessions: 3, locks: 3 }, 'out_of_range'],
    [new Uint8Array(32 << 20), caps, 'bad_magic'], // 32 MiB of zeros: copied, then refused
    // The core's order: what the bytes say before the tables are checked or allocated.
    [new Uint8Array([1, 2, 3]), { sessions: 2 ** 31, locks: 3, claims: 4 }, 'bad_magic'],
    [flip(4, 9), { sessions: 2 ** 31 - 1, locks: 3, claims: 4 }, 'unsupported_version'],
    [good.slice(0, 8), { sessions: 2 ** 31, locks: 3, claims: 4 }, 'corrupt_snapshot'],
    // Arguments come first: a capacity that is no count is refused before the bytes.
    [new Uint8Array([1, 2, 3]), { sessions: 3, locks: 3 }, 'out_of_range'],
  ];
  for (const [bytes, c, code] of cases) {
    expectError(thrown(() => LockService.restore(bytes, c)), code);
  }
  // none of it touched the source service
  assert.equal(hex(svc.snapshot()), hex(good));
  assert.equal(hex(LockService.restore(good, caps).snapshot()), hex(good));
});

// Snapshots are canonical: a corruption is either refused or is itself the snapshot of
// the state it restores to (byte for byte), and that state works.
test('restore: random corruptions are refused, or restore canonically to a working state', () => {
  const svc = busyService();
  const good = svc.snapshot();
  const caps = { sessions: 3, locks: 3, claims: 4 };
  let refused = 0;
  for (let i = 0; i < good.length; i++) {
    for (const v of [0, 1, 0x7f, 0x80, 0xff, good[i] ^ 1]) {
      const b = good.slice();
      b[i] = v;
      let r;
      try {
        r = LockService.restore(b, caps);
      } catch (e) {
        assert.ok(!(e instanceof WebAssembly.RuntimeError), `trapped at byte ${i} = ${v}`);
        assert.ok(e.errno >= 500 && e.errno < 600 || e.code === 'capacity_exceeded' || e.code === 'bad_config', `${e.code} at byte ${i}`);
        refused++;
        continue;
      }
      assert.equal(hex(r.snapshot()), hex(b), `byte ${i} = ${v} restored to a different state`);
      r.tick(BigInt(r.now()) + 1000n); // expire everything: must not trap
      assert.deepEqual(r.sessions(), [], `byte ${i} = ${v}`);
    }
  }
  assert.ok(refused > good.length, `only ${refused} corruptions refused`);
});

test('FenceGate refuses stale, zero, bad names, a full table, bad args; nothing recorded', () => {
  const gate = new FenceGate(2);
  gate.admit('a', 10);
  const cases = [
    [() => gate.admit('a', 9), 'stale'],
    [() => gate.check('a', 9), 'stale'],
    [() => gate.admit('a', 0), 'zero_token'],
    [() => gate.check('b', 0), 'zero_token'],
    [() => gate.admit('', 1), 'empty_name'],
    [() => gate.admit('x'.repeat(65), 1), 'name_too_long'],
    [() => { gate.admit('b', 1); gate.admit('c', 1); }, 'capacity_exceeded'],
    [() => gate.admit('a', -1), 'out_of_range'],
    [() => gate.admit('a', 11.5), 'out_of_range'],
    [() => gate.admit('a', BIG), 'out_of_range'],
    [() => gate.admit('a', '11'), 'out_of_range'],
    [() => gate.admit('a', -11n), 'out_of_range'],
    // the core's order: a zero token before the name
    [() => gate.admit('', 0), 'zero_token'],
    [() => gate.admit('z'.repeat(70_000), 0), 'zero_token'],
    [() => gate.admit('z'.repeat(70_000), 11), 'name_too_long'],
    [() => gate.admit(1, 11), 'bad_argument'],
    [() => gate.check(undefined, 11), 'bad_argument'],
    [() => gate.highest(null), 'bad_argument'],
  ];
  for (const [call, code] of cases) {
    const before = hex(gate.snapshot());
    expectError(thrown(call), code);
    // the capacity case admitted 'b' before 'c' failed: compare from the failing call only
    if (code !== 'capacity_exceeded') assert.equal(hex(gate.snapshot()), before, code);
  }
  assert.equal(gate.highest('a'), 10);
  assert.equal(gate.highest('c'), null);
  const stale = thrown(() => gate.admit('a', 3));
  assert.deepEqual([stale.token, stale.highest], [3, 10]);
  assert.match(stale.message, /token 3 is lower than the highest seen, token 10/);
  // constructor and restore
  for (const [call, code] of [
    [() => new FenceGate(-1), 'out_of_range'],
    [() => new FenceGate('4'), 'out_of_range'],
    [() => new FenceGate(2 ** 31), 'bad_config'],
    [() => new FenceGate(2 ** 31 - 1), 'out_of_memory'],
    [() => FenceGate.restore(new Uint8Array([1, 2, 3]), 4), 'bad_magic'],
    // judged before its rows are allocated: junk is junk at any capacity; a snapshot with
    // resources still needs the rows
    [() => FenceGate.restore(new Uint8Array([1, 2, 3]), 2 ** 31 - 1), 'bad_magic'],
    [() => FenceGate.restore(gate.snapshot(), 2 ** 31 - 1), 'out_of_memory'],
    [() => FenceGate.restore(new Uint8Array([1, 2, 3]), 2 ** 31), 'bad_config'],
    [() => FenceGate.restore(gate.snapshot().slice(0, -1), 4), 'corrupt_snapshot'],
    [() => FenceGate.restore(gate.snapshot(), 1), 'capacity_exceeded'],
    [() => FenceGate.restore([0], 4), 'bad_argument'],
    [() => FenceGate.restore(gate.snapshot(), -4), 'out_of_range'],
  ]) {
    expectError(thrown(call), code);
  }
});

test('FenceGate.restore keeps a token above 2^53 - 1 (made by a u64 host) exactly', () => {
  // GATE_MAGIC "FLGT", version 1, count 1, ("r", u64::MAX)
  const bytes = new Uint8Array([
    0x46, 0x4c, 0x47, 0x54, 0x01, 0x01, 0x01, 0x72,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
  ]);
  const gate = FenceGate.restore(bytes, 4);
  assert.deepEqual(gate.entries(), [{ resource: 'r', highest: 2n ** 64n - 1n }]);
  assert.equal(gate.highest('r'), 2n ** 64n - 1n);
  const stale = thrown(() => gate.admit('r', 2n ** 64n - 2n));
  assert.deepEqual([stale.code, stale.token, stale.highest], ['stale', 2n ** 64n - 2n, 2n ** 64n - 1n]);
  gate.admit('r', 2n ** 64n - 1n);
  assert.equal(hex(gate.snapshot()), hex(bytes));
});

test('SessionKeeper refuses bad configs, backwards time, unknown acks, bad numbers', () => {
  for (const [args, code] of [
    [[10, 3, 10], 'bad_config'],
    [[10, 3, 0], 'bad_config'], // no margin: a tick's phase between the clocks is uncovered
    [[10, 0, 2], 'bad_config'],
    [[10, 8, 2], 'bad_config'],
    [[-10, 3, 2], 'out_of_range'],
    [[10, 3.5, 2], 'out_of_range'],
    [[10, 3, BIG], 'out_of_range'],
    [[10, 3], 'out_of_range'],
  ]) {
    expectError(thrown(() => new SessionKeeper(...args)), code);
  }
  const k = new SessionKeeper(10, 3, 2);
  const never = thrown(() => k.keepAliveAcked(0)); // nothing sent
  expectError(never, 'unknown_keep_alive');
  assert.equal(never.sentAt, 0);
  k.keepAliveSent(5);
  expectError(thrown(() => k.keepAliveSent(4)), 'time_went_backwards');
  expectError(thrown(() => k.keepAliveAcked(6)), 'unknown_keep_alive'); // an ack from the future
  expectError(thrown(() => k.keepAliveAcked(4)), 'unknown_keep_alive'); // never sent at 4
  expectError(thrown(() => k.keepAliveSent(-1)), 'out_of_range');
  expectError(thrown(() => k.keepAliveSent(BIG)), 'out_of_range');
  expectError(thrown(() => k.lease('5')), 'out_of_range');
  expectError(thrown(() => k.mayAct(NaN)), 'out_of_range');
  expectError(thrown(() => k.nextKeepAlive(1.5)), 'out_of_range');
  expectError(thrown(() => k.pollTimeout(-1)), 'out_of_range');
  // nothing changed: the lease is still unconfirmed, the last send is still 5
  assert.deepEqual(k.lease(6), { state: 'unconfirmed' });
  assert.equal(k.nextKeepAlive(6), 8);
  assert.equal(k.heartbeatSent, undefined, 'one word: keep-alive');
});

// A snapshot (as a u64 host could write it) of an empty service with the given counters.
function emptySnapshot({ now = 0, nextSession = 1, revision = 0 }) {
  // "FLCK", version 1, config {lock_delay 0, max_name_len 64}, now, next_session,
  // revision, next_seq 1, next_lock 1, no sessions, locks or claims
  return new Uint8Array([0x46, 0x4c, 0x43, 0x4b, 1, 0, 64, ...varint(now), ...varint(nextSession),
    ...varint(revision), 1, 1, 0, 0, 0]);
}

test('counters near 2^53: inputs apply as in the core, and their answers are exact bigints', () => {
  const MAX = 2 ** 53 - 1;
  // sanity: the crafted bytes are what the service itself writes
  assert.equal(hex(emptySnapshot({})), hex(new LockService({ sessions: 1, locks: 1, claims: 1 }).snapshot()));

  // the next session id is 2^53: the open applies, the id comes out as a bigint
  let svc = LockService.restore(emptySnapshot({ nextSession: 2 ** 53 }), { sessions: 2, locks: 2, claims: 2 });
  assert.deepEqual(svc.openSession(0, 5).reply, { kind: 'opened', session: 2n ** 53n, expiresAt: 5 });
  assert.deepEqual(svc.sessions(), [2n ** 53n]);
  // …and goes back in as one
  assert.deepEqual(svc.acquire(0, 2n ** 53n, 'l', X()).reply, { kind: 'granted', mode: 'exclusive', token: 1 });
  assert.deepEqual(svc.tick(5).events, [
    { kind: 'session_expired', session: 2n ** 53n },
    { kind: 'released', session: 2n ** 53n, lock: 'l', token: 1, reason: 'expired' },
  ]);
  // the same through a frame: OpenSession{now 5, ttl 5} → Opened{session 2^53 + 1, 10}
  assert.equal(hex(svc.handleFrame(new Uint8Array([0x00, 0x05, 0x05])).reply), '00' + '8180808080808010' + '0a');

  // a revision past 2^53 - 1: tokens come out as bigints, the last exact one as a number
  svc = LockService.restore(emptySnapshot({ revision: MAX - 1 }), { sessions: 2, locks: 2, claims: 2 });
  svc.openSession(0, 50);
  assert.deepEqual(svc.acquire(0, 1, 'a', X()).reply, { kind: 'granted', mode: 'exclusive', token: MAX });
  assert.deepEqual(svc.acquire(0, 1, 'b', X()).reply, { kind: 'granted', mode: 'exclusive', token: 2n ** 53n });
  assert.equal(svc.revision(), 2n ** 53n);
  assert.deepEqual(svc.holders('b'), [{ session: 1, mode: 'exclusive', token: 2n ** 53n, label: '' }]);

  // a clock past 2^53 (from frames or a snapshot): queries answer exactly; an input with
  // an earlier now is the core's time_went_backwards, with exact details
  svc = LockService.restore(emptySnapshot({ now: 2 ** 60 }), { sessions: 2, locks: 2, claims: 2 });
  assert.equal(svc.now(), 2n ** 60n);
  const back = thrown(() => svc.tick(MAX));
  expectError(back, 'time_went_backwards');
  assert.deepEqual([back.now, back.requested], [2n ** 60n, MAX]);
  assert.deepEqual(svc.openSession(2n ** 60n, 1).reply, { kind: 'opened', session: 1, expiresAt: 2n ** 60n + 1n });
});

test('an unknown key in any object argument is a bad_argument naming it, and changes nothing', () => {
  const unknown = (fn, key) => {
    const e = thrown(fn);
    assert.ok(e instanceof TypeError, `${e}`);
    assert.equal(e.code, 'bad_argument');
    assert.equal(e.errno, ERRNO.bad_argument);
    assert.equal(e.key, key);
    assert.match(e.message, new RegExp(`unknown key "${key}"`));
  };
  // A typo, lockdelay for lockDelay, is refused: it used to leave lock-delay at 0.
  unknown(() => new LockService({ sessions: 2, locks: 2, claims: 2, lockdelay: 5 }), 'lockdelay');
  unknown(() => new LockService({ sessions: 2, locks: 2, claim: 2 }), 'claim');
  const svc = new LockService({ sessions: 2, locks: 2, claims: 2, lockDelay: 5, maxNameLen: 8 });
  assert.equal(svc.config().lockDelay, 5);
  const a = svc.openSession(0, 10).reply.session;
  const before = hex(svc.snapshot());
  unknown(() => svc.acquire(1, a, 'l', { mode: 'exclusive', wait: 'none', requets: 3 }), 'requets');
  unknown(() => svc.acquire(1, a, 'l', { mode: 'exclusive', wait: { until: 5, unitl: 6 } }), 'unitl');
  unknown(() => svc.handle({ kind: 'tick', now: 1, ttl: 3 }), 'ttl');
  unknown(() => svc.handle({ kind: 'acquire', now: 1, session: a, lock: 'l', mode: 'shared', wait: 'none', extra: 1 }), 'extra');
  unknown(() => LockService.restore(svc.snapshot(), { sessions: 2, locks: 2, claims: 2, lockDelay: 5 }), 'lockDelay');
  // Options that are an array or a function are no object: their keys would go unchecked.
  for (const o of [Object.assign([], { mode: 'exclusive', wait: 'none', reqeust: 7 }),
    Object.assign(() => {}, { mode: 'exclusive', wait: 'none', reqeust: 7 })]) {
    const e = thrown(() => svc.acquire(1, a, 'l', o));
    assert.equal(e.code, 'bad_argument', `${e}`);
    assert.match(e.message, /options must be an object/);
  }
  // Nothing was applied, not even the advance to now = 1.
  assert.equal(hex(svc.snapshot()), before);
  assert.equal(svc.now(), 0);
  // Symbol keys are not options, and known keys with undefined values are fine.
  const opts = { mode: 'exclusive', wait: 'none', request: undefined, [Symbol('tag')]: 1 };
  assert.equal(svc.acquire(1, a, 'l', opts).reply.kind, 'granted');
});

test('a key or keyword of any length is refused without being copied in: a long key is named by its length, and .key is the caller\'s string', () => {
  const svc = new LockService({ sessions: 2, locks: 2, claims: 2 });
  const a = svc.openSession(0, 10).reply.session;
  const before = hex(svc.snapshot());
  // 64 UTF-16 units is the longest key compared (every real key and keyword is shorter)
  const at = 'k'.repeat(64);
  let e = thrown(() => svc.acquire(1, a, 'l', { mode: 'exclusive', wait: 'none', [at]: 1 }));
  expectError(e, 'bad_argument');
  assert.equal(e.key, at);
  assert.match(e.message, new RegExp(`unknown key "${at}"`));
  // past it, and at 2^24 units (32 MB of UTF-16, 48 MB as UTF-8): the message gives the
  // length, not the text, and the thrown .key is the very string passed
  for (const long of ['k'.repeat(65), 'é'.repeat(2 ** 24)]) {
    for (const call of [
      () => svc.acquire(1, a, 'l', { mode: 'exclusive', wait: 'none', [long]: 1 }),
      () => svc.handle({ kind: 'tick', now: 1, [long]: 1 }),
      () => new LockService({ sessions: 2, locks: 2, claims: 2, [long]: 1 }),
    ]) {
      e = thrown(call);
      expectError(e, 'bad_argument');
      assert.ok(e instanceof TypeError);
      assert.equal(e.key, long);
      assert.ok(e.message.length < 200, `a short message: ${e.message.slice(0, 300)}`);
      assert.match(e.message, new RegExp(`unknown key of ${long.length} UTF-16 units \\(known: `));
    }
    // a keyword of that length is none of the keywords: refused as any unknown one is
    expectError(thrown(() => svc.acquire(1, a, 'l', { mode: long, wait: 'none' })), 'bad_argument');
    expectError(thrown(() => svc.acquire(1, a, 'l', { mode: 'exclusive', wait: long })), 'bad_argument');
    expectError(thrown(() => svc.handle({ kind: long, now: 1 })), 'bad_argument');
  }
  // Nothing was applied, and the service goes on.
  assert.equal(hex(svc.snapshot()), before);
  assert.equal(svc.acquire(1, a, 'l', { mode: 'exclusive', wait: 'none' }).reply.kind, 'granted');
  svc.free();
});

test('every bad_frame carries .eventFrames (empty), a frame refused for its length too', () => {
  const svc = busyService();
  for (const frame of [new Uint8Array([]), new Uint8Array([0x2a]), new Uint8Array(100_000), new Uint8Array(64 << 20)]) {
    const err = thrown(() => svc.handleFrame(frame));
    expectError(err, 'bad_frame');
    assert.deepEqual(err.eventFrames, [], `a ${frame.length}-byte frame`);
  }
  // a frame that is not a Uint8Array never reached the core: no frames at all
  assert.equal(thrown(() => svc.handleFrame([6, 100])).eventFrames, undefined);
});

// A typed array may hold 2^32 elements or more (V8 makes one of exactly 2^32): its length
// must not wrap to a small number past the size checks. Each call copies the array once
// on the JS heap (4 GiB, about 4 s), so the test needs that much memory free.
const hugeLength = 2 ** 32;
const roomForHuge = os.freemem() >= 10 * 2 ** 30;
test('byte arrays of 2^32 elements are refused, typed, and the handle stays usable', {
  skip: roomForHuge ? false : 'needs 10 GiB of free memory for 4 GiB copies',
  timeout: 120_000,
}, (t) => {
  let huge;
  try {
    huge = new Uint8Array(hugeLength);
  } catch (e) {
    // An engine without such arrays (or memory for one now) cannot be given one.
    t.skip(`no Uint8Array of 2^32 elements here: ${e.message}`);
    return;
  }
  const svc = busyService();
  const before = hex(svc.snapshot());
  const frame = thrown(() => svc.handleFrame(huge));
  expectError(frame, 'bad_frame');
  const key = thrown(() => svc.setNameKey(huge));
  expectError(key, 'bad_argument');
  assert.match(key.message, /got 4294967296/, 'the whole length, not its low 32 bits');
  const caps = { sessions: 3, locks: 3, claims: 4 };
  // Judged by its header first: zeros are no snapshot, and nothing is copied in.
  expectError(thrown(() => LockService.restore(huge, caps)), 'bad_magic');
  expectError(thrown(() => FenceGate.restore(huge, 4)), 'bad_magic');
  // A header that holds: no more of the rest is copied in than the records it counts
  // can be, so 4 GiB after it is refused without a copy the module could not hold.
  huge.set(svc.snapshot());
  const restore = thrown(() => LockService.restore(huge, caps));
  expectError(restore, 'corrupt_snapshot');
  assert.match(restore.message, /longer than its records can be/);
  assert.equal(hex(svc.snapshot()), before);
  assert.deepEqual(svc.tick(NOW).events, [], 'the service still works');
});
