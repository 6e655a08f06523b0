// releaseHold (the core's release_hold, docs/SPEC.md §3 "ReleaseHold") through the built
// wasm package: the release of the one hold a token names. Its own token releases as
// `release` would (the same answer, events and state); the token of a hold that is over,
// after the session took the lock again, is refused not_holder and changes nothing (the
// snapshot byte-identical); the tagged input handle({kind: "release_hold"}) and the frame
// entry point reach the same core call; a request number covers the token; the binding's
// argument checks come first, in argument order.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LockService, hex, thrown, varint } from './pkg.mjs';

const caps = { sessions: 8, locks: 8, claims: 16 };
const X = (wait = 'none', request) => ({ mode: 'exclusive', wait, request });

/** A service where session `a` held "l" with token 1, released it and holds it again with token 2. */
function reacquired() {
  const svc = new LockService(caps);
  const a = svc.openSession(0, 100).reply.session;
  assert.deepEqual(svc.acquire(1, a, 'l', X()).reply, { kind: 'granted', mode: 'exclusive', token: 1 });
  assert.deepEqual(svc.release(2, a, 'l').reply, { kind: 'released', token: 1 });
  assert.deepEqual(svc.acquire(3, a, 'l', X()).reply, { kind: 'granted', mode: 'exclusive', token: 2 });
  return { svc, a };
}

/** The frame of Input::ReleaseHold (variant 10): now, session, lock, token, request. */
function releaseHoldFrame(now, session, lock, token, request = null) {
  const name = [...new TextEncoder().encode(lock)];
  const req = request === null ? [0] : [1, ...varint(request)];
  return new Uint8Array([10, ...varint(now), ...varint(session), ...varint(name.length), ...name, ...varint(token), ...req]);
}

test('the token of a hold that is over is refused not_holder after the session took the lock again, and nothing changes', () => {
  const { svc, a } = reacquired();
  const before = hex(svc.snapshot());
  const err = thrown(() => svc.releaseHold(3, a, 'l', 1));
  assert.equal(err.code, 'not_holder');
  assert.equal(err.errno, 102);
  assert.equal(err.session, a);
  assert.deepEqual(err.events, []);
  assert.equal(hex(svc.snapshot()), before, 'the snapshot is byte-identical');
  assert.deepEqual(svc.holders('l'), [{ session: a, mode: 'exclusive', token: 2, label: '' }]);
  assert.equal(svc.session(a).holds, 1);
  // a token never granted, and a token of another session's hold, are not this hold either
  assert.equal(thrown(() => svc.releaseHold(3, a, 'l', 3)).code, 'not_holder');
  assert.equal(thrown(() => svc.releaseHold(3, a, 'l', 0)).code, 'not_holder');
  assert.equal(thrown(() => svc.releaseHold(3, a, 'other', 2)).code, 'not_holder', 'no such lock');
  assert.equal(hex(svc.snapshot()), before);
  // the hold's own token releases it
  assert.deepEqual(svc.releaseHold(4, a, 'l', 2), { reply: { kind: 'released', token: 2 }, events: [] });
  assert.deepEqual(svc.holders('l'), []);
  // and now it is over too
  assert.equal(thrown(() => svc.releaseHold(4, a, 'l', 2)).code, 'not_holder');
});

test('its own token releases exactly as release does: the same reply, events and state', () => {
  const make = () => {
    const svc = new LockService({ ...caps, maxWatchers: 1 });
    const [a, b, w] = [0, 1, 2].map(() => svc.openSession(0, 100).reply.session);
    svc.watch(0, w, 'l');
    svc.acquire(0, a, 'l', X());
    svc.acquire(0, b, 'l', X('forever'));
    return { svc, a, b, w };
  };
  const one = make();
  const two = make();
  const byToken = one.svc.releaseHold(5, one.a, 'l', 1);
  const bySession = two.svc.release(5, two.a, 'l');
  assert.deepEqual(byToken, bySession);
  assert.equal(byToken.reply.kind, 'released');
  assert.equal(byToken.reply.token, 1);
  // the watcher hears the release, the waiter is granted token 2
  assert.deepEqual(byToken.events.map((e) => [e.kind, e.session, e.token]), [
    ['holder_changed', one.w, 1],
    ['granted', one.b, 2],
    ['holder_changed', one.w, 2],
  ]);
  assert.equal(hex(one.svc.snapshot()), hex(two.svc.snapshot()));
  // a bigint token is taken as a number is
  const again = make();
  assert.deepEqual(again.svc.releaseHold(5n, again.a, 'l', 1n), byToken);
});

test('handle({kind: "release_hold"}) takes the token by name and makes the same core call', () => {
  const { svc, a } = reacquired();
  const before = hex(svc.snapshot());
  const err = thrown(() => svc.handle({ kind: 'release_hold', now: 3, session: a, lock: 'l', token: 1 }));
  assert.equal(err.code, 'not_holder');
  assert.equal(hex(svc.snapshot()), before);
  assert.deepEqual(svc.handle({ kind: 'release_hold', now: 4, session: a, lock: 'l', token: 2, request: null }), {
    reply: { kind: 'released', token: 2 },
    events: [],
  });
  assert.deepEqual(svc.holders('l'), []);
  // every field is checked as the typed method checks it, a missing token included
  assert.equal(thrown(() => svc.handle({ kind: 'release_hold', now: 4, session: a, lock: 'l' })).code, 'out_of_range');
  assert.equal(thrown(() => svc.handle({ kind: 'release_hold', now: 4, session: a, lock: 'l', token: -1 })).code, 'out_of_range');
  assert.equal(thrown(() => svc.handle({ kind: 'release_hold', now: 4, session: a, lock: 7, token: 1 })).code, 'bad_argument');
  const typo = thrown(() => svc.handle({ kind: 'release_hold', now: 4, session: a, lock: 'l', tokn: 1 }));
  assert.equal(typo.code, 'bad_argument');
  assert.equal(typo.key, 'tokn');
  // release takes no token: a token on it is a key it does not know
  assert.equal(thrown(() => svc.handle({ kind: 'release', now: 4, session: a, lock: 'l', token: 1 })).key, 'token');
  assert.match(thrown(() => svc.handle({ kind: 'explode', now: 4 })).message, /release_hold/);
});

