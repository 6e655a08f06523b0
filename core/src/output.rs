//! What the service hands back to the host.

use serde::{Deserialize, Serialize};

use crate::{LockName, Mode, SessionId, Tick, Token};

/// Why a hold ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReleaseReason {
    /// The holder released it.
    Released,
    /// The holder closed its session.
    Closed,
    /// The holder's session expired (lock-delay applies).
    Expired,
}

/// One event for the host to route. Each names the session the host must tell; none may
/// be dropped (the host's sink receives every one, see
/// [`LockService::handle`](crate::LockService::handle) for the bound per input).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Output {
    /// A session was opened. Tell the client its id and deadline.
    SessionOpened {
        /// The new session.
        session: SessionId,
        /// It expires at this tick unless kept alive.
        expires_at: Tick,
    },
    /// A keep-alive was applied. Tell the client (this is its heartbeat ack).
    SessionRenewed {
        /// The session.
        session: SessionId,
        /// Its new deadline.
        expires_at: Tick,
    },
    /// A session was closed at its client's request.
    SessionClosed {
        /// The session.
        session: SessionId,
    },
    /// A session's deadline passed: its holds are released (lock-delay applies) and its
    /// waits dropped. Tell the client, if it can still be reached, that it lost everything.
    SessionExpired {
        /// The session.
        session: SessionId,
    },
    /// The session now holds the lock. Wake the client; every action it takes on the
    /// protected resource must carry `token`.
    Granted {
        /// The new holder.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// The mode it holds it in.
        mode: Mode,
        /// Its fencing token.
        token: Token,
    },
    /// The acquire was queued; a `Granted`, `WaitTimedOut`, `WaitCancelled` or the
    /// session's end follows. Nothing else needs polling.
    Queued {
        /// The waiter.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// The mode asked for.
        mode: Mode,
        /// 1 = next in line.
        position: u32,
    },
    /// A try-lock (or an already-passed deadline) found the lock taken: nothing queued.
    Busy {
        /// The session that asked.
        session: SessionId,
        /// The lock.
        lock: LockName,
    },
    /// A hold ended. Tell the former holder: its token is no longer good.
    Released {
        /// The former holder.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// The token of the hold that ended.
        token: Token,
        /// Why.
        reason: ReleaseReason,
    },
    /// A timed wait reached its deadline without a grant; it is no longer queued.
    WaitTimedOut {
        /// The former waiter.
        session: SessionId,
        /// The lock.
        lock: LockName,
    },
    /// A queued acquire was withdrawn at the waiter's request.
    WaitCancelled {
        /// The former waiter.
        session: SessionId,
        /// The lock.
        lock: LockName,
    },
}

impl Output {
    /// The session the host must notify of this output. Cost: O(1).
    pub fn session(&self) -> SessionId {
        match self {
            Output::SessionOpened { session, .. }
            | Output::SessionRenewed { session, .. }
            | Output::SessionClosed { session }
            | Output::SessionExpired { session }
            | Output::Granted { session, .. }
            | Output::Queued { session, .. }
            | Output::Busy { session, .. }
            | Output::Released { session, .. }
            | Output::WaitTimedOut { session, .. }
            | Output::WaitCancelled { session, .. } => *session,
        }
    }
}
