//! SessionKeeper: the client's own view of its lease, in the host's time units.

use fencelock::{Error, Lease, SessionKeeper, Tick};

fn keeper() -> SessionKeeper {
    // ttl 10, heartbeat every 3, stop 2 before the lease could expire
    SessionKeeper::new(10, 3, 2).unwrap()
}

#[test]
fn bad_configurations_are_refused_at_construction() {
    let bad = |ttl, interval, margin| SessionKeeper::new(ttl, interval, margin).unwrap_err();
    assert_eq!(
        bad(10, 3, 10),
        Error::BadConfig("margin must be smaller than ttl")
    );
    assert_eq!(
        bad(10, 3, 11),
        Error::BadConfig("margin must be smaller than ttl")
    );
    assert_eq!(
        bad(0, 0, 0),
        Error::BadConfig("margin must be smaller than ttl")
    );
    let interval = Error::BadConfig("heartbeat interval must be in 1..ttl - margin");
    assert_eq!(bad(10, 8, 2), interval); // a heartbeat at 8 lands when the lease is no longer safe
    assert_eq!(bad(10, 9, 2), interval);
    assert_eq!(bad(10, 0, 2), interval);
    assert_eq!(SessionKeeper::new(10, 7, 2).unwrap().config(), (10, 7, 2));
}

#[test]
fn unconfirmed_until_the_first_ack() {
    let mut k = keeper();
    assert_eq!(k.lease(0), Lease::Unconfirmed);
    assert!(!k.may_act(0));
    k.heartbeat_sent(0).unwrap();
    assert_eq!(k.lease(1), Lease::Unconfirmed);
    assert_eq!(k.heartbeat_acked(0), Ok(true));
    assert_eq!(k.lease(1), Lease::Safe { until: 8 });
}

#[test]
fn safe_then_jeopardy_at_ttl_minus_margin_then_expired_at_ttl() {
    let mut k = keeper();
    k.heartbeat_sent(100).unwrap();
    k.heartbeat_acked(100).unwrap();
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
fn the_lease_counts_from_when_the_acked_heartbeat_was_sent_not_when_the_ack_came() {
    let mut k = keeper();
    k.heartbeat_sent(0).unwrap();
    // the ack arrives late, at 6: the lease still runs from 0
    assert_eq!(k.heartbeat_acked(0), Ok(true));
    assert_eq!(k.lease(6), Lease::Safe { until: 8 });
}

#[test]
fn a_late_ack_of_an_older_heartbeat_does_not_extend_the_lease() {
    let mut k = keeper();
    k.heartbeat_sent(0).unwrap();
    k.heartbeat_sent(3).unwrap();
    assert_eq!(k.heartbeat_acked(3), Ok(true));
    assert_eq!(k.heartbeat_acked(0), Ok(false));
    assert_eq!(k.lease(4), Lease::Safe { until: 11 });
    assert_eq!(
        k.heartbeat_acked(3),
        Ok(false),
        "a duplicate ack changes nothing"
    );
}

#[test]
fn an_ack_for_a_heartbeat_never_sent_is_refused() {
    let mut k = keeper();
    assert!(matches!(
        k.heartbeat_acked(0),
        Err(Error::TimeWentBackwards { .. })
    ));
    k.heartbeat_sent(5).unwrap();
    assert_eq!(
        k.heartbeat_acked(6),
        Err(Error::TimeWentBackwards {
            now: Tick(5),
            requested: Tick(6)
        })
    );
    assert_eq!(k.lease(6), Lease::Unconfirmed);
}

#[test]
fn send_times_cannot_go_backwards() {
    let mut k = keeper();
    k.heartbeat_sent(5).unwrap();
    assert_eq!(
        k.heartbeat_sent(4),
        Err(Error::TimeWentBackwards {
            now: Tick(5),
            requested: Tick(4)
        })
    );
    assert_eq!(k.heartbeat_due(0), 8, "the refused send changed nothing");
}

#[test]
fn session_lost_is_final() {
    let mut k = keeper();
    k.heartbeat_sent(0).unwrap();
    k.heartbeat_acked(0).unwrap();
    k.session_lost();
    assert_eq!(k.lease(1), Lease::Expired);
    k.heartbeat_sent(2).unwrap();
    assert_eq!(k.heartbeat_acked(2), Ok(false));
    assert_eq!(k.lease(2), Lease::Expired);
    assert_eq!(k.poll_timeout(2), None);
}

#[test]
fn heartbeat_due_and_poll_timeout() {
    let mut k = keeper();
    assert_eq!(k.heartbeat_due(7), 7, "nothing sent yet: due now");
    assert_eq!(k.poll_timeout(7), Some(7));
    k.heartbeat_sent(10).unwrap();
    assert_eq!(k.heartbeat_due(11), 13);
    k.heartbeat_acked(10).unwrap();
    // next wake-up: the heartbeat at 13 comes before the lease changes at 18
    assert_eq!(k.poll_timeout(11), Some(13));
    // heartbeats stop being acked: the wake-ups include the lease's state changes
    k.heartbeat_sent(13).unwrap();
    k.heartbeat_sent(16).unwrap();
    assert_eq!(k.poll_timeout(17), Some(18)); // safe -> jeopardy at 18 (before due at 19)
    assert_eq!(k.poll_timeout(18), Some(19)); // heartbeat due
    k.heartbeat_sent(19).unwrap();
    assert_eq!(k.poll_timeout(19), Some(20)); // jeopardy -> expired at 20
    assert_eq!(k.poll_timeout(20), Some(22)); // expired: only heartbeats remain
}

#[test]
fn a_keeper_following_its_schedule_stays_safe() {
    // Heartbeat whenever due, acked after a delay of 1: never outside Safe.
    let mut k = SessionKeeper::new(30, 10, 5).unwrap();
    k.heartbeat_sent(0).unwrap();
    k.heartbeat_acked(0).unwrap();
    let mut pending = None;
    for now in 1..1_000u64 {
        if let Some(sent) = pending.take() {
            assert_eq!(k.heartbeat_acked(sent), Ok(true));
        }
        if now >= k.heartbeat_due(now) {
            k.heartbeat_sent(now).unwrap();
            pending = Some(now);
        }
        assert!(k.may_act(now), "at {now}: {:?}", k.lease(now));
    }
}

#[test]
fn huge_times_saturate_instead_of_overflowing() {
    let mut k = keeper();
    k.heartbeat_sent(u64::MAX - 1).unwrap();
    k.heartbeat_acked(u64::MAX - 1).unwrap();
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
    assert_eq!(k.heartbeat_due(u64::MAX - 1), u64::MAX);
    assert_eq!(k.poll_timeout(u64::MAX - 1), Some(u64::MAX));
}
