//! Ticks: order inside a tick, no grant to the dead, lock-delay, poll_timeout, no-ops.

mod common;
use common::*;

use fencelock::{Config, Mode, Output, ReleaseReason::*, Tick, Wait};

fn delayed(delay: u64) -> Svc {
    svc_with(
        8,
        8,
        16,
        Config {
            lock_delay: delay,
            max_name_len: 64,
        },
    )
}

#[test]
fn expiry_comes_before_any_grant_in_the_same_tick() {
    // a holds; b (expiring at the same tick as a) waits first; c waits second.
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    let c = open(&mut svc, 50);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    x(&mut svc, c, "l");
    assert_eq!(
        tick(&mut svc, 10),
        vec![
            Output::SessionExpired { session: a },
            released(a, "l", 1, Expired),
            Output::SessionExpired { session: b },
            gx(c, "l", 2),
        ],
        "b's deadline had passed: it must not be granted (etcd #9921)"
    );
}

#[test]
fn a_holder_expiring_after_the_waiters_deadline_at_the_same_tick_grants_nobody() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 50);
    x(&mut svc, a, "l");
    acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(10)));
    // order: expire sessions, then time out waits, then grant
    assert_eq!(
        tick(&mut svc, 10),
        vec![
            Output::SessionExpired { session: a },
            released(a, "l", 1, Expired),
            Output::WaitTimedOut {
                session: b,
                lock: name("l")
            },
        ]
    );
    assert_eq!(svc.len().locks, 0);
}

#[test]
fn one_tick_across_many_deadlines_does_everything_due() {
    let mut svc = svc(8);
    let a = open(&mut svc, 3);
    let b = open(&mut svc, 5);
    let c = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    acquire(&mut svc, c, "m", Mode::Exclusive, Wait::None);
    acquire(&mut svc, b, "m", Mode::Exclusive, Wait::Until(Tick(4)));
    x(&mut svc, c, "l");
    assert_eq!(
        tick(&mut svc, 50),
        vec![
            Output::SessionExpired { session: a },
            released(a, "l", 1, Expired),
            Output::SessionExpired { session: b },
            gx(c, "l", 3),
        ]
    );
}

#[test]
fn time_cannot_go_backwards_and_the_same_tick_is_a_no_op() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    x(&mut svc, a, "l");
    tick(&mut svc, 4);
    let before = svc.snapshot_vec();
    assert_eq!(tick(&mut svc, 4), vec![]);
    assert_eq!(svc.snapshot_vec(), before);
    let e = refused(&mut svc, |v, o| v.tick(Tick(3), o));
    assert_eq!(
        e,
        fencelock::Error::TimeWentBackwards {
            now: Tick(4),
            requested: Tick(3)
        }
    );
}

#[test]
fn a_tick_with_nothing_due_changes_nothing_but_the_time() {
    let mut svc = svc(64);
    let mut ids = Vec::new();
    for i in 0..40 {
        let s = open(&mut svc, 1_000 + i);
        x(&mut svc, s, &format!("l{}", i % 7));
        ids.push(s);
    }
    let holders_before: Vec<_> = (0..7).map(|i| holders(&svc, &format!("l{i}"))).collect();
    let waiters_before: Vec<_> = (0..7).map(|i| waiters(&svc, &format!("l{i}"))).collect();
    let poll = svc.poll_timeout();
    assert_eq!(poll, Some(Tick(1_000)));
    let revision = svc.revision();
    for now in [1, 500, 999] {
        assert_eq!(
            tick(&mut svc, now),
            vec![],
            "nothing is due before {poll:?}"
        );
        assert_eq!(svc.now(), Tick(now));
        assert_eq!(svc.poll_timeout(), poll);
        assert_eq!(svc.revision(), revision);
        assert_eq!(svc.sessions().collect::<Vec<_>>(), ids);
        let h: Vec<_> = (0..7).map(|i| holders(&svc, &format!("l{i}"))).collect();
        let w: Vec<_> = (0..7).map(|i| waiters(&svc, &format!("l{i}"))).collect();
        assert_eq!((h, w), (holders_before.clone(), waiters_before.clone()));
    }
}

