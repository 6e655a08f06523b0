//! TCP transport: Raft RPCs between nodes and the client protocol, both as
//! length-prefixed postcard frames ([`crate::frame`]).
//!
//! A garbage, truncated or oversized frame closes that connection (the client port first
//! answers [`ServerFrame::Malformed`]; a stream that ends inside a frame's four-byte
//! length is an end of stream, closed without an answer); it never takes the node down.
//!
//! # Limits
//!
//! Both ports bound what one peer or client can hold ([`ClientPolicy`], [`PeerPolicy`]):
//! * connections per source IP address and in all: one more from a full address is
//!   closed at once, before any TLS handshake or read, counted in
//!   `fencelock_connections_refused_total{port,reason}` and logged (at most every
//!   [`LOG_EVERY`] per kind); when the total is full, one more takes the place of the
//!   oldest connection not yet proven (a member's request served, a token accepted), which
//!   is closed (`fencelock_connections_closed_total{reason="displaced"}`), and is refused
//!   only when every place is proven (`crate::admission`);
//! * the frame size: the length prefix is checked before anything is read, and a body is
//!   only ever as large as the bytes that actually arrived;
//! * the read timeout: once the first byte of a frame is in, the whole frame must arrive
//!   within it, however slowly the bytes trickle (a slow sender is cut off);
//! * the same timeout bounds a write that makes no progress: a client or peer that stops
//!   reading (or half-closes) with answers pending is closed and its places freed
//!   (`fencelock_connections_closed_total{reason="write_timeout"}`), instead of holding
//!   the writer until it goes away;
//! * the idle timeout: a connection with no frame for that long is closed — on the client
//!   port only if no session is attached to it and no request is in flight (a waiting
//!   acquire's grant is pushed on it).
//! * pushes queued for a client: at most [`PUSH_BACKLOG`] per connection and
//!   [`MAX_QUEUED_PUSHES`] for all of them ([`ClientPolicy::max_queued_pushes`]); a
//!   connection that falls behind, or holds the most when the total is spent, is closed
//!   and its queue dropped at once (`fencelock_push_closes_total{reason}`);
//! * list answers (a lock's holders or queue) encoded and not yet written: at most
//!   [`MAX_UNWRITTEN_LIST_BYTES`] for all connections ([`ClientPolicy::max_unwritten_list_bytes`])
//!   and 1/[`LIST_SHARE`] of it for one; a read past either is refused, and when the
//!   node's bound is spent the connection holding the most is closed
//!   (`fencelock_connections_closed_total{reason="unwritten_lists"}`).
//!
//! An `accept` that fails (no file descriptors left: `EMFILE`) is retried after a pause
//! that doubles up to one second, counted in `fencelock_accept_errors_total{port}` and
//! logged at most every [`LOG_EVERY`]: the connection waits in the listen backlog until
//! a descriptor is free, and the node keeps serving the connections it has.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

pub use crate::admission::MAX_CLOSING;
use crate::admission::{Admission, Admitted};
use crate::auth::{Grants, Principal, Tokens};
use crate::election::{Elector, PreVoteNetwork, PreVoteRequest, PreVoteResponse};
use crate::frame::{
    self, Next, Wire, CLIENT_WIRE, MAX_CLIENT_FRAME, MAX_RAFT_FRAME, MAX_RAFT_REPLY,
    MAX_SERVER_FRAME, PEER_WIRE,
};
use crate::node::Node;
use crate::protocol::{ClientError, ClientFrame, Reply, Request, ServerFrame};
use crate::settings::{CarrySettings, PeerSettings};
use crate::state_machine::{ServiceConfig, MAX_QUEUED_PUSHES, PUSH_BACKLOG};
use crate::tls::{check_peer, node_name, NodeTls, HANDSHAKE_TIMEOUT};
use crate::types::{log_id_in_bounds, vote_in_bounds, NodeAddr, NodeId, TypeConfig};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A Raft RPC on the wire, with the sender's service settings: the receiver serves it only
/// if they are its own ([`crate::settings`]).
#[derive(Serialize, Deserialize)]
pub(crate) struct RaftCall {
    settings: ServiceConfig,
    req: RaftReq,
}

impl Wire for RaftCall {
    const VERSION: u32 = PEER_WIRE;
}

impl Wire for RaftResp {
    const VERSION: u32 = PEER_WIRE;
}

/// The most entries one AppendEntries may carry: above the [`entries_per_append`] a
/// leader sends (a test holds it so), small enough that a frame's decoded size stays
/// within some megabytes (each entry at most [`crate::types::MAX_CMD_OPS`] ops). A longer
/// list, which no node sends, is refused as it decodes, before it is allocated.
pub const MAX_APPEND_ENTRIES: usize = 256;

/// [`AppendEntriesRequest`]'s fields, in its order (so its encoding), with the entries
/// capped at [`MAX_APPEND_ENTRIES`].
#[derive(Deserialize)]
struct AppendWire {
    vote: crate::types::Vote,
    prev_log_id: Option<crate::types::LogId>,
    #[serde(deserialize_with = "capped_entries")]
    entries: Vec<crate::types::Entry>,
    leader_commit: Option<crate::types::LogId>,
}

fn capped_entries<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<crate::types::Entry>, D::Error> {
    crate::types::capped_vec::<D, EntryWire, MAX_APPEND_ENTRIES>(d)
        .map(|v| v.into_iter().map(EntryWire::into_entry).collect())
}

/// openraft's `Entry`, its fields in its order (so its encoding), its membership decoded
/// by [`crate::membership::decode_membership`]: capped as it decodes, and refused when it
/// names a voter without addresses (which would stop Raft wherever it is in the log).
/// Also how the log store reads the entries of `raft.log` back.
#[derive(Deserialize)]
pub(crate) struct EntryWire {
    log_id: crate::types::LogId,
    payload: PayloadWire,
}

/// openraft's `EntryPayload`, its variants in its order.
#[derive(Deserialize)]
enum PayloadWire {
    Blank,
    Normal(crate::types::Cmd),
    Membership(
        #[serde(deserialize_with = "crate::membership::decode_membership")]
        crate::types::Membership,
    ),
}

impl EntryWire {
    pub(crate) fn into_entry(self) -> crate::types::Entry {
        let payload = match self.payload {
            PayloadWire::Blank => openraft::EntryPayload::Blank,
            PayloadWire::Normal(c) => openraft::EntryPayload::Normal(c),
            PayloadWire::Membership(m) => openraft::EntryPayload::Membership(m),
        };
        openraft::Entry {
            log_id: self.log_id,
            payload,
        }
    }
}

/// [`InstallSnapshotRequest`]'s fields, in its order, its meta decoded by
/// [`crate::membership::decode_meta`] (the snapshot's data is checked as it installs).
#[derive(Deserialize)]
struct SnapshotWire {
    vote: crate::types::Vote,
    #[serde(deserialize_with = "crate::membership::decode_meta")]
    meta: crate::types::SnapshotMeta,
    offset: u64,
    data: Vec<u8>,
    done: bool,
}

fn checked_snapshot<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<InstallSnapshotRequest<TypeConfig>, D::Error> {
    let w = SnapshotWire::deserialize(d)?;
    Ok(InstallSnapshotRequest {
        vote: w.vote,
        meta: w.meta,
        offset: w.offset,
        data: w.data,
        done: w.done,
    })
}

fn capped_append<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<AppendEntriesRequest<TypeConfig>, D::Error> {
    let w = AppendWire::deserialize(d)?;
    Ok(AppendEntriesRequest {
        vote: w.vote,
        prev_log_id: w.prev_log_id,
        entries: w.entries,
        leader_commit: w.leader_commit,
    })
}

/// A Raft RPC.
#[derive(Serialize, Deserialize)]
pub(crate) enum RaftReq {
    /// At most [`MAX_APPEND_ENTRIES`] entries (a longer list does not decode), each
    /// membership capped and checked as it decodes.
    Append(#[serde(deserialize_with = "capped_append")] AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    /// Its membership capped and checked as it decodes.
    Snapshot(#[serde(deserialize_with = "checked_snapshot")] InstallSnapshotRequest<TypeConfig>),
    PreVote(PreVoteRequest),
}

/// A Raft RPC's answer on the wire.
#[derive(Serialize, Deserialize)]
pub(crate) enum RaftResp {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    PreVote(PreVoteResponse),
    /// Not served: the sender's settings differ from the receiver's, which are these
    /// (`None`: the receiver has not started).
    SettingsDiffer(Option<ServiceConfig>),
}

/// Serves Raft RPCs (and pre-votes) on `listener` for the node whose [`Elector`] is
/// `elector` ([`crate::node::Node::elector`]), one task per connection, until the process
/// ends, under the default [`PeerPolicy`]. Requests on one connection are answered in
/// order. Errors: none (a bad peer only loses its connection).
pub async fn serve_raft(listener: TcpListener, elector: Arc<Elector>) {
    serve_peers(listener, elector, PeerPolicy::default()).await
}

/// [`serve_raft`] over mutual TLS when `tls` is given ([`crate::tls`]): a peer must
/// present a certificate signed by the cluster CA, and each request is served only if that
/// certificate names the node the request says it comes from and that node is a member
/// ([`crate::tls::check_peer`]) — before this node knows a membership, one of
/// `first_peers` ([`PeerPolicy::first_peers`]); otherwise the connection is closed
/// unanswered. Errors: none (a bad peer only loses its connection).
pub async fn serve_raft_with(
    listener: TcpListener,
    elector: Arc<Elector>,
    tls: Option<NodeTls>,
    first_peers: BTreeSet<NodeId>,
) {
    let policy = PeerPolicy {
        tls,
        first_peers,
        ..PeerPolicy::default()
    };
    serve_peers(listener, elector, policy).await
}

/// The default limit of Raft connections from one IP address: a node opens one per
/// replication stream and one per pre-vote round to each peer, so a few are normal; the
/// rest is room for clusters whose nodes share an address (several on one host).
pub const MAX_PEER_PER_ADDR: usize = 64;
/// The default limit of Raft connections at once, from all addresses: a node holds a few
/// open to each peer it talks to (a replication stream, a vote or pre-vote round, a
/// reconnect under way), so 256 is room for four from each of 64 members — far more than a
/// Raft cluster has (3 to 7 voters and a few learners) — while a flood from many addresses
/// cannot take every file descriptor of the node.
pub const MAX_PEER_CONNECTIONS: usize = 256;
/// The default idle timeout of a Raft connection: a leader sends heartbeats far more
/// often, so only a connection nobody uses is closed (its owner reconnects on its next
/// call).
pub const PEER_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default read timeout on both ports: the longest one frame may take to arrive once
/// it has started.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The snapshot chunk size a node sends (openraft's `snapshot_max_chunk_size`).
pub const SNAPSHOT_CHUNK: u64 = 3 << 20;
/// An upper bound on one encoded [`crate::types::Op`] (checked by a test on the largest
/// ones: a 64-byte lock name, every number at its widest).
pub const MAX_OP_BYTES: usize = 256;
/// An upper bound on one encoded log entry: a batch of [`crate::proposer::MAX_BATCH`] ops,
/// or a membership of [`crate::membership::MAX_MEMBERSHIP_BYTES`] (no larger), with the
/// entry's stamp and log id.
pub const MAX_ENTRY_BYTES: usize = crate::proposer::MAX_BATCH * MAX_OP_BYTES + 4096;
/// The smallest Raft frame limit a node accepts (`--max-peer-frame-bytes`), and the
/// largest frame a node sends: a snapshot chunk plus 1 MiB, and an AppendEntries of at most
/// [`entries_per_append`] entries. So nodes with different limits (each at least this)
/// always accept each other's frames.
pub const MIN_RAFT_FRAME: u32 = (SNAPSHOT_CHUNK + (1 << 20)) as u32;

/// How many entries one AppendEntries carries (openraft's `max_payload_entries`) so that it
/// fits in [`MIN_RAFT_FRAME`] with 64 KiB to spare: 59. Cost: O(1).
pub fn entries_per_append() -> u64 {
    ((MIN_RAFT_FRAME as usize - (64 << 10)) / MAX_ENTRY_BYTES).max(1) as u64
}

/// How a node's Raft port admits peers.
#[derive(Clone)]
pub struct PeerPolicy {
    /// Mutual TLS ([`serve_raft_with`]); `None`: plain TCP.
    pub tls: Option<NodeTls>,
    /// At most this many connections at once, from all addresses (TLS handshakes
    /// included); one more takes the place of the oldest that has not yet had a member's
    /// request served, or is closed at once if none. Default [`MAX_PEER_CONNECTIONS`].
    pub max_connections: usize,
    /// At most this many connections from one IP address (TLS handshakes included); one
    /// more is closed at once. Default [`MAX_PEER_PER_ADDR`].
    pub max_per_addr: usize,
    /// The largest request frame accepted, in bytes (at least [`MIN_RAFT_FRAME`] for a
    /// working cluster). Default [`MAX_RAFT_FRAME`].
    pub max_frame: u32,
    /// A connection with no request for this long is closed. Default
    /// [`PEER_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// A request must arrive whole within this long once started. Also the write timeout:
    /// an answer whose write makes no progress for this long (a peer that sends without
    /// reading) closes the connection. Default [`READ_TIMEOUT`].
    pub read_timeout: Duration,
    /// Where refusals, closes and connections are counted (the node's
    /// [`crate::ops::NodeStats::net`] for `/metrics`).
    pub stats: NetStats,
    /// With mutual TLS: the only nodes whose Raft requests are served while this node
    /// knows no membership yet — before `--init` reaches it, or before it is added as a
    /// learner (`fencelock-node` passes its `--peer` list). Any other certificate of the
    /// CA is closed before a byte it sent is read, as a non-member's is once a membership
    /// is known. Default: none (such a node waits to be initialized itself).
    pub first_peers: BTreeSet<NodeId>,
}

impl Default for PeerPolicy {
    /// Plain TCP and the defaults named on each field, with stats of its own.
    fn default() -> Self {
        PeerPolicy {
            tls: None,
            max_connections: MAX_PEER_CONNECTIONS,
            max_per_addr: MAX_PEER_PER_ADDR,
            max_frame: MAX_RAFT_FRAME,
            idle_timeout: PEER_IDLE_TIMEOUT,
            read_timeout: READ_TIMEOUT,
            stats: NetStats::default(),
            first_peers: BTreeSet::new(),
        }
    }
}

/// The `port` label of the client port's metrics.
const CLIENT: &str = "client";
/// The refusal of a second token on a connection that had one accepted.
pub const AUTHENTICATED_ALREADY: &str =
    "this connection is authenticated already: a token is accepted once per connection \
     (open a new connection for another token)";
/// The `port` label of the Raft port's metrics.
const PEER: &str = "peer";

/// A refusal or a failure is logged at most this often per kind.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The transport's counters, shown in `/metrics` (cheap to clone: shared counters).
#[derive(Clone, Debug, Default)]
pub struct NetStats {
    /// Connections closed at once by a limit, by `port` (client, peer) and `reason`
    /// (`total`: every place proven; `per_address`; `closing`: too many displaced ones
    /// still closing).
    pub refused: Family<Labels, Counter>,
    /// Connections closed by the node, by `port` and `reason` (`idle`, `read_timeout`,
    /// `write_timeout`, `oversized`, `other_version`: a frame of another wire version,
    /// `malformed`, `displaced`: an unproven connection whose place a new one took,
    /// `unauthenticated`, `not_a_member`: a peer certificate that names no member (before
    /// a membership: none of [`PeerPolicy::first_peers`]), or a request it may not send
    /// (another sender, a member removed meanwhile), `tls_handshake`: a TLS handshake that
    /// failed or timed out, or a peer without a certificate, `bad_append`: an append whose
    /// entries do not follow its previous log id one index at a time, go back a term, or
    /// carry a term above its vote's (see `bad_append`), `past_bound`: a Raft request
    /// with a term or log index past [`crate::types::RAFT_NUMBER_BOUND`],
    /// `unwritten_lists`: a client holding the most of the spent bound on unwritten list
    /// answers).
    pub closed: Family<Labels, Counter>,
    /// Encoded bytes of list answers (a lock's holders or waiters, and the other answers
    /// that grow: see `reply_out`) over [`LIST_FLOOR`] not yet written to their clients,
    /// all connections together ([`ClientPolicy::max_unwritten_list_bytes`]).
    pub unwritten_list_bytes: Gauge,
    lists: Arc<ListBudget>,
    /// Failed `accept` calls (`EMFILE`…), by `port`.
    pub accept_errors: Family<Labels, Counter>,
    /// Raft connections open now (inbound).
    pub peer_connections: Gauge,
    /// The transport's limits, by `name` (as the node runs with them).
    pub limits: Family<Labels, Gauge>,
    logged: Arc<Mutex<HashMap<String, Instant>>>,
}

/// The bound on unwritten list answers ([`NetStats::reserve_list`]), and the shares of
/// the connections that hold them ([`NetStats::list_share`]).
#[derive(Debug)]
struct ListBudget {
    used: AtomicUsize,
    limit: AtomicUsize,
    /// Every connection's share, so the one holding the most can be closed when the
    /// bound is spent; dead ones are pruned when the list reaches the length beside it
    /// (twice what was live at the last pruning).
    shares: Mutex<(Vec<std::sync::Weak<ListShare>>, usize)>,
}

impl Default for ListBudget {
    fn default() -> Self {
        ListBudget {
            used: AtomicUsize::new(0),
            limit: AtomicUsize::new(MAX_UNWRITTEN_LIST_BYTES),
            shares: Mutex::new((Vec::new(), 64)),
        }
    }
}

/// One client connection's part of the bound on unwritten list answers: the encoded bytes
/// of its list answers not yet written, when each was counted, and the signal that closes
/// it when it holds the most of a spent bound while its oldest answer has waited
/// [`LIST_STALL`] ([`NetStats::reserve_list`]). Made by [`NetStats::list_share`].
#[derive(Debug, Default)]
pub struct ListShare {
    held: AtomicUsize,
    /// The answers counted and not yet dropped, by the order they were counted in: when
    /// each was.
    waiting: Mutex<BTreeMap<u64, Instant>>,
    /// The number the next answer counted gets.
    next: std::sync::atomic::AtomicU64,
    /// Told once the connection must close; its writer stops at once and drops what it
    /// holds.
    close: tokio::sync::Notify,
    closing: std::sync::atomic::AtomicBool,
}

/// A connection whose oldest unwritten list answer has waited this long is not reading
/// (a client that reads takes the largest list, ~3 MiB, in far less; one that reads
/// slowly behind a long queue makes its oldest answer wait longer and longer).
pub const LIST_STALL: Duration = Duration::from_secs(2);

impl ListShare {
    /// Bytes of list answers this connection holds unwritten. Cost: O(1).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Whether its oldest unwritten list answer has waited [`LIST_STALL`] or more.
    /// Cost: O(1) (a lock).
    pub fn stalled(&self) -> bool {
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting
            .first_key_value()
            .is_some_and(|(_, at)| at.elapsed() >= LIST_STALL)
    }

    /// Counts an answer as waiting from now; its number. Cost: O(log answers).
    fn wait(&self) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.insert(n, Instant::now());
        n
    }

    /// Resolves once the connection has been told to close: at once if it was before.
    /// Cost: O(1).
    pub async fn closed(&self) {
        let told = self.close.notified();
        if self.is_closing() {
            return;
        }
        told.await
    }

    /// Makes every waiting answer older than [`LIST_STALL`] (tests).
    #[cfg(test)]
    fn backdate(&self) {
        let long_ago = Instant::now()
            .checked_sub(LIST_STALL + Duration::from_millis(1))
            .expect("the machine is up that long");
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        for at in waiting.values_mut() {
            *at = long_ago;
        }
    }

    /// Whether the connection has been told to close, or has ended its writer. Cost:
    /// O(1).
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Marks the connection as ending: its late answers evict no one. Cost: O(1).
    fn ended(&self) {
        self.closing.store(true, Ordering::Release);
    }
}

/// Adds `bytes` to `used` if the sum stays within `limit`, or `used` is 0 (one answer is
/// served whatever its size when no other waits). Cost: O(1) (a compare-and-swap loop).
fn take_within(used: &AtomicUsize, bytes: usize, limit: usize) -> bool {
    let mut now = used.load(Ordering::Acquire);
    loop {
        if now != 0 && now.saturating_add(bytes) > limit {
            return false;
        }
        match used.compare_exchange_weak(
            now,
            now.saturating_add(bytes),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return true,
            Err(n) => now = n,
        }
    }
}

/// A list answer's encoded bytes, counted in the node's bound and in its connection's
/// share ([`NetStats::reserve_list`]) until dropped: once the answer is written, or its
/// connection ends.
#[derive(Debug)]
pub struct ListBytes {
    bytes: usize,
    lists: Arc<ListBudget>,
    conn: Arc<ListShare>,
    /// Its number among the connection's waiting answers.
    waiting: u64,
    gauge: Gauge,
}

impl Drop for ListBytes {
    fn drop(&mut self) {
        self.lists.used.fetch_sub(self.bytes, Ordering::AcqRel);
        self.conn.held.fetch_sub(self.bytes, Ordering::AcqRel);
        self.conn
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.waiting);
        self.gauge
            .dec_by(i64::try_from(self.bytes).unwrap_or(i64::MAX));
    }
}

