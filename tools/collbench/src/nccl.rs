//! The nccl backend: NCCL and the CUDA driver loaded at run time through cudarc, so collbench
//! builds and runs on machines without CUDA and says what is missing when asked for GPUs.
//!
//! Layout as nccl-tests: one thread per local GPU (`-g N`), each with its own communicator
//! (`ncclCommInitRank`); several processes (`-np`, `--hosts`, mpirun) share one NCCL job, the
//! unique id shipped from rank 0 over the tcp bootstrap. Times come from CUDA events on each
//! GPU's stream. Buffers live on the GPUs; inputs and the exact check use the same values as
//! the tcp backend (filled on the host, copied over).
//!
//! Unverified without a GPU on the build machine: everything past the library check.

use crate::comm::Comm;
use crate::culibs::{self, Lib};
use crate::dtype::{Dtype, RedOp};
use crate::harness::{self, Measured, Mode, RunConfig};
use crate::ops::{Params, Shape};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nccl::{result, sys};
use servbench::cli;
use std::ffi::c_void;
use std::sync::{Arc, Barrier, mpsc};

/// Finds libcuda and libnccl as cudarc will load them: the line saying which files and
/// versions, or exit 2 with every file name looked for and the fix (cudarc would panic at the
/// first call otherwise).
pub fn check_libraries() -> anyhow::Result<String> {
    culibs::load(&[Lib::Driver, Lib::Nccl], "--backend nccl", &|lib| {
        match lib {
        Lib::Nccl if Lib::Nccl.candidates().iter().all(|n| n != "libnccl.so.2") && dlopen_works("libnccl.so.2") => {
            "libnccl.so.2 is there but cudarc does not try that name: make a directory with \
             `ln -s /path/to/libnccl.so.2 DIR/libnccl.so` and put DIR on LD_LIBRARY_PATH; --backend tcp needs none"
                .into()
        }
        Lib::Nccl => "install libnccl-dev (it provides libnccl.so), or with pip's nvidia-nccl-cu13 (or -cu12) make a directory with \
             `ln -s .../site-packages/nvidia/nccl/lib/libnccl.so.2 DIR/libnccl.so` and put DIR on LD_LIBRARY_PATH; --backend tcp needs none"
            .into(),
        _ => "no NVIDIA driver here, or its directory is not on LD_LIBRARY_PATH; --backend tcp needs none".into(),
    }
    })
}

fn dlopen_works(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: dlopen with a valid C string; the handle is closed at once.
    unsafe {
        let handle = libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if handle.is_null() {
            false
        } else {
            libc::dlclose(handle);
            true
        }
    }
}

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

fn nccl_err(what: &str) -> impl Fn(result::NcclError) -> String + '_ {
    // NcclError is Debug only and prints nothing useful: name the call, give the code.
    move |e| format!("{what} failed: NCCL error {:?}", e.0)
}

fn cuda_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> String + '_ {
    move |e| format!("{what} failed: {e:?}")
}

/// One GPU's communicator; destroyed (aborted) on drop.
struct NcclComm(sys::ncclComm_t);

impl Drop for NcclComm {
    fn drop(&mut self) {
        // SAFETY: the communicator was created by comm_init_rank and is dropped once.
        unsafe {
            let _ = result::comm_abort(self.0);
        }
    }
}

/// Index of this process among those on its host: collbench's own `-np` variable, else the
/// launcher's (servbench::ranks::local_rank).
fn local_process_index() -> usize {
    std::env::var("COLLBENCH_LOCAL_RANK")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .or_else(|| servbench::ranks::local_rank(|v| std::env::var(v).ok()).map(|(i, _)| i))
        .unwrap_or(0)
}

/// Per-size result of one GPU thread.
struct GpuResult {
    samples_us: Vec<f64>,
    wrong: u64,
}

/// Runs the sweep with `gpus` GPUs in this process (`comm` connects the processes), handing
/// each size's result to `each` (on every process; rank 0's figures are GPU 0's).
pub fn sweep(
    comm: &Comm,
    cfg: &RunConfig,
    gpus: usize,
    mut each: impl FnMut(Measured) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let available = CudaContext::device_count()
        .map_err(|e| cli::failure(format!("no usable CUDA device: {e:?}")))?;
    let first = local_process_index() * gpus;
    if gpus == 0 || first + gpus > available as usize {
        return Err(cli::usage(format!(
            "-g {gpus} from GPU {first} needs {} GPUs, this host has {available}",
            first + gpus
        )));
    }
    let world = comm.world * gpus;
    let mut id_bytes = [0u8; 128];
    if comm.rank == 0 {
        let id =
            result::get_uniqueid().map_err(|e| cli::failure(nccl_err("ncclGetUniqueId")(e)))?;
        for (b, c) in id_bytes.iter_mut().zip(id.internal.iter()) {
            *b = *c as u8;
        }
    }
    comm.broadcast_small(0, &mut id_bytes)
        .map_err(|e| cli::failure(format!("sharing the NCCL id: {e}")))?;
    let mut internal = [0 as std::ffi::c_char; 128];
    for (c, b) in internal.iter_mut().zip(id_bytes) {
        *c = b as std::ffi::c_char;
    }
    let id = sys::ncclUniqueId { internal };

    let barrier = Arc::new(Barrier::new(gpus));
    let mut receivers = Vec::new();
    for local in 0..gpus {
        let (tx, rx) = mpsc::channel::<Result<GpuResult, String>>();
        receivers.push(rx);
        let cfg = cfg.clone();
        let barrier = barrier.clone();
        let rank = comm.rank * gpus + local;
        // Detached: on an error the process exits without waiting for GPUs stuck in NCCL.
        std::thread::spawn(move || {
            if let Err(e) = gpu_thread(&cfg, first + local, rank, world, id, &barrier, &tx) {
                let _ = tx.send(Err(format!("GPU {} (rank {rank}): {e}", first + local)));
            }
        });
    }
    for &size in &cfg.sizes {
        let mut results = Vec::with_capacity(gpus);
        for rx in &receivers {
            match rx.recv() {
                Ok(Ok(r)) => results.push(r),
                Ok(Err(e)) => return Err(cli::failure(e)),
                Err(_) => return Err(cli::failure("a GPU thread ended early")),
            }
        }
        let local_wrong: u64 = results.iter().map(|r| r.wrong).sum();
        let totals = comm
            .sum_f64(&[local_wrong as f64])
            .map_err(|e| cli::failure(format!("collecting results: {e}")))?;
        each(Measured {
            shape: cfg.op.shape(size, cfg.dtype, world),
            algo: "nccl",
            samples_us: std::mem::take(&mut results[0].samples_us),
            wrong: totals[0] as u64,
        })?;
    }
    Ok(())
}

