//! `fencelock-node`: one member of a fencelock cluster.
//!
//! ```text
//! fencelock-node --id 1 --dir /var/lib/fencelock --tokens tokens \
//!   --tls-ca ca.pem --tls-cert node-1.pem --tls-key node-1.key \
//!   --peer 1=10.0.0.1:7201/10.0.0.1:7101 --peer 2=10.0.0.2:7201/10.0.0.2:7101 \
//!   --peer 3=10.0.0.3:7201/10.0.0.3:7101 --init
//! ```
//! Each `--peer ID=RAFT/CLIENT` names a member's Raft and client addresses (`IP:port`; this
//! node's own entry says where it listens, and it binds exactly those). `--init` on one
//! node initializes a new cluster (a no-op when its log already has one). Without TLS
//! (`--insecure-plaintext`, for local development) every address must be loopback.
//! See server/README.md, "Operations", for the flags, the `--metrics-addr` endpoints,
//! signals and logs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use fencelock_server::auth::Tokens;
use fencelock_server::net::{
    loopback_addr, serve_clients_with, serve_peers, ClientPolicy, PeerPolicy, TcpNetwork,
    TlsNetwork, MIN_RAFT_FRAME,
};
use fencelock_server::node::{Node, NodeConfig};
use fencelock_server::note;
use fencelock_server::ops::{serve_ops_with, OpsPolicy};
use fencelock_server::tls::NodeTls;
use fencelock_server::types::NodeAddr;
use tokio::net::TcpListener;

/// Prints the report of a command whose work is done and synced (a restore, a backup, a
/// forced new cluster) on stdout. A reader that went away is no failure
/// ([`fencelock_server::stdio::emit`]); if stdout cannot be written otherwise (a full
/// disk), the report goes to stderr, saying so: the command still succeeded, and failing
/// it would read as if nothing had been done.
fn report(text: &str) {
    if let Err(e) = fencelock_server::stdio::emit(text) {
        note!(
            "fencelock-node: done, but {e}; the report:\n{}",
            text.trim_end()
        );
    }
}

