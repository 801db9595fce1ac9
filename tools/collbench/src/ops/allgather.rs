//! Allgather: every rank ends with all ranks' blocks, in rank order. busbw factor (n-1)/n over
//! the whole gathered array. Ring (n-1 steps, one block each) for large messages; direct (every
//! block to every rank at once) for small ones.

use super::Algo;
use crate::comm::{Comm, CommError, Recv, Send};

pub fn run(comm: &Comm, algo: Algo, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
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
