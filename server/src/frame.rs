//! Length-prefixed, versioned postcard frames:
//! `len: u32 big-endian | version: u32 big-endian | postcard bytes` (`len` counts the
//! version and the postcard bytes).
//!
//! **Why the version.** postcard is not self-describing: bytes of another encoding can
//! decode, as something else. Nodes and clients of different builds meet on a rolling
//! upgrade, and a Raft vote or a lock request read in another build's layout could be
//! misread rather than refused. So each frame says which wire format it is in
//! ([`Wire::VERSION`]: [`PEER_WIRE`] between nodes, [`CLIENT_WIRE`] between clients and
//! nodes), in four bytes every version reads the same way, and a reader decodes nothing
//! of a frame in another format: it gets [`OtherVersion`], and a node answers with a
//! [`version_only`] frame (its own version, no body) before closing, so the other side
//! can say which versions met. The layout of the prefix and of the version-only frame
//! is fixed for good; everything after the version may change with it.

use std::io;

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};

/// The largest client-protocol frame accepted by default, in bytes (a request carries at
/// most a lock name, a credential and a token: far less).
pub const MAX_CLIENT_FRAME: u32 = 64 << 10;
/// The largest frame a node sends to a client, and the largest a client reads, in bytes.
/// An answer is as large as what it reads — a lock's holders or queue, up to one row of the
/// claim table each (~90 bytes with a 64-byte label: about 3 MiB at the default 32 768
/// rows) — so it is bounded apart from requests; a reply that would be larger is
/// answered `Limit { kind: "reply_too_large" }` instead (see [`crate::net`]).
pub const MAX_SERVER_FRAME: u32 = 16 << 20;
/// The largest Raft RPC request frame accepted by default (snapshot chunks and entry
/// batches), in bytes; see [`crate::net::MIN_RAFT_FRAME`] for the smallest a node accepts
/// as a limit and how the entry batches are kept under it.
pub const MAX_RAFT_FRAME: u32 = 8 << 20;
/// The largest Raft RPC *answer* a node reads from a peer, in bytes (answers carry a vote,
/// a log id or an error message: small).
pub const MAX_RAFT_REPLY: u32 = 1 << 20;

/// The version of the protocol between nodes (Raft requests and answers, pre-votes, with
/// the sender's service settings). Raised whenever their encoding changes: 2 added the
/// log entry `Op::OpenCounted`, which a node of version 1 cannot decode; 3 the leader a
/// pre-vote's answer names ([`crate::election::PreVoteResponse::leader_vote`]); 4 the log
/// entry `Op::ForceReleaseHold`; 5 `Op::EachDeadline`; 6 `Op::ForceClose`.
pub const PEER_WIRE: u32 = 6;
/// The version of the client protocol (`ClientFrame`, `ServerFrame`). Raised whenever an
/// encoding the protocol already had changes: 2 added a session's count of watches to
/// `SessionInfo` (`Session`, `Sessions` answers). Requests and answers appended to their
/// enums leave it as it was: a node of the version before answers such a request
/// `Malformed`, and a client of that version meets such an answer only for a request it
/// never sends.
pub const CLIENT_WIRE: u32 = 2;

/// A value sent as one frame: which wire format it belongs to.
pub trait Wire {
    /// The format's version, the first four bytes of each frame's body.
    const VERSION: u32;
}

/// The error inside the `InvalidData` of a frame in another wire format than the one the
/// reader expected ([`other_version`]). Nothing of the frame was decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtherVersion {
    /// The version the frame carried.
    pub theirs: u32,
    /// The version the reader speaks.
    pub ours: u32,
}

impl std::fmt::Display for OtherVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the other side speaks wire version {}, this build version {}: nodes and clients \
             of different wire versions do not talk (upgrade them together)",
            self.theirs, self.ours
        )
    }
}

impl std::error::Error for OtherVersion {}

/// The [`OtherVersion`] inside `e`, if `e` is [`read`]'s refusal of a frame in another
/// wire format. Cost: O(1).
pub fn other_version(e: &io::Error) -> Option<OtherVersion> {
    e.get_ref()
        .and_then(|i| i.downcast_ref::<OtherVersion>())
        .copied()
}

