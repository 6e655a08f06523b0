// Every bad-input case: each call throws an Error (RangeError for numbers out of range,
// TypeError for wrong types/shapes) with the right .code and .errno, and leaves the
// state exactly as it was (snapshot() byte-identical, no outputs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LockService, FenceGate, SessionKeeper, hex, thrown } from './pkg.mjs';

const ERRNO = {
  unknown_session: 101, not_holder: 102, not_queued: 103, already_queued: 104, mode_mismatch: 105,
  stale_request: 106, request_reused: 107, empty_name: 201, name_too_long: 202, bad_ttl: 203,
  deadline_overflow: 204, time_went_backwards: 205, bad_config: 206, capacity_exceeded: 301,
  stale: 401, zero_token: 402, bad_frame: 501, buffer_too_small: 502, bad_magic: 503,
  unsupported_version: 504, corrupt_snapshot: 505,
  out_of_range: 701, bad_argument: 702, out_of_memory: 703,
};

function expectError(err, code) {
  assert.equal(err.code, code, `code (message: ${err.message})`);
  assert.equal(err.errno, ERRNO[code], 'errno');
  assert.equal(typeof err.message, 'string');
  assert.ok(err.message.length > 0);
  if (code === 'out_of_range') assert.ok(err instanceof RangeError, 'out_of_range is a RangeError');
  else if (code === 'bad_argument') assert.ok(err instanceof TypeError, 'bad_argument is a TypeError');
  else assert.ok(!(err instanceof RangeError) && !(err instanceof TypeError), `${code} is a plain Error`);
}

/** A service in a non-trivial state: a (1) holds "held" (request 5), b (2) waits for it. */
function busyService() {
  const svc = new LockService({ sessions: 3, locks: 3, claims: 4, maxNameLen: 8 });
  svc.tick(100);
  svc.openSession(50); // a = 1
  svc.openSession(50); // b = 2
  svc.acquire(1, 'held', 'exclusive', 'none', 5);
  svc.acquire(2, 'held', 'exclusive', 'forever');
  svc.acquire(1, 'rd', 'shared', 'none');
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
  ['Infinity', Infinity], ['-Infinity', -Infinity], ['a numeric string', '5'], ['a bigint', 5n],
  ['null', null], ['undefined', undefined], ['an object', { valueOf: () => 3 }], ['a boolean', true],
];

