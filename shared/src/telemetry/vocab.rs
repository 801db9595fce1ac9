//! One vocabulary across engines: [`TABLE`] maps each engine's Prometheus names to our figures
//! ([`Figure`]), with how each is read. srv-sim speaks vLLM's names by default and SGLang's with
//! `--metrics-names sglang`, so it is read through those rows. [`GPU_TABLE`] does the same for
//! a DCGM exporter's GPU fields.
//!
//! Quirks the table encodes (from each engine's source, see shared/reference/engine-endpoints.md):
//! - vLLM's counters are scraped with `_total` (Python's prometheus_client adds it); its
//!   speculative figures are counters, per draft position too.
//! - SGLang's speculative figures are gauges only (`spec_accept_length`, `spec_accept_rate`),
//!   set over its own window of decode steps: they are sampled, never differenced. Its prefix
//!   cache has a windowed gauge (`cache_hit_rate`, not used) and a counter of cached tokens,
//!   which over its prompt-token counter gives the hit rate. A preemption is a "retraction";
//!   versions name the counter differently, so both names are rows. With
//!   `--enable-metrics-for-all-schedulers` every TP rank's scheduler exports its own copy of
//!   the batch state (label `tp_rank`): one state, read once (see `prom::Exposition::read`).
//! - llama.cpp's `n_busy_slots_per_decode` and `n_tokens_max` are declared counters but are an
//!   average and a high-water mark: not read. Its `prompt_tokens_total` counts the prompt
//!   tokens it computed, without those its prompt cache served (recent builds count those in
//!   `prompt_tokens_cached_total`): the two add up to the prompt. No latency histograms, no
//!   KV figure; speculative counters of drafts, draft and accepted tokens (older builds: none,
//!   or the token counters alone). Names checked against a running llama-server (b11434).
//! - TGI has no token counters: its token-length histograms' `_sum` deltas are the tokens; no
//!   TTFT histogram.
//! - TensorRT-LLM's `trtllm-serve` serves Prometheus text at `/prometheus/metrics` (its
//!   `/metrics` is JSON); names from `tensorrt_llm/metrics/collector.py`. Its
//!   `time_per_output_token_seconds` is observed once per request: a TPOT, not an ITL.
//! - Triton's TensorRT-LLM backend exports the batch manager's state as labelled gauges
//!   (`nv_trt_llm_request_metrics{request_type}`, `nv_trt_llm_kv_cache_block_metrics{
//!   kv_cache_block_type}`); the TTFT is Triton's own `nv_inference_first_response_histogram_ms`
//!   (milliseconds, with `--metrics-config histogram_latencies=true`) of the `tensorrt_llm`
//!   model, the one an ensemble's pre- and post-processing models wrap.
//! - NVIDIA Dynamo's frontend (`dynamo_frontend_*`, on the OpenAI port) counts what it routes:
//!   its in-flight requests include the queued ones; token counts are its sequence-length
//!   histograms' sums; no KV figure (that is on each worker's own port).

/// The engine whose names a server's `/metrics` uses: the one engine type of the records
/// (`server.engine`, `summary.server.engine`), here given its metric vocabulary.
pub use crate::record::Engine;

impl Engine {
    /// The engines with a metric vocabulary (srv-sim and `--cmd` servers speak one of these).
    pub const ALL: [Engine; 7] = [
        Engine::Vllm,
        Engine::Sglang,
        Engine::LlamaCpp,
        Engine::Tgi,
        Engine::Trtllm,
        Engine::Triton,
        Engine::Dynamo,
    ];

    /// The name in `summary.server.engine` (`llamacpp`, as its metric prefix; the preset's
    /// name, [`Engine::as_str`], is `llama-cpp`).
    pub fn metrics_name(&self) -> &str {
        match self {
            Engine::LlamaCpp => "llamacpp",
            other => other.as_str(),
        }
    }

    /// The prefix of its metric names, by which a scrape is recognised (empty for an engine
    /// without a vocabulary of its own).
    pub fn prefix(&self) -> &'static str {
        match self {
            Engine::Vllm => "vllm:",
            Engine::Sglang => "sglang:",
            Engine::LlamaCpp => "llamacpp:",
            Engine::Tgi => "tgi_",
            Engine::Trtllm => "trtllm_",
            Engine::Triton => "nv_",
            Engine::Dynamo => "dynamo_frontend_",
            Engine::Sim | Engine::Cmd | Engine::Other(_) => "",
        }
    }
}

