//! Reduce-scatter: rank r ends with block r of the element-wise reduction of all ranks'
//! buffers. busbw factor (n-1)/n over the whole input array. Ring (n-1 steps, reducing one block
//! each) for large messages; direct (each block straight to its owner, reduced there in rank
//! order) for small ones.

use super::{Algo, Collective, Counts, Params, Scratch, Shape, per_rank, send_recv_reduce, split_pair};
use crate::comm::{Comm, CommError, Recv, Send};
use crate::dtype::{reduce_into, reduced_value};
use crate::nccl::call::NcclCall;

pub struct ReduceScatter;

impl Collective for ReduceScatter {
    fn name(&self) -> &'static str {
        "reduce_scatter"
    }

    fn flag(&self) -> &'static str {
        "reduce-scatter"
    }

    fn counts(&self, whole: u64, world: u64) -> Counts {
        let block = per_rank(whole, world);
        Counts {
            send: block * world,
            recv: block,
            count: block * world,
        }
    }

    fn bus_factor(&self, world: usize) -> f64 {
        let n = world as f64;
        (n - 1.0) / n
    }

    fn algos(&self) -> &'static [Algo] {
        &[Algo::Direct, Algo::Ring]
    }

    fn expected(&self, rank: usize, world: usize, shape: &Shape, p: &Params, i: usize) -> f32 {
        reduced_value(p.redop, world, rank * shape.recv_elems + i)
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
        run(comm, algo, p, send, recv, scratch)
    }

    fn run_nccl(&self, call: &NcclCall) -> Result<(), String> {
        call.reduce_scatter(call.shape.recv_elems)
    }
}

fn run(
    comm: &Comm,
    algo: Algo,
    p: &Params,
    send: &[u8],
    recv: &mut [u8],
    scratch: &mut Scratch,
) -> Result<(), CommError> {
    let n = comm.world;
    let r = comm.rank;
    let block = recv.len();
    let range = |b: usize| (b % n) * block..(b % n + 1) * block;
    if n == 1 {
        recv.copy_from_slice(send);
        return Ok(());
    }
    match algo {
        Algo::Ring => {
            let (staging, work) = scratch.with_work_copy(send);
            // After step s this rank has reduced s+2 contributions of block r-s-2; the last
            // step lands on block r.
            for step in 0..n - 1 {
                let (out, acc) = split_pair(
                    work,
                    range(r + 2 * n - step - 1),
                    range(r + 2 * n - step - 2),
                );
                send_recv_reduce(comm, p, comm.right(), out, comm.left(), acc, staging)?;
            }
            recv.copy_from_slice(&work[range(r)]);
            Ok(())
        }
        _ => {
            let sends: Vec<Send> = (0..n)
                .filter(|&d| d != r)
                .map(|peer| Send {
                    peer,
                    data: &send[range(peer)],
                })
                .collect();
            let staging = &mut scratch.staging;
            if staging.len() < block * n {
                staging.resize(block * n, 0);
            }
            let incoming = &mut staging[..block * n];
            {
                let mut recvs: Vec<Recv> = incoming
                    .chunks_mut(block.max(1))
                    .take(n)
                    .enumerate()
                    .filter(|(s, _)| *s != r)
                    .map(|(peer, data)| Recv { peer, data })
                    .collect();
                comm.exchange(&sends, &mut recvs)?;
            }
            incoming[range(r)].copy_from_slice(&send[range(r)]);
            // Reduce in rank order so every element sees the same order on every backend.
            recv.copy_from_slice(&incoming[range(0)]);
            for s in 1..n {
                reduce_into(p.dtype, p.redop, recv, &incoming[range(s)]);
            }
            Ok(())
        }
    }
}
