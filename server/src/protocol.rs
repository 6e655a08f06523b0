//! The client protocol: [`ClientFrame`]s in, [`ServerFrame`]s out, each a length-prefixed
//! postcard frame of wire version [`CLIENT_WIRE`] ([`crate::frame`]). Requests carry an id chosen by the client; the reply
//! carries it back. A write's reply is the core's [`fencelock::Reply`] to its input
//! ([`Reply::Done`]); the core's events ([`Output`]: a `Granted` after `Queued`, a wait
//! timed out, an expiry, a release by expiry or close, a watched lock's `HolderChanged`)
//! arrive unasked as `Push` frames on the connection a session is attached to.

use fencelock::{Holder, Mode, Output, Permits, SessionInfo, Waiter};
use serde::{Deserialize, Serialize};

use crate::auth::{OpenKey, Principal, SessionSecret};
use crate::frame::{Wire, CLIENT_WIRE};
use crate::membership::MAX_MEMBERS;
use crate::types::{CoreError, NodeAddr};

/// How long an acquire may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitSpec {
    /// Try-lock.
    None,
    /// Wait at most this many milliseconds of the cluster's logical time.
    ForMs(u64),
    /// Wait until granted, cancelled, or the session ends.
    Forever,
}

/// A bearer token as [`Request::Authenticate`] carries it: the same bytes on the wire as
/// a string, but its `Debug` never prints it (a request logged, or shown in a failed
/// assertion, does not give the token away).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BearerToken(pub String);

