//! Allreduce: every rank ends with the element-wise reduction of all ranks' buffers.
//! busbw factor 2(n-1)/n. Ring (reduce-scatter then allgather, 2(n-1) steps of 1/n of the
//! buffer) for large messages; recursive doubling (log2(n) whole-buffer exchanges, with the
//! ranks beyond a power of two folded in first) for small ones.

use super::{
    Algo, Collective, Counts, Params, Scratch, Shape, bytes_of, send_recv_reduce, split, split_pair,
};
use crate::comm::{Comm, CommError};
use crate::dtype::reduced_value;
use crate::nccl::call::NcclCall;

pub struct Allreduce;

impl Collective for Allreduce {
    fn name(&self) -> &'static str {
        "allreduce"
    }

    fn counts(&self, whole: u64, _world: u64) -> Counts {
        Counts {
            send: whole,
            recv: whole,
            count: whole,
        }
    }

    fn bus_factor(&self, world: usize) -> f64 {
        let n = world as f64;
        2.0 * (n - 1.0) / n
    }

    fn algos(&self) -> &'static [Algo] {
        &[Algo::RecursiveDoubling, Algo::Ring]
    }

    fn expected(&self, _rank: usize, world: usize, _shape: &Shape, p: &Params, i: usize) -> f32 {
        reduced_value(p.redop, world, i)
    }

    fn run_tcp(
        &self,
        comm: &Comm,
        algo: Algo,
        p: &Params,
        send: &[u8],
        recv: &mut [u8],
        scratch: &mut Scratch,
    ) -> Result<(), CommError> {
        recv.copy_from_slice(send);
        if comm.world == 1 {
            return Ok(());
        }
        match algo {
            Algo::Ring => ring(comm, p, recv, &mut scratch.staging),
            _ => recursive_doubling(comm, p, recv, scratch),
        }
    }

    fn run_nccl(&self, call: &NcclCall) -> Result<(), String> {
        call.all_reduce(call.shape.count as usize)
    }
}

fn ring(comm: &Comm, p: &Params, buf: &mut [u8], scratch: &mut Vec<u8>) -> Result<(), CommError> {
    let n = comm.world;
    let r = comm.rank;
    let chunks = split(buf.len() / p.dtype.size(), n);
    let chunk = |i: usize| bytes_of(&chunks[i % n], p.dtype);
    // Reduce-scatter: after n-1 steps this rank holds the full reduction of chunk r+1.
    for step in 0..n - 1 {
        let out = chunk(r + n - step);
        let into = chunk(r + n - step - 1);
        let (out, acc) = split_pair(buf, out, into);
        send_recv_reduce(comm, p, comm.right(), out, comm.left(), acc, scratch)?;
    }
    // Allgather: pass the reduced chunks around the ring.
    for step in 0..n - 1 {
        let out = chunk(r + 1 + n - step);
        let into = chunk(r + n - step);
        let (out, into) = split_pair(buf, out, into);
        comm.ring_shift(out, into)?;
    }
    Ok(())
}

fn recursive_doubling(
    comm: &Comm,
    p: &Params,
    buf: &mut [u8],
    scratch: &mut Scratch,
) -> Result<(), CommError> {
    let n = comm.world;
    let r = comm.rank;
    let pow2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let extra = n - pow2;
    // Fold: among the first 2*extra ranks, each even one hands its data to the odd one above it
    // and waits; the others continue as `pow2` virtual ranks.
    let virtual_rank = if r < 2 * extra {
        if r.is_multiple_of(2) {
            comm.send(r + 1, buf)?;
            comm.recv(r + 1, buf)?;
            return Ok(());
        }
        let len = buf.len();
        let staging = &mut scratch.staging;
        if staging.len() < len {
            staging.resize(len, 0);
        }
        comm.recv(r - 1, &mut staging[..len])?;
        crate::dtype::reduce_into(p.dtype, p.redop, buf, &staging[..len]);
        r / 2
    } else {
        r - extra
    };
    let real = |v: usize| if v < extra { 2 * v + 1 } else { v + extra };
    let mut mask = 1;
    while mask < pow2 {
        let partner = real(virtual_rank ^ mask);
        // Whole-buffer exchange: the buffer is both what we send and what we reduce into, so
        // send a copy.
        let (staging, copy) = scratch.with_work_copy(buf);
        send_recv_reduce(comm, p, partner, copy, partner, buf, staging)?;
        mask <<= 1;
    }
    if r < 2 * extra {
        comm.send(r - 1, buf)?;
    }
    Ok(())
}
