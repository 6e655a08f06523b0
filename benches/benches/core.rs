//! The core's hot paths, side by side with std baselines. Run through `scripts/bench.sh`
//! (which writes BENCHMARKS.md); group and function names are what the report reads.
//!
//! Every workload comes from `fencelock_bench` (the crate's lib), where unit tests check
//! that it does what its name says. Untimed setup uses `iter_custom`, so only the
//! operation itself is on the clock.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fencelock::{Input, LockService, Output};
use fencelock_bench::*;

/// Session counts for the scaling curves (64k is the largest the tables allow to be
/// indexed at a useful load on this machine's budget; 2^16 rows is fine for the core).
const SCALE: [usize; 3] = [1 << 10, 1 << 14, 1 << 16];

/// Runs `run(b)` on batches of at most `batch` steps, each after an untimed `prepare(b)`
/// and before an untimed `finish()`, and returns the time spent in `run` only.
fn batched<W>(
    w: &mut W,
    iters: u64,
    batch: usize,
    prepare: impl Fn(&mut W, usize),
    run: impl Fn(&mut W, usize),
    finish: impl Fn(&mut W),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters as usize;
    while left > 0 {
        let b = left.min(batch);
        prepare(w, b);
        let t = Instant::now();
        run(w, b);
        total += t.elapsed();
        finish(w);
        left -= b;
    }
    total
}

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended");
    for n in [1usize << 4, 1 << 10, 1 << 14] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("fencelock", n), &n, |b, &n| {
            let mut w = Uncontended::new(n);
            b.iter(|| w.run());
        });
        g.bench_with_input(BenchmarkId::new("hashmap_string", n), &n, |b, &n| {
            let mut w = MapOwned::new(n);
            b.iter(|| w.run());
        });
        g.bench_with_input(BenchmarkId::new("hashmap_str", n), &n, |b, &n| {
            let names = names("lock", n);
            let mut w = MapBorrowed::new(&names);
            b.iter(|| w.run());
        });
    }
    g.finish();
}

const HANDOFF_BATCH: usize = 1024;

fn handoff(c: &mut Criterion) {
    let mut g = c.benchmark_group("handoff");
    g.throughput(Throughput::Elements(1));
    g.bench_function("fencelock", |b| {
        let mut w = Handoff::new(HANDOFF_BATCH);
        b.iter_custom(|iters| {
            batched(
                &mut w,
                iters,
                HANDOFF_BATCH,
                |w, n| w.prepare(n),
                |w, n| w.run(n),
                |w| w.finish(),
            )
        });
    });
    g.bench_function("hashmap_vecdeque", |b| {
        let mut w = MapHandoff::new(HANDOFF_BATCH);
        b.iter_custom(|iters| {
            batched(
                &mut w,
                iters,
                HANDOFF_BATCH,
                |w, n| w.prepare(n),
                |w, n| w.run(n),
                |_| {},
            )
        });
    });
    g.finish();
}

fn tick_idle(c: &mut Criterion) {
    let mut g = c.benchmark_group("tick_idle");
    g.throughput(Throughput::Elements(1));
    for n in SCALE {
        g.bench_with_input(BenchmarkId::new("fencelock", n), &n, |b, &n| {
            let mut w = TickIdle::new(n);
            b.iter(|| w.run(1));
        });
    }
    g.finish();
}

/// Ticks per timed batch in the expiry bench (amortises the timer).
const EXPIRY_ROUNDS: usize = 16;

fn expiry(c: &mut Criterion) {
    let mut g = c.benchmark_group("expiry");
    for k in [1usize, 64] {
        // One element = one expired session.
        g.throughput(Throughput::Elements((k * EXPIRY_ROUNDS) as u64));
        for n in SCALE {
            g.bench_with_input(
                BenchmarkId::new(format!("fencelock_k{k}"), n),
                &(n, k),
                |b, &(n, k)| {
                    let mut w = Expiry::new(n, k, EXPIRY_ROUNDS);
                    b.iter_custom(|iters| {
                        batched(&mut w, iters, 1, |w, _| w.prepare(), |w, _| w.run(), |_| {})
                    });
                },
            );
        }
    }
    g.finish();
}

fn keep_alive(c: &mut Criterion) {
    let mut g = c.benchmark_group("keep_alive");
    g.throughput(Throughput::Elements(1));
    for n in SCALE {
        g.bench_with_input(BenchmarkId::new("fencelock", n), &n, |b, &n| {
            let mut w = KeepAlive::new(n);
            b.iter(|| w.run(1));
        });
    }
    // In a scattered order (information beside the goal's round-robin): at 1k and 64k.
    for n in [1 << 10, 1 << 16] {
        g.bench_with_input(BenchmarkId::new("fencelock_shuffled", n), &n, |b, &n| {
            let mut w = KeepAlive::shuffled(n);
            b.iter(|| w.run(1));
        });
    }
    g.finish();
}

