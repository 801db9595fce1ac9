//! The GPU backend: cuBLAS (`cublasGemmEx`, f32 and bf16 with f32 accumulation, as
//! torch.matmul) and cuBLASLt (FP8 E4M3 in, BF16 out) through cudarc, loaded at run time like
//! the NCCL backend, so collbench builds and runs without CUDA and says what is missing.
//!
//! Layout as a linear layer: `W[n x k]` row-major used transposed, `Y[m x n] = X . W^T`. In
//! cuBLAS's column-major terms that is `Y^T = op_T(W) . X^T`: transa = T, transb = N, the "TN"
//! layout cuBLASLt requires for FP8. Times come from CUDA events on the stream, never one per
//! GEMM: a sample is [`CALLS_PER_SAMPLE`] calls back to back between two events, and a step is
//! timed back to back and as one CUDA-graph replay (how engines run decode); memory
//! bandwidth from cuMemcpyDtoD and a read-only PTX kernel, launches from an empty PTX kernel
//! (JIT-compiled by the driver: no NVRTC needed).
//!
//! Unverified without a GPU on the build machine: everything past the library check.

use super::owned::Owned;
use super::ptx::PTX;
use super::shapes::GemmShape;
use super::{Device, GemmDtype, Limits};
use crate::culibs::{self, Lib};
use crate::measure::Iters;
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::cublaslt::{result as lt, sys as lt_sys};
use cudarc::driver::sys::{CUevent_flags, CUfunction};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, result as drv};
use servbench::cli;
use servbench::record::GemmTiming;
use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::time::Instant;

const READ_BLOCKS_PER_SM: u32 = 8;
const READ_THREADS: u32 = 512;

/// Finds libcuda and libcublas (and libcublasLt for FP8) as cudarc will load them: the line
/// saying which files and versions, or exit 2 naming every file name looked for (cudarc
/// would panic at the first call otherwise).
pub fn check_libraries(fp8: bool) -> anyhow::Result<String> {
    let libs: &[Lib] = if fp8 {
        &[Lib::Driver, Lib::Cublas, Lib::CublasLt]
    } else {
        &[Lib::Driver, Lib::Cublas]
    };
    culibs::load(libs, "--compute-backend cublas", &|lib| {
        match lib {
        Lib::Driver => "no NVIDIA driver here, or its directory is not on LD_LIBRARY_PATH; --compute-backend cpu needs none".into(),
        _ => "install the CUDA toolkit's, or put the lib directory of pip's nvidia-cublas (CUDA 13) or nvidia-cublas-cu12 on LD_LIBRARY_PATH; --compute-backend cpu needs none".into(),
    }
    })
}

fn cuda(what: &str) -> impl Fn(drv::DriverError) -> anyhow::Error + '_ {
    move |e| cli::failure(format!("{what} failed: {e:?}"))
}

fn blas_err<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> anyhow::Error + '_ {
    move |e| cli::failure(format!("{what} failed: {e:?}"))
}

/// Operands of one shape on the GPU.
struct Operands {
    shape: GemmShape,
    x: CudaSlice<u8>,
    w: Vec<CudaSlice<u8>>,
    y: CudaSlice<u8>,
    next: usize,
    /// cuBLASLt plan for FP8 (descriptors and the heuristic's algorithm).
    lt: Option<LtPlan>,
}

/// A cuBLASLt FP8 plan: its descriptor and layouts, each with one owner (destroyed once when
/// the plan drops), and the heuristic's algorithm.
struct LtPlan {
    desc: Owned<lt_sys::cublasLtMatmulDesc_t>,
    a: Owned<lt_sys::cublasLtMatrixLayout_t>,
    b: Owned<lt_sys::cublasLtMatrixLayout_t>,
    d: Owned<lt_sys::cublasLtMatrixLayout_t>,
    algo: lt_sys::cublasLtMatmulAlgo_t,
}

impl LtPlan {
    /// The same plan with the heuristic's algorithm: the handles move, none is copied.
    fn with_algo(self, algo: lt_sys::cublasLtMatmulAlgo_t) -> LtPlan {
        LtPlan { algo, ..self }
    }
}

