// Semaphores (mode {permits, limit}), holder labels (openLabeled), watches (watch /
// unwatch and their holder_changed events) and raiseRevision through the built wasm
// package: the story with every reply and event, the tagged inputs of handle(), and
// every refusal (the right .code and details, the snapshot byte-identical).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LockService, hex, thrown } from './pkg.mjs';

const caps = { sessions: 8, locks: 8, claims: 16 };
const P = (permits, limit, wait = 'none', request) => ({ mode: { permits, limit }, wait, request });
const change = (session, lock, holder, mode, token, c, label) => ({
  kind: 'holder_changed', session, lock, holder, mode, token, change: c, label,
});

test('a semaphore grants in FIFO order with a token per grant; a watcher hears every holder change', () => {
  const svc = new LockService({ ...caps, maxWatchers: 2 });
  assert.equal(svc.config().maxWatchers, 2);
  const a = svc.openLabeled(0, 100, 'worker-a').reply.session;
  const b = svc.openLabeled(0, 100, 'worker-b').reply.session;
  const w = svc.openSession(0, 100).reply.session;
  const c = svc.openLabeled(0, 100, '').reply.session;
  assert.equal(svc.session(a).label, 'worker-a');
  assert.equal(svc.session(c).label, '');

  assert.deepEqual(svc.watch(0, w, 'pool'), { reply: { kind: 'watching', holders: 0 }, events: [] });
  assert.deepEqual([svc.session(w).holds, svc.session(w).waits, svc.session(w).watches], [0, 0, 1]);
  const two = { permits: 2, limit: 3 };
  assert.deepEqual(svc.acquire(0, a, 'pool', P(2, 3)), {
    reply: { kind: 'granted', mode: two, token: 1 },
    events: [change(w, 'pool', a, two, 1, 'granted', 'worker-a')],
  });
  assert.deepEqual(svc.permits('pool'), { inUse: 2, limit: 3 });
  assert.deepEqual(svc.acquire(0, b, 'pool', P(2, 3, 'forever')), {
    reply: { kind: 'queued', mode: two, position: 1 },
    events: [],
  });
  assert.deepEqual(svc.holders('pool'), [{ session: a, mode: two, token: 1, label: 'worker-a' }]);
  assert.deepEqual(svc.waiters('pool'), [{ session: b, mode: two, deadline: null, label: 'worker-b' }]);
  // one session's hold: a holds; b only waits, w only watches, 99 is no session
  assert.deepEqual(svc.hold(a, 'pool'), { session: a, mode: two, token: 1, label: 'worker-a' });
  assert.deepEqual(svc.hold(BigInt(a), 'pool'), svc.hold(a, 'pool'));
  for (const [s, l] of [[b, 'pool'], [w, 'pool'], [99, 'pool'], [a, 'never']]) {
    assert.equal(svc.hold(s, l), null, `${s} ${l}`);
  }
  // 2 + 1 fits the limit, but b waits ahead: strict FIFO, a try-acquire is busy
  assert.deepEqual(svc.acquire(0, c, 'pool', P(1, 3)).reply, { kind: 'busy' });

  assert.deepEqual(svc.release(1, a, 'pool'), {
    reply: { kind: 'released', token: 1 },
    events: [
      change(w, 'pool', a, two, 1, 'released', 'worker-a'),
      { kind: 'granted', session: b, lock: 'pool', mode: two, token: 2 },
      change(w, 'pool', b, two, 2, 'granted', 'worker-b'),
    ],
  });
  assert.deepEqual(svc.unwatch(1, w, 'pool'), { reply: { kind: 'unwatched' }, events: [] });
  assert.deepEqual(svc.watch(1, c, 'pool'), {
    reply: { kind: 'watching', holders: 1 },
    events: [change(c, 'pool', b, two, 2, 'holding', 'worker-b')],
  });
  const closed = svc.closeSession(2, b);
  assert.deepEqual(closed.events, [
    { kind: 'released', session: b, lock: 'pool', token: 2, reason: 'closed' },
    change(c, 'pool', b, two, 2, 'closed', 'worker-b'),
  ]);
  assert.equal(svc.permits('pool'), null);
  assert.equal(svc.permits('never'), null);
});

