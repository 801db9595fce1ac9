//! What srv-sim says about itself as TensorRT-LLM's `trtllm-serve` does (`--self-report-as
//! trtllm`), switched on as there by the LLM-API options file (`--extra_llm_api_options FILE`,
//! the keys of `llmapi/llm_args.py`), each figure the truth of its own model:
//! - `return_perf_metrics: true` with `perf_metrics_max_requests: N`: each finished request's
//!   timing kept (the last N, as trtllm-serve's `deque(maxlen=N)`) and served once at `GET
//!   /perf_metrics`, which empties it (`serve/openai_server.py`): `{"request_id": N,
//!   "perf_metrics": {"timing_metrics": {"arrival_time", "first_scheduled_time",
//!   "first_token_time", "last_token_time", "server_arrival_time", "server_first_token_time"}}}`,
//!   seconds on the engine's steady clock (here: since srv-sim started). The answers' ids are
//!   trtllm-serve's (`cmpl-N`, `chatcmpl-N`: `api::Formatter::with_trtllm_id`), so a client
//!   finds its request by id. A decode server's request (`--pd-role decode`) adds
//!   `kv_cache_transfer_start`/`_end`: its arrival and its KV's (the link's queue included, as
//!   its vLLM-shaped `kv_transfer_ms`); `kv_cache_size` is left out, and so are
//!   `first_iter`/`last_iter` and `kv_cache_metrics` (srv-sim counts no iterations or KV
//!   blocks per request).
//! - `enable_iter_perf_stats: true`: one iteration-stats object per engine step, kept (the last
//!   [`MAX_ITER_STATS`], as the executor's `iter_stats_max_iterations`) and served once at `GET
//!   /metrics` as a JSON list (TensorRT-LLM's keys: `iter`, `iterLatencyMS`,
//!   `gpuForwardTimeMS`, `numActiveRequests`, `numQueuedRequests`, `kvCacheStats`,
//!   `inflightBatchingStats`, ...); without it `/metrics` answers `[]`, as trtllm-serve's.
//! - `print_iter_log: true`: one `iter = N, ...` line per step on stderr in the PyTorch
//!   executor's format (`_torch/pyexecutor/py_executor.py`), `prev_device_step_time` the step
//!   before's modelled time (`N/A` for the first), `host_step_time` this step's.

use crate::metrics::Metrics;
use crate::progress::ReqTimes;
use crate::step::StepShape;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The iteration stats kept for `GET /metrics` (TensorRT-LLM's `iter_stats_max_iterations`
/// default).
pub const MAX_ITER_STATS: usize = 1000;
/// The most `perf_metrics_max_requests` srv-sim keeps.
pub const MAX_PERF_REQUESTS: u64 = 1 << 20;
/// The most of an options file read.
const MAX_OPTIONS_BYTES: u64 = 1 << 20;
/// Tokens per KV-cache block in the iteration stats (TensorRT-LLM's default `tokens_per_block`).
const TOKENS_PER_BLOCK: u64 = 32;

/// The self-report keys of an LLM-API options file.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Options {
    pub return_perf_metrics: bool,
    pub perf_metrics_max_requests: u64,
    pub enable_iter_perf_stats: bool,
    pub print_iter_log: bool,
}

