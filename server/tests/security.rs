//! Attacks on a three-node cluster over the real TCP transport on 127.0.0.1, each made the
//! way a hostile local program would make it — raw protocol frames on a connection of its
//! own — and each expected to be refused with nothing changed for the victim.
//!
//! Session ownership: a session id is public (reads print it), so the attacker knows the
//! victim's id; it does not know the victim's credential, and tries a made-up one.

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock::{Mode, Output};
use fencelock_server::auth::{token_hash, Tokens};
use fencelock_server::auth::{OpenKey, Principal, SessionSecret};
use fencelock_server::client::ClientOptions;
use fencelock_server::client::{Acquired, Client, Session};
use fencelock_server::frame;
use fencelock_server::net::{
    serve_clients_with, serve_raft, serve_raft_with, ClientPolicy, TlsNetwork,
};
use fencelock_server::node::{Node, NodeConfig};
use fencelock_server::protocol::{
    ClientError, ClientFrame, ListedSession, Reply, Request, ServerFrame, WaitSpec,
};
use fencelock_server::tls::{client_config_from, node_name, DevCa, NodeTls};
use fencelock_server::types::NodeAddr;
use openraft::raft::VoteRequest;
use openraft::Vote;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use common::TcpNodes as Tcp;

/// The largest request number a node accepts (a larger one is refused as a limit before
/// anything else: `numbers_a_client_chooses_cannot_make_the_history_unexportable`).
const LARGEST: u64 = fencelock_server::export::MAX_NUMBER;

async fn start(name: &str) -> Tcp {
    start_with(name, ClientPolicy::default()).await
}

async fn start_with(name: &str, policy: ClientPolicy) -> Tcp {
    Tcp::start(name, |node, r, c| {
        tokio::spawn(serve_raft(r, node.elector().clone()));
        tokio::spawn(serve_clients_with(c, node.clone(), policy.clone()));
    })
    .await
}

impl Tcp {
    fn client(&self) -> Client {
        self.client_with(ADMIN)
    }

    fn client_with(&self, token: &str) -> Client {
        Client::with_options(
            self.addrs.iter().map(|a| a.client.clone()).collect(),
            ClientOptions {
                token: Some(token.into()),
                tls: None,
                ..ClientOptions::default()
            },
        )
    }

    /// A raw connection to the current leader's client port.
    async fn attacker(&self) -> Raw {
        let i = self.leader_within(500).await;
        let s = TcpStream::connect(&self.addrs[i].client).await.unwrap();
        Raw { s, id: 0 }
    }
}

/// A hostile client speaking the protocol by hand.
struct Raw {
    s: TcpStream,
    id: u64,
}

