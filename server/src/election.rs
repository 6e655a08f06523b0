//! Elections that do not disrupt a healthy leader, and a leader that knows when it has lost
//! its quorum (built around openraft 0.9, which has neither pre-vote nor check-quorum).
//!
//! * **Pre-vote** (Raft dissertation §9.6, etcd's `PreVote`). openraft's own election timer
//!   is off (`Config::enable_elect = false`); [`Elector::run`] drives elections instead.
//!   When a voter has heard from no leader for its randomized election timeout it first
//!   asks the other voters, over this crate's own RPC ([`PreVoteRequest`]), whether they
//!   *would* vote for it. A voter says yes only if its last log id is not newer than the
//!   candidate's and it has heard from no live leader for the maximum election timeout
//!   (the leader lease openraft's `handle_vote_req` applies to a real vote, so a won
//!   pre-vote is not refused by the lease afterwards). Only with a yes from a majority of
//!   every voter configuration does the node call `raft.trigger().elect()`, which raises
//!   its term. A node that cannot win — cut off, or with a stale log — never raises its
//!   term, so when it comes back it cannot force the healthy leader to step down. An
//!   answer also carries the committed vote of the leader the answering voter hears: a
//!   node that missed the change that made an unknown node leader learns it so
//!   ([`Elector::vouched`]; learners ask too, and so does a node following such a
//!   leader, to keep the word fresh, never to campaign), and over mutual TLS takes that
//!   leader's entries although it is not yet a member.
//! * **Leader stickiness** (dissertation §4.2.3). A real `RequestVote` is refused while
//!   this node is a leader with a fresh quorum; on followers openraft's lease (no vote
//!   within the maximum election timeout of hearing from the leader) does the same.
//!   A vote (or pre-vote) is *not* refused for coming from a node this node knows only as
//!   a learner: a node that missed a membership change knows a newly promoted voter as a
//!   learner, and its vote may be the one a quorum needs (grow a cluster from one node to
//!   three, lose the first while the third lags: only the second can lead, and only with
//!   the third's vote; `a_voter_promoted_while_a_node_lagged_is_elected_with_that_nodes_vote`). A learner that campaigns is as dangerous as a voter that lies;
//!   the membership is the trust boundary, not the voter set.
//! * **Check-quorum** (etcd's `CheckQuorum`). Every AppendEntries a leader sends goes
//!   through [`QuorumNetwork`], which records, per follower, the send time of the latest
//!   request that follower accepted. The *quorum time* is the latest instant such that a
//!   majority of every voter configuration (this node counting as always fresh) accepted a
//!   request sent at or after it. A leader whose quorum time is older than the maximum
//!   election timeout (when its followers may elect another leader; counted from when it
//!   began to lead at the earliest, or from when voters joined it after it was the only
//!   one) **steps back** until a
//!   probe (below) succeeds or a later term takes over: it answers clients
//!   `NotLeader` at once (and fails requests in flight), stops stamping time and proposing
//!   ticks, and stops sending AppendEntries, so its followers stop hearing from it and
//!   elect a leader that a majority can reach (one-way links included). openraft 0.9 has
//!   no API to demote a leader; a stepped-back leader becomes a follower when the next
//!   leader's higher term reaches it, and it grants pre-votes meanwhile. If after twice
//!   the election timeout no one has replaced it (the only reachable voter's log is
//!   shorter than its own, so only it can lead), it *probes*: it replicates again (still
//!   serving no client) and resumes once a quorum acknowledges a request sent since, or
//!   once it is the only voter, else it holds back again for another round.
//! * **Credited time.** [`Elector::credited`] is this term's leader time that counts:
//!   real time, except that time stands still from `quorum time + fresh` (fresh =
//!   `election_min / 2`) until a quorum acknowledges again, and the gap is never counted
//!   later. The leader's logical clock ([`crate::node::LeaderClock`]) runs on it, so time
//!   during which no quorum could be reached expires no session. A one-node cluster
//!   counts its own time while it runs: the driver's runs stand for acknowledgements,
//!   and its time stands still from `last run + SOLO_FRESH` (200 ms) until the driver
//!   runs again, so a stopped or starved process credits none of the rest of the stall. Within a term it is continuous: when a membership change
//!   switches between the two counts, or a late acknowledgement credits time that had
//!   stood still, it carries on from its last value, never back and never faster than
//!   the monotonic clock between two reads.
//!
//! Cost: one map update per AppendEntries answer, one pre-vote round (a request to each
//! voter) per election attempt, a metrics read every 20 ms.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::ServerState;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::settings::PeerSettings;
use crate::types::{LogId, NodeAddr, NodeId, Raft, TypeConfig, Vote};

/// "Would you vote for me?" — asked before an election; changes nothing on the receiver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteRequest {
    /// The asking node.
    pub candidate: NodeId,
    /// The candidate's last log id.
    pub last_log_id: Option<LogId>,
}

/// The answer to a [`PreVoteRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteResponse {
    /// True if the receiver would grant a real vote now.
    pub granted: bool,
    /// The receiver's vote when it is committed and its leader is live (heard within the
    /// maximum election timeout, or the receiver itself leading with a fresh quorum): the
    /// leader it follows now and that leader's term. What lets a node that missed a membership change learn,
    /// from a member it knows, that a node it does not know leads ([`Elector::vouched`]).
    pub leader_vote: Option<Vote>,
}

/// The transport of pre-votes (the Raft transport of each network implements it).
pub trait PreVoteNetwork: Clone + Send + Sync + 'static {
    /// Asks `target` (at `node`) for a pre-vote; `None` if no answer came within
    /// `timeout`. Cost: one request/response.
    fn pre_vote(
        &self,
        target: NodeId,
        node: &NodeAddr,
        req: PreVoteRequest,
        timeout: Duration,
    ) -> impl Future<Output = Option<PreVoteResponse>> + Send;
}

/// Election timing (from [`crate::node::NodeConfig`]).
#[derive(Clone, Copy, Debug)]
pub struct ElectionTiming {
    /// Heartbeat interval (ms).
    pub heartbeat_ms: u64,
    /// Election timeout range (ms).
    pub election_ms: (u64, u64),
}

impl ElectionTiming {
    fn min(&self) -> Duration {
        Duration::from_millis(self.election_ms.0)
    }
    fn max(&self) -> Duration {
        Duration::from_millis(self.election_ms.1.max(self.election_ms.0))
    }
    /// How long after the quorum time the leader's time still counts.
    fn fresh(&self) -> Duration {
        Duration::from_millis(self.election_ms.0 / 2)
    }

    /// Refuses heartbeats too far apart for a leader's time to run: openraft 0.9 sends
    /// one per tick of its timer, every 1.5 × `heartbeat_ms`, and an idle leader's time
    /// stands still from half the minimum election timeout after its quorum time (the
    /// send time of the latest request a quorum acknowledged) until the next heartbeat is
    /// acknowledged. Spaced that far apart or more, an idle cluster's clock would stop
    /// before every answer and its sessions expire later and later; the round trip comes
    /// on top, so the spacing should stay well below it (the defaults, 50 ms against
    /// 300 ms, space them 75 ms against 150 ms). In whole milliseconds: the minimum election
    /// timeout must be at least 2 × ⌊1.5 × `heartbeat_ms`⌋ + 2 (152 for 50, 302 for 100). A
    /// zero heartbeat is refused too. Errors: the reason, naming the two settings and the
    /// smallest election timeout that fits. Cost: O(1).
    pub fn check(&self) -> Result<(), String> {
        if self.heartbeat_ms == 0 {
            return Err(format!(
                "heartbeat 0 ms does not fit election timeout {} ms: the heartbeat must be at \
                 least 1 ms",
                self.election_ms.0
            ));
        }
        let spacing = self.heartbeat_ms.saturating_mul(3) / 2;
        if Duration::from_millis(spacing) >= self.fresh() {
            return Err(format!(
                "heartbeat {} ms does not fit election timeout {} ms: heartbeats go out every \
                 1.5 x the heartbeat, rounded down ({spacing} ms), which must be less than half \
                 the election timeout, rounded down ({} ms: the time a \
                 leader counts past the send time of the latest request a quorum \
                 acknowledged); the smallest election timeout for this heartbeat is {} ms",
                self.heartbeat_ms,
                self.election_ms.0,
                self.fresh().as_millis(),
                spacing.saturating_mul(2).saturating_add(2)
            ));
        }
        Ok(())
    }
}

