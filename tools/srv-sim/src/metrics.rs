//! The engine's counters, gauges and histograms, rendered as Prometheus text under vLLM's metric
//! names (`vllm:num_requests_running`, `vllm:time_to_first_token_seconds`, ...) so scrapers built
//! for vLLM read srv-sim unchanged, or under SGLang's (`--metrics-names sglang`: its names, its
//! histogram buckets, its speculative figures as gauges only). Every figure is the truth of the
//! engine's model: KV usage is the tokens running requests hold, preemptions are the engine's.
//! The engine thread writes them once per step; `/metrics` reads.

use std::fmt::Write as _;

/// Whose names `/metrics` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MetricNames {
    /// vLLM's (`vllm:`), counters with `_total`, speculative decoding as counters.
    #[default]
    Vllm,
    /// SGLang's (`sglang:`), speculative decoding as windowed gauges only.
    Sglang,
}

/// vLLM's TTFT buckets (vllm/v1/metrics/loggers.py).
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's inter-token latency buckets.
pub const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's end-to-end latency buckets.
pub const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// SGLang's default TTFT buckets (python/sglang/srt/metrics/collector.py).
pub const SGLANG_TTFT_BUCKETS: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
    400.0,
];
/// SGLang's default inter-token latency buckets.
pub const SGLANG_ITL_BUCKETS: &[f64] = &[
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
];
/// SGLang's default end-to-end latency buckets.
pub const SGLANG_E2E_BUCKETS: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
    400.0, 600.0, 1200.0, 1800.0, 2400.0,
];
/// Decode steps SGLang's speculative gauges average over (its decode log interval).
pub const SPEC_GAUGE_WINDOW_STEPS: u64 = 40;

/// A Prometheus histogram (cumulative buckets are computed when rendering).
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records `value` `n` times (a chunk of n tokens spreads its interval over n observations).
    pub fn observe_n(&mut self, value: f64, n: u64) {
        let i = self.bounds.partition_point(|&b| b < value);
        self.counts[i] += n;
        self.sum += value * n as f64;
        self.count += n;
    }

    pub fn observe(&mut self, value: f64) {
        self.observe_n(value, 1);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count;
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels},le=\"{bound:?}\"}} {cumulative}"
            );
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {:?}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// Everything `/metrics` shows.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub names: MetricNames,
    pub running: u64,
    pub waiting: u64,
    /// Fraction of the KV-cache token budget in use (0..1).
    pub kv_usage: f64,
    /// KV-cache tokens held by running requests.
    pub kv_used_tokens: u64,
    pub preemptions: u64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub finished_length: u64,
    pub aborted: u64,
    pub engine_steps: u64,
    pub spec_drafts: u64,
    pub spec_draft_tokens: u64,
    pub spec_accepted_tokens: u64,
    /// Drafts whose token at position i was accepted (vLLM's `..._per_pos_total{position}`).
    pub spec_accepted_per_pos: Vec<u64>,
    /// SGLang's gauges: accepted length and rate over the last [`SPEC_GAUGE_WINDOW_STEPS`].
    pub spec_accept_length: f64,
    pub spec_accept_rate: f64,
    spec_window: SpecWindow,
    /// Prefix cache: prompt tokens looked up, tokens found cached, resets on request.
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub prefix_resets: u64,
    /// The latest request's cached share of its prompt (SGLang's `cache_hit_rate`).
    pub prefix_last_hit_rate: f64,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    /// How late the engine published tokens against its own schedule (srv-sim's own metric).
    pub lateness: Histogram,
    pub max_lateness_s: f64,
    /// `--enable-mfu-metrics`: the cost model's FLOPs and bytes per GPU so far.
    pub est: Option<crate::step::EstCounters>,
    /// The engine's TP ranks: SGLang exports its FLOP counters once per rank (`tp_rank`).
    pub tp_ranks: u32,
}

/// The speculative figures of the decode steps since the gauges were last set.
#[derive(Debug, Clone, Copy, Default)]
struct SpecWindow {
    steps: u64,
    drafts: u64,
    draft_tokens: u64,
    accepted: u64,
}

/// Buckets for srv-sim's schedule-lateness histogram (seconds).
pub const LATENESS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0,
];

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new(MetricNames::Vllm)
    }
}

