//! `fencelock_keeper`: the client's view of its session lease behind an opaque handle.
//! Its instants are the host's own clock units, not the service's ticks.

use fencelock::SessionKeeper;

use crate::result::{fencelock_result, ffi_panic_boundary};
use crate::types::{fencelock_lease, give, handle_call, out, put, set, take, Poisonable};

/// A session keeper: when to heartbeat, whether the client may still act. Opaque: create
/// with `fencelock_keeper_new`, free with `fencelock_keeper_free`. Not thread-safe per
/// handle.
pub struct fencelock_keeper {
    keeper: SessionKeeper,
    poisoned: bool,
}

impl Poisonable for fencelock_keeper {
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }
}

/// Creates a keeper for a session of `ttl`, heartbeating every `interval`, stopping
/// `margin` before the lease could expire.
///
/// Errors: `BAD_CONFIG` unless `0 < interval < ttl - margin` and `margin < ttl`;
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
                    keeper,
                    poisoned: false,
                },
            )
        };
        Ok(())
    })
}

/// Frees a keeper. NULL is fine; must not be called twice; the handle must not be used
/// afterwards. Cost: O(1).
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

/// Records that a heartbeat (or the session open) was sent at `at`.
///
/// Errors: `TIME_WENT_BACKWARDS` (before the previous send), `NULL_PARAMETER`. Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_heartbeat_sent(
    keeper: *mut fencelock_keeper,
    at: u64,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live (contract).
    unsafe { handle_call(keeper, || Ok(()), |k, ()| Ok(k.keeper.heartbeat_sent(at)?)) }
}

/// Records the ack of the heartbeat sent at `sent_at`; `*extended` says whether it
/// extended the lease (a late ack of an older heartbeat does not).
///
/// Errors: `TIME_WENT_BACKWARDS` (no such heartbeat was sent), `NULL_PARAMETER`.
/// Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live; `extended` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_heartbeat_acked(
    keeper: *mut fencelock_keeper,
    sent_at: u64,
    extended: *mut bool,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live; `extended` checked, then writable (contract).
    unsafe {
        handle_call(
            keeper,
            || out(extended),
            |k, dst| set(dst, k.keeper.heartbeat_acked(sent_at)?),
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
        handle_call(
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
    keeper: *mut fencelock_keeper,
    now: u64,
    lease: *mut fencelock_lease,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live; `lease` checked, then writable (contract).
    unsafe {
        handle_call(
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
    keeper: *mut fencelock_keeper,
    now: u64,
    may_act: *mut bool,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live; `may_act` checked, then writable (contract).
    unsafe {
        handle_call(
            keeper,
            || out(may_act),
            |k, dst| set(dst, k.keeper.may_act(now)),
        )
    }
}

/// When the next heartbeat is due (`now` if none was sent yet). Errors:
/// `NULL_PARAMETER`. Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live; `due` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_heartbeat_due(
    keeper: *mut fencelock_keeper,
    now: u64,
    due: *mut u64,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live; `due` checked, then writable (contract).
    unsafe {
        handle_call(
            keeper,
            || out(due),
            |k, dst| set(dst, k.keeper.heartbeat_due(now)),
        )
    }
}

/// The next instant the host should wake (a heartbeat due, or the lease changing
/// state): `*scheduled` false (and `*at` 0) once the session is lost. Errors:
/// `NULL_PARAMETER`. Cost: O(1).
///
/// # Safety
/// `keeper` NULL or live; `scheduled` and `at` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_keeper_poll_timeout(
    keeper: *mut fencelock_keeper,
    now: u64,
    scheduled: *mut bool,
    at: *mut u64,
) -> fencelock_result {
    // SAFETY: `keeper` NULL or live; `scheduled` and `at` checked, then writable
    // (contract).
    unsafe {
        handle_call(
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
