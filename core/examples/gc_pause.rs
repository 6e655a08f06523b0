//! The GC-pause timeline of the seed, replayed in the terminal with the real core.
//! `cargo run -p fencelock --example gc_pause --features alloc`

use fencelock::{
    Config, Error, FenceGate, GateRow, LockService, Mode, Output, Tick, VecStorage, Wait,
};

fn main() -> Result<(), Error> {
    let mut svc = LockService::new(VecStorage::new(4, 4, 8), Config::default())?;
    let mut gate = FenceGate::new([GateRow::EMPTY; 2]);
    let show = |t: u64, what: &str| println!("t={t:>2}  {what}");
    let mut log = |o: Output| println!("       core → {o:?}");
    let a = svc.open_session(10, &mut log)?;
    let b = svc.open_session(10, &mut log)?;
    show(0, "A acquires the lock");
    svc.acquire(
        a,
        "storage-lock",
        Mode::Exclusive,
        Wait::Forever,
        None,
        &mut log,
    )?;
    show(0, "B asks too and waits in the queue");
    svc.acquire(
        b,
        "storage-lock",
        Mode::Exclusive,
        Wait::Forever,
        None,
        &mut log,
    )?;
    show(
        1,
        "A enters a 25-tick stop-the-world pause; B keeps heartbeating",
    );
    for t in [3, 6, 9] {
        svc.tick(Tick(t), &mut log)?;
        svc.keep_alive(b, None, &mut log)?;
    }
    show(
        10,
        "A missed its heartbeats: the service expires it and grants B",
    );
    let mut b_token = None;
    svc.tick(Tick(10), &mut |o| {
        if let Output::Granted { token, .. } = &o {
            b_token = Some(*token);
        }
        println!("       core → {o:?}");
    })?;
    let b_token = b_token.expect("B is granted at t=10");
    show(11, "B writes with its token");
    println!("       storage → {:?}", gate.admit("file", b_token));
    show(
        26,
        "A wakes up, believes it still holds the lock, writes with token 1",
    );
    println!(
        "       storage → {:?}",
        gate.admit("file", fencelock::Token(1))
    );
    Ok(())
}
