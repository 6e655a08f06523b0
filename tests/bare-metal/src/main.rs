//! The conformance vectors on a microcontroller: every `tests/vectors/*.vec` file replayed
//! byte for byte by the core built for a Cortex-M4F (`thumbv7em-none-eabihf`, no `alloc`,
//! tables in arrays on the stack), and every `tests/vectors/gate/*.vec` file through a
//! `FenceGate` over an array of rows, with the seeded random logs of `wasm/tests/vectors`.
//! Each service file is replayed twice: in one service from start to end, then restoring
//! the service from its bytes at each `snapshot` line into a second set of tables and
//! going on there (so restore is checked by everything after it); each gate is restored at
//! the end of its file. QEMU runs it (`scripts/test-bare-metal.sh`); it reports through
//! semihosting and exits with failure at the first byte that differs.
//!
//! The vectors were written by the native core on x86_64; the C, Python and wasm runners
//! replay them too. A pass here is the same replies, events, error codes and snapshot
//! bytes from the code a 32-bit microcontroller runs.
//!
//! It also measures the stack the core uses on the device: the deepest of any input (the
//! sink's encoding of its events included), snapshot and restore, by painting the free
//! stack before each call (`stack`).
//!
//! The grammar is the native runner's (`tests/src/vectors.rs`, `tests/src/gate_vectors.rs`):
//! `config`, `in` (an input frame), `out` (each event, in order), `reply` or `err`
//! (closing the `in`), `snapshot`; for a gate, `config resources=N`, `in` (a resource name
//! and a token), `err CODE [highest=N]`, `highest NAME N`.

#![no_std]
#![no_main]

use core::fmt;

use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};
use fencelock::storage::{
    Bucket, ClaimRow, LabelRow, LockRow, SessionRow, Tables, TaggedBucket, BUCKETS_PER_ROW,
};
use fencelock::{
    Config, Error, FenceGate, GateRow, Label, LabeledSliceStorage, LockService, Mode, Output, Tick,
    Token, Wait, MAX_FRAME_LEN,
};

include!(concat!(env!("OUT_DIR"), "/vectors.rs"));

/// The largest tables a vector file may ask for (its `config` line); a larger one fails
/// the run by name rather than being skipped.
const MAX_SESSIONS: usize = 64;
const MAX_LOCKS: usize = 64;
const MAX_CLAIMS: usize = 128;
const MAX_RESOURCES: usize = 64;
/// The most events one input of a vector file may emit here.
const MAX_EVENTS: usize = 256;
/// Room for a snapshot of the largest tables (a vector's are far smaller).
const SNAPSHOT_BUF: usize = 32 * 1024;

