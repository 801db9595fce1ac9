//! The figures a table column, a comparison or a note can read from a point's summary, by name
//! (`tok_s`, `ttft_p99`, ...), with units and direction (their noise from one run: `noise.rs`).

use servbench::record::{Dist, SummaryRecord};

/// A per-request latency distribution a summary carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistName {
    Ttft,
    /// Time to the first answer token, where the model reasoned.
    Ttfo,
    Itl,
    Tpot,
    E2e,
    Lag,
}

impl DistName {
    const ALL: [DistName; 6] = [
        DistName::Ttft,
        DistName::Ttfo,
        DistName::Itl,
        DistName::Tpot,
        DistName::E2e,
        DistName::Lag,
    ];

    pub(crate) fn short(self) -> &'static str {
        match self {
            DistName::Ttft => "ttft",
            DistName::Ttfo => "ttfo",
            DistName::Itl => "itl",
            DistName::Tpot => "tpot",
            DistName::E2e => "e2e",
            DistName::Lag => "lag",
        }
    }

    fn title(self) -> &'static str {
        match self {
            DistName::Ttft => "TTFT",
            DistName::Ttfo => "TTFO",
            DistName::Itl => "ITL",
            DistName::Tpot => "TPOT",
            DistName::E2e => "E2E",
            DistName::Lag => "send lag",
        }
    }

    /// The summary field / histogram name.
    pub(crate) fn field(self) -> &'static str {
        match self {
            DistName::Ttft => "ttft_ms",
            DistName::Ttfo => "ttfo_ms",
            DistName::Itl => "itl_ms",
            DistName::Tpot => "tpot_ms",
            DistName::E2e => "e2e_ms",
            DistName::Lag => "send_lag_ms",
        }
    }

    pub(crate) fn of(self, s: &SummaryRecord) -> Option<&Dist> {
        match self {
            DistName::Ttft => s.ttft_ms.as_ref(),
            DistName::Ttfo => s.ttfo_ms.as_ref(),
            DistName::Itl => s.itl_ms.as_ref(),
            DistName::Tpot => s.tpot_ms.as_ref(),
            DistName::E2e => s.e2e_ms.as_ref(),
            DistName::Lag => s.send_lag_ms.as_ref(),
        }
    }
}

/// Which statistic of a distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Mean,
    Min,
    P50,
    P90,
    P95,
    P99,
    P999,
    Max,
}

impl Stat {
    const ALL: [Stat; 8] = [
        Stat::Mean,
        Stat::Min,
        Stat::P50,
        Stat::P90,
        Stat::P95,
        Stat::P99,
        Stat::P999,
        Stat::Max,
    ];

    pub(crate) fn short(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::Min => "min",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P95 => "p95",
            Stat::P99 => "p99",
            Stat::P999 => "p999",
            Stat::Max => "max",
        }
    }

    pub(crate) fn quantile(self) -> Option<f64> {
        match self {
            Stat::P50 => Some(0.5),
            Stat::P90 => Some(0.9),
            Stat::P95 => Some(0.95),
            Stat::P99 => Some(0.99),
            Stat::P999 => Some(0.999),
            _ => None,
        }
    }

    fn of(self, d: &Dist) -> f64 {
        match self {
            Stat::Mean => d.mean,
            Stat::Min => d.min,
            Stat::P50 => d.p50,
            Stat::P90 => d.p90,
            Stat::P95 => d.p95,
            Stat::P99 => d.p99,
            Stat::P999 => d.p999,
            Stat::Max => d.max,
        }
    }
}

