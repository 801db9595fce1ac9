//! What srv-sim says about itself when asked with vLLM's flags, as the truth of its own model:
//! - `--enable-per-request-metrics`: a `metrics` object in each answer (the stream's final
//!   usage chunk, or the whole answer), in vLLM's shape and by vLLM's definitions
//!   (`entrypoints/generate/base/serving.py`): `queue_time_ms` = scheduled − queued,
//!   `time_to_first_token_ms` = first token − scheduled (queueing not included),
//!   `generation_time_ms` = last token − first token, `mean_itl_ms` = generation time over
//!   tokens − 1, `tokens_per_second` = tokens over last token − scheduled.
//! - `--enable-logging-iteration-details`: one line per engine step on stderr (the server's
//!   log) in vLLM's format (`v1/metrics/loggers.py`), the step time the cost model gave; with
//!   `--async-scheduling`, what an async vLLM logs there instead: its engine core's wait for a
//!   result launched a step earlier ([`ASYNC_RESULT_WAIT`]), not the step.
//! - `--enable-mfu-metrics`: `vllm:estimated_flops_per_gpu_total` and
//!   `vllm:estimated_{read,write}_bytes_per_gpu_total`, each step's FLOPs and bytes per GPU from
//!   the cost model (its compute and memory times at the card's rates; the roofline counts
//!   bytes read, so written bytes stay 0).
//!
//! With `--self-report-as sglang` it speaks SGLang's instead (the `sglang` module): its decode
//! log (`--decode-log-interval`), its per-request time stats
//! (`--enable-request-time-stats-logging`), its FLOP counters per TP rank and its startup lines.
//! With `--self-report-as trtllm`, TensorRT-LLM's ([`crate::trtllm`]).

use crate::metrics::{MetricNames, Metrics};
use crate::progress::ReqTimes;
use crate::sglang::{self, DecodeLog, Ranks, StepFacts, Wording};
use crate::step::{EstCounters, StepCounts, StepShape};
use crate::trtllm;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whose self-report srv-sim speaks: one file (vLLM's is this one) and one line here each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SelfReportAs {
    /// vLLM's flags (`--enable-per-request-metrics`, ...): metrics in the answers, its step log
    #[default]
    Vllm,
    /// TensorRT-LLM's LLM-API options (`--extra_llm_api_options FILE`): `GET /perf_metrics`,
    /// iteration stats at `GET /metrics`, its iteration log
    Trtllm,
    /// SGLang's (recent): its decode log, time stats, counters and startup lines.
    Sglang,
    /// SGLang 0.5.10 and older: `Decode batch.` and `Capture cuda graph end. Time elapsed`.
    #[value(name = "sglang-0.5.10")]
    Sglang0510,
}

impl SelfReportAs {
    /// SGLang's wording, where it speaks SGLang's.
    pub fn sglang(self) -> Option<Wording> {
        match self {
            SelfReportAs::Vllm | SelfReportAs::Trtllm => None,
            SelfReportAs::Sglang => Some(Wording::Current),
            SelfReportAs::Sglang0510 => Some(Wording::Old),
        }
    }

    /// The metric names it implies (TensorRT-LLM's /metrics is its own, `crate::trtllm`).
    pub fn metric_names(self) -> MetricNames {
        match self.sglang() {
            None => MetricNames::Vllm,
            Some(_) => MetricNames::Sglang,
        }
    }
}

