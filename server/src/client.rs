//! The Rust client: connects to any node, follows redirects to the leader, retries with
//! the session's request numbers (so a retry after a leader crash is applied once),
//! receives `Granted` pushed on its connection (no polling), and re-attaches its sessions
//! after reconnecting.
//!
//! ```no_run
//! # async fn f() -> Result<(), fencelock_server::protocol::ClientError> {
//! use fencelock::Mode;
//! use fencelock_server::client::{Acquired, Client};
//! use fencelock_server::protocol::WaitSpec;
//! let client = Client::new(vec!["127.0.0.1:7101".into()]);
//! let session = client.open_session(5_000).await?;
//! if let Acquired::Granted(token) = session.acquire("jobs/reindex", Mode::Exclusive, WaitSpec::Forever).await? {
//!     // ... write to the resource with `token` ...
//!     session.release("jobs/reindex").await?;
//! }
//! session.close().await?;
//! # Ok(()) }
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{Holder, Mode, Output, SessionInfo, Token, Waiter};
use tokio::io::{BufReader, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{broadcast, oneshot, watch};

use crate::frame::{self, MAX_CLIENT_FRAME};
use crate::protocol::{ClientError, ClientFrame, Reply, Request, ServerFrame, WaitSpec};
use crate::types::NodeAddr;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Reply, ClientError>>>>>;

struct Conn {
    /// Requests are written by the caller itself (no writer task to wake: one hop less
    /// per request), one frame at a time.
    writer: tokio::sync::Mutex<BufWriter<OwnedWriteHalf>>,
    alive_tx: Arc<watch::Sender<bool>>,
    pending: Pending,
    alive: watch::Receiver<bool>,
    epoch: u64,
}

/// What an acquire ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The lock is held; carry this token with every action on the resource.
    Granted(Token),
    /// Try-lock found it taken.
    Busy,
    /// A timed wait ran out.
    TimedOut,
    /// The session ended (expired or closed) before a grant.
    SessionLost,
}

#[derive(Default)]
struct State {
    addrs: Vec<String>,
    preferred: Option<String>,
    rr: usize,
    conn: Option<Arc<Conn>>,
    epoch: u64,
    attached: HashSet<u64>,
    /// Latest lock event per (session, lock), set by pushes and replies.
    lock_events: HashMap<(u64, String), Acquired>,
    lost: HashSet<u64>,
}

struct Inner {
    st: Mutex<State>,
    ids: AtomicU64,
    changed: watch::Sender<u64>,
    pushes: broadcast::Sender<Output>,
    connect_lock: tokio::sync::Mutex<()>,
    /// How long one call keeps retrying before giving up.
    retry_for: Duration,
}

