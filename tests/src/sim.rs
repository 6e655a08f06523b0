//! The deterministic simulation: one seeded harness owns time and drives one service,
//! several clients and a resource behind a [`FenceGate`].
//!
//! Clients open sessions, heartbeat through a [`SessionKeeper`] (some heartbeats are
//! lost), acquire (exclusive and shared; try-lock, timed and forever), release, cancel,
//! close, retry numbered requests, and write to the resource carrying their token. They
//! suffer stop-the-world pauses — sometimes between checking their lease and writing,
//! the GC-pause of the seeds — and see the service's outputs only when they run again.
//! A chaos source adds refused inputs (unknown sessions, bad names, time going back).
//!
//! After every input: the outputs equal the [`Model`]'s, every query agrees with it,
//! [`check_service`] passes, the [`Shadow`] checks the history invariants, a refused input
//! left the snapshot byte-identical, and periodically snapshot → restore → snapshot is
//! the identity. At the resource: no accepted write carries a token lower than one
//! accepted before (no stale write), and every accepted token was granted for that lock.
//! At the end the clients stop and time runs out: every waiter must have been granted,
//! timed out, cancelled or dropped with its session.
//!
//! Everything derives from the seed: a failure prints it, and `SEED=<n>` replays it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;

use fencelock::{
    Capacity, Config, Error, FenceGate, GateRow, Input, LockName, LockService, Mode, Output,
    SessionId, SessionKeeper, Tick, Token, VecStorage, Wait,
};

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
    /// A broken host loop: it sometimes applies clients' inputs before ticking the
    /// service up to the real time, so the service grants a session whose deadline has
    /// already passed (the etcd #9921 bug, made by the host).
    HostTicksLate,
    /// A broken core (feature `fault-injection`): a tick grants freed locks before it
    /// expires the sessions that are due.
    #[cfg(feature = "fault-injection")]
    CoreExpiryAfterGrants,
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
    /// Heartbeats lost on the way.
    pub lost_heartbeats: u64,
    /// Writes the resource accepted.
    pub writes_accepted: u64,
    /// Stale writes the gate refused.
    pub stale_refused: u64,
    /// Snapshot round trips checked.
    pub round_trips: u64,
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
        self.lost_heartbeats += o.lost_heartbeats;
        self.writes_accepted += o.writes_accepted;
        self.stale_refused += o.stale_refused;
        self.round_trips += o.round_trips;
    }
}

