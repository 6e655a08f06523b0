//! Arbitrary bytes as a service snapshot and as a gate snapshot, followed by input frames:
//! `[n: u16 LE][snapshot: n bytes][len: u8][frame]…`. Restore never panics; a snapshot it
//! accepts must pass the same invariant checks as a live service (`check_service`),
//! re-snapshot to the same bytes (snapshots are canonical), and keep working: the frames
//! (at most 32) handed to the restored service first — so a restored session's recorded
//! request number and reply meet the retry it can be asked (the fuzzer chooses the
//! inputs, their times and request numbers) — each keeping every invariant, emitting no
//! more events than `max_events` allowed before it, and, refused, leaving the state as
//! the advance to its time alone would (byte-identical when it did not advance); then
//! inputs on every restored session and lock (keep-alive, acquire and watch of every
//! lock, release, close, and a new session doing the same), then a tick to the next
//! deadline and a long one, with the same checks. An accepted gate answers for each
//! resource its token, admits it and refuses one below it.
#![no_main]

use fencelock::{
    Error, FenceGate, GateRow, Input, LockService, Mode, Output, Reply, Tick, Token, VecStorage,
    Wait,
};
use fencelock_tests::invariants::{check_round_trip, check_service};
use fencelock_tests::vectors::ticked_copy;
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

/// One input frame handed to a restored service: every invariant holds after it, its
/// events stay within the bound, and a refusal leaves only what the advance to its time
/// would (nothing, when the frame does not decode or its time is behind).
fn frame(svc: &mut Svc, frame: &[u8]) {
    let before = svc.snapshot_vec();
    let bound = svc.max_events();
    let decoded = Input::from_frame(frame);
    let ticked = decoded
        .as_ref()
        .ok()
        .map(|i| ticked_copy(svc, i.now().max(svc.now())));
    let mut events: Vec<Output> = Vec::new();
    let r = svc.handle_frame(frame, &mut events);
    assert!(
        events.len() <= bound,
        "{decoded:?}: {} events, bound {bound}",
        events.len()
    );
    if let Err(e) = r {
        match (e, ticked) {
            (Error::BadFrame | Error::TimeWentBackwards { .. }, _) | (_, None) => {
                assert!(
                    events.is_empty(),
                    "{decoded:?}: refused, but emitted events"
                );
                assert_eq!(
                    svc.snapshot_vec(),
                    before,
                    "{decoded:?}: refused, but changed"
                );
            }
            (_, Some((copy, advance))) => {
                assert_eq!(
                    events, advance,
                    "{decoded:?}: refused, but emitted more than its advance"
                );
                assert_eq!(
                    svc.snapshot_vec(),
                    copy.snapshot_vec(),
                    "{decoded:?}: refused, but changed more than its advance"
                );
            }
        }
    }
    if let Err(e) = check_service(svc) {
        panic!("{decoded:?} on a restored state broke an invariant: {e}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let (snapshot, mut frames) = rest.split_at((u16::from_le_bytes(*len) as usize).min(rest.len()));
    if let Ok(mut svc) = LockService::restore(VecStorage::new(8, 8, 16), snapshot) {
        if let Err(e) = check_service(&svc) {
            panic!("restore accepted a state that breaks an invariant: {e}");
        }
        assert_eq!(
            svc.snapshot_vec(),
            snapshot,
            "accepted bytes are not canonical"
        );
        check_round_trip(&svc).expect("round trip");
        for _ in 0..32 {
            let Some((&n, tail)) = frames.split_first() else {
                break;
            };
            let (f, after) = tail.split_at((n as usize).min(tail.len()));
            frames = after;
            frame(&mut svc, f);
        }
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
    if let Ok(mut gate) = FenceGate::restore(vec![GateRow::EMPTY; 8], snapshot) {
        let mut buf = vec![0u8; snapshot.len() + 16];
        let n = gate.snapshot(&mut buf).expect("snapshot fits");
        assert_eq!(&buf[..n], snapshot, "accepted gate bytes are not canonical");
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