// [name, call, code]: each runs against a fresh busyService().
const serviceCases = [
  // numbers: wrong type, negative, fractional, > 2^53 - 1, in every numeric position
  ...numberGarbage.flatMap(([what, v]) => [
    [`openSession(ttl: ${what})`, (s) => s.openSession(v), 'out_of_range'],
    [`tick(now: ${what})`, (s) => s.tick(v), 'out_of_range'],
    [`keepAlive(session: ${what})`, (s) => s.keepAlive(v), 'out_of_range'],
    [`acquire(session: ${what})`, (s) => s.acquire(v, 'x', 'exclusive', 'none'), 'out_of_range'],
    [`session(id: ${what})`, (s) => s.session(v), 'out_of_range'],
  ]),
  ...numberGarbage
    .filter(([, v]) => v !== null && v !== undefined) // null/undefined = no request number
    .flatMap(([what, v]) => [
      [`keepAlive(request: ${what})`, (s) => s.keepAlive(1, v), 'out_of_range'],
      [`release(request: ${what})`, (s) => s.release(1, 'held', v), 'out_of_range'],
      [`acquire(wait.until: ${what})`, (s) => s.acquire(2, 'x', 'exclusive', { until: v }), 'out_of_range'],
    ]),
  ['closeSession(-0.5)', (s) => s.closeSession(-0.5), 'out_of_range'],
  ['cancel(1.5, …)', (s) => s.cancel(1.5, 'held'), 'out_of_range'],
  ['campaign(2^53, …)', (s) => s.campaign(BIG, 'e'), 'out_of_range'],
  ['resign(-1, …)', (s) => s.resign(-1, 'e'), 'out_of_range'],
  ['handle({tick, now: -1})', (s) => s.handle({ type: 'tick', now: -1 }), 'out_of_range'],
  ['handle({openSession, ttl: "3"})', (s) => s.handle({ type: 'openSession', ttl: '3' }), 'out_of_range'],
  ['handle({acquire, no session})', (s) => s.handle({ type: 'acquire', lock: 'x', mode: 'shared', wait: 'none' }), 'out_of_range'],
  // values that are exact but whose outputs would not be: now + ttl past 2^53 - 1
  ['openSession(2^53 - 1) at now = 100', (s) => s.openSession(BIG - 1), 'out_of_range'],
  ['tick(2^53 - 1) then nothing: a ttl that overflows 2^53', (s) => s.handle({ type: 'openSession', ttl: BIG - 100 }), 'out_of_range'],
  // wrong types and shapes
  ['acquire(lock: 5)', (s) => s.acquire(1, 5, 'exclusive', 'none'), 'bad_argument'],
  ['acquire(lock: String object)', (s) => s.acquire(1, new String('x'), 'exclusive', 'none'), 'bad_argument'],
  ['acquire(lock: lone surrogate)', (s) => s.acquire(1, 'a\ud800', 'exclusive', 'none'), 'bad_argument'],
  ['acquire(mode: "upgrade")', (s) => s.acquire(1, 'x', 'upgrade', 'none'), 'bad_argument'],
  ['acquire(mode: undefined)', (s) => s.acquire(1, 'x', undefined, 'none'), 'bad_argument'],
  ['acquire(wait: "sometimes")', (s) => s.acquire(1, 'x', 'exclusive', 'sometimes'), 'bad_argument'],
  ['acquire(wait: 5)', (s) => s.acquire(1, 'x', 'exclusive', 5), 'bad_argument'],
  ['acquire(wait: [])', (s) => s.acquire(1, 'x', 'exclusive', []), 'bad_argument'],
  ['acquire(wait: {})', (s) => s.acquire(1, 'x', 'exclusive', {}), 'out_of_range'],
  ['release(lock: null)', (s) => s.release(1, null), 'bad_argument'],
  ['cancel(lock: {})', (s) => s.cancel(2, {}), 'bad_argument'],
  ['campaign(election: 1)', (s) => s.campaign(1, 1), 'bad_argument'],
  ['holders(lock: 1)', (s) => s.holders(1), 'bad_argument'],
  ['waiters(lock: undefined)', (s) => s.waiters(), 'bad_argument'],
  ['leader(election: null)', (s) => s.leader(null), 'bad_argument'],
  ['lockDelayUntil(lock: [])', (s) => s.lockDelayUntil([]), 'bad_argument'],
  ['handle(null)', (s) => s.handle(null), 'bad_argument'],
  ['handle("tick")', (s) => s.handle('tick'), 'bad_argument'],
  ['handle([])', (s) => s.handle([]), 'bad_argument'],
  ['handle({type: "explode"})', (s) => s.handle({ type: 'explode' }), 'bad_argument'],
  ['handle({type: "campaign"}) (not a core input)', (s) => s.handle({ type: 'campaign', session: 1, election: 'e' }), 'bad_argument'],
  ['handle(throwing getter)', (s) => s.handle({ get type() { throw new Error('boom'); } }), 'bad_argument'],
  ['handle(getter that re-enters the service)', (s) => s.handle({ type: 'tick', get now() { return s.tick(200); } }), 'bad_argument'],
  ['handle(revoked proxy)', (s) => s.handle(revoked()), 'bad_argument'],
  ['acquire(wait: revoked proxy)', (s) => s.acquire(1, 'x', 'exclusive', revoked()), 'bad_argument'],
  ['handleFrame(revoked proxy)', (s) => s.handleFrame(revoked()), 'bad_argument'],
  ['handleFrame(a detached Uint8Array)', (s) => s.handleFrame(detached()), 'bad_argument'],
  ['handleFrame("0614")', (s) => s.handleFrame('0614'), 'bad_argument'],
  ['handleFrame([6, 20])', (s) => s.handleFrame([6, 20]), 'bad_argument'],
  ['handleFrame(ArrayBuffer)', (s) => s.handleFrame(new ArrayBuffer(2)), 'bad_argument'],
  ['handleFrame(Uint16Array)', (s) => s.handleFrame(new Uint16Array([6, 20])), 'bad_argument'],
  // unknown session, every input that names one
  ['keepAlive(unknown)', (s) => s.keepAlive(99), 'unknown_session'],
  ['closeSession(unknown)', (s) => s.closeSession(99), 'unknown_session'],
  ['acquire(unknown)', (s) => s.acquire(99, 'x', 'exclusive', 'none'), 'unknown_session'],
  ['release(unknown)', (s) => s.release(99, 'held'), 'unknown_session'],
  ['cancel(unknown)', (s) => s.cancel(99, 'held'), 'unknown_session'],
  ['campaign(unknown)', (s) => s.campaign(99, 'e'), 'unknown_session'],
  ['resign(unknown)', (s) => s.resign(99, 'e'), 'unknown_session'],
  ['handle({keepAlive, unknown})', (s) => s.handle({ type: 'keepAlive', session: 0 }), 'unknown_session'],
  // the core's rules
  ['release by a non-holder', (s) => s.release(2, 'held'), 'not_holder'],
  ['cancel without a wait', (s) => s.cancel(1, 'held'), 'not_queued'],
  ['resign from an election never joined', (s) => s.resign(1, 'e'), 'not_queued'],
  ['acquire twice while queued', (s) => s.acquire(2, 'held', 'exclusive', 'forever'), 'already_queued'],
  ['acquire in the other mode', (s) => s.acquire(1, 'rd', 'exclusive', 'none'), 'mode_mismatch'],
  ['an older request number', (s) => s.keepAlive(1, 4), 'stale_request'],
  ['the latest request number for another input', (s) => s.keepAlive(1, 5), 'request_reused'],
  ['an empty lock name', (s) => s.acquire(1, '', 'exclusive', 'none'), 'empty_name'],
  ['a name over maxNameLen', (s) => s.acquire(1, '123456789', 'exclusive', 'none'), 'name_too_long'],
  ['a name over 64 bytes', (s) => s.acquire(1, 'x'.repeat(65), 'exclusive', 'none'), 'name_too_long'],
  ['a name of 2^16 + 1 characters (never copied in)', (s) => s.release(1, 'x'.repeat(2 ** 16 + 1)), 'name_too_long'],
  ['a query with a name of 2^20 characters', (s) => s.holders('y'.repeat(2 ** 20)), 'name_too_long'],
  ['ttl 0', (s) => s.openSession(0), 'bad_ttl'],
  ['time going backwards', (s) => s.tick(99), 'time_went_backwards'],
  ['a full session table', (s) => s.openSession(5), 'capacity_exceeded', (s) => s.openSession(5)],
  ['a full claim pool', (s) => s.acquire(2, 'new2', 'exclusive', 'none'), 'capacity_exceeded', (s) => s.acquire(2, 'new', 'exclusive', 'none')],
  ['a full lock table', (s) => s.acquire(2, 'l3', 'exclusive', 'none'), 'capacity_exceeded', (s) => s.release(1, 'rd') && s.acquire(2, 'l1', 'exclusive', 'none') && s.acquire(2, 'l2', 'exclusive', 'none')],
  // bad frames
  ['an empty frame', (s) => s.handleFrame(new Uint8Array([])), 'bad_frame'],
  ['an unknown input variant', (s) => s.handleFrame(new Uint8Array([0x2a])), 'bad_frame'],
  ['a truncated frame', (s) => s.handleFrame(new Uint8Array([0x03, 0x01])), 'bad_frame'],
  ['trailing bytes', (s) => s.handleFrame(new Uint8Array([0x06, 0x70, 0x00])), 'bad_frame'],
  ['a bad varint', (s) => s.handleFrame(new Uint8Array([0x00, ...Array(11).fill(0xff)])), 'bad_frame'],
  ['a name of 65 bytes', (s) => s.handleFrame(new Uint8Array([0x03, 0x01, 65, ...Array(65).fill(0x61), 0, 0, 0])), 'bad_frame'],
  ['a frame with invalid UTF-8', (s) => s.handleFrame(new Uint8Array([0x04, 0x01, 0x01, 0xff, 0x00])), 'bad_frame'],
  ['a huge frame', (s) => s.handleFrame(new Uint8Array(100_000)), 'bad_frame'],
  ['a 64 MiB frame (refused before it is copied in)', (s) => s.handleFrame(new Uint8Array(64 << 20)), 'bad_frame'],
  // errors the typed API cannot reach, through frames: OpenSession{ttl: u64::MAX}
  ['a frame whose ttl overflows u64', (s) => s.handleFrame(new Uint8Array([0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])), 'deadline_overflow'],
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
    // and the service still works afterwards
    assert.equal(svc.tick(100).length, 0);
  });
}

