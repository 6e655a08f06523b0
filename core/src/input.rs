//! What the host feeds the service.

use serde::{Deserialize, Serialize};

use crate::{Label, LockName, Mode, SessionId, Tick, Token, Wait};

/// One input to [`LockService::handle`](crate::LockService::handle).
///
/// **Every input carries the host's `now`.** Before applying it the service advances to
/// `now` exactly as [`Input::Tick`] would (expire sessions, time out waits, end
/// lock-delays, grant), so a host that handles each message as it arrives, with no tick in
/// between, gets the same outcome as one that ticks first. A `now` earlier than the
/// service's is refused with [`Error::TimeWentBackwards`](crate::Error).
///
/// `request` is the optional per-session request number of idempotent retries (Raft
/// dissertation §6.3): the host numbers a session's requests 1, 2, 3…; a repeat of the
/// session's latest number applies nothing twice and returns the reply the original
/// returned — for an acquire, brought up to date from the session's claim on the lock now
/// (see [`LockService::acquire`](crate::LockService::acquire)). An older number is refused
/// with [`Error::StaleRequest`](crate::Error); the latest number on a different kind of
/// input, lock or mode is refused with [`Error::RequestReused`](crate::Error); a refused
/// input records nothing, so its retry is evaluated afresh; `None` opts out (nothing
/// checked, nothing recorded). "Request-number errors" in the methods' docs means
/// `StaleRequest` and `RequestReused`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Input {
    /// Open a session that expires `ttl` ticks after `now` unless kept alive.
    OpenSession {
        /// The host's current tick.
        now: Tick,
        /// Time to live in ticks, at least 1.
        ttl: u64,
    },
    /// Keep a session alive: its deadline becomes `now` + its ttl.
    KeepAlive {
        /// The host's current tick.
        now: Tick,
        /// The session.
        session: SessionId,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Close a session: release everything it holds, drop its waits.
    CloseSession {
        /// The host's current tick.
        now: Tick,
        /// The session.
        session: SessionId,
        /// Idempotent-retry number (a retry after success finds the session gone and gets
        /// [`Error::UnknownSession`](crate::Error), which a client may treat as done).
        request: Option<u64>,
    },
    /// Acquire a lock, waiting as `wait` says if it is not free.
    Acquire {
        /// The host's current tick.
        now: Tick,
        /// The session that will hold it.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// Exclusive, shared, or `count` of a semaphore's `limit` permits.
        mode: Mode,
        /// Try-lock, timed wait or wait forever.
        wait: Wait,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Release a held lock.
    Release {
        /// The host's current tick.
        now: Tick,
        /// The holder.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Withdraw a queued acquire.
    Cancel {
        /// The host's current tick.
        now: Tick,
        /// The waiter.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Advance logical time to `now` and do whatever has come due (for timers: a host
    /// calls it when [`poll_timeout`](crate::LockService::poll_timeout) comes due).
    Tick {
        /// The new current tick (not earlier than the current one).
        now: Tick,
    },
    /// Open a session as [`Input::OpenSession`] does, with a holder label that watchers
    /// and introspection show.
    OpenLabeled {
        /// The host's current tick.
        now: Tick,
        /// Time to live in ticks, at least 1.
        ttl: u64,
        /// The session's label (may be empty).
        label: Label,
    },
    /// Watch a lock: its current holders, then every holder change, as
    /// [`Output::HolderChanged`](crate::Output) events for this session.
    Watch {
        /// The host's current tick.
        now: Tick,
        /// The watcher.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// End a watch.
    Unwatch {
        /// The host's current tick.
        now: Tick,
        /// The watcher.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Release the session's hold on a lock only if it is the hold granted with `token`: a
    /// later hold of the same session on the same lock (taken after this one ended) is
    /// refused, not released. For a caller that names a hold by its token, such as an
    /// operator who read the token from a listing, or a retry without a request number.
    ReleaseHold {
        /// The host's current tick.
        now: Tick,
        /// The holder.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// The token of the hold to release.
        token: Token,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
}

impl Input {
    /// The host's tick this input carries. Cost: O(1). Errors: none.
    pub fn now(&self) -> Tick {
        match self {
            Input::OpenSession { now, .. }
            | Input::KeepAlive { now, .. }
            | Input::CloseSession { now, .. }
            | Input::Acquire { now, .. }
            | Input::Release { now, .. }
            | Input::Cancel { now, .. }
            | Input::Tick { now }
            | Input::OpenLabeled { now, .. }
            | Input::Watch { now, .. }
            | Input::Unwatch { now, .. }
            | Input::ReleaseHold { now, .. } => *now,
        }
    }

    /// The session this input acts for: `None` for [`Input::OpenSession`] and
    /// [`Input::OpenLabeled`] (there is none yet) and [`Input::Tick`]. Cost: O(1).
    /// Errors: none.
    pub fn session(&self) -> Option<SessionId> {
        match self {
            Input::KeepAlive { session, .. }
            | Input::CloseSession { session, .. }
            | Input::Acquire { session, .. }
            | Input::Release { session, .. }
            | Input::Cancel { session, .. }
            | Input::Watch { session, .. }
            | Input::Unwatch { session, .. }
            | Input::ReleaseHold { session, .. } => Some(*session),
            Input::OpenSession { .. } | Input::OpenLabeled { .. } | Input::Tick { .. } => None,
        }
    }

    /// The idempotent-retry number the input carries, if any. Cost: O(1). Errors: none.
    pub fn request(&self) -> Option<u64> {
        match self {
            Input::KeepAlive { request, .. }
            | Input::CloseSession { request, .. }
            | Input::Acquire { request, .. }
            | Input::Release { request, .. }
            | Input::Cancel { request, .. }
            | Input::Watch { request, .. }
            | Input::Unwatch { request, .. }
            | Input::ReleaseHold { request, .. } => *request,
            Input::OpenSession { .. } | Input::OpenLabeled { .. } | Input::Tick { .. } => None,
        }
    }

    /// A short, stable, snake_case name for the kind of input: `"open_session"`,
    /// `"open_labeled"`, `"keep_alive"`, `"close_session"`, `"acquire"`, `"release"`,
    /// `"cancel"`, `"tick"`, `"watch"`, `"unwatch"` or `"release_hold"`. Cost: O(1).
    /// Errors: none.
    pub fn kind(&self) -> &'static str {
        match self {
            Input::OpenSession { .. } => "open_session",
            Input::OpenLabeled { .. } => "open_labeled",
            Input::KeepAlive { .. } => "keep_alive",
            Input::CloseSession { .. } => "close_session",
            Input::Acquire { .. } => "acquire",
            Input::Release { .. } => "release",
            Input::Cancel { .. } => "cancel",
            Input::Tick { .. } => "tick",
            Input::Watch { .. } => "watch",
            Input::Unwatch { .. } => "unwatch",
            Input::ReleaseHold { .. } => "release_hold",
        }
    }

    /// A copy of this input with its `now` replaced (a replicated host stamps inputs with
    /// the leader's clock when it proposes them). Cost: O(1). Errors: none.
    pub fn at(mut self, tick: Tick) -> Input {
        match &mut self {
            Input::OpenSession { now, .. }
            | Input::KeepAlive { now, .. }
            | Input::CloseSession { now, .. }
            | Input::Acquire { now, .. }
            | Input::Release { now, .. }
            | Input::Cancel { now, .. }
            | Input::Tick { now }
            | Input::OpenLabeled { now, .. }
            | Input::Watch { now, .. }
            | Input::Unwatch { now, .. }
            | Input::ReleaseHold { now, .. } => *now = tick,
        }
        self
    }
}
