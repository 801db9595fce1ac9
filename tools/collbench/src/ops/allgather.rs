//! Allgather: every rank ends with all ranks' blocks, in rank order. busbw factor (n-1)/n over
//! the whole gathered array. Ring (n-1 steps, one block each) for large messages; direct (every
//! block to every rank at once) for small ones.

use super::{Algo, Collective, Counts, Params, Scratch, Shape, per_rank};
use crate::comm::{Comm, CommError, Recv, Send};
use crate::dtype::input_value;
use crate::nccl::call::NcclCall;

pub struct Allgather;

impl Collective for Allgather {
    fn name(&self) -> &'static str {
        "allgather"
    }

    fn counts(&self, whole: u64, world: u64) -> Counts {
        let block = per_rank(whole, world);
        Counts {
            send: block,
            recv: block * world,
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

    // Each rank's block holds the elements of its place in the gathered array.
    fn input(&self, rank: usize, shape: &Shape, i: usize) -> f32 {
        input_value(rank, rank * shape.send_elems + i)
    }

    fn expected(&self, _rank: usize, _world: usize, shape: &Shape, _p: &Params, i: usize) -> f32 {
        input_value(i / shape.send_elems, i)
    }

    fn run_tcp(
        &self,
        comm: &Comm,
        algo: Algo,
        _p: &Params,
        send: &[u8],
        recv: &mut [u8],
        _scratch: &mut Scratch,
    ) -> Result<(), CommError> {
        run(comm, algo, send, recv)
    }

    fn run_nccl(&self, call: &NcclCall) -> Result<(), String> {
        call.all_gather(call.shape.send_elems)
    }
}

fn run(comm: &Comm, algo: Algo, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
    let n = comm.world;
    let r = comm.rank;
    let block = send.len();
    recv[r * block..(r + 1) * block].copy_from_slice(send);
    if n == 1 {
        return Ok(());
    }
    match algo {
        Algo::Ring => {
            for step in 0..n - 1 {
                let out = (r + n - step) % n;
                let into = (r + n - step - 1) % n;
                let (out, into) = super::split_pair(
                    recv,
                    out * block..(out + 1) * block,
                    into * block..(into + 1) * block,
                );
                comm.ring_shift(out, into)?;
            }
            Ok(())
        }
        _ => {
            let sends: Vec<Send> = (0..n)
                .filter(|&p| p != r)
                .map(|peer| Send { peer, data: send })
                .collect();
            let mut recvs: Vec<Recv> = recv
                .chunks_mut(block)
                .enumerate()
                .filter(|(p, _)| *p != r)
                .map(|(peer, data)| Recv { peer, data })
                .collect();
            comm.exchange(&sends, &mut recvs)
        }
    }
}
