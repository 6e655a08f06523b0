//! What a node does with bytes it did not write — a peer's Raft frames and answers, a
//! client's frames, a snapshot file or a peer's snapshot data, and the log entries it
//! applies, and its Raft log file at start — as plain functions over bytes, with no
//! network or clock (the log is written to a temporary directory and opened from there),
//! for the fuzz targets `fuzz/fuzz_targets/server_frames.rs`, `server_state.rs` and
//! `server_log.rs`. Built only with the `fuzzing` feature; not part of the server's API.
//!
//! Each function runs the same code the node runs on those bytes (the frame reader, the
//! checks a Raft request passes before it is served, the snapshot decoder and its
//! checks, the apply of a log entry); nothing here re-implements a rule.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use serde::de::DeserializeOwned;

use crate::frame::{self, Wire, MAX_RAFT_FRAME, MAX_RAFT_REPLY};
use crate::state_machine::{self, ServiceConfig, SmState};
use crate::types::{Cmd, CmdResult, LogId, NodeId};

/// Runs `f` to its end without a runtime: for futures that never wait (a frame read from a
/// byte slice). Panics if it would wait, which none of this module's does (a harness that
/// tested nothing would otherwise pass).
fn now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a read from a byte slice waited"),
    }
}

/// `bytes` read as one frame of a `T` of at most `max` bytes, by the reader a node and a
/// client use on their connections ([`frame::read`]): `Ok(None)` for no bytes at all.
///
/// Errors: as [`frame::read`]. Cost: O(bytes).
pub fn read_frame<T: DeserializeOwned + Wire>(bytes: &[u8], max: u32) -> io::Result<Option<T>> {
    let mut r = bytes;
    now(frame::read::<_, T>(&mut r, max))
}

/// What a node's peer listener makes of a frame before it serves it.
#[derive(Debug, PartialEq, Eq)]
pub enum PeerCall {
    /// Served (given mutual TLS, if the sender it names passes `check_peer`, which needs a
    /// node and is not run here).
    Served {
        /// The node the request says it comes from.
        sender: Option<NodeId>,
        /// The frame re-encoded from what was decoded.
        reencoded: Vec<u8>,
    },
    /// Refused: a term or index at or past the bound, named.
    PastBound(String),
    /// Refused: an append whose entries skip an index, go back a term, or pass its vote's
    /// term, named.
    BadAppend(String),
}

/// `bytes` read as a peer's Raft request frame, as a node's peer listener reads it, and
/// the checks made before it is served.
///
/// Errors: as [`frame::read`] (no frame: `UnexpectedEof`). Cost: O(bytes).
pub fn peer_call(bytes: &[u8]) -> io::Result<PeerCall> {
    let call = read_frame::<crate::net::RaftCall>(bytes, MAX_RAFT_FRAME)?
        .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
    Ok(crate::net::fuzz_peer_call(call))
}

/// `bytes` read as a peer's answer to a Raft request, as a node's client side reads it:
/// `Ok(None)` if it would be taken, `Ok(Some(what))` if refused for a term or index past
/// the bound; with the frame re-encoded from what was decoded.
///
/// Errors: as [`frame::read`] (no frame: `UnexpectedEof`). Cost: O(bytes).
pub fn peer_answer(bytes: &[u8]) -> io::Result<(Option<String>, Vec<u8>)> {
    let resp = read_frame::<crate::net::RaftResp>(bytes, MAX_RAFT_REPLY)?
        .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
    Ok(crate::net::fuzz_peer_answer(resp))
}

/// The checks a node makes of a client's request before it proposes anything (the limits
/// on session ids, request numbers, tokens and ttls). Errors: the refusal. Cost: O(1).
pub fn recordable(req: &crate::protocol::Request) -> Result<(), crate::protocol::ClientError> {
    crate::node::recordable(req)
}

/// A replica's applied state, as a node keeps it, without its disk or network.
pub struct Replica {
    state: SmState,
}

impl Replica {
    /// A new replica's empty state. Cost: O(tables).
    pub fn new(config: ServiceConfig) -> Replica {
        Replica {
            state: state_machine::empty_state(&config),
        }
    }

    /// The state a peer's snapshot data (`InstallSnapshot`, no file header) restores to,
    /// decoded and checked as a node does before it installs it.
    ///
    /// Errors: as the node's install (the data does not decode, fails its checks, was taken
    /// with other settings or holds more than the tables). Cost: O(data).
    pub fn from_snapshot_data(config: ServiceConfig, data: &[u8]) -> io::Result<Replica> {
        let (state, _, _) = state_machine::decode_snapshot(&config, data)?;
        Ok(Replica { state })
    }

    /// The state a snapshot file (`snapshot.bin`, a backup) restores to, read and checked
    /// as a node reads its file at start.
    ///
    /// Errors: as at start (header, length, checksum, decoding, the checks). Cost: O(file).
    pub fn from_snapshot_file(config: ServiceConfig, bytes: &[u8]) -> io::Result<Replica> {
        let f = state_machine::decode_snap_file(bytes)
            .map_err(|m| io::Error::new(io::ErrorKind::InvalidData, m))?;
        Replica::from_snapshot_data(config, &f.data)
    }

