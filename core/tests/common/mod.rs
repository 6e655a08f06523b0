//! Shared helpers for the integration tests: a small harness that runs one input at a
//! time, returns the caller's [`Reply`] and the [`Output`] events separately, checks that
//! a refused input changes nothing beyond the advance to its `now` (docs/SPEC.md §2, §5),
//! and after every input checks every state invariant (docs/SPEC.md §7) through the core's
//! own validator: snapshot → [`LockService::restore`] → snapshot, byte-identical.
#![allow(dead_code)] // each test binary uses a different subset

use fencelock::{
    Config, Error, LockName, LockService, Mode, Output, ReleaseReason, Reply, SessionId, Tick,
    Token, VecStorage, Wait,
};

pub type Svc = LockService<VecStorage>;

/// The events of one input, in order (the sink the harness hands to every input).
pub type Events = Vec<Output>;

pub fn name(s: &str) -> LockName {
    LockName::new(s).unwrap()
}

/// A service with room for `n` sessions, `n` locks and `2n` claims.
pub fn svc(n: usize) -> Svc {
    LockService::new(VecStorage::new(n, n, 2 * n), Config::default()).unwrap()
}

pub fn svc_with(sessions: usize, locks: usize, claims: usize, config: Config) -> Svc {
    LockService::new(VecStorage::new(sessions, locks, claims), config).unwrap()
}

/// A copy of `svc` made through its snapshot (the service is not `Clone`).
pub fn twin(svc: &Svc) -> Svc {
    let cap = svc.capacity();
    LockService::restore(
        VecStorage::new(
            cap.sessions as usize,
            cap.locks as usize,
            cap.claims as usize,
        ),
        &svc.snapshot_vec(),
    )
    .map_err(|(_, e)| e)
    .expect("a snapshot of a live service restores")
}

/// Runs one input at the service's current `now` and returns what the call returned (the
/// caller's reply, for an input) and the events it emitted. Panics on an error: use
/// [`refused`] for those.
pub fn run<T>(
    svc: &mut Svc,
    f: impl FnOnce(&mut Svc, Tick, &mut Events) -> Result<T, Error>,
) -> (T, Events) {
    let now = svc.now();
    run_at(svc, now.0, f)
}

/// [`run`] with an explicit `now` (not earlier than the service's): the input's own
/// advance to `now` comes first, and its events lead the returned ones.
pub fn run_at<T>(
    svc: &mut Svc,
    now: u64,
    f: impl FnOnce(&mut Svc, Tick, &mut Events) -> Result<T, Error>,
) -> (T, Events) {
    let mut events = Vec::new();
    let bound = svc.max_events();
    let r = f(svc, Tick(now), &mut events).unwrap_or_else(|e| panic!("refused: {e}"));
    assert!(
        events.len() <= bound,
        "{} events, more than max_events() = {bound}",
        events.len()
    );
    assert_eq!(
        svc.now(),
        Tick(now),
        "an accepted input leaves time at its now"
    );
    check_invariants(svc);
    (r, events)
}

/// Runs an input at the service's current `now` that must be refused; asserts that nothing
/// changed: no event, byte-identical snapshot, same `poll_timeout`. Returns the error.
pub fn refused<T: std::fmt::Debug>(
    svc: &mut Svc,
    f: impl FnOnce(&mut Svc, Tick, &mut Events) -> Result<T, Error>,
) -> Error {
    let now = svc.now();
    let before = svc.snapshot_vec();
    let poll = svc.poll_timeout();
    let mut events = Vec::new();
    let e = f(svc, now, &mut events).expect_err("the input must be refused");
    assert_eq!(events, vec![], "a refused input emitted events ({e})");
    assert_eq!(
        svc.snapshot_vec(),
        before,
        "a refused input changed the state ({e})"
    );
    assert_eq!(svc.poll_timeout(), poll);
    check_invariants(svc);
    e
}

