//! srv-sim speaking SGLang's self-report (`--self-report-as sglang`), in SGLang's own words
//! (`managers/scheduler_metrics_mixin.py`, `managers/schedule_batch.py`,
//! `model_executor/model_runner.py`), each line after SGLang's logger prefix
//! (`[2026-12-05 01:00:00 DP1 TP0] `: the DP rank with several engines, the TP rank with TP > 1;
//! only rank 0 of each engine logs, as SGLang's):
//! - a `Prefill batch` line for each step that prefills (a step that also decodes is SGLang's
//!   mixed batch, logged as prefill), and a `Decode batch` line every `--decode-log-interval`
//!   decode-only steps, its throughput the tokens those steps generated over the wall time
//!   since the previous decode line (SGLang's `gap_latency`), with `--enable-mfu-metrics` the
//!   cost model's FLOPs and bytes per GPU over the same time;
//! - with `--enable-request-time-stats-logging`, a `Req Time Stats(rid=...)` line per finished
//!   request, the rid being the answer's `id` (what the client sees), its queue the time from
//!   arrival to first scheduled, its forward from then to the last token;
//! - its startup lines ([`STARTUP`]), the graph capture in the new wording or, as
//!   `--self-report-as sglang-0.5.10`, the old one.

use crate::progress::ReqTimes;
use crate::step::StepCounts;
use std::io::Write as _;
use std::time::{Duration, Instant};

/// Which SGLang's wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wording {
    /// Recent SGLang: `Decode batch, ...`, `Capture target decode CUDA graph end. elapsed=S s`.
    Current,
    /// SGLang 0.5.10 and older: `Decode batch. ...`, `Capture cuda graph end. Time elapsed: S s`.
    Old,
}

/// One engine's place among SGLang's schedulers: its DP rank (with several engines) and the
/// TP size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranks {
    pub engine: u32,
    pub engines: u32,
    pub tp: u32,
}

impl Default for Ranks {
    fn default() -> Self {
        Ranks {
            engine: 0,
            engines: 1,
            tp: 1,
        }
    }
}

/// SGLang's logger prefix for rank 0 of `r`'s engine, at the wall clock's whole second.
pub fn prefix(r: Ranks) -> String {
    let ts = servbench::record::now_ts();
    // 2026-12-01T23:30:00.123Z -> 2026-12-01 23:30:00
    let mut p = format!(
        "[{} {}",
        ts.get(0..10).unwrap_or(""),
        ts.get(11..19).unwrap_or("")
    );
    if r.engines > 1 {
        p.push_str(&format!(" DP{}", r.engine));
    }
    if r.tp > 1 {
        p.push_str(" TP0");
    }
    p.push_str("] ");
    p
}

/// One line on stderr (the server's log) after `r`'s prefix, written whole.
pub fn log_line(r: Ranks, msg: &str) {
    let line = format!("{}{msg}\n", prefix(r));
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// What one step did, as the decode log needs it.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepFacts {
    /// Requests prefilling (a chunk of their prompt) this step, and those chunks' tokens.
    pub new_seqs: u32,
    pub new_tokens: u32,
    /// Requests decoding this step.
    pub decoding: u32,
    /// Tokens the step made available to clients.
    pub generated: u64,
    pub kv_used_tokens: u64,
    pub kv_usage: f64,
    pub waiting: u64,
    pub counts: StepCounts,
    /// How long the step ran (the logs' clock starts when the engine's first step did).
    pub elapsed: Duration,
}

/// The decode log's state between its lines (SGLang's `forward_ct_decode`,
/// `num_generated_tokens`, `last_decode_stats_tic`, `_mfu_log_*`).
#[derive(Debug, Clone, Copy)]
pub struct DecodeLog {
    pub interval: u32,
    pub wording: Wording,
    pub mfu: bool,
    decode_steps: u64,
    tokens: u64,
    flops: f64,
    read_bytes: f64,
    write_bytes: f64,
    tic: Option<Instant>,
    last_prefill_tic: Option<Instant>,
}

impl DecodeLog {
    pub fn new(interval: u32, wording: Wording, mfu: bool) -> DecodeLog {
        DecodeLog {
            interval: interval.max(1),
            wording,
            mfu,
            decode_steps: 0,
            tokens: 0,
            flops: 0.0,
            read_bytes: 0.0,
            write_bytes: 0.0,
            tic: None,
            last_prefill_tic: None,
        }
    }

    fn batch(&self, kind: &str) -> String {
        match self.wording {
            Wording::Current => format!("{kind} batch, "),
            Wording::Old => format!("{kind} batch. "),
        }
    }

