//! Crossing the boundary: JS values in (validated, never trusted), JS values out, and the
//! errors thrown. Nothing here knows a lock rule; it only translates.

use alloc::string::String;
use alloc::vec::Vec;

use fencelock::{Error, Label, Mode, Piece, SessionId, Tick, Token, Wait};
use js_sys::{Object, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

// The few JS operations on caller values that can throw (a revoked Proxy, a detached
// buffer) are imported with `catch`: an exception that unwound through this module
// would leave the handle's borrow flag set and the handle unusable.
#[wasm_bindgen]
extern "C" {
    /// `Array.isArray(v)`; throws for a revoked Proxy.
    #[wasm_bindgen(js_namespace = Array, js_name = isArray, catch)]
    fn array_is_array(v: &JsValue) -> Result<bool, JsValue>;

    /// The global `Uint8Array`, bound a second time for a constructor that may throw.
    #[wasm_bindgen(js_name = Uint8Array)]
    type PlainCopy;

    /// `a.length` as a number: js-sys's `length()` is a `u32`, which a `Uint8Array` of
    /// 2^32 elements or more (which V8 makes) would wrap past every size check. Read
    /// only on a [`plain_bytes`] copy, whose getter is `%TypedArray%.prototype`'s, never
    /// a subclass's or the object's own (a built-in replaced by the page is outside what
    /// the binding defends: see its README).
    #[wasm_bindgen(method, getter, js_name = length)]
    fn length_f64(this: &PlainCopy) -> f64;

    /// `new Uint8Array(src)`: a plain copy made from `src`'s internal slots, so a
    /// subclass's overridden `length` getter is never consulted; throws if detached.
    #[wasm_bindgen(constructor, js_class = "Uint8Array", catch)]
    fn new(src: &Uint8Array) -> Result<PlainCopy, JsValue>;

    /// The options object of an acquire, read property by property: one crossing each
    /// (a `Reflect.get` with a key made from Rust costs three); a throwing getter, a
    /// revoked `Proxy` or a receiver that is not an object throws, and is caught.
    type AcquireOptions;

    #[wasm_bindgen(method, getter, structural, catch)]
    fn mode(this: &AcquireOptions) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(method, getter, structural, catch)]
    fn wait(this: &AcquireOptions) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(method, getter, structural, catch)]
    fn request(this: &AcquireOptions) -> Result<JsValue, JsValue>;
}

fn plain_uint8_array(src: &Uint8Array) -> Result<Uint8Array, JsValue> {
    PlainCopy::new(src).map(JsCast::unchecked_into)
}

/// True for a plain object (not null, not an array, not a function).
fn is_plain_object(v: &JsValue) -> bool {
    v.is_object() && matches!(array_is_array(v), Ok(false))
}

pub use fencelock_wasm_args::{
    safe_u64, ArgError, ERRNO_BAD_ARGUMENT, ERRNO_OUT_OF_MEMORY, ERRNO_OUT_OF_RANGE,
    ERRNO_UNKNOWN_NAME, MAX_SAFE, STRING_COPY_LIMIT, TOO_LONG,
};

/// Why a call was refused. Core errors pass through unchanged; the binding adds four
/// kinds of its own for what only a JS caller can get wrong (see `ERRNO_*`).
#[derive(Debug, Clone, PartialEq)]
pub enum Fail {
    /// The core refused the input (nothing changed).
    Core(Error),
    /// A number that is not a safe non-negative integer, or a value that would not fit
    /// one. Thrown as a `RangeError`.
    OutOfRange(String),
    /// A value of the wrong type or shape (a name that is not a string, an unknown mode…).
    /// Thrown as a `TypeError`.
    BadArgument(String),
    /// An object argument with a key the call does not know (a typo such as `lockdelay`
    /// must not be ignored): `key`, then the message. Thrown as a `TypeError` with code
    /// `bad_argument` and the key as `.key` (the caller's string itself, never copied
    /// into wasm memory whole: a key may be any length).
    UnknownKey(js_sys::JsString, String),
    /// The tables could not be allocated. Thrown as an `Error`.
    OutOfMemory(String),
    /// A name id that no `internName` gave, or one forgotten since (`.nameId`). Thrown
    /// as an `Error`.
    UnknownName(u64),
    /// `internName` with every row of the names table in use: `capacity_exceeded` with
    /// `.table` `"names"` (the binding's table; the core's kind and errno).
    NamesFull,
}

