//! In-process three-node cluster tests over a network with faults (isolate, partition,
//! heal, delay), on real openraft with the durable log on disk.

mod common;

use std::time::{Duration, Instant};

use common::{acquire, granted, keep_alive, open, release, session_of, Cluster};
use fencelock::{Output, Reply as CoreReply, SessionId, Wait};
use fencelock_server::auth::{OpenKey, Principal};
use fencelock_server::protocol::{Reply, Request};
use fencelock_server::state_machine::{PushSink, PUSH_BACKLOG};
use fencelock_server::types::{Op, OpError};

const TTL: u64 = 1500;

/// The log bounds of the two tests below: a snapshot once 200 of weight since the last
/// one, 80 kept after it, and the count rule far off (20 000 entries).
const WEIGHT_OPS: u64 = 200;
const WEIGHT_KEEP: u64 = 80;

/// A cluster with the log bounds above.
async fn weighed_cluster(name: &str) -> Cluster {
    Cluster::start_configured(name, 300, 2000, |config| {
        config.snapshot_logs = 20_000;
        config.snapshot_ops = WEIGHT_OPS;
        config.snapshot_keep_ops = WEIGHT_KEEP;
    })
    .await
}

/// The log is bounded by its weight (one per entry plus one per op) as well as by its
/// count of entries: with the count rule at 20 000 entries (keeping 5 000 after a
/// snapshot), 400 entries of one request each (two ops with the entry's deadline op:
/// weight 3, 1 200 in all) still get every node a snapshot and a purge down to the
/// weight kept, so no node holds more than about `snapshot_ops + snapshot_keep_ops` of
/// weight. A flood of full entries (257 ops each, 160 bytes an op) would otherwise hold
/// ~1 GB before the count rule acts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_is_snapshotted_and_purged_by_its_weight_too() {
    let (ops, keep) = (WEIGHT_OPS, WEIGHT_KEEP);
    let c = weighed_cluster("log-weight").await;
    let s = session_of(&c.propose(open(60_000)).await);
    for _ in 0..400 {
        c.propose(keep_alive(s)).await;
    }
    // Each entry here weighs 3; a few more than the bound may arrive while a snapshot is
    // built.
    let most = (ops + keep) / 3 + 20;
    let start = Instant::now();
    loop {
        let held: Vec<(u64, Option<u64>, Option<u64>, u64)> = c
            .nodes
            .values()
            .map(|n| {
                let m = n.raft.metrics().borrow().clone();
                let purged = m.purged.map(|p| p.index);
                let last = m.last_log_index.unwrap_or(0);
                (
                    n.id,
                    m.snapshot.map(|s| s.index),
                    purged,
                    last - purged.unwrap_or(0),
                )
            })
            .collect();
        if held
            .iter()
            .all(|&(_, snap, purged, n)| snap.is_some() && purged.is_some() && n <= most)
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "(node, snapshot, purged through, entries held) {held:?}: not bounded by weight"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.shutdown().await;
}

