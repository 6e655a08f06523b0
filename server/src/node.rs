//! A fencelock node: openraft + the durable log + the core state machine + the leader's
//! clock. Transport-agnostic: [`Node::start`] takes any openraft network factory (TCP in
//! the binary, an in-memory network with faults in the tests), and
//! [`Node::handle_request`] serves one client request whatever carried it.
//!
//! # Time
//!
//! The service's logical time is milliseconds of *leader-active* time. A leader anchors
//! its clock `grace_ms` after it was elected and its first entry is applied: from then on
//! it stamps every proposal with `anchor + elapsed` (and proposes a bare `Tick` when the
//! core's `poll_timeout` comes due). Between the last entry of the old leader and the
//! anchor of the new one, logical time stands still: every session deadline is in effect
//! shifted by the failover time plus the grace period (etcd's lessor `Promote`,
//! Hazelcast's `shiftExpirationTimes`), so a failover never expires a session early and
//! clients get `grace_ms` to find the new leader and send keep-alives. Logical time never goes
//! backwards (it restarts from the applied state's `now`) and never runs faster than the
//! leader's monotonic clock, so a client's [`fencelock::SessionKeeper`] (counting from
//! the send time of its last acknowledged keep-alive) is always conservative.
//!
//! # Time without a quorum
//!
//! The clock does not run on the leader's wall clock but on its *credited* time
//! ([`crate::election::Elector::credited`]): time stands still from the moment the leader's
//! latest quorum acknowledgement is more than `election_min / 2` old until a quorum
//! acknowledges again, and that gap is never made up. A leader without a quorum within the
//! election timeout steps back (check-quorum: no stamps, no ticks, no client requests). So
//! time during which no quorum was reachable expires no session, while a stamp still never
//! runs ahead of the leader's monotonic clock. Credited time stays continuous when a
//! membership change within the term makes the leader a quorum by itself or no longer.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{Input, Label, LockName, SessionId, Tick, Wait};
use openraft::error::{ChangeMembershipError, CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::network::RaftNetworkFactory;
use openraft::ServerState;
use tokio::task::JoinHandle;

use crate::auth::{OpenKey, Principal, SessionSecret};
use crate::disk::DiskHealth;
use crate::election::{ElectionTiming, Elector, PreVoteNetwork};
use crate::log_store::LogStore;
use crate::ops::NodeStats;
use crate::proposer::Proposer;
use crate::protocol::{ClientError, Reply, Request, WaitSpec};
use crate::settings::CarrySettings;
use crate::state_machine::{AttachIn, PushSink, ServiceConfig, Shared, StateMachine};
use crate::types::{
    Cmd, CmdResult, NodeAddr, NodeId, Op, OpError, Raft, TypeConfig, STAMPED_AT_APPLY,
};

/// The longest [`Node::shutdown`] waits for openraft to stop.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Everything a node needs to start.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id (1, 2, 3…).
    pub id: NodeId,
    /// Directory for `raft.log` and `snapshot.bin`.
    pub dir: PathBuf,
    /// Table sizes and core settings (the same on every node).
    pub service: ServiceConfig,
    /// A new leader waits this long (ms) before its clock runs.
    pub grace_ms: u64,
    /// How often (ms) the leader checks whether a tick is due.
    pub tick_ms: u64,
    /// How long a write or a linearizable read may take before `Unavailable` (ms).
    pub request_timeout_ms: u64,
    /// openraft heartbeat interval (ms); openraft also times out an AppendEntries RPC after it.
    /// At least 1, and the heartbeats' spacing must fit `election_ms`
    /// ([`ElectionTiming::check`]).
    pub heartbeat_ms: u64,
    /// openraft election timeout range (ms); its minimum at least
    /// 2 × ⌊1.5 × `heartbeat_ms`⌋ + 2 ([`ElectionTiming::check`]).
    pub election_ms: (u64, u64),
    /// Build a snapshot (and purge the log before it) after this many applied entries.
    pub snapshot_logs: u64,
    /// Build a snapshot also once the entries after the last one weigh this much: one per
    /// entry plus one per op it carries ([`crate::log_store::weight`]; an op takes 160
    /// bytes in memory). An entry carries up to [`crate::types::MAX_CMD_OPS`] ops, so a
    /// bound by count alone let `snapshot_logs` full entries, and a quarter more kept after
    /// the snapshot, hold about 1 GB of memory. The node asks openraft for that snapshot
    /// itself, and for the purge [`NodeConfig::snapshot_keep_ops`] calls for.
    pub snapshot_ops: u64,
    /// Of the entries the last snapshot covers, keep at most this weight in the log (for
    /// followers a little behind; a leader keeps what its slowest follower lacks while
    /// that is under four times `snapshot_ops`); the count rule keeps `snapshot_logs / 4`
    /// entries, whatever they weigh.
    pub snapshot_keep_ops: u64,
    /// The longest session ttl (ms) a client may open; a longer one is refused with
    /// `ClientError::Limit { kind: "ttl_too_long" }` before anything is proposed. `None`:
    /// only the core's own bound.
    pub max_ttl_ms: Option<u64>,
    /// The most sessions one client connection may have open (opened through it and
    /// still open, plus opens in flight); one more is refused with
    /// `ClientError::Limit { kind: "too_many_sessions" }` before anything is proposed.
    /// `None`: no quota.
    pub max_sessions_per_conn: Option<usize>,
    /// The most sessions the clients of one bearer token may have open together (on any
    /// connection, through any node: counted from the replicated state, plus this node's
    /// opens in flight); one more is refused with `ClientError::Limit { kind:
    /// "too_many_token_sessions" }` before anything is proposed. A retried open whose
    /// key names a session still open is answered as before. Clients without a token (a
    /// node without tokens) are not counted. `None`: no quota.
    pub max_sessions_per_token: Option<usize>,
    /// Accept only loopback `host:port` addresses for a new member (true for plain-TCP
    /// nodes, which never dial anything else; `fencelock-node` sets false with TLS;
    /// the in-process test network names nodes `mem:N`).
    pub loopback_members: bool,
    /// How long (ms) the leader waits for a follower to take one snapshot chunk
    /// ([`crate::net::SNAPSHOT_CHUNK`], 3 MiB) — for the last, to install the snapshot —
    /// before it drops the connection and starts the transfer again (openraft's
    /// `install_snapshot_timeout`, whose own default, 200 ms, needs about 120 Mbit/s per
    /// chunk: a follower on a slower link never caught up). `fencelock-node` sets it to
    /// `--read-timeout-ms`, which is how long the follower itself gives a frame to arrive.
    pub snapshot_chunk_timeout_ms: u64,
    /// How long (ms) a backup or export page waits for another page's rebuild before it is
    /// answered `Unavailable` (the client asks again while its retries last): bounded, as a
    /// waiting page holds one of its connection's places, and below the CLI's 60 s wait
    /// for a page, so the CLI hears why.
    pub rebuild_turn_wait_ms: u64,
}

impl NodeConfig {
    /// Defaults for a loopback cluster: grace 1 s, tick check every 20 ms, heartbeats
    /// every 50 ms (openraft also uses this as the AppendEntries timeout), election timeout
    /// 300–600 ms, requests time out after 3 s, a snapshot every 20 000 entries or 262 144
    /// of weight (about 42 MB of ops) and at most 65 536 of what it covers kept (about
    /// 10 MB), members
    /// on loopback addresses only, 10 s for a snapshot chunk, 30 s for a backup or export
    /// page's rebuild turn.
    pub fn new(id: NodeId, dir: PathBuf) -> NodeConfig {
        NodeConfig {
            id,
            dir,
            service: ServiceConfig::default(),
            grace_ms: 1000,
            tick_ms: 20,
            request_timeout_ms: 3000,
            heartbeat_ms: 50,
            election_ms: (300, 600),
            snapshot_logs: 20_000,
            snapshot_ops: SNAPSHOT_OPS,
            snapshot_keep_ops: SNAPSHOT_KEEP_OPS,
            max_ttl_ms: None,
            max_sessions_per_conn: None,
            max_sessions_per_token: None,
            loopback_members: true,
            snapshot_chunk_timeout_ms: crate::net::READ_TIMEOUT.as_millis() as u64,
            rebuild_turn_wait_ms: 30_000,
        }
    }
}

#[derive(Default)]
struct ClockState {
    term: u64,
    since: Option<Instant>,
    /// (credited time of the term at the anchor, logical time at the anchor)
    anchor: Option<(Duration, u64)>,
    /// The latest stamp given in this term.
    last: u64,
}

/// The leader's logical clock (see the module docs): runs on the term's credited time.
pub struct LeaderClock {
    st: Mutex<ClockState>,
    elector: Arc<Elector>,
}

