// Garbage in, errors out — never a trap. Seeded random calls of every method with
// hostile arguments (wrong types, edge numbers, throwing proxies, getters that re-enter
// the service, random bytes). Each call either succeeds or throws an Error with a
// string .code; a refused call changes nothing beyond the advance to its `now` (the
// service's state is then exactly that of a copy ticked to the same time, and the
// error's events are that tick's); a WebAssembly.RuntimeError (`unreachable` executed)
// fails the test. Replay a failure with FENCELOCK_SEED=<seed>.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  LockService, FenceGate, SessionKeeper, hex, unhex, rng, seed, varint, repo,
} from './pkg.mjs';
import { objectsOf } from './objects.mjs';

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
    { until: 2 ** 53 }, { kind: 'tick', now: 5 }, { kind: 'open_session', now: 2, ttl: 3 },
    { kind: 'acquire', now: 3, session: 1, lock: 'l', mode: 'shared', wait: 'forever', request: 2 },
    { mode: 'exclusive', wait: 'none' }, { mode: 'shared', wait: { until: 4 }, request: 1 },
    { mode: 'exclusive', wait: 'forever', request: 5n },
    { mode: { permits: 2, limit: 3 }, wait: 'forever' }, { mode: { permits: 0, limit: 3 }, wait: 'none' },
    { mode: { permits: 1, limit: 2 ** 32 }, wait: 'none' }, { permits: 1, limit: 1 },
    { kind: 'watch', now: 3, session: 1, lock: 'l' }, { kind: 'open_labeled', now: 3, ttl: 4, label: 'w' },
    { kind: 'release_hold', now: 3, session: 1, lock: 'l', token: 1 }, { kind: 'release_hold', now: 3, session: 1, lock: 'l', token: -1, request: 2 },
    { sessions: 2, locks: 2, claims: 2 }, { sessions: 2 ** 40, locks: 1, claims: 1 },
    () => 1, new Uint8Array([0, 10]), new Uint8Array([6, 3]), new ArrayBuffer(4), new Uint16Array(2),
    new Proxy({}, { get() { throw new Error('proxy get'); }, has() { throw new Error('proxy has'); } }),
    { get kind() { return svc.tick(1) && 'tick'; }, now: 1 },
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
  'resign', 'handle', 'handleFrame', 'now', 'pollTimeout', 'revision', 'holders', 'hold', 'waiters',
  'session', 'sessions', 'locks', 'leader', 'lockDelayUntil', 'capacity', 'usage', 'maxEvents', 'config',
  'snapshot', 'openLabeled', 'watch', 'unwatch', 'permits', 'raiseRevision', 'internName',
  'setNameKey', 'isNameKeyed', 'releaseHold',
];
const inputMethods = new Set(['openSession', 'keepAlive', 'closeSession', 'acquire', 'release', 'cancel', 'tick', 'campaign', 'resign', 'handle', 'handleFrame', 'openLabeled', 'watch', 'unwatch', 'releaseHold']);
const gateMethods = ['admit', 'check', 'highest', 'entries', 'snapshot', 'setNameKey', 'isNameKeyed'];
const keeperMethods = ['keepAliveSent', 'keepAliveAcked', 'sessionLost', 'lease', 'mayAct', 'nextKeepAlive', 'pollTimeout'];

/**
 * After `svc` refused an input: it changed nothing beyond the advance to its `now`. A
 * copy restored from the state before, ticked to the service's time now, must have the
 * same bytes, and its tick's events must be the error's.
 */
function onlyTheAdvance(svc, before, err, label) {
  const copy = LockService.restore(unhex(before), svc.capacity());
  const tick = copy.handleFrame(new Uint8Array([6, ...varint(svc.now())]));
  assert.equal(hex(svc.snapshot()), hex(copy.snapshot()), `${label}: refused (${err.code}) but changed more than the time`);
  const events = err.eventFrames ? err.eventFrames : null;
  if (events) assert.deepEqual(events.map(hex), tick.events.map(hex), `${label}: the error's event frames`);
  else if (err.events) assert.equal(err.events.length, tick.events.length, `${label}: the error's events`);
  copy.free();
}

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

