//! The `Sink` (docs/SPEC.md §4): events go straight to the host's sink, in order; a
//! bounded sink must have room for `max_events()` or the input is refused with
//! `BufferTooSmall` before anything changes, so a push never finds it full. Implemented
//! for `heapless::Deque`, `Vec` and closures.

mod common;
use common::*;

use fencelock::{Error, EventLimit, Mode, Output, ReleaseReason::*, Sink, Tick, Wait};
use heapless::Deque;

/// 4 sessions and 4 claims in use, so `max_events()` = 4 + 2 × 4 = 12; at 10 every
/// session expires together (the most events one input can emit here).
fn loaded() -> Svc {
    let mut svc = svc_with(4, 4, 8, Default::default());
    let s: Vec<_> = (0..4).map(|_| open(&mut svc, 10)).collect();
    x(&mut svc, s[0], "a");
    x(&mut svc, s[1], "b");
    acquire(&mut svc, s[2], "a", Mode::Exclusive, Wait::Forever);
    acquire(&mut svc, s[3], "b", Mode::Shared, Wait::Until(Tick(30)));
    assert_eq!(svc.max_events(), 12);
    svc
}

#[test]
fn a_deque_with_less_room_than_max_events_refuses_and_nothing_changes() {
    let mut svc = loaded();
    let before = svc.snapshot_vec();
    let mut small: Deque<Output, 11> = Deque::new();
    assert_eq!(small.room(), 11);
    assert_eq!(
        svc.tick(Tick(10), &mut small),
        Err(Error::BufferTooSmall { need: 12 })
    );
    let a = svc.sessions().next().unwrap();
    assert_eq!(
        svc.keep_alive(Tick(10), a, None, &mut small),
        Err(Error::BufferTooSmall { need: 12 })
    );
    assert!(small.is_empty(), "nothing pushed");
    assert_eq!(svc.snapshot_vec(), before, "nothing changed");
    assert_eq!(svc.now(), Tick(0), "not even time");
    // room is what is left: a big deque already holding events is too small as well
    let mut partly_full: Deque<Output, 16> = Deque::new();
    for _ in 0..5 {
        partly_full.push_back(expired(a)).unwrap();
    }
    assert_eq!(partly_full.room(), 11);
    assert_eq!(
        svc.tick(Tick(10), &mut partly_full),
        Err(Error::BufferTooSmall { need: 12 })
    );
    assert_eq!(partly_full.len(), 5);
    assert_eq!(svc.snapshot_vec(), before);
}

#[test]
fn a_deque_with_room_for_max_events_receives_every_event() {
    let mut svc = loaded();
    let mut reference = twin(&svc);
    let mut exact: Deque<Output, 12> = Deque::new();
    svc.tick(Tick(10), &mut exact).unwrap();
    let mut all = Vec::new();
    reference.tick(Tick(10), &mut all).unwrap();
    let got: Vec<Output> = exact.iter().cloned().collect();
    assert_eq!(got, all, "the same events, in the same order, none dropped");
    let s: Vec<_> = (1..=4).map(fencelock::SessionId).collect();
    assert_eq!(
        got,
        vec![
            expired(s[0]),
            released(s[0], "a", 1, Expired),
            expired(s[1]),
            released(s[1], "b", 2, Expired),
            expired(s[2]),
            expired(s[3]),
        ]
    );
    assert_eq!(svc.snapshot_vec(), reference.snapshot_vec());
}

#[test]
fn a_vec_sink_takes_every_event() {
    let mut svc = loaded();
    let mut events: Vec<Output> = Vec::new();
    assert_eq!(events.room(), usize::MAX, "unbounded");
    let s = fencelock::SessionId(1);
    let reply = svc.close_session(Tick(1), s, None, &mut events).unwrap();
    assert_eq!(reply, fencelock::Reply::Closed);
    assert_eq!(
        events,
        vec![
            released(s, "a", 1, Closed),
            gx(fencelock::SessionId(3), "a", 3)
        ]
    );
}

#[test]
fn a_closure_sink_sees_every_event_in_order() {
    let mut svc = loaded();
    let mut reference = twin(&svc);
    let mut kinds = Vec::new();
    let mut sessions = Vec::new();
    let mut route = |o: Output| {
        kinds.push(o.kind());
        sessions.push(o.session());
    };
    assert_eq!(route.room(), usize::MAX, "unbounded");
    svc.tick(Tick(10), &mut route).unwrap();
    let mut all = Vec::new();
    reference.tick(Tick(10), &mut all).unwrap();
    assert_eq!(kinds, all.iter().map(Output::kind).collect::<Vec<_>>());
    assert_eq!(
        sessions,
        all.iter().map(Output::session).collect::<Vec<_>>()
    );
    assert_eq!(
        kinds,
        [
            "session_expired",
            "released",
            "session_expired",
            "released",
            "session_expired",
            "session_expired"
        ]
    );
}