// ------------------------------------------------------------------------- text without fmt

// No `format!`, `to_string` or `write!` in this crate: `core::fmt` would pull the
// formatting machinery (padding, every integer width, `Display` of the core's types) into
// the module, which is measured in kilobytes. Messages are joined from texts and decimal
// numbers instead.

/// `parts` joined. Cost: O(total length), one allocation.
pub fn cat(parts: &[&str]) -> String {
    let mut out = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        out.push_str(p);
    }
    out
}

/// A `u64` in decimal, on the stack. Cost: O(digits).
pub struct Dec {
    buf: [u8; 20],
    start: usize,
}

impl Dec {
    /// The digits of `n`.
    pub fn new(mut n: u64) -> Dec {
        let mut d = Dec {
            buf: [b'0'; 20],
            start: 20,
        };
        loop {
            d.start -= 1;
            if let Some(b) = d.buf.get_mut(d.start) {
                *b = b'0' + (n % 10) as u8;
            }
            n /= 10;
            if n == 0 || d.start == 0 {
                return d;
            }
        }
    }

    /// The digits as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII digits are written, so the conversion cannot fail.
        core::str::from_utf8(self.buf.get(self.start..).unwrap_or(&[])).unwrap_or("0")
    }
}

/// The core's message for `e` (the same words as its `Display`, from `Error::message`).
fn core_message(e: &Error) -> String {
    let mut out = String::new();
    for piece in e.message() {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Number(n) => out.push_str(Dec::new(n).as_str()),
        }
    }
    out
}

/// A core error of the kind a full names table shares: only its `kind()` and `code()`
/// are used (the table, `"names"`, is the binding's own, which the core does not know).
const NAMES_FULL: Error = Error::CapacityExceeded(fencelock::Table::Locks);

/// Every `.code` a call can throw, with its `.errno`: the core's kinds, one per variant
/// (`fencelock::Error::EXAMPLES`, the core's one list), then the binding's own four.
pub fn error_kinds() -> impl Iterator<Item = (&'static str, u32)> {
    let binding = [
        Fail::OutOfRange(String::new()),
        Fail::BadArgument(String::new()),
        Fail::OutOfMemory(String::new()),
        Fail::UnknownName(0),
    ];
    Error::EXAMPLES
        .iter()
        .map(|e| (e.kind(), e.code()))
        .chain(binding.into_iter().map(|f| (f.code(), f.errno())))
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Core(e)
    }
}

impl Fail {
    /// The `.code` string.
    pub fn code(&self) -> &'static str {
        match self {
            Fail::Core(e) => e.kind(),
            Fail::OutOfRange(_) => ArgError::OutOfRange.kind(),
            Fail::BadArgument(_) | Fail::UnknownKey(..) => ArgError::BadArgument.kind(),
            Fail::OutOfMemory(_) => ArgError::OutOfMemory.kind(),
            Fail::UnknownName(_) => "unknown_name",
            Fail::NamesFull => NAMES_FULL.kind(),
        }
    }

    /// The `.errno` number.
    pub fn errno(&self) -> u32 {
        match self {
            Fail::Core(e) => e.code(),
            Fail::OutOfRange(_) => ERRNO_OUT_OF_RANGE,
            Fail::BadArgument(_) | Fail::UnknownKey(..) => ERRNO_BAD_ARGUMENT,
            Fail::OutOfMemory(_) => ERRNO_OUT_OF_MEMORY,
            Fail::UnknownName(_) => ERRNO_UNKNOWN_NAME,
            Fail::NamesFull => NAMES_FULL.code(),
        }
    }

    /// The `.message`: core's `Display` text, or the binding's own.
    pub fn message(&self) -> String {
        match self {
            Fail::Core(e) => core_message(e),
            Fail::OutOfRange(m) => cat(&["out of range: ", m]),
            Fail::BadArgument(m) | Fail::UnknownKey(_, m) => cat(&["bad argument: ", m]),
            Fail::OutOfMemory(m) => cat(&["out of memory: ", m]),
            Fail::UnknownName(id) => cat(&[
                "unknown name id ",
                Dec::new(*id).as_str(),
                " (not given by internName, or forgotten)",
            ]),
            Fail::NamesFull => String::from("capacity exceeded: the names table is full"),
        }
    }
}

