//! Membership changes that cannot brick the cluster: a voter set is accepted only if every
//! new voter is a member that is reachable and caught up (`src/membership.rs`).

mod common;

use std::time::{Duration, Instant};

use common::{keep_alive, open, session_of, Cluster};
use fencelock_server::protocol::{ClientError, Reply, Request};
use fencelock_server::state_machine::{PushSink, PUSH_BACKLOG};
use fencelock_server::types::{CmdResult, NodeAddr, NodeId};

async fn admin(c: &Cluster, req: Request) -> Result<Reply, ClientError> {
    let start = Instant::now();
    loop {
        let node = c.nodes[&c.leader().await].clone();
        let (sink, _rx, _) = PushSink::new(PUSH_BACKLOG);
        match node
            .handle_request(req.clone(), node.next_conn_id(), &sink)
            .await
        {
            Err(ClientError::NotLeader { .. }) if start.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

/// `req` asked of node `id` itself, whether it leads or not.
async fn ask(c: &Cluster, id: NodeId, req: Request) -> Result<Reply, ClientError> {
    let node = c.nodes[&id].clone();
    let (sink, _rx, _) = PushSink::new(PUSH_BACKLOG);
    node.handle_request(req, node.next_conn_id(), &sink).await
}

async fn members(c: &Cluster) -> (Vec<u64>, Vec<u64>) {
    match admin(c, Request::Members).await {
        Ok(Reply::Members { voters, learners }) => (
            voters.iter().map(|(id, _)| *id).collect(),
            learners.iter().map(|(id, _)| *id).collect(),
        ),
        other => panic!("{other:?}"),
    }
}

fn refused(r: &Result<Reply, ClientError>, naming: &str) {
    match r {
        Err(ClientError::BadRequest(m)) => assert!(m.contains(naming), "{m}"),
        other => panic!("expected a refusal naming {naming}, got {other:?}"),
    }
}

/// The brick: a learner that does not exist (node 9, never started) is added, then
/// made a voter with node 1 (`set-voters 1,9`), which would leave two voters, one of them
/// dead: no quorum, forever. Refused by name, and nothing changes; so is a set that
/// includes a voter cut off by a partition. The dead learner is removed again, and a set
/// that drops the cut-off voter is accepted — the cluster keeps committing throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_set_without_a_live_quorum_is_refused() {
    let c = Cluster::start_with("members-live", 300, 600).await;
    let addr = NodeAddr {
        raft: "mem:9".into(),
        client: "mem:9".into(),
    };
    // Adding it cannot complete (it never catches up), but it is a learner now.
    let r = admin(&c, Request::AddLearner { id: 9, addr }).await;
    assert!(matches!(r, Err(ClientError::Unavailable(_))), "{r:?}");
    assert_eq!(members(&c).await, (vec![1, 2, 3], vec![9]));
    // A known id at another address is refused (openraft would keep the old one and the
    // add would be answered as done); a voter's id too.
    let moved = NodeAddr {
        raft: "mem:19".into(),
        client: "mem:19".into(),
    };
    let r = admin(
        &c,
        Request::AddLearner {
            id: 9,
            addr: moved.clone(),
        },
    )
    .await;
    refused(&r, "node 9 is a learner already, at mem:9");
    let r = admin(&c, Request::AddLearner { id: 1, addr: moved }).await;
    refused(&r, "node 1 is a voter already");
    assert_eq!(members(&c).await, (vec![1, 2, 3], vec![9]), "unchanged");
    // An address that is no `host:port` (empty, over 255 bytes, or with whitespace or a
    // control character, which would forge a line where `members` prints it) is refused.
    for bad in [
        "",
        &"m".repeat(256),
        "mem:8\nvoter 7 x y",
        "mem 8",
        "mem:8\u{1b}[2J",
    ] {
        let addr = NodeAddr {
            raft: "mem:8".into(),
            client: bad.into(),
        };
        let r = admin(&c, Request::AddLearner { id: 8, addr }).await;
        refused(&r, "bad node address");
        assert_eq!(members(&c).await, (vec![1, 2, 3], vec![9]), "unchanged");
    }
    // An address longer than any member's is named by its length: escaped, 60 000 control
    // characters would be a refusal six times the request.
    let addr = NodeAddr {
        raft: "mem:8".into(),
        client: "\u{1}".repeat(60_000),
    };
    let r = admin(&c, Request::AddLearner { id: 8, addr }).await;
    refused(&r, "bad node address: 60000 bytes, longer than the 255");
    // No voters at all: refused before the liveness probe writes anything.
    let r = admin(&c, Request::SetVoters { voters: vec![] }).await;
    refused(&r, "no voters named");
    for voters in [vec![1, 9], vec![1, 2, 3, 9], vec![9]] {
        let r = admin(&c, Request::SetVoters { voters }).await;
        refused(&r, "[9]");
        assert_eq!(members(&c).await, (vec![1, 2, 3], vec![9]), "unchanged");
    }
    let r = admin(&c, Request::SetVoters { voters: vec![1, 7] }).await;
    refused(&r, "node 7 is not a member");
    // The way out of a learner that will never catch up.
    let r = admin(&c, Request::RemoveLearner { id: 9 }).await;
    assert_eq!(r, Ok(Reply::MembershipChanged));
    assert_eq!(members(&c).await, (vec![1, 2, 3], vec![]));
    let r = admin(&c, Request::RemoveLearner { id: 9 }).await;
    assert_eq!(r, Ok(Reply::MembershipChanged), "a retry is a no-op");
    // A voter cut off by a partition cannot stay in a new set; dropping it is accepted.
    let l = c.leader().await;
    let cut = (1..=3).find(|id| *id != l).unwrap();
    c.net.isolate(cut);
    let r = admin(
        &c,
        Request::SetVoters {
            voters: vec![1, 2, 3],
        },
    )
    .await;
    refused(&r, &format!("[{cut}]"));
    let rest: Vec<u64> = (1..=3).filter(|id| *id != cut).collect();
    let r = admin(
        &c,
        Request::SetVoters {
            voters: rest.clone(),
        },
    )
    .await;
    assert_eq!(r, Ok(Reply::MembershipChanged));
    assert_eq!(members(&c).await.0, rest);
    let ids: Vec<u64> = rest.clone();
    let s = session_of(&c.propose_among(&ids, open(60_000)).await);
    assert!(s.0 > 0, "the two remaining voters commit");
    // Removing a voter through remove-learner is refused.
    let r = admin(&c, Request::RemoveLearner { id: rest[0] }).await;
    refused(&r, "is a voter");
    c.shutdown().await;
}

/// Adds go one at a time, and each waits for the one before it at most the request
/// timeout T. Here five adds of nodes that never come up are sent at once; each that has
/// its turn holds it about T (it waits that long for its node to catch up). Every add is
/// answered within about 2T (a wait for its turn, then its own), and at least one is
/// answered "in progress" (of the four behind the first, at most one can have its turn
/// before its wait ends). Before, they queued: the fifth was answered after about 5T.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_learner_waits_for_the_one_before_it_a_bounded_time() {
    const T_MS: u64 = 1000;
    let c = Cluster::start_with("members-turn", 300, T_MS).await;
    let node = c.nodes[&c.leader().await].clone();
    let adds: Vec<_> = (9..14u64)
        .map(|id| {
            let node = node.clone();
            tokio::spawn(async move {
                let (sink, _rx, _) = PushSink::new(PUSH_BACKLOG);
                let addr = NodeAddr {
                    raft: format!("mem:{id}"),
                    client: format!("mem:{id}"),
                };
                let started = Instant::now();
                let req = Request::AddLearner { id, addr };
                let r = node.handle_request(req, node.next_conn_id(), &sink).await;
                (r, started.elapsed())
            })
        })
        .collect();
    let mut in_progress = 0;
    for add in adds {
        let (r, took) = add.await.unwrap();
        match &r {
            Err(ClientError::Unavailable(m)) if m.contains("in progress") => in_progress += 1,
            Err(ClientError::Unavailable(m)) if m.contains("is a learner now") => {}
            other => panic!("{other:?}"),
        }
        assert!(
            took < Duration::from_millis(2 * T_MS + 1500),
            "an add answered after {took:?}: {r:?}"
        );
    }
    assert!(in_progress >= 1, "no add was answered \"in progress\"");
    c.shutdown().await;
}

/// A keep-alive of `session` proposed straight to node `l` (retrying while it is not ready:
/// once `l` is the only voter, the others no longer follow it, so no majority of live
/// nodes names it leader). Returns the result and when it came back.
async fn keep_alive_at(c: &Cluster, l: NodeId, session: fencelock::SessionId) -> CmdResult {
    let start = Instant::now();
    loop {
        match c.nodes[&l].propose_op(c.op(keep_alive(session))).await {
            Ok(r) => return r,
            Err(ClientError::NotLeader { .. }) | Err(ClientError::Unavailable(_))
                if start.elapsed() < Duration::from_secs(10) =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("keep-alive on node {l}: {e}"),
        }
    }
}

/// A leader whose logical time lags its clock (its quorum stalled several times, each
/// stall's time not credited) has its two followers removed within its term, so it is a
/// quorum by itself. Its logical time must carry on from where it was — not jump to the
/// time since it began to lead, which would expire a session its client kept alive
/// within the ttl: between two stamps logical time advances by no more than the time
/// between them, and the session stays alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_voters_down_to_the_leader_does_not_make_its_time_jump() {
    let c = Cluster::start_with("members-clock", 100, 2000).await;
    let l = c.leader().await;
    let term = c.nodes[&l].raft.metrics().borrow().current_term;
    let followers: Vec<NodeId> = (1..=3).filter(|id| *id != l).collect();
    let opened = c.propose(open(1500)).await;
    let s = session_of(&opened);
    let (n_start, w_start) = (keep_alive_at(&c, l, s).await.now, Instant::now());
    // Stall the quorum ten times for 350 ms (less than the maximum election timeout, so
    // the leader stays and keeps its term): all but ~150 ms of each stall is not credited.
    // The session is kept alive after every stall.
    for _ in 0..10 {
        for f in &followers {
            c.net.lose_calls(l, *f);
        }
        tokio::time::sleep(Duration::from_millis(350)).await;
        c.net.heal();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = keep_alive_at(&c, l, s).await;
        assert!(r.reply.is_ok(), "kept alive: {:?}", r.reply);
    }
    let w0 = Instant::now();
    let n0 = keep_alive_at(&c, l, s).await.now;
    let lag = (w0 - w_start).as_millis() as i64 - (n0 - n_start) as i64;
    assert!(
        lag >= 800,
        "the setup failed: logical time lags the clock by only {lag} ms"
    );
    let r = admin(&c, Request::SetVoters { voters: vec![l] }).await;
    assert_eq!(r, Ok(Reply::MembershipChanged));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = keep_alive_at(&c, l, s).await;
    let w1 = Instant::now();
    assert_eq!(
        c.nodes[&l].raft.metrics().borrow().current_term,
        term,
        "the setup failed: the leader changed terms"
    );
    let advanced = r.now - n0;
    let wall = (w1 - w0).as_millis() as u64;
    eprintln!("lag {lag} ms; after the change: {advanced} ms of logical time in {wall} ms");
    // n0 was stamped after w0 and r before w1; both sides are whole milliseconds, so
    // truncation can cost 1 ms.
    assert!(
        advanced <= wall + 1,
        "logical time jumped: {advanced} ms in {wall} ms of the leader's clock (it lagged by {lag} ms)"
    );
    assert!(
        r.reply.is_ok(),
        "the session kept alive expired: {:?}",
        r.reply
    );
    c.shutdown().await;
}

