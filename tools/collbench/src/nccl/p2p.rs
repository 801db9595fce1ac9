//! `collbench p2p --backend nccl`: every ordered pair of this process's GPUs (`-g N`), over
//! the copy engines (cuMemcpyPeerAsync, after cuDeviceCanAccessPeer / cuCtxEnablePeerAccess,
//! as nvbandwidth's and p2pBandwidthLatencyTest's copies) and over NCCL (ncclSend on one GPU,
//! ncclRecv on the other, grouped). Per pair and method: the bandwidth one way, both ways at
//! once, and the latency of an 8-byte message. Pairs run one at a time, so a pair's figures
//! are its own. Times are the host's clock around synchronized streams for the bandwidths (a
//! stream of `iters` copies amortizes the launch), CUDA events for the copy latency.
//!
//! Unverified without a GPU on the build machine: everything past the library check.

use super::call::nccl_err;
use crate::p2p::{Cell, LATENCY_BYTES, pairs};
use cudarc::driver::sys::{self as cu, CUevent_flags};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DriverError};
use cudarc::nccl::{result, sys};
use servbench::cli;
use servbench::record::P2pMethod;
use std::sync::Arc;
use std::time::Instant;

/// What one pair measured with one method.
#[derive(Debug, Clone)]
pub struct PairFigures {
    pub src: usize,
    pub dst: usize,
    pub method: P2pMethod,
    pub cell: Cell,
    /// Copy engine: whether direct peer access was possible (and enabled).
    pub peer_access: Option<bool>,
}

/// Which methods to run.
#[derive(Debug, Clone, Copy)]
pub struct Methods {
    pub copy_engine: bool,
    pub nccl: bool,
}

fn cu_err(what: &str) -> impl Fn(DriverError) -> String + '_ {
    move |e| format!("{what} failed: {e:?}")
}

/// One GPU: its context, stream and two buffers of the message size.
struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    send: CudaSlice<u8>,
    recv: CudaSlice<u8>,
}

impl Gpu {
    fn new(device: usize, bytes: usize) -> Result<Gpu, String> {
        let ctx = CudaContext::new(device).map_err(cu_err("cuCtxCreate"))?;
        // Streams are synchronized by hand around every phase; cudarc's own event tracking
        // would record this context's events on the other GPU's stream (a peer copy's), which
        // CUDA refuses (an event and its stream share a context).
        // SAFETY: called before this context's first allocation.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(cu_err("cuStreamCreate"))?;
        let send = stream
            .alloc_zeros::<u8>(bytes.max(LATENCY_BYTES as usize))
            .map_err(cu_err("cuMemAlloc"))?;
        let recv = stream
            .alloc_zeros::<u8>(bytes.max(LATENCY_BYTES as usize))
            .map_err(cu_err("cuMemAlloc"))?;
        Ok(Gpu {
            ctx,
            stream,
            send,
            recv,
        })
    }

    fn sync(&self) -> Result<(), String> {
        self.stream
            .synchronize()
            .map_err(cu_err("cuStreamSynchronize"))
    }

    /// The device's PCI bus id as the driver gives it (`0000:3B:00.0`).
    pub fn pci_bus_id(&self) -> Option<String> {
        let mut buf = [0 as std::ffi::c_char; 32];
        // SAFETY: the buffer is writable for its length; the device is this context's.
        let r = unsafe {
            cu::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, self.ctx.cu_device())
        };
        r.result().ok()?;
        // SAFETY: the driver wrote a NUL-terminated string within the buffer.
        let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        Some(s.to_string_lossy().into_owned())
    }
}

/// The GPUs `0..n` of this process, one message size each.
pub struct Bench {
    gpus: Vec<Gpu>,
    bytes: usize,
}

