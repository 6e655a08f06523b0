//! Gate conformance vectors: what every fence (the in-process [`FenceGate`], a database
//! table, an object store) must answer for a sequence of admits.
//!
//! The files live in `tests/vectors/gate/` (not `tests/vectors/`, whose `*.vec` files the
//! service runners replay) and use the same line grammar as the service vectors:
//!
//! ```text
//! # comment
//! config resources=16                    a gate with room for 16 resources
//! in <hex>                               admit: postcard frame of (resource: &str, token: u64)
//! err <code> [highest=<n>]               the admit was refused with Error::code(); a Stale
//!                                        refusal names the highest token seen
//! highest <hex of the name> <n>          the highest token admitted for that resource (0: none)
//! ```
//!
//! An `in` followed by no `err` line was admitted. The scenarios are Rust
//! ([`gate_scenarios`]); [`render_gate`] runs one through the native [`FenceGate`] and
//! checks the answers the scenario states; `cargo run -p fencelock-tests --bin gen-vectors`
//! rewrites the files and the test `gate_vectors_are_fresh` fails when they differ.
//! [`replay_gate`] replays a file against any implementation of [`GateUnderTest`].
//!
//! The scenarios stay inside what every fence can store: tokens up to `i64::MAX` (an SQL
//! `BIGINT`), no full table (a database table has no fixed capacity).

use std::fmt::Write as _;

use fencelock::{Error, FenceGate, GateRow, Token};

use crate::hex;

/// A fence under test, as a gate vector drives it.
pub trait GateUnderTest {
    /// Admits a write to `resource` with `token` (nothing else is written).
    ///
    /// Errors: the refusal, as [`FenceGate::admit`] would give it.
    fn admit(&mut self, resource: &str, token: Token) -> Result<(), Error>;
    /// The highest token admitted for `resource`, if any.
    fn highest(&mut self, resource: &str) -> Option<Token>;
}

impl<R: AsRef<[GateRow]> + AsMut<[GateRow]>> GateUnderTest for FenceGate<R> {
    fn admit(&mut self, resource: &str, token: Token) -> Result<(), Error> {
        FenceGate::admit(self, resource, token)
    }
    fn highest(&mut self, resource: &str) -> Option<Token> {
        FenceGate::highest(self, resource)
    }
}

