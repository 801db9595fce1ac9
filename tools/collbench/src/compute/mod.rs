//! The compute half of a decode step: the step's GEMMs timed one by one and as one sequence,
//! and the device's physical limits (memory bandwidth, launch cost), on the CPU or on an
//! NVIDIA GPU through cuBLAS. Not a collective: it has its own small harness here, and shares
//! the statistics (`harness::time_dist`, shared's histogram) and the cards with the rest.
//!
//! A backend ([`Device`]) supplies "load these operands", "run this GEMM", "run this sequence"
//! and "measure the limits"; everything recorded is computed here, the same for every backend.

pub mod cpu;
pub mod cublas;
pub mod owned;
mod ptx;
pub mod run;
pub mod shapes;

use crate::harness::time_dist;
use crate::measure::Iters;
use clap::ValueEnum;
use servbench::cli;
use servbench::presets::{Hardware, ModelCard, WeightFormat};
use servbench::record::{
    DeviceLimitsRecord, Dist, Extra, GemmRecord, GemmStepRecord, GemmTiming, Labels,
    SCHEMA_VERSION, now_ts,
};
use shapes::GemmShape;

/// Where the GEMMs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ComputeBackend {
    /// This machine's cores through the `gemm` crate, in f32: figures labelled as CPU.
    Cpu,
    /// An NVIDIA GPU through cuBLAS (cuBLASLt for FP8), loaded at run time.
    Cublas,
}

/// Element type of the GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GemmDtype {
    F32,
    Bf16,
    /// FP8 E4M3 inputs, BF16 output, FP32 accumulation (cuBLASLt).
    Fp8,
}

impl GemmDtype {
    pub fn name(self) -> &'static str {
        match self {
            GemmDtype::F32 => "f32",
            GemmDtype::Bf16 => "bf16",
            GemmDtype::Fp8 => "fp8",
        }
    }

    /// Bytes of one input element.
    pub fn in_bytes(self) -> f64 {
        match self {
            GemmDtype::F32 => 4.0,
            GemmDtype::Bf16 => 2.0,
            GemmDtype::Fp8 => 1.0,
        }
    }

    /// Bytes of one output element (FP8 GEMMs write BF16).
    pub fn out_bytes(self) -> f64 {
        match self {
            GemmDtype::F32 => 4.0,
            GemmDtype::Bf16 | GemmDtype::Fp8 => 2.0,
        }
    }

    /// The card's weight type (the routed experts' when they differ, as most weights are
    /// theirs) as a GEMM dtype name (`bf16`, `fp8`, `nvfp4`, `mxfp4`).
    pub fn card_name(model: &ModelCard) -> &'static str {
        model
            .expert_format
            .filter(|_| model.moe.is_some())
            .unwrap_or(model.weight_format)
            .name()
    }

    /// The dtype a backend runs for a card unless `--dtype` says otherwise.
    pub fn for_card(
        backend: ComputeBackend,
        model: Option<&ModelCard>,
    ) -> Result<GemmDtype, String> {
        match (backend, model.map(GemmDtype::card_name)) {
            (ComputeBackend::Cpu, _) => Ok(GemmDtype::F32),
            (ComputeBackend::Cublas, None | Some("bf16")) => Ok(GemmDtype::Bf16),
            (ComputeBackend::Cublas, Some("fp8")) => Ok(GemmDtype::Fp8),
            (ComputeBackend::Cublas, Some(other)) => Err(format!(
                "the card's weights are {other}: collbench has no {other} GEMM (cuBLASLt's block-scaled FP4 needs Blackwell); give --gemm-dtype fp8 or bf16 to time those instead"
            )),
        }
    }

    /// The card's dense peak for this dtype, TFLOP/s (BF16's for f32: the tensor-core figure
    /// the card states).
    pub fn peak_tflops(self, hw: &Hardware) -> f64 {
        hw.tflops(match self {
            GemmDtype::Fp8 => WeightFormat::Fp8,
            GemmDtype::F32 | GemmDtype::Bf16 => WeightFormat::Bf16,
        })
    }
}

