//! `RawLite`: the core's lock service with numbers in and out, under the JS class
//! `LiteService` (`wasm/lite/js/lite.js`), which fills in defaults, checks that a lock
//! name is a well-formed string, and turns events and errnos into the full module's
//! objects and codes.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use fencelock::{
    Config, Error, EventQueue, Mode, Output, ReleaseReason, Reply, SessionId, Tick, VecStorage,
    Wait, MAX_NAME_LEN,
};
use wasm_bindgen::prelude::*;

use fencelock_wasm_args::{self as args, ArgError, ModeCode, WaitCode};

type Core = fencelock::LockService<VecStorage>;

/// The numbers per event in `takeEvents()`.
pub const EVENT_WIDTH: usize = 8;

/// The bound on a tick (`now`), a ttl and a lock-delay in this module: below 2^52, so a
/// deadline (a tick plus a ttl or a lock-delay) stays below 2^53 and every number the
/// module gives back is a safe integer, exact as a JS number. A millisecond clock reaches
/// it in about 142,000 years.
pub const TIME_LIMIT: u64 = 1 << 52;

/// Why `create` refused, for `createErrno()` (0: it did not).
static CREATE_ERRNO: AtomicU32 = AtomicU32::new(0);

/// Why a call was refused: the errno of a core error (`Error::code()`) or of one of the
/// binding's own (`ArgError`, before the core).
#[derive(Clone, Copy)]
struct Refusal(u32);

impl From<Error> for Refusal {
    fn from(e: Error) -> Self {
        Refusal(e.code())
    }
}

impl From<ArgError> for Refusal {
    fn from(a: ArgError) -> Self {
        Refusal(a.errno())
    }
}

const OUT_OF_RANGE: Refusal = Refusal(args::ERRNO_OUT_OF_RANGE);
const BAD_ARGUMENT: Refusal = Refusal(args::ERRNO_BAD_ARGUMENT);

/// A required `u64` given as a JS number: `out_of_range` unless a safe non-negative
/// integer.
#[inline(always)]
fn num(x: f64) -> Result<u64, Refusal> {
    args::safe_u64(x).ok_or(OUT_OF_RANGE)
}

/// A tick, ttl or lock-delay: as [`num`], and below [`TIME_LIMIT`].
fn time(x: f64) -> Result<u64, Refusal> {
    num(x).and_then(|n| {
        if n < TIME_LIMIT {
            Ok(n)
        } else {
            Err(OUT_OF_RANGE)
        }
    })
}

/// An optional `u64` (`undefined` or `null`: none).
fn opt(x: Option<f64>) -> Result<Option<u64>, Refusal> {
    x.map(num).transpose()
}

/// A `u32` (a semaphore's count or limit, a config number); omitted is `out_of_range`.
fn num_u32(x: Option<f64>) -> Result<u32, Refusal> {
    let n = num(x.unwrap_or(f64::NAN))?;
    u32::try_from(n).map_err(|_| OUT_OF_RANGE)
}

/// The name buffer's size: the JS class writes a string of at most `args::NAME_UNITS`
/// UTF-16 units, each at most 3 UTF-8 bytes (a longer one as a 65-byte stand-in the core
/// refuses as `name_too_long`, as the full module does).
pub use args::NAME_ROOM;

/// A lock name: the first `len` bytes of the name buffer, where the JS class wrote it
/// (`args::buffered_name`). The class passes -1 for a value that is not a well-formed
/// string: `bad_argument`, as is any length past the buffer or bytes that are not UTF-8
/// (the class writes neither).
fn name(room: &[u8; NAME_ROOM], len: f64) -> Result<&str, Refusal> {
    args::buffered_name(room, len).ok_or(BAD_ARGUMENT)
}

/// The mode of an acquire from its code, with a permits' count and limit.
fn mode(code: f64, count: Option<f64>, limit: Option<f64>) -> Result<Mode, Refusal> {
    match ModeCode::of(code) {
        Some(ModeCode::Exclusive) => Ok(Mode::Exclusive),
        Some(ModeCode::Shared) => Ok(Mode::Shared),
        Some(ModeCode::Permits) => Ok(Mode::Permits {
            count: num_u32(count)?,
            limit: num_u32(limit)?,
        }),
        None => Err(BAD_ARGUMENT),
    }
}

/// The wait of an acquire from its code, with the tick of a timed wait.
fn wait(code: f64, until: Option<f64>) -> Result<Wait, Refusal> {
    match WaitCode::of(code) {
        Some(WaitCode::None) => Ok(Wait::None),
        Some(WaitCode::Forever) => Ok(Wait::Forever),
        Some(WaitCode::Until) => Ok(Wait::Until(Tick(num(until.unwrap_or(f64::NAN))?))),
        None => Err(BAD_ARGUMENT),
    }
}

