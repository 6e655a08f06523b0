//! The core's [`LockService`] as openraft's state machine.
//!
//! `apply` runs each committed [`Cmd`] through the core, each input
//! stamped with the entry's time ([`Input::at`]), records the last applied log id and
//! membership, returns each input's [`Reply`] to its proposer and pushes every event
//! ([`Output`]) to the session it names through the [`Hub`] (a waiter's `Granted` reaches
//! it without polling). A snapshot is the core's own versioned snapshot plus the last
//! applied log id, the membership, the open keys, the sessions' credentials and the
//! principal each was opened by ([`crate::auth`]); it is written to `dir/snapshot.bin`
//! (temp file, fsync, rename) so a restarted node rebuilds its state from it and the log
//! after it.
//!
//! # The snapshot file
//!
//! `snapshot.bin` is [`SNAP_MAGIC`] (the format and its version, 8 bytes), then
//! `len: u64 LE | crc32(len, payload): u32 LE | payload` (postcard). Version 2 added each
//! open key's principal ([`crate::auth::Principal`]), version 3 each session's (what the
//! per-token session quota counts). Files of versions 1 and 2 (earlier builds) are still
//! read: version 1's keys belong to [`crate::auth::Principal::Unrecorded`], and the
//! sessions of both count for no principal. This build writes version 3 (which an earlier
//! build refuses as a header mismatch). A file that is short,
//! of another format, fails its checksum, does not decode, or whose core snapshot the core
//! refuses, is *corrupt*: it is never restored. At start ([`StateMachine::open_checked`]) a
//! corrupt snapshot either refuses the start (the log was compacted past it, so the state
//! cannot be rebuilt from this node's own files) or, when the log still holds every entry
//! from the first, is moved aside to `snapshot.bin.corrupt` (`.corrupt.2`, `.3`, … when
//! that name is taken: one moved aside before is never replaced) and the state is rebuilt
//! by replaying the log — never served as it is. A file whose header names a later version
//! of the format is taken for a later build's, not for corrupt: the start is refused and
//! the file left as it is. The vote and the log live in `raft.log`,
//! whose groups carry checksums of their own ([`crate::log_store`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io::{self, Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fencelock::{
    Config, Input, Label, LockName, LockService, Output, ReleaseReason, Reply, SessionId, Tick,
    VecStorage,
};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{EntryPayload, StorageIOError};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Notify};

use crate::auth::{OpenKey, Owners, Principal, SessionSecret};
use crate::disk::{DiskHealth, Writer};
use crate::protocol::{ListedSession, SessionsPage, SESSIONS_PAGE, SESSIONS_SCAN};
use crate::types::{
    BatchResult, Cmd, CmdResult, CoreError, Entry, LogId, Op, OpError, SnapshotMeta, StorageError,
    StoredMembership, TypeConfig,
};

/// Table sizes and core settings of a node's service. All nodes of a cluster must agree,
/// because the core's answers depend on them (a full table refuses what a larger one
/// grants; lock-delay holds a lock back): a node compares its settings with every peer's
/// on each Raft request and with the ones
/// its data directory was made with at start (both in [`crate::settings`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceConfig {
    /// Session table capacity.
    pub sessions: usize,
    /// Lock table capacity.
    pub locks: usize,
    /// Claim pool capacity (holds + waits + watches).
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
    /// Checks the table sizes before anything is allocated for them: each table at
    /// least one row (a table of none could hold nothing, and a directory recording one
    /// would not start again) and at most [`fencelock::MAX_ROWS`].
    ///
    /// Errors: what is wrong, described. Cost: O(1).
    pub fn check_tables(&self) -> Result<(), String> {
        if self.sessions == 0 || self.locks == 0 || self.claims == 0 {
            return Err(format!(
                "each table needs at least one row (sessions {}, locks {}, claims {})",
                self.sessions, self.locks, self.claims
            ));
        }
        fencelock::check_rows(self.sessions.max(self.locks).max(self.claims))
            .map_err(|e| format!("table sizes: {e}"))
    }

    fn storage(&self) -> VecStorage {
        VecStorage::new(self.sessions, self.locks, self.claims)
    }

    /// An empty service, with a lock-name key ([`with_name_key`]).
    pub(crate) fn fresh(&self) -> LockService<VecStorage> {
        // Config is validated by the binary and tests; a bad one is a programming error.
        with_name_key(LockService::new(self.storage(), self.core).expect("valid service config"))
    }
}

/// A lock-name key from the operating system's random source ([`fencelock::NameKey`]):
/// lock names come from clients, and under the core's public hash a tenant could choose
/// names that share one probe run of the lock index, making every lookup of them, and so
/// every apply, slow for all. Each replica draws its own key, at every start and
/// restore: the key changes nothing a replica answers, pushes or snapshots. `None` (the
/// public hash, logged) if the source fails.
fn name_key() -> Option<fencelock::NameKey> {
    let mut b = [0u8; fencelock::NameKey::LEN];
    match getrandom::fill(&mut b) {
        Ok(()) => Some(fencelock::NameKey::from_bytes(b)),
        Err(e) => {
            tracing::warn!("no random lock-name key ({e}): the public hash is used");
            None
        }
    }
}

/// `svc` keyed with [`name_key`].
fn with_name_key(mut svc: LockService<VecStorage>) -> LockService<VecStorage> {
    if let Some(key) = name_key() {
        svc.set_name_key(key);
    }
    svc
}

/// [`LockService::restore`], keyed with [`name_key`] before the rows are indexed.
fn restore_keyed(
    config: &ServiceConfig,
    core: &[u8],
) -> Result<LockService<VecStorage>, fencelock::Error> {
    match name_key() {
        Some(key) => LockService::restore_keyed(config.storage(), core, key),
        None => LockService::restore(config.storage(), core),
    }
    .map_err(|(_, e)| e)
}

/// How many pushes may wait for one connection's writer. A connection whose client stops
/// reading fills its socket buffer, then this queue; the next push closes the connection
/// (its sessions stay open; the client reconnects, re-attaches and re-reads the lock state
/// once) instead of letting the node's memory grow without bound. It is large because one
/// apply pushes all its outputs at once: a tick expiring thousands of one client's
/// sessions must not cut off a client that reads normally (~2.7 MB queued at most: a
/// queued push takes `size_of::<Output>()`, 168 bytes).
pub const PUSH_BACKLOG: usize = 16 * 1024;

/// The default limit of pushes queued for all of a node's client connections together
/// ([`Hub::set_push_budget`]): eight connections' [`PUSH_BACKLOG`], ~22 MB, instead of the
/// ~11 GB that 4 096 full queues would take (pushes counted: a queue whose connection is
/// told to close leaves the count at once and memory when its writer drops it, so until
/// the writers run memory may hold the rest of one apply's pushes besides). Without watches, one apply's outputs (every
/// session of the default table expiring at once, with the releases and grants that
/// follow: 16 384 + 2 × 32 768) fit in it; with watches an apply can push more (a holder
/// change goes to every watcher), and each time the budget is spent the connection holding
/// the most is closed ([`Hub`]).
pub const MAX_QUEUED_PUSHES: usize = 8 * PUSH_BACKLOG;

/// The most connections attached to one session at once. A session's credential may
/// attach it from any number of connections (`Attach`, and every request naming the
/// session), and every attach and push of that session walks its attachments: one more
/// connection is refused (the request is answered `Limit { kind: "session_connections" }`
/// before anything is written; the connections attached go on). A client library
/// attaches each session from one connection, so this leaves room for many processes
/// sharing one session, and none is closed for another's sake (closing the oldest would
/// have them take each other's place without end).
pub const MAX_ATTACHED_PER_SESSION: usize = 64;

/// The largest snapshot data a node with tables of `config`'s sizes takes from a peer, in
/// bytes ([`crate::election::Elector::set_snapshot_limit`]): four times a bound on the
/// largest such a state can be — 160 bytes per session, lock and claim (the core's
/// bound on one record of its snapshot), 256 more per session (its credential,
/// idempotency key and principal, 131 bytes at most), and 1 MiB for the rest (counters, membership) — about 63 MB with
/// the default tables. A chunk past it is refused, so a peer cannot make a node buffer
/// more than that. Cost: O(1).
pub fn max_snapshot_bytes(config: &ServiceConfig) -> u64 {
    let rows = (config.sessions as u64)
        .saturating_add(config.locks as u64)
        .saturating_add(config.claims as u64);
    rows.saturating_mul(160)
        .saturating_add((config.sessions as u64).saturating_mul(256))
        .saturating_add(1 << 20)
        .saturating_mul(4)
}

/// The largest snapshot file (`snapshot.bin`, or a backup) a node with `config`'s tables
/// reads: [`max_snapshot_bytes`] and the file's header. A longer one is refused before it
/// is read. Cost: O(1).
pub fn max_snapshot_file_bytes(config: &ServiceConfig) -> u64 {
    max_snapshot_bytes(config).saturating_add(SNAP_HEADER as u64)
}

/// Where a push goes: one connection attached to a session, with a bounded queue
/// ([`PUSH_BACKLOG`] by default) counted in a node's push budget (made with
/// [`Hub::sink`]) or in a budget of its own ([`PushSink::new`]). Cheap to clone.
#[derive(Clone, Debug)]
pub struct PushSink {
    tx: mpsc::Sender<Output>,
    overflow: Arc<Notify>,
    counted: Counted,
    /// Pushes queued so far, over the queue's life (counted once each is in the queue).
    sent: Arc<AtomicU64>,
    /// Set when its connection has stopped reading ([`PushSink::detach`]): nothing
    /// attaches it from then on. Shared by every clone.
    detached: Arc<AtomicBool>,
}

/// The receiving end of a [`PushSink`]: its connection's writer reads it. Pushes taken out
/// of it, and those still in it when it is dropped, leave the budget they were counted in
/// (unless they left it already, when the connection was told to close).
#[derive(Debug)]
pub struct PushQueue {
    rx: mpsc::Receiver<Output>,
    counted: Counted,
    /// Pushes taken out so far.
    taken: u64,
}

/// How one queue's pushes are counted in a budget: the budget's total, and the queue's own
/// share of it — which leaves the total at once, whole, when the connection is told to
/// close ([`Counted::release`]), so a connection on its way out does not keep the budget
/// spent for the pushes that follow (every output of one apply is pushed in one go).
/// The share's top bit says it was released; a push taken out after that leaves nothing.
/// Sequentially consistent: the order the methods below rely on (the total up before the
/// share, down after it) must hold as another thread sees it too.
#[derive(Clone, Debug)]
struct Counted {
    total: Arc<AtomicUsize>,
    own: Arc<AtomicUsize>,
}

/// The top bit of [`Counted::own`]: released.
const RELEASED: usize = 1 << (usize::BITS - 1);

impl Counted {
    fn new(total: Arc<AtomicUsize>) -> Counted {
        Counted {
            total,
            own: Arc::default(),
        }
    }
    /// Counts one push about to be queued; false (nothing counted) once released. The
    /// total goes up before the share and down after it, so a release racing with it never
    /// takes more from the total than is there. Cost: O(1).
    fn add(&self) -> bool {
        self.total.fetch_add(1, Ordering::SeqCst);
        let added = self
            .own
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n & RELEASED == 0).then_some(n + 1)
            })
            .is_ok();
        if !added {
            self.total.fetch_sub(1, Ordering::SeqCst);
        }
        added
    }
    /// Takes one push out of the count, unless released (then it left with the rest).
    /// Cost: O(1).
    fn take(&self) {
        let taken = self
            .own
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                if n & RELEASED != 0 {
                    None
                } else {
                    n.checked_sub(1)
                }
            })
            .is_ok();
        if taken {
            self.total.fetch_sub(1, Ordering::SeqCst);
        }
    }
    /// Gives the queue's pushes back to the budget at once and counts none from now on.
    /// Cost: O(1).
    fn release(&self) {
        let n = self.own.swap(RELEASED, Ordering::SeqCst) & !RELEASED;
        self.total.fetch_sub(n, Ordering::SeqCst);
    }
    fn released(&self) -> bool {
        self.own.load(Ordering::SeqCst) & RELEASED != 0
    }
}

impl PushQueue {
    /// The next push; `None` once every sink is gone. Cancel-safe. Cost: O(1).
    pub async fn recv(&mut self) -> Option<Output> {
        let o = self.rx.recv().await;
        if o.is_some() {
            self.counted.take();
            self.taken += 1;
        }
        o
    }

    /// The next push if one is queued. Cost: O(1), never waits.
    pub fn try_recv(&mut self) -> Result<Output, mpsc::error::TryRecvError> {
        let o = self.rx.try_recv()?;
        self.counted.take();
        self.taken += 1;
        Ok(o)
    }

    /// How many pushes were taken out so far: with [`PushSink::sent`], what a writer
    /// needs to write every push queued before a reply ahead of that reply. Cost: O(1).
    pub fn taken(&self) -> u64 {
        self.taken
    }
}

impl Drop for PushQueue {
    /// Refuses further pushes and gives back the budget of those still queued.
    fn drop(&mut self) {
        self.rx.close();
        self.counted.release();
    }
}

/// Why [`PushSink::send`] did not queue a push.
enum Unsent {
    /// The queue is full: the connection fell behind (told to close).
    Full,
    /// The connection is gone.
    Closed,
}

impl PushSink {
    /// A sink queueing at most `backlog` pushes in a budget of its own (no limit but the
    /// backlog), the queue its connection's writer reads, and the signal it gives when the
    /// connection must close (its queue or the node's budget is full; the writer then
    /// closes it). Cost: one allocation of `backlog` slots.
    pub fn new(backlog: usize) -> (PushSink, PushQueue, Arc<Notify>) {
        Self::counted(backlog, Arc::default())
    }

    fn counted(backlog: usize, total: Arc<AtomicUsize>) -> (PushSink, PushQueue, Arc<Notify>) {
        let (tx, rx) = mpsc::channel(backlog.max(1));
        let overflow = Arc::new(Notify::new());
        let counted = Counted::new(total);
        (
            PushSink {
                tx,
                overflow: overflow.clone(),
                counted: counted.clone(),
                sent: Arc::default(),
                detached: Arc::default(),
            },
            PushQueue {
                rx,
                counted,
                taken: 0,
            },
            overflow,
        )
    }

    /// Queues `o`, counted in the sink's budget. Errors: the queue is full (the connection
    /// is told to close, and its pushes leave the budget) or gone (or told to close
    /// before). Only [`Hub::push`] sends, holding the hub's lock, so a send and a
    /// [`PushSink::close`] never race (the writer dropping its queue may; [`Counted`]
    /// keeps the count right either way). Cost: O(1), never waits.
    fn send(&self, o: Output) -> Result<(), Unsent> {
        if !self.counted.add() {
            return Err(Unsent::Closed);
        }
        let r = self.tx.try_send(o);
        if r.is_err() {
            // Counted, not queued: out again (unless a release took it already).
            self.counted.take();
        }
        match r {
            Ok(()) => {
                // After the send: a reply stamped with this count finds the push queued.
                self.sent.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.close();
                Err(Unsent::Full)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Unsent::Closed),
        }
    }

    /// How many pushes were queued so far, over the queue's life. A reply stamped with it
    /// when made is written after each of them: the outputs of every entry applied before
    /// a request's answer reach the client before that answer, whatever else the
    /// connection has to write (a client relies on it: the grant of a wait it then sees
    /// released must not arrive after the answer to its next acquire). Cost: O(1).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// Pushes queued and not yet taken by the writer. Cost: O(1).
    fn len(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Marks the sink's connection ended, before its registrations are dropped
    /// ([`Hub::detach_conn`]): a request of that connection still running (waiting for a
    /// read barrier or its write) attaches nothing when it gets there, and reserves no
    /// session quota for it, so nothing of a closed connection is left behind. Its
    /// answers are still written if the writer is there to write them. Cost: O(1).
    pub fn detach(&self) {
        self.detached.store(true, Ordering::SeqCst);
    }

    /// Whether [`PushSink::detach`] ran. Cost: O(1).
    pub fn detached(&self) -> bool {
        self.detached.load(Ordering::SeqCst)
    }

    /// Tells the connection to close; its queued pushes leave the budget now, not when its
    /// writer gets round to dropping the queue. Cost: O(1).
    fn close(&self) {
        self.counted.release();
        self.overflow.notify_one();
    }
}

/// One attachment: connection id, its sink, the first log index whose outputs it gets.
type Sub = (u64, PushSink, u64);

/// What [`Hub::attach_in`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachIn {
    /// Attached (or the connection had ended: nothing to attach).
    Attached,
    /// A leadership change was handled since the generation was read: nothing attached.
    Stale,
    /// The session has [`MAX_ATTACHED_PER_SESSION`] other connections attached: nothing
    /// attached.
    Full,
}

/// The attachments by session, and the sessions each connection is attached to: each the
/// other's inverse, so that a connection's end and the idle check touch that connection's
/// own attachments only, however many others there are.
#[derive(Default)]
struct Subs {
    by_session: HashMap<u64, Vec<Sub>>,
    by_conn: HashMap<u64, HashSet<u64>>,
    /// Connections attached to no session any more, with their sinks, until they attach
    /// again or end: the pushes queued for them before their sessions closed or expired
    /// still count in the budget, so they stay among the connections a spent budget may
    /// close (or a client could fill the budget, close its sessions, read a trickle, and
    /// have every other reader closed in its place). At most one per connection.
    unattached: HashMap<u64, PushSink>,
}

impl Subs {
    /// Adds `sub` to `session` (the caller removed that connection's earlier one). O(1).
    fn add(&mut self, session: u64, sub: Sub) {
        self.unattached.remove(&sub.0);
        self.by_conn.entry(sub.0).or_default().insert(session);
        self.by_session.entry(session).or_default().push(sub);
    }

    /// Removes the attachments of `session` whose connection `drop` says; a connection
    /// left attached to nothing, its sink not told to close, is kept as unattached.
    /// O(its attachments).
    fn remove_where(&mut self, session: u64, drop: impl Fn(u64) -> bool) {
        let Some(v) = self.by_session.get_mut(&session) else {
            return;
        };
        let (by_conn, unattached) = (&mut self.by_conn, &mut self.unattached);
        v.retain(|(c, sink, _)| {
            if !drop(*c) {
                return true;
            }
            if let Some(set) = by_conn.get_mut(c) {
                set.remove(&session);
                if set.is_empty() {
                    by_conn.remove(c);
                    if !sink.counted.released() {
                        unattached.insert(*c, sink.clone());
                    }
                }
            }
            false
        });
        if v.is_empty() {
            self.by_session.remove(&session);
        }
    }

    /// Removes every attachment of `session`. O(its attachments).
    fn remove_session(&mut self, session: u64) {
        self.remove_where(session, |_| true);
    }

    /// Removes every attachment of connection `conn`, and forgets it as unattached.
    /// O(its sessions' attachments).
    fn remove_conn(&mut self, conn: u64) {
        self.unattached.remove(&conn);
        for session in self.by_conn.remove(&conn).unwrap_or_default() {
            if let Some(v) = self.by_session.get_mut(&session) {
                v.retain(|(c, _, _)| *c != conn);
                if v.is_empty() {
                    self.by_session.remove(&session);
                }
            }
        }
    }

    /// Every attachment. O(1) to make.
    fn all(&self) -> impl Iterator<Item = &Sub> {
        self.by_session.values().flatten()
    }

    /// Every connection whose queue a spent budget may close: each attachment's (a
    /// connection once per session it is attached to), then the unattached. O(1) to make.
    fn candidates(&self) -> impl Iterator<Item = (u64, &PushSink)> {
        self.all()
            .map(|(c, s, _)| (*c, s))
            .chain(self.unattached.iter().map(|(c, s)| (*c, s)))
    }

    /// How many attachments there are. O(sessions attached).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_session.values().map(Vec::len).sum()
    }
}