/// What the physical-limits measurement found, in microseconds per operation.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    pub copy_us: Vec<f64>,
    pub read_us: Vec<f64>,
    pub launch_us: Vec<f64>,
    pub launch_sync_us: Option<Vec<f64>>,
    /// How the figures were reached, when the device name does not say (appended to it).
    pub note: Option<String>,
}

/// A place GEMMs run. Operands are loaded once per set of shapes and indexed by position.
pub trait Device {
    /// The record's `backend` for GEMMs of `dtype` (`cublaslt` for FP8).
    fn backend(&self, dtype: GemmDtype) -> &'static str;
    /// The CPU model and threads, or the GPU's name.
    fn name(&self) -> String;
    /// Bytes of weights a call must cycle through so the next call does not find its weights
    /// in the last-level cache.
    fn cache_bytes(&self) -> u64;
    /// Allocates and fills operands for `shapes`, `copies[i]` weight copies of shape i,
    /// replacing what was loaded before.
    fn load(
        &mut self,
        shapes: &[GemmShape],
        copies: &[u32],
        dtype: GemmDtype,
    ) -> anyhow::Result<()>;
    /// How [`Device::time_gemm`] takes each sample, and how many calls one sample holds.
    fn gemm_timing(&self) -> (GemmTiming, u32);
    /// `iters.timed` samples of loaded shape `i` after `iters.warmup` calls, each taken as
    /// [`Device::gemm_timing`] says; µs per call, one figure per sample.
    fn time_gemm(&mut self, i: usize, iters: Iters) -> anyhow::Result<Vec<f64>>;
    /// The calls in `order` back to back, `reps` times after one untimed run; µs per run.
    fn time_sequence(&mut self, order: &[usize], reps: u32) -> anyhow::Result<Vec<f64>>;
    /// The calls in `order` captured once as a CUDA graph, replayed `reps` times after one
    /// untimed replay; µs per replay. `None` where there are no graphs (the CPU).
    fn time_graph(&mut self, _order: &[usize], _reps: u32) -> anyhow::Result<Option<Vec<f64>>> {
        Ok(None)
    }
    /// Copy and read bandwidth over `bytes`, and launch cost.
    fn limits(&mut self, bytes: u64, iters: Iters) -> anyhow::Result<Limits>;
    /// Bytes free where operands go, and the place's name (`this host`, `GPU 0`), when known.
    fn memory_available(&self) -> Option<(u64, String)>;
    /// Whether each operand is filled in host memory before it is copied over (a GPU's).
    fn stages_on_host(&self) -> bool {
        false
    }
}

/// Refuses operands of `need` bytes where the device keeps them, and for a device that fills
/// them on the host first its largest one (`staged` bytes) against the host's memory: one
/// usage line naming `flag` (exit 2) instead of an allocation abort.
pub fn check_fits(
    dev: &dyn Device,
    flag: &str,
    what: &str,
    need: u128,
    staged: u128,
) -> anyhow::Result<()> {
    if let Some((available, place)) = dev.memory_available() {
        crate::limits::refuse_beyond(flag, what, need, (available, &place), "")?;
    }
    if dev.stages_on_host()
        && let Some(host) = crate::limits::mem_available()
    {
        crate::limits::refuse_beyond(
            flag,
            &format!("{what} (filled on this host first, the largest)"),
            staged,
            (host, "this host"),
            "",
        )?;
    }
    Ok(())
}

/// Bytes the operands of `shapes` take with `copies` weight copies each: (all of them, the
/// largest single buffer).
pub fn operand_bytes(shapes: &[GemmShape], copies: &[u32], dtype: GemmDtype) -> (u128, u128) {
    let (mut all, mut largest) = (0u128, 0u128);
    for (s, &c) in shapes.iter().zip(copies) {
        let (m, n, k) = (u128::from(s.m), u128::from(s.n), u128::from(s.k));
        let (x, w) = (
            m * k * dtype.in_bytes() as u128,
            n * k * dtype.in_bytes() as u128,
        );
        let y = m * n * dtype.out_bytes() as u128;
        all += x + u128::from(c) * w + y;
        largest = largest.max(x).max(w).max(y);
    }
    (all, largest)
}