#[entry]
fn main() -> ! {
    // Two of each: a snapshot is restored into the other tables and the replay goes on there.
    let mut rows = [Rows::EMPTY, Rows::EMPTY];
    let mut gate_rows = [
        [GateRow::EMPTY; MAX_RESOURCES],
        [GateRow::EMPTY; MAX_RESOURCES],
    ];
    let mut scratch = Scratch {
        events: [[0; MAX_FRAME_LEN]; MAX_EVENTS],
        event_len: [0; MAX_EVENTS],
        frame: [0; 512],
        snapshot: [0; SNAPSHOT_BUF],
    };

    // The stack gauge itself: a call that writes 1 000 bytes of stack measures at least that.
    let (_, gauge) = stack::measure(|| {
        let frame = [7u8; 1000];
        core::hint::black_box(&frame);
    });
    if !gauge.is_some_and(|d| (1000..stack::DEPTH).contains(&d)) {
        fail(
            "(the stack gauge)",
            0,
            "a 1000-byte frame measured otherwise",
            None,
        );
    }

    // Each file twice: in one service from start to end, as every other runner does, then
    // restoring at each snapshot line and going on in the restored service.
    let mut total = Stats::default();
    let mut seeded = Stats::default();
    for restoring in [false, true] {
        for (file, text) in VECTORS {
            let s = replay(file, text, &mut rows, &mut scratch, restoring);
            // Every vector file has inputs and snapshots (as the native runner requires).
            if s.inputs == 0 || s.snapshots == 0 {
                fail(file, 0, "a vector file without inputs or snapshots", None);
            }
            total.add(&s);
        }
        for (file, text) in SEEDED {
            let s = replay(file, text, &mut rows, &mut scratch, restoring);
            if s.inputs == 0 {
                fail(file, 0, "a seeded log without inputs", None);
            }
            seeded.add(&s);
        }
    }
    let mut gate = GateStats::default();
    for (file, text) in GATE_VECTORS {
        let s = replay_gate(file, text, &mut gate_rows, &mut scratch);
        if s.admits == 0 {
            fail(file, 0, "a gate vector file without admits", None);
        }
        gate.add(&s);
    }
    let stretched = stretched_lengths(&mut rows, &mut gate_rows, &mut scratch);
    // The counts are per pass (both passes count the same), so a script can compare them
    // with the files' own lines.
    hprintln!(
        "thumbv7em vectors: {} files, {} inputs, {} events, {} replies, {} errors, \
         {} snapshots; seeded logs: {} files, {} inputs, {} events, {} revision raises, \
         {} snapshots; gate: {} files, {} admits, {} refusals, {} highest; \
         each file replayed twice, the second time restoring at each snapshot \
         ({} restores) and each gate restored at its end; \
         the core's deepest stack: {} B for an input, {} B for a snapshot, {} B for a restore; \
         {} stretched length prefixes refused as on 64 bits; {} polls",
        VECTORS.len(),
        total.inputs / 2,
        total.events / 2,
        total.replies / 2,
        total.errors / 2,
        total.snapshots / 2,
        SEEDED.len(),
        seeded.inputs / 2,
        seeded.events / 2,
        seeded.raises / 2,
        seeded.snapshots / 2,
        GATE_VECTORS.len(),
        gate.admits,
        gate.refusals,
        gate.highest,
        total.restores + seeded.restores,
        total.stack_input.max(seeded.stack_input),
        total.stack_snapshot.max(seeded.stack_snapshot),
        total.stack_restore.max(seeded.stack_restore),
        stretched,
        (total.polls + seeded.polls) / 2,
    );
    debug::exit(debug::EXIT_SUCCESS);
    #[allow(clippy::empty_loop)]
    loop {}
}

/// A name's or a label's length prefix stretched to 6 bytes, restored: refused as a
/// bad record, as natively (`core/tests/snapshot.rs` and `core/tests/gate.rs` restore
/// the same bytes on x86_64). postcard reads a string's length as a `usize` varint, which
/// stops at 5 bytes here and at 10 on a 64-bit target; the core refuses such a prefix
/// before postcard reads it, so both targets refuse alike. Returns how many were refused.
fn stretched_lengths(
    rows: &mut [Rows; 2],
    gate_rows: &mut [[GateRow; MAX_RESOURCES]; 2],
    scratch: &mut Scratch,
) -> usize {
    const WHERE: &str = "(stretched length prefixes)";
    let mut refused = 0;
    // "FLGT", version 1, one resource: "a" (its length 1 in 6 bytes) with token 5
    let long = b"FLGT\x01\x01\x81\x80\x80\x80\x80\x00a\x05";
    match FenceGate::restore(&mut gate_rows[0][..2], &long[..]) {
        Err((_, Error::CorruptSnapshot("bad resource record"))) => refused += 1,
        _ => fail(WHERE, 0, "a gate's stretched name not a bad record", None),
    }
    // A service with a labelled session ("lbl") holding a lock ("nm").
    let c = VecConfig {
        sessions: 4,
        locks: 4,
        claims: 8,
        lock_delay: 0,
        max_name_len: 64,
        max_watchers: 4,
    };
    let [first, second] = rows;
    let mut none = |_: Output| {};
    let mut svc = LockService::new(first.storage(&c), Config::default())
        .unwrap_or_else(|_| fail(WHERE, 0, "the service refused", None));
    let label = Label::new("lbl").unwrap_or_else(|_| fail(WHERE, 0, "the label", None));
    let a = svc
        .open_labeled(Tick(0), 10, label, &mut none)
        .ok()
        .and_then(|r| r.opened())
        .unwrap_or_else(|| fail(WHERE, 0, "the labelled open refused", None));
    if svc
        .acquire(
            Tick(0),
            a,
            "nm",
            Mode::Exclusive,
            Wait::None,
            None,
            &mut none,
        )
        .is_err()
    {
        fail(WHERE, 0, "the acquire refused", None);
    }
    let n = svc
        .snapshot(&mut scratch.snapshot)
        .unwrap_or_else(|_| fail(WHERE, 0, "snapshot larger than the buffer", None));
    let good = &scratch.snapshot[..n];
    // (the label with no label rows, then each with a label row per session)
    for (text, labels) in [("lbl", 0), ("lbl", c.sessions), ("nm", c.sessions)] {
        let at = good
            .windows(text.len())
            .position(|w| w == text.as_bytes())
            .filter(|&i| i > 0 && good[i - 1] as usize == text.len())
            .unwrap_or_else(|| fail(WHERE, 0, "a text or its length prefix not found", None))
            - 1;
        let long = &mut scratch.frame;
        let m = n + 5;
        if m > long.len() {
            fail(
                WHERE,
                0,
                "the snapshot is larger than the frame buffer",
                None,
            );
        }
        long[..at].copy_from_slice(&good[..at]);
        long[at..at + 6].copy_from_slice(&[0x80 | text.len() as u8, 0x80, 0x80, 0x80, 0x80, 0]);
        long[at + 6..m].copy_from_slice(&good[at + 1..]);
        let LabeledSliceStorage {
            tables,
            labels: all,
        } = second.storage(&c);
        let storage = LabeledSliceStorage {
            tables,
            labels: &mut all[..labels],
        };
        match LockService::restore(storage, &long[..m]) {
            Err((_, Error::CorruptSnapshot("bad record"))) => refused += 1,
            _ => fail(WHERE, 0, "a stretched name or label not a bad record", None),
        }
    }
    refused
}