#[test]
fn max_events_follows_usage_and_capacity_bounds_it() {
    let mut svc = svc_with(3, 3, 5, Default::default());
    assert_eq!(svc.max_events(), 0);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    assert_eq!(svc.max_events(), 2);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(svc.max_events(), 2 + 2 * 2);
    let cap = svc.capacity();
    assert!(svc.max_events() <= (cap.sessions + 2 * cap.claims) as usize);
    // a deque sized from the capacities is enough (here for a tick that expires both:
    // the bound at capacity covers any input, SPEC §4)
    let mut roomy: Deque<Output, { 3 + 2 * 5 }> = Deque::new();
    svc.tick(Tick(10), &mut roomy).unwrap();
    assert_eq!(roomy.len(), 3, "a expired and released; b expired");
}

/// `EventLimit`: twice the bound by default, never below the bound, and room reported as
/// unbounded once it covers the bound (the service then skips working out `max_events`).
#[test]
fn an_event_limit_keeps_room_for_one_input_and_refuses_a_limit_below_the_bound() {
    let mut l = EventLimit::new(12);
    assert_eq!((l.limit(), l.bound()), (24, 12));
    assert_eq!(l.room(0), usize::MAX, "room for the bound: any input fits");
    assert_eq!(l.room(12), usize::MAX);
    assert_eq!(
        l.room(13),
        11,
        "less than the bound: the service checks max_events"
    );
    assert_eq!(l.room(30), 0);
    assert_eq!(l.set(11), Err(12));
    assert_eq!(l.limit(), 24, "a refused limit changes nothing");
    assert_eq!(l.set(12), Ok(()));
    assert_eq!(l.room(1), 11);
    // A bound past what a usize holds: only the room itself, never "unbounded".
    let mut huge = EventLimit::new(usize::MAX);
    assert_eq!(huge.limit(), usize::MAX);
    assert_eq!(huge.room(5), usize::MAX - 5);
    assert_eq!(huge.set(usize::MAX - 1), Err(usize::MAX));
    assert_eq!(EventLimit::UNBOUNDED.room(1 << 20), usize::MAX);

    // As a sink's room: a queue within it takes an input whose events fit, and refuses one
    // that might not fit, before anything changes.
    struct Limited(Vec<Output>, EventLimit);
    impl Sink for Limited {
        fn event(&mut self, o: Output) {
            self.0.push(o)
        }
        fn room(&self) -> usize {
            self.1.room(self.0.len())
        }
    }
    let mut svc = loaded();
    let before = svc.snapshot_vec();
    let mut q = Limited(
        vec![
            Output::SessionExpired {
                session: fencelock::SessionId(9)
            };
            20
        ],
        EventLimit::new(12),
    );
    let e = svc.tick(Tick(10), &mut q).unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { .. }), "{e:?}");
    assert_eq!(svc.snapshot_vec(), before, "refused: nothing changed");
    q.0.clear();
    svc.tick(Tick(10), &mut q).unwrap();
    let expired =
        q.0.iter()
            .filter(|o| matches!(o, Output::SessionExpired { .. }))
            .count();
    assert_eq!(
        expired, 4,
        "every session expired at once, its events taken"
    );
}

#[test]
fn every_event_but_a_session_expiry_names_its_lock() {
    let mut svc = svc(8);
    let (a, b, c, d, w) = (
        open(&mut svc, 10),
        open(&mut svc, 100),
        open(&mut svc, 100),
        open(&mut svc, 100),
        open(&mut svc, 100),
    );
    x(&mut svc, a, "x");
    acquire(&mut svc, b, "x", Mode::Exclusive, Wait::Forever);
    x(&mut svc, c, "y");
    acquire(&mut svc, d, "y", Mode::Exclusive, Wait::Until(Tick(5)));
    svc.watch(svc.now(), w, "x", None, &mut Vec::new()).unwrap();
    // One tick: d's wait times out, a expires, its hold ends, b is granted, w is told.
    let mut events = Vec::new();
    svc.tick(Tick(10), &mut events).unwrap();
    let kinds: Vec<_> = events.iter().map(Output::kind).collect();
    for kind in [
        "granted",
        "released",
        "session_expired",
        "wait_timed_out",
        "holder_changed",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    for e in &events {
        let named = match e {
            Output::Granted { lock, .. }
            | Output::Released { lock, .. }
            | Output::WaitTimedOut { lock, .. }
            | Output::HolderChanged { lock, .. } => Some(lock),
            Output::SessionExpired { .. } => None,
            _ => unreachable!("no other kind: {e:?}"),
        };
        assert_eq!(e.lock(), named, "{e:?}");
    }
    assert_eq!(timed_out(d, "y").lock(), Some(&name("y")));
    assert_eq!(expired(a).lock(), None);
}
