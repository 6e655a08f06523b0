//! Shared helpers for the integration tests: a small harness that collects outputs, checks
//! refusals are atomic, and checks every DESIGN.md invariant through the public queries.
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::{BTreeMap, BTreeSet};

use fencelock::{
    Config, Error, Input, LockName, LockService, Mode, Output, ReleaseReason, SessionId, Tick,
    Token, VecStorage, Wait,
};

pub type Svc = LockService<VecStorage>;

/// The output sink the harness hands to an input.
pub type Sink<'a> = &'a mut dyn FnMut(Output);

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

/// Runs one input and returns its outputs (panics on an error: use `refused` for those).
pub fn run<T>(
    svc: &mut Svc,
    f: impl FnOnce(&mut Svc, &mut Sink) -> Result<T, Error>,
) -> (T, Vec<Output>) {
    let mut got = Vec::new();
    let mut sink: Sink = &mut |o| got.push(o);
    let r = f(svc, &mut sink).unwrap_or_else(|e| panic!("refused: {e}"));
    check_invariants(svc);
    (r, got)
}

/// Runs an input that must be refused; asserts the error, that nothing was emitted and that
/// the snapshot is byte-identical. Returns the error.
pub fn refused<T: std::fmt::Debug>(
    svc: &mut Svc,
    f: impl FnOnce(&mut Svc, &mut Sink) -> Result<T, Error>,
) -> Error {
    let before = svc.snapshot_vec();
    let poll = svc.poll_timeout();
    let mut got = Vec::new();
    let mut sink: Sink = &mut |o| got.push(o);
    let e = f(svc, &mut sink).expect_err("the input must be refused");
    assert_eq!(got, vec![], "a refused input emitted outputs");
    assert_eq!(
        svc.snapshot_vec(),
        before,
        "a refused input changed the state ({e})"
    );
    assert_eq!(svc.poll_timeout(), poll);
    check_invariants(svc);
    e
}

pub fn open(svc: &mut Svc, ttl: u64) -> SessionId {
    run(svc, |s, o| s.open_session(ttl, o)).0
}

pub fn acquire(svc: &mut Svc, s: SessionId, lock: &str, mode: Mode, wait: Wait) -> Vec<Output> {
    run(svc, |v, o| v.acquire(s, lock, mode, wait, None, o)).1
}

pub fn x(svc: &mut Svc, s: SessionId, lock: &str) -> Vec<Output> {
    acquire(svc, s, lock, Mode::Exclusive, Wait::Forever)
}

pub fn release(svc: &mut Svc, s: SessionId, lock: &str) -> Vec<Output> {
    run(svc, |v, o| v.release(s, lock, None, o)).1
}

pub fn cancel(svc: &mut Svc, s: SessionId, lock: &str) -> Vec<Output> {
    run(svc, |v, o| v.cancel(s, lock, None, o)).1
}

pub fn tick(svc: &mut Svc, now: u64) -> Vec<Output> {
    run(svc, |v, o| v.tick(Tick(now), o)).1
}

pub fn keep_alive(svc: &mut Svc, s: SessionId) -> Vec<Output> {
    run(svc, |v, o| v.keep_alive(s, None, o)).1
}

pub fn close(svc: &mut Svc, s: SessionId) -> Vec<Output> {
    run(svc, |v, o| v.close_session(s, None, o)).1
}

pub fn granted(session: SessionId, lock: &str, mode: Mode, token: u64) -> Output {
    Output::Granted {
        session,
        lock: name(lock),
        mode,
        token: Token(token),
    }
}

pub fn gx(session: SessionId, lock: &str, token: u64) -> Output {
    granted(session, lock, Mode::Exclusive, token)
}

pub fn queued(session: SessionId, lock: &str, mode: Mode, position: u32) -> Output {
    Output::Queued {
        session,
        lock: name(lock),
        mode,
        position,
    }
}

pub fn released(session: SessionId, lock: &str, token: u64, reason: ReleaseReason) -> Output {
    Output::Released {
        session,
        lock: name(lock),
        token: Token(token),
        reason,
    }
}

