//! What the host feeds the service.

use serde::{Deserialize, Serialize};

use crate::{LockName, Mode, SessionId, Tick, Wait};

/// One input to [`LockService::handle`](crate::LockService::handle). Every input but
/// `Tick` applies at the current tick.
///
/// `request` is the optional per-session request number of idempotent retries (Raft
/// dissertation §6.3): the host numbers a session's requests 1, 2, 3…; a repeat of the
/// session's latest number applies nothing twice and leaves the recorded answer unchanged.
/// It replays the recorded answer, except for an acquire, whose repeat answers from the
/// session's claim on the lock now (the state may have moved on since the recorded
/// answer): holding it → `Granted` with the held mode and current token; queued for it →
/// `Queued` with the queued mode and current 1-based position (an O(queue length) walk,
/// on the replay path only); neither → the recorded `Busy` stays `Busy`, a recorded
/// `Queued` becomes `WaitTimedOut` (the wait ended without a grant), a recorded `Granted`
/// becomes `Released` with the recorded token and reason `Released` (that hold has
/// ended). An older number is refused with [`Error::StaleRequest`](crate::Error); the
/// latest number on a different kind of input, lock or mode is refused with
/// [`Error::RequestReused`](crate::Error); a refused input records nothing, so its retry
/// is evaluated afresh; `None` opts out (nothing checked, nothing recorded).
/// "Request-number errors" in the methods' docs means `StaleRequest` and `RequestReused`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Input {
    /// Open a session that expires `ttl` ticks from now unless kept alive.
    OpenSession {
        /// Time to live in ticks, at least 1.
        ttl: u64,
    },
    /// Renew a session: its deadline becomes now + its ttl.
    KeepAlive {
        /// The session.
        session: SessionId,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Close a session: release everything it holds, drop its waits.
    CloseSession {
        /// The session.
        session: SessionId,
        /// Idempotent-retry number (a retry after success finds the session gone and gets
        /// [`Error::UnknownSession`](crate::Error), which a client may treat as done).
        request: Option<u64>,
    },
    /// Acquire a lock, waiting as `wait` says if it is not free.
    Acquire {
        /// The session that will hold it.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// Exclusive or shared.
        mode: Mode,
        /// Try-lock, timed wait or wait forever.
        wait: Wait,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Release a held lock.
    Release {
        /// The holder.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Withdraw a queued acquire.
    Cancel {
        /// The waiter.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// Idempotent-retry number.
        request: Option<u64>,
    },
    /// Advance logical time to `now` and do whatever has come due.
    Tick {
        /// The new current tick (not earlier than the current one).
        now: Tick,
    },
}

impl Input {
    /// The session this input acts for: `None` for [`Input::OpenSession`] (there is none
    /// yet) and [`Input::Tick`]. Hosts use it to route an input's outputs back to the
    /// requester. Cost: O(1). Errors: none.
    pub fn session(&self) -> Option<SessionId> {
        match self {
            Input::KeepAlive { session, .. }
            | Input::CloseSession { session, .. }
            | Input::Acquire { session, .. }
            | Input::Release { session, .. }
            | Input::Cancel { session, .. } => Some(*session),
            Input::OpenSession { .. } | Input::Tick { .. } => None,
        }
    }

    /// The idempotent-retry number the input carries, if any. Cost: O(1). Errors: none.
    pub fn request(&self) -> Option<u64> {
        match self {
            Input::KeepAlive { request, .. }
            | Input::CloseSession { request, .. }
            | Input::Acquire { request, .. }
            | Input::Release { request, .. }
            | Input::Cancel { request, .. } => *request,
            Input::OpenSession { .. } | Input::Tick { .. } => None,
        }
    }
}
