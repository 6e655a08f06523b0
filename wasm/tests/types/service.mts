// The package's main API as a TypeScript user writes it (wasm/README.md's examples):
// `import init, { … } from 'fencelock'`. Checked by scripts/test-wasm.sh twice: as node
// resolves it (tsconfig.json: the "node" + "import" export, node/fencelock_wasm.d.mts) and
// as a bundler for the web does (tsconfig.browser.json: the "browser" export,
// web/fencelock_wasm.d.ts). Type-checked only, never run. Every `@ts-expect-error` line
// must be an error: were the declarations `any`, tsc would fail on the unused directive.
import init, { FenceGate, LockService, SessionKeeper, errorKinds } from 'fencelock';
import type { AnyIn, None } from './noany.mjs';
import type {
  AcquireReply, Answer, ErrorCode, FencelockError, Holder, Input, Lease, Mode, Output, Reply, ServiceConfig, U64,
} from 'fencelock';

await init(); // nothing to load in node; the browser build fetches its .wasm here

// No `any` anywhere in what a user calls or gets back (noany.mts): a path here fails the
// check ("does not satisfy the constraint 'never'") and names where the `any` is. Every
// class, its statics, and the functions; a class met inside another is checked on its own.
// Not looked into: what the web build's `init()` resolves to, wasm-bindgen's raw exports
// (`InitOutput`: the module's own functions, whose JS values wasm-bindgen types `any`;
// not an API — wasm/README.md says so).
type Raw = Awaited<ReturnType<typeof init>>;
type Classes = LockService | FenceGate | SessionKeeper | Raw;
type Statics<C extends abstract new (...args: never) => unknown> = Omit<C, 'prototype'> & {
  new: C; // its constructors, every overload (`ConstructorParameters` sees only the last)
};
export type NoAny = [
  None<AnyIn<LockService, 'LockService', Exclude<Classes, LockService>>>,
  None<AnyIn<Statics<typeof LockService>, 'LockService', Classes>>,
  None<AnyIn<FenceGate, 'FenceGate', Exclude<Classes, FenceGate>>>,
  None<AnyIn<Statics<typeof FenceGate>, 'FenceGate', Classes>>,
  None<AnyIn<SessionKeeper, 'SessionKeeper', Exclude<Classes, SessionKeeper>>>,
  None<AnyIn<Statics<typeof SessionKeeper>, 'SessionKeeper', Classes>>,
  None<AnyIn<{ init: typeof init; errorKinds: typeof errorKinds }, 'fencelock', Classes>>,
];
// The check itself fails where it must (were it blind, a line below would not be an
// error and tsc would fail on its unused directive): an `any` nested in a result, in a
// rest parameter, with the stop list used above, and a type deeper than it looks.
// @ts-expect-error 'probe.f().then.x[]' does not satisfy the constraint 'never'
export type Probe = None<AnyIn<{ f(): Promise<{ x: any[] }> }, 'probe'>>;
// @ts-expect-error 'probe.f(${number})'
export type ProbeRest = None<AnyIn<{ f(...xs: any[]): void }, 'probe'>>;
// @ts-expect-error 'probe.f()'
export type ProbeStop = None<AnyIn<{ f(): any }, 'probe', Classes>>;
// @ts-expect-error 'probe.f(0)': an overload before the last
export type ProbeOverload = None<AnyIn<{ f(x: any): void; f(x: string): number }, 'probe'>>;
// @ts-expect-error 'probe.f: more overloads than the check looks at'
export type ProbeOverloads = None<AnyIn<{ f(): 1; f(x: 2): 2; f(x: 3): 3; f(x: 4): 4; f(x: 5): 5 }, 'probe'>>;
declare class Built { constructor(x: any); constructor(); built: true } // (a member: an empty class, every type extends it)
// @ts-expect-error 'probe.new(0)': a constructor's overload before the last
export type ProbeNew = None<AnyIn<{ new: typeof Built }, 'probe', Built>>;
// @ts-expect-error 'probe: the stop list takes every type'
export type ProbeUnknown = None<AnyIn<{ x: number }, 'probe', unknown>>;
// @ts-expect-error 'probe.a.b.c.d.e.f.g.h: deeper than the check looks'
export type ProbeDeep = None<AnyIn<{ a: { b: { c: { d: { e: { f: { g: { h: { i: number } } } } } } } } }, 'probe'>>;