/// List answers up to this many encoded bytes (about 6 holders with long labels, 50
/// without) are not counted in the bound on unwritten list answers: a long list that
/// others do not read never holds up a short one. They are bounded by the in-flight
/// count alone, as every other answer is ([`MAX_IN_FLIGHT`] per connection: 128 KiB of
/// them at most).
pub const LIST_FLOOR: usize = 512;

/// One connection may hold at most this fraction (1/N) of the bound on unwritten list
/// answers (besides one answer of any size, when it holds none).
pub const LIST_SHARE: usize = 8;

impl NetStats {
    /// Sets the bound on unwritten list answers, in bytes (shown as the limit
    /// `client_unwritten_list_bytes`). Cost: O(1).
    pub fn set_list_budget(&self, bytes: usize) {
        self.lists.limit.store(bytes, Ordering::Relaxed);
        self.show_limit("client_unwritten_list_bytes", bytes as u64);
    }

    /// A new connection's share of the bound on unwritten list answers, registered so
    /// that [`NetStats::reserve_list`] can close it. Cost: O(1) amortized (the registry
    /// drops the shares of ended connections each time it doubles).
    pub fn list_share(&self) -> Arc<ListShare> {
        let share = Arc::new(ListShare::default());
        let mut shares = self.lists.shares.lock().unwrap_or_else(|p| p.into_inner());
        let (list, prune_at) = &mut *shares;
        if list.len() >= *prune_at {
            list.retain(|w| w.strong_count() > 0);
            *prune_at = (2 * list.len()).max(64);
        }
        list.push(Arc::downgrade(&share));
        share
    }

    /// Counts a list answer of `bytes` (encoded) among the unwritten ones, if the node's
    /// stay within the bound with it and the connection's (`conn`) within its share
    /// ([`LIST_SHARE`]); each also takes one answer of any size when it holds none.
    /// `None`: over one of them; the caller refuses the request instead. When it is the
    /// node's bound that is spent (and `conn` is not closing), the connection holding the
    /// most of it among those whose oldest unwritten answer has waited [`LIST_STALL`] (its
    /// client is not reading, or reads too slowly to drain its queue) is also told to
    /// close, unless it is closing already: dropping its answers frees the bound for
    /// clients that read theirs, as the push budget does. A client whose answers are
    /// taken as they come is not closed for this. Cost: O(1) (two compare-and-swap loops);
    /// O(connections) when the node's bound is spent.
    pub fn reserve_list(&self, bytes: usize, conn: &Arc<ListShare>) -> Option<ListBytes> {
        let limit = self.lists.limit.load(Ordering::Relaxed);
        if !take_within(&conn.held, bytes, limit / LIST_SHARE) {
            return None;
        }
        if !take_within(&self.lists.used, bytes, limit) {
            conn.held.fetch_sub(bytes, Ordering::AcqRel);
            if !conn.is_closing() {
                self.close_largest_list_holder();
            }
            return None;
        }
        self.unwritten_list_bytes
            .inc_by(i64::try_from(bytes).unwrap_or(i64::MAX));
        Some(ListBytes {
            bytes,
            lists: self.lists.clone(),
            conn: conn.clone(),
            waiting: conn.wait(),
            gauge: self.unwritten_list_bytes.clone(),
        })
    }

    /// Tells the connection holding the most unwritten list bytes, among those not closing
    /// already and whose oldest answer has waited [`LIST_STALL`], to close. Cost:
    /// O(connections).
    fn close_largest_list_holder(&self) {
        let shares = self.lists.shares.lock().unwrap_or_else(|p| p.into_inner());
        let largest = shares
            .0
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .filter(|s| s.held() > 0 && !s.is_closing() && s.stalled())
            .max_by_key(|s| s.held());
        drop(shares);
        if let Some(s) = largest {
            if !s.closing.swap(true, Ordering::AcqRel) {
                s.close.notify_one();
            }
        }
    }

    /// Logs `msg()` as a warning unless a line of `kind` was logged within [`LOG_EVERY`].
    /// Cost: O(1) (a map lookup).
    pub fn warn(&self, kind: &str, msg: impl FnOnce() -> String) {
        let mut m = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        let due = m.get(kind).is_none_or(|t| t.elapsed() >= LOG_EVERY);
        if due {
            m.insert(kind.to_string(), Instant::now());
            drop(m);
            tracing::warn!(
                kind,
                "{} (logged at most every {} s)",
                msg(),
                LOG_EVERY.as_secs()
            );
        }
    }

    pub(crate) fn refuse(&self, port: &str, reason: &str, ip: IpAddr, limit: usize) {
        self.refused
            .get_or_create(&labels(&[("port", port), ("reason", reason)]))
            .inc();
        self.warn(&format!("refused-{port}-{reason}"), || {
            format!("refused a {port} connection from {ip}: the {reason} limit of {limit} connections is reached")
        });
    }

    /// Counts and logs (rate limited) an unproven connection closed to give its place to
    /// a new one ([`crate::admission`]).
    fn displaced(&self, port: &str) {
        self.close(port, "displaced");
        self.warn(&format!("displaced-{port}"), || {
            format!("the {port} port is full: closed its oldest connection that had not proven itself, to admit a new one")
        });
    }

    fn close(&self, port: &str, reason: &str) {
        self.closed
            .get_or_create(&labels(&[("port", port), ("reason", reason)]))
            .inc();
    }

    /// Records a limit as the node runs with it, shown as `fencelock_net_limit{name}`.
    /// Cost: O(1).
    pub fn show_limit(&self, name: &str, value: u64) {
        self.limits
            .get_or_create(&labels(&[("name", name)]))
            .set(value.min(i64::MAX as u64) as i64);
    }
}

/// Accepts the next connection; a failed accept is counted and logged (rate limited), and
/// when it failed for want of descriptors or memory (`EMFILE`, `ENFILE`, `ENOBUFS`,
/// `ENOMEM`) retried after `backoff`, which doubles from 10 ms up to 1 s.
async fn accept(
    listener: &TcpListener,
    port: &str,
    stats: &NetStats,
    backoff: &mut Duration,
) -> (TcpStream, std::net::SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(x) => {
                *backoff = Duration::ZERO;
                // Without it the connection lives on (a failure leaves it as it was).
                let _ = keep_alive(&x.0);
                return x;
            }
            Err(e) => {
                stats
                    .accept_errors
                    .get_or_create(&labels(&[("port", port)]))
                    .inc();
                stats.warn(&format!("accept-{port}"), || {
                    format!("accepting a {port} connection failed: {e}; retrying (it waits in the listen backlog)")
                });
                // Out of descriptors or memory: retrying at once would spin. Anything
                // else (a connection reset before it was accepted) concerns that one
                // connection only.
                use nix::errno::Errno;
                let scarce = e.raw_os_error().is_some_and(|n| {
                    [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM]
                        .contains(&Errno::from_raw(n))
                });
                if scarce {
                    *backoff =
                        (*backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                    tokio::time::sleep(*backoff).await;
                }
            }
        }
    }
}

/// Silence on a connection after which the kernel starts probing its peer.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Time between two unanswered probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes after which the connection is reset.
pub const KEEPALIVE_PROBES: u32 = 3;

/// Turns on TCP keep-alive for an accepted connection: a peer that vanished without a FIN
/// or RST (a dropped NAT mapping, a machine that lost power) is found dead after a minute
/// of silence ([`KEEPALIVE_IDLE`] + [`KEEPALIVE_PROBES`] × [`KEEPALIVE_INTERVAL`]), and
/// the connection fails and closes, giving back its place in [`Admission`]. Without it a
/// dead client connection that a session is still attached to was never closed: the idle
/// timeout spares a connection with sessions attached (it may be waiting for a push), and
/// a client that reconnects attaches its session to the new connection as well. A live
/// peer's kernel answers the probes; nothing is sent above TCP. Cost: one system call.
/// Errors: the system call's.
pub(crate) fn keep_alive(sock: &TcpStream) -> io::Result<()> {
    let ka = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    socket2::SockRef::from(sock).set_tcp_keepalive(&ka)
}

/// Counts an inbound Raft connection in [`NetStats::peer_connections`] until dropped.
struct PeerGauge(Gauge);

impl Drop for PeerGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// [`serve_raft`] under `policy` (TLS as [`serve_raft_with`], and the limits of
/// [`PeerPolicy`]). Errors: none (a bad or slow peer only loses its connection). Cost per
/// connection: a task and at most `policy.max_frame` bytes of buffer while a frame arrives,
/// and what the frame decodes into (its lists capped: [`MAX_APPEND_ENTRIES`] entries of at
/// most [`crate::types::MAX_CMD_OPS`] ops).
pub async fn serve_peers(listener: TcpListener, elector: Arc<Elector>, policy: PeerPolicy) {
    // Each IPv6 address its own source: the members of a cluster often share one LAN's
    // /64, and counted together they would share one limit.
    let admission = Admission::new(policy.max_connections, policy.max_per_addr);
    let stats = &policy.stats;
    // The limits as the node runs with them: a total clamped by `Admission::new` shows
    // the clamped figure.
    stats.show_limit("peer_connections", admission.total() as u64);
    stats.show_limit("peer_connections_per_address", policy.max_per_addr as u64);
    stats.show_limit("peer_frame_bytes", policy.max_frame.into());
    stats.show_limit(
        "peer_idle_timeout_ms",
        policy.idle_timeout.as_millis() as u64,
    );
    stats.show_limit(
        "peer_read_timeout_ms",
        policy.read_timeout.as_millis() as u64,
    );
    let mut backoff = Duration::ZERO;
    loop {
        let (sock, from) = accept(&listener, PEER, &policy.stats, &mut backoff).await;
        let admitted = match admission.admit(from.ip()) {
            Ok(a) => a,
            Err((reason, limit)) => {
                policy.stats.refuse(PEER, reason, from.ip(), limit);
                continue; // dropped: closed at once
            }
        };
        let _ = sock.set_nodelay(true);
        let raft = elector.clone();
        let policy = policy.clone();
        tokio::spawn(async move {
            policy.stats.peer_connections.inc();
            let _gauge = PeerGauge(policy.stats.peer_connections.clone());
            let conn = async {
                let Some(tls) = policy.tls.clone() else {
                    let (r, w) = sock.into_split();
                    return raft_conn(r, w, raft, None, Some(&admitted), &policy).await;
                };
                let Ok(Ok(s)) =
                    tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.peers.accept(sock)).await
                else {
                    policy.stats.close(PEER, "tls_handshake");
                    return;
                };
                let Some(cert) = s.get_ref().1.peer_certificates().and_then(|c| c.first()) else {
                    policy.stats.close(PEER, "tls_handshake");
                    return;
                };
                let cert = cert.clone().into_owned();
                let (r, w) = tokio::io::split(s);
                raft_conn(r, w, raft, Some(cert), Some(&admitted), &policy).await
            };
            admitted.serve(conn, || policy.stats.displaced(PEER)).await
        });
    }
}

/// Counts and logs why a connection's frame could not be read; returns the reason.
fn read_failed(stats: &NetStats, port: &str, e: &io::Error) -> &'static str {
    let reason = if frame::is_oversized(e) {
        "oversized"
    } else if frame::other_version(e).is_some() {
        "other_version"
    } else if e.kind() == io::ErrorKind::TimedOut {
        "read_timeout"
    } else {
        "malformed"
    };
    stats.close(port, reason);
    if reason != "malformed" {
        stats.warn(&format!("closed-{port}-{reason}"), || {
            format!("closed a {port} connection: {e}")
        });
    }
    reason
}

/// The node a Raft request says it comes from: the vote's node.
fn sender(req: &RaftReq) -> Option<NodeId> {
    let vote = match req {
        RaftReq::Append(x) => &x.vote,
        RaftReq::Vote(x) => &x.vote,
        RaftReq::Snapshot(x) => &x.vote,
        RaftReq::PreVote(x) => return Some(x.candidate),
    };
    vote.leader_id().voted_for()
}

/// `what`'s term, named, if it is at or past [`crate::types::RAFT_NUMBER_BOUND`].
fn vote_past_bound(what: &str, v: &crate::types::Vote) -> Option<String> {
    (!vote_in_bounds(v)).then(|| format!("{what} term {}", v.leader_id().get_term()))
}

/// `what`, named, if its term or index is at or past [`crate::types::RAFT_NUMBER_BOUND`].
fn id_past_bound(what: &str, l: &Option<crate::types::LogId>) -> Option<String> {
    l.as_ref()
        .filter(|l| !log_id_in_bounds(l))
        .map(|l| format!("{what} {l}"))
}

/// The first term or log index in `req` at or past [`crate::types::RAFT_NUMBER_BOUND`],
/// named: no such request is served, whoever sends it (a member's included). Cost:
/// O(entries).
fn past_bound(req: &RaftReq) -> Option<String> {
    let (vote, id) = (vote_past_bound, id_past_bound);
    match req {
        RaftReq::Append(x) => vote("vote", &x.vote)
            .or_else(|| id("previous log id", &x.prev_log_id))
            .or_else(|| id("commit point", &x.leader_commit))
            .or_else(|| {
                x.entries
                    .iter()
                    .find_map(|e| id("entry log id", &Some(e.log_id)))
            }),
        RaftReq::Vote(x) => vote("vote", &x.vote).or_else(|| id("last log id", &x.last_log_id)),
        RaftReq::Snapshot(x) => vote("vote", &x.vote)
            .or_else(|| id("snapshot log id", &x.meta.last_log_id))
            .or_else(|| id("membership log id", x.meta.last_membership.log_id())),
        RaftReq::PreVote(x) => id("last log id", &x.last_log_id),
    }
}

/// What is wrong with an append's shape, if anything: entries that do not follow its
/// previous log id one index at a time, a term that goes back (below the previous log
/// id's or an earlier entry's), or a term above the vote it is sent under. A leader sends
/// only appends of that shape (one deposed meanwhile could still send its stream's last,
/// under its old vote, which this node would refuse as stale anyway); openraft checks it only in debug builds, and this
/// node's log would take such an append as it is — a hole or a term going back, which
/// stops Raft when it applies past it and makes the log refuse to open at the next start
/// (`LogStore::open`'s order check). No such request is served, whoever sends it (a
/// member's included). This is the one check: the log store writes what openraft hands
/// it, as openraft's storage suite requires of it. Cost: O(entries).
fn bad_append(req: &RaftReq) -> Option<String> {
    let RaftReq::Append(x) = req else {
        return None;
    };
    let vote_term = x.vote.leader_id().get_term();
    let mut prev = x.prev_log_id;
    if let Some(p) = prev.filter(|p| p.leader_id.get_term() > vote_term) {
        return Some(format!(
            "previous log id {p} has a term above its vote's, {vote_term}"
        ));
    }
    for e in &x.entries {
        let id = e.log_id;
        let expected = prev.map_or(0, |p| p.index + 1);
        if id.index != expected {
            return Some(format!(
                "entry {} where entry {expected} must come next",
                id.index
            ));
        }
        let term = id.leader_id.get_term();
        if let Some(p) = prev.filter(|p| term < p.leader_id.get_term()) {
            return Some(format!(
                "entry {} has term {term}, below the term {} of the entry before it",
                id.index,
                p.leader_id.get_term()
            ));
        }
        if term > vote_term {
            return Some(format!(
                "entry {} has term {term}, above its vote's, {vote_term}",
                id.index
            ));
        }
        prev = Some(id);
    }
    None
}

/// [`past_bound`] for an answer: a peer's answer carrying such a number is not taken.
/// Cost: O(1).
fn answer_past_bound(resp: &RaftResp) -> Option<String> {
    let (vote, id) = (vote_past_bound, id_past_bound);
    match resp {
        RaftResp::Append(Ok(AppendEntriesResponse::HigherVote(v))) => vote("vote", v),
        RaftResp::Append(Ok(AppendEntriesResponse::PartialSuccess(l))) => id("log id", l),
        RaftResp::Vote(Ok(v)) => vote("vote", &v.vote).or_else(|| id("log id", &v.last_log_id)),
        RaftResp::Snapshot(Ok(v)) => vote("vote", &v.vote),
        RaftResp::PreVote(v) => v.leader_vote.as_ref().and_then(|v| vote("vote", v)),
        _ => None,
    }
}

/// What [`raft_conn`] makes of a decoded request before it serves it (past the bound or
/// not, and the sender it names), with the request re-encoded; for
/// [`crate::fuzzing::peer_call`]. Cost: O(request).
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_peer_call(call: RaftCall) -> crate::fuzzing::PeerCall {
    if let Some(what) = past_bound(&call.req) {
        return crate::fuzzing::PeerCall::PastBound(what);
    }
    if let Some(what) = bad_append(&call.req) {
        return crate::fuzzing::PeerCall::BadAppend(what);
    }
    crate::fuzzing::PeerCall::Served {
        sender: sender(&call.req),
        reencoded: frame::encode(&call).expect("a decoded request re-encodes"),
    }
}

/// What a node's client side makes of a decoded answer ([`answer_past_bound`]), with the
/// answer re-encoded; for [`crate::fuzzing::peer_answer`]. Cost: O(answer).
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_peer_answer(resp: RaftResp) -> (Option<String>, Vec<u8>) {
    let bytes = frame::encode(&resp).expect("a decoded answer re-encodes");
    (answer_past_bound(&resp), bytes)
}

