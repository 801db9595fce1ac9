//! The engine's steps a second at a time over a point (`engine_steps.per_second`), from the
//! clock of its log lines: vLLM's and SGLang's print whole seconds (`INFO 12-05 01:05:40`,
//! `[2026-12-05 01:05:40]`), TensorRT-LLM's likewise; a finer clock is cut to its second.
//!
//! The log's clock is the server's time of day in its own zone; loadgen's is its wall clock
//! (UTC) at the point's start. The first step is logged within a moment of the point's start
//! (the first request's prefill), so the difference between the two, rounded to a quarter hour,
//! is the log's zone (every zone in use is a whole number of quarter hours off UTC), and what
//! is left places the log's seconds on the point's time. Where a step line has no clock, or a
//! step falls outside the point (clocks more than minutes apart), there is no series: a picture
//! placed wrong would mislead.

use super::{LogFormat, StepLine, parse_step_line};
use crate::record::StepsPerSecond;

const DAY_S: f64 = 86_400.0;
const QUARTER_HOUR_S: f64 = 900.0;
/// A step's second may begin this long before the point or end this long after it (the edges'
/// waits for a quiet log, a clock's whole second).
const SLACK_S: f64 = 3.0;
/// No series over more than a day of seconds.
const MAX_SECONDS: usize = 86_400;
/// The clock is looked for in a line's first bytes only (its prefix, not its message).
const PREFIX_BYTES: usize = 80;

/// `d` seconds as the nearest difference of two times of day (-12 h to 12 h).
fn wrap(d: f64) -> f64 {
    (d + DAY_S / 2.0).rem_euclid(DAY_S) - DAY_S / 2.0
}

/// The time of day (seconds since midnight) of the first `HH:MM:SS` in a line's prefix, with
/// the fraction its clock prints (`.250`, `,250`), where there is one.
pub fn time_of_day(line: &str) -> Option<f64> {
    let b = &line.as_bytes()[..line.len().min(PREFIX_BYTES)];
    let two = |i: usize| -> Option<u32> {
        let d = b.get(i..i + 2)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| u32::from(d[0] - b'0') * 10 + u32::from(d[1] - b'0'))
    };
    (0..b.len().saturating_sub(7)).find_map(|i| {
        if i > 0 && b[i - 1].is_ascii_digit() || b[i + 2] != b':' || b[i + 5] != b':' {
            return None;
        }
        let (h, m, s) = (two(i)?, two(i + 3)?, two(i + 6)?);
        if h > 23 || m > 59 || s > 60 || b.get(i + 8).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        let mut t = f64::from(h * 3600 + m * 60 + s);
        if matches!(b.get(i + 8), Some(b'.' | b',')) {
            let digits: Vec<u8> = b[i + 9..]
                .iter()
                .copied()
                .take_while(u8::is_ascii_digit)
                .take(9)
                .collect();
            let frac = digits
                .iter()
                .rev()
                .fold(0.0, |a, d| (a + f64::from(d - b'0')) / 10.0);
            t += frac;
        }
        Some(t)
    })
}

