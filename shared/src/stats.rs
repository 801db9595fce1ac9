//! The one implementation of servbench's request statistics: `loadgen` builds its `summary`
//! records with it and `summarize` recomputes the same figures from `request` records, so the
//! two always agree. Latencies go into HdrHistograms in integer microseconds (3 significant
//! digits); histograms serialize as V2+deflate, base64, so summaries merge exactly.

pub mod adapters;
pub mod blocks;
pub mod busy;
pub mod knee;
pub mod ttft_split;
pub mod turns;

use crate::record::{Dist, ErrorClass, Labels, PointKey, RequestRecord, SummaryRecord, now_ts};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use std::collections::BTreeMap;

/// Significant digits kept by every histogram: 0.1% resolution.
const SIG_FIGS: u8 = 3;

/// A latency histogram in microseconds; reports in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Hist(Histogram<u64>);

impl Default for Hist {
    fn default() -> Self {
        Hist::new()
    }
}

/// Milliseconds (as records write them) to the histogram's integer microseconds.
pub fn ms_to_us(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1000.0).round() as u64
    } else {
        0
    }
}

impl Hist {
    pub fn new() -> Self {
        // Auto-resizing histogram: new() with only sigfigs cannot fail for SIG_FIGS <= 5.
        Hist(Histogram::new(SIG_FIGS).expect("valid sigfigs"))
    }

    pub fn record_ms(&mut self, ms: f64) {
        self.record_ms_n(ms, 1);
    }

    /// `n` values of `ms` at once, as `n` calls of [`Hist::record_ms`] would record them.
    pub fn record_ms_n(&mut self, ms: f64, n: u64) {
        let us = ms_to_us(ms);
        // `record_n` grows the auto-resizing histogram; `saturating_record_n` would clamp.
        if self.0.record_n(us, n).is_err() {
            self.0.saturating_record_n(us, n);
        }
    }

    pub fn len(&self) -> u64 {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn merge(&mut self, other: &Hist) {
        // Both are auto-resizing, so add cannot fail on range.
        self.0
            .add(&other.0)
            .expect("auto-resizing histograms merge");
    }

    /// The distribution in milliseconds; `None` when nothing was recorded.
    pub fn dist_ms(&self) -> Option<Dist> {
        let h = &self.0;
        if h.is_empty() {
            return None;
        }
        // Each bucket is reported by its midpoint: unbiased, and within 0.05% of any value in it.
        let ms = |us: u64| h.median_equivalent(us) as f64 / 1000.0;
        Some(Dist {
            n: h.len(),
            mean: h.mean() / 1000.0,
            stddev: h.stdev() / 1000.0,
            min: ms(h.min()),
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        })
    }

    /// The value at quantile `q` (0..=1) in milliseconds, as [`Hist::dist_ms`] reports it.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let h = &self.0;
        if h.is_empty() {
            return None;
        }
        Some(h.median_equivalent(h.value_at_quantile(q.clamp(0.0, 1.0))) as f64 / 1000.0)
    }

    /// A distribution-free 95% confidence interval for the quantile `q`, in milliseconds: the
    /// values at the order-statistic ranks `n q -/+ 1.96 sqrt(n q (1 - q))` (the binomial
    /// normal approximation). It says how far the quantile itself could move between runs of
    /// the same size, so a change smaller than it is noise. `None` when empty.
    pub fn quantile_ci95_ms(&self, q: f64) -> Option<(f64, f64)> {
        self.quantile_ci95_ms_of(q, self.len())
    }

    /// [`Hist::quantile_ci95_ms`] for samples of which only `independent` (at most all) are
    /// independent: requests that ran side by side in one closed-loop wave share their fate.
    /// Ranks beyond either end clamp to the minimum or maximum.
    pub fn quantile_ci95_ms_of(&self, q: f64, independent: u64) -> Option<(f64, f64)> {
        let n = independent.min(self.len()) as f64;
        if n == 0.0 {
            return None;
        }
        let q = q.clamp(0.0, 1.0);
        let spread = 1.96 * (n * q * (1.0 - q)).sqrt();
        // One more rank either way: the histogram reports ranks, not interpolations.
        let lo = ((n * q - spread - 1.0) / n).clamp(0.0, 1.0);
        let hi = ((n * q + spread + 1.0) / n).clamp(0.0, 1.0);
        Some((self.quantile_ms(lo)?, self.quantile_ms(hi)?))
    }

