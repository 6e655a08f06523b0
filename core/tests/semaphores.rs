//! Semaphores (`Mode::Permits`, docs/SPEC.md §13): strict-FIFO permit grants, a token per
//! grant, permits returned on release, close and expiry, lock-delay, the limit carried by
//! every acquire, introspection, and idempotent retries. Every input runs through the
//! harness, which checks every invariant after it (restore validates "never more permits
//! held than the limit") and that it emitted no more than `max_events()`.

mod common;
use common::*;

use fencelock::{Config, Error, Mode, Permits, ReleaseReason, Reply, SessionId, Token, Wait};

fn p(count: u32, limit: u32) -> Mode {
    Mode::Permits { count, limit }
}

fn granted_p(count: u32, limit: u32, token: u64) -> Reply {
    Reply::Granted {
        mode: p(count, limit),
        token: Token(token),
    }
}

fn sessions(svc: &mut Svc, n: usize) -> Vec<SessionId> {
    (0..n).map(|_| open(svc, 100)).collect()
}

fn in_use(svc: &Svc, lock: &str) -> Option<(u32, u32)> {
    svc.permits(lock)
        .map(|Permits { in_use, limit }| (in_use, limit))
}

#[test]
fn permits_are_granted_up_to_the_limit_each_with_its_own_token() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 4);
    assert_eq!(in_use(&svc, "pool"), None, "not a semaphore before use");
    assert_eq!(
        acquire(&mut svc, s[0], "pool", p(2, 5), Wait::Forever).0,
        granted_p(2, 5, 1)
    );
    assert_eq!(
        acquire(&mut svc, s[1], "pool", p(1, 5), Wait::Forever).0,
        granted_p(1, 5, 2)
    );
    assert_eq!(
        acquire(&mut svc, s[2], "pool", p(2, 5), Wait::Forever).0,
        granted_p(2, 5, 3)
    );
    assert_eq!(in_use(&svc, "pool"), Some((5, 5)));
    // full: the next one queues, a try-acquire is busy
    assert_eq!(
        acquire(&mut svc, s[3], "pool", p(1, 5), Wait::Forever).0,
        reply_queued(p(1, 5), 1)
    );
    assert_eq!(
        holders(&svc, "pool"),
        vec![(s[0], p(2, 5), 1), (s[1], p(1, 5), 2), (s[2], p(2, 5), 3)]
    );
    let w: Vec<_> = svc.waiters("pool").map(|w| (w.session, w.mode)).collect();
    assert_eq!(w, vec![(s[3], p(1, 5))]);
    // a release returns its permits and grants the head with a fresh token
    let (reply, events) = release(&mut svc, s[1], "pool");
    assert_eq!(reply, reply_released(2));
    assert_eq!(events, vec![granted(s[3], "pool", p(1, 5), 4)]);
    assert_eq!(in_use(&svc, "pool"), Some((5, 5)));
    // every holder released: the name is idle, and its limit forgotten
    for &x in &[s[0], s[2], s[3]] {
        release(&mut svc, x, "pool");
    }
    assert_eq!(in_use(&svc, "pool"), None);
    assert_eq!(svc.locks().count(), 0);
    assert_eq!(
        acquire(&mut svc, s[0], "pool", p(1, 9), Wait::None).0,
        granted_p(1, 9, 5)
    );
    release(&mut svc, s[0], "pool");
    assert_eq!(
        x(&mut svc, s[0], "pool").0,
        reply_x(6),
        "a plain lock again"
    );
    assert_eq!(in_use(&svc, "pool"), None, "a plain lock has no permits");
}

#[test]
fn grants_are_strict_fifo_a_large_head_is_never_overtaken() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 5);
    acquire(&mut svc, s[0], "pool", p(3, 4), Wait::Forever); // 3 of 4 in use
                                                             // the head wants 2 (does not fit); the one behind wants 1 (would fit) but waits
    assert_eq!(
        acquire(&mut svc, s[1], "pool", p(2, 4), Wait::Forever).0,
        reply_queued(p(2, 4), 1)
    );
    assert_eq!(
        acquire(&mut svc, s[2], "pool", p(1, 4), Wait::Forever).0,
        reply_queued(p(1, 4), 2)
    );
    // a try-acquire that would fit is busy while anyone waits
    assert_eq!(
        acquire(&mut svc, s[3], "pool", p(1, 4), Wait::None).0,
        Reply::Busy
    );
    assert_eq!(in_use(&svc, "pool"), Some((3, 4)));
    acquire(&mut svc, s[4], "pool", p(4, 4), Wait::Forever); // third in line
                                                             // the holder releases: the head (2) and the next (1) fit, the 4 behind them does not
    let (_, events) = release(&mut svc, s[0], "pool");
    assert_eq!(
        events,
        vec![
            granted(s[1], "pool", p(2, 4), 2),
            granted(s[2], "pool", p(1, 4), 3),
        ]
    );
    assert_eq!(in_use(&svc, "pool"), Some((3, 4)));
    assert_eq!(waiters(&svc, "pool"), vec![s[4]]);
    // the 4 is granted only when everything is back
    assert_eq!(release(&mut svc, s[1], "pool").1, vec![]);
    assert_eq!(
        release(&mut svc, s[2], "pool").1,
        vec![granted(s[4], "pool", p(4, 4), 4)]
    );
    assert_eq!(in_use(&svc, "pool"), Some((4, 4)));
}

