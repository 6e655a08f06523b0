//! Atomic errors (invariant 5): for every error kind, generated states in which it
//! happens, and a check that the refused call changed nothing (snapshot bytes before ==
//! after, no output) and left every invariant intact.

use std::collections::BTreeSet;

use fencelock::{
    Config, Error, FenceGate, GateRow, Input, LockName, LockService, Mode, Output, SessionId,
    SessionKeeper, Table, Tick, Token, VecStorage, Wait, SNAPSHOT_MAGIC,
};
use fencelock_tests::invariants::check_service;
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
    let mut outs = Vec::new();
    svc.handle(input.clone(), &mut |o| outs.push(o))
        .unwrap_or_else(|e| panic!("setup input {input:?} refused: {e}"));
    outs
}

fn open(svc: &mut Svc) -> SessionId {
    let mut out = |_| {};
    svc.open_session(1000, &mut out).expect("setup open")
}

/// Applies `input`, which must be refused with `code`, and checks atomicity.
fn refused(svc: &mut Svc, input: Input, code: u32, seen: &mut BTreeSet<u32>) {
    let before = svc.snapshot_vec();
    let mut outs = Vec::new();
    let err = svc
        .handle(input.clone(), &mut |o| outs.push(o))
        .expect_err(&format!("{input:?} was accepted"));
    assert_eq!(err.code(), code, "{input:?}: {err}");
    assert!(outs.is_empty(), "{input:?} refused but emitted {outs:?}");
    assert_eq!(
        svc.snapshot_vec(),
        before,
        "{input:?} refused but changed the state"
    );
    check_service(svc).unwrap();
    seen.insert(code);
}

fn name(n: &str) -> LockName {
    LockName::new(n).unwrap()
}