/// Refuses a `gemm` run whose operands at some batch would not fit (each batch's replace the
/// last's), before anything is allocated.
pub fn check_operands(dev: &dyn Device, cfg: &GemmConfig) -> anyhow::Result<()> {
    let flag = if cfg.model.is_some() {
        "--batch"
    } else {
        "--shape"
    };
    for &batch in &cfg.batches {
        let shapes = shapes_for(cfg, batch).map_err(cli::usage)?;
        let copies: Vec<u32> = shapes
            .iter()
            .map(|s| weight_copies(s, cfg.dtype, dev.cache_bytes()))
            .collect();
        let (all, largest) = operand_bytes(&shapes, &copies, cfg.dtype);
        let what = match &cfg.model {
            Some(_) => format!("the {} operands at batch {batch}", cfg.dtype.name()),
            None => format!("the {} operands", cfg.dtype.name()),
        };
        check_fits(dev, flag, &what, all, largest)?;
    }
    Ok(())
}

/// Opens the backend: CPU with `threads`, or GPU `device` (exit 2 naming a missing library).
pub fn open(
    backend: ComputeBackend,
    threads: Option<usize>,
    device: usize,
) -> anyhow::Result<Box<dyn Device>> {
    Ok(match backend {
        ComputeBackend::Cpu => Box::new(cpu::Cpu::new(threads)),
        ComputeBackend::Cublas => {
            if threads.is_some() {
                return Err(cli::usage("--threads is for --compute-backend cpu"));
            }
            Box::new(cublas::Cublas::open(device)?)
        }
    })
}

/// What one `gemm` run measures.
#[derive(Debug, Clone)]
pub struct GemmConfig {
    /// The card the shapes come from (None with `--shape`).
    pub model: Option<ModelCard>,
    pub hardware: Hardware,
    pub tp: u32,
    pub batches: Vec<u32>,
    /// `--shape`: these instead of a card's.
    pub custom: Vec<GemmShape>,
    pub dtype: GemmDtype,
    pub iters: Iters,
    /// Back-to-back runs of a whole step's sequence.
    pub step_iters: u32,
    pub labels: Labels,
}

/// One batch's measurement: a record per shape and the step's summary.
pub struct Measured {
    pub gemms: Vec<GemmRecord>,
    pub step: Option<GemmStepRecord>,
}

/// Copies of a weight so a run cycles through at least `cache` bytes (at most 64).
pub fn weight_copies(shape: &GemmShape, dtype: GemmDtype, cache: u64) -> u32 {
    let bytes = (shape.weights() as f64 * dtype.in_bytes()).max(1.0);
    ((cache as f64 / bytes).ceil() as u32).clamp(1, 64)
}

/// The shapes of one batch: the card's step, or the `--shape` ones as given.
pub fn shapes_for(cfg: &GemmConfig, batch: u32) -> Result<Vec<GemmShape>, String> {
    match &cfg.model {
        Some(model) => shapes::step_gemms(model, cfg.tp, batch),
        None => Ok(cfg.custom.clone()),
    }
}

/// The calls of one step in order: layer by layer, each shape `per_layer` times in each of
/// its layers (attention in every layer; the MLP's GEMMs in as many as run them).
pub fn step_order(shapes: &[GemmShape]) -> Vec<usize> {
    let layers = shapes.iter().map(|s| s.layers).max().unwrap_or(0);
    let mut order = Vec::new();
    for layer in 0..layers {
        for (i, s) in shapes.iter().enumerate() {
            if layer < s.layers {
                order.extend(std::iter::repeat_n(i, s.per_layer as usize));
            }
        }
    }
    order
}

