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
//! A second log, `determinism_watches.vec` (its own seed), draws from the inputs that
//! semaphores, labels and watches added as well — permits acquires, labelled opens,
//! watch and unwatch, with few watchers allowed per lock — so their events
//! (`HolderChanged`), replies and refusals cross the wasm build byte for byte too. The
//! first log's inputs, and so its bytes, are what they were before those inputs existed.
//!
//! The second log also calls `raise_revision` between inputs, with two directives of its
//! own (no input frame carries it): `raise <floor>` (decimal), closed by `revision <n>`
//! (the revision it returned) or `err <code>` (refused; nothing changed). The C runner
//! (`ffi/tests/c/vectors.c`), the Python runner and the JS runner replay both logs, so
//! each binding's raise_revision is checked against the native core, snapshot bytes and
//! every later token included.
//!
//! After a deliberate change of the core's behaviour, regenerate with
//! `FENCELOCK_BLESS=1 cargo test -p fencelock-wasm --test native_vector` and review the
//! diff.

use std::fmt::Write as _;
use std::path::PathBuf;

use fencelock::{
    Config, Input, Label, LockName, LockService, Mode, Output, SessionId, Tick, VecStorage, Wait,
};

const SEED: u64 = 0x5eed_f00d_2026_1129;
const WATCHES_SEED: u64 = 0x5eed_f00d_2026_1201;
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
///
/// With `watches`, a third of the draws are the newer inputs: acquires of 1–3 of a
/// semaphore's 2 or 3 permits (sometimes a bad count or another limit), opens with a
/// label, watch and unwatch.
fn next_frame(rng: &mut Rng, now: &mut u64, live: &[SessionId], watches: bool) -> Vec<u8> {
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
    // Watches need a watcher and a holder on the same name: fewer names then.
    let locks: &[&str] = if watches {
        &["a", "b", "lock-f"]
    } else {
        &["a", "b", "c", "d", "e", "lock-f", "election"]
    };
    let lock = LockName::new(locks[rng.below(locks.len() as u64) as usize]).expect("valid name");
    let request = if rng.chance(30) {
        Some(rng.below(6))
    } else {
        None
    };
    let input = match rng.below(if watches { 30 } else { 20 }) {
        20..=22 => Input::Acquire {
            now: at,
            session,
            lock,
            mode: Mode::Permits {
                count: rng.below(4) as u32,
                limit: 2 + rng.below(2) as u32,
            },
            wait: match rng.below(3) {
                0 => Wait::None,
                1 => Wait::Forever,
                _ => Wait::Until(Tick(*now + rng.below(8))),
            },
            request,
        },
        23 => Input::OpenLabeled {
            now: at,
            ttl: rng.below(25),
            label: Label::new(["", "w1", "host-b/pid 7", "é"][rng.below(4) as usize])
                .expect("a valid label"),
        },
        24..=26 => Input::Watch {
            now: at,
            session,
            lock,
            request,
        },
        27..=29 => Input::Unwatch {
            now: at,
            session,
            lock,
            request,
        },
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

fn render(watches: bool) -> String {
    let (sessions, locks, claims, lock_delay, max_name_len) = (6, 5, 9, 3, 6);
    let mut text = String::new();
    let (name, seed, max_watchers) = if watches {
        ("determinism_watches", WATCHES_SEED, 1)
    } else {
        ("determinism", SEED, Config::default().max_watchers)
    };
    let _ = writeln!(
        text,
        "# {name}: a seeded random input log (wasm/tests/native_vector.rs)"
    );
    text.push_str("# generated natively; replayed through the wasm build under node\n");
    let _ = write!(
        text,
        "config sessions={sessions} locks={locks} claims={claims} lock_delay={lock_delay} max_name_len={max_name_len}"
    );
    if watches {
        let _ = write!(text, " max_watchers={max_watchers}");
    }
    text.push('\n');
    let mut svc = LockService::new(
        VecStorage::new(sessions, locks, claims),
        Config {
            lock_delay,
            max_name_len,
            max_watchers,
        },
    )
    .expect("valid config");
    let mut rng = Rng(seed);
    let mut raises = Rng(!seed);
    let mut now = 0;
    for i in 0..INPUTS {
        // near the end, jump time past 2^53: frames and snapshots keep the full u64
        if i == INPUTS - 20 {
            now = (1 << 53) + 7;
        }
        // The watches log also raises the revision now and then (`raise`, answered by
        // `revision` or `err`): a floor above, below or at the revision, one past 2^53
        // (tokens the JS side gets as bigints), and one above 2^63 (refused).
        // Drawn from a generator of their own, so the inputs are those of the log without.
        if watches && (raises.chance(3) || i == INPUTS / 3) {
            let r = svc.revision();
            let floor = match if i == INPUTS / 3 { 2 } else { raises.below(8) } {
                0 => r.saturating_sub(raises.below(3)),
                1 if i > INPUTS / 2 => (1 << 53) + raises.below(4),
                2 => (1 << 63) + 1,
                _ => r + raises.below(40),
            };
            let _ = writeln!(text, "raise {floor}");
            match svc.raise_revision(floor) {
                Ok(rev) => {
                    let _ = writeln!(text, "revision {rev}");
                }
                Err(e) => {
                    let _ = writeln!(text, "err {}", e.code());
                }
            }
        }
        let live: Vec<SessionId> = svc.sessions().collect();
        let frame = next_frame(&mut rng, &mut now, &live, watches);
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

/// The committed `name` must be `render(watches)` (or is rewritten with FENCELOCK_BLESS).
fn check_file(name: &str, want: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(name);
    if std::env::var_os("FENCELOCK_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(&path, want).expect("write the vector");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} differs from the native core's run; if the core changed on purpose, regenerate \
         with FENCELOCK_BLESS=1 and review the diff",
        path.display()
    );
}

#[test]
fn watches_vector_matches_the_native_core_and_covers_the_new_inputs() {
    let want = render(true);
    check_file("determinism_watches.vec", &want);
    // The new inputs' replies, events and refusals are in it, not only their frames.
    let mut seen = Vec::new();
    for line in want.lines() {
        let (word, hex) = line.split_once(' ').unwrap_or((line, ""));
        let first = u8::from_str_radix(hex.get(..2).unwrap_or("ff"), 16).unwrap_or(0xff);
        seen.push((word.to_string(), first));
    }
    let has = |word: &str, variant: u8| seen.iter().any(|(w, f)| w == word && *f == variant);
    assert!(
        want.contains("\nraise ") && want.contains("\nrevision ") && want.contains("\nerr 206\n"),
        "no raise_revision step, or none refused"
    );
    assert!(has("reply", 11), "no Watching reply");
    assert!(has("reply", 12), "no Unwatched reply");
    assert!(has("out", 4), "no HolderChanged event");
    for code in ["108", "109", "110", "207", "301"] {
        assert!(
            want.contains(&format!("\nerr {code}\n")),
            "the log has no `err {code}` line"
        );
    }
}

#[test]
fn determinism_vector_matches_the_native_core() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/determinism.vec");
    let want = render(false);
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
