//! `LockService`: the core's lock service for JavaScript.

use alloc::string::String;
use alloc::vec::Vec;

use fencelock::{
    Config, Error, Output, Reply, SessionId, Tick, Token, VecStorage, MAX_FRAME_LEN, MAX_NAME_LEN,
};
use js_sys::{Array, Reflect};
use wasm_bindgen::prelude::*;

use crate::fast::{Events, Fast};
use crate::js::{self, cat, Dec, Fail, Name, Obj};
use crate::json::Answer;
use crate::names::Names;

/// A table size from JS, checked by the core's one rule (`fencelock::check_rows`) before
/// anything is allocated.
pub(crate) fn row_count(n: u64) -> Result<usize, Fail> {
    Ok(fencelock_wasm_args::row_count(n)?)
}

/// `n` copies of `empty`, allocated fallibly (`out_of_memory`, not an abort), after the
/// core's row check.
pub(crate) fn rows<T: Clone>(n: u64, empty: T, what: &str) -> Result<Vec<T>, Fail> {
    let n = row_count(n)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Fail::OutOfMemory(cat(&[
            "cannot allocate ",
            Dec::new(n as u64).as_str(),
            " rows for the ",
            what,
            " table",
        ]))
    })?;
    v.resize(n, empty);
    Ok(v)
}

/// The table capacities `{sessions, locks, claims}` of `caps`: argument errors only
/// (`bad_argument`, `out_of_range`), before the core judges anything.
fn capacities(caps: &JsValue) -> Result<[u64; 3], Fail> {
    let caps = js::object(caps, "capacities")?;
    Ok([
        js::num(&js::get(caps, "sessions")?, "sessions")?,
        js::num(&js::get(caps, "locks")?, "locks")?,
        js::num(&js::get(caps, "claims")?, "claims")?,
    ])
}

/// The core's heap tables of these capacities: the core's row check (`bad_config`), then
/// the allocation, fallible (`VecStorage::try_new`): a capacity too large for the wasm
/// memory is an `out_of_memory` error, not an abort.
fn storage([s, l, c]: [u64; 3]) -> Result<VecStorage, Fail> {
    let (s, l, c) = (row_count(s)?, row_count(l)?, row_count(c)?);
    VecStorage::try_new(s, l, c).map_err(|_| {
        Fail::OutOfMemory(cat(&[
            "cannot allocate tables of ",
            Dec::new(s as u64).as_str(),
            " sessions, ",
            Dec::new(l as u64).as_str(),
            " locks, ",
            Dec::new(c as u64).as_str(),
            " claims",
        ]))
    })
}

pub(crate) type Core = fencelock::LockService<VecStorage>;

/// The lock service (core's `LockService` over heap tables sized at construction).
///
/// Every input takes the host's `now` first and returns `{reply, events}`: the caller's
/// own answer (core's `Reply`) and the events for other sessions or caused by time
/// (core's `Output`s, in order, those of the advance to `now` first). A refused input
/// throws; the advance to `now` stands, and its events are on the error's `.events`.
/// Queries never change anything.
#[wasm_bindgen]
pub struct LockService {
    core: Core,
    /// The typed fast path's state (see `fast`): events kept for `takeEvents`, the last
    /// reply and the last refusal.
    pub(crate) fast: Fast,
    /// Names interned for the fast path's id calls (see `names`).
    pub(crate) names: Names,
}

fn session_arg(v: &JsValue) -> Result<SessionId, Fail> {
    js::num(v, "session").map(SessionId)
}

fn now_arg(v: &JsValue) -> Result<Tick, Fail> {
    js::num(v, "now").map(Tick)
}

fn request_arg(v: &JsValue) -> Result<Option<u64>, Fail> {
    js::opt_num(v, "request")
}

/// The thrown value of a refused input: the error, with the events the input emitted
/// before it was refused (the advance to its `now`, which stands) as `.events`.
fn refused(fail: Fail, events: &[Output]) -> JsValue {
    let err = JsValue::from(fail);
    // Only an exhausted JS heap makes the parse fail; the error is thrown without them then.
    if let Ok(list) = Answer::build_events(events).parse(false) {
        let _ = Reflect::set(&err, &JsValue::from_str("events"), &list);
    }
    err
}

/// The JS answer of an input: `{reply, events}`, or the thrown error with the events.
/// Kept out of line: one copy for every input method rather than one in each.
#[inline(never)]
fn answer(r: Result<Reply, Fail>, events: &[Output]) -> Result<JsValue, JsValue> {
    match r {
        Ok(reply) => Answer::build(&reply, events).parse(true),
        Err(fail) => Err(refused(fail, events)),
    }
}

/// A core call's result with the name's true length restored in a `name_too_long`.
fn named(r: Result<Reply, Error>, name: &Name) -> Result<Reply, Fail> {
    r.map_err(|e| Fail::from(name.error(e)))
}

// Each input's arguments read and applied once, for the typed method and for `handle`
// alike (one copy of each in the module, not two).

fn open_with(
    core: &mut Core,
    out: &mut Events,
    now: &JsValue,
    ttl: &JsValue,
) -> Result<Reply, Fail> {
    let (now, ttl) = (now_arg(now)?, js::num(ttl, "ttl")?);
    Ok(core.open_session(now, ttl, out)?)
}