impl LeaderClock {
    fn new(elector: Arc<Elector>) -> LeaderClock {
        LeaderClock {
            st: Mutex::new(ClockState::default()),
            elector,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stamp for a proposal now: `Some` only on a leader anchored in the term it leads
    /// in now. It stands still while the leader has no fresh quorum acknowledgement.
    /// (Only the ticker resets the anchor, and it can be waiting on a write for a while: a
    /// node that lost its term and won a later one meanwhile must not stamp the new
    /// term's entries with the old term's time, skipping the new term's grace.)
    /// Cost: O(1).
    pub fn stamp(&self) -> Option<u64> {
        let mut c = self.lock();
        let (at, logical) = c.anchor?;
        let leading_in_its_term = self.elector.bound_raft().is_some_and(|r| {
            let metrics = r.metrics();
            let m = metrics.borrow();
            m.state == ServerState::Leader && m.current_term == c.term
        });
        if !leading_in_its_term {
            return None;
        }
        let credited = self.elector.credited(c.term).unwrap_or(at);
        let stamp = logical + credited.saturating_sub(at).as_millis() as u64;
        if stamp < c.last {
            // Credited time is continuous within a term (it carries on across membership
            // changes), so this should not happen; should it go back anyway, time stands
            // still at the latest stamp and runs on from there, never back.
            c.anchor = Some((credited, c.last));
            return Some(c.last);
        }
        c.last = stamp;
        Some(stamp)
    }
}

/// What a node's applied state says of a request naming a session ([`session_verdict`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Open, its opener's token's (or one any holder of the credential may use), under
    /// the credential presented.
    Owner,
    /// Open and the caller's token's, under another credential.
    NotOwner,
    /// Ended, or opened with another token: as good as unknown to this caller.
    Unknown,
    /// An id this state has not handed out (an open not applied here yet, or made up).
    NotHandedOut,
}

impl Verdict {
    /// The answer to a request naming `session` ([`Node::check_session`]). Cost: O(1).
    fn answer(self, session: SessionId) -> Result<(), ClientError> {
        match self {
            Verdict::Owner => Ok(()),
            Verdict::NotOwner => Err(ClientError::NotOwner { session: session.0 }),
            Verdict::Unknown | Verdict::NotHandedOut => Err(ClientError::Core(
                fencelock::Error::UnknownSession(session).into(),
            )),
        }
    }
}

/// What `g` says of a request naming `session`, made by `principal` with `secret`: a
/// session of another token is [`Verdict::Unknown`] whatever the credential, so the
/// answer tells that caller nothing (see [`Node::check_session`]). Cost: O(log sessions).
fn session_verdict(
    g: &crate::state_machine::SmState,
    session: SessionId,
    secret: &SessionSecret,
    principal: Principal,
) -> Verdict {
    if !g.svc.is_open(session) {
        return if session.0 < g.svc.next_session_id().0 {
            Verdict::Unknown
        } else {
            Verdict::NotHandedOut
        };
    }
    if !g.owners.answers_to(session, principal) {
        Verdict::Unknown
    } else if g.owners.is_owner(session, secret) {
        Verdict::Owner
    } else {
        Verdict::NotOwner
    }
}

/// What [`Node::attach_locked`] did.
enum Attach {
    /// The connection gets the session's pushes.
    Attached,
    /// The session is not open (here): nothing to attach.
    SessionGone,
    /// This node does not lead (by its metrics): nothing attached.
    NotLeading,
    /// The session has the most connections attached
    /// ([`crate::state_machine::MAX_ATTACHED_PER_SESSION`]): nothing attached.
    Full,
}

/// The refusal of a request whose connection cannot be attached to `session`: it has
/// [`crate::state_machine::MAX_ATTACHED_PER_SESSION`] other connections attached.
fn session_full(session: SessionId) -> ClientError {
    ClientError::Limit {
        kind: "session_connections".into(),
        message: format!(
            "session {} is attached from {} connections, the most: use one of them, or \
             close one",
            session.0,
            crate::state_machine::MAX_ATTACHED_PER_SESSION
        ),
    }
}

/// A running node.
pub struct Node {
    /// Its id.
    pub id: NodeId,
    /// The openraft handle.
    pub raft: Raft,
    /// The state machine's shared state (reads, push routing).
    pub shared: Arc<Shared>,
    /// The log store (for diagnostics).
    pub log: LogStore,
    /// Refusals and connections, for `/metrics`.
    pub stats: NodeStats,
    clock: Arc<LeaderClock>,
    elector: Arc<Elector>,
    config: NodeConfig,
    proposer: Proposer,
    ticker: JoinHandle<()>,
    proposer_task: JoinHandle<()>,
    prober: JoinHandle<()>,
    log_budget: JoinHandle<()>,
    elector_task: JoinHandle<()>,
    leadership: JoinHandle<()>,
    conn_ids: AtomicU64,
    /// Read barriers, one at a time and shared ([`Node::linearizable`]).
    reads: ReadBarriers,
    /// Backup and export pages rebuilt one at a time ([`Node::backup_page`],
    /// [`Node::export_page`]): each holds a copy of the state and its encoding (an export
    /// page also the log since the snapshot and the whole recording), so requests in flight
    /// do not multiply that.
    backups: tokio::sync::Semaphore,
    /// Per connection: the sessions opened through it (pruned of ended ones when
    /// checked) and opens in flight. An entry lives as long as its connection's guard.
    conn_sessions: Arc<Mutex<HashMap<u64, ConnSessions>>>,
    /// Per token principal: this node's opens in flight (not applied here yet), for the
    /// per-token session quota. An entry lives as long as its [`TokenOpen`] guards.
    token_opens: Arc<Mutex<TokenOpens>>,
    /// Held by an `add-learner` from its checks of the membership to its change: the
    /// membership it reads (the metrics') then shows every change an earlier one made, so
    /// two adds at once cannot both pass the member cap, or the same id at two addresses.
    adding_learner: tokio::sync::Mutex<()>,
}

/// The opens in flight under the per-token session quota: how many per principal, and
/// the keys they carry (a retry of one of them, by its key, is no new open). `count`
/// counts each open without a key, and each key once however many attempts carry it:
/// a key stays counted while any attempt with it is in flight, so a retry made while
/// its first attempt was in flight, which then goes unproposed, still holds the place.
#[derive(Default)]
struct TokenOpens {
    count: HashMap<Principal, usize>,
    keys: HashMap<(Principal, OpenKey), usize>,
}

/// An open in flight under the per-token session quota ([`Node::reserve_token_open`]):
/// counted for its principal (and its key known) until dropped — once its entry applied
/// or failed, or it was dropped unproposed ([`crate::proposer::Hold`]) — so a place is
/// never held for good.
struct TokenOpen {
    principal: Principal,
    key: Option<OpenKey>,
    opens: Arc<Mutex<TokenOpens>>,
}

impl Drop for TokenOpen {
    fn drop(&mut self) {
        let mut m = self.opens.lock().unwrap_or_else(|p| p.into_inner());
        let less = |n: &mut usize| {
            *n -= 1;
            *n == 0
        };
        // A key leaves the count with its last attempt in flight; an open without one
        // leaves it alone.
        let uncounted = match self.key {
            Some(k) => {
                let last = m.keys.get_mut(&(self.principal, k)).is_some_and(less);
                if last {
                    m.keys.remove(&(self.principal, k));
                }
                last
            }
            None => true,
        };
        if uncounted && m.count.get_mut(&self.principal).is_some_and(less) {
            m.count.remove(&self.principal);
        }
    }
}

/// Linearizable reads share their confirmation round: openraft 0.9 dials every voter
/// afresh for each `ensure_linearizable` (a connection and, with TLS, a handshake per
/// follower per read), so a client sending many reads at once made the leader open that
/// many connections to every follower and fill their per-address Raft slots. Rounds run
/// one at a time; a read waits for the one in progress and is answered by the first that
/// *started after it arrived* (an earlier one may not cover a write committed just before
/// the read): a burst of reads costs about two rounds, not one each.
///
/// How long a round lives and how long a read waits are separate: a round runs as a task
/// of its own, under the request timeout from its own start, whoever is still waiting
/// for it, and every read that arrived before it started takes its answer; a read waits
/// at most its request timeout from its arrival, the wait for the round in progress
/// included, and a read that gives up ends no round.
pub struct ReadBarriers {
    inner: Arc<BarrierState>,
}

struct BarrierState {
    /// Rounds started so far (the id of the latest).
    started: AtomicU64,
    /// Whether a round is in progress. Held while a round is started or recorded, so
    /// exactly one starts when several reads find none in progress.
    running: Mutex<bool>,
    /// The last finished round: its id (0: none yet) and its answer.
    last: tokio::sync::watch::Sender<(u64, Result<(), ClientError>)>,
}

impl Default for ReadBarriers {
    fn default() -> Self {
        ReadBarriers {
            inner: Arc::new(BarrierState {
                started: AtomicU64::new(0),
                running: Mutex::new(false),
                last: tokio::sync::watch::Sender::new((0, Ok(()))),
            }),
        }
    }
}

/// Records a round's end when its task ends, however it ends: with its answer, or, when
/// the task panicked or was dropped (the runtime shutting down) before it had one, with
/// `Unavailable`, so the reads waiting for it are answered and the next read can start a
/// round (a round left "in progress" for ever would fail every read after it).
struct RoundDone {
    st: Arc<BarrierState>,
    id: u64,
    answer: Option<Result<(), ClientError>>,
}

impl Drop for RoundDone {
    fn drop(&mut self) {
        let answer = self.answer.take().unwrap_or_else(|| {
            Err(ClientError::Unavailable(
                "read confirmation round failed".into(),
            ))
        });
        let mut running = self.st.running.lock().unwrap_or_else(|p| p.into_inner());
        // The round before it (nothing reads it any more).
        let _previous = self.st.last.send_replace((self.id, answer));
        *running = false;
    }
}

fn read_timed_out() -> ClientError {
    ClientError::Unavailable("read confirmation timed out".into())
}

impl ReadBarriers {
    /// The answer of a confirmation round that started after this call began, or
    /// `Unavailable` once `limit` has passed since the call. If no round is in progress
    /// when one is needed, this call starts `round` as a task of its own, under `limit`
    /// from its start (a round past it answers `Unavailable`), and every read that
    /// arrived before it started takes its answer. Cost: at most one round started by
    /// this call; its wait is bounded by `limit`.
    pub async fn share<F, R>(&self, limit: Duration, round: F) -> Result<(), ClientError>
    where
        F: FnOnce() -> R,
        R: std::future::Future<Output = Result<(), ClientError>> + Send + 'static,
    {
        let deadline = tokio::time::Instant::now() + limit;
        let st = &self.inner;
        let arrived = st.started.load(Ordering::SeqCst);
        let mut last = st.last.subscribe();
        let mut round = Some(round);
        let wait = async {
            loop {
                {
                    let seen = last.borrow_and_update();
                    if seen.0 > arrived {
                        return seen.1.clone();
                    }
                }
                self.start_if_idle(arrived, limit, &mut round);
                if last.changed().await.is_err() {
                    // Unreachable: the sender lives as long as `self`.
                    return Err(read_timed_out());
                }
            }
        };
        tokio::time::timeout_at(deadline, wait)
            .await
            .unwrap_or_else(|_| Err(read_timed_out()))
    }

    /// Starts `round` unless a round is in progress or one that started after `arrived`
    /// has finished (the caller has not seen it yet).
    fn start_if_idle<F, R>(&self, arrived: u64, limit: Duration, round: &mut Option<F>)
    where
        F: FnOnce() -> R,
        R: std::future::Future<Output = Result<(), ClientError>> + Send + 'static,
    {
        let st = &self.inner;
        let (id, round) = {
            let mut running = st.running.lock().unwrap_or_else(|p| p.into_inner());
            if *running || st.last.borrow().0 > arrived {
                return;
            }
            let Some(round) = round.take() else { return };
            *running = true;
            (st.started.fetch_add(1, Ordering::SeqCst) + 1, round)
        };
        // From here the round is in progress, and `done` ends it however this goes: the
        // lock is released first, as `done`'s drop takes it (if `round()` panics, or
        // `spawn` drops the task because the runtime is shutting down).
        let done = RoundDone {
            st: st.clone(),
            id,
            answer: None,
        };
        let fut = round();
        tokio::spawn(async move {
            let mut done = done;
            let answer = tokio::time::timeout(limit, fut)
                .await
                .unwrap_or_else(|_| Err(read_timed_out()));
            done.answer = Some(answer);
            drop(done); // records it
        });
    }

    /// Rounds started so far. Cost: O(1).
    pub fn started(&self) -> u64 {
        self.inner.started.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
struct ConnSessions {
    open: BTreeSet<u64>,
    pending: usize,
}

/// Held by a client connection while it is open ([`Node::connection`]): counted in
/// `/metrics`; its session quota is forgotten when dropped.
pub struct Connection {
    _counted: crate::ops::ConnGuard,
    conn: u64,
    sessions: Arc<Mutex<HashMap<u64, ConnSessions>>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.conn);
    }
}

impl Node {
    /// Opens the node's storage in `config.dir` and starts openraft over `network`, with
    /// elections driven by this node's pre-vote round and check-quorum (see
    /// [`crate::election`]; openraft's own election timer is off).
    ///
    /// Its service settings (`config.service`) go with every Raft request it sends, and
    /// requests from peers with other settings are refused ([`crate::settings`]).
    ///
    /// Errors: heartbeats too far apart for the election timeout, or a zero heartbeat
    /// (`InvalidInput`: [`ElectionTiming::check`]), and timing openraft refuses, both before
    /// the directory is opened; a directory made with other service settings (`InvalidInput`, naming each:
    /// [`crate::settings::check_dir`]) or with a damaged settings file; a settings file or
    /// a snapshot a later build wrote (`InvalidInput`, naming it; a log of a later build is
    /// `InvalidData`, as any log this build does not read); I/O errors opening the log or
    /// the snapshot; a damaged log, or a corrupt snapshot over a compacted log
    /// (`InvalidData`, naming the file: see [`StateMachine::open_checked`]); 64 corrupt
    /// snapshots kept aside already (`AlreadyExists`); openraft start-up errors. Every
    /// refusal before openraft's own start leaves the directory as it found it.
    pub async fn start<N>(config: NodeConfig, mut network: N) -> io::Result<Arc<Node>>
    where
        N: RaftNetworkFactory<TypeConfig> + PreVoteNetwork + CarrySettings,
    {
        // Timing refused (heartbeats too far apart for the leader's clock, or what openraft
        // refuses: an election timeout not above the heartbeat, say) is refused before the
        // directory is opened: opening it makes the log and may move a corrupt snapshot
        // aside, which a refused start must not have done.
        let timing = ElectionTiming {
            heartbeat_ms: config.heartbeat_ms,
            election_ms: config.election_ms,
        };
        timing
            .check()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let raft_config = openraft::Config {
            cluster_name: "fencelock".into(),
            heartbeat_interval: config.heartbeat_ms,
            election_timeout_min: config.election_ms.0,
            election_timeout_max: config.election_ms.1,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(config.snapshot_logs),
            // openraft's own purge after a snapshot is off (told to keep every entry, it
            // never purges): `run_log_budget` purges, by count as openraft did and by
            // weight, so that no two rules move the purge point.
            max_in_snapshot_log_to_keep: u64::MAX,
            // Every frame a node sends fits in any peer's frame limit (crate::net).
            snapshot_max_chunk_size: crate::net::SNAPSHOT_CHUNK,
            install_snapshot_timeout: config.snapshot_chunk_timeout_ms,
            max_payload_entries: crate::net::entries_per_append(),
            // Elections are started by the Elector after a won pre-vote.
            enable_elect: false,
            ..Default::default()
        };
        let raft_config = Arc::new(
            raft_config
                .validate()
                .map_err(|e| io::Error::other(e.to_string()))?,
        );
        let recorded = crate::settings::check_dir(&config.dir, &config.service)?;
        refuse_lost_log(&config.dir, None)?;
        let log = LogStore::open(&config.dir)?;
        refuse_lost_log(&config.dir, Some(&log))?;
        let (mut sm, shared) =
            StateMachine::open_checked(&config.dir, config.service, log.last_purged())?;
        sm.set_disk(log.disk());
        log.purge_after_snapshots(shared.snapshot_persisted());
        // Every check of the directory and the settings has passed: a log of version 2
        // or 3 becomes version 4, and a torn last write is cut, only now, so a start
        // refused above left the file as it found it. (Only openraft's own start, below,
        // can still fail after it.)
        log.finish_open()?;
        if !recorded {
            // The directory's state passed its checks with these settings: from now on it
            // is theirs.
            crate::settings::record(&config.dir, &config.service)?;
        }
        let elector = Elector::new(config.id, timing);
        elector.settings().set(config.service);
        network.carry(elector.settings().clone());
        let raft = Raft::new(
            config.id,
            raft_config,
            elector.network(network.clone()),
            log.clone(),
            sm,
        )
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
        elector.set_raft(raft.clone());
        elector.set_snapshot_limit(crate::state_machine::max_snapshot_bytes(&config.service));
        let elector_task = tokio::spawn(elector.clone().run(network));
        let clock = Arc::new(LeaderClock::new(elector.clone()));
        let (proposer, proposer_task) = Proposer::start(raft.clone(), log.clone(), clock.clone());
        let ticker = tokio::spawn(run_ticker(
            config.id,
            raft.clone(),
            shared.clone(),
            clock.clone(),
            config.clone(),
        ));
        let prober = tokio::spawn(run_prober(log.disk()));
        let log_budget = tokio::spawn(run_log_budget(raft.clone(), log.clone(), config.clone()));
        tokio::spawn(log_raft_changes(raft.clone()));
        shared.hub.set_node(config.id);
        let leadership = tokio::spawn(close_pushes_when_leadership_ends(
            config.id,
            raft.clone(),
            shared.clone(),
        ));
        Ok(Arc::new(Node {
            id: config.id,
            raft,
            shared,
            log,
            stats: NodeStats::default(),
            clock,
            elector,
            config,
            proposer,
            ticker,
            proposer_task,
            prober,
            log_budget,
            elector_task,
            leadership,
            conn_ids: AtomicU64::new(1),
            reads: ReadBarriers::default(),
            backups: tokio::sync::Semaphore::new(1),
            conn_sessions: Arc::default(),
            token_opens: Arc::default(),
            adding_learner: tokio::sync::Mutex::new(()),
        }))
    }

    /// Initializes a new cluster with these members (call on one node, once). Cost: one
    /// membership entry committed.
    ///
    /// Errors: openraft's (already initialized, …).
    pub async fn initialize(
        &self,
        members: std::collections::BTreeMap<NodeId, NodeAddr>,
    ) -> Result<(), String> {
        crate::membership::check_members(&members)?;
        self.raft
            .initialize(members)
            .await
            .map_err(|e| e.to_string())
    }

