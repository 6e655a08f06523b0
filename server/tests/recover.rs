//! The way out of a permanently lost majority: `fencelock-node force-new-cluster` makes a
//! new single-member cluster from a survivor's data directory, keeping every session (with
//! its credential), hold, queue and the fencing revision; members are then added back.
//! A TLS + tokens cluster of real `fencelock-node` processes, nodes killed with SIGKILL.

mod procs;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{Mode, Token};
use fencelock_server::client::{Acquired, Client, Session};
use fencelock_server::protocol::WaitSpec;
use fencelock_server::types::NodeAddr;
use procs::*;

/// The default `--skip-tokens`.
const SKIP: u64 = 1_000_000;

async fn grant(s: &Session, lock: &str) -> Token {
    match s.acquire(lock, Mode::Exclusive, WaitSpec::None).await {
        Ok(Acquired::Granted(t)) => t,
        other => panic!("acquire {lock}: {other:?}"),
    }
}

/// Waits (bounded) until `f` gives `Some`.
async fn eventually<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An empty directory `fencelock-NAME-PID` under the temp dir.
fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fencelock-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `fencelock-node force-new-cluster --from FROM --dir TO --peer PEER`; the caller adds
/// the rest.
fn force_new_cluster(from: &Path, to: &Path, peer: &str) -> Command {
    let mut c = Command::new(NODE);
    c.arg("force-new-cluster")
        .arg("--from")
        .arg(from)
        .arg("--dir")
        .arg(to)
        .args(["--peer", peer]);
    c
}

/// Puts the recovered directory `new_dir` in place of the survivor's `from` (which is
/// kept as `from.old`) and starts it alone: its one `--peer`, no `--init`.
fn start_recovered(cluster: &mut Cluster, survivor: u64, from: &Path, new_dir: &Path) {
    std::fs::rename(from, from.with_extension("old")).unwrap();
    std::fs::rename(new_dir, from).unwrap();
    cluster.peers = vec![cluster.peers[survivor as usize - 1].clone()];
    cluster.no_init = true;
    cluster.spawn(survivor);
}

fn addr_of(peer: &str) -> (u64, NodeAddr) {
    let (id, rest) = peer.split_once('=').unwrap();
    let (raft, client) = rest.split_once('/').unwrap();
    (
        id.parse().unwrap(),
        NodeAddr {
            raft: raft.into(),
            client: client.into(),
        },
    )
}

