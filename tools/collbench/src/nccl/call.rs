//! The NCCL calls the collectives make, checked against their buffers so that the ops need no
//! `unsafe`; apart from the backend (`nccl/mod.rs`) so that the ops, which call these, and the
//! backend, which runs the ops, do not import each other.

use crate::dtype::{Dtype, RedOp};
use crate::shape::{Params, Shape};
use cudarc::driver::CudaStream;
use cudarc::nccl::{result, sys};
use std::ffi::c_void;

fn nccl_dtype(d: Dtype) -> sys::ncclDataType_t {
    match d {
        Dtype::F32 => sys::ncclDataType_t::ncclFloat32,
        Dtype::F16 => sys::ncclDataType_t::ncclFloat16,
        Dtype::Bf16 => sys::ncclDataType_t::ncclBfloat16,
    }
}

fn nccl_op(op: RedOp) -> sys::ncclRedOp_t {
    match op {
        RedOp::Sum => sys::ncclRedOp_t::ncclSum,
        RedOp::Max => sys::ncclRedOp_t::ncclMax,
        RedOp::Min => sys::ncclRedOp_t::ncclMin,
    }
}

pub(super) fn nccl_err(what: &str) -> impl Fn(result::NcclError) -> String + '_ {
    // NcclError is Debug only and prints nothing useful: name the call, give the code.
    move |e| format!("{what} failed: NCCL error {:?}", e.0)
}

/// One GPU's communicator; destroyed (aborted) on drop.
pub(super) struct NcclComm(pub(super) sys::ncclComm_t);

impl Drop for NcclComm {
    fn drop(&mut self) {
        // SAFETY: the communicator was created by comm_init_rank and is dropped once.
        unsafe {
            let _ = result::comm_abort(self.0);
        }
    }
}

/// One GPU's side of one collective call: its communicator, stream and buffers. Its methods are
/// the NCCL calls an op makes (`Collective::run_nccl`), each checked against the buffers' sizes,
/// so the ops need no `unsafe`.
pub struct NcclCall<'a> {
    /// This GPU's rank among all GPUs of the job.
    pub rank: usize,
    /// GPUs in the job.
    pub world: usize,
    pub shape: &'a Shape,
    pub params: &'a Params,
    comm: sys::ncclComm_t,
    stream: sys::cudaStream_t,
    send: u64,
    recv: u64,
}

impl<'a> NcclCall<'a> {
    /// `buffers` (send, recv) must be live device allocations of `shape`'s sizes on `nccl`'s
    /// device while the call is used (the caller holds their pointer guards).
    pub(super) fn new(
        nccl: &'a NcclComm,
        stream: &CudaStream,
        shape: &'a Shape,
        params: &'a Params,
        (rank, world): (usize, usize),
        (send, recv): (u64, u64),
    ) -> Self {
        NcclCall {
            rank,
            world,
            shape,
            params,
            comm: nccl.0,
            stream: stream.cu_stream() as sys::cudaStream_t,
            send,
            recv,
        }
    }

    fn dtype(&self) -> sys::ncclDataType_t {
        nccl_dtype(self.params.dtype)
    }

    fn redop(&self) -> sys::ncclRedOp_t {
        nccl_op(self.params.redop)
    }

    /// The device address of element `offset` of a buffer of `len` elements, if `count`
    /// elements from there fit in it.
    fn at(
        &self,
        base: u64,
        len: usize,
        offset: usize,
        count: usize,
        what: &str,
    ) -> Result<u64, String> {
        if offset + count > len {
            return Err(format!(
                "{what}: {count} elements at {offset} do not fit the {len}-element buffer"
            ));
        }
        Ok(base + (offset * self.params.dtype.size()) as u64)
    }

    fn send_at(&self, offset: usize, count: usize, what: &str) -> Result<*const c_void, String> {
        Ok(self.at(self.send, self.shape.send_elems, offset, count, what)? as *const c_void)
    }

