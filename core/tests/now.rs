//! The contract of `now` (docs/SPEC.md §2): every input carries the host's clock and the
//! service first advances to it exactly as `tick(now)` would, so a host that handles each
//! message as it arrives, without ticking in between, gets the same outcome as one that
//! ticks first. A `now` in the past is refused and changes nothing; an input refused after
//! its advance keeps the advance (and nothing else).

mod common;
use common::*;

use fencelock::{Config, Error, Input, Label, Mode, ReleaseReason::*, SessionId, Tick, Wait};

#[test]
fn keep_alives_handled_as_they_arrive_keep_the_session_without_ticks() {
    // ttl 10, open at 0, keep-alives arrive at 3, 6 and 9 and are handled with no tick
    // between them; then tick(10): the session lives, until 19.
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    for t in [3, 6, 9] {
        assert_eq!(
            keep_alive_at(&mut svc, t, a),
            (reply_kept_alive(t + 10), vec![]),
            "each keep-alive counts from its own now"
        );
    }
    assert_eq!(tick(&mut svc, 10), vec![], "nothing expires at 10");
    assert_eq!(svc.session(a).unwrap().expires_at, Tick(19));
    assert_eq!(svc.poll_timeout(), Some(Tick(19)));
    assert_eq!(tick(&mut svc, 19), vec![expired(a)]);
}

#[test]
fn the_same_messages_with_or_without_ticks_give_the_same_bytes() {
    let mut stamped = svc(4);
    let mut ticked = svc(4);
    let a = open(&mut stamped, 10);
    assert_eq!(open(&mut ticked, 10), a);
    x(&mut stamped, a, "l");
    x(&mut ticked, a, "l");
    for t in [3, 6, 9] {
        let by_itself = keep_alive_at(&mut stamped, t, a);
        assert_eq!(tick(&mut ticked, t), vec![]);
        let after_a_tick = keep_alive(&mut ticked, a);
        assert_eq!(by_itself, after_a_tick, "at {t}");
        assert_eq!(stamped.snapshot_vec(), ticked.snapshot_vec(), "at {t}");
    }
    assert_eq!(tick(&mut stamped, 10), tick(&mut ticked, 10));
    assert_eq!(stamped.snapshot_vec(), ticked.snapshot_vec());
    assert_eq!(holders(&stamped, "l"), vec![(a, Mode::Exclusive, 1)]);
}

#[test]
fn a_message_after_a_deadline_sees_the_deadline_applied_first() {
    // A's session ends at 10 and nobody ticks; B's acquire stamped 12 first expires A
    // (its events lead the returned ones), then is granted the free lock.
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    assert_eq!(
        x_at(&mut svc, 12, b, "l"),
        (reply_x(2), vec![expired(a), released(a, "l", 1, Expired)])
    );
    // and a waiter's deadline that passed before the message ends the wait first
    let c = open(&mut svc, 100);
    acquire(&mut svc, c, "l", Mode::Exclusive, Wait::Until(Tick(15)));
    assert_eq!(
        release_at(&mut svc, 20, b, "l"),
        (reply_released(2), vec![timed_out(c, "l")]),
        "c's wait ended at 15: the release at 20 grants nobody"
    );
}

/// One input of every kind, for session `s`, stamped `now`.
fn every_input(now: Tick, s: SessionId) -> Vec<Input> {
    let lock = name("l");
    vec![
        Input::OpenSession { now, ttl: 5 },
        Input::KeepAlive {
            now,
            session: s,
            request: None,
        },
        Input::CloseSession {
            now,
            session: s,
            request: None,
        },
        Input::Acquire {
            now,
            session: s,
            lock: lock.clone(),
            mode: Mode::Shared,
            wait: Wait::Forever,
            request: None,
        },
        Input::Release {
            now,
            session: s,
            lock: lock.clone(),
            request: None,
        },
        Input::Cancel {
            now,
            session: s,
            lock: lock.clone(),
            request: None,
        },
        Input::Tick { now },
        Input::OpenLabeled {
            now,
            ttl: 5,
            label: Label::new("worker-1").unwrap(),
        },
        Input::Watch {
            now,
            session: s,
            lock: lock.clone(),
            request: None,
        },
        Input::Unwatch {
            now,
            session: s,
            lock,
            request: None,
        },
    ]
}

