//! The core's [`LockService`] as openraft's state machine.
//!
//! `apply` runs each committed [`Cmd`](crate::types::Cmd) through the core (a tick to the entry's stamped time
//! first, then its inputs in order), records the last applied log id and membership, returns the
//! inputs' outputs to their proposers and pushes every other output to the session it names
//! through the [`Hub`] (a waiter's `Granted` reaches it without polling). A snapshot is
//! the core's own versioned snapshot plus the last applied log id and membership; it is
//! written to `dir/snapshot.bin` (temp file, fsync, rename) so a restarted node rebuilds
//! its state from it and the log after it.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use fencelock::{Config, Input, LockService, Output, SessionId, Tick, VecStorage};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{EntryPayload, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Notify};

use crate::types::{
    BatchResult, CmdResult, CoreError, Entry, LogId, Op, SnapshotMeta, StorageError,
    StoredMembership, TypeConfig,
};

/// Table sizes and core settings of a node's service. All nodes of a cluster must agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Session table capacity.
    pub sessions: usize,
    /// Lock table capacity.
    pub locks: usize,
    /// Claim pool capacity (holds + waits).
    pub claims: usize,
    /// The core's settings (lock-delay in milliseconds, name limit).
    pub core: Config,
}

impl Default for ServiceConfig {
    /// 16 384 sessions, 16 384 locks, 32 768 claims, no lock-delay.
    fn default() -> Self {
        ServiceConfig {
            sessions: 1 << 14,
            locks: 1 << 14,
            claims: 1 << 15,
            core: Config::default(),
        }
    }
}

impl ServiceConfig {
    fn storage(&self) -> VecStorage {
        VecStorage::new(self.sessions, self.locks, self.claims)
    }

    /// An empty service.
    pub(crate) fn fresh(&self) -> LockService<VecStorage> {
        // Config is validated by the binary and tests; a bad one is a programming error.
        LockService::new(self.storage(), self.core).expect("valid service config")
    }
}

/// How many pushes may wait for one connection's writer. A connection whose client stops
/// reading fills its socket buffer, then this queue; the next push closes the connection
/// (its sessions stay open; the client reconnects, re-attaches and re-reads the lock state
/// once) instead of letting the node's memory grow without bound. It is large because one
/// apply pushes all its outputs at once: a tick expiring thousands of one client's
/// sessions must not cut off a client that reads normally (~1.5 MB queued at most).
pub const PUSH_BACKLOG: usize = 16 * 1024;

/// Where a push goes: one connection attached to a session, with a bounded queue
/// ([`PUSH_BACKLOG`] by default). Cheap to clone.
#[derive(Clone, Debug)]
pub struct PushSink {
    tx: mpsc::Sender<Output>,
    overflow: Arc<Notify>,
}

impl PushSink {
    /// A sink queueing at most `backlog` pushes, the receiver its connection's writer
    /// reads, and the signal it gives when a push finds the queue full (the writer then
    /// closes the connection). Cost: one allocation of `backlog` slots.
    pub fn new(backlog: usize) -> (PushSink, mpsc::Receiver<Output>, Arc<Notify>) {
        let (tx, rx) = mpsc::channel(backlog.max(1));
        let overflow = Arc::new(Notify::new());
        (
            PushSink {
                tx,
                overflow: overflow.clone(),
            },
            rx,
            overflow,
        )
    }

