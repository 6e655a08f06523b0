//! The seeds' stories, asserted output by output.

use fencelock::{
    Config, Error, FenceGate, GateRow, Lease, LockName, LockService, Mode, Output, ReleaseReason,
    SessionKeeper, Tick, Token, VecStorage, Wait,
};

fn name(s: &str) -> LockName {
    LockName::new(s).unwrap()
}

/// Reference article, "the failure on a timeline": A granted 34, paused 25 s, expired,
/// B granted 35, A's late write with 34 refused at the resource.
#[test]
fn gc_pause_timeline() {
    // One tick = one second; session timeout 10 s, heartbeats every 3 s.
    let mut svc = LockService::new(VecStorage::new(8, 8, 16), Config::default()).unwrap();
    let mut out = Vec::new();
    let mut sink = |o| out.push(o);
    // Burn 33 tokens on another lock so A's grant is token 34, as in the article.
    let warm = svc.open_session(1_000, &mut sink).unwrap();
    for _ in 0..33 {
        svc.acquire(warm, "warmup", Mode::Exclusive, Wait::None, None, &mut sink)
            .unwrap();
        svc.release(warm, "warmup", None, &mut sink).unwrap();
    }
    svc.close_session(warm, None, &mut sink).unwrap();
    drop(sink);
    out.clear();

    let mut got = Vec::new();
    // t0 = 0: A and B open sessions; A acquires (34).
    let a = svc.open_session(10, &mut |o| got.push(o)).unwrap();
    let b = svc.open_session(10, &mut |o| got.push(o)).unwrap();
    got.clear();
    svc.acquire(
        a,
        "jobs/reindex",
        Mode::Exclusive,
        Wait::None,
        None,
        &mut |o| got.push(o),
    )
    .unwrap();
    assert_eq!(
        got,
        vec![Output::Granted {
            session: a,
            lock: name("jobs/reindex"),
            mode: Mode::Exclusive,
            token: Token(34)
        }]
    );
    got.clear();
    // B waits in the queue.
    svc.acquire(
        b,
        "jobs/reindex",
        Mode::Exclusive,
        Wait::Forever,
        None,
        &mut |o| got.push(o),
    )
    .unwrap();
    assert_eq!(
        got,
        vec![Output::Queued {
            session: b,
            lock: name("jobs/reindex"),
            mode: Mode::Exclusive,
            position: 1
        }]
    );
    got.clear();
    // t1 = 1: A enters a 25 s pause; B keeps heartbeating every 3 s.
    let mut t = 0;
    while t < 9 {
        t += 3;
        svc.tick(Tick(t), &mut |o| got.push(o)).unwrap();
        svc.keep_alive(b, None, &mut |o| got.push(o)).unwrap();
    }
    assert!(got
        .iter()
        .all(|o| matches!(o, Output::SessionRenewed { session, .. } if *session == b)));
    got.clear();
    // t2 = 10: A missed its heartbeats; the service expires it; t3: B granted 35.
    svc.tick(Tick(10), &mut |o| got.push(o)).unwrap();
    assert_eq!(
        got,
        vec![
            Output::SessionExpired { session: a },
            Output::Released {
                session: a,
                lock: name("jobs/reindex"),
                token: Token(34),
                reason: ReleaseReason::Expired
            },
            Output::Granted {
                session: b,
                lock: name("jobs/reindex"),
                mode: Mode::Exclusive,
                token: Token(35)
            },
        ]
    );
    // B writes with 35; at t4 = 26 A resumes and writes with 34.
    let mut gate = FenceGate::new([GateRow::EMPTY; 4]);
    assert_eq!(gate.admit("storage", Token(35)), Ok(()));
    assert_eq!(
        gate.admit("storage", Token(34)),
        Err(Error::Stale {
            token: Token(34),
            highest: Token(35)
        })
    );
    assert_eq!(gate.highest("storage"), Some(Token(35)));
    // A's SessionKeeper would have told it to stop before any of this (ttl 10, margin 2).
    let mut keeper = SessionKeeper::new(10, 3, 2).unwrap();
    keeper.heartbeat_sent(0).unwrap();
    keeper.heartbeat_acked(0).unwrap();
    assert!(keeper.may_act(1));
    assert_eq!(keeper.lease(8), Lease::Jeopardy { expires_at: 10 });
    assert_eq!(keeper.lease(26), Lease::Expired);
}
