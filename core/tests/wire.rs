//! postcard frames: every input, reply and output round-trips, the largest fits MAX_FRAME_LEN,
//! bad bytes are refused, and the encoding of a few values is pinned (other layers and the
//! conformance vectors depend on it).

mod common;
use common::*;

use fencelock::{
    Change, Error, Input, Label, LockName, Mode, Output, ReleaseReason, Reply, SessionId, Table,
    Tick, Token, Wait, MAX_FRAME_LEN, MAX_LABEL_LEN, MAX_NAME_LEN,
};

fn longest() -> LockName {
    name(&"n".repeat(MAX_NAME_LEN))
}

fn longest_label() -> Label {
    Label::new(&"l".repeat(MAX_LABEL_LEN)).unwrap()
}

fn all_inputs(n: LockName, big: u64) -> Vec<Input> {
    let s = SessionId(big);
    let now = Tick(big);
    vec![
        Input::OpenSession { now, ttl: big },
        Input::KeepAlive {
            now,
            session: s,
            request: Some(big),
        },
        Input::CloseSession {
            now,
            session: s,
            request: None,
        },
        Input::Acquire {
            now,
            session: s,
            lock: n.clone(),
            mode: Mode::Shared,
            wait: Wait::Until(Tick(big)),
            request: Some(big),
        },
        Input::Acquire {
            now,
            session: s,
            lock: n.clone(),
            mode: Mode::Exclusive,
            wait: Wait::Forever,
            request: None,
        },
        Input::Acquire {
            now,
            session: s,
            lock: n.clone(),
            mode: Mode::Exclusive,
            wait: Wait::None,
            request: None,
        },
        Input::Release {
            now,
            session: s,
            lock: n.clone(),
            request: Some(big),
        },
        Input::Cancel {
            now,
            session: s,
            lock: n.clone(),
            request: Some(big),
        },
        Input::Tick { now: Tick(big) },
        Input::Acquire {
            now,
            session: s,
            lock: n.clone(),
            mode: Mode::Permits {
                count: u32::MAX,
                limit: u32::MAX,
            },
            wait: Wait::Until(Tick(big)),
            request: Some(big),
        },
        Input::OpenLabeled {
            now,
            ttl: big,
            label: longest_label(),
        },
        Input::Watch {
            now,
            session: s,
            lock: n.clone(),
            request: Some(big),
        },
        Input::Unwatch {
            now,
            session: s,
            lock: n.clone(),
            request: Some(big),
        },
        Input::ReleaseHold {
            now,
            session: s,
            lock: n,
            token: Token(big),
            request: Some(big),
        },
    ]
}

fn all_outputs(n: LockName, big: u64) -> Vec<Output> {
    let s = SessionId(big);
    vec![
        Output::SessionExpired { session: s },
        Output::Granted {
            session: s,
            lock: n.clone(),
            mode: Mode::Shared,
            token: Token(big),
        },
        Output::Released {
            session: s,
            lock: n.clone(),
            token: Token(big),
            reason: ReleaseReason::Expired,
        },
        Output::Released {
            session: s,
            lock: n.clone(),
            token: Token(big),
            reason: ReleaseReason::Closed,
        },
        Output::WaitTimedOut {
            session: s,
            lock: n.clone(),
        },
        Output::HolderChanged {
            session: s,
            lock: n,
            holder: s,
            mode: Mode::Permits {
                count: u32::MAX,
                limit: u32::MAX,
            },
            token: Token(big),
            change: Change::Expired,
            label: longest_label(),
        },
    ]
}

fn all_replies(big: u64) -> Vec<Reply> {
    let position = big.min(u32::MAX as u64) as u32;
    vec![
        Reply::Opened {
            session: SessionId(big),
            expires_at: Tick(big),
        },
        Reply::KeptAlive {
            expires_at: Tick(big),
        },
        Reply::Closed,
        Reply::Granted {
            mode: Mode::Shared,
            token: Token(big),
        },
        Reply::Queued {
            mode: Mode::Exclusive,
            position,
        },
        Reply::Busy,
        Reply::Released { token: Token(big) },
        Reply::Cancelled,
        Reply::HoldEnded { token: Token(big) },
        Reply::WaitEnded,
        Reply::Ticked { now: Tick(big) },
        Reply::Watching { holders: position },
        Reply::Unwatched,
    ]
}