    /// Queues `o`; false when the connection is gone or has fallen [`PUSH_BACKLOG`]
    /// behind (then it is told to close). Cost: O(1), never waits.
    fn send(&self, o: Output) -> bool {
        match self.tx.try_send(o) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.overflow.notify_one();
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

/// One attachment: connection id, its sink, the first log index whose outputs it gets.
type Sub = (u64, PushSink, u64);

/// Routes applied outputs to attached sessions; optionally keeps a journal of every
/// applied output (tests use it to check order and expiry).
#[derive(Default)]
pub struct Hub {
    /// Per session: (connection, sink, first log index whose outputs it gets).
    subs: Mutex<HashMap<u64, Vec<Sub>>>,
    journal: Mutex<Option<Vec<(u64, Output)>>>,
}

impl Hub {
    /// Registers `sink` (identified by `conn`) for the outputs naming `session`.
    /// Cost: O(attachments of that session).
    pub fn attach(&self, session: SessionId, conn: u64, sink: PushSink) {
        self.attach_from(session, conn, sink, 0);
    }

    /// [`Hub::attach`] for the outputs of log entries from index `from` on only: a node
    /// that applies older entries later (a new leader catching up) must not push them
    /// again to a client that already saw them. Cost: as there.
    /// Attaching a connection again keeps its earlier `from`: entries appended but not yet
    /// applied may hold its outcome (a keep-alive must not skip a pending grant).
    pub fn attach_from(&self, session: SessionId, conn: u64, sink: PushSink, from: u64) {
        let mut g = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        let v = g.entry(session.0).or_default();
        let earlier = v.iter().find(|(c, _, _)| *c == conn).map(|(_, _, f)| *f);
        v.retain(|(c, _, _)| *c != conn);
        v.push((conn, sink, earlier.map_or(from, |e| e.min(from))));
    }

    /// Removes every registration of connection `conn`. Cost: O(sessions attached).
    pub fn detach_conn(&self, conn: u64) {
        let mut g = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        g.retain(|_, v| {
            v.retain(|(c, _, _)| *c != conn);
            !v.is_empty()
        });
    }

    /// Starts keeping a journal of every applied output with its log index (tests;
    /// memory grows with every output). Cost: O(1).
    pub fn enable_journal(&self) {
        *self.journal.lock().unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
    }

    /// The journal so far (empty unless enabled). Cost: O(journal length) (a copy).
    pub fn journal(&self) -> Vec<(u64, Output)> {
        self.journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default()
    }

    fn record(&self, index: u64, outs: &[Output]) {
        if let Some(j) = self
            .journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            j.extend(outs.iter().map(|o| (index, o.clone())));
        }
    }

    fn push(&self, index: u64, o: &Output) {
        let mut g = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = g.get_mut(&o.session().0) {
            // A sink that is gone or full is dropped (a full one closes its connection).
            v.retain(|(_, s, from)| index < *from || s.send(o.clone()));
        }
        if matches!(
            o,
            Output::SessionExpired { .. } | Output::SessionClosed { .. }
        ) {
            g.remove(&o.session().0);
        }
    }
}

/// The replicated state: the service plus what openraft needs to know about it.
pub struct SmState {
    /// The lock service.
    pub svc: LockService<VecStorage>,
    /// The last applied log id.
    pub last_applied: Option<LogId>,
    /// The last applied membership.
    pub membership: StoredMembership,
    /// Idempotency keys of open sessions ([`Op::Open`]): key → session, and back.
    pub open_keys: OpenKeys,
}

/// The idempotency keys of sessions opened with [`Op::Open`], forgotten when the session
/// ends. Replicated: every replica applies the same opens and ends, and snapshots carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenKeys {
    by_key: BTreeMap<u64, SessionId>,
    by_session: BTreeMap<SessionId, u64>,
}

impl OpenKeys {
    /// The session opened with `key`, if it is still remembered. Cost: O(log n).
    pub fn get(&self, key: u64) -> Option<SessionId> {
        self.by_key.get(&key).copied()
    }

    /// How many keys are remembered (one per open session at most). Cost: O(1).
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// True when no key is remembered. Cost: O(1).
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    fn insert(&mut self, key: u64, session: SessionId) {
        self.by_key.insert(key, session);
        self.by_session.insert(session, key);
    }

    /// Forgets the key of every session `outs` reports ended.
    fn forget_ended(&mut self, outs: &[Output]) {
        for o in outs {
            if let Output::SessionExpired { session, .. } | Output::SessionClosed { session, .. } =
                o
            {
                if let Some(k) = self.by_session.remove(session) {
                    self.by_key.remove(&k);
                }
            }
        }
    }

    fn to_vec(&self) -> Vec<(u64, u64)> {
        self.by_key.iter().map(|(k, s)| (*k, s.0)).collect()
    }

    fn from_vec(v: Vec<(u64, u64)>) -> OpenKeys {
        let mut k = OpenKeys::default();
        for (key, s) in v {
            k.insert(key, SessionId(s));
        }
        k
    }
}

/// State shared between the state machine (owned by openraft) and the node (reads, pushes).
pub struct Shared {
    state: Mutex<SmState>,
    /// Output routing.
    pub hub: Hub,
    /// The service configuration.
    pub config: ServiceConfig,
    /// The last log id of `snapshot.bin`; held while a snapshot is written, so the
    /// builder and an installed snapshot never race and an older one never replaces a
    /// newer.
    persisted: Mutex<Option<LogId>>,
}

