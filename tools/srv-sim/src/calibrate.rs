//! `srv-sim --calibrate run.jsonl`: fits what the cost model cannot know about a real engine
//! on a real box (a fixed overhead per step, the achieved fractions of the card's memory
//! bandwidth and FLOP peaks, prefill's efficiency beside decode's) to measured load points
//! (loadgen's `summary` records: a C=1 point and a mid-concurrency point suffice), by running
//! `--predict` for each point and minimising the squared log errors of output tok/s, TTFT p50
//! and TPOT p50 (Nelder-Mead over the logs of the four figures). The card it writes is read
//! back with `--calibration FILE`. A fit that leaves a figure far off is refused, naming it.

use crate::cost::Roofline;
use crate::frontend::{FrontEnd, FrontEndPoint};
use crate::nelder::nelder_mead;
use crate::predict::{self, Engine, PREDICTED, SOURCE_LABEL};
use serde::{Deserialize, Serialize};
use servbench::cli;
use servbench::record::{Record, SummaryRecord};
use std::time::Duration;

/// `--calibrate`, `--calibration` and the refusal threshold.
#[derive(Debug, Clone, clap::Args)]
pub struct CalibrateArgs {
    /// Fit the engine's overhead and achieved fractions of the card to these measured points
    /// (loadgen records of the real engine) and print the calibration card
    #[arg(long, value_name = "RUN.jsonl", conflicts_with = "calibration")]
    pub calibrate: Option<String>,
    /// A calibration card written by --calibrate: its step overhead, achieved bandwidth and
    /// FLOP fractions and prefill efficiency apply to the --hardware card
    #[arg(long, value_name = "CARD.json")]
    pub calibration: Option<String>,
    /// Fit the step cost (overhead, achieved bandwidth and FLOP fractions, attention per KV
    /// token) and the server's front end (fixed, per stream in flight, per prompt token) to a
    /// `loadgen --step-grid` file and print the card (with --predict: predict with it)
    #[arg(long, value_name = "GRID.jsonl", conflicts_with_all = ["calibrate", "calibration"])]
    pub calibrate_from: Option<String>,
    /// --calibrate and --calibrate-from: the largest error (a fraction) a fitted figure may keep
    /// at any point (--calibrate-from: cells further off are named, left out and the rest refitted)
    #[arg(long, value_name = "F", default_value_t = 0.2)]
    pub max_residual: f64,
}

/// What `--calibrate` writes and `--calibration` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// The hardware card the fractions apply to, and the model the points were measured on.
    pub hardware: String,
    pub model: String,
    pub step_overhead_us: f64,
    /// Achieved memory bandwidth over the card's.
    pub bandwidth_fraction: f64,
    /// Achieved tensor throughput over the card's.
    pub flops_fraction: f64,
    /// Prefill's achieved throughput over decode's (1: as efficient).
    pub prefill_efficiency: f64,
    /// Seconds per 1000 KV-cache tokens a step's attention reads beyond the roofline's bytes
    /// and FLOPs, in microseconds (fitted from a step grid; 0 from load points).
    #[serde(default)]
    pub attention_us_per_kv_ktok: f64,
    /// The prefill chunk the grid's engine used (its largest step of one prompt), where it
    /// split a prompt: srv-sim's own is --max-prefill-tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_chunk_tokens: Option<u32>,
    /// The measured file, and each point's figures against the fitted model's.
    pub fitted_on: String,
    /// `--gemm-from FILE (batches ...)`: the GEMM time was taken as measured, not fitted, so
    /// the FLOP fraction scales attention only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_from: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub points: Vec<FitPoint>,
    /// `--calibrate-from`: each grid cell's step time, measured and modelled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cells: Vec<FitCell>,
    /// `--calibrate-from`: the server in front of the engine, fitted to the grid's requests
    /// (their TTFT less the engine's), and each grid point's measured against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front_end: Option<FrontEnd>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub front_end_points: Vec<FrontEndPoint>,
}

/// One measured point against the calibrated model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitPoint {
    pub concurrency: u32,
    pub input_len: u32,
    pub max_tokens: u32,
    /// [output tok/s, TTFT p50 ms, TPOT p50 ms], measured and modelled.
    pub measured: [f64; 3],
    pub modelled: [f64; 3],
}

/// One step-grid cell against the calibrated model (`--calibrate-from`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitCell {
    /// `decode` or `prefill`, the batch and the context per request, as the cell says.
    pub phase: String,
    pub batch: u32,
    pub context_tokens: f64,
    pub measured_ms: f64,
    pub modelled_ms: f64,
    /// Left out of the fit: off by more than --max-residual at the first fit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untrusted: bool,
}

const FIGURES: [&str; 3] = ["output tok/s", "TTFT p50", "TPOT p50"];