impl Options {
    /// Reads the file at `path` (at most 1 MiB); an error names the file and line.
    pub fn read(path: &str) -> Result<Options, String> {
        use std::io::Read as _;
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_OPTIONS_BYTES).read_to_string(&mut text))
            .map_err(|e| format!("--extra_llm_api_options {path}: {e}"))?;
        Options::parse(&text, path)
    }

    /// The self-report keys of the options' top level (`key: value`); other keys, nested
    /// mappings and comments are TensorRT-LLM's and not modelled. A self-report key whose value
    /// is not a YAML boolean or a whole number is refused, with `path:line`.
    pub fn parse(text: &str, path: &str) -> Result<Options, String> {
        let mut o = Options::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.split(" #").next().unwrap_or("").trim_end();
            if line.starts_with([' ', '\t', '#']) || line.is_empty() {
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim().trim_matches(['"', '\'']);
            let at = || format!("{path}:{}", i + 1);
            let flag = |v: &str| match v {
                "true" | "True" | "TRUE" => Ok(true),
                "false" | "False" | "FALSE" => Ok(false),
                _ => Err(format!("{}: {key} `{v}` is not true or false", at())),
            };
            match key.trim() {
                "return_perf_metrics" => o.return_perf_metrics = flag(value)?,
                "enable_iter_perf_stats" => o.enable_iter_perf_stats = flag(value)?,
                "print_iter_log" => o.print_iter_log = flag(value)?,
                "perf_metrics_max_requests" => {
                    o.perf_metrics_max_requests = value
                        .parse::<u64>()
                        .ok()
                        .filter(|n| *n <= MAX_PERF_REQUESTS)
                        .ok_or_else(|| {
                            format!(
                                "{}: perf_metrics_max_requests `{value}` is not a count of 0 to {MAX_PERF_REQUESTS}",
                                at()
                            )
                        })?;
                }
                _ => {}
            }
        }
        Ok(o)
    }
}

/// The server's TensorRT-LLM self-report: what it keeps for `/perf_metrics` and `/metrics`.
#[derive(Debug)]
pub struct Report {
    pub options: Options,
    /// The steady clock's zero.
    epoch: Instant,
    /// KV-cache capacity per engine, in tokens (for the blocks in the iteration stats).
    kv_cache_tokens: u64,
    /// Requests running at once per engine (`maxNumActiveRequests`).
    max_running: u64,
    perf: Mutex<VecDeque<Value>>,
    iter_stats: Mutex<VecDeque<Value>>,
}

/// A list kept to its last `cap` entries, emptied by a read.
fn push_bounded(q: &Mutex<VecDeque<Value>>, cap: usize, v: Value) {
    let mut q = q.lock().unwrap_or_else(|e| e.into_inner());
    if q.len() >= cap {
        q.pop_front();
    }
    q.push_back(v);
}

fn drain(q: &Mutex<VecDeque<Value>>) -> String {
    let taken: Vec<Value> =
        std::mem::take(&mut *q.lock().unwrap_or_else(|e| e.into_inner())).into();
    Value::Array(taken).to_string()
}

impl Report {
    pub fn new(options: Options, epoch: Instant, kv_cache_tokens: u64, max_running: u64) -> Report {
        Report {
            options,
            epoch,
            kv_cache_tokens,
            max_running,
            perf: Mutex::new(VecDeque::new()),
            iter_stats: Mutex::new(VecDeque::new()),
        }
    }

    fn seconds(&self, t: Option<Instant>) -> Value {
        t.map_or(Value::Null, |t| {
            json!(t.saturating_duration_since(self.epoch).as_secs_f64())
        })
    }

    /// Request `n` finished with `times`: its record for `/perf_metrics`, where kept. A decode
    /// server's request (`--pd-role decode`) waited `kv_ms` for its KV from the prefill side
    /// before it was queued: it arrived that much earlier, and the wait is its KV transfer.
    pub fn finished(&self, n: u64, times: &ReqTimes, kv_ms: Option<f64>) {
        let o = self.options;
        if !o.return_perf_metrics || o.perf_metrics_max_requests == 0 {
            return;
        }
        let kv = kv_ms.map(|ms| Duration::from_nanos((ms * 1e6) as u64));
        let arrival = times
            .queued
            .map(|q| q.checked_sub(kv.unwrap_or_default()).unwrap_or(q));
        let mut timing = json!({
            "server_arrival_time": self.seconds(arrival),
            "arrival_time": self.seconds(arrival),
            "first_scheduled_time": self.seconds(times.scheduled),
            "first_token_time": self.seconds(times.first),
            "server_first_token_time": self.seconds(times.first),
            "last_token_time": self.seconds(times.last),
        });
        if kv.is_some() {
            timing["kv_cache_transfer_start"] = self.seconds(arrival);
            timing["kv_cache_transfer_end"] = self.seconds(times.queued);
        }
        let record = json!({"request_id": n, "perf_metrics": {"timing_metrics": timing}});
        push_bounded(&self.perf, o.perf_metrics_max_requests as usize, record);
    }

