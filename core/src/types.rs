//! Identifiers and small value types shared by inputs, outputs and queries.

use core::fmt;
use serde::{Deserialize, Serialize};

use crate::Error;

/// The longest lock or resource name any build accepts, in bytes. A service may be
/// configured with a smaller limit ([`Config::max_name_len`](crate::Config)).
pub const MAX_NAME_LEN: usize = 64;

/// A logical instant. Time advances only through the `now` every [`Input`](crate::Input)
/// carries (a [`Input::Tick`](crate::Input) carries nothing else); the host decides what
/// one tick is worth (a millisecond, a second, a log index…).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Tick(pub u64);

impl Tick {
    /// `self + ticks`, or `None` on overflow. Cost: O(1).
    pub fn checked_add(self, ticks: u64) -> Option<Tick> {
        self.0.checked_add(ticks).map(Tick)
    }
}

impl fmt::Display for Tick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// A session's identifier. Assigned from a counter starting at 1; never reused, not even
/// after snapshot/restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionId(pub u64);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "session {}", self.0)
    }
}

/// A fencing token: the service-wide revision at which a grant was made. Every grant gets
/// a token strictly greater than every token granted before it; 0 is never a valid token.
/// Carry it with every action on the protected resource and check it with a
/// [`FenceGate`](crate::FenceGate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Token(pub u64);

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "token {}", self.0)
    }
}

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// One holder at a time (a writer, a leader).
    Exclusive,
    /// Any number of shared holders while there is no exclusive holder (readers).
    Shared,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        })
    }
}

/// What an acquire does when the lock cannot be granted at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Wait {
    /// Try-lock: reply [`Reply::Busy`](crate::Reply) and queue nothing.
    None,
    /// Queue until the given tick; at that tick the wait times out
    /// ([`Output::WaitTimedOut`](crate::Output)). A deadline at or before the current
    /// tick behaves as [`Wait::None`]; `Until(Tick(u64::MAX))` never times out (as
    /// [`Wait::Forever`]).
    Until(Tick),
    /// Queue until granted, cancelled, or the session ends.
    Forever,
}

/// The name of a lock (or of a resource behind a [`FenceGate`](crate::FenceGate)): 1 to
/// [`MAX_NAME_LEN`] bytes of UTF-8, stored inline (no heap).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LockName(heapless::String<MAX_NAME_LEN, u8>);

impl LockName {
    /// The empty name of a free table row (never valid in an input).
    pub(crate) const EMPTY: LockName = LockName(heapless::String::new());

    /// Copies `name` into an inline buffer.
    ///
    /// Errors: [`Error::EmptyName`], [`Error::NameTooLong`] past [`MAX_NAME_LEN`] bytes.
    /// Cost: O(len).
    pub fn new(name: &str) -> Result<LockName, Error> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        let mut s = heapless::String::new();
        s.push_str(name).map_err(|_| Error::NameTooLong {
            len: name.len().min(u32::MAX as usize) as u32,
            max: MAX_NAME_LEN as u32,
        })?;
        Ok(LockName(s))
    }

    /// The name as text. Cost: O(1).
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// Length in bytes. Cost: O(1).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for the empty name, which only a default value has (an input carrying it is
    /// refused with [`Error::EmptyName`]). Cost: O(1).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<&str> for LockName {
    type Error = Error;
    fn try_from(name: &str) -> Result<Self, Error> {
        LockName::new(name)
    }
}
