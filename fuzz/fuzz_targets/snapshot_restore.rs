//! Arbitrary bytes as a service snapshot and as a gate snapshot: restore never panics; a
//! snapshot it accepts must pass the same invariant checks as a live service
//! (`check_service`), re-snapshot to the same bytes (snapshots are canonical), and keep
//! working (a tick and the inputs after it keep every invariant).
#![no_main]

use fencelock::{FenceGate, GateRow, LockService, Output, Tick, VecStorage};
use fencelock_tests::invariants::{check_round_trip, check_service};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut svc) = LockService::restore(VecStorage::new(8, 8, 16), data) {
        if let Err(e) = check_service(&svc) {
            panic!("restore accepted a state that breaks an invariant: {e}");
        }
        assert_eq!(svc.snapshot_vec(), data, "accepted bytes are not canonical");
        check_round_trip(&svc).expect("round trip");
        let mut sink: Vec<Output> = Vec::new();
        if let Some(t) = svc.poll_timeout() {
            if svc.tick(t, &mut sink).is_ok() {
                check_service(&svc).expect("invariants after a tick");
            }
        }
        let far = Tick(svc.now().0.saturating_add(1_000_000));
        if svc.tick(far, &mut sink).is_ok() {
            check_service(&svc).expect("invariants after a long tick");
        }
    }
    if let Ok(gate) = FenceGate::restore(vec![GateRow::EMPTY; 8], data) {
        let mut buf = vec![0u8; data.len() + 16];
        let n = gate.snapshot(&mut buf).expect("snapshot fits");
        assert_eq!(&buf[..n], data, "accepted gate bytes are not canonical");
    }
});
