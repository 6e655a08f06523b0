//! Exports what a cluster applied as a **recording** (the line format of
//! `docs/RECORDING.md`): the starting snapshot of the window, then each core input the state
//! machine applied, with the logical time the leader stamped on its entry, the core's reply
//! (or refusal) and its events. The demo page opens the file and replays it into a fresh
//! core, checking every answer.
//!
//! The lines are not taken from a journal: the exporter restores the state machine from the
//! node's snapshot (or the empty state, when the log still holds every entry from the
//! first), and applies the committed log entries again through the state machine's own apply
//! ([`crate::state_machine`]), recording every call it makes to the core. Since the core is
//! deterministic, these are exactly the calls every replica made.
//!
//! What a line is made of:
//! * an op's advance to its time and the op's own input are one line (the core's `handle`
//!   advances first, so replaying the input alone gives the same events, the advance's
//!   first); in entries that tick at each deadline (`Op::EachDeadline`, every entry this
//!   version proposes), each deadline crossed on the way is a `tick` line of its own, at
//!   that deadline's time, before the op's line;
//! * an op the server refused before the core saw it (a wrong credential, a retried open)
//!   left only its advance: a `tick` line;
//! * blank and membership entries left nothing in the core: no line;
//! * the last line is the end line, `{"end":{"lines":N}}` with N the lines before it
//!   (version 2), so a file cut short at a line boundary is refused, not replayed as a
//!   shorter window.
//!
//! Limits: a recording has at most [`MAX_LINES`] lines, [`MAX_BYTES`] bytes and
//! [`MAX_LINE_BYTES`] bytes a line (the end line included), the demo page's limits; a
//! window past them is refused with the last index that fits.

use std::fmt::Write as _;

use fencelock::{Field, Input, LockService, Mode, Output, Reply, VecStorage, Wait};
use openraft::EntryPayload;

use crate::state_machine::{self, CoreCall, SmState};
use crate::types::Entry;

/// The recording format this module writes.
pub const FORMAT: &str = "fencelock-recording";
/// Its version: 2 ends every recording with its end line (version 1 had none).
pub const VERSION: u32 = 2;
/// How long one tick of the lines' `now` is, in milliseconds, as the header's `tick_ms`
/// says: the cluster's logical clock counts milliseconds of leader-active time
/// ([`crate::node`]), so one tick is 1 ms (the page shows the times in ms and s, not in
/// seconds a tick).
pub const TICK_MS: u64 = 1;
/// At most this many lines (the header included).
pub const MAX_LINES: usize = 20_000;
/// At most this many bytes in all.
pub const MAX_BYTES: usize = 8 << 20;
/// At most this many bytes a line (its checksum included).
pub const MAX_LINE_BYTES: usize = 16 << 10;
/// At most this many sessions, locks and claims each in the recorded core's tables: the
/// page makes a core of the header's capacity, and refuses a larger one (so a few bytes
/// cannot ask it for a gigabyte).
pub const MAX_ROWS: u32 = 65_536;
/// The largest number a recording holds (2^53 - 1: exact in a JSON reader's double).
pub const MAX_NUMBER: u64 = (1 << 53) - 1;

/// Which part of the history to export: log indices and logical times (milliseconds of
/// the cluster's clock), both ends included; `None` is open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// The first log index.
    pub from_index: Option<u64>,
    /// The last log index.
    pub to_index: Option<u64>,
    /// The first logical time.
    pub from_time: Option<u64>,
    /// The last logical time.
    pub to_time: Option<u64>,
}

/// A built recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recording {
    /// The lines, each `JSON \t crc32`, without newlines; the first is the header.
    pub lines: Vec<String>,
    /// The log index and logical time of the first and last recorded input (`None` when
    /// nothing was applied in the window).
    pub span: Option<((u64, u64), (u64, u64))>,
}

/// Why a window cannot be exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportError {
    /// The window holds more than a recording can (lines, bytes or one line's length).
    TooLarge(String),
    /// A value a recording cannot carry (a number past 2^53 - 1, an input or answer the
    /// format has no words for), at a log index.
    Unrepresentable(String),
}

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportError::TooLarge(m) | ExportError::Unrepresentable(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ExportError {}

/// `text` and its CRC-32 (IEEE), as one recording line.
pub(crate) fn line(text: String) -> String {
    let crc = crc32fast::hash(text.as_bytes());
    format!("{text}\t{crc:08x}")
}

/// What is wrong with `l` as a recording line, if anything: longer than
/// [`MAX_LINE_BYTES`], holding a line break, or not its text, a tab and the text's CRC-32
/// as eight lowercase hex digits (as [`line`] writes it). The client checks each line an
/// export receives before it writes any, as the demo page checks each it reads.
/// Cost: O(line length).
pub fn line_fault(l: &str) -> Option<&'static str> {
    if l.len() > MAX_LINE_BYTES {
        return Some("is longer than a recording line may be");
    }
    if l.contains(['\n', '\r']) {
        return Some("holds a line break");
    }
    let Some((text, crc)) = l.rsplit_once('\t') else {
        return Some("has no checksum");
    };
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if crc.len() != 8 || !crc.bytes().all(hex) {
        return Some("has no checksum");
    }
    if u32::from_str_radix(crc, 16).ok() != Some(crc32fast::hash(text.as_bytes())) {
        return Some("does not match its checksum");
    }
    None
}

