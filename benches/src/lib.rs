//! Workloads shared by the criterion benches (`benches/core.rs`), the instruction-count
//! driver (`src/bin/bench-ops.rs`, run under callgrind) and the memory figures
//! (`src/bin/bench-memory.rs`). Each workload has a *prepare* step (not measured) and a
//! *run* step (measured), and each core workload has a `std` baseline doing the least a
//! lock table must do for the same operation.
//!
//! Nothing here is timed: the benches time it. The unit tests check that each workload
//! does what its name says (a handoff really hands the lock over, an expiry really
//! expires), so a benchmark cannot silently measure a refused input.

pub mod cabi;

use std::collections::{HashMap, VecDeque};
use std::hint::black_box;

use fencelock::storage::{Bucket, ClaimRow, LockRow, SessionRow, TaggedBucket};
use fencelock::{
    Capacity, Config, Input, LockName, LockService, Mode, Output, Reply, SessionId, Tick, Usage,
    VecStorage, Wait,
};

/// A service with heap tables of the given capacities and the default config.
pub fn service(sessions: usize, locks: usize, claims: usize) -> LockService<VecStorage> {
    LockService::new(VecStorage::new(sessions, locks, claims), Config::default())
        .expect("default config is valid")
}

/// `n` distinct lock names of 13 bytes (`lock/00000042`).
pub fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}/{i:08}")).collect()
}

/// A sink that keeps every event alive just long enough for the optimiser not to drop it.
#[inline(always)]
pub fn sink(o: Output) {
    black_box(o);
}

/// Ticks far enough away that no benchmark ever reaches them.
pub const FOREVER_TTL: u64 = 1 << 40;

/// Opens `n` sessions with `ttl`, at the service's current time.
pub fn open(svc: &mut LockService<VecStorage>, n: usize, ttl: u64) -> Vec<SessionId> {
    (0..n)
        .map(|_| {
            svc.open_session(svc.now(), ttl, &mut sink)
                .ok()
                .and_then(|r| r.opened())
                .expect("capacity sized")
        })
        .collect()
}

// ------------------------------------------------------------------ uncontended

/// One session acquires `n` distinct free locks (exclusive, try-lock), then releases
/// them: per lock one `Granted` and one `Released`, and the lock entry is created and
/// evicted each time.
pub struct Uncontended {
    svc: LockService<VecStorage>,
    session: SessionId,
    names: Vec<String>,
}

impl Uncontended {
    /// Tables sized for exactly `n` locks.
    pub fn new(n: usize) -> Self {
        let mut svc = service(1, n, n);
        let session = open(&mut svc, 1, FOREVER_TTL)[0];
        Uncontended {
            svc,
            session,
            names: names("lock", n),
        }
    }

    /// Acquires then releases every lock once (`n` acquire + release pairs).
    #[inline(never)]
    pub fn run(&mut self) {
        for name in &self.names {
            let r = self.svc.acquire(
                self.svc.now(),
                self.session,
                name,
                Mode::Exclusive,
                Wait::None,
                None,
                &mut sink,
            );
            debug_assert!(r.is_ok());
            black_box(r).ok();
        }
        for name in &self.names {
            let r = self
                .svc
                .release(self.svc.now(), self.session, name, None, &mut sink);
            debug_assert!(r.is_ok());
            black_box(r).ok();
        }
    }
}

/// Baseline: `HashMap<String, (session, token)>` insert then remove of the same names.
/// The map owns its keys, as a lock table fed names from the network must (so each
/// insert allocates the key, like the core copies the name into its row).
pub struct MapOwned {
    map: HashMap<String, (u64, u64)>,
    names: Vec<String>,
    token: u64,
}

impl MapOwned {
    /// Capacity reserved for `n` keys up front (as the core's tables are).
    pub fn new(n: usize) -> Self {
        MapOwned {
            map: HashMap::with_capacity(n),
            names: names("lock", n),
            token: 0,
        }
    }

    /// Inserts every name, then removes every name.
    #[inline(never)]
    pub fn run(&mut self) {
        for name in &self.names {
            self.token += 1;
            let prev = self
                .map
                .insert(black_box(name.as_str()).to_owned(), (1, self.token));
            black_box(prev);
        }
        for name in &self.names {
            black_box(self.map.remove(black_box(name.as_str())));
        }
    }
}

