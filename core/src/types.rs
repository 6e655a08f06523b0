//! Identifiers and small value types shared by inputs, outputs and queries.

use core::fmt;
use serde::{Deserialize, Serialize};

use crate::Error;

/// The longest lock or resource name any build accepts, in bytes. A service may be
/// configured with a smaller limit ([`Config::max_name_len`](crate::Config)).
pub const MAX_NAME_LEN: usize = 64;

/// The longest holder [`Label`], in bytes.
pub const MAX_LABEL_LEN: usize = 64;

/// A logical instant. Time advances only through the `now` every [`Input`](crate::Input)
/// carries (a [`Input::Tick`](crate::Input) carries nothing else); the host decides what
/// one tick is worth (a millisecond, a second, a log index…).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Tick(pub u64);

impl Tick {
    /// `self + ticks`, or `None` on overflow. Errors: none. Cost: O(1).
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
    /// `count` of the `limit` permits of a semaphore: holders of this name together hold
    /// at most `limit` permits. Valid when `1 <= count <= limit`
    /// ([`Error::BadPermits`](crate::Error) otherwise); every acquire of a live semaphore
    /// must carry its limit ([`Error::LimitMismatch`](crate::Error) otherwise).
    Permits {
        /// Permits this claim takes.
        count: u32,
        /// The semaphore's limit.
        limit: u32,
    },
}

impl Mode {
    /// Checks a mode an input carries: `Permits` needs `1 <= count <= limit`.
    ///
    /// Errors: [`Error::BadPermits`]. Cost: O(1).
    pub(crate) fn validate(self) -> Result<Mode, Error> {
        match self {
            Mode::Permits { count, limit } if count == 0 || count > limit => {
                Err(Error::BadPermits { count, limit })
            }
            m => Ok(m),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Exclusive => f.write_str("exclusive"),
            Mode::Shared => f.write_str("shared"),
            Mode::Permits { count, limit } => write!(f, "{count} of {limit} permits"),
        }
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

    /// The name as text. Errors: none. Cost: O(1).
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// Length in bytes. Errors: none. Cost: O(1).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for the empty name, which only a default value has (an input carrying it is
    /// refused with [`Error::EmptyName`]). Errors: none. Cost: O(1).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether this name is `name`, compared a word at a time in line (a probe's match
    /// is confirmed with this; a call to the C library's `memcmp` for names of a few
    /// words cost more than the comparison). Cost: O(len).
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn is(&self, name: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), name.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        // Whole words, then the last word again (overlapping) for the tail; names shorter
        // than a word by two overlapping half-words, or bytewise below four.
        let n = a.len();
        let w8 = |s: &[u8], i: usize| {
            <[u8; 8]>::try_from(&s[i..i + 8])
                .ok()
                .map(u64::from_ne_bytes)
        };
        let w4 = |s: &[u8], i: usize| {
            <[u8; 4]>::try_from(&s[i..i + 4])
                .ok()
                .map(u32::from_ne_bytes)
        };
        if n >= 8 {
            let mut i = 0;
            while i + 8 <= n {
                if w8(a, i) != w8(b, i) {
                    return false;
                }
                i += 8;
            }
            i == n || w8(a, n - 8) == w8(b, n - 8)
        } else if n >= 4 {
            w4(a, 0) == w4(b, 0) && w4(a, n - 4) == w4(b, n - 4)
        } else {
            a == b
        }
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

/// A session's holder label: 0 to [`MAX_LABEL_LEN`] bytes of UTF-8 that watchers and
/// introspection show beside the session id (a host name, a process id…). Empty means no
/// label. Stored inline (no heap) and `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Label {
    len: u8,
    // Bytes past `len` are always zero — in every label but a free label-table row, which
    // holds a free-list link there and is never shown — so the derived equality and hash
    // are the text's.
    bytes: [u8; MAX_LABEL_LEN],
}

impl Label {
    /// The empty label (no label).
    pub const EMPTY: Label = Label {
        len: 0,
        bytes: [0; MAX_LABEL_LEN],
    };

    /// Copies `label` into an inline buffer.
    ///
    /// Errors: [`Error::LabelTooLong`] past [`MAX_LABEL_LEN`] bytes. Cost: O(len).
    pub fn new(label: &str) -> Result<Label, Error> {
        let b = label.as_bytes();
        if b.len() > MAX_LABEL_LEN {
            return Err(Error::LabelTooLong {
                len: b.len().min(u32::MAX as usize) as u32,
                max: MAX_LABEL_LEN as u32,
            });
        }
        let mut out = Label::EMPTY;
        out.bytes[..b.len()].copy_from_slice(b);
        out.len = b.len() as u8;
        Ok(out)
    }

    /// The label as text. Errors: none. Cost: O(len) (the bytes were checked UTF-8 when
    /// the label was
    /// made; the crate has no `unsafe` to skip the re-check).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }

    /// Length in bytes. Errors: none. Cost: O(1).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for the empty label (no label). Errors: none. Cost: O(1).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A free label-table row's content: the next free row in its first four bytes (never
    /// shown: a row is given a real label before anything reads it as one).
    pub(crate) const fn free_link(next: u32) -> Label {
        let mut out = Label::EMPTY;
        let b = next.to_le_bytes();
        out.bytes[0] = b[0];
        out.bytes[1] = b[1];
        out.bytes[2] = b[2];
        out.bytes[3] = b[3];
        out
    }

    /// The link [`free_link`](Self::free_link) stored.
    pub(crate) fn link(&self) -> u32 {
        let b = &self.bytes;
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

impl Default for Label {
    fn default() -> Self {
        Label::EMPTY
    }
}

impl PartialOrd for Label {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Label {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<&str> for Label {
    type Error = Error;
    fn try_from(label: &str) -> Result<Self, Error> {
        Label::new(label)
    }
}

/// Encoded as a string (postcard: a length and the bytes, like a [`LockName`]).
impl Serialize for Label {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Decodes a string of at most [`MAX_LABEL_LEN`] bytes; a longer one is a decoding error.
impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Label, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Label;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a string of at most {MAX_LABEL_LEN} bytes")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Label, E> {
                Label::new(v).map_err(|_| E::invalid_length(v.len(), &self))
            }
        }
        d.deserialize_str(Visit)
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)] // a test's failed set-up is a failed test
mod tests {
    use super::LockName;

    /// The word-at-a-time comparison agrees with `==` on every length a name can have,
    /// for equal names and for names differing in any one byte or in length.
    #[test]
    fn name_comparison_matches_byte_equality_at_every_length_and_position() {
        let text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
        for n in 1..=super::MAX_NAME_LEN {
            let name = LockName::new(&text[..n]).expect("valid");
            assert!(name.is(&text[..n]), "equal, length {n}");
            for i in 0..n {
                let mut other = text.as_bytes()[..n].to_vec();
                other[i] = b'#';
                let other = core::str::from_utf8(&other).expect("ascii");
                assert!(!name.is(other), "length {n}, byte {i} differs");
            }
            assert!(!name.is(&text[..n - 1]), "shorter by one, length {n}");
            if n < text.len() {
                assert!(!name.is(&text[..n + 1]), "longer by one, length {n}");
            }
        }
    }
}
