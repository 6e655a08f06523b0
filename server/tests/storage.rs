//! The durable log and the state machine: openraft's own storage test suite, plus
//! crash-shaped tests of the log file (reopen, torn tail, corrupt record, compaction).

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use fencelock_server::log_store::{LogStore, TailCut, FILE_HEADER_LEN, FILE_MAGIC, PREALLOC};
use fencelock_server::state_machine::{ServiceConfig, StateMachine};
use fencelock_server::types::{
    Cmd, Entry, LogId, Op, StorageError, TypeConfig, Vote, STAMPED_AT_APPLY,
};
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
            ops: vec![Op::Input(fencelock::Input::OpenSession {
                now: STAMPED_AT_APPLY,
                ttl: 10,
            })],
        }),
    }
}

/// Appends and waits until the flusher reports the entries durable.
async fn append(log: &mut LogStore, entries: Vec<Entry>) {
    log.blocking_append(entries).await.expect("append");
}

/// A log in `dir` with the groups of `acked` and then one last group of `last`: (the end of
/// the acknowledged groups, the end of the last one).
async fn acked_then_last(dir: &Path, acked: Vec<Entry>, last: Vec<Entry>) -> (u64, u64) {
    let mut log = LogStore::open(dir).unwrap();
    append(&mut log, acked).await;
    let acked_end = log.file_len();
    append(&mut log, last).await;
    (acked_end, log.file_len())
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
async fn a_torn_tail_is_cut_and_damage_is_refused() {
    let dir = common::temp_dir("torn");
    let _g = Guard(dir.clone());
    let last_group = {
        let mut log = LogStore::open(&dir).unwrap();
        // One append (one group) per entry.
        for i in 1..=4 {
            append(&mut log, vec![entry(1, i)]).await;
        }
        let at = log.file_len() as usize;
        append(&mut log, vec![entry(1, 5)]).await;
        at
    };
    let path = dir.join("raft.log");
    let good = LogStore::open(&dir).unwrap().file_len() as usize;
    // A write cut short by a crash: the sector holding its start landed in the
    // preallocated zeros, the sectors after it did not.
    let torn_end = {
        let mut log = LogStore::open(&dir).unwrap();
        append(&mut log, vec![entry_ops(1, 6, 600)]).await;
        log.file_len()
    };
    assert!(torn_end - good as u64 > 2 * 512, "the write spans sectors");
    lose(&path, (good as u64 / 512 + 1) * 512, torn_end);
    {
        let lost = std::fs::read(&path).unwrap();
        let mut log = LogStore::open(&dir).unwrap();
        assert_eq!(indices(&mut log).await, vec![1, 2, 3, 4, 5]);
        assert_eq!(log.file_len() as usize, good);
        // Cut in memory only until the start's checks pass: a start refused now would
        // leave the file as it was.
        assert_eq!(
            std::fs::read(&path).unwrap(),
            lost,
            "cut before finish_open"
        );
        log.finish_open().unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes[good..].iter().all(|&b| b == 0), "torn tail zeroed");
    // A flipped byte in the last group, which was written whole (no sector of it is
    // zero, as one a crash cut short would leave): damage to an acknowledged append, not a
    // torn one. Opening refuses and leaves the file as it was.
    let orig = std::fs::read(&path).unwrap();
    let mut bytes = orig.clone();
    bytes[good - 2] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let err = LogStore::open(&dir)
        .err()
        .expect("a damaged whole last group must refuse to open");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("refusing to cut it"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing cut");
    // The same append lost instead: the sector holding the group's end never written, so
    // its bytes there are the preallocated zeros. This group is small and lies within one
    // sector (asserted), so none of it landed: this shows only that the entries before it
    // survive and the log keeps working, not the cutting of a partly written group (that
    // is `a_torn_multi_page_append_with_a_lost_middle_page_is_cut` and
    // `a_torn_large_entry_whose_header_page_was_lost_is_cut`).
    let mut torn = orig.clone();
    let from = ((good - 1) / 512 * 512).max(last_group);
    assert_eq!(from, last_group, "the whole group lies in the lost sector");
    torn[from..good].fill(0);
    std::fs::write(&path, &torn).unwrap();
    let mut log = LogStore::open(&dir).unwrap();
    assert_eq!(indices(&mut log).await, vec![1, 2, 3, 4]);
    // And it keeps working after the cut.
    append(&mut log, vec![entry(2, 5)]).await;
    drop(log);
    let mut log = LogStore::open(&dir).unwrap();
    assert_eq!(indices(&mut log).await, vec![1, 2, 3, 4, 5]);
    drop(log);
    // A flipped byte in a group that has valid groups after it is not a torn append:
    // opening refuses, and the file is left as it was (nothing acknowledged is cut).
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[FILE_HEADER_LEN + 30] ^= 0xff;
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
    let header = FILE_HEADER_LEN as u64;
    assert_eq!(size, header + PREALLOC, "first append preallocates");
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes[log.file_len() as usize..].iter().all(|&b| b == 0));
    // Enough records to run past the preallocated end: the file grows by another chunk.
    let per = (log.file_len() - header - 20) / 3; // one record, without the headers
    let n = PREALLOC / per + 10;
    for chunk in (4..4 + n).collect::<Vec<_>>().chunks(1000) {
        append(&mut log, chunk.iter().map(|&i| entry(1, i)).collect()).await;
    }
    assert!(log.file_len() > PREALLOC);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        header + 2 * PREALLOC
    );
    drop(log);
    // The zeros after the last record read as the end of the log.
    let mut log = LogStore::open(&dir).unwrap();
    assert_eq!(indices(&mut log).await, (1..4 + n).collect::<Vec<_>>());
}

