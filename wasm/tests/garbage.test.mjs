// Garbage in, errors out — never a trap. Seeded random calls of every method with
// hostile arguments (wrong types, edge numbers, throwing proxies, getters that re-enter
// the service, random bytes). Each call either succeeds or throws an Error with a
// string .code; a refused call leaves the snapshot unchanged; a WebAssembly.RuntimeError
// (`unreachable` executed) fails the test. Replay a failure with FENCELOCK_SEED=<seed>.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LockService, FenceGate, SessionKeeper, hex, rng, seed } from './pkg.mjs';

const ROUNDS = 4000;

const revoked = (() => {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy;
})();
const detached = (() => {
  const b = new Uint8Array([6, 2]);
  structuredClone(b.buffer, { transfer: [b.buffer] });
  return b;
})();

function values(r, svc) {
  const bytes = () => new Uint8Array(Array.from({ length: r.below(40) }, () => r.below(256)));
  const pool = [
    0, 1, 2, 3, 5, 10, 64, 65, -1, -0, 0.5, 2 ** 32, 2 ** 53 - 1, 2 ** 53, 2 ** 64, 1e308,
    NaN, Infinity, -Infinity, '', 'l', 'held', 'x'.repeat(64), 'x'.repeat(65), 'é'.repeat(33),
    '\ud800', '\u0000', 'exclusive', 'shared', 'none', 'forever', '1', 5n, -5n, 2n ** 64n,
    null, undefined, true, false, Symbol('s'), {}, [], [1, 2], { until: 3 }, { until: -1 },
    { until: 2 ** 53 }, { type: 'tick', now: 5 }, { type: 'openSession', ttl: 3 },
    { type: 'acquire', session: 1, lock: 'l', mode: 'shared', wait: 'forever', request: 2 },
    { sessions: 2, locks: 2, claims: 2 }, { sessions: 2 ** 40, locks: 1, claims: 1 },
    () => 1, new Uint8Array([0, 10]), new Uint8Array([6, 3]), new ArrayBuffer(4), new Uint16Array(2),
    new Proxy({}, { get() { throw new Error('proxy get'); }, has() { throw new Error('proxy has'); } }),
    { get type() { return svc.tick(1) && 'tick'; }, now: 1 },
    { get until() { return svc.snapshot().length; } }, // re-enters while the service is borrowed
    Object.create(null),
    revoked,
    detached,
    new (class extends Uint8Array { get length() { throw new Error('lying subclass'); } })([6, 1]),
  ];
  return () => (r.chance(15) ? bytes() : r.pick(pool));
}

const serviceMethods = [
  'openSession', 'keepAlive', 'closeSession', 'acquire', 'release', 'cancel', 'tick', 'campaign',
  'resign', 'handle', 'handleFrame', 'now', 'pollTimeout', 'revision', 'holders', 'waiters',
  'session', 'sessions', 'locks', 'leader', 'lockDelayUntil', 'capacity', 'len', 'config', 'snapshot',
];
const gateMethods = ['admit', 'check', 'highest', 'entries', 'snapshot'];
const keeperMethods = ['heartbeatSent', 'heartbeatAcked', 'sessionLost', 'lease', 'mayAct', 'heartbeatDue', 'pollTimeout'];

function call(fn, label) {
  try {
    return { ok: true, value: fn() };
  } catch (e) {
    assert.ok(!(e instanceof WebAssembly.RuntimeError), `${label}: the module trapped: ${e}`);
    assert.ok(e instanceof Error, `${label}: threw a non-Error: ${String(e)}`);
    assert.equal(typeof e.code, 'string', `${label}: error without a code: ${e.message}`);
    assert.equal(typeof e.errno, 'number', `${label}: error without an errno`);
    return { ok: false, error: e };
  }
}

