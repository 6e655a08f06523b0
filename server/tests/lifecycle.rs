//! `fencelock-node` as a process: `--version`, start-up errors that name the path, and
//! SIGTERM on the leader (a clean stop, nothing acknowledged lost, a new leader soon).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fencelock::Mode;
use fencelock_server::client::{Acquired, Client};
use fencelock_server::protocol::WaitSpec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;
mod procs;

use procs::NODE;

fn temp_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let d = std::env::temp_dir().join(format!("fencelock-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Free loopback ports now (bound to port 0 together, then released).
fn ports(n: usize) -> Vec<u16> {
    let ls: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    get_as(addr, path, None).await
}

/// A single-node cluster's `fencelock-node` on plain TCP (Raft port `p[0]`, clients `p[1]`,
/// metrics `metrics`) in `base/n1`, logging to `base/n1.log`; callers add their flags.
fn one_node(base: &Path, p: &[u16], metrics: &str) -> Command {
    let mut cmd = Command::new(NODE);
    let (raft, client) = (format!("127.0.0.1:{}", p[0]), format!("127.0.0.1:{}", p[1]));
    procs::one_node_flags(&mut cmd, base, &raft, &client, metrics, 300)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(base.join("n1.log")).unwrap());
    cmd
}

/// The value of a metric without labels in a scrape.
fn metric(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn version_is_printed() {
    let out = Command::new(NODE).arg("--version").output().unwrap();
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        s.trim(),
        format!("fencelock-node {}", env!("CARGO_PKG_VERSION"))
    );
}

fn start_error(dir: &Path) -> String {
    let p = ports(2);
    let out = Command::new(NODE)
        .args(["--insecure-plaintext", "--id", "1", "--dir"])
        .arg(dir)
        .arg("--peer")
        .arg(format!("1=127.0.0.1:{}/127.0.0.1:{}", p[0], p[1]))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "must fail to start");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Flags that cannot describe a cluster are refused before anything starts, naming them:
/// tables of no rows (refused before the data directory is made),
/// a node named twice by `--peer` (the second address would silently replace the first),
/// an `--election-ms` whose double (the timeout range's top) does not fit, and heartbeats
/// half an election timeout apart or more.
#[test]
fn a_peer_named_twice_or_an_election_timeout_out_of_range_is_refused() {
    let base = temp_dir("badFlags");
    let p = ports(4);
    let one = |i: usize| format!("1=127.0.0.1:{}/127.0.0.1:{}", p[i], p[i + 1]);
    // A flag let through starts a node that runs until stopped: it is stopped after 30 s
    // (its exit code is then None), so the assertion below fails instead of the test
    // hanging.
    let run = |extra: &[String]| {
        let mut child = Command::new(NODE)
            .args(["--insecure-plaintext", "--id", "1", "--dir"])
            .arg(base.join("data"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait_with_output().unwrap()
    };
    let out = run(&["--peer".into(), one(0), "--peer".into(), one(2)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--peer names node 1 twice"), "{err}");
    let out = run(&[
        "--peer".into(),
        one(0),
        "--election-ms".into(),
        u64::MAX.to_string(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--election-ms is too large"), "{err}");
    // Heartbeats (sent every 1.5 x --heartbeat-ms) half an election timeout apart or
    // more: an idle leader's clock would stop between every two. Refused before the data
    // directory is made.
    let _ = std::fs::remove_dir_all(base.join("data"));
    for (heartbeat, election) in [("100", "300"), ("100", "301"), ("50", "60"), ("0", "300")] {
        let out = run(&[
            "--peer".into(),
            one(0),
            "--heartbeat-ms".into(),
            heartbeat.into(),
            "--election-ms".into(),
            election.into(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{heartbeat}/{election}: {err}");
        assert!(
            err.contains(&format!(
                "--heartbeat-ms {heartbeat}, --election-ms {election}: heartbeat {heartbeat} ms \
                 does not fit election timeout {election} ms"
            )),
            "{err}"
        );
        assert!(!base.join("data").exists(), "a directory was made");
    }
    // The largest heartbeat that fits is taken: the start goes on to the next check (a
    // node named twice), so no node runs.
    let out = run(&[
        "--peer".into(),
        one(0),
        "--peer".into(),
        one(2),
        "--heartbeat-ms".into(),
        "99".into(),
        "--election-ms".into(),
        "300".into(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--peer names node 1 twice"), "{err}");
    // A table of no rows could hold nothing: refused naming the flags and the tables.
    let _ = std::fs::remove_dir_all(base.join("data"));
    let out = run(&["--peer".into(), one(0), "--locks".into(), "0".into()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--sessions, --locks, --claims"), "{err}");
    assert!(err.contains("at least one row"), "{err}");
    assert!(err.contains("locks 0"), "{err}");
    assert!(!base.join("data").exists(), "a directory was made");
    // `snapshot restore` too: a node named twice is refused before the backup is read
    // (the second address silently replaced the first in the restored membership).
    let out = Command::new(NODE)
        .args(["snapshot", "restore"])
        .arg(base.join("no-such-backup.fl"))
        .arg("--dir")
        .arg(base.join("restored"))
        .args(["--peer", &one(0), "--peer", &one(2)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("--peer names node 1 twice"), "{err}");
    assert!(!base.join("restored").exists(), "a directory was made");
    let out = Command::new(NODE)
        .args(["snapshot", "restore"])
        .arg(base.join("no-such-backup.fl"))
        .arg("--dir")
        .arg(base.join("restored"))
        .args(["--peer", &one(0), "--sessions", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("--sessions, --locks, --claims"), "{err}");
    assert!(err.contains("sessions 0"), "{err}");
    assert!(!base.join("restored").exists(), "a directory was made");
}

/// A data directory that cannot be created or written makes the node exit 1 with a
/// message naming it: one under a regular file, and (as root) a read-only mount.
#[test]
fn an_unusable_data_dir_is_named_in_the_error() {
    let base = temp_dir("badDir");
    let file = base.join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let dir = file.join("data");
    let err = start_error(&dir);
    assert!(err.contains(&dir.display().to_string()), "{err}");

    let ro = base.join("ro");
    std::fs::create_dir_all(&ro).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
        .arg(&ro)
        .output()
        .is_ok_and(|o| o.status.success());
    if mounted {
        let err = start_error(&ro);
        let _ = Command::new("umount").arg("-l").arg(&ro).status();
        assert!(err.contains(&ro.display().to_string()), "{err}");
        assert!(err.to_lowercase().contains("read-only"), "{err}");
    } else {
        common::cannot_mount(
            "an_unusable_data_dir_is_named_in_the_error (a read-only mount)",
            "mount -o ro failed",
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}

struct Procs(Vec<Option<Child>>);
impl Drop for Procs {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// SIGTERM to the leader of three node processes: it stops by itself with status 0 and
/// logs that it stopped; the other two elect a new leader; every acknowledged write
/// (a session, its grant and token) is still there, and nobody else can take the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_on_the_leader_loses_nothing_and_a_new_leader_takes_over() {
    let base = temp_dir("sigterm");
    let ProcCluster {
        mut procs,
        clients,
        metrics,
        ..
    } = spawn_cluster(&base, true);
    let client = Client::new(clients.clone());
    let s = client.open_session(30_000).await.expect("session");
    let tok = match s
        .acquire("k", Mode::Exclusive, WaitSpec::None)
        .await
        .unwrap()
    {
        Acquired::Granted(t) => t,
        other => panic!("{other:?}"),
    };
    s.keep_alive().await.unwrap();

    // Find the leader through its metrics.
    let mut leader = None;
    for m in &metrics {
        if let Some((200, body)) = get(m, "/metrics").await {
            if metric(&body, "fencelock_raft_is_leader") == Some(1.0) {
                leader = Some(metrics.iter().position(|x| x == m).unwrap());
            }
        }
    }
    let old = leader.expect("a leader shows in /metrics");
    let pid = procs.0[old].as_ref().unwrap().id();
    let stopped_at = Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let mut child = procs.0[old].take().unwrap();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            stopped_at.elapsed() < Duration::from_secs(10),
            "the leader did not stop within 10 s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status:?}");
    let log = std::fs::read_to_string(base.join(format!("n{}.log", old + 1))).unwrap();
    assert!(log.contains("signal=\"SIGTERM\""), "{log}");
    assert!(
        log.contains("stopped") && log.contains("was_leader=true"),
        "{log}"
    );

    // A new leader among the other two.
    let new = loop {
        let mut found = None;
        for (i, m) in metrics.iter().enumerate().filter(|(i, _)| *i != old) {
            if let Some((200, body)) = get(m, "/metrics").await {
                if metric(&body, "fencelock_raft_is_leader") == Some(1.0) {
                    found = Some(i);
                }
            }
        }
        if let Some(i) = found {
            break i;
        }
        assert!(
            stopped_at.elapsed() < Duration::from_secs(10),
            "no new leader within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "new leader {} {} ms after SIGTERM",
        new + 1,
        stopped_at.elapsed().as_millis()
    );
    let h = client.holders("k").await.unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!((h[0].session.0, h[0].token), (s.id(), tok));
    let other = client.open_session(30_000).await.unwrap();
    assert!(matches!(
        other
            .acquire("k", Mode::Exclusive, WaitSpec::None)
            .await
            .unwrap(),
        Acquired::Busy
    ));
    assert_eq!(s.release("k").await.unwrap(), tok);
    drop(procs);
    let _ = std::fs::remove_dir_all(&base);
}

/// Three node processes on fresh ports with metrics listeners (`--init` on node 1 if `init`).
struct ProcCluster {
    procs: Procs,
    clients: Vec<String>,
    metrics: Vec<String>,
}

fn spawn_cluster(base: &Path, init: bool) -> ProcCluster {
    std::fs::create_dir_all(base).unwrap();
    let p = ports(9);
    let peers: Vec<String> = (0..3)
        .map(|i| format!("{}=127.0.0.1:{}/127.0.0.1:{}", i + 1, p[i], p[3 + i]))
        .collect();
    let clients = (0..3).map(|i| format!("127.0.0.1:{}", p[3 + i])).collect();
    let metrics: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", p[6 + i])).collect();
    let mut procs = Procs(Vec::new());
    for (i, m) in metrics.iter().enumerate() {
        let mut cmd = Command::new(NODE);
        cmd.args([
            "--insecure-plaintext",
            "--id",
            &(i + 1).to_string(),
            "--grace-ms",
            "300",
        ])
        .arg("--dir")
        .arg(base.join(format!("n{}", i + 1)))
        .args(["--metrics-addr", m]);
        for peer in &peers {
            cmd.args(["--peer", peer]);
        }
        if init && i == 0 {
            cmd.arg("--init");
        }
        let log = std::fs::File::create(base.join(format!("n{}.log", i + 1))).unwrap();
        cmd.stdout(Stdio::null()).stderr(log);
        procs.0.push(Some(cmd.spawn().unwrap()));
    }
    ProcCluster {
        procs,
        clients,
        metrics,
    }
}

/// `fencelock-node snapshot save` from a running cluster (without tokens), the same backup
/// over the client port, `snapshot restore` into three new directories with new
/// addresses, the new cluster started without `--init`: the same holder with the same
/// token, and the lock is still taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_save_and_restore_with_the_binary() {
    let base = temp_dir("saverestore");
    let old = spawn_cluster(&base.join("old"), true);
    let client = Client::new(old.clients.clone());
    let s = client.open_session(60_000).await.expect("session");
    let tok = match s
        .acquire("k", Mode::Exclusive, WaitSpec::None)
        .await
        .unwrap()
    {
        Acquired::Granted(t) => t,
        other => panic!("{other:?}"),
    };
    let file = base.join("backup.fl");
    let out = Command::new(NODE)
        .args(["snapshot", "save"])
        .arg(&file)
        .args(["--from", &old.metrics.join(",")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("saved "));
    // The client port's backup at the same log index (rebuilt from the snapshot and log)
    // is the same bytes as this one (the live state, encoded).
    let saved = std::fs::read(&file).unwrap();
    let index = fencelock_server::state_machine::check_backup(&saved).expect("sound");
    let req = fencelock_server::protocol::Request::Backup {
        index: Some(index),
        offset: 0,
        max_bytes: 0,
    };
    match client.call(req).await.expect("a backup page") {
        fencelock_server::protocol::Reply::Backup(p) => {
            assert_eq!((p.index, p.total), (index, saved.len() as u64));
            assert!(p.bytes == saved, "the client port's backup differs");
        }
        r => panic!("{r:?}"),
    }
    // A stdout that cannot be written (a full disk): the backup is made all the same and
    // the command succeeds, its report on stderr, saying so.
    let full = base.join("backup-full.fl");
    let out = Command::new(NODE)
        .args(["snapshot", "save"])
        .arg(&full)
        .args(["--from", &old.metrics.join(",")])
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("done, but cannot write to stdout"), "{err}");
    assert!(err.contains("saved "), "{err}");
    assert!(full.exists());
    drop(old);

    // New ports, new directories.
    let p = ports(6);
    let peers: Vec<String> = (0..3)
        .map(|i| format!("{}=127.0.0.1:{}/127.0.0.1:{}", i + 1, p[i], p[3 + i]))
        .collect();
    let new_base = base.join("new");
    std::fs::create_dir_all(&new_base).unwrap();
    // A directory whose LOCK is held (a node starting on it) is not restored into.
    {
        let busy = new_base.join("busy");
        std::fs::create_dir_all(&busy).unwrap();
        let lock = std::fs::File::create(busy.join("LOCK")).unwrap();
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .unwrap();
        let mut cmd = Command::new(NODE);
        cmd.args(["snapshot", "restore"])
            .arg(&file)
            .arg("--dir")
            .arg(&busy);
        for peer in &peers {
            cmd.args(["--peer", peer]);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "restored into a locked directory");
        assert!(err.contains("is in use"), "{err}");
        assert!(!busy.join("snapshot.bin").exists() && !busy.join("raft.log").exists());
    }
    for i in 1..=3 {
        let mut cmd = Command::new(NODE);
        cmd.args(["snapshot", "restore"])
            .arg(&file)
            .arg("--dir")
            .arg(new_base.join(format!("n{i}")));
        for peer in &peers {
            cmd.args(["--peer", peer]);
        }
        if i == 3 {
            // Its report goes to a pipe nobody reads: the restore is done and succeeds
            // (a panic on the closed pipe made it exit 101 after its work).
            let (reader, writer) = std::io::pipe().unwrap();
            drop(reader);
            cmd.stdout(writer);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut procs = Procs(Vec::new());
    for i in 0..3 {
        let mut cmd = Command::new(NODE);
        cmd.args([
            "--insecure-plaintext",
            "--id",
            &(i + 1).to_string(),
            "--grace-ms",
            "300",
        ])
        .arg("--dir")
        .arg(new_base.join(format!("n{}", i + 1)));
        for peer in &peers {
            cmd.args(["--peer", peer]);
        }
        let log = std::fs::File::create(new_base.join(format!("n{}.log", i + 1))).unwrap();
        cmd.stdout(Stdio::null()).stderr(log);
        procs.0.push(Some(cmd.spawn().unwrap()));
    }
    let clients: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", p[3 + i])).collect();
    let client = Client::new(clients);
    let h = client
        .holders("k")
        .await
        .expect("the restored cluster serves");
    assert_eq!(h.len(), 1);
    assert_eq!((h[0].session.0, h[0].token), (s.id(), tok));
    let other = client.open_session(30_000).await.unwrap();
    assert!(matches!(
        other
            .acquire("k", Mode::Exclusive, WaitSpec::None)
            .await
            .unwrap(),
        Acquired::Busy
    ));
    drop(procs);
    let _ = std::fs::remove_dir_all(&base);
}

/// `GET path` (with an `Authorization: Bearer` header when `token` is given): the status
/// and the body (lossily as text: a backup is binary).
async fn get_as(addr: &str, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n{auth}Connection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.split(' ').nth(1)?.parse().ok()?, body.to_string()))
}

/// A backup holds every open session's credential, and the metrics port is plain HTTP
/// that nothing authenticates (a token sent there reaches whatever listens on the address,
/// say another local program while the node is down), so a node with tokens never serves
/// `GET /snapshot` — not to a lock token, not to an admin one — and `snapshot save`, which
/// sends no token, writes no file. The backup comes over the client port instead:
/// `fencelock backup` with a lock token is refused and writes nothing; with the admin
/// token it saves the file, which passes the backup checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_tokens_serves_a_backup_over_its_client_port_to_an_admin_only() {
    let base = temp_dir("backupauth");
    let (admin, lock) = (
        "admin-token-of-the-backup-test",
        "lock-token-of-the-backup-test",
    );
    let hash = fencelock_server::auth::token_hash;
    std::fs::write(
        base.join("tokens"),
        format!("admin * {}\nlock * {}\n", hash(admin), hash(lock)),
    )
    .unwrap();
    std::fs::write(base.join("admin.token"), admin).unwrap();
    std::fs::write(base.join("lock.token"), lock).unwrap();
    let p = ports(3);
    let metrics = format!("127.0.0.1:{}", p[2]);
    let cluster = format!("127.0.0.1:{}", p[1]);
    let mut cmd = one_node(&base, &p, &metrics);
    cmd.arg("--tokens").arg(base.join("tokens"));
    let procs = Procs(vec![Some(cmd.spawn().unwrap())]);
    let client = Client::with_options(
        vec![cluster.clone()],
        fencelock_server::client::ClientOptions {
            token: Some(lock.into()),
            ..Default::default()
        },
    );
    let s = client.open_session(60_000).await.expect("session");
    assert!(matches!(
        s.acquire("k", Mode::Exclusive, WaitSpec::None)
            .await
            .unwrap(),
        Acquired::Granted(_)
    ));

    for token in [None, Some(lock), Some(admin), Some("not-a-token")] {
        let (code, body) = get_as(&metrics, "/snapshot", token)
            .await
            .expect("an answer");
        assert_eq!(code, 403, "{token:?}: {body}");
        assert!(body.contains("fencelock backup FILE"), "{body}");
    }
    // What stays open names no session.
    assert_eq!(get(&metrics, "/metrics").await.map(|r| r.0), Some(200));

    let file = base.join("backup.fl");
    let out = Command::new(NODE)
        .args(["snapshot", "save"])
        .arg(&file)
        .args(["--from", &metrics])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "saved");
    assert!(
        err.contains("403") && err.contains("fencelock backup"),
        "{err}"
    );
    assert!(!file.exists(), "a file was written");

    let backup = |token_file: &str| {
        Command::new(env!("CARGO_BIN_EXE_fencelock"))
            .env_remove("FENCELOCK_CLUSTER")
            .env_remove("FENCELOCK_AUTH_TOKEN")
            .env("FENCELOCK_INSECURE_PLAINTEXT", "true")
            .args(["--cluster", &cluster])
            .arg("--auth-token-file")
            .arg(base.join(token_file))
            .arg("backup")
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = backup("lock.token");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no admin role"), "{err}");
    assert!(!file.exists(), "a lock token's backup wrote a file");
    let out = backup("admin.token");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with(&format!("saved {} (", file.display())),
        "{said}"
    );
    let bytes = std::fs::read(&file).unwrap();
    let index = fencelock_server::state_machine::check_backup(&bytes).expect("a sound backup");
    assert!(
        said.contains(&format!("log index {index}) from node 1, the leader")),
        "{said}"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "a backup holds every session's credential"
        );
    }
    drop(procs);
    let _ = std::fs::remove_dir_all(&base);
}

/// `snapshot save` trusts nothing that answers on a metrics address: it sends no token
/// (not even with one in its environment, as the other commands read it) and reads no
/// more than `--max-bytes` of an answer — a program listening there in a node's stead
/// gets no credential and cannot make it read without end; no file is written.
#[test]
fn snapshot_save_sends_no_token_and_reads_a_bounded_answer() {
    use std::io::{Read, Write};
    let base = temp_dir("savesquat");
    std::fs::write(base.join("admin.token"), "admin-token-never-sent").unwrap();
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = squatter.local_addr().unwrap().to_string();
    let heard = std::thread::spawn(move || {
        let (mut c, _) = squatter.accept().unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 1024];
        while !req.ends_with(b"\r\n\r\n") {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "the request ended early");
            req.extend_from_slice(&buf[..n]);
        }
        // A "backup" far larger than the limit asked for.
        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
        let _ = c.write_all(&[0u8; 100_000]);
        String::from_utf8_lossy(&req).into_owned()
    });
    let file = base.join("backup.fl");
    let out = Command::new(NODE)
        .env("FENCELOCK_AUTH_TOKEN", "admin-token-never-sent")
        .env("FENCELOCK_AUTH_TOKEN_FILE", base.join("admin.token"))
        .args(["snapshot", "save"])
        .arg(&file)
        .args(["--from", &addr, "--max-bytes", "1000"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "saved");
    assert!(err.contains("larger than --max-bytes 1000"), "{err}");
    assert!(!file.exists(), "a file was written");
    let req = heard.join().unwrap();
    assert!(req.starts_with("GET /snapshot "), "{req}");
    assert!(!req.to_ascii_lowercase().contains("authorization"), "{req}");
    assert!(!req.contains("admin-token-never-sent"), "{req}");
    let _ = std::fs::remove_dir_all(&base);
}

/// An error answer to `snapshot save` — from a program in a node's stead, which nothing
/// on this port tells apart — is shown escaped and cut to its first KiB: a body holding a
/// terminal control and a forged `saved` line, padded to 10 MB, prints neither the
/// control, nor a line of its own, nor more than a few KiB; it was printed as it came,
/// all of it. (That only its first KiB is read, not up to `--max-bytes`, is the code's
/// `ERROR_SHOWN`; this test sees what is printed.)
#[test]
fn snapshot_save_shows_an_error_answer_cut_and_escaped() {
    use std::io::{Read, Write};
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = squatter.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut c, _) = squatter.accept().unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 1024];
        while !req.ends_with(b"\r\n\r\n") {
            let Ok(n @ 1..) = c.read(&mut buf) else {
                return;
            };
            req.extend_from_slice(&buf[..n]);
        }
        let mut body = b"\x1b]0;owned\x07\nfencelock-node: saved /etc/passwd\n".to_vec();
        body.resize(10 << 20, b'x');
        let head = format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let _ = c.write_all(head.as_bytes());
        let _ = c.write_all(&body);
    });
    let base = temp_dir("saveerror");
    let file = base.join("backup.fl");
    let out = Command::new(NODE)
        .args(["snapshot", "save"])
        .arg(&file)
        .args(["--from", &addr])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "saved");
    assert!(err.contains("503"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "a terminal control printed: {err:?}"
    );
    assert!(
        !err.lines().any(|l| l.starts_with("fencelock-node: saved")),
        "a forged line printed: {err:?}"
    );
    assert!(err.len() < 8 << 10, "{} bytes printed", err.len());
    assert!(!file.exists(), "a file was written");
    let _ = std::fs::remove_dir_all(&base);
}

/// A log filter that does not parse, from `--log-level` or RUST_LOG, is refused at start
/// (exit 2, the error and its source named), and a
/// valid `--log-level` is taken over RUST_LOG: `--log-level error` hides the info line
/// that `RUST_LOG=info` would show.
#[test]
fn log_level_is_checked_and_overrides_rust_log() {
    // A bad filter from the flag, then from RUST_LOG alone (which fell back to the default
    // before): exit 2, naming where it came from.
    let refused = |flag: &[&str], env: Option<&str>, says: &str| {
        let mut cmd = Command::new(NODE);
        if let Some(v) = env {
            cmd.env("RUST_LOG", v);
        }
        let out = cmd
            .args(flag)
            .args([
                "--insecure-plaintext",
                "--id",
                "1",
                "--dir",
                "/nonexistent-never-used",
            ])
            .args(["--peer", "1=127.0.0.1:1/127.0.0.1:2"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains(says));
    };
    refused(&["--log-level", "=bad["], None, "bad --log-level");
    refused(&[], Some("=bad["), "bad RUST_LOG");

    let base = temp_dir("loglevel");
    let run = |level: Option<&str>, n: u32| {
        let p = ports(2);
        let mut cmd = Command::new(NODE);
        cmd.env("RUST_LOG", "info")
            .args(["--insecure-plaintext", "--id", "1", "--dir"])
            .arg(base.join(format!("d{n}")))
            .arg("--peer")
            .arg(format!("1=127.0.0.1:{}/127.0.0.1:{}", p[0], p[1]))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(l) = level {
            cmd.args(["--log-level", l]);
        }
        let child = cmd.spawn().unwrap();
        std::thread::sleep(Duration::from_millis(700));
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let info = run(None, 1);
    let quiet = run(Some("error"), 2);
    assert!(info.contains("fencelock-node up"), "{info}");
    assert!(info.contains("signal=\"SIGTERM\""), "{info}");
    assert!(quiet.is_empty(), "{quiet}");
    let _ = std::fs::remove_dir_all(&base);
}

/// A metrics connection cannot hold up the node's stop: with one local connection idle and
/// another stuck half-way through its request headers, SIGTERM still stops the node within
/// a few seconds (it used to wait for them to end, which a local program could put off for
/// good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_metrics_connections_do_not_hold_up_a_stop() {
    let base = temp_dir("stopmetrics");
    let p = ports(3);
    let metrics = format!("127.0.0.1:{}", p[2]);
    let mut child = one_node(&base, &p, &metrics).spawn().unwrap();
    let start = Instant::now();
    while get(&metrics, "/livez").await.is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "metrics never up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut idle = TcpStream::connect(&metrics).await.unwrap();
    idle.write_all(b"GET /livez HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut b = [0u8; 64];
    let _ = idle.read(&mut b).await.unwrap();
    let mut half = TcpStream::connect(&metrics).await.unwrap();
    half.write_all(b"GET /metrics HTTP/1.1\r\nHo")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop((idle, half));
    let status = status.expect("the node did not stop within 10 s of SIGTERM");
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&base);
}

/// A one-node cluster stopped (SIGSTOP, as a paused VM or a debugger stops it) for longer
/// than a session's ttl does not count the stop as time: the session, kept alive by no
/// one, is still open after the node resumes, and expires once its ttl of running time has
/// passed. (The node credited the whole stop at its first tick after, expiring every
/// session at once, as a cluster of several never does with time no quorum confirmed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_node_cluster_stopped_past_a_ttl_does_not_count_the_stop() {
    use fencelock_server::protocol::{Reply, Request};
    let base = temp_dir("stopped");
    let p = ports(3);
    let metrics = format!("127.0.0.1:{}", p[2]);
    let node = Procs(vec![Some(one_node(&base, &p, &metrics).spawn().unwrap())]);
    let client = Client::new(vec![format!("127.0.0.1:{}", p[1])]);
    // A session that nothing keeps alive: opened with a bare request.
    let ttl = Duration::from_millis(3_000);
    let opened = client
        .call(Request::Open {
            ttl_ms: ttl.as_millis() as u64,
            key: None,
        })
        .await
        .expect("open");
    let Reply::Opened { reply, .. } = opened else {
        panic!("{opened:?}")
    };
    let id = reply.opened().expect("opened").0;
    let opened_at = Instant::now();
    // Past the start's grace (300 ms): the leader's clock runs, and has run a while.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = node.0[0].as_ref().expect("started").id().to_string();
    let stopping = Instant::now();
    Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    std::thread::sleep(Duration::from_secs(5));
    Command::new("kill").args(["-CONT", &pid]).status().unwrap();
    // At most this long stopped (the two `kill`s' own time included).
    let stopped_at_most = stopping.elapsed();
    // Well past the ttl by the wall clock (6.6 s), well inside it by the node's running
    // time (about 1 s before the stop, up to 200 ms of the stop, and this wait).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let info = client.session_info(id).await.expect("session info");
    assert!(
        info.is_some(),
        "session {id} expired while the node was stopped (opened {:?} ago)",
        opened_at.elapsed()
    );
    // And the node says so: its clock is behind by the stop, less the 200 ms of it
    // credited.
    let (code, body) = get(&metrics, "/metrics").await.expect("metrics");
    assert_eq!(code, 200);
    let behind = metric(&body, "fencelock_leader_clock_behind_ms").expect("the gauge");
    // (Above it: whatever else held the node's thread over 200 ms, on a loaded machine.)
    let most = stopped_at_most.as_millis() as f64 + 1_000.0;
    assert!(
        (4_500.0..most).contains(&behind),
        "{behind} ms behind after at most {stopped_at_most:?} stopped"
    );
    // Time runs again: the session expires within its ttl of running time (and some
    // room for the tick that ends it).
    let start = Instant::now();
    while client
        .session_info(id)
        .await
        .expect("session info")
        .is_some()
    {
        assert!(
            start.elapsed() < ttl + Duration::from_secs(3),
            "session {id} never expired once the node ran again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(node);
    let _ = std::fs::remove_dir_all(&base);
}

/// `--init` with more peers than a cluster may have members (256: the peers would refuse
/// the membership as they decode it) is refused before the node binds or writes anything.
#[test]
fn init_with_more_peers_than_a_cluster_may_have_is_refused_up_front() {
    let base = temp_dir("initmany");
    let p = ports(2);
    let mut cmd = Command::new(NODE);
    cmd.args(["--id", "1", "--init", "--insecure-plaintext"])
        .arg("--dir")
        .arg(base.join("n1"))
        .arg("--peer")
        .arg(format!("1=127.0.0.1:{}/127.0.0.1:{}", p[0], p[1]));
    for i in 2..=257u32 {
        cmd.arg("--peer").arg(format!(
            "{i}=127.0.0.1:{}/127.0.0.1:{}",
            10_000 + i,
            20_000 + i
        ));
    }
    let out = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--init") && err.contains("256"), "{err}");
    assert!(!base.join("n1/raft.log").exists(), "nothing written");
}

/// A node with TLS serves clients on the network; without `--tokens` every one of them
/// could do everything (force releases, membership changes, exports). It refuses to start
/// that way — exit 1 naming `--tokens` — unless told to with `--insecure-no-tokens`
/// (the way `--insecure-plaintext` asks for plain TCP).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_node_without_tokens_refuses_to_start_unless_told_to() {
    let base = temp_dir("tlsnotokens");
    let tls = base.join("tls");
    std::fs::create_dir_all(&tls).unwrap();
    let ca = fencelock_server::tls::DevCa::new().unwrap();
    std::fs::write(tls.join("ca.pem"), ca.cert_pem()).unwrap();
    let pem = ca.node(1, &["127.0.0.1"]).unwrap();
    std::fs::write(tls.join("node-1.pem"), &pem.cert).unwrap();
    std::fs::write(tls.join("node-1.key"), &pem.key).unwrap();
    let p = ports(2);
    let node = |extra: &[&str]| {
        let mut cmd = Command::new(NODE);
        cmd.args(["--id", "1", "--init"])
            .arg("--dir")
            .arg(base.join("n1"))
            .arg("--peer")
            .arg(format!("1=127.0.0.1:{}/127.0.0.1:{}", p[0], p[1]))
            .arg("--tls-ca")
            .arg(tls.join("ca.pem"))
            .arg("--tls-cert")
            .arg(tls.join("node-1.pem"))
            .arg("--tls-key")
            .arg(tls.join("node-1.key"))
            .args(extra);
        cmd
    };
    let mut refused = node(&[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while refused.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(5) {
            let _ = refused.kill();
            let _ = refused.wait();
            panic!("a TLS node without --tokens started");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = refused.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tokens"), "{err}");
    assert!(!base.join("n1/raft.log").exists(), "nothing written");
    // Asked for explicitly, it starts (and still warns).
    let mut told = node(&["--insecure-no-tokens"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = async {
        loop {
            if TcpStream::connect(format!("127.0.0.1:{}", p[1]))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let up = tokio::time::timeout(Duration::from_secs(10), started).await;
    let _ = told.kill();
    let _ = told.wait();
    assert!(up.is_ok(), "with --insecure-no-tokens the node serves");
    let _ = std::fs::remove_dir_all(&base);
}

/// `fencelock-certs` run again over an older set leaves each private key readable by its
/// owner only, as a first run does (the file's mode was set only when it was created),
/// and writes each file whole, renamed into place.
#[test]
fn certs_rewrites_a_key_file_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("certs");
    let certs = env!("CARGO_BIN_EXE_fencelock-certs");
    let run = || {
        let out = Command::new(certs)
            .arg("--dir")
            .arg(&dir)
            .args(["--node", "1=127.0.0.1"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let key = dir.join("node-1.key");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    run();
    assert_eq!(mode(&key), 0o600);
    let first = std::fs::read(&key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    run();
    assert_ne!(std::fs::read(&key).unwrap(), first, "a new key was written");
    assert_eq!(
        mode(&key),
        0o600,
        "the new key is not left readable by others"
    );
    assert_eq!(mode(&dir.join("ca.pem")), 0o644);
    // Each file is written beside its place and renamed into it: what was at the name (a
    // link to another file, here) is replaced, never written through.
    let victim = dir.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    std::fs::remove_file(&key).unwrap();
    std::os::unix::fs::symlink(&victim, &key).unwrap();
    run();
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert!(std::fs::symlink_metadata(&key).unwrap().is_file());
    assert_eq!(mode(&key), 0o600);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A data directory whose `LOCK` is no regular file is refused at once, naming it: a FIFO
/// (opening one to write waits for a reader, which would hang the start silently) and a
/// symbolic link (not followed: the file it names keeps its bytes).
#[test]
fn a_lock_file_that_is_no_regular_file_is_refused() {
    let base = std::env::temp_dir().join(format!("fl-lockfile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let fifo = base.join("fifo");
    let link = base.join("link");
    for d in [&fifo, &link] {
        std::fs::create_dir_all(d).unwrap();
    }
    nix::unistd::mkfifo(&fifo.join("LOCK"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let target = base.join("target");
    std::fs::write(&target, b"keep").unwrap();
    std::os::unix::fs::symlink(&target, link.join("LOCK")).unwrap();
    for dir in [&fifo, &link] {
        let mut child = Command::new(NODE)
            .args(["--id", "1", "--peer", "1=127.0.0.1:1/127.0.0.1:2", "--dir"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > until {
                let _ = child.kill();
                panic!("the start on {} did not end", dir.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(!status.success(), "{err}");
        assert!(err.contains("LOCK"), "{err}");
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    let _ = std::fs::remove_dir_all(&base);
}
