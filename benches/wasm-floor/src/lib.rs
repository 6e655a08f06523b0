//! A measure, not a product: how many bytes of wasm the core's lock rules take behind the
//! thinnest binding that can still run a lock table from JavaScript.
//! `scripts/wasm-floor.sh` (run by `make bench`) builds it exactly as the shipped module is
//! built (`scripts/wasm-flags.sh`: the crate at `opt-level = "z"`, the core at `"s"`,
//! wasm-bindgen, `wasm-opt -Oz`), runs it once under node, and BENCHMARKS.md reports its
//! size beside the shipped bundle's (the "wasm floor" rows).
//!
//! What it has: the core's inputs but the labelled open (open, keep-alive, close, acquire
//! in every mode and wait, release, cancel, watch, unwatch, tick), without request
//! numbers, the next deadline, and the events as numbers with their lock names. Answers are numbers: a reply's code (the
//! numbering of the shipped modules' typed calls, opened 0 … unwatched 12) or minus a
//! refusal's code, its value read apart.
//! What it leaves out, and the shipped module has: the object API (answers and events as
//! objects), error messages, snapshots, frames, the gate, the keeper, names interned,
//! argument checks beyond what the core makes (numbers are cast, not judged). It is not
//! tested as an API; nothing ships it.
#![cfg_attr(target_arch = "wasm32", no_std)]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

extern crate alloc;

use alloc::string::String;
use alloc::vec::Vec;

use fencelock::{
    Config, Error, EventQueue, Mode, Output, Reply, SessionId, Tick, VecStorage, Wait,
};
use wasm_bindgen::prelude::*;

/// The heap, as in the shipped module.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// Traps, as in the shipped module.
#[cfg(target_arch = "wasm32")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

/// A lock service with numbers in and out.
#[wasm_bindgen]
pub struct FloorService {
    core: Core,
    /// The events kept until taken, within the core's limit (as the shipped fast path).
    events: EventQueue,
    value: f64,
}

/// A reply's code (the numbering both shipped modules use, `fencelock_wasm_args`) with its
/// value kept apart, or minus a refusal's code.
fn answer(r: Result<Reply, Error>, value: &mut f64) -> i32 {
    match r {
        Ok(reply) => {
            let (code, v) = fencelock_wasm_args::reply_code(&reply);
            *value = v as f64;
            code
        }
        Err(e) => -(e.code() as i32),
    }
}

fn mode(m: u32, count: u32, limit: u32) -> Mode {
    match m {
        2 => Mode::Shared,
        3 => Mode::Permits { count, limit },
        _ => Mode::Exclusive,
    }
}

fn wait(w: u32, until: f64) -> Wait {
    match w {
        2 => Wait::Forever,
        3 => Wait::Until(Tick(until as u64)),
        _ => Wait::None,
    }
}

type Core = fencelock::LockService<VecStorage>;
/// The shape of the core's inputs on a named lock (release, cancel, watch, unwatch).
type NamedInput =
    fn(&mut Core, Tick, SessionId, &str, Option<u64>, &mut EventQueue) -> Result<Reply, Error>;

impl FloorService {
    fn named(&mut self, now: f64, session: f64, lock: &str, input: NamedInput) -> i32 {
        let r = input(
            &mut self.core,
            Tick(now as u64),
            SessionId(session as u64),
            lock,
            None,
            &mut self.events,
        );
        answer(r, &mut self.value)
    }
}

#[wasm_bindgen]
impl FloorService {
    /// A service of these capacities (the default config); `undefined` if refused.
    pub fn create(sessions: u32, locks: u32, claims: u32) -> Option<FloorService> {
        let storage =
            VecStorage::try_new(sessions as usize, locks as usize, claims as usize).ok()?;
        let core = fencelock::LockService::new(storage, Config::default()).ok()?;
        Some(FloorService {
            events: EventQueue::new(core.default_event_limit()),
            core,
            value: 0.0,
        })
    }

    /// Opens a session.
    #[wasm_bindgen(js_name = openSession)]
    pub fn open_session(&mut self, now: f64, ttl: f64) -> i32 {
        let r = self
            .core
            .open_session(Tick(now as u64), ttl as u64, &mut self.events);
        answer(r, &mut self.value)
    }

    /// Keeps a session alive.
    #[wasm_bindgen(js_name = keepAlive)]
    pub fn keep_alive(&mut self, now: f64, session: f64) -> i32 {
        let r = self.core.keep_alive(
            Tick(now as u64),
            SessionId(session as u64),
            None,
            &mut self.events,
        );
        answer(r, &mut self.value)
    }

    /// Closes a session.
    #[wasm_bindgen(js_name = closeSession)]
    pub fn close_session(&mut self, now: f64, session: f64) -> i32 {
        let r = self.core.close_session(
            Tick(now as u64),
            SessionId(session as u64),
            None,
            &mut self.events,
        );
        answer(r, &mut self.value)
    }

