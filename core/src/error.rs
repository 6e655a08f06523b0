//! The one error type of the crate. A refused input changes nothing beyond the advance to
//! its `now`, which stands (docs/SPEC.md §5): its events are in the sink, and apart from
//! them the service's state (and its snapshot bytes) are exactly as the advance left them.
//! An input refused before the advance (`TimeWentBackwards`, `BufferTooSmall`) changes
//! nothing at all.

use core::fmt;
use serde::{Deserialize, Serialize};

use crate::{Mode, SessionId, Tick, Token};

/// Which fixed-capacity table was full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Table {
    /// The session table.
    Sessions,
    /// The lock table (one entry per lock that is held, awaited, watched or in lock-delay).
    Locks,
    /// The claim pool: one entry per (session, lock) hold, wait or watch.
    Claims,
    /// A [`FenceGate`](crate::FenceGate)'s resource table.
    Resources,
    /// The watchers of one lock (at most [`Config::max_watchers`](crate::Config); 0
    /// disables watches).
    Watchers,
    /// The label table: one row per open session with a holder label (its size is the
    /// storage's; [`Storage::tables_and_labels`](crate::Storage::tables_and_labels)).
    Labels,
}

impl Table {
    /// The table's name: `"sessions"`, `"locks"`, `"claims"`, `"resources"`,
    /// `"watchers"` or `"labels"`. Cost: O(1). Errors: none.
    pub fn name(self) -> &'static str {
        match self {
            Table::Sessions => "sessions",
            Table::Locks => "locks",
            Table::Claims => "claims",
            Table::Resources => "resources",
            Table::Watchers => "watchers",
            Table::Labels => "labels",
        }
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything that can be refused. Each variant has a stable numeric [`code`](Error::code)
/// that the C ABI and the JS binding expose unchanged.
///
/// It serializes like any derived enum and decodes from any bytes (`DeserializeOwned`):
/// the reason texts of [`CorruptSnapshot`](Error::CorruptSnapshot) and
/// [`BadConfig`](Error::BadConfig) are mapped back to this build's own `&'static str`s
/// (an unknown one decodes as `"unrecognised reason"`).
///
/// It is a [`core::error::Error`] (std's `Error`), with its message as its `Display`, so
/// `?` turns it into a `Box<dyn Error>` or an `anyhow::Error` in a host's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum Error {
    /// No live session has this id (never opened, closed, or expired).
    UnknownSession(SessionId),
    /// The session does not hold the lock it tried to release (for
    /// [`release_hold`](crate::LockService::release_hold): not under that token).
    NotHolder(SessionId),
    /// The session has no queued acquire on the lock it tried to cancel.
    NotQueued(SessionId),
    /// The session already waits for this lock; a second queue entry is never made.
    AlreadyQueued(SessionId),
    /// The session holds the lock in another mode (no upgrade or downgrade), or, for
    /// [`Mode::Permits`](crate::Mode::Permits), with another count.
    ModeMismatch {
        /// The mode the session holds the lock in.
        held: Mode,
    },
    /// A lock or resource name was empty.
    EmptyName,
    /// A name was longer than the configured maximum.
    NameTooLong {
        /// Its length in bytes.
        len: u32,
        /// The limit in bytes.
        max: u32,
    },
    /// A time-to-live of 0 ticks.
    BadTtl,
    /// `now + ttl` does not fit in a `u64`.
    DeadlineOverflow,
    /// A tick earlier than the current one.
    TimeWentBackwards {
        /// The current tick.
        now: Tick,
        /// The tick that was asked for.
        requested: Tick,
    },
    /// A request number older than the session's latest one (a stale retry).
    StaleRequest {
        /// The number carried by the input.
        request: u64,
        /// The session's latest request number.
        latest: u64,
    },
    /// The session's latest request number was reused for a different input (another
    /// kind of input, or another lock or mode): a retry must repeat its request exactly.
    RequestReused {
        /// The reused number.
        request: u64,
    },
    /// A fixed-capacity table is full.
    CapacityExceeded(Table),
    /// A [`FenceGate`](crate::FenceGate) refused a token lower than one it has seen.
    Stale {
        /// The token that was offered.
        token: Token,
        /// The highest token seen for that resource.
        highest: Token,
    },
    /// Token 0 is never granted, so it is never admitted.
    ZeroToken,
    /// A frame that does not decode as the expected type.
    BadFrame,
    /// A caller buffer is too small (`need` bytes would do), or a bounded
    /// [`Sink`](crate::Sink) has room for fewer events than the input may emit (`need`
    /// events would do). Nothing changed.
    BufferTooSmall {
        /// Bytes (a buffer) or events (a sink) needed.
        need: u32,
    },
    /// A snapshot does not begin with the expected magic.
    BadMagic,
    /// A snapshot of a format version this build does not read.
    UnsupportedVersion(u16),
    /// A snapshot decodes but breaks an invariant (the text says which).
    CorruptSnapshot(&'static str),
    /// A configuration that cannot work (the text says why).
    BadConfig(&'static str),
    /// A [`SessionKeeper`](crate::SessionKeeper) was told of an acknowledgement for a
    /// keep-alive it has no record of sending.
    UnknownKeepAlive {
        /// The send time the acknowledgement named.
        sent_at: u64,
    },
    /// The acquire's mode does not match how the name is in use: a `Permits` acquire
    /// with another limit than the live semaphore's, an exclusive or shared acquire on a
    /// live semaphore, or a `Permits` acquire on a name held or awaited as a plain lock.
    LimitMismatch {
        /// The live semaphore's limit; 0 when the name is in use as a plain lock.
        limit: u32,
    },
    /// The session does not watch the lock it tried to unwatch.
    NotWatching(SessionId),
    /// The session already watches this lock; a second watch is never made.
    AlreadyWatching(SessionId),
    /// A `Permits` mode outside `1 <= count <= limit`.
    BadPermits {
        /// The permits asked for.
        count: u32,
        /// The limit given.
        limit: u32,
    },
    /// A holder label longer than [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) bytes.
    LabelTooLong {
        /// Its length in bytes.
        len: u32,
        /// The limit in bytes.
        max: u32,
    },
}

/// Every reason text the crate puts in [`Error::CorruptSnapshot`] and
/// [`Error::BadConfig`]. Decoding maps a reason back to its `&'static str` here, so
/// `Error` decodes from any bytes (it is `DeserializeOwned`), not only `'static` ones.
const REASONS: &[&str] = &[
    "a grantable waiter was left waiting",
    "a session claims a lock twice",
    "a session watches a lock twice",
    "a table has more than 2^31 - 1 rows",
    "a table's index must have two buckets per row",
    "a token held twice",
    "a waiter arrived before a holder",
    "a watch with a mode or value",
    "bad header",
    "bad record",
    "bad resource record",
    "bad version",
    "claim of an unknown session",
    "claim on an unknown lock",
    "claim sequence out of order or beyond the counter",
    "counter beyond 2^63",
    "counter is zero",
    "empty resource name or token 0",
    "exclusive lock with more than one holder",
    "holders' tokens not rising in arrival order",
    "holds and waits of a lock differ in limit",
    "idle lock entry",
    "keep-alive interval must be in 1..ttl - margin",
    "lock ids out of order or beyond the counter",
    "lock name empty or too long",
    "lock name twice",
    "lock-delay beyond now + lock_delay",
    "lock-delay that is over is not zeroed (non-canonical)",
    "lock-delay with an exclusive holder",
    "longer than its records can be",
    "margin must be in 1..ttl",
    "max_name_len must be 1..=64",
    "more permits held than the limit",
    "more watchers than max_watchers",
    "non-canonical encoding",
    "permits outside 1..=limit",
    "recorded reply does not fit its session",
    "resource twice",
    "revision floor above 2^62",
    "session deadline not in (now, now + ttl]",
    "session ids out of order or beyond the counter",
    "snapshot version not the one its state is written in",
    "tables_ref and labels_ref must give the rows tables_and_labels gives",
    "the gate's rows must be the same through as_ref and as_mut",
    "token outside 1..=revision",
    "trailing bytes",
    "truncated header",
    "truncated record",
    "truncated resource record",
    "wait deadline not after now",
];

/// The text of a reason that is not in [`REASONS`] (sent by a newer build, or a binding).
const UNKNOWN_REASON: &str = "unrecognised reason";

/// A reason text decoded from any lifetime, as one of [`REASONS`].
struct Reason(&'static str);

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Reason, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Reason;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a reason text")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Reason, E> {
                let known = REASONS.iter().find(|r| **r == v).copied();
                Ok(Reason(known.unwrap_or(UNKNOWN_REASON)))
            }
        }
        d.deserialize_str(Visit)
    }
}

