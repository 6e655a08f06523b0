//! Membership changes that cannot brick the cluster: a voter set is accepted only if every
//! new voter is a member that is reachable and caught up (`src/membership.rs`).

mod common;

use std::time::{Duration, Instant};

use common::{open, session_of, Cluster};
use fencelock_server::protocol::{ClientError, Reply, Request};
use fencelock_server::state_machine::{PushSink, PUSH_BACKLOG};
use fencelock_server::types::NodeAddr;

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
