//! How noisy one run's figure is, from that run alone (no repeats): its time blocks (the
//! summary's batch-means `noise`) and the spread of its requests counted by its waves, the
//! rules the comparisons' verdicts rest on (README, "Noise").

use crate::input::metrics::{DistName, Metric, Scalar, Stat};
use servbench::record::SummaryRecord;
use servbench::stats::blocks::{BLOCK_E2E, MIN_BLOCKS};
use servbench::stats::{Hist, t95};

/// n q (1 - q) below this: too few samples around a quantile to bound it.
pub const MIN_TAIL_SAMPLES: f64 = 5.0;
/// A point without time blocks needs this many waves (independent samples) for any interval,
/// as time blocks need three blocks.
pub const MIN_WAVES: u64 = 3;

impl Metric {
    /// Half-width of a 95% interval for this metric from one run alone (no repeats), or
    /// `None` when the run carries nothing to estimate it from. The rules (README, "Noise"):
    /// - percentiles: the distribution-free interval of the quantile from the histogram at n
    ///   independent samples (its waves: [`independent_requests`]), when the point has time
    ///   blocks or all its requests give n q (1 - q) >= 5 (else unknown: a p99 needs 500+);
    /// - means: t(n - 1) x stddev / sqrt(n);
    /// - throughput: a rate is tokens over time, and time is driven by request latency, so its
    ///   relative noise is that of the mean end-to-end latency: t(n - 1) x CV(e2e) / sqrt(n);
    /// - none of them (unknown) for a point of fewer than three waves without time blocks, and
    ///   no quantile past every sample but one (a p99 of fewer than 100 requests);
    /// - at a short closed-loop point of several streams, TTFT and E2E at least, and the rates
    ///   by its share of the latency, the wait for a step in flight ([`alignment_ms`]).
    ///
    /// Requests of one point are not independent (closed-loop waves), so where the summary
    /// carries its batch-means noise (time blocks within the point), the larger of the two
    /// is taken: see [`Metric::batch_noise`].
    pub fn single_run_noise(&self, s: &SummaryRecord) -> Option<f64> {
        // A quantile past every sample but the last is the maximum, whatever the blocks say
        // (a TTFT p99 of 20 requests is the one slow request: 300 against 280 ms was "better").
        if let Metric::Dist(d, st) = self
            && let Some(q) = st.quantile()
            && (d.of(s)?.n as f64) * q.min(1.0 - q) < 1.0
        {
            return None;
        }
        let sampling = self.sampling_noise(s);
        let noise = match (self.batch_noise(s), sampling) {
            (Some(b), Some(n)) => Some(b.max(n)),
            (b, n) => b.or(n),
        }?;
        let Some(wait) = alignment_ms(s) else {
            return Some(noise);
        };
        match self {
            Metric::Dist(DistName::Ttft | DistName::Ttfo | DistName::E2e, _) => {
                Some(noise.max(wait))
            }
            Metric::Scalar(
                Scalar::ReqS
                | Scalar::OutputTokS
                | Scalar::TotalTokS
                | Scalar::SteadyTokS
                | Scalar::GoodputReqS,
            ) => {
                // Each wave's time moves by the wait: the rate by its share of the latency.
                let e2e = s.e2e_ms.as_ref().map(|d| d.mean).filter(|m| *m > 0.0)?;
                let value = self.value(s)?;
                Some(noise.max(value.abs() * wait / e2e))
            }
            _ => Some(noise),
        }
    }