    /// V2+deflate, base64.
    pub fn encode(&self) -> String {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.0, &mut bytes)
            .expect("serializing into a Vec cannot fail");
        B64.encode(bytes)
    }

    pub fn decode(text: &str) -> Result<Hist, String> {
        let bytes = B64
            .decode(text.trim())
            .map_err(|e| format!("histogram is not base64: {e}"))?;
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| format!("histogram does not decode: {e:?}"))?;
        let mut out = Hist::new();
        out.0.add(&h).map_err(|e| format!("histogram: {e:?}"))?;
        Ok(out)
    }
}

/// Service-level objectives for goodput: a request is good when it succeeded and met each.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub itl_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl Slo {
    /// `ttft_ms=500,tpot_ms=50` (keys: ttft_ms, tpot_ms, itl_ms (max gap), e2e_ms).
    pub fn parse(s: &str) -> Result<Slo, String> {
        let mut slo = Slo::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("SLO item '{part}' is not KEY=MS, e.g. ttft_ms=500"))?;
            let v: f64 = v
                .trim()
                .parse()
                .map_err(|_| format!("SLO value in '{part}' is not a number"))?;
            // A bound no latency can meet (negative, zero, NaN) or every latency meets (inf)
            // would send --find-max halving to nothing: refuse it here.
            if !(v.is_finite() && v > 0.0) {
                return Err(format!(
                    "SLO value in '{part}' must be a positive, finite number of milliseconds"
                ));
            }
            let slot = match k.trim() {
                "ttft_ms" => &mut slo.ttft_ms,
                "tpot_ms" => &mut slo.tpot_ms,
                "itl_ms" => &mut slo.itl_ms,
                "e2e_ms" => &mut slo.e2e_ms,
                other => {
                    return Err(format!(
                        "unknown SLO '{other}': use ttft_ms, tpot_ms, itl_ms or e2e_ms"
                    ));
                }
            };
            *slot = Some(v);
        }
        Ok(slo)
    }

    /// The canonical text form, as recorded in summaries.
    pub fn to_text(&self) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("ttft_ms", self.ttft_ms),
            ("tpot_ms", self.tpot_ms),
            ("itl_ms", self.itl_ms),
            ("e2e_ms", self.e2e_ms),
        ] {
            if let Some(v) = v {
                parts.push(format!("{k}={v}"));
            }
        }
        parts.join(",")
    }

    pub fn met_by(&self, r: &RequestRecord) -> bool {
        let within = |limit: Option<f64>, value: Option<f64>| match (limit, value) {
            (None, _) => true,
            (Some(l), Some(v)) => v <= l,
            (Some(_), None) => false,
        };
        let max_itl = r
            .itl_ms
            .iter()
            .copied()
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        r.is_ok()
            && within(self.ttft_ms, r.ttft_ms)
            && within(self.tpot_ms, r.tpot_ms.or(Some(0.0)))
            && within(self.itl_ms, max_itl.or(Some(0.0)))
            && within(self.e2e_ms, r.e2e_ms)
    }
}

/// The steady window must cover at least this share of the wall window to be reported.
const MIN_STEADY_SHARE: f64 = 0.25;

/// One successful request's place in time, for the steady-state window.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Span {
    start_ms: f64,
    first_ms: f64,
    end_ms: f64,
    tokens: u32,
    tpot_ms: Option<f64>,
}

