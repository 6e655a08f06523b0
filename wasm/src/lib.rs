//! # fencelock-wasm — the fencelock core for JavaScript (node and the browser)
//!
//! Three classes over the core, camelCase, with TypeScript types in the generated
//! `.d.ts`: [`LockService`], [`FenceGate`], [`SessionKeeper`]. Every input method takes
//! the host's `now` first and returns `{reply, events}`: the caller's own answer (the
//! core's `Reply`, e.g. `{kind: "granted", mode: "exclusive", token: 3}`) and the events
//! for other sessions or caused by time (the core's `Output`s, e.g. `{kind:
//! "session_expired", session: 2}`). `kind` is the core's `Reply::kind()` /
//! `Output::kind()`. A refused input throws; the advance to `now` stands and its events
//! are on the error's `.events`. This crate translates; every lock rule, the error
//! precedence and the bound on events live in `fencelock`.
//!
//! ## Numbers
//!
//! Ticks, ttls, tokens, session ids and request numbers are `u64` in the core. In JS an
//! argument is a safe non-negative integer number (`Number.isSafeInteger(x) && x >= 0`)
//! or a `bigint` in `0..=2^64-1`; anything else cannot stand for a `u64` exactly and is
//! refused with `out_of_range` before the core is called (the one check the binding
//! makes first; see `wasm/README.md`). Out, a value is a number up to 2^53 - 1 and a
//! `bigint` above (TypeScript: `U64 = number | bigint`): exact, never rounded, and the
//! conversion cannot fail after the core applied an input. The frame entry point
//! (`handleFrame`) takes and returns bytes.
//!
//! ## Errors
//!
//! Thrown values are `Error`s with `.code` (core's `Error::kind()`, e.g.
//! `"unknown_session"`) and `.errno` (core's `Error::code()`), and details where a caller
//! acts on them (`stale` has `.token` and `.highest`). The binding adds `out_of_range`
//! (701, a `RangeError`), `bad_argument` (702, a `TypeError`: a value of the wrong type or
//! shape, which no core call could be made with), `out_of_memory` (703: the tables
//! could not be allocated) and `unknown_name` (704: a name id that `internName` did not
//! give, or one forgotten). [`error_kinds`] lists them all, the core's from
//! `fencelock::Error::EXAMPLES`.
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
//!
//! ## Size
//!
//! On wasm32 the crate is `no_std` (with `alloc`): its allocator is dlmalloc (what std
//! would use there) and its panic handler traps without formatting anything, so std's
//! panic machinery is not in the module, and of `core::fmt` only the few formatters that
//! the compiler's own panic sites (bounds, `RefCell`) still reference. Messages are joined
//! from texts and decimal numbers (`js::cat`, `js::Dec`; the core's from
//! `fencelock::Error::message`).
//! `scripts/test-wasm.sh` fails when the built module outgrows its size budget.
//!
//! ## The typed fast path
//!
//! `acquireFast` / `releaseFast` (module `fast`) take numbers and the name, return a
//! numeric reply code (or minus the errno of a refusal) and keep the reply's number and
//! the events for the getters that read them (`replyValue`, `pendingEvents`,
//! `takeEvents`, `lastError`): no object is built or parsed per call. They make the core
//! call the object API makes, after the same checks in the same order.
//! `acquireFastId` / `releaseFastId` take the lock as a number from `internName` (module
//! `names`: a bounded table of names checked once), so no string crosses per call.
//! `releaseHold` (the release of the hold one token names) has no fast path: it is an
//! operator's or a retrying host's call, not a hot one.
#![cfg_attr(target_arch = "wasm32", no_std)]
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

/// The heap of the module: dlmalloc over the wasm memory, as std would set it up.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// No input reaches a panic (see "No traps"); were one reached anyway, it traps
/// (`unreachable`) like std's `panic = "abort"` would, without formatting a message.
#[cfg(all(target_arch = "wasm32", not(test)))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

