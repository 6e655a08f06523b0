//! Wait queues: FIFO, one exclusive waiter woken per release, shared runs, cancel.

mod common;
use common::*;

use fencelock::{Mode, Reply, SessionId, Wait};

fn sessions(svc: &mut Svc, n: usize) -> Vec<SessionId> {
    (0..n).map(|_| open(svc, 1_000)).collect()
}

#[test]
fn waiters_are_granted_in_arrival_order_one_per_release() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 5);
    x(&mut svc, s[0], "l");
    for (i, w) in s[1..].iter().enumerate() {
        assert_eq!(
            x(&mut svc, *w, "l"),
            (reply_queued(Mode::Exclusive, i as u32 + 1), vec![])
        );
    }
    assert_eq!(waiters(&svc, "l"), s[1..].to_vec());
    let mut token = 1;
    for pair in s.windows(2) {
        let (holder, next) = (pair[0], pair[1]);
        token += 1;
        // exactly one Granted: no thundering herd
        assert_eq!(
            release(&mut svc, holder, "l"),
            (reply_released(token - 1), vec![gx(next, "l", token)])
        );
    }
}

#[test]
fn a_release_wakes_the_run_of_shared_waiters_at_the_head_and_stops_at_a_writer() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 6);
    x(&mut svc, s[0], "l");
    acquire(&mut svc, s[1], "l", Mode::Shared, Wait::Forever);
    acquire(&mut svc, s[2], "l", Mode::Shared, Wait::Forever);
    acquire(&mut svc, s[3], "l", Mode::Shared, Wait::Forever);
    x(&mut svc, s[4], "l");
    acquire(&mut svc, s[5], "l", Mode::Shared, Wait::Forever);
    assert_eq!(
        release(&mut svc, s[0], "l"),
        (
            reply_released(1),
            vec![
                granted(s[1], "l", Mode::Shared, 2),
                granted(s[2], "l", Mode::Shared, 3),
                granted(s[3], "l", Mode::Shared, 4),
            ]
        )
    );
    assert_eq!(waiters(&svc, "l"), vec![s[4], s[5]]);
    release(&mut svc, s[1], "l");
    release(&mut svc, s[2], "l");
    assert_eq!(
        release(&mut svc, s[3], "l"),
        (reply_released(4), vec![gx(s[4], "l", 5)])
    );
    assert_eq!(
        release(&mut svc, s[4], "l"),
        (reply_released(5), vec![granted(s[5], "l", Mode::Shared, 6)])
    );
}

#[test]
fn cancel_removes_the_wait_and_keeps_the_others_in_order() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 4);
    x(&mut svc, s[0], "l");
    for w in &s[1..] {
        x(&mut svc, *w, "l");
    }
    assert_eq!(cancel(&mut svc, s[2], "l"), (Reply::Cancelled, vec![]));
    assert_eq!(waiters(&svc, "l"), vec![s[1], s[3]]);
    assert_eq!(
        release(&mut svc, s[0], "l"),
        (reply_released(1), vec![gx(s[1], "l", 2)])
    );
    assert_eq!(
        release(&mut svc, s[1], "l"),
        (reply_released(2), vec![gx(s[3], "l", 3)])
    );
}

#[test]
fn cancelling_a_queued_writer_wakes_the_readers_behind_it() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 4);
    acquire(&mut svc, s[0], "l", Mode::Shared, Wait::None);
    x(&mut svc, s[1], "l");
    acquire(&mut svc, s[2], "l", Mode::Shared, Wait::Forever);
    acquire(&mut svc, s[3], "l", Mode::Shared, Wait::Forever);
    assert_eq!(
        cancel(&mut svc, s[1], "l"),
        (
            Reply::Cancelled,
            vec![
                granted(s[2], "l", Mode::Shared, 2),
                granted(s[3], "l", Mode::Shared, 3),
            ]
        )
    );
}

#[test]
fn cancelling_the_last_waiter_of_a_free_lock_evicts_nothing_held() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 2);
    x(&mut svc, s[0], "l");
    x(&mut svc, s[1], "l");
    cancel(&mut svc, s[1], "l");
    assert_eq!(svc.usage().locks, 1);
    release(&mut svc, s[0], "l");
    assert_eq!(svc.usage().locks, 0);
}

#[test]
fn positions_count_from_one_at_the_head() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 4);
    x(&mut svc, s[0], "l");
    x(&mut svc, s[1], "l");
    x(&mut svc, s[2], "l");
    cancel(&mut svc, s[1], "l");
    assert_eq!(
        x(&mut svc, s[3], "l"),
        (reply_queued(Mode::Exclusive, 2), vec![])
    );
}

#[test]
fn a_waiter_whose_session_closes_leaves_the_queue_silently() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 3);
    x(&mut svc, s[0], "l");
    x(&mut svc, s[1], "l");
    x(&mut svc, s[2], "l");
    assert_eq!(close(&mut svc, s[1]), (Reply::Closed, vec![]));
    assert_eq!(
        release(&mut svc, s[0], "l"),
        (reply_released(1), vec![gx(s[2], "l", 2)])
    );
}

#[test]
fn queues_of_different_locks_are_independent() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 4);
    x(&mut svc, s[0], "a");
    x(&mut svc, s[1], "b");
    x(&mut svc, s[2], "a");
    x(&mut svc, s[3], "b");
    assert_eq!(
        release(&mut svc, s[1], "b"),
        (reply_released(2), vec![gx(s[3], "b", 3)])
    );
    assert_eq!(waiters(&svc, "a"), vec![s[2]]);
}
