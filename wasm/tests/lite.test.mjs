// The small module (fencelock/lite: wasm/lite, its class wasm/lite/js/lite.js), built as
// shipped, against the full module: the same inputs applied to both must give the same
// reply code, number, events, next deadline and error, refusals included. Then what only
// the small module does: it takes numbers only (no coercion of "5" or true), bounds ticks
// below 2^52, refuses with nothing changed, keeps events within its limit, and never
// traps; and its browser build runs the README example.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { LockService, parseCall, repo, rng, seed } from './pkg.mjs';

const lite = await import(pathToFileURL(path.join(repo, 'wasm', 'pkg', 'lite', 'node', 'index.mjs')).href);
const { LiteService } = lite;

const KINDS = ['opened', 'kept_alive', 'closed', 'granted', 'queued', 'busy', 'released',
  'cancelled', 'hold_ended', 'wait_ended', 'ticked'];
const MODES = ['exclusive', 'shared'];
const WAITS = ['none', 'forever'];

/** The number a fast reply carries, read from the object reply. */
function value(reply) {
  return reply.token ?? reply.position ?? reply.session ?? reply.expiresAt ?? reply.now ?? 0;
}

/** One input through the full module's object API: code, value, events, errno. */
function viaFull(svc, op) {
  let answer;
  try {
    switch (op.kind) {
      case 'open': answer = svc.openSession(op.now, op.ttl); break;
      case 'keep': answer = svc.keepAlive(op.now, op.session, op.request); break;
      case 'close': answer = svc.closeSession(op.now, op.session, op.request); break;
      case 'acquire': {
        // A code outside its list goes as a string the object API refuses the same way.
        const mode = op.mode === 2 ? { permits: op.count, limit: op.limit } : (MODES[op.mode] ?? `mode ${op.mode}`);
        const wait = op.wait === 2 ? { until: op.until } : (WAITS[op.wait] ?? `wait ${op.wait}`);
        answer = svc.acquire(op.now, op.session, op.lock, { mode, wait, request: op.request });
        break;
      }
      case 'release': answer = svc.release(op.now, op.session, op.lock, op.request); break;
      case 'cancel': answer = svc.cancel(op.now, op.session, op.lock, op.request); break;
      case 'tick': answer = svc.tick(op.now); break;
      default: throw new Error(op.kind);
    }
  } catch (e) {
    assert.ok(typeof e.errno === 'number', `not a binding error: ${e}`);
    return { code: -e.errno, errno: e.errno, error: e.code, events: e.events ?? [] };
  }
  const code = KINDS.indexOf(answer.reply.kind);
  assert.ok(code >= 0, answer.reply.kind);
  return { code, value: value(answer.reply), events: answer.events };
}

/** The same input through the small module. */
function viaLite(svc, op) {
  let code;
  switch (op.kind) {
    case 'open': code = svc.openSession(op.now, op.ttl); break;
    case 'keep': code = svc.keepAlive(op.now, op.session, op.request); break;
    case 'close': code = svc.closeSession(op.now, op.session, op.request); break;
    case 'acquire':
      code = svc.acquire(op.now, op.session, op.lock, op.mode, op.wait, op.until, op.request,
        op.count, op.limit);
      break;
    case 'release': code = svc.release(op.now, op.session, op.lock, op.request); break;
    case 'cancel': code = svc.cancel(op.now, op.session, op.lock, op.request); break;
    case 'tick': code = svc.tick(op.now); break;
    default: throw new Error(op.kind);
  }
  const events = svc.takeEvents();
  assert.equal(svc.pendingEvents(), 0);
  if (code < 0) {
    const e = svc.lastError();
    assert.equal(e.errno, -code);
    assert.equal(svc.lastError(), null, 'forgotten once read');
    return { code, errno: e.errno, error: e.code, events };
  }
  assert.equal(svc.lastError(), null);
  return { code, value: svc.replyValue(), events };
}

/** A random input among valid and refused ones (unknown sessions, bad names, bad ttls,
 * time going backwards, stale and reused request numbers, permits that disagree). */
/** One argument of `op` made bad now and then, as a JS caller can: a number that is not
 * a safe non-negative integer, a lock that is not a name's string, a code outside its
 * list. Both modules must refuse it the same way, in the same order. */
