//! `fencelock`: the command-line client.
//!
//! ```text
//! fencelock lock NAME -- COMMAND [ARGS…]   run COMMAND while holding NAME (token in FENCELOCK_TOKEN)
//! fencelock holder NAME                     who holds NAME (linearizable read)
//! fencelock queue NAME                      who waits for NAME, head first
//! fencelock elect NAME                      campaign; print the epoch when elected; lead until Ctrl-C/SIGTERM
//! fencelock members                         the cluster's voters and learners
//! fencelock add-learner ID RAFT CLIENT      add a node (as a learner) and wait until it caught up
//! fencelock set-voters ID[,ID…]             make exactly these nodes the voters (each live, caught up)
//! fencelock remove-learner ID               drop a learner (one that never caught up)
//! fencelock force-release SESSION NAME      (admin) release SESSION's hold on NAME
//! ```
//! The cluster's client addresses come from `--cluster` or `FENCELOCK_CLUSTER`
//! (comma-separated; default the three of `make cluster`); TLS with `--tls-ca` /
//! `FENCELOCK_TLS_CA` (or plain TCP with `--insecure-plaintext` /
//! `FENCELOCK_INSECURE_PLAINTEXT=true`). The bearer token comes from
//! `--auth-token-file` / `FENCELOCK_AUTH_TOKEN_FILE`, or `FENCELOCK_AUTH_TOKEN` (not to be
//! confused with `FENCELOCK_TOKEN`, the fencing token `lock` gives its command).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use fencelock::{Mode, Output, ReleaseReason};
use fencelock_server::client::{Acquired, Client, ClientOptions, LeaseGuard, Session};
use fencelock_server::protocol::WaitSpec;
use fencelock_server::types::NodeAddr;

#[derive(Parser)]
#[command(about = "fencelock client: locks with fencing tokens on a replicated cluster")]
struct Args {
    /// Client addresses of the cluster's nodes, comma-separated.
    #[arg(
        long,
        env = "FENCELOCK_CLUSTER",
        default_value = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
    )]
    cluster: String,
    /// Session time-to-live (ms).
    #[arg(long, default_value_t = 10_000)]
    ttl_ms: u64,
    /// A file holding the bearer token (its first line).
    #[arg(long, env = "FENCELOCK_AUTH_TOKEN_FILE")]
    auth_token_file: Option<std::path::PathBuf>,
    /// The cluster CA certificate (PEM): connect over TLS and verify the nodes with it.
    #[arg(long, env = "FENCELOCK_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,
    /// Connect over plain TCP (a cluster run with --insecure-plaintext, on loopback).
    #[arg(long, env = "FENCELOCK_INSECURE_PLAINTEXT", conflicts_with = "tls_ca")]
    insecure_plaintext: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a command while holding the lock; stop it if the lease is no longer safe.
    Lock {
        /// The lock.
        name: String,
        /// Give up after this many ms of waiting (default: wait forever).
        #[arg(long)]
        wait_ms: Option<u64>,
        /// Try once; exit 2 if the lock is taken.
        #[arg(long = "try")]
        try_only: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Print the holder(s) of a lock: `SESSION MODE TOKEN` per line.
    Holder {
        /// The lock.
        name: String,
    },
    /// Print the queue of a lock, head first: `SESSION MODE` per line.
    Queue {
        /// The lock.
        name: String,
    },
    /// Campaign in an election; print `epoch N` when elected; lead until Ctrl-C.
    Elect {
        /// The election.
        name: String,
    },
    /// Print the cluster's members: `voter|learner ID RAFT CLIENT` per line.
    Members,
    /// Add a node as a learner (start it first, without --init) and wait until it caught up.
    AddLearner {
        /// The node's id.
        id: u64,
        /// Its Raft address (host:port, loopback).
        raft: String,
        /// Its client address (host:port, loopback).
        client: String,
    },
    /// Make exactly these nodes the voters (comma-separated ids); members left out are removed.
    SetVoters {
        /// The voters' ids.
        #[arg(value_delimiter = ',', required = true)]
        ids: Vec<u64>,
    },
    /// Remove a learner (not a voter) from the membership, e.g. one that never caught up.
    RemoveLearner {
        /// The learner's id.
        id: u64,
    },
    /// (Admin) release a session's hold on a lock; its owner is told and `lock` stops its command.
    ForceRelease {
        /// The holding session (see `holder`).
        session: u64,
        /// The lock.
        name: String,
    },
}

