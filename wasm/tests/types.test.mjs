// The generated TypeScript declarations: the tagged unions are there (one discriminant,
// `kind`, with the core's kind strings), and every public method is typed (no `any` in
// the classes' signatures), in both packages.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { repo, wasm } from './pkg.mjs';

for (const pkg of ['node', 'web']) {
  const dts = readFileSync(path.join(repo, 'wasm', 'pkg', pkg, 'fencelock_wasm.d.ts'), 'utf8');

  test(`${pkg} .d.ts declares the union types`, () => {
    for (const name of ['U64', 'Reply', 'Output', 'Input', 'Mode', 'Wait', 'Lease', 'ErrorCode', 'ReleaseReason', 'AcquireReply', 'Change', 'Watching', 'Unwatched']) {
      assert.match(dts, new RegExp(`export type ${name} =`), name);
    }
    for (const name of ['Answer', 'FrameAnswer', 'AcquireOptions', 'Holder', 'Waiter', 'SessionInfo', 'Leader', 'GateEntry', 'Capacities', 'Usage', 'ServiceConfig', 'FencelockError', 'ErrorKind', 'Permits']) {
      assert.match(dts, new RegExp(`export interface ${name}\\b`), name);
    }
    // the reply kinds are Reply::kind(), the event kinds Output::kind()
    for (const k of ['opened', 'kept_alive', 'closed', 'granted', 'queued', 'busy', 'released', 'cancelled', 'hold_ended', 'wait_ended', 'ticked', 'watching', 'unwatched', 'session_expired', 'wait_timed_out', 'holder_changed']) {
      assert.match(dts, new RegExp(`kind: "${k}"`), k);
    }
    for (const k of ['open_session', 'open_labeled', 'keep_alive', 'close_session', 'acquire', 'release', 'cancel', 'tick', 'watch', 'unwatch', 'release_hold']) {
      assert.match(dts, new RegExp(`\\{ kind: "${k}"; now: U64`), `input ${k}`);
    }
    // release_hold names the hold by its token, inside the Input union
    const input = dts.slice(dts.indexOf('export type Input ='));
    assert.match(input.slice(0, input.indexOf(';\n\n')), /\{ kind: "release_hold"; now: U64; session: U64; lock: string; token: U64; request\?: U64 \| null \}/);
    assert.doesNotMatch(dts, /\btype: "/, 'the discriminant is kind');
    // the typed fast path: codes in, a code out
    assert.match(dts, /export type FastMode = 0 \| 1 \| 2;/);
    assert.match(dts, /acquireFast\(now: number, session: number, lock: string, mode: FastMode, wait: FastWait, until\?: number \| null, request\?: number \| null, count\?: number \| null, limit\?: number \| null\): FastCode;/);
    assert.match(dts, /releaseFast\(now: number, session: number, lock: string, request\?: number \| null\): FastCode;/);
    assert.match(dts, /takeEvents\(\): Output\[\];/);
    // the id calls: a name interned once, then a number per call
    assert.match(dts, /internName\(name: string\): number;/);
    assert.match(dts, /forgetName\(nameId: number\): void;/);
    assert.match(dts, /acquireFastId\(now: number, session: number, nameId: number, mode: FastMode, wait: FastWait, until\?: number \| null, request\?: number \| null, count\?: number \| null, limit\?: number \| null\): FastCode;/);
    assert.match(dts, /releaseFastId\(now: number, session: number, nameId: number, request\?: number \| null\): FastCode;/);
    // the JSON spelling of a semaphore's mode (docs/RECORDING.md), and the five change kinds
    assert.match(dts, /export type Mode = "exclusive" \| "shared" \| \{ permits: number; limit: number \};/);
    assert.match(dts, /export type Change = "holding" \| "granted" \| "released" \| "closed" \| "expired";/);
    // every error kind the binding can throw is in ErrorCode
    const union = dts.slice(dts.indexOf('export type ErrorCode ='));
    for (const { code } of wasm.errorKinds()) assert.match(union.slice(0, union.indexOf(';')), new RegExp(`"${code}"`), code);
  });

  test(`${pkg} .d.ts types every method (no any)`, () => {
    const classes = dts.match(/export class \w+ \{[\s\S]*?\n\}/g);
    assert.equal(classes.length, 3);
    for (const body of classes) {
      const code = body.replace(/\/\*\*[\s\S]*?\*\//g, ''); // drop doc comments
      assert.doesNotMatch(code, /\bany\b/, body.slice(0, 40));
    }
    const expect = [
      'constructor(config: ServiceConfig);',
      'openSession(now: U64, ttl: U64): Answer<Opened>;',
      'keepAlive(now: U64, session: U64, request?: U64 | null): Answer<KeptAlive>;',
      'closeSession(now: U64, session: U64, request?: U64 | null): Answer<Closed>;',
      'acquire(now: U64, session: U64, lock: string, options: AcquireOptions): Answer<AcquireReply>;',
      'release(now: U64, session: U64, lock: string, request?: U64 | null): Answer<Released>;',
      'releaseHold(now: U64, session: U64, lock: string, token: U64, request?: U64 | null): Answer<Released>;',
      'cancel(now: U64, session: U64, lock: string, request?: U64 | null): Answer<Cancelled>;',
      'tick(now: U64): Answer<Ticked>;',
      'openLabeled(now: U64, ttl: U64, label: string): Answer<Opened>;',
      'watch(now: U64, session: U64, lock: string, request?: U64 | null): Answer<Watching>;',
      'unwatch(now: U64, session: U64, lock: string, request?: U64 | null): Answer<Unwatched>;',
      'permits(lock: string): Permits | null;',
      'raiseRevision(floor: U64): U64;',
      'resign(now: U64, session: U64, election: string, request?: U64 | null): Answer<Released | Cancelled>;',
      'handle(input: Input): Answer<Reply>;',
      'handleFrame(frame: Uint8Array): FrameAnswer;',
      'pollTimeout(): U64 | null;',
      'usage(): Usage;',
      'maxEvents(): number;',
      'holders(lock: string): Holder[];',
      'hold(session: U64, lock: string): Holder | null;',
      'waiters(lock: string): Waiter[];',
      'session(id: U64): SessionInfo | null;',
      'leader(election: string): Leader | null;',
      'snapshot(): Uint8Array;',
      'static restore(bytes: Uint8Array, capacities: RestoreCapacities, key?: Uint8Array): LockService;',
      'admit(resource: string, token: U64): void;',
      'entries(): GateEntry[];',
      'static restore(bytes: Uint8Array, capacity: U64, key?: Uint8Array): FenceGate;',
      'lease(now: U64): Lease;',
      'keepAliveSent(at: U64): void;',
      'keepAliveAcked(sentAt: U64): boolean;',
      'nextKeepAlive(now: U64): U64;',
      'export function errorKinds(): ErrorKind[];',
    ];
    for (const sig of expect) assert.ok(dts.includes(sig), `missing: ${sig}`);
    assert.ok(!dts.includes('heartbeat'), 'one word: keep-alive');
  });
}