/// Accumulates the statistics of one sweep point, request by request or by merging.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PointStats {
    pub requests: u64,
    pub ok: u64,
    /// Cancelled on purpose by the client (`--cancel-rate`): neither ok nor failed, in no
    /// latency figure.
    pub cancelled: u64,
    pub errors_by_class: BTreeMap<String, u64>,
    pub ttft: Hist,
    /// Time to the first answer token, of requests that reasoned.
    pub ttfo: Hist,
    pub itl: Hist,
    pub tpot: Hist,
    pub e2e: Hist,
    pub send_lag: Hist,
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    /// Embeddings: inputs embedded by the requests that succeeded.
    pub inputs: u64,
    pub chunks: u64,
    /// Of `output_tokens`, those that were reasoning.
    pub reasoning_tokens: u64,
    pub prompt_len_exact: u64,
    pub prompt_len_targeted: u64,
    pub output_len_mismatch: u64,
    /// Requests that met the SLO (when one was given).
    pub good: u64,
    /// Earliest intended send and latest end, ms from the point's start.
    window: Option<(f64, f64)>,
    /// Per-request spans, to compute the steady window; empty after merging summaries.
    spans: Vec<Span>,
    /// A merged summary carried no spans: steady-state figures are then unknown.
    spans_incomplete: bool,
    /// Conversations: the figures of each turn index.
    pub by_turn: turns::ByTurn,
    /// ... as a summary recorded them (they carry no histograms, so they are kept, not merged).
    by_turn_recorded: Vec<crate::record::TurnSummary>,
    /// LoRA mixes: the figures of each adapter (and, from a summary, as it recorded them).
    pub by_adapter: adapters::ByAdapter,
    by_adapter_recorded: Vec<crate::record::AdapterSummary>,
    /// TTFT split by the engine's own timing, where requests carried it.
    pub ttft_split: ttft_split::SplitAcc,
    /// The batch-means noise a summary recorded (no spans to recompute it); gone once merged
    /// with another accumulator (its blocks are not the merged point's).
    noise_recorded: Option<crate::record::BatchNoise>,
    /// `--eval`: the verdicts of the point's answers.
    pub eval: Option<crate::record::EvalSummary>,
    /// `--response-format`: the validity of the point's answers.
    pub json_validity: Option<crate::record::EvalSummary>,
}

impl PointStats {
    pub fn new() -> Self {
        PointStats::default()
    }

    /// Adds one finished request (success or failure).
    pub fn add_request(&mut self, r: &RequestRecord, slo: Option<&Slo>) {
        self.requests += 1;
        self.by_turn.add(r);
        self.by_adapter.add(r);
        self.ttft_split.add(r);
        if let Some(e) = &r.eval {
            self.eval.get_or_insert_default().add(e.verdict);
        }
        if let Some(j) = &r.json {
            self.json_validity.get_or_insert_default().add(j.verdict());
        }
        self.send_lag.record_ms(r.send_lag_ms);
        let end = r.intended_ms + r.e2e_ms.unwrap_or(0.0);
        self.window = Some(match self.window {
            None => (r.intended_ms, end),
            Some((a, b)) => (a.min(r.intended_ms), b.max(end)),
        });
        // Only a prompt the server counted can have missed its target: a request that never
        // reached it (refused, reset before usage) says nothing about the tokenizer.
        if let (Some(target), Some(counted)) = (r.prompt_tokens_target, r.prompt_tokens) {
            self.prompt_len_targeted += 1;
            if counted == target {
                self.prompt_len_exact += 1;
            }
        }
        if let Some(err) = &r.error {
            *self
                .errors_by_class
                .entry(err.class.as_str().to_string())
                .or_default() += 1;
            return;
        }
        if r.is_cancelled() {
            // Its partial figures would pull every latency down: the others' are the point.
            self.cancelled += 1;
            return;
        }
        self.ok += 1;
        if let Some(v) = r.ttft_ms {
            self.ttft.record_ms(v);
        }
        if let Some(v) = r.ttfo_ms {
            self.ttfo.record_ms(v);
        }
        self.reasoning_tokens += u64::from(r.reasoning_tokens.unwrap_or(0));
        if let Some(v) = r.e2e_ms {
            self.e2e.record_ms(v);
        }
        if let Some(v) = r.tpot_ms {
            self.tpot.record_ms(v);
        }
        // Runs of one gap (the chunks of one read share its instant: most gaps of a fast
        // stream are 0) are recorded at once.
        for run in r.itl_ms.chunk_by(|a, b| a == b) {
            self.itl.record_ms_n(run[0], run.len() as u64);
        }
        self.output_tokens += u64::from(r.output_tokens);
        self.prompt_tokens += u64::from(r.prompt_tokens.unwrap_or(0));
        self.inputs += u64::from(r.inputs.unwrap_or(0));
        self.chunks += u64::from(r.chunks);
        if let Some(max) = r.max_tokens
            && r.output_tokens != max
        {
            self.output_len_mismatch += 1;
        }
        if slo.is_some_and(|s| s.met_by(r)) {
            self.good += 1;
        }
        if let (Some(ttft), Some(e2e)) = (r.ttft_ms, r.e2e_ms) {
            self.spans.push(Span {
                start_ms: r.intended_ms,
                first_ms: r.intended_ms + ttft,
                end_ms: r.intended_ms + e2e,
                tokens: r.output_tokens,
                tpot_ms: r.tpot_ms,
            });
        }
    }

