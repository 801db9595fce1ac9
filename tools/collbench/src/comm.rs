//! The tcp backend's transport: one TCP connection to every other rank, and one primitive,
//! [`Comm::exchange`], that sends and receives on several of them at once.
//!
//! Sockets are non-blocking and driven by poll(2) from one thread, so a ring step sends to the
//! right neighbour while it receives from the left (full duplex, no thread per message, which
//! would cost more than a small message takes). A received block can be consumed as it arrives
//! (a ring reduces each slice while the next is still on the wire). A peer that closes its end or
//! stays silent past the timeout ends the exchange with an error naming that rank.

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Why an exchange failed: always names the peer.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    #[error("rank {peer} closed its connection (it exited or died)")]
    Closed { peer: usize },
    #[error("no progress from rank {peer} for {timeout_s:.0} s (is it still running?)")]
    Timeout { peer: usize, timeout_s: f64 },
    #[error("connection to rank {peer} failed: {err}")]
    Io { peer: usize, err: io::Error },
}

/// One rank's connections to all the others.
pub struct Comm {
    pub rank: usize,
    pub world: usize,
    peers: Vec<Option<TcpStream>>,
    timeout: Duration,
    /// How long to retry a stalled exchange before sleeping in poll(2), first busy, then
    /// yielding the core between tries (see [`spin_for`]).
    spin: Duration,
    yield_spin: Duration,
    /// Times since [`Comm::take_lost_core`] this rank lost its core while busy-spinning for a
    /// peer (another process wanted the CPU): from the first, waits spin only
    /// [`CONTENDED_SPIN`], never yield, and then sleep in poll(2), where a peer's bytes wake
    /// the rank at once (the scheduler favours a woken sleeper) instead of after the other
    /// process's time slice.
    lost_core: Cell<u64>,
}

/// A gap this long between two tries of a spinning wait: the thread was not running (another
/// process had its core). A try takes a microsecond or two.
const LOST_CORE: Duration = Duration::from_micros(200);

/// How long a wait spins once the rank has lost its core (no yielding: a yield hands the core
/// to a busy process for its whole slice, which the contended 926-1747 us runs were made of).
/// An 8-byte exchange whose peer is running lands within a few microseconds.
pub const CONTENDED_SPIN: Duration = Duration::from_micros(30);

/// How a stalled exchange waits before sleeping in poll(2): (busy retries, then retries that
/// yield the core). Sleeping costs a wake-up of tens of microseconds, several times an 8-byte
/// exchange on loopback; MPI progress engines poll instead (yielding when oversubscribed).
/// Busy retries help only while every rank has a core (the job's ranks bound those sharing
/// this host); yielding retries let a rank that shares our core answer. Measured on a 2-core
/// box, 8-byte allreduce: 2 ranks 7 us mean busy vs 19 us sleeping; 4 ranks 25 us yielding vs
/// 46 us sleeping. `COLLBENCH_SPIN_US` sets both to that many microseconds (0: always sleep).
pub fn spin_for(world: usize) -> (Duration, Duration) {
    if let Some(us) = std::env::var("COLLBENCH_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        let d = Duration::from_micros(us);
        return (d, d);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let busy = if world <= cores {
        Duration::from_micros(1000)
    } else {
        Duration::ZERO
    };
    (busy, Duration::from_micros(1000))
}

/// One outgoing block in an exchange.
pub struct Send<'a> {
    pub peer: usize,
    pub data: &'a [u8],
}

/// One incoming block in an exchange.
pub struct Recv<'a> {
    pub peer: usize,
    pub data: &'a mut [u8],
}

impl Comm {
    /// Wraps established connections (`peers[rank]` is `None`).
    pub fn new(
        rank: usize,
        world: usize,
        peers: Vec<Option<TcpStream>>,
        timeout: Duration,
    ) -> io::Result<Comm> {
        for s in peers.iter().flatten() {
            s.set_nonblocking(true)?;
            s.set_nodelay(true)?;
        }
        Ok(Comm {
            spin: spin_for(world).0,
            yield_spin: spin_for(world).1,
            rank,
            world,
            peers,
            timeout,
            lost_core: Cell::new(0),
        })
    }

