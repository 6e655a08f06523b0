//! `LockService`: the core's lock service for JavaScript.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use fencelock::{
    Config, Error, Input, LockName, Output, SessionId, Tick, VecStorage, MAX_FRAME_LEN,
    MAX_NAME_LEN,
};
use js_sys::Array;
use wasm_bindgen::prelude::*;

use crate::js::{self, Fail, Obj, MAX_SAFE};
use crate::json;

/// The core's limit on rows per table, checked here before allocating anything.
const MAX_ROWS: u64 = i32::MAX as u64;

pub(crate) fn rows<T: Clone>(n: u64, empty: T, what: &str) -> Result<Vec<T>, Fail> {
    if n > MAX_ROWS {
        return Err(Error::BadConfig("a table has more than 2^31 - 1 rows").into());
    }
    let n = n as usize;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Fail::OutOfMemory(format!("cannot allocate {n} rows for the {what} table")))?;
    v.resize(n, empty);
    Ok(v)
}

/// The core's heap tables, sized from a `{sessions, locks, claims}` object and allocated
/// fallibly (`VecStorage::try_new`): a capacity too large for the wasm memory is an
/// `out_of_memory` error, not an abort.
fn storage(caps: &JsValue) -> Result<VecStorage, Fail> {
    let caps = js::object(caps, "capacities")?;
    let s = js::num(&js::get(caps, "sessions")?, "sessions")?;
    let l = js::num(&js::get(caps, "locks")?, "locks")?;
    let c = js::num(&js::get(caps, "claims")?, "claims")?;
    if s > MAX_ROWS || l > MAX_ROWS || c > MAX_ROWS {
        return Err(Error::BadConfig("a table has more than 2^31 - 1 rows").into());
    }
    VecStorage::try_new(s as usize, l as usize, c as usize).map_err(|_| {
        Fail::OutOfMemory(format!(
            "cannot allocate tables of {s} sessions, {l} locks, {c} claims"
        ))
    })
}

type Core = fencelock::LockService<VecStorage>;

/// The lock service (core's `LockService` over heap tables sized at construction).
///
/// Inputs return the outputs they produced, in order, as an array of tagged objects; a
/// refused input throws and changes nothing. Queries never change anything. Time moves
/// only through `tick(now)`; call it no later than `pollTimeout()` says.
#[wasm_bindgen]
pub struct LockService {
    core: Core,
}

/// Collects outputs as the JSON text of an `Output[]` and parses it once at the end: one
/// crossing into JS per input instead of one per property (in node, an acquire/release
/// loop runs about 1.5 times faster than building the objects property by property). The
/// guards in `LockService::guard_*` make sure every number an input can emit fits a JS
/// number before the input is applied, so the conversion cannot fail after the state has
/// changed. An input that emits nothing (e.g. a `tick` with nothing due) builds no text and
/// skips `JSON.parse`: it returns a fresh empty array.
struct Sink {
    json: String,
    failed: Option<Fail>,
}

impl Sink {
    fn new() -> Sink {
        Sink {
            // Empty until the first output: no allocation for an input that emits nothing.
            json: String::new(),
            failed: None,
        }
    }
    fn push(&mut self, o: Output) {
        self.json.push(if self.json.is_empty() { '[' } else { ',' });
        if let Err(e) = json::output(&mut self.json, &o) {
            self.failed.get_or_insert(e);
        }
    }
    fn finish(mut self, r: Result<(), Error>) -> Result<Array, JsValue> {
        r.map_err(Fail::from)?;
        if let Some(f) = self.failed {
            return Err(f.into());
        }
        if self.json.is_empty() {
            // Fast path: nothing emitted, so no text to build or parse.
            return Ok(Array::new());
        }
        self.json.push(']');
        match js_sys::JSON::parse(&self.json) {
            Ok(v) => Ok(v.unchecked_into()),
            // Only an exhausted JS heap makes JSON.parse fail on this text.
            Err(_) => Err(Fail::OutOfMemory(String::from("cannot build the outputs")).into()),
        }
    }
}

