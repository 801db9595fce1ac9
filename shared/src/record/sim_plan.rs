use super::{AllreduceAlgo, CommSource, ComputeSource, Extra, Labels, WeightFormats, current_version};
use serde::{Deserialize, Serialize};

/// `srv-sim --dry-run`: what srv-sim's cost model predicts for a model, hardware and layout,
/// without serving anything. Decode figures are for one stream (batch 1) at `context_tokens`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimPlanRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// Model preset or card name.
    pub model: String,
    /// Hardware preset or card name.
    pub hardware: String,
    pub tp: u32,
    pub pp: u32,
    /// Engine replicas (`--gpus` / (tp x pp)).
    pub data_parallel: u32,
    /// Longest prompt + completion the simulated server accepts.
    pub max_model_len: u32,
    pub weight_bytes: f64,
    pub weight_bytes_per_gpu: f64,
    /// Weight bytes one token reads (MoE: shared weights + k experts per MoE layer).
    pub active_weight_bytes_per_token: f64,
    pub kv_bytes_per_token: f64,
    /// KV-cache tokens that fit at 90% memory use; null when the weights alone do not fit.
    pub kv_cache_tokens: Option<u64>,
    /// Context length the decode figures are computed at.
    pub context_tokens: u64,
    /// Batch-1 decode step as srv-sim runs it (roofline + communication + per-step overhead).
    pub decode_step_ms: f64,
    pub decode_memory_ms: f64,
    pub decode_compute_ms: f64,
    pub decode_comm_ms: f64,
    pub step_overhead_ms: f64,
    /// The shared roofline's single-stream limit (no per-step overhead).
    pub roofline_tok_s: f64,
    /// What one stream gets from srv-sim: 1 / decode_step.
    pub single_stream_tok_s: f64,
    /// Share of a round the pipeline stages idle with one request (1 - 1/pp).
    pub pipeline_bubble_at_batch_1: f64,
    /// Smallest decode batch that is compute-bound; null when none up to 65,536 is.
    pub compute_bound_batch: Option<u32>,
    /// How the weights are stored: `bf16`, `fp8`, `fp8 + nvfp4 experts`.
    pub weight_format: WeightFormats,
    /// GPU memory per GPU the engine may use (90%).
    pub usable_bytes_per_gpu: f64,
    /// Whether the weights and the KV cache of one `max_model_len` request fit.
    pub fits: bool,
    /// Why they do not, when they do not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit_note: Option<String>,
    /// Requests running at once per engine replica, after the pipeline's micro-batch cap.
    pub max_running_requests: u32,
    /// `--pp-max-micro-batch`: requests per pipeline micro-batch, when capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pp_max_micro_batch: Option<u32>,
    /// One stream's limit from memory alone (weights + KV over bandwidth), no communication.
    pub memory_bound_tok_s: f64,
    /// Tensor-parallel allreduces in one decode step (2 x layers; 0 without TP).
    pub allreduces_per_step: u32,
    /// Bytes of one of them at batch 1.
    pub allreduce_bytes: f64,
    /// One of them at batch 1, µs, as `comm_source` gives it.
    pub allreduce_us: f64,
    /// The algorithm NCCL would pick (`ring/LL`, `ring/Simple`, `nvls`...), or `measured`.
    pub allreduce_algo: AllreduceAlgo,
    /// The slowest topology level the TP group spans (`cross-socket`, `nvswitch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_level: Option<String>,
    /// `model`, or `measured: FILE (backend, ranks, mode, statistic)` with `--comm-from`.
    pub comm_source: CommSource,
    /// `model`, or `measured: FILE` with `--gemm-from`: where the GEMM part of a step came from.
    #[serde(default)]
    pub compute_source: ComputeSource,
    /// With `--gemm-from`: the measured GEMM part of the batch-1 decode step (interpolated
    /// from the `gemm_step` records), ms; it replaces the weights' share of
    /// `decode_memory_ms`/`decode_compute_ms`, which then hold attention over the KV cache only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_gemm_ms: Option<f64>,
    /// With `--spec-tokens`: tokens one verify step emits on average (1 + A + ... + A^K).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_tokens_per_step: Option<f64>,
    /// With `--spec-tokens`: one stream's rate, `spec_tokens_per_step` per verify step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_single_stream_tok_s: Option<f64>,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(SimPlanRecord, "sim_plan", SimPlan);
