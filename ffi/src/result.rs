//! Result codes, their messages, and the panic boundary every extern function runs in.
//!
//! The core's error kinds are listed once, in `fencelock::Error::EXAMPLES`. The enum below
//! is only the C declaration of their numbers (cbindgen needs each constant written out);
//! the mapping from a core error, the codes' messages and the tests all come from
//! `Error::EXAMPLES`, and a test checks that every example has a constant of its own name
//! and number, and that every core-range constant has an example.

use fencelock::Error;

/// What every fallible `fencelock_` function returns. Numbers are stable and never reused.
///
/// * `0` success, `1` the end of a drain (not an error).
/// * `1xx`–`6xx`: the core's refusals, numbered exactly as the core's `Error::code()`
///   (1xx session and lock rules, 2xx names and time, 3xx capacity, 4xx fencing,
///   5xx bytes, 6xx the client's lease view).
/// * `9xx`: the ABI layer itself (bad pointers and handles, bad arguments, panics). `904` is retired
///   (it was a placed service's "outputs pending"; a full event ring is now the core's
///   `BUFFER_TOO_SMALL`) and is never reused.
///
/// `fencelock_result_message` writes a code's fixed
/// message into a caller buffer; `fencelock_service_last_error`, `fencelock_gate_last_error`
/// and `fencelock_keeper_last_error` give the detailed message of a handle's last failure.
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
    /// The session's latest request number was reused for a different input.
    RequestReused = 107,
    /// A semaphore acquire with another limit than the live semaphore's, a lock acquire
    /// on a live semaphore, or a semaphore acquire on a lock in use as a plain lock.
    LimitMismatch = 108,
    /// The session does not watch the lock it tried to unwatch.
    NotWatching = 109,
    /// The session already watches this lock.
    AlreadyWatching = 110,
    /// A lock or resource name was empty.
    EmptyName = 201,
    /// A name was longer than the configured maximum.
    NameTooLong = 202,
    /// A time-to-live of 0 ticks.
    BadTtl = 203,
    /// `now + ttl` does not fit in 64 bits.
    DeadlineOverflow = 204,
    /// A `now` (or a keeper's send time) earlier than the current one.
    TimeWentBackwards = 205,
    /// A configuration that cannot work.
    BadConfig = 206,
    /// A permits acquire whose count is not in 1..=limit.
    BadPermits = 207,
    /// A holder label longer than `FENCELOCK_MAX_LABEL_LEN` bytes.
    LabelTooLong = 208,
    /// A fixed-capacity table is full.
    CapacityExceeded = 301,
    /// A fence gate refused a token lower than one it has seen.
    Stale = 401,
    /// Token 0 is never granted, so it is never admitted.
    ZeroToken = 402,
    /// A frame that does not decode as an input.
    BadFrame = 501,
    /// A buffer is too small: a caller buffer (the function's length out-parameter says
    /// how many bytes or items would do; whatever was to be written is kept, so calling
    /// again with a bigger one loses nothing), or a placed service's event ring with less
    /// room than the input could need (drain it; the input changed nothing).
    BufferTooSmall = 502,
    /// Snapshot bytes do not begin with the expected magic.
    BadMagic = 503,
    /// A snapshot of a format version this build does not read.
    UnsupportedVersion = 504,
    /// A snapshot decodes but breaks an invariant (or is truncated).
    CorruptSnapshot = 505,
    /// A keeper was told of an acknowledgement for a keep-alive it has no record of
    /// sending.
    UnknownKeepAlive = 601,
    /// A required pointer argument was NULL.
    NullParameter = 901,
    /// A name was not valid UTF-8.
    InvalidUtf8 = 902,
    /// An enum argument (mode, wait) had a value outside its enum, overlapping memory
    /// where it may not overlap, a buffer length past `PTRDIFF_MAX` (no memory is that
    /// long: nothing is read or written), or an event limit the queue cannot take
    /// (`fencelock_service_set_event_limit`).
    InvalidArgument = 903,
    /// A pointer not aligned for its type: caller-provided memory for a placed service not
    /// aligned as `fencelock_service_layout` said, or any argument (an in-struct, an
    /// out-value, an array) not aligned as its C type is. Checked before anything is read
    /// or written through the pointer; nothing changes.
    MisalignedMemory = 905,
    /// The handle is not a live handle of the function's kind: another kind (a gate
    /// passed as a service), a pointer not aligned as a handle, or a service placed in
    /// the caller's memory after its `_free`. Reported where NULL is, after the other
    /// arguments (the tag is read first: a poisoned handle is `PANIC` before them);
    /// nothing is read past the handle's tag and address, and nothing changes. (A handle
    /// the library allocated stays undefined behaviour to use after its `_free`.)
    InvalidHandle = 906,
    /// The core refused with an error this build of the ABI has no code for (a core
    /// newer than its ABI; never expected: a test checks every core error has its code).
    UnknownError = 998,
    /// A panic was caught at the ABI boundary. The handle involved is poisoned: every
    /// later call on it returns `PANIC`; free it.
    Panic = 999,
}