impl Shared {
    /// Locks the state for a read. Keep the guard short: apply waits for it. Cost: O(1).
    pub fn state(&self) -> MutexGuard<'_, SmState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The snapshot file's contents.
#[derive(Serialize, Deserialize)]
struct SnapFile {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

/// The snapshot data: the core snapshot plus openraft's bookkeeping.
#[derive(Serialize, Deserialize)]
struct SnapData {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    core: Vec<u8>,
    open_keys: Vec<(u64, u64)>,
}

/// The state machine handed to openraft.
pub struct StateMachine {
    shared: Arc<Shared>,
    dir: PathBuf,
    current: Option<SnapFile>,
    snap_seq: u64,
}

fn decode_snapshot(
    config: &ServiceConfig,
    data: &[u8],
) -> io::Result<(SmState, Option<LogId>, StoredMembership)> {
    let d: SnapData = postcard::from_bytes(data).map_err(|e| io::Error::other(e.to_string()))?;
    let svc = LockService::restore(config.storage(), &d.core)
        .map_err(|(_, e)| io::Error::other(e.to_string()))?;
    Ok((
        SmState {
            svc,
            last_applied: d.last_applied,
            membership: d.membership.clone(),
            open_keys: OpenKeys::from_vec(d.open_keys),
        },
        d.last_applied,
        d.membership,
    ))
}

impl StateMachine {
    /// Opens the state machine in `dir`: restored from `dir/snapshot.bin` if present, else
    /// empty. Returns it and the handle the node keeps.
    ///
    /// Errors: I/O errors, or a snapshot file that does not decode or restore.
    /// Cost: O(snapshot size).
    pub fn open(dir: &Path, config: ServiceConfig) -> io::Result<(StateMachine, Arc<Shared>)> {
        fs::create_dir_all(dir)?;
        let path = dir.join("snapshot.bin");
        let (state, current) = match fs::read(&path) {
            Ok(bytes) => {
                let f: SnapFile =
                    postcard::from_bytes(&bytes).map_err(|e| io::Error::other(e.to_string()))?;
                let (state, _, _) = decode_snapshot(&config, &f.data)?;
                (state, Some(f))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (
                SmState {
                    svc: config.fresh(),
                    last_applied: None,
                    membership: StoredMembership::default(),
                    open_keys: OpenKeys::default(),
                },
                None,
            ),
            Err(e) => return Err(e),
        };
        let persisted = current.as_ref().and_then(|f: &SnapFile| f.meta.last_log_id);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            hub: Hub::default(),
            config,
            persisted: Mutex::new(persisted),
        });
        Ok((
            StateMachine {
                shared: shared.clone(),
                dir: dir.to_path_buf(),
                current,
                snap_seq: 0,
            },
            shared,
        ))
    }