    /// `GET /perf_metrics`: the records kept, which the read takes.
    pub fn perf_metrics(&self) -> String {
        drain(&self.perf)
    }

    /// `GET /metrics`: the iteration stats kept, which the read takes.
    pub fn iteration_stats(&self) -> String {
        drain(&self.iter_stats)
    }

    /// After engine step `iter` of `shape` that the cost model timed at `elapsed` (the step
    /// before took `prev`): its iteration stats and its log line, as asked.
    pub fn step(&self, s: &IterStep, m: &Metrics) {
        let o = self.options;
        if !o.enable_iter_perf_stats && !o.print_iter_log {
            return;
        }
        let gen_requests = s.shape.work.decode_seqs;
        let ctx_requests = s.shape.seqs.saturating_sub(gen_requests);
        let ctx_tokens = s.shape.work.prefill_tokens.saturating_sub(s.verify_tokens);
        let gen_tokens = gen_requests.saturating_add(s.verify_tokens);
        let step_ms = s.elapsed.as_secs_f64() * 1e3;
        let max_blocks = self.kv_cache_tokens.div_ceil(TOKENS_PER_BLOCK);
        let used_blocks = m.kv_used_tokens.div_ceil(TOKENS_PER_BLOCK).min(max_blocks);
        if o.enable_iter_perf_stats {
            let stats = json!({
                "timestamp": stamp("%m-%d-%Y %H:%M:%S"),
                "iter": s.iter,
                "iterLatencyMS": step_ms,
                "gpuForwardTimeMS": step_ms,
                "newActiveRequestsQueueLatencyMS": 0.0,
                "numActiveRequests": m.running,
                "numQueuedRequests": m.waiting,
                "numCompletedRequests": s.completed,
                "maxNumActiveRequests": self.max_running,
                "gpuMemUsage": 0,
                "cpuMemUsage": 0,
                "pinnedMemUsage": 0,
                "kvCacheStats": {
                    "maxNumBlocks": max_blocks,
                    "freeNumBlocks": max_blocks - used_blocks,
                    "usedNumBlocks": used_blocks,
                    "tokensPerBlock": TOKENS_PER_BLOCK,
                    "cacheHitRate": m.prefix_last_hit_rate,
                },
                "inflightBatchingStats": {
                    "numScheduledRequests": s.shape.seqs,
                    "numContextRequests": ctx_requests,
                    "numCtxTokens": ctx_tokens,
                    "numGenRequests": gen_requests,
                    "numPausedRequests": 0,
                    "microBatchId": 0,
                    "avgNumDecodedTokensPerIter": if gen_requests > 0 {
                        f64::from(gen_tokens) / f64::from(gen_requests)
                    } else {
                        0.0
                    },
                },
            });
            push_bounded(&self.iter_stats, MAX_ITER_STATS, stats);
        }
        if o.print_iter_log {
            // Requests this (only) rank fetched so far, as py_executor counts them.
            let fetched = m.finished_length + m.aborted + m.running + m.waiting;
            let prev = s.prev.map_or("N/A".to_string(), |p| {
                format!("{}ms", p.as_secs_f64() * 1e3)
            });
            let util = if max_blocks > 0 {
                used_blocks as f64 / max_blocks as f64
            } else {
                0.0
            };
            let line = format!(
                "[{}] [TRT-LLM] [I] iter = {}, global_rank = 0, rank = 0, num_scheduled_requests = {}, kv_cache_util = {util:.3}, currank_total_requests = {}/{}, host_step_time = {step_ms}ms, prev_device_step_time = {prev}, timestamp = {}, states = {{'num_ctx_requests': {ctx_requests}, 'num_ctx_tokens': {ctx_tokens}, 'num_generation_tokens': {gen_tokens}}}\n",
                stamp("%m/%d/%Y-%H:%M:%S"),
                s.iter,
                s.shape.seqs,
                fetched,
                fetched,
                stamp("%Y-%m-%d %H:%M:%S"),
            );
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }
}

/// One engine step as the iteration stats and log tell it.
#[derive(Debug, Clone, Copy)]
pub struct IterStep<'a> {
    pub iter: u64,
    pub shape: &'a StepShape,
    /// Speculative verify tokens beyond each decoding request's first.
    pub verify_tokens: u32,
    pub elapsed: Duration,
    /// The step before's time (`None` for the first).
    pub prev: Option<Duration>,
    /// Requests that finished in this step.
    pub completed: u64,
}

