//! `srv-sim --calibrate-from GRID.jsonl`: the step cost fitted to a measured step grid
//! (`loadgen --step-grid`'s `step_cell` records), one step time per cell, no simulation in the
//! loop. The fit finds what the roofline cannot know about an engine on a box: a fixed overhead
//! per step, the achieved fractions of the card's memory bandwidth and FLOP peaks, and a time
//! per KV-cache token a step's attention reads beyond its bytes (Nelder-Mead over their logs,
//! minimising the squared log errors of the cells). Decode cells pin the overhead plus the
//! weights' read and the attention's slope in context; the prefill series, from memory-bound
//! short prompts to compute-bound long ones, separates the overhead from the FLOP rate. A
//! prefill cell is modelled chunk by chunk at the chunk its engine used. Cells still off by more
//! than --max-residual after the first fit are named as not trusted (a busy box, a cell the
//! model cannot explain) and left out of a second; too many of them refuse the fit. The server's
//! front end is fitted first, to the grid's requests ([`crate::frontend`]): a prefill cell timed
//! by the client's TTFT holds its point's measured front end beside its steps.

use crate::calibrate::{CalibrateArgs, Calibration, FitCell};
use crate::cost::Roofline;
use crate::nelder::nelder_mead;
use crate::step::StepShape;
use servbench::cli;
use servbench::presets::StepWork;
use servbench::record::{Record, StepCellRecord, StepPhase, StepSource};

/// A measured cell, as the fit reads it.
struct Cell {
    phase: StepPhase,
    batch: u32,
    context: f64,
    /// Tokens per prefill step (the prompt when not split).
    chunk: u32,
    client: bool,
    ms: f64,
    point_index: u32,
    /// A client-timed prefill cell: the front end its point's requests measured (their TTFT
    /// less the engine's), which its time holds beside the steps.
    front_end_ms: Option<f64>,
}

/// The `step_cell` records of `path`, checked.
fn cells(path: &str, max_step_tokens: u32) -> anyhow::Result<Vec<Cell>> {
    let reader = servbench::jsonl::Source::parse(path)
        .open(false)
        .map_err(|e| cli::usage(format!("--calibrate-from: {e}")))?;
    let mut out = Vec::new();
    for line in reader {
        let line = line.map_err(|e| cli::usage(format!("--calibrate-from: {e}")))?;
        let Record::StepCell(c) = line.record else {
            continue;
        };
        out.push(cell_of(&c, max_step_tokens).map_err(|why| {
            cli::usage(format!(
                "--calibrate-from: {path}: the step_cell of point {}: {why}",
                c.point_index
            ))
        })?);
    }
    if out.is_empty() {
        return Err(cli::usage(format!(
            "--calibrate-from: {path} holds no step_cell record (loadgen --step-grid -c 1,8,32 --input-len 128,1024 --max-tokens 64 against the engine writes them)"
        )));
    }
    Ok(out)
}

fn cell_of(c: &StepCellRecord, max_step_tokens: u32) -> Result<Cell, String> {
    let finite = |v: f64| v.is_finite() && v > 0.0;
    if !(finite(c.step_ms) && c.step_ms < 3.6e6) {
        return Err(format!("step_ms {} is not a time of (0, 1 h]", c.step_ms));
    }
    if !(finite(c.context_tokens) && c.context_tokens < 1e9) || c.batch == 0 {
        return Err(format!(
            "batch {} at {} context tokens is not a step",
            c.batch, c.context_tokens
        ));
    }
    let phase = match &c.phase {
        StepPhase::Other(p) => return Err(format!("phase `{p}` is neither decode nor prefill")),
        p => p.clone(),
    };
    let chunk = c
        .chunk_tokens
        .unwrap_or(c.input_len.min(max_step_tokens))
        .max(1);
    Ok(Cell {
        phase,
        batch: c.batch,
        context: c.context_tokens,
        chunk,
        client: !matches!(c.source, StepSource::EngineSteps),
        ms: c.step_ms,
        point_index: c.point_index,
        front_end_ms: None,
    })
}

