//! `Request::Backup` on an in-process three-node cluster whose nodes snapshot every 100
//! entries (and purge the log before): the leader rebuilds the state at the backup's log
//! index — from the empty state while the log holds everything, from its snapshot after —
//! and the bytes are those of the live state at that index (what `GET /snapshot` encodes);
//! pages asked one by one, with writes between them, fit into that same backup; an index
//! compacted into a later snapshot, one not applied yet and an offset past the end are
//! refused. And the client's side, against a scripted node serving two real backups: a
//! backup whose index is compacted between pages starts again (three starts at most),
//! and pages that do not fit together or make a backup that fails its checks are refused.
//! (The admin-only rule, the CLI and restoring the file: tests/lifecycle.rs.)

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{acquire, keep_alive, open, release, session_of, Cluster};
use fencelock::Wait;
use fencelock_server::client::Client;
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

/// The backup requests a scripted node got: (index pinned, offset), in order.
type Asked = Arc<Mutex<Vec<(Option<u64>, u64)>>>;

/// A node of the client protocol that answers each `Request::Backup` with what `answer`
/// says for it, and records every backup request it gets (index pinned, offset).
async fn scripted_node(
    answer: impl Fn(Option<u64>, u64, u32) -> Result<Reply, ClientError> + Send + Sync + 'static,
) -> (String, Asked) {
    use fencelock_server::frame::{self, MAX_CLIENT_FRAME};
    use fencelock_server::protocol::{ClientFrame, ServerFrame};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let asked: Asked = Arc::default();
    let (answer, log) = (Arc::new(answer), asked.clone());
    tokio::spawn(async move {
        while let Ok((sock, _)) = l.accept().await {
            let (answer, log) = (answer.clone(), log.clone());
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut r = tokio::io::BufReader::new(r);
                while let Ok(Some(f)) =
                    frame::read::<_, ClientFrame>(&mut r, MAX_CLIENT_FRAME).await
                {
                    let result = match f.req {
                        Request::Backup {
                            index,
                            offset,
                            max_bytes,
                        } => {
                            log.lock().unwrap().push((index, offset));
                            answer(index, offset, max_bytes)
                        }
                        other => Err(ClientError::BadRequest(format!("not scripted: {other:?}"))),
                    };
                    let reply = ServerFrame::Reply { id: f.id, result };
                    if frame::write(&mut w, &reply).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, asked)
}

/// Page `offset..offset + max` of `bytes`, a backup taken at `index`.
fn page_of(bytes: &[u8], index: u64, offset: u64, max: u32) -> Result<Reply, ClientError> {
    let start = offset as usize;
    let end = bytes.len().min(start + max as usize);
    Ok(Reply::Backup(BackupPage {
        bytes: bytes[start..end].to_vec(),
        total: bytes.len() as u64,
        index,
        node: 7,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_starts_a_backup_again_when_its_index_is_compacted_and_checks_what_it_gets() {
    // Two real backups of one cluster, at two log indices.
    let c = Cluster::start("backup-client", 300).await;
    let s = session_of(&c.propose(open(600_000)).await);
    c.propose(acquire(s, "held", Wait::None, Some(1))).await;
    let (old, old_at) = live(&c).await;
    c.propose(acquire(s, "later", Wait::None, Some(2))).await;
    let (new, new_at) = live(&c).await;
    c.shutdown().await;
    assert!(old_at < new_at && old.len() > 80 && new.len() > 80);
    let compacted = move |i: u64| {
        Err(ClientError::BadRequest(format!(
            "log index {i} was compacted into a later snapshot (at {new_at}): start the backup again"
        )))
    };

    // The old index is compacted after its first page: the backup starts again from the
    // first page, gets the new index, and is the new backup whole.
    let starts = Arc::new(AtomicUsize::new(0));
    let (o, n, k) = (old.clone(), new.clone(), starts.clone());
    let (addr, asked) = scripted_node(move |index, offset, max| match index {
        // (A later page without the index is refused, failing the backup, and shows in
        // the requests checked below.)
        None if offset != 0 => Err(ClientError::BadRequest(
            "a later page without the index".into(),
        )),
        None => match k.fetch_add(1, Ordering::SeqCst) {
            0 => page_of(&o, old_at, 0, max),
            _ => page_of(&n, new_at, 0, max),
        },
        Some(i) if i == old_at => compacted(i),
        Some(i) => page_of(&n, i, offset, max),
    })
    .await;
    let (bytes, last) = Client::new(vec![addr])
        .backup_paged(40)
        .await
        .expect("a backup");
    assert!(bytes == new, "not the backup at the new index");
    assert_eq!((last.index, last.node), (new_at, 7));
    let asked = asked.lock().unwrap().clone();
    assert_eq!(
        &asked[..3],
        &[(None, 0), (Some(old_at), 40), (None, 0)],
        "{asked:?}"
    );
    let pages = new.len().div_ceil(40);
    assert_eq!(asked.len(), 2 + pages, "{asked:?}");
    assert!(asked[3..]
        .iter()
        .enumerate()
        .all(|(k, a)| *a == (Some(new_at), 40 * (k as u64 + 1))));

    // Compacted every time: three starts, then the refusal.
    let o = old.clone();
    let (addr, asked) = scripted_node(move |index, offset, max| match index {
        None => page_of(&o, old_at, offset, max),
        Some(i) => compacted(i),
    })
    .await;
    let e = Client::new(vec![addr])
        .backup_paged(40)
        .await
        .expect_err("compacted");
    assert!(
        matches!(&e, ClientError::BadRequest(m) if m.starts_with(&format!("log index {old_at} was compacted"))),
        "{e:?}"
    );
    let asked = asked.lock().unwrap().clone();
    let starts = asked.iter().filter(|a| a.0.is_none()).count();
    assert_eq!((starts, asked.len()), (3, 6), "{asked:?}");

    // A later page of another index does not fit, nor does one past the total.
    for (what, wrong) in [("index", 0u8), ("total", 1), ("empty", 2)] {
        let (o, n) = (old.clone(), new.clone());
        let (addr, _) = scripted_node(move |index, offset, max| match (index, wrong) {
            (None, _) => page_of(&o, old_at, offset, max),
            (Some(_), 0) => page_of(&n, new_at, offset, max),
            (Some(_), 1) => match page_of(&o, old_at, offset, max) {
                Ok(Reply::Backup(p)) => Ok(Reply::Backup(BackupPage {
                    total: offset + 1,
                    ..p
                })),
                r => r,
            },
            (Some(_), _) => Ok(Reply::Backup(BackupPage {
                bytes: Vec::new(),
                total: o.len() as u64,
                index: old_at,
                node: 7,
            })),
        })
        .await;
        let e = Client::new(vec![addr])
            .backup_paged(40)
            .await
            .expect_err(what);
        assert!(
            matches!(&e, ClientError::Unavailable(m) if m.starts_with("a page of the backup does not fit: 40 bytes received, ")),
            "{what}: {e:?}"
        );
    }

    // Pages that fit but make a backup that fails its checks (one byte changed).
    let mut bad = old.clone();
    bad[old.len() / 2] ^= 0x20;
    assert!(check_backup(&bad).is_err());
    let (addr, _) = scripted_node(move |index, offset, max| {
        page_of(&bad, index.unwrap_or(old_at), offset, max)
    })
    .await;
    let e = Client::new(vec![addr])
        .backup_paged(40)
        .await
        .expect_err("a bad backup");
    assert!(
        matches!(&e, ClientError::Unavailable(m) if m.starts_with("node 7 sent a backup that fails this build's check: ")),
        "{e:?}"
    );
}
