//! The Rust client: connects to any node, follows redirects to the leader, retries with
//! the session's request numbers (so a retry after a leader crash is applied once),
//! receives `Granted` (and a watch's `HolderChanged`) pushed on its connection (no
//! polling), and re-attaches its sessions after reconnecting.
//!
//! # Request numbers
//!
//! A [`Session`] numbers its acquires, releases, cancels, watches and unwatches 1, 2, 3…
//! and sends them one at
//! a time: the next waits until the previous one's outcome is known — for an acquire that
//! queued, until it is granted, its wait ends or the session ends. A retry (after a lost
//! connection, a timeout or a redirect to a new leader) repeats the request's own number,
//! and the core answers a repeat of a session's latest number without applying it twice
//! ([`fencelock::Reply`]): so a retry is always of the session's latest number, never
//! refused as stale. In particular a queued acquire that lost its connection repeats its
//! number once reconnected, and the core's answer — `Granted` (a grant pushed while the
//! client was away), `Queued` with the current position (still waiting), `WaitEnded`,
//! `HoldEnded` — is the outcome; the client never infers it from reads. Keep-alives and
//! closes carry no number (applying either twice is harmless, and neither waits for a
//! pending acquire: closing a session ends its waiting acquire). To do other numbered
//! requests on a session while an acquire waits, drop the acquire's future first (say, in
//! `tokio::select!`), then [`Session::cancel`] its wait; or use one session per task.
//!
//! # A request whose answer never came
//!
//! A numbered request can end without the core's answer: its future is dropped, or it
//! fails with an error that leaves its outcome unknown (`Unavailable`, `NotLeader`) after
//! the retry period. An acquire in that state may have left a wait in the queue, or a
//! hold granted since, that no call returned; a watch in that state, a watch. The session
//! settles it before its next numbered request:
//!
//! - the same request again (for an acquire: the same lock, mode and wait) is the retry:
//!   it repeats the first attempt's number, and the core's answer to it is the outcome —
//!   the first attempt's, so a timed wait keeps its first deadline and a try-lock that was
//!   answered `Busy` is `Busy` again;
//! - any other request first repeats the unsettled acquire or watch with its own number
//!   (applied at most once, so this gives its outcome), then withdraws what it left that
//!   the caller never saw — cancels the wait, releases the hold (a hold whose token an
//!   acquire of this handle returned is the caller's and is kept), ends the watch — and
//!   only then is sent. [`Session::cancel`] of a dropped acquire's lock, and
//!   [`Session::unwatch`] of a dropped watch's, is that withdrawal: it answers `Ok`.
//! - a request none of whose frames went out (dropped or failed while connecting) is
//!   forgotten: no node can have it.
//!
//! If the settling cannot finish (no leader in time), the new request is not sent and
//! returns that error (`Unavailable` or `NotLeader`, of the repeat, the reads or the
//! withdrawal); the next one tries again, and the same request is still the retry until it
//! is settled: a withdrawal sent, or its outcome learned by a repeat that leaves nothing
//! to withdraw (here, or in the background, below). A release, cancel or unwatch whose
//! answer was lost needs nothing: applied or not, it left nothing behind.
//!
//! A session that makes no further numbered request is settled in the background: when
//! none has begun [`Timeouts::settle_after`] after an acquire or watch was left
//! unsettled (5 s by default, never less than 100 ms), the client settles it as the next
//! request would have — so an acquire abandoned by dropping its future, or given up
//! after `Unavailable`, does not leave a wait or a hold that blocks others until the
//! session ends. It tries up to four times, `settle_after` apart, and then leaves it to
//! the next request. A numbered request that begins meanwhile stops it and settles (or
//! retries) itself, so a `select!` loop that drops and re-makes the same acquire keeps
//! its place in the queue. Once the background has settled it, the same acquire again is
//! a new one (a try-lock once answered `Busy` may now be granted; a timed wait has a new
//! deadline). A cancel or unwatch of that lock, if it is the next numbered request after
//! a background withdrawal, answers `Ok`, as it would had it withdrawn it itself. A
//! release, cancel or unwatch whose answer was lost is left as it is (the same call
//! again is its retry). Closing or dropping the [`Session`] stops the background
//! settling, and none is started when the future is dropped outside a tokio runtime.
//!
//! A numbered call that settles makes about five requests in turn (the repeat, two
//! reads, a withdrawal, its own; a few more if the wait is granted or ends meanwhile),
//! each retried for up to the client's `retry_for`. A repeat refused by the node rather
//! than the core (a token no longer allowed, a limit) cannot be settled: it is
//! forgotten, and what the first attempt left stays until the session ends. After a
//! withdrawal, the next acquire of that lock takes its outcome from the core's answers
//! only (until a wait of it ends): a push about the withdrawn claim may still be on its
//! way.
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{Holder, Mode, Output, Permits, SessionInfo, Token, Waiter};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, oneshot, watch};

use crate::auth::{OpenKey, Principal, SessionSecret};
use crate::frame::{self, MAX_CLIENT_FRAME, MAX_SERVER_FRAME};
use crate::protocol::{
    ClientError, ClientFrame, ListedSession, Reply, Request, ServerFrame, SessionsPage, WaitSpec,
};
use crate::types::NodeAddr;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Reply, ClientError>>>>>;

/// The largest backup [`Client::backup`] collects by default (1 GiB, `fencelock-node
/// snapshot save`'s default limit): a backup said to be larger is refused before its pages
/// are taken. [`Client::backup_within`] takes another limit.
pub const MAX_BACKUP_BYTES: u64 = 1 << 30;

/// How long one backup or export page is waited for, at least (a longer
/// [`Timeouts::reply`] stands): the leader builds each page after waiting for its rebuild
/// turn (`NodeConfig::rebuild_turn_wait_ms`, 30 s by default), then rebuilds the state
/// from its snapshot and log.
pub const PAGE_REPLY_TIME: Duration = Duration::from_secs(60);

type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;
type BoxRead = Box<dyn AsyncRead + Send + Unpin>;

struct Conn {
    /// Requests are written by the caller itself (no writer task to wake: one hop less
    /// per request), one frame at a time.
    writer: tokio::sync::Mutex<BufWriter<BoxWrite>>,
    alive_tx: Arc<watch::Sender<bool>>,
    pending: Pending,
    alive: watch::Receiver<bool>,
    epoch: u64,
    /// The task reading the connection. Aborted when the connection is dropped
    /// ([`Conn::close`], or the last handle going): dropping the write half alone does
    /// not close a TLS stream (`tokio::io::split`), and its reader would go on taking
    /// the old node's pushes.
    reader: tokio::task::AbortHandle,
}

impl Conn {
    /// Closes the connection for good: its reader stops (so the stream closes once the
    /// last handle is gone), and requests still waiting on it fail at once (their callers
    /// retry on another connection). Cost: O(requests pending).
    fn close(&self) {
        self.reader.abort();
        let _ = self.alive_tx.send(false);
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A read of a session's hold in flight, owned by a [`HoldWatch`]'s task.
type HoldRead = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Option<Holder>, ClientError>> + Send>,
>;

/// How a hold watched by a [`HoldWatch`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldEnded {
    /// Its `Released` event was pushed, with the reason: `Released` for an
    /// administrator's forced release (a session's own release is answered, never
    /// pushed), `Closed` or `Expired` for the session's end.
    Pushed(fencelock::ReleaseReason),
    /// A read of the session's hold no longer finds it: it ended and its push was lost
    /// (a dropped connection, a leader that died before sending it).
    NotAmongHolders,
    /// The session was lost (the service said it expired or closed).
    SessionLost,
    /// The watch itself stopped before it saw the hold end (not expected: its task
    /// failed). The hold can no longer be vouched for: treat it as ended.
    Unknown,
}

/// Watches one hold of a session ([`Session::watch_hold`]); stops when dropped.
#[derive(Debug)]
pub struct HoldWatch {
    ended: watch::Receiver<Option<HoldEnded>>,
    task: tokio::task::AbortHandle,
}

impl HoldWatch {
    /// How the hold ended, once the watch knows; `None` while it may still be held.
    /// Cost: O(1).
    pub fn ended_now(&self) -> Option<HoldEnded> {
        *self.ended.borrow()
    }

    /// Resolves when the hold has ended, saying how. Cancel-safe (a `select!` arm);
    /// after it resolved it resolves again at once, with the same answer.
    pub async fn ended(&mut self) -> HoldEnded {
        match self.ended.wait_for(Option::is_some).await {
            Ok(end) => end.unwrap_or(HoldEnded::Unknown),
            // The task is gone without a word (it panicked): nothing vouches for the hold.
            Err(_) => HoldEnded::Unknown,
        }
    }
}

impl Drop for HoldWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What an acquire ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The lock is held; carry this token with every action on the resource.
    Granted(Token),
    /// Try-lock (or a deadline already passed) found it taken; nothing was queued.
    Busy,
    /// A timed wait ran out without a grant (a `WaitTimedOut` push).
    TimedOut,
    /// The wait is over and nothing of it is held, learned after a reconnect (the core's
    /// `WaitEnded` answer to the acquire's repeat): it timed out, or it was granted while
    /// the client was away and that hold has ended since (an operator's forced release).
    /// Either way the lock is not held; the session lives on.
    WaitEnded,
    /// The acquire was granted this token while the client was away, and that hold has
    /// already ended (the core's `HoldEnded` answer to the acquire's repeat): the token is
    /// no longer good.
    HoldEnded(Token),
    /// The session ended (expired or closed) before a grant.
    SessionLost,
}

#[derive(Default)]
struct State {
    addrs: Vec<String>,
    preferred: Option<String>,
    rr: usize,
    conn: Option<Arc<Conn>>,
    /// The epoch of the newest connection (made or being made).
    epoch: u64,
    /// The newest epoch whose connection was dropped: nothing it carries is taken.
    dropped: u64,
    /// Sessions to re-attach after a reconnect, with their credentials.
    attached: HashMap<u64, SessionSecret>,
    /// Latest lock event per (session, lock), set by pushes for the pairs in `awaiting`
    /// only, so it holds at most one entry per acquire in flight (a node pushing grants of
    /// a million names for a session grows nothing).
    lock_events: HashMap<(u64, String), Acquired>,
    /// The (session, lock) pairs an acquire is waiting on, with how many acquires wait
    /// on each ([`Session::acquire_as`] adds and removes itself).
    awaiting: HashMap<(u64, String), usize>,
    lost: HashSet<u64>,
    /// Sessions a [`Session`] handle of this client exists for: only their lock events
    /// and ends are kept (a dropped session's late pushes leave nothing behind).
    handles: HashSet<u64>,
}

/// Whether a plain-TCP connection (no TLS) may go to `peer`: only on this machine, a
/// loopback address, as a node serves plain TCP only there. Cost: O(1).
fn plaintext_allowed(peer: std::net::SocketAddr) -> bool {
    // `::ffff:127.0.0.1`, an IPv4 loopback address as a dual-stack socket reports it,
    // is one too.
    peer.ip().to_canonical().is_loopback()
}

/// How a [`Client`] connects and authenticates.
#[derive(Clone, Default)]
pub struct ClientOptions {
    /// The bearer token presented on every connection before anything else
    /// ([`Request::Authenticate`]); `None` for a cluster without tokens.
    pub token: Option<String>,
    /// TLS: nodes are verified with this configuration (see [`crate::tls::client_config`])
    /// for the host part of the address dialled; `None`: plain TCP.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// How long connects, replies and retries may take ([`Timeouts::for_ttl`] derives
    /// them from a session's ttl).
    pub timeouts: Timeouts,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("token", &self.token.as_ref().map(|_| ".."))
            .field("tls", &self.tls.is_some())
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

struct Inner {
    options: ClientOptions,
    st: Mutex<State>,
    ids: AtomicU64,
    changed: watch::Sender<u64>,
    pushes: broadcast::Sender<Output>,
    connect_lock: tokio::sync::Mutex<()>,
    /// The connection (its epoch) a live leader last answered a waiting acquire's probe
    /// on, and when ([`Client::leads`]): one probe a reply timeout serves every acquire
    /// waiting on that connection.
    probed: tokio::sync::Mutex<Option<(u64, Instant)>>,
    /// How long one call keeps retrying before giving up.
    retry_for: Duration,
    /// How long one TCP connect may take.
    connect_timeout: Duration,
    /// How long one attempt waits for its reply (membership changes wait longer).
    reply_timeout: Duration,
    /// How long an unanswered numbered request waits before it is settled in the
    /// background ([`Timeouts::settle_after`]).
    settle_after: Duration,
}

/// How long a [`Client`] waits. [`Timeouts::default`] is 2 s per connect, 5 s per reply,
/// 15 s of retries, and 5 s before an unanswered acquire or watch is settled in the
/// background; [`Timeouts::for_ttl`] derives them from a session's ttl so that a request
/// never waits longer than the lease can survive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// How long one TCP connect to a node may take before the next node is tried; with
    /// TLS, its handshake is given as long again (and 5 s at most), so a node that accepts
    /// and never answers (a stopped process's backlog) costs no more.
    pub connect: Duration,
    /// How long one attempt waits for its reply before the connection is dropped and the
    /// request retried (elsewhere, if the node is gone). Membership changes wait 30 s, and
    /// backup and export pages at least [`PAGE_REPLY_TIME`].
    pub reply: Duration,
    /// How long one call keeps retrying (redirects, lost connections, `Unavailable`)
    /// before it fails with the last error. Checked before each attempt, so a call can
    /// take up to `retry_for` plus one attempt (a call that waits for another call's
    /// connect waits no longer than its own `retry_for`), and an attempt on a new connection is
    /// more than `connect + reply`: the connect (`connect`), a TLS handshake (at most
    /// `connect`), the token's answer (`reply`), each attached session's re-attaching
    /// keep-alive (`reply` each), then the request (`reply`) — with a token and one
    /// session, about `retry_for + 2·connect + 3·reply`. (A lease guard times the lease
    /// from acknowledged sends, so a slow call costs time, not safety.) A session's numbered request that first
    /// settles an earlier one makes up to five such calls in turn (see the module docs).
    pub retry_for: Duration,
    /// How long a session waits, after an acquire or watch ended without the core's
    /// answer (its future dropped, or an error that leaves its outcome unknown), for its
    /// next numbered request — which settles it, or is its retry — before the client
    /// settles it in the background (see the module docs). At least 100 ms is waited
    /// whatever this says; a very long time (an hour) leaves settling to the next request
    /// alone.
    pub settle_after: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(2),
            reply: Duration::from_secs(5),
            retry_for: Duration::from_secs(15),
            settle_after: Duration::from_secs(5),
        }
    }
}

