//! Acquire and release: grants, tokens, try-locks, timed waits, shared mode, re-acquire.

mod common;
use common::*;

use fencelock::{Error, Mode, Output, ReleaseReason::*, Tick, Wait};

#[test]
fn a_free_lock_is_granted_with_token_one_then_higher() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    assert_eq!(svc.revision(), 0);
    assert_eq!(x(&mut svc, a, "l"), vec![gx(a, "l", 1)]);
    assert_eq!(x(&mut svc, a, "m"), vec![gx(a, "m", 2)]);
    assert_eq!(svc.revision(), 2);
    assert_eq!(holders(&svc, "l"), vec![(a, Mode::Exclusive, 1)]);
}

#[test]
fn release_emits_released_and_frees_the_lock() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    x(&mut svc, a, "l");
    assert_eq!(
        release(&mut svc, a, "l"),
        vec![released(a, "l", 1, Released)]
    );
    assert_eq!(holders(&svc, "l"), vec![]);
    assert_eq!(svc.locks().count(), 0, "an idle lock entry is evicted");
}

#[test]
fn tokens_keep_rising_after_an_idle_lock_is_evicted() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    for expected in 1..=5 {
        assert_eq!(x(&mut svc, a, "l"), vec![gx(a, "l", expected)]);
        release(&mut svc, a, "l");
        assert_eq!(svc.len().locks, 0);
    }
}

#[test]
fn try_lock_on_a_held_lock_answers_busy_and_queues_nothing() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Exclusive, Wait::None),
        vec![busy(b, "l")]
    );
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Shared, Wait::None),
        vec![busy(b, "l")]
    );
    assert_eq!(waiters(&svc, "l"), vec![]);
    assert_eq!(svc.revision(), 1);
}

#[test]
fn a_deadline_at_or_before_now_behaves_as_try_lock() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    tick(&mut svc, 5);
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(5))),
        vec![busy(b, "l")]
    );
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(2))),
        vec![busy(b, "l")]
    );
    assert_eq!(waiters(&svc, "l"), vec![]);
    // but a free lock is granted whatever the deadline
    assert_eq!(
        acquire(&mut svc, b, "m", Mode::Exclusive, Wait::Until(Tick(0))),
        vec![gx(b, "m", 2)]
    );
}

#[test]
fn a_timed_wait_times_out_at_its_deadline() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(8))),
        vec![queued(b, "l", Mode::Exclusive, 1)]
    );
    assert_eq!(svc.waiters("l").next().unwrap().deadline, Some(Tick(8)));
    assert_eq!(svc.poll_timeout(), Some(Tick(8)));
    assert_eq!(tick(&mut svc, 7), vec![]);
    assert_eq!(
        tick(&mut svc, 8),
        vec![Output::WaitTimedOut {
            session: b,
            lock: name("l")
        }]
    );
    assert_eq!(waiters(&svc, "l"), vec![]);
    // a release now grants nobody
    assert_eq!(
        release(&mut svc, a, "l"),
        vec![released(a, "l", 1, Released)]
    );
}

#[test]
fn a_timed_wait_granted_in_time_is_not_timed_out() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(8)));
    assert_eq!(release(&mut svc, a, "l").last(), Some(&gx(b, "l", 2)));
    assert_eq!(
        svc.poll_timeout(),
        Some(Tick(100)),
        "the wait deadline is unscheduled"
    );
    assert_eq!(tick(&mut svc, 8), vec![]);
    assert_eq!(holders(&svc, "l"), vec![(b, Mode::Exclusive, 2)]);
}

#[test]
fn shared_holders_coexist_each_with_its_own_token() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    let c = open(&mut svc, 10);
    assert_eq!(
        acquire(&mut svc, a, "r", Mode::Shared, Wait::None),
        vec![granted(a, "r", Mode::Shared, 1)]
    );
    assert_eq!(
        acquire(&mut svc, b, "r", Mode::Shared, Wait::None),
        vec![granted(b, "r", Mode::Shared, 2)]
    );
    assert_eq!(
        acquire(&mut svc, c, "r", Mode::Exclusive, Wait::Forever),
        vec![queued(c, "r", Mode::Exclusive, 1)]
    );
    release(&mut svc, a, "r");
    assert_eq!(
        waiters(&svc, "r"),
        vec![c],
        "one shared holder left: the writer still waits"
    );
    assert_eq!(release(&mut svc, b, "r").last(), Some(&gx(c, "r", 3)));
}