test('handle() takes the tagged inputs open_labeled, watch, unwatch and a permits acquire', () => {
  const svc = new LockService(caps);
  assert.deepEqual(svc.handle({ kind: 'open_labeled', now: 0, ttl: 10, label: 'l1' }).reply, { kind: 'opened', session: 1, expiresAt: 10 });
  svc.handle({ kind: 'open_session', now: 0, ttl: 10 });
  assert.deepEqual(svc.handle({ kind: 'watch', now: 0, session: 2, lock: 's' }).reply, { kind: 'watching', holders: 0 });
  const got = svc.handle({ kind: 'acquire', now: 1, session: 1, lock: 's', mode: { permits: 1, limit: 2 }, wait: 'none' });
  assert.deepEqual(got, {
    reply: { kind: 'granted', mode: { permits: 1, limit: 2 }, token: 1 },
    events: [change(2, 's', 1, { permits: 1, limit: 2 }, 1, 'granted', 'l1')],
  });
  assert.deepEqual(svc.handle({ kind: 'unwatch', now: 1, session: 2, lock: 's', request: 3 }).reply, { kind: 'unwatched' });
  assert.equal(svc.session(2).lastRequest, 3);
  // the same inputs as frames give the same state
  const twin = new LockService(caps);
  for (const input of [
    { kind: 'open_labeled', now: 0, ttl: 10, label: 'l1' },
    { kind: 'open_session', now: 0, ttl: 10 },
    { kind: 'watch', now: 0, session: 2, lock: 's' },
    { kind: 'acquire', now: 1, session: 1, lock: 's', mode: { permits: 1, limit: 2 }, wait: 'none' },
    { kind: 'unwatch', now: 1, session: 2, lock: 's', request: 3 },
  ]) twin.handle(input);
  assert.equal(hex(twin.snapshot()), hex(svc.snapshot()));
});

test('raiseRevision puts the next token above the floor; a refused floor changes nothing', () => {
  const svc = new LockService(caps);
  const a = svc.openSession(0, 10).reply.session;
  assert.equal(svc.acquire(0, a, 'l', { mode: 'exclusive', wait: 'none' }).reply.token, 1);
  assert.equal(svc.raiseRevision(1000), 1000);
  assert.equal(svc.raiseRevision(5), 1000, 'a lower floor changes nothing');
  assert.equal(svc.raiseRevision(2n ** 60n), 2n ** 60n, 'exact as a bigint');
  const before = hex(svc.snapshot());
  const e = thrown(() => svc.raiseRevision(2n ** 62n + 1n));
  assert.equal(e.code, 'bad_config');
  assert.match(e.message, /2\^62/);
  assert.equal(thrown(() => svc.raiseRevision(-1)).code, 'out_of_range');
  assert.equal(thrown(() => svc.raiseRevision('7')).code, 'out_of_range');
  assert.equal(hex(svc.snapshot()), before);
  assert.equal(svc.acquire(0, a, 'm', { mode: 'exclusive', wait: 'none' }).reply.token, 2n ** 60n + 1n);
  assert.equal(LockService.restore(svc.snapshot(), caps).revision(), 2n ** 60n + 1n);
});

/** At now 5: a (1, "a") holds 2 of "pool"'s 3 permits and "plain" exclusively and watches "pool"; b (2) is unlabeled. maxWatchers 1. */
function semService() {
  const svc = new LockService({ ...caps, maxWatchers: 1 });
  svc.tick(5);
  svc.openLabeled(5, 50, 'a');
  svc.openSession(5, 50);
  svc.acquire(5, 1, 'pool', P(2, 3));
  svc.acquire(5, 1, 'plain', { mode: 'exclusive', wait: 'none' });
  svc.watch(5, 1, 'pool');
  return svc;
}

