//! A garbage-collection pause that outlasts a session, replayed in the terminal with the
//! real core: the lock service, A's SessionKeeper, and the FenceGate in front of the
//! storage. (The failure Martin Kleppmann describes in "How to do distributed locking",
//! 2016; the figures here are our own.) One tick = one second.
//! `cargo run -p fencelock --example gc_pause --features alloc`
//!
//! The host handles each message when it arrives, stamped with its clock, and ticks only
//! when a deadline comes due: B's keep-alives at 3, 6 and 9 are applied with no tick
//! between them and still count from their own arrival times.

use fencelock::{
    Config, Error, FenceGate, GateRow, LockService, Mode, Output, Reply, SessionKeeper, Tick,
    Token, VecStorage, Wait,
};

fn main() -> Result<(), Error> {
    let mut svc = LockService::new(VecStorage::new(4, 4, 8), Config::default())?;
    let mut storage = FenceGate::new([GateRow::EMPTY; 2])?;
    let mut events: Vec<Output> = Vec::new();
    let show = |t: u64, what: &str| println!("t={t:>2}  {what}");
    let reply = |r: &Reply| println!("         core → caller: {r:?}");
    // What the host pushes to the sessions the events name.
    let route = |events: &mut Vec<Output>| {
        for o in events.drain(..) {
            println!("         core → session {}: {o:?}", o.session().0);
        }
    };

    // Spend 33 tokens first, so the story's grants are 34 and then 35.
    let warm = svc
        .open_session(Tick(0), 100, &mut events)?
        .opened()
        .expect("an open replies Opened");
    for _ in 0..33 {
        let now = Tick(0);
        svc.acquire(
            now,
            warm,
            "warm-up",
            Mode::Exclusive,
            Wait::None,
            None,
            &mut events,
        )?;
        svc.release(now, warm, "warm-up", None, &mut events)?;
    }
    svc.close_session(Tick(0), warm, None, &mut events)?;
    events.clear();

    let lock = "storage-lock";
    show(0, "A and B open sessions (ttl 10 s)");
    let opened_a = svc.open_session(Tick(0), 10, &mut events)?;
    reply(&opened_a);
    let opened_b = svc.open_session(Tick(0), 10, &mut events)?;
    reply(&opened_b);
    let a = opened_a.opened().expect("an open replies Opened");
    let b = opened_b.opened().expect("an open replies Opened");
    // A's own view of its lease: ttl 10 s, a keep-alive every 3 s, stop 2 s early.
    let mut keeper_a = SessionKeeper::new(10, 3, 2)?;
    keeper_a.keep_alive_sent(0)?;
    keeper_a.keep_alive_acked(0)?;

    show(0, "A acquires the lock; B asks too and waits in the queue");
    let granted_a = svc.acquire(
        Tick(0),
        a,
        lock,
        Mode::Exclusive,
        Wait::Forever,
        None,
        &mut events,
    )?;
    reply(&granted_a);
    let queued_b = svc.acquire(
        Tick(0),
        b,
        lock,
        Mode::Exclusive,
        Wait::Forever,
        None,
        &mut events,
    )?;
    reply(&queued_b);
    route(&mut events);
    let a_token = granted_a.token().unwrap_or(Token(0));

    show(
        1,
        "A enters a 25 s stop-the-world pause; B keeps sending keep-alives",
    );
    for t in [3, 6, 9] {
        if t == 9 {
            // between B's keep-alives, on A's side (A is paused and does not see it)
            show(8, "A's SessionKeeper would now say: stop (ttl - margin)");
            println!("         keeper → {:?}", keeper_a.lease(8));
        }
        // no tick first: the keep-alive carries the host's clock
        let kept = svc.keep_alive(Tick(t), b, None, &mut events)?;
        show(t, "B's keep-alive arrives");
        reply(&kept);
        route(&mut events);
    }

    let due = svc.poll_timeout().unwrap_or(Tick(10));
    show(
        due.0,
        "A's deadline comes due: the host ticks; A expires and B is granted",
    );
    svc.tick(due, &mut events)?;
    let b_token = events
        .iter()
        .find_map(|o| match o {
            Output::Granted { session, token, .. } if *session == b => Some(*token),
            _ => None,
        })
        .unwrap_or(Token(0));
    route(&mut events);

    show(11, "B writes with its token");
    println!("         storage → {:?}", storage.admit("file", b_token));
    show(
        26,
        "A wakes up, believes it still holds the lock, writes with its old token",
    );
    println!("         keeper → {:?}", keeper_a.lease(26));
    println!("         storage → {:?}", storage.admit("file", a_token));
    Ok(())
}