impl Metrics {
    /// Empty metrics with the histogram buckets of `names`' engine.
    pub fn new(names: MetricNames) -> Metrics {
        let (ttft, itl, e2e) = match names {
            MetricNames::Vllm => (TTFT_BUCKETS, ITL_BUCKETS, E2E_BUCKETS),
            MetricNames::Sglang => (SGLANG_TTFT_BUCKETS, SGLANG_ITL_BUCKETS, SGLANG_E2E_BUCKETS),
        };
        Metrics {
            names,
            running: 0,
            waiting: 0,
            kv_usage: 0.0,
            kv_used_tokens: 0,
            preemptions: 0,
            prompt_tokens: 0,
            generation_tokens: 0,
            finished_length: 0,
            aborted: 0,
            engine_steps: 0,
            spec_drafts: 0,
            spec_draft_tokens: 0,
            spec_accepted_tokens: 0,
            spec_accepted_per_pos: Vec::new(),
            spec_accept_length: 0.0,
            spec_accept_rate: 0.0,
            spec_window: SpecWindow::default(),
            prefix_queries: 0,
            prefix_hits: 0,
            prefix_resets: 0,
            prefix_last_hit_rate: 0.0,
            ttft: Histogram::new(ttft),
            itl: Histogram::new(itl),
            e2e: Histogram::new(e2e),
            lateness: Histogram::new(LATENESS_BUCKETS),
            max_lateness_s: 0.0,
            est: None,
            tp_ranks: 1,
        }
    }

    /// Records how late (seconds) a publication came against its scheduled time.
    pub fn late(&mut self, seconds: f64) {
        self.lateness.observe(seconds);
        if seconds > self.max_lateness_s {
            self.max_lateness_s = seconds;
        }
    }

    /// One request's verify step: `drafts` draft tokens, of which the first `accepted` were.
    pub fn spec_step(&mut self, drafts: u32, accepted: u32) {
        self.spec_drafts += 1;
        self.spec_draft_tokens += u64::from(drafts);
        self.spec_accepted_tokens += u64::from(accepted);
        if self.spec_accepted_per_pos.len() < drafts as usize {
            self.spec_accepted_per_pos.resize(drafts as usize, 0);
        }
        for pos in &mut self.spec_accepted_per_pos[..accepted as usize] {
            *pos += 1;
        }
        let w = &mut self.spec_window;
        w.drafts += 1;
        w.draft_tokens += u64::from(drafts);
        w.accepted += u64::from(accepted);
    }

    /// An engine step ended: SGLang's gauges are set every [`SPEC_GAUGE_WINDOW_STEPS`] steps
    /// that verified drafts, from those steps only.
    pub fn step_done(&mut self) {
        self.engine_steps += 1;
        let w = &mut self.spec_window;
        if w.drafts == 0 {
            return;
        }
        w.steps += 1;
        if w.steps >= SPEC_GAUGE_WINDOW_STEPS {
            // SGLang: accept length = tokens per verify (accepted + the bonus token).
            self.spec_accept_length = (w.accepted + w.drafts) as f64 / w.drafts as f64;
            self.spec_accept_rate = w.accepted as f64 / w.draft_tokens.max(1) as f64;
            *w = SpecWindow::default();
        }
    }
}

/// One metric family's samples, one per engine.
struct Families<'a> {
    out: String,
    engines: &'a [Metrics],
    labels: Vec<String>,
}

impl Families<'_> {
    fn family(&mut self, name: &str, kind: &str, help: &str, value: &dyn Fn(&Metrics) -> String) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (m, l) in self.engines.iter().zip(&self.labels) {
            let _ = writeln!(self.out, "{name}{{{l}}} {}", value(m));
        }
    }

    /// A family with one sample per engine and value of `extra` labels.
    fn labelled(&mut self, name: &str, help: &str, rows: &dyn Fn(&Metrics) -> Vec<(String, u64)>) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (m, l) in self.engines.iter().zip(&self.labels) {
            for (extra, v) in rows(m) {
                let _ = writeln!(self.out, "{name}{{{l},{extra}}} {v}");
            }
        }
    }

    /// A counter family with one sample per engine and TP rank (`tp_rank`), each the same
    /// per-GPU figure: SGLang's schedulers each export their own.
    fn per_rank(&mut self, name: &str, help: &str, value: &dyn Fn(&Metrics) -> String) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (m, l) in self.engines.iter().zip(&self.labels) {
            for rank in 0..m.tp_ranks.max(1) {
                let _ = writeln!(self.out, "{name}{{{l},tp_rank=\"{rank}\"}} {}", value(m));
            }
        }
    }

    fn histogram(&mut self, name: &str, help: &str, get: fn(&Metrics) -> &Histogram) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (m, l) in self.engines.iter().zip(&self.labels) {
            get(m).render(&mut self.out, name, l);
        }
    }
}