    pub fn errors(&self) -> u64 {
        self.requests - self.ok - self.cancelled
    }

    /// Wall window in seconds: first intended send to last end.
    pub fn duration_s(&self) -> f64 {
        self.window.map_or(0.0, |(a, b)| (b - a).max(0.0) / 1000.0)
    }

    /// Output tokens per second over the steady-state window: from the first request's
    /// completion (ramp-up over) to the last request's send (drain not yet begun), counting
    /// each request's tokens as spread evenly between its first and last token. `None` when
    /// that window is under a quarter of the wall window (too few requests per slot) or
    /// unknown (merged summaries).
    pub fn steady_output_tok_s(&self) -> Option<f64> {
        if self.spans_incomplete || self.spans.len() < 2 {
            return None;
        }
        let from = self.spans.iter().map(|s| s.end_ms).fold(f64::MAX, f64::min);
        let to = self
            .spans
            .iter()
            .map(|s| s.start_ms)
            .fold(f64::MIN, f64::max);
        // Too short a steady window (few requests per slot) says nothing reliable.
        let (wall_from, wall_to) = self.window?;
        if to <= from || (to - from) < MIN_STEADY_SHARE * (wall_to - wall_from) {
            return None;
        }
        let mut tokens = 0.0;
        for s in &self.spans {
            let span = s.end_ms - s.first_ms;
            if span <= 0.0 {
                if s.first_ms >= from && s.first_ms <= to {
                    tokens += f64::from(s.tokens);
                }
                continue;
            }
            let overlap = (s.end_ms.min(to) - s.first_ms.max(from)).max(0.0);
            tokens += f64::from(s.tokens) * overlap / span;
        }
        Some(tokens / ((to - from) / 1000.0))
    }

    /// Merges another accumulator of the same point (another host, or a later batch).
    pub fn merge(&mut self, other: &PointStats) {
        self.requests += other.requests;
        self.ok += other.ok;
        self.cancelled += other.cancelled;
        for (k, v) in &other.errors_by_class {
            *self.errors_by_class.entry(k.clone()).or_default() += v;
        }
        self.ttft.merge(&other.ttft);
        self.ttfo.merge(&other.ttfo);
        self.reasoning_tokens += other.reasoning_tokens;
        self.itl.merge(&other.itl);
        self.tpot.merge(&other.tpot);
        self.e2e.merge(&other.e2e);
        self.send_lag.merge(&other.send_lag);
        self.output_tokens += other.output_tokens;
        self.prompt_tokens += other.prompt_tokens;
        self.inputs += other.inputs;
        self.chunks += other.chunks;
        self.prompt_len_exact += other.prompt_len_exact;
        self.prompt_len_targeted += other.prompt_len_targeted;
        self.output_len_mismatch += other.output_len_mismatch;
        self.good += other.good;
        self.window = match (self.window, other.window) {
            (None, w) | (w, None) => w,
            // Hosts run the same point side by side: the union of windows from each start.
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
        };
        self.spans.extend_from_slice(&other.spans);
        self.spans_incomplete |= other.spans_incomplete;
        self.by_turn.merge(&other.by_turn);
        self.ttft_split.merge(&other.ttft_split);
        if self.by_turn_recorded.is_empty() {
            self.by_turn_recorded = other.by_turn_recorded.clone();
        }
        self.by_adapter.merge(&other.by_adapter);
        if self.by_adapter_recorded.is_empty() {
            self.by_adapter_recorded = other.by_adapter_recorded.clone();
        }
        self.noise_recorded = None;
        if let Some(e) = &other.eval {
            self.eval.get_or_insert_default().merge(e);
        }
        if let Some(j) = &other.json_validity {
            self.json_validity.get_or_insert_default().merge(j);
        }
    }

