//! What every collective run shares around the measure loop (nccl-tests' common.cu): the run's
//! configuration, the size sweep, the exact correctness check, the bandwidth formulas, the
//! records and the table. The loop itself (warmup, timing modes) is `measure.rs`; the backends
//! (`tcp.rs`, `nccl/`) run it for each size.

use crate::dtype::{Dtype, RedOp};
use crate::measure::{Iters, Mode};
use crate::ops::{Algo, Op, Params, Shape};
use servbench::jsonl::RecordWriter;
use servbench::record::{CollRecord, CollRunRecord, Dist, Extra, Labels, SCHEMA_VERSION, now_ts};
use servbench::stats::Hist;
use std::io::Write;
use std::time::Duration;

/// Everything one run measures, the same on every rank.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub op: Op,
    pub algo: Algo,
    pub sizes: Vec<u64>,
    pub iters: Iters,
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
            self.iters.timed,
            self.iters.warmup,
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
    /// Times a rank lost its core while waiting for a peer, summed over ranks (tcp).
    pub lost_core: u64,
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
        iters: cfg.iters.timed,
        warmup: cfg.iters.warmup,
        root: cfg.op.rooted().then_some(cfg.root as u32),
        lost_core_waits: (m.lost_core > 0).then_some(m.lost_core),
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
            cfg.iters.timed,
            cfg.iters.warmup
        );
        eprintln!(
            "#{:>12} {:>12} {:>6} {:>18} {:>10} {:>10} {:>10} {:>9} {:>9} {:>7}",
            "size(B)",
            "count",
            "type",
            "algo",
            "time(us)",
            "p50(us)",
            "p99(us)",
            "algbw",
            "busbw",
            "#wrong"
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
            " {:>12} {:>12} {:>6} {:>18} {:>10.2} {:>10.2} {:>10.2} {:>9.3} {:>9.3} {:>7}",
            record.bytes,
            record.count,
            record.dtype,
            record.algo,
            record.time_us.mean,
            record.time_us.p50,
            record.time_us.p99,
            record.algbw_gbps,
            record.busbw_gbps,
            record.wrong,
        );
        // Another process had the CPU: the row's times carry scheduler delays.
        if let Some(n) = record.lost_core_waits {
            eprintln!(
                "# contended: the ranks lost their core {n}x while waiting at {} bytes (another \
                 process wants the CPU): the mean carries scheduler delays, the p50 less so",
                record.bytes
            );
        }
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
