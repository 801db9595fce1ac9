//! Alltoall: block d of rank r's buffer goes to rank d, landing as block r there. busbw factor
//! (n-1)/n over the whole array. Direct (all blocks at once) for small messages; pairwise
//! (step k: send to r+k, receive from r-k) for large ones.

use super::Algo;
use crate::comm::{Comm, CommError, Recv, Send};

pub fn run(comm: &Comm, algo: Algo, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
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