/// The engines' self-report flags, taken by srv-sim under their own names: vLLM's, or with
/// `--self-report-as sglang` SGLang's.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct SelfReport {
    /// Whose self-report srv-sim speaks: vllm; trtllm (its options file); sglang (its step log,
    /// time stats, counters, startup lines and /metrics names; sglang-0.5.10: its older wording)
    #[arg(long, value_enum, value_name = "ENGINE", default_value = "vllm")]
    pub self_report_as: SelfReportAs,
    /// SGLang's: a `Decode batch` log line every N decode-only steps (SGLang's default 40)
    #[arg(long, value_name = "N")]
    pub decode_log_interval: Option<u32>,
    /// SGLang's: a `Req Time Stats` log line per finished request, its rid the answer's id
    #[arg(long)]
    pub enable_request_time_stats_logging: bool,
    /// A `metrics` object (queue, TTFT, generation time, mean ITL) in each answer, as vLLM's flag
    #[arg(long)]
    pub enable_per_request_metrics: bool,
    /// A log line per engine step on stderr in vLLM's format (modelled timing only)
    #[arg(long)]
    pub enable_logging_iteration_details: bool,
    /// FLOP and byte counters from the cost model in /metrics under vLLM's names
    #[arg(long)]
    pub enable_mfu_metrics: bool,
    /// As vLLM's flag: the step log's "iteration elapsed time" becomes the engine core's wait
    /// for a step launched earlier (0.03 ms), not the step (the steps run as modelled)
    #[arg(long)]
    pub async_scheduling: bool,
}

/// What an async-scheduling vLLM logs as a step's "iteration elapsed time": its engine core
/// opens that timer after launching the next step, so it waits only for a result that is
/// already (nearly) there (`v1/engine/core.py`).
pub const ASYNC_RESULT_WAIT: Duration = Duration::from_micros(30);

impl SelfReport {
    /// The state of the engine at `ranks` (its index among the data-parallel engines).
    pub fn for_engine(self, ranks: Ranks) -> EngineReport {
        let decode_log = self.self_report_as.sglang().map(|w| {
            DecodeLog::new(
                self.decode_log_interval
                    .unwrap_or(servbench::steplog::sglang::DEFAULT_DECODE_LOG_INTERVAL),
                w,
                self.enable_mfu_metrics,
            )
        });
        EngineReport {
            flags: self,
            ranks,
            iteration: 0,
            trtllm: None,
            prev_step: None,
            completed: 0,
            decode_log,
            generated: 0,
        }
    }

    /// Whether the engine needs each request's rid (the answer's id): for SGLang's time stats.
    pub fn wants_rid(&self) -> bool {
        self.self_report_as.sglang().is_some() && self.enable_request_time_stats_logging
    }

    /// A flag of the other engine's given: which, and what to give instead.
    pub fn misspoken(&self) -> Option<String> {
        let vllm_only = [
            (
                self.enable_per_request_metrics,
                "--enable-per-request-metrics",
            ),
            (
                self.enable_logging_iteration_details,
                "--enable-logging-iteration-details",
            ),
            (self.async_scheduling, "--async-scheduling"),
        ];
        let sglang_only = [
            (self.decode_log_interval.is_some(), "--decode-log-interval"),
            (
                self.enable_request_time_stats_logging,
                "--enable-request-time-stats-logging",
            ),
        ];
        match self.self_report_as.sglang() {
            Some(_) => vllm_only.iter().find(|f| f.0).map(|(_, flag)| {
                format!(
                    "{flag} is vLLM's; SGLang (--self-report-as sglang) logs its steps with --decode-log-interval N and each request's times with --enable-request-time-stats-logging"
                )
            }),
            None => sglang_only.iter().find(|f| f.0).map(|(_, flag)| {
                format!("{flag} is SGLang's: give --self-report-as sglang")
            }),
        }
        .or_else(|| {
            (self.decode_log_interval == Some(0))
                .then(|| "--decode-log-interval must be at least 1".to_string())
        })
    }
}

/// One engine's self-report state.
#[derive(Debug, Clone)]
pub struct EngineReport {
    pub flags: SelfReport,
    ranks: Ranks,
    iteration: u64,
    /// TensorRT-LLM's self-report, the server's (`--self-report-as trtllm`).
    trtllm: Option<Arc<trtllm::Report>>,
    /// The step before's time, and the requests finished by then.
    prev_step: Option<Duration>,
    completed: u64,
    /// Speaking SGLang: its decode log.
    decode_log: Option<DecodeLog>,
    /// Tokens the engine had made available after its previous step.
    generated: u64,
}

