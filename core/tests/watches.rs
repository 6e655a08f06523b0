//! Watches and holder labels (docs/SPEC.md §13): `Holding` per holder when a watch begins,
//! then every holder change in order, each right after the event that tells the holder;
//! watchers in the order they began; nothing after a watch ends (unwatch, close, expiry);
//! idempotent retries; labels everywhere a holder is shown. Every input runs through the
//! harness (invariants after each, refusals byte-identical, events within `max_events()`).

mod common;
use common::*;

use fencelock::{
    Change, Config, Error, Label, LockName, Mode, Output, ReleaseReason, Reply, SessionId, Tick,
    Token, Wait,
};

fn label(s: &str) -> Label {
    Label::new(s).unwrap()
}

fn open_labeled(svc: &mut Svc, ttl: u64, l: &str) -> SessionId {
    let (reply, _) = run(svc, |v, now, o| v.open_labeled(now, ttl, label(l), o));
    reply.opened().unwrap()
}

fn watch(svc: &mut Svc, s: SessionId, lock: &str) -> (Reply, Events) {
    run(svc, |v, now, o| v.watch(now, s, lock, None, o))
}

fn unwatch(svc: &mut Svc, s: SessionId, lock: &str) -> (Reply, Events) {
    run(svc, |v, now, o| v.unwatch(now, s, lock, None, o))
}

/// The `HolderChanged` of `holder` (labelled `l`) for `watcher`.
#[allow(clippy::too_many_arguments)]
fn hc(
    watcher: SessionId,
    lock: &str,
    holder: SessionId,
    mode: Mode,
    token: u64,
    change: Change,
    l: &str,
) -> Output {
    Output::HolderChanged {
        session: watcher,
        lock: LockName::new(lock).unwrap(),
        holder,
        mode,
        token: Token(token),
        change,
        label: label(l),
    }
}

const X: Mode = Mode::Exclusive;

#[test]
fn a_watch_begins_with_one_holding_event_per_holder_in_grant_order() {
    let mut svc = svc(8);
    let a = open_labeled(&mut svc, 100, "host-a");
    let b = open_labeled(&mut svc, 100, "host-b");
    let w = open(&mut svc, 100);
    acquire(&mut svc, a, "r", Mode::Shared, Wait::Forever);
    acquire(&mut svc, b, "r", Mode::Shared, Wait::Forever);
    let (reply, events) = watch(&mut svc, w, "r");
    assert_eq!(reply, Reply::Watching { holders: 2 });
    assert_eq!(
        events,
        vec![
            hc(w, "r", a, Mode::Shared, 1, Change::Holding, "host-a"),
            hc(w, "r", b, Mode::Shared, 2, Change::Holding, "host-b"),
        ]
    );
    // a free name: no events, and the watch keeps an entry for the name alive
    let (reply, events) = watch(&mut svc, w, "free");
    assert_eq!((reply, events), (Reply::Watching { holders: 0 }, vec![]));
    assert!(svc.locks().any(|l| l.as_str() == "free"));
    assert_eq!(svc.usage().claims, 4, "two holds and two watches");
    let info = svc.session(w).unwrap();
    assert_eq!((info.holds, info.waits), (0, 0), "a watch is neither");
    assert_eq!(unwatch(&mut svc, w, "free").0, Reply::Unwatched);
    assert!(
        !svc.locks().any(|l| l.as_str() == "free"),
        "idle again: evicted"
    );
}

#[test]
fn every_change_follows_the_event_that_tells_the_holder_watchers_in_watch_order() {
    let mut svc = svc(8);
    let a = open_labeled(&mut svc, 100, "a");
    let b = open_labeled(&mut svc, 100, "b");
    let w1 = open(&mut svc, 100);
    let w2 = open(&mut svc, 100);
    watch(&mut svc, w2, "l"); // w2 first, then w1
    watch(&mut svc, w1, "l");
    // a grant at once: the reply tells a; the watchers hear of it in the same call
    let (reply, events) = x(&mut svc, a, "l");
    assert_eq!(reply, reply_x(1));
    assert_eq!(
        events,
        vec![
            hc(w2, "l", a, X, 1, Change::Granted, "a"),
            hc(w1, "l", a, X, 1, Change::Granted, "a"),
        ]
    );
    // a queued acquire changes no holder
    assert_eq!(x(&mut svc, b, "l").1, vec![]);
    // a release: the watchers hear of it, then b's grant and its watcher events
    let (reply, events) = release(&mut svc, a, "l");
    assert_eq!(reply, reply_released(1));
    assert_eq!(
        events,
        vec![
            hc(w2, "l", a, X, 1, Change::Released, "a"),
            hc(w1, "l", a, X, 1, Change::Released, "a"),
            gx(b, "l", 2),
            hc(w2, "l", b, X, 2, Change::Granted, "b"),
            hc(w1, "l", b, X, 2, Change::Granted, "b"),
        ]
    );
    // a close
    let (_, events) = close(&mut svc, b);
    assert_eq!(
        events,
        vec![
            released(b, "l", 2, ReleaseReason::Closed),
            hc(w2, "l", b, X, 2, Change::Closed, "b"),
            hc(w1, "l", b, X, 2, Change::Closed, "b"),
        ]
    );
}