/// A frame that says only "this side speaks `version`": the body is the version and
/// nothing else. The answer to a frame of another version, which the other side's
/// [`read`] reports as [`OtherVersion`] (to a reader of the same version it is a
/// malformed frame: no version's frames are empty after the version). A frame over the
/// reader's size limit is refused as oversized before its version is read. Cost: O(1).
pub fn version_only(version: u32) -> [u8; 8] {
    let mut f = [0u8; 8];
    f[..4].copy_from_slice(&4u32.to_be_bytes());
    f[4..].copy_from_slice(&version.to_be_bytes());
    f
}

/// The error inside the `InvalidData` of a frame over the limit ([`is_oversized`]).
#[derive(Debug)]
pub struct Oversized {
    /// The length the frame's prefix announced.
    pub len: u32,
    /// The limit.
    pub max: u32,
}

impl std::fmt::Display for Oversized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "frame of {} bytes exceeds the limit of {} bytes",
            self.len, self.max
        )
    }
}

impl std::error::Error for Oversized {}

/// Whether `e` is [`read`]'s refusal of a frame over the limit. Cost: O(1).
pub fn is_oversized(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<Oversized>())
}

/// What [`read_timed`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Next<T> {
    /// A whole frame.
    Frame(T),
    /// A clean end of stream before the next frame.
    End,
    /// No byte of a next frame arrived within the idle timeout (nothing was consumed).
    Idle,
}

/// Encodes `v` as one frame (length and version included).
///
/// Errors: `InvalidData` if `v` cannot be encoded. Cost: O(encoded size).
pub fn encode<T: Serialize + Wire>(v: &T) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4];
    buf.extend_from_slice(&T::VERSION.to_be_bytes());
    let body =
        postcard::to_allocvec(v).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    buf.extend_from_slice(&body);
    let len = (buf.len() - 4) as u32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf)
}

/// Writes one frame.
///
/// Errors: I/O errors, `InvalidData` if `v` cannot be encoded. Cost: O(encoded size).
pub async fn write<W: AsyncWrite + Unpin, T: Serialize + Wire>(w: &mut W, v: &T) -> io::Result<()> {
    let buf = encode(v)?;
    w.write_all(&buf).await?;
    w.flush().await
}

/// Writes `buf` and flushes, giving up when one step makes no progress for `stall`: each
/// `write` call (whatever part of `buf` it takes) and the final flush must complete within
/// it. A peer that reads slowly but steadily is served however long the whole takes; one
/// that stops reading (a half-closed client, a full receive window) fails within `stall`
/// of its last progress instead of holding the writer for ever.
///
/// Errors: `TimedOut` when a step stalls, `WriteZero` when the writer takes nothing, and
/// the writer's I/O errors. Cost: O(buf).
pub async fn write_all_progressing<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut buf: &[u8],
    stall: Duration,
) -> io::Result<()> {
    let stalled = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the peer took nothing for {} ms", stall.as_millis()),
        )
    };
    while !buf.is_empty() {
        let n = tokio::time::timeout(stall, w.write(buf))
            .await
            .map_err(|_| stalled())??;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    tokio::time::timeout(stall, w.flush())
        .await
        .map_err(|_| stalled())?
}

/// Reads one frame of at most `max` bytes. `Ok(None)` at an end of stream before a
/// frame's body: none of its four length bytes, or only some of them (a peer's last
/// write cut short; nothing of a frame was there to answer).
///
/// Errors: I/O errors; `InvalidData` for an oversized frame, a frame of another wire
/// version than `T`'s ([`OtherVersion`], see [`other_version`]; nothing after the version
/// is decoded) or bytes that do not decode as exactly one `T` (the caller then closes
/// the connection). Cost: O(frame size).
pub async fn read<R: AsyncRead + Unpin, T: DeserializeOwned + Wire>(
    r: &mut R,
    max: u32,
) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len);
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            Oversized { len, max },
        ));
    }
    // Grow with the bytes that actually arrive: a lying length prefix costs no memory.
    let mut body = Vec::with_capacity((len as usize).min(64 << 10));
    (&mut *r).take(len as u64).read_to_end(&mut body).await?;
    if body.len() != len as usize {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed inside a frame",
        ));
    }
    let Some((version, body)) = body.split_first_chunk::<4>() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a frame shorter than its version",
        ));
    };
    let theirs = u32::from_be_bytes(*version);
    if theirs != T::VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            OtherVersion {
                theirs,
                ours: T::VERSION,
            },
        ));
    }
    match postcard::take_from_bytes::<T>(body) {
        Ok((v, [])) => Ok(Some(v)),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "trailing bytes after the frame's value",
        )),
        Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    }
}

