//! Conformance vectors: line-based scenario files every layer replays byte for byte.
//!
//! ```text
//! # comment
//! config sessions=8 locks=8 claims=16 lock_delay=0 max_name_len=64
//! in <hex of an Input postcard frame>
//! out <hex of an Output postcard frame>   (exactly the outputs of the preceding `in`, in order)
//! err <numeric Error::code()>             (instead of `out` lines when the input is refused)
//! snapshot <hex>                          (the service's snapshot bytes at this point)
//! ```
//!
//! The scenarios are defined in Rust ([`scenarios`]); [`render`] runs one through the
//! native core and writes its file, checking the expectations the scenario states (the
//! stories' tokens, every error code). `cargo run -p fencelock-tests --bin gen-vectors`
//! rewrites `tests/vectors/`; the test `vectors_are_fresh` fails if the committed files
//! differ from what the generator produces; [`replay`] is the native runner.

use std::collections::VecDeque;
use std::fmt::Write as _;

use fencelock::{
    Config, Error, Input, LockName, LockService, Mode, Output, ReleaseReason, SessionId, Tick,
    Token, VecStorage, Wait, MAX_FRAME_LEN,
};

use crate::hex;
use crate::invariants;

/// A vector file's `config` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VecConfig {
    /// Session table capacity.
    pub sessions: usize,
    /// Lock table capacity.
    pub locks: usize,
    /// Claim pool capacity.
    pub claims: usize,
    /// Lock-delay in ticks.
    pub lock_delay: u64,
    /// Longest lock name.
    pub max_name_len: u32,
}

impl Default for VecConfig {
    fn default() -> Self {
        VecConfig {
            sessions: 8,
            locks: 8,
            claims: 16,
            lock_delay: 0,
            max_name_len: 64,
        }
    }
}

impl VecConfig {
    /// A fresh service with this configuration.
    ///
    /// Errors: [`Error::BadConfig`] for a bad `max_name_len`.
    pub fn service(&self) -> Result<LockService<VecStorage>, Error> {
        LockService::new(
            VecStorage::new(self.sessions, self.locks, self.claims),
            Config {
                lock_delay: self.lock_delay,
                max_name_len: self.max_name_len,
            },
        )
    }

    fn line(&self) -> String {
        format!(
            "config sessions={} locks={} claims={} lock_delay={} max_name_len={}",
            self.sessions, self.locks, self.claims, self.lock_delay, self.max_name_len
        )
    }

    fn parse(rest: &str) -> Result<VecConfig, String> {
        let mut c = VecConfig::default();
        for kv in rest.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("config item {kv:?} is not key=value"))?;
            let n: u64 = v.parse().map_err(|_| format!("config {k}: {v:?}"))?;
            match k {
                "sessions" => c.sessions = n as usize,
                "locks" => c.locks = n as usize,
                "claims" => c.claims = n as usize,
                "lock_delay" => c.lock_delay = n,
                "max_name_len" => c.max_name_len = n as u32,
                _ => return Err(format!("unknown config key {k:?}")),
            }
        }
        Ok(c)
    }
}

/// Encodes an input as a frame.
pub fn input_frame(input: &Input) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = input.to_frame(&mut buf).expect("every input fits a frame");
    buf[..n].to_vec()
}

/// Encodes an output as a frame.
pub fn output_frame(output: &Output) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = output
        .to_frame(&mut buf)
        .expect("every output fits a frame");
    buf[..n].to_vec()
}

/// What a scenario checks about the outputs of its latest input, at generation time.
#[derive(Clone, Debug)]
pub enum Expect {
    /// Exactly these outputs.
    Outputs(Vec<Output>),
    /// Refused with this error code.
    Err(u32),
    /// The last output is a `Granted` with this token.
    LastGrantToken(u64),
}

/// One step of a scenario.
#[derive(Clone, Debug)]
pub enum Step {
    /// A `# comment` line.
    Comment(String),
    /// An input frame (usually a valid input; may be deliberately malformed bytes).
    In(Vec<u8>),
    /// A `snapshot` line.
    Snapshot,
    /// A check of the latest input's result (writes nothing to the file).
    Expect(Expect),
}

/// A named scenario: the definition a vector file is rendered from.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// File stem (`02_gc_pause` → `02_gc_pause.vec`).
    pub name: &'static str,
    /// What it shows (the file's first comment).
    pub about: &'static str,
    /// The service configuration.
    pub config: VecConfig,
    /// The steps.
    pub steps: Vec<Step>,
}

/// Shorthand constructors used by the scenario definitions.
pub fn s(id: u64) -> SessionId {
    SessionId(id)
}

fn name(n: &str) -> LockName {
    if n.is_empty() {
        // Only a decoded frame can carry the empty name; the service must refuse it.
        return LockName::default();
    }
    LockName::new(n).expect("valid test name")
}