fn request(v: &JsValue) -> Result<Option<u64>, Fail> {
    js::opt_num(v, "request")
}

fn session_arg(v: &JsValue) -> Result<SessionId, Fail> {
    js::num(v, "session").map(SessionId)
}

/// An `Input` from a tagged object (see the `Input` type in the `.d.ts`).
fn parse_input(v: &JsValue) -> Result<Input, Fail> {
    let v = js::object(v, "input")?;
    let ty = js::get(v, "type")?;
    let field = |k: &str| js::get(v, k);
    let name =
        |k: &str| -> Result<LockName, Fail> { Ok(LockName::new(&js::string(&field(k)?, k)?)?) };
    Ok(match ty.as_string().as_deref() {
        Some("openSession") => Input::OpenSession {
            ttl: js::num(&field("ttl")?, "ttl")?,
        },
        Some("keepAlive") => Input::KeepAlive {
            session: session_arg(&field("session")?)?,
            request: request(&field("request")?)?,
        },
        Some("closeSession") => Input::CloseSession {
            session: session_arg(&field("session")?)?,
            request: request(&field("request")?)?,
        },
        Some("acquire") => Input::Acquire {
            session: session_arg(&field("session")?)?,
            lock: name("lock")?,
            mode: js::parse_mode(&field("mode")?)?,
            wait: js::parse_wait(&field("wait")?)?,
            request: request(&field("request")?)?,
        },
        Some("release") => Input::Release {
            session: session_arg(&field("session")?)?,
            lock: name("lock")?,
            request: request(&field("request")?)?,
        },
        Some("cancel") => Input::Cancel {
            session: session_arg(&field("session")?)?,
            lock: name("lock")?,
            request: request(&field("request")?)?,
        },
        Some("tick") => Input::Tick {
            now: Tick(js::num(&field("now")?, "now")?),
        },
        _ => {
            return Err(Fail::BadArgument(String::from(
                "input.type must be one of openSession, keepAlive, closeSession, acquire, \
                 release, cancel, tick",
            )))
        }
    })
}

impl LockService {
    /// Every session id and token an input other than open/keep-alive can emit is at most
    /// `next_session_id - 1`, or `revision + claims` (one grant per claim at most), so
    /// checking these two bounds before applying the input keeps every output exact.
    /// They are only ever hit by a service whose counters came from frames or a snapshot.
    fn guard_counters(&self) -> Result<(), Fail> {
        let next = self.core.next_session_id().0;
        let claims = u64::from(self.core.capacity().claims);
        let rev = self.core.revision();
        if next > MAX_SAFE || rev.saturating_add(claims) > MAX_SAFE {
            return Err(Fail::OutOfRange(format!(
                "the service's counters (next session id {next}, revision {rev}) are too \
                 close to 2^53-1 for its outputs to be exact JS numbers"
            )));
        }
        Ok(())
    }

    /// `now + ttl` must be a safe integer: it is the `expiresAt` the input emits.
    fn guard_deadline(&self, ttl: u64) -> Result<(), Fail> {
        let now = self.core.now().0;
        if now.saturating_add(ttl) > MAX_SAFE {
            return Err(Fail::OutOfRange(format!(
                "now + ttl = {now} + {ttl} is above 2^53-1"
            )));
        }
        Ok(())
    }

    fn apply(&mut self, input: Input) -> Result<Array, JsValue> {
        self.guard_counters()?;
        match &input {
            Input::OpenSession { ttl } if *ttl > 0 => self.guard_deadline(*ttl)?,
            Input::KeepAlive { session, .. } => {
                if let Some(info) = self.core.session(*session) {
                    self.guard_deadline(info.ttl)?;
                }
            }
            _ => {}
        }
        let mut sink = Sink::new();
        let r = self.core.handle(input, &mut |o| sink.push(o));
        sink.finish(r)
    }

    fn lock_name(v: &JsValue, what: &str) -> Result<LockName, Fail> {
        Ok(LockName::new(&js::string(v, what)?)?)
    }
}

