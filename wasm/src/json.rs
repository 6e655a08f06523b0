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

use fencelock::{Field, Mode, Output, Reply};
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

/// The text being built and the values to set afterwards.
#[derive(Default)]
pub struct Answer {
    text: String,
    patches: Vec<Patch>,
}

impl Answer {
    /// Appends `,"k":v`, a field of the reply (`at` None) or of an event.
    fn field(&mut self, at: Option<usize>, k: &'static str, v: Field<'_>) {
        let text = &mut self.text;
        text.push_str(",\"");
        text.push_str(k);
        text.push_str("\":");
        match v {
            Field::Number(n) if n > MAX_SAFE => {
                text.push_str("null");
                self.patches.push(Patch {
                    at,
                    key: k,
                    value: n,
                });
            }
            Field::Number(n) => text.push_str(Dec::new(n).as_str()),
            Field::Text(s) => string(text, s),
            Field::Mode(Mode::Exclusive) => text.push_str("\"exclusive\""),
            Field::Mode(Mode::Shared) => text.push_str("\"shared\""),
            Field::Mode(Mode::Permits { count, limit }) => {
                text.push_str("{\"permits\":");
                text.push_str(Dec::new(u64::from(count)).as_str());
                text.push_str(",\"limit\":");
                text.push_str(Dec::new(u64::from(limit)).as_str());
                text.push('}');
            }
        }
    }

    /// Appends `{"kind":kind` (the fields and the closing brace follow).
    fn open(&mut self, kind: &str) {
        self.text.push_str("{\"kind\":\"");
        self.text.push_str(kind);
        self.text.push('"');
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

    /// The reply as an object: its kind, then its fields as the core names them
    /// ([`Reply::fields`], the one spelling every binding and recording uses).
    fn reply(&mut self, r: &Reply) {
        self.open(r.kind());
        r.fields(|k, v| self.field(None, k, v));
        self.text.push('}');
    }

    /// The `i`-th event as an object ([`Output::fields`]).
    fn event(&mut self, i: usize, o: &Output) {
        self.open(o.kind());
        o.fields(|k, v| self.field(Some(i), k, v));
        self.text.push('}');
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
        }
    }
}