impl BearerToken {
    /// The token's text. Cost: O(1).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for BearerToken {
    /// Never prints the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

impl From<String> for BearerToken {
    fn from(token: String) -> Self {
        BearerToken(token)
    }
}

impl From<&str> for BearerToken {
    fn from(token: &str) -> Self {
        BearerToken(token.to_string())
    }
}

/// A client request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Open a session of `ttl_ms`; the connection is attached to it. The answer
    /// ([`Reply::Opened`]) carries the session's credential, which every later request
    /// for the session must carry ([`crate::auth`]).
    Open {
        /// Time to live in milliseconds.
        ttl_ms: u64,
        /// Idempotency key (random 128 bits, chosen by the client): a retry with the same
        /// key while the session lives answers with the same session and credential
        /// ([`crate::types::Op::OpenCounted`]) — from the same principal only (the connection's
        /// token; every client of a node without tokens is one principal,
        /// [`crate::auth::Principal`]); the same key from another token opens a session of
        /// its own. Keep it as secret as the credential: clients sharing a token share
        /// its keys.
        key: Option<OpenKey>,
    },
    /// Keep a session alive (a keep-alive is a log entry; no request number needed: a
    /// keep-alive applied twice is harmless).
    KeepAlive {
        /// The session.
        session: u64,
        /// The session's credential (from [`Reply::Opened`]).
        secret: SessionSecret,
    },
    /// Close a session.
    Close {
        /// The session.
        session: u64,
        /// The session's credential (from [`Reply::Opened`]).
        secret: SessionSecret,
        /// Idempotent-retry number (optional: a retry of a close that was applied finds
        /// the session gone, `unknown_session`, which a client may take as done).
        request: Option<u64>,
    },
    /// Acquire a lock.
    Acquire {
        /// The session.
        session: u64,
        /// The session's credential (from [`Reply::Opened`]).
        secret: SessionSecret,
        /// The lock name.
        lock: String,
        /// Exclusive, shared, or `count` of a semaphore's `limit` permits.
        mode: Mode,
        /// How long to wait.
        wait: WaitSpec,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Release a lock.
    Release {
        /// The session.
        session: u64,
        /// The session's credential (from [`Reply::Opened`]).
        secret: SessionSecret,
        /// The lock name.
        lock: String,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Withdraw a queued acquire.
    Cancel {
        /// The session.
        session: u64,
        /// The session's credential (from [`Reply::Opened`]).
        secret: SessionSecret,
        /// The lock name.
        lock: String,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Attach this connection to a session's pushes (after reconnecting to a new leader).
    Attach {
        /// The session.
        session: u64,
        /// The session's credential (from [`Reply::Opened`]).
        secret: SessionSecret,
    },
    /// Linearizable read: a lock's holders.
    Holders {
        /// The lock name.
        lock: String,
    },
    /// Linearizable read: a lock's queue.
    Waiters {
        /// The lock name.
        lock: String,
    },
    /// Linearizable read: a session's state.
    Session {
        /// The session.
        session: u64,
    },
    /// Linearizable read: the cluster's members.
    Members,
    /// Remove a learner (a node that is not a voter) from the membership — say one added
    /// with a wrong address, or that will never catch up. Removing a node that is not a
    /// member is a no-op, so a retry is safe.
    RemoveLearner {
        /// The learner's id.
        id: u64,
    },
    /// Present a bearer token (first, on a node that has a tokens file): the connection's
    /// later requests are allowed what the token grants ([`crate::auth::Tokens`]). A
    /// token is accepted once per connection: after one was, another `Authenticate` is
    /// refused (`BadRequest`) and changes nothing — the connection keeps its grants and
    /// the sessions attached to it. A refused token is answered `Unauthenticated` and
    /// ends the connection.
    Authenticate {
        /// The token.
        token: BearerToken,
    },
    /// Administrator: release `session`'s hold on `lock` without its credential. The
    /// owner is told by a pushed `Released` with reason `Released` (its own releases are
    /// answered, never pushed, so such a push always means someone else released it).
    ForceRelease {
        /// The holding session.
        session: u64,
        /// The lock.
        lock: String,
    },
    /// (Admin.) One page of the recording of what the cluster applied over a window
    /// ([`crate::export`]): log indices and logical times, both ends included, `None` open.
    /// The leader answers after a linearizable read barrier. A recording larger than one
    /// frame comes in pages: ask again with the same window, `from_index` and `to_index` set
    /// to those of the first page's answer, and `skip` the lines received so far.
    Export {
        /// The first log index (`None`: the first one the leader can still export).
        from_index: Option<u64>,
        /// The last log index (`None`: the last applied one).
        to_index: Option<u64>,
        /// The first logical time (milliseconds of the cluster's clock).
        from_time: Option<u64>,
        /// The last logical time.
        to_time: Option<u64>,
        /// Lines of this recording already received.
        skip: u64,
    },
    /// Add a node as a learner (it receives the log but does not vote) and wait until it
    /// has caught up. Adding a learner that is already there with the same addresses is a
    /// no-op, so a retry is safe.
    AddLearner {
        /// The new node's id.
        id: u64,
        /// Its addresses (loopback only on a cluster without TLS).
        addr: NodeAddr,
    },
    /// Make exactly these nodes the voters (joint consensus; each must already be a member,
    /// a learner being promoted). Voters left out are removed from the cluster. Setting the
    /// same voters again is a no-op, so a retry is safe. Refused (`BadRequest`, nothing
    /// changes) unless every one of them is reachable and caught up
    /// ([`crate::membership`]).
    SetVoters {
        /// The voters' ids.
        voters: Vec<u64>,
    },
    /// This node's own view of the cluster and of itself ([`NodeStatus`]): answered by any
    /// node, leader or not, from its local state (not a linearizable read), so a status
    /// tool can ask every node. Costs the node at most one small write and fsync (its
    /// readiness check of the data directory, shared by the requests that ask at once:
    /// [`crate::disk::DiskHealth::probe_shared`]).
    Status,
    /// [`Request::Open`] with a label: the session's holds and waits show it in
    /// `holder`/`queue` answers and in watchers' events (UTF-8, at most
    /// [`fencelock::MAX_LABEL_LEN`] bytes; empty = no label). A label that is too long is
    /// refused (`Core(label_too_long)`) before anything is proposed.
    OpenLabeled {
        /// Time to live in milliseconds.
        ttl_ms: u64,
        /// Idempotency key, as in [`Request::Open`].
        key: Option<OpenKey>,
        /// The label.
        label: String,
    },
    /// Watch a lock's holders: the session is pushed one `HolderChanged` (change
    /// `Holding`) per current holder, then one per later change of the lock's holders
    /// (`Granted`, `Released`, `Closed`, `Expired`), in order, until it unwatches, closes
    /// or expires. The answer is the core's `Watching { holders }`. The pushes go to the
    /// connections attached to the session (this one is attached).
    Watch {
        /// The watching session.
        session: u64,
        /// The session's credential (from [`Reply::Opened`]).
        secret: SessionSecret,
        /// The lock name.
        lock: String,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// End a watch ([`Request::Watch`]); no event of that lock reaches the session after
    /// the answer (`Unwatched`).
    Unwatch {
        /// The watching session.
        session: u64,
        /// The session's credential (from [`Reply::Opened`]).
        secret: SessionSecret,
        /// The lock name.
        lock: String,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Linearizable read: a semaphore's permits in use and its limit ([`Reply::Permits`];
    /// `None` when the name is not a live semaphore).
    Permits {
        /// The lock name.
        lock: String,
    },
    /// Administrator: release `session`'s hold on `lock` if its token is `token`
    /// ([`Request::ForceRelease`], safe to retry): a hold of another token — the session
    /// took the lock again after this release was applied — is refused `not_holder` and
    /// kept. What [`crate::client::Client::force_release`] sends. Appended after the
    /// earlier variants, which keep their encoding.
    ForceReleaseHold {
        /// The holding session.
        session: u64,
        /// The lock.
        lock: String,
        /// The token of the hold to release.
        token: u64,
    },
    /// (Admin.) One page of a backup: the cluster's applied state at log index `index`, in
    /// the checksummed snapshot-file format `fencelock-node snapshot restore` reads (it
    /// holds every open session's credential, hence admin only). The leader answers after
    /// a linearizable read barrier, rebuilding the state at `index` from its snapshot and
    /// committed log, so every page of one backup comes from the same state even when
    /// writes go on, or the leader changes, between pages. Appended after the earlier
    /// variants, which keep their encoding.
    Backup {
        /// The backup's log index (`None`: the last applied one; ask every later page with
        /// the index the first page's answer names).
        index: Option<u64>,
        /// The first byte wanted.
        offset: u64,
        /// At most this many bytes in the page (0, or more than [`BACKUP_PAGE`]:
        /// [`BACKUP_PAGE`]).
        max_bytes: u32,
    },
    /// Administrator: close `session` without its credential, ending its holds, waits and
    /// watches now rather than at its ttl (a revoked or compromised token's sessions).
    /// Answered `Closed`; a session that is not open is refused `unknown_session` (so a
    /// retry whose first answer was lost is told the session is gone). The owner's
    /// connections are pushed `Released` with reason `Closed` for each hold, then
    /// `SessionExpired` (the push for a session that ended without its asking, here with no
    /// deadline passed), and its next request for the session is refused `unknown_session`. What
    /// [`crate::client::Client::force_close`] sends. Appended after the earlier variants,
    /// which keep their encoding.
    ForceClose {
        /// The session.
        session: u64,
    },
    /// Administrator, linearizable read: a page of the open sessions in id order, each with
    /// the principal that opened it — how an administrator finds a revoked token's
    /// sessions to [`Request::ForceClose`] them (a session that only watches is named by
    /// no lock's holders or queue). The sessions with ids above `after`, at most `limit`
    /// of them (0, or more than [`SESSIONS_PAGE`]: [`SESSIONS_PAGE`]), only those `owner`
    /// opened when it is given; at most [`SESSIONS_SCAN`] sessions are looked at for one
    /// page, so a filter that matches few answers a short page with `next` set rather than
    /// hold the state for the whole table. Pages are read one by one; ids only grow, so a
    /// session opened while they are read is on a later page, and only one opened after the
    /// last page is missed. Listed are the sessions with a credential: every session an
    /// open entry made (a snapshot restored without one's credential, damaged or forged,
    /// leaves a session nobody can act for, unlisted, until its ttl ends it). What
    /// [`crate::client::Client::sessions`] sends. Appended after the earlier variants,
    /// which keep their encoding.
    Sessions {
        /// List ids above this (0: from the first).
        after: u64,
        /// Only the sessions this principal opened (`None`: every one).
        owner: Option<Principal>,
        /// At most this many sessions in the page.
        limit: u32,
    },
    /// Linearizable read: `session`'s hold of `lock` (`None`: it holds none — it waits or
    /// only watches, or the session or the lock is gone). How a holder learns whether its
    /// hold stands without reading every holder of a semaphore (what
    /// [`crate::client::Session::watch_hold`] sends). Needs the read role on the lock's
    /// prefix, as [`Request::Holders`] does. Appended after the earlier variants, which
    /// keep their encoding.
    Hold {
        /// The lock.
        lock: String,
        /// The session.
        session: u64,
    },
}

impl Request {
    /// The lock a session input names (an acquire, release, cancel, watch or unwatch).
    /// Cost: O(1).
    pub fn input_lock(&self) -> Option<&str> {
        match self {
            Request::Acquire { lock, .. }
            | Request::Release { lock, .. }
            | Request::Cancel { lock, .. }
            | Request::Watch { lock, .. }
            | Request::Unwatch { lock, .. } => Some(lock),
            _ => None,
        }
    }
}

/// A lock name for a core input, judged as a node judges it — one rule for the node and
/// the client, which refuses before it numbers a request what a node would refuse. The
/// core checks names itself, after the session (its error precedence), so an empty name
/// is passed on (as the empty `LockName`) for the core to refuse. Only a name longer than
/// [`fencelock::MAX_NAME_LEN`] bytes, which no input can carry, is refused here, before
/// any other check, with the core's own `name_too_long`.
///
/// Errors: `Core(name_too_long)`. Cost: O(name length).
pub fn input_name(lock: &str) -> Result<fencelock::LockName, ClientError> {
    if lock.is_empty() {
        return Ok(fencelock::LockName::default());
    }
    fencelock::LockName::new(lock).map_err(|e| ClientError::Core(e.into()))
}

/// The most sessions in one page of [`Request::Sessions`].
pub const SESSIONS_PAGE: u32 = 1000;

/// The most sessions one [`Request::Sessions`] page looks at (listed or passed over by
/// its `owner` filter).
pub const SESSIONS_SCAN: usize = 10_000;

/// The most bytes of a backup in one page ([`Request::Backup`]): well inside a reply
/// frame ([`crate::frame::MAX_SERVER_FRAME`]).
pub const BACKUP_PAGE: u32 = 4 << 20;

/// One frame from a client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientFrame {
    /// Echoed in the reply.
    pub id: u64,
    /// The request.
    pub req: Request,
}

impl Wire for ClientFrame {
    const VERSION: u32 = CLIENT_WIRE;
}

/// A successful reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// A write was committed and applied: the core's answer to its input (a repeat of the
    /// session's latest request number gets the core's replay of it). The input's events
    /// are pushed, not returned here.
    Done {
        /// The core's reply.
        reply: fencelock::Reply,
        /// Logical time after applying.
        now: u64,
        /// Log index of the entry.
        index: u64,
    },
    /// A session was opened (or a retried open found the one its key opened).
    Opened {
        /// The core's reply (`Opened { session, expires_at }`).
        reply: fencelock::Reply,
        /// The session's credential: every request for the session must carry it.
        secret: SessionSecret,
        /// Logical time after applying.
        now: u64,
        /// Log index of the entry.
        index: u64,
    },
    /// Holders of a lock.
    Holders(Vec<Holder>),
    /// Queue of a lock, head first.
    Waiters(Vec<Waiter>),
    /// A session's state (`None`: not open).
    Session(Option<SessionInfo>),
    /// The connection is attached.
    Attached,
    /// The token was accepted.
    Authenticated,
    /// The cluster's members.
    Members {
        /// Voting members, by id (at most [`MAX_MEMBERS`]: more is a malformed frame).
        #[serde(deserialize_with = "members")]
        voters: Vec<(u64, NodeAddr)>,
        /// Learners (receive the log, do not vote), by id (at most [`MAX_MEMBERS`]).
        #[serde(deserialize_with = "members")]
        learners: Vec<(u64, NodeAddr)>,
    },
    /// A membership change was committed.
    MembershipChanged,
    /// The answering node's status.
    Status(NodeStatus),
    /// A page of a recording ([`Request::Export`]).
    Export(ExportPage),
    /// A semaphore's permits ([`Request::Permits`]): `None` when the name is not a live
    /// semaphore (no holds or waits by a permits acquire).
    Permits(Option<Permits>),
    /// A page of a backup ([`Request::Backup`]).
    Backup(BackupPage),
    /// A page of the open sessions ([`Request::Sessions`]).
    Sessions(SessionsPage),
    /// A session's hold of a lock ([`Request::Hold`]).
    Hold(Option<Holder>),
}

/// One page of the open sessions ([`Request::Sessions`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionsPage {
    /// The sessions, in id order (at most [`SESSIONS_PAGE`]: a page of more is refused as
    /// a malformed frame as it decodes).
    #[serde(deserialize_with = "listed_sessions")]
    pub sessions: Vec<ListedSession>,
    /// `Some(id)`: more sessions may follow; ask again with `after` this id. `None`: this
    /// page reached the last open session.
    pub next: Option<u64>,
}

/// One open session as [`Request::Sessions`] lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedSession {
    /// The core's view of it (ttl, deadline, holds, waits, watches, label).
    pub info: SessionInfo,
    /// Who opened it: a token's principal, [`Principal::Anyone`] on a node without tokens,
    /// or [`Principal::Unrecorded`] for an open whose entry an earlier build wrote
    /// (`Open`, `OpenLabeled`, and `OpenAs`, whose opener scopes its open key only).
    pub owner: Principal,
}

/// One page of a backup ([`Request::Backup`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupPage {
    /// Bytes `offset..` of the backup, at most the page size asked for.
    pub bytes: Vec<u8>,
    /// How many bytes the whole backup has.
    pub total: u64,
    /// The log index the backup was taken at (ask the next pages with it).
    pub index: u64,
    /// The id of the node that answered (the leader).
    pub node: u64,
}

