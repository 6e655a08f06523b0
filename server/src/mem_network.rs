//! An in-process Raft network with faults you control, for tests (modelled on openraft's
//! own test fixtures): nodes call each other's [`Elector`]s (the inbound side of each
//! node's Raft) directly; a link can be cut
//! (isolate a node, split into partitions, cut one way, lose one node's calls, heal),
//! delayed, or lossy (seeded random drops of
//! requests and replies). A cut link answers
//! `Unreachable` — also for a reply that would cross it after the call was made, so a
//! partition drops requests and responses alike. Each call carries its sender's service
//! settings and is refused, as over TCP, by a node of other settings ([`crate::settings`]).

use std::collections::{HashMap, HashSet};

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use crate::election::{Elector, PreVoteNetwork, PreVoteRequest, PreVoteResponse};
use crate::settings::{CarrySettings, PeerSettings};
use crate::types::{NodeAddr, NodeId, TypeConfig};

#[derive(Default)]
struct Inner {
    nodes: HashMap<NodeId, Arc<Elector>>,
    cut: HashSet<(NodeId, NodeId)>,
    /// Calls `from` makes to `to` are lost (answers `from` gives `to` still arrive).
    calls_lost: HashSet<(NodeId, NodeId)>,
    delay_ms: u64,
    /// Per-million chance that a request, or its reply, is dropped.
    drop_ppm: u32,
    /// xorshift state of the drop decisions (seeded: runs are replayable).
    rng: u64,
}

/// The network: a registry of running nodes plus the set of cut links.
#[derive(Clone, Default)]
pub struct MemNet {
    inner: Arc<Mutex<Inner>>,
}

impl MemNet {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a running node by its elector ([`crate::node::Node::elector`]), which
    /// receives its Raft RPCs. Cost: O(1).
    pub fn add(&self, id: NodeId, node: Arc<Elector>) {
        self.lock().nodes.insert(id, node);
    }

    /// Unregisters a node (it crashed): every call to it fails.
    pub fn remove(&self, id: NodeId) {
        self.lock().nodes.remove(&id);
    }

    /// Cuts every link to and from `id`.
    pub fn isolate(&self, id: NodeId) {
        let mut g = self.lock();
        let ids: Vec<NodeId> = (1..=16).collect();
        for other in ids {
            if other != id {
                g.cut.insert((id, other));
                g.cut.insert((other, id));
            }
        }
    }

    /// Splits the nodes into `groups`: links between groups are cut.
    pub fn partition(&self, groups: &[&[NodeId]]) {
        let mut g = self.lock();
        for (i, a) in groups.iter().enumerate() {
            for (j, b) in groups.iter().enumerate() {
                if i != j {
                    for x in a.iter() {
                        for y in b.iter() {
                            g.cut.insert((*x, *y));
                        }
                    }
                }
            }
        }
    }

    /// Cuts the link from `from` to `to` one way: every message `from` sends to `to` is
    /// lost — its requests and its answers to `to`'s requests; `to`'s messages to `from`
    /// still arrive.
    pub fn cut_one_way(&self, from: NodeId, to: NodeId) {
        self.lock().cut.insert((from, to));
    }

    /// Loses the calls (requests) `from` makes to `to`, as when the connections `from`
    /// opens to `to` are cut: `to` still reaches `from` and hears its answers.
    pub fn lose_calls(&self, from: NodeId, to: NodeId) {
        self.lock().calls_lost.insert((from, to));
    }

    /// Restores every link. Cost: O(links).
    pub fn heal(&self) {
        let mut g = self.lock();
        g.cut.clear();
        g.calls_lost.clear();
    }

    /// Drops each request and each reply with probability `ppm` / 1 000 000, decided by a
    /// xorshift generator seeded with `seed` (print the seed: a failing run replays). A
    /// dropped reply means the call took effect but the caller sees `Unreachable`.
    pub fn set_drop(&self, ppm: u32, seed: u64) {
        let mut g = self.lock();
        g.drop_ppm = ppm;
        g.rng = seed | 1;
    }

    fn dropped(&self) -> bool {
        let mut g = self.lock();
        if g.drop_ppm == 0 {
            return false;
        }
        g.rng ^= g.rng << 13;
        g.rng ^= g.rng >> 7;
        g.rng ^= g.rng << 17;
        (g.rng % 1_000_000) < g.drop_ppm as u64
    }

    /// Delays every message by `ms` each way.
    pub fn set_delay(&self, ms: u64) {
        self.lock().delay_ms = ms;
    }

