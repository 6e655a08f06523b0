// FenceGate and SessionKeeper through the built wasm package: every method.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FenceGate, SessionKeeper, hex } from './pkg.mjs';

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
  // the largest safe token is accepted
  gate.admit('max', 2 ** 53 - 1);
  assert.equal(gate.highest('max'), 2 ** 53 - 1);
});

test('SessionKeeper: unconfirmed, safe, jeopardy, expired; heartbeats; poll timeout', () => {
  const k = new SessionKeeper(10, 3, 2); // ttl 10, heartbeat every 3, stop 2 before expiry
  assert.deepEqual(k.lease(0), { state: 'unconfirmed' });
  assert.equal(k.mayAct(0), false);
  assert.equal(k.heartbeatDue(4), 4, 'nothing sent yet: due now');
  k.heartbeatSent(0);
  assert.equal(k.heartbeatDue(1), 3);
  assert.equal(k.heartbeatAcked(0), true);
  assert.deepEqual(k.lease(5), { state: 'safe', until: 8 });
  assert.equal(k.mayAct(7), true);
  assert.equal(k.pollTimeout(1), 3, 'the next heartbeat comes before the lease changes');
  assert.deepEqual(k.lease(8), { state: 'jeopardy', expiresAt: 10 });
  assert.equal(k.mayAct(8), false);
  assert.deepEqual(k.lease(10), { state: 'expired' });
  // a later heartbeat extends; a late ack of an older one does not
  k.heartbeatSent(3);
  k.heartbeatSent(6);
  assert.equal(k.heartbeatAcked(6), true);
  assert.equal(k.heartbeatAcked(3), false);
  assert.deepEqual(k.lease(12), { state: 'safe', until: 14 });
  assert.equal(k.pollTimeout(12), 9, 'heartbeat due at 6 + 3, before the lease turns at 14');
  k.sessionLost();
  assert.deepEqual(k.lease(12), { state: 'expired' });
  assert.equal(k.mayAct(12), false);
  assert.equal(k.pollTimeout(12), null);
  // the largest heartbeat time whose lease end is still exact
  const big = new SessionKeeper(10, 3, 2);
  big.heartbeatSent(2 ** 53 - 11);
  big.heartbeatAcked(2 ** 53 - 11);
  assert.deepEqual(big.lease(2 ** 53 - 5), { state: 'safe', until: 2 ** 53 - 3 });
  assert.deepEqual(big.lease(2 ** 53 - 2), { state: 'jeopardy', expiresAt: 2 ** 53 - 1 });
});