/// `every_input` holds every kind there is: one of each of `Input::kind`'s names.
#[test]
fn every_input_is_every_kind() {
    let kinds: std::collections::BTreeSet<&str> = every_input(Tick(0), SessionId(1))
        .iter()
        .map(|i| i.kind())
        .collect();
    let all = [
        "open_session",
        "open_labeled",
        "keep_alive",
        "close_session",
        "acquire",
        "release",
        "cancel",
        "tick",
        "watch",
        "unwatch",
    ];
    assert_eq!(kinds, all.into_iter().collect());
}

#[test]
fn an_earlier_now_is_refused_for_every_input_and_changes_nothing() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    x(&mut svc, a, "l");
    tick(&mut svc, 4);
    for input in every_input(Tick(3), a) {
        let e = refused(&mut svc, |v, _now, o| v.handle(input.clone(), o));
        assert_eq!(
            e,
            Error::TimeWentBackwards {
                now: Tick(4),
                requested: Tick(3)
            },
            "{input:?}"
        );
    }
    assert_eq!(svc.now(), Tick(4));
}

#[test]
fn an_input_refused_after_its_advance_keeps_exactly_the_advance() {
    // Every kind of input, refused by its own checks at a later now: the state equals a
    // twin that only ticked to that now, with the same events (`refused_at` compares).
    let mut base = svc_with(
        2,
        4,
        4,
        Config {
            lock_delay: 3,
            max_name_len: 64,
            max_watchers: 4,
        },
    );
    let a = open(&mut base, 10);
    let b = open(&mut base, 100);
    x(&mut base, a, "l");
    x(&mut base, b, "l");
    // at 10 a expires, l enters lock-delay, b waits on; each input below is then refused
    let refusals: Vec<(Input, Error)> = vec![
        (
            Input::OpenLabeled {
                now: Tick(10),
                ttl: 0,
                label: Label::new("worker-1").unwrap(),
            },
            Error::BadTtl,
        ),
        (
            Input::Watch {
                now: Tick(10),
                session: a,
                lock: name("l"),
                request: None,
            },
            Error::UnknownSession(a),
        ),
        (
            Input::Unwatch {
                now: Tick(10),
                session: b,
                lock: name("l"),
                request: None,
            },
            Error::NotWatching(b),
        ),
        (
            Input::OpenSession {
                now: Tick(10),
                ttl: 0,
            },
            Error::BadTtl,
        ),
        (
            Input::KeepAlive {
                now: Tick(10),
                session: a,
                request: None,
            },
            Error::UnknownSession(a),
        ),
        (
            Input::CloseSession {
                now: Tick(10),
                session: a,
                request: None,
            },
            Error::UnknownSession(a),
        ),
        (
            Input::Acquire {
                now: Tick(10),
                session: b,
                lock: name("l"),
                mode: Mode::Shared,
                wait: Wait::None,
                request: None,
            },
            Error::AlreadyQueued(b),
        ),
        (
            Input::Release {
                now: Tick(10),
                session: b,
                lock: name("l"),
                request: None,
            },
            Error::NotHolder(b),
        ),
        (
            Input::Cancel {
                now: Tick(10),
                session: b,
                lock: name("m"),
                request: None,
            },
            Error::NotQueued(b),
        ),
    ];
    for (input, expected) in refusals {
        let mut svc = twin(&base);
        let (e, events) = refused_at(&mut svc, 10, |v, _now, o| v.handle(input.clone(), o));
        assert_eq!(e, expected, "{input:?}");
        assert_eq!(
            events,
            vec![expired(a), released(a, "l", 1, Expired)],
            "{input:?}: the advance's events"
        );
        assert_eq!(svc.now(), Tick(10), "{input:?}: the advance stands");
        assert_eq!(svc.lock_delay_until("l"), Some(Tick(13)));
        assert_eq!(waiters(&svc, "l"), vec![b]);
    }
    // and a refusal whose advance grants (the lock-delay from 10 ends at 13): the grant
    // stands too
    let mut svc = twin(&base);
    tick(&mut svc, 10);
    let (e, events) = refused_at(&mut svc, 13, |v, now, o| {
        v.acquire(now, b, "", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::EmptyName);
    assert_eq!(events, vec![gx(b, "l", 2)]);
    assert_eq!(holders(&svc, "l"), vec![(b, Mode::Exclusive, 2)]);
}

#[test]
fn an_input_at_the_current_now_advances_nothing() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    tick(&mut svc, 5);
    let before = svc.snapshot_vec();
    // a tick to the current now is a no-op; every input at it adds only its own effect
    assert_eq!(tick(&mut svc, 5), vec![]);
    assert_eq!(svc.snapshot_vec(), before);
    assert_eq!(keep_alive(&mut svc, a), (reply_kept_alive(15), vec![]));
    assert_eq!(svc.now(), Tick(5));
}
