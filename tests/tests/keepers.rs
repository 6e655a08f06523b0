//! A host that handles messages as they arrive and ticks late or never loses no session
//! its clients' `SessionKeeper`s consider safe (docs/SPEC.md §2, §8, §10).
//!
//! Random clients, each with a `SessionKeeper` counting in the host's tick units, open
//! sessions and send keep-alives when their keeper says one is due; each message reaches
//! the host after a random delay, and each answer (and each expiry) reaches its client
//! after another. Some clients stop for a while (a pause), so sessions do expire. The host
//! applies every message at its arrival time, stamped with its clock, with no tick before
//! it; it ticks on its timer but late (`Late`), or never (`Never`).
//!
//! At every tick of the clock, for every client whose keeper says `Safe` or `Jeopardy`:
//! the service lists its session, with a deadline after the clock (never before the last
//! acknowledged send + ttl); and no `SessionExpired` ever names a session whose keeper
//! says `Safe` or `Jeopardy` at that time. A broken host that stamps messages with the
//! time of its last tick instead of its clock fails these checks (each, with the other
//! off), so they can fail.

use std::collections::BTreeMap;

use fencelock::{
    Config, Input, Lease, LockService, Output, Reply, SessionId, SessionKeeper, Tick, VecStorage,
};
use fencelock_tests::rng::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HostTicks {
    /// On its timer, but late: each tick comes 0–12 ticks after `poll_timeout`.
    Late,
    /// Never.
    Never,
}

/// The host's fault under test (the check must catch it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stamp {
    /// Each message stamped with the host's clock at arrival.
    Clock,
    /// Broken: each message stamped with the service's time (that of the last tick or
    /// message), as a host that never passes its clock would.
    LastApplied,
}

/// What reaches a client, at a time.
#[derive(Clone, Debug)]
enum Back {
    Opened { session: SessionId, sent: u64 },
    Acked { session: SessionId, sent: u64 },
    Lost { session: SessionId },
}

#[derive(Debug)]
struct Client {
    keeper: Option<SessionKeeper>,
    session: Option<SessionId>,
    opening: bool,
    paused_until: u64,
    /// The send time of the latest keep-alive (or open) of this session whose ack the
    /// keeper took: the service's deadline is never before it + ttl.
    acked: Option<u64>,
}

#[derive(Debug, Default)]
struct Counts {
    checks: u64,
    safe_checks: u64,
    expiries: u64,
    keep_alives: u64,
    untick_keep_alives: u64,
}

