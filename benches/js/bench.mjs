// The core's hot paths through the wasm build under node (wasm/pkg/node, what the JS API
// ships), measured like benches/benches/core.rs measures them natively, so the report can
// divide one by the other. Prints JSON on stdout.
//
//   node benches/js/bench.mjs [pkg-dir]        (default: wasm/pkg/node)
//   BENCH_JS_SECS=1 sets the measuring time per benchmark (default 1 s, 5 samples).
//   The small module's workload reads [pkg-dir]/../lite/node (scripts/build-wasm.sh
//   builds both); without it, that workload is skipped.
//
// Each benchmark is a function run(iters) that returns the nanoseconds spent on the
// measured part only (untimed setup inside it is excluded, as criterion's iter_custom).

import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkgDir = path.resolve(process.argv[2] ?? path.join(here, '..', '..', 'wasm', 'pkg', 'node'));
const require = createRequire(import.meta.url);
const { LockService } = require(path.join(pkgDir, 'fencelock_wasm.js'));
// The small module (fencelock/lite), an ES module built beside the node build; without
// it (a package built before it existed), its workload is skipped with a note.
let LiteService = null;
try {
  ({ LiteService } = await import(pathToFileURL(path.join(pkgDir, '..', 'lite', 'node', 'index.mjs')).href));
} catch (e) {
  process.stderr.write(`wasm: no small module beside ${pkgDir} (${e.code ?? e.message}): uncontended_lite skipped\n`);
}

const SECS = Number(process.env.BENCH_JS_SECS ?? '1');
const SAMPLES = 5;
const FOREVER_TTL = 2 ** 40;
let sink = 0; // keeps results observable
// Reply codes of the typed calls: granted 3, released 6.
const CODES = 3 + 6;
/**
 * Checked after a timed run, outside its time: `got` (the sum of the replies' codes, or
 * of their kinds' lengths) is `each` for every one of `pairs` acquire + release pairs, so
 * every acquire was granted and every release released — a refused call is never timed
 * as an operation.
 */
function granted(got, pairs, each) {
  if (got !== pairs * each) {
    throw new Error(`not every acquire was granted and every release released (${got} against ${pairs * each})`);
  }
  sink += got;
}

const names = (prefix, n) =>
  Array.from({ length: n }, (_, i) => `${prefix}/${String(i).padStart(8, '0')}`);

function service(sessions, locks, claims) {
  return new LockService({ sessions, locks, claims });
}

function open(svc, n, ttl) {
  const ids = [];
  for (let i = 0; i < n; i++) ids.push(svc.openSession(0, ttl).reply.session);
  return ids;
}

const now = () => process.hrtime.bigint();

// Every input carries the host's clock; the workloads that do not advance time send 0.
const TRY = { mode: 'exclusive', wait: 'none' };
const FOREVER = { mode: 'exclusive', wait: 'forever' };

// ---------------------------------------------------------------- workloads

function uncontended(n) {
  const svc = service(1, n, n);
  const [s] = open(svc, 1, FOREVER_TTL);
  const ns = names('lock', n);
  return {
    perIter: n,
    run(iters) {
      const t = now();
      let got = 0;
      for (let k = 0; k < iters; k++) {
        for (const name of ns) got += svc.acquire(0, s, name, TRY).reply.kind.length;
        for (const name of ns) got += svc.release(0, s, name).reply.kind.length;
      }
      const ns_ = Number(now() - t);
      granted(got, iters * n, 'granted'.length + 'released'.length);
      return ns_;
    },
  };
}

// The same workload through the typed fast path (acquireFast / releaseFast).
function uncontendedFast(n) {
  const svc = service(1, n, n);
  const [s] = open(svc, 1, FOREVER_TTL);
  const ns = names('lock', n);
  return {
    perIter: n,
    run(iters) {
      const t = now();
      let got = 0;
      for (let k = 0; k < iters; k++) {
        for (const name of ns) got += svc.acquireFast(0, s, name, 0, 0);
        for (const name of ns) got += svc.releaseFast(0, s, name);
      }
      const ns_ = Number(now() - t);
      granted(got, iters * n, CODES);
      if (svc.pendingEvents() !== 0) throw new Error('uncontended acquire/release left events');
      return ns_;
    },
  };
}

