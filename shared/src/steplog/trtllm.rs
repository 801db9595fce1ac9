//! TensorRT-LLM's iteration log (`print_iter_log: true` in the LLM-API options; PyTorch
//! backend, `_torch/pyexecutor/py_executor.py`), after its prefix:
//!
//! `iter = 12, global_rank = 0, rank = 0, num_scheduled_requests = 4, kv_cache_util = 0.012,
//! currank_total_requests = 0/4, host_step_time = 7.41ms, prev_device_step_time = 7.20ms,
//! timestamp = 2026-12-02 10:00:00, states = {'num_ctx_requests': 1, 'num_ctx_tokens': 64,
//! 'num_generation_tokens': 3}`
//!
//! (older releases: `num_scheduled_requests: 4` after the timestamp). The scheduled requests
//! less the context ones are decoding. `prev_device_step_time` is the GPU's time of a step
//! (`N/A` for the first): each step's own length. `host_step_time` is the executor's host time
//! of the iteration, kept under its own name.

use super::{LogFormat, MAX_STEP_REQUESTS, MAX_STEP_TOKENS, StepLine, count, millis, quote};
use crate::record::Step;

pub const SOURCE: &str = "trtllm";

/// The value after `key` (`key = V` or `key: V`), up to the next `,` or `}`.
fn value<'a>(rest: &'a str, key: &str) -> Option<&'a str> {
    [" = ", ": ", "': "].iter().find_map(|sep| {
        let k = format!("{key}{sep}");
        let at = rest.find(&k)?;
        let v = &rest[at + k.len()..];
        Some(v.split([',', '}']).next().unwrap_or("").trim())
    })
}

fn need<'a>(rest: &'a str, key: &str) -> Result<&'a str, String> {
    value(rest, key).ok_or_else(|| format!("no `{key}`"))
}

pub fn parse(line: &str, _: &LogFormat) -> StepLine {
    let Some(at) = line.find("iter = ") else {
        return StepLine::Other;
    };
    let rest = &line[at..];
    if !rest.contains("host_step_time = ") {
        return StepLine::Other;
    }
    match figures(rest) {
        Ok(s) => StepLine::Step(s),
        Err(why) => StepLine::Malformed(why),
    }
}

fn figures(rest: &str) -> Result<Step, String> {
    let scheduled = count(
        need(rest, "num_scheduled_requests")?,
        "scheduled requests",
        MAX_STEP_REQUESTS,
    )?;
    let ctx_requests = count(
        need(rest, "'num_ctx_requests")?,
        "context requests",
        MAX_STEP_REQUESTS,
    )?;
    let ctx_tokens = count(
        need(rest, "'num_ctx_tokens")?,
        "context tokens",
        MAX_STEP_TOKENS,
    )?;
    let gen_tokens = count(
        need(rest, "'num_generation_tokens")?,
        "generation tokens",
        MAX_STEP_TOKENS,
    )?;
    let ms = |key: &str| -> Result<Option<f64>, String> {
        let v = need(rest, key)?;
        if v == "N/A" {
            return Ok(None);
        }
        let t = v
            .strip_suffix("ms")
            .ok_or_else(|| format!("{key} `{}` is not in ms", quote(v)))?;
        millis(t, key).map(Some)
    };
    Ok(Step {
        count: 1,
        ctx_requests,
        ctx_tokens,
        gen_requests: scheduled.saturating_sub(ctx_requests),
        gen_tokens,
        length_ms: ms("prev_device_step_time")?,
        host_step_ms: ms("host_step_time")?,
        ..Step::default()
    })
}

/// Whether a server started as `argv` takes TensorRT-LLM's LLM-API options file, where its
/// self-report is switched on (`GET /perf_metrics`, iteration stats at `GET /metrics`): a
/// trtllm-serve, or srv-sim speaking it.
pub fn self_reports(argv: &[String]) -> bool {
    let flag = crate::engines::TRTLLM_OPTIONS_FLAG;
    argv.iter()
        .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|r| r.starts_with('=')))
}

/// One object of TensorRT-LLM's iteration stats (`GET /metrics` with `enable_iter_perf_stats`:
/// `iter`, `iterLatencyMS`, `gpuForwardTimeMS` in newer builds, `inflightBatchingStats{
/// numContextRequests, numCtxTokens, numGenRequests, avgNumDecodedTokensPerIter}`): the step.
/// `gpuForwardTimeMS`, the GPU's time of the step, is its length where given; `iterLatencyMS`,
/// the executor's time of the iteration, is kept as the host step time.
pub fn iteration_stats(v: &serde_json::Value) -> Result<Step, String> {
    let ib = v
        .get("inflightBatchingStats")
        .filter(|b| b.is_object())
        .ok_or("no `inflightBatchingStats` object")?;
    let whole = |key: &str, max: u32| -> Result<u32, String> {
        match ib.get(key) {
            None | Some(serde_json::Value::Null) => Err(format!("no `{key}`")),
            Some(x) => count(&x.to_string(), key, max),
        }
    };
    let ms = |key: &str| -> Result<Option<f64>, String> {
        match v.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(x) => millis(&x.to_string(), key).map(Some),
        }
    };
    let gen_requests = whole("numGenRequests", MAX_STEP_REQUESTS)?;
    // Speculative decoding decodes more than one token per generation request.
    let per_request = match ib
        .get("avgNumDecodedTokensPerIter")
        .and_then(|x| x.as_f64())
    {
        Some(a) if a.is_finite() && (1.0..=1e3).contains(&a) => a,
        _ => 1.0,
    };
    let gen_tokens = (f64::from(gen_requests) * per_request).round();
    if gen_tokens > f64::from(MAX_STEP_TOKENS) {
        return Err(format!(
            "{gen_tokens} generation tokens is more than one step holds"
        ));
    }
    Ok(Step {
        count: 1,
        ctx_requests: whole("numContextRequests", MAX_STEP_REQUESTS)?,
        ctx_tokens: whole("numCtxTokens", MAX_STEP_TOKENS)?,
        gen_requests,
        gen_tokens: gen_tokens as u32,
        length_ms: ms("gpuForwardTimeMS")?,
        host_step_ms: ms("iterLatencyMS")?,
        ..Step::default()
    })
}

/// A point's iteration stats (the list `GET /metrics` gave at its end) as its steps, as
/// [`super::read_window`] makes a window of log lines; `None` for an empty list.
pub fn stats_window(
    list: &[serde_json::Value],
    window_s: f64,
    busy_s: f64,
) -> Option<super::Window> {
    if list.is_empty() {
        return None;
    }
    let (mut steps, mut malformed, mut first_bad) = (Vec::new(), 0u64, None);
    for v in list {
        match iteration_stats(v) {
            Ok(s) => steps.push(s),
            Err(why) => {
                malformed += 1;
                first_bad.get_or_insert(why);
            }
        }
    }
    let mut implausible = Vec::new();
    super::check_sums(&mut steps, window_s * 1e3, &mut implausible);
    let mut e = crate::record::EngineSteps::of_steps(SOURCE, &steps, window_s, busy_s);
    e.malformed_lines = malformed;
    Some(super::Window {
        steps: e,
        first_malformed: first_bad,
        implausible,
    })
}
