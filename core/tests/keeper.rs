//! SessionKeeper: the client's own view of its lease, in the host's time units.

use fencelock::{Error, Lease, SessionKeeper, Tick, KEEPER_MEMORY};

fn keeper() -> SessionKeeper {
    // ttl 10, a keep-alive every 3, stop 2 before the lease could expire
    SessionKeeper::new(10, 3, 2).unwrap()
}

#[test]
fn bad_configurations_are_refused_at_construction() {
    let bad = |ttl, interval, margin| SessionKeeper::new(ttl, interval, margin).unwrap_err();
    assert_eq!(bad(10, 3, 10), Error::BadConfig("margin must be in 1..ttl"));
    assert_eq!(bad(10, 3, 11), Error::BadConfig("margin must be in 1..ttl"));
    assert_eq!(bad(0, 0, 0), Error::BadConfig("margin must be in 1..ttl"));
    // No margin: the service's tick can begin up to a tick before the client's, so the
    // lease would read safe for up to a tick after the session expired.
    assert_eq!(bad(10, 3, 0), Error::BadConfig("margin must be in 1..ttl"));
    assert_eq!(SessionKeeper::new(10, 8, 1).unwrap().config(), (10, 8, 1));
    let interval = Error::BadConfig("keep-alive interval must be in 1..ttl - margin");
    assert_eq!(bad(10, 8, 2), interval); // a keep-alive at 8 lands when the lease is no longer safe
    assert_eq!(bad(10, 9, 2), interval);
    assert_eq!(bad(10, 0, 2), interval);
    assert_eq!(SessionKeeper::new(10, 7, 2).unwrap().config(), (10, 7, 2));
}

#[test]
fn unconfirmed_until_the_first_ack() {
    let mut k = keeper();
    assert_eq!(k.lease(0), Lease::Unconfirmed);
    assert!(!k.may_act(0));
    k.keep_alive_sent(0).unwrap();
    assert_eq!(k.lease(1), Lease::Unconfirmed);
    assert_eq!(k.keep_alive_acked(0), Ok(true));
    assert_eq!(k.lease(1), Lease::Safe { until: 8 });
}

#[test]
fn safe_then_jeopardy_at_ttl_minus_margin_then_expired_at_ttl() {
    let mut k = keeper();
    k.keep_alive_sent(100).unwrap();
    k.keep_alive_acked(100).unwrap();
    assert_eq!(k.lease(100), Lease::Safe { until: 108 });
    assert_eq!(k.lease(107), Lease::Safe { until: 108 });
    assert!(k.may_act(107));
    assert_eq!(k.lease(108), Lease::Jeopardy { expires_at: 110 });
    assert!(!k.may_act(108));
    assert_eq!(k.lease(109), Lease::Jeopardy { expires_at: 110 });
    assert_eq!(k.lease(110), Lease::Expired);
    assert!(!k.may_act(500));
}

#[test]
fn the_lease_counts_from_when_the_acked_keep_alive_was_sent_not_when_the_ack_came() {
    let mut k = keeper();
    k.keep_alive_sent(0).unwrap();
    // the ack arrives late, at 6: the lease still runs from 0
    assert_eq!(k.keep_alive_acked(0), Ok(true));
    assert_eq!(k.lease(6), Lease::Safe { until: 8 });
}

#[test]
fn a_late_ack_of_an_older_keep_alive_does_not_extend_the_lease() {
    let mut k = keeper();
    k.keep_alive_sent(0).unwrap();
    k.keep_alive_sent(3).unwrap();
    assert_eq!(k.keep_alive_acked(3), Ok(true));
    assert_eq!(k.keep_alive_acked(0), Ok(false));
    assert_eq!(k.lease(4), Lease::Safe { until: 11 });
    assert_eq!(
        k.keep_alive_acked(3),
        Ok(false),
        "a duplicate ack changes nothing"
    );
}