mod fast;
mod gate;
mod js;
mod json;
mod keeper;
mod names;
mod service;

pub use gate::FenceGate;
pub use keeper::SessionKeeper;
pub use service::LockService;

use wasm_bindgen::prelude::*;

/// Every `.code` a call can throw, with its `.errno`: one entry per kind of core error
/// (from `fencelock::Error::EXAMPLES`, in code order), then `out_of_range`,
/// `bad_argument`, `out_of_memory` and `unknown_name`. Cost: O(kinds).
#[wasm_bindgen(js_name = errorKinds, unchecked_return_type = "ErrorKind[]")]
pub fn error_kinds() -> js_sys::Array {
    js::error_kinds()
        .map(|(code, errno)| {
            js::Obj::new()
                .with("code", code)
                .with("errno", errno)
                .done()
        })
        .collect()
}

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/**
 * A u64 of the core. In: a safe non-negative integer number, or a bigint in 0..=2^64-1
 * (anything else throws "out_of_range"). Out: a number up to 2^53-1, a bigint above
 * (only counters, deadlines or ticks past 2^53 give one).
 */
export type U64 = number | bigint;

/** The typed fast path's mode code (`acquireFast`): 0 exclusive, 1 shared, 2 permits. */
export type FastMode = 0 | 1 | 2;

/** The typed fast path's wait code (`acquireFast`): 0 none, 1 forever, 2 until a tick. */
export type FastWait = 0 | 1 | 2;

/**
 * What `acquireFast` / `releaseFast` return: the reply's code (opened 0, kept_alive 1,
 * closed 2, granted 3, queued 4, busy 5, released 6, cancelled 7, hold_ended 8,
 * wait_ended 9, ticked 10, watching 11, unwatched 12), or minus the errno of the error
 * `lastError()` holds.
 */
export type FastCode = number;

/**
 * Exclusive (one holder), shared (any number of shared holders), or `permits` of a
 * semaphore's `limit` permits (1 <= permits <= limit, else "bad_permits"; both u32).
 */
export type Mode = "exclusive" | "shared" | { permits: number; limit: number };
/** Try-lock, wait until a tick (a deadline at or before now behaves as "none"), or wait forever. */
export type Wait = "none" | "forever" | { until: U64 };
/** Why a hold ended, in a "released" event ("released" itself is the releaser's own reply). */
export type ReleaseReason = "released" | "closed" | "expired";
/** The arguments of LockService.acquire after the lock name. */
export interface AcquireOptions { mode: Mode; wait: Wait; request?: U64 | null }

/** The caller's own answer to an input (the core's Reply; kind = Reply::kind()). */
export type Opened = { kind: "opened"; session: U64; expiresAt: U64 };
export type KeptAlive = { kind: "kept_alive"; expiresAt: U64 };
export type Closed = { kind: "closed" };
export type Granted = { kind: "granted"; mode: Mode; token: U64 };
export type Queued = { kind: "queued"; mode: Mode; position: number };
export type Busy = { kind: "busy" };
export type Released = { kind: "released"; token: U64 };
export type Cancelled = { kind: "cancelled" };
/** Only as the reply to a repeated acquire: the hold it answered has ended since. */
export type HoldEnded = { kind: "hold_ended"; token: U64 };
/** Only as the reply to a repeated acquire that was queued: the wait is over (timed out or cancelled, or granted and that hold ended since); the session holds nothing from it. */
export type WaitEnded = { kind: "wait_ended" };
export type Ticked = { kind: "ticked"; now: U64 };
/** The watch began; `holders` "holder_changed" events ("holding") for the watcher follow in the events. */
export type Watching = { kind: "watching"; holders: number };
export type Unwatched = { kind: "unwatched" };
export type AcquireReply = Granted | Queued | Busy | HoldEnded | WaitEnded;
export type Reply =
  | Opened | KeptAlive | Closed | Granted | Queued | Busy | Released | Cancelled
  | HoldEnded | WaitEnded | Ticked | Watching | Unwatched;

