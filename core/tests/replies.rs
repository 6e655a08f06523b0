//! The caller's answer (docs/SPEC.md §3): each input returns its `Reply`, the same through
//! `handle` and `handle_frame` (the typed methods against `handle`: the verification
//! crate's `tests/src/calls.rs`); the events beside it are only those for other sessions or
//! caused by time. (Replays of numbered requests: `retries.rs`.)

mod common;
use common::*;

use fencelock::{Input, Label, Mode, Reply, SessionId, Tick, Token, Wait, MAX_FRAME_LEN};

/// Applies `input` through `handle_frame` on a twin and through `handle` on `svc`: both
/// must give the same reply, events and bytes.
fn both_ways(svc: &mut Svc, input: Input) -> (Reply, Events) {
    let mut framed = twin(svc);
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = input.to_frame(&mut buf).unwrap();
    let mut framed_events = Vec::new();
    let framed_reply = framed.handle_frame(&buf[..n], &mut framed_events).unwrap();
    let now = input.now().0;
    let got = run_at(svc, now, |v, _now, o| v.handle(input, o));
    assert_eq!(
        got,
        (framed_reply, framed_events),
        "frame and typed input agree"
    );
    assert_eq!(framed.snapshot_vec(), svc.snapshot_vec());
    got
}

#[test]
fn every_input_kind_returns_its_reply() {
    let mut svc = svc(4);
    let now = Tick(0);
    let (opened, events) = both_ways(&mut svc, Input::OpenSession { now, ttl: 10 });
    assert_eq!(events, vec![]);
    assert_eq!(
        opened,
        Reply::Opened {
            session: SessionId(1),
            expires_at: Tick(10)
        }
    );
    let a = opened.opened().unwrap();
    let b = open(&mut svc, 10);
    let acquire = |session, lock: &str, mode, wait| Input::Acquire {
        now,
        session,
        lock: name(lock),
        mode,
        wait,
        request: None,
    };
    let cases = [
        (
            Input::KeepAlive {
                now: Tick(2),
                session: a,
                request: None,
            },
            reply_kept_alive(12),
            "kept_alive",
        ),
        (
            acquire(a, "l", Mode::Exclusive, Wait::None),
            reply_x(1),
            "granted",
        ),
        (
            acquire(b, "l", Mode::Shared, Wait::None),
            Reply::Busy,
            "busy",
        ),
        (
            acquire(b, "l", Mode::Shared, Wait::Forever),
            reply_queued(Mode::Shared, 1),
            "queued",
        ),
        (
            Input::Cancel {
                now: Tick(2),
                session: b,
                lock: name("l"),
                request: None,
            },
            Reply::Cancelled,
            "cancelled",
        ),
        (
            Input::Release {
                now: Tick(2),
                session: a,
                lock: name("l"),
                request: None,
            },
            reply_released(1),
            "released",
        ),
        (
            Input::Tick { now: Tick(3) },
            Reply::Ticked { now: Tick(3) },
            "ticked",
        ),
        (
            Input::OpenLabeled {
                now: Tick(3),
                ttl: 10,
                label: Label::new("worker-3").unwrap(),
            },
            Reply::Opened {
                session: SessionId(3),
                expires_at: Tick(13),
            },
            "opened",
        ),
        (
            Input::Watch {
                now: Tick(3),
                session: b,
                lock: name("w"),
                request: None,
            },
            Reply::Watching { holders: 0 },
            "watching",
        ),
        (
            Input::Unwatch {
                now: Tick(3),
                session: b,
                lock: name("w"),
                request: None,
            },
            Reply::Unwatched,
            "unwatched",
        ),
        (
            Input::CloseSession {
                now: Tick(3),
                session: a,
                request: None,
            },
            Reply::Closed,
            "closed",
        ),
    ];
    for (input, expected, kind) in cases {
        let input = if input.now() < svc.now() {
            input.at(svc.now())
        } else {
            input
        };
        let (reply, events) = both_ways(&mut svc, input.clone());
        assert_eq!(reply, expected, "{input:?}");
        assert_eq!(reply.kind(), kind);
        assert_eq!(events, vec![], "{input:?}: nothing for anyone else");
    }
    assert_eq!(Reply::HoldEnded { token: Token(1) }.kind(), "hold_ended");
    assert_eq!(Reply::WaitEnded.kind(), "wait_ended");
    assert_eq!(opened.kind(), "opened");
}

#[test]
fn a_reply_goes_to_the_caller_and_events_to_the_others() {
    // a release answers the releaser (Released) and wakes the next waiter (an event for
    // it); a close answers the closer and tells nobody else about its own holds but the
    // waiter it frees
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    let c = open(&mut svc, 10);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    x(&mut svc, c, "m");
    x(&mut svc, a, "m");
    let (reply, events) = release(&mut svc, a, "l");
    assert_eq!(reply, reply_released(1));
    assert_eq!(events, vec![gx(b, "l", 3)]);
    assert!(events.iter().all(|e| e.session() != a));
    let (reply, events) = close(&mut svc, c);
    assert_eq!(reply, Reply::Closed);
    assert_eq!(
        events,
        vec![
            released(c, "m", 2, fencelock::ReleaseReason::Closed),
            gx(a, "m", 4)
        ]
    );
}

#[test]
fn reply_helpers_name_the_token_and_the_session() {
    let opened = Reply::Opened {
        session: SessionId(4),
        expires_at: Tick(9),
    };
    assert_eq!(opened.opened(), Some(SessionId(4)));
    assert_eq!(opened.token(), None);
    for (r, token) in [
        (reply_x(5), Some(Token(5))),
        (reply_s(6), Some(Token(6))),
        (reply_released(7), Some(Token(7))),
        (Reply::HoldEnded { token: Token(8) }, Some(Token(8))),
        (reply_queued(Mode::Exclusive, 1), None),
        (Reply::Busy, None),
        (Reply::Cancelled, None),
        (Reply::WaitEnded, None),
        (Reply::Closed, None),
        (reply_kept_alive(3), None),
        (Reply::Ticked { now: Tick(1) }, None),
    ] {
        assert_eq!(r.token(), token, "{r:?}");
        assert_eq!(r.opened(), None, "{r:?}");
    }
}
