//! SGLang's scheduler log (`managers/scheduler_metrics_mixin.py`), after its prefix
//! (`[2026-05-15 08:40:32 DP1 TP0] `):
//!
//! `Decode batch. #running-req: 3, #token: 120, token usage: 0.01, cuda graph: True, gen
//! throughput (token/s): 150.00, #queue-req: 0` once every `--decode-log-interval` decode
//! steps (40 by default): the line stands for that many steps, each with the running requests
//! decoding, and its throughput is the tokens of those steps over their time, so running
//! requests over throughput is one step's length.
//!
//! `Prefill batch. #new-seq: 1, #new-token: 64, #cached-token: 0, token usage: 0.00,
//! #running-req: 2, #queue-req: 0` for each prefill step (its running requests are the ones
//! decoding, not in this step).
//!
//! With data parallelism each engine's scheduler has its own `DPk` in the prefix; TP ranks
//! other than 0 only copy rank 0's lines, and are skipped.

use super::{LogFormat, MAX_STEP_MS, MAX_STEP_REQUESTS, MAX_STEP_TOKENS, StepLine, count, quote};
use crate::record::{ServerTiming, Step};

pub const SOURCE: &str = "sglang";
/// SGLang's `--decode-log-interval` default (`server_args.py`).
pub const DEFAULT_DECODE_LOG_INTERVAL: u32 = 40;

/// The number after `key` in `rest`, up to the next `,`.
fn after<'a>(rest: &'a str, key: &str) -> Result<&'a str, String> {
    let at = rest
        .find(key)
        .ok_or_else(|| format!("no `{}`", key.trim()))?;
    let v = &rest[at + key.len()..];
    Ok(v.split(',').next().unwrap_or("").trim())
}

/// A rank token `NAME<k>` (`DP1`, `TP0`) among the prefix's words.
fn rank(prefix: &str, name: &str) -> Option<u32> {
    prefix
        .split(|c: char| c.is_whitespace() || c == '[' || c == ']')
        .find_map(|w| w.strip_prefix(name)?.parse().ok())
}

pub fn parse(line: &str, format: &LogFormat) -> StepLine {
    let (at, decode) = match (line.find("Decode batch"), line.find("Prefill batch")) {
        (Some(d), _) => (d, true),
        (None, Some(p)) => (p, false),
        (None, None) => return StepLine::Other,
    };
    let prefix = &line[..at];
    if rank(prefix, "TP").is_some_and(|r| r > 0) {
        return StepLine::Other;
    }
    let rest = &line[at..];
    let read = if decode {
        decode_step(rest, format)
    } else {
        prefill_step(rest)
    };
    match read {
        Ok(s) => StepLine::Step(Step {
            engine: rank(prefix, "DP"),
            ..s
        }),
        Err(why) => StepLine::Malformed(why),
    }
}

fn decode_step(rest: &str, format: &LogFormat) -> Result<Step, String> {
    let running = count(
        after(rest, "#running-req: ")?,
        "running requests",
        MAX_STEP_REQUESTS,
    )?;
    let g = after(rest, "gen throughput (token/s): ")?;
    let throughput = g
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| format!("gen throughput `{}` is not a rate", quote(g)))?;
    let length_ms = (throughput > 0.0 && running > 0)
        .then(|| 1e3 * f64::from(running) / throughput)
        .filter(|ms| *ms <= MAX_STEP_MS);
    Ok(Step {
        count: format.decode_log_interval.max(1),
        gen_requests: running,
        gen_tokens: running,
        length_ms,
        ..Step::default()
    })
}

fn prefill_step(rest: &str) -> Result<Step, String> {
    Ok(Step {
        count: 1,
        ctx_requests: count(
            after(rest, "#new-seq: ")?,
            "new sequences",
            MAX_STEP_REQUESTS,
        )?,
        ctx_tokens: count(after(rest, "#new-token: ")?, "new tokens", MAX_STEP_TOKENS)?,
        ..Step::default()
    })
}

/// The marker of SGLang's per-request time stats (`--enable-request-time-stats-logging`).
const TIME_STATS: &str = "Req Time Stats(rid=";
/// The most of a rid kept (SGLang's are 32 hex digits).
const MAX_RID_CHARS: usize = 128;

/// One finished request's time stats (`Req Time Stats(rid=ID, input len=N, output len=M,
/// type=unified): queue_duration=1.23ms, forward_duration=45.67ms, start_time=...`, logged by
/// TP rank 0 of each engine): its rid, which is the answer's `id`, and its queue and forward
/// times. `None` for any other line; the reason for one whose figures are not times.
pub fn time_stats(line: &str) -> Option<Result<(String, ServerTiming), String>> {
    let at = line.find(TIME_STATS)?;
    if rank(&line[..at], "TP").is_some_and(|r| r > 0) {
        return None;
    }
    let rest = &line[at + TIME_STATS.len()..];
    let rid: String = rest
        .split([',', ')'])
        .next()
        .unwrap_or("")
        .chars()
        .take(MAX_RID_CHARS)
        .collect();
    let figures = rest.split_once("): ").map_or("", |f| f.1);
    let ms = |key: &str| -> Result<f64, String> {
        let v = after(figures, key)?;
        let t = v
            .strip_suffix("ms")
            .ok_or_else(|| format!("{} `{}` is not in ms", key.trim(), quote(v)))?;
        super::millis(t, key.trim_end_matches('='))
    };
    Some((|| {
        if rid.is_empty() {
            return Err("no rid".to_string());
        }
        let t = ServerTiming::sglang(Some(ms("queue_duration=")?), Some(ms("forward_duration=")?));
        Ok((rid, t))
    })())
}

/// SGLang's decode log interval from its argv (`--decode-log-interval N` or `=N`), else the
/// default.
pub fn decode_log_interval(argv: &[String]) -> u32 {
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let v = match a.strip_prefix("--decode-log-interval") {
            Some("") => it.next().map(String::as_str),
            Some(v) => v.strip_prefix('='),
            None => continue,
        };
        if let Some(n) = v.and_then(|v| v.parse::<u32>().ok()).filter(|n| *n > 0) {
            return n;
        }
    }
    DEFAULT_DECODE_LOG_INTERVAL
}
