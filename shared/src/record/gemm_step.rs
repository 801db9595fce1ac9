use super::{Dist, Extra, GemmBackend, GemmDtype, Labels, current_version};
use serde::{Deserialize, Serialize};

/// `collbench gemm` / `collbench decode --compute`: every GEMM of one decode step at one
/// batch size, as measured one by one (`gemm` records) and as one back-to-back sequence.
/// What `summarize`'s decode budget reads for the compute half of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmStepRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// `cpu`, `cublas` or `cublaslt`, as in the `gemm` records.
    pub backend: GemmBackend,
    pub device: String,
    pub model: String,
    pub hardware: String,
    pub tp: u32,
    pub batch: u32,
    pub dtype: GemmDtype,
    /// GEMM calls in one step.
    pub gemms_per_step: u64,
    /// FLOPs and minimum bytes of the step's GEMMs on one GPU of the TP group.
    pub flops_per_step: f64,
    pub bytes_per_step: f64,
    /// Sum over the step's GEMMs of calls x mean time of one call: the GEMM time per decoded
    /// token, in microseconds.
    pub gemm_us_per_step: f64,
    /// The whole sequence (layer by layer, in order) launched back to back, one sample per
    /// step between two events (a GPU waiting for the host's launches is counted).
    pub sequence_us: Dist,
    /// The same sequence captured once as a CUDA graph and replayed, one replay per sample
    /// between two events: how engines run decode (no launch gaps). Absent on the CPU (no
    /// graphs) and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_us: Option<Dist>,
    /// max(0, mean sequence - gemm_us_per_step): what calling the GEMMs one after another
    /// costs beyond the GEMMs themselves (launch and dispatch gaps).
    pub launch_overhead_us_per_step: f64,
    /// The card's roofline for the same FLOPs and bytes: max(FLOPs / peak, bytes / bandwidth).
    pub roofline_us_per_step: f64,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(GemmStepRecord, "gemm_step", GemmStep);