test('handleFrame takes the ReleaseHold frame: the same answers as releaseHold', () => {
  const { svc, a } = reacquired();
  const copy = LockService.restore(svc.snapshot(), svc.capacity());
  const err = thrown(() => svc.handleFrame(releaseHoldFrame(3, a, 'l', 1)));
  assert.equal(err.code, 'not_holder');
  assert.deepEqual(err.eventFrames, []);
  assert.equal(thrown(() => copy.releaseHold(3, a, 'l', 1)).code, 'not_holder');
  const frames = svc.handleFrame(releaseHoldFrame(4, a, 'l', 2, 1));
  assert.equal(hex(frames.reply), '0602', 'Released { token: 2 }');
  assert.deepEqual(copy.releaseHold(4, a, 'l', 2, 1).reply, { kind: 'released', token: 2 });
  assert.equal(hex(svc.snapshot()), hex(copy.snapshot()));
});

test('a request number covers the token: a repeat replays released, another token or a release is request_reused', () => {
  const svc = new LockService(caps);
  const a = svc.openSession(0, 100).reply.session;
  svc.acquire(0, a, 'l', X());
  const first = svc.releaseHold(1, a, 'l', 1, 1);
  assert.deepEqual(first, { reply: { kind: 'released', token: 1 }, events: [] });
  svc.acquire(2, a, 'l', X()); // token 2, unnumbered: the latest number is still 1
  // the repeat replays the recorded answer and does not release the hold taken since
  assert.deepEqual(svc.releaseHold(3, a, 'l', 1, 1), first);
  assert.deepEqual(svc.holders('l').map((h) => h.token), [2]);
  for (const reuse of [() => svc.releaseHold(3, a, 'l', 2, 1), () => svc.release(3, a, 'l', 1)]) {
    assert.equal(thrown(reuse).code, 'request_reused');
  }
  assert.equal(thrown(() => svc.releaseHold(3, a, 'l', 2, 0)).code, 'stale_request');
  assert.deepEqual(svc.releaseHold(3, a, 'l', 2, 2).reply, { kind: 'released', token: 2 });
});

test('refusals come in release\'s order, the binding\'s argument checks first and in argument order', () => {
  const { svc, a } = reacquired();
  const before = hex(svc.snapshot());
  const cases = [
    // before the core: nothing changes, not even time
    ['now -1', () => svc.releaseHold(-1, a, 'l', 2), 'out_of_range'],
    ['session "1"', () => svc.releaseHold(9, '1', 'l', 2), 'out_of_range'],
    ['lock null', () => svc.releaseHold(9, a, null, 2), 'bad_argument'],
    ['lock null and token -1: the lock first', () => svc.releaseHold(9, a, null, -1), 'bad_argument'],
    ['token missing', () => svc.releaseHold(9, a, 'l'), 'out_of_range'],
    ['token 2^53', () => svc.releaseHold(9, a, 'l', 2 ** 53), 'out_of_range'],
    ['token 2^64', () => svc.releaseHold(9, a, 'l', 2n ** 64n), 'out_of_range'],
    ['token "2"', () => svc.releaseHold(9, a, 'l', '2'), 'out_of_range'],
    ['token -1 and request -1: the token first', () => svc.releaseHold(9, a, 'l', -1, -1), 'out_of_range', /token/],
    ['request 0.5', () => svc.releaseHold(9, a, 'l', 2, 0.5), 'out_of_range', /request/],
    // the core's order: time, then the session, then the name, then the hold
    ['time went backwards', () => svc.releaseHold(2, 99, '', 1), 'time_went_backwards'],
    ['unknown session before the empty name', () => svc.releaseHold(3, 99, '', 1), 'unknown_session'],
    ['empty name', () => svc.releaseHold(3, a, '', 2), 'empty_name'],
    ['name too long', () => svc.releaseHold(3, a, 'x'.repeat(65), 2), 'name_too_long'],
  ];
  for (const [what, call, code, message] of cases) {
    const e = thrown(call);
    assert.equal(e.code, code, what);
    if (message) assert.match(e.message, message, what);
    assert.equal(hex(svc.snapshot()), before, `${what}: nothing changed`);
  }
  assert.equal(svc.now(), 3);
});

test('a refused releaseHold keeps the advance to its now, with its events on the error', () => {
  const svc = new LockService(caps);
  const a = svc.openSession(0, 100).reply.session;
  const b = svc.openSession(0, 5).reply.session;
  svc.acquire(0, a, 'l', X());
  svc.release(1, a, 'l');
  svc.acquire(1, a, 'l', X()); // token 2
  const e = thrown(() => svc.releaseHold(6, a, 'l', 1));
  assert.equal(e.code, 'not_holder');
  assert.deepEqual(e.events, [{ kind: 'session_expired', session: b }]);
  assert.equal(svc.now(), 6);
  assert.deepEqual(svc.holders('l').map((h) => h.token), [2]);
});
