//! `collbench gemm` and `collbench limits`: forward upstream records, measure, write records,
//! print a table on stderr.

use super::{
    ComputeBackend, Device, GEMM_HEADER, GemmConfig, gemm_line, limits_record, measure_batch,
};
use crate::measure::Iters;
use servbench::cli::{self, Exit};
use servbench::jsonl::{self, Disposition, RecordWriter};
use servbench::presets::Hardware;
use servbench::record::Labels;
use std::io::Write;

/// Where and how the compute half runs.
#[derive(Debug, Clone)]
pub struct Target {
    pub backend: ComputeBackend,
    /// CPU threads (default: all).
    pub threads: Option<usize>,
    /// GPU index.
    pub device: usize,
}

impl Target {
    pub fn open(&self) -> anyhow::Result<Box<dyn Device>> {
        super::open(self.backend, self.threads, self.device)
    }
}

/// Measures every batch of `cfg` on `dev` and writes the records (`gemm` per shape, then the
/// step's `gemm_step`); the stderr table as it goes.
pub fn gemm_records<W: Write>(
    dev: &mut dyn Device,
    cfg: &GemmConfig,
    out: &mut RecordWriter<W>,
) -> anyhow::Result<()> {
    super::check_operands(dev, cfg)?;
    let what = match &cfg.model {
        Some(m) => format!("{} tp={}", m.name, cfg.tp),
        None => "custom shapes".into(),
    };
    eprintln!(
        "# collbench gemm {what} backend={} device={} dtype={} iters={} warmup={}",
        dev.backend(cfg.dtype),
        dev.name(),
        cfg.dtype.name(),
        cfg.iters.timed,
        cfg.iters.warmup
    );
    eprintln!("{GEMM_HEADER}");
    for &batch in &cfg.batches {
        let measured = measure_batch(dev, cfg, batch)?;
        for g in &measured.gemms {
            eprintln!("{}", gemm_line(g));
            out.emit(g)?;
        }
        if let Some(step) = &measured.step {
            cli::info(format!(
                "batch {batch:>4}: {} GEMMs per step {:.0} us measured (roofline {:.0} us), back to back {:.0} us: {:.0} us launch overhead{}",
                step.gemms_per_step,
                step.gemm_us_per_step,
                step.roofline_us_per_step,
                step.sequence_us.mean,
                step.launch_overhead_us_per_step,
                step.graph_us
                    .map(|g| format!("; one CUDA graph {:.0} us", g.mean))
                    .unwrap_or_default()
            ));
            out.emit(step)?;
        }
    }
    Ok(())
}

/// `collbench gemm`.
pub fn gemm(cfg: &GemmConfig, target: &Target, strict: bool) -> anyhow::Result<Exit> {
    let mut dev = target.open()?;
    let mut out = RecordWriter::stdout();
    jsonl::pass_through(strict, &mut out, |_| Disposition::Forward)?;
    gemm_records(dev.as_mut(), cfg, &mut out)?;
    Ok(Exit::Ok)
}

/// `collbench limits`.
pub fn limits(
    target: &Target,
    hw: &Hardware,
    bytes: u64,
    iters: Iters,
    labels: &Labels,
    strict: bool,
) -> anyhow::Result<Exit> {
    let mut dev = target.open()?;
    let mut out = RecordWriter::stdout();
    jsonl::pass_through(strict, &mut out, |_| Disposition::Forward)?;
    // A source and a destination of --bytes each.
    let need = 2 * u128::from(bytes);
    super::check_fits(
        dev.as_ref(),
        "--bytes",
        "a copy's source and destination",
        need,
        u128::from(bytes),
    )?;
    let rec = limits_record(dev.as_mut(), hw, bytes, iters, labels)?;
    cli::info(format!(
        "{} ({}): copy {:.1} GB/s, read {:.1} GB/s (datasheet of {}: {:.0} GB/s), launch {:.2} us{}",
        rec.device,
        rec.backend,
        rec.copy_gbps,
        rec.read_gbps,
        hw.name,
        rec.datasheet_mem_gbps,
        rec.launch_us.mean,
        rec.launch_sync_us
            .map(|d| format!(", launch + sync {:.2} us", d.mean))
            .unwrap_or_default()
    ));
    out.emit(&rec)?;
    Ok(Exit::Ok)
}
