//! The compute half of a decode step, from collbench's `gemm`, `gemm_step` and
//! `device_limits` records: their tables, the measured bandwidth the roofline may use instead
//! of the datasheet's, and the decode budget: one step at a point's batch split into allreduce,
//! GEMMs, launch overhead and the rest, summing to the measured TPOT.

use crate::efficiency::{self, Roofline};
use crate::metrics::Metric;
use crate::points::{Keys, Point, point_name};
use crate::table::{Cell, Column, Table, human};
use servbench::presets::MeasuredCurve;
use servbench::record::{CollRecord, DecodeRecord, DeviceLimitsRecord, GemmRecord, GemmStepRecord};

fn col(name: &str, header: &str) -> Column {
    Column {
        name: name.into(),
        header: header.into(),
    }
}

/// One row per timed GEMM: time, TFLOP/s and bytes/s against the card's peaks.
pub fn gemm_table(gemms: &[GemmRecord]) -> Table {
    let mut t = Table::new(
        "gemms",
        vec![
            col("backend", "backend"),
            col("model", "model"),
            col("tp", "TP"),
            col("batch", "batch"),
            col("gemm", "gemm"),
            col("mnk", "m x n x k"),
            col("dtype", "dtype"),
            col("per_step", "per step"),
            col("time_us_p50", "p50 us"),
            col("tflops", "TFLOP/s"),
            col("gbps", "GB/s"),
            col("peak_pct", "% peak FLOP/s"),
            col("bw_pct", "% peak BW"),
        ],
    );
    for g in gemms {
        t.push(
            vec![
                Cell::Text(g.backend.clone()),
                Cell::Text(g.model.clone().unwrap_or_default()),
                Cell::int(g.tp),
                Cell::int(g.batch),
                Cell::Text(g.name.clone()),
                Cell::Text(format!("{}x{}x{}", g.m, g.n, g.k)),
                Cell::Text(g.dtype.clone()),
                Cell::int(g.per_step),
                Cell::num(Some(g.time_us.p50)),
                Cell::num(Some(g.tflops)),
                Cell::num(Some(g.gbps)),
                Cell::num(Some(100.0 * g.tflops / g.peak_tflops.max(1e-9))),
                Cell::num(Some(100.0 * g.gbps / g.peak_mem_gbps.max(1e-9))),
            ],
            0,
        );
    }
    if gemms.iter().any(|g| g.backend == "cpu") {
        t.notes.push(
            "backend cpu: these GEMMs ran on this machine's cores in f32; the peaks are the hardware card's, for scale only".into(),
        );
    }
    t
}

/// One row per measurement of the device's limits.
pub fn limits_table(limits: &[DeviceLimitsRecord]) -> Table {
    let mut t = Table::new(
        "device limits",
        vec![
            col("backend", "backend"),
            col("device", "device"),
            col("bytes", "bytes"),
            col("copy_gbps", "copy GB/s"),
            col("read_gbps", "read GB/s"),
            col("datasheet_gbps", "datasheet GB/s"),
            col("launch_us", "launch us"),
            col("launch_sync_us", "launch+sync us"),
        ],
    );
    for l in limits {
        t.push(
            vec![
                Cell::Text(l.backend.clone()),
                Cell::Text(l.device.clone()),
                Cell::int(l.bytes),
                Cell::num(Some(l.copy_gbps)),
                Cell::num(Some(l.read_gbps)),
                Cell::num(Some(l.datasheet_mem_gbps)),
                Cell::num(Some(l.launch_us.p50)),
                Cell::num(l.launch_sync_us.map(|d| d.p50)),
            ],
            0,
        );
    }
    t
}