/// Runs one seed; `Err` names the first session lost while its keeper said it was safe.
/// `bound`: also hold the deadline to the last acknowledged send + ttl (off only to show
/// that the plainer check, a live session with a deadline ahead, can fail on its own).
fn run(
    seed: u64,
    ticks: HostTicks,
    stamp: Stamp,
    bound: bool,
    counts: &mut Counts,
) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let n = rng.range(2, 6) as usize;
    let ttl = rng.range(6, 30);
    let margin = rng.range(1, ttl / 3);
    let interval = rng.range(1, ttl - margin - 1);
    let mut svc =
        LockService::new(VecStorage::new(n, 1, 1), Config::default()).map_err(|e| e.to_string())?;
    let mut clients: Vec<Client> = (0..n)
        .map(|_| Client {
            keeper: None,
            session: None,
            opening: false,
            paused_until: 0,
            acked: None,
        })
        .collect();
    let mut owner: BTreeMap<SessionId, usize> = BTreeMap::new();
    // In flight: to the host (arrival, client, input, send time), to clients (arrival, client, news).
    let mut to_host: Vec<(u64, usize, Input, u64)> = Vec::new();
    let mut to_client: Vec<(u64, usize, Back)> = Vec::new();
    let mut next_tick: Option<u64> = None;
    for t in 0..400u64 {
        // 1. News reaches the clients.
        let (now, later): (Vec<_>, Vec<_>) = to_client.drain(..).partition(|(at, _, _)| *at <= t);
        to_client = later;
        for (_, c, news) in now {
            let cl = &mut clients[c];
            match news {
                Back::Opened { session, sent } => {
                    cl.session = Some(session);
                    cl.opening = false;
                    cl.acked = None;
                    if let Some(k) = cl.keeper.as_mut() {
                        if k.keep_alive_acked(sent) == Ok(true) {
                            cl.acked = Some(sent);
                        }
                    }
                }
                Back::Acked { session, sent } if cl.session == Some(session) => {
                    if let Some(k) = cl.keeper.as_mut() {
                        // An ack the keeper no longer remembers is refused: harmless.
                        if k.keep_alive_acked(sent) == Ok(true) {
                            cl.acked = cl.acked.max(Some(sent));
                        }
                    }
                }
                Back::Lost { session } if cl.session == Some(session) => {
                    if let Some(k) = cl.keeper.as_mut() {
                        k.session_lost();
                    }
                    cl.session = None;
                    cl.acked = None;
                }
                _ => {}
            }
        }
        // 2. Clients act on their own clock (the same ticks).
        for (c, cl) in clients.iter_mut().enumerate() {
            if cl.paused_until > t {
                continue;
            }
            if rng.chance(1) {
                cl.paused_until = t + rng.range(1, 2 * ttl);
                continue;
            }
            let delay = rng.below(4);
            match (cl.session, cl.opening) {
                (None, false) => {
                    let mut k =
                        SessionKeeper::new(ttl, interval, margin).map_err(|e| e.to_string())?;
                    k.keep_alive_sent(t).map_err(|e| e.to_string())?;
                    cl.keeper = Some(k);
                    cl.opening = true;
                    to_host.push((t + delay, c, Input::OpenSession { now: Tick(0), ttl }, t));
                }
                (Some(session), _) => {
                    let k = cl.keeper.as_mut().expect("a keeper with the session");
                    if k.next_keep_alive(t) <= t && !matches!(k.lease(t), Lease::Expired) {
                        k.keep_alive_sent(t).map_err(|e| e.to_string())?;
                        let input = Input::KeepAlive {
                            now: Tick(0),
                            session,
                            request: None,
                        };
                        to_host.push((t + delay, c, input, t));
                    }
                }
                _ => {}
            }
        }
        // 3. The host: each message that arrives now is applied at its arrival time, with
        //    no tick before it; then maybe its (late) timer.
        to_host.sort_by_key(|(at, c, _, _)| (*at, *c));
        let (now, later): (Vec<_>, Vec<_>) = to_host.drain(..).partition(|(at, ..)| *at <= t);
        to_host = later;
        let mut applied: Vec<(Option<usize>, Input, u64)> = now
            .into_iter()
            .map(|(_, c, input, sent)| (Some(c), input, sent))
            .collect();
        if ticks == HostTicks::Late {
            let due = svc.poll_timeout().map(|d| d.0);
            match (due, next_tick) {
                (Some(d), None) if d <= t => next_tick = Some(t + rng.below(13)),
                (_, Some(at)) if at <= t => {
                    applied.push((None, Input::Tick { now: Tick(0) }, t));
                    next_tick = None;
                }
                _ => {}
            }
        }
        for (from, input, sent) in applied {
            let at = match stamp {
                Stamp::Clock => Tick(t),
                Stamp::LastApplied => svc.now(),
            };
            let untick = at > svc.now();
            let mut events: Vec<Output> = Vec::new();
            let r = svc.handle(input.clone().at(at), &mut events);
            for e in &events {
                if let Output::SessionExpired { session } = e {
                    counts.expiries += 1;
                    let Some(&c) = owner.get(session) else {
                        continue;
                    };
                    if clients[c].session == Some(*session) {
                        let lease = clients[c].keeper.as_ref().map(|k| k.lease(t));
                        if matches!(lease, Some(Lease::Safe { .. } | Lease::Jeopardy { .. })) {
                            return Err(format!(
                                "seed {seed} ({ticks:?}, {stamp:?}): {session} expired at {t} while \
                                 its keeper said {lease:?}"
                            ));
                        }
                    }
                    to_client.push((t + rng.below(4), c, Back::Lost { session: *session }));
                }
            }
            let Some(c) = from else { continue };
            match r {
                Ok(Reply::Opened { session, .. }) => {
                    owner.insert(session, c);
                    to_client.push((t + rng.below(4), c, Back::Opened { session, sent }));
                }
                Ok(Reply::KeptAlive { .. }) => {
                    counts.keep_alives += 1;
                    counts.untick_keep_alives += untick as u64;
                    let session = input.session().expect("a keep-alive names its session");
                    to_client.push((t + rng.below(4), c, Back::Acked { session, sent }));
                }
                // The session is gone (its Lost is on the way) or the table was full.
                Ok(_) | Err(_) => {
                    if matches!(input, Input::OpenSession { .. }) {
                        clients[c].opening = false;
                        clients[c].keeper = None;
                    }
                }
            }
        }
        // 4. The check: a keeper that says safe (or jeopardy) has a live session.
        for cl in &clients {
            let (Some(session), Some(k)) = (cl.session, cl.keeper.as_ref()) else {
                continue;
            };
            counts.checks += 1;
            let lease = k.lease(t);
            if let Lease::Safe { .. } | Lease::Jeopardy { .. } = lease {
                counts.safe_checks += 1;
                let deadline = svc.session(session).map(|i| i.expires_at.0);
                if deadline.is_none_or(|d| d <= t) {
                    return Err(format!(
                        "seed {seed} ({ticks:?}, {stamp:?}): at {t} the keeper of {session} says \
                         {lease:?}, the service's deadline is {deadline:?}"
                    ));
                }
                // ... and not before the last acknowledged send + ttl: the lease the keeper
                // counts is one the service granted.
                if let (true, Some(d), Some(sent)) = (bound, deadline, cl.acked) {
                    if d < sent + ttl {
                        return Err(format!(
                            "seed {seed} ({ticks:?}, {stamp:?}): at {t} the service's deadline \
                             of {session}, {d}, is before its last acknowledged send {sent} + \
                             ttl {ttl}"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// 300 seeds in a quick debug run, 3 000 in an optimised one or with `VERIFY_FULL` set
/// (scripts/test-verify.sh sets it).
fn seeds() -> u64 {
    if cfg!(debug_assertions) && std::env::var_os("VERIFY_FULL").is_none() {
        300
    } else {
        3000
    }
}

#[test]
fn hosts_that_tick_late_or_never_lose_no_session_a_keeper_considers_safe() {
    for ticks in [HostTicks::Late, HostTicks::Never] {
        let mut counts = Counts::default();
        for seed in 0..seeds() {
            run(seed, ticks, Stamp::Clock, true, &mut counts).unwrap_or_else(|e| panic!("{e}"));
        }
        println!(
            "KEEPERS host ticks {ticks:?}: {} seeds, {counts:?}",
            seeds()
        );
        // The runs did what they are for: many safe leases checked, keep-alives applied
        // at a later time than the service's with no tick first, sessions expired.
        assert!(counts.safe_checks > 10_000, "{counts:?}");
        assert!(counts.untick_keep_alives > 1_000, "{counts:?}");
        assert!(counts.expiries > 100, "{counts:?}");
    }
}

/// The checks can fail: a host that stamps messages with the service's last time instead
/// of its clock gives deadlines short of the lease its clients' keepers count (the bound
/// catches it first), and, without the bound, loses sessions those keepers consider safe.
#[test]
fn a_host_stamping_the_last_applied_time_is_caught() {
    for (bound, says) in [
        (true, "last acknowledged send"),
        (false, "the service's deadline is"),
    ] {
        let mut counts = Counts::default();
        let caught = (0..seeds()).find_map(|seed| {
            run(
                seed,
                HostTicks::Late,
                Stamp::LastApplied,
                bound,
                &mut counts,
            )
            .err()
        });
        let e = caught.expect("a host stamping stale times was never caught");
        assert!(e.contains(says), "bound {bound}: {e}");
        println!("caught as expected: {e}");
    }
}
