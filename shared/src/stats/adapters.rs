//! LoRA mixes, per adapter: each adapter's requests together, so an adapter swapped in and out
//! of the engine's slots can be set against the others. Fed by
//! [`super::PointStats::add_request`] from the `adapter` of each request record.

use super::Hist;
use crate::record::{AdapterSummary, RequestRecord};
use std::collections::BTreeMap;

/// The requests of one adapter.
#[derive(Debug, Clone, Default, PartialEq)]
struct Adapter {
    requests: u64,
    ok: u64,
    ttft: Hist,
    tpot: Hist,
    output_tokens: u64,
}

/// Per-adapter accumulators of one point (empty when no request named an adapter).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ByAdapter(BTreeMap<String, Adapter>);

impl ByAdapter {
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(name) = &r.adapter else { return };
        // The name is allocated once per adapter, not once per request.
        let a = match self.0.get_mut(name.as_str()) {
            Some(a) => a,
            None => self.0.entry(name.clone()).or_default(),
        };
        a.requests += 1;
        if !r.is_ok() {
            return;
        }
        a.ok += 1;
        a.output_tokens += u64::from(r.output_tokens);
        if let Some(v) = r.ttft_ms {
            a.ttft.record_ms(v);
        }
        if let Some(v) = r.tpot_ms {
            a.tpot.record_ms(v);
        }
    }

    pub fn merge(&mut self, other: &ByAdapter) {
        for (k, o) in &other.0 {
            let a = self.0.entry(k.clone()).or_default();
            a.requests += o.requests;
            a.ok += o.ok;
            a.output_tokens += o.output_tokens;
            a.ttft.merge(&o.ttft);
            a.tpot.merge(&o.tpot);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each adapter's figures, its tokens over the point's wall window of `secs` seconds.
    pub fn summaries(&self, secs: f64) -> Vec<AdapterSummary> {
        self.0
            .iter()
            .map(|(name, a)| AdapterSummary {
                adapter: name.clone(),
                requests: a.requests,
                ok: a.ok,
                ttft_ms: a.ttft.dist_ms(),
                tpot_ms: a.tpot.dist_ms(),
                output_tokens: a.output_tokens,
                output_tok_s: if secs > 0.0 {
                    a.output_tokens as f64 / secs
                } else {
                    0.0
                },
            })
            .collect()
    }
}
