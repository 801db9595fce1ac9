//! The engine's own steps during a point (the `engine_steps` of a `summary`), from the server's
//! step log as each engine writes it (the lines are read by the step log reader, `steplog`): vLLM's
//! iteration details (`--enable-logging-iteration-details`; srv-sim's the same), SGLang's
//! `Decode batch` / `Prefill batch` lines, TensorRT-LLM's iteration log (`print_iter_log`).
//!
//! **The step's length** is what the steps themselves say: a busy engine steps back to back,
//! so its steps over the point's busy window (the wall time with a request in flight) give
//! steps per second and the mean step (`step_ms_mean`). Where the lines carry each step's own
//! length (SGLang's throughput window, TensorRT-LLM's device time, a log clock finer than a
//! second) the spread (`step_ms_p50`/`_p90`/`_max`) and the decode-only steps' length come from
//! those. vLLM's "iteration elapsed time" is not the step: the engine core opens that timer
//! after it launched the step, around its wait for the result (`v1/engine/core.py`), so with
//! async scheduling or a batch queue it is ~0.03 ms while steps take 5-30 ms. It is kept under
//! its own name (`result_wait_ms`), and TensorRT-LLM's host time of an iteration likewise
//! (`host_step_ms`). Only where an engine's waits add up to most of its busy time (a
//! synchronous engine waits out each step: srv-sim, vLLM's CPU build) are they taken as its
//! steps' own lengths as well (the step log reader decides, on those sums).
//!
//! With data parallelism each engine writes its own lines into one log (vLLM's `Engine 00k:`,
//! SGLang's `DPk`): each engine is read apart (`per_engine`), and the figures over all of them
//! are sums (`steps`, `steps_per_s`, the token totals) or means per step, never a pool of
//! different engines' steps passed off as one engine's.

use super::{StepLogFormat, nearest_rank};
use serde::{Deserialize, Serialize};

/// One engine step, or a run of like steps (SGLang logs one decode line every
/// `--decode-log-interval` steps), as its log line says.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Step {
    /// The data-parallel engine that logged it (`Engine 001:`, `DP1`); `None` where the line
    /// names none (one engine; vLLM before the prefix).
    pub engine: Option<u32>,
    /// Steps the line stands for (1, or SGLang's decode log interval).
    pub count: u32,
    pub ctx_requests: u32,
    pub ctx_tokens: u32,
    pub gen_requests: u32,
    pub gen_tokens: u32,
    /// The step's own length where the line carries it (SGLang: its running requests over its
    /// generation throughput; TensorRT-LLM: the device time; a log clock finer than a second:
    /// the time since the engine's previous line).
    pub length_ms: Option<f64>,
    /// vLLM's "iteration elapsed time": the engine core's wait for the step's result.
    pub result_wait_ms: Option<f64>,
    /// TensorRT-LLM's `host_step_time`: the executor's host time of the iteration.
    pub host_step_ms: Option<f64>,
    /// A data-parallel padding step (` (dummy)`): no work of its own.
    pub dummy: bool,
}

/// A time the engine logged per step, under its own meaning: mean, nearest-rank p50 and p90,
/// largest, and sum over the steps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct LoggedMs {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub max: f64,
    pub sum: f64,
}

impl LoggedMs {
    fn of(mut times: Vec<f64>) -> Option<LoggedMs> {
        if times.is_empty() {
            return None;
        }
        times.sort_by(f64::total_cmp);
        let sum: f64 = times.iter().sum();
        Some(LoggedMs {
            mean: sum / times.len() as f64,
            p50: nearest_rank(&times, 0.5),
            p90: nearest_rank(&times, 0.9),
            max: *times.last().unwrap_or(&0.0),
            sum,
        })
    }
}

/// One data-parallel engine's part of a point (with more than one engine).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct OneEngineSteps {
    /// Its index (`Engine 001` is 1).
    pub engine: u32,
    pub steps: u64,
    /// Its steps over the point's busy window.
    pub steps_per_s: f64,
    /// Its step's length: the busy window over its steps.
    pub step_ms_mean: f64,
    pub ctx_tokens_total: u64,
    pub gen_tokens_total: u64,
    /// Mean requests decoding per step.
    pub gen_requests_mean: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_wait_ms_mean: Option<f64>,
}

