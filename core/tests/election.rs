//! Leader election: campaign / resign / leader over acquire and release; the token is the
//! epoch, and a downstream FenceGate bounces the old leader.

mod common;
use common::*;

use fencelock::{Error, FenceGate, GateRow, Leader, Mode, ReleaseReason::Expired, Reply, Token};

#[test]
fn leader_dies_next_candidate_promoted_with_epoch_plus_one_old_leader_bounces() {
    let mut svc = svc(8);
    let e = "election/orders-primary";
    let l1 = open(&mut svc, 10);
    let l2 = open(&mut svc, 100);
    let l3 = open(&mut svc, 100);
    let got = run(&mut svc, |v, now, o| v.campaign(now, l1, e, None, o));
    assert_eq!(
        got,
        (reply_x(1), vec![]),
        "it leads: the token is its epoch"
    );
    let got = run(&mut svc, |v, now, o| v.campaign(now, l2, e, None, o));
    assert_eq!(got, (reply_queued(Mode::Exclusive, 1), vec![]));
    run(&mut svc, |v, now, o| v.campaign(now, l3, e, None, o));
    assert_eq!(
        svc.leader(e),
        Some(Leader {
            session: l1,
            epoch: Token(1)
        })
    );

    // The leader acts downstream with its epoch.
    let mut downstream = FenceGate::new([GateRow::EMPTY; 4]).unwrap();
    downstream.admit("orders", Token(1)).unwrap();

    // The leader's process dies: its session expires; the next candidate is promoted.
    assert_eq!(
        tick(&mut svc, 10),
        vec![expired(l1), released(l1, e, 1, Expired), gx(l2, e, 2)]
    );
    let leader = svc.leader(e).unwrap();
    assert_eq!(
        leader,
        Leader {
            session: l2,
            epoch: Token(2)
        }
    );
    downstream.admit("orders", leader.epoch).unwrap();

    // The old leader (split brain for a moment) still acts with epoch 1: it bounces.
    assert_eq!(
        downstream.admit("orders", Token(1)),
        Err(Error::Stale {
            token: Token(1),
            highest: Token(2)
        })
    );
    assert_eq!(waiters(&svc, e), vec![l3]);
}

#[test]
fn resign_steps_down_and_promotes_the_next_candidate() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    run(&mut svc, |v, now, o| v.campaign(now, a, "e", None, o));
    run(&mut svc, |v, now, o| v.campaign(now, b, "e", None, o));
    let got = run(&mut svc, |v, now, o| v.resign(now, a, "e", None, o));
    assert_eq!(got, (reply_released(1), vec![gx(b, "e", 2)]));
    assert_eq!(
        svc.leader("e"),
        Some(Leader {
            session: b,
            epoch: Token(2)
        })
    );
}

#[test]
fn a_candidate_resigning_leaves_the_queue() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    let c = open(&mut svc, 100);
    for s in [a, b, c] {
        run(&mut svc, |v, now, o| v.campaign(now, s, "e", None, o));
    }
    let got = run(&mut svc, |v, now, o| v.resign(now, b, "e", None, o));
    assert_eq!(got, (Reply::Cancelled, vec![]));
    assert_eq!(svc.leader("e").unwrap().session, a);
    assert_eq!(waiters(&svc, "e"), vec![c]);
}

#[test]
fn resign_by_a_stranger_is_not_queued_and_changes_nothing() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    run(&mut svc, |v, now, o| v.campaign(now, a, "e", None, o));
    assert_eq!(
        refused(&mut svc, |v, now, o| v.resign(now, b, "e", None, o)),
        Error::NotQueued(b)
    );
}

#[test]
fn the_leader_campaigning_again_keeps_its_epoch() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    run(&mut svc, |v, now, o| v.campaign(now, a, "e", None, o));
    let got = run(&mut svc, |v, now, o| v.campaign(now, a, "e", None, o));
    assert_eq!(got, (reply_x(1), vec![]));
    assert_eq!(svc.revision(), 1);
}