/// The wall clock now (UTC), in `format`'s fields (`%Y %m %d %H %M %S`).
fn stamp(format: &str) -> String {
    let ts = servbench::record::now_ts(); // 2026-12-01T23:30:00.123Z
    let part = |r: std::ops::Range<usize>| ts.get(r).unwrap_or("00").to_string();
    format
        .replace("%Y", &part(0..4))
        .replace("%m", &part(5..7))
        .replace("%d", &part(8..10))
        .replace("%H", &part(11..13))
        .replace("%M", &part(14..16))
        .replace("%S", &part(17..19))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_files_self_report_keys_are_read_and_a_bad_one_named() {
        let text = "# srv-launch\nreturn_perf_metrics: true\nperf_metrics_max_requests: 10\n\
                    kv_cache_config:\n  enable_block_reuse: false\nenable_iter_perf_stats: True\n\
                    print_iter_log: false  # off\n";
        let o = Options::parse(text, "o.yaml").unwrap();
        assert_eq!(
            o,
            Options {
                return_perf_metrics: true,
                perf_metrics_max_requests: 10,
                enable_iter_perf_stats: true,
                print_iter_log: false,
            }
        );
        let e = Options::parse("print_iter_log: yes please\n", "o.yaml").unwrap_err();
        assert_eq!(
            e,
            "o.yaml:1: print_iter_log `yes please` is not true or false"
        );
        let e = Options::parse("a: 1\nperf_metrics_max_requests: -1\n", "o.yaml").unwrap_err();
        assert!(
            e.starts_with("o.yaml:2: perf_metrics_max_requests `-1`"),
            "{e}"
        );
    }

    #[test]
    fn perf_records_keep_the_last_n_and_a_read_takes_them() {
        let o = Options {
            return_perf_metrics: true,
            perf_metrics_max_requests: 2,
            ..Options::default()
        };
        let epoch = Instant::now();
        let r = Report::new(o, epoch, 1024, 8);
        let t = ReqTimes {
            queued: Some(epoch + Duration::from_millis(1000)),
            scheduled: Some(epoch + Duration::from_millis(1002)),
            first: Some(epoch + Duration::from_millis(1012)),
            last: Some(epoch + Duration::from_millis(1112)),
        };
        for n in 0..3 {
            r.finished(n, &t, (n == 2).then_some(250.0));
        }
        let got: Value = serde_json::from_str(&r.perf_metrics()).unwrap();
        let ids: Vec<u64> = got
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["request_id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, [1, 2]);
        let tm = &got[0]["perf_metrics"]["timing_metrics"];
        assert_eq!(tm["arrival_time"], 1.0);
        assert_eq!(tm["first_token_time"], 1.012);
        assert!(tm.get("kv_cache_transfer_start").is_none());
        // A decode server's request: its KV arrived 250 ms after it did.
        let tm = &got[1]["perf_metrics"]["timing_metrics"];
        assert_eq!(
            (&tm["arrival_time"], &tm["kv_cache_transfer_start"]),
            (&json!(0.75), &json!(0.75))
        );
        assert_eq!(tm["kv_cache_transfer_end"], 1.0);
        assert_eq!(r.perf_metrics(), "[]");
    }
}