#[test]
fn a_shared_request_waits_behind_a_queued_writer() {
    // No writer starvation: a reader arriving after a queued writer queues too.
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let w = open(&mut svc, 10);
    let r = open(&mut svc, 10);
    acquire(&mut svc, a, "r", Mode::Shared, Wait::None);
    x(&mut svc, w, "r");
    assert_eq!(
        acquire(&mut svc, r, "r", Mode::Shared, Wait::Forever),
        vec![queued(r, "r", Mode::Shared, 2)]
    );
    let e = refused(&mut svc, |v, o| {
        v.acquire(r, "r", Mode::Shared, Wait::None, None, o)
    });
    assert_eq!(e, Error::AlreadyQueued(r));
}

#[test]
fn reacquire_by_the_holder_returns_the_same_token() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    for wait in [Wait::None, Wait::Forever, Wait::Until(Tick(3))] {
        assert_eq!(
            acquire(&mut svc, a, "l", Mode::Exclusive, wait),
            vec![gx(a, "l", 1)]
        );
    }
    assert_eq!(svc.revision(), 1);
    assert_eq!(svc.len().claims, 2, "no second hold, no queue entry");
    assert_eq!(waiters(&svc, "l"), vec![b]);
    // shared too
    acquire(&mut svc, a, "r", Mode::Shared, Wait::None);
    assert_eq!(
        acquire(&mut svc, a, "r", Mode::Shared, Wait::None),
        vec![granted(a, "r", Mode::Shared, 2)]
    );
}

#[test]
fn reacquire_in_the_other_mode_is_a_mode_mismatch() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    acquire(&mut svc, a, "r", Mode::Shared, Wait::None);
    let e = refused(&mut svc, |v, o| {
        v.acquire(a, "r", Mode::Exclusive, Wait::Forever, None, o)
    });
    assert_eq!(e, Error::ModeMismatch { held: Mode::Shared });
}

#[test]
fn release_requires_a_hold() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(
        refused(&mut svc, |v, o| v.release(b, "l", None, o)),
        Error::NotHolder(b)
    );
    release(&mut svc, a, "l");
    assert_eq!(
        refused(&mut svc, |v, o| v.release(a, "l", None, o)),
        Error::NotHolder(a)
    );
}

#[test]
fn names_are_compared_bytewise() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "Lock");
    assert_eq!(
        acquire(&mut svc, b, "lock", Mode::Exclusive, Wait::None),
        vec![gx(b, "lock", 2)]
    );
    let full = "é".repeat(32); // 64 bytes of UTF-8
    assert_eq!(
        acquire(&mut svc, b, &full, Mode::Exclusive, Wait::None),
        vec![gx(b, &full, 3)]
    );
}

#[test]
fn handle_dispatches_to_the_typed_methods() {
    use fencelock::Input;
    let mut svc = svc(4);
    let (_, out) = run(&mut svc, |v, o| v.handle(Input::OpenSession { ttl: 4 }, o));
    let a = out[0].session();
    let (_, out) = run(&mut svc, |v, o| {
        v.handle(
            Input::Acquire {
                session: a,
                lock: name("l"),
                mode: Mode::Exclusive,
                wait: Wait::None,
                request: None,
            },
            o,
        )
    });
    assert_eq!(out, vec![gx(a, "l", 1)]);
    let (_, out) = run(&mut svc, |v, o| {
        v.handle(
            Input::Release {
                session: a,
                lock: name("l"),
                request: None,
            },
            o,
        )
    });
    assert_eq!(out, vec![released(a, "l", 1, Released)]);
    let (_, out) = run(&mut svc, |v, o| {
        v.handle(
            Input::KeepAlive {
                session: a,
                request: None,
            },
            o,
        )
    });
    assert_eq!(
        out,
        vec![Output::SessionRenewed {
            session: a,
            expires_at: Tick(4)
        }]
    );
    let (_, out) = run(&mut svc, |v, o| v.handle(Input::Tick { now: Tick(4) }, o));
    assert_eq!(out, vec![Output::SessionExpired { session: a }]);
}
