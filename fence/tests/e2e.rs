//! End to end on real parts: a three-node fencelock cluster (`fencelock-node` processes on
//! loopback), a real PostgreSQL server, and two workers that take the lock `ledger` with
//! the real CLI (`fencelock lock ledger -- fencelock-fence-write …`) and write through
//! the PostgreSQL fence.
//!
//! 1. Worker A is granted the lock (token `a`), reports ready, and is stopped with SIGSTOP
//!    — it, its `fencelock lock` process and the supervisor between them, as a frozen VM
//!    stops a whole client — before its write.
//! 2. A's session expires (its heartbeats stopped); worker B is granted the lock with a
//!    higher token `b` and writes.
//! 3. Worker A is continued and makes its write with token `a`. Its `fencelock lock` and
//!    supervisor are still stopped, so nothing on the client side can stop the write in
//!    time: only the storage can. PostgreSQL refuses it (stale, highest `b`).
//! 4. The table holds B's row only.
//!
//! Needs the server's binaries (`cargo build -p fencelock-server --bins`), looked up in
//! `FENCELOCK_SERVER_BIN` or next to this crate's worker binary, and takes a few seconds:
//! ignored in `cargo test`, run by `scripts/test-fence.sh`
//! (`cargo test -p fencelock-fence --test e2e -- --ignored --nocapture`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use fencelock::Token;
use fencelock_fence::{Fence, PgFence};

const WORKER: &str = env!("CARGO_BIN_EXE_fencelock-fence-write");
const TTL_MS: u64 = 1000;

fn server_bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("FENCELOCK_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(WORKER).parent().unwrap().to_path_buf());
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} not found: build the server first (`cargo build -p fencelock-server --bins`, as \
         scripts/test-fence.sh does) or set FENCELOCK_SERVER_BIN",
        p.display()
    );
    p
}

/// A free loopback port from 20000–31999 (below Linux's ephemeral range), never the same
/// twice in this process.
fn free_port(given: &mut Vec<u16>) -> u16 {
    let mut x = (u64::from(std::process::id()) << 20)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
        | 1;
    for _ in 0..1000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = 20_000 + (x % 12_000) as u16;
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    panic!("no free loopback port")
}

/// Child processes, continued and killed on drop (also when the test fails).
#[derive(Default)]
struct Procs(Vec<Child>);