/// Our figures, the same for every engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Figure {
    Running,
    Waiting,
    KvUsage,
    Preemptions,
    /// Prompt tokens looked up in the prefix cache, and those found there.
    PrefixQueries,
    PrefixHits,
    PromptTokens,
    /// Prompt tokens the engine computed, those its prefix cache served left out (llama.cpp):
    /// with the cached ones (`PrefixHits`) they make the prompt.
    PromptComputed,
    GenerationTokens,
    /// Requests finished (every reason), and those aborted.
    Requests,
    Aborted,
    /// Verify steps, draft tokens, accepted draft tokens, accepted per draft position.
    SpecDrafts,
    SpecDraftTokens,
    SpecAccepted,
    SpecAcceptedPerPos,
    /// Windowed gauges (SGLang): tokens per verify step, accepted over draft tokens.
    SpecAcceptLength,
    SpecAcceptRate,
    TtftSeconds,
    ItlSeconds,
    E2eSeconds,
    /// Per-request time per output token, observed once per request.
    TpotSeconds,
    /// The engine's own estimate of its work per GPU (vLLM's and SGLang's
    /// `--enable-mfu-metrics`): FLOPs, bytes read and bytes written. Every series is one GPU's
    /// (SGLang's one per TP rank, vLLM's one per engine): read as their mean, never their sum.
    EstFlops,
    EstReadBytes,
    EstWriteBytes,
}

/// How a source is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Sampled during the point: mean and max.
    Gauge,
    /// Differenced over the point; samples of every label set summed.
    Counter,
    /// A counter split by the value of this label (vLLM's `position`).
    CounterBy(&'static str),
    /// Buckets differenced over the point.
    Histogram,
    /// A histogram in milliseconds (Triton's): bounds and sum read as seconds.
    HistogramMs,
    /// A histogram's `_sum`, differenced: a counter the engine does not export otherwise.
    HistogramSum,
}

/// One engine's name for one of our figures.
#[derive(Debug, Clone)]
pub struct Source {
    pub engine: Engine,
    pub figure: Figure,
    /// The family name as scraped (`_bucket`/`_sum`/`_count` not included for histograms).
    pub name: &'static str,
    pub read: Read,
    /// Only the samples whose label has this value (vLLM's `finished_reason="abort"`).
    pub only: Option<(&'static str, &'static str)>,
}

const fn row(engine: Engine, figure: Figure, name: &'static str, read: Read) -> Source {
    Source {
        engine,
        figure,
        name,
        read,
        only: None,
    }
}

/// A row read only from the samples whose label `key` is `value`.
const fn sel(
    engine: Engine,
    figure: Figure,
    name: &'static str,
    read: Read,
    (key, value): (&'static str, &'static str),
) -> Source {
    Source {
        engine,
        figure,
        name,
        read,
        only: Some((key, value)),
    }
}

use Engine::*;
use Figure::*;
use Read::*;

