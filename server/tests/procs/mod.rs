//! The parts of the process-level tests shared by `blackbox.rs` and `partitions.rs`: real
//! `fencelock-node` processes on loopback, a FenceGate-protected resource, and the history
//! checkers (the fenced-mutex model, token order); and for the CLI's tests, waiting on
//! conditions and child processes.
#![allow(dead_code)]

pub mod proxy;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{FenceGate, GateRow, Token};
use fencelock_server::frame;
use fencelock_server::protocol::{ClientFrame, Reply, Request, ServerFrame};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

pub const NODE: &str = env!("CARGO_BIN_EXE_fencelock-node");
pub const WORKLOAD: &str = env!("CARGO_BIN_EXE_fencelock-workload");

/// Adds the flags of node 1 of a one-node cluster to `cmd` (which runs [`NODE`], perhaps
/// through a wrapper such as `prlimit`): plaintext, `--init`, its data in `base/n1`, its
/// Raft and client addresses, `/metrics` on `metrics`, and a start grace of `grace_ms`.
pub fn one_node_flags<'a>(
    cmd: &'a mut Command,
    base: &Path,
    raft: &str,
    client: &str,
    metrics: &str,
    grace_ms: u32,
) -> &'a mut Command {
    cmd.args(["--insecure-plaintext", "--id", "1", "--init", "--grace-ms"])
        .arg(grace_ms.to_string())
        .arg("--dir")
        .arg(base.join("n1"))
        .arg("--peer")
        .arg(format!("1={raft}/{client}"))
        .args(["--metrics-addr", metrics])
}

/// A loopback port that is free now, drawn from 20000–31999 (below Linux's ephemeral range
/// 32768–60999, so no outgoing connection takes it before the node binds it) and never handed
/// out twice in this process.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = (nanos ^ (u64::from(std::process::id()) << 32)) | 1;
    for _ in 0..1000 {
        // xorshift: a cheap pseudo-random walk over the range
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = 20_000 + (x % 12_000) as u16;
        if given.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    panic!("no free loopback port in 20000-31999 after 1000 tries")
}

pub struct Cluster {
    pub dir: PathBuf,
    pub peers: Vec<String>,
    pub clients: Vec<String>,
    pub procs: HashMap<u64, Child>,
    /// Extra command-line arguments per node id.
    pub extra: HashMap<u64, Vec<String>>,
    /// TLS and tokens, as a deployment runs (`None`: `--insecure-plaintext`, no tokens).
    pub secure: Option<Secure>,
    /// Start node 1 without `--init` (a node joining an existing cluster).
    pub no_init: bool,
}

/// What a TLS + tokens cluster's clients need: the CA, and token files with roles.
pub struct Secure {
    /// The cluster CA (PEM file): what clients verify the nodes against.
    pub ca: PathBuf,
    /// The same CA, for in-process clients.
    pub client_tls: Arc<rustls::ClientConfig>,
    /// A file holding a `lock` token for names under `res` (what the workers use).
    pub lock_token_file: PathBuf,
    /// A `read` token for every name (what the test's leader probe uses).
    pub read_token: String,
    /// An `admin` token (membership changes).
    pub admin_token: String,
}

impl Secure {
    /// In-process client options: TLS against the cluster CA, presenting `token`.
    pub fn client_options(&self, token: &str) -> fencelock_server::client::ClientOptions {
        fencelock_server::client::ClientOptions {
            token: Some(token.to_string()),
            tls: Some(self.client_tls.clone()),
            ..Default::default()
        }
    }
}