    /// Applies a committed entry at `index` (term 1, leader 1), as the node's apply does;
    /// returns what each request in it was answered (none for `Op::EachDeadline`).
    /// Cost: as the node's apply of its ops.
    pub fn apply(&mut self, index: u64, cmd: Cmd) -> Vec<CmdResult> {
        let log_id = LogId::new(openraft::CommittedLeaderId::new(1, 1), index);
        state_machine::replay_cmd(&mut self.state, log_id, cmd)
    }

    /// The index of the last entry applied (0: none). Cost: O(1).
    pub fn last_index(&self) -> u64 {
        self.state.last_applied.map_or(0, |l| l.index)
    }

    /// This state as a backup: the snapshot-file bytes `GET /snapshot` serves and a node
    /// writes as `snapshot.bin`. Cost: O(state).
    ///
    /// Errors: encoding failures (none expected).
    pub fn backup(&self) -> io::Result<Vec<u8>> {
        state_machine::backup_of(&self.state).map(|(b, _)| b)
    }
}

/// `data` as a snapshot file of the current version with a correct length and checksum
/// (as a node writes one), so that a fuzzer's bytes get past the checksum to the decoder:
/// a checksum detects damage, it does not authenticate, and a file can be written by
/// anyone who can write the directory. Cost: O(data).
pub fn snapshot_file_of(data: Vec<u8>) -> Vec<u8> {
    state_machine::fuzz_snap_file(data)
}

/// Well-formed peer frames for the fuzz targets' seed corpus (`server/examples/fuzz_seeds.rs`):
/// requests (a vote, a pre-vote, an append carrying `entries`, a snapshot chunk) and answers
/// (granted, appended, settings differ), as this build writes them. Cost: O(entries).
pub fn peer_seeds(entries: &[Cmd]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    crate::net::fuzz_peer_seeds(entries)
}

/// The data of a snapshot file (what a peer sends in `InstallSnapshot`), its frame checked.
///
/// Errors: what is wrong with the file. Cost: O(bytes).
pub fn snapshot_data(file: &[u8]) -> Result<Vec<u8>, String> {
    state_machine::decode_snap_file(file).map(|f| f.data)
}

/// The salt of the log files [`log_file`] makes (a log's salt is random; a fixed one lets
/// a fuzzer's bytes carry checksums that hold).
pub const LOG_SALT: [u8; crate::log_store::SALT_LEN] = *b"fuzzsalt";

/// A version-4 `raft.log` under [`LOG_SALT`] whose groups hold `payloads` as given (each
/// a run of records, `len: u32 LE | postcard`, or anything else), with right checksums:
/// a checksum detects damage, it does not authenticate. A payload no group can hold (a
/// sector's worth of zeros) is left out. Cost: O(bytes).
pub fn log_file(payloads: &[&[u8]]) -> Vec<u8> {
    crate::log_store::fuzz_log_file(LOG_SALT, payloads)
}

/// Group payloads of well-formed records, entries holding `cmds` among them, for the seed
/// corpus. Cost: O(cmds).
pub fn log_seed_payloads(cmds: &[Cmd]) -> Vec<Vec<u8>> {
    crate::log_store::fuzz_log_payloads(cmds)
}

/// What a node learns from its log at start.
#[derive(Debug, PartialEq, Eq)]
pub struct LogRead {
    /// The last log id ([`crate::log_store::LogStore::last_log_id`]).
    pub last: Option<LogId>,
    /// The vote.
    pub vote: Option<crate::types::Vote>,
    /// The commit point.
    pub committed: Option<LogId>,
    /// The purge point.
    pub purged: Option<LogId>,
    /// What was cut from the end (`open_accepting_loss` only): where, and whether damaged.
    pub cut: Option<(u64, bool)>,
}

/// `bytes` as `dir/raft.log`, opened as a node opens its log at a start that passes its
/// checks (`LogStore::open`, then the torn tail cut as `finish_open` cuts it; `accept_loss`:
/// as `force-new-cluster --accept-data-loss` opens it); returns what the node learns and
/// the file as that left it (a torn tail zeroed; an older version is not rewritten here).
///
/// Errors: the open's (a damaged or out-of-order log is refused); I/O errors.
/// Cost: O(bytes), a few file writes.
pub fn open_log(
    dir: &std::path::Path,
    bytes: &[u8],
    accept_loss: bool,
) -> io::Result<(LogRead, Vec<u8>)> {
    use crate::log_store::LogStore;
    let _ = std::fs::remove_dir_all(dir);
    crate::disk::create_private_dir(dir)?;
    let path = dir.join("raft.log");
    std::fs::write(&path, bytes)?;
    let (log, cut) = if accept_loss {
        LogStore::open_accepting_loss(dir)?
    } else {
        let log = LogStore::open(dir)?;
        // What a node's start does once its other checks pass, less the rewrite of an
        // older version (under a salt drawn anew each time).
        log.finish_cut()?;
        (log, None)
    };
    let read = LogRead {
        last: log.last_log_id(),
        vote: log.vote(),
        committed: log.committed(),
        purged: log.last_purged(),
        cut: cut.map(|c| (c.at, c.damaged)),
    };
    drop(log);
    Ok((read, std::fs::read(&path)?))
}