/// Three nodes; sessions hold `res/a` and `res/b`, a third waits for `res/a`. Two nodes are
/// killed for good, the survivor (the last leader) too; `force-new-cluster` refuses
/// without `--accept-data-loss` and into a directory that holds a node, then recovers:
/// the new single node serves the same holders, tokens and waiter, the old sessions act
/// with their credentials, the next token is above every earlier one by the skip, and a
/// release hands the lock to the waiter. Then two fresh members are added back and the
/// recovered node is killed: the new cluster still serves the state and grants higher
/// tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_new_cluster_from_a_survivor_keeps_state_and_tokens_rise() {
    let dir = fresh_dir("recover");
    let mut cluster = Cluster::start_secure(&dir);
    let secure = cluster.secure.as_ref().unwrap();
    let admin = secure.admin_token.clone();
    let mut options = secure.client_options(&admin);
    // Session 3's acquire is dropped below, its wait queued, and the wait must be there
    // after the recovery: nothing settles it in the background meanwhile.
    options.timeouts.settle_after = Duration::from_secs(3600);
    let client = Client::with_options(cluster.clients.clone(), options);
    eventually("a leader", 20, || cluster.leader()).await;

    let s1 = client.open_session(120_000).await.expect("session 1");
    let s2 = client.open_session(120_000).await.expect("session 2");
    let s3 = Arc::new(client.open_session(120_000).await.expect("session 3"));
    let t1 = grant(&s1, "res/a").await;
    let t2 = grant(&s2, "res/b").await;
    let waiting = {
        let s3 = s3.clone();
        tokio::spawn(async move {
            s3.acquire("res/a", Mode::Exclusive, WaitSpec::Forever)
                .await
        })
    };
    eventually("session 3 queued", 20, || async {
        let w = client.waiters("res/a").await.ok()?;
        w.iter().any(|w| w.session.0 == s3.id()).then_some(())
    })
    .await;
    // The survivor: the leader after every write (so its log holds them all).
    let (survivor, _) = eventually("a leader", 20, || cluster.leader()).await;
    for id in (1..=3).filter(|&i| i != survivor) {
        cluster.kill9(id);
    }
    cluster.kill9(survivor);
    waiting.abort();

    let from = dir.join(format!("n{survivor}"));
    let new_dir = dir.join(format!("n{survivor}.new"));
    let me = cluster.peers[survivor as usize - 1].clone();
    let force = |extra: &[&str], to: &Path| {
        force_new_cluster(&from, to, &me)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = force(&[], &new_dir);
    assert_eq!(out.status.code(), Some(2), "needs --accept-data-loss");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--accept-data-loss"));
    assert!(!new_dir.exists(), "nothing was written");
    let other = dir.join(format!("n{}", if survivor == 1 { 2 } else { 1 }));
    let out = force(&["--accept-data-loss"], &other);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("recover only into a new directory"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log_before = std::fs::read(from.join("raft.log")).unwrap();
    let out = force(&["--accept-data-loss"], &new_dir);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("force-new-cluster: {stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("FORCING A NEW CLUSTER"));
    assert!(stdout.contains("3 sessions"), "{stdout}");
    assert_eq!(
        std::fs::read(from.join("raft.log")).unwrap(),
        log_before,
        "the survivor's directory is only read"
    );
    assert!(!new_dir.join("force-new-cluster.source").exists());

    // Start the recovered node alone: its directory in place of the old one, its one
    // --peer, no --init.
    let all_peers = cluster.peers.clone();
    start_recovered(&mut cluster, survivor, &from, &new_dir);
    let h = eventually("the recovered node serves", 30, || async {
        client.holders("res/a").await.ok()
    })
    .await;
    assert_eq!(h.len(), 1);
    assert_eq!((h[0].session.0, h[0].token), (s1.id(), t1));
    let h = client.holders("res/b").await.unwrap();
    assert_eq!((h[0].session.0, h[0].token), (s2.id(), t2));
    let w = client.waiters("res/a").await.unwrap();
    assert_eq!(
        w.iter().map(|w| w.session.0).collect::<Vec<_>>(),
        vec![s3.id()]
    );
    // The old sessions act with their credentials (kept in the recovered state).
    s2.keep_alive().await.expect("session 2's keep-alive");
    // The next token is above every earlier one, by the skip.
    let s4 = client.open_session(120_000).await.expect("session 4");
    let t4 = grant(&s4, "res/c").await;
    assert!(t4.0 > t2.0.max(t1.0) + SKIP, "{t4:?} after {t1:?}, {t2:?}");
    // Releasing res/a hands it to the waiter, with a higher token still.
    assert_eq!(s1.release("res/a").await.expect("release"), t1);
    let h = eventually("the waiter granted", 20, || async {
        let h = client.holders("res/a").await.ok()?;
        (h.first()?.session.0 == s3.id()).then_some(h)
    })
    .await;
    assert!(h[0].token > t4, "{:?} after {t4:?}", h[0].token);
    eprintln!(
        "tokens: {t1:?}, {t2:?} before; {t4:?}, then {:?} to the waiter after",
        h[0].token
    );

    // Members back: the lost nodes' ids with empty directories, at their old addresses.
    cluster.peers = all_peers.clone();
    for id in (1..=3).filter(|&i| i != survivor) {
        std::fs::rename(dir.join(format!("n{id}")), dir.join(format!("n{id}.lost"))).unwrap();
        cluster.spawn(id);
        let (_, addr) = addr_of(&all_peers[id as usize - 1]);
        client.add_learner(id, addr).await.expect("add-learner");
    }
    client.set_voters(vec![1, 2, 3]).await.expect("set-voters");
    let (voters, learners) = client.members().await.unwrap();
    assert_eq!(
        voters.iter().map(|v| v.0).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(learners.is_empty());

    // The recovered node dies too: the two new members carry the state on.
    cluster.kill9(survivor);
    let h = eventually("the new members serve", 30, || async {
        client.holders("res/b").await.ok()
    })
    .await;
    assert_eq!((h[0].session.0, h[0].token), (s2.id(), t2));
    let t5 = grant(&s4, "res/d").await;
    assert!(t5 > t4, "{t5:?} after {t4:?}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits (bounded) for `child` to exit; kills it and fails if it does not.
fn exits_within(child: &mut std::process::Child, secs: u64, what: &str) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still runs after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = std::process::Output {
        status: child.wait().unwrap(),
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    use std::io::Read;
    if let Some(mut e) = child.stderr.take() {
        e.read_to_end(&mut out.stderr).unwrap();
    }
    out
}

/// A running node holds its data directory's LOCK: `force-new-cluster` from it is refused
/// (exit 1, naming the directory, nothing written), and so is a second node on it — while
/// the first keeps serving. Once the node is killed (SIGKILL: its LOCK file stays, the
/// lock does not) `force-new-cluster` from the same directory succeeds — but not into a
/// new directory whose LOCK is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_nodes_directory_is_refused_to_force_new_cluster_and_a_second_node() {
    let dir = fresh_dir("recover-lock");
    let mut cluster = Cluster::prepare_single(&dir);
    cluster.spawn(1);
    eventually("node 1 serves", 30, || cluster.leader()).await;
    let data = dir.join("n1");
    let in_use = format!("{} is in use", data.display());

    let new_dir = dir.join("n1.new");
    let peer = cluster.peers[0].clone();
    let force = || {
        force_new_cluster(&data, &new_dir, &peer)
            .arg("--accept-data-loss")
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let out = exits_within(&mut force(), 20, "force-new-cluster");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&in_use), "{err}");
    assert!(!new_dir.exists(), "nothing was written");

    // A second node on the same directory, on ports of its own.
    let (r, c) = (free_port(), free_port());
    let mut second = Command::new(NODE)
        .args(["--insecure-plaintext", "--id", "1", "--dir"])
        .arg(&data)
        .args(["--peer", &format!("1=127.0.0.1:{r}/127.0.0.1:{c}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = exits_within(&mut second, 20, "a second node on the same directory");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&in_use), "{err}");
    assert!(
        cluster.leader().await.is_some(),
        "the first node still serves"
    );

    cluster.kill9(1);
    assert!(data.join("LOCK").exists());
    // The new directory's LOCK held (a node starting on it): refused, nothing written.
    {
        std::fs::create_dir_all(&new_dir).unwrap();
        let lock = std::fs::File::create(new_dir.join("LOCK")).unwrap();
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .unwrap();
        let out = exits_within(&mut force(), 20, "force-new-cluster");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("{} is in use", new_dir.display())),
            "{err}"
        );
        assert!(!new_dir.join("raft.log").exists() && !new_dir.join("snapshot.bin").exists());
    }
    let out = exits_within(&mut force(), 30, "force-new-cluster");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(new_dir.join("raft.log").exists());
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A survivor whose log was written in a later term than the first (the first leader was
/// killed and another elected): the recovered node starts, elects itself and serves the
/// state. (Its log's entries carry term 2 or more; the new cluster's first election is
/// in term 1, and openraft requires a leader's vote to be at least its last log id's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_new_cluster_from_a_survivor_of_a_later_term_serves() {
    let dir = fresh_dir("recover-term");
    let mut cluster = Cluster::start(&dir);
    let client = Client::new(cluster.clients.clone());
    let (first, _) = eventually("a leader", 30, || cluster.leader()).await;
    cluster.kill9(first);
    let (survivor, _) = eventually("a second leader", 30, || cluster.leader()).await;
    let s = client.open_session(120_000).await.expect("session");
    let t = grant(&s, "res").await;
    for id in 1..=3 {
        cluster.kill9(id);
    }
    let from = dir.join(format!("n{survivor}"));
    let new_dir = dir.join(format!("n{survivor}.new"));
    let me = cluster.peers[survivor as usize - 1].clone();
    // Run as `… 2>&1 | head -1` would run it: its log and its report go to pipes whose
    // readers are gone. It still succeeds (a log line or report it could not write
    // panicked with exit 101 after the new cluster was written), and refuses what it
    // refused, with its own status.
    let gone = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        writer
    };
    let status = force_new_cluster(&from, &from, &me)
        .arg("--accept-data-loss")
        .stdout(gone())
        .stderr(gone())
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "refused: recover only into a new directory"
    );
    let status = force_new_cluster(&from, &new_dir, &me)
        .arg("--accept-data-loss")
        .stdout(gone())
        .stderr(gone())
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    start_recovered(&mut cluster, survivor, &from, &new_dir);
    let h = eventually("the recovered node serves", 30, || async {
        client.holders("res").await.ok()
    })
    .await;
    assert_eq!((h.len(), h[0].session.0, h[0].token), (1, s.id(), t));
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A survivor whose last log group was written whole and then damaged (a flipped byte
/// in it, every sector of it written): a node refuses to start on it, saying what the
/// operator can do, and `force-new-cluster --accept-data-loss` cuts the group (in its
/// copy: the survivor's directory is unchanged), prints what it cut, and the recovered
/// node serves. Before, the tool refused just as the node does, leaving no way out of a
/// lost majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_new_cluster_cuts_a_damaged_whole_last_group_and_says_so() {
    let dir = fresh_dir("recover-damaged");
    let mut cluster = Cluster::start(&dir);
    let client = Client::new(cluster.clients.clone());
    let (survivor, _) = eventually("a leader", 30, || cluster.leader()).await;
    let s = client.open_session(120_000).await.expect("session");
    grant(&s, "res").await;
    for id in 1..=3 {
        cluster.kill9(id);
    }
    let from = dir.join(format!("n{survivor}"));
    let log = from.join("raft.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let last = bytes.iter().rposition(|&b| b != 0).unwrap();
    bytes[last] ^= 0x5a;
    std::fs::write(&log, &bytes).unwrap();
    // The node refuses (in-process, on a copy: the same check as at start).
    let copy = dir.join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(&log, copy.join("raft.log")).unwrap();
    let err = fencelock_server::log_store::LogStore::open(&copy)
        .err()
        .expect("a node refuses a damaged whole last group");
    let msg = err.to_string();
    assert!(
        msg.contains("force-new-cluster --accept-data-loss"),
        "{msg}"
    );
    let new_dir = dir.join(format!("n{survivor}.new"));
    let me = cluster.peers[survivor as usize - 1].clone();
    let out = force_new_cluster(&from, &new_dir, &me)
        .arg("--accept-data-loss")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("bytes at byte") && stderr.contains("written whole and then damaged"),
        "{stderr}"
    );
    assert!(stdout.contains("(damaged)"), "{stdout}");
    assert_eq!(
        std::fs::read(&log).unwrap(),
        bytes,
        "the survivor's log is only read"
    );
    start_recovered(&mut cluster, survivor, &from, &new_dir);
    let s2 = eventually("the recovered node serves", 30, || async {
        client.open_session(120_000).await.ok()
    })
    .await;
    grant(&s2, "res/after").await;
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