/// Runs an input at a later `now` that must be refused by its own checks (after its
/// advance); asserts that the service is byte-identical to a twin that only ticked to
/// `now`, with the same events. Returns the error and the advance's events.
pub fn refused_at<T: std::fmt::Debug>(
    svc: &mut Svc,
    now: u64,
    f: impl FnOnce(&mut Svc, Tick, &mut Events) -> Result<T, Error>,
) -> (Error, Events) {
    let mut ticked = twin(svc);
    let mut expected = Vec::new();
    ticked.tick(Tick(now), &mut expected).unwrap();
    let mut events = Vec::new();
    let e = f(svc, Tick(now), &mut events).expect_err("the input must be refused");
    assert_eq!(
        events, expected,
        "a refused input emitted more than its advance ({e})"
    );
    assert_eq!(
        svc.snapshot_vec(),
        ticked.snapshot_vec(),
        "a refused input changed more than its advance ({e})"
    );
    assert_eq!(svc.poll_timeout(), ticked.poll_timeout());
    check_invariants(svc);
    (e, events)
}

pub fn open(svc: &mut Svc, ttl: u64) -> SessionId {
    let now = svc.now().0;
    open_at(svc, now, ttl)
}

pub fn open_at(svc: &mut Svc, now: u64, ttl: u64) -> SessionId {
    let (reply, _) = run_at(svc, now, |v, now, o| v.open_session(now, ttl, o));
    reply.opened().expect("open replies Opened")
}

pub fn acquire(svc: &mut Svc, s: SessionId, lock: &str, mode: Mode, wait: Wait) -> (Reply, Events) {
    run(svc, |v, now, o| {
        v.acquire(now, s, lock, mode, wait, None, o)
    })
}

pub fn acquire_at(
    svc: &mut Svc,
    now: u64,
    s: SessionId,
    lock: &str,
    mode: Mode,
    wait: Wait,
) -> (Reply, Events) {
    run_at(svc, now, |v, now, o| {
        v.acquire(now, s, lock, mode, wait, None, o)
    })
}

/// An exclusive acquire that waits forever, at the current `now`.
pub fn x(svc: &mut Svc, s: SessionId, lock: &str) -> (Reply, Events) {
    acquire(svc, s, lock, Mode::Exclusive, Wait::Forever)
}

pub fn x_at(svc: &mut Svc, now: u64, s: SessionId, lock: &str) -> (Reply, Events) {
    acquire_at(svc, now, s, lock, Mode::Exclusive, Wait::Forever)
}

pub fn release(svc: &mut Svc, s: SessionId, lock: &str) -> (Reply, Events) {
    run(svc, |v, now, o| v.release(now, s, lock, None, o))
}

pub fn release_at(svc: &mut Svc, now: u64, s: SessionId, lock: &str) -> (Reply, Events) {
    run_at(svc, now, |v, now, o| v.release(now, s, lock, None, o))
}

pub fn cancel(svc: &mut Svc, s: SessionId, lock: &str) -> (Reply, Events) {
    run(svc, |v, now, o| v.cancel(now, s, lock, None, o))
}

pub fn cancel_at(svc: &mut Svc, now: u64, s: SessionId, lock: &str) -> (Reply, Events) {
    run_at(svc, now, |v, now, o| v.cancel(now, s, lock, None, o))
}

/// Ticks to `now`; returns its events (its reply would only repeat `now`).
pub fn tick(svc: &mut Svc, now: u64) -> Events {
    run_at(svc, now, |v, now, o| v.tick(now, o)).1
}

pub fn keep_alive(svc: &mut Svc, s: SessionId) -> (Reply, Events) {
    run(svc, |v, now, o| v.keep_alive(now, s, None, o))
}

pub fn keep_alive_at(svc: &mut Svc, now: u64, s: SessionId) -> (Reply, Events) {
    run_at(svc, now, |v, now, o| v.keep_alive(now, s, None, o))
}

pub fn close(svc: &mut Svc, s: SessionId) -> (Reply, Events) {
    run(svc, |v, now, o| v.close_session(now, s, None, o))
}

pub fn close_at(svc: &mut Svc, now: u64, s: SessionId) -> (Reply, Events) {
    run_at(svc, now, |v, now, o| v.close_session(now, s, None, o))
}

// ------------------------------------------------------------------ replies (the caller's)

/// `Reply::Granted` in exclusive mode.
pub fn reply_x(token: u64) -> Reply {
    Reply::Granted {
        mode: Mode::Exclusive,
        token: Token(token),
    }
}