/// [`Error`]'s decoding shape: the same variants in the same order (postcard numbers them
/// by position; a test round-trips every variant), with [`Reason`] for the texts.
#[derive(Deserialize)]
#[serde(rename = "Error")]
enum ErrorRepr {
    UnknownSession(SessionId),
    NotHolder(SessionId),
    NotQueued(SessionId),
    AlreadyQueued(SessionId),
    ModeMismatch { held: Mode },
    EmptyName,
    NameTooLong { len: u32, max: u32 },
    BadTtl,
    DeadlineOverflow,
    TimeWentBackwards { now: Tick, requested: Tick },
    StaleRequest { request: u64, latest: u64 },
    RequestReused { request: u64 },
    CapacityExceeded(Table),
    Stale { token: Token, highest: Token },
    ZeroToken,
    BadFrame,
    BufferTooSmall { need: u32 },
    BadMagic,
    UnsupportedVersion(u16),
    CorruptSnapshot(Reason),
    BadConfig(Reason),
    UnknownKeepAlive { sent_at: u64 },
    LimitMismatch { limit: u32 },
    NotWatching(SessionId),
    AlreadyWatching(SessionId),
    BadPermits { count: u32, limit: u32 },
    LabelTooLong { len: u32, max: u32 },
}

// By hand: a derive would require `'de: 'static` for the `&'static str` fields.
impl<'de> Deserialize<'de> for Error {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Error, D::Error> {
        ErrorRepr::deserialize(d).map(Error::from)
    }
}