#[derive(Parser)]
#[command(
    name = "fencelock-node",
    version,
    about = "A fencelock cluster member (openraft + the fencelock core)",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Sub>,
    /// This node's id.
    #[arg(long, required = true)]
    id: Option<u64>,
    /// Data directory (raft.log, snapshot.bin). The node holds an exclusive lock on its
    /// LOCK file while it runs: a second node, or force-new-cluster, on the same directory
    /// is refused (exit 1, naming the directory).
    #[arg(long, required = true)]
    dir: Option<PathBuf>,
    /// A member: ID=RAFT_ADDR/CLIENT_ADDR (repeat for each member, this node included).
    /// With TLS, a node that knows no membership yet (before --init reaches it, or before
    /// it is added) serves Raft requests only from the other nodes listed here: a node to
    /// be added lists the members (any of which may be the leader that adds it).
    #[arg(long = "peer", required = true)]
    peers: Vec<String>,
    /// Initialize the cluster with the peers (once, on one node).
    #[arg(long)]
    init: bool,
    /// A new leader's grace period before its clock runs (ms).
    #[arg(long, default_value_t = 1000)]
    grace_ms: u64,
    /// Lock-delay after an expiry (ms).
    #[arg(long, default_value_t = 0)]
    lock_delay_ms: u64,
    /// Watchers a lock may have at most (0: no watches); every node must agree.
    #[arg(long, default_value_t = fencelock::Config::default().max_watchers)]
    max_watchers: u32,
    /// Raft heartbeat interval (ms); also openraft's AppendEntries timeout, which covers
    /// a new connection's TCP and TLS handshakes, the round trip and the follower's fsync:
    /// raise it above those on a slow link (and --election-ms to more than three times it:
    /// openraft sends a heartbeat every 1.5 x this, and the node refuses to start unless
    /// --election-ms is at least twice that spacing, rounded down, plus 2).
    #[arg(long, default_value_t = 50)]
    heartbeat_ms: u64,
    /// Raft election timeout, the lower bound (ms, at most 3 600 000, and at least
    /// 2 x floor(1.5 x --heartbeat-ms) + 2: 152 for the default heartbeat); the upper bound
    /// is twice it.
    #[arg(long, default_value_t = 300)]
    election_ms: u64,
    /// Serve /livez, /readyz and /metrics over HTTP here (loopback host:port).
    #[arg(long)]
    metrics_addr: Option<String>,
    /// Log filter (tracing-subscriber EnvFilter syntax: `info`, `debug`,
    /// `fencelock_server=debug,openraft=info`…); overrides RUST_LOG. Default
    /// `info,openraft=warn`.
    #[arg(long)]
    log_level: Option<String>,
    /// Session table rows (every node of a cluster must agree).
    #[arg(long, default_value_t = 1 << 14)]
    sessions: usize,
    /// Lock table rows (every node of a cluster must agree).
    #[arg(long, default_value_t = 1 << 14)]
    locks: usize,
    /// Claim pool rows, holds + waits + watches (every node of a cluster must agree).
    #[arg(long, default_value_t = 1 << 15)]
    claims: usize,
    /// Refuse to open sessions with a longer ttl (ms); 0: no limit beyond the core's.
    #[arg(long, default_value_t = 3_600_000)]
    max_ttl_ms: u64,
    /// Refuse to open more sessions than this through one client connection; 0: no quota.
    #[arg(long, default_value_t = 1024)]
    max_sessions_per_conn: usize,
    /// Refuse to open more sessions than this for the clients of one bearer token
    /// together (on every connection, through any node); 0: no quota.
    #[arg(long, default_value_t = 0)]
    max_sessions_per_token: usize,
    /// Client connections at once; when full, one more takes the place of the oldest
    /// that has not yet had a token accepted, and is closed at once only if none.
    /// Lowered at start to fit the open-file limit (RLIMIT_NOFILE, raised to its hard
    /// limit first).
    #[arg(long, default_value_t = 4096)]
    max_client_connections: usize,
    /// Client connections at once from one IP address (IPv6: see
    /// --client-ipv6-prefix-len).
    #[arg(long, default_value_t = 512)]
    max_client_connections_per_addr: usize,
    /// The leading bits of a client's IPv6 address that --max-client-connections-per-addr
    /// counts it by: 128 each address alone; 64 its /64, within which one host may use any
    /// number of addresses (but every host of a LAN shares it).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u8).range(1..=128))]
    client_ipv6_prefix_len: u8,
    /// Raft connections at once, from all addresses; when full, one more takes the place
    /// of the oldest that has not yet sent a member's request, and is closed at once only
    /// if none.
    #[arg(long, default_value_t = fencelock_server::net::MAX_PEER_CONNECTIONS)]
    max_peer_connections: usize,
    /// Raft connections at once from one IP address.
    #[arg(long, default_value_t = 64)]
    max_peer_connections_per_addr: usize,
    /// Pushes queued for all client connections together; when a push finds them spent,
    /// the connection holding the most is closed.
    #[arg(long, default_value_t = fencelock_server::state_machine::MAX_QUEUED_PUSHES)]
    max_queued_pushes: usize,
    /// Bytes of answers over 512 bytes (those that grow: a lock's holders or waiters,
    /// backup and export pages, members and status with a large membership), computed
    /// and not yet written, for all client connections together; a request past it is
    /// refused.
    #[arg(long, default_value_t = fencelock_server::net::MAX_UNWRITTEN_LIST_BYTES)]
    max_unwritten_list_bytes: usize,
    /// The largest client request frame (bytes); a longer one is refused and its
    /// connection closed.
    #[arg(long, default_value_t = 64 << 10)]
    max_client_frame_bytes: u32,
    /// The largest Raft request frame (bytes); at least 4194304 (a snapshot chunk plus
    /// room: what every node sends at most).
    #[arg(long, default_value_t = 8 << 20)]
    max_peer_frame_bytes: u32,
    /// Close a client connection after this long (ms) without a request, unless a session
    /// is attached to it or a request is in flight.
    #[arg(long, default_value_t = 60_000)]
    client_idle_timeout_ms: u64,
    /// Close a Raft connection after this long (ms) without a request.
    #[arg(long, default_value_t = 60_000)]
    peer_idle_timeout_ms: u64,
    /// On both ports: once a frame has started, it must arrive whole within this long
    /// (ms), or the connection is closed (a slow sender is cut off); and a write to a
    /// client or peer that makes no progress for this long closes it (one that stopped
    /// reading is cut off).
    #[arg(long, default_value_t = 10_000)]
    read_timeout_ms: u64,
    /// The cluster CA certificate (PEM): peers' and this node's certificates are signed by it.
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// This node's certificate chain (PEM), naming `fencelock-node-ID` and its addresses.
    #[arg(long, requires_all = ["tls_ca", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, requires_all = ["tls_ca", "tls_cert"])]
    tls_key: Option<PathBuf>,
    /// Plain TCP without TLS, for local development: clients and peers are not
    /// authenticated by certificates and traffic is readable; loopback addresses only.
    #[arg(long, conflicts_with_all = ["tls_ca", "tls_cert", "tls_key"])]
    insecure_plaintext: bool,
    /// Bearer tokens file (ROLE PREFIX sha256:HEX per line; see server/README.md). Without
    /// it every client may do everything, membership changes included: a node with TLS
    /// (reachable from the network) then refuses to start unless --insecure-no-tokens.
    #[arg(long)]
    tokens: Option<PathBuf>,
    /// Start a TLS node without --tokens: every client that reaches it may do everything
    /// (force releases, membership changes, exports). For a network whose every client is
    /// trusted; a plain-TCP node (loopback only) needs no such flag.
    #[arg(long, conflicts_with = "tokens")]
    insecure_no_tokens: bool,
    /// ID=ADDR: dial node ID's Raft port at ADDR instead of its member address (a
    /// loopback proxy between this node and that one, as the partition tests use).
    /// Plain TCP only (with --insecure-plaintext).
    #[arg(long = "dial")]
    dial: Vec<String>,
}

#[derive(clap::Subcommand)]
enum Sub {
    /// Backups: save one from a running cluster, restore a new cluster from one.
    #[command(subcommand)]
    Snapshot(SnapCmd),
    /// DANGER — the way out of a permanently lost majority: make a NEW single-member
    /// cluster from a stopped survivor's data directory (refused, exit 1, while a node runs
    /// on it). Acknowledged writes that never reached the survivor are lost. See
    /// server/README.md, "Recovering from a lost majority".
    ForceNewCluster(ForceArgs),
}