/// What vLLM logs about one step (`Engine 000: Iteration(N): ...`, after its logger prefix):
/// the engine, the step's number, its context (prefill) and generation (decode) requests and
/// tokens, its duration and the KV cache's use after it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IterationLine {
    pub engine: u32,
    pub iteration: u64,
    pub ctx_requests: u32,
    pub ctx_tokens: u32,
    pub gen_requests: u32,
    pub gen_tokens: u32,
    pub elapsed: Duration,
    /// Used share of the KV cache, 0 to 1.
    pub kv_usage: f64,
}

impl std::fmt::Display for IterationLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Engine {:03}: Iteration({}): {} context requests, {} context tokens, {} generation requests, {} generation tokens, iteration elapsed time: {:.2} ms, GPU KV cache usage: {:.1}%",
            self.engine,
            self.iteration,
            self.ctx_requests,
            self.ctx_tokens,
            self.gen_requests,
            self.gen_tokens,
            self.elapsed.as_secs_f64() * 1e3,
            self.kv_usage * 100.0
        )
    }
}

impl EngineReport {
    /// This engine speaks TensorRT-LLM's self-report into the server's `report`.
    pub fn with_trtllm(mut self, report: Option<Arc<trtllm::Report>>) -> EngineReport {
        self.trtllm = report;
        self
    }

    /// After a step of `shape` (with `drafts` speculative tokens per decoding request) that the
    /// cost model timed at `elapsed`: logs it and counts its work, as asked.
    pub fn step(
        &mut self,
        shape: &StepShape,
        drafts: u32,
        elapsed: Duration,
        counts: StepCounts,
        m: &mut Metrics,
    ) {
        if self.flags.enable_mfu_metrics {
            m.est.get_or_insert_with(EstCounters::default).add(counts);
        }
        let generated = m.generation_tokens - self.generated.min(m.generation_tokens);
        self.generated = m.generation_tokens;
        if let Some(log) = &mut self.decode_log {
            let verify = shape.work.decode_seqs.saturating_mul(drafts);
            let facts = StepFacts {
                new_seqs: shape.seqs.saturating_sub(shape.work.decode_seqs),
                new_tokens: shape.work.prefill_tokens.saturating_sub(verify),
                decoding: shape.work.decode_seqs,
                generated,
                kv_used_tokens: m.kv_used_tokens,
                kv_usage: m.kv_usage,
                waiting: m.waiting,
                counts,
                elapsed,
            };
            if let Some(line) = log.step(&facts, Instant::now()) {
                sglang::log_line(self.ranks, &line);
            }
        }
        if self.flags.enable_logging_iteration_details {
            let gen_requests = shape.work.decode_seqs;
            let verify = gen_requests.saturating_mul(drafts);
            let line = IterationLine {
                engine: self.ranks.engine,
                iteration: self.iteration,
                ctx_requests: shape.seqs.saturating_sub(gen_requests),
                ctx_tokens: shape.work.prefill_tokens.saturating_sub(verify),
                gen_requests,
                gen_tokens: gen_requests.saturating_add(verify),
                elapsed: if self.flags.async_scheduling {
                    ASYNC_RESULT_WAIT
                } else {
                    elapsed
                },
                kv_usage: m.kv_usage,
            };
            log_line(&line.to_string());
        }
        if let Some(t) = &self.trtllm {
            let completed = m.finished_length + m.aborted;
            let step = trtllm::IterStep {
                iter: self.iteration,
                shape,
                verify_tokens: shape.work.decode_seqs.saturating_mul(drafts),
                elapsed,
                prev: self.prev_step,
                completed: completed.saturating_sub(self.completed),
            };
            t.step(&step, m);
            (self.prev_step, self.completed) = (Some(elapsed), completed);
        }
        self.iteration += 1;
    }