    /// The point's noise by batch means ([`blocks`]): from its requests when it has them, else
    /// as its summary recorded it.
    pub fn batch_noise(&self) -> Option<crate::record::BatchNoise> {
        if self.spans_incomplete {
            return self.noise_recorded.clone();
        }
        blocks::batch_noise(&self.spans, self.window?)
    }

    /// Rebuilds an accumulator from a summary record (exact histograms; the window from its
    /// duration), so summaries of the same point can be merged.
    pub fn from_summary(s: &SummaryRecord) -> Result<PointStats, String> {
        let hist = |name: &str| -> Result<Hist, String> {
            match s.hist.get(name) {
                Some(text) => Hist::decode(text).map_err(|e| format!("{name}: {e}")),
                None => Ok(Hist::new()),
            }
        };
        let good = s
            .goodput_req_s
            .map_or(0, |g| (g * s.duration_s).round() as u64);
        Ok(PointStats {
            requests: s.requests,
            ok: s.ok,
            cancelled: s.cancelled,
            errors_by_class: s.errors_by_class.clone(),
            ttft: hist("ttft_ms")?,
            ttfo: hist("ttfo_ms")?,
            itl: hist("itl_ms")?,
            tpot: hist("tpot_ms")?,
            e2e: hist("e2e_ms")?,
            send_lag: hist("send_lag_ms")?,
            output_tokens: s.output_tokens,
            prompt_tokens: s.prompt_tokens,
            inputs: s.inputs.unwrap_or(0),
            chunks: match s.tokens_per_chunk {
                Some(tpc) if tpc > 0.0 => (s.output_tokens as f64 / tpc).round() as u64,
                _ => 0,
            },
            reasoning_tokens: s
                .reasoning_share
                .map_or(0, |share| (share * s.output_tokens as f64).round() as u64),
            prompt_len_exact: s.prompt_len_exact,
            prompt_len_targeted: s.prompt_len_targeted,
            output_len_mismatch: s.output_len_mismatch,
            good,
            window: Some((0.0, s.duration_s * 1000.0)),
            spans: Vec::new(),
            spans_incomplete: true,
            by_turn: turns::ByTurn::default(),
            by_turn_recorded: s.by_turn.clone(),
            by_adapter: adapters::ByAdapter::default(),
            by_adapter_recorded: s.by_adapter.clone(),
            ttft_split: ttft_split::SplitAcc::from_record(s.ttft_split.as_ref()),
            noise_recorded: s.noise.clone(),
            eval: s.eval.clone(),
            json_validity: s.json_validity.clone(),
        })
    }

