// Both modules on an engine without String.prototype.isWellFormed (node 18, Safari before
// 16.4, Chrome before 111, Firefox before 119): it is deleted here before either package
// loads (this file runs in a process of its own). A lone surrogate is still refused,
// other names still work, and judging a name still runs none of the caller's code: the
// small module's fallback is a loop over the units with the built-in charCodeAt taken at
// load, so a caller who replaced String.prototype.charCodeAt (or RegExp's exec or test)
// to free the service in the middle of a call is never called (were it, the freed
// service's buffer would be written after its live check). Those engines include some
// that cannot parse a regular expression's lookbehind, so the small module's source has
// none: one would be a syntax error there, and the module would not load at all.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

delete String.prototype.isWellFormed;
const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const require = createRequire(import.meta.url);
const { LockService } = require(path.join(repo, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
const liteDir = path.join(repo, 'wasm', 'pkg', 'lite', 'node');
const { LiteService } = await import(pathToFileURL(path.join(liteDir, 'index.mjs')).href);
const caps = { sessions: 2, locks: 4, claims: 8 };

test('without isWellFormed, names are judged as before', () => {
  assert.equal(String.prototype.isWellFormed, undefined);
  const lite = new LiteService(caps);
  lite.openSession(0, 100);
  for (const name of ['ascii', 'jobs/é', '😀']) assert.equal(lite.acquire(1, 1, name), 3, name);
  for (const name of ['a\ud800', '\udc00b', 'x\udbff\udbff', '😀\udc00', '\ud800\ud800\udc00', 'é\udfff']) {
    assert.equal(lite.acquire(1, 1, name), -702, name);
    assert.equal(lite.lastError()?.code, 'bad_argument');
  }
  const svc = new LockService(caps);
  const s = svc.openSession(0, 100).reply.session;
  for (const name of ['ascii', 'jobs/é', '😀']) assert.equal(svc.acquireFast(1, s, name, 0, 0), 3, name);
  assert.equal(svc.acquireFast(1, s, 'a\ud800', 0, 0), -702);
  assert.equal(svc.lastError()?.code, 'bad_argument');
  assert.deepEqual(svc.locks(), ['ascii', 'jobs/é', '😀']);
  lite.free();
  svc.free();
});

test('the small module has no lookbehind, which engines without isWellFormed may not parse', () => {
  for (const dir of [liteDir, path.join(repo, 'wasm', 'pkg', 'lite', 'web')]) {
    for (const f of readdirSync(dir).filter((f) => /\.m?js$/.test(f))) {
      const src = readFileSync(path.join(dir, f), 'utf8');
      assert.ok(!/\(\?<[=!]/.test(src), `${f} in ${dir} holds a lookbehind`);
    }
  }
});

test("judging a name runs none of the caller's code, even a replaced charCodeAt or RegExp.prototype.exec", () => {
  const lite = new LiteService(caps);
  lite.openSession(0, 100);
  assert.equal(lite.acquire(1, 1, 'made'), 3); // its buffer's view is made
  const { exec, test: rxTest } = RegExp.prototype;
  const { charCodeAt } = String.prototype;
  let called = 0;
  const freeing = function () { called += 1; lite.free(); return null; };
  RegExp.prototype.exec = freeing;
  RegExp.prototype.test = freeing;
  String.prototype.charCodeAt = freeing;
  try {
    assert.equal(lite.acquire(1, 1, 'jobs/é'), 3, 'granted, the service alive');
    assert.equal(lite.acquire(1, 1, 'b\ud800'), -702, 'still refused');
  } finally {
    RegExp.prototype.exec = exec;
    RegExp.prototype.test = rxTest;
    String.prototype.charCodeAt = charCodeAt;
  }
  assert.equal(called, 0, "the caller's exec or test ran inside a call");
  lite.free();
});