/// A random token: 32 hex digits from the operating system's random source.
fn random_token() -> String {
    let b = fencelock_server::auth::random_bytes().expect("randomness");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Cluster {
    /// Picks free ports and starts nodes 1-3 (node 1 with `--init`).
    pub fn start(dir: &Path) -> Cluster {
        let mut c = Cluster::prepare(dir);
        for id in 1..=3 {
            c.spawn(id);
        }
        c
    }

    /// Picks free ports for nodes 1-3 without starting them.
    pub fn prepare(dir: &Path) -> Cluster {
        Cluster::prepare_n(dir, 3)
    }

    /// Picks free ports for a one-node cluster without starting it.
    pub fn prepare_single(dir: &Path) -> Cluster {
        Cluster::prepare_n(dir, 1)
    }

    /// Picks free ports for nodes 1-`n` without starting them.
    fn prepare_n(dir: &Path, n: u64) -> Cluster {
        let mut peers = Vec::new();
        let mut clients = Vec::new();
        for id in 1..=n {
            let (r, c) = (free_port(), free_port());
            peers.push(format!("{id}=127.0.0.1:{r}/127.0.0.1:{c}"));
            clients.push(format!("127.0.0.1:{c}"));
        }
        Cluster {
            dir: dir.to_path_buf(),
            peers,
            clients,
            procs: HashMap::new(),
            extra: HashMap::new(),
            secure: None,
            no_init: false,
        }
    }

    /// Picks free ports and starts nodes 1-3 the way a deployment runs them: node N on
    /// 127.0.0.N, TLS on the client ports and mutual TLS between the nodes (a fresh CA and
    /// node certificates from [`DevCa`](fencelock_server::tls::DevCa), written under
    /// `dir/tls`), and a tokens file with a `lock res` token, a `read *` token and an
    /// `admin *` token.
    pub fn start_secure(dir: &Path) -> Cluster {
        let mut c = Cluster::prepare(dir);
        let mut peers = Vec::new();
        let mut clients = Vec::new();
        for id in 1..=3u64 {
            let (r, p) = (free_port(), free_port());
            peers.push(format!("{id}=127.0.0.{id}:{r}/127.0.0.{id}:{p}"));
            clients.push(format!("127.0.0.{id}:{p}"));
        }
        c.peers = peers;
        c.clients = clients;
        let tls = dir.join("tls");
        std::fs::create_dir_all(&tls).unwrap();
        let ca = fencelock_server::tls::DevCa::new().expect("CA");
        std::fs::write(tls.join("ca.pem"), ca.cert_pem()).unwrap();
        for id in 1..=3u64 {
            let host = format!("127.0.0.{id}");
            let pem = ca.node(id, &[host.as_str()]).expect("node certificate");
            std::fs::write(tls.join(format!("node-{id}.pem")), &pem.cert).unwrap();
            std::fs::write(tls.join(format!("node-{id}.key")), &pem.key).unwrap();
        }
        let (lock, read, admin) = (random_token(), random_token(), random_token());
        std::fs::write(
            dir.join("tokens"),
            format!(
                "lock res {}\nread * {}\nadmin * {}\n",
                fencelock_server::auth::token_hash(&lock),
                fencelock_server::auth::token_hash(&read),
                fencelock_server::auth::token_hash(&admin)
            ),
        )
        .unwrap();
        let lock_token_file = dir.join("lock.token");
        std::fs::write(&lock_token_file, &lock).unwrap();
        c.secure = Some(Secure {
            ca: tls.join("ca.pem"),
            client_tls: fencelock_server::tls::client_config_from(&[ca.cert_der()])
                .expect("client TLS"),
            lock_token_file,
            read_token: read,
            admin_token: admin,
        });
        for id in 1..=3 {
            c.spawn(id);
        }
        c
    }

    /// The workload's connection arguments: `--tls-ca` and `--auth-token-file` for a
    /// secure cluster, none for a plain one.
    pub fn client_args(&self) -> Vec<String> {
        match &self.secure {
            Some(s) => vec![
                "--tls-ca".into(),
                s.ca.display().to_string(),
                "--auth-token-file".into(),
                s.lock_token_file.display().to_string(),
            ],
            None => Vec::new(),
        }
    }

    /// Starts node `id` (again) with its data directory and log under `dir`.
    pub fn spawn(&mut self, id: u64) {
        let mut cmd = Command::new(NODE);
        cmd.arg("--id")
            .arg(id.to_string())
            .arg("--dir")
            .arg(self.dir.join(format!("n{id}")));
        for p in &self.peers {
            cmd.arg("--peer").arg(p);
        }
        match &self.secure {
            Some(_) => {
                let tls = self.dir.join("tls");
                cmd.arg("--tls-ca")
                    .arg(tls.join("ca.pem"))
                    .arg("--tls-cert")
                    .arg(tls.join(format!("node-{id}.pem")))
                    .arg("--tls-key")
                    .arg(tls.join(format!("node-{id}.key")))
                    .arg("--tokens")
                    .arg(self.dir.join("tokens"));
            }
            // The partition test's proxies relay plain TCP (`--dial` is plain-TCP only).
            None => {
                cmd.arg("--insecure-plaintext");
            }
        }
        if id == 1 && !self.no_init {
            cmd.arg("--init");
        }
        cmd.args(self.extra.get(&id).cloned().unwrap_or_default());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("n{id}.log")))
            .expect("node log");
        cmd.stdout(Stdio::null()).stderr(log);
        self.procs.insert(id, cmd.spawn().expect("node starts"));
    }

    /// SIGKILL node `id` and reap it.
    pub fn kill9(&mut self, id: u64) {
        if let Some(mut p) = self.procs.remove(&id) {
            let _ = p.kill(); // SIGKILL
            let _ = p.wait();
        }
    }

    /// Asks each node; the one that serves a linearizable read is the leader. Returns it
    /// and the holders of the workload's lock.
    pub async fn leader(&self) -> Option<(u64, Vec<fencelock::Holder>)> {
        for (i, addr) in self.clients.iter().enumerate() {
            let r = tokio::time::timeout(Duration::from_secs(4), self.ask_holders(addr)).await;
            if let Ok(Some(h)) = r {
                return Some((i as u64 + 1, h));
            }
        }
        None
    }

    /// The holders of `res` as node `addr` answers them (a linearizable read: only the
    /// leader answers), over TLS with the read token on a secure cluster.
    async fn ask_holders(&self, addr: &str) -> Option<Vec<fencelock::Holder>> {
        let sock = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
        let mut reqs = Vec::new();
        if let Some(s) = &self.secure {
            reqs.push(Request::Authenticate {
                token: s.read_token.clone().into(),
            });
        }
        reqs.push(Request::Holders { lock: "res".into() });
        match &self.secure {
            Some(s) => {
                let name = fencelock_server::tls::server_name(addr).ok()?;
                let tls = tokio_rustls::TlsConnector::from(s.client_tls.clone())
                    .connect(name, sock)
                    .await
                    .ok()?;
                exchange(tls, reqs).await
            }
            None => exchange(sock, reqs).await,
        }
    }
}

