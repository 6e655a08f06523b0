//! The GC-pause timeline of the seed, replayed in the terminal with the real core: the
//! lock service, A's SessionKeeper, and the FenceGate in front of the storage.
//! `cargo run -p fencelock --example gc_pause`

use fencelock::{
    Config, Error, FenceGate, GateRow, LockService, Mode, Output, SessionKeeper, Tick, Token,
    VecStorage, Wait,
};

fn main() -> Result<(), Error> {
    let mut svc = LockService::new(VecStorage::new(4, 4, 8), Config::default())?;
    let mut storage = FenceGate::new([GateRow::EMPTY; 2]);
    let mut log = |o: Output| println!("         core → {o:?}");
    let show = |t: u64, what: &str| println!("t={t:>2}  {what}");

    // Spend 33 tokens so the story's numbers match the article's (34, then 35).
    let warm = svc.open_session(100, &mut |_| {})?;
    for _ in 0..33 {
        svc.acquire(
            warm,
            "warm-up",
            Mode::Exclusive,
            Wait::None,
            None,
            &mut |_| {},
        )?;
        svc.release(warm, "warm-up", None, &mut |_| {})?;
    }
    svc.close_session(warm, None, &mut |_| {})?;

    let lock = "storage-lock";
    let a = svc.open_session(10, &mut log)?;
    let b = svc.open_session(10, &mut log)?;
    let mut keeper_a = SessionKeeper::new(10, 3, 2)?; // ttl 10 s, heartbeat 3 s, margin 2 s
    keeper_a.heartbeat_sent(0)?;
    keeper_a.heartbeat_acked(0)?;

    show(0, "A acquires the lock; B asks too and waits in the queue");
    svc.acquire(a, lock, Mode::Exclusive, Wait::Forever, None, &mut log)?;
    svc.acquire(b, lock, Mode::Exclusive, Wait::Forever, None, &mut log)?;
    let a_token = svc.holders(lock).next().map_or(Token(0), |h| h.token);

    show(
        1,
        "A enters a 25 s stop-the-world pause; B keeps heartbeating",
    );
    for t in [3, 6, 9] {
        svc.tick(Tick(t), &mut log)?;
        svc.keep_alive(b, None, &mut log)?;
    }
    show(8, "A's SessionKeeper would now say: stop (ttl - margin)");
    println!("         keeper → {:?}", keeper_a.lease(8));

    show(
        10,
        "A missed its heartbeats: the service expires it and grants B",
    );
    let mut b_token = Token(0);
    svc.tick(Tick(10), &mut |o| {
        if let Output::Granted { token, .. } = &o {
            b_token = *token;
        }
        println!("         core → {o:?}");
    })?;

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
