//! `--client-gap-from RUN.jsonl`: the modelled client's gap measured from the run being
//! predicted instead of guessed. In a closed loop, streams that end in one step free their
//! slots together, and their re-sent requests reach the engine one after another; which step
//! each joins depends on that spacing. Each re-sent request's arrival at the engine, on the
//! client's clock, is its first token's receipt less the engine's own TTFT (`server_timing`,
//! which srv-sim and vLLM send with `--enable-per-request-metrics`): send + TTFT − engine TTFT,
//! late by the first token's way back, which is about the same for every request. The gap is
//! the mean spacing of consecutive arrivals within one step's wave: spacings under half the
//! point's median inter-token gap (a step), pooled over the file's closed-loop points. The
//! request latency is measured with it: the median TTFT less the engine's, over every request.

use servbench::cli;
use servbench::record::Record;
use std::collections::BTreeMap;
use std::time::Duration;

/// What the run tells about the client.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredGap {
    /// The mean spacing of a wave's re-sent arrivals; zero where no two arrived in one step
    /// (C=1: the gap then changes nothing).
    pub gap: Duration,
    /// The median of each request's TTFT less the engine's (send to the engine's queue, and
    /// the first token's way back): the modelled client's request latency.
    pub request_latency: Duration,
    /// Spacings within a wave the mean was taken over.
    pub spacings: usize,
    /// Re-sent requests read (closed-loop requests past each point's first C).
    pub resent: usize,
}

/// One closed-loop point's successful re-sent requests: arrival estimates and inter-token gaps.
#[derive(Default)]
struct Point {
    arrivals_ms: Vec<f64>,
    itl_ms: Vec<f64>,
}

/// Reads the run and measures the gap, or says in one line what the file lacks.
pub fn measure(path: &str) -> anyhow::Result<MeasuredGap> {
    let flag = "--client-gap-from";
    let reader = servbench::jsonl::Source::parse(path)
        .open(true)
        .map_err(|e| cli::usage(format!("{flag}: {e}")))?;
    let mut points: BTreeMap<(u32, u32, u32, u32, u32), Point> = BTreeMap::new();
    let mut untimed = 0usize;
    let mut overheads_ms = Vec::new();
    let mut e2e_ms = Vec::new();
    let mut ahead = 0usize;
    for line in reader {
        let line = line.map_err(|e| cli::usage(format!("{flag}: {e}")))?;
        let Record::Request(ref r) = line.record else {
            continue;
        };
        let (Some(c), None) = (r.point.concurrency, r.point.rate_rps) else {
            continue;
        };
        if !r.is_ok() {
            continue;
        }
        let Some(ttft) = r.ttft_ms else { continue };
        let Some(engine_ttft) = r.server_timing.as_ref().and_then(|t| t.ttft_ms) else {
            untimed += 1;
            continue;
        };
        let overhead = ttft - engine_ttft;
        let arrival = r.intended_ms + r.send_lag_ms + overhead;
        if !arrival.is_finite() || r.itl_ms.iter().any(|x| !x.is_finite()) {
            return Err(cli::usage(format!(
                "{flag}: {}: a time is not a finite number (rerun loadgen)",
                line.location()
            )));
        }
        // The engine's first token cannot reach the client before the engine made it: such a
        // request's timing is not this client's (another clock, an edited file).
        if overhead < 0.0 {
            ahead += 1;
            continue;
        }
        overheads_ms.push(overhead);
        e2e_ms.extend(r.e2e_ms.filter(|e| e.is_finite()));
        if r.id < u64::from(c) {
            continue;
        }
        let key = (
            r.point.index,
            c,
            r.point.input_len.unwrap_or(0),
            r.point.max_tokens.unwrap_or(0),
            r.point.repeat,
        );
        let p = points.entry(key).or_default();
        p.arrivals_ms.push(arrival);
        p.itl_ms.extend_from_slice(&r.itl_ms);
    }
    if ahead > 0 {
        cli::warn(format!(
            "{flag} {path}: {ahead} request(s) whose engine TTFT exceeds the client's left out (their server_timing is not this client's)"
        ));
    }
    let resent: usize = points.values().map(|p| p.arrivals_ms.len()).sum();
    if resent == 0 {
        let why = if ahead > 0 && untimed == 0 {
            "every usable request's engine TTFT exceeds the client's: its server_timing is not this run's"
        } else if untimed > 0 {
            "its requests carry no server_timing: serve with --enable-per-request-metrics (srv-sim, vLLM)"
        } else {
            "it holds no successful closed-loop request past a point's first C: run loadgen -c C -n N with N > C"
        };
        return Err(cli::usage(format!("{flag}: {path}: {why}")));
    }
    let mut spacings = Vec::new();
    for p in points.values_mut() {
        let Some(step_ms) = median(&mut p.itl_ms) else {
            continue;
        };
        p.arrivals_ms.sort_by(f64::total_cmp);
        spacings.extend(
            p.arrivals_ms
                .windows(2)
                .map(|w| w[1] - w[0])
                .filter(|d| *d < step_ms / 2.0),
        );
    }
    // The mean, not the median: the model spreads a wave of k over (k - 1) gaps, so the mean
    // spacing gives the wave the span it had.
    let gap_ms = if spacings.is_empty() {
        0.0
    } else {
        spacings.iter().sum::<f64>() / spacings.len() as f64
    };
    // A request's latency is part of its time from send to end: above the run's median request
    // time it is not a latency but a broken record (TTFTs of hours), and is bounded there.
    let mut latency_ms = median(&mut overheads_ms).unwrap_or(0.0);
    if let Some(bound) = median(&mut e2e_ms)
        && latency_ms > bound
    {
        cli::warn(format!(
            "{flag} {path}: a request latency of {latency_ms:.1} ms (TTFT less the engine's) is longer than the run's median request time, {bound:.1} ms: bounded to it (are the file's TTFTs right?)"
        ));
        latency_ms = bound;
    }
    Ok(MeasuredGap {
        gap: Duration::from_secs_f64(gap_ms.max(0.0) / 1e3),
        request_latency: Duration::from_secs_f64(latency_ms / 1e3),
        spacings: spacings.len(),
        resent,
    })
}

/// The middle value (the lower of the two middle ones), or None for no values.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| servbench::record::nearest_rank(v, 0.5))
}
