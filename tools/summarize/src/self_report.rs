//! Notes from the engine's own per-request timing (the summaries' `ttft_split`): where a
//! point's TTFT goes, in the engine's queue, its prefill, or outside it; and requests whose
//! server TTFT exceeds the client's (a note, never a negative share).

use crate::points::{Keys, Point, point_name};
use crate::table::human;
use servbench::record::TtftSplit;

/// Outside the engine above this share of the client TTFT: the note says it dominates.
pub const OUTSIDE_SHARE: f64 = 0.5;
/// The engine's queue above this share of the client TTFT, and at least [`QUEUE_MIN_MS`]:
/// requests waited for a place in the batch.
pub const QUEUE_SHARE: f64 = 0.25;
pub const QUEUE_MIN_MS: f64 = 1.0;

/// The split of each repeat with requests in it.
fn splits(p: &Point) -> impl Iterator<Item = &TtftSplit> {
    p.repeats
        .iter()
        .filter_map(|s| s.ttft_split.as_ref())
        .filter(|t| t.requests > 0)
}

/// Mean over repeats of `f` of the split.
fn mean(p: &Point, f: impl Fn(&TtftSplit) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = splits(p).filter_map(f).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

pub fn ttft_mostly_outside(points: &[Point], keys: &Keys) -> Vec<String> {
    let hits: Vec<String> = points
        .iter()
        .filter_map(|p| {
            let client = mean(p, |t| Some(t.client_ttft_ms))?;
            let outside = mean(p, |t| Some(t.outside_ms))?;
            (client > 0.0 && outside > OUTSIDE_SHARE * client).then(|| {
                format!(
                    "{} ({} of {} ms)",
                    point_name(p, &keys.varying),
                    human(outside),
                    human(client)
                )
            })
        })
        .collect();
    if hits.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "TTFT is mostly outside the engine: the client, the network or the frontend, at {}",
        hits.join(", ")
    )]
}

pub fn engine_queue_waits(points: &[Point], keys: &Keys) -> Vec<String> {
    points
        .iter()
        .filter_map(|p| {
            let client = mean(p, |t| Some(t.client_ttft_ms))?;
            let queue = mean(p, |t| t.engine_queue_ms)?;
            (queue >= QUEUE_MIN_MS && queue > QUEUE_SHARE * client).then(|| {
                format!(
                    "requests waited {} ms in the engine's queue: the batch was full, at {} (of a {} ms TTFT)",
                    human(queue),
                    point_name(p, &keys.varying),
                    human(client)
                )
            })
        })
        .collect()
}

pub fn server_ttft_over_client(points: &[Point], keys: &Keys) -> Vec<String> {
    points
        .iter()
        .filter_map(|p| {
            let over: u64 = splits_all(p).map(|t| t.server_over_client).sum();
            let by = splits_all(p)
                .filter_map(|t| t.server_over_client_max_ms)
                .fold(0.0, f64::max);
            (over > 0).then(|| {
                format!(
                    "{over} requests at {} had a server TTFT above their client TTFT (by up to {} ms): the clocks or the definitions differ; left out of the TTFT split",
                    point_name(p, &keys.varying),
                    human(by)
                )
            })
        })
        .collect()
}

/// Every repeat's split, those with no request in the split too.
fn splits_all(p: &Point) -> impl Iterator<Item = &TtftSplit> {
    p.repeats.iter().filter_map(|s| s.ttft_split.as_ref())
}