/// Reads one frame of at most `max` bytes, waiting at most `idle` for its first byte and
/// then at most `whole` for the rest of it: a peer that sends part of a frame and stalls
/// (or trickles it) is given up on after `whole`, however slowly the bytes come.
///
/// Errors: as [`read`]; `TimedOut` when a started frame is not complete within `whole`
/// (the caller then closes the connection). Cost: O(frame size); nothing is consumed on
/// [`Next::Idle`], so the caller may wait again.
pub async fn read_timed<R: AsyncBufRead + Unpin, T: DeserializeOwned + Wire>(
    r: &mut R,
    max: u32,
    idle: Duration,
    whole: Duration,
) -> io::Result<Next<T>> {
    match tokio::time::timeout(idle, r.fill_buf()).await {
        Err(_) => return Ok(Next::Idle),
        Ok(Err(e)) => return Err(e),
        Ok(Ok([])) => return Ok(Next::End),
        Ok(Ok(_)) => {}
    }
    match tokio::time::timeout(whole, read(r, max)).await {
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "a frame was not complete within {} ms (read timeout)",
                whole.as_millis()
            ),
        )),
        Ok(Ok(Some(v))) => Ok(Next::Frame(v)),
        Ok(Ok(None)) => Ok(Next::End),
        Ok(Err(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::future::Future;

    #[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
    struct Pair(u32, u64);
    impl Wire for Pair {
        const VERSION: u32 = 7;
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
    struct One(u32);
    impl Wire for One {
        const VERSION: u32 = 7;
    }

    /// `One` as a later build would send it.
    #[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
    struct Later(u32);
    impl Wire for Later {
        const VERSION: u32 = 8;
    }

    /// A reader on the other end that takes one byte every `every` (forever when `None`).
    struct Trickle {
        every: Option<Duration>,
        sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
        got: Vec<u8>,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            let Some(every) = self.every else {
                return std::task::Poll::Pending;
            };
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
            std::task::ready!(sleep.as_mut().poll(cx));
            self.sleep = None;
            self.got.push(buf[0]);
            std::task::Poll::Ready(Ok(1))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// The write timeout bounds a step without progress, not the whole write: a reader
    /// taking a byte every 150 ms gets all 10 (1.5 s) under a 200 ms stall limit; one
    /// that takes nothing fails with `TimedOut`. (Paused time: no wall-clock waits.)
    #[tokio::test(start_paused = true)]
    async fn a_write_fails_only_when_it_stops_progressing() {
        let stall = Duration::from_millis(200);
        let mut slow = Trickle {
            every: Some(Duration::from_millis(150)),
            sleep: None,
            got: Vec::new(),
        };
        let bytes: Vec<u8> = (0..10).collect();
        write_all_progressing(&mut slow, &bytes, stall)
            .await
            .unwrap();
        assert_eq!(slow.got, bytes);
        let mut stopped = Trickle {
            every: None,
            sleep: None,
            got: Vec::new(),
        };
        let e = write_all_progressing(&mut stopped, &bytes, stall)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    async fn read_bytes(bytes: &[u8], max: u32) -> io::Result<Option<Pair>> {
        let mut r = bytes;
        read::<_, Pair>(&mut r, max).await
    }

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_refused() {
        let f = encode(&Pair(7, 300)).unwrap();
        assert_eq!(&f[..8], &[0, 0, 0, 7, 0, 0, 0, 7], "length, then version");
        assert_eq!(read_bytes(&f, 64).await.unwrap(), Some(Pair(7, 300)));
        assert_eq!(read_bytes(&[], 64).await.unwrap(), None, "clean end");
        // Over the limit: refused before reading the body, recognisably.
        let e = read_bytes(&f, 2).await.unwrap_err();
        assert!(is_oversized(&e), "{e}");
        assert!(
            e.to_string().contains("exceeds the limit of 2 bytes"),
            "{e}"
        );
        // A length that promises more than arrives.
        let mut short = f.clone();
        short[3] += 5;
        assert!(read_bytes(&short, 64).await.is_err());
        // Trailing bytes inside the frame.
        let mut trailing = f.clone();
        trailing[3] += 1;
        trailing.push(0);
        assert!(read_bytes(&trailing, 64).await.is_err());
        // Garbage that does not decode, with and without a version.
        assert!(read_bytes(&[0, 0, 0, 6, 0, 0, 0, 7, 0xff, 0xff], 64)
            .await
            .is_err());
        assert!(read_bytes(&[0, 0, 0, 2, 0xff, 0xff], 64).await.is_err());
        // A huge claimed length with nothing behind it costs no allocation and fails.
        assert!(read_bytes(&[0x03, 0xff, 0xff, 0xff], u32::MAX)
            .await
            .is_err());
    }

    #[tokio::test]
    async fn a_stalled_frame_times_out_and_an_idle_stream_is_reported() {
        let idle = Duration::from_millis(50);
        let whole = Duration::from_millis(50);
        // Nothing arrives: Idle, and nothing consumed.
        let (a, _keep) = tokio::io::duplex(64);
        let mut r = tokio::io::BufReader::new(a);
        let n = read_timed::<_, One>(&mut r, 64, idle, whole).await.unwrap();
        assert_eq!(n, Next::Idle);
        // Half a frame, then silence: TimedOut.
        let (a, mut b) = tokio::io::duplex(64);
        b.write_all(&[0, 0, 0, 8, 1]).await.unwrap();
        let mut r = tokio::io::BufReader::new(a);
        let e = read_timed::<_, One>(&mut r, 64, idle, whole)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        // A whole frame, then a clean end.
        let (a, mut b) = tokio::io::duplex(64);
        b.write_all(&encode(&One(7)).unwrap()).await.unwrap();
        drop(b);
        let mut r = tokio::io::BufReader::new(a);
        let n = read_timed::<_, One>(&mut r, 64, idle, whole).await.unwrap();
        assert_eq!(n, Next::Frame(One(7)));
        let n = read_timed::<_, One>(&mut r, 64, idle, whole).await.unwrap();
        assert_eq!(n, Next::End);
    }

    /// A frame of another wire version is refused before its body is decoded — even one
    /// whose bytes would decode as the reader's type — and says which versions met; a
    /// version-only frame is read as that refusal by any version, and is no frame of the
    /// reader's own version.
    #[tokio::test]
    async fn a_frame_of_another_version_is_refused_undecoded() {
        let later = encode(&Later(5)).unwrap();
        let mut r = &later[..];
        let e = read::<_, One>(&mut r, 64).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(other_version(&e), Some(OtherVersion { theirs: 8, ours: 7 }));
        assert!(e.to_string().contains("wire version 8"), "{e}");
        assert!(r.is_empty(), "the whole frame was consumed");
        let mut r = &version_only(8)[..];
        let e = read::<_, One>(&mut r, 64).await.unwrap_err();
        assert_eq!(other_version(&e).map(|v| v.theirs), Some(8));
        let mut r = &version_only(7)[..];
        let e = read::<_, One>(&mut r, 64).await.unwrap_err();
        assert_eq!(
            other_version(&e),
            None,
            "our version, but no body: malformed"
        );
        // Ours again: read.
        let mut r = &encode(&One(5)).unwrap()[..];
        assert_eq!(read::<_, One>(&mut r, 64).await.unwrap(), Some(One(5)));
    }
}
