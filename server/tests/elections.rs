//! Elections under partitions, in-process (three nodes over `MemNet`, real openraft, the
//! durable log on disk): pre-vote keeps a cut-off follower's term where it was, so its
//! return deposes nobody; check-quorum steps back a leader whose followers' answers are
//! lost, and its time stands still meanwhile; a one-way link does not keep a connected
//! majority without a leader. Bounds are generous (a shared 2-core machine): the
//! behaviour, not the speed, is what is asserted.

mod common;

use std::time::{Duration, Instant};

use common::{session_of, Cluster};
use fencelock::{Input, Tick};
use fencelock_server::protocol::{ClientError, Reply, Request};
use fencelock_server::state_machine::PushSink;
use fencelock_server::types::NodeId;

fn term(c: &Cluster, id: NodeId) -> u64 {
    c.nodes[&id].raft.metrics().borrow().current_term
}

fn others(c: &Cluster, id: NodeId) -> Vec<NodeId> {
    let mut v: Vec<NodeId> = c.nodes.keys().copied().filter(|&x| x != id).collect();
    v.sort();
    v
}

/// A node that is a leader and not stepped back, among `ids`, polled for up to `limit`.
async fn serving_leader(c: &Cluster, ids: &[NodeId], limit: Duration) -> Option<NodeId> {
    let start = Instant::now();
    while start.elapsed() < limit {
        for id in ids {
            let n = &c.nodes[id];
            let m = n.raft.metrics().borrow().clone();
            if m.state == openraft::ServerState::Leader
                && !n.elector().stepped_back()
                && n.linearizable().await.is_ok()
            {
                return Some(*id);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_follower_keeps_its_term_and_deposes_nobody_when_it_returns() {
    let c = Cluster::start("elect-isolated", 200).await;
    let l = c.leader().await;
    let t0 = term(&c, l);
    let f = others(&c, l)[0];
    c.net.isolate(f);
    // ~8 election timeouts (300-600 ms) cut off: without pre-vote it would campaign each time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(term(&c, f), t0, "the cut-off follower raised its term");
    assert_eq!(term(&c, l), t0);
    c.net.heal();
    // Writes keep flowing through the same leader in the same term after the return.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        let r = c.nodes[&l]
            .propose_op(c.op(Input::OpenSession {
                now: Tick(0),
                ttl: 60_000,
            }))
            .await;
        assert!(r.is_ok(), "the healthy leader stopped serving: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(c.leader().await, l);
    assert_eq!(term(&c, l), t0, "an election happened");
    assert_eq!(term(&c, f), t0);
    c.converged().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_answers_are_lost_steps_back_and_its_time_stands_still() {
    // A request timeout far longer than any wait below: a stepped-back leader that waited
    // for it, instead of answering at once, could not pass.
    let c = Cluster::start_with("elect-deaf", 200, 60_000).await;
    let l = c.leader().await;
    let t0 = term(&c, l);
    // Let the leader's clock run.
    let s = session_of(
        &c.propose(Input::OpenSession {
            now: Tick(0),
            ttl: 60_000,
        })
        .await,
    );
    let fs = others(&c, l);
    // The followers still receive the leader's appends; their answers are lost.
    for f in &fs {
        c.net.cut_one_way(*f, l);
    }
    let cut = Instant::now();
    // Check-quorum: it steps back within about one election timeout.
    while !c.nodes[&l].elector().stepped_back() {
        assert!(
            cut.elapsed() < Duration::from_secs(3),
            "the leader did not step back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // It answers at once: no waiting for the request timeout.
    let asked = Instant::now();
    let r = c.nodes[&l]
        .propose_op(c.op(Input::OpenSession {
            now: Tick(0),
            ttl: 1000,
        }))
        .await;
    assert!(
        matches!(r, Err(ClientError::NotLeader { .. })),
        "stepped-back leader answered {r:?}"
    );
    let r = c.nodes[&l].linearizable().await;
    assert!(matches!(r, Err(ClientError::NotLeader { .. })), "{r:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "answered after {:?}: it waited for the request timeout",
        asked.elapsed()
    );
    // Its own view is still answered (what an operator asks in this partition): its role
    // is leader, and it is not ready, saying why.
    let (sink, _queue, _) = PushSink::new(4);
    let st = c.nodes[&l]
        .handle_request(Request::Status, c.nodes[&l].next_conn_id(), &sink)
        .await;
    let Ok(Reply::Status(st)) = st else {
        panic!("a stepped-back leader's status: {st:?}");
    };
    assert_eq!((st.id, st.role.as_str(), st.ready), (l, "leader", false));
    assert!(
        st.checks
            .iter()
            .any(|c| c.starts_with("fail leader: this node stepped back")),
        "{:?}",
        st.checks
    );
    // Its time stands still.
    let s1 = c.nodes[&l].stamp();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        c.nodes[&l].stamp(),
        s1,
        "a leader without quorum advanced time"
    );
    // The followers, no longer hearing it, elect one of themselves.
    let nl = serving_leader(&c, &fs, Duration::from_secs(8))
        .await
        .expect("no leader among the connected majority");
    assert!(term(&c, nl) > t0);
    // The session opened before the fault is still there, and the old leader follows.
    let r = c
        .propose(Input::KeepAlive {
            now: Tick(0),
            session: s,
            request: None,
        })
        .await;
    assert!(r.reply.is_ok(), "session lost: {r:?}");
    c.net.heal();
    let start = Instant::now();
    while c.nodes[&l].raft.metrics().borrow().current_leader != Some(nl)
        || c.nodes[&l].elector().stepped_back()
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "old leader never followed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!c.nodes[&l].elector().stepped_back());
    c.converged().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_way_link_and_a_lost_leader_still_elect_the_node_that_can_lead() {
    let mut c = Cluster::start("elect-oneway", 200).await;
    for trial in 0..3 {
        let l = c.leader().await;
        let fs = others(&c, l);
        let (t, y) = if trial % 2 == 0 {
            (fs[0], fs[1])
        } else {
            (fs[1], fs[0])
        };
        // Make sure t's log is as long as y's, so t can win: write, then wait for both.
        let r = c
            .propose(Input::OpenSession {
                now: Tick(0),
                ttl: 60_000,
            })
            .await;
        let idx = r.index;
        let start = Instant::now();
        while [t, y].iter().any(|id| {
            c.nodes[id]
                .raft
                .metrics()
                .borrow()
                .last_log_index
                .unwrap_or(0)
                < idx
        }) {
            assert!(start.elapsed() < Duration::from_secs(5));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        c.net.isolate(l);
        // y's packets to t are lost; t reaches y and hears its answers.
        c.net.lose_calls(y, t);
        let cut = Instant::now();
        let nl = serving_leader(&c, &[t, y], Duration::from_secs(8)).await;
        assert_eq!(nl, Some(t), "trial {trial}: no leader that can lead");
        eprintln!("trial {trial}: leader {t} after {:?}", cut.elapsed());
        c.net.heal();
        // The old leader comes back as a follower; settle before the next trial.
        c.converged().await;
        if trial == 1 {
            // A kill -9 of the new leader mixed in: the other two still elect one.
            c.kill(t).await;
            let rest: Vec<NodeId> = c.nodes.keys().copied().collect();
            assert!(serving_leader(&c, &rest, Duration::from_secs(8))
                .await
                .is_some());
            c.boot(t).await;
            c.converged().await;
        }
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stepped_back_leader_with_the_longest_log_resumes_when_no_one_else_can_lead() {
    let mut c = Cluster::start("elect-resume", 200).await;
    let l = c.leader().await;
    let fs = others(&c, l);
    // One follower is down; the leader is cut off from the other and appends an entry
    // that the other never gets: afterwards only the old leader can win an election.
    c.kill(fs[1]).await;
    let f = fs[0];
    c.net.isolate(l);
    let r = c.nodes[&l]
        .propose_op(c.op(Input::OpenSession {
            now: Tick(0),
            ttl: 60_000,
        }))
        .await;
    assert!(
        matches!(r, Err(ClientError::NotLeader { .. })),
        "an entry committed without a quorum: {r:?}"
    );
    assert!(c.nodes[&l].elector().stepped_back());
    c.net.heal();
    let healed = Instant::now();
    let nl = serving_leader(&c, &[l, f], Duration::from_secs(8))
        .await
        .expect("no leader: the stepped-back leader never resumed");
    assert_eq!(nl, l, "the follower with the shorter log won");
    eprintln!("resumed {:?} after the heal", healed.elapsed());
    c.boot(fs[1]).await;
    c.converged().await;
    c.shutdown().await;
}

/// A node that missed a membership change still votes for a voter it knows only as a
/// learner: grown from one voter to three while the third node was cut off, that node
/// still sees the other two as a voter and a learner when the first is lost; the second
/// can lead only with the third's pre-vote and vote, and does. (A rule serving votes only
/// from the voters a node knows would leave this cluster without a leader until the first
/// node came back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_promoted_while_a_node_lagged_is_elected_with_that_nodes_vote() {
    use std::collections::BTreeSet;
    let mut c = Cluster::start("elect-promoted-lagging", 200).await;
    let voters = |c: &Cluster, id: NodeId| -> BTreeSet<NodeId> {
        let m = c.nodes[&id]
            .raft
            .metrics()
            .borrow()
            .membership_config
            .clone();
        m.membership().voter_ids().collect()
    };
    // Down to the leader alone (the other two kept as learners), as after a recovery.
    let first = c.leader().await;
    let [second, third] = <[NodeId; 2]>::try_from(others(&c, first)).expect("two others");
    c.nodes[&first]
        .raft
        .change_membership(BTreeSet::from([first]), true)
        .await
        .expect("to the leader alone");
    let start = Instant::now();
    while c
        .nodes
        .keys()
        .any(|id| voters(&c, *id) != BTreeSet::from([first]))
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the one-voter membership never reached every node"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The third cut off; the first and the second take the change to three voters.
    c.net.isolate(third);
    c.nodes[&first]
        .raft
        .change_membership(BTreeSet::from([first, second, third]), true)
        .await
        .expect("to three voters without the third");
    assert_eq!(voters(&c, second), BTreeSet::from([first, second, third]));
    assert_eq!(
        voters(&c, third),
        BTreeSet::from([first]),
        "the third saw the change"
    );
    // The first lost, the third back: only the second can lead, with the third's vote.
    c.kill(first).await;
    c.net.heal();
    assert_eq!(c.leader_among(&[second, third]).await, second);
    c.shutdown().await;
}
