//! Result codes, their messages, and the panic boundary every extern function runs in.

use fencelock::Error;

/// What every fallible `fencelock_` function returns. Numbers are stable and never reused.
///
/// * `0` success, `1` the end of a drain (not an error).
/// * `1xx`–`5xx`: the core's refusals, numbered exactly as the core's `Error::code()`
///   (1xx session and lock rules, 2xx names and time, 3xx capacity, 4xx fencing,
///   5xx bytes). A refused input changed nothing and queued nothing.
/// * `9xx`: the ABI layer itself (bad pointers, bad arguments, panics).
///
/// [`fencelock_result_message`] writes a code's message into a caller buffer;
/// `fencelock_service_last_error` gives the detailed message of a service's last refusal.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_result {
    /// Success.
    Ok = 0,
    /// A drain found nothing more (`fencelock_service_poll_output`). Not an error.
    Done = 1,
    /// No live session has this id (never opened, closed, or expired).
    UnknownSession = 101,
    /// The session does not hold the lock it tried to release.
    NotHolder = 102,
    /// The session has no queued acquire on the lock it tried to cancel.
    NotQueued = 103,
    /// The session already waits for this lock.
    AlreadyQueued = 104,
    /// The session holds the lock in the other mode (no upgrade or downgrade).
    ModeMismatch = 105,
    /// A request number older than the session's latest one (a stale retry).
    StaleRequest = 106,
    /// The session's latest request number was reused for a different kind of input.
    RequestReused = 107,
    /// A lock or resource name was empty.
    EmptyName = 201,
    /// A name was longer than the configured maximum.
    NameTooLong = 202,
    /// A time-to-live of 0 ticks.
    BadTtl = 203,
    /// `now + ttl` does not fit in 64 bits.
    DeadlineOverflow = 204,
    /// A tick (or a keeper's send time) earlier than the current one.
    TimeWentBackwards = 205,
    /// A configuration that cannot work.
    BadConfig = 206,
    /// A fixed-capacity table is full.
    CapacityExceeded = 301,
    /// A fence gate refused a token lower than one it has seen.
    Stale = 401,
    /// Token 0 is never granted, so it is never admitted.
    ZeroToken = 402,
    /// A frame that does not decode as an input.
    BadFrame = 501,
    /// A caller buffer is too small; the function's length out-parameter says how many
    /// bytes (or items) would do. Whatever was to be written is kept (queued outputs stay
    /// queued), so calling again with a bigger buffer loses nothing.
    BufferTooSmall = 502,
    /// Snapshot bytes do not begin with the expected magic.
    BadMagic = 503,
    /// A snapshot of a format version this build does not read.
    UnsupportedVersion = 504,
    /// A snapshot decodes but breaks an invariant (or is truncated).
    CorruptSnapshot = 505,
    /// A required pointer argument was NULL.
    NullParameter = 901,
    /// A name was not valid UTF-8.
    InvalidUtf8 = 902,
    /// An enum argument (mode, wait) had a value outside its enum.
    InvalidArgument = 903,
    /// A service placed in caller memory refuses a new input until the outputs of the
    /// previous one are drained (its fixed queue is sized for one input's outputs).
    OutputsPending = 904,
    /// Caller-provided memory is not aligned as `fencelock_service_layout` said.
    MisalignedMemory = 905,
    /// The core refused with an error this build of the ABI has no code for (a core
    /// newer than its ABI; never expected).
    UnknownError = 998,
    /// A panic was caught at the ABI boundary. The handle involved is poisoned: every
    /// later call on it returns `PANIC`; free it.
    Panic = 999,
}