    /// A request finished: speaking SGLang with its time stats on, its line.
    pub fn finished(&self, rid: Option<&str>, input: u32, output: u32, times: &ReqTimes) {
        if !self.flags.wants_rid() {
            return;
        }
        if let Some(line) = rid.and_then(|rid| sglang::time_stats(rid, input, output, times)) {
            sglang::log_line(self.ranks, &line);
        }
    }
}

/// One line on stderr with vLLM's logger prefix (`(APIServer pid=N) INFO MM-DD HH:MM:SS
/// [loggers.py:200] `), written whole so a reader of the log never sees half of it.
fn log_line(msg: &str) {
    vllm_log_line("APIServer", "loggers.py:200", msg);
}

/// One line on stderr as vLLM's logger writes it from `process` (`APIServer`, `EngineCore`,
/// `Worker`) at `source` (`file.py:line`), written whole.
pub(crate) fn vllm_log_line(process: &str, source: &str, msg: &str) {
    let ts = servbench::record::now_ts();
    // 2026-12-01T23:30:00.123Z -> 12-01 23:30:00
    let stamp = format!(
        "{} {}",
        ts.get(5..10).unwrap_or(""),
        ts.get(11..19).unwrap_or("")
    );
    let line = format!(
        "({process} pid={}) INFO {stamp} [{source}] {msg}\n",
        std::process::id()
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn ms(later: Option<Instant>, earlier: Option<Instant>) -> Option<f64> {
    Some(later?.saturating_duration_since(earlier?).as_nanos() as f64 / 1e6)
}

/// The `metrics` object vLLM puts in an answer, from the request's times and its `tokens`.
pub fn metrics_json(t: &ReqTimes, tokens: u32) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: Option<f64>| {
        if let Some(v) = v {
            m.insert(k.into(), v.into());
        }
    };
    put("time_to_first_token_ms", ms(t.first, t.scheduled));
    put("generation_time_ms", ms(t.last, t.first));
    put("queue_time_ms", ms(t.scheduled, t.queued));
    put(
        "mean_itl_ms",
        ms(t.last, t.first)
            .filter(|_| tokens > 1)
            .map(|g| g / f64::from(tokens - 1)),
    );
    put(
        "tokens_per_second",
        ms(t.last, t.scheduled)
            .filter(|&d| d > 0.0)
            .map(|d| f64::from(tokens) / d * 1e3),
    );
    serde_json::Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_line_is_vllms() {
        let l = IterationLine {
            engine: 0,
            iteration: 7,
            ctx_requests: 1,
            ctx_tokens: 8,
            gen_requests: 3,
            gen_tokens: 3,
            elapsed: Duration::from_micros(12_345),
            kv_usage: 0.0123,
        };
        assert_eq!(
            l.to_string(),
            "Engine 000: Iteration(7): 1 context requests, 8 context tokens, 3 generation requests, 3 generation tokens, iteration elapsed time: 12.35 ms, GPU KV cache usage: 1.2%"
        );
    }

    #[test]
    fn per_request_metrics_follow_vllms_definitions() {
        let q = Instant::now();
        let t = ReqTimes {
            queued: Some(q),
            scheduled: Some(q + Duration::from_millis(5)),
            first: Some(q + Duration::from_millis(15)),
            last: Some(q + Duration::from_millis(45)),
        };
        let m = metrics_json(&t, 4);
        assert_eq!(m["queue_time_ms"], 5.0);
        assert_eq!(m["time_to_first_token_ms"], 10.0);
        assert_eq!(m["generation_time_ms"], 30.0);
        assert_eq!(m["mean_itl_ms"], 10.0);
        assert_eq!(m["tokens_per_second"], 100.0);
        let one = metrics_json(&t, 1);
        assert!(one.get("mean_itl_ms").is_none(), "{one}");
    }
}
