//! `fencelock-node`: one member of a fencelock cluster (loopback addresses only).
//!
//! ```text
//! fencelock-node --id 1 --dir /tmp/fl/n1 \
//!   --peer 1=127.0.0.1:7201/127.0.0.1:7101 --peer 2=127.0.0.1:7202/127.0.0.1:7102 \
//!   --peer 3=127.0.0.1:7203/127.0.0.1:7103 --init
//! ```
//! Each `--peer ID=RAFT/CLIENT` names a member's Raft and client addresses (this node's
//! own entry says where it listens). `--init` on one node initializes a new cluster (a
//! no-op when its log already has one).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use fencelock_server::net::{loopback_addr, serve_clients, serve_raft, TcpNetwork};
use fencelock_server::node::{Node, NodeConfig};
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
    /// ID=ADDR: dial node ID's Raft port at ADDR instead of its member address (a
    /// loopback proxy between this node and that one, as the partition tests use).
    #[arg(long = "dial")]
    dial: Vec<String>,
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

fn parse_peer(s: &str) -> Result<(u64, NodeAddr), String> {
    let (id, rest) = s.split_once('=').ok_or("peer must be ID=RAFT/CLIENT")?;
    let (raft, client) = rest.split_once('/').ok_or("peer must be ID=RAFT/CLIENT")?;
    loopback(raft)?;
    loopback(client)?;
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
    let peers: BTreeMap<u64, NodeAddr> = args
        .peers
        .iter()
        .map(|p| parse_peer(p))
        .collect::<Result<_, _>>()?;
    let me = peers
        .get(&args.id)
        .ok_or("this node's id is not among the peers")?
        .clone();
    let raft_l = TcpListener::bind(loopback(&me.raft)?)
        .await
        .map_err(|e| format!("bind {}: {e}", me.raft))?;
    let client_l = TcpListener::bind(loopback(&me.client)?)
        .await
        .map_err(|e| format!("bind {}: {e}", me.client))?;
    let mut config = NodeConfig::new(args.id, args.dir);
    config.grace_ms = args.grace_ms;
    config.service.core.lock_delay = args.lock_delay_ms;
    config.heartbeat_ms = args.heartbeat_ms;
    config.election_ms = (args.election_ms, 2 * args.election_ms);
    let dial: BTreeMap<u64, String> = args
        .dial
        .iter()
        .map(|d| parse_dial(d))
        .collect::<Result<_, _>>()?;
    let node = Node::start(config, TcpNetwork::dial_via(dial))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(serve_raft(raft_l, node.elector().clone()));
    tokio::spawn(serve_clients(client_l, node.clone()));
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
    fn only_loopback_addresses_are_accepted() {
        assert!(loopback("127.0.0.1:7101").is_ok());
        assert!(loopback("[::1]:7101").is_ok());
        assert!(loopback("0.0.0.0:7101").is_err());
        assert!(loopback("10.1.2.3:7101").is_err());
        assert!(
            loopback("localhost:7101").is_err(),
            "names are not resolved"
        );
        let (id, a) = parse_peer("2=127.0.0.1:7202/127.0.0.1:7102").unwrap();
        assert_eq!(
            (id, a.raft.as_str(), a.client.as_str()),
            (2, "127.0.0.1:7202", "127.0.0.1:7102")
        );
        assert!(parse_peer("2=127.0.0.1:7202").is_err());
        assert!(parse_peer("2=192.168.0.1:7202/127.0.0.1:7102").is_err());
        assert!(parse_peer("x=127.0.0.1:7202/127.0.0.1:7102").is_err());
        assert_eq!(
            parse_dial("2=127.0.0.1:9000"),
            Ok((2, "127.0.0.1:9000".to_string()))
        );
        assert!(parse_dial("2=10.0.0.1:9000").is_err());
        assert!(parse_dial("127.0.0.1:9000").is_err());
    }
}