impl fencelock_result {
    /// Every code. The core-range ones are checked against `Error::EXAMPLES` by a test,
    /// and the whole list against the generated header's constants.
    pub(crate) const ALL: [fencelock_result; 36] = [
        Self::Ok,
        Self::Done,
        Self::UnknownSession,
        Self::NotHolder,
        Self::NotQueued,
        Self::AlreadyQueued,
        Self::ModeMismatch,
        Self::StaleRequest,
        Self::RequestReused,
        Self::LimitMismatch,
        Self::NotWatching,
        Self::AlreadyWatching,
        Self::EmptyName,
        Self::NameTooLong,
        Self::BadTtl,
        Self::DeadlineOverflow,
        Self::TimeWentBackwards,
        Self::BadConfig,
        Self::BadPermits,
        Self::LabelTooLong,
        Self::CapacityExceeded,
        Self::Stale,
        Self::ZeroToken,
        Self::BadFrame,
        Self::BufferTooSmall,
        Self::BadMagic,
        Self::UnsupportedVersion,
        Self::CorruptSnapshot,
        Self::UnknownKeepAlive,
        Self::NullParameter,
        Self::InvalidUtf8,
        Self::InvalidArgument,
        Self::MisalignedMemory,
        Self::InvalidHandle,
        Self::UnknownError,
        Self::Panic,
    ];

    /// The code with this number, if there is one. Cost: O(number of codes).
    pub fn from_code(code: u32) -> Option<fencelock_result> {
        Self::ALL.iter().copied().find(|r| *r as u32 == code)
    }

    /// The code of a core error: the same number as `Error::code()`. Cost: O(codes).
    pub fn from_error(e: &Error) -> fencelock_result {
        match Self::from_code(e.code()) {
            Some(r) if core_range(e.code()) => r,
            _ => Self::UnknownError,
        }
    }

    /// The core error kind this code stands for (`None` for the ABI's own codes).
    /// Cost: O(error kinds).
    pub fn example(self) -> Option<&'static Error> {
        Error::EXAMPLES.iter().find(|e| e.code() == self as u32)
    }

    /// The fixed message of this code: for a core refusal the core's kind name in words
    /// ("unknown session"; the detailed text, with the numbers of a particular refusal,
    /// comes from a handle's `last_error`), for the ABI's own codes a sentence.
    /// Cost: O(message length).
    pub fn message(self) -> String {
        if let Some(e) = self.example() {
            // One word for keep-alive everywhere (the kind is `unknown_keep_alive`).
            return e
                .kind()
                .replace("keep_alive", "keep-alive")
                .replace('_', " ");
        }
        match self {
            Self::Ok => "ok",
            Self::Done => "done: nothing more to drain",
            Self::NullParameter => "null parameter: a required pointer was NULL",
            Self::InvalidUtf8 => "invalid utf-8: a name must be UTF-8 text",
            Self::InvalidArgument => {
                "invalid argument: an enum value outside its enum, overlapping memory, a length past PTRDIFF_MAX, or a bad event limit"
            }
            Self::MisalignedMemory => {
                "misaligned memory: a pointer not aligned for its type (placed memory: as fencelock_service_layout says)"
            }
            Self::InvalidHandle => {
                "invalid handle: not a live handle of this kind (another kind, or a placed service after its free)"
            }
            Self::UnknownError => {
                "unknown error: the core refused with an error this ABI has no code for"
            }
            Self::Panic => "panic: caught at the ABI boundary; the handle is poisoned, free it",
            // Every core-range code has an example (a test checks it).
            _ => "unknown error",
        }
        .to_string()
    }
}

/// Whether `code` is in the range of the core's error codes.
fn core_range(code: u32) -> bool {
    (100..900).contains(&code)
}

/// Why an ABI call failed: a core refusal (kept for its detailed message) or an ABI code.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fail {
    Core(Error),
    Code(fencelock_result),
    /// `PANIC` while a call's arguments were checked: the handle was not changed (only its
    /// tag read), so it is not poisoned (its message says so, unlike a poisoning panic's).
    PanicInArguments,
}

impl Fail {
    pub(crate) fn code(self) -> fencelock_result {
        match self {
            Fail::Core(e) => fencelock_result::from_error(&e),
            Fail::Code(c) => c,
            Fail::PanicInArguments => fencelock_result::Panic,
        }
    }