/// Routes applied outputs to attached sessions; optionally keeps a journal of every
/// applied output (tests use it to check order and expiry).
///
/// Pushes queued for all connections together are bounded by the push budget
/// ([`Hub::set_push_budget`], default [`MAX_QUEUED_PUSHES`]) as well as per connection
/// ([`PUSH_BACKLOG`]). A push that finds the budget spent closes the connection holding
/// the most queued pushes — attached to a session, or attached to none any more (its
/// sessions closed or expired with pushes still queued for it); the pushing one if none
/// holds more — as if it had fallen behind: so a client that stops reading cannot get
/// others cut off by filling the budget, with its sessions open or not. A connection told to close (for the budget or its own full queue) gives all its
/// queued pushes back to the budget at once, so the pushes that follow in the same apply
/// find room again instead of closing one reader after another.
pub struct Hub {
    /// Per session: (connection, sink, first log index whose outputs it gets); and per
    /// connection, its sessions.
    subs: Mutex<Subs>,
    /// The node whose hub this is, plus one (0: not set, every entry's outputs are
    /// pushed; node ids start at 0).
    node: AtomicU64,
    /// Counts [`Hub::close_attached`] calls (changed under the `subs` lock).
    generation: AtomicU64,
    journal: Mutex<Option<Vec<(u64, Output)>>>,
    /// Pushes queued for the sinks made by [`Hub::sink`].
    queued: Arc<AtomicUsize>,
    budget: AtomicUsize,
    /// Connections closed for their pushes, by `reason`: `push_backlog` (its own queue was
    /// full), `push_budget` (the node's budget was spent and it held the most).
    pub push_closes: Family<Vec<(String, String)>, Counter>,
}

impl Default for Hub {
    /// No attachments, no journal, a push budget of [`MAX_QUEUED_PUSHES`].
    fn default() -> Self {
        Hub {
            subs: Mutex::default(),
            node: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            journal: Mutex::default(),
            queued: Arc::default(),
            budget: AtomicUsize::new(MAX_QUEUED_PUSHES),
            push_closes: Family::default(),
        }
    }
}

impl Hub {
    /// A sink queueing at most `backlog` pushes, counted in this hub's push budget, as
    /// [`PushSink::new`]. Cost: as there.
    pub fn sink(&self, backlog: usize) -> (PushSink, PushQueue, Arc<Notify>) {
        PushSink::counted(backlog, self.queued.clone())
    }

    /// Sets the push budget: pushes queued for all the sinks made by [`Hub::sink`]
    /// together. Cost: O(1).
    pub fn set_push_budget(&self, pushes: usize) {
        self.budget.store(pushes, Ordering::Relaxed);
    }

    /// Pushes queued now for the sinks made by [`Hub::sink`]. Cost: O(1).
    pub fn queued_pushes(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Whether `sink`'s pushes are counted in this hub's budget now (made by [`Hub::sink`]
    /// and not told to close).
    fn counts(&self, sink: &PushSink) -> bool {
        Arc::ptr_eq(&sink.counted.total, &self.queued) && !sink.counted.released()
    }

    fn count_close(&self, reason: &str) {
        self.push_closes
            .get_or_create(&vec![("reason".to_string(), reason.to_string())])
            .inc();
    }

    /// Registers `sink` (identified by `conn`) for the outputs naming `session`; false
    /// (nothing registered) when the session has [`MAX_ATTACHED_PER_SESSION`] other
    /// connections attached. Cost: O(attachments of that session), at most that many.
    pub fn attach(&self, session: SessionId, conn: u64, sink: PushSink) -> bool {
        self.attach_from(session, conn, sink, 0)
    }

    /// [`Hub::attach`] for the outputs of log entries from index `from` on only: a node
    /// that applies older entries later (a new leader catching up) must not push them
    /// again to a client that already saw them. Cost: as there.
    /// Attaching a connection again keeps its earlier `from`: entries appended but not yet
    /// applied may hold its outcome (a keep-alive must not skip a pending grant).
    /// False, nothing registered, when the session has [`MAX_ATTACHED_PER_SESSION`] other
    /// connections attached.
    pub fn attach_from(&self, session: SessionId, conn: u64, sink: PushSink, from: u64) -> bool {
        let mut g = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        Self::insert(&mut g, session, conn, sink, from)
    }

    /// Registers `sink` as [`Hub::attach_from`] says; false when the session is full.
    fn insert(g: &mut Subs, session: SessionId, conn: u64, sink: PushSink, from: u64) -> bool {
        // A connection that has ended ([`PushSink::detach`], checked under the hub's lock,
        // after which [`Hub::detach_conn`] takes it) is not attached: it would stay.
        if sink.detached() {
            return true;
        }
        let attached = g.by_session.get(&session.0);
        let earlier =
            attached.and_then(|v| v.iter().find(|(c, _, _)| *c == conn).map(|(_, _, f)| *f));
        if earlier.is_none() && attached.map_or(0, Vec::len) >= MAX_ATTACHED_PER_SESSION {
            return false;
        }
        g.remove_where(session.0, |c| c == conn);
        g.add(
            session.0,
            (conn, sink, earlier.map_or(from, |e| e.min(from))),
        );
        true
    }

    /// [`Hub::attach_from`] unless [`Hub::close_attached`] ran since `generation` was read
    /// ([`Hub::generation`]): [`AttachIn::Attached`] (also for a sink whose connection has
    /// ended: there is nothing to attach, and no leadership change), [`AttachIn::Stale`],
    /// or [`AttachIn::Full`] when the session has [`MAX_ATTACHED_PER_SESSION`] other
    /// connections attached. A node reads the generation before checking that it leads, so
    /// an attach that saw it leading just before a leadership change was handled is
    /// refused, never left behind. Cost: as there.
    pub fn attach_in(
        &self,
        generation: u64,
        session: SessionId,
        conn: u64,
        sink: PushSink,
        from: u64,
    ) -> AttachIn {
        let mut g = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        if self.generation.load(Ordering::SeqCst) != generation {
            return AttachIn::Stale;
        }
        if Self::insert(&mut g, session, conn, sink, from) {
            AttachIn::Attached
        } else {
            AttachIn::Full
        }
    }

    /// How many times [`Hub::close_attached`] ran (for [`Hub::attach_in`]). Cost: O(1).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Tells every connection attached to a session to close, and forgets every
    /// registration: what a node does when its leadership ends (a follower pushes
    /// nothing; the clients reconnect to the leader and repeat what they wait for).
    /// Returns how many connections were told to close. Cost: O(attachments).
    pub fn close_attached(&self) -> usize {
        let mut g = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        let mut conns = HashSet::new();
        for (c, sink, _) in g.all() {
            if conns.insert(*c) {
                sink.close();
            }
        }
        // The unattached are no session's: they stay what a spent budget may close.
        *g = Subs {
            unattached: std::mem::take(&mut g.unattached),
            ..Subs::default()
        };
        conns.len()
    }

    /// Sets the node whose hub this is: from then on only the outputs of log entries that
    /// node proposed (as leader) are pushed. A deposed leader applying the new leader's
    /// entries late, as a follower, pushes nothing of them — not even to a connection
    /// still registered because its leadership change was not handled yet — and a new
    /// leader pushes nothing of the entries of earlier leaders it applies. Cost: O(1).
    pub fn set_node(&self, node: u64) {
        self.node.store(node.saturating_add(1), Ordering::Relaxed);
    }

    /// Removes every registration of connection `conn`. A connection that ends calls
    /// [`PushSink::detach`] on its sink first, so a request of it still running cannot
    /// attach it again afterwards (that check and this removal take the same lock).
    /// Cost: O(the attachments of the sessions `conn` is attached to), each session's at
    /// most [`MAX_ATTACHED_PER_SESSION`].
    pub fn detach_conn(&self, conn: u64) {
        let mut g = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        g.remove_conn(conn);
    }

    /// Whether connection `conn` is attached to any session (open sessions only: a
    /// session's registrations go when it expires or closes). Cost: O(1).
    pub fn has_conn(&self, conn: u64) -> bool {
        let g = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        g.by_conn.contains_key(&conn)
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

    /// [`Hub::push_of`] an entry of unknown proposer.
    #[cfg(test)]
    fn push(&self, index: u64, o: &Output) {
        self.push_of(index, o, None);
    }

    /// Pushes `o` (applied at log entry `index`, proposed by node `proposer`) to the
    /// connections attached to its session — only if `proposer` is this hub's node
    /// ([`Hub::set_node`]; `None`, or no node set: pushed); otherwise only the
    /// registrations of a session that expired are forgotten. A connection whose queue is
    /// full, or that the push budget closes (see [`Hub`]), is told to close and detached.
    /// Cost: O(attachments of the session); when the budget is spent, O(all attachments
    /// and unattached connections) to find the connection to close.
    fn push_of(&self, index: u64, o: &Output, proposer: Option<u64>) {
        let node = self.node.load(Ordering::Relaxed);
        let send = node == 0 || proposer.is_none_or(|p| p.saturating_add(1) == node);
        let mut g = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        let session = o.session().0;
        // Connections to detach from every session (closed), and from this one (gone).
        let (mut closed, mut gone) = (Vec::new(), Vec::new());
        for i in 0..g.by_session.get(&session).map_or(0, Vec::len) {
            let Some((conn, sink, from)) =
                g.by_session.get(&session).and_then(|v| v.get(i)).cloned()
            else {
                break;
            };
            if !send || index < from || closed.contains(&conn) {
                continue;
            }
            if self.queued.load(Ordering::Relaxed) >= self.budget.load(Ordering::Relaxed)
                && self.counts(&sink)
            {
                let most = g
                    .candidates()
                    .filter(|(c, s)| !closed.contains(c) && self.counts(s))
                    .max_by_key(|(_, s)| s.len());
                let (victim, vs) = match most {
                    Some((c, s)) if s.len() > sink.len() => (c, s.clone()),
                    _ => (conn, sink.clone()),
                };
                vs.close();
                self.count_close("push_budget");
                closed.push(victim);
                if victim == conn {
                    continue;
                }
            }
            match sink.send(o.clone()) {
                Ok(()) => {}
                Err(Unsent::Full) => {
                    self.count_close("push_backlog");
                    gone.push(conn);
                }
                Err(Unsent::Closed) => gone.push(conn),
            }
        }
        for c in closed {
            g.remove_conn(c);
        }
        g.remove_where(session, |c| gone.contains(&c));
        if matches!(o, Output::SessionExpired { .. }) {
            g.remove_session(session);
        }
    }

    /// Forgets the registrations of a session that ended (closed). Cost: O(1).
    fn forget(&self, session: SessionId) {
        let mut g = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        g.remove_session(session.0);
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
    /// Idempotency keys of open sessions ([`Op::OpenCounted`], [`Op::OpenAs`]):
    /// (principal, key) → session, and back.
    pub open_keys: OpenKeys,
    /// The credential of every open session ([`crate::auth`]).
    pub owners: Owners,
}

/// An open key as a snapshot keeps it: its principal, the key, the session it opened.
type ScopedKey = (Principal, u128, u64);

/// The idempotency keys of sessions opened with [`Op::OpenCounted`] (and the earlier
/// [`Op::OpenAs`] and [`Op::Open`]), each scoped to the [`Principal`] whose open used it, forgotten when the
/// session ends (expires or closes). Replicated: every replica applies the same opens and
/// ends, and snapshots carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenKeys {
    by_key: BTreeMap<(Principal, OpenKey), SessionId>,
    by_session: BTreeMap<SessionId, (Principal, OpenKey)>,
}

impl OpenKeys {
    /// The session `principal` opened with `key`, if it is still remembered (a key of
    /// another principal is not seen). Cost: O(log n).
    pub fn get(&self, principal: Principal, key: OpenKey) -> Option<SessionId> {
        self.by_key.get(&(principal, key)).copied()
    }

    /// How many keys are remembered (one per open session at most). Cost: O(1).
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// True when no key is remembered. Cost: O(1).
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Remembers `key` as `principal`'s for `session`, in place of the session's earlier
    /// key and of the session the key named before (so the two maps stay each other's
    /// inverse whatever they held). Cost: O(log n).
    fn insert(&mut self, principal: Principal, key: OpenKey, session: SessionId) {
        self.forget(session);
        if let Some(earlier) = self.by_key.insert((principal, key), session) {
            if self.by_session.get(&earlier) == Some(&(principal, key)) {
                self.by_session.remove(&earlier);
            }
        }
        self.by_session.insert(session, (principal, key));
    }

    /// Forgets the key of every session `outs` reports expired.
    fn forget_expired(&mut self, outs: &[Output]) {
        for o in outs {
            if let Output::SessionExpired { session } = o {
                self.forget(*session);
            }
        }
    }

    /// Forgets the key of `session` (it ended).
    fn forget(&mut self, session: SessionId) {
        if let Some(k) = self.by_session.remove(&session) {
            self.by_key.remove(&k);
        }
    }

    /// The keys as a snapshot keeps them: those of [`Principal::Unrecorded`] (the layout
    /// of snapshot version 1), and the others with their principal.
    fn to_vecs(&self) -> (Vec<(u128, u64)>, Vec<ScopedKey>) {
        let (mut unrecorded, mut scoped) = (Vec::new(), Vec::new());
        for ((p, k), s) in &self.by_key {
            match p {
                Principal::Unrecorded => unrecorded.push((k.0, s.0)),
                p => scoped.push((*p, k.0, s.0)),
            }
        }
        (unrecorded, scoped)
    }

    fn from_vecs(unrecorded: Vec<(u128, u64)>, scoped: Vec<ScopedKey>) -> OpenKeys {
        let mut k = OpenKeys::default();
        for (key, s) in unrecorded {
            k.insert(Principal::Unrecorded, OpenKey(key), SessionId(s));
        }
        for (p, key, s) in scoped {
            k.insert(p, OpenKey(key), SessionId(s));
        }
        k
    }
}

/// Counts of what this replica applied, for `/metrics`. Every replica applies the same
/// entries, so they agree (a node that installed a snapshot counts from there on).
pub struct ApplyStats {
    /// Grants: to the acquirer directly and to a waiter later.
    pub grants: Counter,
    /// Sessions that expired.
    pub expiries: Counter,
    /// Queued acquires that were later granted: how long they waited (seconds of the
    /// cluster's logical time).
    pub wait_seconds: Histogram,
    /// Queued acquires not yet granted, by (session, lock): the logical time they queued.
    /// Bounded: cleared if it ever holds more entries than the claim table has rows.
    queued: Mutex<BTreeMap<(u64, LockName), u64>>,
}

impl Default for ApplyStats {
    fn default() -> Self {
        ApplyStats {
            grants: Counter::default(),
            expiries: Counter::default(),
            wait_seconds: Histogram::new(exponential_buckets(0.001, 4.0, 10)),
            queued: Mutex::new(BTreeMap::new()),
        }
    }
}

impl ApplyStats {
    fn record(
        &self,
        op: &Option<(u64, LockName, bool)>,
        result: &CmdResult,
        events: &[Output],
        cap: usize,
    ) {
        let mut q = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        let forget_session = |q: &mut BTreeMap<(u64, LockName), u64>, s: u64| {
            let keys: Vec<_> = q
                .range((s, LockName::default())..)
                .take_while(|(k, _)| k.0 == s)
                .map(|(k, _)| k.clone())
                .collect();
            for k in keys {
                q.remove(&k);
            }
        };
        for e in events {
            match e {
                Output::Granted { session, lock, .. } => {
                    let _ = self.grants.inc();
                    if let Some(t) = q.remove(&(session.0, lock.clone())) {
                        self.wait_seconds
                            .observe(result.now.saturating_sub(t) as f64 / 1000.0);
                    }
                }
                Output::WaitTimedOut { session, lock } => {
                    q.remove(&(session.0, lock.clone()));
                }
                Output::SessionExpired { session } => {
                    let _ = self.expiries.inc();
                    forget_session(&mut q, session.0);
                }
                _ => {}
            }
        }
        match (&result.reply, op) {
            (Ok(Reply::Granted { .. }), Some((_, _, true))) => {
                self.grants.inc();
            }
            (Ok(Reply::Queued { .. }), Some((s, lock, true))) => {
                if q.len() >= cap {
                    q.clear();
                }
                q.insert((*s, lock.clone()), result.now);
            }
            (Ok(Reply::Cancelled), Some((s, lock, false))) => {
                q.remove(&(*s, lock.clone()));
            }
            (Ok(Reply::Closed), Some((s, _, false))) => forget_session(&mut q, *s),
            _ => {}
        }
    }
}

/// State shared between the state machine (owned by openraft) and the node (reads, pushes).
pub struct Shared {
    state: Mutex<SmState>,
    /// Output routing.
    pub hub: Hub,
    /// What this replica applied, for `/metrics`.
    pub stats: ApplyStats,
    /// The service configuration.
    pub config: ServiceConfig,
    /// The last log id of `snapshot.bin`; held while a snapshot is written, so the
    /// builder and an installed snapshot never race and an older one never replaces a
    /// newer.
    persisted: Mutex<Option<LogId>>,
    /// `persisted`, watched: the log store's purges wait for it
    /// ([`LogStore::purge_after_snapshots`](crate::log_store::LogStore::purge_after_snapshots)).
    persisted_tx: tokio::sync::watch::Sender<crate::log_store::SnapshotProgress>,
}

impl Shared {
    /// The last log id of the persisted `snapshot.bin`, and whether an install failed,
    /// as they change. Cost: O(1).
    pub fn snapshot_persisted(
        &self,
    ) -> tokio::sync::watch::Receiver<crate::log_store::SnapshotProgress> {
        self.persisted_tx.subscribe()
    }

    /// Locks the state for a read. Keep the guard short: apply waits for it. Cost: O(1).
    pub fn state(&self) -> MutexGuard<'_, SmState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The first 8 bytes of `snapshot.bin`: this format, version 3 (each session's principal).
/// Files of versions 1 and 2 ([`SNAP_MAGIC_V1`], [`SNAP_MAGIC_V2`]) are read too; this
/// version writes 3.
pub const SNAP_MAGIC: [u8; 8] = *b"FLSNAP\0\x03";
/// The first 8 bytes of a `snapshot.bin` of version 2 (open keys scoped by principal, no
/// session's principal: its sessions count for no principal's quota).
pub const SNAP_MAGIC_V2: [u8; 8] = *b"FLSNAP\0\x02";
/// The first 8 bytes of a `snapshot.bin` of version 1 (open keys not scoped: read as
/// [`Principal::Unrecorded`]'s).
pub const SNAP_MAGIC_V1: [u8; 8] = *b"FLSNAP\0\x01";
const SNAP_HEADER: usize = 8 + 8 + 4;
/// The newest snapshot file version this build reads (and writes): [`SNAP_MAGIC`]'s last
/// byte (the 7 before it name the format, in every version).
const SNAP_VERSION: u8 = SNAP_MAGIC[7];

/// The version a snapshot file of a later build names in its header (a format this build
/// recognises, a version above [`SNAP_VERSION`]), `None` for any other bytes. Cost: O(1).
fn later_snap_version(bytes: &[u8]) -> Option<u8> {
    match bytes.get(..8) {
        Some([f @ .., v]) if f == &SNAP_MAGIC[..7] && *v > SNAP_VERSION => Some(*v),
        _ => None,
    }
}

fn snap_crc(len: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// `f` as the bytes of a snapshot file (header, length, checksum, payload). The header
/// names the version of `f.data`: version 3 for what this build takes, 1 or 2 for data
/// of those versions kept as it came (a snapshot read at start from an earlier build's file,
/// or sent by a peer that has not been upgraded yet), so the file reads back. Cost:
/// O(data) (the data is decoded to learn its version).
fn encode_snap_file(f: &SnapFile) -> io::Result<Vec<u8>> {
    let magic = match SnapData::decode_versioned(&f.data) {
        Ok((_, 1)) => SNAP_MAGIC_V1,
        Ok((_, 2)) => SNAP_MAGIC_V2,
        _ => SNAP_MAGIC,
    };
    let payload = postcard::to_allocvec(f).map_err(|e| io::Error::other(e.to_string()))?;
    let len = payload.len() as u64;
    let mut buf = Vec::with_capacity(SNAP_HEADER + payload.len());
    buf.extend_from_slice(&magic);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&snap_crc(len, &payload).to_le_bytes());
    buf.extend_from_slice(&payload);
    Ok(buf)
}

/// `data` in a snapshot file of this build's version, its length and checksum right, for
/// the fuzz targets ([`crate::fuzzing::snapshot_file_of`]). Cost: O(data).
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_snap_file(data: Vec<u8>) -> Vec<u8> {
    let f = SnapFile {
        meta: SnapshotMeta::default(),
        data,
    };
    encode_snap_file(&f).expect("a snapshot file encodes")
}

/// Checks and decodes the bytes of a snapshot file; the error says what is wrong. Its
/// data must be of the version its header names (the checksum covers length and payload,
/// not the header's magic). Cost: O(file size), the data decoded once to learn its
/// version (see [`open_snap_file`] for the frame alone).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn decode_snap_file(bytes: &[u8]) -> Result<SnapFile, String> {
    decode_snap_file_for(bytes, None)
}

/// [`decode_snap_file`], with the data's lists first counted against what a node of
/// `config`'s tables holds ([`check_list_lengths`]) when it is given: a restore or a
/// start, which know their tables, bound what the data decodes into before it is decoded
/// at all, as a snapshot from a peer is. Errors: as there, and the list refused.
/// Cost: as there.
fn decode_snap_file_for(bytes: &[u8], config: Option<&ServiceConfig>) -> Result<SnapFile, String> {
    let (f, version) = open_snap_file(bytes)?;
    if let Some(config) = config {
        check_list_lengths(config, &f.data).map_err(|e| e.to_string())?;
    }
    // Data that does not decode at all is refused, with its reason, where it is restored.
    if let Ok((_, v)) = SnapData::decode_versioned(&f.data) {
        if v != version {
            return Err(format!(
                "its header says version {version}, its data is of version {v}"
            ));
        }
    }
    Ok(f)
}

/// The frame of a snapshot file: its header (format and version), length and checksum
/// checked and its meta and data bytes decoded, and the version its header names; the data
/// itself is not decoded. What a node needs to send its current snapshot to a peer, which
/// decodes the data itself. Errors: what is wrong, described. Cost: O(file size) (the
/// checksum and a copy of the data), without decoding the state.
fn open_snap_file(bytes: &[u8]) -> Result<(SnapFile, u8), String> {
    let version = match bytes.get(..8) {
        Some(m) if bytes.len() >= SNAP_HEADER && m == SNAP_MAGIC => SNAP_VERSION,
        Some(m) if bytes.len() >= SNAP_HEADER && m == SNAP_MAGIC_V2 => 2,
        Some(m) if bytes.len() >= SNAP_HEADER && m == SNAP_MAGIC_V1 => 1,
        _ => {
            return Err(match later_snap_version(bytes) {
                Some(v) => format!(
                    "its header names version {v}, which this build does not read (versions \
                     1 to {SNAP_VERSION}): a later build's snapshot, or a damaged header"
                ),
                None => format!(
                    "not a fencelock snapshot of a version this build reads, 1 to \
                     {SNAP_VERSION} (header mismatch)"
                ),
            })
        }
    };
    let len = u64::from_le_bytes(bytes[8..16].try_into().map_err(|_| "short header")?);
    let crc = u32::from_le_bytes(bytes[16..20].try_into().map_err(|_| "short header")?);
    let payload = &bytes[SNAP_HEADER..];
    if payload.len() as u64 != len {
        return Err(format!(
            "length {} in the header, {} bytes present",
            len,
            payload.len()
        ));
    }
    if snap_crc(len, payload) != crc {
        return Err("checksum mismatch".into());
    }
    match postcard::take_from_bytes(payload) {
        Ok((f, [])) => Ok((f, version)),
        Ok(_) => Err("checksummed but has bytes after its end".into()),
        Err(e) => Err(format!("checksummed but does not decode: {e}")),
    }
}

/// The snapshot file at `path` read and its frame checked (`decode_snap_file`), its state
/// not restored: `Ok(None)` when there is none. Errors: I/O errors naming the path, a
/// file over `cap` bytes (`FileTooLarge`) among them; `InvalidInput` for a file whose
/// header names a later version (a later build's); `InvalidData` ([`corrupt_snap`])
/// for a file that fails its checks, its lists longer than a node of `config`'s tables
/// holds among them (when it is given: [`decode_snap_file_for`]). Cost: O(file size).
fn read_snap_frame(
    path: &Path,
    cap: u64,
    config: Option<&ServiceConfig>,
) -> io::Result<Option<SnapFile>> {
    let bytes = match crate::disk::read_capped(path, cap) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    };
    if let Some(v) = later_snap_version(&bytes) {
        // Most likely a later build's file (whose checks this build cannot know), which
        // that build still reads: never moved aside as corrupt. Were it a damaged version
        // byte instead, refusing the start is still the safe way.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "snapshot {}: its header names version {v}, which this build does not read \
                 (versions 1 to {SNAP_VERSION}): written by a later build, or damaged in its \
                 header; refused, nothing was changed: run the build that wrote it, or, if it \
                 is damaged, move it aside yourself",
                path.display()
            ),
        ));
    }
    decode_snap_file_for(&bytes, config)
        .map(Some)
        .map_err(|m| corrupt_snap(path, m))
}

