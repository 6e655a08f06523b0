// LockService through the built wasm package: every input and every query, the
// GC-pause story, election, snapshots and the frame entry point.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LockService, FenceGate, SessionKeeper, hex, thrown } from './pkg.mjs';

const caps = { sessions: 8, locks: 8, claims: 16 };
const svcOf = (extra = {}) => new LockService({ ...caps, ...extra });
const open = (svc, ttl) => svc.openSession(ttl)[0].session;

test('constructor defaults, capacity, len and config', () => {
  const svc = svcOf();
  assert.deepEqual(svc.config(), { lockDelay: 0, maxNameLen: 64 });
  assert.deepEqual(svc.capacity(), caps);
  assert.deepEqual(svc.len(), { sessions: 0, locks: 0, claims: 0 });
  assert.equal(svc.now(), 0);
  assert.equal(svc.revision(), 0);
  assert.equal(svc.pollTimeout(), null);
  assert.deepEqual(svc.sessions(), []);
  assert.deepEqual(svc.locks(), []);
  const custom = svcOf({ lockDelay: 7, maxNameLen: 5 });
  assert.deepEqual(custom.config(), { lockDelay: 7, maxNameLen: 5 });
  // null counts as "not given", like undefined
  assert.deepEqual(svcOf({ lockDelay: null, maxNameLen: null }).config(), { lockDelay: 0, maxNameLen: 64 });
});

test('openSession, session(), sessions() and keepAlive', () => {
  const svc = svcOf();
  assert.deepEqual(svc.openSession(10), [{ type: 'sessionOpened', session: 1, expiresAt: 10 }]);
  svc.tick(3);
  assert.deepEqual(svc.openSession(5), [{ type: 'sessionOpened', session: 2, expiresAt: 8 }]);
  assert.deepEqual(svc.session(2), { id: 2, ttl: 5, expiresAt: 8, holds: 0, waits: 0, lastRequest: 0 });
  assert.equal(svc.session(99), null);
  assert.deepEqual(svc.sessions(), [1, 2]);
  assert.deepEqual(svc.len(), { sessions: 2, locks: 0, claims: 0 });
  assert.equal(svc.pollTimeout(), 8);
  svc.tick(6);
  assert.deepEqual(svc.keepAlive(2), [{ type: 'sessionRenewed', session: 2, expiresAt: 11 }]);
  assert.equal(svc.session(2).expiresAt, 11);
  assert.equal(svc.pollTimeout(), 10);
  assert.deepEqual(svc.tick(10), [{ type: 'sessionExpired', session: 1 }]);
  assert.deepEqual(svc.sessions(), [2]);
  assert.equal(svc.now(), 10);
});

