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
//!
//! And a membership a peer sends (in an entry or a snapshot) is capped and checked as it
//! decodes ([`decode_membership`]): one that names a voter without addresses would stop
//! Raft on every node that stored it, at every start.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fencelock::{Input, Tick};

use crate::node::Node;
use crate::protocol::ClientError;
use crate::types::{NodeAddr, NodeId, Op};

/// Refuses `voters` unless each is a member that is reachable and caught up (see the
/// module docs). Call on the leader. Cost: one replicated write (the probe) and polling of
/// the leader's replication metrics for up to `timeout`.
///
/// Errors: `BadRequest` for no voters (before anything is written), naming a node that is
/// not a member, or the nodes that did not acknowledge the probe in time; `NotLeader` /
/// `Unavailable` from the leadership confirmation or the probe's write.
pub async fn check_voters(
    node: &Node,
    voters: &BTreeSet<NodeId>,
    timeout: Duration,
) -> Result<(), ClientError> {
    // Refused before the probe commits anything: a cluster with no voters cannot be.
    if voters.is_empty() {
        return Err(ClientError::BadRequest(
            "no voters named: a cluster needs at least one".into(),
        ));
    }
    // Judged against the leader's membership, confirmed as the leader's: another node's
    // may lag the latest change (`NotLeader` sends the client there).
    node.linearizable().await?;
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

/// The most members (voters and learners) a membership may name: far above any cluster
/// this server is built for, and what bounds the memory a peer's membership decodes into
/// (an empty voter set is one byte on the wire and some 24 in memory; see
/// [`decode_membership`]).
pub const MAX_MEMBERS: usize = 256;

/// The longest address (`raft` or `client`) a member may have, in bytes: the limit
/// `AddLearner` has always applied.
pub const MAX_ADDR_LEN: usize = 255;

/// The most bytes a membership may take in a log entry ([`membership_bytes`]): as many as
/// the largest batch of ops, so that [`crate::net::MAX_ENTRY_BYTES`] bounds an entry of
/// either kind, and an AppendEntries fits every node's frame limit
/// ([`crate::net::MIN_RAFT_FRAME`]). `add-learner`, and a cluster's first members
/// ([`check_members`]), are refused past it: all [`MAX_MEMBERS`] of addresses of up to
/// 100 bytes fit, or about 120 of the longest.
pub const MAX_MEMBERSHIP_BYTES: usize = crate::proposer::MAX_BATCH * crate::net::MAX_OP_BYTES;

/// Why `members` (a membership's, or one about to be) would not fit
/// [`MAX_MEMBERSHIP_BYTES`], in words; `None` when it fits. Cost: O(members).
pub fn oversized<'a>(members: impl IntoIterator<Item = (NodeId, &'a NodeAddr)>) -> Option<String> {
    let bytes = membership_bytes(members);
    (bytes > MAX_MEMBERSHIP_BYTES).then(|| {
        format!(
            "the membership would take up to {bytes} bytes in a log entry, more than \
             {MAX_MEMBERSHIP_BYTES}: give the members shorter addresses"
        )
    })
}

/// An upper bound on the bytes the membership of `nodes` takes in a log entry, whatever
/// its voters: a joint config, two of them, each naming every member, beside the members'
/// addresses. Cost: O(members).
pub fn membership_bytes<'a>(nodes: impl IntoIterator<Item = (NodeId, &'a NodeAddr)>) -> usize {
    let varint = |n: u64| (64 - n.leading_zeros()).max(1).div_ceil(7) as usize;
    // The lengths of the config list, of each config and of the node map (each at most 3
    // bytes for at most MAX_MEMBERS), then per member: its id in either config and as the
    // map's key, and its two addresses with their lengths.
    nodes.into_iter().fold(4 * 3, |n, (id, a)| {
        let text = |s: &str| varint(s.len() as u64) + s.len();
        n + 3 * varint(id) + text(&a.raft) + text(&a.client)
    })
}

