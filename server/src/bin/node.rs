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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use fencelock_server::auth::Tokens;
use fencelock_server::net::{
    loopback_addr, serve_clients_with, serve_raft_with, ClientPolicy, TcpNetwork, TlsNetwork,
};
use fencelock_server::node::{Node, NodeConfig};
use fencelock_server::tls::NodeTls;
use fencelock_server::types::NodeAddr;
use tokio::net::TcpListener;

#[derive(Parser)]
#[command(about = "A fencelock cluster member (openraft + the fencelock core)")]
struct Args {
    /// This node's id.
    #[arg(long)]
    id: u64,
    /// Data directory (raft.log, snapshot.bin).
    #[arg(long)]
    dir: PathBuf,
    /// A member: ID=RAFT_ADDR/CLIENT_ADDR (repeat for each member, this node included).
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
    /// Raft heartbeat interval (ms); also openraft's AppendEntries timeout.
    #[arg(long, default_value_t = 50)]
    heartbeat_ms: u64,
    /// Raft election timeout, the lower bound (ms); the upper bound is twice it.
    #[arg(long, default_value_t = 300)]
    election_ms: u64,
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
    /// it every client may do everything, membership changes included.
    #[arg(long)]
    tokens: Option<PathBuf>,
}

fn loopback(addr: &str) -> Result<SocketAddr, String> {
    loopback_addr(addr)
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

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = run(Args::parse()).await {
        eprintln!("fencelock-node: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), String> {
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
    let peers: BTreeMap<u64, NodeAddr> = args
        .peers
        .iter()
        .map(|p| parse_peer(p, any_host))
        .collect::<Result<_, _>>()?;
    let me = peers
        .get(&args.id)
        .ok_or("this node's id is not among the peers")?
        .clone();
    let tokens = match &args.tokens {
        Some(path) => Some(std::sync::Arc::new(Tokens::load(path)?)),
        None => {
            eprintln!("fencelock-node: WARNING: no --tokens file: every client may do everything");
            None
        }
    };
    let raft_l = TcpListener::bind(socket_addr(&me.raft, any_host)?)
        .await
        .map_err(|e| format!("bind {}: {e}", me.raft))?;
    let client_l = TcpListener::bind(socket_addr(&me.client, any_host)?)
        .await
        .map_err(|e| format!("bind {}: {e}", me.client))?;
    let mut config = NodeConfig::new(args.id, args.dir);
    config.grace_ms = args.grace_ms;
    config.service.core.lock_delay = args.lock_delay_ms;
    config.heartbeat_ms = args.heartbeat_ms;
    config.election_ms = (args.election_ms, 2 * args.election_ms);
    // Members off loopback are allowed (and dialled) only over TLS.
    config.loopback_members = !any_host;
    let node = match &tls {
        Some(t) => Node::start(config, TlsNetwork(t.clone())).await,
        None => Node::start(config, TcpNetwork).await,
    }
    .map_err(|e| e.to_string())?;
    tokio::spawn(serve_raft_with(raft_l, node.raft.clone(), tls.clone()));
    let policy = ClientPolicy {
        tls: tls.map(|t| t.clients),
        tokens,
        ..ClientPolicy::default()
    };
    tokio::spawn(serve_clients_with(client_l, node.clone(), policy));
    if args.init
        && !node
            .raft
            .is_initialized()
            .await
            .map_err(|e| e.to_string())?
    {
        node.initialize(peers).await?;
    }
    eprintln!(
        "fencelock-node {} up: raft {} client {}",
        args.id, me.raft, me.client
    );
    tokio::signal::ctrl_c().await.map_err(|e| e.to_string())?;
    node.shutdown().await;
    tokio::time::sleep(Duration::from_millis(10)).await;
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
