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
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::auth::{Grants, Tokens};
use crate::election::{Elector, PreVoteNetwork, PreVoteRequest, PreVoteResponse};
use crate::frame::{self, MAX_CLIENT_FRAME, MAX_RAFT_FRAME};
use crate::node::Node;
use crate::protocol::{ClientError, ClientFrame, Reply, Request, ServerFrame};
use crate::state_machine::{PushSink, PUSH_BACKLOG};
use crate::tls::{check_peer, node_name, NodeTls, HANDSHAKE_TIMEOUT};
use crate::types::{NodeAddr, NodeId, TypeConfig};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::{TlsAcceptor, TlsConnector};

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
    serve_raft_with(listener, elector, None).await
}

/// [`serve_raft`] over mutual TLS when `tls` is given ([`crate::tls`]): a peer must
/// present a certificate signed by the cluster CA, and each request is served only if that
/// certificate names the node the request says it comes from and that node is a member
/// ([`crate::tls::check_peer`]); otherwise the connection is closed unanswered. Errors:
/// none (a bad peer only loses its connection).
pub async fn serve_raft_with(listener: TcpListener, elector: Arc<Elector>, tls: Option<NodeTls>) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = sock.set_nodelay(true);
        let raft = elector.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let Some(tls) = tls else {
                let (r, w) = sock.into_split();
                return raft_conn(r, w, raft, None).await;
            };
            let Ok(Ok(s)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.peers.accept(sock)).await
            else {
                return;
            };
            let Some(cert) = s.get_ref().1.peer_certificates().and_then(|c| c.first()) else {
                return;
            };
            let cert = cert.clone().into_owned();
            let (r, w) = tokio::io::split(s);
            raft_conn(r, w, raft, Some(cert)).await
        });
    }
}

/// The node a Raft request says it comes from: the vote's node.
fn sender(req: &RaftReq) -> Option<NodeId> {
    let vote = match req {
        RaftReq::Append(x) => &x.vote,
        RaftReq::Vote(x) => &x.vote,
        RaftReq::Snapshot(x) => &x.vote,
        RaftReq::PreVote(x) => return Some(x.candidate),
    };
    vote.leader_id().voted_for()
}

/// Serves one peer connection's Raft requests in order. With `cert` (mutual TLS), a
/// request is served only if [`check_peer`] allows its sender; the first that is not
/// ends the connection unanswered.
async fn raft_conn<R, W>(r: R, w: W, raft: Arc<Elector>, cert: Option<CertificateDer<'static>>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut r = BufReader::new(r);
    let mut w = BufWriter::new(w);
    while let Ok(Some(req)) = frame::read::<_, RaftReq>(&mut r, MAX_RAFT_FRAME).await {
        if let Some(cert) = &cert {
            let from = sender(&req);
            if let Err(e) = from.ok_or_else(|| "no sender".to_string()).and_then(|id| {
                let r = raft.bound_raft().ok_or("not started yet")?;
                check_peer(r, cert, id)
            }) {
                tracing::warn!("refused a Raft request from node {from:?}: {e}");
                break;
            }
        }
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
}

/// `addr` as a socket address if it is a loopback one: the only kind a node without TLS
/// listens on or dials (plain TCP is for local development).
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
            tls: None,
            conn: None,
        }
    }
}

/// Opens Raft connections over mutual TLS: presents this node's certificate and
/// verifies the peer's for the name `fencelock-node-<target id>` ([`crate::tls`]).
/// Addresses are dialled as given.
#[derive(Clone)]
pub struct TlsNetwork(pub NodeTls);

impl RaftNetworkFactory<TypeConfig> for TlsNetwork {
    type Network = TcpConn;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> TcpConn {
        let name = ServerName::try_from(node_name(target)).ok();
        TcpConn {
            addr: node.raft.clone(),
            tls: name.map(|n| (self.0.dial.clone(), n)),
            conn: None,
        }
    }
}

impl PreVoteNetwork for TlsNetwork {
    /// A pre-vote on a mutual-TLS connection of its own (elections are rare), dropped
    /// afterwards.
    async fn pre_vote(
        &self,
        target: NodeId,
        node: &NodeAddr,
        req: PreVoteRequest,
        timeout: Duration,
    ) -> Option<PreVoteResponse> {
        let name = ServerName::try_from(node_name(target)).ok()?;
        let c = TcpConn {
            addr: node.raft.clone(),
            tls: Some((self.0.dial.clone(), name)),
            conn: None,
        };
        pre_vote_on(c, req, timeout).await
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
        let c = TcpConn {
            addr: self.addr_of(target, node),
            tls: None,
            conn: None,
        };
        pre_vote_on(c, req, timeout).await
    }
}

/// One pre-vote over `c`; `None` without an answer within `timeout`.
async fn pre_vote_on(
    mut c: TcpConn,
    req: PreVoteRequest,
    timeout: Duration,
) -> Option<PreVoteResponse> {
    match c.call(RaftReq::PreVote(req), timeout).await {
        Ok(RaftResp::PreVote(r)) => Some(r),
        _ => None,
    }
}

