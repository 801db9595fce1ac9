//! The shared harness every collective runs under (nccl-tests' common.cu): the size sweep,
//! warmup, the two timing modes, the exact correctness check, the bandwidth formulas and the
//! records. Backends supply "run the op once"; everything measured goes through here.

use crate::comm::Comm;
use crate::dtype::{Dtype, RedOp};
use crate::ops::{Algo, Op, Params, Scratch, Shape};
use clap::ValueEnum;
use servbench::jsonl::RecordWriter;
use servbench::record::{CollRecord, CollRunRecord, Dist, Extra, Labels, SCHEMA_VERSION, now_ts};
use servbench::stats::Hist;
use std::io::Write;
use std::time::{Duration, Instant};

/// How ops are timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Back-to-back ops, time per op = total / iterations (nccl-tests' default figure).
    Pipelined,
    /// A barrier before each op and the op timed alone: percentiles of single ops, what a
    /// decode step pays for each of its allreduces.
    Latency,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pipelined => "pipelined",
            Mode::Latency => "latency",
        }
    }
}

/// Everything one run measures, the same on every rank.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub op: Op,
    pub algo: Algo,
    pub sizes: Vec<u64>,
    pub iters: u32,
    pub warmup: u32,
    pub dtype: Dtype,
    pub redop: RedOp,
    pub root: usize,
    pub mode: Mode,
    pub check: bool,
    pub timeout: Duration,
    pub labels: Labels,
}

impl RunConfig {
    /// A digest of what every rank must agree on, so mismatched ranks are refused at join time.
    pub fn fingerprint(&self) -> u64 {
        let text = format!(
            "{:?}|{:?}|{:?}|{}|{}|{:?}|{:?}|{}|{:?}|{}",
            self.op,
            self.algo,
            self.sizes,
            self.iters,
            self.warmup,
            self.dtype,
            self.redop,
            self.root,
            self.mode,
            self.check
        );
        // FNV-1a: stable across builds and platforms (unlike DefaultHasher).
        text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
    }

    pub fn params(&self) -> Params {
        Params {
            dtype: self.dtype,
            redop: self.redop,
            root: self.root,
        }
    }
}

/// nccl-tests' size sweep: `min`, then multiplied by `factor` while it stays <= `max`.
pub fn size_sweep(min: u64, max: u64, factor: u64) -> Result<Vec<u64>, String> {
    if min == 0 {
        return Err("-b must be at least 1 byte".into());
    }
    if max < min {
        return Err(format!("-e {max} is smaller than -b {min}"));
    }
    if factor < 2 && min != max {
        return Err("-f must be at least 2".into());
    }
    let mut sizes = vec![min];
    let mut size = min;
    while let Some(next) = size.checked_mul(factor) {
        if next > max || factor < 2 {
            break;
        }
        sizes.push(next);
        size = next;
    }
    Ok(sizes)
}

/// (algbw, busbw) in GB/s (1e9 bytes, as nccl-tests) for one op taking `time_us`.
pub fn bandwidths(op: Op, shape: &Shape, world: usize, time_us: f64) -> (f64, f64) {
    if time_us <= 0.0 {
        return (0.0, 0.0);
    }
    let algbw = shape.bytes as f64 / (time_us * 1e-6) / 1e9;
    (algbw, algbw * op.bus_factor(world))
}

/// One size's measurement, as rank 0 reports it.
#[derive(Debug, Clone)]
pub struct Measured {
    pub shape: Shape,
    /// The algorithm that ran (`nccl` when NCCL chose).
    pub algo: &'static str,
    /// Rank 0's per-op times (us): every time figure in the record comes from these.
    pub samples_us: Vec<f64>,
    /// Wrong elements summed over ranks.
    pub wrong: u64,
}

/// Distribution of per-op times in microseconds.
pub fn time_dist(samples_us: &[f64]) -> Dist {
    // Hist keeps three significant digits of whatever unit it is given: fed microseconds as its
    // "milliseconds" it resolves nanoseconds, and reports back in microseconds.
    let mut hist = Hist::new();
    for &us in samples_us {
        hist.record_ms(us);
    }
    let mut dist = hist.dist_ms().unwrap_or_default();
    // The exact mean (total time / ops in pipelined mode), not the histogram's bucketed one.
    if !samples_us.is_empty() {
        dist.mean = samples_us.iter().sum::<f64>() / samples_us.len() as f64;
    }
    dist
}

/// Context a record needs beyond the measurement.
#[derive(Debug, Clone)]
pub struct RecordContext {
    pub backend: &'static str,
    pub ranks: usize,
    pub hosts: u32,
}