impl Raw {
    /// Sends `req` and returns its answer; pushes that arrive meanwhile are returned too.
    async fn call(&mut self, req: Request) -> (Result<Reply, ClientError>, Vec<Output>) {
        self.id += 1;
        let id = self.id;
        frame::write(&mut self.s, &ClientFrame { id, req })
            .await
            .unwrap();
        let mut pushes = Vec::new();
        loop {
            let f = tokio::time::timeout(
                Duration::from_secs(10),
                frame::read::<_, ServerFrame>(&mut self.s, frame::MAX_CLIENT_FRAME),
            )
            .await
            .expect("an answer")
            .unwrap();
            match f {
                Some(ServerFrame::Reply { id: got, result }) if got == id => {
                    return (result, pushes)
                }
                Some(ServerFrame::Push(o)) => pushes.push(o),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// Every push that arrives within `d`.
    async fn pushes_within(&mut self, d: Duration) -> Vec<Output> {
        let mut v = Vec::new();
        let end = tokio::time::Instant::now() + d;
        while let Ok(f) = tokio::time::timeout_at(
            end,
            frame::read::<_, ServerFrame>(&mut self.s, frame::MAX_CLIENT_FRAME),
        )
        .await
        {
            match f {
                Ok(Some(ServerFrame::Push(o))) => v.push(o),
                Ok(Some(other)) => panic!("unexpected {other:?}"),
                _ => break,
            }
        }
        v
    }
}

const ADMIN: &str = "admin-token-0123456789abcdef0123456789abcdef";
const JOBS: &str = "lock-token-jobs-0123456789abcdef0123456789ab";
const VIEWER: &str = "read-token-0123456789abcdef0123456789abcdef0";

/// The tokens of the authenticated clusters: an admin, a lock token for `jobs/`, a
/// read-only token for every lock.
fn tokens() -> ClientPolicy {
    let text = format!(
        "admin * {}\nlock jobs/ {}\nread * {}\n",
        token_hash(ADMIN),
        token_hash(JOBS),
        token_hash(VIEWER)
    );
    ClientPolicy {
        tokens: Some(Arc::new(Tokens::parse(&text).unwrap())),
        ..ClientPolicy::default()
    }
}

/// A request to authenticate the connection with `token`.
fn authenticate(token: &str) -> Request {
    Request::Authenticate {
        token: token.into(),
    }
}

/// A credential the attacker made up (it cannot know the real one).
fn guessed() -> SessionSecret {
    SessionSecret::random().unwrap()
}

/// A request an attacker makes on the victim's session: the victim's (public) id with a
/// made-up credential. Its `Debug` form names the case in a failure message.
#[derive(Clone, Copy, Debug)]
enum Foreign {
    Release(&'static str, Option<u64>),
    Close(Option<u64>),
    KeepAlive,
    Attach,
    Acquire(&'static str, WaitSpec, Option<u64>),
    Cancel(&'static str, Option<u64>),
}

impl Foreign {
    fn request(self, session: u64) -> Request {
        let secret = guessed();
        match self {
            Foreign::Release(lock, request) => Request::Release {
                session,
                secret,
                lock: lock.into(),
                request,
            },
            Foreign::Close(request) => Request::Close {
                session,
                secret,
                request,
            },
            Foreign::KeepAlive => Request::KeepAlive { session, secret },
            Foreign::Attach => Request::Attach { session, secret },
            Foreign::Acquire(lock, wait, request) => Request::Acquire {
                session,
                secret,
                lock: lock.into(),
                mode: Mode::Exclusive,
                wait,
                request,
            },
            Foreign::Cancel(lock, request) => Request::Cancel {
                session,
                secret,
                lock: lock.into(),
                request,
            },
        }
    }
}

/// Makes each attack of `cases` on `victim`'s session in turn and asserts each is refused
/// with `NotOwner` naming the victim.
async fn refused(a: &mut Raw, victim: &Session, cases: &[Foreign]) {
    for case in cases {
        let (r, _) = a.call(case.request(victim.id())).await;
        assert_not_owner(&r, victim, case);
    }
}

/// After [`attacked`]: the cluster, an admin client, the victim and its token.
struct Attacked {
    t: Tcp,
    client: Client,
    victim: Session,
    token: fencelock::Token,
    /// The attacker's connection, kept open.
    _attacker: Raw,
}

/// A fresh cluster named `name` where a victim (a 60 s session) holds `lock`, and an
/// attacker on the leader has made each attack of `cases`, each refused.
async fn attacked(name: &str, lock: &str, cases: &[Foreign]) -> Attacked {
    let t = start(name).await;
    let client = t.client();
    let victim = client.open_session(60_000).await.unwrap();
    let token = granted(&victim, lock).await;
    let mut a = t.attacker().await;
    refused(&mut a, &victim, cases).await;
    Attacked {
        t,
        client,
        victim,
        token,
        _attacker: a,
    }
}

fn assert_not_owner(r: &Result<Reply, ClientError>, victim: &Session, case: &Foreign) {
    match r {
        Err(ClientError::NotOwner { session }) => {
            assert_eq!(*session, victim.id(), "{case:?}")
        }
        other => panic!("{case:?}: expected NotOwner, got {other:?}"),
    }
}

async fn granted(s: &Session, lock: &str) -> fencelock::Token {
    match s.acquire(lock, Mode::Exclusive, WaitSpec::None).await {
        Ok(Acquired::Granted(t)) => t,
        other => panic!("{other:?}"),
    }
}

/// A foreign release of the victim's lock, with the victim's (public) session id and a
/// made-up credential, is refused; the victim still holds the lock with the same token,
/// nobody else can take it, and the victim's own release and close then succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_release_is_refused_and_the_holder_keeps_its_lock() {
    let x = attacked(
        "sec-release",
        "jobs/x",
        &[
            Foreign::Release("jobs/x", Some(2)),
            Foreign::Release("jobs/x", Some(LARGEST)),
            Foreign::Release("jobs/x", None),
        ],
    )
    .await;
    let h = x.client.holders("jobs/x").await.unwrap();
    assert_eq!(
        (h.len(), h[0].session.0, h[0].token),
        (1, x.victim.id(), x.token)
    );
    let other = x.client.open_session(60_000).await.unwrap();
    assert_eq!(
        other
            .acquire("jobs/x", Mode::Exclusive, WaitSpec::None)
            .await
            .unwrap(),
        Acquired::Busy,
        "still held: a second holder is refused"
    );
    assert_eq!(x.victim.release("jobs/x").await.unwrap(), x.token);
    x.victim.close().await.unwrap();
    other.close().await.unwrap();
    x.t.stop().await;
}

/// A foreign close of the victim's session is refused: the session and its lock stay,
/// and the victim closes it itself afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_close_is_refused_and_the_session_lives_on() {
    let x = attacked(
        "sec-close",
        "jobs/c",
        &[
            Foreign::Close(None),
            Foreign::Close(Some(1)),
            Foreign::Close(Some(LARGEST)),
        ],
    )
    .await;
    assert!(x
        .client
        .session_info(x.victim.id())
        .await
        .unwrap()
        .is_some());
    assert_eq!(x.client.holders("jobs/c").await.unwrap()[0].token, x.token);
    x.victim.keep_alive().await.unwrap();
    assert_eq!(x.victim.release("jobs/c").await.unwrap(), x.token);
    x.victim.close().await.unwrap();
    assert!(x
        .client
        .session_info(x.victim.id())
        .await
        .unwrap()
        .is_none());
    x.t.stop().await;
}

/// A foreign keep-alive does not extend the victim's session: it is refused and the
/// session's deadline does not move; left alone, the session expires and its lock is
/// released (a dead client's lock is not kept held by someone else).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_keep_alive_is_refused_and_cannot_keep_a_session_alive() {
    let t = start("sec-keepalive").await;
    let client = t.client();
    let victim = client.open_session(1_500).await.unwrap();
    granted(&victim, "jobs/k").await;
    let before = client
        .session_info(victim.id())
        .await
        .unwrap()
        .unwrap()
        .expires_at;
    let mut a = t.attacker().await;
    refused(&mut a, &victim, &[Foreign::KeepAlive]).await;
    let after = client
        .session_info(victim.id())
        .await
        .unwrap()
        .unwrap()
        .expires_at;
    assert_eq!(before, after, "the deadline did not move");
    // Keep trying while the session should expire: it expires all the same.
    let mut expired = false;
    for _ in 0..100 {
        let (r, _) = a.call(Foreign::KeepAlive.request(victim.id())).await;
        if matches!(&r, Err(ClientError::Core(e)) if e.kind == "unknown_session") {
            expired = true;
            break;
        }
        assert_not_owner(&r, &victim, &Foreign::KeepAlive);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(expired, "the session outlived its ttl");
    assert!(client.holders("jobs/k").await.unwrap().is_empty());
    t.stop().await;
}

/// A foreign attach to a waiter's session is refused, and the attacker's connection gets
/// none of the waiter's pushes: the waiter's grant reaches only the waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_attach_is_refused_and_receives_no_pushes() {
    let t = start("sec-attach").await;
    let client = t.client();
    let holder = client.open_session(60_000).await.unwrap();
    let t1 = granted(&holder, "jobs/a").await;
    let waiter = Arc::new(t.client().open_session(60_000).await.unwrap());
    let w = waiter.clone();
    let waiting = tokio::spawn(async move {
        w.acquire("jobs/a", Mode::Exclusive, WaitSpec::Forever)
            .await
    });
    for _ in 0..250 {
        if !client.waiters("jobs/a").await.unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(client.waiters("jobs/a").await.unwrap().len(), 1);
    let mut a = t.attacker().await;
    // An acquire with a made-up credential must not attach the attacker either.
    refused(
        &mut a,
        &waiter,
        &[
            Foreign::Attach,
            Foreign::Acquire("jobs/other", WaitSpec::None, Some(7)),
        ],
    )
    .await;
    // The grant goes to the waiter, and to nobody else.
    assert_eq!(holder.release("jobs/a").await.unwrap(), t1);
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter is granted")
        .unwrap()
        .unwrap();
    assert!(matches!(got, Acquired::Granted(t2) if t2 > t1), "{got:?}");
    let leaked = a.pushes_within(Duration::from_millis(500)).await;
    assert!(leaked.is_empty(), "the attacker received {leaked:?}");
    waiter.release("jobs/a").await.unwrap();
    waiter.close().await.unwrap();
    holder.close().await.unwrap();
    t.stop().await;
}

/// A foreign acquire with the largest request number a node accepts used to reach the core
/// and make the victim's own next request stale (its release and close then failed). It is refused
/// before the core: the victim's release (request 2) and close succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_acquire_with_a_huge_request_number_is_refused_before_the_core() {
    let x = attacked(
        "sec-acquire",
        "jobs/h",
        &[
            Foreign::Acquire("jobs/h", WaitSpec::Forever, Some(LARGEST)),
            Foreign::Acquire("jobs/elsewhere", WaitSpec::Forever, Some(LARGEST)),
            Foreign::Cancel("jobs/h", Some(LARGEST)),
        ],
    )
    .await;
    assert!(x.client.holders("jobs/elsewhere").await.unwrap().is_empty());
    assert_eq!(x.victim.release("jobs/h").await.unwrap(), x.token);
    x.victim.close().await.unwrap();
    x.t.stop().await;
}

/// A request without any credential (a frame in the shape of a keep-alive that carries
/// only the session id) does not decode: the node answers `Malformed` and closes the
/// connection; the session is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_credential_is_malformed() {
    #[derive(serde::Serialize)]
    enum Bare {
        #[allow(dead_code)]
        Open(u64, Option<u128>),
        KeepAlive {
            session: u64,
        },
    }
    #[derive(serde::Serialize)]
    struct BareFrame {
        id: u64,
        req: Bare,
    }
    impl frame::Wire for BareFrame {
        const VERSION: u32 = frame::CLIENT_WIRE;
    }
    let t = start("sec-bare").await;
    let client = t.client();
    let victim = client.open_session(60_000).await.unwrap();
    let before = client.session_info(victim.id()).await.unwrap().unwrap();
    let mut a = t.attacker().await;
    let bytes = frame::encode(&BareFrame {
        id: 1,
        req: Bare::KeepAlive {
            session: victim.id(),
        },
    })
    .unwrap();
    a.s.write_all(&bytes).await.unwrap();
    let f = frame::read::<_, ServerFrame>(&mut a.s, frame::MAX_CLIENT_FRAME)
        .await
        .unwrap();
    assert!(matches!(f, Some(ServerFrame::Malformed(_))), "{f:?}");
    let after = client.session_info(victim.id()).await.unwrap().unwrap();
    assert_eq!(before.expires_at, after.expires_at);
    victim.close().await.unwrap();
    t.stop().await;
}

// ---- client authentication and authorization ----

/// On a node with tokens, a connection that presents no token, or a wrong one, can do
/// nothing: opening a session and acquiring are `Unauthenticated`, and the lock stays free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquiring_without_a_valid_token_is_refused() {
    let t = start_with("sec-notoken", tokens()).await;
    let admin = t.client();
    let victim = admin.open_session(60_000).await.unwrap();
    // No token at all, by hand: every request is refused; then a wrong token: refused,
    // and the connection ends (each guess costs a new connection).
    let open = Request::Open {
        ttl_ms: 60_000,
        key: None,
    };
    let cases = [
        ("open", open.clone()),
        (
            "acquire",
            Foreign::Acquire("jobs/t", WaitSpec::None, Some(1)).request(victim.id()),
        ),
        (
            "holders",
            Request::Holders {
                lock: "jobs/t".into(),
            },
        ),
    ];
    let mut a = t.attacker().await;
    for (case, req) in cases {
        let (r, _) = a.call(req).await;
        assert!(
            matches!(r, Err(ClientError::Unauthenticated)),
            "{case}: {r:?}"
        );
    }
    let (r, _) = a
        .call(Request::Authenticate {
            token: "guess".into(),
        })
        .await;
    assert!(matches!(r, Err(ClientError::Unauthenticated)), "{r:?}");
    let after = tokio::time::timeout(
        Duration::from_secs(10),
        frame::read::<_, ServerFrame>(&mut a.s, frame::MAX_CLIENT_FRAME),
    )
    .await
    .expect("closed, not left open");
    assert!(
        matches!(after, Ok(None) | Err(_)),
        "a refused token's connection stayed open: {after:?}"
    );
    let mut b = t.attacker().await;
    let (r, _) = b.call(open).await;
    assert!(
        matches!(r, Err(ClientError::Unauthenticated)),
        "open after a wrong token: {r:?}"
    );
    // The client library without a token, and with a wrong one.
    let none = Client::new(t.addrs.iter().map(|a| a.client.clone()).collect());
    let r = none.open_session(60_000).await;
    assert!(
        matches!(r, Err(ClientError::Unauthenticated)),
        "{:?}",
        r.err()
    );
    let wrong = t.client_with("not-a-token");
    let started = std::time::Instant::now();
    let r = wrong.open_session(60_000).await;
    assert!(
        matches!(r, Err(ClientError::Unauthenticated)),
        "{:?}",
        r.err()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused, not retried"
    );
    assert!(admin.holders("jobs/t").await.unwrap().is_empty());
    assert_eq!(
        victim
            .acquire("jobs/t", Mode::Exclusive, WaitSpec::None)
            .await
            .unwrap(),
        Acquired::Granted(fencelock::Token(1)),
        "the lock was free and no token was spent"
    );
    t.stop().await;
}

/// Open idempotency keys are scoped by token: a client presenting another client's key
/// (a fixed or predictable one, or one it learnt) opens a session of its own and never
/// receives the first client's session or credential; the first client's retry, on a new
/// connection with its token, still gets its own session and credential back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tokens_open_key_opens_a_session_of_its_own() {
    let t = start_with("sec-openkey", tokens()).await;
    let opened = |r: Result<Reply, ClientError>| match r {
        Ok(Reply::Opened { reply, secret, .. }) => (reply.opened().expect("opened"), secret),
        other => panic!("{other:?}"),
    };
    let open = Request::Open {
        ttl_ms: 60_000,
        key: Some(OpenKey(0x5eed_0000_0000_0000_0000_0000_0000_0001)),
    };
    let connect = |token: &'static str| {
        let t = &t;
        async move {
            let mut c = t.attacker().await;
            let (r, _) = c.call(authenticate(token)).await;
            assert!(matches!(r, Ok(Reply::Authenticated)), "{r:?}");
            c
        }
    };
    let mut first = connect(JOBS).await;
    let (session, secret) = opened(first.call(open.clone()).await.0);
    let mut other = connect(ADMIN).await;
    let (theirs, their_secret) = opened(other.call(open.clone()).await.0);
    assert_ne!(
        theirs, session,
        "another token's open must not get the session"
    );
    assert!(!their_secret.matches(&secret), "nor its credential");
    // Its own credential does not act for the first session, which to another token is
    // as good as not open.
    let (r, _) = other
        .call(Request::KeepAlive {
            session: session.0,
            secret: their_secret,
        })
        .await;
    assert!(
        matches!(&r, Err(ClientError::Core(e)) if e.kind == "unknown_session"),
        "{r:?}"
    );
    // Retries: each token gets its own session back.
    let mut again = connect(JOBS).await;
    let (s, k) = opened(again.call(open.clone()).await.0);
    assert_eq!(s, session, "the owner's retry gets its session");
    assert!(k.matches(&secret), "and its credential");
    let (s, k) = opened(other.call(open).await.0);
    assert_eq!(s, theirs);
    assert!(k.matches(&their_secret));
    t.stop().await;
}