function withFault(r, op) {
  if (!r.chance(8)) return op;
  const bad = { ...op };
  const fields = ['now', ...['session', 'request'].filter((k) => k in op),
    ...('lock' in op ? ['lock'] : []), ...(op.kind === 'acquire' ? ['mode', 'wait', 'count'] : [])];
  const f = r.pick(fields);
  if (f === 'lock') bad.lock = r.pick([5, 'a\ud800', '\udc00']);
  else if (f === 'mode' || f === 'wait') bad[f] = r.pick([3, -1, 0.5]);
  else if (f === 'count') Object.assign(bad, { mode: 2, count: 2 ** 32, limit: 3 });
  else bad[f] = r.pick([NaN, -1, 0.5, 2 ** 53]);
  return bad;
}

function randomOp(r, clock, opened) {
  if (r.chance(3)) clock.now = Math.max(0, clock.now - 1 - r.below(3)); // backwards
  else if (r.chance(30)) clock.now += 1 + r.below(4);
  const now = clock.now;
  // Mostly the sessions opened last (some of them closed or expired since), now and then
  // one never opened.
  const session = opened.length > 0 && r.chance(90)
    ? opened[opened.length - 1 - r.below(Math.min(4, opened.length))]
    : 1 + opened.length + r.below(3);
  const lock = r.pick(['a', 'b', 'c', 'a', 'b', '', 'x'.repeat(70), 'ü']);
  const request = r.chance(50) ? undefined : r.below(6);
  const last = clock.lastAcquire;
  // A retry of the last acquire (the same request number: its answer again, or how its
  // hold or wait ended), or a cancel of its wait.
  if (last && r.chance(10)) return { ...last, now };
  if (last && r.chance(10)) {
    return { kind: 'cancel', now, session: last.session, lock: last.lock, request: last.request };
  }
  switch (r.below(9)) {
    case 0: return { kind: 'open', now, ttl: r.chance(8) ? 0 : 1 + r.below(40) };
    case 1: return { kind: 'keep', now, session, request };
    case 2: return { kind: 'close', now, session, request };
    case 3: case 4: {
      const mode = r.below(3);
      const wait = r.below(3);
      return {
        kind: 'acquire', now, session, lock, mode, wait, request,
        until: wait === 2 ? now + r.below(8) : undefined,
        count: mode === 2 ? r.below(4) : undefined,
        limit: mode === 2 ? 1 + r.below(3) : undefined,
      };
    }
    case 5: case 6: return { kind: 'release', now, session, lock, request };
    case 7: return { kind: 'cancel', now, session, lock, request };
    default: return { kind: 'tick', now };
  }
}

