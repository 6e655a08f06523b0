//! A node's snapshot file damaged on disk: a flipped byte never lets a node serve wrong
//! state, so it never leads to a second holder. With the log compacted past the snapshot the
//! node refuses to start (naming the file) and changes nothing; with the whole log still
//! there, the snapshot is moved aside and the state rebuilt from the log.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{acquire, granted, keep_alive, open, session_of, Cluster};
use fencelock::{Reply as CoreReply, SessionId, Token, Wait};
use fencelock_server::node::Node;
use fencelock_server::types::NodeId;

/// Flips one byte in the middle of the file's payload; returns the original bytes.
fn flip_middle_byte(path: &Path) -> Vec<u8> {
    let orig = std::fs::read(path).expect("snapshot exists");
    let mut b = orig.clone();
    let i = b.len() / 2 + 7;
    b[i] ^= 0x01;
    std::fs::write(path, &b).unwrap();
    orig
}

/// The lock's holder on every live node (sessions), after they converged.
async fn holders_everywhere(c: &Cluster, lock: &str) -> Vec<Vec<u64>> {
    c.converged().await;
    c.nodes
        .values()
        .map(|n| {
            n.shared
                .state()
                .svc
                .holders(lock)
                .map(|h| h.session.0)
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_snapshot_over_a_compacted_log_refuses_to_start_and_never_grants_twice() {
    let mut c = Cluster::start("snapcorrupt", 300).await;
    let (a, b, tok) = a_holds_x_past_a_purge(&mut c).await;
    // The leader is stopped and a byte of its snapshot flipped.
    let victim = c.leader().await;
    c.kill(victim).await;
    let path = c.base.join(format!("n{victim}/snapshot.bin"));
    let orig = flip_middle_byte(&path);
    let damaged = std::fs::read(&path).unwrap();
    let err = Node::start(c.config(victim), c.net.factory(victim))
        .await
        .err()
        .expect("a corrupt snapshot over a compacted log must not start");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("refusing to start"), "{msg}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        damaged,
        "a refused start changes nothing"
    );

    // The other two still agree that A holds x, and B cannot take it.
    c.leader().await;
    for h in holders_everywhere(&c, "x").await {
        assert_eq!(h, vec![a.0]);
    }
    let r = c.propose(acquire(b, "x", Wait::None, Some(1))).await;
    assert_eq!(r.reply, Ok(CoreReply::Busy), "a second holder: {r:?}");

    // The way back for a damaged disk is a replacement; here the good bytes are put back
    // and the node rejoins with the same holder.
    std::fs::write(&path, orig).unwrap();
    c.boot(victim).await;
    for h in holders_everywhere(&c, "x").await {
        assert_eq!(h, vec![a.0]);
    }
    let tokens: Vec<_> = c.nodes[&victim]
        .shared
        .state()
        .svc
        .holders("x")
        .map(|h| h.token)
        .collect();
    assert_eq!(tokens, vec![tok]);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_snapshot_over_a_whole_log_is_moved_aside_and_rebuilt_from_the_log() {
    let mut c = Cluster::start("snaprebuild", 300).await;
    let a = session_of(&c.propose(open(60_000)).await);
    let b = session_of(&c.propose(open(60_000)).await);
    let tok = granted(&c.propose(acquire(a, "x", Wait::None, Some(1))).await).expect("A granted");
    for _ in 0..10 {
        c.propose(keep_alive(a)).await;
    }
    c.converged().await;
    let victim = c.leader().await;
    // A snapshot early in the log: openraft keeps the last 25 entries, so nothing is purged.
    c.nodes[&victim].raft.trigger().snapshot().await.unwrap();
    let path = c.base.join(format!("n{victim}/snapshot.bin"));
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no snapshot was built"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.nodes[&victim].log.last_purged(), None);
    c.kill(victim).await;
    let damaged = {
        flip_middle_byte(&path);
        std::fs::read(&path).unwrap()
    };
    c.boot(victim).await;
    let aside = c.base.join(format!("n{victim}/snapshot.bin.corrupt"));
    assert_eq!(std::fs::read(&aside).unwrap(), damaged, "moved aside, kept");
    // Rebuilt from the log: byte-identical with the others, A still the only holder.
    for h in holders_everywhere(&c, "x").await {
        assert_eq!(h, vec![a.0]);
    }
    let tokens: Vec<_> = c.nodes[&victim]
        .shared
        .state()
        .svc
        .holders("x")
        .map(|h| h.token)
        .collect();
    assert_eq!(tokens, vec![tok]);
    let r = c.propose(acquire(b, "x", Wait::None, Some(1))).await;
    assert_eq!(r.reply, Ok(CoreReply::Busy), "a second holder: {r:?}");
    c.shutdown().await;
}

/// A snapshot file that is gone while the log was compacted past it cannot be rebuilt from
/// this node's own files either: the node refuses to start, naming the file, instead of
/// starting from the empty state over a log whose first entries are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_snapshot_over_a_compacted_log_refuses_to_start() {
    let mut c = Cluster::start("snapmissing", 300).await;
    let (a, b, _) = a_holds_x_past_a_purge(&mut c).await;
    let victim = c.leader().await;
    c.kill(victim).await;
    let path = c.base.join(format!("n{victim}/snapshot.bin"));
    let saved = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let started = tokio::time::timeout(
        Duration::from_secs(10),
        Node::start(c.config(victim), c.net.factory(victim)),
    )
    .await
    .expect("start returns");
    let err = match started {
        Ok(n) => {
            let s = n.shared.state();
            panic!(
                "started without its snapshot over a log purged to {:?}: applied {:?}, {} sessions",
                n.log.last_purged(),
                s.last_applied,
                s.svc.usage().sessions
            )
        }
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("refusing to start"), "{msg}");
    assert!(!path.exists(), "a refused start changes nothing");
    c.leader().await;
    for h in holders_everywhere(&c, "x").await {
        assert_eq!(h, vec![a.0]);
    }
    let r = c.propose(acquire(b, "x", Wait::None, Some(1))).await;
    assert_eq!(r.reply, Ok(CoreReply::Busy), "a second holder: {r:?}");
    std::fs::write(&path, saved).unwrap();
    c.boot(victim).await;
    for h in holders_everywhere(&c, "x").await {
        assert_eq!(h, vec![a.0]);
    }
    c.shutdown().await;
}

/// Starts the stopped node `victim` with its `raft.log` removed, then emptied: each start
/// must be refused (`InvalidData`, naming the log, "refusing to start") and create
/// nothing. Returns the two messages. The log is left empty.
async fn refused_without_its_log(c: &Cluster, victim: NodeId) -> Vec<String> {
    let log = c.base.join(format!("n{victim}/raft.log"));
    let mut msgs = Vec::new();
    for empty in [false, true] {
        if empty {
            std::fs::write(&log, b"").unwrap();
        } else {
            std::fs::remove_file(&log).unwrap();
        }
        let err = match Node::start(c.config(victim), c.net.factory(victim)).await {
            Ok(n) => panic!(
                "started without its log (empty file: {empty}): vote {:?}",
                n.log.vote()
            ),
            Err(e) => e,
        };
        let msg = err.to_string();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{msg}");
        assert!(msg.contains(&log.display().to_string()), "{msg}");
        assert!(msg.contains("refusing to start"), "{msg}");
        assert_eq!(log.exists(), empty, "a refused start creates nothing");
        msgs.push(msg);
    }
    msgs
}

/// `raft.log` holds the node's vote and every entry after its snapshot. A data directory
/// whose log is gone (or empty) beside a snapshot lost them: starting from the snapshot
/// alone would forget whom it voted for in its term (it could vote twice) and the entries
/// it acknowledged. The node refuses to start, naming the file, and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_log_beside_a_snapshot_refuses_to_start() {
    let mut c = Cluster::start("logmissing", 300).await;
    let a = session_of(&c.propose(open(60_000)).await);
    granted(&c.propose(acquire(a, "x", Wait::None, Some(1))).await).expect("A granted");
    for _ in 0..10 {
        c.propose(keep_alive(a)).await;
    }
    c.converged().await;
    let victim = c.leader().await;
    c.nodes[&victim].raft.trigger().snapshot().await.unwrap();
    let snap = c.base.join(format!("n{victim}/snapshot.bin"));
    let start = Instant::now();
    while !snap.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no snapshot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.kill(victim).await;
    let log = c.base.join(format!("n{victim}/raft.log"));
    let saved = std::fs::read(&log).unwrap();
    for msg in refused_without_its_log(&c, victim).await {
        // `snapshot restore` writes the snapshot before the log: the way out of one that
        // was interrupted in between is named too.
        assert!(
            msg.contains("after an interrupted `snapshot restore`, empty the directory"),
            "{msg}"
        );
    }
    std::fs::write(&log, saved).unwrap();
    c.boot(victim).await;
    for h in holders_everywhere(&c, "x").await {
        assert_eq!(h, vec![a.0]);
    }
    c.shutdown().await;
}

/// Without a snapshot too: a node's first start writes its log's header before it records
/// its `settings` file, so a directory with that file and no log (or a log shorter than
/// its header) lost its vote and entries. It used to start as a fresh node — no vote, no
/// entries — and could vote twice in a term. It refuses, naming both
/// files, and creates nothing; with its log back it starts and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_log_without_a_snapshot_refuses_to_start() {
    let mut c = Cluster::start("lognosnap", 300).await;
    let a = session_of(&c.propose(open(60_000)).await);
    granted(&c.propose(acquire(a, "x", Wait::None, Some(1))).await).expect("A granted");
    c.converged().await;
    let victim = c.leader().await;
    c.kill(victim).await;
    let dir = c.base.join(format!("n{victim}"));
    assert!(!dir.join("snapshot.bin").exists(), "no snapshot yet");
    assert!(dir.join(fencelock_server::settings::FILE).exists());
    let log = dir.join("raft.log");
    let saved = std::fs::read(&log).unwrap();
    for msg in refused_without_its_log(&c, victim).await {
        assert!(msg.contains("settings"), "{msg}");
    }
    std::fs::write(&log, saved).unwrap();
    c.boot(victim).await;
    for h in holders_everywhere(&c, "x").await {
        assert_eq!(h, vec![a.0]);
    }
    c.shutdown().await;
}