pub fn coll_record(cfg: &RunConfig, ctx: &RecordContext, m: &Measured) -> CollRecord {
    let time_us = time_dist(&m.samples_us);
    let (algbw, busbw) = bandwidths(cfg.op, &m.shape, ctx.ranks, time_us.mean);
    CollRecord {
        v: SCHEMA_VERSION,
        ts: now_ts(),
        labels: cfg.labels.clone(),
        op: cfg.op.name().into(),
        backend: ctx.backend.into(),
        algo: m.algo.into(),
        ranks: ctx.ranks as u32,
        hosts: ctx.hosts,
        bytes: m.shape.bytes,
        count: m.shape.count,
        dtype: cfg.dtype.name().into(),
        redop: cfg.redop.name().into(),
        mode: cfg.mode.name().into(),
        time_us,
        algbw_gbps: algbw,
        busbw_gbps: busbw,
        wrong: m.wrong,
        checked: cfg.check,
        iters: cfg.iters,
        warmup: cfg.warmup,
        root: cfg.op.rooted().then_some(cfg.root as u32),
        extra: Extra::new(),
    }
}

/// Collects per-size records, prints nccl-tests' table on stderr, and writes the footer.
pub struct Reporter<'w, W: Write> {
    out: &'w mut RecordWriter<W>,
    busbw_sum: f64,
    sizes: u32,
    wrong: u64,
}

impl<'w, W: Write> Reporter<'w, W> {
    pub fn new(out: &'w mut RecordWriter<W>, cfg: &RunConfig, ctx: &RecordContext) -> Self {
        eprintln!(
            "# collbench {} backend={} ranks={} hosts={} dtype={} redop={} mode={} iters={} warmup={}",
            cfg.op.name(),
            ctx.backend,
            ctx.ranks,
            ctx.hosts,
            cfg.dtype.name(),
            cfg.redop.name(),
            cfg.mode.name(),
            cfg.iters,
            cfg.warmup
        );
        eprintln!(
            "#{:>12} {:>12} {:>6} {:>18} {:>10} {:>10} {:>9} {:>9} {:>7}",
            "size(B)", "count", "type", "algo", "time(us)", "p99(us)", "algbw", "busbw", "#wrong"
        );
        Reporter {
            out,
            busbw_sum: 0.0,
            sizes: 0,
            wrong: 0,
        }
    }

    pub fn size(&mut self, record: &CollRecord) -> anyhow::Result<()> {
        eprintln!(
            " {:>12} {:>12} {:>6} {:>18} {:>10.2} {:>10.2} {:>9.3} {:>9.3} {:>7}",
            record.bytes,
            record.count,
            record.dtype,
            record.algo,
            record.time_us.mean,
            record.time_us.p99,
            record.algbw_gbps,
            record.busbw_gbps,
            record.wrong
        );
        self.busbw_sum += record.busbw_gbps;
        self.sizes += 1;
        self.wrong += record.wrong;
        self.out.emit(record)?;
        Ok(())
    }

    /// Writes the footer; `error` when the run stopped early.
    pub fn finish(
        self,
        cfg: &RunConfig,
        ctx: &RecordContext,
        error: Option<String>,
    ) -> anyhow::Result<u64> {
        let avg = if self.sizes > 0 {
            self.busbw_sum / f64::from(self.sizes)
        } else {
            0.0
        };
        eprintln!(
            "# Out of bounds values : {} {}",
            self.wrong,
            if self.wrong == 0 { "OK" } else { "FAILED" }
        );
        eprintln!("# Avg bus bandwidth    : {avg:.3} GB/s");
        self.out.emit(&CollRunRecord {
            v: SCHEMA_VERSION,
            ts: now_ts(),
            labels: cfg.labels.clone(),
            op: cfg.op.name().into(),
            backend: ctx.backend.into(),
            ranks: ctx.ranks as u32,
            sizes: self.sizes,
            avg_busbw_gbps: avg,
            wrong: self.wrong,
            hosts: ctx.hosts,
            error,
            extra: Extra::new(),
        })?;
        Ok(self.wrong)
    }
}

/// Counts elements of `recv` that differ from the op's exactly known result on this rank.
pub fn count_wrong(
    op: Op,
    rank: usize,
    world: usize,
    shape: &Shape,
    p: &Params,
    recv: &[u8],
) -> u64 {
    (0..shape.recv_elems)
        .filter(|&i| p.dtype.load(recv, i) != op.expected(rank, world, shape, p, i))
        .count() as u64
}

/// A zeroed buffer of `elems` elements of `esz` bytes; an error naming it where the memory is
/// not there (an allocation failure would abort the process).
pub fn buffer(elems: usize, esz: usize, what: &str) -> anyhow::Result<Vec<u8>> {
    let fail = |bytes: String| {
        servbench::cli::failure(format!(
            "cannot allocate the {what} buffer ({bytes} bytes): lower -e"
        ))
    };
    let len = elems
        .checked_mul(esz)
        .ok_or_else(|| fail(format!("{elems} x {esz}")))?;
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| fail(len.to_string()))?;
    v.resize(len, 0);
    Ok(v)
}

