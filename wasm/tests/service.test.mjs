// LockService through the built wasm package: every input and every query, the
// GC-pause story, election, snapshots and the frame entry point. Every input takes the
// host's `now` first and returns {reply, events}.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LockService, FenceGate, SessionKeeper, hex, thrown } from './pkg.mjs';

const caps = { sessions: 8, locks: 8, claims: 16 };
const svcOf = (extra = {}) => new LockService({ ...caps, ...extra });
const open = (svc, now, ttl) => svc.openSession(now, ttl).reply.session;
const X = (wait = 'none', request) => ({ mode: 'exclusive', wait, request });
const S = (wait = 'none', request) => ({ mode: 'shared', wait, request });
const noEvents = (reply) => ({ reply, events: [] });

test('constructor defaults, capacity, usage, maxEvents and config', () => {
  const svc = svcOf();
  assert.deepEqual(svc.config(), { lockDelay: 0, maxNameLen: 64, maxWatchers: 4 });
  assert.deepEqual(svc.capacity(), caps);
  assert.deepEqual(svc.usage(), { sessions: 0, locks: 0, claims: 0 });
  assert.equal(svc.maxEvents(), 0);
  assert.equal(svc.now(), 0);
  assert.equal(svc.revision(), 0);
  assert.equal(svc.pollTimeout(), null);
  assert.deepEqual(svc.sessions(), []);
  assert.deepEqual(svc.locks(), []);
  assert.equal(svc.len, undefined, 'len() is usage() now');
  const custom = svcOf({ lockDelay: 7, maxNameLen: 5 });
  assert.deepEqual(custom.config(), { lockDelay: 7, maxNameLen: 5, maxWatchers: 4 });
  assert.equal(svcOf({ maxWatchers: 0 }).config().maxWatchers, 0);
  // null counts as "not given", like undefined
  assert.deepEqual(svcOf({ lockDelay: null, maxNameLen: null, maxWatchers: null }).config(), { lockDelay: 0, maxNameLen: 64, maxWatchers: 4 });
});

test('openSession and keepAlive reply with the deadline; session(), sessions(), usage()', () => {
  const svc = svcOf();
  assert.deepEqual(svc.openSession(0, 10), noEvents({ kind: 'opened', session: 1, expiresAt: 10 }));
  // the input itself moves time to its now: no tick needed
  assert.deepEqual(svc.openSession(3, 5), noEvents({ kind: 'opened', session: 2, expiresAt: 8 }));
  assert.equal(svc.now(), 3);
  assert.deepEqual(svc.session(2), { id: 2, ttl: 5, expiresAt: 8, holds: 0, waits: 0, watches: 0, lastRequest: 0, label: '' });
  assert.equal(svc.session(99), null);
  assert.deepEqual(svc.sessions(), [1, 2]);
  assert.deepEqual(svc.usage(), { sessions: 2, locks: 0, claims: 0 });
  assert.equal(svc.maxEvents(), 2);
  assert.equal(svc.pollTimeout(), 8);
  assert.deepEqual(svc.keepAlive(6, 2), noEvents({ kind: 'kept_alive', expiresAt: 11 }));
  assert.equal(svc.session(2).expiresAt, 11);
  assert.equal(svc.pollTimeout(), 10);
  assert.deepEqual(svc.tick(10), { reply: { kind: 'ticked', now: 10 }, events: [{ kind: 'session_expired', session: 1 }] });
  assert.deepEqual(svc.sessions(), [2]);
  assert.equal(svc.now(), 10);
});

test('a host that handles messages as they arrive and never ticks loses no session', () => {
  // ttl 10, open at 0, keep-alives at 3, 6, 9, nothing in between: the session lives to 19
  const svc = svcOf();
  const keeper = new SessionKeeper(10, 3, 2); // the client's view, fed the same send times
  keeper.keepAliveSent(0);
  const a = open(svc, 0, 10);
  keeper.keepAliveAcked(0);
  for (const at of [3, 6, 9]) {
    keeper.keepAliveSent(at);
    assert.deepEqual(svc.keepAlive(at, a).reply, { kind: 'kept_alive', expiresAt: at + 10 });
    keeper.keepAliveAcked(at);
  }
  // the keeper says safe until 17; the service agrees the session lives at 12
  assert.deepEqual(keeper.lease(12), { state: 'safe', until: 17 });
  assert.deepEqual(svc.acquire(12, a, 'l', X()).reply, { kind: 'granted', mode: 'exclusive', token: 1 });
  // and an input after the deadline sees the expiry first, among its events
  const b = svc.openSession(19, 10);
  assert.deepEqual(b.reply, { kind: 'opened', session: 2, expiresAt: 29 });
  assert.deepEqual(b.events, [
    { kind: 'session_expired', session: a },
    { kind: 'released', session: a, lock: 'l', token: 1, reason: 'expired' },
  ]);
});