/// Stricter baseline: `HashMap<&str, (session, token)>` with borrowed keys (no key
/// allocation at all; a lock table cannot really do this, since the name's owner is a
/// network buffer, but it is the absolute floor of one hash insert + remove).
pub struct MapBorrowed<'a> {
    map: HashMap<&'a str, (u64, u64)>,
    names: &'a [String],
    token: u64,
}

impl<'a> MapBorrowed<'a> {
    /// Capacity reserved for all of `names`.
    pub fn new(names: &'a [String]) -> Self {
        MapBorrowed {
            map: HashMap::with_capacity(names.len()),
            names,
            token: 0,
        }
    }

    /// Inserts every name, then removes every name.
    #[inline(never)]
    pub fn run(&mut self) {
        for name in self.names {
            self.token += 1;
            black_box(self.map.insert(black_box(name.as_str()), (1, self.token)));
        }
        for name in self.names {
            black_box(self.map.remove(black_box(name.as_str())));
        }
    }
}

// ------------------------------------------------------------------ contended handoff

/// One lock, a holder and a FIFO queue of exclusive waiters. Each step is one `release`
/// by the current holder, which emits `Released` and `Granted` to the next waiter.
pub struct Handoff {
    svc: LockService<VecStorage>,
    sessions: Vec<SessionId>,
    lock: String,
    /// Index of the current holder.
    holder: usize,
    /// Index of the last queued waiter.
    last: usize,
}

impl Handoff {
    /// Room for a queue of up to `batch` waiters (plus `waiting` always-queued ones
    /// behind them are not needed: the queue length does not enter the cost).
    pub fn new(batch: usize) -> Self {
        let mut svc = service(batch + 1, 1, batch + 1);
        let sessions = open(&mut svc, batch + 1, FOREVER_TTL);
        Handoff {
            svc,
            sessions,
            lock: "jobs/reindex".to_owned(),
            holder: 0,
            last: 0,
        }
    }

    /// The largest `steps` that [`prepare`](Self::prepare) accepts.
    pub fn batch(&self) -> usize {
        self.sessions.len() - 1
    }

    /// Session 0 holds the lock and sessions `1..=steps` queue for it. Not measured.
    pub fn prepare(&mut self, steps: usize) {
        assert!(steps <= self.batch());
        let lock = self.lock.as_str();
        for s in &self.sessions[..=steps] {
            self.svc
                .acquire(
                    self.svc.now(),
                    *s,
                    lock,
                    Mode::Exclusive,
                    Wait::Forever,
                    None,
                    &mut sink,
                )
                .expect("capacity sized");
        }
        self.holder = 0;
        self.last = steps;
    }

    /// `steps` handoffs: the holder releases, the head waiter is granted.
    #[inline(never)]
    pub fn run(&mut self, steps: usize) {
        let lock = self.lock.as_str();
        for _ in 0..steps {
            let r = self.svc.release(
                self.svc.now(),
                self.sessions[self.holder],
                lock,
                None,
                &mut sink,
            );
            debug_assert!(r.is_ok());
            black_box(r).ok();
            self.holder += 1;
        }
    }

    /// The last holder releases; the lock entry is evicted. Not measured.
    pub fn finish(&mut self) {
        debug_assert_eq!(self.holder, self.last);
        self.svc
            .release(
                self.svc.now(),
                self.sessions[self.holder],
                &self.lock,
                None,
                &mut sink,
            )
            .expect("holder");
    }
}

/// Baseline handoff: `HashMap<String, Entry>` where the entry has the holder, the last
/// token and a `VecDeque` of waiters. A step looks the lock up by name, checks the
/// releaser holds it, pops the next waiter and gives it a fresh token — the least any
/// FIFO lock table must do.
pub struct MapHandoff {
    map: HashMap<String, HandoffEntry>,
    lock: String,
    holder: u64,
    revision: u64,
}

/// One lock in [`MapHandoff`].
pub struct HandoffEntry {
    holder: u64,
    token: u64,
    queue: VecDeque<u64>,
}

impl MapHandoff {
    /// Room for `batch` waiters.
    pub fn new(batch: usize) -> Self {
        MapHandoff {
            map: HashMap::with_capacity(1),
            lock: "jobs/reindex".to_owned(),
            holder: 0,
            revision: 0,
        }
        .with_queue(batch)
    }