test('acquire: granted, busy, queued, shared, timed wait, re-acquire', () => {
  const svc = svcOf();
  const [a, b, c] = [open(svc, 100), open(svc, 100), open(svc, 100)];
  assert.deepEqual(svc.acquire(a, 'l', 'exclusive', 'none'), [
    { type: 'granted', session: a, lock: 'l', mode: 'exclusive', token: 1 },
  ]);
  // re-acquire by the holder: the same grant, no new token
  assert.deepEqual(svc.acquire(a, 'l', 'exclusive', 'forever'), [
    { type: 'granted', session: a, lock: 'l', mode: 'exclusive', token: 1 },
  ]);
  assert.deepEqual(svc.acquire(b, 'l', 'exclusive', 'none'), [{ type: 'busy', session: b, lock: 'l' }]);
  assert.deepEqual(svc.acquire(b, 'l', 'shared', { until: 10 }), [
    { type: 'queued', session: b, lock: 'l', mode: 'shared', position: 1 },
  ]);
  assert.deepEqual(svc.acquire(c, 'l', 'shared', 'forever'), [
    { type: 'queued', session: c, lock: 'l', mode: 'shared', position: 2 },
  ]);
  assert.deepEqual(svc.holders('l'), [{ session: a, mode: 'exclusive', token: 1 }]);
  assert.deepEqual(svc.waiters('l'), [
    { session: b, mode: 'shared', deadline: 10 },
    { session: c, mode: 'shared', deadline: null },
  ]);
  assert.deepEqual(svc.locks(), ['l']);
  assert.deepEqual(svc.session(a), { id: a, ttl: 100, expiresAt: 100, holds: 1, waits: 0, lastRequest: 0 });
  assert.deepEqual(svc.session(b), { id: b, ttl: 100, expiresAt: 100, holds: 0, waits: 1, lastRequest: 0 });
  // release wakes the run of shared waiters at the head together
  assert.deepEqual(svc.release(a, 'l'), [
    { type: 'released', session: a, lock: 'l', token: 1, reason: 'released' },
    { type: 'granted', session: b, lock: 'l', mode: 'shared', token: 2 },
    { type: 'granted', session: c, lock: 'l', mode: 'shared', token: 3 },
  ]);
  assert.equal(svc.revision(), 3);
  assert.deepEqual(svc.holders('l').map((h) => h.token), [2, 3]);
  assert.deepEqual(svc.holders('nobody'), []);
  assert.deepEqual(svc.waiters('nobody'), []);
});

test('timed wait times out on tick; cancel withdraws a wait', () => {
  const svc = svcOf();
  const [a, b, c] = [open(svc, 100), open(svc, 100), open(svc, 100)];
  svc.acquire(a, 'l', 'exclusive', 'none');
  svc.acquire(b, 'l', 'exclusive', { until: 8 });
  svc.acquire(c, 'l', 'exclusive', 'forever');
  assert.equal(svc.pollTimeout(), 8);
  assert.deepEqual(svc.tick(7), []);
  assert.deepEqual(svc.tick(8), [{ type: 'waitTimedOut', session: b, lock: 'l' }]);
  assert.deepEqual(svc.waiters('l'), [{ session: c, mode: 'exclusive', deadline: null }]);
  assert.deepEqual(svc.cancel(c, 'l'), [{ type: 'waitCancelled', session: c, lock: 'l' }]);
  assert.deepEqual(svc.waiters('l'), []);
  // a deadline at or before now behaves as a try-lock
  assert.deepEqual(svc.acquire(b, 'l', 'exclusive', { until: 8 }), [{ type: 'busy', session: b, lock: 'l' }]);
});

test('closeSession releases holds (reason closed), drops waits, grants the next', () => {
  const svc = svcOf();
  const [a, b] = [open(svc, 100), open(svc, 100)];
  svc.acquire(a, 'x', 'exclusive', 'none');
  svc.acquire(a, 'y', 'exclusive', 'none');
  svc.acquire(b, 'x', 'exclusive', 'forever');
  assert.deepEqual(svc.closeSession(a), [
    { type: 'sessionClosed', session: a },
    { type: 'released', session: a, lock: 'x', token: 1, reason: 'closed' },
    { type: 'released', session: a, lock: 'y', token: 2, reason: 'closed' },
    { type: 'granted', session: b, lock: 'x', mode: 'exclusive', token: 3 },
  ]);
  assert.equal(svc.session(a), null);
  assert.deepEqual(svc.locks(), ['x']);
});

test('lock-delay after an expiry: lockDelayUntil, pollTimeout, then the grant', () => {
  const svc = svcOf({ lockDelay: 5 });
  const a = open(svc, 10);
  const b = open(svc, 100);
  svc.acquire(a, 'l', 'exclusive', 'none');
  svc.acquire(b, 'l', 'exclusive', 'forever');
  assert.equal(svc.lockDelayUntil('l'), null);
  assert.deepEqual(svc.tick(10), [
    { type: 'sessionExpired', session: a },
    { type: 'released', session: a, lock: 'l', token: 1, reason: 'expired' },
  ]);
  assert.equal(svc.lockDelayUntil('l'), 15);
  assert.equal(svc.pollTimeout(), 15);
  assert.deepEqual(svc.tick(14), []);
  assert.deepEqual(svc.tick(15), [{ type: 'granted', session: b, lock: 'l', mode: 'exclusive', token: 2 }]);
  assert.equal(svc.lockDelayUntil('l'), null);
});