/// The most corrupt snapshots a directory keeps aside (`snapshot.bin.corrupt`, then
/// `snapshot.bin.corrupt.2` and on; with this many kept, a start that would move one more
/// aside is refused).
pub const MAX_CORRUPT_KEPT: u32 = 64;

/// The name a corrupt `snapshot.bin` in `dir` is moved aside to: `snapshot.bin.corrupt`,
/// else the first of `snapshot.bin.corrupt.2`, `.3`, … that names nothing (a dangling
/// link counts as something), so an earlier one is never renamed over: each is the
/// evidence of its own failure.
///
/// Errors: `AlreadyExists`, naming the directory, when [`MAX_CORRUPT_KEPT`] are kept
/// already (the start is refused, nothing changed: remove the old ones); I/O errors
/// looking at a name. Cost: one `lstat` per name tried.
fn corrupt_aside(dir: &Path) -> io::Result<PathBuf> {
    for n in 1..=MAX_CORRUPT_KEPT {
        let name = match n {
            1 => "snapshot.bin.corrupt".to_string(),
            n => format!("snapshot.bin.corrupt.{n}"),
        };
        let at = dir.join(name);
        match fs::symlink_metadata(&at) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(at),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", at.display()))),
            Ok(_) => {}
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{}: {MAX_CORRUPT_KEPT} corrupt snapshots are kept aside already \
             (snapshot.bin.corrupt, snapshot.bin.corrupt.2, …); refusing to start (nothing \
             was changed): look at them, then remove them",
            dir.display()
        ),
    ))
}

/// The error for a snapshot file at `path` that is corrupt (`m` says how): `InvalidData`,
/// which a start reads as "never use this file".
fn corrupt_snap(path: &Path, m: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("snapshot {}: {m}", path.display()),
    )
}

/// Reads, checks and restores the snapshot file at `path`: `Ok(None)` when there is none.
///
/// Errors: I/O errors reading it, `FileTooLarge` for a file longer than a snapshot of
/// `config`'s tables can be ([`max_snapshot_file_bytes`]: started with smaller tables than
/// the file's, or not a snapshot); `InvalidData`, naming the path, when it is corrupt (see
/// the module docs); `InvalidInput`, naming the path, when it is sound but taken with
/// other core settings or too large for `config`'s tables (`decode_snapshot`).
/// Cost: O(file size).
fn read_snap_file(path: &Path, config: &ServiceConfig) -> io::Result<Option<(SnapFile, SmState)>> {
    let Some(f) = read_snap_frame(path, max_snapshot_file_bytes(config), Some(config))? else {
        return Ok(None);
    };
    let bad = |m: String| corrupt_snap(path, m);
    let (state, last_applied, membership) = decode_snapshot(config, &f.data).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidInput {
            // Sound, but not for these settings: never taken for a corrupt file.
            io::Error::new(
                e.kind(),
                format!(
                    "snapshot {}: {e}; refusing to start (nothing was changed)",
                    path.display()
                ),
            )
        } else {
            bad(format!("does not restore: {e}"))
        }
    })?;
    if last_applied != f.meta.last_log_id {
        return Err(bad(format!(
            "its data was taken at {last_applied:?}, its header says {:?}",
            f.meta.last_log_id
        )));
    }
    if membership != f.meta.last_membership {
        return Err(bad(format!(
            "its data's membership is {membership:?}, its header's {:?}",
            f.meta.last_membership
        )));
    }
    Ok(Some((f, state)))
}

/// The core settings the snapshot file at `path` was taken with (from its core
/// snapshot's header), `None` when there is no file.
///
/// Errors: `InvalidData`, naming the path, when the file fails its checks or its data does
/// not decode; I/O errors. Cost: O(file size) (the checksum), without restoring the state.
/// The one snapshot read without a size cap: `force-new-cluster` asks it of a directory of
/// an earlier build, to learn the settings that decide the tables (and so the cap).
pub(crate) fn snapshot_core(path: &Path) -> io::Result<Option<Config>> {
    let Some(f) = read_snap_frame(path, u64::MAX, None)? else {
        return Ok(None);
    };
    let bad = |m: String| corrupt_snap(path, m);
    let d = SnapData::decode(&f.data).map_err(|e| bad(format!("does not decode: {e}")))?;
    fencelock::snapshot_config(&d.core)
        .map(Some)
        .map_err(|e| bad(format!("does not decode: {e}")))
}

/// A backup of `shared`'s applied state, in the checksummed snapshot-file format
/// (`snapshot.bin`'s): what `GET /snapshot` serves and `fencelock-node snapshot restore`
/// reads. Returns the bytes and the log id it was taken at.
///
/// Errors: encoding failures (none expected). Cost: O(state size); holds the state lock
/// while the backup is encoded.
pub fn backup(shared: &Shared) -> io::Result<(Vec<u8>, Option<LogId>)> {
    let g = shared.state();
    backup_of(&g)
}

/// [`backup`] of the state `g` (a copy rebuilt at a log index, for [`Request::Backup`]'s
/// pages: the same state gives the same bytes).
///
/// Errors: encoding failures (none expected). Cost: O(state size).
///
/// [`Request::Backup`]: crate::protocol::Request::Backup
pub(crate) fn backup_of(g: &SmState) -> io::Result<(Vec<u8>, Option<LogId>)> {
    let (data, last_applied, membership) = {
        let d = SnapData::of(g);
        (
            postcard::to_allocvec(&d).map_err(|e| io::Error::other(e.to_string()))?,
            g.last_applied,
            g.membership.clone(),
        )
    };
    let f = SnapFile {
        meta: SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id: format!("backup-{}", last_applied.map_or(0, |l| l.index)),
        },
        data,
    };
    Ok((encode_snap_file(&f)?, last_applied))
}

/// What to say of a core snapshot the core refused with `e`, when `e` says a later build
/// wrote it (a version above [`fencelock::SNAPSHOT_VERSION`]: checksummed bytes inside a
/// file whose own format this build reads, never taken for corrupt); `None` otherwise.
/// Cost: O(1).
fn later_core(e: &fencelock::Error) -> Option<String> {
    match e {
        fencelock::Error::UnsupportedVersion(v) if *v > fencelock::SNAPSHOT_VERSION => {
            Some(format!(
                "its core snapshot is of version {v}, which this build's core does not read: \
                 written by a later build (run the build that wrote it)"
            ))
        }
        _ => None,
    }
}

/// Checks a backup's bytes (format, checksum, contents decode, the core snapshot's header
/// readable by this build); returns its log index.
///
/// Errors: what is wrong, described (a core snapshot of a later version as a later
/// build's). Cost: O(backup size).
pub fn check_backup(bytes: &[u8]) -> Result<u64, String> {
    check_backup_for(bytes, None)
}

/// [`check_backup`] for a restore into `config`'s tables (`snapshot restore`): the
/// backup's lists are counted against what they hold before the data is decoded
/// (`decode_snap_file_for`). Errors and cost: as there.
pub fn check_backup_within(bytes: &[u8], config: &ServiceConfig) -> Result<u64, String> {
    check_backup_for(bytes, Some(config))
}

fn check_backup_for(bytes: &[u8], config: Option<&ServiceConfig>) -> Result<u64, String> {
    let f = decode_snap_file_for(bytes, config)?;
    let d = SnapData::decode(&f.data).map_err(|e| format!("does not decode: {e}"))?;
    d.check_contents()?;
    fencelock::snapshot_config(&d.core).map_err(|e| {
        later_core(&e).unwrap_or_else(|| format!("its core snapshot is unreadable: {e}"))
    })?;
    d.last_applied
        .map(|l| l.index)
        .ok_or_else(|| "taken before anything was applied".into())
}

/// Writes the state of a backup ([`backup`]) as `dir/snapshot.bin` of a node of a *new*
/// cluster whose members are `members`: the same core state (sessions, holds, queues,
/// tokens, open keys, logical time), taken at the backup's log id, with the new
/// membership. Returns that log id: the caller starts the node's log purged up to it.
/// The directory records `config`'s table sizes and the core settings the backup was
/// taken with (lock-delay, the limits) as its settings ([`crate::settings`]): the node
/// starts only with those.
///
/// Errors: `InvalidInput` for table sizes no node starts with
/// ([`ServiceConfig::check_tables`]) and for members no node would read
/// ([`check_members`](crate::membership::check_members): none, more than
/// [`MAX_MEMBERS`](crate::membership::MAX_MEMBERS), an address over 255 bytes, a
/// membership over [`MAX_MEMBERSHIP_BYTES`](crate::membership::MAX_MEMBERSHIP_BYTES));
/// `InvalidData` for a backup that
/// fails its checks (corrupt, or not restorable with `config`), or one taken before
/// anything was applied; `AlreadyExists` when `dir`
/// already has a snapshot or a log (a restore never overwrites a node); I/O errors naming
/// the path. Cost: O(backup size).
pub fn restore_into(
    backup_bytes: &[u8],
    dir: &Path,
    config: &ServiceConfig,
    members: std::collections::BTreeMap<u64, crate::types::NodeAddr>,
) -> io::Result<LogId> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, format!("backup: {m}"));
    config
        .check_tables()
        .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
    // A membership a node would refuse as it reads it (`crate::membership`).
    crate::membership::check_members(&members)
        .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
    let f = decode_snap_file_for(backup_bytes, Some(config)).map_err(bad)?;
    let mut d = SnapData::decode(&f.data).map_err(|e| bad(format!("does not decode: {e}")))?;
    d.check_contents().map_err(bad)?;
    let svc = LockService::restore(config.storage(), &d.core).map_err(|(_, e)| {
        bad(later_core(&e)
            .unwrap_or_else(|| format!("does not restore with these table sizes: {e}")))
    })?;
    d.keep_open_sessions(&svc);
    // The directory runs with these table sizes and the core settings the backup was
    // taken with ([`crate::settings`]).
    let settings = ServiceConfig {
        core: svc.config(),
        ..*config
    };
    let at = d
        .last_applied
        .ok_or_else(|| bad("taken before anything was applied".into()))?;
    for name in ["snapshot.bin", "raft.log"] {
        if dir.join(name).exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists: restore only into a new directory",
                    dir.join(name).display()
                ),
            ));
        }
    }
    let voters = members.keys().copied().collect();
    let membership =
        StoredMembership::new(Some(at), openraft::Membership::new(vec![voters], members));
    let data = SnapData {
        last_applied: Some(at),
        membership: membership.clone(),
        core: d.core,
        open_keys: d.open_keys,
        owners: d.owners,
        scoped_keys: d.scoped_keys,
        principals: d.principals,
    };
    let f = SnapFile {
        meta: SnapshotMeta {
            last_log_id: Some(at),
            last_membership: membership,
            snapshot_id: format!("restored-{}", at.index),
        },
        data: postcard::to_allocvec(&data).map_err(|e| io::Error::other(e.to_string()))?,
    };
    crate::settings::record(dir, &settings)?;
    write_snap_file(dir, &f)?;
    Ok(at)
}

/// The snapshot file's contents.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct SnapFile {
    /// Its membership capped and checked as it decodes, as a peer's is (a backup file is
    /// no more trusted than a peer).
    #[serde(deserialize_with = "crate::membership::decode_meta")]
    meta: SnapshotMeta,
    pub(crate) data: Vec<u8>,
}

/// The snapshot data: the core snapshot plus openraft's bookkeeping. Version 3: version
/// 2's fields ([`SnapDataV2`]), then the principal of each session whose open recorded
/// one (in session order). Version 2: version 1's fields ([`SnapDataV1`], its
/// `open_keys` now only [`Principal::Unrecorded`]'s), then the keys of every other
/// principal. Data of each version ends where the next version's field would start, so
/// it does not decode as a later version, and [`SnapData::decode`] tells them apart.
#[derive(Clone, Serialize, Deserialize)]
struct SnapData {
    last_applied: Option<LogId>,
    #[serde(deserialize_with = "crate::membership::decode_stored")]
    membership: StoredMembership,
    core: Vec<u8>,
    open_keys: Vec<(u128, u64)>,
    owners: Vec<(u64, SessionSecret)>,
    scoped_keys: Vec<ScopedKey>,
    principals: Vec<(u64, Principal)>,
}

/// The snapshot data of version 2 (earlier builds): no session's principal.
#[derive(Serialize, Deserialize)]
struct SnapDataV2 {
    last_applied: Option<LogId>,
    #[serde(deserialize_with = "crate::membership::decode_stored")]
    membership: StoredMembership,
    core: Vec<u8>,
    open_keys: Vec<(u128, u64)>,
    owners: Vec<(u64, SessionSecret)>,
    scoped_keys: Vec<ScopedKey>,
}

/// The snapshot data of version 1 (earlier builds): open keys without a principal.
#[derive(Serialize, Deserialize)]
struct SnapDataV1 {
    last_applied: Option<LogId>,
    #[serde(deserialize_with = "crate::membership::decode_stored")]
    membership: StoredMembership,
    core: Vec<u8>,
    open_keys: Vec<(u128, u64)>,
    owners: Vec<(u64, SessionSecret)>,
}

/// A sequence's length, learned by decoding its elements one at a time and dropping each:
/// what a list of a snapshot's data holds, without allocating the list.
struct ListLen<T>(usize, std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ListLen<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
            type Value = ListLen<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ListLen<T>, A::Error> {
                let mut n = 0;
                while seq.next_element::<T>()?.is_some() {
                    n += 1;
                }
                Ok(ListLen(n, std::marker::PhantomData))
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

/// The most entries a list of a snapshot's data (open keys, credentials, principals) may
/// hold for `config`: each names a live session, so at most one per session row — twice
/// that and 1 024 more, as room for what no build writes but a refusal at start must not
/// hit.
fn list_cap(config: &ServiceConfig) -> usize {
    config.sessions.saturating_mul(2).saturating_add(1024)
}

/// Refuses snapshot data whose lists hold more entries than [`list_cap`], before they are
/// decoded: counted one element at a time, so that data of compact entries (two bytes
/// for a principal, some fifty in memory) cannot make a node allocate many times its
/// size, whoever sent it. Data that does not decode is left to [`SnapData::decode`],
/// which says why. Errors: `InvalidData`, naming the list. Cost: O(data), no allocation
/// but one element at a time.
fn check_list_lengths(config: &ServiceConfig, data: &[u8]) -> io::Result<()> {
    let cap = list_cap(config);
    let over = |what: &str, n: usize| -> io::Result<()> {
        if n > cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "its data lists {n} {what}, more than the {cap} a node of {} session rows can hold",
                    config.sessions
                ),
            ));
        }
        Ok(())
    };
    // The fields in order (each version's data is the next one's without its last
    // fields): stop quietly where the data ends or does not decode.
    /// The data's first two fields, its membership capped and checked as it decodes.
    #[derive(Deserialize)]
    struct Head(
        #[allow(dead_code)] Option<LogId>,
        #[allow(dead_code)]
        #[serde(deserialize_with = "crate::membership::decode_stored")]
        StoredMembership,
    );
    let Ok((_, rest)) = postcard::take_from_bytes::<Head>(data) else {
        return Ok(());
    };
    let Ok((_, rest)) = postcard::take_from_bytes::<ListLen<u8>>(rest) else {
        return Ok(());
    };
    let Ok((keys, rest)) = postcard::take_from_bytes::<ListLen<(u128, u64)>>(rest) else {
        return Ok(());
    };
    over("open keys", keys.0)?;
    let Ok((owners, rest)) = postcard::take_from_bytes::<ListLen<(u64, SessionSecret)>>(rest)
    else {
        return Ok(());
    };
    over("session credentials", owners.0)?;
    let Ok((scoped, rest)) = postcard::take_from_bytes::<ListLen<ScopedKey>>(rest) else {
        return Ok(());
    };
    over("scoped open keys", scoped.0)?;
    let Ok((principals, _)) = postcard::take_from_bytes::<ListLen<(u64, Principal)>>(rest) else {
        return Ok(());
    };
    over("session principals", principals.0)
}