    fn recv_at(&self, offset: usize, count: usize, what: &str) -> Result<*mut c_void, String> {
        Ok(self.at(self.recv, self.shape.recv_elems, offset, count, what)? as *mut c_void)
    }

    /// ncclAllReduce of `count` elements.
    pub fn all_reduce(&self, count: usize) -> Result<(), String> {
        let what = "ncclAllReduce";
        let (sp, rp) = (self.send_at(0, count, what)?, self.recv_at(0, count, what)?);
        // SAFETY: both ranges lie in live device buffers (checked above, guaranteed by `new`'s
        // caller); the stream belongs to the communicator's context.
        unsafe {
            result::all_reduce(
                sp,
                rp,
                count,
                self.dtype(),
                self.redop(),
                self.comm,
                self.stream,
            )
        }
        .map(drop)
        .map_err(nccl_err(what))
    }

    /// ncclAllGather of `send_count` elements from each rank.
    pub fn all_gather(&self, send_count: usize) -> Result<(), String> {
        let what = "ncclAllGather";
        let sp = self.send_at(0, send_count, what)?;
        let rp = self.recv_at(0, send_count * self.world, what)?;
        // SAFETY: as in all_reduce.
        unsafe { result::all_gather(sp, rp, send_count, self.dtype(), self.comm, self.stream) }
            .map(drop)
            .map_err(nccl_err(what))
    }

    /// ncclReduceScatter, `recv_count` elements to each rank.
    pub fn reduce_scatter(&self, recv_count: usize) -> Result<(), String> {
        let what = "ncclReduceScatter";
        let sp = self.send_at(0, recv_count * self.world, what)?;
        let rp = self.recv_at(0, recv_count, what)?;
        // SAFETY: as in all_reduce.
        unsafe {
            result::reduce_scatter(
                sp,
                rp,
                recv_count,
                self.dtype(),
                self.redop(),
                self.comm,
                self.stream,
            )
        }
        .map(drop)
        .map_err(nccl_err(what))
    }

    /// ncclBroadcast of `count` elements from the root (`--root`).
    pub fn broadcast(&self, count: usize) -> Result<(), String> {
        let what = "ncclBroadcast";
        let (sp, rp) = (self.send_at(0, count, what)?, self.recv_at(0, count, what)?);
        let root = self.params.root as i32;
        // SAFETY: as in all_reduce.
        unsafe { result::broadcast(sp, rp, count, self.dtype(), root, self.comm, self.stream) }
            .map(drop)
            .map_err(nccl_err(what))
    }

    /// ncclSend of `count` elements of the send buffer from element `offset`, to `peer`.
    pub fn send(&self, offset: usize, count: usize, peer: usize) -> Result<(), String> {
        let what = "ncclSend";
        let sp = self.send_at(offset, count, what)?;
        // SAFETY: as in all_reduce.
        unsafe { result::send(sp, count, self.dtype(), peer as i32, self.comm, self.stream) }
            .map(drop)
            .map_err(nccl_err(what))
    }

    /// ncclRecv of `count` elements into the receive buffer at element `offset`, from `peer`.
    pub fn recv(&self, offset: usize, count: usize, peer: usize) -> Result<(), String> {
        let what = "ncclRecv";
        let rp = self.recv_at(offset, count, what)?;
        // SAFETY: as in all_reduce.
        unsafe { result::recv(rp, count, self.dtype(), peer as i32, self.comm, self.stream) }
            .map(drop)
            .map_err(nccl_err(what))
    }

    /// Runs `calls` between ncclGroupStart and ncclGroupEnd, so NCCL issues them as one.
    pub fn group(&self, calls: impl FnOnce(&Self) -> Result<(), String>) -> Result<(), String> {
        result::group_start().map_err(nccl_err("ncclGroupStart"))?;
        let inner = calls(self);
        // The group is closed even when a call in it failed; the first error is the one reported.
        let end = result::group_end()
            .map(drop)
            .map_err(nccl_err("ncclGroupEnd"));
        inner.and(end)
    }
}
