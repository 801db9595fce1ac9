//! Where the compute half runs (`gemm`, `limits`, `decode --compute`), and those two
//! subcommands.

use super::{U32List, checked_iters};
use clap::Args;
use collbench::compute::run::Target;
use collbench::compute::shapes::{GemmShape, parse_shape};
use collbench::compute::{ComputeBackend, GemmConfig, GemmDtype};
use collbench::measure::Iters;
use servbench::cli::{self, CommonArgs, Exit};
use servbench::presets;

/// Where the compute half runs (`gemm`, `limits`, `decode --compute`).
#[derive(Debug, Args)]
pub struct ComputeArgs {
    /// cpu: this machine's cores, f32 (figures labelled cpu); cublas: an NVIDIA GPU (needs
    /// libcuda and libcublas at run time). decode: follows --backend (tcp: cpu, nccl: cublas)
    #[arg(long, value_enum)]
    pub compute_backend: Option<ComputeBackend>,
    /// CPU threads for the GEMMs and the bandwidth passes (default: all)
    #[arg(long)]
    pub threads: Option<usize>,
    /// GPU to run on (cublas)
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// GEMM element type (default: the card's weights: bf16 or fp8 on cublas; f32 on cpu)
    #[arg(long, value_enum)]
    pub gemm_dtype: Option<GemmDtype>,
    /// Back-to-back runs of a whole step's GEMM sequence (its launch overhead)
    #[arg(long, default_value_t = 3)]
    pub step_iters: u32,
}

pub type ShapeList = Vec<GemmShape>;

pub fn shape_list(s: &str) -> Result<ShapeList, String> {
    s.split(',').map(parse_shape).collect()
}

#[derive(Debug, Args)]
pub struct GemmArgs {
    /// Model preset or JSON card whose decode-step GEMMs to time
    #[arg(long, required_unless_present = "shape")]
    pub model: Option<String>,
    /// Products by hand instead of a card's: MxNxK[,MxNxK...] (Y[m x n] = X[m x k] . W^T)
    #[arg(long, value_parser = shape_list, conflicts_with_all = ["model", "tp", "batch"])]
    pub shape: Option<ShapeList>,
    /// Hardware preset (or JSON card) whose peaks the figures are set against
    #[arg(long, default_value = "h100")]
    pub hardware: String,
    /// Tensor-parallel degree: the shapes of one GPU's shard
    #[arg(long)]
    pub tp: Option<u32>,
    /// Batch sizes (sequences per step): 1,8,64 or 1..64
    #[arg(long, value_parser = cli::u32_list)]
    pub batch: Option<U32List>,
    /// Timed calls per shape
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: u32,
    /// Untimed warm-up calls per shape
    #[arg(short = 'w', long = "warmup-iters", default_value_t = 5)]
    pub warmup: u32,
    #[command(flatten)]
    pub compute: ComputeArgs,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Args)]
pub struct LimitsArgs {
    /// Hardware preset (or JSON card) whose datasheet bandwidth is set beside the measurement
    #[arg(long, default_value = "h100")]
    pub hardware: String,
    /// Buffer size (default 1G on a GPU, 256M on the CPU: both far past the last-level cache)
    #[arg(long, value_parser = cli::parse_size)]
    pub bytes: Option<u64>,
    /// Timed copies and reads
    #[arg(short = 'n', long = "iters", default_value_t = 10)]
    pub iters: u32,
    /// Untimed warm-up passes
    #[arg(short = 'w', long = "warmup-iters", default_value_t = 2)]
    pub warmup: u32,
    #[command(flatten)]
    pub compute: ComputeArgs,
    #[command(flatten)]
    pub common: CommonArgs,
}

pub fn target(c: &ComputeArgs, backend: ComputeBackend) -> Target {
    Target {
        backend,
        threads: c.threads,
        device: c.device,
    }
}

pub fn gemm_config(
    c: &ComputeArgs,
    backend: ComputeBackend,
    model: Option<presets::ModelCard>,
    hardware: presets::Hardware,
    (tp, batches): (u32, U32List),
    iters: Iters,
    labels: servbench::record::Labels,
) -> anyhow::Result<GemmConfig> {
    if iters.timed == 0 {
        return Err(cli::usage("-n/--iters must be at least 1"));
    }
    let iters = checked_iters(iters.warmup, iters.timed)?;
    collbench::limits::check_iters("--step-iters", c.step_iters)?;
    let dtype = match c.gemm_dtype {
        Some(d) => d,
        None => GemmDtype::for_card(backend, model.as_ref())
            .map_err(|e| cli::usage(format!("--gemm-dtype: {e}")))?,
    };
    Ok(GemmConfig {
        model,
        hardware,
        tp,
        batches,
        custom: Vec::new(),
        dtype,
        iters,
        step_iters: c.step_iters.max(1),
        labels,
    })
}

pub fn gemm(g: GemmArgs) -> anyhow::Result<Exit> {
    let hardware =
        presets::load_hardware(&g.hardware).map_err(|e| cli::usage(format!("--hardware: {e}")))?;
    let model = match &g.model {
        Some(m) => Some(presets::load_model(m).map_err(|e| cli::usage(format!("--model: {e}")))?),
        None => None,
    };
    let backend = g.compute.compute_backend.unwrap_or(ComputeBackend::Cpu);
    let (tp, batches) = match &g.shape {
        Some(_) => (1, vec![1]),
        None => (
            g.tp.unwrap_or(1),
            g.batch.clone().unwrap_or_else(|| vec![1]),
        ),
    };
    let mut cfg = gemm_config(
        &g.compute,
        backend,
        model,
        hardware,
        (tp, batches),
        Iters {
            warmup: g.warmup,
            timed: g.iters,
        },
        g.common.labels(),
    )?;
    if let Some(shapes) = g.shape {
        cfg.batches = vec![shapes.iter().map(|s| s.m).max().unwrap_or(1)];
        cfg.custom = shapes;
    }
    let target = target(&g.compute, backend);
    collbench::compute::run::gemm(&cfg, &target, g.common.strict)
}

pub fn limits(l: LimitsArgs) -> anyhow::Result<Exit> {
    let hardware =
        presets::load_hardware(&l.hardware).map_err(|e| cli::usage(format!("--hardware: {e}")))?;
    let backend = l.compute.compute_backend.unwrap_or(ComputeBackend::Cpu);
    let bytes = l.bytes.unwrap_or(match backend {
        ComputeBackend::Cpu => 256 << 20,
        ComputeBackend::Cublas => 1 << 30,
    });
    if bytes < 1 << 20 || l.iters == 0 {
        return Err(cli::usage(
            "--bytes must be at least 1M and -n at least 1 (a bandwidth needs a buffer past the caches)",
        ));
    }
    let iters = checked_iters(l.warmup, l.iters)?;
    collbench::compute::run::limits(
        &target(&l.compute, backend),
        &hardware,
        bytes,
        iters,
        &l.common.labels(),
        l.common.strict,
    )
}
