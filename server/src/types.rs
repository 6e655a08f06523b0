//! The openraft type configuration and the log entry / response types of the server.

use std::fmt;
use std::io::Cursor;

use fencelock::{Input, Label, LockName, SessionId, Tick, Token};
use serde::{Deserialize, Serialize};

use crate::auth::{OpenKey, Principal, SessionSecret};

/// A node's two loopback addresses: Raft RPCs and the client protocol. Stored in the Raft
/// membership so that any node can tell a client where the leader listens.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddr {
    /// `host:port` of the Raft RPC listener.
    pub raft: String,
    /// `host:port` of the client-protocol listener.
    pub client: String,
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raft={} client={}", self.raft, self.client)
    }
}

/// The time a client [`Input`] carries when a node builds it: none of its own. The state
/// machine stamps every input with its entry's time when it applies it (see [`Cmd`]), so
/// this placeholder never reaches the core.
pub const STAMPED_AT_APPLY: Tick = Tick(0);

/// One request in a log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// A core input that names no session and opens none (the leader's bare `Tick`),
    /// applied at its entry's time ([`Cmd`]). Any other input proposed this way is refused
    /// ([`OpError::NeedsCredential`]): sessions are opened with [`Op::Open`] and acted for
    /// with [`Op::Owned`].
    Input(Input),
    /// A core input naming a session, with the credential its sender presented. Applied
    /// only if the session is open and `secret` is its secret, or if the session is not
    /// open at all (then the core refuses it as an unknown session); otherwise refused as
    /// [`OpError::NotOwner`] and nothing changes (beyond the advance to the entry's time).
    /// See [`crate::auth`].
    Owned {
        /// The input (keep-alive, close, acquire, release, cancel, watch, unwatch).
        input: Input,
        /// The credential presented with it.
        secret: SessionSecret,
    },
    /// An administrator's release of `session`'s hold on `lock`, without the session's
    /// credential (the node checked the requester's admin token). Applied as the core's
    /// `Release` (no request number, so the owner's numbering is untouched); when it
    /// releases, the owner is pushed `Released` with reason `Released` — its own releases
    /// are answered, never pushed, so this push always means someone else released it.
    ForceRelease {
        /// The holding session.
        session: SessionId,
        /// The lock.
        lock: LockName,
    },
    /// Open a session *idempotently*: the first entry carrying `key` opens a session of
    /// `ttl` (the core's `OpenSession`); a later one with the same key, while that session
    /// is open, answers with that session instead of opening another. So a client that
    /// retries an open after a lost reply (a leader crash) does not leave an orphan
    /// session behind. The key is forgotten when the session ends. This is request
    /// de-duplication, like the request numbers of the other inputs; the session itself
    /// is the core's.
    ///
    /// The session's credential is `secret`, drawn by the node that proposed the open
    /// ([`crate::auth`]); a retry is answered with the secret of the session the key
    /// opened, not its own.
    ///
    /// Written by earlier versions only (this one proposes [`Op::OpenCounted`]): applied as
    /// an [`Op::OpenAs`] from [`Principal::Unrecorded`].
    Open {
        /// Time to live in ticks (milliseconds).
        ttl: u64,
        /// Chosen by the client, unique per open it means (random 128 bits); `None`: no
        /// retry is recognised.
        key: Option<OpenKey>,
        /// The new session's credential (128 bits from the proposing node's OS random
        /// source).
        secret: SessionSecret,
    },
    /// [`Op::Open`] of a labelled session: the core's `OpenLabeled` (the label shows in
    /// its holds, waits and watchers' events); otherwise exactly as [`Op::Open`] (a retry
    /// with the same key answers with the session the key opened, whatever its label).
    /// Written by earlier versions only, as [`Op::Open`].
    OpenLabeled {
        /// Time to live in ticks (milliseconds).
        ttl: u64,
        /// As in [`Op::Open`].
        key: Option<OpenKey>,
        /// As in [`Op::Open`].
        secret: SessionSecret,
        /// The session's label.
        label: Label,
    },
    /// The open earlier builds of this version proposed (this one proposes
    /// [`Op::OpenCounted`]), for [`crate::protocol::Request::Open`]
    /// and [`crate::protocol::Request::OpenLabeled`] alike: [`Op::Open`] (`label` `None`) or
    /// [`Op::OpenLabeled`], with the idempotency key scoped to `principal`. A later open
    /// with the same key answers with the session that key opened only when it comes from
    /// the same principal; from another principal it opens a session of its own (its key
    /// then names that one for it). So a client that presents another client's key —
    /// chosen badly, or learnt — never receives that client's session or credential.
    ///
    /// Appended after the earlier variants, so log entries written by earlier versions
    /// ([`Op::Open`], [`Op::OpenLabeled`]) keep their encoding and are still applied; their
    /// keys are scoped to [`Principal::Unrecorded`].
    OpenAs {
        /// Time to live in ticks (milliseconds).
        ttl: u64,
        /// As in [`Op::Open`].
        key: Option<OpenKey>,
        /// As in [`Op::Open`].
        secret: SessionSecret,
        /// The session's label (`None`: the core's `OpenSession`).
        label: Option<Label>,
        /// Who asked ([`Principal`]): the connection's token, or [`Principal::Anyone`] on
        /// a node without tokens.
        principal: Principal,
    },
    /// The open this version proposes: [`Op::OpenAs`], and the session is recorded as
    /// `principal`'s, counted for the per-token session quota on every replica (and kept
    /// in snapshots). An [`Op::OpenAs`] entry, written by earlier builds, records no
    /// session's principal: were it counted on replay, a replica restored from an earlier
    /// build's snapshot would count the opens it replayed after that snapshot and a
    /// replica with a later snapshot would not, and the replicas' counts would differ.
    /// Appended after the earlier variants, which keep their encoding.
    OpenCounted {
        /// Time to live in ticks (milliseconds).
        ttl: u64,
        /// As in [`Op::Open`].
        key: Option<OpenKey>,
        /// As in [`Op::Open`].
        secret: SessionSecret,
        /// As in [`Op::OpenAs`].
        label: Option<Label>,
        /// As in [`Op::OpenAs`]; the session is counted as this principal's.
        principal: Principal,
    },
    /// The forced release this version proposes: [`Op::ForceRelease`] of the hold whose
    /// token is `token` only, applied as the core's `Input::ReleaseHold` (docs/SPEC.md
    /// §3). If, at the entry's time, `session` holds `lock` with another token (it took
    /// the lock again after an earlier forced release), it is refused `not_holder` and
    /// nothing changes but the advance; otherwise it answers as `ForceRelease` would
    /// (releasing that hold, or the core's refusal). So an administrator's retry of a
    /// release that was applied but whose answer was lost does not release the hold taken
    /// after it.
    /// Appended after the earlier variants, which keep their encoding.
    ForceReleaseHold {
        /// The holding session.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// The token of the hold to release.
        token: Token,
    },
    /// Not a request: the first op of every entry this version proposes, which says how
    /// the entry's ops reach their time. With it, each op's advance ticks at every
    /// deadline before the op's time, in time order, then at that time — as a host that
    /// ticks at each `poll_timeout()` does (docs/SPEC.md §8, item 2). Without it (entries of
    /// earlier builds, replayed from a log or a peer) an op advances to its time in one
    /// step, as those builds applied it, so that every replica of an old entry answers
    /// what the old build answered. The two differ when several deadlines fall between
    /// two entries: in one step, a session's expiry, a timed wait's end and the grants they
    /// allow all happen at the later time, so a waiter whose turn came before its own
    /// deadline could time out instead of being granted. It is not applied and not
    /// answered: every loop over an entry's ops skips it (the entry's results are its other
    /// ops', in order); anywhere but first it is skipped the same way and turns nothing on. Appended after the earlier variants, which keep their encoding.
    EachDeadline,
    /// An administrator's close of `session`, without the session's credential (the node
    /// checked the requester's admin token): what ends a revoked or compromised token's
    /// sessions at once instead of at their ttl. Applied as the core's `CloseSession` (no
    /// request number): its watches end, each of its holds is released (reason `Closed`,
    /// pushed to the owner's connections like any event of the session, and the lock
    /// granted on to the next waiter with a new token), its waits end; its open key and
    /// credential are forgotten, as at any close. No lock-delay: the core keeps that for an
    /// expiry, and this is a close (fencing tokens refuse the old holder's late writes).
    /// Then the owner's connections are pushed
    /// `SessionExpired`, the push for a session that ended without its asking (no deadline
    /// passed; the core emits no such event for a close, so a recording has none). A session that is not open is refused
    /// `unknown_session`, so a retry after a lost answer changes nothing. Appended after the
    /// earlier variants, which keep their encoding.
    ForceClose {
        /// The session.
        session: SessionId,
    },
}

