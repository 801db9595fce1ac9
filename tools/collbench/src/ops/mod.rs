//! The collectives, one small module each over the shared harness (nccl-tests' layout): each
//! says how a requested size maps to buffers, what every rank puts in and must get back, its
//! bus-bandwidth factor, and how the tcp backend runs it. This file dispatches and holds the
//! pieces they share (chunking, reduce-on-arrival).

pub mod allgather;
pub mod allreduce;
pub mod alltoall;
pub mod broadcast;
pub mod reduce_scatter;
pub mod sendrecv;

use crate::comm::{Comm, CommError, Recv, Send};
use crate::dtype::{Dtype, RedOp, reduce_into};
use clap::ValueEnum;
use std::ops::Range;

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OpKind {
    Allreduce,
    Allgather,
    ReduceScatter,
    Broadcast,
    Alltoall,
    Sendrecv,
}

/// Which algorithm the tcp backend runs (`auto` picks by size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Algo {
    Auto,
    /// Ring: bandwidth-optimal, n-1 (or 2(n-1)) steps; large messages.
    Ring,
    /// Recursive doubling (allreduce): log2(n) steps of whole-buffer exchanges; small messages.
    RecursiveDoubling,
    /// Binomial tree (broadcast): log2(n) steps; small messages.
    Tree,
    /// Every rank exchanges with every other at once: one step; small messages.
    Direct,
    /// Pairwise exchange (alltoall): n-1 steps, one peer pair each.
    Pairwise,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Auto => "auto",
            Algo::Ring => "ring",
            Algo::RecursiveDoubling => "recursive_doubling",
            Algo::Tree => "tree",
            Algo::Direct => "direct",
            Algo::Pairwise => "pairwise",
        }
    }
}

/// Below this many bytes `auto` picks the latency-optimal algorithm, at or above it the ring.
pub const SMALL_MESSAGE_BYTES: u64 = 64 << 10;

/// Buffer sizes of one collective at one size, in elements, and the size nccl-tests reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Elements in each rank's send buffer.
    pub send_elems: usize,
    /// Elements in each rank's receive buffer.
    pub recv_elems: usize,
    /// The `count` column: elements of the whole array the op moves (as `bytes` counts them).
    pub count: u64,
    /// The `size` column: bytes nccl-tests uses for algbw (whole array for gather/scatter ops).
    pub bytes: u64,
}

/// What every op needs to know besides the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub dtype: Dtype,
    pub redop: RedOp,
    pub root: usize,
}

/// Buffers an op needs besides its input and output, kept across iterations so that the timed
/// loop allocates nothing: a fresh 64 MiB buffer per op would put page faults in the figures.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Where received data lands before it is reduced.
    pub staging: Vec<u8>,
    /// A working copy of the input (for ops that reduce into what they also send).
    pub work: Vec<u8>,
}