/// How often the driver runs ([`Elector::run`]).
const DRIVER_PERIOD: Duration = Duration::from_millis(20);

/// How long past the driver's latest run a one-node leader's own time still counts: ten
/// of its periods, whatever the election timeout (a lone node has no follower's lease to
/// respect). Long enough that a run the scheduler delays, or a slow fsync on the node's
/// thread, does not stop the clock; short next to any ttl, so a stop of the process is
/// credited no more than this.
const SOLO_FRESH: Duration = Duration::from_millis(10 * DRIVER_PERIOD.as_millis() as u64);

/// What a leader that is a quorum by itself knows of its own liveness in one term: the
/// driver's runs stand for the acknowledgements it gets none of.
#[derive(Clone, Copy)]
struct Alive {
    term: u64,
    /// When it began to lead in `term`, even if it became a quorum by itself only later
    /// in the term: [`Elector::credited`] restarts its baseline at that switch, so this
    /// start matters only for the count's steps.
    t0: Instant,
    /// The driver's latest run as such a leader.
    at: Instant,
    /// Time between `t0` and `at + SOLO_FRESH` that is not credited: stalls of the
    /// process (stopped, paused, starved) longer than [`SOLO_FRESH`].
    gaps: Duration,
}

/// What a leader knows about its followers' acknowledgements in one term.
struct Acks {
    term: u64,
    per_peer: BTreeMap<NodeId, Instant>,
    /// The quorum time (see the module docs).
    q: Option<Instant>,
    /// `q` when credited time started (the first quorum acknowledgement of the term).
    t0: Option<Instant>,
    /// Time between `t0` and `q + fresh` that is not credited (quorum gaps).
    gaps: Duration,
}

struct State {
    /// Last accepted AppendEntries / InstallSnapshot from a leader.
    heard_leader: Option<Instant>,
    /// When this node's election timer was last reset.
    timer_reset: Instant,
    /// When this node last ended a pre-vote round (or was made): a node following a
    /// leader it does not know as a member asks again a timeout after this, however
    /// often it hears that leader ([`TimerView::step`]).
    asked: Instant,
    acks: Acks,
    /// Voter configurations (one, or two during a joint change).
    voters: Vec<BTreeSet<NodeId>>,
    /// Term in which this node is leader, and since when.
    leading: Option<(u64, Instant)>,
    /// A one-node leader's own liveness, marked by the driver (see [`Alive`]).
    alive: Option<Alive>,
    /// When this node last stopped being a quorum by itself (voters joined it): check-quorum
    /// counts from then at the earliest, as from the start of a term.
    needs_quorum_since: Option<Instant>,
    /// Term in which this node stepped back (check-quorum failed), and since when.
    stepped_back: Option<(u64, Instant)>,
    /// A stepped-back leader probing whether a quorum hears it again: since when.
    probing: Option<Instant>,
    /// The latest credited time given out (see [`Elector::credited`]).
    shown: Option<Shown>,
    /// The committed vote each member this node asked for a pre-vote said it follows
    /// (its latest answer), and when (see [`Elector::vouched`]).
    vouched: BTreeMap<NodeId, (Vote, Instant)>,
}

/// A credited time given out: what keeps it continuous within a term.
#[derive(Clone, Copy)]
struct Shown {
    term: u64,
    /// When it was read.
    at: Instant,
    /// The count it was derived from (own time or acknowledgements, whichever applied).
    raw: Duration,
    /// The credited time given out.
    out: Duration,
    /// Whether `raw` was this node's own time (a quorum by itself) or its
    /// acknowledgements' count.
    solo: bool,
}

impl Shown {
    /// How much credited time grows from this read to one at `now` whose count is `raw`
    /// (`solo`: this node's own time, else its acknowledgements'): as the count grew, but
    /// never more than the monotonic time between the reads, and not at all when the way
    /// of counting switched (the new count says nothing of the time since this read).
    /// Cost: O(1).
    fn step(&self, raw: Duration, solo: bool, now: Instant) -> Duration {
        if self.solo != solo {
            return Duration::ZERO;
        }
        raw.saturating_sub(self.raw)
            .min(now.saturating_duration_since(self.at))
    }
}

/// A node's election driver, check-quorum and credited time (see the module docs).
pub struct Elector {
    id: NodeId,
    timing: ElectionTiming,
    raft: OnceLock<Raft>,
    st: Mutex<State>,
    back_tx: watch::Sender<bool>,
    /// The Raft network sends no AppendEntries / InstallSnapshot (stepped back, not probing).
    muted: AtomicBool,
    /// The largest snapshot received, in bytes ([`Elector::set_snapshot_limit`]).
    snapshot_limit: AtomicU64,
    /// This node's service settings, compared with each inbound request's sender's.
    settings: Arc<PeerSettings>,
    // Keeps the channel open while no request is watching it.
    _back_rx: watch::Receiver<bool>,
}

impl Elector {
    /// A new elector for node `id`. Cost: O(1).
    pub fn new(id: NodeId, timing: ElectionTiming) -> Arc<Elector> {
        let (back_tx, _back_rx) = watch::channel(false);
        Arc::new(Elector {
            id,
            timing,
            raft: OnceLock::new(),
            st: Mutex::new(State {
                heard_leader: None,
                timer_reset: Instant::now(),
                asked: Instant::now(),
                acks: Acks {
                    term: 0,
                    per_peer: BTreeMap::new(),
                    q: None,
                    t0: None,
                    gaps: Duration::ZERO,
                },
                voters: Vec::new(),
                leading: None,
                alive: None,
                needs_quorum_since: None,
                stepped_back: None,
                probing: None,
                vouched: BTreeMap::new(),
                shown: None,
            }),
            muted: AtomicBool::new(false),
            snapshot_limit: AtomicU64::new(u64::MAX),
            settings: Arc::default(),
            back_tx,
            _back_rx,
        })
    }

    /// Refuses every InstallSnapshot chunk that would take the snapshot being received
    /// past `bytes` (`offset + length`; [`Elector::install_snapshot`]). A node sets it from
    /// its table sizes ([`crate::state_machine::max_snapshot_bytes`]); unset, no limit.
    /// Cost: O(1).
    pub fn set_snapshot_limit(&self, bytes: u64) {
        self.snapshot_limit.store(bytes, Ordering::Relaxed);
    }

    /// The check of the service settings each inbound Raft request carries
    /// ([`crate::settings`]): a transport calls [`PeerSettings::admit`] before it hands a
    /// request to this elector. [`crate::node::Node::start`] sets this node's settings.
    /// Cost: O(1).
    pub fn settings(&self) -> &Arc<PeerSettings> {
        &self.settings
    }

    /// Binds the elector to its Raft (once, right after `Raft::new`).
    pub(crate) fn set_raft(&self, raft: Raft) {
        let _ = self.raft.set(raft);
    }