const svc = new LockService({ sessions: 64, locks: 64, claims: 256, lockDelay: 0 });
// @ts-expect-error a required capacity (claims) is missing
new LockService({ sessions: 64, locks: 64 });
// @ts-expect-error an unknown key (the binding throws bad_argument with .key)
new LockService({ sessions: 64, locks: 64, claims: 256, lockdelay: 5 });

// Sessions: every input takes the host's clock first and returns {reply, events}.
const a: U64 = svc.openSession(0, 10).reply.session;
const b = svc.openLabeled(0, 30, 'worker-b').reply.session;
// @ts-expect-error the ttl is required
svc.openSession(0);
// @ts-expect-error a label is a string
svc.openLabeled(0, 30, 7);

// Acquire (the object API), and read the reply by narrowing on `kind`.
const first = svc.acquire(0, a, 'ledger', { mode: 'exclusive', wait: 'forever' });
let token: U64 = 0;
switch (first.reply.kind) {
  case 'granted':
    token = first.reply.token;
    break;
  case 'queued': {
    const position: number = first.reply.position;
    const mode: Mode = first.reply.mode;
    console.log(position, mode);
    break;
  }
  case 'hold_ended':
    console.log(first.reply.token);
    break;
  case 'busy':
  case 'wait_ended':
    break;
  default: {
    const unreachable: never = first.reply;
    console.log(unreachable);
  }
}
// @ts-expect-error "released" is not a reply an acquire can get
if (first.reply.kind === 'released') console.log('never');
// @ts-expect-error a queued reply has no token
if (first.reply.kind === 'queued') console.log(first.reply.token);
// @ts-expect-error a lock name is a string
svc.acquire(1, b, 42, { mode: 'exclusive', wait: 'none' });
// @ts-expect-error the wait is required
svc.acquire(1, b, 'ledger', { mode: 'exclusive' });
// @ts-expect-error not a mode
svc.acquire(1, b, 'ledger', { mode: 'exclusiv', wait: 'none' });

const second = svc.acquire(1, b, 'ledger', { mode: 'exclusive', wait: { until: 20 }, request: 1 });
if (second.reply.kind === 'queued') console.log(second.reply.position);
svc.acquire(1, b, 'pool', { mode: { permits: 2, limit: 5 }, wait: 'none', request: 2n });

// Events: route each to the session it names, narrowing on `kind`.
function route(e: Output): void {
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
    case 'holder_changed':
      console.log(e.session, e.lock, e.holder, e.change, e.label);
      break;
    default: {
      const unreachable: never = e;
      console.log(unreachable);
    }
  }
  // @ts-expect-error no event kind "expired" (it is "session_expired")
  if (e.kind === 'expired') console.log('never');
}
svc.tick(10).events.forEach(route);
const watching = svc.watch(11, b, 'ledger');
console.log(watching.reply.holders);
watching.events.forEach(route);
svc.unwatch(11, b, 'ledger');

// Release, by name and by the hold's token.
const released = svc.release(12, b, 'ledger', 3);
const answer: Answer<AcquireReply> = first;
console.log(answer.events.length);
console.log(released.reply.kind === 'released' && released.reply.token);
try {
  svc.releaseHold(12, b, 'pool', token);
} catch (e) {
  const err = e as FencelockError;
  if (err.code === 'not_holder') console.log(err.session, err.events?.length);
}
// @ts-expect-error the token is required
svc.releaseHold(12, b, 'pool');

// The other inputs, and the tagged form of `handle`.
svc.keepAlive(13, b);
svc.cancel(13, b, 'ledger');
svc.campaign(13, b, 'leader');
const resigned = svc.resign(14, b, 'leader');
if (resigned.reply.kind === 'cancelled') console.log('was waiting');
const input: Input = { kind: 'acquire', now: 14, session: b, lock: 'ledger', mode: 'shared', wait: 'none' };
const handled: Reply = svc.handle(input).reply;
if (handled.kind === 'granted') console.log(handled.token);
svc.handle({ kind: 'release_hold', now: 15, session: b, lock: 'ledger', token: 9 });
// @ts-expect-error no input kind "open" (it is "open_session")
svc.handle({ kind: 'open', now: 15, ttl: 10 });
svc.closeSession(16, b);