fn set(obj: &JsValue, key: &str, value: &JsValue) {
    // Defining a property on a fresh plain object or Error cannot fail.
    let _ = Reflect::set(obj, &JsValue::from_str(key), value);
}

impl From<Fail> for JsValue {
    /// The thrown value: a `RangeError`, `TypeError` or `Error` with `.code` and `.errno`,
    /// plus the details a caller acts on (`.token`/`.highest` for `stale`, …).
    fn from(f: Fail) -> JsValue {
        let msg = f.message();
        let err: JsValue = match f {
            Fail::OutOfRange(_) => js_sys::RangeError::new(&msg).into(),
            Fail::BadArgument(_) | Fail::UnknownKey(..) => js_sys::TypeError::new(&msg).into(),
            _ => js_sys::Error::new(&msg).into(),
        };
        set(&err, "code", &JsValue::from_str(f.code()));
        set(&err, "errno", &JsValue::from_f64(f64::from(f.errno())));
        let detail = |k: &str, v: u64| set(&err, k, &number(v));
        match &f {
            Fail::UnknownKey(key, _) => set(&err, "key", key),
            Fail::UnknownName(id) => detail("nameId", *id),
            Fail::NamesFull => set(&err, "table", &JsValue::from_str("names")),
            _ => {}
        }
        if let Fail::Core(e) = f {
            match e {
                Error::Stale { token, highest } => {
                    detail("token", token.0);
                    detail("highest", highest.0);
                }
                Error::UnknownSession(s)
                | Error::NotHolder(s)
                | Error::NotQueued(s)
                | Error::AlreadyQueued(s) => detail("session", s.0),
                Error::TimeWentBackwards { now, requested } => {
                    detail("now", now.0);
                    detail("requested", requested.0);
                }
                Error::StaleRequest { request, latest } => {
                    detail("request", request);
                    detail("latest", latest);
                }
                Error::RequestReused { request } => detail("request", request),
                Error::NameTooLong { len, max } => {
                    detail("len", u64::from(len));
                    detail("max", u64::from(max));
                }
                Error::BufferTooSmall { need } => detail("need", u64::from(need)),
                Error::UnknownKeepAlive { sent_at } => detail("sentAt", sent_at),
                Error::CapacityExceeded(t) => set(&err, "table", &JsValue::from_str(t.name())),
                Error::ModeMismatch { held } => set(&err, "held", &mode(held)),
                Error::NotWatching(s) | Error::AlreadyWatching(s) => detail("session", s.0),
                Error::LimitMismatch { limit } => detail("limit", u64::from(limit)),
                Error::BadPermits { count, limit } => {
                    detail("count", u64::from(count));
                    detail("limit", u64::from(limit));
                }
                Error::LabelTooLong { len, max } => {
                    detail("len", u64::from(len));
                    detail("max", u64::from(max));
                }
                _ => {}
            }
        }
        err
    }
}

// ------------------------------------------------------------------------- numbers in

/// A required `u64` argument named `what`: a safe non-negative integer number
/// (`Number.isSafeInteger(x) && x >= 0`), or a `bigint` in `0..=2^64-1`. Anything else —
/// a number that is negative, fractional, not finite or at least 2^53 (it may already
/// be rounded), a bigint out of range, another type — is `out_of_range`: it cannot stand
/// for a `u64` exactly, so no core call could be made with it.
pub fn num(v: &JsValue, what: &str) -> Result<u64, Fail> {
    let exact = match v.as_f64() {
        Some(x) => safe_u64(x),
        None if v.is_bigint() => u64::try_from(v.clone()).ok(),
        None => None,
    };
    exact.ok_or_else(|| {
        Fail::OutOfRange(cat(&[
            what,
            " must be a safe non-negative integer (0..=2^53-1) or a bigint in 0..=2^64-1, got ",
            &describe(v),
        ]))
    })
}

/// An optional number: `undefined` and `null` are `None`.
pub fn opt_num(v: &JsValue, what: &str) -> Result<Option<u64>, Fail> {
    if v.is_undefined() || v.is_null() {
        Ok(None)
    } else {
        num(v, what).map(Some)
    }
}

/// A number that must also fit a `u32`.
pub fn num_u32(v: &JsValue, what: &str) -> Result<u32, Fail> {
    let n = num(v, what)?;
    u32::try_from(n).map_err(|_| Fail::OutOfRange(cat(&[what, " must be at most 2^32-1"])))
}