#[test]
fn every_input_round_trips_and_fits_max_frame_len() {
    let mut largest = 0;
    for big in [0, 1, 300, u64::MAX] {
        for input in all_inputs(longest(), big)
            .into_iter()
            .chain(all_inputs(name("a"), big))
        {
            let mut buf = [0u8; MAX_FRAME_LEN];
            let n = input.to_frame(&mut buf).unwrap();
            largest = largest.max(n);
            assert_eq!(Input::from_frame(&buf[..n]), Ok(input));
        }
    }
    assert!(
        largest <= MAX_FRAME_LEN && largest > MAX_FRAME_LEN / 2,
        "largest input frame: {largest}"
    );
}

#[test]
fn every_output_round_trips_and_fits_max_frame_len() {
    let mut largest = 0;
    for big in [0, 1, 300, u64::MAX] {
        for output in all_outputs(longest(), big)
            .into_iter()
            .chain(all_outputs(name("a"), big))
        {
            let mut buf = [0u8; MAX_FRAME_LEN];
            let n = output.to_frame(&mut buf).unwrap();
            largest = largest.max(n);
            assert_eq!(Output::from_frame(&buf[..n]), Ok(output));
        }
    }
    assert!(largest <= MAX_FRAME_LEN, "largest output frame: {largest}");
}

#[test]
fn every_reply_round_trips_and_fits_max_frame_len() {
    let mut kinds = std::collections::BTreeSet::new();
    for big in [0, 1, 300, u64::MAX] {
        for reply in all_replies(big) {
            let mut buf = [0u8; MAX_FRAME_LEN];
            let n = reply.to_frame(&mut buf).unwrap();
            assert!(n <= MAX_FRAME_LEN);
            assert_eq!(Reply::from_frame(&buf[..n]), Ok(reply));
            let mut trailing = buf[..n].to_vec();
            trailing.push(0);
            assert_eq!(Reply::from_frame(&trailing), Err(Error::BadFrame));
            kinds.insert(reply.kind());
        }
    }
    assert_eq!(kinds.len(), all_replies(0).len(), "kinds are distinct");
    assert_eq!(Reply::from_frame(&[99]), Err(Error::BadFrame));
}

#[test]
fn the_encoding_is_pinned() {
    let enc = |i: Input| {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = i.to_frame(&mut buf).unwrap();
        buf[..n].to_vec()
    };
    // every input begins with its variant, then its now
    assert_eq!(
        enc(Input::OpenSession {
            now: Tick(4),
            ttl: 10
        }),
        [0, 4, 10]
    );
    assert_eq!(enc(Input::Tick { now: Tick(300) }), [6, 0xac, 0x02]);
    assert_eq!(
        enc(Input::Acquire {
            now: Tick(7),
            session: SessionId(1),
            lock: name("l"),
            mode: Mode::Shared,
            wait: Wait::Until(Tick(9)),
            request: Some(2)
        }),
        [3, 7, 1, 1, b'l', 1, 1, 9, 1, 2]
    );
    let mut buf = [0u8; MAX_FRAME_LEN];
    let g = Output::Granted {
        session: SessionId(2),
        lock: name("l"),
        mode: Mode::Exclusive,
        token: Token(35),
    };
    let n = g.to_frame(&mut buf).unwrap();
    assert_eq!(buf[..n], [0, 2, 1, b'l', 0, 35]);
    let r = Reply::Granted {
        mode: Mode::Exclusive,
        token: Token(35),
    };
    let n = r.to_frame(&mut buf).unwrap();
    assert_eq!(buf[..n], [3, 0, 35]);
    let r = Reply::Queued {
        mode: Mode::Shared,
        position: 2,
    };
    let n = r.to_frame(&mut buf).unwrap();
    assert_eq!(buf[..n], [4, 1, 2]);
    // the variants of semaphores, labels and watches are appended: the bytes above stay
    assert_eq!(
        enc(Input::Acquire {
            now: Tick(7),
            session: SessionId(1),
            lock: name("l"),
            mode: Mode::Permits { count: 2, limit: 5 },
            wait: Wait::Forever,
            request: None
        }),
        [3, 7, 1, 1, b'l', 2, 2, 5, 2, 0]
    );
    assert_eq!(
        enc(Input::OpenLabeled {
            now: Tick(4),
            ttl: 10,
            label: Label::new("h").unwrap()
        }),
        [7, 4, 10, 1, b'h']
    );
    assert_eq!(
        enc(Input::Watch {
            now: Tick(7),
            session: SessionId(1),
            lock: name("l"),
            request: Some(3)
        }),
        [8, 7, 1, 1, b'l', 1, 3]
    );
    assert_eq!(
        enc(Input::Unwatch {
            now: Tick(7),
            session: SessionId(1),
            lock: name("l"),
            request: None
        }),
        [9, 7, 1, 1, b'l', 0]
    );
    let h = Output::HolderChanged {
        session: SessionId(3),
        lock: name("l"),
        holder: SessionId(2),
        mode: Mode::Shared,
        token: Token(35),
        change: Change::Released,
        label: Label::new("h").unwrap(),
    };
    let n = h.to_frame(&mut buf).unwrap();
    assert_eq!(buf[..n], [4, 3, 1, b'l', 2, 1, 35, 2, 1, b'h']);
    let n = Reply::Watching { holders: 2 }.to_frame(&mut buf).unwrap();
    assert_eq!(buf[..n], [11, 2]);
    let n = Reply::Unwatched.to_frame(&mut buf).unwrap();
    assert_eq!(buf[..n], [12]);
}