/// The model's time for a cell, in ms.
fn modelled_ms(r: &Roofline, c: &Cell) -> f64 {
    match c.phase {
        StepPhase::Prefill => {
            let prompt = c.context.round() as u32;
            let mut done = 0u32;
            let mut s = 0.0;
            while done < prompt {
                let chunk = c.chunk.min(prompt - done);
                s += r.step_s(&StepShape {
                    seqs: 1,
                    work: StepWork {
                        decode_seqs: 0,
                        prefill_tokens: chunk,
                        kv_tokens: u64::from(done),
                    },
                    prefill_attention_pairs: u64::from(chunk)
                        * (u64::from(done) + u64::from(chunk).div_ceil(2)),
                    max_micro_batches: None,
                });
                done += chunk;
            }
            // The client's TTFT: the front end's time as well.
            let front_end = match (c.client, c.front_end_ms) {
                (false, _) => 0.0,
                (true, Some(ms)) => ms,
                (true, None) => r.front_end.ms(1, prompt),
            };
            s * 1e3 + front_end
        }
        _ => {
            let shape = StepShape {
                seqs: c.batch,
                work: StepWork {
                    decode_seqs: c.batch,
                    prefill_tokens: 0,
                    kv_tokens: (f64::from(c.batch) * c.context).round() as u64,
                },
                prefill_attention_pairs: 0,
                max_micro_batches: None,
            };
            r.step_s(&shape) * 1e3
        }
    }
}

/// The card of parameters `x` (logs of overhead in us, bandwidth and FLOP fractions, attention
/// in us per 1000 KV tokens) on `base`.
fn card_of(x: &[f64; 4], base: &Roofline, fitted_on: &str) -> Calibration {
    Calibration {
        hardware: base.dep.hw.name.clone(),
        model: base.dep.model.name.clone(),
        step_overhead_us: x[0].exp(),
        bandwidth_fraction: x[1].exp(),
        flops_fraction: x[2].exp(),
        prefill_efficiency: 1.0,
        attention_us_per_kv_ktok: x[3].exp(),
        prefill_chunk_tokens: None,
        fitted_on: fitted_on.to_string(),
        gemm_from: match &base.dep.gemm {
            servbench::presets::Gemm::Model => None,
            measured => Some(measured.source().to_string()),
        },
        points: Vec::new(),
        cells: Vec::new(),
        front_end: None,
        front_end_points: Vec::new(),
    }
}

fn applied(x: &[f64; 4], base: &Roofline) -> Roofline {
    let mut r = base.clone();
    card_of(x, base, "").apply(&mut r);
    r
}

/// The fitted parameters over the cells `use_`.
fn fit_on(base: &Roofline, cells: &[Cell], use_: &[bool]) -> [f64; 4] {
    let objective = |x: &[f64; 4]| {
        // Fractions past 4x the card, overheads past 10 s, attention past 1 s per 1000 tokens
        // or below 1 ps per token: outside any engine.
        if x[1] > 4f64.ln()
            || x[2] > 4f64.ln()
            || x[0] > 1e7f64.ln()
            || !(-20.0..=1e6f64.ln()).contains(&x[3])
        {
            return f64::MAX;
        }
        let r = applied(x, base);
        cells
            .iter()
            .zip(use_)
            .filter(|(_, u)| **u)
            .map(|(c, _)| {
                let e = (modelled_ms(&r, c) / c.ms).ln();
                if e.is_finite() { e * e } else { 1e6 }
            })
            .sum::<f64>()
    };
    // From a tenth of the fastest cell as overhead, at several guesses of the rest; each
    // optimum restarted once (a simplex that collapsed early).
    let fastest = cells.iter().map(|c| c.ms).fold(f64::MAX, f64::min);
    let overhead = (fastest * 100.0).max(1.0).ln();
    let mut best: Option<([f64; 4], f64)> = None;
    for (bw, flops, attention) in [(0.5, 0.5, 1.0), (0.1, 0.1, 10.0), (1.0, 1.0, 0.01)] {
        let start = [overhead, f64::ln(bw), f64::ln(flops), f64::ln(attention)];
        let x = nelder_mead(&objective, nelder_mead(&objective, start, 2000), 2000);
        let v = objective(&x);
        if best.is_none_or(|(_, b)| v < b) {
            best = Some((x, v));
        }
    }
    best.expect("three starts").0
}

