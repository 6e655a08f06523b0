//! The typed fast path of `LockService`: the hot inputs with plain numbers and a string
//! in, a numeric reply code out, and the reply's number and the events read only when the
//! caller asks. No object is built or parsed per call; the core call is the one the
//! object API makes (the core's `acquire`, `service::named_core`), so the two paths
//! differ only in how arguments and answers cross.
//!
//! A call returns the reply's code (`reply_code`, 0..=12) or, when refused, minus the
//! error's `.errno` (the same error the object API throws, from `lastError()`). Events
//! (those of the advance to `now` included, as on a refusal's `.events`) are kept in
//! order until `takeEvents()`, up to the event limit (`eventLimit()`: by default twice
//! the most one input can emit at capacity): the kept events are the core's bounded
//! sink, so a fast call whose events might not fit is refused by the core with
//! `buffer_too_small` before anything changes, until the host takes them.
//!
//! The id calls (`acquireFastId`, `releaseFastId`) take the lock as the number
//! `internName` gave for it (module `names`) where the others take the string: the same
//! checks in the same order, the id looked up where the name was checked, then the same
//! core call with the stored name. No string crosses per call.
//!
//! A short name crosses without an allocation: for a string of at most
//! `NAME_UNITS` (64) UTF-16 units with no lone surrogate, the glue's `acquireFast` /
//! `releaseFast` (`wasm/js/numbers.js`) write its UTF-8 straight into a buffer the service
//! owns (`nameBuffer`) and call `acquireFastBuf` / `releaseFastBuf` with its length, which
//! read it as `acquireFast` / `releaseFast` read the string (the same checks in the same
//! order, the name where the string was). Any other value goes the general way.

use alloc::string::String;

use fencelock::{EventLimit, EventQueue, LockName, Mode, Reply, SessionId, Tick, Wait};
use fencelock_wasm_args::{ModeCode, WaitCode};
use wasm_bindgen::prelude::*;

use crate::js::{self, cat, Fail};
use crate::json::Answer;
use crate::names::Names;
use crate::service::{named_core, Core, LockService, On};

/// The sink of every core call: the events of one object-API call (no limit: they go
/// back with its answer), or the fast path's, kept until `takeEvents()` up to a limit
/// (the core's queue within its `EventLimit`). One type for both, so the core's inputs
/// are built once into the module.
pub(crate) type Events = EventQueue;

/// An object call's sink: it takes every event the input emits.
pub(crate) fn unbounded() -> Events {
    EventQueue::new(EventLimit::UNBOUNDED)
}

/// The name buffer's size (`fencelock_wasm_args::NAME_UNITS` UTF-16 units, the longest
/// string the glue writes there; a longer one is passed as a string, and a name past 64
/// bytes is refused by the core either way).
use fencelock_wasm_args::NAME_ROOM;

/// What the fast path keeps between calls.
pub(crate) struct Fast {
    /// Events not yet taken, in order, up to the event limit.
    pub(crate) events: Events,
    /// The number of the last reply (`reply_code`).
    value: u64,
    /// The last refusal, until the next fast call.
    fail: Option<Fail>,
    /// Where the glue writes the next call's name (`nameBuffer`). Inline, so it costs no
    /// allocation; its address is stable because wasm-bindgen boxes the service once and
    /// no method takes it by value (the glue asks for the address again whenever the
    /// module's memory has grown).
    name: [u8; NAME_ROOM],
}

impl Fast {
    /// Nothing kept yet; the event limit at its default, twice the bound at capacity.
    pub(crate) fn new(core: &Core) -> Fast {
        Fast {
            events: EventQueue::new(core.default_event_limit()),
            value: 0,
            fail: None,
            name: [0; NAME_ROOM],
        }
    }
}

/// The code and the number of a reply, as every typed call gives them: the numbering
/// the small module shares (`fencelock_wasm_args::reply_code`).
pub(crate) use fencelock_wasm_args::reply_code;

