//! Error-precedence tables (`tests/vectors/*.calls`): rows of calls, many with several
//! faults at once, and the one outcome each must get in every layer (docs/SPEC.md §5).
//! Every layer runs them through its typed API; the native runner here runs each row both
//! through the typed Rust methods and through frames (`handle_frame`) and requires the
//! same outcome from both, and the same state after every row.
//!
//! The format, one row per line:
//!
//! ```text
//! # comment (a line starting with #; blank lines are skipped too)
//! config sessions=N locks=N claims=N lock_delay=N max_name_len=N     (first non-comment line)
//! <method> key=value ... -> ok <reply kind>
//! <method> key=value ... -> err <Error::code()>
//! ```
//!
//! * `method` ∈ `open`, `open_labeled`, `keep_alive`, `close`, `acquire`, `release`,
//!   `release_hold`, `cancel`, `watch`, `unwatch`, `tick`.
//! * Keys, each given exactly once, all of the method's and no other:
//!   `open`: `now ttl`; `open_labeled`: `now ttl label`; `keep_alive`, `close`:
//!   `now session request`; `acquire`: `now session lock mode wait request`;
//!   `release`, `cancel`, `watch`, `unwatch`: `now session lock request`; `release_hold`:
//!   `now session lock token request`; `tick`: `now`.
//! * Values: `now`, `ttl`, `session`, `token` are u64 in decimal; `lock` is the name's bytes (no
//!   spaces; `lock=` is the empty name; at most 64 bytes, since a frame cannot carry a
//!   longer name — a table shows `NameTooLong` with a small `max_name_len` instead);
//!   `label` is the label's bytes (no spaces; `label=` is no label; at most 64 bytes, for
//!   the same reason); `mode` is `x` (exclusive), `s` (shared) or `p:<count>/<limit>`
//!   (permits, u32 each); `wait` is `none`, `forever` or `until:<u64>`; `request` is `-`
//!   (none) or a u64.
//! * The outcome: `ok` and the reply's [`Reply::kind`] (`opened`, `kept_alive`, `closed`,
//!   `granted`, `queued`, `busy`, `released`, `cancelled`, `hold_ended`, `wait_ended`,
//!   `ticked`, `watching`, `unwatched`), or `err` and the error's numeric code. Events are not checked here (the
//!   `.vec` files cover them).
//!
//! Rows run in order on one service; a refused row still advances time to its `now`.

use fencelock::{
    Error, Input, Label, LockName, LockService, Mode, Output, Reply, SessionId, Storage,
};
use fencelock::{Tick, Token, VecStorage, Wait, MAX_LABEL_LEN, MAX_NAME_LEN};

use crate::vectors::{input_frame, VecConfig};

/// The outcome a row expects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted, with a reply of this kind ([`Reply::kind`]).
    Ok(String),
    /// Refused with this code ([`Error::code`]).
    Err(u32),
}

impl Outcome {
    /// The outcome of a call's result. Cost: O(1).
    pub fn of(r: &Result<Reply, Error>) -> Outcome {
        match r {
            Ok(reply) => Outcome::Ok(reply.kind().to_string()),
            Err(e) => Outcome::Err(e.code()),
        }
    }
}

/// One row: the input it makes and the outcome it expects.
#[derive(Clone, Debug)]
pub struct Call {
    /// Its line number in the file (1-based).
    pub line: usize,
    /// The row text before ` -> `.
    pub text: String,
    /// The call as an input (the typed runner calls the method the input names).
    pub input: Input,
    /// What it must give.
    pub expect: Outcome,
}

/// A parsed table: its configuration and rows.
#[derive(Clone, Debug)]
pub struct Table {
    /// The service the rows run on.
    pub config: VecConfig,
    /// The rows, in order.
    pub calls: Vec<Call>,
}