/// Prometheus text exposition for every engine (data-parallel replicas are `engine="0"`,
/// `"1"`, ... under vLLM's names, `dp_rank="0"`, ... under SGLang's), each metric family
/// written once with one sample per engine, under the engines' names ([`Metrics::names`]).
pub fn render(engines: &[Metrics], model: &str, spec_decoding: bool) -> String {
    let names = engines.first().map_or(MetricNames::Vllm, |m| m.names);
    let model = model.replace('\\', "\\\\").replace('"', "\\\"");
    let labels = (0..engines.len())
        .map(|i| match names {
            MetricNames::Vllm => format!("model_name=\"{model}\",engine=\"{i}\""),
            MetricNames::Sglang => format!("model_name=\"{model}\",dp_rank=\"{i}\""),
        })
        .collect();
    let mut f = Families {
        out: String::with_capacity(8192 * engines.len()),
        engines,
        labels,
    };
    match names {
        MetricNames::Vllm => vllm(&mut f, spec_decoding),
        MetricNames::Sglang => sglang(&mut f, spec_decoding),
    }
    f.histogram(
        "srv_sim:schedule_lateness_seconds",
        "How late srv-sim's engine published tokens against its own schedule.",
        |m| &m.lateness,
    );
    f.family(
        "srv_sim:schedule_lateness_max_seconds",
        "gauge",
        "Largest lateness of the engine against its own schedule.",
        &|m| format!("{:?}", m.max_lateness_s),
    );
    f.family(
        "srv_sim:prefix_cache_resets_total",
        "counter",
        "Times the prefix cache was emptied (/reset_prefix_cache, /flush_cache).",
        &|m| m.prefix_resets.to_string(),
    );
    f.family(
        "srv_sim:engine_steps_total",
        "counter",
        "Engine steps (schedule events in fixed-latency mode).",
        &|m| m.engine_steps.to_string(),
    );
    f.out
}

/// `--enable-mfu-metrics`: the cost model's FLOPs and bytes per GPU, under `prefix`'s
/// `estimated_*_per_gpu_total` (vLLM's once per engine, SGLang's once per TP rank).
fn estimated(f: &mut Families, prefix: &str) {
    if !f.engines.iter().any(|m| m.est.is_some()) {
        return;
    }
    type Get = fn(&crate::step::EstCounters) -> f64;
    let rows: [(&str, &str, Get); 3] = [
        ("flops", "floating point operations", |c| c.flops),
        ("read_bytes", "bytes read from memory", |c| c.read_bytes),
        ("write_bytes", "bytes written to memory", |c| c.write_bytes),
    ];
    for (name, what, get) in rows {
        let name = format!("{prefix}estimated_{name}_per_gpu_total");
        let help = format!("Estimated number of {what} per GPU (srv-sim's cost model).");
        let value = |m: &Metrics| format!("{:?}", m.est.as_ref().map_or(0.0, get));
        match f.engines.first().map(|m| m.names) {
            Some(MetricNames::Sglang) => f.per_rank(&name, &help, &value),
            _ => f.family(&name, "counter", &help, &value),
        }
    }
}

fn vllm(f: &mut Families, spec_decoding: bool) {
    estimated(f, "vllm:");
    f.family(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        &|m| m.running.to_string(),
    );
    f.family(
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        &|m| m.waiting.to_string(),
    );
    f.family(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        &|m| format!("{:?}", m.kv_usage),
    );
    f.family(
        "vllm:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        &|m| m.prompt_tokens.to_string(),
    );
    f.family(
        "vllm:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        &|m| m.generation_tokens.to_string(),
    );
    f.family(
        "vllm:prefix_cache_queries_total",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        &|m| m.prefix_queries.to_string(),
    );
    f.family(
        "vllm:prefix_cache_hits_total",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
        &|m| m.prefix_hits.to_string(),
    );
    f.family(
        "vllm:num_preemptions_total",
        "counter",
        "Cumulative number of preemption from the engine.",
        &|m| m.preemptions.to_string(),
    );
    f.labelled(
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        &|m| {
            vec![
                ("finished_reason=\"length\"".into(), m.finished_length),
                ("finished_reason=\"stop\"".into(), 0),
                ("finished_reason=\"abort\"".into(), m.aborted),
            ]
        },
    );
    if spec_decoding {
        f.family(
            "vllm:spec_decode_num_drafts_total",
            "counter",
            "Number of spec decoding drafts.",
            &|m| m.spec_drafts.to_string(),
        );
        f.family(
            "vllm:spec_decode_num_draft_tokens_total",
            "counter",
            "Number of draft tokens.",
            &|m| m.spec_draft_tokens.to_string(),
        );
        f.family(
            "vllm:spec_decode_num_accepted_tokens_total",
            "counter",
            "Number of accepted tokens.",
            &|m| m.spec_accepted_tokens.to_string(),
        );
        f.labelled(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            "Accepted tokens per draft position.",
            &|m| {
                m.spec_accepted_per_pos
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (format!("position=\"{i}\""), n))
                    .collect()
            },
        );
    }
    f.histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        |m| &m.ttft,
    );
    f.histogram(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        |m| &m.itl,
    );
    f.histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        |m| &m.e2e,
    );
}