// The typed fast path: numbers and the name in, one code out.
const s = Number(svc.openSession(16, 30).reply.session);
const code = svc.acquireFast(16, s, 'jobs/reindex', 0, 0);
if (code === 3) console.log(svc.replyValue());
else if (code < 0) {
  const err: FencelockError | null = svc.lastError();
  if (err) throw err;
}
if (svc.pendingEvents()) svc.takeEvents().forEach(route);
svc.releaseFast(17, s, 'jobs/reindex');
// @ts-expect-error the mode is a code 0, 1 or 2
svc.acquireFast(17, s, 'jobs/reindex', 3, 0);
// @ts-expect-error the fast path takes numbers, not bigints
svc.acquireFast(17n, s, 'jobs/reindex', 0, 0);

// The id calls: a name interned once, then a number per call.
const ledger: number = svc.internName('ledger');
if (svc.acquireFastId(18, s, ledger, 0, 1) === 3) console.log(svc.replyValue());
svc.releaseFastId(18, s, ledger);
svc.forgetName(ledger);
// @ts-expect-error an id is a number, not a name
svc.acquireFastId(18, s, 'ledger', 0, 1);

// Queries, snapshot and restore, frames.
const due: U64 | null = svc.pollTimeout();
console.log(due, svc.now(), svc.revision(), svc.usage().claims, svc.maxEvents(), svc.config().lockDelay);
for (const h of svc.holders('ledger')) console.log(h.session, h.mode, h.token, h.label);
const mine: Holder | null = svc.hold(1, 'ledger');
if (mine !== null) console.log(mine.token);
for (const w of svc.waiters('ledger')) console.log(w.session, w.deadline);
console.log(svc.session(s)?.expiresAt, svc.sessions(), svc.locks(), svc.leader('leader')?.epoch);
console.log(svc.permits('pool')?.inUse, svc.lockDelayUntil('ledger'), svc.raiseRevision(100));
const copy = LockService.restore(svc.snapshot(), svc.capacity());
const frame = copy.handleFrame(new Uint8Array([0x00, 0x0a, 0x0a]));
const replyBytes: Uint8Array = frame.reply;
console.log(replyBytes.length, frame.events.length);
svc.setNameKey(crypto.getRandomValues(new Uint8Array(16)));
console.log(svc.isNameKeyed());
// Restored keyed as the rows load (bytes others wrote); the key is bytes, not text.
LockService.restore(svc.snapshot(), svc.capacity(), crypto.getRandomValues(new Uint8Array(16))).free();
// @ts-expect-error a key is a Uint8Array
LockService.restore(svc.snapshot(), svc.capacity(), 'sixteen bytes!!!');
// The capacities only: a config (which extends them) is refused at run time, and by the type.
const withConfig: ServiceConfig = { sessions: 4, locks: 4, claims: 8, lockDelay: 5 };
// @ts-expect-error the config comes from the snapshot
LockService.restore(svc.snapshot(), withConfig);
svc.setEventLimit(svc.eventLimit() * 2);
copy.free();

// The resource's gate: a late write carrying an old token is refused.
{
  using gate = new FenceGate(16);
  gate.admit('ledger', 2);
  try {
    gate.admit('ledger', 1);
  } catch (e) {
    const err = e as FencelockError;
    if (err.code === 'stale') console.log(err.token, err.highest);
    // @ts-expect-error not an error code
    if (err.code === 'stale_token') console.log('never');
  }
  console.log(gate.highest('ledger'), gate.entries()[0]?.resource, FenceGate.restore(gate.snapshot(), 16));
  FenceGate.restore(gate.snapshot(), 16, crypto.getRandomValues(new Uint8Array(16))).free();
  // @ts-expect-error a resource is a string
  gate.check(1, 2);
}

// The client's view of its lease.
const keeper = new SessionKeeper(30, 10, 5);
keeper.keepAliveSent(0);
const extended: boolean = keeper.keepAliveAcked(0);
const lease: Lease = keeper.lease(5);
switch (lease.state) {
  case 'safe':
    console.log(lease.until);
    break;
  case 'jeopardy':
    console.log(lease.expiresAt);
    break;
  case 'expired':
  case 'unconfirmed':
    break;
}
console.log(extended, keeper.mayAct(5), keeper.nextKeepAlive(5), keeper.pollTimeout(5));
keeper.sessionLost();
// @ts-expect-error the margin is required
new SessionKeeper(30, 10);

const codes: ErrorCode[] = errorKinds().map((k) => k.code);
console.log(codes, errorKinds()[0]?.errno);
svc.free();
