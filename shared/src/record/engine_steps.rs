//! The engine's own steps during a point (the `engine_steps` of a `summary`), read from the
//! server's log: vLLM's iteration details (`--enable-logging-iteration-details`; srv-sim's the
//! same), one line per engine step, as `v1/metrics/loggers.py` writes it after its logger
//! prefix:
//!
//! `Engine 000: Iteration(12): 1 context requests, 64 context tokens, 3 generation requests,
//! 3 generation tokens, iteration elapsed time: 27.41 ms, GPU KV cache usage: 1.2%`
//!
//! A context request is one still in its prefill (no output token yet, chunks of a chunked
//! prefill included); a generation request is decoding. vLLM logs a data-parallel padding step
//! with ` (dummy)` after its time: such steps are counted apart, not in the figures.

use super::{StepLogFormat, nearest_rank};
use serde::{Deserialize, Serialize};

/// One engine step as its log line says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub ctx_requests: u32,
    pub ctx_tokens: u32,
    pub gen_requests: u32,
    pub gen_tokens: u32,
    pub elapsed_ms: f64,
    /// A data-parallel padding step (` (dummy)`): no work of its own.
    pub dummy: bool,
}

/// What one log line is.
#[derive(Debug, Clone, PartialEq)]
pub enum StepLine {
    Step(Step),
    /// An iteration line whose figures could not be read (the reason, for the note).
    Malformed(String),
    /// Any other line.
    Other,
}

/// Reads one line of the server's log (its logger prefix, whatever it is, before `Engine NNN:
/// Iteration(`). A figure that is not a whole number, or a time that is not finite and 0 ms or
/// more (up to an hour), makes the line malformed, never an error.
pub fn parse_step_line(line: &str) -> StepLine {
    let Some(at) = line.find(": Iteration(") else {
        return StepLine::Other;
    };
    let rest = &line[at + ": Iteration(".len()..];
    match parse_figures(rest) {
        Ok(s) => StepLine::Step(s),
        Err(why) => StepLine::Malformed(why),
    }
}

fn parse_figures(rest: &str) -> Result<Step, String> {
    let (_index, rest) = rest
        .split_once("): ")
        .ok_or("no `): ` after the iteration index")?;
    let count = |rest: &str, what: &str| -> Result<u32, String> {
        let part = rest
            .split(", ")
            .find(|p| p.ends_with(what) && p.len() > what.len())
            .ok_or_else(|| format!("no `N{what}`"))?;
        let n = part[..part.len() - what.len()].trim();
        n.parse::<u32>()
            .map_err(|_| format!("`{n}{what}` is not a count"))
    };
    let ctx_requests = count(rest, " context requests")?;
    let ctx_tokens = count(rest, " context tokens")?;
    let gen_requests = count(rest, " generation requests")?;
    let gen_tokens = count(rest, " generation tokens")?;
    let time = rest
        .split_once("iteration elapsed time: ")
        .ok_or("no `iteration elapsed time: `")?
        .1;
    let (ms, after) = time
        .split_once(" ms")
        .ok_or("no ` ms` after the elapsed time")?;
    let elapsed_ms = ms
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|t| (0.0..=MAX_STEP_MS).contains(t))
        .ok_or_else(|| format!("elapsed time `{ms}` is not a time of 0 to 3600000 ms"))?;
    Ok(Step {
        ctx_requests,
        ctx_tokens,
        gen_requests,
        gen_tokens,
        elapsed_ms,
        dummy: after.starts_with(" (dummy)"),
    })
}

/// An hour: no engine step takes longer.
const MAX_STEP_MS: f64 = 3_600_000.0;