/// JSON text being built; numbers are checked against [`MAX_NUMBER`].
struct Json<'a> {
    out: String,
    /// Where a refusal says the value came from.
    at: &'a str,
}

impl Json<'_> {
    fn num(&mut self, n: u64) -> Result<(), ExportError> {
        if n > MAX_NUMBER {
            return Err(ExportError::Unrepresentable(format!(
                "{}: the number {n} is past 2^53 - 1, which a recording cannot hold exactly",
                self.at
            )));
        }
        let _ = write!(self.out, "{n}");
        Ok(())
    }

    fn str(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(self.out, "\\u{:04x}", c as u32);
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn key(&mut self, k: &str) {
        if !self.out.ends_with('{') {
            self.out.push(',');
        }
        self.out.push('"');
        self.out.push_str(k);
        self.out.push_str("\":");
    }

    fn kv_num(&mut self, k: &str, n: u64) -> Result<(), ExportError> {
        self.key(k);
        self.num(n)
    }

    fn kv_str(&mut self, k: &str, s: &str) {
        self.key(k);
        self.str(s);
    }

    fn unknown(&self, what: &str) -> ExportError {
        ExportError::Unrepresentable(format!(
            "{}: {what}, which recording version {VERSION} has no words for",
            self.at
        ))
    }
}

/// `"key":MODE` with the mode as the wasm binding spells it: `"exclusive"`, `"shared"` or
/// `{"permits":COUNT,"limit":LIMIT}`.
fn kv_mode(j: &mut Json<'_>, k: &str, m: Mode) -> Result<(), ExportError> {
    match m {
        Mode::Exclusive => j.kv_str(k, "exclusive"),
        Mode::Shared => j.kv_str(k, "shared"),
        Mode::Permits { count, limit } => {
            j.key(k);
            j.out.push('{');
            j.kv_num("permits", u64::from(count))?;
            j.kv_num("limit", u64::from(limit))?;
            j.out.push('}');
        }
    }
    Ok(())
}

/// The input as the wasm `LockService.handle` takes it: its kind, `now`, its session (if
/// it acts for one), the fields of its shape, its request number (if it carries one).
fn input(j: &mut Json<'_>, i: &Input) -> Result<(), ExportError> {
    j.out.push('{');
    j.kv_str("kind", i.kind());
    j.kv_num("now", i.now().0)?;
    if let Some(session) = i.session() {
        j.kv_num("session", session.0)?;
    }
    match i {
        Input::OpenSession { ttl, .. } => j.kv_num("ttl", *ttl)?,
        Input::KeepAlive { .. } | Input::CloseSession { .. } | Input::Tick { .. } => {}
        Input::Acquire {
            lock,
            mode: m,
            wait,
            ..
        } => {
            j.kv_str("lock", lock.as_str());
            kv_mode(j, "mode", *m)?;
            match wait {
                Wait::None => j.kv_str("wait", "none"),
                Wait::Forever => j.kv_str("wait", "forever"),
                Wait::Until(t) => {
                    j.key("wait");
                    j.out.push('{');
                    j.kv_num("until", t.0)?;
                    j.out.push('}');
                }
            }
        }
        Input::Release { lock, .. } | Input::Cancel { lock, .. } => j.kv_str("lock", lock.as_str()),
        Input::OpenLabeled { ttl, label, .. } => {
            j.kv_num("ttl", *ttl)?;
            j.kv_str("label", label.as_str());
        }
        Input::Watch { lock, .. } | Input::Unwatch { lock, .. } => j.kv_str("lock", lock.as_str()),
        Input::ReleaseHold { lock, token, .. } => {
            j.kv_str("lock", lock.as_str());
            j.kv_num("token", token.0)?;
        }
        _ => return Err(j.unknown("an input")),
    }
    if let Some(r) = i.request() {
        j.kv_num("request", r)?;
    }
    j.out.push('}');
    Ok(())
}

/// `,"name":value` for each field `walk` hands out: a reply's or an event's
/// ([`Reply::fields`], [`Output::fields`], the spelling the wasm binding's objects use).
fn kv_fields<'a>(
    j: &mut Json<'_>,
    walk: impl FnOnce(&mut dyn FnMut(&'static str, Field<'a>)),
) -> Result<(), ExportError> {
    let mut done = Ok(());
    walk(&mut |k, v| {
        if done.is_ok() {
            done = match v {
                Field::Number(n) => j.kv_num(k, n),
                Field::Text(t) => {
                    j.kv_str(k, t);
                    Ok(())
                }
                Field::Mode(m) => kv_mode(j, k, m),
            };
        }
    });
    done
}