/// Measures one batch on `dev`.
pub fn measure_batch(
    dev: &mut dyn Device,
    cfg: &GemmConfig,
    batch: u32,
) -> anyhow::Result<Measured> {
    let shapes = shapes_for(cfg, batch).map_err(cli::usage)?;
    let dtype = cfg.dtype;
    let copies: Vec<u32> = shapes
        .iter()
        .map(|s| weight_copies(s, dtype, dev.cache_bytes()))
        .collect();
    dev.load(&shapes, &copies, dtype)?;
    let backend = dev.backend(dtype);
    let device = dev.name();
    let hw = &cfg.hardware;
    let card_dtype = cfg
        .model
        .as_ref()
        .map(GemmDtype::card_name)
        .filter(|c| *c != dtype.name())
        .map(servbench::record::GemmDtype::parse);
    let (timing, calls_per_sample) = dev.gemm_timing();
    let mut gemms = Vec::with_capacity(shapes.len());
    for (i, shape) in shapes.iter().enumerate() {
        let samples = dev.time_gemm(i, cfg.iters)?;
        let time_us = time_dist(&samples);
        let secs = time_us.mean * 1e-6;
        let rate = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
        gemms.push(GemmRecord {
            v: SCHEMA_VERSION,
            ts: now_ts(),
            labels: cfg.labels.clone(),
            backend: backend.into(),
            device: device.clone(),
            model: cfg.model.as_ref().map(|m| m.name.clone()),
            hardware: hw.name.clone(),
            tp: cfg.tp,
            batch,
            name: shape.name.clone(),
            m: shape.m,
            n: shape.n,
            k: shape.k,
            per_step: shape.per_step(),
            dtype: dtype.name().into(),
            card_dtype: card_dtype.clone(),
            time_us,
            timing: timing.clone(),
            calls_per_sample,
            tflops: rate(shape.flops()) / 1e12,
            gbps: rate(shape.bytes(dtype.in_bytes(), dtype.out_bytes())) / 1e9,
            peak_tflops: dtype.peak_tflops(hw),
            peak_mem_gbps: hw.mem_bw_gbps,
            weight_copies: copies[i],
            iters: cfg.iters.timed,
            warmup: cfg.iters.warmup,
            extra: Extra::new(),
        });
    }
    let step = match &cfg.model {
        None => None,
        Some(model) => {
            let order = step_order(&shapes);
            let samples = StepSamples {
                sequence: dev.time_sequence(&order, cfg.step_iters)?,
                graph: dev.time_graph(&order, cfg.step_iters)?,
            };
            Some(step_record(
                cfg,
                model,
                batch,
                (&shapes, &gemms, &samples),
                (&device, backend),
            ))
        }
    };
    Ok(Measured { gemms, step })
}

/// A step's samples, µs per step: its GEMMs back to back, and replayed as one CUDA graph
/// where the device has graphs.
struct StepSamples {
    sequence: Vec<f64>,
    graph: Option<Vec<f64>>,
}

/// The step's record from its shapes, their timings and the step's samples, on the device and
/// backend named.
fn step_record(
    cfg: &GemmConfig,
    model: &ModelCard,
    batch: u32,
    (shapes, gemms, samples): (&[GemmShape], &[GemmRecord], &StepSamples),
    (device, backend): (&str, &str),
) -> GemmStepRecord {
    let dtype = cfg.dtype;
    let per_step = |f: &dyn Fn(&GemmShape) -> f64| -> f64 {
        shapes.iter().map(|s| f(s) * s.per_step() as f64).sum()
    };
    let flops = per_step(&|s| s.flops());
    let bytes = per_step(&|s| s.bytes(dtype.in_bytes(), dtype.out_bytes()));
    let gemm_us: f64 = shapes
        .iter()
        .zip(gemms)
        .map(|(s, g)| g.time_us.mean * s.per_step() as f64)
        .sum();
    let sequence_us = time_dist(&samples.sequence);
    let hw = &cfg.hardware;
    let roofline_s = (flops / (dtype.peak_tflops(hw) * 1e12)).max(bytes / (hw.mem_bw_gbps * 1e9));
    GemmStepRecord {
        v: SCHEMA_VERSION,
        ts: now_ts(),
        labels: cfg.labels.clone(),
        backend: backend.into(),
        device: device.into(),
        model: model.name.clone(),
        hardware: hw.name.clone(),
        tp: cfg.tp,
        batch,
        dtype: dtype.name().into(),
        gemms_per_step: shapes.iter().map(GemmShape::per_step).sum(),
        flops_per_step: flops,
        bytes_per_step: bytes,
        gemm_us_per_step: gemm_us,
        launch_overhead_us_per_step: (sequence_us.mean - gemm_us).max(0.0),
        sequence_us,
        graph_us: samples.graph.as_deref().map(time_dist),
        roofline_us_per_step: roofline_s * 1e6,
        extra: Extra::new(),
    }
}