/// A read-only token reads but cannot open a session or acquire; a lock token acquires
/// only within its prefix and cannot read outside the grants it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_token_cannot_acquire_and_a_lock_token_stays_in_its_prefix() {
    let t = start_with("sec-roles", tokens()).await;
    let viewer = t.client_with(VIEWER);
    assert!(viewer.holders("jobs/r").await.unwrap().is_empty());
    let r = viewer.open_session(60_000).await;
    assert!(matches!(r, Err(ClientError::Forbidden(_))), "{:?}", r.err());
    // A request on a session opened by someone else needs the lock role first: a read
    // token is refused `Forbidden` before its (made-up) credential is looked at.
    let jobs = t.client_with(JOBS);
    let s = jobs.open_session(60_000).await.unwrap();
    // The lock token reads inside its prefix only, and reads no session by id (ids are
    // sequential; a session belongs to no prefix); a read token for every lock does.
    assert!(jobs.holders("jobs/r").await.unwrap().is_empty());
    let r = jobs.holders("billing/r").await;
    assert!(matches!(r, Err(ClientError::Forbidden(_))), "{r:?}");
    let r = jobs.session_info(s.id()).await;
    assert!(matches!(r, Err(ClientError::Forbidden(_))), "{r:?}");
    assert!(viewer.session_info(s.id()).await.unwrap().is_some());
    let mut a = t.attacker().await;
    let (r, _) = a.call(authenticate(VIEWER)).await;
    assert!(matches!(r, Ok(Reply::Authenticated)), "{r:?}");
    let (r, _) = a
        .call(Request::Holders {
            lock: "jobs/r".into(),
        })
        .await;
    assert!(matches!(r, Ok(Reply::Holders(_))), "{r:?}");
    let (r, _) = a
        .call(Foreign::Acquire("jobs/r", WaitSpec::None, Some(1)).request(s.id()))
        .await;
    assert!(matches!(r, Err(ClientError::Forbidden(_))), "{r:?}");
    // The lock token: inside its prefix yes, outside no.
    assert!(matches!(
        s.acquire("jobs/r", Mode::Exclusive, WaitSpec::None)
            .await
            .unwrap(),
        Acquired::Granted(_)
    ));
    let r = s
        .acquire("billing/r", Mode::Exclusive, WaitSpec::None)
        .await;
    assert!(matches!(r, Err(ClientError::Forbidden(_))), "{r:?}");
    assert!(t.client().holders("billing/r").await.unwrap().is_empty());
    s.release("jobs/r").await.unwrap();
    s.close().await.unwrap();
    t.stop().await;
}

/// A token is accepted once per connection: a second `Authenticate` — an unknown token,
/// one that grants less, the same one — is refused `BadRequest` and changes nothing. The
/// connection keeps the grants its sessions were attached under: it still releases and
/// acquires in its prefix, and its session's grant is still pushed to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_keeps_the_token_it_was_accepted_with() {
    let t = start_with("sec-reauth", tokens()).await;
    let mut a = t.attacker().await;
    let (r, _) = a.call(authenticate(JOBS)).await;
    assert!(matches!(r, Ok(Reply::Authenticated)), "{r:?}");
    let (session, secret) = a.open().await;
    let session = fencelock::SessionId(session);
    let acquire = |lock: &str, wait| Request::Acquire {
        session: session.0,
        secret,
        lock: lock.into(),
        mode: Mode::Exclusive,
        wait,
        request: None,
    };
    let (r, _) = a.call(acquire("jobs/a", WaitSpec::None)).await;
    assert!(
        matches!(
            r,
            Ok(Reply::Done {
                reply: fencelock::Reply::Granted { .. },
                ..
            })
        ),
        "{r:?}"
    );
    for token in ["not-a-token", VIEWER, JOBS, ADMIN] {
        let (r, _) = a.call(authenticate(token)).await;
        assert!(
            matches!(&r, Err(ClientError::BadRequest(m)) if m.contains("authenticated already")),
            "{token}: {r:?}"
        );
    }
    // Still the lock token's grants: not the admin's (the last attempt), not the read
    // token's, not none.
    let (r, _) = a
        .call(Request::Holders {
            lock: "billing/x".into(),
        })
        .await;
    assert!(matches!(r, Err(ClientError::Forbidden(_))), "{r:?}");
    let (r, _) = a
        .call(Request::Holders {
            lock: "jobs/a".into(),
        })
        .await;
    assert!(matches!(&r, Ok(Reply::Holders(h)) if h.len() == 1), "{r:?}");
    // Its session's pushes still reach it: queued behind another holder, it is pushed
    // the grant when that holder releases.
    let other = t.client_with(JOBS).open_session(60_000).await.unwrap();
    granted(&other, "jobs/b").await;
    let (r, _) = a.call(acquire("jobs/b", WaitSpec::Forever)).await;
    assert!(
        matches!(
            r,
            Ok(Reply::Done {
                reply: fencelock::Reply::Queued { .. },
                ..
            })
        ),
        "{r:?}"
    );
    other.release("jobs/b").await.unwrap();
    let pushed = a.pushes_within(Duration::from_secs(5)).await;
    assert!(
        pushed
            .iter()
            .any(|o| matches!(o, Output::Granted { lock, session: s, .. } if lock.as_str() == "jobs/b" && *s == session)),
        "{pushed:?}"
    );
    other.close().await.unwrap();
    t.stop().await;
}

/// A second lock token for `jobs/`: another team's, with the same grants as [`JOBS`].
const JOBS_B: &str = "lock-token-jobs-b-0123456789abcdef0123456789";

impl Raw {
    /// Opens a session (60 s) on this connection: its id and credential.
    async fn open(&mut self) -> (u64, SessionSecret) {
        let (r, _) = self
            .call(Request::Open {
                ttl_ms: 60_000,
                key: None,
            })
            .await;
        let Ok(Reply::Opened { reply, secret, .. }) = r else {
            panic!("{r:?}")
        };
        (reply.opened().expect("opened").0, secret)
    }
}

/// Every request that names a session, for `session` with `secret`, each named for a
/// failure message.
fn naming(session: u64, secret: SessionSecret) -> Vec<(&'static str, Request)> {
    let lock = || "jobs/db".to_string();
    vec![
        ("keep-alive", Request::KeepAlive { session, secret }),
        ("attach", Request::Attach { session, secret }),
        (
            "acquire",
            Request::Acquire {
                session,
                secret,
                lock: "jobs/other".into(),
                mode: Mode::Exclusive,
                wait: WaitSpec::None,
                request: None,
            },
        ),
        (
            "timed acquire",
            Request::Acquire {
                session,
                secret,
                lock: lock(),
                mode: Mode::Shared,
                wait: WaitSpec::ForMs(50),
                request: Some(9),
            },
        ),
        (
            "release",
            Request::Release {
                session,
                secret,
                lock: lock(),
                request: None,
            },
        ),
        (
            "cancel",
            Request::Cancel {
                session,
                secret,
                lock: lock(),
                request: None,
            },
        ),
        (
            "watch",
            Request::Watch {
                session,
                secret,
                lock: lock(),
                request: None,
            },
        ),
        (
            "unwatch",
            Request::Unwatch {
                session,
                secret,
                lock: lock(),
                request: None,
            },
        ),
        (
            "close",
            Request::Close {
                session,
                secret,
                request: None,
            },
        ),
    ]
}