impl Scenario {
    fn new(name: &'static str, about: &'static str, config: VecConfig) -> Scenario {
        Scenario {
            name,
            about,
            config,
            steps: Vec::new(),
        }
    }
    fn note(&mut self, text: &str) -> &mut Self {
        self.steps.push(Step::Comment(text.to_string()));
        self
    }
    fn input(&mut self, i: Input) -> &mut Self {
        self.steps.push(Step::In(input_frame(&i)));
        self
    }
    fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.steps.push(Step::In(bytes.to_vec()));
        self
    }
    fn open(&mut self, ttl: u64) -> &mut Self {
        self.input(Input::OpenSession { ttl })
    }
    fn keep(&mut self, session: u64) -> &mut Self {
        self.input(Input::KeepAlive {
            session: s(session),
            request: None,
        })
    }
    fn keep_req(&mut self, session: u64, request: u64) -> &mut Self {
        self.input(Input::KeepAlive {
            session: s(session),
            request: Some(request),
        })
    }
    fn close(&mut self, session: u64) -> &mut Self {
        self.input(Input::CloseSession {
            session: s(session),
            request: None,
        })
    }
    fn acq(&mut self, session: u64, lock: &str, mode: Mode, wait: Wait) -> &mut Self {
        self.acq_req(session, lock, mode, wait, None)
    }
    fn acq_req(
        &mut self,
        session: u64,
        lock: &str,
        mode: Mode,
        wait: Wait,
        request: Option<u64>,
    ) -> &mut Self {
        self.input(Input::Acquire {
            session: s(session),
            lock: name(lock),
            mode,
            wait,
            request,
        })
    }
    fn rel(&mut self, session: u64, lock: &str) -> &mut Self {
        self.rel_req(session, lock, None)
    }
    fn rel_req(&mut self, session: u64, lock: &str, request: Option<u64>) -> &mut Self {
        self.input(Input::Release {
            session: s(session),
            lock: name(lock),
            request,
        })
    }
    fn cancel(&mut self, session: u64, lock: &str) -> &mut Self {
        self.cancel_req(session, lock, None)
    }
    fn cancel_req(&mut self, session: u64, lock: &str, request: Option<u64>) -> &mut Self {
        self.input(Input::Cancel {
            session: s(session),
            lock: name(lock),
            request,
        })
    }
    fn tick(&mut self, now: u64) -> &mut Self {
        self.input(Input::Tick { now: Tick(now) })
    }
    fn snap(&mut self) -> &mut Self {
        self.steps.push(Step::Snapshot);
        self
    }
    fn expect(&mut self, outputs: Vec<Output>) -> &mut Self {
        self.steps.push(Step::Expect(Expect::Outputs(outputs)));
        self
    }
    fn expect_err(&mut self, code: u32) -> &mut Self {
        self.steps.push(Step::Expect(Expect::Err(code)));
        self
    }
    fn expect_token(&mut self, token: u64) -> &mut Self {
        self.steps.push(Step::Expect(Expect::LastGrantToken(token)));
        self
    }
}

fn granted(session: u64, lock: &str, mode: Mode, token: u64) -> Output {
    Output::Granted {
        session: s(session),
        lock: name(lock),
        mode,
        token: Token(token),
    }
}
fn queued(session: u64, lock: &str, mode: Mode, position: u32) -> Output {
    Output::Queued {
        session: s(session),
        lock: name(lock),
        mode,
        position,
    }
}
fn released(session: u64, lock: &str, token: u64, reason: ReleaseReason) -> Output {
    Output::Released {
        session: s(session),
        lock: name(lock),
        token: Token(token),
        reason,
    }
}
fn opened(session: u64, expires_at: u64) -> Output {
    Output::SessionOpened {
        session: s(session),
        expires_at: Tick(expires_at),
    }
}
fn renewed(session: u64, expires_at: u64) -> Output {
    Output::SessionRenewed {
        session: s(session),
        expires_at: Tick(expires_at),
    }
}
fn expired(session: u64) -> Output {
    Output::SessionExpired {
        session: s(session),
    }
}
fn busy(session: u64, lock: &str) -> Output {
    Output::Busy {
        session: s(session),
        lock: name(lock),
    }
}
fn timed_out(session: u64, lock: &str) -> Output {
    Output::WaitTimedOut {
        session: s(session),
        lock: name(lock),
    }
}
fn cancelled(session: u64, lock: &str) -> Output {
    Output::WaitCancelled {
        session: s(session),
        lock: name(lock),
    }
}

use Mode::{Exclusive as X, Shared as Sh};
use ReleaseReason::{Closed, Expired, Released as ByRelease};

/// Every scenario, in file order.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        basic(),
        gc_pause(),
        shardpay(),
        leader_election(),
        shared_runs(),
        lock_delay(),
        timed_waits(),
        cancel(),
        idempotent_retries(),
        errors_sessions_and_locks(),
        errors_names_time_capacity(),
        bad_frames(),
        close_session(),
        reacquire(),
        tick_order(),
        eviction_keeps_revision(),
    ]
}

