//! # fencelock-wasm-lite — the small wasm module: fencelock's lock rules, numbers in and out
//!
//! The full module (`fencelock-wasm`, the npm package's main entry) carries the object
//! API, error messages, snapshots, postcard frames, the fence gate and the session keeper.
//! This crate is the first download of a browser host that needs only the lock table:
//! [`RawLite`], the core's `LockService` (`fencelock`) with numbers in and out, so neither
//! text formatting nor a codec is in the module. It is `fencelock/lite` in the npm
//! package, used through the JS class `LiteService` (`js/lite.js`), which gives each
//! argument to the module as a number (a lock name as the length of its UTF-8, which the
//! class writes into the service's name buffer: no string crosses in), and turns the
//! module's numbers into the full module's event objects and error codes. `wasm/README.md` ("The small module")
//! is the user's guide.
//!
//! - Every input takes the host's `now` first and returns a reply code (`opened` 0 …
//!   `ticked` 10, the numbering of the full module's typed calls, [`args::reply_code`])
//!   or, when refused, minus the errno (the core's `Error::code()`, or the binding's
//!   701 `out_of_range`, 702 `bad_argument`; 703 `out_of_memory` comes from creating a
//!   service, and from `takeEvents()` when there is no memory for the list: the events
//!   are kept).
//! - Events wait in order until `takeEvents()`, within the core's default event limit: a
//!   call whose events might not fit is refused with `buffer_too_small` before anything
//!   changes, as on the full module's typed calls.
//! - Arguments are judged as the full module judges them (`fencelock-wasm-args`, shared):
//!   a number that is not a safe non-negative integer is `out_of_range`, a mode or wait
//!   code outside its list or a lock the class could not pass as a well-formed string
//!   `bad_argument`, each before the core is called, so nothing changes. The core's errors
//!   come in the core's order.
//! - `now`, a ttl and a lock-delay must be below [`TIME_LIMIT`] (2^52), so every deadline
//!   and every number given back is exact as a JS number (a wait's `until` may be any safe
//!   integer: it is the deadline it sets).
//!
//! Left out, for the full module: labelled sessions, watches, elections by name, queries,
//! snapshots and restore, frames, the fence gate, the session keeper, interned names,
//! bigint arguments, error messages and `setEventLimit`.
//!
//! ## Size
//!
//! `no_std` on wasm32 with dlmalloc, a panic handler that traps, and no `core::fmt` on
//! any path it takes. `scripts/test-wasm.sh` fails when the module outgrows its budget,
//! which is within the project's goal for a first download (60 KB raw, 25 KB gzipped).
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

pub use fencelock_wasm_args as args;
mod service;

pub use service::{event_row, RawLite, EVENT_WIDTH, TIME_LIMIT};

/// The heap of the module: dlmalloc over the wasm memory, as std would set it up.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// No input reaches a panic; were one reached anyway, it traps (`unreachable`) like std's
/// `panic = "abort"` would, without formatting a message.
#[cfg(all(target_arch = "wasm32", not(test)))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

#[cfg(test)]
mod tests {
    use fencelock::Error;
    use fencelock_wasm_args::{ArgError, TOO_LONG};

    /// The JS class names each errno with the core's `Error::kind()` (and the binding's
    /// own `ArgError::kind()`): its table is a copy, so this test holds it to the core's,
    /// entry for entry, in both directions.
    #[test]
    fn the_js_error_table_is_the_cores() {
        let js = include_str!("../js/lite.js");
        let start = js.find("const CODES = {").expect("the table");
        let body = &js[start..];
        let body = &body[..body.find("};").expect("its end")];
        let mut table: Vec<(u32, String)> = body
            .split(',')
            .filter_map(|entry| {
                let (n, k) = entry.split_once(':')?;
                let n = n.trim().trim_start_matches("const CODES = {").trim();
                Some((n.parse().ok()?, k.trim().trim_matches('\'').to_string()))
            })
            .collect();
        let mut want: Vec<(u32, String)> = Error::EXAMPLES
            .iter()
            .map(|e| (e.code(), e.kind().to_string()))
            .chain(
                [
                    ArgError::OutOfRange,
                    ArgError::BadArgument,
                    ArgError::OutOfMemory,
                ]
                .map(|a| (a.errno(), a.kind().to_string())),
            )
            .collect();
        table.sort();
        want.sort();
        want.dedup();
        assert_eq!(table, want);
    }

    /// The class hands the core the bindings' stand-in for a name too long to copy: its
    /// constant is a copy, held to `fencelock-wasm-args`' here.
    #[test]
    fn the_js_name_limits_are_the_bindings() {
        let js = include_str!("../js/lite.js");
        assert!(
            js.contains(&format!("const TOO_LONG = 'x'.repeat({});", TOO_LONG.len())),
            "TOO_LONG is not {} x's",
            TOO_LONG.len()
        );
        assert!(TOO_LONG.bytes().all(|b| b == b'x'));
        // The name buffer: the class writes at most NAME_UNITS UTF-16 units (3 bytes each
        // at most) or the stand-in, into NAME_ROOM bytes, the crate's.
        let room = crate::service::NAME_ROOM;
        assert!(
            js.contains(&format!("const NAME_ROOM = {room};")),
            "NAME_ROOM is not {room}"
        );
        let units = fencelock_wasm_args::NAME_UNITS;
        assert!(js.contains(&format!("const NAME_UNITS = {units};")));
        assert!(3 * units <= room && TOO_LONG.len() <= room);
    }
}
