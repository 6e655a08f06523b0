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
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).await?;
    match postcard::take_from_bytes::<T>(&body) {
        Ok((v, [])) => Ok(Some(v)),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "trailing bytes after the frame's value",
        )),
        Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    }
}
