//! How ranks find each other: rank 0 listens on the coordinator address, every other rank
//! connects to it and says who it is (a fixed-size greeting: the tool's magic, rank, world, a
//! fingerprint of its arguments and a port it listens on, if any). Rank 0 checks each greeting
//! and keeps the connection; what the ranks say next is the tool's business (collbench sends
//! an address table and builds a mesh, loadgen keeps the star for its point synchronization).
//!
//! A connection to the coordinator port that does not greet like one of our ranks (a port
//! scanner, a health check, a rank of another tool) is dropped with a warning and rank 0 keeps
//! waiting; a greeting that is ours but wrong for this job (another world size, a rank taken
//! twice, other arguments) ends the job with one line that says how to fix it.

use crate::diag;
use anyhow::{Context, bail};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Which tool's ranks are talking: refused across tools, named in messages.
#[derive(Debug, Clone, Copy)]
pub struct Protocol {
    pub magic: [u8; 4],
    pub tool: &'static str,
    /// What "the same arguments" covers, for the message when they differ.
    pub args_hint: &'static str,
}

/// What a joining rank says first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub rank: usize,
    pub world: usize,
    pub fingerprint: u64,
    /// Where the rank listens for its peers (0: nowhere).
    pub port: u16,
}

const HELLO_LEN: usize = 4 + 4 + 4 + 8 + 2;
/// How long rank 0 waits for a new connection's greeting before dropping it (the others are
/// greeted meanwhile).
const GREETING_WAIT: Duration = Duration::from_secs(5);

impl Hello {
    fn encode(&self, proto: &Protocol) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..4].copy_from_slice(&proto.magic);
        b[4..8].copy_from_slice(&(self.rank as u32).to_le_bytes());
        b[8..12].copy_from_slice(&(self.world as u32).to_le_bytes());
        b[12..20].copy_from_slice(&self.fingerprint.to_le_bytes());
        b[20..22].copy_from_slice(&self.port.to_le_bytes());
        b
    }

    fn decode(b: &[u8; HELLO_LEN], proto: &Protocol) -> Option<Hello> {
        if b[..4] != proto.magic {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]) as usize;
        let mut fp = [0u8; 8];
        fp.copy_from_slice(&b[12..20]);
        Some(Hello {
            rank: u32_at(4),
            world: u32_at(8),
            fingerprint: u64::from_le_bytes(fp),
            port: u16::from_le_bytes([b[20], b[21]]),
        })
    }
}

/// One rank that joined rank 0.
#[derive(Debug)]
pub struct Joined {
    pub stream: TcpStream,
    pub hello: Hello,
    /// The address its connection came from (how rank 0 reaches it).
    pub addr: SocketAddr,
}

pub fn resolve(coordinator: &str) -> anyhow::Result<SocketAddr> {
    coordinator
        .to_socket_addrs()
        .with_context(|| format!("coordinator '{coordinator}' is not HOST:PORT"))?
        .next()
        .with_context(|| format!("coordinator '{coordinator}' resolves to no address"))
}

/// Rank 0: listens on the coordinator address (or all interfaces, when the name is how other
/// hosts reach us rather than a local address).
pub fn listen(coordinator: &str) -> anyhow::Result<TcpListener> {
    let addr = resolve(coordinator)?;
    TcpListener::bind(addr)
        .or_else(|_| TcpListener::bind(SocketAddr::new(unspecified(addr.ip()), addr.port())))
        .with_context(|| format!("rank 0 cannot listen on {addr} (--coordinator)"))
}

/// A connection to the coordinator port whose greeting is not complete yet.
struct Pending {
    stream: TcpStream,
    addr: SocketAddr,
    buf: [u8; HELLO_LEN],
    got: usize,
    since: Instant,
}

