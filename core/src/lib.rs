//! # fencelock — a lock-service core that gives every grant a fencing token
//!
//! A distributed lock is easy to grant and hard to make safe. A holder paused by a
//! 25-second garbage-collection pause comes back believing it still holds the lock, after
//! the service expired its session and granted the lock to someone else. Consensus gives
//! agreement on *who* holds the lock; only a **fencing token checked by the resource**
//! stops the stale holder. This crate ships both halves:
//!
//! * [`LockService`] — sessions, FIFO wait queues, shared/exclusive locks and semaphores,
//!   a global fencing revision, expiry on logical ticks, lock-delay, try/timed/cancelled
//!   acquire, idempotent retries, leader election ([`LockService::campaign`]), holder
//!   labels and watches.
//! * [`FenceGate`] — the resource-side check: highest token per resource, lower refused.
//! * [`SessionKeeper`] — the client-side lease view: keep-alive due? may I still act?
//!
//! It is `no_std`, has no `unsafe`, reads no clock, does no I/O and needs no allocator:
//! the lock rules never allocate, and only the helpers of feature `alloc` do
//! (`VecStorage`, the `Vec` and `EventQueue` sinks, `LockService::snapshot_vec`). It is a
//! pure function of its inputs, so the same inputs give the same replies, events and
//! snapshot bytes on every platform — which is what a replicated state machine under a
//! consensus log needs. The contract is written down in `docs/SPEC.md` in the repository;
//! section numbers (§n) and invariants (I*n*) below refer to it.
//!
//! ```text
//!        host: transport, clock, storage, consensus log (all its own)
//!          │ Input { now, … }     ▲ Reply (to the caller)   ▲ Output events (to others)
//!          ▼                      │                         │  via the host's Sink
//!   ┌──────────────────────── LockService ─────────────────────────┐
//!   │ sessions ── deadline heap      locks ── holders + FIFO queue │
//!   │ revision (fencing tokens)      lock-delay heap · wait heap   │
//!   └──────────────────────────────────────────────────────────────┘
//!          │ Granted{token}                                  client: SessionKeeper
//!          ▼                                                   (keep-alives, may_act)
//!   resource: FenceGate::admit(resource, token) → Ok / Stale{token, highest}
//! ```
//!
//! ## Tutorial
//!
//! **1. Give it storage and a config.** Capacity is fixed at construction: fixed arrays
//! ([`ArrayStorage`]), slices you own ([`SliceStorage`]) or, with feature `alloc`,
//! `VecStorage` sized at run time. See [`storage`] for bytes per row.
//!
//! **2. Every input carries the host's `now` and returns the caller's [`Reply`].** Everything
//! else it causes — events, mostly for *other* sessions (a waiter granted, a session
//! expired) — goes to a [`Sink`], each naming the session to tell
//! ([`Output::session`]) — here a `heapless::Deque`, so not even the event buffer
//! allocates.
//!
//! ```
//! use fencelock::{ArrayStorage, Config, LockService, Mode, Output, Reply, Tick, Token, Wait};
//! use heapless::Deque;
//!
//! let mut svc = LockService::new(ArrayStorage::<8, 8, 16>::new(), Config::default()).unwrap();
//! // Room for the most events one input can emit with these capacities (8 + 2 × 16: with
//! // no watch in use, `max_events()` is at most sessions + 2 × claims).
//! let mut events: Deque<Output, 40> = Deque::new();
//!
//! let a = svc.open_session(Tick(0), 10, &mut events).unwrap().opened().unwrap();
//! let b = svc.open_session(Tick(0), 10, &mut events).unwrap().opened().unwrap();
//! let got = svc.acquire(Tick(0), a, "jobs/reindex", Mode::Exclusive, Wait::Forever, None, &mut events);
//! assert_eq!(got, Ok(Reply::Granted { mode: Mode::Exclusive, token: Token(1) }));
//! let got = svc.acquire(Tick(1), b, "jobs/reindex", Mode::Exclusive, Wait::Forever, None, &mut events);
//! assert_eq!(got, Ok(Reply::Queued { mode: Mode::Exclusive, position: 1 }));
//!
//! // 3. A stops sending keep-alives (a GC pause); B keeps its session alive at 5. No tick
//! //    is needed between messages: each input advances time to its own `now` first.
//! svc.keep_alive(Tick(5), b, None, &mut events).unwrap(); // B: expires at 15
//! svc.tick(Tick(10), &mut events).unwrap();               // A expires; B is granted
//! assert_eq!(events.pop_back(), Some(Output::Granted {
//!     session: b, lock: "jobs/reindex".try_into().unwrap(), mode: Mode::Exclusive, token: Token(2),
//! }));
//! ```
//!
//! **4. Fence the resource.** Every write carries the token; the resource admits it
//! through a [`FenceGate`] (§11):
//!
//! ```
//! use fencelock::{Error, FenceGate, GateRow, Token};
//!
//! let mut gate = FenceGate::new([GateRow::EMPTY; 4]).unwrap();
//! gate.admit("ledger", Token(35)).unwrap();              // B's write
//! assert_eq!(gate.admit("ledger", Token(34)),            // A's late write after its pause
//!            Err(Error::Stale { token: Token(34), highest: Token(35) }));
//! ```
//!
//! **5. Run the loop.** The host owns the clock, the transport and (when replicated) the
//! log. It applies each client message when it arrives, stamped with its clock, answers
//! the caller with the reply, routes each event to the session it names, and wakes at
//! [`poll_timeout`](LockService::poll_timeout) to tick. This loop runs as written (its
//! "network" is a list of timed messages; its `VecStorage` needs the `alloc` feature:
//! `fencelock = { path = "…/core", features = ["alloc"] }`):
//!
//! ```
//! use std::collections::{BTreeMap, VecDeque};
//! use fencelock::{Config, Input, LockService, Mode, Output, Reply, SessionId, Tick, VecStorage, Wait};
//!
//! # fn main() -> Result<(), fencelock::Error> {
//! let mut svc = LockService::new(VecStorage::new(16, 16, 32), Config::default())?;
//! // What clients send, with the host clock's reading when each arrives. Nobody ticks
//! // between them: the keep-alives at 3, 6 and 9 each move the deadline from their own time.
//! let mut inbox: VecDeque<(u64, Input)> = VecDeque::from([
//!     (0, Input::OpenSession { now: Tick(0), ttl: 10 }),
//!     (3, Input::KeepAlive { now: Tick(0), session: SessionId(1), request: None }),
//!     (6, Input::KeepAlive { now: Tick(0), session: SessionId(1), request: None }),
//!     (9, Input::KeepAlive { now: Tick(0), session: SessionId(1), request: None }),
//!     (12, Input::Acquire { now: Tick(0), session: SessionId(1), lock: "l".try_into()?,
//!                           mode: Mode::Exclusive, wait: Wait::None, request: Some(1) }),
//! ]);
//! let mut replies: Vec<(u64, Reply)> = Vec::new();                // what each caller is told
//! let mut mailboxes: BTreeMap<SessionId, Vec<Output>> = BTreeMap::new(); // pushed events
//!
//! loop {
//!     let message_at = inbox.front().map(|(at, _)| *at);
//!     let timer_at = svc.poll_timeout().map(|t| t.0);
//!     let mut route = |o: Output| mailboxes.entry(o.session()).or_default().push(o);
//!     match (message_at, timer_at) {
//!         (None, None) => break,
//!         // A deadline comes due before the next message: tick to it.
//!         (m, Some(t)) if m.is_none_or(|at| t <= at) => svc.tick(Tick(t), &mut route)?,
//!         // Otherwise the next message arrives: stamp it with the clock and apply it.
//!         _ => {
//!             let Some((at, input)) = inbox.pop_front() else { break };
//!             match svc.handle(input.at(Tick(at)), &mut route) {
//!                 Ok(reply) => replies.push((at, reply)),
//!                 Err(e) => println!("refused at {at}: {e}"), // nothing changed but time
//!             }
//!         }
//!     }
//! }
//! // The session lived: the last keep-alive (at 9) kept it until 19, so the acquire at 12
//! // was granted; then it expired at 19 with its lock.
//! assert_eq!(replies[3], (9, Reply::KeptAlive { expires_at: Tick(19) }));
//! assert!(matches!(replies[4], (12, Reply::Granted { .. })));
//! assert!(matches!(mailboxes[&SessionId(1)][..], [Output::SessionExpired { .. }, Output::Released { .. }]));
//! assert_eq!(svc.now(), Tick(19));
//! # Ok(())
//! # }
//! ```
//!
//! In a replicated deployment the leader stamps each input with its clock when it
//! proposes it ([`Input::at`]), ticks are log entries too, and every replica applies the
//! committed entries with the stamped `now`: the same bytes everywhere (§8).
//!
//! **Semaphores and watches.** A name acquired in [`Mode::Permits`] is a semaphore: its
//! holders together hold at most `limit` permits, granted in strict FIFO order, each grant
//! with its own token. A session opened with a [`Label`] is shown by it; a
//! [`watch`](LockService::watch) tells a session of every holder change of a lock
//! ([`Output::HolderChanged`]) until it unwatches, closes or expires (§13). (The events go
//! to a `Vec` here, which needs feature `alloc`; a `heapless::Deque` works as above.)
//!
//! ```
//! use fencelock::{ArrayStorage, Change, Config, Label, LockService, Mode, Output, Reply, Tick, Wait};
//!
//! let mut svc = LockService::new(ArrayStorage::<4, 4, 8>::new(), Config::default()).unwrap();
//! let mut events: Vec<Output> = Vec::new();
//! let pool = Mode::Permits { count: 2, limit: 3 }; // 2 of the pool's 3 connections
//! let a = svc.open_labeled(Tick(0), 10, Label::new("worker-a")?, &mut events)?.opened().unwrap();
//! let b = svc.open_session(Tick(0), 10, &mut events)?.opened().unwrap();
//! let w = svc.open_session(Tick(0), 10, &mut events)?.opened().unwrap();
//! svc.acquire(Tick(0), a, "db-pool", pool, Wait::Forever, None, &mut events)?;
//! let got = svc.acquire(Tick(0), b, "db-pool", pool, Wait::Forever, None, &mut events)?;
//! assert_eq!(got, Reply::Queued { mode: pool, position: 1 }); // 2 + 2 > 3
//! assert_eq!(svc.permits("db-pool").map(|p| (p.in_use, p.limit)), Some((2, 3)));
//!
//! // w watches: first the current holder, then every change, in order.
//! assert_eq!(svc.watch(Tick(1), w, "db-pool", None, &mut events)?, Reply::Watching { holders: 1 });
//! svc.release(Tick(2), a, "db-pool", None, &mut events)?;
//! let told: Vec<_> = events
//!     .iter()
//!     .filter_map(|e| match e {
//!         Output::HolderChanged { holder, change, label, .. } => Some((*holder, *change, label.as_str())),
//!         _ => None,
//!     })
//!     .collect();
//! assert_eq!(told, [
//!     (a, Change::Holding, "worker-a"),
//!     (a, Change::Released, "worker-a"),
//!     (b, Change::Granted, ""),   // right after b's own Granted event
//! ]);
//! # Ok::<(), fencelock::Error>(())
//! ```
//!
//! **6. Persist.** [`LockService::snapshot`] writes canonical, versioned bytes;
//! [`LockService::restore`] validates every invariant before accepting them. (`VecStorage`
//! and `snapshot_vec` need the `alloc` feature:
//! `fencelock = { path = "…/core", features = ["alloc"] }`.)
//!
//! ```
//! # #[cfg(feature = "alloc")] {
//! use fencelock::{Config, LockService, Mode, Output, Tick, VecStorage, Wait};
//! let mut svc = LockService::new(VecStorage::new(4, 4, 8), Config::default()).unwrap();
//! let mut events: Vec<Output> = Vec::new();
//! let a = svc.open_session(Tick(0), 10, &mut events).unwrap().opened().unwrap();
//! svc.acquire(Tick(0), a, "l", Mode::Exclusive, Wait::None, None, &mut events).unwrap();
//! let bytes = svc.snapshot_vec();
//! let restored = LockService::restore(VecStorage::new(4, 4, 8), &bytes)
//!     .map_err(|(_storage, e)| e)
//!     .unwrap();
//! assert_eq!(restored.snapshot_vec(), bytes); // same state, same bytes
//! # }
//! ```
//!
//! **7. Keep the client honest.** A [`SessionKeeper`] runs in the client, on the client's
//! clock: it says when to send a keep-alive and whether the lease is still safe to act on
//! (§10).
//!
//! ```
//! use fencelock::{Lease, SessionKeeper};
//!
//! let mut keeper = SessionKeeper::new(10, 3, 2).unwrap(); // ttl, interval, margin
//! keeper.keep_alive_sent(0).unwrap();
//! keeper.keep_alive_acked(0).unwrap();
//! assert!(keeper.may_act(7));
//! assert_eq!(keeper.lease(8), Lease::Jeopardy { expires_at: 10 }); // stop acting now
//! assert!(keeper.keep_alive_acked(4).is_err()); // no keep-alive was sent at 4
//! ```
//!
//! ## Memory
//!
//! All memory is the host's: one row per session (88 bytes), per labelled session (65,
//! in a label table the host sizes: by default one per session, 0 for a host that never
//! labels), per live lock entry (152) and per hold, wait or watch (72), each but the label
//! rows with its two buckets of its table's hash index, the same on every target where `u64` is 8-byte
//! aligned (64-bit ones, wasm32, 32-bit ARM; a few bytes fewer on i686); the table and
//! its reasoning are in [`storage`]. Capacities are fixed at construction; a full table is
//! a typed error ([`Error::CapacityExceeded`]), never a panic.
//!
//! ## Guarantees
//!
//! | guarantee | how |
//! |---|---|
//! | mutual exclusion (I1) | one exclusive holder, or shared holders only |
//! | fencing (I2) | each grant's token is greater than every earlier one, never 0, kept across eviction and restore |
//! | FIFO, no herd (I3) | waiters granted in arrival order; a release wakes one exclusive waiter or the run of shared ones at the head |
//! | no grant to the dead (I4) | in every advance, expiry precedes every grant |
//! | time in every input (§2) | each input advances to its own `now` first: a host that never ticks between messages loses no session whose keep-alive arrives, stamped, before its deadline |
//! | atomic errors (I5) | a refused input changes nothing beyond the advance to its `now`; one error precedence in every layer (§5) |
//! | idempotent retries (I9) | a repeat of a session's latest request number applies nothing twice and returns the recorded reply (an acquire's brought up to date, §6) |
//! | determinism (I6) | same inputs → same replies, events and snapshot bytes on every platform |
//! | names chosen to collide | with a host's secret [`NameKey`] ([`LockService::set_name_key`], [`LockService::restore_keyed`], [`FenceGate::set_name_key`]), lock and resource names, and a snapshot's session ids and the claims on them, are indexed by SipHash-1-3 under it, which changes nothing observable |
//! | nothing lost (I7) | the reply is returned; events go straight to the host's sink, at most [`max_events`](LockService::max_events) per input, checked against a bounded sink's room before anything changes |
//! | lock-delay (I8) | after an *expiry*, the lock is not granted again for `lock_delay` ticks |
//! | permits (I11) | never more permits of a semaphore held than its limit; strict FIFO, a large request at the head is never overtaken |
//! | watches (I12) | a watcher sees every holder change of its lock in order, none after its watch ends |
//! | no panic on input | every refusal is a typed [`Error`]; frames and snapshots are validated before use |
//!
//! ## When to pick what
//!
//! | situation | choose | in fencelock |
//! |---|---|---|
//! | avoid duplicate work; a rare double run is harmless | a simple TTL lock | [`LockService`] alone, [`Wait::None`] |
//! | correctness matters (money, shared state) | consensus sessions + fencing | [`LockService`] replicated under a log + [`FenceGate`] at the resource + [`SessionKeeper`] at the client |
//! | leader election | consensus lock; the token is the epoch | [`LockService::campaign`] / [`LockService::leader`]; downstream [`FenceGate`] |
//! | the resource cannot check a token | redesign: idempotent operations, or avoid the lock | nothing here makes it safe: a [`FenceGate`] needs the resource's cooperation |
//! | many waiters on one lock | an ordered wait queue, each waiter told when it is its turn | FIFO queues; a release grants the next waiter (or the run of shared waiters, or the permit waiters that now fit), one [`Output::Granted`] each: nobody polls |
//! | at most N at once (a connection pool, a rate of jobs) | a counting semaphore | [`Mode::Permits`]; every acquire carries the limit |
//! | who holds it, and when that changes | a watch on the lock | [`LockService::watch`]; holders shown with their [`Label`] |
//! | the lease cannot be renewed | treat it as fatal: stop work | [`SessionKeeper::may_act`] turns false at the last acknowledged send + `ttl − margin`; [`SessionKeeper::session_lost`] on `SessionExpired` |
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(feature = "alloc")]
extern crate alloc;