/// A short, safe description of a value for messages (never its full contents).
fn describe(v: &JsValue) -> String {
    if v.as_f64().is_some() {
        // JS formats the number (Rust's float formatting would add kilobytes to the module).
        match v.unchecked_ref::<js_sys::Number>().to_string_with_radix(10) {
            Ok(s) => String::from(s),
            Err(_) => "a number".into(),
        }
    } else if v.is_undefined() {
        "undefined".into()
    } else if v.is_null() {
        "null".into()
    } else if v.is_string() {
        "a string".into()
    } else if v.is_bigint() {
        "a bigint".into()
    } else {
        cat(&[
            "a value of type ",
            &v.js_typeof().as_string().unwrap_or_default(),
        ])
    }
}

// ------------------------------------------------------------------------- other values in

/// A name argument (lock, election, resource) as the core is to see it.
pub enum Name {
    /// The string itself.
    Text(String),
    /// A string of this many UTF-16 units, over [`STRING_COPY_LIMIT`]: not copied.
    TooLong(u32),
}

impl Name {
    /// The text handed to the core ([`TOO_LONG`] for a string not copied).
    pub fn as_str(&self) -> &str {
        match self {
            Name::Text(s) => s,
            Name::TooLong(_) => TOO_LONG,
        }
    }

    /// The core's error, with the true length (in UTF-16 units, a lower bound of the UTF-8
    /// length) in a `NameTooLong` caused by the stand-in of a string not copied.
    pub fn error(&self, e: Error) -> Error {
        match (self, e) {
            (Name::TooLong(units), Error::NameTooLong { max, .. }) => {
                Error::NameTooLong { len: *units, max }
            }
            (_, e) => e,
        }
    }
}

/// A name argument (a lock, election or resource name). Only what cannot be a Rust
/// string is refused here, as `bad_argument`: a value that is not a string, or a string
/// holding a lone surrogate (it has no UTF-8 form and would silently become U+FFFD).
/// Whether the name is empty or too long is the core's to say, in its own order.
pub fn name(v: &JsValue, what: &str) -> Result<Name, Fail> {
    let Some(js) = v.dyn_ref::<js_sys::JsString>() else {
        return Err(Fail::BadArgument(cat(&[
            what,
            " must be a string, got ",
            &describe(v),
        ])));
    };
    let lone = || Fail::BadArgument(cat(&[what, " holds a lone surrogate (not valid UTF-16)"]));
    let units = js.length();
    if units > STRING_COPY_LIMIT {
        // Not copied, but checked all the same (a unit at a time, on this rare path): a
        // lone surrogate is `bad_argument` at any length, before the core is called, as
        // the C ABI's `INVALID_UTF8` is.
        if !js.is_valid_utf16() {
            return Err(lone());
        }
        return Ok(Name::TooLong(units));
    }
    let text = String::from(js);
    // A lone surrogate comes out as U+FFFD; only then is the (per-unit) check worth it.
    // An ASCII name (the usual one) is told apart a word at a time, without decoding.
    if !text.is_ascii() && text.chars().any(|c| c == '\u{FFFD}') && !js.is_valid_utf16() {
        return Err(lone());
    }
    Ok(Name::Text(text))
}

/// `"exclusive"`, `"shared"` or `{permits: count, limit}` (two numbers up to 2^32-1;
/// whether `1 <= count <= limit` is the core's to say, as `bad_permits`).
pub fn parse_mode(v: &JsValue) -> Result<Mode, Fail> {
    match keyword(v).as_deref() {
        Some("exclusive") => return Ok(Mode::Exclusive),
        Some("shared") => return Ok(Mode::Shared),
        _ => {}
    }
    if is_plain_object(v) {
        known_keys(v, "mode", &["permits", "limit"])?;
        let count = num_u32(&get(v, "permits")?, "mode.permits")?;
        let limit = num_u32(&get(v, "limit")?, "mode.limit")?;
        return Ok(Mode::Permits { count, limit });
    }
    Err(Fail::BadArgument(cat(&[
        "mode must be \"exclusive\", \"shared\" or {permits, limit}, got ",
        &describe(v),
    ])))
}