/// The engine's steps over one point (`summary.engine_steps`): every step line the server's
/// log gained between the point's start and its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct EngineSteps {
    /// Whose log format: `vllm` (srv-sim's the same), `sglang`, `trtllm`.
    pub source: StepLogFormat,
    /// Engines whose lines the window holds (data parallelism: more than one).
    #[serde(default = "one")]
    pub engines: u32,
    /// Steps in the window (dummy steps not counted); with several engines, their sum.
    pub steps: u64,
    /// Steps over the busy window; with several engines, their sum.
    pub steps_per_s: f64,
    /// The window's wall time (from the start's read of the log to the end's).
    pub window_s: f64,
    /// The point's busy window: wall time with at least one request in flight (the window's
    /// wall time where loadgen did not measure it).
    pub busy_s: f64,
    /// The step's length: the busy window over the steps (each engine's, then their mean).
    pub step_ms_mean: f64,
    /// The spread of the steps' own lengths, where the lines carry them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms_p50: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms_p90: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms_max: Option<f64>,
    /// The steps' own lengths' standard deviation, where the lines carry them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms_stddev: Option<f64>,
    /// vLLM's "iteration elapsed time" (the engine core's wait for each step's result: not
    /// the step; ~0.03 ms with async scheduling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_wait_ms: Option<LoggedMs>,
    /// TensorRT-LLM's `host_step_time` per iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_step_ms: Option<LoggedMs>,
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
    /// Steps with no prefill in them (decode only), and their mean batch (generation
    /// requests).
    pub decode_steps: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_batch_mean: Option<f64>,
    /// The decode-only steps' own mean length, where the lines carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_step_ms_mean: Option<f64>,
    /// The largest batch of those decode-only steps, and their own mean length at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_full_batch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_full_batch_ms_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_full_batch_ms_stddev: Option<f64>,
    /// The steps with a prefill in them: their own mean length, where the lines carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_step_ms_mean: Option<f64>,
    /// Each engine apart, where the log holds more than one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_engine: Vec<OneEngineSteps>,
    /// Data-parallel padding steps (` (dummy)`), left out of the figures.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dummy_steps: u64,
    /// Step lines whose figures could not be read, left out (loadgen notes the first).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub malformed_lines: u64,
    /// Bytes of the log read for the window.
    pub log_bytes: u64,
    /// The window's part of the log was larger than loadgen reads (its cap): the figures are
    /// over the first part only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log_cut: bool,
    /// The steps a second at a time by the log's clock, where its lines carry one that loadgen
    /// could place on the point's wall time (`steplog::series`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_second: Option<StepsPerSecond>,
}

/// The engine's steps in each second of its log's clock during a point (every engine's
/// together): what the timeline draws under the requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct StepsPerSecond {
    /// Where the first second begins, in seconds from the point's start (negative: it began
    /// before the point). The log's clock was placed by loadgen's wall clock at the point's
    /// start, its time zone taken as a whole number of quarter hours.
    pub first_s: f64,
    /// Steps in each second, one second after another; the first and the last seconds are
    /// partly outside the point.
    pub steps: Vec<u32>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn one() -> u32 {
    1
}

/// The steps' own lengths (each weighted by the steps its line stands for), mean, when any.
/// A token count over the steps, each line counted for the steps it stands for (SGLang's
/// decode line stands for its log interval's).
fn tokens_total(steps: &[Step], tokens: impl Fn(&Step) -> u32) -> u64 {
    steps
        .iter()
        .map(|s| u64::from(tokens(s)) * u64::from(s.count))
        .sum()
}

fn mean_length(steps: &[&Step]) -> Option<f64> {
    let (sum, n) = steps
        .iter()
        .filter_map(|s| Some((s.length_ms? * f64::from(s.count), f64::from(s.count))))
        .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    (n > 0.0).then(|| sum / n)
}

/// The steps' own lengths' standard deviation (weighted likewise), when any.
fn stddev_length(steps: &[&Step]) -> Option<f64> {
    let m = mean_length(steps)?;
    let (sum, n) = steps
        .iter()
        .filter_map(|s| {
            let d = s.length_ms? - m;
            Some((d * d * f64::from(s.count), f64::from(s.count)))
        })
        .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    Some((sum / n).sqrt())
}

