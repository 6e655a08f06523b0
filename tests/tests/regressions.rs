//! Inputs the fuzzers found, kept as tests (each also sits in fuzz/corpus/).

use fencelock::{LockService, VecStorage};

/// snapshot_restore found that restore accepted two holders (of different locks) with the
/// same token — a state no live service reaches. Fixed in core's restore.
#[test]
fn restore_refuses_a_token_held_twice() {
    let input = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/corpus/snapshot_restore/regress-token-held-twice"
    ))
    .unwrap();
    // The target's input: the snapshot's length (u16, little-endian), then the snapshot.
    let (len, bytes) = input.split_at(2);
    assert_eq!(
        usize::from(u16::from_le_bytes([len[0], len[1]])),
        bytes.len()
    );
    match LockService::restore(VecStorage::new(8, 8, 16), bytes) {
        Err((_, e)) => assert_eq!(e.code(), 505, "{e}"),
        Ok(svc) => panic!(
            "accepted: {:?}",
            fencelock_tests::invariants::check_service(&svc)
        ),
    }
}
