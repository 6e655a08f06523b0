//! Conformance vectors: line-based scenario files every layer replays byte for byte.
//!
//! ```text
//! # comment
//! config sessions=8 locks=8 claims=16 lock_delay=0 max_name_len=64
//! in <hex of an Input postcard frame>
//! out <hex of an Output postcard frame>   zero or more: the events of that input, in order
//!                                         (the advance's first)
//! reply <hex of a Reply postcard frame>   exactly one of reply/err closes each `in`
//! err <numeric Error::code()>             (may follow `out` lines: the advance to the
//!                                         input's `now` stands, docs/SPEC.md §5)
//! snapshot <hex>                          the service's snapshot bytes at this point
//! ```
//!
//! The scenarios are defined in Rust ([`scenarios`]); [`render`] runs one through the
//! native core and writes its file, checking the expectations the scenario states (the
//! stories' tokens, replies and events, every error code), the invariant checker after
//! every input, and that a refused input changed nothing beyond the advance to its `now`.
//! `cargo run -p fencelock-tests --bin gen-vectors` rewrites `tests/vectors/`; the test
//! `vectors_are_fresh` fails if the committed files differ from what the generator
//! produces; [`replay`] is the native runner.

use std::collections::VecDeque;
use std::fmt::Write as _;

use fencelock::{
    Change, Config, Error, Input, Label, LockName, LockService, Mode, Output, ReleaseReason, Reply,
    SessionId, Tick, Token, VecStorage, Wait, MAX_FRAME_LEN,
};

use crate::hex;
use crate::invariants;
use crate::model::Model;

/// A vector file's `config` line (also the first line of a `.calls` file).
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
    /// A fresh service with this configuration. Cost: O(capacity).
    ///
    /// Errors: [`Error::BadConfig`] for a bad `max_name_len` or table size.
    pub fn service(&self) -> Result<LockService<VecStorage>, Error> {
        LockService::new(
            VecStorage::new(self.sessions, self.locks, self.claims),
            Config {
                lock_delay: self.lock_delay,
                max_name_len: self.max_name_len,
                ..Config::default()
            },
        )
    }

    /// The `config …` line. Cost: O(1).
    pub fn line(&self) -> String {
        format!(
            "config sessions={} locks={} claims={} lock_delay={} max_name_len={}",
            self.sessions, self.locks, self.claims, self.lock_delay, self.max_name_len
        )
    }

    /// Parses what follows `config ` (every key once, in any order). Cost: O(length).
    ///
    /// Errors: a message naming the bad, missing or repeated item.
    pub fn parse(rest: &str) -> Result<VecConfig, String> {
        let mut c = VecConfig::default();
        let mut seen = Vec::new();
        for kv in rest.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("config item {kv:?} is not key=value"))?;
            let n: u64 = v.parse().map_err(|_| format!("config {k}: {v:?}"))?;
            let small = |n: u64| usize::try_from(n).map_err(|_| format!("config {k}: {n}"));
            match k {
                "sessions" => c.sessions = small(n)?,
                "locks" => c.locks = small(n)?,
                "claims" => c.claims = small(n)?,
                "lock_delay" => c.lock_delay = n,
                "max_name_len" => {
                    c.max_name_len = u32::try_from(n).map_err(|_| format!("config {k}: {n}"))?
                }
                _ => return Err(format!("unknown config key {k:?}")),
            }
            if seen.contains(&k) {
                return Err(format!("config key {k:?} twice"));
            }
            seen.push(k);
        }
        if seen.len() != 5 {
            return Err(format!("config needs all five keys, got {seen:?}"));
        }
        Ok(c)
    }
}

/// Encodes an input as a frame. Cost: O(frame length).
pub fn input_frame(input: &Input) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = input.to_frame(&mut buf).expect("every input fits a frame");
    buf[..n].to_vec()
}

/// Encodes an output (an event) as a frame. Cost: O(frame length).
pub fn output_frame(output: &Output) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = output
        .to_frame(&mut buf)
        .expect("every output fits a frame");
    buf[..n].to_vec()
}

/// Encodes a reply as a frame. Cost: O(frame length).
pub fn reply_frame(reply: &Reply) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = reply.to_frame(&mut buf).expect("every reply fits a frame");
    buf[..n].to_vec()
}

/// A service in the state `svc` would be in after only the advance to `now`: what a
/// refused input may leave behind (docs/SPEC.md §5). Returns it and the advance's events.
/// Cost: a snapshot, a restore and the advance.
pub fn ticked_copy(
    svc: &LockService<VecStorage>,
    now: Tick,
) -> (LockService<VecStorage>, Vec<Output>) {
    let cap = svc.capacity();
    let storage = VecStorage::new(
        cap.sessions as usize,
        cap.locks as usize,
        cap.claims as usize,
    );
    let mut copy = LockService::restore(storage, &svc.snapshot_vec())
        .map_err(|(_, e)| e)
        .expect("a service's own snapshot restores");
    let mut events = Vec::new();
    let _ = copy.tick(now, &mut events);
    (copy, events)
}

/// What a scenario checks about its latest input, at generation time.
#[derive(Clone, Debug)]
pub enum Expect {
    /// Exactly these events.
    Events(Vec<Output>),
    /// This reply.
    Reply(Reply),
    /// Refused with this error code.
    Err(u32),
    /// A reply carrying this token (`Granted`, `Released`, `HoldEnded`).
    Token(u64),
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
    /// The `now` the next input carries (set by [`Scenario::at`] and `tick`).
    now: u64,
}

