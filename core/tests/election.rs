//! Leader election: campaign / resign / leader over acquire and release; the token is the
//! epoch, and a downstream FenceGate bounces the old leader.

mod common;
use common::*;

use fencelock::{Error, FenceGate, GateRow, Leader, Mode, Output, ReleaseReason::*, Token};

#[test]
fn leader_dies_next_candidate_promoted_with_epoch_plus_one_old_leader_bounces() {
    let mut svc = svc(8);
    let e = "election/orders-primary";
    let l1 = open(&mut svc, 10);
    let l2 = open(&mut svc, 100);
    let l3 = open(&mut svc, 100);
    let (_, out) = run(&mut svc, |v, o| v.campaign(l1, e, None, o));
    assert_eq!(out, vec![gx(l1, e, 1)]);
    let (_, out) = run(&mut svc, |v, o| v.campaign(l2, e, None, o));
    assert_eq!(out, vec![queued(l2, e, Mode::Exclusive, 1)]);
    run(&mut svc, |v, o| v.campaign(l3, e, None, o));
    assert_eq!(
        svc.leader(e),
        Some(Leader {
            session: l1,
            epoch: Token(1)
        })
    );

    // The leader acts downstream with its epoch.
    let mut downstream = FenceGate::new([GateRow::EMPTY; 4]);
    downstream.admit("orders", Token(1)).unwrap();

    // The leader's process dies: its session expires; the next candidate is promoted.
    assert_eq!(
        tick(&mut svc, 10),
        vec![
            Output::SessionExpired { session: l1 },
            released(l1, e, 1, Expired),
            gx(l2, e, 2)
        ]
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
    run(&mut svc, |v, o| v.campaign(a, "e", None, o));
    run(&mut svc, |v, o| v.campaign(b, "e", None, o));
    let (_, out) = run(&mut svc, |v, o| v.resign(a, "e", None, o));
    assert_eq!(out, vec![released(a, "e", 1, Released), gx(b, "e", 2)]);
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
        run(&mut svc, |v, o| v.campaign(s, "e", None, o));
    }
    let (_, out) = run(&mut svc, |v, o| v.resign(b, "e", None, o));
    assert_eq!(
        out,
        vec![Output::WaitCancelled {
            session: b,
            lock: name("e")
        }]
    );
    assert_eq!(svc.leader("e").unwrap().session, a);
    assert_eq!(waiters(&svc, "e"), vec![c]);
}

#[test]
fn resign_by_a_stranger_is_not_queued_and_changes_nothing() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    run(&mut svc, |v, o| v.campaign(a, "e", None, o));
    assert_eq!(
        refused(&mut svc, |v, o| v.resign(b, "e", None, o)),
        Error::NotQueued(b)
    );
}

#[test]
fn the_leader_campaigning_again_keeps_its_epoch() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    run(&mut svc, |v, o| v.campaign(a, "e", None, o));
    let (_, out) = run(&mut svc, |v, o| v.campaign(a, "e", None, o));
    assert_eq!(out, vec![gx(a, "e", 1)]);
    assert_eq!(svc.revision(), 1);
}

#[test]
fn no_leader_before_a_campaign_or_after_the_last_resigns() {
    let mut svc = svc(8);
    assert_eq!(svc.leader("e"), None);
    let a = open(&mut svc, 100);
    run(&mut svc, |v, o| v.campaign(a, "e", None, o));
    run(&mut svc, |v, o| v.resign(a, "e", None, o));
    assert_eq!(svc.leader("e"), None);
}

#[test]
fn epochs_keep_rising_across_many_leader_changes() {
    let mut svc = svc(8);
    let mut gate = FenceGate::new([GateRow::EMPTY; 1]);
    let mut last = 0;
    for round in 0..20u64 {
        let s = open(&mut svc, 5);
        run(&mut svc, |v, o| v.campaign(s, "e", None, o));
        let epoch = svc.leader("e").unwrap().epoch;
        assert!(epoch.0 > last);
        last = epoch.0;
        gate.admit("db", epoch).unwrap();
        tick(&mut svc, 5 * (round + 1)); // the leader dies each round
    }
}
