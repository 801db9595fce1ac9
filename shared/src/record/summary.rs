use super::{Dist, Extra, GpuStats, Labels, PointKey, ServerStats, Workload, current_version};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The statistics of one sweep point, written by `loadgen` when the point ends (and computed
/// identically by `summarize` from `request` records; see `stats`). Histograms travel
/// serialized so summaries from several hosts or runs merge exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    pub point: PointKey,
    /// True when the point was cut short (Ctrl-C, SIGTERM, the server gone, a crash of the run).
    #[serde(default)]
    pub partial: bool,
    /// Why the point ended before its planned requests or time, where loadgen knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<PointStop>,
    /// That reason in words, with the figures (`server down: every connection failed for 2.0 s ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Every request: `ok + errors + cancelled`.
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    /// Requests the client cancelled on purpose (`--cancel-rate`): neither ok nor errors, and
    /// in no latency figure (those are the others').
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cancelled: u64,
    #[serde(default)]
    pub errors_by_class: BTreeMap<String, u64>,
    /// Wall window: first intended send to last end.
    pub duration_s: f64,
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    pub req_s: f64,
    pub output_tok_s: f64,
    pub total_tok_s: f64,
    /// Embeddings (`loadgen --api embeddings`): the inputs embedded, and per second (the
    /// point's throughput; an embedding request has no output tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_s: Option<f64>,
    /// Output throughput over the steady-state window (all slots busy; see README).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_output_tok_s: Option<f64>,
    /// Requests per second that met every `--slo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput_req_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<Dist>,
    /// Where the model reasoned: time to the first answer token, reasoning not counted (TTFO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfo_ms: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_ms: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_lag_ms: Option<Dist>,
    /// Output tokens per content chunk (above 1: speculative decoding or server-side batching).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_chunk: Option<f64>,
    /// Where the model reasoned: the share of the output tokens that were reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_share: Option<f64>,
    /// Requests whose prompt had exactly the target length / had a target and a prompt length
    /// the server reported (a request that never reached the server is in neither).
    #[serde(default)]
    pub prompt_len_exact: u64,
    #[serde(default)]
    pub prompt_len_targeted: u64,
    /// Successful requests whose output token count differed from `max_tokens`.
    #[serde(default)]
    pub output_len_mismatch: u64,
    /// CPU seconds the client spent on this point (user + system), where known; the
    /// telemetry threads' own CPU is not in it (see `telemetry_cpu_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cpu_s: Option<f64>,
    /// CPU seconds loadgen's scraping and GPU sampling spent on this point (their own threads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry_cpu_s: Option<f64>,
    /// The server's own view of the point, from its `/metrics` (absent with `--no-metrics` or
    /// a server without them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerStats>,
    /// The server's GPUs during the point, one entry per GPU it uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuStats>,
    /// Loaded through a P/D group's proxy: each prefill and decode server's own view of the
    /// point, from its `/metrics` (the proxy's own is `server`), in the group's start order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pd_members: Vec<super::PdMemberStats>,
    /// Model the requests named (`loadgen --model`, or the server's first). Not in `workload`:
    /// it names the system under test (what readers pick a roofline and group points by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The load applied (what was sent and how it arrived): schema v2 nests it here; a v1
    /// summary's flat fields are moved in on reading ([`super::WORKLOAD_FIELDS`]).
    #[serde(default)]
    pub workload: Workload,
    /// Conversations: the figures of each turn index (turn 1's TTFT against later turns').
    /// Measured, so not in `workload`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_turn: Vec<TurnSummary>,
    /// LoRA mixes (`loadgen --lora`): the figures of each adapter's requests, by name.
    /// Measured, so not in `workload`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_adapter: Vec<AdapterSummary>,
    /// The point was loaded by several processes (loadgen ranks under mpirun, srun or
    /// `--rank`): this rank's part of it, or, in rank 0's merged summary, the whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<RankPart>,
    /// TTFT split by the engine's own per-request timing (queue, prefill, outside the engine),
    /// where the requests carried it (loadgen README, "Server timing").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_split: Option<super::TtftSplit>,
    /// The engine's own steps during the point, from its step log (vLLM's iteration details),
    /// where the server logged them (loadgen README, "Engine steps").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_steps: Option<super::EngineSteps>,
    /// The point's own noise from time blocks within it (batch means), where it was long
    /// enough: what a comparison of single runs rests on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<BatchNoise>,
    /// `loadgen --eval`: the accuracy of the point's answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<super::EvalSummary>,
    /// `loadgen --response-format`: the point's answers valid for the schema, counted as
    /// `eval` counts (`correct`: valid; `accuracy`: the validity rate, valid / judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_validity: Option<super::EvalSummary>,
    /// Metric name (`ttft_ms`, ...) to HdrHistogram V2+deflate, base64; values in microseconds.
    #[serde(default)]
    pub hist: BTreeMap<String, String>,
    #[serde(flatten)]
    pub extra: Extra,
}
record_kind!(SummaryRecord, "summary", Summary);

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A point's noise by batch means (`stats::blocks`): its wall window cut into
/// `blocks` time blocks of `block_s` seconds, each long enough (two mean E2E latencies at
/// least) that closed-loop waves do not tie one block to the next; every figure is computed per
/// block, and `hw95` holds each figure's 95% half-width, t(blocks - 1) * sd(block figures) /
/// sqrt(blocks), by its name (`output_tok_s`, `req_s`, `ttft_ms_p50`, `tpot_ms_mean`, ...).
/// `blocks` is how many independent samples a comparison of this point rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchNoise {
    pub blocks: u32,
    pub block_s: f64,
    /// The successes discounted for waves: the wall window over the mean E2E latency, at
    /// most the successes. The sample size of the percentiles' distribution-free intervals.
    pub independent_requests: u64,
    pub hw95: BTreeMap<String, f64>,
}