type BoxRead = Box<dyn AsyncRead + Send + Sync + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Sync + Unpin>;

/// One node's connection to another (reconnects after any error).
pub struct TcpConn {
    addr: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    conn: Option<(BufReader<BoxRead>, BufWriter<BoxWrite>)>,
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
            // Without TLS only loopback addresses are dialled; with it, any address.
            let s = match &self.tls {
                None => {
                    let addr = loopback_addr(&self.addr).map_err(|e| {
                        CallError::Unreachable(io::Error::new(io::ErrorKind::InvalidInput, e))
                    })?;
                    TcpStream::connect(addr).await
                }
                Some(_) => TcpStream::connect(self.addr.as_str()).await,
            }
            .map_err(CallError::Unreachable)?;
            let _ = s.set_nodelay(true);
            let (r, w): (BoxRead, BoxWrite) = match &self.tls {
                None => {
                    let (r, w) = s.into_split();
                    (Box::new(r), Box::new(w))
                }
                Some((dial, name)) => {
                    let t = dial
                        .connect(name.clone(), s)
                        .await
                        .map_err(CallError::Unreachable)?;
                    let (r, w) = tokio::io::split(t);
                    (Box::new(r), Box::new(w))
                }
            };
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
/// the process ends, admitting every client as an administrator (no tokens): for tests
/// and a cluster on a trusted host; see [`serve_clients_with`]. Requests on a connection
/// run concurrently (at most [`MAX_IN_FLIGHT`]); replies carry the request id. Pushes
/// queue at most [`PUSH_BACKLOG`] deep; a connection that falls further behind is closed.
/// Errors: none (a bad or stalled client only loses its connection).
pub async fn serve_clients(listener: TcpListener, node: Arc<Node>) {
    serve_clients_with(listener, node, ClientPolicy::default()).await
}

/// How a node's client port admits clients.
#[derive(Clone)]
pub struct ClientPolicy {
    /// TLS for the client port ([`NodeTls::clients`]); `None`: plain TCP.
    pub tls: Option<TlsAcceptor>,
    /// The accepted bearer tokens: a connection must present one
    /// ([`crate::protocol::Request::Authenticate`]) before anything else, and each
    /// request must be allowed by its grants. `None`: every connection may do everything.
    pub tokens: Option<Arc<Tokens>>,
    /// At most this many client connections at once (TLS handshakes included); a
    /// connection beyond it is closed at once. Default [`MAX_CLIENT_CONNECTIONS`].
    pub max_connections: usize,
}

/// The default limit of a node's concurrent client connections: each costs a task, its
/// buffers and up to [`PUSH_BACKLOG`] queued pushes, so their number is bounded too.
pub const MAX_CLIENT_CONNECTIONS: usize = 4096;

impl Default for ClientPolicy {
    /// Plain TCP, no tokens, [`MAX_CLIENT_CONNECTIONS`].
    fn default() -> Self {
        ClientPolicy {
            tls: None,
            tokens: None,
            max_connections: MAX_CLIENT_CONNECTIONS,
        }
    }
}

/// [`serve_clients`] under `policy`. Errors and cost: as there; a request the connection's
/// token does not allow is answered `Unauthenticated` or `Forbidden` and not served.
pub async fn serve_clients_with(listener: TcpListener, node: Arc<Node>, policy: ClientPolicy) {
    let slots = Arc::new(Semaphore::new(policy.max_connections));
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        // Over the limit: closed at once (dropped), before any handshake.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let _ = sock.set_nodelay(true);
        let (node, policy) = (node.clone(), policy.clone());
        tokio::spawn(async move {
            let Some(tls) = policy.tls.clone() else {
                let (r, w) = sock.into_split();
                client_conn(r, w, node, policy).await;
                drop(slot);
                return;
            };
            // A client that does not speak TLS (or stalls) fails here and is dropped.
            if let Ok(Ok(s)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(sock)).await {
                let (r, w) = tokio::io::split(s);
                client_conn(r, w, node, policy).await;
            }
            drop(slot);
        });
    }
}

async fn client_conn<R, W>(r: R, w: W, node: Arc<Node>, policy: ClientPolicy)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let conn = node.next_conn_id();
    let _registered = node.connection(conn);
    let mut r = BufReader::new(r);
    // What this connection may do: everything without tokens, nothing until it presents one.
    let mut grants = match &policy.tokens {
        None => Some(Grants::all()),
        Some(_) => None,
    };
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
                // Authentication is handled here, in order: the requests after it see it.
                let allowed = match (&req, &policy.tokens) {
                    (Request::Authenticate { token }, Some(tokens)) => {
                        grants = tokens.authenticate(token);
                        Err(match grants {
                            Some(_) => Ok(Reply::Authenticated),
                            None => Err(ClientError::Unauthenticated),
                        })
                    }
                    (_, _) => match &grants {
                        None => Err(Err(ClientError::Unauthenticated)),
                        Some(g) => g.authorize(&req).map_err(Err),
                    },
                };
                if let Err(result) = allowed {
                    let _ = out_tx.send((ServerFrame::Reply { id, result }, None));
                    continue;
                }
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