impl EngineSteps {
    /// The figures of `steps` (no dummy among them) over a window of `window_s` wall time of
    /// which `busy_s` had a request in flight (0 or less: the whole window).
    pub fn of_steps(source: &str, steps: &[Step], window_s: f64, busy_s: f64) -> EngineSteps {
        let busy_s = if busy_s > 0.0 { busy_s } else { window_s };
        let count = |s: &Step| f64::from(s.count);
        let n: f64 = steps.iter().map(count).sum();
        let mean = |f: &dyn Fn(&Step) -> f64| {
            if n > 0.0 {
                steps.iter().map(|s| f(s) * count(s)).sum::<f64>() / n
            } else {
                0.0
            }
        };
        let mut engines: Vec<u32> = steps.iter().map(|s| s.engine.unwrap_or(0)).collect();
        engines.sort_unstable();
        engines.dedup();
        let per_engine: Vec<OneEngineSteps> = engines
            .iter()
            .map(|&e| {
                let mine: Vec<Step> = steps
                    .iter()
                    .filter(|s| s.engine.unwrap_or(0) == e)
                    .copied()
                    .collect();
                one_engine(e, &mine, busy_s)
            })
            .collect();
        let rate = |k: f64| if busy_s > 0.0 { k / busy_s } else { 0.0 };
        let step_ms_mean = if per_engine.is_empty() {
            0.0
        } else {
            per_engine.iter().map(|e| e.step_ms_mean).sum::<f64>() / per_engine.len() as f64
        };
        let mut lengths: Vec<f64> = steps.iter().filter_map(|s| s.length_ms).collect();
        lengths.sort_by(f64::total_cmp);
        let at = |q: f64| (!lengths.is_empty()).then(|| nearest_rank(&lengths, q));
        let decode: Vec<&Step> = steps.iter().filter(|s| s.ctx_requests == 0).collect();
        let decode_n: f64 = decode.iter().map(|s| count(s)).sum();
        let full = decode.iter().map(|s| s.gen_requests).max();
        let at_full: Vec<&Step> = decode
            .iter()
            .copied()
            .filter(|s| Some(s.gen_requests) == full)
            .collect();
        let logged =
            |f: &dyn Fn(&Step) -> Option<f64>| LoggedMs::of(steps.iter().filter_map(f).collect());
        EngineSteps {
            source: StepLogFormat::parse(source),
            engines: per_engine.len().max(1) as u32,
            steps: n as u64,
            steps_per_s: rate(n),
            window_s,
            busy_s,
            step_ms_mean,
            step_ms_p50: at(0.5),
            step_ms_p90: at(0.9),
            step_ms_max: lengths.last().copied(),
            step_ms_stddev: stddev_length(&steps.iter().collect::<Vec<_>>()),
            result_wait_ms: logged(&|s| s.result_wait_ms),
            host_step_ms: logged(&|s| s.host_step_ms),
            ctx_requests_mean: mean(&|s| f64::from(s.ctx_requests)),
            ctx_tokens_mean: mean(&|s| f64::from(s.ctx_tokens)),
            gen_requests_mean: mean(&|s| f64::from(s.gen_requests)),
            gen_tokens_mean: mean(&|s| f64::from(s.gen_tokens)),
            ctx_tokens_total: tokens_total(steps, |s| s.ctx_tokens),
            gen_tokens_total: tokens_total(steps, |s| s.gen_tokens),
            prefill_share: mean(&|s| f64::from(u8::from(s.ctx_requests > 0))),
            decode_steps: decode_n as u64,
            decode_batch_mean: (decode_n > 0.0).then(|| {
                decode
                    .iter()
                    .map(|s| f64::from(s.gen_requests) * count(s))
                    .sum::<f64>()
                    / decode_n
            }),
            decode_step_ms_mean: mean_length(&decode),
            decode_full_batch: full,
            decode_full_batch_ms_mean: mean_length(&at_full),
            decode_full_batch_ms_stddev: stddev_length(&at_full),
            prefill_step_ms_mean: mean_length(
                &steps
                    .iter()
                    .filter(|s| s.ctx_requests > 0)
                    .collect::<Vec<_>>(),
            ),
            per_engine: if per_engine.len() > 1 {
                per_engine
            } else {
                Vec::new()
            },
            ..EngineSteps::default()
        }
    }