#[test]
fn an_ack_for_a_keep_alive_never_sent_is_refused_and_changes_nothing() {
    let mut k = keeper();
    assert_eq!(
        k.keep_alive_acked(0),
        Err(Error::UnknownKeepAlive { sent_at: 0 }),
        "nothing sent yet"
    );
    // sends at 0 and 6, an ack naming 4: no keep-alive was sent at 4, so it proves nothing
    // about the service's deadline (accepting it would claim safety until 12)
    k.keep_alive_sent(0).unwrap();
    k.keep_alive_acked(0).unwrap();
    k.keep_alive_sent(6).unwrap();
    let before = k;
    assert_eq!(
        k.keep_alive_acked(4),
        Err(Error::UnknownKeepAlive { sent_at: 4 })
    );
    assert_eq!(k, before, "the refused ack changed nothing");
    assert_eq!(k.lease(9), Lease::Jeopardy { expires_at: 10 });
    // the real ack still works afterwards
    assert_eq!(k.keep_alive_acked(6), Ok(true));
    assert_eq!(k.lease(9), Lease::Safe { until: 14 });
}

#[test]
fn an_ack_from_the_future_is_refused() {
    let mut k = keeper();
    k.keep_alive_sent(5).unwrap();
    let before = k;
    assert_eq!(
        k.keep_alive_acked(6),
        Err(Error::UnknownKeepAlive { sent_at: 6 })
    );
    assert_eq!(k, before);
    assert_eq!(k.lease(6), Lease::Unconfirmed);
}

#[test]
fn the_keeper_remembers_the_last_eight_sends() {
    assert_eq!(KEEPER_MEMORY, 8);
    let mut k = SessionKeeper::new(100, 3, 2).unwrap();
    for t in 0..=KEEPER_MEMORY as u64 {
        k.keep_alive_sent(t).unwrap(); // 9 sends: 0..=8
    }
    // the oldest (the 9th most recent) is forgotten: its ack is refused
    let before = k;
    assert_eq!(
        k.keep_alive_acked(0),
        Err(Error::UnknownKeepAlive { sent_at: 0 })
    );
    assert_eq!(k, before);
    // the 8 most recent are remembered
    assert_eq!(k.keep_alive_acked(1), Ok(true));
    assert_eq!(k.lease(1), Lease::Safe { until: 99 });
    for t in 2..=8 {
        assert_eq!(k.keep_alive_acked(t), Ok(true), "send at {t}");
    }
    assert_eq!(k.lease(1), Lease::Safe { until: 106 });
    // a repeated send time is one send: it does not push an older one out
    k.keep_alive_sent(8).unwrap();
    assert_eq!(k.keep_alive_acked(1), Ok(false), "1 is still remembered");
}

#[test]
fn send_times_cannot_go_backwards() {
    let mut k = keeper();
    k.keep_alive_sent(5).unwrap();
    assert_eq!(
        k.keep_alive_sent(4),
        Err(Error::TimeWentBackwards {
            now: Tick(5),
            requested: Tick(4)
        })
    );
    assert_eq!(k.next_keep_alive(0), 8, "the refused send changed nothing");
}

#[test]
fn session_lost_is_final() {
    let mut k = keeper();
    k.keep_alive_sent(0).unwrap();
    k.keep_alive_acked(0).unwrap();
    k.session_lost();
    assert_eq!(k.lease(1), Lease::Expired);
    k.keep_alive_sent(2).unwrap();
    assert_eq!(k.keep_alive_acked(2), Ok(false));
    assert_eq!(k.lease(2), Lease::Expired);
    assert_eq!(k.poll_timeout(2), None);
}

