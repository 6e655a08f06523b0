//! The durable log and the state machine: openraft's own storage test suite, plus
//! crash-shaped tests of the log file (reopen, torn tail, corrupt record, compaction).

mod common;

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use fencelock_server::log_store::{LogStore, PREALLOC};
use fencelock_server::state_machine::{ServiceConfig, StateMachine};
use fencelock_server::types::{Cmd, Entry, LogId, Op, StorageError, TypeConfig, Vote};
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, EntryPayload};

struct Guard(PathBuf);
impl Drop for Guard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, Guard> for Builder {
    async fn build(&self) -> Result<(Guard, LogStore, StateMachine), StorageError> {
        let dir = common::temp_dir("suite");
        let log = LogStore::open(&dir).expect("open log");
        let config = ServiceConfig {
            sessions: 64,
            locks: 64,
            claims: 128,
            ..ServiceConfig::default()
        };
        let (sm, _) = StateMachine::open(&dir, config).expect("open state machine");
        Ok((Guard(dir), log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    Suite::test_all(Builder).expect("openraft's storage suite passes");
}

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Cmd {
            now: Some(index),
            ops: vec![Op::Input(fencelock::Input::OpenSession { ttl: 10 })],
        }),
    }
}

/// Appends and waits until the flusher reports the entries durable.
async fn append(log: &mut LogStore, entries: Vec<Entry>) {
    log.blocking_append(entries).await.expect("append");
}

async fn indices(log: &mut LogStore) -> Vec<u64> {
    log.try_get_log_entries(0..u64::MAX)
        .await
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect()
}

#[tokio::test]
async fn reopen_keeps_flushed_entries_and_vote() {
    let dir = common::temp_dir("reopen");
    let _g = Guard(dir.clone());
    {
        let mut log = LogStore::open(&dir).unwrap();
        append(&mut log, (1..=10).map(|i| entry(1, i)).collect()).await;
        log.save_vote(&Vote::new(3, 2)).await.unwrap();
        log.truncate(LogId::new(CommittedLeaderId::new(1, 1), 8))
            .await
            .unwrap();
        append(&mut log, vec![entry(3, 8)]).await;
    }
    let mut log = LogStore::open(&dir).unwrap();
    assert_eq!(indices(&mut log).await, (1..=8).collect::<Vec<_>>());
    assert_eq!(log.vote(), Some(Vote::new(3, 2)));
    let last = log.last_log_id().unwrap();
    assert_eq!((last.leader_id.term, last.index), (3, 8));
}

#[tokio::test]
async fn torn_or_corrupt_tail_is_cut_not_fatal() {
    let dir = common::temp_dir("torn");
    let _g = Guard(dir.clone());
    {
        let mut log = LogStore::open(&dir).unwrap();
        append(&mut log, (1..=5).map(|i| entry(1, i)).collect()).await;
    }
    let path = dir.join("raft.log");
    let good = LogStore::open(&dir).unwrap().file_len() as usize;
    // A record cut short by a crash: its first bytes landed in the preallocated zeros.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&[200, 0, 0, 0, 1, 2, 3], good as u64)
        .unwrap();
    {
        let mut log = LogStore::open(&dir).unwrap();
        assert_eq!(indices(&mut log).await, vec![1, 2, 3, 4, 5]);
        assert_eq!(log.file_len() as usize, good);
    }
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes[good..].iter().all(|&b| b == 0), "torn tail zeroed");
    // A flipped byte in the last record: that record (and anything after) is dropped.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[good - 2] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let mut log = LogStore::open(&dir).unwrap();
    assert_eq!(indices(&mut log).await, vec![1, 2, 3, 4]);
    // And it keeps working after the cut.
    append(&mut log, vec![entry(2, 5)]).await;
    drop(log);
    let mut log = LogStore::open(&dir).unwrap();
    assert_eq!(indices(&mut log).await, vec![1, 2, 3, 4, 5]);
    drop(log);
    // A flipped byte in a record that has records after it is not a torn append: opening
    // refuses, and the file is left as it was (nothing acknowledged is cut).
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[12] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let err = LogStore::open(&dir)
        .err()
        .expect("a corrupt middle record must refuse to open");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file must not be truncated"
    );
}

#[tokio::test]
async fn purge_compacts_the_file() {
    let dir = common::temp_dir("compact");
    let _g = Guard(dir.clone());
    let mut log = LogStore::open_with_compaction(&dir, 1024).unwrap();
    append(&mut log, (1..=200).map(|i| entry(1, i)).collect()).await;
    log.save_vote(&Vote::new(1, 1)).await.unwrap();
    let before = log.file_len();
    log.purge(LogId::new(CommittedLeaderId::new(1, 1), 190))
        .await
        .unwrap();
    assert!(
        log.file_len() < before / 5,
        "{} -> {}",
        before,
        log.file_len()
    );
    append(&mut log, vec![entry(1, 201)]).await;
    drop(log);
    let mut log = LogStore::open(&dir).unwrap();
    assert_eq!(indices(&mut log).await, (191..=201).collect::<Vec<_>>());
    assert_eq!(log.vote(), Some(Vote::new(1, 1)));
    let st = log.get_log_state().await.unwrap();
    assert_eq!(st.last_purged_log_id.map(|l| l.index), Some(190));
}

#[tokio::test]
async fn appends_overwrite_preallocated_zeros_and_grow_the_file() {
    let dir = common::temp_dir("prealloc");
    let _g = Guard(dir.clone());
    let path = dir.join("raft.log");
    let mut log = LogStore::open(&dir).unwrap();
    append(&mut log, (1..=3).map(|i| entry(1, i)).collect()).await;
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(size, PREALLOC, "first append preallocates");
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes[log.file_len() as usize..].iter().all(|&b| b == 0));
    // Enough records to run past the preallocated end: the file grows by another chunk.
    let per = log.file_len() / 3;
    let n = PREALLOC / per + 10;
    for chunk in (4..4 + n).collect::<Vec<_>>().chunks(1000) {
        append(&mut log, chunk.iter().map(|&i| entry(1, i)).collect()).await;
    }
    assert!(log.file_len() > PREALLOC);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * PREALLOC);
    drop(log);
    // The zeros after the last record read as the end of the log.
    let mut log = LogStore::open(&dir).unwrap();
    assert_eq!(indices(&mut log).await, (1..4 + n).collect::<Vec<_>>());
}