/// A leader purges by weight no further than its slowest follower has (that follower
/// would then need the whole snapshot), while what the snapshot covers weighs at most
/// four times `snapshot_ops`: a follower cut off for 100 entries (weight 300, under the
/// 800 of that cap) finds its next entries still in the leader's log, though the weight
/// kept is 80.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_keeps_what_its_slowest_follower_lacks_under_the_cap() {
    let c = weighed_cluster("log-weight-lag").await;
    let s = session_of(&c.propose(open(60_000)).await);
    let leader = c.leader().await;
    let lagging = *c.nodes.keys().find(|&&id| id != leader).unwrap();
    let has = c.nodes[&lagging]
        .raft
        .metrics()
        .borrow()
        .last_log_index
        .unwrap_or(0);
    c.net.isolate(lagging);
    let others: Vec<_> = c
        .nodes
        .keys()
        .copied()
        .filter(|&id| id != lagging)
        .collect();
    for _ in 0..100 {
        c.propose_among(&others, keep_alive(s)).await;
    }
    // The leader has built a snapshot by weight (300 > 200) and purged nothing the
    // lagging follower lacks.
    let start = Instant::now();
    loop {
        let m = c.nodes[&leader].raft.metrics().borrow().clone();
        if m.snapshot.is_some() {
            let purged = m.purged.map(|p| p.index);
            assert!(
                purged.is_none_or(|p| p <= has),
                "purged through {purged:?} while node {lagging} has only {has}"
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no snapshot by weight"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A few rounds of the budget later, still not.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let purged = c.nodes[&leader]
        .raft
        .metrics()
        .borrow()
        .purged
        .map(|p| p.index);
    assert!(
        purged.is_none_or(|p| p <= has),
        "purged through {purged:?}, node {lagging} has {has}"
    );
    c.net.heal();
    c.converged().await;
    c.shutdown().await;
}

/// The leader dies while A holds a lock and B, C wait. Keep-alives stop at the kill and
/// resume only after more than a ttl of wall time has passed since the last acknowledged
/// one: logical time stands still from the old leader's last entry until the new leader's
/// grace period is over, so no session expires. Then A's release grants B (pushed to B's
/// attached connection on the new leader), B's release grants C: FIFO across failover,
/// tokens increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_with_sessions_and_waiters() {
    let mut c = Cluster::start("failover", 800).await;
    let a = session_of(&c.propose(open(TTL)).await);
    let b = session_of(&c.propose(open(TTL)).await);
    let cc = session_of(&c.propose(open(TTL)).await);
    let r = c.propose(acquire(a, "x", Wait::Forever, Some(1))).await;
    let t1 = granted(&r).expect("A granted");
    let r = c.propose(acquire(b, "x", Wait::Forever, Some(1))).await;
    assert!(matches!(r.reply, Ok(CoreReply::Queued { position: 1, .. })));
    let r = c.propose(acquire(cc, "x", Wait::Forever, Some(1))).await;
    assert!(matches!(r.reply, Ok(CoreReply::Queued { position: 2, .. })));

    // Keep everyone alive, then kill the leader right after.
    for s in [a, b, cc] {
        c.propose(keep_alive(s)).await;
    }
    let last_ack = Instant::now();
    let old = c.leader().await;
    c.kill(old).await;
    let new = c.leader().await;
    assert_ne!(new, old);

    // Stay silent until more than a ttl has passed since the last acknowledged keep-alive
    // (`sleep_until` never returns before its deadline).
    let silent_until = last_ack + Duration::from_millis(TTL + 200);
    tokio::time::sleep_until(silent_until.into()).await;
    for s in [a, b, cc] {
        let r = c.propose(keep_alive(s)).await;
        assert!(
            matches!(r.reply, Ok(CoreReply::KeptAlive { .. })),
            "session {s} lost in failover: {:?}",
            r.reply
        );
    }

    // B and C re-attach on the new leader (as a client does after reconnecting).
    let node = c.nodes[&new].clone();
    let (tx_b, mut rx_b, _) = PushSink::new(PUSH_BACKLOG);
    let (tx_c, mut rx_c, _) = PushSink::new(PUSH_BACKLOG);
    let conn_b = node.next_conn_id();
    let conn_c = node.next_conn_id();
    assert_eq!(
        node.handle_request(
            Request::Attach {
                session: b.0,
                secret: c.secret(b),
            },
            conn_b,
            &tx_b
        )
        .await
        .unwrap(),
        Reply::Attached
    );
    node.handle_request(
        Request::Attach {
            session: cc.0,
            secret: c.secret(cc),
        },
        conn_c,
        &tx_c,
    )
    .await
    .unwrap();

    let r = c.propose(release(a, "x", Some(2))).await;
    assert_eq!(r.reply, Ok(CoreReply::Released { token: t1 }));
    let pushed = tokio::time::timeout(Duration::from_secs(5), rx_b.recv())
        .await
        .expect("B's grant is pushed")
        .unwrap();
    let t2 = match pushed {
        Output::Granted { session, token, .. } if session == b => token,
        other => panic!("B got {other:?}"),
    };
    assert!(t2 > t1);
    assert!(
        rx_c.try_recv().is_err(),
        "C must not be woken by A's release"
    );
    c.propose(release(b, "x", Some(2))).await;
    let pushed = tokio::time::timeout(Duration::from_secs(5), rx_c.recv())
        .await
        .expect("C's grant is pushed")
        .unwrap();
    let t3 = match pushed {
        Output::Granted { session, token, .. } if session == cc => token,
        other => panic!("C got {other:?}"),
    };
    assert!(t3 > t2);

    // No node ever applied an expiry.
    c.converged().await;
    for id in c.nodes.keys() {
        let j = c.journal(*id);
        assert!(
            !j.iter()
                .any(|(_, o)| matches!(o, Output::SessionExpired { .. })),
            "node {id} expired a session: {j:?}"
        );
    }
    // The old leader comes back from its files and catches up.
    c.boot(old).await;
    c.converged().await;
    let holder = c.nodes[&old].shared.state().svc.holders("x").next();
    assert_eq!(holder.map(|h| h.session), Some(cc));
    c.shutdown().await;
}

/// A leader cut off from the others cannot commit a grant; the majority elects a new
/// leader that can; after healing, all three hold byte-identical state in which only the
/// majority's grant exists, and a retry of the minority's request applies exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_partition_cannot_grant_and_heal_converges() {
    let c = Cluster::start("partition", 300).await;
    c.net.set_delay(2);
    let s = session_of(&c.propose(open(60_000)).await);
    let t = session_of(&c.propose(open(60_000)).await);
    c.converged().await;
    let old = c.leader().await;
    let majority: Vec<u64> = (1..=3).filter(|id| *id != old).collect();
    c.net.isolate(old);

    let r = c.nodes[&old]
        .propose_op(c.op(acquire(s, "m", Wait::None, Some(1))))
        .await;
    assert!(r.is_err(), "an isolated leader committed: {r:?}");

    let new = c.leader_among(&majority).await;
    assert_ne!(new, old);
    let r = c
        .propose_among(&majority, acquire(t, "m", Wait::None, Some(1)))
        .await;
    let tok = granted(&r).expect("majority grants");

    c.net.heal();
    c.converged().await;
    for (id, n) in &c.nodes {
        let h: Vec<_> = n.shared.state().svc.holders("m").collect();
        assert_eq!(h.len(), 1, "node {id}");
        assert_eq!((h[0].session, h[0].token), (t, tok), "node {id}");
    }
    // The client retries its request 1 at the new leader: the minority's attempt was
    // never applied (a replay of it would answer Granted or HoldEnded), so it is
    // evaluated now: Busy.
    let r = c.propose(acquire(s, "m", Wait::None, Some(1))).await;
    assert_eq!(r.reply, Ok(CoreReply::Busy), "{r:?}");
    let again = c.propose(acquire(s, "m", Wait::None, Some(1))).await;
    assert_eq!(again.reply, r.reply, "a repeat replays the recorded answer");
    c.converged().await;
    c.shutdown().await;
}

/// A write acknowledged by the old leader, retried (same request number) at the new one
/// after a crash, is replayed, not applied twice: same token, revision unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_leader_crash_applies_once() {
    let mut c = Cluster::start("retry", 300).await;
    let s = session_of(&c.propose(open(60_000)).await);
    let r = c.propose(acquire(s, "k", Wait::None, Some(1))).await;
    let tok = granted(&r).unwrap();
    let old = c.leader().await;
    c.kill(old).await;
    let r = c.propose(acquire(s, "k", Wait::None, Some(1))).await;
    assert_eq!(granted(&r), Some(tok));
    let l = c.leader().await;
    assert_eq!(c.nodes[&l].shared.state().svc.revision(), tok.0);
    c.shutdown().await;
}