    /// The Raft this elector is bound to (`None` before [`crate::node::Node::start`]
    /// bound it): for checks on inbound RPCs such as membership. Cost: O(1).
    pub fn bound_raft(&self) -> Option<&Raft> {
        self.raft.get()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    // openraft's error types are large; their size is dictated by its API.
    #[allow(clippy::result_large_err)]
    fn raft(&self) -> Result<&Raft, RaftError<NodeId>> {
        // Not bound yet: as if stopped.
        self.raft
            .get()
            .ok_or(RaftError::Fatal(openraft::error::Fatal::Stopped))
    }

    /// True while this node is a leader that stepped back (no quorum within the election
    /// timeout): it must not serve clients. Cost: O(1).
    pub fn stepped_back(&self) -> bool {
        *self.back_tx.borrow()
    }

    /// True while this node's AppendEntries are held back (stepped back and not probing).
    /// Cost: O(1).
    pub fn muted(&self) -> bool {
        self.muted.load(Ordering::Relaxed)
    }

    fn set_back(&self, st: &mut State, back: Option<(u64, Instant)>) {
        st.stepped_back = back;
        st.probing = None;
        self.muted.store(back.is_some(), Ordering::Relaxed);
        let _ = self.back_tx.send(back.is_some());
    }

    /// A receiver that turns true when this node steps back. Cost: O(1).
    pub fn watch_stepped_back(&self) -> watch::Receiver<bool> {
        self.back_tx.subscribe()
    }

    /// This term's credited leader time (see the module docs), or `None` if `term` is
    /// neither the term whose acknowledgements are tracked (for a one-node cluster: the
    /// term it leads in, once the driver has run in it) nor one whose credited time was
    /// given out before.
    ///
    /// Continuous within a term: it never goes back, and between two reads it grows by at
    /// most the monotonic time between them. When the way it is counted changes — a
    /// membership change makes this node a quorum by itself (its own time since it began
    /// to lead, less the stalls of its driver past 200 ms) or no longer (its followers' acknowledgements, from the first quorum), or
    /// a quorum acknowledges after a stall a request sent while time stood still — it
    /// carries on from the value last given out instead of jumping to the new count (a
    /// jump forward would expire a session whose client kept it alive within its ttl).
    /// Until the new count has a value it stands still. Cost: O(1).
    pub fn credited(&self, term: u64) -> Option<Duration> {
        let now = Instant::now();
        let mut st = self.lock();
        let raw = self.raw_credited(&st, term, now);
        let solo = self_sufficient(self.id, &st.voters);
        let prev = st.shown.filter(|p| p.term == term);
        let shown = match (raw, prev) {
            (None, None) => return None,
            (Some(raw), None) => Shown {
                term,
                at: now,
                raw,
                out: raw,
                solo,
            },
            // No count yet in this term's new mode (voters joined a one-node cluster and
            // none has acknowledged): time stands still.
            (None, Some(p)) => Shown { at: now, ..p },
            (Some(raw), Some(p)) => {
                // A switch of count (a quorum by itself, or no longer) restarts the
                // baseline: the new count says nothing about the time since the last read,
                // which may be a long gap without reads (stepped back, waiting for the
                // anchor) that no quorum confirmed.
                let step = p.step(raw, solo, now);
                Shown {
                    term,
                    at: now,
                    raw,
                    out: p.out + step,
                    solo,
                }
            }
        };
        st.shown = Some(shown);
        Some(shown.out)
    }

    /// How far this leader's clock has fallen behind its monotonic clock in the term it
    /// leads in, now: the time since it began to lead less the credited time
    /// [`credited`](Self::credited) would give now (read without giving it out, so a
    /// stepped-back leader, which reads none, still shows its clock falling behind). That
    /// is the time no quorum confirmed (for a one-node cluster, the stalls it did not run
    /// through; before the first acknowledgement of the term, the wait for it). `None`
    /// when it is not leading, or nothing was given out in this term yet. Cost: O(1).
    pub fn clock_behind(&self) -> Option<Duration> {
        let now = Instant::now();
        let st = self.lock();
        let (term, since) = st.leading?;
        let shown = st.shown.filter(|s| s.term == term)?;
        // As `credited` would step (standing still while the count has no value).
        let solo = self_sufficient(self.id, &st.voters);
        let step = self
            .raw_credited(&st, term, now)
            .map_or(Duration::ZERO, |raw| shown.step(raw, solo, now));
        Some(
            now.saturating_duration_since(since)
                .saturating_sub(shown.out + step),
        )
    }

    /// The count `credited` follows: this node's own time since it began to lead in
    /// `term`, less the stalls of its driver past [`SOLO_FRESH`], if it is a quorum by
    /// itself; else the time its acknowledgements credit.
    fn raw_credited(&self, st: &State, term: u64, now: Instant) -> Option<Duration> {
        // A node that is a majority by itself gets no acknowledgements to track: its time
        // is its own since it began to lead in `term`, less the stalls its driver saw.
        if self_sufficient(self.id, &st.voters) {
            let (t, _) = st.leading?;
            let a = st.alive.filter(|a| a.term == term && t == term)?;
            let until = now.min(a.at + SOLO_FRESH);
            return Some(until.saturating_duration_since(a.t0).saturating_sub(a.gaps));
        }
        let a = &st.acks;
        if a.term != term {
            return None;
        }
        let (Some(q), Some(t0)) = (a.q, a.t0) else {
            return Some(Duration::ZERO);
        };
        let until = now.min(q + self.timing.fresh());
        Some(until.saturating_duration_since(t0).saturating_sub(a.gaps))
    }

    /// Records that `peer` accepted a request of `term` sent at `sent`. Cost: O(voters).
    fn acked(&self, peer: NodeId, term: u64, sent: Instant) {
        let fresh = self.timing.fresh();
        let mut st = self.lock();
        let st = &mut *st;
        let a = &mut st.acks;
        if term < a.term {
            return;
        }
        if term > a.term {
            *a = Acks {
                term,
                per_peer: BTreeMap::new(),
                q: None,
                t0: None,
                gaps: Duration::ZERO,
            };
        }
        let e = a.per_peer.entry(peer).or_insert(sent);
        *e = (*e).max(sent);
        let Some(q_new) = quorum_time(self.id, &st.voters, &a.per_peer) else {
            return;
        };
        match a.q {
            None => {
                a.q = Some(q_new);
                a.t0 = Some(q_new);
            }
            Some(q_old) if q_new > q_old => {
                if q_new > q_old + fresh {
                    a.gaps += q_new - (q_old + fresh);
                }
                a.q = Some(q_new);
            }
            Some(_) => {}
        }
    }

    /// Records that the driver ran at `now` while this node leads `term` as a quorum by
    /// itself: its own time counts up to [`SOLO_FRESH`] past the latest such run, and a
    /// longer stall (the process stopped, paused by its host, or starved) is a gap never
    /// credited, as a leader of several counts no time its quorum did not confirm. Without
    /// it, a one-node cluster stopped past its sessions' ttl expired them all at its first
    /// tick after. Cost: O(1).
    fn mark_alive(&self, st: &mut State, term: u64, now: Instant) {
        match &mut st.alive {
            Some(a) if a.term == term => {
                if now > a.at + SOLO_FRESH {
                    a.gaps += now - (a.at + SOLO_FRESH);
                }
                a.at = a.at.max(now);
            }
            other => {
                *other = Some(Alive {
                    term,
                    t0: st.leading.map_or(now, |(_, since)| since.min(now)),
                    at: now,
                    gaps: Duration::ZERO,
                })
            }
        }
    }

    fn heard_leader_within(&self, d: Duration) -> bool {
        self.lock().heard_leader.is_some_and(|t| t.elapsed() < d)
    }

    fn leading_fresh(&self) -> bool {
        self.lock().leading.is_some() && !self.stepped_back()
    }

    /// Records hearing a leader: re-arms the election timer, but not `asked` (a node
    /// following a leader it does not know as a member must keep asking while it hears
    /// it: [`TimerView::step`]).
    fn note_leader(&self) {
        let now = Instant::now();
        let mut st = self.lock();
        st.heard_leader = Some(now);
        st.timer_reset = now;
    }

    /// Handles an incoming AppendEntries (every transport calls this, not openraft
    /// directly): an accepted one counts as hearing from the leader.
    ///
    /// Errors: openraft's.
    pub async fn append_entries(
        &self,
        req: AppendEntriesRequest<TypeConfig>,
    ) -> Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        let r = self.raft()?.append_entries(req).await;
        if matches!(
            r,
            Ok(AppendEntriesResponse::Success
                | AppendEntriesResponse::PartialSuccess(_)
                | AppendEntriesResponse::Conflict)
        ) {
            self.note_leader();
        }
        r
    }