/// The shape of the core's inputs on a session alone (keep-alive, close).
type SessionInput =
    fn(&mut Core, Tick, SessionId, Option<u64>, &mut EventQueue) -> Result<Reply, Error>;

/// The shape of the core's inputs on a named lock (release, cancel).
type NamedInput =
    fn(&mut Core, Tick, SessionId, &str, Option<u64>, &mut EventQueue) -> Result<Reply, Error>;

/// The lock service with numbers in and out: the core's `LockService` over heap tables
/// sized at creation (no label table: this module opens no labelled session). Use it
/// through the JS class `LiteService`.
///
/// Each input returns a reply code (`args::reply_code`) or, refused, minus the error's
/// errno (the core's `Error::code()`, or 701 `out_of_range`, 702 `bad_argument`).
#[wasm_bindgen]
pub struct RawLite {
    core: Core,
    /// Events not yet taken, in order, within the event limit.
    events: EventQueue,
    /// The events of the last `takeEvents()`, for their lock names (`takenLock`): the
    /// queue they were kept in, swapped out (so nothing is copied), with the same limit.
    taken: EventQueue,
    /// The number of the last reply.
    value: u64,
    /// Where the JS class writes the next input's lock name (`nameBuffer`). Inline: no
    /// allocation, and its address is stable because wasm-bindgen boxes the service once
    /// and no method takes it by value.
    name: [u8; NAME_ROOM],
}

impl RawLite {
    /// Runs one input: its reply code, or minus the errno of its refusal.
    fn run(
        &mut self,
        call: impl FnOnce(&mut Core, &mut EventQueue, &[u8; NAME_ROOM]) -> Result<Reply, Refusal>,
    ) -> i32 {
        match call(&mut self.core, &mut self.events, &self.name) {
            Ok(reply) => {
                let (code, value) = args::reply_code(&reply);
                self.value = value;
                code
            }
            // Every errno is below 1000. (The class keeps the last one for `lastError()`.)
            Err(f) => -i32::try_from(f.0).unwrap_or(i32::MAX),
        }
    }

    /// One of the inputs on a session alone (keep-alive, close).
    fn of_session(
        &mut self,
        now: f64,
        session: f64,
        request: Option<f64>,
        input: SessionInput,
    ) -> i32 {
        self.run(|core, out, _| {
            let (now, session) = (Tick(time(now)?), SessionId(num(session)?));
            let request = opt(request)?;
            Ok(input(core, now, session, request, out)?)
        })
    }

    /// One of the inputs on a named lock.
    fn named(
        &mut self,
        now: f64,
        session: f64,
        lock: f64,
        request: Option<f64>,
        input: NamedInput,
    ) -> i32 {
        self.run(|core, out, room| {
            let now = Tick(time(now)?);
            let session = SessionId(num(session)?);
            let lock = name(room, lock)?;
            let request = opt(request)?;
            Ok(input(core, now, session, lock, request, out)?)
        })
    }

    fn build(
        [sessions, locks, claims]: [f64; 3],
        lock_delay: Option<f64>,
        max_name_len: Option<f64>,
    ) -> Result<RawLite, Refusal> {
        // The full module's order: the capacities, then the config's numbers.
        let (sessions, locks, claims) = (num(sessions)?, num(locks)?, num(claims)?);
        let config = Config {
            lock_delay: lock_delay.map_or(Ok(0), time)?,
            max_name_len: max_name_len.map_or(Ok(MAX_NAME_LEN as u32), |n| num_u32(Some(n)))?,
            // No input of this module watches a lock (watches are the full module's), so
            // no event limit is sized for watchers.
            max_watchers: 0,
        };
        // The core's order: the config, then the tables (checked, then allocated).
        config.validate()?;
        let rows = args::row_count;
        let (s, l, c) = (rows(sessions)?, rows(locks)?, rows(claims)?);
        let storage = VecStorage::try_with_labels(s, l, c, 0)
            .map_err(|_| Refusal::from(ArgError::OutOfMemory))?;
        let core = Core::new(storage, config)?;
        Ok(RawLite {
            events: EventQueue::new(core.default_event_limit()),
            taken: EventQueue::new(core.default_event_limit()),
            core,
            value: 0,
            name: [0; NAME_ROOM],
        })
    }
}