/// A label argument: a string (as [`name`]: a lone surrogate is `bad_argument`) that the
/// core turns into a [`Label`] (`label_too_long` past 64 bytes, with the string's true
/// length for one too long to copy in).
pub fn label(v: &JsValue) -> Result<Label, Fail> {
    let n = name(v, "label")?;
    Label::new(n.as_str()).map_err(|e| match (&n, e) {
        (Name::TooLong(units), Error::LabelTooLong { max, .. }) => {
            Fail::Core(Error::LabelTooLong { len: *units, max })
        }
        (_, e) => Fail::Core(e),
    })
}

/// Refuses an object whose own string keys are not all in `known`: `bad_argument` naming
/// the first unknown one (`.key`), so a misspelt option (`lockdelay`) is an error rather
/// than a default silently used. Symbol keys are ignored; a `Proxy` whose `ownKeys` trap
/// throws is `bad_argument`. A key longer than [`KEYWORD_LIMIT`] is unknown without being
/// copied in (its message gives its length instead of its text): a key can be as long as
/// a JS string, and copying one of a gigabyte three times would exhaust the module's
/// memory. Call it only on objects. Cost: O(keys × known), plus the keys' lengths up to
/// the limit.
pub fn known_keys(v: &JsValue, what: &str, known: &[&str]) -> Result<(), Fail> {
    let keys = Reflect::own_keys(v)
        .map_err(|_| Fail::BadArgument(cat(&["reading the keys of ", what, " threw"])))?;
    for key in keys.iter() {
        let Some(js) = key.dyn_ref::<js_sys::JsString>() else {
            continue; // a symbol
        };
        let text = keyword(js);
        if text.as_deref().is_some_and(|k| known.contains(&k)) {
            continue;
        }
        let mut msg = match &text {
            Some(k) => cat(&[what, " has an unknown key \"", k, "\" (known: "]),
            None => cat(&[
                what,
                " has an unknown key of ",
                Dec::new(u64::from(js.length())).as_str(),
                " UTF-16 units (known: ",
            ]),
        };
        for (i, k) in known.iter().enumerate() {
            if i > 0 {
                msg.push_str(", ");
            }
            msg.push_str(k);
        }
        msg.push(')');
        return Err(Fail::UnknownKey(js.clone(), msg));
    }
    Ok(())
}

/// The longest key or keyword (`"exclusive"`, `"open_labeled"`…) a string is compared
/// with is far shorter than this; a longer string is none of them and is not copied.
pub const KEYWORD_LIMIT: u32 = 64;

/// `v`'s text when it is a string of at most [`KEYWORD_LIMIT`] UTF-16 units (a key, a
/// mode, a wait, an input's kind); `None` for a longer string or another value: every
/// keyword is short, so nothing longer needs copying into wasm memory to be refused.
/// Cost: O(length), at most the limit.
pub fn keyword(v: &JsValue) -> Option<String> {
    let js = v.dyn_ref::<js_sys::JsString>()?;
    (js.length() <= KEYWORD_LIMIT).then(|| String::from(js))
}

/// The keys of an acquire's options.
pub const ACQUIRE_KEYS: &[&str] = &["mode", "wait", "request"];

/// `"none"`, `"forever"` or `{until: tick}`.
pub fn parse_wait(v: &JsValue) -> Result<Wait, Fail> {
    match keyword(v).as_deref() {
        Some("none") => return Ok(Wait::None),
        Some("forever") => return Ok(Wait::Forever),
        _ => {}
    }
    if is_plain_object(v) {
        known_keys(v, "wait", &["until"])?;
        return Ok(Wait::Until(Tick(num(&get(v, "until")?, "wait.until")?)));
    }
    Err(Fail::BadArgument(cat(&[
        "wait must be \"none\", \"forever\" or {until: tick}, got ",
        &describe(v),
    ])))
}

/// The options of an acquire, `{mode, wait, request?}`, read from `v`, whose keys must
/// all be in `known` (`ACQUIRE_KEYS`, or an input object's). Not an object (or a getter
/// that throws): `bad_argument`; a key not in `known`: `bad_argument` naming it; then as
/// [`parse_mode`], [`parse_wait`], [`opt_num`].
pub fn acquire_options(v: &JsValue, known: &[&str]) -> Result<(Mode, Wait, Option<u64>), Fail> {
    // A plain object only: an array or a function would skip the check of its keys, and a
    // misspelt one (`reqeust`) would be ignored.
    known_keys(object(v, "options")?, "options", known)?;
    let o: &AcquireOptions = v.unchecked_ref();
    let bad = |_| {
        Fail::BadArgument(cat(&[
            "options must be an object {mode, wait, request?}, got ",
            &describe(v),
        ]))
    };
    let mode = parse_mode(&o.mode().map_err(bad)?)?;
    let wait = parse_wait(&o.wait().map_err(bad)?)?;
    let request = opt_num(&o.request().map_err(bad)?, "request")?;
    Ok((mode, wait, request))
}

