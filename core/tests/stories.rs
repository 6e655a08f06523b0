//! The seeds' stories, asserted output by output: the GC-pause timeline of the reference
//! article, ShardPay's reconciliation walkthrough, and the same timeline with the
//! `FenceGate` taken away to show what the gate is for.

mod common;
use common::*;

use fencelock::{
    Error, FenceGate, GateRow, Lease, Mode, Output, ReleaseReason::*, SessionId, SessionKeeper,
    Token, Wait,
};

/// Spends `n` tokens on a scratch lock, so the story's tokens match the articles'.
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
            gate: fenced.then(|| FenceGate::new([GateRow::EMPTY; 4])),
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

/// Reference article, "the failure on a timeline": A granted 34 and paused for 25 s; the
/// service expires A's session and grants B 35; B writes with 35; A's late write with 34 is
/// refused by the resource. One tick = one second, session timeout 10 s, heartbeats 3 s.
#[test]
fn gc_pause_timeline() {
    let mut svc = svc(8);
    burn_tokens(&mut svc, 33);
    let start = svc.now().0;
    let lock = "jobs/reindex";

    // t0: A and B open sessions (timeout 10 s)...
    let (a, opened_a) = run(&mut svc, |v, o| v.open_session(10, o));
    let (b, opened_b) = run(&mut svc, |v, o| v.open_session(10, o));
    let deadline = fencelock::Tick(start + 10);
    assert_eq!(
        opened_a,
        vec![Output::SessionOpened {
            session: a,
            expires_at: deadline
        }]
    );
    assert_eq!(
        opened_b,
        vec![Output::SessionOpened {
            session: b,
            expires_at: deadline
        }]
    );

    // ...A acquires the lock, token 34; B asks too and waits in the queue.
    assert_eq!(x(&mut svc, a, lock), vec![gx(a, lock, 34)]);
    assert_eq!(
        x(&mut svc, b, lock),
        vec![queued(b, lock, Mode::Exclusive, 1)]
    );

    // t1: A hits a 25 s stop-the-world pause; B heartbeats every 3 s.
    for t in [3, 6, 9] {
        assert_eq!(tick(&mut svc, start + t), vec![]);
        assert_eq!(
            keep_alive(&mut svc, b),
            vec![Output::SessionRenewed {
                session: b,
                expires_at: fencelock::Tick(start + t + 10)
            }]
        );
    }

    // t2 = 10: A missed its heartbeats; the service expires it and releases the lock.
    // t3: B is granted, token 35 — in the same tick, after the expiry.
    assert_eq!(
        tick(&mut svc, start + 10),
        vec![
            Output::SessionExpired { session: a },
            released(a, lock, 34, Expired),
            gx(b, lock, 35),
        ]
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

/// ShardPay's "Reconciliation with fencing" walkthrough: lease 30 s renewed every 10 s
/// (one tick = one second); W1 gets fenceToken 42, a GC pause of 45 s lets the lease
/// expire, standby W2 gets 43, W1's late PUT with 42 gets the 412 analogue, W2's report is
/// the one stored.
#[test]
fn shardpay_reconciliation() {
    let mut svc = svc(8);
    burn_tokens(&mut svc, 41);
    let t0 = svc.now().0;
    let lock = "/locks/reconcile";
    let w1 = open(&mut svc, 30);
    let w2 = open(&mut svc, 30);
    let mut w1_keeper = SessionKeeper::new(30, 10, 5).unwrap();
    w1_keeper.heartbeat_sent(t0).unwrap();
    assert!(w1_keeper.heartbeat_acked(t0).unwrap());

    // W1 acquires: fenceToken=42. Standby W2 waits (a watch, no polling).
    assert_eq!(x(&mut svc, w1, lock), vec![gx(w1, lock, 42)]);
    assert_eq!(
        x(&mut svc, w2, lock),
        vec![queued(w2, lock, Mode::Exclusive, 1)]
    );

    // Both renew at t0 + 10. W1's GC pause starts at t0 + 12 and lasts 45 s; W2 keeps
    // renewing every 10 s.
    tick(&mut svc, t0 + 10);
    keep_alive(&mut svc, w1);
    w1_keeper.heartbeat_sent(t0 + 10).unwrap();
    assert!(w1_keeper.heartbeat_acked(t0 + 10).unwrap());
    keep_alive(&mut svc, w2);
    assert!(w1_keeper.may_act(t0 + 12));
    for t in [20, 30] {
        assert_eq!(tick(&mut svc, t0 + t), vec![]);
        keep_alive(&mut svc, w2);
    }
    // W1's lease, renewed at t0 + 10, runs out at t0 + 40: the service expires it and
    // grants the standby fenceToken=43 in the same tick.
    assert_eq!(
        tick(&mut svc, t0 + 40),
        vec![
            Output::SessionExpired { session: w1 },
            released(w1, lock, 42, Expired),
            gx(w2, lock, 43),
        ]
    );
    // W2 writes its report with 43.
    let mut s3 = Store::new(true);
    assert_eq!(s3.put(w2, Token(43), "W2 report"), Ok(()));

    // t0 + 57: W1 resumes. Its own keeper says the lease is gone (it had said "stop" at
    // t0 + 35); W1 ignores it and PUTs report.xml with 42: 412 Precondition Failed.
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

/// What each party saw in the seed's timeline, across the three pieces.
struct Timeline {
    outputs: Vec<Output>,
    a_may_act_when_paused: bool,
    a_lease_at_resume: Lease,
    a_late_write: Result<(), Error>,
    store: Store,
    holder_at_end: Vec<(SessionId, Mode, u64)>,
    a: SessionId,
    b: SessionId,
}

/// The seed's full timeline across `LockService`, `SessionKeeper` and the resource, with
/// or without the `FenceGate` in front of the resource.
fn seed_timeline(fenced: bool) -> Timeline {
    let mut svc = svc(8);
    burn_tokens(&mut svc, 33);
    let s = svc.now().0; // the story's t = 0
    let lock = "storage-lock";
    let mut outputs = Vec::new();

    // Clients keep their own view of their lease: ttl 10 s, heartbeat 3 s, margin 2 s.
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    let mut keeper_a = SessionKeeper::new(10, 3, 2).unwrap();
    let mut keeper_b = SessionKeeper::new(10, 3, 2).unwrap();
    for k in [&mut keeper_a, &mut keeper_b] {
        k.heartbeat_sent(s).unwrap();
        k.heartbeat_acked(s).unwrap();
    }
    outputs.extend(x(&mut svc, a, lock)); // A: token 34
    outputs.extend(x(&mut svc, b, lock)); // B waits
    let mut store = Store::new(fenced);
    assert!(keeper_a.may_act(s));
    store.put(a, Token(34), "A's first write").unwrap();

    // t1: A pauses. B heartbeats when its keeper says one is due.
    let mut t = s + 1;
    loop {
        t = keeper_b.heartbeat_due(t);
        if t >= s + 10 {
            break;
        }
        outputs.extend(tick(&mut svc, t));
        keeper_b.heartbeat_sent(t).unwrap();
        for o in keep_alive(&mut svc, b) {
            assert!(matches!(o, Output::SessionRenewed { .. }));
            assert!(keeper_b.heartbeat_acked(t).unwrap());
            outputs.push(o);
        }
    }
    // A's keeper would have said "stop" at t = 8 (ttl − margin) had A been running.
    let a_may_act_when_paused = keeper_a.may_act(s + 8);

    // t2 = 10: the service expires A; t3: B is granted 35 and writes.
    outputs.extend(tick(&mut svc, s + 10));
    assert!(keeper_b.may_act(s + 10));
    store.put(b, Token(35), "B's write").unwrap();
    // The service's SessionExpired for A goes unheard: A is paused.

    // t4 = 26: A wakes, believes it still holds the lock, and writes with 34.
    let a_lease_at_resume = keeper_a.lease(s + 26);
    let a_late_write = store.put(a, Token(34), "A's late write");
    Timeline {
        outputs,
        a_may_act_when_paused,
        a_lease_at_resume,
        a_late_write,
        store,
        holder_at_end: holders(&svc, lock),
        a,
        b,
    }
}

#[test]
fn seed_timeline_with_fence_gate() {
    let tl = seed_timeline(true);
    let (a, b) = (tl.a, tl.b);
    let lock = "storage-lock";
    let renewals = |ts: [u64; 3]| {
        ts.map(|t| Output::SessionRenewed {
            session: b,
            expires_at: fencelock::Tick(t + 10),
        })
    };
    let mut expected = vec![gx(a, lock, 34), queued(b, lock, Mode::Exclusive, 1)];
    expected.extend(renewals([3, 6, 9]));
    expected.extend([
        Output::SessionExpired { session: a },
        released(a, lock, 34, Expired),
        gx(b, lock, 35),
    ]);
    assert_eq!(tl.outputs, expected);
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
fn seed_timeline_without_fence_gate_corrupts_the_resource() {
    let tl = seed_timeline(false);
    let (a, b) = (tl.a, tl.b);
    // The lock service did exactly the same thing...
    assert_eq!(tl.outputs, seed_timeline(true).outputs);
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
    // The "efficiency lock" row of the seed's table: Wait::None, nobody queues.
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    assert_eq!(
        acquire(&mut svc, a, "nightly", Mode::Exclusive, Wait::None),
        vec![gx(a, "nightly", 1)]
    );
    assert_eq!(
        acquire(&mut svc, b, "nightly", Mode::Exclusive, Wait::None),
        vec![busy(b, "nightly")]
    );
    assert_eq!(
        release(&mut svc, a, "nightly"),
        vec![released(a, "nightly", 1, Released)]
    );
}