/// Every engine's name for each of our figures. An engine may have several rows for one
/// figure (names that changed between versions): the first present in a scrape is read.
pub const TABLE: &[Source] = &[
    // vLLM (v1 engine); srv-sim by default.
    row(Vllm, Running, "vllm:num_requests_running", Gauge),
    row(Vllm, Waiting, "vllm:num_requests_waiting", Gauge),
    row(Vllm, KvUsage, "vllm:kv_cache_usage_perc", Gauge),
    row(Vllm, KvUsage, "vllm:gpu_cache_usage_perc", Gauge),
    row(Vllm, Preemptions, "vllm:num_preemptions_total", Counter),
    row(
        Vllm,
        PrefixQueries,
        "vllm:prefix_cache_queries_total",
        Counter,
    ),
    row(Vllm, PrefixHits, "vllm:prefix_cache_hits_total", Counter),
    row(Vllm, PromptTokens, "vllm:prompt_tokens_total", Counter),
    row(
        Vllm,
        GenerationTokens,
        "vllm:generation_tokens_total",
        Counter,
    ),
    row(Vllm, Requests, "vllm:request_success_total", Counter),
    Source {
        engine: Vllm,
        figure: Aborted,
        name: "vllm:request_success_total",
        read: Counter,
        only: Some(("finished_reason", "abort")),
    },
    row(
        Vllm,
        SpecDrafts,
        "vllm:spec_decode_num_drafts_total",
        Counter,
    ),
    row(
        Vllm,
        SpecDraftTokens,
        "vllm:spec_decode_num_draft_tokens_total",
        Counter,
    ),
    row(
        Vllm,
        SpecAccepted,
        "vllm:spec_decode_num_accepted_tokens_total",
        Counter,
    ),
    row(
        Vllm,
        SpecAcceptedPerPos,
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        CounterBy("position"),
    ),
    row(
        Vllm,
        TtftSeconds,
        "vllm:time_to_first_token_seconds",
        Histogram,
    ),
    row(
        Vllm,
        ItlSeconds,
        "vllm:inter_token_latency_seconds",
        Histogram,
    ),
    // Before 0.11 vLLM had no inter-token histogram; its per-token one is the same figure.
    row(
        Vllm,
        ItlSeconds,
        "vllm:time_per_output_token_seconds",
        Histogram,
    ),
    row(
        Vllm,
        E2eSeconds,
        "vllm:e2e_request_latency_seconds",
        Histogram,
    ),
    row(
        Vllm,
        TpotSeconds,
        "vllm:request_time_per_output_token_seconds",
        Histogram,
    ),
    row(
        Vllm,
        EstFlops,
        "vllm:estimated_flops_per_gpu_total",
        Counter,
    ),
    row(
        Vllm,
        EstReadBytes,
        "vllm:estimated_read_bytes_per_gpu_total",
        Counter,
    ),
    row(
        Vllm,
        EstWriteBytes,
        "vllm:estimated_write_bytes_per_gpu_total",
        Counter,
    ),
    // SGLang; srv-sim --metrics-names sglang.
    row(Sglang, Running, "sglang:num_running_reqs", Gauge),
    row(Sglang, Waiting, "sglang:num_queue_reqs", Gauge),
    row(Sglang, KvUsage, "sglang:token_usage", Gauge),
    row(
        Sglang,
        Preemptions,
        "sglang:num_retracted_requests_total",
        Counter,
    ),
    row(
        Sglang,
        Preemptions,
        "sglang:num_retracted_reqs_total",
        Counter,
    ),
    // SGLang's hit rate is over prompt tokens: cached tokens / prompt tokens.
    row(Sglang, PrefixQueries, "sglang:prompt_tokens_total", Counter),
    row(Sglang, PrefixHits, "sglang:cached_tokens_total", Counter),
    row(Sglang, PromptTokens, "sglang:prompt_tokens_total", Counter),
    row(
        Sglang,
        GenerationTokens,
        "sglang:generation_tokens_total",
        Counter,
    ),
    row(Sglang, Requests, "sglang:num_requests_total", Counter),
    row(
        Sglang,
        Aborted,
        "sglang:num_aborted_requests_total",
        Counter,
    ),
    row(Sglang, SpecAcceptLength, "sglang:spec_accept_length", Gauge),
    row(Sglang, SpecAcceptRate, "sglang:spec_accept_rate", Gauge),
    row(
        Sglang,
        TtftSeconds,
        "sglang:time_to_first_token_seconds",
        Histogram,
    ),
    row(
        Sglang,
        ItlSeconds,
        "sglang:inter_token_latency_seconds",
        Histogram,
    ),
    row(
        Sglang,
        E2eSeconds,
        "sglang:e2e_request_latency_seconds",
        Histogram,
    ),
    // SGLang --enable-mfu-metrics: one series per scheduler (`tp_rank`), each per GPU.
    row(
        Sglang,
        EstFlops,
        "sglang:estimated_flops_per_gpu_total",
        Counter,
    ),
    row(
        Sglang,
        EstReadBytes,
        "sglang:estimated_read_bytes_per_gpu_total",
        Counter,
    ),
    row(
        Sglang,
        EstWriteBytes,
        "sglang:estimated_write_bytes_per_gpu_total",
        Counter,
    ),
    // llama.cpp's llama-server with --metrics.
    row(LlamaCpp, Running, "llamacpp:requests_processing", Gauge),
    row(LlamaCpp, Waiting, "llamacpp:requests_deferred", Gauge),
    row(
        LlamaCpp,
        PromptComputed,
        "llamacpp:prompt_tokens_total",
        Counter,
    ),
    row(
        LlamaCpp,
        PrefixHits,
        "llamacpp:prompt_tokens_cached_total",
        Counter,
    ),
    row(
        LlamaCpp,
        GenerationTokens,
        "llamacpp:tokens_predicted_total",
        Counter,
    ),
    row(
        LlamaCpp,
        SpecDrafts,
        "llamacpp:spec_decode_num_drafts_total",
        Counter,
    ),
    row(
        LlamaCpp,
        SpecDraftTokens,
        "llamacpp:spec_decode_num_draft_tokens_total",
        Counter,
    ),
    row(
        LlamaCpp,
        SpecAccepted,
        "llamacpp:spec_decode_num_accepted_tokens_total",
        Counter,
    ),
    // TGI.
    row(Tgi, Running, "tgi_batch_current_size", Gauge),
    row(Tgi, Waiting, "tgi_queue_size", Gauge),
    row(Tgi, PromptTokens, "tgi_request_input_length", HistogramSum),
    row(
        Tgi,
        GenerationTokens,
        "tgi_request_generated_tokens",
        HistogramSum,
    ),
    row(Tgi, Requests, "tgi_request_success", Counter),
    row(Tgi, E2eSeconds, "tgi_request_duration", Histogram),
    row(
        Tgi,
        TpotSeconds,
        "tgi_request_mean_time_per_token_duration",
        Histogram,
    ),
    // TensorRT-LLM's trtllm-serve (/prometheus/metrics), tensorrt_llm/metrics/collector.py.
    row(Trtllm, Running, "trtllm_num_requests_running", Gauge),
    row(Trtllm, Waiting, "trtllm_num_requests_waiting", Gauge),
    row(Trtllm, KvUsage, "trtllm_kv_cache_utilization", Gauge),
    row(Trtllm, PromptTokens, "trtllm_prompt_tokens_total", Counter),
    row(
        Trtllm,
        GenerationTokens,
        "trtllm_generation_tokens_total",
        Counter,
    ),
    // Its hit rate is over prompt tokens, as SGLang's.
    row(Trtllm, PrefixQueries, "trtllm_prompt_tokens_total", Counter),
    row(
        Trtllm,
        PrefixHits,
        "trtllm_prompt_cached_tokens_total",
        Counter,
    ),
    row(Trtllm, Requests, "trtllm_request_success_total", Counter),
    row(
        Trtllm,
        SpecDraftTokens,
        "trtllm_spec_decode_num_draft_tokens_total",
        Counter,
    ),
    row(
        Trtllm,
        SpecAccepted,
        "trtllm_spec_decode_num_accepted_tokens_total",
        Counter,
    ),
    row(
        Trtllm,
        SpecAcceptLength,
        "trtllm_spec_decode_acceptance_length",
        Gauge,
    ),
    row(
        Trtllm,
        TtftSeconds,
        "trtllm_time_to_first_token_seconds",
        Histogram,
    ),
    row(
        Trtllm,
        TpotSeconds,
        "trtllm_time_per_output_token_seconds",
        Histogram,
    ),
    row(
        Trtllm,
        E2eSeconds,
        "trtllm_e2e_request_latency_seconds",
        Histogram,
    ),
    // Triton with the TensorRT-LLM backend (its metrics port, 8002 by default).
    sel(
        Triton,
        Running,
        "nv_trt_llm_request_metrics",
        Gauge,
        ("request_type", "active"),
    ),
    sel(
        Triton,
        Waiting,
        "nv_trt_llm_request_metrics",
        Gauge,
        ("request_type", "waiting"),
    ),
    sel(
        Triton,
        KvUsage,
        "nv_trt_llm_kv_cache_block_metrics",
        Gauge,
        ("kv_cache_block_type", "fraction"),
    ),
    sel(
        Triton,
        Requests,
        "nv_inference_request_success",
        Counter,
        ("model", "tensorrt_llm"),
    ),
    sel(
        Triton,
        TtftSeconds,
        "nv_inference_first_response_histogram_ms",
        HistogramMs,
        ("model", "tensorrt_llm"),
    ),
    // NVIDIA Dynamo's frontend.
    row(Dynamo, Running, "dynamo_frontend_inflight_requests", Gauge),
    row(Dynamo, Waiting, "dynamo_frontend_queued_requests", Gauge),
    row(
        Dynamo,
        PromptTokens,
        "dynamo_frontend_input_sequence_tokens",
        HistogramSum,
    ),
    row(
        Dynamo,
        PrefixQueries,
        "dynamo_frontend_input_sequence_tokens",
        HistogramSum,
    ),
    row(
        Dynamo,
        PrefixHits,
        "dynamo_frontend_cached_tokens",
        HistogramSum,
    ),
    row(
        Dynamo,
        GenerationTokens,
        "dynamo_frontend_output_tokens_total",
        Counter,
    ),
    row(
        Dynamo,
        GenerationTokens,
        "dynamo_frontend_output_sequence_tokens",
        HistogramSum,
    ),
    row(Dynamo, Requests, "dynamo_frontend_requests_total", Counter),
    row(
        Dynamo,
        TtftSeconds,
        "dynamo_frontend_time_to_first_token_seconds",
        Histogram,
    ),
    row(
        Dynamo,
        ItlSeconds,
        "dynamo_frontend_inter_token_latency_seconds",
        Histogram,
    ),
    row(
        Dynamo,
        E2eSeconds,
        "dynamo_frontend_request_duration_seconds",
        Histogram,
    ),
];