    /// The line a step ended at `now` writes, if any: a prefill step's, or every
    /// `interval`-th decode-only step's.
    pub fn step(&mut self, s: &StepFacts, now: Instant) -> Option<String> {
        // The clock of both logs starts with the engine's first step.
        let tic = *self.tic.get_or_insert(now - s.elapsed);
        if s.new_tokens > 0 {
            let gap = now - *self.last_prefill_tic.get_or_insert(tic);
            self.last_prefill_tic = Some(now);
            let gap_s = gap.as_secs_f64();
            let mut line = format!(
                "{}#new-seq: {}, #new-token: {}, #cached-token: 0, token usage: {:.2}, #running-req: {}, #queue-req: {}, #pending-token: 0, cuda graph: False, input throughput (token/s): {:.2}",
                self.batch("Prefill"),
                s.new_seqs,
                s.new_tokens,
                s.kv_usage,
                s.decoding,
                s.waiting,
                if gap_s > 0.0 {
                    f64::from(s.new_tokens) / gap_s
                } else {
                    0.0
                },
            );
            if self.mfu && gap_s > 0.0 {
                line.push_str(&format!(
                    ", est. prefill TFLOPS/s (per GPU): {:.2}",
                    s.counts.flops_per_gpu / gap_s / 1e12
                ));
            }
            return Some(line);
        }
        self.decode_steps += 1;
        self.tokens += s.generated;
        self.flops += s.counts.flops_per_gpu;
        self.read_bytes += s.counts.read_bytes_per_gpu;
        self.write_bytes += s.counts.write_bytes_per_gpu;
        if !self.decode_steps.is_multiple_of(u64::from(self.interval)) {
            return None;
        }
        let gap_s = (now - tic).as_secs_f64();
        self.tic = Some(now);
        let rate = |x: f64| if gap_s > 0.0 { x / gap_s } else { 0.0 };
        let mut line = format!(
            "{}#running-req: {}, #token: {}, token usage: {:.2}, cuda graph: True, gen throughput (token/s): {:.2}, #queue-req: {}",
            self.batch("Decode"),
            s.decoding,
            s.kv_used_tokens,
            s.kv_usage,
            rate(self.tokens as f64),
            s.waiting,
        );
        if self.mfu && gap_s > 0.0 {
            line.push_str(&format!(
                ", est. decode TFLOPS/s (per GPU): {:.2}, est. read BW (GB/s per GPU): {:.2}, est. write BW (GB/s per GPU): {:.2}",
                rate(self.flops) / 1e12,
                rate(self.read_bytes) / 1e9,
                rate(self.write_bytes) / 1e9,
            ));
        }
        (self.tokens, self.flops, self.read_bytes, self.write_bytes) = (0, 0.0, 0.0, 0.0);
        Some(line)
    }
}

/// The monotonic clock in seconds (Python's `time.perf_counter()` on Linux, which SGLang's
/// `start_time` is on) at `at`.
fn perf_counter(at: Instant) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let now = ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9;
    now - Instant::now().saturating_duration_since(at).as_secs_f64()
}

/// A finished request's `Req Time Stats` line (unified, not disaggregated): `None` where the
/// engine never scheduled it or it produced nothing.
pub fn time_stats(rid: &str, input: u32, output: u32, t: &ReqTimes) -> Option<String> {
    let (queued, scheduled, last) = (t.queued?, t.scheduled?, t.last?);
    let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
    Some(format!(
        "Req Time Stats(rid={rid}, input len={input}, output len={output}, type=unified): queue_duration={:.2}ms, forward_duration={:.2}ms, start_time={:.3}",
        ms(queued, scheduled),
        ms(scheduled, last),
        perf_counter(queued),
    ))
}

/// What a startup line says, given the whole startup.
pub struct Facts<'a> {
    pub startup_s: f64,
    pub model: &'a str,
    pub kv_cache_tokens: u64,
    pub url: &'a str,
}

/// One startup line: written at `at` (a share of the startup).
pub struct PhaseLine {
    pub at: f64,
    pub text: fn(&Facts, Wording) -> String,
}