const PAGE: u64 = 4096;

fn entry_ops(term: u64, index: u64, ops: usize) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Cmd {
            now: Some(index),
            ops: vec![
                Op::Input(fencelock::Input::OpenSession {
                    now: STAMPED_AT_APPLY,
                    ttl: 10,
                });
                ops
            ],
        }),
    }
}

/// True when every byte of the file at `path` from `at` on is zero (cut, or never written).
fn zeros_from(path: &std::path::Path, at: u64) -> bool {
    std::fs::read(path).unwrap()[at as usize..]
        .iter()
        .all(|&b| b == 0)
}

/// Overwrites `from..to` of the file with zeros: what a preallocated page reads as when
/// its write-back had not happened before the power went.
fn lose(path: &std::path::Path, from: u64, to: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&vec![0u8; (to - from) as usize], from)
        .unwrap();
}

/// One append of many entries (a follower catching up) spans pages; power is lost before
/// its fdatasync and a middle page never reached the disk while later ones did. Nothing of
/// it was acknowledged: opening cuts it and keeps the acknowledged entries. (The
/// per-record rule used to refuse to start here.)
#[tokio::test]
async fn a_torn_multi_page_append_with_a_lost_middle_page_is_cut() {
    let dir = common::temp_dir("torn-middle");
    let _g = Guard(dir.clone());
    let path = dir.join("raft.log");
    let (acked_end, end) = acked_then_last(
        &dir,
        vec![entry_ops(1, 1, 1), entry_ops(1, 2, 1)],
        (3..2000).map(|i| entry_ops(1, i, 1)).collect(),
    )
    .await;
    assert!(end - acked_end > 3 * PAGE, "the append spans pages");
    let p = (acked_end / PAGE + 2) * PAGE;
    lose(&path, p, p + PAGE);
    let mut log = LogStore::open(&dir).expect("a torn unacknowledged append is cut, not fatal");
    assert_eq!(indices(&mut log).await, vec![1, 2]);
    assert_eq!(log.file_len(), acked_end);
    log.finish_open().unwrap();
    drop(log);
    assert!(zeros_from(&path, acked_end), "torn bytes zeroed");
}