/// Rank 0: waits until every other rank of `world` has greeted, checking each greeting.
/// `joined[r]` is rank r's connection (`None` for rank 0). Connections are greeted side by
/// side (non-blocking), so stray ones that say nothing never hold up the ranks behind them:
/// each is dropped after [`GREETING_WAIT`], or when the job is complete.
pub fn gather(
    listener: &TcpListener,
    world: usize,
    proto: &Protocol,
    fingerprint: u64,
    deadline: Instant,
) -> anyhow::Result<Vec<Option<Joined>>> {
    let at = listener.local_addr()?;
    let mut joined: Vec<Option<Joined>> = (0..world).map(|_| None).collect();
    let mut pending: Vec<Pending> = Vec::new();
    let mut count = 1;
    listener.set_nonblocking(true)?;
    while count < world {
        if Instant::now() >= deadline {
            let missing: Vec<String> = (1..world)
                .filter(|r| joined[*r].is_none())
                .map(|r| r.to_string())
                .collect();
            bail!(
                "rank 0 waited at {at} and rank(s) {} never joined",
                missing.join(",")
            );
        }
        let mut progress = false;
        loop {
            match listener.accept() {
                Ok((stream, addr)) => {
                    stream.set_nonblocking(true)?;
                    pending.push(Pending {
                        stream,
                        addr,
                        buf: [0; HELLO_LEN],
                        got: 0,
                        since: Instant::now(),
                    });
                    progress = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        let mut i = 0;
        while i < pending.len() {
            let p = &mut pending[i];
            let done = match p.stream.read(&mut p.buf[p.got..]) {
                Ok(0) => true,
                Ok(n) => {
                    p.got += n;
                    progress = true;
                    p.got == HELLO_LEN
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    p.since.elapsed() >= GREETING_WAIT
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => false,
                Err(_) => true,
            };
            if !done {
                i += 1;
                continue;
            }
            let p = pending.swap_remove(i);
            let hello = (p.got == HELLO_LEN)
                .then(|| Hello::decode(&p.buf, proto))
                .flatten();
            let Some(hello) = hello else {
                not_a_rank(p.addr, proto);
                continue;
            };
            if hello.world != world {
                bail!(
                    "rank {} was started with a world of {}, rank 0 with {world}: give every rank the same --world",
                    hello.rank,
                    hello.world
                );
            }
            if hello.rank == 0 || hello.rank >= world || joined[hello.rank].is_some() {
                bail!(
                    "two processes claim rank {} (or it is out of range): give each rank its own --rank",
                    hello.rank
                );
            }
            if hello.fingerprint != fingerprint {
                bail!(
                    "rank {} was started with different arguments than rank 0 ({}): start every rank with the same ones",
                    hello.rank,
                    proto.args_hint
                );
            }
            p.stream.set_nonblocking(false)?;
            p.stream.set_read_timeout(Some(remaining(deadline)))?;
            joined[hello.rank] = Some(Joined {
                stream: p.stream,
                hello,
                addr: p.addr,
            });
            count += 1;
        }
        if !progress && count < world {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    for p in &pending {
        not_a_rank(p.addr, proto);
    }
    Ok(joined)
}

fn not_a_rank(addr: SocketAddr, proto: &Protocol) {
    diag::warn(format!(
        "ignoring a connection from {addr} to the coordinator port: it did not greet like a {} rank",
        proto.tool
    ));
}

/// A rank other than 0: connects to the coordinator, retrying until `deadline` (rank 0 may
/// not listen yet).
pub fn connect(id_rank: usize, coordinator: &str, deadline: Instant) -> anyhow::Result<TcpStream> {
    let addr = resolve(coordinator)?;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                bail!(
                    "rank {id_rank} cannot reach rank 0 at {addr}: {e} (is rank 0 running with the same --coordinator?)"
                )
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Sends this rank's greeting on a connection to rank 0.
pub fn greet(stream: &mut TcpStream, proto: &Protocol, hello: &Hello) -> std::io::Result<()> {
    stream.write_all(&hello.encode(proto))
}

pub fn accept_until(listener: &TcpListener, deadline: Instant) -> anyhow::Result<TcpStream> {
    listener.set_nonblocking(true)?;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(remaining(deadline)))?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    bail!("timed out");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Time left until `deadline`, at least 100 ms (a socket timeout of zero means none).
pub fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100))
}

fn unspecified(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}
