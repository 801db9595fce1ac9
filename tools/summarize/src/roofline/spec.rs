//! A speculative run's tokens per verify step: what its limits and its decode step are divided
//! by (the roofline judges the verify step, not one token's).

use crate::input::metrics::Metric;
use crate::input::points::Point;

/// Tokens per chunk above this: several tokens arrive per SSE event (speculative decoding or
/// batched streaming). The notes share it (`notes::words`).
pub const TPC_ABOVE: f64 = 1.05;

/// Tokens one speculative verify step emits per stream, and which figure says so.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecTokens {
    pub per_step: f64,
    /// Draft tokens per verify step, when the server said.
    pub draft_len: Option<f64>,
    pub from: &'static str,
}

/// The server's acceptance figures (its mean accepted length per verify step, the bonus token
/// included) when loadgen recorded them; tokens per SSE chunk above 1.05 only when loadgen read
/// no server view at all (a server whose view has no speculative figures is not speculating:
/// its chunks carry several tokens because the stream was batched, under load or by design),
/// counted after each request's first chunk as TPOT is (the first is the prefill's one token:
/// with it, 16 tokens in 7 chunks read 2.29 per step where the 6 verify steps TPOT spans emit
/// 2.50, and a stream at its limit read as over it). None for a run that emits one token per
/// step.
pub fn spec_tokens(p: &Point) -> Option<SpecTokens> {
    let server: Vec<(f64, Option<f64>)> = p
        .repeats
        .iter()
        .filter_map(|s| {
            let spec = s.server.as_ref()?.spec.as_ref()?;
            let drafts = spec.draft_len.filter(|d| d.is_finite() && *d > 0.0);
            // Engines that count drafted and accepted tokens only (llama.cpp): 1 + accepted
            // per verify step.
            let len = spec
                .mean_accepted_len
                .or_else(|| Some(1.0 + spec.draft_acceptance? * drafts?))
                .filter(|l| l.is_finite() && *l >= 1.0)?;
            Some((len, drafts))
        })
        .collect();
    if !server.is_empty() {
        let n = server.len() as f64;
        let per_step = server.iter().map(|s| s.0).sum::<f64>() / n;
        let drafts: Vec<f64> = server.iter().filter_map(|s| s.1).collect();
        return (per_step > 1.0).then_some(SpecTokens {
            per_step,
            draft_len: (!drafts.is_empty())
                .then(|| drafts.iter().sum::<f64>() / drafts.len() as f64),
            from: "the server's mean accepted length",
        });
    }
    if p.repeats.iter().any(|s| s.server.is_some()) {
        return None;
    }
    let tpc = p.mean(Metric::TPC)?;
    if tpc <= TPC_ABOVE {
        return None;
    }
    let after_first: Vec<f64> = p.repeats.iter().filter_map(after_first_chunk).collect();
    let per_step = match after_first.as_slice() {
        [] => tpc,
        some => some.iter().sum::<f64>() / some.len() as f64,
    };
    (per_step > 1.0).then_some(SpecTokens {
        per_step,
        draft_len: None,
        from: "tokens per chunk after the first, no server view",
    })
}

/// A run's tokens per chunk after each request's first chunk: (tokens - ok) / (chunks - ok).
fn after_first_chunk(s: &servbench::record::SummaryRecord) -> Option<f64> {
    let tpc = s.tokens_per_chunk.filter(|t| t.is_finite() && *t > 0.0)?;
    let tokens = s.output_tokens as f64;
    let chunks = tokens / tpc;
    let later = chunks - s.ok as f64;
    (s.ok > 0 && later >= 1.0 && tokens > s.ok as f64).then(|| (tokens - s.ok as f64) / later)
}