fn basic() -> Scenario {
    let mut v = Scenario::new(
        "01_basic",
        "open, exclusive acquire, try-lock busy, release wakes the queue head, keep-alive",
        VecConfig::default(),
    );
    v.open(10).expect(vec![opened(1, 10)]);
    v.open(10).expect(vec![opened(2, 10)]);
    v.acq(1, "a", X, Wait::None)
        .expect(vec![granted(1, "a", X, 1)]);
    v.acq(2, "a", X, Wait::None).expect(vec![busy(2, "a")]);
    v.acq(2, "a", X, Wait::Forever)
        .expect(vec![queued(2, "a", X, 1)]);
    v.snap();
    v.tick(4).expect(vec![]);
    v.keep(1).expect(vec![renewed(1, 14)]);
    v.keep(2).expect(vec![renewed(2, 14)]);
    v.rel(1, "a")
        .expect(vec![released(1, "a", 1, ByRelease), granted(2, "a", X, 2)]);
    v.rel(2, "a").expect(vec![released(2, "a", 2, ByRelease)]);
    v.snap();
    v
}

fn gc_pause() -> Scenario {
    let mut v = Scenario::new(
        "02_gc_pause",
        "the reference article's timeline: A granted 34, paused, expired; B granted 35 \
         (the resource then refuses A's late write with 34)",
        VecConfig::default(),
    );
    v.note("burn 33 tokens on another lock so that A's grant is token 34");
    v.open(1000).expect(vec![opened(1, 1000)]);
    for _ in 0..33 {
        v.acq(1, "warmup", X, Wait::None);
        v.rel(1, "warmup");
    }
    v.close(1)
        .expect(vec![Output::SessionClosed { session: s(1) }]);
    v.note("t0: A (session 2) and B (session 3) open with ttl 10; A acquires: token 34");
    v.open(10).open(10);
    v.acq(2, "jobs/reindex", X, Wait::None)
        .expect(vec![granted(2, "jobs/reindex", X, 34)]);
    v.acq(3, "jobs/reindex", X, Wait::Forever)
        .expect(vec![queued(3, "jobs/reindex", X, 1)]);
    v.snap();
    v.note("A stops the world (GC pause); B keeps heartbeating every 3 ticks");
    for t in [3, 6, 9] {
        v.tick(t).expect(vec![]);
        v.keep(3).expect(vec![renewed(3, t + 10)]);
    }
    v.note("t10: A's session expires; its hold is released and B is granted token 35");
    v.tick(10).expect(vec![
        expired(2),
        released(2, "jobs/reindex", 34, Expired),
        granted(3, "jobs/reindex", X, 35),
    ]);
    v.snap();
    for t in [12, 15, 18, 21, 24] {
        v.tick(t).keep(3);
    }
    v.note("A wakes at t25 and tries to release: its session is gone");
    v.tick(25).expect(vec![]);
    v.rel(2, "jobs/reindex").expect_err(101);
    v.snap();
    v
}

fn shardpay() -> Scenario {
    let mut v = Scenario::new(
        "03_shardpay",
        "ShardPay's reconciliation: lease 30 s renewed every 10 s; W1 gets 42, pauses 45 s; \
         standby W2 gets 43",
        VecConfig::default(),
    );
    v.note("earlier nightly runs took tokens 1..=41");
    v.open(100_000);
    for _ in 0..41 {
        v.acq(1, "/locks/reconcile", X, Wait::None);
        v.rel(1, "/locks/reconcile");
    }
    v.close(1);
    v.note("W1 (session 2) and standby W2 (session 3), lease 30");
    v.open(30).open(30);
    v.acq(2, "/locks/reconcile", X, Wait::None).expect_token(42);
    v.acq(3, "/locks/reconcile", X, Wait::Forever)
        .expect(vec![queued(3, "/locks/reconcile", X, 1)]);
    v.note("W1 renews once at t10, then a 45 s GC pause; W2 renews every 10 s");
    v.tick(10).keep(2).keep(3);
    v.tick(20).keep(3);
    v.tick(30).keep(3);
    v.note("t40: W1's lease (renewed at t10) expires; W2 gets 43");
    v.tick(40).expect(vec![
        expired(2),
        released(2, "/locks/reconcile", 42, Expired),
        granted(3, "/locks/reconcile", X, 43),
    ]);
    v.keep(3);
    v.snap();
    v.note("t55: W1 resumes and renews: unknown session (it must stop; its 42 is dead)");
    v.tick(55).keep(2).expect_err(101);
    v.rel(3, "/locks/reconcile")
        .expect(vec![released(3, "/locks/reconcile", 43, ByRelease)]);
    v.snap();
    v
}