impl fencelock_result {
    /// Every code, for tests and for [`from_code`](Self::from_code).
    pub(crate) const ALL: [fencelock_result; 30] = [
        Self::Ok,
        Self::Done,
        Self::UnknownSession,
        Self::NotHolder,
        Self::NotQueued,
        Self::AlreadyQueued,
        Self::ModeMismatch,
        Self::StaleRequest,
        Self::RequestReused,
        Self::EmptyName,
        Self::NameTooLong,
        Self::BadTtl,
        Self::DeadlineOverflow,
        Self::TimeWentBackwards,
        Self::BadConfig,
        Self::CapacityExceeded,
        Self::Stale,
        Self::ZeroToken,
        Self::BadFrame,
        Self::BufferTooSmall,
        Self::BadMagic,
        Self::UnsupportedVersion,
        Self::CorruptSnapshot,
        Self::NullParameter,
        Self::InvalidUtf8,
        Self::InvalidArgument,
        Self::OutputsPending,
        Self::MisalignedMemory,
        Self::UnknownError,
        Self::Panic,
    ];

    /// The code with this number, if there is one. Cost: O(number of codes).
    pub fn from_code(code: u32) -> Option<fencelock_result> {
        Self::ALL.iter().copied().find(|r| *r as u32 == code)
    }

    /// The code of a core error: the same number as `Error::code()`. Cost: O(1).
    pub fn from_error(e: &Error) -> fencelock_result {
        match Self::from_code(e.code()) {
            Some(r) if e.code() >= 100 && e.code() < 900 => r,
            _ => Self::UnknownError,
        }
    }

    /// The fixed message of this code (the core's detailed text, with the numbers of a
    /// particular refusal, comes from `fencelock_service_last_error`). Cost: O(1).
    pub fn message(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Done => "done: nothing more to drain",
            Self::UnknownSession => "unknown session: no live session has this id",
            Self::NotHolder => "not holder: the session does not hold this lock",
            Self::NotQueued => "not queued: the session does not wait for this lock",
            Self::AlreadyQueued => "already queued: the session already waits for this lock",
            Self::ModeMismatch => "mode mismatch: the session holds this lock in the other mode",
            Self::StaleRequest => "stale request: the request number is older than the latest",
            Self::RequestReused => {
                "request reused: the latest request number was used for a different input"
            }
            Self::EmptyName => "empty name: a name needs at least one byte",
            Self::NameTooLong => "name too long: longer than the configured maximum",
            Self::BadTtl => "bad ttl: a session needs a ttl of at least 1 tick",
            Self::DeadlineOverflow => "deadline overflow: now + ttl does not fit in 64 bits",
            Self::TimeWentBackwards => "time went backwards: earlier than the current time",
            Self::BadConfig => "bad config: the configuration cannot work",
            Self::CapacityExceeded => "capacity exceeded: a fixed-capacity table is full",
            Self::Stale => "stale: the token is lower than the highest seen for the resource",
            Self::ZeroToken => "zero token: 0 is never a valid fencing token",
            Self::BadFrame => "bad frame: the bytes do not decode as one input",
            Self::BufferTooSmall => {
                "buffer too small: the length out-parameter says what is needed"
            }
            Self::BadMagic => "bad magic: not a fencelock snapshot",
            Self::UnsupportedVersion => {
                "unsupported version: a snapshot format this build does not read"
            }
            Self::CorruptSnapshot => "corrupt snapshot: truncated or breaks an invariant",
            Self::NullParameter => "null parameter: a required pointer was NULL",
            Self::InvalidUtf8 => "invalid utf-8: a name must be UTF-8 text",
            Self::InvalidArgument => "invalid argument: an enum value outside its enum",
            Self::OutputsPending => {
                "outputs pending: drain the previous input's outputs before the next input"
            }
            Self::MisalignedMemory => "misaligned memory: align as fencelock_service_layout says",
            Self::UnknownError => {
                "unknown error: the core refused with an error this ABI has no code for"
            }
            Self::Panic => "panic: caught at the ABI boundary; the handle is poisoned, free it",
        }
    }
}

/// Why an ABI call failed: a core refusal (kept for its detailed message) or an ABI code.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fail {
    Core(Error),
    Code(fencelock_result),
}

impl Fail {
    pub(crate) fn code(self) -> fencelock_result {
        match self {
            Fail::Core(e) => fencelock_result::from_error(&e),
            Fail::Code(c) => c,
        }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Core(e)
    }
}