/// Locks released per timed batch in the shared-run bench (amortises the timer).
const SHARED_LOCKS: usize = 64;

fn shared_run(c: &mut Criterion) {
    let mut g = c.benchmark_group("shared_run");
    for r in [1usize, 16, 256] {
        // One element = one reader granted.
        g.throughput(Throughput::Elements((SHARED_LOCKS * r) as u64));
        g.bench_with_input(BenchmarkId::new("fencelock", r), &r, |b, &r| {
            let mut w = SharedRun::new(SHARED_LOCKS, r);
            b.iter_custom(|iters| {
                batched(
                    &mut w,
                    iters,
                    1,
                    |w, _| w.prepare(),
                    |w, _| w.run(),
                    |w| w.finish(),
                )
            });
        });
    }
    g.finish();
}

fn snapshot(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot");
    for n in [1usize << 8, 1 << 12, 1 << 14] {
        let svc = populated(n);
        let bytes = svc.snapshot_vec();
        let ents = entities(svc.usage());
        g.throughput(Throughput::Elements(ents as u64));
        g.bench_with_input(BenchmarkId::new("encode", ents), &svc, |b, svc| {
            let mut buf = vec![0u8; bytes.len()];
            b.iter(|| black_box(svc.snapshot(&mut buf)).ok());
        });
        g.bench_with_input(BenchmarkId::new("restore", ents), &bytes, |b, bytes| {
            let cap = svc.capacity();
            b.iter_batched(
                || storage_like(cap),
                // Returned, so criterion frees the restored tables outside the timing (as
                // the wasm benchmark frees its restored service outside its own).
                |st| LockService::restore(st, black_box(bytes)).expect("its own snapshot"),
                criterion::BatchSize::LargeInput,
            );
        });
    }
    g.finish();
}

fn frames(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame");
    g.throughput(Throughput::Elements(1));
    for (label, frame) in input_frames() {
        g.bench_with_input(BenchmarkId::new("decode", label), &frame, |b, f| {
            b.iter(|| black_box(Input::from_frame(black_box(f))).ok());
        });
    }
    // Encoding an event (what a host does for each event it routes).
    let granted = Output::Granted {
        session: fencelock::SessionId(4242),
        lock: fencelock::LockName::new("jobs/reindex-000042").expect("valid"),
        mode: fencelock::Mode::Exclusive,
        token: fencelock::Token(1_000_001),
    };
    g.bench_function(BenchmarkId::new("encode", "granted"), |b| {
        let mut buf = [0u8; fencelock::MAX_FRAME_LEN];
        b.iter(|| black_box(black_box(&granted).to_frame(&mut buf)).ok());
    });
    // Encoding a reply (what a host does for each caller it answers).
    let reply = fencelock::Reply::Granted {
        mode: fencelock::Mode::Exclusive,
        token: fencelock::Token(1_000_001),
    };
    g.bench_function(BenchmarkId::new("encode", "reply_granted"), |b| {
        let mut buf = [0u8; fencelock::MAX_FRAME_LEN];
        b.iter(|| black_box(black_box(&reply).to_frame(&mut buf)).ok());
    });
    // The frame path end to end vs the typed call: keep-alive of one session.
    g.bench_function(BenchmarkId::new("handle_frame", "keep_alive"), |b| {
        let mut svc = service(1, 1, 1);
        let s = open(&mut svc, 1, FOREVER_TTL)[0];
        let mut buf = [0u8; fencelock::MAX_FRAME_LEN];
        // The same now every time: the advance is a no-op, as in the typed call below.
        let n = Input::KeepAlive {
            now: svc.now(),
            session: s,
            request: None,
        }
        .to_frame(&mut buf)
        .expect("fits");
        b.iter(|| black_box(svc.handle_frame(black_box(&buf[..n]), &mut sink)).ok());
    });
    g.bench_function(BenchmarkId::new("typed", "keep_alive"), |b| {
        let mut svc = service(1, 1, 1);
        let s = open(&mut svc, 1, FOREVER_TTL)[0];
        b.iter(|| black_box(svc.keep_alive(svc.now(), black_box(s), None, &mut sink)).ok());
    });
    g.finish();
}

/// What one `Instant::now()` + `elapsed()` pair costs: it is inside every timed batch of
/// the `iter_custom` benches (once per batch), which matters for `expiry` with k = 1.
fn timer(c: &mut Criterion) {
    let mut g = c.benchmark_group("overhead");
    g.bench_function("instant_pair", |b| {
        b.iter(|| {
            let t = Instant::now();
            black_box(t.elapsed())
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    timer,
    uncontended,
    handoff,
    tick_idle,
    expiry,
    keep_alive,
    shared_run,
    snapshot,
    frames
);
criterion_main!(benches);