impl From<ErrorRepr> for Error {
    fn from(r: ErrorRepr) -> Error {
        match r {
            ErrorRepr::UnknownSession(s) => Error::UnknownSession(s),
            ErrorRepr::NotHolder(s) => Error::NotHolder(s),
            ErrorRepr::NotQueued(s) => Error::NotQueued(s),
            ErrorRepr::AlreadyQueued(s) => Error::AlreadyQueued(s),
            ErrorRepr::ModeMismatch { held } => Error::ModeMismatch { held },
            ErrorRepr::EmptyName => Error::EmptyName,
            ErrorRepr::NameTooLong { len, max } => Error::NameTooLong { len, max },
            ErrorRepr::BadTtl => Error::BadTtl,
            ErrorRepr::DeadlineOverflow => Error::DeadlineOverflow,
            ErrorRepr::TimeWentBackwards { now, requested } => {
                Error::TimeWentBackwards { now, requested }
            }
            ErrorRepr::StaleRequest { request, latest } => Error::StaleRequest { request, latest },
            ErrorRepr::RequestReused { request } => Error::RequestReused { request },
            ErrorRepr::CapacityExceeded(t) => Error::CapacityExceeded(t),
            ErrorRepr::Stale { token, highest } => Error::Stale { token, highest },
            ErrorRepr::ZeroToken => Error::ZeroToken,
            ErrorRepr::BadFrame => Error::BadFrame,
            ErrorRepr::BufferTooSmall { need } => Error::BufferTooSmall { need },
            ErrorRepr::BadMagic => Error::BadMagic,
            ErrorRepr::UnsupportedVersion(v) => Error::UnsupportedVersion(v),
            ErrorRepr::CorruptSnapshot(r) => Error::CorruptSnapshot(r.0),
            ErrorRepr::BadConfig(r) => Error::BadConfig(r.0),
            ErrorRepr::UnknownKeepAlive { sent_at } => Error::UnknownKeepAlive { sent_at },
            ErrorRepr::LimitMismatch { limit } => Error::LimitMismatch { limit },
            ErrorRepr::NotWatching(s) => Error::NotWatching(s),
            ErrorRepr::AlreadyWatching(s) => Error::AlreadyWatching(s),
            ErrorRepr::BadPermits { count, limit } => Error::BadPermits { count, limit },
            ErrorRepr::LabelTooLong { len, max } => Error::LabelTooLong { len, max },
        }
    }
}

