//! Arbitrary bytes as a service snapshot and as a gate snapshot: restore never panics; a
//! snapshot it accepts must pass the same invariant checks as a live service
//! (`check_service`), re-snapshot to the same bytes (snapshots are canonical), and keep
//! working: inputs on every restored session and lock (keep-alive, acquire and watch of
//! every lock, release, close, and a new session doing the same), then a tick to the next
//! deadline and a long one, each keeping every invariant, emitting no more events than
//! `max_events` allowed before it, and leaving the state byte-identical when refused. An
//! accepted gate answers for each resource its token, admits it and refuses one below it.
#![no_main]

use fencelock::{
    Error, FenceGate, GateRow, LockService, Mode, Output, Reply, Tick, Token, VecStorage, Wait,
};
use fencelock_tests::invariants::{check_round_trip, check_service};
use libfuzzer_sys::fuzz_target;

type Svc = LockService<VecStorage>;

/// Applies one input at the service's own time (so no advance): refused, the state is
/// byte-identical; either way every invariant holds and the events stay within the
/// bound `max_events` gave before the input.
fn step(
    svc: &mut Svc,
    what: &str,
    f: impl FnOnce(&mut Svc, &mut Vec<Output>) -> Result<Reply, Error>,
) {
    let before = svc.snapshot_vec();
    let bound = svc.max_events();
    let mut sink: Vec<Output> = Vec::new();
    let r = f(svc, &mut sink);
    assert!(
        sink.len() <= bound,
        "{what}: {} events, bound {bound}",
        sink.len()
    );
    if r.is_err() {
        assert_eq!(
            svc.snapshot_vec(),
            before,
            "{what}: refused, but the state changed"
        );
        assert!(sink.is_empty(), "{what}: refused, but emitted events");
    }
    if let Err(e) = check_service(svc) {
        panic!("{what} on a restored state broke an invariant: {e}");
    }
}

/// A tick to `t`, which must be accepted (never before `now`, into an unbounded sink).
fn tick(svc: &mut Svc, t: Tick, what: &str) {
    let bound = svc.max_events();
    let mut sink: Vec<Output> = Vec::new();
    svc.tick(t, &mut sink)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        sink.len() <= bound,
        "{what}: {} events, bound {bound}",
        sink.len()
    );
    if let Err(e) = check_service(svc) {
        panic!("{what} on a restored state broke an invariant: {e}");
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(mut svc) = LockService::restore(VecStorage::new(8, 8, 16), data) {
        if let Err(e) = check_service(&svc) {
            panic!("restore accepted a state that breaks an invariant: {e}");
        }
        assert_eq!(svc.snapshot_vec(), data, "accepted bytes are not canonical");
        check_round_trip(&svc).expect("round trip");
        let now = svc.now();
        let locks: Vec<String> = svc.locks().map(|l| l.as_str().into()).collect();
        let mut sessions: Vec<_> = svc.sessions().collect();
        if let Ok(Reply::Opened { session, .. }) = svc.open_session(now, 5, &mut Vec::new()) {
            check_service(&svc).expect("invariants after an open");
            sessions.push(session);
        }
        for &s in &sessions {
            step(&mut svc, "keep-alive", |v, o| v.keep_alive(now, s, None, o));
            for l in &locks {
                step(&mut svc, "acquire", |v, o| {
                    v.acquire(now, s, l, Mode::Exclusive, Wait::Forever, None, o)
                });
                step(&mut svc, "watch", |v, o| v.watch(now, s, l, None, o));
            }
        }
        if let Some(&s) = sessions.first() {
            for l in &locks {
                step(&mut svc, "release", |v, o| v.release(now, s, l, None, o));
            }
            step(&mut svc, "close", |v, o| v.close_session(now, s, None, o));
        }
        if let Some(t) = svc.poll_timeout() {
            tick(&mut svc, t, "a tick to the next deadline");
        }
        let far = Tick(svc.now().0.saturating_add(1_000_000));
        tick(&mut svc, far, "a long tick");
    }
    if let Ok(mut gate) = FenceGate::restore(vec![GateRow::EMPTY; 8], data) {
        let mut buf = vec![0u8; data.len() + 16];
        let n = gate.snapshot(&mut buf).expect("snapshot fits");
        assert_eq!(&buf[..n], data, "accepted gate bytes are not canonical");
        let entries: Vec<(String, Token)> = gate.iter().map(|(name, t)| (name.into(), t)).collect();
        assert_eq!(gate.len(), entries.len());
        for (i, (name, token)) in entries.iter().enumerate() {
            assert!(token.0 >= 1, "{name}: token 0 restored");
            assert!(
                entries[..i].iter().all(|(other, _)| other != name),
                "{name}: restored twice"
            );
            assert_eq!(gate.highest(name), Some(*token), "{name}: another highest");
        }
        for (name, token) in &entries {
            let below = Token(token.0 - 1);
            let refusal = if below.0 == 0 {
                Error::ZeroToken
            } else {
                Error::Stale {
                    token: below,
                    highest: *token,
                }
            };
            assert_eq!(
                gate.admit(name, below),
                Err(refusal),
                "{name}: a token below its highest admitted"
            );
            assert_eq!(
                gate.admit(name, *token),
                Ok(()),
                "{name}: its own token refused"
            );
        }
    }
});