    /// Stops openraft and the ticker. The node's files stay; [`Node::start`] on the same
    /// directory resumes it. Gives openraft at most [`SHUTDOWN_WAIT`] (a Raft core whose
    /// write waits for disk space cannot stop sooner; the node's files stay consistent,
    /// since every write is checksummed). Errors: none (a failed shutdown is ignored).
    pub async fn shutdown(&self) {
        self.ticker.abort();
        self.proposer_task.abort();
        self.prober.abort();
        self.log_budget.abort();
        self.elector_task.abort();
        self.leadership.abort();
        if tokio::time::timeout(SHUTDOWN_WAIT, self.raft.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(node = self.id, "raft did not stop within {SHUTDOWN_WAIT:?} (a write waiting for disk space?); leaving it");
        }
    }

    /// This node's election driver: the inbound Raft RPCs of every transport go through
    /// it (pre-vote, stickiness, hearing from the leader). Cost: O(1).
    pub fn elector(&self) -> &Arc<Elector> {
        &self.elector
    }

    /// The leader's current stamp (`None` unless this node is an anchored leader).
    /// Cost: O(1).
    pub fn stamp(&self) -> Option<u64> {
        self.clock.stamp()
    }

    /// The term the leader clock is anchored in, and whether it is (for tests).
    #[cfg(test)]
    pub(crate) fn clock_term(&self) -> (u64, bool) {
        let c = self.clock.lock();
        (c.term, c.anchor.is_some())
    }

    /// Makes the leader clock believe it is anchored in `term` (for tests: the anchor of
    /// a term this node no longer leads in, as a ticker held up on a write leaves it).
    #[cfg(test)]
    pub(crate) fn set_clock_term(&self, term: u64) {
        self.clock.lock().term = term;
    }

    /// The node's configuration. Cost: O(1).
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The health of the data directory. Cost: O(1).
    pub fn disk(&self) -> Arc<DiskHealth> {
        self.log.disk()
    }

    /// This node's own view of the cluster and of itself ([`Request::Status`]): local
    /// state, no read barrier. Cost: one lock of the state machine and the readiness
    /// check (one small write and fsync in the data directory).
    pub async fn status(&self) -> crate::protocol::NodeStatus {
        let (ready, checks) = crate::ops::readiness(self).await;
        let m = self.raft.metrics().borrow().clone();
        let role = match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        let members = m.membership_config.membership();
        let node = |id: NodeId| members.get_node(&id).map(|n| (id, n.clone()));
        let (u, c) = {
            let s = self.shared.state();
            (s.svc.usage(), s.svc.capacity())
        };
        crate::protocol::NodeStatus {
            id: self.id,
            version: env!("CARGO_PKG_VERSION").to_string(),
            role: role.to_string(),
            term: m.current_term,
            leader: m.current_leader,
            committed: self.log.committed().map_or(0, |l| l.index),
            applied: m.last_applied.map_or(0, |l| l.index),
            last_log: m.last_log_index.unwrap_or(0),
            ready,
            checks: checks.lines().map(str::to_string).collect(),
            voters: members.voter_ids().filter_map(node).collect(),
            learners: members.learner_ids().filter_map(node).collect(),
            sessions: (u.sessions as u64, c.sessions as u64),
            locks: (u.locks as u64, c.locks as u64),
            claims: (u.claims as u64, c.claims as u64),
            connections: (
                self.stats.connections.get().max(0) as u64,
                self.stats.client_limit.load(Ordering::Relaxed),
            ),
        }
    }

    /// Requests waiting for the proposer. Cost: O(1).
    pub fn proposer_queue(&self) -> usize {
        self.proposer.queued()
    }

    /// Registers client connection `conn` (from [`Node::next_conn_id`]) until the guard
    /// is dropped: counted in `/metrics`, its session quota kept. Cost: O(1).
    pub fn connection(&self, conn: u64) -> Connection {
        Connection {
            _counted: self.stats.connection(),
            conn,
            sessions: self.conn_sessions.clone(),
        }
    }

    /// Reserves an open by `principal` with `key` under the per-token session quota:
    /// `Ok(None)` when nothing is counted (no quota, a client without a token, or a retry
    /// whose key names a session still open, which opens nothing). The count is the
    /// principal's open sessions in this node's applied state plus its opens in flight
    /// here; a leader that took over counts the opens its predecessor had in flight once
    /// it has applied them. Cost: O(log sessions + log principals).
    fn reserve_token_open(
        &self,
        principal: Principal,
        key: Option<OpenKey>,
    ) -> Result<Option<TokenOpen>, ClientError> {
        let Some(max) = self.config.max_sessions_per_token else {
            return Ok(None);
        };
        if !matches!(principal, Principal::Token(_)) || !self.leads() {
            return Ok(None); // not counted; a follower's proposal answers `NotLeader`
        }
        // The state is read under the lock of the opens in flight (never the other way
        // round): an open leaves the in-flight count only after it was applied here, so
        // every open is seen at least once, in flight or applied.
        let mut m = self.token_opens.lock().unwrap_or_else(|p| p.into_inner());
        let open = {
            let g = self.shared.state();
            let retry = key
                .and_then(|k| g.open_keys.get(principal, k))
                .is_some_and(|s| g.svc.is_open(s));
            if retry {
                return Ok(None);
            }
            g.owners.sessions_of(principal)
        };
        let keep = |m: &mut TokenOpens| {
            let first = match key {
                Some(k) => {
                    let n = m.keys.entry((principal, k)).or_default();
                    *n += 1;
                    *n == 1
                }
                None => true,
            };
            if first {
                *m.count.entry(principal).or_default() += 1;
            }
            TokenOpen {
                principal,
                key,
                opens: self.token_opens.clone(),
            }
        };
        // A retry of an open still in flight (its key, not applied yet: a first attempt
        // that timed out) opens nothing new once either applies: its key is counted
        // once, or the retry a client makes after a timeout would be refused while its
        // first attempt, which it can no longer use, takes the place. The key stays
        // counted while either is in flight: if the first goes unproposed (its caller
        // gone before the proposer took it) and the retry opens the session, the place
        // was held all along.
        if key.is_some_and(|k| m.keys.contains_key(&(principal, k))) {
            return Ok(Some(keep(&mut m)));
        }
        let pending = m.count.get(&principal).copied().unwrap_or(0);
        if open + pending >= max {
            return Err(ClientError::Limit {
                kind: "too_many_token_sessions".into(),
                message: format!(
                    "this token's clients already have {} sessions open (the maximum per \
                     token is {max})",
                    open + pending
                ),
            });
        }
        Ok(Some(keep(&mut m)))
    }

    /// Reserves an open for connection `conn` (whose pushes go to `sink`) under the
    /// session quota. Once the connection has stopped reading (`sink` detached), an open
    /// still in flight is counted only while its quota entry is there: the entry goes
    /// with its [`Connection`] (after the mark, under this lock), and one made after that
    /// would stay for good — what the connection opened then is answered to nobody
    /// anyway. Errors: `Limit` at the quota. Cost: O(sessions of that connection) (ended
    /// ones are pruned).
    fn reserve_open(&self, conn: u64, sink: &PushSink) -> Result<(), ClientError> {
        let Some(max) = self.config.max_sessions_per_conn else {
            return Ok(());
        };
        let mut m = self.conn_sessions.lock().unwrap_or_else(|p| p.into_inner());
        let e = if sink.detached() {
            match m.get_mut(&conn) {
                Some(e) => e,
                None => return Ok(()),
            }
        } else {
            m.entry(conn).or_default()
        };
        {
            let g = self.shared.state();
            e.open.retain(|s| g.svc.is_open(SessionId(*s)));
        }
        if e.open.len() + e.pending >= max {
            return Err(ClientError::Limit {
                kind: "too_many_sessions".into(),
                message: format!(
                    "this connection already has {} sessions open (the maximum per connection is {max})",
                    e.open.len() + e.pending
                ),
            });
        }
        e.pending += 1;
        Ok(())
    }

    /// Ends a reservation of [`Node::reserve_open`], with the session it opened.
    fn opened(&self, conn: u64, session: Option<SessionId>) {
        if self.config.max_sessions_per_conn.is_none() {
            return;
        }
        let mut m = self.conn_sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = m.get_mut(&conn) {
            e.pending = e.pending.saturating_sub(1);
            if let Some(s) = session {
                e.open.insert(s.0);
            }
        }
    }