impl Procs {
    fn add(&mut self, c: Child) -> usize {
        self.0.push(c);
        self.0.len() - 1
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            signal("CONT", c.id());
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends `sig` with the shell's `kill` builtin (no procps needed, no unsafe code).
fn signal(sig: &str, pid: u32) {
    let ok = Command::new("sh")
        .args(["-c", &format!("kill -s {sig} {pid}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok || sig == "CONT", "kill -{sig} {pid} failed");
}

/// The parent of `pid` (`/proc/PID/stat`'s fourth field): for a worker, the supervisor
/// `fencelock lock` started it under.
fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the worker runs");
    let after_name = stat.rsplit(')').next().unwrap_or_default();
    after_name
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("a parent pid")
}

/// Lines of a child's stdout, as they come.
fn lines(c: &mut Child) -> Receiver<String> {
    let out = c.stdout.take().expect("piped stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_line(rx: &Receiver<String>, prefix: &str, within: Duration, who: &str) -> String {
    let end = Instant::now() + within;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.starts_with(prefix) => return l,
            Ok(l) => println!("{who}: {l}"),
            Err(_) => panic!("{who}: no `{prefix}` line within {within:?}"),
        }
    }
}

fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

fn wait_exit(c: &mut Child, within: Duration, who: &str) -> std::process::ExitStatus {
    let end = Instant::now() + within;
    loop {
        if let Some(st) = c.try_wait().expect("try_wait") {
            return st;
        }
        assert!(Instant::now() < end, "{who} did not exit within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "needs the server's binaries; run by scripts/test-fence.sh"]
fn a_paused_worker_past_its_lease_is_refused_by_postgres() {
    let started = Instant::now();
    let node = server_bin("fencelock-node");
    let cli = server_bin("fencelock");
    let pg = common::Postgres::start();
    let mut admin = PgFence::new(pg.connect()).unwrap();
    admin
        .client()
        .batch_execute(
            "CREATE TABLE fencelock_demo (resource text NOT NULL, token bigint NOT NULL, note text NOT NULL)",
        )
        .unwrap();

    // The cluster: three nodes on loopback, node 1 initialises it.
    let dir = common::TempDir::new("e2e");
    let mut given = Vec::new();
    let (mut peers, mut clients) = (Vec::new(), Vec::new());
    for id in 1..=3 {
        let (r, c) = (free_port(&mut given), free_port(&mut given));
        peers.push(format!("{id}=127.0.0.1:{r}/127.0.0.1:{c}"));
        clients.push(format!("127.0.0.1:{c}"));
    }
    let cluster = clients.join(",");
    let mut procs = Procs::default();
    for id in 1..=3u32 {
        let mut cmd = Command::new(&node);
        cmd.arg("--insecure-plaintext")
            .arg("--id")
            .arg(id.to_string())
            .arg("--dir")
            .arg(dir.path().join(format!("n{id}")));
        for p in &peers {
            cmd.arg("--peer").arg(p);
        }
        if id == 1 {
            cmd.arg("--init");
        }
        let log = std::fs::File::create(dir.path().join(format!("n{id}.log"))).unwrap();
        procs.add(
            cmd.stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("node starts"),
        );
    }
    let up = Instant::now();
    loop {
        let probe = Command::new(&cli)
            .args([
                "--insecure-plaintext",
                "--cluster",
                &cluster,
                "holder",
                "probe",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        if probe.success() {
            break;
        }
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "cluster did not come up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("cluster up in {:?}", up.elapsed());

    let worker = |note: &str, wait_for: Option<&Path>| {
        let mut c = Command::new(&cli);
        c.args([
            "--insecure-plaintext",
            "--cluster",
            &cluster,
            "--ttl-ms",
            &TTL_MS.to_string(),
        ])
        .args([
            "lock",
            "ledger",
            "--",
            WORKER,
            "--pg",
            &pg.url(),
            "--note",
            note,
        ])
        .args(
            wait_for
                .map(|p| ["--wait-for".as_ref(), p.as_os_str()])
                .into_iter()
                .flatten(),
        )
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join(format!("{note}.log"))).unwrap());
        c.spawn().expect("fencelock lock starts")
    };

    // 1. A holds the lock and is about to write (it writes once `go` exists, so it cannot
    //    write before it is stopped, however slow this machine is); stop it, its lock
    //    process and the supervisor between them (which would otherwise stop A at the
    //    lease's end: here nothing on A's host runs, as when the whole host is paused).
    let go = dir.path().join("go");
    let mut a_cli = worker("A", Some(&go));
    let a_out = lines(&mut a_cli);
    let a_cli_pid = a_cli.id();
    let a_cli_i = procs.add(a_cli);
    let ready = wait_line(&a_out, "ready ", Duration::from_secs(20), "A");
    let (a_pid, a_token) = (field(&ready, "pid") as u32, field(&ready, "token"));
    let a_sup_pid = parent_of(a_pid);
    signal("STOP", a_cli_pid);
    signal("STOP", a_sup_pid);
    signal("STOP", a_pid);
    println!(
        "A holds ledger with token {a_token}; stopped (worker pid {a_pid}, lock pid {a_cli_pid}, supervisor pid {a_sup_pid})"
    );

    // 2. B waits for the lock, is granted it once A's session expired, and writes.
    let paused_at = Instant::now();
    let mut b_cli = worker("B", None);
    let b_out = lines(&mut b_cli);
    let b_i = procs.add(b_cli);
    let b_ready = wait_line(&b_out, "ready ", Duration::from_secs(30), "B");
    let b_token = field(&b_ready, "token");
    let written = wait_line(&b_out, "written ", Duration::from_secs(20), "B");
    assert_eq!(field(&written, "token"), b_token);
    let st = wait_exit(
        &mut procs.0[b_i],
        Duration::from_secs(20),
        "B's fencelock lock",
    );
    assert!(st.success(), "B's fencelock lock exited with {st}");
    assert!(
        b_token > a_token,
        "B's token {b_token} is not above A's {a_token}"
    );
    println!(
        "B granted token {b_token} {:?} after A stopped (ttl {TTL_MS} ms) and wrote",
        paused_at.elapsed()
    );
    assert!(
        paused_at.elapsed() >= Duration::from_millis(TTL_MS),
        "B was granted before A's lease could have run out"
    );

    // 3. A wakes up and writes with its old token; its lock process and supervisor stay
    //    stopped.
    std::fs::write(&go, b"").unwrap();
    signal("CONT", a_pid);
    let refused = wait_line(&a_out, "refused ", Duration::from_secs(20), "A");
    assert_eq!(field(&refused, "token"), a_token);
    assert_eq!(field(&refused, "highest"), b_token);
    println!("A continued: PostgreSQL refused token {a_token} (highest {b_token})");
    signal("CONT", a_sup_pid);
    signal("CONT", a_cli_pid);
    let st = wait_exit(
        &mut procs.0[a_cli_i],
        Duration::from_secs(20),
        "A's fencelock lock",
    );
    assert!(!st.success(), "A's fencelock lock reported success: {st}");
    let a_log = std::fs::read_to_string(dir.path().join("A.log")).unwrap_or_default();
    println!(
        "A's fencelock lock exited with {st}; it said:\n{}",
        a_log.trim_end()
    );

    // 4. Only B's write is in the table, and the fence holds B's token.
    let rows: Vec<(String, i64, String)> = admin
        .client()
        .query("SELECT resource, token, note FROM fencelock_demo", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        vec![("ledger".to_string(), b_token as i64, "B".to_string())]
    );
    assert_eq!(admin.highest("ledger").unwrap(), Some(Token(b_token)));
    println!("table holds only B's row; e2e took {:?}", started.elapsed());
}
