//! What a record cannot say if it was measured: more successes than requests, four billion
//! tokens, a first token after the last, a ramp with no levels, a GEMM that took negative time.
//! A reader takes such a record as a malformed line (named by its place, skipped, an error
//! under `--strict`) instead of tabulating it. Each check says why in words; `None` is
//! plausible. The request's own time checks are [`RequestRecord::implausible_time`].

use super::{
    DeviceLimitsRecord, Dist, GemmRecord, GemmStepRecord, P2pRecord, RampRecord, RequestRecord,
    SearchRecord, SummaryRecord,
};

/// Tokens one request can hold or produce: past every model's context (16 Mi tokens).
pub const MAX_REQUEST_TOKENS: u64 = 1 << 24;

/// Ranks a p2p matrix can have: its pairs are measured one at a time, so a job of more ranks
/// than this would take years; a record claiming more is not one collbench wrote.
pub const MAX_P2P_RANKS: u32 = 1 << 16;

/// The most GB/s a p2p pair can carry: about 50 times NVLink 5's 1.8 TB/s, far past any link
/// or memory copy; a figure above is not one collbench measured.
pub const MAX_P2P_GBPS: f64 = 100_000.0;

/// A first token may follow the request's end by no more than this (ms): rounding only.
const TTFT_OVER_E2E_MS: f64 = 0.001;

fn finite_non_negative(field: &str, v: f64) -> Option<String> {
    (!(v.is_finite() && v >= 0.0)).then(|| format!("{field} {v:?} is not a finite figure >= 0"))
}

fn positive(field: &str, v: f64) -> Option<String> {
    (!(v.is_finite() && v > 0.0)).then(|| format!("{field} {v:?} is not a finite figure > 0"))
}

/// A measured time distribution: finite, its mean above zero.
fn time_dist(field: &str, d: &Dist) -> Option<String> {
    let values = [d.mean, d.min, d.p50, d.max];
    match values.iter().all(|v| v.is_finite() && *v >= 0.0) && d.mean > 0.0 {
        true => None,
        false => Some(format!(
            "{field} (mean {:?}, min {:?}, max {:?}) is not a measured time (finite, mean > 0)",
            d.mean, d.min, d.max
        )),
    }
}

impl RequestRecord {
    /// Why the record cannot be a request that ran: its times
    /// ([`RequestRecord::implausible_time`]), token counts past any context, or a first token
    /// after the end.
    pub fn implausible(&self) -> Option<String> {
        if let Some(why) = self.implausible_time() {
            return Some(why);
        }
        for (field, v) in [
            ("output_tokens", Some(u64::from(self.output_tokens))),
            ("prompt_tokens", self.prompt_tokens.map(u64::from)),
        ] {
            if let Some(v) = v
                && v > MAX_REQUEST_TOKENS
            {
                return Some(format!(
                    "{field} {v} is more than any request holds ({MAX_REQUEST_TOKENS})"
                ));
            }
        }
        if let (Some(ttft), Some(e2e)) = (self.ttft_ms, self.e2e_ms)
            && ttft > e2e + TTFT_OVER_E2E_MS
        {
            return Some(format!(
                "ttft_ms {ttft} is after the request's end (e2e_ms {e2e})"
            ));
        }
        None
    }
}

impl SummaryRecord {
    /// Why the summary's counts cannot be a point's: more successes or errors than requests,
    /// tokens past any request's, rates that are not rates.
    pub fn implausible(&self) -> Option<String> {
        if self.ok > self.requests || self.errors > self.requests || self.cancelled > self.requests
        {
            return Some(format!(
                "ok {}, errors {} and cancelled {} of {} requests: more than were sent",
                self.ok, self.errors, self.cancelled, self.requests
            ));
        }
        for (field, tokens) in [
            ("output_tokens", self.output_tokens),
            ("prompt_tokens", self.prompt_tokens),
        ] {
            if tokens > self.requests.saturating_mul(MAX_REQUEST_TOKENS) {
                return Some(format!(
                    "{field} {tokens} over {} requests: more than any request holds",
                    self.requests
                ));
            }
        }
        [
            ("duration_s", self.duration_s),
            ("req_s", self.req_s),
            ("output_tok_s", self.output_tok_s),
            ("total_tok_s", self.total_tok_s),
        ]
        .into_iter()
        .find_map(|(field, v)| finite_non_negative(field, v))
    }
}