    /// Half-width of the 95% interval from the point's time blocks (`noise` of the summary):
    /// latencies and the two rates by name; the other rates carry the relative noise of the
    /// rate they derive from (total and steady tokens: output tokens; goodput: requests;
    /// per-stream tok/s: TPOT p50).
    pub fn batch_noise(&self, s: &SummaryRecord) -> Option<f64> {
        let noise = s.noise.as_ref()?;
        let value = self.value(s)?;
        let relative = |name: &str, of: f64| -> Option<f64> {
            let hw = noise.hw95.get(name)?;
            (of > 0.0).then(|| value.abs() * hw / of)
        };
        match self {
            Metric::Dist(d, st) => noise
                .hw95
                .get(&format!("{}_{}", d.field(), st.short()))
                .copied(),
            Metric::Scalar(Scalar::ReqS) => noise.hw95.get("req_s").copied(),
            Metric::Scalar(Scalar::OutputTokS) => noise.hw95.get("output_tok_s").copied(),
            Metric::Scalar(Scalar::TotalTokS | Scalar::SteadyTokS) => {
                relative("output_tok_s", s.output_tok_s)
            }
            Metric::Scalar(Scalar::GoodputReqS) => relative("req_s", s.req_s),
            Metric::Scalar(Scalar::StreamTokS) => relative("tpot_ms_p50", s.tpot_ms.as_ref()?.p50),
            Metric::Scalar(_) => None,
        }
    }

    /// The noise of one run's figure from its requests' spread, counting as many independent
    /// samples as the point's waves allow ([`independent_requests`]).
    fn sampling_noise(&self, s: &SummaryRecord) -> Option<f64> {
        let value = self.value(s)?;
        // Each answer is judged on its own, whatever wave it came in: a binomial share.
        let judged = match self {
            Metric::Scalar(Scalar::AccuracyPct) => s.eval.as_ref(),
            Metric::Scalar(Scalar::JsonValidPct) => s.json_validity.as_ref(),
            _ => None,
        };
        if let Some(e) = judged {
            let (lo, hi) = wilson95(e.correct, e.judged)?;
            return Some((value - 100.0 * lo).max(100.0 * hi - value).max(0.0));
        }
        // A point of one or two waves and no time blocks cannot say how far a relaunch moves
        // it: the first wave's alignment with the engine's steps sets the rest (three identical
        // PP8 launches at C=32, two waves each, were called 1.17x better and 0.93x worse).
        if s.noise.is_none() && independent_requests(s) < MIN_WAVES {
            return None;
        }
        let independent = |n: u64| independent_requests(s).min(n);
        // Student's t for the few samples a short point has (the normal 1.96 at many).
        let t = |n: u64| t95(n.saturating_sub(1).max(1) as usize);
        match self {
            Metric::Dist(d, st) => {
                if let Some(q) = st.quantile() {
                    let hist = Hist::decode(s.hist.get(d.field())?).ok()?;
                    // Without time blocks, the interval leans on the normal approximation of a
                    // binomial count, which needs n q (1 - q) >= 5: a p99 of 100 samples is one
                    // sample's say.
                    let n = hist.len() as f64;
                    if s.noise.is_none() && n * q * (1.0 - q) < MIN_TAIL_SAMPLES {
                        return None;
                    }
                    // Discounted for waves, the interval holds at any size (ranks past the
                    // end clamp to the extremes): a p50 of two waves spans both.
                    let (lo, hi) = hist.quantile_ci95_ms_of(q, independent(hist.len()))?;
                    Some((value - lo).max(hi - value).max(0.0))
                } else if *st == Stat::Mean {
                    let dist = d.of(s)?;
                    let n = independent(dist.n);
                    (n > 0).then(|| t(n) * dist.stddev / (n as f64).sqrt())
                } else {
                    None
                }
            }
            Metric::Scalar(
                Scalar::ReqS
                | Scalar::OutputTokS
                | Scalar::TotalTokS
                | Scalar::SteadyTokS
                | Scalar::GoodputReqS,
            ) => {
                let e2e = s.e2e_ms.as_ref()?;
                if e2e.mean <= 0.0 || s.ok == 0 {
                    return None;
                }
                let n = independent(s.ok).max(1);
                Some(value.abs() * t(n) * (e2e.stddev / e2e.mean) / (n as f64).sqrt())
            }
            Metric::Scalar(Scalar::StreamTokS) => {
                // 1000/p50: the p50's relative interval carries over.
                let hw = Metric::TPOT_P50.single_run_noise(s)?;
                let p50 = Metric::TPOT_P50.value(s)?;
                (p50 > 0.0).then(|| value * hw / p50)
            }
            Metric::Scalar(_) => None,
        }
    }
}

