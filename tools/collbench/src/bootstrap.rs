//! How collbench's ranks connect: the shared rendezvous ([`servbench::ranks::rendezvous`]: rank
//! 0 listens on the coordinator address, every other rank greets it with its rank, world, an
//! argument fingerprint and the port it listens on), then rank 0 sends everyone the address
//! table and each pair of ranks opens one connection (the lower rank accepts). The same
//! bootstrap serves `-np` (local processes), `--hosts` (over SSH), ranks started by hand or by
//! mpirun/srun, and the nccl backend (which only ships its unique id over it).

use crate::comm::Comm;
use anyhow::{Context, bail};
use servbench::ranks::frame;
use servbench::ranks::rendezvous::{self, Hello, Protocol, remaining};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

pub use servbench::ranks::Identity;

const PROTOCOL: Protocol = Protocol {
    magic: *b"CLB1",
    tool: "collbench",
    args_hint: "op, sizes, dtype, iterations, ...",
};
/// Tag of the address table rank 0 sends.
const TABLE: u8 = 1;
/// Longest address a table entry may hold (`[v6 address%scope]:port`).
const MAX_ADDRESS: usize = 128;

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

fn coordinate(
    id: &Identity,
    fingerprint: u64,
    deadline: Instant,
) -> anyhow::Result<Vec<Option<TcpStream>>> {
    let listener = rendezvous::listen(&id.coordinator)?;
    let joined = rendezvous::gather(&listener, id.world, &PROTOCOL, fingerprint, deadline)?;
    let table: Vec<String> = joined
        .iter()
        .map(|j| match j {
            Some(j) => SocketAddr::new(j.addr.ip(), j.hello.port).to_string(),
            None => String::new(),
        })
        .collect();
    let text = table.join(" ");
    let mut peers: Vec<Option<TcpStream>> =
        joined.into_iter().map(|j| j.map(|j| j.stream)).collect();
    for stream in peers.iter_mut().flatten() {
        frame::write_frame(stream, TABLE, text.as_bytes())?;
    }
    Ok(peers)
}

fn join(
    id: &Identity,
    fingerprint: u64,
    deadline: Instant,
) -> anyhow::Result<Vec<Option<TcpStream>>> {
    let mut to_root = rendezvous::connect(id.rank, &id.coordinator, deadline)?;
    to_root.set_read_timeout(Some(remaining(deadline)))?;
    // Listen on the interface that reaches rank 0: the one other ranks will reach us through.
    let listener = TcpListener::bind(SocketAddr::new(to_root.local_addr()?.ip(), 0))?;
    let hello = Hello {
        rank: id.rank,
        world: id.world,
        fingerprint,
        port: listener.local_addr()?.port(),
    };
    rendezvous::greet(&mut to_root, &PROTOCOL, &hello)?;
    let closed = || {
        format!(
            "rank {}: rank 0 closed the bootstrap before every rank joined (see its error)",
            id.rank
        )
    };
    let (tag, text) =
        frame::read_frame(&mut to_root, id.world * MAX_ADDRESS).with_context(closed)?;
    if tag != TABLE {
        bail!(
            "rank {}: rank 0 sent something else than the address table",
            id.rank
        );
    }
    let table: Vec<String> = String::from_utf8_lossy(&text)
        .split(' ')
        .map(str::to_string)
        .collect();
    if table.len() != id.world {
        bail!(
            "rank {}: rank 0's address table has {} entries for a world of {}",
            id.rank,
            table.len(),
            id.world
        );
    }
    to_root.set_read_timeout(None)?;

    let mut peers: Vec<Option<TcpStream>> = (0..id.world).map(|_| None).collect();
    peers[0] = Some(to_root);
    for (peer, address) in table.iter().enumerate().take(id.rank).skip(1) {
        let target: SocketAddr = address
            .parse()
            .with_context(|| format!("bad address '{address}' for rank {peer}"))?;
        let mut s = TcpStream::connect_timeout(&target, remaining(deadline))
            .with_context(|| format!("rank {} cannot reach rank {peer} at {target}", id.rank))?;
        s.write_all(&PROTOCOL.magic)?;
        s.write_all(&(id.rank as u32).to_le_bytes())?;
        peers[peer] = Some(s);
    }
    for _ in id.rank + 1..id.world {
        let mut s = rendezvous::accept_until(&listener, deadline)
            .with_context(|| format!("rank {}: a higher rank never connected", id.rank))?;
        s.set_read_timeout(Some(remaining(deadline)))?;
        let mut hello = [0u8; 8];
        s.read_exact(&mut hello)?;
        let peer = u32::from_le_bytes(hello[4..8].try_into()?) as usize;
        if hello[..4] != PROTOCOL.magic
            || peer <= id.rank
            || peer >= id.world
            || peers[peer].is_some()
        {
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
