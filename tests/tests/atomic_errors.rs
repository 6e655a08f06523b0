//! Atomic errors (I5, docs/SPEC.md §5): for every error kind, generated states in which
//! it happens, and a check that the refused call changed nothing beyond the advance to its
//! `now`: the service equals a copy that only ticked to that `now` (snapshot bytes), the
//! events are that tick's, and every invariant holds. Each refusal is also tried on a copy
//! at a later `now`, where the advance may expire sessions and grant waiters first: it
//! must again change nothing beyond that advance.

use std::collections::BTreeSet;

use fencelock::{
    Config, Error, FenceGate, GateRow, Input, Label, LockName, LockService, Mode, Output,
    SessionId, SessionKeeper, Sink, Table, Tick, Token, VecStorage, Wait, SNAPSHOT_MAGIC,
};
use fencelock_tests::invariants::check_service;
use fencelock_tests::vectors::ticked_copy;
use proptest::prelude::*;

type Svc = LockService<VecStorage>;

fn fork(svc: &Svc) -> Svc {
    let c = svc.capacity();
    LockService::restore(
        VecStorage::new(c.sessions as usize, c.locks as usize, c.claims as usize),
        &svc.snapshot_vec(),
    )
    .unwrap()
}

fn ok(svc: &mut Svc, input: Input) -> Vec<Output> {
    let mut events = Vec::new();
    svc.handle(input.clone(), &mut events)
        .unwrap_or_else(|e| panic!("setup input {input:?} refused: {e}"));
    events
}

fn open(svc: &mut Svc) -> SessionId {
    let mut events = Vec::new();
    svc.open_session(svc.now(), 1000, &mut events)
        .expect("setup open")
        .opened()
        .expect("opened")
}

/// Applies `input` to `svc` and requires a refusal that changed nothing beyond the
/// advance to the input's `now`. Returns the error.
fn refused_atomically(svc: &mut Svc, input: &Input) -> Error {
    let before = svc.snapshot_vec();
    let (ticked, advance) = ticked_copy(svc, input.now().max(svc.now()));
    let mut events = Vec::new();
    let err = svc
        .handle(input.clone(), &mut events)
        .expect_err(&format!("{input:?} was accepted"));
    let (want, want_events) = match err {
        Error::TimeWentBackwards { .. } => (before, Vec::new()),
        _ => (ticked.snapshot_vec(), advance),
    };
    assert_eq!(
        events, want_events,
        "{input:?} ({err}): events beyond its advance"
    );
    assert_eq!(
        svc.snapshot_vec(),
        want,
        "{input:?} ({err}) changed more than the advance to its now"
    );
    check_service(svc).unwrap();
    err
}

/// `input` (stamped with the service's time) must be refused with `code`, changing
/// nothing; at a later time, on a copy, whatever it gives, a refusal must again change
/// nothing beyond that advance.
fn refused(svc: &mut Svc, input: Input, code: u32, seen: &mut BTreeSet<u32>) {
    let input = if code == 205 {
        input
    } else {
        input.at(svc.now())
    };
    let err = refused_atomically(svc, &input);
    assert_eq!(err.code(), code, "{input:?}: {err}");
    seen.insert(code);
    if code != 205 {
        let mut later = fork(svc);
        let input = input.at(Tick(svc.now().0 + 7));
        let mut probe = fork(&later);
        if probe.handle(input.clone(), &mut Vec::new()).is_err() {
            refused_atomically(&mut later, &input);
        }
    }
}

fn name(n: &str) -> LockName {
    LockName::new(n).unwrap()
}

const T0: Tick = Tick(0);

fn acquire(session: SessionId, lock: &str, mode: Mode, wait: Wait, request: Option<u64>) -> Input {
    Input::Acquire {
        now: T0,
        session,
        lock: if lock.is_empty() {
            LockName::default()
        } else {
            name(lock)
        },
        mode,
        wait,
        request,
    }
}

fn keep_alive(session: SessionId, request: Option<u64>) -> Input {
    Input::KeepAlive {
        now: T0,
        session,
        request,
    }
}

fn release(session: SessionId, lock: &str, request: Option<u64>) -> Input {
    Input::Release {
        now: T0,
        session,
        lock: name(lock),
        request,
    }
}

fn release_hold(session: SessionId, lock: &str, token: u64, request: Option<u64>) -> Input {
    Input::ReleaseHold {
        now: T0,
        session,
        lock: name(lock),
        token: fencelock::Token(token),
        request,
    }
}

