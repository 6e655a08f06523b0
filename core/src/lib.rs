//! # fencelock — a lock-service core that gives every grant a fencing token
//!
//! A distributed lock is easy to grant and hard to make safe. A holder paused by a
//! 25-second garbage-collection pause comes back believing it still holds the lock, after
//! the service expired its session and granted the lock to someone else. Consensus gives
//! agreement on *who* holds the lock; only a **fencing token checked by the resource**
//! stops the stale holder. This crate ships both halves:
//!
//! * [`LockService`] — sessions, FIFO wait queues, shared/exclusive locks, a global fencing
//!   revision, expiry on logical ticks, lock-delay, try/timed/cancelled acquire, idempotent
//!   retries, leader election ([`LockService::campaign`]).
//! * [`FenceGate`] — the resource-side check: highest token per resource, lower refused.
//! * [`SessionKeeper`] — the client-side lease view: heartbeat due? may I still act?
//!
//! It is `no_std`, allocates nothing, has no `unsafe`, reads no clock and does no I/O. It
//! is a pure function of its inputs, so the same inputs give the same outputs and the
//! same snapshot bytes on every platform — which is what a replicated state machine under
//! a consensus log needs.
//!
//! ```text
//!        host: transport, clock, storage, consensus log (all its own)
//!          │ Input (commands, Tick{now})          ▲ Output (events, each names a session)
//!          ▼                                      │
//!   ┌──────────────────────── LockService ─────────────────────────┐
//!   │ sessions ── deadline heap      locks ── holders + FIFO queue │
//!   │ revision (fencing tokens)      lock-delay heap · wait heap   │
//!   └──────────────────────────────────────────────────────────────┘
//!          │ Granted{token}                                  client: SessionKeeper
//!          ▼                                                   (heartbeats, may_act)
//!   resource: FenceGate::admit(resource, token) → Ok / Stale{token, highest}
//! ```
//!
//! ## Tutorial
//!
//! **1. Give it storage and a config.** Capacity is fixed at construction: fixed arrays
//! ([`ArrayStorage`]), slices you own ([`SliceStorage`]) or, with feature `alloc`,
//! `VecStorage` sized at run time. See [`storage`] for bytes per entry.
//!
//! ```
//! use fencelock::{ArrayStorage, Config, LockService, Mode, Output, Tick, Wait};
//!
//! let mut svc = LockService::new(ArrayStorage::<8, 8, 16>::new(), Config::default()).unwrap();
//! let mut events = Vec::new();
//! let mut out = |o: Output| events.push(o);
//!
//! // 2. Open sessions (ttl in ticks) and acquire.
//! let a = svc.open_session(10, &mut out).unwrap();
//! let b = svc.open_session(10, &mut out).unwrap();
//! svc.acquire(a, "jobs/reindex", Mode::Exclusive, Wait::Forever, None, &mut out).unwrap();
//! svc.acquire(b, "jobs/reindex", Mode::Exclusive, Wait::Forever, None, &mut out).unwrap();
//!
//! // 3. Time passes only through ticks. A never heartbeats; B does.
//! svc.tick(Tick(5), &mut out).unwrap();
//! svc.keep_alive(b, None, &mut out).unwrap();
//! svc.tick(Tick(10), &mut out).unwrap(); // A expires; B is granted, with a higher token
//! drop(out);
//! assert!(matches!(events.last(), Some(Output::Granted { session, token, .. })
//!     if *session == b && token.0 == 2));
//! ```
//!
//! **4. Fence the resource.** Every write carries the token; the resource admits it
//! through a [`FenceGate`]:
//!
//! ```
//! use fencelock::{Error, FenceGate, GateRow, Token};
//!
//! let mut gate = FenceGate::new([GateRow::EMPTY; 4]);
//! gate.admit("ledger", Token(35)).unwrap();              // B's write
//! assert_eq!(gate.admit("ledger", Token(34)),            // A's late write after its pause
//!            Err(Error::Stale { token: Token(34), highest: Token(35) }));
//! ```
//!
//! **5. Run the loop.** The host owns the clock, the transport and (when replicated) the
//! log. Ticks are inputs like any other; in a replicated deployment they are log entries.
//!
//! ```text
//! loop {
//!     wait for: a client message, or the clock reaching svc.poll_timeout()
//!     input = the message decoded (Input::from_frame), or Input::Tick { now }
//!     // replicated: propose `input` to the log; apply each *committed* entry below
//!     match svc.handle(input, &mut |o| route(o.session(), o)) {
//!         Ok(())   => {}                       // outputs already routed, in order
//!         Err(e)   => reply(client, e),        // nothing changed
//!     }
//! }
//! ```
//!
//! `route` sends each [`Output`] to the session it names: a `Granted` wakes exactly the
//! waiter it names (no polling, no thundering herd).
//!
//! **6. Persist.** [`LockService::snapshot`] writes canonical, versioned bytes;
//! [`LockService::restore`] validates every invariant before accepting them.
//!
//! ```
//! # use fencelock::{Config, LockService, Mode, VecStorage, Wait};
//! # let mut svc = LockService::new(VecStorage::new(4, 4, 8), Config::default()).unwrap();
//! # let a = svc.open_session(10, &mut |_| {}).unwrap();
//! # svc.acquire(a, "l", Mode::Exclusive, Wait::None, None, &mut |_| {}).unwrap();
//! let bytes = svc.snapshot_vec();
//! let restored = LockService::restore(VecStorage::new(4, 4, 8), &bytes)
//!     .map_err(|(_storage, e)| e)
//!     .unwrap();
//! assert_eq!(restored.snapshot_vec(), bytes); // same state, same bytes
//! ```
//!
//! **7. Keep the client honest.** A [`SessionKeeper`] runs in the client, on the client's
//! clock: it says when to heartbeat and whether the lease is still safe to act on.
//!
//! ```
//! use fencelock::{Lease, SessionKeeper};
//!
//! let mut keeper = SessionKeeper::new(10, 3, 2).unwrap(); // ttl, interval, margin
//! keeper.heartbeat_sent(0).unwrap();
//! keeper.heartbeat_acked(0).unwrap();
//! assert!(keeper.may_act(7));
//! assert_eq!(keeper.lease(8), Lease::Jeopardy { expires_at: 10 }); // stop acting now
//! ```
//!
//! ## Memory
//!
//! All memory is the host's: one row per session (96 bytes), per live lock entry (136)
//! and per hold or wait (72), the same on 64- and 32-bit targets; the table and its
//! reasoning are in [`storage`]. Capacities are fixed at construction; a full table is a
//! typed error ([`Error::CapacityExceeded`]), never a panic.
//!
//! ## Guarantees
//!
//! | guarantee | how |
//! |---|---|
//! | mutual exclusion | one exclusive holder, or shared holders only |
//! | fencing | each grant's token is greater than every earlier one, never 0, kept across eviction and restore |
//! | FIFO, no herd | waiters granted in arrival order; a release wakes one exclusive waiter or the run of shared ones at the head |
//! | no grant to the dead | in a tick, expiry precedes every grant |
//! | lock-delay | after an *expiry*, the lock is not granted again for `lock_delay` ticks |
//! | atomic errors | a refused input changes nothing and emits nothing |
//! | idempotent retries | a repeat of a session's latest request number applies nothing twice; it replays the recorded answer, or for an acquire answers from the claim now (granted, queued at its current position, or how the recorded wait or hold ended) |
//! | determinism | same inputs → same outputs and snapshot bytes on every platform |
//! | nothing lost | outputs go straight to the host's sink; bound per input documented on [`LockService`] |
//! | no panic on input | every refusal is a typed [`Error`]; frames and snapshots are validated before use; a full table is [`Error::CapacityExceeded`] |
//!
//! ## When to pick what (the seeds' table, mapped)
//!
//! | situation | choose | in fencelock |
//! |---|---|---|
//! | avoid duplicate work; a rare double run is harmless | a simple TTL lock | [`LockService`] alone, [`Wait::None`] |
//! | correctness matters (money, shared state) | consensus sessions + fencing | [`LockService`] replicated under a log + [`FenceGate`] at the resource + [`SessionKeeper`] at the client |
//! | leader election | consensus lock; the token is the epoch | [`LockService::campaign`] / [`LockService::leader`]; downstream [`FenceGate`] |
//! | the resource cannot check a token | redesign: idempotent operations, or avoid the lock | nothing here makes it safe: a [`FenceGate`] needs the resource's cooperation |
//! | many waiters on one lock | an ordered wait queue with watches | FIFO queues; one [`Output::Granted`] per release is the watch firing |
//! | the lease cannot be renewed | treat it as fatal: stop work | [`SessionKeeper::may_act`] turns false at `ttl − margin`; [`SessionKeeper::session_lost`] on `SessionExpired` |
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(feature = "alloc")]
extern crate alloc;

mod election;
mod error;
mod gate;
mod input;
mod keeper;
mod output;
mod reply;
mod service;
mod sink;
mod snapshot;
pub mod storage;
mod table;
mod types;
mod wire;

pub use election::Leader;
pub use error::{Error, Table};
pub use gate::{FenceGate, GateRow, GATE_MAGIC, GATE_VERSION};
pub use input::Input;
pub use keeper::{Lease, SessionKeeper, KEEPER_MEMORY};
pub use output::{Output, ReleaseReason};
pub use reply::Reply;
pub use service::{
    check_rows, Capacity, Config, Holder, LockService, SessionInfo, Usage, Waiter, MAX_ROWS,
};
pub use sink::Sink;
pub use snapshot::{SNAPSHOT_MAGIC, SNAPSHOT_VERSION};
#[cfg(feature = "alloc")]
pub use storage::VecStorage;
pub use storage::{ArrayStorage, SliceStorage, Storage};
pub use types::{LockName, Mode, SessionId, Tick, Token, Wait, MAX_NAME_LEN};
pub use wire::MAX_FRAME_LEN;

/// The examples of `core/README.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust example of the repository's README runs as a doctest, so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct RootReadme;
