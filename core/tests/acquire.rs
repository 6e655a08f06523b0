//! Acquire and release: grants, tokens, try-locks, timed waits, shared mode, re-acquire.
//! The caller's answer is its `Reply`; only other sessions' grants and what time ended
//! are events.

mod common;
use common::*;

use fencelock::{Error, Input, Mode, Reply, Tick, Token, Wait};

#[test]
fn a_free_lock_is_granted_with_token_one_then_higher() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    assert_eq!(svc.revision(), 0);
    assert_eq!(x(&mut svc, a, "l"), (reply_x(1), vec![]));
    assert_eq!(x(&mut svc, a, "m"), (reply_x(2), vec![]));
    assert_eq!(svc.revision(), 2);
    assert_eq!(holders(&svc, "l"), vec![(a, Mode::Exclusive, 1)]);
}

#[test]
fn release_replies_released_and_frees_the_lock() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    x(&mut svc, a, "l");
    assert_eq!(
        release(&mut svc, a, "l"),
        (reply_released(1), vec![]),
        "the releaser's own answer is its reply, not an event"
    );
    assert_eq!(holders(&svc, "l"), vec![]);
    assert_eq!(svc.locks().count(), 0, "an idle lock entry is evicted");
}

#[test]
fn tokens_keep_rising_after_an_idle_lock_is_evicted() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    for expected in 1..=5 {
        assert_eq!(x(&mut svc, a, "l"), (reply_x(expected), vec![]));
        release(&mut svc, a, "l");
        assert_eq!(svc.usage().locks, 0);
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
        (Reply::Busy, vec![])
    );
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Shared, Wait::None),
        (Reply::Busy, vec![])
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
        (Reply::Busy, vec![])
    );
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(2))),
        (Reply::Busy, vec![])
    );
    assert_eq!(waiters(&svc, "l"), vec![]);
    // but a free lock is granted whatever the deadline
    assert_eq!(
        acquire(&mut svc, b, "m", Mode::Exclusive, Wait::Until(Tick(0))),
        (reply_x(2), vec![])
    );
    // the deadline is compared with the input's own now, after its advance
    assert_eq!(
        acquire_at(&mut svc, 9, b, "l", Mode::Exclusive, Wait::Until(Tick(9))),
        (Reply::Busy, vec![])
    );
    assert_eq!(waiters(&svc, "l"), vec![]);
}

#[test]
fn a_timed_wait_times_out_at_its_deadline() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(8))),
        (reply_queued(Mode::Exclusive, 1), vec![])
    );
    assert_eq!(svc.waiters("l").next().unwrap().deadline, Some(Tick(8)));
    assert_eq!(svc.poll_timeout(), Some(Tick(8)));
    assert_eq!(tick(&mut svc, 7), vec![]);
    assert_eq!(tick(&mut svc, 8), vec![timed_out(b, "l")]);
    assert_eq!(waiters(&svc, "l"), vec![]);
    // a release now grants nobody
    assert_eq!(release(&mut svc, a, "l"), (reply_released(1), vec![]));
}

/// Timed waits end in the order of their deadlines, not of their arrival: a wait queued
/// later with an earlier deadline times out first, at its own deadline.
#[test]
fn timed_waits_end_in_deadline_order_not_arrival_order() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    let c = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, a, "m");
    acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(20)));
    acquire(&mut svc, c, "m", Mode::Exclusive, Wait::Until(Tick(10)));
    assert_eq!(svc.poll_timeout(), Some(Tick(10)));
    assert_eq!(tick(&mut svc, 10), vec![timed_out(c, "m")]);
    assert_eq!(tick(&mut svc, 19), vec![]);
    assert_eq!(tick(&mut svc, 20), vec![timed_out(b, "l")]);
}

#[test]
fn a_timed_wait_granted_in_time_is_not_timed_out() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(8)));
    assert_eq!(
        release(&mut svc, a, "l"),
        (reply_released(1), vec![gx(b, "l", 2)])
    );
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
        (reply_s(1), vec![])
    );
    assert_eq!(
        acquire(&mut svc, b, "r", Mode::Shared, Wait::None),
        (reply_s(2), vec![])
    );
    assert_eq!(
        acquire(&mut svc, c, "r", Mode::Exclusive, Wait::Forever),
        (reply_queued(Mode::Exclusive, 1), vec![])
    );
    assert_eq!(release(&mut svc, a, "r"), (reply_released(1), vec![]));
    assert_eq!(
        waiters(&svc, "r"),
        vec![c],
        "one shared holder left: the writer still waits"
    );
    assert_eq!(
        release(&mut svc, b, "r"),
        (reply_released(2), vec![gx(c, "r", 3)])
    );
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
        (reply_queued(Mode::Shared, 2), vec![])
    );
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, r, "r", Mode::Shared, Wait::None, None, o)
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
            (reply_x(1), vec![])
        );
    }
    assert_eq!(svc.revision(), 1);
    assert_eq!(svc.usage().claims, 2, "no second hold, no queue entry");
    assert_eq!(waiters(&svc, "l"), vec![b]);
    // shared too
    acquire(&mut svc, a, "r", Mode::Shared, Wait::None);
    assert_eq!(
        acquire(&mut svc, a, "r", Mode::Shared, Wait::None),
        (reply_s(2), vec![])
    );
}