fn watch(session: SessionId, lock: &str) -> Input {
    Input::Watch {
        now: T0,
        session,
        lock: name(lock),
        request: None,
    }
}

fn unwatch(session: SessionId, lock: &str) -> Input {
    Input::Unwatch {
        now: T0,
        session,
        lock: name(lock),
        request: None,
    }
}

fn cancel(session: SessionId, lock: &str, request: Option<u64>) -> Input {
    Input::Cancel {
        now: T0,
        session,
        lock: name(lock),
        request,
    }
}

/// Every service error, each from the state `base` reached by random inputs. Inputs are
/// written with `now` 0 and stamped with the service's time when applied.
fn every_service_error(base: &Svc, seen: &mut BTreeSet<u32>) {
    use Mode::{Exclusive as X, Shared as S};
    let at = |v: &Svc, i: Input| i.at(v.now());
    // Which table each 301 came from: every one of them must be provoked.
    let mut full: BTreeSet<String> = BTreeSet::new();
    // 101 unknown session
    let mut v = fork(base);
    let ghost = SessionId(v.next_session_id().0 + 100);
    refused(&mut v, keep_alive(ghost, None), 101, seen);
    refused(&mut v, acquire(ghost, "zq", X, Wait::None, None), 101, seen);
    // 102 not holder, 103 not queued
    let a = open(&mut v);
    refused(&mut v, release(a, "zq", None), 102, seen);
    refused(&mut v, cancel(a, "zq", None), 103, seen);
    // 104 already queued, 105 mode mismatch
    let b = open(&mut v);
    let i = at(&v, acquire(a, "zq", X, Wait::None, None));
    ok(&mut v, i);
    let i = at(&v, acquire(b, "zq", X, Wait::Forever, None));
    ok(&mut v, i);
    refused(&mut v, acquire(b, "zq", X, Wait::Forever, None), 104, seen);
    refused(&mut v, acquire(b, "zq", S, Wait::None, None), 104, seen);
    refused(&mut v, acquire(a, "zq", S, Wait::None, None), 105, seen);
    refused(&mut v, release(b, "zq", None), 102, seen);
    refused(&mut v, cancel(a, "zq", None), 103, seen);
    // a release naming a token a does not hold zq with (its own is `held`)
    let held = v
        .holders("zq")
        .find(|h| h.session == a)
        .expect("a holds zq")
        .token;
    refused(&mut v, release_hold(a, "zq", held.0 + 1, None), 102, seen);
    refused(&mut v, release_hold(b, "zq", held.0, None), 102, seen);
    // 106 stale request, 107 request reused
    let i = at(&v, keep_alive(a, Some(5)));
    ok(&mut v, i);
    refused(&mut v, keep_alive(a, Some(4)), 106, seen);
    refused(&mut v, release(a, "zq", Some(5)), 107, seen);
    refused(&mut v, release_hold(a, "zq", held.0, Some(5)), 107, seen);
    refused(&mut v, acquire(a, "zq", X, Wait::None, Some(3)), 106, seen);
    // 108 limit mismatch, 207 bad permits (a holds 1 of the 2 permits of zp; zq is plain)
    let p = |count, limit| Mode::Permits { count, limit };
    let i = at(&v, acquire(a, "zp", p(1, 2), Wait::None, None));
    ok(&mut v, i);
    refused(
        &mut v,
        acquire(b, "zp", p(1, 3), Wait::None, None),
        108,
        seen,
    );
    refused(&mut v, acquire(b, "zp", X, Wait::Forever, None), 108, seen);
    refused(
        &mut v,
        acquire(a, "zq", p(1, 2), Wait::None, None),
        108,
        seen,
    );
    refused(
        &mut v,
        acquire(b, "zp", p(0, 2), Wait::Forever, None),
        207,
        seen,
    );
    refused(
        &mut v,
        acquire(b, "zp", p(3, 2), Wait::None, None),
        207,
        seen,
    );
    // 109 not watching, 110 already watching
    refused(&mut v, unwatch(a, "zp"), 109, seen);
    let i = at(&v, watch(a, "zp"));
    ok(&mut v, i);
    refused(&mut v, watch(a, "zp"), 110, seen);
    refused(&mut v, unwatch(b, "zp"), 109, seen);
    // 301 for a lock's watchers: live sessions watch zp until the fifth is refused
    let mut w = fork(&v);
    'full: loop {
        let sessions: Vec<SessionId> = w.sessions().collect();
        for s in sessions {
            let input = at(&w, watch(s, "zp"));
            let mut probe = fork(&w);
            match probe.handle(input.clone(), &mut Vec::new()) {
                Ok(_) => {
                    ok(&mut w, input);
                }
                Err(Error::AlreadyWatching(_)) => {}
                Err(Error::CapacityExceeded(Table::Watchers)) => {
                    refused(&mut w, input, 301, seen);
                    full.insert("watchers".into());
                    break 'full;
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
        open(&mut w);
    }
    // 201 empty name, 202 name too long (max_name_len is 8 here)
    refused(&mut v, acquire(a, "", X, Wait::None, None), 201, seen);
    refused(
        &mut v,
        acquire(a, "123456789", X, Wait::None, None),
        202,
        seen,
    );
    refused(&mut v, cancel(a, "123456789", None), 202, seen);
    // 203 bad ttl
    refused(&mut v, Input::OpenSession { now: T0, ttl: 0 }, 203, seen);
    // 204 deadline overflow, 205 time went backwards
    let now = v.now().0;
    ok(&mut v, Input::Tick { now: Tick(now + 1) });
    refused(
        &mut v,
        Input::OpenSession {
            now: T0,
            ttl: u64::MAX,
        },
        204,
        seen,
    );
    refused(&mut v, Input::Tick { now: Tick(now) }, 205, seen);
    refused(&mut v, keep_alive(a, None).at(Tick(now)), 205, seen);
    let mut w = fork(&v);
    let long = w
        .open_session(w.now(), u64::MAX - now - 1, &mut Vec::new())
        .unwrap()
        .opened()
        .unwrap();
    ok(&mut w, Input::Tick { now: Tick(now + 2) });
    refused(&mut w, keep_alive(long, None), 204, seen);
    // 301 capacity: claims, locks, sessions — each filled from this state.
    let mut w = fork(&v);
    let s = open_or_reuse(&mut w, a);
    let mut i = 0;
    loop {
        let input = at(&w, acquire(s, &format!("c{i}"), X, Wait::None, None));
        let mut probe = fork(&w);
        match probe.handle(input.clone(), &mut Vec::new()) {
            Ok(_) => {
                ok(&mut w, input);
                i += 1;
            }
            Err(Error::CapacityExceeded(t @ (Table::Locks | Table::Claims))) => {
                refused(&mut w, input, 301, seen);
                full.insert(format!("{t:?}").to_lowercase());
                break;
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    // The claim pool full before the lock table: the same state restored into one claim
    // row more than it uses (and lock rows to spare), then new locks taken one by one.
    let u = v.usage();
    let c = v.capacity();
    let mut w = LockService::restore(
        VecStorage::new(
            c.sessions as usize,
            c.locks.max(u.locks + 3) as usize,
            (u.claims + 1) as usize,
        ),
        &v.snapshot_vec(),
    )
    .expect("the state fits");
    let s = open_or_reuse(&mut w, a);
    let mut i = 0;
    loop {
        let input = at(&w, acquire(s, &format!("k{i}"), X, Wait::None, None));
        let mut probe = fork(&w);
        match probe.handle(input.clone(), &mut Vec::new()) {
            Ok(_) => {
                ok(&mut w, input);
                i += 1;
            }
            Err(Error::CapacityExceeded(Table::Claims)) => {
                refused(&mut w, input, 301, seen);
                full.insert("claims".into());
                break;
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    let mut w = fork(&v);
    loop {
        let input = Input::OpenSession {
            now: w.now(),
            ttl: 10,
        };
        let mut probe = fork(&w);
        match probe.handle(input.clone(), &mut Vec::new()) {
            Ok(_) => {
                ok(&mut w, input);
            }
            Err(Error::CapacityExceeded(Table::Sessions)) => {
                refused(&mut w, input, 301, seen);
                full.insert("sessions".into());
                break;
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    // 501 bad frame: before anything, not even the advance.
    let before = v.snapshot_vec();
    for frame in [&[][..], &[0xff, 0xff], &[3, 1, 1, 1, b'a', 9, 9, 9, 9]] {
        let e = v
            .handle_frame(frame, &mut |_: Output| panic!("an event"))
            .unwrap_err();
        assert_eq!(e.code(), 501);
    }
    assert_eq!(v.snapshot_vec(), before);
    seen.insert(501);
    // 502 a bounded sink with less room than max_events: before the advance too, even at a
    // later now.
    let later = Tick(v.now().0 + 50);
    let e = v
        .handle(keep_alive(a, None).at(later), &mut NoRoom)
        .unwrap_err();
    assert_eq!(e.code(), 502);
    assert_eq!(
        v.snapshot_vec(),
        before,
        "a refused sink changed the service"
    );
    seen.insert(502);
    // 301 from the label table: storage with fewer label rows than sessions, a second
    // labelled open (an unlabelled one needs no row and is taken).
    let mut w = LockService::new(VecStorage::with_labels(4, 4, 8, 1), Config::default())
        .expect("a service with one label row");
    let labelled = |w: &Svc| Input::OpenLabeled {
        now: w.now(),
        ttl: 10,
        label: Label::new("worker").expect("a label"),
    };
    let first = labelled(&w);
    ok(&mut w, first);
    let input = labelled(&w);
    let err = refused_atomically(&mut w, &input);
    assert_eq!(err, Error::CapacityExceeded(Table::Labels), "{input:?}");
    let plain = Input::OpenSession {
        now: w.now(),
        ttl: 10,
    };
    ok(&mut w, plain);
    full.insert("labels".into());
    assert_eq!(
        full,
        ["claims", "labels", "locks", "sessions", "watchers"]
            .map(String::from)
            .into(),
        "301 from every table"
    );
}

/// A sink with no room at all.
struct NoRoom;

impl Sink for NoRoom {
    fn event(&mut self, e: Output) {
        panic!("an event reached a sink with no room: {e:?}");
    }
    fn room(&self) -> usize {
        0
    }
}

fn open_or_reuse(v: &mut Svc, a: SessionId) -> SessionId {
    if v.session(a).is_some() {
        a
    } else {
        open(v)
    }
}

fn prefix() -> impl Strategy<Value = Vec<(u8, u8, u8)>> {
    prop::collection::vec((0..8u8, 0..4u8, 0..3u8), 0..25)
}

/// A random, valid-ish history: opens, acquires (permits too), releases, watches, ticks
/// (errors ignored).
fn build(ops: &[(u8, u8, u8)]) -> Svc {
    let mut v = LockService::new(
        VecStorage::new(12, 12, 24),
        Config {
            lock_delay: 2,
            max_name_len: 8,
            ..Config::default()
        },
    )
    .unwrap();
    let mut out: Vec<Output> = Vec::new();
    for &(op, x, y) in ops {
        let sessions: Vec<SessionId> = v.sessions().collect();
        let s = sessions
            .get(x as usize % sessions.len().max(1))
            .copied()
            .unwrap_or(SessionId(1));
        let lock = ["a", "b", "c"][y as usize];
        let now = v.now();
        let _ = match op {
            0 if v.usage().sessions < 8 => v.open_session(now, 3 + x as u64, &mut out),
            0 => Ok(fencelock::Reply::Ticked { now }),
            1 => v.acquire(now, s, lock, Mode::Exclusive, Wait::Forever, None, &mut out),
            2 => v.acquire(
                now,
                s,
                lock,
                Mode::Shared,
                Wait::Until(Tick(now.0 + 3)),
                None,
                &mut out,
            ),
            3 => v.release(now, s, lock, None, &mut out),
            4 => v.keep_alive(now, s, Some(x as u64 + 1), &mut out),
            5 => v.watch(now, s, lock, None, &mut out),
            6 => v.acquire(
                now,
                s,
                "p",
                Mode::Permits {
                    count: 1 + y as u32 % 2,
                    limit: 2,
                },
                Wait::Forever,
                None,
                &mut out,
            ),
            _ => v
                .tick(Tick(now.0 + 1 + x as u64), &mut out)
                .map(|()| fencelock::Reply::Ticked { now }),
        };
    }
    check_service(&v).unwrap();
    v
}

proptest! {
    // Seeded: every run explores the same cases; PROPTEST_RNG_SEED=<n> explores others.
    #![proptest_config(ProptestConfig {
        cases: cases(64),
        rng_seed: proptest::test_runner::RngSeed::Fixed(
            std::env::var("PROPTEST_RNG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x00f3_4c31),
        ),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_service_error_is_atomic(ops in prefix()) {
        let base = build(&ops);
        let mut seen = BTreeSet::new();
        every_service_error(&base, &mut seen);
        let want: BTreeSet<u32> =
            [101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 201, 202, 203, 204, 205, 207, 301, 501, 502].into();
        prop_assert_eq!(seen, want);
    }

    #[test]
    fn gate_errors_are_atomic(tokens in prop::collection::vec((0..3usize, 1..50u64), 1..20)) {
        let names = ["r0", "r1", "r2"];
        let mut gate = FenceGate::new(vec![GateRow::EMPTY; 3]).unwrap();
        for (r, t) in tokens {
            let _ = gate.admit(names[r], Token(t));
        }
        // A resource whose highest is above 1, so the stale refusal below always runs.
        gate.admit("r0", Token(50)).unwrap();
        let mut buf = [0u8; 512];
        let n = gate.snapshot(&mut buf).unwrap();
        let before = buf[..n].to_vec();
        let check = |gate: &FenceGate<Vec<GateRow>>| {
            let mut b = [0u8; 512];
            let n = gate.snapshot(&mut b).unwrap();
            b[..n].to_vec()
        };
        // 402 zero token
        prop_assert_eq!(gate.admit("r0", Token(0)), Err(Error::ZeroToken));
        // 401 stale: below the highest of each known resource
        let known: Vec<(String, Token)> =
            gate.iter().map(|(n, t)| (n.to_string(), t)).filter(|(_, t)| t.0 > 1).collect();
        prop_assert!(!known.is_empty());
        for (name, highest) in known {
            prop_assert_eq!(
                gate.admit(&name, Token(highest.0 - 1)),
                Err(Error::Stale { token: Token(highest.0 - 1), highest })
            );
        }
        // 201 / 202 names
        prop_assert_eq!(gate.admit("", Token(5)).map_err(|e| e.code()), Err(201));
        prop_assert_eq!(gate.admit(&"n".repeat(65), Token(5)).map_err(|e| e.code()), Err(202));
        // 301 a full gate refuses a new resource
        let mut full = FenceGate::new(vec![GateRow::EMPTY; 1]).unwrap();
        full.admit("only", Token(1)).unwrap();
        let full_before = check(&full);
        prop_assert_eq!(full.admit("another", Token(2)), Err(Error::CapacityExceeded(Table::Resources)));
        prop_assert_eq!(check(&full), full_before);
        prop_assert_eq!(check(&gate), before);
    }
}

#[test]
fn config_buffer_and_snapshot_errors_change_nothing() {
    // 206 bad config: no service is built; a keeper with a bad config neither.
    let e = LockService::new(
        VecStorage::new(2, 2, 2),
        Config {
            lock_delay: 0,
            max_name_len: 0,
            ..Config::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.code(), 206);
    assert_eq!(SessionKeeper::new(10, 0, 1).unwrap_err().code(), 206);
    // 502 buffer too small: the service is unchanged and says how much it needs.
    let mut v = build(&[(0, 1, 0), (1, 0, 0), (0, 2, 1), (1, 1, 0)]);
    let before = v.snapshot_vec();
    let mut small = vec![0u8; before.len() - 1];
    assert_eq!(
        v.snapshot(&mut small),
        Err(Error::BufferTooSmall {
            need: before.len() as u32
        })
    );
    assert_eq!(v.snapshot_vec(), before);
    let mut frame = [0u8; 2];
    assert_eq!(
        Input::Tick { now: Tick(1 << 40) }
            .to_frame(&mut frame)
            .unwrap_err()
            .code(),
        502
    );
    // 503 / 504 / 505 restore: refused, the storage comes back, and it still works.
    let mut bad_magic = before.clone();
    bad_magic[0] ^= 1;
    let mut bad_version = before.clone();
    bad_version[SNAPSHOT_MAGIC.len()] = 9;
    let truncated = before[..before.len() - 1].to_vec();
    let mut trailing = before.clone();
    trailing.push(0);
    for (bytes, code) in [
        (bad_magic, 503),
        (bad_version, 504),
        (truncated, 505),
        (trailing, 505),
    ] {
        let (storage, e) = LockService::restore(VecStorage::new(12, 12, 24), &bytes).unwrap_err();
        assert_eq!(e.code(), code, "{e}");
        let again = LockService::restore(storage, &before).expect("storage reusable");
        assert_eq!(again.snapshot_vec(), before);
    }
    // The service that was snapshotted is untouched by all of this, and still works.
    assert_eq!(v.snapshot_vec(), before);
    let later = Tick(v.now().0 + 1);
    v.tick(later, &mut Vec::new()).unwrap();
    check_service(&v).unwrap();
}

/// `PROPTEST_CASES` if set (scripts/test-verify.sh raises it), else the quick default.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
