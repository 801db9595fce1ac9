//! Small messages between ranks: a tag byte, a little-endian u32 length, the payload. The
//! length is checked against the reader's bound before anything is allocated, so a peer that
//! is not one of ours (or a corrupted stream) cannot make a rank allocate gigabytes.

use std::io::{self, Read, Write};

/// Bytes before the payload.
pub const HEADER: usize = 5;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection at a frame boundary.
    #[error("the connection closed")]
    Closed,
    #[error("a message of {len} bytes (tag {tag}) is over the limit of {max}")]
    TooLong { tag: u8, len: usize, max: usize },
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl FrameError {
    /// The read timed out (a silent peer), as opposed to a closed or broken connection.
    pub fn is_timeout(&self) -> bool {
        matches!(self, FrameError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

/// The frame as bytes (one write keeps frames whole when several threads share a stream).
pub fn encode(tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(HEADER + payload.len());
    buf.push(tag);
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(payload);
    buf
}

pub fn write_frame(w: &mut impl Write, tag: u8, payload: &[u8]) -> io::Result<()> {
    if payload.len() > u32::MAX as usize {
        return Err(io::Error::other("message too long for a frame"));
    }
    w.write_all(&encode(tag, payload))?;
    w.flush()
}

/// Reads one frame whose payload is at most `max` bytes.
pub fn read_frame(r: &mut impl Read, max: usize) -> Result<(u8, Vec<u8>), FrameError> {
    let mut head = [0u8; HEADER];
    // A clean end between frames is `Closed`; one inside a frame is an I/O error.
    let mut got = 0;
    while got < HEADER {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let tag = head[0];
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > max {
        return Err(FrameError::TooLong { tag, len, max });
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok((tag, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_lengths_are_bounded() {
        let mut wire = Vec::new();
        write_frame(&mut wire, 7, b"hello").unwrap();
        write_frame(&mut wire, 8, b"").unwrap();
        let mut r = wire.as_slice();
        assert_eq!(read_frame(&mut r, 16).unwrap(), (7, b"hello".to_vec()));
        assert_eq!(read_frame(&mut r, 16).unwrap(), (8, Vec::new()));
        assert!(matches!(read_frame(&mut r, 16), Err(FrameError::Closed)));

        // A length off the wire beyond the bound is refused before any allocation.
        let huge = [1u8, 0xff, 0xff, 0xff, 0xff];
        let err = read_frame(&mut huge.as_slice(), 1 << 20).unwrap_err();
        assert!(matches!(err, FrameError::TooLong { tag: 1, .. }), "{err}");

        // Cut inside a frame: an error, not a clean close.
        let cut = encode(3, b"abcdef");
        let err = read_frame(&mut &cut[..7], 16).unwrap_err();
        assert!(matches!(err, FrameError::Io(_)), "{err}");
        let err = read_frame(&mut &cut[..2], 16).unwrap_err();
        assert!(matches!(err, FrameError::Io(_)), "{err}");
    }
}
