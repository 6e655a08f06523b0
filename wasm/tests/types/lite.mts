// The small module, `fencelock/lite` (wasm/README.md's lite example). Checked by
// scripts/test-wasm.sh as node resolves it (tsconfig.json: lite/node/index.d.mts) and as
// a bundler for the web does (tsconfig.browser.json: lite/web/index.d.ts); type-checked
// only, never run.
import init, { LiteService } from 'fencelock/lite';
import type { LiteCode, LiteError, LiteEvent } from 'fencelock/lite';

await init(); // the browser build fetches its .wasm here

// No method takes or returns `any` (as in service.mts: a name here fails the check).
type IsAny<T> = 0 extends 1 & T ? true : false;
type AnyMethods<C> = {
  [K in keyof C]: C[K] extends (...args: infer A) => infer R
    ? IsAny<R> extends true ? K : true extends { [I in keyof A]: IsAny<A[I]> }[number] ? K : never
    : IsAny<C[K]> extends true ? K : never;
}[keyof C];
type None<T extends never> = T;
export type NoAny = [
  None<AnyMethods<LiteService>>,
  None<AnyMethods<{ init: typeof init; new: (...args: ConstructorParameters<typeof LiteService>) => LiteService }>>,
];

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
