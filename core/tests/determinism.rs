//! Seeded random input sequences (the seed is printed on failure; replay one with
//! `FENCELOCK_SEED=<n> cargo test -p fencelock --test determinism`):
//! * the same inputs give the same outputs and the same snapshot bytes, twice, and in
//!   different storage types and sizes;
//! * snapshot → restore mid-run gives a service that behaves identically from then on;
//! * after every input, every invariant holds, and the history obeys the ones that need
//!   it: tokens rise, FIFO, one exclusive waiter woken at a time, no grant to the dead,
//!   lock-delay, atomic errors, and the documented bound on outputs per input.

mod common;
use common::*;

use std::collections::{BTreeMap, BTreeSet};

use fencelock::{
    ArrayStorage, Config, Input, LockService, Mode, Output, ReleaseReason, SessionId, Storage,
    VecStorage,
};

fn seeds() -> Vec<u64> {
    match std::env::var("FENCELOCK_SEED") {
        Ok(s) => vec![s.parse().expect("FENCELOCK_SEED is a number")],
        Err(_) => (1..=60).collect(),
    }
}

type Step = Result<Vec<Output>, u32>;

fn apply<S: Storage>(svc: &mut LockService<S>, input: &Input) -> Step {
    let mut got = Vec::new();
    svc.handle(input.clone(), &mut |o| got.push(o))
        .map(|()| got)
        .map_err(|e| e.code())
}

fn config() -> Config {
    Config {
        lock_delay: 3,
        max_name_len: 64,
    }
}

#[test]
fn same_inputs_same_outputs_and_bytes() {
    for seed in seeds() {
        let ins = inputs(seed, 400);
        let mut one = LockService::new(VecStorage::new(12, 4, 16), config()).unwrap();
        let mut two = LockService::new(VecStorage::new(12, 4, 16), config()).unwrap();
        // another storage type: the same bytes
        let mut three = LockService::new(ArrayStorage::<12, 4, 16>::new(), config()).unwrap();
        for (i, input) in ins.iter().enumerate() {
            let a = apply(&mut one, input);
            assert_eq!(a, apply(&mut two, input), "seed {seed} step {i}: {input:?}");
            assert_eq!(
                a,
                apply(&mut three, input),
                "seed {seed} step {i}: {input:?}"
            );
            let bytes = one.snapshot_vec();
            assert_eq!(bytes, two.snapshot_vec(), "seed {seed} step {i}");
            let mut buf = vec![0u8; bytes.len()];
            three.snapshot(&mut buf).unwrap();
            assert_eq!(bytes, buf, "seed {seed} step {i}");
        }
    }
}

#[test]
fn a_restored_service_behaves_like_the_original() {
    for seed in seeds() {
        let ins = inputs(seed, 300);
        let cut = 50 + (seed as usize * 37) % 200;
        let mut original = LockService::new(VecStorage::new(12, 4, 16), config()).unwrap();
        for input in &ins[..cut] {
            let _ = apply(&mut original, input);
        }
        let bytes = original.snapshot_vec();
        let mut restored = LockService::restore(VecStorage::new(12, 4, 16), &bytes)
            .map_err(|e| e.1)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(restored.snapshot_vec(), bytes, "seed {seed}");
        for (i, input) in ins[cut..].iter().enumerate() {
            assert_eq!(
                apply(&mut restored, input),
                apply(&mut original, input),
                "seed {seed} step {}: {input:?}",
                cut + i
            );
            assert_eq!(
                restored.snapshot_vec(),
                original.snapshot_vec(),
                "seed {seed}"
            );
            assert_eq!(
                restored.poll_timeout(),
                original.poll_timeout(),
                "seed {seed}"
            );
        }
    }
}

/// The history-level invariants, checked input by input against the state before it.
struct History {
    max_token: u64,
    delay_until: BTreeMap<String, u64>,
}

