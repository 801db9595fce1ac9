//! What the server and its GPUs were doing during a point (the `server` and `gpus` objects of a
//! `summary`), and the environment a server ran in (the `env` object of a `server` record).
//! Names are ours, the same for every engine: `telemetry::vocab` maps each engine's.

use super::{Engine, SpecFrom};
use serde::{Deserialize, Serialize};

/// A gauge sampled during a point: its mean and largest sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct GaugeStats {
    pub mean: f64,
    pub max: f64,
}

/// A server-side latency histogram over a point: the deltas of its buckets, read as
/// percentiles by linear interpolation inside a bucket (as Prometheus' `histogram_quantile`),
/// so a percentile is only as fine as the engine's buckets. Milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct BucketDist {
    pub n: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

/// Speculative decoding over a point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SpecStats {
    /// A modelled figure, not an engine's: the α of a chain model, the chance a draft token is
    /// accepted when every draft token before it was (a step then yields 1 + α + … + α^k
    /// tokens). Exact from per-position counters (vLLM); otherwise solved from the mean
    /// accepted length and the draft length, which assumes one α for every position. Records
    /// before this name called it `acceptance_rate`, which read as the engines' figure.
    #[serde(
        default,
        alias = "acceptance_rate",
        skip_serializing_if = "Option::is_none"
    )]
    pub chain_alpha: Option<f64>,
    /// The engines' figure: accepted draft tokens over draft tokens, what vLLM logs as its
    /// "draft acceptance rate" and SGLang exports as `spec_accept_rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_acceptance: Option<f64>,
    /// Tokens per verify step, the bonus token included: 1 + accepted / drafts (vLLM's "mean
    /// acceptance length", SGLang's `spec_accept_length`). Absent where the engine counts
    /// draft and accepted tokens only (llama.cpp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_accepted_len: Option<f64>,
    /// Draft tokens per verify step (k).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_len: Option<f64>,
    /// Acceptance of each draft position given the positions before it (vLLM only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_position: Vec<f64>,
    /// Verify steps in the point (counters only; SGLang's gauges do not tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drafts: Option<u64>,
    /// `counters` (deltas over the point, exact) or `gauges` (SGLang's and TensorRT-LLM's
    /// windowed gauges, averaged over the point's samples).
    pub from: SpecFrom,
}

/// The server's own view of one point, from its Prometheus `/metrics` scraped at the point's
/// start and end and every `--scrape-interval` in between. Counters are deltas over the point
/// (exactly windowed); gauges are the samples taken while the point ran. A figure the engine
/// does not export is absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ServerStats {
    /// Whose names the server used: `vllm`, `sglang`, `llamacpp`, `tgi`, `trtllm`, `triton`,
    /// `dynamo` (written as [`Engine::metrics_name`]).
    #[serde(with = "super::metrics_engine")]
    pub engine: Engine,
    /// Scrapes that answered during the point (start and end included).
    pub scrapes: u64,
    /// Gauge samples in the point: its first and last scrape and those taken in between.
    pub gauge_samples: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<GaugeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<GaugeStats>,
    /// KV-cache usage, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_usage: Option<GaugeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<u64>,
    /// Prefix-cache hits over queries in the point (tokens), not the engine's own window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_hit_rate: Option<f64>,
    /// The tokens the hit rate is over (vLLM's queries; SGLang's prompt tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_queried_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<SpecStats>,
    /// Prompt and generated tokens the server counted in the point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_tokens: Option<u64>,
    /// Requests the server finished in the point, and those it counted as aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<BucketDist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_ms: Option<BucketDist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<BucketDist>,
    /// The engine's per-request time per output token ((E2E - TTFT) / (tokens - 1)), where it
    /// exports one apart from its inter-token histogram (TensorRT-LLM, vLLM, TGI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<BucketDist>,
    /// The engine's own estimate of its work per GPU over the point (vLLM's and SGLang's
    /// `--enable-mfu-metrics`, srv-sim's cost model): FLOPs, bytes read, bytes written
    /// (deltas of `{vllm,sglang}:estimated_{flops,read_bytes,write_bytes}_per_gpu_total`; the
    /// mean over the series, SGLang's one per TP rank, never their sum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub est_flops_per_gpu: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub est_read_bytes_per_gpu: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub est_write_bytes_per_gpu: Option<f64>,
    /// The server stopped answering `/metrics` during the point: the figures cover the point
    /// only up to its last answered scrape.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    /// What was read but not believed, one line each (non-finite or out-of-range samples,
    /// duplicate series, prefix hits above queries): the figure they would have made is absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// A counter went down during the point (the server restarted): its delta is then its
    /// value at the end, as Prometheus' `rate` takes it, and the figures are suspect.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counter_reset: bool,
}

