//! postcard frames: how inputs and outputs cross a transport the host owns (a socket, a
//! consensus log, a worker message). A frame is exactly one postcard-encoded value; the
//! transport delimits frames (length prefix, message boundary…).

use crate::{Error, Input, LockService, Output, Reply, Sink, Storage};

/// The largest encoded [`Output`], [`Reply`] or [`Input`], in bytes: a buffer this size always fits
/// one frame. The largest is an [`Output::HolderChanged`] with a 64-byte name, a 64-byte
/// label and every integer at its widest: 173 bytes.
pub const MAX_FRAME_LEN: usize = 176;

impl Input {
    /// Decodes one input frame. Trailing bytes and any encoding but the one
    /// [`to_frame`](Self::to_frame) writes (an over-long varint) are refused.
    ///
    /// Errors: [`Error::BadFrame`] for anything that is not exactly one valid input in its
    /// canonical encoding (including a lock name over [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)
    /// bytes).
    /// Cost: O(frame length).
    pub fn from_frame(frame: &[u8]) -> Result<Input, Error> {
        match postcard::take_from_bytes::<Input>(frame) {
            Ok((input, [])) => canonical(input, frame),
            _ => Err(Error::BadFrame),
        }
    }

    /// Encodes this input into `buf`, returning the frame's length.
    ///
    /// Errors: [`Error::BufferTooSmall`]. Cost: O(frame length).
    pub fn to_frame(&self, buf: &mut [u8]) -> Result<usize, Error> {
        encode(self, buf)
    }
}

impl Output {
    /// Encodes this output into `buf`, returning the frame's length.
    ///
    /// Errors: [`Error::BufferTooSmall`] (a buffer of [`MAX_FRAME_LEN`] always fits).
    /// Cost: O(frame length).
    pub fn to_frame(&self, buf: &mut [u8]) -> Result<usize, Error> {
        encode(self, buf)
    }

    /// Decodes one output frame. Trailing bytes and non-canonical encodings are refused
    /// (as [`Input::from_frame`]).
    ///
    /// Errors: [`Error::BadFrame`]. Cost: O(frame length).
    pub fn from_frame(frame: &[u8]) -> Result<Output, Error> {
        match postcard::take_from_bytes::<Output>(frame) {
            Ok((output, [])) => canonical(output, frame),
            _ => Err(Error::BadFrame),
        }
    }
}

impl Reply {
    /// Encodes this reply into `buf`, returning the frame's length.
    ///
    /// Errors: [`Error::BufferTooSmall`] (a buffer of [`MAX_FRAME_LEN`] always fits).
    /// Cost: O(frame length).
    pub fn to_frame(&self, buf: &mut [u8]) -> Result<usize, Error> {
        encode(self, buf)
    }

    /// Decodes one reply frame. Trailing bytes and non-canonical encodings are refused
    /// (as [`Input::from_frame`]).
    ///
    /// Errors: [`Error::BadFrame`]. Cost: O(frame length).
    pub fn from_frame(frame: &[u8]) -> Result<Reply, Error> {
        match postcard::take_from_bytes::<Reply>(frame) {
            Ok((reply, [])) => canonical(reply, frame),
            _ => Err(Error::BadFrame),
        }
    }
}

/// `value`, decoded from all of `frame`, if `frame` is its canonical encoding: postcard
/// decodes an over-long varint (`[0x86, 0x00, 0x80, 0x00]` is a `Tick` like `[6, 0]`), and
/// every other field has one encoding, so a frame is canonical exactly when re-encoding
/// gives as many bytes. A host may then compare, log or deduplicate frames by their bytes.
fn canonical<T: serde::Serialize>(value: T, frame: &[u8]) -> Result<T, Error> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    match postcard::to_slice(&value, &mut buf) {
        Ok(b) if b.len() == frame.len() => Ok(value),
        _ => Err(Error::BadFrame),
    }
}

fn encode<T: serde::Serialize>(value: &T, buf: &mut [u8]) -> Result<usize, Error> {
    match postcard::to_slice(value, buf) {
        Ok(b) => Ok(b.len()),
        Err(_) => {
            let mut big = [0u8; MAX_FRAME_LEN];
            let need = postcard::to_slice(value, &mut big)
                .map(|b| b.len())
                .unwrap_or(MAX_FRAME_LEN);
            Err(Error::BufferTooSmall { need: need as u32 })
        }
    }
}

impl<S: Storage> LockService<S> {
    /// Decodes an input frame and [`handle`](Self::handle)s it, returning the caller's
    /// reply.
    ///
    /// Errors: [`Error::BadFrame`] (nothing changed), then whatever the input's method
    /// returns. Cost: O(frame length) + the input's cost.
    pub fn handle_frame(&mut self, frame: &[u8], out: &mut impl Sink) -> Result<Reply, Error> {
        let input = Input::from_frame(frame)?;
        self.handle(input, out)
    }
}