    /// The summary record for this point.
    pub fn to_summary(
        &self,
        point: PointKey,
        labels: Labels,
        partial: bool,
        slo: Option<&Slo>,
    ) -> SummaryRecord {
        let secs = self.duration_s();
        let rate = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let mut hist = BTreeMap::new();
        for (name, h) in self.hists() {
            if !h.is_empty() {
                hist.insert(name.to_string(), h.encode());
            }
        }
        SummaryRecord {
            v: crate::record::SCHEMA_VERSION,
            ts: now_ts(),
            labels,
            point,
            partial,
            stopped_by: None,
            stop_reason: None,
            requests: self.requests,
            ok: self.ok,
            errors: self.errors(),
            cancelled: self.cancelled,
            errors_by_class: self.errors_by_class.clone(),
            duration_s: secs,
            output_tokens: self.output_tokens,
            prompt_tokens: self.prompt_tokens,
            req_s: rate(self.ok),
            output_tok_s: rate(self.output_tokens),
            total_tok_s: rate(self.output_tokens + self.prompt_tokens),
            inputs: (self.inputs > 0).then_some(self.inputs),
            inputs_s: (self.inputs > 0).then(|| rate(self.inputs)),
            steady_output_tok_s: self.steady_output_tok_s(),
            goodput_req_s: slo.map(|_| rate(self.good)),
            slo: slo.map(Slo::to_text),
            ttft_ms: self.ttft.dist_ms(),
            ttfo_ms: self.ttfo.dist_ms(),
            itl_ms: self.itl.dist_ms(),
            tpot_ms: self.tpot.dist_ms(),
            e2e_ms: self.e2e.dist_ms(),
            send_lag_ms: self.send_lag.dist_ms(),
            tokens_per_chunk: (self.chunks > 0)
                .then(|| self.output_tokens as f64 / self.chunks as f64),
            reasoning_share: (self.reasoning_tokens > 0 && self.output_tokens > 0)
                .then(|| self.reasoning_tokens as f64 / self.output_tokens as f64),
            prompt_len_exact: self.prompt_len_exact,
            prompt_len_targeted: self.prompt_len_targeted,
            output_len_mismatch: self.output_len_mismatch,
            client_cpu_s: None,
            telemetry_cpu_s: None,
            server: None,
            gpus: Vec::new(),
            model: None,
            workload: Default::default(),
            by_turn: if self.by_turn.is_empty() {
                self.by_turn_recorded.clone()
            } else {
                self.by_turn.summaries()
            },
            by_adapter: if self.by_adapter.is_empty() {
                self.by_adapter_recorded.clone()
            } else {
                self.by_adapter.summaries(secs)
            },
            ranks: None,
            ttft_split: self.ttft_split.record(),
            engine_steps: None,
            pd_members: Vec::new(),
            noise: self.batch_noise(),
            eval: self.eval.clone(),
            json_validity: self.json_validity.clone(),
            hist,
            extra: Default::default(),
        }
    }

    fn hists(&self) -> [(&'static str, &Hist); 6] {
        [
            ("ttft_ms", &self.ttft),
            ("ttfo_ms", &self.ttfo),
            ("itl_ms", &self.itl),
            ("tpot_ms", &self.tpot),
            ("e2e_ms", &self.e2e),
            ("send_lag_ms", &self.send_lag),
        ]
    }
}

/// The mean of repeated measurements with the half-width of its 95% confidence interval
/// (Student's t with n - 1 degrees of freedom, as hyperfine-style repeats need).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeanCi {
    pub n: usize,
    pub mean: f64,
    pub stddev: f64,
    /// Half-width of the 95% interval; `None` for a single measurement (no spread known).
    pub half_width: Option<f64>,
}

impl MeanCi {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<MeanCi> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        if n == 1 {
            return Some(MeanCi {
                n,
                mean,
                stddev: 0.0,
                half_width: None,
            });
        }
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let stddev = var.sqrt();
        let half_width = Some(t95(n - 1) * stddev / (n as f64).sqrt());
        Some(MeanCi {
            n,
            mean,
            stddev,
            half_width,
        })
    }
}

/// Two-sided 95% critical value of Student's t for `df` degrees of freedom.
pub fn t95(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        31..=60 => 2.0,
        61..=120 => 1.98,
        _ => 1.96,
    }
}

/// Counts of errors by class, for code that has an `ErrorClass` at hand.
pub fn class_key(class: ErrorClass) -> String {
    class.as_str().to_string()
}

#[cfg(test)]
mod tests;
