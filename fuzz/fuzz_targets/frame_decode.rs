//! Arbitrary bytes as an input frame, a reply frame and an event (output) frame: decoding
//! never panics; what decodes re-encodes to exactly the same bytes (a frame has one
//! encoding: docs/SPEC.md §9); a service holding sessions, a lock with a holder and a
//! waiter, and a watch, fed the bytes, either applies a valid input or refuses it, changing
//! nothing beyond the advance to the input's `now` (nothing at all for bytes that do not
//! decode).
#![no_main]

use fencelock::{Error, Input, Mode, Output, Reply, SessionId, Tick, Wait, MAX_FRAME_LEN};
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
        assert_eq!(
            &buf[..n],
            data,
            "an input decodes only from its one encoding"
        );
    }
    if let Ok(reply) = Reply::from_frame(data) {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = reply
            .to_frame(&mut buf)
            .expect("a decoded reply re-encodes");
        assert_eq!(
            &buf[..n],
            data,
            "a reply decodes only from its one encoding"
        );
    }
    if let Ok(output) = Output::from_frame(data) {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = output
            .to_frame(&mut buf)
            .expect("a decoded output re-encodes");
        assert_eq!(
            &buf[..n],
            data,
            "an event decodes only from its one encoding"
        );
    }
    let mut svc = VecConfig::default().service().expect("service");
    // Sessions to act on (open at 5, expiring at 15), so that inputs of sessions 1 to 3
    // get past the first check, and times before 5 are refused: 1 holds "l", 2 waits for
    // it, 3 holds "m" shared and watches "l".
    let o = &mut Vec::new();
    let t = Tick(5);
    for _ in 0..3 {
        svc.open_session(t, 10, o).expect("open");
    }
    let (s1, s2, s3) = (SessionId(1), SessionId(2), SessionId(3));
    svc.acquire(t, s1, "l", Mode::Exclusive, Wait::None, None, o)
        .expect("acquire");
    svc.acquire(t, s2, "l", Mode::Exclusive, Wait::Forever, Some(1), o)
        .expect("wait");
    svc.acquire(t, s3, "m", Mode::Shared, Wait::None, None, o)
        .expect("shared");
    svc.watch(t, s3, "l", None, o).expect("watch");
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
