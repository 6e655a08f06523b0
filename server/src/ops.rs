//! The operations listener: health and metrics over HTTP (axum), on its own address
//! (`fencelock-node --metrics-addr`), apart from the client and Raft ports.
//!
//! * `GET /livez` — 200 `ok` while the process serves HTTP.
//! * `GET /readyz` — 200 when the node has a leader (itself or another; a leader that has
//!   stepped back for want of a quorum is not ready), applies what is
//!   committed (no more than [`APPLY_LAG`] entries behind) and can write its data
//!   directory (a probe write + fsync succeeds within [`crate::disk::PROBE_WAIT`] and no
//!   write waits for space); else 503. The body has one line per check, `ok NAME …` or `fail NAME …`.
//! * `GET /metrics` — Prometheus / OpenMetrics text (crate `prometheus-client`); see
//!   [`serve_ops`] for the families.
//! * `GET /snapshot` — a backup (on the leader only, after a linearizable read barrier, so
//!   it holds every acknowledged write): the applied state in the checksummed snapshot-file
//!   format, its log index in the `x-fencelock-index` header. A follower answers 503
//!   naming the leader's id. [`restore`] builds a new cluster's node from it. The backup
//!   holds every open session's credential, and this port is plain HTTP that nothing
//!   authenticates, so a node with tokens does not serve it here (403, whatever the
//!   request carries): its backups go over the client port, to an admin token
//!   (`Request::Backup`, `fencelock backup`; [`serve_ops_with`]).
//!
//! Cost of a scrape: O(number of metrics) plus one lock of the state machine; of a
//! `/readyz`: at most one small write and fsync in the data directory (shared by the
//! checks that ask at once).

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::auth::Tokens;
use crate::node::Node;
use crate::protocol::ClientError;

/// `/readyz` fails when the state machine is more than this many entries behind the
/// committed index.
pub const APPLY_LAG: u64 = 1000;

type Labels = Vec<(String, String)>;

/// A node's own counters: refusals by kind, open client connections. Cheap to clone
/// (shared counters).
#[derive(Clone, Debug, Default)]
pub struct NodeStats {
    /// Requests refused, by kind (the core's error kind, `not_leader`, `unavailable`,
    /// `bad_request`, or the limit's kind, e.g. `ttl_too_long`).
    pub refusals: Family<Labels, Counter>,
    /// Client connections open now.
    pub connections: Gauge,
    /// The transport's refusals, closes, accept errors, Raft connections and limits.
    pub net: crate::net::NetStats,
    /// The client connection limit the client port runs with (set by
    /// [`crate::net::serve_clients_with`]; 0 before it runs).
    pub client_limit: Arc<std::sync::atomic::AtomicU64>,
    limit_logged: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

/// A refusal by a limit is logged at most this often.
pub const LIMIT_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Counts one open client connection until dropped.
#[derive(Debug)]
pub struct ConnGuard(Gauge);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl NodeStats {
    /// Counts a refused request by its kind. Cost: O(1) (a map lookup).
    pub fn refused(&self, e: &ClientError) {
        let kind = match e {
            ClientError::Core(c) => c.kind.clone(),
            ClientError::NotLeader { .. } => "not_leader".into(),
            ClientError::Unavailable(_) => "unavailable".into(),
            ClientError::BadRequest(_) => "bad_request".into(),
            ClientError::NotOwner { .. } => "not_owner".into(),
            ClientError::Unauthenticated => "unauthenticated".into(),
            ClientError::Forbidden(_) => "forbidden".into(),
            ClientError::Limit { kind, message } => {
                let mut last = self.limit_logged.lock().unwrap_or_else(|p| p.into_inner());
                if last.is_none_or(|t| t.elapsed() >= LIMIT_LOG_EVERY) {
                    *last = Some(std::time::Instant::now());
                    tracing::warn!(limit = %kind, "request refused by a limit: {message} (logged at most every {} s)", LIMIT_LOG_EVERY.as_secs());
                }
                kind.clone()
            }
        };
        self.refusals
            .get_or_create(&vec![("kind".into(), kind)])
            .inc();
    }