/// Whether `a` can be a node's `host:port`: 1 to [`MAX_ADDR_LEN`] bytes with no whitespace
/// or control character (which would let it forge a line where `members` and `status`
/// print it). What `add-learner` takes, and what a client follows as a leader hint.
/// Cost: O(a).
pub fn address_text(a: &str) -> bool {
    !a.is_empty()
        && a.len() <= MAX_ADDR_LEN
        && !a.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// The wire form of openraft's `Membership` (its fields, in its order), each list capped
/// as it decodes.
#[derive(serde::Deserialize)]
struct MembershipWire {
    #[serde(deserialize_with = "capped_configs")]
    configs: Vec<Vec<NodeId>>,
    #[serde(deserialize_with = "capped_nodes")]
    nodes: Vec<(NodeId, crate::types::NodeAddr)>,
}

/// At most two configs (a joint one), each of at most [`MAX_MEMBERS`] voters.
fn capped_configs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Vec<NodeId>>, D::Error> {
    struct Config(Vec<NodeId>);
    impl<'de> serde::Deserialize<'de> for Config {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            crate::types::capped_vec::<D, NodeId, MAX_MEMBERS>(d).map(Config)
        }
    }
    crate::types::capped_vec::<D, Config, 2>(d).map(|v| v.into_iter().map(|c| c.0).collect())
}

/// At most [`MAX_MEMBERS`] (id, addresses) entries: a map on the wire.
fn capped_nodes<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<(NodeId, crate::types::NodeAddr)>, D::Error> {
    struct Capped;
    impl<'de> serde::de::Visitor<'de> for Capped {
        type Value = Vec<(NodeId, crate::types::NodeAddr)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a map of at most {MAX_MEMBERS} members")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let said = map.size_hint().unwrap_or(0);
            if said > MAX_MEMBERS {
                return Err(serde::de::Error::invalid_length(said, &self));
            }
            let mut out = Vec::with_capacity(said);
            while let Some(entry) = map.next_entry()? {
                if out.len() == MAX_MEMBERS {
                    return Err(serde::de::Error::invalid_length(MAX_MEMBERS + 1, &self));
                }
                out.push(entry);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Capped)
}

/// What is wrong with a membership a peer sent (or a snapshot holds), if anything (the
/// counts are capped as it decodes, before this): no config (unless, with `empty_ok`, no
/// member either: a cluster not yet initialised), an empty one, a voter without addresses — openraft unwraps every
/// voter's node when it campaigns or replicates, so such an entry, once in the log, would
/// stop Raft on every start — a node named twice, or an address over [`MAX_ADDR_LEN`]
/// bytes. Cost: O(members · log members).
fn membership_fault(
    configs: &[Vec<NodeId>],
    nodes: &[(NodeId, crate::types::NodeAddr)],
    empty_ok: bool,
) -> Option<String> {
    if configs.is_empty() && !(empty_ok && nodes.is_empty()) {
        return Some("a membership without a voter set".into());
    }
    let known: BTreeSet<NodeId> = nodes.iter().map(|(id, _)| *id).collect();
    if known.len() != nodes.len() {
        return Some("a member named twice".into());
    }
    for c in configs {
        if c.is_empty() {
            return Some("an empty voter set".into());
        }
        if let Some(v) = c.iter().find(|v| !known.contains(v)) {
            return Some(format!("voter {v} has no addresses"));
        }
    }
    if let Some((id, _)) = nodes
        .iter()
        .find(|(_, a)| a.raft.len() > MAX_ADDR_LEN || a.client.len() > MAX_ADDR_LEN)
    {
        return Some(format!(
            "member {id} has an address over {MAX_ADDR_LEN} bytes"
        ));
    }
    None
}

/// The members a node starts a cluster with (`--init`, a restore): refused as a peer
/// would refuse their membership (one voter set of them all), so that nothing is written
/// that the other nodes, or this one at its next start, cannot read. Errors: what is
/// wrong, in words. Cost: O(members · log members).
pub fn check_members(
    members: &std::collections::BTreeMap<NodeId, crate::types::NodeAddr>,
) -> Result<(), String> {
    if members.is_empty() || members.len() > MAX_MEMBERS {
        return Err(format!(
            "a cluster has 1 to {MAX_MEMBERS} members, not {}",
            members.len()
        ));
    }
    let voters: Vec<NodeId> = members.keys().copied().collect();
    let nodes: Vec<_> = members.iter().map(|(id, a)| (*id, a.clone())).collect();
    membership_fault(&[voters], &nodes, false).map_or(Ok(()), Err)?;
    // As `add-learner` refuses a member past it (a membership a peer already holds is
    // read whatever its size: the bound is for what is written from now on).
    oversized(members.iter().map(|(id, a)| (*id, a))).map_or(Ok(()), Err)
}

/// Decodes openraft's `Membership` (its own encoding) with its lists capped as they
/// decode ([`MAX_MEMBERS`], two configs) and refuses one `membership_fault` finds, so
/// that no peer's frame (a member's included) decodes into a membership larger than a
/// few kilobytes, or one that would stop Raft. For `#[serde(deserialize_with)]`.
/// Errors: the decoder's, naming the fault. Cost: O(members · log members).
pub fn decode_membership<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<crate::types::Membership, D::Error> {
    decode(d, false)
}

fn decode<'de, D: serde::Deserializer<'de>>(
    d: D,
    empty_ok: bool,
) -> Result<crate::types::Membership, D::Error> {
    use serde::Deserialize;
    let w = MembershipWire::deserialize(d)?;
    if let Some(fault) = membership_fault(&w.configs, &w.nodes, empty_ok) {
        return Err(serde::de::Error::custom(fault));
    }
    let configs = w
        .configs
        .into_iter()
        .map(|c| c.into_iter().collect())
        .collect();
    let nodes: std::collections::BTreeMap<_, _> = w.nodes.into_iter().collect();
    Ok(openraft::Membership::new(configs, nodes))
}

/// [`decode_membership`] for openraft's `StoredMembership` (its log id, then the
/// membership): a membership without a log id (a cluster not yet initialised) may be
/// empty. For `#[serde(deserialize_with)]`. Errors and cost: as there.
pub fn decode_stored<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<crate::types::StoredMembership, D::Error> {
    use serde::Deserialize;
    struct Stored(crate::types::StoredMembership);
    impl<'de> Deserialize<'de> for Stored {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            /// openraft's `StoredMembership`, its fields in its order.
            #[derive(Deserialize)]
            struct Wire {
                log_id: Option<crate::types::LogId>,
                #[serde(deserialize_with = "decode_any")]
                membership: crate::types::Membership,
            }
            let Wire {
                log_id,
                membership: m,
            } = Wire::deserialize(d)?;
            if log_id.is_some() && m.get_joint_config().is_empty() {
                return Err(serde::de::Error::custom("a membership without a voter set"));
            }
            Ok(Stored(openraft::StoredMembership::new(log_id, m)))
        }
    }
    Stored::deserialize(d).map(|s| s.0)
}

