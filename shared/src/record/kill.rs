use super::{Extra, Labels, current_version};
use serde::{Deserialize, Serialize};

/// The outcome of one `srv-kill` target: what matched, what was sent, what survived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// How the target was named: `server pid 1234`, `port 8000`, `match 'sglang'`, `gpu`, ...
    pub target: String,
    pub host: String,
    /// Every process that was signalled (or, with `--dry-run`, would have been).
    #[serde(default)]
    pub matched: Vec<KilledProcess>,
    /// Signals sent, in order (`TERM`, `KILL`).
    #[serde(default)]
    pub signals: Vec<String>,
    /// Pids still alive at the end: empty on success.
    #[serde(default)]
    pub survivors: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_free: Option<bool>,
    /// Used GPU memory per GPU as the kill starts and after it, where nvidia-smi exists; the
    /// position is the GPU index, `null` where that GPU gave no value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_used_before_bytes: Option<Vec<Option<u64>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_used_after_bytes: Option<Vec<Option<u64>>>,
    /// Whether every killed pid let go of its GPU memory within `--gpu-wait` (where nvidia-smi
    /// exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_released: Option<bool>,
    /// What went wrong with the GPU check (nvidia-smi hung, failed or printed without end): a
    /// warning, never a reason the kill failed or was not done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_warning: Option<String>,
    /// Why a target was found but not signalled: a reused pid, srv-kill itself or a caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// `--dry-run`: `matched` lists what would have been killed; nothing was signalled.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    pub elapsed_s: f64,
    /// True when the target was found and every matched process is gone.
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(KillRecord, "kill", Kill);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KilledProcess {
    pub pid: u32,
    pub command: String,
}