/// Seeds for [`crate::fuzzing::peer_seeds`]: requests and answers as this build writes
/// them. Cost: O(entries).
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_peer_seeds(cmds: &[crate::types::Cmd]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    use crate::types::{Entry, LogId, Vote};
    use openraft::{CommittedLeaderId, EntryPayload};
    let settings = ServiceConfig::default();
    let vote = Vote::new_committed(2, 1);
    let last = Some(LogId::new(CommittedLeaderId::new(1, 1), 7));
    let entries = cmds
        .iter()
        .enumerate()
        .map(|(i, c)| Entry {
            log_id: LogId::new(CommittedLeaderId::new(2, 1), 8 + i as u64),
            payload: EntryPayload::Normal(c.clone()),
        })
        .collect();
    let reqs = [
        RaftReq::Vote(VoteRequest::new(Vote::new(2, 1), last)),
        RaftReq::PreVote(PreVoteRequest {
            candidate: 1,
            last_log_id: last,
        }),
        RaftReq::Append(AppendEntriesRequest {
            vote,
            prev_log_id: last,
            entries,
            leader_commit: last,
        }),
        RaftReq::Snapshot(InstallSnapshotRequest {
            vote,
            meta: Default::default(),
            offset: 0,
            data: vec![1, 2, 3],
            done: true,
        }),
    ];
    let calls = reqs
        .into_iter()
        .map(|req| frame::encode(&RaftCall { settings, req }).expect("encodes"))
        .collect();
    let resps = [
        RaftResp::Vote(Ok(VoteResponse::new(vote, last, true))),
        RaftResp::Append(Ok(AppendEntriesResponse::Success)),
        RaftResp::PreVote(PreVoteResponse {
            granted: true,
            leader_vote: Some(vote),
        }),
        RaftResp::SettingsDiffer(Some(settings)),
    ];
    let answers = resps
        .iter()
        .map(|r| frame::encode(r).expect("encodes"))
        .collect();
    (calls, answers)
}

/// The committed vote `req` is sent under if it is a leader's (an append or a snapshot;
/// its sender, [`sender`], is the leader the vote names). Cost: O(1).
fn leader_vote(req: &RaftReq) -> Option<&crate::types::Vote> {
    let vote = match req {
        RaftReq::Append(x) => &x.vote,
        RaftReq::Snapshot(x) => &x.vote,
        RaftReq::Vote(_) | RaftReq::PreVote(_) => return None,
    };
    vote.is_committed().then_some(vote)
}

/// Serves one peer connection's Raft requests in order. With `cert` (mutual TLS), the
/// connection is closed before anything is read unless the certificate names a member
/// ([`crate::tls::check_member_cert`], counted as `not_a_member`), and a request is served
/// only if [`check_peer`] allows its sender; the first that is not ends the connection
/// unanswered. The first request served proves the connection's
/// place (`admitted`, [`Admitted::prove`]): with mutual TLS, a member's; without, any
/// whole request.
async fn raft_conn<R, W>(
    r: R,
    w: W,
    raft: Arc<Elector>,
    cert: Option<CertificateDer<'static>>,
    mut admitted: Option<&Admitted>,
    policy: &PeerPolicy,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if let Some(cert) = &cert {
        let member = match raft.bound_raft() {
            None => Err(("not_started", "this node has not started yet".to_string())),
            Some(r) => {
                crate::tls::check_member_cert(r, cert, &raft.vouched_leaders(), &policy.first_peers)
                    .map_err(|e| ("not_a_member", e))
            }
        };
        if let Err((reason, e)) = member {
            policy.stats.close(PEER, reason);
            policy.stats.warn("refused-peer-not-a-member", || {
                format!("refused a Raft connection before reading it: {e}")
            });
            return;
        }
    }
    let mut r = BufReader::new(r);
    let mut w = BufWriter::new(w);
    loop {
        let next = frame::read_timed::<_, RaftCall>(
            &mut r,
            policy.max_frame,
            policy.idle_timeout,
            policy.read_timeout,
        )
        .await;
        let call: RaftCall = match next {
            Ok(Next::Frame(call)) => call,
            Ok(Next::End) => break,
            Ok(Next::Idle) => {
                policy.stats.close(PEER, "idle");
                break;
            }
            Err(e) => {
                if read_failed(&policy.stats, PEER, &e) == "other_version" {
                    // Told this node's version the way every version reads, so its log
                    // names both (`TcpConn::call`).
                    let only = frame::version_only(PEER_WIRE);
                    let _ = frame::write_all_progressing(&mut w, &only, policy.read_timeout).await;
                }
                break;
            }
        };
        let req = call.req;
        if let Some(cert) = &cert {
            let from = sender(&req);
            if let Err(e) = from.ok_or_else(|| "no sender".to_string()).and_then(|id| {
                let r = raft.bound_raft().ok_or("not started yet")?;
                let vouched = || leader_vote(&req).is_some_and(|v| raft.vouched(v));
                check_peer(r, cert, id, &policy.first_peers, vouched)
            }) {
                policy.stats.close(PEER, "not_a_member");
                policy.stats.warn("refused-peer-not-a-member", || {
                    format!("refused a Raft request from node {from:?}: {e}")
                });
                break;
            }
        }
        if let Some(what) = past_bound(&req) {
            policy.stats.close(PEER, "past_bound");
            policy.stats.warn("refused-peer-past-bound", || {
                format!(
                    "refused a Raft request from node {:?}: its {what} is not below 2^62, as no real term or log index comes near",
                    sender(&req)
                )
            });
            break;
        }
        if let Some(what) = bad_append(&req) {
            policy.stats.close(PEER, "bad_append");
            policy.stats.warn("refused-peer-bad-append", || {
                format!(
                    "refused an append from node {:?}: {what} (no current leader sends such an append: a forged one, or a stale stream of a deposed leader; taken, this node's log would not open again)",
                    sender(&req)
                )
            });
            break;
        }
        // A peer of other settings is answered with ours and served nothing; its
        // requests do not prove the connection's place.
        let resp = if let Err(ours) = raft.settings().admit(sender(&req), &call.settings) {
            RaftResp::SettingsDiffer(ours)
        } else {
            if let Some(a) = admitted.take() {
                if !a.prove() {
                    break; // displaced meanwhile: its place is another's
                }
            }
            serve(&raft, req).await
        };
        // A peer that sends without reading would hold this write (and its connection
        // place) for ever: a write that makes no progress for the read timeout ends it.
        let Ok(bytes) = frame::encode(&resp) else {
            break;
        };
        if let Err(e) = frame::write_all_progressing(&mut w, &bytes, policy.read_timeout).await {
            if e.kind() == io::ErrorKind::TimedOut {
                policy.stats.close(PEER, "write_timeout");
            }
            break;
        }
    }
}

/// One Raft request served by `raft`.
async fn serve(raft: &Elector, req: RaftReq) -> RaftResp {
    match req {
        RaftReq::Append(x) => RaftResp::Append(raft.append_entries(x).await),
        RaftReq::Vote(x) => RaftResp::Vote(raft.vote(x).await),
        RaftReq::Snapshot(x) => RaftResp::Snapshot(raft.install_snapshot(x).await),
        RaftReq::PreVote(x) => RaftResp::PreVote(raft.pre_vote(&x)),
    }
}

/// `addr` as a socket address if it is a loopback one: the only kind a node without TLS
/// listens on or dials (plain TCP is for local development).
///
/// Errors: an unparsable or non-loopback address, described.
pub fn loopback_addr(addr: &str) -> Result<std::net::SocketAddr, String> {
    let a: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| format!("bad address {addr}: {e}"))?;
    // An IPv4 loopback address written in IPv6 (`::ffff:127.0.0.1`) is one too.
    if !a.ip().to_canonical().is_loopback() {
        return Err(format!("{addr} is not a loopback address (refused)"));
    }
    Ok(a)
}

/// Opens Raft connections by the target's `raft` address (loopback addresses only: a
/// member added with another address is unreachable, never dialled), or by this node's
/// own override for that target ([`TcpNetwork::dial_via`]: a fault-injecting proxy in the
/// partition tests).
#[derive(Clone, Default)]
pub struct TcpNetwork {
    dial: Arc<BTreeMap<NodeId, String>>,
    peers: Arc<PeerSettings>,
}

impl TcpNetwork {
    /// A network that dials `dial[id]` instead of node `id`'s `raft` address (the others
    /// as usual). Only loopback overrides are ever dialled. Cost: O(1).
    pub fn dial_via(dial: BTreeMap<NodeId, String>) -> TcpNetwork {
        TcpNetwork {
            dial: Arc::new(dial),
            peers: Arc::default(),
        }
    }

    fn addr_of(&self, target: NodeId, node: &NodeAddr) -> String {
        self.dial
            .get(&target)
            .cloned()
            .unwrap_or_else(|| node.raft.clone())
    }
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpConn;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> TcpConn {
        TcpConn {
            addr: self.addr_of(target, node),
            tls: None,
            conn: None,
            to: target,
            peers: self.peers.clone(),
        }
    }
}

impl CarrySettings for TcpNetwork {
    fn carry(&mut self, peers: Arc<PeerSettings>) {
        self.peers = peers;
    }
}

/// Opens Raft connections over mutual TLS: presents this node's certificate and
/// verifies the peer's for the name `fencelock-node-<target id>` ([`crate::tls`]).
/// Addresses are dialled as given.
#[derive(Clone)]
pub struct TlsNetwork {
    tls: NodeTls,
    peers: Arc<PeerSettings>,
}

impl TlsNetwork {
    /// A network that dials with `tls` (the node's certificate and the cluster CA). Cost:
    /// O(1).
    pub fn new(tls: NodeTls) -> TlsNetwork {
        TlsNetwork {
            tls,
            peers: Arc::default(),
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for TlsNetwork {
    type Network = TcpConn;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> TcpConn {
        let name = ServerName::try_from(node_name(target)).ok();
        TcpConn {
            addr: node.raft.clone(),
            tls: name.map(|n| (self.tls.dial.clone(), n)),
            conn: None,
            to: target,
            peers: self.peers.clone(),
        }
    }
}

impl CarrySettings for TlsNetwork {
    fn carry(&mut self, peers: Arc<PeerSettings>) {
        self.peers = peers;
    }
}

impl PreVoteNetwork for TlsNetwork {
    /// A pre-vote on a mutual-TLS connection of its own (elections are rare), dropped
    /// afterwards.
    async fn pre_vote(
        &self,
        target: NodeId,
        node: &NodeAddr,
        req: PreVoteRequest,
        timeout: Duration,
    ) -> Option<PreVoteResponse> {
        let name = ServerName::try_from(node_name(target)).ok()?;
        let c = TcpConn {
            addr: node.raft.clone(),
            tls: Some((self.tls.dial.clone(), name)),
            conn: None,
            to: target,
            peers: self.peers.clone(),
        };
        pre_vote_on(c, req, timeout).await
    }
}

impl PreVoteNetwork for TcpNetwork {
    /// A pre-vote on a connection of its own (elections are rare), dropped afterwards.
    async fn pre_vote(
        &self,
        target: NodeId,
        node: &NodeAddr,
        req: PreVoteRequest,
        timeout: Duration,
    ) -> Option<PreVoteResponse> {
        let c = TcpConn {
            addr: self.addr_of(target, node),
            tls: None,
            conn: None,
            to: target,
            peers: self.peers.clone(),
        };
        pre_vote_on(c, req, timeout).await
    }
}

/// One pre-vote over `c`; `None` without an answer within `timeout`.
async fn pre_vote_on(
    mut c: TcpConn,
    req: PreVoteRequest,
    timeout: Duration,
) -> Option<PreVoteResponse> {
    match c.call(RaftReq::PreVote(req), timeout).await {
        Ok(RaftResp::PreVote(r)) => Some(r),
        _ => None,
    }
}

type BoxRead = Box<dyn AsyncRead + Send + Sync + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Sync + Unpin>;

/// One node's connection to another (reconnects after any error).
pub struct TcpConn {
    addr: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    conn: Option<(BufReader<BoxRead>, BufWriter<BoxWrite>)>,
    /// The node dialled.
    to: NodeId,
    /// This node's settings, sent with every request, and where answers are noted.
    peers: Arc<PeerSettings>,
}

enum CallError {
    Unreachable(io::Error),
    Network(io::Error),
}

impl TcpConn {
    async fn call(&mut self, req: RaftReq, ttl: Duration) -> Result<RaftResp, CallError> {
        let res = tokio::time::timeout(ttl, self.call_inner(req)).await;
        let res = match res {
            Ok(r) => r,
            Err(_) => Err(CallError::Network(io::Error::new(
                io::ErrorKind::TimedOut,
                "rpc timed out",
            ))),
        };
        if res.is_err() {
            self.conn = None;
        }
        match res {
            Ok(RaftResp::SettingsDiffer(theirs)) => Err(CallError::Unreachable(
                self.peers.refused_by(self.to, theirs.as_ref()),
            )),
            Ok(resp) => match answer_past_bound(&resp) {
                Some(what) => {
                    self.conn = None;
                    Err(CallError::Network(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "node {} answered with a {what}, not below 2^62: not taken",
                            self.to
                        ),
                    )))
                }
                None => {
                    self.peers.served_by(self.to);
                    Ok(resp)
                }
            },
            Err(e) => Err(e),
        }
    }

    /// One request and its answer. The connection is taken out of `self.conn` for the call
    /// and put back only once the answer is read whole: answers carry no request id, so a
    /// call dropped half way — openraft times each out itself, around this, with the same
    /// ttl (which timer fires first is a matter of rounding), or aborts its task — must
    /// take its connection with it, or the next call would read this one's late answer as
    /// its own (a follower's `Success` for entries it has not written yet).
    async fn call_inner(&mut self, req: RaftReq) -> Result<RaftResp, CallError> {
        let Some(settings) = self.peers.ours() else {
            return Err(CallError::Unreachable(io::Error::other(
                "this node has not started",
            )));
        };
        if self.conn.is_none() {
            // Without TLS only loopback addresses are dialled; with it, any address.
            let s = match &self.tls {
                None => {
                    let addr = loopback_addr(&self.addr).map_err(|e| {
                        CallError::Unreachable(io::Error::new(io::ErrorKind::InvalidInput, e))
                    })?;
                    TcpStream::connect(addr).await
                }
                Some(_) => TcpStream::connect(self.addr.as_str()).await,
            }
            .map_err(CallError::Unreachable)?;
            let _ = s.set_nodelay(true);
            let (r, w): (BoxRead, BoxWrite) = match &self.tls {
                None => {
                    let (r, w) = s.into_split();
                    (Box::new(r), Box::new(w))
                }
                Some((dial, name)) => {
                    let t = dial
                        .connect(name.clone(), s)
                        .await
                        .map_err(CallError::Unreachable)?;
                    let (r, w) = tokio::io::split(t);
                    (Box::new(r), Box::new(w))
                }
            };
            self.conn = Some((BufReader::new(r), BufWriter::new(w)));
        }
        let Some((mut r, mut w)) = self.conn.take() else {
            return Err(CallError::Unreachable(io::Error::other("no connection")));
        };
        let call = RaftCall { settings, req };
        frame::write(&mut w, &call)
            .await
            .map_err(CallError::Network)?;
        match frame::read::<_, RaftResp>(&mut r, MAX_RAFT_REPLY).await {
            Ok(Some(resp)) => {
                self.conn = Some((r, w));
                Ok(resp)
            }
            Ok(None) => Err(CallError::Network(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ))),
            Err(e) => match frame::other_version(&e) {
                Some(v) => Err(CallError::Unreachable(
                    self.peers.other_version_at(self.to, v),
                )),
                None => Err(CallError::Network(e)),
            },
        }
    }
}

fn rpc_err<E: std::error::Error>(e: CallError) -> RPCError<NodeId, NodeAddr, E> {
    match e {
        CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
        CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
    }
}

/// A peer's answer as openraft takes it: an error the peer answered is the peer's own
/// (`RemoteError`), not a network fault, so openraft can act on it — a snapshot mismatch
/// restarts the transfer from offset 0 (a follower that restarted mid-transfer, or one
/// refusing a chunk past its limit), and a follower whose Raft stopped is seen as stopped
/// rather than retried as if the network were flaky. Cost: O(1).
pub(crate) fn remote<T, E: std::error::Error>(
    to: NodeId,
    r: Result<T, E>,
) -> Result<T, RPCError<NodeId, NodeAddr, E>> {
    r.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(to, e)))
}

fn unexpected<E: std::error::Error>() -> RPCError<NodeId, NodeAddr, E> {
    RPCError::Network(NetworkError::new(&io::Error::other(
        "mismatched rpc response",
    )))
}

