//! One named test per invariant of docs/SPEC.md §7 (I1–I10), each a small scenario that
//! would break it if the service were wrong. The state invariants are also checked after
//! every input of every test (`common::check_invariants`, through the core's own
//! validator in `restore`) and over random histories (the verification crate
//! `fencelock-tests`: `tests/tests/determinism.rs` and the simulation).

mod common;
use common::*;

use fencelock::{Config, Error, Mode, Output, ReleaseReason, Reply, Tick, Wait};

#[test]
fn inv1_mutual_exclusion() {
    let mut svc = svc(8);
    let (a, b, c) = (open(&mut svc, 50), open(&mut svc, 50), open(&mut svc, 50));
    x(&mut svc, a, "l");
    // an exclusive holder blocks both modes
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Shared, Wait::None),
        (Reply::Busy, vec![])
    );
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Exclusive, Wait::None),
        (Reply::Busy, vec![])
    );
    release(&mut svc, a, "l");
    // shared holders together, but never with an exclusive one
    acquire(&mut svc, a, "l", Mode::Shared, Wait::None);
    acquire(&mut svc, b, "l", Mode::Shared, Wait::None);
    assert_eq!(
        acquire(&mut svc, c, "l", Mode::Exclusive, Wait::None),
        (Reply::Busy, vec![])
    );
    assert_eq!(holders(&svc, "l").len(), 2);
}

#[test]
fn inv2_tokens_strictly_increase_never_zero_across_eviction_and_restore() {
    let mut svc = svc(8);
    let a = open(&mut svc, 50);
    let mut last = 0;
    for round in 0..4 {
        for lock in ["p", "q"] {
            let (reply, _) = x(&mut svc, a, lock);
            let Reply::Granted { token, .. } = reply else {
                panic!("{reply:?}")
            };
            assert!(token.0 > last && token.0 != 0);
            last = token.0;
        }
        release(&mut svc, a, "p");
        release(&mut svc, a, "q");
        assert_eq!(svc.usage().locks, 0, "idle entries evicted");
        if round == 2 {
            let bytes = svc.snapshot_vec();
            svc = fencelock::LockService::restore(fencelock::VecStorage::new(8, 8, 16), &bytes)
                .map_err(|e| e.1)
                .unwrap();
        }
    }
    assert_eq!(x(&mut svc, a, "p"), (reply_x(last + 1), vec![]));
}

#[test]
fn inv3_fifo_one_exclusive_waiter_per_release() {
    let mut svc = svc(8);
    let s: Vec<_> = (0..4).map(|_| open(&mut svc, 50)).collect();
    x(&mut svc, s[0], "l");
    x(&mut svc, s[3], "l");
    x(&mut svc, s[1], "l");
    x(&mut svc, s[2], "l");
    let (reply, out) = release(&mut svc, s[0], "l");
    assert_eq!(reply, reply_released(1));
    assert_eq!(
        out,
        vec![gx(s[3], "l", 2)],
        "one grant, in arrival order, not session order"
    );
    assert_eq!(waiters(&svc, "l"), vec![s[1], s[2]]);
}

#[test]
fn inv4_no_grant_to_the_dead() {
    // the waiter's deadline is the very tick at which the holder expires
    let mut svc = svc(8);
    let holder = open(&mut svc, 10);
    let dead_waiter = open(&mut svc, 10);
    x(&mut svc, holder, "l");
    x(&mut svc, dead_waiter, "l");
    let out = tick(&mut svc, 10);
    assert!(
        !out.iter().any(|o| matches!(o, Output::Granted { .. })),
        "{out:?}"
    );
    assert_eq!(svc.usage().locks, 0);
}