/// Shorthand for a session id.
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
            now: 0,
        }
    }
    fn note(&mut self, text: &str) -> &mut Self {
        self.steps.push(Step::Comment(text.to_string()));
        self
    }
    /// The following inputs carry `now` (the host's clock when they arrive; no tick).
    fn at(&mut self, now: u64) -> &mut Self {
        self.now = now;
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
    fn t(&self) -> Tick {
        Tick(self.now)
    }
    fn open(&mut self, ttl: u64) -> &mut Self {
        self.input(Input::OpenSession { now: self.t(), ttl })
    }
    fn keep(&mut self, session: u64) -> &mut Self {
        self.keep_req(session, None)
    }
    fn keep_req(&mut self, session: u64, request: Option<u64>) -> &mut Self {
        self.input(Input::KeepAlive {
            now: self.t(),
            session: s(session),
            request,
        })
    }
    fn close(&mut self, session: u64) -> &mut Self {
        self.close_req(session, None)
    }
    fn close_req(&mut self, session: u64, request: Option<u64>) -> &mut Self {
        self.input(Input::CloseSession {
            now: self.t(),
            session: s(session),
            request,
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
            now: self.t(),
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
            now: self.t(),
            session: s(session),
            lock: name(lock),
            request,
        })
    }
    fn rel_hold(
        &mut self,
        session: u64,
        lock: &str,
        token: u64,
        request: Option<u64>,
    ) -> &mut Self {
        self.input(Input::ReleaseHold {
            now: self.t(),
            session: s(session),
            lock: name(lock),
            token: Token(token),
            request,
        })
    }
    fn cancel(&mut self, session: u64, lock: &str) -> &mut Self {
        self.cancel_req(session, lock, None)
    }
    fn cancel_req(&mut self, session: u64, lock: &str, request: Option<u64>) -> &mut Self {
        self.input(Input::Cancel {
            now: self.t(),
            session: s(session),
            lock: name(lock),
            request,
        })
    }
    fn open_labeled(&mut self, ttl: u64, label: &str) -> &mut Self {
        self.input(Input::OpenLabeled {
            now: self.t(),
            ttl,
            label: Label::new(label).expect("a short label"),
        })
    }
    fn watch(&mut self, session: u64, lock: &str) -> &mut Self {
        self.input(Input::Watch {
            now: self.t(),
            session: s(session),
            lock: name(lock),
            request: None,
        })
    }
    fn unwatch(&mut self, session: u64, lock: &str) -> &mut Self {
        self.input(Input::Unwatch {
            now: self.t(),
            session: s(session),
            lock: name(lock),
            request: None,
        })
    }
    fn tick(&mut self, now: u64) -> &mut Self {
        self.now = now;
        self.input(Input::Tick { now: Tick(now) })
    }
    fn snap(&mut self) -> &mut Self {
        self.steps.push(Step::Snapshot);
        self
    }
    fn events(&mut self, events: Vec<Output>) -> &mut Self {
        self.steps.push(Step::Expect(Expect::Events(events)));
        self
    }
    fn reply(&mut self, reply: Reply) -> &mut Self {
        self.steps.push(Step::Expect(Expect::Reply(reply)));
        self
    }
    fn err(&mut self, code: u32) -> &mut Self {
        self.steps.push(Step::Expect(Expect::Err(code)));
        self
    }
    fn token(&mut self, token: u64) -> &mut Self {
        self.steps.push(Step::Expect(Expect::Token(token)));
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
fn released(session: u64, lock: &str, token: u64, reason: ReleaseReason) -> Output {
    Output::Released {
        session: s(session),
        lock: name(lock),
        token: Token(token),
        reason,
    }
}
fn expired(session: u64) -> Output {
    Output::SessionExpired {
        session: s(session),
    }
}
fn timed_out(session: u64, lock: &str) -> Output {
    Output::WaitTimedOut {
        session: s(session),
        lock: name(lock),
    }
}
/// A watcher's event: `holder`'s hold (`mode`, `token`) of `lock` changed.
fn changed(
    watcher: u64,
    lock: &str,
    (holder, label): (u64, &str),
    mode: Mode,
    token: u64,
    change: Change,
) -> Output {
    Output::HolderChanged {
        session: s(watcher),
        lock: name(lock),
        holder: s(holder),
        mode,
        token: Token(token),
        change,
        label: Label::new(label).expect("a short label"),
    }
}
fn r_opened(session: u64, expires_at: u64) -> Reply {
    Reply::Opened {
        session: s(session),
        expires_at: Tick(expires_at),
    }
}
fn r_kept(expires_at: u64) -> Reply {
    Reply::KeptAlive {
        expires_at: Tick(expires_at),
    }
}
fn r_granted(mode: Mode, token: u64) -> Reply {
    Reply::Granted {
        mode,
        token: Token(token),
    }
}
fn r_queued(mode: Mode, position: u32) -> Reply {
    Reply::Queued { mode, position }
}
fn r_released(token: u64) -> Reply {
    Reply::Released {
        token: Token(token),
    }
}

use Mode::{Exclusive as X, Shared as Sh};
use ReleaseReason::{Closed, Expired};

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
        messages_without_ticks(),
        refused_after_the_advance(),
        semaphores_watches(),
        release_hold(),
    ]
}

fn release_hold() -> Scenario {
    let mut v = Scenario::new(
        "20_release_hold",
        "a release naming the hold by its token: it releases that hold as a release does, \
         and refuses (changing nothing) once the session holds the lock with another token; \
         a numbered one replays, and its number is not a plain release's",
        VecConfig::default(),
    );
    v.open(10).open(10).open(10);
    v.watch(3, "h").reply(Reply::Watching { holders: 0 });
    v.acq(1, "h", X, Wait::None).token(1);
    v.acq(2, "h", X, Wait::Forever).reply(r_queued(X, 1));
    v.note("the hold of token 1 released: the waiter is granted, the watcher told both");
    v.at(1)
        .rel_hold(1, "h", 1, Some(1))
        .reply(r_released(1))
        .events(vec![
            changed(3, "h", (1, ""), X, 1, Change::Released),
            granted(2, "h", X, 2),
            changed(3, "h", (2, ""), X, 2, Change::Granted),
        ]);
    v.note("its retry (the same number and token) replays and applies nothing");
    v.rel_hold(1, "h", 1, Some(1))
        .reply(r_released(1))
        .events(vec![]);
    v.note("the same number on a plain release, or with another token, is another request");
    v.rel_req(1, "h", Some(1)).err(107);
    v.rel_hold(1, "h", 2, Some(1)).err(107);
    v.at(2)
        .rel(2, "h")
        .reply(r_released(2))
        .events(vec![changed(3, "h", (2, ""), X, 2, Change::Released)]);
    v.acq(1, "h", X, Wait::None).token(3);
    v.snap();
    v.note("session 1 holds h again (token 3): a release of its old hold (token 1) is refused");
    v.rel_hold(1, "h", 1, None).err(102);
    v.note("a token that is another session's hold, or a lock it waits for, is no hold of it");
    v.rel_hold(2, "h", 3, None).err(102);
    v.acq(2, "h", X, Wait::Forever).reply(r_queued(X, 1));
    v.rel_hold(2, "h", 3, None).err(102);
    v.note("the session, the name, then the number come first, as for a release");
    v.rel_hold(9, "", 3, None).err(101);
    v.snap();
    v.at(3)
        .rel_hold(1, "h", 3, None)
        .reply(r_released(3))
        .events(vec![
            changed(3, "h", (1, ""), X, 3, Change::Released),
            granted(2, "h", X, 4),
            changed(3, "h", (2, ""), X, 4, Change::Granted),
        ]);
    v.snap();
    v
}