/// A connection to a fencelock cluster (cheap to clone; clones share the connection).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl Client {
    /// A client for the cluster whose nodes' client addresses are `addrs` (any subset; a
    /// follower redirects to the leader). Connects lazily. Cost: O(1), no I/O.
    pub fn new(addrs: Vec<String>) -> Client {
        let (changed, _) = watch::channel(0);
        let (pushes, _) = broadcast::channel(4096);
        Client {
            inner: Arc::new(Inner {
                st: Mutex::new(State {
                    addrs,
                    ..State::default()
                }),
                ids: AtomicU64::new(1),
                changed,
                pushes,
                connect_lock: tokio::sync::Mutex::new(()),
                retry_for: Duration::from_secs(15),
            }),
        }
    }

    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every output pushed to this client's sessions, as it arrives (a bounded broadcast of
    /// 4096: a receiver that falls further behind gets `Lagged`). Cost: O(1).
    pub fn subscribe(&self) -> broadcast::Receiver<Output> {
        self.inner.pushes.subscribe()
    }

    /// Whether the client has a live connection. Cost: O(1).
    fn connected(&self) -> bool {
        self.st().conn.as_ref().is_some_and(|c| *c.alive.borrow())
    }

    /// How many times this client has (re)connected. Cost: O(1).
    pub fn epoch(&self) -> u64 {
        self.st().epoch
    }

    fn note(&self, o: &Output) {
        let mut st = self.st();
        match o {
            Output::Granted {
                session,
                lock,
                token,
                ..
            } => {
                st.lock_events
                    .insert((session.0, lock.to_string()), Acquired::Granted(*token));
            }
            Output::WaitTimedOut { session, lock } => {
                st.lock_events
                    .insert((session.0, lock.to_string()), Acquired::TimedOut);
            }
            Output::Busy { session, lock } => {
                st.lock_events
                    .insert((session.0, lock.to_string()), Acquired::Busy);
            }
            Output::Released { session, lock, .. } | Output::WaitCancelled { session, lock } => {
                st.lock_events.remove(&(session.0, lock.to_string()));
            }
            Output::SessionExpired { session } | Output::SessionClosed { session } => {
                st.lost.insert(session.0);
                st.attached.remove(&session.0);
            }
            _ => {}
        }
        drop(st);
        self.inner.changed.send_modify(|v| *v += 1);
    }

    async fn connect(&self) -> Result<Arc<Conn>, ClientError> {
        let _g = self.inner.connect_lock.lock().await;
        if let Some(c) = self.st().conn.clone() {
            if *c.alive.borrow() {
                return Ok(c);
            }
        }
        let addr = {
            let mut st = self.st();
            match st.preferred.take() {
                Some(a) => a,
                None => {
                    if st.addrs.is_empty() {
                        return Err(ClientError::Unavailable("no addresses".into()));
                    }
                    st.rr = (st.rr + 1) % st.addrs.len();
                    st.addrs[st.rr].clone()
                }
            }
        };
        let sock = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(&addr))
            .await
            .map_err(|_| ClientError::Unavailable(format!("connect to {addr} timed out")))?
            .map_err(|e| ClientError::Unavailable(format!("connect to {addr}: {e}")))?;
        let _ = sock.set_nodelay(true);
        let (r, w) = sock.into_split();
        let pending: Pending = Arc::default();
        let (alive_tx, alive) = watch::channel(true);
        let alive_tx = Arc::new(alive_tx);
        let epoch = {
            let mut st = self.st();
            st.epoch += 1;
            st.epoch
        };
        let conn = Arc::new(Conn {
            writer: tokio::sync::Mutex::new(BufWriter::new(w)),
            alive_tx: alive_tx.clone(),
            pending: pending.clone(),
            alive,
            epoch,
        });
        let me = self.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(r);
            while let Ok(Some(f)) = frame::read::<_, ServerFrame>(&mut r, MAX_CLIENT_FRAME).await {
                match f {
                    ServerFrame::Reply { id, result } => {
                        let tx = pending
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&id);
                        if let Some(tx) = tx {
                            let _ = tx.send(result);
                        }
                    }
                    ServerFrame::Push(o) => {
                        me.note(&o);
                        let _ = me.inner.pushes.send(o);
                    }
                    ServerFrame::Malformed(_) => break,
                }
            }
            let _ = alive_tx.send(false);
            // Fail whatever is still waiting: the caller retries elsewhere.
            pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
            me.inner.changed.send_modify(|v| *v += 1);
        });
        // Renew every session at once on the new connection — after a leader change this
        // is the first chance to — which also re-attaches it (its pushes come here now).
        let sessions: Vec<u64> = self.st().attached.iter().copied().collect();
        for s in sessions {
            match self.send(&conn, Request::KeepAlive { session: s }).await {
                Ok(_) => {}
                // Gone (expired or closed meanwhile): nothing to re-attach.
                Err(ClientError::Core(e)) if e.kind == "unknown_session" => {
                    {
                        let mut st = self.st();
                        st.lost.insert(s);
                        st.attached.remove(&s);
                    }
                    self.inner.changed.send_modify(|v| *v += 1);
                }
                Err(e) => {
                    if let ClientError::NotLeader { leader } = &e {
                        self.st().preferred = leader.clone();
                    }
                    return Err(e);
                }
            }
        }
        self.st().conn = Some(conn.clone());
        Ok(conn)
    }

    async fn send(&self, conn: &Conn, req: Request) -> Result<Reply, ClientError> {
        // A membership change may wait for a learner to catch up (the node allows it 5
        // request timeouts, 15 s by default): wait longer than the node does.
        let wait = match req {
            Request::AddLearner { .. } | Request::SetVoters { .. } => Duration::from_secs(30),
            _ => Duration::from_secs(5),
        };
        let id = self.inner.ids.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        let written = {
            let mut w = conn.writer.lock().await;
            frame::write(&mut *w, &ClientFrame { id, req }).await
        };
        // The reader may have died (and cleared `pending`) before our id went in; then no
        // reply can come: fail now rather than after the reply timeout.
        if written.is_err() || !*conn.alive.borrow() {
            conn.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            let _ = conn.alive_tx.send(false);
            return Err(ClientError::Unavailable("connection closed".into()));
        }
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ClientError::Unavailable("connection lost".into())),
            Err(_) => Err(ClientError::Unavailable("no reply".into())),
        }
    }

    fn drop_conn(&self, epoch: u64) {
        let mut st = self.st();
        if st.conn.as_ref().is_some_and(|c| c.epoch == epoch) {
            st.conn = None;
        }
    }

    /// Sends `req`, following redirects and retrying on lost connections and
    /// unavailability for up to 15 s. Only send requests that are safe to repeat
    /// (reads, keep-alives, or writes carrying a request number).
    ///
    /// Errors: a core refusal or a bad request at once; `Unavailable` when retries ran out.
    pub async fn call(&self, req: Request) -> Result<Reply, ClientError> {
        let start = Instant::now();
        let mut last = ClientError::Unavailable("not tried".into());
        while start.elapsed() < self.inner.retry_for {
            let conn = match self.connect().await {
                Ok(c) => c,
                Err(e) => {
                    last = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match self.send(&conn, req.clone()).await {
                Ok(r) => {
                    if let Reply::Done { outputs, .. } = &r {
                        for o in outputs {
                            self.note(o);
                        }
                    }
                    return Ok(r);
                }
                Err(ClientError::NotLeader { leader }) => {
                    self.drop_conn(conn.epoch);
                    let known = leader.is_some();
                    self.st().preferred = leader.clone();
                    last = ClientError::NotLeader { leader };
                    if !known {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                Err(ClientError::Unavailable(m)) => {
                    self.drop_conn(conn.epoch);
                    last = ClientError::Unavailable(m);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Opens a session of `ttl_ms`, retrying on redirects and unavailability for up to
    /// 15 s. Every attempt carries the same random idempotency key, so a retry after an
    /// ambiguous failure (a reply lost with the leader) gets the session the first attempt
    /// opened rather than a second one.
    ///
    /// Errors: core errors (bad ttl, sessions full), `Unavailable`.
    pub async fn open_session(&self, ttl_ms: u64) -> Result<Session, ClientError> {
        let start = Instant::now();
        let key = fresh_key();
        loop {
            let conn = self.connect().await;
            let res = match conn {
                Ok(c) => {
                    let key = Some(key);
                    let r = self.send(&c, Request::Open { ttl_ms, key }).await;
                    if r.is_err() {
                        self.drop_conn(c.epoch);
                    }
                    r
                }
                Err(e) => Err(e),
            };
            match res {
                Ok(Reply::Done { outputs, .. }) => {
                    let id = outputs
                        .iter()
                        .find_map(|o| match o {
                            Output::SessionOpened { session, .. } => Some(session.0),
                            _ => None,
                        })
                        .ok_or_else(|| ClientError::Unavailable("no session opened".into()))?;
                    self.st().attached.insert(id);
                    return Ok(Session {
                        client: self.clone(),
                        id,
                        requests: tokio::sync::Mutex::new(0),
                    });
                }
                Ok(_) => return Err(ClientError::Unavailable("unexpected reply".into())),
                Err(ClientError::NotLeader { leader }) => {
                    if start.elapsed() > self.inner.retry_for {
                        return Err(ClientError::NotLeader { leader });
                    }
                    // No leader known (an election, or no quorum): wait before asking again,
                    // as `call` does, instead of reconnecting in a tight loop.
                    let known = leader.is_some();
                    self.st().preferred = leader;
                    if !known {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                Err(ClientError::Unavailable(m)) => {
                    if start.elapsed() > self.inner.retry_for {
                        return Err(ClientError::Unavailable(m));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Linearizable read of a lock's holders. Cost: one round trip plus a quorum
    /// confirmation on the leader.
    ///
    /// Errors: bad name, `Unavailable`.
    pub async fn holders(&self, lock: &str) -> Result<Vec<Holder>, ClientError> {
        match self.call(Request::Holders { lock: lock.into() }).await? {
            Reply::Holders(h) => Ok(h),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// Linearizable read of a lock's queue, head first. Cost: as [`Client::holders`].
    ///
    /// Errors: bad name, `Unavailable`.
    pub async fn waiters(&self, lock: &str) -> Result<Vec<Waiter>, ClientError> {
        match self.call(Request::Waiters { lock: lock.into() }).await? {
            Reply::Waiters(w) => Ok(w),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// Linearizable read of a session's state. Cost: as [`Client::holders`].
    ///
    /// Errors: `Unavailable`.
    pub async fn session_info(&self, session: u64) -> Result<Option<SessionInfo>, ClientError> {
        match self.call(Request::Session { session }).await? {
            Reply::Session(s) => Ok(s),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// Linearizable read of the cluster's members: `(voters, learners)`, each by id.
    /// Cost: as [`Client::holders`].
    ///
    /// Errors: `Unavailable`.
    pub async fn members(&self) -> Result<Members, ClientError> {
        match self.call(Request::Members).await? {
            Reply::Members { voters, learners } => Ok((voters, learners)),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// Adds node `id` (listening on `addr`) as a learner and waits until it has caught up
    /// with the log; then [`Client::set_voters`] can make it a voter. Safe to retry.
    /// Cost: one membership entry, plus the learner's catch-up (log or snapshot).
    ///
    /// Errors: `BadRequest` (the change is not allowed, a bad address), `Unavailable`.
    pub async fn add_learner(&self, id: u64, addr: NodeAddr) -> Result<(), ClientError> {
        self.call(Request::AddLearner { id, addr })
            .await
            .map(|_| ())
    }

    /// Makes exactly `voters` the voting members (members left out are removed). Runs
    /// through joint consensus: safe at every step, and safe to retry. Cost: two
    /// membership entries.
    ///
    /// Errors: `BadRequest` (an id that is not a member, an empty set), `Unavailable`.
    pub async fn set_voters(&self, voters: Vec<u64>) -> Result<(), ClientError> {
        self.call(Request::SetVoters { voters }).await.map(|_| ())
    }
}

/// A random 64-bit key (from the standard library's per-process random hasher keys, the
/// time and a counter): unique per open with overwhelming probability.
fn fresh_key() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// The cluster's members: voters and learners, each `(id, addresses)`.
pub type Members = (Vec<(u64, NodeAddr)>, Vec<(u64, NodeAddr)>);

/// An open session. Its lock requests are numbered 1, 2, 3… and sent one at a time, so a
/// retry of the latest is replayed by the core instead of applied twice.
pub struct Session {
    client: Client,
    id: u64,
    requests: tokio::sync::Mutex<u64>,
}

impl Session {
    /// The session id. Cost: O(1).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The client it belongs to. Cost: O(1).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// True once the service said this session expired or closed. Cost: O(1).
    pub fn is_lost(&self) -> bool {
        self.client.st().lost.contains(&self.id)
    }

    /// Renews the session; returns its new deadline (logical ms). Cost: one replicated
    /// write (a log entry).
    ///
    /// Errors: `Core(unknown_session)` if it is gone; `Unavailable`.
    pub async fn keep_alive(&self) -> Result<u64, ClientError> {
        match self
            .client
            .call(Request::KeepAlive { session: self.id })
            .await?
        {
            Reply::Done { outputs, .. } => outputs
                .iter()
                .find_map(|o| match o {
                    Output::SessionRenewed { expires_at, .. } => Some(expires_at.0),
                    _ => None,
                })
                .ok_or_else(|| ClientError::Unavailable("no renewal".into())),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    async fn numbered(&self, make: impl Fn(u64) -> Request) -> Result<Reply, ClientError> {
        let mut n = self.requests.lock().await;
        *n += 1;
        self.client.call(make(*n)).await
    }

    /// Acquires `lock`. With a waiting `wait`, returns once the `Granted` push arrives (or
    /// the wait times out / the session ends). After a reconnect the pushes in between may
    /// be lost, so it then checks the holders once with a linearizable read.
    ///
    /// Errors: core refusals (already queued, mode mismatch, capacity…), `Unavailable`.
    pub async fn acquire(
        &self,
        lock: &str,
        mode: Mode,
        wait: WaitSpec,
    ) -> Result<Acquired, ClientError> {
        let key = (self.id, lock.to_string());
        self.client.st().lock_events.remove(&key);
        let mut changed = self.client.inner.changed.subscribe();
        let epoch0 = self.client.epoch();
        let reply = self
            .numbered(|n| Request::Acquire {
                session: self.id,
                lock: lock.into(),
                mode,
                wait,
                request: Some(n),
            })
            .await?;
        let Reply::Done { .. } = reply else {
            return Err(ClientError::Unavailable("unexpected reply".into()));
        };
        let mut checked_epoch = epoch0;
        loop {
            {
                let st = self.client.st();
                if let Some(ev) = st.lock_events.get(&key) {
                    return Ok(*ev);
                }
                if st.lost.contains(&self.id) {
                    return Ok(Acquired::SessionLost);
                }
            }
            let epoch = self.client.epoch();
            if epoch != checked_epoch {
                // Reconnected: pushes may have been missed. One linearizable check — of
                // the queue first, then the holders: a grant between the two reads then
                // shows in the second (holders first would miss it and report a wait that
                // ended, leaving a granted lock behind).
                checked_epoch = epoch;
                let queued = self
                    .client
                    .waiters(lock)
                    .await?
                    .iter()
                    .any(|w| w.session.0 == self.id);
                if queued {
                    // Still waiting; the re-attached connection gets the grant's push.
                    continue;
                }
                if let Some(h) = self
                    .client
                    .holders(lock)
                    .await?
                    .into_iter()
                    .find(|h| h.session.0 == self.id)
                {
                    return Ok(Acquired::Granted(h.token));
                }
                let alive = self.client.session_info(self.id).await?.is_some();
                return Ok(if alive {
                    Acquired::TimedOut
                } else {
                    Acquired::SessionLost
                });
            }
            // The connection died (a node restart, or the node cut it off for falling
            // behind on pushes): reconnect now rather than wait for the next request, so
            // the check above runs and a grant pushed meanwhile is not waited for forever.
            if !self.client.connected() && self.client.connect().await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            // Wake on any push or on a connection change; the timeout only re-checks the
            // connection epoch (no request is sent unless it changed).
            let _ = tokio::time::timeout(Duration::from_millis(500), changed.changed()).await;
        }
    }

    /// Releases `lock`. Cost: one replicated write.
    ///
    /// Errors: `Core(not_holder)` (for example after the session expired), `Unavailable`.
    pub async fn release(&self, lock: &str) -> Result<(), ClientError> {
        self.numbered(|n| Request::Release {
            session: self.id,
            lock: lock.into(),
            request: Some(n),
        })
        .await
        .map(|_| ())
    }

    /// Withdraws a queued acquire. Cost: one replicated write.
    ///
    /// Errors: `Core(not_queued)`, `Unavailable`.
    pub async fn cancel(&self, lock: &str) -> Result<(), ClientError> {
        self.numbered(|n| Request::Cancel {
            session: self.id,
            lock: lock.into(),
            request: Some(n),
        })
        .await
        .map(|_| ())
    }

    /// Closes the session, releasing everything it holds. A retry that finds the session
    /// already gone counts as done.
    ///
    /// Errors: `Unavailable`.
    pub async fn close(&self) -> Result<(), ClientError> {
        let r = self
            .numbered(|n| Request::Close {
                session: self.id,
                request: Some(n),
            })
            .await;
        self.client.st().attached.remove(&self.id);
        match r {
            Ok(_) => Ok(()),
            Err(ClientError::Core(e)) if e.kind == "unknown_session" => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Keeps a session alive in the background and tracks the lease with the core's
/// [`SessionKeeper`](fencelock::SessionKeeper): the holder may act only while
/// [`LeaseGuard::may_act`] is true (until `last acknowledged send + ttl − margin`).
pub struct LeaseGuard {
    keeper: Arc<Mutex<fencelock::SessionKeeper>>,
    origin: Instant,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseGuard {
    /// Starts heartbeating `session` every `interval_ms`. `opened_at` is when the open
    /// request was sent (its success is the first acknowledged heartbeat).
    ///
    /// Errors: [`fencelock::Error::BadConfig`] unless `0 < interval < ttl − margin`.
    pub fn start(
        session: Arc<Session>,
        ttl_ms: u64,
        interval_ms: u64,
        margin_ms: u64,
        opened_at: Instant,
    ) -> Result<LeaseGuard, fencelock::Error> {
        let mut k = fencelock::SessionKeeper::new(ttl_ms, interval_ms, margin_ms)?;
        k.heartbeat_sent(0)?;
        k.heartbeat_acked(0)?;
        let keeper = Arc::new(Mutex::new(k));
        let origin = opened_at;
        let kk = keeper.clone();
        let task = tokio::spawn(async move {
            let ms = |i: Instant| i.saturating_duration_since(origin).as_millis() as u64;
            loop {
                let due = {
                    let k = kk.lock().unwrap_or_else(|p| p.into_inner());
                    k.heartbeat_due(ms(Instant::now()))
                };
                let now = ms(Instant::now());
                if due > now {
                    tokio::time::sleep(Duration::from_millis(due - now)).await;
                }
                let sent = ms(Instant::now());
                if kk
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .heartbeat_sent(sent)
                    .is_err()
                {
                    continue;
                }
                match session.keep_alive().await {
                    Ok(_) => {
                        let _ = kk
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .heartbeat_acked(sent);
                    }
                    Err(ClientError::Core(e)) if e.kind == "unknown_session" => {
                        kk.lock().unwrap_or_else(|p| p.into_inner()).session_lost();
                        return;
                    }
                    Err(_) => {}
                }
                if session.is_lost() {
                    kk.lock().unwrap_or_else(|p| p.into_inner()).session_lost();
                    return;
                }
            }
        });
        Ok(LeaseGuard {
            keeper,
            origin,
            task,
        })
    }

    /// The lease now, by this process's monotonic clock. Cost: O(1).
    pub fn lease(&self) -> fencelock::Lease {
        let now = Instant::now()
            .saturating_duration_since(self.origin)
            .as_millis() as u64;
        self.keeper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lease(now)
    }

    /// True only while the lease is certainly valid. Cost: O(1).
    pub fn may_act(&self) -> bool {
        matches!(self.lease(), fencelock::Lease::Safe { .. })
    }

    /// Marks the session lost (the service said so). Cost: O(1).
    pub fn session_lost(&self) {
        self.keeper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .session_lost();
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}
