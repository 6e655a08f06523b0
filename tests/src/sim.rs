//! The deterministic simulation: one seeded harness owns time and drives one service,
//! several clients and a resource behind a [`FenceGate`].
//!
//! Clients open sessions, send keep-alives as their [`SessionKeeper`] says (some are
//! lost), acquire (exclusive and shared; try-lock, timed and forever), release, cancel,
//! close, retry numbered requests, and write to the resource carrying their token. They
//! suffer stop-the-world pauses — sometimes between checking their lease and writing,
//! the GC pause fencing exists for — and see the events for them only when they run
//! again (a reply reaches the caller at once). A chaos source adds hostile inputs from
//! the shared generator ([`crate::gen::ClientLike::hostile`]).
//!
//! The host stamps every message with its clock. Which loop it runs comes from the seed
//! ([`HostLoop`]): tick to the clock before each message, tick only when
//! `poll_timeout` comes due (sometimes late), or never tick until the end — all must give
//! a correct service (docs/SPEC.md §2, §8).
//!
//! After every input: the reply and events equal the [`Model`]'s, every query agrees with
//! it, [`check_service`] passes, the [`Shadow`] checks the history invariants, a refused
//! input left the service exactly as a tick to its `now` would (I5), and periodically
//! snapshot → restore → snapshot is the identity. At the resource: no accepted write
//! carries a token lower than one accepted before (no stale write), every accepted token
//! was granted for that lock, and whenever a client's keeper said its lease was safe the
//! service agreed that the session lives past the host's clock and holds the lock with
//! that token. At the end the clients stop and time runs out: every waiter must have been
//! granted, timed out, cancelled or dropped with its session.
//!
//! Semaphores, labels and watches: in a third of the random runs the first lock is a semaphore
//! (limit 2 or 3; clients ask for 1 to all of it, and now and then with another limit or
//! a plain mode: `LimitMismatch`); clients open with a label and watch and unwatch the
//! locks. A client's view of a watched lock is built only from the `HolderChanged` events
//! it has seen, in order (a paused client sees them late): a grant's token must be above
//! every one in the view, an end must name a holder in it, none may come once the client
//! unwatched or lost its session, and whenever the client has seen all its events its
//! view must equal the service's holders. Never more permits than the limit is checked
//! after every input ([`check_service`], and the [`Shadow`] at every grant).
//!
//! Everything derives from the seed: a failure prints it, and `SEED=<n>` replays it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;

use fencelock::{
    Capacity, Change, Config, Error, FenceGate, GateRow, Input, Label, LockName, LockService, Mode,
    Output, Reply, SessionId, SessionKeeper, Tick, Token, VecStorage, Wait,
};

use crate::gen::{ClientLike, Profile};
use crate::invariants::{check_round_trip, check_service, Shadow};
use crate::model::Model;
use crate::rng::Rng;

/// A deliberately broken component, to prove the checks catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No fault.
    None,
    /// The resource's gate accepts any non-zero token, lower ones too (fencing off).
    GateAcceptsLower,
    /// A broken host: it stamps each message with the time of its last tick instead of
    /// its clock, and ticks late, so the service grants a session whose deadline has
    /// already passed by the host's clock (the lease-expiry race etcd fixed in its lessor,
    /// made by the host).
    HostStampsStaleTime,
    /// A broken host: it routes no `HolderChanged` with change `Released` to the watcher
    /// (the service emitted it; the history checks still see it), so a watcher keeps
    /// believing in a holder that let go.
    RouterDropsReleasedWatcherEvents,
    /// A broken core (feature `fault-injection`): a tick grants freed locks before it
    /// expires the sessions that are due.
    #[cfg(feature = "fault-injection")]
    CoreExpiryAfterGrants,
}

/// How the host drives time (docs/SPEC.md §8). Every loop stamps each message with the
/// host's clock; they differ in when they tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostLoop {
    /// Ticks to its clock whenever the clock moves, before any message.
    TickFirst,
    /// Ticks only when `poll_timeout` has come due, and then late 30 % of the time.
    OnTimer,
    /// Never ticks during the run: only the messages' own advances move time.
    NeverTicks,
}

impl HostLoop {
    /// Every loop, each with its name ([`HostLoop::name`]).
    pub const ALL: [HostLoop; 3] = [HostLoop::TickFirst, HostLoop::OnTimer, HostLoop::NeverTicks];

    /// Its name in a replay line (`SIM_HOST=`): `tick_first`, `on_timer`, `never_ticks`.
    pub fn name(self) -> &'static str {
        match self {
            HostLoop::TickFirst => "tick_first",
            HostLoop::OnTimer => "on_timer",
            HostLoop::NeverTicks => "never_ticks",
        }
    }
}

impl Fault {
    /// Every fault this build has; its `Debug` name is what a replay line's `SIM_FAULT=`
    /// says.
    pub fn all() -> Vec<Fault> {
        vec![
            Fault::None,
            Fault::GateAcceptsLower,
            Fault::HostStampsStaleTime,
            Fault::RouterDropsReleasedWatcherEvents,
            #[cfg(feature = "fault-injection")]
            Fault::CoreExpiryAfterGrants,
        ]
    }
}

