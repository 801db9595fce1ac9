//! vLLM's iteration details (`--enable-logging-iteration-details`, `v1/metrics/loggers.py`),
//! after its logger prefix, whatever it is:
//!
//! `Engine 000: Iteration(12): 1 context requests, 64 context tokens, 3 generation requests,
//! 3 generation tokens, iteration elapsed time: 27.41 ms, GPU KV cache usage: 1.2%`
//!
//! Older releases log the same figures from `core.py` without the `Engine NNN: ` prefix and
//! the KV field. A context request is one still in its prefill (chunks of a chunked prefill
//! included); a generation request is decoding. A data-parallel padding step has ` (dummy)`
//! after its time. The elapsed time is the engine core's wait for the step's result
//! (`Step::result_wait_ms`), not the step.

use super::{LogFormat, MAX_STEP_REQUESTS, MAX_STEP_TOKENS, StepLine, count, millis, quote};
use crate::record::Step;

pub const SOURCE: &str = "vllm";
const MARK: &str = "Iteration(";

/// One line: a step where it has the iteration marker after a logger prefix (`: `, `] ` or
/// the line's start before it), else [`StepLine::Other`].
pub fn parse(line: &str, _: &LogFormat) -> StepLine {
    let Some(at) = line.find(MARK) else {
        return StepLine::Other;
    };
    let before = &line[..at];
    if !(before.is_empty() || before.ends_with(": ") || before.ends_with("] ")) {
        return StepLine::Other;
    }
    let engine = before
        .strip_suffix(": ")
        .and_then(|b| b.rsplit_once("Engine "))
        .and_then(|(_, n)| n.parse::<u32>().ok());
    if before.ends_with(": ") && engine.is_none() {
        return StepLine::Other;
    }
    match figures(&line[at + MARK.len()..]) {
        Ok(s) => StepLine::Step(Step { engine, ..s }),
        Err(why) => StepLine::Malformed(why),
    }
}

fn figures(rest: &str) -> Result<Step, String> {
    let (_index, rest) = rest
        .split_once("): ")
        .ok_or("no `): ` after the iteration index")?;
    let field = |what: &str, max: u32| -> Result<u32, String> {
        let part = rest
            .split(", ")
            .find(|p| p.ends_with(what) && p.len() > what.len())
            .ok_or_else(|| format!("no `N{what}`"))?;
        count(&part[..part.len() - what.len()], what.trim(), max)
    };
    let ctx_requests = field(" context requests", MAX_STEP_REQUESTS)?;
    let ctx_tokens = field(" context tokens", MAX_STEP_TOKENS)?;
    let gen_requests = field(" generation requests", MAX_STEP_REQUESTS)?;
    let gen_tokens = field(" generation tokens", MAX_STEP_TOKENS)?;
    let time = rest
        .split_once("iteration elapsed time: ")
        .ok_or("no `iteration elapsed time: `")?
        .1;
    let (ms, after) = time
        .split_once(" ms")
        .ok_or_else(|| format!("no ` ms` after the elapsed time `{}`", quote(time)))?;
    Ok(Step {
        count: 1,
        ctx_requests,
        ctx_tokens,
        gen_requests,
        gen_tokens,
        result_wait_ms: Some(millis(ms, "elapsed time")?),
        dummy: after.starts_with(" (dummy)"),
        ..Step::default()
    })
}
