//! Outputs as JSON text, parsed by `JSON.parse` into the tagged objects of the `.d.ts`.
//! Numbers are written only when they are safe integers (else `out_of_range`), so the
//! parse is exact.

use alloc::format;
use alloc::string::String;
use core::fmt::Write as _;

use fencelock::{Output, MAX_FRAME_LEN};

use crate::js::{self, Fail, MAX_SAFE};

/// One field value.
enum V<'a> {
    /// A `u64` that must be a safe integer.
    N(u64, &'static str),
    /// A string (escaped).
    S(&'a str),
}

/// Appends `{"type":ty,"k":v,…}`.
fn obj(out: &mut String, ty: &str, fields: &[(&str, V<'_>)]) -> Result<(), Fail> {
    out.push_str("{\"type\":\"");
    out.push_str(ty);
    out.push('"');
    for (k, v) in fields {
        out.push_str(",\"");
        out.push_str(k);
        out.push_str("\":");
        match v {
            V::N(n, what) => {
                if *n > MAX_SAFE {
                    return Err(Fail::OutOfRange(format!(
                        "{what} is {n}, above 2^53-1: a JS number cannot hold it exactly"
                    )));
                }
                let _ = write!(out, "{n}");
            }
            V::S(s) => string(out, s),
        }
    }
    out.push('}');
    Ok(())
}

/// Appends `s` as a JSON string.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends one output as a tagged object (see the `Output` type in the `.d.ts`).
pub fn output(out: &mut String, o: &Output) -> Result<(), Fail> {
    use V::{N, S};
    let session = |s: &fencelock::SessionId| ("session", N(s.0, "session id"));
    match o {
        Output::SessionOpened {
            session: s,
            expires_at,
        } => obj(
            out,
            "sessionOpened",
            &[session(s), ("expiresAt", N(expires_at.0, "expiresAt"))],
        ),
        Output::SessionRenewed {
            session: s,
            expires_at,
        } => obj(
            out,
            "sessionRenewed",
            &[session(s), ("expiresAt", N(expires_at.0, "expiresAt"))],
        ),
        Output::SessionClosed { session: s } => obj(out, "sessionClosed", &[session(s)]),
        Output::SessionExpired { session: s } => obj(out, "sessionExpired", &[session(s)]),
        Output::Granted {
            session: s,
            lock,
            mode,
            token,
        } => obj(
            out,
            "granted",
            &[
                session(s),
                ("lock", S(lock.as_str())),
                ("mode", S(js::mode(*mode))),
                ("token", N(token.0, "token")),
            ],
        ),
        Output::Queued {
            session: s,
            lock,
            mode,
            position,
        } => obj(
            out,
            "queued",
            &[
                session(s),
                ("lock", S(lock.as_str())),
                ("mode", S(js::mode(*mode))),
                ("position", N(u64::from(*position), "position")),
            ],
        ),
        Output::Busy { session: s, lock } => {
            obj(out, "busy", &[session(s), ("lock", S(lock.as_str()))])
        }
        Output::Released {
            session: s,
            lock,
            token,
            reason,
        } => obj(
            out,
            "released",
            &[
                session(s),
                ("lock", S(lock.as_str())),
                ("token", N(token.0, "token")),
                ("reason", S(js::reason(*reason))),
            ],
        ),
        Output::WaitTimedOut { session: s, lock } => obj(
            out,
            "waitTimedOut",
            &[session(s), ("lock", S(lock.as_str()))],
        ),
        Output::WaitCancelled { session: s, lock } => obj(
            out,
            "waitCancelled",
            &[session(s), ("lock", S(lock.as_str()))],
        ),
        // `Output` is non-exhaustive: a variant added to core later still crosses, as
        // the bytes of its frame, rather than being dropped.
        other => {
            let mut buf = [0u8; MAX_FRAME_LEN];
            let n = other.to_frame(&mut buf)?;
            out.push_str("{\"type\":\"unknown\",\"frame\":[");
            for (i, b) in buf.iter().take(n).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{b}");
            }
            out.push_str("]}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencelock::{LockName, Mode, SessionId, Token};

    #[test]
    fn outputs_are_json_with_escaped_names_and_exact_numbers() {
        let mut s = String::new();
        let granted = Output::Granted {
            session: SessionId(7),
            lock: LockName::new("a\"b\\c\u{1}é").expect("a valid name"),
            mode: Mode::Shared,
            token: Token(MAX_SAFE),
        };
        output(&mut s, &granted).expect("safe numbers");
        assert_eq!(
            s,
            r#"{"type":"granted","session":7,"lock":"a\"b\\c\u0001é","mode":"shared","token":9007199254740991}"#
        );
        let too_big = Output::SessionExpired {
            session: SessionId(MAX_SAFE + 1),
        };
        assert!(matches!(
            output(&mut String::new(), &too_big),
            Err(Fail::OutOfRange(_))
        ));
    }
}
