//! Alltoall: block d of rank r's buffer goes to rank d, landing as block r there. busbw factor
//! (n-1)/n over the whole array. Direct (all blocks at once) for small messages; pairwise
//! (step k: send to r+k, receive from r-k) for large ones.

use super::{Algo, Collective, Counts, Params, Scratch, Shape, per_rank};
use crate::comm::{Comm, CommError, Recv, Send};
use crate::dtype::input_value;
use crate::nccl::call::NcclCall;

pub struct Alltoall;

impl Collective for Alltoall {
    fn name(&self) -> &'static str {
        "alltoall"
    }

    fn counts(&self, whole: u64, world: u64) -> Counts {
        let all = per_rank(whole, world) * world;
        Counts {
            send: all,
            recv: all,
            count: all,
        }
    }

    fn bus_factor(&self, world: usize) -> f64 {
        let n = world as f64;
        (n - 1.0) / n
    }

    fn algos(&self) -> &'static [Algo] {
        &[Algo::Direct, Algo::Pairwise]
    }

    // Block s of the result is block `rank` of rank s's input.
    fn expected(&self, rank: usize, world: usize, shape: &Shape, _p: &Params, i: usize) -> f32 {
        let block = shape.recv_elems / world;
        input_value(i / block, rank * block + i % block)
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

    // NCCL has no alltoall: one send and one receive per peer in a group, as nccl-tests does.
    fn run_nccl(&self, call: &NcclCall) -> Result<(), String> {
        let block = call.shape.send_elems / call.world;
        call.group(|c| {
            for peer in 0..c.world {
                c.send(peer * block, block, peer)?;
                c.recv(peer * block, block, peer)?;
            }
            Ok(())
        })
    }
}

fn run(comm: &Comm, algo: Algo, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
    let n = comm.world;
    let r = comm.rank;
    let block = send.len() / n;
    let range = |b: usize| b * block..(b + 1) * block;
    recv[range(r)].copy_from_slice(&send[range(r)]);
    if n == 1 {
        return Ok(());
    }
    match algo {
        Algo::Pairwise => {
            for k in 1..n {
                let to = (r + k) % n;
                let from = (r + n - k) % n;
                comm.exchange(
                    &[Send {
                        peer: to,
                        data: &send[range(to)],
                    }],
                    &mut [Recv {
                        peer: from,
                        data: &mut recv[range(from)],
                    }],
                )?;
            }
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
            let mut recvs: Vec<Recv> = recv
                .chunks_mut(block)
                .take(n)
                .enumerate()
                .filter(|(s, _)| *s != r)
                .map(|(peer, data)| Recv { peer, data })
                .collect();
            comm.exchange(&sends, &mut recvs)
        }
    }
}