impl Error {
    /// One value of every variant, in [`code`](Error::code) order: the one list of error
    /// kinds that the bindings and every layer's tests iterate (a test proves it complete).
    pub const EXAMPLES: &'static [Error] = &[
        Error::UnknownSession(SessionId(1)),
        Error::NotHolder(SessionId(1)),
        Error::NotQueued(SessionId(1)),
        Error::AlreadyQueued(SessionId(1)),
        Error::ModeMismatch {
            held: Mode::Exclusive,
        },
        Error::StaleRequest {
            request: 1,
            latest: 2,
        },
        Error::RequestReused { request: 1 },
        Error::LimitMismatch { limit: 3 },
        Error::NotWatching(SessionId(1)),
        Error::AlreadyWatching(SessionId(1)),
        Error::EmptyName,
        Error::NameTooLong { len: 65, max: 64 },
        Error::BadTtl,
        Error::DeadlineOverflow,
        Error::TimeWentBackwards {
            now: Tick(2),
            requested: Tick(1),
        },
        Error::BadConfig("max_name_len must be 1..=64"),
        Error::BadPermits { count: 0, limit: 3 },
        Error::LabelTooLong { len: 65, max: 64 },
        Error::CapacityExceeded(Table::Sessions),
        Error::Stale {
            token: Token(1),
            highest: Token(2),
        },
        Error::ZeroToken,
        Error::BadFrame,
        Error::BufferTooSmall { need: 1 },
        Error::BadMagic,
        Error::UnsupportedVersion(99),
        Error::CorruptSnapshot("trailing bytes"),
        Error::UnknownKeepAlive { sent_at: 1 },
    ];

    /// A stable number for this kind of error, never reused: 1xx session and lock rules,
    /// 2xx names and time, 3xx capacity, 4xx fencing, 5xx bytes, 6xx the client's lease
    /// view. Cost: O(1). Errors: none.
    pub fn code(&self) -> u32 {
        match self {
            Error::UnknownSession(_) => 101,
            Error::NotHolder(_) => 102,
            Error::NotQueued(_) => 103,
            Error::AlreadyQueued(_) => 104,
            Error::ModeMismatch { .. } => 105,
            Error::StaleRequest { .. } => 106,
            Error::RequestReused { .. } => 107,
            Error::LimitMismatch { .. } => 108,
            Error::NotWatching(_) => 109,
            Error::AlreadyWatching(_) => 110,
            Error::EmptyName => 201,
            Error::NameTooLong { .. } => 202,
            Error::BadTtl => 203,
            Error::DeadlineOverflow => 204,
            Error::TimeWentBackwards { .. } => 205,
            Error::BadConfig(_) => 206,
            Error::BadPermits { .. } => 207,
            Error::LabelTooLong { .. } => 208,
            Error::CapacityExceeded(_) => 301,
            Error::Stale { .. } => 401,
            Error::ZeroToken => 402,
            Error::BadFrame => 501,
            Error::BufferTooSmall { .. } => 502,
            Error::BadMagic => 503,
            Error::UnsupportedVersion(_) => 504,
            Error::CorruptSnapshot(_) => 505,
            Error::UnknownKeepAlive { .. } => 601,
        }
    }

    /// A short, stable, snake_case name for the kind of error (`"unknown_session"`…),
    /// used as the `code` string in JavaScript. Cost: O(1). Errors: none.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::UnknownSession(_) => "unknown_session",
            Error::NotHolder(_) => "not_holder",
            Error::NotQueued(_) => "not_queued",
            Error::AlreadyQueued(_) => "already_queued",
            Error::ModeMismatch { .. } => "mode_mismatch",
            Error::StaleRequest { .. } => "stale_request",
            Error::RequestReused { .. } => "request_reused",
            Error::LimitMismatch { .. } => "limit_mismatch",
            Error::NotWatching(_) => "not_watching",
            Error::AlreadyWatching(_) => "already_watching",
            Error::EmptyName => "empty_name",
            Error::NameTooLong { .. } => "name_too_long",
            Error::BadTtl => "bad_ttl",
            Error::DeadlineOverflow => "deadline_overflow",
            Error::TimeWentBackwards { .. } => "time_went_backwards",
            Error::BadConfig(_) => "bad_config",
            Error::BadPermits { .. } => "bad_permits",
            Error::LabelTooLong { .. } => "label_too_long",
            Error::CapacityExceeded(_) => "capacity_exceeded",
            Error::Stale { .. } => "stale",
            Error::ZeroToken => "zero_token",
            Error::BadFrame => "bad_frame",
            Error::BufferTooSmall { .. } => "buffer_too_small",
            Error::BadMagic => "bad_magic",
            Error::UnsupportedVersion(_) => "unsupported_version",
            Error::CorruptSnapshot(_) => "corrupt_snapshot",
            Error::UnknownKeepAlive { .. } => "unknown_keep_alive",
        }
    }
}