/// Sends `reqs` one by one, each answered `Ok` before the next; returns the holders the
/// last one (a `Holders` read) was answered with.
async fn exchange<S>(mut s: S, reqs: Vec<Request>) -> Option<Vec<fencelock::Holder>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut last = None;
    for (id, req) in reqs.into_iter().enumerate() {
        let id = id as u64 + 1;
        frame::write(&mut s, &ClientFrame { id, req }).await.ok()?;
        // Skip pushes; the reply to this request comes with its id.
        loop {
            match frame::read::<_, ServerFrame>(&mut s, frame::MAX_CLIENT_FRAME)
                .await
                .ok()??
            {
                ServerFrame::Reply { id: got, result } if got == id => {
                    last = Some(result.ok()?);
                    break;
                }
                _ => continue,
            }
        }
    }
    match last? {
        Reply::Holders(h) => Some(h),
        _ => None,
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for id in 1..=3 {
            self.kill9(id);
        }
    }
}

/// The resource: a FenceGate behind a line protocol (`W <token> <worker> <session>` → `ok` or
/// `stale <highest>`), recording every accepted write in order.
#[derive(Default)]
pub struct Resource {
    pub accepted: Vec<(u64, u64)>,
    pub stale: Vec<(u64, u64)>,
    /// The worker of each session that wrote.
    pub writers: HashMap<u64, u64>,
}