/// The reply as the wasm `LockService.handle` returns it.
fn reply(j: &mut Json<'_>, r: &Reply) -> Result<(), ExportError> {
    j.out.push('{');
    j.kv_str("kind", r.kind());
    kv_fields(j, |f| r.fields(f))?;
    j.out.push('}');
    Ok(())
}

/// An event as the wasm binding gives it.
fn event(j: &mut Json<'_>, o: &Output) -> Result<(), ExportError> {
    j.out.push('{');
    j.kv_str("kind", o.kind());
    kv_fields(j, |f| o.fields(f))?;
    j.out.push('}');
    Ok(())
}

/// One input line: `{now, input, reply | error, events}`.
fn call_line(c: &CoreCall, at: &str) -> Result<String, ExportError> {
    let mut j = Json {
        out: String::from("{"),
        at,
    };
    j.kv_num("now", c.input.now().0)?;
    j.key("input");
    input(&mut j, &c.input)?;
    match &c.reply {
        Ok(r) => {
            j.key("reply");
            reply(&mut j, r)?;
        }
        Err(e) => j.kv_str("error", e.kind()),
    }
    j.key("events");
    j.out.push('[');
    for (i, o) in c.events.iter().enumerate() {
        if i > 0 {
            j.out.push(',');
        }
        event(&mut j, o)?;
    }
    j.out.push_str("]}");
    Ok(line(j.out))
}

/// The header line for a window that starts at `svc`'s state.
fn header_line(svc: &LockService<VecStorage>, source: &str) -> Result<String, ExportError> {
    let mut j = Json {
        out: String::from("{"),
        at: "the header",
    };
    j.kv_str("format", FORMAT);
    j.kv_num("version", u64::from(VERSION))?;
    j.kv_str("source", source);
    j.kv_num("tick_ms", TICK_MS)?;
    let cap = svc.capacity();
    j.key("capacity");
    j.out.push('{');
    j.kv_num("sessions", u64::from(cap.sessions))?;
    j.kv_num("locks", u64::from(cap.locks))?;
    j.kv_num("claims", u64::from(cap.claims))?;
    j.out.push('}');
    let cfg = svc.config();
    j.key("config");
    j.out.push('{');
    j.kv_num("lockDelay", cfg.lock_delay)?;
    j.kv_num("maxNameLen", u64::from(cfg.max_name_len))?;
    j.kv_num("maxWatchers", u64::from(cfg.max_watchers))?;
    j.out.push('}');
    j.key("snapshot");
    j.out.push('"');
    for b in svc.snapshot_vec() {
        let _ = write!(j.out, "{b:02x}");
    }
    j.out.push_str("\"}");
    Ok(line(j.out))
}

/// The lines of one op's core calls: its advance merged into its input (the input's own
/// advance then repeats it), or the advance alone as a `tick` when the op never reached the
/// core.
fn op_lines(calls: Vec<CoreCall>, at: &str) -> Result<Vec<String>, ExportError> {
    let mut out = Vec::new();
    let mut pending: Option<CoreCall> = None;
    for c in calls {
        if c.advance {
            if let Some(p) = pending.take() {
                out.push(call_line(&p, at)?);
            }
            pending = Some(c);
            continue;
        }
        let c = match pending.take() {
            Some(p) if p.input.now() == c.input.now() => CoreCall {
                events: p.events.into_iter().chain(c.events).collect(),
                ..c
            },
            Some(p) => {
                out.push(call_line(&p, at)?);
                c
            }
            None => c,
        };
        out.push(call_line(&c, at)?);
    }
    if let Some(p) = pending {
        out.push(call_line(&p, at)?);
    }
    Ok(out)
}