impl SnapData {
    /// The snapshot data of `g`. Cost: O(state size).
    fn of(g: &SmState) -> SnapData {
        let (open_keys, scoped_keys) = g.open_keys.to_vecs();
        SnapData {
            last_applied: g.last_applied,
            membership: g.membership.clone(),
            core: g.svc.snapshot_vec(),
            open_keys,
            owners: g.owners.to_vec(),
            scoped_keys,
            principals: g.owners.principals_vec(),
        }
    }

    /// Decodes version 3 data, or version 2 data (no session's principal), or version 1
    /// data (its keys [`Principal::Unrecorded`]'s), each only when the bytes are exactly
    /// that (none left over: damaged data of one version never passes for an earlier one
    /// without its last field, nor an earlier one with bytes appended for a later one). A
    /// snapshot from a peer has no header: its bytes say which it is. Errors: none
    /// decodes (the version 3 error). Cost: O(data).
    fn decode(data: &[u8]) -> Result<SnapData, postcard::Error> {
        Self::decode_versioned(data).map(|(d, _)| d)
    }

    /// [`SnapData::decode`], and which version the data was (1 to 3). Cost: O(data).
    fn decode_versioned(data: &[u8]) -> Result<(SnapData, u8), postcard::Error> {
        let e = match postcard::take_from_bytes::<SnapData>(data) {
            Ok((d, [])) => return Ok((d, 3)),
            Ok(_) => postcard::Error::DeserializeBadEncoding,
            Err(e) => e,
        };
        if let Ok((v2, [])) = postcard::take_from_bytes::<SnapDataV2>(data) {
            return Ok((
                SnapData {
                    last_applied: v2.last_applied,
                    membership: v2.membership,
                    core: v2.core,
                    open_keys: v2.open_keys,
                    owners: v2.owners,
                    scoped_keys: v2.scoped_keys,
                    principals: Vec::new(),
                },
                2,
            ));
        }
        let v1 = match postcard::take_from_bytes::<SnapDataV1>(data) {
            Ok((v1, [])) => v1,
            _ => return Err(e),
        };
        Ok((
            SnapData {
                last_applied: v1.last_applied,
                membership: v1.membership,
                core: v1.core,
                open_keys: v1.open_keys,
                owners: v1.owners,
                scoped_keys: Vec::new(),
                principals: Vec::new(),
            },
            1,
        ))
    }
}

/// The state machine handed to openraft.
pub struct StateMachine {
    shared: Arc<Shared>,
    dir: PathBuf,
    disk: Arc<DiskHealth>,
    current: Option<SnapFile>,
    snap_seq: u64,
}

impl SnapData {
    /// A snapshot lists each session's credential and open key once, and each open key
    /// once (it is written from maps): a repeat would leave the two maps of `OpenKeys`
    /// out of step (a stale key surviving `forget`), or one credential silently replacing
    /// another. And its log ids (the last applied, the membership's) are below
    /// [`RAFT_NUMBER_BOUND`](crate::types::RAFT_NUMBER_BOUND), as every log id a node
    /// takes from a peer or its own log is: the next entry's index is one more. Errors:
    /// which list repeats what, or which log id is out of bounds. Cost: O(n log n) in the
    /// lists' length.
    fn check_contents(&self) -> Result<(), String> {
        let ids = [
            ("last applied", self.last_applied.as_ref()),
            ("membership", self.membership.log_id().as_ref()),
        ];
        for (what, id) in ids {
            if let Some(id) = id.filter(|id| !crate::types::log_id_in_bounds(id)) {
                return Err(format!("its {what} log id {id} is not below 2^62"));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some((s, _)) = self.owners.iter().find(|(s, _)| !seen.insert(*s)) {
            return Err(format!("session {s} has two credentials"));
        }
        let (mut sessions, mut keys) = (
            std::collections::BTreeSet::new(),
            std::collections::BTreeSet::new(),
        );
        let all_keys = self
            .open_keys
            .iter()
            .map(|(k, s)| (Principal::Unrecorded, *k, *s))
            .chain(self.scoped_keys.iter().copied());
        for (p, k, s) in all_keys {
            if !keys.insert((p, k)) {
                return Err(format!("an open key is listed twice (session {s})"));
            }
            if !sessions.insert(s) {
                return Err(format!("session {s} has two open keys"));
            }
        }
        // Each principal belongs to a session with a credential, once, and is a recorded
        // one: a repeat would count a session twice against a quota (one for a session not
        // open in the core is dropped once it is restored: `keep_open_sessions`).
        let mut named = std::collections::BTreeSet::new();
        for (s, p) in &self.principals {
            if *p == Principal::Unrecorded {
                return Err(format!("session {s} has the unrecorded principal listed"));
            }
            if !named.insert(*s) {
                return Err(format!("session {s} has two principals"));
            }
            if !seen.contains(s) {
                return Err(format!("session {s} has a principal but no credential"));
            }
        }
        Ok(())
    }
}

impl SnapData {
    /// Keeps only the credentials, open keys and principals of sessions open in `svc`
    /// (the restored core). This build's apply forgets all three when a session closes or
    /// expires, so its own snapshots hold no other; one that does (damaged, forged, or
    /// checksummed by whoever could write the file) would leave them waiting for the id
    /// the core hands out next: a principal counted against a quota that no close or
    /// expiry takes it off, and a key that answers whoever presents it with the session
    /// later opened under that id, and its credential. An open key of a session without
    /// a credential is dropped too (this build records both at the open): a retried open
    /// it answered would carry no credential. Dropped rather than refused: a restart must
    /// never be refused over entries that name no live session. Cost: O(entries × log
    /// sessions).
    fn keep_open_sessions(&mut self, svc: &LockService<VecStorage>) {
        let open = |s: u64| svc.is_open(SessionId(s));
        self.owners.retain(|(s, _)| open(*s));
        let owned: std::collections::BTreeSet<u64> = self.owners.iter().map(|(s, _)| *s).collect();
        self.open_keys.retain(|(_, s)| owned.contains(s));
        self.scoped_keys.retain(|(_, _, s)| owned.contains(s));
        self.principals.retain(|(s, _)| open(*s));
    }
}

/// Decodes and restores snapshot data into tables of `config`'s sizes.
///
/// Errors: `InvalidInput` when the snapshot is sound but not this node's to restore —
/// taken with other core settings (lock-delay, the watcher or name limit: each named), or
/// holding more than `config`'s tables do — so a caller never mistakes a node started
/// with the wrong settings for a corrupt file; any other error when the data does not
/// decode or restore. Cost: O(data).
pub(crate) fn decode_snapshot(
    config: &ServiceConfig,
    data: &[u8],
) -> io::Result<(SmState, Option<LogId>, StoredMembership)> {
    check_list_lengths(config, data)?;
    let mut d = SnapData::decode(data).map_err(|e| io::Error::other(e.to_string()))?;
    let not_ours = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    if let Ok(core) = fencelock::snapshot_config(&d.core) {
        let taken = ServiceConfig { core, ..*config };
        let diff = config.differences(&taken, "here", "in the snapshot");
        if !diff.is_empty() {
            return Err(not_ours(format!(
                "it was taken with other service settings ({})",
                diff.join("; ")
            )));
        }
    }
    let svc = restore_keyed(config, &d.core).map_err(|e| match e {
        fencelock::Error::CapacityExceeded(_) => not_ours(format!(
            "it holds more than this node's tables do ({e}: sessions {}, locks {}, claims {})",
            config.sessions, config.locks, config.claims
        )),
        // A later build's core snapshot: never taken for corrupt.
        e => match later_core(&e) {
            Some(m) => not_ours(m),
            None => io::Error::other(e.to_string()),
        },
    })?;
    d.check_contents().map_err(io::Error::other)?;
    d.keep_open_sessions(&svc);
    Ok((
        SmState {
            svc,
            last_applied: d.last_applied,
            membership: d.membership.clone(),
            open_keys: OpenKeys::from_vecs(d.open_keys, d.scoped_keys),
            owners: Owners::from_vecs(d.owners, d.principals),
        },
        d.last_applied,
        d.membership,
    ))
}

impl StateMachine {
    /// Opens the state machine in `dir`: restored from `dir/snapshot.bin` if present, else
    /// empty. Returns it and the handle the node keeps.
    ///
    /// Errors: I/O errors, naming the path; `InvalidData`, naming the path, for a corrupt
    /// snapshot file (bad header, length or checksum, or contents that do not decode or
    /// restore) — it is never used; `InvalidInput`, naming the path, for a sound snapshot
    /// taken with other core settings or too large for `config`'s tables, or one a later
    /// build wrote (its header, or its core snapshot's, names a later version) — the start
    /// is refused and the file left as it is. Cost: O(snapshot size).
    pub fn open(dir: &Path, config: ServiceConfig) -> io::Result<(StateMachine, Arc<Shared>)> {
        crate::disk::create_private_dir(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let path = dir.join("snapshot.bin");
        let (state, current) = match read_snap_file(&path, &config)? {
            Some((f, state)) => (state, Some(f)),
            None => (
                SmState {
                    svc: config.fresh(),
                    last_applied: None,
                    membership: StoredMembership::default(),
                    open_keys: OpenKeys::default(),
                    owners: Owners::default(),
                },
                None,
            ),
        };
        let persisted = current.as_ref().and_then(|f: &SnapFile| f.meta.last_log_id);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            hub: Hub::default(),
            stats: ApplyStats::default(),
            config,
            persisted: Mutex::new(persisted),
            persisted_tx: tokio::sync::watch::Sender::new(crate::log_store::SnapshotProgress {
                persisted,
                install_failed: false,
            }),
        });
        Ok((
            StateMachine {
                shared: shared.clone(),
                dir: dir.to_path_buf(),
                disk: Arc::new(DiskHealth::new(dir)),
                current,
                snap_seq: 0,
            },
            shared,
        ))
    }

    /// [`StateMachine::open`] for a node whose log was purged up to `log_purged` (`None`:
    /// the log still holds every entry from the first). A corrupt snapshot is never served:
    ///
    /// * with `log_purged == None` the state can be rebuilt from the log alone: the file is
    ///   moved aside to `snapshot.bin.corrupt`, or the first free of `.corrupt.2` to
    ///   `.corrupt.64` (logged as an error; with all 64 taken the start is refused,
    ///   `AlreadyExists`, nothing changed) and the node starts
    ///   from the empty state, replaying its log (a leader may also install a snapshot);
    /// * otherwise entries the snapshot stood for are gone from this node's log, so the
    ///   start is refused (`InvalidData` naming the path and the purge point) and nothing
    ///   is changed. Way out: remove this node from the cluster (`set-voters` without it),
    ///   move its directory aside, and add a fresh node (a new id, an empty directory) with
    ///   `add-learner` and `set-voters`: it receives a snapshot from the leader. Wiping the
    ///   directory and restarting under the same id is *not* safe: it forgets the node's
    ///   vote and its share of acknowledged entries.
    ///
    /// A snapshot that is missing, or taken before `log_purged`, while the log was purged
    /// is refused the same way (`InvalidData` naming the path): the entries between the
    /// state and the log are gone.
    ///
    /// Errors: as [`StateMachine::open`], and the refusals above. Cost: O(snapshot size).
    pub fn open_checked(
        dir: &Path,
        config: ServiceConfig,
        log_purged: Option<LogId>,
    ) -> io::Result<(StateMachine, Arc<Shared>)> {
        match Self::open(dir, config) {
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let path = dir.join("snapshot.bin");
                if let Some(p) = log_purged {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{e}; the log in {} was compacted up to index {}, so this node cannot \
                             rebuild its state from its own files: refusing to start (nothing was \
                             changed). Replace the node: remove it with set-voters, move {} aside, \
                             and add a fresh node with a new id (add-learner, set-voters)",
                            dir.display(),
                            p.index,
                            dir.display()
                        ),
                    ));
                }
                let aside = corrupt_aside(dir)?;
                fs::rename(&path, &aside).map_err(|r| {
                    io::Error::new(
                        r.kind(),
                        format!("{e}; moving it aside to {} failed: {r}", aside.display()),
                    )
                })?;
                sync_dir(dir)?;
                tracing::error!(
                    error = %e,
                    moved_to = %aside.display(),
                    "corrupt snapshot moved aside; the log holds every entry, rebuilding the state by replaying it"
                );
                Self::open(dir, config)
            }
            Ok((sm, shared)) => {
                // A snapshot that is gone (or older than the purge) leaves a gap between
                // the state and the log's first entry: the state cannot be rebuilt.
                let applied = shared.state().last_applied.map(|l| l.index);
                match log_purged {
                    Some(p) if applied < Some(p.index) => {
                        let path = dir.join("snapshot.bin");
                        let what = match applied {
                            None => format!("snapshot {} is missing", path.display()),
                            Some(i) => {
                                format!("snapshot {} was taken at log index {i}", path.display())
                            }
                        };
                        Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{what}, but the log in {} was compacted up to index {}, so \
                                 this node cannot rebuild its state from its own files: \
                                 refusing to start (nothing was changed). Put the right \
                                 snapshot.bin back, or replace the node: remove it with \
                                 set-voters, move {} aside, and add a fresh node with a new id \
                                 (add-learner, set-voters)",
                                dir.display(),
                                p.index,
                                dir.display()
                            ),
                        ))
                    }
                    _ => Ok((sm, shared)),
                }
            }
            r => r,
        }
    }

    /// Shares `disk` (the log store's) so that a snapshot write stalled by a full disk
    /// shows in the node's health. Cost: O(1).
    pub fn set_disk(&mut self, disk: Arc<DiskHealth>) {
        self.disk = disk;
    }

    /// Decodes, checks and persists a received snapshot, then installs it. Errors: data
    /// that does not decode or was taken elsewhere, or with another membership, than
    /// `meta` says; the write's I/O error. Cost: a decode of the whole state and a write
    /// of `data`.
    async fn install_checked(
        &mut self,
        meta: &SnapshotMeta,
        data: Vec<u8>,
    ) -> Result<(), StorageError> {
        let (state, last_applied, membership) = decode_snapshot(&self.shared.config, &data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        // The checks a start makes of `snapshot.bin` (`read_snap_file`): a snapshot whose
        // data was taken elsewhere, or with another membership, than its meta says is
        // refused before it is persisted, not at the next start (openraft would install
        // the meta's membership while this state machine kept the data's).
        let disagrees = if last_applied != meta.last_log_id {
            Some(format!(
                "a received snapshot's data was taken at {last_applied:?}, its meta says {:?}",
                meta.last_log_id
            ))
        } else if membership != meta.last_membership {
            Some(format!(
                "a received snapshot's data has the membership {membership:?}, its meta says {:?}",
                meta.last_membership
            ))
        } else {
            None
        };
        if let Some(m) = disagrees {
            let e = io::Error::new(io::ErrorKind::InvalidData, m);
            return Err(StorageIOError::read_snapshot(Some(meta.signature()), &e).into());
        }
        let f = SnapFile {
            meta: meta.clone(),
            data,
        };
        let f = self
            .persist_retrying(f)
            .await
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        *self.shared.state() = state;
        self.current = Some(f);
        Ok(())
    }

    /// [`persist`] on a blocking thread, retried while the disk is full
    /// ([`DiskHealth::retry_blocking`]): a snapshot file is as large as the state, and
    /// its write and fsyncs on the node's one runtime thread held up every heartbeat,
    /// request and push meanwhile. `f` back once it is written.
    ///
    /// A write that has begun ends even if this future is dropped. openraft drops none of
    /// these futures while the node runs (it awaits each one of its storage calls before
    /// the next); at shutdown the file, written or not, is whole: a rename puts it in place.
    async fn persist_retrying(&self, f: SnapFile) -> io::Result<SnapFile> {
        let f = Arc::new(f);
        let (shared, dir, g) = (self.shared.clone(), self.dir.clone(), f.clone());
        self.disk
            .retry_blocking(Writer::Snapshot, "writing a snapshot", move || {
                persist(&shared, &dir, &g)
            })
            .await?;
        // Each try's copy of `f` is dropped as its thread ends the try, before the answer,
        // and the closure's with `retry_blocking`: the clone is only a fallback.
        Ok(Arc::try_unwrap(f).unwrap_or_else(|f| (*f).clone()))
    }
}

/// [`write_snap_file`] of `f` unless `dir`'s file already holds a newer snapshot
/// (`shared.persisted`, held meanwhile, so two writers take turns). Errors: the I/O error,
/// naming the file. Cost: O(snapshot size) and two fsyncs (the file, the directory).
fn persist(shared: &Shared, dir: &Path, f: &SnapFile) -> io::Result<()> {
    let mut persisted = shared.persisted.lock().unwrap_or_else(|p| p.into_inner());
    if *persisted > f.meta.last_log_id {
        return Ok(());
    }
    write_snap_file(dir, f)?;
    *persisted = f.meta.last_log_id;
    let last = *persisted;
    shared.persisted_tx.send_modify(|p| p.persisted = last);
    Ok(())
}

/// Writes `f` as `dir/snapshot.bin`, whole or not at all: into `snapshot.tmp`, fsynced,
/// renamed over it, the directory fsynced. Errors: the I/O error, naming the file. Cost:
/// O(snapshot size) and two fsyncs.
fn write_snap_file(dir: &Path, f: &SnapFile) -> io::Result<()> {
    let bytes = encode_snap_file(f)?;
    let tmp = dir.join("snapshot.tmp");
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", tmp.display()));
    {
        let mut file = crate::disk::create_private_file(&tmp).map_err(named)?;
        file.write_all(&bytes).map_err(named)?;
        file.sync_all().map_err(named)?;
    }
    fs::rename(&tmp, dir.join("snapshot.bin")).map_err(named)?;
    sync_dir(dir)
}

/// Fsyncs `dir` itself (so a rename into it is durable). Errors: the I/O error, naming
/// `dir`. Cost: one `open` and one `fsync`.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))
}

/// The time an op of an entry stamped `stamp` is applied at: the latest of the stamp, the
/// time `carried` by the input itself and the service's current time (see
/// [`Cmd`](crate::types::Cmd)). Never earlier than the service's time, so the core never
/// refuses an entry's input as going back in time.
fn op_time(svc: &LockService<VecStorage>, stamp: Option<u64>, carried: Tick) -> Tick {
    Tick(svc.now().0.max(stamp.unwrap_or(0)).max(carried.0))
}

/// How an entry's ops reach their time: its stamp, and whether they tick at each deadline
/// on the way ([`Cmd::each_deadline`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamp {
    /// The entry's stamp ([`Cmd`]'s `now`).
    pub(crate) now: Option<u64>,
    /// Tick at each deadline before an op's time ([`Op::EachDeadline`]).
    pub(crate) each_deadline: bool,
}

impl Stamp {
    /// The stamp of `cmd`'s ops. Cost: O(1).
    pub(crate) fn of(cmd: &Cmd) -> Stamp {
        Stamp {
            now: cmd.now,
            each_deadline: cmd.each_deadline(),
        }
    }

    /// No stamp, one step: for an input whose time the op has already reached.
    const REACHED: Stamp = Stamp {
        now: None,
        each_deadline: false,
    };
}

/// The ops of `cmd` that are requests (each answered, in order), without its
/// [`Op::EachDeadline`], with the stamp they are applied under. Cost: O(1), the ops moved.
pub(crate) fn requests(cmd: Cmd) -> (Stamp, impl Iterator<Item = Op>) {
    let stamp = Stamp::of(&cmd);
    (
        stamp,
        cmd.ops
            .into_iter()
            .filter(|op| !matches!(op, Op::EachDeadline)),
    )
}

/// Ticks `svc` at each of its deadlines before `now`, earliest first (docs/SPEC.md §8, item 2:
/// the host ticks at each `poll_timeout()`), so that what falls due between two entries
/// happens in time order — a timed waiter whose turn comes before its deadline is granted,
/// not timed out at the later time with the grant going to the next. Returns their events.
/// Cost: one tick per distinct deadline before `now`.
fn tick_each_deadline(
    svc: &mut LockService<VecStorage>,
    now: Tick,
    trace: &mut Trace<'_>,
) -> Vec<Output> {
    let mut all = Vec::new();
    // Each tick does everything due at its time, so the next deadline is later: the loop
    // ends (and stops at any deadline not after the service's time, which a tick cannot
    // take).
    while let Some(at) = svc.poll_timeout().filter(|&d| d < now && d > svc.now()) {
        let mut events = Vec::new();
        let r = svc.tick(at, &mut events);
        if let Some(t) = trace {
            t.push(CoreCall {
                input: Input::Tick { now: at },
                reply: r.map(|()| Reply::Ticked { now: at }),
                events: events.clone(),
                advance: true,
            });
        }
        all.extend(events);
    }
    all
}

