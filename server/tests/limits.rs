//! The transport's limits on both ports, against three in-process nodes over real TCP on
//! loopback (and one `fencelock-node` process under a lowered open-file limit): a slow
//! sender is cut off by the read timeout, a silent connection by the idle timeout (not a
//! client with a session), an oversized frame is refused, connections beyond the
//! per-address limit are closed at once, a flood of idle connections filling the Raft
//! port's total does not keep the peers out — and meanwhile the cluster keeps serving.
//!
//! Timeouts in these tests are short (1 s) so that the tests are quick, but every wait for
//! an outcome is generous (tens of seconds): they assert what happens, never how fast.

mod common;
mod procs;

use std::time::Duration;

use fencelock::Mode;
use fencelock_server::client::{Acquired, Client};
use fencelock_server::frame;
use fencelock_server::net::{
    serve_clients_with, serve_peers, ClientPolicy, NetStats, PeerPolicy, TcpNetwork, MIN_RAFT_FRAME,
};
use fencelock_server::node::{Node, NodeConfig};
use fencelock_server::protocol::{ClientFrame, Reply, Request, ServerFrame, WaitSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// How long a test waits for an outcome that the limits make happen within about a second.
const GENEROUS: Duration = Duration::from_secs(60);

use common::TcpNodes as Tcp;

/// Three nodes on 127.0.0.1 whose client and Raft ports run under these policies.
async fn start(name: &str, client: ClientPolicy, peer: PeerPolicy) -> Tcp {
    Tcp::start(name, |node, r, c| {
        let peer = PeerPolicy {
            stats: node.stats.net.clone(),
            ..peer.clone()
        };
        tokio::spawn(serve_peers(r, node.elector().clone(), peer));
        tokio::spawn(serve_clients_with(c, node.clone(), client.clone()));
    })
    .await
}

impl Tcp {
    async fn leader(&self) -> usize {
        self.leader_within(1500).await
    }

    fn client(&self) -> Client {
        Client::new(self.addrs.iter().map(|a| a.client.clone()).collect())
    }

    /// The cluster serves: a fresh session takes and gives back a fresh lock.
    async fn serves(&self, lock: &str) {
        let s = self.client().open_session(30_000).await.expect("open");
        let got = s.acquire(lock, Mode::Exclusive, WaitSpec::None).await;
        assert!(matches!(got, Ok(Acquired::Granted(_))), "{lock}: {got:?}");
        s.release(lock).await.expect("release");
        s.close().await.expect("close");
    }
}

/// A connection to `addr` from source address `src` (any 127.0.0.0/8 address).
async fn connect_from(src: &str, addr: &str) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{src}:0").parse().unwrap()).unwrap();
    s.connect(addr.parse().unwrap()).await.unwrap()
}

/// Reads until the peer closes; `Some(bytes read)` if it closed within `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(end, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
    }
}

/// The frames in `bytes` (from a client port), decoded.
fn frames(mut bytes: &[u8]) -> Vec<ServerFrame> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        if bytes.len() < 4 + len {
            break;
        }
        let (version, body) = bytes[4..4 + len].split_at(4);
        assert_eq!(
            version,
            frame::CLIENT_WIRE.to_be_bytes(),
            "this build's version"
        );
        out.push(postcard::from_bytes(body).expect("a server frame"));
        bytes = &bytes[4 + len..];
    }
    out
}

fn count(
    f: &prometheus_client::metrics::family::Family<
        Vec<(String, String)>,
        prometheus_client::metrics::counter::Counter,
    >,
    port: &str,
    reason: &str,
) -> u64 {
    f.get_or_create(&vec![
        ("port".to_string(), port.to_string()),
        ("reason".to_string(), reason.to_string()),
    ])
    .get()
}

fn closed(stats: &NetStats, port: &str, reason: &str) -> u64 {
    count(&stats.closed, port, reason)
}

fn refused(stats: &NetStats, port: &str, reason: &str) -> u64 {
    count(&stats.refused, port, reason)
}