/// Every node killed at once and restarted from its files (snapshot + log): nothing
/// acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_cluster_restart_keeps_acknowledged_state() {
    let mut c = Cluster::start("restart", 300).await;
    let s = session_of(&c.propose(open(60_000)).await);
    let mut last = None;
    for i in 0..80u64 {
        let lock = format!("l{}", i % 5);
        let r = c
            .propose(acquire(s, &lock, Wait::None, Some(2 * i + 1)))
            .await;
        last = granted(&r).or(last);
        c.propose(release(s, &lock, Some(2 * i + 2))).await;
    }
    let before = c.converged().await;
    // More entries than the snapshot threshold (100 in tests): every node restarts from
    // its own snapshot file plus the log after it.
    let start = Instant::now();
    while !(1..=3).all(|id| c.base.join(format!("n{id}/snapshot.bin")).exists()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no snapshot was built"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let applied = c.nodes[&c.leader().await]
        .shared
        .state()
        .last_applied
        .map(|l| l.index);
    for id in 1..=3 {
        c.kill(id).await;
    }
    for id in 1..=3 {
        c.boot(id).await;
    }
    c.leader().await;
    // A restarted node applies at once only what its log knows to be committed (the
    // commit index rides in the next write); the rest once the new leader commits.
    let start = Instant::now();
    while !c
        .nodes
        .values()
        .all(|n| n.shared.state().last_applied.map(|l| l.index) >= applied)
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "restarted nodes did not apply everything"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = c.converged().await;
    assert_eq!(before, after);
    {
        let g = c.nodes[&1].shared.state();
        assert_eq!(g.svc.revision(), last.unwrap().0);
        assert!(g.svc.session(s).is_some());
    }
    c.shutdown().await;
}

/// A follower that misses many entries (more than the snapshot threshold) catches up by
/// snapshot after rejoining.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_follower_catches_up() {
    let c = Cluster::start("lag", 300).await;
    let s = session_of(&c.propose(open(600_000)).await);
    let (_, _, leader, behind) = c.isolate_a_follower().await;
    // The follower catches up by snapshot only once the leader has purged what it lacks.
    c.commit_until_purged_past(&leader, s, behind).await;
    c.net.heal();
    c.converged().await;
    c.shutdown().await;
}

/// Under a lossy, slow network (15 % of requests and of replies dropped, seeded; 3 ms each
/// way) and impatient proposers, clients that retry every ambiguous failure with the same
/// request number get every acquire applied exactly once: the fencing revision equals the
/// number of acquires, and the replicas converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossy_network_retries_apply_exactly_once() {
    let seed: u64 = std::env::var("FENCELOCK_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_f00d);
    eprintln!("lossy network seed: {seed} (FENCELOCK_TEST_SEED to replay)");
    // Proposals give up after 25 ms: many time out although they commit later, so the
    // client's retry (same request number) is often a duplicate the core must replay.
    let c = Cluster::start_with("lossy", 300, 25).await;
    let sessions: Vec<SessionId> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(session_of(&c.propose(open(600_000)).await));
        }
        v
    };
    c.net.set_delay(3);
    c.net.set_drop(150_000, seed);
    const ROUNDS: u64 = 8;
    let mut tasks = Vec::new();
    for (k, s) in sessions.iter().copied().enumerate() {
        let nodes: Vec<_> = c.nodes.values().cloned().collect();
        let secret = c.secret(s);
        tasks.push(tokio::spawn(async move {
            let lock = format!("lossy-{k}");
            let mut ambiguous = 0u32;
            for i in 0..ROUNDS {
                for (req, input) in [
                    (2 * i + 1, acquire(s, &lock, Wait::None, Some(2 * i + 1))),
                    (2 * i + 2, release(s, &lock, Some(2 * i + 2))),
                ] {
                    let start = Instant::now();
                    // Retry the same request number on every node until one commits it.
                    'retry: loop {
                        for n in &nodes {
                            let op = Op::Owned {
                                input: input.clone(),
                                secret,
                            };
                            match n.propose_op(op).await {
                                Ok(r) => {
                                    assert!(r.reply.is_ok(), "request {req}: {:?}", r.reply);
                                    break 'retry;
                                }
                                Err(fencelock_server::protocol::ClientError::Unavailable(_)) => {
                                    ambiguous += 1
                                }
                                Err(_) => {} // NotLeader: try the next node
                            }
                        }
                        assert!(start.elapsed() < Duration::from_secs(30), "stuck at {req}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            ambiguous
        }));
    }
    let mut ambiguous = 0;
    for t in tasks {
        ambiguous += t.await.unwrap();
    }
    c.net.set_drop(0, 1);
    c.net.set_delay(0);
    c.converged().await;
    let l = c.leader().await;
    assert_eq!(
        c.nodes[&l].shared.state().svc.revision(),
        3 * ROUNDS,
        "an acquire was applied twice or lost ({ambiguous} ambiguous attempts)"
    );
    eprintln!("lossy network: {ambiguous} timed-out (ambiguous) attempts retried");
    assert!(
        ambiguous > 0,
        "no ambiguous attempt: the retry path was not exercised"
    );
    c.shutdown().await;
}

/// Concurrent requests share log entries (the proposer batches what arrives during a
/// flush), yet each gets its own result: the granted ones their own tokens, the refused
/// ones (an unknown session) their own error, and a refusal leaves the rest of its batch
/// applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_entries_with_results_of_their_own() {
    let c = Cluster::start("batch", 300).await;
    let s = session_of(&c.propose(open(600_000)).await);
    let leader = c.nodes[&c.leader().await].clone();
    let first = leader.log.last_index();
    let mut futs = Vec::new();
    for i in 0..60u64 {
        let leader = leader.clone();
        // Every third request names a session that does not exist.
        let who = if i % 3 == 2 { SessionId(999_999) } else { s };
        let op = c.op(acquire(who, &format!("batch/{i}"), Wait::None, None));
        futs.push(tokio::spawn(
            async move { (i, leader.propose_op(op).await) },
        ));
    }
    let mut tokens = Vec::new();
    for f in futs {
        let (i, r) = f.await.unwrap();
        let r = r.expect("committed");
        if i % 3 == 2 {
            match r.reply.expect_err("unknown session refused") {
                OpError::Core(e) => assert_eq!(e.kind, "unknown_session", "request {i}: {e}"),
                e => panic!("request {i}: {e}"),
            }
        } else {
            match r.reply {
                Ok(CoreReply::Granted { token, .. }) => tokens.push(token),
                ref o => panic!("request {i}: {o:?}"),
            }
        }
    }
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 40, "40 grants, 40 distinct tokens");
    let used = leader.log.last_index() - first;
    assert!(
        used < 60,
        "60 concurrent requests took {used} entries: not batched"
    );
    c.converged().await;
    c.shutdown().await;
}