impl Calibration {
    /// Applies the card to a roofline: the fractions scale the achieved rates.
    pub fn apply(&self, r: &mut Roofline) {
        let rates = &mut r.dep.rates;
        rates.mem_bw_gbps *= self.bandwidth_fraction;
        rates.bf16_tflops *= self.flops_fraction;
        rates.fp8_tflops *= self.flops_fraction;
        rates.fp4_tflops *= self.flops_fraction;
        rates.source = format!("calibrated ({})", self.fitted_on);
        r.step_overhead = Duration::from_secs_f64(self.step_overhead_us * 1e-6);
        r.prefill_efficiency = self.prefill_efficiency;
        r.attention_s_per_kv_token = self.attention_us_per_kv_ktok * 1e-9;
        if let Some(f) = self.front_end {
            r.front_end = f;
        }
    }

    /// Reads a card, checking every figure.
    pub fn load(path: &str) -> anyhow::Result<Calibration> {
        let text = servbench::files::read_text(path, servbench::files::FileKind::Card)
            .map_err(|e| cli::usage(format!("--calibration: {e}")))?;
        let c: Calibration = serde_json::from_str(&text)
            .map_err(|e| cli::usage(format!("--calibration: {path}: {e}")))?;
        for (name, v, hi) in [
            ("step_overhead_us", c.step_overhead_us, 1e7),
            ("bandwidth_fraction", c.bandwidth_fraction, 10.0),
            ("flops_fraction", c.flops_fraction, 10.0),
            ("prefill_efficiency", c.prefill_efficiency, 10.0),
            ("attention_us_per_kv_ktok", c.attention_us_per_kv_ktok, 1e6),
        ] {
            let may_be_zero = matches!(name, "step_overhead_us" | "attention_us_per_kv_ktok");
            if !(v.is_finite() && v >= 0.0 && v <= hi) || (!may_be_zero && v == 0.0) {
                return Err(cli::usage(format!(
                    "--calibration: {path}: {name} is {v}: it must be a number in (0, {hi}] (rerun srv-sim --calibrate)"
                )));
            }
        }
        if let Some(Err(why)) = c.front_end.map(|f| f.check()) {
            return Err(cli::usage(format!("--calibration: {path}: {why}")));
        }
        Ok(c)
    }
}

/// A measured closed-loop point.
struct Measured {
    concurrency: u32,
    input_len: u32,
    max_tokens: u32,
    requests: u64,
    figures: [f64; 3],
}

fn measured_points(path: &str) -> anyhow::Result<Vec<Measured>> {
    let reader = servbench::jsonl::Source::parse(path)
        .open(false)
        .map_err(|e| cli::usage(format!("--calibrate: {e}")))?;
    let mut out = Vec::new();
    for line in reader {
        let line = line.map_err(|e| cli::usage(format!("--calibrate: {e}")))?;
        let Record::Summary(s) = line.record else {
            continue;
        };
        if s.labels.get(SOURCE_LABEL).map(String::as_str) == Some(PREDICTED) {
            continue;
        }
        if let Some(m) = point_of(&s) {
            out.push(m);
        }
    }
    if out.is_empty() {
        return Err(cli::usage(format!(
            "--calibrate: {path} holds no measured closed-loop summary with TTFT and TPOT (loadgen -c 1,8 --input-len N --max-tokens M against the engine writes them)"
        )));
    }
    Ok(out)
}

fn point_of(s: &SummaryRecord) -> Option<Measured> {
    let figures = [
        s.output_tok_s,
        s.ttft_ms.as_ref()?.p50,
        s.tpot_ms.as_ref()?.p50,
    ];
    (s.ok > 0 && figures.iter().all(|v| v.is_finite() && *v > 0.0)).then_some(Measured {
        concurrency: s.point.concurrency?,
        input_len: s.point.input_len?,
        max_tokens: s.point.max_tokens?,
        requests: s.ok,
        figures,
    })
}

/// The model's figures for every point under the parameters `x` (logs of overhead in us,
/// bandwidth fraction, FLOP fraction, prefill efficiency).
fn model(engine: &Engine, base: &Roofline, points: &[Measured], x: &[f64; 4]) -> Vec<[f64; 3]> {
    let card = card_of(x, base, "", Vec::new());
    let mut roofline = base.clone();
    card.apply(&mut roofline);
    let engine = Engine {
        roofline,
        ..engine.clone()
    };
    points
        .iter()
        .map(|p| {
            let s = predict::predict_closed(
                &engine,
                p.concurrency,
                p.requests,
                p.input_len,
                p.max_tokens,
            );
            [
                s.output_tok_s,
                s.ttft_ms.as_ref().map_or(f64::NAN, |d| d.p50),
                s.tpot_ms.as_ref().map_or(f64::NAN, |d| d.p50),
            ]
        })
        .collect()
}