#[test]
fn a_cancel_or_timeout_of_a_blocking_head_grants_those_behind() {
    let mut svc = svc(8);
    let s = sessions(&mut svc, 4);
    acquire(&mut svc, s[0], "pool", p(2, 3), Wait::Forever);
    acquire(&mut svc, s[1], "pool", p(3, 3), Wait::Forever); // blocks the queue
    acquire(&mut svc, s[2], "pool", p(1, 3), Wait::Forever);
    let (reply, events) = cancel(&mut svc, s[1], "pool");
    assert_eq!(reply, Reply::Cancelled);
    assert_eq!(events, vec![granted(s[2], "pool", p(1, 3), 2)]);
    // a timed head that times out
    let now = svc.now().0;
    acquire(
        &mut svc,
        s[1],
        "pool",
        p(2, 3),
        Wait::Until(fencelock::Tick(now + 5)),
    );
    acquire(&mut svc, s[3], "pool", p(1, 3), Wait::Forever);
    release(&mut svc, s[2], "pool"); // 2 in use: the head (2) does not fit yet
    let events = tick(&mut svc, now + 5);
    assert_eq!(
        events,
        vec![timed_out(s[1], "pool"), granted(s[3], "pool", p(1, 3), 3),]
    );
    assert_eq!(in_use(&svc, "pool"), Some((3, 3)));
}

#[test]
fn close_and_expiry_return_permits_and_expiry_starts_lock_delay() {
    let config = Config {
        lock_delay: 4,
        ..Config::default()
    };
    let mut svc = svc_with(8, 8, 16, config);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 100);
    let c = open(&mut svc, 100);
    let d = open(&mut svc, 100);
    acquire(&mut svc, a, "pool", p(2, 3), Wait::Forever);
    acquire(&mut svc, b, "pool", p(1, 3), Wait::Forever);
    acquire(&mut svc, c, "pool", p(1, 3), Wait::Forever);
    acquire(&mut svc, d, "pool", p(2, 3), Wait::Forever);
    // a expires at 10: its permits come back, but lock-delay holds the grant until 14
    let events = tick(&mut svc, 10);
    assert_eq!(
        events,
        vec![expired(a), released(a, "pool", 1, ReleaseReason::Expired),]
    );
    assert_eq!(in_use(&svc, "pool"), Some((1, 3)));
    assert_eq!(svc.lock_delay_until("pool"), Some(fencelock::Tick(14)));
    assert_eq!(waiters(&svc, "pool"), vec![c, d]);
    // a try-acquire during the delay is busy even with room
    let e = open(&mut svc, 100);
    assert_eq!(
        acquire(&mut svc, e, "pool", p(1, 3), Wait::None).0,
        Reply::Busy
    );
    let events = tick(&mut svc, 14);
    assert_eq!(
        events,
        vec![granted(c, "pool", p(1, 3), 3),],
        "c fits (2 of 3); d (2 more) does not"
    );
    // a close returns permits without delay
    let (reply, events) = close(&mut svc, b);
    assert_eq!(reply, Reply::Closed);
    assert_eq!(
        events,
        vec![
            released(b, "pool", 2, ReleaseReason::Closed),
            granted(d, "pool", p(2, 3), 4),
        ]
    );
    assert_eq!(in_use(&svc, "pool"), Some((3, 3)));
}