/// Builds the recording of `window` from `start` (the state machine's state after log
/// index `start.last_applied`, or the empty state) and the committed `entries` that follow
/// it, in order and without gaps. `source` goes into the header.
///
/// The recording starts at the first op whose index and time are in the window (the header
/// holds the core's snapshot just before it) and ends after the last one; entries before
/// the window are applied without being recorded.
///
/// Errors: [`ExportError::TooLarge`] naming the last log index that fits, or for tables
/// larger than [`MAX_ROWS`] (before anything is applied);
/// [`ExportError::Unrepresentable`] naming the index. Cost: O(entries from `start` to the
/// window's end) applies, plus O(size of the recording).
pub fn build(
    mut start: SmState,
    entries: impl IntoIterator<Item = Entry>,
    window: Window,
    source: &str,
) -> Result<Recording, ExportError> {
    let cap = start.svc.capacity();
    if cap.sessions.max(cap.locks).max(cap.claims) > MAX_ROWS {
        return Err(ExportError::TooLarge(format!(
            "the cluster's tables ({} sessions, {} locks, {} claims) are larger than a \
             recording's core (at most {MAX_ROWS} rows each): the page would refuse it",
            cap.sessions, cap.locks, cap.claims
        )));
    }
    let g = &mut start;
    let mut lines: Vec<String> = Vec::new();
    let mut bytes = 0usize;
    let mut span: Option<((u64, u64), (u64, u64))> = None;
    // the last index whose lines all fit, for a refusal's advice
    let mut fits: Option<u64> = None;
    'entries: for entry in entries {
        let index = entry.log_id.index;
        if window.to_index.is_some_and(|to| index > to) {
            break;
        }
        let EntryPayload::Normal(cmd) = &entry.payload else {
            state_machine::replay_meta(g, &entry);
            continue;
        };
        g.last_applied = Some(entry.log_id);
        let in_index = window.from_index.is_none_or(|f| index >= f);
        let (stamp, ops) = state_machine::requests(cmd.clone());
        for op in ops {
            let t = state_machine::time_of(g, stamp, &op);
            if window.to_time.is_some_and(|to| t > to) {
                break 'entries;
            }
            let recording =
                !lines.is_empty() || (in_index && window.from_time.is_none_or(|f| t >= f));
            if !recording {
                state_machine::replay_op(g, stamp, op, index, &mut None);
                continue;
            }
            if lines.is_empty() {
                let h = checked_header(&g.svc, source, index)?;
                bytes += h.len() + 1;
                lines.push(h);
            }
            let mut calls = Vec::new();
            state_machine::replay_op(g, stamp, op, index, &mut Some(&mut calls));
            let at = format!("log index {index}");
            for l in op_lines(calls, &at)? {
                let too_long = l.len() > MAX_LINE_BYTES;
                // Room is kept for the end line.
                if too_long
                    || lines.len() + 1 >= MAX_LINES
                    || bytes + l.len() + 1 + END_LINE_ROOM > MAX_BYTES
                {
                    let advice = match fits {
                        Some(i) => format!(
                            "export up to log index {i} (--to-index {i}) and the rest from {} on",
                            i + 1
                        ),
                        None => "export a window that starts later".into(),
                    };
                    let what = if too_long {
                        format!("a line of {} bytes (at most {MAX_LINE_BYTES})", l.len())
                    } else {
                        format!("more than {MAX_LINES} lines or {MAX_BYTES} bytes")
                    };
                    return Err(ExportError::TooLarge(format!(
                        "the window reaches {what} at log index {index}, more than a recording holds: {advice}"
                    )));
                }
                bytes += l.len() + 1;
                lines.push(l);
            }
            span = Some(match span {
                None => ((index, t), (index, t)),
                Some((first, _)) => (first, (index, t)),
            });
        }
        if !lines.is_empty() {
            fits = Some(index);
        }
    }
    if lines.is_empty() {
        // No op in the window: the recording is the header alone, held to the same limit.
        let at = g.last_applied.map_or(0, |l| l.index);
        lines.push(checked_header(&g.svc, source, at)?);
    }
    lines.push(end_line(lines.len()));
    Ok(Recording { lines, span })
}

/// The most bytes an end line takes, its line break included (`{"end":{"lines":N}}`, a
/// tab, 8 hex digits and the break: 34 bytes with N of five digits).
const END_LINE_ROOM: usize = 48;