    /// Writes `f` as `snapshot.bin` unless the file already holds a newer snapshot.
    fn persist(&self, f: &SnapFile) -> io::Result<()> {
        let mut persisted = self
            .shared
            .persisted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if *persisted > f.meta.last_log_id {
            return Ok(());
        }
        let bytes = postcard::to_allocvec(f).map_err(|e| io::Error::other(e.to_string()))?;
        let tmp = self.dir.join("snapshot.tmp");
        {
            let mut file = fs::File::create(&tmp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join("snapshot.bin"))?;
        fs::File::open(&self.dir)?.sync_all()?;
        *persisted = f.meta.last_log_id;
        Ok(())
    }
}

/// Applies one op; returns the outputs to push and the proposer's result.
fn apply_op(g: &mut SmState, now: Option<u64>, op: Op, index: u64) -> (Vec<Output>, CmdResult) {
    let (pushed, result) = match op {
        Op::Input(input) => apply_cmd(&mut g.svc, now, input, index),
        Op::Open { ttl, key } => {
            let mut pushed = Vec::new();
            tick_to(&mut g.svc, now, &mut pushed);
            // Ends reported by that tick first: a key whose session just expired is free.
            g.open_keys.forget_ended(&pushed);
            let open = g
                .open_keys
                .get(key)
                .and_then(|s| g.svc.session(s).map(|info| (s, info)));
            match open {
                // A retry: answer with the session this key opened.
                Some((session, info)) => (
                    pushed,
                    CmdResult {
                        outputs: vec![Output::SessionOpened {
                            session,
                            expires_at: info.expires_at,
                        }],
                        error: None,
                        now: g.svc.now().0,
                        index,
                    },
                ),
                None => {
                    let (more, result) =
                        apply_cmd(&mut g.svc, None, Input::OpenSession { ttl }, index);
                    pushed.extend(more);
                    if let Some(Output::SessionOpened { session, .. }) = result.outputs.first() {
                        g.open_keys.insert(key, *session);
                    }
                    (pushed, result)
                }
            }
        }
    };
    g.open_keys.forget_ended(&pushed);
    g.open_keys.forget_ended(&result.outputs);
    (pushed, result)
}

/// Ticks `svc` to `now` when that is later than its clock, collecting the outputs.
fn tick_to(svc: &mut LockService<VecStorage>, now: Option<u64>, out: &mut Vec<Output>) {
    if let Some(now) = now {
        if now > svc.now().0 {
            // Cannot fail: `now` is later than the current tick.
            let _ = svc.tick(Tick(now), &mut |o| out.push(o));
        }
    }
}

/// Applies one core input to `svc`; returns the outputs to push and the proposer's result.
pub(crate) fn apply_cmd(
    svc: &mut LockService<VecStorage>,
    now: Option<u64>,
    input: Input,
    index: u64,
) -> (Vec<Output>, CmdResult) {
    let mut pushed = Vec::new();
    tick_to(svc, now, &mut pushed);
    // The session an input is about: its outputs go back to the proposer, not pushed.
    let me = input.session();
    let is_open = matches!(input, Input::OpenSession { .. });
    let mut outs = Vec::new();
    let res = svc.handle(input, &mut |o| outs.push(o));
    let mut result = CmdResult {
        outputs: Vec::new(),
        error: res.err().map(CoreError::from),
        now: svc.now().0,
        index,
    };
    for o in outs {
        let mine = match me {
            Some(s) => o.session() == s,
            None => is_open && matches!(o, Output::SessionOpened { .. }),
        };
        if mine {
            result.outputs.push(o);
        } else {
            pushed.push(o);
        }
    }
    (pushed, result)
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (data, last_applied, membership) = {
            let g = self.shared.state();
            let d = SnapData {
                last_applied: g.last_applied,
                membership: g.membership.clone(),
                core: g.svc.snapshot_vec(),
                open_keys: g.open_keys.to_vec(),
            };
            (
                postcard::to_allocvec(&d).map_err(|e| StorageIOError::read_state_machine(&e))?,
                g.last_applied,
                g.membership.clone(),
            )
        };
        self.snap_seq += 1;
        let snapshot_id = match last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, self.snap_seq),
            None => format!("none-{}", self.snap_seq),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id,
        };
        let f = SnapFile {
            meta: meta.clone(),
            data: data.clone(),
        };
        self.persist(&f)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        self.current = Some(f);
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let g = self.shared.state();
        Ok((g.last_applied, g.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<BatchResult>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut results = Vec::new();
        let mut g = self.shared.state();
        for entry in entries {
            let index = entry.log_id.index;
            g.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => results.push(BatchResult::default()),
                EntryPayload::Normal(cmd) => {
                    let mut batch = Vec::with_capacity(cmd.ops.len());
                    for op in cmd.ops {
                        // Only the first op can tick: the rest see `now` already reached.
                        let (pushed, result) = apply_op(&mut g, cmd.now, op, index);
                        self.shared.hub.record(index, &pushed);
                        self.shared.hub.record(index, &result.outputs);
                        for o in &pushed {
                            self.shared.hub.push(index, o);
                        }
                        batch.push(result);
                    }
                    results.push(BatchResult(batch));
                }
                EntryPayload::Membership(m) => {
                    g.membership = StoredMembership::new(Some(entry.log_id), m);
                    results.push(BatchResult::default());
                }
            }
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        StateMachine {
            shared: self.shared.clone(),
            dir: self.dir.clone(),
            current: None,
            snap_seq: self.snap_seq + 1_000_000,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let (state, _, _) = decode_snapshot(&self.shared.config, &data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let f = SnapFile {
            meta: meta.clone(),
            data,
        };
        self.persist(&f)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        *self.shared.state() = state;
        self.current = Some(f);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        // The builder (a clone) may have persisted a newer one: the file is the truth.
        if let Ok(bytes) = fs::read(self.dir.join("snapshot.bin")) {
            if let Ok(f) = postcard::from_bytes(&bytes) {
                self.current = Some(f);
            }
        }
        Ok(self.current.as_ref().map(|f| Snapshot {
            meta: f.meta.clone(),
            snapshot: Box::new(Cursor::new(f.data.clone())),
        }))
    }
}

#[cfg(test)]
mod hub_tests {
    use super::*;

    #[test]
    fn pushes_start_at_the_attach_index_and_a_reattach_keeps_the_earlier_one() {
        let hub = Hub::default();
        let s = SessionId(7);
        let o = Output::WaitCancelled {
            session: s,
            lock: fencelock::LockName::new("x").expect("name"),
        };
        let (a, mut a_rx, _) = PushSink::new(8);
        let (b, mut b_rx, _) = PushSink::new(8);
        hub.attach_from(s, 1, a.clone(), 10);
        // A keep-alive on the same connection while entry 15 is appended, not applied.
        hub.attach_from(s, 1, a, 20);
        hub.attach_from(s, 2, b, 20);
        hub.push(5, &o); // older than either attachment: pushed by whoever applied it
        hub.push(15, &o);
        hub.push(25, &o);
        let got =
            |rx: &mut mpsc::Receiver<Output>| std::iter::from_fn(|| rx.try_recv().ok()).count();
        assert_eq!(got(&mut a_rx), 2, "connection 1 gets entries 15 and 25");
        assert_eq!(got(&mut b_rx), 1, "connection 2 gets entry 25 only");
    }
}
