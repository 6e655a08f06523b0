//! # fencelock-wasm — the fencelock core for JavaScript (node and the browser)
//!
//! Three classes over the core, camelCase, with TypeScript types in the generated
//! `.d.ts`: [`LockService`], [`FenceGate`], [`SessionKeeper`]. Every input method
//! returns the outputs it produced as an array of tagged objects
//! (`{type: "granted", session, lock, mode, token}`…); a refused input throws and changes
//! nothing. This crate translates and validates; every lock rule lives in `fencelock`.
//!
//! ## Numbers
//!
//! Ticks, ttls, tokens, session ids and request numbers are `u64` in the core and plain
//! JS numbers here. An argument must be a safe non-negative integer
//! (`Number.isSafeInteger(x) && x >= 0`), else a `RangeError` with code `out_of_range`
//! is thrown; a value above 2^53 - 1 is never rounded: an input whose outputs could
//! not be exact is refused beforehand (`out_of_range`, nothing changed) and a query
//! whose answer is too large throws `out_of_range`. Numbers rather than `BigInt`: 2^53
//! ticks is 285 000 years of milliseconds, every JS API (timers, `Date`, JSON, which
//! cannot serialize a `BigInt`) speaks numbers, and `BigInt` makes every caller write `5n`
//! and convert back.
//! The frame entry point (`handleFrame`) keeps full `u64` range: its numbers never
//! become JS numbers.
//!
//! ## Errors
//!
//! Thrown values are `Error`s with `.code` (core's `Error::kind()`, e.g.
//! `"unknown_session"`) and `.errno` (core's `Error::code()`), and details where a caller
//! acts on them (`stale` has `.token` and `.highest`). The binding adds `out_of_range`
//! (701, a `RangeError`), `bad_argument` (702, a `TypeError`: wrong type or shape) and
//! `out_of_memory` (703: the tables could not be allocated).
//!
//! ## No traps
//!
//! Nothing here panics on input: every argument is checked before the core sees it,
//! tables, copies and snapshots are allocated with `try_reserve`, and the code has no
//! `unwrap`, no indexing that can fail and no arithmetic that can overflow. (An
//! `unreachable` trap would leave the module unusable; the JS tests throw garbage at
//! every method to show none occurs.) Nor may a JS exception unwind through the module
//! (it would leave the handle borrowed for good): the JS operations on caller values
//! that can throw are imported with `catch` and become `bad_argument`.
#![deny(missing_docs)]
#![forbid(unsafe_code)]
// No panic path in the shipped code (tests may unwrap).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

extern crate alloc;

mod gate;
mod js;
mod json;
mod keeper;
mod service;

pub use gate::FenceGate;
pub use keeper::SessionKeeper;
pub use service::LockService;

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
// fencelock-wasm: every number below is a safe non-negative integer
// (Number.isSafeInteger); anything else passed in throws "out_of_range".

/** Exclusive (one holder) or shared (any number of shared holders). */
export type Mode = "exclusive" | "shared";
/** Try-lock, wait until a tick (a deadline at or before now behaves as "none"), or wait forever. */
export type Wait = "none" | "forever" | { until: number };
export type ReleaseReason = "released" | "closed" | "expired";

/** One event for the host to route to the session it names. */
export type Output =
  | { type: "sessionOpened"; session: number; expiresAt: number }
  | { type: "sessionRenewed"; session: number; expiresAt: number }
  | { type: "sessionClosed"; session: number }
  | { type: "sessionExpired"; session: number }
  | { type: "granted"; session: number; lock: string; mode: Mode; token: number }
  | { type: "queued"; session: number; lock: string; mode: Mode; position: number }
  | { type: "busy"; session: number; lock: string }
  | { type: "released"; session: number; lock: string; token: number; reason: ReleaseReason }
  | { type: "waitTimedOut"; session: number; lock: string }
  | { type: "waitCancelled"; session: number; lock: string };

/** One input, for LockService.handle (the same inputs as the frames of handleFrame). */
export type Input =
  | { type: "openSession"; ttl: number }
  | { type: "keepAlive"; session: number; request?: number | null }
  | { type: "closeSession"; session: number; request?: number | null }
  | { type: "acquire"; session: number; lock: string; mode: Mode; wait: Wait; request?: number | null }
  | { type: "release"; session: number; lock: string; request?: number | null }
  | { type: "cancel"; session: number; lock: string; request?: number | null }
  | { type: "tick"; now: number };

export interface Capacities { sessions: number; locks: number; claims: number }
export interface ServiceConfig extends Capacities {
  /** Ticks a lock stays ungrantable after its holder's session expired (default 0). */
  lockDelay?: number;
  /** Longest lock name in bytes, 1..=64 (default 64). */
  maxNameLen?: number;
}
export interface Holder { session: number; mode: Mode; token: number }
export interface Waiter { session: number; mode: Mode; deadline: number | null }
export interface SessionInfo {
  id: number; ttl: number; expiresAt: number; holds: number; waits: number; lastRequest: number;
}
export interface Leader { session: number; epoch: number }
export interface GateEntry { resource: string; highest: number }
export type Lease =
  | { state: "safe"; until: number }
  | { state: "jeopardy"; expiresAt: number }
  | { state: "expired" }
  | { state: "unconfirmed" };

export type ErrorCode =
  | "unknown_session" | "not_holder" | "not_queued" | "already_queued" | "mode_mismatch"
  | "stale_request" | "request_reused" | "empty_name" | "name_too_long" | "bad_ttl"
  | "deadline_overflow" | "time_went_backwards" | "bad_config" | "capacity_exceeded"
  | "stale" | "zero_token" | "bad_frame" | "buffer_too_small" | "bad_magic"
  | "unsupported_version" | "corrupt_snapshot"
  | "out_of_range" | "bad_argument" | "out_of_memory";
/** What every method throws: an Error (RangeError for out_of_range, TypeError for bad_argument). */
export interface FencelockError extends Error {
  code: ErrorCode;
  /** Core's stable numeric code (1xx-5xx); 701 out_of_range, 702 bad_argument, 703 out_of_memory. */
  errno: number;
  /** "stale": the token offered and the highest seen. */
  token?: number;
  highest?: number;
  /** "unknown_session", "not_holder", "not_queued", "already_queued": the session. */
  session?: number;
  /** "capacity_exceeded": the full table. */
  table?: "sessions" | "locks" | "claims" | "resources";
  /** "time_went_backwards": the current time and the time asked for. */
  now?: number;
  requested?: number;
  /** "stale_request": the number carried and the session's latest. */
  request?: number;
  latest?: number;
  /** "name_too_long": the length in bytes (at least) and the limit. */
  len?: number;
  max?: number;
  /** "mode_mismatch": the mode the session holds the lock in. */
  held?: Mode;
  /** "buffer_too_small": bytes needed. */
  need?: number;
}
"#;