/// Reports where a file first differs (for bytes, the expected hex as the file has it
/// and what this build produced) and ends the run with failure.
fn fail(file: &str, line: usize, what: &str, bytes: Option<(&str, &[u8])>) -> ! {
    hprintln!("FAIL {} line {}: {}", file, line, what);
    if let Some((want, got)) = bytes {
        hprintln!("  expected {}", want);
        hprintln!("  got      {}", Hex(got));
    }
    debug::exit(debug::EXIT_FAILURE);
    #[allow(clippy::empty_loop)]
    loop {}
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("PANIC {}", info);
    debug::exit(debug::EXIT_FAILURE);
    #[allow(clippy::empty_loop)]
    loop {}
}

/// Every table of the largest service a vector may ask for; each file uses the first rows
/// of each (a service clears the rows it is given, a restore overwrites them).
struct Rows {
    sessions: [SessionRow; MAX_SESSIONS],
    session_index: [Bucket; BUCKETS_PER_ROW * MAX_SESSIONS],
    locks: [LockRow; MAX_LOCKS],
    lock_index: [TaggedBucket; BUCKETS_PER_ROW * MAX_LOCKS],
    claims: [ClaimRow; MAX_CLAIMS],
    claim_index: [Bucket; BUCKETS_PER_ROW * MAX_CLAIMS],
    labels: [LabelRow; MAX_SESSIONS],
}

impl Rows {
    const EMPTY: Rows = Rows {
        sessions: [SessionRow::EMPTY; MAX_SESSIONS],
        session_index: [Bucket::EMPTY; BUCKETS_PER_ROW * MAX_SESSIONS],
        locks: [LockRow::EMPTY; MAX_LOCKS],
        lock_index: [TaggedBucket::EMPTY; BUCKETS_PER_ROW * MAX_LOCKS],
        claims: [ClaimRow::EMPTY; MAX_CLAIMS],
        claim_index: [Bucket::EMPTY; BUCKETS_PER_ROW * MAX_CLAIMS],
        labels: [LabelRow::EMPTY; MAX_SESSIONS],
    };

    /// The first rows of each table, as many as `c` asks for: the tables a
    /// `VecStorage::new(sessions, locks, claims)` has (a label row per session).
    fn storage(&mut self, c: &VecConfig) -> LabeledSliceStorage<'_> {
        LabeledSliceStorage {
            tables: Tables {
                sessions: &mut self.sessions[..c.sessions],
                session_index: &mut self.session_index[..BUCKETS_PER_ROW * c.sessions],
                locks: &mut self.locks[..c.locks],
                lock_index: &mut self.lock_index[..BUCKETS_PER_ROW * c.locks],
                claims: &mut self.claims[..c.claims],
                claim_index: &mut self.claim_index[..BUCKETS_PER_ROW * c.claims],
            },
            labels: &mut self.labels[..c.sessions],
        }
    }
}