/// A required `u64` given as a JS number: refused exactly as the object API refuses the
/// same number (`js::num`, `out_of_range`); `None` (omitted) as `undefined` is. Inlined
/// into each fast call (it runs several times per call); the refusal is out of line.
#[inline(always)]
fn num(x: Option<f64>, what: &str) -> Result<u64, Fail> {
    match x.and_then(js::safe_u64) {
        Some(n) => Ok(n),
        None => not_num(x, what),
    }
}

/// [`num`]'s refusal.
#[cold]
#[inline(never)]
fn not_num(x: Option<f64>, what: &str) -> Result<u64, Fail> {
    js::num(&x.map_or(JsValue::UNDEFINED, JsValue::from_f64), what)
}

/// An optional `u64` (`undefined` or `null`: none).
fn opt(x: Option<f64>, what: &str) -> Result<Option<u64>, Fail> {
    x.map(|x| num(Some(x), what)).transpose()
}

/// A `u32` (a semaphore's count or limit), checked by `js::num_u32` itself.
fn num_u32(x: Option<f64>, what: &str) -> Result<u32, Fail> {
    js::num_u32(&x.map_or(JsValue::UNDEFINED, JsValue::from_f64), what)
}

/// The mode of a fast acquire: 0 exclusive, 1 shared, 2 `count` of `limit` permits.
fn fast_mode(mode: f64, count: Option<f64>, limit: Option<f64>) -> Result<Mode, Fail> {
    match ModeCode::of(mode) {
        Some(ModeCode::Exclusive) => Ok(Mode::Exclusive),
        Some(ModeCode::Shared) => Ok(Mode::Shared),
        Some(ModeCode::Permits) => Ok(Mode::Permits {
            count: num_u32(count, "mode.permits")?,
            limit: num_u32(limit, "mode.limit")?,
        }),
        None => Err(bad_code("mode", "0 (exclusive), 1 (shared) or 2 (permits)")),
    }
}

/// The wait of a fast acquire: 0 none, 1 forever, 2 until the tick `until`.
fn fast_wait(wait: f64, until: Option<f64>) -> Result<Wait, Fail> {
    match WaitCode::of(wait) {
        Some(WaitCode::None) => Ok(Wait::None),
        Some(WaitCode::Forever) => Ok(Wait::Forever),
        Some(WaitCode::Until) => Ok(Wait::Until(Tick(num(until, "wait.until")?))),
        None => Err(bad_code("wait", "0 (none), 1 (forever) or 2 (until)")),
    }
}

/// The first `len` bytes of the name buffer as the lock name: `bad_argument` for a length
/// that is not a whole number within the buffer or for bytes that are not UTF-8 (the glue
/// never writes either; a caller that calls `acquireFastBuf` itself may).
fn written(room: &[u8; NAME_ROOM], len: f64) -> Result<&str, Fail> {
    fencelock_wasm_args::buffered_name(room, len)
        .ok_or_else(|| Fail::BadArgument("lock is not a name in the name buffer".into()))
}

/// How a fast call names its lock: a JS string, an interned id, or the first `len`
/// bytes of the name buffer.
#[derive(Clone, Copy)]
enum Lock<'a> {
    Text(&'a JsValue),
    Id(f64),
    Buffer(f64),
}

/// A code that names none of the choices: `bad_argument`.
fn bad_code(what: &str, choices: &str) -> Fail {
    Fail::BadArgument(cat(&[what, " must be ", choices]))
}

impl LockService {
    /// Runs one fast input: its reply code, or minus the errno of its refusal.
    fn run(
        &mut self,
        call: impl FnOnce(&mut Core, &mut Events, &Names, &[u8; NAME_ROOM]) -> Result<Reply, Fail>,
    ) -> i32 {
        let (core, fast, names) = self.parts();
        match call(core, &mut fast.events, names, &fast.name) {
            Ok(reply) => {
                let (code, value) = reply_code(&reply);
                fast.value = value;
                fast.fail = None;
                code
            }
            Err(f) => {
                // Every errno is below 1000.
                let errno = i32::try_from(f.errno()).unwrap_or(i32::MAX);
                fast.fail = Some(f);
                -errno
            }
        }
    }
}