test('the small module answers every input as the full module does', () => {
  const r = rng(seed);
  const seen = new Set();
  for (let round = 0; round < 20; round += 1) {
    const caps = { sessions: 4, locks: 3, claims: 6, lockDelay: r.below(3) };
    const full = new LockService({ ...caps, maxWatchers: 0 });
    const small = new LiteService(caps);
    assert.equal(small.eventLimit(), full.eventLimit(), 'the same event limit');
    const clock = { now: 0 };
    const opened = [];
    // Round 0 starts with what random inputs may not reach: a retry after the hold it
    // answered was released (hold_ended) and after its wait timed out (wait_ended), a
    // wait cancelled.
    const acq = (now, session, lock, wait, until, request) =>
      ({ kind: 'acquire', now, session, lock, mode: 0, wait, until, request });
    const script = round > 0 ? [] : [
      { kind: 'open', now: 0, ttl: 100 }, { kind: 'open', now: 0, ttl: 100 },
      acq(1, 1, 'a', 0, undefined, 1), { kind: 'release', now: 1, session: 1, lock: 'a' },
      acq(1, 1, 'a', 0, undefined, 1),
      acq(1, 2, 'b', 0, undefined, 1), acq(1, 1, 'b', 2, 5, 2), { kind: 'tick', now: 6 },
      acq(6, 1, 'b', 2, 5, 2),
      // and the rest of a wait's life: queued, already queued, cancelled; busy.
      acq(6, 1, 'b', 1), acq(6, 1, 'b', 1), { kind: 'cancel', now: 6, session: 1, lock: 'b' },
      acq(6, 1, 'b', 0),
    ];
    for (const op of script) {
      const want = viaFull(full, op);
      if (op.kind === 'open' && want.code === 0) opened.push(want.value);
      assert.deepEqual(viaLite(small, op), want, JSON.stringify(op));
      assert.equal(small.pollTimeout(), full.pollTimeout(), JSON.stringify(op));
      seen.add(want.error ?? KINDS[want.code]);
      clock.now = op.now;
    }
    for (let step = 0; step < 300; step += 1) {
      const op = withFault(r, randomOp(r, clock, opened));
      if (op.kind === 'acquire') clock.lastAcquire = op;
      const want = viaFull(full, op);
      if (op.kind === 'open' && want.code === 0) opened.push(want.value);
      const got = viaLite(small, op);
      const what = `round ${round} step ${step}: ${JSON.stringify(op)}`;
      assert.deepEqual(got, want, what);
      assert.equal(small.pollTimeout(), full.pollTimeout(), what);
      seen.add(want.error ?? KINDS[want.code]);
    }

    full.free();
    small.free();
  }
  // The answers compared include every kind these inputs can give.
  for (const k of ['opened', 'kept_alive', 'closed', 'granted', 'queued', 'busy', 'released',
    'cancelled', 'hold_ended', 'wait_ended', 'ticked', 'unknown_session', 'time_went_backwards',
    'empty_name', 'name_too_long', 'bad_ttl', 'not_holder', 'not_queued', 'bad_permits',
    'mode_mismatch', 'limit_mismatch', 'stale_request', 'request_reused', 'already_queued',
    'capacity_exceeded', 'out_of_range', 'bad_argument']) {
    assert.ok(seen.has(k), `never saw ${k}; seen: ${[...seen].sort()}`);
  }
});

test('the precedence table gives its outcomes through the small module', () => {
  // tests/vectors/precedence.calls up to its first watch (the small module has no
  // watches; its semaphore rows run, a labelled open as a plain one, whose outcomes in
  // the table are those of an open): multi-fault inputs whose one outcome is the core's.
  // A number the small module does not take (a ttl past 2^52) is its out_of_range.
  const text = readFileSync(path.join(repo, 'tests', 'vectors', 'precedence.calls'), 'utf8');
  const end = text.search(/^watch /m);
  assert.ok(end > text.indexOf('mode=p:'), 'the table\'s rows moved: update this test');
  const REPLY = Object.fromEntries(KINDS.map((k, i) => [k, i]));
  const n = (v) => (v === undefined || v === '-' ? undefined : Number(v));
  let svc = null;
  let rows = 0;
  let beyond = 0;
  text.slice(0, end).split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const at = `precedence.calls:${i + 1}: ${line}`;
    if (line.startsWith('config ')) {
      const kv = Object.fromEntries(line.slice(7).trim().split(/\s+/).map((p) => p.split('=')));
      svc = new LiteService({
        sessions: Number(kv.sessions), locks: Number(kv.locks), claims: Number(kv.claims),
        lockDelay: Number(kv.lock_delay), maxNameLen: Number(kv.max_name_len),
      });
      return;
    }
    const { method, args: a, expect, value } = parseCall(line, at);
    const mode = a.mode === 's' ? 1 : a.mode?.startsWith('p:') ? 2 : 0;
    const [count, limit] = a.mode?.startsWith('p:') ? a.mode.slice(2).split('/').map(Number) : [];
    const wait = a.wait === 'forever' ? 1 : a.wait?.startsWith('until:') ? 2 : 0;
    const until = a.wait?.startsWith('until:') ? Number(a.wait.slice(6)) : undefined;
    const now = Number(a.now);
    const code = {
      open: () => svc.openSession(now, Number(a.ttl)),
      open_labeled: () => svc.openSession(now, Number(a.ttl)),
      keep_alive: () => svc.keepAlive(now, n(a.session), n(a.request)),
      close: () => svc.closeSession(now, n(a.session), n(a.request)),
      acquire: () => svc.acquire(now, n(a.session), a.lock, mode, wait, until, n(a.request), count, limit),
      release: () => svc.release(now, n(a.session), a.lock, n(a.request)),
      cancel: () => svc.cancel(now, n(a.session), a.lock, n(a.request)),
      tick: () => svc.tick(now),
    }[method]?.();
    assert.ok(code !== undefined, `${at}: a method the small module lacks`);
    svc.takeEvents();
    const big = Object.values(a).some((v) => /^\d+$/.test(v) && Number(v) >= 2 ** 52);
    if (big) {
      assert.equal(code, -701, `${at}: past the small module's numbers`);
      beyond += 1;
    } else if (expect === 'ok') {
      assert.equal(code, REPLY[value], at);
    } else {
      assert.equal(code, -Number(value), `${at}: got ${svc.lastError()?.code}`);
    }
    rows += 1;
  });
  assert.ok(rows >= 65, `only ${rows} rows`);
  assert.equal(beyond, 1, 'one row (a ttl of 2^64 - 1) is past the small module\'s numbers');
});

