//! TCP transport: Raft RPCs between nodes and the client protocol, both as
//! length-prefixed postcard frames ([`crate::frame`]).
//!
//! A garbage, truncated or oversized frame closes that connection (the client port first
//! answers [`ServerFrame::Malformed`]); it never takes the node down.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::election::{Elector, PreVoteNetwork, PreVoteRequest, PreVoteResponse};
use crate::frame::{self, MAX_CLIENT_FRAME, MAX_RAFT_FRAME};
use crate::node::Node;
use crate::protocol::{ClientFrame, ServerFrame};
use crate::state_machine::{PushSink, PUSH_BACKLOG};
use crate::types::{NodeAddr, NodeId, TypeConfig};

/// A Raft RPC on the wire.
#[derive(Serialize, Deserialize)]
enum RaftReq {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    PreVote(PreVoteRequest),
}

/// A Raft RPC's answer on the wire.
#[derive(Serialize, Deserialize)]
enum RaftResp {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    PreVote(PreVoteResponse),
}

/// Serves Raft RPCs (and pre-votes) on `listener` for the node whose [`Elector`] is
/// `elector` ([`crate::node::Node::elector`]), one task per connection, until the process
/// ends. Requests on one connection are answered in order. Errors: none (a bad peer only
/// loses its connection).
pub async fn serve_raft(listener: TcpListener, elector: Arc<Elector>) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = sock.set_nodelay(true);
        let raft = elector.clone();
        tokio::spawn(async move {
            let (r, w) = sock.into_split();
            let mut r = BufReader::new(r);
            let mut w = BufWriter::new(w);
            while let Ok(Some(req)) = frame::read::<_, RaftReq>(&mut r, MAX_RAFT_FRAME).await {
                let resp = match req {
                    RaftReq::Append(x) => RaftResp::Append(raft.append_entries(x).await),
                    RaftReq::Vote(x) => RaftResp::Vote(raft.vote(x).await),
                    RaftReq::Snapshot(x) => RaftResp::Snapshot(raft.install_snapshot(x).await),
                    RaftReq::PreVote(x) => RaftResp::PreVote(raft.pre_vote(&x)),
                };
                if frame::write(&mut w, &resp).await.is_err() {
                    break;
                }
            }
        });
    }
}

/// `addr` as a socket address if it is a loopback one: the only kind a node listens on or
/// dials (the cluster is loopback-only by design: no authentication, no TLS).
///
/// Errors: an unparsable or non-loopback address, described.
pub fn loopback_addr(addr: &str) -> Result<std::net::SocketAddr, String> {
    let a: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| format!("bad address {addr}: {e}"))?;
    if !a.ip().is_loopback() {
        return Err(format!("{addr} is not a loopback address (refused)"));
    }
    Ok(a)
}

/// Opens Raft connections by the target's `raft` address (loopback addresses only: a
/// member added with another address is unreachable, never dialled), or by this node's
/// own override for that target ([`TcpNetwork::dial_via`]: a fault-injecting proxy in the
/// partition tests).
#[derive(Clone, Default)]
pub struct TcpNetwork {
    dial: Arc<BTreeMap<NodeId, String>>,
}

impl TcpNetwork {
    /// A network that dials `dial[id]` instead of node `id`'s `raft` address (the others
    /// as usual). Only loopback overrides are ever dialled. Cost: O(1).
    pub fn dial_via(dial: BTreeMap<NodeId, String>) -> TcpNetwork {
        TcpNetwork {
            dial: Arc::new(dial),
        }
    }

    fn addr_of(&self, target: NodeId, node: &NodeAddr) -> String {
        self.dial
            .get(&target)
            .cloned()
            .unwrap_or_else(|| node.raft.clone())
    }
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpConn;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> TcpConn {
        TcpConn {
            addr: self.addr_of(target, node),
            conn: None,
        }
    }
}

impl PreVoteNetwork for TcpNetwork {
    /// A pre-vote on a connection of its own (elections are rare), dropped afterwards.
    async fn pre_vote(
        &self,
        target: NodeId,
        node: &NodeAddr,
        req: PreVoteRequest,
        timeout: Duration,
    ) -> Option<PreVoteResponse> {
        let mut c = TcpConn {
            addr: self.addr_of(target, node),
            conn: None,
        };
        match c.call(RaftReq::PreVote(req), timeout).await {
            Ok(RaftResp::PreVote(r)) => Some(r),
            _ => None,
        }
    }
}

/// One node's connection to another (reconnects after any error).
pub struct TcpConn {
    addr: String,
    conn: Option<(
        BufReader<tokio::net::tcp::OwnedReadHalf>,
        BufWriter<tokio::net::tcp::OwnedWriteHalf>,
    )>,
}

enum CallError {
    Unreachable(io::Error),
    Network(io::Error),
}

impl TcpConn {
    async fn call(&mut self, req: RaftReq, ttl: Duration) -> Result<RaftResp, CallError> {
        let res = tokio::time::timeout(ttl, self.call_inner(req)).await;
        let res = match res {
            Ok(r) => r,
            Err(_) => Err(CallError::Network(io::Error::new(
                io::ErrorKind::TimedOut,
                "rpc timed out",
            ))),
        };
        if res.is_err() {
            self.conn = None;
        }
        res
    }

