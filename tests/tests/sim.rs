//! The deterministic simulation (see `fencelock_tests::sim`).
//!
//! * `SIM_SEEDS` (default 10 000 in a release build, 200 in a debug build) seeds × `SIM_STEPS`
//!   (default 1 000) steps; `SIM_FIRST_SEED` moves the window (a soak: see tests/README.md).
//! * `SEED=<n>` replays one seed exactly and prints its last events.

use fencelock_tests::sim::{run, run_many, Fault, HostLoop, SimConfig};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

#[test]
fn simulation_many_seeds() {
    let default = if cfg!(debug_assertions) { 200 } else { 10_000 };
    let seeds = env_u64("SIM_SEEDS").unwrap_or(default);
    let steps = env_u64("SIM_STEPS").unwrap_or(1000) as u32;
    let first = env_u64("SIM_FIRST_SEED").unwrap_or(0);
    match run_many(first, seeds, steps, Fault::None) {
        Ok(r) => {
            println!(
                "SIM seeds={seeds} steps_per_seed={steps} first_seed={first} failures=0 steps={} inputs={} refused={} events={} grants={} expiries={} waits={} pauses={} lost_keep_alives={} untick_inputs={} writes_accepted={} stale_writes_refused={} round_trips={} permit_grants={} watch_events={}",
                r.steps, r.inputs, r.refused, r.outputs, r.grants, r.expiries, r.waits, r.pauses,
                r.lost_keep_alives, r.untick_inputs, r.writes_accepted, r.stale_refused, r.round_trips,
                r.permit_grants, r.watch_events
            );
            // The runs must actually exercise what they claim to check.
            assert!(r.grants > 0 && r.expiries > 0 && r.waits > 0 && r.refused > 0);
            // Semaphores were granted and watchers saw holder changes (and checked them).
            assert!(r.permit_grants > 0 && r.watch_events > 0, "{r:?}");
            // Hosts that tick late or never applied messages at later times than the
            // service's, with no tick first.
            assert!(
                r.untick_inputs > 0,
                "no input was applied without a tick first"
            );
            assert!(
                r.stale_refused > 0 || seeds < 50,
                "no stale write was ever attempted"
            );
        }
        Err(f) => panic!("{f}"),
    }
}

#[test]
fn replay_seed() {
    let seed = env_u64("SEED").unwrap_or(7);
    let mut cfg = SimConfig::new(seed);
    cfg.round_trip_every = 1;
    // What a failure's replay line names besides the seed: its length, its host loop and
    // its fault, when they are not the defaults.
    if let Some(steps) = env_u64("SIM_STEPS") {
        cfg.steps = steps as u32;
    }
    cfg.host = std::env::var("SIM_HOST").ok().map(|h| {
        HostLoop::ALL
            .into_iter()
            .find(|l| l.name() == h)
            .unwrap_or_else(|| panic!("SIM_HOST={h:?}: tick_first, on_timer or never_ticks"))
    });
    match std::env::var("SIM_MODEL").as_deref() {
        Ok("off") => cfg.check_model = false,
        Ok(other) => panic!("SIM_MODEL={other:?}: off, or unset"),
        Err(_) => {}
    }
    if let Ok(f) = std::env::var("SIM_FAULT") {
        cfg.fault = Fault::all()
            .into_iter()
            .find(|x| format!("{x:?}") == f)
            .unwrap_or_else(|| panic!("SIM_FAULT={f:?}: one of {:?}", Fault::all()));
    }
    match run(cfg) {
        Ok(r) => println!("seed {seed}: ok, {r:?}"),
        Err(f) => panic!("{f}"),
    }
}

/// A failure's replay line names every setting that chose its path, so the run it prints
/// is the run that failed: the seed, a length other than the default, a host loop given
/// to the run, a fault, the model check turned off, and the profile `make test` ran it
/// in (debug assertions on).
#[test]
fn a_failure_prints_a_replay_line_that_reproduces_it() {
    let mut cfg = SimConfig::new(0);
    cfg.fault = Fault::HostStampsStaleTime;
    cfg.host = Some(HostLoop::OnTimer);
    cfg.steps = 1500;
    cfg.check_model = false;
    let f = (0..300)
        .find_map(|seed| run(SimConfig { seed, ..cfg }).err())
        .expect("the broken host is caught on some seed");
    let line = f.to_string();
    let replay = line
        .lines()
        .find(|l| l.starts_with("replay: "))
        .expect("a replay line");
    assert_eq!(
        replay,
        format!(
            "replay: SEED={} SIM_STEPS=1500 SIM_HOST=on_timer SIM_FAULT=HostStampsStaleTime \
             SIM_MODEL=off cargo test --profile verify -p fencelock-tests --features fault-injection \
             --test sim -- replay_seed --nocapture",
            f.seed
        )
    );
    // What the line names, read back as replay_seed reads it, fails the same way.
    let again = run(SimConfig {
        seed: f.seed,
        round_trip_every: 1,
        ..cfg
    })
    .expect_err("the replay fails too");
    assert_eq!((again.step, &again.message), (f.step, &f.message));
}