// The same workload through the id calls (acquireFastId / releaseFastId), each name
// interned once before the runs.
function uncontendedId(n) {
  const svc = service(1, n, n);
  const [s] = open(svc, 1, FOREVER_TTL);
  const ids = names('lock', n).map((name) => svc.internName(name));
  return {
    perIter: n,
    run(iters) {
      const t = now();
      let got = 0;
      for (let k = 0; k < iters; k++) {
        for (const id of ids) got += svc.acquireFastId(0, s, id, 0, 0);
        for (const id of ids) got += svc.releaseFastId(0, s, id);
      }
      const ns_ = Number(now() - t);
      granted(got, iters * n, CODES);
      if (svc.pendingEvents() !== 0) throw new Error('uncontended acquire/release left events');
      return ns_;
    },
  };
}

// The same workload through the small module (fencelock/lite: LiteService's acquire /
// release, names as strings).
function uncontendedLite(n) {
  const svc = new LiteService({ sessions: 1, locks: n, claims: n });
  svc.openSession(0, FOREVER_TTL);
  const s = svc.replyValue();
  const ns = names('lock', n);
  return {
    perIter: n,
    run(iters) {
      const t = now();
      let got = 0;
      for (let k = 0; k < iters; k++) {
        for (const name of ns) got += svc.acquire(0, s, name, 0, 0);
        for (const name of ns) got += svc.release(0, s, name);
      }
      const ns_ = Number(now() - t);
      granted(got, iters * n, CODES);
      if (svc.pendingEvents() !== 0) throw new Error('uncontended acquire/release left events');
      return ns_;
    },
  };
}

function handoff() {
  const BATCH = 1024;
  const svc = service(BATCH + 1, 1, BATCH + 1);
  const ss = open(svc, BATCH + 1, FOREVER_TTL);
  const lock = 'jobs/reindex';
  return {
    perIter: 1,
    run(iters) {
      let total = 0;
      let left = iters;
      while (left > 0) {
        const steps = Math.min(left, BATCH);
        for (let i = 0; i <= steps; i++) svc.acquire(0, ss[i], lock, FOREVER);
        const t = now();
        for (let i = 0; i < steps; i++) sink += svc.release(0, ss[i], lock).events.length;
        total += Number(now() - t);
        svc.release(0, ss[steps], lock);
        left -= steps;
      }
      return total;
    },
  };
}

function tickIdle(n) {
  const svc = service(n, 1, 1);
  open(svc, n, FOREVER_TTL);
  let tick = 0;
  return {
    perIter: 1,
    run(iters) {
      const t = now();
      for (let k = 0; k < iters; k++) sink += svc.tick(++tick).events.length;
      return Number(now() - t);
    },
  };
}

function keepAlive(n) {
  const svc = service(n, 1, 1);
  const ss = open(svc, n, 1000);
  let next = 0;
  let tick = 0;
  return {
    perIter: 1,
    run(iters) {
      const t = now();
      for (let k = 0; k < iters; k++) {
        sink += svc.keepAlive(tick, ss[next]).events.length;
        if (++next === n) {
          next = 0;
          svc.tick(++tick);
        }
      }
      return Number(now() - t);
    },
  };
}

