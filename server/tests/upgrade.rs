//! Upgrading in place: a data directory written by the build before open keys were scoped
//! by principal (`fixtures/upgrade-v1/data`: `snapshot.bin` version 1 and, after it, log
//! entries `Op::OpenLabeled` of that build; `fixtures/upgrade-v1/make.sh` says how it was
//! made) is read by this build's `fencelock-node`: every session, hold, wait and semaphore
//! is where the old node left it, the fencing revision goes on from where it stood, and
//! the node appends this build's log entries after the old build's and reads both back
//! after a restart (no snapshot is taken in so short a run: this build's snapshot format
//! is tested in `state_machine`'s unit tests and `tests/integrity.rs`).

mod common;
mod procs;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fencelock::{Holder, Mode, Token};
use fencelock_server::client::{Acquired, Client};
use fencelock_server::protocol::WaitSpec;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/upgrade-v1/data"
);

/// A `fencelock-node` process, its stderr kept in `log`.
struct Node {
    child: Child,
    log: PathBuf,
}

/// A one-node cluster on `dir` (no `--init`: the membership is in the data).
fn start(dir: &Path, raft: &str, client: &str) -> Node {
    let log = dir.with_extension("log");
    let child = Command::new(procs::NODE)
        .args(["--insecure-plaintext", "--id", "1", "--grace-ms", "100"])
        .arg("--dir")
        .arg(dir)
        .arg("--peer")
        .arg(format!("1={raft}/{client}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("fencelock-node starts");
    Node { child, log }
}

/// Killed when dropped, so a failing test leaves no node running.
impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    fn stop(self) {}

    /// The holders of `lock` as (label, mode, token), once the node answers; fails with
    /// the node's log if it exits (refusing the data) or never answers.
    async fn holders(&mut self, c: &Client, lock: &str) -> Vec<(String, Mode, Token)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match c.holders(lock).await {
                Ok(h) => {
                    return h
                        .iter()
                        .map(|h: &Holder| (h.label.as_str().to_string(), h.mode, h.token))
                        .collect()
                }
                Err(e) => {
                    let exited = self.child.try_wait().unwrap();
                    if exited.is_some() || tokio::time::Instant::now() >= deadline {
                        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                        panic!("the node did not serve ({exited:?}, {e:?}); its log:\n{log}");
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What the old node left, as this build reads it.
async fn left_as_it_was(node: &mut Node, c: &Client) {
    assert_eq!(
        node.holders(c, "upgrade/held").await,
        [("holder".into(), Mode::Exclusive, Token(1))]
    );
    let waiters = c.waiters("upgrade/held").await.expect("waiters");
    let waiters: Vec<_> = waiters.iter().map(|w| w.label.as_str()).collect();
    assert_eq!(waiters, ["waiter"]);
    assert_eq!(
        node.holders(c, "upgrade/sem").await,
        [("sem".into(), Mode::Permits { count: 2, limit: 3 }, Token(2))]
    );
    let permits = c.permits("upgrade/sem").await.expect("permits").unwrap();
    assert_eq!((permits.in_use, permits.limit), (2, 3));
    // Granted after the snapshot, from the old build's log entries.
    assert_eq!(
        node.holders(c, "upgrade/after").await,
        [("after".into(), Mode::Exclusive, Token(3))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_of_the_build_before_is_read_in_place() {
    let base = common::temp_dir("upgrade-v1");
    let dir = base.join("n1");
    fencelock_server::disk::create_private_dir(&dir).unwrap();
    for f in ["snapshot.bin", "raft.log"] {
        std::fs::copy(Path::new(FIXTURE).join(f), dir.join(f)).unwrap();
    }
    assert_eq!(
        std::fs::read(dir.join("snapshot.bin")).unwrap()[..8],
        *b"FLSNAP\0\x01",
        "the fixture is a version-1 snapshot"
    );
    assert_eq!(
        std::fs::read(dir.join("raft.log")).unwrap()[..8],
        fencelock_server::log_store::FILE_MAGIC_V2,
        "the fixture's log is of version 2"
    );
    let raft = format!("127.0.0.1:{}", procs::free_port());
    let client = format!("127.0.0.1:{}", procs::free_port());
    let c = Client::new(vec![client.clone()]);

    let mut node = start(&dir, &raft, &client);
    left_as_it_was(&mut node, &c).await;
    assert_eq!(
        std::fs::read(dir.join("raft.log")).unwrap()[..8],
        fencelock_server::log_store::FILE_MAGIC,
        "the log was rewritten in this build's version"
    );
    // The fencing revision goes on: the next grant's token is past every old one.
    let s = c.open_labeled(600_000, "new").await.expect("open");
    let got = s
        .acquire("upgrade/new", Mode::Exclusive, WaitSpec::None)
        .await;
    assert!(
        matches!(got, Ok(Acquired::Granted(Token(4)))),
        "the fencing revision did not go on from 3: {got:?}"
    );
    node.stop();

    // Restarted on what this build wrote: everything is still there, and so is the hold
    // granted by this build.
    let mut node = start(&dir, &raft, &client);
    left_as_it_was(&mut node, &c).await;
    assert_eq!(
        node.holders(&c, "upgrade/new").await,
        [("new".into(), Mode::Exclusive, Token(4))]
    );
    node.stop();
    let _ = std::fs::remove_dir_all(&base);
}

/// A first start of this build that another check refuses (here a damaged snapshot) leaves
/// the version-2 log byte for byte as the build before wrote it: the rewrite as version 4
/// waits until every start check has passed, so that build can still start on it.
#[test]
fn a_refused_first_start_leaves_the_old_log_as_it_was() {
    let base = common::temp_dir("upgrade-v1-refused");
    let dir = base.join("n1");
    fencelock_server::disk::create_private_dir(&dir).unwrap();
    for f in ["snapshot.bin", "raft.log"] {
        std::fs::copy(Path::new(FIXTURE).join(f), dir.join(f)).unwrap();
    }
    let mut snapshot = std::fs::read(dir.join("snapshot.bin")).unwrap();
    let mid = snapshot.len() / 2;
    snapshot[mid] ^= 0x40;
    std::fs::write(dir.join("snapshot.bin"), &snapshot).unwrap();
    let log_before = std::fs::read(dir.join("raft.log")).unwrap();
    assert_eq!(log_before[..8], fencelock_server::log_store::FILE_MAGIC_V2);

    let raft = format!("127.0.0.1:{}", procs::free_port());
    let client = format!("127.0.0.1:{}", procs::free_port());
    let mut node = start(&dir, &raft, &client);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = node.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the node started on a damaged snapshot"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(&node.log).unwrap_or_default();
    assert!(!status.success(), "refused: {log}");
    assert!(
        log.contains("snapshot.bin") && log.contains("compacted up to index"),
        "refused for the snapshot: {log}"
    );
    assert_eq!(
        std::fs::read(dir.join("raft.log")).unwrap(),
        log_before,
        "the version-2 log is as the build before wrote it"
    );
    node.stop();
    let _ = std::fs::remove_dir_all(&base);
}