/// The bearer token: the file's first line, else `FENCELOCK_AUTH_TOKEN`.
fn auth_token(file: Option<&std::path::Path>) -> Result<Option<String>, String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("auth token file {}: {e}", path.display()))?;
        let token = text.lines().next().unwrap_or("").trim().to_string();
        if token.is_empty() {
            return Err(format!("auth token file {} is empty", path.display()));
        }
        return Ok(Some(token));
    }
    Ok(std::env::var("FENCELOCK_AUTH_TOKEN")
        .ok()
        .filter(|t| !t.is_empty()))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let token = match auth_token(args.auth_token_file.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("fencelock: {e}");
            return ExitCode::from(1);
        }
    };
    let tls = match (&args.tls_ca, args.insecure_plaintext) {
        (Some(ca), _) => match fencelock_server::tls::client_config(ca) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("fencelock: {e}");
                return ExitCode::from(1);
            }
        },
        (None, true) => None,
        (None, false) => {
            eprintln!(
                "fencelock: give --tls-ca / FENCELOCK_TLS_CA, or --insecure-plaintext / \
                 FENCELOCK_INSECURE_PLAINTEXT=true for a plain-TCP cluster"
            );
            return ExitCode::from(1);
        }
    };
    let client = Client::with_options(
        args.cluster
            .split(',')
            .map(|s| s.trim().to_string())
            .collect(),
        ClientOptions { token, tls },
    );
    let res: Result<ExitCode, Box<dyn std::error::Error>> = match args.cmd {
        Cmd::Holder { name } => client
            .holders(&name)
            .await
            .map(|hs| {
                for h in hs {
                    println!("{} {} {}", h.session.0, h.mode, h.token.0);
                }
                ExitCode::SUCCESS
            })
            .map_err(Into::into),
        Cmd::Queue { name } => client
            .waiters(&name)
            .await
            .map(|ws| {
                for w in ws {
                    println!("{} {}", w.session.0, w.mode);
                }
                ExitCode::SUCCESS
            })
            .map_err(Into::into),
        Cmd::Lock {
            name,
            wait_ms,
            try_only,
            command,
        } => {
            let wait = match (try_only, wait_ms) {
                (true, _) => WaitSpec::None,
                (false, Some(ms)) => WaitSpec::ForMs(ms),
                (false, None) => WaitSpec::Forever,
            };
            lock(&client, args.ttl_ms, &name, wait, &command).await
        }
        Cmd::Elect { name } => elect(&client, args.ttl_ms, &name).await,
        Cmd::Members => client
            .members()
            .await
            .map(|(voters, learners)| {
                for (kind, list) in [("voter", voters), ("learner", learners)] {
                    for (id, a) in list {
                        println!("{kind} {id} {} {}", a.raft, a.client);
                    }
                }
                ExitCode::SUCCESS
            })
            .map_err(Into::into),
        Cmd::AddLearner {
            id,
            raft,
            client: c,
        } => client
            .add_learner(id, NodeAddr { raft, client: c })
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
        Cmd::SetVoters { ids } => client
            .set_voters(ids)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
        Cmd::RemoveLearner { id } => client
            .remove_learner(id)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
        Cmd::ForceRelease { session, name } => client
            .force_release(session, &name)
            .await
            .map(|t| {
                println!("released token {}", t.0);
                ExitCode::SUCCESS
            })
            .map_err(Into::into),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fencelock: {e}");
            ExitCode::from(1)
        }
    }
}

async fn open(
    client: &Client,
    ttl_ms: u64,
) -> Result<(Arc<Session>, LeaseGuard), Box<dyn std::error::Error>> {
    let opened_at = Instant::now();
    let session = Arc::new(client.open_session(ttl_ms).await?);
    let guard = LeaseGuard::start(session.clone(), ttl_ms, ttl_ms / 4, ttl_ms / 5, opened_at)
        .map_err(|e| format!("ttl too small: {e}"))?;
    Ok((session, guard))
}

