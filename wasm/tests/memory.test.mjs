// What a refused call costs the module's memory, which never shrinks: a wasm instance's
// memory only grows, so bytes copied in for a call that is then refused stay taken for
// the life of the page. The instance is caught as the package creates it (the glue keeps
// it private), so its memory can be measured.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const instances = [];
const Instance = WebAssembly.Instance;
WebAssembly.Instance = class extends Instance {
  constructor(module, imports) {
    super(module, imports);
    instances.push(this);
  }
};
const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = createRequire(import.meta.url)(path.join(here, '..', 'pkg', 'node', 'fencelock_wasm.js'));
WebAssembly.Instance = Instance;
const { LockService, FenceGate } = pkg;

test('the package instance was caught', () => {
  assert.equal(instances.length, 1);
  assert.ok(instances[0].exports.memory instanceof WebAssembly.Memory);
});

test('junk given to restore is refused by its header, and not copied into the module', () => {
  const memory = instances[0].exports.memory;
  const caps = { sessions: 4, locks: 4, claims: 8 };
  // A good restore first, so that what a restore needs besides the bytes is there.
  LockService.restore(new LockService(caps).snapshot(), caps).free();
  FenceGate.restore(new FenceGate(4).snapshot(), 4).free();
  const before = memory.buffer.byteLength;
  const junk = new Uint8Array(48 << 20); // 48 MiB of zeros: no snapshot's magic
  for (let i = 0; i < 3; i++) {
    assert.throws(() => LockService.restore(junk, caps), (e) => e.code === 'bad_magic');
    assert.throws(() => FenceGate.restore(junk, 4), (e) => e.code === 'bad_magic');
  }
  // A real snapshot's magic followed by junk: refused by its header too (the version).
  const magic = new LockService(caps).snapshot().subarray(0, 4);
  const bad = new Uint8Array(48 << 20);
  bad.set(magic);
  bad.fill(0xff, 4, 64);
  assert.throws(() => LockService.restore(bad, caps), (e) => e.code === 'unsupported_version' || e.code === 'corrupt_snapshot');
  const grown = memory.buffer.byteLength - before;
  assert.ok(grown < 1 << 20, `the module's memory grew by ${grown} bytes`);
});

test('junk after a good header is refused without being copied into the module', () => {
  const memory = instances[0].exports.memory;
  const caps = { sessions: 4, locks: 4, claims: 8 };
  const svc = new LockService(caps);
  const s = svc.openSession(0, 1000).reply.session;
  svc.acquire(1, s, 'ledger', { mode: 'exclusive', wait: 'none' });
  const good = svc.snapshot();
  svc.free();
  const gate = new FenceGate(4);
  gate.admit('ledger', 7n);
  const goodGate = gate.snapshot();
  gate.free();
  LockService.restore(good, caps).free();
  FenceGate.restore(goodGate, 4).free();
  const before = memory.buffer.byteLength;
  const padded = (bytes) => {
    const out = new Uint8Array(bytes.length + (48 << 20));
    out.set(bytes);
    return out;
  };
  const [svcJunk, gateJunk] = [padded(good), padded(goodGate)];
  for (let i = 0; i < 3; i++) {
    assert.throws(() => LockService.restore(svcJunk, caps),
      (e) => e.code === 'corrupt_snapshot' && /longer than its records can be/.test(e.message));
    assert.throws(() => FenceGate.restore(gateJunk, 4),
      (e) => e.code === 'corrupt_snapshot' && /longer than its records can be/.test(e.message));
  }
  const grown = memory.buffer.byteLength - before;
  assert.ok(grown < 1 << 20, `the module's memory grew by ${grown} bytes`);
  // A header that counts more records than the tables hold (here 2^32 - 1 sessions, or
  // resources) brings no more bytes in than the tables could: it is refused by its counts
  // (the core's capacity_exceeded), and the bytes after it were never copied in whole.
  // An empty service's snapshot ends with its three counts (0, 0, 0: one byte each):
  // the sessions' becomes 2^32 - 1.
  const fresh = new LockService(caps);
  const empty = fresh.snapshot();
  fresh.free();
  const huge = new Uint8Array(empty.length + (48 << 20));
  huge.set(empty);
  huge.set([0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0], empty.length - 3);
  const hugeGate = new Uint8Array(48 << 20);
  hugeGate.set(goodGate.subarray(0, 5)); // "FLGT" and the version
  hugeGate.set([0xff, 0xff, 0xff, 0xff, 0x0f], 5);
  const beforeHuge = memory.buffer.byteLength;
  for (let i = 0; i < 3; i++) {
    assert.throws(() => LockService.restore(huge, caps), (e) => e.code === 'capacity_exceeded');
    assert.throws(() => FenceGate.restore(hugeGate, 4), (e) => e.code === 'capacity_exceeded');
  }
  const grownHuge = memory.buffer.byteLength - beforeHuge;
  assert.ok(grownHuge < 1 << 20, `the module's memory grew by ${grownHuge} bytes`);
  // Junk within the bound is copied and judged as before.
  const short = new Uint8Array(good.length + 1);
  short.set(good);
  assert.throws(() => LockService.restore(short, caps),
    (e) => e.code === 'corrupt_snapshot' && /trailing bytes/.test(e.message));
});