impl Bench {
    /// `-g n` GPUs with buffers of `bytes`: too few GPUs, or `-g` beyond them, is a usage
    /// error (exit 2); a GPU that cannot be set up (no context, no memory) is a failure (exit 1).
    pub fn open(who: &str, n: usize, bytes: u64) -> anyhow::Result<Bench> {
        let available = CudaContext::device_count()
            .map_err(|e| cli::failure(format!("{who}: {}", cu_err("cuDeviceGetCount")(e))))?
            as usize;
        if available < 2 {
            return Err(cli::usage(format!(
                "{who}: this host has {available} GPU(s): a pair needs two (run on a multi-GPU box)"
            )));
        }
        if !(2..=available).contains(&n) {
            return Err(cli::usage(format!(
                "{who}: -g {n}: give 2 to {available} (the GPUs this host has)"
            )));
        }
        let gpus = (0..n)
            .map(|d| {
                Gpu::new(d, bytes as usize)
                    .map_err(|e| cli::failure(format!("{who}: GPU {d}: {e}")))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Bench {
            gpus,
            bytes: bytes as usize,
        })
    }

    /// Each GPU's PCI bus id, in device order.
    pub fn bus_ids(&self) -> Vec<Option<String>> {
        self.gpus.iter().map(Gpu::pci_bus_id).collect()
    }

    /// Every ordered pair with each method asked for, in [`pairs`]' order, copy engine first;
    /// `each` is given every pair's figures as they are measured (written at once, so a pair
    /// that fails later, or a kill, loses none of those before it).
    pub fn run(
        &self,
        methods: Methods,
        warmup: u32,
        timed: u32,
        mut each: impl FnMut(&PairFigures) -> Result<(), String>,
    ) -> Result<Vec<PairFigures>, String> {
        let mut out = Vec::new();
        let mut keep = |f: PairFigures| -> Result<(), String> {
            each(&f)?;
            out.push(f);
            Ok(())
        };
        let comms = match methods.nccl {
            true => Some(Comms::init(self.gpus.len())?),
            false => None,
        };
        for (src, dst) in pairs(self.gpus.len()) {
            let at = |e: String| format!("p2p GPU {src} -> GPU {dst}: {e}");
            if methods.copy_engine {
                let access = self.enable_peer_access(src, dst).map_err(at)?;
                let cell = self.copy_engine(src, dst, warmup, timed).map_err(at)?;
                keep(PairFigures {
                    src,
                    dst,
                    method: P2pMethod::CopyEngine,
                    cell,
                    peer_access: Some(access),
                })?;
            }
            if let Some(c) = &comms {
                let cell = self.nccl(c, src, dst, warmup, timed).map_err(at)?;
                keep(PairFigures {
                    src,
                    dst,
                    method: P2pMethod::Nccl,
                    cell,
                    peer_access: None,
                })?;
            }
        }
        Ok(out)
    }

    /// Whether the two GPUs can reach each other's memory directly; enabled both ways when so.
    fn enable_peer_access(&self, a: usize, b: usize) -> Result<bool, String> {
        let (ga, gb) = (&self.gpus[a], &self.gpus[b]);
        let mut can = [0i32; 2];
        // SAFETY: out-pointers to our ints; devices of live contexts.
        unsafe {
            cu::cuDeviceCanAccessPeer(&mut can[0], ga.ctx.cu_device(), gb.ctx.cu_device())
                .result()
                .map_err(cu_err("cuDeviceCanAccessPeer"))?;
            cu::cuDeviceCanAccessPeer(&mut can[1], gb.ctx.cu_device(), ga.ctx.cu_device())
                .result()
                .map_err(cu_err("cuDeviceCanAccessPeer"))?;
        }
        if can != [1, 1] {
            return Ok(false);
        }
        for (from, to) in [(ga, gb), (gb, ga)] {
            from.ctx
                .bind_to_thread()
                .map_err(cu_err("cuCtxSetCurrent"))?;
            // SAFETY: the current context is `from`'s; `to`'s context is live.
            let r = unsafe { cu::cuCtxEnablePeerAccess(to.ctx.cu_ctx(), 0) };
            match r {
                cu::CUresult::CUDA_SUCCESS
                | cu::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
                e => return Err(format!("cuCtxEnablePeerAccess failed: {e:?}")),
            }
        }
        Ok(true)
    }

    /// `n` copies of `len` bytes from `from`'s send buffer into `to`'s receive buffer, on
    /// `on`'s stream (the source's: as nvbandwidth's copy engine reads, pushed from the source).
    fn enqueue_copies(&self, from: usize, to: usize, len: usize, n: u32) -> Result<(), String> {
        let (gf, gt) = (&self.gpus[from], &self.gpus[to]);
        gf.ctx.bind_to_thread().map_err(cu_err("cuCtxSetCurrent"))?;
        let (src, _s) = gf.send.device_ptr(&gf.stream);
        // The receive buffer is only written by the copy engine on `from`'s stream.
        let (dst, _d) = gt.recv.device_ptr(&gf.stream);
        for _ in 0..n {
            // SAFETY: both pointers are live allocations of at least `len` bytes on their
            // contexts; the stream is `from`'s, whose context is current.
            unsafe {
                cudarc::driver::result::memcpy_peer_async(
                    gt.ctx.cu_ctx(),
                    dst,
                    gf.ctx.cu_ctx(),
                    src,
                    len,
                    gf.stream.cu_stream(),
                )
            }
            .map_err(cu_err("cuMemcpyPeerAsync"))?;
        }
        Ok(())
    }

    fn copy_engine(&self, src: usize, dst: usize, warmup: u32, timed: u32) -> Result<Cell, String> {
        let (gs, gd) = (&self.gpus[src], &self.gpus[dst]);
        let both = |n: u32, both: bool| -> Result<f64, String> {
            gs.sync()?;
            gd.sync()?;
            let start = Instant::now();
            self.enqueue_copies(src, dst, self.bytes, n)?;
            if both {
                self.enqueue_copies(dst, src, self.bytes, n)?;
            }
            gs.sync()?;
            gd.sync()?;
            Ok(start.elapsed().as_secs_f64())
        };
        both(warmup, false)?;
        let uni = both(timed, false)?;
        both(warmup, true)?;
        let bidir = both(timed, true)?;
        // Latency: one 8-byte copy's time on the source's stream, by CUDA events.
        self.enqueue_copies(src, dst, LATENCY_BYTES as usize, warmup)?;
        let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let begin = gs.ctx.new_event(flags).map_err(cu_err("cuEventCreate"))?;
        let end = gs.ctx.new_event(flags).map_err(cu_err("cuEventCreate"))?;
        begin.record(&gs.stream).map_err(cu_err("cuEventRecord"))?;
        self.enqueue_copies(src, dst, LATENCY_BYTES as usize, timed)?;
        end.record(&gs.stream).map_err(cu_err("cuEventRecord"))?;
        gs.sync()?;
        let ms = begin
            .elapsed_ms(&end)
            .map_err(cu_err("cuEventElapsedTime"))?;
        let moved = self.bytes as f64 * f64::from(timed);
        Ok(Cell {
            uni_gbps: moved / uni / 1e9,
            bidir_gbps: 2.0 * moved / bidir / 1e9,
            latency_us: f64::from(ms) * 1e3 / f64::from(timed),
        })
    }

    /// One NCCL group: for each `(a, b)` of `moves`, `len` bytes from GPU a's send buffer to
    /// GPU b's receive buffer, the sends and receives paired by the group.
    fn grouped(&self, c: &Comms, moves: &[(usize, usize)], len: usize) -> Result<(), String> {
        let stream = |g: &Gpu| g.stream.cu_stream() as sys::cudaStream_t;
        result::group_start().map_err(nccl_err("ncclGroupStart"))?;
        for &(a, b) in moves {
            let (ga, gb) = (&self.gpus[a], &self.gpus[b]);
            let (sp, _s) = ga.send.device_ptr(&ga.stream);
            let (rp, _r) = gb.recv.device_ptr(&gb.stream);
            // SAFETY: live device buffers of at least `len` bytes on each GPU (callers pass the
            // bench's size or LATENCY_BYTES, and each buffer holds the larger); each
            // communicator and stream is its GPU's; the group pairs the send with its recv.
            unsafe {
                result::send(
                    sp as *const std::ffi::c_void,
                    len,
                    sys::ncclDataType_t::ncclUint8,
                    b as i32,
                    c.0[a],
                    stream(ga),
                )
                .map_err(nccl_err("ncclSend"))?;
                result::recv(
                    rp as *mut std::ffi::c_void,
                    len,
                    sys::ncclDataType_t::ncclUint8,
                    a as i32,
                    c.0[b],
                    stream(gb),
                )
                .map_err(nccl_err("ncclRecv"))?;
            }
        }
        result::group_end().map_err(nccl_err("ncclGroupEnd"))?;
        Ok(())
    }

    fn nccl(
        &self,
        c: &Comms,
        src: usize,
        dst: usize,
        warmup: u32,
        timed: u32,
    ) -> Result<Cell, String> {
        let (gs, gd) = (&self.gpus[src], &self.gpus[dst]);
        // One grouped round: `len` bytes from src to dst, and from dst to src too when `both`.
        let round = |len: usize, both: bool| -> Result<(), String> {
            // No allocation per round: this runs inside the timed loop.
            let there_and_back = [(src, dst), (dst, src)];
            self.grouped(c, &there_and_back[..if both { 2 } else { 1 }], len)
        };
        let timed_rounds = |n: u32, len: usize, both: bool| -> Result<f64, String> {
            gs.sync()?;
            gd.sync()?;
            let start = Instant::now();
            for _ in 0..n {
                round(len, both)?;
            }
            gs.sync()?;
            gd.sync()?;
            Ok(start.elapsed().as_secs_f64())
        };
        timed_rounds(warmup, self.bytes, false)?;
        let uni = timed_rounds(timed, self.bytes, false)?;
        timed_rounds(warmup, self.bytes, true)?;
        let bidir = timed_rounds(timed, self.bytes, true)?;
        // Latency: ping-pong, src -> dst then dst -> src, each round trip after the last
        // (stream order on each GPU keeps the pong behind its ping).
        let ping_pong = |n: u32| -> Result<f64, String> {
            gs.sync()?;
            gd.sync()?;
            let start = Instant::now();
            for _ in 0..n {
                for there in [(src, dst), (dst, src)] {
                    self.grouped(c, &[there], LATENCY_BYTES as usize)?;
                }
            }
            gs.sync()?;
            gd.sync()?;
            Ok(start.elapsed().as_secs_f64())
        };
        ping_pong(warmup)?;
        let rtt = ping_pong(timed)?;
        let moved = self.bytes as f64 * f64::from(timed);
        Ok(Cell {
            uni_gbps: moved / uni / 1e9,
            bidir_gbps: 2.0 * moved / bidir / 1e9,
            latency_us: rtt / f64::from(timed) / 2.0 * 1e6,
        })
    }
}

/// One communicator per GPU of this process (ncclCommInitAll over devices 0..n); aborted on
/// drop.
struct Comms(Vec<sys::ncclComm_t>);

impl Comms {
    fn init(n: usize) -> Result<Comms, String> {
        let mut comms = vec![std::ptr::null_mut(); n];
        let devices: Vec<i32> = (0..n as i32).collect();
        // SAFETY: `comms` has room for n communicators, `devices` lists n devices.
        unsafe { result::comm_init_all(comms.as_mut_ptr(), n as i32, devices.as_ptr()) }
            .map_err(nccl_err("ncclCommInitAll"))?;
        Ok(Comms(comms))
    }
}

impl Drop for Comms {
    fn drop(&mut self) {
        for &c in &self.0 {
            // SAFETY: each communicator was made by comm_init_all and is aborted once.
            unsafe {
                let _ = result::comm_abort(c);
            }
        }
    }
}

/// `0000:3B:00.0` and nvidia-smi's `00000000:3B:00.0` as one key: the domain as a number,
/// the rest in lower case.
pub fn bus_key(id: &str) -> Option<String> {
    let (domain, rest) = id.trim().split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    Some(format!("{domain:x}:{}", rest.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_and_nvidia_smis_bus_ids_are_one_key() {
        assert_eq!(bus_key("0000:3B:00.0"), bus_key("00000000:3b:00.0"));
        assert_ne!(bus_key("0000:3B:00.0"), bus_key("0000:3C:00.0"));
        assert_eq!(bus_key("garbage"), None);
    }
}
