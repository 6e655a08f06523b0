// The package from CommonJS, `require('fencelock')` (the "node" + "require" export,
// node/fencelock_wasm.d.ts, also the package's top-level "types"). Checked by
// scripts/test-wasm.sh under tsconfig.json; type-checked only, never run.
import fencelock = require('fencelock');

const svc = new fencelock.LockService({ sessions: 8, locks: 8, claims: 8 });
const a = svc.openSession(0, 10).reply.session;
const answer: fencelock.Answer<fencelock.AcquireReply> = svc.acquire(0, a, 'ledger', { mode: 'shared', wait: 'none' });
if (answer.reply.kind === 'granted') {
  const token: fencelock.U64 = answer.reply.token;
  const gate = new fencelock.FenceGate(4);
  gate.admit('ledger', token);
  gate.free();
}
// @ts-expect-error "grant" is not a reply kind
if (answer.reply.kind === 'grant') console.log('never');
// @ts-expect-error the ttl is a U64, not a string
svc.openSession(0, '10');
try {
  svc.release(1, a, 'other');
} catch (e) {
  const err = e as fencelock.FencelockError;
  console.log(err.code, err.errno, err.events);
}
const keeper = new fencelock.SessionKeeper(30, 10, 5);
console.log(keeper.lease(0).state, fencelock.errorKinds().length);
svc.free();
