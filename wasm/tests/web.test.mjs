// The ES-module package (wasm/pkg/web, what the browser demo imports), initialised under
// node from its .wasm bytes, running the README's embedding example.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { repo } from './pkg.mjs';

const dir = path.join(repo, 'wasm', 'pkg', 'web');

test('the web package initialises and runs the README example', async () => {
  const web = await import(pathToFileURL(path.join(dir, 'fencelock_wasm.js')).href);
  await web.default({ module_or_path: readFileSync(path.join(dir, 'fencelock_wasm_bg.wasm')) });
  const { LockService, FenceGate } = web;

  const svc = new LockService({ sessions: 64, locks: 64, claims: 256, lockDelay: 0 });
  const a = svc.openSession(0, 10).reply.session;
  const b = svc.openSession(0, 30).reply.session;
  assert.deepEqual(svc.acquire(0, a, 'ledger', { mode: 'exclusive', wait: 'forever' }), {
    reply: { kind: 'granted', mode: 'exclusive', token: 1 },
    events: [],
  });
  assert.deepEqual(svc.acquire(1, b, 'ledger', { mode: 'exclusive', wait: { until: 20 } }).reply, {
    kind: 'queued',
    mode: 'exclusive',
    position: 1,
  });
  assert.equal(svc.pollTimeout(), 10);
  assert.deepEqual(svc.tick(10), {
    reply: { kind: 'ticked', now: 10 },
    events: [
      { kind: 'session_expired', session: a },
      { kind: 'released', session: a, lock: 'ledger', token: 1, reason: 'expired' },
      { kind: 'granted', session: b, lock: 'ledger', mode: 'exclusive', token: 2 },
    ],
  });
  const gate = new FenceGate(16);
  gate.admit('ledger', 2);
  let err;
  try {
    gate.admit('ledger', 1);
  } catch (e) {
    err = e;
  }
  assert.deepEqual([err.code, err.token, err.highest], ['stale', 1, 2]);
  // OpenSession{now: 10, ttl: 10} → Opened{session 3, expires_at 20}
  const frames = svc.handleFrame(new Uint8Array([0x00, 0x0a, 0x0a]));
  assert.deepEqual(Array.from(frames.reply), [0x00, 0x03, 0x14]);
  assert.deepEqual(frames.events, []);
  const bytes = svc.snapshot();
  const copy = LockService.restore(bytes, svc.capacity());
  assert.deepEqual(Array.from(copy.snapshot()), Array.from(bytes));
});