fn leader_election() -> Scenario {
    let mut v = Scenario::new(
        "04_leader_election",
        "campaign = exclusive acquire waiting forever; the token is the epoch; resign, \
         expiry and withdrawal",
        VecConfig::default(),
    );
    v.open(10).open(10).open(10);
    v.note("three candidates campaign; the first leads with epoch 1");
    v.acq(1, "election/primary", X, Wait::Forever)
        .expect(vec![granted(1, "election/primary", X, 1)]);
    v.acq(2, "election/primary", X, Wait::Forever)
        .expect(vec![queued(2, "election/primary", X, 1)]);
    v.acq(3, "election/primary", X, Wait::Forever)
        .expect(vec![queued(3, "election/primary", X, 2)]);
    v.note("the leader resigns: candidate 2 leads with epoch 2");
    v.rel(1, "election/primary").expect(vec![
        released(1, "election/primary", 1, ByRelease),
        granted(2, "election/primary", X, 2),
    ]);
    v.note("candidate 1 campaigns again, queues behind 3");
    v.acq(1, "election/primary", X, Wait::Forever)
        .expect(vec![queued(1, "election/primary", X, 2)]);
    v.snap();
    v.note("leader 2 stops heartbeating; 1 and 3 do; at t10 2 expires, 3 leads with epoch 3");
    v.tick(5).keep(1).keep(3);
    v.tick(10).expect(vec![
        expired(2),
        released(2, "election/primary", 2, Expired),
        granted(3, "election/primary", X, 3),
    ]);
    v.note("candidate 1 withdraws (resign while not leading = cancel)");
    v.cancel(1, "election/primary")
        .expect(vec![cancelled(1, "election/primary")]);
    v.snap();
    v
}

fn shared_runs() -> Scenario {
    let mut v = Scenario::new(
        "05_shared",
        "shared holders together; an exclusive waiter blocks later readers (no barging); a \
         release wakes the whole run of shared waiters at the head, one exclusive otherwise",
        VecConfig::default(),
    );
    for _ in 0..5 {
        v.open(100);
    }
    v.acq(1, "table", Sh, Wait::None)
        .expect(vec![granted(1, "table", Sh, 1)]);
    v.acq(2, "table", Sh, Wait::None)
        .expect(vec![granted(2, "table", Sh, 2)]);
    v.acq(3, "table", X, Wait::Forever)
        .expect(vec![queued(3, "table", X, 1)]);
    v.note("a reader arriving behind a queued writer queues too");
    v.acq(4, "table", Sh, Wait::Forever)
        .expect(vec![queued(4, "table", Sh, 2)]);
    v.acq(5, "table", Sh, Wait::Forever)
        .expect(vec![queued(5, "table", Sh, 3)]);
    v.snap();
    v.rel(1, "table")
        .expect(vec![released(1, "table", 1, ByRelease)]);
    v.rel(2, "table").expect(vec![
        released(2, "table", 2, ByRelease),
        granted(3, "table", X, 3),
    ]);
    v.note("the writer releases: both readers at the head are granted together");
    v.rel(3, "table").expect(vec![
        released(3, "table", 3, ByRelease),
        granted(4, "table", Sh, 4),
        granted(5, "table", Sh, 5),
    ]);
    v.snap();
    v.acq(1, "table", X, Wait::None)
        .expect(vec![busy(1, "table")]);
    v.rel(4, "table").rel(5, "table");
    v.snap();
    v
}

fn lock_delay() -> Scenario {
    let mut v = Scenario::new(
        "06_lock_delay",
        "after an expiry the lock is not granted before expiry + lock_delay; release and \
         close never delay",
        VecConfig {
            lock_delay: 5,
            ..VecConfig::default()
        },
    );
    v.open(10).open(100);
    v.acq(1, "db", X, Wait::None).expect_token(1);
    v.acq(2, "db", X, Wait::Forever)
        .expect(vec![queued(2, "db", X, 1)]);
    v.tick(10)
        .expect(vec![expired(1), released(1, "db", 1, Expired)]);
    v.snap();
    v.note("during the delay: a try-lock is busy, the queued waiter still waits");
    v.open(100);
    v.acq(3, "db", X, Wait::None).expect(vec![busy(3, "db")]);
    v.tick(14).expect(vec![]);
    v.tick(15).expect(vec![granted(2, "db", X, 2)]);
    v.note("a plain release does not delay");
    v.rel(2, "db").expect(vec![released(2, "db", 2, ByRelease)]);
    v.acq(3, "db", X, Wait::None).expect_token(3);
    v.note("nor does a close");
    v.acq(2, "db", X, Wait::Forever);
    v.close(3).expect(vec![
        Output::SessionClosed { session: s(3) },
        released(3, "db", 3, Closed),
        granted(2, "db", X, 4),
    ]);
    v.note("an expiry with nobody waiting: the idle lock stays listed until the delay ends");
    v.open(3);
    v.acq(4, "other", X, Wait::None).expect_token(5);
    v.tick(18)
        .expect(vec![expired(4), released(4, "other", 5, Expired)]);
    v.snap();
    v.acq(2, "other", X, Wait::Until(Tick(30)))
        .expect(vec![queued(2, "other", X, 1)]);
    v.tick(23).expect(vec![granted(2, "other", X, 6)]);
    v.snap();
    v
}