#[test]
fn inv5_atomic_errors() {
    let mut svc = svc_with(2, 1, 2, Config::default());
    let a = open(&mut svc, 10);
    x(&mut svc, a, "l");
    tick(&mut svc, 3);
    // each is refused with a typed error, nothing changed and nothing emitted (`refused`
    // compares the snapshot bytes and the sink)
    let errors = [
        refused(&mut svc, |v, now, o| {
            v.acquire(now, a, "m", Mode::Exclusive, Wait::Forever, Some(1), o)
        }),
        refused(&mut svc, |v, _now, o| v.tick(Tick(2), o)),
        refused(&mut svc, |v, _now, o| v.keep_alive(Tick(2), a, None, o)),
        refused(&mut svc, |v, now, o| v.release(now, a, "m", None, o)),
        refused(&mut svc, |v, now, o| v.open_session(now, 0, o)),
        refused(&mut svc, |v, now, o| {
            v.keep_alive(now, fencelock::SessionId(9), None, o)
        }),
    ];
    assert_eq!(
        errors.map(|e| e.kind()),
        [
            "capacity_exceeded",
            "time_went_backwards",
            "time_went_backwards",
            "not_holder",
            "bad_ttl",
            "unknown_session"
        ]
    );
    // and the refused numbered acquire recorded nothing
    assert_eq!(svc.session(a).unwrap().last_request, 0);
    // refused at a later now: only the advance to that now stands (`refused_at` compares
    // with a twin that just ticked)
    let (e, events) = refused_at(&mut svc, 10, |v, now, o| {
        v.acquire(now, a, "m", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::UnknownSession(a), "a expired in the advance");
    assert_eq!(
        events,
        vec![
            expired(a),
            released(a, "l", 1, fencelock::ReleaseReason::Expired)
        ]
    );
}

#[test]
fn inv6_determinism_same_inputs_same_bytes() {
    let run_once = || {
        let mut svc = svc(8);
        let a = open(&mut svc, 10);
        let b = open(&mut svc, 20);
        x(&mut svc, a, "l");
        acquire(&mut svc, b, "l", Mode::Shared, Wait::Until(Tick(15)));
        let out = tick(&mut svc, 10);
        (out, svc.snapshot_vec())
    };
    assert_eq!(run_once(), run_once());
}

#[test]
fn inv7_nothing_lost_every_output_reaches_the_sink() {
    // one tick expiring everything: every event is delivered, in order, within the bound
    let mut svc = svc(16);
    let s: Vec<_> = (0..8).map(|i| open(&mut svc, 5 + (i % 2) * 100)).collect();
    for (i, id) in s.iter().enumerate() {
        x(&mut svc, *id, &format!("l{}", i % 3));
    }
    let usage = svc.usage();
    let bound = svc.max_events();
    assert_eq!(bound, (usage.sessions + 2 * usage.claims) as usize);
    let out = tick(&mut svc, 5);
    // s[0], s[2], s[4], s[6] expire, in id order: s[0] and s[2] held l0 and l2, s[4] and
    // s[6] waited (their waits end silently); then l0 goes to its next waiter s[3] and l2
    // to s[5] with fresh tokens, in the order the expiries touched them (l1 is still
    // held by s[1]).
    assert_eq!(
        out,
        vec![
            expired(s[0]),
            released(s[0], "l0", 1, ReleaseReason::Expired),
            expired(s[2]),
            released(s[2], "l2", 3, ReleaseReason::Expired),
            expired(s[4]),
            expired(s[6]),
            gx(s[3], "l0", 4),
            gx(s[5], "l2", 5),
        ]
    );
    assert!(out.len() <= bound);
}

#[test]
fn inv8_lock_delay_after_expiry_only() {
    let mut svc = svc_with(
        8,
        8,
        16,
        Config {
            lock_delay: 4,
            max_name_len: 64,
            max_watchers: 4,
        },
    );
    let (a, b) = (open(&mut svc, 10), open(&mut svc, 100));
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    tick(&mut svc, 10);
    assert_eq!(holders(&svc, "l"), vec![]);
    assert_eq!(tick(&mut svc, 13), vec![]);
    assert_eq!(tick(&mut svc, 14), vec![gx(b, "l", 2)]);
    // a release applies none
    let c = open(&mut svc, 100);
    x(&mut svc, c, "l");
    assert_eq!(
        release(&mut svc, b, "l"),
        (reply_released(2), vec![gx(c, "l", 3)])
    );
}

#[test]
fn inv9_idempotent_retries() {
    let mut svc = svc(8);
    let a = open(&mut svc, 10);
    let first = run(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(first, (reply_x(1), vec![]));
    assert_eq!(first, again);
    assert_eq!(svc.revision(), 1);
    let e = refused(&mut svc, |v, now, o| v.release(now, a, "l", Some(0), o));
    assert_eq!(
        e,
        Error::StaleRequest {
            request: 0,
            latest: 1
        }
    );
}

#[test]
fn inv10_reacquire_returns_the_current_grant() {
    let mut svc = svc(8);
    let (a, b) = (open(&mut svc, 10), open(&mut svc, 10));
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(x(&mut svc, a, "l"), (reply_x(1), vec![]));
    assert_eq!(waiters(&svc, "l"), vec![b], "no second queue entry");
    assert_eq!(svc.usage().claims, 2);
}