impl Scratch {
    /// The staging buffer and `work` holding a copy of `data`; no allocation once they have
    /// grown to the message size.
    pub fn with_work_copy(&mut self, data: &[u8]) -> (&mut Vec<u8>, &mut [u8]) {
        self.work.clear();
        self.work.extend_from_slice(data);
        (&mut self.staging, &mut self.work)
    }
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Allreduce => "allreduce",
            OpKind::Allgather => "allgather",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::Broadcast => "broadcast",
            OpKind::Alltoall => "alltoall",
            OpKind::Sendrecv => "sendrecv",
        }
    }

    /// Buffer sizes for a requested size in bytes (rounded down to whole elements, at least one
    /// per rank, as nccl-tests does).
    pub fn shape(self, requested_bytes: u64, dtype: Dtype, world: usize) -> Shape {
        let elem = dtype.size() as u64;
        let whole = (requested_bytes / elem).max(1);
        let per_rank = (whole / world as u64).max(1);
        let (send, recv, count) = match self {
            OpKind::Allreduce | OpKind::Broadcast | OpKind::Sendrecv => (whole, whole, whole),
            OpKind::Allgather => (per_rank, per_rank * world as u64, per_rank * world as u64),
            OpKind::ReduceScatter => (per_rank * world as u64, per_rank, per_rank * world as u64),
            OpKind::Alltoall => (
                per_rank * world as u64,
                per_rank * world as u64,
                per_rank * world as u64,
            ),
        };
        Shape {
            send_elems: send as usize,
            recv_elems: recv as usize,
            count,
            bytes: count * elem,
        }
    }

    /// busbw = algbw x this (nccl-tests doc/PERFORMANCE.md, n = ranks).
    pub fn bus_factor(self, world: usize) -> f64 {
        let n = world as f64;
        match self {
            OpKind::Allreduce => 2.0 * (n - 1.0) / n,
            OpKind::Allgather | OpKind::ReduceScatter | OpKind::Alltoall => (n - 1.0) / n,
            OpKind::Broadcast | OpKind::Sendrecv => 1.0,
        }
    }

    /// Algorithms the tcp backend has for this op (the first is the small-message one).
    pub fn algos(self) -> &'static [Algo] {
        match self {
            OpKind::Allreduce => &[Algo::RecursiveDoubling, Algo::Ring],
            OpKind::Allgather | OpKind::ReduceScatter => &[Algo::Direct, Algo::Ring],
            OpKind::Broadcast => &[Algo::Tree, Algo::Ring],
            OpKind::Alltoall => &[Algo::Direct, Algo::Pairwise],
            OpKind::Sendrecv => &[Algo::Direct],
        }
    }

    /// The algorithm that runs for `requested` at `bytes`; an error names the ones available.
    pub fn resolve_algo(self, requested: Algo, bytes: u64) -> Result<Algo, String> {
        let algos = self.algos();
        if requested == Algo::Auto {
            let small = bytes < SMALL_MESSAGE_BYTES;
            return Ok(if small {
                algos[0]
            } else {
                algos[algos.len() - 1]
            });
        }
        if algos.contains(&requested) {
            Ok(requested)
        } else {
            let names: Vec<&str> = algos.iter().map(|a| a.name()).collect();
            Err(format!(
                "--algo {} is not available for {}; use auto or one of: {}",
                requested.name(),
                self.name(),
                names.join(", ")
            ))
        }
    }

    /// Fills this rank's send buffer with its known input.
    pub fn fill(self, rank: usize, world: usize, shape: &Shape, p: &Params, send: &mut [u8]) {
        let value = |i: usize| match self {
            OpKind::Allreduce | OpKind::Sendrecv | OpKind::ReduceScatter | OpKind::Alltoall => {
                crate::dtype::input_value(rank, i)
            }
            OpKind::Allgather => crate::dtype::input_value(rank, rank * shape.send_elems + i),
            OpKind::Broadcast => crate::dtype::input_value(rank, i),
        };
        let _ = world;
        for i in 0..shape.send_elems {
            p.dtype.store(send, i, value(i));
        }
    }

    /// The value element `i` of this rank's receive buffer must hold.
    pub fn expected(self, rank: usize, world: usize, shape: &Shape, p: &Params, i: usize) -> f32 {
        use crate::dtype::{input_value, reduced_value};
        match self {
            OpKind::Allreduce => reduced_value(p.redop, world, i),
            OpKind::Allgather => {
                let per = shape.send_elems;
                input_value(i / per, i)
            }
            OpKind::ReduceScatter => reduced_value(p.redop, world, rank * shape.recv_elems + i),
            OpKind::Broadcast => input_value(p.root, i),
            OpKind::Alltoall => {
                let per = shape.recv_elems / world;
                input_value(i / per, rank * per + i % per)
            }
            OpKind::Sendrecv => input_value((rank + world - 1) % world, i),
        }
    }

    /// Runs the op once on the tcp backend: `send` to `recv`, with buffers kept across calls.
    pub fn run_tcp(
        self,
        comm: &Comm,
        algo: Algo,
        p: &Params,
        send: &[u8],
        recv: &mut [u8],
        scratch: &mut Scratch,
    ) -> Result<(), CommError> {
        match self {
            OpKind::Allreduce => allreduce::run(comm, algo, p, send, recv, scratch),
            OpKind::Allgather => allgather::run(comm, algo, send, recv),
            OpKind::ReduceScatter => reduce_scatter::run(comm, algo, p, send, recv, scratch),
            OpKind::Broadcast => broadcast::run(comm, algo, p, send, recv),
            OpKind::Alltoall => alltoall::run(comm, algo, send, recv),
            OpKind::Sendrecv => sendrecv::run(comm, send, recv),
        }
    }
}

/// `count` elements split into `parts` contiguous ranges, the first `count % parts` one longer
/// (some empty when count < parts).
pub fn split(count: usize, parts: usize) -> Vec<Range<usize>> {
    let base = count / parts;
    let extra = count % parts;
    let mut start = 0;
    (0..parts)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

/// Element range to byte range.
pub fn bytes_of(r: &Range<usize>, dtype: Dtype) -> Range<usize> {
    r.start * dtype.size()..r.end * dtype.size()
}

/// Disjoint views of one buffer: `a` to read, `b` to write.
pub fn split_pair(buf: &mut [u8], a: Range<usize>, b: Range<usize>) -> (&[u8], &mut [u8]) {
    assert!(a.end <= b.start || b.end <= a.start, "ranges overlap");
    if a.end <= b.start {
        let (lo, hi) = buf.split_at_mut(b.start);
        (&lo[a], &mut hi[..b.end - b.start])
    } else {
        let (lo, hi) = buf.split_at_mut(a.start);
        (&hi[..a.end - a.start], &mut lo[b])
    }
}

/// One step of a reducing exchange: sends `out` to `to` while receiving as many bytes as `acc`
/// holds from `from` into `scratch`, reducing each whole element into `acc` as it lands.
pub fn send_recv_reduce(
    comm: &Comm,
    p: &Params,
    to: usize,
    out: &[u8],
    from: usize,
    acc: &mut [u8],
    scratch: &mut Vec<u8>,
) -> Result<(), CommError> {
    let len = acc.len();
    if scratch.len() < len {
        scratch.resize(len, 0);
    }
    let elem = p.dtype.size();
    let mut reduced = 0;
    let sends = [Send {
        peer: to,
        data: out,
    }];
    let mut recvs = [Recv {
        peer: from,
        data: &mut scratch[..len],
    }];
    comm.exchange_with(&sends, &mut recvs, |_, landed, _| {
        // Reduce in slices of at least 32 KiB (or the tail) so the work overlaps the transfer.
        let whole = landed.len() / elem * elem;
        if whole - reduced >= 32 << 10 || whole == len {
            reduce_into(
                p.dtype,
                p.redop,
                &mut acc[reduced..whole],
                &landed[reduced..whole],
            );
            reduced = whole;
        }
    })?;
    if reduced < len {
        reduce_into(
            p.dtype,
            p.redop,
            &mut acc[reduced..],
            &scratch[reduced..len],
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