fn timed_waits() -> Scenario {
    let mut v = Scenario::new(
        "07_timed_waits",
        "Wait::Until: timeouts, a deadline not after now acts as a try-lock, a timed-out \
         head unblocks the shared waiters behind it",
        VecConfig::default(),
    );
    for _ in 0..4 {
        v.open(1000);
    }
    v.acq(1, "q", Sh, Wait::None).expect_token(1);
    v.acq(2, "q", X, Wait::Until(Tick(5)))
        .expect(vec![queued(2, "q", X, 1)]);
    v.acq(3, "q", Sh, Wait::Until(Tick(20)))
        .expect(vec![queued(3, "q", Sh, 2)]);
    v.acq(4, "q", Sh, Wait::Forever)
        .expect(vec![queued(4, "q", Sh, 3)]);
    v.snap();
    v.tick(4).expect(vec![]);
    v.note("t5: the exclusive head times out; the readers behind it join the shared holder");
    v.tick(5).expect(vec![
        timed_out(2, "q"),
        granted(3, "q", Sh, 2),
        granted(4, "q", Sh, 3),
    ]);
    v.note("a deadline at or before now behaves as a try-lock");
    v.acq(2, "q", X, Wait::Until(Tick(5)))
        .expect(vec![busy(2, "q")]);
    v.acq(2, "q", X, Wait::Until(Tick(3)))
        .expect(vec![busy(2, "q")]);
    v.acq(2, "q", X, Wait::Until(Tick(9)))
        .expect(vec![queued(2, "q", X, 1)]);
    v.tick(9).expect(vec![timed_out(2, "q")]);
    v.snap();
    v
}

fn cancel() -> Scenario {
    let mut v = Scenario::new(
        "08_cancel",
        "cancel withdraws a queued acquire; cancelling the blocking head grants the shared \
         waiters behind it; the freed claim can be used again",
        VecConfig::default(),
    );
    for _ in 0..4 {
        v.open(100);
    }
    v.acq(1, "c", Sh, Wait::None).expect_token(1);
    v.acq(2, "c", X, Wait::Forever)
        .expect(vec![queued(2, "c", X, 1)]);
    v.acq(3, "c", Sh, Wait::Forever)
        .expect(vec![queued(3, "c", Sh, 2)]);
    v.acq(4, "c", X, Wait::Forever)
        .expect(vec![queued(4, "c", X, 3)]);
    v.cancel(2, "c")
        .expect(vec![cancelled(2, "c"), granted(3, "c", Sh, 2)]);
    v.snap();
    v.cancel(4, "c").expect(vec![cancelled(4, "c")]);
    v.note("cancelling again: not queued");
    v.cancel(4, "c").expect_err(103);
    v.acq(4, "c", Sh, Wait::None).expect_token(3);
    v.snap();
    v
}

fn idempotent_retries() -> Scenario {
    let mut v = Scenario::new(
        "09_idempotent_retries",
        "request numbers: a repeat of the latest replays the recorded answer without \
         applying twice; an older number is refused; a number reused for another input is \
         refused",
        VecConfig::default(),
    );
    v.open(10).open(10);
    v.acq_req(1, "r", X, Wait::None, Some(1))
        .expect(vec![granted(1, "r", X, 1)]);
    v.note("the client retries request 1 (lost reply): same grant, no new token");
    v.acq_req(1, "r", X, Wait::None, Some(1))
        .expect(vec![granted(1, "r", X, 1)]);
    v.acq_req(2, "r", X, Wait::Forever, Some(7))
        .expect(vec![queued(2, "r", X, 1)]);
    v.acq_req(2, "r", X, Wait::Forever, Some(7))
        .expect(vec![queued(2, "r", X, 1)]);
    v.snap();
    v.tick(3);
    v.keep_req(1, 2).expect(vec![renewed(1, 13)]);
    v.tick(4);
    v.note("a retried keep-alive replays the recorded deadline (13), it does not move it");
    v.keep_req(1, 2).expect(vec![renewed(1, 13)]);
    v.note("an older number is stale; the same number for another input is reused");
    v.keep_req(1, 1).expect_err(106);
    v.rel_req(1, "r", Some(2)).expect_err(107);
    v.rel_req(1, "r", Some(3))
        .expect(vec![released(1, "r", 1, ByRelease), granted(2, "r", X, 2)]);
    v.rel_req(1, "r", Some(3))
        .expect(vec![released(1, "r", 1, ByRelease)]);
    v.note("a try-lock's Busy is recorded and replayed");
    v.acq_req(1, "r", X, Wait::None, Some(4))
        .expect(vec![busy(1, "r")]);
    v.acq_req(1, "r", X, Wait::None, Some(4))
        .expect(vec![busy(1, "r")]);
    v.acq_req(1, "r", X, Wait::Forever, Some(5))
        .expect(vec![queued(1, "r", X, 1)]);
    v.cancel_req(1, "r", Some(6))
        .expect(vec![cancelled(1, "r")]);
    v.cancel_req(1, "r", Some(6))
        .expect(vec![cancelled(1, "r")]);
    v.snap();
    v.note("close with a request number; its retry finds the session gone");
    v.input(Input::CloseSession {
        session: s(1),
        request: Some(8),
    })
    .expect(vec![Output::SessionClosed { session: s(1) }]);
    v.input(Input::CloseSession {
        session: s(1),
        request: Some(8),
    })
    .expect_err(101);
    v.snap();
    v
}