#[test]
fn one_claim_per_session_and_name() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    acquire(&mut svc, a, "pool", p(2, 3), Wait::Forever);
    // the same mode again: the same hold and token
    assert_eq!(
        acquire(&mut svc, a, "pool", p(2, 3), Wait::None).0,
        granted_p(2, 3, 1)
    );
    assert_eq!(in_use(&svc, "pool"), Some((2, 3)));
    // another count: a mode mismatch naming the held mode
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "pool", p(1, 3), Wait::None, None, o)
    });
    assert_eq!(e, Error::ModeMismatch { held: p(2, 3) });
    assert_eq!(
        e.to_string(),
        "mode mismatch: the lock is held with 2 of 3 permits by this session"
    );
    // a waiter asking again is already queued
    acquire(&mut svc, b, "pool", p(2, 3), Wait::Forever);
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, b, "pool", p(2, 3), Wait::Forever, None, o)
    });
    assert_eq!(e, Error::AlreadyQueued(b));
}

#[test]
fn a_limit_mismatch_is_judged_by_the_live_holds_and_waits_only() {
    let config = Config {
        lock_delay: 3,
        ..Config::default()
    };
    let mut svc = svc_with(4, 4, 8, config);
    let a = open(&mut svc, 5);
    let b = open(&mut svc, 100);
    acquire(&mut svc, a, "pool", p(1, 2), Wait::Forever);
    // a expires: the name is only in lock-delay, with no hold or wait: any mode may come
    tick(&mut svc, 5);
    assert_eq!(in_use(&svc, "pool"), None);
    assert_eq!(
        acquire(&mut svc, b, "pool", Mode::Exclusive, Wait::Forever).0,
        reply_queued(Mode::Exclusive, 1),
        "queued behind the lock-delay, as a plain lock now"
    );
    let c = open(&mut svc, 100);
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, c, "pool", p(1, 2), Wait::Forever, None, o)
    });
    assert_eq!(
        e,
        Error::LimitMismatch { limit: 0 },
        "a waiter makes it a plain lock"
    );
}

#[test]
fn shared_and_exclusive_locks_are_untouched_by_permits_elsewhere() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    acquire(&mut svc, a, "pool", p(1, 1), Wait::Forever);
    acquire(&mut svc, a, "r", Mode::Shared, Wait::Forever);
    assert_eq!(
        acquire(&mut svc, b, "r", Mode::Shared, Wait::Forever).0,
        reply_s(3)
    );
    assert_eq!(
        acquire(&mut svc, b, "pool", p(1, 1), Wait::Forever).0,
        reply_queued(p(1, 1), 1),
        "a semaphore of 1 is a mutex"
    );
    assert_eq!(in_use(&svc, "r"), None);
}

#[test]
fn retries_of_permit_acquires_replay_from_the_claim() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    let acq = |svc: &mut Svc, s, count, n| {
        run(svc, |v, now, o| {
            v.acquire(now, s, "pool", p(count, 3), Wait::Forever, Some(n), o)
        })
    };
    assert_eq!(acq(&mut svc, a, 2, 1).0, granted_p(2, 3, 1));
    assert_eq!(acq(&mut svc, a, 2, 1).0, granted_p(2, 3, 1), "the retry");
    assert_eq!(acq(&mut svc, b, 2, 7).0, reply_queued(p(2, 3), 1));
    assert_eq!(
        acq(&mut svc, b, 2, 7).0,
        reply_queued(p(2, 3), 1),
        "the retry"
    );
    // the same number for another count is another request
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, b, "pool", p(1, 3), Wait::Forever, Some(7), o)
    });
    assert_eq!(e, Error::RequestReused { request: 7 });
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, b, "pool", p(2, 4), Wait::Forever, Some(7), o)
    });
    assert_eq!(e, Error::RequestReused { request: 7 });
    // granted since: the retry says so (no second Granted would come)
    release(&mut svc, a, "pool");
    assert_eq!(acq(&mut svc, b, 2, 7).0, granted_p(2, 3, 2));
    // ended since: the retries say the hold or the wait they answered is over (b's
    // answer was Queued: its wait ended, as for a plain lock)
    release(&mut svc, b, "pool");
    assert_eq!(acq(&mut svc, b, 2, 7).0, Reply::WaitEnded);
    assert_eq!(
        acq(&mut svc, a, 2, 1).0,
        Reply::HoldEnded { token: Token(1) }
    );
    // a numbered busy try-acquire replays as busy
    acq(&mut svc, a, 3, 2);
    let busy = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "pool", p(1, 3), Wait::None, Some(8), o)
    });
    assert_eq!(busy.0, Reply::Busy);
    close(&mut svc, a);
    let again = run(&mut svc, |v, now, o| {
        v.acquire(now, b, "pool", p(1, 3), Wait::None, Some(8), o)
    });
    assert_eq!(
        again.0,
        Reply::Busy,
        "a retry applies nothing, though it would fit now"
    );
    assert_eq!(in_use(&svc, "pool"), None);
}