#[test]
fn bad_frames_are_refused() {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = Input::Tick { now: Tick(5) }.to_frame(&mut buf).unwrap();
    let mut trailing = buf[..n].to_vec();
    trailing.push(0);
    assert_eq!(Input::from_frame(&trailing), Err(Error::BadFrame));
    assert_eq!(Input::from_frame(&buf[..n - 1]), Err(Error::BadFrame));
    assert_eq!(
        Input::from_frame(&[99]),
        Err(Error::BadFrame),
        "unknown variant"
    );
    // a name longer than MAX_NAME_LEN cannot be decoded
    let mut long = vec![3, 0, 1, 65];
    long.extend(std::iter::repeat_n(b'n', 65));
    long.extend([0, 2, 0]);
    assert_eq!(Input::from_frame(&long), Err(Error::BadFrame));
    // invalid UTF-8 in a name
    assert_eq!(
        Input::from_frame(&[3, 0, 1, 1, 0xff, 0, 2, 0]),
        Err(Error::BadFrame)
    );
    let o = Output::SessionExpired {
        session: SessionId(1),
    };
    let n = o.to_frame(&mut buf).unwrap();
    assert_eq!(Output::from_frame(&buf[..n + 1]), Err(Error::BadFrame));
}

/// Postcard decodes an over-long varint; a frame is taken only in the one encoding
/// `to_frame` writes, so equal values are equal bytes.
#[test]
fn only_the_canonical_encoding_of_a_frame_is_taken() {
    assert_eq!(Input::from_frame(&[6, 0]), Ok(Input::Tick { now: Tick(0) }));
    for padded in [
        &[0x86, 0x00, 0x00][..], // the variant in two bytes
        &[6, 0x80, 0x00],        // now in two bytes
        &[0x86, 0x00, 0x80, 0x00],
    ] {
        assert_eq!(
            Input::from_frame(padded),
            Err(Error::BadFrame),
            "{padded:x?}"
        );
    }
    // Every frame of every kind: its canonical bytes decode, and padding its first
    // varint (the variant index) by one byte is refused.
    let mut buf = [0u8; MAX_FRAME_LEN];
    let pad = |frame: &[u8]| -> Vec<u8> {
        // the first varint (the variant index) made one byte longer
        let mut v = vec![frame[0] | 0x80, 0x00];
        v.extend_from_slice(&frame[1..]);
        v
    };
    for i in all_inputs(longest(), u64::MAX) {
        let n = i.to_frame(&mut buf).unwrap();
        assert_eq!(Input::from_frame(&buf[..n]).as_ref(), Ok(&i));
        assert_eq!(
            Input::from_frame(&pad(&buf[..n])),
            Err(Error::BadFrame),
            "{i:?}"
        );
    }
    for o in all_outputs(longest(), u64::MAX) {
        let n = o.to_frame(&mut buf).unwrap();
        assert_eq!(Output::from_frame(&buf[..n]).as_ref(), Ok(&o));
        assert_eq!(
            Output::from_frame(&pad(&buf[..n])),
            Err(Error::BadFrame),
            "{o:?}"
        );
    }
    for r in all_replies(u64::MAX) {
        let n = r.to_frame(&mut buf).unwrap();
        assert_eq!(Reply::from_frame(&buf[..n]).as_ref(), Ok(&r));
        assert_eq!(
            Reply::from_frame(&pad(&buf[..n])),
            Err(Error::BadFrame),
            "{r:?}"
        );
    }
}

