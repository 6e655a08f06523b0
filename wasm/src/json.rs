//! A call's answer — `{reply, events}` — as one JSON text, parsed by one `JSON.parse` into
//! the tagged objects of the `.d.ts`: one crossing into JS per call instead of one per
//! property (in node an acquire/release loop runs about 1.5 times faster than building
//! the objects property by property).
//!
//! The conversion cannot fail on the values: a number up to 2^53 - 1 is written as a JSON
//! number; a larger one (it can only come from counters or deadlines that frames or a
//! snapshot put past 2^53, or from `now + ttl`) is written as `null` and set afterwards
//! as an exact `bigint` — never a rounded number, never an error after the core applied
//! the input.

use alloc::string::String;
use alloc::vec::Vec;

use fencelock::{Mode, Output, Reply, MAX_FRAME_LEN};
use js_sys::Reflect;
use wasm_bindgen::prelude::*;

use crate::js::{self, Dec, MAX_SAFE};

/// Where a value too large for a JS number goes once the text is parsed.
#[derive(Debug, PartialEq)]
struct Patch {
    /// `None`: the reply; `Some(i)`: the i-th event.
    at: Option<usize>,
    key: &'static str,
    value: u64,
}

/// One field value.
enum V<'a> {
    /// A `u64`.
    N(u64),
    /// A string (escaped).
    S(&'a str),
    /// Bytes, as an array of numbers (the frame of a variant this binding does not know).
    B(&'a [u8]),
    /// A mode: `"exclusive"`, `"shared"` or `{"permits":count,"limit":limit}`.
    M(Mode),
}

/// The text being built and the values to set afterwards.
#[derive(Default)]
pub struct Answer {
    text: String,
    patches: Vec<Patch>,
}

impl Answer {
    /// Appends `{"kind":kind,"k":v,…}` for the reply (`at` None) or an event.
    fn obj(&mut self, at: Option<usize>, kind: &str, fields: &[(&'static str, V<'_>)]) {
        let out = &mut self.text;
        out.push_str("{\"kind\":\"");
        out.push_str(kind);
        out.push('"');
        for (k, v) in fields {
            out.push_str(",\"");
            out.push_str(k);
            out.push_str("\":");
            match v {
                V::N(n) if *n > MAX_SAFE => {
                    out.push_str("null");
                    self.patches.push(Patch {
                        at,
                        key: k,
                        value: *n,
                    });
                }
                V::N(n) => {
                    out.push_str(Dec::new(*n).as_str());
                }
                V::S(s) => string(out, s),
                V::M(Mode::Exclusive) => out.push_str("\"exclusive\""),
                V::M(Mode::Shared) => out.push_str("\"shared\""),
                V::M(Mode::Permits { count, limit }) => {
                    out.push_str("{\"permits\":");
                    out.push_str(Dec::new(u64::from(*count)).as_str());
                    out.push_str(",\"limit\":");
                    out.push_str(Dec::new(u64::from(*limit)).as_str());
                    out.push('}');
                }
                V::B(bytes) => {
                    out.push('[');
                    for (i, b) in bytes.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(Dec::new(u64::from(*b)).as_str());
                    }
                    out.push(']');
                }
            }
        }
        out.push('}');
    }

    /// The text of `{"reply": …, "events": […]}` (for tests and `parse`).
    pub fn build(reply: &Reply, events: &[Output]) -> Answer {
        let mut a = Answer::default();
        a.text.push_str("{\"reply\":");
        a.reply(reply);
        a.text.push_str(",\"events\":[");
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                a.text.push(',');
            }
            a.event(i, e);
        }
        a.text.push_str("]}");
        a
    }

    /// The events alone, as the text of an array (the `.events` of a refused input).
    pub fn build_events(events: &[Output]) -> Answer {
        let mut a = Answer::default();
        a.text.push('[');
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                a.text.push(',');
            }
            a.event(i, e);
        }
        a.text.push(']');
        a
    }

    fn reply(&mut self, r: &Reply) {
        use V::{M, N};
        match *r {
            Reply::Opened {
                session,
                expires_at,
            } => self.obj(
                None,
                r.kind(),
                &[("session", N(session.0)), ("expiresAt", N(expires_at.0))],
            ),
            Reply::KeptAlive { expires_at } => {
                self.obj(None, r.kind(), &[("expiresAt", N(expires_at.0))])
            }
            Reply::Granted { mode: m, token } => {
                self.obj(None, r.kind(), &[("mode", M(m)), ("token", N(token.0))])
            }
            Reply::Queued { mode: m, position } => self.obj(
                None,
                r.kind(),
                &[("mode", M(m)), ("position", N(u64::from(position)))],
            ),
            Reply::Watching { holders } => {
                self.obj(None, r.kind(), &[("holders", N(u64::from(holders)))])
            }
            Reply::Released { token } | Reply::HoldEnded { token } => {
                self.obj(None, r.kind(), &[("token", N(token.0))])
            }
            Reply::Ticked { now } => self.obj(None, r.kind(), &[("now", N(now.0))]),
            Reply::Closed
            | Reply::Busy
            | Reply::Cancelled
            | Reply::WaitEnded
            | Reply::Unwatched => self.obj(None, r.kind(), &[]),
            // `Reply` is non-exhaustive: a variant added to the core later still crosses,
            // with its kind and the bytes of its frame, rather than being dropped.
            _ => {
                let mut buf = [0u8; MAX_FRAME_LEN];
                let n = r.to_frame(&mut buf).unwrap_or(0);
                let frame = buf.get(..n).unwrap_or(&[]);
                self.obj(None, r.kind(), &[("frame", V::B(frame))])
            }
        }
    }

    fn event(&mut self, i: usize, o: &Output) {
        use V::{M, N, S};
        let at = Some(i);
        match o {
            Output::Granted {
                session,
                lock,
                mode,
                token,
            } => self.obj(
                at,
                o.kind(),
                &[
                    ("session", N(session.0)),
                    ("lock", S(lock.as_str())),
                    ("mode", M(*mode)),
                    ("token", N(token.0)),
                ],
            ),
            Output::Released {
                session,
                lock,
                token,
                reason,
            } => self.obj(
                at,
                o.kind(),
                &[
                    ("session", N(session.0)),
                    ("lock", S(lock.as_str())),
                    ("token", N(token.0)),
                    ("reason", S(js::reason(*reason))),
                ],
            ),
            Output::SessionExpired { session } => {
                self.obj(at, o.kind(), &[("session", N(session.0))])
            }
            Output::WaitTimedOut { session, lock } => self.obj(
                at,
                o.kind(),
                &[("session", N(session.0)), ("lock", S(lock.as_str()))],
            ),
            Output::HolderChanged {
                session,
                lock,
                holder,
                mode,
                token,
                change,
                label,
            } => self.obj(
                at,
                o.kind(),
                &[
                    ("session", N(session.0)),
                    ("lock", S(lock.as_str())),
                    ("holder", N(holder.0)),
                    ("mode", M(*mode)),
                    ("token", N(token.0)),
                    ("change", S(change.kind())),
                    ("label", S(label.as_str())),
                ],
            ),
            // `Output` is non-exhaustive: as for replies, a later variant crosses with its
            // kind, its session and its frame.
            other => {
                let mut buf = [0u8; MAX_FRAME_LEN];
                let n = other.to_frame(&mut buf).unwrap_or(0);
                let frame = buf.get(..n).unwrap_or(&[]);
                self.obj(
                    at,
                    other.kind(),
                    &[("session", N(other.session().0)), ("frame", V::B(frame))],
                )
            }
        }
    }

    /// Parses the text and sets the values too large for a JS number as `bigint`s.
    ///
    /// Errors: only an exhausted JS heap makes `JSON.parse` fail on this text (its
    /// exception is returned).
    pub fn parse(self, events_key: bool) -> Result<JsValue, JsValue> {
        let v = js_sys::JSON::parse(&self.text)?;
        for p in self.patches {
            let events = if events_key {
                Reflect::get(&v, &JsValue::from_str("events"))?
            } else {
                v.clone()
            };
            let target = match p.at {
                None => Reflect::get(&v, &JsValue::from_str("reply"))?,
                Some(i) => Reflect::get_u32(&events, u32::try_from(i).unwrap_or(u32::MAX))?,
            };
            Reflect::set(&target, &JsValue::from_str(p.key), &js::number(p.value))?;
        }
        Ok(v)
    }

    /// The text (tests).
    #[cfg(test)]
    fn text(&self) -> &str {
        &self.text
    }
}