test('a refused argument changes nothing, and only numbers are numbers', () => {
  const svc = new LiteService({ sessions: 2, locks: 2, claims: 2 });
  assert.equal(svc.openSession(0, 10), 0);
  const a = svc.replyValue();
  // The wasm boundary would take "1" as 1, true as 1 and null as 0: the class does not.
  for (const bad of ['1', true, null, 1n, {}, [], -1, 0.5, NaN, Infinity, 2 ** 53]) {
    const code = svc.acquire(bad, a, 'l');
    assert.equal(code, -701, `now = ${String(bad)}`);
    const e = svc.lastError();
    assert.ok(e instanceof RangeError);
    assert.equal(e.code, 'out_of_range');
    assert.equal(svc.acquire(1, bad, 'l'), -701, `session = ${String(bad)}`);
    assert.equal(svc.acquire(1, a, 'l', bad), -702, `mode = ${String(bad)}: not a code`);
  }
  for (const bad of [5, null, undefined, {}, 'a\ud800', '\udc00b']) {
    assert.equal(svc.acquire(1, a, bad), -702, `lock = ${String(bad)}`);
    const e = svc.lastError();
    assert.ok(e instanceof TypeError);
    assert.equal(e.code, 'bad_argument');
  }
  assert.equal(svc.acquire(1, a, 'l', 3), -702, 'mode code outside its list');
  assert.equal(svc.acquire(1, a, 'l', 0, 3), -702, 'wait code outside its list');
  // Nothing changed: no time passed, no event, and the first grant has token 1.
  assert.equal(svc.pendingEvents(), 0);
  assert.equal(svc.pollTimeout(), 10);
  assert.equal(svc.acquire(0, a, 'l'), 3);
  assert.equal(svc.replyValue(), 1);
  // A well-formed non-ASCII name (a surrogate pair) is a name.
  assert.equal(svc.acquire(0, a, '🔒'), 3);
  // A string too long to copy is not copied: the core sees a name one byte too long and
  // answers in its order (the session first).
  const huge = 'x'.repeat(1 << 22);
  assert.equal(svc.acquire(0, 99, huge), -101);
  assert.equal(svc.acquire(0, a, huge), -202);
  // A lone surrogate is bad_argument at any length, before time moves.
  assert.equal(svc.acquire(7, a, 'a\ud800'.repeat(40000)), -702, 'too long to copy, still checked');
  assert.equal(svc.acquire(7, a, 'a\ud800'.repeat(30000)), -702);
  assert.ok(svc.release(0, a, 'l') >= 0, 'no time passed: a release at 0 is still on time');
});