/// Fits the grid of `path` on `base` (its measured GEMMs and allreduces kept as they are), with
/// a line per cell on stderr; refused when more than a quarter of the cells cannot be trusted.
pub fn fit(
    args: &CalibrateArgs,
    path: &str,
    base: &Roofline,
    max_step_tokens: u32,
) -> anyhow::Result<Calibration> {
    if !(args.max_residual.is_finite() && args.max_residual > 0.0) {
        return Err(cli::usage(
            "--max-residual must be a positive fraction (0.2 is 20%)",
        ));
    }
    let mut cells = cells(path, max_step_tokens)?;
    // The front end first: a client-timed prefill cell's TTFT holds it beside the steps.
    let front_end = match crate::frontend::fit(path)? {
        Ok((front_end, points)) => {
            for p in &points {
                cli::info(format!(
                    "front end at C={} in={}, {} requests: {:.3} ms measured, {:.3} ms modelled ({:+.1}%)",
                    p.streams,
                    p.input_len,
                    p.requests,
                    p.measured_ms,
                    p.modelled_ms,
                    (p.modelled_ms / p.measured_ms - 1.0) * 100.0
                ));
            }
            cli::info(format!(
                "front end (client TTFT less the engine's): {:.3} ms + {:.3} ms per stream in flight + {:.3} ms per 1000 prompt tokens",
                front_end.fixed_ms, front_end.per_stream_ms, front_end.per_prompt_ktok_ms
            ));
            Some((front_end, points))
        }
        Err(why) => {
            cli::info(format!("no front end fitted: {why}"));
            None
        }
    };
    for c in &mut cells {
        c.front_end_ms = front_end.as_ref().and_then(|(_, points)| {
            let p = points.iter().find(|p| p.point_index == c.point_index)?;
            Some(p.measured_ms)
        });
    }
    let mut base = base.clone();
    base.step_overhead = std::time::Duration::ZERO;
    base.front_end = front_end.as_ref().map(|f| f.0).unwrap_or_default();
    let all = vec![true; cells.len()];
    let first = fit_on(&base, &cells, &all);
    let r = applied(&first, &base);
    let trusted: Vec<bool> = cells
        .iter()
        .map(|c| (modelled_ms(&r, c) / c.ms - 1.0).abs() <= args.max_residual)
        .collect();
    let left_out = trusted.iter().filter(|t| !**t).count();
    if left_out * 4 > cells.len() {
        return Err(cli::failure(format!(
            "--calibrate-from {path}: {left_out} of {} cells stay more than {:.0}% off the fitted step cost: the grid is too noisy or the engine is not what the cost model describes; no card (--max-residual accepts a looser fit)",
            cells.len(),
            args.max_residual * 100.0
        )));
    }
    let best = if left_out > 0 {
        fit_on(&base, &cells, &trusted)
    } else {
        first
    };
    let r = applied(&best, &base);
    let mut card = card_of(&best, &base, path);
    (card.front_end, card.front_end_points) =
        front_end.map_or((None, Vec::new()), |(f, p)| (Some(f), p));
    card.prefill_chunk_tokens = cells
        .iter()
        .filter(|c| c.phase == StepPhase::Prefill && (c.chunk as f64) < c.context.round())
        .map(|c| c.chunk)
        .max();
    for (c, t) in cells.iter().zip(&trusted) {
        let m = modelled_ms(&r, c);
        let note = match (t, c.client) {
            (false, _) => "  (not trusted: left out)",
            (true, true) => "  (client-timed)",
            _ => "",
        };
        cli::info(format!(
            "cell {} batch {} context {:.0}: measured {:.3} ms, model {:.3} ms ({:+.1}%){note}",
            c.phase,
            c.batch,
            c.context,
            c.ms,
            m,
            (m / c.ms - 1.0) * 100.0
        ));
        card.cells.push(FitCell {
            phase: c.phase.to_string(),
            batch: c.batch,
            context_tokens: c.context,
            measured_ms: c.ms,
            modelled_ms: m,
            untrusted: !t,
        });
    }
    cli::info(format!(
        "calibrated on {} cell(s){}: step overhead {:.0} us, bandwidth x{:.3}, FLOPs x{:.3}, attention {:.4} us per 1000 KV tokens{}",
        cells.len() - left_out,
        if left_out > 0 {
            format!(" ({left_out} left out)")
        } else {
            String::new()
        },
        card.step_overhead_us,
        card.bandwidth_fraction,
        card.flops_fraction,
        card.attention_us_per_kv_ktok,
        card.prefill_chunk_tokens.map_or(String::new(), |c| format!(
            ", prefill in chunks of {c} tokens"
        ))
    ));
    if let Some(c) = card.prefill_chunk_tokens
        && c != max_step_tokens
    {
        cli::warn(format!(
            "--calibrate-from {path}: the grid's engine prefilled in chunks of {c} tokens; srv-sim's --max-prefill-tokens is {max_step_tokens} (give --max-prefill-tokens {c} to schedule as it did)"
        ));
    }
    Ok(card)
}

/// `--calibrate-from` alone: the card on stdout.
pub fn run(
    args: &CalibrateArgs,
    path: &str,
    base: &Roofline,
    max_step_tokens: u32,
) -> anyhow::Result<cli::Exit> {
    let card = fit(args, path, base, max_step_tokens)?;
    let text = serde_json::to_string_pretty(&card).expect("a card serializes");
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|_| out.flush())
        .map_err(servbench::jsonl::OutputError::from_io)?;
    Ok(cli::Exit::Ok)
}
