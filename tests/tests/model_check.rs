//! Exhaustive model checking with stateright, over the real core.
//!
//! The state is the service's canonical snapshot plus each client's view (its session,
//! the tokens it believes it holds, an inbox of undelivered outputs) and
//! the resource (highest token per resource, as a `FenceGate` keeps it). Every transition
//! restores the service from the snapshot, applies one real input, checks the state
//! invariants (`check_service`) and snapshots again, so equal states are deduplicated by
//! their canonical bytes.
//!
//! A stop-the-world pause is a client that is not scheduled while time passes: the
//! checker explores every interleaving, so a client may stay silent (no keep-alive, not
//! reading its inbox) for any number of ticks, then write with the token it believes it
//! holds before reading the news (the GC pause fencing exists for). A reply reaches its
//! caller at once; events wait in the inbox of the session they name. Sessions expire;
//! the lock is granted on. Every input carries the host's clock; with a lazy host the
//! clock moves without any tick, and only the inputs' own advances move the service's
//! time (docs/SPEC.md §2). Properties:
//! * always: the service's invariants hold after every input;
//! * always: no write with a token lower than an accepted one is accepted at the resource —
//!   holds with the fence check, and with the check off the checker must find the GC-pause
//!   counterexample by itself;
//! * sometimes: a stale write is attempted and refused (the scenario is reachable).

use fencelock::{
    Config, Input, LockName, LockService, Mode, Output, Reply, SessionId, Tick, VecStorage, Wait,
};
use fencelock_tests::invariants::check_service;
use stateright::{Checker, HasDiscoveries, Model, Property};

const NAMES: [&str; 2] = ["a", "b"];