/// The log and the snapshot hold every open session's credential: a node that creates its
/// data directory makes it private to its user (0700), and writes `raft.log` and
/// `snapshot.bin` readable by that user only (0600), so another local user cannot read
/// the credentials whatever the umask, even where the directory's parent is open — and
/// even over a world-readable `snapshot.tmp` left by a crash before its rename.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_files_holding_credentials_are_private_to_its_user() {
    use std::os::unix::fs::PermissionsExt;
    let c = Cluster::start("private", 300).await;
    let a = session_of(&c.propose(open(60_000)).await);
    granted(&c.propose(acquire(a, "x", Wait::None, Some(1))).await).expect("A granted");
    c.converged().await;
    let leader = c.leader().await;
    let dir = c.base.join(format!("n{leader}"));
    let leftover = dir.join("snapshot.tmp");
    std::fs::write(&leftover, b"left by a crash").unwrap();
    std::fs::set_permissions(&leftover, std::fs::Permissions::from_mode(0o644)).unwrap();
    c.nodes[&leader].raft.trigger().snapshot().await.unwrap();
    let snap = dir.join("snapshot.bin");
    let start = Instant::now();
    while !snap.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no snapshot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    for f in ["raft.log", "snapshot.bin"] {
        assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
    }
    c.shutdown().await;
}