/// One node's own view ([`Request::Status`]), as `/readyz` and `/metrics` see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The node's id.
    pub id: u64,
    /// The server's version (`CARGO_PKG_VERSION`).
    pub version: String,
    /// Its Raft role: `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: String,
    /// Its current term.
    pub term: u64,
    /// The leader it knows, if any.
    pub leader: Option<u64>,
    /// The last log index it knows committed.
    pub committed: u64,
    /// The last log index applied to its state machine.
    pub applied: u64,
    /// The last log index in its log.
    pub last_log: u64,
    /// Whether `/readyz` would pass.
    pub ready: bool,
    /// The readiness checks, one line each (`ok …` / `fail …`; at most [`MAX_CHECKS`]).
    #[serde(deserialize_with = "checks")]
    pub checks: Vec<String>,
    /// The voters in its membership, by id (at most [`MAX_MEMBERS`]).
    #[serde(deserialize_with = "members")]
    pub voters: Vec<(u64, NodeAddr)>,
    /// The learners in its membership, by id (at most [`MAX_MEMBERS`]).
    #[serde(deserialize_with = "members")]
    pub learners: Vec<(u64, NodeAddr)>,
    /// Sessions open, and the table's rows.
    pub sessions: (u64, u64),
    /// Locks in use, and the table's rows.
    pub locks: (u64, u64),
    /// Claims (holds, waits and watches), and the pool's rows.
    pub claims: (u64, u64),
    /// Client connections open on it, and its limit.
    pub connections: (u64, u64),
}