test('ticks, ttls and lock-delays stay below 2^52, so every number out is exact', () => {
  const svc = new LiteService({ sessions: 2, locks: 2, claims: 2 });
  assert.equal(svc.openSession(2 ** 52, 1), -701);
  assert.equal(svc.openSession(0, 2 ** 52), -701);
  assert.equal(svc.openSession(2 ** 52 - 1, 2 ** 52 - 1), 0);
  assert.equal(svc.pollTimeout(), 2 ** 53 - 2, 'the latest deadline, a safe integer');
  assert.ok(Number.isSafeInteger(svc.pollTimeout()));
  assert.throws(() => new LiteService({ sessions: 1, locks: 1, claims: 1, lockDelay: 2 ** 52 }),
    (e) => e instanceof RangeError && e.code === 'out_of_range' && e.errno === 701);
  // A lock-delay's end: a deadline plus the longest lock-delay, still a safe integer.
  const delayed = new LiteService({ sessions: 1, locks: 1, claims: 1, lockDelay: 2 ** 52 - 1 });
  assert.equal(delayed.openSession(2 ** 52 - 3, 1), 0);
  assert.equal(delayed.acquire(2 ** 52 - 3, delayed.replyValue(), 'l'), 3);
  assert.equal(delayed.tick(2 ** 52 - 2), 10, 'the holder expires');
  assert.equal(delayed.pollTimeout(), 2 ** 52 - 2 + 2 ** 52 - 1, 'the lock-delay ends then');
  assert.ok(Number.isSafeInteger(delayed.pollTimeout()));
  // A wait's end is a tick the caller gives: any safe integer.
  const waits = new LiteService({ sessions: 2, locks: 1, claims: 2 });
  waits.openSession(0, 100);
  waits.openSession(0, 100);
  assert.equal(waits.acquire(0, 1, 'l'), 3);
  assert.equal(waits.acquire(0, 2, 'l', 0, 2, 2 ** 53), -701, 'until past 2^53 - 1');
  assert.equal(waits.acquire(0, 2, 'l', 0, 2, 2 ** 53 - 1), 4, 'until 2^53 - 1');
});

test('the constructor refuses bad configs with typed errors', () => {
  let checked = 0;
  const check = (config, code, errno, Kind = Error) => {
    assert.throws(() => new LiteService(config), (e) => {
      assert.equal(e.constructor, Kind, `${e} for config #${++checked}`);
      assert.equal(e.code, code);
      assert.equal(e.errno, errno);
      return true;
    });
  };
  check(undefined, 'bad_argument', 702, TypeError);
  check([1, 2, 3], 'bad_argument', 702, TypeError);
  check({ sessions: 1, locks: 1, claims: 1, maxWatchers: 2 }, 'bad_argument', 702, TypeError);
  check({ sessions: -1, locks: 1, claims: 1 }, 'out_of_range', 701, RangeError);
  check({ sessions: '1', locks: 1, claims: 1 }, 'out_of_range', 701, RangeError);
  check({ sessions: 1, locks: 1 }, 'out_of_range', 701, RangeError);
  check({ sessions: 1, locks: 1, claims: 1, maxNameLen: 0 }, 'bad_config', 206);
  check({ sessions: 1, locks: 1, claims: 1, maxNameLen: 65 }, 'bad_config', 206);
  check({ sessions: 2 ** 31, locks: 1, claims: 1 }, 'bad_config', 206);
  check({ sessions: 2 ** 31 - 1, locks: 1, claims: 1 }, 'out_of_memory', 703);
  assert.throws(() => new LiteService({ sessions: 1, locks: 1, claims: 1, maxWatchers: 2 }),
    (e) => e.key === 'maxWatchers', 'the unknown key is named');
  // Reading the config may throw: that is bad_argument, not the caller's exception.
  const getter = { sessions: 1, locks: 1, get claims() { throw new Error('boom'); } };
  check(getter, 'bad_argument', 702, TypeError);
  check(new Proxy({}, { ownKeys() { throw new Error('boom'); } }), 'bad_argument', 702, TypeError);
  const revoked = Proxy.revocable({}, {});
  revoked.revoke();
  check(revoked.proxy, 'bad_argument', 702, TypeError);
  // Symbol keys are not config keys (as in the full module): ignored.
  assert.ok(new LiteService({ sessions: 1, locks: 1, claims: 1, [Symbol('x')]: 1 }));
  const ok = new LiteService({ sessions: 1, locks: 1, claims: 1, maxNameLen: 3 });
  ok.openSession(0, 5);
  assert.equal(ok.acquire(0, 1, 'abcd'), -202, 'the config applies: name_too_long');
});

