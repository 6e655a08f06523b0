//! The memory table of `fencelock::storage`'s module docs, checked on the host. The same
//! figures are asserted at compile time in the crate for every target where `u64` is
//! 8-byte aligned (the thumbv7em and wasm32 builds included): rows hold only u64, u32 and
//! u8 fields (a name's length is a u8), so no field changes size with the pointer width.

use std::mem::size_of;

use fencelock::storage::{Bucket, ClaimRow, LabelRow, LockRow, SessionRow, TaggedBucket};
use fencelock::{ArrayStorage, GateRow};

#[test]
fn bytes_per_row_match_the_documented_table() {
    assert_eq!(size_of::<SessionRow>(), 80, "per session");
    assert_eq!(
        size_of::<Bucket>(),
        4,
        "two per session or claim: its index share"
    );
    assert_eq!(size_of::<LabelRow>(), 65, "per labelled session");
    assert_eq!(size_of::<LockRow>(), 136, "per lock entry");
    assert_eq!(
        size_of::<TaggedBucket>(),
        8,
        "two per lock entry: its index share"
    );
    assert_eq!(size_of::<ClaimRow>(), 64, "per hold, wait or watch");
    assert_eq!(size_of::<GateRow>(), 96, "per fenced resource");
}

#[test]
fn a_service_is_its_rows_and_nothing_else() {
    // ArrayStorage is exactly its arrays (each table's rows and its index, 80 + 8,
    // 136 + 16 and 64 + 8 bytes an entry): no hidden per-entry memory. By default it has a
    // label row per session; a host that never labels gives it none and pays nothing.
    // (Label rows are byte-aligned: 16 of them fill whole words, so no padding shows.)
    assert_eq!(
        size_of::<ArrayStorage<16, 20, 30>>(),
        16 * (88 + 65) + 20 * 152 + 30 * 72
    );
    assert_eq!(
        size_of::<ArrayStorage<16, 20, 30, 0>>(),
        16 * 88 + 20 * 152 + 30 * 72
    );
    // The service adds a small fixed header to its storage, independent of capacity.
    let small = size_of::<fencelock::LockService<ArrayStorage<1, 1, 1>>>()
        - size_of::<ArrayStorage<1, 1, 1>>();
    let large = size_of::<fencelock::LockService<ArrayStorage<64, 64, 64>>>()
        - size_of::<ArrayStorage<64, 64, 64>>();
    assert_eq!(small, large);
    // (Counters, list heads, the ttl classes and the optional lock-name key.)
    assert!(small <= 288, "fixed state: {small} bytes");
}

#[test]
fn the_documented_example_adds_up() {
    // "10 000 sessions, 10 000 locks and 40 000 claims take 5.28 MB, 5.93 MB with a
    // label row for every session"
    let total = 10_000 * (size_of::<SessionRow>() + 2 * size_of::<Bucket>())
        + 10_000 * (size_of::<LockRow>() + 2 * size_of::<TaggedBucket>())
        + 40_000 * (size_of::<ClaimRow>() + 2 * size_of::<Bucket>());
    assert_eq!(total, 5_280_000);
    assert_eq!(total + 10_000 * size_of::<LabelRow>(), 5_930_000);
}
