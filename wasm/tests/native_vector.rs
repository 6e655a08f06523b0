//! The native half of the wasm determinism test.
//!
//! Generates a seeded input log, runs it through the core *natively* and renders it in
//! the conformance-vector format (`config`, `in`, then the input's `out` lines and one
//! `reply` or `err`, `snapshot` lines). The
//! result must equal the committed `wasm/tests/vectors/determinism.vec`, which the JS
//! conformance runner (`wasm/tests/conformance.test.mjs`) replays through the wasm build
//! under node, byte for byte. So: same input log, same outputs and snapshot bytes in
//! wasm as in native Rust.
//!
//! After a deliberate change of the core's behaviour, regenerate with
//! `FENCELOCK_BLESS=1 cargo test -p fencelock-wasm --test native_vector` and review the
//! diff.

use std::fmt::Write as _;
use std::path::PathBuf;

use fencelock::{
    Config, Input, LockName, LockService, Mode, Output, SessionId, Tick, VecStorage, Wait,
};

const SEED: u64 = 0x5eed_f00d_2026_1129;
const INPUTS: usize = 600;

/// SplitMix64: deterministic on every platform.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// One input frame: mostly valid inputs over a small universe (so locks contend, tables
/// fill and sessions expire), some refused ones, some undecodable bytes, and numbers
/// past 2^53 (frames carry full u64s). Every input carries a `now`: usually the
/// generator's clock, often a little later (the input advances time itself, with no tick
/// before it), sometimes earlier (refused: time went backwards).
fn next_frame(rng: &mut Rng, now: &mut u64, live: &[SessionId]) -> Vec<u8> {
    let at = match rng.below(10) {
        0 => now.saturating_sub(1 + rng.below(3)),
        1..=3 => {
            *now += 1 + rng.below(3);
            *now
        }
        _ => *now,
    };
    let at = Tick(at);
    if rng.chance(3) {
        let n = rng.below(12) as usize;
        return (0..n).map(|_| rng.next() as u8).collect();
    }
    let session = if !live.is_empty() && rng.chance(85) {
        live[rng.below(live.len() as u64) as usize]
    } else {
        SessionId(1 + rng.below(40))
    };
    let locks = ["a", "b", "c", "d", "e", "lock-f", "election"];
    let lock = LockName::new(locks[rng.below(locks.len() as u64) as usize]).expect("valid name");
    let request = if rng.chance(30) {
        Some(rng.below(6))
    } else {
        None
    };
    let input = match rng.below(20) {
        0..=2 => Input::OpenSession {
            now: at,
            ttl: if rng.chance(5) {
                u64::MAX - rng.below(3)
            } else {
                rng.below(25)
            },
        },
        3..=4 => Input::KeepAlive {
            now: at,
            session,
            request,
        },
        5 => Input::CloseSession {
            now: at,
            session,
            request,
        },
        6..=11 => Input::Acquire {
            now: at,
            session,
            lock,
            mode: if rng.chance(30) {
                Mode::Shared
            } else {
                Mode::Exclusive
            },
            wait: match rng.below(3) {
                0 => Wait::None,
                1 => Wait::Forever,
                _ => Wait::Until(Tick(*now + rng.below(8))),
            },
            request,
        },
        12..=13 => Input::Release {
            now: at,
            session,
            lock,
            request,
        },
        14 => Input::Cancel {
            now: at,
            session,
            lock,
            request,
        },
        _ => {
            let to = if rng.chance(5) {
                now.saturating_sub(1)
            } else {
                *now + rng.below(4)
            };
            // ticks that are not refused move the generator's clock too
            if to >= *now {
                *now = to;
            }
            Input::Tick { now: Tick(to) }
        }
    };
    let mut buf = [0u8; fencelock::MAX_FRAME_LEN];
    let n = input.to_frame(&mut buf).expect("an input fits a frame");
    buf[..n].to_vec()
}

fn render() -> String {
    let (sessions, locks, claims, lock_delay, max_name_len) = (6, 5, 9, 3, 6);
    let mut text = String::new();
    text.push_str("# determinism: a seeded random input log (wasm/tests/native_vector.rs)\n");
    text.push_str("# generated natively; replayed through the wasm build under node\n");
    let _ = writeln!(
        text,
        "config sessions={sessions} locks={locks} claims={claims} lock_delay={lock_delay} max_name_len={max_name_len}"
    );
    let mut svc = LockService::new(
        VecStorage::new(sessions, locks, claims),
        Config {
            lock_delay,
            max_name_len,
        },
    )
    .expect("valid config");
    let mut rng = Rng(SEED);
    let mut now = 0;
    for i in 0..INPUTS {
        // near the end, jump time past 2^53: frames and snapshots keep the full u64
        if i == INPUTS - 20 {
            now = (1 << 53) + 7;
        }
        let live: Vec<SessionId> = svc.sessions().collect();
        let frame = next_frame(&mut rng, &mut now, &live);
        let _ = writeln!(text, "in {}", hex(&frame));
        let mut events: Vec<Output> = Vec::new();
        let result = svc.handle_frame(&frame, &mut events);
        let mut buf = [0u8; fencelock::MAX_FRAME_LEN];
        // The events first (a refused input's too: the advance to its `now` stands), then
        // exactly one reply or err.
        for o in events {
            let n = o.to_frame(&mut buf).expect("an event fits a frame");
            let _ = writeln!(text, "out {}", hex(&buf[..n]));
        }
        match result {
            Ok(reply) => {
                let n = reply.to_frame(&mut buf).expect("a reply fits a frame");
                let _ = writeln!(text, "reply {}", hex(&buf[..n]));
            }
            Err(e) => {
                let _ = writeln!(text, "err {}", e.code());
            }
        }
        if i % 20 == 19 || i == INPUTS - 1 {
            let _ = writeln!(text, "snapshot {}", hex(&svc.snapshot_vec()));
        }
    }
    text
}

#[test]
fn determinism_vector_matches_the_native_core() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/determinism.vec");
    let want = render();
    if std::env::var_os("FENCELOCK_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(&path, &want).expect("write the vector");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} differs from the native core's run of seed {SEED:#x}; if the core changed on \
         purpose, regenerate with FENCELOCK_BLESS=1 and review the diff",
        path.display()
    );
    // the log exercises what it claims to: events and replies, refusals, undecodable
    // frames, time going backwards, big ticks, and a refused input whose advance emitted
    // events (an `out` line right before an `err`)
    for needle in [
        "\nout ",
        "\nreply ",
        "\nerr 101",
        "\nerr 501",
        "\nerr 301",
        "\nerr 205",
    ] {
        assert!(
            want.contains(needle),
            "the log has no `{}` line",
            needle.trim()
        );
    }
    let lines: Vec<&str> = want.lines().collect();
    assert!(
        lines
            .windows(2)
            .any(|w| w[0].starts_with("out ") && w[1].starts_with("err ")),
        "no refused input after an advance that emitted events"
    );
    // every `in` is closed by exactly one reply or err
    let mut open = false;
    for l in &lines {
        if l.starts_with("in ") {
            assert!(!open, "an `in` without reply/err");
            open = true;
        } else if l.starts_with("reply ") || l.starts_with("err ") {
            assert!(open, "a reply/err without `in`");
            open = false;
        }
    }
    assert!(!open);
}