fn destroy_layout(h: lt_sys::cublasLtMatrixLayout_t) {
    // SAFETY: called once, by the layout's one owner.
    let _ = unsafe { lt::destroy_matrix_layout(h) };
}

fn destroy_desc(h: lt_sys::cublasLtMatmulDesc_t) {
    // SAFETY: called once, by the descriptor's one owner.
    let _ = unsafe { lt::destroy_matmul_desc(h) };
}

fn destroy_pref(h: lt_sys::cublasLtMatmulPreference_t) {
    // SAFETY: called once, by the preference's one owner.
    let _ = unsafe { lt::destroy_matmul_pref(h) };
}

fn destroy_lt_handle(h: lt_sys::cublasLtHandle_t) {
    // SAFETY: called once, by the handle's one owner, after every plan using it dropped.
    let _ = unsafe { lt::destroy_handle(h) };
}

pub struct Cublas {
    /// First, so the plans drop before the cuBLASLt handle they were made for.
    loaded: Vec<Operands>,
    ctx: Arc<CudaContext>,
    /// A stream of our own: CUDA cannot capture a graph on the legacy default stream.
    stream: Arc<CudaStream>,
    blas: cudarc::cublas::CudaBlas,
    lt: Option<Owned<lt_sys::cublasLtHandle_t>>,
    /// cuBLAS's and cuBLASLt's (one stream runs them one after the other), set before any
    /// capture so a captured GEMM allocates nothing.
    workspace: CudaSlice<u8>,
    empty: CUfunction,
    read: CUfunction,
    sms: u32,
    l2_bytes: u64,
    dtype: GemmDtype,
}

fn ptr(s: &CudaSlice<u8>, stream: &CudaStream) -> u64 {
    let (p, _guard) = s.device_ptr(stream);
    p
}

impl Cublas {
    pub fn open(device: usize) -> anyhow::Result<Cublas> {
        cli::info(check_libraries(false)?);
        let count = CudaContext::device_count()
            .map_err(|e| cli::failure(format!("no usable CUDA device: {e:?}")))?;
        if device >= count as usize {
            return Err(cli::usage(format!(
                "--device {device} but this host has {count} GPU(s)"
            )));
        }
        let ctx = CudaContext::new(device).map_err(cuda("cuCtxCreate"))?;
        // SAFETY: one stream runs everything here, in order, so cudarc's events between
        // streams are not needed; they would also break a capture (a wait on an event recorded
        // outside it).
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
        let blas =
            cudarc::cublas::CudaBlas::new(stream.clone()).map_err(blas_err("cublasCreate"))?;
        let workspace = stream
            .alloc_zeros::<u8>(WORKSPACE)
            .map_err(cuda("cuMemAlloc (cuBLAS workspace)"))?;
        // SAFETY: a live device buffer of WORKSPACE bytes, kept for the handle's life.
        unsafe {
            blas_sys::cublasSetWorkspace_v2(
                *blas.handle(),
                ptr(&workspace, &stream) as *mut c_void,
                WORKSPACE,
            )
        }
        .result()
        .map_err(blas_err("cublasSetWorkspace"))?;
        let source = CString::new(PTX).expect("no NUL in the PTX");
        // SAFETY: a NUL-terminated PTX image; the context is current on this thread.
        let module = unsafe { drv::module::load_data(source.as_ptr() as *const c_void) }
            .map_err(cuda("cuModuleLoadData (PTX JIT)"))?;
        let function = |name: &str| {
            // SAFETY: the module stays loaded for the process's life (never unloaded).
            unsafe { drv::module::get_function(module, CString::new(name).expect("no NUL")) }
                .map_err(cuda("cuModuleGetFunction"))
        };
        let (empty, read) = (function("empty")?, function("read_xor")?);
        use cudarc::driver::sys::CUdevice_attribute as A;
        let attr = |a| ctx.attribute(a).map_err(cuda("cuDeviceGetAttribute"));
        let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let l2_bytes = attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64;
        Ok(Cublas {
            ctx,
            stream,
            blas,
            lt: None,
            workspace,
            empty,
            read,
            sms,
            l2_bytes,
            loaded: Vec::new(),
            dtype: GemmDtype::Bf16,
        })
    }

