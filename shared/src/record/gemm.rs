use super::{Dist, Extra, GemmBackend, GemmDtype, GemmName, GemmTiming, Labels, current_version};
use serde::{Deserialize, Serialize};

/// `collbench gemm`: one GEMM of a decode step (or a `--shape` given by hand), timed like
/// nccl-tests times a collective (warm-up, then iterations), beside the hardware card's peak.
/// `Y[m x n] = X[m x k] . W[k x n]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// `cpu` (the `gemm` crate on this machine's cores: CPU figures, not a GPU's), `cublas`
    /// or `cublaslt` (FP8).
    pub backend: GemmBackend,
    /// What ran it: the CPU model and threads, or the GPU's name.
    pub device: String,
    /// Model card the shape comes from (absent for `--shape`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Hardware card the peaks come from.
    pub hardware: String,
    pub tp: u32,
    /// Sequences per decode step (= m for the dense GEMMs).
    pub batch: u32,
    /// `qkv`, `attn_out`, `gate_up`, `down`, `router`, `expert_gate_up`, `expert_down`,
    /// `shared_gate_up`, `shared_down`, or `custom`.
    pub name: GemmName,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// Calls of this GEMM per decode step (layers x instances per layer).
    pub per_step: u64,
    /// Element type the GEMM ran in (`f32`, `bf16`, `fp8`).
    pub dtype: GemmDtype,
    /// The weights' type on the model card, when it differs from `dtype` (the CPU computes f32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_dtype: Option<GemmDtype>,
    /// One call, in microseconds: one sample per `iters`, each taken as `timing` says.
    pub time_us: Dist,
    /// How each sample was taken: `back_to_back` (`calls_per_sample` calls between two
    /// events on a GPU, their mean) or `per_call` (one call between two clock reads on the
    /// CPU; an event after every call in older GPU records).
    #[serde(default = "GemmTiming::older")]
    pub timing: GemmTiming,
    /// Calls in one sample of `time_us` (1 for `per_call`).
    #[serde(default = "one")]
    pub calls_per_sample: u32,
    /// 2 m n k / mean time.
    pub tflops: f64,
    /// (m k + k n) x input bytes + m n x output bytes, over the mean time (1e9 bytes/s).
    pub gbps: f64,
    /// The hardware card's dense tensor peak for `dtype` (bf16's for f32 and bf16) and memory
    /// bandwidth, to set the achieved figures against.
    pub peak_tflops: f64,
    pub peak_mem_gbps: f64,
    /// Copies of the weights cycled through so that a call does not find them in the
    /// last-level cache from the call before (a decode step reads each weight once).
    pub weight_copies: u32,
    pub iters: u32,
    pub warmup: u32,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(GemmRecord, "gemm", Gemm);

fn one() -> u32 {
    1
}