/// One step of a gate scenario.
#[derive(Clone, Debug)]
pub enum GateStep {
    /// A comment line.
    Comment(&'static str),
    /// Admit `token` for the resource; the expected answer.
    Admit(String, u64, Result<(), Error>),
    /// The highest token the gate must report for the resource (`None`: never admitted).
    Highest(String, Option<u64>),
}

/// A named gate scenario.
#[derive(Clone, Debug)]
pub struct GateScenario {
    /// File stem (`NN_name`).
    pub name: &'static str,
    /// One-line description.
    pub about: &'static str,
    /// Gate capacity.
    pub resources: usize,
    /// The steps.
    pub steps: Vec<GateStep>,
}

fn admit(r: &str, t: u64, want: Result<(), Error>) -> GateStep {
    GateStep::Admit(r.to_string(), t, want)
}

fn stale(t: u64, h: u64) -> Result<(), Error> {
    Err(Error::Stale {
        token: Token(t),
        highest: Token(h),
    })
}

fn highest(r: &str, t: Option<u64>) -> GateStep {
    GateStep::Highest(r.to_string(), t)
}

/// Every gate scenario.
pub fn gate_scenarios() -> Vec<GateScenario> {
    use GateStep::Comment as C;
    let long = "n".repeat(fencelock::MAX_NAME_LEN);
    let too_long = "n".repeat(fencelock::MAX_NAME_LEN + 1);
    vec![
        GateScenario {
            name: "01_gate_rules",
            about: "equal admitted, lower refused with the highest seen, zero refused",
            resources: 16,
            steps: vec![
                C("the GC-pause story: B (35) writes, A (34) comes back from its pause"),
                highest("ledger", None),
                admit("ledger", 35, Ok(())),
                admit("ledger", 34, stale(34, 35)),
                highest("ledger", Some(35)),
                C("the same holder writes again; a newer holder moves the fence up"),
                admit("ledger", 35, Ok(())),
                admit("ledger", 36, Ok(())),
                admit("ledger", 35, stale(35, 36)),
                admit("ledger", 1, stale(1, 36)),
                highest("ledger", Some(36)),
                C("a jump is fine: tokens need only rise"),
                admit("ledger", 1000, Ok(())),
                admit("ledger", 999, stale(999, 1000)),
                C("token 0 is never granted, so never admitted: known or new resource"),
                admit("ledger", 0, Err(Error::ZeroToken)),
                admit("fresh", 0, Err(Error::ZeroToken)),
                highest("fresh", None),
                C("a first write with any token is admitted, token 1 too"),
                admit("fresh", 1, Ok(())),
                highest("fresh", Some(1)),
                highest("ledger", Some(1000)),
            ],
        },
        GateScenario {
            name: "02_gate_resources",
            about: "resources are independent; names are compared byte for byte",
            resources: 16,
            steps: vec![
                C("the report story: 42 paused, 43 wrote"),
                admit("report.xml", 43, Ok(())),
                admit("ledger", 7, Ok(())),
                admit("report.xml", 42, stale(42, 43)),
                admit("ledger", 8, Ok(())),
                highest("report.xml", Some(43)),
                highest("ledger", Some(8)),
                C("case, trailing space, Unicode normalisation and NUL make other names"),
                admit("Ledger", 3, Ok(())),
                admit("ledger ", 2, Ok(())),
                admit("caf\u{e9}", 9, Ok(())),
                admit("cafe\u{301}", 4, Ok(())),
                admit("a\0b", 5, Ok(())),
                admit("a", 1, Ok(())),
                highest("Ledger", Some(3)),
                highest("ledger ", Some(2)),
                highest("caf\u{e9}", Some(9)),
                highest("cafe\u{301}", Some(4)),
                highest("a\0b", Some(5)),
                highest("a", Some(1)),
                highest("ledger", Some(8)),
                admit("cafe\u{301}", 3, stale(3, 4)),
            ],
        },
        GateScenario {
            name: "03_gate_bad_input",
            about: "bad names and tokens are refused with typed errors and change nothing",
            resources: 16,
            steps: vec![
                admit("jobs/reindex", 10, Ok(())),
                admit("", 5, Err(Error::EmptyName)),
                admit(&too_long, 5, Err(Error::NameTooLong { len: 65, max: 64 })),
                C("the longest name is fine"),
                admit(&long, 5, Ok(())),
                highest(&long, Some(5)),
                C("token 0 is refused before the name is looked at"),
                admit("", 0, Err(Error::ZeroToken)),
                admit(&too_long, 0, Err(Error::ZeroToken)),
                C("the largest token an SQL BIGINT holds, and past it nothing lower"),
                admit("big", i64::MAX as u64, Ok(())),
                admit(
                    "big",
                    i64::MAX as u64 - 1,
                    stale(i64::MAX as u64 - 1, i64::MAX as u64),
                ),
                admit("big", i64::MAX as u64, Ok(())),
                highest("big", Some(i64::MAX as u64)),
                highest("jobs/reindex", Some(10)),
                highest("", None),
            ],
        },
    ]
}

/// The postcard frame of `(resource, token)`: varint length, the bytes, varint token.
pub fn admit_frame(resource: &str, token: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(resource.len() + 12);
    varint(&mut v, resource.len() as u64);
    v.extend_from_slice(resource.as_bytes());
    varint(&mut v, token);
    v
}

fn varint(v: &mut Vec<u8>, mut x: u64) {
    loop {
        let b = (x & 0x7f) as u8;
        x >>= 7;
        if x == 0 {
            v.push(b);
            return;
        }
        v.push(b | 0x80);
    }
}

/// Decodes an [`admit_frame`].
///
/// Errors: a message for a truncated, over-long or non-UTF-8 frame, or trailing bytes.
pub fn parse_admit_frame(frame: &[u8]) -> Result<(String, u64), String> {
    let mut at = 0usize;
    let len = read_varint(frame, &mut at)?;
    let end = usize::try_from(len)
        .ok()
        .and_then(|l| at.checked_add(l))
        .filter(|&e| e <= frame.len())
        .ok_or("resource name runs past the frame")?;
    let name = std::str::from_utf8(&frame[at..end]).map_err(|_| "resource name is not UTF-8")?;
    at = end;
    let token = read_varint(frame, &mut at)?;
    if at != frame.len() {
        return Err("trailing bytes after the token".into());
    }
    Ok((name.to_string(), token))
}

fn read_varint(frame: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *frame.get(*at).ok_or("truncated varint")?;
        *at += 1;
        if shift == 63 && b > 1 {
            return Err("varint overflows u64".into());
        }
        x |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(x);
        }
    }
    Err("varint longer than 10 bytes".into())
}