/// A connection that falls behind on its pushes is cut off rather than buffered without
/// bound: with a push queue of 2, the third push to a session whose connection reads
/// nothing signals the connection to close and detaches it (later pushes do not reach it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_does_not_read_its_pushes_is_cut_off() {
    let c = Cluster::start("backlog", 300).await;
    let a = session_of(&c.propose(open(600_000)).await);
    let b = session_of(&c.propose(open(600_000)).await);
    let node = c.nodes[&c.leader().await].clone();
    let (sink, mut rx, overflow) = PushSink::new(2);
    let conn = node.next_conn_id();
    node.handle_request(
        Request::Attach {
            session: b.0,
            secret: c.secret(b),
        },
        conn,
        &sink,
    )
    .await
    .unwrap();
    // A holds four locks; B queues on each; A's releases push four grants to B.
    for i in 0..4 {
        let lock = format!("bl/{i}");
        let r = c.propose(acquire(a, &lock, Wait::None, None)).await;
        assert!(granted(&r).is_some());
        let r = c.propose(acquire(b, &lock, Wait::Forever, None)).await;
        assert!(matches!(r.reply, Ok(CoreReply::Queued { .. })), "{r:?}");
    }
    for i in 0..3 {
        c.propose(release(a, &format!("bl/{i}"), None)).await;
    }
    tokio::time::timeout(Duration::from_secs(5), overflow.notified())
        .await
        .expect("the third push overflows a queue of 2 and asks the connection to close");
    // Drain what was queued; the sink was detached, so the fourth grant is not pushed.
    let mut got = Vec::new();
    while let Ok(o) = rx.try_recv() {
        got.push(o);
    }
    assert_eq!(got.len(), 2, "{got:?}");
    c.propose(release(a, "bl/3", None)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        rx.try_recv().is_err(),
        "a detached sink gets no more pushes"
    );
    // B's session is untouched: it holds all four locks (what a reconnecting client reads).
    {
        let g = node.shared.state();
        for i in 0..4 {
            let lock = format!("bl/{i}");
            assert!(g.svc.holders(&lock).any(|h| h.session == b), "{lock}");
        }
    }
    c.shutdown().await;
}