/// The longest snapshot id taken from a peer or a file. A node names its snapshots
/// `<term>-<node>-<index>-<n>` (or `backup-<index>`, `restored-<index>`): well under
/// it. A longer one would otherwise be bounded by the frame alone (8 MiB), and is logged
/// and answered with when a chunk is refused.
pub const MAX_SNAPSHOT_ID: usize = 256;

/// openraft's `SnapshotMeta` (its fields in its order) with its membership decoded by
/// [`decode_stored`]: for a snapshot's meta from a peer or in a file. For
/// `#[serde(deserialize_with)]`. Errors: as there, and a snapshot id over
/// [`MAX_SNAPSHOT_ID`] bytes. Cost: as there.
pub fn decode_meta<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<crate::types::SnapshotMeta, D::Error> {
    use serde::Deserialize;
    /// openraft's `SnapshotMeta`, its fields in its order.
    #[derive(Deserialize)]
    struct Wire {
        last_log_id: Option<crate::types::LogId>,
        #[serde(deserialize_with = "decode_stored")]
        last_membership: crate::types::StoredMembership,
        snapshot_id: String,
    }
    let w = Wire::deserialize(d)?;
    if w.snapshot_id.len() > MAX_SNAPSHOT_ID {
        return Err(serde::de::Error::custom(format_args!(
            "a snapshot id of {} bytes (at most {MAX_SNAPSHOT_ID})",
            w.snapshot_id.len()
        )));
    }
    Ok(openraft::SnapshotMeta {
        last_log_id: w.last_log_id,
        last_membership: w.last_membership,
        snapshot_id: w.snapshot_id,
    })
}

