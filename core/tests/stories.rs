//! Stories, asserted reply by reply and event by event: a holder's garbage-collection
//! pause outlasting its session (the failure Martin Kleppmann describes in "How to do
//! distributed locking", 2016, told here with our own figures), a reconciliation job
//! whose worker pauses mid-report, and the same pause with the `FenceGate` taken away to
//! show what the gate is for.

mod common;
use common::*;

use fencelock::{
    Error, FenceGate, GateRow, Lease, Mode, Output, ReleaseReason::*, Reply, SessionId,
    SessionKeeper, Tick, Token, Wait,
};

/// Spends `n` tokens on a scratch lock, so a story's tokens are not the first ones.
fn burn_tokens(svc: &mut Svc, n: u64) {
    let warm = open(svc, 1_000);
    for _ in 0..n {
        x(svc, warm, "warm-up");
        release(svc, warm, "warm-up");
    }
    close(svc, warm);
    assert_eq!(svc.revision(), n);
}

/// The resource the lock protects: an object store holding one report, optionally behind
/// a `FenceGate` (the `WHERE token <= n` / `412 Precondition Failed` check).
struct Store {
    gate: Option<FenceGate<[GateRow; 4]>>,
    /// (content, writer) of the report as stored.
    report: Option<(&'static str, SessionId)>,
}

impl Store {
    fn new(fenced: bool) -> Store {
        Store {
            gate: fenced.then(|| FenceGate::new([GateRow::EMPTY; 4]).unwrap()),
            report: None,
        }
    }

