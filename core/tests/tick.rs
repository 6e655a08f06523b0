//! Ticks: order inside a tick, no grant to the dead, lock-delay, poll_timeout, no-ops.

mod common;
use common::*;

use fencelock::{Config, Error, Mode, ReleaseReason::*, Reply, Tick, Wait};

fn delayed(delay: u64) -> Svc {
    svc_with(
        8,
        8,
        16,
        Config {
            lock_delay: delay,
            max_name_len: 64,
            max_watchers: 4,
        },
    )
}

#[test]
fn expiry_comes_before_any_grant_in_the_same_tick() {
    // a holds; b (expiring at the same tick as a) waits first; c waits second.
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    let c = open(&mut svc, 50);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    x(&mut svc, c, "l");
    assert_eq!(
        tick(&mut svc, 10),
        vec![
            expired(a),
            released(a, "l", 1, Expired),
            expired(b),
            gx(c, "l", 2),
        ],
        "b's deadline had passed: it must not be granted (the lease-expiry race)"
    );
}

#[test]
fn an_advance_grants_locks_in_the_order_it_first_touched_them() {
    // s1 holds a (shared) and then b; s2 shares a. Both expire at 10: s1 touches a (still
    // shared by s2) before b (freed); s2 then frees a. a was touched first, so its waiter
    // is granted first, although b was free before it.
    let mut svc = svc(8);
    let s1 = open(&mut svc, 10);
    let s2 = open(&mut svc, 10);
    let wa = open(&mut svc, 50);
    let wb = open(&mut svc, 50);
    acquire(&mut svc, s1, "a", Mode::Shared, Wait::None);
    x(&mut svc, s1, "b");
    acquire(&mut svc, s2, "a", Mode::Shared, Wait::None);
    x(&mut svc, wa, "a");
    x(&mut svc, wb, "b");
    assert_eq!(
        tick(&mut svc, 10),
        vec![
            expired(s1),
            released(s1, "a", 1, Expired),
            released(s1, "b", 2, Expired),
            expired(s2),
            released(s2, "a", 3, Expired),
            gx(wa, "a", 4),
            gx(wb, "b", 5),
        ]
    );
}

#[test]
fn a_holder_expiring_after_the_waiters_deadline_at_the_same_tick_grants_nobody() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 50);
    x(&mut svc, a, "l");
    acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(10)));
    // order: expire sessions, then time out waits, then grant
    assert_eq!(
        tick(&mut svc, 10),
        vec![expired(a), released(a, "l", 1, Expired), timed_out(b, "l"),]
    );
    assert_eq!(svc.usage().locks, 0);
}

#[test]
fn one_tick_across_many_deadlines_does_everything_due() {
    let mut svc = svc(8);
    let a = open(&mut svc, 3);
    let b = open(&mut svc, 5);
    let c = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    acquire(&mut svc, c, "m", Mode::Exclusive, Wait::None);
    acquire(&mut svc, b, "m", Mode::Exclusive, Wait::Until(Tick(4)));
    x(&mut svc, c, "l");
    assert_eq!(
        tick(&mut svc, 50),
        vec![
            expired(a),
            released(a, "l", 1, Expired),
            expired(b),
            gx(c, "l", 3),
        ]
    );
}

#[test]
fn time_cannot_go_backwards_and_the_same_tick_is_a_no_op() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    x(&mut svc, a, "l");
    tick(&mut svc, 4);
    let before = svc.snapshot_vec();
    assert_eq!(tick(&mut svc, 4), vec![]);
    assert_eq!(svc.snapshot_vec(), before);
    let e = refused(&mut svc, |v, _now, o| v.tick(Tick(3), o));
    assert_eq!(
        e,
        fencelock::Error::TimeWentBackwards {
            now: Tick(4),
            requested: Tick(3)
        }
    );
}

#[test]
fn a_tick_with_nothing_due_changes_nothing_but_the_time() {
    let mut svc = svc(64);
    let mut ids = Vec::new();
    for i in 0..40 {
        let s = open(&mut svc, 1_000 + i);
        x(&mut svc, s, &format!("l{}", i % 7));
        ids.push(s);
    }
    let holders_before: Vec<_> = (0..7).map(|i| holders(&svc, &format!("l{i}"))).collect();
    let waiters_before: Vec<_> = (0..7).map(|i| waiters(&svc, &format!("l{i}"))).collect();
    let poll = svc.poll_timeout();
    assert_eq!(poll, Some(Tick(1_000)));
    let revision = svc.revision();
    for now in [1, 500, 999] {
        assert_eq!(
            tick(&mut svc, now),
            vec![],
            "nothing is due before {poll:?}"
        );
        assert_eq!(svc.now(), Tick(now));
        assert_eq!(svc.poll_timeout(), poll);
        assert_eq!(svc.revision(), revision);
        assert_eq!(svc.sessions().collect::<Vec<_>>(), ids);
        let h: Vec<_> = (0..7).map(|i| holders(&svc, &format!("l{i}"))).collect();
        let w: Vec<_> = (0..7).map(|i| waiters(&svc, &format!("l{i}"))).collect();
        assert_eq!((h, w), (holders_before.clone(), waiters_before.clone()));
    }
}

