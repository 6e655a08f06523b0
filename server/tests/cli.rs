//! The `fencelock` CLI as a user runs it: real `fencelock` processes against a real
//! one-node cluster (a `fencelock-node` process on 127.0.0.1), one test per failure path of
//! `lock`. Each checks that the lock is free (or granted to the next waiter) when the CLI
//! has exited — the sessions here live 60 s, so a lock left to expire would still be held —
//! and that no process of the command is left.
//!
//! The tests run one at a time (a process-wide mutex): their bounds on how soon the next
//! waiter gets the lock must not depend on how many other clusters start meanwhile.

mod common;
mod procs;
use procs::{signal, stderr_of, wait_exit, wait_until};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const CLI: &str = env!("CARGO_BIN_EXE_fencelock");
/// A ttl no test waits out: a lock still held at a check was not released by the CLI.
const LONG_TTL: &str = "60000";
/// How soon, after the CLI holding a lock is told to stop, the next waiter must have run
/// its command and exited: "at once", as opposed to a ttl later — a bound well below the
/// 60 s ttl and the 8 s kill grace it tells them from, and well above what a loaded
/// machine takes to spawn, grant and exit (about 0.1 s here).
const PROMPT: Duration = Duration::from_secs(5);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn temp_dir(name: &str) -> PathBuf {
    common::temp_dir(&format!("cli-{name}"))
}