const KEYS: &[(&str, &[&str])] = &[
    ("open", &["now", "ttl"]),
    ("open_labeled", &["now", "ttl", "label"]),
    ("keep_alive", &["now", "session", "request"]),
    ("close", &["now", "session", "request"]),
    (
        "acquire",
        &["now", "session", "lock", "mode", "wait", "request"],
    ),
    ("release", &["now", "session", "lock", "request"]),
    (
        "release_hold",
        &["now", "session", "lock", "token", "request"],
    ),
    ("cancel", &["now", "session", "lock", "request"]),
    ("watch", &["now", "session", "lock", "request"]),
    ("unwatch", &["now", "session", "lock", "request"]),
    ("tick", &["now"]),
];

/// Parses a `.calls` file. Cost: O(length).
///
/// Errors: a message with the line number of the first malformed line.
pub fn parse(text: &str) -> Result<Table, String> {
    let mut config = None;
    let mut calls = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let ln = n + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if config.is_none() {
            let rest = line
                .strip_prefix("config ")
                .ok_or(format!("line {ln}: the first row must be `config …`"))?;
            config = Some(VecConfig::parse(rest).map_err(|e| format!("line {ln}: {e}"))?);
            continue;
        }
        let (call, outcome) = line
            .split_once(" -> ")
            .ok_or(format!("line {ln}: no ` -> ` outcome"))?;
        let expect = match outcome.trim().split_once(' ') {
            Some(("ok", kind)) => Outcome::Ok(kind.to_string()),
            Some(("err", code)) => Outcome::Err(
                code.parse()
                    .map_err(|_| format!("line {ln}: code {code:?}"))?,
            ),
            _ => {
                return Err(format!(
                    "line {ln}: outcome {outcome:?} is not `ok KIND` or `err CODE`"
                ))
            }
        };
        let input = parse_call(call).map_err(|e| format!("line {ln}: {e}"))?;
        calls.push(Call {
            line: ln,
            text: call.trim().to_string(),
            input,
            expect,
        });
    }
    Ok(Table {
        config: config.ok_or("no config line")?,
        calls,
    })
}

