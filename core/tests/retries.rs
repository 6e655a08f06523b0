//! Idempotent retries (Raft dissertation §6.3): a repeat of the latest request number
//! replays the recorded answer without applying twice; an older number is refused; an
//! error records nothing.

mod common;
use common::*;

use fencelock::{Error, Mode, Output, ReleaseReason::*, Tick, Wait};

#[test]
fn a_repeated_keep_alive_replays_the_deadline_without_moving_it() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    tick(&mut svc, 2);
    let (_, first) = run(&mut svc, |v, o| v.keep_alive(a, Some(1), o));
    assert_eq!(
        first,
        vec![Output::SessionRenewed {
            session: a,
            expires_at: Tick(12)
        }]
    );
    tick(&mut svc, 5);
    let (_, again) = run(&mut svc, |v, o| v.keep_alive(a, Some(1), o));
    assert_eq!(again, first);
    assert_eq!(
        svc.session(a).unwrap().expires_at,
        Tick(12),
        "not applied twice"
    );
    assert_eq!(svc.session(a).unwrap().last_request, 1);
    let (_, next) = run(&mut svc, |v, o| v.keep_alive(a, Some(2), o));
    assert_eq!(
        next,
        vec![Output::SessionRenewed {
            session: a,
            expires_at: Tick(15)
        }]
    );
}

#[test]
fn a_repeated_acquire_replays_the_grant_without_a_new_token() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let (_, first) = run(&mut svc, |v, o| {
        v.acquire(a, "l", Mode::Exclusive, Wait::None, Some(7), o)
    });
    assert_eq!(first, vec![gx(a, "l", 1)]);
    let (_, again) = run(&mut svc, |v, o| {
        v.acquire(a, "l", Mode::Exclusive, Wait::None, Some(7), o)
    });
    assert_eq!(again, first);
    assert_eq!(svc.revision(), 1);
    assert_eq!(svc.len().claims, 1);
}

#[test]
fn a_repeated_queued_acquire_replays_queued_and_queues_once() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    let (_, first) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Shared, Wait::Forever, Some(1), o)
    });
    assert_eq!(first, vec![queued(b, "l", Mode::Shared, 1)]);
    // without the number this would be AlreadyQueued; with it, it is the same request
    let (_, again) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Shared, Wait::Forever, Some(1), o)
    });
    assert_eq!(again, first);
    assert_eq!(waiters(&svc, "l"), vec![b]);
}

#[test]
fn a_repeated_try_lock_replays_busy_even_once_the_lock_is_free() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    let (_, first) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Exclusive, Wait::None, Some(3), o)
    });
    assert_eq!(first, vec![busy(b, "l")]);
    release(&mut svc, a, "l");
    let (_, again) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Exclusive, Wait::None, Some(3), o)
    });
    assert_eq!(again, first, "the recorded outcome, not a new evaluation");
    let (_, fresh) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Exclusive, Wait::None, Some(4), o)
    });
    assert_eq!(fresh, vec![gx(b, "l", 2)]);
}

#[test]
fn a_repeated_release_does_not_release_the_next_holder() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    let (_, first) = run(&mut svc, |v, o| v.release(a, "l", Some(1), o));
    assert_eq!(first, vec![released(a, "l", 1, Released), gx(b, "l", 2)]);
    let (_, again) = run(&mut svc, |v, o| v.release(a, "l", Some(1), o));
    assert_eq!(
        again,
        vec![released(a, "l", 1, Released)],
        "the answer, not the wake-ups"
    );
    assert_eq!(holders(&svc, "l"), vec![(b, Mode::Exclusive, 2)]);
}

#[test]
fn a_repeated_cancel_replays_wait_cancelled() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    let (_, first) = run(&mut svc, |v, o| v.cancel(b, "l", Some(9), o));
    let (_, again) = run(&mut svc, |v, o| v.cancel(b, "l", Some(9), o));
    assert_eq!(
        first,
        vec![Output::WaitCancelled {
            session: b,
            lock: name("l")
        }]
    );
    assert_eq!(again, first);
}

#[test]
fn an_older_number_is_refused() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    run(&mut svc, |v, o| {
        v.acquire(a, "l", Mode::Exclusive, Wait::None, Some(5), o)
    });
    for old in [0, 1, 4] {
        let e = refused(&mut svc, |v, o| v.release(a, "l", Some(old), o));
        assert_eq!(
            e,
            Error::StaleRequest {
                request: old,
                latest: 5
            }
        );
    }
    // numbers may skip ahead
    run(&mut svc, |v, o| v.release(a, "l", Some(100), o));
    assert_eq!(svc.session(a).unwrap().last_request, 100);
}