test('acquire: granted, busy, queued, shared, timed wait, re-acquire; release grants the shared run', () => {
  const svc = svcOf();
  const [a, b, c] = [open(svc, 0, 100), open(svc, 0, 100), open(svc, 0, 100)];
  assert.deepEqual(svc.acquire(0, a, 'l', X()), noEvents({ kind: 'granted', mode: 'exclusive', token: 1 }));
  // re-acquire by the holder: the same grant, no new token
  assert.deepEqual(svc.acquire(0, a, 'l', X('forever')), noEvents({ kind: 'granted', mode: 'exclusive', token: 1 }));
  assert.deepEqual(svc.acquire(0, b, 'l', X()), noEvents({ kind: 'busy' }));
  assert.deepEqual(svc.acquire(0, b, 'l', S({ until: 10 })), noEvents({ kind: 'queued', mode: 'shared', position: 1 }));
  assert.deepEqual(svc.acquire(0, c, 'l', S('forever')), noEvents({ kind: 'queued', mode: 'shared', position: 2 }));
  assert.deepEqual(svc.holders('l'), [{ session: a, mode: 'exclusive', token: 1, label: '' }]);
  assert.deepEqual(svc.waiters('l'), [
    { session: b, mode: 'shared', deadline: 10, label: '' },
    { session: c, mode: 'shared', deadline: null, label: '' },
  ]);
  assert.deepEqual(svc.locks(), ['l']);
  assert.deepEqual(svc.session(a), { id: a, ttl: 100, expiresAt: 100, holds: 1, waits: 0, watches: 0, lastRequest: 0, label: '' });
  assert.deepEqual(svc.session(b), { id: b, ttl: 100, expiresAt: 100, holds: 0, waits: 1, watches: 0, lastRequest: 0, label: '' });
  // the releaser's answer is its reply; the waiters' grants are events
  assert.deepEqual(svc.release(1, a, 'l'), {
    reply: { kind: 'released', token: 1 },
    events: [
      { kind: 'granted', session: b, lock: 'l', mode: 'shared', token: 2 },
      { kind: 'granted', session: c, lock: 'l', mode: 'shared', token: 3 },
    ],
  });
  assert.equal(svc.revision(), 3);
  assert.deepEqual(svc.holders('l').map((h) => h.token), [2, 3]);
  assert.deepEqual(svc.holders('nobody'), []);
  assert.deepEqual(svc.waiters('nobody'), []);
  // a name no lock can have finds nothing (the query refuses nothing)
  assert.deepEqual(svc.holders(''), []);
  assert.deepEqual(svc.holders('x'.repeat(70_000)), []);
});

test('timed wait times out by time; cancel withdraws a wait', () => {
  const svc = svcOf();
  const [a, b, c] = [open(svc, 0, 100), open(svc, 0, 100), open(svc, 0, 100)];
  svc.acquire(0, a, 'l', X());
  svc.acquire(0, b, 'l', X({ until: 8 }));
  svc.acquire(0, c, 'l', X('forever'));
  assert.equal(svc.pollTimeout(), 8);
  assert.deepEqual(svc.tick(7), noEvents({ kind: 'ticked', now: 7 }));
  // the time-out is an event of whatever input reaches 8 first: here c's cancel
  assert.deepEqual(svc.cancel(8, c, 'l'), {
    reply: { kind: 'cancelled' },
    events: [{ kind: 'wait_timed_out', session: b, lock: 'l' }],
  });
  assert.deepEqual(svc.waiters('l'), []);
  // a deadline at or before now behaves as a try-lock
  assert.deepEqual(svc.acquire(8, b, 'l', X({ until: 8 })), noEvents({ kind: 'busy' }));
});