/// Sends an admin request to the current leader, retrying while leadership moves.
async fn admin(
    c: &Cluster,
    req: Request,
) -> Result<Reply, fencelock_server::protocol::ClientError> {
    let start = Instant::now();
    loop {
        let node = c.nodes[&c.leader().await].clone();
        let (sink, _rx, _) = PushSink::new(PUSH_BACKLOG);
        match node
            .handle_request(req.clone(), node.next_conn_id(), &sink)
            .await
        {
            Err(fencelock_server::protocol::ClientError::NotLeader { .. })
                if start.elapsed() < Duration::from_secs(10) =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

/// A dead node is replaced: a fresh node 4 joins as a learner (catching up on the log),
/// becomes a voter while node 1 is removed, node 1 is then stopped, and the cluster of
/// 2, 3, 4 keeps every session and hold, grants with higher tokens, and converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_replaced_through_membership_changes() {
    use fencelock_server::types::NodeAddr;
    let mut c = Cluster::start("members", 300).await;
    let s = session_of(&c.propose(open(600_000)).await);
    let r = c.propose(acquire(s, "m", Wait::None, Some(1))).await;
    let t1 = granted(&r).expect("granted");
    c.boot(4).await;
    let addr = NodeAddr {
        raft: "mem:4".into(),
        client: "mem:4".into(),
    };
    let r = admin(
        &c,
        Request::AddLearner {
            id: 4,
            addr: addr.clone(),
        },
    )
    .await;
    assert_eq!(r, Ok(Reply::MembershipChanged));
    // Retrying the same addition is harmless.
    let r = admin(&c, Request::AddLearner { id: 4, addr }).await;
    assert_eq!(r, Ok(Reply::MembershipChanged));
    // A voter set naming a node that is not a member is refused, and changes nothing.
    let r = admin(
        &c,
        Request::SetVoters {
            voters: vec![2, 3, 9],
        },
    )
    .await;
    assert!(
        matches!(
            r,
            Err(fencelock_server::protocol::ClientError::BadRequest(_))
        ),
        "{r:?}"
    );
    match admin(&c, Request::Members).await {
        Ok(Reply::Members { voters, learners }) => {
            let v: Vec<u64> = voters.iter().map(|(id, _)| *id).collect();
            let l: Vec<u64> = learners.iter().map(|(id, _)| *id).collect();
            assert_eq!(
                (v, l),
                (vec![1, 2, 3], vec![4]),
                "a refused change changes nothing"
            );
        }
        other => panic!("{other:?}"),
    }
    // The same change twice at once (a client retry racing its original): the one that
    // finds the other in progress is told to retry (Unavailable), never BadRequest.
    let req = Request::SetVoters {
        voters: vec![1, 2, 3, 4],
    };
    let (x, y) = tokio::join!(admin(&c, req.clone()), admin(&c, req));
    for r in [&x, &y] {
        assert!(
            matches!(
                r,
                Ok(Reply::MembershipChanged)
                    | Err(fencelock_server::protocol::ClientError::Unavailable(_))
            ),
            "{r:?}"
        );
    }
    let r = admin(
        &c,
        Request::SetVoters {
            voters: vec![4, 2, 3],
        },
    )
    .await;
    assert_eq!(r, Ok(Reply::MembershipChanged));
    match admin(&c, Request::Members).await {
        Ok(Reply::Members { voters, learners }) => {
            let ids: Vec<u64> = voters.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids, vec![2, 3, 4]);
            assert!(learners.is_empty(), "{learners:?}");
        }
        other => panic!("{other:?}"),
    }
    c.kill(1).await;
    // The new cluster has the old state: S still holds m; a release and re-acquire
    // commit on 2, 3, 4 with a higher token.
    let r = c.propose(release(s, "m", Some(2))).await;
    assert_eq!(r.reply, Ok(CoreReply::Released { token: t1 }));
    let r = c.propose(acquire(s, "m", Wait::None, Some(3))).await;
    let t2 = granted(&r).expect("granted again");
    assert!(t2 > t1);
    c.converged().await;
    c.shutdown().await;
}

/// Opening a session with an idempotency key is applied once: a retry with the same key
/// answers with the same session (no orphan), another key opens another session, every
/// replica remembers the same keys, a node restarted from its snapshot still knows them,
/// and a key is forgotten when its session ends (then it opens a new session). Keys are
/// scoped by principal: the same key from another principal opens a session of its own
/// (its own credential), and the scoping survives the snapshot; an open of an earlier
/// version's form (no principal) has keys of its own too. Each session's principal is
/// replicated and kept the same way, and an expiry takes it off its principal's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_retried_with_its_key_opens_one_session() {
    use fencelock_server::auth::SessionSecret;
    let mut c = Cluster::start("openkey", 300).await;
    let (p, q) = (Principal::token("team-p"), Principal::token("team-q"));
    let open_as = |principal, ttl, key| Op::OpenCounted {
        ttl,
        key: Some(OpenKey(key)),
        secret: SessionSecret::random().unwrap(),
        label: None,
        principal,
    };
    let open = |ttl, key| open_as(p, ttl, key);
    let leader = c.nodes[&c.leader().await].clone();
    let first = leader.propose_op(open(600_000, 42)).await.unwrap();
    let a = session_of(&first);
    let again = leader.propose_op(open(600_000, 42)).await.unwrap();
    assert_eq!(session_of(&again), a, "a retry gets the same session");
    assert!(first.secret.is_some());
    assert_eq!(
        again.secret, first.secret,
        "and the credential the first attempt drew, not its own"
    );
    let b = session_of(&leader.propose_op(open(600_000, 43)).await.unwrap());
    assert_ne!(a, b);
    let short = session_of(&leader.propose_op(open(400, 44)).await.unwrap());
    assert_eq!(leader.shared.state().svc.usage().sessions, 3, "no orphan");
    // Another principal presenting p's key gets a session of its own, not p's credential;
    // its retry gets its own back.
    let theirs = leader.propose_op(open_as(q, 600_000, 42)).await.unwrap();
    let qa = session_of(&theirs);
    assert_ne!(qa, a, "q must not get p's session");
    assert_ne!(theirs.secret, first.secret, "nor p's credential");
    let theirs_again = leader.propose_op(open_as(q, 600_000, 42)).await.unwrap();
    assert_eq!(session_of(&theirs_again), qa);
    assert_eq!(theirs_again.secret, theirs.secret);
    // An earlier version's open (no principal recorded) neither sees nor is seen by them.
    let legacy = |key| Op::Open {
        ttl: 600_000,
        key: Some(OpenKey(key)),
        secret: SessionSecret::random().unwrap(),
    };
    let old = session_of(&leader.propose_op(legacy(42)).await.unwrap());
    assert!(old != a && old != qa);
    assert_eq!(
        session_of(&leader.propose_op(legacy(42)).await.unwrap()),
        old
    );
    assert_eq!(leader.shared.state().svc.usage().sessions, 5, "no orphan");
    // An earlier build's open of this version (`OpenAs`) scopes its key to p but records
    // no principal: counted for nobody, on every replica alike.
    let earlier = Op::OpenAs {
        ttl: 600_000,
        key: Some(OpenKey(45)),
        secret: SessionSecret::random().unwrap(),
        label: None,
        principal: p,
    };
    let uncounted = session_of(&leader.propose_op(earlier).await.unwrap());
    // Every replica knows the keys; a follower restarted from its own snapshot too.
    c.converged().await;
    let f = (1..=3).find(|id| *id != leader.id).unwrap();
    c.nodes[&f].raft.trigger().snapshot().await.unwrap();
    let start = Instant::now();
    while c.nodes[&f].raft.metrics().borrow().snapshot.is_none() {
        assert!(start.elapsed() < Duration::from_secs(10), "no snapshot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.kill(f).await;
    c.boot(f).await;
    c.converged().await;
    for n in c.nodes.values() {
        let g = n.shared.state();
        assert_eq!(g.open_keys.get(p, OpenKey(42)), Some(a), "node {}", n.id);
        assert_eq!(g.open_keys.get(p, OpenKey(43)), Some(b), "node {}", n.id);
        assert_eq!(g.open_keys.get(q, OpenKey(42)), Some(qa), "node {}", n.id);
        assert_eq!(g.open_keys.get(q, OpenKey(43)), None, "node {}", n.id);
        assert_eq!(
            g.open_keys.get(Principal::Unrecorded, OpenKey(42)),
            Some(old)
        );
        assert_eq!(g.open_keys.get(Principal::Anyone, OpenKey(42)), None);
        assert_eq!(
            g.open_keys.get(p, OpenKey(45)),
            Some(uncounted),
            "node {}",
            n.id
        );
        // Each session's principal too (what the per-token quota counts): the same on
        // every replica, through the snapshot; the earlier builds' opens count for none.
        // (`short` may have expired by now.)
        let short_open = g.svc.session(short).is_some() as usize;
        let counts = (g.owners.sessions_of(p), g.owners.sessions_of(q));
        assert_eq!(counts, (2 + short_open, 1), "node {}", n.id);
        assert_eq!(g.owners.principal_of(old), None, "node {}", n.id);
        assert_eq!(g.owners.principal_of(uncounted), None, "node {}", n.id);
        assert_eq!(g.owners.principal_of(a), Some(p), "node {}", n.id);
    }
    // The short session expires (nobody keeps it alive); its key is forgotten and opens
    // a new session.
    let start = Instant::now();
    while leader.shared.state().svc.session(short).is_some() {
        assert!(start.elapsed() < Duration::from_secs(10), "never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(leader.shared.state().open_keys.get(p, OpenKey(44)), None);
    assert_eq!(
        leader.shared.state().owners.sessions_of(p),
        2,
        "an expired session leaves its principal's count"
    );
    let reopened = session_of(&leader.propose_op(open(400, 44)).await.unwrap());
    assert_ne!(reopened, short);
    c.shutdown().await;
}

/// Through the client protocol: each write's answer is the core's reply to it, and the
/// events go to the sessions they name, the caller's own included. A holds a lock and B
/// waits for it; A's close answers `Closed`, pushes A's `Released` (reason `Closed`) to A's
/// connection and B's `Granted` (a higher token) to B's. The close also forgets A's open
/// key on every replica, and a second close finds the session unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_answer_the_caller_and_events_are_pushed_to_the_sessions_they_name() {
    use fencelock::{Mode, ReleaseReason};
    use fencelock_server::protocol::{ClientError, WaitSpec};
    let c = Cluster::start("replies", 300).await;
    let node = c.nodes[&c.leader().await].clone();
    let (sink_a, mut rx_a, _) = PushSink::new(PUSH_BACKLOG);
    let (sink_b, mut rx_b, _) = PushSink::new(PUSH_BACKLOG);
    let (conn_a, conn_b) = (node.next_conn_id(), node.next_conn_id());
    let reply = |r: Result<Reply, ClientError>| match r {
        Ok(Reply::Done { reply, .. }) => reply,
        other => panic!("{other:?}"),
    };
    let opened = |r: Result<Reply, ClientError>| match r {
        Ok(Reply::Opened { reply, secret, .. }) => (reply.opened().expect("opened"), secret),
        other => panic!("{other:?}"),
    };
    let open = |key| Request::Open {
        ttl_ms: 600_000,
        key: Some(OpenKey(key)),
    };
    let (a, secret_a) = opened(node.handle_request(open(7), conn_a, &sink_a).await);
    let (b, secret_b) = opened(node.handle_request(open(8), conn_b, &sink_b).await);
    let secret = |s: SessionId| if s == a { secret_a } else { secret_b };
    let acquire = |session: SessionId, wait| Request::Acquire {
        session: session.0,
        secret: secret(session),
        lock: "e".into(),
        mode: Mode::Exclusive,
        wait,
        request: Some(1),
    };
    let t1 = match reply(
        node.handle_request(acquire(a, WaitSpec::None), conn_a, &sink_a)
            .await,
    ) {
        CoreReply::Granted { token, .. } => token,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        reply(
            node.handle_request(acquire(b, WaitSpec::Forever), conn_b, &sink_b)
                .await
        ),
        CoreReply::Queued {
            mode: Mode::Exclusive,
            position: 1
        }
    );
    let close = Request::Close {
        session: a.0,
        secret: secret_a,
        request: None,
    };
    assert_eq!(
        reply(node.handle_request(close.clone(), conn_a, &sink_a).await),
        CoreReply::Closed
    );
    let pushed_a = tokio::time::timeout(Duration::from_secs(5), rx_a.recv())
        .await
        .expect("A's release is pushed")
        .unwrap();
    assert_eq!(
        pushed_a,
        Output::Released {
            session: a,
            lock: fencelock::LockName::new("e").unwrap(),
            token: t1,
            reason: ReleaseReason::Closed
        }
    );
    let pushed_b = tokio::time::timeout(Duration::from_secs(5), rx_b.recv())
        .await
        .expect("B's grant is pushed")
        .unwrap();
    match pushed_b {
        Output::Granted { session, token, .. } => {
            assert_eq!(session, b);
            assert!(token > t1);
        }
        other => panic!("B got {other:?}"),
    }
    assert!(rx_a.try_recv().is_err(), "A gets nothing else: {rx_a:?}");
    assert!(rx_b.try_recv().is_err(), "B gets nothing else");
    match node.handle_request(close, conn_a, &sink_a).await {
        Err(ClientError::Core(e)) => assert_eq!(e.kind, "unknown_session"),
        other => panic!("{other:?}"),
    }
    c.converged().await;
    for n in c.nodes.values() {
        let g = n.shared.state();
        assert_eq!(
            g.open_keys.get(Principal::Anyone, OpenKey(7)),
            None,
            "node {}",
            n.id
        );
        assert_eq!(
            g.open_keys.get(Principal::Anyone, OpenKey(8)),
            Some(b),
            "node {}",
            n.id
        );
    }
    c.shutdown().await;
}

/// A write's errors are the core's, in the core's order: an unknown session comes before a
/// bad name (as natively, through frames, from C and from wasm), an empty name with a live
/// session is `empty_name`. The one exception is a name longer than the most any input can
/// carry, refused before anything else as `name_too_long`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_errors_follow_the_cores_precedence() {
    use fencelock::{Mode, MAX_NAME_LEN};
    use fencelock_server::protocol::{ClientError, WaitSpec};
    let c = Cluster::start("precedence", 300).await;
    let s = session_of(&c.propose(open(600_000)).await);
    let node = c.nodes[&c.leader().await].clone();
    let (sink, _rx, _) = PushSink::new(PUSH_BACKLOG);
    let conn = node.next_conn_id();
    let kind = |r: Result<Reply, ClientError>| match r {
        Err(ClientError::Core(e)) => e.kind,
        other => panic!("{other:?}"),
    };
    let too_long = "x".repeat(MAX_NAME_LEN + 1);
    let secret = c.secret(s);
    for (session, lock, want) in [
        (999_999, "", "unknown_session"),
        (s.0, "", "empty_name"),
        (s.0, too_long.as_str(), "name_too_long"),
        (999_999, too_long.as_str(), "name_too_long"),
    ] {
        let acquire = Request::Acquire {
            session,
            secret,
            lock: lock.into(),
            mode: Mode::Exclusive,
            wait: WaitSpec::None,
            request: Some(1),
        };
        let release = Request::Release {
            session,
            secret,
            lock: lock.into(),
            request: Some(1),
        };
        let cancel = Request::Cancel {
            session,
            secret,
            lock: lock.into(),
            request: Some(1),
        };
        for req in [acquire, release, cancel] {
            let got = kind(node.handle_request(req.clone(), conn, &sink).await);
            assert_eq!(got, want, "{req:?}");
        }
    }
    // Nothing was applied: the session's request 1 is still unused.
    let r = c.propose(acquire(s, "p", Wait::None, Some(1))).await;
    assert!(granted(&r).is_some(), "{r:?}");
    c.shutdown().await;
}

/// A leader deposed while a client's connection is attached to a session there pushes
/// nothing more on it. It tells the connection to close as soon as it sees its leadership
/// end, so the client reconnects to the new leader and repeats its pending acquire there.
/// And when it applies, as a follower, the grant the new leader made meanwhile, it pushes
/// nothing of it. Before, it pushed that grant on the old connection, which a client that
/// had moved on could take for a later acquire's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_closes_its_session_connections_and_pushes_nothing_more() {
    use fencelock::Mode;
    use fencelock_server::protocol::WaitSpec;
    let c = Cluster::start("deposed", 300).await;
    let old = c.leader().await;
    let node = c.nodes[&old].clone();
    let t = session_of(&c.propose(open(60_000)).await);
    let r = c.propose(acquire(t, "x", Wait::None, Some(1))).await;
    granted(&r).expect("T holds x");
    let (sink, mut rx, told_to_close) = PushSink::new(PUSH_BACKLOG);
    let conn = node.next_conn_id();
    let (s, secret) = match node
        .handle_request(
            Request::Open {
                ttl_ms: 60_000,
                key: Some(OpenKey(1)),
            },
            conn,
            &sink,
        )
        .await
    {
        Ok(Reply::Opened { reply, secret, .. }) => (reply.opened().expect("opened"), secret),
        other => panic!("{other:?}"),
    };
    let queued = node
        .handle_request(
            Request::Acquire {
                session: s.0,
                secret,
                lock: "x".into(),
                mode: Mode::Exclusive,
                wait: WaitSpec::Forever,
                request: Some(1),
            },
            conn,
            &sink,
        )
        .await;
    assert!(
        matches!(
            queued,
            Ok(Reply::Done {
                reply: CoreReply::Queued { position: 1, .. },
                ..
            })
        ),
        "{queued:?}"
    );
    assert!(node.shared.hub.has_conn(conn));

    // The leader is cut off; the others elect a new one, where T's release grants x to S.
    let majority: Vec<u64> = (1..=3).filter(|id| *id != old).collect();
    c.net.isolate(old);
    c.leader_among(&majority).await;
    let r = c.propose_among(&majority, release(t, "x", Some(2))).await;
    assert!(matches!(r.reply, Ok(CoreReply::Released { .. })), "{r:?}");

    // Healed, the old leader learns of the new term and applies the grant as a follower.
    c.net.heal();
    let start = Instant::now();
    while node.shared.state().last_applied.map_or(0, |l| l.index) < r.index {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the old leader never applied the grant"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::timeout(Duration::from_secs(10), told_to_close.notified())
        .await
        .expect("the deposed leader never told the connection to close");
    assert!(!node.shared.hub.has_conn(conn), "still registered");
    while let Ok(o) = rx.try_recv() {
        assert!(
            !matches!(o, Output::Granted { .. }),
            "the deposed leader pushed the new leader's grant: {o:?}"
        );
    }
    c.shutdown().await;
}

/// A node refuses a snapshot chunk that would take the snapshot it receives past the
/// limit for its table sizes (`max_snapshot_bytes`), before openraft writes it into its
/// buffer in memory: a chunk at an offset near 2^63 no longer makes it try to allocate
/// that much, nor chunks without end grow it without bound. A chunk within the limit is
/// taken as before, and the cluster goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_chunk_past_the_size_limit_is_refused() {
    use fencelock_server::state_machine::max_snapshot_bytes;
    use fencelock_server::types::SnapshotMeta;
    use openraft::error::{InstallSnapshotError, RaftError};
    use openraft::raft::InstallSnapshotRequest;
    let c = Cluster::start("snaplimit", 300).await;
    let leader = c.leader().await;
    let follower = c.nodes[&(1..=3).find(|id| *id != leader).unwrap()].clone();
    let limit = max_snapshot_bytes(&follower.config().service);
    let vote = follower.raft.metrics().borrow().vote;
    let chunk = |offset: u64| InstallSnapshotRequest {
        vote,
        meta: SnapshotMeta {
            last_log_id: None,
            last_membership: Default::default(),
            snapshot_id: "probe".into(),
        },
        offset,
        data: vec![0; 16],
        done: false,
    };
    // The first chunk starts the snapshot (openraft refuses a new snapshot's chunk at
    // any offset but 0 by itself); the later ones go on with it.
    let taken = follower.elector().install_snapshot(chunk(0)).await;
    assert!(taken.is_ok(), "a chunk within the limit: {taken:?}");
    for offset in [limit - 15, 1 << 63, u64::MAX] {
        match follower.elector().install_snapshot(chunk(offset)).await {
            Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(m))) => {
                assert_eq!(m.expect.offset, 0, "{m}");
            }
            other => panic!("a chunk at offset {offset} was not refused: {other:?}"),
        }
    }
    let taken = follower.elector().install_snapshot(chunk(16)).await;
    assert!(taken.is_ok(), "the next chunk within the limit: {taken:?}");
    let s = session_of(&c.propose(open(60_000)).await);
    let r = c.propose(keep_alive(s)).await;
    assert!(matches!(r.reply, Ok(CoreReply::KeptAlive { .. })), "{r:?}");
    c.converged().await;
    c.shutdown().await;
}