test(`garbage never traps and refused calls change nothing beyond the advance (seed ${seed})`, () => {
  const r = rng(seed);
  const svc = new LockService({ sessions: 4, locks: 4, claims: 6, lockDelay: 2, maxNameLen: 64 });
  const gate = new FenceGate(3);
  const keeper = new SessionKeeper(10, 3, 2);
  const arg = values(r, svc);
  let refused = 0;
  let applied = 0;
  for (let i = 0; i < ROUNDS; i++) {
    // keep some live sessions around so inputs reach deeper than unknown_session
    if (r.chance(10)) call(() => svc.openSession(svc.now(), 1 + r.below(20)), 'setup');
    if (r.chance(5)) call(() => svc.tick(BigInt(svc.now()) + BigInt(r.below(3))), 'setup');
    const which = r.below(10);
    const args = Array.from({ length: r.below(6) }, arg);
    let target;
    let method;
    let before;
    if (which < 7) {
      target = svc;
      method = r.pick(serviceMethods);
      // a plausible now first, then often a live session
      if (inputMethods.has(method) && method !== 'handle' && method !== 'handleFrame' && r.chance(70)) {
        args[0] = r.chance(80) ? svc.now() : BigInt(svc.now()) + BigInt(r.below(4));
        if (r.chance(50)) args[1] = r.pick(svc.sessions().concat([0, 9]));
      } else if (r.chance(40)) args[0] = r.pick(svc.sessions().concat([0, 9]));
      before = () => hex(svc.snapshot());
    } else if (which < 9) {
      target = gate;
      method = r.pick(gateMethods);
      before = () => hex(gate.snapshot());
    } else {
      target = keeper;
      method = r.pick(keeperMethods);
      before = () => JSON.stringify([keeper.lease(2 ** 40), keeper.nextKeepAlive(0)], (k, v) => (typeof v === 'bigint' ? `${v}n` : v));
    }
    const label = `seed ${seed} round ${i}: ${method}(${args.map((a) => typeof a).join(', ')})`;
    const snap = before();
    const res = call(() => target[method](...args), label);
    if (res.ok) applied++;
    else {
      refused++;
      if (target === svc && inputMethods.has(method)) onlyTheAdvance(svc, snap, res.error, label);
      else assert.equal(before(), snap, `${label}: refused (${res.error.code}) but changed the state`);
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
  assert.deepEqual(fresh.openSession(0, 3), { reply: { kind: 'opened', session: 1, expiresAt: 3 }, events: [] });
  // and no handle was left unusable by an exception unwinding through the module
  call(() => svc.tick(svc.now()), 'final tick');
  assert.ok(['number', 'bigint'].includes(typeof svc.revision()));
  assert.ok(Array.isArray(gate.entries()));
  assert.equal(typeof keeper.mayAct(0), 'boolean');
});

// Input frames shaped like the postcard encoding of `Input` (tag, now, varints, names),
// then sometimes mutated, so that many decode and reach the service and many do not.
function plausibleFrame(r, live, now) {
  const v = () => (r.chance(90) ? r.below(12) : r.below(128));
  const session = () => (live.length && r.chance(85) ? r.pick(live) : 1 + r.below(100));
  const name = () => {
    const n = r.chance(90) ? 1 + r.below(3) : r.below(70);
    return [n, ...Array.from({ length: n }, () => 0x61 + r.below(3))];
  };
  const request = () => (r.chance(60) ? [0] : [1, v()]);
  // mostly the service's time, often a little later, sometimes earlier (refused)
  const at = varint(r.chance(10) ? Math.max(0, now - 1) : now + (r.chance(30) ? r.below(3) : 0));
  const tag = r.below(11);
  let f;
  switch (tag) {
    case 0: f = [0, ...at, r.chance(95) ? 20 + v() : 0]; break; // OpenSession{now, ttl}
    case 1: case 2: f = [tag, ...at, session(), ...request()]; break; // KeepAlive / CloseSession
    case 3: { // Acquire{now, session, lock, mode, wait, request}
      const wait = r.pick([[0], [2], [1, ...varint(now + v())]]);
      // exclusive, shared, or permits {count, limit}
      const mode = r.chance(25) ? [2, r.below(4), 1 + r.below(3)] : [r.below(2)];
      f = [3, ...at, session(), ...name(), ...mode, ...wait, ...request()];
      break;
    }
    case 7: f = [7, ...at, r.chance(95) ? 20 + v() : 0, ...name()]; break; // OpenLabeled{now, ttl, label}
    case 8: case 9: f = [tag, ...at, session(), ...name(), ...request()]; break; // Watch / Unwatch
    case 4: case 5: f = [tag, ...at, session(), ...name(), ...request()]; break; // Release / Cancel
    case 10: f = [10, ...at, session(), ...name(), v(), ...request()]; break; // ReleaseHold{now, session, lock, token, request}
    default: f = [6, ...at]; // Tick{now}
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

test('random frames never trap; refused frames change nothing beyond the advance', () => {
  const r = rng(seed + 1);
  const svc = new LockService({ sessions: 4, locks: 4, claims: 6 });
  let accepted = 0;
  let decoded = 0;
  let advancedThenRefused = 0;
  for (let i = 0; i < 5000; i++) {
    // the time stays a number here: mutated frames may jump it, then we start over
    if (typeof svc.now() !== 'number' || svc.now() > 1e6) svc.handleFrame(new Uint8Array([6, ...varint(svc.now())]));
    const now = typeof svc.now() === 'number' ? svc.now() : 0;
    const frame = plausibleFrame(r, svc.sessions().filter((s) => typeof s === 'number'), now);
    const before = hex(svc.snapshot());
    const label = `seed ${seed + 1} frame ${hex(frame)}`;
    const res = call(() => svc.handleFrame(frame), label);
    if (res.ok || res.error.code !== 'bad_frame') decoded++;
    if (res.ok) {
      accepted++;
      assert.ok(res.value.reply instanceof Uint8Array && res.value.reply.length > 0);
      for (const out of res.value.events) assert.ok(out instanceof Uint8Array && out.length > 0);
    } else {
      if (res.error.eventFrames?.length) advancedThenRefused++;
      onlyTheAdvance(svc, before, res.error, label);
    }
  }
  assert.ok(decoded > 2000 && accepted > 500, `decoded ${decoded}, accepted ${accepted}`);
  assert.ok(advancedThenRefused > 0, 'no refused input after an advance with events');
});

// Freeing twice: the README promises that a second free(), or a free() after the object
// was disposed (what a `using` scope does at its end), throws a bad_argument error, and
// that nothing else is freed by it: another object of the class goes on.
test('a second free(), or a free() after dispose, throws and frees nothing else', async () => {
  const lite = await import(
    pathToFileURL(path.join(repo, 'wasm', 'pkg', 'lite', 'node', 'index.mjs')).href);
  const makers = {
    LockService: () => new LockService({ sessions: 2, locks: 2, claims: 2 }),
    FenceGate: () => new FenceGate(2),
    SessionKeeper: () => new SessionKeeper(10, 3, 2),
    LiteService: () => new lite.LiteService({ sessions: 2, locks: 2, claims: 2 }),
  };
  // One call each that reads the object's memory.
  const use = {
    LockService: (o) => o.openSession(0, 10).reply.kind,
    FenceGate: (o) => o.admit('r', 1n),
    SessionKeeper: (o) => o.keepAliveSent(0),
    LiteService: (o) => o.openSession(0, 10),
  };
  for (const [name, make] of Object.entries(makers)) {
    const kept = make();
    use[name](kept);
    for (const end of ['free', 'dispose']) {
      const gone = make();
      if (end === 'free') gone.free();
      else gone[Symbol.dispose]();
      const freed = (e) => e.code === 'bad_argument' && e.errno === 702 && /freed/.test(e.message);
      assert.throws(() => gone.free(), freed, `${name}: a free() after ${end}`);
      assert.throws(() => use[name](gone), freed, `${name}: a call after ${end}`);
    }
    // The one that was not freed is whole: it still answers.
    assert.doesNotThrow(() => use[name](kept), name);
    kept.free();
  }
});

// wasm-bindgen refuses a call on a freed object, or on one already in a call, by throwing
// from inside wasm; the module aborts on panic, so each such throw leaked the call's stack
// space, and after a few thousand every call of every object trapped (`unreachable`).
// The glue now refuses both in JS, before wasm: however many such calls a host makes, the
// module's other objects go on.
test('calls on a freed or busy object, however many, leave the module working', async () => {
  const lite = await import(
    pathToFileURL(path.join(repo, 'wasm', 'pkg', 'lite', 'node', 'index.mjs')).href);
  const live = new LockService({ sessions: 2, locks: 2, claims: 2 });
  const gone = new LockService({ sessions: 2, locks: 2, claims: 2 });
  gone.free();
  const goneGate = new FenceGate(1);
  goneGate.free();
  const goneLite = new lite.LiteService({ sessions: 1, locks: 1, claims: 1 });
  goneLite.free();
  const busy = new LockService({ sessions: 2, locks: 2, claims: 2 });
  const bad = (e) => e.code === 'bad_argument';
  let reentered = 0;
  for (let i = 0; i < 100_000; i++) {
    assert.throws(() => gone.handleFrame(new Uint8Array([6, 1])), bad);
    assert.throws(() => gone.acquireFastId(1, 1, 0, 0, 0), bad);
    assert.throws(() => goneGate.admit('r', 1), bad);
    assert.throws(() => goneLite.tick(1), bad);
    // a getter of an argument that calls the service again, while it is in the call
    try {
      busy.acquire(1, 1, 'l', {
        get mode() {
          try { busy.tick(1); } catch (e) { if (bad(e) && /in a call/.test(e.message)) reentered++; }
          return 'exclusive';
        },
        wait: 'none',
      });
    } catch { /* unknown session: refused */ }
  }
  assert.equal(reentered, 100_000);
  assert.equal(live.openSession(0, 10).reply.kind, 'opened');
  const fresh = new LockService({ sessions: 2, locks: 2, claims: 2 });
  assert.equal(fresh.openSession(0, 10).reply.kind, 'opened');
  const small = new lite.LiteService({ sessions: 1, locks: 1, claims: 1 });
  assert.equal(small.openSession(0, 10), 0);
  for (const o of [live, busy, fresh, small]) o.free();
});

// The guard judges `this` by its class, not by its having a pointer: a FenceGate lent as
// `this` to a LockService method (or the other way round) would have handed wasm a pointer
// to an object of another kind. And its busy mark is not a property of the object, so a
// frozen object is guarded as any other: a getter that calls it again is refused in JS,
// every time, and the module goes on.
test('a method lent to an object of another class, or called again on a frozen one, is refused', () => {
  const svc = new LockService({ sessions: 2, locks: 2, claims: 2 });
  const gate = new FenceGate(2);
  const keeper = new SessionKeeper(10, 3, 2);
  const before = Buffer.from(svc.snapshot()).toString('hex');
  const gateBefore = Buffer.from(gate.snapshot()).toString('hex');
  const wrong = (e) => e.code === 'bad_argument' && e.errno === 702 && /is no/.test(e.message);
  assert.throws(() => LockService.prototype.tick.call(gate, 1), wrong);
  assert.throws(() => LockService.prototype.snapshot.call(keeper), wrong);
  assert.throws(() => LockService.prototype.acquireFastId.call(gate, 1, 1, 0, 0, 0), wrong);
  assert.throws(() => FenceGate.prototype.admit.call(svc, 'r', 1), wrong);
  assert.throws(() => SessionKeeper.prototype.keepAliveSent.call(gate, 0), wrong);
  const lookalike = Object.create(LockService.prototype);
  assert.throws(() => lookalike.tick(1), wrong, 'no pointer at all');
  assert.equal(Buffer.from(svc.snapshot()).toString('hex'), before);
  assert.equal(Buffer.from(gate.snapshot()).toString('hex'), gateBefore);

  const frozen = new LockService({ sessions: 2, locks: 2, claims: 2 });
  const s = frozen.openSession(0, 100).reply.session;
  Object.freeze(frozen);
  let reentered = 0;
  for (let i = 0; i < 20_000; i++) {
    frozen.acquire(1, s, 'l', {
      get mode() {
        try {
          frozen.tick(1);
        } catch (e) {
          if (e.code === 'bad_argument' && /in a call/.test(e.message)) reentered++;
        }
        return 'exclusive';
      },
      wait: 'none',
    });
    frozen.release(1, s, 'l');
  }
  assert.equal(reentered, 20_000, 'every nested call refused by the guard');
  assert.equal(frozen.now(), 1, 'and the frozen service still answers');
  // (A frozen object cannot be freed: the glue's free() writes its pointer. The
  // finalizer frees it once it is collected.)
  assert.throws(() => frozen.free(), TypeError);
  assert.equal(frozen.now(), 1, 'a free that failed freed nothing');
  for (const o of [svc, gate, keeper]) o.free();
});

// A Proxy of an object (a reactive store's wrapper) and an object made with
// Object.create(it) reach the same pointer. Either may call the object's methods, and is
// judged busy while the object is in a call; neither may free it. The glue's free would
// take the stand-in off the clean-up that frees an object when it is collected, and only
// the object itself is on it: the object's memory would be freed a second time when it
// is collected, and the object, still holding its pointer, would use it after the free.
test('a Proxy of an object, or an object made from it, may call it but not free it', () => {
  const notItself = (e) => e.code === 'bad_argument' && e.errno === 702 && /itself/.test(e.message);
  const freed = (e) => e.code === 'bad_argument' && /freed/.test(e.message);
  for (const [name, { make, use }] of Object.entries(objectsOf({ LockService, FenceGate, SessionKeeper }))) {
    const o = make();
    const standIns = [new Proxy(o, {}), Object.create(o)];
    for (const s of standIns) {
      assert.equal(use(s), use(o), `${name}: a stand-in calls the object`);
      assert.throws(() => s.free(), notItself, `${name}: free() through a stand-in`);
      assert.throws(() => s[Symbol.dispose](), notItself, `${name}: dispose through a stand-in`);
      assert.doesNotThrow(() => use(o), `${name}: the object is whole`);
    }
    o.free();
    for (const s of standIns) {
      assert.throws(() => use(s), freed, `${name}: a stand-in of a freed object`);
      assert.throws(() => s.free(), freed, `${name}: free() of a stand-in of a freed object`);
    }
  }
  const svc = new LockService({ sessions: 2, locks: 2, claims: 2 });
  const s = svc.openSession(0, 100).reply.session;
  const view = new Proxy(svc, {});
  let reentered = 0;
  svc.acquire(1, s, 'l', {
    get mode() {
      try {
        view.tick(1);
      } catch (e) {
        if (e.code === 'bad_argument' && /in a call/.test(e.message)) reentered++;
      }
      return 'exclusive';
    },
    wait: 'none',
  });
  assert.equal(reentered, 1, "a Proxy's call during the object's own is refused");
  svc.free();
});

// A typed fast call through a Proxy reads the object's pointer through the Proxy's trap,
// once after the name is written into the service's buffer. A trap that uses the module
// then is refused, whatever it calls: a fast call of its own would overwrite the name (the
// outer call acquired "othe", the first four bytes of the trap's name, for "mine"), and a
// free would hand wasm a freed object.
test('a Proxy trap that calls the module during a typed fast call is refused, and the call stands', () => {
  const svc = new LockService({ sessions: 2, locks: 4, claims: 4 });
  const s = svc.openSession(0, 100).reply.session;
  const refusals = [];
  const attempt = (f) => {
    try {
      f();
    } catch (e) {
      refusals.push(e.code === 'bad_argument' && /fast call is running/.test(e.message));
    }
  };
  let trapping = false;
  const view = new Proxy(svc, {
    get(target, key, receiver) {
      if (trapping && key === '__wbg_ptr') {
        attempt(() => target.acquireFast(1, s, 'other', 0, 0));
        attempt(() => target.releaseFastId(1, s, 0));
        attempt(() => target.tick(1));
        attempt(() => target.free());
      }
      return Reflect.get(target, key, receiver);
    },
  });
  trapping = true;
  assert.equal(view.acquireFast(1, s, 'mine', 0, 0), 3, 'granted');
  assert.equal(view.releaseFast(1, s, 'mine'), 6, 'released');
  trapping = false;
  assert.ok(refusals.length >= 8 && refusals.every(Boolean), JSON.stringify(refusals));
  assert.ok(!svc.locks().some((l) => l.startsWith('othe')), `neither 'othe' nor 'other': ${svc.locks()}`);
  assert.equal(svc.acquireFast(2, s, 'other', 0, 0), 3, 'the service is whole and usable');
  svc.free();
});
