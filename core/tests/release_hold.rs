//! `release_hold` (docs/SPEC.md §3): a release of the one hold a token names. It releases
//! that hold exactly as `release` does, and refuses, changing nothing, when the session
//! holds the lock with another token — the case a retried forced release must not touch.

mod common;
use common::*;

use fencelock::{
    Config, Error, Input, LockName, Mode, ReleaseReason, Reply, SessionId, Token, Wait,
};

fn release_hold(svc: &mut Svc, s: SessionId, lock: &str, token: u64) -> (Reply, Events) {
    run(svc, |v, now, o| {
        v.release_hold(now, s, lock, Token(token), None, o)
    })
}

#[test]
fn the_hold_of_its_token_is_released_as_a_release_would() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Forever);
    let mut plain = twin(&svc);

    let by_token = release_hold(&mut svc, a, "l", 1);
    let by_session = release(&mut plain, a, "l");
    assert_eq!(by_token, by_session, "the same reply and events");
    assert_eq!(by_token, (reply_released(1), vec![gx(b, "l", 2)]));
    assert_eq!(svc.snapshot_vec(), plain.snapshot_vec(), "the same state");
}

#[test]
fn a_later_hold_of_the_same_session_is_refused_and_stays() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    x(&mut svc, a, "l");
    release(&mut svc, a, "l");
    // The session took the lock again: token 2 is its hold now, token 1 is over.
    x(&mut svc, a, "l");
    let e = refused(&mut svc, |v, now, o| {
        v.release_hold(now, a, "l", Token(1), None, o)
    });
    assert_eq!(e, Error::NotHolder(a));
    assert_eq!(
        svc.holders("l").map(|h| h.token).collect::<Vec<_>>(),
        [Token(2)]
    );
    assert_eq!(release_hold(&mut svc, a, "l", 2).0, reply_released(2));
}

#[test]
fn a_token_of_another_session_or_a_wait_is_not_a_hold_of_this_one() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Forever);
    // b waits: token 1 is a's hold, not b's; a token no grant has had is nobody's
    for (s, token) in [(b, 1), (a, 7)] {
        let e = refused(&mut svc, |v, now, o| {
            v.release_hold(now, s, "l", Token(token), None, o)
        });
        assert_eq!(e, Error::NotHolder(s));
    }
    let e = refused(&mut svc, |v, now, o| {
        v.release_hold(now, b, "m", Token(1), None, o)
    });
    assert_eq!(e, Error::NotHolder(b), "no such lock");
}

#[test]
fn its_errors_come_in_the_order_of_a_release() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    x(&mut svc, a, "l");
    let nobody = SessionId(99);
    let e = refused(&mut svc, |v, now, o| {
        v.release_hold(now, nobody, "", Token(1), None, o)
    });
    assert_eq!(
        e,
        Error::UnknownSession(nobody),
        "the session before the name"
    );
    let e = refused(&mut svc, |v, now, o| {
        v.release_hold(now, a, "", Token(1), None, o)
    });
    assert_eq!(e, Error::EmptyName);
    run(&mut svc, |v, now, o| v.keep_alive(now, a, Some(5), o));
    let e = refused(&mut svc, |v, now, o| {
        v.release_hold(now, a, "l", Token(7), Some(4), o)
    });
    assert!(matches!(e, Error::StaleRequest { .. }), "{e}");
}

