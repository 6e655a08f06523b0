//! Idempotent retries (Raft dissertation §6.3; docs/SPEC.md §6): a repeat of the latest
//! request number applies nothing twice and returns the recorded reply (an acquire's
//! brought up to date from the session's claim now); an older number is refused; an
//! error records nothing.

mod common;
use common::*;

use fencelock::{Error, Input, LockName, Mode, Reply, SessionId, Tick, Token, Wait};

#[test]
fn a_repeated_keep_alive_replays_the_deadline_without_moving_it() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    tick(&mut svc, 2);
    let first = run(&mut svc, |v, now, o| v.keep_alive(now, a, Some(1), o));
    assert_eq!(first, (reply_kept_alive(12), vec![]));
    tick(&mut svc, 5);
    let again = run(&mut svc, |v, now, o| v.keep_alive(now, a, Some(1), o));
    assert_eq!(again, first);
    assert_eq!(
        svc.session(a).unwrap().expires_at,
        Tick(12),
        "not applied twice"
    );
    assert_eq!(svc.session(a).unwrap().last_request, 1);
    let next = run(&mut svc, |v, now, o| v.keep_alive(now, a, Some(2), o));
    assert_eq!(next, (reply_kept_alive(15), vec![]));
}

#[test]
fn a_repeated_acquire_replays_the_grant_without_a_new_token() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let first = run(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(7), o)
    });
    assert_eq!(first, (reply_x(1), vec![]));
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(7), o)
    });
    assert_eq!(again, first);
    assert_eq!(svc.revision(), 1);
    assert_eq!(svc.usage().claims, 1);
}

#[test]
fn a_repeated_queued_acquire_replays_queued_and_queues_once() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    let first = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Shared, Wait::Forever, Some(1), o)
    });
    assert_eq!(first, (reply_queued(Mode::Shared, 1), vec![]));
    // without the number this would be AlreadyQueued; with it, it is the same request
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Shared, Wait::Forever, Some(1), o)
    });
    assert_eq!(again, first);
    assert_eq!(waiters(&svc, "l"), vec![b]);
}

/// A wait that was granted, and whose hold then ended by a release without a number (or
/// a forced one), answers its repeat `WaitEnded`: what was recorded is `Queued`, and the
/// session holds nothing from it now (docs/SPEC.md §6 words it so).
#[test]
fn a_repeated_queued_acquire_granted_since_and_released_answers_wait_ended() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    let acquire = |svc: &mut Svc| {
        run(svc, |v, now, o| {
            v.acquire(now, b, "l", Mode::Exclusive, Wait::Forever, Some(1), o)
        })
    };
    assert_eq!(acquire(&mut svc).0, reply_queued(Mode::Exclusive, 1));
    release(&mut svc, a, "l");
    assert_eq!(holders(&svc, "l"), vec![(b, Mode::Exclusive, 2)]);
    let (r, _) = run(&mut svc, |v, now, o| {
        v.release_hold(now, b, "l", Token(2), None, o)
    });
    assert_eq!(r, Reply::Released { token: Token(2) });
    assert_eq!(acquire(&mut svc), (Reply::WaitEnded, vec![]));
    assert!(holders(&svc, "l").is_empty(), "the repeat acquired nothing");
}

#[test]
fn a_repeated_try_lock_replays_busy_even_once_the_lock_is_free() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    let first = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Exclusive, Wait::None, Some(3), o)
    });
    assert_eq!(first, (Reply::Busy, vec![]));
    release(&mut svc, a, "l");
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Exclusive, Wait::None, Some(3), o)
    });
    assert_eq!(again, first, "the recorded outcome, not a new evaluation");
    let fresh = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Exclusive, Wait::None, Some(4), o)
    });
    assert_eq!(fresh, (reply_x(2), vec![]));
}

#[test]
fn a_repeated_release_does_not_release_the_next_holder() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    let first = run(&mut svc, |v, now, o| v.release(now, a, "l", Some(1), o));
    assert_eq!(first, (reply_released(1), vec![gx(b, "l", 2)]));
    let again = run(&mut svc, |v, now, o| v.release(now, a, "l", Some(1), o));
    assert_eq!(
        again,
        (reply_released(1), vec![]),
        "the answer, not the wake-ups"
    );
    assert_eq!(holders(&svc, "l"), vec![(b, Mode::Exclusive, 2)]);
}