/** One event for the host to route to the session it names (the core's Output; kind = Output::kind()). */
export type Output =
  | { kind: "granted"; session: U64; lock: string; mode: Mode; token: U64 }
  | { kind: "released"; session: U64; lock: string; token: U64; reason: ReleaseReason }
  | { kind: "session_expired"; session: U64 }
  | { kind: "wait_timed_out"; session: U64; lock: string }
  /** To the watcher `session`: a holder of `lock` changed (label: the holder's, "" if none). */
  | { kind: "holder_changed"; session: U64; lock: string; holder: U64; mode: Mode; token: U64; change: Change; label: string };
/** What a "holder_changed" event says: held when the watch began, granted, released, or ended by close or expiry. */
export type Change = "holding" | "granted" | "released" | "closed" | "expired";

/** What every input method returns: the caller's reply and the events, in order (the advance to now first). */
export interface Answer<R extends Reply = Reply> { reply: R; events: Output[] }
/** What handleFrame returns: the reply frame and the event frames. */
export interface FrameAnswer { reply: Uint8Array; events: Uint8Array[] }

/** One input, for LockService.handle (the same inputs as the frames of handleFrame). */
export type Input =
  | { kind: "open_session"; now: U64; ttl: U64 }
  | { kind: "open_labeled"; now: U64; ttl: U64; label: string }
  | { kind: "keep_alive"; now: U64; session: U64; request?: U64 | null }
  | { kind: "close_session"; now: U64; session: U64; request?: U64 | null }
  | { kind: "acquire"; now: U64; session: U64; lock: string; mode: Mode; wait: Wait; request?: U64 | null }
  | { kind: "release"; now: U64; session: U64; lock: string; request?: U64 | null }
  | { kind: "cancel"; now: U64; session: U64; lock: string; request?: U64 | null }
  | { kind: "tick"; now: U64 }
  | { kind: "watch"; now: U64; session: U64; lock: string; request?: U64 | null }
  | { kind: "unwatch"; now: U64; session: U64; lock: string; request?: U64 | null }
  /** Release the session's hold on `lock` only if it was granted with `token` (else "not_holder", nothing changes). */
  | { kind: "release_hold"; now: U64; session: U64; lock: string; token: U64; request?: U64 | null };

export interface Capacities { sessions: number; locks: number; claims: number }
/** Rows in use per table (LockService.usage). */
export interface Usage { sessions: number; locks: number; claims: number }
/** What LockService.restore takes: the capacities only (the config is the snapshot's, so a
 * ServiceConfig's own keys are refused, at run time and here). */
export type RestoreCapacities = Capacities & { lockDelay?: never; maxNameLen?: never; maxWatchers?: never };
export interface ServiceConfig extends Capacities {
  /** Ticks a lock stays ungrantable after its holder's session expired (default 0). */
  lockDelay?: U64;
  /** Longest lock name in bytes, 1..=64 (default 64). */
  maxNameLen?: number;
  /** Most sessions watching one lock at once (default 4; 0 turns watches off). */
  maxWatchers?: number;
}
/** `label`: the session's label (openLabeled), "" if none. */
export interface Holder { session: U64; mode: Mode; token: U64; label: string }
export interface Waiter { session: U64; mode: Mode; deadline: U64 | null; label: string }
export interface SessionInfo {
  id: U64; ttl: U64; expiresAt: U64; holds: number; waits: number; watches: number; lastRequest: U64; label: string;
}
/** A live semaphore (LockService.permits): permits held now, and its limit. */
export interface Permits { inUse: number; limit: number }
export interface Leader { session: U64; epoch: U64 }
export interface GateEntry { resource: string; highest: U64 }
export type Lease =
  | { state: "safe"; until: U64 }
  | { state: "jeopardy"; expiresAt: U64 }
  | { state: "expired" }
  | { state: "unconfirmed" };