    /// The waits that lost their core since the last call, and back to spinning as on a quiet
    /// machine (each size finds out for itself).
    pub fn take_lost_core(&self) -> u64 {
        self.lost_core.replace(0)
    }

    pub fn left(&self) -> usize {
        (self.rank + self.world - 1) % self.world
    }

    pub fn right(&self) -> usize {
        (self.rank + 1) % self.world
    }

    fn stream(&self, peer: usize) -> &TcpStream {
        self.peers[peer].as_ref().expect("no connection to self")
    }

    /// One step of a ring: sends `out` to the right neighbour while receiving `into` from the
    /// left one.
    pub fn ring_shift(&self, out: &[u8], into: &mut [u8]) -> Result<(), CommError> {
        self.exchange(
            &[Send {
                peer: self.right(),
                data: out,
            }],
            &mut [Recv {
                peer: self.left(),
                data: into,
            }],
        )
    }

    /// Sends every block and fills every receive buffer, all concurrently.
    pub fn exchange(&self, sends: &[Send], recvs: &mut [Recv]) -> Result<(), CommError> {
        self.exchange_with(sends, recvs, |_, _, _| {})
    }

    /// [`Comm::exchange`], calling `arrived(recv_index, received, before)` whenever receive
    /// buffer `recv_index` grows: `received` is all of it that has landed, `before` how much had
    /// landed at the previous call, so the caller can consume data while more arrives.
    pub fn exchange_with(
        &self,
        sends: &[Send],
        recvs: &mut [Recv],
        mut arrived: impl FnMut(usize, &[u8], usize),
    ) -> Result<(), CommError> {
        let mut sent = vec![0usize; sends.len()];
        let mut got = vec![0usize; recvs.len()];
        let mut last_progress = Instant::now();
        // The previous try that moved nothing, while spinning: the gap to the next such try
        // holds only syscalls that returned at once, unless the thread lost its core.
        let mut last_try: Option<Instant> = None;
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(sends.len() + recvs.len());
        loop {
            let mut progressed = false;
            let mut pending = false;
            for (i, s) in sends.iter().enumerate() {
                if sent[i] < s.data.len() {
                    let mut stream = self.stream(s.peer);
                    match stream.write(&s.data[sent[i]..]) {
                        Ok(0) => return Err(CommError::Closed { peer: s.peer }),
                        Ok(n) => {
                            sent[i] += n;
                            progressed = true;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(peer_error(s.peer, e)),
                    }
                    pending |= sent[i] < s.data.len();
                }
            }
            for (i, r) in recvs.iter_mut().enumerate() {
                if got[i] < r.data.len() {
                    let mut stream = self.stream(r.peer);
                    match stream.read(&mut r.data[got[i]..]) {
                        Ok(0) => return Err(CommError::Closed { peer: r.peer }),
                        Ok(n) => {
                            got[i] += n;
                            arrived(i, &r.data[..got[i]], got[i] - n);
                            progressed = true;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(peer_error(r.peer, e)),
                    }
                    pending |= got[i] < r.data.len();
                }
            }
            if !pending {
                return Ok(());
            }
            if progressed {
                last_progress = Instant::now();
                last_try = None;
                continue;
            }
            let now = Instant::now();
            let stalled = now - last_progress;
            if last_try.is_some_and(|t| now - t > LOST_CORE) {
                self.lost_core.set(self.lost_core.get() + 1);
            }
            let (spin, yield_spin) = match self.lost_core.get() {
                0 => (self.spin, self.yield_spin),
                _ => (self.spin.min(CONTENDED_SPIN), Duration::ZERO),
            };
            last_try = (stalled < spin).then_some(now);
            if stalled < spin {
                std::hint::spin_loop();
                continue;
            }
            if stalled < spin + yield_spin {
                // Let a rank sharing this core run, and come back at once if none does.
                std::thread::yield_now();
                continue;
            }
            // Nothing moved: sleep in poll(2) until a socket is ready or the timeout passes.
            fds.clear();
            let mut owners = Vec::with_capacity(fds.capacity());
            for (i, s) in sends.iter().enumerate() {
                if sent[i] < s.data.len() {
                    fds.push(pollfd(self.stream(s.peer), libc::POLLOUT));
                    owners.push(s.peer);
                }
            }
            for (i, r) in recvs.iter().enumerate() {
                if got[i] < r.data.len() {
                    fds.push(pollfd(self.stream(r.peer), libc::POLLIN));
                    owners.push(r.peer);
                }
            }
            let waited = last_progress.elapsed();
            if waited >= self.timeout {
                return Err(CommError::Timeout {
                    peer: owners[0],
                    timeout_s: self.timeout.as_secs_f64(),
                });
            }
            let wait_ms = (self.timeout - waited).as_millis().min(1000) as i32;
            // SAFETY: fds is a valid array of pollfd for the duration of the call.
            let rc =
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait_ms.max(1)) };
            if rc < 0 {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(CommError::Io {
                        peer: owners[0],
                        err,
                    });
                }
            }
        }
    }

    /// Sends `data` to `peer` (the peer must post the matching receive).
    pub fn send(&self, peer: usize, data: &[u8]) -> Result<(), CommError> {
        self.exchange(&[Send { peer, data }], &mut [])
    }

    /// Receives exactly `data.len()` bytes from `peer`.
    pub fn recv(&self, peer: usize, data: &mut [u8]) -> Result<(), CommError> {
        self.exchange(&[], &mut [Recv { peer, data }])
    }

    /// Every rank waits until every rank has arrived (dissemination barrier, log2(n) rounds).
    pub fn barrier(&self) -> Result<(), CommError> {
        let mut k = 1;
        while k < self.world {
            let to = (self.rank + k) % self.world;
            let from = (self.rank + self.world - k) % self.world;
            let mut token = [0u8; 1];
            self.exchange(
                &[Send {
                    peer: to,
                    data: &[1],
                }],
                &mut [Recv {
                    peer: from,
                    data: &mut token,
                }],
            )?;
            k *= 2;
        }
        Ok(())
    }

    /// Element-wise sum of small control values over all ranks (gather to rank 0, then back):
    /// wrong-element counts and timings, never measured.
    pub fn sum_f64(&self, values: &[f64]) -> Result<Vec<f64>, CommError> {
        let encode = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let decode = |b: &[u8]| {
            b.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect::<Vec<f64>>()
        };
        let mut total = values.to_vec();
        let mut buf = vec![0u8; values.len() * 8];
        if self.rank == 0 {
            for peer in 1..self.world {
                self.recv(peer, &mut buf)?;
                for (t, x) in total.iter_mut().zip(decode(&buf)) {
                    *t += x;
                }
            }
            let out = encode(&total);
            for peer in 1..self.world {
                self.send(peer, &out)?;
            }
        } else {
            self.send(0, &encode(values))?;
            self.recv(0, &mut buf)?;
            total = decode(&buf);
        }
        Ok(total)
    }

    /// Rank `root`'s bytes on every rank (for small control messages such as the NCCL id).
    pub fn broadcast_small(&self, root: usize, data: &mut [u8]) -> Result<(), CommError> {
        if self.rank == root {
            for peer in (0..self.world).filter(|&p| p != root) {
                self.send(peer, data)?;
            }
            Ok(())
        } else {
            self.recv(root, data)
        }
    }
}

fn pollfd(stream: &TcpStream, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd: stream.as_raw_fd(),
        events,
        revents: 0,
    }
}

fn peer_error(peer: usize, err: io::Error) -> CommError {
    match err.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => CommError::Closed { peer },
        _ => CommError::Io { peer, err },
    }
}
