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
  const a = svc.openSession(10)[0].session;
  const b = svc.openSession(30)[0].session;
  assert.deepEqual(svc.acquire(a, 'ledger', 'exclusive', 'forever'), [
    { type: 'granted', session: a, lock: 'ledger', mode: 'exclusive', token: 1 },
  ]);
  assert.deepEqual(svc.acquire(b, 'ledger', 'exclusive', { until: 20 }), [
    { type: 'queued', session: b, lock: 'ledger', mode: 'exclusive', position: 1 },
  ]);
  assert.equal(svc.pollTimeout(), 10);
  assert.deepEqual(svc.tick(10), [
    { type: 'sessionExpired', session: a },
    { type: 'released', session: a, lock: 'ledger', token: 1, reason: 'expired' },
    { type: 'granted', session: b, lock: 'ledger', mode: 'exclusive', token: 2 },
  ]);
  const gate = new FenceGate(16);
  gate.admit('ledger', 2);
  let err;
  try {
    gate.admit('ledger', 1);
  } catch (e) {
    err = e;
  }
  assert.deepEqual([err.code, err.token, err.highest], ['stale', 1, 2]);
  const outFrames = svc.handleFrame(new Uint8Array([0x00, 0x0a]));
  assert.deepEqual(outFrames.map((f) => Array.from(f)), [[0x00, 0x03, 0x14]]); // session 3, expires 20
  const bytes = svc.snapshot();
  const copy = LockService.restore(bytes, svc.capacity());
  assert.deepEqual(Array.from(copy.snapshot()), Array.from(bytes));
});