test('idempotent retries replay the recorded answer and change nothing', () => {
  const svc = svcOf();
  const [a, b] = [open(svc, 100), open(svc, 100)];
  const first = svc.acquire(a, 'l', 'exclusive', 'forever', 1);
  const snap = hex(svc.snapshot());
  assert.deepEqual(svc.acquire(a, 'l', 'exclusive', 'forever', 1), first);
  assert.equal(hex(svc.snapshot()), snap);
  assert.equal(svc.session(a).lastRequest, 1);
  assert.deepEqual(svc.keepAlive(a, 2), [{ type: 'sessionRenewed', session: a, expiresAt: 100 }]);
  assert.deepEqual(svc.keepAlive(a, 2), [{ type: 'sessionRenewed', session: a, expiresAt: 100 }]);
  svc.acquire(b, 'l', 'exclusive', 'forever', 7);
  assert.deepEqual(svc.release(a, 'l', 3), [
    { type: 'released', session: a, lock: 'l', token: 1, reason: 'released' },
    { type: 'granted', session: b, lock: 'l', mode: 'exclusive', token: 2 },
  ]);
  // the retry replays the release answer only (the grant went to b once)
  assert.deepEqual(svc.release(a, 'l', 3), [
    { type: 'released', session: a, lock: 'l', token: 1, reason: 'released' },
  ]);
  // null and undefined mean "no request number"
  assert.deepEqual(svc.keepAlive(b, null), [{ type: 'sessionRenewed', session: b, expiresAt: 100 }]);
  assert.deepEqual(svc.closeSession(b, undefined).map((o) => o.type), ['sessionClosed', 'released']);
});

test('election: campaign, leader, resign promotes the next candidate with a higher epoch', () => {
  const svc = svcOf();
  const [a, b] = [open(svc, 100), open(svc, 100)];
  assert.equal(svc.leader('e'), null);
  assert.deepEqual(svc.campaign(a, 'e'), [{ type: 'granted', session: a, lock: 'e', mode: 'exclusive', token: 1 }]);
  assert.deepEqual(svc.campaign(b, 'e'), [{ type: 'queued', session: b, lock: 'e', mode: 'exclusive', position: 1 }]);
  assert.deepEqual(svc.leader('e'), { session: a, epoch: 1 });
  assert.deepEqual(svc.resign(a, 'e'), [
    { type: 'released', session: a, lock: 'e', token: 1, reason: 'released' },
    { type: 'granted', session: b, lock: 'e', mode: 'exclusive', token: 2 },
  ]);
  assert.deepEqual(svc.leader('e'), { session: b, epoch: 2 });
  const c = open(svc, 100);
  svc.campaign(c, 'e', 1);
  assert.deepEqual(svc.resign(c, 'e', 2), [{ type: 'waitCancelled', session: c, lock: 'e' }]);
});

