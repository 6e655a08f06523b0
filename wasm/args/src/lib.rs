//! What a JavaScript caller hands a fencelock wasm module, judged one way for both
//! modules: the full one (`fencelock-wasm`) and the small one (`fencelock-wasm-lite`).
//! Numbers, the mode and wait codes of the typed calls, the numbering of replies, and the
//! binding's own error kinds live here once, so the two modules cannot drift apart.
//!
//! Nothing here is a lock rule: those are the core's (`fencelock`). This is translation,
//! with no dependency on wasm-bindgen, so it is tested natively.
#![no_std]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use fencelock::Reply;

/// `Number.MAX_SAFE_INTEGER`: the largest integer a JS number holds exactly.
pub const MAX_SAFE: u64 = (1 << 53) - 1;

/// `.errno` of `out_of_range` (binding errors are 7xx; the core's are 1xx–6xx).
pub const ERRNO_OUT_OF_RANGE: u32 = 701;
/// `.errno` of `bad_argument`.
pub const ERRNO_BAD_ARGUMENT: u32 = 702;
/// `.errno` of `out_of_memory`.
pub const ERRNO_OUT_OF_MEMORY: u32 = 703;
/// `.errno` of `unknown_name` (the full module's interned names; the small module has none).
pub const ERRNO_UNKNOWN_NAME: u32 = 704;

/// A refusal that only a JS caller can earn, before the core is called (so nothing
/// changes): its `kind` and `errno`. The full module adds a message to each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// A number that cannot stand for the integer asked (`out_of_range`, 701).
    OutOfRange,
    /// A value of the wrong type or a code outside its list (`bad_argument`, 702).
    BadArgument,
    /// Tables that could not be allocated (`out_of_memory`, 703).
    OutOfMemory,
}

impl ArgError {
    /// The stable snake_case name, the `.code` of a thrown error. Cost: O(1).
    pub fn kind(self) -> &'static str {
        match self {
            ArgError::OutOfRange => "out_of_range",
            ArgError::BadArgument => "bad_argument",
            ArgError::OutOfMemory => "out_of_memory",
        }
    }

    /// The stable number (`ERRNO_*`). Cost: O(1).
    pub fn errno(self) -> u32 {
        match self {
            ArgError::OutOfRange => ERRNO_OUT_OF_RANGE,
            ArgError::BadArgument => ERRNO_BAD_ARGUMENT,
            ArgError::OutOfMemory => ERRNO_OUT_OF_MEMORY,
        }
    }
}

/// The `u64` a JS number stands for, if it is a safe non-negative integer
/// (`Number.isSafeInteger(x) && x >= 0`; `-0` counts as 0). Cost: O(1).
#[inline(always)]
pub fn safe_u64(x: f64) -> Option<u64> {
    // NaN and the infinities fail the range test; in range, the cast truncates exactly,
    // so it gives back `x` only for an integer (`f64::trunc` is not in `core`).
    if !(0.0..=MAX_SAFE as f64).contains(&x) {
        return None;
    }
    let n = x as u64;
    (n as f64 == x).then_some(n)
}

/// The most UTF-16 units of a string the JS side writes into a service's name buffer (a
/// longer one is never a lock name: past the core's `MAX_NAME_LEN` bytes).
pub const NAME_UNITS: usize = fencelock::MAX_NAME_LEN;

/// The size of a service's name buffer: [`NAME_UNITS`] UTF-16 units are at most 3 UTF-8
/// bytes each.
pub const NAME_ROOM: usize = 3 * NAME_UNITS;

/// The lock name the JS side wrote into a service's name buffer `room`: its first `len`
/// bytes, as UTF-8. `None` (the caller's `bad_argument`) for a `len` that is not a whole
/// number within the buffer (the small module's class passes -1 for a value that is not a
/// well-formed string) or bytes that are not UTF-8, which the JS side never writes.
/// Cost: O(len).
pub fn buffered_name(room: &[u8; NAME_ROOM], len: f64) -> Option<&str> {
    let bytes = safe_u64(len)
        .and_then(|n| usize::try_from(n).ok())
        .and_then(|n| room.get(..n))?;
    core::str::from_utf8(bytes).ok()
}

/// The mode code of a typed acquire: 0 exclusive, 1 shared, 2 permits (a `count` of a
/// semaphore's `limit`, given beside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeCode {
    /// 0: exclusive.
    Exclusive,
    /// 1: shared.
    Shared,
    /// 2: permits.
    Permits,
}

impl ModeCode {
    /// The mode a code names, or `None` for any other number (`bad_argument`). Cost: O(1).
    pub fn of(code: f64) -> Option<ModeCode> {
        if code == 0.0 {
            Some(ModeCode::Exclusive)
        } else if code == 1.0 {
            Some(ModeCode::Shared)
        } else if code == 2.0 {
            Some(ModeCode::Permits)
        } else {
            None
        }
    }
}