    fn with_queue(mut self, batch: usize) -> Self {
        self.map.insert(
            self.lock.clone(),
            HandoffEntry {
                holder: 0,
                token: 0,
                queue: VecDeque::with_capacity(batch),
            },
        );
        self
    }

    /// Holder 0, waiters `1..=steps`. Not measured.
    pub fn prepare(&mut self, steps: usize) {
        let e = self.map.get_mut(&self.lock).expect("present");
        e.holder = 0;
        e.queue.clear();
        e.queue.extend(1..=steps as u64);
        self.holder = 0;
    }

    /// `steps` handoffs.
    #[inline(never)]
    pub fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            let e = self
                .map
                .get_mut(black_box(self.lock.as_str()))
                .expect("present");
            assert_eq!(e.holder, self.holder, "releaser holds the lock");
            let next = e.queue.pop_front().expect("a waiter");
            self.revision += 1;
            e.holder = next;
            e.token = self.revision;
            black_box((e.holder, e.token));
            self.holder = next;
        }
    }
}

// ------------------------------------------------------------------ time: tick, expiry, keep-alive

/// `n` live sessions, none due; each step is a `tick` one later than the last.
pub struct TickIdle {
    svc: LockService<VecStorage>,
    now: u64,
}

impl TickIdle {
    /// `n` sessions that never come due.
    pub fn new(n: usize) -> Self {
        let mut svc = service(n, 1, 1);
        open(&mut svc, n, FOREVER_TTL);
        TickIdle { svc, now: 0 }
    }

    /// `steps` ticks with nothing due.
    #[inline(never)]
    pub fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.now += 1;
            let r = self.svc.tick(Tick(self.now), &mut sink);
            debug_assert!(r.is_ok());
            black_box(r).ok();
        }
    }
}

/// `n` long-lived sessions plus `rounds` × `k` that each hold one lock: the k of round r
/// are due at the r-th next tick. The measured step is `rounds` consecutive ticks, each
/// expiring its k (each emits `SessionExpired` and `Released`); several rounds per timed
/// batch keep the timer's own cost out of the per-session figure.
pub struct Expiry {
    svc: LockService<VecStorage>,
    k: usize,
    rounds: usize,
    names: Vec<String>,
    now: u64,
}

impl Expiry {
    /// `n` sessions that stay, room for `rounds` × `k` that expire.
    pub fn new(n: usize, k: usize, rounds: usize) -> Self {
        let m = k * rounds;
        let mut svc = service(n + m, m, m);
        open(&mut svc, n, FOREVER_TTL);
        Expiry {
            svc,
            k,
            rounds,
            names: names("exp", m),
            now: 0,
        }
    }

    /// Opens the `rounds` × `k` sessions (round r with ttl r + 1) and has each take a
    /// lock. Not measured.
    pub fn prepare(&mut self) {
        for (i, name) in self.names.iter().enumerate() {
            let ttl = (i / self.k) as u64 + 1;
            let s = self
                .svc
                .open_session(self.svc.now(), ttl, &mut sink)
                .ok()
                .and_then(|r| r.opened())
                .expect("capacity sized");
            self.svc
                .acquire(
                    self.svc.now(),
                    s,
                    name,
                    Mode::Exclusive,
                    Wait::None,
                    None,
                    &mut sink,
                )
                .expect("capacity sized");
        }
    }

    /// `rounds` ticks, each expiring `k` sessions.
    #[inline(never)]
    pub fn run(&mut self) {
        for _ in 0..self.rounds {
            self.now += 1;
            let r = self.svc.tick(Tick(self.now), &mut sink);
            debug_assert!(r.is_ok());
            black_box(r).ok();
        }
    }

    /// Sessions expired per run.
    pub fn expired_per_run(&self) -> usize {
        self.k * self.rounds
    }
}

/// `n` live sessions kept alive round-robin; after each full round time advances one
/// tick, so every keep-alive moves a deadline as in a real keep-alive load. Every session
/// has the same ttl, so all share one ttl class and a keep-alive moves the session to the
/// tail of that class's deadline list (O(1)); a session in no class (a fifth distinct ttl)
/// would be re-sifted in the session heap instead, which no workload here measures.
/// [`KeepAlive::new`] visits them in the order they opened, so rows are read in order
/// (sessions sit at their home rows): the cache's best case. [`KeepAlive::shuffled`]
/// visits them in a fixed scattered order, as a host's keep-alives arrive: each call then
/// reads a row far from the last one.
pub struct KeepAlive {
    svc: LockService<VecStorage>,
    sessions: Vec<SessionId>,
    next: usize,
    now: u64,
}

