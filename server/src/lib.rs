//! # fencelock-server — the fencelock core replicated by openraft
//!
//! A lock server whose state machine is the core's [`fencelock::LockService`], replicated
//! by [openraft](https://docs.rs/openraft) 0.9 over TCP (TLS, [`tls`]); a client library
//! ([`client`]) and a CLI (`fencelock`). See `server/README.md` for running a cluster and
//! what is guaranteed under which faults.
//!
//! [`auth`]: only a session's owner acts for it (its credential is checked where inputs
//! are applied), and bearer tokens grant roles; [`tls`]: TLS for clients, mutual TLS
//! between nodes; [`membership`]: voter sets that keep a live quorum; [`settings`]: every
//! node of a cluster runs with the same table sizes and core settings, checked between peers
//! and across restarts.
//!
//! Layers, bottom up: [`log_store`] (durable Raft log and vote), [`state_machine`] (the
//! core under openraft), [`proposer`] (concurrent requests batched into one entry),
//! [`election`] (pre-vote, leader stickiness, check-quorum and the quorum-credited time
//! openraft 0.9 lacks), [`node`] (a node: Raft + the leader's logical clock + request handling), [`net`] (TCP transport for Raft RPCs and the client protocol),
//! [`mem_network`] (an in-process network with faults, for tests), [`client`]; for
//! operators, [`ops`] (health, metrics, a backup over HTTP for clusters without tokens, restore), [`export`] (the
//! applied history as a recording the demo page replays) and [`disk`] (a full disk stalls
//! writes instead of killing the node); [`stdio`] (what the binaries print, without a
//! panic when the reader is gone).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod admission;
pub mod auth;
pub mod client;
pub mod disk;
pub mod election;
pub mod export;
pub mod frame;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod log_store;
pub mod membership;
// openraft's RPC error types are large; their size is dictated by the RaftNetwork trait.
#[allow(clippy::result_large_err)]
pub mod mem_network;
#[allow(clippy::result_large_err)]
pub mod net;
pub mod node;
pub mod ops;
pub mod proposer;
pub mod protocol;
pub mod settings;
pub mod state_machine;
pub mod stdio;
pub mod tls;
pub mod types;