/// A single number per point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    ReqS,
    /// Embeddings: inputs embedded per second (their points have no output tokens).
    InputsS,
    OutputTokS,
    TotalTokS,
    SteadyTokS,
    GoodputReqS,
    /// Single-stream decode rate: 1000 / TPOT p50.
    StreamTokS,
    TokensPerChunk,
    /// The share of output tokens that were reasoning, where the model reasoned.
    ReasoningPct,
    Requests,
    Ok,
    Errors,
    DurationS,
    /// The server's own figures (loadgen's `server` and `gpus` objects).
    KvMaxPct,
    Preemptions,
    SpecAcceptance,
    PrefixHitPct,
    GpuUtilPct,
    /// Output tokens/s over the GPUs loadgen sampled (the server's, from its record's --gpus).
    TokSPerGpu,
    /// Joules per output token on those GPUs: each GPU's energy over the point, from its
    /// energy counter where loadgen read one (`energy_j`), else its mean sampled power x the
    /// point's duration, summed, over the point's output tokens (see [`crate::input::energy`]).
    JoulesPerTok,
    /// The server's gauges of requests running and waiting (largest sample in the point).
    RunningMax,
    WaitingMax,
    /// TTFT split by the engine's own timing (means): its queue, its prefill, and the client
    /// TTFT beyond the server's (network, frontend, client).
    EngineQueueMs,
    EnginePrefillMs,
    TtftOutsideMs,
    /// The engine's own FLOPs and bytes per GPU per second over the point (its counters).
    EngineTflops,
    EngineGbps,
    /// The engine's own steps over the point (its step log): mean step time, steps per second.
    EngineStepMs,
    EngineStepsS,
    /// Judged answers: `loadgen --eval`'s share correct and `--response-format`'s share of
    /// valid JSON, in percent of the requests judged.
    AccuracyPct,
    JsonValidPct,
}

impl Scalar {
    const ALL: [Scalar; 31] = [
        Scalar::ReqS,
        Scalar::InputsS,
        Scalar::OutputTokS,
        Scalar::TotalTokS,
        Scalar::SteadyTokS,
        Scalar::GoodputReqS,
        Scalar::StreamTokS,
        Scalar::TokensPerChunk,
        Scalar::ReasoningPct,
        Scalar::Requests,
        Scalar::Ok,
        Scalar::Errors,
        Scalar::DurationS,
        Scalar::KvMaxPct,
        Scalar::Preemptions,
        Scalar::SpecAcceptance,
        Scalar::PrefixHitPct,
        Scalar::GpuUtilPct,
        Scalar::TokSPerGpu,
        Scalar::JoulesPerTok,
        Scalar::RunningMax,
        Scalar::WaitingMax,
        Scalar::EngineQueueMs,
        Scalar::EnginePrefillMs,
        Scalar::TtftOutsideMs,
        Scalar::EngineTflops,
        Scalar::EngineGbps,
        Scalar::EngineStepMs,
        Scalar::EngineStepsS,
        Scalar::AccuracyPct,
        Scalar::JsonValidPct,
    ];

    fn name(self) -> &'static str {
        match self {
            Scalar::ReqS => "req_s",
            Scalar::InputsS => "inputs_s",
            Scalar::OutputTokS => "tok_s",
            Scalar::TotalTokS => "total_tok_s",
            Scalar::SteadyTokS => "steady_tok_s",
            Scalar::GoodputReqS => "goodput_req_s",
            Scalar::StreamTokS => "stream_tok_s",
            Scalar::TokensPerChunk => "tok_per_chunk",
            Scalar::ReasoningPct => "reasoning",
            Scalar::Requests => "requests",
            Scalar::Ok => "ok",
            Scalar::Errors => "errors",
            Scalar::DurationS => "duration_s",
            Scalar::KvMaxPct => "kv_max",
            Scalar::Preemptions => "preemptions",
            Scalar::SpecAcceptance => "spec_accept",
            Scalar::PrefixHitPct => "prefix_hit",
            Scalar::GpuUtilPct => "gpu_util",
            Scalar::TokSPerGpu => "tok_s_per_gpu",
            Scalar::JoulesPerTok => "j_per_tok",
            Scalar::RunningMax => "running",
            Scalar::WaitingMax => "waiting",
            Scalar::EngineQueueMs => "eng_queue",
            Scalar::EnginePrefillMs => "eng_prefill",
            Scalar::TtftOutsideMs => "ttft_outside",
            Scalar::EngineTflops => "eng_tflops",
            Scalar::EngineGbps => "eng_gbps",
            Scalar::EngineStepMs => "eng_step",
            Scalar::EngineStepsS => "eng_steps_s",
            Scalar::AccuracyPct => "accuracy",
            Scalar::JsonValidPct => "json_valid",
        }
    }

    fn header(self) -> &'static str {
        match self {
            Scalar::ReqS => "req/s",
            Scalar::InputsS => "inputs/s",
            Scalar::OutputTokS => "out tok/s",
            Scalar::TotalTokS => "total tok/s",
            Scalar::SteadyTokS => "steady tok/s",
            Scalar::GoodputReqS => "goodput req/s",
            Scalar::StreamTokS => "tok/s/stream",
            Scalar::TokensPerChunk => "tok/chunk",
            Scalar::ReasoningPct => "reasoning %",
            Scalar::Requests => "requests",
            Scalar::Ok => "ok",
            Scalar::Errors => "errors",
            Scalar::DurationS => "duration s",
            Scalar::KvMaxPct => "KV max %",
            Scalar::Preemptions => "preempt",
            Scalar::SpecAcceptance => "spec accept",
            Scalar::PrefixHitPct => "prefix hit %",
            Scalar::GpuUtilPct => "GPU util %",
            Scalar::TokSPerGpu => "tok/s/GPU",
            Scalar::JoulesPerTok => "J/tok",
            Scalar::RunningMax => "running max",
            Scalar::WaitingMax => "waiting max",
            Scalar::EngineQueueMs => "eng queue ms",
            Scalar::EnginePrefillMs => "eng prefill ms",
            Scalar::TtftOutsideMs => "outside ms",
            Scalar::EngineTflops => "eng TF/s/GPU",
            Scalar::EngineGbps => "eng GB/s/GPU",
            Scalar::EngineStepMs => "eng step ms",
            Scalar::EngineStepsS => "eng steps/s",
            Scalar::AccuracyPct => "accuracy %",
            Scalar::JsonValidPct => "JSON valid %",
        }
    }
}

