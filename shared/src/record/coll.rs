use super::{
    CollAlgo, CollBackend, CollDtype, CollMode, CollOp, Dist, Extra, Labels, RedOp, current_version,
};
use serde::{Deserialize, Serialize};

/// One collective at one message size, measured the way nccl-tests does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// `allreduce`, `allgather`, `reduce_scatter`, `broadcast`, `alltoall`, `sendrecv`.
    pub op: CollOp,
    /// `tcp` or `nccl`.
    pub backend: CollBackend,
    /// `ring`, `recursive_doubling`, ... (what actually ran).
    pub algo: CollAlgo,
    pub ranks: u32,
    pub hosts: u32,
    /// Message size as nccl-tests counts it (the whole array for allgather/reduce-scatter).
    pub bytes: u64,
    pub count: u64,
    pub dtype: CollDtype,
    pub redop: RedOp,
    /// `pipelined` (back-to-back ops) or `latency` (wait after each op).
    pub mode: CollMode,
    pub time_us: Dist,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// Elements that differed from the exactly known expected result.
    pub wrong: u64,
    /// False with `--no-check`: `wrong` is then 0 unchecked.
    pub checked: bool,
    /// Timed iterations per size (`-n`).
    pub iters: u32,
    /// Untimed warm-up iterations per size (`-w`).
    pub warmup: u32,
    /// The root rank of a broadcast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u32>,
    /// Times a rank lost its core to another process while it waited for a peer, summed over
    /// the ranks (tcp backend; absent when none did): the size's times, small messages above
    /// all, then carry scheduler delays; `time_us.p50` beside `time_us.mean` says how much.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_core_waits: Option<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(CollRecord, "coll", Coll);

/// The footer of a collbench run: the average bus bandwidth as nccl-tests prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollRunRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    pub op: CollOp,
    pub backend: CollBackend,
    pub ranks: u32,
    pub sizes: u32,
    pub avg_busbw_gbps: f64,
    pub wrong: u64,
    pub hosts: u32,
    /// Why the run stopped before its last size (a rank died, a peer timed out), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(CollRunRecord, "coll_run", CollRun);

/// `collbench decode`: the allreduces of one decode step under tensor parallelism, measured,
/// next to the step's roofline time. What `summarize`'s decode budget reads.
///
/// A decode step of a dense transformer with tensor parallelism `tp` does two allreduces per
/// layer (after attention and after the MLP), each of `batch x hidden x dtype` bytes. The step
/// makes one token for each of the `batch` sequences, so the step's communication time is what
/// every sequence's time per output token pays for communication.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodeRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// Model preset name.
    pub model: String,
    /// Hardware preset the roofline uses.
    pub hardware: String,
    /// `tcp` or `nccl`.
    pub backend: CollBackend,
    /// Algorithm that ran for this message size.
    pub algo: CollAlgo,
    /// Tensor-parallel degree = ranks of the allreduce.
    pub tp: u32,
    pub hosts: u32,
    /// Sequences decoded per step.
    pub batch: u32,
    pub layers: u32,
    pub hidden: u32,
    /// Activation dtype of the allreduce.
    pub dtype: CollDtype,
    /// Bytes of one allreduce: batch x hidden x dtype size.
    pub allreduce_bytes: u64,
    /// Allreduces per decode step: 2 x layers.
    pub allreduces_per_step: u32,
    /// One allreduce, timed alone (latency mode), in microseconds.
    pub allreduce_us: Dist,
    /// Communication per decode step = per output token of each sequence: allreduces_per_step
    /// x the mean allreduce time.
    pub comm_us_per_token: f64,
    /// Same with the p99 allreduce time (a pessimistic budget).
    pub comm_us_per_token_p99: f64,
    /// Roofline compute time of one step on one GPU (FLOPs / peak).
    pub step_compute_us: f64,
    /// Roofline memory time of one step on one GPU (weights + KV bytes / bandwidth).
    pub step_memory_us: f64,
    /// max(step_compute_us, step_memory_us): the step's lower bound without communication.
    pub step_roofline_us: f64,
    /// comm_us_per_token / (comm_us_per_token + step_roofline_us).
    pub comm_fraction: f64,
    /// Wrong elements in the allreduce results (exact check).
    pub wrong: u64,
    /// Tokens of context per sequence (the KV-cache bytes of the roofline).
    pub context_tokens: u32,
    /// What the hardware preset's link model predicts for the same allreduces, to set the
    /// measured `comm_us_per_token` against.
    pub modeled_comm_us_per_token: f64,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(DecodeRecord, "decode", Decode);
