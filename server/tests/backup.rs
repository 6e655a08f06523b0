//! `Request::Backup` on an in-process three-node cluster whose nodes snapshot every 100
//! entries (and purge the log before): the leader rebuilds the state at the backup's log
//! index — from the empty state while the log holds everything, from its snapshot after —
//! and the bytes are those of the live state at that index (what `GET /snapshot` encodes);
//! pages asked one by one, with writes between them, fit into that same backup; an index
//! compacted into a later snapshot, one not applied yet and an offset past the end are
//! refused. (The admin-only rule, the CLI and restoring the file: tests/lifecycle.rs.)

mod common;

use std::time::{Duration, Instant};

use common::{acquire, keep_alive, open, release, session_of, Cluster};
use fencelock::Wait;
use fencelock_server::protocol::{BackupPage, ClientError, Reply, Request};
use fencelock_server::state_machine::{backup, check_backup, PushSink};

async fn page(
    c: &Cluster,
    index: Option<u64>,
    offset: u64,
    max_bytes: u32,
) -> Result<BackupPage, ClientError> {
    let node = c.nodes[&c.leader().await].clone();
    let (sink, _rx, _) = PushSink::new(8);
    let req = Request::Backup {
        index,
        offset,
        max_bytes,
    };
    match node.handle_request(req, node.next_conn_id(), &sink).await? {
        Reply::Backup(p) => Ok(p),
        r => panic!("unexpected {r:?}"),
    }
}

/// The whole backup at `index`, in pages of `max_bytes`, calling `between` after each page.
async fn paged(
    c: &Cluster,
    index: Option<u64>,
    max_bytes: u32,
    mut between: impl AsyncFnMut(),
) -> (Vec<u8>, u64, usize) {
    let mut bytes = Vec::new();
    let mut pinned = index;
    let mut pages = 0;
    loop {
        let p = page(c, pinned, bytes.len() as u64, max_bytes)
            .await
            .expect("a page");
        pages += 1;
        assert!(!p.bytes.is_empty() && p.bytes.len() <= max_bytes as usize);
        assert!(pinned.is_none_or(|i| i == p.index), "the index moved");
        pinned = Some(p.index);
        bytes.extend_from_slice(&p.bytes);
        assert!(bytes.len() as u64 <= p.total);
        if bytes.len() as u64 == p.total {
            return (bytes, p.index, pages);
        }
        between().await;
    }
}

/// The live state's backup on the leader, and its log index.
async fn live(c: &Cluster) -> (Vec<u8>, u64) {
    let leader = c.nodes[&c.leader().await].clone();
    let (bytes, at) = backup(&leader.shared).expect("encodes");
    (bytes, at.expect("something applied").index)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_is_the_state_at_its_index_in_pages_that_fit_whatever_is_written_between() {
    let c = Cluster::start("backup", 300).await;
    let s = session_of(&c.propose(open(600_000)).await);
    c.propose(acquire(s, "held", Wait::None, Some(1))).await;

    // Before any snapshot: rebuilt from the empty state, the live state's bytes.
    let leader = c.nodes[&c.leader().await].clone();
    assert!(leader.log.last_purged().is_none());
    let (want, at) = live(&c).await;
    let one = page(&c, Some(at), 0, 0).await.expect("one page");
    assert_eq!((one.total, one.index), (want.len() as u64, at));
    assert!(one.bytes == want, "the rebuilt state is not the live one");
    assert_eq!(check_backup(&one.bytes), Ok(at));

    // In pages of 40 bytes, with writes after every page: the same backup.
    let mut k = 10;
    let (bytes, index, pages) = paged(&c, None, 40, async || {
        c.propose(acquire(s, "moving", Wait::None, Some(k))).await;
        c.propose(release(s, "moving", Some(k + 1))).await;
        k += 2;
    })
    .await;
    assert!(pages > 3, "{pages} pages");
    let whole = page(&c, Some(index), 0, 0).await.expect("one page");
    assert!(
        bytes == whole.bytes,
        "pages of one index differ from it whole"
    );
    assert_eq!(check_backup(&bytes), Ok(index));
    assert!(k > 12, "nothing was written between pages");

    // After snapshots and a purge: rebuilt from the snapshot and the log left.
    c.commit_until_purged_past(&leader, s, index + 1).await;
    let e = page(&c, Some(index), 0, 0).await.expect_err("compacted");
    assert!(
        matches!(&e, ClientError::BadRequest(m) if m.starts_with(&format!("log index {index} was compacted into a later snapshot (at ")) && m.ends_with("): start the backup again")),
        "{e:?}"
    );
    // The leader's snapshot is at or before what it has applied: a backup at the latest
    // index starts from it (a few more entries after it, so the log is replayed too).
    let start = Instant::now();
    while leader.raft.metrics().borrow().snapshot.is_none() {
        assert!(start.elapsed() < Duration::from_secs(10), "no snapshot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.propose(keep_alive(s)).await;
    let (want, at) = live(&c).await;
    let snap = leader.raft.metrics().borrow().snapshot.map(|l| l.index);
    assert!(snap.is_some_and(|i| i <= at), "{snap:?} {at}");
    let one = page(&c, Some(at), 0, 0).await.expect("one page");
    assert!(
        one.bytes == want,
        "rebuilt from the snapshot: not the live state"
    );
    // At the snapshot's own index: the snapshot alone, nothing to replay.
    let s_index = snap.expect("a snapshot");
    let p = page(&c, Some(s_index), 0, 0)
        .await
        .expect("the backup at the snapshot's index");
    assert_eq!(check_backup(&p.bytes), Ok(s_index));

    // Refused: nothing at index 0, nothing past what is applied, no offset past the end.
    for i in [0, at + 1_000_000] {
        let e = page(&c, Some(i), 0, 0).await.expect_err("no such index");
        assert!(
            matches!(&e, ClientError::BadRequest(m) if m.starts_with(&format!("no backup at log index {i}: this leader has applied log indices 1 to "))),
            "{e:?}"
        );
    }
    let e = page(&c, Some(at), want.len() as u64 + 1, 0)
        .await
        .expect_err("past the end");
    assert!(
        matches!(&e, ClientError::BadRequest(m) if *m == format!("offset {} is past the end of the backup at log index {at} ({} bytes)", want.len() + 1, want.len())),
        "{e:?}"
    );
    c.shutdown().await;
}