/// Anything a column can show from a summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Scalar(Scalar),
    Dist(DistName, Stat),
}

/// The point's TTFT split, where some request was in it.
fn split(s: &SummaryRecord) -> Option<&servbench::record::TtftSplit> {
    s.ttft_split.as_ref().filter(|t| t.requests > 0)
}

/// The point's engine steps, where its step log had some.
fn steps(s: &SummaryRecord) -> Option<&servbench::record::EngineSteps> {
    s.engine_steps.as_ref().filter(|e| e.steps > 0)
}

/// `amount` over the point's duration, in units of `unit`.
fn per_second(s: &SummaryRecord, amount: f64, unit: f64) -> Option<f64> {
    (s.duration_s > 0.0).then(|| amount / s.duration_s / unit)
}

/// Whether a larger value is an improvement (for comparisons).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

impl Metric {
    pub const TOK_S: Metric = Metric::Scalar(Scalar::OutputTokS);
    pub const REQ_S: Metric = Metric::Scalar(Scalar::ReqS);
    pub const INPUTS_S: Metric = Metric::Scalar(Scalar::InputsS);
    pub const TTFT_P50: Metric = Metric::Dist(DistName::Ttft, Stat::P50);
    pub const TTFT_P99: Metric = Metric::Dist(DistName::Ttft, Stat::P99);
    pub const TTFO_P50: Metric = Metric::Dist(DistName::Ttfo, Stat::P50);
    pub const REASONING: Metric = Metric::Scalar(Scalar::ReasoningPct);
    pub const ITL_P50: Metric = Metric::Dist(DistName::Itl, Stat::P50);
    pub const ITL_P99: Metric = Metric::Dist(DistName::Itl, Stat::P99);
    pub const TPOT_P50: Metric = Metric::Dist(DistName::Tpot, Stat::P50);
    pub const E2E_P50: Metric = Metric::Dist(DistName::E2e, Stat::P50);
    pub const LAG_P99: Metric = Metric::Dist(DistName::Lag, Stat::P99);
    pub const TPC: Metric = Metric::Scalar(Scalar::TokensPerChunk);
    pub const ERRORS: Metric = Metric::Scalar(Scalar::Errors);
    pub const KV_MAX: Metric = Metric::Scalar(Scalar::KvMaxPct);
    pub const PREEMPTIONS: Metric = Metric::Scalar(Scalar::Preemptions);
    pub const SPEC_ACCEPT: Metric = Metric::Scalar(Scalar::SpecAcceptance);
    pub const PREFIX_HIT: Metric = Metric::Scalar(Scalar::PrefixHitPct);
    pub const GPU_UTIL: Metric = Metric::Scalar(Scalar::GpuUtilPct);
    pub const TOK_S_PER_GPU: Metric = Metric::Scalar(Scalar::TokSPerGpu);
    pub const J_PER_TOK: Metric = Metric::Scalar(Scalar::JoulesPerTok);
    pub const ENG_QUEUE: Metric = Metric::Scalar(Scalar::EngineQueueMs);
    pub const ENG_PREFILL: Metric = Metric::Scalar(Scalar::EnginePrefillMs);
    pub const TTFT_OUTSIDE: Metric = Metric::Scalar(Scalar::TtftOutsideMs);
    pub const ACCURACY: Metric = Metric::Scalar(Scalar::AccuracyPct);
    pub const JSON_VALID: Metric = Metric::Scalar(Scalar::JsonValidPct);