/// On a node with tokens a session answers only to the token that opened it. Another
/// token holding its credential (leaked) — one whose grants cover the session's locks, or
/// the admin's — is answered as if the session were not open, for every request that
/// names a session, and takes no place in the log; and its answer, with the credential or
/// a made-up one, is the one it gets for a session that ended, so it cannot tell which
/// sessions of another token are open. The opener's token still gets `NotOwner` for a
/// wrong credential, and the owner keeps its hold, its token and its pushes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_answers_only_to_the_token_that_opened_it() {
    let mut policy = tokens();
    let text = format!(
        "admin * {}\nlock jobs/ {}\nlock jobs/ {}\nread * {}\n",
        token_hash(ADMIN),
        token_hash(JOBS),
        token_hash(JOBS_B),
        token_hash(VIEWER)
    );
    policy.tokens = Some(Arc::new(Tokens::parse(&text).unwrap()));
    let t = start_with("sec-principal", policy).await;
    let mut owner = t.attacker().await;
    let (r, _) = owner.call(authenticate(JOBS)).await;
    assert!(matches!(r, Ok(Reply::Authenticated)), "{r:?}");
    let (victim, secret) = owner.open().await;
    let (r, _) = owner
        .call(Request::Acquire {
            session: victim,
            secret,
            lock: "jobs/db".into(),
            mode: Mode::Exclusive,
            wait: WaitSpec::None,
            request: None,
        })
        .await;
    let Ok(Reply::Done {
        reply: fencelock::Reply::Granted { token, .. },
        index: before,
        ..
    }) = r
    else {
        panic!("{r:?}")
    };
    // A session of the same token that ended, for the comparison.
    let (ended, ended_secret) = owner.open().await;
    let (r, _) = owner
        .call(Request::Close {
            session: ended,
            secret: ended_secret,
            request: None,
        })
        .await;
    assert!(r.is_ok(), "{r:?}");

    let unknown = |s: u64| -> Result<Reply, ClientError> {
        Err(ClientError::Core(
            fencelock::Error::UnknownSession(fencelock::SessionId(s)).into(),
        ))
    };
    let mut thieves = Vec::new();
    for token in [JOBS_B, ADMIN] {
        let mut thief = t.attacker().await;
        let (r, _) = thief.call(authenticate(token)).await;
        assert!(matches!(r, Ok(Reply::Authenticated)), "{r:?}");
        for (leaked, made_up) in naming(victim, secret)
            .into_iter()
            .zip(naming(victim, guessed()))
        {
            let case = leaked.0;
            let (r, pushed) = thief.call(leaked.1).await;
            assert_eq!(
                r,
                unknown(victim),
                "{token}: {case} with the leaked credential"
            );
            assert!(pushed.is_empty(), "{token}: {case}: {pushed:?}");
            let (r, _) = thief.call(made_up.1).await;
            assert_eq!(
                r,
                unknown(victim),
                "{token}: {case} with a made-up credential"
            );
        }
        for (case, req) in naming(ended, guessed()) {
            let (r, _) = thief.call(req).await;
            assert_eq!(r, unknown(ended), "{token}: {case} on the ended session");
        }
        thieves.push(thief);
    }
    // The opener's token: a wrong credential is `NotOwner`; the right one is served, and
    // the hold is the same, with the same token, as before the attempts — none of which
    // took a place in the log (the keep-alive is the next entry but for the ticker's).
    let (r, _) = owner
        .call(Request::KeepAlive {
            session: victim,
            secret: guessed(),
        })
        .await;
    assert_eq!(r, Err(ClientError::NotOwner { session: victim }));
    let (r, _) = owner
        .call(Request::KeepAlive {
            session: victim,
            secret,
        })
        .await;
    let Ok(Reply::Done { index: after, .. }) = r else {
        panic!("{r:?}")
    };
    assert!(
        after - before < 10,
        "{} entries for 54 refused requests",
        after - before
    );
    let (r, _) = owner
        .call(Request::Holders {
            lock: "jobs/db".into(),
        })
        .await;
    let Ok(Reply::Holders(h)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        h.iter().map(|x| (x.session.0, x.token)).collect::<Vec<_>>(),
        vec![(victim, token)]
    );
    let (r, _) = owner
        .call(Request::Release {
            session: victim,
            secret,
            lock: "jobs/db".into(),
            request: None,
        })
        .await;
    assert!(r.is_ok(), "{r:?}");
    // None of the thieves' connections was attached: the release is pushed to none.
    for mut thief in thieves {
        let pushed = thief.pushes_within(Duration::from_millis(300)).await;
        assert!(pushed.is_empty(), "{pushed:?}");
    }
    t.stop().await;
}

/// An administrator's forced release names the hold by its token, so a retry is safe: a
/// repeat after it was applied — the owner having taken the lock again meanwhile — is
/// refused `not_holder` and the new hold stays; a wrong token changes nothing; an unknown
/// session is `unknown_session`; and a lock token may not send it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_retried_after_the_owner_took_the_lock_again_keeps_the_new_hold() {
    let t = start_with("sec-force-retry", tokens()).await;
    let admin = t.client();
    let owner = t.client_with(JOBS).open_session(60_000).await.unwrap();
    let sid = owner.id();
    let first = granted(&owner, "jobs/x").await;
    let not_holder = |r: Result<fencelock::Token, ClientError>| {
        assert!(
            matches!(&r, Err(ClientError::Core(e)) if e.kind == "not_holder"),
            "{r:?}"
        )
    };
    // A wrong token: refused, and the hold is untouched.
    not_holder(
        admin
            .force_release_hold(sid, "jobs/x", fencelock::Token(first.0 + 1))
            .await,
    );
    assert_eq!(admin.holders("jobs/x").await.unwrap()[0].token, first);
    // Released by its token; the owner takes the lock again; the same request repeated
    // (an administrator's retry after a lost answer) finds that hold gone.
    assert_eq!(admin.force_release(sid, "jobs/x").await.unwrap(), first);
    let again = granted(&owner, "jobs/x").await;
    assert!(again > first);
    not_holder(admin.force_release_hold(sid, "jobs/x", first).await);
    let held = admin.holders("jobs/x").await.unwrap();
    assert_eq!(
        (held[0].session.0, held[0].token),
        (sid, again),
        "the new hold stays"
    );
    // Not held, and not open.
    not_holder(admin.force_release(sid, "jobs/none").await);
    let r = admin.force_release_hold(sid + 100, "jobs/x", again).await;
    assert!(
        matches!(&r, Err(ClientError::Core(e)) if e.kind == "unknown_session"),
        "{r:?}"
    );
    // Anything but a hold of another token gets the core's answer, as `ForceRelease`
    // does: an empty name is `empty_name`, not `not_holder`.
    let old = admin
        .call(Request::ForceRelease {
            session: sid,
            lock: String::new(),
        })
        .await;
    let new = admin.force_release_hold(sid, "", again).await;
    match (&old, &new) {
        (Err(ClientError::Core(a)), Err(ClientError::Core(b))) => {
            assert_eq!(
                (a.kind.as_str(), b.kind.as_str()),
                ("empty_name", "empty_name")
            )
        }
        other => panic!("{other:?}"),
    }
    // Admin only.
    let r = t
        .client_with(JOBS)
        .force_release_hold(sid, "jobs/x", again)
        .await;
    assert!(matches!(r, Err(ClientError::Forbidden(_))), "{r:?}");
    assert_eq!(admin.force_release(sid, "jobs/x").await.unwrap(), again);
    owner.close().await.unwrap();
    t.stop().await;
}

/// An administrator closes another token's session without its credential: its hold is
/// released (pushed to the owner as `Released`, reason `Closed`) and granted to the next
/// waiter with a new token, its wait elsewhere ends, and its owner's next request is
/// refused `unknown_session`. A repeat is refused `unknown_session` and changes nothing;
/// a lock or read token may not send it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_closes_another_tokens_session_and_only_an_admin_may() {
    let t = start_with("sec-force-close", tokens()).await;
    let admin = t.client();
    let owner_client = t.client_with(JOBS);
    let mut pushes = owner_client.subscribe();
    let owner = owner_client.open_session(60_000).await.unwrap();
    let next = t.client_with(JOBS).open_session(60_000).await.unwrap();
    let first = granted(&owner, "jobs/x").await;
    // The owner waits behind `next` on another lock; `next` waits behind the owner. Once
    // both are queued, the administrator closes the owner's session.
    granted(&next, "jobs/y").await;
    let queued = |lock: &'static str| {
        let admin = &admin;
        async move {
            for _ in 0..250 {
                if admin.waiters(lock).await.unwrap().len() == 1 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("no waiter on {lock}");
        }
    };
    // Well within the sessions' ttl: the owner learns of the close from its push, not
    // from a keep-alive refused later.
    let expiries = || {
        t.nodes
            .iter()
            .map(|n| n.shared.stats.expiries.get())
            .sum::<u64>()
    };
    let before = expiries();
    let waits = tokio::time::timeout(Duration::from_secs(15), async {
        tokio::join!(
            owner.acquire("jobs/y", Mode::Exclusive, WaitSpec::Forever),
            next.acquire("jobs/x", Mode::Exclusive, WaitSpec::Forever),
            async {
                queued("jobs/x").await;
                queued("jobs/y").await;
                // Lock and read tokens are refused, and change nothing.
                // The refusal names the role missing, whether or not the token may read
                // sessions (the client reads the session first).
                for token in [JOBS, VIEWER] {
                    let r = t.client_with(token).force_close(owner.id()).await;
                    assert!(
                        matches!(&r, Err(ClientError::Forbidden(m)) if m.contains("admin role")),
                        "{token}: {r:?}"
                    );
                }
                assert_eq!(
                    admin.holders("jobs/x").await.unwrap()[0].session.0,
                    owner.id()
                );
                admin.force_close(owner.id()).await.unwrap();
            },
        )
    });
    let (owner_wait, next_wait, ()) = waits.await.expect("the waits end at the close");
    // Not an expiry: no node's metric of expired sessions counts it (each node has
    // applied the close once every node's answer below has been read).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(expiries(), before, "a forced close counted as an expiry");
    // The hold went to the waiter, with a later token; the owner's wait ended.
    let Ok(Acquired::Granted(second)) = next_wait else {
        panic!("{next_wait:?}")
    };
    assert!(second > first, "{second:?} after {first:?}");
    assert!(
        matches!(owner_wait, Ok(Acquired::SessionLost)),
        "{owner_wait:?}"
    );
    assert!(owner.is_lost());
    let held = admin.holders("jobs/x").await.unwrap();
    assert_eq!(
        held.iter()
            .map(|h| (h.session.0, h.token))
            .collect::<Vec<_>>(),
        vec![(next.id(), second)]
    );
    assert!(admin.waiters("jobs/y").await.unwrap().is_empty());
    // The owner was told its hold ended with its session.
    let told = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match pushes.recv().await {
                Ok(Output::Released {
                    session, reason, ..
                }) if session.0 == owner.id() => return reason,
                Ok(_) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
    })
    .await
    .expect("the owner is told");
    assert_eq!(told, fencelock::ReleaseReason::Closed);
    let gone = |r: Result<(), ClientError>| {
        assert!(
            matches!(&r, Err(ClientError::Core(e)) if e.kind == "unknown_session"),
            "{r:?}"
        )
    };
    gone(owner.keep_alive().await.map(|_| ()));
    // A repeat is told it is gone: the client's read finds it not open, and the request
    // itself (what the client's own retry of a lost answer sends) is refused and changes
    // nothing.
    gone(admin.force_close(owner.id()).await);
    gone(
        admin
            .call(Request::ForceClose {
                session: owner.id(),
            })
            .await
            .map(|_| ()),
    );
    assert_eq!(
        admin.holders("jobs/x").await.unwrap()[0].session.0,
        next.id()
    );
    next.close().await.unwrap();
    t.stop().await;
}

