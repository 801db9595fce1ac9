//! How far a rank's wall clock is from rank 0's, the way NTP estimates it: the rank sends its
//! time t1, rank 0 answers with its time t2, the answer lands at t3; if the two legs take as
//! long, rank 0 read t2 at the rank's (t1 + t3) / 2, so offset = (t1 + t3) / 2 - t2, wrong by
//! at most half the round trip. Of several exchanges the one with the shortest round trip wins
//! (the least queueing, the tightest bound).

use super::frame::{self, FrameError};
use std::io::{Read, Write};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

const PING: u8 = 0xc1;
const PONG: u8 = 0xc2;

/// This rank's clock against rank 0's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Offset {
    /// This rank's clock minus rank 0's, in milliseconds.
    pub offset_ms: f64,
    /// Round trip of the exchange the offset came from: the offset is good to half of it.
    pub rtt_ms: f64,
}

impl Offset {
    /// Rank 0 against itself.
    pub const ZERO: Offset = Offset {
        offset_ms: 0.0,
        rtt_ms: 0.0,
    };
}

/// Wall-clock time as milliseconds since the Unix epoch.
pub fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// A rank other than 0: `samples` exchanges with rank 0 on `stream`.
pub fn measure(stream: &mut (impl Read + Write), samples: usize) -> Result<Offset, FrameError> {
    let mut best: Option<Offset> = None;
    for _ in 0..samples.max(1) {
        let sent = Instant::now();
        let t1 = unix_ms();
        frame::write_frame(stream, PING, &t1.to_le_bytes())?;
        let (tag, body) = frame::read_frame(stream, 16)?;
        let t3 = unix_ms();
        let rtt_ms = sent.elapsed().as_secs_f64() * 1000.0;
        if tag != PONG || body.len() != 8 {
            return Err(
                std::io::Error::other("rank 0 answered a clock probe with something else").into(),
            );
        }
        let t2 = f64::from_le_bytes(body[..8].try_into().unwrap_or_default());
        let sample = Offset {
            offset_ms: (t1 + t3) / 2.0 - t2,
            rtt_ms,
        };
        if best.is_none_or(|b| sample.rtt_ms < b.rtt_ms) {
            best = Some(sample);
        }
    }
    Ok(best.unwrap_or(Offset::ZERO))
}

/// Rank 0: answers `samples` probes from one rank.
pub fn answer(stream: &mut (impl Read + Write), samples: usize) -> Result<(), FrameError> {
    for _ in 0..samples.max(1) {
        let (tag, _) = frame::read_frame(stream, 16)?;
        if tag != PING {
            return Err(
                std::io::Error::other("a rank sent something else than a clock probe").into(),
            );
        }
        frame::write_frame(stream, PONG, &unix_ms().to_le_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn one_clock_measured_against_itself_is_off_by_at_most_half_the_round_trip() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let root = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            answer(&mut s, 8).unwrap();
        });
        let mut s = TcpStream::connect(addr).unwrap();
        let o = measure(&mut s, 8).unwrap();
        root.join().unwrap();
        assert!(o.rtt_ms > 0.0, "{o:?}");
        // Same clock on both ends: the estimate is within its own bound (plus rounding).
        assert!(o.offset_ms.abs() <= o.rtt_ms / 2.0 + 0.01, "{o:?}");
    }
}