/// The engine's steps over one point (`summary.engine_steps`): every step line the server's
/// log gained between the point's start and its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct EngineSteps {
    /// Whose log format: `vllm` (vLLM's iteration details; srv-sim's the same).
    pub source: StepLogFormat,
    /// Steps in the point's window (dummy steps not counted).
    pub steps: u64,
    /// Steps over the window's wall time (from the start's read of the log to the end's).
    pub steps_per_s: f64,
    /// The window's wall time.
    pub window_s: f64,
    /// Step time, as the engine timed it: mean, nearest-rank p50 and p90, largest.
    pub step_ms_mean: f64,
    pub step_ms_p50: f64,
    pub step_ms_p90: f64,
    pub step_ms_max: f64,
    /// The steps' standard deviation (absent in summaries written before it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms_stddev: Option<f64>,
    /// Sum of every step's time (the engine's busy time within the window).
    pub busy_ms: f64,
    /// Means per step: requests in their prefill (`context`), their tokens, requests
    /// decoding (`generation`), their tokens.
    pub ctx_requests_mean: f64,
    pub ctx_tokens_mean: f64,
    pub gen_requests_mean: f64,
    pub gen_tokens_mean: f64,
    /// Sums over the steps: prefill tokens computed, decode tokens computed.
    pub ctx_tokens_total: u64,
    pub gen_tokens_total: u64,
    /// Share of the steps with a prefill (a context request) in them.
    pub prefill_share: f64,
    /// Steps with no prefill in them (decode only), their mean time and mean batch
    /// (generation requests).
    pub decode_steps: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_step_ms_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_batch_mean: Option<f64>,
    /// The largest batch of those decode-only steps, and their mean time at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_full_batch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_full_batch_ms_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_full_batch_ms_stddev: Option<f64>,
    /// Data-parallel padding steps (` (dummy)`), left out of the figures.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dummy_steps: u64,
    /// Iteration lines whose figures could not be read, left out (loadgen notes the first).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub malformed_lines: u64,
    /// Bytes of the log read for the window.
    pub log_bytes: u64,
    /// The window's part of the log was larger than loadgen reads (its cap): the figures are
    /// over the first part only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log_cut: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl EngineSteps {
    /// The figures of the log text of one window (`window_s` of wall time); None when it has
    /// no step line. The second value: the first malformed line's reason.
    pub fn from_log(text: &str, window_s: f64) -> Option<(EngineSteps, Option<String>)> {
        let mut steps = Vec::new();
        let (mut dummy, mut malformed, mut first_bad) = (0u64, 0u64, None);
        for line in text.lines() {
            match parse_step_line(line) {
                StepLine::Step(s) if s.dummy => dummy += 1,
                StepLine::Step(s) => steps.push(s),
                StepLine::Malformed(why) => {
                    malformed += 1;
                    first_bad.get_or_insert(why);
                }
                StepLine::Other => {}
            }
        }
        if steps.is_empty() && dummy == 0 && malformed == 0 {
            return None;
        }
        let mut e = EngineSteps::of_steps(&steps, window_s);
        e.dummy_steps = dummy;
        e.malformed_lines = malformed;
        e.log_bytes = text.len() as u64;
        Some((e, first_bad))
    }

    /// The figures of `steps` over `window_s`.
    pub fn of_steps(steps: &[Step], window_s: f64) -> EngineSteps {
        let n = steps.len() as f64;
        let mean = |f: &dyn Fn(&Step) -> f64| {
            if steps.is_empty() {
                0.0
            } else {
                steps.iter().map(f).sum::<f64>() / n
            }
        };
        let mut times: Vec<f64> = steps.iter().map(|s| s.elapsed_ms).collect();
        times.sort_by(f64::total_cmp);
        let decode: Vec<&Step> = steps.iter().filter(|s| s.ctx_requests == 0).collect();
        let decode_mean = |f: &dyn Fn(&Step) -> f64, of: &[&Step]| {
            (!of.is_empty()).then(|| of.iter().map(|s| f(s)).sum::<f64>() / of.len() as f64)
        };
        let full = decode.iter().map(|s| s.gen_requests).max();
        let at_full: Vec<&Step> = decode
            .iter()
            .copied()
            .filter(|s| Some(s.gen_requests) == full)
            .collect();
        let busy_ms = times.iter().sum::<f64>();
        let stddev = |of: &[f64]| {
            (!of.is_empty()).then(|| {
                let m = of.iter().sum::<f64>() / of.len() as f64;
                (of.iter().map(|t| (t - m) * (t - m)).sum::<f64>() / of.len() as f64).sqrt()
            })
        };
        let full_times: Vec<f64> = at_full.iter().map(|s| s.elapsed_ms).collect();
        EngineSteps {
            source: StepLogFormat::Vllm,
            steps: steps.len() as u64,
            steps_per_s: if window_s > 0.0 { n / window_s } else { 0.0 },
            window_s,
            step_ms_mean: mean(&|s| s.elapsed_ms),
            step_ms_p50: if times.is_empty() {
                0.0
            } else {
                nearest_rank(&times, 0.5)
            },
            step_ms_p90: if times.is_empty() {
                0.0
            } else {
                nearest_rank(&times, 0.9)
            },
            step_ms_max: times.last().copied().unwrap_or(0.0),
            step_ms_stddev: stddev(&times),
            busy_ms,
            ctx_requests_mean: mean(&|s| f64::from(s.ctx_requests)),
            ctx_tokens_mean: mean(&|s| f64::from(s.ctx_tokens)),
            gen_requests_mean: mean(&|s| f64::from(s.gen_requests)),
            gen_tokens_mean: mean(&|s| f64::from(s.gen_tokens)),
            ctx_tokens_total: steps.iter().map(|s| u64::from(s.ctx_tokens)).sum(),
            gen_tokens_total: steps.iter().map(|s| u64::from(s.gen_tokens)).sum(),
            prefill_share: mean(&|s| f64::from(u8::from(s.ctx_requests > 0))),
            decode_steps: decode.len() as u64,
            decode_step_ms_mean: decode_mean(&|s| s.elapsed_ms, &decode),
            decode_batch_mean: decode_mean(&|s| f64::from(s.gen_requests), &decode),
            decode_full_batch: full,
            decode_full_batch_ms_mean: decode_mean(&|s| s.elapsed_ms, &at_full),
            decode_full_batch_ms_stddev: stddev(&full_times),
            ..EngineSteps::default()
        }
    }

    /// The engine's mean decode-only step time at `batch` requests, when its decode steps
    /// reached that batch (their largest); else their mean at their mean batch. With the
    /// batch the figure is at.
    pub fn decode_step_at(&self, batch: u32) -> Option<(f64, f64)> {
        match (self.decode_full_batch, self.decode_full_batch_ms_mean) {
            (Some(b), Some(ms)) if b == batch => Some((ms, f64::from(b))),
            _ => Some((self.decode_step_ms_mean?, self.decode_batch_mean?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = "(APIServer pid=7) INFO 12-01 23:30:00 [loggers.py:200] Engine 000: Iteration(12): 1 context requests, 64 context tokens, 3 generation requests, 3 generation tokens, iteration elapsed time: 27.41 ms, CPU KV cache usage: 1.2%";

    #[test]
    fn vllms_iteration_line_reads_whatever_its_logger_prefix() {
        let want = Step {
            ctx_requests: 1,
            ctx_tokens: 64,
            gen_requests: 3,
            gen_tokens: 3,
            elapsed_ms: 27.41,
            dummy: false,
        };
        assert_eq!(parse_step_line(VLLM), StepLine::Step(want));
        let bare = VLLM.split_once("] ").unwrap().1;
        assert_eq!(parse_step_line(bare), StepLine::Step(want));
        let dummy = "Engine 001: Iteration(3): 0 context requests, 0 context tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 0.00 ms (dummy), GPU KV cache usage: 0.0%";
        assert!(matches!(parse_step_line(dummy), StepLine::Step(s) if s.dummy));
        assert_eq!(
            parse_step_line("INFO Avg prompt throughput: 1.0 tokens/s"),
            StepLine::Other
        );
    }

    #[test]
    fn a_step_line_with_figures_that_are_not_counts_or_times_is_malformed_not_fatal() {
        for (bad, why) in [
            (VLLM.replace("27.41 ms", "NaN ms"), "elapsed time `NaN`"),
            (VLLM.replace("27.41 ms", "-1.00 ms"), "elapsed time `-1.00`"),
            (
                VLLM.replace("64 context tokens", "x context tokens"),
                "`x context tokens`",
            ),
            (
                VLLM.replace(", iteration elapsed", "; iteration elapsed"),
                "no `N generation tokens`",
            ),
        ] {
            match parse_step_line(&bad) {
                StepLine::Malformed(w) => assert!(w.contains(why), "{w} for {bad}"),
                other => panic!("{other:?} for {bad}"),
            }
        }
        let text = format!("{VLLM}\n{}\n", VLLM.replace("27.41", "inf"));
        let (e, first) = EngineSteps::from_log(&text, 1.0).unwrap();
        assert_eq!((e.steps, e.malformed_lines), (1, 1));
        assert!(first.unwrap().contains("inf"));
    }

    #[test]
    fn a_windows_figures_are_exact_over_its_steps() {
        let step = |ctx: u32, decoding: u32, ms: f64| Step {
            ctx_requests: ctx,
            ctx_tokens: ctx * 64,
            gen_requests: decoding,
            gen_tokens: decoding,
            elapsed_ms: ms,
            dummy: false,
        };
        let steps = [
            step(1, 0, 40.0),
            step(0, 1, 10.0),
            step(1, 1, 30.0),
            step(0, 2, 20.0),
            step(0, 2, 22.0),
        ];
        let e = EngineSteps::of_steps(&steps, 2.0);
        assert_eq!(e.steps, 5);
        assert_eq!(e.steps_per_s, 2.5);
        assert_eq!(e.step_ms_mean, 24.4);
        assert_eq!(
            (e.step_ms_p50, e.step_ms_p90, e.step_ms_max),
            (22.0, 40.0, 40.0)
        );
        assert_eq!((e.ctx_tokens_total, e.gen_tokens_total), (128, 6));
        assert_eq!(e.prefill_share, 0.4);
        assert_eq!(e.decode_steps, 3);
        assert_eq!(e.decode_step_ms_mean, Some(52.0 / 3.0));
        assert_eq!(
            (e.decode_full_batch, e.decode_full_batch_ms_mean),
            (Some(2), Some(21.0))
        );
        assert_eq!(e.decode_full_batch_ms_stddev, Some(1.0));
        assert_eq!(e.decode_step_at(2), Some((21.0, 2.0)));
        assert_eq!(e.decode_step_at(8), Some((52.0 / 3.0, 5.0 / 3.0)));
        assert_eq!(EngineSteps::from_log("no steps here\n", 1.0), None);
    }
}