#[test]
fn no_leader_before_a_campaign_or_after_the_last_resigns() {
    let mut svc = svc(8);
    assert_eq!(svc.leader("e"), None);
    let a = open(&mut svc, 100);
    run(&mut svc, |v, now, o| v.campaign(now, a, "e", None, o));
    let got = run(&mut svc, |v, now, o| v.resign(now, a, "e", None, o));
    assert_eq!(got, (reply_released(1), vec![]));
    assert_eq!(svc.leader("e"), None);
}

#[test]
fn epochs_keep_rising_across_many_leader_changes() {
    let mut svc = svc(8);
    let mut gate = FenceGate::new([GateRow::EMPTY; 1]).unwrap();
    let mut last = 0;
    for round in 0..20u64 {
        let s = open(&mut svc, 5);
        run(&mut svc, |v, now, o| v.campaign(now, s, "e", None, o));
        let epoch = svc.leader("e").unwrap().epoch;
        assert!(epoch.0 > last);
        last = epoch.0;
        gate.admit("db", epoch).unwrap();
        tick(&mut svc, 5 * (round + 1)); // the leader dies each round
    }
}

#[test]
fn whether_a_resigner_leads_is_decided_at_its_now() {
    // a leads until it expires at 10; b is the next candidate. A resign by b stamped 10
    // (no tick before it) finds b leading after the advance: it steps down (Released).
    let mut svc = svc(8);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    run(&mut svc, |v, now, o| v.campaign(now, a, "e", None, o));
    run(&mut svc, |v, now, o| v.campaign(now, b, "e", None, o));
    let got = run_at(&mut svc, 10, |v, now, o| v.resign(now, b, "e", None, o));
    assert_eq!(
        got,
        (
            reply_released(2),
            vec![expired(a), released(a, "e", 1, Expired), gx(b, "e", 2)]
        )
    );
    assert_eq!(svc.leader("e"), None);
}

/// Resign advances once and checks the sink's room once: a sink with exactly
/// `max_events()` room takes the advance's grant and the resign together (regression:
/// resign used to check the room again after its advance had emitted an event).
#[test]
fn resign_with_exactly_max_events_room_is_applied_whole() {
    use fencelock::{Config, LockService, Output, Tick, VecStorage, Wait};
    let config = Config {
        lock_delay: 5,
        max_name_len: 64,
        max_watchers: 4,
    };
    let mut svc = LockService::new(VecStorage::new(4, 4, 8), config).unwrap();
    let mut v: Vec<Output> = Vec::new();
    let a = svc
        .open_session(Tick(0), 10, &mut v)
        .unwrap()
        .opened()
        .unwrap();
    let b = svc
        .open_session(Tick(0), 100, &mut v)
        .unwrap()
        .opened()
        .unwrap();
    let c = svc
        .open_session(Tick(0), 100, &mut v)
        .unwrap()
        .opened()
        .unwrap();
    svc.acquire(
        Tick(0),
        a,
        "l",
        Mode::Exclusive,
        Wait::Forever,
        None,
        &mut v,
    )
    .unwrap();
    svc.acquire(
        Tick(0),
        b,
        "l",
        Mode::Exclusive,
        Wait::Forever,
        None,
        &mut v,
    )
    .unwrap();
    svc.campaign(Tick(0), c, "e", None, &mut v).unwrap();
    svc.tick(Tick(10), &mut v).unwrap(); // a expires: "l" in lock-delay until 15
    assert_eq!(svc.max_events(), 6);
    let mut sink: heapless::Deque<Output, 6> = heapless::Deque::new();
    let reply = svc.resign(Tick(15), c, "e", None, &mut sink).unwrap();
    assert!(matches!(reply, fencelock::Reply::Released { .. }));
    let events: Vec<Output> = sink.into_iter().collect();
    assert!(
        matches!(&events[..], [Output::Granted { session, .. }] if *session == b),
        "{events:?}"
    );
}