impl KeepAlive {
    /// `n` sessions with a 1000-tick ttl.
    pub fn new(n: usize) -> Self {
        let mut svc = service(n, 1, 1);
        let sessions = open(&mut svc, n, 1000);
        KeepAlive {
            svc,
            sessions,
            next: 0,
            now: 0,
        }
    }

    /// `n` sessions with a 1000-tick ttl, kept alive in a scattered order: the i-th of a
    /// round is the session opened (i × a large odd number) mod n-th, a permutation for
    /// `n` a power of two (one round still keeps each session alive once).
    pub fn shuffled(n: usize) -> Self {
        assert!(
            n.is_power_of_two(),
            "a power of two, so the stride is a permutation"
        );
        let mut k = KeepAlive::new(n);
        let opened = k.sessions.clone();
        for (i, s) in k.sessions.iter_mut().enumerate() {
            *s = opened[i.wrapping_mul(0x9E37_79B1) & (n - 1)];
        }
        k
    }

    /// `steps` keep-alives (plus one idle tick per round of `n`).
    #[inline(never)]
    pub fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            let r = self
                .svc
                .keep_alive(self.svc.now(), self.sessions[self.next], None, &mut sink);
            debug_assert!(r.is_ok());
            black_box(r).ok();
            self.next += 1;
            if self.next == self.sessions.len() {
                self.next = 0;
                self.now += 1;
                self.svc.tick(Tick(self.now), &mut sink).ok();
            }
        }
    }
}

// ------------------------------------------------------------------ shared run

/// `m` locks, each held exclusive by its own writer with the same `r` readers queued in
/// shared mode. The measured step is a writer's `release`, which grants all `r` readers
/// at once (`r` `Granted` outputs).
pub struct SharedRun {
    svc: LockService<VecStorage>,
    writers: Vec<SessionId>,
    readers: Vec<SessionId>,
    names: Vec<String>,
}

impl SharedRun {
    /// `m` locks and `r` readers.
    pub fn new(m: usize, r: usize) -> Self {
        let mut svc = service(m + r, m, m * (r + 1));
        let writers = open(&mut svc, m, FOREVER_TTL);
        let readers = open(&mut svc, r, FOREVER_TTL);
        SharedRun {
            svc,
            writers,
            readers,
            names: names("shared", m),
        }
    }

    /// Writers take their locks, readers queue behind them. Not measured.
    pub fn prepare(&mut self) {
        for (w, name) in self.writers.iter().zip(&self.names) {
            self.svc
                .acquire(
                    self.svc.now(),
                    *w,
                    name,
                    Mode::Exclusive,
                    Wait::None,
                    None,
                    &mut sink,
                )
                .expect("free");
            for r in &self.readers {
                self.svc
                    .acquire(
                        self.svc.now(),
                        *r,
                        name,
                        Mode::Shared,
                        Wait::Forever,
                        None,
                        &mut sink,
                    )
                    .expect("capacity sized");
            }
        }
    }

    /// Each writer releases: its lock's whole run of readers is granted.
    #[inline(never)]
    pub fn run(&mut self) {
        for (w, name) in self.writers.iter().zip(&self.names) {
            let r = self.svc.release(self.svc.now(), *w, name, None, &mut sink);
            debug_assert!(r.is_ok());
            black_box(r).ok();
        }
    }

    /// Readers release everything. Not measured.
    pub fn finish(&mut self) {
        for name in &self.names {
            for r in &self.readers {
                self.svc
                    .release(self.svc.now(), *r, name, None, &mut sink)
                    .expect("holder");
            }
        }
    }

    /// Locks released per run.
    pub fn locks(&self) -> usize {
        self.names.len()
    }
}

// ------------------------------------------------------------------ snapshot and frames

/// A service with `n` sessions, each holding its own lock and waiting for the next
/// session's lock: `n` sessions + `n` locks + `2n` claims = `4n` entities.
pub fn populated(n: usize) -> LockService<VecStorage> {
    let mut svc = service(n, n, 2 * n);
    let sessions = open(&mut svc, n, FOREVER_TTL);
    let names = names("snap", n);
    for (s, name) in sessions.iter().zip(&names) {
        svc.acquire(
            svc.now(),
            *s,
            name,
            Mode::Exclusive,
            Wait::None,
            None,
            &mut sink,
        )
        .expect("free");
    }
    for (i, s) in sessions.iter().enumerate() {
        let next = &names[(i + 1) % n];
        svc.acquire(
            svc.now(),
            *s,
            next,
            Mode::Exclusive,
            Wait::Forever,
            Some(1),
            &mut sink,
        )
        .expect("capacity sized");
    }
    svc
}

