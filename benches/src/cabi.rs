//! The core through its C ABI (`fencelock-ffi`'s `extern "C"` functions), driven the way
//! a C host drives it: each input with its reply read from the out-parameter, then — when
//! the reply's `pending` says events are queued, or the input was refused — one
//! `fencelock_service_drain_events` call into an array (after a tick, which has no reply,
//! always that call). Shared by the criterion bench (`benches/ffi.rs`) and the callgrind
//! driver (`bench-ops cabi_uncontended`), so both measure the same code.
//!
//! The library is linked as an rlib with LTO, where the compiler could inline an extern
//! function into its caller, which a C program's call into the static library never gets.
//! So every call goes through a function pointer the optimiser cannot see through
//! (`black_box`): each is a real call, as from C (minus a shared library's PLT jump).

use std::hint::black_box;
use std::mem::MaybeUninit;

use ffi::{
    fencelock_capacity, fencelock_config, fencelock_output, fencelock_reply, fencelock_reply_kind,
    fencelock_result, fencelock_service, fencelock_service_acquire, fencelock_service_drain_events,
    fencelock_service_free, fencelock_service_keep_alive, fencelock_service_new,
    fencelock_service_open_session, fencelock_service_release, fencelock_service_tick,
};

/// `FENCELOCK_MODE_EXCLUSIVE`.
pub const MODE_EXCLUSIVE: u32 = 1;
/// `FENCELOCK_WAIT_NONE`.
pub const WAIT_NONE: u32 = 1;
/// `FENCELOCK_WAIT_FOREVER`.
pub const WAIT_FOREVER: u32 = 2;

/// The host's event array; more than any input here emits (a hand-off emits one).
pub const EVENT_SLOTS: usize = 16;

type AcquireFn = unsafe extern "C" fn(
    *mut fencelock_service,
    u64,
    u64,
    *const u8,
    usize,
    u32,
    u32,
    u64,
    u64,
    *mut fencelock_reply,
) -> fencelock_result;
type ReleaseFn = unsafe extern "C" fn(
    *mut fencelock_service,
    u64,
    u64,
    *const u8,
    usize,
    u64,
    *mut fencelock_reply,
) -> fencelock_result;
type KeepAliveFn = unsafe extern "C" fn(
    *mut fencelock_service,
    u64,
    u64,
    u64,
    *mut fencelock_reply,
) -> fencelock_result;
type TickFn = unsafe extern "C" fn(*mut fencelock_service, u64) -> fencelock_result;
type DrainFn = unsafe extern "C" fn(
    *mut fencelock_service,
    *mut fencelock_output,
    usize,
    *mut usize,
) -> fencelock_result;

/// The entry points, as opaque function pointers (see the module docs).
struct Abi {
    acquire: AcquireFn,
    release: ReleaseFn,
    keep_alive: KeepAliveFn,
    tick: TickFn,
    drain: DrainFn,
}

impl Abi {
    fn new() -> Abi {
        black_box(Abi {
            acquire: fencelock_service_acquire,
            release: fencelock_service_release,
            keep_alive: fencelock_service_keep_alive,
            tick: fencelock_service_tick,
            drain: fencelock_service_drain_events,
        })
    }
}

/// A service handle made and freed through the C ABI, with the host's reply and event
/// array.
pub struct CService {
    /// The handle.
    pub svc: *mut fencelock_service,
    out: [MaybeUninit<fencelock_output>; EVENT_SLOTS],
    reply: MaybeUninit<fencelock_reply>,
    abi: Abi,
    /// Events drained so far (what the host has read).
    pub drained: u64,
}

impl CService {
    /// A service of the given capacity (no lock delay, names up to 64 bytes, no watches).
    pub fn new(sessions: u32, locks: u32, claims: u32) -> CService {
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
        CService {
            svc,
            out: [MaybeUninit::uninit(); EVENT_SLOTS],
            reply: MaybeUninit::uninit(),
            abi: Abi::new(),
            drained: 0,
        }
    }