/// The most readiness checks a [`NodeStatus`] may list (a node lists a handful).
pub const MAX_CHECKS: usize = 64;

/// A member list of a reply: at most [`MAX_MEMBERS`] entries, as a node's own membership
/// is (a node answering more is refused as a malformed frame before the entries past the
/// limit are decoded, so it cannot make a client hold millions of them, or `fencelock
/// status` dial them). Cost: O(entries).
fn members<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(u64, NodeAddr)>, D::Error> {
    crate::types::capped_vec::<D, (u64, NodeAddr), MAX_MEMBERS>(d)
}

/// [`SessionsPage::sessions`]: at most [`SESSIONS_PAGE`]. Cost: O(sessions).
fn listed_sessions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<ListedSession>, D::Error> {
    crate::types::capped_vec::<D, ListedSession, { SESSIONS_PAGE as usize }>(d)
}

/// [`NodeStatus::checks`]: at most [`MAX_CHECKS`] lines. Cost: O(lines).
fn checks<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    crate::types::capped_vec::<D, String, MAX_CHECKS>(d)
}

/// [`ExportPage::lines`]: at most [`crate::export::MAX_LINES`]. Cost: O(lines).
fn export_lines<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    crate::types::capped_vec::<D, String, { crate::export::MAX_LINES }>(d)
}

