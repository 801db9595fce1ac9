use super::{Extra, Labels, PointKey, RampStop, current_version};
use serde::{Deserialize, Serialize};

/// One level of a `loadgen --ramp`: the concurrency tried and what it gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RampLevel {
    pub concurrency: u32,
    pub output_tok_s: f64,
    pub req_s: f64,
    /// Failed requests / requests.
    pub error_rate: f64,
    /// Share of requests that met every `--slo` (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_attainment: Option<f64>,
}

/// The end of a `loadgen --ramp` ("double the concurrency until it breaks"): every level tried,
/// which rule stopped the ramp, and the best level: among the levels that broke no rule, the
/// saturation knee under `--min-gain` (the last doubling that still gained that much; more
/// concurrency past it buys latency, not throughput), else the highest output throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RampRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// The workload of the ramp (`concurrency` absent: it is what varies).
    pub point: PointKey,
    pub levels: Vec<RampLevel>,
    /// `error_rate`, `saturated`, `slo`, `max_concurrency` (the cap was reached), `interrupted`,
    /// `server_down` or `rank_failed` (a loadgen rank of several).
    pub stopped_by: RampStop,
    /// One line: why, with the figures that decided it.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_output_tok_s: Option<f64>,
    /// `--min-gain`: the knee rule the best level was chosen by (`stats::knee`),
    /// so a reader of the record names the same knee.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gain: Option<f64>,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(RampRecord, "ramp", Ramp);
