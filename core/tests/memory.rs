//! The memory table of `fencelock::storage`'s module docs, checked on the host. The same
//! figures are asserted at compile time in the crate for every target where `u64` is
//! 8-byte aligned (the thumbv7em and wasm32 builds included): rows hold only u64, u32 and
//! u8 fields (a name's length is a u8), so no field changes size with the pointer width.

use std::mem::size_of;

use fencelock::storage::{ClaimRow, LockRow, SessionRow};
use fencelock::{ArrayStorage, GateRow};

#[test]
fn bytes_per_row_match_the_documented_table() {
    assert_eq!(size_of::<SessionRow>(), 160, "per session");
    assert_eq!(size_of::<LockRow>(), 160, "per lock entry");
    assert_eq!(size_of::<ClaimRow>(), 72, "per hold, wait or watch");
    assert_eq!(size_of::<GateRow>(), 96, "per fenced resource");
}

#[test]
fn a_service_is_its_rows_and_nothing_else() {
    // ArrayStorage is exactly the three arrays: no hidden per-entry memory.
    assert_eq!(
        size_of::<ArrayStorage<10, 20, 30>>(),
        10 * 160 + 20 * 160 + 30 * 72
    );
    // The service adds a small fixed header to its storage, independent of capacity.
    let small = size_of::<fencelock::LockService<ArrayStorage<1, 1, 1>>>()
        - size_of::<ArrayStorage<1, 1, 1>>();
    let large = size_of::<fencelock::LockService<ArrayStorage<64, 64, 64>>>()
        - size_of::<ArrayStorage<64, 64, 64>>();
    assert_eq!(small, large);
    assert!(small < 256, "fixed state: {small} bytes");
}

#[test]
fn the_documented_example_adds_up() {
    // "10 000 sessions, 10 000 locks and 40 000 claims take 6.08 MB"
    let total = 10_000 * size_of::<SessionRow>()
        + 10_000 * size_of::<LockRow>()
        + 40_000 * size_of::<ClaimRow>();
    assert_eq!(total, 6_080_000);
}
