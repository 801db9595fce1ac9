//! The engine's front end as a client sees it: the time between a request's send and the
//! engine's queue, plus its first token's way back (HTTP, tokenizing, detokenizing, streaming).
//! vLLM's API server is one process that does all of that for every stream it serves, so the
//! time grows with the streams in flight and with the prompt it tokenizes: it is modelled as a
//! fixed time, a time per stream served (the new one included) and a time per 1000 prompt
//! tokens. `--calibrate-from` fits the three to the step grid's requests (each one's client TTFT
//! less the engine's own, from `server_timing`, averaged per grid point: a point's concurrency is
//! its streams); `--predict` delays each modelled request's arrival by it, and the served engine
//! holds each request that long before its queue, so a served srv-sim answers as the engine
//! it was calibrated on.

use crate::engine::Engine;
use crate::nelder::nelder_mead;
use serde::{Deserialize, Serialize};
use servbench::cli;
use servbench::record::Record;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The front end's cost; all zero (the default) adds nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrontEnd {
    /// Every request's time, in ms.
    pub fixed_ms: f64,
    /// More per stream in flight when the request arrives (itself included), in ms.
    pub per_stream_ms: f64,
    /// More per 1000 prompt tokens, in ms.
    pub per_prompt_ktok_ms: f64,
}

/// One grid point's front end, measured against the fitted one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrontEndPoint {
    /// The grid point's `point.index`, its concurrency and its prompt tokens.
    pub point_index: u32,
    pub streams: u32,
    pub input_len: u32,
    /// Requests the mean is over.
    pub requests: usize,
    pub measured_ms: f64,
    pub modelled_ms: f64,
}

/// The largest time of any of the three a card may hold (ms): ten minutes.
const MOST_MS: f64 = 6e5;

impl FrontEnd {
    /// The time a request pays with `streams` in flight (itself included) and its prompt.
    pub fn delay(&self, streams: u32, prompt_tokens: u32) -> Duration {
        let ms = self.ms(streams, prompt_tokens);
        Duration::from_secs_f64((ms / 1e3).clamp(0.0, MOST_MS / 1e3))
    }

    /// [`FrontEnd::delay`] in ms.
    pub fn ms(&self, streams: u32, prompt_tokens: u32) -> f64 {
        self.fixed_ms
            + self.per_stream_ms * f64::from(streams)
            + self.per_prompt_ktok_ms * f64::from(prompt_tokens) / 1e3
    }

    pub fn is_zero(&self) -> bool {
        *self == FrontEnd::default()
    }

    /// Each figure a number of [0, ten minutes], or what is wrong with it.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [
            ("fixed_ms", self.fixed_ms),
            ("per_stream_ms", self.per_stream_ms),
            ("per_prompt_ktok_ms", self.per_prompt_ktok_ms),
        ] {
            if !(v.is_finite() && (0.0..=MOST_MS).contains(&v)) {
                return Err(format!(
                    "front_end.{name} is {v}: it must be a time in ms of [0, {MOST_MS}]"
                ));
            }
        }
        Ok(())
    }
}

/// The served engine's front end: its cost, and the requests passing through it now.
#[derive(Debug, Default)]
pub struct Gate {
    pub cost: FrontEnd,
    passing: AtomicU64,
}

impl Gate {
    pub fn new(cost: FrontEnd) -> Gate {
        Gate {
            cost,
            passing: AtomicU64::new(0),
        }
    }

    /// Holds a request that arrived at `arrival` for its front-end time and returns when it
    /// reaches the queue. The streams in flight are the requests the engines hold and those
    /// passing here (itself included), counted again when its time is up: requests that came
    /// after it meanwhile (the rest of a wave) lengthen it.
    pub async fn pass(&self, engines: &[Engine], prompt_tokens: u32, arrival: Instant) -> Instant {
        if self.cost.is_zero() {
            return arrival;
        }
        // Counted while here, a stream the client gave up on included (dropped mid-sleep).
        self.passing.fetch_add(1, Ordering::Relaxed);
        let _here = Passing(&self.passing);
        loop {
            let held: u64 = engines
                .iter()
                .map(|e| {
                    let m = e.metrics.lock().unwrap_or_else(|e| e.into_inner());
                    m.running + m.waiting
                })
                .sum();
            let streams = held + self.passing.load(Ordering::Relaxed);
            let streams = u32::try_from(streams).unwrap_or(u32::MAX);
            let until = arrival + self.cost.delay(streams, prompt_tokens);
            if Instant::now() >= until {
                return Instant::now();
            }
            tokio::time::sleep_until(until.into()).await;
        }
    }
}

/// One request passing the gate; leaving takes it off the count.
struct Passing<'a>(&'a AtomicU64);

impl Drop for Passing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A grid point's front-end times, as the fit reads them.
struct Point {
    index: u32,
    streams: u32,
    input_len: u32,
    ms: Vec<f64>,
}

