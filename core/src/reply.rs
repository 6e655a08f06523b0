//! [`Reply`]: the caller's own answer to an input, returned by the call itself.

use serde::{Deserialize, Serialize};

use crate::{Mode, SessionId, Tick, Token};

/// The answer to the session that sent an input, returned by the call (never through the
/// [`Sink`](crate::Sink)). Everything else the input causes goes to the sink as
/// [`Output`](crate::Output)s: events for other sessions, caused by time, and a few for the
/// caller (its holds' `Released` on close, a watch's `Holding` snapshot).
///
/// A repeat of a session's latest request number returns the reply the original returned,
/// except that an acquire's repeat answers from the session's claim on the lock *now* (see
/// [`LockService::acquire`](crate::LockService::acquire)): `HoldEnded` and `WaitEnded` are
/// how such a repeat says the hold or wait it answered is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Reply {
    /// The session was opened.
    Opened {
        /// Its id.
        session: SessionId,
        /// It expires at this tick unless kept alive.
        expires_at: Tick,
    },
    /// The keep-alive was applied: the session's new deadline.
    KeptAlive {
        /// It expires at this tick unless kept alive again.
        expires_at: Tick,
    },
    /// The session was closed; its holds were released (each a
    /// [`Output::Released`](crate::Output) with reason `Closed`, in the sink).
    Closed,
    /// The session holds the lock: carry `token` with every action on the resource.
    Granted {
        /// The mode it holds the lock in.
        mode: Mode,
        /// Its fencing token.
        token: Token,
    },
    /// The acquire waits in the lock's queue; an [`Output::Granted`](crate::Output) or
    /// [`Output::WaitTimedOut`](crate::Output) for this session follows, or the wait ends
    /// by the session's own [`Input::Cancel`](crate::Input::Cancel) (a candidate's resign),
    /// or the session ends.
    Queued {
        /// The mode asked for.
        mode: Mode,
        /// 1 = next in line.
        position: u32,
    },
    /// A try-lock (or a deadline not after now) found the lock taken, or in lock-delay
    /// with nothing holding it: nothing was queued.
    Busy,
    /// The hold ended; `token` is no longer good.
    Released {
        /// The token of the hold that ended.
        token: Token,
    },
    /// The queued acquire was withdrawn.
    Cancelled,
    /// Only as the repeat of an acquire that was granted: that hold has since ended.
    HoldEnded {
        /// The token of the hold that ended.
        token: Token,
    },
    /// Only as the repeat of an acquire that was queued: the wait is over — it timed out
    /// or was cancelled, or it was granted and that hold has ended since (a release
    /// without a request number, or a forced one); the session holds nothing from it.
    WaitEnded,
    /// The answer to [`Input::Tick`](crate::Input): time is now `now`.
    Ticked {
        /// The current tick.
        now: Tick,
    },
    /// The watch began: one [`Output::HolderChanged`](crate::Output) with change
    /// `Holding` per current holder is in the sink.
    Watching {
        /// How many holders the lock had (so many `Holding` events).
        holders: u32,
    },
    /// The watch ended: no more events for it.
    Unwatched,
}

impl Reply {
    /// The fencing token of a `Granted`, `Released` or `HoldEnded` reply. Cost: O(1).
    /// Errors: none.
    pub fn token(&self) -> Option<Token> {
        match self {
            Reply::Granted { token, .. }
            | Reply::Released { token }
            | Reply::HoldEnded { token } => Some(*token),
            _ => None,
        }
    }

    /// The new session of an `Opened` reply. Cost: O(1). Errors: none.
    pub fn opened(&self) -> Option<SessionId> {
        match self {
            Reply::Opened { session, .. } => Some(*session),
            _ => None,
        }
    }

    /// A short, stable, snake_case name for the kind of reply (`"granted"`…), the
    /// discriminant the JS and Python bindings use. Cost: O(1). Errors: none.
    pub fn kind(&self) -> &'static str {
        match self {
            Reply::Opened { .. } => "opened",
            Reply::KeptAlive { .. } => "kept_alive",
            Reply::Closed => "closed",
            Reply::Granted { .. } => "granted",
            Reply::Queued { .. } => "queued",
            Reply::Busy => "busy",
            Reply::Released { .. } => "released",
            Reply::Cancelled => "cancelled",
            Reply::HoldEnded { .. } => "hold_ended",
            Reply::WaitEnded => "wait_ended",
            Reply::Ticked { .. } => "ticked",
            Reply::Watching { .. } => "watching",
            Reply::Unwatched => "unwatched",
        }
    }
}
