//! Gate conformance vectors: the files match the scenarios (they cannot go stale), the
//! native gate replays them, and a replay catches a gate that answers differently.

use fencelock::{Error, FenceGate, GateRow, NameKey, Token};
use fencelock_tests::gate_vectors::{
    gate_scenarios, gate_vector_files, render_gate, replay_gate, GateUnderTest,
};

#[test]
fn gate_vectors_are_fresh() {
    let committed = gate_vector_files().expect("tests/vectors/gate is readable");
    let mut generated: Vec<(String, String)> = gate_scenarios()
        .iter()
        .map(|sc| {
            let text = render_gate(sc).unwrap_or_else(|e| panic!("{e}"));
            (format!("{}.vec", sc.name), text)
        })
        .collect();
    generated.sort();
    assert_eq!(
        committed, generated,
        "gate vector files differ from the scenarios: run `cargo run -p fencelock-tests --bin gen-vectors`"
    );
}

#[test]
fn native_gate_replays_every_gate_vector() {
    let files = gate_vector_files().unwrap();
    assert!(files.len() >= 3, "expected the committed gate vectors");
    for (name, text) in &files {
        let stats = replay_gate(text, |c| {
            FenceGate::new(vec![GateRow::EMPTY; c.resources]).unwrap()
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            stats.admits > 0 && stats.refusals > 0 && stats.highest > 0,
            "{name}: {stats:?}"
        );
    }
}

/// A gate keyed against names chosen to collide (`set_name_key`) answers every vector as
/// the unkeyed one does.
#[test]
fn a_keyed_gate_replays_every_gate_vector() {
    let files = gate_vector_files().unwrap();
    for (i, (name, text)) in files.iter().enumerate() {
        replay_gate(text, |c| {
            let mut gate = FenceGate::new(vec![GateRow::EMPTY; c.resources]).unwrap();
            gate.set_name_key(NameKey([i as u64 + 1, 0x5eed]));
            gate
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// A gate that admits a token one below the highest: the replay must notice.
struct OffByOne(FenceGate<Vec<GateRow>>);

impl GateUnderTest for OffByOne {
    fn admit(&mut self, resource: &str, token: Token) -> Result<(), Error> {
        match self.0.admit(resource, token) {
            Err(Error::Stale { highest, .. }) if token.0 + 1 == highest.0 => Ok(()),
            r => r,
        }
    }
    fn highest(&mut self, resource: &str) -> Option<Token> {
        self.0.highest(resource)
    }
}

#[test]
fn replay_catches_a_gate_that_admits_a_lower_token() {
    let files = gate_vector_files().unwrap();
    let (_, text) = files.iter().find(|(n, _)| n.starts_with("01_")).unwrap();
    let err = replay_gate(text, |c| {
        OffByOne(FenceGate::new(vec![GateRow::EMPTY; c.resources]).unwrap())
    })
    .expect_err("an off-by-one gate passed the vectors");
    assert!(
        err.contains("expected err 401, the admit succeeded"),
        "{err}"
    );
}

/// A gate whose refusals carry the right code but not the right values: a stale
/// refusal naming another token, a too-long name another length. The replay compares
/// whole errors, so each is caught.
struct WrongDetails(FenceGate<Vec<GateRow>>, bool);

impl GateUnderTest for WrongDetails {
    fn admit(&mut self, resource: &str, token: Token) -> Result<(), Error> {
        match (self.0.admit(resource, token), self.1) {
            (Err(Error::Stale { token, highest }), true) => Err(Error::Stale {
                token: Token(token.0 ^ 1),
                highest,
            }),
            (Err(Error::NameTooLong { len, max }), false) => {
                Err(Error::NameTooLong { len: len + 1, max })
            }
            (r, _) => r,
        }
    }
    fn highest(&mut self, resource: &str) -> Option<Token> {
        self.0.highest(resource)
    }
}

#[test]
fn replay_catches_a_refusal_with_the_right_code_and_wrong_values() {
    let files = gate_vector_files().unwrap();
    for stale in [true, false] {
        let mut caught = 0;
        for (name, text) in &files {
            if let Err(e) = replay_gate(text, |c| {
                WrongDetails(
                    FenceGate::new(vec![GateRow::EMPTY; c.resources]).unwrap(),
                    stale,
                )
            }) {
                let (code, what) = if stale {
                    ("err 401", "Stale")
                } else {
                    ("err 202", "NameTooLong")
                };
                assert!(e.contains(code) && e.contains(what), "{name}: {e}");
                caught += 1;
            }
        }
        assert!(
            caught > 0,
            "wrong values in {} refusals passed",
            if stale { "stale" } else { "name_too_long" }
        );
    }
}

#[test]
fn replay_refuses_malformed_lines() {
    let make = |c: fencelock_tests::gate_vectors::GateConfig| {
        FenceGate::new(vec![GateRow::EMPTY; c.resources]).unwrap()
    };
    assert!(replay_gate("in 00", make)
        .unwrap_err()
        .contains("before config"));
    assert!(replay_gate("config resources=2\nin 0161", make)
        .unwrap_err()
        .contains("truncated"));
    assert!(replay_gate("config resources=2\nin 016105\nerr 401", make)
        .unwrap_err()
        .contains("the admit succeeded"));
    assert!(replay_gate("config resources=2\nin 016100", make)
        .unwrap_err()
        .contains("no err line"));
    assert!(replay_gate("config resources=2\nbogus", make)
        .unwrap_err()
        .contains("unknown directive"));
}

#[test]
fn admit_frames_round_trip_and_garbage_is_refused_without_panic() {
    use fencelock_tests::gate_vectors::{admit_frame, parse_admit_frame};
    for (r, t) in [
        ("", 0),
        ("ledger", 35),
        ("a\0b", u64::MAX),
        (&*"é".repeat(40), 1 << 40),
    ] {
        assert_eq!(
            parse_admit_frame(&admit_frame(r, t)),
            Ok((r.to_string(), t))
        );
    }
    // every frame of up to 2 bytes, and seeded random ones up to 24: an answer, never a panic
    let mut n = 0;
    for len in 0..=2usize {
        for v in 0..(1u32 << (8 * len)) {
            let _ = parse_admit_frame(&v.to_le_bytes()[..len]);
            n += 1;
        }
    }
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..50_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 25) as usize;
        let bytes: Vec<u8> = (0..len).map(|i| (x >> (i % 8 * 8)) as u8).collect();
        let _ = parse_admit_frame(&bytes);
        n += 1;
    }
    assert!(n > 100_000);
    assert!(parse_admit_frame(&[0x01, b'a', 0x05, 0x00]).is_err()); // trailing byte
    assert!(parse_admit_frame(&[0x02, b'a']).is_err()); // name past the end
    assert!(parse_admit_frame(&[0x01, 0xff, 0x05]).is_err()); // not UTF-8
    let mut over = vec![0x00];
    over.extend([0xff; 9]);
    over.push(0x02); // 2^64 and up
    assert!(parse_admit_frame(&over).is_err());
    // a config line cannot make a replay allocate without bound
    let big = replay_gate("config resources=99999999999", |c| {
        FenceGate::new(vec![GateRow::EMPTY; c.resources]).unwrap()
    });
    assert!(big.unwrap_err().contains("1..="));
}