    /// `tok_s`, `ttft_p99`, `itl_mean`, ...
    pub fn name(&self) -> String {
        match self {
            Metric::Scalar(s) => s.name().to_string(),
            Metric::Dist(d, st) => format!("{}_{}", d.short(), st.short()),
        }
    }

    /// Column header for people, unit included.
    pub fn header(&self) -> String {
        match self {
            Metric::Scalar(s) => s.header().to_string(),
            Metric::Dist(d, st) => format!("{} {} ms", d.title(), st.short()),
        }
    }

    pub fn parse(name: &str) -> Option<Metric> {
        let name = name.trim();
        if let Some(s) = Scalar::ALL.iter().find(|s| s.name() == name) {
            return Some(Metric::Scalar(*s));
        }
        // Accept `ttft_ms_p99` as well as `ttft_p99`.
        let (base, stat) = name.rsplit_once('_')?;
        let base = base.strip_suffix("_ms").unwrap_or(base);
        let d = DistName::ALL.iter().find(|d| d.short() == base)?;
        let st = Stat::ALL.iter().find(|s| s.short() == stat)?;
        Some(Metric::Dist(*d, *st))
    }

    /// The names `parse` accepts, in short: the scalars, then the distributions' pattern
    /// (`{ttft,itl,...}_{mean,p50,...}`). `--help` and the errors print this one list.
    pub fn names_in_short() -> String {
        let scalars: Vec<&str> = Scalar::ALL.iter().map(|s| s.name()).collect();
        let dists: Vec<&str> = DistName::ALL.iter().map(|d| d.short()).collect();
        let stats: Vec<&str> = Stat::ALL.iter().map(|s| s.short()).collect();
        format!(
            "{}, or {{{}}}_{{{}}}",
            scalars.join(", "),
            dists.join(","),
            stats.join(",")
        )
    }

    /// Every name `parse` accepts, for error messages.
    pub fn all_names() -> Vec<String> {
        let mut out: Vec<String> = Scalar::ALL.iter().map(|s| s.name().to_string()).collect();
        for d in DistName::ALL {
            for st in Stat::ALL {
                out.push(format!("{}_{}", d.short(), st.short()));
            }
        }
        out
    }

    /// Counts (requests, errors) add up over repeats instead of averaging.
    pub fn is_count(&self) -> bool {
        matches!(
            self,
            Metric::Scalar(Scalar::Requests | Scalar::Ok | Scalar::Errors | Scalar::Preemptions)
        )
    }

    /// Figures that count requests (the server's gauges): whole numbers print without decimals.
    pub fn is_whole(&self) -> bool {
        matches!(
            self,
            Metric::Scalar(Scalar::RunningMax | Scalar::WaitingMax)
        )
    }

    pub fn better(&self) -> Better {
        match self {
            // Fewer reasoning tokens for the same answers cost less.
            Metric::Scalar(
                Scalar::Errors
                | Scalar::Preemptions
                | Scalar::KvMaxPct
                | Scalar::ReasoningPct
                | Scalar::JoulesPerTok
                | Scalar::EngineQueueMs
                | Scalar::EnginePrefillMs
                | Scalar::TtftOutsideMs
                | Scalar::EngineStepMs,
            )
            | Metric::Dist(..) => Better::Lower,
            Metric::Scalar(_) => Better::Higher,
        }
    }

