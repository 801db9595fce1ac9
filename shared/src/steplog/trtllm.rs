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
