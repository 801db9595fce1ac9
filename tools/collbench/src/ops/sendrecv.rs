//! Send/recv (nccl-tests' sendrecv): every rank sends its buffer to rank r+1 while receiving
//! rank r-1's. busbw factor 1.

use super::{Algo, Collective, Counts, Params, Scratch, Shape};
use crate::comm::{Comm, CommError};
use crate::dtype::input_value;
use crate::nccl::call::NcclCall;

pub struct Sendrecv;

impl Collective for Sendrecv {
    fn name(&self) -> &'static str {
        "sendrecv"
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

    fn algos(&self) -> &'static [Algo] {
        &[Algo::Direct]
    }

    fn expected(&self, rank: usize, world: usize, _shape: &Shape, _p: &Params, i: usize) -> f32 {
        input_value((rank + world - 1) % world, i)
    }

    fn run_tcp(
        &self,
        comm: &Comm,
        _algo: Algo,
        _p: &Params,
        send: &[u8],
        recv: &mut [u8],
        _scratch: &mut Scratch,
    ) -> Result<(), CommError> {
        if comm.world == 1 {
            recv.copy_from_slice(send);
            return Ok(());
        }
        comm.ring_shift(send, recv)
    }

    fn run_nccl(&self, call: &NcclCall) -> Result<(), String> {
        let (rank, world) = (call.rank, call.world);
        call.group(|c| {
            c.send(0, c.shape.send_elems, (rank + 1) % world)?;
            c.recv(0, c.shape.recv_elems, (rank + world - 1) % world)
        })
    }
}
