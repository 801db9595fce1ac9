//! `collbench decode`: the allreduces one decode step of a tensor-parallel dense transformer
//! needs (two per layer, after attention and after the MLP, each `batch x hidden x dtype`
//! bytes: Megatron-LM's layout), each timed alone (latency mode: a step waits for every one),
//! and set beside the step's roofline compute and memory time from the shared presets. Is the
//! step latency-bound or compute-bound? With `--compute` it also times the step's GEMMs at the
//! same batches (`crate::compute`), so both halves of the same step come from one run.
//!
//! At `--tp 1` there is no tensor-parallel communication: a TP1 engine runs no allreduce, so
//! none is measured, the records say communication 0 and the step is its compute half alone.

use crate::compute::run::{Target, gemm_records};
use crate::compute::{ComputeBackend, GemmConfig, GemmDtype};
use crate::harness::{Measured, RunConfig, time_dist};
use crate::launch::Role;
use crate::{Job, count_hosts};
use servbench::cli::{self, Exit};
use servbench::jsonl::{self, Disposition, RecordWriter};
use servbench::presets::{Deployment, Hardware, Layout, ModelCard};
use servbench::record::{CollAlgo, DecodeRecord, Dist, SCHEMA_VERSION, now_ts};

/// What `decode` measures.
#[derive(Debug, Clone)]
pub struct DecodeConfig {
    pub model: ModelCard,
    pub hardware: Hardware,
    pub tp: usize,
    pub batches: Vec<u32>,
    /// Tokens of context per sequence (KV-cache bytes of the roofline).
    pub context: u32,
    /// The allreduce runs: sizes are the batches' message sizes, mode latency.
    pub run: RunConfig,
    /// `--compute`: the step's GEMMs at the same batches, on this target, after the allreduces.
    pub compute: Option<(GemmConfig, Target)>,
}

/// Bytes of one decode-step allreduce.
pub fn allreduce_bytes(batch: u32, hidden: u32, dtype_bytes: usize) -> u64 {
    u64::from(batch) * u64::from(hidden) * dtype_bytes as u64
}

/// The decode record for one batch size from its measured allreduce; `None` at TP1, where a
/// step runs none (communication 0, nothing measured).
pub fn record(
    dc: &DecodeConfig,
    batch: u32,
    m: Option<&Measured>,
    backend: &str,
    hosts: u32,
) -> DecodeRecord {
    let (time, per_step, bytes, algo, wrong) = match m {
        Some(m) => (
            time_dist(&m.samples_us),
            dc.model.allreduces_per_step(),
            m.shape.bytes,
            m.algo.into(),
            m.wrong,
        ),
        None => (Dist::default(), 0, 0, CollAlgo::NoAllreduce, 0),
    };
    let comm_us = f64::from(per_step) * time.mean;
    let layout = Layout {
        tp: dc.tp as u32,
        pp: 1,
    };
    let dep = Deployment::new(dc.model.clone(), dc.hardware.clone(), layout);
    let cost = dep.decode_step(batch, u64::from(dc.context));
    let step_compute_us = cost.compute_s * 1e6;
    let step_memory_us = cost.memory_s * 1e6;
    let roofline_us = step_compute_us.max(step_memory_us);
    DecodeRecord {
        v: SCHEMA_VERSION,
        ts: now_ts(),
        labels: dc.run.labels.clone(),
        model: dc.model.name.clone(),
        hardware: dc.hardware.name.clone(),
        backend: backend.into(),
        algo,
        tp: dc.tp as u32,
        hosts,
        batch,
        layers: dc.model.layers,
        hidden: dc.model.hidden,
        dtype: dc.run.dtype.name().into(),
        allreduce_bytes: bytes,
        allreduces_per_step: per_step,
        allreduce_us: time,
        comm_us_per_token: comm_us,
        comm_us_per_token_p99: f64::from(per_step) * time.p99,
        step_compute_us,
        step_memory_us,
        step_roofline_us: roofline_us,
        comm_fraction: if comm_us + roofline_us > 0.0 {
            comm_us / (comm_us + roofline_us)
        } else {
            0.0
        },
        wrong,
        context_tokens: dc.context,
        // The hardware card's topology model for the same allreduces, to set the measurement
        // against.
        modeled_comm_us_per_token: cost.comm_s * 1e6,
        extra: servbench::record::Extra::new(),
    }
}