#[test]
fn a_short_buffer_reports_the_size_needed() {
    let i = Input::Acquire {
        now: Tick(u64::MAX),
        session: SessionId(1),
        lock: longest(),
        mode: Mode::Shared,
        wait: Wait::Forever,
        request: None,
    };
    let mut big = [0u8; MAX_FRAME_LEN];
    let need = i.to_frame(&mut big).unwrap();
    let mut small = [0u8; 10];
    assert_eq!(
        i.to_frame(&mut small),
        Err(Error::BufferTooSmall { need: need as u32 })
    );
    let o = Output::WaitTimedOut {
        session: SessionId(1),
        lock: longest(),
    };
    let need = o.to_frame(&mut big).unwrap();
    assert_eq!(
        o.to_frame(&mut small),
        Err(Error::BufferTooSmall { need: need as u32 })
    );
}

#[test]
fn handle_frame_applies_the_decoded_input() {
    let mut svc = svc(4);
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = Input::OpenSession {
        now: Tick(2),
        ttl: 5,
    }
    .to_frame(&mut buf)
    .unwrap();
    let got = run_at(&mut svc, 2, |v, _now, o| v.handle_frame(&buf[..n], o));
    assert_eq!(
        got,
        (
            Reply::Opened {
                session: SessionId(1),
                expires_at: Tick(7)
            },
            vec![]
        ),
        "the frame's now is applied"
    );
    // an empty name decodes, and is refused by the service like any other input
    let n = Input::Acquire {
        now: Tick(2),
        session: SessionId(1),
        lock: LockName::default(),
        mode: Mode::Shared,
        wait: Wait::None,
        request: None,
    }
    .to_frame(&mut buf)
    .unwrap();
    assert_eq!(
        refused(&mut svc, |v, _now, o| v.handle_frame(&buf[..n], o)),
        Error::EmptyName
    );
    // at a later now, the refusal keeps the frame's advance (and only that)
    let n = Input::Acquire {
        now: Tick(7),
        session: SessionId(1),
        lock: LockName::default(),
        mode: Mode::Shared,
        wait: Wait::None,
        request: None,
    }
    .to_frame(&mut buf)
    .unwrap();
    let (e, events) = refused_at(&mut svc, 7, |v, _now, o| v.handle_frame(&buf[..n], o));
    assert_eq!(e, Error::UnknownSession(SessionId(1)));
    assert_eq!(events, vec![expired(SessionId(1))]);
}

#[test]
fn errors_and_queries_serialize() {
    for e in Error::EXAMPLES
        .iter()
        .copied()
        .chain([Error::CapacityExceeded(Table::Resources)])
    {
        let mut buf = [0u8; 64];
        let bytes = postcard::to_slice(&e, &mut buf).unwrap();
        assert_eq!(postcard::from_bytes::<Error>(bytes).unwrap(), e);
    }
    let mut svc = svc(4);
    let a = open(&mut svc, 5);
    let info = svc.session(a).unwrap();
    let mut buf = [0u8; 64];
    let bytes = postcard::to_slice(&info, &mut buf).unwrap();
    assert_eq!(
        postcard::from_bytes::<fencelock::SessionInfo>(bytes).unwrap(),
        info
    );
}

#[test]
fn names_display_and_validate() {
    assert_eq!(LockName::new(""), Err(Error::EmptyName));
    assert_eq!(
        LockName::new(&"x".repeat(65)),
        Err(Error::NameTooLong { len: 65, max: 64 })
    );
    let n = LockName::try_from("jobs/reindex").unwrap();
    assert_eq!(
        (n.as_str(), n.len(), n.is_empty()),
        ("jobs/reindex", 12, false)
    );
    assert_eq!(n.to_string(), "jobs/reindex");
    assert_eq!(SessionId(3).to_string(), "session 3");
    assert_eq!(Token(34).to_string(), "token 34");
    assert_eq!(Tick(7).to_string(), "t7");
    assert_eq!(Mode::Shared.to_string(), "shared");
    assert_eq!(
        Mode::Permits { count: 2, limit: 5 }.to_string(),
        "2 of 5 permits"
    );
    let l = Label::try_from("host-1").unwrap();
    assert_eq!((l.as_str(), l.len(), l.is_empty()), ("host-1", 6, false));
    assert_eq!(l.to_string(), "host-1");
    assert_eq!(format!("{l:?}"), "\"host-1\"");
    assert_eq!(Label::default(), Label::EMPTY);
    assert_eq!(Tick(u64::MAX).checked_add(1), None);
    assert_eq!(Tick(1).checked_add(2), Some(Tick(3)));
}

