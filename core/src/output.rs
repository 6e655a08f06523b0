//! What the service tells sessions other than the caller: the events of an input.

use serde::{Deserialize, Serialize};

use crate::{Label, LockName, Mode, SessionId, Token};

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

/// What a [`Output::HolderChanged`] tells a watcher about one holder of the lock it
/// watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Change {
    /// It held the lock when the watch began (one per holder, in grant order).
    Holding,
    /// It was granted the lock (from the queue, or at once by an acquire).
    Granted,
    /// It released the lock.
    Released,
    /// Its session closed, ending the hold.
    Closed,
    /// Its session expired, ending the hold (lock-delay applies).
    Expired,
}

impl Change {
    /// A short, stable, snake_case name: `"holding"`, `"granted"`, `"released"`,
    /// `"closed"` or `"expired"`. Cost: O(1). Errors: none.
    pub fn kind(self) -> &'static str {
        match self {
            Change::Holding => "holding",
            Change::Granted => "granted",
            Change::Released => "released",
            Change::Closed => "closed",
            Change::Expired => "expired",
        }
    }
}

/// One event for the host to route to the session it names ([`Output::session`]). Events
/// are what an input causes *besides* the caller's own answer (its [`Reply`](crate::Reply)):
/// grants to waiters, and what time or a close ended. None may be dropped: the host's
/// [`Sink`](crate::Sink) receives every one (see
/// [`LockService::max_events`](crate::LockService::max_events) for the bound per input).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Output {
    /// A waiter now holds the lock. Wake its client; every action it takes on the
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
    /// A hold ended by its session's close or expiry. Tell the former holder: its token is
    /// no longer good. (A release the holder asked for is its [`Reply::Released`](crate::Reply).)
    Released {
        /// The former holder.
        session: SessionId,
        /// The lock.
        lock: LockName,
        /// The token of the hold that ended.
        token: Token,
        /// Why: `Closed` or `Expired`.
        reason: ReleaseReason,
    },
    /// A session's deadline passed: its holds are released (a `Released` with reason
    /// `Expired` follows for each, lock-delay applies) and its waits dropped. Tell the
    /// client, if it can still be reached, that it lost everything.
    SessionExpired {
        /// The session.
        session: SessionId,
    },
    /// A timed wait reached its deadline without a grant; it is no longer queued.
    WaitTimedOut {
        /// The former waiter.
        session: SessionId,
        /// The lock.
        lock: LockName,
    },
    /// To a watcher ([`LockService::watch`](crate::LockService::watch)): a holder of the
    /// lock it watches changed. Sent right after the event that tells the holder (or, for
    /// a change the holder asked for, at the point its reply is decided), to each watcher
    /// of the lock in the order they began watching.
    HolderChanged {
        /// The watcher (the session to notify).
        session: SessionId,
        /// The watched lock.
        lock: LockName,
        /// The holder that changed.
        holder: SessionId,
        /// The mode of its hold.
        mode: Mode,
        /// The token of its hold.
        token: Token,
        /// What happened.
        change: Change,
        /// The holder's label (empty if it has none).
        label: Label,
    },
}

impl Output {
    /// The session the host must notify of this event. Cost: O(1). Errors: none.
    pub fn session(&self) -> SessionId {
        match self {
            Output::Granted { session, .. }
            | Output::Released { session, .. }
            | Output::SessionExpired { session }
            | Output::WaitTimedOut { session, .. }
            | Output::HolderChanged { session, .. } => *session,
        }
    }

    /// The lock the event is about: every event but [`Output::SessionExpired`] names one.
    /// Cost: O(1). Errors: none.
    pub fn lock(&self) -> Option<&LockName> {
        match self {
            Output::Granted { lock, .. }
            | Output::Released { lock, .. }
            | Output::WaitTimedOut { lock, .. }
            | Output::HolderChanged { lock, .. } => Some(lock),
            Output::SessionExpired { .. } => None,
        }
    }

    /// A short, stable, snake_case name for the kind of event (`"granted"`…), the
    /// discriminant the JS and Python bindings use. Cost: O(1). Errors: none.
    pub fn kind(&self) -> &'static str {
        match self {
            Output::Granted { .. } => "granted",
            Output::Released { .. } => "released",
            Output::SessionExpired { .. } => "session_expired",
            Output::WaitTimedOut { .. } => "wait_timed_out",
            Output::HolderChanged { .. } => "holder_changed",
        }
    }
}