test('error details: stale_request, time_went_backwards, capacity_exceeded, unknown_session', () => {
  const svc = busyService();
  const e1 = thrown(() => svc.keepAlive(1, 4));
  assert.equal(e1.request, 4);
  assert.equal(e1.latest, 5);
  const e2 = thrown(() => svc.tick(7));
  assert.deepEqual([e2.now, e2.requested], [100, 7]);
  svc.openSession(1);
  const e3 = thrown(() => svc.openSession(1));
  assert.equal(e3.table, 'sessions');
  assert.match(e3.message, /sessions table is full/);
  assert.equal(thrown(() => svc.release(42, 'x')).session, 42);
  assert.equal(thrown(() => svc.acquire(1, 'rd', 'exclusive', 'none')).held, 'shared');
  const long = thrown(() => svc.acquire(1, 'x'.repeat(70), 'exclusive', 'none'));
  assert.deepEqual([long.len, long.max], [70, 64]);
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
  // after all that, the module still allocates and works
  const svc = new LockService({ sessions: 1, locks: 1, claims: 1 });
  assert.equal(svc.openSession(1).length, 1);
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
      r.tick(r.now() + 1000); // expire everything: must not trap
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
    [() => FenceGate.restore(gate.snapshot().slice(0, -1), 4), 'corrupt_snapshot'],
    [() => FenceGate.restore(gate.snapshot(), 1), 'capacity_exceeded'],
    [() => FenceGate.restore([0], 4), 'bad_argument'],
    [() => FenceGate.restore(gate.snapshot(), -4), 'out_of_range'],
  ]) {
    expectError(thrown(call), code);
  }
});