#[test]
fn an_error_records_nothing_so_the_retry_is_evaluated_again() {
    let mut svc = svc_with(4, 1, 4, Default::default());
    let a = open(&mut svc, 10);
    x(&mut svc, a, "one");
    let e = refused(&mut svc, |v, o| {
        v.acquire(a, "two", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(e, Error::CapacityExceeded(fencelock::Table::Locks));
    assert_eq!(svc.session(a).unwrap().last_request, 0);
    release(&mut svc, a, "one");
    let (_, out) = run(&mut svc, |v, o| {
        v.acquire(a, "two", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(out, vec![gx(a, "two", 2)]);
}

#[test]
fn unnumbered_inputs_neither_check_nor_record() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    run(&mut svc, |v, o| v.keep_alive(a, Some(4), o));
    keep_alive(&mut svc, a);
    x(&mut svc, a, "l");
    assert_eq!(svc.session(a).unwrap().last_request, 4);
    let (_, again) = run(&mut svc, |v, o| v.keep_alive(a, Some(4), o));
    assert_eq!(
        again,
        vec![Output::SessionRenewed {
            session: a,
            expires_at: Tick(10)
        }]
    );
}

#[test]
fn a_retried_close_finds_the_session_gone() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    run(&mut svc, |v, o| v.close_session(a, Some(1), o));
    assert_eq!(
        refused(&mut svc, |v, o| v.close_session(a, Some(1), o)),
        Error::UnknownSession(a)
    );
}

#[test]
fn a_retried_resign_replays_even_after_the_next_leader_took_over() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    run(&mut svc, |v, o| v.campaign(a, "e", Some(1), o));
    run(&mut svc, |v, o| v.campaign(b, "e", Some(1), o));
    let (_, first) = run(&mut svc, |v, o| v.resign(a, "e", Some(2), o));
    assert_eq!(first, vec![released(a, "e", 1, Released), gx(b, "e", 2)]);
    let (_, again) = run(&mut svc, |v, o| v.resign(a, "e", Some(2), o));
    assert_eq!(again, vec![released(a, "e", 1, Released)]);
    assert_eq!(svc.leader("e").unwrap().session, b);
    // a candidate's resign (a cancel) replays too
    let c = open(&mut svc, 10);
    run(&mut svc, |v, o| v.campaign(c, "e", Some(1), o));
    let (_, first) = run(&mut svc, |v, o| v.resign(c, "e", Some(2), o));
    let (_, again) = run(&mut svc, |v, o| v.resign(c, "e", Some(2), o));
    assert_eq!(first, again);
}

#[test]
fn request_numbers_survive_snapshot_and_restore() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let (_, first) = run(&mut svc, |v, o| {
        v.acquire(a, "l", Mode::Exclusive, Wait::None, Some(3), o)
    });
    let bytes = svc.snapshot_vec();
    let mut restored = fencelock::LockService::restore(fencelock::VecStorage::new(4, 4, 8), &bytes)
        .map_err(|e| e.1)
        .unwrap();
    let (_, again) = run(&mut restored, |v, o| {
        v.acquire(a, "l", Mode::Exclusive, Wait::None, Some(3), o)
    });
    assert_eq!(again, first);
    let e = refused(&mut restored, |v, o| {
        v.acquire(a, "m", Mode::Exclusive, Wait::None, Some(3), o)
    });
    assert_eq!(e, Error::RequestReused { request: 3 });
}

#[test]
fn a_retried_queued_acquire_granted_since_answers_granted() {
    // The client lost both the Queued and the later Granted and retries its acquire: it
    // must learn it holds the lock, since no second Granted will ever come.
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Exclusive, Wait::Forever, Some(1), o)
    });
    release(&mut svc, a, "l");
    let (_, again) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Exclusive, Wait::Forever, Some(1), o)
    });
    assert_eq!(again, vec![gx(b, "l", 2)]);
    assert_eq!(svc.revision(), 2, "nothing applied twice");
}

// A replayed acquire answers from the session's claim on the lock now, never from a
// recorded reply the state has moved past (a client acting on it would wait forever or
// use a dead token).