fn err_line(e: &Error) -> String {
    match e {
        Error::Stale { highest, .. } => format!("err {} highest={}", e.code(), highest.0),
        _ => format!("err {}", e.code()),
    }
}

/// Runs `sc` through a native [`FenceGate`] and renders its vector file, checking every
/// answer the scenario states.
///
/// Errors: a message naming the step whose answer differed.
pub fn render_gate(sc: &GateScenario) -> Result<String, String> {
    let mut text = String::new();
    let _ = writeln!(text, "# {}: {}", sc.name, sc.about);
    let _ = writeln!(
        text,
        "# generated by `cargo run -p fencelock-tests --bin gen-vectors`; do not edit"
    );
    let _ = writeln!(text, "config resources={}", sc.resources);
    let mut gate = FenceGate::new(vec![GateRow::EMPTY; sc.resources])
        .map_err(|e| format!("{}: {e}", sc.name))?;
    for (i, step) in sc.steps.iter().enumerate() {
        match step {
            GateStep::Comment(c) => {
                let _ = writeln!(text, "# {c}");
            }
            GateStep::Admit(r, t, want) => {
                let got = gate.admit(r, Token(*t));
                if &got != want {
                    return Err(format!(
                        "{}: step {i}: admit({r:?}, {t}) = {got:?}, expected {want:?}",
                        sc.name
                    ));
                }
                let _ = writeln!(text, "in {}", hex::encode(&admit_frame(r, *t)));
                if let Err(e) = &got {
                    let _ = writeln!(text, "{}", err_line(e));
                }
            }
            GateStep::Highest(r, want) => {
                let got = gate.highest(r).map(|t| t.0);
                if &got != want {
                    return Err(format!(
                        "{}: step {i}: highest({r:?}) = {got:?}, expected {want:?}",
                        sc.name
                    ));
                }
                let _ = writeln!(
                    text,
                    "highest {} {}",
                    hex::encode(r.as_bytes()),
                    got.unwrap_or(0)
                );
            }
        }
    }
    Ok(text)
}

/// The largest gate a `config` line may ask for (a replay allocates it).
pub const MAX_GATE_RESOURCES: usize = 1 << 16;

/// A gate vector file's `config` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateConfig {
    /// How many resources the gate must hold.
    pub resources: usize,
}

/// What a gate replay checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateReplayStats {
    /// Admits made.
    pub admits: usize,
    /// Refusals compared (code, and the highest token for a stale one).
    pub refusals: usize,
    /// `highest` lines compared.
    pub highest: usize,
}

/// The refusal an `err CODE [highest=N]` line stands for, given the admit it answers
/// (`resource`, `token`): `Stale` carries that token and the line's highest,
/// `NameTooLong` that name's length and [`MAX_NAME_LEN`](fencelock::MAX_NAME_LEN), a full
/// table is the gate's resources. `None` for a line no admit can be answered with.
fn gate_error(code: u32, highest: Option<u64>, resource: &str, token: u64) -> Option<Error> {
    let len = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let e = match (code, highest) {
        (401, Some(h)) => Error::Stale {
            token: Token(token),
            highest: Token(h),
        },
        (_, Some(_)) => return None,
        (201, None) => Error::EmptyName,
        (202, None) => Error::NameTooLong {
            len: len(resource.len()),
            max: len(fencelock::MAX_NAME_LEN),
        },
        (301, None) => Error::CapacityExceeded(fencelock::Table::Resources),
        (402, None) => Error::ZeroToken,
        _ => return None,
    };
    (e.code() == code).then_some(e)
}