/// Sends the start of a frame announcing `len` bytes, then one byte every 200 ms for as
/// long as the connection takes them (at most `len - 1`: the frame is never complete).
/// Returns how many body bytes went out before a write failed, or `None` if it never
/// failed.
async fn trickle(mut s: tokio::net::tcp::OwnedWriteHalf, len: u32) -> Option<u32> {
    s.write_all(&len.to_be_bytes()).await.ok()?;
    for sent in 0..len - 1 {
        if s.write_all(&[0]).await.is_err() {
            return Some(sent);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

fn short_timeouts() -> (ClientPolicy, PeerPolicy) {
    let client = ClientPolicy {
        read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        ..ClientPolicy::default()
    };
    let peer = PeerPolicy {
        read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        ..PeerPolicy::default()
    };
    (client, peer)
}

/// A slow sender (a frame's header, then a byte now and then) is cut off by the read
/// timeout on both ports — on the client port with a `Malformed` naming the read timeout —
/// while the cluster keeps serving other clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sender_is_cut_off_after_the_read_timeout_while_others_keep_working() {
    let (client, peer) = short_timeouts();
    let t = start("limits-slow", client, peer).await;
    let l = t.leader().await;
    // 600 bytes at 5 a second would take two minutes: the connection must end first.
    let (mut cr, cw) = TcpStream::connect(&t.addrs[l].client)
        .await
        .unwrap()
        .into_split();
    let client_trickle = tokio::spawn(trickle(cw, 600));
    let (mut rr, rw) = TcpStream::connect(&t.addrs[l].raft)
        .await
        .unwrap()
        .into_split();
    let raft_trickle = tokio::spawn(trickle(rw, 600));
    // Others keep working while both trickle.
    t.serves("while-slow").await;
    // The client port answers Malformed (the read timeout) and closes.
    let mut got = Vec::new();
    let end = tokio::time::Instant::now() + GENEROUS;
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(end, cr.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the slow client was not cut off"),
        }
    }
    let f = frames(&got);
    assert!(
        matches!(&f[..], [ServerFrame::Malformed(m)] if m.contains("read timeout")),
        "{f:?}"
    );
    // The Raft port closes too.
    let mut buf = [0u8; 64];
    let r = tokio::time::timeout(GENEROUS, rr.read(&mut buf)).await;
    assert!(
        matches!(r, Ok(Ok(0)) | Ok(Err(_))),
        "the slow peer was not cut off: {r:?}"
    );
    // Both senders were stopped by the node, long before their frames could be complete.
    let sent = tokio::time::timeout(GENEROUS, client_trickle)
        .await
        .expect("the client trickle ends")
        .unwrap();
    assert!(sent.is_some(), "the client trickle was never refused");
    let sent = tokio::time::timeout(GENEROUS, raft_trickle)
        .await
        .expect("the raft trickle ends")
        .unwrap();
    assert!(sent.is_some(), "the raft trickle was never refused");
    let stats = &t.nodes[l].stats.net;
    assert_eq!(closed(stats, "client", "read_timeout"), 1);
    assert_eq!(closed(stats, "peer", "read_timeout"), 1);
    t.serves("after-slow").await;
    t.stop().await;
}

/// Opens a session of 60 s on a raw connection to the leader (retrying until a leader
/// takes it): the connection, the session and its credential.
async fn open_raw(t: &Tcp) -> (TcpStream, u64, fencelock_server::auth::SessionSecret) {
    for _ in 0..100 {
        let l = t.leader().await;
        let mut s = TcpStream::connect(&t.addrs[l].client).await.unwrap();
        let req = ClientFrame {
            id: 1,
            req: Request::Open {
                ttl_ms: 60_000,
                key: None,
            },
        };
        frame::write(&mut s, &req).await.unwrap();
        let r = tokio::time::timeout(
            GENEROUS,
            frame::read::<_, ServerFrame>(&mut s, frame::MAX_CLIENT_FRAME),
        )
        .await;
        if let Ok(Ok(Some(ServerFrame::Reply {
            result: Ok(Reply::Opened { reply, secret, .. }),
            ..
        }))) = r
        {
            return (s, reply.opened().expect("a session").0, secret);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no session opened");
}

/// A request still running when its client stops sending (FIN right after it: the
/// connection's reader ends while the request waits for its read barrier or its write)
/// leaves nothing of that connection behind once it ends: no push registration (each
/// kept its push queue, about 7 KB, for good: a client could grow a node's memory without
/// bound by attaching to an idle session over and over) and no session-quota entry. Its
/// answer is still written before the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_outliving_its_connection_leaves_nothing_attached_or_counted() {
    let t = Tcp::start_with(
        "limits-outlive",
        |c| c.max_sessions_per_conn = Some(64),
        |node, r, c| {
            let peer = PeerPolicy {
                stats: node.stats.net.clone(),
                ..PeerPolicy::default()
            };
            tokio::spawn(serve_peers(r, node.elector().clone(), peer));
            tokio::spawn(serve_clients_with(c, node.clone(), ClientPolicy::default()));
        },
    )
    .await;
    // A session that holds nothing gets no pushes: nothing else would clear its
    // registrations. Its own connection stays open (attached, with a quota entry).
    let (_keep, session, secret) = open_raw(&t).await;
    let l = t.leader().await;
    let node = &t.nodes[l];
    let first = node.next_conn_id();
    for (what, req) in [
        ("attach", Request::Attach { session, secret }),
        (
            "open",
            Request::Open {
                ttl_ms: 60_000,
                key: None,
            },
        ),
        ("keep-alive", Request::KeepAlive { session, secret }),
    ] {
        for id in 0..20 {
            let mut s = TcpStream::connect(&t.addrs[l].client).await.unwrap();
            frame::write(
                &mut s,
                &ClientFrame {
                    id,
                    req: req.clone(),
                },
            )
            .await
            .unwrap();
            s.shutdown().await.unwrap();
            let got = closed_within(&mut s, GENEROUS).await.expect("closed");
            assert!(
                frames(&got)
                    .iter()
                    .any(|f| matches!(f, ServerFrame::Reply { id: i, result: Ok(_) } if *i == id)),
                "{what} {id}: answered before the close: {:?}",
                frames(&got)
            );
        }
    }
    let last = node.next_conn_id();
    assert_eq!(t.leader().await, l, "one leader throughout");
    let left = |node: &Node| {
        (first..last)
            .filter(|c| node.shared.hub.has_conn(*c))
            .count()
    };
    let quiet = async {
        while left(node) > 0 || node.conn_quota_entries() > 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let ended = tokio::time::timeout(GENEROUS, quiet).await.is_ok();
    assert!(
        ended,
        "{} of 60 closed connections still attached, {} quota entries (the open one's: 1)",
        left(node),
        node.conn_quota_entries()
    );
    t.serves("after-outliving").await;
    t.stop().await;
}

/// A silent connection is closed after the idle timeout on both ports; a client whose
/// connection has a session attached is not (it keeps its connection across several idle
/// timeouts), and the peers' own connections are never idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_after_the_idle_timeout_but_not_one_with_a_session() {
    let (client, peer) = short_timeouts();
    let t = start("limits-idle", client, peer).await;
    let l = t.leader().await;
    // A raw connection that opens a session (so the session is attached to it) and then
    // stays silent: raw, so that nothing reconnects behind the test's back.
    let (mut kept, session, secret) = open_raw(&t).await;
    let mut silent_client = TcpStream::connect(&t.addrs[l].client).await.unwrap();
    let mut silent_peer = TcpStream::connect(&t.addrs[l].raft).await.unwrap();
    let got = closed_within(&mut silent_client, GENEROUS).await;
    assert_eq!(
        got,
        Some(vec![]),
        "a silent client is closed without a word"
    );
    assert!(closed_within(&mut silent_peer, GENEROUS).await.is_some());
    // Three idle timeouts later the session's connection still answers.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let req = ClientFrame {
        id: 2,
        req: Request::KeepAlive { session, secret },
    };
    frame::write(&mut kept, &req).await.expect("still open");
    let r = tokio::time::timeout(
        GENEROUS,
        frame::read::<_, ServerFrame>(&mut kept, frame::MAX_CLIENT_FRAME),
    )
    .await
    .expect("an answer");
    assert!(
        matches!(r, Ok(Some(ServerFrame::Reply { id: 2, .. }))),
        "the session's connection was closed: {r:?}"
    );
    let stats = &t.nodes[l].stats.net;
    assert!(closed(stats, "client", "idle") >= 1);
    assert!(closed(stats, "peer", "idle") >= 1);
    // Replication and elections went on over the peers' own connections.
    t.serves("after-idle").await;
    t.stop().await;
}

/// A frame over the limit is refused before its body is read: on the client port with a
/// `Malformed` naming the limit, then closed; on the Raft port closed. The cluster serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_frame_is_refused_and_its_connection_closed() {
    let client = ClientPolicy {
        max_frame: 1024,
        ..ClientPolicy::default()
    };
    let peer = PeerPolicy {
        max_frame: MIN_RAFT_FRAME,
        ..PeerPolicy::default()
    };
    let t = start("limits-frame", client, peer).await;
    let l = t.leader().await;
    // A whole 2000-byte frame: refused by its prefix.
    let mut s = TcpStream::connect(&t.addrs[l].client).await.unwrap();
    let mut big = 2000u32.to_be_bytes().to_vec();
    big.extend(std::iter::repeat_n(0u8, 2000));
    s.write_all(&big).await.unwrap();
    let got = closed_within(&mut s, GENEROUS).await.expect("closed");
    let f = frames(&got);
    assert!(
        matches!(&f[..], [ServerFrame::Malformed(m)]
            if m.contains("frame of 2000 bytes exceeds the limit of 1024 bytes")),
        "{f:?}"
    );
    // A frame just under the limit is read (and refused as garbage, not for its size).
    let mut s = TcpStream::connect(&t.addrs[l].client).await.unwrap();
    let mut fits = 1000u32.to_be_bytes().to_vec();
    fits.extend(frame::CLIENT_WIRE.to_be_bytes());
    fits.extend(std::iter::repeat_n(0xffu8, 996));
    s.write_all(&fits).await.unwrap();
    let f = frames(&closed_within(&mut s, GENEROUS).await.expect("closed"));
    assert!(
        matches!(&f[..], [ServerFrame::Malformed(m)] if !m.contains("exceeds")),
        "{f:?}"
    );
    // The Raft port: a prefix one byte over its limit, with nothing behind it.
    let mut s = TcpStream::connect(&t.addrs[l].raft).await.unwrap();
    s.write_all(&(MIN_RAFT_FRAME + 1).to_be_bytes())
        .await
        .unwrap();
    assert!(closed_within(&mut s, GENEROUS).await.is_some());
    // A frame of another wire version: answered with this node's version only, closed,
    // and counted as such on each port.
    for port in [&t.addrs[l].client, &t.addrs[l].raft] {
        let mut s = TcpStream::connect(port).await.unwrap();
        let mut other = 6u32.to_be_bytes().to_vec();
        other.extend((frame::CLIENT_WIRE + frame::PEER_WIRE + 7).to_be_bytes());
        other.extend([0, 0]);
        s.write_all(&other).await.unwrap();
        let got = closed_within(&mut s, GENEROUS).await.expect("closed");
        let ours = if port == &t.addrs[l].client {
            frame::CLIENT_WIRE
        } else {
            frame::PEER_WIRE
        };
        assert_eq!(got, frame::version_only(ours), "a version-only frame");
    }
    let stats = &t.nodes[l].stats.net;
    assert_eq!(closed(stats, "client", "oversized"), 1);
    assert_eq!(closed(stats, "peer", "oversized"), 1);
    assert_eq!(closed(stats, "client", "other_version"), 1);
    assert_eq!(closed(stats, "peer", "other_version"), 1);
    // The peers' own frames (entries, heartbeats) fit: the cluster replicates and serves.
    t.serves("after-oversized").await;
    t.stop().await;
}