fn basic() -> Scenario {
    let mut v = Scenario::new(
        "01_basic",
        "open, exclusive acquire, try-lock busy, release wakes the queue head, keep-alive",
        VecConfig::default(),
    );
    v.open(10).reply(r_opened(1, 10));
    v.open(10).reply(r_opened(2, 10));
    v.acq(1, "a", X, Wait::None)
        .reply(r_granted(X, 1))
        .events(vec![]);
    v.acq(2, "a", X, Wait::None).reply(Reply::Busy);
    v.acq(2, "a", X, Wait::Forever).reply(r_queued(X, 1));
    v.snap();
    v.tick(4)
        .reply(Reply::Ticked { now: Tick(4) })
        .events(vec![]);
    v.keep(1).reply(r_kept(14));
    v.note("a keep-alive at 5 with no tick before it counts from 5");
    v.at(5).keep(2).reply(r_kept(15));
    v.at(6)
        .rel(1, "a")
        .reply(r_released(1))
        .events(vec![granted(2, "a", X, 2)]);
    v.rel(2, "a").reply(r_released(2)).events(vec![]);
    v.snap();
    v
}

fn gc_pause() -> Scenario {
    let mut v = Scenario::new(
        "02_gc_pause",
        "the GC-pause timeline: A granted 34, paused, expired; B granted 35 (the resource \
         then refuses A's late write with 34)",
        VecConfig::default(),
    );
    v.note("burn 33 tokens on another lock so that A's grant is token 34");
    v.open(1000).reply(r_opened(1, 1000));
    for _ in 0..33 {
        v.acq(1, "warmup", X, Wait::None);
        v.rel(1, "warmup");
    }
    v.close(1).reply(Reply::Closed).events(vec![]);
    v.note("t0: A (session 2) and B (session 3) open with ttl 10; A acquires: token 34");
    v.open(10).open(10);
    v.acq(2, "jobs/reindex", X, Wait::None).token(34);
    v.acq(3, "jobs/reindex", X, Wait::Forever)
        .reply(r_queued(X, 1));
    v.snap();
    v.note(
        "A stops the world (GC pause); B's keep-alives arrive every 3 ticks and are applied \
         when they arrive, with no tick between them",
    );
    for t in [3, 6, 9] {
        v.at(t).keep(3).reply(r_kept(t + 10)).events(vec![]);
    }
    v.note("t10: the host's timer: A's session expires; its hold is released and B is granted 35");
    v.tick(10).events(vec![
        expired(2),
        released(2, "jobs/reindex", 34, Expired),
        granted(3, "jobs/reindex", X, 35),
    ]);
    v.snap();
    for t in [12, 15, 18, 21, 24] {
        v.at(t).keep(3);
    }
    v.note("A wakes at t25 and tries to release: its session is gone");
    v.at(25).rel(2, "jobs/reindex").err(101).events(vec![]);
    v.snap();
    v
}