/// Advances `g` to the time of an op carrying `carried` in an entry stamped `stamp` (as
/// the core's own advance before an input would), forgetting the keys and secrets of the
/// sessions that expire; returns the time and the advance's events. Cannot fail: the time
/// is not before the service's and a `Vec` has room.
fn advance(
    g: &mut SmState,
    stamp: Stamp,
    carried: Tick,
    trace: &mut Trace<'_>,
) -> (Tick, Vec<Output>) {
    let now = op_time(&g.svc, stamp.now, carried);
    let mut stepped = match stamp.each_deadline {
        true => tick_each_deadline(&mut g.svc, now, trace),
        false => Vec::new(),
    };
    let mut events = Vec::new();
    let r = g.svc.tick(now, &mut events);
    if let Some(t) = trace {
        t.push(CoreCall {
            input: Input::Tick { now },
            reply: r.map(|()| Reply::Ticked { now }),
            events: events.clone(),
            advance: true,
        });
    }
    stepped.extend(events);
    g.open_keys.forget_expired(&stepped);
    g.owners.forget_expired(&stepped);
    (now, stepped)
}

/// The page of the open sessions that [`crate::protocol::Request::Sessions`] asks for:
/// the sessions with ids above `after` that `owner` opened (every one when `None`), in id
/// order, at most `limit` of them (0 or more than [`SESSIONS_PAGE`]: that many), looking at
/// no more than [`SESSIONS_SCAN`] sessions. `next` names the last session looked at when
/// more follow it. Cost: O(log n) plus, per session looked at, O(log n) and, per session
/// listed, O(its claims).
pub(crate) fn sessions_page(
    g: &SmState,
    after: u64,
    owner: Option<Principal>,
    limit: u32,
) -> SessionsPage {
    let limit = match limit {
        0 => SESSIONS_PAGE,
        n => n.min(SESSIONS_PAGE),
    } as usize;
    let mut sessions = Vec::new();
    let mut looked = 0;
    let mut last = None;
    let mut rest = g.owners.after(SessionId(after)).peekable();
    while let Some((session, opener)) = rest.next_if(|_| looked < SESSIONS_SCAN) {
        looked += 1;
        last = Some(session.0);
        if owner.is_some_and(|o| o != opener) {
            continue;
        }
        // Every session with a recorded secret is open (secrets are forgotten at a close
        // or expiry, and a snapshot's are kept only for its open sessions).
        if let Some(info) = g.svc.session(session) {
            sessions.push(ListedSession {
                info,
                owner: opener,
            });
        }
        if sessions.len() == limit {
            break;
        }
    }
    let next = rest.peek().and(last);
    SessionsPage { sessions, next }
}

/// After a close of `session` (its owner's or an administrator's) answered `result`: once
/// closed, its open key and its credential are forgotten. Cost: O(log n).
fn forget_closed(g: &mut SmState, session: SessionId, result: &CmdResult) {
    if matches!(result.reply, Ok(Reply::Closed)) {
        g.open_keys.forget(session);
        g.owners.forget(session);
    }
}

fn refused(g: &SmState, e: OpError, index: u64) -> CmdResult {
    CmdResult {
        reply: Err(e),
        now: g.svc.now().0,
        index,
        secret: None,
    }
}

/// Applies one op of an entry stamped `stamp`; returns the events to push and the
/// proposer's result.
fn apply_op(
    g: &mut SmState,
    stamp: Stamp,
    op: Op,
    index: u64,
    trace: &mut Trace<'_>,
) -> (Vec<Output>, CmdResult) {
    let (events, result) = match op {
        // Not a request: every loop over an entry's ops skips it (`requests`), so nothing
        // reaches this arm; were it reached, it changes nothing and answers the time.
        Op::EachDeadline => {
            let now = g.svc.now();
            let result = CmdResult {
                reply: Ok(Reply::Ticked { now }),
                now: now.0,
                index,
                secret: None,
            };
            (Vec::new(), result)
        }
        Op::Input(input) => {
            if !matches!(input, Input::Tick { .. }) {
                // Only the leader's tick travels without a credential.
                let (_, events) = advance(g, stamp, input.now(), trace);
                let r = refused(g, OpError::NeedsCredential, index);
                return (events, r);
            }
            apply_cmd(&mut g.svc, stamp, input, index, trace)
        }
        Op::Owned { input, secret } => {
            let Some(session) = input.session() else {
                let (_, events) = advance(g, stamp, input.now(), trace);
                let r = refused(g, OpError::NeedsCredential, index);
                return (events, r);
            };
            // Advance first: a session that expires at this time is unknown to the core,
            // whatever the credential (the core's own first answer).
            let (_, mut events) = advance(g, stamp, input.now(), trace);
            if g.svc.is_open(session) && !g.owners.is_owner(session, &secret) {
                let r = refused(g, OpError::NotOwner { session: session.0 }, index);
                return (events, r);
            }
            let closing = matches!(input, Input::CloseSession { .. });
            let (more, result) = apply_cmd(&mut g.svc, stamp, input, index, trace);
            events.extend(more);
            if closing {
                forget_closed(g, session, &result);
            }
            (events, result)
        }
        Op::ForceRelease { session, lock } => {
            let input = Input::Release {
                now: Tick(0),
                session,
                lock: lock.clone(),
                request: None,
            };
            forced_release(g, stamp, (input, session, lock), index, trace)
        }
        Op::ForceReleaseHold {
            session,
            lock,
            token,
        } => {
            // The core's release of the hold of this token: a hold of another token (the
            // session took the lock again after an earlier forced release) is refused
            // `not_holder` and stays.
            let input = Input::ReleaseHold {
                now: Tick(0),
                session,
                lock: lock.clone(),
                token,
                request: None,
            };
            forced_release(g, stamp, (input, session, lock), index, trace)
        }
        Op::ForceClose { session } => {
            let input = Input::CloseSession {
                now: Tick(0),
                session,
                request: None,
            };
            // The owner is also pushed `SessionExpired` (by the apply loop: a push, not an
            // event of the core, so neither recorded nor counted as an expiry).
            let (events, result) = apply_cmd(&mut g.svc, stamp, input, index, trace);
            forget_closed(g, session, &result);
            (events, result)
        }
        // Opens of earlier versions recorded no principal: their keys are scoped to
        // `Unrecorded`, which no open of this version presents.
        Op::Open { ttl, key, secret } => {
            let open = OpenArgs {
                ttl,
                key,
                secret,
                label: None,
                principal: Principal::Unrecorded,
                counted: false,
            };
            open_op(g, stamp, open, index, trace)
        }
        Op::OpenLabeled {
            ttl,
            key,
            secret,
            label,
        } => {
            let open = OpenArgs {
                ttl,
                key,
                secret,
                label: Some(label),
                principal: Principal::Unrecorded,
                counted: false,
            };
            open_op(g, stamp, open, index, trace)
        }
        Op::OpenAs {
            ttl,
            key,
            secret,
            label,
            principal,
        } => {
            let open = OpenArgs {
                ttl,
                key,
                secret,
                label,
                principal,
                counted: false,
            };
            open_op(g, stamp, open, index, trace)
        }
        Op::OpenCounted {
            ttl,
            key,
            secret,
            label,
            principal,
        } => {
            let open = OpenArgs {
                ttl,
                key,
                secret,
                label,
                principal,
                counted: true,
            };
            open_op(g, stamp, open, index, trace)
        }
    };
    g.open_keys.forget_expired(&events);
    g.owners.forget_expired(&events);
    (events, result)
}

/// What an open op carries ([`Op::OpenCounted`], [`Op::OpenAs`]; [`Op::Open`],
/// [`Op::OpenLabeled`] as from [`Principal::Unrecorded`], `label` `None` for the former).
struct OpenArgs {
    ttl: u64,
    key: Option<OpenKey>,
    secret: SessionSecret,
    label: Option<Label>,
    principal: Principal,
    /// Whether the session is recorded as `principal`'s ([`Op::OpenCounted`] only).
    counted: bool,
}

/// Applies an open (`label` `None`: the core's `OpenSession`, otherwise its
/// `OpenLabeled`); returns the events and the result. A key already used by the same
/// principal for a session still open answers with that session and its credential;
/// anything else (no key, a new key, a key only another principal used) opens a session.
fn open_op(
    g: &mut SmState,
    stamp: Stamp,
    open: OpenArgs,
    index: u64,
    trace: &mut Trace<'_>,
) -> (Vec<Output>, CmdResult) {
    let OpenArgs {
        ttl,
        key,
        secret,
        label,
        principal,
        counted,
    } = open;
    // Advance first, so that a key whose session expires at `now` is free.
    let (now, mut events) = advance(g, stamp, Tick(0), trace);
    let open = key
        .and_then(|k| g.open_keys.get(principal, k))
        .and_then(|s| g.svc.session(s).map(|info| (s, info)));
    match open {
        // A retry by the same principal: answer with the session this key opened, and
        // its secret.
        Some((session, info)) => (
            events,
            CmdResult {
                reply: Ok(Reply::Opened {
                    session,
                    expires_at: info.expires_at,
                }),
                now: g.svc.now().0,
                index,
                secret: g.owners.get(session),
            },
        ),
        None => {
            let input = match label {
                None => Input::OpenSession { now, ttl },
                Some(label) => Input::OpenLabeled { now, ttl, label },
            };
            let (more, mut result) = apply_cmd(&mut g.svc, Stamp::REACHED, input, index, trace);
            events.extend(more);
            if let Ok(Reply::Opened { session, .. }) = result.reply {
                if let Some(key) = key {
                    g.open_keys.insert(principal, key, session);
                }
                let owner = if counted {
                    principal
                } else {
                    Principal::Unrecorded
                };
                g.owners.insert(session, secret, owner);
                result.secret = Some(secret);
            }
            (events, result)
        }
    }
}

/// Applies one core input of an entry stamped `stamp` to `svc`, at the op's time
/// ([`op_time`]); returns its events (to push to the sessions they name) and the
/// proposer's result (the core's reply or refusal).
pub(crate) fn apply_cmd(
    svc: &mut LockService<VecStorage>,
    stamp: Stamp,
    input: Input,
    index: u64,
    trace: &mut Trace<'_>,
) -> (Vec<Output>, CmdResult) {
    let carried = input.now();
    let now = op_time(svc, stamp.now, carried);
    let mut stepped = match stamp.each_deadline {
        true => tick_each_deadline(svc, now, trace),
        false => Vec::new(),
    };
    let input = input.at(now);
    let mut events = Vec::new();
    let recorded = trace.is_some().then(|| input.clone());
    let reply = svc.handle(input, &mut events);
    if let (Some(t), Some(input)) = (trace, recorded) {
        t.push(CoreCall {
            input,
            reply,
            events: events.clone(),
            advance: false,
        });
    }
    stepped.extend(events);
    let reply = reply.map_err(|e| OpError::Core(CoreError::from(e)));
    let result = CmdResult {
        reply,
        now: svc.now().0,
        index,
        secret: None,
    };
    (stepped, result)
}

/// An administrator's release of `session`'s hold on `lock` (`input`: the core's `Release`
/// or `ReleaseHold` of it, without a credential): the core's answer, and for a release the
/// `Released` event pushed to the holder, whose own releases are answered, never pushed.
fn forced_release(
    g: &mut SmState,
    stamp: Stamp,
    (input, session, lock): (Input, SessionId, LockName),
    index: u64,
    trace: &mut Trace<'_>,
) -> (Vec<Output>, CmdResult) {
    let (mut events, result) = apply_cmd(&mut g.svc, stamp, input, index, trace);
    if let Ok(Reply::Released { token }) = result.reply {
        events.push(Output::Released {
            session,
            lock,
            token,
            reason: ReleaseReason::Released,
        });
    }
    (events, result)
}

/// One call of the core made while applying an entry, as [`crate::export`] records it:
/// the input as the core got it (with its time), its answer and its events.
#[derive(Clone, Debug)]
pub(crate) struct CoreCall {
    /// The input, stamped with the time it was applied at.
    pub input: Input,
    /// The core's reply or refusal.
    pub reply: Result<Reply, fencelock::Error>,
    /// The events, in order.
    pub events: Vec<Output>,
    /// True for the advance to an op's time that the state machine makes before it looks
    /// at the op (a `Tick` at that time).
    pub advance: bool,
}

/// Where the core calls of an apply go: nowhere (`None`, the node's own apply) or a list
/// ([`crate::export`]).
pub(crate) type Trace<'a> = Option<&'a mut Vec<CoreCall>>;

/// The time op `op` of an entry stamped `stamp` will be applied at, given the state now
/// (the latest of the stamp, the time the op carries and the service's). Cost: O(1).
pub(crate) fn time_of(g: &SmState, stamp: Stamp, op: &Op) -> u64 {
    let carried = match op {
        Op::Input(i) | Op::Owned { input: i, .. } => i.now(),
        _ => Tick(0),
    };
    op_time(&g.svc, stamp.now, carried).0
}

/// Applies one op of a committed entry to a copy of the state, exactly as the node's apply
/// does (same function, same order), minus pushes and metrics; the core calls go to
/// `trace`. Used to re-run the log for an export. Cost: as the node's apply of the op.
pub(crate) fn replay_op(g: &mut SmState, stamp: Stamp, op: Op, index: u64, trace: &mut Trace<'_>) {
    let _ = apply_op(g, stamp, op, index, trace);
}

/// Applies a blank or membership entry to a copy of the state, as the node's apply does
/// (normal entries go op by op through [`replay_op`]). Cost: O(membership size).
pub(crate) fn replay_meta(g: &mut SmState, entry: &Entry) {
    g.last_applied = Some(entry.log_id);
    if let EntryPayload::Membership(m) = &entry.payload {
        g.membership = StoredMembership::new(Some(entry.log_id), m.clone());
    }
}

/// Applies the ops of the committed normal entry `cmd` at `log_id` to a copy of the state,
/// as the node's apply does ([`replay_op`] op by op); returns their results, in order
/// (none for [`Op::EachDeadline`]). Cost: as the node's apply.
pub(crate) fn replay_cmd(g: &mut SmState, log_id: LogId, cmd: Cmd) -> Vec<CmdResult> {
    g.last_applied = Some(log_id);
    let (stamp, ops) = requests(cmd);
    ops.map(|op| apply_op(g, stamp, op, log_id.index, &mut None).1)
        .collect()
}

/// Applies committed `entries` to a copy of the state, in order, as the node's apply does
/// ([`replay_op`] op by op, [`replay_meta`] for the rest). Cost: as the node's apply.
pub(crate) fn replay_entries(g: &mut SmState, entries: impl IntoIterator<Item = Entry>) {
    for entry in entries {
        match entry.payload {
            EntryPayload::Normal(cmd) => {
                replay_cmd(g, entry.log_id, cmd);
            }
            _ => replay_meta(g, &entry),
        }
    }
}

/// The state `dir/snapshot.bin` holds (checked as at start), or `None` when there is none.
///
/// Errors: I/O errors and a corrupt snapshot (`InvalidData`), naming the path.
/// Cost: O(snapshot size).
pub(crate) fn read_snapshot_state(
    dir: &Path,
    config: &ServiceConfig,
) -> io::Result<Option<SmState>> {
    Ok(read_snap_file(&dir.join("snapshot.bin"), config)?.map(|(_, s)| s))
}