/// Opens sessions A and B, grants A the lock `x`, and keeps A alive past the snapshot
/// threshold (100 entries in tests) until every node has snapshotted and purged its log:
/// (A, B, A's token).
async fn a_holds_x_past_a_purge(c: &mut Cluster) -> (SessionId, SessionId, Token) {
    let a = session_of(&c.propose(open(60_000)).await);
    let b = session_of(&c.propose(open(60_000)).await);
    let tok = granted(&c.propose(acquire(a, "x", Wait::None, Some(1))).await).expect("A granted");
    for _ in 0..130 {
        c.propose(keep_alive(a)).await;
    }
    c.converged().await;
    let start = Instant::now();
    while !c.nodes.values().all(|n| n.log.last_purged().is_some()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no node purged its log"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (a, b, tok)
}

/// A directory written by the build before records no settings. Its first start with this
/// build under another lock-delay than its snapshot's is refused — the snapshot is left
/// where it is, not moved aside as corrupt — and records nothing, so the start with the
/// cluster's lock-delay that follows succeeds and records those settings; a start with
/// other table sizes after that is refused by the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_directory_records_the_settings_of_its_first_good_start() {
    let mut c = Cluster::start("settings-upgrade", 300).await;
    let a = session_of(&c.propose(open(60_000)).await);
    granted(&c.propose(acquire(a, "x", Wait::None, Some(1))).await).expect("granted");
    c.converged().await;
    let victim = c.leader().await;
    c.nodes[&victim].raft.trigger().snapshot().await.unwrap();
    let dir = c.base.join(format!("n{victim}"));
    let snap = dir.join("snapshot.bin");
    let start = Instant::now();
    while !snap.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no snapshot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.kill(victim).await;
    // As the build before left it: no settings file.
    std::fs::remove_file(dir.join(fencelock_server::settings::FILE)).unwrap();
    let snapshot = std::fs::read(&snap).unwrap();
    let mut wrong = c.config(victim);
    wrong.service.core.lock_delay = 250;
    let e = Node::start(wrong, c.net.factory(victim))
        .await
        .err()
        .expect("a lock-delay other than the snapshot's is refused");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    assert!(
        e.to_string()
            .contains("--lock-delay-ms 250 here, 0 in the snapshot"),
        "{e}"
    );
    assert_eq!(std::fs::read(&snap).unwrap(), snapshot, "left where it was");
    assert!(
        !dir.join("snapshot.bin.corrupt").exists(),
        "not taken for corrupt"
    );
    assert!(
        !dir.join(fencelock_server::settings::FILE).exists(),
        "a refused start records nothing"
    );
    c.boot(victim).await;
    assert_eq!(
        fencelock_server::settings::read_dir(&dir).unwrap(),
        Some(c.config(victim).service),
        "the good start recorded its settings"
    );
    c.converged().await;
    c.kill(victim).await;
    let mut bigger = c.config(victim);
    bigger.service.sessions *= 2;
    let e = Node::start(bigger, c.net.factory(victim))
        .await
        .err()
        .expect("other table sizes than the record's are refused");
    assert!(
        e.to_string()
            .contains("--sessions 32768 in this start, 16384 recorded"),
        "{e}"
    );
    assert!(
        e.to_string().contains("restore it into a new cluster"),
        "{e}"
    );
    c.shutdown().await;
}