test('closeSession: reply closed; its holds released (reason closed) and the next granted', () => {
  const svc = svcOf();
  const [a, b] = [open(svc, 0, 100), open(svc, 0, 100)];
  svc.acquire(0, a, 'x', X());
  svc.acquire(0, a, 'y', X());
  svc.acquire(0, b, 'x', X('forever'));
  assert.deepEqual(svc.closeSession(1, a), {
    reply: { kind: 'closed' },
    events: [
      { kind: 'released', session: a, lock: 'x', token: 1, reason: 'closed' },
      { kind: 'released', session: a, lock: 'y', token: 2, reason: 'closed' },
      { kind: 'granted', session: b, lock: 'x', mode: 'exclusive', token: 3 },
    ],
  });
  assert.equal(svc.session(a), null);
  assert.deepEqual(svc.locks(), ['x']);
});

test('lock-delay after an expiry: lockDelayUntil, pollTimeout, then the grant', () => {
  const svc = svcOf({ lockDelay: 5 });
  const a = open(svc, 0, 10);
  const b = open(svc, 0, 100);
  svc.acquire(0, a, 'l', X());
  svc.acquire(0, b, 'l', X('forever'));
  assert.equal(svc.lockDelayUntil('l'), null);
  assert.deepEqual(svc.tick(10).events, [
    { kind: 'session_expired', session: a },
    { kind: 'released', session: a, lock: 'l', token: 1, reason: 'expired' },
  ]);
  assert.equal(svc.lockDelayUntil('l'), 15);
  assert.equal(svc.pollTimeout(), 15);
  assert.deepEqual(svc.tick(14).events, []);
  assert.deepEqual(svc.tick(15).events, [{ kind: 'granted', session: b, lock: 'l', mode: 'exclusive', token: 2 }]);
  assert.equal(svc.lockDelayUntil('l'), null);
});

test('a refused input: the advance to its now stands, its events are on the error', () => {
  const svc = svcOf();
  const a = open(svc, 0, 10);
  const b = open(svc, 0, 100);
  svc.acquire(0, a, 'l', X());
  svc.acquire(0, b, 'l', X('forever'));
  // b releases a lock it does not hold, at 12: a expired at 10 and b was granted first
  const err = thrown(() => svc.release(12, b, 'other'));
  assert.equal(err.code, 'not_holder');
  assert.deepEqual(err.events, [
    { kind: 'session_expired', session: a },
    { kind: 'released', session: a, lock: 'l', token: 1, reason: 'expired' },
    { kind: 'granted', session: b, lock: 'l', mode: 'exclusive', token: 2 },
  ]);
  assert.equal(svc.now(), 12);
  assert.deepEqual(svc.holders('l'), [{ session: b, mode: 'exclusive', token: 2, label: '' }]);
  // time going backwards changes nothing at all
  const snap = hex(svc.snapshot());
  const back = thrown(() => svc.acquire(11, b, 'm', X()));
  assert.equal(back.code, 'time_went_backwards');
  assert.equal(back.now, 12);
  assert.equal(back.requested, 11);
  assert.deepEqual(back.events, []);
  assert.equal(hex(svc.snapshot()), snap);
  // an argument that cannot be a u64 is refused before the core: no events, no advance
  assert.deepEqual(thrown(() => svc.tick(-1)).events, []);
});

test('idempotent retries return the recorded reply and change nothing', () => {
  const svc = svcOf();
  const [a, b] = [open(svc, 0, 100), open(svc, 0, 100)];
  const first = svc.acquire(0, a, 'l', X('forever', 1));
  const snap = hex(svc.snapshot());
  assert.deepEqual(svc.acquire(0, a, 'l', X('forever', 1)), first);
  assert.equal(hex(svc.snapshot()), snap);
  assert.equal(svc.session(a).lastRequest, 1);
  assert.deepEqual(svc.keepAlive(0, a, 2).reply, { kind: 'kept_alive', expiresAt: 100 });
  assert.deepEqual(svc.keepAlive(0, a, 2).reply, { kind: 'kept_alive', expiresAt: 100 });
  assert.deepEqual(svc.acquire(0, b, 'l', X('forever', 7)).reply, { kind: 'queued', mode: 'exclusive', position: 1 });
  assert.deepEqual(svc.release(0, a, 'l', 3), {
    reply: { kind: 'released', token: 1 },
    events: [{ kind: 'granted', session: b, lock: 'l', mode: 'exclusive', token: 2 }],
  });
  // the retry returns the release's reply only (the grant went to b once)
  assert.deepEqual(svc.release(0, a, 'l', 3), noEvents({ kind: 'released', token: 1 }));
  // b's repeated acquire answers from its claim now: granted since it was queued
  assert.deepEqual(svc.acquire(0, b, 'l', X('forever', 7)).reply, { kind: 'granted', mode: 'exclusive', token: 2 });
  // a's repeat of its granted acquire after the release: hold_ended (a is at request 3
  // now, so a fresh session shows it)
  const c = open(svc, 0, 100);
  svc.acquire(0, c, 'k', X('none', 1));
  svc.closeSession(0, b);
  assert.equal(svc.holders('l').length, 0);
  svc.acquire(0, c, 'l', X('none', 2));
  svc.release(0, c, 'k');
  assert.deepEqual(svc.acquire(0, c, 'l', X('none', 2)).reply, { kind: 'granted', mode: 'exclusive', token: 4 });
  svc.release(0, c, 'l');
  assert.deepEqual(svc.acquire(0, c, 'l', X('none', 2)).reply, { kind: 'hold_ended', token: 4 });
  // stale and reused numbers are the core's errors
  assert.equal(thrown(() => svc.acquire(0, c, 'l', X('none', 1))).code, 'stale_request');
  assert.equal(thrown(() => svc.release(0, c, 'l', 2)).code, 'request_reused');
  // null and undefined mean "no request number"
  assert.deepEqual(svc.keepAlive(0, a, null).reply.kind, 'kept_alive');
  assert.deepEqual(svc.closeSession(0, a, undefined).reply, { kind: 'closed' });
});