/// The measured memory bandwidth for the roofline: the better of copy and read from a GPU
/// measurement (a CPU's figure says nothing about a GPU card), with the words that say so.
pub fn measured_bandwidth(limits: &[DeviceLimitsRecord]) -> Option<(f64, String)> {
    limits
        .iter()
        .filter(|l| l.backend != "cpu")
        .map(|l| {
            let (gbps, how) = if l.read_gbps >= l.copy_gbps {
                (l.read_gbps, "read kernel")
            } else {
                (l.copy_gbps, "device copy")
            };
            let text = format!(
                "memory bandwidth measured: {} GB/s ({how} on {}, datasheet {} GB/s)",
                human(gbps),
                l.device,
                human(l.datasheet_mem_gbps)
            );
            (gbps, text)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// The roofline with the measured bandwidth in place of the card's, and the note saying so.
pub fn with_measured_bandwidth(
    roof: &Roofline,
    limits: &[DeviceLimitsRecord],
) -> (Roofline, Option<String>) {
    match measured_bandwidth(limits) {
        Some((gbps, text)) => {
            let mut r = roof.clone();
            r.measured_bw = Some((gbps, text.clone()));
            (r, Some(format!("roofline limits use the {text}")))
        }
        None if !limits.is_empty() => (
            roof.clone(),
            Some("roofline limits use the datasheet bandwidth: the measured one is a CPU's".into()),
        ),
        None => (roof.clone(), None),
    }
}

/// Where a part of the step's time comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Measured on this backend (`tcp`, `nccl`).
    Measured(String),
    /// None measured: the roofline's link model.
    Modelled,
    /// TP=1: no allreduce.
    None,
}

/// One decode step at one point, in milliseconds: the parts sum to `tpot_ms` exactly (the
/// rest is whatever the measured parts leave, negative when they exceed the step).
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub batch: u32,
    pub tpot_ms: f64,
    pub allreduce_ms: f64,
    pub allreduce_from: Source,
    pub gemm_ms: f64,
    pub launch_ms: f64,
    pub rest_ms: f64,
    /// The GEMM records' backend (`cpu` is said in the line).
    pub gemm_backend: String,
    /// The batch the GEMMs were measured at, when it is not the point's.
    pub gemm_batch: Option<u32>,
}

impl Budget {
    /// The part that takes longest, as a verdict.
    pub fn verdict(&self) -> String {
        if self.rest_ms < 0.0 {
            return format!(
                "the measured parts exceed the step by {} ms: the engine overlaps them or runs faster kernels than these",
                human(-self.rest_ms)
            );
        }
        let parts = [
            (self.allreduce_ms, "communication-bound"),
            (self.gemm_ms, "compute-bound"),
            (
                self.launch_ms,
                "launch-bound: CUDA graphs or fewer, larger kernels would help",
            ),
            (
                self.rest_ms,
                "the rest dominates: attention, sampling and scheduling",
            ),
        ];
        let (_, verdict) = parts
            .iter()
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .expect("four parts");
        (*verdict).to_string()
    }

    pub fn line(&self, point: &str) -> String {
        let from = match &self.allreduce_from {
            Source::Measured(b) if b == "tcp" => {
                "measured over tcp between processes, not NCCL on GPUs".to_string()
            }
            Source::Measured(b) => format!("measured, {b}"),
            Source::Modelled => "modelled".to_string(),
            Source::None => "none at TP=1".to_string(),
        };
        let gemm_from = match (self.gemm_backend.as_str(), self.gemm_batch) {
            ("cpu", Some(b)) => format!("measured on the CPU at batch {b}"),
            ("cpu", None) => "measured on the CPU".to_string(),
            (_, Some(b)) => format!("measured at batch {b}"),
            _ => "measured".to_string(),
        };
        format!(
            "{point}: per step at batch {}: allreduce {} ms ({from}), GEMMs {} ms ({gemm_from}), launch overhead {} ms (measured), the rest {} ms (attention, sampling, scheduling) of a {} ms TPOT: {}",
            self.batch,
            human(self.allreduce_ms),
            human(self.gemm_ms),
            human(self.launch_ms),
            human(self.rest_ms),
            human(self.tpot_ms),
            self.verdict()
        )
    }
}

/// The `gemm_step` record for the roofline's model at `tp` nearest `batch` (exact first).
fn nearest_step<'a>(
    steps: &'a [GemmStepRecord],
    roof: &Roofline,
    tp: u32,
    batch: u32,
) -> Option<&'a GemmStepRecord> {
    steps
        .iter()
        .filter(|s| s.model == roof.model.name && s.tp == tp)
        .min_by_key(|s| s.batch.abs_diff(batch))
}

/// Allreduce time per step (ms) of a point: `decode` records of the same model, TP and batch
/// first (exactly the step's sizes), then the `coll` curve (the inputs', else `--comm-from`'s),
/// else the deployment's model.
fn allreduce_ms(
    decode: &[DecodeRecord],
    coll: &[CollRecord],
    roof: &Roofline,
    limits: &efficiency::Limits,
    batch: u32,
) -> (f64, Source) {
    let tp = limits.layout.tp;
    if tp <= 1 {
        return (0.0, Source::None);
    }
    let per_step = f64::from(roof.model.allreduces_per_step());
    if let Some(d) = decode
        .iter()
        .find(|d| d.model == roof.model.name && d.tp == tp && d.batch == batch)
    {
        return (
            per_step * d.allreduce_us.mean / 1000.0,
            Source::Measured(d.backend.clone()),
        );
    }
    let coll = match &roof.comm_from {
        Some((from, _)) if coll.is_empty() => from.as_slice(),
        _ => coll,
    };
    if let Some(curve) = MeasuredCurve::from_records(coll, tp, false) {
        let us = curve.us_at(roof.model.allreduce_bytes(batch));
        return (
            per_step * us / 1000.0,
            Source::Measured(curve.backend.clone()),
        );
    }
    (limits.step.comm_s * 1e3, Source::Modelled)
}