#[wasm_bindgen]
impl RawLite {
    /// A service of these capacities and config, or `undefined` (`createErrno()` says
    /// why: 701 a number out of range, 206 `bad_config`, 703 `out_of_memory`).
    /// Cost: O(sessions + locks + claims).
    pub fn create(
        sessions: f64,
        locks: f64,
        claims: f64,
        lock_delay: Option<f64>,
        max_name_len: Option<f64>,
    ) -> Option<RawLite> {
        let r = RawLite::build([sessions, locks, claims], lock_delay, max_name_len);
        CREATE_ERRNO.store(r.as_ref().err().map_or(0, |f| f.0), Ordering::Relaxed);
        r.ok()
    }

    /// Why the last `create` refused (its errno), or 0. Cost: O(1).
    #[wasm_bindgen(js_name = createErrno)]
    pub fn create_errno() -> u32 {
        CREATE_ERRNO.load(Ordering::Relaxed)
    }

    /// The core's `open_session`. Cost: the advance, then O(log sessions).
    #[wasm_bindgen(js_name = openSession)]
    pub fn open_session(&mut self, now: f64, ttl: f64) -> i32 {
        self.run(|core, out, _| {
            let (now, ttl) = (Tick(time(now)?), time(ttl)?);
            Ok(core.open_session(now, ttl, out)?)
        })
    }

    /// The core's `keep_alive`. Cost: the advance, then O(1).
    #[wasm_bindgen(js_name = keepAlive)]
    pub fn keep_alive(&mut self, now: f64, session: f64, request: Option<f64>) -> i32 {
        self.of_session(now, session, request, Core::keep_alive)
    }

    /// The core's `close_session`. Cost: the advance, then O(its claims).
    #[wasm_bindgen(js_name = closeSession)]
    pub fn close_session(&mut self, now: f64, session: f64, request: Option<f64>) -> i32 {
        self.of_session(now, session, request, Core::close_session)
    }

    /// The address of this service's name buffer ([`NAME_ROOM`] bytes) in the memory:
    /// the class writes each named input's lock there as UTF-8 and passes its length, so
    /// no string is allocated per call. Cost: O(1).
    #[wasm_bindgen(js_name = nameBuffer)]
    pub fn name_buffer(&self) -> usize {
        self.name.as_ptr() as usize
    }

    /// The core's `acquire`, with the mode and wait as codes (`args::ModeCode`,
    /// `args::WaitCode`) and the lock as the length of its name in the name buffer (-1:
    /// not a well-formed string, `bad_argument`). Cost: the core's acquire.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        now: f64,
        session: f64,
        lock: f64,
        mode: f64,
        wait: f64,
        until: Option<f64>,
        request: Option<f64>,
        count: Option<f64>,
        limit: Option<f64>,
    ) -> i32 {
        self.run(|core, out, room| {
            let now = Tick(time(now)?);
            let session = SessionId(num(session)?);
            let lock = name(room, lock)?;
            let (mode, wait) = (self::mode(mode, count, limit)?, self::wait(wait, until)?);
            let request = opt(request)?;
            Ok(core.acquire(now, session, lock, mode, wait, request, out)?)
        })
    }

    /// The core's `release`, the lock as in `acquire`. Cost: the core's release.
    pub fn release(&mut self, now: f64, session: f64, lock: f64, request: Option<f64>) -> i32 {
        self.named(now, session, lock, request, Core::release)
    }

    /// The core's `cancel`, the lock as in `acquire`. Cost: the core's cancel.
    pub fn cancel(&mut self, now: f64, session: f64, lock: f64, request: Option<f64>) -> i32 {
        self.named(now, session, lock, request, Core::cancel)
    }

    /// The core's `tick`, answered as `ticked` (10) with `now` as the value. Cost: O(1)
    /// when nothing is due, else O(log n) per thing due.
    pub fn tick(&mut self, now: f64) -> i32 {
        self.run(|core, out, _| {
            let now = Tick(time(now)?);
            core.tick(now, out)?;
            Ok(Reply::Ticked { now })
        })
    }

    /// The core's `poll_timeout`, or -1 for none. Cost: O(1).
    #[wasm_bindgen(js_name = pollTimeout)]
    pub fn poll_timeout(&self) -> f64 {
        self.core.poll_timeout().map_or(-1.0, |t| t.0 as f64)
    }

    /// The number of the last answered input. Cost: O(1).
    pub fn value(&self) -> f64 {
        self.value as f64
    }

    /// How many events wait for `takeEvents()`. Cost: O(1).
    #[wasm_bindgen(js_name = pendingEvents)]
    pub fn pending_events(&self) -> u32 {
        u32::try_from(self.events.events().len()).unwrap_or(u32::MAX)
    }

    /// The events since the last take, in order, [`EVENT_WIDTH`] numbers each (see
    /// [`event_row`]); their lock names are read with `takenLock(i)` until the next take.
    /// Cost: O(events).
    #[wasm_bindgen(js_name = takeEvents)]
    pub fn take_events(&mut self) -> Vec<f64> {
        let mut out = Vec::new();
        let n = self.events.events().len();
        if out
            .try_reserve_exact(n.saturating_mul(EVENT_WIDTH))
            .is_err()
        {
            // No room to hand them over: keep them for a later take.
            return out;
        }
        for o in self.events.events() {
            out.extend_from_slice(&event_row(o));
        }
        core::mem::swap(&mut self.events, &mut self.taken);
        self.events.clear();
        out
    }

    /// The lock name of event `i` of the last `takeEvents()`, `undefined` for an event
    /// without one or an `i` past them. Cost: O(name length).
    #[wasm_bindgen(js_name = takenLock)]
    pub fn taken_lock(&self, i: u32) -> Option<String> {
        let o = self.taken.events().get(usize::try_from(i).ok()?)?;
        o.lock().map(|l| String::from(l.as_str()))
    }

    /// The most events kept for `takeEvents()`. Cost: O(1).
    #[wasm_bindgen(js_name = eventLimit)]
    pub fn event_limit(&self) -> f64 {
        self.events.limit().limit() as f64
    }
}