    /// Counts a client connection as open until the guard is dropped. Cost: O(1).
    pub fn connection(&self) -> ConnGuard {
        self.connections.inc();
        ConnGuard(self.connections.clone())
    }
}

/// Gauges read from the node at each scrape.
#[derive(Default)]
struct Gauges {
    term: Gauge,
    leader: Gauge,
    is_leader: Gauge,
    commit: Gauge,
    applied: Gauge,
    last_log: Gauge,
    snapshot: Gauge,
    in_use: Family<Labels, Gauge>,
    capacity: Family<Labels, Gauge>,
    proposer_queue: Gauge,
    pushes_queued: Gauge,
    watches: Gauge,
    disk_full: Gauge,
    clock_behind_ms: Gauge,
}

struct Ops {
    node: Arc<Node>,
    registry: Registry,
    g: Gauges,
    tokens: Option<Arc<Tokens>>,
}

fn registry(node: &Node, g: &Gauges) -> Registry {
    let mut r = Registry::with_prefix("fencelock");
    r.register("raft_term", "Current Raft term", g.term.clone());
    r.register(
        "raft_leader",
        "Id of the leader this node knows (0: none)",
        g.leader.clone(),
    );
    r.register(
        "raft_is_leader",
        "1 when this node is the leader",
        g.is_leader.clone(),
    );
    r.register(
        "raft_commit_index",
        "Last committed log index this node saved",
        g.commit.clone(),
    );
    r.register(
        "raft_applied_index",
        "Last log index applied to the state machine",
        g.applied.clone(),
    );
    r.register(
        "raft_last_log_index",
        "Last log index appended",
        g.last_log.clone(),
    );
    r.register(
        "raft_snapshot_index",
        "Last log index in the snapshot",
        g.snapshot.clone(),
    );
    r.register(
        "table_in_use",
        "Rows in use per core table (sessions, locks, claims)",
        g.in_use.clone(),
    );
    r.register(
        "table_capacity",
        "Rows per core table (sessions, locks, claims)",
        g.capacity.clone(),
    );
    r.register(
        "proposer_queue",
        "Requests waiting to be proposed",
        g.proposer_queue.clone(),
    );
    r.register(
        "pushes_queued",
        "Pushes queued for all client connections together",
        g.pushes_queued.clone(),
    );
    r.register(
        "watches",
        "Watches in use (claim rows, counted in table_in_use{table=\"claims\"})",
        g.watches.clone(),
    );
    r.register(
        "disk_full",
        "1 while the data directory takes no writes",
        g.disk_full.clone(),
    );
    r.register(
        "leader_clock_behind_ms",
        "On a leader, how far its clock has fallen behind real time in its term: time no quorum confirmed (one node: time it did not run); 0 elsewhere",
        g.clock_behind_ms.clone(),
    );
    r.register(
        "disk_errors",
        "Failed writes and probes of the data directory",
        node.disk().errors(),
    );
    r.register(
        "fsync_seconds",
        "Time of one fdatasync of the Raft log",
        node.log.fsync_seconds(),
    );
    r.register(
        "grants",
        "Grants applied (to acquirers and to waiters)",
        node.shared.stats.grants.clone(),
    );
    r.register(
        "expiries",
        "Sessions expired",
        node.shared.stats.expiries.clone(),
    );
    r.register(
        "wait_seconds",
        "How long granted waiters waited (logical seconds)",
        node.shared.stats.wait_seconds.clone(),
    );
    r.register(
        "refusals",
        "Client requests refused, by kind",
        node.stats.refusals.clone(),
    );
    r.register(
        "client_connections",
        "Open client connections",
        node.stats.connections.clone(),
    );
    r.register(
        "push_closes",
        "Client connections closed for their pushes (push_backlog, push_budget)",
        node.shared.hub.push_closes.clone(),
    );
    let net = &node.stats.net;
    r.register(
        "peer_connections",
        "Open inbound Raft connections",
        net.peer_connections.clone(),
    );
    r.register(
        "unwritten_list_bytes",
        "Encoded bytes of list answers (holders, waiters) over 512 bytes not yet written to their clients",
        net.unwritten_list_bytes.clone(),
    );
    r.register(
        "connections_refused",
        "Connections closed at once by a connection limit, by port and reason",
        net.refused.clone(),
    );
    r.register(
        "connections_closed",
        "Connections closed by the node (idle, read_timeout, write_timeout, oversized, other_version, malformed, displaced, unauthenticated, unwritten_lists, not_a_member, not_started), by port",
        net.closed.clone(),
    );
    r.register(
        "accept_errors",
        "Failed accepts (no file descriptors left...), by port",
        net.accept_errors.clone(),
    );
    r.register(
        "peer_settings_refused",
        "Raft requests refused because their sender runs with other service settings",
        node.elector().settings().refused.clone(),
    );
    r.register(
        "net_limit",
        "The transport's limits as the node runs with them, by name",
        net.limits.clone(),
    );

    r
}

impl Ops {
    fn refresh(&self) {
        let n = &self.node;
        let m = n.raft.metrics().borrow().clone();
        let g = &self.g;
        g.term.set(m.current_term as i64);
        g.leader.set(m.current_leader.unwrap_or(0) as i64);
        g.is_leader.set((m.current_leader == Some(n.id)) as i64);
        g.commit
            .set(n.log.committed().map_or(0, |c| c.index) as i64);
        g.applied.set(m.last_applied.map_or(0, |c| c.index) as i64);
        g.last_log.set(m.last_log_index.unwrap_or(0) as i64);
        g.snapshot.set(m.snapshot.map_or(0, |c| c.index) as i64);
        let (u, c, w) = {
            let s = n.shared.state();
            (s.svc.usage(), s.svc.capacity(), s.svc.watches())
        };
        for (table, used, cap) in [
            ("sessions", u.sessions, c.sessions),
            ("locks", u.locks, c.locks),
            ("claims", u.claims, c.claims),
        ] {
            let l = vec![("table".to_string(), table.to_string())];
            g.in_use.get_or_create(&l).set(used as i64);
            g.capacity.get_or_create(&l).set(cap as i64);
        }
        g.proposer_queue.set(n.proposer_queue() as i64);
        g.pushes_queued
            .set(n.shared.hub.queued_pushes().min(i64::MAX as usize) as i64);
        g.watches.set(i64::from(w));
        g.disk_full.set(n.disk().is_full() as i64);
        let behind = n.elector().clock_behind().unwrap_or_default();
        g.clock_behind_ms
            .set(i64::try_from(behind.as_millis()).unwrap_or(i64::MAX));
    }
}

/// How the `leader` readiness check of a leader that stepped back for want of a quorum
/// begins (after `fail `): `fencelock status` reads it to name no such node the leader.
pub const STEPPED_BACK: &str = "leader: this node stepped back";

/// Whether the node is ready, with one line per check (see the module docs). Cost: one
/// small write and fsync in the data directory; it waits at most
/// [`crate::disk::PROBE_WAIT`] for them (a hung disk is a failed check, not a hung answer).
pub async fn readiness(node: &Node) -> (bool, String) {
    let m = node.raft.metrics().borrow().clone();
    let mut ok = true;
    let mut body = String::new();
    let mut check = |pass: bool, line: String| {
        ok &= pass;
        body.push_str(if pass { "ok " } else { "fail " });
        body.push_str(&line);
        body.push('\n');
    };
    match (&m.running_state, m.current_leader) {
        (Err(e), _) => check(false, format!("leader: raft stopped: {e}")),
        // Check-quorum: a leader that heard no majority within an election timeout
        // serves nothing (its role still says leader until a new one is elected).
        (Ok(()), Some(_)) if node.elector().stepped_back() => check(
            false,
            format!("{STEPPED_BACK} (no majority heard within an election timeout); it serves nothing until it leads again"),
        ),
        (Ok(()), Some(l)) => check(true, format!("leader {l}")),
        (Ok(()), None) => check(false, "leader: none known".into()),
    }
    let applied = m.last_applied.map_or(0, |l| l.index);
    let committed = node.log.committed().map_or(0, |c| c.index);
    check(
        applied + APPLY_LAG >= committed,
        format!("apply: applied {applied}, committed {committed}"),
    );
    let disk = node.disk();
    // Shared: a flood of Status requests or /readyz scrapes runs one probe at a time.
    let probe = disk.probe_shared(crate::disk::PROBE_WAIT).await;
    match probe {
        Ok(()) if !disk.is_full() => check(true, format!("disk {}", disk.dir().display())),
        Ok(()) => check(
            false,
            format!("disk {}: a write waits for space", disk.dir().display()),
        ),
        Err(e) => check(false, format!("disk: {e}")),
    }
    (ok, body)
}

/// What `GET /snapshot` answers on a node with tokens: a backup holds every session's
/// credential, and this port is plain HTTP that nothing authenticates — a token sent to
/// it would go to whatever listens on the address (another local program, while the node
/// is down) — so such a node serves backups over its client port only.
const BACKUP_OVER_CLIENT_PORT: &str = "a node with tokens serves a backup over its client port \
only (fencelock backup FILE, with an admin token: TLS and the token's check, as every admin \
command); this metrics port is plain HTTP, and it takes no token\n";

async fn snapshot(State(ops): State<Arc<Ops>>) -> Response {
    if ops.tokens.is_some() {
        return (StatusCode::FORBIDDEN, BACKUP_OVER_CLIENT_PORT).into_response();
    }
    let node = &ops.node;
    if let Err(e) = node.linearizable().await {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "no backup from this node: {e} (leader id: {:?})\n",
                node.raft.metrics().borrow().current_leader
            ),
        )
            .into_response();
    }
    match crate::state_machine::backup(&node.shared) {
        Ok((bytes, at)) => {
            tracing::info!(index = ?at.map(|l| l.index), bytes = bytes.len(), "backup served");
            (
                [
                    (header::CONTENT_TYPE, "application/octet-stream".to_string()),
                    (
                        header::HeaderName::from_static("x-fencelock-index"),
                        at.map_or(0, |l| l.index).to_string(),
                    ),
                ],
                bytes,
            )
                .into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Prepares `dir` as a node of a *new* cluster of `members` from a backup (`GET
/// /snapshot`): its snapshot holds the backup's state (sessions, holds, queues, tokens,
/// logical time) with the new membership, its log starts after the backup's index. Run it
/// with the same backup and members for every member, then start them (without `--init`:
/// the membership is in the snapshot). Like `etcdctl snapshot restore`: the old cluster's
/// members and log are not carried over.
///
/// Errors: members no node would read (`InvalidInput`: none, more than 256, an address
/// over 255 bytes), a corrupt backup or one the table sizes cannot hold (`InvalidData`), a `dir`
/// that already holds a node (`AlreadyExists`), I/O errors naming the path. Cost:
/// O(backup size) plus two fsyncs.
pub fn restore(
    backup: &[u8],
    dir: &std::path::Path,
    service: &crate::state_machine::ServiceConfig,
    members: std::collections::BTreeMap<u64, crate::types::NodeAddr>,
) -> std::io::Result<u64> {
    let at = crate::state_machine::restore_into(backup, dir, service, members)?;
    crate::log_store::LogStore::open(dir)?.start_after(at)?;
    Ok(at.index)
}

/// What [`force_new_cluster`] recovered from a survivor's data directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// The log index the survivor's snapshot was taken at (`None`: it had none).
    pub snapshot_index: Option<u64>,
    /// The survivor's last commit index as its log recorded it (`None`: none recorded).
    /// Entries after it were in its log and are kept too (see [`force_new_cluster`]).
    pub committed: Option<u64>,
    /// The last log index applied: the new cluster starts after it.
    pub index: u64,
    /// Open sessions in the recovered state.
    pub sessions: u32,
    /// Live locks (held, waited for or in lock-delay) in the recovered state.
    pub locks: u32,
    /// The highest token the survivor's state records.
    pub revision_before: u64,
    /// The new cluster's revision: every token it grants is above it.
    pub revision: u64,
    /// What was cut from the end of the survivor's log (in the copy; `from` is not
    /// changed): a torn last write, or a last group written whole and then damaged, which
    /// a node refuses to start on (`None`: nothing).
    pub cut: Option<crate::log_store::TailCut>,
    /// The survivor's `raft.log` was empty (or missing its header) beside its snapshot —
    /// a node refuses to start on that: only the snapshot's state was recovered, and the
    /// entries the survivor had after it are lost.
    pub log_lost: bool,
}

/// The way out of a lost majority (etcd's `--force-new-cluster`): prepares `dir` as the
/// data directory of the single member (`member`) of a *new* cluster, from the data
/// directory `from` of a stopped survivor of the old one.
///
/// The survivor's snapshot and log are copied (into `dir`, then removed: `from` is only
/// read), checked (checksums, as a node checks them at start) and the log replayed onto the
/// snapshot — every entry the survivor has, committed or not, as a leader commits its
/// whole log once elected (each was proposed by a leader; a client that got no answer
/// already had to count it as possibly applied). Then the fencing revision is raised to
/// `max(highest token recorded + skip_tokens, token_floor)`, so the new cluster's tokens
/// stay above those the lost majority may have granted without the survivor knowing (up
/// to `skip_tokens` of them, or all of them when `token_floor` is at least the highest
/// token any resource has seen). The state (sessions with their credentials, holds,
/// queues, logical time) is then written into `dir` as [`restore`] writes a backup: the
/// membership is just `member`; the old cluster's members and log are not carried over.
/// Start the node with that one `--peer` (no `--init`), then add members back with empty
/// data directories (`add-learner`, `set-voters`).
///
/// What is lost: entries the lost majority committed that never reached the survivor's
/// log — acknowledged grants, releases, opens and closes among them — and, if the last
/// group of the survivor's log was written whole and then damaged (a node refuses to
/// start on it), that group: it is cut and reported in [`Recovered::cut`]; and, if the
/// survivor's `raft.log` is empty beside its snapshot, every entry after the snapshot
/// ([`Recovered::log_lost`]).
///
/// The survivor's state keeps the core settings it was made with (lock-delay, the
/// watcher and name limits: as its directory records them, else as its snapshot carries
/// them); `service` must name those, and may give the new cluster other table sizes. The
/// log is replayed in the tables the survivor ran with (as its directory records them: a
/// table's size decides answers, such as an open a full table refused), and the result
/// restored into `service`'s. A survivor that recorded no settings (a build before they
/// were recorded) is replayed in `service`'s sizes: give it the sizes it ran with. The
/// new directory records `service` ([`crate::settings`]).
///
/// Errors: `from` without a log (`NotFound`); `dir` the same as `from`, or already
/// holding a node (`AlreadyExists`); `service`'s core settings not the survivor's, or a
/// state that does not fit `service`'s table sizes (`InvalidInput`); a settings file,
/// snapshot or log that fails its checks, a log with a gap after the snapshot, nothing
/// applied, or a floor above 2^62 (`InvalidData`); I/O errors naming the path. `from` is
/// never changed. Cost: O(log + snapshot size) and a few fsyncs.
pub async fn force_new_cluster(
    from: &std::path::Path,
    dir: &std::path::Path,
    service: &crate::state_machine::ServiceConfig,
    member: (u64, crate::types::NodeAddr),
    skip_tokens: u64,
    token_floor: u64,
) -> std::io::Result<Recovered> {
    use openraft::storage::{RaftLogReader, RaftStateMachine};
    use std::io::{Error, ErrorKind};
    let bad = |m: String| Error::new(ErrorKind::InvalidData, m);
    if !from.join("raft.log").is_file() {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "{}: no raft.log: not a node's data directory",
                from.display()
            ),
        ));
    }
    for name in ["snapshot.bin", "raft.log"] {
        if dir.join(name).exists() {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!(
                    "{} exists: recover only into a new directory",
                    dir.join(name).display()
                ),
            ));
        }
    }
    crate::disk::create_private_dir(dir)
        .map_err(|e| Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    if std::fs::canonicalize(from)? == std::fs::canonicalize(dir)? {
        return Err(Error::new(
            ErrorKind::AlreadyExists,
            "the new directory must not be the survivor's",
        ));
    }
    // Work on a copy: opening a log cuts a torn tail, and `from` stays as it was.
    let scratch = dir.join("force-new-cluster.source");
    let _ = std::fs::remove_dir_all(&scratch);
    crate::disk::create_private_dir(&scratch)?;
    let result = async {
        for name in ["raft.log", "snapshot.bin"] {
            let src = from.join(name);
            if src.exists() && !src.is_file() {
                // A FIFO or a device would block the copy or fill the disk.
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("{}: not a regular file", src.display()),
                ));
            }
            if src.exists() {
                std::fs::copy(&src, scratch.join(name))
                    .map_err(|e| Error::new(e.kind(), format!("{}: {e}", src.display())))?;
            }
        }
        // With data loss accepted, a damaged last group is cut (and reported) rather than
        // refused as a node would: the survivor's log is all there is.
        let (mut log, cut) = crate::log_store::LogStore::open_accepting_loss(&scratch)
            .map_err(|e| Error::new(e.kind(), format!("{}/raft.log: {e}", from.display())))?;
        let committed = log.committed().map(|c| c.index);
        // What a node's start refuses as a lost log is recovered from, but said.
        let log_lost = scratch.join("snapshot.bin").exists() && log.holds_nothing();
        // The survivor's state keeps the core settings it was made with (lock-delay decided
        // what its log's entries did): `service` must name them.
        let made = crate::settings::made_with(from)?;
        if let Some(core) = made.core {
            let made = crate::state_machine::ServiceConfig { core, ..*service };
            let diff = service.differences(&made, "given", "in the survivor's state");
            if !diff.is_empty() {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "{}: the survivor's state was made with other core settings ({}); \
                         a new cluster keeps them: give those (--lock-delay-ms, \
                         --max-watchers), or leave them out",
                        from.display(),
                        diff.join("; ")
                    ),
                ));
            }
        }
        // The log is replayed in the tables the survivor ran with, when it recorded them:
        // a table's size decides answers (a full table refuses an open that a larger one
        // grants, and with it every later session id), so a replay in `service`'s sizes
        // could end elsewhere than the survivor did. The result is then restored into
        // `service`'s sizes (refused if it does not fit).
        let replay = made
            .recorded
            .map_or(*service, |r| crate::state_machine::ServiceConfig {
                core: service.core,
                ..r
            });
        // A corrupt snapshot is refused, or (when the log still holds every entry) set
        // aside and the state rebuilt from the log, exactly as the node would at start.
        let (mut sm, shared) =
            crate::state_machine::StateMachine::open_checked(&scratch, replay, log.last_purged())
                .map_err(|e| Error::new(e.kind(), format!("{}: {e}", from.display())))?;
        let (applied, _) = sm
            .applied_state()
            .await
            .map_err(|e| bad(format!("the survivor's state: {e}")))?;
        let start = applied.map_or(0, |l| l.index + 1);
        let entries = log
            .try_get_log_entries(start..)
            .await
            .map_err(|e| bad(format!("the survivor's log: {e}")))?;
        if let Some(first) = entries.first() {
            if first.log_id.index != start {
                return Err(bad(format!(
                    "the survivor's log starts at index {} but its state ends at {}: a gap",
                    first.log_id.index,
                    start.saturating_sub(1)
                )));
            }
        }
        if entries
            .windows(2)
            .any(|w| w[1].log_id.index != w[0].log_id.index + 1)
        {
            return Err(bad("the survivor's log has a gap".into()));
        }
        sm.apply(entries)
            .await
            .map_err(|e| bad(format!("replaying the survivor's log: {e}")))?;
        let (before, revision, usage) = {
            let mut g = shared.state();
            let before = g.svc.revision();
            let floor = before.saturating_add(skip_tokens).max(token_floor);
            let revision = g
                .svc
                .raise_revision(floor)
                .map_err(|e| bad(format!("token floor {floor}: {e}")))?;
            (before, revision, g.svc.usage())
        };
        let (bytes, at) = crate::state_machine::backup(&shared)?;
        if at.is_none() {
            return Err(bad("the survivor had applied nothing".into()));
        }
        let members = std::iter::once(member).collect();
        let index = restore(&bytes, dir, service, members)?;
        Ok(Recovered {
            snapshot_index: applied.map(|l| l.index),
            committed,
            index,
            sessions: usage.sessions,
            locks: usage.locks,
            revision_before: before,
            revision,
            cut,
            log_lost,
        })
    }
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(ops): State<Arc<Ops>>) -> Response {
    let (ok, body) = readiness(&ops.node).await;
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, body).into_response()
}