fn parse_call(call: &str) -> Result<Input, String> {
    let mut words = call.split_whitespace();
    let method = words.next().ok_or("empty call")?;
    let keys = KEYS
        .iter()
        .find(|(m, _)| *m == method)
        .map(|(_, k)| *k)
        .ok_or(format!("unknown method {method:?}"))?;
    let mut values: Vec<(&str, &str)> = Vec::new();
    for kv in words {
        let (k, v) = kv
            .split_once('=')
            .ok_or(format!("{kv:?} is not key=value"))?;
        if !keys.contains(&k) {
            return Err(format!("{method} takes no key {k:?}"));
        }
        if values.iter().any(|(seen, _)| *seen == k) {
            return Err(format!("key {k:?} twice"));
        }
        values.push((k, v));
    }
    let get = |k: &str| -> Result<&str, String> {
        values
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| *v)
            .ok_or(format!("{method} needs {k}="))
    };
    let num = |k: &str| -> Result<u64, String> {
        let v = get(k)?;
        v.parse().map_err(|_| format!("{k}={v:?} is not a u64"))
    };
    let now = Tick(num("now")?);
    let session = || num("session").map(SessionId);
    let request = || -> Result<Option<u64>, String> {
        match get("request")? {
            "-" => Ok(None),
            v => v
                .parse()
                .map(Some)
                .map_err(|_| format!("request={v:?} is not - or a u64")),
        }
    };
    let lock = || -> Result<LockName, String> {
        match get("lock")? {
            "" => Ok(LockName::default()),
            v if v.len() > MAX_NAME_LEN => Err(format!(
                "lock={v:?} is over {MAX_NAME_LEN} bytes, which no frame can carry"
            )),
            v => LockName::new(v).map_err(|e| e.to_string()),
        }
    };
    Ok(match method {
        "open" => Input::OpenSession {
            now,
            ttl: num("ttl")?,
        },
        "keep_alive" => Input::KeepAlive {
            now,
            session: session()?,
            request: request()?,
        },
        "close" => Input::CloseSession {
            now,
            session: session()?,
            request: request()?,
        },
        "acquire" => Input::Acquire {
            now,
            session: session()?,
            lock: lock()?,
            mode: match get("mode")? {
                "x" => Mode::Exclusive,
                "s" => Mode::Shared,
                v => {
                    let permits = v
                        .strip_prefix("p:")
                        .and_then(|p| p.split_once('/'))
                        .and_then(|(c, l)| Some((c.parse().ok()?, l.parse().ok()?)));
                    match permits {
                        Some((count, limit)) => Mode::Permits { count, limit },
                        None => return Err(format!("mode={v:?} is not x, s or p:COUNT/LIMIT")),
                    }
                }
            },
            wait: match get("wait")? {
                "none" => Wait::None,
                "forever" => Wait::Forever,
                v => match v.strip_prefix("until:").map(str::parse::<u64>) {
                    Some(Ok(t)) => Wait::Until(Tick(t)),
                    _ => return Err(format!("wait={v:?} is not none, forever or until:N")),
                },
            },
            request: request()?,
        },
        "release" => Input::Release {
            now,
            session: session()?,
            lock: lock()?,
            request: request()?,
        },
        "release_hold" => Input::ReleaseHold {
            now,
            session: session()?,
            lock: lock()?,
            token: Token(num("token")?),
            request: request()?,
        },
        "cancel" => Input::Cancel {
            now,
            session: session()?,
            lock: lock()?,
            request: request()?,
        },
        "open_labeled" => Input::OpenLabeled {
            now,
            ttl: num("ttl")?,
            label: match get("label")? {
                v if v.len() > MAX_LABEL_LEN => {
                    return Err(format!(
                        "label={v:?} is over {MAX_LABEL_LEN} bytes, which no frame can carry"
                    ))
                }
                v => Label::new(v).map_err(|e| e.to_string())?,
            },
        },
        "watch" => Input::Watch {
            now,
            session: session()?,
            lock: lock()?,
            request: request()?,
        },
        "unwatch" => Input::Unwatch {
            now,
            session: session()?,
            lock: lock()?,
            request: request()?,
        },
        _ => Input::Tick { now },
    })
}

/// Calls the typed method `input` names (not [`LockService::handle`]). Cost: the
/// method's.
///
/// Errors: the method's.
pub fn call_typed<S: Storage>(
    svc: &mut LockService<S>,
    input: &Input,
    out: &mut Vec<Output>,
) -> Result<Reply, Error> {
    match input.clone() {
        Input::OpenSession { now, ttl } => svc.open_session(now, ttl, out),
        Input::KeepAlive {
            now,
            session,
            request,
        } => svc.keep_alive(now, session, request, out),
        Input::CloseSession {
            now,
            session,
            request,
        } => svc.close_session(now, session, request, out),
        Input::Acquire {
            now,
            session,
            lock,
            mode,
            wait,
            request,
        } => svc.acquire(now, session, lock.as_str(), mode, wait, request, out),
        Input::Release {
            now,
            session,
            lock,
            request,
        } => svc.release(now, session, lock.as_str(), request, out),
        Input::ReleaseHold {
            now,
            session,
            lock,
            token,
            request,
        } => svc.release_hold(now, session, lock.as_str(), token, request, out),
        Input::Cancel {
            now,
            session,
            lock,
            request,
        } => svc.cancel(now, session, lock.as_str(), request, out),
        Input::Tick { now } => svc.tick(now, out).map(|()| Reply::Ticked { now }),
        Input::OpenLabeled { now, ttl, label } => svc.open_labeled(now, ttl, label, out),
        Input::Watch {
            now,
            session,
            lock,
            request,
        } => svc.watch(now, session, lock.as_str(), request, out),
        Input::Unwatch {
            now,
            session,
            lock,
            request,
        } => svc.unwatch(now, session, lock.as_str(), request, out),
        other => unreachable!("no such input in a table: {other:?}"),
    }
}

