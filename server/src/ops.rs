//! The operations listener: health and metrics over HTTP (axum), on its own address
//! (`fencelock-node --metrics-addr`), apart from the client and Raft ports.
//!
//! * `GET /livez` — 200 `ok` while the process serves HTTP.
//! * `GET /readyz` — 200 when the node has a leader (itself or another), applies what is
//!   committed (no more than [`APPLY_LAG`] entries behind) and can write its data
//!   directory (a probe write + fsync succeeds and no write waits for space); else 503.
//!   The body has one line per check, `ok NAME …` or `fail NAME …`.
//! * `GET /metrics` — Prometheus / OpenMetrics text (crate `prometheus-client`); see
//!   [`serve_ops`] for the families.
//! * `GET /snapshot` — a backup (on the leader only, after a linearizable read barrier, so
//!   it holds every acknowledged write): the applied state in the checksummed snapshot-file
//!   format, its log index in the `x-fencelock-index` header. A follower answers 503
//!   naming the leader's id. [`restore`] builds a new cluster's node from it.
//!
//! Cost of a scrape: O(number of metrics) plus one lock of the state machine; of a
//! `/readyz`: one small write and fsync in the data directory.

use std::sync::Arc;

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
    disk_full: Gauge,
}

struct Ops {
    node: Arc<Node>,
    registry: Registry,
    g: Gauges,
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
        "disk_full",
        "1 while the data directory takes no writes",
        g.disk_full.clone(),
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
    let net = &node.stats.net;
    r.register(
        "peer_connections",
        "Open inbound Raft connections",
        net.peer_connections.clone(),
    );
    r.register(
        "connections_refused",
        "Connections closed at once by a connection limit, by port and reason",
        net.refused.clone(),
    );
    r.register(
        "connections_closed",
        "Connections closed by the node (idle, read_timeout, oversized, malformed), by port",
        net.closed.clone(),
    );
    r.register(
        "accept_errors",
        "Failed accepts (no file descriptors left...), by port",
        net.accept_errors.clone(),
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
        let (u, c) = {
            let s = n.shared.state();
            (s.svc.usage(), s.svc.capacity())
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
        g.disk_full.set(n.disk().is_full() as i64);
    }
}

/// Whether the node is ready, with one line per check (see the module docs). Cost: one
/// small write and fsync in the data directory.
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
    let probe = {
        let d = disk.clone();
        tokio::task::spawn_blocking(move || d.probe())
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
    };
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

async fn snapshot(State(ops): State<Arc<Ops>>) -> Response {
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
/// Errors: a corrupt backup or one the table sizes cannot hold (`InvalidData`), a `dir`
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

/// Serves `/livez`, `/readyz` and `/metrics` for `node` on `listener` until `stop`
/// resolves. Metric families (prefix `fencelock_`): `raft_term`, `raft_leader`,
/// `raft_is_leader`, `raft_commit_index`, `raft_applied_index`, `raft_last_log_index`,
/// `raft_snapshot_index`, `table_in_use{table}` and `table_capacity{table}` (sessions,
/// locks, claims: the core's `usage()` and `capacity()`), `proposer_queue`, `disk_full`,
/// `disk_errors_total`, `fsync_seconds` (histogram), `grants_total`, `expiries_total`,
/// `wait_seconds` (histogram of granted waiters' waits), `refusals_total{kind}`,
/// `client_connections`, `peer_connections`, `connections_refused_total{port,reason}`,
/// `connections_closed_total{port,reason}`, `accept_errors_total{port}`,
/// `net_limit{name}` (see [`crate::net`]).
///
/// Errors: the server's I/O error.
pub async fn serve_ops(
    listener: TcpListener,
    node: Arc<Node>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let g = Gauges::default();
    let registry = registry(&node, &g);
    let ops = Arc::new(Ops { node, registry, g });
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