/// `open_labeled`: the label is judged (the core's `Label::new`) before the core is given
/// the input, as every argument is, so a label too long changes nothing, not even time.
fn open_labeled_with(
    core: &mut Core,
    out: &mut Events,
    now: &JsValue,
    ttl: &JsValue,
    label: &JsValue,
) -> Result<Reply, Fail> {
    let (now, ttl) = (now_arg(now)?, js::num(ttl, "ttl")?);
    let label = js::label(label)?;
    Ok(core.open_labeled(now, ttl, label, out)?)
}

/// `keep_alive` (`close` false) or `close_session` (`close` true).
fn session_input(
    core: &mut Core,
    out: &mut Events,
    close: bool,
    now: &JsValue,
    session: &JsValue,
    request: &JsValue,
) -> Result<Reply, Fail> {
    let (now, session) = (now_arg(now)?, session_arg(session)?);
    let request = request_arg(request)?;
    Ok(if close {
        core.close_session(now, session, request, out)?
    } else {
        core.keep_alive(now, session, request, out)?
    })
}

fn acquire_with(
    core: &mut Core,
    out: &mut Events,
    now: &JsValue,
    session: &JsValue,
    lock: &JsValue,
    options: &JsValue,
    known: &[&str],
) -> Result<Reply, Fail> {
    let (now, session) = (now_arg(now)?, session_arg(session)?);
    let lock = js::name(lock, "lock")?;
    let (mode, wait, request) = js::acquire_options(options, known)?;
    let r = core.acquire(now, session, lock.as_str(), mode, wait, request, out);
    named(r, &lock)
}

/// The one core call of a `release`, `cancel`, `campaign`, `resign`, `watch` or
/// `unwatch`, for the object API and the typed fast path alike.
pub(crate) fn named_core(
    core: &mut Core,
    out: &mut Events,
    on: On,
    now: Tick,
    session: SessionId,
    n: &str,
    request: Option<u64>,
) -> Result<Reply, Error> {
    match on {
        On::Release => core.release(now, session, n, request, out),
        On::Cancel => core.cancel(now, session, n, request, out),
        On::Campaign => core.campaign(now, session, n, request, out),
        On::Resign => core.resign(now, session, n, request, out),
        On::Watch => core.watch(now, session, n, request, out),
        On::Unwatch => core.unwatch(now, session, n, request, out),
    }
}

/// Which named input [`named_core`] applies.
#[derive(Clone, Copy)]
pub(crate) enum On {
    Release,
    Cancel,
    Campaign,
    Resign,
    Watch,
    Unwatch,
}

/// `release`, `cancel`, `campaign`, `resign`, `watch` or `unwatch`: a session, a name, a
/// request number.
fn named_input(
    core: &mut Core,
    out: &mut Events,
    on: On,
    now: &JsValue,
    session: &JsValue,
    name: &JsValue,
    request: &JsValue,
) -> Result<Reply, Fail> {
    held_input(core, out, on, now, session, name, None, request)
}

/// [`named_input`], or with a `token` `release_hold` (`on` is then `Release`): the token
/// is checked after the name and before the request number, in the typed method's order.
/// One copy for all of them, the typed methods and `handle` alike.
#[allow(clippy::too_many_arguments)]
fn held_input(
    core: &mut Core,
    out: &mut Events,
    on: On,
    now: &JsValue,
    session: &JsValue,
    name: &JsValue,
    token: Option<&JsValue>,
    request: &JsValue,
) -> Result<Reply, Fail> {
    let (now, session) = (now_arg(now)?, session_arg(session)?);
    let what = match on {
        On::Release | On::Cancel | On::Watch | On::Unwatch => "lock",
        On::Campaign | On::Resign => "election",
    };
    let name = js::name(name, what)?;
    let hold = match token {
        Some(t) => Some(Token(js::num(t, "token")?)),
        None => None,
    };
    let request = request_arg(request)?;
    let r = match hold {
        Some(token) => core.release_hold(now, session, name.as_str(), token, request, out),
        None => named_core(core, out, on, now, session, name.as_str(), request),
    };
    named(r, &name)
}

fn tick_with(core: &mut Core, out: &mut Events, now: &JsValue) -> Result<Reply, Fail> {
    let now = now_arg(now)?;
    core.tick(now, out)?;
    Ok(Reply::Ticked { now })
}

impl LockService {
    /// The service around `core`, with no events kept and no names interned (the names
    /// table holds as many names as the core has lock rows).
    fn with(core: Core) -> LockService {
        let names = Names::new(core.capacity().locks);
        LockService {
            fast: Fast::new(&core),
            core,
            names,
        }
    }

    /// The core, the fast path's state and the interned names, borrowed apart.
    pub(crate) fn parts(&mut self) -> (&mut Core, &mut Fast, &Names) {
        (&mut self.core, &mut self.fast, &self.names)
    }

    /// Runs one input: `call` reads its arguments (a bad one throws before the core is
    /// called, with no events) and calls the core with a sink of its own, without limit
    /// (its events are returned with the answer: nothing is kept). The sink cannot fail, and turning the answer into JS values cannot either (see `json`).
    fn input(
        &mut self,
        call: impl FnOnce(&mut Core, &mut Events) -> Result<Reply, Fail>,
    ) -> Result<JsValue, JsValue> {
        let mut events = crate::fast::unbounded();
        let r = call(&mut self.core, &mut events);
        answer(r, events.events())
    }