#[test]
fn a_repeated_cancel_replays_cancelled() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    let first = run(&mut svc, |v, now, o| v.cancel(now, b, "l", Some(9), o));
    let again = run(&mut svc, |v, now, o| v.cancel(now, b, "l", Some(9), o));
    assert_eq!(first, (Reply::Cancelled, vec![]));
    assert_eq!(again, first);
}

#[test]
fn an_older_number_is_refused() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    run(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(5), o)
    });
    for old in [0, 1, 4] {
        let e = refused(&mut svc, |v, now, o| v.release(now, a, "l", Some(old), o));
        assert_eq!(
            e,
            Error::StaleRequest {
                request: old,
                latest: 5
            }
        );
    }
    // numbers may skip ahead
    run(&mut svc, |v, now, o| v.release(now, a, "l", Some(100), o));
    assert_eq!(svc.session(a).unwrap().last_request, 100);
}

#[test]
fn an_error_records_nothing_so_the_retry_is_evaluated_again() {
    let mut svc = svc_with(4, 1, 4, Default::default());
    let a = open(&mut svc, 10);
    x(&mut svc, a, "one");
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "two", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(e, Error::CapacityExceeded(fencelock::Table::Locks));
    assert_eq!(svc.session(a).unwrap().last_request, 0);
    release(&mut svc, a, "one");
    let retry = run(&mut svc, |v, now, o| {
        v.acquire(now, a, "two", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(retry, (reply_x(2), vec![]));
}

#[test]
fn unnumbered_inputs_neither_check_nor_record() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    run(&mut svc, |v, now, o| v.keep_alive(now, a, Some(4), o));
    keep_alive(&mut svc, a);
    x(&mut svc, a, "l");
    assert_eq!(svc.session(a).unwrap().last_request, 4);
    let again = run(&mut svc, |v, now, o| v.keep_alive(now, a, Some(4), o));
    assert_eq!(again, (reply_kept_alive(10), vec![]));
}

#[test]
fn a_retried_close_finds_the_session_gone() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let first = run(&mut svc, |v, now, o| v.close_session(now, a, Some(1), o));
    assert_eq!(first, (Reply::Closed, vec![]));
    assert_eq!(
        refused(&mut svc, |v, now, o| v.close_session(now, a, Some(1), o)),
        Error::UnknownSession(a)
    );
}

#[test]
fn a_retried_resign_replays_even_after_the_next_leader_took_over() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    run(&mut svc, |v, now, o| v.campaign(now, a, "e", Some(1), o));
    run(&mut svc, |v, now, o| v.campaign(now, b, "e", Some(1), o));
    let first = run(&mut svc, |v, now, o| v.resign(now, a, "e", Some(2), o));
    assert_eq!(first, (reply_released(1), vec![gx(b, "e", 2)]));
    let again = run(&mut svc, |v, now, o| v.resign(now, a, "e", Some(2), o));
    assert_eq!(again, (reply_released(1), vec![]));
    assert_eq!(svc.leader("e").unwrap().session, b);
    // a candidate's resign (a cancel) replays too
    let c = open(&mut svc, 10);
    run(&mut svc, |v, now, o| v.campaign(now, c, "e", Some(1), o));
    let first = run(&mut svc, |v, now, o| v.resign(now, c, "e", Some(2), o));
    let again = run(&mut svc, |v, now, o| v.resign(now, c, "e", Some(2), o));
    assert_eq!(first, (Reply::Cancelled, vec![]));
    assert_eq!(first, again);
}

/// The other way round: a candidate's resign (a cancel) retried after that session came to
/// lead (it campaigned again, unnumbered, which records nothing) replays its cancel; it
/// does not step the leader down.
#[test]
fn a_retried_candidate_resign_replays_even_after_it_came_to_lead() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    run(&mut svc, |v, now, o| v.campaign(now, a, "e", None, o));
    run(&mut svc, |v, now, o| v.campaign(now, b, "e", Some(1), o));
    let first = run(&mut svc, |v, now, o| v.resign(now, b, "e", Some(2), o));
    assert_eq!(first, (Reply::Cancelled, vec![]));
    run(&mut svc, |v, now, o| v.resign(now, a, "e", None, o));
    run(&mut svc, |v, now, o| v.campaign(now, b, "e", None, o));
    assert_eq!(svc.leader("e").unwrap().session, b);
    let again = run(&mut svc, |v, now, o| v.resign(now, b, "e", Some(2), o));
    assert_eq!(again, first);
    assert_eq!(svc.leader("e").unwrap().session, b, "still leads");
}