/// One replicated log entry: a batch of [`Op`]s, stamped with the proposing leader's
/// logical time (`now`, in milliseconds of leader-active time; `None` while a new leader
/// is still in its grace period). Every op is applied at the entry's time: the input
/// handed to the core carries (via [`Input::at`]) the latest of the entry's stamp, the
/// time the input itself carries (only the leader's bare `Tick` carries one; client inputs
/// carry [`STAMPED_AT_APPLY`]) and the service's current time — so time never goes
/// backwards, stands still while no stamp moves it, and every replica applies exactly the
/// same inputs at exactly the same times. Before each input, time advances to its time:
/// through every deadline on the way, one tick at each, in entries that begin with
/// [`Op::EachDeadline`] (every entry this version proposes), or in one step (expiries,
/// timeouts and grants at once) in entries of earlier builds ([`Cmd::each_deadline`]).
///
/// A batch holds the requests that arrived while the leader was flushing the previous
/// entry (see [`crate::proposer`]): one entry, one fsync, however many requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cmd {
    /// The leader's logical time when it proposed this entry.
    pub now: Option<u64>,
    /// The requests, applied in this order: at most [`MAX_CMD_OPS`] (a longer list does
    /// not decode).
    #[serde(deserialize_with = "capped_ops")]
    pub ops: Vec<Op>,
}