#[derive(clap::Args)]
struct ForceArgs {
    /// The stopped survivor's data directory (only read, under its LOCK: refused while a
    /// node runs on it).
    #[arg(long)]
    from: PathBuf,
    /// The new member's data directory (must not hold a node yet).
    #[arg(long)]
    dir: PathBuf,
    /// The one member of the new cluster: ID=RAFT_ADDR/CLIENT_ADDR. Start it with this
    /// --peer only and without --init, then add members back (add-learner, set-voters)
    /// with empty data directories.
    #[arg(long = "peer", required = true)]
    peer: String,
    /// Raise the fencing revision this far above the highest token the survivor knows:
    /// tokens the lost majority granted without the survivor knowing stay below the new
    /// cluster's, if there were at most this many.
    #[arg(long, default_value_t = 1_000_000)]
    skip_tokens: u64,
    /// And at least to this: give the highest token any resource has seen, to be sure
    /// (at most 2^53 - 1, the largest a JavaScript client reads exactly).
    #[arg(long, default_value_t = 0)]
    token_floor: u64,
    /// Required: you accept that writes acknowledged by the lost majority but not in the
    /// survivor's log are lost, and that the old members must never be started again.
    #[arg(long, required = true)]
    accept_data_loss: bool,
    /// Session table rows of the new cluster (the state must fit). Default: as the survivor
    /// records them, else 16 384.
    #[arg(long)]
    sessions: Option<usize>,
    /// Lock table rows (default: as the survivor records them, else 16 384).
    #[arg(long)]
    locks: Option<usize>,
    /// Claim pool rows (default: as the survivor records them, else 32 768).
    #[arg(long)]
    claims: Option<usize>,
    /// The survivor's lock-delay (default: as it records it, else as its snapshot carries
    /// it, else 0). Only needed for a survivor of an earlier build with no snapshot: the
    /// state keeps the core settings it was made with.
    #[arg(long)]
    lock_delay_ms: Option<u64>,
    /// The survivor's watcher limit (default as for --lock-delay-ms, else 4).
    #[arg(long)]
    max_watchers: Option<u32>,
}

/// The file of a data directory that a running node, and `force-new-cluster` reading it,
/// hold an exclusive lock on (flock(2)). The kernel drops the lock when its holder exits,
/// however it exits: a LOCK file left behind blocks nobody.
const LOCK_FILE: &str = "LOCK";