fn shardpay() -> Scenario {
    let mut v = Scenario::new(
        "03_shardpay",
        "ShardPay's reconciliation: lease 30 s kept alive every 10 s; W1 gets 42, pauses \
         45 s; standby W2 gets 43",
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
    v.acq(2, "/locks/reconcile", X, Wait::None).token(42);
    v.acq(3, "/locks/reconcile", X, Wait::Forever)
        .reply(r_queued(X, 1));
    v.note("W1 keeps alive once at t10, then a 45 s GC pause; W2 keeps alive every 10 s");
    v.at(10).keep(2).reply(r_kept(40)).keep(3);
    v.at(20).keep(3);
    v.at(30).keep(3).reply(r_kept(60));
    v.note(
        "t40, no tick since: the advance of W2's keep-alive expires W1's lease (kept alive \
         at t10) and grants W2 43",
    );
    v.at(40).keep(3).reply(r_kept(70)).events(vec![
        expired(2),
        released(2, "/locks/reconcile", 42, Expired),
        granted(3, "/locks/reconcile", X, 43),
    ]);
    v.snap();
    v.note("t55: W1 resumes and keeps alive: unknown session (it must stop; its 42 is dead)");
    v.at(55).keep(2).err(101);
    v.rel(3, "/locks/reconcile").reply(r_released(43));
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
        .reply(r_granted(X, 1));
    v.acq(2, "election/primary", X, Wait::Forever)
        .reply(r_queued(X, 1));
    v.acq(3, "election/primary", X, Wait::Forever)
        .reply(r_queued(X, 2));
    v.note("the leader resigns at t1: candidate 2 leads with epoch 2");
    v.at(1)
        .rel(1, "election/primary")
        .reply(r_released(1))
        .events(vec![granted(2, "election/primary", X, 2)]);
    v.note("candidate 1 campaigns again, queues behind 3");
    v.acq(1, "election/primary", X, Wait::Forever)
        .reply(r_queued(X, 2));
    v.snap();
    v.note(
        "leader 2 stops keeping alive; 1 and 3 do at t5; at t10 2 expires, 3 leads with epoch 3",
    );
    v.at(5).keep(1).keep(3);
    v.tick(10).events(vec![
        expired(2),
        released(2, "election/primary", 2, Expired),
        granted(3, "election/primary", X, 3),
    ]);
    v.note("candidate 1 withdraws at t11 (resign while not leading = cancel)");
    v.at(11)
        .cancel(1, "election/primary")
        .reply(Reply::Cancelled)
        .events(vec![]);
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
    v.acq(1, "table", Sh, Wait::None).reply(r_granted(Sh, 1));
    v.acq(2, "table", Sh, Wait::None).reply(r_granted(Sh, 2));
    v.acq(3, "table", X, Wait::Forever).reply(r_queued(X, 1));
    v.note("a reader arriving behind a queued writer queues too");
    v.acq(4, "table", Sh, Wait::Forever).reply(r_queued(Sh, 2));
    v.acq(5, "table", Sh, Wait::Forever).reply(r_queued(Sh, 3));
    v.snap();
    v.at(2).rel(1, "table").reply(r_released(1)).events(vec![]);
    v.rel(2, "table")
        .reply(r_released(2))
        .events(vec![granted(3, "table", X, 3)]);
    v.note("the writer releases at t3: both readers at the head are granted together");
    v.at(3)
        .rel(3, "table")
        .reply(r_released(3))
        .events(vec![granted(4, "table", Sh, 4), granted(5, "table", Sh, 5)]);
    v.snap();
    v.acq(1, "table", X, Wait::None).reply(Reply::Busy);
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
    v.acq(1, "db", X, Wait::None).token(1);
    v.acq(2, "db", X, Wait::Forever).reply(r_queued(X, 1));
    v.tick(10)
        .events(vec![expired(1), released(1, "db", 1, Expired)]);
    v.snap();
    v.note("during the delay: a try-lock is busy, the queued waiter still waits");
    v.open(100);
    v.acq(3, "db", X, Wait::None).reply(Reply::Busy);
    v.tick(14).events(vec![]);
    v.tick(15).events(vec![granted(2, "db", X, 2)]);
    v.note("a plain release does not delay");
    v.rel(2, "db").reply(r_released(2)).events(vec![]);
    v.acq(3, "db", X, Wait::None).token(3);
    v.note("nor does a close");
    v.acq(2, "db", X, Wait::Forever);
    v.close(3)
        .reply(Reply::Closed)
        .events(vec![released(3, "db", 3, Closed), granted(2, "db", X, 4)]);
    v.note("an expiry with nobody waiting: the idle lock stays listed until the delay ends");
    v.open(3).reply(r_opened(4, 18));
    v.acq(4, "other", X, Wait::None).token(5);
    v.tick(18)
        .events(vec![expired(4), released(4, "other", 5, Expired)]);
    v.snap();
    v.acq(2, "other", X, Wait::Until(Tick(30)))
        .reply(r_queued(X, 1));
    v.note("the delay ends at 23; the grant comes in the advance of a message at 24 (no tick)");
    v.at(24)
        .keep(2)
        .reply(r_kept(124))
        .events(vec![granted(2, "other", X, 6)]);
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
    v.acq(1, "q", Sh, Wait::None).token(1);
    v.acq(2, "q", X, Wait::Until(Tick(5))).reply(r_queued(X, 1));
    v.acq(3, "q", Sh, Wait::Until(Tick(20)))
        .reply(r_queued(Sh, 2));
    v.acq(4, "q", Sh, Wait::Forever).reply(r_queued(Sh, 3));
    v.snap();
    v.tick(4).events(vec![]);
    v.note("t5: the exclusive head times out; the readers behind it join the shared holder");
    v.tick(5).events(vec![
        timed_out(2, "q"),
        granted(3, "q", Sh, 2),
        granted(4, "q", Sh, 3),
    ]);
    v.note("a deadline at or before now behaves as a try-lock");
    v.acq(2, "q", X, Wait::Until(Tick(5))).reply(Reply::Busy);
    v.acq(2, "q", X, Wait::Until(Tick(3))).reply(Reply::Busy);
    v.acq(2, "q", X, Wait::Until(Tick(9))).reply(r_queued(X, 1));
    v.tick(9).events(vec![timed_out(2, "q")]);
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
    v.acq(1, "c", Sh, Wait::None).token(1);
    v.acq(2, "c", X, Wait::Forever).reply(r_queued(X, 1));
    v.acq(3, "c", Sh, Wait::Forever).reply(r_queued(Sh, 2));
    v.acq(4, "c", X, Wait::Forever).reply(r_queued(X, 3));
    v.at(1)
        .cancel(2, "c")
        .reply(Reply::Cancelled)
        .events(vec![granted(3, "c", Sh, 2)]);
    v.snap();
    v.cancel(4, "c").reply(Reply::Cancelled).events(vec![]);
    v.note("cancelling again: not queued");
    v.cancel(4, "c").err(103);
    v.acq(4, "c", Sh, Wait::None).token(3);
    v.snap();
    v
}

fn idempotent_retries() -> Scenario {
    let mut v = Scenario::new(
        "09_idempotent_retries",
        "request numbers: a repeat of the latest replays the recorded answer without \
         applying twice (an acquire's from its claim now); an older number is refused; a \
         number reused for another input is refused",
        VecConfig::default(),
    );
    v.open(10).open(10);
    v.acq_req(1, "r", X, Wait::None, Some(1))
        .reply(r_granted(X, 1));
    v.note("the client retries request 1 (lost reply): same grant, no new token");
    v.acq_req(1, "r", X, Wait::None, Some(1))
        .reply(r_granted(X, 1));
    v.acq_req(2, "r", X, Wait::Forever, Some(7))
        .reply(r_queued(X, 1));
    v.acq_req(2, "r", X, Wait::Forever, Some(7))
        .reply(r_queued(X, 1));
    v.snap();
    v.at(3).keep_req(1, Some(2)).reply(r_kept(13));
    v.note("a retried keep-alive at t4 replays the recorded deadline (13), it does not move it");
    v.at(4).keep_req(1, Some(2)).reply(r_kept(13));
    v.note("an older number is stale; the same number for another input is reused");
    v.keep_req(1, Some(1)).err(106);
    v.rel_req(1, "r", Some(2)).err(107);
    v.rel_req(1, "r", Some(3))
        .reply(r_released(1))
        .events(vec![granted(2, "r", X, 2)]);
    v.rel_req(1, "r", Some(3))
        .reply(r_released(1))
        .events(vec![]);
    v.note("the waiter's retry of its queued acquire answers from its claim now: it holds");
    v.acq_req(2, "r", X, Wait::Forever, Some(7))
        .reply(r_granted(X, 2));
    v.note("a try-lock's Busy is recorded and replayed");
    v.acq_req(1, "r", X, Wait::None, Some(4)).reply(Reply::Busy);
    v.acq_req(1, "r", X, Wait::None, Some(4)).reply(Reply::Busy);
    v.acq_req(1, "r", X, Wait::Forever, Some(5))
        .reply(r_queued(X, 1));
    v.cancel_req(1, "r", Some(6)).reply(Reply::Cancelled);
    v.cancel_req(1, "r", Some(6)).reply(Reply::Cancelled);
    v.snap();
    v.note("a retry after the hold ended answers HoldEnded with the recorded token");
    v.at(5).rel_req(2, "r", Some(8)).reply(r_released(2));
    v.acq_req(1, "r", X, Wait::None, Some(9))
        .reply(r_granted(X, 3));
    v.rel(1, "r").reply(r_released(3));
    v.acq_req(1, "r", X, Wait::None, Some(9))
        .reply(Reply::HoldEnded { token: Token(3) });
    v.note("a retry after the wait timed out (in the advance to t8) answers WaitEnded");
    v.acq(2, "r", X, Wait::None).token(4);
    v.acq_req(1, "r", X, Wait::Until(Tick(8)), Some(10))
        .reply(r_queued(X, 1));
    v.at(8)
        .acq_req(1, "r", X, Wait::Until(Tick(8)), Some(10))
        .events(vec![timed_out(1, "r")])
        .reply(Reply::WaitEnded);
    v.snap();
    v.note("close with a request number; its retry finds the session gone");
    v.close_req(1, Some(11)).reply(Reply::Closed);
    v.close_req(1, Some(11)).err(101);
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
    v.acq(1, "e", X, Wait::None).token(1);
    v.acq(2, "e", Sh, Wait::Forever).reply(r_queued(Sh, 1));
    v.at(1).snap();
    v.note("101 unknown session (never opened)");
    v.acq(9, "e", X, Wait::None).err(101);
    v.keep(9).err(101);
    v.close(9).err(101);
    v.note("102 not holder (a waiter, and a stranger)");
    v.rel(2, "e").err(102);
    v.rel(2, "nothing-here").err(102);
    v.note("103 not queued (the holder, and a stranger)");
    v.cancel(1, "e").err(103);
    v.cancel(2, "nothing-here").err(103);
    v.note("104 already queued");
    v.acq(2, "e", Sh, Wait::Forever).err(104);
    v.acq(2, "e", X, Wait::None).err(104);
    v.note("105 mode mismatch (re-acquire in the other mode)");
    v.acq(1, "e", Sh, Wait::None).err(105);
    v.note("106 stale request, 107 request reused");
    v.keep_req(1, Some(5)).reply(r_kept(11));
    v.keep_req(1, Some(4)).err(106);
    v.acq_req(1, "e", X, Wait::None, Some(5)).err(107);
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
    v.acq(1, "", X, Wait::None).err(201);
    v.acq(1, "123456789", X, Wait::None).err(202);
    v.rel(1, "").err(201);
    v.cancel(1, "123456789").err(202);
    v.acq(1, "12345678", X, Wait::None).token(1);
    v.note("203 bad ttl");
    v.open(0).err(203);
    v.note("301 capacity exceeded: sessions (2 open)");
    v.open(10).err(301);
    v.note("301 capacity exceeded: locks (2 entries)");
    v.acq(1, "l2", X, Wait::None).token(2);
    v.acq(2, "l3", X, Wait::None).err(301);
    v.note("301 capacity exceeded: claims (3)");
    v.acq(2, "l2", X, Wait::Forever).reply(r_queued(X, 1));
    v.acq(2, "12345678", X, Wait::Forever).err(301);
    v.snap();
    v.note("205 time went backwards");
    v.tick(5);
    v.at(4).tick(4).err(205).events(vec![]);
    v.at(4).keep(1).err(205);
    v.note("204 deadline overflow: a session whose now + ttl does not fit");
    v.at(5).close(2);
    v.open(u64::MAX - 4).err(204);
    v.open(u64::MAX - 6).reply(r_opened(3, u64::MAX - 1));
    v.tick(7);
    v.keep(3).err(204);
    v.snap();
    v
}

fn bad_frames() -> Scenario {
    let mut v = Scenario::new(
        "12_bad_frames",
        "501 bad frame: empty, unknown variant, truncated, trailing bytes, name over 64 \
         bytes, invalid UTF-8; nothing changes (not even time: a frame that does not \
         decode has no now)",
        VecConfig::default(),
    );
    v.open(10);
    v.snap();
    let good = input_frame(&Input::Acquire {
        now: Tick(0),
        session: s(1),
        lock: name("x"),
        mode: X,
        wait: Wait::None,
        request: None,
    });
    // [variant, now 0, session 1] [name length 1, 'x'] [mode, wait, request]
    let (prefix, suffix) = (&good[..3], &good[5..]);
    v.raw(&[]).err(501);
    v.raw(&[0x7f]).err(501);
    v.raw(&good[..good.len() - 1]).err(501);
    let mut trailing = good.clone();
    trailing.push(0);
    v.raw(&trailing).err(501);
    let mut long = prefix.to_vec();
    long.push(65);
    long.extend(std::iter::repeat_n(b'n', 65));
    long.extend_from_slice(suffix);
    v.raw(&long).err(501);
    let mut utf8 = prefix.to_vec();
    utf8.extend_from_slice(&[2, 0xc3, 0x28]);
    utf8.extend_from_slice(suffix);
    v.raw(&utf8).err(501);
    v.snap();
    v.note("the well-formed frame is accepted");
    v.raw(&good).reply(r_granted(X, 1));
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
    v.note("close 2 (waiting on q and p) at t1: its waits vanish, no event at all");
    v.at(1).close(2).reply(Reply::Closed).events(vec![]);
    v.close(1).reply(Reply::Closed).events(vec![
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
    v.acq(1, "k", X, Wait::None).token(1);
    v.at(1).acq(1, "k", X, Wait::Forever).reply(r_granted(X, 1));
    v.acq(1, "k", X, Wait::Until(Tick(3)))
        .reply(r_granted(X, 1));
    v.acq(2, "s", Sh, Wait::None).token(2);
    v.at(2).acq(2, "s", Sh, Wait::None).reply(r_granted(Sh, 2));
    v.snap();
    v
}

fn tick_order() -> Scenario {
    let mut v = Scenario::new(
        "15_tick_order",
        "inside one advance: expire sessions, time out waits, end lock-delays, then grant — \
         a waiter whose session expires at the same tick the lock frees is never granted \
         (the lease-expiry race etcd fixed in its lessor)",
        VecConfig::default(),
    );
    v.open(10).open(10).open(20);
    v.acq(1, "z", X, Wait::None).token(1);
    v.acq(2, "z", X, Wait::Forever);
    v.acq(3, "z", X, Wait::Forever);
    v.note("1 and 2 both expire at t10; 3 is live: only 3 may be granted");
    v.tick(10).events(vec![
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
    v.tick(20).events(vec![
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
    v.acq(1, "a", X, Wait::None).token(1);
    v.rel(1, "a");
    v.note("the lock table has one entry; 'a' was evicted, so 'b' fits");
    v.at(1).acq(1, "b", X, Wait::None).token(2);
    v.rel(1, "b");
    v.at(2).acq(1, "a", X, Wait::None).token(3);
    v.rel(1, "a");
    v.snap();
    v
}

fn messages_without_ticks() -> Scenario {
    let mut v = Scenario::new(
        "17_no_ticks",
        "a host that applies each message when it arrives, stamped with its clock, and does \
         not tick between them: a keep-alive counts from its own now, and expiries, \
         timeouts and grants happen in the advance of the next message",
        VecConfig::default(),
    );
    v.open(10).reply(r_opened(1, 10));
    v.note("A's keep-alives arrive at 3, 6 and 9; nobody ticks");
    for t in [3, 6, 9] {
        v.at(t).keep(1).reply(r_kept(t + 10)).events(vec![]);
    }
    v.note("the host's timer at 10: the session lives (until 19)");
    v.tick(10)
        .reply(Reply::Ticked { now: Tick(10) })
        .events(vec![]);
    v.acq(1, "l", X, Wait::None).token(1);
    v.note("B (ttl 5) and C (ttl 100) open at 10 and queue for A's lock");
    v.open(5).reply(r_opened(2, 15));
    v.acq(2, "l", X, Wait::Forever).reply(r_queued(X, 1));
    v.open(100).reply(r_opened(3, 110));
    v.acq(3, "l", X, Wait::Until(Tick(60)))
        .reply(r_queued(X, 2));
    v.at(14).keep(2).reply(r_kept(19));
    v.snap();
    v.note(
        "C's keep-alive arrives at 20, no tick since 10: its advance expires A and B (both \
         at 19, by id), drops B's wait and grants C",
    );
    v.at(20).keep(3).reply(r_kept(120)).events(vec![
        expired(1),
        released(1, "l", 1, Expired),
        expired(2),
        granted(3, "l", X, 2),
    ]);
    v.snap();
    v.note("D waits until 30; C releases at 35: the advance times D out first");
    v.open(100).reply(r_opened(4, 120));
    v.acq(4, "l", X, Wait::Until(Tick(30)))
        .reply(r_queued(X, 1));
    v.at(35)
        .rel(3, "l")
        .events(vec![timed_out(4, "l")])
        .reply(r_released(2));
    v.snap();
    v
}

fn refused_after_the_advance() -> Scenario {
    let mut v = Scenario::new(
        "18_refused_after_advance",
        "a refused input at a later now: the advance to its now stands (its events come \
         before the err line, the state is that of a tick to that now); an input earlier \
         than the service's time changes nothing at all",
        VecConfig::default(),
    );
    v.open(10).open(10);
    v.acq(1, "l", X, Wait::None).token(1);
    v.acq(2, "l", X, Wait::Forever).reply(r_queued(X, 1));
    v.at(5).keep(2).reply(r_kept(15));
    v.snap();
    v.note(
        "A's release arrives at 12 (no tick since 5): the advance expires A (at 10) and \
         grants B; then the release is refused, A being unknown",
    );
    v.at(12)
        .rel(1, "l")
        .events(vec![
            expired(1),
            released(1, "l", 1, Expired),
            granted(2, "l", X, 2),
        ])
        .err(101);
    v.snap();
    v.note("a keep-alive stamped 11, before the service's 12: refused, nothing changes");
    v.at(11).keep(2).err(205).events(vec![]);
    v.note(
        "at 20 B asks for an empty name: B expired at 15 in the advance, so the session \
         error wins over the name error",
    );
    v.at(20)
        .acq(2, "", X, Wait::None)
        .events(vec![expired(2), released(2, "l", 2, Expired)])
        .err(101);
    v.snap();
    v
}

/// Runs `sc` through the native core and renders its vector file, checking the scenario's
/// expectations, the invariant checker after every input, and that a refused input left
/// the service exactly as a tick to its `now` would have (docs/SPEC.md §5).
///
/// Errors: a message naming the failed expectation. Cost: the scenario's inputs, each with
/// a snapshot, plus a restore per refused input.
pub fn render(sc: &Scenario) -> Result<String, String> {
    let mut text = String::new();
    let _ = writeln!(text, "# {}: {}", sc.name, sc.about);
    let _ = writeln!(
        text,
        "# generated by `cargo run -p fencelock-tests --bin gen-vectors`; do not edit"
    );
    let _ = writeln!(text, "{}", sc.config.line());
    let mut svc = sc.config.service().map_err(|e| e.to_string())?;
    // The reference model (tests/src/model.rs, written from SPEC, sharing no code with the
    // service) answers every input too: a vector is written only where the two agree, so
    // the committed answers are not the service's word alone.
    let mut model = Model::from_config(svc.capacity(), svc.config());
    let mut last: Option<(Result<Reply, Error>, Vec<Output>)> = None;
    for (i, step) in sc.steps.iter().enumerate() {
        let at = |what: String| format!("{}: step {i}: {what}", sc.name);
        match step {
            Step::Comment(c) => {
                let _ = writeln!(text, "# {c}");
            }
            Step::In(frame) => {
                let decoded = Input::from_frame(frame);
                let before = svc.snapshot_vec();
                let ticked = decoded.as_ref().ok().map(|i| ticked_copy(&svc, i.now()));
                let mut events: Vec<Output> = Vec::new();
                let r = svc.handle_frame(frame, &mut events);
                if let Ok(input) = &decoded {
                    let m = model.apply(input);
                    if m.result != r || m.events != events {
                        return Err(at(format!(
                            "the reference model disagrees: it answers {:?} with events {:?}, \
                             the service {r:?} with events {events:?}",
                            m.result, m.events
                        )));
                    }
                }
                let _ = writeln!(text, "in {}", hex::encode(frame));
                for o in &events {
                    let _ = writeln!(text, "out {}", hex::encode(&output_frame(o)));
                }
                match &r {
                    Ok(reply) => {
                        let _ = writeln!(text, "reply {}", hex::encode(&reply_frame(reply)));
                    }
                    Err(e) => {
                        let _ = writeln!(text, "err {}", e.code());
                        let unchanged = match (e, ticked) {
                            (Error::TimeWentBackwards { .. } | Error::BadFrame, _) | (_, None) => {
                                events.is_empty() && svc.snapshot_vec() == before
                            }
                            (_, Some((copy, advance))) => {
                                events == advance && svc.snapshot_vec() == copy.snapshot_vec()
                            }
                        };
                        if !unchanged {
                            return Err(at(format!(
                                "refused input ({e}) changed more than the advance to its now"
                            )));
                        }
                    }
                }
                invariants::check_service(&svc).map_err(|e| at(format!("invariant: {e}")))?;
                last = Some((r, events));
            }
            Step::Snapshot => {
                let _ = writeln!(text, "snapshot {}", hex::encode(&svc.snapshot_vec()));
            }
            Step::Expect(x) => {
                let (result, events) = last
                    .as_ref()
                    .ok_or_else(|| at("expectation before any input".into()))?;
                let ok = match (x, result) {
                    (Expect::Events(want), _) => want == events,
                    (Expect::Reply(want), Ok(got)) => want == got,
                    (Expect::Err(code), Err(e)) => e.code() == *code,
                    (Expect::Token(t), Ok(got)) => got.token() == Some(Token(*t)),
                    _ => false,
                };
                if !ok {
                    return Err(at(format!(
                        "expected {x:?}, got {result:?} with events {events:?}"
                    )));
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
    /// `out` frames (events) compared.
    pub events: usize,
    /// `reply` frames compared.
    pub replies: usize,
    /// `err` codes compared.
    pub errors: usize,
    /// `snapshot` lines compared.
    pub snapshots: usize,
}

/// The native runner: replays a vector file's text through `handle_frame` and compares
/// every event frame, reply frame, error code and snapshot byte for byte. After each `in`
/// it requires its events as `out` lines, in order, then exactly one `reply` or `err`.
///
/// Errors: a message with the line number of the first mismatch. Cost: the file's inputs.
pub fn replay(text: &str) -> Result<ReplayStats, String> {
    let mut stats = ReplayStats::default();
    let mut svc: Option<LockService<VecStorage>> = None;
    // The events of the latest `in` not yet matched by `out` lines, and its result until
    // a `reply` or `err` line closes it.
    let mut pending: VecDeque<Vec<u8>> = VecDeque::new();
    let mut open: Option<Result<Vec<u8>, u32>> = None;
    let closed = |open: &Option<Result<Vec<u8>, u32>>, ln: usize| match open {
        Some(_) => Err(format!(
            "line {ln}: the previous `in` was not closed by a reply or err line"
        )),
        None => Ok(()),
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
                closed(&open, ln)?;
                let c = VecConfig::parse(rest).map_err(|e| format!("line {ln}: {e}"))?;
                svc = Some(c.service().map_err(|e| format!("line {ln}: {e}"))?);
            }
            "in" => {
                closed(&open, ln)?;
                let svc = svc.as_mut().ok_or(format!("line {ln}: in before config"))?;
                let frame = hex::decode(rest).map_err(|e| format!("line {ln}: {e}"))?;
                let mut events = Vec::new();
                let r = svc.handle_frame(&frame, &mut |o: Output| events.push(output_frame(&o)));
                open = Some(r.map(|reply| reply_frame(&reply)).map_err(|e| e.code()));
                pending = events.into();
                stats.inputs += 1;
            }
            "out" => {
                if open.is_none() {
                    return Err(format!("line {ln}: out line after the reply or err"));
                }
                let want = hex::decode(rest).map_err(|e| format!("line {ln}: {e}"))?;
                match pending.pop_front() {
                    Some(got) if got == want => stats.events += 1,
                    Some(got) => {
                        return Err(format!(
                            "line {ln}: event {} != expected {rest}",
                            hex::encode(&got)
                        ))
                    }
                    None => return Err(format!("line {ln}: expected event {rest}, got none")),
                }
            }
            "reply" | "err" => {
                let got = open
                    .take()
                    .ok_or(format!("line {ln}: {word} without an open `in`"))?;
                if let Some(f) = pending.front() {
                    return Err(format!("line {ln}: event {} not listed", hex::encode(f)));
                }
                if word == "reply" {
                    let want = hex::decode(rest).map_err(|e| format!("line {ln}: {e}"))?;
                    match got {
                        Ok(frame) if frame == want => stats.replies += 1,
                        Ok(frame) => {
                            return Err(format!(
                                "line {ln}: reply {} != expected {rest}",
                                hex::encode(&frame)
                            ))
                        }
                        Err(code) => {
                            return Err(format!("line {ln}: expected a reply, got err {code}"))
                        }
                    }
                } else {
                    let want: u32 = rest.parse().map_err(|_| format!("line {ln}: bad code"))?;
                    match got {
                        Err(code) if code == want => stats.errors += 1,
                        got => {
                            return Err(format!(
                                "line {ln}: expected err {want}, got {:?}",
                                got.map(|f| hex::encode(&f))
                            ))
                        }
                    }
                }
            }
            "snapshot" => {
                closed(&open, ln)?;
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
            "poll" => {
                closed(&open, ln)?;
                let svc = svc
                    .as_ref()
                    .ok_or(format!("line {ln}: poll before config"))?;
                let got = svc
                    .poll_timeout()
                    .map_or("none".to_string(), |t| t.0.to_string());
                if got != rest {
                    return Err(format!("line {ln}: poll_timeout is {got}, expected {rest}"));
                }
            }
            _ => return Err(format!("line {ln}: unknown directive {word:?}")),
        }
    }
    closed(&open, text.lines().count() + 1)?;
    Ok(stats)
}

/// The directory of the committed vector files (and `precedence.calls`). Cost: O(1).
pub fn vectors_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

fn semaphores_watches() -> Scenario {
    let mut v = Scenario::new(
        "19_semaphores_watches",
        "a semaphore of 3 permits granted in strict FIFO order (a large head is not \
         overtaken), an expiring holder returning its permits, limit and permit refusals, \
         labelled sessions, two watchers told every holder change in order, unwatch",
        VecConfig::default(),
    );
    let p = |count| Mode::Permits { count, limit: 3 };
    v.note("session 1 (label \"ops\") watches the semaphore \"pool\" before anyone holds it");
    v.open_labeled(100, "ops").reply(r_opened(1, 100));
    v.watch(1, "pool")
        .reply(Reply::Watching { holders: 0 })
        .events(vec![]);
    v.note("session 2 (label \"worker-a\", ttl 10) takes 2 of the 3 permits; the watcher is told");
    v.open_labeled(10, "worker-a").reply(r_opened(2, 10));
    v.open(100).open(100).open(100);
    v.acq(2, "pool", p(2), Wait::None)
        .reply(r_granted(p(2), 1))
        .events(vec![changed(
            1,
            "pool",
            (2, "worker-a"),
            p(2),
            1,
            Change::Granted,
        )]);
    v.note(
        "3 asks for 2 (does not fit: queued first); 4 asks for 1, which would fit, but \
            queues behind the large head; a try-lock of 1 is busy while anyone waits",
    );
    v.acq(3, "pool", p(2), Wait::Forever)
        .reply(r_queued(p(2), 1));
    v.acq(4, "pool", p(1), Wait::Forever)
        .reply(r_queued(p(1), 2));
    v.acq(5, "pool", p(1), Wait::None).reply(Reply::Busy);
    v.note(
        "refusals: another limit (108, the live limit 3), a plain mode on the semaphore \
            (108), permits on a plain lock (108, limit 0), 0 permits and more than the limit \
            (207), another count than the one held (105)",
    );
    v.acq(5, "pool", Mode::Permits { count: 1, limit: 4 }, Wait::None)
        .err(108);
    v.acq(5, "pool", X, Wait::None).err(108);
    v.acq(5, "plain", X, Wait::None).token(2);
    v.acq(3, "plain", Mode::Permits { count: 1, limit: 2 }, Wait::None)
        .err(108);
    v.acq(5, "pool", Mode::Permits { count: 0, limit: 3 }, Wait::None)
        .err(207);
    v.acq(5, "pool", Mode::Permits { count: 4, limit: 3 }, Wait::None)
        .err(207);
    v.acq(2, "pool", p(1), Wait::None).err(105);
    v.note("re-acquire with the same permits: the same grant, no event");
    v.acq(2, "pool", p(2), Wait::None)
        .reply(r_granted(p(2), 1))
        .events(vec![]);
    v.snap();
    v.note(
        "session 2 expires at 10: its 2 permits return, the head (2 permits) and then \
            the next (1) are granted, each grant followed by the watcher's event",
    );
    v.tick(10).events(vec![
        expired(2),
        released(2, "pool", 1, Expired),
        changed(1, "pool", (2, "worker-a"), p(2), 1, Change::Expired),
        granted(3, "pool", p(2), 3),
        changed(1, "pool", (3, ""), p(2), 3, Change::Granted),
        granted(4, "pool", p(1), 4),
        changed(1, "pool", (4, ""), p(1), 4, Change::Granted),
    ]);
    v.note(
        "a second watcher (label \"audit\") is told the current holders, in grant order; \
            watching twice is refused (110)",
    );
    v.open_labeled(100, "audit").reply(r_opened(6, 110));
    v.watch(6, "pool")
        .reply(Reply::Watching { holders: 2 })
        .events(vec![
            changed(6, "pool", (3, ""), p(2), 3, Change::Holding),
            changed(6, "pool", (4, ""), p(1), 4, Change::Holding),
        ]);
    v.watch(6, "pool").err(110);
    v.note(
        "5 queues for 2; 3 releases: both watchers are told (in the order they began \
            watching), then 5 is granted and both are told again",
    );
    v.acq(5, "pool", p(2), Wait::Forever)
        .reply(r_queued(p(2), 1));
    v.rel(3, "pool").reply(r_released(3)).events(vec![
        changed(1, "pool", (3, ""), p(2), 3, Change::Released),
        changed(6, "pool", (3, ""), p(2), 3, Change::Released),
        granted(5, "pool", p(2), 5),
        changed(1, "pool", (5, ""), p(2), 5, Change::Granted),
        changed(6, "pool", (5, ""), p(2), 5, Change::Granted),
    ]);
    v.snap();
    v.note("1 stops watching: nothing more reaches it; a second unwatch is refused (109)");
    v.unwatch(1, "pool").reply(Reply::Unwatched).events(vec![]);
    v.unwatch(1, "pool").err(109);
    v.close(4).reply(Reply::Closed).events(vec![
        released(4, "pool", 4, Closed),
        changed(6, "pool", (4, ""), p(1), 4, Change::Closed),
    ]);
    v.note("the watcher closes: its watch ends with it; the last holder's close tells nobody");
    v.close(6).reply(Reply::Closed).events(vec![]);
    v.close(5).reply(Reply::Closed).events(vec![
        released(5, "plain", 2, Closed),
        released(5, "pool", 5, Closed),
    ]);
    v.snap();
    v
}