impl LockService {
    /// Every fast acquire, whichever way it names the lock: the same checks in the same
    /// order (now, session, the lock, mode, wait, request), then the core's acquire. One
    /// body for the three, so the module holds one copy of it: measured, a body of its own
    /// for the id calls would save them about 9 % of their instructions (4 300 against
    /// 4 700 a pair) for 2.7 KB more module, which the bundle goal weighs against.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn acquire_any(
        &mut self,
        now: f64,
        session: f64,
        lock: Lock<'_>,
        mode: f64,
        wait: f64,
        until: Option<f64>,
        request: Option<f64>,
        count: Option<f64>,
        limit: Option<f64>,
    ) -> i32 {
        self.run(|core, out, names, room| {
            let now = Tick(num(Some(now), "now")?);
            let session = SessionId(num(Some(session), "session")?);
            let mut text = None;
            let lock = lock_name(lock, &mut text, names, room)?;
            let (mode, wait) = (fast_mode(mode, count, limit)?, fast_wait(wait, until)?);
            let request = opt(request, "request")?;
            let r = core.acquire(now, session, lock, mode, wait, request, out);
            r.map_err(|e| Fail::from(text.as_ref().map_or(e, |t: &js::Name| t.error(e))))
        })
    }

    /// Every fast release, whichever way it names the lock (see `acquire_any`).
    #[inline(never)]
    fn release_any(&mut self, now: f64, session: f64, lock: Lock<'_>, request: Option<f64>) -> i32 {
        self.run(|core, out, names, room| {
            let now = Tick(num(Some(now), "now")?);
            let session = SessionId(num(Some(session), "session")?);
            let mut text = None;
            let lock = lock_name(lock, &mut text, names, room)?;
            let request = opt(request, "request")?;
            let r = named_core(core, out, On::Release, now, session, lock, request);
            r.map_err(|e| Fail::from(text.as_ref().map_or(e, |t: &js::Name| t.error(e))))
        })
    }
}

/// The lock a fast call names, checked where the string is checked: a string as every
/// name argument is (kept in `text`, whose `error` fixes a long string's length), an id
/// as `internName` gave it, the name buffer as `written` reads it.
fn lock_name<'a>(
    lock: Lock<'_>,
    text: &'a mut Option<js::Name>,
    names: &'a Names,
    room: &'a [u8; NAME_ROOM],
) -> Result<&'a str, Fail> {
    Ok(match lock {
        Lock::Text(v) => text.insert(js::name(v, "lock")?).as_str(),
        Lock::Id(id) => names.get(id)?.as_str(),
        Lock::Buffer(len) => written(room, len)?,
    })
}