fn errors_sessions_and_locks() -> Scenario {
    let mut v = Scenario::new(
        "10_errors_rules",
        "every refused lock rule (1xx): the input changes nothing (the snapshot after each \
         equals the one before) and emits nothing",
        VecConfig::default(),
    );
    v.open(10).open(10);
    v.acq(1, "e", X, Wait::None).expect_token(1);
    v.acq(2, "e", Sh, Wait::Forever)
        .expect(vec![queued(2, "e", Sh, 1)]);
    v.snap();
    v.note("101 unknown session (never opened)");
    v.acq(9, "e", X, Wait::None).expect_err(101);
    v.keep(9).expect_err(101);
    v.close(9).expect_err(101);
    v.note("102 not holder (a waiter, and a stranger)");
    v.rel(2, "e").expect_err(102);
    v.rel(2, "nothing-here").expect_err(102);
    v.note("103 not queued (the holder, and a stranger)");
    v.cancel(1, "e").expect_err(103);
    v.cancel(2, "nothing-here").expect_err(103);
    v.note("104 already queued");
    v.acq(2, "e", Sh, Wait::Forever).expect_err(104);
    v.acq(2, "e", X, Wait::None).expect_err(104);
    v.note("105 mode mismatch (re-acquire in the other mode)");
    v.acq(1, "e", Sh, Wait::None).expect_err(105);
    v.note("106 stale request, 107 request reused");
    v.keep_req(1, 5);
    v.keep_req(1, 4).expect_err(106);
    v.acq_req(1, "e", X, Wait::None, Some(5)).expect_err(107);
    v.snap();
    v
}

fn errors_names_time_capacity() -> Scenario {
    let mut v = Scenario::new(
        "11_errors_limits",
        "refused names, ttls, time and capacity (2xx, 3xx); nothing changes",
        VecConfig {
            sessions: 2,
            locks: 2,
            claims: 3,
            lock_delay: 0,
            max_name_len: 8,
        },
    );
    v.open(10).open(10);
    v.snap();
    v.note("201 empty name, 202 name longer than max_name_len (8)");
    v.acq(1, "", X, Wait::None).expect_err(201);
    v.acq(1, "123456789", X, Wait::None).expect_err(202);
    v.rel(1, "").expect_err(201);
    v.cancel(1, "123456789").expect_err(202);
    v.acq(1, "12345678", X, Wait::None).expect_token(1);
    v.note("203 bad ttl");
    v.open(0).expect_err(203);
    v.note("301 capacity exceeded: sessions (2 open)");
    v.open(10).expect_err(301);
    v.note("301 capacity exceeded: locks (2 entries)");
    v.acq(1, "l2", X, Wait::None).expect_token(2);
    v.acq(2, "l3", X, Wait::None).expect_err(301);
    v.note("301 capacity exceeded: claims (3)");
    v.acq(2, "l2", X, Wait::Forever)
        .expect(vec![queued(2, "l2", X, 1)]);
    v.acq(2, "12345678", X, Wait::Forever).expect_err(301);
    v.snap();
    v.note("205 time went backwards");
    v.tick(5);
    v.tick(4).expect_err(205);
    v.note("204 deadline overflow: a session whose now + ttl does not fit");
    v.close(2);
    v.open(u64::MAX - 4).expect_err(204);
    v.open(u64::MAX - 6).expect(vec![opened(3, u64::MAX - 1)]);
    v.tick(7);
    v.keep(3).expect_err(204);
    v.snap();
    v
}

fn bad_frames() -> Scenario {
    let mut v = Scenario::new(
        "12_bad_frames",
        "501 bad frame: empty, unknown variant, truncated, trailing bytes, name over 64 \
         bytes, invalid UTF-8; nothing changes",
        VecConfig::default(),
    );
    v.open(10);
    v.snap();
    let good = input_frame(&Input::Acquire {
        session: s(1),
        lock: name("x"),
        mode: X,
        wait: Wait::None,
        request: None,
    });
    v.raw(&[]).expect_err(501);
    v.raw(&[0x7f]).expect_err(501);
    v.raw(&good[..good.len() - 1]).expect_err(501);
    let mut trailing = good.clone();
    trailing.push(0);
    v.raw(&trailing).expect_err(501);
    // Acquire { session 1, name of 65 bytes, ... }
    let mut long = vec![good[0], 1, 65];
    long.extend(std::iter::repeat_n(b'n', 65));
    long.extend_from_slice(&[0, 0, 0]);
    v.raw(&long).expect_err(501);
    let mut utf8 = vec![good[0], 1, 2, 0xc3, 0x28];
    utf8.extend_from_slice(&[0, 0, 0]);
    v.raw(&utf8).expect_err(501);
    v.snap();
    v.note("the well-formed frame is accepted");
    v.raw(&good).expect(vec![granted(1, "x", X, 1)]);
    v.snap();
    v
}