/// The encoded events of the latest input, a decoded frame and a snapshot.
struct Scratch {
    events: [[u8; MAX_FRAME_LEN]; MAX_EVENTS],
    event_len: [usize; MAX_EVENTS],
    frame: [u8; 512],
    snapshot: [u8; SNAPSHOT_BUF],
}

/// What the latest `in` or `raise` returned, until a line closes it.
enum Open {
    /// The reply frame's length (in the caller's buffer), or the error's code.
    Input(Result<usize, u32>),
    /// The revision `raise_revision` returned, or the error's code.
    Raise(Result<u64, u32>),
}

#[derive(Default)]
struct Stats {
    /// The deepest stack the core used for one input (with the sink's encoding of its
    /// events), one snapshot and one restore, in bytes.
    stack_input: usize,
    stack_snapshot: usize,
    stack_restore: usize,
    restores: usize,
    raises: usize,
    polls: usize,
    inputs: usize,
    events: usize,
    replies: usize,
    errors: usize,
    snapshots: usize,
}

impl Stats {
    fn add(&mut self, s: &Stats) {
        self.inputs += s.inputs;
        self.raises += s.raises;
        self.polls += s.polls;
        self.restores += s.restores;
        self.events += s.events;
        self.replies += s.replies;
        self.errors += s.errors;
        self.snapshots += s.snapshots;
        self.stack_input = self.stack_input.max(s.stack_input);
        self.stack_snapshot = self.stack_snapshot.max(s.stack_snapshot);
        self.stack_restore = self.stack_restore.max(s.stack_restore);
    }
}

#[derive(Default)]
struct GateStats {
    admits: usize,
    refusals: usize,
    highest: usize,
}

impl GateStats {
    fn add(&mut self, s: &GateStats) {
        self.admits += s.admits;
        self.refusals += s.refusals;
        self.highest += s.highest;
    }
}

/// The lines of a vector file that say something: (line number, directive, the rest).
fn directives(text: &str) -> impl Iterator<Item = (usize, &str, &str)> {
    text.lines().enumerate().filter_map(|(n, line)| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        Some((n + 1, word, rest))
    })
}