#[test]
fn next_keep_alive_and_poll_timeout() {
    let mut k = keeper();
    assert_eq!(k.next_keep_alive(7), 7, "nothing sent yet: due now");
    assert_eq!(k.poll_timeout(7), Some(7));
    k.keep_alive_sent(10).unwrap();
    assert_eq!(k.next_keep_alive(11), 13);
    k.keep_alive_acked(10).unwrap();
    // next wake-up: the keep-alive at 13 comes before the lease changes at 18
    assert_eq!(k.poll_timeout(11), Some(13));
    // keep-alives stop being acked: the wake-ups include the lease's state changes
    k.keep_alive_sent(13).unwrap();
    k.keep_alive_sent(16).unwrap();
    assert_eq!(k.poll_timeout(17), Some(18)); // safe -> jeopardy at 18 (before due at 19)
    assert_eq!(k.poll_timeout(18), Some(19)); // keep-alive due
    k.keep_alive_sent(19).unwrap();
    assert_eq!(k.poll_timeout(19), Some(20)); // jeopardy -> expired at 20
    assert_eq!(k.poll_timeout(20), Some(22)); // expired: only keep-alives remain
}

#[test]
fn a_keeper_following_its_schedule_stays_safe() {
    // A keep-alive whenever due, acked after a delay of 1: never outside Safe.
    let mut k = SessionKeeper::new(30, 10, 5).unwrap();
    k.keep_alive_sent(0).unwrap();
    k.keep_alive_acked(0).unwrap();
    let mut pending = None;
    for now in 1..1_000u64 {
        if let Some(sent) = pending.take() {
            assert_eq!(k.keep_alive_acked(sent), Ok(true));
        }
        if now >= k.next_keep_alive(now) {
            k.keep_alive_sent(now).unwrap();
            pending = Some(now);
        }
        assert!(k.may_act(now), "at {now}: {:?}", k.lease(now));
    }
}

#[test]
fn huge_times_saturate_instead_of_overflowing() {
    let mut k = keeper();
    k.keep_alive_sent(u64::MAX - 1).unwrap();
    k.keep_alive_acked(u64::MAX - 1).unwrap();
    assert_eq!(
        k.lease(u64::MAX - 3),
        Lease::Safe {
            until: u64::MAX - 2
        }
    );
    assert_eq!(
        k.lease(u64::MAX - 1),
        Lease::Jeopardy {
            expires_at: u64::MAX
        }
    );
    assert_eq!(k.next_keep_alive(u64::MAX - 1), u64::MAX);
    assert_eq!(k.poll_timeout(u64::MAX - 1), Some(u64::MAX));
}

#[test]
fn a_keeper_fed_the_send_times_agrees_with_a_host_that_never_ticks() {
    // ttl 10, open at 0, keep-alives sent at 3, 6 and 9 and handled as they arrive (no
    // tick between them), then tick(10): the service keeps the session until 19, and the
    // keeper, acked for the send at 9, calls it safe until 17 — the service is no less
    // generous than the client's view (docs/SPEC.md §10).
    use fencelock::{Config, LockService, Output, VecStorage};
    let mut svc = LockService::new(VecStorage::new(2, 2, 4), Config::default()).unwrap();
    let mut events: Vec<Output> = Vec::new();
    let mut k = keeper();
    k.keep_alive_sent(0).unwrap();
    let s = svc
        .open_session(Tick(0), 10, &mut events)
        .unwrap()
        .opened()
        .unwrap();
    k.keep_alive_acked(0).unwrap();
    for t in [3, 6, 9] {
        k.keep_alive_sent(t).unwrap();
        svc.keep_alive(Tick(t), s, None, &mut events).unwrap();
        k.keep_alive_acked(t).unwrap();
    }
    svc.tick(Tick(10), &mut events).unwrap();
    assert_eq!(events, vec![]);
    assert_eq!(svc.session(s).unwrap().expires_at, Tick(19));
    assert_eq!(k.lease(10), Lease::Safe { until: 17 });
    for now in 10..17 {
        assert!(k.may_act(now));
        assert!(svc.session(s).unwrap().expires_at.0 > now);
    }
}
