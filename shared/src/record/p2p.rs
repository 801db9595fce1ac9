use super::{CollBackend, Extra, Labels, current_version};
use serde::{Deserialize, Serialize};

/// `collbench p2p`: one ordered pair of ranks (GPUs on the nccl backend, processes or hosts on
/// tcp), the bandwidth from `src` to `dst` alone and both ways at once, and the latency of a
/// small message between them (nvbandwidth's matrices, one record per cell; no diagonal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct P2pRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// `tcp` or `nccl`.
    pub backend: CollBackend,
    /// Ranks in the job (the matrix is ranks x ranks).
    pub ranks: u32,
    /// The sending rank (the row).
    pub src: u32,
    /// The receiving rank (the column).
    pub dst: u32,
    /// Bytes of each bandwidth message.
    pub bytes: u64,
    /// `bytes` x iters / time for src sending to dst alone, 1e9 bytes/s.
    pub uni_gbps: f64,
    /// Both directions at once: 2 x `bytes` x iters / time, 1e9 bytes/s.
    pub bidir_gbps: f64,
    /// Bytes of each latency message.
    pub latency_bytes: u64,
    /// Half the mean round trip of a `latency_bytes` message src -> dst -> src, microseconds.
    pub latency_us: f64,
    pub iters: u32,
    pub warmup: u32,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(P2pRecord, "p2p", P2p);
