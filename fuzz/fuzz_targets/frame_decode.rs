//! Arbitrary bytes as an input frame, a reply frame and an event (output) frame: decoding
//! never panics; what decodes re-encodes and decodes to the same value; a service fed the
//! bytes either applies a valid input or refuses it, changing nothing beyond the advance
//! to the input's `now` (nothing at all for bytes that do not decode).
#![no_main]

use fencelock::{Error, Input, Output, Reply, Tick, MAX_FRAME_LEN};
use fencelock_tests::invariants::check_service;
use fencelock_tests::vectors::{ticked_copy, VecConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoded = Input::from_frame(data);
    if let Ok(input) = &decoded {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = input
            .to_frame(&mut buf)
            .expect("a decoded input re-encodes");
        assert_eq!(Input::from_frame(&buf[..n]).as_ref(), Ok(input));
    }
    if let Ok(reply) = Reply::from_frame(data) {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = reply
            .to_frame(&mut buf)
            .expect("a decoded reply re-encodes");
        assert_eq!(Reply::from_frame(&buf[..n]), Ok(reply));
        assert!(!reply.kind().is_empty());
    }
    if let Ok(output) = Output::from_frame(data) {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = output
            .to_frame(&mut buf)
            .expect("a decoded output re-encodes");
        assert_eq!(Output::from_frame(&buf[..n]), Ok(output));
    }
    let mut svc = VecConfig::default().service().expect("service");
    // A session to act on (open at 5, expiring at 15), so that session-1 inputs can get
    // past the first check, and times before 5 are refused.
    svc.open_session(Tick(5), 10, &mut Vec::new())
        .expect("open");
    let before = svc.snapshot_vec();
    let ticked = decoded
        .as_ref()
        .ok()
        .map(|i| ticked_copy(&svc, i.now().max(svc.now())));
    let mut events: Vec<Output> = Vec::new();
    if let Err(e) = svc.handle_frame(data, &mut events) {
        match (e, ticked) {
            (Error::BadFrame | Error::TimeWentBackwards { .. }, _) | (_, None) => {
                assert!(events.is_empty());
                assert_eq!(svc.snapshot_vec(), before);
            }
            (_, Some((copy, advance))) => {
                assert_eq!(
                    events, advance,
                    "a refused input emitted more than its advance"
                );
                assert_eq!(svc.snapshot_vec(), copy.snapshot_vec());
            }
        }
    }
    if let Err(e) = check_service(&svc) {
        panic!("invariant broken after {data:?}: {e}");
    }
});
