//! A fault-injecting proxy for every directed Raft link of a process cluster: node A dials
//! node B through its own listener (`fencelock-node --dial B=127.0.0.1:PORT`), so the test
//! controls, per link and per direction, whether A's requests reach B and whether B's
//! answers reach A. The proxy knows the transport's framing (`u32` big-endian length, then
//! the frame) and drops whole frames, never parts of one: a connection whose frames are
//! dropped stays in sync, the caller's RPC times out and it reconnects, as over a lossy
//! network. Loopback only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What is lost on the link A→B (the connections A opens to B).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// A's requests to B are lost.
    pub requests_lost: bool,
    /// B's answers to A are lost.
    pub answers_lost: bool,
}

type Faults = Arc<Mutex<HashMap<(u64, u64), Link>>>;

/// The proxies of one cluster and their switches.
pub struct Proxies {
    faults: Faults,
    /// Listener port of each directed link (dialer, target).
    pub ports: HashMap<(u64, u64), u16>,
    ids: Vec<u64>,
}

/// Frames larger than the transport's own limit end the connection.
const MAX_FRAME: usize = 64 << 20;

impl Proxies {
    /// Starts one proxy per ordered pair of `targets` (node id → its real Raft address).
    pub async fn start(targets: &HashMap<u64, String>) -> Proxies {
        let faults: Faults = Arc::default();
        let mut ports = HashMap::new();
        let mut ids: Vec<u64> = targets.keys().copied().collect();
        ids.sort();
        for &a in &ids {
            for &b in &ids {
                if a == b {
                    continue;
                }
                let l = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
                ports.insert((a, b), l.local_addr().expect("addr").port());
                tokio::spawn(serve(l, targets[&b].clone(), (a, b), faults.clone()));
            }
        }
        Proxies { faults, ports, ids }
    }

    /// The `--dial` arguments of node `a`.
    pub fn dial_args(&self, a: u64) -> Vec<String> {
        let mut v = Vec::new();
        for &b in &self.ids {
            if b != a {
                v.push("--dial".into());
                v.push(format!("{b}=127.0.0.1:{}", self.ports[&(a, b)]));
            }
        }
        v
    }

    fn edit(&self, key: (u64, u64), f: impl FnOnce(&mut Link)) {
        let mut g = self.faults.lock().unwrap();
        f(g.entry(key).or_default());
    }

    /// Every message `from` sends to `to` is lost: its requests on its own links to `to`,
    /// and its answers on `to`'s links to it. Messages the other way still arrive.
    pub fn drop_messages(&self, from: u64, to: u64) {
        self.edit((from, to), |l| l.requests_lost = true);
        self.edit((to, from), |l| l.answers_lost = true);
    }

    /// The calls `from` makes to `to` are lost (the connections `from` opens to `to` are
    /// cut); `to` still reaches `from` and hears its answers.
    pub fn lose_calls(&self, from: u64, to: u64) {
        self.edit((from, to), |l| {
            l.requests_lost = true;
            l.answers_lost = true;
        });
    }

    /// Cuts `a`–`b` both ways.
    pub fn cut(&self, a: u64, b: u64) {
        self.drop_messages(a, b);
        self.drop_messages(b, a);
    }

    /// Cuts every link of `n` (its client port stays reachable).
    pub fn isolate(&self, n: u64) {
        for &o in &self.ids {
            if o != n {
                self.cut(n, o);
            }
        }
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.faults.lock().unwrap().clear();
    }
}

async fn serve(l: TcpListener, target: String, key: (u64, u64), faults: Faults) {
    loop {
        let Ok((down, _)) = l.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let target = target.clone();
        let faults = faults.clone();
        tokio::spawn(async move {
            let Ok(Ok(up)) =
                tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(&target)).await
            else {
                return; // the target is down: the dialer sees the connection close
            };
            let _ = down.set_nodelay(true);
            let _ = up.set_nodelay(true);
            let (dr, dw) = down.into_split();
            let (ur, uw) = up.into_split();
            let f2 = faults.clone();
            let req = tokio::spawn(pump(dr, uw, move || {
                f2.lock()
                    .unwrap()
                    .get(&key)
                    .is_some_and(|l| l.requests_lost)
            }));
            let ans = tokio::spawn(pump(ur, dw, move || {
                faults
                    .lock()
                    .unwrap()
                    .get(&key)
                    .is_some_and(|l| l.answers_lost)
            }));
            // Either side closing ends both.
            let (a, b) = (req.abort_handle(), ans.abort_handle());
            tokio::select! {
                _ = req => {}
                _ = ans => {}
            }
            a.abort();
            b.abort();
        });
    }
}

/// Copies frames from `r` to `w`, dropping each one for which `lost()` says so when it
/// has been read whole.
async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    lost: impl Fn() -> bool,
) {
    let mut buf = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if r.read_exact(&mut len).await.is_err() {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        if n > MAX_FRAME {
            return;
        }
        buf.resize(n, 0);
        if r.read_exact(&mut buf).await.is_err() {
            return;
        }
        if lost() {
            continue;
        }
        if w.write_all(&len).await.is_err() || w.write_all(&buf).await.is_err() {
            return;
        }
    }
}
