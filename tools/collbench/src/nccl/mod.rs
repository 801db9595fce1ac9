//! The nccl backend: NCCL and the CUDA driver loaded at run time through cudarc, so collbench
//! builds and runs on machines without CUDA and says what is missing when asked for GPUs.
//!
//! Layout as nccl-tests: one thread per local GPU (`-g N`), each with its own communicator
//! (`ncclCommInitRank`); several processes (`-np`, `--hosts`, mpirun) share one NCCL job, the
//! unique id shipped from rank 0 over the tcp bootstrap. Times come from CUDA events on each
//! GPU's stream, through the one measure loop (`measure.rs`). Buffers live on the GPUs; inputs
//! and the exact check use the same values as the tcp backend (filled on the host, copied over).
//!
//! Unverified without a GPU on the build machine: everything past the library check.

pub mod call;
pub mod p2p;
pub mod p2p_run;

use crate::comm::Comm;
use crate::culibs::{self, Lib};
use crate::harness::{self, Measured, RunConfig};
use crate::measure::{Runner, Sampled, measure};
use crate::ops::{Op, Params, Shape};
use call::{NcclCall, NcclComm, nccl_err};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nccl::{result, sys};
use servbench::cli;
use std::sync::{Arc, Barrier, mpsc};

/// Finds libcuda and libnccl as cudarc will load them: the line saying which files and
/// versions, or exit 2 with every file name looked for and the fix (cudarc would panic at the
/// first call otherwise).
pub fn check_libraries() -> anyhow::Result<String> {
    check_libraries_for("--backend nccl", &[Lib::Driver, Lib::Nccl])
}

/// [`check_libraries`] for `libs`, the line led by `flag` (`collbench p2p --backend nccl`).
pub fn check_libraries_for(flag: &str, libs: &[Lib]) -> anyhow::Result<String> {
    culibs::load(libs, flag, &|lib| {
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

fn cuda_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> String + '_ {
    move |e| format!("{what} failed: {e:?}")
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
        let (tx, rx) = mpsc::channel::<Result<Sampled, String>>();
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
            lost_core: 0,
        })?;
    }
    Ok(())
}

/// One GPU's thread: its communicator, then every size measured in step with the other GPUs,
/// each result sent to the process's sweep.
fn gpu_thread(
    cfg: &RunConfig,
    device: usize,
    rank: usize,
    world: usize,
    id: sys::ncclUniqueId,
    barrier: &Barrier,
    tx: &mpsc::Sender<Result<Sampled, String>>,
) -> Result<(), String> {
    let ctx = CudaContext::new(device).map_err(cuda_err("cuCtxCreate"))?;
    let stream = ctx.default_stream();
    let mut raw = std::ptr::null_mut();
    // SAFETY: raw is a valid out-pointer; every rank calls this with the same id and world.
    unsafe { result::comm_init_rank(&mut raw, world as i32, id, rank as i32) }
        .map_err(nccl_err("ncclCommInitRank"))?;
    let nccl = NcclComm(raw);
    let params = cfg.params();
    for &size in &cfg.sizes {
        let shape = cfg.op.shape(size, cfg.dtype, world);
        let esz = cfg.dtype.size();
        let mut host_send =
            harness::buffer(shape.send_elems, esz, "send").map_err(|e| format!("{e:#}"))?;
        cfg.op.fill(rank, &shape, &params, &mut host_send);
        let send = stream
            .clone_htod(&host_send)
            .map_err(cuda_err("copy to GPU"))?;
        let recv = stream
            .alloc_zeros::<u8>(shape.recv_elems * esz)
            .map_err(cuda_err("cuMemAlloc"))?;
        let mut gpu = GpuRun {
            op: cfg.op,
            ctx: &ctx,
            stream: &stream,
            nccl: &nccl,
            barrier,
            shape,
            params,
            rank,
            world,
            send,
            recv,
        };
        let sampled =
            measure(&mut gpu, cfg.iters, cfg.mode, cfg.check).map_err(|e| format!("{e:#}"))?;
        if tx.send(Ok(sampled)).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// One GPU's side of one size: the measure loop's [`Runner`] on CUDA events, the GPUs of this
/// process meeting at a thread barrier (NCCL itself keeps the processes in step).
struct GpuRun<'a> {
    op: Op,
    ctx: &'a Arc<CudaContext>,
    stream: &'a Arc<CudaStream>,
    nccl: &'a NcclComm,
    barrier: &'a Barrier,
    shape: Shape,
    params: Params,
    rank: usize,
    world: usize,
    send: CudaSlice<u8>,
    recv: CudaSlice<u8>,
}

impl Runner for GpuRun<'_> {
    type Mark = CudaEvent;

    fn run_once(&mut self) -> anyhow::Result<()> {
        // The pointer guards record nothing with one stream per context; they only keep the
        // buffers borrowed while the call is enqueued.
        let (send_ptr, _s) = self.send.device_ptr(self.stream);
        let (recv_ptr, _r) = self.recv.device_ptr_mut(self.stream);
        let call = NcclCall::new(
            self.nccl,
            self.stream,
            &self.shape,
            &self.params,
            (self.rank, self.world),
            (send_ptr, recv_ptr),
        );
        self.op.run_nccl(&call).map_err(anyhow::Error::msg)
    }

    fn sync(&mut self) -> anyhow::Result<()> {
        self.stream
            .synchronize()
            .map_err(cuda_err("cuStreamSynchronize"))
            .map_err(anyhow::Error::msg)
    }

    fn barrier(&mut self) -> anyhow::Result<()> {
        self.barrier.wait();
        Ok(())
    }

    fn new_mark(&mut self) -> anyhow::Result<CudaEvent> {
        self.ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda_err("cuEventCreate"))
            .map_err(anyhow::Error::msg)
    }

    fn record(&mut self, mark: &mut CudaEvent) -> anyhow::Result<()> {
        mark.record(self.stream)
            .map_err(cuda_err("cuEventRecord"))
            .map_err(anyhow::Error::msg)
    }

    fn elapsed_us(&mut self, from: &CudaEvent, to: &CudaEvent) -> anyhow::Result<f64> {
        let ms = from
            .elapsed_ms(to)
            .map_err(cuda_err("cuEventElapsedTime"))
            .map_err(anyhow::Error::msg)?;
        Ok(f64::from(ms) * 1e3)
    }

    fn count_wrong(&mut self) -> anyhow::Result<u64> {
        // Poison the output (all-ones bytes are NaN in every dtype) so a stale result cannot pass.
        self.stream
            .memcpy_htod(&vec![0xffu8; self.recv.len()], &mut self.recv)
            .map_err(cuda_err("poison"))
            .map_err(anyhow::Error::msg)?;
        self.run_once()?;
        let host = self
            .stream
            .clone_dtoh(&self.recv)
            .map_err(cuda_err("copy from GPU"))
            .map_err(anyhow::Error::msg)?;
        Ok(harness::count_wrong(
            self.op,
            self.rank,
            self.world,
            &self.shape,
            &self.params,
            &host,
        ))
    }
}