/// True while `pid` runs (a zombie no longer runs: the supervisor of a killed CLI is
/// reparented, and the reaper of the machine may be slow).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.trim().chars().next());
            !matches!(state, Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

/// Reads a pid the command wrote to `path`, waiting (bounded) for it.
fn read_pid(path: &Path) -> u32 {
    u32::try_from(read_number(path)).expect("a pid")
}

/// Reads a number the command wrote to `path`, waiting (bounded) for it.
fn read_number(path: &Path) -> u64 {
    let mut pid = None;
    wait_until(
        &format!("{} written", path.display()),
        Duration::from_secs(20),
        || {
            pid = std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            pid.is_some()
        },
    );
    pid.unwrap_or_default()
}

/// A one-node cluster in a `fencelock-node` process.
struct Node {
    dir: PathBuf,
    client: String,
    node: procs::Cluster,
}

impl Node {
    fn start(name: &str) -> Node {
        let dir = temp_dir(name);
        let mut node = procs::Cluster::prepare_single(&dir);
        node.extra
            .insert(1, vec!["--grace-ms".into(), "100".into()]);
        let mut n = Node {
            dir,
            client: node.clients[0].clone(),
            node,
        };
        n.boot();
        n
    }

    /// Starts the node process (again, on the same data) and waits until it answers.
    fn boot(&mut self) {
        self.node.spawn(1);
        wait_until("the node answers", Duration::from_secs(30), || {
            self.cli(&["holder", "probe"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
    }

    fn kill9(&mut self) {
        self.node.kill9(1);
    }

    /// The CLI with this cluster's address (after the subcommand, as the README writes it).
    fn cli(&self, args: &[&str]) -> Command {
        let mut c = procs::with_default_signals(CLI);
        c.env_remove("FENCELOCK_CLUSTER")
            .env("FENCELOCK_INSECURE_PLAINTEXT", "true")
            .current_dir(&self.dir)
            .args(args)
            .args(["--cluster", &self.client])
            .stdin(Stdio::null());
        c
    }

    /// `fencelock lock NAME --ttl-ms 60000 -- sh -c SCRIPT`, with stderr captured.
    fn lock(&self, name: &str, script: &str) -> Child {
        self.cli(&["lock", name, "--ttl-ms", LONG_TTL])
            .args(["--", "sh", "-c", script])
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fencelock lock")
    }

    fn read(&self, what: &str, name: &str) -> String {
        let out: Output = self.cli(&[what, name]).output().expect("fencelock read");
        assert!(
            out.status.success(),
            "fencelock {what} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn holder(&self, name: &str) -> String {
        self.read("holder", name)
    }

    fn queue(&self, name: &str) -> String {
        self.read("queue", name)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A shell script that starts a grandchild (`sleep 60`, its pid in `gc`), writes its own
/// pid to `cmd`, and waits.
const WITH_GRANDCHILD: &str = "sleep 60 & echo $! > gc; echo $$ > cmd; wait";

#[test]
fn a_command_that_cannot_start_is_named_and_the_lock_freed() {
    let _s = serial();
    let n = Node::start("nostart");
    let mut c = n
        .cli(&["lock", "jobs/reindex", "--ttl-ms", LONG_TTL])
        .args(["--", "./missing.sh"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let st = wait_exit(&mut c, Duration::from_secs(20));
    let err = stderr_of(&mut c);
    assert_eq!(st.code(), Some(127), "stderr: {err}");
    assert!(
        err.contains("fencelock: cannot run ./missing.sh: No such file or directory"),
        "stderr: {err}"
    );
    assert_eq!(n.holder("jobs/reindex"), "", "lock left held");

    std::fs::write(n.path("not-executable.sh"), "#!/bin/sh\n").unwrap();
    let mut c = n
        .cli(&["lock", "jobs/reindex", "--ttl-ms", LONG_TTL])
        .args(["--", "./not-executable.sh"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let st = wait_exit(&mut c, Duration::from_secs(20));
    let err = stderr_of(&mut c);
    assert_eq!(st.code(), Some(126), "stderr: {err}");
    assert!(
        err.contains("fencelock: cannot run ./not-executable.sh: Permission denied"),
        "stderr: {err}"
    );
    assert_eq!(n.holder("jobs/reindex"), "", "lock left held");
}

/// The supervisor's own failure (here, no lease file to read) does not start the command
/// and exits 125, which `lock` passes on: a status of its own, not the 1 that `lock` gives
/// to "the cluster did not answer", nor one the command could have given.
#[test]
fn a_supervisor_that_cannot_start_exits_125_without_the_command() {
    let dir = temp_dir("supfail");
    let _ = std::fs::remove_file(dir.join("ran"));
    let out = Command::new(CLI)
        .current_dir(&dir)
        .args(["__supervise", "--parent", &std::process::id().to_string()])
        .args(["--kill-after-ms", "100", "--lease-file"])
        .arg(dir.join("no-such-lease"))
        .args(["--", "sh", "-c", "touch ran"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {err}");
    assert!(err.contains("fencelock: supervisor: "), "stderr: {err}");
    assert!(!dir.join("ran").exists(), "the command was started");
}

/// The command learns what it holds from its environment: the lock's name and its token;
/// a plain lock's command has no permit variables, even when the CLI's own environment has
/// them (an outer semaphore holder's, say), and never the cluster's bearer token the CLI
/// was given.
#[test]
fn the_command_is_told_what_it_holds_and_nothing_inherited() {
    let _s = serial();
    let n = Node::start("env");
    let script = "echo \"$FENCELOCK_LOCK $FENCELOCK_TOKEN ${FENCELOCK_PERMITS-none} \
                  ${FENCELOCK_PERMIT_LIMIT-none} ${FENCELOCK_AUTH_TOKEN-none}\" > env";
    let mut c = n
        .cli(&["lock", "jobs/env", "--ttl-ms", LONG_TTL])
        .env("FENCELOCK_PERMITS", "3")
        .env("FENCELOCK_PERMIT_LIMIT", "4")
        .env("FENCELOCK_AUTH_TOKEN", "the-cluster-token")
        .args(["--", "sh", "-c", script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let st = wait_exit(&mut c, Duration::from_secs(20));
    assert!(st.success(), "lock exited {st:?}: {}", stderr_of(&mut c));
    let env = std::fs::read_to_string(n.path("env")).unwrap();
    let f: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(f.len(), 5, "{env:?}");
    assert_eq!(f[0], "jobs/env", "{env:?}");
    assert!(f[1].parse::<u64>().is_ok_and(|t| t > 0), "token: {env:?}");
    assert_eq!(f[2..4], ["none", "none"], "permit variables: {env:?}");
    assert_eq!(
        f[4], "none",
        "the bearer token reached the command: {env:?}"
    );
}

#[test]
fn a_signal_while_queued_leaves_the_queue() {
    let _s = serial();
    let n = Node::start("queued");
    let mut holder = n.lock("L", "echo $$ > cmd; exec sleep 60");
    let cmd = read_pid(&n.path("cmd"));
    for (sig, code) in [("-TERM", 143), ("-INT", 130), ("-HUP", 129)] {
        let mut waiter = n.lock("L", "touch waiter-ran");
        wait_until("the waiter queued", Duration::from_secs(20), || {
            !n.queue("L").is_empty()
        });
        signal(waiter.id(), sig);
        let st = wait_exit(&mut waiter, Duration::from_secs(20));
        assert_eq!(st.code(), Some(code), "waiter after {sig}: {st:?}");
        assert_eq!(n.queue("L"), "", "the waiter stayed queued after {sig}");
    }
    // The next waiter gets the lock at once when the holder is stopped; no dead waiter ran.
    let mut next = n.lock("L", "touch next-ran");
    wait_until("the next waiter queued", Duration::from_secs(20), || {
        !n.queue("L").is_empty()
    });
    let t0 = Instant::now();
    signal(holder.id(), "-TERM");
    assert_eq!(wait_exit(&mut holder, PROMPT).code(), Some(143));
    assert!(!running(cmd), "the holder's command still runs");
    let st = wait_exit(&mut next, PROMPT.saturating_sub(t0.elapsed()));
    assert!(st.success(), "next waiter: {st:?} {}", stderr_of(&mut next));
    eprintln!(
        "next waiter ran and exited {:?} after SIGTERM to the holder",
        t0.elapsed()
    );
    assert!(n.path("next-ran").exists());
    assert!(
        !n.path("waiter-ran").exists(),
        "a signalled waiter ran its command"
    );
    assert_eq!(n.holder("L"), "");
}

#[test]
fn a_signal_while_holding_stops_the_group_and_passes_the_lock_on() {
    let _s = serial();
    let n = Node::start("holding");
    for (sig, code) in [("-TERM", 143), ("-INT", 130)] {
        let _ = std::fs::remove_file(n.path("gc"));
        let _ = std::fs::remove_file(n.path("cmd"));
        let mut holder = n.lock("L", WITH_GRANDCHILD);
        let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
        let mut next = n.lock("L", "true");
        wait_until("the next waiter queued", Duration::from_secs(20), || {
            !n.queue("L").is_empty()
        });
        let t0 = Instant::now();
        signal(holder.id(), sig);
        assert_eq!(wait_exit(&mut holder, PROMPT).code(), Some(code));
        assert!(!running(cmd), "command still runs after {sig}");
        assert!(!running(gc), "grandchild still runs after {sig}");
        let st = wait_exit(&mut next, PROMPT.saturating_sub(t0.elapsed()));
        assert!(st.success(), "next waiter: {st:?}");
        eprintln!("{sig}: next waiter ran and exited {:?} later", t0.elapsed());
        assert_eq!(n.holder("L"), "");
    }
}

/// A signal the CLI started with ignored stays ignored: `nohup fencelock lock …` (SIGHUP)
/// goes on through a SIGHUP, its command runs to its end and the lock is released after
/// it (exit 0); without it, a SIGHUP stops the command and exits 129. The CLI's handlers
/// used to replace the inherited ignore.
#[test]
fn a_signal_ignored_at_start_stays_ignored() {
    let _s = serial();
    let n = Node::start("nohup");
    for (trap, code) in [("trap '' HUP; ", 0), ("", 129)] {
        let _ = std::fs::remove_file(n.path("done"));
        let _ = std::fs::remove_file(n.path("cmd"));
        // `exec`: the shell's pid is the CLI's, which inherits the shell's ignore; without
        // the trap, from the defaults whatever this test run started with.
        let start = if trap.is_empty() {
            "env --default-signal=HUP "
        } else {
            ""
        };
        let script = format!(
            "{trap}exec {start}{CLI} lock L --ttl-ms {LONG_TTL} --cluster {} -- \
             sh -c 'echo $$ > cmd; sleep 2; touch done'",
            n.client
        );
        let mut holder = Command::new("sh")
            .args(["-c", &script])
            .current_dir(&n.dir)
            .env("FENCELOCK_INSECURE_PLAINTEXT", "true")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let cmd = read_pid(&n.path("cmd"));
        signal(holder.id(), "-HUP");
        assert_eq!(
            wait_exit(&mut holder, PROMPT).code(),
            Some(code),
            "{trap:?}"
        );
        assert!(!running(cmd), "{trap:?}: the command still runs");
        assert_eq!(n.path("done").exists(), code == 0, "{trap:?}");
        assert_eq!(n.holder("L"), "", "{trap:?}");
    }
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let _s = serial();
    let n = Node::start("ignores");
    let mut holder = n
        .cli(&["lock", "L", "--ttl-ms", LONG_TTL, "--kill-after-ms", "300"])
        .args(["--", "sh", "-c"])
        .arg(format!("trap '' TERM; {WITH_GRANDCHILD}"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
    signal(holder.id(), "-TERM");
    let st = wait_exit(&mut holder, Duration::from_secs(10));
    assert_eq!(st.code(), Some(143));
    assert!(!running(cmd) && !running(gc), "SIGKILL did not follow");
    assert_eq!(n.holder("L"), "");
}

#[test]
fn a_lost_lease_stops_the_command_and_its_grandchild() {
    let _s = serial();
    let mut n = Node::start("leaselost");
    let mut holder = n
        .cli(&["lock", "L", "--ttl-ms", "1500"])
        .args(["--", "sh", "-c", WITH_GRANDCHILD])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
    n.kill9(); // the connection is lost and no node answers again
    let st = wait_exit(&mut holder, Duration::from_secs(15));
    let err = stderr_of(&mut holder);
    assert_eq!(st.code(), Some(3), "stderr: {err}");
    assert!(err.contains("no longer safe"), "stderr: {err}");
    assert!(!running(cmd), "command still runs after the lease was lost");
    assert!(
        !running(gc),
        "grandchild still runs after the lease was lost"
    );
}

/// A command that ignores SIGTERM and stops its own supervisor (the supervisor is its
/// parent) cannot outlive the lease: when the lease is lost, `lock` SIGKILLs the group
/// itself at the end of the grace, as the stopped supervisor would have, not a second
/// later. The lease became unsafe at most ttl − margin after the node died; the command's
/// last write must come before ttl after it, when the cluster could have expired the
/// session (the grace, 500 ms here, and the 20 ms look at the lease fit the margin).
#[test]
fn a_stopped_supervisor_does_not_carry_the_command_past_the_lease() {
    let _s = serial();
    let mut n = Node::start("stuck");
    let mut holder = n
        .cli(&["lock", "L", "--ttl-ms", "5000"])
        .args([
            "--",
            "sh",
            "-c",
            "trap '' TERM; echo $$ > cmd; kill -STOP $PPID; \
             while :; do date +%s%N >> ticks; sleep 0.02; done",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cmd = read_pid(&n.path("cmd"));
    // The command has stopped its supervisor once it writes.
    let ticks = n.path("ticks");
    wait_until("the command's first write", Duration::from_secs(20), || {
        ticks.exists()
    });
    let killed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    n.kill9(); // no keep-alive is acknowledged again
    let st = wait_exit(&mut holder, Duration::from_secs(20));
    let err = stderr_of(&mut holder);
    assert_eq!(st.code(), Some(3), "stderr: {err}");
    assert!(!running(cmd), "the command still runs");
    let last = std::fs::read_to_string(n.path("ticks"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .max()
        .expect("the command wrote");
    let after_ms = last.saturating_sub(killed_at) / 1_000_000;
    assert!(
        after_ms < 5_000,
        "the command wrote {after_ms} ms after the last keep-alive could be acknowledged: \
         past the ttl, when the session could have expired"
    );
}

/// `lock` stopped (Ctrl-Z, SIGSTOP, a debugger) sends no keep-alive, so its lease runs out
/// while it cannot act. Its supervisor holds the lease's deadline and stops the command
/// (and its grandchild) then, by itself: the command's last write comes before the next
/// holder's grant, which the session's expiry makes. Resumed, `lock` says the lease was
/// lost (exit 3).
#[test]
fn a_stopped_cli_still_stops_its_command_when_the_lease_runs_out() {
    let _s = serial();
    let n = Node::start("stopped");
    // The command writes the time (ns) every 20 ms; so does the next holder's, once.
    let mut holder = n
        .cli(&["lock", "L", "--ttl-ms", "1500"])
        .args([
            "--",
            "sh",
            "-c",
            "sleep 60 & echo $! > gc; echo $$ > cmd; while :; do date +%s%N >> ticks; sleep 0.02; done",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
    signal(holder.id(), "-STOP");
    let next = n
        .cli(&["lock", "L", "--wait-ms", "20000", "--ttl-ms", LONG_TTL])
        .args(["--", "sh", "-c", "date +%s%N > granted"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(next.success(), "the next holder: {next:?}");
    let granted = read_number(&n.path("granted"));
    // Ten of the command's periods: a command still running has written after the grant.
    std::thread::sleep(Duration::from_millis(200));
    let last = std::fs::read_to_string(n.path("ticks"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .max()
        .expect("the command wrote");
    assert!(
        last < granted,
        "the command wrote at {last} ns, after the next holder's grant at {granted} ns"
    );
    assert!(
        !running(cmd) && !running(gc),
        "the command's group still runs"
    );
    signal(holder.id(), "-CONT");
    let st = wait_exit(&mut holder, Duration::from_secs(15));
    let err = stderr_of(&mut holder);
    assert_eq!(st.code(), Some(3), "stderr: {err}");
    assert!(err.contains("no longer safe"), "stderr: {err}");
}

#[test]
fn killing_the_cli_stops_the_command_and_its_grandchild() {
    let _s = serial();
    let n = Node::start("kill9");
    let mut holder = n.lock("L", WITH_GRANDCHILD);
    let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
    signal(holder.id(), "-KILL");
    let _ = holder.wait();
    wait_until(
        "the command and its grandchild stopped after kill -9 of the CLI",
        PROMPT,
        || !running(cmd) && !running(gc),
    );
}

/// The parent of `pid`: for the command `lock` runs, its supervisor.
fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses: state, then ppid.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name.split(' ').nth(1).unwrap().parse().unwrap()
}

/// A supervisor killed by a signal (the OOM killer, say) stops nothing itself: `lock` kills
/// its process group before it closes the session, so the command and its grandchild do
/// not run on after the lock could be granted again.
#[test]
fn a_killed_supervisor_leaves_no_command_running() {
    let _s = serial();
    let n = Node::start("supkill");
    let mut holder = n.lock("L", WITH_GRANDCHILD);
    let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
    let supervisor = parent_of(cmd);
    assert_ne!(
        supervisor,
        holder.id(),
        "the command runs under the supervisor"
    );
    signal(supervisor, "-KILL");
    wait_exit(&mut holder, Duration::from_secs(10));
    assert!(
        !running(cmd),
        "the command still runs after its supervisor was killed"
    );
    assert!(
        !running(gc),
        "the grandchild still runs after its supervisor was killed"
    );
    assert_eq!(n.holder("L"), "", "the session was closed");
}

/// A parent that ignores SIGCHLD (some daemons and process managers do) passes that on
/// through exec, so the kernel reaped `lock`'s supervisor unseen: `lock` exited 1 instead
/// of with the command's status, and skipped stopping the command's group when its
/// supervisor was killed (the command ran on after the lock was passed on).
#[test]
fn a_parent_that_ignores_sigchld_changes_nothing() {
    let _s = serial();
    let n = Node::start("sigchld");
    let ignoring = |script: &str| {
        Command::new("perl")
            .args([
                "-e",
                "$SIG{CHLD} = 'IGNORE'; exec @ARGV or die \"exec: $!\"",
                "--",
            ])
            .args([
                CLI,
                "lock",
                "L",
                "--ttl-ms",
                LONG_TTL,
                "--cluster",
                &n.client,
            ])
            .args(["--", "sh", "-c", script])
            .env_remove("FENCELOCK_CLUSTER")
            .env("FENCELOCK_INSECURE_PLAINTEXT", "true")
            .current_dir(&n.dir)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start perl")
    };
    let mut c = ignoring("exit 7");
    let st = wait_exit(&mut c, Duration::from_secs(20));
    assert_eq!(st.code(), Some(7), "stderr: {}", stderr_of(&mut c));
    assert_eq!(n.holder("L"), "", "the session was closed");

    let mut holder = ignoring(WITH_GRANDCHILD);
    let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
    signal(parent_of(cmd), "-KILL");
    wait_exit(&mut holder, Duration::from_secs(10));
    assert!(
        !running(cmd),
        "the command runs on after its supervisor was killed"
    );
    assert!(
        !running(gc),
        "the grandchild runs on after its supervisor was killed"
    );
    assert_eq!(n.holder("L"), "", "the session was closed");
}

/// A supervisor killed during the grace (SIGTERM sent, SIGKILL not yet) stops nothing:
/// `lock` kills the group itself at once, so a command that ignores SIGTERM does not run on
/// until the grace ends — or forever.
#[test]
fn a_supervisor_killed_during_the_grace_still_leaves_nothing_running() {
    let _s = serial();
    let n = Node::start("supgrace");
    let mut holder = n
        .cli(&["lock", "L", "--ttl-ms", LONG_TTL, "--kill-after-ms", "8000"])
        .args(["--", "sh", "-c"])
        .arg(format!("trap '' TERM; {WITH_GRANDCHILD}"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
    let supervisor = parent_of(cmd);
    signal(holder.id(), "-TERM"); // lock stops the group: SIGTERM, ignored by the command
    std::thread::sleep(Duration::from_millis(300));
    assert!(running(cmd), "the command ignores SIGTERM");
    signal(supervisor, "-KILL");
    let t0 = Instant::now();
    wait_until(
        "the command and its grandchild killed once the supervisor was",
        PROMPT,
        || !running(cmd) && !running(gc),
    );
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "not left to the grace"
    );
    wait_exit(&mut holder, Duration::from_secs(10));
    assert_eq!(n.holder("L"), "");
}

/// An administrator's `force-close` of a `lock`'s session ends the lease at once, not at
/// the session's ttl: `lock` stops its command and exits 3, and the lock is free. A second
/// `force-close` of the same session fails (exit 1), saying the session is not open.
#[test]
fn force_close_ends_a_lock_at_once() {
    let _s = serial();
    let n = Node::start("forceclose");
    let mut holder = n
        .cli(&["lock", "L", "--ttl-ms", LONG_TTL])
        .args(["--", "sh", "-c", WITH_GRANDCHILD])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
    let session = n.holder("L").split_whitespace().next().unwrap().to_string();
    let t0 = Instant::now();
    let st = n.cli(&["force-close", &session]).output().unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&st.stdout),
        format!("closed session {session}\n")
    );
    assert_eq!(n.holder("L"), "", "released");
    let st = wait_exit(&mut holder, Duration::from_secs(10));
    let err = stderr_of(&mut holder);
    assert_eq!(st.code(), Some(3), "{err}");
    // Which the CLI says first depends on which of two pushes its tasks read first: the
    // hold's end (the administrator's close) or the session's (the lease no longer safe).
    assert!(
        err.contains("closed by an administrator") || err.contains("no longer safe"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "left to the ttl");
    assert!(!running(cmd) && !running(gc), "the command was stopped");
    let again = n.cli(&["force-close", &session]).output().unwrap();
    assert_eq!(again.status.code(), Some(1));
    let msg = String::from_utf8_lossy(&again.stderr);
    assert!(
        msg.contains("unknown_session") || msg.contains("unknown session"),
        "{msg}"
    );
}

/// `sessions` prints each open session with its owner (`anyone` on a cluster without
/// tokens), ttl, deadline, holds, waits and label; `--owner` lists only that owner's.
/// `force-close --owner` closes every session the owner opened, which ends a `lock` at
/// once. An owner that names no principal, or a `force-close` with neither a session nor
/// an owner, is a usage error (64) before anything is asked.
#[test]
fn sessions_lists_each_owner_and_force_close_owner_closes_them_all() {
    let _s = serial();
    let n = Node::start("sessions");
    let mut holder = n
        .cli(&["lock", "L", "--ttl-ms", LONG_TTL, "--label", "job-7"])
        .args(["--", "sh", "-c", WITH_GRANDCHILD])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
    let session = n.holder("L").split_whitespace().next().unwrap().to_string();
    let listed = |args: &[&str]| {
        let out = n.cli(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let text = listed(&["sessions"]);
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert_eq!(fields.len(), 8, "{text}");
    assert_eq!(
        fields[..3],
        [session.as_str(), "anyone", LONG_TTL],
        "{text}"
    );
    assert!(fields[3].parse::<u64>().is_ok_and(|t| t > 0), "{text}");
    assert_eq!(fields[4..], ["1", "0", "0", "job-7"], "{text}");
    assert_eq!(listed(&["sessions", "--owner", "anyone"]), text);
    let nobody = format!("sha256:{}", "0".repeat(64));
    assert_eq!(listed(&["sessions", "--owner", &nobody]), "");
    for args in [
        &["sessions", "--owner", "root"][..],
        &["force-close", "--owner", "sha256:00"],
        &["force-close"],
        &["force-close", &session, "--owner", "anyone"],
    ] {
        let out = n.cli(args).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
    }
    let out = n.cli(&["sessions", "--owner", "root"]).output().unwrap();
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("64 hex digits"), "{msg}");
    assert_eq!(
        n.holder("L").split_whitespace().next(),
        Some(session.as_str())
    );
    let t0 = Instant::now();
    assert_eq!(
        listed(&["force-close", "--owner", "anyone"]),
        format!("closed session {session}\nclosed 1 session opened by anyone\n")
    );
    assert_eq!(n.holder("L"), "", "released");
    let st = wait_exit(&mut holder, Duration::from_secs(10));
    let err = stderr_of(&mut holder);
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10), "left to the ttl");
    assert!(!running(cmd) && !running(gc), "the command was stopped");
    assert_eq!(listed(&["sessions"]), "");
    assert_eq!(
        listed(&["force-close", "--owner", "anyone"]),
        "closed 0 sessions opened by anyone\n"
    );
}

/// An administrator's release whose push never reaches the holder (lost on the way, as
/// with a dropped connection or a leader that died before sending it) still ends the
/// lease: `lock` reads its hold of the lock every ttl/4, finds it gone, stops the
/// command and exits 3; `elect` stops leading and exits 3. (The CLI talks to the node through a proxy that drops the node's
/// frames to it while the release is applied: the push is lost whole, and the
/// connection stays in step.)
#[test]
fn a_release_whose_push_was_lost_is_found_by_reading_the_hold() {
    let _s = serial();
    let n = Node::start("lostpush");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // Link (2, 1) is a proxy in front of node 1's client port ("node 2" is a stand-in).
    let targets =
        std::collections::HashMap::from([(1, n.client.clone()), (2, "127.0.0.1:1".to_string())]);
    let proxies = rt.block_on(procs::proxy::Proxies::start(&targets));
    let via = format!("127.0.0.1:{}", proxies.ports[&(2, 1)]);
    let mut holder = Command::new(CLI)
        .env_remove("FENCELOCK_CLUSTER")
        .env("FENCELOCK_INSECURE_PLAINTEXT", "true")
        .current_dir(&n.dir)
        .args(["lock", "L", "--ttl-ms", "4000", "--cluster", &via])
        .args(["--", "sh", "-c", WITH_GRANDCHILD])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (gc, cmd) = (read_pid(&n.path("gc")), read_pid(&n.path("cmd")));
    let held = n.holder("L");
    let session = held.split_whitespace().next().unwrap().to_string();
    // From here the node's frames to the CLI are lost: the release's push among them.
    proxies.drop_messages(1, 2);
    let st = n.cli(&["force-release", &session, "L"]).output().unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(n.holder("L"), "", "released");
    std::thread::sleep(Duration::from_millis(300));
    proxies.heal();
    let st = wait_exit(&mut holder, Duration::from_secs(10));
    let err = stderr_of(&mut holder);
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("no longer held by this session"), "{err}");
    assert!(
        !err.contains("released by an administrator"),
        "the push was lost: {err}"
    );
    assert!(!running(cmd) && !running(gc), "the command was stopped");

    // `elect` the same way: it stops leading.
    let mut leader = Command::new(CLI)
        .env_remove("FENCELOCK_CLUSTER")
        .env("FENCELOCK_INSECURE_PLAINTEXT", "true")
        .current_dir(&n.dir)
        .args(["elect", "E", "--ttl-ms", "4000", "--cluster", &via])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("elected", Duration::from_secs(10), || {
        !n.holder("E").is_empty()
    });
    let session = n.holder("E").split_whitespace().next().unwrap().to_string();
    proxies.drop_messages(1, 2);
    let st = n.cli(&["force-release", &session, "E"]).output().unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    std::thread::sleep(Duration::from_millis(300));
    proxies.heal();
    let st = wait_exit(&mut leader, Duration::from_secs(10));
    let err = stderr_of(&mut leader);
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("no longer this session's"), "{err}");
    drop(rt);
}

/// `fencelock elect E` with `args`, once it has printed its `epoch` line (its stderr
/// piped, for the caller to read), and its stdout, kept open: a leader whose stdout's
/// reader is gone resigns.
fn elected(
    n: &Node,
    args: &[&str],
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut elect = n
        .cli(&[&["elect", "E"][..], args].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fencelock elect");
    let mut out = std::io::BufReader::new(elect.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.starts_with("epoch "), "{line:?}");
    (elect, out)
}

/// An `elect` whose lease runs out with no node answering exits (3) within the lease's
/// margin of losing it, not after its attempt to close the session has spent its whole
/// retry time: nothing on stdout says it lost, so its exit is the word a reader has, and
/// another can be elected a margin after the lease stopped being safe. With a 5 s ttl
/// (keep-alives every 1.25 s, the lease safe until 4 s after the last acknowledged one, a
/// margin of 1 s) and `--timeout-ms 5000`, the node killed: the lease runs out 2.75 to 4 s
/// after the kill, and `elect` is gone by 4.6 s (checked with room: 5.5 s); it was gone
/// only once its close had retried for 5 s more, 7.75 s at the earliest.
#[test]
fn an_elect_that_lost_its_lease_exits_within_the_margin() {
    let _s = serial();
    let mut n = Node::start("elect-lost");
    let (mut elect, _out) = elected(&n, &["--ttl-ms", "5000", "--timeout-ms", "5000"]);
    n.kill9();
    let killed = Instant::now();
    let status = loop {
        if let Some(st) = elect.try_wait().unwrap() {
            break st;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "elect still running 30 s after its node was killed"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = killed.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut elect.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(err.contains("leadership lease lost"), "{err}");
    assert!(
        took < Duration::from_millis(5_500),
        "exited {took:?} after the kill: {err}"
    );
}

/// `elect` asked to resign exits 0 only when the cluster confirmed the close: with its
/// node gone (the lease still safe, 30 s long), the close cannot be confirmed within
/// `--timeout-ms`, and it exits 1 saying so — the leadership is not free until the
/// session expires.
#[test]
fn an_elect_whose_resignation_is_not_confirmed_exits_1() {
    let _s = serial();
    let mut n = Node::start("elect-unconfirmed");
    let (mut elect, _out) = elected(&n, &["--ttl-ms", "30000", "--timeout-ms", "1000"]);
    n.kill9();
    signal(elect.id(), "-TERM");
    let status = wait_exit(&mut elect, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut elect.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("resignation from E not confirmed"), "{err}");
}

#[test]
fn a_lost_connection_is_reconnected_within_the_lease() {
    let _s = serial();
    let mut n = Node::start("reconnect");
    let mut holder = n
        .cli(&["lock", "L", "--ttl-ms", "10000"])
        .args(["--", "sh", "-c", "echo $$ > cmd; sleep 4; echo done > out"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    read_pid(&n.path("cmd"));
    let before = n.holder("L");
    assert!(!before.is_empty());
    n.kill9();
    std::thread::sleep(Duration::from_millis(300));
    n.boot(); // same data: the session and its hold survive
    assert_eq!(n.holder("L"), before, "the hold changed across the restart");
    let st = wait_exit(&mut holder, Duration::from_secs(20));
    assert!(st.success(), "{st:?}: {}", stderr_of(&mut holder));
    assert_eq!(
        std::fs::read_to_string(n.path("out")).unwrap_or_default(),
        "done\n"
    );
    assert_eq!(n.holder("L"), "");
}

#[test]
fn no_cluster_fails_fast_and_clearly() {
    let _s = serial();
    let dir = temp_dir("nocluster");
    let nobody = format!(
        "127.0.0.1:{},127.0.0.1:{}",
        procs::free_port(),
        procs::free_port()
    );
    let run = |args: &[&str]| {
        let t0 = Instant::now();
        let out = Command::new(CLI)
            .env_remove("FENCELOCK_CLUSTER")
            .env("FENCELOCK_INSECURE_PLAINTEXT", "true")
            .current_dir(&dir)
            .args(args)
            .output()
            .unwrap();
        (out, t0.elapsed())
    };
    // Default deadline: --timeout-ms 3000 (plus one connect timeout at most).
    let (out, took) = run(&["--cluster", &nobody, "holder", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("no node of {nobody} answered within 3000 ms")),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let (out, took) = run(&[
        "lock",
        "x",
        "--cluster",
        &nobody,
        "--timeout-ms",
        "500",
        "--",
        "touch",
        "ran",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.join("ran").exists(), "the command ran without a lock");
    assert!(took < Duration::from_secs(3), "took {took:?}");

    // A node that accepts connections but never answers: the overall deadline ends it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let (out, took) = run(&["holder", "x", "--cluster", &addr, "--timeout-ms", "1000"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took < Duration::from_secs(4), "took {took:?}");
    drop(silent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn options_follow_the_subcommand_and_usage_errors_exit_64() {
    let _s = serial();
    let n = Node::start("options");
    let mut c = n
        .cli(&["lock", "L", "--ttl-ms", "4321"])
        .args([
            "--",
            "sh",
            "-c",
            "echo $FENCELOCK_SESSION > sid; exec sleep 60",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sid = read_number(&n.path("sid"));
    let client = fencelock_server::client::Client::new(vec![n.client.clone()]);
    let info = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(client.session_info(sid))
        .unwrap()
        .expect("the session exists");
    assert_eq!(info.ttl, 4321, "--ttl-ms after the subcommand was not used");
    signal(c.id(), "-TERM");
    wait_exit(&mut c, Duration::from_secs(10));

    // Each command is a usage error (exit 64) whose message says each of `says`.
    let usage_error = |cmd: &[&str], says: &[&str]| {
        let st = n.cli(cmd).output().unwrap();
        assert_eq!(st.status.code(), Some(64), "{cmd:?}");
        let err = String::from_utf8_lossy(&st.stderr);
        for s in says {
            assert!(err.contains(s), "{cmd:?}: {err}");
        }
    };
    usage_error(&["lock", "L", "--no-such-option", "--", "true"], &[]);
    // A lock without a command.
    usage_error(&["lock", "L"], &[]);
    // --try and --wait-ms say two different things: refused, not one silently chosen.
    usage_error(&["lock", "L", "--try", "--wait-ms", "5", "--", "true"], &[]);
    assert_eq!(n.holder("L"), "", "nothing was acquired");
    // A kill grace as long as the lease's margin (a fifth of the ttl: 600 ms of 3000) less
    // the 20 ms between two looks at the lease would let the command outlive its lease:
    // refused before anything is asked.
    usage_error(
        &[
            "lock",
            "L",
            "--ttl-ms",
            "3000",
            "--kill-after-ms",
            "580",
            "--",
            "true",
        ],
        &["must be below the margin"],
    );
    assert_eq!(n.holder("L"), "", "nothing was acquired");
    // A ttl too short to keep a session alive is a usage error, said before a session is
    // opened (it used to open one, then close it and exit 1), for every command that
    // opens one.
    for cmd in [
        &["lock", "L", "--ttl-ms", "4", "--", "true"][..],
        &["elect", "E", "--ttl-ms", "4"],
        &["watch", "L", "--ttl-ms", "0"],
        &["observe", "E", "--ttl-ms", "4"],
    ] {
        usage_error(cmd, &["too short to keep a session alive"]);
    }
    // `lock` and `elect` look at the lease every 20 ms: a ttl whose margin (a fifth) is
    // no longer than that is a usage error too, said before anything is opened (the
    // default grace came out as 0 and the command could outlive its lease by a look);
    // 105 ms, a margin of 21, is taken.
    for cmd in [
        &["lock", "L", "--ttl-ms", "104", "--", "true"][..],
        &["elect", "E", "--ttl-ms", "104"],
    ] {
        usage_error(cmd, &["too short to act on a lease", "at least 105"]);
    }
    assert_eq!(n.holder("L"), "", "nothing was acquired");
    let st = n
        .cli(&["lock", "L", "--ttl-ms", "105"])
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    // A label past 64 bytes (here from the environment) is a usage error of the commands
    // that open a session, said before one is opened; a command that opens none does not
    // look at it (`holder` exited 64 with it).
    let long = "l".repeat(65);
    let st = n
        .cli(&["lock", "L"])
        .env("FENCELOCK_LABEL", &long)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        st.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert!(String::from_utf8_lossy(&st.stderr).contains("--label"));
    let st = n
        .cli(&["holder", "L"])
        .env("FENCELOCK_LABEL", &long)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    // Below it, and by default (a tenth of a short ttl), the command runs.
    for grace in [&["--kill-after-ms", "579"][..], &[]] {
        let st = n
            .cli(&["lock", "L", "--ttl-ms", "3000"])
            .args(grace)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{grace:?}: {}",
            String::from_utf8_lossy(&st.stderr)
        );
    }
}

#[test]
fn what_the_command_leaves_running_is_stopped_when_it_exits() {
    let _s = serial();
    let n = Node::start("leftover");
    let mut holder = n.lock("L", "sleep 60 & echo $! > gc");
    let st = wait_exit(&mut holder, Duration::from_secs(20));
    assert!(st.success(), "{st:?}");
    let gc = read_pid(&n.path("gc"));
    assert!(!running(gc), "a background process outlived the lock");
    assert_eq!(n.holder("L"), "");
}

/// Which of `clients` serves a linearizable read (the leader), asked over the wire.
fn leader_of(clients: &[String]) -> Option<usize> {
    use fencelock_server::frame;
    use fencelock_server::protocol::{ClientFrame, Reply, Request, ServerFrame};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        for (i, addr) in clients.iter().enumerate() {
            let Ok(Ok(mut s)) =
                tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr))
                    .await
            else {
                continue;
            };
            let req = ClientFrame {
                id: 1,
                req: Request::Holders { lock: "x".into() },
            };
            if frame::write(&mut s, &req).await.is_err() {
                continue;
            }
            let r = tokio::time::timeout(
                Duration::from_secs(3),
                frame::read::<_, ServerFrame>(&mut s, frame::MAX_CLIENT_FRAME),
            )
            .await;
            if let Ok(Ok(Some(ServerFrame::Reply {
                result: Ok(Reply::Holders(_)),
                ..
            }))) = r
            {
                return Some(i);
            }
        }
        None
    })
}

/// A leader that stops answering (SIGSTOP: its connections stay open, nothing comes back)
/// must not cost a session its lease when a new leader takes over in time: the CLI gives
/// up on a reply after ttl/4 and retries elsewhere. With a fixed 5 s reply wait, a 6 s
/// session's keep-alive (sent every 1.5 s, safe for 4.8 s after its last acknowledgement)
/// would wait on the stalled node past the lease, and the command would be stopped.
#[test]
fn a_stalled_leader_does_not_cost_the_lease() {
    let _s = serial();
    let dir = temp_dir("stall");
    let cluster = procs::Cluster::start(&dir);
    let clients = &cluster.clients;
    let mut leader = None;
    wait_until("a leader", Duration::from_secs(30), || {
        leader = leader_of(clients);
        leader.is_some()
    });
    let leader = leader.unwrap_or_default();
    // The leader first: the CLI's first connection goes to the second address, is
    // redirected to the leader, and after the stall its retry goes on to the third — a
    // follower — rather than back to the stalled node.
    let mut order = vec![clients[leader].clone()];
    order.extend((0..3).filter(|i| *i != leader).map(|i| clients[i].clone()));
    let mut holder = Command::new(CLI)
        .env_remove("FENCELOCK_CLUSTER")
        .env("FENCELOCK_INSECURE_PLAINTEXT", "true")
        .current_dir(&dir)
        .args([
            "lock",
            "L",
            "--ttl-ms",
            "6000",
            "--cluster",
            &order.join(","),
        ])
        .args(["--", "sh", "-c", "echo $$ > cmd; sleep 7; echo done > out"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    read_pid(&dir.join("cmd"));
    let stalled = cluster.procs[&(leader as u64 + 1)].id();
    signal(stalled, "-STOP");
    std::thread::sleep(Duration::from_secs(6));
    signal(stalled, "-CONT");
    let st = wait_exit(&mut holder, Duration::from_secs(20));
    assert!(st.success(), "{st:?}: {}", stderr_of(&mut holder));
    assert_eq!(
        std::fs::read_to_string(dir.join("out")).unwrap_or_default(),
        "done\n"
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `status` counts what is in use: a held lock is one session, one lock and one claim of
/// the tables' rows, in both forms; once the node is gone, status exits 1.
#[test]
fn status_counts_a_held_lock_and_exits_1_without_the_cluster() {
    let _s = serial();
    let mut n = Node::start("status");
    let mut holder = n.lock("S", "echo $$ > cmd; exec sleep 60");
    read_pid(&n.path("cmd"));
    let out = n.cli(&["status", "--json"]).output().unwrap();
    let json = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{json}");
    for used in [
        "\"sessions\":{\"used\":1,\"capacity\":16384}",
        "\"locks\":{\"used\":1,\"capacity\":16384}",
        "\"claims\":{\"used\":1,\"capacity\":32768}",
        "\"role\":\"leader\"",
    ] {
        assert!(json.contains(used), "no {used} in {json}");
    }
    let out = n.cli(&["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with(&n.client))
        .unwrap_or_else(|| panic!("no row for the node: {text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cols[..3],
        [n.client.as_str(), "1", "leader"],
        "endpoint, id, role: {row}"
    );
    assert_eq!(cols[7..10], ["yes", "1/16384", "1/16384"], "{row}");
    signal(holder.id(), "-TERM");
    wait_exit(&mut holder, Duration::from_secs(10));
    n.kill9();
    let out = n.cli(&["status"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The write end of a pipe whose reader is gone.
fn reader_gone() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    writer
}

/// An export is data, not a glance: a reader that goes away before its end gets a
/// recording cut short, so `export` fails and says so instead of reporting the lines
/// exported (`holder`'s reader may stop once it has seen enough; the test below).
#[test]
fn an_export_whose_reader_is_gone_fails_saying_so() {
    let _s = serial();
    let n = Node::start("exportgone");
    let mut holder = n.lock("P", "echo $$ > cmd; exec sleep 60");
    read_pid(&n.path("cmd"));
    let out = n.cli(&["export"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recording = String::from_utf8(out.stdout).unwrap();
    assert!(recording.lines().count() > 1, "{recording}");
    let out = n.cli(&["export"]).stdout(reader_gone()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("went away before the end"), "{err}");
    assert!(!err.contains("exported"), "{err}");
    signal(holder.id(), "-TERM");
    wait_exit(&mut holder, Duration::from_secs(10));
}

/// The one-shot commands print through a pipe whose reader is gone (`fencelock holder L |
/// head -1` with several holders, `… | grep -q`) without a panic: the reader has what it
/// wanted, so each exits 0 as it would have (`println!` panicked, exit 101). Output that
/// cannot be written for any other reason (a full disk) fails the command with exit 1,
/// saying so.
#[test]
fn a_read_whose_reader_is_gone_exits_as_it_would_have_and_a_full_stdout_fails() {
    let _s = serial();
    let n = Node::start("closedstdout");
    let mut holder = n.lock("P", "echo $$ > cmd; exec sleep 60");
    read_pid(&n.path("cmd"));
    for args in [
        &["holder", "P"][..],
        &["queue", "P"],
        &["members"],
        &["status"],
        &["status", "--json"],
    ] {
        let out = n.cli(args).stdout(reader_gone()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "fencelock {args:?}: {err}");
        assert!(!err.contains("panicked"), "fencelock {args:?}: {err}");
    }
    let full = std::fs::File::create("/dev/full").unwrap();
    let out = n.cli(&["holder", "P"]).stdout(full).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write to stdout"), "{err}");
    signal(holder.id(), "-TERM");
    wait_exit(&mut holder, Duration::from_secs(10));
}