#[test]
fn a_retried_acquire_whose_wait_timed_out_answers_wait_timed_out() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    let (_, first) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Exclusive, Wait::Until(Tick(5)), Some(1), o)
    });
    assert_eq!(first, vec![queued(b, "l", Mode::Exclusive, 1)]);
    let timed_out = Output::WaitTimedOut {
        session: b,
        lock: name("l"),
    };
    assert_eq!(tick(&mut svc, 5), vec![timed_out.clone()]);
    let before = svc.snapshot_vec();
    let (_, again) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Exclusive, Wait::Until(Tick(5)), Some(1), o)
    });
    assert_eq!(again, vec![timed_out], "no longer queued: not Queued");
    assert_eq!(
        svc.snapshot_vec(),
        before,
        "nothing applied, nothing recorded"
    );
    assert_eq!(waiters(&svc, "l"), vec![]);
}

#[test]
fn a_retried_acquire_whose_hold_ended_answers_released_with_the_recorded_token() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    let (_, first) = run(&mut svc, |v, o| {
        v.acquire(a, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(first, vec![gx(a, "l", 1)]);
    release(&mut svc, a, "l"); // unnumbered: the latest number is still 1
    x(&mut svc, b, "l");
    let before = svc.snapshot_vec();
    let (_, again) = run(&mut svc, |v, o| {
        v.acquire(a, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(
        again,
        vec![released(a, "l", 1, Released)],
        "the hold the reply answered has ended: not a stale Granted"
    );
    assert_eq!(
        svc.snapshot_vec(),
        before,
        "nothing applied, nothing recorded"
    );
    assert_eq!(holders(&svc, "l"), vec![(b, Mode::Exclusive, 2)]);
}

#[test]
fn a_retried_acquire_still_queued_answers_its_current_position() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    let c = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, c, "l");
    let (_, first) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Shared, Wait::Forever, Some(1), o)
    });
    assert_eq!(first, vec![queued(b, "l", Mode::Shared, 2)]);
    cancel(&mut svc, c, "l");
    let before = svc.snapshot_vec();
    let (_, again) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Shared, Wait::Forever, Some(1), o)
    });
    assert_eq!(again, vec![queued(b, "l", Mode::Shared, 1)]);
    assert_eq!(
        svc.snapshot_vec(),
        before,
        "nothing applied, nothing recorded"
    );
    assert_eq!(waiters(&svc, "l"), vec![b]);
}

#[test]
fn a_retried_busy_acquire_queued_since_answers_queued() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    let c = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, c, "l");
    let (_, first) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(first, vec![busy(b, "l")]);
    // an unnumbered acquire queues it without moving the latest number
    acquire(&mut svc, b, "l", Mode::Shared, Wait::Forever);
    let (_, again) = run(&mut svc, |v, o| {
        v.acquire(b, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(again, vec![queued(b, "l", Mode::Shared, 2)]);
    assert_eq!(waiters(&svc, "l"), vec![c, b]);
}

#[test]
fn a_retried_acquire_holding_again_answers_the_current_token() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let (_, first) = run(&mut svc, |v, o| {
        v.acquire(a, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(first, vec![gx(a, "l", 1)]);
    release(&mut svc, a, "l");
    acquire(&mut svc, a, "l", Mode::Shared, Wait::None);
    let (_, again) = run(&mut svc, |v, o| {
        v.acquire(a, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(again, vec![granted(a, "l", Mode::Shared, 2)]);
    assert_eq!(svc.revision(), 2, "nothing applied twice");
}

#[test]
fn an_input_names_its_session_and_request_number() {
    use fencelock::{Input, LockName, Mode, SessionId, Tick, Wait};
    let s = SessionId(7);
    let lock = LockName::new("a").unwrap();
    let with = [
        Input::KeepAlive {
            session: s,
            request: Some(3),
        },
        Input::CloseSession {
            session: s,
            request: Some(3),
        },
        Input::Acquire {
            session: s,
            lock: lock.clone(),
            mode: Mode::Shared,
            wait: Wait::None,
            request: Some(3),
        },
        Input::Release {
            session: s,
            lock: lock.clone(),
            request: Some(3),
        },
        Input::Cancel {
            session: s,
            lock: lock.clone(),
            request: Some(3),
        },
    ];
    for i in &with {
        assert_eq!((i.session(), i.request()), (Some(s), Some(3)), "{i:?}");
    }
    let unnumbered = Input::Release {
        session: s,
        lock,
        request: None,
    };
    assert_eq!(
        (unnumbered.session(), unnumbered.request()),
        (Some(s), None)
    );
    for i in [Input::OpenSession { ttl: 5 }, Input::Tick { now: Tick(1) }] {
        assert_eq!((i.session(), i.request()), (None, None), "{i:?}");
    }
}