/// One piece of an error's message: a text, or a number written in decimal.
///
/// [`Error::message`] gives a message as pieces so that a host without `core::fmt` (the
/// wasm build, where the formatting machinery is most of a kilobyte-budgeted module) can
/// write exactly the text `Display` writes, by appending the pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Literal text.
    Text(&'static str),
    /// A number, in decimal without separators.
    Number(u64),
}

/// An error's message as at most five [`Piece`]s, in order (shorter messages end with
/// empty texts). Written by [`Error::message`].
pub type Message = [Piece; 5];

impl Error {
    /// The message `Display` writes, as pieces: the one home of every error's text.
    /// Cost: O(1), no allocation. Errors: none.
    pub fn message(&self) -> Message {
        use Piece::{Number as N, Text as T};
        const E: Piece = T("");
        match *self {
            Error::UnknownSession(s) => [
                T("unknown session: session "),
                N(s.0),
                T(" is not open"),
                E,
                E,
            ],
            Error::NotHolder(s) => [
                T("not holder: session "),
                N(s.0),
                T(" does not hold this lock"),
                E,
                E,
            ],
            Error::NotQueued(s) => [
                T("not queued: session "),
                N(s.0),
                T(" does not wait for this lock"),
                E,
                E,
            ],
            Error::AlreadyQueued(s) => [
                T("already queued: session "),
                N(s.0),
                T(" already waits for this lock"),
                E,
                E,
            ],
            Error::ModeMismatch { held } => match held {
                Mode::Exclusive => [
                    T("mode mismatch: the lock is held "),
                    T("exclusive"),
                    T(" by this session"),
                    E,
                    E,
                ],
                Mode::Shared => [
                    T("mode mismatch: the lock is held "),
                    T("shared"),
                    T(" by this session"),
                    E,
                    E,
                ],
                Mode::Permits { count, limit } => [
                    T("mode mismatch: the lock is held with "),
                    N(u64::from(count)),
                    T(" of "),
                    N(u64::from(limit)),
                    T(" permits by this session"),
                ],
            },
            Error::EmptyName => [T("empty name: a name needs at least one byte"), E, E, E, E],
            Error::NameTooLong { len, max } => [
                T("name too long: "),
                N(u64::from(len)),
                T(" bytes, at most "),
                N(u64::from(max)),
                E,
            ],
            Error::BadTtl => [
                T("bad ttl: a session needs a ttl of at least 1 tick"),
                E,
                E,
                E,
                E,
            ],
            Error::DeadlineOverflow => [
                T("deadline overflow: now + ttl does not fit in u64"),
                E,
                E,
                E,
                E,
            ],
            Error::TimeWentBackwards { now, requested } => [
                T("time went backwards: now is t"),
                N(now.0),
                T(", asked for t"),
                N(requested.0),
                E,
            ],
            Error::StaleRequest { request, latest } => [
                T("stale request: number "),
                N(request),
                T(" is older than the latest, "),
                N(latest),
                E,
            ],
            Error::RequestReused { request } => [
                T("request reused: number "),
                N(request),
                T(" was used for a different input"),
                E,
                E,
            ],
            Error::CapacityExceeded(t) => [
                T("capacity exceeded: the "),
                T(t.name()),
                T(" table is full"),
                E,
                E,
            ],
            Error::Stale { token, highest } => [
                T("stale: token "),
                N(token.0),
                T(" is lower than the highest seen, token "),
                N(highest.0),
                E,
            ],
            Error::ZeroToken => [
                T("zero token: 0 is never a valid fencing token"),
                E,
                E,
                E,
                E,
            ],
            Error::BadFrame => [T("bad frame: bytes do not decode"), E, E, E, E],
            Error::BufferTooSmall { need } => [
                T("buffer too small: room for "),
                N(u64::from(need)),
                T(" needed (bytes, or events for a sink)"),
                E,
                E,
            ],
            Error::BadMagic => [T("bad magic: not a fencelock snapshot"), E, E, E, E],
            Error::UnsupportedVersion(v) => {
                [T("unsupported snapshot version "), N(u64::from(v)), E, E, E]
            }
            Error::CorruptSnapshot(why) => [T("corrupt snapshot: "), T(why), E, E, E],
            Error::BadConfig(why) => [T("bad config: "), T(why), E, E, E],
            Error::UnknownKeepAlive { sent_at } => [
                T("unknown keep-alive: no keep-alive sent at "),
                N(sent_at),
                T(" is on record"),
                E,
                E,
            ],
            Error::LimitMismatch { limit: 0 } => [
                T("limit mismatch: the lock is in use as a plain lock, not a semaphore"),
                E,
                E,
                E,
                E,
            ],
            Error::LimitMismatch { limit } => [
                T("limit mismatch: the lock is in use as a semaphore of "),
                N(u64::from(limit)),
                T(" permits"),
                E,
                E,
            ],
            Error::NotWatching(s) => [
                T("not watching: session "),
                N(s.0),
                T(" does not watch this lock"),
                E,
                E,
            ],
            Error::AlreadyWatching(s) => [
                T("already watching: session "),
                N(s.0),
                T(" already watches this lock"),
                E,
                E,
            ],
            Error::BadPermits { count, limit } => [
                T("bad permits: "),
                N(u64::from(count)),
                T(" of "),
                N(u64::from(limit)),
                T(" permits, need 1 <= count <= limit"),
            ],
            Error::LabelTooLong { len, max } => [
                T("label too long: "),
                N(u64::from(len)),
                T(" bytes, at most "),
                N(u64::from(max)),
                E,
            ],
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for piece in self.message() {
            match piece {
                Piece::Text(t) => f.write_str(t)?,
                Piece::Number(n) => write!(f, "{n}")?,
            }
        }
        Ok(())
    }
}

impl core::error::Error for Error {}

/// The inverse of `From<ErrorRepr>`: an exhaustive match, so a variant added to `Error`
/// but not to `ErrorRepr` fails to compile (in test builds).
#[cfg(test)]
impl From<Error> for ErrorRepr {
    fn from(e: Error) -> ErrorRepr {
        match e {
            Error::UnknownSession(s) => ErrorRepr::UnknownSession(s),
            Error::NotHolder(s) => ErrorRepr::NotHolder(s),
            Error::NotQueued(s) => ErrorRepr::NotQueued(s),
            Error::AlreadyQueued(s) => ErrorRepr::AlreadyQueued(s),
            Error::ModeMismatch { held } => ErrorRepr::ModeMismatch { held },
            Error::EmptyName => ErrorRepr::EmptyName,
            Error::NameTooLong { len, max } => ErrorRepr::NameTooLong { len, max },
            Error::BadTtl => ErrorRepr::BadTtl,
            Error::DeadlineOverflow => ErrorRepr::DeadlineOverflow,
            Error::TimeWentBackwards { now, requested } => {
                ErrorRepr::TimeWentBackwards { now, requested }
            }
            Error::StaleRequest { request, latest } => ErrorRepr::StaleRequest { request, latest },
            Error::RequestReused { request } => ErrorRepr::RequestReused { request },
            Error::CapacityExceeded(t) => ErrorRepr::CapacityExceeded(t),
            Error::Stale { token, highest } => ErrorRepr::Stale { token, highest },
            Error::ZeroToken => ErrorRepr::ZeroToken,
            Error::BadFrame => ErrorRepr::BadFrame,
            Error::BufferTooSmall { need } => ErrorRepr::BufferTooSmall { need },
            Error::BadMagic => ErrorRepr::BadMagic,
            Error::UnsupportedVersion(v) => ErrorRepr::UnsupportedVersion(v),
            Error::CorruptSnapshot(r) => ErrorRepr::CorruptSnapshot(Reason(r)),
            Error::BadConfig(r) => ErrorRepr::BadConfig(Reason(r)),
            Error::UnknownKeepAlive { sent_at } => ErrorRepr::UnknownKeepAlive { sent_at },
            Error::LimitMismatch { limit } => ErrorRepr::LimitMismatch { limit },
            Error::NotWatching(s) => ErrorRepr::NotWatching(s),
            Error::AlreadyWatching(s) => ErrorRepr::AlreadyWatching(s),
            Error::BadPermits { count, limit } => ErrorRepr::BadPermits { count, limit },
            Error::LabelTooLong { len, max } => ErrorRepr::LabelTooLong { len, max },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `Error` is a `core::error::Error` whose description is its message: a host's
    /// `?` into `Box<dyn Error>` (the server client's example does it) keeps the text.
    #[test]
    fn an_error_is_a_std_error_with_its_message() {
        let boxed: Box<dyn core::error::Error> = Box::new(Error::BadTtl);
        assert_eq!(boxed.to_string(), Error::BadTtl.to_string());
        assert!(boxed.source().is_none());
    }

    /// The text of every kind, fixed: `Display` writes the pieces of `message()`, and the
    /// bindings (the wasm build writes the pieces itself) show these words.
    #[test]
    fn every_message_reads_as_written() {
        let want = [
            "unknown session: session 1 is not open",
            "not holder: session 1 does not hold this lock",
            "not queued: session 1 does not wait for this lock",
            "already queued: session 1 already waits for this lock",
            "mode mismatch: the lock is held exclusive by this session",
            "stale request: number 1 is older than the latest, 2",
            "request reused: number 1 was used for a different input",
            "limit mismatch: the lock is in use as a semaphore of 3 permits",
            "not watching: session 1 does not watch this lock",
            "already watching: session 1 already watches this lock",
            "empty name: a name needs at least one byte",
            "name too long: 65 bytes, at most 64",
            "bad ttl: a session needs a ttl of at least 1 tick",
            "deadline overflow: now + ttl does not fit in u64",
            "time went backwards: now is t2, asked for t1",
            "bad config: max_name_len must be 1..=64",
            "bad permits: 0 of 3 permits, need 1 <= count <= limit",
            "label too long: 65 bytes, at most 64",
            "capacity exceeded: the sessions table is full",
            "stale: token 1 is lower than the highest seen, token 2",
            "zero token: 0 is never a valid fencing token",
            "bad frame: bytes do not decode",
            "buffer too small: room for 1 needed (bytes, or events for a sink)",
            "bad magic: not a fencelock snapshot",
            "unsupported snapshot version 99",
            "corrupt snapshot: trailing bytes",
            "unknown keep-alive: no keep-alive sent at 1 is on record",
        ];
        let got: Vec<String> = Error::EXAMPLES.iter().map(|e| e.to_string()).collect();
        assert_eq!(got, want);
        // The pieces alone, joined by hand, are the same text (what a host without
        // core::fmt writes).
        for e in Error::EXAMPLES {
            let mut s = String::new();
            for p in e.message() {
                match p {
                    Piece::Text(t) => s.push_str(t),
                    Piece::Number(n) => s.push_str(&n.to_string()),
                }
            }
            assert_eq!(s, e.to_string());
        }
        let big = Error::Stale {
            token: Token(u64::MAX),
            highest: Token(u64::MAX),
        };
        assert_eq!(
            big.to_string(),
            "stale: token 18446744073709551615 is lower than the highest seen, token 18446744073709551615"
        );
    }

    #[test]
    fn the_decoding_shape_maps_every_variant_back() {
        for e in Error::EXAMPLES {
            assert_eq!(Error::from(ErrorRepr::from(*e)), *e);
        }
    }

    /// The position of a variant in declaration order; exhaustive, so a new variant must
    /// be added here, and then the test below demands it in `EXAMPLES`.
    fn variant(e: &Error) -> usize {
        match e {
            Error::UnknownSession(_) => 0,
            Error::NotHolder(_) => 1,
            Error::NotQueued(_) => 2,
            Error::AlreadyQueued(_) => 3,
            Error::ModeMismatch { .. } => 4,
            Error::EmptyName => 5,
            Error::NameTooLong { .. } => 6,
            Error::BadTtl => 7,
            Error::DeadlineOverflow => 8,
            Error::TimeWentBackwards { .. } => 9,
            Error::StaleRequest { .. } => 10,
            Error::RequestReused { .. } => 11,
            Error::CapacityExceeded(_) => 12,
            Error::Stale { .. } => 13,
            Error::ZeroToken => 14,
            Error::BadFrame => 15,
            Error::BufferTooSmall { .. } => 16,
            Error::BadMagic => 17,
            Error::UnsupportedVersion(_) => 18,
            Error::CorruptSnapshot(_) => 19,
            Error::BadConfig(_) => 20,
            Error::UnknownKeepAlive { .. } => 21,
            Error::LimitMismatch { .. } => 22,
            Error::NotWatching(_) => 23,
            Error::AlreadyWatching(_) => 24,
            Error::BadPermits { .. } => 25,
            Error::LabelTooLong { .. } => 26,
        }
    }

    #[test]
    fn examples_hold_every_variant_once_in_code_order() {
        let mut seen = [false; 27];
        for e in Error::EXAMPLES {
            assert!(!seen[variant(e)], "{e:?} twice");
            seen[variant(e)] = true;
        }
        assert!(
            seen.iter().all(|s| *s),
            "a variant is missing from EXAMPLES"
        );
        for w in Error::EXAMPLES.windows(2) {
            assert!(w[0].code() < w[1].code(), "not in code order at {:?}", w[1]);
            assert_ne!(w[0].kind(), w[1].kind());
        }
    }

    /// REASONS must list every reason literal in the crate's source (error.rs itself has
    /// none outside the list).
    #[test]
    fn reasons_list_every_reason_in_the_source() {
        let sources = [
            include_str!("election.rs"),
            include_str!("gate.rs"),
            include_str!("input.rs"),
            include_str!("keeper.rs"),
            include_str!("lib.rs"),
            include_str!("output.rs"),
            include_str!("reply.rs"),
            include_str!("service.rs"),
            include_str!("sink.rs"),
            include_str!("snapshot.rs"),
            include_str!("storage.rs"),
            include_str!("table.rs"),
            include_str!("types.rs"),
            include_str!("wire.rs"),
        ];
        let mut found = 0;
        for src in sources {
            for opener in ["corrupt(", "CorruptSnapshot(", "BadConfig("] {
                for (at, _) in src.match_indices(opener) {
                    let rest = src[at + opener.len()..].trim_start();
                    let Some(text) = rest.strip_prefix('"') else {
                        continue;
                    };
                    let Some(end) = text.find('"') else { continue };
                    let reason = &text[..end];
                    found += 1;
                    assert!(
                        REASONS.contains(&reason),
                        "{reason:?} is missing from REASONS"
                    );
                }
            }
        }
        assert!(found >= 25, "the scan found only {found} reasons");
    }

    /// The reasons a helper makes rather than the error's construction site (which the
    /// scan above reads): the header varint's, for a snapshot and a gate.
    #[test]
    fn reasons_made_by_helpers_are_listed() {
        for rest in [
            &[][..],
            &[0x80],
            &[0x80, 0x80],
            &[0xff, 0xff, 0xff],
            &[0x80, 0x80, 0x80, 0x00],
        ] {
            let reason = crate::snapshot::bad_varint(rest);
            assert!(
                REASONS.contains(&reason),
                "{reason:?} is missing from REASONS"
            );
        }
    }
}