/// An empty state for `config` (a log that holds every entry from the first).
pub(crate) fn empty_state(config: &ServiceConfig) -> SmState {
    SmState {
        svc: config.fresh(),
        last_applied: None,
        membership: StoredMembership::default(),
        open_keys: OpenKeys::default(),
        owners: Owners::default(),
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (data, last_applied, membership) = {
            let g = self.shared.state();
            let d = SnapData::of(&g);
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
        let f = self
            .persist_retrying(f)
            .await
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
            let proposer = Some(entry.log_id.leader_id.node_id);
            g.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => results.push(BatchResult::default()),
                EntryPayload::Normal(cmd) => {
                    let mut batch = Vec::with_capacity(cmd.ops.len());
                    let (stamp, ops) = requests(cmd);
                    for op in ops {
                        // Only the first op can advance time: the rest find it reached.
                        let closed = match &op {
                            Op::Owned {
                                input: Input::CloseSession { session, .. },
                                ..
                            }
                            | Op::ForceClose { session } => Some(*session),
                            _ => None,
                        };
                        // (session, lock, is an acquire) for the wait-time histogram.
                        // A session's inputs arrive owned (with its credential).
                        let input = match &op {
                            Op::Input(i) | Op::Owned { input: i, .. } => Some(i),
                            _ => None,
                        };
                        let watched = match input {
                            Some(Input::Acquire { session, lock, .. }) => {
                                Some((session.0, lock.clone(), true))
                            }
                            Some(Input::Cancel { session, lock, .. }) => {
                                Some((session.0, lock.clone(), false))
                            }
                            Some(Input::CloseSession { session, .. }) => {
                                Some((session.0, LockName::default(), false))
                            }
                            _ => closed.map(|s| (s.0, LockName::default(), false)),
                        };
                        let forced = matches!(op, Op::ForceClose { .. });
                        let (events, result) = apply_op(&mut g, stamp, op, index, &mut None);
                        self.shared.stats.record(
                            &watched,
                            &result,
                            &events,
                            self.shared.config.claims,
                        );
                        self.shared.hub.record(index, &events);
                        for o in &events {
                            self.shared.hub.push_of(index, o, proposer);
                        }
                        if let (Some(s), Ok(Reply::Closed)) = (closed, &result.reply) {
                            if forced {
                                // An administrator's close: the owner did not ask. It is
                                // told as the service tells a session that ended without
                                // its asking (no deadline passed; the core's events above
                                // released its holds with reason `Closed`). Not an event of
                                // the core: pushed only, not counted as an expiry.
                                let gone = Output::SessionExpired { session: s };
                                self.shared.hub.push_of(index, &gone, proposer);
                            }
                            self.shared.hub.forget(s);
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
            disk: self.disk.clone(),
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
        let installed = self.install_checked(meta, snapshot.into_inner()).await;
        // openraft queued the purge this install would cover: on a failure it must not
        // wait for it.
        let failed = installed.is_err();
        self.shared
            .persisted_tx
            .send_if_modified(|p| std::mem::replace(&mut p.install_failed, failed) != failed);
        installed
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        // The builder (a clone) may have persisted a newer one: the file is the truth.
        // A file that fails its checks, or is over the cap, is ignored here (the one in
        // memory stays).
        // Its data is not decoded here (the peer that installs it decodes it): a file
        // read on every call must not cost a decode of the whole state each time.
        // Read and checked on a blocking thread: the file is as large as the state.
        let cap = max_snapshot_file_bytes(&self.shared.config);
        let path = self.dir.join("snapshot.bin");
        let read = tokio::task::spawn_blocking(move || {
            let bytes = crate::disk::read_capped(&path, cap).ok()?;
            open_snap_file(&bytes).ok().map(|(f, _)| f)
        });
        if let Ok(Some(f)) = read.await {
            self.current = Some(f);
        }
        Ok(self.current.as_ref().map(|f| Snapshot {
            meta: f.meta.clone(),
            snapshot: Box::new(Cursor::new(f.data.clone())),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencelock::{Mode, Wait};

    fn sample() -> (SnapFile, ServiceConfig) {
        let config = ServiceConfig {
            sessions: 8,
            locks: 8,
            claims: 8,
            core: Config::default(),
        };
        let mut svc = config.fresh();
        let mut out = Vec::new();
        let s = svc
            .open_session(Tick(1), 10_000, &mut out)
            .unwrap()
            .opened()
            .unwrap();
        svc.acquire(
            Tick(2),
            s,
            "jobs/x",
            Mode::Exclusive,
            Wait::None,
            Some(1),
            &mut out,
        )
        .unwrap();
        let s2 = svc
            .open_session(Tick(3), 10_000, &mut out)
            .unwrap()
            .opened()
            .unwrap();
        let last = Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 7));
        let d = SnapData {
            last_applied: last,
            membership: StoredMembership::default(),
            core: svc.snapshot_vec(),
            open_keys: vec![(42, s.0)],
            owners: vec![
                (s.0, SessionSecret([1; 16])),
                (s2.0, SessionSecret([2; 16])),
            ],
            scoped_keys: vec![(Principal::token("ci"), 43, s2.0)],
            principals: vec![(s2.0, Principal::token("ci"))],
        };
        let f = SnapFile {
            meta: SnapshotMeta {
                last_log_id: last,
                last_membership: StoredMembership::default(),
                snapshot_id: "t".into(),
            },
            data: postcard::to_allocvec(&d).unwrap(),
        };
        (f, config)
    }

    /// The members of a restored cluster of one node.
    fn one_member() -> BTreeMap<u64, crate::types::NodeAddr> {
        [(1, crate::types::NodeAddr::default())]
            .into_iter()
            .collect()
    }

    /// A snapshot's data holds the membership too: one that names a voter without
    /// addresses (which would stop Raft on the node that installs it) is refused as the
    /// data decodes, and a good one restores as it was.
    #[test]
    fn a_snapshots_membership_is_checked_as_its_data_decodes() {
        use std::collections::{BTreeMap, BTreeSet};
        #[derive(Serialize)]
        struct Raw {
            configs: Vec<BTreeSet<u64>>,
            nodes: BTreeMap<u64, crate::types::NodeAddr>,
        }
        let (f, config) = sample();
        let mut d = SnapData::decode(&f.data).unwrap();
        let addr = crate::types::NodeAddr {
            raft: "127.0.0.1:7001".into(),
            client: "127.0.0.1:8001".into(),
        };
        let voters: BTreeSet<u64> = [1].into_iter().collect();
        let nodes: BTreeMap<u64, _> = [(1, addr.clone())].into_iter().collect();
        let log = Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 3));
        d.membership = StoredMembership::new(
            log,
            openraft::Membership::new(vec![voters.clone()], nodes.clone()),
        );
        let data = postcard::to_allocvec(&d).unwrap();
        let (_, _, m) = decode_snapshot(&config, &data).unwrap();
        assert_eq!(m, d.membership);
        let good = postcard::to_allocvec(&Raw {
            configs: vec![voters],
            nodes: nodes.clone(),
        })
        .unwrap();
        let bad = postcard::to_allocvec(&Raw {
            configs: vec![[1, 9].into_iter().collect()],
            nodes,
        })
        .unwrap();
        let at = data
            .windows(good.len())
            .position(|w| w == good.as_slice())
            .unwrap();
        let mut spliced = data[..at].to_vec();
        spliced.extend(&bad);
        spliced.extend(&data[at + good.len()..]);
        // (postcard keeps no message of a decoder's own error: the refusal is the check.)
        assert!(
            decode_snapshot(&config, &spliced).is_err(),
            "a voter without addresses decoded"
        );
    }

    /// The state after `entries` (index 1 on), from an empty state of small tables, and
    /// the results of the last entry.
    fn after(entries: Vec<Cmd>) -> (SmState, Vec<CmdResult>) {
        let config = ServiceConfig {
            sessions: 8,
            locks: 8,
            claims: 8,
            core: Config::default(),
        };
        let mut g = empty_state(&config);
        let mut last = Vec::new();
        for (i, cmd) in entries.into_iter().enumerate() {
            let (stamp, ops) = requests(cmd);
            last = ops
                .map(|op| apply_op(&mut g, stamp, op, i as u64 + 1, &mut None).1)
                .collect();
        }
        (g, last)
    }

    /// A page of the sessions lists ids above its `after` in id order, each with its opener,
    /// at most its limit (0 and anything past the page size: the page size), and looks at no
    /// more than the scan bound: an owner whose sessions all come after that many others'
    /// gets an empty page that says where to go on, then its sessions.
    #[test]
    fn a_page_of_sessions_keeps_its_limit_and_its_scan_bound() {
        let (a, b) = (Principal::token("a"), Principal::token("b"));
        let n = SESSIONS_SCAN as u64 + 2;
        let config = ServiceConfig {
            sessions: n as usize,
            locks: 1,
            claims: 1,
            core: Config::default(),
        };
        let mut g = empty_state(&config);
        for i in 1..=n {
            let op = Op::OpenCounted {
                ttl: 60_000,
                key: None,
                secret: SessionSecret([i as u8; 16]),
                label: None,
                // The last two are b's, after SESSIONS_SCAN of a's.
                principal: if i <= SESSIONS_SCAN as u64 { a } else { b },
            };
            let stamp = Stamp {
                now: Some(0),
                each_deadline: false,
            };
            let (_, r) = apply_op(&mut g, stamp, op, i, &mut None);
            assert!(r.reply.is_ok(), "{r:?}");
        }
        let ids =
            |p: &SessionsPage| -> Vec<u64> { p.sessions.iter().map(|s| s.info.id.0).collect() };
        // The page size, whatever the limit past it.
        for limit in [0, SESSIONS_PAGE, SESSIONS_PAGE + 1, u32::MAX] {
            let p = sessions_page(&g, 0, None, limit);
            assert_eq!(ids(&p), (1..=SESSIONS_PAGE as u64).collect::<Vec<_>>());
            assert_eq!(p.next, Some(SESSIONS_PAGE as u64));
        }
        let p = sessions_page(&g, 5, Some(a), 2);
        assert_eq!((ids(&p), p.next), (vec![6, 7], Some(7)));
        assert!(p.sessions.iter().all(|s| s.owner == a));
        // b's: none among the first SESSIONS_SCAN looked at; then both, and the end.
        let p = sessions_page(&g, 0, Some(b), 0);
        assert_eq!((ids(&p), p.next), (vec![], Some(SESSIONS_SCAN as u64)));
        let p = sessions_page(&g, SESSIONS_SCAN as u64, Some(b), 0);
        assert_eq!((ids(&p), p.next), (vec![n - 1, n], None));
        assert!(p.sessions.iter().all(|s| s.owner == b));
        // The last page of all, and one past the end.
        let p = sessions_page(&g, n - 1, None, 0);
        assert_eq!((ids(&p), p.next), (vec![n], None));
        let p = sessions_page(&g, n, None, 0);
        assert_eq!((ids(&p), p.next), (vec![], None));
        // A closed session is not listed (its secret is forgotten at the close).
        let close = Op::Owned {
            input: Input::CloseSession {
                now: crate::types::STAMPED_AT_APPLY,
                session: SessionId(n),
                request: None,
            },
            secret: SessionSecret([n as u8; 16]),
        };
        let stamp = Stamp {
            now: Some(1),
            each_deadline: false,
        };
        let (_, r) = apply_op(&mut g, stamp, close, n + 1, &mut None);
        assert_eq!(r.reply, Ok(Reply::Closed));
        let p = sessions_page(&g, n - 2, None, 0);
        assert_eq!((ids(&p), p.next), (vec![n - 1], None));
    }

    /// The list of sessions names each session's opener as its open entry recorded it: an
    /// `OpenCounted`'s principal; `Unrecorded` for the opens of earlier builds (`Open`,
    /// `OpenLabeled`, and `OpenAs`, whose principal is not kept); an expired session is
    /// gone from it; and a restored state lists the same.
    #[test]
    fn the_sessions_listed_are_the_open_ones_each_with_its_recorded_opener() {
        let a = Principal::token("a");
        let secret = SessionSecret([5; 16]);
        let open_as = |principal| Op::OpenAs {
            ttl: 60_000,
            key: None,
            secret,
            label: None,
            principal,
        };
        let counted = |ttl, principal| Op::OpenCounted {
            ttl,
            key: None,
            secret,
            label: None,
            principal,
        };
        let old = Op::OpenLabeled {
            ttl: 60_000,
            key: None,
            secret,
            label: Label::new("old").unwrap(),
        };
        let (g, _) = after(vec![
            Cmd {
                now: Some(0),
                ops: vec![
                    Op::Open {
                        ttl: 60_000,
                        key: None,
                        secret,
                    },
                    old,
                    open_as(a),
                    counted(60_000, a),
                    counted(10, Principal::Anyone),
                    counted(60_000, Principal::Anyone),
                ],
            },
            // Past session 5's ttl: it expires.
            Cmd {
                now: Some(100),
                ops: vec![Op::Input(Input::Tick { now: Tick(100) })],
            },
        ]);
        let listed = |g: &SmState| -> Vec<(u64, Principal, String)> {
            let p = sessions_page(g, 0, None, 0);
            assert_eq!(p.next, None);
            p.sessions
                .iter()
                .map(|s| (s.info.id.0, s.owner, s.info.label.as_str().to_string()))
                .collect()
        };
        let u = Principal::Unrecorded;
        let want = vec![
            (1, u, String::new()),
            (2, u, "old".to_string()),
            (3, u, String::new()),
            (4, a, String::new()),
            (6, Principal::Anyone, String::new()),
        ];
        assert_eq!(listed(&g), want);
        let ids =
            |p: SessionsPage| -> Vec<u64> { p.sessions.iter().map(|s| s.info.id.0).collect() };
        assert_eq!(ids(sessions_page(&g, 0, Some(u), 0)), vec![1, 2, 3]);
        assert_eq!(ids(sessions_page(&g, 0, Some(a), 0)), vec![4]);
        // Through a snapshot: the same list.
        let data = postcard::to_allocvec(&SnapData::of(&g)).unwrap();
        let config = ServiceConfig {
            sessions: 8,
            locks: 8,
            claims: 8,
            core: Config::default(),
        };
        let (restored, _, _) = decode_snapshot(&config, &data).unwrap();
        assert_eq!(listed(&restored), want);
    }

    /// H holds L and expires at 10 000; W1 waits for L until 10 005, W2 for ever behind it;
    /// the next entry comes at 10 015 (the leader's tick). `cmd` makes each entry.
    fn deadlines_between_entries(cmd: fn(Option<u64>, Vec<Op>) -> Cmd) -> SmState {
        let (h, w1, w2) = (
            SessionSecret([1; 16]),
            SessionSecret([2; 16]),
            SessionSecret([3; 16]),
        );
        let open = |ttl, secret| Op::OpenCounted {
            ttl,
            key: None,
            secret,
            label: None,
            principal: Principal::Anyone,
        };
        let acquire = |s: u64, secret, wait| Op::Owned {
            input: Input::Acquire {
                now: crate::types::STAMPED_AT_APPLY,
                session: SessionId(s),
                lock: LockName::new("L").unwrap(),
                mode: Mode::Exclusive,
                wait,
                request: None,
            },
            secret,
        };
        let (g, results) = after(vec![
            cmd(
                Some(0),
                vec![open(10_000, h), open(60_000, w1), open(60_000, w2)],
            ),
            cmd(
                Some(1),
                vec![
                    acquire(1, h, Wait::None),
                    acquire(2, w1, Wait::Until(Tick(10_005))),
                    acquire(3, w2, Wait::Forever),
                ],
            ),
            cmd(
                Some(10_015),
                vec![Op::Input(Input::Tick { now: Tick(10_015) })],
            ),
        ]);
        assert_eq!(
            results.len(),
            1,
            "one result per request, none for the marker"
        );
        assert_eq!(results[0].reply, Ok(Reply::Ticked { now: Tick(10_015) }));
        g
    }

    /// The holder of L, if any.
    fn holder(g: &SmState) -> Option<SessionId> {
        g.svc.holders("L").next().map(|h| h.session)
    }

    /// An entry of this version ticks at each deadline on the way to its time: H expires
    /// at 10 000 and L goes to W1, whose wait had 5 ms to run — as on a host that ticks at
    /// each `poll_timeout()` (docs/SPEC.md §8, item 2).
    #[test]
    fn an_entry_ticks_at_each_deadline_before_its_time() {
        let g = deadlines_between_entries(Cmd::new);
        assert_eq!(holder(&g), Some(SessionId(2)), "W1 was granted at 10 000");
        assert_eq!(g.svc.waiters("L").count(), 1, "W2 still waits");
    }

    /// An entry of an earlier build (no `EachDeadline`) is applied as that build applied
    /// it, in one step to its time: H's expiry and W1's timeout both at 10 015, and L to W2
    /// (what every replica of such a log answered, and must still).
    #[test]
    fn an_entry_of_an_earlier_build_advances_in_one_step_as_it_did() {
        let g = deadlines_between_entries(|now, ops| Cmd { now, ops });
        assert_eq!(holder(&g), Some(SessionId(3)), "W1 timed out, W2 granted");
        assert_eq!(g.svc.waiters("L").count(), 0);
    }

    /// A snapshot whose open key and credential name a session the core has not opened
    /// (here the id it hands out next: damaged, or forged and checksummed) restores
    /// without them: a keyless open then takes that id, and an open presenting the stale
    /// key opens a session of its own — it is not answered with the other's session and
    /// credential — and the state's next backup passes its checks.
    #[test]
    fn keys_and_credentials_of_sessions_not_open_are_dropped_at_restore() {
        let (f, config) = sample();
        let mut d = SnapData::decode(&f.data).unwrap();
        d.open_keys.push((99, 3));
        d.owners.push((3, SessionSecret([9; 16])));
        // Session 2 is open, its key (43, `ci`'s) kept but its credential gone.
        d.owners.retain(|(s, _)| *s != 2);
        d.principals.clear();
        let data = postcard::to_allocvec(&d).unwrap();
        let (mut g, _, _) = decode_snapshot(&config, &data).unwrap();
        assert_eq!(g.open_keys.get(Principal::Unrecorded, OpenKey(99)), None);
        assert_eq!(g.owners.get(SessionId(3)), None);
        assert_eq!(
            g.open_keys.get(Principal::token("ci"), OpenKey(43)),
            None,
            "a key whose session has no credential"
        );
        assert_eq!(
            g.open_keys.get(Principal::Unrecorded, OpenKey(42)),
            Some(SessionId(1))
        );
        let open = |key| Op::Open {
            ttl: 10_000,
            key,
            secret: SessionSecret([7; 16]),
        };
        let at = Stamp {
            now: Some(4),
            each_deadline: true,
        };
        let opened = |r: CmdResult| match r.reply {
            Ok(Reply::Opened { session, .. }) => session,
            other => panic!("{other:?}"),
        };
        let third = opened(apply_op(&mut g, at, open(None), 8, &mut None).1);
        assert_eq!(third, SessionId(3), "the id the stale entries named");
        let fourth = opened(apply_op(&mut g, at, open(Some(OpenKey(99))), 9, &mut None).1);
        assert_eq!(
            fourth,
            SessionId(4),
            "the stale key answered another's session"
        );
        g.last_applied = Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 9));
        let (backup, _) = backup_of(&g).unwrap();
        check_backup(&backup).unwrap();
    }

    /// A snapshot whose last applied or membership log id is at or past 2^62 is refused
    /// (no log id past the bound is taken from a peer or a log either), as is a backup.
    #[test]
    fn a_snapshot_with_a_log_id_past_the_bound_is_refused() {
        let (f, config) = sample();
        let far = LogId::new(openraft::CommittedLeaderId::new(1, 1), 1 << 62);
        let mut d = SnapData::decode(&f.data).unwrap();
        d.last_applied = Some(far);
        let data = postcard::to_allocvec(&d).unwrap();
        let e = decode_snapshot(&config, &data).err().expect("refused");
        assert!(e.to_string().contains("not below 2^62"), "{e}");
        let file = encode_snap_file(&SnapFile {
            meta: SnapshotMeta::default(),
            data,
        })
        .unwrap();
        let e = check_backup(&file).unwrap_err();
        assert!(e.contains("not below 2^62"), "{e}");
        let mut d = SnapData::decode(&f.data).unwrap();
        d.membership = StoredMembership::new(Some(far), d.membership.membership().clone());
        let data = postcard::to_allocvec(&d).unwrap();
        assert!(decode_snapshot(&config, &data).is_err());
    }

    /// Every service a node serves from hashes lock names under a key of its own: a
    /// fresh one, one restored from a snapshot file at start, and one installed from a
    /// peer's snapshot (the same decode).
    #[test]
    fn every_served_service_has_a_name_key() {
        let (f, config) = sample();
        assert!(config.fresh().is_name_keyed());
        let (g, _, _) = decode_snapshot(&config, &f.data).unwrap();
        assert!(g.svc.is_name_keyed());
        assert!(!LockService::new(config.storage(), config.core)
            .unwrap()
            .is_name_keyed());
    }

    /// A snapshot file longer than a snapshot of the node's tables can be is refused by
    /// its size before it is read (a start is refused, the file left as it is); one at
    /// the cap is read (and here judged corrupt, as it is zeros).
    #[test]
    fn a_snapshot_file_over_the_tables_cap_is_refused() {
        let (_, config) = sample();
        let cap = max_snapshot_file_bytes(&config);
        let dir = std::env::temp_dir().join(format!("fencelock-snapcap-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.bin");
        // Sparse: only its size is set.
        fs::File::create(&path).unwrap().set_len(cap + 1).unwrap();
        let e = StateMachine::open(&dir, config).err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert!(
            e.to_string().contains(&format!("limit of {cap} bytes")),
            "{e}"
        );
        assert_eq!(fs::metadata(&path).unwrap().len(), cap + 1, "left as it is");
        fs::File::create(&path).unwrap().set_len(cap).unwrap();
        let e = StateMachine::open(&dir, config).err().expect("refused");
        assert_eq!(
            e.kind(),
            io::ErrorKind::InvalidData,
            "read and checked: {e}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Every single flipped bit of a snapshot file, anywhere (header, length, checksum,
    /// payload), makes it corrupt: it is refused with the path named, never restored.
    #[test]
    fn every_flipped_bit_of_a_snapshot_file_is_refused() {
        let (f, config) = sample();
        let bytes = encode_snap_file(&f).unwrap();
        let dir = std::env::temp_dir().join(format!("fencelock-snapflip-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.bin");
        fs::write(&path, &bytes).unwrap();
        let (g, _) = read_snap_file(&path, &config)
            .unwrap()
            .expect("a good file reads");
        assert_eq!(g.meta.last_log_id, f.meta.last_log_id);
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(
                    decode_snap_file(&b).is_err(),
                    "byte {i} bit {bit} went unnoticed"
                );
            }
        }
        let mut b = bytes.clone();
        b[bytes.len() / 2] ^= 0x20;
        fs::write(&path, &b).unwrap();
        let e = read_snap_file(&path, &config).err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        // Truncated, extended, empty: refused too.
        for b in [
            &bytes[..bytes.len() - 1],
            &[][..],
            &[bytes.clone(), vec![0]].concat()[..],
        ] {
            assert!(decode_snap_file(b).is_err());
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Open keys keep their principal through a snapshot file: the key `ci` used is
    /// `ci`'s only, a version-1 key stays `Unrecorded`'s. A version-1 file (earlier
    /// builds: its magic, keys without principals) still reads, every key
    /// `Unrecorded`'s, as does a version-2 file (no session's principal); this build writes
    /// version 3, with each session's principal.
    #[test]
    fn open_keys_keep_their_principal_through_a_snapshot_and_version_1_still_reads() {
        let (f, config) = sample();
        let bytes = encode_snap_file(&f).unwrap();
        assert_eq!(bytes[..8], SNAP_MAGIC);
        let dir = std::env::temp_dir().join(format!("fencelock-snapkeys-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.bin");
        fs::write(&path, &bytes).unwrap();
        let (_, g) = read_snap_file(&path, &config).unwrap().expect("reads");
        let (s, s2) = (SessionId(1), SessionId(2));
        let (ci, other) = (Principal::token("ci"), Principal::token("other"));
        assert_eq!(g.open_keys.get(ci, OpenKey(43)), Some(s2));
        assert_eq!(
            g.open_keys.get(other, OpenKey(43)),
            None,
            "another token's key"
        );
        assert_eq!(g.open_keys.get(Principal::Anyone, OpenKey(43)), None);
        assert_eq!(g.open_keys.get(Principal::Unrecorded, OpenKey(42)), Some(s));
        assert_eq!(g.open_keys.get(ci, OpenKey(42)), None);
        // Each session's principal, counted for the quota: `ci` opened one.
        assert_eq!(g.owners.principal_of(s2), Some(ci));
        assert_eq!(g.owners.principal_of(s), None);
        assert_eq!(g.owners.sessions_of(ci), 1);
        assert_eq!(g.owners.sessions_of(other), 0);
        // Written again from the restored state: the same keys, the same scopes.
        let again = postcard::to_allocvec(&SnapData::of(&g)).unwrap();
        let d = SnapData::decode(&again).unwrap();
        assert_eq!(d.open_keys, vec![(42, 1)]);
        assert_eq!(d.scoped_keys, vec![(ci, 43, 2)]);
        assert_eq!(d.principals, vec![(2, ci)]);
        // Version 2: its own magic and layout, the keys' scopes kept, no session counted.
        let v2 = SnapDataV2 {
            last_applied: d.last_applied,
            membership: d.membership.clone(),
            core: d.core.clone(),
            open_keys: d.open_keys.clone(),
            owners: d.owners.clone(),
            scoped_keys: d.scoped_keys.clone(),
        };
        let old2 = SnapFile {
            meta: f.meta.clone(),
            data: postcard::to_allocvec(&v2).unwrap(),
        };
        let b = encode_snap_file(&old2).unwrap();
        assert_eq!(
            b[..8],
            SNAP_MAGIC_V2,
            "version-2 data gets a version-2 header"
        );
        fs::write(&path, &b).unwrap();
        let (_, g2) = read_snap_file(&path, &config).unwrap().expect("v2 reads");
        assert_eq!(g2.open_keys.get(ci, OpenKey(43)), Some(s2));
        assert_eq!(
            g2.owners.sessions_of(ci),
            0,
            "version 2 recorded no principal"
        );
        assert_eq!(g2.owners.len(), 2);
        // Version 1: its own magic and layout.
        let d = SnapData::decode(&f.data).unwrap();
        let v1 = SnapDataV1 {
            last_applied: d.last_applied,
            membership: d.membership,
            core: d.core,
            open_keys: vec![(42, 1), (43, 2)],
            owners: d.owners,
        };
        let old = SnapFile {
            meta: f.meta.clone(),
            data: postcard::to_allocvec(&v1).unwrap(),
        };
        // Written as it came (a peer's version-1 snapshot installed, or this node's own
        // version-1 file kept as its current snapshot): under a version-1 header, so it
        // reads back at the next start.
        let mut b = encode_snap_file(&old).unwrap();
        assert_eq!(
            b[..8],
            SNAP_MAGIC_V1,
            "version-1 data gets a version-1 header"
        );
        fs::write(&path, &b).unwrap();
        let (_, g) = read_snap_file(&path, &config).unwrap().expect("v1 reads");
        assert_eq!(g.open_keys.get(Principal::Unrecorded, OpenKey(42)), Some(s));
        assert_eq!(
            g.open_keys.get(Principal::Unrecorded, OpenKey(43)),
            Some(s2)
        );
        assert_eq!(
            g.open_keys.get(ci, OpenKey(43)),
            None,
            "no principal was recorded"
        );
        assert!(check_backup(&b).is_ok(), "a version-1 backup is accepted");
        // Data whose scoped keys do not decode is not read as version 1.
        let mut bad = postcard::to_allocvec(&SnapData::of(&g)).unwrap();
        let n = postcard::to_allocvec(&v1).unwrap().len();
        assert_eq!(
            bad.len(),
            n + 2,
            "empty lists of scoped keys and principals are a byte each"
        );
        bad[n] = 1; // one scoped key, then an empty list
        assert!(SnapData::decode(&bad).is_err());
        // Version 3 data whose principals do not decode is not read as version 2.
        let mut bad = postcard::to_allocvec(&SnapData::of(&g)).unwrap();
        *bad.last_mut().unwrap() = 1; // one principal, then nothing
        assert!(SnapData::decode(&bad).is_err());
        // A header that names another version than its data is refused, every way.
        let files = [
            (1, b.clone()),
            (2, encode_snap_file(&old2).unwrap()),
            (3, encode_snap_file(&f).unwrap()),
        ];
        let magics = [(1, SNAP_MAGIC_V1), (2, SNAP_MAGIC_V2), (3, SNAP_MAGIC)];
        for (data, file) in &files {
            for (header, magic) in magics {
                let mut x = file.clone();
                x[..8].copy_from_slice(&magic);
                let r = decode_snap_file(&x);
                if header == *data {
                    assert!(r.is_ok(), "version {data} under its own header");
                    continue;
                }
                let e = r.err().expect("refused");
                let says = format!("header says version {header}, its data is of version {data}");
                assert!(e.contains(&says), "{e}");
            }
        }
        // A file whose checksummed contents go on after their end is refused.
        let mut payload = postcard::to_allocvec(&f).unwrap();
        payload.push(0);
        let len = payload.len() as u64;
        let mut longer_file = SNAP_MAGIC.to_vec();
        longer_file.extend_from_slice(&len.to_le_bytes());
        longer_file.extend_from_slice(&snap_crc(len, &payload).to_le_bytes());
        longer_file.extend_from_slice(&payload);
        let e = decode_snap_file(&longer_file).err().expect("refused");
        assert!(e.contains("bytes after its end"), "{e}");
        // Version 3 data with a byte appended is no version.
        let mut longer = postcard::to_allocvec(&SnapData::of(&g)).unwrap();
        longer.push(0);
        assert!(SnapData::decode(&longer).is_err());
        // A magic of another version is refused, naming what this build reads.
        b[7] = 4;
        let e = decode_snap_file(&b).err().expect("refused");
        assert!(e.contains("1 to 3"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A membership other than the sample's (one voter).
    fn other_membership() -> StoredMembership {
        let addr = crate::types::NodeAddr {
            raft: "a:1".into(),
            client: "a:2".into(),
        };
        StoredMembership::new(
            None,
            openraft::Membership::new(
                vec![std::iter::once(1).collect()],
                std::iter::once((1, addr)).collect::<BTreeMap<_, _>>(),
            ),
        )
    }

    /// A snapshot whose header and data disagree about where it was taken, or about the
    /// cluster's membership, is refused.
    #[test]
    fn a_snapshot_whose_meta_disagrees_with_its_data_is_refused() {
        let (sound, config) = sample();
        let dir = std::env::temp_dir().join(format!("fencelock-snapmeta-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.bin");
        let mut elsewhere = sound.clone();
        elsewhere.meta.last_log_id = Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 8));
        let mut members = sound.clone();
        members.meta.last_membership = other_membership();
        for (f, says) in [(elsewhere, "header says"), (members, "membership")] {
            fs::write(&path, encode_snap_file(&f).unwrap()).unwrap();
            let e = read_snap_file(&path, &config).err().expect("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        fs::write(&path, encode_snap_file(&sound).unwrap()).unwrap();
        assert!(read_snap_file(&path, &config).unwrap().is_some());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A snapshot that lists a session's credential, an open key or a session's principal
    /// twice, or a principal for a session without a credential, is corrupt (a snapshot is
    /// written from maps, so it never does): refused, not restored with one silently
    /// replacing the other. A principal for a session the core does not have open is
    /// dropped, so no quota counts it.
    /// Snapshot data whose lists hold more entries than a node of its tables can have
    /// (each names a live session) is refused before they are decoded, naming the list —
    /// for each list, in data of each version (a principal's entry is two bytes, some
    /// fifty in memory) — and the same lists at the cap are left to the other checks.
    #[test]
    fn a_snapshot_listing_more_entries_than_sessions_is_refused_before_it_is_decoded() {
        let (f, config) = sample();
        let d = SnapData::decode(&f.data).unwrap();
        let cap = list_cap(&config);
        let over = cap + 1;
        let cases = [
            (
                SnapData {
                    principals: vec![(1, Principal::Unrecorded); over],
                    ..d.clone()
                },
                "session principals",
            ),
            (
                SnapData {
                    scoped_keys: vec![(Principal::Unrecorded, 1, 1); over],
                    ..d.clone()
                },
                "scoped open keys",
            ),
            (
                SnapData {
                    owners: vec![(1, SessionSecret([0; 16])); over],
                    ..d.clone()
                },
                "session credentials",
            ),
            (
                SnapData {
                    open_keys: vec![(1, 1); over],
                    ..d.clone()
                },
                "open keys",
            ),
        ];
        for (bad, list) in cases {
            let bytes = postcard::to_allocvec(&bad).unwrap();
            let e = decode_snapshot(&config, &bytes).err().expect("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
            assert!(
                e.to_string()
                    .contains(&format!("lists {over} {list}, more than the {cap}")),
                "{e}"
            );
        }
        // Version 1 data (no scoped keys, no principals) is counted too.
        let v1 = SnapDataV1 {
            last_applied: d.last_applied,
            membership: d.membership.clone(),
            core: d.core.clone(),
            open_keys: vec![(1, 1); over],
            owners: d.owners.clone(),
        };
        let e = decode_snapshot(&config, &postcard::to_allocvec(&v1).unwrap())
            .err()
            .expect("refused");
        assert!(e.to_string().contains("open keys, more than"), "{e}");
        // At the cap, the count passes and the other checks judge (here: a principal
        // listed for sessions with no credential).
        let at_cap = SnapData {
            principals: vec![(1, Principal::Unrecorded); cap],
            ..d.clone()
        };
        let e = decode_snapshot(&config, &postcard::to_allocvec(&at_cap).unwrap())
            .err()
            .expect("refused by another check");
        assert!(!e.to_string().contains("more than the"), "{e}");
        // The sample itself is well within.
        assert!(decode_snapshot(&config, &f.data).is_ok());
    }

    /// A restore into tables no node starts with — a table of no rows, or more than
    /// `MAX_ROWS` — is refused `InvalidInput` before anything is allocated or written: a
    /// directory recording a table of none would not start again, and tables past the
    /// bound would be allocated before the core refused them.
    #[test]
    fn a_restore_into_tables_no_node_starts_with_is_refused() {
        let (f, config) = sample();
        let backup = encode_snap_file(&f).unwrap();
        let dir = std::env::temp_dir().join(format!("fencelock-notables-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for bad in [
            ServiceConfig { locks: 0, ..config },
            ServiceConfig {
                sessions: 0,
                ..config
            },
            ServiceConfig {
                claims: 0,
                ..config
            },
            ServiceConfig {
                sessions: fencelock::MAX_ROWS + 1,
                ..config
            },
        ] {
            let e = restore_into(&backup, &dir, &bad, one_member()).expect_err("restored");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
            assert!(!dir.exists(), "a restore wrote something");
        }
        restore_into(&backup, &dir, &config, one_member()).expect("restores");
        assert!(dir.join("snapshot.bin").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    /// The same in a snapshot *file*: the paths that know their tables count the lists
    /// before the data is decoded at all — a restore (`restore_into`, which writes
    /// nothing; `check_backup_within`, which `snapshot restore` asks first) and a start
    /// (`read_snap_file`) — and refuse them naming the list, where they used to decode
    /// the data whole first (to learn its version) and refuse it by its contents or its
    /// version; a backup check that knows no tables still judges it by them.
    #[test]
    fn a_snapshot_file_listing_more_entries_than_sessions_is_refused_before_it_is_decoded() {
        let (f, config) = sample();
        let d = SnapData::decode(&f.data).unwrap();
        let (cap, over) = (list_cap(&config), list_cap(&config) + 1);
        let bad = SnapData {
            principals: vec![(1, Principal::Unrecorded); over],
            ..d
        };
        let file = encode_snap_file(&SnapFile {
            meta: f.meta.clone(),
            data: postcard::to_allocvec(&bad).unwrap(),
        })
        .unwrap();
        let listed = format!("lists {over} session principals, more than the {cap}");
        let dir = std::env::temp_dir().join(format!("fencelock-listfile-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let e = restore_into(&file, &dir.join("restored"), &config, one_member())
            .expect_err("restored");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains(&listed), "{e}");
        assert!(
            !dir.join("restored/snapshot.bin").exists(),
            "a restore wrote it"
        );
        let e = check_backup_within(&file, &config).expect_err("a backup check passed it");
        assert!(e.contains(&listed), "{e}");
        // At a start, the lists are counted before the data is decoded to check its
        // version against the header's: a header naming version 2 over this version 3
        // data (its magic is outside the checksum) is refused by the count, not by the
        // version the decode would find.
        let mut v2_header = file.clone();
        v2_header[..8].copy_from_slice(&SNAP_MAGIC_V2);
        fs::create_dir_all(dir.join("node")).unwrap();
        let at = dir.join("node/snapshot.bin");
        fs::write(&at, &v2_header).unwrap();
        let e = read_snap_file(&at, &config).err().expect("started");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains(&listed), "{e}");
        // Without tables to count against, a backup check decodes it whole and judges it
        // by its contents (and the mislabelled one by its version).
        let e = check_backup(&file).expect_err("a backup check passed it");
        assert!(e.contains("unrecorded principal"), "{e}");
        let e = check_backup(&v2_header).expect_err("a backup check passed it");
        assert!(e.contains("its header says version 2"), "{e}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_snapshot_listing_a_credential_or_key_twice_is_refused() {
        let (f, config) = sample();
        let d = SnapData::decode(&f.data).unwrap();
        let s = d.open_keys[0].1;
        let twice_owned = SnapData {
            owners: vec![(s, SessionSecret([1; 16])), (s, SessionSecret([2; 16]))],
            ..d.clone()
        };
        let key_twice = SnapData {
            open_keys: vec![(42, s), (42, s)],
            scoped_keys: vec![],
            ..d.clone()
        };
        let session_twice = SnapData {
            open_keys: vec![(41, s), (42, s)],
            scoped_keys: vec![],
            ..d.clone()
        };
        let (p, ci) = (d.principals[0].0, Principal::token("ci"));
        let two_principals = SnapData {
            principals: vec![(p, ci), (p, Principal::token("other"))],
            ..d.clone()
        };
        let principal_not_owned = SnapData {
            principals: vec![(p, ci), (99, ci)],
            ..d.clone()
        };
        let unrecorded_listed = SnapData {
            principals: vec![(p, Principal::Unrecorded)],
            ..d.clone()
        };
        for (bad, says) in [
            (twice_owned, "two credentials"),
            (key_twice, "listed twice"),
            (session_twice, "two open keys"),
            (two_principals, "two principals"),
            (principal_not_owned, "no credential"),
            (unrecorded_listed, "unrecorded principal"),
        ] {
            let bytes = postcard::to_allocvec(&bad).unwrap();
            let e = decode_snapshot(&config, &bytes).err().expect("refused");
            assert!(e.to_string().contains(says), "{e}");
            // As a backup: refused by the check and by a restore, which writes nothing.
            let backup = encode_snap_file(&SnapFile {
                meta: f.meta.clone(),
                data: bytes,
            })
            .unwrap();
            let e = check_backup(&backup).expect_err("a backup check passed it");
            assert!(e.contains(says), "{e}");
            let dir =
                std::env::temp_dir().join(format!("fencelock-duprestore-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            let e = restore_into(&backup, &dir, &config, one_member()).expect_err("restored");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
            assert!(!dir.join("snapshot.bin").exists(), "a restore wrote it");
            let _ = fs::remove_dir_all(&dir);
        }
        // A principal (and credential) for a session the core does not have open is
        // dropped where the state is restored (a start, a received snapshot, a restore):
        // it would count against the token's quota for good, and refusing it could refuse
        // a restart over an entry only the quota reads.
        let not_open = SnapData {
            owners: [d.owners.clone(), vec![(99, SessionSecret([3; 16]))]].concat(),
            principals: vec![(p, ci), (99, ci)],
            ..d.clone()
        };
        let bytes = postcard::to_allocvec(&not_open).unwrap();
        let (g, _, _) = decode_snapshot(&config, &bytes).expect("restores");
        assert_eq!(g.owners.sessions_of(ci), 1, "only the open session counts");
        assert_eq!(g.owners.principal_of(SessionId(99)), None);
        assert_eq!(g.owners.principal_of(SessionId(p)), Some(ci));
        let backup = encode_snap_file(&SnapFile {
            meta: f.meta.clone(),
            data: bytes,
        })
        .unwrap();
        let dir = std::env::temp_dir().join(format!("fencelock-notopen-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        restore_into(&backup, &dir, &config, one_member()).expect("restores");
        let written = SnapData::decode(
            &read_snap_frame(&dir.join("snapshot.bin"), u64::MAX, None)
                .unwrap()
                .unwrap()
                .data,
        )
        .unwrap();
        assert_eq!(
            written.principals,
            vec![(p, ci)],
            "the restore wrote it without"
        );
        let _ = fs::remove_dir_all(&dir);
        let owned_once = SnapData {
            owners: vec![(s, SessionSecret([1; 16])), (p, SessionSecret([2; 16]))],
            ..d
        };
        let bytes = postcard::to_allocvec(&owned_once).unwrap();
        assert!(decode_snapshot(&config, &bytes).is_ok());
    }

    /// A received snapshot whose data was taken elsewhere than its meta says is refused
    /// before it is persisted or installed — the check a start makes of `snapshot.bin` —
    /// instead of being written and refused at the next start.
    #[tokio::test]
    async fn a_received_snapshot_whose_meta_disagrees_with_its_data_is_not_installed() {
        let (mut f, config) = sample();
        let dir = std::env::temp_dir().join(format!("fencelock-snaprecv-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (mut sm, shared) = StateMachine::open(&dir, config).unwrap();
        f.meta.last_log_id = Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 8));
        let e = sm
            .install_snapshot(&f.meta, Box::new(Cursor::new(f.data.clone())))
            .await
            .expect_err("refused");
        assert!(e.to_string().contains("its meta says"), "{e}");
        assert!(!dir.join("snapshot.bin").exists(), "persisted anyway");
        assert_eq!(shared.state().last_applied, None, "installed anyway");
        // The right log id with another membership in the meta: refused too.
        let mut members = f.clone();
        members.meta.last_log_id = Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 7));
        members.meta.last_membership = other_membership();
        let e = sm
            .install_snapshot(&members.meta, Box::new(Cursor::new(members.data.clone())))
            .await
            .expect_err("refused");
        assert!(e.to_string().contains("membership"), "{e}");
        assert!(!dir.join("snapshot.bin").exists(), "persisted anyway");
        let progress = shared.snapshot_persisted();
        assert!(
            progress.borrow().install_failed,
            "a purge would wait for it"
        );
        assert_eq!(progress.borrow().persisted, None);
        // The same data with its own log id is installed, and reads back at a start.
        f.meta.last_log_id = Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 7));
        sm.install_snapshot(&f.meta, Box::new(Cursor::new(f.data.clone())))
            .await
            .unwrap();
        assert_eq!(shared.state().last_applied, f.meta.last_log_id);
        assert_eq!(
            *progress.borrow(),
            crate::log_store::SnapshotProgress {
                persisted: f.meta.last_log_id,
                install_failed: false
            },
            "purges see the persisted snapshot"
        );
        let (g, _) = read_snap_file(&dir.join("snapshot.bin"), &config)
            .unwrap()
            .expect("persisted");
        assert_eq!(g.meta.last_log_id, f.meta.last_log_id);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A snapshot file a later build wrote (the format's header, a version above this
    /// build's) is not corrupt: the start is refused (`InvalidInput`, naming the version),
    /// and the file stays where it is, even where a corrupt one would be moved aside.
    #[test]
    fn a_snapshot_of_a_later_build_stops_a_start_and_stays() {
        let (f, config) = sample();
        let dir = std::env::temp_dir().join(format!("fencelock-snaplater-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.bin");
        let mut bytes = encode_snap_file(&f).unwrap();
        bytes[7] = SNAP_VERSION + 1;
        fs::write(&path, &bytes).unwrap();
        let e = StateMachine::open_checked(&dir, config, None)
            .err()
            .expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("names version 4"), "{e}");
        assert!(e.to_string().contains("written by a later build"), "{e}");
        assert_eq!(fs::read(&path).unwrap(), bytes, "left where it was");
        assert!(!dir.join("snapshot.bin.corrupt").exists(), "moved aside");
        // A backup of a later build is refused saying so, too.
        let e = check_backup(&bytes).expect_err("refused");
        assert!(e.contains("a later build's snapshot"), "{e}");
        // A later build's core snapshot inside a file whose own format this build reads
        // (the core's version raised alone): refused the same way, never moved aside.
        let mut d = SnapData::decode(&f.data).unwrap();
        assert!(
            matches!(d.core[4], 1 | 2),
            "the core snapshot's version, after its magic"
        );
        d.core[4] = 3;
        let later_core = SnapFile {
            meta: f.meta.clone(),
            data: postcard::to_allocvec(&d).unwrap(),
        };
        let bytes = encode_snap_file(&later_core).unwrap();
        fs::write(&path, &bytes).unwrap();
        let e = StateMachine::open_checked(&dir, config, None)
            .err()
            .expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(
            e.to_string().contains("core snapshot is of version 3"),
            "{e}"
        );
        assert_eq!(fs::read(&path).unwrap(), bytes, "left where it was");
        assert!(!dir.join("snapshot.bin.corrupt").exists(), "moved aside");
        // Given to `snapshot restore` as a backup: refused, saying whose it is.
        let members = BTreeMap::from([(
            1,
            crate::types::NodeAddr {
                raft: "127.0.0.1:1".into(),
                client: "127.0.0.1:2".into(),
            },
        )]);
        let later = "core snapshot is of version 3, which this build's core does not read: \
                     written by a later build";
        let e = restore_into(&bytes, &dir.join("new"), &config, members)
            .expect_err("a later build's backup");
        assert!(e.to_string().contains(later), "{e}");
        // And by the check a backup gets when it is taken or before it is restored.
        let e = check_backup(&bytes).expect_err("a later build's backup passed its check");
        assert!(e.contains(later), "{e}");
        // A core snapshot whose header this build cannot read is refused by the check too.
        d.core[0] ^= 0xff;
        let bad_magic = SnapFile {
            meta: f.meta.clone(),
            data: postcard::to_allocvec(&d).unwrap(),
        };
        let e = check_backup(&encode_snap_file(&bad_magic).unwrap()).expect_err("bad magic");
        assert!(e.contains("core snapshot is unreadable"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A corrupt snapshot is moved aside under a name that holds nothing yet: an earlier
    /// one (the evidence of an earlier failure) is never renamed over; with
    /// `MAX_CORRUPT_KEPT` kept, the start is refused and nothing moves.
    #[test]
    fn a_corrupt_snapshot_never_replaces_one_moved_aside_before() {
        let (f, config) = sample();
        let dir = std::env::temp_dir().join(format!("fencelock-snapaside-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.bin");
        let corrupt = |n: u8| {
            let mut b = encode_snap_file(&f).unwrap();
            let mid = b.len() / 2;
            b[mid] ^= n;
            b
        };
        let (one, two) = (corrupt(1), corrupt(2));
        fs::write(&path, &one).unwrap();
        StateMachine::open_checked(&dir, config, None).expect("rebuilt from the log");
        fs::write(&path, &two).unwrap();
        StateMachine::open_checked(&dir, config, None).expect("rebuilt from the log");
        assert_eq!(fs::read(dir.join("snapshot.bin.corrupt")).unwrap(), one);
        assert_eq!(fs::read(dir.join("snapshot.bin.corrupt.2")).unwrap(), two);
        for n in 3..=MAX_CORRUPT_KEPT {
            fs::write(dir.join(format!("snapshot.bin.corrupt.{n}")), b"kept").unwrap();
        }
        fs::write(&path, &one).unwrap();
        let e = StateMachine::open_checked(&dir, config, None)
            .err()
            .expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(fs::read(&path).unwrap(), one, "left where it was");
        assert_eq!(fs::read(dir.join("snapshot.bin.corrupt")).unwrap(), one);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A sound snapshot that is not this node's to restore — taken with another lock-delay,
    /// or holding more than these tables do — stops a start (`InvalidInput`, naming the
    /// setting) and stays where it is, even where a corrupt one would be moved aside (the
    /// log holds every entry); a received one is not installed or persisted.
    #[tokio::test]
    async fn a_snapshot_of_other_settings_stops_a_start_and_is_not_installed() {
        let (f, config) = sample();
        let delayed = ServiceConfig {
            core: Config {
                lock_delay: 250,
                ..config.core
            },
            ..config
        };
        let tiny = ServiceConfig { locks: 0, ..config };
        let dir = std::env::temp_dir().join(format!("fencelock-snapset-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.bin");
        let bytes = encode_snap_file(&f).unwrap();
        fs::write(&path, &bytes).unwrap();
        for (other, says) in [
            (delayed, "--lock-delay-ms 250 here, 0 in the snapshot"),
            (tiny, "more than this node's tables"),
        ] {
            let e = StateMachine::open_checked(&dir, other, None)
                .err()
                .expect("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
            assert!(e.to_string().contains(says), "{e}");
            assert_eq!(fs::read(&path).unwrap(), bytes, "left where it was");
            assert!(!dir.join("snapshot.bin.corrupt").exists(), "moved aside");
        }
        assert!(StateMachine::open_checked(&dir, config, None).is_ok());
        fs::remove_dir_all(&dir).unwrap();
        // Received by a node of another lock-delay: refused, nothing persisted.
        let (mut sm, shared) = StateMachine::open(&dir, delayed).unwrap();
        let e = sm
            .install_snapshot(&f.meta, Box::new(Cursor::new(f.data.clone())))
            .await
            .expect_err("refused");
        assert!(e.to_string().contains("--lock-delay-ms"), "{e}");
        assert!(!dir.join("snapshot.bin").exists(), "persisted anyway");
        assert_eq!(shared.state().last_applied, None, "installed anyway");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The limit on a received snapshot leaves room: a state whose every table is full,
    /// with the widest names, labels and numbers, every session holding a credential and a
    /// token-scoped idempotency key, takes less than a quarter of it.
    #[test]
    fn the_received_snapshot_limit_is_four_times_a_full_states_size() {
        let config = ServiceConfig {
            sessions: 16,
            locks: 16,
            claims: 32,
            core: Config::default(),
        };
        let mut svc = config.fresh();
        let mut out = Vec::new();
        let big = u64::MAX >> 12;
        let mut sessions = Vec::new();
        for i in 0..16 {
            let label = Label::new(&format!("{i:0>64}")).unwrap();
            let s = svc
                .open_labeled(Tick(1), big, label, &mut out)
                .unwrap()
                .opened()
                .unwrap();
            sessions.push(s);
        }
        let name = |i: usize| format!("{i:x>64}");
        for (i, s) in sessions.iter().enumerate() {
            let r = svc.acquire(
                Tick(2),
                *s,
                &name(i),
                fencelock::Mode::Exclusive,
                Wait::None,
                Some(big),
                &mut out,
            );
            assert!(matches!(r, Ok(Reply::Granted { .. })), "{r:?}");
        }
        for (i, s) in sessions.iter().enumerate() {
            let r = svc.acquire(
                Tick(3),
                *s,
                &name((i + 1) % 16),
                fencelock::Mode::Exclusive,
                Wait::Until(Tick(big)),
                Some(big + 1),
                &mut out,
            );
            assert!(matches!(r, Ok(Reply::Queued { .. })), "{r:?}");
        }
        assert_eq!(svc.usage().claims, 32, "every table full");
        let d = SnapData {
            last_applied: Some(LogId::new(openraft::CommittedLeaderId::new(big, big), big)),
            membership: StoredMembership::default(),
            core: svc.snapshot_vec(),
            open_keys: vec![],
            owners: sessions
                .iter()
                .map(|s| (s.0, SessionSecret([0xff; 16])))
                .collect(),
            scoped_keys: sessions
                .iter()
                .map(|s| (Principal::Token([0xff; 32]), u128::MAX, s.0))
                .collect(),
            principals: sessions
                .iter()
                .map(|s| (s.0, Principal::Token([0xff; 32])))
                .collect(),
        };
        let len = postcard::to_allocvec(&d).unwrap().len() as u64;
        assert!(
            4 * len <= max_snapshot_bytes(&config),
            "{len} bytes, limit {}",
            max_snapshot_bytes(&config)
        );
        // The per-row bounds hold by themselves, with 1 KiB for the rest (not the 1 MiB
        // the limit allows for a membership of many nodes).
        assert!(len <= 160 * (16 + 16 + 32) + 256 * 16 + 1024, "{len} bytes");
    }
}

#[cfg(test)]
mod hub_tests {
    use super::*;

    #[test]
    fn pushes_start_at_the_attach_index_and_a_reattach_keeps_the_earlier_one() {
        let hub = Hub::default();
        let s = SessionId(7);
        let o = Output::WaitTimedOut {
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
        let got = |rx: &mut PushQueue| std::iter::from_fn(|| rx.try_recv().ok()).count();
        assert_eq!(got(&mut a_rx), 2, "connection 1 gets entries 15 and 25");
        assert_eq!(got(&mut b_rx), 1, "connection 2 gets entry 25 only");
    }

    /// A node pushes the outputs of the entries it proposed, never another leader's (a
    /// deposed leader applying the new leader's entries late, or a new leader applying an
    /// earlier one's): node 0 included, whose id is also the "not set" of the filter's
    /// store.
    #[test]
    fn only_the_outputs_of_entries_this_node_proposed_are_pushed() {
        for me in [0, 1, u64::MAX] {
            let hub = Hub::default();
            hub.set_node(me);
            let s = SessionId(7);
            let o = Output::WaitTimedOut {
                session: s,
                lock: fencelock::LockName::new("x").expect("name"),
            };
            let (a, mut rx, _) = PushSink::new(8);
            hub.attach_from(s, 1, a, 0);
            let other = me.wrapping_add(1);
            hub.push_of(1, &o, Some(other));
            assert!(
                rx.try_recv().is_err(),
                "node {me} pushed node {other}'s entry"
            );
            hub.push_of(2, &o, Some(me));
            assert!(
                rx.try_recv().is_ok(),
                "node {me} did not push its own entry"
            );
            assert!(rx.try_recv().is_err());
        }
    }

    /// How many connections the hub closed for its push budget.
    fn push_budget_closes(hub: &Hub) -> u64 {
        hub.push_closes
            .get_or_create(&vec![("reason".to_string(), "push_budget".to_string())])
            .get()
    }

    /// With the push budget spent, a push closes the connection holding the most queued
    /// pushes — a stalled one, not the reader the push is for — and goes on to its own;
    /// when the pushing connection holds the most, it is the one closed. A dropped queue
    /// gives its pushes back to the budget.
    #[tokio::test]
    async fn a_spent_push_budget_closes_the_connection_holding_the_most() {
        let hub = Hub::default();
        hub.set_push_budget(4);
        let (s1, s2) = (SessionId(1), SessionId(2));
        let out = |s| Output::WaitTimedOut {
            session: s,
            lock: fencelock::LockName::new("x").expect("name"),
        };
        let budget = push_budget_closes;
        let (stalled, stalled_rx, stalled_close) = hub.sink(100);
        let (reader, mut reader_rx, reader_close) = hub.sink(100);
        hub.attach(s1, 1, stalled);
        hub.attach(s2, 2, reader);
        for i in 0..4 {
            hub.push(i, &out(s1));
        }
        assert_eq!(
            hub.queued_pushes(),
            4,
            "the stalled connection spent the budget"
        );
        hub.push(10, &out(s2));
        assert_eq!(
            reader_rx.try_recv().ok(),
            Some(out(s2)),
            "the reader got its push"
        );
        let told = |n: Arc<Notify>| async move {
            tokio::time::timeout(std::time::Duration::from_secs(10), n.notified())
                .await
                .is_ok()
        };
        assert!(
            told(stalled_close).await,
            "the stalled connection was not told to close"
        );
        assert!(!hub.has_conn(1), "the stalled connection is detached");
        assert!(hub.has_conn(2), "the reader is kept");
        assert_eq!(budget(&hub), 1);
        assert_eq!(
            hub.queued_pushes(),
            0,
            "the closed connection's pushes left the budget when it was told to close"
        );
        drop(stalled_rx);
        assert_eq!(hub.queued_pushes(), 0, "and are not given back twice");
        // Now the reader falls behind by itself: its second push finds the budget of 1
        // spent, and it holds the most.
        hub.set_push_budget(1);
        hub.push(11, &out(s2));
        hub.push(12, &out(s2));
        assert!(told(reader_close).await, "the reader was not told to close");
        assert!(!hub.has_conn(2));
        assert_eq!(budget(&hub), 2);
        assert_eq!(hub.queued_pushes(), 0, "the reader's push left with it");
        drop(reader_rx);
        assert_eq!(hub.queued_pushes(), 0);
    }

    /// A connection that filled the budget and then closed (or lost to expiry) every
    /// session it was attached to is still the one closed when the budget is spent: its
    /// pushes still count, so were it passed over, each push to a reader would close that
    /// reader instead, for as long as the stalled client read a trickle. Once it
    /// attaches again, or ends, it is an unattached connection no more.
    #[tokio::test]
    async fn a_connection_whose_sessions_ended_is_still_closed_for_the_budget() {
        let hub = Hub::default();
        let out = |s| Output::WaitTimedOut {
            session: SessionId(s),
            lock: fencelock::LockName::new("x").expect("name"),
        };
        let budget = push_budget_closes;
        // Connection 1 holds sessions 1 and 3; its pushes fill the budget; then session 1
        // closes and session 3 expires.
        let (stalled, _stalled_rx, stalled_close) = hub.sink(100);
        hub.attach(SessionId(1), 1, stalled.clone());
        hub.attach(SessionId(3), 1, stalled);
        for i in 0..4 {
            hub.push(i, &out(1));
        }
        hub.forget(SessionId(1));
        hub.push(
            4,
            &Output::SessionExpired {
                session: SessionId(3),
            },
        );
        assert!(!hub.has_conn(1), "attached to no session");
        assert_eq!(hub.queued_pushes(), 5, "its pushes still count");
        hub.set_push_budget(5);
        let (reader, mut reader_rx, _) = hub.sink(100);
        hub.attach(SessionId(2), 2, reader);
        hub.push(10, &out(2));
        assert_eq!(
            reader_rx.try_recv().ok(),
            Some(out(2)),
            "the reader got its push"
        );
        assert!(hub.has_conn(2), "the reader is kept");
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(10), stalled_close.notified())
                .await
                .is_ok(),
            "the stalled connection was not told to close"
        );
        assert_eq!(budget(&hub), 1);
        assert_eq!(hub.queued_pushes(), 0, "its pushes left the budget");
        assert!(hub.subs.lock().unwrap().unattached.is_empty());
        // Attaching again, or ending, takes a connection off the unattached.
        let (s4, _rx4, _) = hub.sink(100);
        hub.attach(SessionId(4), 4, s4.clone());
        hub.forget(SessionId(4));
        assert!(hub.subs.lock().unwrap().unattached.contains_key(&4));
        hub.attach(SessionId(5), 4, s4);
        assert!(!hub.subs.lock().unwrap().unattached.contains_key(&4));
        hub.forget(SessionId(5));
        hub.detach_conn(4);
        assert!(hub.subs.lock().unwrap().unattached.is_empty());
    }

    /// One apply pushes all its outputs in one go, before any writer runs. A connection
    /// closed for the budget gives its pushes back at once, so the pushes that follow —
    /// to readers that have not had a chance to read yet — find room again: one close, not
    /// one per push until the closed connection's writer gets round to dropping its queue.
    #[test]
    fn a_budget_close_frees_room_for_the_rest_of_the_apply() {
        let hub = Hub::default();
        hub.set_push_budget(4);
        let out = |s| Output::WaitTimedOut {
            session: SessionId(s),
            lock: fencelock::LockName::new("x").expect("name"),
        };
        let (stalled, stalled_rx, _) = hub.sink(100);
        hub.attach(SessionId(1), 1, stalled);
        for i in 0..4 {
            hub.push(i, &out(1));
        }
        let mut readers = Vec::new();
        for c in 2..4 {
            let (sink, rx, _) = hub.sink(100);
            hub.attach(SessionId(c), c, sink);
            readers.push(rx);
        }
        // One apply: two pushes to each reader, none read in between.
        for (i, s) in [2, 3, 2, 3].into_iter().enumerate() {
            hub.push(10 + i as u64, &out(s));
        }
        let closes = push_budget_closes(&hub);
        assert_eq!(closes, 1, "only the stalled connection was closed");
        assert!(!hub.has_conn(1));
        assert!(hub.has_conn(2) && hub.has_conn(3), "both readers kept");
        assert_eq!(hub.queued_pushes(), 4, "the readers' four pushes");
        for rx in &mut readers {
            assert_eq!(std::iter::from_fn(|| rx.try_recv().ok()).count(), 2);
        }
        assert_eq!(hub.queued_pushes(), 0);
        drop(stalled_rx);
        assert_eq!(
            hub.queued_pushes(),
            0,
            "the stalled queue was not counted twice"
        );
    }

    /// One session attached from more connections than [`MAX_ATTACHED_PER_SESSION`]: the
    /// ones past the cap are refused (nothing registered, nobody closed — closing the
    /// oldest would have them take each other's place without end), so every attach and
    /// push of the session walks at most that many; a connection attached again is no new
    /// one, and one that leaves makes room. A connection's end touches its own
    /// attachments only.
    #[test]
    fn a_session_takes_at_most_its_cap_of_connections_and_refuses_more() {
        let hub = Hub::default();
        let s = SessionId(7);
        let cap = MAX_ATTACHED_PER_SESSION as u64;
        let mut conns = Vec::new();
        for c in 1..=cap + 6 {
            let (sink, rx, _) = hub.sink(100);
            let attached = hub.attach(s, c, sink);
            assert_eq!(attached, c <= cap, "connection {c}");
            conns.push((c, rx));
        }
        assert_eq!(
            hub.subs.lock().unwrap().len(),
            MAX_ATTACHED_PER_SESSION,
            "the cap"
        );
        for (c, _) in &conns {
            assert_eq!(hub.has_conn(*c), *c <= cap, "connection {c}");
        }
        let closes: u64 = ["push_backlog", "push_budget"]
            .iter()
            .map(|r| {
                hub.push_closes
                    .get_or_create(&vec![("reason".to_string(), r.to_string())])
                    .get()
            })
            .sum();
        assert_eq!(closes, 0, "nobody closed");
        // The attached get the session's pushes; the refused none.
        let out = Output::WaitTimedOut {
            session: s,
            lock: fencelock::LockName::new("x").expect("name"),
        };
        hub.push(1, &out);
        for (c, rx) in &mut conns {
            let got = rx.try_recv().ok();
            assert_eq!(got.is_some(), *c <= cap, "connection {c}");
        }
        // Attached again: no new connection. One leaves: a refused one now fits.
        let (again, _rx, _) = hub.sink(100);
        assert!(hub.attach(s, cap, again), "attached again");
        hub.detach_conn(1);
        let (late, _lrx, _) = hub.sink(100);
        assert!(hub.attach(s, cap + 1, late), "room once one left");
        // Another session's connection ends: this session's attachments are untouched.
        let (other, _orx, _) = hub.sink(100);
        assert!(hub.attach(SessionId(8), 999, other));
        hub.detach_conn(999);
        assert!(!hub.has_conn(999));
        assert_eq!(hub.subs.lock().unwrap().len(), MAX_ATTACHED_PER_SESSION);
        // The two indexes stay each other's inverse through all of it.
        let g = hub.subs.lock().unwrap();
        for (session, v) in &g.by_session {
            for (c, _, _) in v {
                assert!(g.by_conn[c].contains(session));
            }
        }
        for (c, sessions) in &g.by_conn {
            for session in sessions {
                assert!(g.by_session[session].iter().any(|(x, _, _)| x == c));
            }
        }
    }

    /// A queue dropped while its connection is still attached: the pushes in it leave the
    /// budget once, and a push that comes after is refused without being counted.
    #[test]
    fn a_dropped_queue_leaves_the_budget_once() {
        let hub = Hub::default();
        let out = Output::WaitTimedOut {
            session: SessionId(1),
            lock: fencelock::LockName::new("x").expect("name"),
        };
        let (sink, mut rx, _) = hub.sink(100);
        hub.attach(SessionId(1), 1, sink);
        for i in 0..3 {
            hub.push(i, &out);
        }
        assert_eq!(hub.queued_pushes(), 3);
        assert!(rx.try_recv().is_ok());
        assert_eq!(hub.queued_pushes(), 2);
        drop(rx);
        assert_eq!(hub.queued_pushes(), 0);
        hub.push(3, &out);
        assert_eq!(
            hub.queued_pushes(),
            0,
            "a push to a dropped queue is not counted"
        );
        assert!(!hub.has_conn(1), "and its connection is detached");
    }
}
