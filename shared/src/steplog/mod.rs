//! The engines' step logs, read: each engine's line for a step ([`vllm`], [`sglang`],
//! [`trtllm`]) made one [`Step`], and a window of log text made a point's [`EngineSteps`]
//! ([`read_window`]). Every figure read is checked (whole numbers within what one step can
//! hold, times finite and within an hour); a line that fails is malformed, counted and named
//! in a note, never fatal. What a note quotes from a line is cut short.

pub mod series;
pub mod sglang;
pub mod trtllm;
pub mod vllm;

use crate::record::{EngineSteps, Step};

/// What one log line is.
#[derive(Debug, Clone, PartialEq)]
pub enum StepLine {
    Step(Step),
    /// A step line whose figures could not be read (the reason, for the note).
    Malformed(String),
    /// Any other line.
    Other,
}

/// How a server's step log is written, beyond what each line says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogFormat {
    /// SGLang logs one `Decode batch` line every this many decode steps
    /// (`--decode-log-interval`, 40 by default).
    pub decode_log_interval: u32,
}

impl Default for LogFormat {
    fn default() -> Self {
        LogFormat {
            decode_log_interval: sglang::DEFAULT_DECODE_LOG_INTERVAL,
        }
    }
}

/// Reads one line of a server's log, whichever engine wrote it (each engine's marker is its
/// own: vLLM's `Iteration(`, SGLang's `Decode batch`/`Prefill batch`, TensorRT-LLM's `iter =
/// ... host_step_time`).
pub fn parse_step_line(line: &str, format: &LogFormat) -> (StepLine, &'static str) {
    for (parse, source) in [
        (
            vllm::parse as fn(&str, &LogFormat) -> StepLine,
            vllm::SOURCE,
        ),
        (sglang::parse, sglang::SOURCE),
        (trtllm::parse, trtllm::SOURCE),
    ] {
        match parse(line, format) {
            StepLine::Other => continue,
            read => return (read, source),
        }
    }
    (StepLine::Other, "")
}

/// Whether a server started as `argv` by `engine` writes a step log, and how: vLLM (and
/// srv-sim) with `--enable-logging-iteration-details`, SGLang always (its decode log; srv-sim
/// speaking SGLang, `--self-report-as sglang`, likewise), TensorRT-LLM with an LLM-API options
/// file.
pub fn logs_steps(engine: &crate::record::Engine, argv: &[String]) -> Option<LogFormat> {
    use crate::record::Engine;
    let has = |flag: &str| {
        argv.iter()
            .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|r| r.starts_with('=')))
    };
    let speaks_sglang = argv
        .windows(2)
        .any(|w| w[0] == "--self-report-as" && w[1].starts_with("sglang"))
        || argv
            .iter()
            .any(|a| a.starts_with("--self-report-as=sglang"));
    let logs = has(crate::engines::STEP_LOG_FLAG)
        || has("--decode-log-interval")
        || speaks_sglang
        || has(crate::engines::TRTLLM_OPTIONS_FLAG)
        || *engine == Engine::Sglang;
    logs.then(|| LogFormat {
        decode_log_interval: sglang::decode_log_interval(argv),
    })
}

/// The most tokens one step computes: no engine batches ten million tokens in a step.
pub const MAX_STEP_TOKENS: u32 = 10_000_000;
/// The most requests one step holds.
pub const MAX_STEP_REQUESTS: u32 = 1_000_000;
/// An hour: no engine step takes longer.
pub const MAX_STEP_MS: f64 = 3_600_000.0;
/// A figure quoted in a note is cut to this many characters.
const QUOTE: usize = 40;

/// `text` cut for a note.
pub(crate) fn quote(text: &str) -> String {
    crate::jsonl::excerpt(text, QUOTE)
}

/// A count `n` of `what` from a line: a whole number of at most `max`.
pub(crate) fn count(n: &str, what: &str, max: u32) -> Result<u32, String> {
    let n = n.trim();
    match n.parse::<u64>() {
        Ok(v) if v <= u64::from(max) => Ok(v as u32),
        Ok(v) => Err(format!(
            "{v} {what} is more than one step holds (at most {max})"
        )),
        Err(_) => Err(format!("`{}` is not a count of {what}", quote(n))),
    }
}