/// A last group of many sectors (one entry of several KiB) written whole — none of its
/// sectors is still zero, as a write cut short by a crash leaves one — and then damaged:
/// a node refuses to start on it and cuts nothing (the group may hold acknowledged
/// entries or a vote), and force-new-cluster's open, which accepts data loss, cuts it and
/// says what it cut. The same for a whole group whose header is damaged, in any field:
/// the header's own checksum tells its damage from a torn write.
#[tokio::test]
async fn a_damaged_whole_last_group_is_refused_but_cut_by_force_new_cluster() {
    let dir = common::temp_dir("damaged-whole");
    let _g = Guard(dir.clone());
    let path = dir.join("raft.log");
    let (acked_end, end) =
        acked_then_last(&dir, vec![entry_ops(1, 1, 1)], vec![entry_ops(1, 2, 1500)]).await;
    assert!(end - acked_end > 8 * 512, "the group spans many sectors");
    let orig = std::fs::read(&path).unwrap();
    let written = orig.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    assert!(
        written > end - 16 && written <= end,
        "the group ends the log"
    );
    let at = acked_end as usize;
    // (what to damage, refused by a plain open, cut as damaged)
    let cases = [
        (at + (end - acked_end) as usize / 2, true, true), // a payload byte
        (at + 22, true, true),                             // the payload's checksum
        (at + 17, true, true),                             // the header's checksum
        (at + 13, true, true),                             // the length
        (at + 5, true, true),                              // the sequence number
        (at, true, true),                                  // the group's magic
    ];
    for (byte, refused, damaged) in cases {
        let mut bytes = orig.clone();
        bytes[byte] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
        if refused {
            let err = LogStore::open(&dir)
                .err()
                .expect("a node refuses a damaged whole last group");
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
            let msg = err.to_string();
            assert!(msg.contains("refusing to cut it"), "{msg}");
            assert!(
                msg.contains("force-new-cluster --accept-data-loss"),
                "{msg}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing cut");
        }
        let (mut log, cut) = LogStore::open_accepting_loss(&dir).expect("cut, data loss accepted");
        assert_eq!(
            cut,
            Some(TailCut {
                at: acked_end,
                bytes: written - acked_end,
                damaged
            }),
            "byte {byte}"
        );
        assert_eq!(indices(&mut log).await, vec![1]);
        assert_eq!(log.file_len(), acked_end);
        drop(log);
        let after = std::fs::read(&path).unwrap();
        assert!(after[at..].iter().all(|&b| b == 0), "the group is zeroed");
        // What is left opens as a node's log.
        let mut log = LogStore::open(&dir).unwrap();
        assert_eq!(indices(&mut log).await, vec![1]);
    }
}

