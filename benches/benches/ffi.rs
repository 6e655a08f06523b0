//! The same operations as `core.rs`, called through the C ABI (`fencelock-ffi`'s extern
//! "C" functions, linked as an rlib and called through opaque function pointers — the
//! code a C program runs, minus the PLT jump of a shared library). A C host reads the
//! reply each input writes and drains the events after it, so each step here does what a
//! C host does: the call (its `now` and reply out-parameter included), then — when the
//! reply's `pending` says events are queued — one `fencelock_service_drain_events` call
//! into an array (after a tick, which has no reply, always that call). The driver is
//! `fencelock_bench::cabi`, which `bench-ops cabi_uncontended` runs under callgrind too.
//!
//! Group `ffi`; the report divides each by its native counterpart in `core.rs`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fencelock::Input;
use fencelock_bench::cabi::{CService as C, CabiUncontended, WAIT_FOREVER};
use ffi::{fencelock_result, fencelock_service_handle_frame, FENCELOCK_MAX_FRAME_LEN};

const FOREVER_TTL: u64 = fencelock_bench::FOREVER_TTL;

fn ffi(c: &mut Criterion) {
    let mut g = c.benchmark_group("ffi");

    // uncontended: acquire all n, release all n (as core.rs)
    {
        let n = 1usize << 10;
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("uncontended", n), &n, |b, &n| {
            let mut w = CabiUncontended::new(n);
            b.iter(|| w.run());
        });
    }

    // handoff: release by the holder grants the head waiter (as core.rs, batches of 1024)
    g.throughput(Throughput::Elements(1));
    g.bench_function("handoff", |b| {
        const BATCH: usize = 1024;
        let mut svc = C::new(BATCH as u32 + 1, 1, BATCH as u32 + 1);
        let sessions = svc.open(BATCH + 1, FOREVER_TTL);
        let lock = "jobs/reindex";
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters as usize;
            while left > 0 {
                let steps = left.min(BATCH);
                for s in &sessions[..=steps] {
                    assert_eq!(svc.acquire(0, *s, lock, WAIT_FOREVER), fencelock_result::Ok);
                }
                let t = Instant::now();
                for s in &sessions[..steps] {
                    black_box(svc.release(0, *s, lock));
                }
                total += t.elapsed();
                assert_eq!(svc.release(0, sessions[steps], lock), fencelock_result::Ok);
                left -= steps;
            }
            total
        });
    });

    // tick with nothing due, 16k live sessions
    g.bench_function(BenchmarkId::new("tick_idle", 1usize << 14), |b| {
        let mut svc = C::new(1 << 14, 1, 1);
        svc.open(1 << 14, FOREVER_TTL);
        let mut now = 0;
        b.iter(|| {
            now += 1;
            black_box(svc.tick(now));
        });
    });

    // keep-alive round-robin over 16k sessions, a tick per round (as core.rs)
    g.bench_function(BenchmarkId::new("keep_alive", 1usize << 14), |b| {
        let n = 1usize << 14;
        let mut svc = C::new(n as u32, 1, 1);
        let sessions = svc.open(n, 1000);
        let (mut next, mut now) = (0, 0);
        b.iter(|| {
            black_box(svc.keep_alive(now, sessions[next]));
            next += 1;
            if next == n {
                next = 0;
                now += 1;
                svc.tick(now);
            }
        });
    });

    // the frame entry point: keep-alive frame in, reply frame out (it queues no events)
    g.bench_function(BenchmarkId::new("handle_frame", "keep_alive"), |b| {
        let mut svc = C::new(1, 1, 1);
        let s = svc.open(1, FOREVER_TTL)[0];
        let mut frame = [0u8; FENCELOCK_MAX_FRAME_LEN];
        let n = Input::KeepAlive {
            now: fencelock::Tick(0),
            session: fencelock::SessionId(s),
            request: None,
        }
        .to_frame(&mut frame)
        .expect("fits");
        let mut reply_frame = [0u8; FENCELOCK_MAX_FRAME_LEN];
        let mut reply_len = 0usize;
        b.iter(|| {
            // SAFETY: live handle; buffers valid for their lengths; writable reply.
            black_box(unsafe {
                fencelock_service_handle_frame(
                    svc.svc,
                    frame.as_ptr(),
                    n,
                    svc.reply_out(),
                    reply_frame.as_mut_ptr(),
                    reply_frame.len(),
                    &mut reply_len,
                )
            });
            black_box(reply_len);
        });
    });
    g.finish();
}

criterion_group!(benches, ffi);
criterion_main!(benches);