/// An administrator lists the open sessions, each with the token that opened it, every one
/// or one owner's, page by page; and closes every session of one token at once, the one
/// that only watches too (no lock's holders or queue name it), and no other token's. No
/// lock or read token may list them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_lists_the_sessions_by_owner_and_closes_all_of_one_tokens() {
    let t = start_with("sec-sessions", tokens()).await;
    let admin = t.client();
    let jobs = t.client_with(JOBS);
    let holding = jobs.open_session(60_000).await.unwrap();
    let watching = jobs.open_session(60_000).await.unwrap();
    let other = admin.open_session(60_000).await.unwrap();
    granted(&holding, "jobs/x").await;
    assert_eq!(watching.watch("jobs/x").await.unwrap(), 1);
    let (j, a) = (Principal::token(JOBS), Principal::token(ADMIN));
    let ids = |l: &[ListedSession]| -> Vec<(u64, Principal)> {
        l.iter().map(|s| (s.info.id.0, s.owner)).collect()
    };
    let all = admin.sessions(None).await.unwrap();
    assert_eq!(
        ids(&all),
        vec![(holding.id(), j), (watching.id(), j), (other.id(), a)]
    );
    let counts = |s: &ListedSession| (s.info.holds, s.info.waits, s.info.watches);
    assert_eq!(
        (counts(&all[0]), counts(&all[1])),
        ((1, 0, 0), (0, 0, 1)),
        "the watch-only session shows its watch"
    );
    assert_eq!(
        ids(&admin.sessions(Some(a)).await.unwrap()),
        vec![(other.id(), a)]
    );
    // Page by page: each says where the next begins, the last that there is none.
    let first = admin.sessions_page(0, Some(j), 1).await.unwrap();
    assert_eq!(ids(&first.sessions), vec![(holding.id(), j)]);
    assert_eq!(first.next, Some(holding.id()));
    let second = admin.sessions_page(holding.id(), Some(j), 1).await.unwrap();
    assert_eq!(ids(&second.sessions), vec![(watching.id(), j)]);
    let last = admin
        .sessions_page(second.next.expect("more after it"), Some(j), 1)
        .await
        .unwrap();
    assert_eq!((ids(&last.sessions), last.next), (vec![], None));
    for token in [JOBS, VIEWER] {
        let r = t.client_with(token).sessions(None).await;
        assert!(
            matches!(r, Err(ClientError::Forbidden(_))),
            "{token}: {r:?}"
        );
    }
    // The jobs token's two sessions end, the watch with them; the admin's stays.
    let (closed, done) = admin.force_close_owner(j).await;
    assert!(done.is_ok(), "{done:?}");
    assert_eq!(closed, vec![holding.id(), watching.id()]);
    assert_eq!(
        ids(&admin.sessions(None).await.unwrap()),
        vec![(other.id(), a)]
    );
    assert!(admin.holders("jobs/x").await.unwrap().is_empty());
    assert!(admin.session_info(watching.id()).await.unwrap().is_none());
    // Nothing left of that token's: a repeat closes none.
    let (closed, done) = admin.force_close_owner(j).await;
    assert!(done.is_ok() && closed.is_empty(), "{closed:?} {done:?}");
    // A lock token may not: nothing listed, nothing closed.
    let (closed, done) = t.client_with(JOBS).force_close_owner(a).await;
    assert!(closed.is_empty(), "{closed:?}");
    assert!(matches!(done, Err(ClientError::Forbidden(_))), "{done:?}");
    assert_eq!(
        ids(&admin.sessions(None).await.unwrap()),
        vec![(other.id(), a)]
    );
    other.close().await.unwrap();
    t.stop().await;
}

/// A read of one session's hold of a lock names that hold (its token), or none for a
/// waiter or a hold released, and needs the read role on the lock's prefix, as the
/// holders read does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_read_names_one_sessions_hold_and_needs_the_read_role() {
    let t = start_with("sec-hold", tokens()).await;
    let jobs = t.client_with(JOBS);
    let holder = jobs.open_session(60_000).await.unwrap();
    let waiter = jobs.open_session(60_000).await.unwrap();
    let token = granted(&holder, "jobs/x").await;
    let viewer = t.client_with(VIEWER);
    let (waited, ()) = tokio::time::timeout(Duration::from_secs(15), async {
        tokio::join!(
            waiter.acquire("jobs/x", Mode::Exclusive, WaitSpec::Forever),
            async {
                while viewer.waiters("jobs/x").await.unwrap().is_empty() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                for reader in [JOBS, VIEWER, ADMIN] {
                    let c = t.client_with(reader);
                    let h = c.hold(holder.id(), "jobs/x").await.unwrap();
                    let h = h.map(|h| (h.session.0, h.token));
                    assert_eq!(h, Some((holder.id(), token)), "{reader}");
                    let w = c.hold(waiter.id(), "jobs/x").await.unwrap();
                    assert_eq!(w, None, "a wait is no hold");
                }
                // Outside the lock token's prefix: refused, as a holders read is.
                let r = jobs.hold(holder.id(), "other/x").await;
                assert!(matches!(r, Err(ClientError::Forbidden(_))), "{r:?}");
                holder.release("jobs/x").await.unwrap();
            },
        )
    })
    .await
    .expect("the wait ends with the release");
    let Ok(Acquired::Granted(next)) = waited else {
        panic!("{waited:?}")
    };
    assert_eq!(viewer.hold(holder.id(), "jobs/x").await.unwrap(), None);
    let h = viewer.hold(waiter.id(), "jobs/x").await.unwrap();
    assert_eq!(h.map(|h| h.token), Some(next));
    assert!(next > token);
    t.stop().await;
}

/// A lock token cannot change the membership: adding a learner and setting the voters
/// (the change that used to leave a cluster without a quorum) are `Forbidden`, and the
/// members stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_token_cannot_change_the_membership() {
    let t = start_with("sec-members", tokens()).await;
    let before = t.client().members().await.unwrap();
    let jobs = t.client_with(JOBS);
    let r = jobs
        .add_learner(
            9,
            NodeAddr {
                raft: "127.0.0.1:7299".into(),
                client: "127.0.0.1:7199".into(),
            },
        )
        .await;
    assert!(matches!(r, Err(ClientError::Forbidden(_))), "{r:?}");
    let r = jobs.set_voters(vec![1, 9]).await;
    assert!(matches!(r, Err(ClientError::Forbidden(_))), "{r:?}");
    let r = jobs.force_release(1, "jobs/x").await;
    assert!(matches!(r, Err(ClientError::Forbidden(_))), "{r:?}");
    assert_eq!(t.client().members().await.unwrap(), before);
    // The cluster still commits.
    let s = jobs.open_session(60_000).await.unwrap();
    s.close().await.unwrap();
    t.stop().await;
}

/// An administrator's forced release of a lock held by `fencelock lock NAME -- CMD` (the
/// real CLI, over TLS with a lock token): the holder is pushed a `Released` (reason `Released`), the CLI stops CMD and exits 3, and
/// the lock can be taken again with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_force_release_stops_the_holders_command() {
    let c = start_tls("sec-force").await;
    let (dir, mut cli) = c.cli("sec-force-cli");
    let pid_file = dir.join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut cli = cli
        .args(["lock", "jobs/forced", "--", "sh", "-c", &script])
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let admin = c.client();
    let mut held = Vec::new();
    // The shell creates the file before it writes the pid: wait for a whole number.
    let written =
        || -> Option<u32> { std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok() };
    let mut pid = None;
    for _ in 0..250 {
        held = admin.holders("jobs/forced").await.unwrap();
        pid = written();
        if !held.is_empty() && pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(held.len(), 1, "the CLI never held the lock");
    let pid: u32 = pid.expect("the command wrote its pid");
    let released = admin
        .force_release(held[0].session.0, "jobs/forced")
        .await
        .unwrap();
    assert_eq!(released, held[0].token);
    let status = tokio::time::timeout(Duration::from_secs(10), cli.wait())
        .await
        .expect("the CLI stops within 10 s")
        .unwrap();
    assert_eq!(status.code(), Some(3), "exit 3: the hold was lost");
    let mut err = String::new();
    use tokio::io::AsyncReadExt;
    cli.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .await
        .unwrap();
    assert!(err.contains("released by an administrator"), "{err}");
    // The command is gone (it was SIGTERMed; `kill -0` fails for a dead pid).
    let alive = std::process::Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(!alive, "the command {pid} still runs");
    let next = admin.open_session(60_000).await.unwrap();
    match next
        .acquire("jobs/forced", Mode::Exclusive, WaitSpec::None)
        .await
        .unwrap()
    {
        Acquired::Granted(tok) => assert!(tok > released),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
    c.t.stop().await;
}

// ---- TLS, mutual TLS between peers, nodes on distinct addresses ----

struct TlsCluster {
    t: Tcp,
    ca: DevCa,
    client_tls: Arc<rustls::ClientConfig>,
}

/// Three nodes on 127.0.0.1, 127.0.0.2 and 127.0.0.3 (nothing assumes one address), TLS
/// on the client ports, mutual TLS between peers, tokens on; certificates from a fresh
/// development CA (rcgen).
async fn start_tls(name: &str) -> TlsCluster {
    let ca = DevCa::new().unwrap();
    let base = common::temp_dir(name);
    let three = common::bind_three_on(|id| format!("127.0.0.{id}")).await;
    let addrs = three.addrs();
    let mut nodes = Vec::new();
    for (i, (r, c)) in three.listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let pem = ca.node(id, &[&format!("127.0.0.{id}")]).unwrap();
        let tls = pem.node_tls(&ca.cert_der()).unwrap();
        let mut cfg = NodeConfig::new(i as u64 + 1, base.join(format!("n{}", i + 1)));
        cfg.grace_ms = 200;
        cfg.loopback_members = false;
        let node = Node::start(cfg, TlsNetwork::new(tls.clone()))
            .await
            .unwrap();
        tokio::spawn(serve_raft_with(
            r,
            node.elector().clone(),
            Some(tls.clone()),
            (1..=3).filter(|&p| p != id).collect(),
        ));
        let mut policy = tokens();
        policy.tls = Some(tls.clients.clone());
        tokio::spawn(serve_clients_with(c, node.clone(), policy));
        nodes.push(node);
    }
    nodes[0].initialize(three.members).await.unwrap();
    let client_tls = client_config_from(&[ca.cert_der()]).unwrap();
    TlsCluster {
        t: Tcp { nodes, addrs, base },
        ca,
        client_tls,
    }
}