/// The 95% Wilson score interval of a share of `hits` in `n` (None for no trial): unlike the
/// normal approximation it stays inside 0..1 and is not zero-width at 0% or 100%.
pub fn wilson95(hits: u64, n: u64) -> Option<(f64, f64)> {
    if n == 0 {
        return None;
    }
    let (n, z) = (n as f64, 1.959_963_984_540_054);
    let p = hits.min(n as u64) as f64 / n;
    let z2n = z * z / n;
    let center = (p + z2n / 2.0) / (1.0 + z2n);
    let half = z / (1.0 + z2n) * (p * (1.0 - p) / n + z2n / (4.0 * n)).sqrt();
    Some(((center - half).max(0.0), (center + half).min(1.0)))
}

/// How long a wave of a short closed-loop point may have waited for a step in flight, which a
/// relaunch can add or take away: none for one stream, open loop, or a point of time blocks or
/// as many waves as they need (six latencies: loadgen gives such points their blocks). A wave
/// that arrives while a step runs (a prefill of the wave before, or of its own first request
/// alone) waits for its end, and in a closed loop the first wave's luck repeats in every wave
/// after it, so the point's requests all share it and their spread does not show it (three
/// identical Kimi-K2 PP8 launches at C=32: TTFT 620 ms in each, a fourth 360 ms). A step is
/// no longer than a wave's own prefill: the wait is at most the point's shortest TTFT.
pub fn alignment_ms(s: &SummaryRecord) -> Option<f64> {
    let waves = (BLOCK_E2E * MIN_BLOCKS as f64) as u64;
    if s.noise.is_some()
        || s.point.concurrency.is_none_or(|c| c < 2)
        || independent_requests(s) >= waves
    {
        return None;
    }
    s.ttft_ms
        .as_ref()
        .map(|t| t.min)
        .filter(|m| m.is_finite() && *m > 0.0)
}

/// How many of a run's requests are independent samples: closed-loop requests of equal length
/// start and end in waves, and the requests of one wave share their fate (above all the first
/// wave's, whose alignment with the engine's steps sets where later waves fall). So a point
/// counts its window over its mean latency, about its waves: the batch-means record's figure
/// where the point has time blocks, else the same figure from its duration and its mean E2E
/// (a point of two waves at C=32 is two samples, not 64); every request when its latency is
/// unknown.
pub fn independent_requests(s: &SummaryRecord) -> u64 {
    if let Some(noise) = &s.noise {
        return noise.independent_requests.min(s.ok).max(1);
    }
    match &s.e2e_ms {
        Some(e2e) if e2e.mean > 0.0 && s.duration_s > 0.0 && s.ok > 0 => {
            ((s.duration_s * 1000.0 / e2e.mean) as u64).clamp(1, s.ok)
        }
        _ => s.ok,
    }
}

#[cfg(test)]
mod tests {
    use super::wilson95;

    #[test]
    fn wilson_interval_of_a_share_matches_the_published_figures() {
        // (hits, n, low, high): 70/100 and 12/12 as the Wilson score interval gives them;
        // 0 of 5 is not a zero-width interval at 0%.
        for (hits, n, low, high) in [
            (70, 100, 0.6042, 0.7810),
            (12, 12, 0.7575, 1.0),
            (0, 5, 0.0, 0.4345),
        ] {
            let (lo, hi) = wilson95(hits, n).unwrap();
            assert!((lo - low).abs() < 5e-4, "{hits}/{n}: {lo}");
            assert!((hi - high).abs() < 5e-4, "{hits}/{n}: {hi}");
        }
        assert_eq!(wilson95(0, 0), None);
    }
}