/// One GPU over one point: nvidia-smi's (or a DCGM exporter's) samples taken while it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GpuStats {
    /// The GPU's index on its host (nvidia-smi's `index`, DCGM's `gpu` label).
    pub index: u32,
    /// The MIG instance (DCGM's `GPU_I_ID`): on a MIG GPU each instance is an entry of its own;
    /// its memory and activity are the instance's, power, clock and temperature the GPU's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_instance: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub samples: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util_pct: Option<GaugeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_used_mib: Option<GaugeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<GaugeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<GaugeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_c: Option<GaugeStats>,
    /// PCIe traffic (DCGM's `DCGM_FI_PROF_PCIE_{RX,TX}_BYTES`; nvidia-smi's query has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_rx_bytes_s: Option<GaugeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_tx_bytes_s: Option<GaugeStats>,
    /// The clocks-event (formerly throttle) reasons seen while the point ran: each reason
    /// (NVML's bit names, `sw_power_cap`, `hw_slowdown`, ...) and the samples it was active
    /// in, out of `samples` (NVML's reasons, or nvidia-smi's `clocks_event_reasons.active`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub clocks_event_reasons: std::collections::BTreeMap<String, u64>,
    /// The GPU's energy over the point in joules, from its energy counter (NVML's
    /// `nvmlDeviceGetTotalEnergyConsumption` on the GPU host itself, read when the point starts
    /// and after it ends; DCGM's `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, its first and last
    /// scrape in the point), when it agrees with the sampled power within 2x. Absent where the
    /// counter gave no usable pair of readings, or one that disagreed (`energy_source` says
    /// so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// Where the point's energy for this GPU comes from: `counter` (`energy_j`), or
    /// `sampled_power` (the mean of `power_w` over the point times its duration). Absent
    /// where there is neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_source: Option<EnergySource>,
    /// Samples not believed (out of range, the same GPU twice in one sample), one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Where a GPU's energy over a point comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergySource {
    /// The GPU's own energy counter (NVML's or DCGM's), read at the point's start and end.
    Counter,
    /// The sampled power integrated over the point (its mean times the point's duration):
    /// no counter (a remote host read through nvidia-smi, which has none; a GPU without one),
    /// or one not believed (it went backwards, stood still while power was drawn, read past
    /// any lifetime, or was more than 2x off the sampled power).
    SampledPower,
    /// A source written by a newer tool.
    #[serde(other)]
    Other,
}

impl EnergySource {
    pub fn name(self) -> &'static str {
        match self {
            EnergySource::Counter => "counter",
            EnergySource::SampledPower => "sampled_power",
            EnergySource::Other => "other",
        }
    }
}

/// What people change between runs and forget, recorded once by `srv-launch` on the server's
/// host. A field it could not learn is absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ServerEnv {
    /// The engine's own version (`/version`, `/server_info`, `/props`, `/info`, or the
    /// program's `--version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_version: Option<String>,
    /// Model of the GPUs the server was given (the first of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    /// `uname -r`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The box's tunables, GPUs and topology, read before the server started ([`HostEnv`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Box<super::HostEnv>>,
}