/// `obj[key]`; a throwing getter or proxy becomes `bad_argument`.
pub fn get(obj: &JsValue, key: &str) -> Result<JsValue, Fail> {
    Reflect::get(obj, &JsValue::from_str(key))
        .map_err(|_| Fail::BadArgument(cat(&["reading .", key, " threw"])))
}

/// Requires a plain object (not null, not an array).
pub fn object<'a>(v: &'a JsValue, what: &str) -> Result<&'a JsValue, Fail> {
    if is_plain_object(v) {
        Ok(v)
    } else {
        Err(Fail::BadArgument(cat(&[
            what,
            " must be an object, got ",
            &describe(v),
        ])))
    }
}

/// A `Uint8Array` argument (a `Buffer` is one too), as a plain `Uint8Array` copy made from
/// its internal slots: a subclass's overridden getters are never consulted, so its
/// `length` cannot lie or throw. The copy is on the JS heap, not in wasm memory, and made
/// before the length is judged: an argument too large for the JS heap to copy is refused
/// as one that cannot be read.
pub fn plain_bytes(v: &JsValue, what: &str) -> Result<Uint8Array, Fail> {
    let arr = v.dyn_ref::<Uint8Array>().ok_or_else(|| {
        Fail::BadArgument(cat(&[what, " must be a Uint8Array, got ", &describe(v)]))
    })?;
    // One message for both ways the copy fails (a detached buffer, or one too large for
    // the JS heap to copy): a longer one would cost the module bytes.
    plain_uint8_array(arr)
        .map_err(|_| Fail::BadArgument(cat(&[what, " cannot be read (a detached buffer?)"])))
}

/// The length of a [`plain_bytes`] copy, whole: 2^32 or more is not wrapped (a typed
/// array's length is below 2^53). Cost: one crossing.
pub fn byte_len(plain: &Uint8Array) -> u64 {
    plain.unchecked_ref::<PlainCopy>().length_f64() as u64
}

/// An optional name key argument (`restore`'s): `undefined` is none, anything else as
/// [`name_key`]. Cost: O(1).
pub fn optional_name_key(v: &JsValue) -> Result<Option<fencelock::NameKey>, Fail> {
    if v.is_undefined() {
        return Ok(None);
    }
    name_key(v).map(Some)
}

/// A name key argument (`setNameKey`): a `Uint8Array` of exactly 16 bytes, the core's
/// [`NameKey`](fencelock::NameKey) as two little-endian words; else `bad_argument`.
pub fn name_key(v: &JsValue) -> Result<fencelock::NameKey, Fail> {
    let plain = plain_bytes(v, "key")?;
    let mut key = [0u8; fencelock::NameKey::LEN];
    let n = byte_len(&plain);
    if n != key.len() as u64 {
        return Err(Fail::BadArgument(cat(&[
            "key must be 16 bytes, got ",
            Dec::new(n).as_str(),
        ])));
    }
    plain.copy_to(&mut key);
    Ok(fencelock::NameKey::from_bytes(key))
}

/// The first [`SNAPSHOT_HEADER_MAX_LEN`](fencelock::SNAPSHOT_HEADER_MAX_LEN) bytes of a
/// [`plain_bytes`] array (all of a shorter one), copied in: what the core's header
/// judgements read, so that bytes they refuse are never copied into the module's memory
/// whole (it never shrinks). Errors: `out_of_memory` (for those few bytes). Cost: O(1).
pub fn head(plain: &Uint8Array, what: &str) -> Result<Vec<u8>, Fail> {
    // At most the header's length, so it fits a u32.
    let n = byte_len(plain).min(fencelock::SNAPSHOT_HEADER_MAX_LEN as u64) as u32;
    copy(&plain.subarray(0, n), what)
}

/// Copies at most the first `most` bytes of a [`plain_bytes`] array into wasm memory, as
/// [`copy`] does: for snapshots, whose restore answers for any bytes as for their first
/// `snapshot_max_len + 1` (the core's rule), so junk after a header is never copied in.
pub fn copy_at_most(plain: &Uint8Array, most: usize, what: &str) -> Result<Vec<u8>, Fail> {
    let n = byte_len(plain).min(most as u64);
    let n = u32::try_from(n).map_err(|_| no_room(n, what))?;
    copy(&plain.subarray(0, n), what)
}

