//! Three in-process nodes over the real TCP transport on 127.0.0.1, driven through the
//! client library: redirects from a follower, pushed grants, linearizable reads, bad
//! input on both ports, and how a session settles requests whose answers never came
//! (through a proxy that cuts connections, refuses connects, drops answers or holds
//! pushes back).

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock::{Mode, Output};
use fencelock_server::auth::SessionSecret;
use fencelock_server::client::{Acquired, Client, Timeouts};
use fencelock_server::frame;
use fencelock_server::net::{serve_clients, serve_raft, TcpNetwork};
use fencelock_server::node::{Node, NodeConfig};
use fencelock_server::protocol::{ClientError, ClientFrame, Reply, Request, ServerFrame, WaitSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use common::TcpNodes as Tcp;

async fn start() -> Tcp {
    Tcp::start("tcp", |node, r, c| {
        tokio::spawn(serve_raft(r, node.elector().clone()));
        tokio::spawn(serve_clients(c, node.clone()));
    })
    .await
}

impl Tcp {
    async fn leader(&self) -> usize {
        self.leader_within(500).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_redirects_gets_pushed_grants_and_reads_linearizably() {
    let t = start().await;
    let l = t.leader().await;
    let follower = (l + 1) % 3;
    // Only a follower's address: the client must follow the redirect.
    let client = Client::new(vec![t.addrs[follower].client.clone()]);
    let a = client.open_session(10_000).await.unwrap();
    let b = client.open_session(10_000).await.unwrap();
    let ta = match a
        .acquire("job", Mode::Exclusive, WaitSpec::Forever)
        .await
        .unwrap()
    {
        Acquired::Granted(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        b.acquire("job", Mode::Exclusive, WaitSpec::None)
            .await
            .unwrap(),
        Acquired::Busy
    );
    let b = Arc::new(b);
    let b2 = b.clone();
    let waiter =
        tokio::spawn(async move { b2.acquire("job", Mode::Exclusive, WaitSpec::Forever).await });
    // Poll (bounded) until B shows up as the waiter: no fixed sleep to race against.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut q = Vec::new();
    while tokio::time::Instant::now() < deadline {
        q = client.waiters("job").await.unwrap();
        if !q.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waiter.is_finished(), "B must wait while A holds");
    assert_eq!(
        q.iter().map(|w| w.session.0).collect::<Vec<_>>(),
        vec![b.id()]
    );
    assert_eq!(
        a.release("job").await.unwrap(),
        ta,
        "the release answers its token"
    );
    let tb = match tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("B's grant is pushed")
        .unwrap()
        .unwrap()
    {
        Acquired::Granted(t) => t,
        other => panic!("{other:?}"),
    };
    assert!(tb > ta);
    let h = client.holders("job").await.unwrap();
    assert_eq!((h[0].session.0, h[0].token), (b.id(), tb));
    let unknown = client
        .call(Request::KeepAlive {
            session: 999_999,
            secret: SessionSecret([0; 16]),
        })
        .await;
    assert!(matches!(unknown, Err(ClientError::Core(e)) if e.kind == "unknown_session"));
    // A timed wait ends with TimedOut.
    assert_eq!(
        a.acquire("job", Mode::Exclusive, WaitSpec::ForMs(200))
            .await
            .unwrap(),
        Acquired::TimedOut
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
    assert!(client.holders("job").await.unwrap().is_empty());
    t.stop().await;
}

async fn raw(addr: &str) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

async fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_frames_close_the_connection_not_the_node() {
    let t = start().await;
    let l = t.leader().await;
    let caddr = t.addrs[l].client.clone();
    // Oversized length prefix on the client port: a Malformed frame, then closed.
    let mut s = raw(&caddr).await;
    s.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    let f: Option<ServerFrame> = frame::read(&mut s, frame::MAX_CLIENT_FRAME).await.unwrap();
    assert!(matches!(f, Some(ServerFrame::Malformed(_))), "{f:?}");
    assert!(closed(&mut s).await);
    // A frame of junk in this build's wire version.
    let mut s = raw(&caddr).await;
    let mut junk = vec![0, 0, 0, 9];
    junk.extend(frame::CLIENT_WIRE.to_be_bytes());
    junk.extend([0xff; 5]);
    s.write_all(&junk).await.unwrap();
    let f: Option<ServerFrame> = frame::read(&mut s, frame::MAX_CLIENT_FRAME).await.unwrap();
    assert!(matches!(f, Some(ServerFrame::Malformed(_))), "{f:?}");
    // Junk and an oversized frame on every Raft port.
    for a in &t.addrs {
        let mut s = raw(&a.raft).await;
        s.write_all(&[0, 0, 0, 3, 0xfe, 0xfe, 0xfe]).await.unwrap();
        assert!(closed(&mut s).await);
        let mut s = raw(&a.raft).await;
        s.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        assert!(closed(&mut s).await);
    }
    // A bad lock name is a typed error.
    let client = Client::new(vec![caddr.clone()]);
    let r = client.holders("").await;
    assert!(matches!(r, Err(ClientError::BadRequest(_))), "{r:?}");
    // The cluster still works.
    let s = client.open_session(5_000).await.unwrap();
    assert!(matches!(
        s.acquire("after", Mode::Exclusive, WaitSpec::None)
            .await
            .unwrap(),
        Acquired::Granted(_)
    ));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_disconnects_stays_queued_until_its_session_expires() {
    let t = start().await;
    let l = t.leader().await;
    let caddr = t.addrs[l].client.clone();
    let client = Client::new(vec![caddr.clone()]);
    let holder = client.open_session(30_000).await.unwrap();
    holder
        .acquire("q", Mode::Exclusive, WaitSpec::None)
        .await
        .unwrap();
    // A raw client opens a short session, queues, and vanishes.
    let mut s = raw(&caddr).await;
    frame::write(
        &mut s,
        &ClientFrame {
            id: 1,
            req: Request::Open {
                ttl_ms: 800,
                key: None,
            },
        },
    )
    .await
    .unwrap();
    let (sid, secret) = match frame::read::<_, ServerFrame>(&mut s, frame::MAX_CLIENT_FRAME)
        .await
        .unwrap()
    {
        Some(ServerFrame::Reply {
            result: Ok(Reply::Opened { reply, secret, .. }),
            ..
        }) => (reply.opened().expect("opened").0, secret),
        other => panic!("{other:?}"),
    };
    let acq = Request::Acquire {
        session: sid,
        secret,
        lock: "q".into(),
        mode: Mode::Exclusive,
        wait: WaitSpec::Forever,
        request: Some(1),
    };
    frame::write(&mut s, &ClientFrame { id: 2, req: acq })
        .await
        .unwrap();
    let _queued = frame::read::<_, ServerFrame>(&mut s, frame::MAX_CLIENT_FRAME).await;
    drop(s);
    let q = client.waiters("q").await.unwrap();
    assert_eq!(q.iter().map(|w| w.session.0).collect::<Vec<_>>(), vec![sid]);
    // No keep-alives: its session expires and its wait goes with it.
    let mut gone = false;
    for _ in 0..100 {
        if client.waiters("q").await.unwrap().is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the vanished waiter's session never expired");
    assert!(client.session_info(sid).await.unwrap().is_none());
    assert!(client.session_info(holder.id()).await.unwrap().is_some());
    t.stop().await;
}

/// With no leader (a node that was never initialised answers `NotLeader` without a
/// leader), opening a session waits between attempts instead of reconnecting in a tight
/// loop. (It used to: ~9 000 connections in 3 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_session_without_a_leader_does_not_spin() {
    let base = common::temp_dir("noleader");
    let c = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = c.local_addr().unwrap().to_string();
    let node = Node::start(NodeConfig::new(1, base.join("n1")), TcpNetwork::default())
        .await
        .unwrap();
    let before = node.next_conn_id();
    tokio::spawn(serve_clients(c, node.clone()));
    let client = Client::new(vec![addr]);
    let r = tokio::time::timeout(Duration::from_secs(2), client.open_session(5_000)).await;
    assert!(r.is_err(), "no leader: still trying after 2 s");
    let conns = node.next_conn_id() - before;
    // one attempt per 50 ms at most: ~40 in 2 s
    assert!(conns < 100, "{conns} connections in 2 s: a busy retry loop");
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(&base);
}

/// A loopback TCP proxy whose connections the test can cut: `down` closes every open
/// connection and refuses new ones (accepts and closes them) until `up`; `refuse` closes
/// them and stops listening, so a connect fails before anything is written. It reads the
/// node's side frame by frame (`frame`'s layout: length, version, then the postcard
/// `ServerFrame`, whose first byte is its variant), so a test can also lose the node's
/// answers ([`Faults::drop_replies`]) or hold its pushes back behind later answers
/// ([`Faults::hold_pushes`]; released in order when it is cleared).
struct Proxy {
    addr: String,
    target: String,
    up: tokio::sync::watch::Sender<bool>,
    /// Raised by each `down`: the connections open then close (however soon `up` follows).
    cuts: tokio::sync::watch::Sender<u64>,
    faults: tokio::sync::watch::Sender<Faults>,
    listening: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What the proxy does to the frames a node sends.
#[derive(Clone, Copy, Debug, Default)]
struct Faults {
    /// `ServerFrame::Reply` frames are dropped.
    drop_replies: bool,
    /// `ServerFrame::Push` frames are kept back (the rest pass them).
    hold_pushes: bool,
}

/// The variant byte of `ServerFrame::Reply` and `ServerFrame::Push` in postcard.
const REPLY_FRAME: u8 = 0;
const PUSH_FRAME: u8 = 1;

impl Proxy {
    async fn start(target: String) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (up, _) = tokio::sync::watch::channel(true);
        let (cuts, _) = tokio::sync::watch::channel(0);
        let (faults, _) = tokio::sync::watch::channel(Faults::default());
        let p = Proxy {
            addr,
            target,
            up,
            cuts,
            faults,
            listening: std::sync::Mutex::new(None),
        };
        p.listen(l);
        p
    }

    fn listen(&self, l: TcpListener) {
        let (up, cuts_rx, faults_rx, target) = (
            self.up.subscribe(),
            self.cuts.subscribe(),
            self.faults.subscribe(),
            self.target.clone(),
        );
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = l.accept().await {
                // Only a `down` from here on cuts this one (so one before it is seen by
                // the check of `up` that follows).
                let mut cuts = cuts_rx.clone();
                cuts.borrow_and_update();
                if !*up.borrow() {
                    continue; // dropped: closed at once
                }
                let (target, faults) = (target.clone(), faults_rx.clone());
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let (mut from_client, to_client) = inbound.into_split();
                    let (from_node, mut to_node) = outbound.into_split();
                    tokio::select! {
                        _ = tokio::io::copy(&mut from_client, &mut to_node) => {}
                        _ = pass_node_frames(from_node, to_client, faults) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        *self.listening.lock().unwrap() = Some(task);
    }

    fn down(&self) {
        self.up.send_replace(false);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Listening again (if `refuse` stopped it), and connections pass.
    async fn up(&self) {
        if self.listening.lock().unwrap().is_none() {
            // Same port: the client knows only this address (tried for a while, in case
            // something holds it for a moment).
            for _ in 0..100 {
                if let Ok(l) = TcpListener::bind(&self.addr).await {
                    self.listen(l);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(
                self.listening.lock().unwrap().is_some(),
                "cannot listen again"
            );
        }
        self.up.send_replace(true);
    }

    /// Closes every connection and stops listening: a connect is refused until `up`.
    async fn refuse(&self) {
        self.down();
        let task = self.listening.lock().unwrap().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await; // the listener is closed once the task is gone
        }
    }

    fn set(&self, f: impl FnOnce(&mut Faults)) {
        self.faults.send_modify(f);
    }
}

/// Copies a node's frames to the client, as [`Faults`] says. Frames are read by a task
/// of their own, so a change of faults never cuts a frame in two. Faults apply to a frame
/// when it is passed on, not when it was read: a test sets them on a quiet connection.
async fn pass_node_frames(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut faults: tokio::sync::watch::Receiver<Faults>,
) {
    /// Ends the reader with the copy, however it ends.
    struct Reader(tokio::task::JoinHandle<()>);
    impl Drop for Reader {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let (tx, mut frames) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let _reader = Reader(tokio::spawn(async move {
        loop {
            let mut len = [0u8; 4];
            if from.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut f = len.to_vec();
            f.resize(4 + u32::from_be_bytes(len) as usize, 0);
            if from.read_exact(&mut f[4..]).await.is_err() || tx.send(f).await.is_err() {
                return;
            }
        }
    }));
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        let f = tokio::select! {
            f = frames.recv() => match f {
                Some(f) => Some(f),
                None => return,
            },
            changed = faults.changed() => match changed {
                Ok(()) => None,
                Err(_) => return,
            },
        };
        let now = *faults.borrow_and_update();
        let f = match f {
            Some(f) if f.get(8) == Some(&REPLY_FRAME) && now.drop_replies => None,
            Some(f) if f.get(8) == Some(&PUSH_FRAME) && now.hold_pushes => {
                held.push(f);
                None
            }
            f => f,
        };
        // Pushes held back go first once let through: still in the node's order.
        let out = if now.hold_pushes {
            Vec::new()
        } else {
            std::mem::take(&mut held)
        };
        for f in out.into_iter().chain(f) {
            if to.write_all(&f).await.is_err() {
                return;
            }
        }
    }
}

/// Three nodes, a [`Proxy`] to the leader, and a session on each side of it.
struct CutOff {
    t: Tcp,
    proxy: Proxy,
    /// A client of the leader, and its session A.
    direct: Client,
    a: fencelock_server::client::Session,
    /// A client through the proxy (with the timeouts given), and its session B.
    cut: Client,
    b: Arc<fencelock_server::client::Session>,
}

impl CutOff {
    async fn start(timeouts: Timeouts) -> CutOff {
        let t = start().await;
        let l = t.leader().await;
        let proxy = Proxy::start(t.addrs[l].client.clone()).await;
        let direct = Client::new(vec![t.addrs[l].client.clone()]);
        let cut = Client::with_timeouts(vec![proxy.addr.clone()], timeouts);
        let a = direct.open_session(30_000).await.unwrap();
        let b = Arc::new(cut.open_session(30_000).await.unwrap());
        CutOff {
            t,
            proxy,
            direct,
            a,
            cut,
            b,
        }
    }
}

/// Polls (bounded, 10 s) until `f` holds.
async fn eventually<F: std::future::Future<Output = bool>>(mut f: impl FnMut() -> F, what: &str) {
    for _ in 0..500 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never: {what}");
}

/// Waits (bounded) until `session` waits for `lock`, as `client` reads it.
async fn queued(client: &Client, lock: &str, session: u64, what: &str) {
    eventually(
        || async {
            client
                .waiters(lock)
                .await
                .unwrap()
                .iter()
                .any(|w| w.session.0 == session)
        },
        what,
    )
    .await;
}

/// A waiting acquire whose connection is cut learns its outcome by repeating its request
/// number once reconnected, and the core's replay answers it: a grant pushed while the
/// client was away comes back as `Granted` with that hold's token (not a second hold:
/// the revision does not move), and a timed wait that ran out meanwhile as `TimedOut`
/// (the core's `WaitEnded`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_cut_off_repeats_its_request_number_and_gets_the_outcome() {
    let CutOff {
        t,
        proxy,
        direct,
        a,
        cut,
        b,
    } = CutOff::start(Timeouts::default()).await;
    let ta = match a.acquire("job", Mode::Exclusive, WaitSpec::None).await {
        Ok(Acquired::Granted(t)) => t,
        other => panic!("{other:?}"),
    };

    // Granted while cut off.
    let b2 = b.clone();
    let waiter =
        tokio::spawn(async move { b2.acquire("job", Mode::Exclusive, WaitSpec::Forever).await });
    let bid = b.id();
    queued(&direct, "job", bid, "B queued").await;
    let epoch = cut.epoch();
    proxy.down();
    a.release("job").await.unwrap();
    let held = direct.holders("job").await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].session.0, bid, "B was granted while cut off");
    let tb = held[0].token;
    assert!(tb > ta);
    // Long enough for the client to notice the cut and fail at least one reconnect.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "the grant cannot reach B while it is cut off"
    );
    let got = outcome_once_up(&proxy, waiter).await;
    assert_eq!(got, Acquired::Granted(tb));
    assert!(cut.epoch() > epoch, "B reconnected");
    let node = &t.nodes[t.leader().await];
    assert_eq!(
        node.shared.state().svc.revision(),
        tb.0,
        "the repeat granted nothing new"
    );

    // A timed wait that ran out while cut off.
    let a2 = Arc::new(a);
    let ta2 = match a2.acquire("slow", Mode::Exclusive, WaitSpec::None).await {
        Ok(Acquired::Granted(t)) => t,
        other => panic!("{other:?}"),
    };
    let b3 = b.clone();
    let waiter = tokio::spawn(async move {
        b3.acquire("slow", Mode::Exclusive, WaitSpec::ForMs(400))
            .await
    });
    queued(&direct, "slow", bid, "B queued on slow").await;
    proxy.down();
    eventually(
        || async { direct.waiters("slow").await.unwrap().is_empty() },
        "B's wait timed out",
    )
    .await;
    assert!(
        !waiter.is_finished(),
        "the timeout cannot reach B while it is cut off"
    );
    let got = outcome_once_up(&proxy, waiter).await;
    // Learned from the acquire's repeat: the wait is over (here it timed out).
    assert_eq!(got, Acquired::WaitEnded);
    // A still holds it; B's next numbered request follows on without a stale number.
    assert_eq!(direct.holders("slow").await.unwrap()[0].token, ta2);
    assert_eq!(b.release("job").await.unwrap(), tb);

    // Granted while cut off, then forced out by an operator before B is back: the repeat
    // answers WaitEnded too (nothing of the wait is held), not a timeout.
    let tc = match a2.acquire("forced", Mode::Exclusive, WaitSpec::None).await {
        Ok(Acquired::Granted(t)) => t,
        other => panic!("{other:?}"),
    };
    let b4 = b.clone();
    let waiter = tokio::spawn(async move {
        b4.acquire("forced", Mode::Exclusive, WaitSpec::Forever)
            .await
    });
    queued(&direct, "forced", bid, "B queued on forced").await;
    proxy.down();
    assert_eq!(a2.release("forced").await.unwrap(), tc);
    let held = direct.holders("forced").await.unwrap();
    assert_eq!(held[0].session.0, bid, "B was granted while cut off");
    let granted = held[0].token;
    assert_eq!(
        direct
            .force_release_hold(bid, "forced", granted)
            .await
            .unwrap(),
        granted
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "nothing reaches B while it is cut off"
    );
    let got = outcome_once_up(&proxy, waiter).await;
    assert_eq!(got, Acquired::WaitEnded);
    assert!(direct.holders("forced").await.unwrap().is_empty());
    t.stop().await;
}

/// Brings the proxy back up and returns what the acquire `waiter` learned once its client
/// reconnected (within 10 s).
async fn outcome_once_up(
    proxy: &Proxy,
    waiter: tokio::task::JoinHandle<Result<Acquired, ClientError>>,
) -> Acquired {
    proxy.up().await;
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("B learns its outcome once reconnected")
        .unwrap()
        .unwrap()
}

/// The session ids holding and waiting for `lock`, as `client` reads them.
async fn claims(client: &Client, lock: &str) -> (Vec<u64>, Vec<u64>) {
    let held = client.holders(lock).await.unwrap();
    let queued = client.waiters(lock).await.unwrap();
    (
        held.iter().map(|h| h.session.0).collect(),
        queued.iter().map(|w| w.session.0).collect(),
    )
}

/// `s` acquires `lock` (exclusive, waiting forever) in a task of its own, and `reader`
/// sees it queued; then the acquire's future is dropped (the task aborted and joined).
async fn queue_then_drop(reader: &Client, s: &Arc<fencelock_server::client::Session>, lock: &str) {
    let (s2, name) = (s.clone(), lock.to_string());
    let waiter =
        tokio::spawn(async move { s2.acquire(&name, Mode::Exclusive, WaitSpec::Forever).await });
    queued(reader, lock, s.id(), &format!("queued on {lock}")).await;
    waiter.abort();
    let _ = waiter.await;
}

/// The latest request number the service applied for `session`, as `client` reads it.
async fn last_request(client: &Client, session: u64) -> u64 {
    client
        .session_info(session)
        .await
        .unwrap()
        .unwrap()
        .last_request
}

/// Grants `lock` to `s` at once, or panics.
async fn take(s: &fencelock_server::client::Session, lock: &str) -> fencelock::Token {
    match s.acquire(lock, Mode::Exclusive, WaitSpec::None).await {
        Ok(Acquired::Granted(t)) => t,
        other => panic!("{other:?}"),
    }
}

/// An acquire whose future is dropped while it waits leaves nothing the caller cannot
/// see: granted after it was dropped, its hold is released by the session's next
/// numbered request; dropped and then cancelled,
/// `cancel` withdraws the wait — or, if it was granted meanwhile, the hold — and answers
/// `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_leaves_no_hold_or_wait_behind() {
    let t = start().await;
    let l = t.leader().await;
    let client = Client::with_timeouts(vec![t.addrs[l].client.clone()], by_next_request());
    let a = client.open_session(30_000).await.unwrap();
    let b = Arc::new(client.open_session(30_000).await.unwrap());
    let bid = b.id();

    // Dropped while queued, granted afterwards: the next request releases that hold.
    take(&a, "job").await;
    queue_then_drop(&client, &b, "job").await;
    a.release("job").await.unwrap();
    assert_eq!(
        claims(&client, "job").await,
        (vec![bid], vec![]),
        "granted to B"
    );
    take(&b, "other").await;
    assert_eq!(
        claims(&client, "job").await,
        (vec![], vec![]),
        "the hold no call returned is released"
    );

    // Dropped while queued, then cancelled: the wait is withdrawn.
    take(&a, "q").await;
    queue_then_drop(&client, &b, "q").await;
    b.cancel("q").await.unwrap();
    assert_eq!(claims(&client, "q").await, (vec![a.id()], vec![]));

    // Dropped while queued, granted, then cancelled: the hold is withdrawn.
    queue_then_drop(&client, &b, "q").await;
    a.release("q").await.unwrap();
    assert_eq!(claims(&client, "q").await, (vec![bid], vec![]));
    b.cancel("q").await.unwrap();
    assert_eq!(claims(&client, "q").await, (vec![], vec![]));
    // Nothing is unsettled now: a cancel of nothing is refused as before.
    match b.cancel("q").await {
        Err(ClientError::Core(e)) => assert_eq!(e.kind, "not_queued"),
        other => panic!("{other:?}"),
    }
    t.stop().await;
}

/// An acquire that fails `Unavailable` after its wait was queued (its connection cut
/// for longer than the client retries) is settled by the session's next request: the
/// same acquire again is its retry — its number repeated, the core's replay `Queued`,
/// then the grant — where a fresh number would be refused `already_queued`; another
/// request first cancels the wait no call returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_that_failed_unavailable_is_retried_or_withdrawn() {
    let CutOff {
        t,
        proxy,
        direct,
        a,
        b,
        ..
    } = CutOff::start(quick()).await;
    let bid = b.id();

    // Queued, then cut off until the acquire gives up.
    let wait_for_job = |b: Arc<fencelock_server::client::Session>| async move {
        b.acquire("job", Mode::Exclusive, WaitSpec::Forever).await
    };
    take(&a, "job").await;
    let waiter = tokio::spawn(wait_for_job(b.clone()));
    queued(&direct, "job", bid, "B queued").await;
    proxy.down();
    match tokio::time::timeout(Duration::from_secs(10), waiter).await {
        Ok(Ok(Err(ClientError::Unavailable(_)))) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    proxy.up().await;
    assert_eq!(claims(&direct, "job").await, (vec![a.id()], vec![bid]));
    // The retry takes up the queued wait.
    let waiter = tokio::spawn(wait_for_job(b.clone()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(claims(&direct, "job").await, (vec![a.id()], vec![bid]));
    a.release("job").await.unwrap();
    let tb = match tokio::time::timeout(Duration::from_secs(10), waiter).await {
        Ok(Ok(Ok(Acquired::Granted(t)))) => t,
        other => panic!("the retry is granted, got {other:?}"),
    };
    assert_eq!(direct.holders("job").await.unwrap()[0].token, tb);

    // Queued on another lock, cut off, then a different request: the wait is cancelled.
    take(&a, "slow").await;
    let b2 = b.clone();
    let waiter =
        tokio::spawn(async move { b2.acquire("slow", Mode::Exclusive, WaitSpec::Forever).await });
    queued(&direct, "slow", bid, "B queued on slow").await;
    proxy.down();
    match tokio::time::timeout(Duration::from_secs(10), waiter).await {
        Ok(Ok(Err(ClientError::Unavailable(_)))) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    proxy.up().await;
    assert_eq!(b.release("job").await.unwrap(), tb);
    assert_eq!(
        claims(&direct, "slow").await,
        (vec![a.id()], vec![]),
        "the wait no call returned is cancelled"
    );

    // A dropped acquire whose settling is cut off: the release that began it fails and
    // sends nothing; the same acquire after that is still its retry (the session's latest
    // request number does not move); a cancel cut off the same way and tried again
    // answers `Ok`.
    queue_then_drop(&direct, &b, "slow").await;
    proxy.down();
    match b.release("job").await {
        Err(ClientError::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    proxy.up().await;
    assert_eq!(claims(&direct, "slow").await, (vec![a.id()], vec![bid]));
    let last = || last_request(&direct, bid);
    let before = last().await;
    let b2 = b.clone();
    let waiter =
        tokio::spawn(async move { b2.acquire("slow", Mode::Exclusive, WaitSpec::Forever).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        claims(&direct, "slow").await,
        (vec![a.id()], vec![bid]),
        "still the one wait"
    );
    assert_eq!(last().await, before, "the retry repeated the number");
    waiter.abort();
    let _ = waiter.await;
    proxy.down();
    match b.cancel("slow").await {
        Err(ClientError::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    proxy.up().await;
    b.cancel("slow").await.unwrap();
    assert_eq!(claims(&direct, "slow").await, (vec![a.id()], vec![]));

    // An acquire of a lock B holds, cut off (sent into the proxy or not), then a
    // different request: the repeat is answered with the token B already knows, and
    // that hold is kept.
    let tk = take(&b, "kept").await;
    proxy.down();
    match b.acquire("kept", Mode::Exclusive, WaitSpec::None).await {
        Err(ClientError::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    proxy.up().await;
    take(&b, "next").await;
    let held = direct.holders("kept").await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (held[0].session.0, held[0].token),
        (bid, tk),
        "B's hold is kept"
    );
    t.stop().await;
}

/// Timeouts short enough that a call through a cut [`Proxy`] gives up within seconds.
/// What is unsettled is left to the session's next request (the background settling
/// waits a minute), as the tests that use it need.
fn quick() -> Timeouts {
    Timeouts {
        connect: Duration::from_millis(200),
        reply: Duration::from_secs(2),
        retry_for: Duration::from_millis(600),
        settle_after: Duration::from_secs(60),
    }
}

/// The default timeouts, but what is unsettled is left to the session's next request
/// (the background settling waits a minute), as the tests that use it need.
fn by_next_request() -> Timeouts {
    Timeouts {
        settle_after: Duration::from_secs(60),
        ..Timeouts::default()
    }
}

/// A session that makes no further numbered request still loses what an acquire that
/// never returned left behind: the client settles it in the background
/// (`Timeouts::settle_after`) — a hold granted after the acquire's future was dropped
/// is released, and a wait whose acquire failed `Unavailable` is cancelled. A cancel
/// after such a background withdrawal answers `Ok`, as one that did the withdrawing
/// would, and only that once. A release whose answer was lost is not settled in the
/// background: the same release later is its retry. A `select!` loop that drops the same
/// acquire and makes it again, for longer than `settle_after` in all, keeps its place:
/// each is the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_unanswered_acquire_left_is_settled_in_the_background() {
    let settle_after = Duration::from_secs(2);
    let CutOff {
        t,
        proxy,
        direct,
        a,
        b,
        ..
    } = CutOff::start(Timeouts {
        settle_after,
        ..quick()
    })
    .await;
    let (aid, bid) = (a.id(), b.id());
    let now_claims = |lock: &'static str, want: (Vec<u64>, Vec<u64>)| {
        let direct = direct.clone();
        move || {
            let (direct, want) = (direct.clone(), want.clone());
            async move { claims(&direct, lock).await == want }
        }
    };

    // Dropped while queued, granted, then nothing more from B.
    take(&a, "job").await;
    queue_then_drop(&direct, &b, "job").await;
    a.release("job").await.unwrap();
    assert_eq!(
        claims(&direct, "job").await,
        (vec![bid], vec![]),
        "granted to B"
    );
    eventually(now_claims("job", (vec![], vec![])), "B's hold released").await;

    // Failed `Unavailable` while queued, then nothing more from B.
    take(&a, "slow").await;
    let b2 = b.clone();
    let waiter =
        tokio::spawn(async move { b2.acquire("slow", Mode::Exclusive, WaitSpec::Forever).await });
    queued(&direct, "slow", bid, "B queued on slow").await;
    proxy.down();
    match tokio::time::timeout(Duration::from_secs(10), waiter).await {
        Ok(Ok(Err(ClientError::Unavailable(_)))) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    proxy.up().await;
    eventually(
        now_claims("slow", (vec![aid], vec![])),
        "B's wait cancelled",
    )
    .await;

    // Dropped, withdrawn in the background, then cancelled.
    queue_then_drop(&direct, &b, "slow").await;
    eventually(
        now_claims("slow", (vec![aid], vec![])),
        "B's wait cancelled",
    )
    .await;
    b.cancel("slow").await.unwrap();
    assert_eq!(refused(b.cancel("slow").await), "not_queued");

    // A release whose answer was lost is left for its retry, however long that takes.
    let tk = take(&b, "kept").await;
    answer_lost(&proxy, b.release("kept")).await;
    tokio::time::sleep(settle_after + settle_after / 2).await;
    assert_eq!(
        b.release("kept").await.unwrap(),
        tk,
        "the first attempt's answer"
    );

    // Dropped and made again at once, three times over 1.5 × `settle_after`, with C
    // queued behind B: B is still ahead of C, on its first number.
    let c = direct.open_session(30_000).await.unwrap();
    take(&a, "loop").await;
    queue_then_drop(&direct, &b, "loop").await;
    let cid = c.id();
    let c_waits =
        tokio::spawn(async move { c.acquire("loop", Mode::Exclusive, WaitSpec::Forever).await });
    queued(&direct, "loop", cid, "C queued behind B").await;
    let first = last_request(&direct, bid).await;
    let remake = || {
        let b = b.clone();
        tokio::spawn(async move { b.acquire("loop", Mode::Exclusive, WaitSpec::Forever).await })
    };
    for _ in 0..3 {
        let w = remake();
        tokio::time::sleep(settle_after / 2).await;
        w.abort();
        let _ = w.await;
    }
    let w = remake();
    let (_, queue) = claims(&direct, "loop").await;
    assert_eq!(queue, vec![bid, cid], "B kept its place");
    assert_eq!(
        last_request(&direct, bid).await,
        first,
        "each was the retry"
    );
    a.release("loop").await.unwrap();
    match tokio::time::timeout(Duration::from_secs(10), w).await {
        Ok(Ok(Ok(Acquired::Granted(_)))) => {}
        other => panic!("B is granted, got {other:?}"),
    }
    c_waits.abort();
    t.stop().await;
}

/// Runs `call`, which goes out through `proxy` and is applied, with the node's answers
/// dropped until it gives up `Unavailable`; then cuts the connections and lets them
/// through again.
async fn answer_lost<T: std::fmt::Debug>(
    proxy: &Proxy,
    call: impl std::future::Future<Output = Result<T, ClientError>>,
) {
    proxy.set(|f| f.drop_replies = true);
    match tokio::time::timeout(Duration::from_secs(10), call).await {
        Ok(Err(ClientError::Unavailable(_))) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    proxy.set(|f| f.drop_replies = false);
    proxy.down();
    proxy.up().await;
}

/// The kind of the core's refusal `r` is, or a panic.
fn refused<T: std::fmt::Debug>(r: Result<T, ClientError>) -> String {
    match r {
        Err(ClientError::Core(e)) => e.kind,
        other => panic!("expected a core refusal, got {other:?}"),
    }
}

/// A watch the service applied but whose answer was lost is settled as an acquire is:
/// the same watch again is its retry and gets the first attempt's answer (the session's
/// latest number does not move; a fresh number would be refused `already_watching`);
/// another request first ends the watch no call
/// returned, so a later watch of that lock is a new one; an unwatch of that lock is that
/// ending, and answers `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_answer_was_lost_is_retried_or_withdrawn() {
    let CutOff {
        t,
        proxy,
        direct,
        a,
        b,
        ..
    } = CutOff::start(quick()).await;
    take(&a, "w").await;

    // The retry: the first attempt's number again, not a watch ended and begun anew.
    answer_lost(&proxy, b.watch("w")).await;
    let last = || last_request(&direct, b.id());
    let applied = last().await;
    assert_eq!(b.watch("w").await.unwrap(), 1, "the retry: one holder");
    assert_eq!(last().await, applied, "the retry repeated the number");
    assert_eq!(refused(b.watch("w").await), "already_watching");
    b.unwatch("w").await.unwrap();

    // Another request ends it first.
    answer_lost(&proxy, b.watch("w")).await;
    take(&b, "x").await;
    assert_eq!(
        b.watch("w").await.unwrap(),
        1,
        "a new watch: the lost one ended"
    );
    b.unwatch("w").await.unwrap();

    // An unwatch of it.
    answer_lost(&proxy, b.watch("w")).await;
    b.unwatch("w").await.unwrap();
    assert_eq!(refused(b.unwatch("w").await), "not_watching");
    t.stop().await;
}

/// A numbered request none of whose frames went out (every connect refused until the
/// call gave up) is forgotten by the session's next request, not repeated and withdrawn:
/// the service sees only that next request — the session's latest number moves by the
/// two numbers the client took, where a repeat and its withdrawal would add two more —
/// and the lock the lost acquire named was never taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_never_went_out_is_forgotten() {
    let CutOff {
        t,
        proxy,
        direct,
        cut,
        b,
        ..
    } = CutOff::start(quick()).await;
    let last = || last_request(&direct, b.id());
    take(&b, "first").await;
    let before = last().await;
    proxy.refuse().await;
    // The client drops its cut connection (so nothing below is written to it).
    assert!(matches!(
        cut.status().await,
        Err(ClientError::Unavailable(_))
    ));
    match b.acquire("never", Mode::Exclusive, WaitSpec::None).await {
        Err(ClientError::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    proxy.up().await;
    take(&b, "next").await;
    assert_eq!(
        last().await,
        before + 2,
        "only the next request was applied"
    );
    assert_eq!(claims(&direct, "never").await, (vec![], vec![]));
    t.stop().await;
}

/// The token of the next `Granted` push to `session` for `lock` that `pushes` receives.
async fn grant_of(
    pushes: &mut tokio::sync::broadcast::Receiver<Output>,
    session: u64,
    lock: &str,
) -> fencelock::Token {
    loop {
        match pushes.recv().await {
            Ok(Output::Granted {
                session: s,
                lock: l,
                token,
                ..
            }) if s.0 == session && l.as_str() == lock => return token,
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
}

/// A push about a claim that settling withdrew can arrive after the answers that came
/// later (a node writes a connection's answers before its pushes): here the grant of a
/// dropped acquire is held back until the session has released that hold (settling) and
/// queued again for the same lock. The new acquire is not completed by that old grant (a
/// dead token): it asks the core, keeps waiting, and returns the grant it is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_push_about_a_withdrawn_claim_does_not_complete_a_new_acquire() {
    let CutOff {
        t,
        proxy,
        direct,
        a,
        cut,
        b,
    } = CutOff::start(by_next_request()).await;
    let bid = b.id();
    let mut pushes = cut.subscribe();

    take(&a, "r").await;
    queue_then_drop(&direct, &b, "r").await;
    proxy.set(|f| f.hold_pushes = true);
    a.release("r").await.unwrap();
    let old = direct.holders("r").await.unwrap();
    assert_eq!(old[0].session.0, bid, "granted to B");
    let held = tokio::time::timeout(Duration::from_millis(300), grant_of(&mut pushes, bid, "r"));
    assert!(held.await.is_err(), "the grant's push is held back");
    take(&b, "other").await; // settles: releases the hold no call returned
    take(&a, "r").await;
    let b2 = b.clone();
    let waiter =
        tokio::spawn(async move { b2.acquire("r", Mode::Exclusive, WaitSpec::Forever).await });
    queued(&direct, "r", bid, "B queued again").await;
    proxy.set(|f| f.hold_pushes = false);
    let late = tokio::time::timeout(Duration::from_secs(10), grant_of(&mut pushes, bid, "r"));
    assert_eq!(late.await.expect("the old grant arrives now"), old[0].token);
    tokio::time::sleep(Duration::from_millis(300)).await; // time to act on it
    assert!(
        !waiter.is_finished(),
        "the old grant did not complete the new acquire"
    );
    assert_eq!(claims(&direct, "r").await, (vec![a.id()], vec![bid]));
    a.release("r").await.unwrap();
    let token = match tokio::time::timeout(Duration::from_secs(10), waiter).await {
        Ok(Ok(Ok(Acquired::Granted(t)))) => t,
        other => panic!("the new acquire is granted, got {other:?}"),
    };
    assert_ne!(token, old[0].token);
    assert_eq!(direct.holders("r").await.unwrap()[0].token, token);
    t.stop().await;
}

/// A read's answer is as large as the lock's holders or queue, and may pass the 64 KiB a
/// client request may take: 1 000 labelled shared holders (~75 KiB of `Holders`) and as
/// many waiters behind an exclusive acquire are read back whole through the client library
/// (which used to read answers under the request limit, dropped the connection on this
/// one and retried until it gave up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_larger_than_a_request_frame_is_answered() {
    let t = start().await;
    t.leader().await;
    let client = Client::with_timeouts(
        t.addrs.iter().map(|a| a.client.clone()).collect(),
        fencelock_server::client::Timeouts {
            connect: Duration::from_secs(2),
            reply: Duration::from_secs(5),
            retry_for: Duration::from_secs(5),
            ..Timeouts::default()
        },
    );
    let n = 1000;
    let label = |i: usize| format!("{i:04}-{}", "x".repeat(fencelock::MAX_LABEL_LEN - 5));
    let mut tasks = Vec::new();
    for i in 0..n {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            let s = c.open_labeled(60_000, &label(i)).await.unwrap();
            let r = s.acquire("wide", Mode::Shared, WaitSpec::None).await;
            assert!(matches!(r, Ok(Acquired::Granted(_))), "{r:?}");
            s
        }));
    }
    let mut sessions = Vec::new();
    for t in tasks {
        sessions.push(t.await.unwrap());
    }
    let h = client.holders("wide").await.expect("the holders, whole");
    assert_eq!(h.len(), n);
    let bytes = postcard::to_allocvec(&Reply::Holders(h)).unwrap().len();
    assert!(bytes > frame::MAX_CLIENT_FRAME as usize, "{bytes} bytes");
    // The same for a queue: every holder now waits for the exclusive hold of another lock.
    let first = &sessions[0];
    let g = first.acquire("deep", Mode::Exclusive, WaitSpec::None).await;
    assert!(matches!(g, Ok(Acquired::Granted(_))), "{g:?}");
    let mut waits = Vec::new();
    for s in sessions.into_iter().skip(1) {
        let s = Arc::new(s);
        waits.push(tokio::spawn(async move {
            s.acquire("deep", Mode::Exclusive, WaitSpec::Forever).await
        }));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let q = client.waiters("deep").await.expect("the queue, whole");
        if q.len() == n - 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} waiters",
            q.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for w in waits {
        w.abort();
    }
    t.stop().await;
}

/// Over the real transport, every Raft request carries its sender's service settings: a
/// node started with another lock-delay refuses its peers' requests (answering with its
/// own settings, which the sender logs and keeps as the reason), never applies an entry,
/// never leads, while the two nodes that agree elect a leader and commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_other_settings_is_refused_over_tcp() {
    let base = common::temp_dir("tcp-settings");
    let three = common::bind_three().await;
    let members = three.members.clone();
    let addrs = three.addrs();
    let mut nodes = Vec::new();
    for (i, (r, c)) in three.listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let mut cfg = NodeConfig::new(id, base.join(format!("n{id}")));
        cfg.grace_ms = 200;
        if id == 3 {
            cfg.service.core.lock_delay = 100;
        }
        let node = Node::start(cfg, TcpNetwork::default()).await.unwrap();
        tokio::spawn(serve_raft(r, node.elector().clone()));
        tokio::spawn(serve_clients(c, node.clone()));
        nodes.push(node);
    }
    nodes[0].initialize(members).await.unwrap();
    let start = std::time::Instant::now();
    let l = loop {
        assert!(start.elapsed() < Duration::from_secs(10), "no leader");
        if let Some(l) = nodes[..2]
            .iter()
            .position(|n| n.raft.metrics().borrow().state == openraft::ServerState::Leader)
        {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let leader = nodes[l].clone();
    let client = Client::new(vec![addrs[l].client.clone()]);
    let s = client.open_session(10_000).await.expect("two nodes commit");
    assert!(matches!(
        s.acquire("job", Mode::Exclusive, WaitSpec::None).await,
        Ok(Acquired::Granted(_))
    ));
    // The leader heard node 3's answer, with the reason.
    let why = refusal_noted(&leader, 3).await;
    assert!(why.contains("--lock-delay-ms 0 here, 100 there"), "{why}");
    let n3 = &nodes[2];
    assert!(n3.elector().settings().refused.get() > 0);
    assert_eq!(n3.raft.metrics().borrow().last_applied, None);
    assert_ne!(
        n3.raft.metrics().borrow().state,
        openraft::ServerState::Leader
    );
    for n in &nodes {
        n.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// Every frame names its wire version, and a frame of another one is never decoded. A
/// node answers a Raft or client frame of another version with a frame holding only its
/// own version and closes; a node whose peer answers so names the versions as the
/// peer's refusal (what `add-learner` reports), and a client told so by a node fails
/// with the versions named, not a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_wire_version_is_named_not_misread() {
    let later = frame::PEER_WIRE + 1;
    // Node 3 is a later build: it answers every frame with its version, and closes.
    let base = common::temp_dir("tcp-wire");
    let three = common::bind_three().await;
    let members = three.members.clone();
    let addrs = three.addrs();
    let mut nodes = Vec::new();
    for (i, (r, c)) in three.listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        if id == 3 {
            tokio::spawn(answer_every_frame_with(r, frame::version_only(later)));
            continue;
        }
        let mut cfg = NodeConfig::new(id, base.join(format!("n{id}")));
        cfg.grace_ms = 200;
        let node = Node::start(cfg, TcpNetwork::default()).await.unwrap();
        tokio::spawn(serve_raft(r, node.elector().clone()));
        tokio::spawn(serve_clients(c, node.clone()));
        nodes.push(node);
    }
    nodes[0].initialize(members).await.unwrap();
    let start = std::time::Instant::now();
    let leader = loop {
        assert!(start.elapsed() < Duration::from_secs(10), "no leader");
        if let Some(l) = nodes
            .iter()
            .find(|n| n.raft.metrics().borrow().state == openraft::ServerState::Leader)
        {
            break l.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let why = refusal_noted(&leader, 3).await;
    assert!(
        why.contains(&format!(
            "node 3 speaks peer wire version {later}, this node {}",
            frame::PEER_WIRE
        )),
        "{why}"
    );
    // The other way: a frame of the later version at a node's Raft port and at its client
    // port is answered with the node's version only, then the connection closes.
    let mut frame_of_later = vec![0, 0, 0, 6];
    frame_of_later.extend(later.to_be_bytes());
    frame_of_later.extend([0, 0]);
    for (port, ours) in [
        (&addrs[0].raft, frame::PEER_WIRE),
        (&addrs[0].client, frame::CLIENT_WIRE),
    ] {
        let mut s = raw(port).await;
        s.write_all(&frame_of_later).await.unwrap();
        let mut got = [0u8; 8];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
            .await
            .expect("an answer")
            .unwrap();
        assert_eq!(got, frame::version_only(ours), "{port}");
        assert!(closed(&mut s).await, "{port}");
    }
    for n in &nodes {
        n.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// A client whose node answers in another client wire version fails with both versions
/// named (after its retries), not with a decoding error or a bare "connection lost".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_another_wire_version_is_told_the_nodes() {
    let later = frame::CLIENT_WIRE + 1;
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(answer_every_frame_with(l, frame::version_only(later)));
    let mut options = fencelock_server::client::ClientOptions::default();
    options.timeouts.retry_for = Duration::from_millis(500);
    let client = Client::with_options(vec![addr], options);
    match client.open_session(1_000).await {
        Err(ClientError::Unavailable(m)) => assert!(
            m.contains(&format!(
                "speaks wire version {later}, this build version {}",
                frame::CLIENT_WIRE
            )),
            "{m}"
        ),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("opened a session on a node of another wire version"),
    }
}

/// Accepts connections on `l` and answers each one's first frame with `answer`, then
/// closes it: a node of another wire version, as this build sees one.
async fn answer_every_frame_with(l: TcpListener, answer: [u8; 8]) {
    loop {
        let Ok((mut s, _)) = l.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let mut len = [0u8; 4];
            if s.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len).min(1 << 24) as usize];
            if s.read_exact(&mut body).await.is_ok() {
                let _ = s.write_all(&answer).await;
            }
        });
    }
}

/// Why `node` says node `id` refuses its Raft requests, once it has heard (at most 20 s).
async fn refusal_noted(node: &Node, id: u64) -> String {
    let start = std::time::Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no refusal noted"
        );
        if let Some(w) = node.elector().settings().refusal_by(id) {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A hold's watch (`Session::watch_hold`) ends when the hold does, while the session lives
/// on (no lease guard sees it): an administrator's forced release is pushed and ends it at
/// once (with no read due for an hour); with that push lost (held back by the proxy), a
/// read of the lock's holders ends it within a few reads. A hold that is still held does
/// not end its watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_watch_ends_when_the_hold_is_forced_out_pushed_or_not() {
    use fencelock_server::client::HoldEnded;
    let c = CutOff::start(Timeouts::default()).await;
    let every = Duration::from_millis(100);
    let first = take(&c.b, "job").await;
    // One read at once, then none for an hour: only the push can end this watch.
    let mut w = c.b.watch_hold("job", first, Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.ended_now(), None, "held: the first read says so");
    assert_eq!(
        c.direct.force_release(c.b.id(), "job").await.unwrap(),
        first
    );
    let end = tokio::time::timeout(Duration::from_secs(5), w.ended())
        .await
        .expect("the watch ends");
    assert_eq!(end, HoldEnded::Pushed(fencelock::ReleaseReason::Released));
    assert_eq!(w.ended_now(), Some(end));

    let second = take(&c.b, "job").await;
    assert!(second > first);
    let mut w = c.b.watch_hold("job", second, every);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(w.ended_now(), None, "held: several reads say so");
    c.proxy.set(|f| f.hold_pushes = true);
    assert_eq!(
        c.direct.force_release(c.b.id(), "job").await.unwrap(),
        second
    );
    let end = tokio::time::timeout(Duration::from_secs(5), w.ended())
        .await
        .expect("the watch ends without the push");
    assert_eq!(end, HoldEnded::NotAmongHolders);
    assert!(!c.b.is_lost(), "the session lives on");
    c.proxy.set(|f| f.hold_pushes = false);
    c.t.stop().await;
}