    /// How many connections have an entry in the per-connection session quota
    /// (`max_sessions_per_conn`): at most the connections open and those ending now (a
    /// diagnostic; tests check that nothing outlives its connection). Cost: O(1).
    pub fn conn_quota_entries(&self) -> usize {
        self.conn_sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// A fresh connection id for [`crate::state_machine::Hub::attach`]. Cost: O(1).
    pub fn next_conn_id(&self) -> u64 {
        self.conn_ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Proposes `input` as a bare [`Op::Input`] (batched with concurrent requests by the
    /// [`Proposer`], stamped with the leader's clock) and waits until it is committed and
    /// applied. Only an input that names no session (a tick) is applied this way; a
    /// session's input needs its credential ([`Op::Owned`], through [`Node::propose_op`]).
    /// Cost: a share of one replicated write (a quorum's fsync).
    ///
    /// Errors: `NotLeader` (with the leader's client address when known), `Unavailable`
    /// at once while a write of this node waits for disk space ([`DiskHealth`]), or when it
    /// could not commit within the request timeout (it may still commit later: retry with the
    /// same request number). A refusal (the core's, or a missing credential) is in the
    /// result's `reply`.
    pub async fn propose(&self, input: Input) -> Result<CmdResult, ClientError> {
        self.propose_op(Op::Input(input)).await
    }

    /// [`Node::propose`] for any [`Op`] (an idempotent open). Errors and cost: as there.
    pub async fn propose_op(&self, op: Op) -> Result<CmdResult, ClientError> {
        self.propose_op_holding(op, None).await
    }

    /// [`Node::propose_op`], with `hold` kept until the entry's outcome is known, however
    /// soon the caller gives up ([`crate::proposer::Hold`]). Cost and errors: as there.
    async fn propose_op_holding(
        &self,
        op: Op,
        hold: Option<crate::proposer::Hold>,
    ) -> Result<CmdResult, ClientError> {
        if self.log.disk().is_stalled() {
            return Err(ClientError::Unavailable(format!(
                "the disk of {} is full: writes are refused until space returns",
                self.config.dir.display()
            )));
        }
        let mut back = self.elector.watch_stepped_back();
        let fut = self.proposer.propose_holding(op, hold);
        let limit = Duration::from_millis(self.config.request_timeout_ms);
        tokio::select! {
            r = tokio::time::timeout(limit, fut) => match r {
                Err(_) => Err(ClientError::Unavailable("commit timed out".into())),
                Ok(r) => r,
            },
            // Check-quorum: fail at once instead of at the request timeout.
            _ = back.wait_for(|b| *b) => Err(stepped_back()),
        }
    }

    /// Waits until this node may serve a linearizable read (it is the leader, a quorum
    /// confirmed it, and it applied everything committed before the read). Cost: one
    /// heartbeat round to a quorum.
    ///
    /// Concurrent reads share one confirmation round ([`ReadBarriers::share`]): a read
    /// waits for the round in progress, then takes the answer of a round that started
    /// after it arrived, or starts the next one.
    ///
    /// Errors: `NotLeader`; `Unavailable` when the request timeout passes (it counts from
    /// the call: the wait for the round in progress counts) or the round fails, but
    /// `NotLeader` instead if the node has stepped back meanwhile (the client looks for
    /// the new leader).
    pub async fn linearizable(&self) -> Result<(), ClientError> {
        let limit = Duration::from_millis(self.config.request_timeout_ms);
        let (raft, back) = (self.raft.clone(), self.elector.watch_stepped_back());
        let r = self
            .reads
            .share(limit, move || confirm_leadership(raft, back))
            .await;
        match r {
            Err(ClientError::Unavailable(_)) if *self.elector.watch_stepped_back().borrow() => {
                Err(stepped_back())
            }
            r => r,
        }
    }

    /// Read barriers started on this node so far (each one confirmation round to a
    /// quorum). Cost: O(1).
    pub fn read_barriers(&self) -> u64 {
        self.reads.started()
    }

    /// The state this node's `snapshot.bin` holds (`None`: none), read on a blocking
    /// thread, for an export or a backup.
    ///
    /// Errors: `Unavailable` when it cannot be read. Cost: O(snapshot size).
    async fn snapshot_state(&self) -> Result<Option<crate::state_machine::SmState>, ClientError> {
        let (dir, config) = (self.config.dir.clone(), self.shared.config);
        tokio::task::spawn_blocking(move || {
            crate::state_machine::read_snapshot_state(&dir, &config)
        })
        .await
        .map_err(|e| ClientError::Unavailable(e.to_string()))?
        .map_err(|e| ClientError::Unavailable(format!("cannot read the snapshot: {e}")))
    }

    /// One page of the recording of `window` ([`Request::Export`]): rebuilt from this
    /// node's snapshot (or the empty state, while the log holds every entry from the
    /// first) and its committed log, on a blocking thread. Call it on the leader after a
    /// read barrier, so the window can reach the last acknowledged write.
    ///
    /// Errors: `BadRequest` for a window outside what this node still holds (naming the
    /// log indices and logical times it can export) or an empty one; `Limit` for a
    /// recording past the format's limits (naming the last index that fits) or a value it
    /// cannot carry; `Unavailable` when the snapshot cannot be read or the log was
    /// compacted meanwhile (retry). Cost: reading the snapshot, then re-applying every
    /// entry from it to the window's end; O(recording) memory.
    async fn export_page(
        &self,
        window: crate::export::Window,
        skip: u64,
    ) -> Result<crate::protocol::ExportPage, ClientError> {
        use openraft::storage::RaftLogReader;
        // One rebuild at a time, backups included. Everything below is read after the wait.
        let _turn = self.rebuild_turn().await?;
        let applied = self.shared.state().last_applied.map_or(0, |l| l.index);
        let purged = self.log.last_purged().map(|l| l.index);
        let snap = self.snapshot_state().await?;
        let snap_index = snap
            .as_ref()
            .and_then(|s| s.last_applied)
            .map_or(0, |l| l.index);
        // While nothing was purged, the empty state and the whole log rebuild any window.
        let first = if purged.is_none() { 1 } else { snap_index + 1 };
        let mut log = self.log.clone();
        let time_of = |e: Option<&crate::types::Entry>| match e.map(|e| &e.payload) {
            Some(openraft::EntryPayload::Normal(c)) => c.now,
            _ => None,
        };
        let first_entry = log
            .try_get_log_entries(first..=first)
            .await
            .map_err(|e| ClientError::Unavailable(e.to_string()))?;
        let last_entry = log
            .try_get_log_entries(applied..=applied)
            .await
            .map_err(|e| ClientError::Unavailable(e.to_string()))?;
        let (first_time, last_time) = (time_of(first_entry.first()), time_of(last_entry.first()));
        let at = |t: Option<u64>| t.map(|t| format!(" (time {t})")).unwrap_or_default();
        let available = format!(
            "this leader can export log indices {first}{} to {applied}{}",
            at(first_time),
            at(last_time)
        );
        let from = window.from_index.unwrap_or(first).max(1);
        let to = window.to_index.unwrap_or(applied).min(applied);
        if from < first {
            return Err(ClientError::BadRequest(format!(
                "log index {from} was compacted away (its entries are only in a snapshot now): \
                 {available}"
            )));
        }
        if from > to || first > applied {
            return Err(ClientError::BadRequest(format!(
                "nothing to export from log index {from} to {to}: {available}"
            )));
        }
        let start_index = if purged.is_some() || (snap.is_some() && from > snap_index) {
            snap_index
        } else {
            0
        };
        let start = match snap {
            Some(s) if start_index == snap_index && start_index > 0 => s,
            _ => crate::state_machine::empty_state(&self.shared.config),
        };
        let entries = log
            .try_get_log_entries(start_index + 1..=to)
            .await
            .map_err(|e| ClientError::Unavailable(e.to_string()))?;
        let contiguous = entries.len() as u64 == to - start_index
            && entries
                .iter()
                .zip(start_index + 1..)
                .all(|(e, i)| e.log_id.index == i);
        if !contiguous {
            return Err(ClientError::Unavailable(
                "the log was compacted while exporting; retry".into(),
            ));
        }
        // A window by time alone that begins before what the log still holds.
        if let (Some(t), Some(_), None, Some(n)) =
            (window.from_time, purged, window.from_index, first_time)
        {
            if t < n {
                return Err(ClientError::BadRequest(format!(
                    "the history before logical time {n} was compacted away (it is only in a \
                     snapshot now): {available}"
                )));
            }
        }
        let resolved = crate::export::Window {
            from_index: Some(from),
            to_index: Some(to),
            ..window
        };
        let source = format!(
            "fencelock cluster, leader node {}, log indices {from} to {to}",
            self.id
        );
        let rec = tokio::task::spawn_blocking(move || {
            crate::export::build(start, entries, resolved, &source)
        })
        .await
        .map_err(|e| ClientError::Unavailable(e.to_string()))?
        .map_err(|e| match e {
            crate::export::ExportError::TooLarge(m) => ClientError::Limit {
                kind: "recording_too_large".into(),
                message: m,
            },
            crate::export::ExportError::Unrepresentable(m) => ClientError::Limit {
                kind: "not_recordable".into(),
                message: m,
            },
        })?;
        // A page stays well inside one client frame (a line is at most 16 KiB).
        const PAGE_BYTES: usize = 40 << 10;
        let total = rec.lines.len() as u64;
        let mut lines = Vec::new();
        let mut bytes = 0;
        for l in rec
            .lines
            .into_iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
        {
            if !lines.is_empty() && bytes + l.len() > PAGE_BYTES {
                break;
            }
            bytes += l.len() + 8;
            lines.push(l);
        }
        Ok(crate::protocol::ExportPage {
            lines,
            total,
            from_index: from,
            to_index: to,
            span: rec.span,
            node: self.id,
        })
    }

    /// The turn of one backup or export page ([`Node::backup_page`],
    /// [`Node::export_page`]), waited for at most [`NodeConfig::rebuild_turn_wait_ms`]: a
    /// page waiting for its turn holds one of its connection's places, so it may not wait
    /// without end behind others' long rebuilds (waiting pages take the turn in order).
    ///
    /// Errors: `Unavailable` (retry) when the turn did not come within the wait.
    /// Cost: O(1) besides the wait.
    async fn rebuild_turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, ClientError> {
        let wait = Duration::from_millis(self.config.rebuild_turn_wait_ms);
        match tokio::time::timeout(wait, self.backups.acquire()).await {
            Ok(Ok(turn)) => Ok(turn),
            // (Closed never: the semaphore lives as long as the node.)
            Ok(Err(e)) => Err(ClientError::Unavailable(e.to_string())),
            Err(_) => Err(ClientError::Unavailable(format!(
                "another backup or export page has been rebuilding on this node for over {} ms: retry",
                wait.as_millis()
            ))),
        }
    }

    /// Takes the rebuild turn and keeps it until the permit is dropped (for tests: a
    /// rebuild that takes long).
    #[cfg(test)]
    pub(crate) async fn hold_rebuild_turn(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.backups.acquire().await.unwrap()
    }

    /// One page of the backup at log index `index` (`None`: the last applied one)
    /// ([`Request::Backup`]): the state at that index rebuilt from this node's snapshot (or
    /// the empty state, while the log holds every entry from the first) and its committed
    /// log, on a blocking thread, encoded as `GET /snapshot` encodes the live state — the
    /// same state, the same bytes, on any node — so pages asked one by one fit together
    /// whatever was written, and whoever led, in between. Call it on the leader after a
    /// read barrier.
    ///
    /// Errors: `BadRequest` for an index not applied yet (or nothing applied at all: a
    /// backup needs a state), one compacted into a later snapshot (start the backup
    /// again), or an offset past the end; `Unavailable` when the snapshot cannot be read
    /// or the log was compacted meanwhile (retry). Cost: reading the snapshot, then
    /// re-applying every entry from it to `index`; O(backup) memory, one page's rebuild at
    /// a time on a node (the others wait their turn).
    async fn backup_page(
        &self,
        index: Option<u64>,
        offset: u64,
        max_bytes: u32,
    ) -> Result<crate::protocol::BackupPage, ClientError> {
        use openraft::storage::RaftLogReader;
        let applied = self.shared.state().last_applied.map_or(0, |l| l.index);
        let index = index.unwrap_or(applied);
        if index == 0 || index > applied {
            return Err(ClientError::BadRequest(format!(
                "no backup at log index {index}: this leader has applied log indices 1 to {applied}"
            )));
        }
        let _turn = self.rebuild_turn().await?;
        // Read after the wait: a purge may have come meanwhile.
        let purged = self.log.last_purged().map(|l| l.index);
        let snap = self.snapshot_state().await?;
        let config = self.shared.config;
        let snap_index = snap.as_ref().and_then(|s| s.last_applied).map(|l| l.index);
        // From the snapshot when it is at or before the index; else from the empty state,
        // while nothing was purged.
        // (The log's first entry, the initial membership, is at index 0.)
        let (start, from) = match snap {
            Some(s) if snap_index.is_some_and(|i| i <= index) => {
                (s, snap_index.unwrap_or(0) + 1)
            }
            _ if purged.is_none() => (crate::state_machine::empty_state(&config), 0),
            _ => {
                return Err(ClientError::BadRequest(format!(
                    "log index {index} was compacted into a later snapshot (at {}): start the backup again",
                    snap_index.unwrap_or(0)
                )))
            }
        };
        let mut log = self.log.clone();
        let entries = log
            .try_get_log_entries(from..=index)
            .await
            .map_err(|e| ClientError::Unavailable(e.to_string()))?;
        // (From the empty state: from index 0, or 1 on a log that holds no entry 0. From a
        // snapshot at the index itself: nothing to replay.)
        let first = entries.first().map_or(from, |e| e.log_id.index);
        let contiguous = (first == from || (from == 0 && first == 1))
            && entries
                .last()
                .map_or(from == index + 1, |e| e.log_id.index == index)
            && entries
                .iter()
                .zip(first..)
                .all(|(e, i)| e.log_id.index == i);
        if !contiguous {
            return Err(ClientError::Unavailable(
                "the log was compacted while taking the backup; retry".into(),
            ));
        }
        let (bytes, at) = tokio::task::spawn_blocking(move || {
            let mut g = start;
            crate::state_machine::replay_entries(&mut g, entries);
            crate::state_machine::backup_of(&g)
        })
        .await
        .map_err(|e| ClientError::Unavailable(e.to_string()))?
        .map_err(|e| ClientError::Unavailable(format!("cannot encode the backup: {e}")))?;
        if at.map(|l| l.index) != Some(index) {
            return Err(ClientError::Unavailable(format!(
                "the state rebuilt for log index {index} was at {at:?}; retry"
            )));
        }
        let total = bytes.len() as u64;
        if offset > total {
            return Err(ClientError::BadRequest(format!(
                "offset {offset} is past the end of the backup at log index {index} ({total} bytes)"
            )));
        }
        let page = match max_bytes {
            0 => crate::protocol::BACKUP_PAGE,
            n => n.min(crate::protocol::BACKUP_PAGE),
        };
        let end = total.min(offset + page as u64);
        Ok(crate::protocol::BackupPage {
            bytes: bytes[offset as usize..end as usize].to_vec(),
            total,
            index,
            node: self.id,
        })
    }

    /// Routes `session`'s pushes to `conn`, with the state lock held (`g`): the session
    /// cannot end in between and leave a registration behind that would keep the
    /// connection from ever being closed as idle. Only on the leader: a follower never
    /// pushes. Before the session's write (`after_write` false), only for entries after
    /// the log's current end: a new leader still applying entries of earlier terms
    /// applies entries whose outputs the client may already have seen, and pushing them
    /// again could answer a later acquire with an old grant (a leader holds every
    /// committed entry, so what comes after its log's end is new). After the write, for
    /// every entry applied from now on (everything up to the write's entry is applied).
    /// Cost: a metrics read and [`crate::state_machine::Hub::attach_from`].
    fn attach_locked(
        &self,
        g: &crate::state_machine::SmState,
        session: SessionId,
        (conn, sink): (u64, &PushSink),
        after_write: bool,
    ) -> Attach {
        if !g.svc.is_open(session) {
            return Attach::SessionGone;
        }
        // Read before the metrics: a leadership change seen after them (its connections
        // closed, [`close_pushes_when_leadership_ends`]) makes the attach below a no-op.
        let generation = self.shared.hub.generation();
        let from = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.state == ServerState::Leader && m.current_leader == Some(self.id))
                .then(|| m.last_log_index.map_or(0, |i| i + 1))
        };
        let Some(from) = from else {
            return Attach::NotLeading;
        };
        let from = if after_write { 0 } else { from };
        match self
            .shared
            .hub
            .attach_in(generation, session, conn, sink.clone(), from)
        {
            AttachIn::Attached => Attach::Attached,
            AttachIn::Full => Attach::Full,
            AttachIn::Stale => Attach::NotLeading,
        }
    }

    /// [`Node::attach_locked`] before the session's write: `Err` when this node does not
    /// lead (yet), so the request is refused before anything is written instead of being
    /// applied with nobody attached to receive its pushes (the client retries).
    fn attach_before_write(
        &self,
        session: SessionId,
        to: (u64, &PushSink),
    ) -> Result<(), ClientError> {
        let a = self.attach_locked(&self.shared.state(), session, to, false);
        match a {
            Attach::NotLeading => Err(self.not_leading()),
            Attach::Full => Err(session_full(session)),
            // Ended since it was checked: the write is refused by the core.
            Attach::Attached | Attach::SessionGone => Ok(()),
        }
    }

    /// Checks a request naming `session` as [`Node::check_session`] does, then attaches
    /// `to` to the session before its write, so every output the write or a later entry
    /// causes reaches it. Errors: as [`Node::check_session`], and `NotLeader` when this
    /// node no longer leads. Cost: as [`Node::check_session`].
    async fn attach_early(
        &self,
        session: SessionId,
        secret: &SessionSecret,
        principal: Principal,
        to: (u64, &PushSink),
    ) -> Result<(), ClientError> {
        self.check_session(session, secret, principal).await?;
        self.attach_before_write(session, to)
    }

    /// [`Node::attach_locked`] after the session's write was applied: `Err` when this
    /// node stopped leading meanwhile (the write is applied but its pushes would not
    /// come here: the client repeats the request — a numbered one is answered with the
    /// core's replay — on the new leader, which attaches it). A session that ended
    /// meanwhile is left unattached.
    fn attach_after_write(
        &self,
        session: SessionId,
        to: (u64, &PushSink),
    ) -> Result<(), ClientError> {
        let a = self.attach_locked(&self.shared.state(), session, to, true);
        match a {
            Attach::NotLeading => Err(ClientError::Unavailable(
                "this node stopped leading before the session could be attached; retry".into(),
            )),
            Attach::Full => Err(session_full(session)),
            Attach::Attached | Attach::SessionGone => Ok(()),
        }
    }

    /// True while this node's metrics say it leads. The checks it makes before proposing
    /// (a credential, the per-token quota) are made only then: a follower's applied state
    /// may lag, and its answer is `NotLeader`, which sends the client to the leader.
    /// Cost: O(1).
    fn leads(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.id)
    }

    /// What a node that does not lead answers a request that must attach a connection:
    /// the leader it knows, if another.
    fn not_leading(&self) -> ClientError {
        let leader = self.raft.metrics().borrow().current_leader;
        let leader = leader.filter(|l| *l != self.id);
        ClientError::NotLeader {
            leader: client_addr(&self.raft, leader),
        }
    }

    fn name(lock: &str) -> Result<LockName, ClientError> {
        LockName::new(lock).map_err(|e| ClientError::BadRequest(e.to_string()))
    }