test(`garbage never traps and refused calls change nothing (seed ${seed})`, () => {
  const r = rng(seed);
  const svc = new LockService({ sessions: 4, locks: 4, claims: 6, lockDelay: 2, maxNameLen: 64 });
  const gate = new FenceGate(3);
  const keeper = new SessionKeeper(10, 3, 2);
  const arg = values(r, svc);
  let refused = 0;
  let applied = 0;
  for (let i = 0; i < ROUNDS; i++) {
    // keep some live sessions around so inputs reach deeper than unknown_session
    if (r.chance(10)) call(() => svc.openSession(1 + r.below(20)), 'setup');
    if (r.chance(5)) call(() => svc.tick(svc.now() + r.below(3)), 'setup');
    const which = r.below(10);
    const args = Array.from({ length: r.below(6) }, arg);
    let target;
    let method;
    let before;
    if (which < 7) {
      target = svc;
      method = r.pick(serviceMethods);
      if (r.chance(40)) args[0] = r.pick(svc.sessions().concat([0, 9]));
      before = () => hex(svc.snapshot());
    } else if (which < 9) {
      target = gate;
      method = r.pick(gateMethods);
      before = () => hex(gate.snapshot());
    } else {
      target = keeper;
      method = r.pick(keeperMethods);
      before = () => JSON.stringify([keeper.lease(2 ** 40), keeper.heartbeatDue(0)]);
    }
    const label = `seed ${seed} round ${i}: ${method}(${args.map((a) => typeof a).join(', ')})`;
    const snap = before();
    const res = call(() => target[method](...args), label);
    if (res.ok) applied++;
    else {
      refused++;
      assert.equal(before(), snap, `${label}: refused (${res.error.code}) but changed the state`);
    }
  }
  // statics and constructors with garbage
  for (let i = 0; i < 300; i++) {
    const label = `seed ${seed} static ${i}`;
    const a = [arg(), arg()];
    call(() => LockService.restore(...a), label);
    call(() => FenceGate.restore(...a), label);
    call(() => new LockService(a[0]), label);
    call(() => new FenceGate(a[0]), label);
    call(() => new SessionKeeper(a[0], a[1], arg()), label);
  }
  assert.ok(refused > ROUNDS / 4 && applied > ROUNDS / 10, `refused ${refused}, applied ${applied}`);
  // the instance is alive and well
  const fresh = new LockService({ sessions: 1, locks: 1, claims: 1 });
  assert.deepEqual(fresh.openSession(3), [{ type: 'sessionOpened', session: 1, expiresAt: 3 }]);
  // and no handle was left unusable by an exception unwinding through the module
  call(() => svc.tick(svc.now()), 'final tick');
  assert.equal(typeof svc.revision(), 'number');
  assert.ok(Array.isArray(gate.entries()));
  assert.equal(typeof keeper.mayAct(0), 'boolean');
});

// Input frames shaped like the postcard encoding of `Input` (tag, varints, names), then
// sometimes mutated, so that many decode and reach the service and many do not.
function plausibleFrame(r, live, now) {
  const v = () => (r.chance(90) ? r.below(12) : r.below(128));
  const session = () => (live.length && r.chance(85) ? r.pick(live) : 1 + r.below(100));
  const name = () => {
    const n = r.chance(90) ? 1 + r.below(3) : r.below(70);
    return [n, ...Array.from({ length: n }, () => 0x61 + r.below(3))];
  };
  const request = () => (r.chance(60) ? [0] : [1, v()]);
  const tag = r.below(7);
  let f;
  switch (tag) {
    case 0: f = [0, r.chance(95) ? 20 + v() : 0]; break; // OpenSession{ttl}
    case 1: case 2: f = [tag, session(), ...request()]; break; // KeepAlive / CloseSession
    case 3: { // Acquire{session, lock, mode, wait, request}
      const wait = r.pick([[0], [2], [1, v()]]);
      f = [3, session(), ...name(), r.below(2), ...wait, ...request()];
      break;
    }
    case 4: case 5: f = [tag, session(), ...name(), ...request()]; break; // Release / Cancel
    default: f = [6, Math.min(127, now + r.below(3))]; // Tick{now}, a one-byte varint
  }
  if (r.chance(25)) {
    const i = r.below(f.length);
    switch (r.below(3)) {
      case 0: f[i] = r.below(256); break;
      case 1: f = f.slice(0, i); break;
      default: f.push(r.below(256));
    }
  }
  return new Uint8Array(f);
}

test('random frames never trap; refused frames change nothing', () => {
  const r = rng(seed + 1);
  const svc = new LockService({ sessions: 4, locks: 4, claims: 6 });
  let accepted = 0;
  let decoded = 0;
  for (let i = 0; i < 5000; i++) {
    const frame = plausibleFrame(r, svc.sessions(), svc.now());
    const before = hex(svc.snapshot());
    const res = call(() => svc.handleFrame(frame), `seed ${seed + 1} frame ${hex(frame)}`);
    if (res.ok || res.error.code !== 'bad_frame') decoded++;
    if (res.ok) {
      accepted++;
      for (const out of res.value) assert.ok(out instanceof Uint8Array && out.length > 0);
    } else {
      assert.equal(hex(svc.snapshot()), before, `frame ${hex(frame)} refused but changed the state`);
    }
  }
  assert.ok(decoded > 2000 && accepted > 500, `decoded ${decoded}, accepted ${accepted}`);
});