test('a repeated acquire whose wait ended replies wait_ended', () => {
  const svc = svcOf();
  const [a, b] = [open(svc, 0, 100), open(svc, 0, 100)];
  svc.acquire(0, a, 'l', X());
  assert.equal(svc.acquire(0, b, 'l', X({ until: 5 }, 1)).reply.kind, 'queued');
  assert.deepEqual(svc.tick(5).events, [{ kind: 'wait_timed_out', session: b, lock: 'l' }]);
  assert.deepEqual(svc.acquire(6, b, 'l', X({ until: 5 }, 1)), noEvents({ kind: 'wait_ended' }));
});

test('election: campaign, leader, resign promotes the next candidate with a higher epoch', () => {
  const svc = svcOf();
  const [a, b] = [open(svc, 0, 100), open(svc, 0, 100)];
  assert.equal(svc.leader('e'), null);
  assert.deepEqual(svc.campaign(0, a, 'e'), noEvents({ kind: 'granted', mode: 'exclusive', token: 1 }));
  assert.deepEqual(svc.campaign(0, b, 'e'), noEvents({ kind: 'queued', mode: 'exclusive', position: 1 }));
  assert.deepEqual(svc.leader('e'), { session: a, epoch: 1 });
  assert.deepEqual(svc.resign(1, a, 'e'), {
    reply: { kind: 'released', token: 1 },
    events: [{ kind: 'granted', session: b, lock: 'e', mode: 'exclusive', token: 2 }],
  });
  assert.deepEqual(svc.leader('e'), { session: b, epoch: 2 });
  const c = open(svc, 1, 100);
  svc.campaign(1, c, 'e', 1);
  assert.deepEqual(svc.resign(1, c, 'e', 2), noEvents({ kind: 'cancelled' }));
  assert.equal(thrown(() => svc.resign(1, c, 'e')).code, 'not_queued');
});

