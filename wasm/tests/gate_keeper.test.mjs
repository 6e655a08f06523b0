// FenceGate and SessionKeeper through the built wasm package: every method.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomFillSync } from 'node:crypto';
import { FenceGate, LockService, SessionKeeper, hex } from './pkg.mjs';

test('FenceGate: admit, check, highest, entries, snapshot/restore', () => {
  const gate = new FenceGate(4);
  assert.deepEqual(gate.entries(), []);
  assert.equal(gate.highest('db'), null);
  gate.check('db', 1); // nothing seen yet: any non-zero token passes
  assert.equal(gate.highest('db'), null, 'check records nothing');
  gate.admit('db', 5);
  gate.admit('db', 5); // the same holder writes again
  gate.admit('queue', 2);
  gate.admit('db', 7);
  gate.check('db', 7);
  assert.equal(gate.highest('db'), 7);
  assert.deepEqual(gate.entries(), [
    { resource: 'db', highest: 7 },
    { resource: 'queue', highest: 2 },
  ]);
  const bytes = gate.snapshot();
  assert.ok(bytes instanceof Uint8Array);
  assert.equal(hex(bytes.subarray(0, 4)), hex(Buffer.from('FLGT')));
  const copy = FenceGate.restore(bytes, 8);
  assert.deepEqual(copy.entries(), gate.entries());
  assert.equal(hex(copy.snapshot()), hex(bytes));
  // a gate of capacity 0 guards nothing new
  assert.deepEqual(new FenceGate(0).entries(), []);
  // the largest safe token is a number, larger ones go in and come out as bigints
  gate.admit('max', 2 ** 53 - 1);
  assert.equal(gate.highest('max'), 2 ** 53 - 1);
  gate.admit('max', 2n ** 64n - 1n);
  assert.equal(gate.highest('max'), 2n ** 64n - 1n);
  // a capacity over the core's row limit is the core's bad_config
  assert.throws(() => new FenceGate(2 ** 31), (e) => e.code === 'bad_config');
});

test('setNameKey: 16 bytes or bad_argument (nothing changes); keyed answers are the same', () => {
  const gate = new FenceGate(4);
  const svc = new LockService({ sessions: 2, locks: 4, claims: 4 });
  for (const h of [gate, svc]) {
    assert.equal(h.isNameKeyed(), false);
    for (const bad of [new Uint8Array(15), new Uint8Array(17), 'sixteen bytes!!!', null, [1, 2]]) {
      assert.throws(() => h.setNameKey(bad), (e) => e.code === 'bad_argument', String(bad));
    }
    assert.equal(h.isNameKeyed(), false);
  }
  gate.admit('ledger', 2);
  gate.setNameKey(randomFillSync(new Uint8Array(16)));
  assert.equal(gate.isNameKeyed(), true);
  assert.equal(gate.highest('ledger'), 2);
  assert.throws(() => gate.admit('ledger', 1), (e) => e.code === 'stale' && e.highest === 2);
  const before = hex(gate.snapshot());
  gate.setNameKey(Buffer.alloc(16, 7)); // again, another key (a Buffer is a Uint8Array)
  assert.equal(hex(gate.snapshot()), before);
  assert.equal(hex(FenceGate.restore(gate.snapshot(), 4).snapshot()), before);
  svc.setNameKey(randomFillSync(new Uint8Array(16)));
  assert.equal(svc.isNameKeyed(), true);
  const { reply } = svc.openSession(0, 10);
  assert.equal(svc.acquire(1, reply.session, 'ledger', { mode: 'exclusive', wait: 'none' }).reply.token, 1);
  assert.deepEqual(svc.locks(), ['ledger']);
});