    /// Drains every queued event in one call, as a C host does after a tick.
    #[inline(always)]
    pub fn drain(&mut self) {
        let mut n = 0usize;
        // SAFETY: live handle; the array is valid for EVENT_SLOTS (uninitialised) outputs.
        let r = unsafe {
            (self.abi.drain)(self.svc, self.out.as_mut_ptr().cast(), EVENT_SLOTS, &mut n)
        };
        assert_eq!(r, fencelock_result::Ok);
        for o in &self.out[..n] {
            // SAFETY: drain_events wrote the first n.
            black_box(unsafe { o.assume_init_ref() }.token);
        }
        self.drained += n as u64;
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

    /// The reply the last input wrote.
    pub fn reply(&self) -> &fencelock_reply {
        // SAFETY: only called after an input, which writes it.
        unsafe { self.reply.assume_init_ref() }
    }

    /// Where the next input writes its reply (for calls made directly on [`svc`](Self::svc)).
    pub fn reply_out(&mut self) -> *mut fencelock_reply {
        self.reply.as_mut_ptr()
    }

    /// Opens `n` sessions with `ttl` at time 0. Not measured.
    pub fn open(&mut self, n: usize, ttl: u64) -> Vec<u64> {
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

    /// Exclusive acquire of `name` by session `s`, then the reply read and the events
    /// drained when there are any.
    #[inline(always)]
    pub fn acquire(&mut self, now: u64, s: u64, name: &str, wait: u32) -> fencelock_result {
        // SAFETY: live handle; name valid for its length; writable reply.
        let r = unsafe {
            (self.abi.acquire)(
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

    /// Release of `name` by session `s`, then the reply read and the events drained.
    #[inline(always)]
    pub fn release(&mut self, now: u64, s: u64, name: &str) -> fencelock_result {
        // SAFETY: live handle; name valid for its length; writable reply.
        let r = unsafe {
            (self.abi.release)(
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

    /// Keep-alive of session `s`, then the reply read and the events drained.
    #[inline(always)]
    pub fn keep_alive(&mut self, now: u64, s: u64) -> fencelock_result {
        // SAFETY: live handle; writable reply.
        let r = unsafe { (self.abi.keep_alive)(self.svc, now, s, 0, self.reply.as_mut_ptr()) };
        self.read_reply();
        self.drain_after_input();
        r
    }

    /// A tick to `now`, then every event drained.
    #[inline(always)]
    pub fn tick(&mut self, now: u64) -> fencelock_result {
        // SAFETY: live handle.
        let r = unsafe { (self.abi.tick)(self.svc, now) };
        self.drain();
        r
    }
}

impl Drop for CService {
    fn drop(&mut self) {
        // SAFETY: live handle, freed once.
        unsafe { fencelock_service_free(self.svc) };
    }
}

/// [`Uncontended`](crate::Uncontended) through the C ABI: one session acquires `n`
/// distinct free locks (exclusive, try-lock), then releases them, each call's reply read
/// and its events drained when it has any (an uncontended acquire or release queues none:
/// its answer is the reply).
pub struct CabiUncontended {
    /// The service.
    pub c: CService,
    session: u64,
    names: Vec<String>,
}

impl CabiUncontended {
    /// Tables sized for exactly `n` locks.
    pub fn new(n: usize) -> Self {
        let mut c = CService::new(1, n as u32, n as u32);
        let session = c.open(1, crate::FOREVER_TTL)[0];
        CabiUncontended {
            c,
            session,
            names: crate::names("lock", n),
        }
    }

    /// Acquires then releases every lock once (`n` acquire + release pairs).
    #[inline(never)]
    pub fn run(&mut self) {
        for name in &self.names {
            let r = self.c.acquire(0, self.session, name, WAIT_NONE);
            debug_assert_eq!(r, fencelock_result::Ok);
            black_box(r);
        }
        for name in &self.names {
            let r = self.c.release(0, self.session, name);
            debug_assert_eq!(r, fencelock_result::Ok);
            black_box(r);
        }
    }

    /// The session that takes the locks.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// The lock names.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}