// A postcard KeepAlive frame for session `s` at tick 0 (variant 1, varint now, varint
// session, None request).
function keepAliveFrame(s) {
  const bytes = [1, 0];
  let v = s;
  while (v >= 0x80) {
    bytes.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  bytes.push(v, 0);
  return Uint8Array.from(bytes);
}

function handleFrame() {
  const svc = service(1, 1, 1);
  const [s] = open(svc, 1, FOREVER_TTL);
  const frame = keepAliveFrame(s);
  // The reply frame of KeptAlive is variant 1 of Reply.
  const check = svc.handleFrame(frame);
  if (check.reply[0] !== 1) throw new Error('keep-alive frame did not renew the session');
  return {
    perIter: 1,
    run(iters) {
      const t = now();
      for (let k = 0; k < iters; k++) sink += svc.handleFrame(frame).events.length + 1;
      return Number(now() - t);
    },
  };
}

// As fencelock_bench::populated(n): n sessions, each holds its own lock and waits for the
// next one's: 4n entities.
function populated(n) {
  const svc = service(n, n, 2 * n);
  const ss = open(svc, n, FOREVER_TTL);
  const ns = names('snap', n);
  ss.forEach((s, i) => svc.acquire(0, s, ns[i], TRY));
  ss.forEach((s, i) => svc.acquire(0, s, ns[(i + 1) % n], { ...FOREVER, request: 1 }));
  return svc;
}

function snapshotEncode(n) {
  const svc = populated(n);
  return {
    perIter: 4 * n,
    run(iters) {
      const t = now();
      for (let k = 0; k < iters; k++) sink += svc.snapshot().length;
      return Number(now() - t);
    },
  };
}

function snapshotRestore(n) {
  const svc = populated(n);
  const bytes = svc.snapshot();
  const caps = { sessions: n, locks: n, claims: 2 * n };
  return {
    perIter: 4 * n,
    run(iters) {
      let total = 0;
      for (let k = 0; k < iters; k++) {
        const t = now();
        const back = LockService.restore(bytes, caps);
        total += Number(now() - t);
        sink += back.revision();
        back.free();
      }
      return total;
    },
  };
}

// The floor of one call into the wasm module: a getter that returns a number.
function callFloor() {
  const svc = service(1, 1, 1);
  return {
    perIter: 1,
    run(iters) {
      const t = now();
      for (let k = 0; k < iters; k++) sink += svc.now();
      return Number(now() - t);
    },
  };
}

// ---------------------------------------------------------------- harness

function measure(w) {
  // Calibrate: grow iterations until one run takes ~1/SAMPLES of the budget.
  let iters = 1;
  for (;;) {
    const ns = w.run(iters);
    if (ns > (SECS * 1e9) / SAMPLES / 4 || iters > 1e8) break;
    iters *= 2;
  }
  const target = (SECS * 1e9) / SAMPLES;
  const perRun = Math.max(1, Math.round((iters * target) / Math.max(1, w.run(iters))));
  const samples = [];
  for (let i = 0; i < SAMPLES; i++) samples.push(w.run(perRun) / (perRun * w.perIter));
  samples.sort((a, b) => a - b);
  return { ns_per_op: samples[Math.floor(SAMPLES / 2)], min: samples[0], max: samples[SAMPLES - 1] };
}

// id: this benchmark; rust: the criterion id of the native equivalent (group/function/param).
const benches = [
  ['call_floor/now', null, callFloor],
  ['uncontended/1024', 'uncontended/fencelock/1024', () => uncontended(1024)],
  ['uncontended_fast/1024', 'uncontended/fencelock/1024', () => uncontendedFast(1024)],
  ['uncontended_id/1024', 'uncontended/fencelock/1024', () => uncontendedId(1024)],
  ['uncontended_lite/1024', 'uncontended/fencelock/1024', () => uncontendedLite(1024)],
  ['handoff', 'handoff/fencelock', handoff],
  ['tick_idle/16384', 'tick_idle/fencelock/16384', () => tickIdle(16384)],
  ['keep_alive/16384', 'keep_alive/fencelock/16384', () => keepAlive(16384)],
  ['handle_frame/keep_alive', 'frame/handle_frame/keep_alive', handleFrame],
  ['snapshot_encode/16384', 'snapshot/encode/16384', () => snapshotEncode(4096)],
  ['snapshot_restore/16384', 'snapshot/restore/16384', () => snapshotRestore(4096)],
];

const only = process.env.BENCH_JS_FILTER;
const results = [];
for (const [id, rust, make] of benches) {
  if (only && !id.includes(only)) continue;
  if (id.startsWith('uncontended_lite') && !LiteService) continue;
  const r = measure(make());
  results.push({ id, rust, ...r });
  process.stderr.write(`wasm ${id}: ${r.ns_per_op.toFixed(1)} ns/op\n`);
}
console.log(JSON.stringify({ node: process.version, pkg: pkgDir, secs: SECS, sink: sink > 0, results }, null, 2));
