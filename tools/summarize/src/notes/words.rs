//! The words and thresholds the notes share: how a point is named by its load, what a load
//! series is, what tells runs apart, and the thresholds of the notes on a sweep. Thresholds are
//! constants here (a note's own, used by it alone, sit beside it) and in the README; a change
//! inside the runs' noise never triggers a note.

use crate::input::param::{fmt_rate, is_load_key};
use crate::input::points::{Keys, Point, point_name};
use servbench::record::Labels;
use std::collections::BTreeMap;

/// A note fires on a throughput drop or shortfall only beyond this share and beyond the noise.
pub const MIN_DROP: f64 = 0.05;
/// Below this relative gain from one load to the next (after real gains), throughput has
/// saturated.
pub const KNEE_GAIN: f64 = 0.10;
/// A gain that counts as "still scaling" before the knee.
pub const SCALING_GAIN: f64 = 0.25;
/// TTFT p99 above this multiple of p50 means requests queue.
pub const TTFT_TAIL_RATIO: f64 = 3.0;
/// With fewer successes than this, the TTFT tail must also show at p95 ...
pub const TAIL_TRUSTED: u64 = 500;
/// ... above this multiple of p50.
pub const TTFT_P95_RATIO: f64 = 2.0;
/// Tokens per chunk above this: several tokens arrive per SSE event (the roofline's speculative
/// rule, `roofline::spec`, reads it too).
pub use crate::roofline::spec::TPC_ABOVE;
/// Send lag p99 above this (ms): the client did not send on time.
pub const SEND_LAG_P99_MS: f64 = 5.0;
/// Requests needed before a p99 means anything.
pub const MIN_FOR_P99: u64 = 20;

/// The label that tells runs of the same experiment apart (scripts/relaunch-and-rerun.sh,
/// loadgen --label run=NAME).
pub const RUN_LABEL: &str = servbench::record::label::RUN;
/// The labels without the run's name: what makes two runs' points the same point.
pub fn without_run(labels: &Labels) -> Labels {
    let mut l = labels.clone();
    l.remove(RUN_LABEL);
    l
}

/// ` (run=round2)`, or nothing for a point with no run label.
pub fn run_of(p: &Point) -> String {
    p.labels
        .get(RUN_LABEL)
        .map_or(String::new(), |r| format!(" ({RUN_LABEL}={r})"))
}

fn load(p: &Point) -> Option<f64> {
    p.params
        .concurrency
        .map(f64::from)
        .or_else(|| p.params.rate_rps())
}

pub fn load_name(p: &Point) -> String {
    match (p.params.concurrency, p.params.rate_rps()) {
        (Some(c), _) => format!("C={c}"),
        (None, Some(r)) => format!("rate={}/s", fmt_rate(r)),
        _ => "the point".into(),
    }
}

/// A point whose throughput can be compared: not cut short, with successes. (Partial points
/// and failures get their own note.)
fn complete(p: &Point) -> bool {
    !p.partial && p.repeats.iter().any(|s| s.ok > 0)
}

/// Points that differ only in their load, in increasing load: a concurrency or rate sweep.
pub fn series(points: &[Point]) -> Vec<Vec<&Point>> {
    let mut by: BTreeMap<_, Vec<&Point>> = BTreeMap::new();
    for p in points.iter().filter(|p| load(p).is_some() && complete(p)) {
        let closed = p.params.concurrency.is_some();
        let shape = (p.params.input_len, p.params.max_tokens, p.params.images);
        by.entry((&p.labels, shape, closed)).or_default().push(p);
    }
    by.into_values()
        .map(|mut s| {
            s.sort_by(|a, b| load(a).unwrap_or(0.0).total_cmp(&load(b).unwrap_or(0.0)));
            s
        })
        .filter(|s| s.len() >= 2)
        .collect()
}

/// The series' name without its load: `engine=vllm out=2048`, or empty.
pub fn series_name(p: &Point, keys: &Keys) -> String {
    let varying: Vec<String> = keys
        .varying
        .iter()
        .filter(|k| !is_load_key(k))
        .cloned()
        .collect();
    if varying.is_empty() {
        String::new()
    } else {
        format!(" ({})", point_name(p, &varying))
    }
}