/// Appends `s` as a JSON string.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                for nibble in [(c as u32) >> 4, (c as u32) & 0xf] {
                    out.push(char::from(
                        HEX.get(nibble as usize).copied().unwrap_or(b'0'),
                    ));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencelock::{LockName, Mode, ReleaseReason, SessionId, Tick, Token};

    #[test]
    fn answers_are_json_with_kinds_escaped_names_and_exact_numbers() {
        let granted = Output::Granted {
            session: SessionId(7),
            lock: LockName::new("a\"b\\c\u{1}é").expect("a valid name"),
            mode: Mode::Shared,
            token: Token(MAX_SAFE),
        };
        let expired = Output::SessionExpired {
            session: SessionId(2),
        };
        let a = Answer::build(
            &Reply::Released { token: Token(3) },
            &[granted.clone(), expired],
        );
        assert_eq!(
            a.text(),
            r#"{"reply":{"kind":"released","token":3},"events":[{"kind":"granted","session":7,"lock":"a\"b\\c\u0001é","mode":"shared","token":9007199254740991},{"kind":"session_expired","session":2}]}"#
        );
        assert!(a.patches.is_empty());
        let a = Answer::build(&Reply::Busy, &[]);
        assert_eq!(a.text(), r#"{"reply":{"kind":"busy"},"events":[]}"#);
    }

    #[test]
    fn permits_modes_and_holder_changes_are_spelled_as_the_brief_says() {
        use fencelock::{Change, Label};
        let changed = Output::HolderChanged {
            session: SessionId(4),
            lock: LockName::new("pool").expect("a valid name"),
            holder: SessionId(1),
            mode: Mode::Permits { count: 2, limit: 3 },
            token: Token(7),
            change: Change::Released,
            label: Label::new("host \"a\"").expect("a valid label"),
        };
        let a = Answer::build(
            &Reply::Queued {
                mode: Mode::Permits { count: 1, limit: 3 },
                position: 2,
            },
            &[changed],
        );
        assert_eq!(
            a.text(),
            r#"{"reply":{"kind":"queued","mode":{"permits":1,"limit":3},"position":2},"events":[{"kind":"holder_changed","session":4,"lock":"pool","holder":1,"mode":{"permits":2,"limit":3},"token":7,"change":"released","label":"host \"a\""}]}"#
        );
        let a = Answer::build(&Reply::Watching { holders: 3 }, &[]);
        assert_eq!(
            a.text(),
            r#"{"reply":{"kind":"watching","holders":3},"events":[]}"#
        );
    }

    #[test]
    fn numbers_past_2_pow_53_become_patches_not_errors() {
        let released = Output::Released {
            session: SessionId(MAX_SAFE + 1),
            lock: LockName::new("l").expect("a valid name"),
            token: Token(u64::MAX),
            reason: ReleaseReason::Expired,
        };
        let a = Answer::build(
            &Reply::KeptAlive {
                expires_at: Tick(MAX_SAFE + 5),
            },
            &[released],
        );
        assert_eq!(
            a.text(),
            r#"{"reply":{"kind":"kept_alive","expiresAt":null},"events":[{"kind":"released","session":null,"lock":"l","token":null,"reason":"expired"}]}"#
        );
        assert_eq!(
            a.patches,
            [
                Patch {
                    at: None,
                    key: "expiresAt",
                    value: MAX_SAFE + 5
                },
                Patch {
                    at: Some(0),
                    key: "session",
                    value: MAX_SAFE + 1
                },
                Patch {
                    at: Some(0),
                    key: "token",
                    value: u64::MAX
                },
            ]
        );
    }

    #[test]
    fn every_reply_kind_is_the_cores() {
        use fencelock::Reply::*;
        let t = Token(1);
        for r in [
            Opened {
                session: SessionId(1),
                expires_at: Tick(2),
            },
            KeptAlive {
                expires_at: Tick(2),
            },
            Closed,
            Granted {
                mode: Mode::Exclusive,
                token: t,
            },
            Queued {
                mode: Mode::Exclusive,
                position: 1,
            },
            Busy,
            Released { token: t },
            Cancelled,
            HoldEnded { token: t },
            WaitEnded,
            Ticked { now: Tick(1) },
            Granted {
                mode: Mode::Permits { count: 2, limit: 3 },
                token: t,
            },
            Watching { holders: 2 },
            Unwatched,
        ] {
            let a = Answer::build(&r, &[]);
            let want = alloc::format!("{{\"reply\":{{\"kind\":\"{}\"", r.kind());
            assert!(a.text().starts_with(&want), "{}", a.text());
            assert!(!a.text().contains("frame"), "{r:?} has no field encoding");
        }
    }
}