fn gpu_thread(
    cfg: &RunConfig,
    device: usize,
    rank: usize,
    world: usize,
    id: sys::ncclUniqueId,
    barrier: &Barrier,
    tx: &mpsc::Sender<Result<GpuResult, String>>,
) -> Result<(), String> {
    let ctx = CudaContext::new(device).map_err(cuda_err("cuCtxCreate"))?;
    let stream = ctx.default_stream();
    let mut raw = std::ptr::null_mut();
    // SAFETY: raw is a valid out-pointer; every rank calls this with the same id and world.
    unsafe { result::comm_init_rank(&mut raw, world as i32, id, rank as i32) }
        .map_err(nccl_err("ncclCommInitRank"))?;
    let nccl = NcclComm(raw);
    let p = cfg.params();
    for &size in &cfg.sizes {
        let shape = cfg.op.shape(size, cfg.dtype, world);
        let esz = cfg.dtype.size();
        let mut host_send =
            crate::harness::buffer(shape.send_elems, esz, "send").map_err(|e| format!("{e:#}"))?;
        cfg.op.fill(rank, &shape, &p, &mut host_send);
        let send = stream
            .clone_htod(&host_send)
            .map_err(cuda_err("copy to GPU"))?;
        let mut recv = stream
            .alloc_zeros::<u8>(shape.recv_elems * esz)
            .map_err(cuda_err("cuMemAlloc"))?;
        let samples_us;
        {
            let (send_ptr, _s) = send.device_ptr(&stream);
            let (recv_ptr, _r) = recv.device_ptr_mut(&stream);
            let call = NcclCall::new(
                &nccl,
                &stream,
                &shape,
                &p,
                (rank, world),
                (send_ptr, recv_ptr),
            );
            let launch = || cfg.op.run_nccl(&call);
            for _ in 0..cfg.warmup {
                launch()?;
            }
            stream.synchronize().map_err(cuda_err("warmup"))?;
            barrier.wait();
            let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
            let mut times = Vec::with_capacity(cfg.iters as usize);
            match cfg.mode {
                Mode::Pipelined => {
                    let events: Vec<_> = (0..=cfg.iters)
                        .map(|_| ctx.new_event(timing))
                        .collect::<Result<_, _>>()
                        .map_err(cuda_err("cuEventCreate"))?;
                    events[0]
                        .record(&stream)
                        .map_err(cuda_err("cuEventRecord"))?;
                    for e in &events[1..] {
                        launch()?;
                        e.record(&stream).map_err(cuda_err("cuEventRecord"))?;
                    }
                    stream
                        .synchronize()
                        .map_err(cuda_err("cuStreamSynchronize"))?;
                    for w in events.windows(2) {
                        times.push(
                            f64::from(
                                w[0].elapsed_ms(&w[1])
                                    .map_err(cuda_err("cuEventElapsedTime"))?,
                            ) * 1e3,
                        );
                    }
                }
                Mode::Latency => {
                    for _ in 0..cfg.iters {
                        barrier.wait();
                        let start = stream
                            .record_event(timing)
                            .map_err(cuda_err("cuEventRecord"))?;
                        launch()?;
                        let end = stream
                            .record_event(timing)
                            .map_err(cuda_err("cuEventRecord"))?;
                        stream
                            .synchronize()
                            .map_err(cuda_err("cuStreamSynchronize"))?;
                        times.push(
                            f64::from(
                                start
                                    .elapsed_ms(&end)
                                    .map_err(cuda_err("cuEventElapsedTime"))?,
                            ) * 1e3,
                        );
                    }
                }
            }
            samples_us = times;
        }
        let mut wrong = 0;
        if cfg.check {
            stream
                .memcpy_htod(&vec![0xffu8; shape.recv_elems * esz], &mut recv)
                .map_err(cuda_err("poison"))?;
            {
                let (send_ptr, _s) = send.device_ptr(&stream);
                let (recv_ptr, _r) = recv.device_ptr_mut(&stream);
                let call = NcclCall::new(
                    &nccl,
                    &stream,
                    &shape,
                    &p,
                    (rank, world),
                    (send_ptr, recv_ptr),
                );
                cfg.op.run_nccl(&call)?;
            }
            let host = stream
                .clone_dtoh(&recv)
                .map_err(cuda_err("copy from GPU"))?;
            wrong = harness::count_wrong(cfg.op, rank, world, &shape, &p, &host);
        }
        if tx.send(Ok(GpuResult { samples_us, wrong })).is_err() {
            return Ok(());
        }
    }
    Ok(())
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
    fn new(
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
