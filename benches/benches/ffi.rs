//! The same operations as `core.rs`, called through the C ABI (`fencelock-ffi`'s extern
//! "C" functions, linked as an rlib — the code a C program runs, minus the PLT jump of a
//! shared library). A C host reads the reply each input writes and drains the events
//! after it, so each step here does what a C host does: the call (its `now` and reply
//! out-parameter included), then — when the reply's `pending` says events are queued —
//! one `fencelock_service_drain_events` call into an array (after a tick, which has no
//! reply, always that call).
//!
//! Group `ffi`; the report divides each by its native counterpart in `core.rs`.

use std::hint::black_box;
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fencelock::Input;
use ffi::{
    fencelock_capacity, fencelock_config, fencelock_output, fencelock_reply, fencelock_reply_kind,
    fencelock_result, fencelock_service, fencelock_service_acquire, fencelock_service_drain_events,
    fencelock_service_free, fencelock_service_handle_frame, fencelock_service_keep_alive,
    fencelock_service_new, fencelock_service_open_session, fencelock_service_release,
    fencelock_service_tick, FENCELOCK_MAX_FRAME_LEN,
};

const MODE_EXCLUSIVE: u32 = 1;
const WAIT_NONE: u32 = 1;
const WAIT_FOREVER: u32 = 2;

/// A service handle made and freed through the C ABI.
struct C {
    svc: *mut fencelock_service,
    out: [MaybeUninit<fencelock_output>; EVENT_SLOTS],
    reply: MaybeUninit<fencelock_reply>,
}

/// The host's event array; more than any input here emits (a hand-off emits one).
const EVENT_SLOTS: usize = 16;

impl C {
    fn new(sessions: u32, locks: u32, claims: u32) -> C {
        let config = fencelock_config {
            capacity: fencelock_capacity {
                sessions,
                locks,
                claims,
            },
            lock_delay: 0,
            max_name_len: 64,
            // No watches here: the ring bound and the event size stay as for plain locks.
            max_watchers: 0,
        };
        let mut svc = std::ptr::null_mut();
        // SAFETY: valid config and out-pointer.
        let r = unsafe { fencelock_service_new(&config, &mut svc) };
        assert_eq!(r, fencelock_result::Ok);
        C {
            svc,
            out: [MaybeUninit::uninit(); EVENT_SLOTS],
            reply: MaybeUninit::uninit(),
        }
    }

    /// Drains every queued event in one call, as a C host does after a tick.
    #[inline(always)]
    fn drain(&mut self) {
        let mut n = 0usize;
        // SAFETY: live handle; the array is valid for EVENT_SLOTS (uninitialised) outputs.
        let r = unsafe {
            fencelock_service_drain_events(
                self.svc,
                self.out.as_mut_ptr().cast(),
                EVENT_SLOTS,
                &mut n,
            )
        };
        assert_eq!(r, fencelock_result::Ok);
        for o in &self.out[..n] {
            // SAFETY: drain_events wrote the first n.
            black_box(unsafe { o.assume_init_ref() }.token);
        }
    }

    /// After an input: drains only when its reply says events are queued, or when it
    /// was refused (a zeroed reply, kind NONE: its advance may have queued some), as a
    /// C host does.
    #[inline(always)]
    fn drain_after_input(&mut self) {
        // SAFETY: every input call writes the reply before it returns.
        let reply = unsafe { self.reply.assume_init_ref() };
        if reply.pending > 0 || reply.kind == fencelock_reply_kind::None {
            self.drain();
        }
    }

    /// The reply the last input wrote, read as a C host reads it.
    #[inline(always)]
    fn read_reply(&self) {
        // SAFETY: every input call writes the reply before it returns (a zeroed one when
        // refused), and each call below is an input.
        black_box(unsafe { self.reply.assume_init_ref() }.token);
    }

    fn open(&mut self, n: usize, ttl: u64) -> Vec<u64> {
        (0..n)
            .map(|_| {
                // SAFETY: live handle, writable reply.
                let r = unsafe {
                    fencelock_service_open_session(self.svc, 0, ttl, self.reply.as_mut_ptr())
                };
                assert_eq!(r, fencelock_result::Ok);
                self.drain_after_input();
                // SAFETY: written by the successful call above.
                unsafe { self.reply.assume_init_ref() }.session
            })
            .collect()
    }

    #[inline(always)]
    fn acquire(&mut self, now: u64, s: u64, name: &str, wait: u32) -> fencelock_result {
        // SAFETY: live handle; name valid for its length; writable reply.
        let r = unsafe {
            fencelock_service_acquire(
                self.svc,
                now,
                s,
                name.as_ptr(),
                name.len(),
                MODE_EXCLUSIVE,
                wait,
                0,
                0,
                self.reply.as_mut_ptr(),
            )
        };
        self.read_reply();
        self.drain_after_input();
        r
    }

    #[inline(always)]
    fn release(&mut self, now: u64, s: u64, name: &str) -> fencelock_result {
        // SAFETY: live handle; name valid for its length; writable reply.
        let r = unsafe {
            fencelock_service_release(
                self.svc,
                now,
                s,
                name.as_ptr(),
                name.len(),
                0,
                self.reply.as_mut_ptr(),
            )
        };
        self.read_reply();
        self.drain_after_input();
        r
    }

    #[inline(always)]
    fn keep_alive(&mut self, now: u64, s: u64) -> fencelock_result {
        // SAFETY: live handle; writable reply.
        let r =
            unsafe { fencelock_service_keep_alive(self.svc, now, s, 0, self.reply.as_mut_ptr()) };
        self.read_reply();
        self.drain_after_input();
        r
    }
}

impl Drop for C {
    fn drop(&mut self) {
        // SAFETY: live handle, freed once.
        unsafe { fencelock_service_free(self.svc) };
    }
}

const FOREVER_TTL: u64 = fencelock_bench::FOREVER_TTL;

fn ffi(c: &mut Criterion) {
    let mut g = c.benchmark_group("ffi");

    // uncontended: acquire all n, release all n (as core.rs)
    {
        let n = 1usize << 10;
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("uncontended", n), &n, |b, &n| {
            let mut svc = C::new(1, n as u32, n as u32);
            let s = svc.open(1, FOREVER_TTL)[0];
            let names = fencelock_bench::names("lock", n);
            b.iter(|| {
                for name in &names {
                    black_box(svc.acquire(0, s, name, WAIT_NONE));
                }
                for name in &names {
                    black_box(svc.release(0, s, name));
                }
            });
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
            // SAFETY: live handle.
            black_box(unsafe { fencelock_service_tick(svc.svc, now) });
            svc.drain();
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
                // SAFETY: live handle.
                unsafe { fencelock_service_tick(svc.svc, now) };
                svc.drain();
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
                    svc.reply.as_mut_ptr(),
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