impl Timeouts {
    /// Timeouts for a client whose sessions have `ttl_ms`: retries for at most the ttl (a
    /// keep-alive that cannot get through in a ttl is too late anyway), each reply awaited
    /// for at most a quarter of it (the keep-alive interval the CLI uses, capped at 5 s), so
    /// a stalled node is given up on while the lease can still be kept alive through
    /// another one, and a connect for at most a quarter of it (capped at 2 s); an
    /// unanswered acquire or watch is settled in the background after a quarter of it too
    /// (capped at 5 s; at least 100 ms), so what it left is usually gone within a fraction
    /// of the ttl rather than held while the session lives. Never below 1 ms. Cost: O(1).
    pub fn for_ttl(ttl_ms: u64) -> Timeouts {
        let quarter = Duration::from_millis((ttl_ms / 4).max(1));
        Timeouts {
            connect: quarter.min(Duration::from_secs(2)),
            reply: quarter.min(Duration::from_secs(5)),
            retry_for: Duration::from_millis(ttl_ms.max(1)),
            settle_after: quarter.min(Duration::from_secs(5)),
        }
    }
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
        Client::with_options(addrs, ClientOptions::default())
    }

    /// [`Client::new`] with its own [`Timeouts`] (plain TCP, no token). Cost: O(1), no I/O.
    pub fn with_timeouts(addrs: Vec<String>, timeouts: Timeouts) -> Client {
        Client::with_options(
            addrs,
            ClientOptions {
                timeouts,
                ..ClientOptions::default()
            },
        )
    }

    /// [`Client::new`] with a token, TLS and timeouts ([`ClientOptions`]). Cost: O(1), no
    /// I/O.
    pub fn with_options(addrs: Vec<String>, options: ClientOptions) -> Client {
        let timeouts = options.timeouts;
        let (changed, _) = watch::channel(0);
        let (pushes, _) = broadcast::channel(4096);
        Client {
            inner: Arc::new(Inner {
                options,
                st: Mutex::new(State {
                    addrs,
                    ..State::default()
                }),
                ids: AtomicU64::new(1),
                changed,
                pushes,
                connect_lock: tokio::sync::Mutex::new(()),
                probed: tokio::sync::Mutex::new(None),
                retry_for: timeouts.retry_for,
                connect_timeout: timeouts.connect,
                reply_timeout: timeouts.reply,
                settle_after: timeouts.settle_after,
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

    /// Records an event pushed on the connection of `epoch` for the acquires waiting on it,
    /// and hands it to [`Client::subscribe`]rs — only if that connection is the current
    /// one. A connection that was dropped (a redirect, a timeout, a node that said it is
    /// unavailable) may still deliver what its node pushes later, such as a deposed leader
    /// applying entries late: those events are old, and taken they could complete a later
    /// acquire of the same lock with a stale token. Cost: O(1).
    fn note(&self, o: Output, epoch: u64) {
        let mut st = self.st();
        if epoch != st.epoch || epoch <= st.dropped {
            return;
        }
        let kept = st.handles.contains(&o.session().0);
        match &o {
            _ if !kept => {}
            Output::Granted {
                session,
                lock,
                token,
                ..
            } => {
                let key = (session.0, lock.to_string());
                if st.awaiting.contains_key(&key) {
                    st.lock_events.insert(key, Acquired::Granted(*token));
                }
            }
            Output::WaitTimedOut { session, lock } => {
                let key = (session.0, lock.to_string());
                if st.awaiting.contains_key(&key) {
                    st.lock_events.insert(key, Acquired::TimedOut);
                }
            }
            Output::Released {
                session,
                lock,
                token,
                ..
            } => {
                // The end of a grant an acquire has not taken yet (both pushes read in one
                // go: an administrator's forced release right after the grant) is that
                // acquire's outcome: the hold it was granted ended. Dropping the grant
                // would leave the acquire waiting for a push that never comes.
                // Another hold's end (an earlier one) changes no pending outcome.
                let key = (session.0, lock.to_string());
                if st.lock_events.get(&key) == Some(&Acquired::Granted(*token)) {
                    st.lock_events.insert(key, Acquired::HoldEnded(*token));
                }
            }
            Output::SessionExpired { session } => {
                st.lost.insert(session.0);
                st.attached.remove(&session.0);
            }
            _ => {}
        }
        // Under the state lock: a connection dropped meanwhile hands on nothing more.
        let _ = self.inner.pushes.send(o);
        drop(st);
        self.inner.changed.send_modify(|v| *v += 1);
    }

    /// Records that `session` ended (the service said it is closed or unknown).
    fn lose(&self, session: u64) {
        {
            let mut st = self.st();
            if st.handles.contains(&session) {
                st.lost.insert(session);
            }
            st.attached.remove(&session);
        }
        self.inner.changed.send_modify(|v| *v += 1);
    }

    /// The live connection, or a new one to the next node. One caller connects at a time;
    /// the others wait for it, until `deadline` (the end of their own retry period: a
    /// connect that hangs must not hold every caller behind it past theirs).
    ///
    /// Errors: `Unavailable` (no connection, or `deadline` passed while another caller
    /// connected), the connect's own (`Unauthenticated`, `Forbidden`, `BadRequest`), and
    /// `NotLeader` from a re-attaching keep-alive (its hint is then the next address).
    async fn connect(&self, deadline: Instant) -> Result<Arc<Conn>, ClientError> {
        let Ok(_g) = tokio::time::timeout_at(deadline.into(), self.inner.connect_lock.lock()).await
        else {
            return Err(ClientError::Unavailable(
                "another call's connect took the rest of the retry time".into(),
            ));
        };
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
                    // The next address in turn, the first one first.
                    let a = st.addrs[st.rr % st.addrs.len()].clone();
                    st.rr = (st.rr + 1) % st.addrs.len();
                    a
                }
            }
        };
        let sock = dial(&addr, self.inner.connect_timeout).await?;
        let (r, w): (BoxRead, BoxWrite) = match &self.inner.options.tls {
            None => {
                // Plain TCP is for a cluster on one machine: the token and every session's
                // credential would cross any other link in the clear (an address given by
                // mistake, a node's redirect, a member's address from `status`).
                let peer = sock
                    .peer_addr()
                    .map_err(|e| ClientError::Unavailable(format!("connect to {addr}: {e}")))?;
                if !plaintext_allowed(peer) {
                    return Err(ClientError::BadRequest(format!(
                        "{addr} ({peer}) is not a loopback address: plain TCP (no TLS) \
                         connects only on this machine; give the cluster's CA to use TLS"
                    )));
                }
                let (r, w) = sock.into_split();
                (Box::new(r), Box::new(w))
            }
            Some(cfg) => {
                let name = crate::tls::server_name(&addr).map_err(ClientError::BadRequest)?;
                let connect = tokio_rustls::TlsConnector::from(cfg.clone()).connect(name, sock);
                let limit = self
                    .inner
                    .connect_timeout
                    .min(crate::tls::HANDSHAKE_TIMEOUT);
                let t = tokio::time::timeout(limit, connect)
                    .await
                    .map_err(|_| ClientError::Unavailable(format!("TLS to {addr} timed out")))?
                    .map_err(|e| ClientError::Unavailable(format!("TLS to {addr}: {e}")))?;
                let (r, w) = tokio::io::split(t);
                (Box::new(r), Box::new(w))
            }
        };
        let pending: Pending = Arc::default();
        let (alive_tx, alive) = watch::channel(true);
        let alive_tx = Arc::new(alive_tx);
        let epoch = {
            let mut st = self.st();
            st.epoch += 1;
            st.epoch
        };
        // The reader holds the client weakly: a strong handle here would keep the client
        // (and through it this connection) alive for as long as the node keeps the
        // connection open, after the program dropped every handle of its own.
        let me = Arc::downgrade(&self.inner);
        let reader_pending = pending.clone();
        let reader_alive = alive_tx.clone();
        let reader = tokio::spawn(async move {
            let (pending, alive_tx) = (reader_pending, reader_alive);
            let mut r = BufReader::new(r);
            // What the node said as it ended the connection, if anything: the answer of
            // every request still waiting on it.
            let ended: Option<String> = loop {
                let f = match frame::read::<_, ServerFrame>(&mut r, MAX_SERVER_FRAME).await {
                    Ok(Some(f)) => f,
                    Ok(None) => break None,
                    Err(e) => {
                        break frame::other_version(&e).map(|v| {
                            tracing::warn!("a node answered in another client wire format: {v}");
                            v.to_string()
                        })
                    }
                };
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
                    ServerFrame::Push(o) => match me.upgrade() {
                        Some(inner) => Client { inner }.note(o, epoch),
                        None => break None,
                    },
                    ServerFrame::Malformed(why) => {
                        // The node drops the connection; what it said is the only trace
                        // of why (a limit of its own below this client's, a request an
                        // older node cannot read).
                        let why: String = why.chars().take(200).collect();
                        tracing::warn!("a node refused a request as malformed: {why:?}");
                        break Some(format!("a node refused a request as malformed: {why:?}"));
                    }
                }
            };
            // Fail whatever is still waiting: the caller retries elsewhere. A node of
            // another wire version, or one that refused a request as malformed, is named
            // (it will refuse the same again): an answer of the node's, which the caller's
            // backoff counts, where a connection merely lost is not. Answered before the
            // connection is marked dead, so a sender that sees it dead finds the answer
            // already there (`send`).
            let waiting = std::mem::take(&mut *pending.lock().unwrap_or_else(|p| p.into_inner()));
            for (_, tx) in waiting {
                if let Some(v) = &ended {
                    let _ = tx.send(Err(ClientError::Unavailable(v.clone())));
                } // else dropped: "connection lost"
            }
            let _ = alive_tx.send(false);
            if let Some(inner) = me.upgrade() {
                inner.changed.send_modify(|v| *v += 1);
            }
        });
        let conn = Arc::new(Conn {
            writer: tokio::sync::Mutex::new(BufWriter::new(w)),
            alive_tx,
            pending,
            alive,
            epoch,
            reader: reader.abort_handle(),
        });
        if let Err(e) = self.start_conn(&conn).await {
            self.drop_conn(&conn);
            return Err(e);
        }
        self.st().conn = Some(conn.clone());
        Ok(conn)
    }

    /// Authenticates a new connection and re-attaches every session to it.
    async fn start_conn(&self, conn: &Arc<Conn>) -> Result<(), ClientError> {
        // The token first: every later request on this connection is judged by it.
        if let Some(token) = self.inner.options.token.clone() {
            self.send(
                conn,
                Request::Authenticate {
                    token: token.into(),
                },
            )
            .await?;
        }
        // Renew every session at once on the new connection — after a leader change this
        // is the first chance to — which also re-attaches it (its pushes come here now).
        // Sent side by side, at most REATTACH_AT_ONCE in flight (below a node's limit per
        // connection): the node's proposer puts the keep-alives that arrive during one
        // flush into one entry, so hundreds of sessions re-attach in a few replicated
        // writes, not one write each while every other call waits for this connection.
        let sessions: Vec<(u64, SessionSecret)> =
            self.st().attached.iter().map(|(s, k)| (*s, *k)).collect();
        let room = Arc::new(tokio::sync::Semaphore::new(REATTACH_AT_ONCE));
        let mut sent = tokio::task::JoinSet::new();
        for (session, secret) in sessions {
            let (me, conn, room) = (self.clone(), conn.clone(), room.clone());
            sent.spawn(async move {
                let _turn = room.acquire_owned().await;
                let r = me.send(&conn, Request::KeepAlive { session, secret }).await;
                (session, r)
            });
        }
        while let Some(done) = sent.join_next().await {
            let (session, r) = match done {
                Ok(sent) => sent,
                // Nothing aborts them while they are read here, and a send does not
                // panic: one that did is a bug, and goes on as the panic it was.
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            };
            match r {
                Ok(_) => {}
                Err(e) if outcome_unknown(&e) => {
                    if let ClientError::NotLeader { leader } = &e {
                        self.st().preferred = leader
                            .clone()
                            .filter(|a| crate::membership::address_text(a));
                    }
                    // The connection is dropped; the keep-alives still out go with it.
                    sent.abort_all();
                    return Err(e);
                }
                // It ended while we were away (`unknown_session`), or the node refuses to
                // keep it alive (a token no longer allowed to): it is lost, and the
                // refusal is this session's alone — the connection serves the others.
                Err(_) => self.lose(session),
            }
        }
        Ok(())
    }

    /// Follows a node's `NotLeader`: its hint becomes the next address tried, unless it
    /// is no address ([`crate::membership::address_text`]), and returns how long to wait first: 50 ms with no
    /// leader known; none for a leader not named before in this call (a new leader is
    /// followed at once); for one named again, 50 ms doubling to 1 s — so two nodes naming
    /// each other, or a faulty node naming itself, cost a few connections a second, not a
    /// reconnect storm. Cost: O(hint + names seen, at most [`HINTS_KEPT`]).
    fn redirected(&self, leader: Option<String>, hops: &mut Hops) -> Duration {
        let leader = leader.filter(|a| crate::membership::address_text(a));
        let pause = match &leader {
            None => Duration::from_millis(50),
            Some(a) if !hops.seen.contains(a) => {
                if hops.seen.len() < HINTS_KEPT {
                    hops.seen.push(a.clone());
                }
                Duration::ZERO
            }
            Some(_) => {
                hops.repeats += 1;
                Duration::from_millis(50u64 << (hops.repeats - 1).min(5))
                    .min(Duration::from_secs(1))
            }
        };
        self.st().preferred = leader;
        pause
    }

    async fn send(&self, conn: &Conn, req: Request) -> Result<Reply, ClientError> {
        self.send_answered(conn, req, None).await.and_then(|r| r)
    }

    /// [`Client::send`], telling a node's answer (`Ok`, a refusal included) from no answer
    /// (`Err`: the request could not be sent, the connection was lost under it, or no
    /// reply came in time), and setting `written` (if given) just before the request's
    /// frame begins to go out: until then no node can have it.
    async fn send_answered(
        &self,
        conn: &Conn,
        req: Request,
        written: Option<&AtomicBool>,
    ) -> Result<Result<Reply, ClientError>, ClientError> {
        // A membership change may wait for a learner to catch up (the node allows it 5
        // request timeouts, 15 s by default): wait longer than the node does. A backup or
        // export page waits for the leader's rebuild turn (30 s by default), then rebuilds
        // the state: as long again.
        let wait = match req {
            Request::AddLearner { .. } | Request::SetVoters { .. } => Duration::from_secs(30),
            Request::Backup { .. } | Request::Export { .. } => {
                self.inner.reply_timeout.max(PAGE_REPLY_TIME)
            }
            _ => self.inner.reply_timeout,
        };
        let id = self.inner.ids.fetch_add(1, Ordering::Relaxed);
        // A frame past the limit every node takes by default is refused here, before it
        // is marked written: a node would answer it `Malformed` and drop the connection,
        // and a numbered request repeated on the next one would fail the same way, for
        // good, holding up the session's later requests.
        let bytes = frame::encode(&ClientFrame { id, req })
            .map_err(|e| ClientError::BadRequest(format!("the request cannot be encoded: {e}")))?;
        let len = bytes.len() - 4;
        if len > MAX_CLIENT_FRAME as usize {
            return Err(ClientError::BadRequest(format!(
                "the request is {len} bytes encoded, past the {MAX_CLIENT_FRAME}-byte frame \
                 limit of a node (a lock name is at most {} bytes)",
                fencelock::MAX_NAME_LEN
            )));
        }
        let (tx, mut rx) = oneshot::channel();
        conn.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        // Bounded like the reply: a node that stops reading would otherwise hold this
        // request, and every other one behind the connection's writer, keep-alives
        // included. A write cut short leaves the stream torn: the connection is dropped.
        let written = tokio::time::timeout(wait, async {
            let mut w = conn.writer.lock().await;
            if let Some(flag) = written {
                flag.store(true, Ordering::SeqCst);
            }
            w.write_all(&bytes).await?;
            w.flush().await
        })
        .await
        .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut)));
        // The reader may have died (and cleared `pending`) before our id went in; then no
        // reply can come: fail now rather than after the reply timeout — unless it left
        // an answer for us on its way out (a node of another wire version, named).
        if written.is_err() || !*conn.alive.borrow() {
            if let Ok(answer) = rx.try_recv() {
                return Ok(answer);
            }
            conn.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            let _ = conn.alive_tx.send(false);
            return Err(ClientError::Unavailable("connection closed".into()));
        }
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) => Err(ClientError::Unavailable("connection lost".into())),
            Err(_) => Err(ClientError::Unavailable("no reply".into())),
        }
    }

    /// Whether the connection of `epoch` still reaches a live leader, asked with `req` (a
    /// read only a live leader answers) — once a reply timeout for every acquire waiting
    /// on it: the others wait for the probe in flight and take its answer, so a client of
    /// a thousand waiting acquires sends one read a reply timeout, not a thousand. No
    /// answer drops the connection ([`Client::ask_on`]). Cost: at most one request.
    async fn leads(&self, epoch: u64, req: Request) -> bool {
        let mut probed = self.inner.probed.lock().await;
        if probed.is_some_and(|(e, at)| e == epoch && at.elapsed() < self.inner.reply_timeout) {
            return true;
        }
        let alive = self.ask_on(epoch, req).await.is_some();
        if alive {
            *probed = Some((epoch, Instant::now()));
        }
        alive
    }

    /// `req` sent once on the connection of `epoch`, if that is still the client's: its
    /// answer, or `None` when there is no such connection, or when the node did not answer
    /// (the connection is then dropped, as for any call) or answered with an error.
    /// Cost: one request.
    async fn ask_on(&self, epoch: u64, req: Request) -> Option<Reply> {
        let conn = self.st().conn.clone().filter(|c| c.epoch == epoch)?;
        match self.send(&conn, req).await {
            Ok(r) => Some(r),
            Err(ClientError::NotLeader { .. } | ClientError::Unavailable(_)) => {
                self.drop_conn(&conn);
                None
            }
            Err(_) => None,
        }
    }

    /// Drops `conn` for good (a redirect, a timeout, an unavailable node): it is no
    /// longer used, its reader stops, and nothing it still delivers is taken
    /// ([`Client::note`]). Cost: O(requests pending on it).
    fn drop_conn(&self, conn: &Conn) {
        {
            let mut st = self.st();
            st.dropped = st.dropped.max(conn.epoch);
            if st.conn.as_ref().is_some_and(|c| c.epoch == conn.epoch) {
                st.conn = None;
            }
        }
        conn.close();
        // The reader, aborted, no longer wakes the waiters on its way out: a waiting
        // acquire learns now that its connection is gone (and repeats on the next one)
        // instead of at its next poll.
        self.inner.changed.send_modify(|v| *v += 1);
    }

    /// Sends `req`, following redirects and retrying on lost connections and
    /// unavailability for up to [`Timeouts::retry_for`] (15 s by default). Only send
    /// requests that are safe to repeat (reads, keep-alives, or writes carrying a request
    /// number).
    ///
    /// Errors: a core refusal or a bad request at once (among them a request whose frame
    /// would pass a node's default limit, [`MAX_CLIENT_FRAME`] bytes: refused before it is
    /// sent); `Unavailable` when retries ran out.
    pub async fn call(&self, req: Request) -> Result<Reply, ClientError> {
        self.call_on(req).await.map(|(r, _)| r)
    }

    /// [`Client::call`], also returning the epoch of the connection that answered.
    async fn call_on(&self, req: Request) -> Result<(Reply, u64), ClientError> {
        self.call_marking(req, None).await
    }

    /// [`Client::call_on`], setting `written` (if given) before any attempt's frame goes
    /// out ([`Client::send_answered`]).
    async fn call_marking(
        &self,
        req: Request,
        written: Option<&AtomicBool>,
    ) -> Result<(Reply, u64), ClientError> {
        let start = Instant::now();
        let mut last = ClientError::Unavailable("not tried".into());
        let mut hops = Hops::default();
        // A connect's refusal says nothing of an earlier attempt that went out: once one
        // did, the outcome is unknown whatever the last connect said (the caller must
        // settle it, not take it as never applied).
        let after_sent = |e: ClientError| match written {
            Some(w) if w.load(Ordering::SeqCst) && !outcome_unknown(&e) => {
                ClientError::Unavailable(format!(
                    "{e}, after an attempt that went out (its outcome is unknown)"
                ))
            }
            _ => e,
        };
        // Attempts that failed in a row — a connect that failed, or a node that took the
        // request and answered `Unavailable` (no quorum, say): after each round of every
        // address failing, the pause before the next grows (`connect_pause`). Only an
        // answer that points somewhere (a redirect) starts the count again: a live node
        // answering `Unavailable` used to restart it with every connect, so it and the
        // dead nodes beside it were dialled every few tens of milliseconds.
        let mut refused = 0u32;
        // The pause after one more failed attempt, or `None` when no room is left for
        // another before the end of the retry time (one last connect is left room before
        // it: a node back in that last moment is still reached).
        let failed = |refused: &mut u32| {
            *refused = refused.saturating_add(1);
            let rounds = (*refused - 1) / self.st().addrs.len().max(1) as u32;
            let left = self.inner.retry_for.saturating_sub(start.elapsed());
            (left > LAST_TRY).then(|| connect_pause(rounds).min(left - LAST_TRY))
        };
        while start.elapsed() < self.inner.retry_for {
            let conn = match self.connect(start + self.inner.retry_for).await {
                Ok(c) => c,
                // A refused token stays refused: no retry.
                Err(e @ (ClientError::Unauthenticated | ClientError::Forbidden(_))) => {
                    return Err(after_sent(e))
                }
                // A node that re-attaching found not leading: followed as any redirect,
                // with its pauses, so that two nodes naming each other cost a few
                // connections a second here too.
                Err(ClientError::NotLeader { leader }) => {
                    refused = 0;
                    let pause = self.redirected(leader.clone(), &mut hops);
                    last = ClientError::NotLeader { leader };
                    let left = self.inner.retry_for.saturating_sub(start.elapsed());
                    tokio::time::sleep(pause.min(left)).await;
                    continue;
                }
                Err(e) => {
                    last = e;
                    // Never through the end of the retry time, and that one was the last.
                    let Some(pause) = failed(&mut refused) else {
                        break;
                    };
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            let (answer, answered) = match self.send_answered(&conn, req.clone(), written).await {
                Ok(answer) => (answer, true),
                Err(e) => (Err(e), false),
            };
            match answer {
                Ok(r) => return Ok((r, conn.epoch)),
                Err(ClientError::NotLeader { leader }) => {
                    self.drop_conn(&conn);
                    refused = 0;
                    let pause = self.redirected(leader.clone(), &mut hops);
                    last = ClientError::NotLeader { leader };
                    // (No pause past the call's end: it would only delay its failure.)
                    let left = self.inner.retry_for.saturating_sub(start.elapsed());
                    tokio::time::sleep(pause.min(left)).await;
                }
                Err(ClientError::Unavailable(m)) => {
                    self.drop_conn(&conn);
                    last = ClientError::Unavailable(m);
                    // A node's `Unavailable` is a failed attempt. A connection lost under the
                    // request (another call's redirect dropped it, say) is not the node's
                    // word: the next address is tried after 50 ms, and its connect counts
                    // for itself.
                    let pause = if answered {
                        let Some(pause) = failed(&mut refused) else {
                            break;
                        };
                        pause
                    } else {
                        Duration::from_millis(50)
                    };
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(after_sent(last))
    }

    /// Opens a session of `ttl_ms`, retrying on redirects and unavailability for up to
    /// [`Timeouts::retry_for`] (15 s by default). Every attempt carries the same random
    /// idempotency key, so a retry after an ambiguous failure (a reply lost with the
    /// leader) gets the session the first attempt opened rather than a second one. The node scopes the key to this client's token
    /// ([`crate::auth::Principal`]): another token presenting it would open a session of
    /// its own.
    ///
    /// Errors: core errors (bad ttl, sessions full), `Unavailable`.
    pub async fn open_session(&self, ttl_ms: u64) -> Result<Session, ClientError> {
        self.open(ttl_ms, None).await
    }

    /// [`Client::open_session`] with a label (UTF-8, at most [`fencelock::MAX_LABEL_LEN`]
    /// bytes; empty = none): `holder`/`queue` answers and watchers' events show it with
    /// the session's holds and waits. Retries as there.
    ///
    /// Errors: as there, and `Core(label_too_long)` (nothing opened).
    pub async fn open_labeled(&self, ttl_ms: u64, label: &str) -> Result<Session, ClientError> {
        self.open(ttl_ms, Some(label.to_string())).await
    }

    async fn open(&self, ttl_ms: u64, label: Option<String>) -> Result<Session, ClientError> {
        // Retried as every call is (`call`): each attempt carries the same key.
        let key = Some(fresh_key()?);
        let req = match label {
            None => Request::Open { ttl_ms, key },
            Some(label) => Request::OpenLabeled { ttl_ms, key, label },
        };
        let Reply::Opened { reply, secret, .. } = self.call(req).await? else {
            return Err(ClientError::Unavailable("unexpected reply".into()));
        };
        let id = reply
            .opened()
            .ok_or_else(|| ClientError::Unavailable("no session opened".into()))?
            .0;
        {
            let mut st = self.st();
            st.attached.insert(id, secret);
            st.handles.insert(id);
        }
        Ok(Session {
            client: self.clone(),
            id,
            secret,
            requests: Default::default(),
            background: Default::default(),
        })
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

    /// Linearizable read of `session`'s hold of `lock` ([`Request::Hold`]): its mode, token
    /// and label, `None` when it holds none (it waits or only watches, or the session or
    /// the lock is gone). One hold, however many a semaphore has. Cost: as
    /// [`Client::holders`], with an answer of one holder at most.
    ///
    /// Errors: bad name, `Forbidden` (no read role on the lock's prefix), `Unavailable`.
    pub async fn hold(&self, session: u64, lock: &str) -> Result<Option<Holder>, ClientError> {
        let req = Request::Hold {
            lock: lock.into(),
            session,
        };
        match self.call(req).await? {
            Reply::Hold(h) => Ok(h),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// Linearizable read of a semaphore's permits in use and its limit (`None`: the name
    /// is not a live semaphore). Cost: as [`Client::holders`].
    ///
    /// Errors: bad name, `Unavailable`.
    pub async fn permits(&self, lock: &str) -> Result<Option<Permits>, ClientError> {
        match self.call(Request::Permits { lock: lock.into() }).await? {
            Reply::Permits(p) => Ok(p),
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
    /// Errors: `Unavailable`; `Limit { kind: "unwritten_lists" }` when the answer is over
    /// 512 bytes and the node's bound on answers not yet read is spent (as for a long
    /// list: not retried, ask again).
    pub async fn members(&self) -> Result<Members, ClientError> {
        match self.call(Request::Members).await? {
            Reply::Members { voters, learners } => Ok((voters, learners)),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// The status of the node this client reaches ([`Request::Status`]: its own view, not
    /// a linearizable read; no redirect): make the client with that node's address alone to
    /// ask a given node. Cost: one round trip, and the node's readiness check.
    ///
    /// Errors: `Unavailable` (the node did not answer), `Unauthenticated` / `Forbidden`;
    /// `Limit { kind: "unwritten_lists" }` as for [`Client::members`].
    pub async fn status(&self) -> Result<crate::protocol::NodeStatus, ClientError> {
        match self.call(Request::Status).await? {
            Reply::Status(s) => Ok(s),
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

    /// (Admin token.) Releases `session`'s hold on `lock` without its credential; returns
    /// the token of the hold that ended. The owner is pushed `Released` with reason
    /// `Released`. Reads the hold's token first (a linearizable read), then releases that
    /// hold only ([`Client::force_release_hold`]): a retry after an applied release, with
    /// the session holding the lock again meanwhile, is refused `not_holder` and leaves
    /// the new hold alone. Cost: one read and one replicated write.
    ///
    /// Errors: `Forbidden` (not an admin token), `Core(unknown_session)`,
    /// `Core(not_holder)` (the session does not hold the lock, or holds it again since
    /// the read), `Unavailable`.
    pub async fn force_release(&self, session: u64, lock: &str) -> Result<Token, ClientError> {
        let held = self.holders(lock).await?;
        // Not held by the session: token 0, which no hold has, gets the cluster's refusal
        // (`not_holder`, `unknown_session`, or `Forbidden` for a token that may read).
        let token = held
            .iter()
            .find(|h| h.session.0 == session)
            .map_or(Token(0), |h| h.token);
        self.force_release_hold(session, lock, token).await
    }

    /// (Admin token.) Releases `session`'s hold on `lock` if its token is `token`, without
    /// the session's credential; returns that token. The owner is pushed `Released` with
    /// reason `Released`. Safe to retry: once applied, a repeat finds that hold gone and
    /// is refused `not_holder`, whatever the session holds since. Cost: one replicated
    /// write.
    ///
    /// Errors: `Forbidden` (not an admin token), `Core(unknown_session)`,
    /// `Core(not_holder)` (no hold of that token), `Unavailable`.
    pub async fn force_release_hold(
        &self,
        session: u64,
        lock: &str,
        token: Token,
    ) -> Result<Token, ClientError> {
        let req = Request::ForceReleaseHold {
            session,
            lock: lock.into(),
            token: token.0,
        };
        match self.call(req).await? {
            Reply::Done {
                reply: fencelock::Reply::Released { token },
                ..
            } => Ok(token),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// (Admin token.) Closes `session` without its credential: its holds are released
    /// (each granted on to the next waiter with a new token, and pushed to the owner as
    /// `Released` with reason `Closed`), its waits and watches end, the owner is pushed
    /// `SessionExpired` (so its client counts the session lost at once), and its next
    /// request is refused `unknown_session` — what ends a revoked or compromised token's sessions
    /// now rather than at their ttl. Reads the session first (a linearizable read): one
    /// that is not open is refused. One that was open and is gone when the close is
    /// applied is closed all the same, by this call (an attempt applied whose answer was
    /// lost, then retried) or meanwhile: `Ok`, since what was asked holds. Cost: one read
    /// and one replicated write.
    ///
    /// Errors: `Forbidden` (not an admin token), `Core(unknown_session)` (not open at the
    /// read: never opened, or already ended), `Unavailable`.
    pub async fn force_close(&self, session: u64) -> Result<(), ClientError> {
        match self.session_info(session).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(ClientError::Core(
                    fencelock::Error::UnknownSession(fencelock::SessionId(session)).into(),
                ))
            }
            // A token that may not read sessions is no admin's (an admin may do
            // everything): the close itself is refused, and its refusal says what is
            // missing, where the read's would name the read.
            Err(ClientError::Forbidden(_)) => {}
            Err(e) => return Err(e),
        }
        match self.call(Request::ForceClose { session }).await {
            Ok(Reply::Done {
                reply: fencelock::Reply::Closed,
                ..
            }) => Ok(()),
            Err(ClientError::Core(e)) if e.kind == "unknown_session" => Ok(()),
            Ok(_) => Err(ClientError::Unavailable("unexpected reply".into())),
            Err(e) => Err(e),
        }
    }

    /// (Admin token.) One page of the open sessions ([`Request::Sessions`]): those with ids
    /// above `after` that `owner` opened (every one when `None`), in id order, at most
    /// `limit` (0: [`crate::protocol::SESSIONS_PAGE`]), each with its owner. Cost: one
    /// linearizable read; the leader looks at up to [`crate::protocol::SESSIONS_SCAN`]
    /// sessions.
    ///
    /// Errors: `Unauthenticated` / `Forbidden` (no token, or not an admin token),
    /// `Unavailable`; `Limit { kind: "unwritten_lists" }` as for [`Client::members`].
    pub async fn sessions_page(
        &self,
        after: u64,
        owner: Option<Principal>,
        limit: u32,
    ) -> Result<SessionsPage, ClientError> {
        match self
            .call(Request::Sessions {
                after,
                owner,
                limit,
            })
            .await?
        {
            Reply::Sessions(page) => Ok(page),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// (Admin token.) Every open session that `owner` opened (every one when `None`), in
    /// id order, page by page ([`Client::sessions_page`]). Each page is a linearizable read
    /// of its own: ids only grow, so a session opened meanwhile is listed by a later page,
    /// and only one opened after the last page is missed; one listed may have ended by the
    /// time this returns. Cost: one read per
    /// [`crate::protocol::SESSIONS_PAGE`] sessions listed or
    /// [`crate::protocol::SESSIONS_SCAN`] looked at.
    ///
    /// Errors: as [`Client::sessions_page`]; `Unavailable` for a page that no correct node
    /// answers: one whose ids do not rise from its `after` to its `next`; one that goes on
    /// (`next` set) though it is neither full ([`crate::protocol::SESSIONS_PAGE`]) nor has
    /// looked [`crate::protocol::SESSIONS_SCAN`] ids on (each page of a correct node that
    /// goes on has done one of the two); or one that would take the list past
    /// [`fencelock::MAX_ROWS`] sessions (the largest session table a node may have). A page
    /// holds at most [`crate::protocol::SESSIONS_PAGE`] sessions as it decodes. So a
    /// damaged node cannot make this list a session twice or creep on an id at a time; one
    /// that invents sessions can still keep it reading (with TLS, only a node of the
    /// cluster's CA can answer).
    pub async fn sessions(
        &self,
        owner: Option<Principal>,
    ) -> Result<Vec<ListedSession>, ClientError> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let page = self.sessions_page(after, owner, 0).await?;
            let ends = page.next.unwrap_or(u64::MAX);
            let mut last = after;
            for s in &page.sessions {
                let id = s.info.id.0;
                if id <= last || id > ends {
                    return Err(ClientError::Unavailable(format!(
                        "a page of sessions after {after} lists session {id} after {last} (up \
                         to {ends})"
                    )));
                }
                last = id;
            }
            // A page that goes on is full, or stopped at the scan bound: then it looked at
            // SESSIONS_SCAN distinct ids above its `after`.
            let full = page.sessions.len() == crate::protocol::SESSIONS_PAGE as usize;
            let scanned = after.saturating_add(crate::protocol::SESSIONS_SCAN as u64);
            if page.next.is_some_and(|n| !full && n < scanned) {
                return Err(ClientError::Unavailable(format!(
                    "a page of {} sessions after {after} goes on at {ends}, though it is not \
                     full and cannot have looked at {} sessions",
                    page.sessions.len(),
                    crate::protocol::SESSIONS_SCAN
                )));
            }
            if all.len() + page.sessions.len() > fencelock::MAX_ROWS {
                return Err(ClientError::Unavailable(format!(
                    "the pages of sessions list more than the {} a node may have",
                    fencelock::MAX_ROWS
                )));
            }
            all.extend(page.sessions);
            match page.next {
                None => return Ok(all),
                Some(n) if n > after => after = n,
                Some(n) => {
                    return Err(ClientError::Unavailable(format!(
                        "a page of sessions after {after} said to go on after {n}"
                    )))
                }
            }
        }
    }

    /// (Admin token.) Closes every open session that `owner` opened
    /// ([`Client::sessions`], then [`Client::force_close`] for each): what ends a revoked
    /// token's sessions, once the token is out of every node's tokens file (so it cannot
    /// open more meanwhile). A listed session that has ended by its close is passed over.
    /// Returns the sessions this call closed, in id order, and how the call ended. Cost:
    /// the listing, then one read and one replicated write per session.
    ///
    /// Errors (the second value): as [`Client::sessions`] and [`Client::force_close`].
    /// The first failure ends the call; the sessions closed before it are in the first
    /// value and stay closed, and a retry lists the rest.
    pub async fn force_close_owner(&self, owner: Principal) -> (Vec<u64>, Result<(), ClientError>) {
        let mut closed = Vec::new();
        let listed = match self.sessions(Some(owner)).await {
            Ok(l) => l,
            Err(e) => return (closed, Err(e)),
        };
        for s in listed {
            match self.force_close(s.info.id.0).await {
                Ok(()) => closed.push(s.info.id.0),
                Err(ClientError::Core(e)) if e.kind == "unknown_session" => {}
                Err(e) => return (closed, Err(e)),
            }
        }
        (closed, Ok(()))
    }

    /// (Admin token.) The recording of what the cluster applied over `window`
    /// ([`crate::export`], the format of `docs/RECORDING.md`): its lines, without
    /// newlines, and the last page's answer (the resolved indices, the span, the node).
    /// Fetched page by page from the leader, each page retried on redirects and
    /// unavailability like any read; every page after the first asks for the same resolved
    /// window, so the pages fit together even if the leader changes in between.
    /// Cost: one request per ~40 KiB of recording; the leader re-applies the log from its
    /// snapshot for each.
    ///
    /// Errors: `Forbidden` (not an admin token), `BadRequest` (a window this cluster no
    /// longer holds: the message names what it holds), `Limit` (a recording past the
    /// format's limits, naming the last index that fits; or `unwritten_lists` for a page,
    /// as for [`Client::members`]), `Unavailable` (no leader in
    /// time; a page that does not fit the ones before, says another total than they did,
    /// or takes the recording past the format's limits; a line that is not whole or not
    /// as its checksum says, by [`crate::export::line_fault`], its number named).
    pub async fn export(
        &self,
        window: crate::export::Window,
    ) -> Result<(Vec<String>, crate::protocol::ExportPage), ClientError> {
        let mut lines: Vec<String> = Vec::new();
        let (mut total, mut bytes) = (None, 0usize);
        let mut pinned = window;
        loop {
            let req = Request::Export {
                from_index: pinned.from_index,
                to_index: pinned.to_index,
                from_time: pinned.from_time,
                to_time: pinned.to_time,
                skip: lines.len() as u64,
            };
            let page = match self.call(req).await? {
                Reply::Export(p) => p,
                _ => return Err(ClientError::Unavailable("unexpected reply".into())),
            };
            // Held to a recording's limits, and to the total the first page said: a node
            // that answers otherwise (damaged, or not what it claims) cannot make this
            // collect without end.
            let page_bytes: usize = page.lines.iter().map(|l| l.len() + 1).sum();
            let fits = !page.lines.is_empty()
                && total.is_none_or(|t| t == page.total)
                && page.total <= crate::export::MAX_LINES as u64
                && lines.len() as u64 + page.lines.len() as u64 <= page.total
                && bytes + page_bytes <= crate::export::MAX_BYTES;
            if !fits {
                return Err(ClientError::Unavailable(format!(
                    "a page of the recording does not fit: {} lines ({bytes} bytes) received, \
                     {} in the page, {} in all (at most {} lines and {} bytes)",
                    lines.len(),
                    page.lines.len(),
                    page.total,
                    crate::export::MAX_LINES,
                    crate::export::MAX_BYTES
                )));
            }
            // Each line whole and as its checksum says, before any is kept: a damaged
            // page is not written out as a recording.
            if let Some((k, why)) = page
                .lines
                .iter()
                .enumerate()
                .find_map(|(k, l)| crate::export::line_fault(l).map(|why| (k, why)))
            {
                return Err(ClientError::Unavailable(format!(
                    "line {} of the recording {why}",
                    lines.len() + k + 1
                )));
            }
            total = Some(page.total);
            bytes += page_bytes;
            pinned.from_index = Some(page.from_index);
            pinned.to_index = Some(page.to_index);
            lines.extend(page.lines.iter().cloned());
            if lines.len() as u64 == page.total {
                return Ok((lines, page));
            }
        }
    }

    /// (Admin token.) A backup of the cluster's applied state: the checksummed
    /// snapshot-file bytes `fencelock-node snapshot restore` reads (checked here before
    /// they are returned), and the last page's answer (the log index, the node). Taken
    /// over this authenticated connection — never over a metrics port — page by page
    /// from the leader ([`Client::backup_paged`] with the largest pages); every page after
    /// the first asks for the same log index, so the pages fit together even if writes go
    /// on or the leader changes in between. A backup whose index the leader has meanwhile
    /// compacted into a later snapshot is started again (three tries in all).
    /// Cost: one request per [`crate::protocol::BACKUP_PAGE`] bytes; the leader rebuilds
    /// the state at the index from its snapshot and log for each.
    ///
    /// Errors: `Forbidden` (not an admin token), `BadRequest` (nothing applied yet),
    /// `Unavailable` (no leader in time; pages that do not fit together — a total that
    /// changes between pages or is above [`MAX_BACKUP_BYTES`] among them, or a page
    /// shorter than asked that is not the last — or a backup that fails its checks, both
    /// naming what was wrong).
    pub async fn backup(&self) -> Result<(Vec<u8>, crate::protocol::BackupPage), ClientError> {
        self.backup_paged(0).await
    }

    /// [`Client::backup`] in pages of at most `max_bytes` bytes (0: the largest, as
    /// `backup` asks). Cost and errors: as [`Client::backup`].
    pub async fn backup_paged(
        &self,
        max_bytes: u32,
    ) -> Result<(Vec<u8>, crate::protocol::BackupPage), ClientError> {
        self.backup_within(max_bytes, MAX_BACKUP_BYTES).await
    }

    /// [`Client::backup_paged`], refusing a backup said to be larger than `limit` bytes
    /// (instead of [`MAX_BACKUP_BYTES`]). Cost and errors: as [`Client::backup`].
    pub async fn backup_within(
        &self,
        max_bytes: u32,
        limit: u64,
    ) -> Result<(Vec<u8>, crate::protocol::BackupPage), ClientError> {
        // The bytes a page brings, as the node sizes it.
        let page_size = match max_bytes {
            0 => crate::protocol::BACKUP_PAGE,
            n => n.min(crate::protocol::BACKUP_PAGE),
        };
        let mut attempt = 0;
        'again: loop {
            attempt += 1;
            let mut bytes: Vec<u8> = Vec::new();
            let (mut index, mut total) = (None, None);
            loop {
                let req = Request::Backup {
                    index,
                    offset: bytes.len() as u64,
                    max_bytes,
                };
                let page = match self.call(req).await {
                    Ok(Reply::Backup(p)) => p,
                    Ok(_) => return Err(ClientError::Unavailable("unexpected reply".into())),
                    // The index was compacted into a later snapshot on the leader (the
                    // only refusal of a later page of ours): from the start.
                    Err(ClientError::BadRequest(_)) if index.is_some() && attempt < 3 => {
                        continue 'again
                    }
                    Err(e) => return Err(e),
                };
                // Every page of one backup says the same total, at most `limit`, and
                // is as long as asked (the rest, when less is left): a node that
                // answers otherwise cannot make this collect without end, or a byte at
                // a time.
                let left = page.total.saturating_sub(bytes.len() as u64);
                let fits = index.is_none_or(|i| i == page.index)
                    && total.is_none_or(|t| t == page.total)
                    && page.total <= limit
                    && page.bytes.len() as u64 >= left.min(u64::from(page_size))
                    && !page.bytes.is_empty()
                    && bytes.len() as u64 + page.bytes.len() as u64 <= page.total;
                if !fits {
                    return Err(ClientError::Unavailable(format!(
                        "a page of the backup does not fit: {} bytes received, {} in the page (log index {}, {} in all, at most {limit})",
                        bytes.len(),
                        page.bytes.len(),
                        page.index,
                        page.total
                    )));
                }
                index = Some(page.index);
                total = Some(page.total);
                bytes.extend_from_slice(&page.bytes);
                if bytes.len() as u64 == page.total {
                    crate::state_machine::check_backup(&bytes).map_err(|e| {
                        ClientError::Unavailable(format!(
                            "node {} sent a backup that fails this build's check: {e}",
                            page.node
                        ))
                    })?;
                    return Ok((bytes, page));
                }
            }
        }
    }

    /// Removes learner `id` from the membership (not a voter: set the voters without it
    /// first). Safe to retry. Cost: one membership entry (two: joint consensus).
    ///
    /// Errors: `BadRequest` (a voter), `Forbidden`, `Unavailable`.
    pub async fn remove_learner(&self, id: u64) -> Result<(), ClientError> {
        self.call(Request::RemoveLearner { id }).await.map(|_| ())
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

/// The leaders one call was sent to by redirects ([`Client::redirected`]).
#[derive(Default)]
struct Hops {
    /// The leaders named so far (the first [`HINTS_KEPT`]).
    seen: Vec<String>,
    /// How many redirects named one of them again.
    repeats: u32,
}

/// How many sessions a new connection re-attaches at once (keep-alives in flight on it):
/// well below a node's limit per connection (`net::MAX_IN_FLIGHT`, 256).
const REATTACH_AT_ONCE: usize = 64;

/// How many distinct leader hints one call remembers.
const HINTS_KEPT: usize = 16;

/// An acquire's claim on the pushes of its (session, lock): while it lives, `note` keeps
/// that pair's lock events (any earlier one was dropped when it began); when it ends, the
/// pair's entry goes once no other acquire waits on it.
struct Awaiting<'a> {
    client: &'a Client,
    key: &'a (u64, String),
}

impl<'a> Awaiting<'a> {
    fn new(client: &'a Client, key: &'a (u64, String)) -> Awaiting<'a> {
        let mut st = client.st();
        st.lock_events.remove(key);
        *st.awaiting.entry(key.clone()).or_insert(0) += 1;
        Awaiting { client, key }
    }
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        let mut st = self.client.st();
        if let Some(n) = st.awaiting.get_mut(self.key) {
            *n -= 1;
            if *n == 0 {
                st.awaiting.remove(self.key);
                st.lock_events.remove(self.key);
            }
        }
    }
}

/// A TCP connection to `addr` within `limit`, with no Nagle delay and with the node's TCP
/// keep-alive timings ([`crate::net::keep_alive`]): a node that vanished without a FIN or
/// RST (power lost, a NAT mapping dropped) is found dead after a minute of silence, and
/// the connection fails — an acquire that waits in a queue sends nothing, and would
/// otherwise wait on it for ever (unless a lease guard's keep-alives time out first).
/// Errors: `Unavailable` (timed out, refused). Cost: one connect.
async fn dial(addr: &str, limit: Duration) -> Result<TcpStream, ClientError> {
    let sock = tokio::time::timeout(limit, TcpStream::connect(addr))
        .await
        .map_err(|_| ClientError::Unavailable(format!("connect to {addr} timed out")))?
        .map_err(|e| ClientError::Unavailable(format!("connect to {addr}: {e}")))?;
    let _ = sock.set_nodelay(true);
    let _ = crate::net::keep_alive(&sock);
    Ok(sock)
}

/// A random 128-bit idempotency key from the operating system's random source: unique per
/// open, and as hard to guess as the credential a retry with it is answered with.
fn fresh_key() -> Result<OpenKey, ClientError> {
    crate::auth::random_bytes()
        .map(|b| OpenKey(u128::from_le_bytes(b)))
        .map_err(|e| ClientError::Unavailable(e.to_string()))
}

/// The cluster's members: voters and learners, each `(id, addresses)`.
pub type Members = (Vec<(u64, NodeAddr)>, Vec<(u64, NodeAddr)>);

/// An open session. Its acquires, releases and cancels are numbered 1, 2, 3… and done one
/// at a time (an acquire until its outcome is known), so every retry repeats the session's
/// latest number and the core replays it instead of applying it twice (see the module
/// docs).
pub struct Session {
    client: Client,
    id: u64,
    /// The credential every request for this session carries.
    secret: SessionSecret,
    /// The session's request numbers and what is unsettled; held for the whole of a
    /// numbered request (and by a background settling, [`Abandoned`]).
    requests: Arc<tokio::sync::Mutex<Numbering>>,
    /// Its pending background settling.
    background: Background,
}

/// What settling needs of a session: its client, id and credential. Owned, so a
/// background settling can outlive the call that left something unsettled (a [`Session`]
/// itself cannot be shared with it: dropping one ends the client's record of the session).
#[derive(Clone)]
struct Settler {
    client: Client,
    id: u64,
    secret: SessionSecret,
}

/// A session's numbered requests, as its handle knows them.
#[derive(Default)]
struct Numbering {
    /// The latest request number taken.
    last: u64,
    /// A request whose outcome the caller never learned, settled before the next one.
    unsettled: Option<Unsettled>,
    /// The token of each hold an acquire returned to the caller, until it is known to be
    /// over: what tells a hold the caller knows from one it never saw.
    known: HashMap<String, Token>,
    /// Locks a claim was withdrawn from by settling: a push about that claim (a grant, a
    /// timeout) may still be on its way, so the next acquire of such a lock takes its
    /// outcome from the core's answers only, never from a push.
    withdrawn: HashSet<String>,
    /// How many numbered requests have begun: a background settling goes ahead only if
    /// no request began after the one that armed it.
    begun: u64,
    /// What a background settling withdrew, until the next numbered request: a cancel or
    /// unwatch of it answers `Ok`, as it would had it settled it itself.
    settled: Option<Withdrew>,
}

/// What a numbered request that did not return the core's answer (it failed with an
/// error that leaves its outcome unknown, or its future was dropped) may have left.
enum Unsettled {
    /// Taken with this number. `written` is set once a frame of it began to go out; until
    /// then no node can have it, and settling forgets it.
    Sent {
        n: u64,
        req: Request,
        written: Arc<AtomicBool>,
    },
    /// An acquire of this lock left a wait or a hold the caller never saw, and a cancel or
    /// release of it was sent whose outcome is unknown: look again.
    Claim(String),
    /// A watch of this lock was applied that the caller never saw, and an unwatch of it
    /// was sent whose outcome is unknown: send it again.
    Watch(String),
}

/// How many locks [`Numbering::withdrawn`] remembers before it starts again.
const MAX_WITHDRAWN: usize = 1024;

/// What settling withdrew: a wait or hold, or a watch, of a lock.
#[derive(Debug, PartialEq, Eq)]
enum Withdrew {
    Claim(String),
    Watch(String),
}

/// How many times a background settling tries (each after [`Timeouts::settle_after`])
/// before it leaves what is unsettled to the session's next numbered request.
const SETTLE_TRIES: u32 = 4;

/// The shortest wait before a background settling, whatever [`Timeouts::settle_after`]
/// says: time for a `select!` loop to make its acquire again (its retry).
const MIN_SETTLE_AFTER: Duration = Duration::from_millis(100);

/// The session's background settling, if one is pending, with the [`Numbering::begun`]
/// it was armed at: at most one per session. A new numbered request, [`Session::close`]
/// and dropping the [`Session`] stop it.
type Background = Arc<Mutex<Option<(tokio::task::AbortHandle, u64)>>>;

/// Stops the session's pending background settling, if any; returns the `begun` it was
/// armed at. Cost: O(1).
fn stop_background(b: &Background) -> Option<u64> {
    let (task, begun) = b.lock().unwrap_or_else(|p| p.into_inner()).take()?;
    task.abort();
    Some(begun)
}

/// True when settling `g` would withdraw something (or look for something to withdraw):
/// an acquire or watch that went out, or a withdrawal whose answer was lost. A release,
/// cancel or unwatch left nothing, and stays the retry of the same call. Cost: O(1).
fn withdraws(g: &Numbering) -> bool {
    match &g.unsettled {
        Some(Unsettled::Sent { req, written, .. }) => {
            matches!(req, Request::Acquire { .. } | Request::Watch { .. })
                && written.load(Ordering::SeqCst)
        }
        Some(Unsettled::Claim(_) | Unsettled::Watch(_)) => true,
        None => false,
    }
}

/// The guard of one numbered request ([`Session::begin`]). If the request ends with an
/// acquire or watch unsettled ([`withdraws`]) — its future dropped, or an error that
/// leaves its outcome unknown — dropping the guard starts a background settling: after
/// [`Timeouts::settle_after`], if no numbered request of the session began meanwhile, it
/// settles as the next request would have (see the module docs), so a session that makes
/// no further numbered request does not keep a wait or hold that no call returned.
/// [`Abandoned::finish`] disarms it when there is nothing to withdraw.
struct Abandoned {
    settle: Option<(Settler, Arc<tokio::sync::Mutex<Numbering>>, Background)>,
    /// The request's place in [`Numbering::begun`].
    begun: u64,
    after: Duration,
}

impl Abandoned {
    /// The request is done: no background settling unless `g` has something to
    /// withdraw. Cost: O(1).
    fn finish(mut self, g: &Numbering) {
        if !withdraws(g) {
            self.settle = None;
        }
    }

    /// No background settling. Cost: O(1).
    fn disarm(mut self) {
        self.settle = None;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some((settler, requests, background)) = self.settle.take() else {
            return;
        };
        // Dropped outside a tokio runtime (the program ending, another executor):
        // nothing runs in the background; the next request, if any, settles it.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (begun, after) = (self.begun, self.after.max(MIN_SETTLE_AFTER));
        let task = rt.spawn(async move {
            for _ in 0..SETTLE_TRIES {
                tokio::time::sleep(after).await;
                let mut g = requests.lock().await;
                // A later request settles it, or did. (Needed beside the stops in `begin`:
                // a task re-armed by a `begin` dropped before it had the lock can wait
                // here behind a request that began after it.)
                if g.begun != begun || !withdraws(&g) {
                    return;
                }
                if settler.client.st().lost.contains(&settler.id) {
                    return; // closed or expired: nothing of it is left
                }
                if let Ok(withdrew) = settler.settle(&mut g).await {
                    g.settled = withdrew;
                    return;
                }
            }
        });
        let old = background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace((task.abort_handle(), begun));
        if let Some((old, _)) = old {
            old.abort();
        }
    }
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

    /// Watches the hold of `lock` granted with `token`: [`HoldWatch::ended`] resolves once
    /// it is gone. Whatever ends it while the session lives on — an administrator's
    /// forced release above all, which changes nothing a [`LeaseGuard`] sees — is pushed
    /// to this client; but a push is lost with a dropped connection or a leader that died
    /// before sending it. So the watch also reads this session's hold of the lock
    /// ([`Client::hold`], a linearizable read) at once and then every `every`, and a hold
    /// not there, or there with another token, has ended too. The first read covers a push
    /// that came before the watch began. A read that cannot be had says nothing (a node
    /// away, a token without the read role): the lease guard judges the silence. Drop the
    /// watch to stop it.
    ///
    /// Cost: a task, and a read of one hold every `every` (a ttl/4 is what `fencelock lock`
    /// and `elect` use), its answer one holder at most however many a semaphore has. Must
    /// be called inside a tokio runtime.
    pub fn watch_hold(&self, lock: &str, token: Token, every: Duration) -> HoldWatch {
        let client = self.client.clone();
        let (session, name) = (self.id, lock.to_string());
        // Before the first read: a push after it is taken, one before it is in it.
        let mut pushes = client.subscribe();
        let (tx, ended) = watch::channel(None);
        let task = tokio::spawn(async move {
            // At most a day between reads (a larger period would overflow the interval's
            // clock arithmetic), at least a millisecond.
            let every = every.clamp(Duration::from_millis(1), Duration::from_secs(86_400));
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // What a push says of this hold: `Some(end)` when it ends it.
            let ends = |p: &Output| match p {
                Output::Released {
                    session: s,
                    lock,
                    token: t,
                    reason,
                } if s.0 == session && *t == token && lock.as_str() == name => {
                    Some(HoldEnded::Pushed(*reason))
                }
                Output::SessionExpired { session: s } if s.0 == session => {
                    Some(HoldEnded::SessionLost)
                }
                _ => None,
            };
            // The read in flight, raced against the pushes: a push that comes while a
            // read retries (a leader without its quorum) is taken at once.
            let mut reading: Option<HoldRead> = None;
            let end = loop {
                tokio::select! {
                    // Pushes first: of a push and a read that both say the hold ended, the
                    // push says how.
                    biased;
                    p = pushes.recv() => match p {
                        Ok(p) => {
                            if let Some(end) = ends(&p) {
                                break end;
                            }
                        }
                        // Pushes were dropped (this watch fell behind): read at once.
                        Err(broadcast::error::RecvError::Lagged(_)) => tick.reset_immediately(),
                        Err(broadcast::error::RecvError::Closed) => break HoldEnded::Unknown,
                    },
                    r = async { reading.as_mut().expect("guarded").await }, if reading.is_some() => {
                        reading = None;
                        let gone = r.is_ok_and(|hold| hold.is_none_or(|h| h.token != token));
                        if gone {
                            // The push, when it came, came before the read's answer (both on
                            // one connection, the push first): taken if it is waiting.
                            let mut pushed = None;
                            while let Ok(p) = pushes.try_recv() {
                                if let Some(end) = ends(&p) {
                                    pushed = Some(end);
                                    break;
                                }
                            }
                            break pushed.unwrap_or(HoldEnded::NotAmongHolders);
                        }
                    }
                    _ = tick.tick(), if reading.is_none() => {
                        if client.st().lost.contains(&session) {
                            break HoldEnded::SessionLost;
                        }
                        let (c, n) = (client.clone(), name.clone());
                        reading = Some(Box::pin(async move { c.hold(session, &n).await }));
                    }
                }
            };
            let _ = tx.send(Some(end));
        });
        HoldWatch {
            ended,
            task: task.abort_handle(),
        }
    }

    /// Keeps the session alive; returns its new deadline (logical ms). Carries no request
    /// number and does not wait for a pending acquire. Cost: one replicated write (a log
    /// entry).
    ///
    /// Errors: `Core(unknown_session)` if it is gone; `Unavailable`.
    pub async fn keep_alive(&self) -> Result<u64, ClientError> {
        match self
            .client
            .call(Request::KeepAlive {
                session: self.id,
                secret: self.secret,
            })
            .await
        {
            Ok(Reply::Done {
                reply: fencelock::Reply::KeptAlive { expires_at },
                ..
            }) => Ok(expires_at.0),
            Ok(_) => Err(ClientError::Unavailable("unexpected reply".into())),
            Err(e) => Err(self.lost_if_unknown(e)),
        }
    }

    /// Notes the session lost when `e` says the service does not know it; returns `e`.
    fn lost_if_unknown(&self, e: ClientError) -> ClientError {
        self.settler().lost_if_unknown(e)
    }

    /// What settling needs of this session. Cost: O(1).
    fn settler(&self) -> Settler {
        Settler {
            client: self.client.clone(),
            id: self.id,
            secret: self.secret,
        }
    }

    /// Locks the session's numbering for one numbered request, with the guard that
    /// settles in the background what the request leaves unsettled, unless another
    /// begins first (see [`Abandoned`]). Stops the session's pending background settling:
    /// this request settles what is unsettled itself. Cost: waits for the previous
    /// numbered request.
    async fn begin(&self) -> (tokio::sync::MutexGuard<'_, Numbering>, Abandoned) {
        // Stopped at once, even mid-settle (its marks are written before each call, so
        // the next settling reads them, as after a dropped call) — and armed again, as it
        // was, if this call is dropped before it has the lock.
        let stopped = stop_background(&self.background);
        let rearm = self.abandoned(stopped);
        let mut g = self.requests.lock().await;
        rearm.disarm();
        // One armed while this call waited (by the request before it) is this one's too.
        stop_background(&self.background);
        g.begun += 1;
        let abandoned = self.abandoned(Some(g.begun));
        (g, abandoned)
    }

    /// A guard that settles in the background what the request of `begun` leaves (none
    /// for `None`). Cost: O(1).
    fn abandoned(&self, begun: Option<u64>) -> Abandoned {
        Abandoned {
            settle: begun.map(|_| {
                (
                    self.settler(),
                    self.requests.clone(),
                    self.background.clone(),
                )
            }),
            begun: begun.unwrap_or(0),
            after: self.client.inner.settle_after,
        }
    }

    /// Sends the request `make` builds with the session's next number (after the previous
    /// numbered request is done) and returns the core's reply.
    async fn numbered(
        &self,
        make: impl Fn(u64) -> Request,
    ) -> Result<fencelock::Reply, ClientError> {
        let reply = self.numbered_by(make, None).await?;
        reply.ok_or_else(|| ClientError::Unavailable("unexpected reply".into()))
    }

    /// [`Session::numbered`], answering `None` (nothing sent) when settling withdrew
    /// exactly `done_by` ([`Session::numbered_in`]).
    async fn numbered_by(
        &self,
        make: impl Fn(u64) -> Request,
        done_by: Option<Withdrew>,
    ) -> Result<Option<fencelock::Reply>, ClientError> {
        let (mut g, abandoned) = self.begin().await;
        let reply = self.numbered_in(&mut g, make, done_by).await;
        abandoned.finish(&g);
        reply
    }

    /// [`Session::numbered`] with the numbering already locked. `None` (nothing sent) when
    /// settling the unsettled request withdrew exactly `done_by` — here, or in the
    /// background since the previous request: that was this request's work (a cancel of a
    /// dropped acquire's lock, an unwatch of a dropped watch's).
    async fn numbered_in(
        &self,
        g: &mut Numbering,
        make: impl Fn(u64) -> Request,
        done_by: Option<Withdrew>,
    ) -> Result<Option<fencelock::Reply>, ClientError> {
        // A name no input can carry is refused as a node refuses it, before the request
        // is numbered, so it is never sent: a node whose frame limit is below the
        // request's would drop the connection instead of answering, and a numbered
        // request repeated on every connection after would hold up the session's later
        // ones.
        if let Some(lock) = make(0).input_lock() {
            crate::protocol::input_name(lock)?;
        }
        let background = g.settled.take();
        let (n, written) = match self.retry_of(g, &make) {
            Some(taken) => taken,
            None => {
                let withdrew = self.settler().settle(g).await?;
                if done_by.is_some() && (withdrew == done_by || background == done_by) {
                    return Ok(None);
                }
                self.take(g, &make)
            }
        };
        let r = self.client.call_marking(make(n), Some(&written)).await;
        if !matches!(&r, Err(e) if outcome_unknown(e)) {
            g.unsettled = None;
        }
        match r {
            Ok((Reply::Done { reply, .. }, _)) => Ok(Some(reply)),
            Ok(_) => Err(ClientError::Unavailable("unexpected reply".into())),
            Err(e) => Err(self.lost_if_unknown(e)),
        }
    }

    /// The unsettled request's number and written mark, when the request `make` builds
    /// repeats it: the retry, which the core answers as it did the first attempt. Cost:
    /// O(1).
    fn retry_of(
        &self,
        g: &Numbering,
        make: &impl Fn(u64) -> Request,
    ) -> Option<(u64, Arc<AtomicBool>)> {
        match &g.unsettled {
            Some(Unsettled::Sent { n, req, written }) if *req == make(*n) => {
                Some((*n, written.clone()))
            }
            _ => None,
        }
    }

    /// The next number, for the request `make` builds, marked unsettled until whoever
    /// sends it has its answer (and clears the mark). Call after [`Session::settle`].
    /// Cost: O(1).
    fn take(&self, g: &mut Numbering, make: &impl Fn(u64) -> Request) -> (u64, Arc<AtomicBool>) {
        g.last += 1;
        let n = g.last;
        let written = Arc::new(AtomicBool::new(false));
        g.unsettled = Some(Unsettled::Sent {
            n,
            req: make(n),
            written: written.clone(),
        });
        (n, written)
    }

    /// Acquires `lock`. Try-lock answers at once; with a waiting `wait`, a `Queued` answer
    /// is followed by waiting for this session's `Granted` or `WaitTimedOut` push, or the
    /// session's end. If the connection is lost meanwhile (pushes may have been missed),
    /// the acquire repeats its request number once reconnected and takes the core's
    /// answer: `Granted`, `Queued` (keep waiting), `WaitEnded` ([`Acquired::WaitEnded`]) or
    /// `HoldEnded` ([`Acquired::HoldEnded`]). The session's other numbered requests wait
    /// until this returns (see the module docs). While queued with nothing from the node
    /// for a reply timeout, it asks the node this session's hold (a linearizable read): a
    /// node that does not answer (a hung process, whose connection stays open and
    /// pushes nothing) or no longer leads is dropped, and the acquire repeats on the
    /// next (one such read a reply timeout serves all the client's acquires waiting on
    /// the connection). Cost: one replicated write, plus one per reconnect while waiting,
    /// and at most one read per reply timeout of quiet.
    ///
    /// An acquire that returns `Unavailable`, or whose future is dropped, is settled by
    /// the session's next numbered request (see the module docs): repeating this call
    /// (within [`Timeouts::settle_after`], or before any other numbered request) is the
    /// retry and returns the first attempt's outcome; another request withdraws the hold
    /// or wait it may have left first. If no numbered request begins within
    /// `settle_after`, the client settles it in the background.
    ///
    /// Errors: core refusals (already queued, mode mismatch, capacity…), `Unavailable`
    /// (no leader answered within the retry period). Like every numbered request, any
    /// error of settling an earlier one (then this one was not sent). A session that
    /// ended is `Ok(Acquired::SessionLost)`.
    pub async fn acquire(
        &self,
        lock: &str,
        mode: Mode,
        wait: WaitSpec,
    ) -> Result<Acquired, ClientError> {
        crate::protocol::input_name(lock)?;
        let key = (self.id, lock.to_string());
        let (mut g, abandoned) = self.begin().await;
        g.settled = None;
        let make = |n| Request::Acquire {
            session: self.id,
            secret: self.secret,
            lock: lock.into(),
            mode,
            wait,
            request: Some(n),
        };
        let (n, written) = match self.retry_of(&g, &make) {
            Some(taken) => taken,
            None => {
                self.settler().settle(&mut g).await?;
                self.take(&mut g, &make)
            }
        };
        let verify = g.withdrawn.contains(lock);
        let out = self.acquire_as(&key, make(n), &written, verify).await;
        if !matches!(&out, Err(e) if outcome_unknown(e)) {
            g.unsettled = None;
        }
        if matches!(
            out,
            Ok(Acquired::Granted(_)
                | Acquired::TimedOut
                | Acquired::WaitEnded
                | Acquired::HoldEnded(_))
        ) {
            // A wait of this lock ran to its end by the core's answers: a push about the
            // withdrawn claim, written before them, has arrived.
            g.withdrawn.remove(lock);
        }
        match out {
            Ok(Acquired::Granted(token)) => {
                g.known.insert(lock.to_string(), token);
            }
            Ok(Acquired::HoldEnded(_)) => {
                g.known.remove(lock);
            }
            Ok(Acquired::SessionLost) => g.known.clear(),
            _ => {}
        }
        abandoned.finish(&g);
        out
    }

    /// The acquire `req` (numbered), sent and repeated until its outcome is known. With
    /// `verify` (a claim on this lock was withdrawn by settling, and a push about it may
    /// still arrive) a push only wakes it to repeat the request: the core's answer is the
    /// outcome.
    async fn acquire_as(
        &self,
        key: &(u64, String),
        req: Request,
        written: &AtomicBool,
        verify: bool,
    ) -> Result<Acquired, ClientError> {
        let _awaiting = Awaiting::new(&self.client, key);
        // Subscribed before sending: a push that overtakes the reply still wakes us.
        let mut changed = self.client.inner.changed.subscribe();
        loop {
            let (reply, epoch) = match self.client.call_marking(req.clone(), Some(written)).await {
                Ok((Reply::Done { reply, .. }, epoch)) => (reply, epoch),
                Ok(_) => return Err(ClientError::Unavailable("unexpected reply".into())),
                Err(ClientError::Core(e)) if e.kind == "unknown_session" => {
                    self.client.lose(self.id);
                    return Ok(Acquired::SessionLost);
                }
                Err(e) => return Err(e),
            };
            match reply {
                fencelock::Reply::Granted { token, .. } => return Ok(Acquired::Granted(token)),
                fencelock::Reply::Busy => return Ok(Acquired::Busy),
                fencelock::Reply::WaitEnded => return Ok(Acquired::WaitEnded),
                fencelock::Reply::HoldEnded { token } => return Ok(Acquired::HoldEnded(token)),
                fencelock::Reply::Queued { .. } => {}
                _ => return Err(ClientError::Unavailable("unexpected reply".into())),
            }
            // Queued: wait for a push, the session's end, or a lost connection.
            let mut quiet_since = Instant::now();
            loop {
                {
                    let mut st = self.client.st();
                    // A session known lost first: a grant pushed before the loss is no
                    // hold now (its session's expiry released it), and answering it would
                    // start a holder on a lock it no longer has.
                    if st.lost.contains(&self.id) {
                        st.lock_events.remove(key);
                        return Ok(Acquired::SessionLost);
                    }
                    if verify {
                        if st.lock_events.remove(key).is_some() {
                            break; // ask the core
                        }
                    } else if let Some(ev) = st.lock_events.remove(key) {
                        // Taken: a session that locks many names keeps no record of each.
                        return Ok(ev);
                    }
                }
                // The connection that answered died (a node restart, a leader change, or
                // the node cut it off for falling behind on pushes): pushes may have been
                // missed, so ask the core again with the same number.
                if self.client.epoch() != epoch || !self.client.connected() {
                    break;
                }
                // A node that stopped (a hung process, whose kernel keeps the connection
                // open) pushes nothing and closes nothing, and a leader cut off from the
                // others may no longer lead: after a reply timeout with nothing from it,
                // ask it (this session's hold of the lock: a read only a live leader
                // answers, allowed to any token that may acquire the lock; one probe for
                // all the client's waiting acquires). No answer drops the connection, and
                // the acquire asks again on the next.
                if quiet_since.elapsed() >= self.client.inner.reply_timeout {
                    let hold = Request::Hold {
                        lock: key.1.clone(),
                        session: self.id,
                    };
                    if !self.client.leads(epoch, hold).await {
                        break;
                    }
                    quiet_since = Instant::now();
                    continue;
                }
                // Wake on any push or connection change; the timeout only re-checks the
                // connection.
                let _ = tokio::time::timeout(Duration::from_millis(500), changed.changed()).await;
            }
        }
    }

    /// Releases `lock`; returns the token of the hold that ended. Numbered (waits for a
    /// pending acquire of this session). Cost: one replicated write.
    ///
    /// Errors: `Core(not_holder)` (for example after the session expired), `Unavailable`.
    pub async fn release(&self, lock: &str) -> Result<Token, ClientError> {
        let (mut g, abandoned) = self.begin().await;
        let reply = self
            .numbered_in(
                &mut g,
                |n| Request::Release {
                    session: self.id,
                    secret: self.secret,
                    lock: lock.into(),
                    request: Some(n),
                },
                None,
            )
            .await;
        abandoned.finish(&g);
        if matches!(&reply, Ok(_) | Err(ClientError::Core(_))) {
            // Released, or not held (any more): either way no hold the caller knows, and
            // no event of this lock is anyone's outcome any more.
            g.known.remove(lock);
            self.client
                .st()
                .lock_events
                .remove(&(self.id, lock.to_string()));
        }
        match reply? {
            Some(fencelock::Reply::Released { token }) => Ok(token),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// Withdraws a queued acquire (whose future was dropped). If that acquire is still
    /// unsettled (see the module docs), settling it withdraws its wait — or the hold it
    /// became after the future was dropped — and that is the answer: `Ok`; so is a
    /// withdrawal of this lock made in the background, if this cancel is the next numbered
    /// request after it. Numbered.
    /// Cost: one replicated write (settling: one repeat, two reads and one write).
    /// Errors of settling an earlier request are this call's (nothing sent).
    ///
    /// Errors: `Core(not_queued)` (no wait: never queued, granted and released, or
    /// ended), `Unavailable`.
    pub async fn cancel(&self, lock: &str) -> Result<(), ClientError> {
        // Settling a dropped acquire of this lock withdraws its wait (or the hold it became
        // meanwhile): that is this cancel's work, and its answer.
        match self
            .numbered_by(
                |n| Request::Cancel {
                    session: self.id,
                    secret: self.secret,
                    lock: lock.into(),
                    request: Some(n),
                },
                Some(Withdrew::Claim(lock.to_string())),
            )
            .await?
        {
            None | Some(fencelock::Reply::Cancelled) => Ok(()),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// Watches `lock`'s holders: this session is pushed an [`Output::HolderChanged`] with
    /// change `Holding` for every current holder, then one for each later change (granted,
    /// released, closed, expired), in order, until [`Session::unwatch`] or the session's
    /// end; returns how many holders there were. Receive them with [`Client::subscribe`]
    /// (filter on the session and the lock). Pushes sent while the connection was lost
    /// are not sent again: after a reconnect ([`Client::epoch`] changed) unwatch and watch
    /// again to start from the current holders. Numbered. Cost: one replicated write.
    ///
    /// A watch that fails `Unavailable`, or whose future is dropped, is settled as an
    /// acquire is (see the module docs): the same watch again is its retry; another
    /// numbered request, or the background settling after [`Timeouts::settle_after`],
    /// ends the watch the caller never saw.
    ///
    /// Errors: `Core(already_watching)`, `Core(capacity_exceeded)` (the lock's watchers or
    /// the claim table are full), `Core(unknown_session)`, `NotOwner`, `Unavailable`.
    pub async fn watch(&self, lock: &str) -> Result<u32, ClientError> {
        match self
            .numbered(|n| Request::Watch {
                session: self.id,
                secret: self.secret,
                lock: lock.into(),
                request: Some(n),
            })
            .await?
        {
            fencelock::Reply::Watching { holders } => Ok(holders),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// Ends this session's watch of `lock`; no event of it is pushed after the answer.
    /// If a watch of `lock` whose answer was lost is unsettled, settling it ends that
    /// watch, and that is the answer: `Ok`; so is such a watch ended in the background, if
    /// this unwatch is the next numbered request after that. Numbered. Cost: one
    /// replicated write.
    ///
    /// Errors: `Core(not_watching)`, `Core(unknown_session)`, `Unavailable`.
    pub async fn unwatch(&self, lock: &str) -> Result<(), ClientError> {
        // Settling a watch of this lock whose answer was lost ends it: that is this
        // unwatch's work, and its answer.
        match self
            .numbered_by(
                |n| Request::Unwatch {
                    session: self.id,
                    secret: self.secret,
                    lock: lock.into(),
                    request: Some(n),
                },
                Some(Withdrew::Watch(lock.to_string())),
            )
            .await?
        {
            None | Some(fencelock::Reply::Unwatched) => Ok(()),
            _ => Err(ClientError::Unavailable("unexpected reply".into())),
        }
    }

    /// Closes the session, releasing everything it holds and ending its waits (a pending
    /// [`Session::acquire`] returns [`Acquired::SessionLost`]). Carries no request number
    /// and does not wait for a pending acquire: a retry of a close that was applied finds
    /// the session gone, which counts as done. Cost: one replicated write.
    ///
    /// Errors: `Unavailable`.
    pub async fn close(&self) -> Result<(), ClientError> {
        let r = self
            .client
            .call(Request::Close {
                session: self.id,
                secret: self.secret,
                request: None,
            })
            .await;
        match r {
            Ok(Reply::Done {
                reply: fencelock::Reply::Closed,
                ..
            }) => {}
            Ok(_) => return Err(ClientError::Unavailable("unexpected reply".into())),
            Err(ClientError::Core(e)) if e.kind == "unknown_session" => {}
            Err(e) => return Err(e),
        }
        self.client.lose(self.id);
        stop_background(&self.background);
        Ok(())
    }
}

/// Keeps a session alive in the background and tracks the lease with the core's
/// [`SessionKeeper`](fencelock::SessionKeeper): the holder may act only while
/// [`LeaseGuard::may_act`] is true (until `last acknowledged send + ttl − margin`).
///
/// Its clock keeps counting while the host is suspended ([`LeaseInstant`]), as the
/// service's time does for a client that was away: a process that wakes from a suspend
/// longer than its safe window is unsafe at once. (`Instant` is `CLOCK_MONOTONIC` on
/// Linux, which stops while the host sleeps: a lease timed by it would still read safe
/// after waking.) Keep-alives are due by the same clock, and the task looks at it at
/// least every 250 ms, so one is sent soon after a wake.
pub struct LeaseGuard {
    keeper: Arc<Mutex<fencelock::SessionKeeper>>,
    clock: LeaseClock,
    task: tokio::task::JoinHandle<()>,
    /// Its session: a loss the client already knows of (a `SessionExpired` push, a
    /// re-attach refused) ends the lease at once, not at the guard's next keep-alive.
    session: Arc<Session>,
}

/// A moment on the clock a [`LeaseGuard`] times leases by: one that counts while the host
/// is suspended — `CLOCK_BOOTTIME` on Linux and Android, `CLOCK_MONOTONIC` on Apple
/// systems (which counts sleep there) — and `Instant`'s clock elsewhere, where a suspend
/// may not be counted. A VM paused by its hypervisor is not a suspend of its kernel, and
/// is not counted by any of them. Take it before sending the open request
/// ([`LeaseGuard::start_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeaseInstant(u64);

impl LeaseInstant {
    /// Now. Cost: one clock read.
    pub fn now() -> LeaseInstant {
        LeaseInstant(lease_clock_ms())
    }

    /// Its reading in ms. On Linux, Android and Apple systems the clock is the system's,
    /// so another process of the host reads the same moment alike (`fencelock lock` hands
    /// its lease's deadline to its supervisor so); elsewhere it counts from this process's
    /// first reading. Cost: O(1).
    pub fn to_millis(self) -> u64 {
        self.0
    }

    /// The moment whose [`to_millis`](Self::to_millis) is `ms`. Cost: O(1).
    pub fn from_millis(ms: u64) -> LeaseInstant {
        LeaseInstant(ms)
    }
}

/// Milliseconds since the session was opened, on the clock [`LeaseGuard`] times the lease
/// by.
#[derive(Clone)]
struct LeaseClock {
    /// The clock's reading, in ms, when the open request was sent.
    origin: u64,
    read: fn() -> u64,
}

impl LeaseClock {
    /// Cost: one clock read.
    fn now(&self) -> u64 {
        (self.read)().saturating_sub(self.origin)
    }
}

/// [`LeaseInstant`]'s clock in ms. Which clock is chosen once, at the first read; a read
/// of it that fails afterwards carries on from the last good one at the monotonic clock's
/// pace. Cost: one clock read and an uncontended lock.
fn lease_clock_ms() -> u64 {
    use std::sync::OnceLock;
    static INSTANT_ZERO: OnceLock<Instant> = OnceLock::new();
    // From the first read, plus a day: a reading is then never below the age of an
    // `Instant` taken before it (`start`'s `opened_at`), so an origin does not saturate.
    let by_instant =
        || 86_400_000 + INSTANT_ZERO.get_or_init(Instant::now).elapsed().as_millis() as u64;
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios"
    ))]
    {
        use nix::time::{clock_gettime, ClockId};
        #[cfg(any(target_os = "linux", target_os = "android"))]
        const CLOCK: ClockId = ClockId::CLOCK_BOOTTIME;
        #[cfg(any(target_os = "macos", target_os = "ios"))]
        const CLOCK: ClockId = ClockId::CLOCK_MONOTONIC;
        static SYSTEM: OnceLock<bool> = OnceLock::new();
        // The latest good reading and when it was taken, for a read that fails.
        static LAST: Mutex<Option<(u64, Instant)>> = Mutex::new(None);
        let read = || {
            clock_gettime(CLOCK).ok().map(|t| {
                let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
                let ms = u64::try_from(t.tv_nsec()).unwrap_or(0) / 1_000_000;
                secs.saturating_mul(1000).saturating_add(ms)
            })
        };
        if *SYSTEM.get_or_init(|| read().is_some()) {
            let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
            return match (read(), *last) {
                (Some(ms), _) => {
                    *last = Some((ms, Instant::now()));
                    ms
                }
                // Failed after working (never seen): carry on from the last reading at
                // the monotonic clock's pace, so time neither stops nor jumps.
                (None, Some((ms, at))) => ms.saturating_add(at.elapsed().as_millis() as u64),
                (None, None) => by_instant(),
            };
        }
    }
    by_instant()
}

impl LeaseGuard {
    /// Starts keeping `session` alive every `interval_ms`. `opened_at` is when the open
    /// request was sent (its success is the first acknowledged keep-alive). `opened_at` is
    /// on the monotonic clock, so a suspend between it and this call is not counted:
    /// [`LeaseGuard::start_at`] counts it.
    ///
    /// Errors: [`fencelock::Error::BadConfig`] unless `0 < margin < ttl` and
    /// `0 < interval < ttl − margin`.
    pub fn start(
        session: Arc<Session>,
        ttl_ms: u64,
        interval_ms: u64,
        margin_ms: u64,
        opened_at: Instant,
    ) -> Result<LeaseGuard, fencelock::Error> {
        let since = Instant::now()
            .saturating_duration_since(opened_at)
            .as_millis() as u64;
        let opened_at = LeaseInstant(lease_clock_ms().saturating_sub(since));
        LeaseGuard::start_at(session, ttl_ms, interval_ms, margin_ms, opened_at)
    }

    /// [`LeaseGuard::start`], with `opened_at` ([`LeaseInstant::now`] taken before the
    /// open request was sent) on the lease's own clock.
    ///
    /// Errors: [`fencelock::Error::BadConfig`] unless `0 < margin < ttl` and
    /// `0 < interval < ttl − margin`.
    pub fn start_at(
        session: Arc<Session>,
        ttl_ms: u64,
        interval_ms: u64,
        margin_ms: u64,
        opened_at: LeaseInstant,
    ) -> Result<LeaseGuard, fencelock::Error> {
        let clock = LeaseClock {
            origin: opened_at.0,
            read: lease_clock_ms,
        };
        LeaseGuard::start_on(session, ttl_ms, interval_ms, margin_ms, clock)
    }

    /// [`LeaseGuard::start_at`] on `clock`.
    fn start_on(
        session: Arc<Session>,
        ttl_ms: u64,
        interval_ms: u64,
        margin_ms: u64,
        clock: LeaseClock,
    ) -> Result<LeaseGuard, fencelock::Error> {
        let mut k = fencelock::SessionKeeper::new(ttl_ms, interval_ms, margin_ms)?;
        k.keep_alive_sent(0)?;
        k.keep_alive_acked(0)?;
        let keeper = Arc::new(Mutex::new(k));
        let kk = keeper.clone();
        let c = clock.clone();
        let guarded = session.clone();
        let task = tokio::spawn(async move {
            loop {
                let due = {
                    let k = kk.lock().unwrap_or_else(|p| p.into_inner());
                    k.next_keep_alive(c.now())
                };
                let now = c.now();
                if due > now {
                    // In slices: tokio's sleep runs on the monotonic clock, which a
                    // suspend does not move, so look at the lease clock again soon.
                    tokio::time::sleep(Duration::from_millis((due - now).min(250))).await;
                    continue;
                }
                let sent = c.now();
                if kk
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .keep_alive_sent(sent)
                    .is_err()
                {
                    continue;
                }
                match session.keep_alive().await {
                    Ok(_) => {
                        let _ = kk
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .keep_alive_acked(sent);
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
            clock,
            task,
            session: guarded,
        })
    }

    /// The lease now, by the guard's clock (which counts a host suspend). Cost: O(1).
    pub fn lease(&self) -> fencelock::Lease {
        let now = self.clock.now();
        let mut keeper = self.keeper.lock().unwrap_or_else(|p| p.into_inner());
        if self.session.is_lost() {
            keeper.session_lost();
        }
        keeper.lease(now)
    }

    /// When the lease stops being safe ([`fencelock::Lease::Safe`]'s `until`, on the
    /// guard's clock): `None` when it is not safe now. Without a later acknowledged
    /// keep-alive, [`may_act`](Self::may_act) turns false then. Cost: O(1).
    pub fn safe_until(&self) -> Option<LeaseInstant> {
        match self.lease() {
            fencelock::Lease::Safe { until } => {
                Some(LeaseInstant(self.clock.origin.saturating_add(until)))
            }
            _ => None,
        }
    }

    /// True only while the lease is certainly valid: false past its safe window, and at
    /// once when the client knows the session is lost. Cost: O(1).
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

/// Whether `e` refuses a read for a while only: the node's bound on list answers not yet
/// read (`Limit { kind: "unwritten_lists" }`), which other clients' reads hold until they
/// are read. Cost: O(1).
fn for_a_while(e: &ClientError) -> bool {
    matches!(e, ClientError::Limit { kind, .. } if kind == "unwritten_lists")
}

/// The room a call's pause between failed connects leaves before the end of its retry
/// time, for a last connect ([`connect_pause`]).
const LAST_TRY: Duration = Duration::from_millis(50);

/// The pause before the next connect after `rounds` whole rounds of the client's
/// addresses failed (refused, unreachable, refusing this client's connection for a
/// reason of their own, or answering `Unavailable`): 50 ms within the first round, so the next
/// address is tried at once, then doubling each round up to 1 s. A node restarting, or
/// a whole cluster down, is dialled a few times a second by each waiting call, not twenty.
/// Cost: O(1).
fn connect_pause(rounds: u32) -> Duration {
    Duration::from_millis(50u64 << rounds.min(5)).min(Duration::from_secs(1))
}

/// Whether `e` leaves a request's outcome unknown: it may or may not have been applied
/// (no leader answered in time, or the answer was too large to read after it was).
fn outcome_unknown(e: &ClientError) -> bool {
    match e {
        ClientError::NotLeader { .. } | ClientError::Unavailable(_) => true,
        ClientError::Limit { kind, .. } => kind == "reply_too_large",
        _ => false,
    }
}

impl Settler {
    /// Notes the session lost when `e` says the service does not know it; returns `e`.
    fn lost_if_unknown(&self, e: ClientError) -> ClientError {
        if matches!(&e, ClientError::Core(c) if c.kind == "unknown_session") {
            self.client.lose(self.id);
        }
        e
    }

    /// Settles what an earlier numbered request may have left (see the module docs). An
    /// acquire or watch that went out and whose answer was lost is repeated with its own
    /// number — applied at most once, so the answer is its outcome — and what it left that
    /// the caller never saw is withdrawn: a wait cancelled, a hold of a token no acquire
    /// returned released, a watch ended. A request that never went out, and a release,
    /// cancel or unwatch (which leave nothing, applied or not), are forgotten. Returns what
    /// it withdrew. What is not settled stays marked, for the next try: until a
    /// withdrawal is sent, the unsettled request itself, which the same request can still
    /// retry. Cost: nothing, or one repeat, and up to two reads and one write per
    /// withdrawal.
    ///
    /// Errors: an error that leaves an outcome unknown (`Unavailable`, `NotLeader`) of the
    /// repeat, the reads or the withdrawals, and a read refused for a while (the node's
    /// bound on unread lists: `Limit { kind: "unwritten_lists" }`). Any other refusal ends
    /// the settling: by the core, nothing was applied or nothing is left; by the node (a
    /// token no longer allowed, another limit), it cannot be settled, and what is left
    /// stays until the session ends.
    async fn settle(&self, g: &mut Numbering) -> Result<Option<Withdrew>, ClientError> {
        let mut withdrew = None;
        // Each round moves on (a wait granted in between is found again as a hold), so a
        // few rounds always end it; the bound only stops a peer that answers nonsense.
        for _ in 0..8 {
            match g.unsettled.as_ref() {
                None => return Ok(withdrew),
                Some(Unsettled::Sent { req, written, .. }) => {
                    let lock = match req {
                        Request::Acquire { lock, .. } | Request::Watch { lock, .. }
                            if written.load(Ordering::SeqCst) =>
                        {
                            lock.clone()
                        }
                        // Never went out, or leaves nothing applied or not.
                        _ => {
                            g.unsettled = None;
                            continue;
                        }
                    };
                    let watch = matches!(req, Request::Watch { .. });
                    match self.client.call(req.clone()).await {
                        Ok(Reply::Done { reply, .. }) => match reply {
                            fencelock::Reply::Granted { token, .. }
                                if g.known.get(&lock) == Some(&token) =>
                            {
                                g.unsettled = None;
                            }
                            fencelock::Reply::Granted { .. } | fencelock::Reply::Queued { .. }
                                if !watch =>
                            {
                                self.withdraw_claim(g, &lock).await?;
                                withdrew = Some(Withdrew::Claim(lock));
                            }
                            fencelock::Reply::Watching { .. } if watch => {
                                self.withdraw_watch(g, &lock).await?;
                                withdrew = Some(Withdrew::Watch(lock));
                            }
                            _ => g.unsettled = None,
                        },
                        Ok(_) => g.unsettled = None,
                        Err(e) if outcome_unknown(&e) => return Err(e),
                        // Refused by the core: nothing was applied. Refused by the node
                        // (a token no longer allowed, a limit): nor can it be settled, and
                        // keeping the mark would refuse every later request the same way;
                        // what the first attempt left stays until the session ends.
                        Err(e) => {
                            self.lost_if_unknown(e);
                            g.unsettled = None;
                        }
                    }
                }
                Some(Unsettled::Claim(lock)) => {
                    let lock = lock.clone();
                    self.withdraw_claim(g, &lock).await?;
                    withdrew = Some(Withdrew::Claim(lock));
                }
                Some(Unsettled::Watch(lock)) => {
                    let lock = lock.clone();
                    self.withdraw_watch(g, &lock).await?;
                    withdrew = Some(Withdrew::Watch(lock));
                }
            }
        }
        Err(ClientError::Unavailable(
            "an earlier request could not be settled".into(),
        ))
    }

    /// Withdraws this session's wait for `lock`, or its hold of a token no acquire
    /// returned, if either is there (read, in that order: a wait can become a hold between
    /// the reads, never the other way round); clears the mark once nothing is left. The
    /// mark becomes [`Unsettled::Claim`] when a withdrawal is sent.
    ///
    /// Errors: those of the reads and the withdrawal that leave an outcome unknown; a
    /// `not_queued` / `not_holder` refusal means: look again; any other refusal ends it.
    async fn withdraw_claim(&self, g: &mut Numbering, lock: &str) -> Result<(), ClientError> {
        // A read refused by the node (not a lost answer) cannot be settled either — but
        // one refused for a while (the node's bound on unread lists, which other clients'
        // reads hold) is tried again: given up, the wait or hold would stay unseen while
        // the session lives, and a cancel would report it gone.
        let give_up = |g: &mut Numbering, e: ClientError| {
            if outcome_unknown(&e) || for_a_while(&e) {
                Err(e)
            } else {
                g.unsettled = None;
                Ok(())
            }
        };
        for _ in 0..4 {
            let waits = match self.client.waiters(lock).await {
                Ok(w) => w,
                Err(e) => return give_up(g, e),
            };
            let cancel = waits.iter().any(|w| w.session.0 == self.id);
            let holds = if cancel {
                Vec::new()
            } else {
                match self.client.holders(lock).await {
                    Ok(h) => h,
                    Err(e) => return give_up(g, e),
                }
            };
            let release = !cancel && {
                let mine = holds.iter().find(|h| h.session.0 == self.id);
                if mine.map(|h| h.token) != g.known.get(lock).copied() {
                    // Whatever the caller was told of this lock is over.
                    g.known.remove(lock);
                }
                mine.is_some_and(|h| g.known.get(lock) != Some(&h.token))
            };
            if !cancel && !release {
                g.unsettled = None;
                self.forget_lock_event(lock);
                return Ok(());
            }
            g.unsettled = Some(Unsettled::Claim(lock.to_string()));
            if g.withdrawn.len() >= MAX_WITHDRAWN {
                // Bounded: a push this old has long arrived.
                g.withdrawn.clear();
            }
            g.withdrawn.insert(lock.to_string());
            g.last += 1;
            let (session, secret, lock_name, request) =
                (self.id, self.secret, lock.to_string(), Some(g.last));
            let req = if cancel {
                Request::Cancel {
                    session,
                    secret,
                    lock: lock_name,
                    request,
                }
            } else {
                Request::Release {
                    session,
                    secret,
                    lock: lock_name,
                    request,
                }
            };
            match self.client.call(req).await {
                Ok(_) => {
                    g.unsettled = None;
                    self.forget_lock_event(lock);
                    return Ok(());
                }
                // Granted or ended in between: look again.
                Err(ClientError::Core(e)) if e.kind == "not_queued" || e.kind == "not_holder" => {}
                Err(e) if outcome_unknown(&e) => return Err(e),
                // Refused otherwise: by the core (the session's end) or by the node (a
                // token no longer allowed): it cannot be withdrawn.
                Err(e) => {
                    self.lost_if_unknown(e);
                    g.unsettled = None;
                    return Ok(());
                }
            }
        }
        Err(ClientError::Unavailable(
            "an earlier request could not be settled".into(),
        ))
    }

    /// Drops a pushed event of `lock` for this session that no acquire took: once a claim
    /// is withdrawn (or found gone) it is no one's outcome, and pushes of what was applied
    /// before the withdrawal's answer came before that answer. Without this, an acquire
    /// whose future was dropped left its grant in the client's map for the session's life,
    /// one entry per lock name. Cost: O(1).
    fn forget_lock_event(&self, lock: &str) {
        self.client
            .st()
            .lock_events
            .remove(&(self.id, lock.to_string()));
    }

    /// Ends this session's watch of `lock` that the caller never saw; clears the mark once
    /// done (or once the core says there is none). The mark is [`Unsettled::Watch`] while
    /// the unwatch is out.
    ///
    /// Errors: the unwatch's that leave its outcome unknown; any refusal ends it.
    async fn withdraw_watch(&self, g: &mut Numbering, lock: &str) -> Result<(), ClientError> {
        g.unsettled = Some(Unsettled::Watch(lock.to_string()));
        g.last += 1;
        let req = Request::Unwatch {
            session: self.id,
            secret: self.secret,
            lock: lock.to_string(),
            request: Some(g.last),
        };
        match self.client.call(req).await {
            Ok(_) => {}
            Err(e) if outcome_unknown(&e) => return Err(e),
            // Ended already (`not_watching`, the session's end), or refused by the node.
            Err(e) => {
                self.lost_if_unknown(e);
            }
        }
        g.unsettled = None;
        Ok(())
    }
}

/// What the client kept for the session — its credential for re-attaching, its lost
/// mark, its latest lock events — goes with its handle: a long-lived client that opens and
/// drops sessions keeps nothing of the dropped ones, and its background settling, if one
/// is pending, stops. (The service keeps the session until it is closed or expires; no
/// keep-alives are sent for it any more.)
impl Drop for Session {
    fn drop(&mut self) {
        stop_background(&self.background);
        let mut st = self.client.st();
        st.handles.remove(&self.id);
        st.lost.remove(&self.id);
        st.attached.remove(&self.id);
        let id = self.id;
        st.lock_events.retain(|(session, _), _| *session != id);
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::MAX_CLIENT_FRAME;
    use fencelock::{LockName, SessionId, Tick};
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// Plain TCP goes only to loopback peers (IPv4's whole 127/8, IPv6's ::1): a token or
    /// a session's credential never crosses another link in the clear.
    #[test]
    fn plain_tcp_only_to_loopback() {
        for ok in [
            "127.0.0.1:7101",
            "127.0.0.3:7103",
            "[::1]:7101",
            "[::ffff:127.0.0.1]:7101",
        ] {
            assert!(plaintext_allowed(ok.parse().unwrap()), "{ok}");
        }
        for no in [
            "10.0.0.5:7101",
            "192.168.1.2:1",
            "[2001:db8::1]:7101",
            "0.0.0.0:1",
            "[::ffff:10.0.0.5]:7101",
        ] {
            assert!(!plaintext_allowed(no.parse().unwrap()), "{no}");
        }
    }

    /// A node that accepts connections and never reads or writes on them (a stopped
    /// process: the kernel accepts into its backlog), its receive buffer `recv_buffer`
    /// bytes if given: its address, and the task holding the connections.
    fn silent_node(recv_buffer: Option<u32>) -> (String, tokio::task::JoinHandle<()>) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        if let Some(n) = recv_buffer {
            socket.set_recv_buffer_size(n).unwrap();
        }
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap().to_string();
        let listener = socket.listen(8).unwrap();
        let held = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        });
        (addr, held)
    }

    /// Timeouts that give up on a silent node within a second: 300 ms to connect and for
    /// a reply, and no retry after the first attempt.
    fn impatient() -> Timeouts {
        Timeouts {
            connect: Duration::from_millis(300),
            reply: Duration::from_millis(300),
            retry_for: Duration::from_millis(100),
            ..Timeouts::default()
        }
    }

    /// A node that accepts the TCP connection and never answers the TLS handshake (a
    /// stopped process: the kernel accepts into its backlog) costs a call no more than the
    /// connect timeout, not the 5 s a handshake may take at most: the lease's keep-alives
    /// wait behind it.
    #[tokio::test]
    async fn a_handshake_that_never_comes_costs_at_most_the_connect_timeout() {
        let (addr, _held) = silent_node(None);
        let ca = crate::tls::DevCa::new().unwrap();
        let client = Client::with_options(
            vec![addr],
            ClientOptions {
                tls: Some(crate::tls::client_config_from(&[ca.cert_der()]).unwrap()),
                timeouts: impatient(),
                ..ClientOptions::default()
            },
        );
        let start = Instant::now();
        let r = client.holders("x").await;
        assert!(
            matches!(&r, Err(ClientError::Unavailable(m)) if m.contains("TLS") && m.contains("timed out")),
            "{r:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    }

    /// A numbered request's `begin` stops the session's pending background settling at
    /// once; if the call is dropped before it has the numbering, the settling is armed
    /// again as it was (same `begun`), not lost. Once it has the numbering, the slot is
    /// empty and the request is the next one.
    #[tokio::test]
    async fn a_begin_dropped_before_the_lock_arms_the_background_settling_again() {
        let session = Session {
            client: Client::new(vec![]),
            id: 1,
            secret: SessionSecret([7; 16]),
            requests: Default::default(),
            background: Default::default(),
        };
        let held = session.requests.clone();
        let mut g = held.lock().await;
        g.begun = 1;
        // A stand-in for a pending background settling armed by request 1.
        let pending = tokio::spawn(std::future::pending::<()>());
        *session.background.lock().unwrap() = Some((pending.abort_handle(), 1));

        // Dropped while it waits for the numbering (held above).
        let begin = session.begin();
        assert!(tokio::time::timeout(Duration::from_millis(50), begin)
            .await
            .is_err());
        assert!(pending.await.unwrap_err().is_cancelled(), "stopped at once");
        let rearmed = session.background.lock().unwrap().take();
        let (task, begun) = rearmed.expect("armed again");
        assert_eq!(begun, 1);
        task.abort();
        drop(g);

        // Not dropped: the slot is empty, and this is request 2.
        let (g, abandoned) = session.begin().await;
        assert_eq!(g.begun, 2);
        assert!(session.background.lock().unwrap().is_none());
        abandoned.disarm();
    }

    /// `what`, which must end within 10 s.
    async fn within<T>(what: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), what)
            .await
            .expect("ends")
    }

    /// A read of lock `x`'s holders once the client has reconnected: the first attempts
    /// may find the first connection still up, then closed (`Unavailable`), and are
    /// repeated, at most 100 times.
    async fn holders_after_reconnect(
        client: &Client,
    ) -> Result<Vec<fencelock::Holder>, ClientError> {
        let mut changed = client.inner.changed.subscribe();
        let mut tries = 0;
        loop {
            tries += 1;
            match within(client.holders("x")).await {
                Err(ClientError::Unavailable(_)) if tries < 100 => {
                    let _ =
                        tokio::time::timeout(Duration::from_millis(50), changed.changed()).await;
                }
                r => return r,
            }
        }
    }

    /// The message of an `Unavailable`; anything else fails the test.
    fn said<T: std::fmt::Debug>(r: Result<T, ClientError>) -> String {
        match r {
            Err(ClientError::Unavailable(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    /// A fake node's side of the next connection `listener` accepts: its reader, buffered
    /// as the client's frames are read, and its writer.
    async fn accepted(
        listener: &TcpListener,
    ) -> (
        BufReader<tokio::net::tcp::OwnedReadHalf>,
        tokio::net::tcp::OwnedWriteHalf,
    ) {
        let (a, _) = listener.accept().await.unwrap();
        let (r, w) = a.into_split();
        (BufReader::new(r), w)
    }

    async fn next_request<R: AsyncRead + Unpin>(r: &mut R) -> ClientFrame {
        frame::read(r, MAX_CLIENT_FRAME)
            .await
            .expect("a frame")
            .expect("not the end")
    }

    async fn answer<W: AsyncWrite + Unpin>(w: &mut W, id: u64, result: Result<Reply, ClientError>) {
        frame::write(w, &ServerFrame::Reply { id, result })
            .await
            .expect("written");
    }

    /// Reads the next request, an open, and answers it: session `id`, a credential of
    /// bytes `key`, its deadline `expires_at`.
    async fn answer_open<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
        r: &mut R,
        w: &mut W,
        id: u64,
        key: u8,
        expires_at: u64,
    ) {
        let f = next_request(r).await;
        assert!(matches!(f.req, Request::Open { .. }), "{:?}", f.req);
        let reply = Reply::Opened {
            reply: fencelock::Reply::Opened {
                session: SessionId(id),
                expires_at: Tick(expires_at),
            },
            secret: SessionSecret([key; 16]),
            now: 1,
            index: 1,
        };
        answer(w, f.id, Ok(reply)).await;
    }

    fn granted(token: u64) -> Output {
        Output::Granted {
            session: SessionId(1),
            lock: LockName::new("x").unwrap(),
            mode: Mode::Exclusive,
            token: Token(token),
        }
    }

    /// Only the pairs an acquire waits on keep their lock events: a node pushing grants
    /// and timeouts of many names for a session grows nothing, and an acquire's pairs
    /// are gone once it ended.
    #[test]
    fn lock_events_are_kept_only_for_pairs_an_acquire_waits_on() {
        let client = Client::new(vec![]);
        {
            let mut st = client.st();
            st.epoch = 1;
            st.handles.insert(1);
        }
        let push = |name: &str, token: u64| Output::Granted {
            session: SessionId(1),
            lock: LockName::new(name).unwrap(),
            mode: Mode::Exclusive,
            token: Token(token),
        };
        for i in 0..10_000 {
            client.note(push(&format!("n{i}"), i + 1), 1);
            client.note(
                Output::WaitTimedOut {
                    session: SessionId(1),
                    lock: LockName::new(&format!("t{i}")).unwrap(),
                },
                1,
            );
        }
        assert!(client.st().lock_events.is_empty());
        let key = (1, "x".to_string());
        {
            let waiting = Awaiting::new(&client, &key);
            let again = Awaiting::new(&client, &key);
            client.note(push("x", 7), 1);
            client.note(push("y", 8), 1);
            assert_eq!(client.st().lock_events.len(), 1);
            assert_eq!(
                client.st().lock_events.get(&key),
                Some(&Acquired::Granted(Token(7)))
            );
            drop(again);
            assert!(
                client.st().lock_events.contains_key(&key),
                "one still waits"
            );
            drop(waiting);
        }
        let st = client.st();
        assert!(st.lock_events.is_empty() && st.awaiting.is_empty());
    }

    /// A grant and its forced release read in one go, before the waiting acquire looked:
    /// its outcome is `HoldEnded` (it used to find nothing and wait for ever). The end of
    /// another token's hold (an earlier one) leaves the pending grant as it is.
    #[test]
    fn a_grant_ended_before_its_acquire_looked_is_its_outcome() {
        let client = Client::new(vec![]);
        let key = (1, "x".to_string());
        {
            let mut st = client.st();
            st.epoch = 1;
            st.handles.insert(1);
            st.awaiting.insert(key.clone(), 1);
        }
        let released = |token: u64| Output::Released {
            session: SessionId(1),
            lock: LockName::new("x").unwrap(),
            token: Token(token),
            reason: fencelock::ReleaseReason::Released,
        };
        client.note(granted(7), 1);
        client.note(released(7), 1);
        assert_eq!(
            client.st().lock_events.get(&key),
            Some(&Acquired::HoldEnded(Token(7)))
        );
        client.st().lock_events.clear();
        client.note(granted(8), 1);
        client.note(released(5), 1);
        assert_eq!(
            client.st().lock_events.get(&key),
            Some(&Acquired::Granted(Token(8))),
            "an earlier hold's end leaves the pending grant"
        );
    }

    fn done(reply: fencelock::Reply) -> Result<Reply, ClientError> {
        Ok(Reply::Done {
            reply,
            now: 1,
            index: 1,
        })
    }

    /// A node that accepts and then reads nothing holds a request's write, not only its
    /// reply: the write is bounded by the reply timeout too, and the call fails
    /// `Unavailable` instead of waiting for ever (here the connection's first frame, a
    /// token of 60 KiB, may not go out whole: the node's receive buffer is small and never
    /// read). A token past a frame's limit is refused before anything is sent.
    #[tokio::test]
    async fn a_node_that_reads_nothing_fails_the_call_within_its_timeouts() {
        let (addr, _held) = silent_node(Some(4096));
        let with_token = |len| {
            Client::with_options(
                vec![addr.clone()],
                ClientOptions {
                    token: Some("t".repeat(len)),
                    timeouts: impatient(),
                    ..ClientOptions::default()
                },
            )
        };
        match within(with_token(8 << 20).holders("x")).await {
            Err(ClientError::BadRequest(m)) => assert!(m.contains("frame limit"), "{m}"),
            other => panic!("{other:?}"),
        }
        let client = with_token(60 << 10);
        let start = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(10), client.holders("x"))
            .await
            .expect("the call ends");
        assert!(matches!(&r, Err(ClientError::Unavailable(_))), "{r:?}");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
    }

    /// A client the program dropped closes its connection: the reader task holds it
    /// weakly, so the last handle going drops the connection, and its reader stops. (It
    /// held the client, which held the connection: the node saw the connection stay open
    /// until its own idle timeout, 60 s.)
    #[tokio::test]
    async fn a_dropped_client_closes_its_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            let f = next_request(&mut ar).await;
            assert!(matches!(f.req, Request::Holders { .. }), "{:?}", f.req);
            answer(&mut aw, f.id, Ok(Reply::Holders(vec![]))).await;
            // What comes next: the end of the stream, once the client is gone.
            frame::read::<_, ClientFrame>(&mut ar, MAX_CLIENT_FRAME).await
        });
        let client = Client::with_timeouts(vec![addr], impatient());
        assert_eq!(within(client.holders("x")).await, Ok(vec![]));
        drop(client);
        let end = tokio::time::timeout(Duration::from_secs(5), node)
            .await
            .expect("the connection is closed once the client is dropped")
            .unwrap();
        assert!(matches!(end, Ok(None)), "{end:?}");
    }

    /// The first connection goes to the first address given (it went to the second: the
    /// turn moved before the address was taken). Here the second is a node that never
    /// answers, and the call has time for one attempt only.
    #[tokio::test]
    async fn the_first_address_is_tried_first() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let first = listener.local_addr().unwrap().to_string();
        let (second, _held) = silent_node(None);
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            let f = next_request(&mut ar).await;
            answer(&mut aw, f.id, Ok(Reply::Holders(vec![]))).await;
            (ar, aw)
        });
        let client = Client::with_timeouts(vec![first, second], impatient());
        assert_eq!(within(client.holders("x")).await, Ok(vec![]));
        drop(within(node).await.unwrap());
    }

    /// Opening a session passes over an address whose connection is refused for any reason
    /// but the token (here the first node refuses it `BadRequest`, as one this client may
    /// not use is refused) and opens the session on the next, as every other call does: it
    /// stopped at the first such refusal.
    #[tokio::test]
    async fn an_open_passes_over_an_address_it_cannot_use() {
        let refusing = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let serving = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addrs = [&refusing, &serving].map(|l| l.local_addr().unwrap().to_string());
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&refusing).await;
            let f = next_request(&mut ar).await;
            assert!(matches!(f.req, Request::Authenticate { .. }), "{:?}", f.req);
            answer(
                &mut aw,
                f.id,
                Err(ClientError::BadRequest("not here".into())),
            )
            .await;
            let (mut br, mut bw) = accepted(&serving).await;
            let f = next_request(&mut br).await;
            assert!(matches!(f.req, Request::Authenticate { .. }), "{:?}", f.req);
            answer(&mut bw, f.id, Ok(Reply::Authenticated)).await;
            answer_open(&mut br, &mut bw, 7, 1, 100).await;
            (ar, aw, br, bw)
        });
        let client = Client::with_options(
            addrs.to_vec(),
            ClientOptions {
                token: Some("t".into()),
                ..ClientOptions::default()
            },
        );
        let session = within(client.open_session(1000)).await.unwrap();
        assert_eq!(session.id(), 7);
        drop(within(node).await.unwrap());
    }

    /// Connects that keep failing are retried with growing pauses, not every 50 ms: a
    /// node that refuses this client's connection (here its token, `BadRequest`, as a
    /// node refuses a connection for a reason of its own) is dialled some six times in a
    /// 2 s retry time (pauses of 50, 100, 200, 400 and 800 ms), where it was dialled
    /// about forty times; the call still ends with the node's refusal.
    #[tokio::test]
    async fn a_refused_connect_is_retried_with_growing_pauses() {
        let refusing = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = refusing.local_addr().unwrap().to_string();
        let dials = Arc::new(AtomicU64::new(0));
        let count = dials.clone();
        let node = tokio::spawn(async move {
            loop {
                let (mut r, mut w) = accepted(&refusing).await;
                count.fetch_add(1, Ordering::SeqCst);
                let f = next_request(&mut r).await;
                answer(
                    &mut w,
                    f.id,
                    Err(ClientError::BadRequest("not here".into())),
                )
                .await;
            }
        });
        let client = Client::with_options(
            vec![addr],
            ClientOptions {
                token: Some("t".into()),
                timeouts: Timeouts {
                    retry_for: Duration::from_secs(2),
                    ..Timeouts::default()
                },
                ..ClientOptions::default()
            },
        );
        let r = within(client.holders("x")).await;
        assert!(
            matches!(&r, Err(ClientError::BadRequest(m)) if m.contains("not here")),
            "{r:?}"
        );
        let n = dials.load(Ordering::SeqCst);
        assert!((3..=10).contains(&n), "{n} connects in 2 s");
        node.abort();
    }

    /// A `holders` call with a 2 s retry time against `dead` (an address nothing listens
    /// on), if given, and a node on `node_l` that answers each request it reads with the
    /// frame `answer` makes of its id, then drops the connection: the call's result and how
    /// many requests the node read.
    async fn asked_within_a_retry_time(
        node_l: TcpListener,
        dead: Option<String>,
        answer: fn(u64) -> ServerFrame,
    ) -> (Result<Vec<fencelock::Holder>, ClientError>, u64) {
        let addrs = dead
            .into_iter()
            .chain([node_l.local_addr().unwrap().to_string()])
            .collect();
        let asked = Arc::new(AtomicU64::new(0));
        let count = asked.clone();
        let node = tokio::spawn(async move {
            loop {
                let (mut r, mut w) = accepted(&node_l).await;
                let f = next_request(&mut r).await;
                count.fetch_add(1, Ordering::SeqCst);
                let _ = frame::write(&mut w, &answer(f.id)).await;
            }
        });
        let client = Client::with_options(
            addrs,
            ClientOptions {
                timeouts: Timeouts {
                    retry_for: Duration::from_secs(2),
                    ..Timeouts::default()
                },
                ..ClientOptions::default()
            },
        );
        let r = within(client.holders("x")).await;
        node.abort();
        (r, asked.load(Ordering::SeqCst))
    }

    /// A node that takes each request and answers `Unavailable` (no quorum: the other
    /// nodes down) counts as a failed attempt, as a failed connect does: with a dead node
    /// beside it, it is asked about five times in a 2 s retry time, not every 50 ms (its
    /// answer used to restart the count of failures, about twenty times); the call ends
    /// `Unavailable`.
    #[tokio::test]
    async fn a_node_answering_unavailable_is_retried_with_growing_pauses() {
        let live = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead_addr = dead.local_addr().unwrap().to_string();
        drop(dead);
        let (r, n) = asked_within_a_retry_time(live, Some(dead_addr), |id| ServerFrame::Reply {
            id,
            result: Err(ClientError::Unavailable("no quorum".into())),
        })
        .await;
        assert!(matches!(&r, Err(ClientError::Unavailable(_))), "{r:?}");
        assert!((2..=8).contains(&n), "asked {n} times in 2 s");
    }

    /// A node that refuses each request as malformed (an older node that cannot read
    /// it) and drops the connection, as a node does, gives the call its words — it ends
    /// `Unavailable` naming the refusal, not "connection lost" — and counts as a failed
    /// attempt: asked about seven times in a 2 s retry time (one address), not every
    /// 50 ms (about forty).
    #[tokio::test]
    async fn a_node_refusing_a_request_as_malformed_is_retried_with_growing_pauses() {
        let node_l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (r, n) = asked_within_a_retry_time(node_l, None, |_| {
            ServerFrame::Malformed("unknown variant".into())
        })
        .await;
        let m = said(r);
        assert!(
            m.contains("malformed") && m.contains("unknown variant"),
            "{m}"
        );
        assert!((2..=8).contains(&n), "asked {n} times in 2 s");
    }

    /// A node that answers pages of sessions no correct node answers — ids that do not
    /// rise, ids past the page's `next`, more than a page holds — is refused at that page,
    /// not collected from without end.
    #[tokio::test]
    async fn pages_of_sessions_must_rise_and_fit() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let listed = |id: u64| crate::protocol::ListedSession {
            info: SessionInfo {
                id: SessionId(id),
                ttl: 10,
                expires_at: Tick(20),
                holds: 0,
                waits: 0,
                watches: 0,
                last_request: 0,
                label: Default::default(),
            },
            owner: Principal::Anyone,
        };
        let node = tokio::spawn(async move {
            let mut pages = 0u64;
            loop {
                let (mut ar, mut aw) = accepted(&listener).await;
                while let Ok(Some(f)) =
                    frame::read::<_, ClientFrame>(&mut ar, MAX_CLIENT_FRAME).await
                {
                    let Request::Sessions { after, .. } = f.req else {
                        panic!("unexpected {:?}", f.req)
                    };
                    pages += 1;
                    let scan = crate::protocol::SESSIONS_SCAN as u64;
                    let (ids, next): (Vec<u64>, _) = match pages {
                        // Falls back: 5, then 3.
                        1 => (vec![5, 3], Some(2 * scan)),
                        // A good first page (short: it looked SESSIONS_SCAN ids on), then
                        // one that lists its `after` again.
                        2 => (vec![2, 4], Some(scan)),
                        3 => (vec![after], Some(after + scan)),
                        // Past its own `next`.
                        4 => (vec![8], Some(6)),
                        // Creeps on: neither full nor as far as the scan bound.
                        5 => (vec![], Some(1)),
                        // One more than a page may hold.
                        _ => (
                            (1..=u64::from(crate::protocol::SESSIONS_PAGE) + 1).collect(),
                            None,
                        ),
                    };
                    let page = crate::protocol::SessionsPage {
                        sessions: ids.into_iter().map(listed).collect(),
                        next,
                    };
                    answer(&mut aw, f.id, Ok(Reply::Sessions(page))).await;
                }
            }
        });
        let client = Client::with_timeouts(vec![addr], impatient());
        let m = said(within(client.sessions(None)).await);
        assert!(m.contains("lists session 3 after 5"), "{m}");
        let m = said(within(client.sessions(None)).await);
        assert!(
            m.contains("after 10000 lists session 10000 after 10000"),
            "{m}"
        );
        let m = said(within(client.sessions(None)).await);
        assert!(m.contains("lists session 8 after 0 (up to 6)"), "{m}");
        let m = said(within(client.sessions(None)).await);
        assert!(m.contains("goes on at 1, though it is not full"), "{m}");
        // A page of more than a page holds fails as it decodes: the frame is refused, and
        // its connection with it (taken whole, it would be a list of 1001).
        let m = said(within(client.sessions(None)).await);
        assert_eq!(m, "connection lost");
        node.abort();
    }

    /// A node that answers backup and export pages whose total grows with each page (or
    /// is past the limits) cannot make the client collect without end: a total other
    /// than the first page's, or above the limit, is refused at that page.
    #[tokio::test]
    async fn paged_answers_are_held_to_the_first_pages_total_and_the_limits() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            let mut pages = 0u64;
            loop {
                let f = next_request(&mut ar).await;
                pages += 1;
                let r = match f.req {
                    Request::Backup { offset, .. } => {
                        Ok(Reply::Backup(crate::protocol::BackupPage {
                            bytes: vec![0],
                            // One more than received, whatever was said before.
                            total: if offset == 0 && pages > 2 {
                                MAX_BACKUP_BYTES + 1
                            } else {
                                offset + 2
                            },
                            index: 5,
                            node: 1,
                        }))
                    }
                    Request::Export { skip, .. } => {
                        Ok(Reply::Export(crate::protocol::ExportPage {
                            lines: vec![crate::export::line("{}".into())],
                            total: if skip == 0 && pages > 4 {
                                crate::export::MAX_LINES as u64 + 1
                            } else {
                                skip + 2
                            },
                            from_index: 1,
                            to_index: 9,
                            span: None,
                            node: 1,
                        }))
                    }
                    other => panic!("unexpected {other:?}"),
                };
                answer(&mut aw, f.id, r).await;
            }
        });
        let client = Client::with_timeouts(vec![addr], impatient());
        // Pages 1 and 2 (of one byte, as asked): the second says another total.
        let m = said(within(client.backup_paged(1)).await);
        assert!(m.contains("does not fit") && m.contains("3 in all"), "{m}");
        // Page 3: a total past the limit, refused at once.
        let m = said(within(client.backup_paged(1)).await);
        assert!(m.contains("does not fit"), "{m}");
        // Pages 4 and 5 (export): the second says another total; then one past the limit.
        let m = said(within(client.export(Default::default())).await);
        assert!(m.contains("does not fit") && m.contains("3 in all"), "{m}");
        let m = said(within(client.export(Default::default())).await);
        assert!(m.contains("20001 in all"), "{m}");
        node.abort();
    }

    /// The client's connections probe a silent node as the node's probe its clients: an
    /// acquire waiting in a queue sends nothing, and a node gone without a FIN or RST
    /// would otherwise leave it waiting for ever.
    #[tokio::test]
    async fn a_connection_to_a_node_probes_it_when_silent() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let sock = dial(&addr, Duration::from_secs(5)).await.unwrap();
        let s = socket2::SockRef::from(&sock);
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap(), crate::net::KEEPALIVE_IDLE);
        assert_eq!(
            s.tcp_keepalive_interval().unwrap(),
            crate::net::KEEPALIVE_INTERVAL
        );
        assert_eq!(
            s.tcp_keepalive_retries().unwrap(),
            crate::net::KEEPALIVE_PROBES
        );
        assert!(s.tcp_nodelay().unwrap());
    }

    /// A leader named for the first time in a call is followed at once, one named again
    /// after a pause that doubles: a new leader after an election is not kept waiting by
    /// the stale hints that came before it.
    #[test]
    fn a_new_leader_is_followed_at_once_a_repeated_one_after_a_pause() {
        let client = Client::new(vec![]);
        let mut hops = Hops::default();
        let mut hint = |a: &str| {
            client
                .redirected(Some(a.to_string()), &mut hops)
                .as_millis()
        };
        assert_eq!(
            ["a:1", "a:1", "a:1", "b:2", "a:1", "c:3"].map(&mut hint),
            [0, 50, 100, 0, 200, 0]
        );
        assert_eq!(client.st().preferred.as_deref(), Some("c:3"));
        let mut hops = Hops::default();
        assert_eq!(
            client.redirected(None, &mut hops),
            Duration::from_millis(50)
        );
        let bad = client.redirected(Some("a:1\nx".into()), &mut hops);
        assert_eq!(
            (bad, client.st().preferred.clone()),
            (Duration::from_millis(50), None)
        );
    }

    /// A node that answers every request with a redirect to itself (a faulty node, or two
    /// that name each other in an election) is followed at once the first time, then with
    /// a pause that doubles: a few connections in a second, not a reconnect storm; a hint
    /// that is no address is not followed at all.
    #[tokio::test]
    async fn redirects_hop_after_hop_back_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        let me = addr.clone();
        let node = tokio::spawn(async move {
            loop {
                let (a, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let me = me.clone();
                tokio::spawn(async move {
                    let (ar, mut aw) = a.into_split();
                    let mut ar = BufReader::new(ar);
                    while let Ok(Some(f)) =
                        frame::read::<_, ClientFrame>(&mut ar, MAX_CLIENT_FRAME).await
                    {
                        let leader = Some(if matches!(f.req, Request::Holders { .. }) {
                            me.clone()
                        } else {
                            format!("{me}\nvoter 9")
                        });
                        answer(&mut aw, f.id, Err(ClientError::NotLeader { leader })).await;
                    }
                });
            }
        });
        let timeouts = Timeouts {
            retry_for: Duration::from_secs(1),
            ..impatient()
        };
        let client = Client::with_timeouts(vec![addr.clone()], timeouts);
        let r = client.holders("x").await;
        assert!(matches!(r, Err(ClientError::NotLeader { .. })), "{r:?}");
        let n = accepted.swap(0, Ordering::SeqCst);
        assert!((3..=12).contains(&n), "{n} connections in a second");
        // A hint that is no address is not the next address tried.
        let r = client.permits("x").await;
        assert!(matches!(r, Err(ClientError::NotLeader { .. })), "{r:?}");
        assert_eq!(client.st().preferred, None);
        node.abort();
    }

    /// A backup page shorter than asked (a node that would have a backup taken a byte at a
    /// time, a billion requests for a gigabyte) and an export line that is not whole or
    /// not as its checksum says are refused before anything is kept.
    #[tokio::test]
    async fn short_backup_pages_and_damaged_export_lines_are_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            let mut exports = 0;
            loop {
                let f = next_request(&mut ar).await;
                let r = match f.req {
                    Request::Backup { .. } => Ok(Reply::Backup(crate::protocol::BackupPage {
                        bytes: vec![0],
                        total: 1025,
                        index: 5,
                        node: 1,
                    })),
                    Request::Export { .. } => {
                        exports += 1;
                        let good = crate::export::line("{}".into());
                        let bad = match exports {
                            1 => "{}\t00000000".to_string(),
                            2 => format!("{}\n{good}", crate::export::line("{}".into())),
                            3 => "{}".to_string(),
                            _ => "x".repeat(crate::export::MAX_LINE_BYTES + 1),
                        };
                        Ok(Reply::Export(crate::protocol::ExportPage {
                            lines: vec![good, bad],
                            total: 3,
                            from_index: 1,
                            to_index: 9,
                            span: None,
                            node: 1,
                        }))
                    }
                    other => panic!("unexpected {other:?}"),
                };
                answer(&mut aw, f.id, r).await;
            }
        });
        let client = Client::with_timeouts(vec![addr], impatient());
        let m = said(within(client.backup()).await);
        assert!(
            m.contains("does not fit") && m.contains("1 in the page"),
            "{m}"
        );
        let m = said(within(client.backup_paged(512)).await);
        assert!(m.contains("does not fit"), "{m}");
        for why in [
            "line 2 of the recording does not match its checksum",
            "line 2 of the recording holds a line break",
            "line 2 of the recording has no checksum",
            "line 2 of the recording is longer than a recording line may be",
        ] {
            assert_eq!(said(within(client.export(Default::default())).await), why);
        }
        node.abort();
    }

    /// A lock name no input can carry (70 000 bytes) is refused by the client as a node
    /// refuses it, `Core(name_too_long)`, before the request is numbered, and a request
    /// whose frame would pass a node's limit for another reason (a label) is refused
    /// `BadRequest` before it is written; the session goes on. The node answered such a
    /// frame `Malformed` and dropped the connection, so it was retried as a lost
    /// connection until the call's retries ran out, and every later numbered request of
    /// the session repeated it first and failed the same way, for good.
    #[tokio::test]
    async fn a_request_past_the_frame_limit_is_refused_before_it_is_written() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node = tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let (mut ar, mut aw) = accepted(&listener).await;
                if seen.is_empty() {
                    answer_open(&mut ar, &mut aw, 1, 1, 60_000).await;
                    seen.push("open".to_string());
                }
                // A frame past the limit ends this connection (as a node drops it).
                while let Ok(Some(f)) =
                    frame::read::<_, ClientFrame>(&mut ar, MAX_CLIENT_FRAME).await
                {
                    let Request::Acquire { lock, .. } = f.req else {
                        panic!("unexpected {:?}", f.req)
                    };
                    seen.push(lock);
                    let reply = fencelock::Reply::Granted {
                        mode: Mode::Exclusive,
                        token: Token(5),
                    };
                    let done = Reply::Done {
                        reply,
                        now: 1,
                        index: 2,
                    };
                    answer(&mut aw, f.id, Ok(done)).await;
                    if seen.len() == 2 {
                        return seen;
                    }
                }
                seen.push("a frame past the limit".to_string());
            }
        });
        let client = Client::with_timeouts(vec![addr], impatient());
        let s = within(client.open_session(60_000)).await.expect("opened");
        let long = "n".repeat(70_000);
        match within(s.acquire(&long, Mode::Exclusive, WaitSpec::None)).await {
            Err(ClientError::Core(e)) => assert_eq!(e.kind, "name_too_long"),
            other => panic!("{other:?}"),
        }
        for r in [
            within(s.release(&long)).await.map(|_| ()),
            within(s.watch(&long)).await.map(|_| ()),
            within(s.cancel(&long)).await,
            within(s.unwatch(&long)).await,
        ] {
            assert!(
                matches!(&r, Err(ClientError::Core(e)) if e.kind == "name_too_long"),
                "{r:?}"
            );
        }
        // A frame past the limit for another reason (a label) is refused before it is
        // sent, as `BadRequest`.
        match within(client.open_labeled(60_000, &long))
            .await
            .map(|s| s.id())
        {
            Err(ClientError::BadRequest(m)) => {
                assert!(m.contains("past the 65536-byte frame limit"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        let got = within(s.acquire("x", Mode::Exclusive, WaitSpec::None)).await;
        assert_eq!(got, Ok(Acquired::Granted(Token(5))));
        // Nothing but the open and the acquire of `x` reached the node.
        assert_eq!(within(node).await.unwrap(), ["open", "x"]);
    }

    /// Calls waiting for another call's connect give up at the end of their own retry
    /// time: here every connect hangs on a node that never answers the token (one reply
    /// timeout, 1 s, each), and ten calls that may retry for 200 ms all fail within about
    /// one connect. Each waited for every connect queued before its own, so the last
    /// failed after about ten seconds.
    #[tokio::test]
    async fn a_call_waits_for_another_calls_connect_no_longer_than_its_retry_time() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let (mut ar, aw) = accepted(&listener).await;
                let f = next_request(&mut ar).await;
                assert!(matches!(f.req, Request::Authenticate { .. }), "{:?}", f.req);
                held.push((ar, aw)); // never answered
            }
        });
        let client = Client::with_options(
            vec![addr],
            ClientOptions {
                token: Some("t".into()),
                timeouts: Timeouts {
                    connect: Duration::from_millis(300),
                    reply: Duration::from_secs(1),
                    retry_for: Duration::from_millis(200),
                    ..Timeouts::default()
                },
                ..ClientOptions::default()
            },
        );
        let start = Instant::now();
        let calls: Vec<_> = (0..10)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move { c.holders("x").await })
            })
            .collect();
        for c in calls {
            let r = within(c).await.unwrap();
            assert!(matches!(r, Err(ClientError::Unavailable(_))), "{r:?}");
        }
        // One connect's reply timeout, plus the retry time; not ten connects.
        let took = start.elapsed();
        assert!(took < Duration::from_secs(5), "{took:?}");
        node.abort();
    }

    /// A queued acquire on a node that stops answering (a hung process: the connection
    /// stays open, nothing is pushed) asks the node its hold after a reply timeout, drops
    /// the connection when no answer comes, and repeats its request on the next, where
    /// the core answers that its wait ended. It waited for a push for ever.
    #[tokio::test]
    async fn a_queued_acquire_finds_out_that_its_node_stopped() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            answer_open(&mut ar, &mut aw, 1, 1, 60_000).await;
            let f = next_request(&mut ar).await;
            let Request::Acquire { request, .. } = f.req else {
                panic!("{:?}", f.req)
            };
            let queued = fencelock::Reply::Queued {
                mode: Mode::Exclusive,
                position: 1,
            };
            let done = |reply| Reply::Done {
                reply,
                now: 1,
                index: 2,
            };
            answer(&mut aw, f.id, Ok(done(queued))).await;
            // Stopped: what comes is read, and never answered.
            let f = next_request(&mut ar).await;
            assert!(
                matches!(&f.req, Request::Hold { lock, session: 1 } if lock == "x"),
                "{:?}",
                f.req
            );
            // The next connection: the acquire again, with its number, which the core
            // answers as it stands now.
            let (mut br, mut bw) = accepted(&listener).await;
            let mut f = next_request(&mut br).await;
            if matches!(f.req, Request::KeepAlive { .. }) {
                let kept = fencelock::Reply::KeptAlive {
                    expires_at: Tick(60_000),
                };
                answer(&mut bw, f.id, Ok(done(kept))).await;
                f = next_request(&mut br).await;
            }
            assert!(
                matches!(&f.req, Request::Acquire { request: r, .. } if *r == request),
                "{:?}",
                f.req
            );
            answer(&mut bw, f.id, Ok(done(fencelock::Reply::WaitEnded))).await;
            (ar, aw, br, bw)
        });
        let client = Client::with_timeouts(vec![addr], impatient());
        let s = within(client.open_session(60_000)).await.expect("opened");
        let got = within(s.acquire("x", Mode::Exclusive, WaitSpec::ForMs(1000))).await;
        assert_eq!(got, Ok(Acquired::WaitEnded));
        let _conns = within(node).await.unwrap();
    }

    /// An acquire that went out, then met a node that refused the client's token on the
    /// next connection, ends with its outcome unknown (`Unavailable`), not with the
    /// refusal, which says nothing of the attempt that went out: so the acquire stays to
    /// be settled, and its retry repeats its number. It ended `Unauthenticated`, taken as
    /// never applied, and the wait or hold the first attempt may have left was forgotten.
    #[tokio::test]
    async fn a_refused_reconnect_leaves_an_acquire_that_went_out_unsettled() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node = tokio::spawn(async move {
            // First connection: the open, then an acquire that is read and never answered.
            let (mut ar, mut aw) = accepted(&listener).await;
            let f = next_request(&mut ar).await;
            assert!(matches!(f.req, Request::Authenticate { .. }), "{:?}", f.req);
            answer(&mut aw, f.id, Ok(Reply::Authenticated)).await;
            answer_open(&mut ar, &mut aw, 1, 1, 60_000).await;
            let f = next_request(&mut ar).await;
            let Request::Acquire { request: first, .. } = f.req else {
                panic!("{:?}", f.req)
            };
            drop((ar, aw));
            // Then this node no longer takes the token.
            let (mut br, mut bw) = accepted(&listener).await;
            let f = next_request(&mut br).await;
            assert!(matches!(f.req, Request::Authenticate { .. }), "{:?}", f.req);
            answer(&mut bw, f.id, Err(ClientError::Unauthenticated)).await;
            // Then it does again: the retry carries the first attempt's number.
            let (mut cr, mut cw) = accepted(&listener).await;
            loop {
                let f = next_request(&mut cr).await;
                let reply = match f.req {
                    Request::Authenticate { .. } => Reply::Authenticated,
                    Request::KeepAlive { .. } => Reply::Done {
                        reply: fencelock::Reply::KeptAlive {
                            expires_at: Tick(60_000),
                        },
                        now: 1,
                        index: 3,
                    },
                    Request::Acquire { request, .. } => {
                        assert_eq!(request, first, "the retry repeats the number");
                        let granted = fencelock::Reply::Granted {
                            mode: Mode::Exclusive,
                            token: Token(9),
                        };
                        answer(&mut cw, f.id, done(granted)).await;
                        return (br, bw, cr, cw);
                    }
                    other => panic!("{other:?}"),
                };
                answer(&mut cw, f.id, Ok(reply)).await;
            }
        });
        let client = Client::with_options(
            vec![addr],
            ClientOptions {
                token: Some("t".into()),
                timeouts: Timeouts {
                    retry_for: Duration::from_millis(500),
                    ..impatient()
                },
                ..ClientOptions::default()
            },
        );
        let s = within(client.open_session(60_000)).await.expect("opened");
        match within(s.acquire("x", Mode::Exclusive, WaitSpec::None)).await {
            Err(ClientError::Unavailable(m)) => {
                assert!(m.contains("after an attempt that went out"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        let got = within(s.acquire("x", Mode::Exclusive, WaitSpec::None)).await;
        assert_eq!(got, Ok(Acquired::Granted(Token(9))));
        let _conns = within(node).await.unwrap();
    }

    /// A node that answers the re-attaching keep-alive `NotLeader`, naming itself, is
    /// followed with the redirect's pauses (50 ms doubling to 1 s): a few connections in
    /// the call's second of retries. The re-attach path paused 50 ms each time, about
    /// twenty connections a second, each dial and keep-alive again.
    #[tokio::test]
    async fn a_redirect_met_while_reattaching_is_followed_with_its_pauses() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let me = addr.clone();
        let accepted_n = Arc::new(AtomicU64::new(0));
        let count = accepted_n.clone();
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            answer_open(&mut ar, &mut aw, 1, 1, 60_000).await;
            drop((ar, aw));
            loop {
                let (mut r, mut w) = accepted(&listener).await;
                count.fetch_add(1, Ordering::SeqCst);
                let f = next_request(&mut r).await;
                assert!(matches!(f.req, Request::KeepAlive { .. }), "{:?}", f.req);
                let leader = Some(me.clone());
                answer(&mut w, f.id, Err(ClientError::NotLeader { leader })).await;
            }
        });
        let client = Client::with_timeouts(
            vec![addr],
            Timeouts {
                retry_for: Duration::from_secs(1),
                ..impatient()
            },
        );
        let _s = within(client.open_session(60_000)).await.expect("opened");
        // Wait for the first connection to be seen closed, then call.
        let mut changed = client.inner.changed.subscribe();
        while client.connected() {
            within(changed.changed()).await.unwrap();
        }
        let r = within(client.holders("x")).await;
        assert!(matches!(r, Err(ClientError::NotLeader { .. })), "{r:?}");
        let n = accepted_n.load(Ordering::SeqCst);
        assert!(
            (2..=10).contains(&n),
            "{n} connections in a second of retries"
        );
        node.abort();
    }

    /// The acquires a client has waiting on one connection share one probe a reply
    /// timeout: four of them, waiting 2.2 s (300 ms reply timeouts), cost about four
    /// reads, not four times as many.
    #[tokio::test]
    async fn waiting_acquires_share_one_probe() {
        const N: u64 = 4;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let probes = Arc::new(AtomicU64::new(0));
        let count = probes.clone();
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            let mut opened = 0u64;
            loop {
                let f = next_request(&mut ar).await;
                let reply = match f.req {
                    Request::Open { .. } => {
                        opened += 1;
                        Reply::Opened {
                            reply: fencelock::Reply::Opened {
                                session: SessionId(opened),
                                expires_at: Tick(60_000),
                            },
                            secret: SessionSecret([opened as u8; 16]),
                            now: 1,
                            index: 1,
                        }
                    }
                    Request::Acquire { .. } => Reply::Done {
                        reply: fencelock::Reply::Queued {
                            mode: Mode::Exclusive,
                            position: 1,
                        },
                        now: 1,
                        index: 2,
                    },
                    Request::Hold { .. } => {
                        count.fetch_add(1, Ordering::SeqCst);
                        Reply::Hold(None)
                    }
                    other => panic!("{other:?}"),
                };
                answer(&mut aw, f.id, Ok(reply)).await;
            }
        });
        let client = Client::with_timeouts(vec![addr], impatient());
        let mut waiting = Vec::new();
        for _ in 0..N {
            let s = within(client.open_session(60_000)).await.expect("opened");
            waiting.push(tokio::spawn(async move {
                s.acquire("x", Mode::Exclusive, WaitSpec::Forever).await
            }));
        }
        // Each wakes every 500 ms and probes once quiet for 300 ms: four rounds in 2.2 s,
        // one probe each when shared, sixteen when not.
        tokio::time::sleep(Duration::from_millis(2200)).await;
        let n = probes.load(Ordering::SeqCst);
        assert!((2..=8).contains(&n), "{n} probes");
        for w in waiting {
            w.abort();
        }
        node.abort();
    }

    /// A backup or export page is waited for [`PAGE_REPLY_TIME`] at least, whatever the
    /// client's reply timeout: the leader may wait for its rebuild turn and rebuild the
    /// state for each page. With the reply timeout (300 ms here) the page was given up,
    /// and the connection the client's sessions share with it dropped.
    #[tokio::test]
    async fn a_page_is_waited_for_longer_than_a_reply() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            let f = next_request(&mut ar).await;
            assert!(matches!(f.req, Request::Export { .. }), "{:?}", f.req);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let page = crate::protocol::ExportPage {
                lines: vec![crate::export::line("{}".into())],
                total: 1,
                from_index: 1,
                to_index: 1,
                span: None,
                node: 1,
            };
            answer(&mut aw, f.id, Ok(Reply::Export(page))).await;
            (ar, aw)
        });
        let client = Client::with_timeouts(vec![addr], impatient());
        let (lines, page) = within(client.export(Default::default()))
            .await
            .expect("the page, late");
        assert_eq!(lines.len(), 1);
        assert_eq!(page.node, 1);
        let _conn = within(node).await.unwrap();
    }

    /// A new connection re-attaches its sessions side by side, not one replicated
    /// keep-alive after another while every other call waits: here the node answers none
    /// of the keep-alives until it has read them all (one at a time, the second would never
    /// come, and the read below would wait for ever).
    #[tokio::test]
    async fn sessions_are_reattached_side_by_side() {
        const N: u64 = 5;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let client = Client::new(vec![addr]);
        let node = tokio::spawn(async move {
            {
                let (mut ar, mut aw) = accepted(&listener).await;
                for id in 1..=N {
                    answer_open(&mut ar, &mut aw, id, id as u8, 60_000).await;
                }
            } // the first connection is dropped
            let (mut ar, mut aw) = accepted(&listener).await;
            let mut ids = Vec::new();
            let mut sessions = std::collections::BTreeSet::new();
            while ids.len() < N as usize {
                let f = next_request(&mut ar).await;
                match f.req {
                    Request::KeepAlive { session, .. } => {
                        sessions.insert(session);
                        ids.push(f.id);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(sessions, (1..=N).collect(), "each session once");
            for id in ids {
                let kept = fencelock::Reply::KeptAlive {
                    expires_at: Tick(60_000),
                };
                answer(&mut aw, id, done(kept)).await;
            }
            let f = next_request(&mut ar).await;
            assert!(matches!(f.req, Request::Holders { .. }), "{:?}", f.req);
            answer(&mut aw, f.id, Ok(Reply::Holders(vec![]))).await;
            (ar, aw)
        });
        let mut held = Vec::new();
        for _ in 0..N {
            held.push(client.open_session(60_000).await.unwrap());
        }
        let r = holders_after_reconnect(&client).await;
        assert_eq!(r, Ok(vec![]), "the read is served on the new connection");
        assert!(
            held.iter().all(|s| !s.is_lost()),
            "every session re-attached"
        );
        let _conn = within(node).await.unwrap();
    }

    /// A session the node refuses to re-attach on a new connection (its keep-alive
    /// `Forbidden`: the token no longer allowed to) is lost, and the connection serves the
    /// client's other sessions and its reads. Before, the refusal failed the whole connect,
    /// so every call of the client failed with it.
    #[tokio::test]
    async fn a_session_refused_at_reattach_is_lost_and_the_rest_goes_on() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let client = Client::new(vec![addr]);
        let node = tokio::spawn(async move {
            {
                let (mut ar, mut aw) = accepted(&listener).await;
                for id in [1, 2] {
                    answer_open(&mut ar, &mut aw, id, id as u8, 60_000).await;
                }
            } // the first connection is dropped
            let (mut ar, mut aw) = accepted(&listener).await;
            loop {
                let f = next_request(&mut ar).await;
                let r = match f.req {
                    Request::KeepAlive { session: 1, .. } => Err(ClientError::Forbidden(
                        "this token may not keep sessions alive".into(),
                    )),
                    Request::KeepAlive { .. } => Ok(Reply::Done {
                        reply: fencelock::Reply::KeptAlive {
                            expires_at: Tick(60_000),
                        },
                        now: 1,
                        index: 2,
                    }),
                    Request::Holders { .. } => Ok(Reply::Holders(vec![])),
                    other => panic!("unexpected {other:?}"),
                };
                let read = matches!(r, Ok(Reply::Holders(_)));
                answer(&mut aw, f.id, r).await;
                if read {
                    return (ar, aw);
                }
            }
        });
        let one = client.open_session(60_000).await.unwrap();
        let two = client.open_session(60_000).await.unwrap();
        let r = holders_after_reconnect(&client).await;
        assert_eq!(r, Ok(vec![]), "the read is served");
        assert!(one.is_lost(), "the refused session is lost");
        assert!(!two.is_lost(), "the other is not");
        let _conn = node.await.unwrap();
    }

    /// A cancel that settles a dropped acquire does not report the wait withdrawn while
    /// the node refuses, for a while, the read that finds it (its bound on unread lists,
    /// which other clients hold): the cancel fails with that refusal and keeps the mark,
    /// and the next one finds the wait and cancels it. Before, the refusal was taken as
    /// "cannot be settled", the cancel answered `Ok` and the wait stayed queued.
    #[tokio::test]
    async fn a_read_refused_for_a_while_does_not_settle_a_dropped_acquire() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let client = Client::new(vec![addr]);
        let (sent_tx, sent_rx) = tokio::sync::oneshot::channel::<()>();
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            answer_open(&mut ar, &mut aw, 1, 1, 60_000).await;
            // The acquire: read, never answered (its caller drops it).
            let f = next_request(&mut ar).await;
            assert!(matches!(f.req, Request::Acquire { .. }), "{:?}", f.req);
            sent_tx.send(()).unwrap();
            let queued = || {
                Ok(Reply::Done {
                    reply: fencelock::Reply::Queued {
                        mode: Mode::Exclusive,
                        position: 1,
                    },
                    now: 1,
                    index: 2,
                })
            };
            let mut seen = Vec::new();
            let mut waiters_read = 0;
            loop {
                let f = next_request(&mut ar).await;
                seen.push(
                    format!("{:?}", f.req)
                        .split([' ', '{'])
                        .next()
                        .unwrap()
                        .to_string(),
                );
                let r = match f.req {
                    Request::Acquire { .. } => queued(),
                    Request::Waiters { .. } => {
                        waiters_read += 1;
                        if waiters_read == 1 {
                            Err(ClientError::Limit {
                                kind: "unwritten_lists".into(),
                                message: "retry once they are read".into(),
                            })
                        } else {
                            Ok(Reply::Waiters(vec![fencelock::Waiter {
                                session: SessionId(1),
                                mode: Mode::Exclusive,
                                deadline: None,
                                label: Default::default(),
                            }]))
                        }
                    }
                    Request::Cancel { .. } => Ok(Reply::Done {
                        reply: fencelock::Reply::Cancelled,
                        now: 1,
                        index: 3,
                    }),
                    other => panic!("unexpected {other:?}"),
                };
                let cancelled = seen.last().is_some_and(|k| k == "Cancel");
                answer(&mut aw, f.id, r).await;
                if cancelled {
                    return seen;
                }
            }
        });
        let session = client.open_session(60_000).await.unwrap();
        tokio::select! {
            _ = session.acquire("x", Mode::Exclusive, WaitSpec::Forever) => panic!("answered"),
            _ = sent_rx => {} // the acquire went out: dropped now, its outcome unknown
        }
        let r = session.cancel("x").await;
        assert!(
            matches!(&r, Err(ClientError::Limit { kind, .. }) if kind == "unwritten_lists"),
            "{r:?}"
        );
        session
            .cancel("x")
            .await
            .expect("the second cancel withdraws the wait");
        let seen = tokio::time::timeout(Duration::from_secs(10), node)
            .await
            .expect("a Cancel reached the node")
            .unwrap();
        assert_eq!(
            seen,
            ["Acquire", "Waiters", "Acquire", "Waiters", "Cancel"],
            "each cancel repeats the acquire and reads the queue; the second withdraws"
        );
    }

    /// A dropped session leaves nothing in its client: not its credential, its lost mark
    /// or its lock events, even when the service pushes its end or a grant after the drop
    /// (a client that opens and drops sessions for days grew by each).
    #[tokio::test]
    async fn a_dropped_session_leaves_nothing_in_its_client() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let client = Client::new(vec![addr]);
        // As if an acquire waited on each pair the node pushes about (only those pairs'
        // events are kept).
        for key in [(1, "x"), (2, "x"), (2, "y")] {
            client.st().awaiting.insert((key.0, key.1.to_string()), 1);
        }
        let (late_tx, late_rx) = tokio::sync::oneshot::channel::<()>();
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            for id in [1, 2] {
                answer_open(&mut ar, &mut aw, id, id as u8, 10_000).await;
            }
            // Session 1 is granted "x", then expires; session 2 is granted "x" too.
            for push in [
                granted(5),
                Output::SessionExpired {
                    session: SessionId(1),
                },
                Output::Granted {
                    session: SessionId(2),
                    lock: LockName::new("x").unwrap(),
                    mode: Mode::Exclusive,
                    token: Token(6),
                },
            ] {
                frame::write(&mut aw, &ServerFrame::Push(push))
                    .await
                    .unwrap();
            }
            // After session 1's handle is dropped: a late grant and end for it, then an
            // event of session 2 that says the late ones were read.
            late_rx.await.unwrap();
            for push in [
                granted(7),
                Output::SessionExpired {
                    session: SessionId(1),
                },
                Output::WaitTimedOut {
                    session: SessionId(2),
                    lock: LockName::new("y").unwrap(),
                },
            ] {
                frame::write(&mut aw, &ServerFrame::Push(push))
                    .await
                    .unwrap();
            }
            (ar, aw)
        });
        let one = client.open_session(10_000).await.unwrap();
        let two = client.open_session(10_000).await.unwrap();
        let mut changed = client.inner.changed.subscribe();
        tokio::time::timeout(
            Duration::from_secs(10),
            changed.wait_for(|_| {
                let st = client.st();
                st.lost.contains(&1) && st.lock_events.contains_key(&(2, "x".to_string()))
            }),
        )
        .await
        .expect("the pushes arrived")
        .unwrap();
        assert!(one.is_lost());
        drop(one);
        let nothing_of_one = |when: &str| {
            let st = client.st();
            assert!(!st.lost.contains(&1), "{when}: the lost mark stayed");
            assert!(
                !st.lock_events.keys().any(|(s, _)| *s == 1),
                "{when}: its lock events stayed"
            );
            assert!(
                !st.attached.contains_key(&1),
                "{when}: its credential stayed"
            );
            assert!(st.attached.contains_key(&2), "the other session's went too");
            assert!(st.lock_events.contains_key(&(2, "x".to_string())));
        };
        nothing_of_one("dropped");
        late_tx.send(()).unwrap();
        tokio::time::timeout(
            Duration::from_secs(10),
            changed.wait_for(|_| client.st().lock_events.contains_key(&(2, "y".to_string()))),
        )
        .await
        .expect("the late pushes arrived")
        .unwrap();
        drop(changed);
        nothing_of_one("after late pushes");
        drop(two);
        {
            let st = client.st();
            assert!(st.attached.is_empty(), "a credential stayed");
            assert!(st.lock_events.is_empty(), "a lock event stayed");
        }
        let _conn = node.await.unwrap();
    }

    /// A waiting acquire that finds its session lost answers `SessionLost`, even when a
    /// grant was pushed before the loss: the session's expiry released that hold, and a
    /// `Granted` would start a holder on a lock it no longer has.
    #[tokio::test]
    async fn a_waiting_acquire_of_a_lost_session_is_not_granted() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let client = Client::new(vec![addr]);
        let node = tokio::spawn(async move {
            let (mut ar, mut aw) = accepted(&listener).await;
            answer_open(&mut ar, &mut aw, 1, 7, 10_000).await;
            let f = next_request(&mut ar).await;
            assert!(matches!(f.req, Request::Acquire { .. }), "{:?}", f.req);
            let queued = fencelock::Reply::Queued {
                mode: Mode::Exclusive,
                position: 1,
            };
            answer(&mut aw, f.id, done(queued)).await;
            // The grant, then the session's expiry, in one write: the client reads both
            // before the acquire looks again.
            let mut both = frame::encode(&ServerFrame::Push(granted(5))).unwrap();
            both.extend(
                frame::encode(&ServerFrame::Push(Output::SessionExpired {
                    session: SessionId(1),
                }))
                .unwrap(),
            );
            aw.write_all(&both).await.unwrap();
            (ar, aw)
        });
        let session = client.open_session(10_000).await.unwrap();
        let got = within(session.acquire("x", Mode::Exclusive, WaitSpec::Forever))
            .await
            .unwrap();
        assert_eq!(got, Acquired::SessionLost);
        assert!(client.st().lock_events.is_empty(), "the grant was not kept");
        let _conn = node.await.unwrap();
    }

    /// A node that redirected the client (here: answered an acquire `NotLeader`) keeps
    /// its end of the connection open and later pushes a grant on it, as a deposed leader
    /// applying entries late does. The client closes that connection when it drops it —
    /// the node's writes then fail — and never takes the old push: its acquire, queued on
    /// the new connection, ends with the grant pushed there. Before, the old connection's
    /// reader lived on and its `Granted(7)` completed the acquire.
    #[tokio::test]
    async fn a_dropped_connection_is_closed_and_its_pushes_ignored() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let client = Client::new(vec![addr.clone()]);
        let mut pushes = client.subscribe();
        let node = tokio::spawn(async move {
            // The first connection: the open, then the acquire, redirected back here.
            let (mut ar, mut aw) = accepted(&listener).await;
            answer_open(&mut ar, &mut aw, 1, 7, 10_000).await;
            let f = next_request(&mut ar).await;
            assert!(matches!(f.req, Request::Acquire { .. }), "{:?}", f.req);
            let leader = Some(addr);
            answer(&mut aw, f.id, Err(ClientError::NotLeader { leader })).await;
            // The second: the keep-alive that re-attaches the session, then the acquire
            // again, queued.
            let (mut br, mut bw) = accepted(&listener).await;
            let f = next_request(&mut br).await;
            assert!(matches!(f.req, Request::KeepAlive { .. }), "{:?}", f.req);
            let kept = fencelock::Reply::KeptAlive {
                expires_at: Tick(10_000),
            };
            answer(&mut bw, f.id, done(kept)).await;
            let f = next_request(&mut br).await;
            assert!(matches!(f.req, Request::Acquire { .. }), "{:?}", f.req);
            let queued = fencelock::Reply::Queued {
                mode: Mode::Exclusive,
                position: 1,
            };
            answer(&mut bw, f.id, done(queued)).await;
            // The old connection pushes a stale grant. The client closed it, so the
            // writes fail soon (the first may still be buffered; the reset ends the rest).
            let stale = frame::encode(&ServerFrame::Push(granted(7))).unwrap();
            let mut closed = false;
            for _ in 0..250 {
                if aw.write_all(&stale).await.is_err() {
                    closed = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // The current connection pushes the grant of the queued acquire.
            frame::write(&mut bw, &ServerFrame::Push(granted(8)))
                .await
                .unwrap();
            (closed, bw)
        });
        let session = client.open_session(10_000).await.unwrap();
        let got = session
            .acquire("x", Mode::Exclusive, WaitSpec::Forever)
            .await
            .unwrap();
        assert_eq!(
            got,
            Acquired::Granted(Token(8)),
            "the old connection's grant"
        );
        let (closed, _bw) = node.await.unwrap();
        assert!(closed, "the dropped connection was never closed");
        match pushes.try_recv() {
            Ok(Output::Granted { token, .. }) => assert_eq!(token, Token(8)),
            other => panic!("expected the new connection's grant, got {other:?}"),
        }
        assert!(
            pushes.try_recv().is_err(),
            "subscribers got a push of the old connection"
        );
    }

    /// The fake clock of `a_suspend_longer_than_the_safe_window_makes_the_lease_unsafe`.
    static FAKE_MS: AtomicU64 = AtomicU64::new(5_000_000);

    fn fake_ms() -> u64 {
        FAKE_MS.load(Ordering::SeqCst)
    }

    /// The lease is timed by the guard's clock from the moment the open was sent on that
    /// clock, so time that passed on it — a suspend during the open, or after — counts:
    /// past the safe window (ttl − margin after the open), the lease is unsafe at the next
    /// look, with no keep-alive attempt in between.
    #[tokio::test]
    async fn a_suspend_longer_than_the_safe_window_makes_the_lease_unsafe() {
        // A session on a client with nowhere to send its keep-alives.
        let client = Client::new(vec![]);
        let session = Arc::new(Session {
            client,
            id: 1,
            secret: SessionSecret([7; 16]),
            requests: Default::default(),
            background: Default::default(),
        });
        let opened_at = fake_ms();
        // The open took 3 s on this clock (a suspend while it was out).
        FAKE_MS.fetch_add(3_000, Ordering::SeqCst);
        let clock = LeaseClock {
            origin: opened_at,
            read: fake_ms,
        };
        let guard = LeaseGuard::start_on(session, 10_000, 2_500, 2_000, clock).unwrap();
        assert!(guard.may_act(), "3 s after the open");
        // The deadline a supervisor is handed: ttl − margin after the open, on this clock.
        let until = LeaseInstant::from_millis(opened_at + 8_000);
        assert_eq!(guard.safe_until(), Some(until));
        FAKE_MS.fetch_add(4_999, Ordering::SeqCst);
        assert!(guard.may_act(), "inside ttl - margin of the open");
        FAKE_MS.fetch_add(1, Ordering::SeqCst);
        assert!(!guard.may_act(), "ttl - margin after the open");
        assert_eq!(guard.safe_until(), None, "not safe: no deadline");
    }

    /// A loss the client already knows of ends the lease at the next look: the guard does
    /// not wait for its own next keep-alive to find out (with a keep-alive interval of a
    /// quarter of the ttl, a holder could act for that long on a session the client had
    /// been told was gone).
    #[tokio::test]
    async fn a_session_the_client_knows_lost_ends_the_lease_at_once() {
        let client = Client::new(vec![]);
        let session = Arc::new(Session {
            client: client.clone(),
            id: 1,
            secret: SessionSecret([7; 16]),
            requests: Default::default(),
            background: Default::default(),
        });
        client.st().handles.insert(1);
        let now = lease_clock_ms();
        let clock = LeaseClock {
            origin: now,
            read: lease_clock_ms,
        };
        let guard = LeaseGuard::start_on(session, 60_000, 15_000, 2_000, clock).unwrap();
        assert!(guard.may_act(), "just opened");
        // The client hears the session is gone (a push, a refused re-attach).
        client.lose(1);
        assert!(!guard.may_act(), "the client knows the session is lost");
        assert_eq!(guard.lease(), fencelock::Lease::Expired);
    }

    /// On Linux the guard's clock is `CLOCK_BOOTTIME`, which a suspend advances, not the
    /// monotonic clock `Instant` reads, which it does not. The two differ only on a host
    /// that has been suspended since boot; there, the test also tells them apart.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_lease_clock_is_boottime_on_linux() {
        use nix::time::{clock_gettime, ClockId};
        let ms = |c| {
            let t = clock_gettime(c).unwrap();
            t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000
        };
        let mono = ms(ClockId::CLOCK_MONOTONIC);
        let before = ms(ClockId::CLOCK_BOOTTIME);
        let got = LeaseInstant::now().0;
        let after = ms(ClockId::CLOCK_BOOTTIME);
        assert!(
            before <= got && got <= after,
            "{before} <= {got} <= {after}"
        );
        if before > mono + 1_000 {
            assert!(
                got > mono + 1_000,
                "suspended since boot: not the monotonic clock"
            );
        }
    }
}