/// A node started with other service settings than its cluster's is never part of it:
/// added as a learner it is sent nothing it would serve (it refuses every request and
/// counts them), the add-learner answer names the difference, it cannot be made a voter,
/// and the cluster commits on without it. Started again on its directory with the
/// cluster's settings, it is refused: the directory records the ones it was made with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_other_settings_never_joins_the_cluster() {
    use fencelock_server::node::Node;
    use fencelock_server::protocol::ClientError;
    use fencelock_server::types::NodeAddr;
    let mut c = Cluster::start("settings", 300).await;
    let s = session_of(&c.propose(open(600_000)).await);
    let t1 = granted(&c.propose(acquire(s, "m", Wait::None, Some(1))).await).expect("granted");
    let mut other = c.config(4);
    other.service.sessions = 100;
    c.boot_with(other).await;
    let addr = NodeAddr {
        raft: "mem:4".into(),
        client: "mem:4".into(),
    };
    match admin(&c, Request::AddLearner { id: 4, addr }).await {
        Err(ClientError::Unavailable(m)) => {
            assert!(
                m.contains("node 4 refuses this node's Raft requests"),
                "{m}"
            );
            assert!(m.contains("--sessions 16384 here, 100 there"), "{m}");
        }
        other => panic!("a learner that refuses everything was taken: {other:?}"),
    }
    let n4 = c.nodes[&4].clone();
    assert_eq!(
        n4.raft.metrics().borrow().last_applied,
        None,
        "applied nothing"
    );
    assert!(
        n4.elector().settings().refused.get() > 0,
        "refusals counted"
    );
    match admin(
        &c,
        Request::SetVoters {
            voters: vec![1, 2, 3, 4],
        },
    )
    .await
    {
        Err(ClientError::BadRequest(m)) => assert!(m.contains("--sessions"), "{m}"),
        other => panic!("a node of other settings became a voter: {other:?}"),
    }
    // The cluster goes on: S's hold stands, and a release and a new grant commit.
    let r = c.propose(release(s, "m", Some(2))).await;
    assert_eq!(r.reply, Ok(CoreReply::Released { token: t1 }));
    assert!(granted(&c.propose(acquire(s, "m", Wait::None, Some(3))).await).unwrap() > t1);
    assert_eq!(
        n4.raft.metrics().borrow().last_applied,
        None,
        "still nothing"
    );
    c.kill(4).await;
    let e = Node::start(c.config(4), c.net.factory(4))
        .await
        .err()
        .expect("a restart with other settings than its directory's is refused");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    assert!(
        e.to_string()
            .contains("--sessions 16384 in this start, 100 recorded"),
        "{e}"
    );
    c.shutdown().await;
}