/// Replays one service vector file; ends the run at the first line that differs. With
/// `restoring`, each `snapshot` line also restores the service from those bytes into the
/// other tables, checks the restored service's snapshot, and the file goes on there.
fn replay(
    file: &str,
    text: &str,
    rows: &mut [Rows; 2],
    scratch: &mut Scratch,
    restoring: bool,
) -> Stats {
    let mut lines = directives(text);
    let (cl, c) = match lines.next() {
        Some((ln, "config", rest)) => (
            ln,
            parse_config(rest).unwrap_or_else(|| fail(file, ln, "bad config line", None)),
        ),
        Some((ln, ..)) => fail(file, ln, "the first line is not a config line", None),
        None => fail(file, 0, "no config line", None),
    };
    if c.sessions > MAX_SESSIONS || c.locks > MAX_LOCKS || c.claims > MAX_CLAIMS {
        fail(file, cl, "tables larger than this runner's arrays", None);
    }
    let [first, second] = rows;
    // The tables the next snapshot is restored into.
    let mut spare = second.storage(&c);
    let config = Config {
        lock_delay: c.lock_delay,
        max_name_len: c.max_name_len,
        max_watchers: c.max_watchers,
    };
    let mut svc = LockService::new(first.storage(&c), config)
        .unwrap_or_else(|_| fail(file, cl, "the config line's service refused", None));

    let mut stats = Stats::default();
    // The latest `in`'s reply frame (its length) or error code, until a `reply` or `err`
    // line closes it; or the latest `raise`'s revision or error code, until `revision` or
    // `err` does.
    let mut open: Option<Open> = None;
    let mut reply = [0u8; MAX_FRAME_LEN];
    // Its events not yet matched by an `out` line: `next..count` of `scratch.events`.
    let (mut next, mut count) = (0usize, 0usize);
    for (ln, word, rest) in lines {
        match word {
            "in" => {
                if open.is_some() {
                    fail(file, ln, "the previous `in` was not closed", None);
                }
                let len = decode(rest, &mut scratch.frame)
                    .unwrap_or_else(|| fail(file, ln, "bad hex, or longer than the buffer", None));
                let (events, event_len) = (&mut scratch.events, &mut scratch.event_len);
                let mut emitted = 0usize;
                let mut overflow = false;
                let (r, depth) = stack::measure(|| {
                    svc.handle_frame(&scratch.frame[..len], &mut |o: Output| {
                        let Some(slot) = events.get_mut(emitted) else {
                            overflow = true;
                            return;
                        };
                        match o.to_frame(slot) {
                            Ok(n) => {
                                event_len[emitted] = n;
                                emitted += 1;
                            }
                            Err(_) => overflow = true,
                        }
                    })
                });
                let depth = depth.unwrap_or_else(|| {
                    fail(file, ln, "the input's stack went past the paint", None)
                });
                stats.stack_input = stats.stack_input.max(depth);
                if overflow {
                    fail(
                        file,
                        ln,
                        "more events than this runner keeps, or one not encodable",
                        None,
                    );
                }
                open = Some(Open::Input(match r {
                    Ok(rep) => Ok(rep
                        .to_frame(&mut reply)
                        .unwrap_or_else(|_| fail(file, ln, "reply not encodable", None))),
                    Err(e) => Err(e.code()),
                }));
                (next, count) = (0, emitted);
                stats.inputs += 1;
            }
            // `raise_revision(floor)` between inputs (no frame carries it), closed by
            // `revision N` (what it returned) or `err CODE`.
            "raise" => {
                if open.is_some() {
                    fail(file, ln, "the previous `in` was not closed", None);
                }
                let floor: u64 = rest
                    .parse()
                    .unwrap_or_else(|_| fail(file, ln, "raise needs a decimal floor", None));
                open = Some(Open::Raise(svc.raise_revision(floor).map_err(|e| e.code())));
            }
            // `poll N` (or `poll none`): what poll_timeout gives here (deadlines are u64
            // ticks in a heap: a 32-bit build must find the same next one).
            "poll" => {
                if open.is_some() {
                    fail(file, ln, "the previous `in` was not closed", None);
                }
                let want = match rest {
                    "none" => None,
                    n => Some(n.parse::<u64>().unwrap_or_else(|_| {
                        fail(file, ln, "poll needs a decimal tick or none", None)
                    })),
                };
                if svc.poll_timeout().map(|t| t.0) != want {
                    fail(file, ln, "poll_timeout differs", None);
                }
                stats.polls += 1;
            }
            "revision" => match open.take() {
                Some(Open::Raise(Ok(r))) if rest.parse() == Ok(r) => stats.raises += 1,
                Some(Open::Raise(_)) => fail(file, ln, "another revision, or an error", None),
                _ => fail(file, ln, "revision without a `raise`", None),
            },
            "out" => {
                if !matches!(open, Some(Open::Input(_))) {
                    fail(file, ln, "out line after the reply or err", None);
                }
                if next == count {
                    fail(file, ln, "an event expected, none emitted", None);
                }
                let got = &scratch.events[next][..scratch.event_len[next]];
                next += 1;
                if !same(rest, got) {
                    fail(file, ln, "event differs", Some((rest, got)));
                }
                stats.events += 1;
            }
            "reply" | "err" => {
                let got = open
                    .take()
                    .unwrap_or_else(|| fail(file, ln, "reply or err without an `in`", None));
                if next != count {
                    let extra = &scratch.events[next][..scratch.event_len[next]];
                    fail(
                        file,
                        ln,
                        "an event emitted, not listed",
                        Some(("(none)", extra)),
                    );
                }
                let got = match got {
                    Open::Input(got) => got,
                    Open::Raise(Err(code)) if word == "err" && rest.parse() == Ok(code) => {
                        stats.raises += 1;
                        continue;
                    }
                    Open::Raise(_) => fail(file, ln, "another outcome of the raise", None),
                };
                match (word, got) {
                    ("reply", Ok(n)) if same(rest, &reply[..n]) => stats.replies += 1,
                    ("reply", Ok(n)) => fail(file, ln, "reply differs", Some((rest, &reply[..n]))),
                    ("reply", Err(_)) => fail(file, ln, "a reply expected, got an error", None),
                    (_, Err(code)) if rest.parse() == Ok(code) => stats.errors += 1,
                    (_, Err(_)) => fail(file, ln, "another error code", None),
                    (_, Ok(_)) => fail(file, ln, "an error expected, got a reply", None),
                }
            }
            "snapshot" => {
                if open.is_some() {
                    fail(file, ln, "the previous `in` was not closed", None);
                }
                let (n, depth) = stack::measure(|| svc.snapshot(&mut scratch.snapshot));
                let depth = depth.unwrap_or_else(|| {
                    fail(file, ln, "the snapshot's stack went past the paint", None)
                });
                stats.stack_snapshot = stats.stack_snapshot.max(depth);
                let n =
                    n.unwrap_or_else(|_| fail(file, ln, "snapshot larger than the buffer", None));
                if !same(rest, &scratch.snapshot[..n]) {
                    fail(
                        file,
                        ln,
                        "snapshot differs",
                        Some((rest, &scratch.snapshot[..n])),
                    );
                }
                stats.snapshots += 1;
                if !restoring {
                    continue;
                }
                // The rest of the file runs in a service restored from these bytes, whose
                // own snapshot must be the same bytes; the old tables become the spare.
                let (restored, depth) =
                    stack::measure(|| LockService::restore(spare, &scratch.snapshot[..n]));
                let depth = depth.unwrap_or_else(|| {
                    fail(file, ln, "the restore's stack went past the paint", None)
                });
                stats.stack_restore = stats.stack_restore.max(depth);
                let restored = restored
                    .unwrap_or_else(|_| fail(file, ln, "its snapshot refused by restore", None));
                spare = core::mem::replace(&mut svc, restored).into_storage();
                let n = svc
                    .snapshot(&mut scratch.snapshot)
                    .unwrap_or_else(|_| fail(file, ln, "snapshot larger than the buffer", None));
                if !same(rest, &scratch.snapshot[..n]) {
                    fail(
                        file,
                        ln,
                        "the restored service's snapshot differs",
                        Some((rest, &scratch.snapshot[..n])),
                    );
                }
                stats.restores += 1;
            }
            // One service per file: a second would need the rows this one holds.
            "config" => fail(file, ln, "a second config line in one file", None),
            _ => fail(file, ln, "unknown directive", None),
        }
    }
    if open.is_some() {
        fail(
            file,
            text.lines().count(),
            "the last `in` was not closed",
            None,
        );
    }
    stats
}