impl RaftNetwork<TypeConfig> for TcpConn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        match self.call(RaftReq::Append(rpc), option.hard_ttl()).await {
            Ok(RaftResp::Append(r)) => remote(self.to, r),
            Ok(_) => Err(unexpected()),
            Err(e) => Err(rpc_err(e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeAddr, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self.call(RaftReq::Snapshot(rpc), option.hard_ttl()).await {
            Ok(RaftResp::Snapshot(r)) => remote(self.to, r),
            Ok(_) => Err(unexpected()),
            Err(e) => Err(rpc_err(e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        match self.call(RaftReq::Vote(rpc), option.hard_ttl()).await {
            Ok(RaftResp::Vote(r)) => remote(self.to, r),
            Ok(_) => Err(unexpected()),
            Err(e) => Err(rpc_err(e)),
        }
    }
}

/// Requests one client connection may have in flight at once, counted until the reply is
/// written to the socket: a client that sends without reading stops being read once this
/// many replies are waiting for it (TCP backpressure), so it cannot grow the node's memory.
pub const MAX_IN_FLIGHT: usize = 256;

/// Serves the client protocol on `listener` for `node`, one task per connection, until
/// the process ends, admitting every client as an administrator (no tokens): for tests
/// and a cluster on a trusted host; see [`serve_clients_with`]. Requests on a connection
/// run concurrently (at most [`MAX_IN_FLIGHT`]); replies carry the request id. Pushes
/// queue at most [`PUSH_BACKLOG`] deep, and [`MAX_QUEUED_PUSHES`] for all connections
/// together; a connection that falls further behind is closed.
/// Errors: none (a bad or stalled client only loses its connection).
pub async fn serve_clients(listener: TcpListener, node: Arc<Node>) {
    serve_clients_with(listener, node, ClientPolicy::default()).await
}

/// How a node's client port admits clients.
#[derive(Clone)]
pub struct ClientPolicy {
    /// TLS for the client port ([`NodeTls::clients`]); `None`: plain TCP.
    pub tls: Option<TlsAcceptor>,
    /// The accepted bearer tokens: a connection must present one
    /// ([`crate::protocol::Request::Authenticate`]) before anything else, and each
    /// request must be allowed by its grants. `None`: every connection may do everything.
    pub tokens: Option<Arc<Tokens>>,
    /// At most this many client connections at once (TLS handshakes included); one more
    /// takes the place of the oldest that has not yet had a token accepted (on a node
    /// without tokens, sent a whole request), or is closed at once if none. Default
    /// [`MAX_CLIENT_CONNECTIONS`].
    pub max_connections: usize,
    /// At most this many of them from one IP address; one more is closed at once.
    /// Default [`MAX_CLIENT_PER_ADDR`].
    pub max_per_addr: usize,
    /// How many leading bits of an IPv6 address name its source for `max_per_addr`: 128
    /// (the default) counts each address alone; 64 counts a /64, within which one host may
    /// use any number of addresses, but so may every host of the LAN (or, with some
    /// Kubernetes address plans, of the cluster), which then share the limit. An
    /// IPv4-mapped address counts as its IPv4 address either way.
    pub ipv6_prefix_len: u8,
    /// The largest request frame accepted, in bytes: a longer one is answered
    /// [`ServerFrame::Malformed`] naming the limit, and the connection closed. Default
    /// [`MAX_CLIENT_FRAME`].
    pub max_frame: u32,
    /// A connection with no request for this long, no session attached and nothing in
    /// flight is closed. Default [`CLIENT_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// A request must arrive whole within this long once started; otherwise it is
    /// answered [`ServerFrame::Malformed`] and the connection closed. Also the write
    /// timeout: a reply or push whose write makes no progress for this long (the client
    /// stopped reading, or sent EOF and reads no more) closes the connection, whatever it
    /// has in flight or attached; and how long a closing connection may take to flush
    /// what is left for it. Default [`READ_TIMEOUT`].
    pub read_timeout: Duration,
    /// On a node with tokens, a connection that has had no token accepted this long after
    /// it started (its TLS handshake done) is closed, counted as `auth_timeout`, whatever
    /// it sends meanwhile: a request before the token is answered `Unauthenticated` and
    /// reads nothing else, so a client that keeps sending such requests (or never reads
    /// their answers) would otherwise hold its place until a new connection displaced it.
    /// Default [`AUTH_TIMEOUT`].
    pub auth_timeout: Duration,
    /// At most this many pushes queued for all client connections together (besides
    /// [`PUSH_BACKLOG`] for each): when a push finds them spent, the connection holding
    /// the most is closed ([`crate::state_machine::Hub`]). Default [`MAX_QUEUED_PUSHES`].
    pub max_queued_pushes: usize,
    /// At most this many bytes of list answers (a lock's holders or waiters, and the
    /// other answers that grow: see `reply_out`) computed and not yet written, for all
    /// client connections together: a list request that would
    /// take them past it is answered `Limit { kind: "unwritten_lists" }` (one answer is
    /// served whatever its size when no other waits). Default [`MAX_UNWRITTEN_LIST_BYTES`].
    pub max_unwritten_list_bytes: usize,
}

/// The default bound on list answers (a lock's holders or waiters) encoded and not yet
/// written, all client connections together: 64 MiB, of which one connection may hold
/// 1/[`LIST_SHARE`]. Without it, a client that asked for a long list many times over, on
/// many connections, and read none of the answers, held the node's memory: each request
/// in flight (up to [`MAX_IN_FLIGHT`] per connection) may hold an answer of up to
/// [`MAX_SERVER_FRAME`] bytes. Every answer over [`LIST_FLOOR`] bytes counts here: besides
/// the lists, an admin's backup pages (up to [`crate::protocol::BACKUP_PAGE`] each), export
/// pages (some 40 KiB) and the answers that list a large membership (`Members`, `Status`:
/// up to 64 KiB). Shorter answers, and refusals, are bounded by the in-flight count
/// alone. When it is spent, the connection holding the most of it is closed
/// ([`NetStats::reserve_list`]).
pub const MAX_UNWRITTEN_LIST_BYTES: usize = 64 << 20;

/// The default limit of client connections from one IP address.
pub const MAX_CLIENT_PER_ADDR: usize = 512;
/// The default idle timeout of a client connection that holds no session.
pub const CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The default time a client connection to a node with tokens has to get one accepted
/// ([`ClientPolicy::auth_timeout`]): 10 s, as long as [`READ_TIMEOUT`]. The client library
/// sends its token first, so a connection of its needs one round trip.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// The default limit of a node's concurrent client connections: each costs a task, its
/// buffers and up to [`PUSH_BACKLOG`] queued pushes (all of them together at most
/// [`MAX_QUEUED_PUSHES`]), so their number is bounded too.
pub const MAX_CLIENT_CONNECTIONS: usize = 4096;

impl Default for ClientPolicy {
    /// Plain TCP, no tokens, and the defaults named on each field.
    fn default() -> Self {
        ClientPolicy {
            tls: None,
            tokens: None,
            max_connections: MAX_CLIENT_CONNECTIONS,
            max_per_addr: MAX_CLIENT_PER_ADDR,
            ipv6_prefix_len: 128,
            max_frame: MAX_CLIENT_FRAME,
            idle_timeout: CLIENT_IDLE_TIMEOUT,
            read_timeout: READ_TIMEOUT,
            auth_timeout: AUTH_TIMEOUT,
            max_queued_pushes: MAX_QUEUED_PUSHES,
            max_unwritten_list_bytes: MAX_UNWRITTEN_LIST_BYTES,
        }
    }
}

/// [`serve_clients`] under `policy`. Errors and cost: as there; a request the connection's
/// token does not allow is answered `Unauthenticated` or `Forbidden` and not served.
pub async fn serve_clients_with(listener: TcpListener, node: Arc<Node>, policy: ClientPolicy) {
    let admission = Admission::new(policy.max_connections, policy.max_per_addr)
        .ipv6_prefix(policy.ipv6_prefix_len);
    let stats = node.stats.net.clone();
    node.stats.client_limit.store(
        admission.total() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    stats.show_limit("client_connections", admission.total() as u64);
    node.shared.hub.set_push_budget(policy.max_queued_pushes);
    stats.show_limit("client_queued_pushes", policy.max_queued_pushes as u64);
    stats.set_list_budget(policy.max_unwritten_list_bytes);
    stats.show_limit("client_connections_per_address", policy.max_per_addr as u64);
    stats.show_limit("client_frame_bytes", policy.max_frame.into());
    stats.show_limit(
        "client_idle_timeout_ms",
        policy.idle_timeout.as_millis() as u64,
    );
    stats.show_limit(
        "client_read_timeout_ms",
        policy.read_timeout.as_millis() as u64,
    );
    let mut backoff = Duration::ZERO;
    loop {
        let (sock, from) = accept(&listener, CLIENT, &stats, &mut backoff).await;
        // Over a limit: closed at once (dropped), before any handshake. Or the oldest
        // unproven connection is told to close, and this one takes its place.
        let slot = match admission.admit(from.ip()) {
            Ok(a) => a,
            Err((reason, limit)) => {
                stats.refuse(CLIENT, reason, from.ip(), limit);
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let (node, policy) = (node.clone(), policy.clone());
        tokio::spawn(async move {
            let stats = node.stats.net.clone();
            let conn = async {
                let Some(tls) = policy.tls.clone() else {
                    let (r, w) = sock.into_split();
                    return client_conn(r, w, node, Some(&slot), policy).await;
                };
                // A client that does not speak TLS (or stalls) fails here and is dropped.
                if let Ok(Ok(s)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(sock)).await {
                    let (r, w) = tokio::io::split(s);
                    client_conn(r, w, node, Some(&slot), policy).await;
                } else {
                    stats.close(CLIENT, "tls_handshake");
                }
            };
            // Displaced, it is attached to no session: no request of it was served.
            slot.serve(conn, || stats.displaced(CLIENT)).await
        });
    }
}

/// Writes `f` to a client, failing when the client takes nothing for `stall`
/// ([`frame::write_all_progressing`]). A reply that would be larger than
/// [`MAX_SERVER_FRAME`] (which a client would refuse to read) is replaced by a
/// `Limit { kind: "reply_too_large" }` refusal, counted in `stats`; pushes are far
/// smaller. Errors: I/O errors, `TimedOut` for a stalled write. Cost: O(frame size).
async fn write_to_client<W: AsyncWrite + Unpin>(
    w: &mut W,
    f: &ServerFrame,
    stats: &crate::ops::NodeStats,
    stall: Duration,
) -> io::Result<()> {
    let buf = encode_for_client(f, stats)?;
    frame::write_all_progressing(w, &buf, stall).await
}

/// `f` encoded as [`write_to_client`] writes it (a reply over [`MAX_SERVER_FRAME`]
/// replaced by its `reply_too_large` refusal). Errors: encoding failures (none expected).
/// Cost: O(frame size).
fn encode_for_client(f: &ServerFrame, stats: &crate::ops::NodeStats) -> io::Result<Vec<u8>> {
    let mut buf = frame::encode(f)?;
    let len = buf.len() - 4;
    if let (true, ServerFrame::Reply { id, .. }) = (len > MAX_SERVER_FRAME as usize, f) {
        let e = ClientError::Limit {
            kind: "reply_too_large".into(),
            message: format!(
                "the answer is {len} bytes, above the {MAX_SERVER_FRAME} bytes a client reads"
            ),
        };
        stats.refused(&e);
        buf = frame::encode(&ServerFrame::Reply {
            id: *id,
            result: Err(e),
        })?;
    }
    Ok(buf)
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the writer of a client connection writes. (As large as a `ServerFrame`, which
/// the channel carried unboxed before; boxing would allocate for every reply.)
#[allow(clippy::large_enum_variant)]
enum Out {
    /// A frame of the client protocol.
    Frame(ServerFrame),
    /// A reply frame encoded already ([`reply_out`]: a list answer).
    Encoded(Vec<u8>),
    /// The answer to a frame of another wire version ([`frame::version_only`]); the
    /// connection closes after it.
    OtherVersion,
    /// A frame after which the connection closes (a refused token's `Unauthenticated`).
    Last(ServerFrame),
}

/// What a reply holds until it is written: its request's in-flight permit (none for a
/// push), and a list answer's bytes in the node's bound ([`NetStats::reserve_list`]).
#[derive(Default)]
struct Held {
    _in_flight: Option<OwnedSemaphorePermit>,
    _list: Option<ListBytes>,
}

impl Held {
    fn new(in_flight: OwnedSemaphorePermit, list: Option<ListBytes>) -> Held {
        Held {
            _in_flight: Some(in_flight),
            _list: list,
        }
    }
}

/// The reply to request `id` as the connection's writer takes it. An answer is encoded
/// here, and one over [`LIST_FLOOR`] bytes — the kinds that grow: a lock's holders or
/// waiters, a backup, export or sessions page, or one that lists a large membership (`Members`,
/// `Status`: up to `MAX_MEMBERSHIP_BYTES`) — is counted, by the bytes it holds until
/// written, in the node's bound on unwritten list answers and in the connection's share
/// (`conn`); over either it is dropped, and the request answered `Limit { kind:
/// "unwritten_lists" }` instead. A refusal passes as it is, encoded when written.
/// Cost: O(answer).
fn reply_out(
    stats: &crate::ops::NodeStats,
    id: u64,
    result: Result<Reply, ClientError>,
    conn: &Arc<ListShare>,
) -> (Out, Option<ListBytes>) {
    let answered = result.is_ok();
    let f = ServerFrame::Reply { id, result };
    if !answered {
        return (Out::Frame(f), None);
    }
    // Encoding into a vector does not fail; if it did, the writer would say so.
    let Ok(buf) = encode_for_client(&f, stats) else {
        return (Out::Frame(f), None);
    };
    if buf.len() <= LIST_FLOOR {
        return (Out::Encoded(buf), None);
    }
    if let Some(held) = stats.net.reserve_list(buf.len(), conn) {
        return (Out::Encoded(buf), Some(held));
    }
    let e = ClientError::Limit {
        kind: "unwritten_lists".into(),
        message: format!(
            "this answer ({} bytes) would take the list answers that clients have not read \
             yet past the node's bound, or this connection's share of it; retry once they \
             are read",
            buf.len()
        ),
    };
    stats.refused(&e);
    let refusal = ServerFrame::Reply { id, result: Err(e) };
    (Out::Frame(refusal), None)
}

/// Resolves at `by` while the connection has no token accepted (`unproven`), counting
/// its close as `auth_timeout`; never otherwise. The connection's one authentication
/// deadline, awaited wherever it waits on its client (the next frame, an in-flight
/// permit).
async fn auth_deadline(by: tokio::time::Instant, unproven: bool, stats: &NetStats) {
    if !unproven {
        return std::future::pending().await;
    }
    tokio::time::sleep_until(by).await;
    stats.close(CLIENT, "auth_timeout");
}

/// Serves one client connection. Its place (`slot`) is proven by a token accepted, or
/// on a node without tokens by its first whole request ([`Admitted::prove`]).
async fn client_conn<R, W>(
    r: R,
    w: W,
    node: Arc<Node>,
    slot: Option<&Admitted>,
    policy: ClientPolicy,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let conn = node.next_conn_id();
    let _registered = node.connection(conn);
    let mut r = BufReader::new(r);
    // What this connection may do: everything without tokens, nothing until it presents one.
    let mut grants = match &policy.tokens {
        None => Some(Grants::all()),
        Some(_) => None,
    };
    // Whom an open's idempotency key is scoped to: the token's (its hash, never the token
    // itself), or, without tokens, every client alike.
    let mut principal = Principal::Anyone;
    // Each reply travels with its in-flight permit, and a list answer with its bytes in
    // the node's bound on unwritten ones: both released once the reply is written; and
    // with the count of pushes queued when it was made (`PushSink::sent`), which are
    // written before it.
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<(Out, Held, u64)>();
    let (push, mut push_rx, overflow) = node.shared.hub.sink(PUSH_BACKLOG);
    // This connection's list answers not yet written ([`reply_out`]), in bytes, and the
    // signal that closes it when it holds the most of the node's spent bound.
    let conn_lists = node.stats.net.list_share();
    let evicted = conn_lists.clone();
    let writer_done = Arc::new(Notify::new());
    let done = writer_done.clone();
    let stats = node.stats.clone();
    // Also the write timeout: a write that makes no progress for this long closes the
    // connection (a client that stops reading, or half-closes, with replies or pushes
    // pending would otherwise hold the writer, and its connection places, for ever).
    let closing_timeout = policy.read_timeout;
    // Aborted if this connection is dropped unfinished (displaced): its write half goes
    // with it, so a displaced connection's socket closes at once.
    let mut writer = AbortOnDrop(tokio::spawn(async move {
        let mut w = BufWriter::new(w);
        let mut pushes_open = true;
        // Told to close for its pushes, or a write stalled: the client is not reading.
        let mut cut_off = false;
        // A reply taken out of its queue and waiting for the pushes queued before it was
        // made (the count beside it), which go out first, one at a time: each push leaves
        // its queue (and the node's push budget) only as it is written.
        let mut waiting: Option<(Out, Held, u64)> = None;
        loop {
            // Replies first (a Malformed frame must be written before the connection
            // ends), but never ahead of a push queued before the reply was made: the
            // outputs of what was applied before an answer reach the client before it.
            let (f, permit) = match waiting.take() {
                Some((f, held, pushed)) if push_rx.taken() < pushed => {
                    match push_rx.try_recv() {
                        Ok(o) => {
                            waiting = Some((f, held, pushed));
                            (Out::Frame(ServerFrame::Push(o)), Held::default())
                        }
                        // Counted once in the queue, so there; gone only with the
                        // queue itself (the connection is ending): the reply goes.
                        Err(_) => (f, held),
                    }
                }
                Some((f, held, _)) => (f, held),
                None => tokio::select! {
                    biased;
                    _ = overflow.notified() => {
                        cut_off = true;
                        break;
                    }
                    _ = evicted.closed() => {
                        stats.net.close(CLIENT, "unwritten_lists");
                        cut_off = true;
                        break;
                    }
                    f = out_rx.recv() => match f {
                        Some(reply) => {
                            waiting = Some(reply);
                            continue;
                        }
                        None => break,
                    },
                    p = push_rx.recv(), if pushes_open => match p {
                        Some(o) => (Out::Frame(ServerFrame::Push(o)), Held::default()),
                        None => {
                            pushes_open = false;
                            continue;
                        }
                    },
                },
            };
            let closing = matches!(
                f,
                Out::Frame(ServerFrame::Malformed(_)) | Out::OtherVersion | Out::Last(_)
            );
            let write = async {
                match &f {
                    Out::Frame(f) | Out::Last(f) => {
                        write_to_client(&mut w, f, &stats, closing_timeout).await
                    }
                    Out::Encoded(buf) => {
                        frame::write_all_progressing(&mut w, buf, closing_timeout).await
                    }
                    Out::OtherVersion => {
                        let only = frame::version_only(CLIENT_WIRE);
                        frame::write_all_progressing(&mut w, &only, closing_timeout).await
                    }
                }
            };
            // A client that stops reading blocks this write: it fails once it has made no
            // progress for the read timeout, or sooner when the push queue fills and its
            // overflow ends the connection.
            let written = tokio::select! {
                r = write => match r {
                    Ok(()) => true,
                    Err(e) => {
                        if e.kind() == io::ErrorKind::TimedOut {
                            stats.net.close(CLIENT, "write_timeout");
                            cut_off = true;
                        }
                        false
                    }
                },
                _ = overflow.notified() => {
                    cut_off = true;
                    false
                }
                _ = evicted.closed() => {
                    stats.net.close(CLIENT, "unwritten_lists");
                    cut_off = true;
                    false
                }
            };
            drop(permit);
            if !written || closing {
                break;
            }
        }
        // The pushes still queued leave the node's push budget now, and the list answers
        // not written the bound on them, not when the client goes away; answers computed
        // from now on evict no one.
        evicted.ended();
        drop(push_rx);
        out_rx.close();
        while out_rx.try_recv().is_ok() {}
        // A client that is not reading would hold up the flush of what is buffered
        // forever: it is not waited for, and nobody else's is waited for long.
        if !cut_off {
            let _ = tokio::time::timeout(closing_timeout, w.shutdown()).await;
        }
        drop(w);
        done.notify_one();
    }));
    let limit = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    // The requests this connection started. Its place, and with it its bound on requests
    // in flight, are given back only once they are done, however it ends: a connection
    // whose writer ended (a failed or stalled write, a push overflow, an eviction) used
    // to give its place back at once while they ran on, so a client reconnecting at once
    // was bounded by nothing. They are waited for, not aborted: an open holds its place
    // in the per-token session quota until it is applied, and a rebuild its turn.
    let mut requests: tokio::task::JoinSet<()> = tokio::task::JoinSet::new();
    let mut proven = false;
    // A connection to a node with tokens gets one accepted by then, or is closed (a
    // timeout too large to add, as `Duration::MAX` for none, is a year).
    let now = tokio::time::Instant::now();
    let auth_by = now
        .checked_add(policy.auth_timeout)
        .unwrap_or(now + Duration::from_secs(365 * 24 * 3600));
    loop {
        // Finished requests leave the set as the connection goes on.
        while requests.try_join_next().is_some() {}
        let next = tokio::select! {
            f = frame::read_timed::<_, ClientFrame>(
                &mut r,
                policy.max_frame,
                policy.idle_timeout,
                policy.read_timeout,
            ) => f,
            _ = writer_done.notified() => break,
            _ = auth_deadline(auth_by, grants.is_none(), &node.stats.net) => break,
        };
        match next {
            Ok(Next::Frame(ClientFrame { id, req })) => {
                // Every reply holds a permit until it is written, refusals included: a
                // client that sends without reading (authenticated or not) stops being
                // read once MAX_IN_FLIGHT replies wait for it.
                let permit = tokio::select! {
                    p = limit.clone().acquire_owned() => p,
                    _ = writer_done.notified() => break,
                    // A client that sends without reading waits here, not at the read.
                    _ = auth_deadline(auth_by, grants.is_none(), &node.stats.net) => break,
                };
                let Ok(permit) = permit else { break };
                // Authentication is handled here, in order: the requests after it see it.
                let allowed = match (&req, &policy.tokens) {
                    // A token is accepted once per connection: what the connection was
                    // attached to (its sessions' pushes) was attached under those grants,
                    // so they are not replaced or narrowed afterwards.
                    (Request::Authenticate { .. }, Some(_)) if grants.is_some() => {
                        Err(Err(ClientError::BadRequest(AUTHENTICATED_ALREADY.into())))
                    }
                    (Request::Authenticate { token }, Some(tokens)) => {
                        grants = tokens.authenticate(token.as_str());
                        principal = Principal::token(token.as_str());
                        Err(match grants {
                            Some(_) => Ok(Reply::Authenticated),
                            None => Err(ClientError::Unauthenticated),
                        })
                    }
                    (_, _) => match &grants {
                        None => Err(Err(ClientError::Unauthenticated)),
                        Some(g) => g.authorize(&req).map_err(Err),
                    },
                };
                // Proven (a token accepted, or any request on a node without tokens) before
                // anything is answered or served; displaced meanwhile, it closes unserved.
                if !proven && grants.is_some() {
                    if !slot.is_none_or(Admitted::prove) {
                        break;
                    }
                    proven = true;
                }
                // A refused token ends the connection after its answer (as PostgreSQL
                // does): every guess costs a new connection — with TLS a handshake — and
                // takes one of the port's places, the per-address ones included.
                let refused_token = matches!(req, Request::Authenticate { .. }) && grants.is_none();
                if let Err(result) = allowed {
                    let reply = ServerFrame::Reply { id, result };
                    if refused_token {
                        node.stats.net.close(CLIENT, "unauthenticated");
                        let _ = out_tx.send((Out::Last(reply), Held::new(permit, None), 0));
                        break;
                    }
                    let _ = out_tx.send((Out::Frame(reply), Held::new(permit, None), 0));
                    continue;
                }
                let node = node.clone();
                let out = out_tx.clone();
                let push = push.clone();
                let lists = conn_lists.clone();
                requests.spawn(async move {
                    let result = node.handle_request_as(req, conn, &push, principal).await;
                    // Every push queued by now goes out before this answer.
                    let pushed = push.sent();
                    let (reply, list) = reply_out(&node.stats, id, result, &lists);
                    let _ = out.send((reply, Held::new(permit, list), pushed));
                });
            }
            Ok(Next::End) => break,
            Ok(Next::Idle) => {
                // Kept while it may still be answered or pushed to.
                let busy =
                    limit.available_permits() < MAX_IN_FLIGHT || node.shared.hub.has_conn(conn);
                if !busy {
                    node.stats.net.close(CLIENT, "idle");
                    break;
                }
            }
            Err(e) => {
                read_failed(&node.stats.net, CLIENT, &e);
                // A client of another wire version could not read a `Malformed`: it is
                // told this node's version the way every version reads.
                let out = match frame::other_version(&e) {
                    Some(_) => Out::OtherVersion,
                    None => Out::Frame(ServerFrame::Malformed(e.to_string())),
                };
                let _ = out_tx.send((out, Held::default(), 0));
                break;
            }
        }
    }
    // Requests still running may attach this connection, or reserve its session quota,
    // after the registrations below are dropped: marked ended first, they do neither.
    push.detach();
    node.shared.hub.detach_conn(conn);
    drop(out_tx);
    drop(push);
    // After a reader's end (EOF) the writer waits for every request's answer, each
    // holding a sender; after the writer's, nothing more can be answered, but what was
    // asked still runs to its end, within its own time limits.
    let _ = (&mut writer.0).await;
    while requests.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::SessionSecret;
    use crate::protocol::WaitSpec;
    use crate::state_machine::PushSink;
    use crate::types::{Cmd, Op};
    use fencelock::{Input, LockName, Mode, SessionId, Tick, Wait};

    /// Every accepted connection (both ports go through `accept`) has TCP keep-alive on,
    /// with the node's timings, so a peer that vanished without a FIN or RST is found
    /// dead and its place given back; a connected socket that did not pass `accept` has
    /// it off (the check reads a real setting).
    #[tokio::test]
    async fn an_accepted_connection_probes_a_silent_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let mut backoff = Duration::ZERO;
        let (sock, _) = accept(&listener, CLIENT, &NetStats::default(), &mut backoff).await;
        let s = socket2::SockRef::from(&sock);
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(s.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(s.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        assert!(!socket2::SockRef::from(&client).keepalive().unwrap());
    }

    /// The frame bounds rest on MAX_OP_BYTES: the widest ops encode within it, and a full
    /// batch of them within MAX_ENTRY_BYTES.
    #[test]
    fn the_largest_ops_fit_the_frame_bounds() {
        let name = LockName::new(&"\u{10348}".repeat(fencelock::MAX_NAME_LEN / 4)).unwrap();
        assert_eq!(name.as_str().len(), fencelock::MAX_NAME_LEN);
        let secret = SessionSecret([0xff; 16]);
        let (now, session) = (Tick(u64::MAX), SessionId(u64::MAX));
        let widest = [
            Op::Owned {
                input: Input::Acquire {
                    now,
                    session,
                    lock: name.clone(),
                    mode: Mode::Shared,
                    wait: Wait::Until(Tick(u64::MAX)),
                    request: Some(u64::MAX),
                },
                secret,
            },
            Op::Owned {
                input: Input::Release {
                    now,
                    session,
                    lock: name.clone(),
                    request: Some(u64::MAX),
                },
                secret,
            },
            Op::Open {
                ttl: u64::MAX,
                key: Some(crate::auth::OpenKey(u128::MAX)),
                secret,
            },
            Op::OpenAs {
                ttl: u64::MAX,
                key: Some(crate::auth::OpenKey(u128::MAX)),
                secret,
                label: Some(
                    fencelock::Label::new(&"\u{10348}".repeat(fencelock::MAX_LABEL_LEN / 4))
                        .unwrap(),
                ),
                principal: Principal::Token([0xff; 32]),
            },
            Op::OpenCounted {
                ttl: u64::MAX,
                key: Some(crate::auth::OpenKey(u128::MAX)),
                secret,
                label: Some(
                    fencelock::Label::new(&"\u{10348}".repeat(fencelock::MAX_LABEL_LEN / 4))
                        .unwrap(),
                ),
                principal: Principal::Token([0xff; 32]),
            },
            Op::ForceRelease {
                session,
                lock: name.clone(),
            },
            Op::ForceReleaseHold {
                session,
                lock: name.clone(),
                token: fencelock::Token(u64::MAX),
            },
            Op::ForceClose { session },
        ];
        for op in &widest {
            let n = postcard::to_allocvec(op).unwrap().len();
            assert!(n <= MAX_OP_BYTES, "{n} bytes: {op:?}");
        }
        let batch = Cmd::new(
            Some(u64::MAX),
            vec![widest[0].clone(); crate::proposer::MAX_BATCH],
        );
        let n = postcard::to_allocvec(&batch).unwrap().len();
        assert!(n + 64 <= MAX_ENTRY_BYTES, "{n} bytes");
        // A membership entry, at the most `add-learner` lets a membership take (members of
        // the longest addresses and the widest ids, as many as fit), fits the bound too.
        let long = "a".repeat(crate::membership::MAX_ADDR_LEN);
        let mut nodes = std::collections::BTreeMap::new();
        for i in 0.. {
            let a = crate::types::NodeAddr {
                raft: long.clone(),
                client: long.clone(),
            };
            nodes.insert(u64::MAX - i, a);
            if crate::membership::oversized(nodes.iter().map(|(i, a)| (*i, a))).is_some() {
                nodes.pop_first();
                break;
            }
        }
        assert!(nodes.len() >= 100, "{} members", nodes.len());
        let all: std::collections::BTreeSet<u64> = nodes.keys().copied().collect();
        let entry = crate::types::Entry {
            log_id: openraft::LogId::new(
                openraft::CommittedLeaderId::new(u64::MAX, u64::MAX),
                u64::MAX,
            ),
            payload: openraft::EntryPayload::Membership(openraft::Membership::new(
                vec![all.clone(), all],
                nodes,
            )),
        };
        let n = postcard::to_allocvec(&entry).unwrap().len();
        assert!(n + 64 <= MAX_ENTRY_BYTES, "{n} bytes");
        let per = entries_per_append() as usize;
        assert!(per >= 32, "{per} entries per append");
        assert!(per * MAX_ENTRY_BYTES + (64 << 10) <= MIN_RAFT_FRAME as usize);
        assert!(SNAPSHOT_CHUNK + (64 << 10) <= MIN_RAFT_FRAME as u64);
    }

    /// Yields `left` copies of `frame`, then nothing more (pending forever, never the end);
    /// counts the bytes taken.
    struct Frames {
        frame: Vec<u8>,
        pos: usize,
        left: usize,
        taken: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl AsyncRead for Frames {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            let me = &mut *self;
            if me.left == 0 {
                return std::task::Poll::Pending;
            }
            while buf.remaining() > 0 && me.left > 0 {
                let n = buf.remaining().min(me.frame.len() - me.pos);
                buf.put_slice(&me.frame[me.pos..me.pos + n]);
                me.taken.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                me.pos += n;
                if me.pos == me.frame.len() {
                    me.pos = 0;
                    me.left -= 1;
                }
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A client that never reads: every write waits forever.
    struct NeverReads;

    impl AsyncWrite for NeverReads {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            std::task::Poll::Pending
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Pending
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Pending
        }
    }

    /// A refused request's reply (no token presented, on a node with tokens) counts
    /// against the connection's in-flight limit like any other: a client that sends
    /// without authenticating and never reads stops being read, instead of queueing
    /// replies in the node's memory without bound. (Paused time: the runtime runs every
    /// task until nothing can move before the sleep returns.)
    #[tokio::test(start_paused = true)]
    async fn refused_requests_from_a_client_that_never_reads_stop_being_read() {
        let (node, dir) = unit_node("refused").await;
        let policy = ClientPolicy {
            tokens: Some(Arc::new(Tokens::default())),
            ..ClientPolicy::default()
        };
        let frame = frame::encode(&ClientFrame {
            id: 1,
            req: Request::Members,
        })
        .unwrap();
        let sent = 100_000;
        let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r = Frames {
            frame: frame.clone(),
            pos: 0,
            left: sent,
            taken: taken.clone(),
        };
        let conn = tokio::spawn(client_conn(r, NeverReads, node.clone(), None, policy));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let read = taken.load(std::sync::atomic::Ordering::Relaxed) / frame.len();
        // At most MAX_IN_FLIGHT replies wait, plus what one read buffer holds.
        let bound = MAX_IN_FLIGHT + 1 + (8 << 10) / frame.len();
        assert!(
            read <= bound,
            "{read} of {sent} requests read from a client that reads no reply (bound {bound})"
        );
        conn.abort();
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The authentication deadline also ends a connection that waits for an in-flight
    /// permit, not for its next frame: a client that sends without a token and never
    /// reads fills its in-flight limit and waits there, and is closed at the deadline
    /// (2 s here), counted as `auth_timeout` — not only when its stalled writes time out
    /// (the read timeout, 10 s). (Paused time.)
    #[tokio::test(start_paused = true)]
    async fn a_client_waiting_for_a_permit_without_a_token_is_closed_at_its_deadline() {
        let (node, dir) = unit_node("auth-permit").await;
        let policy = ClientPolicy {
            tokens: Some(Arc::new(Tokens::default())),
            auth_timeout: Duration::from_secs(2),
            ..ClientPolicy::default()
        };
        let closed = |reason: &str| {
            node.stats
                .net
                .closed
                .get_or_create(&labels(&[("port", CLIENT), ("reason", reason)]))
                .get()
        };
        let frame = frame::encode(&ClientFrame {
            id: 1,
            req: Request::Members,
        })
        .unwrap();
        let r = Frames {
            frame,
            pos: 0,
            left: 100_000,
            taken: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        };
        let conn = tokio::spawn(client_conn(r, NeverReads, node.clone(), None, policy));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(closed("auth_timeout"), 0, "closed before its deadline");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(closed("auth_timeout"), 1, "not closed at its deadline");
        assert_eq!(closed("write_timeout"), 0);
        conn.abort();
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// On a node with tokens, a connection that keeps sending requests without ever
    /// presenting a token (each answered `Unauthenticated`, each well inside the idle and
    /// read timeouts) is closed at its authentication deadline, counted as
    /// `auth_timeout`; one that presented an accepted token and sends the same requests
    /// goes on past it. (Paused time: the clock moves only when every task waits.)
    #[tokio::test(start_paused = true)]
    async fn a_connection_that_presents_no_token_is_closed_at_its_deadline() {
        let (node, dir) = unit_node("auth-timeout").await;
        let text = format!("read * {}\n", crate::auth::token_hash("viewer"));
        let policy = ClientPolicy {
            tokens: Some(Arc::new(Tokens::parse(&text).unwrap())),
            auth_timeout: Duration::from_secs(2),
            ..ClientPolicy::default()
        };
        let timed_out = || {
            node.stats
                .net
                .closed
                .get_or_create(&labels(&[("port", CLIENT), ("reason", "auth_timeout")]))
                .get()
        };
        // A connection that sends `Status` every 300 ms for 6 s (after `first`, if given)
        // and reads each answer: the answers it got, and whether the node closed it.
        let talk = |first: Option<Request>| {
            let (node, policy) = (node.clone(), policy.clone());
            async move {
                let (mine, theirs) = tokio::io::duplex(1 << 16);
                let (sr, sw) = tokio::io::split(theirs);
                let served = tokio::spawn(client_conn(sr, sw, node, None, policy));
                let (r, mut w) = tokio::io::split(mine);
                let mut r = BufReader::new(r);
                let mut answers = Vec::new();
                let reqs = first.into_iter().chain(std::iter::repeat(Request::Status));
                let start = tokio::time::Instant::now();
                for (id, req) in (1u64..).zip(reqs).take(21) {
                    let f = frame::encode(&ClientFrame { id, req }).unwrap();
                    if w.write_all(&f).await.is_err() {
                        break;
                    }
                    match frame::read::<_, ServerFrame>(&mut r, MAX_SERVER_FRAME).await {
                        Ok(Some(ServerFrame::Reply { result, .. })) => answers.push(result),
                        _ => break,
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                let closed = served.is_finished();
                drop((r, w));
                let _ = served.await;
                (answers, closed, start.elapsed())
            }
        };
        let (answers, closed, took) = talk(None).await;
        assert!(closed, "never closed: {} answers", answers.len());
        assert!(
            answers
                .iter()
                .all(|a| matches!(a, Err(ClientError::Unauthenticated))),
            "{answers:?}"
        );
        // Closed at the deadline (2 s: 7 requests 300 ms apart), not before.
        assert_eq!(answers.len(), 7, "{answers:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
        assert_eq!(timed_out(), 1);
        let (answers, closed, _) = talk(Some(Request::Authenticate {
            token: "viewer".into(),
        }))
        .await;
        assert!(!closed, "an authenticated connection was closed");
        assert_eq!(answers.len(), 21);
        assert_eq!(answers[0], Ok(Reply::Authenticated));
        assert!(answers[1..]
            .iter()
            .all(|a| matches!(a, Ok(Reply::Status(_)))));
        assert_eq!(timed_out(), 1);
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A one-node cluster whose lock `x` has 64 holders with 60-byte labels: its holders
    /// list (returned, with its encoded length) is over [`LIST_FLOOR`].
    async fn long_list_node(
        name: &str,
    ) -> (
        Arc<Node>,
        std::path::PathBuf,
        Result<Reply, ClientError>,
        usize,
    ) {
        let (node, dir) = unit_node(name).await;
        initialize_alone(&node).await;
        let ask = |req: Request| {
            let node = node.clone();
            async move { ask_leader(&node, req).await }
        };
        for i in 0..64 {
            let label = format!("{i:0>60}");
            let opened = ask(Request::OpenLabeled {
                ttl_ms: 600_000,
                key: None,
                label,
            })
            .await;
            let Ok(Reply::Opened { reply, secret, .. }) = opened else {
                panic!("{opened:?}")
            };
            let got = ask(Request::Acquire {
                session: reply.opened().unwrap().0,
                secret,
                lock: "x".into(),
                mode: Mode::Shared,
                wait: WaitSpec::None,
                request: None,
            })
            .await;
            assert!(got.is_ok(), "{got:?}");
        }
        let holders = Request::Holders { lock: "x".into() };
        let list = ask(holders.clone()).await;
        let frame_len = |r: &Result<Reply, ClientError>| {
            frame::encode(&ServerFrame::Reply {
                id: 1,
                result: r.clone(),
            })
            .unwrap()
            .len()
        };
        let one = frame_len(&list);
        assert!(one > LIST_FLOOR, "{one} bytes");
        (node, dir, list, one)
    }

    /// List answers not yet written are bounded by their encoded bytes, for the node and
    /// for each connection. A lock with 64 labelled holders makes a list over
    /// [`LIST_FLOOR`]. With a connection's share ([`LIST_SHARE`]) room for one such list,
    /// a client that asks for it ten times and reads nothing gets one list and nine
    /// `unwritten_lists` refusals, each with its id, while a short list (an empty lock's
    /// holders) is still served; once its answers are read, their bytes are released (the
    /// gauge back to 0). Then each rule on its own: a connection past its share while the
    /// node has room, and another connection past the node's bound.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn list_answers_not_yet_read_are_bounded_for_the_node() {
        let (node, dir, list, one) = long_list_node("list-budget").await;
        let holders = Request::Holders { lock: "x".into() };
        node.stats.net.set_list_budget(one * LIST_SHARE);
        let mut reqs: Vec<(u64, Request)> = (1..=10).map(|id| (id, holders.clone())).collect();
        reqs.push((
            11,
            Request::Holders {
                lock: "empty".into(),
            },
        ));
        let frames: Vec<u8> = reqs
            .iter()
            .flat_map(|(id, req)| {
                frame::encode(&ClientFrame {
                    id: *id,
                    req: req.clone(),
                })
                .unwrap()
            })
            .collect();
        // A pipe the node's first answer does not fit: nothing is read until all are
        // answered. The write timeout is long, so the connection is not cut meanwhile.
        let (server, mut client) = tokio::io::duplex(1);
        let policy = ClientPolicy {
            read_timeout: Duration::from_secs(120),
            ..ClientPolicy::default()
        };
        let conn = tokio::spawn(client_conn(
            ThenEof(frames),
            server,
            node.clone(),
            None,
            policy,
        ));
        let refused = || {
            node.stats
                .refusals
                .get_or_create(&labels(&[("kind", "unwritten_lists")]))
                .get()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while refused() < 9 {
            assert!(Instant::now() < deadline, "{} refused", refused());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(node.stats.net.unwritten_list_bytes.get(), one as i64);
        let mut answers = std::collections::BTreeMap::new();
        for _ in 0..11 {
            let f = frame::read::<_, ServerFrame>(&mut client, MAX_SERVER_FRAME)
                .await
                .unwrap()
                .unwrap();
            let ServerFrame::Reply { id, result } = f else {
                panic!("{f:?}")
            };
            answers.insert(id, result);
        }
        assert_eq!(answers.len(), 11, "one answer per id");
        assert!(
            matches!(&answers[&11], Ok(Reply::Holders(h)) if h.is_empty()),
            "short"
        );
        let lists = answers.values().filter(|r| **r == list);
        assert_eq!(lists.count(), 1);
        let limited = answers.values().filter(
            |r| matches!(r, Err(ClientError::Limit { kind, .. }) if kind == "unwritten_lists"),
        );
        assert_eq!(limited.count(), 9);
        tokio::time::timeout(Duration::from_secs(30), conn)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(node.stats.net.unwritten_list_bytes.get(), 0, "released");
        let net = &node.stats.net;
        let (a, b) = (net.list_share(), net.list_share());
        // Connections idle for longer than LIST_STALL: what counts is how long an answer
        // waits, not how long ago the connection last read one.
        tokio::time::sleep(LIST_STALL + Duration::from_millis(100)).await;
        // A share of one list, the node room for eight: a connection's second is refused,
        // another connection's first is not.
        let first = net.reserve_list(one, &a);
        assert!(first.is_some());
        assert!(net.reserve_list(one, &a).is_none(), "over its share");
        assert!(
            !a.is_closing(),
            "a connection over its own share is not closed"
        );
        assert!(net.reserve_list(one, &b).is_some(), "another connection's");
        assert_eq!(b.held(), 0, "released when dropped");
        // The node's room for one list: another connection, holding none, is refused.
        // The one holding the bound is told to close only once its oldest answer has
        // waited LIST_STALL (a client reading its answers takes them sooner).
        net.set_list_budget(one);
        assert!(net.reserve_list(one, &b).is_none(), "over the node's bound");
        assert_eq!(b.held(), 0, "its share given back");
        assert!(!a.is_closing(), "a holder whose answer has just come stays");
        a.backdate();
        assert!(net.reserve_list(one, &b).is_none(), "over the node's bound");
        assert!(
            a.is_closing() && !b.is_closing(),
            "the largest stalled holder closes"
        );
        for _ in 0..2 {
            tokio::time::timeout(Duration::from_secs(5), a.closed())
                .await
                .expect("told to close");
        }
        drop(first);
        assert!(net.reserve_list(one, &b).is_some());
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The node's bound on unwritten list answers, spent by one connection that reads
    /// nothing, is not held against everyone else: another connection's long list is
    /// refused (`unwritten_lists`), the connection holding the most, whose oldest answer
    /// has waited [`LIST_STALL`], is closed at once (counted as
    /// `closed{reason="unwritten_lists"}`, its answers dropped and their bytes released),
    /// and the same request, asked again, is answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_connection_holding_the_most_unread_lists_is_closed_when_the_bound_is_spent() {
        let (node, dir, list, one) = long_list_node("list-evict").await;
        let holders = Request::Holders { lock: "x".into() };
        // Room for one long list on the node (a connection holding none takes one of any
        // size, whatever its share).
        node.stats.net.set_list_budget(one);
        let ask_once = |id: u64| {
            frame::encode(&ClientFrame {
                id,
                req: holders.clone(),
            })
            .unwrap()
        };
        let policy = ClientPolicy {
            read_timeout: Duration::from_secs(120),
            ..ClientPolicy::default()
        };
        let bounded = Duration::from_secs(30);
        // The hog: asks once and reads nothing (a pipe its answer does not fit).
        let (server, _hog_client) = tokio::io::duplex(1);
        let hog = tokio::spawn(client_conn(
            ThenEof(ask_once(1)),
            server,
            node.clone(),
            None,
            policy.clone(),
        ));
        let gauge = || node.stats.net.unwritten_list_bytes.get();
        let deadline = Instant::now() + bounded;
        while gauge() != one as i64 {
            assert!(Instant::now() < deadline, "the hog's list was never held");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Its answer waits unread: stalled once LIST_STALL has passed.
        tokio::time::sleep(LIST_STALL + Duration::from_millis(200)).await;
        let closed = || {
            node.stats
                .net
                .closed
                .get_or_create(&labels(&[("port", CLIENT), ("reason", "unwritten_lists")]))
                .get()
        };
        assert_eq!(closed(), 0);
        // Another client, which reads its answers, asks for the list.
        let reader = |id: u64| {
            let (server, mut client) = tokio::io::duplex(1 << 20);
            let conn = tokio::spawn(client_conn(
                ThenEof(ask_once(id)),
                server,
                node.clone(),
                None,
                policy.clone(),
            ));
            async move {
                let f = frame::read::<_, ServerFrame>(&mut client, MAX_SERVER_FRAME)
                    .await
                    .unwrap()
                    .unwrap();
                tokio::time::timeout(bounded, conn).await.unwrap().unwrap();
                match f {
                    ServerFrame::Reply { id: got, result } if got == id => result,
                    f => panic!("{f:?}"),
                }
            }
        };
        let first = tokio::time::timeout(bounded, reader(2)).await.unwrap();
        assert!(
            matches!(&first, Err(ClientError::Limit { kind, .. }) if kind == "unwritten_lists"),
            "{first:?}"
        );
        // The hog is closed without waiting for its write timeout, and its bytes freed.
        tokio::time::timeout(bounded, hog)
            .await
            .expect("the hog was closed")
            .unwrap();
        assert_eq!(closed(), 1);
        assert_eq!(gauge(), 0, "released");
        let again = tokio::time::timeout(bounded, reader(3)).await.unwrap();
        assert_eq!(again, list, "answered once the hog is gone");
        assert_eq!(closed(), 1, "a client that reads is never closed");
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A reply a client could not read (over MAX_SERVER_FRAME) goes out as a
    /// `reply_too_large` refusal with its id; one within the bound goes out as it is.
    #[tokio::test]
    async fn a_reply_over_the_client_read_limit_is_refused_with_its_id() {
        let label = fencelock::Label::new(&"x".repeat(fencelock::MAX_LABEL_LEN)).unwrap();
        let holder = fencelock::Holder {
            session: SessionId(u64::MAX),
            mode: Mode::Shared,
            token: fencelock::Token(u64::MAX),
            label,
        };
        let per = postcard::to_allocvec(&holder).unwrap().len();
        let n = MAX_SERVER_FRAME as usize / per + 1;
        let stats = crate::ops::NodeStats::default();
        let roundtrip = |f: ServerFrame| {
            let stats = stats.clone();
            async move {
                let mut out = Vec::new();
                write_to_client(&mut out, &f, &stats, READ_TIMEOUT)
                    .await
                    .unwrap();
                let mut r = &out[..];
                frame::read::<_, ServerFrame>(&mut r, MAX_SERVER_FRAME)
                    .await
                    .unwrap()
                    .unwrap()
            }
        };
        let big = ServerFrame::Reply {
            id: 7,
            result: Ok(Reply::Holders(vec![holder; n])),
        };
        match roundtrip(big).await {
            ServerFrame::Reply {
                id: 7,
                result: Err(ClientError::Limit { kind, .. }),
            } => assert_eq!(kind, "reply_too_large"),
            other => panic!("{:?}", std::mem::discriminant(&other)),
        }
        let fits = ServerFrame::Reply {
            id: 8,
            result: Ok(Reply::Holders(vec![holder; n / 2])),
        };
        assert!(matches!(
            roundtrip(fits).await,
            ServerFrame::Reply { id: 8, result: Ok(Reply::Holders(h)) } if h.len() == n / 2
        ));
    }

    /// The answers that list the membership (`Members`, `Status`) and export pages are
    /// counted in the bound on unwritten list answers as lists are, once past
    /// [`LIST_FLOOR`]: a membership may take 64 KiB, and a connection's 256 such answers
    /// unread would otherwise hold 16 MiB that no bound counts. Short ones pass uncounted,
    /// and one past the connection's share is refused.
    #[test]
    fn long_membership_and_export_answers_count_as_lists() {
        let stats = crate::ops::NodeStats::default();
        stats.net.set_list_budget(LIST_SHARE * 4096);
        let share = stats.net.list_share();
        let addr = |n: usize| NodeAddr {
            raft: format!("{}:1", "r".repeat(n)),
            client: format!("{}:2", "c".repeat(n)),
        };
        let members = |n: usize, k: u64| Reply::Members {
            voters: (1..=k).map(|i| (i, addr(n))).collect(),
            learners: Vec::new(),
        };
        let status = |n: usize, k: u64| {
            Reply::Status(crate::protocol::NodeStatus {
                id: 1,
                version: String::new(),
                role: "leader".into(),
                term: 1,
                leader: Some(1),
                committed: 0,
                applied: 0,
                last_log: 0,
                ready: true,
                checks: Vec::new(),
                voters: Vec::new(),
                learners: (1..=k).map(|i| (i, addr(n))).collect(),
                sessions: (0, 0),
                locks: (0, 0),
                claims: (0, 0),
                connections: (0, 0),
            })
        };
        let export = |k: usize| {
            Reply::Export(crate::protocol::ExportPage {
                lines: vec!["x".repeat(100); k],
                total: k as u64,
                from_index: 1,
                to_index: 1,
                span: None,
                node: 1,
            })
        };
        let held = || stats.net.unwritten_list_bytes.get();
        for (what, long, short) in [
            ("members", members(100, 8), members(5, 3)),
            ("status", status(100, 8), status(5, 3)),
            ("export", export(8), export(1)),
        ] {
            let (_, counted) = reply_out(&stats, 1, Ok(short), &share);
            assert!(counted.is_none(), "a short {what} answer is not counted");
            assert_eq!(held(), 0);
            let (out, counted) = reply_out(&stats, 2, Ok(long), &share);
            let Out::Encoded(buf) = &out else {
                panic!("a long {what} answer is encoded when made")
            };
            assert!(buf.len() > LIST_FLOOR);
            assert!(counted.is_some(), "a long {what} answer is counted");
            assert_eq!(held(), buf.len() as i64, "{what}");
            drop(counted);
            assert_eq!(held(), 0, "{what}: its bytes come back once written");
        }
        // Past the connection's share (an eighth of the bound) while it holds one, the
        // next is refused.
        stats.net.set_list_budget(LIST_SHARE * 1024);
        let (_, first) = reply_out(&stats, 3, Ok(members(100, 8)), &share);
        assert!(
            first.is_some(),
            "one answer of any size while it holds none"
        );
        let (out, counted) = reply_out(&stats, 4, Ok(status(100, 8)), &share);
        assert!(counted.is_none());
        assert!(
            matches!(
                out,
                Out::Frame(ServerFrame::Reply {
                    result: Err(ClientError::Limit { ref kind, .. }),
                    ..
                }) if kind == "unwritten_lists"
            ),
            "a members answer past the share is refused"
        );
    }

    /// Yields `bytes`, then nothing more (pending forever, never the end).
    struct Script(Vec<u8>);

    impl AsyncRead for Script {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            if self.0.is_empty() {
                return std::task::Poll::Pending;
            }
            let n = buf.remaining().min(self.0.len());
            buf.put_slice(&self.0[..n]);
            self.0.drain(..n);
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// Makes unit node `node` (id 1) a cluster of itself (it then elects itself).
    async fn initialize_alone(node: &Node) {
        let me = NodeAddr {
            raft: "127.0.0.1:1".into(),
            client: "127.0.0.1:2".into(),
        };
        node.initialize([(1, me)].into()).await.unwrap();
    }

    /// A one-member node (not initialised) in a fresh directory named for `test`; the
    /// caller removes the directory after `shutdown`.
    async fn unit_node(test: &str) -> (Arc<Node>, std::path::PathBuf) {
        unit_node_with(test, |_| {}).await
    }

    /// [`unit_node`] with its configuration changed by `set` first.
    async fn unit_node_with(
        test: &str,
        set: impl FnOnce(&mut crate::node::NodeConfig),
    ) -> (Arc<Node>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "fencelock-net-unit-{test}-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        let mut config = crate::node::NodeConfig::new(1, dir.clone());
        set(&mut config);
        let node = Node::start(config, TcpNetwork::default()).await.unwrap();
        (node, dir)
    }

    /// A session of a long ttl opened on the leader: its id and credential.
    async fn open_on_leader(node: &Arc<Node>) -> (u64, SessionSecret) {
        match ask_leader(
            node,
            Request::Open {
                ttl_ms: 600_000,
                key: None,
            },
        )
        .await
        {
            Ok(Reply::Opened {
                reply: fencelock::Reply::Opened { session, .. },
                secret,
                ..
            }) => (session.0, secret),
            other => panic!("{other:?}"),
        }
    }

    /// `req` on a connection of its own (whose pushes nobody reads: its queue is dropped at
    /// once), asked again while the node answers `NotLeader` (for at most 60 s: a one-
    /// member node elects itself just after `initialize`).
    async fn ask_leader(node: &Arc<Node>, req: Request) -> Result<Reply, ClientError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let sink = PushSink::new(8).0;
            match node
                .handle_request(req.clone(), node.next_conn_id(), &sink)
                .await
            {
                Err(ClientError::NotLeader { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                r => return r,
            }
        }
    }

    /// Yields `bytes`, then the end of the stream: a client that sent its requests and
    /// half-closed its connection.
    struct ThenEof(Vec<u8>);

    impl AsyncRead for ThenEof {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            let n = buf.remaining().min(self.0.len());
            buf.put_slice(&self.0[..n]);
            self.0.drain(..n);
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A client with a reply pending that reads nothing more — one that half-closed its
    /// connection (EOF) and one that just stops reading — is closed once the reply's write
    /// has made no progress for the read timeout (lowered to 200 ms), instead of holding
    /// the writer and its connection place until the client goes away; counted as
    /// `write_timeout`, and the connection is no longer counted open. The wait is bounded
    /// generously (30 s; the idle timeout, 60 s, cannot close a connection with a reply in
    /// flight anyway).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_stops_reading_with_replies_pending_is_closed() {
        let (node, dir) = unit_node("write-timeout").await;
        // With tokens and none presented, the reply (Unauthenticated) needs no leader.
        let policy = ClientPolicy {
            tokens: Some(Arc::new(Tokens::default())),
            read_timeout: Duration::from_millis(200),
            ..ClientPolicy::default()
        };
        let request = frame::encode(&ClientFrame {
            id: 1,
            req: Request::Members,
        })
        .unwrap();
        let closed = || {
            node.stats
                .net
                .closed
                .get_or_create(&labels(&[("port", CLIENT), ("reason", "write_timeout")]))
                .get()
        };
        let half_closed = tokio::spawn(client_conn(
            ThenEof(request.clone()),
            NeverReads,
            node.clone(),
            None,
            policy.clone(),
        ));
        tokio::time::timeout(Duration::from_secs(30), half_closed)
            .await
            .expect("a half-closed client that reads nothing was never closed")
            .unwrap();
        assert_eq!(closed(), 1);
        let silent = tokio::spawn(client_conn(
            Script(request),
            NeverReads,
            node.clone(),
            None,
            policy,
        ));
        tokio::time::timeout(Duration::from_secs(30), silent)
            .await
            .expect("a client that stopped reading was never closed")
            .unwrap();
        assert_eq!(closed(), 2);
        assert_eq!(
            node.stats.connections.get(),
            0,
            "no connection counted open"
        );
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The Raft port likewise: a peer that sends a request and reads no answer is closed
    /// once the answer's write has made no progress for the read timeout (200 ms here),
    /// counted as `write_timeout` on the peer port; bounded generously (30 s).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_that_reads_no_answer_is_closed() {
        let (node, dir) = unit_node("peer-write-timeout").await;
        let policy = PeerPolicy {
            read_timeout: Duration::from_millis(200),
            ..PeerPolicy::default()
        };
        let request = frame::encode(&RaftCall {
            settings: node.config().service,
            req: RaftReq::PreVote(PreVoteRequest {
                candidate: 2,
                last_log_id: None,
            }),
        })
        .unwrap();
        let conn = raft_conn(
            Script(request),
            NeverReads,
            node.elector().clone(),
            None,
            None,
            &policy,
        );
        tokio::time::timeout(Duration::from_secs(30), conn)
            .await
            .expect("a peer that reads no answer was never closed");
        let closed = policy
            .stats
            .closed
            .get_or_create(&labels(&[("port", PEER), ("reason", "write_timeout")]))
            .get();
        assert_eq!(closed, 1);
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Over mutual TLS, a peer whose certificate (of this CA) names no member is closed
    /// before a byte it sent is decoded: its garbage is counted as `not_a_member`, never
    /// as `malformed`. A member's certificate passes that check, and the same garbage is
    /// then read and refused as malformed. Before the node knows a membership, only the
    /// certificates of its first peers pass (a node being added is dialled by a member it
    /// was told of before it knows one); any other of the CA is closed unread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_certificate_of_no_member_is_refused_before_anything_is_read() {
        let (node, dir) = unit_node("peer-not-member").await;
        let ca = crate::tls::DevCa::new().unwrap();
        let cert = |id: NodeId| node_cert(&ca, id, "127.0.0.1");
        // A whole frame of this wire version whose body does not decode.
        let mut garbage = 9u32.to_be_bytes().to_vec();
        garbage.extend(frame::PEER_WIRE.to_be_bytes());
        garbage.extend([0xff; 5]);
        let policy = PeerPolicy {
            first_peers: [2].into(),
            ..PeerPolicy::default()
        };
        let count = |reason: &str| peer_closed(&policy, reason);
        let conn = |id: NodeId| {
            raft_conn(
                ThenEof(garbage.clone()),
                tokio::io::sink(),
                node.elector().clone(),
                Some(cert(id)),
                None,
                &policy,
            )
        };
        let bounded = Duration::from_secs(30);
        tokio::time::timeout(bounded, conn(9)).await.unwrap();
        assert_eq!(
            (count("not_a_member"), count("malformed")),
            (1, 0),
            "no membership yet: node 9, not a first peer"
        );
        tokio::time::timeout(bounded, conn(2)).await.unwrap();
        assert_eq!(
            (count("not_a_member"), count("malformed")),
            (1, 1),
            "no membership yet: node 2, a first peer"
        );
        initialize_alone(&node).await;
        // The membership the check reads is openraft's metrics': wait until they show it.
        let deadline = Instant::now() + bounded;
        while node
            .raft
            .metrics()
            .borrow()
            .membership_config
            .nodes()
            .next()
            .is_none()
        {
            assert!(Instant::now() < deadline, "the membership never showed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::timeout(bounded, conn(9)).await.unwrap();
        assert_eq!(
            (count("not_a_member"), count("malformed")),
            (2, 1),
            "node 9"
        );
        // Node 2 is no member of this membership: a first peer no longer.
        tokio::time::timeout(bounded, conn(2)).await.unwrap();
        assert_eq!(
            (count("not_a_member"), count("malformed")),
            (3, 1),
            "node 2"
        );
        tokio::time::timeout(bounded, conn(1)).await.unwrap();
        assert_eq!(
            (count("not_a_member"), count("malformed")),
            (3, 2),
            "node 1"
        );
        // Node 1's certificate on a request claiming to come from node 5: refused, and
        // counted as the connection-level refusals are.
        let claim = raft_frame(
            &node,
            RaftReq::Vote(VoteRequest {
                vote: openraft::Vote::new(7, 5),
                last_log_id: None,
            }),
        );
        let other = raft_conn(
            ThenEof(claim),
            tokio::io::sink(),
            node.elector().clone(),
            Some(cert(1)),
            None,
            &policy,
        );
        tokio::time::timeout(bounded, other).await.unwrap();
        assert_eq!(
            (count("not_a_member"), count("malformed")),
            (4, 2),
            "a request from another sender than the certificate's"
        );
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `req` as node `node`'s peers send it: a whole frame with its settings.
    fn raft_frame(node: &Node, req: RaftReq) -> Vec<u8> {
        frame::encode(&RaftCall {
            settings: node.config().service,
            req,
        })
        .unwrap()
    }

    /// What a peer presenting `cert` gets back for `frame` on `node`'s Raft port under
    /// `policy`: the bytes written before the connection ended (bounded: 30 s).
    async fn raft_answer(
        node: &Node,
        cert: &rustls::pki_types::CertificateDer<'static>,
        policy: &PeerPolicy,
        frame: Vec<u8>,
    ) -> Vec<u8> {
        let (server, mut client) = tokio::io::duplex(1 << 16);
        let conn = raft_conn(
            ThenEof(frame),
            server,
            node.elector().clone(),
            Some(cert.clone()),
            None,
            policy,
        );
        tokio::time::timeout(Duration::from_secs(30), conn)
            .await
            .unwrap();
        let mut got = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut client, &mut got)
            .await
            .unwrap();
        got
    }

    /// The certificate `ca` gives node `id` for address `ip`, as a peer presents it.
    fn node_cert(
        ca: &crate::tls::DevCa,
        id: NodeId,
        ip: &str,
    ) -> rustls::pki_types::CertificateDer<'static> {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let pem = ca.node(id, &[ip]).unwrap().cert;
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    /// How many peer connections `policy` counted closed for `reason`.
    fn peer_closed(policy: &PeerPolicy, reason: &str) -> u64 {
        policy
            .stats
            .closed
            .get_or_create(&labels(&[("port", PEER), ("reason", reason)]))
            .get()
    }

    /// Over mutual TLS, a node that is not a member (node 9, with a certificate of the CA)
    /// is closed before anything is read. Once a member vouches that it follows node 9's
    /// committed vote (`Elector::vouched`), node 9's appends under exactly that vote are
    /// served, and nothing else of it: not its vote, not an append under another vote
    /// (a later term, or not committed), and not once the word is too old or comes from a
    /// node that is not a voter.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_non_member_is_served_as_leader_only_when_a_member_vouches_for_it() {
        use openraft::raft::{AppendEntriesRequest, VoteRequest};
        use openraft::Vote;
        let (node, dir) = unit_node("peer-vouched").await;
        initialize_alone(&node).await;
        let bounded = Duration::from_secs(30);
        let deadline = Instant::now() + bounded;
        while node.raft.metrics().borrow().current_leader != Some(1) {
            assert!(Instant::now() < deadline, "no leader");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let ca = crate::tls::DevCa::new().unwrap();
        let cert = node_cert(&ca, 9, "127.0.0.9");
        let term = node.raft.metrics().borrow().current_term + 5;
        let call = |req: RaftReq| raft_frame(&node, req);
        let append = |vote: Vote<NodeId>| {
            call(RaftReq::Append(AppendEntriesRequest {
                vote,
                prev_log_id: None,
                entries: vec![],
                leader_commit: None,
            }))
        };
        let followed = Vote::new_committed(term, 9);
        let vote = call(RaftReq::Vote(VoteRequest::new(Vote::new(term, 9), None)));
        let policy = PeerPolicy::default();
        let not_a_member = || peer_closed(&policy, "not_a_member");
        // What node 9 gets back for `frame`.
        let answer = |frame: Vec<u8>| raft_answer(&node, &cert, &policy, frame);
        assert!(answer(append(followed)).await.is_empty(), "no one vouched");
        assert_eq!(not_a_member(), 1, "closed before reading");
        // Word from a node that is not a voter here, or too old, counts for nothing.
        node.elector().vouch(7, followed, true);
        node.elector().vouch(1, followed, false);
        assert!(
            answer(append(followed)).await.is_empty(),
            "not a voter's, or stale"
        );
        assert_eq!(not_a_member(), 2);
        node.elector().vouch(1, followed, true);
        assert!(answer(vote).await.is_empty(), "a non-member's vote");
        // Admitted (a member vouched for it), then its vote refused: counted by request.
        assert_eq!(not_a_member(), 3, "the vote refused as a request");
        for other in [Vote::new_committed(term + 1, 9), Vote::new(term, 9)] {
            assert!(
                answer(append(other)).await.is_empty(),
                "{other}: not the vote followed"
            );
        }
        assert_eq!(not_a_member(), 5, "each counted");
        let resp = |got: Vec<u8>| async move {
            frame::read::<_, RaftResp>(&mut got.as_slice(), MAX_RAFT_FRAME)
                .await
                .unwrap()
                .unwrap()
        };
        // Word for an older vote than this node's own (the leader it heard before, say):
        // served to openraft, which refuses it.
        let mine = node.raft.metrics().borrow().vote;
        let older = Vote::new_committed(mine.leader_id().term - 1, 9);
        node.elector().vouch(1, older, true);
        let got = resp(answer(append(older)).await).await;
        assert!(
            matches!(
                got,
                RaftResp::Append(Ok(openraft::raft::AppendEntriesResponse::HigherVote(_)))
            ),
            "an older vouched vote is refused by openraft"
        );
        // (Each voter's latest word counts: its word for the older vote replaced the
        // other.)
        node.elector().vouch(1, followed, true);
        let got = resp(answer(append(followed)).await).await;
        assert!(
            matches!(
                got,
                RaftResp::Append(Ok(openraft::raft::AppendEntriesResponse::Success))
            ),
            "the vouched leader's append"
        );
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Before a node knows a membership, a first peer's requests are served and no other
    /// node's: node 2 (listed) has its vote granted; node 2's certificate claiming to be
    /// node 3 (listed too) is not served. And no request carrying a term or log index
    /// past 2^62 is served, whoever sends it: node 2's vote at term `u64::MAX` (which
    /// openraft would store, and whose `term + 1` at the next election panics its core),
    /// its pre-vote and append with such a log id — each refused unanswered, counted as
    /// `past_bound`, the node's vote unchanged.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn before_a_membership_only_first_peers_are_served_and_no_term_past_the_bound() {
        use openraft::raft::{AppendEntriesRequest, VoteRequest};
        use openraft::{CommittedLeaderId, LogId, Vote};
        let (node, dir) = unit_node("peer-first").await;
        let ca = crate::tls::DevCa::new().unwrap();
        let cert = node_cert(&ca, 2, "127.0.0.2");
        let policy = PeerPolicy {
            first_peers: [2, 3].into(),
            ..PeerPolicy::default()
        };
        let count = |reason: &str| peer_closed(&policy, reason);
        let call = |req: RaftReq| raft_frame(&node, req);
        let answer = |frame: Vec<u8>| raft_answer(&node, &cert, &policy, frame);
        let far = u64::MAX;
        let before = node.raft.metrics().borrow().vote;
        let far_id = Some(LogId::new(CommittedLeaderId::new(far, 2), 1));
        for (what, req) in [
            (
                "a vote at term u64::MAX",
                RaftReq::Vote(VoteRequest::new(Vote::new(far, 2), None)),
            ),
            (
                "a vote at term 2^62",
                RaftReq::Vote(VoteRequest::new(Vote::new(1 << 62, 2), None)),
            ),
            (
                "a vote whose last log id is past the bound",
                RaftReq::Vote(VoteRequest::new(Vote::new(3, 2), far_id)),
            ),
            (
                "a pre-vote whose last log id is past the bound",
                RaftReq::PreVote(PreVoteRequest {
                    candidate: 2,
                    last_log_id: far_id,
                }),
            ),
            (
                "an append whose previous log id is past the bound",
                RaftReq::Append(AppendEntriesRequest {
                    vote: Vote::new_committed(3, 2),
                    prev_log_id: Some(LogId::new(CommittedLeaderId::new(1, 2), far)),
                    entries: vec![],
                    leader_commit: None,
                }),
            ),
            (
                "an append whose commit point is past the bound",
                RaftReq::Append(AppendEntriesRequest {
                    vote: Vote::new_committed(3, 2),
                    prev_log_id: None,
                    entries: vec![],
                    leader_commit: far_id,
                }),
            ),
            (
                "an append of an entry whose log id is past the bound",
                RaftReq::Append(AppendEntriesRequest {
                    vote: Vote::new_committed(3, 2),
                    prev_log_id: None,
                    entries: vec![openraft::Entry {
                        log_id: LogId::new(CommittedLeaderId::new(far, 2), 1),
                        payload: openraft::EntryPayload::Blank,
                    }],
                    leader_commit: None,
                }),
            ),
            (
                "a snapshot whose log id is past the bound",
                RaftReq::Snapshot(openraft::raft::InstallSnapshotRequest {
                    vote: Vote::new_committed(3, 2),
                    meta: openraft::SnapshotMeta {
                        last_log_id: far_id,
                        last_membership: Default::default(),
                        snapshot_id: "s".into(),
                    },
                    offset: 0,
                    data: vec![],
                    done: true,
                }),
            ),
        ] {
            let n = count("past_bound");
            assert!(answer(call(req)).await.is_empty(), "{what}: answered");
            assert_eq!(count("past_bound"), n + 1, "{what}");
            assert_eq!(
                node.raft.metrics().borrow().vote,
                before,
                "{what}: the vote moved"
            );
        }
        // Node 2's certificate, claiming to be node 3: not served.
        let as_three = call(RaftReq::Vote(VoteRequest::new(Vote::new(3, 3), None)));
        assert!(
            answer(as_three).await.is_empty(),
            "node 3's vote on node 2's certificate"
        );
        // Node 2 as itself, in a plain term: served, and granted.
        let got = answer(call(RaftReq::Vote(VoteRequest::new(Vote::new(3, 2), None)))).await;
        let got = frame::read::<_, RaftResp>(&mut got.as_slice(), MAX_RAFT_FRAME)
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(&got, RaftResp::Vote(Ok(v)) if v.vote_granted),
            "node 2's vote, a first peer's, in term 3"
        );
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An error a peer answered reaches openraft as that peer's own error, its kind kept:
    /// a snapshot mismatch (on which openraft restarts a transfer from offset 0) and a
    /// stopped Raft, not a network fault.
    #[test]
    fn a_peers_answered_error_reaches_openraft_as_its_own() {
        use openraft::error::{Fatal, InstallSnapshotError, RaftError, SnapshotMismatch};
        use openraft::SnapshotSegmentId;
        let seg = |offset| SnapshotSegmentId {
            id: "s".into(),
            offset,
        };
        let mismatch: Result<(), RaftError<NodeId, InstallSnapshotError>> = Err(
            RaftError::APIError(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                expect: seg(0),
                got: seg(7),
            })),
        );
        match remote(2, mismatch) {
            Err(RPCError::RemoteError(e)) => {
                assert_eq!(e.target, 2);
                assert!(matches!(
                    e.source,
                    RaftError::APIError(InstallSnapshotError::SnapshotMismatch(_))
                ));
            }
            other => panic!("{other:?}"),
        }
        let stopped: Result<(), RaftError<NodeId>> = Err(RaftError::Fatal(Fatal::Stopped));
        assert!(matches!(
            remote(3, stopped),
            Err(RPCError::RemoteError(e)) if e.target == 3 && matches!(e.source, RaftError::Fatal(Fatal::Stopped))
        ));
    }

    /// An AppendEntries of [`MAX_APPEND_ENTRIES`] entries decodes, one of more does not
    /// (refused as its list decodes, before it is allocated), and a leader's appends
    /// ([`entries_per_append`]) are within the cap.
    #[tokio::test]
    async fn an_append_of_more_entries_than_the_cap_does_not_decode() {
        use openraft::raft::AppendEntriesRequest;
        use openraft::{CommittedLeaderId, LogId, Vote};
        assert!(entries_per_append() as usize <= MAX_APPEND_ENTRIES);
        let frame_of = |n: u64| {
            frame::encode(&RaftCall {
                settings: ServiceConfig::default(),
                req: RaftReq::Append(AppendEntriesRequest {
                    vote: Vote::new_committed(3, 2),
                    prev_log_id: None,
                    entries: (0..n)
                        .map(|i| openraft::Entry {
                            log_id: LogId::new(CommittedLeaderId::new(1, 2), i),
                            payload: openraft::EntryPayload::Blank,
                        })
                        .collect(),
                    leader_commit: None,
                }),
            })
            .unwrap()
        };
        let read = |bytes: Vec<u8>| async move {
            frame::read::<_, RaftCall>(&mut bytes.as_slice(), MAX_RAFT_FRAME).await
        };
        let full = read(frame_of(MAX_APPEND_ENTRIES as u64))
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(&full.req, RaftReq::Append(a) if a.entries.len() == MAX_APPEND_ENTRIES));
        let over = read(frame_of(MAX_APPEND_ENTRIES as u64 + 1)).await;
        assert!(
            over.is_err(),
            "decoded an append of more entries than the cap"
        );
    }

    /// A membership in an append's entry, or in a snapshot's meta, decodes as openraft's
    /// own encoding (a good one re-encodes to the same bytes) with its lists capped as they
    /// decode, and one that names a voter without addresses — which openraft would unwrap
    /// when this node campaigns or replicates, from wherever it sits in the log, on every
    /// start — or has more configs or members than a membership can, or an address too
    /// long, does not decode at all: the connection is closed as for any bad frame.
    #[tokio::test]
    async fn a_membership_a_peer_sends_is_capped_and_checked_as_it_decodes() {
        use crate::membership::{MAX_ADDR_LEN, MAX_MEMBERS};
        use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest};
        use openraft::{CommittedLeaderId, LogId, Vote};
        use std::collections::BTreeMap;

        /// Any membership's bytes, as openraft's `Membership` encodes (configs, nodes).
        #[derive(Serialize)]
        struct Raw {
            configs: Vec<BTreeSet<u64>>,
            nodes: BTreeMap<u64, NodeAddr>,
        }
        let addr = |n: u64| NodeAddr {
            raft: format!("127.0.0.1:{}", 7000 + n),
            client: format!("127.0.0.1:{}", 8000 + n),
        };
        let nodes = |ids: &[u64]| {
            ids.iter()
                .map(|&i| (i, addr(i)))
                .collect::<BTreeMap<_, _>>()
        };
        let set = |ids: &[u64]| ids.iter().copied().collect::<BTreeSet<u64>>();
        let log_id = |i| LogId::new(CommittedLeaderId::new(1, 2), i);
        let read = |bytes: Vec<u8>| async move {
            frame::read::<_, RaftCall>(&mut bytes.as_slice(), MAX_RAFT_FRAME).await
        };

        // A good joint membership, in an entry made by openraft's own types: decoded, it
        // re-encodes to the very bytes.
        let good =
            openraft::Membership::new(vec![set(&[1, 2]), set(&[2, 3])], nodes(&[1, 2, 3, 4]));
        let call = RaftCall {
            settings: ServiceConfig::default(),
            req: RaftReq::Append(AppendEntriesRequest {
                vote: Vote::new_committed(3, 2),
                prev_log_id: None,
                entries: vec![
                    openraft::Entry {
                        log_id: log_id(0),
                        payload: openraft::EntryPayload::Blank,
                    },
                    openraft::Entry {
                        log_id: log_id(1),
                        payload: openraft::EntryPayload::Normal(crate::types::Cmd {
                            now: Some(5),
                            ops: vec![],
                        }),
                    },
                    openraft::Entry {
                        log_id: log_id(2),
                        payload: openraft::EntryPayload::Membership(good.clone()),
                    },
                ],
                leader_commit: None,
            }),
        };
        let bytes = frame::encode(&call).unwrap();
        let back = read(bytes.clone()).await.unwrap().unwrap();
        assert_eq!(
            frame::encode(&back).unwrap(),
            bytes,
            "openraft's own encoding"
        );
        let snapshot = |m: crate::types::StoredMembership| RaftCall {
            settings: ServiceConfig::default(),
            req: RaftReq::Snapshot(InstallSnapshotRequest {
                vote: Vote::new_committed(3, 2),
                meta: openraft::SnapshotMeta {
                    last_log_id: Some(log_id(9)),
                    last_membership: m,
                    snapshot_id: "9-1".into(),
                },
                offset: 0,
                data: vec![1, 2, 3],
                done: true,
            }),
        };
        for m in [
            openraft::StoredMembership::new(Some(log_id(2)), good.clone()),
            openraft::StoredMembership::default(),
        ] {
            let bytes = frame::encode(&snapshot(m)).unwrap();
            let back = read(bytes.clone()).await.unwrap().unwrap();
            assert_eq!(
                frame::encode(&back).unwrap(),
                bytes,
                "a snapshot's meta too"
            );
        }

        // Bad memberships, as bytes openraft's types would not make: none decodes, in an
        // append's entry or in a snapshot's meta.
        let long = NodeAddr {
            raft: "x".repeat(MAX_ADDR_LEN + 1),
            client: "127.0.0.1:1".into(),
        };
        let many: Vec<u64> = (0..=MAX_MEMBERS as u64).collect();
        let bad = [
            (
                "a voter without addresses",
                Raw {
                    configs: vec![set(&[1, 9])],
                    nodes: nodes(&[1]),
                },
            ),
            (
                "three configs",
                Raw {
                    configs: vec![set(&[1]), set(&[1]), set(&[1])],
                    nodes: nodes(&[1]),
                },
            ),
            (
                "an empty voter set",
                Raw {
                    configs: vec![set(&[1]), set(&[])],
                    nodes: nodes(&[1]),
                },
            ),
            (
                "no voter set",
                Raw {
                    configs: vec![],
                    nodes: nodes(&[1]),
                },
            ),
            (
                "too many voters",
                Raw {
                    configs: vec![set(&many)],
                    nodes: nodes(&many),
                },
            ),
            (
                "too many members",
                Raw {
                    configs: vec![set(&[1])],
                    nodes: nodes(&many),
                },
            ),
            (
                "a long address",
                Raw {
                    configs: vec![set(&[1])],
                    nodes: [(1, long)].into_iter().collect(),
                },
            ),
        ];
        // The membership's bytes in place of the good one's, in both frames.
        let good_raw = postcard::to_allocvec(&Raw {
            configs: vec![set(&[1, 2]), set(&[2, 3])],
            nodes: nodes(&[1, 2, 3, 4]),
        })
        .unwrap();
        assert_eq!(
            good_raw,
            postcard::to_allocvec(&good).unwrap(),
            "Raw is openraft's layout"
        );
        let in_place = |frame: &[u8], m: &Raw| {
            let at = frame
                .windows(good_raw.len())
                .position(|w| w == good_raw.as_slice())
                .expect("the good membership's bytes");
            let mut out = frame[..at].to_vec();
            out.extend(postcard::to_allocvec(m).unwrap());
            out.extend(&frame[at + good_raw.len()..]);
            // The frame's length prefix (four bytes, big-endian) counts what follows it.
            let len = (out.len() - 4) as u32;
            out[..4].copy_from_slice(&len.to_be_bytes());
            out
        };
        let append_bytes = frame::encode(&call).unwrap();
        let snap_bytes = frame::encode(&snapshot(openraft::StoredMembership::new(
            Some(log_id(2)),
            good.clone(),
        )))
        .unwrap();
        for (what, m) in &bad {
            assert!(
                read(in_place(&append_bytes, m)).await.is_err(),
                "an append with {what} decoded"
            );
            assert!(
                read(in_place(&snap_bytes, m)).await.is_err(),
                "a snapshot with {what} decoded"
            );
        }
        // (The lists are capped as they decode: "three configs" above is refused by the
        // cap alone — each of its sets is good.)
    }

    /// An append whose entries skip an index, go back a term (against its previous log id
    /// or an earlier entry), or carry a term above its vote's is closed unanswered, counted
    /// as `bad_append`, and nothing is written: openraft takes such an append in a release
    /// build, and this node's log would then not open again. The same sender's well-formed
    /// append is served, and the log opens after the node stops.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_that_skips_an_index_or_goes_back_a_term_is_refused_unanswered() {
        use openraft::raft::AppendEntriesRequest;
        use openraft::{CommittedLeaderId, LogId, Vote};
        let (node, dir) = unit_node("peer-bad-append").await;
        let ca = crate::tls::DevCa::new().unwrap();
        let cert = node_cert(&ca, 2, "127.0.0.2");
        let policy = PeerPolicy {
            first_peers: [2].into(),
            ..PeerPolicy::default()
        };
        let id = |term: u64, index: u64| LogId::new(CommittedLeaderId::new(term, 2), index);
        let append = |prev: Option<LogId<u64>>, ids: &[(u64, u64)]| {
            RaftReq::Append(AppendEntriesRequest {
                vote: Vote::new_committed(3, 2),
                prev_log_id: prev,
                entries: ids
                    .iter()
                    .map(|&(term, index)| openraft::Entry {
                        log_id: id(term, index),
                        payload: openraft::EntryPayload::Blank,
                    })
                    .collect(),
                leader_commit: None,
            })
        };
        let last = || node.raft.metrics().borrow().last_log_index;
        assert_eq!(last(), None, "a fresh node");
        for (what, req) in [
            ("the first entry not at index 0", append(None, &[(1, 1)])),
            ("an index skipped", append(None, &[(1, 0), (1, 2)])),
            ("a term going back", append(None, &[(2, 0), (1, 1)])),
            (
                "a term below the previous log id's",
                append(Some(id(2, 0)), &[(1, 1)]),
            ),
            (
                "not right after the previous log id",
                append(Some(id(1, 0)), &[(1, 2)]),
            ),
            ("a term above the vote's", append(None, &[(1, 0), (4, 1)])),
            (
                "a previous log id above the vote's term",
                append(Some(id(4, 0)), &[]),
            ),
        ] {
            let n = peer_closed(&policy, "bad_append");
            let got = raft_answer(&node, &cert, &policy, raft_frame(&node, req)).await;
            assert!(got.is_empty(), "{what}: answered");
            assert_eq!(peer_closed(&policy, "bad_append"), n + 1, "{what}");
            assert_eq!(last(), None, "{what}: written");
        }
        let got = raft_answer(
            &node,
            &cert,
            &policy,
            raft_frame(&node, append(None, &[(1, 0), (2, 1), (3, 2)])),
        )
        .await;
        let got = frame::read::<_, RaftResp>(&mut got.as_slice(), MAX_RAFT_FRAME)
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(&got, RaftResp::Append(Ok(AppendEntriesResponse::Success))),
            "the well-formed append not taken"
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while last() != Some(2) {
            assert!(Instant::now() < deadline, "written: {:?}", last());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        node.shutdown().await;
        crate::log_store::LogStore::open(&dir).expect("the log opens");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A backup or export page waits for another page's rebuild at most
    /// `rebuild_turn_wait_ms`, then is answered `Unavailable` (its connection's
    /// place is not held without end); once the turn is free, the page is served.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_backup_page_waits_for_its_turn_a_bounded_time() {
        let (node, dir) = unit_node_with("rebuild-turn", |c| c.rebuild_turn_wait_ms = 500).await;
        initialize_alone(&node).await;
        let opened = ask_leader(
            &node,
            Request::Open {
                ttl_ms: 60_000,
                key: None,
            },
        )
        .await;
        assert!(opened.is_ok(), "{opened:?}");
        let backup = Request::Backup {
            index: None,
            offset: 0,
            max_bytes: 1 << 20,
        };
        let export = Request::Export {
            from_index: None,
            to_index: None,
            from_time: None,
            to_time: None,
            skip: 0,
        };
        let wait = Duration::from_millis(node.config().rebuild_turn_wait_ms);
        {
            let _long_rebuild = node.hold_rebuild_turn().await;
            for req in [backup.clone(), export] {
                let asked = Instant::now();
                // (Bounded here too, so a page that waits without end fails the test
                // instead of hanging it.)
                let limit = wait * 10;
                match tokio::time::timeout(limit, ask_leader(&node, req.clone())).await {
                    Ok(Err(ClientError::Unavailable(m))) => {
                        assert!(m.contains("another backup or export page"), "{m}")
                    }
                    Err(_) => panic!("{req:?} still waits for its turn after {limit:?}"),
                    Ok(r) => panic!("{req:?} while the turn is taken: {r:?}"),
                }
                // It waited for the turn first, rather than being refused at once.
                assert!(
                    asked.elapsed() >= wait,
                    "{req:?} refused after {:?}",
                    asked.elapsed()
                );
            }
        }
        let r = ask_leader(&node, backup).await;
        assert!(matches!(r, Ok(Reply::Backup(_))), "{r:?}");
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The leader clock stamps only in the term its anchor belongs to: anchored in a term
    /// this node does not lead in now (the ticker, which alone resets the anchor, can be
    /// held up on a write while the node loses its term and wins a later one), it gives no
    /// stamp — the later term's entries are not stamped with the earlier term's time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_leader_clock_stamps_only_in_the_term_of_its_anchor() {
        let (node, dir) = unit_node("clock-term").await;
        initialize_alone(&node).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while node.stamp().is_none() {
            assert!(Instant::now() < deadline, "never anchored");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (term, anchored) = node.clock_term();
        assert!(anchored);
        assert_eq!(term, node.raft.metrics().borrow().current_term);
        node.set_clock_term(term - 1);
        assert_eq!(node.stamp(), None, "stamped with another term's anchor");
        // (The ticker may meanwhile have reset the anchor it saw in the wrong term: it
        // anchors again after the grace.)
        node.set_clock_term(term);
        while node.stamp().is_none() {
            assert!(
                Instant::now() < deadline,
                "its own term's anchor gives no stamp"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A peer's answer carrying a term or log index past 2^62 is not taken (the call that
    /// got it fails): a higher vote, a vote answer, a partial success, a snapshot answer, a
    /// pre-vote answer's vote; the same answers in plain terms are taken.
    #[test]
    fn an_answer_past_the_bound_is_not_taken() {
        use openraft::raft::{InstallSnapshotResponse, VoteResponse};
        use openraft::{CommittedLeaderId, LogId, Vote};
        let b = crate::types::RAFT_NUMBER_BOUND;
        for (term, past) in [(7, false), (b - 1, false), (b, true), (u64::MAX, true)] {
            let v = Vote::new_committed(term, 2);
            let l = Some(LogId::new(CommittedLeaderId::new(term, 2), 3));
            let answers = [
                RaftResp::Append(Ok(AppendEntriesResponse::HigherVote(v))),
                RaftResp::Append(Ok(AppendEntriesResponse::PartialSuccess(l))),
                RaftResp::Vote(Ok(VoteResponse {
                    vote: v,
                    vote_granted: false,
                    last_log_id: None,
                })),
                RaftResp::Vote(Ok(VoteResponse {
                    vote: Vote::new(1, 2),
                    vote_granted: false,
                    last_log_id: l,
                })),
                RaftResp::Snapshot(Ok(InstallSnapshotResponse { vote: v })),
                RaftResp::PreVote(PreVoteResponse {
                    granted: false,
                    leader_vote: Some(v),
                }),
            ];
            for (k, a) in answers.iter().enumerate() {
                assert_eq!(
                    answer_past_bound(a).is_some(),
                    past,
                    "term {term}, answer {k}"
                );
            }
        }
    }

    /// A Raft call dropped before its answer came (openraft times each call out itself,
    /// around the transport's own timeout, with the same ttl) takes its connection with
    /// it: the next call goes over a new connection and gets its own answer, never the
    /// dropped call's late one. (Answers carry no request id: on a kept connection, every
    /// later answer would be one behind — a follower's `Success` taken for entries it has
    /// not written.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_raft_call_takes_its_connection_and_its_late_answer_with_it() {
        let (node, dir) = unit_node("cancel-safe").await;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        // A peer answering in order, one connection at a time: the second request late
        // (after 300 ms) and not granted, every other one at once and granted.
        let peer = tokio::spawn(async move {
            let mut n = 0u32;
            let mut conns = 0u32;
            while let Ok((s, _)) = l.accept().await {
                conns += 1;
                let (r, mut w) = s.into_split();
                let mut r = BufReader::new(r);
                while let Ok(Some(_)) = frame::read::<_, RaftCall>(&mut r, MAX_RAFT_FRAME).await {
                    n += 1;
                    if n == 2 {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    let resp = RaftResp::PreVote(PreVoteResponse {
                        granted: n != 2,
                        leader_vote: None,
                    });
                    if frame::write(&mut w, &resp).await.is_err() {
                        break;
                    }
                    if n >= 3 {
                        return conns;
                    }
                }
            }
            conns
        });
        let mut net = TcpNetwork::default();
        net.carry(node.elector().settings().clone());
        let target = NodeAddr {
            raft: addr,
            client: "127.0.0.1:1".into(),
        };
        let mut conn = net.new_client(2, &target).await;
        let ask = || {
            RaftReq::PreVote(PreVoteRequest {
                candidate: 1,
                last_log_id: None,
            })
        };
        let long = Duration::from_secs(10);
        // A first call opens the connection (so the next is cut short after its request
        // was written, not while connecting).
        assert!(matches!(conn.call(ask(), long).await, Ok(RaftResp::PreVote(p)) if p.granted));
        // Dropped from outside before its answer, as openraft's own timeout drops it.
        let dropped =
            tokio::time::timeout(Duration::from_millis(100), conn.call(ask(), long)).await;
        assert!(dropped.is_err(), "the second call was not cut short");
        tokio::time::sleep(Duration::from_millis(500)).await; // its late answer is sent
        match conn.call(ask(), long).await {
            Ok(RaftResp::PreVote(p)) => {
                assert!(
                    p.granted,
                    "the third call got the dropped call's late answer"
                )
            }
            Ok(_) => panic!("not a pre-vote answer"),
            Err(_) => panic!("the third call failed"),
        }
        let conns = tokio::time::timeout(long, peer).await.unwrap().unwrap();
        assert_eq!(conns, 2, "the call after the dropped one did not dial anew");
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A push is written before every answer made after it was queued, however many
    /// answers wait ahead of it: a client that reads nothing while its waiting session is
    /// granted, then asks more, finds the grant before the later answers. (Replies went
    /// first whenever any waited, so a grant could arrive after the answer to the next
    /// acquire of its lock, and be taken for that acquire's outcome.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_push_is_written_before_the_answers_made_after_it() {
        let (node, dir) = unit_node("push-order").await;
        initialize_alone(&node).await;
        let ask = |req: Request| {
            let node = node.clone();
            async move { ask_leader(&node, req).await.unwrap() }
        };
        let (a, a_secret) = open_on_leader(&node).await;
        let (b, b_secret) = open_on_leader(&node).await;
        ask(Request::Acquire {
            session: a,
            secret: a_secret,
            lock: "l".into(),
            mode: Mode::Exclusive,
            wait: WaitSpec::None,
            request: None,
        })
        .await;
        // Requests go in through one pipe; answers come out through one of a byte, so the
        // node's writer stops at its first frame until the test reads.
        let (mut requests, req_end) = tokio::io::duplex(1 << 16);
        let (resp_end, mut answers) = tokio::io::duplex(1);
        let policy = ClientPolicy {
            read_timeout: Duration::from_secs(120),
            ..ClientPolicy::default()
        };
        let task = tokio::spawn(client_conn(req_end, resp_end, node.clone(), None, policy));
        let send = |id: u64, req: Request| frame::encode(&ClientFrame { id, req }).unwrap();
        // Bounded: a frame that never comes fails the test instead of hanging it.
        async fn read(answers: &mut tokio::io::DuplexStream) -> ServerFrame {
            tokio::time::timeout(
                Duration::from_secs(30),
                frame::read::<_, ServerFrame>(answers, MAX_SERVER_FRAME),
            )
            .await
            .expect("a frame within 30 s")
            .unwrap()
            .unwrap()
        }
        use tokio::io::AsyncWriteExt;
        requests
            .write_all(&send(
                1,
                Request::Acquire {
                    session: b,
                    secret: b_secret,
                    lock: "l".into(),
                    mode: Mode::Exclusive,
                    wait: WaitSpec::Forever,
                    request: Some(1),
                },
            ))
            .await
            .unwrap();
        let queued = read(&mut answers).await;
        assert!(
            matches!(
                &queued,
                ServerFrame::Reply {
                    id: 1,
                    result: Ok(Reply::Done {
                        reply: fencelock::Reply::Queued { .. },
                        ..
                    })
                }
            ),
            "{queued:?}"
        );
        // Answers pile up unread; then B is granted (a push), then more answers.
        for id in 100..120 {
            requests
                .write_all(&send(id, Request::Members))
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        ask(Request::Release {
            session: a,
            secret: a_secret,
            lock: "l".into(),
            request: None,
        })
        .await;
        for id in 200..206 {
            requests
                .write_all(&send(id, Request::Members))
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut order = Vec::new();
        for _ in 0..27 {
            order.push(match read(&mut answers).await {
                ServerFrame::Reply { id, .. } => id,
                ServerFrame::Push(fencelock::Output::Granted { session, .. }) if session.0 == b => {
                    0
                }
                other => panic!("{other:?}"),
            });
        }
        let grant = order
            .iter()
            .position(|id| *id == 0)
            .expect("the grant pushed");
        let later = order
            .iter()
            .position(|id| *id >= 200)
            .expect("the later answers");
        assert!(
            grant < later,
            "the grant came after a later answer: {order:?}"
        );
        drop(requests);
        let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A client that attaches to a session and then reads nothing, while grants are pushed
    /// to it, is closed by the node's push budget (lowered to 1): its connection ends
    /// (the node does not wait for a flush the client will never take) and its queued
    /// pushes leave the budget; the session itself is untouched.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_stops_reading_its_pushes_is_closed_and_its_queue_freed() {
        let (node, dir) = unit_node("push-budget").await;
        initialize_alone(&node).await;
        // Requests on connections of their own, whose pushes nobody reads (their queues
        // are dropped at once, so they are detached by the first push).
        let ask = |req: Request| {
            let node = node.clone();
            async move { ask_leader(&node, req).await.unwrap() }
        };
        let (a, a_secret) = open_on_leader(&node).await;
        let (b, b_secret) = open_on_leader(&node).await;
        let locks = ["p0", "p1", "p2"];
        for (session, secret, wait) in [
            (a, a_secret, WaitSpec::None),
            (b, b_secret, WaitSpec::Forever),
        ] {
            for lock in locks {
                ask(Request::Acquire {
                    session,
                    secret,
                    lock: lock.into(),
                    mode: Mode::Exclusive,
                    wait,
                    request: None,
                })
                .await;
            }
        }
        node.shared.hub.set_push_budget(1);
        let script = frame::encode(&ClientFrame {
            id: 1,
            req: Request::Attach {
                session: b,
                secret: b_secret,
            },
        })
        .unwrap();
        let conn = node.next_conn_id() + 1; // the id client_conn takes next
        let task = tokio::spawn(client_conn(
            Script(script),
            NeverReads,
            node.clone(),
            None,
            ClientPolicy::default(),
        ));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !node.shared.hub.has_conn(conn) {
            assert!(Instant::now() < deadline, "never attached");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A's releases grant B three locks: three pushes to a client that reads nothing.
        for lock in locks {
            ask(Request::Release {
                session: a,
                secret: a_secret,
                lock: lock.into(),
                request: None,
            })
            .await;
        }
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the connection of a client that reads nothing was never closed")
            .unwrap();
        assert_eq!(node.shared.hub.queued_pushes(), 0);
        let closes = node
            .shared
            .hub
            .push_closes
            .get_or_create(&vec![("reason".to_string(), "push_budget".to_string())])
            .get();
        assert_eq!(closes, 1);
        {
            let g = node.shared.state();
            for lock in locks {
                assert!(
                    g.svc.holders(lock).any(|h| h.session == SessionId(b)),
                    "{lock}"
                );
            }
        }
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A full Raft port makes room for a new connection by closing the oldest one that has
    /// not yet sent a request (counted `displaced`), never one that has; once every place
    /// has served a request, one more is refused (`total`) and the others are kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_raft_port_displaces_an_idle_connection_never_a_serving_one() {
        use tokio::io::AsyncReadExt;
        let (node, dir) = unit_node("peer-displace").await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let policy = PeerPolicy {
            max_connections: 3,
            ..PeerPolicy::default()
        };
        let stats = policy.stats.clone();
        let count = |f: &Family<Labels, Counter>, reason: &str| {
            f.get_or_create(&labels(&[("port", PEER), ("reason", reason)]))
                .get()
        };
        let serving = tokio::spawn(serve_peers(listener, node.elector().clone(), policy));
        let pre_vote = frame::encode(&RaftCall {
            settings: node.config().service,
            req: RaftReq::PreVote(PreVoteRequest {
                candidate: 2,
                last_log_id: None,
            }),
        })
        .unwrap();
        // A connection that sends a request and reads its answer: served, so proven.
        let served = |mut s: TcpStream| {
            let pre_vote = pre_vote.clone();
            async move {
                s.write_all(&pre_vote).await.unwrap();
                let mut len = [0u8; 4];
                let read = tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut len));
                assert!(matches!(read.await, Ok(Ok(_))), "not answered");
                let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                s.read_exact(&mut body).await.unwrap();
                s
            }
        };
        // Open until the node has accepted it (then it holds a place).
        let open = || async {
            let s = TcpStream::connect(addr).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            s
        };
        let a = served(open().await).await;
        let b = served(open().await).await;
        let mut idle = open().await;
        let fourth = open().await;
        let mut buf = [0u8; 1];
        let closed = tokio::time::timeout(Duration::from_secs(30), idle.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "the idle one was kept"
        );
        assert_eq!(count(&stats.closed, "displaced"), 1);
        let fourth = served(fourth).await;
        // Every place has served now: one more is refused at once, and nobody displaced.
        let mut fifth = open().await;
        let refused = tokio::time::timeout(Duration::from_secs(30), fifth.read(&mut buf)).await;
        assert!(
            matches!(refused, Ok(Ok(0)) | Ok(Err(_))),
            "a fifth was kept"
        );
        assert_eq!(count(&stats.refused, "total"), 1);
        assert_eq!(count(&stats.closed, "displaced"), 1);
        for s in [a, b, fourth] {
            // Still open, and still served.
            served(s).await;
        }
        serving.abort();
        node.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