// The GC-pause scenario: client A holds the lock with token 34, pauses (GC) past its
// session's expiry; the service expires it and grants B token 35; B writes; A wakes
// and writes with 34, and the resource's gate refuses it.
test('the GC-pause story: 34 granted, session expired, 35 granted, 34 refused', () => {
  const svc = svcOf();
  const gate = new FenceGate(4);
  const warm = open(svc, 0, 1000);
  for (let i = 0; i < 33; i++) {
    svc.acquire(0, warm, 'ledger', X());
    svc.release(0, warm, 'ledger');
  }
  assert.equal(svc.revision(), 33);

  const a = open(svc, 0, 10); // expires at 10 unless kept alive
  const b = open(svc, 0, 30);
  const keeperA = new SessionKeeper(10, 3, 2);
  keeperA.keepAliveSent(0);
  assert.equal(keeperA.keepAliveAcked(0), true);

  assert.deepEqual(svc.acquire(0, a, 'ledger', X('forever')).reply, { kind: 'granted', mode: 'exclusive', token: 34 });
  assert.ok(keeperA.mayAct(1));
  gate.admit('ledger', 34); // A writes before its pause
  assert.deepEqual(svc.acquire(1, b, 'ledger', X('forever')).reply, { kind: 'queued', mode: 'exclusive', position: 1 });

  // A pauses: no keep-alive. B keeps its session alive at 5; the service's timer fires at 10.
  assert.deepEqual(svc.keepAlive(5, b), noEvents({ kind: 'kept_alive', expiresAt: 35 }));
  assert.equal(svc.pollTimeout(), 10);
  assert.deepEqual(svc.tick(10).events, [
    { kind: 'session_expired', session: a },
    { kind: 'released', session: a, lock: 'ledger', token: 34, reason: 'expired' },
    { kind: 'granted', session: b, lock: 'ledger', mode: 'exclusive', token: 35 },
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
  assert.equal(thrown(() => svc.keepAlive(12, a)).code, 'unknown_session');
});

test('handle(input) matches the typed methods, answer for answer and byte for byte', () => {
  const typed = svcOf({ lockDelay: 2 });
  const tagged = svcOf({ lockDelay: 2 });
  const steps = [
    [(s) => s.openSession(0, 10), { kind: 'open_session', now: 0, ttl: 10 }],
    [(s) => s.openSession(0, 20), { kind: 'open_session', now: 0, ttl: 20 }],
    [(s) => s.acquire(0, 1, 'l', X('none', 1)), { kind: 'acquire', now: 0, session: 1, lock: 'l', mode: 'exclusive', wait: 'none', request: 1 }],
    [(s) => s.acquire(1, 2, 'l', S({ until: 15 })), { kind: 'acquire', now: 1, session: 2, lock: 'l', mode: 'shared', wait: { until: 15 } }],
    [(s) => s.acquire(1, 2, 'm', X('forever', null)), { kind: 'acquire', now: 1, session: 2, lock: 'm', mode: 'exclusive', wait: 'forever', request: null }],
    [(s) => s.keepAlive(2, 2, 1), { kind: 'keep_alive', now: 2, session: 2, request: 1 }],
    [(s) => s.tick(4), { kind: 'tick', now: 4 }],
    [(s) => s.keepAlive(4, 1), { kind: 'keep_alive', now: 4, session: 1 }],
    [(s) => s.release(5, 1, 'l', 2), { kind: 'release', now: 5, session: 1, lock: 'l', request: 2 }],
    [(s) => s.acquire(5, 1, 'm', X('forever')), { kind: 'acquire', now: 5, session: 1, lock: 'm', mode: 'exclusive', wait: 'forever' }],
    [(s) => s.cancel(6, 1, 'm'), { kind: 'cancel', now: 6, session: 1, lock: 'm' }],
    [(s) => s.closeSession(6, 2, 2), { kind: 'close_session', now: 6, session: 2, request: 2 }],
    [(s) => s.tick(14), { kind: 'tick', now: 14 }],
  ];
  for (const [call, input] of steps) {
    const want = call(typed);
    assert.deepEqual(tagged.handle(input), want, JSON.stringify(input));
    assert.equal(hex(tagged.snapshot()), hex(typed.snapshot()));
  }
  // errors too, in the core's order: unknown session before the empty name
  const input = { kind: 'acquire', now: 14, session: 9, lock: '', mode: 'exclusive', wait: 'none' };
  assert.equal(thrown(() => tagged.handle(input)).code, 'unknown_session');
  assert.equal(thrown(() => tagged.handle({ kind: 'openSession', now: 14, ttl: 1 })).code, 'bad_argument');
});

test('handleFrame: postcard frames in, {reply, events} frames out, same state as the typed API', () => {
  const svc = svcOf();
  const twin = svcOf();
  // OpenSession{now: 0, ttl: 10} = variant 0, varints 0 and 10 → Opened{session 1, expires_at 10}
  assert.deepEqual(svc.handleFrame(new Uint8Array([0x00, 0x00, 0x0a])), {
    reply: new Uint8Array([0x00, 0x01, 0x0a]),
    events: [],
  });
  twin.openSession(0, 10);
  // Acquire{now 0, session 1, "l", Exclusive, Forever, None} → Granted{Exclusive, token 1}
  const acq = new Uint8Array([0x03, 0x00, 0x01, 0x01, 0x6c, 0x00, 0x02, 0x00]);
  const got = svc.handleFrame(acq);
  assert.equal(hex(got.reply), '030001');
  twin.acquire(0, 1, 'l', X('forever'));
  assert.equal(hex(svc.snapshot()), hex(twin.snapshot()));
  // a Buffer is a Uint8Array too: Tick{now: 20} → Ticked{20}; events SessionExpired{1},
  // Released{1, "l", token 1, Expired}
  assert.deepEqual(svc.handleFrame(Buffer.from('0614', 'hex')), {
    reply: new Uint8Array([0x0a, 0x14]),
    events: [new Uint8Array([0x02, 0x01]), new Uint8Array([0x01, 0x01, 0x01, 0x6c, 0x01, 0x02])],
  });
  twin.tick(20);
  assert.equal(hex(svc.snapshot()), hex(twin.snapshot()));
  // a refused frame input: OpenSession{now 20, ttl 5} opens session 2 (until 25); then
  // Release{now 30, session 2, "l", None}: the advance expires session 2 (it stands,
  // its event frame is on the error), then the release finds no such session
  assert.equal(hex(svc.handleFrame(Buffer.from('001405', 'hex')).reply), '000219');
  const err = thrown(() => svc.handleFrame(Buffer.from('041e02016c00', 'hex')));
  assert.equal(err.code, 'unknown_session');
  assert.deepEqual(err.eventFrames.map(hex), ['0202']);
  assert.equal(svc.now(), 30);
  assert.equal(thrown(() => svc.handleFrame(new Uint8Array([0x06]))).code, 'bad_frame');
  // frames keep full u64 range: a tick to u64::MAX is applied…
  svc.handleFrame(new Uint8Array([0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]));
  // …and the queries answer exactly, as a bigint past 2^53 - 1
  assert.equal(svc.now(), 2n ** 64n - 1n);
  const back = thrown(() => svc.tick(5));
  assert.equal(back.code, 'time_went_backwards');
  assert.equal(back.now, 2n ** 64n - 1n);
  assert.equal(back.requested, 5);
});

test('numbers past 2^53 - 1 come out as exact bigints and go in as bigints', () => {
  const svc = svcOf();
  const big = 2n ** 60n;
  // now + ttl past 2^53: applied (the core allows it), the deadline comes out exact
  const a = svc.openSession(Number.MAX_SAFE_INTEGER - 1, 10).reply;
  assert.deepEqual(a, { kind: 'opened', session: 1, expiresAt: BigInt(Number.MAX_SAFE_INTEGER) + 9n });
  assert.equal(svc.session(1).expiresAt, BigInt(Number.MAX_SAFE_INTEGER) + 9n);
  assert.deepEqual(svc.tick(big), { reply: { kind: 'ticked', now: big }, events: [{ kind: 'session_expired', session: 1 }] });
  assert.equal(svc.now(), big);
  assert.deepEqual(svc.openSession(big, 1n).reply, { kind: 'opened', session: 2, expiresAt: big + 1n });
  // a bigint that is a small number is still a number out
  assert.deepEqual(svc.acquire(big, 2n, 'l', X()).reply, { kind: 'granted', mode: 'exclusive', token: 1 });
  assert.equal(thrown(() => svc.tick(-1n)).code, 'out_of_range');
  assert.equal(thrown(() => svc.tick(2n ** 64n)).code, 'out_of_range');
});

test('snapshot/restore: same bytes, same behaviour after restore', () => {
  const svc = svcOf({ lockDelay: 3 });
  const [a, b] = [open(svc, 0, 10), open(svc, 0, 50)];
  svc.acquire(0, a, 'l', X());
  svc.acquire(0, b, 'l', X({ until: 40 }));
  svc.tick(2);
  const bytes = svc.snapshot();
  assert.ok(bytes instanceof Uint8Array);
  const copy = LockService.restore(bytes, caps);
  assert.equal(hex(copy.snapshot()), hex(bytes));
  assert.deepEqual(copy.config(), { lockDelay: 3, maxNameLen: 64, maxWatchers: 4 });
  // both continue identically (ids, tokens, lock-delay)
  for (const s of [svc, copy]) {
    assert.deepEqual(s.openSession(2, 5).reply, { kind: 'opened', session: 3, expiresAt: 7 });
    assert.deepEqual(s.tick(10).events.map((o) => o.kind), [
      'session_expired', // session 3, due at 7, goes first
      'session_expired', // a, due at 10
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
  assert.equal(hex(svc.handleFrame(new Liar([0x00, 0x00, 0x0a])).reply), '00010a');
  const copy = LockService.restore(new Liar(svc.snapshot()), caps);
  assert.equal(hex(copy.snapshot()), hex(svc.snapshot()));
  assert.equal(svc.tick(1).events.length, 0, 'the handle is still usable');
});