    /// The engine's decode step at `batch` requests (per engine), with the batch it is at:
    /// the decode-only steps' own length at that batch where it was their largest, else their
    /// own mean length at their mean batch, else the mean step (all steps, from the busy
    /// window) at the decode-only steps' mean batch.
    pub fn decode_step_at(&self, batch: u32) -> Option<(f64, f64)> {
        match (self.decode_full_batch, self.decode_full_batch_ms_mean) {
            (Some(b), Some(ms)) if b == batch => return Some((ms, f64::from(b))),
            _ => {}
        }
        if let (Some(ms), Some(b)) = (self.decode_step_ms_mean, self.decode_batch_mean) {
            return Some((ms, b));
        }
        (self.steps > 0 && self.step_ms_mean > 0.0).then_some((
            self.step_ms_mean,
            self.decode_batch_mean.unwrap_or(self.gen_requests_mean),
        ))
    }

    /// Whether the step figure is the busy window's mean over all steps (no step's own length
    /// in the lines): what a reader says beside it.
    pub fn step_from_window(&self) -> bool {
        self.step_ms_p50.is_none()
    }
}

fn one_engine(engine: u32, steps: &[Step], busy_s: f64) -> OneEngineSteps {
    let n: u64 = steps.iter().map(|s| u64::from(s.count)).sum();
    let waits: Vec<f64> = steps.iter().filter_map(|s| s.result_wait_ms).collect();
    let gen_requests: f64 = steps
        .iter()
        .map(|s| f64::from(s.gen_requests) * f64::from(s.count))
        .sum();
    OneEngineSteps {
        engine,
        steps: n,
        steps_per_s: if busy_s > 0.0 { n as f64 / busy_s } else { 0.0 },
        step_ms_mean: if n > 0 { busy_s * 1e3 / n as f64 } else { 0.0 },
        ctx_tokens_total: tokens_total(steps, |s| s.ctx_tokens),
        gen_tokens_total: tokens_total(steps, |s| s.gen_tokens),
        gen_requests_mean: if n > 0 { gen_requests / n as f64 } else { 0.0 },
        result_wait_ms_mean: (!waits.is_empty())
            .then(|| waits.iter().sum::<f64>() / waits.len() as f64),
    }
}