/// Replays one gate vector file; ends the run at the first line that differs.
fn replay_gate(
    file: &str,
    text: &str,
    rows: &mut [[GateRow; MAX_RESOURCES]; 2],
    scratch: &mut Scratch,
) -> GateStats {
    let [first, second] = rows;
    let frame = &mut scratch.frame;
    let mut lines = directives(text);
    let (cl, resources) = match lines.next() {
        Some((ln, "config", rest)) => (
            ln,
            rest.strip_prefix("resources=")
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|&r| (1..=MAX_RESOURCES).contains(&r))
                .unwrap_or_else(|| {
                    fail(file, ln, "expected `config resources=N`, N fitting", None)
                }),
        ),
        Some((ln, ..)) => fail(file, ln, "the first line is not a config line", None),
        None => fail(file, 0, "no config line", None),
    };
    let mut gate = FenceGate::new(&mut first[..resources])
        .unwrap_or_else(|_| fail(file, cl, "the config line's gate refused", None));

    let mut stats = GateStats::default();
    // The refusal of the latest `in`, not yet matched by an `err` line.
    let mut pending: Option<Error> = None;
    for (ln, word, rest) in lines {
        if word != "err" && pending.is_some() {
            fail(file, ln, "an admit was refused, no err line lists it", None);
        }
        match word {
            "in" => {
                let len = decode(rest, frame)
                    .unwrap_or_else(|| fail(file, ln, "bad hex, or longer than the buffer", None));
                let (name, token) = parse_admit(&frame[..len])
                    .unwrap_or_else(|| fail(file, ln, "not an admit frame", None));
                pending = gate.admit(name, Token(token)).err();
                stats.admits += 1;
            }
            "err" => {
                let mut parts = rest.split_whitespace();
                let code: Option<u32> = parts.next().and_then(|c| c.parse().ok());
                let want_highest = parts.next().map(|h| {
                    h.strip_prefix("highest=")
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or_else(|| fail(file, ln, "expected highest=N", None))
                });
                let got = pending
                    .take()
                    .unwrap_or_else(|| fail(file, ln, "an err expected, the admit passed", None));
                let got_highest = match got {
                    Error::Stale { highest, .. } => Some(highest.0),
                    _ => None,
                };
                if code != Some(got.code()) || got_highest != want_highest {
                    fail(file, ln, "another refusal", None);
                }
                stats.refusals += 1;
            }
            "highest" => {
                let (name, want) = rest
                    .rsplit_once(' ')
                    .unwrap_or_else(|| fail(file, ln, "expected `highest HEX N`", None));
                let len = decode(name, frame)
                    .unwrap_or_else(|| fail(file, ln, "bad hex, or longer than the buffer", None));
                let name = core::str::from_utf8(&frame[..len])
                    .unwrap_or_else(|_| fail(file, ln, "name not UTF-8", None));
                let want: Option<u64> = want.parse().ok();
                if Some(gate.highest(name).map_or(0, |t| t.0)) != want {
                    fail(file, ln, "another highest token", None);
                }
                stats.highest += 1;
            }
            "config" => fail(file, ln, "a second config line in one file", None),
            _ => fail(file, ln, "unknown directive", None),
        }
    }
    // Its snapshot, restored into the other rows, must give the same bytes again.
    let end = text.lines().count();
    let n = gate
        .snapshot(&mut scratch.snapshot)
        .unwrap_or_else(|_| fail(file, end, "gate snapshot larger than the buffer", None));
    let restored = FenceGate::restore(&mut second[..resources], &scratch.snapshot[..n])
        .unwrap_or_else(|_| fail(file, end, "the gate's snapshot refused by restore", None));
    let mut again = [0u8; 4096];
    let m = restored
        .snapshot(&mut again)
        .unwrap_or_else(|_| fail(file, end, "gate snapshot larger than the buffer", None));
    if again[..m] != scratch.snapshot[..n] {
        fail(
            file,
            end,
            "the restored gate's snapshot differs",
            Some(("(the gate's own)", &again[..m])),
        );
    }
    // And it answers every query as the gate did.
    if restored.len() != gate.len()
        || gate
            .iter()
            .any(|(name, token)| restored.highest(name) != Some(token))
    {
        fail(file, end, "the restored gate answers otherwise", None);
    }
    if pending.is_some() {
        fail(
            file,
            text.lines().count(),
            "an admit was refused, no err line lists it",
            None,
        );
    }
    stats
}