#[test]
fn request_numbers_survive_snapshot_and_restore() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let first = run(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(3), o)
    });
    let mut restored = twin(&svc);
    let again = run(&mut restored, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(3), o)
    });
    assert_eq!(again, first);
    let e = refused(&mut restored, |v, now, o| {
        v.acquire(now, a, "m", Mode::Exclusive, Wait::None, Some(3), o)
    });
    assert_eq!(e, Error::RequestReused { request: 3 });
}

#[test]
fn a_retried_queued_acquire_granted_since_answers_granted() {
    // The client lost both the Queued reply and the later Granted event and retries its
    // acquire: it must learn it holds the lock, since no second Granted will ever come.
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Exclusive, Wait::Forever, Some(1), o)
    });
    release(&mut svc, a, "l");
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Exclusive, Wait::Forever, Some(1), o)
    });
    assert_eq!(again, (reply_x(2), vec![]));
    assert_eq!(svc.revision(), 2, "nothing applied twice");
}

// A replayed acquire answers from the session's claim on the lock now, never from a
// recorded reply the state has moved past (a client acting on it would wait forever or
// use a dead token).

#[test]
fn a_retried_acquire_whose_wait_timed_out_answers_wait_ended() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    let first = run(&mut svc, |v, now, o| {
        v.acquire(
            now,
            b,
            "l",
            Mode::Exclusive,
            Wait::Until(Tick(5)),
            Some(1),
            o,
        )
    });
    assert_eq!(first, (reply_queued(Mode::Exclusive, 1), vec![]));
    assert_eq!(tick(&mut svc, 5), vec![timed_out(b, "l")]);
    let before = svc.snapshot_vec();
    let again = run(&mut svc, |v, now, o| {
        v.acquire(
            now,
            b,
            "l",
            Mode::Exclusive,
            Wait::Until(Tick(5)),
            Some(1),
            o,
        )
    });
    assert_eq!(
        again,
        (Reply::WaitEnded, vec![]),
        "no longer queued: not Queued"
    );
    assert_eq!(
        svc.snapshot_vec(),
        before,
        "nothing applied, nothing recorded"
    );
    assert_eq!(waiters(&svc, "l"), vec![]);
}

#[test]
fn a_retried_acquire_whose_wait_was_cancelled_answers_wait_ended() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Exclusive, Wait::Forever, Some(1), o)
    });
    cancel(&mut svc, b, "l"); // unnumbered: the latest number is still 1
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Exclusive, Wait::Forever, Some(1), o)
    });
    assert_eq!(again, (Reply::WaitEnded, vec![]));
    assert_eq!(waiters(&svc, "l"), vec![], "not queued again");
}

#[test]
fn a_retried_acquire_whose_hold_ended_answers_hold_ended_with_the_recorded_token() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    let first = run(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(first, (reply_x(1), vec![]));
    release(&mut svc, a, "l"); // unnumbered: the latest number is still 1
    x(&mut svc, b, "l");
    let before = svc.snapshot_vec();
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(
        again,
        (Reply::HoldEnded { token: Token(1) }, vec![]),
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
    let first = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Shared, Wait::Forever, Some(1), o)
    });
    assert_eq!(first, (reply_queued(Mode::Shared, 2), vec![]));
    cancel(&mut svc, c, "l");
    let before = svc.snapshot_vec();
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Shared, Wait::Forever, Some(1), o)
    });
    assert_eq!(again, (reply_queued(Mode::Shared, 1), vec![]));
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
    let first = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(first, (Reply::Busy, vec![]));
    // an unnumbered acquire queues it without moving the latest number
    acquire(&mut svc, b, "l", Mode::Shared, Wait::Forever);
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(again, (reply_queued(Mode::Shared, 2), vec![]));
    assert_eq!(waiters(&svc, "l"), vec![c, b]);
}

#[test]
fn a_retried_acquire_holding_again_answers_the_current_token() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let first = run(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(first, (reply_x(1), vec![]));
    release(&mut svc, a, "l");
    acquire(&mut svc, a, "l", Mode::Shared, Wait::None);
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(again, (reply_s(2), vec![]));
    assert_eq!(svc.revision(), 2, "nothing applied twice");
}