pub fn busy(session: SessionId, lock: &str) -> Output {
    Output::Busy {
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

/// Every invariant of DESIGN.md that the state (not the history) shows, through public
/// queries only, plus: snapshot -> restore -> snapshot gives the same bytes.
pub fn check_invariants(svc: &Svc) {
    let now = svc.now();
    let mut tokens = BTreeSet::new();
    let mut claims = 0u32;
    let mut per_session: std::collections::BTreeMap<SessionId, (u32, u32)> = Default::default();
    let locks: Vec<String> = svc.locks().map(|l| l.as_str().to_owned()).collect();
    assert_eq!(locks.len() as u32, svc.len().locks);
    for lock in &locks {
        let hs: Vec<_> = svc.holders(lock).collect();
        let ws: Vec<_> = svc.waiters(lock).collect();
        let delayed = svc.lock_delay_until(lock);
        // 1. mutual exclusion
        let exclusive = hs.iter().filter(|h| h.mode == Mode::Exclusive).count();
        assert!(
            exclusive == 0 || hs.len() == 1,
            "{lock}: exclusive holder with others: {hs:?}"
        );
        // 2. tokens: non-zero, within the revision, all distinct
        for h in &hs {
            assert!(
                h.token.0 >= 1 && h.token.0 <= svc.revision(),
                "{lock}: bad token {h:?}"
            );
            assert!(tokens.insert(h.token), "token {} held twice", h.token);
        }
        // 3. FIFO / no missed grant: the head of the queue cannot be granted now
        if let (Some(head), None) = (ws.first(), delayed) {
            let fits = hs.is_empty()
                || (head.mode == Mode::Shared && hs.iter().all(|h| h.mode == Mode::Shared));
            assert!(!fits, "{lock}: waiter {head:?} left waiting behind {hs:?}");
        }
        // 4. nothing waits past its deadline
        for w in &ws {
            assert!(
                w.deadline.is_none_or(|d| d > now),
                "{lock}: wait past deadline {w:?}"
            );
        }
        // idle lock entries are evicted
        assert!(
            !hs.is_empty() || !ws.is_empty() || delayed.is_some(),
            "{lock}: idle entry kept"
        );
        // no session twice on one lock
        let mut seen = BTreeSet::new();
        for s in hs
            .iter()
            .map(|h| h.session)
            .chain(ws.iter().map(|w| w.session))
        {
            assert!(seen.insert(s), "{lock}: {s} claims it twice");
        }
        for h in &hs {
            per_session.entry(h.session).or_default().0 += 1;
        }
        for w in &ws {
            per_session.entry(w.session).or_default().1 += 1;
        }
        claims += (hs.len() + ws.len()) as u32;
    }
    assert_eq!(claims, svc.len().claims);
    let sessions: Vec<_> = svc.sessions().collect();
    assert_eq!(sessions.len() as u32, svc.len().sessions);
    assert!(
        sessions.windows(2).all(|w| w[0] < w[1]),
        "sessions not in id order"
    );
    for s in &sessions {
        let info = svc.session(*s).unwrap();
        // 4. no live session is past its deadline
        assert!(info.expires_at > now, "{s} is past its deadline");
        let (h, w) = per_session.remove(s).unwrap_or_default();
        assert_eq!((info.holds, info.waits), (h, w), "{s}: claim counts");
    }
    assert!(
        per_session.is_empty(),
        "claims of sessions that are not open: {per_session:?}"
    );
    // poll_timeout is exactly the earliest deadline of any kind (the heaps agree with
    // the rows), and it is in the future (everything due was done)
    let earliest = sessions
        .iter()
        .map(|s| svc.session(*s).unwrap().expires_at)
        .chain(
            locks
                .iter()
                .flat_map(|l| svc.waiters(l).filter_map(|w| w.deadline)),
        )
        .chain(locks.iter().filter_map(|l| svc.lock_delay_until(l)))
        .min();
    assert_eq!(
        svc.poll_timeout(),
        earliest,
        "poll_timeout disagrees with the deadlines"
    );
    if let Some(t) = svc.poll_timeout() {
        assert!(t > now, "something due at {t} was not done at {now}");
    }
    // snapshot -> restore -> snapshot is byte-identical
    let bytes = svc.snapshot_vec();
    let cap = svc.capacity();
    let restored = LockService::restore(
        VecStorage::new(
            cap.sessions as usize,
            cap.locks as usize,
            cap.claims as usize,
        ),
        &bytes,
    )
    .map_err(|(_, e)| e)
    .expect("a snapshot of a live service restores");
    assert_eq!(
        restored.snapshot_vec(),
        bytes,
        "restore changed the snapshot"
    );
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

const LOCKS: [&str; 4] = ["a", "b", "c", "jobs/reindex"];

/// A random input sequence; it depends only on the seed, never on the service's answers.
pub fn inputs(seed: u64, len: usize) -> Vec<Input> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut now = 0u64;
    let mut opened = 0u64;
    let mut last_request: BTreeMap<u64, u64> = BTreeMap::new();
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        // mostly one of the latest sessions (likely alive), sometimes any id at all
        let session = if rng.below(10) == 0 || opened == 0 {
            SessionId(1 + rng.below(opened + 1))
        } else {
            SessionId(opened - rng.below(opened.min(5)))
        };
        let lock = name(LOCKS[rng.below(LOCKS.len() as u64) as usize]);
        // drawn for every input, used by those that carry one
        let request = {
            let last = last_request.entry(session.0).or_default();
            match rng.below(6) {
                0 => None,
                1 | 2 => Some(*last), // a retry (or the first number, 0)
                3 => Some(last.saturating_sub(1)),
                _ => {
                    *last += 1;
                    Some(*last)
                }
            }
        };
        let input = match rng.below(20) {
            0..=1 => {
                opened += 1;
                Input::OpenSession {
                    ttl: 1 + rng.below(60),
                }
            }
            2..=4 => Input::KeepAlive { session, request },
            5 => Input::CloseSession { session, request },
            6..=11 => {
                let mode = if rng.below(3) == 0 {
                    Mode::Shared
                } else {
                    Mode::Exclusive
                };
                let wait = match rng.below(4) {
                    0 => Wait::None,
                    1 => Wait::Until(Tick(now + rng.below(15))),
                    _ => Wait::Forever,
                };
                Input::Acquire {
                    session,
                    lock,
                    mode,
                    wait,
                    request,
                }
            }
            12..=14 => Input::Release {
                session,
                lock,
                request,
            },
            15 => Input::Cancel {
                session,
                lock,
                request,
            },
            _ => {
                // mostly forward, sometimes the same tick, rarely backwards (refused)
                now = match rng.below(10) {
                    0 => now.saturating_sub(1),
                    1 => now,
                    _ => now + 1 + rng.below(3),
                };
                Input::Tick { now: Tick(now) }
            }
        };
        out.push(input);
    }
    out
}