impl History {
    fn check(&mut self, svc: &Svc, before: &Before, input: &Input, step: &Step, ctx: &str) {
        let outs = match step {
            Err(_) => {
                assert_eq!(
                    svc.snapshot_vec(),
                    before.bytes,
                    "{ctx}: a refused input changed the state"
                );
                return;
            }
            Ok(o) => o,
        };
        // 7. the documented bound on outputs per input
        let bound = 1 + before.sessions + 2 * before.claims;
        assert!(
            outs.len() as u32 <= bound,
            "{ctx}: {} outputs > bound {bound}",
            outs.len()
        );
        let live: BTreeSet<SessionId> = svc.sessions().collect();
        let mut granted: BTreeMap<String, Vec<(SessionId, Mode)>> = BTreeMap::new();
        let now = svc.now().0;
        for o in outs {
            match o {
                Output::Granted {
                    session,
                    lock,
                    mode,
                    token,
                } => {
                    let held = before
                        .holders
                        .get(lock.as_str())
                        .and_then(|h| h.get(session));
                    if let Some(&t) = held {
                        // 10. re-acquire (or a replayed grant) returns the same token
                        assert_eq!(t, token.0, "{ctx}: re-acquire changed the token");
                        continue;
                    }
                    if token.0 <= self.max_token {
                        // only a replay of a recorded grant may repeat an old token
                        assert!(
                            matches!(
                                input,
                                Input::Acquire {
                                    request: Some(_),
                                    ..
                                }
                            ) && outs.len() == 1,
                            "{ctx}: token {token} not above {}",
                            self.max_token
                        );
                        continue;
                    }
                    // 2. tokens rise
                    self.max_token = token.0;
                    // 4. no grant to the dead
                    assert!(
                        live.contains(session),
                        "{ctx}: {session} granted after its end"
                    );
                    // 8. lock-delay
                    if let Some(&until) = self.delay_until.get(lock.as_str()) {
                        assert!(
                            now >= until,
                            "{ctx}: {lock} granted at {now} in lock-delay until {until}"
                        );
                    }
                    granted
                        .entry(lock.as_str().to_owned())
                        .or_default()
                        .push((*session, *mode));
                }
                Output::Released {
                    lock,
                    reason: ReleaseReason::Expired,
                    ..
                } if svc.config().lock_delay > 0 => {
                    self.delay_until
                        .insert(lock.as_str().to_owned(), now + svc.config().lock_delay);
                }
                _ => {}
            }
        }
        // 3. FIFO and no herd: the waiters granted are the head of the queue as it was,
        // less the waits that left it during this input.
        for (lock, g) in &granted {
            let queue = before.waiters.get(lock).cloned().unwrap_or_default();
            let from_queue: Vec<_> = g.iter().filter(|(s, _)| queue.contains(s)).collect();
            if from_queue.is_empty() {
                continue;
            }
            let still: BTreeSet<SessionId> = svc.waiters(lock).map(|w| w.session).collect();
            let in_order: Vec<SessionId> = queue
                .iter()
                .copied()
                .filter(|s| still.contains(s) || g.iter().any(|(x, _)| x == s))
                .collect();
            let got: Vec<SessionId> = from_queue.iter().map(|(s, _)| *s).collect();
            assert_eq!(
                got[..],
                in_order[..got.len()],
                "{ctx}: {lock} not granted in FIFO order"
            );
            if from_queue.iter().any(|(_, m)| *m == Mode::Exclusive) {
                assert_eq!(
                    from_queue.len(),
                    1,
                    "{ctx}: {lock}: an exclusive waiter woken with others"
                );
            }
        }
    }
}

struct Before {
    bytes: Vec<u8>,
    sessions: u32,
    claims: u32,
    holders: BTreeMap<String, BTreeMap<SessionId, u64>>,
    waiters: BTreeMap<String, Vec<SessionId>>,
}

fn before(svc: &Svc) -> Before {
    let mut holders = BTreeMap::new();
    let mut waiters = BTreeMap::new();
    for l in svc.locks() {
        let l = l.as_str();
        holders.insert(
            l.to_owned(),
            svc.holders(l).map(|h| (h.session, h.token.0)).collect(),
        );
        waiters.insert(l.to_owned(), svc.waiters(l).map(|w| w.session).collect());
    }
    Before {
        bytes: svc.snapshot_vec(),
        sessions: svc.len().sessions,
        claims: svc.len().claims,
        holders,
        waiters,
    }
}

#[test]
fn every_invariant_holds_after_every_input() {
    let mut grants = 0;
    let mut refusals = 0;
    for seed in seeds() {
        let ins = inputs(seed, 400);
        let mut svc = svc_with(12, 4, 16, config());
        let mut history = History {
            max_token: 0,
            delay_until: BTreeMap::new(),
        };
        for (i, input) in ins.iter().enumerate() {
            let ctx = format!("seed {seed} step {i}: {input:?}");
            let b = before(&svc);
            let step = apply(&mut svc, input);
            match &step {
                Ok(o) => {
                    grants += o
                        .iter()
                        .filter(|o| matches!(o, Output::Granted { .. }))
                        .count()
                }
                Err(_) => refusals += 1,
            }
            history.check(&svc, &b, input, &step, &ctx);
            check_invariants(&svc);
        }
    }
    // the generator reaches interesting states, not only refusals (checked over the
    // default seed set; one replayed seed may be dull)
    assert!(
        seeds().len() == 1 || (grants > 1_000 && refusals > 100),
        "grants {grants}, refusals {refusals}"
    );
}