/// A schema v2 summary's `engine_steps` in v3's shape: v2's `step_ms_*` and `busy_ms` were
/// vLLM's iteration elapsed times (the result wait), and its `steps_per_s` was over the whole
/// window, the only window it knew.
pub(super) fn upgrade_v2(e: &mut serde_json::Map<String, serde_json::Value>) {
    use serde_json::Value;
    let num = |e: &serde_json::Map<String, Value>, k: &str| e.get(k).and_then(Value::as_f64);
    if let (Some(mean), Some(p50), Some(p90), Some(max), Some(sum)) = (
        num(e, "step_ms_mean"),
        num(e, "step_ms_p50"),
        num(e, "step_ms_p90"),
        num(e, "step_ms_max"),
        num(e, "busy_ms"),
    ) && e.get("source").and_then(Value::as_str) == Some("vllm")
    {
        let wait = LoggedMs {
            mean,
            p50,
            p90,
            max,
            sum,
        };
        e.insert(
            "result_wait_ms".into(),
            serde_json::to_value(wait).expect("plain numbers serialize"),
        );
    }
    for k in [
        "step_ms_p50",
        "step_ms_p90",
        "step_ms_max",
        "step_ms_stddev",
        "busy_ms",
        "decode_step_ms_mean",
        "decode_full_batch_ms_mean",
        "decode_full_batch_ms_stddev",
    ] {
        e.remove(k);
    }
    let steps = num(e, "steps").unwrap_or(0.0);
    let window = num(e, "window_s").unwrap_or(0.0);
    e.insert("busy_s".into(), Value::from(window));
    let step = if steps > 0.0 {
        window * 1e3 / steps
    } else {
        0.0
    };
    e.insert("step_ms_mean".into(), Value::from(step));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(ctx: u32, decoding: u32) -> Step {
        Step {
            count: 1,
            ctx_requests: ctx,
            ctx_tokens: ctx * 64,
            gen_requests: decoding,
            gen_tokens: decoding,
            ..Step::default()
        }
    }

    #[test]
    fn the_step_is_the_busy_window_over_the_steps_not_the_logged_wait() {
        // 200 steps in one busy second, each logged as an async engine's 0.03 ms wait.
        let steps: Vec<Step> = (0..200)
            .map(|_| Step {
                result_wait_ms: Some(0.03),
                ..step(0, 4)
            })
            .collect();
        let e = EngineSteps::of_steps("vllm", &steps, 1.5, 1.0);
        assert_eq!((e.steps, e.steps_per_s, e.step_ms_mean), (200, 200.0, 5.0));
        let wait = e.result_wait_ms.unwrap();
        assert!((wait.mean - 0.03).abs() < 1e-12, "{wait:?}");
        assert_eq!((wait.p50, wait.max), (0.03, 0.03));
        assert!(e.step_from_window());
        assert_eq!(e.decode_step_at(4), Some((5.0, 4.0)));
    }

    #[test]
    fn a_windows_figures_are_exact_over_its_steps() {
        let steps = [step(1, 0), step(0, 1), step(1, 1), step(0, 2), step(0, 2)];
        let e = EngineSteps::of_steps("vllm", &steps, 2.5, 2.0);
        assert_eq!(e.steps, 5);
        assert_eq!(e.steps_per_s, 2.5);
        assert_eq!(e.step_ms_mean, 400.0);
        assert_eq!((e.ctx_tokens_total, e.gen_tokens_total), (128, 6));
        assert_eq!(e.prefill_share, 0.4);
        assert_eq!(e.decode_steps, 3);
        assert_eq!(e.decode_batch_mean, Some(5.0 / 3.0));
        assert_eq!(e.decode_full_batch, Some(2));
        assert_eq!(e.decode_full_batch_ms_mean, None);
        assert!(e.per_engine.is_empty());
    }

    #[test]
    fn steps_with_their_own_lengths_give_the_spread_and_the_decode_step() {
        let with = |s: Step, ms: f64, count: u32| Step {
            length_ms: Some(ms),
            count,
            ..s
        };
        let steps = [
            with(step(1, 0), 40.0, 1),
            with(step(0, 2), 20.0, 40),
            with(step(0, 1), 10.0, 40),
        ];
        let e = EngineSteps::of_steps("sglang", &steps, 2.0, 2.0);
        assert_eq!(e.steps, 81);
        assert_eq!((e.step_ms_p50, e.step_ms_max), (Some(20.0), Some(40.0)));
        assert_eq!(e.decode_step_ms_mean, Some(15.0));
        assert_eq!(e.decode_full_batch_ms_mean, Some(20.0));
        assert_eq!(e.decode_full_batch_ms_stddev, Some(0.0));
        assert_eq!(e.prefill_step_ms_mean, Some(40.0));
        // 40 steps of 20 ms, 40 of 10 ms, one of 40 ms.
        let m = (40.0 + 800.0 + 400.0) / 81.0;
        let var =
            ((40.0f64 - m).powi(2) + 40.0 * (20.0f64 - m).powi(2) + 40.0 * (10.0f64 - m).powi(2))
                / 81.0;
        assert!((e.step_ms_stddev.unwrap() - var.sqrt()).abs() < 1e-9);
        assert_eq!(e.decode_step_at(2), Some((20.0, 2.0)));
        assert_eq!(e.gen_tokens_total, 120);
    }

    #[test]
    fn each_data_parallel_engine_is_read_apart_and_the_sums_are_sums() {
        let on = |engine: u32, n: usize| {
            (0..n).map(move |_| Step {
                engine: Some(engine),
                ..step(0, 2)
            })
        };
        let steps: Vec<Step> = on(0, 100).chain(on(1, 50)).collect();
        let e = EngineSteps::of_steps("vllm", &steps, 1.0, 1.0);
        assert_eq!((e.engines, e.steps, e.steps_per_s), (2, 150, 150.0));
        let rates: Vec<(u32, f64, f64)> = e
            .per_engine
            .iter()
            .map(|p| (p.engine, p.steps_per_s, p.step_ms_mean))
            .collect();
        assert_eq!(rates, [(0, 100.0, 10.0), (1, 50.0, 20.0)]);
        assert_eq!(e.step_ms_mean, 15.0);
    }
}
