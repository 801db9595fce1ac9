//! A summary's `workload`: the load applied to the point (what was sent and how it arrived),
//! apart from what was measured. Schema v2 nests these under one object; a v1 summary had them
//! at the top level, and the reader moves them here ([`upgrade_v1_summary`]).

use super::{Api, ArrivalProcess, Extra};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The load a point applied: the requests' shape and sampling, the arrival process, the
/// prefix-cache plan, the conversation or trace it came from. The point's sizes (concurrency,
/// rate, lengths) stay in `point`, its key; the model the requests named stays at the top level
/// (`model`), where readers find the system under test beside the labels.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Workload {
    /// `completions` or `chat`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<Api>,
    /// Seed of every random choice of the run (prompts, arrivals), so it can be reproduced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Open-loop arrival process (`poisson`, `constant`, `gamma:SHAPE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<ArrivalProcess>,
    /// Open-loop cap on requests in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// False for `--no-stream` (non-streaming requests: E2E and tokens, no TTFT, ITL or TPOT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Sampling temperature every request asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling `top_p`, where set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// `--extra-body` as given: merged into every request body (loadgen's own fields won).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_body: Option<Value>,
    /// `--prefix-groups`: synthetic prompts in this many groups, each sharing its own prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_groups: Option<u32>,
    /// `--prefix-len`: tokens of each group's prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_len: Option<u32>,
    /// Fraction of the point's prompt tokens a prefix cache can serve: requests whose group was
    /// sent before (since the last flush) times prefix / prompt length (loadgen README). What
    /// the prompts sent allow, not what the server reported (that is `server.prefix_hit_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_hit_rate_expected: Option<f64>,
    /// `--flush-cache`: whether the server's prefix cache was emptied before this point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_flushed: Option<bool>,
    /// Conversations: turns per session as `--turns` gave them (`3`, `2..6`, `all`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<String>,
    /// Conversations: the pause between a reply and the next turn (`--think-time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time: Option<String>,
    /// Conversations: sessions started in the point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<u64>,
    /// Trace replay: the trace file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// Trace replay: rows of the trace the point sent (within `-n` or `--duration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_rows: Option<u64>,
    /// `--cancel-rate`: the share of requests the client cancelled on purpose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_rate: Option<f64>,
    /// `--cancel-after` as given: how long after it left each of them was cancelled (`200ms`,
    /// or `100ms..500ms` drawn uniformly per request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_after: Option<String>,
    /// `--eval`: the question set's file, as given (the summary's `eval` holds its accuracy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<String>,
    /// `--response-format`: the JSON schema's file, as given (the summary's `json_validity`
    /// holds how many answers were valid for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<String>,
    /// `--lora`: the LoRA adapters the requests named as their `model`, in the flag's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lora: Vec<String>,
    /// `--lora-assignment` as given: `round-robin`, `random`, or `zipf:S` with its exponent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_assignment: Option<String>,
    /// Workload fields this build does not know (a newer tool's): kept and written back.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The schema version that nested a summary's load fields under `workload`.
pub(super) const NESTED_SINCE: u32 = 2;

/// The top-level fields of a v1 summary that v2 keeps under `workload`, as both spell them.
pub const WORKLOAD_FIELDS: [&str; 17] = [
    "api",
    "seed",
    "arrival",
    "max_concurrency",
    "stream",
    "temperature",
    "top_p",
    "extra_body",
    "prefix_groups",
    "prefix_len",
    "prefix_hit_rate_expected",
    "cache_flushed",
    "turns",
    "think_time",
    "sessions",
    "trace",
    "trace_rows",
];

/// A v1 summary brought to v2 at the JSON level, before the typed decode: its flat workload
/// fields move into `workload` (joining any a v1 line already nested there) and `v` becomes 2,
/// which is now the line's shape. Every other field, known or not, stays where it was.
pub(super) fn upgrade_v1_summary(mut summary: Extra) -> Extra {
    let mut workload = match summary.remove("workload") {
        Some(Value::Object(nested)) => nested,
        // Not an object: not v1's (it had none) nor v2's; kept for the typed decode to refuse.
        Some(other) => {
            summary.insert("workload".into(), other);
            return summary;
        }
        None => Extra::new(),
    };
    for field in WORKLOAD_FIELDS {
        if let Some(value) = summary.remove(field) {
            workload.insert(field.into(), value);
        }
    }
    summary.insert("workload".into(), Value::Object(workload));
    summary.insert("v".into(), Value::from(NESTED_SINCE));
    summary
}