    /// Proposes a session's input, made by `principal` with the credential it presented,
    /// once [`Node::check_session`] let it through.
    async fn write(
        &self,
        input: Input,
        secret: SessionSecret,
        principal: Principal,
    ) -> Result<Reply, ClientError> {
        if let Some(session) = input.session() {
            self.check_session(session, &secret, principal).await?;
        }
        self.write_op(Op::Owned { input, secret }).await
    }

    /// The leader's check of a request naming `session`, made by `principal` with
    /// `secret`, before anything is proposed or attached. Refused:
    /// - `Core(unknown_session)` — the core's own answer — when the session is not open
    ///   here (ended: its id is below the next one this state would hand out, and ids are
    ///   never reused; or not handed out, still so after a read barrier has applied
    ///   everything committed), and when it was opened with another token
    ///   ([`Owners::answers_to`](crate::auth::Owners::answers_to)): a session answers only
    ///   to the token that opened it, and its writes tell a caller nothing about another
    ///   token's sessions, not even whether one is open (reads are another matter: a
    ///   token with a grant on every lock reads any session's state, as it reads every
    ///   lock's holders with their sessions and labels: [`crate::auth::Role::Read`]);
    /// - `NotOwner` when it is open, the caller's token's, under another credential.
    ///
    /// So a write is proposed only for a session open here under that credential and
    /// token, and takes no place in the log otherwise, where a flood of refused writes
    /// would delay every other client's. By the time the entry applies the session is
    /// still open under both (neither ever changes and ids are never reused) or ended,
    /// and the state machine checks the credential again. Only the leader proposes:
    /// elsewhere the answer is `NotLeader`. Cost: O(log sessions); a read barrier for an
    /// id not handed out in this node's applied state.
    async fn check_session(
        &self,
        session: SessionId,
        secret: &SessionSecret,
        principal: Principal,
    ) -> Result<(), ClientError> {
        if !self.leads() {
            return Err(self.not_leading());
        }
        let mut verdict = session_verdict(&self.shared.state(), session, secret, principal);
        if verdict == Verdict::NotHandedOut {
            // An open this node has not applied yet (it leads since): the barrier applies
            // everything committed, and a client only knows ids of committed opens.
            self.linearizable().await?;
            verdict = session_verdict(&self.shared.state(), session, secret, principal);
        }
        verdict.answer(session)
    }

    async fn write_op(&self, op: Op) -> Result<Reply, ClientError> {
        self.write_op_holding(op, None).await
    }

    /// [`Node::write_op`], with `hold` kept until the entry's outcome is known
    /// ([`crate::proposer::Hold`]).
    async fn write_op_holding(
        &self,
        op: Op,
        hold: Option<crate::proposer::Hold>,
    ) -> Result<Reply, ClientError> {
        let r = self.propose_op_holding(op, hold).await?;
        match (r.reply, r.secret) {
            (Err(OpError::Core(e)), _) => Err(ClientError::Core(e)),
            (Err(OpError::NotOwner { session }), _) => Err(ClientError::NotOwner { session }),
            (Err(e @ OpError::NeedsCredential), _) => Err(ClientError::BadRequest(e.to_string())),
            (Ok(reply), Some(secret)) => Ok(Reply::Opened {
                reply,
                secret,
                now: r.now,
                index: r.index,
            }),
            (Ok(reply), None) => Ok(Reply::Done {
                reply,
                now: r.now,
                index: r.index,
            }),
        }
    }

    /// Serves one client request of a node without tokens, whose clients are one
    /// principal ([`Principal::Anyone`]): [`Node::handle_request_as`]. Cost and errors:
    /// as there.
    pub async fn handle_request(
        &self,
        req: Request,
        conn: u64,
        sink: &PushSink,
    ) -> Result<Reply, ClientError> {
        self.handle_request_as(req, conn, sink, Principal::Anyone)
            .await
    }

    /// Serves one client request from `principal` (whom an open's idempotency key is
    /// scoped to: see [`Principal`]). `conn` and `sink` identify the connection that
    /// pushes for the sessions it opens or attaches to. Cost: one replicated write for
    /// inputs, one quorum confirmation for reads and attach.
    ///
    /// Errors: see [`ClientError`]. Every error is counted by kind for `/metrics`.
    pub async fn handle_request_as(
        &self,
        req: Request,
        conn: u64,
        sink: &PushSink,
        principal: Principal,
    ) -> Result<Reply, ClientError> {
        let r = self.serve(req, conn, sink, principal).await;
        if let Err(e) = &r {
            self.stats.refused(e);
        }
        r
    }

    /// Opens a session (labelled when `label` is given) for `principal` on connection
    /// `conn`, whose pushes then go to `sink`: [`Request::Open`] and
    /// [`Request::OpenLabeled`], as an [`Op::OpenCounted`] (the key scoped to `principal`, the
    /// session counted as its).
    async fn open(
        &self,
        ttl_ms: u64,
        key: Option<OpenKey>,
        label: Option<Label>,
        (conn, sink): (u64, &PushSink),
        principal: Principal,
    ) -> Result<Reply, ClientError> {
        if let Some(max) = self.config.max_ttl_ms.filter(|m| ttl_ms > *m) {
            return Err(ClientError::Limit {
                kind: "ttl_too_long".into(),
                message: format!(
                    "a session ttl of {ttl_ms} ms is above this cluster's maximum of {max} ms"
                ),
            });
        }
        let secret =
            SessionSecret::random().map_err(|e| ClientError::Unavailable(e.to_string()))?;
        let op = Op::OpenCounted {
            ttl: ttl_ms,
            key,
            secret,
            label,
            principal,
        };
        // The token's open in flight is counted until its entry applied or failed, not only
        // while this call waits: an open given up at the request timeout may still commit,
        // and the token's clients would pass the quota again meanwhile.
        let token = self.reserve_token_open(principal, key)?;
        self.reserve_open(conn, sink)?;
        let hold = token.map(|t| Box::new(t) as crate::proposer::Hold);
        let reply = self.write_op_holding(op, hold).await;
        let session = match &reply {
            Ok(Reply::Opened { reply: r, .. }) => r.opened(),
            _ => None,
        };
        self.opened(conn, session);
        if let Some(session) = session {
            // The session is open, and its credential is in this reply only: it is answered
            // even when this node stopped leading before it could attach the connection
            // (a keyless open refused here, retried, would open a second session and
            // leave this one unusable until its ttl). The client attaches it on the next
            // leader, as it attaches every session after a leader change.
            if let Err(e) = self.attach_after_write(session, (conn, sink)) {
                tracing::debug!("session {} opened but not attached: {e}", session.0);
            }
        }
        reply
    }

    async fn serve(
        &self,
        req: Request,
        conn: u64,
        sink: &PushSink,
        principal: Principal,
    ) -> Result<Reply, ClientError> {
        // Check-quorum: a leader that stepped back serves nothing until it leads again —
        // but its own view (`Status`, answered by any node from its local state), which is
        // what an operator asks for in just such a partition.
        if self.elector.stepped_back() && !matches!(req, Request::Status) {
            return Err(stepped_back());
        }
        recordable(&req)?;
        match req {
            Request::Open { ttl_ms, key } => {
                self.open(ttl_ms, key, None, (conn, sink), principal).await
            }
            Request::OpenLabeled { ttl_ms, key, label } => {
                let label = Label::new(&label).map_err(|e| ClientError::Core(e.into()))?;
                self.open(ttl_ms, key, Some(label), (conn, sink), principal)
                    .await
            }
            Request::Watch {
                session,
                secret,
                lock,
                request,
            } => {
                let lock = crate::protocol::input_name(&lock)?;
                // The watch's first events (one per current holder) are pushed by the very
                // apply that answers it: the connection must be attached before the write.
                let sid = SessionId(session);
                self.attach_early(sid, &secret, principal, (conn, sink))
                    .await?;
                let input = Input::Watch {
                    now: STAMPED_AT_APPLY,
                    session: sid,
                    lock,
                    request,
                };
                self.write_op(Op::Owned { input, secret }).await
            }
            Request::Unwatch {
                session,
                secret,
                lock,
                request,
            } => {
                let lock = crate::protocol::input_name(&lock)?;
                let input = Input::Unwatch {
                    now: STAMPED_AT_APPLY,
                    session: SessionId(session),
                    lock,
                    request,
                };
                self.write(input, secret, principal).await
            }
            Request::Permits { lock } => {
                Self::name(&lock)?;
                self.linearizable().await?;
                let g = self.shared.state();
                Ok(Reply::Permits(g.svc.permits(&lock)))
            }
            Request::KeepAlive { session, secret } => {
                // A keep-alive also routes the session's pushes to this connection: after a
                // reconnect the client's first keep-alive re-attaches it. Attached before
                // the write, so nothing applied in between is missed.
                let sid = SessionId(session);
                self.attach_early(sid, &secret, principal, (conn, sink))
                    .await?;
                let input = Input::KeepAlive {
                    now: STAMPED_AT_APPLY,
                    session: sid,
                    request: None,
                };
                self.write_op(Op::Owned { input, secret }).await
            }
            Request::Close {
                session,
                secret,
                request,
            } => {
                let input = Input::CloseSession {
                    now: STAMPED_AT_APPLY,
                    session: SessionId(session),
                    request,
                };
                self.write(input, secret, principal).await
            }
            Request::Acquire {
                session,
                secret,
                lock,
                mode,
                wait,
                request,
            } => {
                let lock = crate::protocol::input_name(&lock)?;
                // Attached before the write, so that a grant applied right after the
                // acquire's entry is not missed.
                let sid = SessionId(session);
                self.attach_early(sid, &secret, principal, (conn, sink))
                    .await?;
                // The deadline is fixed after the attach, which may wait for a read
                // barrier: a wait of a few ms counted from before it could end before the
                // acquire is even written.
                let wait = match wait {
                    WaitSpec::None => Wait::None,
                    WaitSpec::Forever => Wait::Forever,
                    WaitSpec::ForMs(ms) => {
                        let now = match self.clock.stamp() {
                            Some(now) => now,
                            None => {
                                // No stamp: a new leader not anchored yet, whose entries
                                // apply at the time its applied state reaches. That state
                                // may lag behind committed entries stamped later by the
                                // leader before, which would shorten the wait by the lag:
                                // once a barrier has applied them, it is the acquire's time.
                                self.linearizable().await?;
                                self.clock
                                    .stamp()
                                    .unwrap_or_else(|| self.shared.state().svc.now().0)
                            }
                        };
                        // No later than a recording holds (~285 000 years: never).
                        Wait::Until(Tick(now.saturating_add(ms).min(MAX_NUMBER)))
                    }
                };
                let input = Input::Acquire {
                    now: STAMPED_AT_APPLY,
                    session: sid,
                    lock,
                    mode,
                    wait,
                    request,
                };
                self.write_op(Op::Owned { input, secret }).await
            }
            Request::Release {
                session,
                secret,
                lock,
                request,
            } => {
                let lock = crate::protocol::input_name(&lock)?;
                let input = Input::Release {
                    now: STAMPED_AT_APPLY,
                    session: SessionId(session),
                    lock,
                    request,
                };
                self.write(input, secret, principal).await
            }
            Request::Cancel {
                session,
                secret,
                lock,
                request,
            } => {
                let lock = crate::protocol::input_name(&lock)?;
                let input = Input::Cancel {
                    now: STAMPED_AT_APPLY,
                    session: SessionId(session),
                    lock,
                    request,
                };
                self.write(input, secret, principal).await
            }
            Request::Attach { session, secret } => {
                self.linearizable().await?;
                let sid = SessionId(session);
                let attached = {
                    // Checked and attached under the state lock: the session cannot end
                    // in between and leave a registration behind. After the barrier an id
                    // not handed out here is not one (`Node::check_session`).
                    let g = self.shared.state();
                    session_verdict(&g, sid, &secret, principal).answer(sid)?;
                    self.attach_locked(&g, sid, (conn, sink), false)
                };
                // Confirmed leader by the read, yet not leading by the metrics (lost it
                // since, or they lag): nothing was attached, so not `Attached`.
                match attached {
                    Attach::Attached => Ok(Reply::Attached),
                    Attach::NotLeading => Err(self.not_leading()),
                    Attach::Full => Err(session_full(sid)),
                    Attach::SessionGone => Err(ClientError::Core(
                        fencelock::Error::UnknownSession(sid).into(),
                    )),
                }
            }
            Request::Holders { lock } => {
                Self::name(&lock)?;
                self.linearizable().await?;
                let g = self.shared.state();
                Ok(Reply::Holders(g.svc.holders(&lock).collect()))
            }
            Request::Hold { lock, session } => {
                Self::name(&lock)?;
                self.linearizable().await?;
                let g = self.shared.state();
                Ok(Reply::Hold(g.svc.hold(SessionId(session), &lock)))
            }
            Request::Waiters { lock } => {
                Self::name(&lock)?;
                self.linearizable().await?;
                let g = self.shared.state();
                Ok(Reply::Waiters(g.svc.waiters(&lock).collect()))
            }
            Request::Session { session } => {
                self.linearizable().await?;
                let g = self.shared.state();
                Ok(Reply::Session(g.svc.session(SessionId(session))))
            }
            Request::Sessions {
                after,
                owner,
                limit,
            } => {
                self.linearizable().await?;
                let g = self.shared.state();
                Ok(Reply::Sessions(crate::state_machine::sessions_page(
                    &g, after, owner, limit,
                )))
            }
            Request::Members => {
                self.linearizable().await?;
                let m = self.shared.state().membership.membership().clone();
                let node = |id: NodeId| m.get_node(&id).map(|n| (id, n.clone()));
                let voters = m.voter_ids().filter_map(node).collect();
                let learners = m.learner_ids().filter_map(node).collect();
                Ok(Reply::Members { voters, learners })
            }
            // The connection was authenticated and authorized by the transport.
            Request::Authenticate { .. } => Ok(Reply::Authenticated),
            Request::Status => Ok(Reply::Status(self.status().await)),
            Request::Export {
                from_index,
                to_index,
                from_time,
                to_time,
                skip,
            } => {
                self.linearizable().await?;
                let window = crate::export::Window {
                    from_index,
                    to_index,
                    from_time,
                    to_time,
                };
                self.export_page(window, skip).await.map(Reply::Export)
            }
            Request::Backup {
                index,
                offset,
                max_bytes,
            } => {
                self.linearizable().await?;
                self.backup_page(index, offset, max_bytes)
                    .await
                    .map(Reply::Backup)
            }
            Request::ForceRelease { session, lock } => {
                let lock = crate::protocol::input_name(&lock)?;
                let session = SessionId(session);
                self.write_op(Op::ForceRelease { session, lock }).await
            }
            Request::ForceReleaseHold {
                session,
                lock,
                token,
            } => {
                let lock = crate::protocol::input_name(&lock)?;
                let session = SessionId(session);
                let token = fencelock::Token(token);
                self.write_op(Op::ForceReleaseHold {
                    session,
                    lock,
                    token,
                })
                .await
            }
            Request::ForceClose { session } => {
                self.write_op(Op::ForceClose {
                    session: SessionId(session),
                })
                .await
            }
            Request::AddLearner { id, addr } => {
                for a in [&addr.raft, &addr.client] {
                    if !crate::membership::address_text(a) {
                        // Escaped, a long address grows up to sixfold: past the longest a
                        // member may have, only its length (as `Grants::authorize` does for
                        // a name), so a refusal never queues more than the request sent.
                        return Err(ClientError::BadRequest(
                            if a.len() <= crate::membership::MAX_ADDR_LEN {
                                format!("bad node address {a:?}")
                            } else {
                                format!(
                                    "bad node address: {} bytes, longer than the {} a node address may have",
                                    a.len(),
                                    crate::membership::MAX_ADDR_LEN
                                )
                            },
                        ));
                    }
                    // A member the transport would never dial would stay in the membership
                    // for good: refuse it before it is committed.
                    if self.config.loopback_members {
                        crate::net::loopback_addr(a).map_err(ClientError::BadRequest)?;
                    }
                }
                // One add at a time, each reading the membership the one before it left. A
                // call waits for the one before it for at most its request timeout, as
                // every other wait of a request is bounded: a script retrying an add of a
                // node that never comes up would otherwise queue its calls behind one
                // another, each holding one of its connection's places for minutes.
                let Ok(_adding) = tokio::time::timeout(
                    Duration::from_millis(self.config.request_timeout_ms),
                    self.adding_learner.lock(),
                )
                .await
                else {
                    return Err(ClientError::Unavailable(
                        "another add-learner is in progress; try again".into(),
                    ));
                };
                // Judged against the leader's membership, confirmed as the leader's: another
                // node's may lag the latest change (`NotLeader` sends the client there).
                self.linearizable().await?;
                // openraft keeps a member's address when it is added again: a new address
                // for a known id would be answered as done and never dialled.
                let m = self.raft.metrics().borrow().membership_config.clone();
                if let Some(known) = m.membership().get_node(&id) {
                    if *known != addr && m.voter_ids().any(|v| v == id) {
                        return Err(ClientError::BadRequest(format!(
                            "node {id} is a voter already: a node at another address needs a \
                             new id (or set the voters without {id} and remove it first)"
                        )));
                    }
                    if *known != addr {
                        return Err(ClientError::BadRequest(format!(
                            "node {id} is a learner already, at {} / {}: remove it first \
                             (remove-learner) to give it another address, or use a new id",
                            known.raft, known.client
                        )));
                    }
                    // The same address: a retry (of a learner, or of a node made a voter
                    // since), answered as an add is.
                } else if m.membership().nodes().count() >= crate::membership::MAX_MEMBERS {
                    // Peers refuse a membership of more members as it decodes.
                    return Err(ClientError::BadRequest(format!(
                        "the cluster has {} members, the most it can have",
                        crate::membership::MAX_MEMBERS
                    )));
                } else {
                    // Every log entry, a membership's included, must fit the entry bound
                    // that sizes an AppendEntries below every node's frame limit.
                    let members = m.membership().nodes().map(|(i, a)| (*i, a));
                    if let Some(why) = crate::membership::oversized(members.chain([(id, &addr)])) {
                        return Err(ClientError::BadRequest(format!("with node {id} {why}")));
                    }
                }
                let fut = self.raft.add_learner(id, addr, true);
                // openraft waits for a far-behind learner to catch up: one that refuses this
                // node's settings never does, and the answer names why.
                let reply = self.membership_write(fut).await.map_err(|e| {
                    match (e, self.elector.settings().refusal_by(id)) {
                        (ClientError::Unavailable(m), Some(why)) => {
                            ClientError::Unavailable(format!(
                                "{m}: {why}; node {id} may be a learner now: start it with the \
                                 cluster's settings, or remove it with remove-learner"
                            ))
                        }
                        (e, _) => e,
                    }
                })?;
                // openraft may return before an unreachable learner caught up: say so.
                let timeout = Duration::from_millis(self.config.request_timeout_ms);
                crate::membership::check_live(self, &[id].into(), timeout)
                    .await
                    .map_err(|e| {
                        ClientError::Unavailable(format!(
                            "node {id} is a learner now, but: {e}; start it, or remove it \
                             with remove-learner"
                        ))
                    })?;
                Ok(reply)
            }
            Request::SetVoters { voters } => {
                let voters: BTreeSet<NodeId> = voters.into_iter().collect();
                let timeout = Duration::from_millis(self.config.request_timeout_ms);
                crate::membership::check_voters(self, &voters, timeout).await?;
                let fut = self.raft.change_membership(voters, false);
                self.membership_write(fut).await
            }
            Request::RemoveLearner { id } => {
                // "Already gone" only from the leader's membership, confirmed as the
                // leader's: a follower that has not seen the learner added (lagging, cut
                // off, or removed itself) would answer done while it stays a member.
                self.linearizable().await?;
                let m = self.raft.metrics().borrow().clone();
                if m.membership_config.membership().get_node(&id).is_none() {
                    return Ok(Reply::MembershipChanged); // already gone: a retry
                }
                if m.membership_config.voter_ids().any(|v| v == id) {
                    return Err(ClientError::BadRequest(format!(
                        "node {id} is a voter: set the voters without it first"
                    )));
                }
                let ids: BTreeSet<NodeId> = [id].into();
                let fut = self
                    .raft
                    .change_membership(openraft::ChangeMembers::RemoveNodes(ids), false);
                self.membership_write(fut).await
            }
        }
    }