fn sglang(f: &mut Families, spec_decoding: bool) {
    estimated(f, "sglang:");
    f.family(
        "sglang:num_running_reqs",
        "gauge",
        "The number of running requests.",
        &|m| m.running.to_string(),
    );
    f.family(
        "sglang:num_queue_reqs",
        "gauge",
        "The number of requests in the waiting queue.",
        &|m| m.waiting.to_string(),
    );
    f.family("sglang:token_usage", "gauge", "The token usage.", &|m| {
        format!("{:?}", m.kv_usage)
    });
    f.family(
        "sglang:num_used_tokens",
        "gauge",
        "The number of used tokens.",
        &|m| m.kv_used_tokens.to_string(),
    );
    f.family(
        "sglang:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        &|m| m.prompt_tokens.to_string(),
    );
    f.family(
        "sglang:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        &|m| m.generation_tokens.to_string(),
    );
    f.family(
        "sglang:cached_tokens_total",
        "counter",
        "Number of cached prompt tokens.",
        &|m| m.prefix_hits.to_string(),
    );
    f.family(
        "sglang:cache_hit_rate",
        "gauge",
        "The prefix cache hit rate.",
        &|m| format!("{:?}", m.prefix_last_hit_rate),
    );
    f.family(
        "sglang:num_requests_total",
        "counter",
        "Number of requests processed.",
        &|m| (m.finished_length + m.aborted).to_string(),
    );
    f.family(
        "sglang:num_aborted_requests_total",
        "counter",
        "Number of requests aborted.",
        &|m| m.aborted.to_string(),
    );
    f.family(
        "sglang:num_retracted_requests_total",
        "counter",
        "Number of retracted (preempted) requests.",
        &|m| m.preemptions.to_string(),
    );
    if spec_decoding {
        f.family(
            "sglang:spec_accept_length",
            "gauge",
            "The average acceptance length of speculative decoding.",
            &|m| format!("{:?}", m.spec_accept_length),
        );
        f.family(
            "sglang:spec_accept_rate",
            "gauge",
            "The average acceptance rate of speculative decoding.",
            &|m| format!("{:?}", m.spec_accept_rate),
        );
    }
    f.histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        |m| &m.ttft,
    );
    f.histogram(
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        |m| &m.itl,
    );
    f.histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        |m| &m.e2e,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::new(ITL_BUCKETS);
        h.observe(0.005);
        h.observe_n(0.03, 2);
        let mut out = String::new();
        h.render(&mut out, "x", "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.01\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.05\"} 3\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 3\n"));
    }

    /// srv-sim stands in for vLLM and SGLang only as far as servbench reads it through the
    /// shared vocabulary: a family served under an engine's name no row has would be scraped by
    /// nobody (a renamed row, a typo), so every family it serves is a row of that engine (read,
    /// or known and not read: `vocab::NOT_READ`), or one of its own `srv_sim:` figures (schedule
    /// lateness, steps), which stand in for nothing.
    #[test]
    fn every_served_metric_is_a_row_of_the_shared_vocabulary() {
        use servbench::telemetry::vocab::{Engine, NOT_READ, rows};
        for (names, engine) in [
            (MetricNames::Vllm, Engine::Vllm),
            (MetricNames::Sglang, Engine::Sglang),
        ] {
            let text = render(&[Metrics::new(names), Metrics::new(names)], "m", true);
            let served: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .filter_map(|l| l.split(' ').next())
                .collect();
            assert!(served.len() > 10, "{names:?} served only {served:?}");
            let unread: Vec<&&str> = served
                .iter()
                .filter(|name| !name.starts_with("srv_sim:"))
                .filter(|name| !rows(&engine).any(|r| r.name == **name))
                .filter(|name| !NOT_READ.iter().any(|(e, n, _)| *e == engine && n == *name))
                .collect();
            assert!(
                unread.is_empty(),
                "srv-sim --metrics-names {names:?} serves families no {engine:?} row of \
                 shared/src/telemetry/vocab.rs (TABLE or NOT_READ) names: {unread:?}"
            );
        }
    }
}