fn acquire(session: SessionId, lock: &str, mode: Mode, wait: Wait, request: Option<u64>) -> Input {
    Input::Acquire {
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

/// Every service error, each from the state `base` reached by random inputs.
fn every_service_error(base: &Svc, seen: &mut BTreeSet<u32>) {
    use Mode::{Exclusive as X, Shared as S};
    // 101 unknown session
    let mut v = fork(base);
    let ghost = SessionId(v.next_session_id().0 + 100);
    refused(
        &mut v,
        Input::KeepAlive {
            session: ghost,
            request: None,
        },
        101,
        seen,
    );
    refused(&mut v, acquire(ghost, "zq", X, Wait::None, None), 101, seen);
    // 102 not holder, 103 not queued
    let a = open(&mut v);
    refused(
        &mut v,
        Input::Release {
            session: a,
            lock: name("zq"),
            request: None,
        },
        102,
        seen,
    );
    refused(
        &mut v,
        Input::Cancel {
            session: a,
            lock: name("zq"),
            request: None,
        },
        103,
        seen,
    );
    // 104 already queued, 105 mode mismatch
    let b = open(&mut v);
    ok(&mut v, acquire(a, "zq", X, Wait::None, None));
    ok(&mut v, acquire(b, "zq", X, Wait::Forever, None));
    refused(&mut v, acquire(b, "zq", X, Wait::Forever, None), 104, seen);
    refused(&mut v, acquire(b, "zq", S, Wait::None, None), 104, seen);
    refused(&mut v, acquire(a, "zq", S, Wait::None, None), 105, seen);
    refused(
        &mut v,
        Input::Release {
            session: b,
            lock: name("zq"),
            request: None,
        },
        102,
        seen,
    );
    refused(
        &mut v,
        Input::Cancel {
            session: a,
            lock: name("zq"),
            request: None,
        },
        103,
        seen,
    );
    // 106 stale request, 107 request reused
    ok(
        &mut v,
        Input::KeepAlive {
            session: a,
            request: Some(5),
        },
    );
    refused(
        &mut v,
        Input::KeepAlive {
            session: a,
            request: Some(4),
        },
        106,
        seen,
    );
    refused(
        &mut v,
        Input::Release {
            session: a,
            lock: name("zq"),
            request: Some(5),
        },
        107,
        seen,
    );
    refused(&mut v, acquire(a, "zq", X, Wait::None, Some(3)), 106, seen);
    // 201 empty name, 202 name too long (max_name_len is 8 here)
    refused(&mut v, acquire(a, "", X, Wait::None, None), 201, seen);
    refused(
        &mut v,
        acquire(a, "123456789", X, Wait::None, None),
        202,
        seen,
    );
    refused(
        &mut v,
        Input::Cancel {
            session: a,
            lock: name("123456789"),
            request: None,
        },
        202,
        seen,
    );
    // 203 bad ttl
    refused(&mut v, Input::OpenSession { ttl: 0 }, 203, seen);
    // 204 deadline overflow, 205 time went backwards
    let now = v.now().0;
    ok(&mut v, Input::Tick { now: Tick(now + 1) });
    refused(&mut v, Input::OpenSession { ttl: u64::MAX }, 204, seen);
    refused(&mut v, Input::Tick { now: Tick(now) }, 205, seen);
    let mut w = fork(&v);
    let mut out = |_| {};
    let long = w.open_session(u64::MAX - now - 1, &mut out).unwrap();
    ok(&mut w, Input::Tick { now: Tick(now + 2) });
    refused(
        &mut w,
        Input::KeepAlive {
            session: long,
            request: None,
        },
        204,
        seen,
    );
    // 301 capacity: claims, locks, sessions — each filled from this state.
    let mut w = fork(&v);
    let s = open_or_reuse(&mut w, a);
    let mut i = 0;
    loop {
        let lock = format!("c{i}");
        let mut outs = Vec::new();
        let before = w.snapshot_vec();
        match w.acquire(s, &lock, X, Wait::None, None, &mut |o| outs.push(o)) {
            Ok(()) => i += 1,
            Err(Error::CapacityExceeded(Table::Locks))
            | Err(Error::CapacityExceeded(Table::Claims)) => {
                assert!(outs.is_empty());
                assert_eq!(w.snapshot_vec(), before);
                seen.insert(301);
                break;
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    let mut w = fork(&v);
    loop {
        let mut out = |_| {};
        let before = w.snapshot_vec();
        match w.open_session(10, &mut out) {
            Ok(_) => {}
            Err(Error::CapacityExceeded(Table::Sessions)) => {
                assert_eq!(w.snapshot_vec(), before);
                break;
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    // 501 bad frame
    let before = v.snapshot_vec();
    for frame in [&[][..], &[0xff, 0xff], &[3, 1, 1, b'a', 9, 9, 9, 9]] {
        let e = v
            .handle_frame(frame, &mut |_| panic!("output"))
            .unwrap_err();
        assert_eq!(e.code(), 501);
    }
    assert_eq!(v.snapshot_vec(), before);
    seen.insert(501);
}

fn open_or_reuse(v: &mut Svc, a: SessionId) -> SessionId {
    if v.session(a).is_some() {
        a
    } else {
        open(v)
    }
}

fn prefix() -> impl Strategy<Value = Vec<(u8, u8, u8)>> {
    prop::collection::vec((0..6u8, 0..4u8, 0..3u8), 0..25)
}

/// A random, valid-ish history: opens, acquires, releases, ticks (errors ignored).
fn build(ops: &[(u8, u8, u8)]) -> Svc {
    let mut v = LockService::new(
        VecStorage::new(12, 12, 24),
        Config {
            lock_delay: 2,
            max_name_len: 8,
        },
    )
    .unwrap();
    let mut out = |_| {};
    for &(op, x, y) in ops {
        let sessions: Vec<SessionId> = v.sessions().collect();
        let s = sessions
            .get(x as usize % sessions.len().max(1))
            .copied()
            .unwrap_or(SessionId(1));
        let lock = ["a", "b", "c"][y as usize];
        let _ = match op {
            0 if v.len().sessions < 8 => v.open_session(3 + x as u64, &mut out).map(|_| ()),
            0 => Ok(()),
            1 => v.acquire(s, lock, Mode::Exclusive, Wait::Forever, None, &mut out),
            2 => v.acquire(
                s,
                lock,
                Mode::Shared,
                Wait::Until(Tick(v.now().0 + 3)),
                None,
                &mut out,
            ),
            3 => v.release(s, lock, None, &mut out),
            4 => v.keep_alive(s, Some(x as u64 + 1), &mut out),
            _ => v.tick(Tick(v.now().0 + 1 + x as u64), &mut out),
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
            [101, 102, 103, 104, 105, 106, 107, 201, 202, 203, 204, 205, 301, 501].into();
        prop_assert_eq!(seen, want);
    }

    #[test]
    fn gate_errors_are_atomic(tokens in prop::collection::vec((0..3usize, 1..50u64), 1..20)) {
        let names = ["r0", "r1", "r2"];
        let mut gate = FenceGate::new(vec![GateRow::EMPTY; 3]);
        for (r, t) in tokens {
            let _ = gate.admit(names[r], Token(t));
        }
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
        // 401 stale: below the highest of a known resource
        let known: Option<(String, Token)> =
            gate.iter().map(|(n, t)| (n.to_string(), t)).find(|(_, t)| t.0 > 1);
        if let Some((name, highest)) = known {
            prop_assert_eq!(
                gate.admit(&name, Token(highest.0 - 1)),
                Err(Error::Stale { token: Token(highest.0 - 1), highest })
            );
        }
        // 201 / 202 names
        prop_assert_eq!(gate.admit("", Token(5)).map_err(|e| e.code()), Err(201));
        prop_assert_eq!(gate.admit(&"n".repeat(65), Token(5)).map_err(|e| e.code()), Err(202));
        // 301 a full gate refuses a new resource
        let mut full = FenceGate::new(vec![GateRow::EMPTY; 1]);
        full.admit("only", Token(1)).unwrap();
        prop_assert_eq!(full.admit("another", Token(2)), Err(Error::CapacityExceeded(Table::Resources)));
        prop_assert_eq!(full.len(), 1);
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
    // The service that was snapshotted is untouched by all of this.
    let mut out = |_| {};
    v.tick(Tick(1), &mut out).unwrap();
    check_service(&v).unwrap();
}

/// `PROPTEST_CASES` if set (scripts/test-verify.sh raises it), else the quick default.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