#[wasm_bindgen]
impl LockService {
    /// A service with empty tables: `{sessions, locks, claims, lockDelay?, maxNameLen?}`.
    /// Cost: O(sessions + locks + claims) time, and the bytes per row documented in
    /// `fencelock::storage` (about 100 per session, 140 per lock, 70 per claim).
    ///
    /// Throws `out_of_range` (a number that is not a safe non-negative integer),
    /// `bad_argument` (not an object), `bad_config`, `out_of_memory`.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "ServiceConfig")] config: JsValue,
    ) -> Result<LockService, JsValue> {
        let storage = storage(&config)?;
        let lock_delay = js::opt_num(&js::get(&config, "lockDelay")?, "lockDelay")?.unwrap_or(0);
        let max_name_len = match js::get(&config, "maxNameLen")? {
            v if v.is_undefined() || v.is_null() => MAX_NAME_LEN as u32,
            v => js::num_u32(&v, "maxNameLen")?,
        };
        let config = Config {
            lock_delay,
            max_name_len,
        };
        let core = Core::new(storage, config).map_err(Fail::from)?;
        Ok(LockService { core })
    }

    /// Rebuilds a service from `snapshot()` bytes into new tables of the given capacities
    /// (`{sessions, locks, claims}`; the config comes from the snapshot). Cost:
    /// O(capacity + snapshot).
    ///
    /// Throws `bad_magic`, `unsupported_version`, `corrupt_snapshot`, `capacity_exceeded`,
    /// `bad_config`, and the argument errors of the constructor.
    pub fn restore(
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Capacities")] capacities: JsValue,
    ) -> Result<LockService, JsValue> {
        let bytes = js::bytes(&bytes, "snapshot")?;
        let storage = storage(&capacities)?;
        let core = Core::restore(storage, &bytes).map_err(|(_, e)| Fail::from(e))?;
        Ok(LockService { core })
    }

    // ------------------------------------------------------------------ inputs

    /// Opens a session expiring `ttl` ticks from now: `[{type: "sessionOpened", …}]`.
    /// Throws `bad_ttl`, `capacity_exceeded`, `out_of_range` (also when now + ttl is above
    /// 2^53-1). Cost: O(log sessions).
    #[wasm_bindgen(js_name = openSession, unchecked_return_type = "Output[]")]
    pub fn open_session(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] ttl: JsValue,
    ) -> Result<Array, JsValue> {
        let ttl = js::num(&ttl, "ttl")?;
        self.apply(Input::OpenSession { ttl })
    }

    /// Renews a session (the heartbeat): `[{type: "sessionRenewed", …}]`. Throws
    /// `unknown_session`, request-number errors, `out_of_range`. Cost: O(log sessions).
    #[wasm_bindgen(js_name = keepAlive, unchecked_return_type = "Output[]")]
    pub fn keep_alive(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "number | null")] request: JsValue,
    ) -> Result<Array, JsValue> {
        let session = session_arg(&session)?;
        let request = opt(request)?;
        self.apply(Input::KeepAlive { session, request })
    }

    /// Closes a session: `sessionClosed`, a `released` per hold, then the grants this
    /// frees. Throws `unknown_session`, request-number errors. Cost: O(its claims).
    #[wasm_bindgen(js_name = closeSession, unchecked_return_type = "Output[]")]
    pub fn close_session(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "number | null")] request: JsValue,
    ) -> Result<Array, JsValue> {
        let session = session_arg(&session)?;
        let request = opt(request)?;
        self.apply(Input::CloseSession { session, request })
    }

    /// Acquires `lock`: `granted`, `queued` or `busy`. `mode` is `"exclusive"` or
    /// `"shared"`; `wait` is `"none"`, `"forever"` or `{until: tick}`. Throws
    /// `unknown_session`, `empty_name`, `name_too_long`, `already_queued`,
    /// `mode_mismatch`, `capacity_exceeded`, request-number errors, `bad_argument`,
    /// `out_of_range`. Cost: O(name length + log claims).
    #[wasm_bindgen(unchecked_return_type = "Output[]")]
    pub fn acquire(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Mode")] mode: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Wait")] wait: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "number | null")] request: JsValue,
    ) -> Result<Array, JsValue> {
        let input = Input::Acquire {
            session: session_arg(&session)?,
            lock: Self::lock_name(&lock, "lock")?,
            mode: js::parse_mode(&mode)?,
            wait: js::parse_wait(&wait)?,
            request: opt(request)?,
        };
        self.apply(input)
    }

    /// Releases a held lock: `released`, then the grants it frees. Throws
    /// `unknown_session`, `not_holder`, name and request-number errors. Cost: O(name
    /// length + grants).
    #[wasm_bindgen(unchecked_return_type = "Output[]")]
    pub fn release(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "number | null")] request: JsValue,
    ) -> Result<Array, JsValue> {
        let input = Input::Release {
            session: session_arg(&session)?,
            lock: Self::lock_name(&lock, "lock")?,
            request: opt(request)?,
        };
        self.apply(input)
    }

    /// Withdraws a queued acquire: `waitCancelled` (and grants it unblocks). Throws
    /// `unknown_session`, `not_queued`, name and request-number errors. Cost: O(name
    /// length + grants).
    #[wasm_bindgen(unchecked_return_type = "Output[]")]
    pub fn cancel(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "number | null")] request: JsValue,
    ) -> Result<Array, JsValue> {
        let input = Input::Cancel {
            session: session_arg(&session)?,
            lock: Self::lock_name(&lock, "lock")?,
            request: opt(request)?,
        };
        self.apply(input)
    }

    /// Advances time to `now`: expiries (`sessionExpired`, `released` with reason
    /// `"expired"`), timed-out waits, then grants, in that order. Throws
    /// `time_went_backwards`, `out_of_range`. Cost: O(1) with nothing due, else O(log n)
    /// per due deadline plus the outputs.
    #[wasm_bindgen(unchecked_return_type = "Output[]")]
    pub fn tick(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<Array, JsValue> {
        let now = Tick(js::num(&now, "now")?);
        self.apply(Input::Tick { now })
    }

    /// Stands `session` as a candidate in `election` (an exclusive acquire that waits
    /// forever): `granted` (it leads; the token is its epoch) or `queued`. Throws as
    /// `acquire`. Cost: as acquire.
    #[wasm_bindgen(unchecked_return_type = "Output[]")]
    pub fn campaign(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] election: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "number | null")] request: JsValue,
    ) -> Result<Array, JsValue> {
        let session = session_arg(&session)?;
        let election = Self::lock_name(&election, "election")?;
        let request = opt(request)?;
        self.guard_counters()?;
        let mut sink = Sink::new();
        let r = self
            .core
            .campaign(session, election.as_str(), request, &mut |o| sink.push(o));
        sink.finish(r)
    }

    /// Withdraws `session` from `election`: steps down if it leads (the next candidate is
    /// granted with a higher epoch), else leaves the queue. Throws `not_queued` if it is
    /// neither, and as `release`/`cancel`. Cost: as release.
    #[wasm_bindgen(unchecked_return_type = "Output[]")]
    pub fn resign(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] election: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "number | null")] request: JsValue,
    ) -> Result<Array, JsValue> {
        let session = session_arg(&session)?;
        let election = Self::lock_name(&election, "election")?;
        let request = opt(request)?;
        self.guard_counters()?;
        let mut sink = Sink::new();
        let r = self
            .core
            .resign(session, election.as_str(), request, &mut |o| sink.push(o));
        sink.finish(r)
    }

    /// Applies one input given as a tagged object (`{type: "acquire", session, lock,
    /// mode, wait, request?}`…; see `Input` in the `.d.ts`). Throws what the named method
    /// throws, and `bad_argument` for an unknown `type`.
    #[wasm_bindgen(unchecked_return_type = "Output[]")]
    pub fn handle(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Input")] input: JsValue,
    ) -> Result<Array, JsValue> {
        let input = parse_input(&input)?;
        self.apply(input)
    }

    /// Applies one postcard input frame and returns the output frames, for hosts that
    /// carry frames over their own transport (a WebSocket, a worker message). Numbers
    /// stay `u64` end to end here: no 2^53 limit. Throws `bad_frame` (nothing changed),
    /// then what the input's method throws. Cost: O(frame length) + the input's cost.
    #[wasm_bindgen(js_name = handleFrame, unchecked_return_type = "Uint8Array[]")]
    pub fn handle_frame(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] frame: JsValue,
    ) -> Result<Array, JsValue> {
        let frame = js::plain_bytes(&frame, "frame")?;
        // No input frame is longer than MAX_FRAME_LEN: refuse without copying it in.
        if frame.length() as usize > MAX_FRAME_LEN {
            return Err(Fail::from(Error::BadFrame).into());
        }
        let frame = js::copy(&frame, "frame")?;
        let out = Array::new();
        let mut failed = None;
        let r = self.core.handle_frame(&frame, &mut |o: Output| {
            let mut buf = [0u8; MAX_FRAME_LEN];
            match o.to_frame(&mut buf) {
                Ok(n) => {
                    out.push(&js::uint8(buf.get(..n).unwrap_or(&[])));
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        });
        r.map_err(Fail::from)?;
        match failed {
            // MAX_FRAME_LEN fits every output, so this is unreachable in practice.
            Some(e) => Err(Fail::from(e).into()),
            None => Ok(out),
        }
    }

    // ------------------------------------------------------------------ queries

    /// The current tick. Cost: O(1).
    pub fn now(&self) -> Result<f64, JsValue> {
        Ok(num_out(self.core.now().0, "now")?)
    }

    /// The next tick at which something is due, or `null`. Cost: O(1).
    #[wasm_bindgen(js_name = pollTimeout, unchecked_return_type = "number | null")]
    pub fn poll_timeout(&self) -> Result<JsValue, JsValue> {
        Ok(js::opt_number(
            self.core.poll_timeout().map(|t| t.0),
            "pollTimeout",
        )?)
    }

    /// The highest token granted so far (0 before the first grant). Cost: O(1).
    pub fn revision(&self) -> Result<f64, JsValue> {
        Ok(num_out(self.core.revision(), "revision")?)
    }

    /// The holders of `lock` in grant order: `[{session, mode, token}]`. Cost: O(name
    /// length + holders).
    #[wasm_bindgen(unchecked_return_type = "Holder[]")]
    pub fn holders(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
    ) -> Result<Array, JsValue> {
        let lock = js::string(&lock, "lock")?;
        let out = Array::new();
        for h in self.core.holders(&lock) {
            out.push(
                &Obj::new()
                    .with("session", js::session(h.session)?)
                    .with("mode", js::mode(h.mode))
                    .with("token", js::token(h.token)?)
                    .done(),
            );
        }
        Ok(out)
    }

    /// The queue of `lock`, head first: `[{session, mode, deadline}]` (`deadline` null =
    /// waits forever). Cost: O(name length + waiters).
    #[wasm_bindgen(unchecked_return_type = "Waiter[]")]
    pub fn waiters(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
    ) -> Result<Array, JsValue> {
        let lock = js::string(&lock, "lock")?;
        let out = Array::new();
        for w in self.core.waiters(&lock) {
            out.push(
                &Obj::new()
                    .with("session", js::session(w.session)?)
                    .with("mode", js::mode(w.mode))
                    .with(
                        "deadline",
                        js::opt_number(w.deadline.map(|t| t.0), "deadline")?,
                    )
                    .done(),
            );
        }
        Ok(out)
    }

    /// A live session `{id, ttl, expiresAt, holds, waits, lastRequest}`, or `null`.
    /// Cost: O(its claims).
    #[wasm_bindgen(unchecked_return_type = "SessionInfo | null")]
    pub fn session(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] id: JsValue,
    ) -> Result<JsValue, JsValue> {
        let id = session_arg(&id)?;
        let Some(s) = self.core.session(id) else {
            return Ok(JsValue::NULL);
        };
        Ok(Obj::new()
            .with("id", js::session(s.id)?)
            .with("ttl", js::number(s.ttl, "ttl")?)
            .with("expiresAt", js::number(s.expires_at.0, "expiresAt")?)
            .with("holds", s.holds)
            .with("waits", s.waits)
            .with("lastRequest", js::number(s.last_request, "lastRequest")?)
            .done())
    }

    /// Open session ids, ascending. Cost: O(sessions).
    #[wasm_bindgen(unchecked_return_type = "number[]")]
    pub fn sessions(&self) -> Result<Array, JsValue> {
        let out = Array::new();
        for s in self.core.sessions() {
            out.push(&js::session(s)?);
        }
        Ok(out)
    }

    /// Lock entries (held, awaited or in lock-delay), in creation order. Cost: O(locks).
    #[wasm_bindgen(unchecked_return_type = "string[]")]
    pub fn locks(&self) -> Array {
        self.core
            .locks()
            .map(|l| JsValue::from_str(l.as_str()))
            .collect()
    }

    /// The leader of `election`, `{session, epoch}`, or `null`. Cost: O(name length).
    #[wasm_bindgen(unchecked_return_type = "Leader | null")]
    pub fn leader(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] election: JsValue,
    ) -> Result<JsValue, JsValue> {
        let election = js::string(&election, "election")?;
        let Some(l) = self.core.leader(&election) else {
            return Ok(JsValue::NULL);
        };
        Ok(Obj::new()
            .with("session", js::session(l.session)?)
            .with("epoch", js::token(l.epoch)?)
            .done())
    }

    /// The tick before which `lock` will not be granted because of lock-delay, or `null`.
    /// Cost: O(name length).
    #[wasm_bindgen(js_name = lockDelayUntil, unchecked_return_type = "number | null")]
    pub fn lock_delay_until(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
    ) -> Result<JsValue, JsValue> {
        let lock = js::string(&lock, "lock")?;
        Ok(js::opt_number(
            self.core.lock_delay_until(&lock).map(|t| t.0),
            "lockDelayUntil",
        )?)
    }

    /// Table capacities `{sessions, locks, claims}`. Cost: O(1).
    #[wasm_bindgen(unchecked_return_type = "Capacities")]
    pub fn capacity(&self) -> JsValue {
        caps(self.core.capacity())
    }

    /// Entries in use per table `{sessions, locks, claims}`. Cost: O(1).
    #[wasm_bindgen(unchecked_return_type = "Capacities")]
    pub fn len(&self) -> JsValue {
        caps(self.core.len())
    }

    /// The configuration `{lockDelay, maxNameLen}`. Cost: O(1).
    #[wasm_bindgen(unchecked_return_type = "{ lockDelay: number; maxNameLen: number }")]
    pub fn config(&self) -> Result<JsValue, JsValue> {
        let c = self.core.config();
        Ok(Obj::new()
            .with("lockDelay", js::number(c.lock_delay, "lockDelay")?)
            .with("maxNameLen", c.max_name_len)
            .done())
    }

    /// The canonical snapshot bytes (the same input history gives the same bytes, on every
    /// platform; a refused input leaves them unchanged).
    /// Throws `out_of_memory` if the module cannot hold a copy. Cost: O(sessions + locks
    /// + claims).
    #[wasm_bindgen(unchecked_return_type = "Uint8Array")]
    pub fn snapshot(&self) -> Result<JsValue, JsValue> {
        let mut buf = js::zeroed(self.core.snapshot_len(), "snapshot")?;
        let n = self.core.snapshot(&mut buf).map_err(Fail::from)?;
        Ok(js::uint8(buf.get(..n).unwrap_or(&[])))
    }
}

fn opt(request: JsValue) -> Result<Option<u64>, Fail> {
    self::request(&request)
}

fn num_out(v: u64, what: &str) -> Result<f64, Fail> {
    js::number(v, what).map(|_| v as f64)
}

fn caps(c: fencelock::Capacity) -> JsValue {
    Obj::new()
        .with("sessions", c.sessions)
        .with("locks", c.locks)
        .with("claims", c.claims)
        .done()
}