pub async fn serve_resource(l: TcpListener, res: Arc<Mutex<Resource>>) {
    let gate = Arc::new(Mutex::new(
        FenceGate::new([GateRow::EMPTY; 4]).expect("4 rows are within the limit"),
    ));
    loop {
        let Ok((sock, _)) = l.accept().await else {
            continue;
        };
        let (res, gate) = (res.clone(), gate.clone());
        tokio::spawn(async move {
            let (r, mut w) = sock.into_split();
            let mut lines = BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let parts: Vec<&str> = line.split_whitespace().collect();
                let (Some(tok), Some(worker), Some(session)) = (
                    parts.get(1).and_then(|t| t.parse::<u64>().ok()),
                    parts.get(2).and_then(|t| t.parse::<u64>().ok()),
                    parts.get(3).and_then(|t| t.parse::<u64>().ok()),
                ) else {
                    break;
                };
                let answer = {
                    let mut g = gate.lock().unwrap();
                    let mut r = res.lock().unwrap();
                    r.writers.insert(session, worker);
                    match g.admit("ledger", Token(tok)) {
                        Ok(()) => {
                            r.accepted.push((tok, worker));
                            "ok\n".to_string()
                        }
                        Err(e) => {
                            r.stale.push((tok, worker));
                            format!("stale {e}\n")
                        }
                    }
                };
                if w.write_all(answer.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
    }
}

/// The fenced mutex (Jepsen's model for Hazelcast's FencedLock): acquire only when free
/// and with a fence above every earlier one; release only by the holder. `Lost` is a
/// session's lock ending without a release (expiry): it may take effect at any time
/// after the grant, and is never observed to complete.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FencedMutex {
    pub holder: Option<u64>,
    pub fence: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Acquire(u64),
    Release(u64),
    Lost(u64),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ret {
    Token(u64),
    Ok,
    NoEffect,
}

impl SequentialSpec for FencedMutex {
    type Op = Op;
    type Ret = Ret;

    fn invoke(&mut self, op: &Op) -> Ret {
        match *op {
            Op::Acquire(t) if self.holder.is_none() => {
                self.fence += 1;
                self.holder = Some(t);
                Ret::Token(self.fence)
            }
            Op::Release(t) | Op::Lost(t) if self.holder == Some(t) => {
                self.holder = None;
                Ret::Ok
            }
            _ => Ret::NoEffect,
        }
    }

    fn is_valid_step(&mut self, op: &Op, ret: &Ret) -> bool {
        match (op, ret) {
            (Op::Acquire(t), Ret::Token(k)) if self.holder.is_none() && *k > self.fence => {
                self.holder = Some(*t);
                self.fence = *k;
                true
            }
            (Op::Release(t), Ret::Ok) if self.holder == Some(*t) => {
                self.holder = None;
                true
            }
            _ => false,
        }
    }
}

#[derive(Debug)]
pub struct Ev {
    pub at: u128,
    pub thread: u64,
    pub kind: String,
    pub arg: Option<u64>,
}

pub fn read_history(paths: &[PathBuf]) -> Vec<Ev> {
    let mut evs = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 3 {
                continue; // a line torn by the end of the run
            }
            evs.push(Ev {
                at: f[0].parse().unwrap(),
                thread: f[1].parse().unwrap(),
                kind: f[2].to_string(),
                arg: f.get(3).and_then(|a| a.parse().ok()),
            });
        }
    }
    evs
}

/// Pseudo-thread bit for expiries.
pub const LOST: u64 = 1 << 40;

#[derive(Debug)]
pub enum Step {
    Invoke(u64, Op),
    Return(u64, Ret),
}

/// Turns the per-thread logs into one real-time-ordered list of invocations and returns.
pub fn to_steps(evs: &[Ev]) -> Vec<(u128, Step)> {
    let mut by_thread: BTreeMap<u64, Vec<&Ev>> = BTreeMap::new();
    for e in evs {
        by_thread.entry(e.thread).or_default().push(e);
    }
    let mut steps = Vec::new();
    for (t, es) in by_thread {
        let mut last_acq_invoke = 0u128;
        let mut i = 0;
        while i < es.len() {
            let e = es[i];
            let next = es.get(i + 1).map(|n| n.kind.as_str());
            match e.kind.as_str() {
                "inv_acq" => {
                    last_acq_invoke = e.at;
                    steps.push((e.at, Step::Invoke(t, Op::Acquire(t))));
                }
                "ok_acq" => steps.push((e.at, Step::Return(t, Ret::Token(e.arg.unwrap())))),
                "inv_rel" if next == Some("lost") => {
                    // The hold ended by expiry at some unobserved point after the grant,
                    // which itself may have happened any time after the acquire was
                    // invoked (a paused client learns of its grant late). The expiry is
                    // an operation of its own pseudo-thread, invoked with the acquire and
                    // never returning.
                    steps.push((last_acq_invoke, Step::Invoke(LOST | t, Op::Lost(t))));
                    i += 1;
                }
                "inv_rel" => steps.push((e.at, Step::Invoke(t, Op::Release(t)))),
                "ok_rel" => steps.push((e.at, Step::Return(t, Ret::Ok))),
                _ => {} // writes, indeterminate endings (left in flight)
            }
            i += 1;
        }
    }
    steps.sort_by_key(|(at, s)| (*at, matches!(s, Step::Invoke(_, Op::Lost(_)))));
    steps
}

pub fn linearizable(steps: &[(u128, Step)]) -> bool {
    let mut tester = LinearizabilityTester::new(FencedMutex::default());
    for (_, s) in steps {
        match s {
            Step::Invoke(t, op) => tester.on_invoke(*t, op.clone()).unwrap(),
            Step::Return(t, ret) => tester.on_return(*t, ret.clone()).unwrap(),
        };
    }
    tester.serialized_history().is_some()
}

/// The same model, checked directly and in O(n log n) for long histories: tokens are
/// unique and a linearization must order holds by token, so it must be the chain
/// `acquire(k1) end(k1) acquire(k2) end(k2) …` with each point inside its operation's
/// interval (points may share an instant and still be ordered); placing each point as
/// early as possible finds one if any exists. An end is a
/// completed release, an expiry (`lost`: any time after the acquire was invoked) or a
/// release left in flight. Acquires left in flight need not take effect. Returns the
/// number of holds checked.
pub fn check_fenced_mutex(evs: &[Ev]) -> Result<usize, String> {
    enum End {
        Released(u128, u128),
        Lost,
        InFlight(u128),
        Open,
    }
    struct Hold {
        token: u64,
        inv: u128,
        ret: u128,
        end: End,
    }
    let mut by_thread: BTreeMap<u64, Vec<&Ev>> = BTreeMap::new();
    for e in evs {
        by_thread.entry(e.thread).or_default().push(e);
    }
    let mut holds = Vec::new();
    for es in by_thread.values() {
        let mut inv = None;
        let mut cur: Option<Hold> = None;
        let mut rel_inv = None;
        for e in es {
            match e.kind.as_str() {
                "inv_acq" => inv = Some(e.at),
                "ok_acq" => {
                    let inv = inv.take().ok_or("grant without invocation")?;
                    cur = Some(Hold {
                        token: e.arg.ok_or("grant without token")?,
                        inv,
                        ret: e.at,
                        end: End::Open,
                    });
                }
                "inv_rel" => rel_inv = Some(e.at),
                "ok_rel" | "lost" | "indet" if cur.is_some() && rel_inv.is_some() => {
                    let Some(mut h) = cur.take() else { continue };
                    let ri = rel_inv.take().unwrap_or(h.ret);
                    h.end = match e.kind.as_str() {
                        "ok_rel" => End::Released(ri, e.at),
                        "lost" => End::Lost,
                        _ => End::InFlight(ri),
                    };
                    holds.push(h);
                }
                _ => {}
            }
        }
        holds.extend(cur);
    }
    holds.sort_by_key(|h| h.token);
    if holds.windows(2).any(|w| w[0].token == w[1].token) {
        return Err("a token was granted twice".into());
    }
    let mut p: u128 = 0;
    let n = holds.len();
    for (i, h) in holds.iter().enumerate() {
        p = p.max(h.inv);
        if p > h.ret {
            return Err(format!(
                "grant of token {} returned before the previous hold could have ended",
                h.token
            ));
        }
        if i + 1 == n {
            break;
        }
        p = match h.end {
            End::Released(ri, rr) => {
                let q = p.max(ri);
                if q > rr {
                    return Err(format!(
                        "release of token {} cannot follow its grant",
                        h.token
                    ));
                }
                q
            }
            End::Lost => p,
            End::InFlight(ri) => p.max(ri),
            End::Open => {
                return Err(format!(
                    "token {} was never released, yet token {} was granted",
                    h.token,
                    holds[i + 1].token
                ))
            }
        };
    }
    Ok(n)
}

/// Tokens: each granted once, and a grant that completed before another began has the
/// lower token. Returns the number of grants.
pub fn check_tokens(evs: &[Ev]) -> Result<usize, String> {
    let grants: Vec<(u128, u64, u64)> = evs
        .iter()
        .filter(|e| e.kind == "ok_acq")
        .filter_map(|e| Some((e.at, e.thread, e.arg?)))
        .collect();
    let distinct: HashSet<u64> = grants.iter().map(|g| g.2).collect();
    if distinct.len() != grants.len() {
        return Err("a token was granted twice".into());
    }
    // the inv_acq preceding each grant, per thread
    let mut invokes: HashMap<(u64, u64), u128> = HashMap::new();
    let mut last_inv: HashMap<u64, u128> = HashMap::new();
    for e in evs {
        match (e.kind.as_str(), e.arg) {
            ("inv_acq", _) => {
                last_inv.insert(e.thread, e.at);
            }
            ("ok_acq", Some(t)) => {
                let inv = *last_inv.get(&e.thread).ok_or("grant without invocation")?;
                invokes.insert((e.thread, t), inv);
            }
            _ => {}
        }
    }
    for a in &grants {
        for b in &grants {
            if a.0 < invokes[&(b.1, b.2)] && a.2 >= b.2 {
                return Err(format!(
                    "grant {a:?} completed before {b:?} began, with a higher token"
                ));
            }
        }
    }
    Ok(grants.len())
}

// ---- waiting on conditions and child processes ----

/// Waits (bounded) until `f` holds; panics with `what` otherwise.
pub fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) for `child` to exit.
pub fn wait_exit(child: &mut Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("process {} did not exit within {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A command running `bin` with SIGINT and SIGHUP at their defaults (GNU `env
/// --default-signal`, which then execs it: the same pid). The CLI keeps those two ignored
/// when it starts with them ignored (`nohup`), and a test run started that way — a
/// background job of a script ignores SIGINT too — would pass that on, so the tests that
/// stop a CLI with either signal start it from the defaults.
pub fn with_default_signals(bin: &str) -> Command {
    let mut c = Command::new("env");
    c.args(["--default-signal=INT,HUP", bin]);
    c
}

/// Sends `sig` (as `kill` spells it, e.g. `-TERM`) to `pid`.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// What a child wrote to its piped stderr, read to the end.
pub fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}