#[test]
fn a_seed_replays_exactly() {
    let mut hashes = Vec::new();
    for seed in [1, 2, 3] {
        let a = run(SimConfig::new(seed)).expect("passes");
        let b = run(SimConfig::new(seed)).expect("passes");
        // The counts and the hash of every input, answer and event, and the final state.
        assert_eq!(a, b, "seed {seed} is not deterministic");
        hashes.push(a.trace_hash);
    }
    hashes.sort_unstable();
    hashes.dedup();
    assert_eq!(
        hashes.len(),
        3,
        "different seeds must run differently: {hashes:?}"
    );
}

/// The broken build: a gate that accepts lower tokens. The simulation must catch it (a
/// paused holder's late write lands after its successor's), and the same seed must pass
/// with the real gate.
#[test]
fn fault_gate_accepting_lower_tokens_is_caught() {
    let mut caught = None;
    for seed in 0..300 {
        let mut cfg = SimConfig::new(seed);
        cfg.fault = Fault::GateAcceptsLower;
        if let Err(f) = run(cfg) {
            assert!(f.message.contains("stale write accepted"), "{f}");
            caught = Some(f);
            break;
        }
    }
    let f = caught.expect("300 seeds did not catch a gate that accepts lower tokens");
    println!("caught as expected:\n{f}");
    println!(
        "FAULT gate-accepts-lower-tokens caught by the simulation: seed {} step {}: {}",
        f.seed, f.step, f.message
    );
    run(SimConfig::new(f.seed)).expect("the same seed passes with the real gate");
}

/// A broken router: watcher events of releases never reach the watcher. The clients'
/// views (built only from the events they saw) must catch it — the history checks see the
/// service's events and cannot — and the same seed must pass with a correct router.
#[test]
fn fault_router_dropping_watcher_events_is_caught() {
    let mut caught = None;
    for seed in 0..300 {
        let mut cfg = SimConfig::new(seed);
        cfg.fault = Fault::RouterDropsReleasedWatcherEvents;
        if let Err(f) = run(cfg) {
            assert!(f.message.contains("watches"), "{f}");
            caught = Some(f);
            break;
        }
    }
    let f = caught.expect("300 seeds did not catch a router that drops watcher events");
    println!(
        "FAULT router-drops-watcher-events caught by the simulation: seed {} step {}: {}",
        f.seed, f.step, f.message
    );
    run(SimConfig::new(f.seed)).expect("the same seed passes with a correct router");
}

/// Every host loop — tick first, tick on the timer (sometimes late), never tick — gives a
/// correct service over the same seeds: messages stamped with the host's clock need no
/// tick before them (docs/SPEC.md §2).
#[test]
fn every_host_loop_passes_the_same_seeds() {
    // 20 seeds per loop in a quick debug run, 200 in an optimised one or with VERIFY_FULL.
    let full = !cfg!(debug_assertions) || std::env::var_os("VERIFY_FULL").is_some();
    let seeds = if full { 200 } else { 20 };
    for host in HostLoop::ALL {
        let mut untick = 0;
        for seed in 0..seeds {
            let mut cfg = SimConfig::new(seed);
            cfg.host = Some(host);
            match run(cfg) {
                Ok(r) => untick += r.untick_inputs,
                Err(f) => panic!("{host:?}: {f}"),
            }
        }
        println!(
            "host {host:?}: {seeds} seeds passed, {untick} inputs applied without a tick first"
        );
        if host != HostLoop::TickFirst {
            assert!(untick > 0, "{host:?}");
        }
    }
}

/// The broken host: messages stamped with the time of its last tick instead of its clock,
/// and late ticks. The simulation's no-grant-to-the-dead check (by the host's clock) must
/// catch it, and the same seed must pass with a correct host.
#[test]
fn fault_host_stamping_stale_time_is_caught() {
    let mut caught = None;
    for seed in 0..300 {
        let mut cfg = SimConfig::new(seed);
        cfg.fault = Fault::HostStampsStaleTime;
        if let Err(f) = run(cfg) {
            caught = Some(f);
            break;
        }
    }
    let f = caught.expect("300 seeds did not catch a host that stamps stale times");
    println!("caught as expected:\n{f}");
    println!(
        "FAULT host-stamps-stale-time caught by the simulation: seed {} step {}: {}",
        f.seed, f.step, f.message
    );
    assert!(f.message.contains("granted to dead"), "{f}");
    run(SimConfig::new(f.seed)).expect("the same seed passes with a correct host");
}

/// A broken core (test-only feature `fault-injection`): a tick grants before it expires.
/// With the reference model switched off, the simulation's own invariant checks must catch
/// it (a grant to a session already past its deadline), and the same seed must pass with
/// the real order.
#[cfg(feature = "fault-injection")]
#[test]
fn fault_core_expiry_after_grants_is_caught() {
    let mut caught = None;
    for seed in 0..1000 {
        let mut cfg = SimConfig::new(seed);
        cfg.fault = Fault::CoreExpiryAfterGrants;
        cfg.check_model = false;
        if let Err(f) = run(cfg) {
            caught = Some(f);
            break;
        }
    }
    let f = caught.expect("1000 seeds did not catch a core that grants before expiring");
    println!("caught as expected:\n{f}");
    println!(
        "FAULT core-expiry-after-grants caught by the simulation: seed {} step {}: {}",
        f.seed, f.step, f.message
    );
    assert!(
        f.message.contains("granted to dead") || f.message.contains("expired after a grant"),
        "{f}"
    );
    run(SimConfig::new(f.seed)).expect("the same seed passes with the real core");
}
