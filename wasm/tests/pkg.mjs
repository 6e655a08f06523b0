// Loads the built node package (scripts/build-wasm.sh writes wasm/pkg/node) and holds the
// small helpers the tests share. Not a test file itself (no `.test.` in its name).
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import assert from 'node:assert/strict';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '..', '..');
const require = createRequire(import.meta.url);
export const wasm = require(path.join(repo, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
export const { LockService, FenceGate, SessionKeeper } = wasm;

export const hex = (bytes) => Buffer.from(bytes).toString('hex');
export const unhex = (text) => {
  assert.match(text, /^([0-9a-f]{2})*$/, `bad hex: ${text}`);
  return new Uint8Array(Buffer.from(text, 'hex'));
};

/** A postcard varint (frames and snapshots carry u64 as varints): its bytes. */
export function varint(n) {
  const out = [];
  let v = BigInt(n);
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return out;
}

/** Calls `fn`, requires it to throw a binding error, and returns the error. */
export function thrown(fn) {
  let err;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  assert.ok(err !== undefined, 'expected a throw, but the call returned');
  assert.ok(!(err instanceof WebAssembly.RuntimeError), `the module trapped: ${err}`);
  assert.ok(err instanceof Error, `thrown value is not an Error: ${err}`);
  return err;
}

/** A seeded SplitMix64-style generator on BigInt (same sequence on every run). */
export function rng(seed) {
  let s = BigInt.asUintN(64, BigInt(seed));
  const next = () => {
    s = BigInt.asUintN(64, s + 0x9e3779b97f4a7c15n);
    let z = s;
    z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
    z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
    return z ^ (z >> 31n);
  };
  return {
    below: (n) => Number(next() % BigInt(n)),
    pick(items) {
      return items[this.below(items.length)];
    },
    chance(percent) {
      return this.below(100) < percent;
    },
  };
}

/** The seed for randomized tests: FENCELOCK_SEED, else a fixed default. */
export const seed = process.env.FENCELOCK_SEED ? Number(process.env.FENCELOCK_SEED) : 20261129;

/**
 * Parses one line of a precedence table (tests/vectors/precedence.calls; the format's
 * reference is tests/src/calls.rs): `<method> key=value ... -> ok <kind> | -> err <code>`.
 */
export function parseCall(line, where) {
  const m = line.match(/^(\S+)((?:\s+\S+=\S*)*)\s+->\s+(ok|err)\s+(\S+)$/);
  assert.ok(m, `${where}: cannot parse: ${line}`);
  const args = {};
  for (const kv of m[2].trim().split(/\s+/).filter(Boolean)) {
    const eq = kv.indexOf('=');
    args[kv.slice(0, eq)] = kv.slice(eq + 1);
  }
  return { method: m[1], args, expect: m[3], value: m[4] };
}
