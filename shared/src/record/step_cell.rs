use super::{Extra, Labels, StepPhase, StepSource, current_version};
use serde::{Deserialize, Serialize};

/// One cell of a `loadgen --step-grid`: the engine's step time at a controlled shape, what
/// `srv-sim --calibrate-from` fits its step cost to. A `decode` cell held `batch` requests
/// decoding at `context_tokens` each (their prompt plus half their output, the mean over the
/// window); a `prefill` cell sent one request at a time with a `input_len`-token prompt and
/// timed its whole prefill (`chunks` steps of at most `chunk_tokens` each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepCellRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    pub phase: StepPhase,
    /// Requests in the step (a prefill cell: 1).
    pub batch: u32,
    /// Prompt tokens per request.
    pub input_len: u32,
    /// Output tokens per request.
    pub max_tokens: u32,
    /// Tokens of context per request the step attends to (decode: the window's mean; prefill:
    /// the prompt).
    pub context_tokens: f64,
    /// The step's time (prefill: the whole prefill's), mean and spread over its samples.
    pub step_ms: f64,
    pub step_ms_stddev: f64,
    /// Samples behind `step_ms` (steps from the engine's log, or requests' TPOT or TTFT).
    pub samples: u64,
    pub source: StepSource,
    /// Prefill: steps per prompt, and the tokens of the largest (the engine's chunk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_tokens: Option<u32>,
    /// `point.index` of the load point the cell was measured in (its `summary` has the rest).
    pub point_index: u32,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(StepCellRecord, "step_cell", StepCell);