/// Families engines serve that servbench knows and does not read, each with why: the vocabulary's
/// other half, so a name an engine (or srv-sim standing in for it) serves is either a row of
/// [`TABLE`] or here.
pub const NOT_READ: &[(Engine, &str, &str)] = &[
    (
        Sglang,
        "sglang:cache_hit_rate",
        "a gauge over SGLang's own window; cached over prompt tokens gives the point's rate",
    ),
    (
        Sglang,
        "sglang:num_used_tokens",
        "KV tokens held; token_usage is the same as a fraction",
    ),
    (
        LlamaCpp,
        "llamacpp:n_busy_slots_per_decode",
        "declared a counter, but an average",
    ),
    (
        LlamaCpp,
        "llamacpp:n_tokens_max",
        "declared a counter, but a high-water mark",
    ),
];

/// The rows of `engine`.
pub fn rows(engine: &Engine) -> impl Iterator<Item = &'static Source> + '_ {
    TABLE.iter().filter(move |s| s.engine == *engine)
}

/// Our GPU figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GpuFigure {
    UtilPct,
    MemUsedMib,
    PowerW,
    SmClockMhz,
    TempC,
    PcieRxBytesS,
    PcieTxBytesS,
    /// A counter (mJ since the driver loaded), not a gauge: the point's energy is its last
    /// reading minus its first.
    EnergyMj,
}