/// The most ops one entry holds: a batch of [`crate::proposer::MAX_BATCH`] requests after
/// [`Op::EachDeadline`]. Every entry a node proposes holds at most this many; a longer
/// list, which only a forged or damaged entry has, is refused as it decodes, before it is
/// allocated — a peer's frame of one-byte ops would otherwise decode into some hundred
/// times its size.
pub const MAX_CMD_OPS: usize = crate::proposer::MAX_BATCH + 1;

fn capped_ops<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Op>, D::Error> {
    capped_vec::<D, Op, MAX_CMD_OPS>(d)
}

/// A sequence of at most `N` elements, refused as soon as it says or shows that it holds
/// more (before an element past `N` is decoded or room for it allocated). The encoding is
/// a plain `Vec`'s. Errors: the decoder's `invalid_length`, or its own. Cost: O(elements).
pub(crate) fn capped_vec<'de, D, T, const N: usize>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Capped<T, const N: usize>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>, const N: usize> serde::de::Visitor<'de> for Capped<T, N> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a sequence of at most {N} elements")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let said = seq.size_hint().unwrap_or(0);
            if said > N {
                return Err(serde::de::Error::invalid_length(said, &self));
            }
            let mut out = Vec::with_capacity(said);
            while let Some(x) = seq.next_element()? {
                if out.len() == N {
                    return Err(serde::de::Error::invalid_length(N + 1, &self));
                }
                out.push(x);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Capped::<T, N>(std::marker::PhantomData))
}

impl Cmd {
    /// An entry of this version: `ops` after [`Op::EachDeadline`], stamped `now`. Cost:
    /// O(ops).
    pub fn new(now: Option<u64>, ops: impl IntoIterator<Item = Op>) -> Cmd {
        Cmd {
            now,
            ops: std::iter::once(Op::EachDeadline).chain(ops).collect(),
        }
    }

    /// Whether its ops tick at each deadline on the way to their time (it begins with
    /// [`Op::EachDeadline`]). Cost: O(1).
    pub fn each_deadline(&self) -> bool {
        matches!(self.ops.first(), Some(Op::EachDeadline))
    }
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}@{:?}", self.ops, self.now)
    }
}

/// A core error as it crosses the wire: its stable code, kind and message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoreError {
    /// [`fencelock::Error::code`].
    pub code: u32,
    /// [`fencelock::Error::kind`].
    pub kind: String,
    /// The Display message.
    pub message: String,
}

impl From<fencelock::Error> for CoreError {
    fn from(e: fencelock::Error) -> Self {
        CoreError {
            code: e.code(),
            kind: e.kind().to_string(),
            message: e.to_string(),
        }
    }
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.kind, self.code, self.message)
    }
}

/// Why the state machine refused an op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpError {
    /// The core refused the input.
    Core(CoreError),
    /// The input names an open session but did not carry its credential; the core never
    /// saw it.
    NotOwner {
        /// The session.
        session: u64,
    },
    /// An open or a session's input proposed as a bare [`Op::Input`] (no credential).
    NeedsCredential,
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpError::Core(e) => write!(f, "{e}"),
            OpError::NotOwner { session } => {
                write!(
                    f,
                    "not the owner of session {session} (wrong or missing credential)"
                )
            }
            OpError::NeedsCredential => write!(f, "a session input needs a credential"),
        }
    }
}

/// What applying one entry produced: one [`CmdResult`] per op of its [`Cmd`], in order
/// (empty for openraft's blank and membership entries).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResult(pub Vec<CmdResult>);