#[test]
fn reacquire_in_the_other_mode_is_a_mode_mismatch() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    acquire(&mut svc, a, "r", Mode::Shared, Wait::None);
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "r", Mode::Exclusive, Wait::Forever, None, o)
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
        refused(&mut svc, |v, now, o| v.release(now, b, "l", None, o)),
        Error::NotHolder(b)
    );
    release(&mut svc, a, "l");
    assert_eq!(
        refused(&mut svc, |v, now, o| v.release(now, a, "l", None, o)),
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
        (reply_x(2), vec![])
    );
    let full = "é".repeat(32); // 64 bytes of UTF-8
    assert_eq!(
        acquire(&mut svc, b, &full, Mode::Exclusive, Wait::None),
        (reply_x(3), vec![])
    );
    assert_eq!(holders(&svc, &full), vec![(b, Mode::Exclusive, 3)]);
}

#[test]
fn handle_dispatches_to_the_typed_methods() {
    let mut svc = svc(4);
    let (reply, out) = run(&mut svc, |v, now, o| {
        v.handle(Input::OpenSession { now, ttl: 4 }, o)
    });
    assert_eq!(out, vec![]);
    let Reply::Opened {
        session: a,
        expires_at,
    } = reply
    else {
        panic!("{reply:?}")
    };
    assert_eq!(expires_at, Tick(4));
    let (reply, out) = run(&mut svc, |v, now, o| {
        v.handle(
            Input::Acquire {
                now,
                session: a,
                lock: name("l"),
                mode: Mode::Exclusive,
                wait: Wait::None,
                request: None,
            },
            o,
        )
    });
    assert_eq!((reply, out), (reply_x(1), vec![]));
    let (reply, out) = run(&mut svc, |v, now, o| {
        v.handle(
            Input::Release {
                now,
                session: a,
                lock: name("l"),
                request: None,
            },
            o,
        )
    });
    assert_eq!((reply, out), (reply_released(1), vec![]));
    let (reply, out) = run(&mut svc, |v, now, o| {
        v.handle(
            Input::KeepAlive {
                now,
                session: a,
                request: None,
            },
            o,
        )
    });
    assert_eq!((reply, out), (reply_kept_alive(4), vec![]));
    let (reply, out) = run_at(&mut svc, 4, |v, now, o| v.handle(Input::Tick { now }, o));
    assert_eq!(
        (reply, out),
        (Reply::Ticked { now: Tick(4) }, vec![expired(a)])
    );
    assert_eq!(reply.token(), None);
    assert_eq!(reply_x(7).token(), Some(Token(7)));
}

/// A lock row that went idle stays indexed for the next acquire of its name, but nothing
/// shows it: the entry is gone from `locks()`, `usage()` and the snapshot, a new name may
/// take its row when the table is otherwise full, and only live entries count against the
/// capacity. A twin restored from the snapshot (which has no idle rows) answers every
/// later input exactly as the original does.
#[test]
fn idle_lock_rows_are_reused_and_invisible() {
    use fencelock::{Table, VecStorage};
    let mut svc =
        fencelock::LockService::new(VecStorage::new(2, 2, 4), Default::default()).unwrap();
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "one");
    x(&mut svc, a, "two");
    release(&mut svc, a, "one");
    release(&mut svc, a, "two");
    assert_eq!(svc.locks().count(), 0);
    assert_eq!(svc.usage().locks, 0);
    assert!(svc.holders("one").next().is_none());
    let mut twin = twin(&svc);
    assert_eq!(twin.snapshot_vec(), svc.snapshot_vec());
    // The same inputs on both: reuse of an idle row by name, a new name taking the oldest
    // idle row, then a full table of live entries.
    type Step = fn(&mut Svc, fencelock::SessionId, fencelock::SessionId) -> String;
    let steps: [Step; 7] = [
        |v, a, _| format!("{:?}", x(v, a, "two")),
        |v, _, b| format!("{:?}", x(v, b, "three")),
        |v, a, b| {
            let r = v.acquire(
                Tick(0),
                b,
                "four",
                Mode::Exclusive,
                Wait::None,
                None,
                &mut Vec::new(),
            );
            assert_eq!(r, Err(Error::CapacityExceeded(Table::Locks)), "{a:?}");
            format!("{r:?}")
        },
        |v, a, _| format!("{:?}", release(v, a, "two")),
        |v, _, b| format!("{:?}", x(v, b, "four")),
        |v, a, _| {
            format!(
                "{:?}",
                acquire(v, a, "three", Mode::Exclusive, Wait::Forever)
            )
        },
        |v, _, b| {
            format!(
                "{:?} {:?}",
                release(v, b, "three"),
                v.locks().collect::<Vec<_>>()
            )
        },
    ];
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step(&mut svc, a, b), step(&mut twin, a, b), "step {i}");
        assert_eq!(svc.snapshot_vec(), twin.snapshot_vec(), "step {i}");
        assert_eq!(svc.usage(), twin.usage(), "step {i}");
        check_invariants(&svc);
    }
    let names: Vec<String> = svc.locks().map(|n| n.to_string()).collect();
    assert_eq!(names, ["three", "four"]);
    assert_eq!(holders(&svc, "three"), vec![(a, Mode::Exclusive, 6)]);
}