async fn metrics(State(ops): State<Arc<Ops>>) -> Response {
    ops.refresh();
    let mut out = String::new();
    if let Err(e) = encode(&mut out, &ops.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// Serves `/livez`, `/readyz`, `/metrics` and `/snapshot` for `node` on `listener` until
/// `stop` resolves. Metric families (prefix `fencelock_`): `raft_term`, `raft_leader`,
/// `raft_is_leader`, `raft_commit_index`, `raft_applied_index`, `raft_last_log_index`,
/// `raft_snapshot_index`, `table_in_use{table}` and `table_capacity{table}` (sessions,
/// locks, claims: the core's `usage()` and `capacity()`), `watches`, `proposer_queue`, `disk_full`,
/// `leader_clock_behind_ms` ([`crate::election::Elector::clock_behind`]),
/// `disk_errors_total`, `fsync_seconds` (histogram), `grants_total`, `expiries_total`,
/// `wait_seconds` (histogram of granted waiters' waits), `refusals_total{kind}`,
/// `client_connections`, `pushes_queued`, `push_closes_total{reason}`, `peer_connections`,
/// `connections_refused_total{port,reason}`, `connections_closed_total{port,reason}`,
/// `accept_errors_total{port}`, `net_limit{name}` (see [`crate::net`]),
/// `peer_settings_refused_total` (see [`crate::settings`]).
///
/// Under the default [`OpsPolicy`]: at most [`OPS_MAX_CONNECTIONS`] connections, each
/// closed after [`OPS_CONNECTION_TIMEOUT`], and `/snapshot` answered to anyone: for a node
/// without tokens (on a host whose local users are trusted); see [`serve_ops_with`].
///
/// Errors: the server's I/O error.
pub async fn serve_ops(
    listener: TcpListener,
    node: Arc<Node>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_ops_with(listener, node, OpsPolicy::default(), stop).await
}

/// The default limit of the operations listener's connections at once: scrapers, probes
/// and a backup need a few; each is a file descriptor of the node, so they are bounded
/// (within the descriptors `fencelock-node` keeps back from client connections).
pub const OPS_MAX_CONNECTIONS: usize = 16;
/// The default time an operations connection may stay open, idle or not: a slow or
/// silent peer frees its place after it (a scrape, a probe or a backup over loopback
/// takes far less; a scraper reconnects).
pub const OPS_CONNECTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How the operations listener admits requests.
#[derive(Clone, Debug)]
pub struct OpsPolicy {
    /// The node's tokens (its client port's): `GET /snapshot` is then not served (403;
    /// the backup holds every open session's credential, and a token sent over this
    /// plain-HTTP port could reach whatever listens on it: backups go over the client
    /// port, [`crate::protocol::Request::Backup`]); `/livez`, `/readyz` and `/metrics`
    /// (which name no session) stay open. `None`: `/snapshot` is answered to anyone.
    pub tokens: Option<Arc<Tokens>>,
    /// At most this many connections at once; one more is closed at once (counted in
    /// `connections_refused_total{port="ops",reason="total"}`). Default
    /// [`OPS_MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// Each connection is closed this long after it was accepted. Default
    /// [`OPS_CONNECTION_TIMEOUT`].
    pub connection_timeout: std::time::Duration,
}

impl Default for OpsPolicy {
    /// No tokens and the defaults named on each field.
    fn default() -> Self {
        OpsPolicy {
            tokens: None,
            max_connections: OPS_MAX_CONNECTIONS,
            connection_timeout: OPS_CONNECTION_TIMEOUT,
        }
    }
}

/// The operations listener's accepted connections, bounded in number and in time.
struct OpsListener {
    inner: TcpListener,
    slots: Arc<tokio::sync::Semaphore>,
    policy: OpsPolicy,
    stats: crate::net::NetStats,
}

/// One admitted operations connection: its place is freed when it is dropped, and it
/// fails (so hyper closes it) once its deadline passes, even while idle.
struct OpsConn {
    io: tokio::net::TcpStream,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl OpsConn {
    fn expired(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        self.deadline.as_mut().poll(cx).is_ready()
    }
}

fn timed_out() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "operations connection timeout",
    )
}

impl tokio::io::AsyncRead for OpsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.expired(cx) {
            return Poll::Ready(Err(timed_out()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for OpsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.expired(cx) {
            return Poll::Ready(Err(timed_out()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.expired(cx) {
            return Poll::Ready(Err(timed_out()));
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl axum::serve::Listener for OpsListener {
    type Io = OpsConn;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (OpsConn, std::net::SocketAddr) {
        let mut backoff = std::time::Duration::ZERO;
        loop {
            let (io, addr) = match self.inner.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors (or a connection reset before it was accepted):
                    // wait, doubling up to a second, rather than spin.
                    self.stats.warn("accept-ops", || {
                        format!("accepting an operations connection failed: {e}; retrying")
                    });
                    backoff = (backoff * 2).clamp(
                        std::time::Duration::from_millis(10),
                        std::time::Duration::from_secs(1),
                    );
                    tokio::time::sleep(backoff).await;
                    continue;
                }
            };
            match self.slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let deadline = Box::pin(tokio::time::sleep(self.policy.connection_timeout));
                    return (
                        OpsConn {
                            io,
                            deadline,
                            _slot: slot,
                        },
                        addr,
                    );
                }
                Err(_) => {
                    // Over the limit: closed at once (dropped).
                    self.stats
                        .refuse("ops", "total", addr.ip(), self.policy.max_connections);
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

/// [`serve_ops`] under `policy`: tokens for `/snapshot`, and the listener's connection
/// limit and timeout ([`OpsPolicy`]).
///
/// Errors: the server's I/O error.
pub async fn serve_ops_with(
    listener: TcpListener,
    node: Arc<Node>,
    policy: OpsPolicy,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let g = Gauges::default();
    let registry = registry(&node, &g);
    let stats = node.stats.net.clone();
    stats.show_limit("ops_connections", policy.max_connections as u64);
    stats.show_limit(
        "ops_connection_timeout_ms",
        policy.connection_timeout.as_millis() as u64,
    );
    let listener = OpsListener {
        inner: listener,
        // More than a semaphore holds would panic: as many as it holds is no limit anyway.
        slots: Arc::new(tokio::sync::Semaphore::new(
            policy
                .max_connections
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        )),
        policy: policy.clone(),
        stats,
    };
    let ops = Arc::new(Ops {
        node,
        registry,
        g,
        tokens: policy.tokens,
    });
    let app = Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/snapshot", get(snapshot))
        .with_state(ops);
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
}
