//! Batch means: a point's uncertainty from time blocks within it. The requests of a point are
//! not independent samples: closed-loop requests of equal length start and end in waves one
//! latency apart, so a spread computed over requests (stddev / sqrt(n)) is far too narrow, and
//! two identical runs differ by more than it. Cut the point's wall window into blocks at least
//! [`BLOCK_E2E`] mean latencies long, compute every figure per block, and the spread of the
//! block figures gives the point's interval with as many independent samples as blocks: the
//! standard batch-means estimate of a time series' mean.

use super::{MeanCi, Span};
use crate::record::BatchNoise;
use crate::record::nearest_rank;
use std::collections::BTreeMap;

/// A block spans at least this many mean request latencies (E2E): closed-loop waves are one
/// latency apart, so blocks this long are about uncorrelated.
pub const BLOCK_E2E: f64 = 2.0;
/// The most blocks a point is cut into (more buys little: the interval narrows as 1/sqrt).
pub const MAX_BLOCKS: usize = 10;
/// Fewer blocks than this (a point under six latencies long) give no estimate.
pub const MIN_BLOCKS: usize = 3;

/// The latency figures estimated per block, by statistic name.
const STATS: [(&str, Option<f64>); 6] = [
    ("mean", None),
    ("p50", Some(0.5)),
    ("p90", Some(0.9)),
    ("p95", Some(0.95)),
    ("p99", Some(0.99)),
    ("p999", Some(0.999)),
];

/// The batch-means noise of a point's successful requests over its wall window `(from, to)`
/// (ms); `None` when the window holds fewer than [`MIN_BLOCKS`] blocks.
pub(super) fn batch_noise(spans: &[Span], (from, to): (f64, f64)) -> Option<BatchNoise> {
    let wall = to - from;
    if spans.is_empty() || !wall.is_finite() || wall <= 0.0 {
        return None;
    }
    let mean_e2e = spans.iter().map(|s| s.end_ms - s.start_ms).sum::<f64>() / spans.len() as f64;
    if !mean_e2e.is_finite() || mean_e2e <= 0.0 {
        return None;
    }
    let k = ((wall / (BLOCK_E2E * mean_e2e)).floor() as usize).min(MAX_BLOCKS);
    if k < MIN_BLOCKS {
        return None;
    }
    let len = wall / k as f64;
    let block_of = |t: f64| (((t - from) / len).max(0.0) as usize).min(k - 1);
    let mut tokens = vec![0.0; k];
    let mut done = vec![0.0; k];
    // ttft, tpot, e2e: the requests that started in each block.
    let mut latencies: [Vec<Vec<f64>>; 3] = std::array::from_fn(|_| vec![Vec::new(); k]);
    for s in spans {
        spread_tokens(&mut tokens, s, from, len);
        done[block_of(s.end_ms)] += 1.0;
        let b = block_of(s.start_ms);
        latencies[0][b].push(s.first_ms - s.start_ms);
        latencies[2][b].push(s.end_ms - s.start_ms);
        if let Some(t) = s.tpot_ms {
            latencies[1][b].push(t);
        }
    }
    let per_s = |v: &[f64]| -> Vec<f64> { v.iter().map(|x| x * 1000.0 / len).collect() };
    let mut hw95 = BTreeMap::new();
    let mut put = |name: String, values: &[f64]| {
        if let Some(hw) = MeanCi::of(values).and_then(|m| m.half_width)
            && hw.is_finite()
        {
            hw95.insert(name, hw);
        }
    };
    put("output_tok_s".into(), &per_s(&tokens));
    put("req_s".into(), &per_s(&done));
    for (field, blocks) in ["ttft_ms", "tpot_ms", "e2e_ms"].iter().zip(&mut latencies) {
        // Blocks no request started in (the drain at the end) have nothing to say.
        let mut blocks: Vec<&mut Vec<f64>> = blocks.iter_mut().filter(|b| !b.is_empty()).collect();
        if blocks.len() < MIN_BLOCKS {
            continue;
        }
        for b in &mut blocks {
            b.sort_by(f64::total_cmp);
        }
        for (stat, q) in STATS {
            let values: Vec<f64> = blocks
                .iter()
                .filter_map(|b| match q {
                    None => Some(b.iter().sum::<f64>() / b.len() as f64),
                    // A block's quantile stands for it only with a sample above it (else it
                    // is the block's maximum, and the point's tail is not their mean).
                    Some(q) if (b.len() as f64) * (1.0 - q) >= 1.0 => Some(nearest_rank(b, q)),
                    Some(_) => None,
                })
                .collect();
            if values.len() >= MIN_BLOCKS {
                put(format!("{field}_{stat}"), &values);
            }
        }
    }
    Some(BatchNoise {
        blocks: k as u32,
        block_s: len / 1000.0,
        independent_requests: ((wall / mean_e2e) as u64).clamp(1, spans.len() as u64),
        hw95,
    })
}

