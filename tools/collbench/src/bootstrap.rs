//! How ranks find each other: rank 0 listens on the coordinator address, every other rank
//! connects to it and says who it is and where it listens, rank 0 sends everyone the address
//! table, and each pair of ranks then opens one connection (the lower rank accepts). The same
//! bootstrap serves `-np` (local processes), `--hosts` (over SSH), ranks started by hand or by
//! mpirun/srun, and the nccl backend (which only ships its unique id over it).

use crate::comm::Comm;
use anyhow::{Context, bail};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"CLB1";

/// Who this process is in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub rank: usize,
    pub world: usize,
    /// `host:port` where rank 0 listens.
    pub coordinator: String,
}

/// Connects this rank to all the others. `fingerprint` summarises the run's arguments: ranks
/// started with different ones are refused (they would deadlock on different sizes).
pub fn connect(id: &Identity, fingerprint: u64, timeout: Duration) -> anyhow::Result<Comm> {
    if id.world == 0 || id.rank >= id.world {
        bail!("rank {} is outside a world of {}", id.rank, id.world);
    }
    let deadline = Instant::now() + timeout;
    let peers = if id.world == 1 {
        vec![None]
    } else if id.rank == 0 {
        coordinate(id, fingerprint, deadline)?
    } else {
        join(id, fingerprint, deadline)?
    };
    Ok(Comm::new(id.rank, id.world, peers, timeout)?)
}

fn resolve(coordinator: &str) -> anyhow::Result<SocketAddr> {
    coordinator
        .to_socket_addrs()
        .with_context(|| format!("coordinator '{coordinator}' is not HOST:PORT"))?
        .next()
        .with_context(|| format!("coordinator '{coordinator}' resolves to no address"))
}

fn coordinate(
    id: &Identity,
    fingerprint: u64,
    deadline: Instant,
) -> anyhow::Result<Vec<Option<TcpStream>>> {
    let addr = resolve(&id.coordinator)?;
    // The coordinator name may be how other hosts reach us, not a local address: then listen on all.
    let listener = TcpListener::bind(addr)
        .or_else(|_| TcpListener::bind(SocketAddr::new(unspecified(addr.ip()), addr.port())))
        .with_context(|| format!("rank 0 cannot listen on {addr} (--coordinator)"))?;
    let mut peers: Vec<Option<TcpStream>> = (0..id.world).map(|_| None).collect();
    let mut table: Vec<String> = vec![String::new(); id.world];
    let mut joined = 1;
    while joined < id.world {
        let mut stream = accept_until(&listener, deadline).with_context(|| {
            let missing: Vec<String> = (1..id.world)
                .filter(|r| peers[*r].is_none())
                .map(|r| r.to_string())
                .collect();
            format!(
                "rank 0 waited at {addr} and rank(s) {} never joined",
                missing.join(",")
            )
        })?;
        let mut hello = [0u8; 4 + 4 + 4 + 8 + 2];
        stream
            .read_exact(&mut hello)
            .context("a joining rank sent no greeting")?;
        if &hello[..4] != MAGIC {
            bail!("something that is not collbench connected to {addr}");
        }
        let rank = u32::from_le_bytes(hello[4..8].try_into()?) as usize;
        let world = u32::from_le_bytes(hello[8..12].try_into()?) as usize;
        let theirs = u64::from_le_bytes(hello[12..20].try_into()?);
        let port = u16::from_le_bytes(hello[20..22].try_into()?);
        if world != id.world {
            bail!(
                "rank {rank} was started with a world of {world}, rank 0 with {}: give every rank the same --world",
                id.world
            );
        }
        if rank == 0 || rank >= id.world || peers[rank].is_some() {
            bail!(
                "two processes claim rank {rank} (or it is out of range): give each rank its own --rank"
            );
        }
        if theirs != fingerprint {
            bail!(
                "rank {rank} was started with different arguments than rank 0 (op, sizes, dtype, iterations, ...): start every rank with the same ones"
            );
        }
        let ip = stream.peer_addr()?.ip();
        table[rank] = SocketAddr::new(ip, port).to_string();
        peers[rank] = Some(stream);
        joined += 1;
    }
    let text = table.join(" ");
    for stream in peers.iter_mut().flatten() {
        stream.write_all(&(text.len() as u32).to_le_bytes())?;
        stream.write_all(text.as_bytes())?;
    }
    Ok(peers)
}

fn join(
    id: &Identity,
    fingerprint: u64,
    deadline: Instant,
) -> anyhow::Result<Vec<Option<TcpStream>>> {
    let addr = resolve(&id.coordinator)?;
    let mut to_root = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                bail!(
                    "rank {} cannot reach rank 0 at {addr}: {e} (is rank 0 running with the same --coordinator?)",
                    id.rank
                )
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    to_root.set_read_timeout(Some(remaining(deadline)))?;
    // Listen on the interface that reaches rank 0: the one other ranks will reach us through.
    let listener = TcpListener::bind(SocketAddr::new(to_root.local_addr()?.ip(), 0))?;
    let mut hello = Vec::with_capacity(22);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&(id.rank as u32).to_le_bytes());
    hello.extend_from_slice(&(id.world as u32).to_le_bytes());
    hello.extend_from_slice(&fingerprint.to_le_bytes());
    hello.extend_from_slice(&listener.local_addr()?.port().to_le_bytes());
    to_root.write_all(&hello)?;
    let mut len = [0u8; 4];
    to_root.read_exact(&mut len).with_context(|| {
        format!(
            "rank {}: rank 0 closed the bootstrap before every rank joined (see its error)",
            id.rank
        )
    })?;
    let mut text = vec![0u8; u32::from_le_bytes(len) as usize];
    to_root.read_exact(&mut text)?;
    let table: Vec<String> = String::from_utf8_lossy(&text)
        .split(' ')
        .map(str::to_string)
        .collect();
    to_root.set_read_timeout(None)?;

    let mut peers: Vec<Option<TcpStream>> = (0..id.world).map(|_| None).collect();
    peers[0] = Some(to_root);
    for (peer, address) in table.iter().enumerate().take(id.rank).skip(1) {
        let target: SocketAddr = address
            .parse()
            .with_context(|| format!("bad address '{address}' for rank {peer}"))?;
        let mut s = TcpStream::connect_timeout(&target, remaining(deadline))
            .with_context(|| format!("rank {} cannot reach rank {peer} at {target}", id.rank))?;
        s.write_all(MAGIC)?;
        s.write_all(&(id.rank as u32).to_le_bytes())?;
        peers[peer] = Some(s);
    }
    for _ in id.rank + 1..id.world {
        let mut s = accept_until(&listener, deadline)
            .with_context(|| format!("rank {}: a higher rank never connected", id.rank))?;
        s.set_read_timeout(Some(remaining(deadline)))?;
        let mut hello = [0u8; 8];
        s.read_exact(&mut hello)?;
        let peer = u32::from_le_bytes(hello[4..8].try_into()?) as usize;
        if &hello[..4] != MAGIC || peer <= id.rank || peer >= id.world || peers[peer].is_some() {
            bail!(
                "rank {}: unexpected connection during the bootstrap",
                id.rank
            );
        }
        s.set_read_timeout(None)?;
        peers[peer] = Some(s);
    }
    Ok(peers)
}

fn accept_until(listener: &TcpListener, deadline: Instant) -> anyhow::Result<TcpStream> {
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

fn remaining(deadline: Instant) -> Duration {
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
