//! The named fields of a reply and of an event: the one spelling of their values that every
//! binding's objects and every recording use (`docs/RECORDING.md`). A JSON writer writes
//! `{"kind": kind(), name: value, …}` in the order given here; the wasm binding's answers
//! and the server's `fencelock export` are two such writers. Nothing here makes text: a
//! writer is handed names and values (no allocation, no `core::fmt`).

use crate::{Mode, Output, ReleaseReason, Reply};

/// One named value of a reply or an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field<'a> {
    /// A number: a session id, a token, a tick, a count or a position.
    Number(u64),
    /// Text: a lock name, a holder label, or a word (a release reason, a change).
    Text(&'a str),
    /// A mode, spelt `"exclusive"`, `"shared"` or `{"permits": count, "limit": limit}`.
    Mode(Mode),
}

impl ReleaseReason {
    /// The reason as a word: `"released"`, `"closed"` or `"expired"`. Cost: O(1).
    /// Errors: none.
    pub fn kind(self) -> &'static str {
        match self {
            ReleaseReason::Released => "released",
            ReleaseReason::Closed => "closed",
            ReleaseReason::Expired => "expired",
        }
    }
}

impl Reply {
    /// Hands `f` each field of this reply besides its [`kind`](Self::kind), in order:
    /// `opened` → `session`, `expiresAt`; `kept_alive` → `expiresAt`; `granted` → `mode`,
    /// `token`; `queued` → `mode`, `position`; `released` and `hold_ended` → `token`;
    /// `ticked` → `now`; `watching` → `holders`; the others none. Cost: O(1). Errors: none.
    pub fn fields<'a>(&'a self, mut f: impl FnMut(&'static str, Field<'a>)) {
        use Field::{Mode as M, Number as N};
        match *self {
            Reply::Opened {
                session,
                expires_at,
            } => {
                f("session", N(session.0));
                f("expiresAt", N(expires_at.0));
            }
            Reply::KeptAlive { expires_at } => f("expiresAt", N(expires_at.0)),
            Reply::Granted { mode, token } => {
                f("mode", M(mode));
                f("token", N(token.0));
            }
            Reply::Queued { mode, position } => {
                f("mode", M(mode));
                f("position", N(u64::from(position)));
            }
            Reply::Released { token } | Reply::HoldEnded { token } => f("token", N(token.0)),
            Reply::Ticked { now } => f("now", N(now.0)),
            Reply::Watching { holders } => f("holders", N(u64::from(holders))),
            Reply::Closed
            | Reply::Busy
            | Reply::Cancelled
            | Reply::WaitEnded
            | Reply::Unwatched => {}
        }
    }
}

impl Output {
    /// Hands `f` each field of this event besides its [`kind`](Self::kind), in order:
    /// `session` first (the session the event is for), then `granted` → `lock`, `mode`,
    /// `token`; `released` → `lock`, `token`, `reason`; `wait_timed_out` → `lock`;
    /// `holder_changed` → `lock`, `holder`, `mode`, `token`, `change`, `label`;
    /// `session_expired` nothing more. Cost: O(1). Errors: none.
    pub fn fields<'a>(&'a self, mut f: impl FnMut(&'static str, Field<'a>)) {
        use Field::{Mode as M, Number as N, Text as T};
        f("session", N(self.session().0));
        match self {
            Output::Granted {
                lock, mode, token, ..
            } => {
                f("lock", T(lock.as_str()));
                f("mode", M(*mode));
                f("token", N(token.0));
            }
            Output::Released {
                lock,
                token,
                reason,
                ..
            } => {
                f("lock", T(lock.as_str()));
                f("token", N(token.0));
                f("reason", T(reason.kind()));
            }
            Output::SessionExpired { .. } => {}
            Output::WaitTimedOut { lock, .. } => f("lock", T(lock.as_str())),
            Output::HolderChanged {
                lock,
                holder,
                mode,
                token,
                change,
                label,
                ..
            } => {
                f("lock", T(lock.as_str()));
                f("holder", N(holder.0));
                f("mode", M(*mode));
                f("token", N(token.0));
                f("change", T(change.kind()));
                f("label", T(label.as_str()));
            }
        }
    }
}