    pub fn value(&self, s: &SummaryRecord) -> Option<f64> {
        match self {
            Metric::Scalar(sc) => match sc {
                Scalar::ReqS => Some(s.req_s),
                Scalar::InputsS => s.inputs_s,
                // An embeddings point has no output: its throughput is inputs/s.
                Scalar::OutputTokS => s.inputs_s.is_none().then_some(s.output_tok_s),
                Scalar::TotalTokS => Some(s.total_tok_s),
                Scalar::SteadyTokS => s.steady_output_tok_s,
                Scalar::GoodputReqS => s.goodput_req_s,
                Scalar::StreamTokS => s
                    .tpot_ms
                    .as_ref()
                    .filter(|d| d.p50 > 0.0)
                    .map(|d| 1000.0 / d.p50),
                Scalar::TokensPerChunk => s.tokens_per_chunk,
                Scalar::ReasoningPct => s.reasoning_share.map(|r| r * 100.0),
                Scalar::Requests => Some(s.requests as f64),
                Scalar::Ok => Some(s.ok as f64),
                Scalar::Errors => Some(s.errors as f64),
                Scalar::DurationS => Some(s.duration_s),
                Scalar::KvMaxPct => Some(s.server.as_ref()?.kv_usage?.max * 100.0),
                Scalar::Preemptions => s.server.as_ref()?.preemptions.map(|n| n as f64),
                Scalar::SpecAcceptance => s.server.as_ref()?.spec.as_ref()?.chain_alpha,
                Scalar::PrefixHitPct => Some(s.server.as_ref()?.prefix_hit_rate? * 100.0),
                Scalar::RunningMax => Some(s.server.as_ref()?.running?.max),
                Scalar::WaitingMax => Some(s.server.as_ref()?.waiting?.max),
                Scalar::EngineQueueMs => split(s)?.engine_queue_ms,
                Scalar::EnginePrefillMs => split(s).map(|t| t.engine_prefill_ms),
                Scalar::TtftOutsideMs => split(s).map(|t| t.outside_ms),
                Scalar::EngineStepMs => steps(s).map(|e| e.step_ms_mean),
                Scalar::EngineStepsS => steps(s).map(|e| e.steps_per_s),
                Scalar::AccuracyPct => s.eval.as_ref()?.accuracy.map(|a| a * 100.0),
                Scalar::JsonValidPct => s.json_validity.as_ref()?.accuracy.map(|a| a * 100.0),
                Scalar::EngineTflops => per_second(s, s.server.as_ref()?.est_flops_per_gpu?, 1e12),
                Scalar::EngineGbps => {
                    let srv = s.server.as_ref()?;
                    let bytes =
                        srv.est_read_bytes_per_gpu? + srv.est_write_bytes_per_gpu.unwrap_or(0.0);
                    per_second(s, bytes, 1e9)
                }
                // Mean over the point and over the server's GPUs.
                Scalar::GpuUtilPct => {
                    let utils: Vec<f64> = s
                        .gpus
                        .iter()
                        .filter_map(|g| Some(g.util_pct?.mean))
                        .collect();
                    (!utils.is_empty()).then(|| utils.iter().sum::<f64>() / utils.len() as f64)
                }
                Scalar::TokSPerGpu => {
                    let n = crate::input::energy::whole_gpus(s).len();
                    (n > 0).then(|| s.output_tok_s / n as f64)
                }
                Scalar::JoulesPerTok => {
                    crate::input::energy::joules_per_token(s, &crate::input::energy::whole_gpus(s))
                }
            },
            Metric::Dist(d, st) => d.of(s).map(|dist| st.of(dist)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_name_parses_back() {
        for name in Metric::all_names() {
            let m = Metric::parse(&name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(m.name(), name);
        }
        assert_eq!(Metric::parse("ttft_ms_p99"), Some(Metric::TTFT_P99));
        assert_eq!(Metric::parse("ttft_p42"), None);
        assert_eq!(Metric::parse("speed"), None);
    }
}