test('events are kept within the limit: a call that might overflow it is refused, nothing changed', () => {
  const svc = new LiteService({ sessions: 2, locks: 1, claims: 2 });
  svc.openSession(0, 1000);
  svc.openSession(0, 1000);
  const limit = svc.eventLimit();
  // a holds; b waits; each release hands the lock to the other (one event each time).
  assert.equal(svc.acquire(0, 1, 'l', 0, 1), 3);
  let holder = 1;
  let refused = null;
  for (let i = 0; i < limit + 2; i += 1) {
    const other = 3 - holder;
    assert.equal(svc.acquire(1, other, 'l', 0, 1), 4, 'queued');
    const kept = svc.pendingEvents();
    const code = svc.release(1, holder, 'l');
    if (code === -502) {
      refused = kept;
      assert.equal(svc.pendingEvents(), kept, 'nothing changed');
      assert.equal(svc.lastError().code, 'buffer_too_small');
      break;
    }
    assert.equal(code, 6);
    holder = other;
  }
  assert.ok(refused !== null && refused <= limit, 'refused before the limit was passed');
  const events = svc.takeEvents();
  assert.equal(events.length, refused);
  assert.ok(events.every((e) => e.kind === 'granted'));
  assert.equal(svc.release(1, holder, 'l'), 6, 'the same call, once the events are taken');
});

test('no argument makes the small module trap', () => {
  const svc = new LiteService({ sessions: 2, locks: 2, claims: 2 });
  const garbage = [undefined, null, NaN, -1, 0.5, 2 ** 64, '', 'x', {}, [], 7n, Symbol('s'),
    'y'.repeat(70_000), '\ud800',
    () => 1, new Proxy({}, { get() { throw new Error('trap'); } })];
  const r = rng(seed + 1);
  const methods = ['openSession', 'keepAlive', 'closeSession', 'acquire', 'release', 'cancel',
    'tick'];
  for (let i = 0; i < 2000; i += 1) {
    const m = r.pick(methods);
    const args = Array.from({ length: 9 }, () => (r.chance(50) ? r.below(4) : r.pick(garbage)));
    let code;
    try {
      code = svc[m](...args);
    } catch (e) {
      assert.fail(`${m} threw ${e}`);
    }
    assert.ok(Number.isInteger(code), `${m}: ${code}`);
    svc.takeEvents();
  }
  // Still whole: past every deadline, the table empties and takes new sessions.
  assert.equal(svc.tick(10 ** 6), 10);
  svc.takeEvents();
  assert.equal(svc.openSession(10 ** 6, 5), 0);
  assert.equal(svc.openSession(10 ** 6, 5), 0);
});

test('the browser build initialises from its .wasm and runs the README example', async () => {
  const dir = path.join(repo, 'wasm', 'pkg', 'lite', 'web');
  const web = await import(pathToFileURL(path.join(dir, 'index.js')).href);
  await web.default({ module_or_path: readFileSync(path.join(dir, 'fencelock_lite_bg.wasm')) });
  const svc = new web.LiteService({ sessions: 64, locks: 64, claims: 256 });
  assert.equal(svc.openSession(0, 10), 0);
  const a = svc.replyValue();
  assert.equal(svc.openSession(0, 30), 0);
  const b = svc.replyValue();
  assert.equal(svc.acquire(0, a, 'ledger', 0, 1), 3);
  assert.equal(svc.replyValue(), 1, 'token 1');
  assert.equal(svc.acquire(1, b, 'ledger', 0, 2, 20), 4);
  assert.equal(svc.tick(10), 10);
  assert.deepEqual(svc.takeEvents(), [
    { kind: 'session_expired', session: a },
    { kind: 'released', session: a, lock: 'ledger', token: 1, reason: 'expired' },
    { kind: 'granted', session: b, lock: 'ledger', mode: 'exclusive', token: 2 },
  ]);
  assert.equal(svc.release(11, a, 'ledger'), -101);
  assert.equal(svc.lastError().code, 'unknown_session');
});

test('the hand-written types declare every method of the class, none as any', () => {
  for (const file of ['node/index.d.mts', 'web/index.d.ts']) {
    const build = file;
    const dts = readFileSync(path.join(repo, 'wasm', 'pkg', 'lite', file), 'utf8');
    const methods = Object.getOwnPropertyNames(LiteService.prototype).filter((m) => m !== 'constructor');
    assert.ok(methods.length >= 14, methods.join());
    for (const m of methods) assert.match(dts, new RegExp(`\\n  ${m}\\(`), `${build}: ${m}`);
    assert.match(dts, /\n {2}constructor\(config: LiteConfig\);/);
    assert.doesNotMatch(dts, /\bany\b/);
    for (const k of ['granted', 'released', 'session_expired', 'wait_timed_out']) {
      assert.match(dts, new RegExp(`kind: "${k}"`), k);
    }
  }
});