/// A vector file's `config` line.
struct VecConfig {
    sessions: usize,
    locks: usize,
    claims: usize,
    lock_delay: u64,
    max_name_len: u32,
    max_watchers: u32,
}

/// `sessions=8 locks=8 claims=16 lock_delay=0 max_name_len=64`, every key once, in any
/// order, and optionally `max_watchers=N` (else the core's default). `None` for anything
/// else.
fn parse_config(rest: &str) -> Option<VecConfig> {
    let (mut s, mut l, mut c, mut d, mut m, mut w) = (None, None, None, None, None, None);
    for kv in rest.split_whitespace() {
        let (k, v) = kv.split_once('=')?;
        let slot = match k {
            "sessions" => &mut s,
            "locks" => &mut l,
            "claims" => &mut c,
            "lock_delay" => &mut d,
            "max_name_len" => &mut m,
            "max_watchers" => &mut w,
            _ => return None,
        };
        if slot.replace(v.parse::<u64>().ok()?).is_some() {
            return None;
        }
    }
    Some(VecConfig {
        sessions: usize::try_from(s?).ok()?,
        locks: usize::try_from(l?).ok()?,
        claims: usize::try_from(c?).ok()?,
        lock_delay: d?,
        max_name_len: u32::try_from(m?).ok()?,
        max_watchers: match w {
            Some(w) => u32::try_from(w).ok()?,
            None => Config::default().max_watchers,
        },
    })
}