#[test]
fn poll_timeout_is_the_earliest_of_sessions_waits_and_lock_delays() {
    let mut svc = delayed(30);
    assert_eq!(svc.poll_timeout(), None);
    let a = open(&mut svc, 20);
    let b = open(&mut svc, 100);
    assert_eq!(svc.poll_timeout(), Some(Tick(20)));
    x(&mut svc, a, "l");
    acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(15)));
    assert_eq!(svc.poll_timeout(), Some(Tick(15)));
    tick(&mut svc, 15);
    assert_eq!(svc.poll_timeout(), Some(Tick(20)));
    tick(&mut svc, 20); // a expires: lock-delay until 50
    assert_eq!(svc.poll_timeout(), Some(Tick(50)));
    tick(&mut svc, 50);
    assert_eq!(svc.poll_timeout(), Some(Tick(100)));
    tick(&mut svc, 100);
    assert_eq!(svc.poll_timeout(), None);
}

#[test]
fn lock_delay_holds_a_lock_after_its_holder_expires() {
    let mut svc = delayed(5);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(
        tick(&mut svc, 10),
        vec![expired(a), released(a, "l", 1, Expired)]
    );
    assert_eq!(svc.lock_delay_until("l"), Some(Tick(15)));
    assert_eq!(svc.poll_timeout(), Some(Tick(15)));
    assert_eq!(tick(&mut svc, 14), vec![]);
    assert_eq!(waiters(&svc, "l"), vec![b]);
    assert_eq!(tick(&mut svc, 15), vec![gx(b, "l", 2)]);
    assert_eq!(svc.lock_delay_until("l"), None);
}

#[test]
fn lock_delay_refuses_new_and_shared_acquires_too() {
    let mut svc = delayed(5);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    acquire(&mut svc, a, "l", Mode::Shared, Wait::None);
    tick(&mut svc, 10);
    // the lock is free, but in lock-delay: a try-lock is busy in either mode
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Shared, Wait::None),
        (Reply::Busy, vec![])
    );
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Exclusive, Wait::Until(Tick(10))),
        (Reply::Busy, vec![])
    );
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Shared, Wait::Until(Tick(12))),
        (reply_queued(Mode::Shared, 1), vec![])
    );
    assert_eq!(tick(&mut svc, 12), vec![timed_out(b, "l")]);
    assert_eq!(svc.usage().locks, 1, "the entry stays while the delay runs");
    assert_eq!(tick(&mut svc, 15), vec![]);
    assert_eq!(svc.usage().locks, 0, "evicted once the delay is over");
    assert_eq!(
        acquire(&mut svc, b, "l", Mode::Shared, Wait::None),
        (reply_s(2), vec![])
    );
}

#[test]
fn release_and_close_apply_no_lock_delay() {
    let mut svc = delayed(5);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(
        release(&mut svc, a, "l"),
        (reply_released(1), vec![gx(b, "l", 2)])
    );
    assert_eq!(svc.lock_delay_until("l"), None);
}

#[test]
fn lock_delay_counts_from_the_tick_that_expired_the_session() {
    // The host ticked late: the session's deadline was 10, the tick came at 40. The delay
    // runs from 40, when the service declared the holder dead.
    let mut svc = delayed(5);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    tick(&mut svc, 40);
    assert_eq!(svc.lock_delay_until("l"), Some(Tick(45)));
    assert_eq!(tick(&mut svc, 45), vec![gx(b, "l", 2)]);
}

#[test]
fn a_lock_delay_cut_short_by_the_last_tick_grants_nobody() {
    // `now + lock_delay` saturates: a delay begun within `lock_delay` of the last tick ends
    // at it, early. I8 still holds, because nothing is alive to be granted there: no
    // deadline lies past the last tick, so every session expires at it, before any grant.
    let last = u64::MAX;
    let mut svc = delayed(5);
    tick(&mut svc, last - 10);
    let a = open(&mut svc, 8); // expires at last - 2
    let b = open(&mut svc, 10); // expires at last, the latest deadline there is
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(
        tick(&mut svc, last - 2),
        vec![expired(a), released(a, "l", 1, Expired)]
    );
    assert_eq!(
        svc.lock_delay_until("l"),
        Some(Tick(last)),
        "cut short: 2 ticks, not 5"
    );
    assert_eq!(tick(&mut svc, last - 1), vec![]);
    assert_eq!(
        tick(&mut svc, last),
        vec![expired(b)],
        "b expires before the delay's end could grant it"
    );
    assert_eq!(svc.usage().sessions, 0);
    // and no session can be opened at the last tick to be granted later
    let e = refused(&mut svc, |v, now, o| v.open_session(now, 1, o));
    assert_eq!(e, Error::DeadlineOverflow);
}