    /// The detailed message: the core's text for a core refusal.
    pub(crate) fn message(self) -> String {
        match self {
            Fail::Core(e) => e.to_string(),
            Fail::Code(c) => c.message(),
            Fail::PanicInArguments => "panic: caught at the ABI boundary while the call's \
                                       arguments were checked; the handle was not changed \
                                       and is not poisoned"
                .to_string(),
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
/// The body is a block of type `Result<(), Fail>`. (For functions without a handle; the
/// ones on a handle run through `handle::call`, which also records the last error.)
macro_rules! ffi_panic_boundary {
    ($body:block) => {{
        let run = || -> ::core::result::Result<(), $crate::result::Fail> { $body };
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(run)) {
            Ok(Ok(())) => $crate::result::fencelock_result::Ok,
            Ok(Err(fail)) => fail.code(),
            Err(payload) => {
                $crate::result::drop_panic(payload);
                $crate::result::fencelock_result::Panic
            }
        }
    }};
}
pub(crate) use ffi_panic_boundary;

/// Drops a caught panic's payload inside a boundary of its own: a payload whose `Drop`
/// panics (`std::panic::panic_any` of such a value) must not unwind out of an
/// `extern "C"` function, which aborts the host. The payload of that second panic is
/// dropped the same way; after a few in a row (a payload that panics whenever it is
/// dropped, each time with another such payload) the last is leaked. Cost: one
/// `catch_unwind` per payload.
pub(crate) fn drop_panic(payload: Box<dyn std::any::Any + Send>) {
    let mut payload = payload;
    for _ in 0..4 {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload))) {
            Ok(()) => return,
            Err(again) => payload = again,
        }
    }
    std::mem::forget(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic payload whose `Drop` panics too is dropped without unwinding further
    /// (out of an `extern "C"` function that would abort the host).
    #[test]
    fn a_payload_that_panics_when_dropped_does_not_escape() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("dropping the payload");
            }
        }
        let r = ffi_panic_boundary!({ std::panic::panic_any(Bomb) });
        assert_eq!(r, fencelock_result::Panic);
    }

    fn upper_snake(r: fencelock_result) -> String {
        let name = format!("{r:?}");
        let mut s = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                s.push('_');
            }
            s.push(c.to_ascii_uppercase());
        }
        s
    }

    /// The one list of error kinds, `Error::EXAMPLES`, against the ABI's constants: every
    /// example's code is a distinct constant named after the example's kind
    /// (`FENCELOCK_RESULT_` + kind in capitals), and back: every core-range constant is
    /// some example's code, and `from_error` gives the example's own constant.
    #[test]
    fn every_core_error_kind_has_its_own_constant_and_back() {
        let mut seen = Vec::new();
        for e in Error::EXAMPLES {
            let r = fencelock_result::from_error(e);
            assert_ne!(r, fencelock_result::UnknownError, "{e:?} has no constant");
            assert_eq!(r as u32, e.code(), "{e:?}");
            assert_eq!(upper_snake(r), e.kind().to_uppercase(), "{e:?}");
            assert_eq!(r.example().map(Error::code), Some(e.code()));
            assert!(!seen.contains(&(r as u32)), "{e:?}: code used twice");
            seen.push(r as u32);
        }
        for r in fencelock_result::ALL {
            if core_range(r as u32) {
                assert!(seen.contains(&(r as u32)), "{r:?} is no core error kind");
            } else {
                assert_eq!(r.example(), None, "{r:?}");
            }
        }
    }

    /// Every constant of the generated header is in `ALL` with the same number, and every
    /// code of `ALL` is in the header: `ALL` is the enum, complete.
    #[test]
    #[cfg_attr(miri, ignore = "Miri's isolation forbids reading the header file")]
    fn all_lists_exactly_the_header_constants() {
        let header =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/fencelock.h"))
                .unwrap();
        let mut declared = Vec::new();
        for line in header.lines() {
            let line = line.trim().trim_end_matches(',');
            if let Some((name, value)) = line.split_once(" = ") {
                if let Some(name) = name.strip_prefix("FENCELOCK_RESULT_") {
                    declared.push((name.to_string(), value.parse::<u32>().unwrap()));
                }
            }
        }
        let ours: Vec<(String, u32)> = fencelock_result::ALL
            .iter()
            .map(|r| (upper_snake(*r), *r as u32))
            .collect();
        assert_eq!(declared, ours);
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
            (fencelock_result::MisalignedMemory, 905),
            (fencelock_result::InvalidHandle, 906),
            (fencelock_result::UnknownError, 998),
            (fencelock_result::Panic, 999),
        ];
        for (r, n) in abi {
            assert_eq!(r as u32, n, "{r:?}");
        }
        // 904 was retired; 700 never existed.
        assert_eq!(fencelock_result::from_code(904), None);
        assert_eq!(fencelock_result::from_code(700), None);
    }

    #[test]
    fn messages_come_from_the_core_kinds() {
        assert_eq!(fencelock_result::Stale.message(), "stale");
        assert_eq!(
            fencelock_result::UnknownKeepAlive.message(),
            "unknown keep-alive"
        );
        for r in fencelock_result::ALL {
            assert!(r.message().len() >= 2, "{r:?}");
            assert_ne!(r.message(), "unknown error", "{r:?}");
        }
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
