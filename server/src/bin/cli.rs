//! `fencelock`: the command-line client.
//!
//! ```text
//! fencelock lock NAME -- COMMAND [ARGS…]   run COMMAND while holding NAME (token in FENCELOCK_TOKEN)
//! fencelock lock NAME --permits N --limit M -- COMMAND   … holding N of the semaphore NAME's M permits
//! fencelock holder NAME                     who holds NAME (linearizable read)
//! fencelock queue NAME                      who waits for NAME, head first
//! fencelock permits NAME                    a semaphore's permits in use and its limit
//! fencelock elect NAME                      campaign; print the epoch when elected; lead until Ctrl-C/SIGTERM
//! fencelock elect --observe NAME | observe NAME   print the election's leader as it changes
//! fencelock watch NAME                      print every change of NAME's holders until Ctrl-C
//! fencelock members                         the cluster's voters and learners
//! fencelock status [--json]                 every node's role, term, indexes, health and table use
//! fencelock add-learner ID RAFT CLIENT      add a node (as a learner) and wait until it caught up
//! fencelock set-voters ID[,ID…]             make exactly these nodes the voters (each live, caught up)
//! fencelock remove-learner ID               drop a learner (one that never caught up)
//! fencelock force-release SESSION NAME      (admin) release SESSION's hold on NAME
//! fencelock force-close SESSION             (admin) close SESSION: its holds, waits and watches end now
//! fencelock force-close --owner OWNER       (admin) close every session OWNER opened (a revoked token's)
//! fencelock sessions [--owner OWNER]        (admin) the open sessions, each with who opened it
//! fencelock export [-o FILE] [--from-index I] [--to-index I] [--from-time MS] [--to-time MS]
//!                                           (admin) the applied history as a recording (docs/RECORDING.md)
//! ```
//! The cluster's client addresses come from `--cluster` or `FENCELOCK_CLUSTER`
//! (comma-separated; default the three of `make cluster`: 127.0.0.1:7101, 127.0.0.2:7102,
//! 127.0.0.3:7103). The options `--cluster`,
//! `--ttl-ms`, `--timeout-ms`, `--connect-timeout-ms` and the TLS and token options may
//! stand before or after the subcommand, and so may `--label` (the label of the session
//! `lock`, `elect`, `watch` and `observe` open; default `HOSTNAME:PID`). TLS with `--tls-ca` / `FENCELOCK_TLS_CA` (or plain
//! TCP with `--insecure-plaintext` / `FENCELOCK_INSECURE_PLAINTEXT=true`). The bearer token
//! comes from `--auth-token-file` / `FENCELOCK_AUTH_TOKEN_FILE`, or `FENCELOCK_AUTH_TOKEN`
//! (not to be confused with `FENCELOCK_TOKEN`, the fencing token `lock` gives its command).
//!
//! # How `lock` keeps its command inside the lease
//!
//! `lock` does not start COMMAND itself: it starts a copy of its own binary in a hidden
//! mode, the *supervisor* (`fencelock __supervise`), in a new process group, and the
//! supervisor starts COMMAND in that same group. The supervisor
//! * makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`), so every descendant of
//!   COMMAND that is orphaned becomes its child, and it knows that the group is empty when
//!   it has no children left;
//! * asks the kernel for SIGTERM when the `lock` process dies (`PR_SET_PDEATHSIG`, set on
//!   itself after exec, then checks that its parent is still the `lock` process that
//!   started it, which closes the race with a `lock` that died before that), and also
//!   polls its parent id every 100 ms;
//! * holds the lease's deadline, which `lock` writes to a private file (16 bytes,
//!   `LeaseFile`) whenever it moves and which the supervisor opens and unlinks at start,
//!   on the clock the lease is timed by (it counts a suspend), so the deadline holds even
//!   while `lock` is stopped (Ctrl-Z, SIGSTOP, a debugger) or blocked;
//! * on SIGTERM, SIGINT or SIGHUP, or when `lock` is gone, or when the lease's deadline
//!   passes, or when COMMAND has ended and left processes behind, sends SIGTERM to the
//!   group, and SIGKILL to the group (itself included) after `--kill-after-ms` if anything
//!   is left;
//! * exits with COMMAND's status (128 + N if a signal N ended it) once nothing is left.
//!
//! Every call is a safe one (std, tokio and the `nix` crate's safe wrappers of `prctl`,
//! `killpg` and `waitpid`): no `unsafe`, no code between `fork` and `exec`.

use fencelock_server::note;
use fencelock_server::stdio::{emit, field, hides_text, shown, write_out, Written};
use std::collections::HashSet;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use fencelock::{Change, Mode, Output, ReleaseReason};
use fencelock_server::auth::Principal;
use fencelock_server::client::{
    Acquired, Client, ClientOptions, HoldEnded, LeaseGuard, LeaseInstant, Members, Session,
    Timeouts, PAGE_REPLY_TIME,
};
use fencelock_server::membership::MAX_MEMBERS;
use fencelock_server::ops::STEPPED_BACK;
use fencelock_server::protocol::{ClientError, ListedSession, NodeStatus, WaitSpec};
use fencelock_server::types::NodeAddr;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Exit status when `lock --try` / `--wait-ms` did not get the lock, or `elect` was not
/// elected.
const EXIT_NOT_ACQUIRED: u8 = 2;
/// Exit status when the lease stopped being safe (the command was stopped or not started),
/// or a watch's session was lost.
const EXIT_LEASE_LOST: u8 = 3;
/// Exit status of a usage error (`EX_USAGE` of BSD's sysexits.h; clap's own 2 would read
/// as "not acquired").
const EXIT_USAGE: u8 = 64;
/// Exit status when the command was not found (as a POSIX shell).
const EXIT_NOT_FOUND: u8 = 127;
/// Exit status when the command was found but could not be run (as a POSIX shell).
const EXIT_CANNOT_RUN: u8 = 126;
/// Exit status of the supervisor's own failure (it could not catch signals or read the
/// lease file `lock` wrote, or `lock` was gone before it started): the command was not
/// started. 125, as GNU `timeout` and `env` report their own failure, so that it cannot be
/// read as the command's 1.
const EXIT_SUPERVISOR: u8 = 125;
/// The most of a host-name file read for the default label (POSIX's `HOST_NAME_MAX`).
const HOST_NAME_MAX: u64 = 255;
/// How often `lock`, and its supervisor, look at the lease: the SIGTERM at its end comes
/// up to this much after it.
const LEASE_CHECK: Duration = Duration::from_millis(20);
/// The hidden subcommand that runs the supervisor.
const SUPERVISE: &str = "__supervise";

#[derive(Parser)]
#[command(about = "fencelock client: locks with fencing tokens on a replicated cluster")]
struct Args {
    #[command(flatten)]
    opts: Opts,
    #[command(subcommand)]
    cmd: Cmd,
}

