//! Watches and holder labels (docs/SPEC.md §13): `Holding` per holder when a watch begins,
//! then every holder change in order, each right after the event that tells the holder;
//! watchers in the order they began; nothing after a watch ends (unwatch, close, expiry);
//! idempotent retries; labels everywhere a holder is shown. Every input runs through the
//! harness (invariants after each, refusals byte-identical, events within `max_events()`).

mod common;
use common::*;

use fencelock::{
    Capacity, Change, Config, Error, Label, LockName, Mode, Output, ReleaseReason, Reply,
    SessionId, Tick, Token, Wait,
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
    assert_eq!(svc.watches(), 2, "of the four claims, the two watches");
    let info = svc.session(w).unwrap();
    assert_eq!(
        (info.holds, info.waits, info.watches),
        (0, 0, 2),
        "a watch is neither hold nor wait: counted apart"
    );
    assert_eq!(unwatch(&mut svc, w, "free").0, Reply::Unwatched);
    assert!(
        !svc.locks().any(|l| l.as_str() == "free"),
        "idle again: evicted"
    );
    assert_eq!((svc.watches(), svc.usage().claims), (1, 3));
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
fn in_one_advance_a_watcher_expiring_after_the_holder_hears_of_it_and_one_before_does_not() {
    // Three deadlines passed by one tick: early (3), the holder h (5), late (7). Expiries
    // go earliest deadline first (docs/SPEC.md §13.4, item 15): early's watch ends before h
    // expires, so early hears nothing; late still watches when h expires, so it hears of
    // h's expiry, just before its own SessionExpired. (late is opened before h: by id
    // alone, late would expire first and hear nothing.)
    let mut svc = svc(8);
    let early = open(&mut svc, 3);
    let late = open(&mut svc, 7);
    let h = open_labeled(&mut svc, 5, "h");
    x(&mut svc, h, "l");
    watch(&mut svc, early, "l");
    watch(&mut svc, late, "l");
    assert_eq!(
        tick(&mut svc, 10),
        vec![
            expired(early),
            expired(h),
            released(h, "l", 1, ReleaseReason::Expired),
            hc(late, "l", h, X, 1, Change::Expired, "h"),
            expired(late),
        ]
    );
}

#[test]
fn watchers_due_at_the_holders_deadline_expire_by_id_and_only_a_later_id_hears_of_it() {
    // lo, h and hi share one deadline; ties go by id (docs/SPEC.md §2, §13.4 item 15):
    // lo (the lower id) expires before h and hears nothing, hi (the higher id) after h and
    // hears of its expiry. The keep-alives, in the reverse of id order, renew them in that
    // order: the tie is still broken by id, not by which was renewed first.
    let mut svc = svc(8);
    let lo = open(&mut svc, 10);
    let h = open(&mut svc, 10);
    let hi = open(&mut svc, 10);
    x(&mut svc, h, "l");
    watch(&mut svc, lo, "l");
    watch(&mut svc, hi, "l");
    for s in [hi, h, lo] {
        assert_eq!(keep_alive_at(&mut svc, 5, s).0, reply_kept_alive(15));
    }
    assert_eq!(
        tick(&mut svc, 15),
        vec![
            expired(lo),
            expired(h),
            released(h, "l", 1, ReleaseReason::Expired),
            hc(hi, "l", h, X, 1, Change::Expired, ""),
            expired(hi),
        ]
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
    assert_eq!((info.holds, info.waits, info.watches), (0, 1, 1));
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

/// `hold` names a session's own hold of a lock, with its mode, token and label: found
/// from the lock row when it is the lock's only claim and through the claim index among
/// several; a wait, a watch, another session's hold, a lock not live, a session not open
/// and a hold released are none.
#[test]
fn a_hold_is_read_by_its_session_and_lock_alone() {
    let mut svc = svc_with(6, 4, 12, Config::default());
    let a = open_labeled(&mut svc, 100, "A");
    let b = open(&mut svc, 100);
    let c = open(&mut svc, 100);
    let d = open(&mut svc, 100);
    x(&mut svc, a, "solo");
    acquire(&mut svc, a, "l", Mode::Shared, Wait::None);
    acquire(&mut svc, b, "l", Mode::Shared, Wait::None);
    acquire(&mut svc, c, "l", Mode::Exclusive, Wait::Forever);
    watch(&mut svc, d, "l");
    let held = |svc: &Svc, s, lock| svc.hold(s, lock).map(|h| (h.mode, h.token.0, h.label));
    assert_eq!(
        held(&svc, a, "solo"),
        Some((Mode::Exclusive, 1, label("A")))
    );
    assert_eq!(held(&svc, a, "l"), Some((Mode::Shared, 2, label("A"))));
    assert_eq!(held(&svc, b, "l"), Some((Mode::Shared, 3, Label::EMPTY)));
    // Each as the holders read lists it.
    for h in svc.holders("l") {
        assert_eq!(svc.hold(h.session, "l"), Some(h));
    }
    assert_eq!(held(&svc, c, "l"), None, "a wait is no hold");
    assert_eq!(held(&svc, d, "l"), None, "a watch is no hold");
    assert_eq!(held(&svc, b, "solo"), None, "another session's");
    assert_eq!(held(&svc, a, "none"), None, "no such lock");
    assert_eq!(held(&svc, SessionId(99), "l"), None, "no such session");
    release(&mut svc, a, "l");
    assert_eq!(held(&svc, a, "l"), None, "released");
    assert_eq!(held(&svc, b, "l"), Some((Mode::Shared, 3, Label::EMPTY)));
    // A semaphore's permits holder, its mode with its count and limit.
    let permits = Mode::Permits { count: 2, limit: 3 };
    acquire(&mut svc, d, "pool", permits, Wait::None);
    assert_eq!(held(&svc, d, "pool"), Some((permits, 4, Label::EMPTY)));
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

/// Random histories of every input (permits, plain modes, watches, labels, closes,
/// expiries, retries): after each one, every live watch's view — built only from the
/// `HolderChanged` events it received — equals the lock's holders; no event reaches a watch
/// that has ended; each change reaches a lock's watchers in the order they began watching;
/// a watch is refused for `max_watchers` exactly when the lock has that many; no input
/// emits more than `max_events()`; a semaphore never has more permits in use than its
/// limit; a refused input leaves the state byte-identical.
#[test]
fn random_histories_keep_every_watcher_in_step_with_the_holders() {
    use std::collections::{BTreeMap, BTreeSet};
    for seed in [1u64, 2, 3, 0x5eed] {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let config = Config {
            lock_delay: 2,
            max_watchers: 3,
            ..Config::default()
        };
        let mut svc = svc_with(6, 6, 24, config);
        // (watcher, lock) -> the holders it has been told of: holder -> token
        let mut views: BTreeMap<(SessionId, String), BTreeMap<SessionId, u64>> = BTreeMap::new();
        // every live watch, in the order it began: what the watcher count and the order of
        // each change's events must follow
        let mut began: Vec<(SessionId, String)> = Vec::new();
        let locks = ["a", "b", "pool"];
        let (mut applied, mut refusals, mut changes) = (0, 0, 0);
        for step in 0..3000 {
            let now = svc.now().0 + rng.below(3);
            // the advance first, on its own, so each input's own events are told apart
            let mut events = Vec::new();
            let bound = svc.max_events();
            svc.tick(Tick(now), &mut events).unwrap();
            assert!(events.len() <= bound);
            for e in &events {
                if let Output::SessionExpired { session } = e {
                    began.retain(|(w, _)| w != session);
                }
            }
            // mostly a live session, sometimes one that is gone (or never was)
            let live: Vec<SessionId> = svc.sessions().collect();
            let s = if live.is_empty() || rng.below(10) == 0 {
                SessionId(1 + rng.below(svc.next_session_id().0 + 1))
            } else {
                live[rng.below(live.len() as u64) as usize]
            };
            let lock = locks[rng.below(3) as usize];
            let request = [None, Some(rng.below(3))][rng.below(2) as usize];
            let mode = if lock == "pool" {
                Mode::Permits {
                    count: 1 + rng.below(3) as u32,
                    limit: [3, 3, 3, 4][rng.below(4) as usize],
                }
            } else {
                [Mode::Exclusive, Mode::Shared][rng.below(2) as usize]
            };
            let wait = [
                Wait::None,
                Wait::Forever,
                Wait::Until(Tick(now + rng.below(6))),
            ][rng.below(3) as usize];
            let t = Tick(now);
            let before = svc.snapshot_vec();
            let claims_before = svc.usage().claims;
            let bound = svc.max_events();
            let mut out = Vec::new();
            let pick = if live.len() < 3 { 0 } else { rng.below(10) };
            let got = match pick {
                0 => svc.open_labeled(
                    t,
                    3 + rng.below(20),
                    label(["", "x", "y"][rng.below(3) as usize]),
                    &mut out,
                ),
                1 => svc.keep_alive(t, s, request, &mut out),
                2 => svc.close_session(t, s, request, &mut out),
                3 | 4 => svc.acquire(t, s, lock, mode, wait, request, &mut out),
                5 => svc.release(t, s, lock, request, &mut out),
                6 => svc.cancel(t, s, lock, request, &mut out),
                7 | 8 => svc.watch(t, s, lock, request, &mut out),
                _ => svc.unwatch(t, s, lock, request, &mut out),
            };
            assert!(out.len() <= bound, "step {step}: {} > {bound}", out.len());
            let watchers_of = |began: &Vec<(SessionId, String)>, lock: &str| {
                began.iter().filter(|(_, l)| l == lock).count()
            };
            if got == Err(Error::CapacityExceeded(fencelock::Table::Watchers)) {
                assert_eq!(
                    watchers_of(&began, lock),
                    3,
                    "step {step}: refused below max"
                );
            }
            // each change reaches its lock's watchers in the order they began watching
            let mut i = 0;
            while i < out.len() {
                let key = |e: &Output| match e {
                    Output::HolderChanged {
                        lock,
                        holder,
                        token,
                        change,
                        ..
                    } => Some((lock.clone(), *holder, *token, *change)),
                    _ => None,
                };
                let Some(k) = key(&out[i]) else {
                    i += 1;
                    continue;
                };
                let mut j = i;
                let mut told = Vec::new();
                while j < out.len() && key(&out[j]).as_ref() == Some(&k) {
                    if let Output::HolderChanged { session, .. } = &out[j] {
                        told.push(*session);
                    }
                    j += 1;
                }
                let order: Vec<SessionId> = began
                    .iter()
                    .filter(|(w, l)| l == k.0.as_str() && told.contains(w))
                    .map(|(w, _)| *w)
                    .collect();
                if told.len() > 1 {
                    assert_eq!(told, order, "step {step}: watchers out of order");
                }
                i = j;
            }
            events.extend(out);
            match got {
                Err(_) => {
                    refusals += 1;
                    assert_eq!(
                        svc.snapshot_vec(),
                        before,
                        "step {step}: a refusal changed state"
                    );
                }
                Ok(Reply::Watching { .. }) => {
                    applied += 1;
                    views.entry((s, lock.to_string())).or_default();
                    // a new watch takes a claim row; a retry's replay takes none
                    if svc.usage().claims > claims_before {
                        began.push((s, lock.to_string()));
                        assert!(watchers_of(&began, lock) <= 3, "step {step}: beyond max");
                    }
                }
                Ok(_) => applied += 1,
            }
            for e in &events {
                match e {
                    Output::SessionExpired { session } => views.retain(|(w, _), _| w != session),
                    Output::HolderChanged {
                        session,
                        lock,
                        holder,
                        token,
                        change,
                        ..
                    } => {
                        changes += 1;
                        let view = views
                            .get_mut(&(*session, lock.to_string()))
                            .unwrap_or_else(|| panic!("step {step}: {e:?} reached no watch"));
                        match change {
                            Change::Holding | Change::Granted => {
                                assert_eq!(
                                    view.insert(*holder, token.0),
                                    None,
                                    "step {step}: {e:?}"
                                )
                            }
                            _ => {
                                assert_eq!(view.remove(holder), Some(token.0), "step {step}: {e:?}")
                            }
                        }
                    }
                    _ => {}
                }
            }
            match got {
                Ok(Reply::Unwatched) => {
                    views.remove(&(s, lock.to_string()));
                    began.retain(|w| *w != (s, lock.to_string()));
                }
                Ok(Reply::Closed) => {
                    views.retain(|(w, _), _| *w != s);
                    began.retain(|(w, _)| *w != s);
                }
                _ => {}
            }
            // every live watch is in step with the holders
            let live: BTreeSet<_> = views.keys().cloned().collect();
            assert_eq!(live, began.iter().cloned().collect(), "step {step}");
            for ((w, l), view) in &views {
                assert!(
                    svc.session(*w).is_some(),
                    "step {step}: a watch outlived {w}"
                );
                let truth: BTreeMap<SessionId, u64> =
                    svc.holders(l).map(|h| (h.session, h.token.0)).collect();
                assert_eq!(view, &truth, "step {step}: {w} watching {l}");
            }
            assert_eq!(
                live.len(),
                svc.usage().claims as usize
                    - svc
                        .sessions()
                        .map(|x| {
                            let i = svc.session(x).unwrap();
                            assert_eq!(
                                i.watches as usize,
                                live.iter().filter(|(s, _)| *s == x).count(),
                                "step {step}: {x}'s watches"
                            );
                            (i.holds + i.waits) as usize
                        })
                        .sum::<usize>(),
                "step {step}: the watches the model knows are the service's"
            );
            if let Some(fencelock::Permits { in_use, limit }) = svc.permits("pool") {
                assert!(in_use <= limit, "step {step}: {in_use} of {limit}");
            }
            if step % 50 == 0 {
                check_invariants(&svc);
            }
        }
        assert!(
            applied > 1000 && refusals > 300 && changes > 150,
            "seed {seed}: applied {applied}, refused {refusals}, changes seen {changes}"
        );
    }
}

/// `max_events()` is `S + 2·H + (2·H + 1) · min(max_watchers, W)` (docs/SPEC.md §4), and a
/// close that releases holds watched by the most watchers stays within it; a bounded sink
/// with less room is refused before anything changes.
#[test]
fn max_events_grows_with_the_watches_in_use() {
    let config = Config {
        max_watchers: 2,
        ..Config::default()
    };
    let mut svc = svc_with(8, 8, 32, config);
    let cap = svc.capacity();
    assert_eq!(
        cap.max_events(2),
        8 + 2 * 32 + 65 * 2,
        "S + 2C + (2C + 1) · 2"
    );
    assert_eq!(cap.max_events(0), 8 + 2 * 32, "watches off: S + 2C");
    assert_eq!(
        cap.max_events(100),
        8 + 2 * 32 + 65 * 32,
        "at most C watchers"
    );
    let huge = Capacity {
        sessions: u32::MAX,
        locks: 1,
        claims: u32::MAX,
    };
    // A table past MAX_ROWS (no service has one) counts as MAX_ROWS; the bound fits 64 bits.
    let m = fencelock::MAX_ROWS as u128;
    let bound = m + 2 * m + (2 * m + 1) * m;
    assert!(bound < u64::MAX as u128);
    assert_eq!(
        huge.max_events(u32::MAX) as u128,
        bound.min(usize::MAX as u128),
        "counted at MAX_ROWS"
    );
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    let watchers: Vec<_> = (0..3).map(|_| open(&mut svc, 100)).collect();
    assert_eq!(svc.max_events(), 5, "no claim: one event per session");
    for lock in ["p", "q", "r"] {
        x(&mut svc, a, lock);
        x(&mut svc, b, lock);
    }
    assert_eq!(svc.max_events(), 5 + 2 * 6, "no watch: S + 2H");
    watch(&mut svc, watchers[0], "p");
    assert_eq!(svc.max_events(), 5 + 12 + 13, "one watch: + (2H + 1) · 1");
    for (w, lock) in [(1, "p"), (0, "q"), (1, "q"), (2, "r")] {
        watch(&mut svc, watchers[w], lock);
    }
    assert_eq!(svc.max_events(), 5 + 12 + 13 * 2, "capped by max_watchers");
    assert!(
        svc.max_events() <= cap.max_events(2),
        "within the bound at capacity"
    );
    // a's close: per lock a Released and b's Granted, each told to the lock's watchers
    // (two on p and q, one on r)
    let bound = svc.max_events();
    let (_, events) = close(&mut svc, a);
    assert_eq!(events.len(), 3 + 3 + 2 * (2 + 2 + 1), "{events:?}");
    assert!(events.len() <= bound);
    // a bounded sink with less room than the bound is refused, nothing changed
    let before = svc.snapshot_vec();
    let mut small: heapless::Deque<Output, 8> = heapless::Deque::new();
    let e = svc.tick(Tick(1), &mut small).unwrap_err();
    assert_eq!(
        e,
        Error::BufferTooSmall {
            need: svc.max_events() as u32
        }
    );
    assert_eq!(svc.snapshot_vec(), before);
}

/// A release by token (`release_hold`) of a hold whose session also watches the lock: the
/// holder is sent no `Released` (SPEC §3), but as a watcher it hears the change as every
/// watcher does (§13.4).
#[test]
fn a_holder_watching_its_lock_hears_its_hold_released_by_token() {
    let mut svc = svc(8);
    let a = open(&mut svc, 100);
    x(&mut svc, a, "l");
    watch(&mut svc, a, "l");
    let (reply, events) = run(&mut svc, |v, now, o| {
        v.release_hold(now, a, "l", Token(1), None, o)
    });
    assert_eq!(reply, reply_released(1));
    assert_eq!(
        events,
        vec![hc(a, "l", a, Mode::Exclusive, 1, Change::Released, "")]
    );
}
