//! The operations listener on an in-process cluster: `/metrics` scraped and parsed,
//! `/livez`, `/readyz`, and a full disk (a small tmpfs, when the test runs as root) making
//! the node unready and refusing writes until space returns.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{acquire, granted, open, release, session_of, Cluster};
use fencelock::{Input, LockName, Reply as CoreReply, Wait};
use fencelock_server::auth::{OpenKey, Principal};
use fencelock_server::node::{Node, NodeConfig};
use fencelock_server::ops::serve_ops;
use fencelock_server::protocol::{ClientError, Reply, Request};
use fencelock_server::state_machine::PushSink;
use fencelock_server::types::NodeAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// `GET path` on `addr`: (status, body).
pub async fn get(addr: &str, path: &str) -> (u16, String) {
    let (status, _, body) = get_raw(addr, path).await;
    (status, String::from_utf8(body).expect("utf-8 response"))
}

/// Parses Prometheus / OpenMetrics text: every sample `name{labels} value` by its full
/// `name{labels}`; panics on a malformed line.
fn parse_metrics(text: &str) -> HashMap<String, f64> {
    assert!(text.trim_end().ends_with("# EOF"), "no # EOF: {text}");
    let mut m = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (key, value) = line.rsplit_once(' ').expect("name value");
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let name = key.split('{').next().unwrap();
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad name in {line:?}"
        );
        m.insert(key.to_string(), v);
    }
    m
}

async fn serve(node: Arc<Node>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(serve_ops(l, node, std::future::pending()));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_scraped_and_parsed_and_follow_the_cluster() {
    let started = std::time::Instant::now();
    let c = Cluster::start("metrics", 300).await;
    let a = session_of(&c.propose(open(60_000)).await);
    let b = session_of(&c.propose(open(60_000)).await);
    let t = granted(&c.propose(acquire(a, "x", Wait::None, Some(1))).await).unwrap();
    let r = c.propose(acquire(b, "x", Wait::Forever, Some(1))).await;
    assert!(matches!(r.reply, Ok(CoreReply::Queued { .. })));
    c.propose(release(a, "x", Some(2))).await; // grants b
    let r = c
        .propose(Input::Watch {
            now: fencelock_server::types::STAMPED_AT_APPLY,
            session: a,
            lock: LockName::new("x").unwrap(),
            request: Some(3),
        })
        .await;
    assert_eq!(r.reply, Ok(CoreReply::Watching { holders: 1 }));
    let leader = c.leader().await;
    // A refusal seen by the leader: a release of a lock the session does not hold.
    let r = c.nodes[&leader]
        .handle_request(
            Request::Release {
                session: a.0,
                secret: c.secret(a),
                lock: "x".into(),
                request: Some(4),
            },
            c.nodes[&leader].next_conn_id(),
            &PushSink::new(4).0,
        )
        .await;
    assert!(
        matches!(r, Err(ClientError::Core(ref e)) if e.kind == "not_holder"),
        "{r:?}"
    );
    c.converged().await;
    let addr = serve(c.nodes[&leader].clone()).await;
    assert_eq!(get(&addr, "/livez").await, (200, "ok\n".into()));
    let (code, body) = get(&addr, "/metrics").await;
    assert_eq!(code, 200);
    let m = parse_metrics(&body);
    let v = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{body}"));
    assert!(v("fencelock_raft_term") >= 1.0);
    assert_eq!(v("fencelock_raft_leader"), leader as f64);
    assert_eq!(v("fencelock_raft_is_leader"), 1.0);
    assert!(v("fencelock_raft_applied_index") >= 6.0);
    assert!(v("fencelock_raft_commit_index") >= v("fencelock_raft_applied_index") - 1.0);
    assert_eq!(v("fencelock_table_in_use{table=\"sessions\"}"), 2.0);
    assert_eq!(v("fencelock_table_in_use{table=\"locks\"}"), 1.0);
    assert_eq!(
        v("fencelock_table_in_use{table=\"claims\"}"),
        2.0,
        "b's hold, a's watch"
    );
    assert_eq!(v("fencelock_watches"), 1.0, "a watches x");
    assert_eq!(v("fencelock_table_capacity{table=\"sessions\"}"), 16384.0);
    assert_eq!(v("fencelock_grants_total"), 2.0, "a's grant and b's");
    assert_eq!(v("fencelock_expiries_total"), 0.0);
    assert_eq!(v("fencelock_refusals_total{kind=\"not_holder\"}"), 1.0);
    assert_eq!(v("fencelock_wait_seconds_count"), 1.0, "b waited once");
    assert!(v("fencelock_fsync_seconds_count") >= 6.0);
    assert_eq!(v("fencelock_disk_full"), 0.0);
    // The gauge is there (what it reads is tested where a clock falls behind: the
    // elector's unit tests, a one-node cluster stopped in `tests/lifecycle.rs`); here,
    // within the time this leader can have led.
    let behind = v("fencelock_leader_clock_behind_ms");
    assert!(
        behind >= 0.0 && behind <= started.elapsed().as_millis() as f64,
        "{behind} ms behind"
    );
    assert_eq!(v("fencelock_proposer_queue"), 0.0);
    assert_eq!(v("fencelock_client_connections"), 0.0);
    assert!(t.0 >= 1);
    let (code, body) = get(&addr, "/readyz").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&format!("ok leader {leader}")), "{body}");
    c.shutdown().await;
}

