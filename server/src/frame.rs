//! Length-prefixed postcard frames: `len: u32 big-endian | postcard bytes`.

use std::io;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest client-protocol frame accepted, in bytes.
pub const MAX_CLIENT_FRAME: u32 = 64 << 10;
/// The largest Raft RPC frame accepted (snapshot chunks and entry batches), in bytes.
pub const MAX_RAFT_FRAME: u32 = 64 << 20;

/// Encodes `v` as one frame (prefix included).
///
/// Errors: `InvalidData` if `v` cannot be encoded. Cost: O(encoded size).
pub fn encode<T: Serialize>(v: &T) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4];
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
pub async fn write<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, v: &T) -> io::Result<()> {
    let buf = encode(v)?;
    w.write_all(&buf).await?;
    w.flush().await
}

/// Reads one frame of at most `max` bytes. `Ok(None)` at a clean end of stream.
///
/// Errors: I/O errors; `InvalidData` for an oversized frame or bytes that do not decode
/// as exactly one `T` (the caller then closes the connection). Cost: O(frame size).
pub async fn read<R: AsyncRead + Unpin, T: DeserializeOwned>(
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
            format!("frame of {len} bytes exceeds the limit of {max}"),
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
    match postcard::take_from_bytes::<T>(&body) {
        Ok((v, [])) => Ok(Some(v)),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "trailing bytes after the frame's value",
        )),
        Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_bytes(bytes: &[u8], max: u32) -> io::Result<Option<(u32, u64)>> {
        let mut r = bytes;
        read::<_, (u32, u64)>(&mut r, max).await
    }

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_refused() {
        let f = encode(&(7u32, 300u64)).unwrap();
        assert_eq!(read_bytes(&f, 64).await.unwrap(), Some((7, 300)));
        assert_eq!(read_bytes(&[], 64).await.unwrap(), None, "clean end");
        // Over the limit: refused before reading the body.
        assert!(read_bytes(&f, 2).await.is_err());
        // A length that promises more than arrives.
        let mut short = f.clone();
        short[3] += 5;
        assert!(read_bytes(&short, 64).await.is_err());
        // Trailing bytes inside the frame.
        let mut trailing = f.clone();
        trailing[3] += 1;
        trailing.push(0);
        assert!(read_bytes(&trailing, 64).await.is_err());
        // Garbage that does not decode.
        assert!(read_bytes(&[0, 0, 0, 2, 0xff, 0xff], 64).await.is_err());
        // A huge claimed length with nothing behind it costs no allocation and fails.
        assert!(read_bytes(&[0x03, 0xff, 0xff, 0xff], u32::MAX)
            .await
            .is_err());
    }
}