/// `Request::Session` for a session that does not exist, answered on any node.
async fn ask(s: &mut TcpStream) -> Option<ServerFrame> {
    let req = ClientFrame {
        id: 7,
        req: Request::Session { session: 1 << 40 },
    };
    frame::write(s, &req).await.ok()?;
    tokio::time::timeout(
        Duration::from_secs(10),
        frame::read::<_, ServerFrame>(s, frame::MAX_CLIENT_FRAME),
    )
    .await
    .ok()?
    .ok()?
}

/// Connections beyond the per-address limit are closed at once on both ports, while
/// other addresses (the other clients, the peers) are served; a freed place is served
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_per_address_limit_are_refused_while_others_work() {
    let client = ClientPolicy {
        max_per_addr: 3,
        ..ClientPolicy::default()
    };
    let peer = PeerPolicy {
        max_per_addr: 8,
        ..PeerPolicy::default()
    };
    let t = start("limits-addr", client, peer).await;
    let l = t.leader().await;
    let caddr = t.addrs[l].client.clone();
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = connect_from("127.0.0.2", &caddr).await;
        // Answered (by a follower, if the leader moved meanwhile, `NotLeader`).
        let r = ask(&mut s).await;
        assert!(matches!(r, Some(ServerFrame::Reply { id: 7, .. })), "{r:?}");
        held.push(s);
    }
    let mut fourth = connect_from("127.0.0.2", &caddr).await;
    assert_eq!(ask(&mut fourth).await, None, "the fourth was served");
    // Another address is served, and so is the cluster's own client on 127.0.0.1.
    let mut other = connect_from("127.0.0.3", &caddr).await;
    assert!(
        ask(&mut other).await.is_some(),
        "another address was refused"
    );
    t.serves("while-full").await;
    // A freed place is served again (the close reaches the node asynchronously).
    drop(held.pop());
    let mut again = None;
    for _ in 0..250 {
        let mut s = connect_from("127.0.0.2", &caddr).await;
        if let Some(f) = ask(&mut s).await {
            again = Some(f);
            held.push(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert!(again.is_some(), "a freed place was not served again");
    assert!(refused(&t.nodes[l].stats.net, "client", "per_address") >= 1);

    // The Raft port: 8 connections from 127.0.0.4 are kept, the 9th is closed at once.
    let raddr = t.addrs[l].raft.clone();
    let mut peers_held = Vec::new();
    for _ in 0..8 {
        peers_held.push(connect_from("127.0.0.4", &raddr).await);
    }
    let mut ninth = connect_from("127.0.0.4", &raddr).await;
    assert!(closed_within(&mut ninth, GENEROUS).await.is_some());
    assert_eq!(refused(&t.nodes[l].stats.net, "peer", "per_address"), 1);
    // The held ones are still open, and the peers (on 127.0.0.1) still replicate.
    t.serves("while-peer-full").await;
    for s in &mut peers_held {
        assert_eq!(
            s.try_read(&mut [0u8; 1]).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::WouldBlock),
            "a connection within the limit was closed"
        );
    }
    t.stop().await;
}

/// A flood of idle connections on every node's Raft port, opened before the cluster forms
/// and filling each port's total, does not keep the peers out: each peer's connection
/// takes the place of the oldest flood connection (counted `displaced`), a leader is
/// elected and the cluster serves — long before the flood's connections would time out
/// (the idle timeout here is ten minutes). The limit shown is the total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_does_not_keep_the_peers_out() {
    const TOTAL: usize = 6;
    let peer = PeerPolicy {
        max_connections: TOTAL,
        max_per_addr: 1000,
        idle_timeout: Duration::from_secs(600),
        ..PeerPolicy::default()
    };
    let flood = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let t = Tcp::start("limits-peer-flood", |node, r, c| {
        // Connected before the port accepts anything: the flood is first in its backlog.
        let at = r.local_addr().unwrap();
        for _ in 0..TOTAL {
            flood
                .lock()
                .unwrap()
                .push(std::net::TcpStream::connect(at).unwrap());
        }
        let peer = PeerPolicy {
            stats: node.stats.net.clone(),
            ..peer.clone()
        };
        tokio::spawn(serve_peers(r, node.elector().clone(), peer));
        tokio::spawn(serve_clients_with(c, node.clone(), ClientPolicy::default()));
    })
    .await;
    let l = t.leader().await;
    t.serves("through-a-flood").await;
    // The leader reached both followers, each through a flood connection's place.
    let deadline = tokio::time::Instant::now() + GENEROUS;
    for (i, n) in t.nodes.iter().enumerate().filter(|(i, _)| *i != l) {
        while closed(&n.stats.net, "peer", "displaced") == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {} displaced no flood connection",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(refused(&n.stats.net, "peer", "per_address"), 0);
        let shown = n
            .stats
            .net
            .limits
            .get_or_create(&vec![("name".to_string(), "peer_connections".to_string())])
            .get();
        assert_eq!(shown, TOTAL as i64);
    }
    drop(flood);
    t.stop().await;
}