/// Entities (sessions + locks + claims) in a service.
pub fn entities(usage: Usage) -> usize {
    (usage.sessions + usage.locks + usage.claims) as usize
}

/// Fresh storage the size of `svc`'s (for restore).
pub fn storage_like(cap: Capacity) -> VecStorage {
    VecStorage::new(
        cap.sessions as usize,
        cap.locks as usize,
        cap.claims as usize,
    )
}

/// Typical input frames: (label, bytes).
pub fn input_frames() -> Vec<(&'static str, Vec<u8>)> {
    let lock = LockName::new("jobs/reindex-000042").expect("valid");
    let inputs = [
        (
            "acquire",
            Input::Acquire {
                now: Tick(1_000_000),
                session: SessionId(4242),
                lock: lock.clone(),
                mode: Mode::Exclusive,
                wait: Wait::Until(Tick(1_000_000)),
                request: Some(17),
            },
        ),
        (
            "release",
            Input::Release {
                now: Tick(1_000_000),
                session: SessionId(4242),
                lock,
                request: Some(18),
            },
        ),
        (
            "keep_alive",
            Input::KeepAlive {
                now: Tick(1_000_000),
                session: SessionId(4242),
                request: Some(19),
            },
        ),
        (
            "tick",
            Input::Tick {
                now: Tick(1_000_123),
            },
        ),
    ];
    inputs
        .into_iter()
        .map(|(label, input)| {
            let mut buf = [0u8; fencelock::MAX_FRAME_LEN];
            let n = input.to_frame(&mut buf).expect("fits");
            (label, buf[..n].to_vec())
        })
        .collect()
}

// ------------------------------------------------------------------ memory

/// One memory figure: what, bytes, per what.
pub struct MemoryRow {
    /// What is measured.
    pub what: &'static str,
    /// Bytes.
    pub bytes: usize,
    /// Per what.
    pub per: &'static str,
}

/// Bytes per session, lock and claim, measured as `size_of` of a configured service
/// with fixed-array storage, with the other tables' share divided out; plus a std
/// `HashMap<String, (u64, u64)>` entry for comparison.
pub fn memory() -> Vec<MemoryRow> {
    use core::mem::size_of;
    use fencelock::ArrayStorage;
    // The fourth parameter is the label table's rows (one per labelled session); it is
    // measured on its own so the session figure is a session's cost without a label.
    type Base = LockService<ArrayStorage<0, 0, 0, 0>>;
    type S = LockService<ArrayStorage<1024, 0, 0, 0>>;
    type Lb = LockService<ArrayStorage<0, 0, 0, 1024>>;
    type L = LockService<ArrayStorage<0, 1024, 0>>;
    type C = LockService<ArrayStorage<0, 0, 1024>>;
    type Svc = LockService<ArrayStorage<1024, 1024, 2048, 0>>;
    let base = size_of::<Base>();
    vec![
        MemoryRow {
            what: "session",
            bytes: (size_of::<S>() - base) / 1024,
            per: "open session (SessionRow incl. its heap slot, and its two index buckets)",
        },
        MemoryRow {
            what: "label",
            bytes: (size_of::<Lb>() - base) / 1024,
            per: "session opened with a holder label (LabelRow, in the label table)",
        },
        MemoryRow {
            what: "lock",
            bytes: (size_of::<L>() - base) / 1024,
            per: "lock held, awaited, watched or in lock-delay (LockRow, name inline, and its two tagged index buckets)",
        },
        MemoryRow {
            what: "claim",
            bytes: (size_of::<C>() - base) / 1024,
            per: "hold, wait or watch (ClaimRow, and its two index buckets)",
        },
        MemoryRow {
            what: "fixed",
            bytes: base,
            per: "service, independent of capacity",
        },
        MemoryRow {
            what: "service_1k_1k_2k",
            bytes: size_of::<Svc>(),
            per: "whole service: 1024 sessions, 1024 locks, 2048 claims, no label table",
        },
        MemoryRow {
            what: "row_session",
            bytes: size_of::<SessionRow>(),
            per: "size_of::<SessionRow>()",
        },
        MemoryRow {
            what: "row_lock",
            bytes: size_of::<LockRow>(),
            per: "size_of::<LockRow>()",
        },
        MemoryRow {
            what: "row_claim",
            bytes: size_of::<ClaimRow>(),
            per: "size_of::<ClaimRow>()",
        },
        MemoryRow {
            what: "bucket",
            bytes: size_of::<Bucket>(),
            per: "size_of::<Bucket>() (two per session and per claim, in the table's index array)",
        },
        MemoryRow {
            what: "tagged_bucket",
            bytes: size_of::<TaggedBucket>(),
            per: "size_of::<TaggedBucket>() (two per lock, in the lock index array)",
        },
        MemoryRow {
            what: "output",
            bytes: size_of::<Output>(),
            per: "size_of::<Output>() (one event passed to the sink)",
        },
        MemoryRow {
            what: "reply",
            bytes: size_of::<Reply>(),
            per: "size_of::<Reply>() (the caller's answer, returned by value)",
        },
        MemoryRow {
            what: "hashmap_entry",
            bytes: hashmap_entry_bytes(),
            per: "std HashMap<String, (u64, u64)> entry at its load + the 13-byte key's 32-byte malloc chunk (for comparison)",
        },
    ]
}