#[test]
fn poll_timeout_is_the_earliest_of_sessions_waits_and_lock_delays() {
    let mut svc = delayed(30);
    assert_eq!(svc.poll_timeout(), None);
    let a = open(&mut svc, 20);
    let b = open(&mut svc, 100);
    assert_eq!(svc.poll_timeout(), Some(Tick(20)));
    x(&mut svc, a, "l");
    acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(15)));
    assert_eq!(svc.poll_timeout(), Some(Tick(15)));
    tick(&mut svc, 15);
    assert_eq!(svc.poll_timeout(), Some(Tick(20)));
    tick(&mut svc, 20); // a expires: lock-delay until 50
    assert_eq!(svc.poll_timeout(), Some(Tick(50)));
    tick(&mut svc, 50);
    assert_eq!(svc.poll_timeout(), Some(Tick(100)));
    tick(&mut svc, 100);
    assert_eq!(svc.poll_timeout(), None);
}

#[test]
fn lock_delay_holds_a_lock_after_its_holder_expires() {
    let mut svc = delayed(5);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(
        tick(&mut svc, 10),
        vec![
            Output::SessionExpired { session: a },
            released(a, "l", 1, Expired)
        ]
    );
    assert_eq!(svc.lock_delay_until("l"), Some(Tick(15)));
    assert_eq!(svc.poll_timeout(), Some(Tick(15)));
    assert_eq!(tick(&mut svc, 14), vec![]);
    assert_eq!(waiters(&svc, "l"), vec![b]);
    assert_eq!(tick(&mut svc, 15), vec![gx(b, "l", 2)]);
    assert_eq!(svc.lock_delay_until("l"), None);
}

#[test]
fn lock_delay_refuses_new_and_shared_acquires_too() {
    let mut svc = delayed(5);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    acquire(&mut svc, a, "l", Mode::Shared, Wait::None);
    tick(&mut svc, 10);
    // the lock is free, but in lock-delay: a try-lock is busy in either mode
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Shared, Wait::None),
        vec![busy(b, "l")]
    );
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(10))),
        vec![busy(b, "l")]
    );
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Shared, Wait::Until(Tick(12))),
        vec![queued(b, "l", Mode::Shared, 1)]
    );
    assert_eq!(
        tick(&mut svc, 12),
        vec![Output::WaitTimedOut {
            session: b,
            lock: name("l")
        }]
    );
    assert_eq!(svc.len().locks, 1, "the entry stays while the delay runs");
    assert_eq!(tick(&mut svc, 15), vec![]);
    assert_eq!(svc.len().locks, 0, "evicted once the delay is over");
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Shared, Wait::None),
        vec![granted(b, "l", Mode::Shared, 2)]
    );
}

#[test]
fn release_and_close_apply_no_lock_delay() {
    let mut svc = delayed(5);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(release(&mut svc, a, "l").last(), Some(&gx(b, "l", 2)));
    assert_eq!(svc.lock_delay_until("l"), None);
}

#[test]
fn lock_delay_counts_from_the_tick_that_expired_the_session() {
    // The host ticked late: the session's deadline was 10, the tick came at 40. The delay
    // runs from 40, when the service declared the holder dead.
    let mut svc = delayed(5);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    tick(&mut svc, 40);
    assert_eq!(svc.lock_delay_until("l"), Some(Tick(45)));
    assert_eq!(tick(&mut svc, 45), vec![gx(b, "l", 2)]);
}

#[test]
fn zero_lock_delay_grants_at_the_expiry_tick() {
    let mut svc = delayed(0);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(tick(&mut svc, 10).last(), Some(&gx(b, "l", 2)));
}