    /// A tagged input object (`{kind: "acquire", now, session, lock, mode, wait,
    /// request?}`…) applied through the same core calls as the typed methods.
    fn dispatch(core: &mut Core, v: &JsValue, out: &mut Events) -> Result<Reply, Fail> {
        let v = js::object(v, "input")?;
        let kind = js::get(v, "kind")?;
        let keys: &[&str] = match js::keyword(&kind).as_deref() {
            Some("open_session") => &["kind", "now", "ttl"],
            Some("open_labeled") => &["kind", "now", "ttl", "label"],
            Some("keep_alive" | "close_session") => &["kind", "now", "session", "request"],
            Some("acquire") => &["kind", "now", "session", "lock", "mode", "wait", "request"],
            Some("release" | "cancel" | "watch" | "unwatch") => {
                &["kind", "now", "session", "lock", "request"]
            }
            Some("release_hold") => &["kind", "now", "session", "lock", "token", "request"],
            Some("tick") => &["kind", "now"],
            _ => return Err(Fail::BadArgument(String::from(UNKNOWN_KIND))),
        };
        js::known_keys(v, "input", keys)?;
        let field = |k: &str| js::get(v, k);
        // Each field is read just before it is checked, in the typed methods' order, so a
        // throwing getter or a bad value is met exactly where it was before the shared
        // helpers existed: a field is checked here before the next one is read, and the
        // helper checks it again (a pure, repeatable check) before calling the core.
        let now = field("now")?;
        now_arg(&now)?;
        match js::keyword(&kind).as_deref() {
            Some("open_session") => open_with(core, out, &now, &field("ttl")?),
            Some("open_labeled") => {
                let ttl = field("ttl")?;
                js::num(&ttl, "ttl")?;
                open_labeled_with(core, out, &now, &ttl, &field("label")?)
            }
            Some(k @ ("keep_alive" | "close_session")) => {
                let session = field("session")?;
                session_arg(&session)?;
                let request = field("request")?;
                let close = k == "close_session";
                session_input(core, out, close, &now, &session, &request)
            }
            Some("acquire") => {
                let session = field("session")?;
                session_arg(&session)?;
                let lock = field("lock")?;
                acquire_with(core, out, &now, &session, &lock, v, keys)
            }
            Some(k @ ("release" | "cancel" | "watch" | "unwatch" | "release_hold")) => {
                let on = match k {
                    "release" | "release_hold" => On::Release,
                    "cancel" => On::Cancel,
                    "watch" => On::Watch,
                    _ => On::Unwatch,
                };
                let session = field("session")?;
                session_arg(&session)?;
                let lock = field("lock")?;
                js::name(&lock, "lock")?;
                // release_hold's token, between the lock and the request (the typed order)
                let token = match k {
                    "release_hold" => Some(field("token")?),
                    _ => None,
                };
                if let Some(t) = &token {
                    js::num(t, "token")?;
                }
                let request = field("request")?;
                held_input(
                    core,
                    out,
                    on,
                    &now,
                    &session,
                    &lock,
                    token.as_ref(),
                    &request,
                )
            }
            Some("tick") => tick_with(core, out, &now),
            // Every other kind was refused above, before any field was read.
            _ => Err(Fail::BadArgument(String::from(UNKNOWN_KIND))),
        }
    }
}

/// The refusal of an input object whose `kind` is not one of the inputs.
const UNKNOWN_KIND: &str = "input.kind must be one of open_session, open_labeled, \
                            keep_alive, close_session, acquire, release, cancel, tick, \
                            watch, unwatch, release_hold";