#[test]
fn zero_lock_delay_grants_at_the_expiry_tick() {
    let mut svc = delayed(0);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(tick(&mut svc, 10).last(), Some(&gx(b, "l", 2)));
}

#[test]
fn any_input_does_what_a_tick_to_its_now_would_first() {
    // The same history, once with ticks and once with the inputs alone carrying the time:
    // the advance inside each input gives the same events, in the same place, and the
    // same bytes (docs/SPEC.md §2).
    let mut ticked = delayed(5);
    let mut stamped = delayed(5);
    for svc in [&mut ticked, &mut stamped] {
        let a = open(svc, 10);
        let b = open(svc, 100);
        x(svc, a, "l");
        x(svc, b, "l");
        acquire(svc, b, "m", Mode::Exclusive, Wait::None);
        acquire(svc, a, "m", Mode::Exclusive, Wait::Until(Tick(7)));
    }
    let (a, b) = (fencelock::SessionId(1), fencelock::SessionId(2));
    // at 7 a's wait times out; at 10 a expires (lock-delay to 15); at 15 b is granted
    let mut with_ticks = tick(&mut ticked, 7);
    with_ticks.extend(keep_alive(&mut ticked, b).1);
    with_ticks.extend(tick(&mut ticked, 10));
    with_ticks.extend(release(&mut ticked, b, "m").1);
    with_ticks.extend(tick(&mut ticked, 15));
    with_ticks.extend(keep_alive(&mut ticked, b).1);
    let mut alone = keep_alive_at(&mut stamped, 7, b).1;
    alone.extend(release_at(&mut stamped, 10, b, "m").1);
    alone.extend(keep_alive_at(&mut stamped, 15, b).1);
    assert_eq!(
        alone,
        vec![
            timed_out(a, "m"),
            expired(a),
            released(a, "l", 1, Expired),
            gx(b, "l", 3),
        ]
    );
    assert_eq!(alone, with_ticks);
    assert_eq!(stamped.snapshot_vec(), ticked.snapshot_vec());
}

#[test]
fn an_expiring_sessions_holds_end_in_the_order_it_asked_for_them() {
    // s queues for a (held by h) before it takes b at once; h's release then grants s a,
    // so s holds b longer than a. When s expires, a ends first: a session's holds end in
    // its acquires' arrival order, a hold granted after a wait counting from when it
    // queued (docs/SPEC.md §2, step 1) — not in grant order.
    let mut svc = svc(8);
    let h = open(&mut svc, 50);
    let s = open(&mut svc, 10);
    assert_eq!(x(&mut svc, h, "a").0, reply_x(1));
    assert_eq!(x(&mut svc, s, "a").0, reply_queued(Mode::Exclusive, 1));
    assert_eq!(x(&mut svc, s, "b").0, reply_x(2));
    assert_eq!(release(&mut svc, h, "a").1, vec![gx(s, "a", 3)]);
    assert_eq!(
        tick(&mut svc, 10),
        vec![
            expired(s),
            released(s, "a", 3, Expired),
            released(s, "b", 2, Expired),
        ]
    );
    check_invariants(&svc);
}

#[test]
fn an_expiring_session_touches_the_locks_it_watched_before_those_it_held() {
    // e holds "held" (wh waits for it), and only then watches "watched", which f holds (ww
    // waits for it). e and f expire in one advance, e first (same deadline, lower id).
    // e touches "watched" as its watch ends — before "held", whose hold it asked for
    // earlier — and f's expiry frees "watched" later in the same advance. The grant step
    // goes in first-touch order (docs/SPEC.md §2, step 4): "watched" first, with the lower
    // token, although "held" was freed first. Were the watch not a touch, or touched in
    // the order e asked for its claims, "held" would be granted first.
    let mut svc = svc(8);
    let e = open(&mut svc, 10);
    let f = open(&mut svc, 10);
    let wh = open(&mut svc, 100);
    let ww = open(&mut svc, 100);
    assert_eq!(x(&mut svc, e, "held").0, reply_x(1));
    assert_eq!(x(&mut svc, wh, "held").0, reply_queued(Mode::Exclusive, 1));
    assert_eq!(x(&mut svc, f, "watched").0, reply_x(2));
    assert_eq!(
        x(&mut svc, ww, "watched").0,
        reply_queued(Mode::Exclusive, 1)
    );
    let (reply, _) = run(&mut svc, |v, now, o| v.watch(now, e, "watched", None, o));
    assert_eq!(reply, Reply::Watching { holders: 1 });
    assert_eq!(
        tick(&mut svc, 10),
        vec![
            expired(e),
            released(e, "held", 1, Expired),
            expired(f),
            released(f, "watched", 2, Expired),
            gx(ww, "watched", 3),
            gx(wh, "held", 4),
        ]
    );
    assert_eq!(holders(&svc, "watched"), vec![(ww, Mode::Exclusive, 3)]);
    assert_eq!(holders(&svc, "held"), vec![(wh, Mode::Exclusive, 4)]);
}