#[test]
fn an_expiry_reaches_watchers_after_the_holders_release() {
    let config = Config {
        lock_delay: 2,
        ..Config::default()
    };
    let mut svc = svc_with(4, 4, 8, config);
    let a = open_labeled(&mut svc, 5, "a");
    let b = open(&mut svc, 100);
    let w = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    watch(&mut svc, w, "l");
    assert_eq!(
        tick(&mut svc, 5),
        vec![
            expired(a),
            released(a, "l", 1, ReleaseReason::Expired),
            hc(w, "l", a, X, 1, Change::Expired, "a"),
        ]
    );
    // the grant after the lock-delay reaches the watcher too
    assert_eq!(
        tick(&mut svc, 7),
        vec![gx(b, "l", 2), hc(w, "l", b, X, 2, Change::Granted, "")]
    );
}

#[test]
fn no_event_reaches_a_watch_after_it_ended() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    let w = open(&mut svc, 10);
    let v = open(&mut svc, 100);
    watch(&mut svc, w, "l");
    watch(&mut svc, v, "l");
    assert_eq!(unwatch(&mut svc, v, "l"), (Reply::Unwatched, vec![]));
    let (_, events) = x(&mut svc, a, "l");
    assert_eq!(events, vec![hc(w, "l", a, X, 1, Change::Granted, "")]);
    // the watcher expires: its watch ends with it
    assert_eq!(tick(&mut svc, 10), vec![expired(w)]);
    let (_, events) = release(&mut svc, a, "l");
    assert_eq!(events, vec![]);
    let e = refused(&mut svc, |s, now, o| s.unwatch(now, v, "l", None, o));
    assert_eq!(e, Error::NotWatching(v));
}

#[test]
fn a_holder_may_watch_its_own_lock_and_hears_nothing_of_its_own_close() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    let w = open(&mut svc, 100);
    x(&mut svc, a, "l");
    // a watches the lock it holds, and acquires one it watches
    assert_eq!(
        watch(&mut svc, a, "l").1,
        vec![hc(a, "l", a, X, 1, Change::Holding, "")]
    );
    watch(&mut svc, a, "m");
    assert_eq!(
        x(&mut svc, a, "m").1,
        vec![hc(a, "m", a, X, 2, Change::Granted, "")]
    );
    watch(&mut svc, w, "l");
    // a's own release reaches its own watch, in watch order
    let (_, events) = release(&mut svc, a, "m");
    assert_eq!(events, vec![hc(a, "m", a, X, 2, Change::Released, "")]);
    // its close ends its watches first: only the other watcher hears of it
    let (_, events) = close(&mut svc, a);
    assert_eq!(
        events,
        vec![
            released(a, "l", 1, ReleaseReason::Closed),
            hc(w, "l", a, X, 1, Change::Closed, ""),
        ]
    );
    assert!(
        !svc.locks().any(|l| l.as_str() == "m"),
        "m's entry ended with the watch"
    );
}

#[test]
fn a_waiter_watching_its_lock_keeps_both_claims() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    watch(&mut svc, b, "l");
    let info = svc.session(b).unwrap();
    assert_eq!((info.holds, info.waits), (0, 1));
    // cancelling the wait leaves the watch; unwatching leaves nothing of b's
    assert_eq!(cancel(&mut svc, b, "l").0, Reply::Cancelled);
    assert_eq!(
        release(&mut svc, a, "l").1,
        vec![hc(b, "l", a, X, 1, Change::Released, "")]
    );
    assert_eq!(unwatch(&mut svc, b, "l").0, Reply::Unwatched);
    assert_eq!(svc.usage().claims, 0);
    assert_eq!(svc.locks().count(), 0);
}

#[test]
fn permits_changes_show_count_and_limit() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    let w = open(&mut svc, 100);
    let p = |count| Mode::Permits { count, limit: 3 };
    acquire(&mut svc, a, "pool", p(2), Wait::Forever);
    acquire(&mut svc, b, "pool", p(2), Wait::Forever);
    assert_eq!(
        watch(&mut svc, w, "pool").1,
        vec![hc(w, "pool", a, p(2), 1, Change::Holding, "")]
    );
    assert_eq!(
        release(&mut svc, a, "pool").1,
        vec![
            hc(w, "pool", a, p(2), 1, Change::Released, ""),
            granted(b, "pool", p(2), 2),
            hc(w, "pool", b, p(2), 2, Change::Granted, ""),
        ]
    );
}