/// Options every subcommand takes, before or after the subcommand's name.
#[derive(clap::Args, Clone)]
struct Opts {
    /// Client addresses of the cluster's nodes, comma-separated.
    #[arg(
        long,
        env = "FENCELOCK_CLUSTER",
        default_value = "127.0.0.1:7101,127.0.0.2:7102,127.0.0.3:7103",
        global = true
    )]
    cluster: String,
    /// Session time-to-live (ms) of the session `lock`, `elect`, `watch` and `observe`
    /// open (at least 5).
    #[arg(long, default_value_t = 10_000, global = true)]
    ttl_ms: u64,
    /// How long to keep trying to reach the cluster (ms) before failing (exit 1): for a
    /// read, the whole command; for `lock` and `elect`, opening the session and each later
    /// request (capped by the ttl).
    #[arg(long, default_value_t = 3_000, global = true)]
    timeout_ms: u64,
    /// How long one TCP connect to a node may take (ms) before the next node is tried.
    #[arg(long, default_value_t = 1_000, global = true)]
    connect_timeout_ms: u64,
    /// A file holding the bearer token (its first line).
    #[arg(long, env = "FENCELOCK_AUTH_TOKEN_FILE", global = true)]
    auth_token_file: Option<std::path::PathBuf>,
    /// The cluster CA certificate (PEM): connect over TLS and verify the nodes with it.
    #[arg(long, env = "FENCELOCK_TLS_CA", global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// Connect over plain TCP (a cluster run with --insecure-plaintext, on loopback).
    #[arg(
        long,
        env = "FENCELOCK_INSECURE_PLAINTEXT",
        conflicts_with = "tls_ca",
        global = true
    )]
    insecure_plaintext: bool,
    /// The label of the session `lock`, `elect`, `watch` and `observe` open, shown by
    /// `holder`, `queue` and watchers (UTF-8, at most 64 bytes; default HOSTNAME:PID).
    #[arg(long, env = "FENCELOCK_LABEL", global = true)]
    label: Option<String>,
    /// How to connect (TLS, token), read once by `main` before any command runs: every
    /// client is made with it, so a token or CA file that cannot be read again later
    /// (rotated, a descriptor limit) never turns into a client without them.
    #[arg(skip)]
    resolved: Option<ClientOptions>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a command while holding the lock; stop it if the lease is no longer safe.
    #[command(
        after_help = "Exit status: the command's (128+N if signal N ended it; 137 if what it left \
running had to be killed); 2 not acquired (--try, --wait-ms); 3 the lease was lost; 1 the \
cluster did not answer or refused (a --limit other than the semaphore's, --permits on a plain \
lock or the other way round: limit_mismatch); 126/127 the command could not be run / was not \
found; 125 its supervisor failed before starting it; 128+N this process got signal N (SIGINT 130, SIGTERM 143, SIGHUP 129); 64 a usage \
error (--permits 0, more permits than --limit, a label over 64 bytes).\n\
The command runs in its own process group: the whole group is stopped (SIGTERM, SIGKILL after \
--kill-after-ms) when the lease is lost, on a signal, when the command exits, and when this \
process dies. Every way out but its death closes the session, so the lock (or the permits) \
passes on at once.\n\
With --permits N --limit M the name is a semaphore: at most M permits are held at once, \
granted first come, first served (a large request at the head of the queue is not overtaken); \
every holder gets its own fencing token.\n\
The command's environment: FENCELOCK_TOKEN (the fencing token to pass to the resource), \
FENCELOCK_SESSION, FENCELOCK_LOCK; with --permits also FENCELOCK_PERMITS and \
FENCELOCK_PERMIT_LIMIT (removed under a plain lock)."
    )]
    Lock {
        /// The lock.
        name: String,
        /// Hold this many of the semaphore's permits (with --limit) instead of the lock.
        #[arg(long, requires = "limit")]
        permits: Option<u32>,
        /// The semaphore's number of permits (every holder of the name must give the same).
        #[arg(long, requires = "permits")]
        limit: Option<u32>,
        /// Give up after this many ms of waiting (default: wait forever).
        #[arg(long)]
        wait_ms: Option<u64>,
        /// Try once; exit 2 if the lock is taken.
        #[arg(long = "try", conflicts_with = "wait_ms")]
        try_only: bool,
        /// Grace (ms) between SIGTERM and SIGKILL when the command's group is stopped:
        /// below the lease's margin (ttl/5), so the command is gone before the lease could
        /// be; default 1000, or a tenth of the ttl if that is less.
        #[arg(long)]
        kill_after_ms: Option<u64>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Print the holder(s) of a lock: `SESSION MODE TOKEN [LABEL]` per line (MODE
    /// `exclusive`, `shared` or `permits:N/M`).
    Holder {
        /// The lock.
        name: String,
    },
    /// Print the queue of a lock, head first: `SESSION MODE [LABEL]` per line.
    Queue {
        /// The lock.
        name: String,
    },
    /// Print a semaphore's permits in use and its limit: `IN_USE LIMIT` (nothing when the
    /// name is not a semaphore now: no permits held or asked for).
    Permits {
        /// The semaphore.
        name: String,
    },
    /// Campaign in an election; print `epoch N` when elected; lead until Ctrl-C. With
    /// --observe, do not campaign: print the leader as it changes (as `observe`).
    #[command(
        after_help = "Exit status: 0 resigned (or stopped observing) on SIGINT, SIGTERM or SIGHUP; \
1 the cluster did not answer or refused (a resignation it did not confirm included: the \
leadership ends when the session expires); 2 not elected (the session ended while waiting, or the wait ended while cut off); 3 the leadership lease (or the observing \
session) was lost, before `epoch N` (the grant came too late to be safe) or after, or an \
administrator released the leadership; 128+N a signal N while opening the session or waiting to be elected (or once \
elected, before the `epoch N` line was written: it resigns); 64 a usage error."
    )]
    Elect {
        /// The election.
        name: String,
        /// Observe instead of campaigning (see `observe`).
        #[arg(long)]
        observe: bool,
    },
    /// Print an election's leader as it changes: `leader SESSION EPOCH [LABEL]` when one is
    /// elected (or leads when this starts), `none [released|closed|expired]` when it is
    /// vacant. Campaigns for nothing; runs until Ctrl-C.
    #[command(
        after_help = "Exit status: 0 stopped by SIGINT, SIGTERM or SIGHUP once observing (128+N before: N the signal); 3 the observing session \
was lost (it expired, or could not be kept alive for its ttl): changes after that are not \
seen; 1 the cluster did not answer or refused (too many watchers of the name: \
capacity_exceeded); 64 a usage error.\nAfter a reconnect to the cluster (a new leader) the \
current leader is printed again: changes while disconnected are summed up, not replayed."
    )]
    Observe {
        /// The election.
        name: String,
    },
    /// Print every change of a lock's holders: `CHANGE SESSION MODE TOKEN [LABEL]` per line,
    /// CHANGE `holding` (a holder when the watch began), `granted`, `released`, `closed`
    /// or `expired`. Runs until Ctrl-C.
    #[command(
        after_help = "Exit status: 0 stopped by SIGINT, SIGTERM or SIGHUP once watching (128+N before: N the signal); 3 the watching session \
was lost (it expired, or could not be kept alive for its ttl): changes after that are not \
seen; 1 the cluster did not answer or refused (too many watchers of the name: \
capacity_exceeded); 64 a usage error.\nThe changes come in the order the cluster applied \
them. After a reconnect to the cluster (a new leader) the watch starts again: the current \
holders are printed as `holding` lines (changes while disconnected are summed up, not \
replayed)."
    )]
    Watch {
        /// The lock.
        name: String,
    },
    /// Print the cluster's members: `voter|learner ID RAFT CLIENT` per line.
    Members,
    /// Print each node's status (role, term, leader, committed and applied index,
    /// readiness, sessions / locks / claims / connections in use of capacity) and the
    /// members; asks the --cluster addresses and every member they name.
    #[command(
        after_help = "Exit status: 0 when a leader confirmed its quorum (a linearizable read \
through it succeeded); 1 otherwise (no leader, no quorum, nothing reachable: what could be \
gathered is still printed); 64 a usage error."
    )]
    Status {
        /// One JSON object instead of text (for scripts).
        #[arg(long)]
        json: bool,
    },
    /// Add a node as a learner (start it first, without --init) and wait until it caught up.
    AddLearner {
        /// The node's id.
        id: u64,
        /// Its Raft address (host:port; loopback only on a cluster without TLS).
        raft: String,
        /// Its client address (host:port; loopback only on a cluster without TLS).
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
    /// (Admin) close a session without its credential: its holds are released (each to the
    /// next waiter, with a new token), its waits and watches end, and its owner's next
    /// request is refused. Ends a revoked token's sessions now rather than at their ttl.
    #[command(
        after_help = "Reads the session first. Exit status: 0 the session is closed: by this \
command, or, when it ended between the read and the close (an attempt whose answer was lost, \
retried, finds it gone; or it expired or closed meanwhile), otherwise; 1 the session was not \
open at the read (never opened, or already ended: a run that timed out may have closed it), \
the token is no admin token, or no leader answered in time. With --owner: lists that owner's \
sessions (as `sessions --owner`), then closes each, printing `closed session N` for each \
closed and a last line with how many; a listed session that has ended by its turn is passed \
over. Exit status: 0 every listed session is closed or gone (none listed included); 1 the \
token is no admin token, or no leader answered in time for the list or a close: the sessions \
printed before the error stay closed, and a second run closes the rest. `--owner unrecorded` \
closes every session opened by an earlier build's entries, whichever token opened them."
    )]
    ForceClose {
        /// The session (see `holder`, `queue`, `sessions`).
        #[arg(required_unless_present = "owner", conflicts_with = "owner")]
        session: Option<u64>,
        /// Close every open session this owner opened instead (as `sessions --owner` lists
        /// them), each as above: `sha256:HEX` (the hash field of the token's lines in the
        /// tokens file), `anyone` or `unrecorded`. Take the token out of every node's tokens
        /// file first, so that it cannot open more meanwhile.
        #[arg(long, value_parser = Principal::parse)]
        owner: Option<Principal>,
    },
    /// (Admin) Print the open sessions in id order, one per line: `SESSION OWNER TTL_MS
    /// EXPIRES_AT_MS HOLDS WAITS WATCHES [LABEL]` (OWNER: `sha256:HEX`, the hash of the token that
    /// opened it as its tokens-file lines hold it; `anyone` on a cluster without tokens;
    /// `unrecorded` for an open an earlier build wrote). EXPIRES_AT_MS is on the cluster's
    /// logical clock.
    #[command(
        after_help = "Read page by page from the leader, each page a linearizable read of its \
own (each with its own --timeout-ms): ids only grow, so a session opened while the pages are \
read is listed by a later one, and only one opened after the last page is missed; one listed \
may have ended since. Exit status: 0 listed (also when there are none); 1 the token is no \
admin token, no leader answered in time, or the node's bound on unread long answers was spent \
(ask again)."
    )]
    Sessions {
        /// Only the sessions this owner opened: `sha256:HEX`, `anyone` or `unrecorded`.
        #[arg(long, value_parser = Principal::parse)]
        owner: Option<Principal>,
    },
    /// (Admin) Write what the cluster applied as a recording (docs/RECORDING.md), for the demo page.
    #[command(
        after_help = "The leader rebuilds the window from its snapshot and committed log: the \
state at the window's start, then every input the lock service applied, with the logical time \
the leader stamped on it and the core's answer. Both ends of a window are included; without \
bounds it is everything the leader still holds. Open the file in the demo page (Open a \
recording). Exit status: 0 written; 1 no leader in time, a window the cluster no longer holds \
(the message says which log indices and times it does), a recording past the format's limits \
(the message names the last index that fits), or the file could not be written."
    )]
    Export {
        /// Write the recording here (written to FILE.tmp, fsynced, renamed); default stdout.
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
        /// The first log index.
        #[arg(long)]
        from_index: Option<u64>,
        /// The last log index.
        #[arg(long)]
        to_index: Option<u64>,
        /// The first logical time (ms of the cluster's clock, as in the recording's "now").
        #[arg(long)]
        from_time: Option<u64>,
        /// The last logical time (ms).
        #[arg(long)]
        to_time: Option<u64>,
    },
    /// (Admin) Save a backup of the cluster's state to FILE, for `fencelock-node snapshot restore`.
    #[command(
        after_help = "The leader rebuilds its applied state at one log index from its snapshot \
and committed log and sends it in pages over this command's connection (TLS, the admin token): \
the sessions with their credentials, holds, queues, tokens and logical time, in the checksummed \
snapshot-file format. The file is checked, written to FILE.tmp (0600: it holds every session's \
credential), fsynced and renamed. Exit status: 0 saved; 1 not an admin token, no leader in \
time, nothing applied yet, a backup that fails its checks, or the file could not be written \
(no FILE then). Each page's answer may take up to 60 s (or --timeout-ms, if longer)."
    )]
    Backup {
        /// Where to write the backup.
        file: std::path::PathBuf,
        /// The largest backup taken (bytes): one said to be larger is refused before its
        /// pages are collected.
        #[arg(long, default_value_t = fencelock_server::client::MAX_BACKUP_BYTES)]
        max_bytes: u64,
    },
    /// Internal: run COMMAND in this process's group and stop the group when told (see the
    /// crate docs). Started by `lock`; not for direct use.
    #[command(name = SUPERVISE, hide = true)]
    Supervise {
        /// The pid of the `lock` process that started this one.
        #[arg(long)]
        parent: u32,
        /// Grace (ms) between SIGTERM and SIGKILL.
        #[arg(long)]
        kill_after_ms: u64,
        /// The file through which `lock` tells the lease's deadline (`LeaseFile`).
        #[arg(long)]
        lease_file: std::path::PathBuf,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS // --help, --version
            };
        }
    };
    // This process's own failure before its subcommand runs: 1, or 125 for the supervisor,
    // whose status `lock` passes on as the command's (see `EXIT_SUPERVISOR`).
    let failed = ExitCode::from(if matches!(args.cmd, Cmd::Supervise { .. }) {
        EXIT_SUPERVISOR
    } else {
        1
    });
    // One thread: the supervisor is spawned from the main thread, and PR_SET_PDEATHSIG
    // fires when the thread that spawned it ends, which must be when this process ends.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            note!("fencelock: cannot start the runtime: {e}");
            return failed;
        }
    };
    // A parent that ignores SIGCHLD (some daemons and process managers do) passes that on
    // through exec, and the kernel would then reap this process's children unseen: `lock`
    // would miss its supervisor's status (and skip stopping the command's group when the
    // supervisor is killed), and the supervisor its command's. A handler of our own
    // (tokio's, installed for the life of the process) undoes that before anything is
    // spawned, in the two modes that spawn (`lock` and its supervisor); exec resets a
    // handled signal to its default for the children.
    let spawns = matches!(args.cmd, Cmd::Lock { .. } | Cmd::Supervise { .. });
    if let Err(e) = rt.block_on(async {
        if !spawns {
            return Ok(());
        }
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).map(drop)
    }) {
        note!("fencelock: cannot catch SIGCHLD: {e}");
        return failed;
    }
    let mut opts = args.opts;
    if !matches!(args.cmd, Cmd::Supervise { .. }) {
        match opts.connection() {
            Ok(c) => opts.resolved = Some(c),
            Err(e) => {
                note!("fencelock: {e}");
                return ExitCode::from(1);
            }
        }
    }
    // The label is the sessions' a command opens: judged for those commands only, so a
    // long FENCELOCK_LABEL in the environment does not refuse `holder` or `status`.
    let opens = matches!(
        args.cmd,
        Cmd::Lock { .. } | Cmd::Elect { .. } | Cmd::Observe { .. } | Cmd::Watch { .. }
    );
    if opens {
        if let Err(e) = opts.label() {
            note!("fencelock: --label: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    // The commands that open a session keep it alive by the core's keeper rule (every
    // ttl/4, stopping ttl/5 before its end): a ttl too short for it is a usage error,
    // said before anything is opened.
    if matches!(
        args.cmd,
        Cmd::Lock { .. } | Cmd::Elect { .. } | Cmd::Observe { .. } | Cmd::Watch { .. }
    ) {
        let ttl = opts.ttl_ms;
        if let Err(e) = fencelock::SessionKeeper::new(ttl, ttl / 4, ttl / 5) {
            note!("fencelock: --ttl-ms {ttl}: too short to keep a session alive ({e}); give at least 5");
            return ExitCode::from(EXIT_USAGE);
        }
        // `lock` and `elect` act on the lease: they look at it every LEASE_CHECK, so the
        // margin (ttl/5) must be longer than that, or the command (or the leadership)
        // could outlive the lease by up to one look.
        let check = LEASE_CHECK.as_millis() as u64;
        if matches!(args.cmd, Cmd::Lock { .. } | Cmd::Elect { .. }) && ttl / 5 <= check {
            note!(
                "fencelock: --ttl-ms {ttl}: too short to act on a lease: its margin (a fifth, \
                 {} ms) must be longer than the {check} ms between two looks at it; give at \
                 least {}",
                ttl / 5,
                5 * (check + 1)
            );
            return ExitCode::from(EXIT_USAGE);
        }
    }
    if let Cmd::Lock {
        permits: Some(count),
        limit: Some(limit),
        ..
    } = &args.cmd
    {
        if *count == 0 || count > limit {
            note!("fencelock: --permits {count} --limit {limit}: ask for 1 to {limit} permits");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let res = rt.block_on(run(&opts, args.cmd));
    // Without waiting for a write to stdout left blocked on a reader that never reads
    // (`say_off_thread`): everything else was awaited by `run`.
    rt.shutdown_background();
    match res {
        Ok(code) => code,
        Err(e) => {
            match e.downcast_ref::<ClientError>() {
                Some(ClientError::Unavailable(m)) => note!(
                    "fencelock: no node of {} answered within {} ms (last: {})",
                    opts.cluster,
                    opts.timeout_ms,
                    shown(m)
                ),
                Some(ClientError::NotLeader { .. }) => note!(
                    "fencelock: no leader among {} within {} ms",
                    opts.cluster,
                    opts.timeout_ms
                ),
                // (A node's words among them: printed as `shown` prints them.)
                _ => note!("fencelock: {}", shown(&e.to_string())),
            }
            ExitCode::from(1)
        }
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

async fn run(opts: &Opts, cmd: Cmd) -> Res<ExitCode> {
    match cmd {
        Cmd::Supervise {
            parent,
            kill_after_ms,
            lease_file,
            command,
        } => Ok(supervise(
            parent,
            Duration::from_millis(kill_after_ms),
            &lease_file,
            &command,
        )
        .await),
        Cmd::Holder { name } => {
            let hs = opts.deadline(opts.client().holders(&name)).await?;
            let mut text = String::new();
            for h in hs {
                let line = format!("{} {} {}", h.session.0, mode_text(h.mode), h.token.0);
                text += &with_label(line, h.label.as_str());
                text.push('\n');
            }
            emit(&text)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Queue { name } => {
            let ws = opts.deadline(opts.client().waiters(&name)).await?;
            let mut text = String::new();
            for w in ws {
                let line = format!("{} {}", w.session.0, mode_text(w.mode));
                text += &with_label(line, w.label.as_str());
                text.push('\n');
            }
            emit(&text)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Permits { name } => {
            if let Some(p) = opts.deadline(opts.client().permits(&name)).await? {
                emit(&format!("{} {}\n", p.in_use, p.limit))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Lock {
            name,
            permits,
            limit,
            wait_ms,
            try_only,
            kill_after_ms,
            command,
        } => {
            // clap refuses --try with --wait-ms (a usage error, exit 64).
            let wait = match (try_only, wait_ms) {
                (true, _) => WaitSpec::None,
                (false, Some(ms)) => WaitSpec::ForMs(ms),
                (false, None) => WaitSpec::Forever,
            };
            let mode = match (permits, limit) {
                (Some(count), Some(limit)) => Mode::Permits { count, limit },
                _ => Mode::Exclusive,
            };
            // The command is told to stop when the lease stops being safe (seen within a
            // lease check), a margin (ttl/5) before the cluster could expire the session;
            // SIGKILL must come within it.
            let margin = opts.ttl_ms / 5;
            let check = LEASE_CHECK.as_millis() as u64;
            let kill_after_ms = match kill_after_ms {
                None => 1_000
                    .min(opts.ttl_ms / 10)
                    .min(margin.saturating_sub(check + 1)),
                Some(ms) if ms.saturating_add(check) >= margin => {
                    note!(
                        "fencelock: --kill-after-ms {ms} would let the command outlive its lease: \
                         it must be below the margin, a fifth of --ttl-ms ({margin} ms), less \
                         the {check} ms between two looks at the lease; lower it or raise --ttl-ms"
                    );
                    return Ok(ExitCode::from(EXIT_USAGE));
                }
                Some(ms) => ms,
            };
            let kill_after = Duration::from_millis(kill_after_ms);
            lock(opts, &name, mode, wait, kill_after, &command).await
        }
        Cmd::Elect {
            name,
            observe: true,
        }
        | Cmd::Observe { name } => watch(opts, &name, Show::Leader).await,
        Cmd::Elect {
            name,
            observe: false,
        } => elect(opts, &name).await,
        Cmd::Watch { name } => watch(opts, &name, Show::Changes).await,
        Cmd::Status { json } => status(opts, json).await,
        Cmd::Members => {
            let members = opts.deadline(opts.client().members()).await?;
            emit(&members_text(&members))?;
            Ok(ExitCode::SUCCESS)
        }
        // A membership change may wait for a learner to catch up: no overall deadline.
        Cmd::AddLearner {
            id,
            raft,
            client: c,
        } => {
            opts.client()
                .add_learner(id, NodeAddr { raft, client: c })
                .await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::SetVoters { ids } => {
            opts.client().set_voters(ids).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::RemoveLearner { id } => {
            opts.client().remove_learner(id).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::ForceRelease { session, name } => {
            let t = opts.client().force_release(session, &name).await?;
            emit(&format!("released token {}\n", t.0))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::ForceClose {
            session: Some(session),
            ..
        } => {
            opts.client().force_close(session).await?;
            emit(&format!("closed session {session}\n"))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::ForceClose {
            session: None,
            owner: Some(owner),
        } => {
            let (closed, result) = opts.client().force_close_owner(owner).await;
            // What was closed is said even when a later close failed: those stay closed.
            let text: String = closed
                .iter()
                .map(|s| format!("closed session {s}\n"))
                .collect();
            emit(&text)?;
            result?;
            let noun = if closed.len() == 1 {
                "session"
            } else {
                "sessions"
            };
            emit(&format!(
                "closed {} {noun} opened by {owner}\n",
                closed.len()
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        // Not both and not neither: clap refuses those before this runs.
        Cmd::ForceClose { .. } => Ok(ExitCode::from(EXIT_USAGE)),
        Cmd::Sessions { owner } => {
            let list = opts.client().sessions(owner).await?;
            let text: String = list.iter().map(session_line).collect();
            emit(&text)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Backup { file, max_bytes } => {
            let (bytes, page) = opts.page_client().backup_within(0, max_bytes).await?;
            write_synced(&file, &bytes)?;
            emit(&format!(
                "saved {} ({} bytes, log index {}) from node {}, the leader\n",
                file.display(),
                bytes.len(),
                page.index,
                page.node
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Export {
            output,
            from_index,
            to_index,
            from_time,
            to_time,
        } => {
            let window = fencelock_server::export::Window {
                from_index,
                to_index,
                from_time,
                to_time,
            };
            let (lines, page) = opts.page_client().export(window).await?;
            let mut text = lines.join("\n");
            text.push('\n');
            match &output {
                Some(path) => write_synced(path, text.as_bytes())?,
                // A recording cut short is not a recording: unlike a read's answer, whose
                // reader may stop once it has seen enough, an export's reader that goes
                // away loses data, so the command says so and fails.
                None => match write_out(&text) {
                    Written::All => {}
                    Written::ReaderGone => {
                        note!(
                            "fencelock: export: the reader of stdout went away before the end: \
                             what it got of the {} lines is incomplete",
                            lines.len()
                        );
                        return Ok(ExitCode::from(1));
                    }
                    Written::Failed(e) => return Err(e.into()),
                },
            }
            let span = match page.span {
                Some(((i0, t0), (i1, t1))) => {
                    format!("log indices {i0} to {i1}, logical time {t0} to {t1} ms")
                }
                None => format!(
                    "nothing applied from log index {} to {}",
                    page.from_index, page.to_index
                ),
            };
            note!(
                "fencelock: exported {} lines ({span}) from node {}, the leader{}",
                lines.len(),
                page.node,
                output
                    .as_ref()
                    .map(|p| format!(", to {}", p.display()))
                    .unwrap_or_default()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Writes `bytes` to `path` whole or not at all ([`fencelock_server::disk::write_file_synced`]:
/// `path.tmp` made anew, 0600 — an export or a backup needs an admin token, so it is the
/// admin's to share — fsync, rename, fsync of the directory).
///
/// Errors: I/O errors, naming the path.
fn write_synced(path: &std::path::Path, bytes: &[u8]) -> Res<()> {
    Ok(fencelock_server::disk::write_file_synced(path, bytes)?)
}

impl Opts {
    fn addrs(&self) -> Vec<String> {
        self.cluster
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The label of the sessions this command opens: `--label`, else `HOSTNAME:PID`
    /// (cut to [`fencelock::MAX_LABEL_LEN`] bytes at a character boundary).
    ///
    /// Errors: a `--label` over [`fencelock::MAX_LABEL_LEN`] bytes.
    fn label(&self) -> Result<String, String> {
        if let Some(l) = &self.label {
            fencelock::Label::new(l).map_err(|e| e.to_string())?;
            return Ok(l.clone());
        }
        Ok(default_label(
            &["/proc/sys/kernel/hostname", "/etc/hostname"].map(std::path::Path::new),
            std::process::id(),
        ))
    }

    fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    /// A client for reads and membership changes: retries for `--timeout-ms`.
    /// How this CLI connects: TLS (or plain TCP when asked for) and its bearer token.
    ///
    /// Errors: an unreadable or empty token file, an unreadable CA, or neither TLS nor
    /// `--insecure-plaintext` given.
    fn connection(&self) -> Result<ClientOptions, String> {
        let token = fencelock_server::auth::token_to_present(self.auth_token_file.as_deref())?;
        let tls = match (&self.tls_ca, self.insecure_plaintext) {
            (Some(ca), _) => {
                Some(fencelock_server::tls::client_config(ca).map_err(|e| e.to_string())?)
            }
            (None, true) => None,
            (None, false) => {
                return Err(
                    "give --tls-ca / FENCELOCK_TLS_CA, or --insecure-plaintext / \
                     FENCELOCK_INSECURE_PLAINTEXT=true for a plain-TCP cluster"
                        .into(),
                )
            }
        };
        Ok(ClientOptions {
            token,
            tls,
            timeouts: Timeouts::default(),
        })
    }

    /// The client of `backup` and `export`: a page is up to 4 MiB and the leader waits for
    /// its rebuild turn, then rebuilds the state, for each, so one answer is waited for
    /// [`PAGE_REPLY_TIME`] at least, `--timeout-ms` when longer.
    fn page_client(&self) -> Client {
        self.with(self.page_timeouts())
    }

    /// The timeouts of [`Opts::page_client`]: [`Opts::client_timeouts`], but a reply is
    /// waited for [`PAGE_REPLY_TIME`] at least.
    fn page_timeouts(&self) -> Timeouts {
        Timeouts {
            reply: self.timeout().max(PAGE_REPLY_TIME),
            ..self.client_timeouts()
        }
    }

    fn with(&self, timeouts: Timeouts) -> Client {
        self.with_addrs(self.addrs(), timeouts)
    }

    fn with_addrs(&self, addrs: Vec<String>, timeouts: Timeouts) -> Client {
        // `main` read the connection settings before running any command. Without them
        // (a command that makes no client), a client reaches no node: it never falls back
        // to plain TCP or to no token.
        match &self.resolved {
            Some(options) => Client::with_options(
                addrs,
                ClientOptions {
                    timeouts,
                    ..options.clone()
                },
            ),
            None => Client::with_options(
                Vec::new(),
                ClientOptions {
                    timeouts,
                    ..ClientOptions::default()
                },
            ),
        }
    }

    fn client(&self) -> Client {
        self.with(self.client_timeouts())
    }

    /// The timeouts of [`Opts::client`].
    fn client_timeouts(&self) -> Timeouts {
        Timeouts {
            connect: self.connect_timeout(),
            reply: self.timeout().min(Timeouts::default().reply),
            retry_for: self.timeout(),
            ..Timeouts::default()
        }
    }

    /// A client for a session of `--ttl-ms`: [`Timeouts::for_ttl`], each bound lowered to
    /// the command line's where that is smaller.
    fn session_client(&self) -> Client {
        self.with(self.session_timeouts())
    }

    /// The timeouts of [`Opts::session_client`].
    fn session_timeouts(&self) -> Timeouts {
        let mut t = Timeouts::for_ttl(self.ttl_ms);
        t.connect = t.connect.min(self.connect_timeout());
        t.reply = t.reply.min(self.timeout());
        t.retry_for = t.retry_for.min(self.timeout());
        t
    }

    /// `f`, failing with `Unavailable` if it has not finished after `--timeout-ms` plus
    /// one connect timeout (the client's own retries end first and report their cause;
    /// this bound catches a node that accepts connections but never answers).
    async fn deadline<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        match tokio::time::timeout(self.timeout() + self.connect_timeout(), f).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Unavailable("no reply".into())),
        }
    }
}

/// How many endpoints `status` asks at once.
const STATUS_AT_ONCE: usize = 32;

/// What one endpoint answered to `status`: its status, or why there is none.
type Answer = (String, Result<NodeStatus, String>);

/// `fencelock status`: asks every endpoint (the --cluster addresses, then the members
/// they name) for its own status at once, and confirms the leader's quorum with a
/// linearizable read through it. Exit 0 only if that read succeeded.
async fn status(opts: &Opts, json: bool) -> Res<ExitCode> {
    let mut addrs = opts.addrs();
    let mut known: HashSet<String> = addrs.iter().cloned().collect();
    // The members the given addresses name, followed up to a cluster's most members (a
    // node's reply lists at most that many; several nodes may name different ones).
    let mut named = 0;
    let mut answers: Vec<Answer> = Vec::new();
    // Round 1: the given addresses; round 2: members they named that were not given.
    for _ in 0..2 {
        let todo: Vec<String> = addrs
            .iter()
            .filter(|a| !answers.iter().any(|(b, _)| b == *a))
            .cloned()
            .collect();
        if todo.is_empty() {
            break;
        }
        let limit = opts.timeout() + opts.connect_timeout();
        let mut set = tokio::task::JoinSet::new();
        let mut round: Vec<(usize, String, Result<NodeStatus, String>)> = Vec::new();
        for (i, addr) in todo.into_iter().enumerate() {
            // A few endpoints at a time: each client holds its buffers and a connection.
            while set.len() >= STATUS_AT_ONCE {
                if let Some(Ok(r)) = set.join_next().await {
                    round.push(r);
                }
            }
            let c = opts.with_addrs(
                vec![addr.clone()],
                Timeouts {
                    connect: opts.connect_timeout(),
                    reply: opts.timeout(),
                    // One endpoint: retrying it is pointless once it refused.
                    retry_for: opts.connect_timeout().min(opts.timeout()),
                    ..Timeouts::default()
                },
            );
            set.spawn(async move {
                let r = match tokio::time::timeout(limit, c.status()).await {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err("no reply".to_string()),
                };
                (i, addr, r)
            });
        }
        while let Some(r) = set.join_next().await {
            if let Ok(r) = r {
                round.push(r);
            }
        }
        round.sort_by_key(|(i, _, _)| *i);
        for (_, addr, r) in round {
            if let Ok(st) = &r {
                for (_, a) in st.voters.iter().chain(&st.learners) {
                    if named < MAX_MEMBERS && known.insert(a.client.clone()) {
                        named += 1;
                        addrs.push(a.client.clone());
                    }
                }
            }
            answers.push((addr, r));
        }
    }
    let quorum = opts
        .deadline(
            opts.with_addrs(addrs.clone(), opts.client_timeouts())
                .members(),
        )
        .await;
    let ok: Vec<&NodeStatus> = answers
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .collect();
    let (leader, term) = leader_of(&ok);
    let members: Members = match &quorum {
        Ok(m) => m.clone(),
        Err(_) => ok
            .iter()
            .max_by_key(|s| (s.term, s.applied))
            .map(|s| (s.voters.clone(), s.learners.clone()))
            .unwrap_or_default(),
    };
    let confirmed = quorum.is_ok();
    if json {
        emit(&format!(
            "{}\n",
            status_json(&answers, leader, term, &quorum, &members)
        ))?;
    } else {
        emit(&status_text(&answers, leader, term, &quorum, &members))?;
    }
    Ok(if confirmed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `fencelock members`' lines: `voter|learner ID RAFT CLIENT`.
fn members_text(members: &Members) -> String {
    let mut text = String::new();
    for (kind, list) in [("voter", &members.0), ("learner", &members.1)] {
        for (id, a) in list {
            text += &format!("{kind} {id} {} {}\n", field(&a.raft), field(&a.client));
        }
    }
    text
}

/// `fencelock status`' table and the lines under it.
fn status_text(
    answers: &[Answer],
    leader: Option<u64>,
    term: Option<u64>,
    quorum: &Result<Members, ClientError>,
    members: &Members,
) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    // (Writing to a String cannot fail.)
    macro_rules! put {
        ($($arg:tt)*) => {{ let _ = writeln!(text, $($arg)*); }};
    }
    let who = match leader {
        Some(l) => format!("leader {l}"),
        None => "no leader".to_string(),
    };
    let term = term.map_or("-".to_string(), |t| t.to_string());
    match quorum {
        Ok(_) => put!("cluster: {who}, term {term}, quorum confirmed"),
        Err(e) => put!(
            "cluster: {who}, term {term}, quorum NOT confirmed ({})",
            shown(&e.to_string())
        ),
    }
    text += &members_text(members);
    put!(
        "{:<22} {:>3} {:<9} {:>5} {:>6} {:>9} {:>9} {:<5} {:>13} {:>13} {:>13} {:>11}",
        "ENDPOINT",
        "ID",
        "ROLE",
        "TERM",
        "LEADER",
        "COMMITTED",
        "APPLIED",
        "READY",
        "SESSIONS",
        "LOCKS",
        "CLAIMS",
        "CONNECTIONS"
    );
    let of = |(u, c): (u64, u64)| format!("{u}/{c}");
    let mut notes = Vec::new();
    for (addr, r) in answers {
        match r {
            Ok(s) => {
                put!(
                    "{:<22} {:>3} {:<9} {:>5} {:>6} {:>9} {:>9} {:<5} {:>13} {:>13} {:>13} {:>11}",
                    field(addr),
                    s.id,
                    field(&s.role),
                    s.term,
                    s.leader.map_or("-".to_string(), |l| l.to_string()),
                    s.committed,
                    s.applied,
                    if s.ready { "yes" } else { "NO" },
                    of(s.sessions),
                    of(s.locks),
                    of(s.claims),
                    of(s.connections),
                );
                for c in s.checks.iter().filter(|c| !c.starts_with("ok ")) {
                    notes.push(format!("{} (node {}): {}", field(addr), s.id, shown(c)));
                }
            }
            Err(e) => {
                put!("{:<22} unreachable: {}", field(addr), shown(e));
            }
        }
    }
    for n in notes {
        put!("{n}");
    }
    text
}

/// `s` as a JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_opt(v: Option<u64>) -> String {
    v.map_or("null".to_string(), |v| v.to_string())
}

fn json_members(list: &[(u64, NodeAddr)]) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|(id, a)| {
            format!(
                "{{\"id\":{id},\"raft\":{},\"client\":{}}}",
                json_str(&a.raft),
                json_str(&a.client)
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

fn status_json(
    answers: &[Answer],
    leader: Option<u64>,
    term: Option<u64>,
    quorum: &Result<Members, ClientError>,
    members: &Members,
) -> String {
    let use_of = |(u, c): (u64, u64)| format!("{{\"used\":{u},\"capacity\":{c}}}");
    let nodes: Vec<String> = answers
        .iter()
        .map(|(addr, r)| match r {
            Ok(s) => {
                let checks: Vec<String> = s.checks.iter().map(|c| json_str(c)).collect();
                format!(
                    "{{\"endpoint\":{},\"reachable\":true,\"id\":{},\"version\":{},\"role\":{},\
                     \"term\":{},\"leader\":{},\"committed\":{},\"applied\":{},\"last_log\":{},\
                     \"ready\":{},\"checks\":[{}],\"sessions\":{},\"locks\":{},\"claims\":{},\
                     \"connections\":{}}}",
                    json_str(addr),
                    s.id,
                    json_str(&s.version),
                    json_str(&s.role),
                    s.term,
                    json_opt(s.leader),
                    s.committed,
                    s.applied,
                    s.last_log,
                    s.ready,
                    checks.join(","),
                    use_of(s.sessions),
                    use_of(s.locks),
                    use_of(s.claims),
                    use_of(s.connections),
                )
            }
            Err(e) => format!(
                "{{\"endpoint\":{},\"reachable\":false,\"error\":{}}}",
                json_str(addr),
                json_str(e)
            ),
        })
        .collect();
    let quorum_error = match quorum {
        Ok(_) => "null".to_string(),
        Err(e) => json_str(&e.to_string()),
    };
    format!(
        "{{\"quorum\":{},\"quorum_error\":{quorum_error},\"leader\":{},\"term\":{},\
         \"voters\":{},\"learners\":{},\"nodes\":[{}]}}",
        quorum.is_ok(),
        json_opt(leader),
        json_opt(term),
        json_members(&members.0),
        json_members(&members.1),
        nodes.join(",")
    )
}

/// The signals that make `lock`, `elect`, `watch` and `observe` clean up and exit: SIGINT,
/// SIGTERM, SIGHUP — SIGINT and SIGHUP unless this process started with them ignored.
struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
    hup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers (from now on these signals no longer end the process).
    /// SIGHUP or SIGINT this process started with ignored stays ignored: `nohup fencelock
    /// lock …` (SIGHUP) and a job a non-interactive shell runs with `&` (SIGINT) were meant
    /// to outlive the terminal or the Ctrl-C, and a handler of ours would have stopped the
    /// command and released the lock on that signal. SIGTERM is always caught: it is how
    /// the supervisor stops the command's group and learns that `lock` is gone, and an
    /// ignore inherited by them would leave only the SIGKILL after the grace.
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let ignored = ignored_at_start();
        let catch = |sig: Signal, kind: SignalKind| {
            if ignored & (1u64 << (sig as i32 - 1)) != 0 {
                return Ok(None);
            }
            signal(kind).map(Some)
        };
        Ok(Signals {
            int: catch(Signal::SIGINT, SignalKind::interrupt())?,
            term: Some(signal(SignalKind::terminate())?),
            hup: catch(Signal::SIGHUP, SignalKind::hangup())?,
        })
    }

    /// The next signal to arrive.
    async fn recv(&mut self) -> Signal {
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = next(&mut self.int) => Signal::SIGINT,
            _ = next(&mut self.term) => Signal::SIGTERM,
            _ = next(&mut self.hup) => Signal::SIGHUP,
        }
    }
}

/// The signals this process ignores (bit N − 1 for signal N), read from the kernel's
/// `SigIgn` line of /proc/self/status before any handler of ours is installed: what its
/// parent left ignored through exec. 0 (none) where there is no such file (systems
/// other than Linux): every signal is then caught, as before. Cost: one small file read.
fn ignored_at_start() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// 128 + the signal's number, as a shell reports a process that a signal ended.
fn by_signal(sig: Signal) -> ExitCode {
    ExitCode::from(128u8.saturating_add(sig as i32 as u8))
}

async fn open(opts: &Opts, client: &Client) -> Res<(Arc<Session>, LeaseGuard)> {
    let ttl_ms = opts.ttl_ms;
    let opened_at = LeaseInstant::now();
    let label = opts.label()?;
    let session = Arc::new(opts.deadline(client.open_labeled(ttl_ms, &label)).await?);
    match LeaseGuard::start_at(session.clone(), ttl_ms, ttl_ms / 4, ttl_ms / 5, opened_at) {
        Ok(guard) => Ok((session, guard)),
        Err(e) => {
            end_session(opts, &session).await;
            Err(format!("ttl too small: {e}").into())
        }
    }
}

/// Closes the session (which releases its holds and ends its waits: the lock goes to the
/// next waiter at once), waiting at most `--timeout-ms`; says so if that failed.
async fn end_session(opts: &Opts, session: &Session) -> Closed {
    end_session_within(opts, session, opts.timeout()).await
}

/// Whether a session's close was confirmed by the cluster. A caller whose exit status
/// says the session ended (`elect`'s resignation) looks at it; the others only note it.
#[derive(Clone, Copy, Debug)]
enum Closed {
    /// The cluster closed it: what it held is free now.
    Confirmed,
    /// No answer, or a refusal, within the limit (noted on stderr): what it holds is
    /// freed when it expires.
    Unconfirmed,
}

/// [`end_session`] after a lost leadership: waiting at most half the lease's margin, and
/// no longer than the margin less a lease check (or `--timeout-ms`, if less). `elect` says nothing on stdout when it loses, so its exit is
/// the word a reader has, and the cluster may elect another leader a margin after the
/// lease stopped being safe: the close (which a lost lease, with no node answering, would
/// spend in vain) must not hold the exit past that. The session expires anyway.
async fn end_lost_session(opts: &Opts, session: &Session) -> Closed {
    // The loss is seen within a lease check of the lease's end, so the close must end
    // within the rest of the margin (for a short ttl, less than half of it).
    let margin = opts.ttl_ms / 5;
    let left = margin.saturating_sub(LEASE_CHECK.as_millis() as u64 + 1);
    let limit = Duration::from_millis((opts.ttl_ms / 10).min(left));
    end_session_within(opts, session, opts.timeout().min(limit)).await
}

async fn end_session_within(opts: &Opts, session: &Session, limit: Duration) -> Closed {
    match tokio::time::timeout(limit, session.close()).await {
        Ok(Ok(())) => return Closed::Confirmed,
        // The error's text may be a node's: escaped (`shown`), so a faulty node cannot
        // forge a line or send the terminal its controls.
        Ok(Err(e)) => note!(
            "fencelock: could not close session {} ({}); what it holds is freed when it expires ({} ms after its last keep-alive)",
            session.id(),
            shown(&e.to_string()),
            opts.ttl_ms
        ),
        Err(_) => note!(
            "fencelock: could not close session {} within {} ms; what it holds is freed when it expires ({} ms after its last keep-alive)",
            session.id(),
            limit.as_millis(),
            opts.ttl_ms
        ),
    }
    Closed::Unconfirmed
}

/// How the command's run ended.
enum Ended {
    /// The supervisor exited (with the command's status, or killed by a signal).
    Exited(std::io::Result<ExitStatus>),
    /// This process got a signal; the command's group was stopped.
    Signal(Signal),
    /// The lease stopped being safe; the command's group was stopped.
    LeaseLost,
}

async fn lock(
    opts: &Opts,
    name: &str,
    mode: Mode,
    wait: WaitSpec,
    kill_after: Duration,
    command: &[String],
) -> Res<ExitCode> {
    let mut signals = Signals::new()?;
    let client = opts.session_client();
    let (session, guard) = tokio::select! {
        r = open(opts, &client) => r?,
        // A session the cluster opened meanwhile holds nothing and expires by itself.
        sig = signals.recv() => return Ok(by_signal(sig)),
    };
    let acquired = tokio::select! {
        r = session.acquire(name, mode, wait) => r,
        sig = signals.recv() => {
            // Closing ends the wait (and frees a grant made in the meantime).
            note!("fencelock: {sig} while waiting for {name}; leaving the queue");
            end_session(opts, &session).await;
            return Ok(by_signal(sig));
        }
    };
    let token = match acquired {
        Ok(Acquired::Granted(t)) => t,
        Ok(a @ (Acquired::Busy | Acquired::TimedOut | Acquired::WaitEnded)) => {
            let why = match a {
                Acquired::Busy => match mode {
                    Mode::Permits { .. } => "not enough permits are free, or others wait first",
                    _ => "it is taken",
                },
                Acquired::TimedOut => "the wait timed out",
                _ => "the wait ended while this client was cut off (it timed out, or was granted and forced out since)",
            };
            note!("fencelock: lock {name} not acquired: {why}");
            end_session(opts, &session).await;
            return Ok(ExitCode::from(EXIT_NOT_ACQUIRED));
        }
        Ok(Acquired::HoldEnded(_)) => {
            note!(
                "fencelock: {name} was granted while this client was cut off, and released since \
                 (by an administrator); not running the command"
            );
            end_session(opts, &session).await;
            return Ok(ExitCode::from(EXIT_LEASE_LOST));
        }
        Ok(Acquired::SessionLost) => {
            note!("fencelock: the session ended before {name} was held; not running the command");
            end_session(opts, &session).await;
            return Ok(ExitCode::from(EXIT_LEASE_LOST));
        }
        Err(e) => {
            end_session(opts, &session).await;
            return Err(e.into());
        }
    };
    // The grant may arrive after the lease stopped being safe (a slow wait, a pause): then
    // the command must not start at all.
    if !guard.may_act() {
        note!("fencelock: granted {name} but the lease is no longer safe; not running the command");
        end_session(opts, &session).await;
        return Ok(ExitCode::from(EXIT_LEASE_LOST));
    }
    // A forced release ends the hold but not the session: the lease guard cannot see it.
    // Watched from here, so that its push is taken from the start.
    let mut hold = session.watch_hold(name, token, hold_check(opts));
    match mode {
        Mode::Permits { count, limit } => note!(
            "fencelock: holding {count} of the {limit} permits of {name} with token {}",
            token.0
        ),
        _ => note!("fencelock: holding {name} with token {}", token.0),
    }
    // The supervisor holds the lease's deadline too, and stops the command then by
    // itself: this process may be stopped (Ctrl-Z, SIGSTOP, a debugger) or blocked (a
    // full stderr) when the lease runs out.
    let mut lease_file = match LeaseFile::create() {
        Ok(f) => f,
        Err(e) => {
            end_session(opts, &session).await;
            return Err(format!("cannot make the lease's deadline file: {e}").into());
        }
    };
    lease_file.tell(guard.safe_until());
    let spawned = supervisor(kill_after, &lease_file.path, command).and_then(|mut c| {
        // The cluster's bearer token is this client's, not the command's: with it the
        // command could open sessions, and with an admin token force releases and take
        // backups (which hold every session's credential).
        c.env_remove("FENCELOCK_AUTH_TOKEN")
            .env_remove("FENCELOCK_AUTH_TOKEN_FILE");
        c.env("FENCELOCK_TOKEN", token.0.to_string())
            .env("FENCELOCK_SESSION", session.id().to_string())
            .env("FENCELOCK_LOCK", name);
        // What a semaphore's holder holds; never inherited from our own environment, so
        // a command under a plain lock cannot mistake an outer holder's permits for its own.
        match mode {
            Mode::Permits { count, limit } => c
                .env("FENCELOCK_PERMITS", count.to_string())
                .env("FENCELOCK_PERMIT_LIMIT", limit.to_string()),
            Mode::Exclusive | Mode::Shared => c
                .env_remove("FENCELOCK_PERMITS")
                .env_remove("FENCELOCK_PERMIT_LIMIT"),
        };
        c.spawn()
    });
    let mut sup = match spawned {
        Ok(c) => c,
        Err(e) => {
            end_session(opts, &session).await;
            return Err(format!("cannot start the supervisor: {e}").into());
        }
    };
    // The supervisor leads the command's process group: its pid is the group's id.
    let group = sup.id().map(|pid| Pid::from_raw(pid as i32));
    let mut check = tokio::time::interval(LEASE_CHECK);
    let mut checked = false;
    let ended = loop {
        tokio::select! {
            st = sup.wait() => {
                // A supervisor ended by a signal (the OOM killer, a kill -9), or by a
                // failure of its own (a panic: exit 101), may have stopped nothing: what
                // it supervised would run on after the session is closed and the lock
                // granted again. So the group is killed before closing, whatever the
                // end: after a supervisor's normal end on Linux it is empty (the supervisor
                // waits for all of it), and the kill finds nobody; elsewhere it stops what
                // the command left behind, as the supervisor would have. (A wait that failed says
                // nothing of how it ended: the same.)
                if let Some(g) = group {
                    let _ = killpg(g, Signal::SIGKILL);
                }
                // The supervisor stopped the command at the lease's deadline, which
                // passed while this process could not act (or a keep-alive's answer came
                // within a lease check of it, too late to move it).
                if !guard.may_act() || lease_file.passed() {
                    note!("fencelock: lease on {name} no longer safe; the command was stopped");
                    break Ended::LeaseLost;
                }
                break Ended::Exited(st);
            }
            end = hold.ended(), if !checked => {
                checked = true;
                match end {
                    HoldEnded::Pushed(ReleaseReason::Released) => {
                        note!("fencelock: {name} was released by an administrator");
                    }
                    // This process closes its session only after the hold's watch: a
                    // close while it holds is an administrator's.
                    HoldEnded::Pushed(ReleaseReason::Closed) => {
                        note!("fencelock: the session holding {name} was closed by an administrator");
                    }
                    HoldEnded::NotAmongHolders | HoldEnded::Unknown => {
                        note!("fencelock: {name} is no longer held by this session (released without word reaching it)");
                    }
                    HoldEnded::Pushed(_) | HoldEnded::SessionLost => {}
                }
                guard.session_lost();
            }
            sig = signals.recv() => {
                note!("fencelock: {sig}; stopping the command and releasing {name}");
                stop(&mut sup, kill_after, Duration::from_secs(1)).await;
                break Ended::Signal(sig);
            }
            _ = check.tick() => {}
        }
        lease_file.tell(guard.safe_until());
        if !guard.may_act() {
            note!("fencelock: lease on {name} no longer safe; stopping the command");
            stop(&mut sup, kill_after, Duration::ZERO).await;
            break Ended::LeaseLost;
        }
    };
    drop(guard); // no keep-alive may race the close
    end_session(opts, &session).await;
    Ok(match ended {
        Ended::LeaseLost => ExitCode::from(EXIT_LEASE_LOST),
        Ended::Signal(sig) => by_signal(sig),
        Ended::Exited(Ok(st)) => match (st.code(), st.signal()) {
            (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
            (None, Some(s)) => ExitCode::from(128u8.saturating_add(s.clamp(0, 127) as u8)),
            (None, None) => ExitCode::from(1),
        },
        Ended::Exited(Err(e)) => return Err(format!("waiting for the command: {e}").into()),
    })
}

/// How often `lock` and `elect` read their hold of what they hold, to find a release
/// whose push was lost ([`Session::watch_hold`]): every ttl/4, at least every 100 ms.
fn hold_check(opts: &Opts) -> Duration {
    Duration::from_millis((opts.ttl_ms / 4).max(100))
}

/// The command that starts the supervisor of `command` in a new process group: this very
/// binary (`/proc/self/exe` on Linux, so a binary replaced on disk meanwhile still runs as
/// the same version), in its hidden mode.
fn supervisor(
    kill_after: Duration,
    lease_file: &std::path::Path,
    command: &[String],
) -> std::io::Result<tokio::process::Command> {
    let exe = if cfg!(target_os = "linux") {
        std::path::PathBuf::from("/proc/self/exe")
    } else {
        std::env::current_exe()?
    };
    let mut c = tokio::process::Command::new(exe);
    c.arg0("fencelock")
        .arg(SUPERVISE)
        .arg("--parent")
        .arg(std::process::id().to_string())
        .arg("--kill-after-ms")
        .arg(kill_after.as_millis().to_string())
        .arg("--lease-file")
        .arg(lease_file)
        .arg("--")
        .args(command)
        .process_group(0);
    Ok(c)
}

/// Stops the supervisor's group: SIGTERM to the group (the supervisor then waits until
/// every process of it is gone, SIGKILLing the rest after `kill_after`); if the
/// supervisor itself has not exited `slack` after that, SIGKILL to the group. A lost
/// lease gives no slack: `kill_after` is within the margin before the cluster could
/// expire the session, and a supervisor that is stopped or stuck must not carry the
/// command past it; a signal, with no such deadline, gives the supervisor a second.
async fn stop(sup: &mut tokio::process::Child, kill_after: Duration, slack: Duration) {
    let Some(pid) = sup.id() else {
        return; // already exited and reaped
    };
    let group = Pid::from_raw(pid as i32);
    let _ = killpg(group, Signal::SIGTERM);
    match tokio::time::timeout(kill_after + slack, sup.wait()).await {
        // The supervisor exited by itself: the group was empty.
        Ok(Ok(st)) if st.signal().is_none() => {}
        // Still running, or ended by a signal (its own SIGKILL of the group, or a kill from
        // outside during the grace, which stopped nothing): SIGKILL whatever is left.
        _ => {
            let _ = killpg(group, Signal::SIGKILL);
            let _ = sup.wait().await;
        }
    }
}

/// The lease's deadline, which `lock` writes and its supervisor reads: a file of 16 bytes,
/// the deadline's [`LeaseInstant::to_millis`] (0: not safe) and its bitwise complement,
/// little-endian, rewritten in place with one write, so a read of two halves that do not
/// match (a write under way) is told from a deadline. `lock` makes it (private to its
/// user, in `$XDG_RUNTIME_DIR` or the temporary directory) before it starts the
/// supervisor; the supervisor opens it and unlinks it, so it lives as long as the two
/// hold it, and a cleaner of the temporary directory cannot take it from them.
struct LeaseFile {
    file: std::fs::File,
    path: std::path::PathBuf,
    told: Option<u64>,
}

impl LeaseFile {
    /// A new file, holding "not safe" until [`LeaseFile::tell`]: in `$XDG_RUNTIME_DIR`, or
    /// the temporary directory when that is unset or cannot take it. Errors: the I/O error
    /// of the temporary directory.
    fn create() -> std::io::Result<LeaseFile> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("fencelock-lease-{}-{nanos}", std::process::id());
        let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(std::path::PathBuf::from);
        let made = runtime
            .map(|d| d.join(&name))
            .and_then(|p| Some((fencelock_server::disk::create_private_file(&p).ok()?, p)));
        let (file, path) = match made {
            Some(made) => made,
            None => {
                let p = std::env::temp_dir().join(&name);
                (fencelock_server::disk::create_private_file(&p)?, p)
            }
        };
        let mut f = LeaseFile {
            file,
            path,
            told: None,
        };
        f.tell(None);
        Ok(f)
    }

    /// Writes `until` (`None`: not safe), if it is not what the file holds already.
    fn tell(&mut self, until: Option<LeaseInstant>) {
        use std::os::unix::fs::FileExt;
        let ms = until.map_or(0, LeaseInstant::to_millis);
        if self.told == Some(ms) {
            return;
        }
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&ms.to_le_bytes());
        b[8..].copy_from_slice(&(!ms).to_le_bytes());
        // A failed write leaves the deadline before, which passes: the command is
        // stopped then, never later.
        if self.file.write_all_at(&b, 0).is_ok() {
            self.told = Some(ms);
        }
    }

    /// True once the deadline last told has passed (or "not safe" was told). Cost: one
    /// clock read.
    fn passed(&self) -> bool {
        self.told
            .is_some_and(|ms| LeaseInstant::now() >= LeaseInstant::from_millis(ms))
    }

    /// The deadline `file` holds (0: not safe), `None` while a write is under way or it
    /// cannot be read. Cost: one `pread`.
    fn read(file: &std::fs::File) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 16];
        file.read_exact_at(&mut b, 0).ok()?;
        let ms = u64::from_le_bytes(b[..8].try_into().ok()?);
        let check = u64::from_le_bytes(b[8..].try_into().ok()?);
        (ms == !check).then_some(ms)
    }
}

impl Drop for LeaseFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path); // the supervisor may have done it
    }
}

/// The supervisor (hidden subcommand): see the crate docs. Returns the command's status,
/// 126/127 if it could not be started, 125 (`EXIT_SUPERVISOR`) if it cannot catch signals,
/// `parent` is no longer this process's parent or the lease file cannot be read, 3 if the
/// lease's deadline has passed (in these three cases the command is not started).
async fn supervise(
    parent: u32,
    kill_after: Duration,
    lease_file: &std::path::Path,
    command: &[String],
) -> ExitCode {
    use nix::errno::Errno;
    use nix::sys::wait::{waitpid, WaitStatus};
    use std::os::unix::process::parent_id;

    // Catch the stop signals first: from here on they mean "stop the group".
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            note!("fencelock: supervisor: cannot catch signals: {e}");
            return ExitCode::from(EXIT_SUPERVISOR);
        }
    };
    #[cfg(target_os = "linux")]
    {
        // SIGTERM to this process when `lock` dies; orphans of the command come here.
        // Should either call fail, the parent poll below still notices `lock`'s death,
        // and the group is still signalled; only the wait for orphans would end early.
        let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
        let _ = nix::sys::prctl::set_child_subreaper(true);
    }
    if parent_id() != parent {
        return ExitCode::from(EXIT_SUPERVISOR); // `lock` died before the death signal was armed
    }
    // The lease's deadline, as `lock` tells it; the command starts only if it is known.
    let lease = std::fs::File::open(lease_file);
    let _ = std::fs::remove_file(lease_file);
    let (lease, mut safe_until) = match lease.map(|f| (LeaseFile::read(&f), f)) {
        // Passed already (`lock` held up between its look at the lease and this start):
        // the command is not started, as `lock` would not have started it.
        Ok((Some(until), _)) if LeaseInstant::now() >= LeaseInstant::from_millis(until) => {
            return ExitCode::from(EXIT_LEASE_LOST);
        }
        Ok((Some(until), f)) => (f, until),
        Ok((None, _)) => {
            note!(
                "fencelock: supervisor: {}: no deadline",
                lease_file.display()
            );
            return ExitCode::from(EXIT_SUPERVISOR);
        }
        Err(e) => {
            note!("fencelock: supervisor: {}: {e}", lease_file.display());
            return ExitCode::from(EXIT_SUPERVISOR);
        }
    };
    let group = nix::unistd::getpgrp();
    // Reaps every child (the command and the orphans that come here) and reports (pid,
    // status as a shell would print it); `None` once there is no child left. Made before
    // the command starts (it begins to wait once told to), so that a thread the system
    // refuses (a process limit) fails this supervisor with the command not started, not
    // with a panic while it runs unwatched.
    let (tx, mut reaped) = tokio::sync::mpsc::unbounded_channel::<Option<(i32, i32)>>();
    let (begin, begun) = std::sync::mpsc::channel::<()>();
    let reaper = std::thread::Builder::new().spawn(move || {
        if begun.recv().is_err() {
            return; // the command did not start
        }
        loop {
            let event = match waitpid(None, None) {
                Ok(WaitStatus::Exited(pid, code)) => Some((pid.as_raw(), code)),
                Ok(WaitStatus::Signaled(pid, sig, _)) => Some((pid.as_raw(), 128 + sig as i32)),
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(_) => None, // ECHILD: nobody left
            };
            let last = event.is_none();
            if tx.send(event).is_err() || last {
                return;
            }
        }
    });
    if let Err(e) = reaper {
        note!("fencelock: supervisor: cannot start a thread: {e}");
        return ExitCode::from(EXIT_SUPERVISOR);
    }
    let child = match std::process::Command::new(&command[0])
        .args(&command[1..])
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            note!("fencelock: cannot run {}: {}", command[0], describe(&e));
            return ExitCode::from(match e.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                _ => EXIT_CANNOT_RUN,
            });
        }
    };
    let command_pid = child.id() as i32;
    drop(child); // reaped below, with every orphan (a std Child does nothing on drop)
    let _ = begin.send(()); // the reaper waits for it, alive (it was made above)
    let mut status: Option<i32> = None;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut poll = tokio::time::interval(Duration::from_millis(100));
    // As often as `lock` looks at its lease; on the lease's clock, which counts a suspend.
    let mut lease_check = tokio::time::interval(LEASE_CHECK);
    loop {
        let stop = tokio::select! {
            r = reaped.recv() => match r {
                Some(Some((pid, code))) => {
                    if pid == command_pid {
                        status = Some(code);
                        true // whatever it left behind does not outlive it
                    } else {
                        false
                    }
                }
                // No process of the group is left.
                _ => return ExitCode::from(status.unwrap_or(1).clamp(0, 255) as u8),
            },
            _ = signals.recv() => true,
            _ = poll.tick() => parent_id() != parent,
            _ = lease_check.tick() => {
                if let Some(until) = LeaseFile::read(&lease) {
                    safe_until = until;
                }
                // Nothing is written here: a write to a full stderr could hold up the
                // SIGKILL that must land before the lease can expire (`lock` says why
                // when it runs again).
                LeaseInstant::now() >= LeaseInstant::from_millis(safe_until)
            }
            _ = sleep_until(kill_at) => {
                let _ = killpg(group, Signal::SIGKILL); // this process included
                continue;
            }
        };
        if stop && kill_at.is_none() {
            let _ = killpg(group, Signal::SIGTERM);
            kill_at = Some(tokio::time::Instant::now() + kill_after);
        }
    }
}

/// Sleeps until `t`, or forever if there is none.
async fn sleep_until(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// An I/O error as a shell says it: "No such file or directory", without " (os error 2)".
fn describe(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

async fn elect(opts: &Opts, name: &str) -> Res<ExitCode> {
    let mut signals = Signals::new()?;
    let client = opts.session_client();
    let (session, guard) = tokio::select! {
        r = open(opts, &client) => r?,
        sig = signals.recv() => return Ok(by_signal(sig)),
    };
    let acquired = tokio::select! {
        r = session.acquire(name, Mode::Exclusive, WaitSpec::Forever) => r,
        sig = signals.recv() => {
            end_session(opts, &session).await;
            return Ok(by_signal(sig));
        }
    };
    let mut hold = match acquired {
        // As `lock` does: a grant that arrives after the lease stopped being safe (a slow
        // wait, a pause) is no leadership to announce.
        Ok(Acquired::Granted(_)) if !guard.may_act() => {
            note!("fencelock: elected to {name} but the lease is no longer safe; resigning");
            drop(guard);
            end_lost_session(opts, &session).await;
            return Ok(ExitCode::from(EXIT_LEASE_LOST));
        }
        Ok(Acquired::Granted(t)) => {
            // Watched before the epoch is written, so that a forced release's push is
            // taken from the start.
            let hold = session.watch_hold(name, t, hold_check(opts));
            let lost = || session.is_lost() || !guard.may_act();
            let why = match say_off_thread(format!("epoch {}\n", t.0), &mut signals, &lost).await {
                Said::Written(Written::All) => None,
                Said::Written(Written::ReaderGone) => Some("stdout's reader is gone".to_string()),
                Said::Written(Written::Failed(e)) => Some(e),
                Said::Signal(sig) => {
                    // Asked to stop before anyone read who leads: resign.
                    drop(guard);
                    end_session(opts, &session).await;
                    return Ok(by_signal(sig));
                }
                Said::Lost => {
                    note!("fencelock: elected to {name}, but the lease was lost before stdout was read; resigning");
                    drop(guard);
                    end_lost_session(opts, &session).await;
                    return Ok(ExitCode::from(EXIT_LEASE_LOST));
                }
            };
            if let Some(why) = why {
                // Nobody reads who leads: resign at once rather than lead unheard.
                drop(guard);
                end_session(opts, &session).await;
                return Err(format!("{why}: resigned").into());
            }
            hold
        }
        // Elected while cut off, and released since: an administrator ended the
        // leadership before a word of it was said (exit 3, as `lock` and the help say).
        Ok(Acquired::HoldEnded(_)) => {
            note!(
                "fencelock: elected to {name} while this client was cut off, and released \
                 since (by an administrator); not leading"
            );
            end_session(opts, &session).await;
            return Ok(ExitCode::from(EXIT_LEASE_LOST));
        }
        Ok(other) => {
            let why = match other {
                Acquired::SessionLost => "the session ended while waiting",
                Acquired::WaitEnded => {
                    "the wait ended while this client was cut off (it timed out, or was \
                     granted and forced out since)"
                }
                _ => "the campaign's wait ended",
            };
            note!("fencelock: not elected to {name}: {why}");
            end_session(opts, &session).await;
            return Ok(ExitCode::from(EXIT_NOT_ACQUIRED));
        }
        Err(e) => {
            end_session(opts, &session).await;
            return Err(e.into());
        }
    };
    let mut check = tokio::time::interval(LEASE_CHECK);
    // Every way out drops (stops) the hold's watch.
    loop {
        tokio::select! {
            _ = signals.recv() => {
                // Resigning on request is the normal end of `elect`; exit 0 says the
                // leadership is free, so only a close the cluster confirmed gets it.
                drop(guard);
                return Ok(match end_session(opts, &session).await {
                    Closed::Confirmed => ExitCode::SUCCESS,
                    Closed::Unconfirmed => {
                        note!("fencelock: resignation from {name} not confirmed; the leadership ends when the session expires");
                        ExitCode::FAILURE
                    }
                });
            }
            end = hold.ended() => {
                match end {
                    // An administrator's forced release ends the leadership too.
                    HoldEnded::Pushed(ReleaseReason::Released) => {
                        note!("fencelock: leadership of {name} released by an administrator");
                    }
                    HoldEnded::Pushed(ReleaseReason::Closed) => {
                        note!("fencelock: the session leading {name} was closed by an administrator");
                    }
                    HoldEnded::NotAmongHolders | HoldEnded::Unknown => {
                        note!("fencelock: leadership of {name} is no longer this session's (released without word reaching it)");
                    }
                    HoldEnded::Pushed(_) | HoldEnded::SessionLost => {
                        note!("fencelock: leadership lease lost");
                    }
                }
                drop(guard);
                end_lost_session(opts, &session).await;
                return Ok(ExitCode::from(EXIT_LEASE_LOST));
            }
            _ = check.tick() => {
                if !guard.may_act() {
                    note!("fencelock: leadership lease lost");
                    drop(guard);
                    end_lost_session(opts, &session).await;
                    return Ok(ExitCode::from(EXIT_LEASE_LOST));
                }
            }
        }
    }
}

/// A mode as `holder`, `queue` and `watch` print it: `exclusive`, `shared`,
/// `permits:COUNT/LIMIT`.
fn mode_text(m: Mode) -> String {
    match m {
        Mode::Exclusive => "exclusive".into(),
        Mode::Shared => "shared".into(),
        Mode::Permits { count, limit } => format!("permits:{count}/{limit}"),
    }
}

/// One line of `sessions`: `SESSION OWNER TTL_MS EXPIRES_AT_MS HOLDS WAITS WATCHES
/// [LABEL]`, the label escaped as [`with_label`] does.
fn session_line(s: &ListedSession) -> String {
    let i = &s.info;
    let line = format!(
        "{} {} {} {} {} {} {}",
        i.id.0, s.owner, i.ttl, i.expires_at.0, i.holds, i.waits, i.watches
    );
    let mut line = with_label(line, i.label.as_str());
    line.push('\n');
    line
}

/// `line`, then ` LABEL` unless the label is empty. The characters of the label that
/// could change how the line reads ([`hides_text`]) are printed escaped (`\n`,
/// `\u{1b}`, `\u{202e}`): one holder is always one line, shown in the order its
/// characters come; other text, accented or not Latin, is printed as it is.
fn with_label(line: String, label: &str) -> String {
    if label.is_empty() {
        return line;
    }
    let mut out = line;
    out.push(' ');
    for c in label.chars() {
        if hides_text(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// What `watch` prints: every change, or an election's leader.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Show {
    /// `CHANGE SESSION MODE TOKEN [LABEL]` per change.
    Changes,
    /// `leader SESSION EPOCH [LABEL]` / `none [released|closed|expired]`.
    Leader,
}

/// The line `show` prints for one `HolderChanged`.
fn watch_line(
    show: Show,
    holder: u64,
    mode: Mode,
    token: u64,
    change: Change,
    label: &str,
) -> String {
    match (show, change) {
        (Show::Changes, _) => with_label(
            format!("{} {holder} {} {token}", change.kind(), mode_text(mode)),
            label,
        ),
        (Show::Leader, Change::Holding | Change::Granted) => {
            with_label(format!("leader {holder} {token}"), label)
        }
        (Show::Leader, c) => format!("none {}", c.kind()),
    }
}

/// `watch NAME` and `observe NAME`: opens a session (kept alive like `lock`'s), watches
/// NAME and prints its holder changes (`show`) until a signal (exit 0) or the session is
/// lost (exit 3). After a reconnect (pushes may have been missed) it unwatches and
/// watches again, printing the current holders anew.
// The stdout write stays in the arm's body: a write in a match guard would hide it.
#[allow(clippy::collapsible_match)]
async fn watch(opts: &Opts, name: &str, show: Show) -> Res<ExitCode> {
    let mut signals = Signals::new()?;
    let client = opts.session_client();
    let mut pushes = client.subscribe();
    let (session, guard) = tokio::select! {
        r = open(opts, &client) => r?,
        sig = signals.recv() => return Ok(by_signal(sig)),
    };
    // A watch retried on a new connection is answered without its first events again:
    // the epoch is taken before it, so that a reconnect meanwhile starts it again below.
    let mut epoch = client.epoch();
    let started = tokio::select! {
        r = session.watch(name) => r,
        sig = signals.recv() => {
            end_session(opts, &session).await;
            return Ok(by_signal(sig));
        }
    };
    let holders = match started {
        Ok(n) => n,
        Err(e) => {
            end_session(opts, &session).await;
            return Err(e.into());
        }
    };
    note!(
        "fencelock: session {} watches {name} ({holders} holder{} now)",
        session.id(),
        if holders == 1 { "" } else { "s" }
    );
    let lost = || session.is_lost() || !guard.may_act();
    if show == Show::Leader && holders == 0 {
        if let Some(code) = say("none", &mut signals, &lost).await {
            drop(guard);
            end_session(opts, &session).await;
            return Ok(code);
        }
    }
    let mut check = tokio::time::interval(Duration::from_millis(50));
    let code = loop {
        tokio::select! {
            sig = signals.recv() => {
                let _ = sig;
                break ExitCode::SUCCESS;
            }
            p = pushes.recv() => match p {
                Ok(Output::HolderChanged { session: s, lock, holder, mode, token, change, label })
                    if s.0 == session.id() && lock.as_str() == name =>
                {
                    let line = watch_line(show, holder.0, mode, token.0, change, label.as_str());
                    if let Some(code) = say(&line, &mut signals, &lost).await {
                        break code;
                    }
                }
                Ok(Output::SessionExpired { session: s }) if s.0 == session.id() => {
                    note!("fencelock: the watching session expired; changes of {name} are no longer seen");
                    break ExitCode::from(EXIT_LEASE_LOST);
                }
                // Pushes were dropped (this process fell behind): start again.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => epoch = 0,
                _ => {}
            },
            _ = check.tick() => {}
        }
        if lost() {
            note!("fencelock: the watching session was lost; changes of {name} are no longer seen");
            break ExitCode::from(EXIT_LEASE_LOST);
        }
        if client.epoch() != epoch {
            // A new connection: pushes sent while there was none are gone. Start again
            // from the current holders. The epoch is taken after the unwatch (which may
            // itself find the leader anew) and before the watch, as at the start.
            let again = async {
                match session.unwatch(name).await {
                    Ok(()) => {}
                    Err(ClientError::Core(e)) if e.kind == "not_watching" => {}
                    Err(e) => return Err(e),
                }
                let before = client.epoch();
                session.watch(name).await.map(|n| (n, before))
            };
            match tokio::select! {
                r = again => r.map(|(n, before)| {
                    epoch = before;
                    n
                }),
                sig = signals.recv() => { let _ = sig; break ExitCode::SUCCESS; }
            } {
                Ok(n) => {
                    if show == Show::Leader && n == 0 {
                        if let Some(code) = say("none", &mut signals, &lost).await {
                            break code;
                        }
                    }
                }
                Err(e) => {
                    drop(guard);
                    end_session(opts, &session).await;
                    return Err(e.into());
                }
            }
        }
    };
    drop(guard);
    end_session(opts, &session).await;
    Ok(code)
}

/// How a write to stdout by a command that holds a session ended.
enum Said {
    /// The write ended (all of it written, or not: [`Written`] says).
    Written(Written),
    /// A signal came first: the write is abandoned.
    Signal(Signal),
    /// The session was lost first (`lost` said so): the write is abandoned.
    Lost,
}

/// Writes `text` to stdout for a command that holds a session, on a thread of its own:
/// the runtime has one thread, which also sends the session's keep-alives, and a write to
/// a pipe nobody reads blocks until someone does (`fencelock watch L | slow-reader`). Done
/// on that thread, it stopped the keep-alives and the session expired while the command
/// only waited for its reader. Meanwhile a signal or a lost session (`lost`, looked at
/// every [`LEASE_CHECK`]) ends the wait; the write then stays behind, blocked: a reader that reads
/// before the process exits (it closes its session first) still gets the line, and the
/// exit does not wait for it (`main`). Lines keep their order: each is written
/// before the next is begun. Cost: one write of `text`, and a thread from the runtime's
/// pool while it blocks.
async fn say_off_thread(text: String, signals: &mut Signals, lost: &dyn Fn() -> bool) -> Said {
    let mut write = tokio::task::spawn_blocking(move || write_out(&text));
    let mut check = tokio::time::interval(LEASE_CHECK);
    loop {
        tokio::select! {
            w = &mut write => {
                return Said::Written(
                    w.unwrap_or_else(|e| Written::Failed(format!("cannot write to stdout: {e}"))),
                )
            }
            sig = signals.recv() => return Said::Signal(sig),
            _ = check.tick() => {
                if lost() {
                    return Said::Lost;
                }
            }
        }
    }
}

/// Writes `line` to stdout for a command that holds a session (`watch`, `observe`), off
/// the runtime's thread ([`say_off_thread`]): `None` once written; otherwise the exit code
/// to end with, its session closed rather than left to its ttl — 0 when the reader
/// stopped reading (`fencelock watch L | grep -m1 …`: as a signal ends it) or a signal
/// came while the write waited for the reader, 3 when the session was lost meanwhile
/// (said on stderr), 1 when stdout cannot be written for another reason (`> /dev/full`,
/// said on stderr).
async fn say(line: &str, signals: &mut Signals, lost: &dyn Fn() -> bool) -> Option<ExitCode> {
    match say_off_thread(format!("{line}\n"), signals, lost).await {
        Said::Written(Written::All) => None,
        Said::Written(Written::ReaderGone) | Said::Signal(_) => Some(ExitCode::SUCCESS),
        Said::Written(Written::Failed(e)) => {
            note!("fencelock: {e}");
            Some(ExitCode::from(1))
        }
        Said::Lost => {
            note!("fencelock: the watching session was lost while stdout was not read");
            Some(ExitCode::from(EXIT_LEASE_LOST))
        }
    }
}

/// The leader among the nodes' own views, and the highest term any of them knows: the
/// node that says it leads in that term, unless it has stepped back for want of a quorum
/// (it serves nothing; its own line says so). Cost: O(nodes × checks).
fn leader_of(ok: &[&NodeStatus]) -> (Option<u64>, Option<u64>) {
    let term = ok.iter().map(|s| s.term).max();
    let stepped_back = |s: &NodeStatus| {
        s.checks.iter().any(|c| {
            c.strip_prefix("fail ")
                .is_some_and(|c| c.starts_with(STEPPED_BACK))
        })
    };
    let leader = ok
        .iter()
        .find(|s| s.role == "leader" && Some(s.term) == term && !stepped_back(s))
        .map(|s| s.id);
    (leader, term)
}

/// `HOST:PID`, with HOST the first of `host_files` that names one (trimmed; else
/// `localhost`), cut at a character boundary so that the label fits
/// [`fencelock::MAX_LABEL_LEN`] bytes with the pid whole. A host name is at most 255 bytes
/// (POSIX; Linux's at most 64): what a file holds past that is no host name and is not
/// read. Cost: one read of at most 255 bytes per file tried.
fn default_label(host_files: &[&std::path::Path], pid: u32) -> String {
    use std::io::Read;
    let host = host_files
        .iter()
        .find_map(|p| {
            let mut b = Vec::new();
            let f = std::fs::File::open(p).ok()?;
            f.take(HOST_NAME_MAX).read_to_end(&mut b).ok()?;
            // A name cut at the 255th byte may end inside a character: only that end is
            // let go; a file that is not UTF-8 otherwise names no host.
            let h = match String::from_utf8(b) {
                Ok(h) => h,
                Err(e) if e.utf8_error().error_len().is_none() => {
                    let valid = e.utf8_error().valid_up_to();
                    let mut b = e.into_bytes();
                    b.truncate(valid);
                    String::from_utf8(b).ok()?
                }
                Err(_) => return None,
            };
            let h = h.trim().to_string();
            (!h.is_empty()).then_some(h)
        })
        .unwrap_or_else(|| "localhost".into());
    let pid = format!(":{pid}");
    let mut room = fencelock::MAX_LABEL_LEN
        .saturating_sub(pid.len())
        .min(host.len());
    while !host.is_char_boundary(room) {
        room -= 1;
    }
    format!("{}{pid}", &host[..room])
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencelock_server::stdio::SHOWN_MAX;

    /// A node's status: `id`, its role and term, its readiness checks (ready when every
    /// one is `ok …`), no members, empty tables.
    fn node(id: u64, role: &str, term: u64, checks: &[&str]) -> NodeStatus {
        NodeStatus {
            id,
            version: String::new(),
            role: role.into(),
            term,
            leader: None,
            committed: 0,
            applied: 0,
            last_log: 0,
            ready: checks.iter().all(|c| c.starts_with("ok ")),
            checks: checks.iter().map(|c| c.to_string()).collect(),
            voters: vec![],
            learners: vec![],
            sessions: (0, 0),
            locks: (0, 0),
            claims: (0, 0),
            connections: (0, 0),
        }
    }

    /// The command line's bounds lower what a session command's (`lock`, `elect`,
    /// `watch`) client waits — for a connect, a reply and its retries — below what its ttl
    /// allows, never raise it; a page (`backup`, `export`) is waited for
    /// `PAGE_REPLY_TIME` at least, whatever `--timeout-ms` says.
    #[test]
    fn the_command_lines_timeouts_bound_what_its_clients_wait() {
        let opts = |args: &[&str]| {
            let argv = ["fencelock"].iter().chain(args).chain(&["holder", "x"]);
            Args::try_parse_from(argv).unwrap().opts
        };
        let ms = Duration::from_millis;
        let by_ttl = Timeouts::for_ttl(60_000);
        let low = opts(&[
            "--ttl-ms",
            "60000",
            "--timeout-ms",
            "400",
            "--connect-timeout-ms",
            "150",
        ]);
        let t = low.session_timeouts();
        assert_eq!(
            (t.connect, t.reply, t.retry_for),
            (ms(150), ms(400), ms(400))
        );
        assert!(
            by_ttl.reply > ms(400) && by_ttl.retry_for > ms(400),
            "{by_ttl:?}"
        );
        let high = opts(&["--ttl-ms", "60000", "--timeout-ms", "3600000"]);
        let t = high.session_timeouts();
        assert_eq!((t.reply, t.retry_for), (by_ttl.reply, by_ttl.retry_for));
        assert_eq!(low.page_timeouts().reply, PAGE_REPLY_TIME);
        assert_eq!(low.page_timeouts().retry_for, ms(400));
        assert_eq!(high.page_timeouts().reply, ms(3_600_000));
    }

    /// The default label is `HOST:PID` within the label's 64 bytes, the pid kept whole and
    /// the host cut at a character boundary; a host-name file is read only up to a host
    /// name's length (a huge one costs no more), and an empty or missing one is passed over.
    #[test]
    fn the_default_label_keeps_the_pid_and_reads_no_more_than_a_host_name() {
        let dir = std::env::temp_dir().join(format!("fencelock-label-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let missing = dir.join("missing");
        let empty = file("empty", " \n");
        let plain = file("plain", "build-3\n");
        assert_eq!(
            default_label(&[&missing, &empty, &plain], 81723),
            "build-3:81723"
        );
        assert_eq!(default_label(&[&missing, &empty], 7), "localhost:7");
        // 'é' is two bytes: the cut falls inside one and moves back to its start.
        let long = file(
            "long",
            &format!("{}é{}", "a".repeat(57), "b".repeat(1 << 20)),
        );
        let l = default_label(&[&long], 12345);
        assert_eq!(l, format!("{}:12345", "a".repeat(57)));
        let l = default_label(&[&long], 7);
        assert_eq!(l, format!("{}é{}:7", "a".repeat(57), "b".repeat(3)));
        assert_eq!(l.len(), fencelock::MAX_LABEL_LEN);
        // Past 255 bytes nothing is read: a file of 255 spaces and then a name names no host.
        let spaced = file("spaced", &format!("{}far", " ".repeat(255)));
        assert_eq!(default_label(&[&spaced, &plain], 1), "build-3:1");
        // A file that is not UTF-8 names no host; one cut at byte 255 inside a character
        // loses only that character (here the 128th 'é' is cut, and the label is cut to 62
        // bytes, 31 of them).
        let binary = dir.join("binary");
        std::fs::write(&binary, b"host\xff\xfe").unwrap();
        assert_eq!(default_label(&[&binary, &plain], 1), "build-3:1");
        let cut = file("cut", &"é".repeat(200));
        assert_eq!(default_label(&[&cut], 1), format!("{}:1", "é".repeat(31)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A node's text cannot forge a line of `members` or `status`, split a field, or send
    /// the terminal its controls; it is cut at `SHOWN_MAX` characters.
    #[test]
    fn a_nodes_text_is_printed_escaped_and_cut() {
        let addr = |raft: &str| NodeAddr {
            raft: raft.into(),
            client: "b:1".into(),
        };
        let members = (
            vec![(1, addr("a:1\nvoter 9 x y"))],
            vec![(2, addr("c d\u{202e}"))],
        );
        let text = members_text(&members);
        assert_eq!(
            text,
            "voter 1 a:1\\nvoter\\u{20}9\\u{20}x\\u{20}y b:1\n\
             learner 2 c\\u{20}d\\u{202e} b:1\n"
        );
        assert_eq!(shown("fail x\u{1b}[2J ok"), "fail x\\u{1b}[2J ok");
        let long = "x".repeat(SHOWN_MAX + 5);
        assert_eq!(shown(&long).chars().count(), SHOWN_MAX + 1);
        assert!(shown(&long).ends_with('…'));
        let st = node(3, "leader\n", 1, &["fail disk\r\nvoter 9 x y"]);
        let answers = vec![
            ("n\n1".to_string(), Ok(st)),
            ("n2".to_string(), Err("refused\u{1b}[2J".to_string())),
        ];
        let text = status_text(
            &answers,
            None,
            None,
            &Ok((vec![], vec![])),
            &(vec![], vec![]),
        );
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text}");
    }

    /// The node leading in the highest term is the leader, unless its readiness says it
    /// stepped back; a leader of an older term never is.
    #[test]
    fn a_stepped_back_leader_is_not_named_the_leader() {
        let back = format!("fail {STEPPED_BACK} (no majority heard)");
        let (a, b, c) = (
            node(1, "leader", 5, &["ok leader 1"]),
            node(2, "follower", 5, &["ok leader 1"]),
            node(3, "leader", 4, &["ok leader 3"]),
        );
        assert_eq!(leader_of(&[&a, &b, &c]), (Some(1), Some(5)));
        let a_back = node(1, "leader", 5, &[back.as_str(), "ok disk /d"]);
        assert_eq!(leader_of(&[&a_back, &b, &c]), (None, Some(5)));
        // A leader not ready for another reason (its disk) is still the leader.
        let a_disk = node(
            1,
            "leader",
            5,
            &["ok leader 1", "fail disk /d: a write waits"],
        );
        assert_eq!(leader_of(&[&a_disk, &b]), (Some(1), Some(5)));
    }

    /// `export -o FILE` over a world-readable `FILE.tmp` left by a crash: the export is
    /// 0600 and holds only the new text.
    #[test]
    fn an_export_over_a_leftover_temporary_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!(
            "fencelock-cli-unit-leftover-{}-{:?}",
            std::process::id(),
            std::time::Instant::now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("incident.flrec");
        let tmp = dir.join("incident.flrec.tmp");
        std::fs::write(&tmp, "a leftover, longer than the export").unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_synced(&out, b"new\n").unwrap();
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&out).unwrap(), b"new\n");
        assert!(!tmp.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn json_strings_escape_quotes_backslashes_and_control_characters() {
        assert_eq!(json_str("plain"), "\"plain\"");
        assert_eq!(
            json_str("a\"b\\c\nd\te\u{1}é"),
            "\"a\\\"b\\\\c\\nd\\te\\u0001é\""
        );
    }

    #[test]
    fn holder_lines_show_permits_and_labels_one_line_each() {
        assert_eq!(mode_text(Mode::Exclusive), "exclusive");
        assert_eq!(mode_text(Mode::Shared), "shared");
        assert_eq!(
            mode_text(Mode::Permits { count: 2, limit: 5 }),
            "permits:2/5"
        );
        assert_eq!(with_label("7 shared 3".into(), ""), "7 shared 3");
        assert_eq!(
            with_label("7 shared 3".into(), "build box 7"),
            "7 shared 3 build box 7"
        );
        // A label cannot start a second line or move the cursor.
        assert_eq!(
            with_label("7 shared 3".into(), "a\nb\u{1b}[2Jé"),
            "7 shared 3 a\\nb\\u{1b}[2Jé"
        );
    }

    /// A label cannot reorder what a terminal shows: U+202E (RIGHT-TO-LEFT OVERRIDE) and
    /// the other bidirectional controls, and the line separators, are printed escaped in
    /// holder and watch lines; ordinary non-ASCII text stays as it is.
    #[test]
    fn bidirectional_controls_in_labels_are_printed_escaped() {
        assert_eq!(
            with_label("7 exclusive 3".into(), "ci\u{202e}7 tsoh"),
            "7 exclusive 3 ci\\u{202e}7 tsoh"
        );
        let all = "\u{61c}\u{200e}\u{200f}\u{2028}\u{2029}\u{202a}\u{202b}\u{202c}\u{202d}\
                   \u{202e}\u{2066}\u{2067}\u{2068}\u{2069}\u{85}\u{7f}";
        let shown = with_label("1 shared 2".into(), all);
        assert!(shown.is_ascii(), "{shown:?}");
        assert_eq!(
            shown.matches("\\u{").count(),
            all.chars().count(),
            "{shown}"
        );
        assert_eq!(
            with_label("1 shared 2".into(), "Zoë ビルド 🚀 עברית"),
            "1 shared 2 Zoë ビルド 🚀 עברית"
        );
        assert_eq!(
            watch_line(
                Show::Leader,
                4,
                Mode::Exclusive,
                9,
                Change::Granted,
                "a\u{2066}b"
            ),
            "leader 4 9 a\\u{2066}b"
        );
    }

    #[test]
    fn watch_and_observe_lines() {
        let p = Mode::Permits { count: 1, limit: 2 };
        assert_eq!(
            watch_line(Show::Changes, 4, p, 9, Change::Granted, "w"),
            "granted 4 permits:1/2 9 w"
        );
        assert_eq!(
            watch_line(Show::Changes, 4, Mode::Exclusive, 9, Change::Expired, ""),
            "expired 4 exclusive 9"
        );
        for c in [Change::Holding, Change::Granted] {
            assert_eq!(
                watch_line(Show::Leader, 4, Mode::Exclusive, 9, c, "host:1"),
                "leader 4 9 host:1"
            );
        }
        for (c, want) in [
            (Change::Released, "none released"),
            (Change::Closed, "none closed"),
            (Change::Expired, "none expired"),
        ] {
            assert_eq!(
                watch_line(Show::Leader, 4, Mode::Exclusive, 9, c, "x"),
                want
            );
        }
    }

    #[test]
    fn status_json_names_an_unreachable_node_and_a_missing_quorum() {
        let answers: Vec<Answer> = vec![("127.0.0.1:1".into(), Err("refused \"x\"".into()))];
        let quorum: Result<Members, ClientError> = Err(ClientError::Unavailable("gone".into()));
        let json = status_json(&answers, None, None, &quorum, &(vec![], vec![]));
        assert_eq!(
            json,
            "{\"quorum\":false,\"quorum_error\":\"unavailable: gone\",\"leader\":null,\
             \"term\":null,\"voters\":[],\"learners\":[],\"nodes\":[{\"endpoint\":\
             \"127.0.0.1:1\",\"reachable\":false,\"error\":\"refused \\\"x\\\"\"}]}"
        );
    }
}