/// A failed run: the seed replays it.
#[derive(Clone, Debug)]
pub struct SimFailure {
    /// The seed.
    pub seed: u64,
    /// The step at which a check failed.
    pub step: u64,
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
        writeln!(
            f,
            "replay: SEED={} cargo test --release -p fencelock-tests --test sim -- replay_seed --nocapture",
            self.seed
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
    /// Locks this client believes it holds (from the outputs it has seen).
    held: BTreeMap<String, (Mode, Token)>,
    waiting: BTreeSet<String>,
    paused_until: u64,
    inbox: VecDeque<Output>,
    /// Sent keep-alives not yet acknowledged, by send time.
    sent: VecDeque<u64>,
    /// A write it decided to make before a pause hit.
    pending_write: Option<(String, Token)>,
    next_request: u64,
    last_input: Option<Input>,
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
            sent: VecDeque::new(),
            pending_write: None,
            next_request: 1,
            last_input: None,
        }
    }

    /// Applies an output the client has now seen.
    fn see(&mut self, o: &Output) {
        match o {
            Output::SessionRenewed { .. } => {
                if let (Some(k), Some(at)) = (self.keeper.as_mut(), self.sent.pop_front()) {
                    let _ = k.heartbeat_acked(at);
                }
            }
            Output::SessionExpired { .. } | Output::SessionClosed { .. } => {
                if let Some(k) = self.keeper.as_mut() {
                    k.session_lost();
                }
                self.session = None;
                self.held.clear();
                self.waiting.clear();
                self.sent.clear();
            }
            Output::Granted {
                lock, mode, token, ..
            } => {
                self.waiting.remove(lock.as_str());
                self.held.insert(lock.as_str().to_string(), (*mode, *token));
            }
            // A Queued (fresh, or a replay answered from the current state) means waiting,
            // unless the client already holds the lock.
            Output::Queued { lock, .. } if !self.held.contains_key(lock.as_str()) => {
                self.waiting.insert(lock.as_str().to_string());
            }
            Output::Released { lock, .. } => {
                self.held.remove(lock.as_str());
            }
            Output::WaitTimedOut { lock, .. } | Output::WaitCancelled { lock, .. } => {
                self.waiting.remove(lock.as_str());
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
    locks: Vec<&'static str>,
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
        let n_clients = rng.range(2, 5) as usize;
        let n_locks = rng.range(1, 3) as usize;
        let lock_delay = *rng.pick(&[0, 0, 2, 5]);
        let cap = Capacity {
            sessions: rng.range(n_clients as u64 - 1, n_clients as u64 + 1) as u32,
            locks: rng.range(1, n_locks as u64) as u32,
            claims: rng.range(2, 8) as u32,
        };
        let svc = LockService::new(
            VecStorage::new(
                cap.sessions as usize,
                cap.locks as usize,
                cap.claims as usize,
            ),
            Config {
                lock_delay,
                max_name_len: 8,
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
            model: Model::new(cap, lock_delay, 8),
            shadow: Shadow::new(lock_delay),
            clients: (0..n_clients).map(|_| Client::new()).collect(),
            owner: BTreeMap::new(),
            locks: LOCK_NAMES[..n_locks].to_vec(),
            resource: Resource {
                gate: FenceGate::new(vec![GateRow::EMPTY; 4]),
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
    /// the outputs. Returns the outputs or the error.
    fn deliver(
        &mut self,
        input: Input,
        from: Option<usize>,
    ) -> Result<Result<Vec<Output>, Error>, String> {
        let before = self.svc.snapshot_vec();
        let mut outs = Vec::new();
        self.shadow.set_real_now(self.now);
        self.shadow.before(&input);
        let r = self.svc.handle(input.clone(), &mut |o| outs.push(o));
        self.report.inputs += 1;
        let mut line = format!("{input:?} -> ");
        match &r {
            Ok(()) => {
                let _ = write!(line, "{outs:?}");
            }
            Err(e) => {
                let _ = write!(line, "err {}", e.code());
            }
        }
        self.log(line);
        if self.cfg.check_model {
            let m = self.model.apply(&input);
            match (&r, &m) {
                (Ok(()), Ok(mo)) if *mo == outs => {}
                (Err(e), Err(me)) if e == me => {}
                _ => {
                    return Err(format!(
                    "service and model differ on {input:?}: service {r:?} {outs:?}, model {m:?}"
                ))
                }
            }
        }
        if let Err(e) = &r {
            self.report.refused += 1;
            // 5. Atomic errors.
            if !outs.is_empty() {
                return Err(format!("refused input (err {e}) emitted outputs"));
            }
            if self.svc.snapshot_vec() != before {
                return Err(format!("refused input (err {e}) changed the snapshot"));
            }
        }
        self.shadow
            .after(r.map_err(|e| e.code()), &outs)
            .map_err(|e| format!("history invariant: {e}"))?;
        check_service(&self.svc).map_err(|e| format!("state invariant: {e}"))?;
        self.shadow
            .agrees_with(&self.svc)
            .map_err(|e| format!("outputs vs queries: {e}"))?;
        if self.cfg.check_model {
            self.model
                .agrees_with(&self.svc)
                .map_err(|e| format!("model: {e}"))?;
        }
        for o in &outs {
            self.route(o, from)?;
        }
        Ok(r.map(|()| outs))
    }

    fn route(&mut self, o: &Output, from: Option<usize>) -> Check {
        self.report.outputs += 1;
        match o {
            Output::SessionOpened { session, .. } => {
                let c = match from {
                    Some(c) => c,
                    None => {
                        // A chaos open: a phantom client that never acts.
                        let mut ph = Client::new();
                        ph.paused_until = u64::MAX;
                        self.clients.push(ph);
                        self.clients.len() - 1
                    }
                };
                self.owner.insert(*session, c);
                let cl = &mut self.clients[c];
                cl.session = Some(*session);
                if let (Some(k), Some(at)) = (cl.keeper.as_mut(), cl.sent.pop_front()) {
                    let _ = k.heartbeat_acked(at);
                }
                return Ok(());
            }
            Output::Granted {
                lock,
                token,
                session,
                ..
            } => {
                self.granted.insert((lock.as_str().to_string(), token.0));
                let _ = session;
            }
            Output::SessionExpired { .. } => self.report.expiries += 1,
            _ => {}
        }
        let Some(&c) = self.owner.get(&o.session()) else {
            return Err(format!("output for a session no client opened: {o:?}"));
        };
        let now = self.now;
        let cl = &mut self.clients[c];
        if cl.paused_until > now || !cl.inbox.is_empty() {
            // A paused client sees its messages later, in order.
            cl.inbox.push_back(o.clone());
        } else {
            cl.see(o);
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
                    // this client still holds the lock with this token.
                    let s = self.clients[c].session.ok_or("safe lease but no session")?;
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

    fn advance(&mut self, to: u64) -> Check {
        self.now = to;
        if self.cfg.fault == Fault::HostTicksLate && self.rng.chance(70) {
            self.log(format!(
                "broken host: time is {to}, the service is not ticked"
            ));
            return Ok(());
        }
        self.tick_service(to)
    }

    fn tick_service(&mut self, to: u64) -> Check {
        self.deliver(Input::Tick { now: Tick(to) }, None)?
            .map_err(|e| format!("tick refused: {e}"))?;
        Ok(())
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
            cl.see(&o);
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
            k.heartbeat_sent(now).map_err(|e| e.to_string())?;
            cl.keeper = Some(k);
            cl.sent = VecDeque::from([now]);
            cl.next_request = 1;
            cl.last_input = None;
            let _ = self.deliver(Input::OpenSession { ttl }, Some(c))?;
            return Ok(());
        };
        let due = self.clients[c]
            .keeper
            .as_ref()
            .is_some_and(|k| k.heartbeat_due(now) <= now);
        if due && self.rng.chance(85) {
            let cl = &mut self.clients[c];
            if let Some(k) = cl.keeper.as_mut() {
                k.heartbeat_sent(now).map_err(|e| e.to_string())?;
            }
            if self.rng.chance(12) {
                self.report.lost_heartbeats += 1;
                self.log(format!("client {c}: heartbeat lost"));
                return Ok(());
            }
            self.clients[c].sent.push_back(now);
            let request = self.request(c);
            let input = Input::KeepAlive { session, request };
            self.send(c, input)?;
            return Ok(());
        }
        let roll = self.rng.below(100);
        match roll {
            0..=34 => {
                let lock = *self.rng.pick(&self.locks);
                let mode = if self.rng.chance(65) {
                    Mode::Exclusive
                } else {
                    Mode::Shared
                };
                let wait = match self.rng.below(3) {
                    0 => Wait::None,
                    1 => Wait::Until(Tick(now + self.rng.range(0, 10))),
                    _ => Wait::Forever,
                };
                let request = self.request(c);
                let input = Input::Acquire {
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
                let input = Input::Release {
                    session,
                    lock: LockName::new(&lock).expect("name"),
                    request,
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
                    self.send(c, input)?;
                }
            }
            93..=95 => {
                let request = self.request(c);
                self.send(c, Input::CloseSession { session, request })?;
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
        let numbered = matches!(
            &input,
            Input::KeepAlive {
                request: Some(_),
                ..
            } | Input::Acquire {
                request: Some(_),
                ..
            } | Input::Release {
                request: Some(_),
                ..
            } | Input::Cancel {
                request: Some(_),
                ..
            }
        );
        // Only the latest input a client sent can be retried (Raft §6.3): a client that
        // moved on never repeats an older request.
        self.clients[c].last_input = numbered.then(|| input.clone());
        if let Input::KeepAlive { .. } = input {
            // A refused keep-alive acknowledges nothing.
            if let Err(_e) = self.deliver(input, Some(c))? {
                self.clients[c].sent.pop_back();
            }
            return Ok(());
        }
        let _ = self.deliver(input, Some(c))?;
        Ok(())
    }

    fn chaos(&mut self) -> Check {
        let now = self.now;
        let live: Vec<SessionId> = self.svc.sessions().collect();
        if !live.is_empty() && self.rng.chance(40) {
            let s = *self.rng.pick(&live);
            let last = self.svc.session(s).map_or(0, |i| i.last_request);
            if last >= 1 {
                let input = if self.rng.chance(50) {
                    // 107: the latest number, for a request it was not used for.
                    Input::Release {
                        session: s,
                        lock: LockName::new("zz").expect("name"),
                        request: Some(last),
                    }
                } else {
                    // 106: an older number.
                    Input::KeepAlive {
                        session: s,
                        request: Some(last - 1),
                    }
                };
                if self.deliver(input, None)?.is_ok() {
                    return Err("a stale or reused request number was accepted".into());
                }
                return Ok(());
            }
        }
        let input = match self.rng.below(6) {
            0 => Input::KeepAlive {
                session: SessionId(self.rng.range(1_000, 2_000)),
                request: None,
            },
            1 => Input::Acquire {
                session: SessionId(self.rng.range(1, 20)),
                lock: LockName::new("too-long-name").expect("name"),
                mode: Mode::Exclusive,
                wait: Wait::None,
                request: None,
            },
            2 if now > 0 => Input::Tick { now: Tick(now - 1) },
            3 => Input::OpenSession { ttl: 0 },
            4 => Input::Release {
                session: SessionId(self.rng.range(1, 20)),
                lock: LockName::default(),
                request: None,
            },
            // now + ttl overflows (at t0: a zero ttl).
            _ => Input::OpenSession {
                ttl: (u64::MAX - now).saturating_add(1 + self.rng.below(3)) % u64::MAX,
            },
        };
        // May succeed (e.g. a real session id); only lock rules and atomicity matter.
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
        if !self.svc.is_empty() || self.svc.len().claims != 0 || self.svc.len().locks != 0 {
            return Err(format!(
                "after the drain the service is not empty: {:?}",
                self.svc.len()
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
        Ok(())
    }
}

/// Runs one simulation.
///
/// Errors: the failure, with the seed that replays it and the last events.
pub fn run(cfg: SimConfig) -> Result<SimReport, Box<SimFailure>> {
    let mut w = World::new(cfg);
    match w.run() {
        Ok(()) => Ok(w.report),
        Err(message) => Err(Box::new(SimFailure {
            seed: cfg.seed,
            step: w.step,
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