/// Fits the front end to the closed-loop requests of `path` that carry the engine's own TTFT;
/// None (and why) where none do. Each point's mean is one term of the squared log errors.
pub fn fit(path: &str) -> anyhow::Result<Result<(FrontEnd, Vec<FrontEndPoint>), String>> {
    let flag = "--calibrate-from";
    let reader = servbench::jsonl::Source::parse(path)
        .open(true)
        .map_err(|e| cli::usage(format!("{flag}: {e}")))?;
    let mut points: BTreeMap<(u32, u32), Point> = BTreeMap::new();
    let mut ahead = 0usize;
    for line in reader {
        let line = line.map_err(|e| cli::usage(format!("{flag}: {e}")))?;
        let Record::Request(ref r) = line.record else {
            continue;
        };
        let (Some(c), None, true) = (r.point.concurrency, r.point.rate_rps, r.is_ok()) else {
            continue;
        };
        let (Some(ttft), Some(engine)) =
            (r.ttft_ms, r.server_timing.as_ref().and_then(|t| t.ttft_ms))
        else {
            continue;
        };
        let ms = ttft - engine;
        if !ms.is_finite() {
            return Err(cli::usage(format!(
                "{flag}: {}: a TTFT is not a finite number (rerun loadgen)",
                line.location()
            )));
        }
        // The engine's first token cannot reach the client before it was made.
        if ms < 0.0 {
            ahead += 1;
            continue;
        }
        let input_len = r.prompt_tokens.or(r.point.input_len).unwrap_or_default();
        points
            .entry((r.point.index, c))
            .or_insert_with(|| Point {
                index: r.point.index,
                streams: c,
                input_len,
                ms: Vec::new(),
            })
            .ms
            .push(ms);
    }
    if ahead > 0 {
        cli::warn(format!(
            "{flag} {path}: {ahead} request(s) whose engine TTFT exceeds the client's left out of the front end (their server_timing is not this client's)"
        ));
    }
    if points.is_empty() {
        return Ok(Err(
            "the grid's requests carry no server_timing (serve with --enable-per-request-metrics)"
                .to_string(),
        ));
    }
    let means: Vec<(&Point, f64)> = points
        .values()
        .map(|p| (p, p.ms.iter().sum::<f64>() / p.ms.len() as f64))
        .collect();
    let front_end = |x: &[f64; 3]| FrontEnd {
        fixed_ms: x[0].exp(),
        per_stream_ms: x[1].exp(),
        per_prompt_ktok_ms: x[2].exp(),
    };
    // Times under 10 us are as good as none: the logs stop there.
    let floor = 1e-2f64;
    let objective = |x: &[f64; 3]| {
        if x.iter()
            .any(|v| *v > MOST_MS.ln() || *v < floor.ln() - 10.0)
        {
            return f64::MAX;
        }
        let f = front_end(x);
        means
            .iter()
            .map(|(p, m)| {
                let e = (f.ms(p.streams, p.input_len).max(floor) / m.max(floor)).ln();
                e * e
            })
            .sum::<f64>()
    };
    let fastest = means.iter().map(|(_, m)| *m).fold(f64::MAX, f64::min);
    let start = [
        fastest.max(floor).ln(),
        (fastest / 10.0).max(floor).ln(),
        0.0,
    ];
    let x = nelder_mead(&objective, nelder_mead(&objective, start, 2000), 2000);
    let mut f = front_end(&x);
    // A term the logs drove to the floor is none.
    for v in [
        &mut f.fixed_ms,
        &mut f.per_stream_ms,
        &mut f.per_prompt_ktok_ms,
    ] {
        if *v < floor {
            *v = 0.0;
        }
    }
    let fitted = means
        .iter()
        .map(|(p, m)| FrontEndPoint {
            point_index: p.index,
            streams: p.streams,
            input_len: p.input_len,
            requests: p.ms.len(),
            measured_ms: *m,
            modelled_ms: f.ms(p.streams, p.input_len),
        })
        .collect();
    Ok(Ok((f, fitted)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_adds_its_three_terms() {
        let f = FrontEnd {
            fixed_ms: 2.0,
            per_stream_ms: 0.5,
            per_prompt_ktok_ms: 4.0,
        };
        let table = [
            (1, 0, 2.5),
            (4, 0, 4.0),
            (1, 1000, 6.5),
            (40, 2048, 2.0 + 20.0 + 8.192),
        ];
        for (streams, prompt, ms) in table {
            let got = f.delay(streams, prompt).as_secs_f64() * 1e3;
            assert!((got - ms).abs() < 1e-6, "{streams} {prompt}: {got} vs {ms}");
        }
        assert_eq!(FrontEnd::default().delay(40, 2048), Duration::ZERO);
        assert!(FrontEnd::default().is_zero() && !f.is_zero());
    }

    #[test]
    fn a_card_figure_out_of_range_is_named() {
        let bad = FrontEnd {
            per_stream_ms: f64::NAN,
            ..FrontEnd::default()
        };
        assert!(bad.check().unwrap_err().contains("front_end.per_stream_ms"));
        let negative = FrontEnd {
            fixed_ms: -1.0,
            ..FrontEnd::default()
        };
        assert!(negative.check().unwrap_err().contains("fixed_ms"));
        assert_eq!(FrontEnd::default().check(), Ok(()));
    }
}
