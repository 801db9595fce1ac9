//! `--startup DUR`: while /health still answers 503, the lines vLLM logs as it starts, in its
//! format, at fixed shares of DUR ([`PHASES`]; speaking SGLang, SGLang's), so that srv-launch's
//! startup phases (read back with `servbench::startup::VLLM` or `SGLANG`) are tested exactly. /health turns 200 only once the last
//! line is written, so a launcher that sees the server ready can read every line.

use crate::selfreport::vllm_log_line;
use crate::sglang;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a line says, given the whole startup.
pub struct Facts<'a> {
    pub startup: Duration,
    pub url: &'a str,
    pub model: &'a str,
    pub kv_cache_tokens: u64,
    pub max_model_len: u32,
}

/// One line: written at `at` (a share of the startup) by vLLM's `process` from `source`.
pub struct PhaseLine {
    pub at: f64,
    pub process: &'static str,
    pub source: &'static str,
    pub text: fn(&Facts) -> String,
}

fn secs(f: &Facts, share: f64) -> f64 {
    f.startup.as_secs_f64() * share
}

/// The phases, with the durations vLLM prints: weights 1/4 of the startup, torch.compile 1/4,
/// graph capture 1/4 (whole seconds, as vLLM rounds it), engine init (profile, KV cache,
/// warm-up: everything after the weights) 5/8, ready at the end.
pub const PHASES: &[PhaseLine] = &[
    PhaseLine {
        at: 0.0,
        process: "Worker",
        source: "gpu_model_runner.py:4968",
        text: |f| format!("Starting to load model {}...", f.model),
    },
    PhaseLine {
        at: 0.25,
        process: "Worker",
        source: "default_loader.py:501",
        text: |f| format!("Loading weights took {:.2} seconds", secs(f, 0.25)),
    },
    PhaseLine {
        at: 0.5,
        process: "Worker",
        source: "monitor.py:62",
        text: |f| {
            format!(
                "[backbone] torch.compile took {:.2} s in total",
                secs(f, 0.25)
            )
        },
    },
    PhaseLine {
        at: 0.75,
        process: "Worker",
        source: "gpu_model_runner.py:6582",
        text: |f| {
            format!(
                "Graph capturing finished in {:.0} secs, took 0.00 GiB",
                secs(f, 0.25)
            )
        },
    },
    PhaseLine {
        at: 0.875,
        process: "EngineCore",
        source: "kv_cache_utils.py:2327",
        text: |f| {
            format!(
                "GPU KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {:.2}x",
                f.kv_cache_tokens,
                f.max_model_len,
                f.kv_cache_tokens as f64 / f64::from(f.max_model_len.max(1))
            )
        },
    },
    PhaseLine {
        at: 0.875,
        process: "EngineCore",
        source: "core.py:402",
        text: |f| {
            format!(
                "init engine (profile, create kv cache, warmup model) took {:.2} s",
                secs(f, 0.625)
            )
        },
    },
    PhaseLine {
        at: 1.0,
        process: "APIServer",
        source: "entry.py:140",
        text: |f| format!("Starting vLLM server on {}", f.url),
    },
];

/// Writes [`PHASES`] on stderr at their times after `started` on a thread of its own, then
/// uvicorn's `Application startup complete.`, then sets `logged`; speaking SGLang (`sglang`:
/// its wording, rank 0 of the first engine), SGLang's lines instead (`sglang::STARTUP`).
pub fn log_phases(
    started: Instant,
    facts: Facts,
    sglang: Option<(sglang::Wording, sglang::Ranks)>,
    logged: Arc<AtomicBool>,
) {
    let lines: Vec<(Duration, Box<dyn Fn() + Send>)> = match sglang {
        None => PHASES
            .iter()
            .map(|p| {
                let text = (p.text)(&facts);
                let write: Box<dyn Fn() + Send> =
                    Box::new(move || vllm_log_line(p.process, p.source, &text));
                (facts.startup.mul_f64(p.at), write)
            })
            .chain(std::iter::once((
                facts.startup,
                Box::new(|| eprintln!("INFO:     Application startup complete."))
                    as Box<dyn Fn() + Send>,
            )))
            .collect(),
        Some((wording, ranks)) => {
            let f = sglang::Facts {
                startup_s: facts.startup.as_secs_f64(),
                model: facts.model,
                kv_cache_tokens: facts.kv_cache_tokens,
                url: facts.url,
            };
            sglang::STARTUP
                .iter()
                .map(|p| {
                    let text = (p.text)(&f, wording);
                    let write: Box<dyn Fn() + Send> =
                        Box::new(move || sglang::log_line(ranks, &text));
                    (facts.startup.mul_f64(p.at), write)
                })
                .collect()
        }
    };
    let startup = facts.startup;
    std::thread::spawn(move || {
        for (at, write) in lines {
            sleep_until(started + at);
            write();
        }
        sleep_until(started + startup);
        logged.store(true, Ordering::SeqCst);
    });
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}
