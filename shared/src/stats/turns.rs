//! Conversation points, per turn index: every session's turn k together, so turn 1 (a cold
//! prompt) can be set against later turns (a growing history, much of it in the prefix
//! cache). Fed by [`super::PointStats::add_request`] from the `turn` of each request record.

use super::Hist;
use crate::record::{RequestRecord, TurnSummary};
use std::collections::BTreeMap;

/// The requests of one turn index.
#[derive(Debug, Clone, Default, PartialEq)]
struct Turn {
    requests: u64,
    ok: u64,
    ttft: Hist,
    e2e: Hist,
    prompt_tokens: (u64, u64),
    cached_tokens: (u64, u64),
}

/// Per-turn accumulators of one point (empty when no request carried a turn).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ByTurn(BTreeMap<u32, Turn>);

impl ByTurn {
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(turn) = r.turn else { return };
        let t = self.0.entry(turn).or_default();
        t.requests += 1;
        if !r.is_ok() {
            return;
        }
        t.ok += 1;
        if let Some(v) = r.ttft_ms {
            t.ttft.record_ms(v);
        }
        if let Some(v) = r.e2e_ms {
            t.e2e.record_ms(v);
        }
        if let Some(p) = r.prompt_tokens {
            t.prompt_tokens.0 += u64::from(p);
            t.prompt_tokens.1 += 1;
        }
        if let Some(c) = r.cached_tokens {
            t.cached_tokens.0 += u64::from(c);
            t.cached_tokens.1 += 1;
        }
    }

    pub fn merge(&mut self, other: &ByTurn) {
        for (k, o) in &other.0 {
            let t = self.0.entry(*k).or_default();
            t.requests += o.requests;
            t.ok += o.ok;
            t.ttft.merge(&o.ttft);
            t.e2e.merge(&o.e2e);
            t.prompt_tokens.0 += o.prompt_tokens.0;
            t.prompt_tokens.1 += o.prompt_tokens.1;
            t.cached_tokens.0 += o.cached_tokens.0;
            t.cached_tokens.1 += o.cached_tokens.1;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn summaries(&self) -> Vec<TurnSummary> {
        let mean = |(sum, n): (u64, u64)| (n > 0).then(|| sum as f64 / n as f64);
        self.0
            .iter()
            .map(|(&turn, t)| TurnSummary {
                turn,
                requests: t.requests,
                ok: t.ok,
                ttft_ms: t.ttft.dist_ms(),
                e2e_ms: t.e2e.dist_ms(),
                prompt_tokens_mean: mean(t.prompt_tokens),
                cached_tokens_mean: mean(t.cached_tokens),
            })
            .collect()
    }
}