    /// The network factory for node `from`.
    pub fn factory(&self, from: NodeId) -> MemFactory {
        MemFactory {
            net: self.clone(),
            from,
            peers: Arc::default(),
        }
    }

    fn route(&self, from: NodeId, to: NodeId) -> Result<(Arc<Elector>, u64), Unreachable> {
        let g = self.lock();
        if g.cut.contains(&(from, to)) {
            return Err(Unreachable::new(&io::Error::other(format!(
                "link {from}->{to} is cut"
            ))));
        }
        match g.nodes.get(&to) {
            Some(r) => Ok((r.clone(), g.delay_ms)),
            None => Err(Unreachable::new(&io::Error::other(format!(
                "node {to} is down"
            )))),
        }
    }

    /// Calls `to`'s elector from `from`, whose settings are in `peers` (checked by `to`
    /// first, and its answer noted in `peers`, as the TCP transport does:
    /// [`crate::settings`]).
    async fn call<T, E, F, Fut>(
        &self,
        from: NodeId,
        to: NodeId,
        peers: &PeerSettings,
        f: F,
    ) -> Result<T, RPCError<NodeId, NodeAddr, E>>
    where
        E: std::error::Error,
        F: FnOnce(Arc<Elector>) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let (raft, delay) = self.route(from, to).map_err(RPCError::Unreachable)?;
        if self.lock().calls_lost.contains(&(from, to)) {
            return Err(RPCError::Unreachable(Unreachable::new(&io::Error::other(
                format!("calls {from}->{to} are lost"),
            ))));
        }
        if self.dropped() {
            return Err(RPCError::Unreachable(Unreachable::new(&io::Error::other(
                "request dropped",
            ))));
        }
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        // As over TCP: a node that has not set its settings sends nothing.
        let Some(ours) = peers.ours() else {
            return Err(RPCError::Unreachable(Unreachable::new(&io::Error::other(
                "this node has not started",
            ))));
        };
        if let Err(theirs) = raft.settings().admit(Some(from), &ours) {
            let e = peers.refused_by(to, theirs.as_ref());
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        peers.served_by(to);
        let res = f(raft).await;
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        // A reply crossing a link cut meanwhile is lost too.
        self.route(to, from).map_err(RPCError::Unreachable)?;
        if self.dropped() {
            return Err(RPCError::Unreachable(Unreachable::new(&io::Error::other(
                "reply dropped",
            ))));
        }
        // As over TCP: an error the peer answered is its own.
        crate::net::remote(to, res)
    }
}

/// Creates [`MemConn`]s from one node.
#[derive(Clone)]
pub struct MemFactory {
    net: MemNet,
    from: NodeId,
    peers: Arc<PeerSettings>,
}

impl CarrySettings for MemFactory {
    fn carry(&mut self, peers: Arc<PeerSettings>) {
        self.peers = peers;
    }
}

impl RaftNetworkFactory<TypeConfig> for MemFactory {
    type Network = MemConn;

    async fn new_client(&mut self, target: NodeId, _node: &NodeAddr) -> MemConn {
        MemConn {
            net: self.net.clone(),
            from: self.from,
            to: target,
            peers: self.peers.clone(),
        }
    }
}

impl PreVoteNetwork for MemFactory {
    async fn pre_vote(
        &self,
        target: NodeId,
        _node: &NodeAddr,
        req: PreVoteRequest,
        timeout: Duration,
    ) -> Option<PreVoteResponse> {
        let call = self
            .net
            .call(self.from, target, &self.peers, |r| async move {
                Ok::<_, io::Error>(r.pre_vote(&req))
            });
        let r: Result<PreVoteResponse, RPCError<NodeId, NodeAddr, io::Error>> =
            tokio::time::timeout(timeout, call).await.ok()?;
        r.ok()
    }
}

/// One node's connection to another over a [`MemNet`].
pub struct MemConn {
    net: MemNet,
    from: NodeId,
    to: NodeId,
    peers: Arc<PeerSettings>,
}

impl RaftNetwork<TypeConfig> for MemConn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        self.net
            .call(self.from, self.to, &self.peers, |r| async move {
                r.append_entries(rpc).await
            })
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeAddr, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.net
            .call(self.from, self.to, &self.peers, |r| async move {
                r.install_snapshot(rpc).await
            })
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        self.net
            .call(self.from, self.to, &self.peers, |r| async move {
                r.vote(rpc).await
            })
            .await
    }
}