/// Measures one size on the tcp backend (every rank calls this in step).
pub fn measure_tcp(
    comm: &Comm,
    cfg: &RunConfig,
    requested: u64,
    scratch: &mut Scratch,
) -> anyhow::Result<Measured> {
    let p = cfg.params();
    let shape = cfg.op.shape(requested, cfg.dtype, comm.world);
    let algo = cfg
        .op
        .resolve_algo(cfg.algo, shape.bytes)
        .map_err(servbench::cli::usage)?;
    let esz = cfg.dtype.size();
    let mut send = buffer(shape.send_elems, esz, "send")?;
    let mut recv = buffer(shape.recv_elems, esz, "receive")?;
    cfg.op.fill(comm.rank, &shape, &p, &mut send);
    let where_ = |e: crate::comm::CommError| {
        servbench::cli::failure(format!(
            "rank {}: {} at {} bytes: {e}",
            comm.rank,
            cfg.op.name(),
            shape.bytes
        ))
    };
    let mut once = |recv: &mut [u8]| {
        cfg.op
            .run_tcp(comm, algo, &p, &send, recv, scratch)
            .map_err(where_)
    };
    for _ in 0..cfg.warmup {
        once(&mut recv)?;
    }
    let mut samples = Vec::with_capacity(cfg.iters as usize);
    comm.barrier().map_err(where_)?;
    let start = Instant::now();
    match cfg.mode {
        Mode::Pipelined => {
            let mut prev = start;
            for _ in 0..cfg.iters {
                once(&mut recv)?;
                let now = Instant::now();
                samples.push((now - prev).as_secs_f64() * 1e6);
                prev = now;
            }
        }
        Mode::Latency => {
            for _ in 0..cfg.iters {
                comm.barrier().map_err(where_)?;
                let t = Instant::now();
                once(&mut recv)?;
                samples.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    let mut wrong = 0;
    if cfg.check {
        // Poison the output (all-ones bytes are NaN in every dtype) so a stale result cannot pass.
        recv.fill(0xff);
        once(&mut recv)?;
        wrong = count_wrong(cfg.op, comm.rank, comm.world, &shape, &p, &recv);
    }
    let totals = comm.sum_f64(&[wrong as f64]).map_err(where_)?;
    Ok(Measured {
        shape,
        algo: algo.name(),
        samples_us: samples,
        wrong: totals[0] as u64,
    })
}

/// Runs the whole sweep on the tcp backend, handing each size's result to `each` (on every rank).
pub fn sweep_tcp(
    comm: &Comm,
    cfg: &RunConfig,
    mut each: impl FnMut(Measured) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut scratch = Scratch::default();
    for &size in &cfg.sizes {
        each(measure_tcp(comm, cfg, size, &mut scratch)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_counts_each_wrong_element() {
        let p = Params {
            dtype: Dtype::Bf16,
            redop: RedOp::Sum,
            root: 0,
        };
        let allreduce = Op::named("allreduce").unwrap();
        let shape = allreduce.shape(2 * 10, Dtype::Bf16, 3);
        let mut recv = vec![0u8; shape.recv_elems * 2];
        for i in 0..shape.recv_elems {
            p.dtype
                .store(&mut recv, i, allreduce.expected(1, 3, &shape, &p, i));
        }
        assert_eq!(count_wrong(allreduce, 1, 3, &shape, &p, &recv), 0);
        p.dtype.store(&mut recv, 3, 1000.0);
        recv[10..12].fill(0xff); // NaN: never equal
        assert_eq!(count_wrong(allreduce, 1, 3, &shape, &p, &recv), 2);
    }

    #[test]
    fn sizes_sweep_like_nccl_tests() {
        assert_eq!(size_sweep(8, 64, 2).unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(size_sweep(8, 100, 4).unwrap(), vec![8, 32]);
        assert_eq!(size_sweep(8, 8, 1).unwrap(), vec![8]);
        assert!(size_sweep(0, 8, 2).is_err());
        assert!(size_sweep(16, 8, 2).is_err());
    }

    #[test]
    fn time_distribution_keeps_sub_microsecond_resolution_and_the_exact_mean() {
        let d = time_dist(&[10.25, 10.5, 11.0, 40.0]);
        assert_eq!(d.n, 4);
        assert!((d.mean - 17.9375).abs() < 1e-12);
        assert!((d.min - 10.25).abs() < 0.02, "{d:?}");
        assert!((d.max - 40.0).abs() < 0.05, "{d:?}");
    }
}
