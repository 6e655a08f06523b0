// The GC-pause story of the root README, from the package by name as a bundler resolves it
// ("browser" condition: the web builds, each loading its .wasm in init() from the URL the
// bundler gave it). The outcome goes to body[data-result] as JSON, a failure to
// body[data-error]; wasm/tests/bundler/check.mjs compares the result with what it expects.
import init, { LockService, FenceGate } from 'fencelock';
import initLite, { LiteService } from 'fencelock/lite';

async function run() {
  await init();
  const svc = new LockService({ sessions: 4, locks: 4, claims: 8, lockDelay: 0 });
  const gate = new FenceGate(4);
  const write = (token) => {
    try { gate.admit('ledger', token); return `admitted ${token}`; } catch (e) { return `${e.code} ${e.token} ${e.highest}`; }
  };
  const a = svc.openSession(0, 10).reply.session;
  const b = svc.openSession(0, 30).reply.session;
  const tokenA = svc.acquire(1, a, 'ledger', { mode: 'exclusive', wait: 'forever' }).reply.token;
  const writes = [write(tokenA)];
  const queued = svc.acquire(1, b, 'ledger', { mode: 'exclusive', wait: 'forever' }).reply.kind;
  // A pauses past its session's expiry: the tick expires it and grants B the next token.
  const events = svc.tick(10).events.map((e) => [e.kind, e.session, e.token ?? null]);
  const tokenB = events.find((e) => e[0] === 'granted')[2];
  writes.push(write(tokenB), write(tokenA)); // B writes, then A's late write with its old token
  // The guard scripts/build-wasm.sh appends to the glue ran (the package has sideEffects:
  // false, and the block is top-level code): a string where a number goes is bad_argument.
  const guard = svc.acquireFast(11, b, 'other', '0', 0);

  await initLite();
  const lite = new LiteService({ sessions: 2, locks: 2, claims: 2 });
  lite.openSession(0, 10);
  const la = lite.replyValue();
  lite.openSession(0, 30);
  const lb = lite.replyValue();
  const liteCodes = [lite.acquire(1, la, 'ledger', 0, 1), lite.acquire(1, lb, 'ledger', 0, 1), lite.tick(10)];
  const liteGrants = lite.takeEvents().filter((e) => e.kind === 'granted').map((e) => [e.session, e.token]);

  return { tokenA, queued, events, tokenB, writes, guard, lite: { codes: liteCodes, grants: liteGrants } };
}

run().then(
  (result) => { document.body.dataset.result = JSON.stringify(result); },
  (e) => { document.body.dataset.error = String(e && e.stack || e); },
);