/// Idle connections filling a node's client total do not keep clients out: a client
/// arriving on the full port takes the place of the oldest idle one (closed, counted
/// `displaced`) and is served, and a connection that has been served keeps its place
/// through the whole flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_filling_the_client_total_do_not_keep_clients_out() {
    let client = ClientPolicy {
        max_connections: 4,
        max_per_addr: 1000,
        ..ClientPolicy::default()
    };
    let t = start("limits-client-flood", client, PeerPolicy::default()).await;
    let l = t.leader().await;
    let caddr = t.addrs[l].client.clone();
    // Served, so proven.
    let mut served = connect_from("127.0.0.2", &caddr).await;
    assert!(ask(&mut served).await.is_some(), "not served");
    // The flood: three times the total in idle connections.
    let mut flood = Vec::new();
    for _ in 0..12 {
        flood.push(connect_from("127.0.0.3", &caddr).await);
    }
    // A client on this node alone is served through it.
    let fresh = Client::new(vec![caddr.clone()]);
    let s = fresh
        .open_session(30_000)
        .await
        .expect("open through a flood");
    let got = s
        .acquire("past-the-flood", Mode::Exclusive, WaitSpec::None)
        .await;
    assert!(matches!(got, Ok(Acquired::Granted(_))), "{got:?}");
    s.release("past-the-flood").await.expect("release");
    assert!(
        ask(&mut served).await.is_some(),
        "a served connection lost its place"
    );
    let stats = &t.nodes[l].stats.net;
    assert!(
        closed(stats, "client", "displaced") >= 9,
        "{}",
        closed(stats, "client", "displaced")
    );
    // The oldest flood connections were the ones closed.
    assert!(closed_within(&mut flood[0], GENEROUS).await.is_some());
    drop(flood);
    t.stop().await;
}