/// The end line of a recording whose other lines are `n`. Cost: O(1).
fn end_line(n: usize) -> String {
    line(format!(r#"{{"end":{{"lines":{n}}}}}"#))
}

/// The header line of a recording that starts at log index `index`, refused when longer
/// than a recording line may be. Errors: [`ExportError::TooLarge`], naming the index.
/// Cost: the core's snapshot, encoded.
fn checked_header(
    svc: &fencelock::LockService<fencelock::VecStorage>,
    source: &str,
    index: u64,
) -> Result<String, ExportError> {
    let h = header_line(svc, source)?;
    if h.len() > MAX_LINE_BYTES {
        return Err(ExportError::TooLarge(format!(
            "the core's state at log index {index} is {} bytes as a header line, more than \
             the {MAX_LINE_BYTES} a recording line may have: a recording cannot start there \
             (its snapshot holds too many sessions and holds)",
            h.len()
        )));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::SessionSecret;
    use crate::state_machine::ServiceConfig;
    use crate::types::{Cmd, LogId, Op, STAMPED_AT_APPLY};
    use fencelock::{Config, LockName, SessionId, Tick};

    fn config() -> ServiceConfig {
        ServiceConfig {
            sessions: 8,
            locks: 8,
            claims: 8,
            core: Config::default(),
        }
    }

    fn entry(index: u64, now: u64, ops: Vec<Op>) -> Entry {
        Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Cmd {
                now: Some(now),
                ops,
            }),
        }
    }

    fn owned(input: Input) -> Op {
        Op::Owned {
            input,
            secret: SessionSecret([7; 16]),
        }
    }

    fn acquire(session: u64, lock: &str) -> Op {
        owned(Input::Acquire {
            now: STAMPED_AT_APPLY,
            session: SessionId(session),
            lock: LockName::new(lock).expect("name"),
            mode: Mode::Exclusive,
            wait: Wait::Forever,
            request: Some(1),
        })
    }

    fn force_release_hold(session: u64, token: u64) -> Op {
        Op::ForceReleaseHold {
            session: SessionId(session),
            lock: LockName::new("jobs/x").expect("name"),
            token: fencelock::Token(token),
        }
    }

    fn open(ttl: u64) -> Op {
        Op::Open {
            ttl,
            key: None,
            secret: SessionSecret([7; 16]),
        }
    }

    fn history() -> Vec<Entry> {
        vec![
            entry(1, 10, vec![open(100), open(100)]),
            entry(2, 20, vec![acquire(1, "jobs/x"), acquire(2, "jobs/x")]),
            entry(
                3,
                100,
                vec![owned(Input::KeepAlive {
                    now: STAMPED_AT_APPLY,
                    session: SessionId(2),
                    request: None,
                })],
            ),
            // session 1 never keeps alive: at 150 it has expired and 2 gets token 2
            entry(4, 150, vec![Op::Input(Input::Tick { now: Tick(0) })]),
        ]
    }

    /// The recording of all of `h`, from the empty state, with `source` in its header.
    fn whole(h: Vec<Entry>, source: &str) -> Recording {
        build(
            state_machine::empty_state(&config()),
            h,
            Window::default(),
            source,
        )
        .expect("exports")
    }

    fn body(l: &str) -> &str {
        let (json, crc) = l.rsplit_once('\t').expect("a tab");
        assert_eq!(format!("{:08x}", crc32fast::hash(json.as_bytes())), crc);
        json
    }

    /// A cluster whose tables are larger than a recording's core is refused before any
    /// line is written: the page would refuse the file at its header.
    #[test]
    fn a_cluster_larger_than_a_recordings_core_is_not_exported() {
        let mut big = config();
        big.claims = MAX_ROWS as usize + 1;
        let e = build(
            state_machine::empty_state(&big),
            history(),
            Window::default(),
            "test",
        )
        .map(|_| ())
        .expect_err("refused");
        assert!(e.to_string().contains("65536 rows each"), "{e}");
        big.claims = MAX_ROWS as usize;
        build(
            state_machine::empty_state(&big),
            history(),
            Window::default(),
            "test",
        )
        .expect("the largest a recording holds exports");
    }

    /// The lines say what the core did, in the format's words: the grant, the queue, the
    /// expiry that releases the first holder and grants the waiter the next token.
    #[test]
    fn a_history_becomes_checksummed_lines_in_the_formats_words() {
        let r = whole(history(), "test");
        let b: Vec<&str> = r.lines.iter().map(|l| body(l)).collect();
        assert!(b[0].starts_with(r#"{"format":"fencelock-recording","version":2,"source":"test","tick_ms":1,"capacity":{"sessions":8,"locks":8,"claims":8},"config":{"lockDelay":0,"maxNameLen":"#), "{}", b[0]);
        assert_eq!(
            b[1],
            r#"{"now":10,"input":{"kind":"open_session","now":10,"ttl":100},"reply":{"kind":"opened","session":1,"expiresAt":110},"events":[]}"#
        );
        assert_eq!(
            b[3],
            r#"{"now":20,"input":{"kind":"acquire","now":20,"session":1,"lock":"jobs/x","mode":"exclusive","wait":"forever","request":1},"reply":{"kind":"granted","mode":"exclusive","token":1},"events":[]}"#
        );
        assert_eq!(
            b[4],
            r#"{"now":20,"input":{"kind":"acquire","now":20,"session":2,"lock":"jobs/x","mode":"exclusive","wait":"forever","request":1},"reply":{"kind":"queued","mode":"exclusive","position":1},"events":[]}"#
        );
        assert_eq!(
            b[5],
            r#"{"now":100,"input":{"kind":"keep_alive","now":100,"session":2},"reply":{"kind":"kept_alive","expiresAt":200},"events":[]}"#
        );
        assert_eq!(
            b[6],
            r#"{"now":150,"input":{"kind":"tick","now":150},"reply":{"kind":"ticked","now":150},"events":[{"kind":"session_expired","session":1},{"kind":"released","session":1,"lock":"jobs/x","token":1,"reason":"expired"},{"kind":"granted","session":2,"lock":"jobs/x","mode":"exclusive","token":2}]}"#
        );
        // Last, the end line: the count of the lines before it.
        assert_eq!(b[7], r#"{"end":{"lines":7}}"#);
        assert_eq!(r.lines.len(), 8);
        assert_eq!(r.span, Some(((1, 10), (4, 150))));
    }

    /// An entry of this version (`Cmd::new`: a tick at each deadline) records each deadline
    /// it crossed as a `tick` line at that deadline's time: session 1, opened at 10 with a
    /// ttl of 100, expires at 110 and the lock goes to 2 then — the line says so — and the
    /// entry's own tick at 150 finds nothing due.
    #[test]
    fn an_entry_that_ticks_at_each_deadline_has_a_tick_line_at_each() {
        let mut entries = history();
        entries[3] = Entry {
            log_id: entries[3].log_id,
            payload: EntryPayload::Normal(Cmd::new(
                Some(150),
                [Op::Input(Input::Tick { now: Tick(0) })],
            )),
        };
        let r = whole(entries, "test");
        let b: Vec<&str> = r.lines.iter().map(|l| body(l)).collect();
        assert_eq!(
            b[6],
            r#"{"now":110,"input":{"kind":"tick","now":110},"reply":{"kind":"ticked","now":110},"events":[{"kind":"session_expired","session":1},{"kind":"released","session":1,"lock":"jobs/x","token":1,"reason":"expired"},{"kind":"granted","session":2,"lock":"jobs/x","mode":"exclusive","token":2}]}"#
        );
        assert_eq!(
            b[7],
            r#"{"now":150,"input":{"kind":"tick","now":150},"reply":{"kind":"ticked","now":150},"events":[]}"#
        );
        assert_eq!(r.lines.len(), 9);
    }

    /// The header says how long a tick is: the cluster's logical time is milliseconds, so
    /// a reader shows `now` 1500 as 1.5 s, not 1500 s.
    #[test]
    fn the_header_says_a_tick_is_one_millisecond() {
        let r = whole(history(), "test");
        let header = body(&r.lines[0]);
        assert_eq!(header.matches(r#""tick_ms":"#).count(), 1, "{header}");
        assert!(header.contains(r#","tick_ms":1,"#), "{header}");
    }

    /// A window by index starts at the state just before it: the header's snapshot holds
    /// what came earlier, and only the window's inputs have lines.
    #[test]
    fn a_window_starts_from_the_state_before_it() {
        let all = whole(history(), "t");
        let w = Window {
            from_index: Some(2),
            to_index: Some(2),
            ..Window::default()
        };
        let part = build(state_machine::empty_state(&config()), history(), w, "t").unwrap();
        assert_eq!(part.lines[1..3], all.lines[3..5]);
        assert_eq!(body(&part.lines[3]), r#"{"end":{"lines":3}}"#);
        assert_ne!(
            part.lines[0], all.lines[0],
            "the header's snapshot has the two sessions"
        );
        let by_time = Window {
            from_time: Some(11),
            to_time: Some(20),
            ..Window::default()
        };
        let t = build(
            state_machine::empty_state(&config()),
            history(),
            by_time,
            "t",
        )
        .unwrap();
        assert_eq!(t.lines, part.lines);
    }

    /// A refusal by the core is an `error` line with the advance's events; an op the server
    /// refused before the core (a wrong credential) leaves its advance alone, a `tick` line;
    /// a forced release of a hold the session no longer has is the core's refusal of a
    /// `release_hold`.
    #[test]
    fn refusals_by_the_core_and_by_the_server_have_the_lines_the_core_would_give() {
        let stranger = Op::Owned {
            input: Input::KeepAlive {
                now: STAMPED_AT_APPLY,
                session: SessionId(1),
                request: None,
            },
            secret: SessionSecret([9; 16]),
        };
        let h = vec![
            entry(1, 10, vec![open(100)]),
            entry(2, 20, vec![stranger]),
            entry(
                3,
                30,
                vec![owned(Input::Release {
                    now: STAMPED_AT_APPLY,
                    session: SessionId(1),
                    lock: LockName::new("jobs/x").expect("name"),
                    request: None,
                })],
            ),
            entry(
                4,
                40,
                vec![Op::ForceReleaseHold {
                    session: SessionId(1),
                    lock: LockName::new("jobs/x").expect("name"),
                    token: fencelock::Token(3),
                }],
            ),
            entry(
                5,
                50,
                vec![
                    open(100),
                    open(20),
                    acquire(1, "jobs/x"),
                    acquire(2, "jobs/x"),
                ],
            ),
            // 1 holds jobs/x with token 1: a forced release of token 3 is refused and the
            // hold stays (the server used to refuse it before the core: a tick line)...
            entry(6, 60, vec![force_release_hold(1, 3)]),
            // ...and the release of token 1 is one line, the advance's events first
            // (session 3 expires at 70), then the grant to session 2.
            entry(7, 100, vec![force_release_hold(1, 1)]),
        ];
        let r = whole(h, "t");
        let b: Vec<&str> = r.lines.iter().map(|l| body(l)).collect();
        assert_eq!(
            b[2],
            r#"{"now":20,"input":{"kind":"tick","now":20},"reply":{"kind":"ticked","now":20},"events":[]}"#
        );
        assert_eq!(
            b[3],
            r#"{"now":30,"input":{"kind":"release","now":30,"session":1,"lock":"jobs/x"},"error":"not_holder","events":[]}"#
        );
        assert_eq!(
            b[4],
            r#"{"now":40,"input":{"kind":"release_hold","now":40,"session":1,"lock":"jobs/x","token":3},"error":"not_holder","events":[]}"#
        );
        assert_eq!(
            b[9],
            r#"{"now":60,"input":{"kind":"release_hold","now":60,"session":1,"lock":"jobs/x","token":3},"error":"not_holder","events":[]}"#
        );
        assert_eq!(
            b[10],
            r#"{"now":100,"input":{"kind":"release_hold","now":100,"session":1,"lock":"jobs/x","token":1},"reply":{"kind":"released","token":1},"events":[{"kind":"session_expired","session":3},{"kind":"granted","session":2,"lock":"jobs/x","mode":"exclusive","token":2}]}"#
        );
        assert_eq!(r.lines.len(), 12);
    }

    /// An administrator's close is written as the core's `close_session` line (no request
    /// number), with the core's events only: the hold's release and the grant to the
    /// waiter. The `SessionExpired` the owner is pushed is no event of the core, and is
    /// not in the recording. A repeat is the core's `unknown_session`.
    #[test]
    fn a_forced_close_is_a_close_session_line_with_the_cores_events() {
        let h = vec![
            entry(1, 10, vec![open(100), open(100)]),
            entry(2, 20, vec![acquire(1, "jobs/x"), acquire(2, "jobs/x")]),
            entry(
                3,
                30,
                vec![Op::ForceClose {
                    session: SessionId(1),
                }],
            ),
            entry(
                4,
                40,
                vec![Op::ForceClose {
                    session: SessionId(1),
                }],
            ),
        ];
        let r = whole(h, "t");
        let b: Vec<&str> = r.lines.iter().map(|l| body(l)).collect();
        assert_eq!(
            b[5],
            r#"{"now":30,"input":{"kind":"close_session","now":30,"session":1},"reply":{"kind":"closed"},"events":[{"kind":"released","session":1,"lock":"jobs/x","token":1,"reason":"closed"},{"kind":"granted","session":2,"lock":"jobs/x","mode":"exclusive","token":2}]}"#
        );
        assert_eq!(
            b[6],
            r#"{"now":40,"input":{"kind":"close_session","now":40,"session":1},"error":"unknown_session","events":[]}"#
        );
        assert_eq!(r.lines.len(), 8);
    }

    /// A window with no op in it is the header alone, held to the line limit too: a state
    /// too large for a header line is refused, not written as a line the page refuses.
    #[test]
    fn a_header_only_window_is_held_to_the_line_limit() {
        let big = ServiceConfig {
            sessions: 1024,
            ..config()
        };
        // About 20 bytes of hex per session: 1 000 sessions are over 16 KiB.
        let h = vec![entry(1, 1, (0..1000).map(|_| open(1_000_000)).collect())];
        let late = Window {
            from_time: Some(1_000_000_000),
            ..Window::default()
        };
        let m = match build(state_machine::empty_state(&big), h, late, "t") {
            Err(ExportError::TooLarge(m)) => m,
            Err(e) => panic!("{e:?}"),
            Ok(r) => panic!("built a header line of {} bytes", r.lines[0].len()),
        };
        assert!(
            m.contains("log index 1 is") && m.contains("header line"),
            "{m}"
        );
        let small = vec![entry(1, 1, vec![open(100)])];
        let r = build(state_machine::empty_state(&config()), small, late, "t").unwrap();
        assert_eq!((r.lines.len(), r.span), (2, None), "the header alone");
        assert_eq!(body(&r.lines[1]), r#"{"end":{"lines":1}}"#);
    }

    /// A window past the format's limits is refused, naming the last index that fits.
    #[test]
    fn a_window_past_the_limits_is_refused_with_the_last_index_that_fits() {
        let mut h = vec![entry(1, 1, vec![open(1_000_000)])];
        for i in 0..(MAX_LINES as u64) {
            h.push(entry(
                2 + i,
                2 + i,
                vec![owned(Input::KeepAlive {
                    now: STAMPED_AT_APPLY,
                    session: SessionId(1),
                    request: None,
                })],
            ));
        }
        let e = build(
            state_machine::empty_state(&config()),
            h,
            Window::default(),
            "t",
        )
        .expect_err("too many lines");
        let ExportError::TooLarge(m) = e else {
            panic!("{e:?}")
        };
        // the header, the open (index 1), then one line per keep-alive: index 19 998 is line
        // 19 999, and the end line the 20 000th
        assert!(m.contains("--to-index 19998"), "{m}");
    }

    /// Every input shape in the format's words: kind, `now`, the session, the shape's own
    /// fields, the request number when there is one.
    #[test]
    fn every_input_shape_has_its_words() {
        let lock = || LockName::new("jobs/x").expect("name");
        let (now, session) = (Tick(5), SessionId(3));
        let cases = [
            (
                Input::OpenSession { now, ttl: 100 },
                r#"{"kind":"open_session","now":5,"ttl":100}"#,
            ),
            (
                Input::KeepAlive {
                    now,
                    session,
                    request: Some(4),
                },
                r#"{"kind":"keep_alive","now":5,"session":3,"request":4}"#,
            ),
            (
                Input::CloseSession {
                    now,
                    session,
                    request: None,
                },
                r#"{"kind":"close_session","now":5,"session":3}"#,
            ),
            (
                Input::CloseSession {
                    now,
                    session,
                    request: Some(9),
                },
                r#"{"kind":"close_session","now":5,"session":3,"request":9}"#,
            ),
            (
                Input::Acquire {
                    now,
                    session,
                    lock: lock(),
                    mode: Mode::Shared,
                    wait: Wait::Until(Tick(50)),
                    request: Some(2),
                },
                r#"{"kind":"acquire","now":5,"session":3,"lock":"jobs/x","mode":"shared","wait":{"until":50},"request":2}"#,
            ),
            (
                Input::Acquire {
                    now,
                    session,
                    lock: lock(),
                    mode: Mode::Exclusive,
                    wait: Wait::None,
                    request: None,
                },
                r#"{"kind":"acquire","now":5,"session":3,"lock":"jobs/x","mode":"exclusive","wait":"none"}"#,
            ),
            (
                Input::Release {
                    now,
                    session,
                    lock: lock(),
                    request: Some(7),
                },
                r#"{"kind":"release","now":5,"session":3,"lock":"jobs/x","request":7}"#,
            ),
            (
                Input::Cancel {
                    now,
                    session,
                    lock: lock(),
                    request: None,
                },
                r#"{"kind":"cancel","now":5,"session":3,"lock":"jobs/x"}"#,
            ),
            (
                Input::ReleaseHold {
                    now,
                    session,
                    lock: lock(),
                    token: fencelock::Token(12),
                    request: None,
                },
                r#"{"kind":"release_hold","now":5,"session":3,"lock":"jobs/x","token":12}"#,
            ),
            (Input::Tick { now }, r#"{"kind":"tick","now":5}"#),
        ];
        for (i, want) in cases {
            let mut j = Json {
                out: String::new(),
                at: "test",
            };
            input(&mut j, &i).expect("representable");
            assert_eq!(j.out, want, "{i:?}");
        }
    }

    /// A recording is for machines: a label's bidirectional controls (which `fencelock
    /// holder` prints escaped) are written exactly as they are, as JSON allows.
    #[test]
    fn a_label_with_bidirectional_controls_is_recorded_exactly() {
        let label = "ci\u{202e}7 tsoh\u{2066}";
        let i = Input::OpenLabeled {
            now: Tick(5),
            ttl: 100,
            label: fencelock::Label::new(label).expect("label"),
        };
        let mut j = Json {
            out: String::new(),
            at: "test",
        };
        input(&mut j, &i).expect("representable");
        assert_eq!(
            j.out,
            format!(r#"{{"kind":"open_labeled","now":5,"ttl":100,"label":"{label}"}}"#)
        );
    }

    /// The inputs, replies and events of labels, watches and semaphores in the format's
    /// words (docs/RECORDING.md): kinds from `Input::kind()`, a permits mode as an object.
    #[test]
    fn labels_watches_and_permits_have_their_words() {
        let lock = || LockName::new("jobs/x").expect("name");
        let label = || fencelock::Label::new("host:7").expect("label");
        let (now, session) = (Tick(5), SessionId(3));
        let permits = Mode::Permits { count: 2, limit: 4 };
        let inputs = [
            (
                Input::OpenLabeled {
                    now,
                    ttl: 100,
                    label: label(),
                },
                r#"{"kind":"open_labeled","now":5,"ttl":100,"label":"host:7"}"#,
            ),
            (
                Input::Watch {
                    now,
                    session,
                    lock: lock(),
                    request: Some(2),
                },
                r#"{"kind":"watch","now":5,"session":3,"lock":"jobs/x","request":2}"#,
            ),
            (
                Input::Unwatch {
                    now,
                    session,
                    lock: lock(),
                    request: None,
                },
                r#"{"kind":"unwatch","now":5,"session":3,"lock":"jobs/x"}"#,
            ),
            (
                Input::Acquire {
                    now,
                    session,
                    lock: lock(),
                    mode: permits,
                    wait: Wait::Forever,
                    request: Some(1),
                },
                r#"{"kind":"acquire","now":5,"session":3,"lock":"jobs/x","mode":{"permits":2,"limit":4},"wait":"forever","request":1}"#,
            ),
        ];
        let json = || Json {
            out: String::new(),
            at: "test",
        };
        for (i, want) in inputs {
            let mut j = json();
            input(&mut j, &i).expect("representable");
            assert_eq!(j.out, want, "{i:?}");
        }
        let replies = [
            (
                Reply::Watching { holders: 2 },
                r#"{"kind":"watching","holders":2}"#,
            ),
            (Reply::Unwatched, r#"{"kind":"unwatched"}"#),
            (
                Reply::Granted {
                    mode: permits,
                    token: fencelock::Token(9),
                },
                r#"{"kind":"granted","mode":{"permits":2,"limit":4},"token":9}"#,
            ),
        ];
        for (r, want) in replies {
            let mut j = json();
            reply(&mut j, &r).expect("representable");
            assert_eq!(j.out, want, "{r:?}");
        }
        let mut j = json();
        let o = Output::HolderChanged {
            session,
            lock: lock(),
            holder: SessionId(4),
            mode: permits,
            token: fencelock::Token(9),
            change: fencelock::Change::Expired,
            label: label(),
        };
        event(&mut j, &o).expect("representable");
        assert_eq!(
            j.out,
            r#"{"kind":"holder_changed","session":3,"lock":"jobs/x","holder":4,"mode":{"permits":2,"limit":4},"token":9,"change":"expired","label":"host:7"}"#
        );
    }
}