    /// Handles an incoming InstallSnapshot (as [`Elector::append_entries`]). A chunk that
    /// would take the snapshot past the limit ([`Elector::set_snapshot_limit`]) is refused
    /// before openraft sees it: openraft writes each chunk at its offset into a buffer in
    /// memory, so a chunk at an offset near 2^63, or chunks without end, would otherwise
    /// take the node's memory.
    ///
    /// Errors: openraft's; a `SnapshotMismatch` (expecting offset 0) for a chunk over the
    /// limit.
    pub async fn install_snapshot(
        &self,
        req: InstallSnapshotRequest<TypeConfig>,
    ) -> Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        let limit = self.snapshot_limit.load(Ordering::Relaxed);
        let end = req.offset.saturating_add(req.data.len() as u64);
        if end > limit {
            tracing::warn!(
                node = self.id,
                from = ?req.vote.leader_id().voted_for(),
                snapshot = %req.meta.snapshot_id,
                "refused a snapshot chunk ending at byte {end}: past the limit of {limit} bytes for this node's table sizes"
            );
            let id = req.meta.snapshot_id.clone();
            return Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(
                openraft::error::SnapshotMismatch {
                    expect: openraft::SnapshotSegmentId {
                        id: id.clone(),
                        offset: 0,
                    },
                    got: openraft::SnapshotSegmentId {
                        id,
                        offset: req.offset,
                    },
                },
            )));
        }
        let vote = req.vote;
        let raft = self
            .raft
            .get()
            .ok_or(RaftError::Fatal(openraft::error::Fatal::Stopped))?;
        let r = raft.install_snapshot(req).await;
        if matches!(&r, Ok(resp) if resp.vote == vote) {
            self.note_leader();
        }
        r
    }

    /// Handles an incoming RequestVote: refused while this node leads with a fresh
    /// quorum (stickiness), else openraft decides (its lease refuses it within the maximum
    /// election timeout of hearing from a leader). A granted vote restarts the election
    /// timer.
    ///
    /// Errors: openraft's.
    pub async fn vote(
        &self,
        req: VoteRequest<NodeId>,
    ) -> Result<VoteResponse<NodeId>, RaftError<NodeId>> {
        let raft = self.raft()?;
        if self.leading_fresh() {
            let m = raft.metrics().borrow().clone();
            let last = raft.data_metrics().borrow().last_log;
            return Ok(VoteResponse::new(m.vote, last, false));
        }
        let r = raft.vote(req).await;
        if matches!(&r, Ok(v) if v.vote_granted) {
            self.lock().timer_reset = Instant::now();
        }
        r
    }

    /// Records that member `voucher` follows the committed `vote`, as a pre-vote answer
    /// would now (`fresh`) or just too long ago to count (tests).
    #[cfg(test)]
    pub(crate) fn vouch(&self, voucher: NodeId, vote: Vote, fresh: bool) {
        let age = if fresh {
            Duration::ZERO
        } else {
            self.vouch_ttl() + Duration::from_millis(1)
        };
        let at = Instant::now()
            .checked_sub(age)
            .expect("the machine is up that long");
        self.lock().vouched.insert(voucher, (vote, at));
    }

    /// Answers a pre-vote (changes nothing). Cost: O(1).
    pub fn pre_vote(&self, req: &PreVoteRequest) -> PreVoteResponse {
        let Some(raft) = self.raft.get() else {
            return PreVoteResponse {
                granted: false,
                leader_vote: None,
            };
        };
        let mine = raft.data_metrics().borrow().last_log;
        let live_leader = self.leading_fresh() || self.heard_leader_within(self.timing.max());
        let granted = !live_leader && req.last_log_id >= mine;
        // Only a leader it hears now (or itself, leading with a fresh quorum): a vote
        // whose leader has gone quiet — stepped down, removed — is vouched for by no one.
        let vote = raft.metrics().borrow().vote;
        let leader_vote = (live_leader && vote.is_committed()).then_some(vote);
        tracing::debug!(?req, granted, ?leader_vote, "pre-vote");
        PreVoteResponse {
            granted,
            leader_vote,
        }
    }

    /// How long a member's word on whom it follows counts after it was given: four
    /// maximum election timeouts (a node that hears no leader asks again every one).
    fn vouch_ttl(&self) -> Duration {
        4 * self.timing.max()
    }

    /// The fresh vouches of members this node knows as voters: (voucher, vote). Cost:
    /// O(members).
    fn fresh_vouches(&self) -> Vec<(NodeId, Vote)> {
        let Some(raft) = self.raft.get() else {
            return Vec::new();
        };
        let members: BTreeSet<NodeId> = raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect();
        let ttl = self.vouch_ttl();
        self.lock()
            .vouched
            .iter()
            .filter(|(voucher, (_, at))| members.contains(voucher) && at.elapsed() <= ttl)
            .map(|(voucher, (vote, _))| (*voucher, *vote))
            .collect()
    }

    /// Whether a member this node knows as a voter said, answering one of its pre-votes
    /// within `Elector::vouch_ttl` (four maximum election timeouts), that it follows
    /// exactly `vote` (committed: the same term and leader). A node cut off while another
    /// was added, which that one then leads, learns the membership only from the entries
    /// that leader would send it; [`crate::tls::check_peer`] serves a leader's appends and snapshots under a vouched
    /// vote (never votes), so the node can learn it. Only the vote a member follows
    /// counts, so a stale word lets in nothing newer than what a member really followed
    /// (openraft refuses a vote older than its own), and a node removed since cannot use
    /// an old one to lead again. A node that hears no leader asks for pre-votes every
    /// election timeout (a learner too, for this alone), so it learns within about one.
    /// Cost: O(members).
    pub fn vouched(&self, vote: &Vote) -> bool {
        vote.is_committed() && self.fresh_vouches().iter().any(|(_, v)| v == vote)
    }

    /// The leaders of the votes [`Elector::vouched`] accepts now: nodes a connection's
    /// certificate may name although this node does not know them as members. Cost:
    /// O(members).
    pub fn vouched_leaders(&self) -> BTreeSet<NodeId> {
        self.fresh_vouches()
            .iter()
            .filter_map(|(_, v)| v.leader_id().voted_for())
            .collect()
    }

    /// Wraps `net` so that AppendEntries answers feed check-quorum and a stepped-back
    /// leader sends nothing. Cost: O(1).
    pub fn network<N>(self: &Arc<Self>, net: N) -> QuorumNetwork<N> {
        QuorumNetwork {
            inner: net,
            elector: self.clone(),
        }
    }

    /// One run of the driver on a leader of `term` (the caller holds the state, its
    /// voters already the membership's): check-quorum — step back, probe, resume — and,
    /// for a quorum by itself, its liveness mark. Cost: O(1).
    fn lead(&self, st: &mut State, term: u64, now: Instant) {
        let solo = self_sufficient(self.id, &st.voters);
        if st.leading.map(|(t, _)| t) != Some(term) {
            st.leading = Some((term, now));
            self.set_back(st, None);
        }
        if solo {
            self.mark_alive(st, term, now);
        }
        let leading_since = st.leading.map_or(now, |l| l.1);
        let q = match (st.acks.term == term, st.acks.q) {
            (true, Some(q)) => Some(q),
            _ => None,
        };
        let max = self.timing.max();
        match (st.stepped_back, st.probing) {
            // A quorum by itself. One that stepped back and then became the only voter (a
            // membership change that committed while it probed) resumes: held back, it
            // would serve no one for the rest of the term, and no other node could be
            // elected.
            (Some(_), _) if solo => {
                self.set_back(st, None);
                tracing::info!(term, "the only voter now: leader resumes");
            }
            _ if solo => {}
            (None, _) => {
                let since = q.map_or(leading_since, |q| q.max(leading_since));
                let since = st.needs_quorum_since.map_or(since, |t| t.max(since));
                // The maximum election timeout: by then the followers may
                // elect another leader (not before: they refuse votes for that
                // long), so stepping back earlier would turn a stall into an
                // outage.
                if now.saturating_duration_since(since) > max {
                    self.set_back(st, Some((term, now)));
                    tracing::warn!(
                        term,
                        "no quorum acknowledgement within the election timeout: leader steps back"
                    );
                }
            }
            // Still leader after twice the election timeout: no one replaced it
            // (a survivor with a shorter log cannot win, and openraft ignores
            // elect() on a leader). Probe: replicate again, still serving no
            // client, and resume if a quorum acknowledges.
            (Some((_, at)), None) => {
                if now.saturating_duration_since(at) > 2 * max {
                    st.probing = Some(now);
                    self.muted.store(false, Ordering::Relaxed);
                }
            }
            (Some(_), Some(p)) => {
                if q.is_some_and(|q| q >= p) {
                    self.set_back(st, None);
                    tracing::info!(term, "a quorum acknowledges again: leader resumes");
                } else if now.saturating_duration_since(p) > max {
                    self.set_back(st, Some((term, now)));
                }
            }
        }
    }

    /// The election driver and the check-quorum watchdog; runs until the task is aborted.
    /// Every 20 ms: a leader checks its quorum time; any other voter whose randomized
    /// election timeout has passed without a leader runs a pre-vote round and, with a
    /// majority, starts an election (a learner runs the round too, only to learn whom
    /// the voters follow).
    pub async fn run<P: PreVoteNetwork>(self: Arc<Self>, net: P) {
        let mut rng = seed(self.id);
        let mut timeout = self.draw(&mut rng);
        let mut iv = tokio::time::interval(DRIVER_PERIOD);
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            iv.tick().await;
            let Some(raft) = self.raft.get() else {
                continue;
            };
            let m = raft.metrics().borrow().clone();
            let voters: Vec<BTreeSet<NodeId>> =
                m.membership_config.membership().get_joint_config().clone();
            let is_voter = voters.iter().any(|c| c.contains(&self.id));
            let leading = m.state == ServerState::Leader && m.current_leader == Some(self.id);
            let now = Instant::now();
            let step = {
                let mut st = self.lock();
                // Voters joining a node that was a quorum by itself: until now no
                // acknowledgement was needed (nor tracked as one), so the quorum is judged
                // from this moment, not from when the node began to lead; it stepped back
                // at once, before any follower could answer, and the change could not
                // commit while it did.
                if self_sufficient(self.id, &st.voters) && !self_sufficient(self.id, &voters) {
                    st.needs_quorum_since = Some(now);
                }
                st.voters = voters.clone();
                if leading {
                    self.lead(&mut st, m.current_term, now);
                } else if st.leading.is_some() {
                    st.leading = None;
                    self.set_back(&mut st, None);
                }
                if leading && st.stepped_back.is_none() {
                    st.timer_reset = now;
                }
                let membership = m.membership_config.membership();
                TimerView {
                    member: membership.get_node(&self.id).is_some(),
                    voter: is_voter,
                    leading,
                    stranger: m
                        .current_leader
                        .is_some_and(|l| l != self.id && membership.get_node(&l).is_none()),
                    since_reset: now.saturating_duration_since(st.timer_reset),
                    since_leader: st.heard_leader.map(|h| now.saturating_duration_since(h)),
                    since_asked: now.saturating_duration_since(st.asked),
                }
                .step(timeout)
            };
            let ask = match step {
                TimerStep::Wait => continue,
                TimerStep::Rearm => false,
                TimerStep::Ask | TimerStep::Campaign => true,
            };
            if ask && self.pre_vote_round(raft, &net, &voters).await && step == TimerStep::Campaign
            {
                tracing::info!(id = self.id, "pre-vote won: starting an election");
                let _ = raft.trigger().elect().await;
            }
            let mut st = self.lock();
            st.timer_reset = Instant::now();
            if ask {
                st.asked = st.timer_reset;
            }
            drop(st);
            timeout = self.draw(&mut rng);
        }
    }

    /// A randomized election timeout in `[max, 2 max - min)`: openraft refuses a vote
    /// within `max` of hearing from the leader (its lease), and so do pre-votes, so an
    /// earlier attempt could only fail.
    fn draw(&self, rng: &mut u64) -> Duration {
        let (min, max) = (
            self.timing.election_ms.0,
            self.timing.election_ms.1.max(self.timing.election_ms.0),
        );
        let (lo, hi) = (max, 2 * max - min);
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        Duration::from_millis(lo + *rng % (hi.saturating_sub(lo)).max(1))
    }

    async fn pre_vote_round<P: PreVoteNetwork>(
        &self,
        raft: &Raft,
        net: &P,
        voters: &[BTreeSet<NodeId>],
    ) -> bool {
        let m = raft.metrics().borrow().clone();
        let req = PreVoteRequest {
            candidate: self.id,
            last_log_id: raft.data_metrics().borrow().last_log,
        };
        let all: BTreeSet<NodeId> = voters.iter().flatten().copied().collect();
        let asks = all.iter().filter(|&&v| v != self.id).filter_map(|&v| {
            let node = m.membership_config.membership().get_node(&v)?.clone();
            let (net, req) = (net.clone(), req.clone());
            let wait = self.timing.min();
            Some(async move { (v, net.pre_vote(v, &node, req, wait).await) })
        });
        // Ask everyone at once; decide as soon as the yes votes form a quorum (a voter
        // that is cut off would otherwise hold the round for the whole timeout).
        let (tx, mut rx) = tokio::sync::mpsc::channel(all.len().max(1));
        let mut asked = 0;
        for ask in asks {
            let tx = tx.clone();
            asked += 1;
            tokio::spawn(async move {
                let _ = tx.send(ask.await).await;
            });
        }
        drop(tx);
        let mut yes: BTreeSet<NodeId> = BTreeSet::from([self.id]);
        let won = |yes: &BTreeSet<NodeId>| {
            voters
                .iter()
                .all(|c| c.iter().filter(|v| yes.contains(v)).count() * 2 > c.len())
        };
        for _ in 0..asked {
            if won(&yes) {
                break;
            }
            match rx.recv().await {
                Some((v, Some(a))) => {
                    if a.granted {
                        yes.insert(v);
                    }
                    let mut st = self.lock();
                    match a.leader_vote {
                        Some(vote) if vote.leader_id().voted_for() != Some(self.id) => {
                            st.vouched.insert(v, (vote, Instant::now()))
                        }
                        _ => st.vouched.remove(&v),
                    };
                }
                Some((_, None)) => {}
                None => break,
            }
        }
        tracing::debug!(id = self.id, ?yes, "pre-vote round");
        won(&yes)
    }
}

