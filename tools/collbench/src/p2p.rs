//! `collbench p2p`: for every ordered pair of ranks, the bandwidth from one to the other alone
//! and both ways at once, and a small message's latency (nvbandwidth's matrices), as one `p2p`
//! record per pair and three matrices on stderr. Pairs run one at a time, every rank stepping
//! through the same list, the others waiting at a barrier, so a pair's figures are its own.

use crate::comm::{Comm, CommError, Recv, Send};
use crate::harness::{RunConfig, buffer};
use crate::launch::Role;
use crate::measure::{Iters, Mode, Runner, measure};
use crate::{Backend, Job};
use servbench::cli::{self, Exit};
use servbench::jsonl::{self, Disposition, RecordWriter};
use servbench::record::{P2pMethod, P2pRecord, SCHEMA_VERSION, now_ts};
use std::time::Instant;

/// Bytes of each latency message (nvbandwidth's latency test moves a pointer-sized word).
pub const LATENCY_BYTES: u64 = 8;

/// The largest `--bytes`: two buffers of it per rank.
pub const MAX_BYTES: u64 = 1 << 30;

/// What `p2p` measures: the pairs' message size, iterations and the job's timeout and labels
/// (in `run`, whose sizes hold the one message size, so the bootstrap fingerprint covers it).
#[derive(Debug, Clone)]
pub struct P2pConfig {
    pub bytes: u64,
    pub run: RunConfig,
    /// `--method` (nccl backend): only the copy engine or only NCCL; `None`: both.
    pub only: Option<P2pMethod>,
}

/// One ordered pair's figures, measured on `src`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    pub uni_gbps: f64,
    pub bidir_gbps: f64,
    pub latency_us: f64,
}

/// Every ordered pair of `world` ranks, row by row, without the diagonal.
pub fn pairs(world: usize) -> Vec<(usize, usize)> {
    (0..world)
        .flat_map(|s| (0..world).filter(move |&d| d != s).map(move |d| (s, d)))
        .collect()
}

/// Runs `collbench p2p --backend tcp` (the crate root's [`crate::p2p`] picks the backend):
/// forwards upstream records, then one `p2p` record per ordered pair.
pub fn run(pc: &P2pConfig, job: &Job) -> anyhow::Result<Exit> {
    if let Some(m) = pc.only {
        return Err(cli::usage(format!(
            "--method {}: the tcp backend moves bytes over its sockets only; the copy engine \
             and NCCL need --backend nccl",
            m.name().replace('_', "-")
        )));
    }
    let mut out = RecordWriter::stdout();
    let id = match &job.role {
        Role::Rank(id) => Some(id),
        _ => None,
    };
    if id.is_none_or(|id| id.rank == 0) {
        jsonl::pass_through(job.strict_input, &mut out, |_| Disposition::Forward)?;
    }
    match &job.role {
        Role::Hosts(h) => return crate::hosts::run(&job.hosts_plan(h)?, &job.args),
        Role::Local(n) => return crate::run_local_ranks(job, *n, pc.run.timeout),
        _ => {}
    }
    let comm = crate::connect(&pc.run, id)?;
    if comm.world < 2 {
        return Err(cli::usage(
            "collbench p2p needs at least two ranks: give -np N (or --hosts, --world)",
        ));
    }
    let cells = measure_all(&comm, pc)?;
    if comm.rank == 0 {
        for (&(src, dst), cell) in pairs(comm.world).iter().zip(&cells) {
            out.emit(&record(pc, job.backend, comm.world, (src, dst), cell))?;
        }
        for line in matrices(pc, "tcp backend", comm.world, &cells, None).lines() {
            cli::info(line);
        }
    }
    Ok(Exit::Ok)
}

/// The record of one pair.
pub fn record(
    pc: &P2pConfig,
    backend: Backend,
    world: usize,
    (src, dst): (usize, usize),
    cell: &Cell,
) -> P2pRecord {
    P2pRecord {
        v: SCHEMA_VERSION,
        ts: now_ts(),
        labels: pc.run.labels.clone(),
        backend: backend.name().into(),
        ranks: world as u32,
        src: src as u32,
        dst: dst as u32,
        bytes: pc.bytes,
        uni_gbps: cell.uni_gbps,
        bidir_gbps: cell.bidir_gbps,
        latency_bytes: LATENCY_BYTES,
        latency_us: cell.latency_us,
        iters: pc.run.iters.timed,
        warmup: pc.run.iters.warmup,
        method: P2pMethod::Tcp,
        peer_access: None,
        link: None,
        extra: servbench::record::Extra::new(),
    }
}