impl TlsCluster {
    /// The real `fencelock` CLI for this cluster (a 5 s ttl, the `jobs/` lock token from a
    /// file, TLS against the cluster CA), and a fresh temp dir named after `name` with its
    /// files; the subcommand is the caller's.
    fn cli(&self, name: &str) -> (std::path::PathBuf, tokio::process::Command) {
        let dir = common::temp_dir(name);
        let token_file = dir.join("token");
        std::fs::write(&token_file, format!("{JOBS}\n")).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, self.ca.cert_pem()).unwrap();
        let cluster: Vec<&str> = self.t.addrs.iter().map(|a| a.client.as_str()).collect();
        let mut cli = tokio::process::Command::new(env!("CARGO_BIN_EXE_fencelock"));
        cli.args(["--cluster", &cluster.join(","), "--ttl-ms", "5000"])
            .arg("--auth-token-file")
            .arg(&token_file)
            .arg("--tls-ca")
            .arg(&ca_file)
            .env_remove("FENCELOCK_AUTH_TOKEN");
        (dir, cli)
    }

    fn client(&self) -> Client {
        Client::with_options(
            self.t.addrs.iter().map(|a| a.client.clone()).collect(),
            ClientOptions {
                token: Some(ADMIN.into()),
                tls: Some(self.client_tls.clone()),
                ..ClientOptions::default()
            },
        )
    }

    async fn leader(&self) -> usize {
        self.t.leader_within(500).await
    }
}