/// One simulation run's settings.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    /// The seed every choice derives from.
    pub seed: u64,
    /// Steps (events) to run before draining.
    pub steps: u32,
    /// An injected fault.
    pub fault: Fault,
    /// Compare with the reference model after every input.
    pub check_model: bool,
    /// Snapshot round trip every this many steps (0 = never).
    pub round_trip_every: u32,
    /// The host loop (`None`: chosen by the seed).
    pub host: Option<HostLoop>,
}

impl SimConfig {
    /// Defaults for `seed`: 1 000 steps, no fault, every check on.
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            steps: 1000,
            fault: Fault::None,
            check_model: true,
            round_trip_every: 25,
            host: None,
        }
    }
}

/// What a run did (all counts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    /// Steps run (including the drain).
    pub steps: u64,
    /// Inputs applied to the service.
    pub inputs: u64,
    /// Inputs refused (atomically).
    pub refused: u64,
    /// Outputs routed.
    pub outputs: u64,
    /// Fresh grants.
    pub grants: u64,
    /// Sessions expired.
    pub expiries: u64,
    /// Waits queued (every one ended by the end of the run).
    pub waits: u64,
    /// Client pauses.
    pub pauses: u64,
    /// Keep-alives lost on the way.
    pub lost_keep_alives: u64,
    /// Inputs the host applied at a later time than the service's, with no tick first.
    pub untick_inputs: u64,
    /// Writes the resource accepted.
    pub writes_accepted: u64,
    /// Stale writes the gate refused.
    pub stale_refused: u64,
    /// Snapshot round trips checked.
    pub round_trips: u64,
    /// Watcher events clients saw.
    pub watch_events: u64,
    /// Grants of permits (replies and events).
    pub permit_grants: u64,
    /// A hash (FNV-1a) of everything the run applied and got back, input by input (each
    /// input, its reply or error, its events), then of the service's final snapshot: two
    /// runs of one seed must agree on it, not only on the counts.
    pub trace_hash: u64,
}