/// SGLang's startup, at fixed shares of `--startup` with the durations it prints: the weights
/// 1/4 of it, the memory pool at 3/8, the graph capture the next 1/4 (to 5/8), uvicorn
/// listening at 3/4 and ready at the end.
pub const STARTUP: &[PhaseLine] = &[
    PhaseLine {
        at: 0.0,
        text: |_, _| "Load weight begin. avail mem=78.50 GB".into(),
    },
    PhaseLine {
        at: 0.25,
        text: |f, _| {
            format!(
                "Load weight end. elapsed={:.2} s, type={}, dtype=torch.bfloat16, avail mem=62.08 GB, mem usage=16.41 GB.",
                f.startup_s * 0.25,
                f.model
            )
        },
    },
    PhaseLine {
        at: 0.375,
        text: |f, _| {
            format!(
                "KV Cache is allocated. #tokens: {}, K size: 1.00 GB, V size: 1.00 GB",
                f.kv_cache_tokens
            )
        },
    },
    PhaseLine {
        at: 0.375,
        text: |_, _| "Memory pool end. avail mem=36.31 GB".into(),
    },
    PhaseLine {
        at: 0.625,
        text: |f, w| {
            let took = f.startup_s * 0.25;
            match w {
                Wording::Current => format!(
                    "Capture target decode CUDA graph end. elapsed={took:.2} s, mem usage=0.24 GB, avail mem=7.28 GB."
                ),
                Wording::Old => format!(
                    "Capture cuda graph end. Time elapsed: {took:.2} s. mem usage=0.93 GB. avail mem=0.53 GB."
                ),
            }
        },
    },
    PhaseLine {
        at: 0.75,
        text: |f, _| {
            format!(
                "INFO:     Uvicorn running on {} (Press CTRL+C to quit)",
                f.url
            )
        },
    },
    PhaseLine {
        at: 1.0,
        text: |_, _| "The server is fired up and ready to roll!".into(),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(decoding: u32, new_tokens: u32) -> StepFacts {
        StepFacts {
            new_seqs: u32::from(new_tokens > 0),
            new_tokens,
            decoding,
            generated: u64::from(decoding),
            kv_used_tokens: 120,
            kv_usage: 0.01,
            waiting: 2,
            counts: StepCounts {
                flops_per_gpu: 2e12,
                read_bytes_per_gpu: 4e9,
                write_bytes_per_gpu: 0.0,
            },
            elapsed: Duration::from_millis(10),
        }
    }

    #[test]
    fn the_decode_line_comes_every_interval_with_sglangs_throughput() {
        let t0 = Instant::now();
        let mut log = DecodeLog::new(2, Wording::Current, true);
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(log.step(&facts(3, 0), at(10)), None);
        // Two steps of 3 tokens over the 20 ms since the first began: 300 tokens/s.
        assert_eq!(
            log.step(&facts(3, 0), at(20)).unwrap(),
            "Decode batch, #running-req: 3, #token: 120, token usage: 0.01, cuda graph: True, gen throughput (token/s): 300.00, #queue-req: 2, est. decode TFLOPS/s (per GPU): 200.00, est. read BW (GB/s per GPU): 400.00, est. write BW (GB/s per GPU): 0.00"
        );
        assert_eq!(log.step(&facts(3, 0), at(30)), None);
        let prefill = log.step(&facts(3, 64), at(40)).unwrap();
        assert!(
            prefill.starts_with("Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, token usage: 0.01, #running-req: 3, #queue-req: 2"),
            "{prefill}"
        );
        let mut old = DecodeLog::new(1, Wording::Old, false);
        let line = old.step(&facts(1, 0), at(10)).unwrap();
        assert!(line.starts_with("Decode batch. #running-req: 1,"), "{line}");
        assert!(!line.contains("TFLOPS"), "{line}");
    }

    #[test]
    fn the_time_stats_line_is_sglangs_unified_one() {
        let q = Instant::now();
        let t = ReqTimes {
            queued: Some(q),
            scheduled: Some(q + Duration::from_micros(1500)),
            first: Some(q + Duration::from_millis(5)),
            last: Some(q + Duration::from_millis(45)),
        };
        let line = time_stats("chatcmpl-sim0000000000000007", 16, 8, &t).unwrap();
        assert!(
            line.starts_with("Req Time Stats(rid=chatcmpl-sim0000000000000007, input len=16, output len=8, type=unified): queue_duration=1.50ms, forward_duration=43.50ms, start_time="),
            "{line}"
        );
        assert_eq!(time_stats("x", 1, 0, &ReqTimes::default()), None);
    }

    #[test]
    fn the_prefix_names_dp_and_tp_as_sglang_does() {
        let p = prefix(Ranks::default());
        assert!(
            p.starts_with('[') && p.ends_with("] ") && !p.contains("TP"),
            "{p}"
        );
        let p = prefix(Ranks {
            engine: 1,
            engines: 2,
            tp: 2,
        });
        assert!(p.ends_with(" DP1 TP0] "), "{p}");
    }
}