/// One node of a mutual-TLS cluster on its own address, with the tasks serving its ports
/// (aborted by [`TlsNode::stop`], so the ports can be bound again).
struct TlsNode {
    node: Arc<Node>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl TlsNode {
    /// Node `id` on 127.0.0.`id`, its data in `base/n<id>`, serving `raft` and `client`
    /// (bound on that address); before it knows a membership it serves nodes 1 to 3 (the
    /// first members, one of which adds every later node).
    async fn start(
        ca: &DevCa,
        id: u64,
        base: &std::path::Path,
        raft: tokio::net::TcpListener,
        client: tokio::net::TcpListener,
    ) -> TlsNode {
        let pem = ca.node(id, &[&format!("127.0.0.{id}")]).unwrap();
        let tls = pem.node_tls(&ca.cert_der()).unwrap();
        let mut cfg = NodeConfig::new(id, base.join(format!("n{id}")));
        cfg.grace_ms = 200;
        cfg.loopback_members = false;
        let node = Node::start(cfg, TlsNetwork::new(tls.clone()))
            .await
            .unwrap();
        let mut policy = tokens();
        policy.tls = Some(tls.clients.clone());
        let tasks = vec![
            tokio::spawn(serve_raft_with(
                raft,
                node.elector().clone(),
                Some(tls.clone()),
                (1..=3).filter(|&p| p != id).collect(),
            )),
            tokio::spawn(serve_clients_with(client, node.clone(), policy)),
        ];
        TlsNode { node, tasks }
    }

    async fn stop(self) {
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
        self.node.shutdown().await;
    }
}

/// Binds `addr` (a port a stopped node held a moment ago), retrying for a few seconds.
async fn bind_again(addr: &str) -> tokio::net::TcpListener {
    for _ in 0..200 {
        if let Ok(l) = tokio::net::TcpListener::bind(addr).await {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{addr} could not be bound again");
}

/// Waits up to `within` for `ok`, polling every 20 ms; true if it held.
async fn eventually(within: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        if ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ok()
}

/// A follower that was down while the cluster changed around it catches up from a leader
/// it has never heard of, over mutual TLS. Nodes 1–3; a follower (F) stops; nodes 4 and 5
/// join as learners and the voters become F, 4 and 5 (the other two stay as learners);
/// the old leader stops and 4 or 5 is elected. F restarts knowing only the old
/// membership, in which neither is a member: it refuses their connections — and would
/// stay behind for good — until a member it knows (the third old node, which follows the
/// new leader as a learner) says, answering its pre-vote, whose vote it follows. Then it
/// takes that leader's entries and learns the membership. (That a non-member's vote is
/// still refused is `a_non_member_is_served_as_leader_only_when_a_member_vouches_for_it`
/// in `src/net.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_missed_a_membership_change_catches_up_from_the_new_leader() {
    let ca = DevCa::new().unwrap();
    let base = common::temp_dir("sec-tls-missed");
    let mut listeners = std::collections::BTreeMap::new();
    let mut members = std::collections::BTreeMap::new();
    for id in 1..=5u64 {
        let r = tokio::net::TcpListener::bind(format!("127.0.0.{id}:0"))
            .await
            .unwrap();
        let c = tokio::net::TcpListener::bind(format!("127.0.0.{id}:0"))
            .await
            .unwrap();
        let a = NodeAddr {
            raft: r.local_addr().unwrap().to_string(),
            client: c.local_addr().unwrap().to_string(),
        };
        members.insert(id, a);
        listeners.insert(id, (r, c));
    }
    let mut nodes = std::collections::BTreeMap::new();
    for id in 1..=3u64 {
        let (r, c) = listeners.remove(&id).unwrap();
        nodes.insert(id, TlsNode::start(&ca, id, &base, r, c).await);
    }
    let first: std::collections::BTreeMap<u64, NodeAddr> =
        (1..=3).map(|id| (id, members[&id].clone())).collect();
    nodes[&1].node.initialize(first).await.unwrap();
    let within = Duration::from_secs(30);
    let leader_of = |n: &TlsNode| n.node.raft.metrics().borrow().current_leader;
    assert!(
        eventually(within, || (1..=3)
            .all(|id| leader_of(&nodes[&id]).is_some()))
        .await,
        "no leader"
    );
    let old = leader_of(&nodes[&1]).unwrap();
    let f = (1..=3).find(|&id| id != old).unwrap();
    nodes.remove(&f).unwrap().stop().await;

    for id in [4u64, 5] {
        let (r, c) = listeners.remove(&id).unwrap();
        nodes.insert(id, TlsNode::start(&ca, id, &base, r, c).await);
        nodes[&old]
            .node
            .raft
            .add_learner(id, members[&id].clone(), true)
            .await
            .unwrap();
    }
    let voters: std::collections::BTreeSet<u64> = [f, 4, 5].into();
    nodes[&old]
        .node
        .raft
        .change_membership(voters.clone(), true)
        .await
        .unwrap();
    // The old leader stops (openraft 0.9 keeps a leader that is no longer a voter
    // leading); 4 or 5, which F has never heard of, is elected.
    nodes.remove(&old).unwrap().stop().await;
    let new_leader = |nodes: &std::collections::BTreeMap<u64, TlsNode>| {
        [4u64, 5].into_iter().find(|id| {
            let m = nodes[id].node.raft.metrics().borrow().clone();
            m.state == openraft::ServerState::Leader
                && m.membership_config.membership().get_joint_config().len() == 1
        })
    };
    let found = eventually(within, || new_leader(&nodes).is_some()).await;
    if !found {
        for (id, n) in &nodes {
            let m = n.node.raft.metrics().borrow().clone();
            eprintln!(
                "node {id}: {:?} term {} leader {:?} membership {:?}",
                m.state, m.current_term, m.current_leader, m.membership_config
            );
        }
    }
    assert!(found, "neither 4 nor 5 leads");
    let l = new_leader(&nodes).unwrap();
    let other = (1..=3).find(|id| *id != f && *id != old).unwrap();
    assert!(
        eventually(within, || leader_of(&nodes[&other]) == Some(l)).await,
        "node {other}, a learner now, does not follow {l}"
    );

    // F comes back on its own ports, knowing only nodes 1-3.
    let (r, c) = (
        bind_again(&members[&f].raft).await,
        bind_again(&members[&f].client).await,
    );
    nodes.insert(f, TlsNode::start(&ca, f, &base, r, c).await);
    let knows = |n: &TlsNode| {
        let m = n.node.raft.metrics().borrow().clone();
        let members: Vec<u64> = m.membership_config.membership().voter_ids().collect();
        members
    };
    assert!(
        !knows(&nodes[&f]).contains(&l),
        "F restarted knowing the new leader already"
    );
    let caught_up = eventually(within, || {
        let voters_f: std::collections::BTreeSet<u64> = knows(&nodes[&f]).into_iter().collect();
        voters_f == voters && leader_of(&nodes[&f]) == Some(l)
    })
    .await;
    assert!(
        caught_up,
        "F never learned the membership from {l}: voters {:?}, leader {:?}",
        knows(&nodes[&f]),
        leader_of(&nodes[&f])
    );
    // And it takes the leader's entries from then on: a write through the new leader
    // reaches F.
    let target = nodes[&l].node.raft.metrics().borrow().last_log_index;
    assert!(
        eventually(within, || {
            nodes[&f]
                .node
                .raft
                .metrics()
                .borrow()
                .last_applied
                .map(|x| x.index)
                >= target
        })
        .await,
        "F does not apply the new leader's log"
    );
    for (_, n) in nodes {
        n.stop().await;
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// Elections run over mutual TLS too: openraft's own election timer is off, so the two
/// nodes left after the leader stops can elect one only through pre-votes answered over
/// TLS (each checked against the asking node's certificate) and then votes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_elects_a_new_leader_through_pre_votes() {
    let c = start_tls("sec-tls-elect").await;
    let l = c.leader().await;
    let t0 = c.t.nodes[l].raft.metrics().borrow().current_term;
    c.t.nodes[l].shutdown().await;
    let start = std::time::Instant::now();
    let new = loop {
        let found = (0..3).filter(|&i| i != l).find(|&i| {
            let m = c.t.nodes[i].raft.metrics().borrow().clone();
            m.state == openraft::ServerState::Leader && m.current_term > t0
        });
        if let Some(i) = found {
            break i;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no new leader over TLS"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_ne!(new, l);
}

/// Clients work over TLS against nodes on three distinct addresses — through a follower's
/// redirect to the leader's own address, whose certificate is checked for that address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_on_three_addresses_serves_clients() {
    let c = start_tls("sec-tls").await;
    let hosts: Vec<&str> =
        c.t.addrs
            .iter()
            .map(|a| a.client.split(':').next().unwrap())
            .collect();
    assert_eq!(hosts, ["127.0.0.1", "127.0.0.2", "127.0.0.3"]);
    let l = c.leader().await;
    let follower = (l + 1) % 3;
    let client = Client::with_options(
        vec![c.t.addrs[follower].client.clone()],
        ClientOptions {
            token: Some(ADMIN.into()),
            tls: Some(c.client_tls.clone()),
            ..ClientOptions::default()
        },
    );
    let s = client.open_session(60_000).await.unwrap();
    let token = granted(&s, "jobs/tls").await;
    assert_eq!(s.release("jobs/tls").await.unwrap(), token);
    s.close().await.unwrap();
    // A client that trusts another CA does not connect.
    let other = DevCa::new().unwrap();
    let stranger = Client::with_options(
        vec![c.t.addrs[l].client.clone()],
        ClientOptions {
            token: Some(ADMIN.into()),
            tls: Some(client_config_from(&[other.cert_der()]).unwrap()),
            ..ClientOptions::default()
        },
    );
    let r = tokio::time::timeout(Duration::from_secs(2), stranger.holders("jobs/tls")).await;
    assert!(
        !matches!(r, Ok(Ok(_))),
        "a node with an untrusted certificate answered"
    );
    c.t.stop().await;
}

/// A plain-TCP client on a TLS client port gets no answer — the handshake fails and the
/// connection is closed — and nothing is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_tcp_client_on_a_tls_port_is_refused() {
    let c = start_tls("sec-plain").await;
    let l = c.leader().await;
    c.client().holders("warm-up").await.unwrap();
    let mut s = TcpStream::connect(&c.t.addrs[l].client).await.unwrap();
    for (id, req) in [
        (
            1,
            Request::Authenticate {
                token: ADMIN.into(),
            },
        ),
        (
            2,
            Request::Open {
                ttl_ms: 60_000,
                key: None,
            },
        ),
    ] {
        let _ = frame::write(&mut s, &ClientFrame { id, req }).await;
    }
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        frame::read::<_, ServerFrame>(&mut s, frame::MAX_CLIENT_FRAME),
    )
    .await
    .expect("the node closes the connection");
    assert!(
        !matches!(answer, Ok(Some(_))),
        "a plain-TCP client got a protocol frame: {answer:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in &c.t.nodes {
        assert_eq!(
            n.shared.state().svc.usage().sessions,
            0,
            "no session was opened"
        );
    }
    c.t.stop().await;
}

/// Some bytes in the Raft port's frame (a length prefix and the peer wire version), for
/// the connections refused before the node reads a request (plain TCP on the TLS port,
/// TLS without a certificate): what they carry is never decoded.
#[derive(serde::Serialize)]
struct Garbage(u64);

impl frame::Wire for Garbage {
    const VERSION: u32 = frame::PEER_WIRE;
}

/// A vote sent the way a node sends one — the server's own network client, its own wire
/// types, the cluster's service settings — over mutual TLS with `tls`: `Ok` with the
/// answer when the node served it. So a refusal is the node's checks, never a frame it
/// could not read.
async fn real_vote(
    tls: NodeTls,
    settings: &std::sync::Arc<fencelock_server::settings::PeerSettings>,
    to: (u64, &NodeAddr),
    vote: Vote<u64>,
) -> Result<openraft::raft::VoteResponse<u64>, String> {
    use fencelock_server::settings::CarrySettings;
    use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
    let mut net = TlsNetwork::new(tls);
    net.carry(settings.clone());
    let mut conn = net.new_client(to.0, to.1).await;
    let option = RPCOption::new(Duration::from_secs(3));
    conn.vote(VoteRequest::new(vote, None), option)
        .await
        .map_err(|e| e.to_string())
}

/// Forged votes (a term far ahead, ~20 a second) at the leader's Raft port from a program
/// without a member's certificate: over plain TCP, over TLS with no certificate or one of
/// another CA, and with a certificate of this CA for a node that is not a member (or
/// claiming to be a member it is not). Every one is refused before Raft sees it: none is
/// answered, no node takes the forged term, and writes keep succeeding throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_peer_vote_without_a_member_certificate_is_refused() {
    let c = start_tls("sec-vote").await;
    let l = c.leader().await;
    let leader_id = l as u64 + 1;
    let raft_addr = c.t.addrs[l].raft.clone();
    let term = c.t.nodes[l].raft.metrics().borrow().current_term;
    let forged = |from: u64| Vote::new(term + 1000, from);
    let settings = c.t.nodes[l].elector().settings().clone();
    let to = (leader_id, &c.t.addrs[l]);
    // The identities the attacker tries over TLS.
    let other_ca = DevCa::new().unwrap();
    let ca_der = c.ca.cert_der();
    let non_member =
        c.ca.node(9, &["127.0.0.9"])
            .unwrap()
            .node_tls(&ca_der)
            .unwrap();
    let foreign = other_ca
        .node(2, &["127.0.0.2"])
        .unwrap()
        .node_tls(&other_ca.cert_der())
        .unwrap();
    let no_cert = client_config_from(std::slice::from_ref(&ca_der)).unwrap();
    let attack = async {
        let mut tries = 0u32;
        let mut answered = 0u32;
        for round in 0..40u32 {
            let got = match round % 5 {
                // Plain TCP on the TLS Raft port.
                0 => {
                    let mut s = TcpStream::connect(&raft_addr).await.unwrap();
                    let _ = frame::write(&mut s, &Garbage(term + 1000)).await;
                    read_any(&mut s).await
                }
                // TLS, no client certificate.
                1 => {
                    let dial = tokio_rustls::TlsConnector::from(no_cert.clone());
                    tls_vote(dial, leader_id, &raft_addr, &Garbage(term + 1000)).await
                }
                // TLS, a certificate from another CA.
                2 => real_vote(foreign.clone(), &settings, to, forged(2))
                    .await
                    .is_ok(),
                // This CA's certificate for node 9, not a member.
                3 => real_vote(non_member.clone(), &settings, to, forged(9))
                    .await
                    .is_ok(),
                // Node 9's certificate, claiming to be node 2.
                _ => real_vote(non_member.clone(), &settings, to, forged(2))
                    .await
                    .is_ok(),
            };
            tries += 1;
            answered += u32::from(got);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (tries, answered)
    };
    let writes = async {
        let client = c.client();
        let s = client.open_session(60_000).await.unwrap();
        let mut ok = 0;
        for _ in 0..20 {
            let t = granted(&s, "jobs/vote").await;
            assert_eq!(s.release("jobs/vote").await.unwrap(), t);
            ok += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        s.close().await.unwrap();
        ok
    };
    let ((tries, answered), ok) = tokio::join!(attack, writes);
    assert_eq!(tries, 40);
    assert_eq!(answered, 0, "a forged vote was answered");
    assert_eq!(ok, 20, "every write succeeded during the attack");
    // The forged term was never adopted by any node (a natural election on a loaded
    // machine may add a term or two; the forged one is 1000 ahead).
    for n in &c.t.nodes {
        let now = n.raft.metrics().borrow().current_term;
        assert!(
            now < term + 1000,
            "node {} took the forged term {now}",
            n.id
        );
    }
    // The control: the same vote, sent the same way with a member's certificate, is
    // served — so the refusals above were the identity checks. Its term is stale: the
    // leader refuses the vote itself, and nothing changes.
    let member =
        c.ca.node(2, &["127.0.0.2"])
            .unwrap()
            .node_tls(&ca_der)
            .unwrap();
    let answer = real_vote(member, &settings, to, Vote::new(0, 2)).await;
    assert!(
        matches!(&answer, Ok(v) if !v.vote_granted),
        "a member's vote was not served: {answer:?}"
    );
    c.t.stop().await;
}

/// A node waiting to be added knows no membership yet. Before, any certificate of the CA
/// was served there: a removed member's (node 5's, here) could have it vote at term
/// `u64::MAX`, a vote the leader meets when it adds the node and every later election
/// then overflows on (openraft's `term + 1`, unwrapped), stopping the cluster for good.
/// Now node 4 serves only the members its operator listed (1 to 3): node 5's vote (in a
/// plain term) is not answered, and even a listed member's vote at that term is refused (no term or log
/// index past 2^62 is served from anyone). Node 4's vote stays unset, it is added, no
/// node takes a forged term, and the cluster commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_waiting_to_be_added_serves_only_its_listed_members_and_no_term_past_the_bound() {
    let c = start_tls("sec-joining").await;
    let l = c.leader().await;
    let term = c.t.nodes[l].raft.metrics().borrow().current_term;
    let settings = c.t.nodes[l].elector().settings().clone();
    let r = tokio::net::TcpListener::bind("127.0.0.4:0").await.unwrap();
    let cl = tokio::net::TcpListener::bind("127.0.0.4:0").await.unwrap();
    let four = NodeAddr {
        raft: r.local_addr().unwrap().to_string(),
        client: cl.local_addr().unwrap().to_string(),
    };
    let joining = TlsNode::start(&c.ca, 4, &c.t.base, r, cl).await;
    let ca_der = c.ca.cert_der();
    let cert_of = |id: u64| {
        c.ca.node(id, &[&format!("127.0.0.{id}")])
            .unwrap()
            .node_tls(&ca_der)
            .unwrap()
    };
    // Node 5, not listed, even in a plain term: not answered.
    let ahead = Vote::new(term + 1000, 5);
    let answer = real_vote(cert_of(5), &settings, (4, &four), ahead).await;
    assert!(
        answer.is_err(),
        "node 5, not listed, was answered: {answer:?}"
    );
    let far = Vote::new(u64::MAX, 2);
    let answer = real_vote(cert_of(2), &settings, (4, &four), far).await;
    assert!(
        answer.is_err(),
        "a vote at term u64::MAX was answered: {answer:?}"
    );
    let vote = joining.node.raft.metrics().borrow().vote;
    assert_eq!(vote.leader_id().term, 0, "node 4 took a vote: {vote}");

    let client = c.client();
    client
        .add_learner(4, four.clone())
        .await
        .expect("add-learner");
    // No node took a forged term (a natural election on a loaded machine may add a term
    // or two; the forged ones are 1000 ahead, or u64::MAX).
    for n in c.t.nodes.iter().chain([&joining.node]) {
        let now = n.raft.metrics().borrow().current_term;
        assert!(now < term + 1000, "node {} took a forged term: {now}", n.id);
    }
    let s = client.open_session(60_000).await.unwrap();
    let t = granted(&s, "jobs/joined").await;
    assert_eq!(s.release("jobs/joined").await.unwrap(), t);
    s.close().await.unwrap();
    joining.stop().await;
    c.t.stop().await;
}

/// True if a Raft answer came back within 3 s: a whole length-prefixed frame (a TLS
/// alert, which a node sends a plain-TCP peer before closing, is not one: its first bytes
/// read as a length far over any frame's).
async fn read_any<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> bool {
    use tokio::io::AsyncReadExt;
    let answer = async {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.ok()?;
        let len = u32::from_be_bytes(len);
        if len > 1 << 20 {
            return None;
        }
        let mut body = vec![0u8; len as usize];
        s.read_exact(&mut body).await.ok()
    };
    match tokio::time::timeout(Duration::from_secs(3), answer).await {
        Ok(got) => got.is_some(),
        Err(_) => panic!("the connection was neither answered nor closed"),
    }
}

/// Sends a forged Raft frame over TLS (if the handshake succeeds); true if answered.
async fn tls_vote(
    dial: tokio_rustls::TlsConnector,
    leader: u64,
    addr: &str,
    req: &Garbage,
) -> bool {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(node_name(leader)).unwrap();
    let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(3), dial.connect(name, tcp)).await
    else {
        return false; // refused during the handshake
    };
    if frame::write(&mut s, req).await.is_err() {
        return false;
    }
    read_any(&mut s).await
}

/// `fencelock elect` leads until an administrator force-releases its election: then it
/// stops claiming leadership and exits 3 (a second leader is elected with a higher epoch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_force_release_ends_an_elected_leader() {
    use tokio::io::{AsyncBufReadExt, BufReader as TokioBufReader};
    let c = start_tls("sec-elect").await;
    let (dir, mut cli) = c.cli("sec-elect-cli");
    let mut cli = cli
        .args(["elect", "jobs/scheduler"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = TokioBufReader::new(cli.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), out.next_line())
        .await
        .expect("elected within 20 s")
        .unwrap()
        .unwrap();
    let epoch: u64 = line.strip_prefix("epoch ").unwrap().parse().unwrap();
    let admin = c.client();
    let held = admin.holders("jobs/scheduler").await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].token.0, epoch);
    admin
        .force_release(held[0].session.0, "jobs/scheduler")
        .await
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), cli.wait())
        .await
        .expect("the leader stops within 10 s")
        .unwrap();
    assert_eq!(status.code(), Some(3));
    let next = admin.open_session(60_000).await.unwrap();
    match next
        .acquire("jobs/scheduler", Mode::Exclusive, WaitSpec::None)
        .await
        .unwrap()
    {
        Acquired::Granted(t) => assert!(t.0 > epoch),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
    c.t.stop().await;
}

