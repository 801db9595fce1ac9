//! Broadcast: every rank ends with the root's buffer. busbw factor 1. Binomial tree (log2(n)
//! steps) for small messages; a pipelined chain (root -> root+1 -> ..., in 512 KiB segments so
//! every link is busy at once) for large ones.

use super::{Algo, Collective, Counts, Params, Scratch, Shape};
use crate::comm::{Comm, CommError, Recv, Send};
use crate::dtype::input_value;
use crate::nccl::call::NcclCall;

const SEGMENT_BYTES: usize = 512 << 10;

pub struct Broadcast;

impl Collective for Broadcast {
    fn name(&self) -> &'static str {
        "broadcast"
    }

    fn counts(&self, whole: u64, _world: u64) -> Counts {
        Counts {
            send: whole,
            recv: whole,
            count: whole,
        }
    }

    fn bus_factor(&self, _world: usize) -> f64 {
        1.0
    }

    fn rooted(&self) -> bool {
        true
    }

    fn algos(&self) -> &'static [Algo] {
        &[Algo::Tree, Algo::Ring]
    }

    fn expected(&self, _rank: usize, _world: usize, _shape: &Shape, p: &Params, i: usize) -> f32 {
        input_value(p.root, i)
    }

    fn run_tcp(
        &self,
        comm: &Comm,
        algo: Algo,
        p: &Params,
        send: &[u8],
        recv: &mut [u8],
        _scratch: &mut Scratch,
    ) -> Result<(), CommError> {
        run(comm, algo, p, send, recv)
    }

    fn run_nccl(&self, call: &NcclCall) -> Result<(), String> {
        call.broadcast(call.shape.count as usize)
    }
}

fn run(
    comm: &Comm,
    algo: Algo,
    p: &Params,
    send: &[u8],
    recv: &mut [u8],
) -> Result<(), CommError> {
    let n = comm.world;
    let root = p.root;
    // Ranks relative to the root: the root is 0.
    let me = (comm.rank + n - root) % n;
    let real = |v: usize| (v + root) % n;
    if me == 0 {
        recv.copy_from_slice(send);
    }
    if n == 1 {
        return Ok(());
    }
    match algo {
        Algo::Ring => {
            let segments: Vec<std::ops::Range<usize>> =
                (0..recv.len().div_ceil(SEGMENT_BYTES).max(1))
                    .map(|k| k * SEGMENT_BYTES..((k + 1) * SEGMENT_BYTES).min(recv.len()))
                    .collect();
            let last = me == n - 1;
            // Step k: forward segment k-1 to the next rank while receiving segment k.
            for k in 0..=segments.len() {
                let forward = (!last && k >= 1).then(|| segments[k - 1].clone());
                let receive = (me != 0 && k < segments.len()).then(|| segments[k].clone());
                match (forward, receive) {
                    (Some(f), Some(g)) => {
                        let (out, into) = super::split_pair(recv, f, g);
                        comm.exchange(
                            &[Send {
                                peer: real(me + 1),
                                data: out,
                            }],
                            &mut [Recv {
                                peer: real(me - 1),
                                data: into,
                            }],
                        )?;
                    }
                    (Some(f), None) => comm.send(real(me + 1), &recv[f])?,
                    (None, Some(g)) => comm.recv(real(me - 1), &mut recv[g])?,
                    (None, None) => {}
                }
            }
            Ok(())
        }
        _ => {
            // Binomial tree: receive from the parent (clear the lowest set bit), then send to
            // children me + 2^k for every 2^k below that bit.
            let mut mask = 1;
            while mask < n {
                if me & mask != 0 {
                    comm.recv(real(me - mask), recv)?;
                    break;
                }
                mask <<= 1;
            }
            mask >>= 1;
            while mask > 0 {
                if me + mask < n {
                    comm.send(real(me + mask), recv)?;
                }
                mask >>= 1;
            }
            Ok(())
        }
    }
}
