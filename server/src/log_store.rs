//! The durable Raft log and vote: one append-only file of checksummed records, fsynced
//! before openraft is told an append or a vote is durable.
//!
//! Record layout: `len: u32 LE | crc32(payload): u32 LE | payload (postcard Rec)`. On open
//! the file is replayed; the first record that is truncated or fails its checksum (a
//! crash mid-write) ends the valid prefix and the file is cut back to it. Records that
//! were never fsynced were never acknowledged, so nothing acknowledged is lost.
//!
//! Group commit: an append writes its records at once and hands openraft's completion
//! callback to a flusher thread, which takes every callback queued so far, runs one
//! `fdatasync` for all of them, and only then reports them durable, in order. So the
//! async runtime never blocks on a disk flush, and concurrent appends share a flush.
//! Votes and truncations are fsynced inline before returning (they are rare).
//!
//! Cost: an append is one `write`; one `fdatasync` per batch of appends; the whole log is also kept in
//! memory (a `BTreeMap`), bounded by openraft's snapshot-and-purge policy. When purges
//! have left the file more than [`COMPACT_BYTES`] long it is rewritten (temp file, fsync,
//! rename, fsync of the directory).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{RaftLogId, StorageIOError};
use serde::{Deserialize, Serialize};

use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};

/// A purge leaves the file alone until it is at least this long; then it is rewritten.
pub const COMPACT_BYTES: u64 = 16 << 20;
/// A record larger than this is treated as corruption.
const MAX_RECORD: u32 = 64 << 20;

#[derive(Serialize, Deserialize)]
enum Rec {
    Entry(Entry),
    /// Delete every entry with index >= this.
    Truncate(u64),
    /// Delete every entry up to and including this log id.
    Purge(LogId),
    Vote(Vote),
    Committed(Option<LogId>),
}

struct Inner {
    path: PathBuf,
    file: File,
    /// The handle the flusher syncs (replaced when compaction replaces the file).
    sync_file: Arc<Mutex<File>>,
    len: u64,
    log: BTreeMap<u64, Entry>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    last_purged: Option<LogId>,
    compact_bytes: u64,
}

/// The log store. Cloning shares the same file and memory (the clone is the log reader).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
    flusher: Sender<LogFlushed<TypeConfig>>,
}

/// The flusher thread: one `fdatasync` per batch of queued completions. It ends when
/// every sender (every clone of the store) is dropped.
fn run_flusher(file: Arc<Mutex<File>>, rx: Receiver<LogFlushed<TypeConfig>>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let res = file.lock().unwrap_or_else(|p| p.into_inner()).sync_data();
        for cb in batch {
            let r = match &res {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            };
            cb.log_io_completed(r);
        }
    }
}

fn io_err(e: impl std::error::Error + 'static) -> io::Error {
    io::Error::other(e.to_string())
}

fn encode(rec: &Rec) -> io::Result<Vec<u8>> {
    let payload = postcard::to_allocvec(rec).map_err(io_err)?;
    let mut buf = Vec::with_capacity(payload.len() + 8);
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    buf.extend_from_slice(&payload);
    Ok(buf)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Inner {
    fn apply(&mut self, rec: Rec) {
        match rec {
            Rec::Entry(e) => {
                let index = e.log_id.index;
                // Appends are contiguous: an entry at `index` replaces everything from it on.
                self.log.split_off(&index);
                self.log.insert(index, e);
            }
            Rec::Truncate(since) => {
                self.log.split_off(&since);
            }
            Rec::Purge(id) => {
                self.log = self.log.split_off(&(id.index + 1));
                if self.last_purged.is_none_or(|p| p < id) {
                    self.last_purged = Some(id);
                }
            }
            Rec::Vote(v) => self.vote = Some(v),
            Rec::Committed(c) => self.committed = c,
        }
    }

    fn write(&mut self, recs: &[Rec], sync: bool) -> io::Result<()> {
        let mut buf = Vec::new();
        for r in recs {
            buf.extend_from_slice(&encode(r)?);
        }
        self.file.write_all(&buf)?;
        self.len += buf.len() as u64;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Rewrites the file with only the live state.
    fn compact(&mut self) -> io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let mut recs = Vec::new();
        if let Some(v) = self.vote {
            recs.push(Rec::Vote(v));
        }
        recs.push(Rec::Committed(self.committed));
        if let Some(p) = self.last_purged {
            recs.push(Rec::Purge(p));
        }
        let mut buf = Vec::new();
        for r in &recs {
            buf.extend_from_slice(&encode(r)?);
        }
        for e in self.log.values() {
            buf.extend_from_slice(&encode(&Rec::Entry(e.clone()))?);
        }
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&buf)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            sync_dir(dir)?;
        }
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        *self.sync_file.lock().unwrap_or_else(|p| p.into_inner()) = self.file.try_clone()?;
        self.len = buf.len() as u64;
        Ok(())
    }
}

impl LogStore {
    /// Opens (or creates) the log file `dir/raft.log`, replaying its valid prefix and
    /// cutting off a torn tail (the last append, damaged by a crash before its fsync, so
    /// never acknowledged).
    ///
    /// Errors: I/O errors opening, reading or truncating the file; `InvalidData` for a
    /// corrupt record that has more records after it (cutting there could lose
    /// acknowledged entries or votes). Cost: O(file size).
    pub fn open(dir: &Path) -> io::Result<LogStore> {
        Self::open_with_compaction(dir, COMPACT_BYTES)
    }

