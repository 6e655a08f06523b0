// The small module, `fencelock/lite` (wasm/README.md's lite example). Checked by
// scripts/test-wasm.sh as node resolves it (tsconfig.json: lite/node/index.d.mts) and as
// a bundler for the web does (tsconfig.browser.json: lite/web/index.d.ts); type-checked
// only, never run.
import init, { LiteService } from 'fencelock/lite';
import type { LiteCode, LiteError, LiteEvent } from 'fencelock/lite';
import type { AnyIn, None } from './noany.mjs';

await init(); // the browser build fetches its .wasm here

// No `any` anywhere in what a user calls or gets back (noany.mts, as in service.mts).
export type NoAny = [
  None<AnyIn<LiteService, 'LiteService'>>,
  None<AnyIn<{ init: typeof init; new: typeof LiteService }, 'lite',
    LiteService>>,
];
// The check, with that stop list, finds an `any` (service.mts has the other probes).
// @ts-expect-error 'probe.f()'
export type Probe = None<AnyIn<{ f(): any }, 'probe', LiteService>>;

const svc = new LiteService({ sessions: 64, locks: 64, claims: 256, lockDelay: 0 });
svc.openSession(0, 10);
const a: number = svc.replyValue();
svc.openSession(0, 30);
const b = svc.replyValue();
const code: LiteCode = svc.acquire(0, a, 'ledger', 0, 1);
if (code === 3) console.log('token', svc.replyValue());
svc.acquire(1, b, 'ledger', 0, 2, 20);
svc.acquire(1, b, 'pool', 2, 0, null, 1, 2, 5);
svc.tick(10);
for (const e of svc.takeEvents()) route(e);
function route(e: LiteEvent): void {
  switch (e.kind) {
    case 'granted':
      console.log(e.session, e.lock, e.token, e.mode);
      break;
    case 'released':
      console.log(e.session, e.lock, e.token, e.reason);
      break;
    case 'session_expired':
      console.log(e.session);
      break;
    case 'wait_timed_out':
      console.log(e.session, e.lock);
      break;
    default: {
      const unreachable: never = e;
      console.log(unreachable);
    }
  }
  // @ts-expect-error the small module has no watches
  if (e.kind === 'holder_changed') console.log('never');
}
if (svc.release(11, a, 'ledger') < 0) {
  const err: LiteError | null = svc.lastError();
  if (err?.code === 'unknown_session') console.log(err.errno);
  // @ts-expect-error the small module has no gate, so no "stale"
  if (err?.code === 'stale') console.log('never');
}
svc.keepAlive(12, b);
svc.cancel(12, b, 'ledger');
svc.closeSession(13, b, 4);
console.log(svc.pollTimeout(), svc.pendingEvents(), svc.eventLimit());
// @ts-expect-error the mode is a code 0, 1 or 2
svc.acquire(14, b, 'ledger', 3);
// @ts-expect-error the ttl is required
svc.openSession(14);
// @ts-expect-error a lock name is a string
svc.release(14, b, 7);
// @ts-expect-error numbers only: no bigints here
svc.tick(15n);
svc.free();
// `using` frees a service at the end of its scope, as the full module's classes.
const dispose: () => void = new LiteService({ sessions: 1, locks: 1, claims: 1 })[Symbol.dispose];
console.log(dispose);