#[derive(Clone, Debug)]
struct LockModel {
    clients: usize,
    locks: usize,
    fence: bool,
    max_time: u64,
    max_tokens: u64,
    ttl: u64,
    lock_delay: u64,
    /// Run the core with its test-only fault (feature `fault-injection`).
    core_fault: bool,
    /// The host's clock moves without ticking the service (inputs carry it).
    lazy_host: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Msg {
    Granted(usize, u64),
    Lost(usize),
    SessionGone,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Client {
    session: Option<u64>,
    opened: bool,
    /// The token the client believes it holds, per lock.
    believes: Vec<Option<u64>>,
    waiting: Vec<bool>,
    inbox: Vec<Msg>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    svc: Vec<u8>,
    revision: u64,
    /// The host's clock.
    now: u64,
    clients: Vec<Client>,
    /// The gate's highest admitted token per resource (0 = none yet).
    highest: Vec<u64>,
    stale_accepted: bool,
    stale_refused: bool,
    /// A Granted went to a session whose deadline had passed (the lease-expiry race).
    granted_to_dead: bool,
    broken: Option<String>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Action {
    Open(usize),
    Acquire(usize, usize),
    KeepAlive(usize),
    Release(usize, usize),
    Write(usize, usize),
    Deliver(usize),
    Tick,
    /// The lazy host's clock moves on; the service is not ticked.
    Elapse,
}

impl LockModel {
    fn service(&self, bytes: &[u8]) -> LockService<VecStorage> {
        let storage = VecStorage::new(self.clients, self.locks, self.clients * self.locks);
        #[allow(unused_mut)]
        let mut svc = LockService::restore(storage, bytes).expect("own snapshot restores");
        #[cfg(feature = "fault-injection")]
        svc.inject_fault_expiry_after_grants(self.core_fault);
        svc
    }

    /// Applies `input` (stamped with the host's clock) to the service in `st`; routes the
    /// events; returns the caller's reply, or None if refused.
    fn apply(&self, st: &mut State, input: Input) -> Option<Reply> {
        let mut svc = self.service(&st.svc);
        let deadlines: Vec<(SessionId, u64)> = svc
            .sessions()
            .map(|id| (id, svc.session(id).expect("listed").expires_at.0))
            .collect();
        let mut events: Vec<Output> = Vec::new();
        let reply = svc.handle(input.at(Tick(st.now)), &mut events).ok()?;
        let now = svc.now().0;
        for o in &events {
            if let Output::Granted { session, .. } = o {
                if deadlines.iter().any(|(id, d)| id == session && *d <= now) {
                    st.granted_to_dead = true;
                }
            }
        }
        if let Err(e) = check_service(&svc) {
            st.broken = Some(e);
        }
        st.svc = svc.snapshot_vec();
        st.revision = svc.revision();
        for o in events {
            let owner = st
                .clients
                .iter()
                .position(|c| c.session == Some(o.session().0));
            let lock = |l: &LockName| NAMES.iter().position(|n| *n == l.as_str()).expect("ours");
            let msg = match &o {
                Output::Granted { lock: l, token, .. } => Msg::Granted(lock(l), token.0),
                Output::Released { lock: l, .. } => Msg::Lost(lock(l)),
                Output::SessionExpired { .. } => Msg::SessionGone,
                _ => continue,
            };
            if let Some(c) = owner {
                st.clients[c].inbox.push(msg);
            }
        }
        Some(reply)
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let svc = LockService::new(
            VecStorage::new(self.clients, self.locks, self.clients * self.locks),
            Config {
                lock_delay: self.lock_delay,
                ..Config::default()
            },
        )
        .expect("config");
        vec![State {
            svc: svc.snapshot_vec(),
            revision: 0,
            now: 0,
            clients: vec![
                Client {
                    session: None,
                    opened: false,
                    believes: vec![None; self.locks],
                    waiting: vec![false; self.locks],
                    inbox: Vec::new(),
                };
                self.clients
            ],
            highest: vec![0; self.locks],
            stale_accepted: false,
            stale_refused: false,
            granted_to_dead: false,
            broken: None,
        }]
    }

    fn actions(&self, st: &State, actions: &mut Vec<Action>) {
        if st.stale_accepted || st.granted_to_dead || st.broken.is_some() {
            return; // a violation ends the path
        }
        if st.now < self.max_time {
            actions.push(if self.lazy_host {
                Action::Elapse
            } else {
                Action::Tick
            });
        }
        for (i, c) in st.clients.iter().enumerate() {
            if !c.inbox.is_empty() {
                actions.push(Action::Deliver(i));
            }
            match c.session {
                None if !c.opened => actions.push(Action::Open(i)),
                None => {}
                Some(_) => {
                    actions.push(Action::KeepAlive(i));
                    for l in 0..self.locks {
                        if c.believes[l].is_some() {
                            actions.push(Action::Release(i, l));
                        } else if !c.waiting[l] && st.revision < self.max_tokens {
                            actions.push(Action::Acquire(i, l));
                        }
                    }
                }
            }
            // A client writes whenever it believes it holds the lock, session or not
            // (it has not read the news yet).
            for l in 0..self.locks {
                if c.believes[l].is_some() {
                    actions.push(Action::Write(i, l));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut st = last.clone();
        // The host's clock (apply stamps every input with it).
        let now = Tick(st.now);
        match action {
            Action::Tick => {
                st.now += 1;
                let now = Tick(st.now);
                self.apply(&mut st, Input::Tick { now })?;
            }
            Action::Elapse => st.now += 1,
            Action::Open(i) => {
                let input = Input::OpenSession { now, ttl: self.ttl };
                let id = self.apply(&mut st, input)?.opened()?;
                st.clients[i].session = Some(id.0);
                st.clients[i].opened = true;
            }
            Action::KeepAlive(i) => {
                let session = SessionId(st.clients[i].session?);
                let before = st.svc.clone();
                self.apply(
                    &mut st,
                    Input::KeepAlive {
                        now,
                        session,
                        request: None,
                    },
                )?;
                if st.svc == before {
                    return None;
                }
            }
            Action::Acquire(i, l) => {
                let session = SessionId(st.clients[i].session?);
                let reply = self.apply(
                    &mut st,
                    Input::Acquire {
                        now,
                        session,
                        lock: LockName::new(NAMES[l]).expect("name"),
                        mode: Mode::Exclusive,
                        wait: Wait::Forever,
                        request: None,
                    },
                )?;
                // The caller's answer arrives at once.
                match reply {
                    Reply::Granted { token, .. } => st.clients[i].believes[l] = Some(token.0),
                    _ => st.clients[i].waiting[l] = true,
                }
            }
            Action::Release(i, l) => {
                let session = SessionId(st.clients[i].session?);
                self.apply(
                    &mut st,
                    Input::Release {
                        now,
                        session,
                        lock: LockName::new(NAMES[l]).expect("name"),
                        request: None,
                    },
                )?;
                // The client knows it let go: it stops using the token at once.
                st.clients[i].believes[l] = None;
            }
            Action::Write(i, l) => {
                let token = st.clients[i].believes[l]?;
                let admitted = !self.fence || token >= st.highest[l];
                if admitted {
                    if token < st.highest[l] {
                        st.stale_accepted = true;
                    }
                    st.highest[l] = st.highest[l].max(token);
                } else {
                    st.stale_refused = true;
                }
                if st == *last {
                    return None;
                }
            }
            Action::Deliver(i) => {
                let c = &mut st.clients[i];
                match c.inbox.remove(0) {
                    Msg::Granted(l, t) => {
                        c.believes[l] = Some(t);
                        c.waiting[l] = false;
                    }
                    Msg::Lost(l) => c.believes[l] = None,
                    Msg::SessionGone => {
                        c.session = None;
                        c.believes.iter_mut().for_each(|b| *b = None);
                        c.waiting.iter_mut().for_each(|w| *w = false);
                    }
                }
            }
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("service invariants hold", |_, s: &State| s.broken.is_none()),
            Property::always("no stale write accepted", |_, s: &State| !s.stale_accepted),
            Property::always("no grant to a dead session", |_, s: &State| {
                !s.granted_to_dead
            }),
            Property::sometimes("a stale write is refused", |_, s: &State| s.stale_refused),
        ]
    }
}

fn check(m: LockModel) -> (usize, usize, Option<Vec<Action>>) {
    // One thread: breadth-first in a fixed order, so the counterexample is a shortest one
    // and the same on every run.
    // With the fence off, stop at the first failure: its path is the shortest.
    let mut builder = m.clone().checker().threads(1);
    if !m.fence {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let states = checker.unique_state_count();
    let depth = checker.max_depth();
    println!(
        "MODELCHECK clients={} locks={} lock_delay={} max_time={} max_tokens={} host={} fence={} states={} depth={}",
        m.clients,
        m.locks,
        m.lock_delay,
        m.max_time,
        m.max_tokens,
        if m.lazy_host { "lazy" } else { "ticking" },
        if m.fence { "on" } else { "off" },
        states,
        depth
    );
    checker.assert_no_discovery("service invariants hold");
    if !m.core_fault {
        checker.assert_no_discovery("no grant to a dead session");
    }
    let cex = checker.discovery("no stale write accepted").map(|p| {
        println!("counterexample (fence off):\n{p}");
        p.into_actions()
    });
    if m.fence {
        assert!(cex.is_none(), "a stale write got past the fence");
        // The scenario the fence exists for is reachable: a stale write was attempted.
        checker.assert_any_discovery("a stale write is refused");
    }
    (states, depth, cex)
}

fn full() -> bool {
    !cfg!(debug_assertions) || std::env::var_os("MODEL_CHECK_FULL").is_some()
}

fn base(fence: bool) -> LockModel {
    LockModel {
        clients: 2,
        locks: 1,
        fence,
        max_time: if full() { 5 } else { 4 },
        max_tokens: 3,
        ttl: 2,
        lock_delay: 0,
        core_fault: false,
        lazy_host: false,
    }
}

#[test]
fn two_clients_one_lock_fence_on_no_stale_write() {
    let (states, _, _) = check(base(true));
    assert!(states > 1000, "suspiciously small state space: {states}");
}

/// The deliberately broken build: the resource accepts lower tokens. The checker must find
/// the GC-pause timeline by itself: a holder pauses, its session expires, the next holder
/// is granted a higher token and writes, the first resumes and writes with its old token.
#[test]
fn fence_off_checker_finds_the_gc_pause() {
    let (states, _, cex) = check(base(false));
    println!("fence off: counterexample found after {states} states");
    let actions = cex.expect("with the fence off the checker must find a stale write");
    println!(
        "FAULT gate-accepts-lower-tokens caught by the model checker: a {}-step GC-pause path",
        actions.len()
    );
    // Replay the path up to the first stale write: it is a write by a client whose inbox
    // still holds the news that it lost the lock (it was "paused": it had not read it),
    // after time passed and its session expired.
    let m = base(false);
    let mut st = m.init_states().remove(0);
    let mut steps = 0;
    for a in &actions {
        let next = m.next_state(&st, a.clone()).expect("path replays");
        steps += 1;
        if next.stale_accepted {
            let Action::Write(c, _) = a else {
                panic!("the stale write is not a write: {actions:?}")
            };
            assert!(
                st.clients[*c].inbox.contains(&Msg::SessionGone),
                "the stale writer had not lost its session: {st:?}"
            );
            break;
        }
        st = next;
    }
    assert!(actions[..steps].iter().any(|a| matches!(a, Action::Tick)));
    assert_eq!(steps, actions.len(), "the path goes on after the violation");
}

/// A lazy host: its clock moves without ticking the service, and every input carries the
/// clock, so expiries and grants happen in the advance of whatever message comes next.
/// With the fence the resource still admits no stale write and nobody dead is granted;
/// without it the checker still finds the GC pause.
#[test]
fn lazy_host_fence_holds_and_fence_off_finds_the_gc_pause() {
    let lazy = |fence| LockModel {
        lazy_host: true,
        ..base(fence)
    };
    let (states, _, _) = check(lazy(true));
    assert!(states > 1000, "suspiciously small state space: {states}");
    let (_, _, cex) = check(lazy(false));
    let actions = cex.expect("with the fence off the checker must find a stale write");
    assert!(
        actions.iter().any(|a| matches!(a, Action::Elapse)),
        "{actions:?}"
    );
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Tick)),
        "{actions:?}"
    );
}

#[test]
fn three_clients_and_two_locks_with_lock_delay() {
    let configs = if full() {
        vec![
            LockModel {
                clients: 3,
                max_time: 4,
                max_tokens: 3,
                ..base(true)
            },
            LockModel {
                locks: 2,
                max_time: 4,
                max_tokens: 3,
                lock_delay: 1,
                ..base(true)
            },
        ]
    } else {
        // Debug builds (the quick workspace run) check a smaller space; the release run of
        // scripts/test-verify.sh checks the full ones above.
        vec![LockModel {
            locks: 2,
            max_time: 3,
            max_tokens: 2,
            lock_delay: 1,
            ..base(true)
        }]
    };
    for m in configs {
        check(m);
    }
}

/// A broken core (test-only feature `fault-injection`: a tick grants before it expires):
/// the checker must find a grant to a session whose deadline has passed — a waiter whose
/// session dies at the very tick its lock's delay ends.
#[cfg(feature = "fault-injection")]
#[test]
fn fault_core_expiry_after_grants_is_found() {
    let m = LockModel {
        lock_delay: 1,
        core_fault: true,
        ..base(true)
    };
    let checker = m
        .clone()
        .checker()
        .threads(1)
        .finish_when(HasDiscoveries::AnyOf(["no grant to a dead session"].into()))
        .spawn_bfs()
        .join();
    let path = checker
        .discovery("no grant to a dead session")
        .expect("the checker must find a grant to a dead session");
    println!("counterexample (core fault):\n{path}");
    let actions = path.into_actions();
    println!(
        "FAULT core-expiry-after-grants caught by the model checker: a {}-step path, {} states",
        actions.len(),
        checker.unique_state_count()
    );
    assert!(matches!(actions.last(), Some(Action::Tick)), "{actions:?}");
    // The same path on the real core grants nobody dead.
    let good = LockModel {
        core_fault: false,
        ..m
    };
    let mut st = good.init_states().remove(0);
    for a in actions {
        st = good.next_state(&st, a).expect("path replays");
    }
    assert!(!st.granted_to_dead);
}
