//! The collectives, one small file each over the shared harness (nccl-tests' layout, where each
//! `src/<coll>.cu` fills a `struct testColl`): each file implements [`Collective`], the whole
//! per-collective contract, and registers itself with one line in `registry!` below. This
//! file holds the contract, the registry and the pieces the tcp algorithms share (chunking,
//! reduce-on-arrival).

use crate::comm::{Comm, CommError, Recv, Send};
use crate::dtype::{Dtype, input_value, reduce_into};
use crate::nccl::call::NcclCall;
pub use crate::shape::{Params, Shape};
use clap::ValueEnum;
use clap::builder::PossibleValue;
use std::ops::{Deref, Range};

/// Declares each collective's module and lists its type in [`COLLECTIVES`].
macro_rules! registry {
    ($($module:ident::$ty:ident),* $(,)?) => {
        $(pub mod $module;)*
        /// Every collective, in `--coll`'s order.
        pub static COLLECTIVES: &[Op] = &[$(Op(&$module::$ty)),*];
    };
}

// Adding a collective: a file `ops/<name>.rs` implementing `Collective`, and its line here.
registry! {
    allreduce::Allreduce,
    allgather::Allgather,
    reduce_scatter::ReduceScatter,
    broadcast::Broadcast,
    alltoall::Alltoall,
    sendrecv::Sendrecv,
}

/// What a collective is, everything the harness and both backends need from it (nccl-tests'
/// `testColl`: name, byte counts, data init, bandwidth, run).
pub trait Collective: Sync {
    /// Its name in records, in the table and in messages (`reduce_scatter`).
    fn name(&self) -> &'static str;

    /// Its `--coll` value: the name with dashes, clap's spelling (a test checks the two agree).
    fn flag(&self) -> &'static str {
        self.name()
    }

    /// Buffer sizes in elements when the requested size holds `whole` elements, over `world`
    /// ranks (nccl-tests' `getCollByteCount`).
    fn counts(&self, whole: u64, world: u64) -> Counts;

    /// busbw = algbw x this, n = ranks (nccl-tests' `getBw`, doc/PERFORMANCE.md).
    fn bus_factor(&self, world: usize) -> f64;

    /// Whether `--root` means something to it (the record then carries the root).
    fn rooted(&self) -> bool {
        false
    }

    /// Algorithms the tcp backend has for it: `auto` takes the first below
    /// [`SMALL_MESSAGE_BYTES`], the last from there.
    fn algos(&self) -> &'static [Algo];

    /// Element `i` of this rank's send buffer (nccl-tests' `initData`): values from
    /// [`input_value`], so that every result is known exactly.
    fn input(&self, rank: usize, _shape: &Shape, i: usize) -> f32 {
        input_value(rank, i)
    }

    /// The value element `i` of this rank's receive buffer must hold after one run.
    fn expected(&self, rank: usize, world: usize, shape: &Shape, p: &Params, i: usize) -> f32;

    /// Runs it once on the tcp backend, `send` to `recv`; anything else it needs lives in
    /// `scratch`, kept across calls so that the timed loop allocates nothing.
    fn run_tcp(
        &self,
        comm: &Comm,
        algo: Algo,
        p: &Params,
        send: &[u8],
        recv: &mut [u8],
        scratch: &mut Scratch,
    ) -> Result<(), CommError>;

    /// Enqueues it once on one GPU's stream (nccl backend).
    fn run_nccl(&self, call: &NcclCall) -> Result<(), String>;
}

/// What [`Collective::counts`] gives: elements per buffer and the `count` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Elements in each rank's send buffer.
    pub send: u64,
    /// Elements in each rank's receive buffer.
    pub recv: u64,
    /// Elements of the whole array the op moves (as nccl-tests' `count` column).
    pub count: u64,
}

/// Elements per rank's block when `whole` elements are split over `world` ranks: rounded down,
/// at least one (as nccl-tests).
pub fn per_rank(whole: u64, world: u64) -> u64 {
    (whole / world).max(1)
}

/// A registered collective: the handle `--coll` parses to and configs hold.
#[derive(Clone, Copy)]
pub struct Op(&'static dyn Collective);

impl Deref for Op {
    type Target = dyn Collective;
    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl PartialEq for Op {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Op {}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl ValueEnum for Op {
    fn value_variants<'a>() -> &'a [Self] {
        COLLECTIVES
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.flag()))
    }
}

impl Op {
    /// The handle of one collective, for code that names it (`decode` runs allreduces).
    pub const fn new(collective: &'static dyn Collective) -> Op {
        Op(collective)
    }

    /// The registered collective called `name` (as records spell it).
    pub fn named(name: &str) -> Option<Op> {
        COLLECTIVES.iter().copied().find(|op| op.name() == name)
    }

    /// Buffer sizes for a requested size in bytes (rounded down to whole elements, at least one
    /// per rank, as nccl-tests does).
    pub fn shape(self, requested_bytes: u64, dtype: Dtype, world: usize) -> Shape {
        let elem = dtype.size() as u64;
        let whole = (requested_bytes / elem).max(1);
        let c = self.counts(whole, world as u64);
        Shape {
            send_elems: c.send as usize,
            recv_elems: c.recv as usize,
            count: c.count,
            bytes: c.count * elem,
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
    pub fn fill(self, rank: usize, shape: &Shape, p: &Params, send: &mut [u8]) {
        for i in 0..shape.send_elems {
            p.dtype.store(send, i, self.input(rank, shape, i));
        }
    }
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
