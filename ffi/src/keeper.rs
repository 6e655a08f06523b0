//! `fencelock_keeper`: the client's view of its session lease behind an opaque handle.
//! Its instants are the host's own clock units, not the service's ticks.

use core::ffi::c_char;

use fencelock::SessionKeeper;

use crate::handle::{call, last_error, tag_first, Handle, HandleState};
use crate::result::{fencelock_result, ffi_panic_boundary};
use crate::types::{fencelock_lease, give, out, put, set, take};

/// A session keeper: when to send a keep-alive, whether the client may still act.
/// Opaque: create with `fencelock_keeper_new`, free with `fencelock_keeper_free`. Not
/// thread-safe per handle: calls on one keeper must not overlap, `const` ones included (a
/// failing call records its error in the handle).
// `repr(C)`, so the tag (in `state`) is the handle's first eight bytes (asserted below).
// Written as an always-true `cfg_attr` because cbindgen does not expand one: the header
// keeps the type opaque (`header_is_current` fails if that ever changes).
#[cfg_attr(all(), repr(C))]
pub struct fencelock_keeper {
    state: HandleState,
    keeper: SessionKeeper,
}

const _: () = assert!(tag_first(core::mem::offset_of!(fencelock_keeper, state)));

impl Handle for fencelock_keeper {
    const TAG: u64 = u64::from_le_bytes(*b"fl:keepr");
    fn state(&self) -> &HandleState {
        &self.state
    }
}

/// Creates a keeper for a session of `ttl`, sending a keep-alive every `interval`,
/// stopping `margin` before the lease could expire.
///
/// Errors: `BAD_CONFIG` unless `0 < interval < ttl - margin` and `0 < margin < ttl`;
/// `NULL_PARAMETER`. Cost: O(1).
///
/// # Safety
/// `out_keeper` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_new(
    ttl: u64,
    interval: u64,
    margin: u64,
    out_keeper: *mut *mut fencelock_keeper,
) -> fencelock_result {
    ffi_panic_boundary!({
        let dst = out(out_keeper)?;
        let keeper = SessionKeeper::new(ttl, interval, margin)?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe {
            give(
                dst,
                fencelock_keeper {
                    state: HandleState::new::<fencelock_keeper>(),
                    keeper,
                },
            )
        };
        Ok(())
    })
}

/// Frees a keeper. NULL is fine; must not be called twice; the handle must not be used
/// afterwards. A handle of another kind frees nothing. Cost: O(1).
///
/// # Safety
/// `keeper` NULL or a live keeper handle.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_free(keeper: *mut fencelock_keeper) {
    let _ = ffi_panic_boundary!({
        // SAFETY: NULL or live, freed once (contract).
        unsafe { take(keeper) };
        Ok(())
    });
}

/// Records that a keep-alive (or the session open) was sent at `at`, by the client's
/// clock. The keeper remembers the last `FENCELOCK_KEEPER_MEMORY` send times.
///
/// Errors: `TIME_WENT_BACKWARDS` (before the previous send; nothing recorded),
/// `NULL_PARAMETER`. Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_keep_alive_sent(
    keeper: *mut fencelock_keeper,
    at: u64,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live (contract).
    unsafe { call(keeper, || Ok(()), |k, ()| Ok(k.keeper.keep_alive_sent(at)?)) }
}

/// Records the acknowledgement (the `KEPT_ALIVE` or `OPENED` reply) of the keep-alive
/// sent at `sent_at`; `*extended` says whether it extended the lease (a late ack of an
/// older keep-alive does not).
///
/// Errors: `UNKNOWN_KEEP_ALIVE` (no keep-alive sent at `sent_at` is among the last
/// `FENCELOCK_KEEPER_MEMORY` recorded: an ack from the future, a forged or garbled
/// time; nothing changes), `NULL_PARAMETER`. Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live; `extended` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_keep_alive_acked(
    keeper: *mut fencelock_keeper,
    sent_at: u64,
    extended: *mut bool,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live; `extended` checked, then writable (contract).
    unsafe {
        call(
            keeper,
            || out(extended),
            |k, dst| set(dst, k.keeper.keep_alive_acked(sent_at)?),
        )
    }
}

/// The service said the session expired or closed: the lease is gone for good.
/// Errors: `NULL_PARAMETER`. Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_session_lost(
    keeper: *mut fencelock_keeper,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live (contract).
    unsafe {
        call(
            keeper,
            || Ok(()),
            |k, ()| {
                k.keeper.session_lost();
                Ok(())
            },
        )
    }
}

/// The lease at `now`. Errors: `NULL_PARAMETER`. Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live; `lease` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_lease(
    keeper: *const fencelock_keeper,
    now: u64,
    lease: *mut fencelock_lease,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live; `lease` checked, then writable (contract).
    unsafe {
        call(
            keeper,
            || out(lease),
            |k, dst| set(dst, k.keeper.lease(now).into()),
        )
    }
}

/// Whether the lease is `SAFE` at `now`: check before each action on the resource (and
/// still carry the token). Errors: `NULL_PARAMETER`. Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live; `may_act` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_may_act(
    keeper: *const fencelock_keeper,
    now: u64,
    may_act: *mut bool,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live; `may_act` checked, then writable (contract).
    unsafe {
        call(
            keeper,
            || out(may_act),
            |k, dst| set(dst, k.keeper.may_act(now)),
        )
    }
}

/// The time the next keep-alive is due: `interval` after the last send, or `now` if none
/// was sent yet. Errors: `NULL_PARAMETER`. Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live; `at` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_next_keep_alive(
    keeper: *const fencelock_keeper,
    now: u64,
    at: *mut u64,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live; `at` checked, then writable (contract).
    unsafe {
        call(
            keeper,
            || out(at),
            |k, dst| set(dst, k.keeper.next_keep_alive(now)),
        )
    }
}

/// The next instant the host should wake (a keep-alive due, or the lease changing
/// state): `*scheduled` false (and `*at` 0) once the session is lost. It may be at or
/// before `now` (a keep-alive is overdue: send it at once). Errors: `NULL_PARAMETER`.
/// Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live; `scheduled` and `at` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_poll_timeout(
    keeper: *const fencelock_keeper,
    now: u64,
    scheduled: *mut bool,
    at: *mut u64,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live; `scheduled` and `at` checked, then writable
    // (contract).
    unsafe {
        call(
            keeper,
            || Ok((out(scheduled)?, out(at)?)),
            |k, (s, a)| {
                let t = k.keeper.poll_timeout(now);
                put(s, t.is_some());
                put(a, t.unwrap_or(0));
                Ok(())
            },
        )
    }
}

/// Writes the detailed message of the most recent failed call on this keeper (the
/// core's text: "unknown keep-alive: no keep-alive sent at 4 is on record"), or "ok" if
/// none failed yet. Buffer rules as `fencelock_result_message`; a poisoned keeper still
/// answers. Errors: `NULL_PARAMETER`, `BUFFER_TOO_SMALL` (truncated).
/// Cost: O(message length).
///
/// # Safety
/// `keeper` NULL or live; `buf` NULL or valid for `len` bytes; `out_len` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_last_error(
    keeper: *const fencelock_keeper,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> fencelock_result {
    // SAFETY: forwarded contract.
    unsafe { last_error(keeper, buf, len, out_len) }
}