// The story of the seeds: client A holds the lock with token 34, pauses (GC) past its
// session's expiry; the service expires it and grants B token 35; B writes; A wakes
// and writes with 34, and the resource's gate refuses it.
test('the GC-pause story: 34 granted, session expired, 35 granted, 34 refused', () => {
  const svc = svcOf();
  const gate = new FenceGate(4);
  const warm = open(svc, 1000);
  for (let i = 0; i < 33; i++) {
    svc.acquire(warm, 'ledger', 'exclusive', 'none');
    svc.release(warm, 'ledger');
  }
  assert.equal(svc.revision(), 33);

  const a = open(svc, 10); // expires at 10 unless kept alive
  const b = open(svc, 30);
  const keeperA = new SessionKeeper(10, 3, 2);
  keeperA.heartbeatSent(0);
  keeperA.heartbeatAcked(0);

  assert.deepEqual(svc.acquire(a, 'ledger', 'exclusive', 'forever'), [
    { type: 'granted', session: a, lock: 'ledger', mode: 'exclusive', token: 34 },
  ]);
  assert.ok(keeperA.mayAct(1));
  gate.admit('ledger', 34); // A writes before its pause
  assert.deepEqual(svc.acquire(b, 'ledger', 'exclusive', 'forever'), [
    { type: 'queued', session: b, lock: 'ledger', mode: 'exclusive', position: 1 },
  ]);

  // A pauses: no heartbeat. Time passes only through ticks.
  assert.deepEqual(svc.tick(5), []);
  assert.deepEqual(svc.tick(10), [
    { type: 'sessionExpired', session: a },
    { type: 'released', session: a, lock: 'ledger', token: 34, reason: 'expired' },
    { type: 'granted', session: b, lock: 'ledger', mode: 'exclusive', token: 35 },
  ]);
  gate.admit('ledger', 35); // B writes

  // A wakes up at 12, still believing it holds the lock. Its own keeper says otherwise…
  assert.deepEqual(keeperA.lease(12), { state: 'expired' });
  assert.equal(keeperA.mayAct(12), false);
  // …and if it writes anyway, the gate refuses token 34.
  const err = thrown(() => gate.admit('ledger', 34));
  assert.equal(err.code, 'stale');
  assert.equal(err.errno, 401);
  assert.equal(err.token, 34);
  assert.equal(err.highest, 35);
  assert.equal(gate.highest('ledger'), 35);
  // and the service no longer knows A
  assert.equal(thrown(() => svc.keepAlive(a)).code, 'unknown_session');
});

test('handle(input) matches the typed methods, output for output and byte for byte', () => {
  const typed = svcOf({ lockDelay: 2 });
  const tagged = svcOf({ lockDelay: 2 });
  const steps = [
    [(s) => s.openSession(10), { type: 'openSession', ttl: 10 }],
    [(s) => s.openSession(20), { type: 'openSession', ttl: 20 }],
    [(s) => s.acquire(1, 'l', 'exclusive', 'none', 1), { type: 'acquire', session: 1, lock: 'l', mode: 'exclusive', wait: 'none', request: 1 }],
    [(s) => s.acquire(2, 'l', 'shared', { until: 15 }), { type: 'acquire', session: 2, lock: 'l', mode: 'shared', wait: { until: 15 } }],
    [(s) => s.acquire(2, 'm', 'exclusive', 'forever'), { type: 'acquire', session: 2, lock: 'm', mode: 'exclusive', wait: 'forever', request: null }],
    [(s) => s.keepAlive(2, 1), { type: 'keepAlive', session: 2, request: 1 }],
    [(s) => s.tick(4), { type: 'tick', now: 4 }],
    [(s) => s.keepAlive(1), { type: 'keepAlive', session: 1 }],
    [(s) => s.release(1, 'l', 2), { type: 'release', session: 1, lock: 'l', request: 2 }],
    [(s) => s.acquire(1, 'm', 'exclusive', 'forever'), { type: 'acquire', session: 1, lock: 'm', mode: 'exclusive', wait: 'forever' }],
    [(s) => s.cancel(1, 'm'), { type: 'cancel', session: 1, lock: 'm' }],
    [(s) => s.closeSession(2, 2), { type: 'closeSession', session: 2, request: 2 }],
    [(s) => s.tick(14), { type: 'tick', now: 14 }],
  ];
  for (const [call, input] of steps) {
    const want = call(typed);
    assert.deepEqual(tagged.handle(input), want, JSON.stringify(input));
    assert.equal(hex(tagged.snapshot()), hex(typed.snapshot()));
  }
  assert.deepEqual(typed.tick(14), []);
});