/// Each kind of numbered request, replayed later (with time moved on, by its own `now`),
/// returns exactly the reply the original returned, applies nothing and records nothing.
#[test]
fn every_kind_of_numbered_request_replays_exactly_the_recorded_reply() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    let c = open(&mut svc, 100);
    x(&mut svc, c, "held");
    x(&mut svc, c, "busy");
    type Call = fn(&mut Svc, Tick, &mut Events, SessionId, u64) -> Result<Reply, Error>;
    let cases: [(&str, SessionId, Call, Reply); 8] = [
        (
            "keep_alive",
            a,
            |v, now, o, s, n| v.keep_alive(now, s, Some(n), o),
            reply_kept_alive(101),
        ),
        (
            "acquire granted",
            a,
            |v, now, o, s, n| v.acquire(now, s, "free", Mode::Exclusive, Wait::None, Some(n), o),
            reply_x(3),
        ),
        (
            "acquire queued",
            b,
            |v, now, o, s, n| v.acquire(now, s, "held", Mode::Shared, Wait::Forever, Some(n), o),
            reply_queued(Mode::Shared, 1),
        ),
        (
            "acquire busy",
            b,
            |v, now, o, s, n| v.acquire(now, s, "busy", Mode::Exclusive, Wait::None, Some(n), o),
            Reply::Busy,
        ),
        (
            "release",
            a,
            |v, now, o, s, n| v.release(now, s, "free", Some(n), o),
            reply_released(3),
        ),
        (
            "cancel",
            b,
            |v, now, o, s, n| v.cancel(now, s, "held", Some(n), o),
            Reply::Cancelled,
        ),
        (
            "watch",
            a,
            |v, now, o, s, n| v.watch(now, s, "quiet", Some(n), o),
            Reply::Watching { holders: 0 },
        ),
        (
            "unwatch",
            a,
            |v, now, o, s, n| v.unwatch(now, s, "quiet", Some(n), o),
            Reply::Unwatched,
        ),
    ];
    for (number, (what, s, call, expected)) in (11..).zip(cases) {
        let at = svc.now().0 + 1;
        let first = run_at(&mut svc, at, |v, now, o| call(v, now, o, s, number));
        assert_eq!(first, (expected, vec![]), "{what}");
        let before = svc.snapshot_vec();
        let again = run(&mut svc, |v, now, o| call(v, now, o, s, number));
        assert_eq!(again, first, "{what}: the recorded reply");
        assert_eq!(svc.snapshot_vec(), before, "{what}: nothing applied twice");
        let mut ticked = twin(&svc);
        let later = at + 3;
        ticked.tick(Tick(later), &mut Vec::new()).unwrap();
        let again = run_at(&mut svc, later, |v, now, o| call(v, now, o, s, number));
        assert_eq!(again.0, expected, "{what}: the same reply later");
        assert_eq!(
            svc.snapshot_vec(),
            ticked.snapshot_vec(),
            "{what}: a later replay applies only its advance"
        );
    }
}

#[test]
fn an_input_names_its_session_its_request_number_and_its_now() {
    let s = SessionId(7);
    let lock = LockName::new("a").unwrap();
    let now = Tick(11);
    let with = [
        Input::KeepAlive {
            now,
            session: s,
            request: Some(3),
        },
        Input::CloseSession {
            now,
            session: s,
            request: Some(3),
        },
        Input::Acquire {
            now,
            session: s,
            lock: lock.clone(),
            mode: Mode::Shared,
            wait: Wait::None,
            request: Some(3),
        },
        Input::Release {
            now,
            session: s,
            lock: lock.clone(),
            request: Some(3),
        },
        Input::Cancel {
            now,
            session: s,
            lock: lock.clone(),
            request: Some(3),
        },
    ];
    for i in &with {
        assert_eq!((i.session(), i.request()), (Some(s), Some(3)), "{i:?}");
        assert_eq!(i.now(), now, "{i:?}");
        let moved = i.clone().at(Tick(40));
        assert_eq!(moved.now(), Tick(40), "{i:?}");
        assert_eq!(moved.at(now), *i, "only the now changes: {i:?}");
    }
    let unnumbered = Input::Release {
        now,
        session: s,
        lock,
        request: None,
    };
    assert_eq!(
        (unnumbered.session(), unnumbered.request()),
        (Some(s), None)
    );
    for i in [
        Input::OpenSession { now, ttl: 5 },
        Input::Tick { now: Tick(11) },
    ] {
        assert_eq!((i.session(), i.request()), (None, None), "{i:?}");
        assert_eq!(i.now(), now);
        assert_eq!(i.clone().at(Tick(40)).now(), Tick(40));
    }
}
