//! Membership changes that cannot brick the cluster.
//!
//! openraft runs a voter change through joint consensus, so the change itself never leaves
//! a moment without a majority of the old and of the new voters — but it will happily make
//! voters of nodes that do not exist, are down, or are far behind, and a voter set without
//! a live majority can never commit again (not even the change that would repair it).
//! So before a node proposes a voter set ([`check_voters`]):
//!
//! * every new voter must be a member already (added as a learner first);
//! * every new voter must be **reachable and caught up now**: the leader commits a probe
//!   entry, and each of them must acknowledge it (openraft's replication progress reaches
//!   its index) within the request timeout. A node that is down, partitioned, or still
//!   copying a snapshot is refused, by name, and nothing changes.
//!
//! Requiring all of the new voters — not just a majority — to be live is deliberate: the
//! nodes one wants to drop are simply left out of the set, and a set whose members are all
//! live has a live majority by construction (the joint phase also needs the old set's
//! majority, which the probe's commit just proved).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fencelock::{Input, Tick};

use crate::node::Node;
use crate::protocol::ClientError;
use crate::types::{NodeId, Op};

/// Refuses `voters` unless each is a member that is reachable and caught up (see the
/// module docs). Call on the leader. Cost: one replicated write (the probe) and polling of
/// the leader's replication metrics for up to `timeout`.
///
/// Errors: `BadRequest` naming a node that is not a member, or the nodes that did not
/// acknowledge the probe in time; `NotLeader` / `Unavailable` from the probe's write.
pub async fn check_voters(
    node: &Node,
    voters: &BTreeSet<NodeId>,
    timeout: Duration,
) -> Result<(), ClientError> {
    {
        let m = node.raft.metrics().borrow().clone();
        let members = m.membership_config.membership();
        if let Some(id) = voters.iter().find(|id| members.get_node(id).is_none()) {
            return Err(ClientError::BadRequest(format!(
                "node {id} is not a member: add it as a learner first"
            )));
        }
    }
    check_live(node, voters, timeout).await
}

/// Refuses unless every node of `ids` (but this one) acknowledges a probe entry committed
/// now within `timeout`: it is reachable and has the whole log. Cost and errors: as
/// [`check_voters`] (without the membership check).
pub async fn check_live(
    node: &Node,
    ids: &BTreeSet<NodeId>,
    timeout: Duration,
) -> Result<(), ClientError> {
    let voters = ids;
    // A bare tick at the current time changes nothing in the core; its entry is what each
    // node must acknowledge.
    let probe = node
        .propose_op(Op::Input(Input::Tick { now: Tick(0) }))
        .await?;
    let index = probe.index;
    let start = Instant::now();
    loop {
        let lagging: Vec<NodeId> = {
            let m = node.raft.metrics().borrow().clone();
            voters
                .iter()
                .copied()
                .filter(|id| *id != node.id)
                .filter(|id| {
                    let matched = m.replication.as_ref().and_then(|r| r.get(id).copied());
                    matched.flatten().is_none_or(|l| l.index < index)
                })
                .collect()
        };
        if lagging.is_empty() {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            // A node that refuses this node's settings is named with the reason.
            let why: Vec<String> = lagging
                .iter()
                .filter_map(|id| node.elector().settings().refusal_by(*id))
                .collect();
            let why = if why.is_empty() {
                String::new()
            } else {
                format!("; {}", why.join("; "))
            };
            return Err(ClientError::BadRequest(format!(
                "nodes {lagging:?} are not reachable and caught up (they did not \
                 acknowledge log index {index} within {} ms){why}",
                timeout.as_millis()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