/// The `device_limits` record of one measurement.
pub fn limits_record(
    dev: &mut dyn Device,
    hw: &Hardware,
    bytes: u64,
    iters: Iters,
    labels: &Labels,
) -> anyhow::Result<DeviceLimitsRecord> {
    let l = dev.limits(bytes, iters)?;
    let (copy_us, read_us) = (time_dist(&l.copy_us), time_dist(&l.read_us));
    let gbps = |b: f64, d: &Dist| {
        if d.mean > 0.0 {
            b / (d.mean * 1e-6) / 1e9
        } else {
            0.0
        }
    };
    Ok(DeviceLimitsRecord {
        v: SCHEMA_VERSION,
        ts: now_ts(),
        labels: labels.clone(),
        backend: dev.backend(GemmDtype::Bf16).into(),
        device: match &l.note {
            Some(note) => format!("{} ({note})", dev.name()),
            None => dev.name(),
        },
        hardware: hw.name.clone(),
        bytes,
        copy_gbps: gbps(2.0 * bytes as f64, &copy_us),
        copy_us,
        read_gbps: gbps(bytes as f64, &read_us),
        read_us,
        launch_us: time_dist(&l.launch_us),
        launch_sync_us: l.launch_sync_us.as_deref().map(time_dist),
        datasheet_mem_gbps: hw.mem_bw_gbps,
        iters: iters.timed,
        warmup: iters.warmup,
        extra: Extra::new(),
    })
}

/// The stderr line for one GEMM, as nccl-tests' table prints a size.
pub fn gemm_line(g: &GemmRecord) -> String {
    format!(
        " {:>5} {:>15} {:>6} {:>6} {:>6} {:>6} {:>10.2} {:>10.2} {:>9.3} {:>9.1} {:>6.1}",
        g.batch,
        g.name,
        g.m,
        g.n,
        g.k,
        g.per_step,
        g.time_us.mean,
        g.time_us.p99,
        g.tflops,
        g.gbps,
        100.0 * g.tflops / g.peak_tflops.max(1e-9)
    )
}

pub const GEMM_HEADER: &str = "# batch            gemm      m      n      k  /step   time(us)    p99(us)    TFLOP/s      GB/s  %peak";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_runs_each_gemm_as_often_as_its_layers_say() {
        let model = servbench::presets::load_model("kimi-k2").unwrap();
        let shapes = shapes::step_gemms(&model, 8, 1).unwrap();
        let order = step_order(&shapes);
        let calls: u64 = shapes.iter().map(GemmShape::per_step).sum();
        assert_eq!(order.len() as u64, calls);
        for (i, s) in shapes.iter().enumerate() {
            assert_eq!(
                order.iter().filter(|&&j| j == i).count() as u64,
                s.per_step()
            );
        }
        // Layer by layer: the first layer's attention comes before the second's.
        assert_eq!(&order[..2], &[0, 1]);
    }

    #[test]
    fn weights_are_cycled_past_the_cache_but_not_without_bound() {
        let big = shapes::parse_shape("1x28672x4096").unwrap();
        assert_eq!(weight_copies(&big, GemmDtype::F32, 96 << 20), 1);
        let small = shapes::parse_shape("1x128x2048").unwrap();
        assert_eq!(weight_copies(&small, GemmDtype::F32, 96 << 20), 64);
        let mid = shapes::parse_shape("1x1024x4096").unwrap();
        assert_eq!(weight_copies(&mid, GemmDtype::Bf16, 96 << 20), 12);
    }
}