fn card_of(x: &[f64; 4], base: &Roofline, fitted_on: &str, points: Vec<FitPoint>) -> Calibration {
    Calibration {
        hardware: base.dep.hw.name.clone(),
        model: base.dep.model.name.clone(),
        step_overhead_us: x[0].exp(),
        bandwidth_fraction: x[1].exp(),
        flops_fraction: x[2].exp(),
        prefill_efficiency: x[3].exp(),
        attention_us_per_kv_ktok: 0.0,
        prefill_chunk_tokens: None,
        fitted_on: fitted_on.to_string(),
        gemm_from: match &base.dep.gemm {
            servbench::presets::Gemm::Model => None,
            measured => Some(measured.source().to_string()),
        },
        points,
        cells: Vec::new(),
        front_end: None,
        front_end_points: Vec::new(),
    }
}

fn loss(measured: &[Measured], modelled: &[[f64; 3]]) -> f64 {
    let mut sum = 0.0;
    for (m, p) in measured.iter().zip(modelled) {
        for (modelled, measured) in p.iter().zip(&m.figures) {
            let e = (modelled / measured).ln();
            sum += if e.is_finite() { e * e } else { 1e6 };
        }
    }
    sum
}

/// Runs `--calibrate`: the fit, its refusal when a figure stays far off, else the card on stdout.
pub fn run(args: &CalibrateArgs, path: &str, engine: Engine) -> anyhow::Result<cli::Exit> {
    if !(args.max_residual.is_finite() && args.max_residual > 0.0) {
        return Err(cli::usage(
            "--max-residual must be a positive fraction (0.2 is 20%)",
        ));
    }
    let points = measured_points(path)?;
    let base = engine.roofline.clone();
    // Start: a tenth of the single stream's TPOT as overhead, half the card's peaks.
    let tpot = points.iter().map(|p| p.figures[2]).fold(f64::MAX, f64::min);
    let start = [(tpot * 100.0).max(1.0).ln(), 0.5f64.ln(), 0.5f64.ln(), 0.0];
    let objective = |x: &[f64; 4]| {
        // Fractions above 4x the card and overheads past 10 s are outside any real engine.
        if x[1] > 4f64.ln() || x[2] > 4f64.ln() || x[3] > 4f64.ln() || x[0] > 1e7f64.ln() {
            return f64::MAX;
        }
        loss(&points, &model(&engine, &base, &points, x))
    };
    // A restart from the first optimum gets out of a simplex that collapsed early.
    let first = nelder_mead(&objective, start, 800);
    let best = nelder_mead(&objective, first, 800);
    let modelled = model(&engine, &base, &points, &best);
    let fit: Vec<FitPoint> = points
        .iter()
        .zip(&modelled)
        .map(|(m, p)| FitPoint {
            concurrency: m.concurrency,
            input_len: m.input_len,
            max_tokens: m.max_tokens,
            measured: m.figures,
            modelled: *p,
        })
        .collect();
    let mut worst: Option<(f64, usize, usize)> = None;
    for (k, p) in fit.iter().enumerate() {
        for i in 0..3 {
            let off = p.modelled[i] / p.measured[i] - 1.0;
            if worst.is_none_or(|(w, _, _)| off.is_nan() || off.abs() > w.abs()) {
                worst = Some((off, k, i));
            }
        }
    }
    if let Some((off, k, i)) = worst
        && (off.is_nan() || off.abs() > args.max_residual)
    {
        let p = &fit[k];
        return Err(cli::failure(format!(
            "--calibrate {path}: the fit leaves {} at C={} in={} out={} {:+.0}% off (measured {:.4}, model {:.4}): the cost model cannot explain it with a step overhead, achieved bandwidth and FLOP fractions and a prefill efficiency; no card written (--max-residual {} accepts a looser fit)",
            FIGURES[i],
            p.concurrency,
            p.input_len,
            p.max_tokens,
            off * 100.0,
            p.measured[i],
            p.modelled[i],
            (off.abs() * 100.0).ceil() / 100.0,
        )));
    }
    let card = card_of(&best, &base, path, fit);
    cli::info(format!(
        "calibrated on {} point(s): step overhead {:.0} us, bandwidth x{:.3}, FLOPs x{:.3}, prefill efficiency {:.3}; worst figure {:+.1}%",
        card.points.len(),
        card.step_overhead_us,
        card.bandwidth_fraction,
        card.flops_fraction,
        card.prefill_efficiency,
        worst.map_or(0.0, |w| w.0 * 100.0)
    ));
    let text = serde_json::to_string_pretty(&card).expect("a card serializes");
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|_| out.flush())
        .map_err(servbench::jsonl::OutputError::from_io)?;
    Ok(cli::Exit::Ok)
}