/// The wait code of a typed acquire: 0 none, 1 forever, 2 until a tick given beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitCode {
    /// 0: no wait (`busy` when it cannot be granted).
    None,
    /// 1: wait until granted or cancelled.
    Forever,
    /// 2: wait until the tick given.
    Until,
}

impl WaitCode {
    /// The wait a code names, or `None` for any other number (`bad_argument`). Cost: O(1).
    pub fn of(code: f64) -> Option<WaitCode> {
        if code == 0.0 {
            Some(WaitCode::None)
        } else if code == 1.0 {
            Some(WaitCode::Forever)
        } else if code == 2.0 {
            Some(WaitCode::Until)
        } else {
            None
        }
    }
}

/// The code and the number of a reply, as the typed calls return them: the codes follow
/// the core's `Reply` variants in order (opened 0, kept_alive 1, closed 2, granted 3,
/// queued 4, busy 5, released 6, cancelled 7, hold_ended 8, wait_ended 9, ticked 10,
/// watching 11, unwatched 12); the number is the session (opened), the deadline
/// (kept_alive), the token (granted, released, hold_ended), the position (queued), the
/// tick (ticked), the holder count (watching), else 0. Cost: O(1).
pub fn reply_code(r: &Reply) -> (i32, u64) {
    match *r {
        Reply::Opened { session, .. } => (0, session.0),
        Reply::KeptAlive { expires_at } => (1, expires_at.0),
        Reply::Closed => (2, 0),
        Reply::Granted { token, .. } => (3, token.0),
        Reply::Queued { position, .. } => (4, u64::from(position)),
        Reply::Busy => (5, 0),
        Reply::Released { token } => (6, token.0),
        Reply::Cancelled => (7, 0),
        Reply::HoldEnded { token } => (8, token.0),
        Reply::WaitEnded => (9, 0),
        Reply::Ticked { now } => (10, now.0),
        Reply::Watching { holders } => (11, u64::from(holders)),
        Reply::Unwatched => (12, 0),
        // A reply added to the core later, before the bindings name it.
        _ => (13, 0),
    }
}

/// A table's row count from JS, judged by the core's one rule (`fencelock::check_rows`,
/// `bad_config`) before anything is allocated. On wasm32 a count past `usize::MAX` is
/// past the core's limit as well. Cost: O(1).
pub fn row_count(n: u64) -> Result<usize, fencelock::Error> {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    fencelock::check_rows(n)?;
    Ok(n)
}

/// Strings longer than this (in UTF-16 units) are not copied into wasm memory: no name
/// is longer than 64 bytes, and copying a string of hundreds of megabytes could exhaust
/// the module's memory (a trap, not an error). Both modules, and the small module's JS
/// class, stop here.
pub const STRING_COPY_LIMIT: u32 = 1 << 16;

/// What the core is given for a name over [`STRING_COPY_LIMIT`]: one byte longer than
/// any name can be, so the core refuses it as `NameTooLong` exactly where its own
/// precedence puts that check (after the session check, say) — the binding decides
/// nothing about names.
pub const TOO_LONG: &str = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
const _: () = assert!(TOO_LONG.len() == fencelock::MAX_NAME_LEN + 1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_u64_accepts_exactly_the_safe_non_negative_integers() {
        for (x, want) in [
            (0.0, Some(0)),
            (-0.0, Some(0)),
            (1.0, Some(1)),
            (MAX_SAFE as f64, Some(MAX_SAFE)),
            (MAX_SAFE as f64 + 1.0, None), // 2^53: exact in f64, but not safe
            (-1.0, None),
            (0.5, None),
            (1e300, None),
            (f64::NAN, None),
            (f64::INFINITY, None),
            (f64::NEG_INFINITY, None),
        ] {
            assert_eq!(safe_u64(x), want, "{x}");
        }
    }

    #[test]
    fn mode_and_wait_codes_name_their_three_choices_and_nothing_else() {
        assert_eq!(ModeCode::of(0.0), Some(ModeCode::Exclusive));
        assert_eq!(ModeCode::of(1.0), Some(ModeCode::Shared));
        assert_eq!(ModeCode::of(2.0), Some(ModeCode::Permits));
        assert_eq!(WaitCode::of(0.0), Some(WaitCode::None));
        assert_eq!(WaitCode::of(1.0), Some(WaitCode::Forever));
        assert_eq!(WaitCode::of(2.0), Some(WaitCode::Until));
        for x in [3.0, -1.0, 0.5, f64::NAN, f64::INFINITY] {
            assert_eq!(ModeCode::of(x), None, "{x}");
            assert_eq!(WaitCode::of(x), None, "{x}");
        }
    }
}