/// Measures every pair (all ranks in step) and gathers the cells on every rank, in
/// [`pairs`]' order.
fn measure_all(comm: &Comm, pc: &P2pConfig) -> anyhow::Result<Vec<Cell>> {
    let list = pairs(comm.world);
    let len = pc.bytes as usize;
    let out = buffer(len, 1, "send")?;
    let mut into = buffer(len, 1, "receive")?;
    let failed = |peer: usize, e: CommError| {
        cli::failure(format!(
            "rank {}: p2p with rank {peer} at {} bytes: {e}",
            comm.rank, pc.bytes
        ))
    };
    // Three figures per pair; only the pair's src fills its own, the sum gathers them.
    let mut mine = vec![0.0; list.len() * 3];
    for (i, &(src, dst)) in list.iter().enumerate() {
        comm.barrier().map_err(|e| failed(src, e))?;
        let peer = if comm.rank == src { dst } else { src };
        if comm.rank != src && comm.rank != dst {
            continue;
        }
        let iters = pc.run.iters;
        let sender = comm.rank == src;
        let mut seconds = [0.0; 3];
        for (k, pattern) in [Pattern::OneWay, Pattern::BothWays, Pattern::RoundTrip]
            .into_iter()
            .enumerate()
        {
            let mut pair = Pair {
                comm,
                peer,
                sender,
                pattern,
                out: &out,
                into: &mut into,
                word: [0; LATENCY_BYTES as usize],
            };
            seconds[k] = pair.seconds(iters).map_err(|e| {
                cli::failure(format!(
                    "rank {}: p2p with rank {peer} at {} bytes: {e}",
                    comm.rank, pc.bytes
                ))
            })?;
        }
        let [uni, bidir, rtt] = seconds;
        if sender {
            let moved = pc.bytes as f64 * f64::from(iters.timed);
            mine[i * 3] = moved / uni / 1e9;
            mine[i * 3 + 1] = 2.0 * moved / bidir / 1e9;
            mine[i * 3 + 2] = rtt / f64::from(iters.timed) / 2.0 * 1e6;
        }
    }
    let all = comm.sum_f64(&mine).map_err(|e| failed(0, e))?;
    let cells: Vec<Cell> = all
        .chunks_exact(3)
        .map(|c| Cell {
            uni_gbps: c[0],
            bidir_gbps: c[1],
            latency_us: c[2],
        })
        .collect();
    for (&(src, dst), c) in list.iter().zip(&cells) {
        let figures = [c.uni_gbps, c.bidir_gbps, c.latency_us];
        if figures.iter().any(|x| !x.is_finite() || *x <= 0.0) {
            return Err(cli::failure(format!(
                "p2p {src} -> {dst}: a figure is not finite and positive ({figures:?}): the clock did not advance; give more -n/--iters or --bytes"
            )));
        }
    }
    Ok(cells)
}

/// What one pair measures through the measure loop: a message one way, one each way at once,
/// or an 8-byte round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pattern {
    OneWay,
    BothWays,
    RoundTrip,
}

/// One side of a pair's measurement: the measure loop's [`Runner`] on the host's clock.
struct Pair<'a> {
    comm: &'a Comm,
    peer: usize,
    sender: bool,
    pattern: Pattern,
    out: &'a [u8],
    into: &'a mut [u8],
    /// The round trip's message.
    word: [u8; LATENCY_BYTES as usize],
}

impl Pair<'_> {
    /// The timed messages' seconds on this side, through the one measure loop (pipelined:
    /// back to back, the last one's arrival acknowledged before the clock stops).
    fn seconds(&mut self, iters: Iters) -> anyhow::Result<f64> {
        let sampled = measure(self, iters, Mode::Pipelined, false)?;
        Ok(sampled.samples_us.iter().sum::<f64>() / 1e6)
    }
}