/// One page of a recording: its lines from `skip` on, as many as fit one frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportPage {
    /// Lines `skip..` of the recording (each `JSON \t crc32`, no newline; at most
    /// [`crate::export::MAX_LINES`], as many as a recording has).
    #[serde(deserialize_with = "export_lines")]
    pub lines: Vec<String>,
    /// How many lines the whole recording has.
    pub total: u64,
    /// The window's first log index, resolved (ask the next pages with it).
    pub from_index: u64,
    /// The window's last log index, resolved (ask the next pages with it).
    pub to_index: u64,
    /// The log index and logical time of the first and last recorded input, if any.
    pub span: Option<((u64, u64), (u64, u64))>,
    /// The id of the node that answered (the leader).
    pub node: u64,
}

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientError {
    /// This node is not the leader; retry at `leader` (client address), if known. For a
    /// write the outcome is unknown: a leader that stepped back (or lost its term) while
    /// the write was in a batch may still commit it, so retry with the same request number
    /// (the core replays it instead of applying it twice).
    NotLeader {
        /// The leader's client address.
        leader: Option<String>,
    },
    /// The core refused the input; nothing changed (beyond the advance of logical time to
    /// the entry's time, which stands). Also the node's answer, before anything is
    /// proposed, to a request naming a session that is not open in the leader's applied
    /// state, or (on a node with tokens) that another token opened: `unknown_session`.
    Core(CoreError),
    /// The request named an open session of the caller's token without that session's
    /// credential (a wrong or missing secret); nothing changed, beyond the advance of
    /// logical time to the entry's time when the state machine refused it (the leader
    /// refuses most before they are proposed).
    NotOwner {
        /// The session.
        session: u64,
    },
    /// No token was presented, or an unknown one (on a node with a tokens file).
    Unauthenticated,
    /// The connection's token does not allow this request (the reason says what is
    /// missing).
    Forbidden(String),
    /// The cluster could not commit or confirm in time (retry with the same request number).
    Unavailable(String),
    /// The request was malformed (a bad lock name in a read, a bad node address…). A core
    /// input's lock name is the core's to check (`Core` errors, in the core's order), except
    /// one longer than [`fencelock::MAX_NAME_LEN`] bytes, which no input can carry: that is
    /// refused before any other check, as `Core(name_too_long)` — when its request fits a
    /// frame; one that does not ([`crate::frame::MAX_CLIENT_FRAME`] bytes by default) is
    /// answered `Malformed` and its connection closed. [`crate::client::Client`] refuses
    /// a session input's over-long name itself, as `Core(name_too_long)`, and any request
    /// past the default frame limit as `BadRequest`, before sending either.
    BadRequest(String),
    /// A limit of this node refused the request, or its answer; `kind` names the limit, a
    /// stable word. Every kind but `reply_too_large` refuses before anything is proposed
    /// (nothing changed). Whether a retry can succeed depends on the kind: a number past a
    /// bound (`ttl_too_long`, `session_id_too_large`, `request_number_too_large`,
    /// `token_too_large`) never will as it is; `too_many_sessions` can once sessions of the
    /// connection close, and
    /// `too_many_token_sessions` once sessions opened with the same token close or expire;
    /// `unwritten_lists` (a read of a lock's holders or queue, when the node holds too many
    /// bytes of such answers its clients have not read yet) once they are read.
    /// `reply_too_large` replaces an answer larger than a client reads, after the request
    /// was served (a write was applied): asking again can succeed once the answer is
    /// smaller (a lock with fewer holders or waiters).
    Limit {
        /// The limit, a stable word.
        kind: String,
        /// What was asked and what the limit is.
        message: String,
    },
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::NotLeader { leader } => write!(f, "not the leader (leader: {leader:?})"),
            ClientError::Core(e) => write!(f, "{e}"),
            ClientError::NotOwner { session } => write!(
                f,
                "not the owner of session {session} (wrong or missing credential)"
            ),
            ClientError::Unauthenticated => write!(f, "no valid token presented"),
            ClientError::Forbidden(m) => write!(f, "forbidden: {m}"),
            ClientError::Unavailable(m) => write!(f, "unavailable: {m}"),
            ClientError::BadRequest(m) => write!(f, "bad request: {m}"),
            ClientError::Limit { kind, message } => write!(f, "refused ({kind}): {message}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// One frame from a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerFrame {
    /// The answer to request `id`.
    Reply {
        /// The request's id.
        id: u64,
        /// The outcome.
        result: Result<Reply, ClientError>,
    },
    /// An event for an attached session.
    Push(Output),
    /// The node could not decode a frame; it closes the connection after this. (A frame
    /// of another wire version is answered with [`crate::frame::version_only`] instead,
    /// which a client of any version reads.)
    Malformed(String),
}

impl Wire for ServerFrame {
    const VERSION: u32 = CLIENT_WIRE;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bearer token travels as the string it is (the wire is unchanged) and is never
    /// printed by `Debug`, alone or inside a request.
    #[test]
    fn a_bearer_token_is_a_string_on_the_wire_and_hidden_in_debug() {
        let secret = "s3cret-bearer-token";
        let req = Request::Authenticate {
            token: secret.into(),
        };
        assert!(!format!("{req:?}").contains(secret), "{req:?}");
        assert!(!format!("{:?}", BearerToken::from(secret)).contains(secret));
        assert_eq!(
            postcard::to_allocvec(&BearerToken::from(secret)).unwrap(),
            postcard::to_allocvec(&secret.to_string()).unwrap()
        );
    }

    fn status(checks: usize, voters: usize, learners: usize) -> NodeStatus {
        let member = |i: usize| {
            let addr = NodeAddr {
                raft: format!("127.0.0.1:{i}"),
                client: format!("127.0.0.1:{}", i + 1),
            };
            (i as u64, addr)
        };
        NodeStatus {
            id: 1,
            version: "0".into(),
            role: "follower".into(),
            term: 1,
            leader: None,
            committed: 0,
            applied: 0,
            last_log: 0,
            ready: true,
            checks: vec!["ok".into(); checks],
            voters: (0..voters).map(member).collect(),
            learners: (0..learners).map(member).collect(),
            sessions: (0, 1),
            locks: (0, 1),
            claims: (0, 1),
            connections: (0, 1),
        }
    }

    /// A reply's member lists and readiness checks decode up to a node's own limits and
    /// are refused past them, before the entries past the limit are decoded: a node
    /// cannot have a client hold (or `fencelock status` dial) millions of members.
    #[test]
    fn member_lists_and_checks_past_their_limits_are_refused() {
        let decode = |st: NodeStatus| {
            let bytes = postcard::to_allocvec(&ServerFrame::Reply {
                id: 1,
                result: Ok(Reply::Status(st)),
            })
            .unwrap();
            postcard::from_bytes::<ServerFrame>(&bytes).map(|_| ())
        };
        let m = MAX_MEMBERS;
        assert!(decode(status(MAX_CHECKS, m, m)).is_ok());
        assert!(decode(status(MAX_CHECKS + 1, 1, 0)).is_err());
        assert!(decode(status(1, m + 1, 0)).is_err());
        assert!(decode(status(1, 1, m + 1)).is_err());
        let members = |voters: usize, learners: usize| {
            let st = status(0, voters, learners);
            let bytes = postcard::to_allocvec(&ServerFrame::Reply {
                id: 1,
                result: Ok(Reply::Members {
                    voters: st.voters,
                    learners: st.learners,
                }),
            })
            .unwrap();
            postcard::from_bytes::<ServerFrame>(&bytes).map(|_| ())
        };
        assert!(members(m, m).is_ok());
        assert!(members(m + 1, 0).is_err());
        assert!(members(0, m + 1).is_err());
        let export = |lines: usize| {
            let page = ExportPage {
                lines: vec![String::new(); lines],
                total: lines as u64,
                from_index: 0,
                to_index: 0,
                span: None,
                node: 1,
            };
            let bytes = postcard::to_allocvec(&Reply::Export(page)).unwrap();
            postcard::from_bytes::<Reply>(&bytes).map(|_| ())
        };
        assert!(export(crate::export::MAX_LINES).is_ok());
        assert!(export(crate::export::MAX_LINES + 1).is_err());
    }
}