/// Takes the exclusive lock on `dir`'s [`LOCK_FILE`] (creating the file), held until the
/// returned value is dropped; an error naming `dir` if another process holds it. `None`
/// (no lock) only when `dir` is on a read-only filesystem without a LOCK file: no node can
/// be writing there. A LOCK that is no regular file is refused, naming it: a symbolic
/// link is not followed, and a FIFO is opened without waiting for a reader (it would
/// block the start silently) and then refused.
fn lock_dir(dir: &Path) -> Result<Option<nix::fcntl::Flock<std::fs::File>>, String> {
    use nix::fcntl::{Flock, FlockArg};
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(LOCK_FILE);
    let flags = (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits();
    let file = match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(flags)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::ReadOnlyFilesystem => {
            match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        Err(e) => {
            // A FIFO without a reader (ENXIO), a symbolic link (ELOOP).
            let kind = matches!(
                e.raw_os_error(),
                Some(c) if c == nix::errno::Errno::ENXIO as i32
                    || c == nix::errno::Errno::ELOOP as i32
            );
            let why = if kind {
                format!(" (a {LOCK_FILE} must be a regular file)")
            } else {
                String::new()
            };
            return Err(format!("{}: {e}{why}", path.display()));
        }
    };
    match file.metadata() {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(format!("{} is no regular file", path.display())),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(held) => Ok(Some(held)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(format!(
            "{} is in use: a running fencelock-node (or force-new-cluster) holds its {LOCK_FILE}; \
             stop it first",
            dir.display()
        )),
        Err((_, e)) => Err(format!("locking {}: {e}", path.display())),
    }
}

/// `force-new-cluster`: see [`fencelock_server::ops::force_new_cluster`].
async fn force_new_cluster_cmd(a: ForceArgs) -> Result<(), String> {
    // The largest integer a JavaScript number holds exactly (tokens reach browsers).
    const MAX_TOKEN: u64 = (1 << 53) - 1;
    let (id, addr) = parse_peer(&a.peer, true)?;
    if a.token_floor > MAX_TOKEN {
        return Err(format!("--token-floor {} is above 2^53 - 1", a.token_floor));
    }
    // Held until the new cluster is written: no node may start on the survivor meanwhile.
    let _lock = if a.from.is_dir() {
        lock_dir(&a.from)?
    } else {
        None // not a data directory: ops::force_new_cluster says so
    };

    // What the survivor says it was made with fills in what the flags leave out.
    let made = fencelock_server::settings::made_with(&a.from).map_err(|e| e.to_string())?;
    let (recorded, core) = (made.recorded, made.core);
    let default = fencelock_server::state_machine::ServiceConfig::default();
    let base = recorded.unwrap_or(default);
    let core = core.unwrap_or(default.core);
    let service = fencelock_server::state_machine::ServiceConfig {
        sessions: a.sessions.unwrap_or(base.sessions),
        locks: a.locks.unwrap_or(base.locks),
        claims: a.claims.unwrap_or(base.claims),
        core: fencelock::Config {
            lock_delay: a.lock_delay_ms.unwrap_or(core.lock_delay),
            max_watchers: a.max_watchers.unwrap_or(core.max_watchers),
            ..core
        },
    };
    check_table_flags(&service)?;
    note!(
        "fencelock-node: FORCING A NEW CLUSTER from {} — writes the lost members acknowledged \
         but {} never received are LOST; never start the old members again",
        a.from.display(),
        a.from.display()
    );
    // Nor on the new directory, which would then write the same log as the recovery:
    // locked once the flags are checked and `--from` holds a log (else the recovery
    // refuses, and no directory is left behind).
    let _new_lock = if a.from.join("raft.log").is_file() {
        fencelock_server::disk::create_private_dir(&a.dir)
            .map_err(|e| format!("{}: {e}", a.dir.display()))?;
        let same = std::fs::canonicalize(&a.dir).ok() == std::fs::canonicalize(&a.from).ok();
        if same {
            None // ops::force_new_cluster refuses it, saying why
        } else {
            lock_dir(&a.dir)?
        }
    } else {
        None
    };
    let r = fencelock_server::ops::force_new_cluster(
        &a.from,
        &a.dir,
        &service,
        (id, addr),
        a.skip_tokens,
        a.token_floor,
    )
    .await
    .map_err(|e| format!("force-new-cluster from {}: {e}", a.from.display()))?;
    if let Some(c) = r.cut {
        note!(
            "fencelock-node: cut {} bytes at byte {} of the survivor's raft.log (in its copy; \
             {} is unchanged): {}",
            c.bytes,
            c.at,
            a.from.display(),
            if c.damaged {
                "its last group was written whole and then damaged: the entries or vote it \
                 held are LOST"
            } else {
                "a torn last write, never acknowledged"
            }
        );
    }
    if r.log_lost {
        note!(
            "fencelock-node: the survivor's raft.log in {} is empty beside its snapshot: only \
             the snapshot's state (log index {}) is recovered; any entries the survivor had \
             after it are LOST (none, if the directory is an interrupted snapshot restore)",
            a.from.display(),
            r.snapshot_index.map_or("none".into(), |i| i.to_string())
        );
    }
    if r.revision > MAX_TOKEN {
        note!(
            "fencelock-node: warning: the revision {} is above 2^53 - 1: JavaScript clients \
             cannot read the new tokens exactly",
            r.revision
        );
    }
    tracing::warn!(
        from = %a.from.display(),
        dir = %a.dir.display(),
        index = r.index,
        revision_before = r.revision_before,
        revision = r.revision,
        cut_at = r.cut.map(|c| c.at),
        cut_bytes = r.cut.map(|c| c.bytes),
        log_lost = r.log_lost,
        "forced a new single-member cluster"
    );
    report(&format!(
        "new cluster of node {id} in {}: state at log index {} (snapshot at {}, commit index \
         recorded {}), {} sessions, {} locks; highest token recorded {}, next token above {}; \
         cut from the survivor's log: {}\n",
        a.dir.display(),
        r.index,
        r.snapshot_index.map_or("none".into(), |i| i.to_string()),
        r.committed.map_or("none".into(), |i| i.to_string()),
        r.sessions,
        r.locks,
        r.revision_before,
        r.revision,
        r.cut.map_or("nothing".into(), |c| format!(
            "{} bytes at byte {} ({})",
            c.bytes,
            c.at,
            if c.damaged { "damaged" } else { "torn" }
        ))
    ));
    report(&format!(
        "start it with --id {id} --dir {} --peer {} (no --init), then add members back with \
         empty data directories: fencelock add-learner …, fencelock set-voters …\n",
        a.dir.display(),
        a.peer
    ));
    Ok(())
}

#[derive(clap::Subcommand)]
enum SnapCmd {
    /// Fetch a backup (GET /snapshot) from the leader among these metrics addresses and
    /// write it to FILE (checked first; written to FILE.tmp, fsynced, renamed). For a
    /// cluster without tokens only: a node with --tokens serves backups over its client
    /// port (`fencelock backup FILE`, with an admin token), never over this plain-HTTP
    /// port, and this command sends no token.
    Save {
        /// Where to write the backup.
        file: PathBuf,
        /// Metrics addresses (--metrics-addr) of the nodes, comma-separated: the leader's
        /// answers.
        #[arg(long, required = true, value_delimiter = ',')]
        from: Vec<String>,
        /// Refuse a backup larger than this many bytes (the answer is read into memory).
        #[arg(long, default_value_t = 1 << 30)]
        max_bytes: usize,
    },
    /// Prepare the data directory of one member of a NEW cluster from a backup. Run it for
    /// every member with the same FILE and the same --peer list, then start each member
    /// with that --peer list (no --init: the membership is in the restored snapshot).
    Restore {
        /// The backup.
        file: PathBuf,
        /// The new member's data directory (must not hold a node yet).
        #[arg(long)]
        dir: PathBuf,
        /// Every member of the new cluster: ID=RAFT_ADDR/CLIENT_ADDR (repeat).
        #[arg(long = "peer", required = true)]
        peers: Vec<String>,
        /// Session table rows (as the new cluster will run with).
        #[arg(long, default_value_t = 1 << 14)]
        sessions: usize,
        /// Lock table rows.
        #[arg(long, default_value_t = 1 << 14)]
        locks: usize,
        /// Claim pool rows.
        #[arg(long, default_value_t = 1 << 15)]
        claims: usize,
    },
}

/// How long `snapshot save` waits for one address's whole answer.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// `GET /snapshot` from `addr` with hyper's HTTP/1 client, in at most [`FETCH_TIMEOUT`]
/// and `max_bytes` of body: (status, body). Sends no credential: nothing on this port
/// proves it is a node.
async fn fetch_backup(addr: &str, max_bytes: usize) -> Result<(u16, Vec<u8>), String> {
    match tokio::time::timeout(FETCH_TIMEOUT, fetch_backup_untimed(addr, max_bytes)).await {
        Ok(r) => r,
        Err(_) => Err(format!("{addr}: no whole answer in {FETCH_TIMEOUT:?}")),
    }
}

/// The most bytes of an error answer to `GET /snapshot` that `snapshot save` reads and
/// shows.
const ERROR_SHOWN: usize = 1024;

async fn fetch_backup_untimed(addr: &str, max_bytes: usize) -> Result<(u16, Vec<u8>), String> {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(loopback(addr)?)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
    let conn = tokio::spawn(conn);
    let req = hyper::Request::get("/snapshot")
        .header(hyper::header::HOST, addr)
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = send
        .send_request(req)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let status = resp.status().as_u16();
    if status != 200 {
        // An error answer is shown to the operator, and nothing on this port proves it is a
        // node's: its first ERROR_SHOWN bytes at most are read (then escaped where shown).
        let mut body = resp.into_body();
        let mut said = Vec::new();
        while said.len() < ERROR_SHOWN {
            match body.frame().await {
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        let room = ERROR_SHOWN - said.len();
                        said.extend_from_slice(&d[..d.len().min(room)]);
                    }
                }
                _ => break,
            }
        }
        conn.abort();
        return Ok((status, said));
    }
    let body = http_body_util::Limited::new(resp.into_body(), max_bytes)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                format!("{addr}: the answer is larger than --max-bytes {max_bytes}")
            } else {
                format!("{addr}: {e}")
            }
        })?
        .to_bytes()
        .to_vec();
    conn.abort();
    Ok((status, body))
}