    /// Waits for a membership change (bounded by 5 request timeouts: a learner may have
    /// a log to catch up on) and maps its outcome.
    async fn membership_write(
        &self,
        fut: impl std::future::Future<
            Output = Result<
                openraft::raft::ClientWriteResponse<TypeConfig>,
                RaftError<NodeId, ClientWriteError<NodeId, NodeAddr>>,
            >,
        >,
    ) -> Result<Reply, ClientError> {
        let limit = Duration::from_millis(self.config.request_timeout_ms.saturating_mul(5));
        match tokio::time::timeout(limit, fut).await {
            Err(_) => Err(ClientError::Unavailable(
                "membership change timed out".into(),
            )),
            Ok(Ok(_)) => Ok(Reply::MembershipChanged),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                let addr = f
                    .leader_node
                    .map(|n| n.client)
                    .or_else(|| client_addr(&self.raft, f.leader_id));
                Err(ClientError::NotLeader { leader: addr })
            }
            // The previous change is still committing: transient, the client retries.
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                e @ ChangeMembershipError::InProgress(_),
            )))) => Err(ClientError::Unavailable(e.to_string())),
            // An empty voter set, or a voter that is not a member: retrying cannot help.
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
                Err(ClientError::BadRequest(e.to_string()))
            }
            Ok(Err(e)) => Err(ClientError::Unavailable(e.to_string())),
        }
    }
}

/// The largest number a recording of the history holds ([`crate::export::MAX_NUMBER`],
/// 2^53 - 1: what a JavaScript number holds exactly).
const MAX_NUMBER: u64 = crate::export::MAX_NUMBER;

/// The longest ttl a client may ask for whatever the node's `--max-ttl-ms`: half of
/// [`crate::export::MAX_NUMBER`] (~142 000 years), so that a deadline (now + ttl) stays
/// recordable.
pub const MAX_RECORDABLE_TTL: u64 = MAX_NUMBER / 2;

/// Refuses a request carrying a number past what a recording of the history holds: a
/// session id, request number or forced release's token above [`MAX_NUMBER`] or a ttl
/// above [`MAX_RECORDABLE_TTL`]. Applied, such a number would make every export of a window
/// holding its entry fail (`not_recordable`), whoever sent it — an input for a session
/// that is not open reaches the core and is recorded too. Clients number requests 1, 2,
/// 3…, and the cluster numbers sessions from 1, so no session it opened is refused; a
/// wait is clamped instead (see `Request::Acquire`).
///
/// Errors: `Limit` (`session_id_too_large`, `request_number_too_large`, `token_too_large`,
/// `ttl_too_long`);
/// nothing is proposed. Cost: O(1).
pub(crate) fn recordable(req: &Request) -> Result<(), ClientError> {
    let (session, request, ttl) = match req {
        Request::Open { ttl_ms, .. } | Request::OpenLabeled { ttl_ms, .. } => {
            (None, None, Some(*ttl_ms))
        }
        Request::Close {
            session, request, ..
        }
        | Request::Acquire {
            session, request, ..
        }
        | Request::Release {
            session, request, ..
        }
        | Request::Cancel {
            session, request, ..
        }
        | Request::Watch {
            session, request, ..
        }
        | Request::Unwatch {
            session, request, ..
        } => (Some(*session), *request, None),
        Request::KeepAlive { session, .. }
        | Request::ForceRelease { session, .. }
        | Request::ForceReleaseHold { session, .. }
        | Request::ForceClose { session } => (Some(*session), None, None),
        _ => (None, None, None),
    };
    if let Some(s) = session.filter(|s| *s > MAX_NUMBER) {
        return Err(ClientError::Limit {
            kind: "session_id_too_large".into(),
            message: format!(
                "session id {s} is above {MAX_NUMBER}, the largest the cluster's history can \
                 record (no session has such an id)"
            ),
        });
    }
    if let Some(n) = request.filter(|n| *n > MAX_NUMBER) {
        return Err(ClientError::Limit {
            kind: "request_number_too_large".into(),
            message: format!(
                "request number {n} is above {MAX_NUMBER}, the largest the cluster's history \
                 can record"
            ),
        });
    }
    // A forced release names a hold by its token, which the export writes: a token above
    // the history's largest number is no hold it could have recorded.
    if let Request::ForceReleaseHold { token, .. } = req {
        if *token > MAX_NUMBER {
            return Err(ClientError::Limit {
                kind: "token_too_large".into(),
                message: format!(
                    "token {token} is above {MAX_NUMBER}, the largest the cluster's history \
                     can record (no hold it records has such a token)"
                ),
            });
        }
    }
    if let Some(t) = ttl.filter(|t| *t > MAX_RECORDABLE_TTL) {
        return Err(ClientError::Limit {
            kind: "ttl_too_long".into(),
            message: format!(
                "a session ttl of {t} ms is above {MAX_RECORDABLE_TTL} ms, the longest the \
                 cluster's history can record"
            ),
        });
    }
    Ok(())
}

/// Refuses to start a node whose `raft.log` is gone beside a `snapshot.bin` or a
/// `settings` file: missing, or what opening would take for a new log — no whole header
/// ([`crate::log_store::lacks_header`]; `log` `None`, checked before the log is opened,
/// so nothing is created) — or — beside a snapshot — holding nothing at
/// all: no vote, no entry, no compaction point (`log` given). A node that has a snapshot
/// always has a log that says so (a node that built or received one voted and compacted
/// or holds entries; `snapshot restore` and `force-new-cluster` write the log's compaction
/// point): without it the node would forget its vote (and vote twice in a term) and the
/// entries it acknowledged. A node's first start writes the log's header, durably, before
/// it records its `settings` ([`crate::settings::record`]), so a directory with a
/// settings file and no log header lost its log, snapshot or not (a node that never
/// voted or took an entry has an empty log with a header, which starts).
///
/// `snapshot restore` writes `snapshot.bin` first and the log after it, so a restore
/// interrupted in between leaves this too: the message says to empty the directory and
/// restore again (a second restore into it is refused, `AlreadyExists`).
///
/// Errors: `InvalidData` naming the files. Cost: three `stat`s, and a read of at most 21
/// bytes of a short log.
fn refuse_lost_log(dir: &std::path::Path, log: Option<&LogStore>) -> io::Result<()> {
    let (snap, path) = (dir.join("snapshot.bin"), dir.join("raft.log"));
    let settings = dir.join(crate::settings::FILE);
    let witness = if snap.exists() {
        snap
    } else if log.is_none() && settings.exists() {
        settings
    } else {
        return Ok(());
    };
    let lost = match log {
        None => crate::log_store::lacks_header(&path),
        Some(l) => l.holds_nothing(),
    };
    if !lost {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "log {} is missing or empty beside {}: this node's vote and the entries \
             it acknowledged are lost, and starting would let it vote twice \
             in a term: refusing to start (nothing was changed). Put raft.log back, or replace \
             the node: remove it with set-voters, move {} aside, and add a fresh node with a \
             new id (add-learner, set-voters); or, after an interrupted `snapshot restore`, \
             empty the directory and run the restore again",
            path.display(),
            witness.display(),
            dir.display()
        ),
    ))
}