    fn event(&self) -> anyhow::Result<CudaEvent> {
        self.ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda("cuEventCreate"))
    }

    /// Device-filled operand: small values of `dtype`, not all zeros (tensor cores run at a
    /// different clock on zeros).
    fn operand(&self, elems: usize, dtype: GemmDtype, seed: u64) -> anyhow::Result<CudaSlice<u8>> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let bytes: Vec<u8> = match dtype {
            GemmDtype::F32 => (0..elems).flat_map(|_| next().to_le_bytes()).collect(),
            // bf16 is the top half of an f32.
            GemmDtype::Bf16 => (0..elems)
                .flat_map(|_| ((next().to_bits() >> 16) as u16).to_le_bytes())
                .collect(),
            // E4M3 bytes below 0x78 in magnitude: finite, never NaN (0x7f / 0xff).
            GemmDtype::Fp8 => (0..elems)
                .map(|_| {
                    let v = next();
                    ((v.abs() * 200.0) as u8 & 0x77) | if v < 0.0 { 0x80 } else { 0 }
                })
                .collect(),
        };
        self.stream.clone_htod(&bytes).map_err(cuda("copy to GPU"))
    }

    fn lt_handle(&mut self) -> anyhow::Result<lt_sys::cublasLtHandle_t> {
        if let Some(h) = &self.lt {
            return Ok(h.raw());
        }
        cli::info(check_libraries(true)?);
        // SAFETY: a new handle, owned here alone.
        let h = unsafe { Owned::created(lt::create_handle(), destroy_lt_handle) }
            .map_err(blas_err("cublasLtCreate"))?;
        let raw = h.raw();
        self.lt = Some(h);
        Ok(raw)
    }

    fn plan_fp8(&mut self, s: &GemmShape) -> anyhow::Result<LtPlan> {
        use lt_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
        use lt_sys::cudaDataType::{CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_32F};
        let handle = self.lt_handle()?;
        let e = blas_err("cuBLASLt FP8 setup");
        let (m, n, k) = (u64::from(s.m), u64::from(s.n), u64::from(s.k));
        // SAFETY (each `Owned::created` below): a handle just created, owned there alone.
        let desc = unsafe {
            Owned::created(
                lt::create_matmul_desc(CUBLAS_COMPUTE_32F, CUDA_R_32F),
                destroy_desc,
            )
        }
        .map_err(&e)?;
        let desc_raw = desc.raw();
        // cublasOperation_t as a 32-bit value: 1 = T, 0 = N.
        let (t, nt) = (1i32, 0i32);
        let attr = |a, v: &i32| {
            // SAFETY: the attribute takes a cublasOperation_t (an int) by pointer and size.
            unsafe {
                lt::set_matmul_desc_attribute(
                    desc_raw,
                    a,
                    v as *const i32 as *const c_void,
                    std::mem::size_of::<i32>(),
                )
            }
        };
        use lt_sys::cublasLtMatmulDescAttributes_t as D;
        attr(D::CUBLASLT_MATMUL_DESC_TRANSA, &t).map_err(&e)?;
        attr(D::CUBLASLT_MATMUL_DESC_TRANSB, &nt).map_err(&e)?;
        let layout = |ty, rows, cols, ld| {
            // SAFETY: as above.
            unsafe { Owned::created(lt::create_matrix_layout(ty, rows, cols, ld), destroy_layout) }
        };
        let a = layout(CUDA_R_8F_E4M3, k, n, k as i64).map_err(&e)?;
        let b = layout(CUDA_R_8F_E4M3, k, m, k as i64).map_err(&e)?;
        let d = layout(CUDA_R_16BF, n, m, n as i64).map_err(&e)?;
        // SAFETY: as above; dropped at the end of this function.
        let pref = unsafe { Owned::created(lt::create_matmul_pref(), destroy_pref) }.map_err(&e)?;
        let ws = WORKSPACE;
        // SAFETY: the preference takes the workspace size as a usize by pointer; the handle,
        // descriptors and layouts are live (owned here).
        let heuristic = unsafe {
            lt::set_matmul_pref_attribute(
                pref.raw(),
                lt_sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const usize as *const c_void,
                std::mem::size_of::<usize>(),
            )
            .and_then(|_| {
                lt::get_matmul_algo_heuristic(
                    handle,
                    desc_raw,
                    a.raw(),
                    b.raw(),
                    d.raw(),
                    d.raw(),
                    pref.raw(),
                )
            })
        };
        let plan = LtPlan {
            desc,
            a,
            b,
            d,
            algo: lt_sys::cublasLtMatmulAlgo_t { data: [0; 8] },
        };
        let heuristic = heuristic.map_err(|err| {
            cli::failure(format!(
                "cuBLASLt has no FP8 algorithm for {} on this GPU (FP8 needs sm_89 or newer): {err:?}",
                s.dims()
            ))
        })?;
        Ok(plan.with_algo(heuristic.algo))
    }

    /// One call of loaded shape `i` with its next weight copy, enqueued on the stream.
    fn call(&mut self, i: usize) -> anyhow::Result<()> {
        let stream = self.stream.clone();
        let o = &mut self.loaded[i];
        let (m, n, k) = (o.shape.m as i32, o.shape.n as i32, o.shape.k as i32);
        let w = ptr(&o.w[o.next], &stream) as *const c_void;
        o.next = (o.next + 1) % o.w.len();
        let x = ptr(&o.x, &stream) as *const c_void;
        let y = ptr(&o.y, &stream) as *mut c_void;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let alpha = &alpha as *const f32 as *const c_void;
        let beta = &beta as *const f32 as *const c_void;
        if let Some(plan) = &o.lt {
            let ws = &self.workspace;
            let handle = self.lt.as_ref().expect("cuBLASLt handle with a plan").raw();
            // SAFETY: operands and workspace are live device buffers of the planned sizes on
            // this stream; the plan's descriptors match them.
            return unsafe {
                lt::matmul(
                    handle,
                    plan.desc.raw(),
                    alpha,
                    beta,
                    w,
                    plan.a.raw(),
                    x,
                    plan.b.raw(),
                    y,
                    plan.d.raw(),
                    y,
                    plan.d.raw(),
                    &plan.algo,
                    ptr(ws, &stream) as *mut c_void,
                    WORKSPACE,
                    stream.cu_stream() as _,
                )
            }
            .map_err(blas_err("cublasLtMatmul"));
        }
        let ty = match self.dtype {
            GemmDtype::F32 => blas_sys::cudaDataType::CUDA_R_32F,
            _ => blas_sys::cudaDataType::CUDA_R_16BF,
        };
        // SAFETY: w is n x k, x is m x k and y is m x n elements of `ty` in live device
        // buffers; column-major: Y^T (n x m, ld n) = W^T^T... = op_T(W as k x n, ld k) . X^T
        // (k x m, ld k).
        unsafe {
            blas::gemm_ex(
                *self.blas.handle(),
                blas_sys::cublasOperation_t::CUBLAS_OP_T,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                n,
                m,
                k,
                alpha,
                w,
                ty,
                k,
                x,
                ty,
                k,
                beta,
                y,
                ty,
                n,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(blas_err("cublasGemmEx"))
    }

    fn launch(
        &self,
        f: CUfunction,
        grid: u32,
        block: u32,
        args: &mut [*mut c_void],
    ) -> anyhow::Result<()> {
        // SAFETY: `f` comes from our PTX module and `args` match its parameter list.
        unsafe {
            drv::launch_kernel(
                f,
                (grid, 1, 1),
                (block, 1, 1),
                0,
                self.stream.cu_stream(),
                args,
            )
        }
        .map_err(cuda("cuLaunchKernel"))
    }

    /// Per-op times of `ops` calls of `op` back to back, from events between them.
    fn timed(
        &mut self,
        ops: u32,
        mut op: impl FnMut(&mut Self) -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<f64>> {
        let events: Vec<CudaEvent> = (0..=ops).map(|_| self.event()).collect::<Result<_, _>>()?;
        events[0]
            .record(&self.stream)
            .map_err(cuda("cuEventRecord"))?;
        for e in &events[1..] {
            op(self)?;
            e.record(&self.stream).map_err(cuda("cuEventRecord"))?;
        }
        self.stream
            .synchronize()
            .map_err(cuda("cuStreamSynchronize"))?;
        events
            .windows(2)
            .map(|w| {
                w[0].elapsed_ms(&w[1])
                    .map(|ms| f64::from(ms) * 1e3)
                    .map_err(cuda("cuEventElapsedTime"))
            })
            .collect()
    }
}

/// cuBLAS and cuBLASLt workspace: 32 MiB, as cudarc's safe wrapper takes on Hopper.
const WORKSPACE: usize = 32 << 20;

/// Calls of one GEMM between the two events of a sample (torch_gemm.py captures as many in
/// its graph): the events' cost spread over 20 calls is under 0.1 us each.
pub const CALLS_PER_SAMPLE: u32 = 20;

impl Device for Cublas {
    fn backend(&self, dtype: GemmDtype) -> &'static str {
        if dtype == GemmDtype::Fp8 {
            "cublaslt"
        } else {
            "cublas"
        }
    }

    fn name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "NVIDIA GPU".into())
    }

    fn cache_bytes(&self) -> u64 {
        // Twice L2 (50 MiB on H100, 126 MiB on B200), and at least 256 MiB.
        (2 * self.l2_bytes).max(256 << 20)
    }

    fn load(
        &mut self,
        shapes: &[GemmShape],
        copies: &[u32],
        dtype: GemmDtype,
    ) -> anyhow::Result<()> {
        self.loaded.clear();
        self.dtype = dtype;
        for (i, (shape, &copies)) in shapes.iter().zip(copies).enumerate() {
            let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
            let out = match dtype {
                GemmDtype::F32 => 4,
                _ => 2,
            };
            let y = self
                .stream
                .alloc_zeros::<u8>(m * n * out)
                .map_err(cuda("cuMemAlloc"))?;
            let x = self.operand(m * k, dtype, i as u64 + 1)?;
            let w = (0..copies)
                .map(|c| self.operand(n * k, dtype, 1000 + 64 * i as u64 + u64::from(c)))
                .collect::<Result<_, _>>()?;
            let lt = match dtype {
                GemmDtype::Fp8 => Some(self.plan_fp8(shape)?),
                _ => None,
            };
            self.loaded.push(Operands {
                shape: shape.clone(),
                x,
                w,
                y,
                next: 0,
                lt,
            });
        }
        self.stream
            .synchronize()
            .map_err(cuda("cuStreamSynchronize"))
    }

    fn gemm_timing(&self) -> (GemmTiming, u32) {
        (GemmTiming::BackToBack, CALLS_PER_SAMPLE)
    }

    fn time_gemm(&mut self, i: usize, iters: Iters) -> anyhow::Result<Vec<f64>> {
        for _ in 0..iters.warmup {
            self.call(i)?;
        }
        self.stream.synchronize().map_err(cuda("warmup"))?;
        // An event after every call added ~2 us to a 12-18 us kernel on the H200: events only
        // around each sample of CALLS_PER_SAMPLE calls.
        let samples = self.timed(iters.timed, |me| {
            (0..CALLS_PER_SAMPLE).try_for_each(|_| me.call(i))
        })?;
        Ok(samples
            .into_iter()
            .map(|us| us / f64::from(CALLS_PER_SAMPLE))
            .collect())
    }

    fn time_graph(&mut self, order: &[usize], reps: u32) -> anyhow::Result<Option<Vec<f64>>> {
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        self.stream
            .synchronize()
            .map_err(cuda("cuStreamSynchronize"))?;
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cuda("cuStreamBeginCapture"))?;
        let captured = order.iter().try_for_each(|&i| self.call(i));
        // Ended whatever happened, so the stream is usable again.
        let graph = self
            .stream
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(cuda("cuStreamEndCapture / cuGraphInstantiate"));
        captured?;
        let graph = graph?.ok_or_else(|| cli::failure("the captured step holds no GEMM"))?;
        graph.upload().map_err(cuda("cuGraphUpload"))?;
        graph.launch().map_err(cuda("cuGraphLaunch"))?;
        self.stream.synchronize().map_err(cuda("warmup"))?;
        let replay = |_: &mut Self| graph.launch().map_err(cuda("cuGraphLaunch"));
        self.timed(reps, replay).map(Some)
    }

    fn time_sequence(&mut self, order: &[usize], reps: u32) -> anyhow::Result<Vec<f64>> {
        for &i in order {
            self.call(i)?;
        }
        self.stream.synchronize().map_err(cuda("warmup"))?;
        // Events around the whole sequence: a GPU waiting for the host's launches is counted.
        self.timed(reps, |me| order.iter().try_for_each(|&i| me.call(i)))
    }

    fn memory_available(&self) -> Option<(u64, String)> {
        let (free, _total) = self.ctx.mem_get_info().ok()?;
        Some((free as u64, format!("GPU {}", self.ctx.ordinal())))
    }

    fn stages_on_host(&self) -> bool {
        true
    }

    fn limits(&mut self, bytes: u64, iters: Iters) -> anyhow::Result<Limits> {
        let Iters { warmup, timed } = iters;
        self.loaded.clear();
        let bytes = (bytes as usize / 16) * 16;
        let src = self.operand(bytes / 4, GemmDtype::F32, 7)?;
        let mut dst = self
            .stream
            .alloc_zeros::<u8>(bytes)
            .map_err(cuda("cuMemAlloc"))?;
        let (grid, block) = (self.sms * READ_BLOCKS_PER_SM, READ_THREADS);
        let out = self
            .stream
            .alloc_zeros::<u8>((grid * block * 4) as usize)
            .map_err(cuda("cuMemAlloc"))?;
        let copy = |me: &mut Self| {
            me.stream
                .memcpy_dtod(&src, &mut dst)
                .map_err(cuda("cuMemcpyDtoD"))
        };
        let (mut p_src, mut vectors, mut p_out) = (
            ptr(&src, &self.stream),
            (bytes / 16) as u64,
            ptr(&out, &self.stream),
        );
        let read = |me: &mut Self| {
            let mut args: [*mut c_void; 3] = [
                &mut p_src as *mut u64 as *mut c_void,
                &mut vectors as *mut u64 as *mut c_void,
                &mut p_out as *mut u64 as *mut c_void,
            ];
            me.launch(me.read, grid, block, &mut args)
        };
        let empty = |me: &mut Self| me.launch(me.empty, 1, 1, &mut []);
        let (mut copy, mut read) = (copy, read);
        for _ in 0..warmup {
            self.timed(1, &mut copy)?;
            self.timed(1, &mut read)?;
        }
        let mut limits = Limits {
            copy_us: self.timed(timed, &mut copy)?,
            read_us: self.timed(timed, &mut read)?,
            ..Limits::default()
        };
        let launches = timed
            .saturating_mul(50)
            .clamp(100, crate::limits::MAX_ITERS);
        self.timed(warmup.max(1) * 10, empty)?;
        limits.launch_us = self.timed(launches, empty)?;
        let mut sync = Vec::with_capacity(launches as usize);
        for _ in 0..launches {
            let t = Instant::now();
            empty(self)?;
            self.stream
                .synchronize()
                .map_err(cuda("cuStreamSynchronize"))?;
            sync.push(t.elapsed().as_secs_f64() * 1e6);
        }
        limits.launch_sync_us = Some(sync);
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::owned::tests::{destroyed, record};

    /// Records the handle's address, destroying nothing (these handles are stand-ins).
    fn record_ptr<T>(h: *mut T) {
        record(h as usize)
    }

    #[test]
    fn an_fp8_plan_given_its_algorithm_destroys_each_layout_and_its_descriptor_once() {
        fn owned<T>(addr: usize) -> Owned<*mut T> {
            // SAFETY: a stand-in address, never dereferenced; `record_ptr` destroys nothing.
            unsafe { Owned::new(addr as *mut T, record_ptr) }
        }
        let plan = LtPlan {
            desc: owned(0x10),
            a: owned(0x20),
            b: owned(0x30),
            d: owned(0x40),
            algo: lt_sys::cublasLtMatmulAlgo_t { data: [0; 8] },
        };
        // What plan_fp8 does once the heuristic answered (a rebuild with `..plan` of copied
        // pointers freed every layout twice on the H200).
        let plan = plan.with_algo(lt_sys::cublasLtMatmulAlgo_t { data: [7; 8] });
        assert!(destroyed().is_empty(), "{:?}", destroyed());
        assert_eq!(plan.algo.data[0], 7);
        drop(plan);
        let mut gone = destroyed();
        gone.sort_unstable();
        assert_eq!(gone, vec![0x10, 0x20, 0x30, 0x40]);
    }
}