async fn snapshot_cmd(cmd: SnapCmd) -> Result<(), String> {
    match cmd {
        SnapCmd::Save {
            file,
            from,
            max_bytes,
        } => {
            let mut why = Vec::new();
            for addr in &from {
                match fetch_backup(addr, max_bytes).await {
                    Ok((200, bytes)) => {
                        let index =
                            fencelock_server::state_machine::check_backup(&bytes).map_err(|e| {
                                format!("{addr} sent a backup that fails this build's check: {e}")
                            })?;
                        // A backup holds every session's credential: 0600, through
                        // FILE.tmp (the whole name plus `.tmp`).
                        fencelock_server::disk::write_file_synced(&file, &bytes)
                            .map_err(|e| e.to_string())?;
                        report(&format!(
                            "saved {} ({} bytes, log index {index}) from {addr}\n",
                            file.display(),
                            bytes.len()
                        ));
                        return Ok(());
                    }
                    Ok((code, body)) => why.push(format!(
                        "{addr}: {code} {}",
                        fencelock_server::stdio::shown(String::from_utf8_lossy(&body).trim())
                    )),
                    Err(e) => why.push(e),
                }
            }
            Err(format!("no node served a backup: {}", why.join("; ")))
        }
        SnapCmd::Restore {
            file,
            dir,
            peers,
            sessions,
            locks,
            claims,
        } => {
            let mut members: BTreeMap<u64, NodeAddr> = BTreeMap::new();
            for p in &peers {
                let (pid, addr) = parse_peer(p, true)?;
                // One address per node, as a node's start requires: a second would
                // silently replace the first in the restored membership.
                if members.insert(pid, addr).is_some() {
                    return Err(format!("--peer names node {pid} twice"));
                }
            }
            let service = fencelock_server::state_machine::ServiceConfig {
                sessions,
                locks,
                claims,
                ..Default::default()
            };
            // Before anything is read or allocated for them.
            check_table_flags(&service)?;
            let cap = fencelock_server::state_machine::max_snapshot_file_bytes(&service);
            let bytes = fencelock_server::disk::read_capped(&file, cap).map_err(|e| {
                format!(
                    "{}: {e}, the limit for a backup restored into tables of these sizes",
                    file.display()
                )
            })?;
            // A damaged file is refused before `dir` is made.
            fencelock_server::state_machine::check_backup_within(&bytes, &service)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            // Held until the restore is written: a node started on `dir` meanwhile (a
            // unit restarting) would write the same log as the restore.
            fencelock_server::disk::create_private_dir(&dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            let _lock = lock_dir(&dir)?;
            let index = fencelock_server::ops::restore(&bytes, &dir, &service, members)
                .map_err(|e| format!("restoring {} into {}: {e}", file.display(), dir.display()))?;
            report(&format!(
                "restored {} (log index {index}) into {}\n",
                file.display(),
                dir.display()
            ));
            Ok(())
        }
    }
}

fn loopback(addr: &str) -> Result<SocketAddr, String> {
    loopback_addr(addr)
}

fn parse_dial(s: &str) -> Result<(u64, String), String> {
    let (id, addr) = s.split_once('=').ok_or("dial must be ID=ADDR")?;
    loopback(addr)?;
    Ok((
        id.parse().map_err(|e| format!("bad id {id}: {e}"))?,
        addr.to_string(),
    ))
}

/// `addr` as a socket address (`IP:port`); a loopback one unless `any_host` (TLS on).
fn socket_addr(addr: &str, any_host: bool) -> Result<SocketAddr, String> {
    if any_host {
        addr.parse().map_err(|e| format!("bad address {addr}: {e}"))
    } else {
        loopback(addr).map_err(|e| format!("{e}; addresses off loopback need TLS"))
    }
}

fn parse_peer(s: &str, any_host: bool) -> Result<(u64, NodeAddr), String> {
    let (id, rest) = s.split_once('=').ok_or("peer must be ID=RAFT/CLIENT")?;
    let (raft, client) = rest.split_once('/').ok_or("peer must be ID=RAFT/CLIENT")?;
    socket_addr(raft, any_host)?;
    socket_addr(client, any_host)?;
    Ok((
        id.parse().map_err(|e| format!("bad id {id}: {e}"))?,
        NodeAddr {
            raft: raft.into(),
            client: client.into(),
        },
    ))
}

/// The log filter without `--log-level` or `RUST_LOG`: this crate at info, openraft's
/// own (chatty) info lines left out.
const DEFAULT_LOG: &str = "info,openraft=warn";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    // A filter that does not parse is refused from either source: an operator who set
    // RUST_LOG and got the default instead would not know why the logs look as they do.
    // An empty RUST_LOG counts as unset.
    let (source, filter) = match (&args.log_level, std::env::var("RUST_LOG")) {
        (Some(l), _) => ("--log-level", tracing_subscriber::EnvFilter::try_new(l)),
        (None, Ok(l)) if !l.is_empty() => ("RUST_LOG", tracing_subscriber::EnvFilter::try_new(l)),
        (None, Err(std::env::VarError::NotUnicode(_))) => {
            note!("fencelock-node: bad RUST_LOG: not UTF-8");
            std::process::exit(2);
        }
        (None, _) => ("", tracing_subscriber::EnvFilter::try_new(DEFAULT_LOG)),
    };
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            note!("fencelock-node: bad {source}: {e}");
            std::process::exit(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        // A log line that cannot be written (stderr a pipe whose reader is gone) is lost;
        // the default reports the failure with eprintln!, which panics on the same stderr.
        .log_internal_errors(false)
        .init();
    let r = match args.cmd {
        Some(Sub::Snapshot(cmd)) => snapshot_cmd(cmd).await,
        Some(Sub::ForceNewCluster(a)) => force_new_cluster_cmd(a).await,
        None => run(args).await,
    };
    if let Err(e) = r {
        tracing::error!("{e}");
        note!("fencelock-node: {e}");
        std::process::exit(1);
    }
}

/// Resolves at SIGTERM or SIGINT; says which.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => tokio::select! {
            _ = t.recv() => "SIGTERM",
            _ = i.recv() => "SIGINT",
        },
        _ => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