#[wasm_bindgen]
impl LockService {
    /// A service with empty tables: `{sessions, locks, claims, lockDelay?, maxNameLen?,
    /// maxWatchers?}` (`maxWatchers`: the most sessions watching one lock, default 4, 0
    /// turns watches off).
    /// Cost: O(sessions + locks + claims) time, and the bytes per row documented in
    /// `fencelock::storage` (88 per session and a 65-byte label row, 152 per lock, 72 per
    /// claim).
    ///
    /// Throws `out_of_range` (a number that cannot be a `u64`), `bad_argument` (not an
    /// object, or a key it does not know, named in `.key`), `bad_config` (the core's, in its order: a bad `maxNameLen`, then a table over 2^31-1 rows),
    /// `out_of_memory`.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "ServiceConfig")] config: JsValue,
    ) -> Result<LockService, JsValue> {
        js::known_keys(
            js::object(&config, "config")?,
            "config",
            &[
                "sessions",
                "locks",
                "claims",
                "lockDelay",
                "maxNameLen",
                "maxWatchers",
            ],
        )?;
        let caps = capacities(&config)?;
        let lock_delay = js::opt_num(&js::get(&config, "lockDelay")?, "lockDelay")?.unwrap_or(0);
        let max_name_len = match js::get(&config, "maxNameLen")? {
            v if v.is_undefined() || v.is_null() => MAX_NAME_LEN as u32,
            v => js::num_u32(&v, "maxNameLen")?,
        };
        let max_watchers = match js::get(&config, "maxWatchers")? {
            v if v.is_undefined() || v.is_null() => Config::default().max_watchers,
            v => js::num_u32(&v, "maxWatchers")?,
        };
        let core_config = Config {
            lock_delay,
            max_name_len,
            max_watchers,
        };
        // The core's order: the config, then the tables (checked and allocated here).
        core_config.validate().map_err(Fail::from)?;
        let storage = storage(caps)?;
        let core = Core::new(storage, core_config).map_err(Fail::from)?;
        Ok(LockService::with(core))
    }

    /// Rebuilds a service from `snapshot()` bytes into new tables of the given capacities
    /// (`{sessions, locks, claims}`; the config comes from the snapshot). The bytes carry
    /// no checksum: store them with one of your own (a revision lowered by damage restores
    /// as a consistent state). With `key` (16
    /// bytes from a random source; keep it secret) the indexes are keyed as the rows load
    /// (the core's `restore_keyed`): the way to restore bytes of a source that may choose
    /// them, whose lock names or session ids chosen to share one probe run would make an
    /// unkeyed restore O(n²) (`setNameKey` after it comes too late for that). Cost:
    /// O(capacity + snapshot).
    ///
    /// Throws `bad_magic`, `unsupported_version`, `corrupt_snapshot`, `capacity_exceeded`,
    /// `bad_config`, and the argument errors of the constructor; `bad_argument` for a key
    /// that is not a `Uint8Array` of 16 bytes (judged before the bytes are read);
    /// `out_of_memory` when the bytes, whose header holds, do not fit the module's memory.
    /// Bytes whose header is refused are judged by it alone and never copied into the
    /// module's memory; of the rest, no more is copied than the records the header counts
    /// (at most the tables' rows) can be, plus one byte (the core refuses longer bytes, and
    /// a header counting more rows than a table has, before reading a record).
    pub fn restore(
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: JsValue,
        // The capacities only: a `ServiceConfig` (which extends them) is refused at run
        // time, its config keys being the snapshot's, so the type refuses one too.
        #[wasm_bindgen(unchecked_param_type = "RestoreCapacities")] capacities: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "Uint8Array")] key: JsValue,
    ) -> Result<LockService, JsValue> {
        let plain = js::plain_bytes(&bytes, "snapshot")?;
        js::known_keys(
            js::object(&capacities, "capacities")?,
            "capacities",
            &["sessions", "locks", "claims"],
        )?;
        let caps = self::capacities(&capacities)?;
        let key = js::optional_name_key(&key)?;
        // The core's order: what the snapshot says (magic, version, header, config), then
        // the tables (checked and allocated here), then the rest of the snapshot. The
        // header is judged from its own bytes, and no more of the rest is copied than the
        // records it counts can be (plus one byte, which the core refuses as it refuses
        // the whole): junk is never copied into the module's memory, which would stay
        // grown.
        // The copy is bounded by the tables too (a header counting more rows than a table
        // has is refused by its counts before a record): capacities past a u32 are past
        // every table's limit, refused below before anything is copied.
        let within = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        let cap = fencelock::Capacity {
            sessions: within(caps[0]),
            locks: within(caps[1]),
            claims: within(caps[2]),
        };
        let most = fencelock::snapshot_max_len_within(&js::head(&plain, "snapshot")?, cap)
            .map_err(Fail::from)?;
        let storage = storage(caps)?;
        let bytes = js::copy_at_most(&plain, most.saturating_add(1), "snapshot")?;
        let core = match key {
            Some(key) => Core::restore_keyed(storage, &bytes, key),
            None => Core::restore(storage, &bytes),
        }
        .map_err(|(_, e)| Fail::from(e))?;
        Ok(LockService::with(core))
    }

    // ------------------------------------------------------------------ inputs

    /// Opens a session expiring `ttl` ticks after `now`: reply `{kind: "opened", session,
    /// expiresAt}`. Throws (core's order) `time_went_backwards`, then — after the advance
    /// to `now`, which stands — `bad_ttl`, `deadline_overflow`, `capacity_exceeded`; before
    /// the core, `out_of_range`. Cost: the advance, then O(log sessions).
    #[wasm_bindgen(js_name = openSession, unchecked_return_type = "Answer<Opened>")]
    pub fn open_session(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] ttl: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| open_with(core, out, &now, &ttl))
    }

    /// Opens a session labelled `label` (at most 64 bytes of UTF-8; `""` = no label) that
    /// expires `ttl` ticks after `now`: reply `{kind: "opened", session, expiresAt}`. The
    /// label is shown with the session, its holds and waits, and in the `holder_changed`
    /// events its holds cause. Throws, before the core (nothing changes, not even time),
    /// `bad_argument` (not a string), `label_too_long`, `out_of_range`; then as
    /// `openSession`. Cost: O(label length), then as `openSession`.
    #[wasm_bindgen(js_name = openLabeled, unchecked_return_type = "Answer<Opened>")]
    pub fn open_labeled(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] ttl: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] label: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| open_labeled_with(core, out, &now, &ttl, &label))
    }

    /// Keeps a session alive: its deadline becomes `now` + its ttl; reply `{kind:
    /// "kept_alive", expiresAt}`. Throws `time_went_backwards`, then `unknown_session`,
    /// request-number errors, `deadline_overflow`; before the core, `out_of_range`.
    /// Cost: the advance, then O(log sessions).
    #[wasm_bindgen(js_name = keepAlive, unchecked_return_type = "Answer<KeptAlive>")]
    pub fn keep_alive(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "U64 | null")] request: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| session_input(core, out, false, &now, &session, &request))
    }

    /// Closes a session: reply `{kind: "closed"}`; events: a `released` (reason
    /// `"closed"`) per hold, then the grants this frees. Throws `time_went_backwards`,
    /// then `unknown_session`, request-number errors; before the core, `out_of_range`.
    /// Cost: the advance, then O(its claims + events).
    #[wasm_bindgen(js_name = closeSession, unchecked_return_type = "Answer<Closed>")]
    pub fn close_session(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "U64 | null")] request: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| session_input(core, out, true, &now, &session, &request))
    }

    /// Acquires `lock` for `session`: `options` is `{mode, wait, request?}` (`mode`
    /// `"exclusive"`, `"shared"` or `{permits: count, limit}` for `count` of a semaphore's
    /// `limit` permits; `wait` `"none"`, `"forever"` or `{until: tick}`). A semaphore's
    /// grants are strict FIFO, each with its own token.
    /// Reply `granted` (`mode`, `token`), `queued` (`mode`, `position`) or `busy` — or,
    /// for a repeated request number, `hold_ended` / `wait_ended`. Throws in the core's
    /// order: `time_went_backwards`, then (after the advance) `unknown_session`,
    /// `empty_name`, `name_too_long`, `bad_permits`, request-number errors,
    /// `limit_mismatch`, `already_queued`, `mode_mismatch`, `capacity_exceeded` (the
    /// core's order); before the core, `out_of_range` and
    /// `bad_argument` for arguments that cannot be a tick, an id, a string, a mode or a
    /// wait. Cost: the advance, then O(name length + log claims).
    #[wasm_bindgen(unchecked_return_type = "Answer<AcquireReply>")]
    pub fn acquire(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        #[wasm_bindgen(unchecked_param_type = "AcquireOptions")] options: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| {
            acquire_with(core, out, &now, &session, &lock, &options, js::ACQUIRE_KEYS)
        })
    }

    /// Releases a held lock: reply `{kind: "released", token}`; events: the grants it
    /// frees. Throws `time_went_backwards`, then `unknown_session`, name errors,
    /// request-number errors, `not_holder`; before the core, `out_of_range`,
    /// `bad_argument`. Cost: the advance, then O(name length + log claims + events).
    #[wasm_bindgen(unchecked_return_type = "Answer<Released>")]
    pub fn release(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "U64 | null")] request: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| named_input(core, out, On::Release, &now, &session, &lock, &request))
    }

    /// Releases the session's hold on `lock` only if it is the hold granted with `token`
    /// (the core's `release_hold`): reply `{kind: "released", token}` and the events of a
    /// `release`. If the session holds the lock with another token (it took the lock again
    /// after the hold `token` names ended), that hold stays and nothing changes
    /// (`not_holder`). For a caller that names a hold by its token: an operator forcing
    /// out a hold read from a listing, a host retrying a release without a request number.
    /// A request number used for it covers the token too: the same number on a `release`
    /// of the lock or a `releaseHold` of another token is `request_reused`; its repeat
    /// replays the recorded `released`. No typed fast path: it is not a hot call.
    /// Throws as `release`: `time_went_backwards`, then `unknown_session`, name errors,
    /// request-number errors, `not_holder`; before the core, `out_of_range` (also for a
    /// `token` that cannot be a `u64`), `bad_argument`. Cost: as `release`.
    #[wasm_bindgen(js_name = releaseHold, unchecked_return_type = "Answer<Released>")]
    pub fn release_hold(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] token: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "U64 | null")] request: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| {
            let token = Some(&token);
            held_input(
                core,
                out,
                On::Release,
                &now,
                &session,
                &lock,
                token,
                &request,
            )
        })
    }

    /// Withdraws a queued acquire: reply `{kind: "cancelled"}`; events: grants it
    /// unblocks. Throws `time_went_backwards`, then `unknown_session`, name errors,
    /// request-number errors, `not_queued`; before the core, `out_of_range`,
    /// `bad_argument`. Cost: the advance, then O(name length + log claims + events).
    #[wasm_bindgen(unchecked_return_type = "Answer<Cancelled>")]
    pub fn cancel(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "U64 | null")] request: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| named_input(core, out, On::Cancel, &now, &session, &lock, &request))
    }

    /// Advances time to `now`: reply `{kind: "ticked", now}`; events: expiries
    /// (`session_expired`, `released` with reason `"expired"`), timed-out waits, then
    /// grants, in that order. Call it when `pollTimeout()` comes due. Throws
    /// `time_went_backwards`; before the core, `out_of_range`. Cost: O(1) with nothing
    /// due, else O(log n) per due deadline plus the events.
    #[wasm_bindgen(unchecked_return_type = "Answer<Ticked>")]
    pub fn tick(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| tick_with(core, out, &now))
    }

    /// Stands `session` as a candidate in `election` (an exclusive acquire that waits
    /// forever): reply `granted` (it leads; the token is its epoch) or `queued`; a repeated
    /// request number whose claim has ended since replies `hold_ended` or `wait_ended`, as
    /// `acquire`'s does. Throws as `acquire`. Cost: as acquire.
    #[wasm_bindgen(unchecked_return_type = "Answer<AcquireReply>")]
    pub fn campaign(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] election: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "U64 | null")] request: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| {
            named_input(core, out, On::Campaign, &now, &session, &election, &request)
        })
    }

    /// Withdraws `session` from `election`: steps down if it leads (reply `released`; the
    /// next candidate is granted with a higher epoch), else leaves the queue (reply
    /// `cancelled`). Throws `not_queued` if it is neither, and as `release`/`cancel`.
    /// Cost: as release.
    #[wasm_bindgen(unchecked_return_type = "Answer<Released | Cancelled>")]
    pub fn resign(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] election: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "U64 | null")] request: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| {
            named_input(core, out, On::Resign, &now, &session, &election, &request)
        })
    }

    /// Starts watching the holders of `lock` for `session`: reply `{kind: "watching",
    /// holders}`; events: one `holder_changed` (change `"holding"`) for the watcher per
    /// current holder, in grant order; later, one per holder change of the lock
    /// (`"granted"`, `"released"`, `"closed"`, `"expired"`), right after the event that
    /// tells the holder, until it unwatches, closes or expires. A watch takes a claim row.
    /// Throws `time_went_backwards`, then `unknown_session`, name errors, request-number
    /// errors, `already_watching`, `capacity_exceeded` (`.table` `"watchers"`: the lock
    /// has `maxWatchers` watchers; then `"claims"`, `"locks"`); before the core,
    /// `out_of_range`, `bad_argument`. Cost: the advance, then O(name length + holders of
    /// the lock).
    #[wasm_bindgen(unchecked_return_type = "Answer<Watching>")]
    pub fn watch(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "U64 | null")] request: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| named_input(core, out, On::Watch, &now, &session, &lock, &request))
    }

    /// Stops watching `lock`: reply `{kind: "unwatched"}`; no `holder_changed` for it
    /// reaches the session afterwards. Throws `time_went_backwards`, then
    /// `unknown_session`, name errors, request-number errors, `not_watching`; before the
    /// core, `out_of_range`, `bad_argument`. Cost: the advance, then O(name length + log
    /// claims).
    #[wasm_bindgen(unchecked_return_type = "Answer<Unwatched>")]
    pub fn unwatch(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "U64 | null")] request: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| named_input(core, out, On::Unwatch, &now, &session, &lock, &request))
    }

    /// Applies one input given as a tagged object (`{kind: "acquire", now, session, lock,
    /// mode, wait, request?}`…; see `Input` in the `.d.ts`) through the same core calls as
    /// the typed methods. Throws what the named method throws, and `bad_argument` for an
    /// unknown `kind`. Cost: that method's.
    #[wasm_bindgen(unchecked_return_type = "Answer<Reply>")]
    pub fn handle(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Input")] input: JsValue,
    ) -> Result<JsValue, JsValue> {
        self.input(|core, out| Self::dispatch(core, &input, out))
    }

    /// Applies one postcard input frame; returns `{reply, events}` as frames (`reply` one
    /// `Uint8Array`, `events` an array of them), for hosts that carry frames over their
    /// own transport (a WebSocket, a worker message). Numbers stay `u64` end to end.
    /// Throws `bad_argument` for a `frame` that is not a plain `Uint8Array` (no
    /// `.eventFrames`: nothing reached the core), `bad_frame` (nothing changed; an empty
    /// `.eventFrames`), then what the input's method throws, with the advance's event
    /// frames on `.eventFrames`. Cost: O(frame length) + the input's.
    #[wasm_bindgen(js_name = handleFrame, unchecked_return_type = "FrameAnswer")]
    pub fn handle_frame(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] frame: JsValue,
    ) -> Result<JsValue, JsValue> {
        let frame = js::plain_bytes(&frame, "frame")?;
        // No input frame is longer than MAX_FRAME_LEN (the core's decoder would refuse it
        // as BadFrame too): refuse it without copying it in.
        if js::byte_len(&frame) > MAX_FRAME_LEN as u64 {
            let err = JsValue::from(Fail::from(Error::BadFrame));
            let _ = Reflect::set(&err, &JsValue::from_str("eventFrames"), &Array::new());
            return Err(err);
        }
        let frame = js::copy(&frame, "frame")?;
        let mut events = crate::fast::unbounded();
        let r = self.core.handle_frame(&frame, &mut events);
        let mut buf = [0u8; MAX_FRAME_LEN];
        let list: Array = events
            .events()
            .iter()
            .map(|o| {
                let n = o.to_frame(&mut buf);
                bytes(n, &buf)
            })
            .collect();
        match r {
            Ok(reply) => {
                let n = reply.to_frame(&mut buf);
                Ok(Obj::new()
                    .with("reply", bytes(n, &buf))
                    .with("events", list)
                    .done())
            }
            Err(e) => {
                let err = JsValue::from(Fail::from(e));
                let _ = Reflect::set(&err, &JsValue::from_str("eventFrames"), &list);
                Err(err)
            }
        }
    }

    // ------------------------------------------------------------------ queries

    /// The current tick. Cost: O(1).
    #[wasm_bindgen(unchecked_return_type = "U64")]
    pub fn now(&self) -> JsValue {
        js::number(self.core.now().0)
    }

    /// The next tick at which something is due, or `null`. Cost: O(1).
    #[wasm_bindgen(js_name = pollTimeout, unchecked_return_type = "U64 | null")]
    pub fn poll_timeout(&self) -> JsValue {
        js::opt_number(self.core.poll_timeout().map(|t| t.0))
    }

    /// The highest token granted so far (0 before the first grant). Cost: O(1).
    #[wasm_bindgen(unchecked_return_type = "U64")]
    pub fn revision(&self) -> JsValue {
        js::number(self.core.revision())
    }

    /// Raises the fencing revision to at least `floor` (a lower one changes nothing), so
    /// the next grant's token is above it; for a service recovered from a copy that may
    /// have missed grants. Returns the revision now. Not an input: no `now`, no events.
    /// Throws `bad_config` (a floor above 2^62; nothing changes), `out_of_range`.
    /// Cost: O(1).
    #[wasm_bindgen(js_name = raiseRevision, unchecked_return_type = "U64")]
    pub fn raise_revision(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] floor: JsValue,
    ) -> Result<JsValue, JsValue> {
        let floor = js::num(&floor, "floor")?;
        let r = self.core.raise_revision(floor).map_err(Fail::from)?;
        Ok(js::number(r))
    }

    /// The permits of the semaphore `lock`, `{inUse, limit}`, or `null` when it is not a
    /// live semaphore (a plain lock, an idle or unknown name). Throws `bad_argument`.
    /// Cost: O(name length).
    #[wasm_bindgen(unchecked_return_type = "Permits | null")]
    pub fn permits(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
    ) -> Result<JsValue, JsValue> {
        let lock = js::name(&lock, "lock")?;
        Ok(match self.core.permits(lock.as_str()) {
            Some(p) => Obj::new()
                .with("inUse", p.in_use)
                .with("limit", p.limit)
                .done(),
            None => JsValue::NULL,
        })
    }

    /// The holders of `lock` in grant order: `[{session, mode, token, label}]` (none for a
    /// name no lock can have). Throws `bad_argument`. Cost: O(name length + holders).
    #[wasm_bindgen(unchecked_return_type = "Holder[]")]
    pub fn holders(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
    ) -> Result<Array, JsValue> {
        let lock = js::name(&lock, "lock")?;
        Ok(self
            .core
            .holders(lock.as_str())
            .map(|h| {
                Obj::new()
                    .with("session", js::session(h.session))
                    .with("mode", js::mode(h.mode))
                    .with("token", js::token(h.token))
                    .with("label", h.label.as_str())
                    .done()
            })
            .collect())
    }

    /// `session`'s hold of `lock`, `{session, mode, token, label}` as `holders` lists it,
    /// or `null`: no such hold (a wait or a watch is none), or a session or lock that is
    /// not open. Reads one hold, where `holders` lists every holder of a semaphore.
    /// Throws `out_of_range` (session), `bad_argument` (lock). Cost: O(name length).
    #[wasm_bindgen(unchecked_return_type = "Holder | null")]
    pub fn hold(
        &self,
        #[wasm_bindgen(unchecked_param_type = "U64")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
    ) -> Result<JsValue, JsValue> {
        let session = session_arg(&session)?;
        let lock = js::name(&lock, "lock")?;
        Ok(match self.core.hold(session, lock.as_str()) {
            Some(h) => Obj::new()
                .with("session", js::session(h.session))
                .with("mode", js::mode(h.mode))
                .with("token", js::token(h.token))
                .with("label", h.label.as_str())
                .done(),
            None => JsValue::NULL,
        })
    }

    /// The queue of `lock`, head first: `[{session, mode, deadline, label}]` (`deadline`
    /// null = waits forever). Throws `bad_argument`. Cost: O(name length + waiters).
    #[wasm_bindgen(unchecked_return_type = "Waiter[]")]
    pub fn waiters(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
    ) -> Result<Array, JsValue> {
        let lock = js::name(&lock, "lock")?;
        Ok(self
            .core
            .waiters(lock.as_str())
            .map(|w| {
                Obj::new()
                    .with("session", js::session(w.session))
                    .with("mode", js::mode(w.mode))
                    .with("deadline", js::opt_number(w.deadline.map(|t| t.0)))
                    .with("label", w.label.as_str())
                    .done()
            })
            .collect())
    }

    /// A live session `{id, ttl, expiresAt, holds, waits, watches, lastRequest, label}`, or
    /// `null`.
    /// Throws `out_of_range`. Cost: O(its claims).
    #[wasm_bindgen(unchecked_return_type = "SessionInfo | null")]
    pub fn session(
        &self,
        #[wasm_bindgen(unchecked_param_type = "U64")] id: JsValue,
    ) -> Result<JsValue, JsValue> {
        let id = session_arg(&id)?;
        let Some(s) = self.core.session(id) else {
            return Ok(JsValue::NULL);
        };
        Ok(Obj::new()
            .with("id", js::session(s.id))
            .with("ttl", js::number(s.ttl))
            .with("expiresAt", js::number(s.expires_at.0))
            .with("holds", s.holds)
            .with("waits", s.waits)
            .with("watches", s.watches)
            .with("lastRequest", js::number(s.last_request))
            .with("label", s.label.as_str())
            .done())
    }

    /// Open session ids, ascending. Cost: O(sessions).
    #[wasm_bindgen(unchecked_return_type = "U64[]")]
    pub fn sessions(&self) -> Array {
        self.core.sessions().map(js::session).collect()
    }

    /// Lock entries (held, awaited, watched or in lock-delay), in creation order. Cost: O(locks).
    #[wasm_bindgen(unchecked_return_type = "string[]")]
    pub fn locks(&self) -> Array {
        self.core
            .locks()
            .map(|l| JsValue::from_str(l.as_str()))
            .collect()
    }

    /// The leader of `election`, `{session, epoch}`, or `null`. Throws `bad_argument`.
    /// Cost: O(name length).
    #[wasm_bindgen(unchecked_return_type = "Leader | null")]
    pub fn leader(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] election: JsValue,
    ) -> Result<JsValue, JsValue> {
        let election = js::name(&election, "election")?;
        Ok(match self.core.leader(election.as_str()) {
            Some(l) => Obj::new()
                .with("session", js::session(l.session))
                .with("epoch", js::token(l.epoch))
                .done(),
            None => JsValue::NULL,
        })
    }

    /// The tick before which `lock` will not be granted because of lock-delay, or `null`.
    /// Throws `bad_argument`. Cost: O(name length).
    #[wasm_bindgen(js_name = lockDelayUntil, unchecked_return_type = "U64 | null")]
    pub fn lock_delay_until(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] lock: JsValue,
    ) -> Result<JsValue, JsValue> {
        let lock = js::name(&lock, "lock")?;
        Ok(js::opt_number(
            self.core.lock_delay_until(lock.as_str()).map(|t| t.0),
        ))
    }

    /// Table capacities `{sessions, locks, claims}`. Cost: O(1).
    #[wasm_bindgen(unchecked_return_type = "Capacities")]
    pub fn capacity(&self) -> JsValue {
        let c = self.core.capacity();
        counts(c.sessions, c.locks, c.claims)
    }

    /// Rows in use per table `{sessions, locks, claims}` (core's `usage()`). Cost: O(1).
    #[wasm_bindgen(unchecked_return_type = "Usage")]
    pub fn usage(&self) -> JsValue {
        let u = self.core.usage();
        counts(u.sessions, u.locks, u.claims)
    }

    /// Keys the service's indexes with a secret (`key`: 16 bytes from a random source,
    /// `crypto.getRandomValues(new Uint8Array(16))`; keep it secret), the core's
    /// `set_name_key`: a host that serves lock names others choose calls it after `new`,
    /// so that names chosen to share a probe run cannot slow every call; the session and
    /// claim indexes are keyed too (a snapshot's author chooses its session ids: restore
    /// such bytes with `restore`'s key). Nothing observable changes (answers, events,
    /// queries, snapshots); a key is not in snapshots. Throws `bad_argument` (not a
    /// `Uint8Array` of 16 bytes; nothing changes). Cost: O(capacity of the three tables).
    #[wasm_bindgen(js_name = setNameKey)]
    pub fn set_name_key(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] key: JsValue,
    ) -> Result<(), JsValue> {
        self.core.set_name_key(js::name_key(&key)?);
        Ok(())
    }

    /// Whether `setNameKey` was called. Cost: O(1).
    #[wasm_bindgen(js_name = isNameKeyed)]
    pub fn is_name_keyed(&self) -> bool {
        self.core.is_name_keyed()
    }

    /// The most events one input can emit now (core's `max_events()`). Cost: O(1).
    #[wasm_bindgen(js_name = maxEvents)]
    pub fn max_events(&self) -> f64 {
        self.core.max_events() as f64
    }

    /// The configuration `{lockDelay, maxNameLen, maxWatchers}`. Cost: O(1).
    #[wasm_bindgen(
        unchecked_return_type = "{ lockDelay: U64; maxNameLen: number; maxWatchers: number }"
    )]
    pub fn config(&self) -> JsValue {
        let c = self.core.config();
        Obj::new()
            .with("lockDelay", js::number(c.lock_delay))
            .with("maxNameLen", c.max_name_len)
            .with("maxWatchers", c.max_watchers)
            .done()
    }

    /// The canonical snapshot bytes (the same input history gives the same bytes, on every
    /// platform; a refused input leaves them as the advance to its `now` left them).
    /// Throws `out_of_memory` if the module cannot hold a copy. Cost: O(sessions + locks
    /// + claims).
    #[wasm_bindgen(unchecked_return_type = "Uint8Array")]
    pub fn snapshot(&self) -> Result<JsValue, JsValue> {
        let mut buf = js::zeroed(self.core.snapshot_len(), "snapshot")?;
        let n = self.core.snapshot(&mut buf).map_err(Fail::from)?;
        Ok(js::uint8(buf.get(..n).unwrap_or(&[])))
    }
}

/// The first `n` bytes of `buf` as a `Uint8Array` (`n` from `to_frame`: MAX_FRAME_LEN fits
/// every reply and event, so the encoding does not fail).
fn bytes(n: Result<usize, Error>, buf: &[u8]) -> JsValue {
    js::uint8(buf.get(..n.unwrap_or(0)).unwrap_or(&[]))
}

fn counts(sessions: u32, locks: u32, claims: u32) -> JsValue {
    Obj::new()
        .with("sessions", sessions)
        .with("locks", locks)
        .with("claims", claims)
        .done()
}