/// A point loaded by several processes: one rank's part (its summary carries `rank` and `host`
/// labels), or rank 0's merge of every rank's summary (`merged`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RankPart {
    /// Processes that loaded the point together.
    pub world: u32,
    /// This is rank 0's exact merge of every rank's summary of the point (histograms added):
    /// the point's result. Readers that have the per-rank summaries use those instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub merged: bool,
    /// This rank's part of the point's concurrency (closed loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_concurrency: Option<u32>,
    /// This rank's part of the point's request rate (open loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_rate_rps: Option<f64>,
    /// When the point started, ms since the Unix epoch: on this rank's clock (merged: rank 0's
    /// clock, the earliest rank corrected by its offset).
    pub start_unix_ms: f64,
    /// This rank's clock minus rank 0's (measured at the rendezvous, NTP-style).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<f64>,
    /// Round trip of the exchange that measured the offset: the offset is good to half of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_rtt_ms: Option<f64>,
    /// Merged: latest minus earliest start across the ranks, each corrected by its clock offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_spread_ms: Option<f64>,
}

/// Why a sweep point stopped early (`stopped_by` of a `summary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointStop {
    /// Ctrl-C or SIGTERM.
    Interrupted,
    /// The server stopped accepting connections (it crashed or was killed): what finished
    /// before is kept, nothing after it was sent.
    ServerDown,
    /// Another rank of the job died, went silent or failed: the point stopped on every rank
    /// (`stop_reason` names the rank).
    RankFailed,
    /// A reason written by a newer tool.
    #[serde(other)]
    Other,
}

/// One LoRA adapter's requests of a point (`loadgen --lora`): its share of the load and its
/// latencies and throughput beside the others'.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterSummary {
    /// The adapter's name as the requests' `model`.
    pub adapter: String,
    pub requests: u64,
    pub ok: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<Dist>,
    /// Its successful requests' output tokens.
    pub output_tokens: u64,
    /// Those tokens over the point's whole wall window (`duration_s`): the adapters' rates add
    /// up to the point's `output_tok_s`.
    pub output_tok_s: f64,
}

/// One turn index of a conversation point: every session's turn `turn` together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSummary {
    /// From 1.
    pub turn: u32,
    pub requests: u64,
    pub ok: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<Dist>,
    /// Mean prompt tokens the server counted (the history grows turn by turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_mean: Option<f64>,
    /// Mean prompt tokens served from the prefix cache, over the requests whose server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens_mean: Option<f64>,
}