async fn lock(
    client: &Client,
    ttl_ms: u64,
    name: &str,
    wait: WaitSpec,
    command: &[String],
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut pushes = client.subscribe();
    let (session, guard) = open(client, ttl_ms).await?;
    let token = match session.acquire(name, Mode::Exclusive, wait).await? {
        Acquired::Granted(t) => t,
        other => {
            eprintln!("fencelock: lock {name} not acquired: {other:?}");
            let _ = session.close().await;
            return Ok(ExitCode::from(2));
        }
    };
    // The grant may arrive after the lease stopped being safe (a slow wait, a pause): then
    // the command must not start at all.
    if !guard.may_act() {
        eprintln!(
            "fencelock: granted {name} but the lease is no longer safe; not running the command"
        );
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            let _ = session.release(name).await;
            let _ = session.close().await;
        })
        .await;
        return Ok(ExitCode::from(3));
    }
    eprintln!("fencelock: holding {name} with token {}", token.0);
    let mut child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .env("FENCELOCK_TOKEN", token.0.to_string())
        .env("FENCELOCK_SESSION", session.id().to_string())
        .env("FENCELOCK_LOCK", name)
        .spawn()?;
    let mut check = tokio::time::interval(Duration::from_millis(20));
    let stop_signal = interrupted();
    tokio::pin!(stop_signal);
    let status = loop {
        tokio::select! {
            st = child.wait() => break Some(st?),
            _ = &mut stop_signal => {
                eprintln!("fencelock: interrupted; stopping the command and releasing {name}");
                stop(&mut child).await;
                let _ = tokio::time::timeout(Duration::from_secs(5), async {
                    let _ = session.release(name).await;
                    let _ = session.close().await;
                })
                .await;
                return Ok(ExitCode::from(130));
            }
            p = pushes.recv() => {
                if let Ok(Output::Released { session: s, lock, reason, .. }) = p {
                    if s.0 == session.id() && lock.as_str() == name {
                        if reason == ReleaseReason::Released {
                            eprintln!("fencelock: {name} was released by an administrator");
                        }
                        guard.session_lost();
                    }
                }
            }
            _ = check.tick() => {}
        }
        if !guard.may_act() {
            break None;
        }
    };
    let Some(status) = status else {
        eprintln!("fencelock: lease on {name} no longer safe; stopping the command");
        stop(&mut child).await;
        // Best effort: the cluster may be unreachable, and the session expires anyway.
        let _ = tokio::time::timeout(Duration::from_secs(2), session.close()).await;
        return Ok(ExitCode::from(3));
    };
    let _ = session.release(name).await;
    let _ = session.close().await;
    Ok(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}

/// Resolves on Ctrl-C or SIGTERM.
async fn interrupted() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn stop(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        // SIGTERM first, SIGKILL after a second.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        if tokio::time::timeout(Duration::from_secs(1), child.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = child.kill().await;
}

async fn elect(
    client: &Client,
    ttl_ms: u64,
    name: &str,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut pushes = client.subscribe();
    let (session, guard) = open(client, ttl_ms).await?;
    match session
        .acquire(name, Mode::Exclusive, WaitSpec::Forever)
        .await?
    {
        Acquired::Granted(t) => println!("epoch {}", t.0),
        other => {
            eprintln!("fencelock: not elected: {other:?}");
            return Ok(ExitCode::from(2));
        }
    }
    let mut check = tokio::time::interval(Duration::from_millis(50));
    let stop_signal = interrupted();
    tokio::pin!(stop_signal);
    loop {
        tokio::select! {
            _ = &mut stop_signal => {
                let _ = session.release(name).await;
                let _ = session.close().await;
                return Ok(ExitCode::SUCCESS);
            }
            p = pushes.recv() => {
                // An administrator's forced release ends the leadership too.
                if let Ok(Output::Released { session: s, lock, .. }) = p {
                    if s.0 == session.id() && lock.as_str() == name {
                        eprintln!("fencelock: leadership of {name} released by an administrator");
                        let _ = session.close().await;
                        return Ok(ExitCode::from(3));
                    }
                }
            }
            _ = check.tick() => {
                if !guard.may_act() {
                    eprintln!("fencelock: leadership lease lost");
                    return Ok(ExitCode::from(3));
                }
            }
        }
    }
}