/// A node serves at most `max_connections` client connections at once: one more is closed
/// at once, without an answer; when one closes, a new one is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connections_beyond_the_limit_are_closed() {
    let mut policy = tokens();
    policy.max_connections = 2;
    let t = start_with("sec-conns", policy).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut a = t.attacker().await;
        let (r, _) = a.call(authenticate(VIEWER)).await;
        assert!(matches!(r, Ok(Reply::Authenticated)), "{r:?}");
        held.push(a);
    }
    let mut third = t.attacker().await;
    let _ = frame::write(
        &mut third.s,
        &ClientFrame {
            id: 1,
            req: authenticate(VIEWER),
        },
    )
    .await;
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        frame::read::<_, ServerFrame>(&mut third.s, frame::MAX_CLIENT_FRAME),
    )
    .await
    .expect("closed, not left hanging");
    assert!(
        !matches!(got, Ok(Some(_))),
        "the third connection was served: {got:?}"
    );
    drop(held.pop());
    let mut again = None;
    for _ in 0..100 {
        let mut a = t.attacker().await;
        let _ = frame::write(
            &mut a.s,
            &ClientFrame {
                id: 1,
                req: authenticate(VIEWER),
            },
        )
        .await;
        if let Ok(Ok(Some(f))) = tokio::time::timeout(
            Duration::from_secs(1),
            frame::read::<_, ServerFrame>(&mut a.s, frame::MAX_CLIENT_FRAME),
        )
        .await
        {
            again = Some(f);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        matches!(
            again,
            Some(ServerFrame::Reply {
                result: Ok(Reply::Authenticated),
                ..
            })
        ),
        "a freed slot is served again: {again:?}"
    );
    t.stop().await;
}

/// On a full client port, a connection that has not had a token accepted (requests
/// without one, each answered `Unauthenticated`; a wrong token closes its connection
/// anyway) gives its place to a new connection, oldest first, while an authenticated one
/// keeps its place; once every place is authenticated, one more is closed unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_without_an_accepted_token_gives_its_place_to_a_new_one() {
    let mut policy = tokens();
    policy.max_connections = 3;
    let t = start_with("sec-displace", policy).await;
    let mut proven = t.attacker().await;
    let (r, _) = proven.call(authenticate(VIEWER)).await;
    assert!(matches!(r, Ok(Reply::Authenticated)), "{r:?}");
    let mut older = t.attacker().await;
    let (r, _) = older.call(Request::Members).await;
    assert!(matches!(r, Err(ClientError::Unauthenticated)), "{r:?}");
    let mut tokenless = t.attacker().await;
    let (r, _) = tokenless.call(Request::Members).await;
    assert!(matches!(r, Err(ClientError::Unauthenticated)), "{r:?}");
    // Closed: the stream ends (or fails) instead of answering.
    async fn closed(raw: &mut Raw) -> bool {
        let got = tokio::time::timeout(
            Duration::from_secs(30),
            frame::read::<_, ServerFrame>(&mut raw.s, frame::MAX_CLIENT_FRAME),
        )
        .await;
        matches!(got, Ok(Ok(None)) | Ok(Err(_)))
    }
    // Each newcomer takes the oldest unauthenticated place.
    let mut fourth = t.attacker().await;
    assert!(
        closed(&mut older).await,
        "the older tokenless connection was kept"
    );
    let (r, _) = fourth.call(authenticate(JOBS)).await;
    assert!(matches!(r, Ok(Reply::Authenticated)), "{r:?}");
    let mut fifth = t.attacker().await;
    assert!(
        closed(&mut tokenless).await,
        "the tokenless connection was kept"
    );
    let (r, _) = fifth.call(authenticate(ADMIN)).await;
    assert!(matches!(r, Ok(Reply::Authenticated)), "{r:?}");
    // Every place authenticated: one more is closed unanswered.
    let mut sixth = t.attacker().await;
    let _ = frame::write(
        &mut sixth.s,
        &ClientFrame {
            id: 1,
            req: authenticate(VIEWER),
        },
    )
    .await;
    assert!(closed(&mut sixth).await, "a sixth connection was served");
    // The authenticated ones kept their places and are served.
    for raw in [&mut proven, &mut fourth, &mut fifth] {
        let (r, _) = raw.call(Request::Members).await;
        assert!(r.is_ok(), "{r:?}");
    }
    t.stop().await;
}
