use super::{Engine, Extra, Labels, PdMember, ServerEnv, StartupPhaseName, current_version};
use serde::{Deserialize, Serialize};

/// A running server, written by `srv-launch` once it is ready; `loadgen` targets it and
/// `srv-kill` stops exactly it (pid, process group and start time guard against pid reuse).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    /// `sglang`, `vllm`, `llama-cpp`, `trtllm`, `sim` or `cmd`.
    pub engine: Engine,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Where it runs: `localhost`, or the SSH target `[user@]addr[:port]`.
    pub host: String,
    pub pid: u32,
    /// Process group (the server is started as a session leader, so pgid = sid = pid).
    pub pgid: u32,
    /// Start time of `pid` in clock ticks since boot (/proc/PID/stat field 22): a pid whose
    /// start time differs is another process and is never signalled.
    pub start_ticks: u64,
    pub port: u16,
    /// Base URL of the OpenAI-compatible API, e.g. `http://127.0.0.1:8000`.
    pub url: String,
    /// The exact command line that was run.
    pub command: String,
    /// Path of the server's combined stdout/stderr log (on `host`).
    pub log: String,
    /// Seconds from launch until the server answered as ready.
    pub ready_s: f64,
    /// The id srv-launch puts in the server's environment (`SERVBENCH_LAUNCH_ID`): srv-kill
    /// finds every process of the server by it, those that left its process group too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_id: Option<String>,
    /// The model name the API serves (the first of `/v1/models`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// `CUDA_VISIBLE_DEVICES` as given with `--gpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<String>,
    /// The `--name` the server was launched with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The exact argv that was run (`command` is it as one shell line): the full flag set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// The engine's version and the host's GPUs, driver, CUDA, kernel, CPU and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<ServerEnv>,
    /// Launched with srv-launch `--self-report`: the engine was asked to report on itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub self_report: bool,
    /// The engine's own self-report flags srv-launch added (part of `argv` too): the preset's
    /// measured-free ones in every launch (vLLM's `--enable-per-request-metrics`) and, with
    /// `self_report`, the rest; empty for an engine that reports without asking (llama-server's
    /// `timings`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub self_report_flags: Vec<String>,
    /// The startup in phases, from the engine's log as srv-launch read it while it waited:
    /// absent in records written before it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<Startup>,
    /// srv-kill passed this record on after killing its server (the `kill` record after it
    /// says how that went): it tells downstream readers (summarize's environment table) what
    /// ran; no tool takes it as a target.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub killed: bool,
    /// The member of a disaggregated prefill/decode group this server is (`srv-launch --pd`);
    /// absent for a server launched alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pd: Option<PdMember>,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(ServerRecord, "server", Server);

/// How a server's startup went, phase by phase: each phase its engine's log reported while
/// srv-launch waited for it (absent ones are absent, never guessed), and the time to ready.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Startup {
    /// Seconds from launch until the server answered as ready (the record's `ready_s`).
    pub ready_s: f64,
    /// In the order the log reported them; empty for a `--cmd` server (no preset, no markers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<StartupPhase>,
    /// The log grew past srv-launch's read cap during the startup: phases after the cap are
    /// missing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log_cut: bool,
}

/// One phase of a startup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartupPhase {
    pub name: StartupPhaseName,
    /// Seconds from launch until srv-launch first saw the phase's line in the log (an upper
    /// bound on when it was printed: the log is read once per readiness poll).
    pub at_s: f64,
    /// The phase's own duration as the engine printed it (`Loading weights took 1.23
    /// seconds`); absent where the engine prints none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_s: Option<f64>,
}