/// A mode as three numbers: its code (0 exclusive, 1 shared, 2 permits), count, limit.
fn mode_numbers(m: Mode) -> [f64; 3] {
    match m {
        Mode::Exclusive => [0.0, 0.0, 0.0],
        Mode::Shared => [1.0, 0.0, 0.0],
        Mode::Permits { count, limit } => [2.0, count.into(), limit.into()],
    }
}

/// An event as numbers: its kind (0 granted, 1 released, 2 session_expired,
/// 3 wait_timed_out; 4 any other, which this module's inputs do not cause: watches are
/// the full module's), the session it is for, whether it names a lock (1) or not (0),
/// the token (0 if none), the mode code (-1 if none), the permits' count and limit, and
/// the reason of a release (0 released, 1 closed, 2 expired; -1 otherwise).
pub fn event_row(o: &Output) -> [f64; EVENT_WIDTH] {
    const NONE: [f64; 3] = [-1.0, 0.0, 0.0];
    let (kind, token, mode, reason) = match o {
        Output::Granted { mode, token, .. } => (0.0, token.0, mode_numbers(*mode), -1.0),
        Output::Released { token, reason, .. } => {
            let r = match reason {
                ReleaseReason::Released => 0.0,
                ReleaseReason::Closed => 1.0,
                ReleaseReason::Expired => 2.0,
            };
            (1.0, token.0, NONE, r)
        }
        Output::SessionExpired { .. } => (2.0, 0, NONE, -1.0),
        Output::WaitTimedOut { .. } => (3.0, 0, NONE, -1.0),
        _ => (4.0, 0, NONE, -1.0),
    };
    let [m, count, limit] = mode;
    [
        kind,
        o.session().0 as f64,
        if o.lock().is_some() { 1.0 } else { 0.0 },
        token as f64,
        m,
        count,
        limit,
        reason,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name buffer is read only within itself and only as UTF-8: -1 (the class's
    /// "not a well-formed string") and any other length or content it never passes are
    /// `bad_argument`, never a panic.
    #[test]
    fn a_name_is_read_only_within_the_buffer_and_as_utf8() {
        let mut room = [0u8; NAME_ROOM];
        room[..5].copy_from_slice(b"lock1");
        assert_eq!(name(&room, 5.0).ok(), Some("lock1"));
        assert_eq!(name(&room, 0.0).ok(), Some(""));
        assert_eq!(
            name(&room, NAME_ROOM as f64).map(str::len).ok(),
            Some(NAME_ROOM)
        );
        for len in [
            -1.0,
            NAME_ROOM as f64 + 1.0,
            1.5,
            f64::NAN,
            f64::INFINITY,
            1e300,
        ] {
            assert_eq!(
                name(&room, len).err().map(|r| r.0),
                Some(BAD_ARGUMENT.0),
                "{len}"
            );
        }
        room[1] = 0xff;
        assert_eq!(name(&room, 5.0).err().map(|r| r.0), Some(BAD_ARGUMENT.0));
        assert_eq!(name(&room, 1.0).ok(), Some("l"));
    }
}
