//! The one error type of the crate. A refused input changes nothing: the service's state
//! (and its snapshot bytes) are exactly as before, and no output was emitted.

use core::fmt;
use serde::{Deserialize, Serialize};

use crate::{Mode, SessionId, Tick, Token};

/// Which fixed-capacity table was full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Table {
    /// The session table.
    Sessions,
    /// The lock table (one entry per lock that is held, awaited or in lock-delay).
    Locks,
    /// The claim pool: one entry per (session, lock) hold or wait.
    Claims,
    /// A [`FenceGate`](crate::FenceGate)'s resource table.
    Resources,
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Table::Sessions => "sessions",
            Table::Locks => "locks",
            Table::Claims => "claims",
            Table::Resources => "resources",
        })
    }
}

/// Everything that can be refused. Each variant has a stable numeric [`code`](Error::code)
/// that the C ABI and the JS binding expose unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Error {
    /// No live session has this id (never opened, closed, or expired).
    UnknownSession(SessionId),
    /// The session does not hold the lock it tried to release.
    NotHolder(SessionId),
    /// The session has no queued acquire on the lock it tried to cancel.
    NotQueued(SessionId),
    /// The session already waits for this lock; a second queue entry is never made.
    AlreadyQueued(SessionId),
    /// The session holds the lock in the other mode (no upgrade or downgrade).
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
    /// A caller buffer is too small; `need` bytes would do.
    BufferTooSmall {
        /// Bytes needed.
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
}

impl Error {
    /// A stable number for this kind of error, never reused: 1xx session and lock rules,
    /// 2xx names and time, 3xx capacity, 4xx fencing, 5xx bytes. Cost: O(1).
    pub fn code(&self) -> u32 {
        match self {
            Error::UnknownSession(_) => 101,
            Error::NotHolder(_) => 102,
            Error::NotQueued(_) => 103,
            Error::AlreadyQueued(_) => 104,
            Error::ModeMismatch { .. } => 105,
            Error::StaleRequest { .. } => 106,
            Error::RequestReused { .. } => 107,
            Error::EmptyName => 201,
            Error::NameTooLong { .. } => 202,
            Error::BadTtl => 203,
            Error::DeadlineOverflow => 204,
            Error::TimeWentBackwards { .. } => 205,
            Error::BadConfig(_) => 206,
            Error::CapacityExceeded(_) => 301,
            Error::Stale { .. } => 401,
            Error::ZeroToken => 402,
            Error::BadFrame => 501,
            Error::BufferTooSmall { .. } => 502,
            Error::BadMagic => 503,
            Error::UnsupportedVersion(_) => 504,
            Error::CorruptSnapshot(_) => 505,
        }
    }

    /// A short, stable, snake_case name for the kind of error (`"unknown_session"`…),
    /// used as the `code` string in JavaScript. Cost: O(1).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::UnknownSession(_) => "unknown_session",
            Error::NotHolder(_) => "not_holder",
            Error::NotQueued(_) => "not_queued",
            Error::AlreadyQueued(_) => "already_queued",
            Error::ModeMismatch { .. } => "mode_mismatch",
            Error::StaleRequest { .. } => "stale_request",
            Error::RequestReused { .. } => "request_reused",
            Error::EmptyName => "empty_name",
            Error::NameTooLong { .. } => "name_too_long",
            Error::BadTtl => "bad_ttl",
            Error::DeadlineOverflow => "deadline_overflow",
            Error::TimeWentBackwards { .. } => "time_went_backwards",
            Error::BadConfig(_) => "bad_config",
            Error::CapacityExceeded(_) => "capacity_exceeded",
            Error::Stale { .. } => "stale",
            Error::ZeroToken => "zero_token",
            Error::BadFrame => "bad_frame",
            Error::BufferTooSmall { .. } => "buffer_too_small",
            Error::BadMagic => "bad_magic",
            Error::UnsupportedVersion(_) => "unsupported_version",
            Error::CorruptSnapshot(_) => "corrupt_snapshot",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownSession(s) => write!(f, "unknown session: {s} is not open"),
            Error::NotHolder(s) => write!(f, "not holder: {s} does not hold this lock"),
            Error::NotQueued(s) => write!(f, "not queued: {s} does not wait for this lock"),
            Error::AlreadyQueued(s) => write!(f, "already queued: {s} already waits for this lock"),
            Error::ModeMismatch { held } => {
                write!(f, "mode mismatch: the lock is held {held} by this session")
            }
            Error::EmptyName => f.write_str("empty name: a name needs at least one byte"),
            Error::NameTooLong { len, max } => {
                write!(f, "name too long: {len} bytes, at most {max}")
            }
            Error::BadTtl => f.write_str("bad ttl: a session needs a ttl of at least 1 tick"),
            Error::DeadlineOverflow => {
                f.write_str("deadline overflow: now + ttl does not fit in u64")
            }
            Error::TimeWentBackwards { now, requested } => {
                write!(
                    f,
                    "time went backwards: now is {now}, asked for {requested}"
                )
            }
            Error::StaleRequest { request, latest } => {
                write!(
                    f,
                    "stale request: number {request} is older than the latest, {latest}"
                )
            }
            Error::RequestReused { request } => {
                write!(
                    f,
                    "request reused: number {request} was used for a different input"
                )
            }
            Error::CapacityExceeded(t) => write!(f, "capacity exceeded: the {t} table is full"),
            Error::Stale { token, highest } => {
                write!(
                    f,
                    "stale: {token} is lower than the highest seen, {highest}"
                )
            }
            Error::ZeroToken => f.write_str("zero token: 0 is never a valid fencing token"),
            Error::BadFrame => f.write_str("bad frame: bytes do not decode"),
            Error::BufferTooSmall { need } => write!(f, "buffer too small: need {need} bytes"),
            Error::BadMagic => f.write_str("bad magic: not a fencelock snapshot"),
            Error::UnsupportedVersion(v) => write!(f, "unsupported snapshot version {v}"),
            Error::CorruptSnapshot(why) => write!(f, "corrupt snapshot: {why}"),
            Error::BadConfig(why) => write!(f, "bad config: {why}"),
        }
    }
}
