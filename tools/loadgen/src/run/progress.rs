//! What a person sees while a point runs (a progress line on stderr, a terminal only), and the
//! client's own CPU cost that each summary records.

use servbench::load::Budget;
use servbench::record::PointKey;
use servbench::stats::PointStats;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// User + system CPU seconds of this process so far.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return 0.0;
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }
}

/// The live progress line on stderr, only when stderr is a terminal.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    started: Instant,
    last: std::cell::Cell<Instant>,
}

impl Progress {
    pub fn new(key: &PointKey, budget: &Budget) -> Progress {
        let started = Instant::now();
        if !std::io::stderr().is_terminal() {
            return Progress {
                bar: None,
                started,
                last: started.into(),
            };
        }
        let load = match (key.concurrency, key.rate_rps) {
            (Some(c), _) => format!("c={c}"),
            (None, Some(r)) => format!("r={r}/s"),
            _ => String::new(),
        };
        let bar = match budget {
            Budget::Requests(n) => indicatif::ProgressBar::new(*n),
            Budget::Time(_) => indicatif::ProgressBar::new_spinner(),
        };
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        let done = match budget {
            Budget::Requests(_) => "{pos}/{len}, {elapsed},".to_string(),
            Budget::Time(d) => format!("{{pos}} done, {{elapsed}} of {}s,", d.as_secs()),
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(&format!(
                "point {} {load} {done} {{msg}}",
                key.index
            ))
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Progress {
            bar: Some(bar),
            started,
            last: started.into(),
        }
    }

    pub fn tick(&self, stats: &PointStats) {
        let Some(bar) = &self.bar else { return };
        bar.inc(1);
        let now = Instant::now();
        if now - self.last.get() > Duration::from_millis(200) {
            self.last.set(now);
            let secs = (now - self.started).as_secs_f64().max(1e-3);
            // Embeddings have no output tokens: their throughput is inputs/s.
            let (rate, unit) = match stats.inputs {
                0 => (stats.output_tokens, "tok/s"),
                n => (n, "inputs/s"),
            };
            bar.set_message(format!(
                "{:.0} {unit}, {} errors",
                rate as f64 / secs,
                stats.errors()
            ));
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