/// Copies a [`plain_bytes`] array into wasm memory with a fallible allocation: an array
/// too large for the module's memory (or longer than its address space) is
/// `out_of_memory`, not an abort.
pub fn copy(plain: &Uint8Array, what: &str) -> Result<Vec<u8>, Fail> {
    let n = byte_len(plain);
    let n = usize::try_from(n).map_err(|_| no_room(n, what))?;
    let mut out = zeroed(n, what)?;
    plain.copy_to(&mut out);
    Ok(out)
}

/// `n` zero bytes, allocated fallibly (`out_of_memory` rather than an abort).
pub fn zeroed(n: usize, what: &str) -> Result<Vec<u8>, Fail> {
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| no_room(n as u64, what))?;
    out.resize(n, 0);
    Ok(out)
}

/// `out_of_memory` for `n` bytes of `what`.
fn no_room(n: u64, what: &str) -> Fail {
    Fail::OutOfMemory(cat(&[
        "cannot allocate ",
        Dec::new(n).as_str(),
        " bytes for ",
        what,
    ]))
}

// ------------------------------------------------------------------------- values out

/// A `u64` out, exactly: a JS number up to 2^53 - 1, else a `bigint` (never a rounded
/// number, never an error). Cost: O(1).
pub fn number(v: u64) -> JsValue {
    if v <= MAX_SAFE {
        JsValue::from_f64(v as f64)
    } else {
        JsValue::from(v)
    }
}

/// [`number`] or `null`.
pub fn opt_number(v: Option<u64>) -> JsValue {
    v.map_or(JsValue::NULL, number)
}

/// Builds a plain object, property by property.
pub struct Obj(JsValue);

impl Obj {
    /// `{}`.
    pub fn new() -> Obj {
        Obj(Object::new().into())
    }

    /// Sets `key`.
    pub fn with(self, key: &str, value: impl Into<JsValue>) -> Obj {
        set(&self.0, key, &value.into());
        self
    }

    /// The object.
    pub fn done(self) -> JsValue {
        self.0
    }
}

/// `"exclusive"` / `"shared"` / `{permits, limit}`, the JSON spelling of a mode.
pub fn mode(m: Mode) -> JsValue {
    match m {
        Mode::Exclusive => JsValue::from_str("exclusive"),
        Mode::Shared => JsValue::from_str("shared"),
        Mode::Permits { count, limit } => Obj::new()
            .with("permits", count)
            .with("limit", limit)
            .done(),
    }
}

/// A session id out.
pub fn session(s: SessionId) -> JsValue {
    number(s.0)
}

/// A token out.
pub fn token(t: Token) -> JsValue {
    number(t.0)
}

/// A `Uint8Array` copy of `bytes`.
pub fn uint8(bytes: &[u8]) -> JsValue {
    Uint8Array::from(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_codes_are_distinct_from_core_codes() {
        let fails = [
            Fail::OutOfRange(String::new()),
            Fail::BadArgument(String::new()),
            Fail::OutOfMemory(String::new()),
        ];
        let codes: Vec<_> = fails.iter().map(|f| (f.code(), f.errno())).collect();
        assert_eq!(
            codes,
            [
                ("out_of_range", 701),
                ("bad_argument", 702),
                ("out_of_memory", 703)
            ]
        );
        // core errors pass through unchanged
        let core = Fail::from(Error::ZeroToken);
        assert_eq!((core.code(), core.errno()), ("zero_token", 402));
        assert_eq!(core.message(), Error::ZeroToken.to_string());
    }

    #[test]
    fn messages_without_fmt_are_the_cores_display() {
        for e in Error::EXAMPLES {
            assert_eq!(Fail::from(*e).message(), e.to_string());
        }
        let big = Error::TimeWentBackwards {
            now: Tick(u64::MAX),
            requested: Tick(0),
        };
        assert_eq!(Fail::from(big).message(), big.to_string());
    }

    #[test]
    fn decimal_digits_of_every_width() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            12345,
            MAX_SAFE,
            MAX_SAFE + 1,
            u64::MAX,
        ] {
            assert_eq!(Dec::new(n).as_str(), n.to_string());
        }
    }
}
