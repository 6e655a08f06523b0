// Instructions per operation of the wasm build under node, for valgrind's callgrind
// (deterministic where wall time on a shared machine is not). Run it at two round counts
// and divide the difference by the operations added, so start-up, compilation and the
// setup cancel out:
//
//   valgrind --tool=callgrind --smc-check=all-non-file --callgrind-out-file=/dev/null \
//     node --single-threaded --no-liftoff --no-wasm-tier-up \
//     benches/js/instructions.cjs wasm/pkg/node acqrel-id 56            # then 206
//
// (--single-threaded: V8 compiles and collects on the main thread, so the count does not
// depend on when background threads ran. --no-liftoff --no-wasm-tier-up: the module is
// compiled by the optimising compiler up front, as a warm host runs it; with the baseline
// compiler tiering up while the rounds go on, repeat runs of one build differed by up to
// half, with it by about 10 % (measured with the window then used). 56 -> 206 rounds,
// 150 x 1024 pairs more, leaves the warm-up out: the first rounds cost more per pair,
// most likely V8 still compiling the JS side (the loop, the glue), so a window that
// starts early counts that as work per pair. Measured on one build, id calls,
// instructions per pair between round counts: 6 -> 26 about 6 300, then 26 -> 56,
// 56 -> 106, 106 -> 206 and 206 -> 406 from 4 370 to 4 570; the window 6 -> 56 used
// before read 5 170 to 5 460 on that build (about 800 more than the windows after
// round 26, and 5 % apart run to run), 56 -> 206 read 4 380 to 4 430. Before every lock
// was held at once in a round, it was 24 -> 224 rounds of 256 pairs, one lock held at a
// time. The figures in wasm/README.md before the id calls were taken without the two
// flags, at 24 -> 104.)
//   ... snap 2 / snap 6                                             # 4 rounds more
//
// acqrel: one round = acquire of each of 1024 locks by one session, then release of each
// (the tables sized 1024: every lock live at once, as the native count and the criterion
// workloads `uncontended*/1024` run it).
// acqrel-fast: the same through the typed fast path (acquireFast / releaseFast).
// acqrel-id: the same through the id calls (acquireFastId / releaseFastId), each name
// interned once before the rounds.
// acqrel-lite: the same through the small module (fencelock/lite: LiteService's acquire /
// release, names as strings), from wasm/pkg/lite/node beside the node build.
// Every workload checks, after its rounds, that each acquire was granted and each release
// released (the sum of the reply codes, or of the reply kinds' lengths, is exactly that
// of all grants and releases), so a refused call is never counted as an operation.
// snap: one round = restore + snapshot of a service with 1024 sessions each holding a lock.
// V8 compiles the hot functions while the runs go on: the difference is what a warm host pays.
// scripts/bench.sh (make bench) runs acqrel-id, acqrel-fast, acqrel and acqrel-lite this way for the goals table
// (BENCH_WASM_ROUNDS sets the two round counts); snap is run by hand.
const { LockService } = require(require('node:path').resolve(process.argv[2], 'fencelock_wasm.js'));
const work = process.argv[3];
const N = Number(process.argv[4]);
/** Acquire + release pairs in one round: printed, and bench.sh divides by it. */
const PAIRS_PER_ROUND = 1024;
const names = Array.from({ length: PAIRS_PER_ROUND }, (_, i) => `lock/${String(i).padStart(8, '0')}`);
const caps = { sessions: 1, locks: PAIRS_PER_ROUND, claims: PAIRS_PER_ROUND };
const TRY = { mode: 'exclusive', wait: 'none' };
// Reply codes of the typed calls: granted 3, released 6.
const CODES = 3 + 6;
let sink = 0;
let later = Promise.resolve(); // a workload that loads an ES module first finishes here
/** Throws unless `got` is `each` per pair of every round. */
function expect(got, each) {
  if (got !== each * N * PAIRS_PER_ROUND) {
    throw new Error(`${work}: not every acquire was granted and every release released (${got} against ${each * N * PAIRS_PER_ROUND})`);
  }
  sink += got;
}
if (work === 'acqrel') {
  const svc = new LockService(caps);
  const s = svc.openSession(0, 2 ** 40).reply.session;
  let got = 0;
  for (let k = 0; k < N; k++) {
    for (const n of names) got += svc.acquire(0, s, n, TRY).reply.kind.length; // "granted"
    for (const n of names) got += svc.release(0, s, n).reply.kind.length; // "released"
  }
  expect(got, 'granted'.length + 'released'.length);
} else if (work === 'acqrel-fast') {
  const svc = new LockService(caps);
  const s = svc.openSession(0, 2 ** 40).reply.session;
  let got = 0;
  for (let k = 0; k < N; k++) {
    for (const n of names) got += svc.acquireFast(0, s, n, 0, 0);
    for (const n of names) got += svc.releaseFast(0, s, n);
  }
  expect(got, CODES);
  if (svc.pendingEvents() !== 0) throw new Error('uncontended acquire/release left events');
} else if (work === 'acqrel-id') {
  const svc = new LockService(caps);
  const s = svc.openSession(0, 2 ** 40).reply.session;
  const ids = names.map((n) => svc.internName(n));
  let got = 0;
  for (let k = 0; k < N; k++) {
    for (const id of ids) got += svc.acquireFastId(0, s, id, 0, 0);
    for (const id of ids) got += svc.releaseFastId(0, s, id);
  }
  expect(got, CODES);
  if (svc.pendingEvents() !== 0) throw new Error('uncontended acquire/release left events');
} else if (work === 'acqrel-lite') {
  // The small module (fencelock/lite, an ES module beside the node build): loaded, then run.
  const url = require('node:url').pathToFileURL(
    require('node:path').resolve(process.argv[2], '..', 'lite', 'node', 'index.mjs'));
  later = import(url.href).then(({ LiteService }) => {
    const svc = new LiteService(caps);
    svc.openSession(0, 2 ** 40);
    const s = svc.replyValue();
    let got = 0;
    for (let k = 0; k < N; k++) {
      for (const n of names) got += svc.acquire(0, s, n, 0, 0);
      for (const n of names) got += svc.release(0, s, n);
    }
    expect(got, CODES);
    if (svc.pendingEvents() !== 0) throw new Error('uncontended acquire/release left events');
  });
} else if (work === 'snap') {
  const n = 1024;
  const caps = { sessions: n, locks: n, claims: 2 * n };
  const svc = new LockService(caps);
  const ss = [];
  for (let i = 0; i < n; i++) ss.push(svc.openSession(0, 2 ** 40).reply.session);
  ss.forEach((s, i) => svc.acquire(0, s, `l${i}`, TRY));
  const bytes = svc.snapshot();
  for (let k = 0; k < N; k++) {
    const b = LockService.restore(bytes, caps);
    sink += b.revision();
    b.free();
    sink += svc.snapshot().length;
  }
} else {
  throw new Error(`unknown workload ${work}: acqrel, acqrel-fast, acqrel-id, acqrel-lite or snap`);
}
later.then(() => console.log(`pairs_per_round=${PAIRS_PER_ROUND} sink=${sink}`));
