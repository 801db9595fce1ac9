use super::{Extra, Labels, PointKey, SearchStop, SearchVar, current_version};
use serde::{Deserialize, Serialize};

/// One load a `loadgen --find-max` search tried: a normal point (its `request` and `summary`
/// records are written like any other), run once or, near the boundary, more than once before
/// its verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchProbe {
    /// The load, in the unit the search's `var` names (requests per second, or in flight).
    pub load: f64,
    /// `point.index` of each try, in order (their summaries carry the figures).
    pub points: Vec<u32>,
    /// Requests over every try.
    pub requests: u64,
    /// Requests that succeeded and met every `--slo` / requests, over every try.
    pub slo_attainment: f64,
    /// Failed requests / requests, over every try (a failure never meets the SLO).
    pub error_rate: f64,
    /// The verdict: the pooled attainment reached the target.
    pub passed: bool,
}

/// The end of a `loadgen --find-max`: the highest load that met the SLO and the first above
/// it that failed, found by doubling (or halving) to a bracket and bisecting it to the stated
/// precision. Every probe is listed in the order it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// The workload searched (the load field that varies is absent).
    pub point: PointKey,
    /// What varies: `rate_rps` (open loop) or `concurrency` (closed loop).
    pub var: SearchVar,
    /// The objectives, as `--slo` gives them (`ttft_ms=500,tpot_ms=50`).
    pub slo: String,
    /// The share of requests that must meet them (`--slo-attainment`).
    pub slo_attainment: f64,
    /// Relative width the bracket is narrowed to: the search ends when the first failing
    /// load is within this share above the highest passing one (for concurrency, or when
    /// they are adjacent integers).
    pub precision: f64,
    pub probes: Vec<SearchProbe>,
    /// The highest load that met the SLO (absent: none did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_passing: Option<f64>,
    /// The lowest load above it that did not (absent: none failed up to the limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failing: Option<f64>,
    /// `converged`, `limit` (the highest load allowed still passed), `none_passed` (the lowest
    /// tried failed), `interrupted`, `server_down` or `rank_failed` (a loadgen rank of several).
    pub stopped_by: SearchStop,
    /// One line: the outcome with the figures.
    pub reason: String,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(SearchRecord, "search", Search);