    fn put(&mut self, writer: SessionId, token: Token, content: &'static str) -> Result<(), Error> {
        if let Some(gate) = &mut self.gate {
            gate.admit("report.xml", token)?;
        }
        self.report = Some((content, writer));
        Ok(())
    }
}

/// The failure on a timeline: A is granted 34 and pauses for 25 s; the service expires
/// A's session and grants B 35; B writes with 35; A's late write with 34 is refused by the
/// resource. One tick = one second, session ttl 10 s, keep-alives every 3 s. The host
/// handles each message as it arrives, stamped with its clock, and never ticks between
/// them: B's keep-alives still count from when they arrived.
#[test]
fn gc_pause_timeline() {
    let mut svc = svc(8);
    burn_tokens(&mut svc, 33);
    let start = svc.now().0;
    let lock = "jobs/reindex";

    // t0: A and B open sessions (ttl 10 s)...
    let (opened_a, events_a) = run(&mut svc, |v, now, o| v.open_session(now, 10, o));
    let (opened_b, events_b) = run(&mut svc, |v, now, o| v.open_session(now, 10, o));
    let (a, b) = (opened_a.opened().unwrap(), opened_b.opened().unwrap());
    let deadline = Tick(start + 10);
    assert_eq!(
        (opened_a, events_a),
        (
            Reply::Opened {
                session: a,
                expires_at: deadline
            },
            vec![]
        )
    );
    assert_eq!(
        (opened_b, events_b),
        (
            Reply::Opened {
                session: b,
                expires_at: deadline
            },
            vec![]
        )
    );

    // ...A acquires the lock, token 34; B asks too and waits in the queue.
    assert_eq!(x(&mut svc, a, lock), (reply_x(34), vec![]));
    assert_eq!(
        x(&mut svc, b, lock),
        (reply_queued(Mode::Exclusive, 1), vec![])
    );

    // t1: A hits a 25 s stop-the-world pause; B sends a keep-alive every 3 s, each
    // applied at its arrival time with no tick in between.
    for t in [3, 6, 9] {
        assert_eq!(
            keep_alive_at(&mut svc, start + t, b),
            (reply_kept_alive(start + t + 10), vec![])
        );
    }

    // t2 = 10: A sent no keep-alive; the service expires it and releases the lock.
    // t3: B is granted, token 35 — in the same tick, after the expiry.
    assert_eq!(
        tick(&mut svc, start + 10),
        vec![expired(a), released(a, lock, 34, Expired), gx(b, lock, 35)]
    );

    // B writes with 35: accepted. t4 = 26: A resumes and writes with 34: refused.
    let mut store = Store::new(true);
    assert_eq!(store.put(b, Token(35), "B's index"), Ok(()));
    assert_eq!(
        store.put(a, Token(34), "A's index"),
        Err(Error::Stale {
            token: Token(34),
            highest: Token(35)
        })
    );
    assert_eq!(store.report, Some(("B's index", b)));
}

/// A reconciliation job writing one report: a lease of 30 s kept alive every 10 s (one
/// tick = one second); worker W1 gets token 42, a GC pause of 45 s lets its lease expire,
/// standby W2 gets 43, W1's late PUT with 42 gets the gate's analogue of HTTP's
/// `412 Precondition Failed`, and W2's report is the one stored.
#[test]
fn reconciliation_with_fencing() {
    let mut svc = svc(8);
    burn_tokens(&mut svc, 41);
    let t0 = svc.now().0;
    let lock = "/locks/reconcile";
    let w1 = open(&mut svc, 30);
    let w2 = open(&mut svc, 30);
    let mut w1_keeper = SessionKeeper::new(30, 10, 5).unwrap();
    w1_keeper.keep_alive_sent(t0).unwrap();
    assert!(w1_keeper.keep_alive_acked(t0).unwrap());

    // W1 acquires: token 42. Standby W2 waits (a watch, no polling).
    assert_eq!(x(&mut svc, w1, lock), (reply_x(42), vec![]));
    assert_eq!(
        x(&mut svc, w2, lock),
        (reply_queued(Mode::Exclusive, 1), vec![])
    );

    // Both send keep-alives at t0 + 10. W1's GC pause starts at t0 + 12 and lasts 45 s;
    // W2 keeps sending them every 10 s.
    tick(&mut svc, t0 + 10);
    keep_alive(&mut svc, w1);
    w1_keeper.keep_alive_sent(t0 + 10).unwrap();
    assert!(w1_keeper.keep_alive_acked(t0 + 10).unwrap());
    keep_alive(&mut svc, w2);
    assert!(w1_keeper.may_act(t0 + 12));
    for t in [20, 30] {
        assert_eq!(tick(&mut svc, t0 + t), vec![]);
        keep_alive(&mut svc, w2);
    }
    // W1's lease, kept alive at t0 + 10, runs out at t0 + 40: the service expires it and
    // grants the standby token 43 in the same tick.
    assert_eq!(
        tick(&mut svc, t0 + 40),
        vec![
            expired(w1),
            released(w1, lock, 42, Expired),
            gx(w2, lock, 43)
        ]
    );
    // W2 writes its report with 43.
    let mut s3 = Store::new(true);
    assert_eq!(s3.put(w2, Token(43), "W2 report"), Ok(()));

    // t0 + 57: W1 resumes. Its own keeper says the lease is gone (it had said "stop" at
    // t0 + 35); W1 ignores it and PUTs report.xml with 42: refused, as stale.
    assert_eq!(
        w1_keeper.lease(t0 + 35),
        Lease::Jeopardy {
            expires_at: t0 + 40
        }
    );
    assert_eq!(w1_keeper.lease(t0 + 57), Lease::Expired);
    assert_eq!(
        s3.put(w1, Token(42), "W1 report"),
        Err(Error::Stale {
            token: Token(42),
            highest: Token(43)
        })
    );
    assert_eq!(
        s3.report,
        Some(("W2 report", w2)),
        "one reconciliation output: W2's"
    );
    assert_eq!(
        s3.gate.as_ref().unwrap().highest("report.xml"),
        Some(Token(43))
    );
    // The lock service is consistent throughout: W2 holds the lock with 43.
    assert_eq!(holders(&svc, lock), vec![(w2, Mode::Exclusive, 43)]);
}

/// What the service told each party: a caller's reply, or an event routed to a session.
#[derive(Debug, PartialEq)]
enum Seen {
    Reply(SessionId, Reply),
    Event(Output),
}

/// Records what one input returned and emitted, in that order.
fn saw(seen: &mut Vec<Seen>, caller: SessionId, (reply, events): (Reply, Vec<Output>)) {
    seen.push(Seen::Reply(caller, reply));
    seen.extend(events.into_iter().map(Seen::Event));
}

/// What each party saw in the GC-pause timeline, across the three pieces.
struct Timeline {
    seen: Vec<Seen>,
    a_may_act_when_paused: bool,
    a_lease_at_resume: Lease,
    a_late_write: Result<(), Error>,
    store: Store,
    holder_at_end: Vec<(SessionId, Mode, u64)>,
    a: SessionId,
    b: SessionId,
    /// The service's tick at the story's t = 0.
    start: u64,
}

/// The full GC-pause timeline across `LockService`, `SessionKeeper` and the resource,
/// with or without the `FenceGate` in front of the resource. This host ticks on its
/// timers and applies each message at its arrival time.
fn pause_timeline(fenced: bool) -> Timeline {
    let mut svc = svc(8);
    burn_tokens(&mut svc, 33);
    let s = svc.now().0; // the story's t = 0
    let lock = "storage-lock";
    let mut seen = Vec::new();

    // Clients keep their own view of their lease: ttl 10 s, keep-alives every 3 s,
    // margin 2 s.
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    let mut keeper_a = SessionKeeper::new(10, 3, 2).unwrap();
    let mut keeper_b = SessionKeeper::new(10, 3, 2).unwrap();
    for k in [&mut keeper_a, &mut keeper_b] {
        k.keep_alive_sent(s).unwrap();
        k.keep_alive_acked(s).unwrap();
    }
    saw(&mut seen, a, x(&mut svc, a, lock)); // A: token 34
    saw(&mut seen, b, x(&mut svc, b, lock)); // B waits
    let mut store = Store::new(fenced);
    assert!(keeper_a.may_act(s));
    store.put(a, Token(34), "A's first write").unwrap();

    // t1: A pauses. B sends a keep-alive when its keeper says one is due.
    let mut t = s + 1;
    loop {
        t = keeper_b.next_keep_alive(t);
        if t >= s + 10 {
            break;
        }
        seen.extend(tick(&mut svc, t).into_iter().map(Seen::Event));
        keeper_b.keep_alive_sent(t).unwrap();
        let (reply, events) = keep_alive(&mut svc, b);
        assert!(matches!(reply, Reply::KeptAlive { .. }));
        assert!(keeper_b.keep_alive_acked(t).unwrap());
        saw(&mut seen, b, (reply, events));
    }
    // A's keeper would have said "stop" at t = 8 (ttl − margin) had A been running.
    let a_may_act_when_paused = keeper_a.may_act(s + 8);

    // t2 = 10: the service expires A; t3: B is granted 35 and writes.
    seen.extend(tick(&mut svc, s + 10).into_iter().map(Seen::Event));
    assert!(keeper_b.may_act(s + 10));
    store.put(b, Token(35), "B's write").unwrap();
    // The service's SessionExpired for A goes unheard: A is paused.

    // t4 = 26: A wakes, believes it still holds the lock, and writes with 34.
    let a_lease_at_resume = keeper_a.lease(s + 26);
    let a_late_write = store.put(a, Token(34), "A's late write");
    Timeline {
        seen,
        a_may_act_when_paused,
        a_lease_at_resume,
        a_late_write,
        store,
        holder_at_end: holders(&svc, lock),
        a,
        b,
        start: s,
    }
}

#[test]
fn pause_timeline_with_fence_gate() {
    let tl = pause_timeline(true);
    let (a, b) = (tl.a, tl.b);
    let lock = "storage-lock";
    let s = tl.start;
    let mut expected = vec![
        Seen::Reply(a, reply_x(34)),
        Seen::Reply(b, reply_queued(Mode::Exclusive, 1)),
    ];
    expected.extend([3, 6, 9].map(|t| Seen::Reply(b, reply_kept_alive(s + t + 10))));
    expected.extend([
        Seen::Event(expired(a)),
        Seen::Event(released(a, lock, 34, Expired)),
        Seen::Event(gx(b, lock, 35)),
    ]);
    assert_eq!(tl.seen, expected);
    assert!(
        !tl.a_may_act_when_paused,
        "A's keeper says stop at ttl - margin"
    );
    assert_eq!(tl.a_lease_at_resume, Lease::Expired);
    assert_eq!(
        tl.a_late_write,
        Err(Error::Stale {
            token: Token(34),
            highest: Token(35)
        })
    );
    assert_eq!(
        tl.store.report,
        Some(("B's write", b)),
        "the resource keeps B's write"
    );
    assert_eq!(tl.holder_at_end, vec![(b, Mode::Exclusive, 35)]);
}

/// The same story with the gate removed: every component behaved correctly, and the
/// resource is corrupted anyway — A's late write overwrote B's while B held the lock.
#[test]
fn pause_timeline_without_fence_gate_corrupts_the_resource() {
    let tl = pause_timeline(false);
    let (a, b) = (tl.a, tl.b);
    // The lock service did exactly the same thing...
    assert_eq!(tl.seen, pause_timeline(true).seen);
    assert_eq!(tl.holder_at_end, vec![(b, Mode::Exclusive, 35)]);
    // ...but nothing stopped the stale holder at the resource.
    assert_eq!(tl.a_late_write, Ok(()));
    assert_eq!(tl.store.report, Some(("A's late write", a)));
    let (_, writer) = tl.store.report.unwrap();
    assert_ne!(
        tl.holder_at_end[0].0, writer,
        "corrupted: the last write came from a session that no longer holds the lock"
    );
}

#[test]
fn a_try_lock_loser_gets_busy_and_is_never_woken() {
    // A lock for efficiency only (a rare double run is harmless): Wait::None, nobody
    // queues, so nobody is woken.
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    assert_eq!(
        acquire(&mut svc, a, "nightly", Mode::Exclusive, Wait::None),
        (reply_x(1), vec![])
    );
    assert_eq!(
        acquire(&mut svc, b, "nightly", Mode::Exclusive, Wait::None),
        (Reply::Busy, vec![])
    );
    assert_eq!(
        release(&mut svc, a, "nightly"),
        (reply_released(1), vec![]),
        "no Granted for b: it never queued"
    );
}