const refusals = [
  ['another limit', (s) => s.acquire(5, 2, 'pool', P(1, 4)), 'limit_mismatch', { limit: 3 }],
  ['a shared acquire on a semaphore', (s) => s.acquire(5, 2, 'pool', { mode: 'shared', wait: 'none' }), 'limit_mismatch', { limit: 3 }],
  ['permits on a plain lock', (s) => s.acquire(5, 2, 'plain', P(1, 2)), 'limit_mismatch', { limit: 0 }],
  ['count 0', (s) => s.acquire(5, 2, 'pool', P(0, 3)), 'bad_permits', { count: 0, limit: 3 }],
  ['count above the limit', (s) => s.acquire(5, 2, 'pool', P(4, 3)), 'bad_permits', { count: 4, limit: 3 }],
  ['another count than held', (s) => s.acquire(5, 1, 'pool', P(1, 3)), 'mode_mismatch', { held: { permits: 2, limit: 3 } }],
  ['a second watch', (s) => s.watch(5, 1, 'pool'), 'already_watching', { session: 1 }],
  ['unwatch without a watch', (s) => s.unwatch(5, 2, 'pool'), 'not_watching', { session: 2 }],
  ['a watcher past maxWatchers', (s) => s.watch(5, 2, 'pool'), 'capacity_exceeded', { table: 'watchers' }],
  ['watch by an unknown session', (s) => s.watch(5, 9, 'pool'), 'unknown_session', { session: 9 }],
  ['watch of an empty name', (s) => s.watch(5, 2, ''), 'empty_name', {}],
  ['watch with time going backwards', (s) => s.watch(4, 2, 'x'), 'time_went_backwards', { now: 5, requested: 4 }],
  ['a label of 65 bytes', (s) => s.openLabeled(5, 10, 'l'.repeat(65)), 'label_too_long', { len: 65, max: 64 }],
  ['a label of 2^16 + 1 characters (never copied in)', (s) => s.openLabeled(5, 10, 'l'.repeat(2 ** 16 + 1)), 'label_too_long', { len: 2 ** 16 + 1, max: 64 }],
  ['a label of 33 two-byte characters', (s) => s.openLabeled(5, 10, 'é'.repeat(33)), 'label_too_long', { len: 66, max: 64 }],
  ['a label with time going backwards', (s) => s.openLabeled(4, 10, 'l'), 'time_went_backwards', {}],
  ['a label that is not a string', (s) => s.openLabeled(5, 10, 7), 'bad_argument', {}],
  ['a label with a lone surrogate', (s) => s.openLabeled(5, 10, 'a\ud800'), 'bad_argument', {}],
  ['mode {permits} without a limit', (s) => s.acquire(5, 2, 'pool', { mode: { permits: 1 }, wait: 'none' }), 'out_of_range', {}],
  ['mode {permits: -1}', (s) => s.acquire(5, 2, 'pool', { mode: { permits: -1, limit: 3 }, wait: 'none' }), 'out_of_range', {}],
  ['mode {permits: 2^32}', (s) => s.acquire(5, 2, 'pool', { mode: { permits: 2 ** 32, limit: 3 }, wait: 'none' }), 'out_of_range', {}],
  ['mode with an unknown key', (s) => s.acquire(5, 2, 'pool', { mode: { permits: 1, limit: 3, lmit: 3 }, wait: 'none' }), 'bad_argument', { key: 'lmit' }],
  ['mode "permits"', (s) => s.acquire(5, 2, 'pool', { mode: 'permits', wait: 'none' }), 'bad_argument', {}],
  ['handle({watch}) with an unknown key', (s) => s.handle({ kind: 'watch', now: 5, session: 2, lock: 'pool', lcok: 1 }), 'bad_argument', { key: 'lcok' }],
  ['handle({open_labeled}) without a label', (s) => s.handle({ kind: 'open_labeled', now: 5, ttl: 10 }), 'bad_argument', {}],
  ['handle({unwatch}) without a watch', (s) => s.handle({ kind: 'unwatch', now: 5, session: 2, lock: 'pool' }), 'not_watching', {}],
  ['permits(lock: 5)', (s) => s.permits(5), 'bad_argument', {}],
];

for (const [name, call, code, details] of refusals) {
  test(`refused: ${name} (${code}), nothing changed`, () => {
    const svc = semService();
    const before = hex(svc.snapshot());
    const err = thrown(() => call(svc));
    assert.equal(err.code, code, err.message);
    for (const [k, v] of Object.entries(details)) assert.deepEqual(err[k], v, k);
    if (err.events !== undefined) assert.deepEqual(err.events, []);
    assert.equal(hex(svc.snapshot()), before);
  });
}

test('maxWatchers 0 turns watches off; a 64-byte label is accepted', () => {
  const svc = new LockService({ ...caps, maxWatchers: 0 });
  const a = svc.openLabeled(0, 10, 'é'.repeat(32)).reply.session;
  assert.equal(svc.session(a).label, 'é'.repeat(32));
  const e = thrown(() => svc.watch(0, a, 'l'));
  assert.deepEqual([e.code, e.table], ['capacity_exceeded', 'watchers']);
  assert.equal(thrown(() => new LockService({ ...caps, maxWatchers: -1 })).code, 'out_of_range');
});