/// A tmpfs mounted on a fresh temp dir, unmounted when dropped (lazily: openraft's tasks
/// may still hold the log file open for a moment).
struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount_tmpfs(at: &Path, size: &str) -> Result<Tmpfs, String> {
    // SAFETY of the test machine: only a fresh temp dir is mounted on, and unmounted after.
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("not running as root (mount needs it)".into());
    }
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(at)
        .output()
        .map_err(|e| format!("mount: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(Tmpfs(at.to_path_buf()))
}

/// A fresh temp dir (named after `name`) with a tmpfs of `size` mounted on its `mnt`:
/// the dir, the mount point and the mount. `None` when it cannot be mounted, after saying
/// why `test` is skipped.
fn tmpfs_under(name: &str, size: &str, test: &str) -> Option<(PathBuf, PathBuf, Tmpfs)> {
    let base = common::temp_dir(name);
    let dir = base.join("mnt");
    std::fs::create_dir_all(&dir).unwrap();
    match mount_tmpfs(&dir, size) {
        Ok(m) => Some((base, dir, m)),
        Err(why) => {
            common::cannot_mount(test, &why);
            None
        }
    }
}

/// Grows the tmpfs on `dir` to `size`.
fn grow(dir: &Path, size: &str) {
    let out = Command::new("mount")
        .args(["-o", &format!("remount,size={size}")])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fills the filesystem of `path` until a write fails with "no space".
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![7u8; 64 << 10];
    loop {
        match f.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    let _ = f.sync_all();
}

async fn wait_ready(addr: &str, want: u16, within: Duration) -> String {
    let start = Instant::now();
    loop {
        let (code, body) = get(addr, "/readyz").await;
        if code == want {
            return body;
        }
        assert!(
            start.elapsed() < within,
            "/readyz stayed {code} (wanted {want}): {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A follower's data directory on a 24 MiB tmpfs (its log preallocates 8 MiB) that fills
/// up: `/readyz` turns 503 naming the disk and `/metrics` shows it, the cluster keeps
/// serving; when the space is freed the node is ready again by itself (no restart) and
/// has every entry. (A write that itself waits for space is
/// `a_log_append_on_a_full_disk_waits_and_completes_when_space_returns`.) Needs root for `mount`: otherwise it says it was skipped, and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_makes_the_node_unready_and_it_recovers_when_space_returns() {
    let mut c = Cluster::start("fulldisk", 300).await;
    let leader = c.leader().await;
    let victim = (1..=3).find(|id| *id != leader).unwrap();
    c.kill(victim).await;
    let dir = c.base.join(format!("n{victim}"));
    let old = c.base.join(format!("n{victim}-old"));
    std::fs::rename(&dir, &old).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let _unmount = match mount_tmpfs(&dir, "24m") {
        Ok(m) => m,
        Err(why) => {
            c.shutdown().await;
            common::cannot_mount("a_full_disk_makes_the_node_unready…", &why);
            return;
        }
    };
    for f in std::fs::read_dir(&old).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.join(f.file_name())).unwrap();
    }
    c.boot(victim).await;
    let addr = serve(c.nodes[&victim].clone()).await;
    wait_ready(&addr, 200, Duration::from_secs(10)).await;
    let s = session_of(&c.propose(open(60_000)).await);

    let filler = dir.join("filler");
    fill(&filler);
    let body = wait_ready(&addr, 503, Duration::from_secs(5)).await;
    assert!(body.contains("fail disk"), "{body}");
    let (_, metrics) = get(&addr, "/metrics").await;
    assert!(metrics.contains("fencelock_disk_full 1"), "{metrics}");
    // The majority keeps working meanwhile.
    let t = granted(&c.propose(acquire(s, "d", Wait::None, Some(1))).await).unwrap();

    std::fs::remove_file(&filler).unwrap();
    wait_ready(&addr, 200, Duration::from_secs(10)).await;
    c.converged().await;
    let h: Vec<_> = c.nodes[&victim]
        .shared
        .state()
        .svc
        .holders("d")
        .map(|h| h.token)
        .collect();
    assert_eq!(h, vec![t]);
    c.shutdown().await;
}

/// A one-node cluster over the in-process network with `config` changes applied.
async fn single_node(
    name: &str,
    f: impl FnOnce(&mut NodeConfig),
) -> (Arc<Node>, std::path::PathBuf) {
    let dir = common::temp_dir(name);
    let net = fencelock_server::mem_network::MemNet::default();
    let mut cfg = NodeConfig::new(1, dir.join("n1"));
    cfg.loopback_members = false;
    cfg.grace_ms = 0;
    f(&mut cfg);
    let node = Node::start(cfg, net.factory(1)).await.unwrap();
    net.add(1, node.elector().clone());
    let addr = NodeAddr {
        raft: "mem:1".into(),
        client: "mem:1".into(),
    };
    node.initialize([(1, addr)].into_iter().collect())
        .await
        .unwrap();
    // A leader, with its first entry (the blank one a new leader appends) applied: a test
    // that reads `last_applied` to see that nothing was proposed must not see that entry
    // land afterwards.
    let start = Instant::now();
    loop {
        let m = node.raft.metrics().borrow().clone();
        let caught_up = m.last_log_index.is_some_and(|i| i >= 1)
            && m.last_applied.map(|l| l.index) == m.last_log_index;
        if m.current_leader == Some(1) && caught_up {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no leader");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (node, dir)
}

/// An `Open` of a session with `ttl_ms` on connection `conn`, its pushes to `sink`.
async fn open_on(
    node: &Arc<Node>,
    sink: &PushSink,
    conn: u64,
    ttl_ms: u64,
) -> Result<Reply, ClientError> {
    node.handle_request(Request::Open { ttl_ms, key: None }, conn, sink)
        .await
}

/// `--max-ttl-ms` and `--max-sessions-per-conn`: a longer ttl, and one session too many on
/// a connection, are refused with a typed `Limit` before anything is proposed (no session
/// opens), counted by kind; another connection keeps working, and a closed session frees
/// its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_and_per_connection_session_limits_refuse_before_proposing() {
    let (node, dir) = single_node("limits", |c| {
        c.max_ttl_ms = Some(10_000);
        c.max_sessions_per_conn = Some(2);
    })
    .await;
    let sink = PushSink::new(16).0;
    let (a, b) = (node.next_conn_id(), node.next_conn_id());
    let (_ga, _gb) = (node.connection(a), node.connection(b));
    let open_on = |conn, ttl_ms| open_on(&node, &sink, conn, ttl_ms);
    let applied = node.raft.metrics().borrow().last_applied;
    let r = open_on(a, 10_001).await;
    assert!(
        matches!(&r, Err(ClientError::Limit { kind, .. }) if kind == "ttl_too_long"),
        "{r:?}"
    );
    assert_eq!(
        node.raft.metrics().borrow().last_applied,
        applied,
        "nothing proposed"
    );
    assert_eq!(node.shared.state().svc.usage().sessions, 0);
    let (s1, secret1) = match open_on(a, 10_000).await.unwrap() {
        Reply::Opened { reply, secret, .. } => (reply.opened().unwrap(), secret),
        other => panic!("{other:?}"),
    };
    open_on(a, 5_000).await.unwrap();
    let r = open_on(a, 5_000).await;
    assert!(
        matches!(&r, Err(ClientError::Limit { kind, .. }) if kind == "too_many_sessions"),
        "{r:?}"
    );
    assert_eq!(node.shared.state().svc.usage().sessions, 2);
    open_on(b, 5_000)
        .await
        .expect("another connection has its own quota");
    node.handle_request(
        Request::Close {
            session: s1.0,
            secret: secret1,
            request: None,
        },
        a,
        &sink,
    )
    .await
    .unwrap();
    open_on(a, 5_000)
        .await
        .expect("a closed session frees its place");
    let refusals = |k: &str| {
        node.stats
            .refusals
            .get_or_create(&vec![("kind".to_string(), k.to_string())])
            .get()
    };
    assert_eq!(
        (refusals("ttl_too_long"), refusals("too_many_sessions")),
        (1, 1)
    );
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A connection that has stopped reading (its push sink detached, as the transport marks
/// it when the client's side ends) keeps its session quota for the opens still in flight
/// while it is there; once it is gone, an open that arrives late counts nothing and leaves
/// no quota entry or push registration behind (each would stay for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_of_an_ended_connection_leave_no_quota_entry_or_registration() {
    let (node, dir) = single_node("quota-ended", |c| c.max_sessions_per_conn = Some(2)).await;
    let sink = PushSink::new(16).0;
    let conn = node.next_conn_id();
    let guard = node.connection(conn);
    let open = || open_on(&node, &sink, conn, 60_000);
    open().await.expect("a first open");
    assert!(node.shared.hub.has_conn(conn), "attached while it reads");
    sink.detach();
    // Still there: an open in flight is counted as before (one place left, then none).
    open()
        .await
        .expect("a second open, in flight when the client's side ended");
    let r = open().await;
    assert!(
        matches!(&r, Err(ClientError::Limit { kind, .. }) if kind == "too_many_sessions"),
        "{r:?}"
    );
    assert_eq!(node.conn_quota_entries(), 1);
    // Gone (its registrations and quota entry with it): a late open counts nothing.
    node.shared.hub.detach_conn(conn);
    drop(guard);
    assert_eq!(node.conn_quota_entries(), 0);
    open()
        .await
        .expect("a late open: nothing to count it against");
    assert_eq!(node.conn_quota_entries(), 0, "no entry made again");
    assert!(!node.shared.hub.has_conn(conn), "nothing attached again");
    assert_eq!(node.shared.state().svc.usage().sessions, 3);
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A write for a session open under another credential is refused `NotOwner` by the node
/// it reaches, before anything is proposed: a flood of them takes no place in the log
/// (the state machine refuses them too, but only once they are committed). Every kind of
/// session write is checked so; the owner's own write then goes through. A write for a
/// session that is not open — ended, or an id never handed out — is refused
/// `unknown_session` before it is proposed, too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_with_another_sessions_credential_is_refused_before_it_is_proposed() {
    use fencelock::Mode;
    use fencelock_server::auth::SessionSecret;
    use fencelock_server::protocol::WaitSpec;
    let (node, dir) = single_node("foreign-write", |_| {}).await;
    let sink = PushSink::new(16).0;
    let conn = node.next_conn_id();
    let _guard = node.connection(conn);
    let (s, secret) = match open_on(&node, &sink, conn, 60_000).await.unwrap() {
        Reply::Opened { reply, secret, .. } => (reply.opened().unwrap().0, secret),
        other => panic!("{other:?}"),
    };
    let wrong = SessionSecret([0x5a; 16]);
    assert!(!wrong.matches(&secret));
    let writes = |secret: SessionSecret| {
        let lock = "jobs/x".to_string();
        vec![
            Request::KeepAlive { session: s, secret },
            Request::Acquire {
                session: s,
                secret,
                lock: lock.clone(),
                mode: Mode::Exclusive,
                wait: WaitSpec::None,
                request: None,
            },
            Request::Release {
                session: s,
                secret,
                lock: lock.clone(),
                request: None,
            },
            Request::Cancel {
                session: s,
                secret,
                lock: lock.clone(),
                request: None,
            },
            Request::Watch {
                session: s,
                secret,
                lock: lock.clone(),
                request: None,
            },
            Request::Unwatch {
                session: s,
                secret,
                lock,
                request: None,
            },
            Request::Close {
                session: s,
                secret,
                request: None,
            },
        ]
    };
    let applied = node.raft.metrics().borrow().last_log_index;
    for req in writes(wrong) {
        let what = format!("{req:?}");
        let r = node.handle_request(req, conn, &sink).await;
        assert!(
            matches!(r, Err(ClientError::NotOwner { session }) if session == s),
            "{what}: {r:?}"
        );
    }
    assert_eq!(
        node.raft.metrics().borrow().last_log_index,
        applied,
        "nothing proposed"
    );
    let r = node
        .handle_request(writes(secret).remove(1), conn, &sink)
        .await;
    assert!(r.is_ok(), "the owner's acquire: {r:?}");
    let after = node.raft.metrics().borrow().last_log_index;
    assert!(after > applied);
    // Sessions that are not open: one that ended (closed by its owner) and an id never
    // handed out. Each is `unknown_session`, the core's answer, and nothing is proposed.
    let (ended, ended_secret) = match open_on(&node, &sink, conn, 60_000).await.unwrap() {
        Reply::Opened { reply, secret, .. } => (reply.opened().unwrap().0, secret),
        other => panic!("{other:?}"),
    };
    let close = Request::Close {
        session: ended,
        secret: ended_secret,
        request: None,
    };
    assert!(node.handle_request(close, conn, &sink).await.is_ok());
    let after = node.raft.metrics().borrow().last_log_index;
    for (session, secret) in [(ended, ended_secret), (ended, wrong), (s + 1000, wrong)] {
        let r = node
            .handle_request(Request::KeepAlive { session, secret }, conn, &sink)
            .await;
        assert!(
            matches!(&r, Err(ClientError::Core(e)) if e.kind == "unknown_session"),
            "{session}: {r:?}"
        );
    }
    assert_eq!(
        node.raft.metrics().borrow().last_log_index,
        after,
        "nothing proposed"
    );
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `--max-sessions-per-token`: the clients of one token share one quota, whatever
/// connection they open on; one session too many is refused with a typed `Limit` before
/// anything is proposed. Another token has a quota of its own, and clients without one are
/// not counted; a retried open whose key names a session still open is answered, not
/// refused; a session that closes or expires frees its place; an open whose request future
/// is dropped in flight (an embedder's timeout) holds none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_clients_share_one_session_quota_across_connections() {
    let (node, dir) = single_node("token-quota", |c| {
        c.max_sessions_per_token = Some(2);
    })
    .await;
    let sink = PushSink::new(16).0;
    let (a, b) = (Principal::token("team-a"), Principal::token("team-b"));
    let open_as = |who: Principal, ttl_ms: u64, key: Option<OpenKey>| {
        let node = node.clone();
        let sink = sink.clone();
        async move {
            let conn = node.next_conn_id();
            let _guard = node.connection(conn);
            node.handle_request_as(Request::Open { ttl_ms, key }, conn, &sink, who)
                .await
        }
    };
    let opened = |r: Result<Reply, ClientError>| match r {
        Ok(Reply::Opened { reply, secret, .. }) => (reply.opened().unwrap(), secret),
        other => panic!("{other:?}"),
    };
    let too_many = |r: &Result<Reply, ClientError>| matches!(r, Err(ClientError::Limit { kind, .. }) if kind == "too_many_token_sessions");
    // An open whose request future is dropped in flight (polled once, so it is queued for
    // the proposer, then dropped) keeps no place, whether or not it goes on to open a
    // session. Another token's open after it goes through the same
    // proposer, in order: once it is answered, the abandoned one has been applied or
    // refused.
    let mut abandoned = Box::pin(open_as(a, 60_000, None));
    let first = std::future::poll_fn(|cx| {
        use std::future::Future;
        std::task::Poll::Ready(abandoned.as_mut().poll(cx).map(|r| format!("{r:?}")))
    })
    .await;
    assert!(
        first.is_pending(),
        "the open ended at its first poll: {first:?}"
    );
    drop(abandoned);
    opened(open_as(b, 5_000, None).await);
    let kept = node.shared.state().owners.sessions_of(a);
    assert!(kept <= 1);
    let (s7, secret7) = opened(open_as(a, 5_000, Some(OpenKey(7))).await);
    if kept == 0 {
        opened(open_as(a, 60_000, None).await);
    }
    let applied = node.raft.metrics().borrow().last_applied;
    let r = open_as(a, 5_000, None).await;
    assert!(too_many(&r), "a third session on a third connection: {r:?}");
    assert_eq!(
        node.raft.metrics().borrow().last_applied,
        applied,
        "nothing proposed"
    );
    let r = open_as(a, 5_000, Some(OpenKey(7))).await;
    assert_eq!(
        opened(r).0,
        s7,
        "a retry of an open that opened is answered"
    );
    assert_eq!(node.shared.state().owners.sessions_of(a), 2);
    // Another token has a quota of its own (it already has one session: the barrier's),
    // and clients without a token are not counted: more than the quota each.
    opened(open_as(b, 5_000, None).await);
    assert!(too_many(&open_as(b, 5_000, None).await), "b's own quota");
    for _ in 0..3 {
        opened(open_as(Principal::Anyone, 5_000, None).await);
    }
    // A closed session frees its place.
    let conn = node.next_conn_id();
    node.handle_request_as(
        Request::Close {
            session: s7.0,
            secret: secret7,
            request: None,
        },
        conn,
        &sink,
        a,
    )
    .await
    .unwrap();
    let (short, _) = opened(open_as(a, 2_000, None).await);
    assert!(too_many(&open_as(a, 5_000, None).await));
    // So does an expired one (the leader's ticks expire it; nobody keeps it alive).
    let start = Instant::now();
    while node.shared.state().svc.session(short).is_some() {
        assert!(start.elapsed() < Duration::from_secs(10), "never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    opened(open_as(a, 5_000, None).await);
    assert!(too_many(&open_as(a, 5_000, None).await));
    let refusals = node
        .stats
        .refusals
        .get_or_create(&vec![(
            "kind".to_string(),
            "too_many_token_sessions".to_string(),
        )])
        .get();
    assert_eq!(refusals, 4);
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// An open given up at its request timeout may still commit: until its entry applied or
/// failed it stays counted against its token's quota. (The reservation used to go with
/// the call, so an open right after a timed-out one passed the check while the first was
/// still on its way, and the token ended with more sessions than its quota.) A retry of
/// it by its key — what a client sends after a timeout — is no new open and is not
/// refused meanwhile. Here every request times out at once (a timeout of 0), before its
/// entry is through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_that_timed_out_stays_counted_until_its_entry_applied() {
    let (node, dir) = single_node("token-quota-timeout", |c| {
        c.max_sessions_per_token = Some(1);
        c.request_timeout_ms = 0;
    })
    .await;
    let sink = PushSink::new(16).0;
    let too_many = |r: &Result<Reply, ClientError>| matches!(r, Err(ClientError::Limit { kind, .. }) if kind == "too_many_token_sessions");
    let mut committed_unanswered = 0;
    // Whether a timed-out open still commits is a race between the proposer and the
    // caller's timeout, which a loaded machine can lose many times in a row: at least
    // 20 rounds, and on until one has committed unanswered (at most 400).
    for round in 0..400u64 {
        if round >= 20 && committed_unanswered > 0 {
            break;
        }
        let who = Principal::token(&format!("team-{round}"));
        let open = |key: Option<OpenKey>| {
            let node = node.clone();
            let sink = sink.clone();
            async move {
                let conn = node.next_conn_id();
                let _guard = node.connection(conn);
                let req = Request::Open {
                    ttl_ms: 60_000,
                    key,
                };
                node.handle_request_as(req, conn, &sink, who).await
            }
        };
        // A first attempt, its retry by the same key, and another client's open, one right
        // after the other.
        let first = open(Some(OpenKey(round as u128))).await;
        let retry = open(Some(OpenKey(round as u128))).await;
        assert!(
            !too_many(&retry),
            "round {round}: the retry was refused: {retry:?}"
        );
        let other = open(None).await;
        // Once everything proposed has applied, the token has at most its one session.
        let start = Instant::now();
        loop {
            let m = node.raft.metrics().borrow().clone();
            if m.last_applied.map(|l| l.index) == m.last_log_index && node.proposer_queue() == 0 {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "never applied");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let n = node.shared.state().owners.sessions_of(who);
        assert!(
            n <= 1,
            "round {round}: token has {n} sessions, its quota is 1"
        );
        let unanswered =
            |r: &Result<Reply, ClientError>| matches!(r, Err(ClientError::Unavailable(_)));
        if n == 1
            && [&first, &retry, &other]
                .iter()
                .all(|r| unanswered(r) || too_many(r))
        {
            committed_unanswered += 1;
        }
    }
    assert!(
        committed_unanswered > 0,
        "no open that timed out committed: the test did not test its case"
    );
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `GET path` on `addr`: (status, head, body bytes).
async fn get_raw(addr: &str, path: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let at = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header");
    let head = String::from_utf8(buf[..at].to_vec()).expect("utf-8 response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status");
    (status, head, buf[at + 4..].to_vec())
}

/// Backup → restore → the same holders, waiters and tokens in a new cluster (new
/// directories, new membership), sessions still alive, and the next grant's token above
/// every restored one. A follower refuses to serve a backup; a corrupt backup and a
/// non-empty directory are refused by restore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_then_restore_gives_a_new_cluster_the_same_holders_and_tokens() {
    let c = Cluster::start("backup", 300).await;
    let a = session_of(&c.propose(open(60_000)).await);
    let b = session_of(&c.propose(open(60_000)).await);
    let tx = granted(&c.propose(acquire(a, "x", Wait::None, Some(1))).await).unwrap();
    let ty = granted(&c.propose(acquire(a, "y", Wait::None, Some(2))).await).unwrap();
    let r = c.propose(acquire(b, "x", Wait::Forever, Some(1))).await;
    assert!(matches!(r.reply, Ok(CoreReply::Queued { .. })));
    let leader = c.leader().await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let f_addr = serve(c.nodes[&follower].clone()).await;
    assert_eq!(get_raw(&f_addr, "/snapshot").await.0, 503);
    let addr = serve(c.nodes[&leader].clone()).await;
    let (code, head, backup) = get_raw(&addr, "/snapshot").await;
    assert_eq!(code, 200, "{head}");
    assert!(head.to_lowercase().contains("x-fencelock-index"), "{head}");
    let svc_cfg = c.config(1).service;
    let secrets = c.secrets.lock().unwrap().clone();
    c.shutdown().await;

    // A new cluster, three new directories, new member names.
    let base = common::temp_dir("restored");
    let members: std::collections::BTreeMap<u64, NodeAddr> = (1..=3)
        .map(|id| {
            let a = NodeAddr {
                raft: format!("mem:{id}"),
                client: format!("mem:{id}"),
            };
            (id, a)
        })
        .collect();
    let mut bad = backup.clone();
    let n = bad.len();
    bad[n / 2] ^= 4;
    let e = fencelock_server::ops::restore(&bad, &base.join("bad"), &svc_cfg, members.clone())
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    for id in 1..=3 {
        fencelock_server::ops::restore(
            &backup,
            &base.join(format!("n{id}")),
            &svc_cfg,
            members.clone(),
        )
        .unwrap();
    }
    let e = fencelock_server::ops::restore(&backup, &base.join("n1"), &svc_cfg, members.clone())
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
    let mut r = Cluster {
        net: fencelock_server::mem_network::MemNet::default(),
        nodes: HashMap::new(),
        base,
        grace_ms: 300,
        request_timeout_ms: 2000,
        // The same clients: they keep their sessions' credentials.
        secrets: std::sync::Mutex::new(secrets),
    };
    for id in 1..=3 {
        r.boot(id).await;
    }
    r.leader().await;
    r.converged().await;
    for n in r.nodes.values() {
        let g = n.shared.state();
        let hx: Vec<_> = g.svc.holders("x").map(|h| (h.session, h.token)).collect();
        let hy: Vec<_> = g.svc.holders("y").map(|h| (h.session, h.token)).collect();
        let wx: Vec<_> = g.svc.waiters("x").map(|w| w.session).collect();
        assert_eq!((hx, hy, wx), (vec![(a, tx)], vec![(a, ty)], vec![b]));
    }
    let r2 = r.propose(common::keep_alive(a)).await;
    assert!(
        matches!(r2.reply, Ok(CoreReply::KeptAlive { .. })),
        "{r2:?}"
    );
    let rel = r.propose(release(a, "x", Some(3))).await;
    assert_eq!(rel.reply, Ok(CoreReply::Released { token: tx }));
    r.converged().await;
    let h: Vec<_> = r.nodes[&1]
        .shared
        .state()
        .svc
        .holders("x")
        .map(|h| (h.session, h.token))
        .collect();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].0, b, "b's wait carried over and was granted");
    assert!(h[0].1 > ty, "tokens keep increasing after a restore");
    r.shutdown().await;
}

/// The log store's own stall: an append that needs the file to grow (8 MiB of
/// preallocation) on a 4 MiB tmpfs waits, marked full, instead of failing (which would stop
/// openraft for good); when the filesystem is grown (remount) it completes by itself and
/// the entry is durable. Needs root for `mount`: otherwise it says it was skipped, and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_append_on_a_full_disk_waits_and_completes_when_space_returns() {
    use fencelock_server::log_store::LogStore;
    use fencelock_server::types::{Cmd, Entry, LogId, Op, STAMPED_AT_APPLY};
    use openraft::storage::{RaftLogReader, RaftLogStorageExt};
    let Some((base, dir, _unmount)) =
        tmpfs_under("logstall", "4m", "a_log_append_on_a_full_disk_waits…")
    else {
        return;
    };
    let log = LogStore::open(&dir).unwrap();
    let entry = Entry {
        log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), 1),
        payload: openraft::EntryPayload::Normal(Cmd {
            now: Some(1),
            ops: vec![Op::Input(fencelock::Input::OpenSession {
                now: STAMPED_AT_APPLY,
                ttl: 10,
            })],
        }),
    };
    let mut writer = log.clone();
    let append = tokio::spawn(async move { writer.blocking_append(vec![entry]).await });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !append.is_finished(),
        "the append neither waited nor failed"
    );
    assert!(log.disk().is_full());
    grow(&dir, "32m");
    tokio::time::timeout(Duration::from_secs(5), append)
        .await
        .expect("the append completes once space returns")
        .unwrap()
        .expect("and succeeds");
    assert!(!log.disk().is_full());
    drop(log);
    let mut reopened = LogStore::open(&dir).unwrap();
    let got = reopened.try_get_log_entries(0..10).await.unwrap();
    assert_eq!(got.len(), 1, "the entry is durable");
    drop(reopened);
    drop(_unmount);
    let _ = std::fs::remove_dir_all(&base);
}

/// A node whose log cannot grow (a 4 MiB tmpfs; the log preallocates 8 MiB): its Raft
/// core waits on the write, the node refuses client writes at once with `Unavailable`
/// naming the full disk and is unready; once the filesystem grows it elects itself and
/// serves writes — no restart. Needs root for `mount`: otherwise it says it was skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_write_refuses_writes_and_recovers_by_itself() {
    let Some((base, dir, _unmount)) = tmpfs_under(
        "nodestall",
        "4m",
        "a_node_that_cannot_write_refuses_writes…",
    ) else {
        return;
    };
    let net = fencelock_server::mem_network::MemNet::default();
    let mut cfg = NodeConfig::new(1, dir.join("n1"));
    cfg.loopback_members = false;
    cfg.grace_ms = 0;
    let node = Node::start(cfg, net.factory(1)).await.unwrap();
    net.add(1, node.elector().clone());
    let addr = serve(node.clone()).await;
    let init = {
        let node = node.clone();
        tokio::spawn(async move {
            let a = NodeAddr {
                raft: "mem:1".into(),
                client: "mem:1".into(),
            };
            node.initialize([(1, a)].into_iter().collect()).await
        })
    };
    let start = Instant::now();
    while !node.disk().is_stalled() {
        assert!(start.elapsed() < Duration::from_secs(5), "no write stalled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = node.propose(open(1000)).await;
    assert!(
        matches!(&r, Err(ClientError::Unavailable(m)) if m.contains("full")),
        "{r:?}"
    );
    let body = wait_ready(&addr, 503, Duration::from_secs(5)).await;
    assert!(body.contains("fail disk"), "{body}");

    grow(&dir, "64m");
    let _ = init.await;
    wait_ready(&addr, 200, Duration::from_secs(10)).await;
    let start = Instant::now();
    let r = loop {
        // An open as a client's node proposes it: with a fresh credential.
        let op = fencelock_server::types::Op::Open {
            ttl: 1000,
            key: None,
            secret: fencelock_server::auth::SessionSecret::random().unwrap(),
        };
        match node.propose_op(op).await {
            Ok(r) => break r,
            Err(e) => {
                assert!(start.elapsed() < Duration::from_secs(10), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    session_of(&r);
    node.shutdown().await;
    drop(_unmount);
    let _ = std::fs::remove_dir_all(&base);
}

/// A snapshot file that waits for space on the leader holds up nothing else: openraft
/// builds snapshots beside its core and the log still has room, so the node keeps taking
/// writes. Its clients' keep-alives are served all through the wait (one refused while the
/// leader's clock runs on would let its session expire though its client never lost the
/// quorum), and the session outlives three of its ttls; the node is unready meanwhile
/// (`is_full`), and ready again once the write is done. The wait is the node's own disk
/// health, driven as the state machine's snapshot write drives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_waiting_for_space_stalls_no_keep_alive() {
    use fencelock_server::disk::Writer;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (node, dir) = single_node("snapshot-wait", |_| {}).await;
    let sink = PushSink::new(16).0;
    let conn = node.next_conn_id();
    let _guard = node.connection(conn);
    let (s, secret) = match open_on(&node, &sink, conn, 1_000).await.unwrap() {
        Reply::Opened { reply, secret, .. } => (reply.opened().unwrap().0, secret),
        other => panic!("{other:?}"),
    };
    let room = Arc::new(AtomicBool::new(false));
    let snapshot = {
        let (disk, room) = (node.disk(), room.clone());
        tokio::spawn(async move {
            disk.retry(Writer::Snapshot, "writing a snapshot", || {
                if room.load(Ordering::Relaxed) {
                    Ok(())
                } else {
                    Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
                }
            })
            .await
        })
    };
    let start = Instant::now();
    while !node.disk().is_full() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the wait never began"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Three ttls of keep-alives, one every 250 ms (a quarter of the ttl, as the CLI sends).
    while start.elapsed() < Duration::from_millis(3_000) {
        let r = node
            .handle_request(Request::KeepAlive { session: s, secret }, conn, &sink)
            .await;
        assert!(matches!(r, Ok(Reply::Done { .. })), "{r:?}");
        assert!(node.disk().is_full(), "unready while the snapshot waits");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(node.shared.state().svc.is_open(fencelock::SessionId(s)));
    room.store(true, Ordering::Relaxed);
    snapshot.await.unwrap().unwrap();
    assert!(!node.disk().is_full(), "ready once the write is done");
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Whether the node closed `s` (end of stream or a reset) within `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut b = [0u8; 256];
    loop {
        match tokio::time::timeout(limit, s.read(&mut b)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// The operations listener is reachable by every local program, and each of its
/// connections is a file descriptor of the node: their number has a limit (16 by default),
/// one more is closed at once, and once a place is free a scrape is served again. (Without
/// the limit, idle connections held open took descriptors without bound — the node's own
/// files, peers and clients then failed with `EMFILE`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ops_listener_bounds_its_connections() {
    let (node, dir) = single_node("ops-conns", |_| {}).await;
    let addr = serve(node.clone()).await;
    let limit = fencelock_server::ops::OPS_MAX_CONNECTIONS;
    let mut held = Vec::new();
    for _ in 0..limit {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"GET /livez HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        let mut b = [0u8; 64];
        let n = s.read(&mut b).await.unwrap();
        assert!(b[..n].starts_with(b"HTTP/1.1 200"), "a place is served");
        held.push(s); // kept alive, idle
    }
    for i in 0..8 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        assert!(
            closed_within(&mut s, Duration::from_secs(5)).await,
            "connection {} beyond the limit of {limit} was kept open",
            limit + i
        );
    }
    assert!(
        !closed_within(&mut held[0], Duration::from_millis(200)).await,
        "an admitted connection is kept"
    );
    held.pop();
    let start = Instant::now();
    loop {
        let (code, _) = tokio::time::timeout(Duration::from_secs(5), async {
            let mut s = TcpStream::connect(&addr).await.ok()?;
            s.write_all(b"GET /livez HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .await
                .ok()?;
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).await.ok()?;
            Some((buf.starts_with(b"HTTP/1.1 200"), ()))
        })
        .await
        .ok()
        .flatten()
        .unwrap_or((false, ()));
        if code {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "no place freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// An operations connection is closed once its time is up, whether it sent nothing, half
/// a request (a slow sender) or kept itself alive between requests: a place is never held
/// for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ops_connection_is_closed_after_its_timeout() {
    use fencelock_server::ops::{serve_ops_with, OpsPolicy};
    let (node, dir) = single_node("ops-timeout", |_| {}).await;
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let policy = OpsPolicy {
        connection_timeout: Duration::from_millis(500),
        ..OpsPolicy::default()
    };
    tokio::spawn(serve_ops_with(
        l,
        node.clone(),
        policy,
        std::future::pending(),
    ));
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    let mut partial = TcpStream::connect(&addr).await.unwrap();
    partial
        .write_all(b"GET /livez HTTP/1.1\r\nHo")
        .await
        .unwrap();
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    kept.write_all(b"GET /livez HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut b = [0u8; 64];
    let n = kept.read(&mut b).await.unwrap();
    assert!(b[..n].starts_with(b"HTTP/1.1 200"));
    for (what, s) in [
        ("silent", &mut silent),
        ("partial", &mut partial),
        ("kept alive", &mut kept),
    ] {
        assert!(
            closed_within(s, Duration::from_secs(10)).await,
            "the {what} connection is still open"
        );
    }
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `Request::Status` (any read token) and `/readyz` each check the data directory with a
/// written and fsynced file. A flood of them at once runs one such probe at a time, not one
/// per request: 64 concurrent Status requests cost a handful of probes, not 64 files and
/// fsyncs beside the log's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_status_requests_share_the_disk_probe() {
    let (node, dir) = single_node("status-probe", |_| {}).await;
    let before = node.disk().probes();
    let asks: Vec<_> = (0..64)
        .map(|_| {
            let n = node.clone();
            tokio::spawn(async move {
                let sink = PushSink::new(4).0;
                n.handle_request(Request::Status, n.next_conn_id(), &sink)
                    .await
            })
        })
        .collect();
    for a in asks {
        assert!(matches!(a.await.unwrap(), Ok(Reply::Status(s)) if s.ready));
    }
    let ran = node.disk().probes() - before;
    // One probe in flight at a time: the requests that ask during one share the next, so
    // a few probes serve all 64 (one per request was 64). How few depends on scheduling:
    // on tmpfs a probe ends before the next spawned request arrives, and a loaded 2-core
    // runner interleaves spawns and probes, so more than 4 can run. The bound is loose
    // (fewer than 16) but still fails at one probe per request.
    assert!(ran < 16, "{ran} probes for 64 concurrent Status requests");
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `force-new-cluster` keeps the survivor's core settings: asked to make a new cluster
/// with another lock-delay than the survivor's state was made with, it refuses and names
/// the difference (writing no node); with the survivor's, and larger tables, it succeeds
/// and the new directory records exactly those settings, which its node then starts with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_new_cluster_keeps_the_survivors_core_settings() {
    use fencelock_server::ops::force_new_cluster;
    use fencelock_server::settings;
    let (node, dir) = single_node("force-settings", |c| c.service.core.lock_delay = 250).await;
    let survivor = node.config().service;
    node.shutdown().await;
    drop(node);
    let from = dir.join("n1");
    let member = || {
        (
            1,
            NodeAddr {
                raft: "mem:1".into(),
                client: "mem:1".into(),
            },
        )
    };
    let to = dir.join("new");
    let default = fencelock_server::state_machine::ServiceConfig::default();
    let e = force_new_cluster(&from, &to, &default, member(), 0, 0)
        .await
        .expect_err("another lock-delay than the survivor's");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    assert!(
        e.to_string()
            .contains("--lock-delay-ms 0 given, 250 in the survivor's state"),
        "{e}"
    );
    assert!(!to.join("snapshot.bin").exists() && !to.join("raft.log").exists());
    let bigger = fencelock_server::state_machine::ServiceConfig {
        sessions: survivor.sessions * 2,
        ..survivor
    };
    force_new_cluster(&from, &to, &bigger, member(), 0, 0)
        .await
        .expect("the survivor's core settings, larger tables");
    assert_eq!(settings::read_dir(&to).unwrap(), Some(bigger));
    let mut cfg = NodeConfig::new(1, to.clone());
    cfg.loopback_members = false;
    cfg.service = bigger;
    let net = fencelock_server::mem_network::MemNet::default();
    let n = Node::start(cfg, net.factory(1))
        .await
        .expect("starts as recorded");
    assert_eq!(n.shared.state().svc.config().lock_delay, 250);
    n.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `force-new-cluster` into larger tables replays the survivor's log in the tables it ran
/// with: an open its full session table refused stays refused, so the sessions opened
/// after it keep their ids (replayed in the larger tables, that open succeeded and took
/// the next id, and every later session's credential answered for another session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_new_cluster_replays_the_log_in_the_survivors_table_sizes() {
    use fencelock_server::ops::force_new_cluster;
    let (node, dir) = single_node("force-sizes", |c| c.service.sessions = 2).await;
    let survivor = node.config().service;
    let sink = PushSink::new(16).0;
    let conn = node.next_conn_id();
    let _g = node.connection(conn);
    let opened = |r: Result<Reply, ClientError>| match r {
        Ok(Reply::Opened { reply, secret, .. }) => (reply.opened().unwrap().0, secret),
        other => panic!("{other:?}"),
    };
    let (a, secret_a) = opened(open_on(&node, &sink, conn, 600_000).await);
    let (b, _) = opened(open_on(&node, &sink, conn, 600_000).await);
    let full = open_on(&node, &sink, conn, 600_000).await;
    assert!(
        matches!(&full, Err(ClientError::Core(e)) if e.kind == "capacity_exceeded"),
        "{full:?}"
    );
    node.handle_request(
        Request::Close {
            session: a,
            secret: secret_a,
            request: None,
        },
        conn,
        &sink,
    )
    .await
    .unwrap();
    let (d, _) = opened(open_on(&node, &sink, conn, 600_000).await);
    assert_eq!((a, b, d), (1, 2, 3));
    node.shutdown().await;
    drop(node);
    let bigger = fencelock_server::state_machine::ServiceConfig {
        sessions: 8,
        ..survivor
    };
    let member = (
        1,
        NodeAddr {
            raft: "mem:1".into(),
            client: "mem:1".into(),
        },
    );
    let to = dir.join("new");
    let r = force_new_cluster(&dir.join("n1"), &to, &bigger, member, 0, 0)
        .await
        .expect("larger tables");
    assert_eq!(r.sessions, 2, "B and D, as on the survivor: {r:?}");
    let mut cfg = NodeConfig::new(1, to);
    cfg.loopback_members = false;
    cfg.service = bigger;
    let net = fencelock_server::mem_network::MemNet::default();
    let n = Node::start(cfg, net.factory(1)).await.unwrap();
    {
        let g = n.shared.state();
        assert!(g.svc.session(fencelock::SessionId(b)).is_some());
        assert!(g.svc.session(fencelock::SessionId(d)).is_some());
        assert!(g.svc.session(fencelock::SessionId(4)).is_none());
    }
    n.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `force-new-cluster` from a survivor whose `raft.log` was emptied beside its snapshot (a
/// node refuses to start on that) recovers the snapshot's state and says the log was lost;
/// from an intact survivor it says nothing of the kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_new_cluster_says_when_the_survivors_log_was_lost() {
    use fencelock_server::ops::force_new_cluster;
    let (node, dir) = single_node("force-lostlog", |_| {}).await;
    let sink = PushSink::new(4).0;
    let r = open_on(&node, &sink, node.next_conn_id(), 600_000).await;
    assert!(matches!(r, Ok(Reply::Opened { .. })), "{r:?}");
    node.raft.trigger().snapshot().await.unwrap();
    let from = dir.join("n1");
    let start = std::time::Instant::now();
    while !from.join("snapshot.bin").exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no snapshot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.shutdown().await;
    drop(node);
    let service = fencelock_server::state_machine::ServiceConfig::default();
    let member = || {
        (
            1,
            NodeAddr {
                raft: "mem:1".into(),
                client: "mem:1".into(),
            },
        )
    };
    let whole = force_new_cluster(&from, &dir.join("whole"), &service, member(), 0, 0)
        .await
        .unwrap();
    assert!(!whole.log_lost, "{whole:?}");
    std::fs::write(from.join("raft.log"), b"").unwrap();
    let lost = force_new_cluster(&from, &dir.join("lost"), &service, member(), 0, 0)
        .await
        .unwrap();
    assert!(lost.log_lost, "{lost:?}");
    assert_eq!(lost.sessions, 1, "the snapshot's state");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One session is attached from at most `MAX_ATTACHED_PER_SESSION` connections: a request
/// naming it from one connection more (an attach, a keep-alive) is refused with a typed
/// `Limit` before anything is written, and the connections attached go on; once one of
/// them ends, the refused one gets its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_attached_from_too_many_connections_refuses_one_more() {
    use fencelock_server::state_machine::MAX_ATTACHED_PER_SESSION;
    let (node, dir) = single_node("attach-cap", |_| {}).await;
    let who = Principal::Anyone;
    let first = node.next_conn_id();
    let first_guard = node.connection(first);
    let first_sink = PushSink::new(16).0;
    let (session, secret) = match node
        .handle_request_as(
            Request::Open {
                ttl_ms: 60_000,
                key: None,
            },
            first,
            &first_sink,
            who,
        )
        .await
    {
        Ok(Reply::Opened { reply, secret, .. }) => (reply.opened().unwrap().0, secret),
        other => panic!("{other:?}"),
    };
    let attach = |conn: u64, sink: PushSink| {
        let node = node.clone();
        async move {
            node.handle_request_as(Request::Attach { session, secret }, conn, &sink, who)
                .await
        }
    };
    let mut kept = Vec::new();
    for _ in 1..MAX_ATTACHED_PER_SESSION {
        let conn = node.next_conn_id();
        kept.push(node.connection(conn));
        let r = attach(conn, PushSink::new(16).0).await;
        assert!(matches!(r, Ok(Reply::Attached)), "{r:?}");
    }
    let full = |r: &Result<Reply, ClientError>| matches!(r, Err(ClientError::Limit { kind, .. }) if kind == "session_connections");
    let conn = node.next_conn_id();
    let _guard = node.connection(conn);
    let sink = PushSink::new(16).0;
    let r = attach(conn, sink.clone()).await;
    assert!(full(&r), "{r:?}");
    let before = node.raft.metrics().borrow().last_log_index;
    let r = node
        .handle_request_as(Request::KeepAlive { session, secret }, conn, &sink, who)
        .await;
    assert!(full(&r), "a keep-alive from it too: {r:?}");
    assert_eq!(
        node.raft.metrics().borrow().last_log_index,
        before,
        "nothing written"
    );
    // An attached connection goes on; one ends, and the refused one fits.
    let r = node
        .handle_request_as(
            Request::KeepAlive { session, secret },
            first,
            &first_sink,
            who,
        )
        .await;
    assert!(matches!(r, Ok(Reply::Done { .. })), "{r:?}");
    // (What the transport does when a connection ends.)
    first_sink.detach();
    node.shared.hub.detach_conn(first);
    drop(first_guard);
    let r = attach(conn, sink).await;
    assert!(matches!(r, Ok(Reply::Attached)), "{r:?}");
    drop(kept);
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