/// A request's tokens spread evenly between its first and last token, into the blocks that
/// interval overlaps (as the steady-state window counts them).
fn spread_tokens(tokens: &mut [f64], s: &Span, from: f64, len: f64) {
    let k = tokens.len();
    let block_of = |t: f64| (((t - from) / len).max(0.0) as usize).min(k - 1);
    let span = s.end_ms - s.first_ms;
    if span <= 0.0 {
        tokens[block_of(s.first_ms)] += f64::from(s.tokens);
        return;
    }
    for (b, slot) in tokens
        .iter_mut()
        .enumerate()
        .take(block_of(s.end_ms) + 1)
        .skip(block_of(s.first_ms))
    {
        let (lo, hi) = (from + b as f64 * len, from + (b + 1) as f64 * len);
        let overlap = (s.end_ms.min(hi) - s.first_ms.max(lo)).max(0.0);
        *slot += f64::from(s.tokens) * overlap / span;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start_ms: f64, ttft: f64, e2e: f64) -> Span {
        Span {
            start_ms,
            first_ms: start_ms + ttft,
            end_ms: start_ms + e2e,
            tokens: 10,
            tpot_ms: Some((e2e - ttft) / 9.0),
        }
    }

    #[test]
    fn waves_of_equal_requests_give_blocks_of_about_two_latencies() {
        // C=4 closed loop, 100 ms requests, 30 waves: 3 s, blocks of at least 200 ms.
        let spans: Vec<Span> = (0..30)
            .flat_map(|w| (0..4).map(move |_| span(w as f64 * 100.0, 10.0, 100.0)))
            .collect();
        let n = batch_noise(&spans, (0.0, 3000.0)).unwrap();
        assert_eq!(n.blocks, 10);
        assert!((n.block_s - 0.3).abs() < 1e-9);
        // 120 requests in 30 waves: 30 independent latencies.
        assert_eq!(n.independent_requests, 30);
        // Identical waves: every block decodes the same; the figures are certain.
        assert!(n.hw95["ttft_ms_p50"] < 1e-9, "{:?}", n.hw95);
        // 12 requests a block: a p90 per block, no p95 (it would be each block's maximum).
        assert!(n.hw95.contains_key("ttft_ms_p90"));
        assert!(!n.hw95.contains_key("ttft_ms_p95"), "{:?}", n.hw95);
        assert!(n.hw95["output_tok_s"] < 1e-6, "{:?}", n.hw95);
    }

    #[test]
    fn a_point_shorter_than_six_latencies_has_no_estimate() {
        let spans: Vec<Span> = (0..5)
            .map(|w| span(w as f64 * 100.0, 10.0, 100.0))
            .collect();
        assert_eq!(batch_noise(&spans, (0.0, 500.0)), None);
    }

    #[test]
    fn blocks_that_differ_widen_the_interval() {
        // TTFT alternates between 10 ms and 50 ms from one 1 s stretch to the next.
        let spans: Vec<Span> = (0..100)
            .map(|i| {
                let t = i as f64 * 100.0;
                let ttft = if (i / 10) % 2 == 0 { 10.0 } else { 50.0 };
                span(t, ttft, 100.0)
            })
            .collect();
        let n = batch_noise(&spans, (0.0, 10_000.0)).unwrap();
        // 10 blocks of 1 s, five at 10 ms and five at 50: sd 21.1, t(9) 2.262 / sqrt(10).
        let hw = n.hw95["ttft_ms_p50"];
        assert!((hw - 2.262 * 21.08 / 10f64.sqrt()).abs() < 0.1, "{hw}");
    }
}