/// The steps of a point's log text in each second of its clock, placed on the point's time:
/// `start_of_day_s` is the point's start on loadgen's wall clock (UTC seconds since midnight),
/// `window_s` its length. `None` where a step line has no clock or the clocks do not agree.
pub fn per_second(
    text: &str,
    format: &LogFormat,
    start_of_day_s: f64,
    window_s: f64,
) -> Option<StepsPerSecond> {
    if !(start_of_day_s.is_finite() && window_s.is_finite()) {
        return None;
    }
    let mut seconds: Vec<(f64, u32)> = Vec::new();
    for line in text.lines() {
        match parse_step_line(line, format).0 {
            StepLine::Step(s) if !s.dummy => {
                seconds.push((time_of_day(line)?.floor(), s.count));
            }
            _ => {}
        }
    }
    let first = seconds.first()?.0;
    let zone = (wrap(first - start_of_day_s) / QUARTER_HOUR_S).round() * QUARTER_HOUR_S;
    // Each second's start, from the point's start.
    let placed: Vec<(f64, u32)> = seconds
        .iter()
        .map(|&(sec, n)| (wrap(sec - zone - start_of_day_s), n))
        .collect();
    if placed
        .iter()
        .any(|&(t, _)| t < -1.0 - SLACK_S || t > window_s + SLACK_S)
    {
        return None;
    }
    let first_s = placed.iter().map(|p| p.0).fold(f64::MAX, f64::min);
    let last_s = placed.iter().map(|p| p.0).fold(f64::MIN, f64::max);
    let len = (last_s - first_s).round() as usize + 1;
    if len > MAX_SECONDS {
        return None;
    }
    let mut steps = vec![0u32; len];
    for (t, n) in placed {
        let i = (t - first_s).round() as usize;
        steps[i] = steps[i].saturating_add(n);
    }
    Some(StepsPerSecond { first_s, steps })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vllm(clock: &str, i: u32) -> String {
        format!(
            "(APIServer pid=1) INFO 12-05 {clock} [loggers.py:200] Engine 000: Iteration({i}): 0 context requests, 0 context tokens, 4 generation requests, 4 generation tokens, iteration elapsed time: 5.00 ms, GPU KV cache usage: 1.0%\n"
        )
    }

    #[test]
    fn a_lines_clock_is_its_prefixs_first_time_of_day() {
        assert_eq!(time_of_day(&vllm("01:05:40", 0)), Some(3940.0));
        assert_eq!(
            time_of_day("[2026-12-05 23:59:59 DP1 TP0] Decode batch"),
            Some(86399.0)
        );
        assert_eq!(
            time_of_day("[12/05/2026-01:00:02] [TRT-LLM] [I] iter = 3"),
            Some(3602.0)
        );
        assert_eq!(time_of_day("12:00:01,250 INFO step"), Some(43201.25));
        assert_eq!(time_of_day("no clock: 99:00:00 or 123:45:67"), None);
    }

    #[test]
    fn steps_are_counted_per_second_of_the_logs_clock_placed_on_the_point() {
        // The point starts at 01:05:39.600 UTC; the server logs in UTC+1 (02:05:...).
        let mut text = String::new();
        let mut i = 0;
        for (clock, n) in [("02:05:39", 2), ("02:05:40", 5), ("02:05:42", 3)] {
            for _ in 0..n {
                text.push_str(&vllm(clock, i));
                i += 1;
            }
        }
        text.push_str("INFO 12-05 02:05:42 some other line\n");
        let s = per_second(&text, &LogFormat::default(), 3939.6, 3.0).unwrap();
        assert!((s.first_s - -0.6).abs() < 1e-9, "{s:?}");
        assert_eq!(s.steps, [2, 5, 0, 3]);
    }

    #[test]
    fn a_point_across_midnight_keeps_its_seconds_in_order() {
        let text = format!("{}{}", vllm("23:59:59", 0), vllm("00:00:00", 1));
        let s = per_second(&text, &LogFormat::default(), 86399.5, 2.0).unwrap();
        assert!((s.first_s - -0.5).abs() < 1e-9, "{s:?}");
        assert_eq!(s.steps, [1, 1]);
    }

    #[test]
    fn clocks_that_do_not_agree_or_lines_without_one_give_no_series() {
        // A step ten minutes after a one-second point: not placed.
        let text = format!("{}{}", vllm("01:05:40", 0), vllm("01:15:40", 1));
        assert_eq!(per_second(&text, &LogFormat::default(), 3940.0, 1.0), None);
        let bare = "Engine 000: Iteration(0): 1 context requests, 8 context tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 5.00 ms\n";
        assert_eq!(per_second(bare, &LogFormat::default(), 3940.0, 1.0), None);
        assert_eq!(per_second("", &LogFormat::default(), 3940.0, 1.0), None);
    }
}
