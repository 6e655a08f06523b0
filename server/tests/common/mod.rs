//! An in-process three-node cluster over [`MemNet`], with helpers that act like a client
//! (find the leader, retry).
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{Input, LockName, Mode, Output, Reply, SessionId, Token, Wait};
use fencelock_server::auth::SessionSecret;
use fencelock_server::mem_network::MemNet;
use fencelock_server::net::TcpNetwork;
use fencelock_server::node::{Node, NodeConfig};
use fencelock_server::protocol::ClientError;
use fencelock_server::types::{CmdResult, NodeAddr, NodeId, Op, STAMPED_AT_APPLY};
use tokio::net::TcpListener;

pub struct Cluster {
    pub net: MemNet,
    pub nodes: HashMap<NodeId, Arc<Node>>,
    pub base: PathBuf,
    pub grace_ms: u64,
    pub request_timeout_ms: u64,
    /// The credentials of the sessions opened through [`Cluster::propose`], as a client
    /// keeps them.
    pub secrets: std::sync::Mutex<HashMap<SessionId, SessionSecret>>,
}

pub fn temp_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let d = std::env::temp_dir().join(format!("fencelock-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// The listeners of three nodes about to start over real TCP, and the member map that
/// names their addresses.
pub struct Three {
    /// Node `i + 1`'s Raft and client listeners.
    pub listeners: Vec<(TcpListener, TcpListener)>,
    pub members: BTreeMap<NodeId, NodeAddr>,
}

impl Three {
    /// The nodes' addresses, node 1 first.
    pub fn addrs(&self) -> Vec<NodeAddr> {
        self.members.values().cloned().collect()
    }
}

/// Binds a Raft and a client port for each of nodes 1–3 on 127.0.0.1.
pub async fn bind_three() -> Three {
    bind_three_on(|_| "127.0.0.1".into()).await
}

/// Binds a Raft and a client port for each of nodes 1–3, node `id` on `host(id)`.
pub async fn bind_three_on(host: impl Fn(NodeId) -> String) -> Three {
    let mut listeners = Vec::new();
    let mut members = BTreeMap::new();
    for id in 1..=3u64 {
        let r = TcpListener::bind(format!("{}:0", host(id))).await.unwrap();
        let c = TcpListener::bind(format!("{}:0", host(id))).await.unwrap();
        let a = NodeAddr {
            raft: r.local_addr().unwrap().to_string(),
            client: c.local_addr().unwrap().to_string(),
        };
        members.insert(id, a);
        listeners.push((r, c));
    }
    Three { listeners, members }
}

/// Three in-process nodes on 127.0.0.1 over the real TCP transport.
pub struct TcpNodes {
    pub nodes: Vec<Arc<Node>>,
    pub addrs: Vec<NodeAddr>,
    pub base: PathBuf,
}

impl TcpNodes {
    /// Starts nodes 1–3 (grace 200 ms, data under a fresh temp dir named after `name`),
    /// has `serve` serve each one's Raft and client listeners, and initializes the cluster.
    pub async fn start(name: &str, serve: impl Fn(&Arc<Node>, TcpListener, TcpListener)) -> Self {
        Self::start_with(name, |_| {}, serve).await
    }

    /// As [`TcpNodes::start`], each node's config changed by `configure` first.
    pub async fn start_with(
        name: &str,
        configure: impl Fn(&mut NodeConfig),
        serve: impl Fn(&Arc<Node>, TcpListener, TcpListener),
    ) -> Self {
        let base = temp_dir(name);
        let three = bind_three().await;
        let addrs = three.addrs();
        let mut nodes = Vec::new();
        for (i, (r, c)) in three.listeners.into_iter().enumerate() {
            let mut cfg = NodeConfig::new(i as u64 + 1, base.join(format!("n{}", i + 1)));
            cfg.grace_ms = 200;
            configure(&mut cfg);
            let node = Node::start(cfg, TcpNetwork::default()).await.unwrap();
            serve(&node, r, c);
            nodes.push(node);
        }
        nodes[0].initialize(three.members).await.unwrap();
        TcpNodes { nodes, addrs, base }
    }

    /// The node that is leader now with a majority following it, waiting up to `tries` ×
    /// 20 ms: the leader and at least one other node that names it leader and knows the
    /// membership. A leader seen before then may hold the only copy of the cluster's first
    /// entries (the membership `initialize` wrote on node 1 alone): a test that stops it
    /// then leaves two nodes that know no membership, and no election can follow.
    pub async fn leader_within(&self, tries: u32) -> usize {
        for _ in 0..tries {
            let m: Vec<_> = self
                .nodes
                .iter()
                .map(|n| n.raft.metrics().borrow().clone())
                .collect();
            if let Some(i) = m
                .iter()
                .position(|m| m.state == openraft::ServerState::Leader)
            {
                let id = self.nodes[i].id;
                let following = m
                    .iter()
                    .filter(|f| {
                        f.current_leader == Some(id)
                            && f.membership_config.membership().nodes().next().is_some()
                    })
                    .count();
                if following * 2 > m.len() {
                    return i;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no leader that a majority follows");
    }

    pub async fn stop(self) {
        for n in &self.nodes {
            n.shutdown().await;
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

impl Cluster {
    pub fn config(&self, id: NodeId) -> NodeConfig {
        let mut c = NodeConfig::new(id, self.base.join(format!("n{id}")));
        c.grace_ms = self.grace_ms;
        c.request_timeout_ms = self.request_timeout_ms;
        c.snapshot_logs = 100;
        c.loopback_members = false; // nodes here are named `mem:N`
        c
    }

    pub async fn start(name: &str, grace_ms: u64) -> Cluster {
        Self::start_with(name, grace_ms, 2000).await
    }

    /// A cluster whose proposals give up (`Unavailable`) after `request_timeout_ms`.
    pub async fn start_with(name: &str, grace_ms: u64, request_timeout_ms: u64) -> Cluster {
        Self::start_configured(name, grace_ms, request_timeout_ms, |_| {}).await
    }

    /// As [`Cluster::start_with`], each node's first config changed by `configure` (a
    /// node booted again later gets [`Cluster::config`]'s).
    pub async fn start_configured(
        name: &str,
        grace_ms: u64,
        request_timeout_ms: u64,
        configure: impl Fn(&mut NodeConfig),
    ) -> Cluster {
        let mut c = Cluster {
            net: MemNet::default(),
            nodes: HashMap::new(),
            base: temp_dir(name),
            grace_ms,
            request_timeout_ms,
            secrets: Default::default(),
        };
        for id in 1..=3 {
            let mut config = c.config(id);
            configure(&mut config);
            c.boot_with(config).await;
        }
        let members: BTreeMap<NodeId, NodeAddr> = (1..=3)
            .map(|id| {
                (
                    id,
                    NodeAddr {
                        raft: format!("mem:{id}"),
                        client: format!("mem:{id}"),
                    },
                )
            })
            .collect();
        c.nodes[&1].initialize(members).await.expect("initialize");
        c.leader().await;
        c
    }

    pub async fn boot(&mut self, id: NodeId) {
        self.boot_with(self.config(id)).await
    }

    /// Starts node `config.id` with `config` (say, other service settings).
    pub async fn boot_with(&mut self, config: NodeConfig) {
        let id = config.id;
        let node = Node::start(config, self.net.factory(id))
            .await
            .expect("node starts");
        node.shared.hub.enable_journal();
        self.net.add(id, node.elector().clone());
        self.nodes.insert(id, node);
    }

    pub async fn kill(&mut self, id: NodeId) {
        self.net.remove(id);
        if let Some(n) = self.nodes.remove(&id) {
            n.shutdown().await;
        }
    }

    /// The leader that the live nodes agree on (waits up to 10 s).
    pub async fn leader(&self) -> NodeId {
        self.leader_among(&self.nodes.keys().copied().collect::<Vec<_>>())
            .await
    }

    /// A leader among `ids` that a majority of `ids` follows.
    pub async fn leader_among(&self, ids: &[NodeId]) -> NodeId {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            let mut votes: HashMap<NodeId, usize> = HashMap::new();
            for id in ids {
                if let Some(n) = self.nodes.get(id) {
                    if let Some(l) = n.raft.metrics().borrow().current_leader {
                        *votes.entry(l).or_default() += 1;
                    }
                }
            }
            if let Some((l, _)) = votes
                .into_iter()
                .find(|(l, v)| *v >= 2 && ids.contains(l) && self.nodes.contains_key(l))
            {
                let m = self.nodes[&l].raft.metrics().borrow().clone();
                if m.state == openraft::ServerState::Leader {
                    return l;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no leader among {ids:?} within 10 s");
    }

    /// Cuts one follower off the network: returns it, the other two, the leader among
    /// them and the follower's last log index (what it has when cut off).
    pub async fn isolate_a_follower(&self) -> (NodeId, Vec<NodeId>, Arc<Node>, u64) {
        let l = self.leader().await;
        let f = self.nodes.keys().copied().find(|id| *id != l).unwrap();
        self.net.isolate(f);
        let others: Vec<NodeId> = self.nodes.keys().copied().filter(|id| *id != f).collect();
        let leader = self.nodes[&self.leader_among(&others).await].clone();
        let behind = self.nodes[&f]
            .raft
            .metrics()
            .borrow()
            .last_log_index
            .unwrap_or(0);
        (f, others, leader, behind)
    }

    /// Commits keep-alives of session `s` through `leader` until it has snapshotted and
    /// purged its log past `index` (bounded: 20 s). Concurrent proposals share entries
    /// (the proposer batches them), so how many rounds that takes depends on timing; each
    /// round is 50 concurrent keep-alives.
    pub async fn commit_until_purged_past(&self, leader: &Arc<Node>, s: SessionId, index: u64) {
        let start = Instant::now();
        loop {
            let purged = leader.raft.metrics().borrow().purged.map(|p| p.index);
            if purged.is_some_and(|p| p > index) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "leader never purged past {index}"
            );
            let mut futs = Vec::new();
            for _ in 0..50 {
                let leader = leader.clone();
                let op = self.op(keep_alive(s));
                futs.push(tokio::spawn(async move { leader.propose_op(op).await }));
            }
            for f in futs {
                let r = f.await.unwrap().expect("majority commits");
                assert!(r.reply.is_ok(), "{r:?}");
            }
        }
    }

    /// `input` as a client's node proposes it: an open with a fresh credential, a
    /// session's input with the credential its open returned (a made-up one for a session
    /// not opened here).
    pub fn op(&self, input: Input) -> Op {
        match (input.session(), &input) {
            // The open this build proposes: every session is recorded as `Anyone`'s, so
            // the snapshots these tests take carry principals.
            (_, Input::OpenSession { ttl, .. }) => Op::OpenCounted {
                ttl: *ttl,
                key: None,
                secret: SessionSecret::random().unwrap(),
                label: None,
                principal: fencelock_server::auth::Principal::Anyone,
            },
            (Some(s), _) => {
                let secret = self.secrets.lock().unwrap().get(&s).copied();
                Op::Owned {
                    input,
                    secret: secret.unwrap_or(SessionSecret([0; 16])),
                }
            }
            (None, _) => Op::Input(input),
        }
    }

    /// The credential of a session opened through [`Cluster::propose`].
    pub fn secret(&self, s: SessionId) -> SessionSecret {
        self.secrets.lock().unwrap()[&s]
    }

    /// Records the credential of a session `r` opened.
    pub fn note(&self, r: &CmdResult) {
        if let (Ok(Reply::Opened { session, .. }), Some(secret)) = (&r.reply, r.secret) {
            self.secrets.lock().unwrap().insert(*session, secret);
        }
    }

    /// Proposes like a client: to the current leader among `ids`, retrying on
    /// NotLeader/Unavailable for up to 10 s.
    pub async fn propose_among(&self, ids: &[NodeId], input: Input) -> CmdResult {
        let start = Instant::now();
        let op = self.op(input.clone());
        loop {
            let l = self.leader_among(ids).await;
            match self.nodes[&l].propose_op(op.clone()).await {
                Ok(r) => {
                    self.note(&r);
                    return r;
                }
                Err(ClientError::NotLeader { .. }) | Err(ClientError::Unavailable(_)) => {
                    assert!(
                        start.elapsed() < Duration::from_secs(10),
                        "could not commit {input:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
    }

    pub async fn propose(&self, input: Input) -> CmdResult {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        self.propose_among(&ids, input).await
    }

    /// Waits until every live node applied the same log id and holds byte-identical core
    /// snapshots; returns the snapshot.
    pub async fn converged(&self) -> Vec<u8> {
        let start = Instant::now();
        loop {
            let snaps: Vec<(Option<fencelock_server::types::LogId>, Vec<u8>)> = self
                .nodes
                .values()
                .map(|n| {
                    let g = n.shared.state();
                    (g.last_applied, g.svc.snapshot_vec())
                })
                .collect();
            if snaps.windows(2).all(|w| w[0] == w[1]) {
                return snaps[0].1.clone();
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nodes did not converge"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn journal(&self, id: NodeId) -> Vec<(u64, Output)> {
        self.nodes[&id].shared.hub.journal()
    }

    pub async fn shutdown(mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.kill(id).await;
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

pub fn session_of(r: &CmdResult) -> SessionId {
    match r.reply {
        Ok(Reply::Opened { session, .. }) => session,
        ref other => panic!("expected Opened, got {other:?}"),
    }
}

/// The token of a `Granted` reply.
pub fn granted(r: &CmdResult) -> Option<Token> {
    match r.reply {
        Ok(Reply::Granted { token, .. }) => Some(token),
        _ => None,
    }
}

// Client inputs as a node builds them: the state machine stamps their time.

pub fn open(ttl: u64) -> Input {
    Input::OpenSession {
        now: STAMPED_AT_APPLY,
        ttl,
    }
}

pub fn keep_alive(session: SessionId) -> Input {
    Input::KeepAlive {
        now: STAMPED_AT_APPLY,
        session,
        request: None,
    }
}

pub fn close(session: SessionId) -> Input {
    Input::CloseSession {
        now: STAMPED_AT_APPLY,
        session,
        request: None,
    }
}

pub fn acquire(s: SessionId, lock: &str, wait: Wait, request: Option<u64>) -> Input {
    Input::Acquire {
        now: STAMPED_AT_APPLY,
        session: s,
        lock: LockName::new(lock).unwrap(),
        mode: Mode::Exclusive,
        wait,
        request,
    }
}

pub fn release(s: SessionId, lock: &str, request: Option<u64>) -> Input {
    Input::Release {
        now: STAMPED_AT_APPLY,
        session: s,
        lock: LockName::new(lock).unwrap(),
        request,
    }
}

/// A disk test that cannot mount its tmpfs fails, unless the runner opted out with
/// `FENCELOCK_TESTS_NO_TMPFS=1` (a machine without root): then it says it was left out.
/// A test that silently passes without running would claim what was never checked.
pub fn cannot_mount(test: &str, why: &str) {
    if std::env::var_os("FENCELOCK_TESTS_NO_TMPFS").is_some_and(|v| v == "1") {
        eprintln!("LEFT OUT (FENCELOCK_TESTS_NO_TMPFS=1) {test}: {why}");
    } else {
        panic!(
            "{test} needs a tmpfs mount (root): {why}; run as root, or set \
             FENCELOCK_TESTS_NO_TMPFS=1 to leave the disk tests out"
        );
    }
}