/// Parses Prometheus text into `name{labels}` → value.
fn metrics(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

async fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8(buf).ok()?;
    Some(text.split_once("\r\n\r\n")?.1.to_string())
}

/// A `fencelock-node` whose open-file limit is 128 (set by `prlimit` on its process):
/// it fits its client and Raft limits together to the descriptors it has. Then its limit
/// is lowered while it runs (what start-up cannot fit for), and it is flooded on both
/// ports until no descriptor is left (accepts fail with EMFILE): it keeps serving the
/// connections it has and stays up; once the flood ends it accepts and serves new
/// clients again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_low_open_file_limit_the_node_serves_on_and_recovers() {
    let dir = common::temp_dir("limits-nofile");
    let (r, c, m) = (procs::free_port(), procs::free_port(), procs::free_port());
    let (raft, client, metrics_addr) = (
        format!("127.0.0.1:{r}"),
        format!("127.0.0.1:{c}"),
        format!("127.0.0.1:{m}"),
    );
    let log_path = dir.join("node.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut node = std::process::Command::new("prlimit");
    node.arg("--nofile=128:128").arg("--").arg(procs::NODE);
    procs::one_node_flags(&mut node, &dir, &raft, &client, &metrics_addr, 100);
    let mut node = node
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("prlimit (util-linux) runs fencelock-node");
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let node = Kill(&mut node);
    // A client that is connected before the flood, with a session and a lock.
    let held = Client::new(vec![client.clone()]);
    let session = held.open_session(120_000).await.expect("the node serves");
    let got = session
        .acquire("before", Mode::Exclusive, WaitSpec::None)
        .await;
    assert!(matches!(got, Ok(Acquired::Granted(_))), "{got:?}");
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        text.contains("fit the open-file limit of 128")
            && text.contains("serving at most 20 client and 20 Raft connections"),
        "no word of the fitted limits: {text}"
    );
    // Fitted at start, the limits alone leave descriptors to spare; lowered on the running
    // process to 40 more than it has open, the flood below runs it out (20 client
    // connections fill their total, and the Raft port's 20 do not fit in what is left).
    let pid = node.0.id();
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let lowered = std::process::Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={0}:{0}", open + 40))
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(lowered.success(), "prlimit --pid failed");
    // The flood: 200 client connections, and up to 64 Raft connections from each of four
    // addresses — far more than 128 descriptors.
    let mut flood = Vec::new();
    for _ in 0..200 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(&client)).await
        {
            flood.push(s);
        }
    }
    // (A connect that is not answered means the listen backlog is full: enough.)
    'flood: for src in ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"] {
        for _ in 0..64 {
            let s = TcpSocket::new_v4().unwrap();
            s.bind(format!("{src}:0").parse().unwrap()).unwrap();
            match tokio::time::timeout(Duration::from_secs(1), s.connect(raft.parse().unwrap()))
                .await
            {
                Ok(Ok(s)) => flood.push(s),
                _ => break 'flood,
            }
        }
    }
    // While flooded: the held connection is served, and the node is up.
    let got = session
        .acquire("during", Mode::Exclusive, WaitSpec::None)
        .await;
    assert!(matches!(got, Ok(Acquired::Granted(_))), "{got:?}");
    session
        .keep_alive()
        .await
        .expect("keep-alive while flooded");
    assert!(
        node.0.try_wait().unwrap().is_none(),
        "the node died while flooded"
    );
    // The flood ends: new clients are served again.
    drop(flood);
    let fresh = Client::new(vec![client.clone()]);
    let s2 = fresh
        .open_session(30_000)
        .await
        .expect("a new client after the flood");
    let got = s2.acquire("after", Mode::Exclusive, WaitSpec::None).await;
    assert!(matches!(got, Ok(Acquired::Granted(_))), "{got:?}");
    let mut body = None;
    for _ in 0..100 {
        body = http_get(&metrics_addr, "/metrics").await;
        if body.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = metrics(&body.expect("/metrics answers after the flood"));
    assert_eq!(
        m.get("fencelock_net_limit{name=\"client_connections\"}"),
        Some(&20.0),
        "128 descriptors less the 88 kept back, half of them: the Raft port has the rest"
    );
    assert_eq!(
        m.get("fencelock_net_limit{name=\"peer_connections\"}"),
        Some(&20.0)
    );
    let accept_errors: f64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("fencelock_accept_errors_total"))
        .map(|(_, v)| v)
        .sum();
    assert!(accept_errors >= 1.0, "no accept ever failed: {m:?}");
    // The flood's idle connections took each other's places, never the held client's
    // (which was served throughout, above).
    assert!(
        m.get("fencelock_connections_closed_total{port=\"client\",reason=\"displaced\"}")
            .is_some_and(|v| *v >= 1.0),
        "{m:?}"
    );
    assert!(node.0.try_wait().unwrap().is_none(), "the node died");
    // Failed accepts are logged, but not once per failure.
    let text = std::fs::read_to_string(&log_path).unwrap();
    let lines = text.lines().filter(|l| l.contains("accepting a")).count();
    assert!(lines >= 1, "no failed accept was logged: {text}");
    assert!(
        (lines as f64) < accept_errors || accept_errors <= 2.0,
        "{lines} log lines for {accept_errors} failed accepts"
    );
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A connection total beyond what the listener can hold (a flag such as
/// `--max-peer-connections 18446744073709551615`) is clamped to the most a metric shows
/// (2⁶³ − 1), and the limit the node shows is the clamped one, on both ports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enormous_total_is_shown_as_the_node_runs_with_it() {
    let dir = common::temp_dir("limits-shown-clamped");
    let node = Node::start(NodeConfig::new(1, dir.join("n1")), TcpNetwork::default())
        .await
        .unwrap();
    let stats = node.stats.net.clone();
    let peers = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let clients = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peer_policy = PeerPolicy {
        max_connections: usize::MAX,
        stats: stats.clone(),
        ..PeerPolicy::default()
    };
    let client_policy = ClientPolicy {
        max_connections: usize::MAX,
        ..ClientPolicy::default()
    };
    let p = tokio::spawn(serve_peers(peers, node.elector().clone(), peer_policy));
    let c = tokio::spawn(serve_clients_with(clients, node.clone(), client_policy));
    let shown = |name: &str| {
        stats
            .limits
            .get_or_create(&vec![("name".to_string(), name.to_string())])
            .get()
    };
    let most = i64::MAX;
    let deadline = tokio::time::Instant::now() + GENEROUS;
    while (shown("peer_connections") == 0 || shown("client_connections") == 0)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(shown("peer_connections"), most);
    assert_eq!(shown("client_connections"), most);
    p.abort();
    c.abort();
    node.shutdown().await;
}

