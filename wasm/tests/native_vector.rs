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
//! A third log, `determinism_release_hold.vec` (its own seed), adds `ReleaseHold` to the
//! first log's inputs over fewer lock names, naming a hold the session has now, one it had
//! before (the session may have taken the lock again since: `NotHolder`, nothing changes),
//! or a token drawn at random, with and without request numbers (a repeat replays
//! `Released`; the number of a release of another token is `RequestReused`). Its frames
//! cross every binding's frame entry point too (the C, Python and JS runners replay every
//! `wasm/tests/vectors/*.vec`).
//!
//! After each `snapshot` line the logs have a `poll <tick>` (or `poll none`) line: what
//! `poll_timeout` gives there, which every runner asks its build (the bare-metal and wasm
//! ones on 32 bits).
//!
//! After a deliberate change of the core's behaviour, regenerate with
//! `FENCELOCK_BLESS=1 cargo test -p fencelock-wasm --test native_vector` and review the
//! diff.

use std::fmt::Write as _;
use std::path::PathBuf;

use fencelock::{
    Config, Input, Label, LockName, LockService, Mode, Output, SessionId, Tick, Token, VecStorage,
    Wait,
};

const SEED: u64 = 0x5eed_f00d_2026_1129;
const WATCHES_SEED: u64 = 0x5eed_f00d_2026_1201;
const RELEASE_HOLD_SEED: u64 = 0x5eed_f00d_2026_1215;
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

/// Which log: the first (the inputs before semaphores, labels and watches), the watches
/// log, or the release-hold log.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Log {
    Plain,
    Watches,
    ReleaseHold,
}

/// The holds the release-hold log names, as `(session, lock, token)`: those at the start
/// of this input (`now`), and those seen at the start of an earlier one that are over now
/// though their session is still open (`over`: the session may hold the lock again, with
/// a newer token).
#[derive(Default)]
struct Holds {
    now: Vec<(SessionId, LockName, u64)>,
    over: Vec<(SessionId, LockName, u64)>,
    seen: Vec<(SessionId, LockName, u64)>,
    revision: u64,
}

