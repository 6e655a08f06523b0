//! Conformance vectors: the native runner replays every committed file, the files match
//! what the generator produces (they cannot go stale), and together they cover every input
//! kind, every reply kind, every event kind and every error an input can get.

use std::collections::BTreeSet;

use fencelock::{Input, Output, Reply};
use fencelock_tests::hex;
use fencelock_tests::vectors::{render, replay, scenarios, vectors_dir};

fn files() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(vectors_dir())
        .expect("tests/vectors exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "vec"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read vector");
            (p.file_name().unwrap().to_string_lossy().into_owned(), text)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn native_runner_replays_every_vector() {
    let files = files();
    assert!(
        files.len() >= 20,
        "expected the committed vectors, found {}",
        files.len()
    );
    let mut total = 0;
    for (name, text) in &files {
        let stats = replay(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(stats.inputs > 0 && stats.snapshots > 0, "{name}: {stats:?}");
        total += stats.inputs;
    }
    println!("replayed {} vectors, {total} inputs", files.len());
}

#[test]
fn vectors_are_fresh() {
    let committed = files();
    let mut generated: Vec<(String, String)> = scenarios()
        .iter()
        .map(|sc| {
            (
                format!("{}.vec", sc.name),
                render(sc).unwrap_or_else(|e| panic!("{e}")),
            )
        })
        .collect();
    generated.sort();
    let names = |v: &[(String, String)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&committed),
        names(&generated),
        "vector files differ from the scenarios: run `cargo run -p fencelock-tests --bin gen-vectors`"
    );
    for ((name, have), (_, want)) in committed.iter().zip(&generated) {
        assert!(
            have == want,
            "{name} is stale: run `cargo run -p fencelock-tests --bin gen-vectors`"
        );
    }
}

/// FNV-1a, 64 bits: enough to see a changed byte (this guards against accidents, not
/// against forgery).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `vectors_are_fresh` holds the files to the generator, and the generator can be rerun:
/// a change to an existing frame's or snapshot's bytes would pass every layer once the
/// files were regenerated. `tests/vectors/FROZEN` holds each committed file's hash and
/// length, so such a change is an edit of that list too, not a side effect.
#[test]
fn committed_vectors_keep_their_bytes() {
    let list = std::fs::read_to_string(vectors_dir().join("FROZEN")).expect("tests/vectors/FROZEN");
    let frozen: Vec<(&str, &str, &str)> = list
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "FROZEN: {l:?} is not `file fnv1a64 bytes`");
            (f[0], f[1], f[2])
        })
        .collect();
    // The service vectors, then the gate vectors (named `gate/…`).
    let mut files = files();
    let gate = vectors_dir().join("gate");
    let mut gates: Vec<(String, String)> = std::fs::read_dir(&gate)
        .expect("tests/vectors/gate exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "vec"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read vector");
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (format!("gate/{name}"), text)
        })
        .collect();
    gates.sort();
    files.extend(gates);
    let names = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        names(files.iter().map(|(n, _)| n.as_str()).collect()),
        names(frozen.iter().map(|f| f.0).collect()),
        "every committed vector file has its line in tests/vectors/FROZEN, and no other"
    );
    for ((name, text), (_, hash, len)) in files.iter().zip(&frozen) {
        assert_eq!(
            (
                format!("{:016x}", fnv1a64(text.as_bytes())),
                text.len().to_string()
            ),
            (hash.to_string(), len.to_string()),
            "{name} changed: a committed vector keeps its bytes (tests/vectors/FROZEN)"
        );
    }
}

#[test]
fn runner_detects_a_wrong_output_a_wrong_error_and_a_wrong_snapshot() {
    let (_, text) = files()
        .into_iter()
        .find(|(n, _)| n.starts_with("02_"))
        .unwrap();
    // Flip the last digit of the first `out`, `err` and `snapshot` line in turn.
    for word in ["out ", "reply ", "err ", "snapshot "] {
        let mut done = false;
        let broken: String = text
            .lines()
            .map(|l| {
                if !done && l.starts_with(word) {
                    done = true;
                    let mut s = l.to_string();
                    let last = s.pop().unwrap();
                    s.push(if last == '0' { '1' } else { '0' });
                    s
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert!(done, "no {word}line");
        assert!(
            replay(&broken).is_err(),
            "a corrupted {word}line was accepted"
        );
    }
    // A missing output line is caught too.
    let dropped: String = {
        let mut skipped = false;
        text.lines()
            .filter(|l| {
                if !skipped && l.starts_with("out ") {
                    skipped = true;
                    return false;
                }
                true
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(replay(&dropped).is_err());
    // So is an `in` that no reply or err line closes, and a reply where an err belongs.
    let unclosed: String = {
        let mut skipped = false;
        text.lines()
            .filter(|l| {
                if !skipped && l.starts_with("reply ") {
                    skipped = true;
                    return false;
                }
                true
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(replay(&unclosed).is_err());
    let swapped = text.replacen("err 101", "reply 08", 1);
    assert!(replay(&swapped).is_err());
}

#[test]
fn vectors_cover_every_input_kind_and_every_input_error() {
    let mut kinds = BTreeSet::new();
    let mut codes = BTreeSet::new();
    let mut replies = BTreeSet::new();
    let mut events = BTreeSet::new();
    for (_, text) in files() {
        for line in text.lines() {
            if let Some(h) = line.strip_prefix("reply ") {
                replies.insert(Reply::from_frame(&hex::decode(h).unwrap()).unwrap().kind());
            }
            if let Some(h) = line.strip_prefix("out ") {
                events.insert(Output::from_frame(&hex::decode(h).unwrap()).unwrap().kind());
            }
            if let Some(h) = line.strip_prefix("in ") {
                if let Ok(i) = Input::from_frame(&hex::decode(h).unwrap()) {
                    kinds.insert(i.kind());
                }
            }
            if let Some(c) = line.strip_prefix("err ") {
                codes.insert(c.parse::<u32>().unwrap());
            }
        }
    }
    let want_kinds: BTreeSet<&str> = [
        "open_session",
        "open_labeled",
        "keep_alive",
        "close_session",
        "acquire",
        "release",
        "cancel",
        "tick",
        "watch",
        "unwatch",
        "release_hold",
    ]
    .into();
    assert_eq!(kinds, want_kinds);
    let want_replies: BTreeSet<&str> = [
        "opened",
        "kept_alive",
        "closed",
        "granted",
        "queued",
        "busy",
        "released",
        "cancelled",
        "hold_ended",
        "wait_ended",
        "ticked",
        "watching",
        "unwatched",
    ]
    .into();
    assert_eq!(replies, want_replies);
    let want_events: BTreeSet<&str> = [
        "granted",
        "released",
        "session_expired",
        "wait_timed_out",
        "holder_changed",
    ]
    .into();
    assert_eq!(events, want_events);
    // Every error an input frame can get (206 and 4xx/50[2-5] cannot come from an input;
    // nor can 208: a frame with a longer label does not decode, 501).
    let want_codes: BTreeSet<u32> = [
        101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 201, 202, 203, 204, 205, 207, 301, 501,
    ]
    .into();
    assert_eq!(codes, want_codes);
}
