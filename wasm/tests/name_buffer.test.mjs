// The name buffer of both modules, watched from outside: Uint8Array is wrapped here before
// either package loads (each glue captures it at load), so every view the glue makes of a
// service's name buffer (192 bytes, NAME_ROOM) is recorded, and a test reads what was
// written there. This shows what the other tests cannot see from answers alone, since a
// name that misses the buffer still gets the right answer the general way: that short
// names take the buffer (ASCII or not: the glue copies an ASCII name itself and has
// TextEncoder.encodeInto write any other), that a grown memory gets a new view, and that
// a freed service's buffer is never written.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const NAME_ROOM = 192;
/** Every view of NAME_ROOM bytes over a memory made while the packages loaded and since. */
const views = [];
const U8 = Uint8Array;
globalThis.Uint8Array = new Proxy(U8, {
  construct(target, args, newTarget) {
    const v = Reflect.construct(target, args, newTarget === globalThis.Uint8Array ? target : newTarget);
    if (v.length === NAME_ROOM && args[0] instanceof ArrayBuffer) views.push(v);
    return v;
  },
});
/** The name in a view: its bytes up to the first 0, as UTF-8. */
const nameIn = (v) => {
  const end = v.indexOf(0);
  return new TextDecoder().decode(v.subarray(0, end < 0 ? v.length : end));
};
const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const require = createRequire(import.meta.url);
const { LockService } = require(path.join(repo, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
const liteDir = path.join(repo, 'wasm', 'pkg', 'lite', 'node');
const { LiteService } = await import(pathToFileURL(path.join(liteDir, 'index.mjs')).href);
const { wasmMemory: liteMemory } = require(path.join(liteDir, 'fencelock_lite.js'));
globalThis.Uint8Array = U8; // the glue keeps the wrapped one; nothing else needs it

const caps = { sessions: 2, locks: 4, claims: 8 };

test('a short well-formed name goes through the buffer; anything else the general way', () => {
  const first = views.length;
  const svc = new LockService(caps);
  const s = svc.openSession(0, 100).reply.session;
  const lite = new LiteService(caps);
  lite.openSession(0, 100);
  // What `f` wrote into the buffers of the two live services above (each zeroed first).
  const through = (f) => {
    const live = () => views.slice(first).filter((v) => v.byteLength > 0);
    for (const v of live()) v.fill(0);
    f();
    return live().map(nameIn).filter((n) => n !== '');
  };
  assert.deepEqual(through(() => svc.acquireFast(1, s, 'jobs/1', 0, 0)), ['jobs/1']);
  assert.deepEqual(through(() => svc.releaseFast(1, s, 'jobs/1')), ['jobs/1']);
  assert.deepEqual(through(() => svc.acquireFast(1, s, 'n'.repeat(64), 0, 0)), ['n'.repeat(64)]);
  assert.deepEqual(through(() => svc.acquireFast(1, s, '😀'.repeat(32), 0, 0)), ['😀'.repeat(32)]);
  assert.deepEqual(through(() => svc.acquireFast(1, s, 'jobs/é', 0, 0)), ['jobs/é'], 'not ASCII');
  assert.deepEqual(svc.locks(), ['n'.repeat(64), 'jobs/é'], 'the 128-byte name is too long');
  // The rest go the general way, which refuses them: never written whole (the loop may
  // have copied an ASCII prefix before the unit it leaves to the encoder's judgement, and
  // no call reads it), and never a lock (a prefix taken for the name would be one).
  const general = (f, lock) => {
    const got = through(f);
    assert.ok(got.every((n) => n !== lock && String(lock).startsWith(n)), `${String(lock)}: ${got}`);
  };
  for (const [lock, code] of [['n'.repeat(65), 'name_too_long'], ['a\ud800', 'bad_argument'],
    ['ab\udc00', 'bad_argument'], [42, 'bad_argument'], [null, 'bad_argument']]) {
    general(() => svc.acquireFast(1, s, lock, 0, 0), lock);
    assert.equal(svc.lastError()?.code, code, String(lock));
  }
  assert.deepEqual(svc.locks(), ['n'.repeat(64), 'jobs/é']);
  assert.deepEqual(through(() => lite.acquire(1, 1, 'jobs/1')), ['jobs/1']);
  assert.deepEqual(through(() => lite.release(1, 1, 'jobs/1')), ['jobs/1']);
  assert.deepEqual(through(() => lite.acquire(1, 1, 'jobs/é')), ['jobs/é'], 'not ASCII');
  assert.deepEqual(through(() => lite.acquire(1, 1, 'n'.repeat(65))), ['x'.repeat(65)], 'the stand-in');
  for (const lock of ['a\ud800', 'ab\udc00', 42, null]) {
    general(() => lite.acquire(1, 1, lock), lock);
    assert.equal(lite.lastError()?.code, 'bad_argument', String(lock));
  }
  svc.free();
  lite.free();
});

test('after the memory grows, the next name goes to a view of the new memory', () => {
  const svc = new LockService(caps);
  const s = svc.openSession(0, 100).reply.session;
  const lite = new LiteService(caps);
  lite.openSession(0, 100);
  let at = views.length;
  assert.equal(svc.acquireFast(1, s, 'before', 0, 0), 3);
  assert.equal(lite.acquire(1, 1, 'before'), 3);
  const [full0, lite0] = views.slice(at);
  assert.deepEqual([nameIn(full0), nameIn(lite0)], ['before', 'before']);
  // Services this large grow each module's memory, which detaches every view of it.
  const big = new LockService({ sessions: 100_000, locks: 100_000, claims: 200_000 });
  const bigLite = new LiteService({ sessions: 100_000, locks: 100_000, claims: 200_000 });
  assert.equal(full0.byteLength, 0, 'the full module memory grew');
  assert.equal(lite0.byteLength, 0, 'the small module memory grew');
  at = views.length;
  assert.equal(svc.acquireFast(1, s, 'after', 0, 0), 3);
  assert.equal(lite.acquire(1, 1, 'after'), 3);
  const [full1, lite1] = views.slice(at);
  // (a grown memory keeps its bytes: 'before' is under 'after', which is 5 bytes long)
  const five = (v) => new TextDecoder().decode(v.subarray(0, 5));
  assert.deepEqual([five(full1), five(lite1)], ['after', 'after']);
  assert.ok(full1.buffer.byteLength > 0 && full1.buffer !== full0.buffer);
  assert.ok(lite1.buffer === liteMemory().buffer, 'the small module wrote into its memory now');
  assert.deepEqual(svc.locks(), ['before', 'after']);
  for (const x of [svc, lite, big, bigLite]) x.free();
});

test('a freed service is never written, and the memory is left as it was', () => {
  for (const [make, call] of [
    [() => { const v = new LockService(caps); v.openSession(0, 100); return v; },
      (v, name) => v.acquireFast(1, 1, name, 0, 0)],
    [() => { const v = new LiteService(caps); v.openSession(0, 100); return v; },
      (v, name) => v.acquire(1, 1, name)],
  ]) {
    const at = views.length;
    const gone = make();
    call(gone, 'zzzz'); // its buffer's view is made
    const [view] = views.slice(at);
    assert.equal(nameIn(view), 'zzzz');
    gone.free();
    const before = U8.from(view); // (the freed bytes may be the allocator's now)
    // another name, so that a write of it would show
    assert.throws(() => call(gone, 'qqqq'), /null pointer|freed/i);
    assert.equal(views.length, at + 1, 'no view made for a freed service');
    assert.deepEqual(U8.from(view), before, 'no write into a freed service');
  }
  // The small module's memory is reachable: a failed call leaves every byte of its data
  // and heap, where every service's buffer is. (Its first MiB is the stack, which rustc's
  // wasm32 target puts below the data and which any call, failed or not, writes.)
  const STACK = 1 << 20;
  const gone = new LiteService(caps);
  gone.openSession(0, 100);
  gone.acquire(1, 1, 'x');
  gone.free();
  const heap = () => Buffer.from(liteMemory().buffer, STACK);
  const mem = Buffer.from(heap());
  assert.throws(() => gone.release(1, 1, 'zzzz'), /null pointer|freed/i);
  assert.throws(() => gone.acquire(1, 1, 'zzzz'), /null pointer|freed/i);
  assert.ok(mem.equals(heap()), 'a byte of the data or heap changed');
});