/// What one tick of the election timer does ([`TimerView::step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TimerStep {
    /// Nothing: the timer has not run out.
    Wait,
    /// Re-arm the timer and ask no one: a leader cannot campaign (openraft ignores
    /// `elect()` on a leader); it waits for the next leader's term. (Only a leader that
    /// stepped back gets here: one with a quorum re-arms its timer every tick.)
    Rearm,
    /// A pre-vote round only to learn whom the voters follow (their answers are the
    /// vouches of [`Elector::vouched`]), never followed by an election: a learner, or a
    /// node that heard a leader within the timeout.
    Ask,
    /// A pre-vote round, then an election if a majority of every configuration grants it.
    Campaign,
}

/// What a node knows at one tick of its election timer, as durations since the events:
/// the election rule, apart from the clock and Raft.
#[derive(Clone, Copy, Debug)]
struct TimerView {
    /// The membership it knows names it (a removed node asks no one).
    member: bool,
    /// It is a voter (a learner never campaigns).
    voter: bool,
    /// It is the leader.
    leading: bool,
    /// It follows a leader it does not know as a member (it missed the change that
    /// added that leader, and learns it only from that leader's entries).
    stranger: bool,
    /// Since the timer was last re-armed: a round, a granted vote, a leader heard.
    since_reset: Duration,
    /// Since it last heard a leader, if ever.
    since_leader: Option<Duration>,
    /// Since its last pre-vote round.
    since_asked: Duration,
}