test('handleFrame: postcard frames in and out, same state as the typed API', () => {
  const svc = svcOf();
  const twin = svcOf();
  // OpenSession{ttl: 10} = variant 0, varint 10
  assert.deepEqual(svc.handleFrame(new Uint8Array([0x00, 0x0a])).map(hex), ['00010a']);
  twin.openSession(10);
  // Acquire{session 1, "l", Exclusive, Forever, None}
  const acq = new Uint8Array([0x03, 0x01, 0x01, 0x6c, 0x00, 0x02, 0x00]);
  assert.deepEqual(svc.handleFrame(acq).map(hex), ['0401016c0001']);
  twin.acquire(1, 'l', 'exclusive', 'forever');
  assert.equal(hex(svc.snapshot()), hex(twin.snapshot()));
  // a Buffer is a Uint8Array too
  assert.deepEqual(svc.handleFrame(Buffer.from('0614', 'hex')).map(hex), [
    '0301', // SessionExpired{1}
    '0701016c0102', // Released{1, "l", token 1, Expired}
  ]);
  // frames keep full u64 range: a tick past 2^53 is applied…
  svc.handleFrame(new Uint8Array([0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])); // u64::MAX
  // …and a query that would round it throws instead
  assert.equal(thrown(() => svc.now()).code, 'out_of_range');
  assert.ok(thrown(() => svc.now()) instanceof RangeError);
});

test('snapshot/restore: same bytes, same behaviour after restore', () => {
  const svc = svcOf({ lockDelay: 3 });
  const [a, b] = [open(svc, 10), open(svc, 50)];
  svc.acquire(a, 'l', 'exclusive', 'none');
  svc.acquire(b, 'l', 'exclusive', { until: 40 });
  svc.tick(2);
  const bytes = svc.snapshot();
  assert.ok(bytes instanceof Uint8Array);
  const copy = LockService.restore(bytes, caps);
  assert.equal(hex(copy.snapshot()), hex(bytes));
  assert.deepEqual(copy.config(), { lockDelay: 3, maxNameLen: 64 });
  // both continue identically (ids, tokens, lock-delay)
  for (const s of [svc, copy]) {
    assert.deepEqual(s.openSession(5), [{ type: 'sessionOpened', session: 3, expiresAt: 7 }]);
    assert.deepEqual(s.tick(10).map((o) => o.type), [
      'sessionExpired', // session 3, due at 7, goes first
      'sessionExpired', // a, due at 10
      'released',
    ]);
  }
  assert.equal(hex(copy.snapshot()), hex(svc.snapshot()));
  // restore into larger tables works too; the capacity is the host's
  assert.deepEqual(LockService.restore(bytes, { sessions: 100, locks: 3, claims: 2 }).capacity(), {
    sessions: 100,
    locks: 3,
    claims: 2,
  });
});

test('free() releases the wasm memory of a handle; using it afterwards throws, not traps', () => {
  const svc = svcOf();
  svc.free();
  const err = (() => {
    try {
      svc.now();
    } catch (e) {
      return e;
    }
  })();
  assert.ok(err instanceof Error && !(err instanceof WebAssembly.RuntimeError), String(err));
});

test('a Uint8Array subclass is read by its contents, whatever its getters say', () => {
  class Liar extends Uint8Array {
    get length() {
      throw new Error('length getter');
    }
    get byteLength() {
      return 1e9;
    }
  }
  const svc = svcOf();
  assert.deepEqual(svc.handleFrame(new Liar([0x00, 0x0a])).map(hex), ['00010a']);
  const copy = LockService.restore(new Liar(svc.snapshot()), caps);
  assert.equal(hex(copy.snapshot()), hex(svc.snapshot()));
  assert.equal(svc.tick(1).length, 0, 'the handle is still usable');
});
