//! Inputs the fuzzers found, kept as tests (each also sits in fuzz/corpus/).

use fencelock::{LockService, VecStorage};

/// snapshot_restore found that restore accepted two holders (of different locks) with the
/// same token — a state no live service reaches. Fixed in core's restore.
#[test]
fn restore_refuses_a_token_held_twice() {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/corpus/snapshot_restore/regress-token-held-twice"
    ))
    .unwrap();
    match LockService::restore(VecStorage::new(8, 8, 16), &bytes) {
        Err((_, e)) => assert_eq!(e.code(), 505, "{e}"),
        Ok(svc) => panic!(
            "accepted: {:?}",
            fencelock_tests::invariants::check_service(&svc)
        ),
    }
}
