//! `fencelock-workload`: one client process of the black-box test (and of
//! `make bench-cluster`'s fault-free runs). It loops — open a session, acquire the lock,
//! write to a FenceGate-protected resource with the token (checking its lease before each
//! write), release — and logs every operation with a wall-clock timestamp, one line each:
//!
//! ```text
//! <unix nanos> <thread> inv_acq | ok_acq <token> | inv_rel | ok_rel | lost | write <token> ok|stale | indet [- error] | sess_lost | unsafe
//! ```
//! `sess_lost`: the service ended the session (it expired) while the worker waited for a
//! grant; `unsafe`: the lease guard said the lease was no longer safe, so the worker skipped
//! its writes (keep-alives had failed for `ttl - margin`).
//! A thread is one session (a worker opens a new one after losing one), so each thread
//! has at most one operation in flight, as a linearizability checker needs.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use fencelock::Mode;
use fencelock_server::client::{Acquired, Client, ClientOptions, LeaseGuard, LeaseInstant};
use fencelock_server::protocol::{ClientError, WaitSpec};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[derive(Parser)]
struct Args {
    /// Client addresses of the cluster, comma-separated.
    #[arg(long)]
    cluster: String,
    /// The resource's address (a FenceGate behind a line protocol).
    #[arg(long)]
    resource: String,
    /// This worker's number (threads are numbered worker*10000 + k).
    #[arg(long)]
    worker: u64,
    /// Stop starting new rounds after this long (ms).
    #[arg(long, default_value_t = 20_000)]
    duration_ms: u64,
    /// Session ttl (ms).
    #[arg(long, default_value_t = 1500)]
    ttl_ms: u64,
    /// The lock.
    #[arg(long, default_value = "res")]
    lock: String,
    /// History log file.
    #[arg(long)]
    log: std::path::PathBuf,
    /// The cluster CA (PEM): connect over TLS, verifying the nodes against it. Without
    /// it, plain TCP (a cluster started with `--insecure-plaintext`).
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    /// A file holding the bearer token to present (a cluster started with `--tokens`).
    #[arg(long)]
    auth_token_file: Option<std::path::PathBuf>,
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

struct Log(std::fs::File);

impl Log {
    fn ev(&mut self, thread: u64, what: &str) {
        let _ = writeln!(self.0, "{} {} {}", now_ns(), thread, what);
        let _ = self.0.flush();
    }
}

async fn write_resource(
    conn: &mut Option<BufReader<TcpStream>>,
    addr: &str,
    token: u64,
    worker: u64,
    session: u64,
) -> std::io::Result<bool> {
    if conn.is_none() {
        *conn = Some(BufReader::new(TcpStream::connect(addr).await?));
    }
    let Some(c) = conn.as_mut() else {
        return Err(std::io::Error::other("no connection"));
    };
    c.get_mut()
        .write_all(format!("W {token} {worker} {session}\n").as_bytes())
        .await?;
    let mut line = String::new();
    c.read_line(&mut line).await?;
    Ok(line.starts_with("ok"))
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let mut log = Log(std::fs::File::create(&a.log).expect("log file"));
    let tls = match &a.tls_ca {
        Some(ca) => match fencelock_server::tls::client_config(ca) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("fencelock-workload: {e}");
                std::process::exit(2);
            }
        },
        None => None,
    };
    let token = match &a.auth_token_file {
        Some(p) => match fencelock_server::disk::read_capped_text(
            p,
            fencelock_server::auth::MAX_TOKEN_FILE,
        ) {
            Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
            Ok(_) => {
                eprintln!("fencelock-workload: {}: empty token file", p.display());
                std::process::exit(2);
            }
            Err(e) => {
                eprintln!("fencelock-workload: {}: {e}", p.display());
                std::process::exit(2);
            }
        },
        None => None,
    };
    let client = Client::with_options(
        a.cluster.split(',').map(|s| s.to_string()).collect(),
        ClientOptions {
            token,
            tls,
            ..ClientOptions::default()
        },
    );
    let start = Instant::now();
    let mut thread = a.worker * 10_000;
    let mut res: Option<BufReader<TcpStream>> = None;
    let mut rng = a.worker.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut rand = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n.max(1)
    };
    'sessions: while start.elapsed() < Duration::from_millis(a.duration_ms) {
        thread += 1;
        let opened_at = LeaseInstant::now();
        let Ok(session) = client.open_session(a.ttl_ms).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let session = Arc::new(session);
        let Ok(guard) = LeaseGuard::start_at(
            session.clone(),
            a.ttl_ms,
            a.ttl_ms / 4,
            a.ttl_ms / 5,
            opened_at,
        ) else {
            eprintln!("bad ttl");
            return;
        };
        while start.elapsed() < Duration::from_millis(a.duration_ms) {
            log.ev(thread, "inv_acq");
            let token = match session
                .acquire(&a.lock, Mode::Exclusive, WaitSpec::Forever)
                .await
            {
                Ok(Acquired::Granted(t)) => t.0,
                Ok(got) => {
                    // With a wait forever, anything but a grant means the session ended
                    // (a hold that ended meanwhile counts as not taken: it wrote nothing).
                    log.ev(thread, "indet");
                    if got == Acquired::SessionLost {
                        log.ev(thread, "sess_lost");
                    }
                    continue 'sessions;
                }
                Err(e) => {
                    log.ev(thread, &format!("indet - {e}"));
                    let _ = session.close().await;
                    continue 'sessions;
                }
            };
            log.ev(thread, &format!("ok_acq {token}"));
            for _ in 0..3 {
                if !guard.may_act() {
                    log.ev(thread, "unsafe");
                    break;
                }
                // "Work" between the lease check and the write: a pause here is the
                // GC-pause story, and the FenceGate must refuse the late write.
                tokio::time::sleep(Duration::from_millis(rand(15))).await;
                match write_resource(&mut res, &a.resource, token, a.worker, session.id()).await {
                    Ok(ok) => log.ev(
                        thread,
                        &format!("write {token} {}", if ok { "ok" } else { "stale" }),
                    ),
                    Err(_) => res = None,
                }
            }
            log.ev(thread, "inv_rel");
            match session.release(&a.lock).await {
                Ok(_) => log.ev(thread, "ok_rel"),
                Err(ClientError::Core(e))
                    if e.kind == "not_holder" || e.kind == "unknown_session" =>
                {
                    log.ev(thread, "lost");
                    let _ = session.close().await;
                    continue 'sessions;
                }
                Err(e) => {
                    log.ev(thread, &format!("indet - {e}"));
                    let _ = session.close().await;
                    continue 'sessions;
                }
            }
            tokio::time::sleep(Duration::from_millis(rand(10))).await;
        }
        let _ = session.close().await;
        break;
    }
}