impl TimerView {
    /// The step under election timeout `timeout`. A node that heard no one for a timeout
    /// asks (a voter that heard no leader campaigns). A node following a stranger asks
    /// every timeout *however often it hears that leader*: its appends and snapshot
    /// chunks are served only under a fresh vouch ([`crate::tls::check_peer`]), and a
    /// snapshot transfer can outlast one (a vouch counts for four maximum timeouts).
    fn step(&self, timeout: Duration) -> TimerStep {
        let quiet = self
            .since_leader
            .map_or(self.since_reset, |l| l.min(self.since_reset));
        let leaderless = quiet >= timeout;
        let probe = self.stranger && self.since_asked >= timeout;
        if !self.member || !(leaderless || probe) {
            TimerStep::Wait
        } else if self.leading {
            TimerStep::Rearm
        } else if self.voter && self.since_leader.is_none_or(|l| l >= timeout) {
            TimerStep::Campaign
        } else {
            TimerStep::Ask
        }
    }
}

fn seed(id: NodeId) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(id);
    h.finish() | 1
}

/// True if this node alone is a majority of every configuration (a one-node cluster).
fn self_sufficient(me: NodeId, voters: &[BTreeSet<NodeId>]) -> bool {
    !voters.is_empty() && voters.iter().all(|c| c.contains(&me) && c.len() == 1)
}

/// The quorum time: the latest instant such that a majority of every configuration
/// accepted a request sent at or after it (`me` counts as always fresh). `None` until
/// every configuration has such a majority.
fn quorum_time(
    me: NodeId,
    voters: &[BTreeSet<NodeId>],
    acks: &BTreeMap<NodeId, Instant>,
) -> Option<Instant> {
    let mut q: Option<Instant> = None;
    for c in voters {
        let need = c.len() / 2 + 1 - usize::from(c.contains(&me));
        if need == 0 {
            continue;
        }
        let mut times: Vec<Instant> = c
            .iter()
            .filter(|v| **v != me)
            .filter_map(|v| acks.get(v).copied())
            .collect();
        if times.len() < need {
            return None;
        }
        times.sort_unstable_by(|a, b| b.cmp(a));
        let t = times[need - 1];
        q = Some(q.map_or(t, |x| x.min(t)));
    }
    q
}

/// The Raft network wrapped for check-quorum (see the module docs).
pub struct QuorumNetwork<N> {
    inner: N,
    elector: Arc<Elector>,
}

impl<N: RaftNetworkFactory<TypeConfig>> RaftNetworkFactory<TypeConfig> for QuorumNetwork<N> {
    type Network = QuorumConn<N::Network>;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> Self::Network {
        QuorumConn {
            inner: self.inner.new_client(target, node).await,
            target,
            elector: self.elector.clone(),
        }
    }
}

/// One connection of a [`QuorumNetwork`].
pub struct QuorumConn<C> {
    inner: C,
    target: NodeId,
    elector: Arc<Elector>,
}

fn stepped_back_err<E: std::error::Error>() -> RPCError<NodeId, NodeAddr, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(
        "leader stepped back (no quorum): not replicating",
    )))
}