/// Reads that arrive together share their confirmation round (openraft dials every voter
/// afresh for each one, so a round per read let one client's burst of reads open that
/// many connections to every follower): 64 reads at once take fewer rounds than reads
/// (about two on an idle machine), and each still sees the write acknowledged before the
/// burst. That a read never takes the
/// answer of a round that began before it arrived is the unit test
/// `a_read_takes_only_a_round_that_started_after_it_arrived` (node.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reads_share_their_confirmation_round() {
    let c = Cluster::start("shared-reads", 300).await;
    let leader = c.leader().await;
    let node = c.nodes[&leader].clone();
    let a = session_of(&c.propose(open(60_000)).await);
    granted(&c.propose(acquire(a, "x", Wait::None, Some(1))).await).expect("A granted");
    let before = node.read_barriers();
    // The reads start together; how many rounds they take depends on the scheduler (a
    // busy machine may run a round between two of them), so only "fewer than one per
    // read" is asserted here; the unit test counts the rounds exactly.
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(64));
    let reads: Vec<_> = (0..64)
        .map(|_| {
            let n = node.clone();
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                n.linearizable().await?;
                Ok::<_, fencelock_server::protocol::ClientError>(
                    n.shared.state().svc.holders("x").count(),
                )
            })
        })
        .collect();
    for r in reads {
        assert_eq!(r.await.unwrap(), Ok(1), "the acknowledged grant is seen");
    }
    let rounds = node.read_barriers() - before;
    assert!((1..64).contains(&rounds), "{rounds} rounds for 64 reads");
    // A read after a write acknowledged later sees that write too.
    release_and_check(&c, &node, a).await;
    c.shutdown().await;
}

async fn release_and_check(
    c: &Cluster,
    node: &std::sync::Arc<fencelock_server::node::Node>,
    a: SessionId,
) {
    let r = c.propose(release(a, "x", Some(2))).await;
    assert!(r.reply.is_ok(), "{r:?}");
    node.linearizable().await.unwrap();
    assert_eq!(node.shared.state().svc.holders("x").count(), 0);
}