export type ErrorCode =
  | "unknown_session" | "not_holder" | "not_queued" | "already_queued" | "mode_mismatch"
  | "stale_request" | "request_reused" | "limit_mismatch" | "not_watching"
  | "already_watching" | "empty_name" | "name_too_long" | "bad_ttl"
  | "deadline_overflow" | "time_went_backwards" | "bad_config" | "bad_permits"
  | "label_too_long" | "capacity_exceeded"
  | "stale" | "zero_token" | "bad_frame" | "buffer_too_small" | "bad_magic"
  | "unsupported_version" | "corrupt_snapshot" | "unknown_keep_alive"
  | "out_of_range" | "bad_argument" | "out_of_memory" | "unknown_name";
/** One entry of errorKinds(). */
export interface ErrorKind { code: ErrorCode; errno: number }
/** What every method throws: an Error (RangeError for out_of_range, TypeError for bad_argument). */
export interface FencelockError extends Error {
  code: ErrorCode;
  /** Core's stable numeric code (1xx-6xx); 701 out_of_range, 702 bad_argument, 703 out_of_memory, 704 unknown_name. */
  errno: number;
  /** A refused input of LockService (not handleFrame): the events of the advance to its now, which stands. */
  events?: Output[];
  /** A refused handleFrame: the same, as frames (empty for bad_frame; absent for bad_argument). */
  eventFrames?: Uint8Array[];
  /** "stale": the token offered and the highest seen. */
  token?: U64;
  highest?: U64;
  /** "unknown_session", "not_holder", "not_queued", "already_queued", "not_watching", "already_watching": the session. */
  session?: U64;
  /** "capacity_exceeded": the full table ("watchers": the lock has maxWatchers watchers; "names": internName's table). */
  table?: "sessions" | "locks" | "claims" | "resources" | "watchers" | "labels" | "names";
  /** "time_went_backwards": the current time and the time asked for. */
  now?: U64;
  requested?: U64;
  /** "stale_request", "request_reused": the number carried; "stale_request": the session's latest. */
  request?: U64;
  latest?: U64;
  /** "name_too_long", "label_too_long": the length in bytes (UTF-16 units, a lower bound, past 65 536) and the limit. */
  len?: number;
  max?: number;
  /** "mode_mismatch": the mode the session holds the lock in. */
  held?: Mode;
  /** "limit_mismatch": the live semaphore's limit (0: the name is in use as a plain lock); "bad_permits": the limit asked for. */
  limit?: number;
  /** "bad_permits": the count asked for. */
  count?: number;
  /** "buffer_too_small": what is needed. */
  need?: number;
  /** "unknown_keep_alive": the send time the acknowledgement named. */
  sentAt?: U64;
  /** "unknown_name": the id that no internName gave, or one forgotten since. */
  nameId?: number;
  /** "bad_argument" for an object argument with a key the call does not know (a typo): that key. */
  key?: string;
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// The `ErrorCode` union of the `.d.ts` is exactly the kinds `js::error_kinds` lists
    /// (the core's from `Error::EXAMPLES`, then the binding's), so a new core error kind
    /// fails this test until the union names it.
    #[test]
    fn error_code_union_is_the_list_of_error_kinds() {
        // The custom section's text is consumed by the macro: read it from this file.
        let source = include_str!("lib.rs");
        let start = source.find("export type ErrorCode =").expect("the union");
        let body = &source[start..];
        let body = &body[..body.find(';').expect("its end")];
        let union: Vec<&str> = body.split('"').skip(1).step_by(2).collect();
        let kinds: Vec<&str> = js::error_kinds().map(|(code, _)| code).collect();
        let (mut u, mut k) = (union.clone(), kinds.clone());
        u.sort_unstable();
        k.sort_unstable();
        assert_eq!(u, k);
        assert_eq!(union.len(), kinds.len(), "no kind twice");
    }
}