fn close_session() -> Scenario {
    let mut v = Scenario::new(
        "13_close_session",
        "close releases every hold in acquisition order, drops the waits silently, then \
         grants what it freed",
        VecConfig::default(),
    );
    v.open(50).open(50).open(50);
    v.acq(1, "p", X, Wait::None).acq(1, "q", X, Wait::None);
    v.acq(2, "q", X, Wait::Forever)
        .acq(2, "p", X, Wait::Forever);
    v.acq(3, "p", X, Wait::Forever);
    v.acq(1, "r", X, Wait::None).acq(3, "r", X, Wait::Forever);
    v.snap();
    v.note("close 2 (waiting on q and p): its waits vanish with no output but SessionClosed");
    v.close(2)
        .expect(vec![Output::SessionClosed { session: s(2) }]);
    v.close(1).expect(vec![
        Output::SessionClosed { session: s(1) },
        released(1, "p", 1, Closed),
        released(1, "q", 2, Closed),
        released(1, "r", 3, Closed),
        granted(3, "p", X, 4),
        granted(3, "r", X, 5),
    ]);
    v.snap();
    v
}

fn reacquire() -> Scenario {
    let mut v = Scenario::new(
        "14_reacquire",
        "re-acquire by the holder returns its current grant (same token), never a second \
         queue entry",
        VecConfig::default(),
    );
    v.open(10).open(10);
    v.acq(1, "k", X, Wait::None).expect_token(1);
    v.acq(1, "k", X, Wait::Forever)
        .expect(vec![granted(1, "k", X, 1)]);
    v.acq(1, "k", X, Wait::Until(Tick(3)))
        .expect(vec![granted(1, "k", X, 1)]);
    v.acq(2, "s", Sh, Wait::None).expect_token(2);
    v.acq(2, "s", Sh, Wait::None)
        .expect(vec![granted(2, "s", Sh, 2)]);
    v.snap();
    v
}

fn tick_order() -> Scenario {
    let mut v = Scenario::new(
        "15_tick_order",
        "inside one tick: expire sessions, time out waits, end lock-delays, then grant — \
         a waiter whose session expires at the same tick the lock frees is never granted \
         (etcd #9921)",
        VecConfig::default(),
    );
    v.open(10).open(10).open(20);
    v.acq(1, "z", X, Wait::None).expect_token(1);
    v.acq(2, "z", X, Wait::Forever);
    v.acq(3, "z", X, Wait::Forever);
    v.note("1 and 2 both expire at t10; 3 is live: only 3 may be granted");
    v.tick(10).expect(vec![
        expired(1),
        released(1, "z", 1, Expired),
        expired(2),
        granted(3, "z", X, 2),
    ]);
    v.snap();
    v.note("a wait timing out at the same tick the lock frees is not granted either");
    v.open(30).open(30);
    v.acq(4, "z", X, Wait::Until(Tick(20)));
    v.acq(5, "z", X, Wait::Forever);
    v.tick(20).expect(vec![
        expired(3),
        released(3, "z", 2, Expired),
        timed_out(4, "z"),
        granted(5, "z", X, 3),
    ]);
    v.snap();
    v
}

fn eviction_keeps_revision() -> Scenario {
    let mut v = Scenario::new(
        "16_eviction",
        "idle lock entries are evicted, but the revision (the next token) survives, and the \
         snapshot records it",
        VecConfig {
            sessions: 2,
            locks: 1,
            claims: 2,
            lock_delay: 0,
            max_name_len: 64,
        },
    );
    v.open(10);
    v.acq(1, "a", X, Wait::None).expect_token(1);
    v.rel(1, "a");
    v.note("the lock table has one entry; 'a' was evicted, so 'b' fits");
    v.acq(1, "b", X, Wait::None).expect_token(2);
    v.rel(1, "b");
    v.acq(1, "a", X, Wait::None).expect_token(3);
    v.rel(1, "a");
    v.snap();
    v
}

