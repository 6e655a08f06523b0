// The full module on an engine without FinalizationRegistry (Safari before 14.1, Chrome
// before 84): it is deleted here before the package loads (this file runs in a process of
// its own), so the glue frees nothing at collection. free() is still refused through an
// object made with Object.create(obj): that free would zero the child's own pointer and
// free the memory while the object itself, still holding its pointer, went on using it.
// Through a Proxy, free() frees the object itself: the glue's write of the pointer goes
// through to it, so nothing is left holding the memory.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { objectsOf } from './objects.mjs';

delete globalThis.FinalizationRegistry;
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const { LockService, FenceGate, SessionKeeper } = require(
  path.join(here, '..', 'pkg', 'node', 'fencelock_wasm.js'));

test('without FinalizationRegistry, free() is refused through a child, and a Proxy frees the object', () => {
  assert.equal(globalThis.FinalizationRegistry, undefined);
  const notItself = (e) => e.code === 'bad_argument' && /itself/.test(e.message);
  const freed = (e) => e.code === 'bad_argument' && /freed/.test(e.message);
  for (const [name, { make, use }] of Object.entries(objectsOf({ LockService, FenceGate, SessionKeeper }))) {
    const o = make();
    const child = Object.create(o);
    assert.equal(use(child), use(o), `${name}: a child calls the object`);
    assert.throws(() => child.free(), notItself, `${name}: free() through a child`);
    assert.throws(() => child[Symbol.dispose](), notItself, `${name}: dispose through a child`);
    assert.doesNotThrow(() => use(o), `${name}: the object is whole`);
    const view = new Proxy(o, {});
    view.free();
    assert.throws(() => use(o), freed, `${name}: freed through its Proxy`);
    assert.throws(() => o.free(), freed, `${name}: and not freed twice`);
    assert.throws(() => use(child), freed, `${name}: nor used through the child`);
  }
});