    /// [`LogStore::open`] with another compaction threshold (tests use a small one).
    ///
    /// Errors and cost: as [`LogStore::open`].
    pub fn open_with_compaction(dir: &Path, compact_bytes: u64) -> io::Result<LogStore> {
        fs::create_dir_all(dir)?;
        let path = dir.join("raft.log");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let append = OpenOptions::new().append(true).open(&path)?;
        let mut inner = Inner {
            path: path.clone(),
            sync_file: Arc::new(Mutex::new(append.try_clone()?)),
            file: append,
            len: 0,
            log: BTreeMap::new(),
            vote: None,
            committed: None,
            last_purged: None,
            compact_bytes,
        };
        let mut pos = 0usize;
        while let Some(rec) = read_record(&bytes[pos..]) {
            let (rec, used) = rec;
            inner.apply(rec);
            pos += used;
        }
        if pos < bytes.len() && !is_torn_tail(&bytes[pos..]) {
            // A bad record with more records after it is not a crash mid-append (that
            // can only damage the end): cutting there would drop entries and votes that
            // were fsynced and acknowledged. Refuse to start instead.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "log {}: corrupt record at byte {pos} with {} bytes after it; refusing to cut acknowledged records",
                    path.display(),
                    bytes.len() - pos
                ),
            ));
        }
        if pos < bytes.len() {
            tracing::warn!(
                "log {}: cutting {} bytes of torn or corrupt tail",
                path.display(),
                bytes.len() - pos
            );
            file.set_len(pos as u64)?;
            file.sync_all()?;
        }
        file.seek(SeekFrom::End(0))?;
        inner.len = pos as u64;
        let (tx, rx) = channel();
        let sync_handle = inner.sync_file.clone();
        std::thread::Builder::new()
            .name("fencelock-log-flush".into())
            .spawn(move || run_flusher(sync_handle, rx))?;
        Ok(LogStore {
            inner: Arc::new(Mutex::new(inner)),
            flusher: tx,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock means a panic mid-update; the on-disk log is still the truth.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last durable vote (for tests and diagnostics). Cost: O(1).
    pub fn vote(&self) -> Option<Vote> {
        self.lock().vote
    }

    /// The size of the log file in bytes. Cost: O(1).
    pub fn file_len(&self) -> u64 {
        self.lock().len
    }

    /// The last log id in the log. Cost: O(log n).
    pub fn last_log_id(&self) -> Option<LogId> {
        let g = self.lock();
        g.log
            .values()
            .next_back()
            .map(|e| *e.get_log_id())
            .or(g.last_purged)
    }
}

/// One record from the front of `bytes`, or `None` at a torn/corrupt/absent record.
/// True when the unreadable rest of the file can only be the last append, torn by a crash:
/// shorter than a header, a length running past the end of the file, or exactly one
/// complete record (whose checksum then failed) ending at the end of the file. An append
/// is acknowledged only after its fsync, so such a record was never acknowledged.
fn is_torn_tail(rest: &[u8]) -> bool {
    if rest.len() < 8 {
        return true;
    }
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    len > MAX_RECORD as usize || 8 + len >= rest.len()
}

fn read_record(bytes: &[u8]) -> Option<(Rec, usize)> {
    if bytes.len() < 8 {
        return None;
    }
    let len = u32::from_le_bytes(bytes[0..4].try_into().ok()?);
    let crc = u32::from_le_bytes(bytes[4..8].try_into().ok()?);
    if len > MAX_RECORD || bytes.len() < 8 + len as usize {
        return None;
    }
    let payload = &bytes[8..8 + len as usize];
    if crc32fast::hash(payload) != crc {
        return None;
    }
    let rec = postcard::from_bytes(payload).ok()?;
    Some((rec, 8 + len as usize))
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self
            .lock()
            .log
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let g = self.lock();
        let last = g.log.values().next_back().map(|e| *e.get_log_id());
        Ok(LogState {
            last_purged_log_id: g.last_purged,
            last_log_id: last.or(g.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let mut g = self.lock();
        g.write(&[Rec::Vote(*vote)], true)
            .map_err(|e| StorageIOError::write_vote(&e))?;
        g.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not fsynced: losing it only means re-deriving the commit index from a quorum.
        let mut g = self.lock();
        g.write(&[Rec::Committed(committed)], false)
            .map_err(|e| StorageIOError::write(&e))?;
        g.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let recs: Vec<Rec> = entries.into_iter().map(Rec::Entry).collect();
        let mut g = self.lock();
        if let Err(e) = g.write(&recs, false) {
            callback.log_io_completed(Err(io::Error::new(e.kind(), e.to_string())));
            return Err(StorageIOError::write_logs(&e).into());
        }
        for r in recs {
            g.apply(r);
        }
        drop(g);
        // Durable (and reported so) once the flusher's next fdatasync returns.
        if let Err(e) = self.flusher.send(callback) {
            e.0.log_io_completed(Err(io::Error::other("log flusher stopped")));
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut g = self.lock();
        g.write(&[Rec::Truncate(log_id.index)], true)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        g.apply(Rec::Truncate(log_id.index));
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut g = self.lock();
        g.write(&[Rec::Purge(log_id)], false)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        g.apply(Rec::Purge(log_id));
        if g.len >= g.compact_bytes {
            g.compact().map_err(|e| StorageIOError::write_logs(&e))?;
        }
        Ok(())
    }
}