/// Runs `sc` through the native core and renders its vector file, checking the scenario's
/// expectations and the invariant checker after every input.
///
/// Errors: a message naming the failed expectation.
pub fn render(sc: &Scenario) -> Result<String, String> {
    let mut text = String::new();
    let _ = writeln!(text, "# {}: {}", sc.name, sc.about);
    let _ = writeln!(
        text,
        "# generated by `cargo run -p fencelock-tests --bin gen-vectors`; do not edit"
    );
    let _ = writeln!(text, "{}", sc.config.line());
    let mut svc = sc.config.service().map_err(|e| e.to_string())?;
    let mut last: Option<Result<Vec<Output>, Error>> = None;
    for (i, step) in sc.steps.iter().enumerate() {
        match step {
            Step::Comment(c) => {
                let _ = writeln!(text, "# {c}");
            }
            Step::In(frame) => {
                let before = svc.snapshot_vec();
                let mut outs = Vec::new();
                let r = svc.handle_frame(frame, &mut |o| outs.push(o));
                let _ = writeln!(text, "in {}", hex::encode(frame));
                match &r {
                    Ok(()) => {
                        for o in &outs {
                            let _ = writeln!(text, "out {}", hex::encode(&output_frame(o)));
                        }
                    }
                    Err(e) => {
                        if !outs.is_empty() || svc.snapshot_vec() != before {
                            return Err(format!(
                                "{}: step {i}: refused input changed state",
                                sc.name
                            ));
                        }
                        let _ = writeln!(text, "err {}", e.code());
                    }
                }
                invariants::check_service(&svc)
                    .map_err(|e| format!("{}: step {i}: invariant: {e}", sc.name))?;
                last = Some(r.map(|()| outs));
            }
            Step::Snapshot => {
                let _ = writeln!(text, "snapshot {}", hex::encode(&svc.snapshot_vec()));
            }
            Step::Expect(x) => {
                let got = last.as_ref().ok_or_else(|| {
                    format!("{}: step {i}: expectation before any input", sc.name)
                })?;
                let ok = match (x, got) {
                    (Expect::Outputs(want), Ok(outs)) => want == outs,
                    (Expect::Err(code), Err(e)) => e.code() == *code,
                    (Expect::LastGrantToken(t), Ok(outs)) => matches!(
                        outs.last(),
                        Some(Output::Granted { token, .. }) if token.0 == *t
                    ),
                    _ => false,
                };
                if !ok {
                    return Err(format!(
                        "{}: step {i}: expected {x:?}, got {got:?}",
                        sc.name
                    ));
                }
            }
        }
    }
    Ok(text)
}

/// What a replay checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// `in` lines fed.
    pub inputs: usize,
    /// `out` frames compared.
    pub outputs: usize,
    /// `err` codes compared.
    pub errors: usize,
    /// `snapshot` lines compared.
    pub snapshots: usize,
}

/// The native runner: replays a vector file's text through `handle_frame` and compares
/// every output frame, error code and snapshot byte for byte.
///
/// Errors: a message with the line number of the first mismatch.
pub fn replay(text: &str) -> Result<ReplayStats, String> {
    let mut stats = ReplayStats::default();
    let mut svc: Option<LockService<VecStorage>> = None;
    let mut pending: VecDeque<Vec<u8>> = VecDeque::new();
    let mut pending_err: Option<u32> = None;
    let settle = |pending: &VecDeque<Vec<u8>>, pending_err: &Option<u32>, ln: usize| {
        if let Some(f) = pending.front() {
            return Err(format!("line {ln}: output {} not listed", hex::encode(f)));
        }
        if let Some(code) = pending_err {
            return Err(format!("line {ln}: input refused with {code}, no err line"));
        }
        Ok(())
    };
    for (n, line) in text.lines().enumerate() {
        let ln = n + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "config" => {
                let c = VecConfig::parse(rest).map_err(|e| format!("line {ln}: {e}"))?;
                svc = Some(c.service().map_err(|e| format!("line {ln}: {e}"))?);
            }
            "in" => {
                settle(&pending, &pending_err, ln)?;
                let svc = svc.as_mut().ok_or(format!("line {ln}: in before config"))?;
                let frame = hex::decode(rest).map_err(|e| format!("line {ln}: {e}"))?;
                let mut outs = Vec::new();
                if let Err(e) = svc.handle_frame(&frame, &mut |o| outs.push(output_frame(&o))) {
                    pending_err = Some(e.code());
                }
                pending = outs.into();
                stats.inputs += 1;
            }
            "out" => {
                let want = hex::decode(rest).map_err(|e| format!("line {ln}: {e}"))?;
                match pending.pop_front() {
                    Some(got) if got == want => stats.outputs += 1,
                    Some(got) => {
                        return Err(format!(
                            "line {ln}: output {} != expected {rest}",
                            hex::encode(&got)
                        ))
                    }
                    None => return Err(format!("line {ln}: expected output {rest}, got none")),
                }
            }
            "err" => {
                let want: u32 = rest.parse().map_err(|_| format!("line {ln}: bad code"))?;
                match pending_err.take() {
                    Some(got) if got == want => stats.errors += 1,
                    got => return Err(format!("line {ln}: expected err {want}, got {got:?}")),
                }
            }
            "snapshot" => {
                settle(&pending, &pending_err, ln)?;
                let svc = svc
                    .as_ref()
                    .ok_or(format!("line {ln}: snapshot before config"))?;
                let got = svc.snapshot_vec();
                if hex::encode(&got) != rest.to_ascii_lowercase() {
                    return Err(format!(
                        "line {ln}: snapshot differs: {}",
                        hex::encode(&got)
                    ));
                }
                stats.snapshots += 1;
            }
            _ => return Err(format!("line {ln}: unknown directive {word:?}")),
        }
    }
    settle(&pending, &pending_err, text.lines().count() + 1)?;
    Ok(stats)
}

/// The directory of the committed vector files.
pub fn vectors_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors")
}