/// An admit frame: a varint length, the resource name's UTF-8 bytes, a varint token,
/// nothing after. `None` otherwise.
fn parse_admit(frame: &[u8]) -> Option<(&str, u64)> {
    let mut at = 0usize;
    let len = usize::try_from(varint(frame, &mut at)?).ok()?;
    let end = at.checked_add(len).filter(|&e| e <= frame.len())?;
    let name = core::str::from_utf8(&frame[at..end]).ok()?;
    at = end;
    let token = varint(frame, &mut at)?;
    (at == frame.len()).then_some((name, token))
}

fn varint(frame: &[u8], at: &mut usize) -> Option<u64> {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *frame.get(*at)?;
        *at += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        x |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(x);
        }
    }
    None
}

/// Decodes `hex` into the front of `out`; its length, or `None` for an odd length, a
/// character that is not a hex digit or too many bytes.
fn decode(hex: &str, out: &mut [u8]) -> Option<usize> {
    let hex = hex.as_bytes();
    if !hex.len().is_multiple_of(2) || hex.len() / 2 > out.len() {
        return None;
    }
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(hex.len() / 2)
}

fn nibble(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Whether the hex text `hex` (either case) is exactly `bytes`.
fn same(hex: &str, bytes: &[u8]) -> bool {
    let hex = hex.as_bytes();
    hex.len() == 2 * bytes.len()
        && hex.chunks_exact(2).zip(bytes).all(
            |(p, &b)| matches!((nibble(p[0]), nibble(p[1])), (Some(h), Some(l)) if h << 4 | l == b),
        )
}

/// Bytes as lowercase hex, for a failure's report.
struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// The stack the core uses for one call, measured by painting: the free stack below the
/// caller is filled with a pattern before the call, and the lowest word the call changed
/// is its depth. A frame the call reserved but never wrote is not seen (none of the
/// core's is known to be), and interrupts are off, so nothing else writes there.
mod stack {
    use core::arch::asm;

    /// How far below the caller the pattern reaches: a call that goes deeper fails the run.
    pub const DEPTH: usize = 32 * 1024;
    /// The words just below the caller are left alone (the painting loop's own room).
    const MARGIN: usize = 64;
    const PAINT: u32 = 0x5A5A_A5A5;
    /// A static in RAM (.bss), to tell where the statics end.
    static GUARD: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

    /// The caller's stack pointer (inlined: the caller's own).
    #[inline(always)]
    fn sp() -> usize {
        let sp: usize;
        // SAFETY: only reads the stack pointer register.
        unsafe { asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
        sp
    }

    /// Runs `f`, returning its result and the stack it used below the caller (`None`: it
    /// reached the bottom of the paint, so its depth is unknown). `f` runs in a function
    /// that is never inlined, so none of its work can hide in the caller's frame.
    #[inline(always)]
    pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Option<usize>) {
        let top = paint();
        let r = below(f);
        (r, used(top))
    }

    #[inline(never)]
    fn below<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Paints the free stack below the caller; returns the caller's stack pointer.
    #[inline(always)]
    fn paint() -> usize {
        let top = sp();
        // The window must lie above the statics (.data and .bss sit at the start of RAM):
        // `GUARD` is one of them.
        let statics = core::ptr::addr_of!(GUARD) as usize;
        assert!(
            top - DEPTH > statics + 4096,
            "the stack paint would reach the statics"
        );
        let mut a = top - DEPTH;
        while a < top - MARGIN {
            // SAFETY: [top - DEPTH, top - MARGIN) is free stack: below every live frame
            // (the caller's is above `top`, this loop keeps its state in registers), within
            // the 4 MiB RAM of memory.x, word-aligned, and no interrupt is enabled.
            unsafe { core::ptr::write_volatile(a as *mut u32, PAINT) };
            a += 4;
        }
        top
    }

    /// The bytes below `top` that the calls since [`paint`] wrote; `None` if they reached
    /// the bottom of the painted stack (the depth is then unknown).
    #[inline(always)]
    fn used(top: usize) -> Option<usize> {
        let bottom = top - DEPTH;
        let mut a = bottom;
        // SAFETY: reads the words `paint` wrote (see there).
        while a < top - MARGIN && unsafe { core::ptr::read_volatile(a as *const u32) } == PAINT {
            a += 4;
        }
        (a > bottom).then_some(top - a)
    }
}
