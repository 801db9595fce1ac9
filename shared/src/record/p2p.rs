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
    /// How the bytes moved: `tcp` (the tcp backend's sockets), `nccl` (ncclSend/ncclRecv)
    /// or `copy_engine` (cuMemcpyPeerAsync). Records before this field are `tcp`.
    #[serde(default)]
    pub method: P2pMethod,
    /// `copy_engine`: whether the driver allowed direct peer access between the two GPUs
    /// (cuDeviceCanAccessPeer, then enabled); without it the copies are staged through host
    /// memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_access: Option<bool>,
    /// The pair's link as `nvidia-smi topo -m` prints it (`NV18`, `PIX`, `SYS`, ...), where
    /// known (GPUs matched by PCI bus id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(P2pRecord, "p2p", P2p);

/// How a `p2p` record's bytes moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum P2pMethod {
    /// The tcp backend's sockets between processes or hosts.
    #[default]
    Tcp,
    /// NCCL's send/recv between two GPUs.
    Nccl,
    /// The GPUs' copy engines (cuMemcpyPeerAsync), as nvbandwidth and p2pBandwidthLatencyTest.
    CopyEngine,
    /// A method written by a newer tool.
    #[serde(other)]
    Other,
}

impl P2pMethod {
    pub fn name(self) -> &'static str {
        match self {
            P2pMethod::Tcp => "tcp",
            P2pMethod::Nccl => "nccl",
            P2pMethod::CopyEngine => "copy_engine",
            P2pMethod::Other => "other",
        }
    }
}
