//! Arbitrary bytes as an input frame and as an output frame: decoding never panics; what
//! decodes re-encodes and decodes to the same value; a service fed the bytes either
//! applies a valid input or refuses it with nothing changed.
#![no_main]

use fencelock::{Input, Output, MAX_FRAME_LEN};
use fencelock_tests::invariants::check_service;
use fencelock_tests::vectors::VecConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(input) = Input::from_frame(data) {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = input
            .to_frame(&mut buf)
            .expect("a decoded input re-encodes");
        assert_eq!(Input::from_frame(&buf[..n]), Ok(input));
    }
    if let Ok(output) = Output::from_frame(data) {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = output
            .to_frame(&mut buf)
            .expect("a decoded output re-encodes");
        assert_eq!(Output::from_frame(&buf[..n]), Ok(output));
    }
    let mut svc = VecConfig::default().service().expect("service");
    let mut sink = |_| {};
    // A session to act on, so that session-1 inputs can get past the first check.
    svc.open_session(10, &mut sink).expect("open");
    let before = svc.snapshot_vec();
    let mut outs = Vec::new();
    if svc.handle_frame(data, &mut |o| outs.push(o)).is_err() {
        assert!(outs.is_empty());
        assert_eq!(svc.snapshot_vec(), before);
    }
    if let Err(e) = check_service(&svc) {
        panic!("invariant broken after {data:?}: {e}");
    }
});
