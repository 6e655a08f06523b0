//! Arbitrary input sequences: the bytes are a config byte, then frames, each preceded by
//! its length. Every frame goes to the service (`handle_frame`) and, if it decodes, to the
//! reference model; replies, events and errors must be equal, queries must agree, every
//! state and history invariant must hold, and a refused input must change nothing beyond
//! the advance to its `now`.
#![no_main]

use fencelock::{Capacity, Error, Input, Output};
use fencelock_tests::invariants::{check_round_trip, check_service, Shadow};
use fencelock_tests::model::Model;
use fencelock_tests::vectors::{ticked_copy, VecConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, mut rest)) = data.split_first() else {
        return;
    };
    let config = VecConfig {
        sessions: 1 + (cfg & 3) as usize,
        locks: 1 + ((cfg >> 2) & 3) as usize,
        claims: 1 + ((cfg >> 4) & 7) as usize,
        lock_delay: [0, 0, 1, 3][(cfg >> 6) as usize],
        max_name_len: 8,
    };
    let mut svc = config.service().expect("service");
    let cap = Capacity {
        sessions: config.sessions as u32,
        locks: config.locks as u32,
        claims: config.claims as u32,
    };
    let mut model = Model::new(cap, config.lock_delay, 8);
    let mut shadow = Shadow::new(config.lock_delay);
    while let Some((&len, tail)) = rest.split_first() {
        let len = (len as usize).min(tail.len());
        let (frame, next) = tail.split_at(len);
        rest = next;
        let before = svc.snapshot_vec();
        let mut events: Vec<Output> = Vec::new();
        let decoded = Input::from_frame(frame);
        let ticked = decoded
            .as_ref()
            .ok()
            .map(|i| ticked_copy(&svc, i.now().max(svc.now())));
        if let Ok(input) = &decoded {
            shadow.before(input);
        }
        let got = svc.handle_frame(frame, &mut events);
        match &decoded {
            Ok(input) => {
                let want = model.apply(input);
                assert_eq!(got, want.result, "{input:?}");
                assert_eq!(events, want.events, "{input:?}");
                if let Err(e) = shadow.after(&got, &events) {
                    panic!("history invariant after {input:?}: {e}");
                }
            }
            Err(_) => assert_eq!(got.as_ref().map_err(|e| e.code()), Err(501)),
        }
        if let Err(e) = &got {
            match (e, ticked) {
                (Error::BadFrame | Error::TimeWentBackwards { .. }, _) | (_, None) => {
                    assert!(events.is_empty());
                    assert_eq!(
                        svc.snapshot_vec(),
                        before,
                        "refused input changed the state"
                    );
                }
                (_, Some((copy, advance))) => {
                    assert_eq!(
                        events, advance,
                        "refused input emitted more than its advance"
                    );
                    assert_eq!(
                        svc.snapshot_vec(),
                        copy.snapshot_vec(),
                        "refused input changed more than the advance"
                    );
                }
            }
        }
        if let Err(e) = check_service(&svc) {
            panic!("state invariant: {e}");
        }
        if let Err(e) = model.agrees_with(&svc) {
            panic!("model disagrees: {e}");
        }
    }
    check_round_trip(&svc).expect("round trip");
});