/// What a table run checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Rows run (each twice: typed and as a frame).
    pub rows: usize,
    /// Rows expecting an error.
    pub errors: usize,
}

/// The native runner: every row through the typed methods on one service and through
/// `handle_frame` on another; both must give the row's outcome, the same events, and
/// the same snapshot bytes after it.
///
/// Errors: a message with the line number of the first row that differs.
/// Cost: the rows, plus two snapshots per row.
pub fn run(text: &str) -> Result<CallStats, String> {
    let table = parse(text)?;
    let mut typed: LockService<VecStorage> = table.config.service().map_err(|e| e.to_string())?;
    let mut framed = table.config.service().map_err(|e| e.to_string())?;
    let mut stats = CallStats::default();
    for c in &table.calls {
        let (mut e1, mut e2) = (Vec::new(), Vec::new());
        let a = call_typed(&mut typed, &c.input, &mut e1);
        let b = framed.handle_frame(&input_frame(&c.input), &mut e2);
        let line = c.line;
        if Outcome::of(&a) != c.expect {
            return Err(format!(
                "line {line}: `{}`: typed call gave {a:?}, the table says {:?}",
                c.text, c.expect
            ));
        }
        if a != b || e1 != e2 {
            return Err(format!(
                "line {line}: `{}`: typed {a:?} {e1:?} but frame {b:?} {e2:?}",
                c.text
            ));
        }
        if typed.snapshot_vec() != framed.snapshot_vec() {
            return Err(format!(
                "line {line}: typed and frame services differ after the row"
            ));
        }
        stats.rows += 1;
        stats.errors += matches!(c.expect, Outcome::Err(_)) as usize;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_rows_are_refused_with_their_line() {
        let bad = [
            "open now=0 ttl=1 -> ok opened",
            "config sessions=1 locks=1 claims=1 lock_delay=0 max_name_len=8\nopen now=0 -> ok opened",
            "config sessions=1 locks=1 claims=1 lock_delay=0 max_name_len=8\nopen now=0 ttl=1 ttl=2 -> ok opened",
            "config sessions=1 locks=1 claims=1 lock_delay=0 max_name_len=8\nopen now=0 ttl=1 lock=a -> ok opened",
            "config sessions=1 locks=1 claims=1 lock_delay=0 max_name_len=8\nacquire now=0 session=1 lock=a mode=q wait=none request=- -> err 101",
            "config sessions=1 locks=1 claims=1 lock_delay=0 max_name_len=8\ntick now=0 -> maybe",
            "config sessions=1 locks=1 claims=1 lock_delay=0 max_name_len=8\nacquire now=0 session=1 lock=a mode=p:1 wait=none request=- -> err 101",
            "config sessions=1 locks=1 claims=1 lock_delay=0 max_name_len=8\nopen_labeled now=0 ttl=1 -> ok opened",
            "config sessions=1 locks=1 claims=1 lock_delay=0 max_name_len=8\nwatch now=0 session=1 lock=a -> ok watching",
        ];
        for text in bad {
            assert!(parse(text).is_err(), "{text}");
        }
        let ok = parse(
            "# c\nconfig sessions=1 locks=1 claims=1 lock_delay=0 max_name_len=8\n\
             acquire now=3 session=1 lock= mode=s wait=until:9 request=4 -> err 101\n",
        )
        .unwrap();
        assert_eq!(ok.calls[0].line, 3);
        assert_eq!(ok.calls[0].expect, Outcome::Err(101));
        assert!(matches!(
            &ok.calls[0].input,
            Input::Acquire { now: Tick(3), lock, mode: Mode::Shared, wait: Wait::Until(Tick(9)), request: Some(4), .. }
                if lock.is_empty()
        ));
    }
}
