//! `fencelock status` against three real `fencelock-node` processes on loopback: it finds
//! every member from one address, shows the leader, each node's indexes and health and
//! the tables' use, and exits 0 while a leader has a quorum — 1 once it has none.

mod procs;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use procs::Cluster;

const CLI: &str = env!("CARGO_BIN_EXE_fencelock");

fn temp_dir(name: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let d = std::env::temp_dir().join(format!("fencelock-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// `fencelock status ARGS --cluster CLUSTER` (plain TCP).
fn status(cluster: &str, args: &[&str]) -> Output {
    Command::new(CLI)
        .env_remove("FENCELOCK_CLUSTER")
        .env("FENCELOCK_INSECURE_PLAINTEXT", "true")
        .arg("status")
        .args(args)
        .args(["--cluster", cluster])
        .stdin(Stdio::null())
        .output()
        .expect("run fencelock status")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `status --json` until `ok` holds of its output (bounded: 60 s); returns it.
fn status_until(cluster: &str, what: &str, ok: impl Fn(&Output, &str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let o = status(cluster, &["--json"]);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        if ok(&o, &out) {
            return out;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never {what}: {}",
            text(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn status_shows_every_member_and_fails_without_a_quorum() {
    let dir = temp_dir("status");
    let mut c = Cluster::start(&dir);
    // Only node 1's address is given: the others are found through the membership.
    let one = c.clients[0].clone();
    let json = status_until(&one, "a ready cluster of three", |o, out| {
        o.status.success() && out.matches("\"ready\":true").count() == 3
    });
    assert!(
        json.starts_with("{\"quorum\":true,\"quorum_error\":null,\"leader\":"),
        "{json}"
    );
    for addr in &c.clients {
        assert!(
            json.contains(&format!("\"endpoint\":\"{addr}\",\"reachable\":true")),
            "{addr} missing: {json}"
        );
    }
    assert_eq!(json.matches("\"role\":\"leader\"").count(), 1, "{json}");
    assert_eq!(json.matches("\"role\":\"follower\"").count(), 2, "{json}");
    assert_eq!(json.matches("\"raft\":").count(), 3, "three voters: {json}");
    assert!(
        json.contains("\"sessions\":{\"used\":0,\"capacity\":16384}"),
        "{json}"
    );
    // The leader's id, as every node reports it.
    let leader: u64 = json
        .split("\"leader\":")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.parse().ok())
        .expect("a leader id");
    assert_eq!(
        json.matches(&format!("\"leader\":{leader},")).count(),
        4,
        "the cluster's and each node's leader: {json}"
    );
    // The human form: the cluster line, the members, a row per node.
    let o = status(&one, &[]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        out.starts_with(&format!("cluster: leader {leader}, term ")),
        "{out}"
    );
    assert!(out.contains("quorum confirmed"), "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("voter ")).count(), 3);
    for addr in &c.clients {
        let row = out
            .lines()
            .find(|l| l.starts_with(addr.as_str()))
            .unwrap_or_else(|| panic!("no row for {addr}: {out}"));
        assert!(row.contains(" yes "), "{row}");
    }

    // A follower down: still a quorum (exit 0), the follower shown unreachable.
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    c.kill9(follower);
    let gone = c.clients[follower as usize - 1].clone();
    let all = c.clients.join(",");
    let json = status_until(&all, "the follower shown down", |o, out| {
        o.status.success() && out.contains(&format!("\"endpoint\":\"{gone}\",\"reachable\":false"))
    });
    assert!(json.starts_with("{\"quorum\":true"), "{json}");

    // Two down: no quorum; status says so and exits 1.
    let other = (1..=3u64)
        .find(|id| *id != leader && *id != follower)
        .unwrap();
    c.kill9(other);
    let o = status(&all, &[]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(out.contains("quorum NOT confirmed"), "{out}");
    assert!(
        out.contains(&format!("{gone} ")) && out.contains("unreachable"),
        "{out}"
    );
    let o = status(&all, &["--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let json = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        json.starts_with("{\"quorum\":false,\"quorum_error\":\""),
        "{json}"
    );

    // Nothing reachable at all: exit 1.
    c.kill9(leader);
    let o = status(&all, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}