test('FenceGate.restore refuses a token above 2^53 - 1 (made by a u64 host)', () => {
  // GATE_MAGIC "FLGT", version 1, count 1, ("r", u64::MAX)
  const bytes = new Uint8Array([
    0x46, 0x4c, 0x47, 0x54, 0x01, 0x01, 0x01, 0x72,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
  ]);
  expectError(thrown(() => FenceGate.restore(bytes, 4)), 'out_of_range');
  // the same with token 7 restores (so the bytes above are well-formed but for the token)
  const ok = new Uint8Array([0x46, 0x4c, 0x47, 0x54, 0x01, 0x01, 0x01, 0x72, 0x07]);
  assert.deepEqual(FenceGate.restore(ok, 4).entries(), [{ resource: 'r', highest: 7 }]);
});

test('SessionKeeper refuses bad configs, backwards time, unknown acks, bad numbers', () => {
  for (const [args, code] of [
    [[10, 3, 10], 'bad_config'],
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
  expectError(thrown(() => k.heartbeatAcked(0)), 'time_went_backwards'); // nothing sent
  k.heartbeatSent(5);
  expectError(thrown(() => k.heartbeatSent(4)), 'time_went_backwards');
  expectError(thrown(() => k.heartbeatAcked(6)), 'time_went_backwards');
  expectError(thrown(() => k.heartbeatSent(BIG - 5)), 'out_of_range'); // at + ttl past 2^53 - 1
  expectError(thrown(() => k.heartbeatSent(-1)), 'out_of_range');
  expectError(thrown(() => k.lease('5')), 'out_of_range');
  expectError(thrown(() => k.mayAct(NaN)), 'out_of_range');
  expectError(thrown(() => k.heartbeatDue(1.5)), 'out_of_range');
  expectError(thrown(() => k.pollTimeout(-1)), 'out_of_range');
  // nothing changed: the lease is still unconfirmed, the last send is still 5
  assert.deepEqual(k.lease(6), { state: 'unconfirmed' });
  assert.equal(k.heartbeatDue(6), 8);
});

// A snapshot (as a u64 host could write it) of an empty service with the given counters.
function emptySnapshot({ now = 0, nextSession = 1, revision = 0 }) {
  const varint = (n) => {
    const out = [];
    let v = BigInt(n);
    do {
      let b = Number(v & 0x7fn);
      v >>= 7n;
      if (v) b |= 0x80;
      out.push(b);
    } while (v);
    return out;
  };
  // "FLCK", version 1, config {lock_delay 0, max_name_len 64}, now, next_session,
  // revision, next_seq 1, next_lock 1, no sessions, locks or claims
  return new Uint8Array([0x46, 0x4c, 0x43, 0x4b, 1, 0, 64, ...varint(now), ...varint(nextSession),
    ...varint(revision), 1, 1, 0, 0, 0]);
}

test('counters near 2^53: an input whose outputs could not be exact is refused before it applies', () => {
  const MAX = 2 ** 53 - 1;
  // sanity: the crafted bytes are what the service itself writes
  assert.equal(hex(emptySnapshot({})), hex(new LockService({ sessions: 1, locks: 1, claims: 1 }).snapshot()));

  // the next session id would be 2^53: refused, nothing changed
  let svc = LockService.restore(emptySnapshot({ nextSession: 2 ** 53 }), { sessions: 2, locks: 2, claims: 2 });
  let before = hex(svc.snapshot());
  expectError(thrown(() => svc.openSession(5)), 'out_of_range');
  expectError(thrown(() => svc.handle({ type: 'openSession', ttl: 5 })), 'out_of_range');
  assert.equal(hex(svc.snapshot()), before);
  // …while frames, which carry u64, still work
  assert.deepEqual(svc.handleFrame(new Uint8Array([0x00, 0x05])).map(hex), [
    '00' + '8080808080808010' + '05', // SessionOpened{session: varint 2^53, expires_at: 5}
  ]);
  // the last exact id is fine
  svc = LockService.restore(emptySnapshot({ nextSession: MAX }), { sessions: 2, locks: 2, claims: 2 });
  assert.deepEqual(svc.openSession(5), [{ type: 'sessionOpened', session: MAX, expiresAt: 5 }]);

  // revision + claims capacity past 2^53 - 1: a grant could not be exact
  const rev = MAX - 2;
  svc = LockService.restore(emptySnapshot({ revision: rev }), { sessions: 2, locks: 2, claims: 3 });
  before = hex(svc.snapshot());
  expectError(thrown(() => svc.openSession(5)), 'out_of_range');
  assert.equal(hex(svc.snapshot()), before);
  // with room for every possible grant, the same state works up to the last exact token
  svc = LockService.restore(emptySnapshot({ revision: rev }), { sessions: 2, locks: 2, claims: 2 });
  svc.openSession(5);
  assert.deepEqual(svc.acquire(1, 'l', 'exclusive', 'none'), [
    { type: 'granted', session: 1, lock: 'l', mode: 'exclusive', token: MAX - 1 },
  ]);
  assert.equal(svc.revision(), MAX - 1);

  // now + ttl past 2^53 - 1
  svc = LockService.restore(emptySnapshot({ now: MAX - 10 }), { sessions: 2, locks: 2, claims: 2 });
  expectError(thrown(() => svc.openSession(11)), 'out_of_range');
  assert.deepEqual(svc.openSession(10), [{ type: 'sessionOpened', session: 1, expiresAt: MAX }]);
  svc.tick(MAX - 5);
  before = hex(svc.snapshot());
  expectError(thrown(() => svc.keepAlive(1)), 'out_of_range'); // MAX - 5 + 10
  assert.equal(hex(svc.snapshot()), before);

  // a service whose clock is past 2^53 (frames): numeric queries throw, inputs are refused
  svc = LockService.restore(emptySnapshot({ now: 2 ** 60 }), { sessions: 2, locks: 2, claims: 2 });
  expectError(thrown(() => svc.now()), 'out_of_range');
  expectError(thrown(() => svc.tick(MAX)), 'time_went_backwards');
  expectError(thrown(() => svc.openSession(1)), 'out_of_range');
  assert.deepEqual(svc.sessions(), []);
});