/// A DCGM exporter's field for each GPU figure (gauges, labelled `gpu="N"`; `modelName` names
/// the GPU). Its PCIe fields are bytes per second.
pub const GPU_TABLE: &[(GpuFigure, &str)] = &[
    (GpuFigure::UtilPct, "DCGM_FI_DEV_GPU_UTIL"),
    (GpuFigure::MemUsedMib, "DCGM_FI_DEV_FB_USED"),
    (GpuFigure::PowerW, "DCGM_FI_DEV_POWER_USAGE"),
    (GpuFigure::SmClockMhz, "DCGM_FI_DEV_SM_CLOCK"),
    (GpuFigure::TempC, "DCGM_FI_DEV_GPU_TEMP"),
    (GpuFigure::PcieRxBytesS, "DCGM_FI_PROF_PCIE_RX_BYTES"),
    (GpuFigure::PcieTxBytesS, "DCGM_FI_PROF_PCIE_TX_BYTES"),
    (GpuFigure::EnergyMj, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
];

/// On a MIG instance `DCGM_FI_DEV_GPU_UTIL` is not supported; the graphics engine's active
/// ratio (0 to 1) is the instance's utilization there.
pub const DCGM_GR_ENGINE_ACTIVE: &str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE";

/// The label of a DCGM sample's MIG instance.
pub const DCGM_MIG_INSTANCE: &str = "GPU_I_ID";

/// Every family name servbench reads, engines' and DCGM's.
pub fn known(name: &str) -> bool {
    static KNOWN: std::sync::LazyLock<std::collections::HashSet<&'static str>> =
        std::sync::LazyLock::new(|| {
            TABLE
                .iter()
                .map(|r| r.name)
                .chain(GPU_TABLE.iter().map(|(_, n)| *n))
                .chain([DCGM_GR_ENGINE_ACTIVE])
                .collect()
        });
    KNOWN.contains(name)
}

/// DCGM's "no value" sentinels are huge integers near 2^63 (`9223372036854775794`).
pub fn dcgm_blank(v: f64) -> bool {
    !v.is_finite() || v >= 9.2e18
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_has_rows_under_its_own_prefix() {
        for e in Engine::ALL {
            assert!(rows(&e).count() > 3, "{e:?}");
            for r in rows(&e) {
                assert!(r.name.starts_with(e.prefix()), "{} under {e:?}", r.name);
            }
        }
        for (e, name, _) in NOT_READ {
            assert!(name.starts_with(e.prefix()), "{name} under {e:?}");
            assert!(!known(name), "{name} is both read and not read");
        }
    }
}