#[test]
fn a_numbered_release_hold_replays_and_its_token_is_part_of_the_request() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    x(&mut svc, a, "l");
    let first = run(&mut svc, |v, now, o| {
        v.release_hold(now, a, "l", Token(1), Some(1), o)
    });
    assert_eq!(first, (reply_released(1), vec![]));
    x(&mut svc, a, "l"); // token 2, unnumbered: the latest number is still 1

    // The repeat replays, and does not release the hold taken since.
    let again = run(&mut svc, |v, now, o| {
        v.release_hold(now, a, "l", Token(1), Some(1), o)
    });
    assert_eq!(again, first);
    assert_eq!(
        svc.holders("l").map(|h| h.token).collect::<Vec<_>>(),
        [Token(2)]
    );

    // The same number with another token, or on a plain release, is another request.
    for e in [
        refused(&mut svc, |v, now, o| {
            v.release_hold(now, a, "l", Token(2), Some(1), o)
        }),
        refused(&mut svc, |v, now, o| v.release(now, a, "l", Some(1), o)),
    ] {
        assert_eq!(e, Error::RequestReused { request: 1 });
    }

    // A plain release's number is not a release-hold's either.
    run(&mut svc, |v, now, o| v.release(now, a, "l", Some(2), o));
    x(&mut svc, a, "l"); // token 3
    let e = refused(&mut svc, |v, now, o| {
        v.release_hold(now, a, "l", Token(3), Some(2), o)
    });
    assert_eq!(e, Error::RequestReused { request: 2 });
}

#[test]
fn the_input_and_its_frame_reach_the_same_method() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    x(&mut svc, a, "l");
    let input = Input::ReleaseHold {
        now: svc.now(),
        session: a,
        lock: LockName::new("l").unwrap(),
        token: Token(1),
        request: Some(3),
    };
    assert_eq!(input.kind(), "release_hold");
    assert_eq!(input.session(), Some(a));
    assert_eq!(input.request(), Some(3));
    let mut buf = [0u8; fencelock::MAX_FRAME_LEN];
    let n = input.to_frame(&mut buf).unwrap();
    assert_eq!(Input::from_frame(&buf[..n]), Ok(input.clone()));
    let (reply, events) = run(&mut svc, |v, _, o| v.handle_frame(&buf[..n], o));
    assert_eq!((reply, events), (reply_released(1), vec![]));
    assert_eq!(svc.holders("l").count(), 0);
    // and `handle` with the input value replays it (request 3 is the latest)
    assert_eq!(
        run(&mut svc, |v, _, o| v.handle(input, o)).0,
        reply_released(1)
    );
}

#[test]
fn among_shared_holders_each_token_is_its_own_sessions_hold() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    let c = open(&mut svc, 10);
    acquire(&mut svc, a, "l", Mode::Shared, Wait::None);
    acquire(&mut svc, b, "l", Mode::Shared, Wait::None);
    acquire(&mut svc, c, "l", Mode::Exclusive, Wait::Forever);
    // a names b's hold: refused, both holds stay, c still waits
    let e = refused(&mut svc, |v, now, o| {
        v.release_hold(now, a, "l", Token(2), None, o)
    });
    assert_eq!(e, Error::NotHolder(a));
    // a's own: released, and nobody is granted while b holds
    assert_eq!(
        release_hold(&mut svc, a, "l", 1),
        (reply_released(1), vec![])
    );
    assert_eq!(svc.holders("l").map(|h| h.session).collect::<Vec<_>>(), [b]);
    // b's: the exclusive waiter is granted
    assert_eq!(
        release_hold(&mut svc, b, "l", 2),
        (reply_released(2), vec![gx(c, "l", 3)])
    );
}

#[test]
fn a_hold_ended_by_expiry_is_not_released_again_and_its_lock_delay_stands() {
    let config = Config {
        lock_delay: 5,
        ..Config::default()
    };
    let mut svc = svc_with(4, 4, 8, config);
    let a = open(&mut svc, 3);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    // a's deadline is 3: the advance to 4 expires it, its hold ends, and l is delayed
    // until 4 + 5; the release by token finds no session
    let (e, events) = refused_at(&mut svc, 4, |v, now, o| {
        v.release_hold(now, a, "l", Token(1), None, o)
    });
    assert_eq!(e, Error::UnknownSession(a));
    assert_eq!(
        events,
        vec![
            fencelock::Output::SessionExpired { session: a },
            released(a, "l", 1, ReleaseReason::Expired),
        ]
    );
    assert_eq!(svc.lock_delay_until("l"), Some(fencelock::Tick(9)));
    // the delay stands: b's try-lock is Busy
    let (r, _) = acquire(&mut svc, b, "l", Mode::Exclusive, Wait::None);
    assert_eq!(r, Reply::Busy);
}