/// Checks the table sizes given by `--sessions`, `--locks` and `--claims`
/// ([`ServiceConfig::check_tables`]), naming the flags in the refusal.
///
/// [`ServiceConfig::check_tables`]: fencelock_server::state_machine::ServiceConfig::check_tables
fn check_table_flags(
    service: &fencelock_server::state_machine::ServiceConfig,
) -> Result<(), String> {
    service
        .check_tables()
        .map_err(|e| format!("--sessions, --locks, --claims: {e}"))
}

/// Refuses Raft timing the node cannot keep: an election timeout whose double does not fit
/// the timers, or heartbeats too far apart for a leader's clock to run.
fn check_timing(args: &Args) -> Result<(), String> {
    // An hour is far past any sane timeout; its double, and the timers openraft adds it
    // to, fit with room to spare.
    if args.election_ms > 3_600_000 {
        return Err("--election-ms is too large (at most 3 600 000)".into());
    }
    // The heartbeat rule is the node's own ([`ElectionTiming::check`]); judged here too so
    // that a refusal comes before the data directory is made.
    fencelock_server::election::ElectionTiming {
        heartbeat_ms: args.heartbeat_ms,
        election_ms: (args.election_ms, 2 * args.election_ms),
    }
    .check()
    .map_err(|e| {
        format!(
            "--heartbeat-ms {}, --election-ms {}: {e}",
            args.heartbeat_ms, args.election_ms
        )
    })?;
    Ok(())
}

/// Refuses transport limits that would stop the node from working.
fn check_net_limits(args: &Args) -> Result<(), String> {
    if args.max_peer_frame_bytes < MIN_RAFT_FRAME {
        return Err(format!(
            "--max-peer-frame-bytes must be at least {MIN_RAFT_FRAME} (a snapshot chunk plus \
             room: peers send frames that large)"
        ));
    }
    if args.max_client_frame_bytes < 1024 {
        return Err("--max-client-frame-bytes must be at least 1024".into());
    }
    for (flag, v) in [
        (
            "--max-client-connections",
            args.max_client_connections as u64,
        ),
        (
            "--max-client-connections-per-addr",
            args.max_client_connections_per_addr as u64,
        ),
        ("--max-peer-connections", args.max_peer_connections as u64),
        ("--max-queued-pushes", args.max_queued_pushes as u64),
        (
            "--max-unwritten-list-bytes",
            args.max_unwritten_list_bytes as u64,
        ),
        (
            "--max-peer-connections-per-addr",
            args.max_peer_connections_per_addr as u64,
        ),
        ("--client-idle-timeout-ms", args.client_idle_timeout_ms),
        ("--peer-idle-timeout-ms", args.peer_idle_timeout_ms),
        ("--read-timeout-ms", args.read_timeout_ms),
    ] {
        if v == 0 {
            return Err(format!("{flag} must be at least 1"));
        }
    }
    Ok(())
}

/// File descriptors kept back from connections: the node's own files and listeners and
/// the metrics listener's connections (at most `OPS_MAX_CONNECTIONS`, 16, of the 64), the
/// Raft connections it dials (8 per member), and on each port the displaced connections
/// still closing (`net::MAX_CLOSING`), which hold their sockets for a moment beyond the
/// port's total.
fn fd_reserve(members: usize) -> u64 {
    64 + 8 * members as u64 + 2 * fencelock_server::net::MAX_CLOSING as u64
}

/// Raises the soft open-file limit to the hard one, and returns how many client and Raft
/// connections to accept at most so that both together fit in it besides [`fd_reserve`]
/// (see [`fit_connections`]): with more connections than descriptors, every new one would
/// fail (`EMFILE`), and a flood of one port could take the other's descriptors.
fn connections_within_fd_limit(clients: usize, peers: usize, members: usize) -> (usize, usize) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((mut soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return (clients, peers);
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        soft = hard;
    }
    let reserve = fd_reserve(members);
    let room = usize::try_from(soft.saturating_sub(reserve)).unwrap_or(usize::MAX);
    let (c, p) = fit_connections(room, clients, peers);
    if (c, p) != (clients, peers) {
        tracing::warn!(
            open_files = soft,
            "--max-client-connections {clients} and --max-peer-connections {peers} do not \
             fit the open-file limit of {soft} (with {reserve} kept for files and dialled \
             peers): serving at most {c} client and {p} Raft connections; raise the limit \
             (ulimit -n, systemd LimitNOFILE) for more"
        );
    }
    (c, p)
}

/// Client and Raft connection limits that fit in `room` descriptors together: as asked
/// when they fit; otherwise the Raft port keeps at most half the room when clients want
/// the rest, clients get what it leaves, and the Raft port any room clients do not want.
/// Each is at least 1.
fn fit_connections(room: usize, clients: usize, peers: usize) -> (usize, usize) {
    if clients.checked_add(peers).is_some_and(|n| n <= room) {
        return (clients, peers);
    }
    let c = clients.min(room - peers.min(room / 2));
    let p = peers.min(room - c);
    (c.max(1), p.max(1))
}