#[test]
fn an_election_is_observed_by_watching_its_lock() {
    let mut svc = svc(8);
    let a = open_labeled(&mut svc, 100, "node-1");
    let b = open_labeled(&mut svc, 100, "node-2");
    let w = open(&mut svc, 100);
    run(&mut svc, |v, now, o| v.campaign(now, a, "leader", None, o));
    run(&mut svc, |v, now, o| v.campaign(now, b, "leader", None, o));
    assert_eq!(
        watch(&mut svc, w, "leader").1,
        vec![hc(w, "leader", a, X, 1, Change::Holding, "node-1")]
    );
    let (_, events) = run(&mut svc, |v, now, o| v.resign(now, a, "leader", None, o));
    assert_eq!(
        events,
        vec![
            hc(w, "leader", a, X, 1, Change::Released, "node-1"),
            gx(b, "leader", 2),
            hc(w, "leader", b, X, 2, Change::Granted, "node-2"),
        ]
    );
}

#[test]
fn retries_of_watch_and_unwatch_apply_nothing_twice() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    let w = open(&mut svc, 100);
    x(&mut svc, a, "l");
    let watch_n = |svc: &mut Svc, lock, n| run(svc, |v, now, o| v.watch(now, w, lock, Some(n), o));
    let (reply, events) = watch_n(&mut svc, "l", 1);
    assert_eq!((reply, events.len()), (Reply::Watching { holders: 1 }, 1));
    // the retry: the recorded reply, no second Holding, no AlreadyWatching
    assert_eq!(
        watch_n(&mut svc, "l", 1),
        (Reply::Watching { holders: 1 }, vec![])
    );
    let e = refused(&mut svc, |v, now, o| v.watch(now, w, "m", Some(1), o));
    assert_eq!(e, Error::RequestReused { request: 1 });
    let e = refused(&mut svc, |v, now, o| v.unwatch(now, w, "l", Some(1), o));
    assert_eq!(
        e,
        Error::RequestReused { request: 1 },
        "another kind of input"
    );
    let unwatch_n = |svc: &mut Svc, n| run(svc, |v, now, o| v.unwatch(now, w, "l", Some(n), o));
    assert_eq!(unwatch_n(&mut svc, 2).0, Reply::Unwatched);
    assert_eq!(unwatch_n(&mut svc, 2).0, Reply::Unwatched, "the retry");
    let e = refused(&mut svc, |v, now, o| v.watch(now, w, "l", Some(1), o));
    assert_eq!(
        e,
        Error::StaleRequest {
            request: 1,
            latest: 2
        }
    );
}

#[test]
fn labels_show_in_sessions_holders_and_waiters() {
    let mut svc = svc(4);
    let a = open_labeled(&mut svc, 10, "worker-7 (pid 311)");
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(svc.session(a).unwrap().label.as_str(), "worker-7 (pid 311)");
    assert!(svc.session(b).unwrap().label.is_empty());
    let h: Vec<_> = svc.holders("l").map(|h| h.label).collect();
    assert_eq!(h, vec![label("worker-7 (pid 311)")]);
    let w: Vec<_> = svc.waiters("l").map(|w| w.label).collect();
    assert_eq!(w, vec![Label::EMPTY]);
    // through a frame too
    let input = fencelock::Input::OpenLabeled {
        now: Tick(0),
        ttl: 10,
        label: label("c"),
    };
    assert_eq!(input.kind(), "open_labeled");
    let (reply, _) = run(&mut svc, |v, _, o| v.handle(input.clone(), o));
    assert_eq!(
        svc.session(reply.opened().unwrap()).unwrap().label,
        label("c")
    );
}

#[test]
fn input_kinds_are_stable() {
    use fencelock::Input;
    let s = SessionId(1);
    let l = LockName::new("l").unwrap();
    let now = Tick(0);
    let kinds: Vec<&str> = [
        Input::OpenSession { now, ttl: 1 },
        Input::OpenLabeled {
            now,
            ttl: 1,
            label: Label::EMPTY,
        },
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
            lock: l.clone(),
            mode: X,
            wait: Wait::None,
            request: None,
        },
        Input::Release {
            now,
            session: s,
            lock: l.clone(),
            request: None,
        },
        Input::Cancel {
            now,
            session: s,
            lock: l.clone(),
            request: None,
        },
        Input::Tick { now },
        Input::Watch {
            now,
            session: s,
            lock: l.clone(),
            request: Some(3),
        },
        Input::Unwatch {
            now,
            session: s,
            lock: l,
            request: None,
        },
    ]
    .iter()
    .map(|i| i.kind())
    .collect();
    assert_eq!(
        kinds,
        [
            "open_session",
            "open_labeled",
            "keep_alive",
            "close_session",
            "acquire",
            "release",
            "cancel",
            "tick",
            "watch",
            "unwatch"
        ]
    );
    let changes: Vec<&str> = [
        Change::Holding,
        Change::Granted,
        Change::Released,
        Change::Closed,
        Change::Expired,
    ]
    .iter()
    .map(|c| c.kind())
    .collect();
    assert_eq!(
        changes,
        ["holding", "granted", "released", "closed", "expired"]
    );
}