/// FNV-1a of `bytes`, continuing from `h` (0: a fresh hash).
fn fnv(h: u64, bytes: &[u8]) -> u64 {
    let mut h = if h == 0 { 0xcbf2_9ce4_8422_2325 } else { h };
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl SimReport {
    /// Adds another run's counts.
    pub fn add(&mut self, o: &SimReport) {
        self.steps += o.steps;
        self.inputs += o.inputs;
        self.refused += o.refused;
        self.outputs += o.outputs;
        self.grants += o.grants;
        self.expiries += o.expiries;
        self.waits += o.waits;
        self.pauses += o.pauses;
        self.lost_keep_alives += o.lost_keep_alives;
        self.untick_inputs += o.untick_inputs;
        self.writes_accepted += o.writes_accepted;
        self.stale_refused += o.stale_refused;
        self.round_trips += o.round_trips;
        self.watch_events += o.watch_events;
        self.permit_grants += o.permit_grants;
        self.trace_hash = self.trace_hash.rotate_left(7) ^ o.trace_hash;
    }
}

/// A failed run: the seed replays it.
#[derive(Clone, Debug)]
pub struct SimFailure {
    /// The seed.
    pub seed: u64,
    /// The step at which a check failed.
    pub step: u64,
    /// The run's length in steps (`SimConfig::steps`).
    pub steps: u32,
    /// The host loop, when the run was given one (otherwise the seed chose it).
    pub host: Option<HostLoop>,
    /// The fault injected, if any.
    pub fault: Fault,
    /// Whether the run compared the service with the reference model.
    pub check_model: bool,
    /// What failed.
    pub message: String,
    /// The last events before the failure.
    pub trace: Vec<String>,
}

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "simulation failed: seed {} step {}: {}",
            self.seed, self.step, self.message
        )?;
        // Everything that chose the run's path, and the profile it failed in (debug
        // assertions and overflow checks on, as in `make test`).
        write!(f, "replay: SEED={}", self.seed)?;
        if self.steps != SimConfig::new(0).steps {
            write!(f, " SIM_STEPS={}", self.steps)?;
        }
        if let Some(host) = self.host {
            write!(f, " SIM_HOST={}", host.name())?;
        }
        if self.fault != Fault::None {
            write!(f, " SIM_FAULT={:?}", self.fault)?;
        }
        if !self.check_model {
            write!(f, " SIM_MODEL=off")?;
        }
        writeln!(
            f,
            " cargo test --profile verify -p fencelock-tests --features fault-injection --test sim -- replay_seed --nocapture"
        )?;
        writeln!(f, "last events:")?;
        for t in &self.trace {
            writeln!(f, "  {t}")?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Client {
    session: Option<SessionId>,
    keeper: Option<SessionKeeper>,
    ttl: u64,
    /// Locks this client believes it holds (from the replies and events it has seen).
    held: BTreeMap<String, (Mode, Token)>,
    waiting: BTreeSet<String>,
    paused_until: u64,
    inbox: VecDeque<Output>,
    /// A write it decided to make before a pause hit.
    pending_write: Option<(String, Token)>,
    next_request: u64,
    last_input: Option<Input>,
    /// Per watched lock: the holders (session, token) its watcher events said, in grant
    /// order.
    watching: BTreeMap<String, Vec<(SessionId, Token)>>,
    /// Watcher events it has seen.
    watch_events: u64,
}

impl Client {
    fn new() -> Client {
        Client {
            session: None,
            keeper: None,
            ttl: 0,
            held: BTreeMap::new(),
            waiting: BTreeSet::new(),
            paused_until: 0,
            inbox: VecDeque::new(),
            pending_write: None,
            next_request: 1,
            last_input: None,
            watching: BTreeMap::new(),
            watch_events: 0,
        }
    }

    /// The session is gone (expired or closed): everything it held is lost.
    fn lost(&mut self) {
        if let Some(k) = self.keeper.as_mut() {
            k.session_lost();
        }
        self.session = None;
        self.held.clear();
        self.waiting.clear();
        self.watching.clear();
    }

    /// An acknowledgement: the service applied the open or keep-alive at `expires_at −
    /// ttl`, which in this simulation is when it was sent (a retry's reply names the
    /// original's deadline, so it acknowledges the original send).
    fn acked(&mut self, expires_at: Tick) {
        if let Some(k) = self.keeper.as_mut() {
            // An ack for a send the keeper does not remember (or a stale stamp) is
            // refused by the keeper and changes nothing.
            let _ = k.keep_alive_acked(expires_at.0.saturating_sub(self.ttl));
        }
    }

    /// Applies an event the client has now seen.
    ///
    /// Errors: a watcher event that does not follow from the ones it saw before (out of
    /// order, about a holder it was not told of, or after its watch ended).
    fn see(&mut self, o: &Output) -> Result<(), String> {
        match o {
            Output::HolderChanged {
                lock,
                holder,
                token,
                change,
                ..
            } => {
                self.watch_events += 1;
                let view = match (change, self.watching.get_mut(lock.as_str())) {
                    (_, Some(view)) => view,
                    // A watch begins with its Holding events (the reply may come later
                    // to a paused client... it never does: replies are seen at once).
                    (Change::Holding, None) => {
                        self.watching.entry(lock.as_str().to_string()).or_default()
                    }
                    (_, None) => return Err(format!("watcher saw {o:?} after its watch ended")),
                };
                match change {
                    Change::Holding | Change::Granted => {
                        if view.iter().any(|(_, t)| *t >= *token) {
                            return Err(format!("watcher saw {o:?} out of order: {view:?}"));
                        }
                        view.push((*holder, *token));
                    }
                    _ => {
                        let i = view
                            .iter()
                            .position(|e| *e == (*holder, *token))
                            .ok_or(format!("watcher saw {o:?} of a holder not in {view:?}"))?;
                        view.remove(i);
                    }
                }
            }
            Output::SessionExpired { .. } => self.lost(),
            Output::Granted {
                lock, mode, token, ..
            } => {
                self.waiting.remove(lock.as_str());
                self.held.insert(lock.as_str().to_string(), (*mode, *token));
            }
            Output::Released { lock, .. } => {
                self.held.remove(lock.as_str());
            }
            Output::WaitTimedOut { lock, .. } => {
                self.waiting.remove(lock.as_str());
            }
            _ => {}
        }
        Ok(())
    }

    /// Applies the reply to its own input.
    fn see_reply(&mut self, input: &Input, r: &Reply) {
        let lock = match input {
            Input::Acquire { lock, .. }
            | Input::Release { lock, .. }
            | Input::ReleaseHold { lock, .. }
            | Input::Cancel { lock, .. }
            | Input::Watch { lock, .. }
            | Input::Unwatch { lock, .. } => lock.as_str().to_string(),
            _ => String::new(),
        };
        match r {
            Reply::Opened {
                session,
                expires_at,
            } => {
                self.session = Some(*session);
                self.acked(*expires_at);
            }
            Reply::KeptAlive { expires_at } => self.acked(*expires_at),
            Reply::Closed => self.lost(),
            Reply::Granted { mode, token } => {
                self.waiting.remove(&lock);
                self.held.insert(lock, (*mode, *token));
            }
            Reply::Queued { .. } => {
                self.waiting.insert(lock);
            }
            Reply::Released { .. } | Reply::HoldEnded { .. } => {
                self.held.remove(&lock);
            }
            Reply::Cancelled | Reply::WaitEnded => {
                self.waiting.remove(&lock);
            }
            Reply::Watching { .. } => {
                self.watching.entry(lock).or_default();
            }
            Reply::Unwatched => {
                self.watching.remove(&lock);
            }
            _ => {}
        }
    }
}

/// The resource behind the gate: every accepted write, per resource.
struct Resource {
    gate: FenceGate<Vec<GateRow>>,
    accepted: BTreeMap<String, Vec<u64>>,
}

struct World {
    cfg: SimConfig,
    rng: Rng,
    now: u64,
    svc: LockService<VecStorage>,
    model: Model,
    shadow: Shadow,
    clients: Vec<Client>,
    owner: BTreeMap<SessionId, usize>,
    host: HostLoop,
    chaos: ClientLike,
    locks: Vec<&'static str>,
    /// The first lock is a semaphore of this limit.
    semaphore: Option<u32>,
    resource: Resource,
    /// Every (lock, token) the service granted.
    granted: BTreeSet<(String, u64)>,
    report: SimReport,
    trace: VecDeque<String>,
    step: u64,
}

const LOCK_NAMES: [&str; 3] = ["a", "b", "c"];

type Check = Result<(), String>;

impl World {
    fn new(cfg: SimConfig) -> World {
        let mut rng = Rng::new(cfg.seed);
        let host = cfg.host.unwrap_or(match rng.below(3) {
            0 => HostLoop::TickFirst,
            1 => HostLoop::OnTimer,
            _ => HostLoop::NeverTicks,
        });
        let n_clients = rng.range(2, 5) as usize;
        let n_locks = rng.range(1, 3) as usize;
        let lock_delay = *rng.pick(&[0, 0, 2, 5]);
        let cap = Capacity {
            sessions: rng.range(n_clients as u64 - 1, n_clients as u64 + 1) as u32,
            locks: rng.range(1, n_locks as u64) as u32,
            claims: rng.range(2, 8) as u32,
        };
        let semaphore = match rng.below(6) {
            0 => Some(2),
            1 => Some(3),
            _ => None,
        };
        let max_watchers = *rng.pick(&[1, 2, 4]);
        let svc = LockService::new(
            VecStorage::new(
                cap.sessions as usize,
                cap.locks as usize,
                cap.claims as usize,
            ),
            Config {
                lock_delay,
                max_name_len: 8,
                max_watchers,
            },
        )
        .expect("valid config");
        #[cfg(feature = "fault-injection")]
        let svc = {
            let mut svc = svc;
            svc.inject_fault_expiry_after_grants(cfg.fault == Fault::CoreExpiryAfterGrants);
            svc
        };
        World {
            cfg,
            rng,
            now: 0,
            svc,
            model: Model::from_config(
                cap,
                Config {
                    lock_delay,
                    max_name_len: 8,
                    max_watchers,
                },
            ),
            shadow: Shadow::new(lock_delay),
            clients: (0..n_clients).map(|_| Client::new()).collect(),
            owner: BTreeMap::new(),
            host,
            chaos: ClientLike::new(Profile {
                locks: &LOCK_NAMES,
                too_long: Some("too-long-name"),
                max_ttl: 15,
                hostile: 100,
            }),
            locks: LOCK_NAMES[..n_locks].to_vec(),
            semaphore,
            resource: Resource {
                gate: FenceGate::new(vec![GateRow::EMPTY; 4]).expect("4 rows"),
                accepted: BTreeMap::new(),
            },
            granted: BTreeSet::new(),
            report: SimReport::default(),
            trace: VecDeque::new(),
            step: 0,
        }
    }

    fn log(&mut self, line: String) {
        if self.trace.len() == 40 {
            self.trace.pop_front();
        }
        self.trace
            .push_back(format!("[{} t{}] {line}", self.step, self.now));
    }

    /// Applies one input to the service (and the model), checks everything, and routes
    /// the events. Returns the reply (or the error) for the caller.
    fn deliver(
        &mut self,
        input: Input,
        from: Option<usize>,
    ) -> Result<Result<Reply, Error>, String> {
        let before = self.svc.snapshot_vec();
        let behind = input.now() > self.svc.now() && !matches!(input, Input::Tick { .. });
        let mut events: Vec<Output> = Vec::new();
        self.shadow.set_real_now(self.now);
        self.shadow.before(&input);
        let r = self.svc.handle(input.clone(), &mut events);
        self.report.inputs += 1;
        if behind && r.is_ok() {
            self.report.untick_inputs += 1;
        }
        let mut line = format!("{input:?} -> ");
        match &r {
            Ok(reply) => {
                let _ = write!(line, "{reply:?} {events:?}");
            }
            Err(e) => {
                let _ = write!(line, "err {} {events:?}", e.code());
            }
        }
        self.report.trace_hash = fnv(self.report.trace_hash, line.as_bytes());
        self.log(line);
        if self.cfg.check_model {
            let m = self.model.apply(&input);
            if m.result != r || m.events != events {
                return Err(format!(
                    "service and model differ on {input:?}: service {r:?} {events:?}, model {:?} {:?}",
                    m.result, m.events
                ));
            }
        }
        if let Err(e) = &r {
            self.report.refused += 1;
            // I5 Atomic errors: nothing changed beyond the advance to the input's now.
            let (want, advance) = match e {
                Error::TimeWentBackwards { .. } => (before, Vec::new()),
                _ => {
                    let cap = self.svc.capacity();
                    let storage = VecStorage::new(
                        cap.sessions as usize,
                        cap.locks as usize,
                        cap.claims as usize,
                    );
                    let mut copy = LockService::restore(storage, &before)
                        .map_err(|(_, e)| format!("own snapshot refused: {e}"))?;
                    #[cfg(feature = "fault-injection")]
                    copy.inject_fault_expiry_after_grants(
                        self.cfg.fault == Fault::CoreExpiryAfterGrants,
                    );
                    let mut advance = Vec::new();
                    let _ = copy.tick(input.now(), &mut advance);
                    (copy.snapshot_vec(), advance)
                }
            };
            if events != advance {
                return Err(format!(
                    "I5: refused input (err {e}) emitted {events:?}, its advance {advance:?}"
                ));
            }
            if self.svc.snapshot_vec() != want {
                return Err(format!(
                    "I5: refused input (err {e}) changed more than the advance to its now"
                ));
            }
        }
        self.shadow
            .after(&r, &events)
            .map_err(|e| format!("history invariant: {e}"))?;
        check_service(&self.svc).map_err(|e| format!("state invariant: {e}"))?;
        self.shadow
            .agrees_with(&self.svc)
            .map_err(|e| format!("replies and events vs queries: {e}"))?;
        if self.cfg.check_model {
            self.model
                .agrees_with(&self.svc)
                .map_err(|e| format!("model: {e}"))?;
        }
        for o in &events {
            self.route(o)?;
        }
        if let (Input::Acquire { lock, .. }, Ok(Reply::Granted { token, .. })) = (&input, &r) {
            self.granted.insert((lock.as_str().to_string(), token.0));
        }
        if let Ok(reply) = &r {
            match from {
                Some(c) => self.clients[c].see_reply(&input, reply),
                None => {
                    if let Reply::Opened { session, .. } = reply {
                        // A chaos open: a phantom client that never acts.
                        let mut ph = Client::new();
                        ph.paused_until = u64::MAX;
                        ph.session = Some(*session);
                        self.clients.push(ph);
                        self.owner.insert(*session, self.clients.len() - 1);
                    }
                }
            }
            if let (Some(c), Reply::Opened { session, .. }) = (from, reply) {
                self.owner.insert(*session, c);
            }
        }
        for o in &events {
            if matches!(
                o,
                Output::Granted {
                    mode: Mode::Permits { .. },
                    ..
                }
            ) {
                self.report.permit_grants += 1;
            }
        }
        if let Ok(Reply::Granted {
            mode: Mode::Permits { .. },
            ..
        }) = &r
        {
            self.report.permit_grants += 1;
        }
        self.check_watchers()?;
        Ok(r)
    }

    /// A client that has seen every event for it (not paused, nothing unread) sees each
    /// lock it watches held exactly as the service says.
    fn check_watchers(&self) -> Check {
        for (c, cl) in self.clients.iter().enumerate() {
            if cl.paused_until > self.now || !cl.inbox.is_empty() {
                continue;
            }
            for (lock, view) in &cl.watching {
                let holders: Vec<(SessionId, Token)> = self
                    .svc
                    .holders(lock)
                    .map(|h| (h.session, h.token))
                    .collect();
                if *view != holders {
                    return Err(format!(
                        "client {c} watches {lock:?} and was told {view:?}, but the holders are {holders:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    fn route(&mut self, o: &Output) -> Check {
        if self.cfg.fault == Fault::RouterDropsReleasedWatcherEvents
            && matches!(
                o,
                Output::HolderChanged {
                    change: Change::Released,
                    ..
                }
            )
        {
            self.log(format!("router: {o:?} lost"));
            return Ok(());
        }
        self.report.outputs += 1;
        match o {
            Output::Granted { lock, token, .. } => {
                self.granted.insert((lock.as_str().to_string(), token.0));
            }
            Output::SessionExpired { .. } => self.report.expiries += 1,
            _ => {}
        }
        let Some(&c) = self.owner.get(&o.session()) else {
            return Err(format!("event for a session no client opened: {o:?}"));
        };
        let now = self.now;
        let cl = &mut self.clients[c];
        if cl.paused_until > now || !cl.inbox.is_empty() {
            // A paused client sees its messages later, in order.
            cl.inbox.push_back(o.clone());
        } else {
            cl.see(o).map_err(|e| format!("client {c}: {e}"))?;
        }
        Ok(())
    }

    /// The resource: the gate decides; then check that no stale write got in.
    fn write(&mut self, c: usize, lock: &str, token: Token, checked: bool) -> Check {
        let gate_ok = match self.cfg.fault {
            Fault::GateAcceptsLower => {
                if token.0 == 0 {
                    Err(Error::ZeroToken)
                } else {
                    // The broken gate: no comparison at all.
                    let _ = self.resource.gate.admit(lock, Token(u64::MAX));
                    Ok(())
                }
            }
            _ => self.resource.gate.admit(lock, token),
        };
        match gate_ok {
            Ok(()) => {
                self.log(format!("client {c} writes {lock} with {token}: accepted"));
                let acc = self.resource.accepted.entry(lock.to_string()).or_default();
                if let Some(&last) = acc.last() {
                    if token.0 < last {
                        return Err(format!(
                            "stale write accepted at resource {lock:?}: {token} after token {last}"
                        ));
                    }
                }
                acc.push(token.0);
                if !self.granted.contains(&(lock.to_string(), token.0)) {
                    return Err(format!(
                        "write to {lock:?} with {token}, never granted for it"
                    ));
                }
                self.report.writes_accepted += 1;
                if checked {
                    // The keeper said the lease was safe: the service must agree that
                    // this client's session lives past the host's clock (however late the
                    // host ticks) and still holds the lock with this token.
                    let s = self.clients[c].session.ok_or("safe lease but no session")?;
                    let deadline = self.svc.session(s).map(|i| i.expires_at.0);
                    if deadline.is_none_or(|d| d <= self.now) {
                        return Err(format!(
                            "I-time: SessionKeeper said safe at {} but {s}'s deadline is {deadline:?}",
                            self.now
                        ));
                    }
                    if !self
                        .svc
                        .holders(lock)
                        .any(|h| h.session == s && h.token == token)
                    {
                        return Err(format!(
                            "SessionKeeper said safe but {s} does not hold {lock:?} with {token}"
                        ));
                    }
                }
            }
            Err(Error::Stale { .. }) => {
                self.log(format!(
                    "client {c} writes {lock} with {token}: stale, refused"
                ));
                self.report.stale_refused += 1;
            }
            Err(e) => return Err(format!("gate refused with {e}")),
        }
        Ok(())
    }

    /// The host's clock moves to `to`; whether the service is ticked depends on the host.
    fn advance(&mut self, to: u64) -> Check {
        self.now = to;
        let due = self.svc.poll_timeout().is_some_and(|t| t.0 <= to);
        let tick = match (self.cfg.fault, self.host) {
            (Fault::HostStampsStaleTime, _) => !self.rng.chance(70),
            (_, HostLoop::TickFirst) => true,
            (_, HostLoop::OnTimer) => due && !self.rng.chance(30),
            (_, HostLoop::NeverTicks) => false,
        };
        if !tick {
            self.log(format!("host: time is {to}, the service is not ticked"));
            return Ok(());
        }
        self.tick_service(to)
    }

    fn tick_service(&mut self, to: u64) -> Check {
        self.deliver(Input::Tick { now: Tick(to) }, None)?
            .map_err(|e| format!("tick refused: {e}"))?;
        Ok(())
    }

    /// The time the host stamps a message with: its clock (the broken host: the time of
    /// its last tick).
    fn stamp(&self) -> Tick {
        match self.cfg.fault {
            Fault::HostStampsStaleTime => self.svc.now(),
            _ => Tick(self.now),
        }
    }

    fn resume(&mut self, c: usize) -> Check {
        let now = self.now;
        if self.clients[c].paused_until > now {
            return Ok(());
        }
        // The paused thread continues where it stopped: the write it had decided on.
        if let Some((lock, token)) = self.clients[c].pending_write.take() {
            self.write(c, &lock, token, false)?;
        }
        let cl = &mut self.clients[c];
        while let Some(o) = cl.inbox.pop_front() {
            cl.see(&o).map_err(|e| format!("client {c}: {e}"))?;
        }
        Ok(())
    }

    fn client_step(&mut self, c: usize) -> Check {
        self.resume(c)?;
        if self.clients[c].paused_until > self.now {
            return Ok(());
        }
        let now = self.now;
        let Some(session) = self.clients[c].session else {
            let ttl = self.rng.range(4, 15);
            let margin = 1;
            let interval = ((ttl - margin) / 2).max(1);
            let cl = &mut self.clients[c];
            cl.ttl = ttl;
            let mut k = SessionKeeper::new(ttl, interval, margin).map_err(|e| e.to_string())?;
            k.keep_alive_sent(now).map_err(|e| e.to_string())?;
            cl.keeper = Some(k);
            cl.next_request = 1;
            cl.last_input = None;
            let now = self.stamp();
            let input = if self.rng.chance(50) {
                Input::OpenLabeled {
                    now,
                    ttl,
                    label: Label::new(&format!("client-{c}")).expect("short"),
                }
            } else {
                Input::OpenSession { now, ttl }
            };
            let _ = self.deliver(input, Some(c))?;
            return Ok(());
        };
        let due = self.clients[c]
            .keeper
            .as_ref()
            .is_some_and(|k| k.next_keep_alive(now) <= now);
        if due && self.rng.chance(85) {
            let cl = &mut self.clients[c];
            if let Some(k) = cl.keeper.as_mut() {
                k.keep_alive_sent(now).map_err(|e| e.to_string())?;
            }
            if self.rng.chance(12) {
                self.report.lost_keep_alives += 1;
                self.log(format!("client {c}: keep-alive lost"));
                return Ok(());
            }
            let request = self.request(c);
            let input = Input::KeepAlive {
                now: self.stamp(),
                session,
                request,
            };
            self.send(c, input)?;
            return Ok(());
        }
        let roll = self.rng.below(100);
        match roll {
            0..=34 => {
                let lock = *self.rng.pick(&self.locks);
                let mode = match self.semaphore {
                    // The first lock is a semaphore: mostly its limit, now and then
                    // another limit or a plain mode (LimitMismatch).
                    Some(limit) if lock == self.locks[0] && !self.rng.chance(5) => {
                        let limit = if self.rng.chance(5) { limit + 1 } else { limit };
                        Mode::Permits {
                            count: self.rng.range(1, u64::from(limit)) as u32,
                            limit,
                        }
                    }
                    _ if self.rng.chance(2) => Mode::Permits { count: 1, limit: 2 },
                    _ if self.rng.chance(65) => Mode::Exclusive,
                    _ => Mode::Shared,
                };
                let wait = match self.rng.below(3) {
                    0 => Wait::None,
                    1 => Wait::Until(Tick(now + self.rng.range(0, 10))),
                    _ => Wait::Forever,
                };
                let request = self.request(c);
                let input = Input::Acquire {
                    now: self.stamp(),
                    session,
                    lock: LockName::new(lock).expect("name"),
                    mode,
                    wait,
                    request,
                };
                self.send(c, input)?;
            }
            35..=49 => {
                let held: Vec<String> = self.clients[c].held.keys().cloned().collect();
                let lock = if held.is_empty() || self.rng.chance(10) {
                    self.rng.pick(&self.locks).to_string()
                } else {
                    self.rng.pick(&held).clone()
                };
                let request = self.request(c);
                let name = LockName::new(&lock).expect("name");
                // A quarter of the releases name the hold by its token (`ReleaseHold`), one
                // in ten of those a token it does not hold the lock with (refused).
                let input = if self.rng.chance(25) {
                    let held = self.clients[c].held.get(&lock).map(|h| h.1 .0);
                    let token = match held {
                        Some(t) if !self.rng.chance(10) => t,
                        Some(t) => t.saturating_sub(1 + self.rng.below(3)),
                        None => 1 + self.rng.below(8),
                    };
                    Input::ReleaseHold {
                        now: self.stamp(),
                        session,
                        lock: name,
                        token: Token(token),
                        request,
                    }
                } else {
                    Input::Release {
                        now: self.stamp(),
                        session,
                        lock: name,
                        request,
                    }
                };
                self.send(c, input)?;
            }
            50..=56 => {
                let waiting: Vec<String> = self.clients[c].waiting.iter().cloned().collect();
                let lock = if waiting.is_empty() || self.rng.chance(10) {
                    self.rng.pick(&self.locks).to_string()
                } else {
                    self.rng.pick(&waiting).clone()
                };
                let request = self.request(c);
                let input = Input::Cancel {
                    now: self.stamp(),
                    session,
                    lock: LockName::new(&lock).expect("name"),
                    request,
                };
                self.send(c, input)?;
            }
            57..=79 => {
                // Write to the resource of an exclusively held lock.
                let cl = &self.clients[c];
                let ex: Vec<(String, Token)> = cl
                    .held
                    .iter()
                    .filter(|(_, (m, _))| *m == Mode::Exclusive)
                    .map(|(l, (_, t))| (l.clone(), *t))
                    .collect();
                if ex.is_empty() {
                    return Ok(());
                }
                let (lock, token) = self.rng.pick(&ex).clone();
                let safe = cl.keeper.as_ref().is_some_and(|k| k.may_act(now));
                if !safe {
                    return Ok(());
                }
                if self.rng.chance(25) {
                    // Stop-the-world between the lease check and the write.
                    let d = self.rng.range(5, 30);
                    self.log(format!(
                        "client {c} checked its lease, then pauses {d} ticks before writing {lock}"
                    ));
                    let cl = &mut self.clients[c];
                    cl.pending_write = Some((lock, token));
                    cl.paused_until = now + d;
                    self.report.pauses += 1;
                } else {
                    self.write(c, &lock, token, true)?;
                }
            }
            80..=87 => {
                let d = self.rng.range(1, 25);
                self.log(format!("client {c} pauses {d} ticks"));
                self.clients[c].paused_until = now + d;
                self.report.pauses += 1;
            }
            88..=92 => {
                // Retry the last numbered input verbatim (a lost reply).
                if let Some(input) = self.clients[c].last_input.clone() {
                    let input = input.at(self.stamp());
                    self.send(c, input)?;
                }
            }
            93..=95 => {
                let request = self.request(c);
                let input = Input::CloseSession {
                    now: self.stamp(),
                    session,
                    request,
                };
                self.send(c, input)?;
            }
            96..=98 => {
                // Watch a lock, or stop watching one it watches.
                let watched: Vec<String> = self.clients[c].watching.keys().cloned().collect();
                let stop = !watched.is_empty() && self.rng.chance(35);
                let lock = if stop {
                    self.rng.pick(&watched).clone()
                } else {
                    self.rng.pick(&self.locks).to_string()
                };
                let request = self.request(c);
                let (now, lock) = (self.stamp(), LockName::new(&lock).expect("name"));
                let input = if stop {
                    Input::Unwatch {
                        now,
                        session,
                        lock,
                        request,
                    }
                } else {
                    Input::Watch {
                        now,
                        session,
                        lock,
                        request,
                    }
                };
                self.send(c, input)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn request(&mut self, c: usize) -> Option<u64> {
        let cl = &mut self.clients[c];
        // A well-behaved client never reuses a number except to retry (chaos() sends the
        // stale and reused ones).
        match self.rng.below(10) {
            0..=4 => None,
            _ => {
                cl.next_request += 1;
                Some(cl.next_request)
            }
        }
    }

    fn send(&mut self, c: usize, input: Input) -> Check {
        // Only the latest input a client sent can be retried (Raft §6.3): a client that
        // moved on never repeats an older request.
        let numbered = input.request().is_some() && !matches!(input, Input::CloseSession { .. });
        self.clients[c].last_input = numbered.then(|| input.clone());
        let _ = self.deliver(input, Some(c))?;
        Ok(())
    }

    /// A hostile input from the shared generator, stamped with the host's clock; for a
    /// live session, sometimes a stale or reused request number (the [`Shadow`] fails the
    /// run if one is accepted).
    fn chaos(&mut self) -> Check {
        let live: Vec<SessionId> = self.svc.sessions().collect();
        let target = if !live.is_empty() && self.rng.chance(40) {
            let s = *self.rng.pick(&live);
            Some((s, self.svc.session(s).map_or(0, |i| i.last_request)))
        } else {
            None
        };
        let stamp = self.stamp();
        let mut input = self.chaos.hostile(&mut self.rng, stamp, target);
        if input.now() < stamp {
            // A time behind the service's (a peer with a lagging clock): refused. Behind
            // only the host's clock would make the host the faulty one.
            input = input.at(Tick(self.svc.now().0.checked_sub(1).unwrap_or(stamp.0)));
        }
        // May succeed (e.g. a real session id); only the rules and atomicity matter.
        let _ = self.deliver(input, None)?;
        Ok(())
    }

    fn run(&mut self) -> Check {
        let n = self.clients.len();
        for step in 0..self.cfg.steps {
            self.step = step as u64;
            let roll = self.rng.below(100);
            if roll < 22 {
                let to = if self.rng.chance(15) {
                    self.svc
                        .poll_timeout()
                        .map_or(self.now + 1, |t| t.0.clamp(self.now, self.now + 50))
                } else {
                    self.now + self.rng.range(1, 3)
                };
                self.advance(to)?;
            } else if roll < 95 {
                let c = self.rng.below(n as u64) as usize;
                self.client_step(c)?;
            } else {
                self.chaos()?;
            }
            if self.cfg.round_trip_every > 0 && step % self.cfg.round_trip_every == 0 {
                check_round_trip(&self.svc)?;
                self.report.round_trips += 1;
            }
        }
        self.drain()
    }

    /// Clients stop; time runs until nothing is due. Every wait must have ended.
    fn drain(&mut self) -> Check {
        self.log("drain: clients stop, time runs out".into());
        for i in 0..1000 {
            self.step = self.cfg.steps as u64 + i;
            let Some(t) = self.svc.poll_timeout() else {
                break;
            };
            self.now = self.now.max(t.0);
            self.tick_service(self.now)?;
        }
        for c in 0..self.clients.len() {
            if self.clients[c].paused_until != u64::MAX {
                self.clients[c].paused_until = 0;
                self.clients[c].pending_write = None;
                self.resume(c)?;
            }
        }
        if !self.svc.is_empty() || self.svc.usage().claims != 0 || self.svc.usage().locks != 0 {
            return Err(format!(
                "after the drain the service is not empty: {:?}",
                self.svc.usage()
            ));
        }
        if self.shadow.open_waits() != 0 {
            return Err(format!("{} waits never ended", self.shadow.open_waits()));
        }
        for (i, c) in self.clients.iter().enumerate() {
            if c.paused_until != u64::MAX && (!c.waiting.is_empty() || !c.held.is_empty()) {
                return Err(format!("client {i} still believes it waits/holds: {c:?}"));
            }
        }
        if self.shadow.waits_queued != self.shadow.waits_ended {
            return Err(format!(
                "{} waits queued but {} ended",
                self.shadow.waits_queued, self.shadow.waits_ended
            ));
        }
        self.report.steps = self.step + 1;
        self.report.grants = self.shadow.grants;
        self.report.waits = self.shadow.waits_queued;
        self.report.watch_events = self.clients.iter().map(|c| c.watch_events).sum();
        Ok(())
    }
}

/// Runs one simulation.
///
/// Errors: the failure, with the seed that replays it and the last events.
pub fn run(cfg: SimConfig) -> Result<SimReport, Box<SimFailure>> {
    let mut w = World::new(cfg);
    match w.run() {
        Ok(()) => {
            let end = w.svc.snapshot_vec();
            w.report.trace_hash = fnv(w.report.trace_hash, &end);
            Ok(w.report)
        }
        Err(message) => Err(Box::new(SimFailure {
            seed: cfg.seed,
            step: w.step,
            steps: cfg.steps,
            host: cfg.host,
            fault: cfg.fault,
            check_model: cfg.check_model,
            message,
            trace: w.trace.into_iter().collect(),
        })),
    }
}

/// Runs seeds `first..first + count` on every core, returning the summed report or the
/// first failure (by seed).
pub fn run_many(
    first: u64,
    count: u64,
    steps: u32,
    fault: Fault,
) -> Result<SimReport, Box<SimFailure>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let results: Vec<Result<SimReport, Box<SimFailure>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut total = SimReport::default();
                    let mut seed = first + t;
                    while seed < first + count {
                        let mut cfg = SimConfig::new(seed);
                        cfg.steps = steps;
                        cfg.fault = fault;
                        total.add(&run(cfg)?);
                        seed += threads;
                    }
                    Ok(total)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("sim thread"))
            .collect()
    });
    let mut total = SimReport::default();
    let mut failure: Option<Box<SimFailure>> = None;
    for r in results {
        match r {
            Ok(rep) => total.add(&rep),
            Err(f) => {
                if failure.as_ref().is_none_or(|g| f.seed < g.seed) {
                    failure = Some(f);
                }
            }
        }
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(total),
    }
}