/// Runs the decode measurement: forwards upstream records, then one `decode` record per batch.
pub fn run(dc: &DecodeConfig, job: &Job) -> anyhow::Result<Exit> {
    crate::check_job(job)?;
    let communicates = dc.tp > 1;
    if communicates {
        crate::check_memory(&dc.run, job, "--batch")?;
    }
    if communicates && job.backend == crate::Backend::Nccl {
        crate::report_libraries(job, crate::nccl::check_libraries()?);
    }
    // A missing cuBLAS is known before any allreduce runs.
    if let Some((cfg, target)) = &dc.compute
        && target.backend == ComputeBackend::Cublas
    {
        // Said when the GPU is opened, after the allreduces.
        let _ = crate::compute::cublas::check_libraries(cfg.dtype == GemmDtype::Fp8)?;
    }
    let mut out = RecordWriter::stdout();
    let id = match &job.role {
        Role::Rank(id) => Some(id),
        _ => None,
    };
    if id.is_none_or(|id| id.rank == 0) {
        jsonl::pass_through(job.strict_input, &mut out, |_| Disposition::Forward)?;
    }
    if let Role::Hosts(h) = &job.role {
        if h.len() != dc.tp {
            return Err(cli::usage(format!(
                "--tp {} but --hosts lists {} rank(s)",
                dc.tp,
                h.len()
            )));
        }
        return crate::hosts::run(&job.hosts_plan(h)?, &job.args);
    }
    if let Role::Local(n) = job.role {
        if job.backend == crate::Backend::Tcp && n != dc.tp {
            return Err(cli::usage(format!(
                "--tp {} but -np {n}: the allreduce runs over tp ranks",
                dc.tp
            )));
        }
        return crate::run_local_ranks(job, n, dc.run.timeout);
    }
    if !communicates {
        if let Some(id) = id
            && id.world != 1
        {
            return Err(cli::usage(format!(
                "--tp 1 but the job has {} ranks: a TP1 step runs on one GPU",
                id.world
            )));
        }
        return without_communication(dc, job, &mut out);
    }
    let comm = crate::connect(&dc.run, id)?;
    let ranks = match job.backend {
        crate::Backend::Tcp => comm.world,
        crate::Backend::Nccl => comm.world * job.gpus,
    };
    if ranks != dc.tp {
        return Err(cli::usage(format!(
            "--tp {} but the job has {ranks} ranks: give -np {} (tcp) or -g (nccl) to match",
            dc.tp, dc.tp
        )));
    }
    let hosts = count_hosts(&comm)?;
    let mut wrong = 0;
    let mut batches = dc.batches.iter();
    crate::sweep(&comm, &dc.run, job, |m| {
        let batch = *batches.next().expect("one size per batch");
        wrong += m.wrong;
        if comm.rank == 0 {
            let rec = record(dc, batch, Some(&m), job.backend.name(), hosts);
            cli::info(format!(
                "batch {batch:>4}: allreduce {} B mean {:.1} us x {} = {:.0} us/token comm vs {:.0} us roofline ({:.0}% comm){}",
                rec.allreduce_bytes,
                rec.allreduce_us.mean,
                rec.allreduces_per_step,
                rec.comm_us_per_token,
                rec.step_roofline_us,
                rec.comm_fraction * 100.0,
                if rec.backend == servbench::record::CollBackend::Tcp {
                    " [tcp backend: not NCCL on GPUs]"
                } else {
                    ""
                }
            ));
            out.emit(&rec)?;
        }
        Ok(())
    })?;
    if wrong > 0 {
        return Err(cli::failure(format!(
            "{wrong} wrong element(s) in the allreduce results"
        )));
    }
    if comm.rank == 0 {
        compute_half(dc, &mut out)?;
    }
    Ok(Exit::Ok)
}

/// The compute half on one device (every TP rank runs the same shard shapes), with `--compute`.
fn compute_half(dc: &DecodeConfig, out: &mut RecordWriter<std::io::Stdout>) -> anyhow::Result<()> {
    if let Some((cfg, target)) = &dc.compute {
        let mut dev = target.open()?;
        gemm_records(dev.as_mut(), cfg, out)?;
    }
    Ok(())
}

/// TP1: one line saying so, a record per batch with communication 0, and the compute half.
fn without_communication(
    dc: &DecodeConfig,
    job: &Job,
    out: &mut RecordWriter<std::io::Stdout>,
) -> anyhow::Result<Exit> {
    cli::info(format!(
        "--tp 1: a TP1 step runs no allreduce, so none is measured: communication 0, the step is its compute half alone{}",
        if dc.compute.is_some() {
            ""
        } else {
            " (--compute times it)"
        }
    ));
    for &batch in &dc.batches {
        out.emit(&record(dc, batch, None, job.backend.name(), 1))?;
    }
    compute_half(dc, out)?;
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_sizes_follow_the_model() {
        let m = servbench::presets::load_model("llama-3.1-70b").unwrap();
        // Two allreduces per layer, batch x hidden x 2 bytes (bf16): 16 KiB at batch 1.
        assert_eq!(m.allreduces_per_step(), 160);
        assert_eq!(allreduce_bytes(1, m.hidden, 2), 16384);
        assert_eq!(allreduce_bytes(64, m.hidden, 2), 64 * 16384);
        assert_eq!(allreduce_bytes(1, m.hidden, 2) as f64, m.allreduce_bytes(1));
    }
}