fn decode_any<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<crate::types::Membership, D::Error> {
    decode(d, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A snapshot's meta decodes with an id of up to [`MAX_SNAPSHOT_ID`] bytes and is
    /// refused with a longer one (which would be logged and echoed when a chunk is refused).
    #[test]
    fn a_snapshot_id_past_its_bound_is_refused() {
        #[derive(serde::Deserialize)]
        struct Meta(#[serde(deserialize_with = "decode_meta")] crate::types::SnapshotMeta);
        let meta = |n: usize| {
            postcard::to_allocvec(&openraft::SnapshotMeta::<u64, NodeAddr> {
                last_log_id: None,
                last_membership: openraft::StoredMembership::default(),
                snapshot_id: "s".repeat(n),
            })
            .unwrap()
        };
        let ok = postcard::from_bytes::<Meta>(&meta(MAX_SNAPSHOT_ID)).unwrap();
        assert_eq!(ok.0.snapshot_id.len(), MAX_SNAPSHOT_ID);
        assert!(postcard::from_bytes::<Meta>(&meta(MAX_SNAPSHOT_ID + 1)).is_err());
        assert!(postcard::from_bytes::<Meta>(&meta(1 << 20)).is_err());
    }

    /// `membership_bytes` bounds what a membership really takes (openraft's own
    /// encoding, in a joint config that names every member twice), by at most a few
    /// bytes: for small and huge ids, short and longest addresses.
    #[test]
    fn membership_bytes_bounds_the_encoding_closely() {
        for (n, id_at, len) in [
            (1, 1, 1),
            (3, 1, 14),
            (7, 1, MAX_ADDR_LEN),
            (200, 1 << 40, 3),
        ] {
            let nodes: BTreeMap<NodeId, NodeAddr> = (0..n)
                .map(|i| {
                    let a = "a".repeat(len);
                    (
                        id_at + i,
                        NodeAddr {
                            raft: a.clone(),
                            client: a,
                        },
                    )
                })
                .collect();
            let all: BTreeSet<NodeId> = nodes.keys().copied().collect();
            let joint = openraft::Membership::new(vec![all.clone(), all], nodes.clone());
            let real = postcard::to_allocvec(&joint).unwrap().len();
            let bound = membership_bytes(nodes.iter().map(|(i, a)| (*i, a)));
            assert!(
                real <= bound && bound <= real + 12,
                "{n} members: {real} > {bound}"
            );
        }
    }

    /// The members a node starts or restores a cluster with are refused, before anything
    /// is written, when a peer would refuse their membership as it decodes.
    #[test]
    fn members_no_peer_would_read_are_refused_before_a_cluster_is_made() {
        let addr = |raft: &str| NodeAddr {
            raft: raft.into(),
            client: "127.0.0.1:7101".into(),
        };
        let members = |n: u64| {
            (1..=n)
                .map(|i| (i, addr("127.0.0.1:7201")))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(check_members(&members(3)), Ok(()));
        assert_eq!(check_members(&members(MAX_MEMBERS as u64)), Ok(()));
        assert!(check_members(&members(0)).is_err());
        assert!(check_members(&members(MAX_MEMBERS as u64 + 1)).is_err());
        let long: BTreeMap<_, _> = [(1, addr(&"x".repeat(MAX_ADDR_LEN + 1)))].into();
        assert!(check_members(&long).unwrap_err().contains("address"));
        // Every member may have an address of 100 bytes; not every one of the longest.
        let wide = |len: usize| {
            (1..=MAX_MEMBERS as u64)
                .map(|i| {
                    let a = format!("{}:{i:03}", "h".repeat(len - 4));
                    (
                        i,
                        NodeAddr {
                            raft: a.clone(),
                            client: a,
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(check_members(&wide(100)), Ok(()));
        let why = check_members(&wide(MAX_ADDR_LEN)).unwrap_err();
        assert!(
            why.contains("bytes in a log entry, more than 65536"),
            "{why}"
        );
    }
}