    async fn call_inner(&mut self, req: RaftReq) -> Result<RaftResp, CallError> {
        if self.conn.is_none() {
            let addr = loopback_addr(&self.addr).map_err(|e| {
                CallError::Unreachable(io::Error::new(io::ErrorKind::InvalidInput, e))
            })?;
            let s = TcpStream::connect(addr)
                .await
                .map_err(CallError::Unreachable)?;
            let _ = s.set_nodelay(true);
            let (r, w) = s.into_split();
            self.conn = Some((BufReader::new(r), BufWriter::new(w)));
        }
        let Some((r, w)) = self.conn.as_mut() else {
            return Err(CallError::Unreachable(io::Error::other("no connection")));
        };
        frame::write(w, &req).await.map_err(CallError::Network)?;
        match frame::read::<_, RaftResp>(r, MAX_RAFT_FRAME).await {
            Ok(Some(resp)) => Ok(resp),
            Ok(None) => Err(CallError::Network(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ))),
            Err(e) => Err(CallError::Network(e)),
        }
    }
}

fn rpc_err<E: std::error::Error>(e: CallError) -> RPCError<NodeId, NodeAddr, E> {
    match e {
        CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
        CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
    }
}

fn remote<T, E: std::error::Error>(r: Result<T, E>) -> Result<T, RPCError<NodeId, NodeAddr, E>> {
    r.map_err(|e| {
        RPCError::Network(NetworkError::new(&io::Error::other(format!(
            "remote error: {e}"
        ))))
    })
}

fn unexpected<E: std::error::Error>() -> RPCError<NodeId, NodeAddr, E> {
    RPCError::Network(NetworkError::new(&io::Error::other(
        "mismatched rpc response",
    )))
}

impl RaftNetwork<TypeConfig> for TcpConn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        match self.call(RaftReq::Append(rpc), option.hard_ttl()).await {
            Ok(RaftResp::Append(r)) => remote(r),
            Ok(_) => Err(unexpected()),
            Err(e) => Err(rpc_err(e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeAddr, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self.call(RaftReq::Snapshot(rpc), option.hard_ttl()).await {
            Ok(RaftResp::Snapshot(r)) => remote(r),
            Ok(_) => Err(unexpected()),
            Err(e) => Err(rpc_err(e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        match self.call(RaftReq::Vote(rpc), option.hard_ttl()).await {
            Ok(RaftResp::Vote(r)) => remote(r),
            Ok(_) => Err(unexpected()),
            Err(e) => Err(rpc_err(e)),
        }
    }
}

/// Requests one client connection may have in flight at once, counted until the reply is
/// written to the socket: a client that sends without reading stops being read once this
/// many replies are waiting for it (TCP backpressure), so it cannot grow the node's memory.
pub const MAX_IN_FLIGHT: usize = 256;

/// Serves the client protocol on `listener` for `node`, one task per connection, until
/// the process ends. Requests on a connection run concurrently (at most
/// [`MAX_IN_FLIGHT`]); replies carry the request id. Pushes queue at most
/// [`PUSH_BACKLOG`] deep; a connection that falls further behind is closed. Errors: none
/// (a bad or stalled client only loses its connection).
pub async fn serve_clients(listener: TcpListener, node: Arc<Node>) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = sock.set_nodelay(true);
        tokio::spawn(client_conn(sock, node.clone()));
    }
}

async fn client_conn(sock: TcpStream, node: Arc<Node>) {
    let conn = node.next_conn_id();
    let (r, w) = sock.into_split();
    let mut r = BufReader::new(r);
    // Each reply travels with its in-flight permit, released once the reply is written.
    let (out_tx, mut out_rx) =
        mpsc::unbounded_channel::<(ServerFrame, Option<OwnedSemaphorePermit>)>();
    let (push, mut push_rx, overflow) = PushSink::new(PUSH_BACKLOG);
    let writer_done = Arc::new(Notify::new());
    let done = writer_done.clone();
    let writer = tokio::spawn(async move {
        let mut w = BufWriter::new(w);
        let mut pushes_open = true;
        loop {
            // Replies first: a Malformed frame must be written before the connection ends.
            let (f, permit) = tokio::select! {
                biased;
                _ = overflow.notified() => break,
                f = out_rx.recv() => match f {
                    Some(f) => f,
                    None => break,
                },
                p = push_rx.recv(), if pushes_open => match p {
                    Some(o) => (ServerFrame::Push(o), None),
                    None => {
                        pushes_open = false;
                        continue;
                    }
                },
            };
            let closing = matches!(f, ServerFrame::Malformed(_));
            // A client that stops reading blocks this write; the push queue then fills and
            // its overflow ends the connection.
            let written = tokio::select! {
                r = frame::write(&mut w, &f) => r.is_ok(),
                _ = overflow.notified() => false,
            };
            drop(permit);
            if !written || closing {
                break;
            }
        }
        let _ = w.shutdown().await;
        done.notify_one();
    });
    let limit = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        let next = tokio::select! {
            f = frame::read::<_, ClientFrame>(&mut r, MAX_CLIENT_FRAME) => f,
            _ = writer_done.notified() => break,
        };
        match next {
            Ok(Some(ClientFrame { id, req })) => {
                let permit = tokio::select! {
                    p = limit.clone().acquire_owned() => p,
                    _ = writer_done.notified() => break,
                };
                let Ok(permit) = permit else { break };
                let node = node.clone();
                let out = out_tx.clone();
                let push = push.clone();
                tokio::spawn(async move {
                    let result = node.handle_request(req, conn, &push).await;
                    let _ = out.send((ServerFrame::Reply { id, result }, Some(permit)));
                });
            }
            Ok(None) => break,
            Err(e) => {
                let _ = out_tx.send((ServerFrame::Malformed(e.to_string()), None));
                break;
            }
        }
    }
    node.shared.hub.detach_conn(conn);
    drop(out_tx);
    drop(push);
    let _ = writer.await;
}