/// A time in ms from a line: finite, 0 to an hour.
pub(crate) fn millis(t: &str, what: &str) -> Result<f64, String> {
    t.trim()
        .parse::<f64>()
        .ok()
        .filter(|t| (0.0..=MAX_STEP_MS).contains(t))
        .ok_or_else(|| {
            format!(
                "{what} `{}` is not a time of 0 to 3600000 ms",
                quote(t.trim())
            )
        })
}

/// The time of day a line's prefix gives, in seconds, where its clock has a fraction of a
/// second (`12:00:01.250`, `12:00:01,250`); `None` for a clock of whole seconds (vLLM's and
/// SGLang's own format), which cannot time a step.
pub fn line_clock(prefix: &str) -> Option<f64> {
    let b = prefix.as_bytes();
    let digits = |i: usize, n: usize| {
        b.get(i..i + n)
            .filter(|d| d.iter().all(u8::is_ascii_digit))
            .map(|d| d.iter().fold(0u32, |a, c| a * 10 + u32::from(c - b'0')))
    };
    (0..b.len().saturating_sub(9)).find_map(|i| {
        let (h, m, s) = (digits(i, 2)?, digits(i + 3, 2)?, digits(i + 6, 2)?);
        if b[i + 2] != b':' || b[i + 5] != b':' || !matches!(b.get(i + 8), Some(b'.' | b',')) {
            return None;
        }
        if i > 0 && b[i - 1].is_ascii_digit() || h > 23 || m > 59 || s > 60 {
            return None;
        }
        let frac: String = prefix[i + 9..]
            .chars()
            .take_while(char::is_ascii_digit)
            .take(9)
            .collect();
        let f: f64 = format!("0.{frac}")
            .parse()
            .ok()
            .filter(|_| !frac.is_empty())?;
        Some(f64::from(h * 3600 + m * 60 + s) + f)
    })
}

/// A point's window of log text, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub steps: EngineSteps,
    /// The first malformed line's reason.
    pub first_malformed: Option<String>,
    /// What was found implausible and left out (each a sentence for a note).
    pub implausible: Vec<String>,
}

/// The figures of the log text of one window (`window_s` of wall time, `busy_s` of it with a
/// request in flight); `None` when it has no step line.
pub fn read_window(text: &str, window_s: f64, busy_s: f64, format: &LogFormat) -> Option<Window> {
    let mut steps: Vec<Step> = Vec::new();
    let mut clocks: Vec<Option<f64>> = Vec::new();
    let (mut dummy, mut malformed, mut first_bad, mut source) = (0u64, 0u64, None, "");
    for line in text.lines() {
        match parse_step_line(line, format) {
            (StepLine::Step(s), from) if s.dummy => {
                dummy += 1;
                source = from;
            }
            (StepLine::Step(s), from) => {
                steps.push(s);
                clocks.push(line_clock(line));
                source = from;
            }
            (StepLine::Malformed(why), from) => {
                malformed += 1;
                first_bad.get_or_insert(why);
                source = from;
            }
            (StepLine::Other, _) => {}
        }
    }
    if steps.is_empty() && dummy == 0 && malformed == 0 {
        return None;
    }
    time_by_clock(&mut steps, &clocks);
    let mut implausible = Vec::new();
    let wall_ms = window_s * 1e3;
    check_sums(&mut steps, wall_ms, &mut implausible);
    let busy_ms = if busy_s > 0.0 { busy_s } else { window_s } * 1e3;
    synchronous_waits_are_steps(&mut steps, busy_ms);
    let mut e = EngineSteps::of_steps(source, &steps, window_s, busy_s);
    e.dummy_steps = dummy;
    e.malformed_lines = malformed;
    e.log_bytes = text.len() as u64;
    Some(Window {
        steps: e,
        first_malformed: first_bad,
        implausible,
    })
}