mod election;
mod error;
mod fields;
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
pub use error::{Error, Message, Piece, Table};
pub use fields::Field;
pub use gate::{
    gate_snapshot_max_len, gate_snapshot_max_len_within, gate_snapshot_resources, FenceGate,
    GateRow, GATE_MAGIC, GATE_VERSION,
};
pub use input::Input;
pub use keeper::{Lease, SessionKeeper, KEEPER_MEMORY};
pub use output::{Change, Output, ReleaseReason};
pub use reply::Reply;
pub use service::{
    check_rows, Capacity, Config, Holder, LockService, Permits, SessionInfo, Usage, Waiter,
    MAX_REVISION_FLOOR, MAX_ROWS,
};
#[cfg(feature = "alloc")]
pub use sink::EventQueue;
pub use sink::{EventLimit, Sink};
pub use snapshot::{
    snapshot_config, snapshot_max_len, snapshot_max_len_within, SNAPSHOT_HEADER_MAX_LEN,
    SNAPSHOT_MAGIC, SNAPSHOT_VERSION,
};
#[cfg(feature = "alloc")]
pub use storage::VecStorage;
pub use storage::{ArrayStorage, LabeledSliceStorage, SliceStorage, Storage};
pub use table::NameKey;
pub use types::{Label, LockName, Mode, SessionId, Tick, Token, Wait, MAX_LABEL_LEN, MAX_NAME_LEN};
pub use wire::MAX_FRAME_LEN;

/// The examples of `core/README.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
