//! `collbench decode`: allreduces at one decode step's sizes (and with --compute its GEMMs).

use super::compute::{ComputeArgs, gemm_config, target};
use super::{RunArgs, U32List, checked_iters, job};
use clap::Args;
use collbench::Backend;
use collbench::compute::ComputeBackend;
use collbench::decode::DecodeConfig;
use collbench::dtype::{Dtype, RedOp};
use collbench::harness::RunConfig;
use collbench::measure::Mode;
use collbench::ops::{Algo, Op, allreduce::Allreduce};
use servbench::cli::{self, Exit};
use servbench::presets;
use std::ffi::OsString;

#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// Model preset or JSON card (layers, hidden size, parameters), e.g. llama-3.1-70b
    #[arg(long)]
    pub model: String,
    /// Hardware preset (or JSON card) for the roofline
    #[arg(long, default_value = "h100")]
    pub hardware: String,
    /// Tensor-parallel degree = ranks (-np defaults to it on the tcp backend)
    #[arg(long)]
    pub tp: usize,
    /// Batch sizes (sequences per step): 1,8,64 or 1..64
    #[arg(long, value_parser = cli::u32_list, default_value = "1")]
    pub batch: U32List,
    /// Context length (tokens per sequence) for the KV-cache bytes of the roofline
    #[arg(long, default_value_t = 1024)]
    pub context: u32,
    /// Also time the step's GEMMs at the same batches (gemm and gemm_step records)
    #[arg(long)]
    pub compute: bool,
    #[command(flatten)]
    pub compute_args: ComputeArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

pub fn decode(d: DecodeArgs, args: Vec<OsString>) -> anyhow::Result<Exit> {
    let model = presets::load_model(&d.model).map_err(|e| cli::usage(format!("--model: {e}")))?;
    let hardware =
        presets::load_hardware(&d.hardware).map_err(|e| cli::usage(format!("--hardware: {e}")))?;
    if d.tp < 1 {
        return Err(cli::usage("--tp must be at least 1"));
    }
    if d.batch.contains(&0) {
        return Err(cli::usage(
            "--batch 0: a decode step runs at least one sequence (give 1 or more)",
        ));
    }
    let iters = checked_iters(d.run.warmup, d.run.iters)?;
    collbench::limits::check_local_ranks("--tp", d.tp)?;
    let dtype = d.run.dtype.unwrap_or(if model.act_bytes >= 4.0 {
        Dtype::F32
    } else {
        Dtype::Bf16
    });
    let sizes: Vec<u64> = d
        .batch
        .iter()
        .map(|&b| collbench::decode::allreduce_bytes(b, model.hidden, dtype.size()))
        .collect();
    let run = RunConfig {
        op: Op::new(&Allreduce),
        algo: Algo::Auto,
        sizes,
        iters,
        dtype,
        redop: RedOp::Sum,
        root: 0,
        mode: d.run.mode.unwrap_or(Mode::Latency),
        check: !d.run.no_check,
        timeout: d.run.timeout,
        labels: d.run.common.labels(),
    };
    // The allreduce runs over tp ranks: tp local processes (tcp) or tp local GPUs (nccl) unless
    // the job is laid out otherwise.
    let (default_np, gpus) = match d.run.backend {
        Backend::Tcp => (Some(d.tp), d.run.gpus),
        Backend::Nccl => (
            None,
            if d.run.np.is_none() && d.run.world.is_none() && d.run.gpus == 1 {
                d.tp
            } else {
                d.run.gpus
            },
        ),
    };
    let compute = if d.compute {
        let backend = d
            .compute_args
            .compute_backend
            .unwrap_or(match d.run.backend {
                Backend::Tcp => ComputeBackend::Cpu,
                Backend::Nccl => ComputeBackend::Cublas,
            });
        let cfg = gemm_config(
            &d.compute_args,
            backend,
            Some(model.clone()),
            hardware.clone(),
            (d.tp as u32, d.batch.clone()),
            iters,
            d.run.common.labels(),
        )?;
        Some((cfg, target(&d.compute_args, backend)))
    } else {
        None
    };
    let mut job = job(&d.run, default_np, args)?;
    job.gpus = gpus;
    let dc = DecodeConfig {
        model,
        hardware,
        tp: d.tp,
        batches: d.batch,
        context: d.context,
        run,
        compute,
    };
    collbench::decode::run(&dc, &job)
}