/// `Reply::Granted` in shared mode.
pub fn reply_s(token: u64) -> Reply {
    Reply::Granted {
        mode: Mode::Shared,
        token: Token(token),
    }
}

pub fn reply_queued(mode: Mode, position: u32) -> Reply {
    Reply::Queued { mode, position }
}

pub fn reply_released(token: u64) -> Reply {
    Reply::Released {
        token: Token(token),
    }
}

pub fn reply_kept_alive(expires_at: u64) -> Reply {
    Reply::KeptAlive {
        expires_at: Tick(expires_at),
    }
}

// ------------------------------------------------------------------ events (for others)

pub fn granted(session: SessionId, lock: &str, mode: Mode, token: u64) -> Output {
    Output::Granted {
        session,
        lock: name(lock),
        mode,
        token: Token(token),
    }
}

/// An `Output::Granted` in exclusive mode.
pub fn gx(session: SessionId, lock: &str, token: u64) -> Output {
    granted(session, lock, Mode::Exclusive, token)
}

pub fn released(session: SessionId, lock: &str, token: u64, reason: ReleaseReason) -> Output {
    Output::Released {
        session,
        lock: name(lock),
        token: Token(token),
        reason,
    }
}

pub fn expired(session: SessionId) -> Output {
    Output::SessionExpired { session }
}

pub fn timed_out(session: SessionId, lock: &str) -> Output {
    Output::WaitTimedOut {
        session,
        lock: name(lock),
    }
}

pub fn holders(svc: &Svc, lock: &str) -> Vec<(SessionId, Mode, u64)> {
    svc.holders(lock)
        .map(|h| (h.session, h.mode, h.token.0))
        .collect()
}

pub fn waiters(svc: &Svc, lock: &str) -> Vec<SessionId> {
    svc.waiters(lock).map(|w| w.session).collect()
}

/// The state invariants of docs/SPEC.md §7, checked by the core's own validator:
/// [`LockService::restore`] accepts a snapshot only if it holds all of them, so
/// snapshot → restore → snapshot must succeed and give the same bytes. For a state the
/// inputs made, that is a check by other code than the inputs'; for a state `restore`
/// itself made it proves nothing more — use [`check_queries`] there too. (The full
/// public-query checker lives in the verification crate, `fencelock-tests`, which depends
/// on this one.)
pub fn check_invariants(svc: &Svc) {
    let bytes = svc.snapshot_vec();
    let restored = twin(svc);
    assert_eq!(
        restored.snapshot_vec(),
        bytes,
        "restore changed the snapshot"
    );
    assert_eq!(restored.poll_timeout(), svc.poll_timeout());
}

/// The invariants that public queries can show, checked without `restore`: at most one
/// exclusive holder of a lock and then no other; every holder's token in 1..=revision and
/// no two alike (I1, I2); no queue without a reason to wait (a lock with waiters is held
/// or in lock-delay); every session deadline and wait deadline after `now`, and
/// `poll_timeout` after `now`.
pub fn check_queries(svc: &Svc) {
    let now = svc.now();
    let mut tokens = std::collections::BTreeSet::new();
    for lock in svc.locks() {
        let l = lock.as_str();
        let hs = holders(svc, l);
        let exclusive = hs.iter().filter(|h| h.1 == Mode::Exclusive).count();
        assert!(exclusive == 0 || hs.len() == 1, "{l}: {hs:?}");
        for &(_, _, token) in &hs {
            assert!((1..=svc.revision()).contains(&token), "{l}: token {token}");
            assert!(tokens.insert(token), "{l}: token {token} twice");
        }
        let ws: Vec<_> = svc.waiters(l).collect();
        if !ws.is_empty() {
            assert!(
                !hs.is_empty() || svc.lock_delay_until(l).is_some(),
                "{l}: waiters with nothing to wait for"
            );
        }
        for w in ws {
            assert!(w.deadline.is_none_or(|d| d > now), "{l}: {w:?}");
        }
    }
    for s in svc.sessions() {
        let info = svc.session(s).expect("a listed session has its info");
        assert!(info.expires_at > now, "{info:?}");
    }
    assert!(svc.poll_timeout().is_none_or(|t| t > now));
}

/// A seeded xorshift64* generator: tests print the seed, and the same seed replays.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