/// The budget of one step at a point's batch (its concurrency), when GEMMs were measured for
/// the roofline's model at the point's TP and the point has a TPOT.
pub fn budget(
    p: &Point,
    keys: &Keys,
    inputs: &crate::input::Inputs,
    roof: &Roofline,
) -> Option<Budget> {
    let batch = p.params.concurrency.unwrap_or(1).max(1);
    let tpot_ms = p.mean(Metric::TPOT_P50)?;
    let limits = roof.limits(p, keys);
    let step = nearest_step(&inputs.gemm_steps, roof, limits.layout.tp, batch)?;
    let (allreduce_ms, allreduce_from) =
        allreduce_ms(&inputs.decode, &inputs.coll, roof, &limits, batch);
    let gemm_ms = step.gemm_us_per_step / 1000.0;
    let launch_ms = step.launch_overhead_us_per_step / 1000.0;
    Some(Budget {
        batch,
        tpot_ms,
        allreduce_ms,
        allreduce_from,
        gemm_ms,
        launch_ms,
        rest_ms: tpot_ms - allreduce_ms - gemm_ms - launch_ms,
        gemm_backend: step.backend.clone(),
        gemm_batch: (step.batch != batch).then_some(step.batch),
    })
}

/// The decode budget line of every point that has one.
pub fn budget_lines(
    points: &[Point],
    inputs: &crate::input::Inputs,
    roof: &Roofline,
) -> Vec<String> {
    let keys = Keys::of(points);
    points
        .iter()
        .filter_map(|p| Some(budget(p, &keys, inputs, roof)?.line(&point_name(p, &keys.varying))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(tpot: f64, parts: [f64; 3]) -> Budget {
        Budget {
            batch: 1,
            tpot_ms: tpot,
            allreduce_ms: parts[0],
            allreduce_from: Source::Measured("nccl".into()),
            gemm_ms: parts[1],
            launch_ms: parts[2],
            rest_ms: tpot - parts.iter().sum::<f64>(),
            gemm_backend: "cublas".into(),
            gemm_batch: None,
        }
    }

    fn limits(backend: &str, read: f64, copy: f64) -> DeviceLimitsRecord {
        let line = format!(
            r#"{{"kind":"device_limits","ts":"2026-12-01T05:00:00.000Z","backend":"{backend}","device":"NVIDIA H200","hardware":"h200","bytes":1073741824,"copy_us":{{"n":1,"mean":1,"stddev":0,"min":1,"p50":1,"p90":1,"p95":1,"p99":1,"p999":1,"max":1}},"copy_gbps":{copy},"read_us":{{"n":1,"mean":1,"stddev":0,"min":1,"p50":1,"p90":1,"p95":1,"p99":1,"p999":1,"max":1}},"read_gbps":{read},"launch_us":{{"n":1,"mean":1,"stddev":0,"min":1,"p50":1,"p90":1,"p95":1,"p99":1,"p999":1,"max":1}},"datasheet_mem_gbps":4800,"iters":1,"warmup":0}}"#
        );
        match servbench::record::Record::parse(&line).unwrap() {
            servbench::record::Record::DeviceLimits(l) => l,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_gpu_measured_bandwidth_replaces_the_datasheet_and_says_so() {
        let roof = Roofline::of("llama-3.1-8b", "h200").unwrap();
        let layout = servbench::presets::Layout::default();
        let datasheet = roof.deployment(layout).decode_step(1, 0).memory_s;
        let (measured, note) = with_measured_bandwidth(&roof, &[limits("cublas", 4000.0, 3000.0)]);
        let dep = measured.deployment(layout);
        assert_eq!(dep.rates.mem_bw_gbps, 4000.0);
        assert!(
            dep.rates.source.contains("measured"),
            "{}",
            dep.rates.source
        );
        // Weight bytes over 4000 instead of 4800 GB/s.
        let step = dep.decode_step(1, 0).memory_s;
        assert!(
            (step / datasheet - 4800.0 / 4000.0).abs() < 1e-9,
            "{step} {datasheet}"
        );
        let note = note.unwrap();
        assert!(
            note.contains("4000 GB/s (read kernel on NVIDIA H200, datasheet 4800 GB/s)"),
            "{note}"
        );
        // A CPU's bandwidth never stands in for a GPU card's.
        let (same, note) = with_measured_bandwidth(&roof, &[limits("cpu", 20.0, 15.0)]);
        assert!(same.measured_bw.is_none());
        assert!(note.unwrap().contains("datasheet"));
    }

    #[test]
    fn the_notes_example_reads_compute_bound_and_sums_to_the_step() {
        let b = budget(95.0, [8.9, 61.0, 3.0]);
        assert!((b.allreduce_ms + b.gemm_ms + b.launch_ms + b.rest_ms - b.tpot_ms).abs() < 1e-12);
        let line = b.line("C=1");
        assert_eq!(
            line,
            "C=1: per step at batch 1: allreduce 8.90 ms (measured, nccl), GEMMs 61.0 ms (measured), launch overhead 3.00 ms (measured), the rest 22.1 ms (attention, sampling, scheduling) of a 95.0 ms TPOT: compute-bound"
        );
        assert!(
            budget(95.0, [60.0, 20.0, 3.0])
                .verdict()
                .starts_with("communication")
        );
        assert!(
            budget(95.0, [5.0, 20.0, 3.0])
                .verdict()
                .starts_with("the rest")
        );
        assert!(
            budget(10.0, [5.0, 20.0, 3.0])
                .verdict()
                .contains("exceed the step by 18.0 ms")
        );
    }
}