/// Voters joining a node that led alone: it does not step back for want of
/// acknowledgements it never needed while alone. It judged its quorum from when it began
/// to lead, long past the election timeout, and stepped back at the first look after the
/// change, before a follower could answer: the change could not commit while it held
/// back, and clients were told `NotLeader` for about twice the election timeout. Now the
/// change commits in the same term, the leader never stepping back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voters_joining_a_node_that_led_alone_do_not_make_it_step_back() {
    let c = Cluster::start_with("members-grow", 100, 2000).await;
    let l = c.leader().await;
    let all: Vec<NodeId> = (1..=3).collect();
    let Ok(Reply::Members { voters, .. }) = admin(&c, Request::Members).await else {
        panic!("no members")
    };
    let r = admin(&c, Request::SetVoters { voters: vec![l] }).await;
    assert_eq!(r, Ok(Reply::MembershipChanged));
    let term = c.nodes[&l].raft.metrics().borrow().current_term;
    // Alone for longer than the maximum election timeout (600 ms); the others come back
    // as learners, which the leader replicates to but needs no answer from.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (id, addr) in voters.into_iter().filter(|(id, _)| *id != l) {
        let r = admin(&c, Request::AddLearner { id, addr }).await;
        assert_eq!(r, Ok(Reply::MembershipChanged), "node {id}");
    }
    let stepped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watching = {
        let (node, stepped) = (c.nodes[&l].clone(), stepped.clone());
        tokio::spawn(async move {
            loop {
                if node.elector().stepped_back() {
                    stepped.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let r = admin(
        &c,
        Request::SetVoters {
            voters: all.clone(),
        },
    )
    .await;
    assert_eq!(r, Ok(Reply::MembershipChanged));
    tokio::time::sleep(Duration::from_millis(300)).await;
    watching.abort();
    assert!(
        !stepped.load(std::sync::atomic::Ordering::SeqCst),
        "the leader stepped back when voters joined it"
    );
    assert_eq!(c.nodes[&l].raft.metrics().borrow().current_term, term);
    assert_eq!(members(&c).await.0, all);
    c.shutdown().await;
}

/// A membership change is judged on the leader, from its membership confirmed as the
/// leader's. A node cut off before a learner was added has never seen it: asked to remove
/// it, it used to answer done from its own view (so `remove-learner` exited 0 and the
/// learner stayed a member, its certificate trusted), and asked to make it a voter, it
/// refused it as no member (a view that lags). Those two are what the fix changed; an add
/// there, and a removal asked of a follower in touch with the leader, went on to openraft,
/// which answered that it does not lead, before as now. Each answers so, and the learner
/// is still a member until the leader removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_lead_never_judges_a_membership_change() {
    let c = Cluster::start_with("members-judged", 300, 600).await;
    let l = c.leader().await;
    let cut = (1..=3).find(|id| *id != l).unwrap();
    c.net.isolate(cut);
    let addr = NodeAddr {
        raft: "mem:9".into(),
        client: "mem:9".into(),
    };
    let r = admin(
        &c,
        Request::AddLearner {
            id: 9,
            addr: addr.clone(),
        },
    )
    .await;
    assert!(matches!(r, Err(ClientError::Unavailable(_))), "{r:?}");
    assert_eq!(members(&c).await, (vec![1, 2, 3], vec![9]));
    for req in [
        Request::RemoveLearner { id: 9 },
        Request::AddLearner { id: 9, addr },
        Request::SetVoters {
            voters: vec![1, 2, 3, 9],
        },
    ] {
        let r = ask(&c, cut, req.clone()).await;
        assert!(
            matches!(
                r,
                Err(ClientError::NotLeader { .. } | ClientError::Unavailable(_))
            ),
            "{req:?} on the cut-off node: {r:?}"
        );
        assert_eq!(members(&c).await, (vec![1, 2, 3], vec![9]), "{req:?}");
    }
    // A follower in touch with the leader sends the caller there too.
    let follower = (1..=3).find(|id| *id != l && *id != cut).unwrap();
    let r = ask(&c, follower, Request::RemoveLearner { id: 9 }).await;
    assert!(matches!(r, Err(ClientError::NotLeader { .. })), "{r:?}");
    assert_eq!(members(&c).await, (vec![1, 2, 3], vec![9]));
    let r = admin(&c, Request::RemoveLearner { id: 9 }).await;
    assert_eq!(r, Ok(Reply::MembershipChanged));
    assert_eq!(members(&c).await, (vec![1, 2, 3], vec![]));
    c.shutdown().await;
}
