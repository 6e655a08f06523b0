// The name buffer of both modules, watched from outside: TextEncoder.prototype.encodeInto
// is wrapped here before either package loads (each captures it at load), so every write
// the glue makes into a service's name buffer (a 192-byte view, NAME_ROOM) is recorded
// with the view it went to. This shows what the other tests cannot see from answers
// alone, since a name that misses the buffer still gets the right answer the general way:
// that short names take the buffer, that a grown memory gets a new view, and that a freed
// service's buffer is never written.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const NAME_ROOM = 192;
const writes = [];
const encodeInto = TextEncoder.prototype.encodeInto;
TextEncoder.prototype.encodeInto = function recorded(text, view) {
  const r = encodeInto.call(this, text, view);
  if (view.length === NAME_ROOM) writes.push({ text, buffer: view.buffer, written: r.written });
  return r;
};

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const require = createRequire(import.meta.url);
const { LockService } = require(path.join(repo, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
const liteDir = path.join(repo, 'wasm', 'pkg', 'lite', 'node');
const { LiteService } = await import(pathToFileURL(path.join(liteDir, 'index.mjs')).href);
const { wasmMemory: liteMemory } = require(path.join(liteDir, 'fencelock_lite.js'));

const caps = { sessions: 2, locks: 4, claims: 8 };

test('a short well-formed name goes through the buffer; anything else the general way', () => {
  const svc = new LockService(caps);
  const s = svc.openSession(0, 100).reply.session;
  const through = (f) => {
    const before = writes.length;
    f();
    return writes.slice(before).map((w) => w.text);
  };
  assert.deepEqual(through(() => svc.acquireFast(1, s, 'jobs/1', 0, 0)), ['jobs/1']);
  assert.deepEqual(through(() => svc.releaseFast(1, s, 'jobs/1')), ['jobs/1']);
  assert.deepEqual(through(() => svc.acquireFast(1, s, '😀'.repeat(32), 0, 0)), ['😀'.repeat(32)]);
  for (const lock of ['n'.repeat(65), 'a\ud800', 42, null]) {
    assert.deepEqual(through(() => svc.acquireFast(1, s, lock, 0, 0)), [], String(lock));
  }
  const lite = new LiteService(caps);
  lite.openSession(0, 100);
  assert.deepEqual(through(() => lite.acquire(1, 1, 'jobs/1')), ['jobs/1']);
  assert.deepEqual(through(() => lite.release(1, 1, 'jobs/1')), ['jobs/1']);
  assert.deepEqual(through(() => lite.acquire(1, 1, 'n'.repeat(65))), ['x'.repeat(65)], 'the stand-in');
  assert.deepEqual(through(() => lite.acquire(1, 1, 'a\ud800')), []);
  svc.free();
  lite.free();
});

test('after the memory grows, the next name goes to a view of the new memory', () => {
  const svc = new LockService(caps);
  const s = svc.openSession(0, 100).reply.session;
  const lite = new LiteService(caps);
  lite.openSession(0, 100);
  assert.equal(svc.acquireFast(1, s, 'before', 0, 0), 3);
  assert.equal(lite.acquire(1, 1, 'before'), 3);
  const [full0, lite0] = writes.slice(-2).map((w) => w.buffer);
  // Services this large grow each module's memory, which detaches every view of it.
  const big = new LockService({ sessions: 100_000, locks: 100_000, claims: 200_000 });
  const bigLite = new LiteService({ sessions: 100_000, locks: 100_000, claims: 200_000 });
  assert.equal(full0.byteLength, 0, 'the full module memory grew');
  assert.equal(lite0.byteLength, 0, 'the small module memory grew');
  assert.equal(svc.acquireFast(1, s, 'after', 0, 0), 3);
  assert.equal(lite.acquire(1, 1, 'after'), 3);
  const [full1, lite1] = writes.slice(-2);
  assert.deepEqual([full1.text, full1.written, lite1.text, lite1.written], ['after', 5, 'after', 5]);
  assert.ok(full1.buffer.byteLength > 0 && full1.buffer !== full0);
  assert.ok(lite1.buffer === liteMemory().buffer, 'the small module wrote into its memory now');
  assert.deepEqual(svc.locks(), ['before', 'after']);
  for (const x of [svc, lite, big, bigLite]) x.free();
});

test('a freed service is never written, and the memory is left as it was', () => {
  for (const [make, call] of [
    [() => { const v = new LockService(caps); v.openSession(0, 100); return v; },
      (v) => v.acquireFast(1, 1, 'zzzz', 0, 0)],
    [() => { const v = new LiteService(caps); v.openSession(0, 100); return v; },
      (v) => v.acquire(1, 1, 'zzzz')],
  ]) {
    const gone = make();
    call(gone); // its buffer's view is made
    gone.free();
    const before = writes.length;
    assert.throws(() => call(gone), /null pointer|freed/i);
    assert.equal(writes.length, before, 'no write into a freed service');
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