    /// Acquires (`mode` 1 exclusive, 2 shared, 3 permits; `wait` 1 none, 2 forever, 3 until).
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        now: f64,
        session: f64,
        lock: &str,
        m: u32,
        count: u32,
        limit: u32,
        w: u32,
        until: f64,
    ) -> i32 {
        let r = self.core.acquire(
            Tick(now as u64),
            SessionId(session as u64),
            lock,
            mode(m, count, limit),
            wait(w, until),
            None,
            &mut self.events,
        );
        answer(r, &mut self.value)
    }

    /// Releases.
    pub fn release(&mut self, now: f64, session: f64, lock: &str) -> i32 {
        self.named(now, session, lock, Core::release)
    }

    /// Cancels a wait.
    pub fn cancel(&mut self, now: f64, session: f64, lock: &str) -> i32 {
        self.named(now, session, lock, Core::cancel)
    }

    /// Watches a lock's holders.
    pub fn watch(&mut self, now: f64, session: f64, lock: &str) -> i32 {
        self.named(now, session, lock, Core::watch)
    }

    /// Stops watching.
    pub fn unwatch(&mut self, now: f64, session: f64, lock: &str) -> i32 {
        self.named(now, session, lock, Core::unwatch)
    }

    /// Advances time: 10 (ticked), or minus a refusal's code.
    pub fn tick(&mut self, now: f64) -> i32 {
        let now = Tick(now as u64);
        let r = self.core.tick(now, &mut self.events);
        answer(r.map(|()| Reply::Ticked { now }), &mut self.value)
    }

    /// The next tick something is due, or -1.
    #[wasm_bindgen(js_name = pollTimeout)]
    pub fn poll_timeout(&self) -> f64 {
        self.core.poll_timeout().map_or(-1.0, |t| t.0 as f64)
    }

    /// The value of the latest answer (session, token, position, deadline...).
    #[wasm_bindgen(js_name = replyValue)]
    pub fn reply_value(&self) -> f64 {
        self.value
    }

    /// Takes the events: per event its kind (1-based), session, token, holder and the
    /// index of its lock name in `names` (which it fills).
    #[wasm_bindgen(js_name = takeEvents)]
    pub fn take_events(&mut self, names: &js_sys_free::Names) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.events.events().len() * 5);
        for o in self.events.events() {
            let (kind, token, holder, lock) = match o {
                Output::Granted { lock, token, .. } => (1, token.0, 0, Some(lock.as_str())),
                Output::Released { lock, token, .. } => (2, token.0, 0, Some(lock.as_str())),
                Output::SessionExpired { .. } => (3, 0, 0, None),
                Output::WaitTimedOut { lock, .. } => (4, 0, 0, Some(lock.as_str())),
                Output::HolderChanged {
                    lock,
                    token,
                    holder,
                    ..
                } => (5, token.0, holder.0, Some(lock.as_str())),
                _ => (0, 0, 0, None),
            };
            // `push` answers the new length: the name is at one less.
            let at = lock.map_or(-1.0, |l| names.push(String::from(l)) as f64 - 1.0);
            out.extend([
                kind as f64,
                o.session().0 as f64,
                token as f64,
                holder as f64,
                at,
            ]);
        }
        self.events.clear();
        out
    }
}

/// Lock names handed to JS without an object per event.
pub mod js_sys_free {
    use alloc::string::String;
    use wasm_bindgen::prelude::*;

    #[wasm_bindgen]
    extern "C" {
        /// A JS array of strings.
        #[wasm_bindgen(typescript_type = "string[]")]
        pub type Names;
        /// `Array.prototype.push`: the new length.
        #[wasm_bindgen(method)]
        pub fn push(this: &Names, s: String) -> u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binding runs a lock table: the answers are the core's, in numbers.
    #[test]
    fn a_lock_table_runs_behind_the_floor_binding() {
        let mut s = FloorService::create(2, 2, 4).expect("small capacities");
        assert_eq!(s.open_session(0.0, 10.0), 0);
        let a = s.reply_value();
        assert_eq!(s.open_session(0.0, 10.0), 0);
        let b = s.reply_value();
        assert_eq!(s.acquire(1.0, a, "l", 1, 0, 0, 1, 0.0), 3, "granted");
        assert_eq!(s.reply_value(), 1.0, "token 1");
        assert_eq!(s.acquire(1.0, b, "l", 1, 0, 0, 2, 0.0), 4, "queued");
        assert_eq!(
            s.release(2.0, b, "l"),
            -(Error::NotHolder(SessionId(b as u64)).code() as i32)
        );
        assert_eq!(s.release(2.0, a, "l"), 6, "released");
        assert_eq!(s.events.events().len(), 1, "b granted");
        assert_eq!(s.tick(1.0), -205, "time went backwards");
        assert!(FloorService::create(u32::MAX, 1, 1).is_none());
    }
}