fn random_input(rng: &mut Rng, now: u64) -> Input {
    let session = SessionId(1 + rng.below(6));
    let lock = name(["a", "b", "c"][rng.below(3) as usize]);
    let request = [None, Some(rng.below(4))][rng.below(2) as usize];
    let mode = [
        Mode::Exclusive,
        Mode::Shared,
        Mode::Permits {
            count: rng.below(4) as u32,
            limit: 2 + rng.below(2) as u32,
        },
    ][rng.below(3) as usize];
    // mostly now, sometimes later, sometimes earlier (refused)
    let at = Tick(match rng.below(6) {
        0 => now.saturating_sub(1),
        1 => now + rng.below(4),
        _ => now,
    });
    match rng.below(11) {
        0 => Input::OpenSession {
            now: at,
            ttl: rng.below(30),
        },
        8 => Input::OpenLabeled {
            now: at,
            ttl: rng.below(30),
            label: Label::new(["", "w"][rng.below(2) as usize]).unwrap(),
        },
        9 => Input::Watch {
            now: at,
            session,
            lock,
            request,
        },
        10 => Input::Unwatch {
            now: at,
            session,
            lock,
            request,
        },
        1 => Input::KeepAlive {
            now: at,
            session,
            request,
        },
        2 => Input::CloseSession {
            now: at,
            session,
            request,
        },
        3 | 4 => {
            let wait = [
                Wait::None,
                Wait::Forever,
                Wait::Until(Tick(now + rng.below(9))),
            ][rng.below(3) as usize];
            Input::Acquire {
                now: at,
                session,
                lock,
                mode,
                wait,
                request,
            }
        }
        5 => Input::Release {
            now: at,
            session,
            lock,
            request,
        },
        6 => Input::Cancel {
            now: at,
            session,
            lock,
            request,
        },
        _ => Input::Tick {
            now: Tick(now + rng.below(4)),
        },
    }
}

#[test]
fn random_frames_never_panic_and_refusals_change_nothing() {
    // Seeded: valid frames of random inputs, half of them then mutated.
    let mut rng = Rng(0x5eed_f00d);
    let mut svc = svc(8);
    let (mut applied, mut refused_frames) = (0, 0);
    for i in 0..20_000 {
        let input = random_input(&mut rng, svc.now().0);
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = input.to_frame(&mut buf).unwrap();
        let mut frame = buf[..n].to_vec();
        if rng.below(2) == 0 {
            let j = rng.below(n as u64) as usize;
            match rng.below(3) {
                0 => frame[j] = rng.below(256) as u8,
                1 => frame.truncate(j),
                _ => frame.push(rng.below(256) as u8),
            }
        }
        // what a refusal may leave: the advance to the frame's now, if it decodes to a
        // now not in the past; otherwise nothing at all
        let mut ticked = twin(&svc);
        let mut advance = Vec::new();
        if let Ok(decoded) = Input::from_frame(&frame) {
            let _ = ticked.tick(decoded.now(), &mut advance);
        }
        let mut got = Vec::new();
        match svc.handle_frame(&frame, &mut got) {
            Ok(_) => applied += 1,
            Err(e) => {
                refused_frames += 1;
                assert_eq!(got, advance, "frame {i} {frame:?}: {e} emitted more");
                assert_eq!(
                    svc.snapshot_vec(),
                    ticked.snapshot_vec(),
                    "frame {i} {frame:?}: {e} changed the state"
                );
            }
        }
        if i % 20 == 0 {
            check_invariants(&svc);
        }
    }
    assert!(
        applied > 2_000 && refused_frames > 2_000,
        "applied {applied}, refused {refused_frames}"
    );
}

#[test]
fn errors_decode_from_owned_bytes_with_their_reasons() {
    fn owned<T: serde::de::DeserializeOwned>(bytes: Vec<u8>) -> T {
        postcard::from_bytes(&bytes).unwrap()
    }
    // (The two reasons a snapshot's or gate's header varint gives, made by a helper: what
    // tests/snapshot.rs and tests/gate.rs see `restore` and `load` return.)
    for e in Error::EXAMPLES.iter().copied().chain([
        Error::BadConfig("margin must be in 1..ttl"),
        Error::CorruptSnapshot("bad version"),
        Error::CorruptSnapshot("truncated header"),
    ]) {
        let mut buf = [0u8; 128];
        let bytes = postcard::to_slice(&e, &mut buf).unwrap().to_vec();
        assert_eq!(owned::<Error>(bytes), e);
    }
    // a reason this build does not know still decodes, as "unrecognised reason"
    let mut buf = [0u8; 128];
    let foreign = postcard::to_slice(&(19u8, "from a newer build"), &mut buf)
        .unwrap()
        .to_vec();
    assert_eq!(
        owned::<Error>(foreign),
        Error::CorruptSnapshot("unrecognised reason")
    );
}