impl Runner for Pair<'_> {
    type Mark = Instant;

    fn run_once(&mut self) -> anyhow::Result<()> {
        let (comm, peer) = (self.comm, self.peer);
        let sends = [Send {
            peer,
            data: self.out,
        }];
        let mut recvs = [Recv {
            peer,
            data: &mut *self.into,
        }];
        match (self.pattern, self.sender) {
            (Pattern::BothWays, _) => comm.exchange(&sends, &mut recvs)?,
            (Pattern::OneWay, true) => comm.exchange(&sends, &mut [])?,
            (Pattern::OneWay, false) => comm.exchange(&[], &mut recvs)?,
            (Pattern::RoundTrip, true) => {
                comm.send(peer, &self.word)?;
                comm.recv(peer, &mut self.word)?;
            }
            (Pattern::RoundTrip, false) => {
                comm.recv(peer, &mut self.word)?;
                comm.send(peer, &self.word)?;
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    /// A stream's last message may still be on the wire when the sender's write returns: a
    /// one-byte ack from the receiver, so the sender's clock covers its arrival.
    fn settle(&mut self) -> anyhow::Result<()> {
        if self.pattern == Pattern::RoundTrip {
            return Ok(());
        }
        let mut ack = [0u8; 1];
        match self.sender {
            true => self.comm.recv(self.peer, &mut ack)?,
            false => self.comm.send(self.peer, &ack)?,
        }
        Ok(())
    }

    /// Both sides of the pair have arrived (the other ranks wait at the job's barrier).
    fn barrier(&mut self) -> anyhow::Result<()> {
        let mut token = [0u8; 1];
        self.comm.exchange(
            &[Send {
                peer: self.peer,
                data: &[1],
            }],
            &mut [Recv {
                peer: self.peer,
                data: &mut token,
            }],
        )?;
        Ok(())
    }

    fn new_mark(&mut self) -> anyhow::Result<Instant> {
        Ok(Instant::now())
    }

    fn record(&mut self, mark: &mut Instant) -> anyhow::Result<()> {
        *mark = Instant::now();
        Ok(())
    }

    fn elapsed_us(&mut self, from: &Instant, to: &Instant) -> anyhow::Result<f64> {
        Ok(to.duration_since(*from).as_secs_f64() * 1e6)
    }

    fn count_wrong(&mut self) -> anyhow::Result<u64> {
        // p2p moves bytes and checks nothing (`check` is off).
        Ok(0)
    }
}

/// Reads one figure of a cell.
type Figure = fn(&Cell) -> f64;

/// The three matrices as nvbandwidth prints them: a row per source, a column per destination,
/// `-` on the diagonal; `how` names the method (`tcp backend`, `copy engine`); `links`, where
/// known, a fourth matrix of each pair's `nvidia-smi topo -m` link.
pub fn matrices(
    pc: &P2pConfig,
    how: &str,
    world: usize,
    cells: &[Cell],
    links: Option<&[Option<String>]>,
) -> String {
    let mut text = String::new();
    let figures: [(&str, Figure); 3] = [
        ("unidirectional bandwidth (GB/s)", |c| c.uni_gbps),
        ("bidirectional bandwidth (GB/s, both ways)", |c| {
            c.bidir_gbps
        }),
        ("latency (us, half round trip)", |c| c.latency_us),
    ];
    for (k, (title, get)) in figures.iter().enumerate() {
        let size = if k == 2 { LATENCY_BYTES } else { pc.bytes };
        if k > 0 {
            text.push('\n');
        }
        text.push_str(&format!("p2p {title}, {size}-byte messages, {how}\n"));
        text.push_str(&grid(world, |i| format!("{:.2}", get(&cells[i]))));
    }
    if let Some(links) = links.filter(|l| l.iter().any(Option::is_some)) {
        text.push_str("\n\np2p link of each pair (nvidia-smi topo -m)\n");
        text.push_str(&grid(world, |i| {
            links
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or_else(|| "?".into())
        }));
    }
    text
}

/// A row per source, a column per destination, `-` on the diagonal; `cell` of a pair's
/// position in [`pairs`].
fn grid(world: usize, cell: impl Fn(usize) -> String) -> String {
    let list = pairs(world);
    let mut text = format!("{:>8}", "src\\dst");
    for d in 0..world {
        text.push_str(&format!(" {d:>9}"));
    }
    for s in 0..world {
        text.push_str(&format!("\n{s:>8}"));
        for d in 0..world {
            match list.iter().position(|&p| p == (s, d)) {
                Some(i) => text.push_str(&format!(" {:>9}", cell(i))),
                None => text.push_str(&format!(" {:>9}", "-")),
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_every_ordered_pair_without_the_diagonal() {
        assert_eq!(pairs(3), [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]);
        assert_eq!(pairs(4).len(), 12);
    }

    #[test]
    fn the_link_matrix_prints_each_pairs_topo_cell_beside_the_figures() {
        let pc = P2pConfig {
            bytes: 1 << 20,
            run: RunConfig {
                op: crate::ops::Op::named("sendrecv").unwrap(),
                algo: crate::ops::Algo::Auto,
                sizes: vec![1 << 20],
                iters: crate::measure::Iters {
                    warmup: 1,
                    timed: 2,
                },
                dtype: crate::dtype::Dtype::F32,
                redop: crate::dtype::RedOp::Sum,
                root: 0,
                mode: crate::measure::Mode::Pipelined,
                check: false,
                timeout: std::time::Duration::from_secs(5),
                labels: Default::default(),
            },
            only: None,
        };
        let cell = Cell {
            uni_gbps: 40.0,
            bidir_gbps: 75.5,
            latency_us: 2.25,
        };
        let links = [Some("NV18".to_string()), None];
        let text = matrices(
            &pc,
            "copy engine (cuMemcpyPeerAsync)",
            2,
            &[cell, cell],
            Some(&links),
        );
        assert!(
            text.contains(
                "p2p unidirectional bandwidth (GB/s), 1048576-byte messages, copy engine"
            ),
            "{text}"
        );
        assert!(
            text.contains("p2p link of each pair (nvidia-smi topo -m)"),
            "{text}"
        );
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip_while(|l| !l.starts_with("p2p link"))
            .skip(2)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            [vec!["0", "-", "NV18"], vec!["1", "?", "-"]],
            "{text}"
        );
        let none = matrices(&pc, "NCCL send/recv", 2, &[cell, cell], Some(&[None, None]));
        assert!(
            !none.contains("p2p link"),
            "no matrix where no link is known: {none}"
        );
    }
}