impl<C: RaftNetwork<TypeConfig>> RaftNetwork<TypeConfig> for QuorumConn<C> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        if self.elector.muted() {
            return Err(stepped_back_err());
        }
        let term = rpc.vote.leader_id().get_term();
        let sent = Instant::now();
        let r = self.inner.append_entries(rpc, option).await;
        if matches!(
            r,
            Ok(AppendEntriesResponse::Success
                | AppendEntriesResponse::PartialSuccess(_)
                | AppendEntriesResponse::Conflict)
        ) {
            self.elector.acked(self.target, term, sent);
        }
        r
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeAddr, RaftError<NodeId, InstallSnapshotError>>,
    > {
        if self.elector.muted() {
            return Err(stepped_back_err());
        }
        let vote = rpc.vote;
        let sent = Instant::now();
        let r = self.inner.install_snapshot(rpc, option).await;
        if matches!(&r, Ok(resp) if resp.vote == vote) {
            self.elector
                .acked(self.target, vote.leader_id().get_term(), sent);
        }
        r
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        self.inner.vote(rpc, option).await
    }

    fn backoff(&self) -> openraft::network::Backoff {
        self.inner.backoff()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    /// A follower of a known leader, which it heard `heard` ago (its timer re-armed
    /// then), its last pre-vote round `asked` ago.
    fn follower(heard: u64, asked: u64) -> TimerView {
        TimerView {
            member: true,
            voter: true,
            leading: false,
            stranger: false,
            since_reset: Duration::from_millis(heard),
            since_leader: Some(Duration::from_millis(heard)),
            since_asked: Duration::from_millis(asked),
        }
    }

    const TIMEOUT: Duration = Duration::from_millis(700);

    /// A voter that hears its leader waits; one that has not for a timeout campaigns.
    #[test]
    fn a_voter_campaigns_only_when_it_has_not_heard_a_leader_for_a_timeout() {
        assert_eq!(follower(100, 5_000).step(TIMEOUT), TimerStep::Wait);
        assert_eq!(follower(699, 5_000).step(TIMEOUT), TimerStep::Wait);
        assert_eq!(follower(700, 5_000).step(TIMEOUT), TimerStep::Campaign);
        let never = TimerView {
            since_leader: None,
            ..follower(700, 700)
        };
        assert_eq!(never.step(TIMEOUT), TimerStep::Campaign);
        // Re-armed by a round or a granted vote since it last heard the leader.
        let rearmed = TimerView {
            since_reset: Duration::from_millis(100),
            ..follower(5_000, 100)
        };
        assert_eq!(rearmed.step(TIMEOUT), TimerStep::Wait);
    }

    /// A learner asks whom the voters follow when it hears no leader, never to campaign.
    #[test]
    fn a_learner_asks_but_never_campaigns() {
        let learner = TimerView {
            voter: false,
            ..follower(700, 700)
        };
        assert_eq!(learner.step(TIMEOUT), TimerStep::Ask);
        let hearing = TimerView {
            voter: false,
            ..follower(100, 5_000)
        };
        assert_eq!(hearing.step(TIMEOUT), TimerStep::Wait);
    }

    /// A node following a leader it does not know as a member asks every timeout although
    /// it hears that leader all the time (a long snapshot transfer: each chunk re-arms the
    /// timer), so the vouch its chunks are served under stays fresh; it never campaigns
    /// against the leader it hears.
    #[test]
    fn a_node_following_a_stranger_keeps_asking_while_it_hears_that_leader() {
        let transfer = |asked| TimerView {
            stranger: true,
            ..follower(20, asked)
        };
        assert_eq!(transfer(100).step(TIMEOUT), TimerStep::Wait);
        assert_eq!(transfer(700).step(TIMEOUT), TimerStep::Ask);
        assert_eq!(transfer(3_000).step(TIMEOUT), TimerStep::Ask);
        let learner = TimerView {
            voter: false,
            ..transfer(700)
        };
        assert_eq!(learner.step(TIMEOUT), TimerStep::Ask);
        // The same node once the entries make its leader a member: it hears it, and waits.
        assert_eq!(follower(20, 3_000).step(TIMEOUT), TimerStep::Wait);
    }

    /// Hearing a leader re-arms the election timer but leaves `asked` alone: the wiring
    /// the keep-asking rule above depends on (an append or snapshot chunk from a leader
    /// this node does not know must not postpone its next round).
    #[test]
    fn hearing_a_leader_rearms_the_timer_but_not_the_last_round() {
        let e = elector();
        let asked = e.lock().asked;
        std::thread::sleep(Duration::from_millis(5));
        e.note_leader();
        let st = e.lock();
        assert!(st.timer_reset > asked, "the timer is re-armed");
        assert_eq!(st.heard_leader, Some(st.timer_reset));
        assert_eq!(st.asked, asked, "the last round is not moved");
    }

    /// A node the membership no longer names asks no one; a leader re-arms its timer and
    /// asks no one (openraft ignores `elect()` on a leader).
    #[test]
    fn a_removed_node_and_a_leader_ask_no_one() {
        for view in [
            TimerView {
                member: false,
                ..follower(5_000, 5_000)
            },
            TimerView {
                member: false,
                stranger: true,
                ..follower(20, 5_000)
            },
        ] {
            assert_eq!(view.step(TIMEOUT), TimerStep::Wait, "{view:?}");
        }
        let stepped_back = TimerView {
            leading: true,
            since_leader: None,
            ..follower(5_000, 5_000)
        };
        assert_eq!(stepped_back.step(TIMEOUT), TimerStep::Rearm);
    }

    #[test]
    fn quorum_time_is_the_majority_th_freshest_acknowledgement() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let voters = vec![set(&[1, 2, 3])];
        let mut acks = BTreeMap::new();
        assert_eq!(quorum_time(1, &voters, &acks), None);
        acks.insert(2, ms(10));
        assert_eq!(quorum_time(1, &voters, &acks), Some(ms(10)));
        acks.insert(3, ms(30));
        assert_eq!(quorum_time(1, &voters, &acks), Some(ms(30)));
        // Five voters: the leader and the two freshest followers.
        let voters = vec![set(&[1, 2, 3, 4, 5])];
        acks.insert(4, ms(20));
        assert_eq!(quorum_time(1, &voters, &acks), Some(ms(20)));
        // Joint configurations: the older of the two quorum times.
        let voters = vec![set(&[1, 2, 3]), set(&[3, 4, 5])];
        assert_eq!(quorum_time(1, &voters, &acks), Some(ms(20)));
        assert!(self_sufficient(1, &[set(&[1])]));
        assert!(!self_sufficient(1, &[set(&[1, 2])]));
    }

    #[test]
    fn time_without_a_quorum_is_not_credited() {
        let e = Elector::new(
            1,
            ElectionTiming {
                heartbeat_ms: 50,
                election_ms: (300, 600),
            },
        );
        e.lock().voters = vec![set(&[1, 2, 3])];
        let t = Instant::now() - Duration::from_secs(10);
        let ms = |n| t + Duration::from_millis(n);
        e.acked(2, 5, ms(0));
        assert_eq!(e.credited(4), None, "another term");
        // Acks every 50 ms up to 1 s: all credited.
        for i in 1..=20 {
            e.acked(2, 5, ms(i * 50));
        }
        // Then nothing for 3 s; then acks again at 4 s and 4.05 s.
        e.acked(3, 5, ms(4000));
        e.acked(2, 5, ms(4050));
        // Credited: 0..1000 plus the 150 ms of freshness after it, then 4000..4050 plus
        // its 150 ms of freshness; nothing since (no acknowledgement for ~6 s).
        let c = e.credited(5).unwrap().as_millis() as i64;
        let expect = 1000 + 150 + 200;
        assert!((c - expect).abs() < 50, "credited {c}, expected ~{expect}");
        // Stale acknowledgements and older terms change nothing.
        e.acked(2, 5, ms(100));
        e.acked(3, 4, ms(9000));
        let c2 = e.credited(5).unwrap().as_millis() as i64;
        assert!(c2 >= c && c2 - c < 50);
    }

    fn elector() -> Arc<Elector> {
        Elector::new(
            1,
            ElectionTiming {
                heartbeat_ms: 50,
                election_ms: (300, 600),
            },
        )
    }

    /// What the driver does on each run while this node leads `term` as a quorum by
    /// itself ([`Elector::run`]): marks it alive.
    fn drive(e: &Elector, term: u64) {
        let mut st = e.lock();
        e.mark_alive(&mut st, term, Instant::now());
    }

    /// A leader that stepped back (no quorum) and then became the only voter of its
    /// configuration (a membership change that committed while it probed) is a quorum by
    /// itself: it resumes at its next run. Held back, it served no client and stamped no
    /// time for the rest of the term, and no other node could be elected.
    #[test]
    fn a_stepped_back_leader_that_becomes_the_only_voter_resumes() {
        let e = elector();
        let t = Instant::now();
        let mut st = e.lock();
        st.voters = vec![set(&[1, 2, 3])];
        e.lead(&mut st, 5, t);
        assert!(st.stepped_back.is_none());
        // No acknowledgement within the maximum election timeout (600 ms): it steps back.
        e.lead(&mut st, 5, t + Duration::from_millis(700));
        assert!(st.stepped_back.is_some(), "stepped back");
        // Probing after twice that, then the voters are removed down to it.
        e.lead(&mut st, 5, t + Duration::from_millis(2_000));
        assert!(st.probing.is_some(), "probing");
        st.voters = vec![set(&[1])];
        e.lead(&mut st, 5, t + Duration::from_millis(2_020));
        assert!(
            st.stepped_back.is_none(),
            "still stepped back as the only voter"
        );
        assert!(!e.muted.load(Ordering::Relaxed));
        assert!(!*e.back_tx.borrow());
    }

    /// A one-node leader counts its own time only while its driver runs: a stall longer
    /// than [`SOLO_FRESH`] (a process stopped with SIGSTOP, a paused VM) stands still after
    /// [`SOLO_FRESH`] and is never credited later, so it expires no session whose client
    /// kept it alive before the stall (it used to credit the whole stall at once).
    #[test]
    fn a_one_node_leader_does_not_credit_a_stall_of_its_driver() {
        let e = elector();
        let fresh = SOLO_FRESH;
        let t = Instant::now() - Duration::from_secs(1);
        {
            let mut st = e.lock();
            st.voters = vec![set(&[1])];
            st.leading = Some((5, t));
        }
        assert_eq!(e.credited(5), None, "no run of the driver yet");
        drive(&e, 5);
        // Its time since it began to lead (about 1 s), the driver having run just now.
        let at = Instant::now();
        let c1 = e.credited(5).unwrap();
        assert!(c1 >= Duration::from_secs(1), "{c1:?}");
        // A stall of 600 ms, with no run of the driver: 200 ms of it credited.
        let stall = Instant::now();
        std::thread::sleep(Duration::from_millis(600));
        let stalled = stall.elapsed();
        let c2 = read_continuous(&e, 5, c1, at);
        assert!(
            c2 - c1 <= fresh + Duration::from_millis(20),
            "the stall was credited: {c1:?} -> {c2:?}"
        );
        // The driver runs again: the stall is a gap, not credited later either.
        drive(&e, 5);
        let at2 = Instant::now();
        let c3 = read_continuous(&e, 5, c2, at);
        assert!(c3 - c2 < Duration::from_millis(100), "{c2:?} -> {c3:?}");
        // And time runs on with the driver.
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(10));
            drive(&e, 5);
        }
        let c4 = read_continuous(&e, 5, c3, at2);
        assert!(c4 - c3 >= Duration::from_millis(40), "{c3:?} -> {c4:?}");
        // What the stall cost shows: the clock is behind by the stall less 200 ms (some
        // 400 ms; more if the sleep ran over, and up to the later reads' own gaps).
        let behind = e.clock_behind().expect("leading");
        let lost = stalled - fresh;
        assert!(
            behind + Duration::from_millis(20) >= lost
                && behind <= lost + Duration::from_millis(200),
            "{behind:?} behind after a stall of {stalled:?}"
        );
        // And it shows as it happens, with no read of the clock (as on a leader that
        // stepped back, which stamps nothing): 300 ms more without the driver, 100 ms
        // more behind.
        std::thread::sleep(Duration::from_millis(300));
        let later = e.clock_behind().expect("leading");
        assert!(
            later >= behind + Duration::from_millis(80),
            "{behind:?} -> {later:?}"
        );
        e.lock().leading = None;
        assert_eq!(e.clock_behind(), None, "not leading");
    }

    /// Reads `credited(term)` and checks it against the previous read `prev` (taken at
    /// `prev_at`): never less, and never more than the monotonic time between the reads.
    fn read_continuous(e: &Elector, term: u64, prev: Duration, prev_at: Instant) -> Duration {
        let c = e.credited(term).expect("credited");
        let wall = prev_at.elapsed();
        assert!(c >= prev, "credited went back: {c:?} after {prev:?}");
        assert!(
            c - prev <= wall,
            "credited jumped: {prev:?} -> {c:?} in {wall:?} of monotonic time"
        );
        c
    }

    #[test]
    fn credited_time_is_continuous_when_voters_are_removed_down_to_this_node() {
        let e = elector();
        // Leading in term 5 for 10 s, as one of three voters; the followers acknowledged
        // only during the first second, so about 1.15 s is credited.
        let t = Instant::now() - Duration::from_secs(10);
        let ms = |n| t + Duration::from_millis(n);
        {
            let mut st = e.lock();
            st.voters = vec![set(&[1, 2, 3])];
            st.leading = Some((5, t));
        }
        for i in 0..=20 {
            e.acked(2, 5, ms(i * 50));
        }
        let at = Instant::now();
        let c1 = e.credited(5).unwrap();
        assert!((1100..1200).contains(&c1.as_millis()), "credited {c1:?}");
        // The two other voters are removed within the term: the node is now a quorum by
        // itself. Its credited time carries on from ~1.15 s (it used to jump to the 10 s
        // since it began to lead, expiring sessions kept alive within their ttl).
        e.lock().voters = vec![set(&[1])];
        drive(&e, 5);
        let at2 = Instant::now();
        let c2 = read_continuous(&e, 5, c1, at);
        // And then runs with the monotonic clock, as a one-node cluster's does.
        std::thread::sleep(Duration::from_millis(40));
        drive(&e, 5);
        let c3 = read_continuous(&e, 5, c2, at2);
        assert!(c3 - c2 >= Duration::from_millis(40), "{c2:?} -> {c3:?}");
        // Voters come back within the term: time stands still until they acknowledge
        // (their acknowledgements restart the count), never back, never ahead.
        e.lock().voters = vec![set(&[1, 2, 3])];
        let at3 = Instant::now();
        let c4 = read_continuous(&e, 5, c3, at3);
        e.acked(2, 5, Instant::now());
        let at4 = Instant::now();
        let c5 = read_continuous(&e, 5, c4, at3);
        std::thread::sleep(Duration::from_millis(40));
        e.acked(3, 5, Instant::now());
        let c6 = read_continuous(&e, 5, c5, at4);
        assert!(c6 - c5 >= Duration::from_millis(30), "{c5:?} -> {c6:?}");
    }

    #[test]
    fn credited_time_does_not_take_in_a_gap_without_reads_when_the_node_becomes_a_quorum() {
        let e = elector();
        let t = Instant::now() - Duration::from_secs(10);
        {
            let mut st = e.lock();
            st.voters = vec![set(&[1, 2, 3])];
            st.leading = Some((5, t));
        }
        for i in 0..=20 {
            e.acked(2, 5, t + Duration::from_millis(i * 50));
        }
        let c1 = e.credited(5).unwrap();
        // No read for 300 ms (as while stepped back), no acknowledgement either; then the
        // other voters are removed. That gap was never confirmed by a quorum: the switch
        // to counting its own time must not credit it.
        std::thread::sleep(Duration::from_millis(300));
        e.lock().voters = vec![set(&[1])];
        drive(&e, 5);
        let c2 = e.credited(5).unwrap();
        assert!(
            c2 >= c1 && c2 - c1 < Duration::from_millis(50),
            "the unconfirmed gap was credited: {c1:?} -> {c2:?}"
        );
        // From there it runs with this node's own clock.
        std::thread::sleep(Duration::from_millis(40));
        drive(&e, 5);
        let c3 = e.credited(5).unwrap();
        assert!(c3 - c2 >= Duration::from_millis(40), "{c2:?} -> {c3:?}");
    }

    #[test]
    fn credited_time_does_not_jump_when_a_quorum_acknowledges_after_a_stall() {
        let e = elector();
        e.lock().voters = vec![set(&[1, 2, 3])];
        let t = Instant::now() - Duration::from_secs(10);
        for i in 0..=20 {
            e.acked(2, 5, t + Duration::from_millis(i * 50));
        }
        let at = Instant::now();
        let c1 = e.credited(5).unwrap();
        // A request sent 100 ms ago (while credited time stood still) is acknowledged now:
        // the time since its send counts, but only as much of it as passed since the last
        // read, so credited time never gets ahead of the monotonic clock between reads.
        e.acked(2, 5, Instant::now() - Duration::from_millis(100));
        let at2 = Instant::now();
        let c2 = read_continuous(&e, 5, c1, at);
        // From there it runs with the acknowledgements.
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(10));
            e.acked(2, 5, Instant::now());
        }
        let c3 = read_continuous(&e, 5, c2, at2);
        assert!(c3 - c2 >= Duration::from_millis(40), "{c2:?} -> {c3:?}");
    }
}