test('restore with a key: keyed as the rows load, the same state; a bad key is bad_argument first', () => {
  const svc = new LockService({ sessions: 2, locks: 4, claims: 4 });
  const { reply } = svc.openSession(0, 10);
  svc.acquire(1, reply.session, 'ledger', { mode: 'exclusive', wait: 'none' });
  const gate = new FenceGate(4);
  gate.admit('ledger', 2);
  const [snap, gsnap] = [svc.snapshot(), gate.snapshot()];
  const caps = { sessions: 2, locks: 4, claims: 4 };
  for (const bad of [new Uint8Array(15), 'sixteen bytes!!!', null]) {
    assert.throws(() => LockService.restore(snap, caps, bad), (e) => e.code === 'bad_argument', String(bad));
    assert.throws(() => FenceGate.restore(gsnap, 4, bad), (e) => e.code === 'bad_argument', String(bad));
    // judged before the bytes: junk with a bad key is still bad_argument
    assert.throws(() => LockService.restore(new Uint8Array(3), caps, bad), (e) => e.code === 'bad_argument');
    assert.throws(() => FenceGate.restore(new Uint8Array(3), 4, bad), (e) => e.code === 'bad_argument');
  }
  const back = LockService.restore(snap, caps, randomFillSync(new Uint8Array(16)));
  assert.equal(back.isNameKeyed(), true);
  assert.equal(hex(back.snapshot()), hex(snap));
  assert.equal(back.release(2, reply.session, 'ledger').reply.token, 1);
  assert.equal(LockService.restore(snap, caps, undefined).isNameKeyed(), false);
  const gate2 = FenceGate.restore(gsnap, 4, randomFillSync(new Uint8Array(16)));
  assert.equal(gate2.isNameKeyed(), true);
  assert.equal(hex(gate2.snapshot()), hex(gsnap));
  assert.throws(() => gate2.admit('ledger', 1), (e) => e.code === 'stale' && e.highest === 2);
});

test('SessionKeeper: unconfirmed, safe, jeopardy, expired; keep-alives; poll timeout', () => {
  const k = new SessionKeeper(10, 3, 2); // ttl 10, keep-alive every 3, stop 2 before expiry
  assert.deepEqual(k.lease(0), { state: 'unconfirmed' });
  assert.equal(k.mayAct(0), false);
  assert.equal(k.nextKeepAlive(4), 4, 'nothing sent yet: due now');
  k.keepAliveSent(0);
  assert.equal(k.nextKeepAlive(1), 3, 'a time: the last send + the interval');
  assert.equal(k.keepAliveAcked(0), true);
  assert.deepEqual(k.lease(5), { state: 'safe', until: 8 });
  assert.equal(k.mayAct(7), true);
  assert.equal(k.pollTimeout(1), 3, 'the next keep-alive comes before the lease changes');
  assert.deepEqual(k.lease(8), { state: 'jeopardy', expiresAt: 10 });
  assert.equal(k.mayAct(8), false);
  assert.deepEqual(k.lease(10), { state: 'expired' });
  // a later keep-alive extends; a late ack of an older one does not
  k.keepAliveSent(3);
  k.keepAliveSent(6);
  assert.equal(k.keepAliveAcked(6), true);
  assert.equal(k.keepAliveAcked(3), false);
  assert.deepEqual(k.lease(12), { state: 'safe', until: 14 });
  assert.equal(k.pollTimeout(12), 9, 'keep-alive due at 6 + 3, before the lease turns at 14');
  // an ack for a send it never recorded is refused, and changes nothing
  assert.throws(() => k.keepAliveAcked(4), (e) => e.code === 'unknown_keep_alive' && e.errno === 601 && e.sentAt === 4);
  assert.deepEqual(k.lease(12), { state: 'safe', until: 14 });
  k.sessionLost();
  assert.deepEqual(k.lease(12), { state: 'expired' });
  assert.equal(k.mayAct(12), false);
  assert.equal(k.pollTimeout(12), null);
  // past 2^53 - 1 the lease's times are exact bigints
  const big = new SessionKeeper(10, 3, 2);
  big.keepAliveSent(2 ** 53 - 5);
  big.keepAliveAcked(2 ** 53 - 5);
  assert.deepEqual(big.lease(2 ** 53 - 1), { state: 'safe', until: 2n ** 53n + 3n });
  assert.deepEqual(big.lease(2n ** 53n + 3n), { state: 'jeopardy', expiresAt: 2n ** 53n + 5n });
  assert.equal(big.nextKeepAlive(0), 2 ** 53 - 2, 'still exact: a number');
});

test('SessionKeeper remembers the last 8 sends: an ack of an older one is unknown', () => {
  const k = new SessionKeeper(100, 3, 2);
  for (let t = 0; t < 10; t++) k.keepAliveSent(t);
  assert.throws(() => k.keepAliveAcked(1), (e) => e.code === 'unknown_keep_alive');
  assert.equal(k.keepAliveAcked(2), true);
  assert.deepEqual(k.lease(3), { state: 'safe', until: 100 });
});