/// Where the lines' clock has fractions of a second and a line carries no length of its own:
/// the time since its engine's previous line. An interval ten times the median or more is the
/// engine idling between steps, not a step.
fn time_by_clock(steps: &mut [Step], clocks: &[Option<f64>]) {
    let mut last: std::collections::BTreeMap<Option<u32>, f64> = Default::default();
    let mut intervals: Vec<(usize, f64)> = Vec::new();
    for (i, (s, c)) in steps.iter().zip(clocks).enumerate() {
        let Some(c) = *c else { continue };
        if let Some(prev) = last.insert(s.engine, c)
            && s.length_ms.is_none()
            && c >= prev
        {
            // To the nanosecond, the finest a clock here prints.
            intervals.push((i, ((c - prev) * 1e9).round() / 1e6));
        }
    }
    if intervals.is_empty() {
        return;
    }
    let mut sorted: Vec<f64> = intervals.iter().map(|x| x.1).collect();
    sorted.sort_by(f64::total_cmp);
    let median = crate::record::nearest_rank(&sorted, 0.5);
    for (i, ms) in intervals {
        if ms < 10.0 * median.max(1e-3) && ms <= MAX_STEP_MS {
            steps[i].length_ms = Some(ms);
        }
    }
}

/// A logged wait fills the step only where the engine waits for each step synchronously: its
/// waits then add up to most of its busy time (at least this share of it).
pub const SYNC_WAIT_SHARE: f64 = 0.5;

/// vLLM's logged elapsed time is the engine core's wait for a step's result. An engine that
/// launches a step and waits for it (synchronous scheduling, srv-sim without
/// `--async-scheduling`) waits the whole step, and its waits add up to its busy time; an async
/// engine waits for a result launched a step earlier, ~0.03 ms of a 5 ms step. So per engine,
/// where the waits come to [`SYNC_WAIT_SHARE`] of the busy time or more, each is its step's own
/// length (the wait stays under its own name too); where they are a sliver of it, they are
/// only waits and the step is the busy time over the steps.
fn synchronous_waits_are_steps(steps: &mut [Step], busy_ms: f64) {
    let mut engines: Vec<Option<u32>> = steps.iter().map(|s| s.engine).collect();
    engines.sort_unstable();
    engines.dedup();
    for e in engines {
        let waited: f64 = steps
            .iter()
            .filter(|s| s.engine == e && s.length_ms.is_none())
            .filter_map(|s| s.result_wait_ms)
            .sum();
        if busy_ms > 0.0 && waited >= SYNC_WAIT_SHARE * busy_ms {
            for s in steps.iter_mut().filter(|s| s.engine == e) {
                if s.length_ms.is_none() {
                    s.length_ms = s.result_wait_ms;
                }
            }
        }
    }
}

/// Per engine, the logged times must fit the window's wall time (each engine steps one step
/// at a time): where they add up to more, they are left out and said.
fn check_sums(steps: &mut [Step], wall_ms: f64, implausible: &mut Vec<String>) {
    let slack = |sum: f64| sum > wall_ms * 1.1 + 1000.0;
    type Field = (&'static str, fn(&Step) -> Option<f64>, fn(&mut Step));
    let fields: [Field; 3] = [
        (
            "its steps' own lengths",
            |s| s.length_ms.map(|l| l * f64::from(s.count)),
            |s| s.length_ms = None,
        ),
        (
            "its iteration elapsed times",
            |s| s.result_wait_ms,
            |s| s.result_wait_ms = None,
        ),
        (
            "its host step times",
            |s| s.host_step_ms,
            |s| s.host_step_ms = None,
        ),
    ];
    let mut engines: Vec<Option<u32>> = steps.iter().map(|s| s.engine).collect();
    engines.sort_unstable();
    engines.dedup();
    for (what, get, clear) in fields {
        let worst = engines
            .iter()
            .map(|e| {
                steps
                    .iter()
                    .filter(|s| s.engine == *e)
                    .filter_map(get)
                    .sum::<f64>()
            })
            .fold(0.0, f64::max);
        if slack(worst) {
            implausible.push(format!(
                "{what} add up to {:.1} s for one engine in a window of {:.1} s: left out",
                worst / 1e3,
                wall_ms / 1e3
            ));
            steps.iter_mut().for_each(clear);
        }
    }
}

#[cfg(test)]
mod tests;
