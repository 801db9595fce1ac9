use super::{Dist, Extra, GemmBackend, Labels, current_version};
use serde::{Deserialize, Serialize};

/// `collbench limits`: the device's physical limits measured rather than read off a datasheet:
/// memory bandwidth (a large copy and a read-only pass) and the cost of a launch. Where given,
/// `summarize` uses the measured bandwidth in the roofline instead of the card's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceLimitsRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// `cpu` (this machine's memory and cores) or `cublas` (a GPU through the CUDA driver).
    pub backend: GemmBackend,
    pub device: String,
    /// Hardware card whose datasheet bandwidth is set beside the measurement.
    pub hardware: String,
    /// Bytes of the buffer copied and read.
    pub bytes: u64,
    /// One copy of `bytes` (GPU: cuMemcpyDtoD; CPU: memcpy on every thread), microseconds.
    pub copy_us: Dist,
    /// 2 x bytes (read and written) / mean copy time, 1e9 bytes/s.
    pub copy_gbps: f64,
    /// One read-only pass over `bytes` (GPU: a reduction kernel; CPU: a sum on every thread).
    pub read_us: Dist,
    /// bytes / mean read time.
    pub read_gbps: f64,
    /// One empty launch: GPU: an empty kernel, back to back and event-timed; CPU: a 1x1x1
    /// call of the GEMM library (there is no kernel launch, this is its per-call overhead).
    pub launch_us: Dist,
    /// GPU: an empty kernel launched and waited for (host round trip); absent on the CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_sync_us: Option<Dist>,
    /// The hardware card's memory bandwidth.
    pub datasheet_mem_gbps: f64,
    pub iters: u32,
    pub warmup: u32,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(DeviceLimitsRecord, "device_limits", DeviceLimits);