/// Replays a gate vector file's text: `make` builds the fence under test from the `config`
/// line, then every admit's answer and every `highest` line are compared.
///
/// Errors: a message with the line number of the first mismatch or malformed line.
pub fn replay_gate<G: GateUnderTest>(
    text: &str,
    mut make: impl FnMut(GateConfig) -> G,
) -> Result<GateReplayStats, String> {
    let mut stats = GateReplayStats::default();
    let mut gate: Option<G> = None;
    // The refusal of the latest `in` (with that admit's resource and token), not yet
    // matched by an `err` line.
    let mut pending: Option<(Error, String, u64)> = None;
    for (n, line) in text.lines().enumerate() {
        let ln = n + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        if word != "err" {
            if let Some((e, ..)) = pending.take() {
                return Err(format!("line {ln}: admit refused with {e:?}, no err line"));
            }
        }
        match word {
            "config" => {
                let resources = rest
                    .strip_prefix("resources=")
                    .and_then(|v| v.parse().ok())
                    .filter(|n| (1..=MAX_GATE_RESOURCES).contains(n))
                    .ok_or(format!(
                        "line {ln}: expected `config resources=N`, N in 1..={MAX_GATE_RESOURCES}"
                    ))?;
                gate = Some(make(GateConfig { resources }));
            }
            "in" => {
                let g = gate
                    .as_mut()
                    .ok_or(format!("line {ln}: in before config"))?;
                let frame = hex::decode(rest).map_err(|e| format!("line {ln}: {e}"))?;
                let (r, t) = parse_admit_frame(&frame).map_err(|e| format!("line {ln}: {e}"))?;
                pending = g.admit(&r, Token(t)).err().map(|e| (e, r, t));
                stats.admits += 1;
            }
            "err" => {
                let mut parts = rest.split_whitespace();
                let code: u32 = parts
                    .next()
                    .and_then(|c| c.parse().ok())
                    .ok_or(format!("line {ln}: bad code"))?;
                let want_highest = match parts.next() {
                    Some(h) => Some(
                        h.strip_prefix("highest=")
                            .and_then(|v| v.parse::<u64>().ok())
                            .ok_or(format!("line {ln}: expected highest=N"))?,
                    ),
                    None => None,
                };
                let (got, resource, token) = pending.take().ok_or(format!(
                    "line {ln}: expected err {code}, the admit succeeded"
                ))?;
                // The whole error, not its code alone: what the line names, with what
                // the admit itself carried (its token, its name's length).
                let want = gate_error(code, want_highest, &resource, token)
                    .ok_or(format!("line {ln}: `{line}` is no refusal an admit gives"))?;
                if got != want {
                    return Err(format!(
                        "line {ln}: expected `{line}` ({want:?}), got {got:?}"
                    ));
                }
                stats.refusals += 1;
            }
            "highest" => {
                let g = gate
                    .as_mut()
                    .ok_or(format!("line {ln}: highest before config"))?;
                let (name, want) = rest
                    .rsplit_once(' ')
                    .ok_or(format!("line {ln}: expected `highest HEX N`"))?;
                let name = hex::decode(name).map_err(|e| format!("line {ln}: {e}"))?;
                let name =
                    String::from_utf8(name).map_err(|_| format!("line {ln}: name is not UTF-8"))?;
                let want: u64 = want.parse().map_err(|_| format!("line {ln}: bad token"))?;
                let got = g.highest(&name).map_or(0, |t| t.0);
                if got != want {
                    return Err(format!(
                        "line {ln}: highest({name:?}) = {got}, expected {want}"
                    ));
                }
                stats.highest += 1;
            }
            _ => return Err(format!("line {ln}: unknown directive {word:?}")),
        }
    }
    if let Some(e) = pending {
        return Err(format!(
            "end of file: admit refused with {e:?}, no err line"
        ));
    }
    Ok(stats)
}

/// The directory of the committed gate vector files.
pub fn gate_vectors_dir() -> std::path::PathBuf {
    crate::vectors::vectors_dir().join("gate")
}

/// The committed gate vector files, `(file name, text)`, sorted by name.
///
/// Errors: a message if the directory or a file cannot be read.
pub fn gate_vector_files() -> Result<Vec<(String, String)>, String> {
    let dir = gate_vectors_dir();
    let mut v = Vec::new();
    for e in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let p = e.map_err(|e| e.to_string())?.path();
        if p.extension().is_some_and(|x| x == "vec") {
            let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            v.push((
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
                text,
            ));
        }
    }
    v.sort();
    Ok(v)
}