/// What applying one op produced for its proposer: the core's [`fencelock::Reply`] to its
/// input, or the core's refusal. The input's events (grants to waiters, expiries…) are not
/// here: they are pushed to the sessions they name, the proposer's own included.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmdResult {
    /// The core's answer to the input, or its refusal (then nothing changed beyond the
    /// advance to the entry's time).
    pub reply: Result<fencelock::Reply, OpError>,
    /// The service's logical time after applying the op.
    pub now: u64,
    /// The log index of the entry that carried the input (a batch shares one index).
    pub index: u64,
    /// For an open that succeeded: the session's credential (for a retried open, the one
    /// the first attempt drew). `None` otherwise.
    pub secret: Option<SessionSecret>,
}

openraft::declare_raft_types!(
    /// The Raft types of a fencelock cluster.
    pub TypeConfig:
        D = Cmd,
        R = BatchResult,
        NodeId = u64,
        Node = NodeAddr,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A Raft instance of this cluster.
pub type Raft = openraft::Raft<TypeConfig>;
/// Node id.
pub type NodeId = u64;
/// Log id.
pub type LogId = openraft::LogId<NodeId>;
/// Log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// Storage error.
pub type StorageError = openraft::StorageError<NodeId>;
/// Vote.
pub type Vote = openraft::Vote<NodeId>;
/// Stored membership.
pub type StoredMembership = openraft::StoredMembership<NodeId, NodeAddr>;
/// A membership: voter sets (one, or two while joint) and every member's addresses.
pub type Membership = openraft::Membership<NodeId, NodeAddr>;
/// Snapshot meta.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, NodeAddr>;

/// Every Raft term and log index a node takes — from a peer, in a peer's answer, or
/// replayed from its own log — is below this bound, 2^62. Terms grow by one an election
/// and indices by one an entry, so no cluster comes near it: a number past it is forged
/// or damaged. openraft works out `term + 1` for each election and unwraps the vote it
/// makes of it; a vote at `u64::MAX`, taken by one node, reaches the others with its
/// answers and appends, and the next election on each then panics its Raft core, for
/// good (the vote is durable).
pub const RAFT_NUMBER_BOUND: u64 = 1 << 62;

/// Whether `id`'s term and index are below [`RAFT_NUMBER_BOUND`]. Cost: O(1).
pub fn log_id_in_bounds(id: &LogId) -> bool {
    id.leader_id.get_term() < RAFT_NUMBER_BOUND && id.index < RAFT_NUMBER_BOUND
}

/// Whether `vote`'s term is below [`RAFT_NUMBER_BOUND`]. Cost: O(1).
pub fn vote_in_bounds(vote: &Vote) -> bool {
    vote.leader_id().get_term() < RAFT_NUMBER_BOUND
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An op takes at most 160 bytes in memory: the figure the log's weight bound is
    /// documented in (`crate::log_store::weight`, `NodeConfig::snapshot_ops`).
    #[test]
    fn an_op_takes_at_most_160_bytes() {
        assert!(
            std::mem::size_of::<Op>() <= 160,
            "{}",
            std::mem::size_of::<Op>()
        );
    }

    /// An entry of [`MAX_CMD_OPS`] ops decodes; one more op is refused as the list
    /// decodes, as is a list whose length prefix claims more than it holds.
    #[test]
    fn an_entry_with_more_ops_than_a_batch_does_not_decode() {
        let cmd = |n: usize| Cmd {
            now: Some(1),
            ops: vec![Op::EachDeadline; n],
        };
        let full = postcard::to_stdvec(&cmd(MAX_CMD_OPS)).unwrap();
        assert_eq!(
            postcard::from_bytes::<Cmd>(&full).unwrap(),
            cmd(MAX_CMD_OPS)
        );
        let over = postcard::to_stdvec(&cmd(MAX_CMD_OPS + 1)).unwrap();
        assert!(postcard::from_bytes::<Cmd>(&over).is_err());
        // A length prefix of 2^28 ops with a few ops behind it.
        let mut claimed = vec![1, 1];
        claimed.extend([0x80, 0x80, 0x80, 0x80, 0x01]);
        claimed.extend(postcard::to_stdvec(&Op::EachDeadline).unwrap());
        assert!(postcard::from_bytes::<Cmd>(&claimed).is_err());
        let mut one = vec![1, 1, 1];
        one.extend(postcard::to_stdvec(&Op::EachDeadline).unwrap());
        assert_eq!(postcard::from_bytes::<Cmd>(&one).unwrap(), cmd(1));
    }
}