impl Holds {
    /// Brings the lists up to date with `svc` before an input.
    fn update(&mut self, svc: &LockService<VecStorage>) {
        self.now.clear();
        for lock in svc.locks() {
            for h in svc.holders(lock.as_str()) {
                let hold = (h.session, lock.clone(), h.token.0);
                if !self.seen.contains(&hold) {
                    self.seen.push(hold.clone());
                }
                self.now.push(hold);
            }
        }
        self.over.clear();
        for hold in &self.seen {
            if svc.session(hold.0).is_some() && !self.now.contains(hold) {
                self.over.push(hold.clone());
            }
        }
        self.revision = svc.revision();
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
///
/// In the release-hold log, 6 draws in 26 are `ReleaseHold`s: of a hold the session has
/// now (its own token: released), of one an open session had before (over, perhaps
/// taken again with a new token since: `NotHolder`), or of a token drawn at random, for
/// the session and lock drawn. The other draws, and the generator's draws for them, are the first log's.
fn next_frame(
    rng: &mut Rng,
    now: &mut u64,
    live: &[SessionId],
    log: Log,
    holds: &Holds,
) -> Vec<u8> {
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
    // Watches need a watcher and a holder on the same name, and a session takes a lock
    // again more often among fewer: fewer names then.
    let locks: &[&str] = if log != Log::Plain {
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
    let draws = match log {
        Log::Plain => 20,
        Log::Watches => 30,
        Log::ReleaseHold => 26,
    };
    let input = match rng.below(draws) {
        20..=25 if log == Log::ReleaseHold => {
            let (session, lock, token) = match rng.below(10) {
                0..=3 if !holds.now.is_empty() => {
                    holds.now[rng.below(holds.now.len() as u64) as usize].clone()
                }
                4..=7 if !holds.over.is_empty() => {
                    holds.over[rng.below(holds.over.len() as u64) as usize].clone()
                }
                _ => (session, lock, rng.below(holds.revision + 2)),
            };
            Input::ReleaseHold {
                now: at,
                session,
                lock,
                token: Token(token),
                request,
            }
        }
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

fn render(log: Log) -> String {
    let (sessions, locks, claims, lock_delay, max_name_len) = (6, 5, 9, 3, 6);
    let watches = log == Log::Watches;
    let mut text = String::new();
    let (name, seed, max_watchers) = match log {
        Log::Watches => ("determinism_watches", WATCHES_SEED, 1),
        Log::Plain => ("determinism", SEED, Config::default().max_watchers),
        Log::ReleaseHold => (
            "determinism_release_hold",
            RELEASE_HOLD_SEED,
            Config::default().max_watchers,
        ),
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
    let mut holds = Holds::default();
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
        if log == Log::ReleaseHold {
            holds.update(&svc);
        }
        let frame = next_frame(&mut rng, &mut now, &live, log, &holds);
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
            // What the host must wake for next: deadlines are u64 ticks in a heap, so
            // the 32-bit builds answer it too.
            match svc.poll_timeout() {
                Some(t) => writeln!(text, "poll {}", t.0),
                None => writeln!(text, "poll none"),
            }
            .expect("a String takes it");
        }
    }
    text
}

/// The committed file at `path` must be `want`. With `FENCELOCK_BLESS=1` a file that
/// differs is rewritten and the test still fails, naming it ("review the diff and run
/// again without it"): a bless run never passes by comparing a file with itself.
fn check_vector(path: &std::path::Path, want: &str, what: &str) {
    let have = std::fs::read_to_string(path).unwrap_or_default();
    if have == want {
        return;
    }
    if std::env::var_os("FENCELOCK_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(path, want).expect("write the vector");
        panic!(
            "blessed {}: review the diff and run again without FENCELOCK_BLESS",
            path.display()
        );
    }
    panic!(
        "{} differs from {what}; if the core changed on purpose, regenerate with \
         FENCELOCK_BLESS=1 and review the diff",
        path.display()
    );
}

/// The committed `name` must be `render(watches)` ([`check_vector`]).
fn check_file(name: &str, want: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(name);
    check_vector(&path, want, "the native core's run");
}

#[test]
fn watches_vector_matches_the_native_core_and_covers_the_new_inputs() {
    let want = render(Log::Watches);
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
    let want = render(Log::Plain);
    check_vector(
        &path,
        &want,
        &format!("the native core's run of seed {SEED:#x}"),
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

#[test]
fn release_hold_vector_matches_the_native_core_and_covers_its_answers() {
    let want = render(Log::ReleaseHold);
    check_file("determinism_release_hold.vec", &want);
    // What each ReleaseHold (frame variant 10) was answered: `Released` (reply variant 6),
    // `NotHolder` (102) — also while the session holds the lock with another token — and
    // the request-number answers of a numbered one.
    let lines: Vec<&str> = want.lines().collect();
    let mut answers: Vec<String> = Vec::new();
    let mut with_request = 0;
    let mut newer_hold_kept = 0;
    // render's service, replayed alongside to see what each session held before its input
    let mut svc = LockService::new(
        VecStorage::new(6, 5, 9),
        Config {
            lock_delay: 3,
            max_name_len: 6,
            max_watchers: Config::default().max_watchers,
        },
    )
    .expect("valid config");
    for (i, line) in lines.iter().enumerate() {
        let Some(hex) = line.strip_prefix("in ") else {
            continue;
        };
        let frame: Vec<u8> = (0..hex.len() / 2)
            .map(|k| u8::from_str_radix(&hex[2 * k..2 * k + 2], 16).expect("hex"))
            .collect();
        let input = Input::from_frame(&frame).ok();
        let mut kept = None;
        if let Some(Input::ReleaseHold {
            session,
            lock,
            token,
            request,
            ..
        }) = &input
        {
            let held = svc
                .holders(lock.as_str())
                .find(|h| h.session == *session)
                .map(|h| h.token);
            let answer = lines[i + 1..]
                .iter()
                .find(|l| l.starts_with("reply ") || l.starts_with("err "))
                .expect("an answer");
            if let Some(newer) = held.filter(|t| t != token && answer.starts_with("err 102")) {
                kept = Some((*session, lock.clone(), newer));
            }
            if request.is_some() {
                with_request += 1;
            }
            answers.push(answer.get(..8).unwrap_or(answer).to_string());
        }
        // (this log has no `raise` steps: the inputs alone make the state)
        let _ = svc.handle_frame(&frame, &mut Vec::<Output>::new());
        if let Some((session, lock, newer)) = kept {
            assert!(
                svc.holders(lock.as_str())
                    .any(|h| h.session == session && h.token == newer),
                "{line}: the session's newer hold stays"
            );
            newer_hold_kept += 1;
        }
    }
    let count = |a: &str| answers.iter().filter(|x| x.starts_with(a)).count();
    assert!(answers.len() > 100, "{} release_hold inputs", answers.len());
    assert!(count("reply 06") > 10, "released: {answers:?}");
    assert!(count("err 102") > 20, "not_holder: {answers:?}");
    assert!(
        newer_hold_kept >= 5,
        "a ReleaseHold of an old token while the session holds the lock with a newer one: \
         {newer_hold_kept}"
    );
    assert!(with_request > 20, "numbered: {with_request}");
    for code in ["err 101", "err 106", "err 107", "err 205"] {
        assert!(
            count(code) > 0,
            "no release_hold answered `{code}`: {answers:?}"
        );
    }
}
