// The generated TypeScript declarations: the tagged unions are there, and every public
// method is typed (no `any` in the classes' signatures), in both packages.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { repo } from './pkg.mjs';

for (const kind of ['node', 'web']) {
  const dts = readFileSync(path.join(repo, 'wasm', 'pkg', kind, 'fencelock_wasm.d.ts'), 'utf8');

  test(`${kind} .d.ts declares the union types`, () => {
    for (const name of ['Output', 'Input', 'Mode', 'Wait', 'Lease', 'ErrorCode', 'ReleaseReason']) {
      assert.match(dts, new RegExp(`export type ${name} =`), name);
    }
    for (const name of ['Holder', 'Waiter', 'SessionInfo', 'Leader', 'GateEntry', 'Capacities', 'ServiceConfig', 'FencelockError']) {
      assert.match(dts, new RegExp(`export interface ${name}\\b`), name);
    }
    for (const t of ['sessionOpened', 'sessionRenewed', 'sessionClosed', 'sessionExpired', 'granted', 'queued', 'busy', 'released', 'waitTimedOut', 'waitCancelled']) {
      assert.match(dts, new RegExp(`type: "${t}"`), t);
    }
  });

  test(`${kind} .d.ts types every method (no any)`, () => {
    const classes = dts.match(/export class \w+ \{[\s\S]*?\n\}/g);
    assert.equal(classes.length, 3);
    for (const body of classes) {
      const code = body.replace(/\/\*\*[\s\S]*?\*\//g, ''); // drop doc comments
      assert.doesNotMatch(code, /\bany\b/, body.slice(0, 40));
    }
    const expect = [
      'constructor(config: ServiceConfig);',
      'openSession(ttl: number): Output[];',
      'keepAlive(session: number, request?: number | null): Output[];',
      'acquire(session: number, lock: string, mode: Mode, wait: Wait, request?: number | null): Output[];',
      'handle(input: Input): Output[];',
      'handleFrame(frame: Uint8Array): Uint8Array[];',
      'pollTimeout(): number | null;',
      'holders(lock: string): Holder[];',
      'waiters(lock: string): Waiter[];',
      'session(id: number): SessionInfo | null;',
      'leader(election: string): Leader | null;',
      'snapshot(): Uint8Array;',
      'static restore(bytes: Uint8Array, capacities: Capacities): LockService;',
      'admit(resource: string, token: number): void;',
      'entries(): GateEntry[];',
      'static restore(bytes: Uint8Array, capacity: number): FenceGate;',
      'lease(now: number): Lease;',
      'heartbeatAcked(sentAt: number): boolean;',
    ];
    for (const sig of expect) assert.ok(dts.includes(sig), `missing: ${sig}`);
  });
}