impl RampRecord {
    /// A ramp ran at least one level, and its best level is one of them.
    pub fn implausible(&self) -> Option<String> {
        if self.levels.is_empty() {
            return Some("a ramp with no levels".into());
        }
        if let Some(best) = self.best_concurrency
            && !self.levels.iter().any(|l| l.concurrency == best)
        {
            return Some(format!("best_concurrency {best} is none of its levels"));
        }
        self.levels.iter().find_map(|l| {
            finite_non_negative("a level's output_tok_s", l.output_tok_s)
                .or_else(|| finite_non_negative("a level's req_s", l.req_s))
        })
    }
}

impl SearchRecord {
    /// A search's bounds come from its probes, and the highest passing load is below the
    /// lowest failing one.
    pub fn implausible(&self) -> Option<String> {
        if self.probes.is_empty() && (self.max_passing.is_some() || self.first_failing.is_some()) {
            return Some("a search with bounds but no probes".into());
        }
        if let (Some(pass), Some(fail)) = (self.max_passing, self.first_failing)
            && pass >= fail
        {
            return Some(format!(
                "max_passing {pass} is not below first_failing {fail}"
            ));
        }
        None
    }
}

impl GemmRecord {
    /// A GEMM took time, and its card has peaks to set it against.
    pub fn implausible(&self) -> Option<String> {
        time_dist("time_us", &self.time_us)
            .or_else(|| finite_non_negative("tflops", self.tflops))
            .or_else(|| finite_non_negative("gbps", self.gbps))
            .or_else(|| positive("peak_tflops", self.peak_tflops))
            .or_else(|| positive("peak_mem_gbps", self.peak_mem_gbps))
    }
}

impl GemmStepRecord {
    /// A step's GEMMs took time.
    pub fn implausible(&self) -> Option<String> {
        time_dist("sequence_us", &self.sequence_us)
            .or_else(|| {
                self.graph_us
                    .as_ref()
                    .and_then(|g| time_dist("graph_us", g))
            })
            .or_else(|| finite_non_negative("gemm_us_per_step", self.gemm_us_per_step))
            .or_else(|| {
                finite_non_negative(
                    "launch_overhead_us_per_step",
                    self.launch_overhead_us_per_step,
                )
            })
    }
}

impl DeviceLimitsRecord {
    /// A copy and a read took time (a CPU's empty launch may round to 0 us).
    pub fn implausible(&self) -> Option<String> {
        time_dist("copy_us", &self.copy_us)
            .or_else(|| time_dist("read_us", &self.read_us))
            .or_else(|| positive("datasheet_mem_gbps", self.datasheet_mem_gbps))
    }
}

impl P2pRecord {
    /// A pair of two distinct ranks of the job, with measured figures.
    pub fn implausible(&self) -> Option<String> {
        if self.ranks > MAX_P2P_RANKS {
            return Some(format!(
                "ranks {} is more than a p2p matrix can have (at most {MAX_P2P_RANKS})",
                self.ranks
            ));
        }
        if self.src == self.dst || self.src >= self.ranks || self.dst >= self.ranks {
            return Some(format!(
                "pair {} -> {} is not two distinct ranks of {}",
                self.src, self.dst, self.ranks
            ));
        }
        let bounded = |field: &str, v: f64| {
            positive(field, v).or_else(|| {
                (v > MAX_P2P_GBPS).then(|| {
                    format!("{field} {v:?} is more than any link carries ({MAX_P2P_GBPS} GB/s)")
                })
            })
        };
        bounded("uni_gbps", self.uni_gbps)
            .or_else(|| bounded("bidir_gbps", self.bidir_gbps))
            .or_else(|| positive("latency_us", self.latency_us))
    }
}