#[wasm_bindgen]
impl LockService {
    /// Typed fast `acquire`: `mode` 0 exclusive, 1 shared, 2 permits (`count` of a
    /// semaphore's `limit`); `wait` 0 none, 1 forever, 2 until the tick `until`; `request`
    /// optional. Returns the reply code (granted 3, queued 4, busy 5, hold_ended 8,
    /// wait_ended 9; `replyValue()` has the token or position) or minus the errno of the
    /// refusal (`lastError()`: what `acquire` throws for these arguments). Events go to
    /// `takeEvents()`. Numbers are JS numbers (not bigints): one that is not a safe
    /// non-negative integer is `out_of_range`, a code out of its list `bad_argument`,
    /// checked in `acquire`'s order before the core is called.
    /// Cost: the core's acquire plus the name's crossing (a short name written into the
    /// service's name buffer, no allocation); no object is built.
    #[wasm_bindgen(js_name = acquireFast, unchecked_return_type = "FastCode")]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_fast(
        &mut self,
        now: f64,
        session: f64,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        #[wasm_bindgen(unchecked_param_type = "FastMode")] mode: f64,
        #[wasm_bindgen(unchecked_param_type = "FastWait")] wait: f64,
        until: Option<f64>,
        request: Option<f64>,
        count: Option<f64>,
        limit: Option<f64>,
    ) -> i32 {
        self.acquire_any(
            now,
            session,
            Lock::Text(&lock),
            mode,
            wait,
            until,
            request,
            count,
            limit,
        )
    }

    /// Typed fast `release`: returns 6 (released; `replyValue()` is the token) or minus
    /// the errno of the refusal (`lastError()`), as `releaseFast`'s object twin `release`
    /// would throw. Events go to `takeEvents()`. Cost: the core's release plus the name's
    /// crossing (as `acquireFast`).
    #[wasm_bindgen(js_name = releaseFast, unchecked_return_type = "FastCode")]
    pub fn release_fast(
        &mut self,
        now: f64,
        session: f64,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        request: Option<f64>,
    ) -> i32 {
        self.release_any(now, session, Lock::Text(&lock), request)
    }

    /// The address of the name buffer in the module's memory ([`NAME_ROOM`] bytes), for
    /// the glue's `acquireFast` / `releaseFast`. Internal: no TypeScript type. Cost: O(1).
    #[wasm_bindgen(js_name = nameBuffer, skip_typescript)]
    pub fn name_buffer(&self) -> usize {
        self.fast.name.as_ptr() as usize
    }

    /// `acquireFast` with the lock name's UTF-8 in the first `len` bytes of the name
    /// buffer, where the glue wrote it: the same checks in the same order, the name read
    /// where the string was (`bad_argument` for a `len` past the buffer or bytes that are
    /// not UTF-8). Internal: no TypeScript type. Cost: the core's acquire.
    #[wasm_bindgen(js_name = acquireFastBuf, skip_typescript)]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_fast_buf(
        &mut self,
        now: f64,
        session: f64,
        len: f64,
        mode: f64,
        wait: f64,
        until: Option<f64>,
        request: Option<f64>,
        count: Option<f64>,
        limit: Option<f64>,
    ) -> i32 {
        self.acquire_any(
            now,
            session,
            Lock::Buffer(len),
            mode,
            wait,
            until,
            request,
            count,
            limit,
        )
    }

    /// `releaseFast` with the lock name in the name buffer (see `acquireFastBuf`).
    /// Internal: no TypeScript type. Cost: the core's release.
    #[wasm_bindgen(js_name = releaseFastBuf, skip_typescript)]
    pub fn release_fast_buf(
        &mut self,
        now: f64,
        session: f64,
        len: f64,
        request: Option<f64>,
    ) -> i32 {
        self.release_any(now, session, Lock::Buffer(len), request)
    }

    /// Stores the lock name `name` for the id calls (`acquireFastId`, `releaseFastId`)
    /// and returns its id, a number. The name is judged as every lock name is (the core's
    /// `LockName::new`): not a string or a lone surrogate `bad_argument`, `empty_name`,
    /// `name_too_long` (past 64 bytes; a service's smaller `maxNameLen` is the core's to
    /// apply at the acquire, as for a string). Each call stores a new row, even for a name
    /// stored before. The table holds at most `capacity().locks` names: past that,
    /// `capacity_exceeded` with `.table` `"names"` (`forgetName` frees a row). Interned
    /// names are not part of a snapshot. Nothing about the locks changes.
    /// Cost: O(name length).
    #[wasm_bindgen(js_name = internName)]
    pub fn intern_name(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "string")] name: JsValue,
    ) -> Result<f64, JsValue> {
        let n = js::name(&name, "name")?;
        let name = LockName::new(n.as_str()).map_err(|e| Fail::from(n.error(e)))?;
        Ok(self.names.intern(name)? as f64)
    }

    /// Forgets an interned name: its id is `unknown_name` from now on (a later name gets
    /// another id), its row free. Throws `unknown_name` for an id not interned (nothing
    /// changes), `out_of_range` for a number that is not a safe non-negative integer or a
    /// value that is not a number (or a bigint, taken as every `u64` is): it is not
    /// converted, so `"2"` or `true` never forgets id 2. Locks held under the name are
    /// untouched. Cost: O(1).
    #[wasm_bindgen(js_name = forgetName)]
    pub fn forget_name(
        &mut self,
        #[wasm_bindgen(js_name = nameId, unchecked_param_type = "number")] name_id: JsValue,
    ) -> Result<(), JsValue> {
        // Not a hot call: the id crosses as a value, checked like every number argument,
        // rather than as an `f64` the engine converts from anything before the call.
        let id = match name_id.as_f64() {
            Some(x) => x,
            // A bigint in range is a u64; past 2^53 - 1 it is refused here, with its own
            // digits (as an `f64` it would be refused with a rounded number it never was).
            None => {
                let n = js::num(&name_id, "nameId")?;
                if n > js::MAX_SAFE {
                    return Err(Fail::OutOfRange(cat(&[
                        "nameId must be at most 2^53-1, got ",
                        js::Dec::new(n).as_str(),
                    ]))
                    .into());
                }
                n as f64
            }
        };
        Ok(self.names.forget(id)?)
    }

    /// `acquireFast` with the lock given by an id from `internName`: the same checks in the
    /// same order, the id where the name was (`unknown_name` for an id not interned or
    /// forgotten, before the core is called, so nothing changes), then the same core call
    /// with the stored name. Cost: the core's acquire; no string crosses.
    #[wasm_bindgen(js_name = acquireFastId, unchecked_return_type = "FastCode")]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_fast_id(
        &mut self,
        now: f64,
        session: f64,
        #[wasm_bindgen(js_name = nameId)] name_id: f64,
        #[wasm_bindgen(unchecked_param_type = "FastMode")] mode: f64,
        #[wasm_bindgen(unchecked_param_type = "FastWait")] wait: f64,
        until: Option<f64>,
        request: Option<f64>,
        count: Option<f64>,
        limit: Option<f64>,
    ) -> i32 {
        self.acquire_any(
            now,
            session,
            Lock::Id(name_id),
            mode,
            wait,
            until,
            request,
            count,
            limit,
        )
    }

    /// `releaseFast` with the lock given by an id from `internName` (`unknown_name`, before
    /// the core, for an id not interned). Cost: the core's release; no string crosses.
    #[wasm_bindgen(js_name = releaseFastId, unchecked_return_type = "FastCode")]
    pub fn release_fast_id(
        &mut self,
        now: f64,
        session: f64,
        #[wasm_bindgen(js_name = nameId)] name_id: f64,
        request: Option<f64>,
    ) -> i32 {
        self.release_any(now, session, Lock::Id(name_id), request)
    }

    /// The number of the last fast call's reply: a token, position, deadline, tick or
    /// session (see `acquireFast`), exact (a bigint past 2^53-1). Cost: O(1).
    #[wasm_bindgen(js_name = replyValue, unchecked_return_type = "U64")]
    pub fn reply_value(&self) -> JsValue {
        js::number(self.fast.value)
    }

    /// How many events the fast calls have left for `takeEvents()`. Cost: O(1).
    #[wasm_bindgen(js_name = pendingEvents)]
    pub fn pending_events(&self) -> u32 {
        u32::try_from(self.fast.events.events().len()).unwrap_or(u32::MAX)
    }

    /// The events of the fast calls since the last take, in order (the objects the
    /// object API returns as `events`), and forgets them. Cost: O(events).
    #[wasm_bindgen(js_name = takeEvents, unchecked_return_type = "Output[]")]
    pub fn take_events(&mut self) -> Result<JsValue, JsValue> {
        let list = Answer::build_events(self.fast.events.events()).parse(false)?;
        self.fast.events.clear();
        Ok(list)
    }

    /// The most events the fast calls keep for `takeEvents()`: twice the most one input
    /// can emit at capacity (sessions + 2 × claims + (2 × claims + 1) × min(maxWatchers,
    /// claims)) unless `setEventLimit` changed it. A fast call whose events might not fit
    /// (`pendingEvents()` plus `maxEvents()` over the limit) is refused with
    /// `buffer_too_small` (`lastError()`), nothing changed, not even time: take the
    /// events and call again. The object API's calls return their events and keep none,
    /// so no limit applies to them. Cost: O(1).
    #[wasm_bindgen(js_name = eventLimit)]
    pub fn event_limit(&self) -> f64 {
        self.fast.events.limit().limit() as f64
    }

    /// Sets `eventLimit()`: at least the most one input can emit at capacity (above), so
    /// no limit can refuse a call while nothing is kept; a limit past 2^32 - 1 (more
    /// events than a wasm32 memory holds) is kept as 2^32 - 1, as many as memory holds. A limit below the events kept now refuses fast calls
    /// until `takeEvents()`. Throws `bad_argument` below that bound, `out_of_range` for
    /// a number that is not a safe non-negative integer; nothing changes. Cost: O(1).
    #[wasm_bindgen(js_name = setEventLimit)]
    pub fn set_event_limit(&mut self, limit: f64) -> Result<(), JsValue> {
        let n = usize::try_from(num(Some(limit), "limit")?).unwrap_or(usize::MAX);
        self.fast.events.set_limit(n).map_err(|_| {
            let why = "limit is below the most events one input can emit at capacity";
            Fail::BadArgument(String::from(why)).into()
        })
    }

    /// The error of the last fast call if it was refused (what the object API throws for
    /// the same input, without `.events`: those are in `takeEvents()`), else `null`.
    /// Cost: O(message).
    /// Once read, it is forgotten (`null` until the next refusal).
    #[wasm_bindgen(js_name = lastError, unchecked_return_type = "FencelockError | null")]
    pub fn last_error(&mut self) -> JsValue {
        self.fast.fail.take().map_or(JsValue::NULL, JsValue::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name buffer is read only within itself and only as UTF-8: any other length or
    /// content (which the glue never passes) is `bad_argument`, never a panic.
    #[test]
    fn the_name_buffer_is_read_only_within_bounds_and_as_utf8() {
        let mut room = [0u8; NAME_ROOM];
        room[..5].copy_from_slice(b"lock1");
        assert!(matches!(written(&room, 5.0), Ok("lock1")));
        assert!(matches!(written(&room, 0.0), Ok("")));
        assert!(matches!(written(&room, NAME_ROOM as f64), Ok(s) if s.len() == NAME_ROOM));
        for len in [
            NAME_ROOM as f64 + 1.0,
            -1.0,
            1.5,
            f64::NAN,
            f64::INFINITY,
            1e300,
        ] {
            assert!(
                matches!(written(&room, len), Err(Fail::BadArgument(_))),
                "length {len}"
            );
        }
        room[1] = 0xff;
        assert!(matches!(written(&room, 5.0), Err(Fail::BadArgument(_))));
        assert!(matches!(written(&room, 1.0), Ok("l")));
    }

    /// The glue (`wasm/js/numbers.js`) writes at most the buffer's size: its two
    /// constants are copies of `fencelock_wasm_args`', held to them here.
    #[test]
    fn the_glue_writes_no_more_than_the_name_buffer_holds() {
        let js = include_str!("../js/numbers.js");
        let units = fencelock_wasm_args::NAME_UNITS;
        assert!(js.contains(&alloc::format!("const NAME_UNITS = {units};")));
        assert!(js.contains("const NAME_ROOM = 3 * NAME_UNITS;"));
        assert_eq!(NAME_ROOM, 3 * units);
    }
}