test('names cross through the service name buffer: every encoding agrees with the full module', () => {
  const full = new LockService({ sessions: 2, locks: 4, claims: 8, maxWatchers: 0 });
  const small = new LiteService({ sessions: 2, locks: 4, claims: 8 });
  const both = (op) => {
    const want = viaFull(full, op);
    assert.deepEqual(viaLite(small, op), want, JSON.stringify(op));
    return want.error ?? KINDS[want.code];
  };
  assert.equal(both({ kind: 'open', now: 0, ttl: 100 }), 'opened');
  const acq = (lock) => ({ kind: 'acquire', now: 1, session: 1, lock, mode: 0, wait: 0 });
  const rel = (lock) => ({ kind: 'release', now: 1, session: 1, lock });
  // At the 64-byte limit in one-, two-, three- and four-byte characters; one character
  // past it (at most 64 UTF-16 units: written whole); past 64 units (the stand-in); a lone
  // surrogate, short and long; and a shorter name after a longer one.
  const cases = [
    ['n'.repeat(64), 'granted'], ['é'.repeat(32), 'granted'], ['漢'.repeat(21) + 'x', 'granted'],
    ['😀'.repeat(16), 'granted'], ['é'.repeat(33), 'name_too_long'], ['漢'.repeat(22), 'name_too_long'],
    ['😀'.repeat(17), 'name_too_long'], ['n'.repeat(65), 'name_too_long'],
    ['x'.repeat(70000), 'name_too_long'], ['a\ud800b', 'bad_argument'],
    ['a\ud800'.repeat(40), 'bad_argument'], ['lock/1\u0000', 'granted'], ['é', 'granted'],
  ];
  for (const [lock, want] of cases) {
    assert.equal(both(acq(lock)), want, lock);
    if (want === 'granted') assert.equal(both(rel(lock)), 'released', lock);
  }
  full.free();
  small.free();
});

test('the name buffer follows the memory when it grows, and a freed service is never written', () => {
  const caps = { sessions: 2, locks: 2, claims: 4 };
  const a = new LiteService(caps);
  assert.equal(a.openSession(0, 100), 0);
  assert.equal(a.acquire(1, 1, 'before'), 3);
  // A service this large grows the module's memory, which detaches every view of it.
  const big = new LiteService({ sessions: 100_000, locks: 100_000, claims: 200_000 });
  assert.equal(a.acquire(1, 1, 'after'), 3);
  assert.equal(a.release(1, 1, 'before'), 6);
  assert.equal(a.release(1, 1, 'after'), 6);
  assert.equal(a.release(1, 1, 'after'), -102, 'not_holder: the name read was "after"');
  big.free();
  // A freed service's buffer may be another service's memory by now: its call must fail
  // as any call on a freed service does, and write nothing there (services of several
  // sizes are made in its place, so that one of them holds its rows where it was).
  for (let n = 1; n <= 24; n++) {
    const gone = new LiteService(caps);
    gone.openSession(0, 100);
    assert.equal(gone.acquire(1, 1, 'x'), 3); // its buffer's view is made
    gone.free();
    const b = new LiteService({ sessions: n, locks: n, claims: 2 * n });
    b.openSession(0, 100);
    assert.equal(b.acquire(1, 1, 'kept'), 3);
    assert.throws(() => gone.acquire(1, 1, 'z'.repeat(64)), /null pointer|freed/i);
    assert.throws(() => gone.release(1, 1, 'z'.repeat(64)), /null pointer|freed/i);
    assert.throws(() => gone.lastError(), /freed/i, 'every call after free() throws');
    assert.equal(b.acquire(1, 1, 'kept'), 3, `a service of ${n} rows: its hold is intact`);
    assert.equal(b.release(1, 1, 'kept'), 6, `a service of ${n} rows`);
    assert.equal(b.release(1, 1, 'kept'), -102);
    b.free();
  }
});