/// Bucket bytes per entry of a std `HashMap<String, (u64, u64)>` holding 1024 entries at
/// the load it chooses, plus the key's heap allocation (13 bytes take glibc's minimum
/// 32-byte chunk on 64-bit targets).
fn hashmap_entry_bytes() -> usize {
    let map: HashMap<String, (u64, u64)> = HashMap::with_capacity(1024);
    let buckets = (map.capacity() * 8 / 7).next_power_of_two();
    let per_bucket = core::mem::size_of::<(String, (u64, u64))>() + 1; // + control byte
    buckets * per_bucket / 1024 + 32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that counts outputs.
    fn counter(n: &mut usize) -> impl FnMut(Output) + '_ {
        move |_| *n += 1
    }

    #[test]
    fn uncontended_grants_and_releases_every_lock_and_leaves_the_table_empty() {
        let mut w = Uncontended::new(64);
        let mut n = 0;
        for name in &w.names {
            let r = w.svc.acquire(
                w.svc.now(),
                w.session,
                name,
                Mode::Exclusive,
                Wait::None,
                None,
                &mut counter(&mut n),
            );
            assert!(matches!(r, Ok(Reply::Granted { .. })), "{r:?}");
        }
        assert_eq!(w.svc.usage().locks, 64);
        assert_eq!(w.svc.revision(), 64);
        for name in &w.names {
            let r = w
                .svc
                .release(w.svc.now(), w.session, name, None, &mut counter(&mut n));
            assert!(matches!(r, Ok(Reply::Released { .. })), "{r:?}");
        }
        // The caller's answers are replies: nothing for anyone else.
        assert_eq!(n, 0);
        assert_eq!(w.svc.usage().locks, 0);
        // The measured loop repeats the same cycle with fresh tokens.
        w.run();
        w.run();
        assert_eq!(w.svc.revision(), 64 * 3);
        assert_eq!(w.svc.usage().claims, 0);
    }

    #[test]
    fn cabi_uncontended_grants_and_releases_every_lock_through_the_c_abi() {
        use ffi::{fencelock_reply_kind, fencelock_result};
        let mut w = cabi::CabiUncontended::new(64);
        let s = w.session();
        let names = w.names().to_vec();
        for (i, name) in names.iter().enumerate() {
            let r = w.c.acquire(0, s, name, cabi::WAIT_NONE);
            assert_eq!(r, fencelock_result::Ok);
            assert_eq!(w.c.reply().kind, fencelock_reply_kind::Granted);
            assert_eq!(w.c.reply().token, i as u64 + 1, "a fresh token per grant");
            // An uncontended grant is the caller's reply: nothing queued to drain.
            assert_eq!(w.c.reply().pending, 0);
        }
        for name in &names {
            assert_eq!(w.c.release(0, s, name), fencelock_result::Ok);
            assert_eq!(w.c.reply().kind, fencelock_reply_kind::Released);
            assert_eq!(w.c.reply().pending, 0);
        }
        // The measured loop repeats the same cycle: every acquire a fresh grant (an acquire
        // of a lock still held would answer the same token again, and the count below
        // would fall short) and every release accepted.
        w.run();
        w.run();
        assert_eq!(w.c.reply().kind, fencelock_reply_kind::Released);
        assert_eq!(
            w.c.reply().token,
            64 * 3,
            "the last release is of the 192nd grant"
        );
        assert_eq!(w.c.drained, 0);
        // Nothing left behind: the session can take all 64 again.
        for name in &names {
            assert_eq!(
                w.c.acquire(0, s, name, cabi::WAIT_NONE),
                fencelock_result::Ok
            );
            assert_eq!(w.c.reply().kind, fencelock_reply_kind::Granted);
        }
    }

    #[test]
    fn cabi_drains_the_events_an_input_queues() {
        use ffi::fencelock_result;
        // A hand-off through the C ABI: the holder's release queues one Granted for the
        // waiter, which the driver drains right after the call.
        let mut c = cabi::CService::new(2, 1, 2);
        let s = c.open(2, FOREVER_TTL);
        assert_eq!(
            c.acquire(0, s[0], "jobs/reindex", cabi::WAIT_NONE),
            fencelock_result::Ok
        );
        assert_eq!(
            c.acquire(0, s[1], "jobs/reindex", cabi::WAIT_FOREVER),
            fencelock_result::Ok
        );
        assert_eq!(c.drained, 0);
        assert_eq!(c.release(0, s[0], "jobs/reindex"), fencelock_result::Ok);
        assert_eq!(c.drained, 1);
    }

    #[test]
    fn baselines_end_empty_after_each_run() {
        let mut m = MapOwned::new(100);
        m.run();
        assert!(m.map.is_empty());
        assert_eq!(m.token, 100);
        let names = names("lock", 100);
        let mut b = MapBorrowed::new(&names);
        b.run();
        assert!(b.map.is_empty());
        assert_eq!(b.token, 100);
    }

    #[test]
    fn handoff_grants_each_waiter_in_turn() {
        let mut h = Handoff::new(8);
        h.prepare(8);
        assert_eq!(h.svc.waiters("jobs/reindex").count(), 8);
        let before = h.svc.revision();
        h.run(3);
        let holders: Vec<_> = h.svc.holders("jobs/reindex").collect();
        assert_eq!(holders.len(), 1);
        assert_eq!(holders[0].session, h.sessions[3]);
        assert_eq!(h.svc.revision(), before + 3);
        h.run(5);
        h.finish();
        assert_eq!(h.svc.usage().locks, 0);
        // Repeatable: a second batch works the same.
        h.prepare(8);
        h.run(8);
        h.finish();
        assert_eq!(h.svc.usage().claims, 0);
    }

    #[test]
    fn one_handoff_replies_released_and_grants_the_next_waiter() {
        let mut h = Handoff::new(1);
        h.prepare(1);
        let (a, b) = (h.sessions[0], h.sessions[1]);
        let mut outs: Vec<Output> = Vec::new();
        let r = h
            .svc
            .release(h.svc.now(), a, "jobs/reindex", None, &mut outs)
            .unwrap();
        assert!(matches!(r, Reply::Released { .. }));
        assert!(matches!(outs[..], [Output::Granted { session, .. }] if session == b));
    }

    #[test]
    fn map_handoff_hands_over_in_order() {
        let mut m = MapHandoff::new(4);
        m.prepare(4);
        m.run(4);
        assert_eq!(m.holder, 4);
        assert_eq!(m.revision, 4);
        m.prepare(2);
        m.run(2);
        assert_eq!(m.holder, 2);
    }

    #[test]
    fn idle_ticks_emit_nothing() {
        let mut t = TickIdle::new(100);
        let mut outs: Vec<Output> = Vec::new();
        t.svc.tick(Tick(5), &mut outs).unwrap();
        assert!(outs.is_empty());
        t.now = 5;
        t.run(10);
        assert_eq!(t.svc.now(), Tick(15));
        assert_eq!(t.svc.usage().sessions, 100);
    }

    #[test]
    fn expiry_expires_exactly_k_sessions_per_tick() {
        let mut e = Expiry::new(50, 7, 3);
        e.prepare();
        assert_eq!(e.svc.usage().sessions, 50 + 21);
        for t in 1..=3 {
            let mut outs: Vec<Output> = Vec::new();
            e.svc.tick(Tick(t), &mut outs).unwrap();
            let expired = outs
                .iter()
                .filter(|o| matches!(o, Output::SessionExpired { .. }))
                .count();
            let released = outs
                .iter()
                .filter(|o| matches!(o, Output::Released { .. }))
                .count();
            assert_eq!((expired, released), (7, 7), "tick {t}");
        }
        assert_eq!(e.svc.usage().sessions, 50);
        // The measured cycle: prepare, then `rounds` ticks expire everything prepared.
        e.now = 3;
        e.prepare();
        e.run();
        assert_eq!(e.svc.usage().sessions, 50);
        assert_eq!(e.svc.usage().locks, 0);
        assert_eq!(e.expired_per_run(), 21);
    }

    #[test]
    fn keep_alive_moves_deadlines_and_keeps_everyone_alive() {
        let mut k = KeepAlive::new(10);
        k.run(35);
        assert_eq!(k.svc.now(), Tick(3));
        assert_eq!(k.svc.usage().sessions, 10);
        let s = k.svc.session(k.sessions[0]).unwrap();
        assert_eq!(s.expires_at, Tick(1003));
    }

    #[test]
    fn the_shuffled_keep_alive_visits_every_session_once_a_round_out_of_order() {
        let mut k = KeepAlive::shuffled(64);
        let mut seen = k.sessions.clone();
        seen.sort();
        let mut opened = KeepAlive::new(64).sessions;
        opened.sort();
        assert_eq!(seen, opened, "a permutation of the sessions");
        let far = k
            .sessions
            .windows(2)
            .filter(|w| w[0].0.abs_diff(w[1].0) > 4)
            .count();
        assert!(far > 48, "most steps jump: {far} of 63");
        k.run(64 * 3 + 5);
        assert_eq!(k.svc.now(), Tick(3));
        assert_eq!(k.svc.usage().sessions, 64);
        for s in &k.sessions[..5] {
            assert_eq!(k.svc.session(*s).unwrap().expires_at, Tick(1003));
        }
        assert_eq!(k.svc.session(k.sessions[5]).unwrap().expires_at, Tick(1002));
    }

    #[test]
    fn a_writer_release_grants_the_whole_run_of_readers() {
        let mut w = SharedRun::new(2, 5);
        w.prepare();
        let name = w.names[0].clone();
        let writer = w.writers[0];
        let mut outs: Vec<Output> = Vec::new();
        w.svc
            .release(w.svc.now(), writer, &name, None, &mut outs)
            .unwrap();
        let granted = outs
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    Output::Granted {
                        mode: Mode::Shared,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(granted, 5);
        assert_eq!(w.svc.holders(&name).count(), 5);
        // The rest of the cycle.
        w.svc
            .release(w.svc.now(), w.writers[1], &w.names[1], None, &mut sink)
            .unwrap();
        w.finish();
        assert_eq!(w.svc.usage().claims, 0);
        w.prepare();
        w.run();
        w.finish();
        assert_eq!(w.svc.usage().locks, 0);
    }

    #[test]
    fn populated_state_snapshots_and_restores_to_the_same_bytes() {
        let svc = populated(16);
        assert_eq!(entities(svc.usage()), 64);
        let bytes = svc.snapshot_vec();
        let back = LockService::restore(storage_like(svc.capacity()), &bytes)
            .map_err(|(_, e)| e)
            .unwrap();
        assert_eq!(back.snapshot_vec(), bytes);
    }

    #[test]
    fn frames_decode_to_their_inputs() {
        for (label, frame) in input_frames() {
            let input = Input::from_frame(&frame).unwrap();
            let mut buf = [0u8; fencelock::MAX_FRAME_LEN];
            let n = input.to_frame(&mut buf).unwrap();
            assert_eq!(&buf[..n], &frame[..], "{label}");
        }
    }

    #[test]
    fn memory_figures_match_the_row_sizes() {
        let m = memory();
        let get = |w: &str| m.iter().find(|r| r.what == w).unwrap().bytes;
        // An entry is its row and its two buckets in the table's index array.
        assert_eq!(get("session"), get("row_session") + 2 * get("bucket"));
        assert_eq!(get("lock"), get("row_lock") + 2 * get("tagged_bucket"));
        assert_eq!(get("claim"), get("row_claim") + 2 * get("bucket"));
    }
}