async fn run(args: Args) -> Result<(), String> {
    let (Some(id), Some(dir)) = (args.id, args.dir.clone()) else {
        return Err("--id and --dir are required".into());
    };
    // Flags that need nothing else are judged before anything is made or bound.
    check_table_flags(&fencelock_server::state_machine::ServiceConfig {
        sessions: args.sessions,
        locks: args.locks,
        claims: args.claims,
        ..Default::default()
    })?;
    check_net_limits(&args)?;
    check_timing(&args)?;
    // Held for as long as the node runs: a second node or force-new-cluster is refused.
    // Private to this user: the log and the snapshot hold session credentials.
    fencelock_server::disk::create_private_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let _lock = lock_dir(&dir)?;
    let tls = match (&args.tls_ca, &args.tls_cert, &args.tls_key) {
        (Some(ca), Some(cert), Some(key)) => Some(NodeTls::load(ca, cert, key)?),
        _ if args.insecure_plaintext => None,
        _ => {
            return Err(
                "give --tls-ca, --tls-cert and --tls-key, or --insecure-plaintext \
                        (plain TCP on loopback, for local development)"
                    .into(),
            )
        }
    };
    let any_host = tls.is_some();
    let mut peers: BTreeMap<u64, NodeAddr> = BTreeMap::new();
    for p in &args.peers {
        let (pid, addr) = parse_peer(p, any_host)?;
        // One address per node: a second would silently replace the first.
        if peers.insert(pid, addr).is_some() {
            return Err(format!("--peer names node {pid} twice"));
        }
    }
    let me = peers
        .get(&id)
        .ok_or("this node's id is not among the peers")?
        .clone();
    // The membership --init would propose, judged before anything binds or is written (a
    // cluster's most members: the peers would refuse more as they decode it).
    if args.init {
        fencelock_server::membership::check_members(&peers).map_err(|e| format!("--init: {e}"))?;
    }
    let tokens = match &args.tokens {
        Some(path) => {
            let t = Tokens::load(path)?;
            // Every node that serves the same clients should log the same digest.
            tracing::info!(
                "tokens file {}: {} lines, digest {}",
                path.display(),
                t.len(),
                t.digest()
            );
            Some(std::sync::Arc::new(t))
        }
        None if tls.is_some() && !args.insecure_no_tokens => {
            return Err(
                "a node with TLS serves clients on the network: give --tokens FILE \
                        (see server/README.md, Security), or --insecure-no-tokens to let \
                        every client that reaches it do everything"
                    .into(),
            )
        }
        None => {
            tracing::warn!("no --tokens file: every client may do everything");
            None
        }
    };
    let raft_l = TcpListener::bind(socket_addr(&me.raft, any_host)?)
        .await
        .map_err(|e| format!("bind {}: {e}", me.raft))?;
    let client_l = TcpListener::bind(socket_addr(&me.client, any_host)?)
        .await
        .map_err(|e| format!("bind {}: {e}", me.client))?;
    let ops_l = match &args.metrics_addr {
        Some(a) => Some(
            TcpListener::bind(loopback(a)?)
                .await
                .map_err(|e| format!("bind {a}: {e}"))?,
        ),
        None => None,
    };
    let mut config = NodeConfig::new(id, dir.clone());
    config.grace_ms = args.grace_ms;
    config.service.core.lock_delay = args.lock_delay_ms;
    config.service.core.max_watchers = args.max_watchers;
    config.service.sessions = args.sessions;
    config.service.locks = args.locks;
    config.service.claims = args.claims;
    config.max_ttl_ms = (args.max_ttl_ms > 0).then_some(args.max_ttl_ms);
    config.max_sessions_per_conn =
        (args.max_sessions_per_conn > 0).then_some(args.max_sessions_per_conn);
    config.max_sessions_per_token =
        (args.max_sessions_per_token > 0).then_some(args.max_sessions_per_token);
    config.heartbeat_ms = args.heartbeat_ms;
    config.snapshot_chunk_timeout_ms = args.read_timeout_ms;
    config.election_ms = (args.election_ms, 2 * args.election_ms);
    // Members off loopback are allowed (and dialled) only over TLS.
    config.loopback_members = !any_host;
    let dial: BTreeMap<u64, String> = args
        .dial
        .iter()
        .map(|d| parse_dial(d))
        .collect::<Result<_, _>>()?;
    if tls.is_some() && !dial.is_empty() {
        return Err("--dial is for plain-TCP test clusters (--insecure-plaintext) only".into());
    }
    let node = match &tls {
        Some(t) => Node::start(config, TlsNetwork::new(t.clone())).await,
        None => Node::start(config, TcpNetwork::dial_via(dial)).await,
    }
    .map_err(|e| format!("starting on {}: {e}", dir.display()))?;
    let (client_connections, peer_connections) = connections_within_fd_limit(
        args.max_client_connections,
        args.max_peer_connections,
        peers.len(),
    );
    let peer_policy = PeerPolicy {
        tls: tls.clone(),
        max_connections: peer_connections,
        max_per_addr: args.max_peer_connections_per_addr,
        max_frame: args.max_peer_frame_bytes,
        idle_timeout: Duration::from_millis(args.peer_idle_timeout_ms),
        read_timeout: Duration::from_millis(args.read_timeout_ms),
        stats: node.stats.net.clone(),
        // Before it knows a membership, a node serves only the other nodes it was given.
        first_peers: peers.keys().copied().filter(|&p| p != id).collect(),
    };
    let raft_task = tokio::spawn(serve_peers(raft_l, node.elector().clone(), peer_policy));
    // The metrics listener's /snapshot holds every session's credential: a node with
    // tokens does not serve it there (its backups go over the client port).
    let ops_tokens = tokens.clone();
    let policy = ClientPolicy {
        tls: tls.map(|t| t.clients),
        tokens,
        max_connections: client_connections,
        max_per_addr: args.max_client_connections_per_addr,
        ipv6_prefix_len: args.client_ipv6_prefix_len,
        max_frame: args.max_client_frame_bytes,
        idle_timeout: Duration::from_millis(args.client_idle_timeout_ms),
        read_timeout: Duration::from_millis(args.read_timeout_ms),
        auth_timeout: fencelock_server::net::AUTH_TIMEOUT,
        max_queued_pushes: args.max_queued_pushes,
        max_unwritten_list_bytes: args.max_unwritten_list_bytes,
    };
    let client_task = tokio::spawn(serve_clients_with(client_l, node.clone(), policy));
    let (ops_stop, ops_stopped) = tokio::sync::oneshot::channel::<()>();
    let ops_task = ops_l.map(|l| {
        let node = node.clone();
        let ops_tokens = ops_tokens.clone();
        tokio::spawn(async move {
            let stop = async {
                let _ = ops_stopped.await;
            };
            let policy = OpsPolicy {
                tokens: ops_tokens,
                ..OpsPolicy::default()
            };
            if let Err(e) = serve_ops_with(l, node, policy, stop).await {
                tracing::error!("metrics listener: {e}");
            }
        })
    });
    if args.init
        && !node
            .raft
            .is_initialized()
            .await
            .map_err(|e| e.to_string())?
    {
        node.initialize(peers).await?;
    }
    tracing::info!(
        id,
        raft = %me.raft,
        client = %me.client,
        metrics = ?args.metrics_addr,
        dir = %dir.display(),
        version = env!("CARGO_PKG_VERSION"),
        "fencelock-node up"
    );
    let sig = stop_signal().await;
    tracing::info!(signal = sig, "stopping: no new client connections");
    // 1. Stop accepting clients.
    client_task.abort();
    // 2. Let what is in flight finish (bounded): proposals queued or being committed.
    let deadline = std::time::Instant::now() + Duration::from_millis(1000);
    while node.proposer_queue() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // 3. Stop Raft. openraft 0.9 has no leader transfer (its Trigger offers elect,
    //    heartbeat, snapshot and purge_log), so a leader simply stops heartbeating: the
    //    followers elect a new leader after one election timeout. Every acknowledged
    //    write is already fsynced on a quorum; there is nothing else to flush.
    let was_leader = node.raft.metrics().borrow().current_leader == Some(id);
    node.shutdown().await;
    raft_task.abort();
    let _ = ops_stop.send(());
    if let Some(mut t) = ops_task {
        // The metrics listener finishes the requests it is serving, but an open connection
        // (a scraper's keep-alive, a local program stalling half-way through a request)
        // must not hold up the stop: at most a second.
        if tokio::time::timeout(Duration::from_secs(1), &mut t)
            .await
            .is_err()
        {
            t.abort();
        }
    }
    tracing::info!(was_leader, "stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_tls_only_loopback_addresses_are_accepted() {
        assert!(loopback("127.0.0.1:7101").is_ok());
        assert!(loopback("[::1]:7101").is_ok());
        assert!(loopback("0.0.0.0:7101").is_err());
        assert!(loopback("10.1.2.3:7101").is_err());
        assert!(
            loopback("localhost:7101").is_err(),
            "names are not resolved"
        );
        let (id, a) = parse_peer("2=127.0.0.1:7202/127.0.0.1:7102", false).unwrap();
        assert_eq!(
            (id, a.raft.as_str(), a.client.as_str()),
            (2, "127.0.0.1:7202", "127.0.0.1:7102")
        );
        assert!(parse_peer("2=127.0.0.1:7202", false).is_err());
        assert!(parse_peer("2=192.168.0.1:7202/127.0.0.1:7102", false).is_err());
        assert!(parse_peer("x=127.0.0.1:7202/127.0.0.1:7102", false).is_err());
        assert_eq!(
            parse_dial("2=127.0.0.1:9000"),
            Ok((2, "127.0.0.1:9000".to_string()))
        );
        assert!(parse_dial("2=10.0.0.1:9000").is_err());
        assert!(parse_dial("127.0.0.1:9000").is_err());
    }

    #[test]
    fn client_and_raft_connections_fit_the_descriptors_together() {
        // As asked when they fit.
        assert_eq!(fit_connections(10_000, 4096, 256), (4096, 256));
        // 128 descriptors, one member: 40 of room, split.
        assert_eq!(fd_reserve(1), 88);
        assert_eq!(fit_connections(40, 4096, 256), (20, 20));
        // Room one side does not want goes to the other.
        assert_eq!(fit_connections(56, 10, 256), (10, 46));
        assert_eq!(fit_connections(56, 4096, 10), (46, 10));
        // 1024 descriptors, three members: the Raft total fits in half, clients the rest.
        assert_eq!(fd_reserve(3), 104);
        assert_eq!(fit_connections(1024 - 104, 4096, 256), (664, 256));
        // Never 0, and no overflow at the extremes.
        assert_eq!(fit_connections(0, 4096, 256), (1, 1));
        assert_eq!(fit_connections(1, 4096, 256), (1, 1));
        assert_eq!(
            fit_connections(usize::MAX, usize::MAX, usize::MAX).0,
            usize::MAX / 2 + 1
        );
        for (room, c, p) in [(56, 4096, 256), (57, 3, 100), (1000, 999, 999), (7, 7, 7)] {
            let (fc, fp) = fit_connections(room, c, p);
            assert!(fc + fp <= room.max(2), "{room} {c} {p}: {fc} + {fp}");
            assert!(fc <= c && fp <= p);
        }
    }

    #[test]
    fn with_tls_any_ip_address_is_accepted() {
        let (_, a) = parse_peer("2=192.168.0.1:7202/10.1.2.3:7102", true).unwrap();
        assert_eq!(a.raft, "192.168.0.1:7202");
        assert!(parse_peer("2=[2001:db8::1]:7202/10.1.2.3:7102", true).is_ok());
        assert!(
            parse_peer("2=host:7202/10.1.2.3:7102", true).is_err(),
            "IP:port only"
        );
    }
}
