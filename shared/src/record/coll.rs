use super::{Dist, Extra, Labels, current_version, record_kind};
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
    pub op: String,
    /// `tcp` or `nccl`.
    pub backend: String,
    /// `ring`, `recursive_doubling`, ... (what actually ran).
    pub algo: String,
    pub ranks: u32,
    pub hosts: u32,
    /// Message size as nccl-tests counts it (the whole array for allgather/reduce-scatter).
    pub bytes: u64,
    pub count: u64,
    pub dtype: String,
    pub redop: String,
    /// `pipelined` (back-to-back ops) or `latency` (wait after each op).
    pub mode: String,
    pub time_us: Dist,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// Elements that differed from the exactly known expected result.
    pub wrong: u64,
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
    pub op: String,
    pub backend: String,
    pub ranks: u32,
    pub sizes: u32,
    pub avg_busbw_gbps: f64,
    pub wrong: u64,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(CollRunRecord, "coll_run", CollRun);