impl From<fencelock_result> for Fail {
    fn from(c: fencelock_result) -> Self {
        Fail::Code(c)
    }
}

/// Runs an extern function's body, turning `Err` into its code and a panic into `PANIC`.
/// The body is a block of type `Result<(), Fail>`.
macro_rules! ffi_panic_boundary {
    ($body:block) => {{
        let run = || -> ::core::result::Result<(), $crate::result::Fail> { $body };
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(run)) {
            Ok(Ok(())) => $crate::result::fencelock_result::Ok,
            Ok(Err(fail)) => fail.code(),
            Err(_) => $crate::result::fencelock_result::Panic,
        }
    }};
}
pub(crate) use ffi_panic_boundary;

#[cfg(test)]
mod tests {
    use super::*;
    use fencelock::{Mode, SessionId, Table, Tick, Token};

    fn snake(name: &str) -> String {
        let mut s = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                s.push('_');
            }
            s.push(c.to_ascii_lowercase());
        }
        s
    }

    /// Every core error crosses with the core's own number, as the code of the same name.
    #[test]
    fn every_core_error_keeps_its_number_and_name() {
        let s = SessionId(1);
        let all = [
            Error::UnknownSession(s),
            Error::NotHolder(s),
            Error::NotQueued(s),
            Error::AlreadyQueued(s),
            Error::ModeMismatch { held: Mode::Shared },
            Error::EmptyName,
            Error::NameTooLong { len: 9, max: 8 },
            Error::BadTtl,
            Error::DeadlineOverflow,
            Error::TimeWentBackwards {
                now: Tick(2),
                requested: Tick(1),
            },
            Error::StaleRequest {
                request: 1,
                latest: 2,
            },
            Error::RequestReused { request: 1 },
            Error::CapacityExceeded(Table::Claims),
            Error::Stale {
                token: Token(1),
                highest: Token(2),
            },
            Error::ZeroToken,
            Error::BadFrame,
            Error::BufferTooSmall { need: 3 },
            Error::BadMagic,
            Error::UnsupportedVersion(9),
            Error::CorruptSnapshot("x"),
            Error::BadConfig("x"),
        ];
        for e in all {
            let r = fencelock_result::from_error(&e);
            assert_eq!(r as u32, e.code(), "{e:?}");
            assert_eq!(snake(&format!("{r:?}")), e.kind(), "{e:?}");
        }
        // 21 core codes + OK, DONE and the 7 ABI codes: every code is accounted for.
        assert_eq!(all.len() + 9, fencelock_result::ALL.len());
    }

    /// The numbers are the ABI: they never change and are never reused.
    #[test]
    fn codes_are_distinct_and_stable() {
        let mut seen: Vec<u32> = fencelock_result::ALL.iter().map(|r| *r as u32).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), fencelock_result::ALL.len());
        let abi = [
            (fencelock_result::Ok, 0),
            (fencelock_result::Done, 1),
            (fencelock_result::NullParameter, 901),
            (fencelock_result::InvalidUtf8, 902),
            (fencelock_result::InvalidArgument, 903),
            (fencelock_result::OutputsPending, 904),
            (fencelock_result::MisalignedMemory, 905),
            (fencelock_result::UnknownError, 998),
            (fencelock_result::Panic, 999),
        ];
        for (r, n) in abi {
            assert_eq!(r as u32, n, "{r:?}");
        }
        assert_eq!(fencelock_result::from_code(700), None);
    }

    #[test]
    fn the_boundary_turns_a_panic_into_a_code() {
        let r = ffi_panic_boundary!({
            if std::hint::black_box(true) {
                panic!("boom (expected by this test)");
            }
            Ok(())
        });
        assert_eq!(r, fencelock_result::Panic);
        let r = ffi_panic_boundary!({ Err(Fail::Core(Error::BadTtl)) });
        assert_eq!(r, fencelock_result::BadTtl);
    }
}