/// Every transport limit given on `fencelock-node`'s command line is the one the running
/// node enforces: each flag, set to a value no default has, shows as that value in the
/// node's `fencelock_net_limit{name}` gauges, which are set where each limit is applied
/// (the bound on unwritten list answers by the call that sets it). The connection totals
/// are left out: the node fits them to its open-file limit (their fitting is
/// `under_a_low_open_file_limit_the_node_serves_on_and_recovers`).
/// The tokens file's digest (`Tokens::digest`) is in the start's log and not in
/// `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transport_limit_flag_reaches_the_running_node() {
    let dir = common::temp_dir("limits-flags");
    let (r, c, m) = (procs::free_port(), procs::free_port(), procs::free_port());
    let (raft, client, metrics_addr) = (
        format!("127.0.0.1:{r}"),
        format!("127.0.0.1:{c}"),
        format!("127.0.0.1:{m}"),
    );
    let peer_frame = fencelock_server::net::MIN_RAFT_FRAME as u64 + 7;
    let flags: Vec<(&str, &str, u64)> = vec![
        (
            "--max-unwritten-list-bytes",
            "client_unwritten_list_bytes",
            777_777,
        ),
        ("--max-queued-pushes", "client_queued_pushes", 4_321),
        (
            "--max-client-connections-per-addr",
            "client_connections_per_address",
            17,
        ),
        ("--max-client-frame-bytes", "client_frame_bytes", 5_555),
        (
            "--client-idle-timeout-ms",
            "client_idle_timeout_ms",
            123_456,
        ),
        ("--read-timeout-ms", "client_read_timeout_ms", 6_543),
        ("--read-timeout-ms", "peer_read_timeout_ms", 6_543),
        ("--max-peer-frame-bytes", "peer_frame_bytes", peer_frame),
        ("--peer-idle-timeout-ms", "peer_idle_timeout_ms", 234_567),
        (
            "--max-peer-connections-per-addr",
            "peer_connections_per_address",
            19,
        ),
    ];
    let tokens_file = dir.join("tokens");
    let tokens_text = format!(
        "# ops\nadmin * {}\nlock jobs/ {}\n",
        fencelock_server::auth::token_hash("a"),
        fencelock_server::auth::token_hash("b")
    );
    std::fs::write(&tokens_file, &tokens_text).unwrap();
    let digest = fencelock_server::auth::Tokens::parse(&tokens_text)
        .unwrap()
        .digest();
    let mut cmd = std::process::Command::new(procs::NODE);
    cmd.arg("--tokens").arg(&tokens_file);
    procs::one_node_flags(&mut cmd, &dir, &raft, &client, &metrics_addr, 100);
    let mut given = std::collections::BTreeSet::new();
    for (flag, _, v) in &flags {
        if given.insert(*flag) {
            cmd.arg(flag).arg(v.to_string());
        }
    }
    let log_path = dir.join("node.log");
    let mut node = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("fencelock-node starts");
    let mut body = None;
    for _ in 0..300 {
        body = http_get(&metrics_addr, "/metrics").await;
        let served = body.as_deref().is_some_and(|b| {
            flags
                .iter()
                .all(|(_, name, _)| b.contains(&format!("name=\"{name}\"")))
        });
        if served || node.try_wait().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = node.kill();
    let _ = node.wait();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let m = metrics(&body.unwrap_or_else(|| panic!("no /metrics; the node's log:\n{log}")));
    for (flag, name, v) in flags {
        assert_eq!(
            m.get(&format!("fencelock_net_limit{{name=\"{name}\"}}")),
            Some(&(v as f64)),
            "{flag} {v} does not show as {name}: {log}"
        );
    }
    assert!(log.contains(&format!("2 lines, digest {digest}")), "{log}");
    assert!(
        !m.keys().any(|k| k.contains(&digest)),
        "the digest is logged, not served: {m:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
