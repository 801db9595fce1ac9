//! Notes with `--roofline`: which bandwidth the limits use, rows against their limits (a rate
//! above one is impossible, a single stream far below its memory-bound limit gets what the
//! modelled step explains of the gap, expert parallelism the limits do not model), each point's
//! decode step against its parts, and without load points the per-token allreduce budget of
//! the `coll` records. The engine's own step beside the TPOT needs no roofline.

use crate::input::points::point_name;
use crate::notes::note::Facts;
use crate::render::human;
use crate::roofline::step::{PointStep, engine_step_lines, size};
use crate::roofline::{row_share, stream};
use servbench::presets::MeasuredCurve;
use servbench::record::label;

/// A single stream below this share of its memory-bound limit gets a note.
pub const SINGLE_STREAM_SHARE: f64 = 0.5;
/// Of such a stream, a modelled step at or above this share of the measured time explains it.
pub const STEP_EXPLAINS: f64 = 0.8;

/// Which bandwidth the limits use, where collbench measured the device (`device_limits`).
pub fn measured_bandwidth(facts: &Facts) -> Vec<String> {
    facts.bandwidth.iter().cloned().collect()
}

/// Rows whose measured rate is above a limit beyond the noise (3% and the rate's own 95%
/// interval): not a share, a sign that something fed to the comparison is wrong.
pub fn over_limit_note(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let Some(roof) = &facts.roofline else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in points {
        let Some(rate) = stream(p) else { continue };
        let lim = roof.limits(p, keys);
        let (which, limit) = if row_share(p, rate, lim.memory_tok_s).is_none() {
            (
                "memory-bound limit (weights + KV over bandwidth)",
                lim.memory_tok_s,
            )
        } else if row_share(p, rate, lim.step_tok_s).is_none() {
            ("modelled step's limit", lim.step_tok_s)
        } else {
            continue;
        };
        out.push(format!(
            "{} decodes {} tok/s per stream, {:.2}x the {which} of {} tok/s for {}{}: impossible, so the card (bandwidth, interconnect), the layout (tp/pp labels, --tp/--pp) or the data is wrong",
            point_name(p, &keys.varying),
            human(rate),
            rate / limit,
            human(limit),
            lim.dep.describe(),
            lim.spec_words()
        ));
    }
    out
}

/// A single stream (concurrency 1) decoding far below its memory-bound limit, and how much of
/// the gap the modelled step (communication, overhead) explains.
pub fn single_stream_note(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let Some(roof) = &facts.roofline else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in points.iter().filter(|p| p.params.concurrency == Some(1)) {
        let Some(rate) = stream(p) else { continue };
        let lim = roof.limits(p, keys);
        let mem_share = rate / lim.memory_tok_s;
        if mem_share >= SINGLE_STREAM_SHARE {
            continue;
        }
        // A speculative stream's step is its verify step: the step, its communication and the
        // time measured all per verify step (a per-token step beside a per-step communication
        // read "4.87 ms, of which communication 8.06 ms").
        let (tokens, step) = match &lim.spec {
            Some(s) => (
                s.per_step,
                format!("verify step of {:.2} tokens", s.per_step),
            ),
            None => (1.0, "step".to_string()),
        };
        let step_ms = tokens * 1000.0 / lim.step_tok_s;
        let measured_ms = tokens * 1000.0 / rate;
        let comm_ms = lim.step.comm_s * 1e3;
        let why = if step_ms >= STEP_EXPLAINS * measured_ms {
            format!(
                "the modelled {step} explains it ({} ms, of which communication {} ms): {}, not engine tuning",
                human(step_ms),
                human(comm_ms),
                roof.fewer_ranks_advice(lim.layout)
            )
        } else {
            format!(
                "the modelled {step} ({} ms, communication {} ms) explains only {:.0}% of the {} ms measured: no concurrency tuning fixes that; look at the engine (CUDA graphs, kernels, host overhead, quantization)",
                human(step_ms),
                human(comm_ms),
                100.0 * step_ms / measured_ms,
                human(measured_ms)
            )
        };
        out.push(format!(
            "single stream at {} decodes {} tok/s: {:.0}% of the memory-bound limit of {} tok/s (weights + KV over bandwidth) for {}{}; {why}",
            point_name(p, &keys.varying),
            human(rate),
            mem_share * 100.0,
            human(lim.memory_tok_s),
            lim.dep.describe(),
            lim.spec_words(),
        ));
    }
    out
}

/// Rows labelled with expert parallelism, which the limits do not model.
pub fn expert_parallel(facts: &Facts) -> Vec<String> {
    if facts.roofline.is_none() {
        return Vec::new();
    }
    let ep: Vec<String> = facts
        .points
        .iter()
        .filter(|p| p.labels.get(label::EP).is_some_and(|e| e.trim() != "1"))
        .map(|p| point_name(p, &facts.keys.varying))
        .collect();
    if ep.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "expert parallelism at {}: the limits treat the experts as split like TP and do not model its all-to-all",
        ep.join(", ")
    )]
}

/// Each point's decode step against its parts and its verdict (judged once, in
/// `roofline::step`; the decode table prints the same verdicts).
pub fn step_budget(facts: &Facts) -> Vec<String> {
    match facts.roofline {
        Some(_) => facts.steps.iter().map(PointStep::line).collect(),
        None => Vec::new(),
    }
}

/// The engine's step beside the TPOT where no budget line above printed it.
pub fn engine_step(facts: &Facts) -> Vec<String> {
    let judged: Vec<String> = match facts.roofline {
        Some(_) => facts.steps.iter().map(|s| s.name.clone()).collect(),
        None => Vec::new(),
    };
    engine_step_lines(facts.points, &judged)
}

/// Without load points: the per-token allreduce time at batch 1 in the `--tp` layout, from the
/// `coll` records (or `--comm-from`'s). With points, each point's step is judged in `roofline::step`.
pub fn decode_budget_without_points(facts: &Facts) -> Vec<String> {
    let coll = facts.inputs.coll.as_slice();
    let Some(roof) = &facts.roofline else {
        return Vec::new();
    };
    if !facts.points.is_empty() {
        return Vec::new();
    }
    let coll = match &roof.comm_from {
        Some((from, _)) if coll.is_empty() => from.as_slice(),
        _ => coll,
    };
    let tp = roof.tp.unwrap_or(1);
    let model = &roof.model;
    let Some(curve) = MeasuredCurve::from_records(coll, tp, false).filter(|_| tp > 1) else {
        return Vec::new();
    };
    let bytes = model.allreduce_bytes(1);
    let ms = f64::from(model.allreduces_per_step()) * curve.us_at(bytes) / 1000.0;
    let mut caveats = format!("; allreduce as measured: {}", curve.describe());
    if curve.ranks != tp {
        caveats.push_str(&format!(
            " (measured over {} ranks, the model runs TP={tp})",
            curve.ranks
        ));
    }
    if let Some(tcp) = curve.tcp_caveat() {
        caveats.push_str(&format!("; {tcp}"));
    }
    vec![format!(
        "decode budget for {} at TP={tp}: 2 x {} layers x allreduce of {} = {} ms per decoded token at batch 1{caveats}",
        roof.describe(),
        model.layers,
        size(bytes),
        human(ms),
    )]
}