/// Logs elections (term, role and leader changes) and membership changes as they
/// happen, and a stopped Raft core as an error. Ends when openraft shuts down.
async fn log_raft_changes(raft: Raft) {
    let mut rx = raft.metrics();
    let mut last: Option<(u64, ServerState, Option<NodeId>)> = None;
    let mut last_membership = None;
    loop {
        let m = rx.borrow_and_update().clone();
        let now = (m.current_term, m.state, m.current_leader);
        if last != Some(now) {
            tracing::info!(
                node = m.id,
                term = m.current_term,
                state = ?m.state,
                leader = ?m.current_leader,
                "raft role"
            );
            last = Some(now);
        }
        let membership = m.membership_config.log_id().map(|l| l.index);
        if last_membership != Some(membership) {
            if last_membership.is_some() {
                tracing::info!(
                    node = m.id,
                    at = ?membership,
                    members = %m.membership_config.membership(),
                    "membership changed"
                );
            }
            last_membership = Some(membership);
        }
        match &m.running_state {
            Err(openraft::error::Fatal::Stopped) => return,
            Err(e) => {
                tracing::error!(node = m.id, error = %e, "raft stopped");
                return;
            }
            Ok(()) => {}
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Closes every client connection attached to a session whenever this node's
/// leadership ends — or a later term of it begins without this task having seen it end
/// — and forgets the registrations ([`crate::state_machine::Hub::close_attached`]): a
/// follower pushes nothing, and the clients, finding their connection closed, reconnect
/// to the new leader and repeat their pending requests there (a queued acquire is
/// answered by the core's replay: granted meanwhile, or still queued). Without it a
/// deposed leader, applying the new leader's entries late as a follower, pushed their
/// outputs on connections its clients may have given up; and a registration kept
/// across a lost term would miss what the new leader applied in between. The outputs of
/// entries another node proposed are never pushed in any case
/// ([`crate::state_machine::Hub::set_node`]), so the short time until this task runs
/// pushes nothing stale. Ends when openraft shuts down.
async fn close_pushes_when_leadership_ends(id: NodeId, raft: Raft, shared: Arc<Shared>) {
    let mut rx = raft.metrics();
    let mut leading: Option<u64> = None;
    loop {
        let now = {
            let m = rx.borrow_and_update();
            (m.state == ServerState::Leader && m.current_leader == Some(id))
                .then_some(m.current_term)
        };
        if leading.is_some() && now != leading {
            let closed = shared.hub.close_attached();
            if closed > 0 {
                tracing::info!(
                    node = id,
                    connections = closed,
                    "no longer leading (term {}): closed the client connections attached to sessions; their clients reconnect to the leader",
                    leading.unwrap_or(0)
                );
            }
        }
        leading = now;
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// The default [`NodeConfig::snapshot_ops`]: 2^18 of weight, about 42 MB of ops.
pub const SNAPSHOT_OPS: u64 = 1 << 18;
/// The default [`NodeConfig::snapshot_keep_ops`]: 2^16 of weight, about 10 MB of ops.
pub const SNAPSHOT_KEEP_OPS: u64 = 1 << 16;
/// How long a snapshot asked for by [`run_log_budget`] may take before it is asked again.
const SNAPSHOT_ASK_AGAIN: Duration = Duration::from_secs(60);
/// Rounds of [`run_log_budget`] in a row that may find the log's lock taken before it
/// waits for it on a blocking thread.
const MISSED_ROUNDS: u32 = 10;

/// Bounds the log by its weight as well as by its count of entries, and does the node's
/// purging (openraft's own purge after a snapshot is off: `Node::start`). Every 100 ms:
///
/// * once the entries a snapshot built now would cover (after the last snapshot, up to
///   the last applied entry) weigh more than [`NodeConfig::snapshot_ops`], asks openraft
///   for a snapshot (openraft's own rule asks every [`NodeConfig::snapshot_logs`]
///   entries); asked again once the snapshot changes, or after [`SNAPSHOT_ASK_AGAIN`];
/// * purges what the snapshot covers down to the last `snapshot_logs / 4` entries (the
///   count rule, openraft's as it was), and further down to
///   [`NodeConfig::snapshot_keep_ops`] of weight (the weight rule) — on a leader, not
///   past what every follower has (it would then need the snapshot) while the entries
///   through the snapshot weigh at most four times `snapshot_ops`; past that, memory
///   comes first. openraft purges nothing a replication in flight still reads, and the
///   log store nothing its persisted snapshot does not cover.
///
/// The log's lock is held through a write's fsync: the task tries it a few times and
/// skips the round if it stays taken, so a stalled disk never holds a runtime thread;
/// after [`MISSED_ROUNDS`] such rounds in a row it waits for the lock on a blocking
/// thread, so that writes back to back cannot put off its purging for good.
/// Ends when openraft does. Cost per round: O(log entries held + members).
async fn run_log_budget(raft: Raft, log: LogStore, config: NodeConfig) {
    let mut iv = tokio::time::interval(Duration::from_millis(100));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The snapshot there was when one was asked for, and when.
    let mut asked: Option<(Option<u64>, Instant)> = None;
    let mut purge_asked: Option<u64> = None;
    let keep_entries = config.snapshot_logs / 4;
    // Rounds in a row that found the log's lock taken.
    let mut missed = 0;
    loop {
        iv.tick().await;
        let m = raft.metrics().borrow().clone();
        let snap = m.snapshot.map(|s| s.index);
        let applied = m.last_applied.map(|l| l.index);
        if asked.is_some_and(|(at, when)| at != snap || when.elapsed() >= SNAPSHOT_ASK_AGAIN) {
            asked = None;
        }
        let mut budget = None;
        for _ in 0..10 {
            budget = log.try_budget(snap, applied, config.snapshot_keep_ops);
            if budget.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if budget.is_some() {
            missed = 0;
        } else {
            missed += 1;
            // Found taken round after round (writes back to back): wait for it on a
            // blocking thread, so that the purging this task does still happens.
            if missed >= MISSED_ROUNDS {
                let (log, keep) = (log.clone(), config.snapshot_keep_ops);
                budget = tokio::task::spawn_blocking(move || log.budget(snap, applied, keep))
                    .await
                    .ok();
                missed = 0;
            }
        }
        let Some(b) = budget else {
            continue;
        };
        if asked.is_none() && b.coverable > config.snapshot_ops {
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
            asked = Some((snap, Instant::now()));
        }
        let Some(s) = snap else {
            continue;
        };
        let by_count = s.checked_sub(keep_entries);
        let by_weight = match (b.purge_point, m.replication.as_ref()) {
            (Some(p), Some(followers))
                if !followers.is_empty() && b.through_snap <= 4 * config.snapshot_ops =>
            {
                // The least any follower has (`None`: one has nothing yet).
                let slowest = followers
                    .values()
                    .map(|l| l.map(|l| l.index))
                    .min()
                    .flatten();
                slowest.map(|x| p.min(x))
            }
            (p, _) => p,
        };
        let p = by_count.max(by_weight);
        if let Some(p) = p.filter(|&p| purge_asked.is_none_or(|a| p > a)) {
            if raft.trigger().purge_log(p).await.is_err() {
                return;
            }
            purge_asked = Some(p);
        }
    }
}

/// Probes the data directory every second, so a full disk is noticed (writes refused,
/// `/readyz` failing) before a write needs the space, and its end is noticed too.
async fn run_prober(disk: Arc<DiskHealth>) {
    loop {
        let _ = disk.probe_shared(crate::disk::PROBE_WAIT).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The client address of node `leader` in the membership `raft` knows, if any.
fn client_addr(raft: &Raft, leader: Option<NodeId>) -> Option<String> {
    let leader = leader?;
    let m = raft.metrics().borrow().clone();
    m.membership_config
        .membership()
        .get_node(&leader)
        .map(|n| n.client.clone())
}

/// One confirmation round for [`Node::linearizable`] ([`ReadBarriers::share`] bounds its
/// time). `back` watches whether the node stepped back (check-quorum).
async fn confirm_leadership(
    raft: Raft,
    mut back: tokio::sync::watch::Receiver<bool>,
) -> Result<(), ClientError> {
    if *back.borrow() {
        return Err(stepped_back());
    }
    let fut = raft.ensure_linearizable();
    // Biased: when the node steps back while the read is refused for want of a quorum,
    // both are ready at once, and the answer must be the same every time: not the
    // leader (the client looks for the new one), never a random `Unavailable`. (A
    // step-back is seen before the time limit too: `wait_for` is ready at once for a
    // node that already stepped back, and the limit's timer is polled after it.)
    let r = tokio::select! {
        biased;
        _ = back.wait_for(|b| *b) => return Err(stepped_back()),
        r = fut => r,
    };
    if *back.borrow() {
        return Err(stepped_back());
    }
    match r {
        Ok(_) => Ok(()),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
            let addr = f
                .leader_node
                .map(|n| n.client)
                .or_else(|| client_addr(&raft, f.leader_id));
            Err(ClientError::NotLeader { leader: addr })
        }
        Err(e) => Err(ClientError::Unavailable(e.to_string())),
    }
}

/// What a stepped-back leader answers: not the leader (it knows no better one).
fn stepped_back() -> ClientError {
    ClientError::NotLeader { leader: None }
}

async fn run_ticker(
    id: NodeId,
    raft: Raft,
    shared: Arc<Shared>,
    clock: Arc<LeaderClock>,
    config: NodeConfig,
) {
    let mut iv = tokio::time::interval(Duration::from_millis(config.tick_ms.max(1)));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        iv.tick().await;
        let m = raft.metrics().borrow().clone();
        let leading = m.state == ServerState::Leader && m.current_leader == Some(id);
        if leading && clock.elector.stepped_back() {
            // Check-quorum failed: no ticks while it stays stepped back (it resumes in
            // this term once a probe is acknowledged by a quorum, or once it is the only
            // voter: `Elector::lead`).
            continue;
        }
        if !leading {
            *clock.lock() = ClockState::default();
            continue;
        }
        let need_anchor = {
            let mut c = clock.lock();
            if c.term != m.current_term {
                *c = ClockState {
                    term: m.current_term,
                    since: Some(Instant::now()),
                    anchor: None,
                    last: 0,
                };
            }
            c.anchor.is_none()
                && c.since
                    .is_some_and(|s| s.elapsed() >= Duration::from_millis(config.grace_ms))
        };
        if need_anchor {
            // Everything committed before this term is applied once this returns.
            let ok = tokio::time::timeout(
                Duration::from_millis(config.request_timeout_ms),
                raft.ensure_linearizable(),
            )
            .await;
            if !matches!(ok, Ok(Ok(_))) {
                continue;
            }
            let logical = shared.state().svc.now().0;
            // No credited time in this term yet (no acknowledgement at all in it, or a
            // lone node's driver has not run in it): anchored at the next look, not at
            // zero, which the first count could then jump from.
            let Some(credited) = clock.elector.credited(m.current_term) else {
                continue;
            };
            let mut c = clock.lock();
            if c.term == m.current_term && c.anchor.is_none() {
                c.anchor = Some((credited, logical));
            }
            continue;
        }
        // The next deadline first, then the stamp, then the write with nothing between:
        // the state lock can be held for a whole apply, and a stamp taken before waiting
        // for it could reach the log in a later term of this node, its grace skipped. A
        // deadline that moved meanwhile costs a tick with nothing due, or the next look.
        let next = shared.state().svc.poll_timeout();
        let Some(stamp) = clock.stamp() else { continue };
        if next.is_some_and(|t| t.0 <= stamp) {
            // Straight to openraft, not behind the proposer's queue: a deadline is due.
            let cmd = Cmd::new(None, [Op::Input(Input::Tick { now: Tick(stamp) })]);
            let _ = tokio::time::timeout(
                Duration::from_millis(config.request_timeout_ms),
                raft.client_write(cmd),
            )
            .await;
        }
    }
}

#[cfg(test)]
mod read_barrier_tests {
    use super::*;
    use std::collections::VecDeque;
    use tokio::sync::oneshot;

    type Answer = Result<(), ClientError>;

    /// Rounds that finish when the test says: each started round takes the next gate.
    #[derive(Clone, Default)]
    struct Gates(Arc<Mutex<VecDeque<oneshot::Receiver<Answer>>>>);

    impl Gates {
        fn round(&self) -> impl std::future::Future<Output = Answer> {
            let gate = self
                .0
                .lock()
                .unwrap()
                .pop_front()
                .expect("a gate per round");
            async move { gate.await.unwrap() }
        }
    }

    /// A read that arrives while a round is in progress is never given that round's
    /// answer (the round may have confirmed the leader before a write the read must
    /// see): it runs the next round, and every read that arrived with it shares it.
    #[tokio::test]
    async fn a_read_takes_only_a_round_that_started_after_it_arrived() {
        let reads = Arc::new(ReadBarriers::default());
        let gates = Gates::default();
        let (first, second) = (oneshot::channel(), oneshot::channel());
        gates.0.lock().unwrap().extend([first.1, second.1]);
        let wait = Duration::from_secs(10);
        let read = |reads: &Arc<ReadBarriers>| {
            let (reads, gates) = (reads.clone(), gates.clone());
            tokio::spawn(async move { reads.share(wait, || gates.round()).await })
        };
        // Waits (bounded) until `n` rounds have started; false if they never do.
        let started = |n: u64| {
            let reads = reads.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(5), async {
                    while reads.started() < n {
                        tokio::task::yield_now().await;
                    }
                })
                .await
                .is_ok()
            }
        };
        let a = read(&reads);
        assert!(started(1).await, "the first read started a round");
        // Two reads arrive while the first round is in progress.
        let (b, c) = (read(&reads), read(&reads));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let round_one = Err(ClientError::Unavailable("round one".into()));
        first.0.send(round_one.clone()).unwrap();
        assert_eq!(a.await.unwrap(), round_one);
        assert!(
            started(2).await,
            "the late reads started no round of their own"
        );
        assert!(
            !b.is_finished() && !c.is_finished(),
            "given the first round's answer"
        );
        second.0.send(Ok(())).unwrap();
        assert_eq!(b.await.unwrap(), Ok(()));
        assert_eq!(c.await.unwrap(), Ok(()));
        assert_eq!(reads.started(), 2, "the two late reads shared one round");
    }

    /// Whether `took` is `want`, to the millisecond the timer wheel rounds deadlines to.
    fn about(took: Duration, want: Duration) -> bool {
        took.abs_diff(want) <= Duration::from_millis(2)
    }

    /// A read through `reads` under `limit`, spawned: its answer and how long it took
    /// (in tokio's clock, which these tests pause: timers fire exactly at their time).
    fn timed_read<F, R>(
        reads: &Arc<ReadBarriers>,
        limit: Duration,
        round: F,
    ) -> tokio::task::JoinHandle<(Answer, Duration)>
    where
        F: FnOnce() -> R + Send + 'static,
        R: std::future::Future<Output = Answer> + Send + 'static,
    {
        let reads = reads.clone();
        tokio::spawn(async move {
            let arrived = tokio::time::Instant::now();
            let answer = reads.share(limit, round).await;
            (answer, arrived.elapsed())
        })
    }

    /// A round whose task panics still ends: the reads waiting for it are answered
    /// `Unavailable` at once, and the next read starts a round of its own.
    #[tokio::test(start_paused = true)]
    async fn a_round_that_panics_is_answered_and_the_next_read_starts_another() {
        let reads = Arc::new(ReadBarriers::default());
        let limit = Duration::from_secs(10);
        let a = timed_read(&reads, limit, || async {
            panic!("a round that panics (expected)")
        });
        let (a, a_took) = a.await.unwrap();
        assert!(matches!(a, Err(ClientError::Unavailable(_))), "{a:?}");
        assert!(about(a_took, Duration::ZERO), "{a_took:?}");
        let b = timed_read(&reads, limit, || async { Ok(()) });
        assert_eq!(b.await.unwrap().0, Ok(()));
        assert_eq!(reads.started(), 2);
    }

    /// A round whose making panics (before it is spawned) is ended too: the read that made
    /// it panics, and the next read starts a round of its own.
    #[tokio::test(start_paused = true)]
    async fn a_round_that_panics_as_it_is_made_leaves_no_round_in_progress() {
        let reads = Arc::new(ReadBarriers::default());
        let limit = Duration::from_secs(10);
        let a = timed_read(&reads, limit, || -> std::future::Ready<Answer> {
            panic!("a round that panics as it is made (expected)")
        });
        assert!(a.await.is_err(), "the read that made the round panicked");
        let b = timed_read(&reads, limit, || async { Ok(()) });
        let (b, b_took) = b.await.unwrap();
        assert_eq!(b, Ok(()));
        assert!(about(b_took, Duration::ZERO), "{b_took:?}");
        assert_eq!(reads.started(), 2);
    }

    /// A read's time limit counts from its arrival: one that waits for a round in progress
    /// and then starts the next gives up at its own deadline, not a limit after the next
    /// round's start.
    #[tokio::test(start_paused = true)]
    async fn a_read_waits_at_most_its_limit_counted_from_its_arrival() {
        let reads = Arc::new(ReadBarriers::default());
        let limit = Duration::from_secs(10);
        // A round that gives up after a whole limit, as a leader cut off from its quorum.
        let slow = move || async move {
            tokio::time::sleep(limit).await;
            Err(ClientError::Unavailable("no quorum".into()))
        };
        let a = timed_read(&reads, limit, slow);
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(reads.started(), 1, "the first read runs a round");
        // Arrives 6 s into the first round: waits 4 s for it, then 6 s for the next.
        let b = timed_read(&reads, limit, slow);
        let (a, a_took) = a.await.unwrap();
        assert!(matches!(a, Err(ClientError::Unavailable(_))), "{a:?}");
        assert!(about(a_took, limit), "{a_took:?}");
        let (b, b_took) = b.await.unwrap();
        assert!(matches!(b, Err(ClientError::Unavailable(_))), "{b:?}");
        assert!(
            about(b_took, limit),
            "the wait for the round in progress counts: {b_took:?}"
        );
        assert_eq!(reads.started(), 2, "the late read started the next round");
    }

    /// A round lives its own time limit, whoever waits for it: a read that gives up ends
    /// no round, and the reads still waiting take its answer or give up at their own
    /// deadlines, never at another read's.
    #[tokio::test(start_paused = true)]
    async fn a_read_that_gives_up_ends_no_round_and_cuts_no_other_read_short() {
        let reads = Arc::new(ReadBarriers::default());
        let limit = Duration::from_secs(10);
        // The first round answers when the test says; every later one never answers.
        let (open, first) = oneshot::channel::<Answer>();
        let first = Arc::new(Mutex::new(Some(first)));
        let round = move || {
            let gate = first.lock().unwrap().take();
            async move {
                match gate {
                    Some(gate) => gate.await.unwrap(),
                    None => std::future::pending().await,
                }
            }
        };
        let x = timed_read(&reads, limit, round.clone());
        tokio::time::sleep(Duration::from_secs(2)).await;
        let p = timed_read(&reads, limit, round.clone()); // arrives at 2 s
        tokio::time::sleep(Duration::from_secs(2)).await;
        let q = timed_read(&reads, limit, round); // arrives at 4 s
        tokio::time::sleep(Duration::from_secs(1)).await;
        open.send(Ok(())).unwrap();
        let (x, x_took) = x.await.unwrap();
        assert_eq!(x, Ok(()));
        assert!(about(x_took, Duration::from_secs(5)), "{x_took:?}");
        // p and q arrived during the first round: one second round, from 5 s, for both.
        let (p, p_took) = p.await.unwrap();
        assert!(matches!(p, Err(ClientError::Unavailable(_))), "{p:?}");
        assert!(about(p_took, limit), "{p_took:?}");
        // p gave up at 12 s; q waits for the same round to its own 14 s.
        let (q, q_took) = q.await.unwrap();
        assert!(matches!(q, Err(ClientError::Unavailable(_))), "{q:?}");
        assert!(
            about(q_took, limit),
            "cut short by another read's deadline: {q_took:?}"
        );
        assert_eq!(reads.started(), 2, "p and q shared the second round");
    }

    /// A read waiting for a round in progress gives up at its own deadline, even when the
    /// round and the read that started it have longer ones.
    #[tokio::test(start_paused = true)]
    async fn a_read_gives_up_at_its_deadline_while_a_round_is_in_progress() {
        let reads = Arc::new(ReadBarriers::default());
        let a = timed_read(&reads, Duration::from_secs(20), std::future::pending);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let b = timed_read(&reads, Duration::from_secs(10), std::future::pending);
        let (b, b_took) = b.await.unwrap();
        assert!(matches!(b, Err(ClientError::Unavailable(_))), "{b:?}");
        assert!(about(b_took, Duration::from_secs(10)), "{b_took:?}");
        assert_eq!(
            reads.started(),
            1,
            "b waited for a's round, and started none"
        );
        let (a, a_took) = a.await.unwrap();
        assert!(matches!(a, Err(ClientError::Unavailable(_))), "{a:?}");
        assert!(about(a_took, Duration::from_secs(20)), "{a_took:?}");
    }

    /// Under a steady stream of reads with rounds that take 0.6 of the limit, rounds run
    /// back to back, one per round-time (not one per read), and a read is answered unless
    /// it arrived in the first 0.6 s of a round: it waits for that round and the next,
    /// 3.6 s less its arrival's offset, past its 3 s. (Rounds cut short by their reader's
    /// deadline, each a round of its own, once failed nearly every read after the first.)
    #[tokio::test(start_paused = true)]
    async fn steady_reads_with_slow_rounds_share_rounds_and_are_mostly_answered() {
        let reads = Arc::new(ReadBarriers::default());
        let limit = Duration::from_millis(3_000);
        let slow = move || async move {
            tokio::time::sleep(Duration::from_millis(1_800)).await;
            Ok(())
        };
        // A read at 0 s (it starts the first round), then one every 100 ms from 50 ms, so
        // that no read arrives on the tick a round ends.
        let mut all = vec![timed_read(&reads, limit, slow)];
        tokio::time::sleep(Duration::from_millis(50)).await;
        for _ in 1..150 {
            all.push(timed_read(&reads, limit, slow));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut answered = 0;
        for r in all {
            let (answer, took) = r.await.unwrap();
            match answer {
                Ok(()) => {
                    answered += 1;
                    assert!(took <= limit, "{took:?}");
                }
                Err(e) => {
                    assert!(matches!(e, ClientError::Unavailable(_)), "{e:?}");
                    assert!(about(took, limit), "{took:?}");
                }
            }
        }
        // Rounds start at 0, 1.8, 3.6 … s. Of the 18 reads in each round (offsets 0.05 …
        // 1.75 s), the 12 from 0.65 s on are answered; the 5 in the ninth round (14.45 …
        // 14.85 s) are not; and the first read is: 8 × 12 + 1.
        assert_eq!(answered, 97, "of 150 reads");
        // Nine rounds while reads arrive, and a tenth for the last ones.
        assert_eq!(reads.started(), 10);
    }
}

#[cfg(test)]
mod start_tests {
    use super::*;

    /// An open by key, retried while its first attempt is in flight, holds one place of
    /// the token's quota between the two, not one each, and keeps holding it when the
    /// first attempt goes unproposed (its caller gone before the proposer took it) while
    /// the retry may still open the session: another open is refused until the retry's
    /// outcome is known. (Before, the first attempt alone was counted: with it gone, an
    /// open without a key passed, and the token ended with two sessions under a quota
    /// of one.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_retry_holds_its_keys_place_when_its_first_attempt_goes_unproposed() {
        let dir = std::env::temp_dir().join(format!("fl-token-retry-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let net = crate::mem_network::MemNet::default();
        let mut config = NodeConfig::new(1, dir.clone());
        config.loopback_members = false;
        config.grace_ms = 0;
        config.max_sessions_per_token = Some(1);
        let node = Node::start(config, net.factory(1)).await.unwrap();
        net.add(1, node.elector().clone());
        let addr = NodeAddr {
            raft: "mem:1".into(),
            client: "mem:1".into(),
        };
        node.initialize([(1, addr)].into_iter().collect())
            .await
            .unwrap();
        let start = Instant::now();
        while !node.leads() {
            assert!(start.elapsed() < Duration::from_secs(10), "no leader");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let who = Principal::token("team");
        let key = Some(OpenKey(7));
        let refused = |r: &Result<Option<TokenOpen>, ClientError>| matches!(r, Err(ClientError::Limit { kind, .. }) if kind == "too_many_token_sessions");
        let first = node.reserve_token_open(who, key).unwrap();
        let retry = node.reserve_token_open(who, key);
        assert!(!refused(&retry), "the retry is no new open");
        assert!(refused(&node.reserve_token_open(who, None)), "quota of one");
        drop(first); // unproposed
        assert!(
            refused(&node.reserve_token_open(who, None)),
            "the retry still holds the place"
        );
        drop(retry);
        assert!(node.reserve_token_open(who, None).unwrap().is_some());
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Timing refused — heartbeats too far apart for the leader's clock, or what openraft
    /// refuses (an election timeout no longer than the heartbeat) — is refused before the
    /// directory is opened: nothing is written into it (opening it makes the log, and may
    /// move a corrupt snapshot aside).
    #[tokio::test]
    async fn a_start_refused_for_its_timing_writes_nothing() {
        let dir = std::env::temp_dir().join(format!("fl-start-timing-{}", std::process::id()));
        // Heartbeats 150 ms apart (1.5 x 100) against half of 301 ms; openraft alone
        // takes this timing. Then one openraft refuses (and so does the rule).
        for (heartbeat_ms, election_ms) in [(100, (301, 602)), (500, (500, 500))] {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let mut config = NodeConfig::new(1, dir.clone());
            config.heartbeat_ms = heartbeat_ms;
            config.election_ms = election_ms;
            let started = Node::start(config, crate::net::TcpNetwork::default()).await;
            let Err(e) = started else {
                panic!("{heartbeat_ms}/{election_ms:?} was taken");
            };
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
            assert!(
                e.to_string().contains("does not fit election timeout"),
                "{e}"
            );
            let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
            assert!(left.is_empty(), "{left:?}");
        }
        // Timing the rule takes and only openraft refuses (an election timeout range of one
        // value), so its refusal is reached too and also writes nothing.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut config = NodeConfig::new(1, dir.clone());
        config.election_ms = (300, 300);
        let timing = ElectionTiming {
            heartbeat_ms: config.heartbeat_ms,
            election_ms: config.election_ms,
        };
        assert_eq!(timing.check(), Ok(()));
        let started = Node::start(config, crate::net::TcpNetwork::default()).await;
        assert!(started.is_err(), "openraft takes this timing");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Heartbeats spaced just under half the election timeout are taken: the rule refuses
    /// only what would stop an idle leader's clock. Cost: none of a node.
    #[test]
    fn the_heartbeat_rule_takes_the_largest_heartbeat_that_fits() {
        let fits = |heartbeat_ms, election_ms| {
            ElectionTiming {
                heartbeat_ms,
                election_ms: (election_ms, 2 * election_ms),
            }
            .check()
        };
        // 1.5 x 99 = 148 ms < 150 ms; 1.5 x 100 = 150 ms is not.
        assert_eq!(fits(99, 300), Ok(()));
        let refused = fits(100, 300).unwrap_err();
        assert!(
            refused.contains("the smallest election timeout for this heartbeat is 302 ms"),
            "{refused}"
        );
        assert!(fits(100, 301).is_err());
        assert!(fits(50, 151).unwrap_err().contains("is 152 ms"));
        assert_eq!(fits(50, 152), Ok(()));
        assert_eq!(fits(100, 302), Ok(()));
        assert_eq!(fits(50, 300), Ok(()), "the defaults");
        assert_eq!(fits(1, 4), Ok(()));
        assert!(fits(0, 300).is_err());
    }
}