/// A node start refused after its log was read (here for a snapshot a later build wrote,
/// which the state machine reads after the log) leaves a torn tail in the file as it
/// found it: the cut waits for the start's checks. The start that passes them cuts it.
#[tokio::test]
async fn a_start_refused_after_the_log_was_read_leaves_its_torn_tail() {
    use fencelock_server::net::TcpNetwork;
    use fencelock_server::node::{Node, NodeConfig};
    let dir = common::temp_dir("torn-refused");
    let _g = Guard(dir.clone());
    let path = dir.join("raft.log");
    let (acked_end, end) = acked_then_last(
        &dir,
        vec![entry_ops(1, 0, 1), entry_ops(1, 1, 1)],
        vec![entry_ops(1, 2, 6000)],
    )
    .await;
    assert!(end - acked_end > PAGE, "the entry spans pages");
    lose(&path, acked_end, (acked_end / PAGE + 1) * PAGE);
    let torn = std::fs::read(&path).unwrap();
    assert!(torn[end as usize - 1] != 0, "the tail's last page landed");
    let later = dir.join("snapshot.bin");
    std::fs::write(&later, b"FLSNAP\0\x09 and what a later build put after it").unwrap();
    let e = Node::start(NodeConfig::new(1, dir.clone()), TcpNetwork::default())
        .await
        .err()
        .expect("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("later build"), "{e}");
    assert!(
        std::fs::read(&path).unwrap() == torn,
        "the refused start cut the tail"
    );
    std::fs::remove_file(&later).unwrap();
    let node = Node::start(NodeConfig::new(1, dir.clone()), TcpNetwork::default())
        .await
        .expect("starts");
    node.shutdown().await;
    assert!(
        zeros_from(&path, acked_end),
        "the started node cut the tail"
    );
}

/// A log in `dir` of entry 1, then a large entry 2 spanning pages whose first page (its
/// header) was lost and later pages written: a torn last write. Returns the log's path and
/// where the torn group ended.
async fn torn_large_entry(dir: &Path) -> (PathBuf, u64) {
    let path = dir.join("raft.log");
    let (acked_end, end) =
        acked_then_last(dir, vec![entry_ops(1, 1, 1)], vec![entry_ops(1, 2, 6000)]).await;
    assert!(end - acked_end > 2 * PAGE, "the entry spans pages");
    lose(&path, acked_end, (acked_end / PAGE + 1) * PAGE);
    (path, end)
}

/// A torn tail left for the start's checks is cut by the first write if nothing cut it
/// before (a store opened without `finish_open`): an append or a vote shorter than the
/// torn group, written where it began, leaves none of its sectors behind, and the log
/// reopens with the new write last. (Left behind, they would follow the new group, none of
/// their sectors zero, and the next open would take them for damage and refuse.)
#[tokio::test]
async fn the_first_write_cuts_a_torn_tail_left_for_the_checks() {
    for vote in [false, true] {
        let dir = common::temp_dir(if vote { "torn-vote" } else { "torn-append" });
        let _g = Guard(dir.clone());
        let (path, end) = torn_large_entry(&dir).await;
        {
            let mut log = LogStore::open(&dir).expect("cut, not fatal");
            assert_eq!(indices(&mut log).await, vec![1]);
            if vote {
                log.save_vote(&Vote::new(2, 1)).await.unwrap();
            } else {
                append(&mut log, vec![entry(1, 2)]).await;
            }
        }
        let mut log = LogStore::open(&dir).expect("the first write cut the torn tail");
        let len = log.file_len();
        if vote {
            assert_eq!(indices(&mut log).await, vec![1]);
            assert_eq!(log.vote(), Some(Vote::new(2, 1)));
        } else {
            assert_eq!(indices(&mut log).await, vec![1, 2]);
        }
        assert!(len < end, "the new group is shorter than the torn one");
        assert!(zeros_from(&path, len), "the torn group's sectors remain");
    }
}

/// A large entry spans pages; the page holding its header was lost, later pages written.
#[tokio::test]
async fn a_torn_large_entry_whose_header_page_was_lost_is_cut() {
    let dir = common::temp_dir("torn-header");
    let _g = Guard(dir.clone());
    torn_large_entry(&dir).await;
    let mut log = LogStore::open(&dir).expect("cut, not fatal");
    assert_eq!(indices(&mut log).await, vec![1]);
}

/// A flipped length field in an acknowledged group with groups after it is damage, not a
/// torn tail: the checksum covers the length, a valid group follows, so opening refuses
/// and cuts nothing. (It used to cut everything from there silently.)
#[tokio::test]
async fn a_corrupt_length_in_the_middle_refuses_to_open() {
    let dir = common::temp_dir("corrupt-len");
    let _g = Guard(dir.clone());
    let path = dir.join("raft.log");
    {
        let mut log = LogStore::open(&dir).unwrap();
        for i in 1..=20 {
            append(&mut log, vec![entry_ops(1, i, 1)]).await;
        }
    }
    let before = std::fs::read(&path).unwrap();
    // The first group's length field (after the file header, magic and sequence number):
    // its top byte set, a length far past the end of the file.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0x7f], (FILE_HEADER_LEN + 15) as u64)
        .unwrap();
    drop(f);
    let err = LogStore::open(&dir).err().expect("must refuse");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    let after = std::fs::read(&path).unwrap();
    assert_eq!(
        after[FILE_HEADER_LEN + 16..],
        before[FILE_HEADER_LEN + 16..],
        "nothing cut"
    );
}

/// Damage to the group before the last, when the last is a vote granted to a candidate
/// (its record ends in a zero: the vote is not committed). The scan for a valid group
/// after the damage must see that last group; it once stopped at the last nonzero byte,
/// missed the vote (whose group then ended in that zero), took the damage for a torn
/// tail and cut both groups, vote included. A group now ends in a
/// nonzero byte of its own.
#[tokio::test]
async fn damage_before_a_last_vote_that_ends_in_a_zero_refuses_to_open() {
    let dir = common::temp_dir("damaged-before-vote");
    let _g = Guard(dir.clone());
    let path = dir.join("raft.log");
    let damaged_at = {
        let mut log = LogStore::open(&dir).unwrap();
        for i in 1..=3 {
            append(&mut log, vec![entry(1, i)]).await;
        }
        let at = log.file_len();
        append(&mut log, vec![entry(1, 4)]).await;
        log.save_vote(&Vote::new(2, 3)).await.unwrap();
        at
    };
    let before = std::fs::read(&path).unwrap();
    let end = before.iter().rposition(|&b| b != 0).unwrap() + 1;
    let vote_group = LogStore::open(&dir).unwrap().file_len() as usize;
    assert_eq!(
        before[vote_group - 2],
        0,
        "the vote's record ends in a zero byte"
    );
    assert_eq!(end, vote_group, "its group in a nonzero one");
    // The fourth group's length: its top byte set, a length far past the end of the file.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0x7f], damaged_at + 15).unwrap();
    drop(f);
    let damaged = std::fs::read(&path).unwrap();
    let err = LogStore::open(&dir).err().expect("must refuse");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    assert!(
        err.to_string().contains("with a valid group after it"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), damaged, "nothing cut");
}

/// A file that is not a log of this format (an older version's, or anything else) is
/// refused and left alone — never "repaired" into an empty log.
#[tokio::test]
async fn a_file_of_another_format_is_refused_untouched() {
    let dir = common::temp_dir("foreign");
    let _g = Guard(dir.clone());
    let path = dir.join("raft.log");
    std::fs::write(&path, b"\x10\x00\x00\x00 an older log's first record").unwrap();
    let before = std::fs::read(&path).unwrap();
    let err = LogStore::open(&dir).err().expect("must refuse");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

/// The committed log id is not written on its own; it rides in the next group and is
/// there after a reopen.
#[tokio::test]
async fn the_committed_id_rides_in_the_next_group() {
    let dir = common::temp_dir("committed");
    let _g = Guard(dir.clone());
    let id = LogId::new(CommittedLeaderId::new(1, 1), 2);
    {
        let mut log = LogStore::open(&dir).unwrap();
        append(&mut log, vec![entry(1, 1), entry(1, 2)]).await;
        let len = log.file_len();
        log.save_committed(Some(id)).await.unwrap();
        assert_eq!(log.file_len(), len, "no write of its own");
        append(&mut log, vec![entry(1, 3)]).await;
    }
    let mut log = LogStore::open(&dir).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(id));
}

/// A crash while a new log's header was being written leaves a prefix of it: the log
/// starts afresh instead of refusing (there was nothing in it).
#[tokio::test]
async fn a_cut_short_header_of_a_new_log_starts_afresh() {
    let dir = common::temp_dir("short-header");
    let _g = Guard(dir.clone());
    std::fs::write(dir.join("raft.log"), &FILE_MAGIC[..3]).unwrap();
    let mut log = LogStore::open(&dir).expect("a header prefix is a new log");
    append(&mut log, vec![entry(1, 1)]).await;
    drop(log);
    let mut log = LogStore::open(&dir).unwrap();
    assert_eq!(indices(&mut log).await, vec![1]);
}
