//! The engine's counters, gauges and histograms, rendered as Prometheus text under vLLM's metric
//! names (`vllm:num_requests_running`, `vllm:time_to_first_token_seconds`, ...) so scrapers built
//! for vLLM read srv-sim unchanged. The engine thread writes them once per step; `/metrics` reads.

use std::fmt::Write as _;

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
    pub running: u64,
    pub waiting: u64,
    /// Fraction of the KV-cache token budget in use (0..1).
    pub kv_usage: f64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub finished_length: u64,
    pub aborted: u64,
    pub engine_steps: u64,
    pub spec_drafts: u64,
    pub spec_draft_tokens: u64,
    pub spec_accepted_tokens: u64,
    /// Prefix cache: prompt tokens looked up, tokens found cached, resets on request.
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub prefix_resets: u64,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    /// How late the engine published tokens against its own schedule (srv-sim's own metric).
    pub lateness: Histogram,
    pub max_lateness_s: f64,
}

/// Buckets for srv-sim's schedule-lateness histogram (seconds).
pub const LATENESS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0,
];

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            running: 0,
            waiting: 0,
            kv_usage: 0.0,
            prompt_tokens: 0,
            generation_tokens: 0,
            finished_length: 0,
            aborted: 0,
            engine_steps: 0,
            spec_drafts: 0,
            spec_draft_tokens: 0,
            spec_accepted_tokens: 0,
            prefix_queries: 0,
            prefix_hits: 0,
            prefix_resets: 0,
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
            lateness: Histogram::new(LATENESS_BUCKETS),
            max_lateness_s: 0.0,
        }
    }
}

impl Metrics {
    /// Records how late (seconds) a publication came against its scheduled time.
    pub fn late(&mut self, seconds: f64) {
        self.lateness.observe(seconds);
        if seconds > self.max_lateness_s {
            self.max_lateness_s = seconds;
        }
    }
}

/// Prometheus text exposition for every engine (data-parallel replicas are `engine="0"`,
/// `"1"`, ...), each metric family written once with one sample per engine.
pub fn render(engines: &[Metrics], model: &str, spec_decoding: bool) -> String {
    let model = model.replace('\\', "\\\\").replace('"', "\\\"");
    let labels: Vec<String> = (0..engines.len())
        .map(|i| format!("model_name=\"{model}\",engine=\"{i}\""))
        .collect();
    let mut out = String::with_capacity(8192 * engines.len());
    let family = |out: &mut String,
                  name: &str,
                  kind: &str,
                  help: &str,
                  value: &dyn Fn(&Metrics) -> String| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (m, l) in engines.iter().zip(&labels) {
            let _ = writeln!(out, "{name}{{{l}}} {}", value(m));
        }
    };
    family(
        &mut out,
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        &|m| m.running.to_string(),
    );
    family(
        &mut out,
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        &|m| m.waiting.to_string(),
    );
    family(
        &mut out,
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        &|m| format!("{:?}", m.kv_usage),
    );
    family(
        &mut out,
        "vllm:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        &|m| m.prompt_tokens.to_string(),
    );
    family(
        &mut out,
        "vllm:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        &|m| m.generation_tokens.to_string(),
    );
    family(
        &mut out,
        "vllm:prefix_cache_queries_total",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        &|m| m.prefix_queries.to_string(),
    );
    family(
        &mut out,
        "vllm:prefix_cache_hits_total",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
        &|m| m.prefix_hits.to_string(),
    );
    family(
        &mut out,
        "vllm:num_preemptions_total",
        "counter",
        "Cumulative number of preemption from the engine.",
        &|_| "0".into(),
    );
    let _ = writeln!(
        out,
        "# HELP vllm:request_success_total Count of successfully processed requests.\n\
         # TYPE vllm:request_success_total counter"
    );
    for (m, l) in engines.iter().zip(&labels) {
        let _ = writeln!(
            out,
            "vllm:request_success_total{{{l},finished_reason=\"length\"}} {}\n\
             vllm:request_success_total{{{l},finished_reason=\"stop\"}} 0\n\
             vllm:request_success_total{{{l},finished_reason=\"abort\"}} {}",
            m.finished_length, m.aborted
        );
    }
    if spec_decoding {
        family(
            &mut out,
            "vllm:spec_decode_num_drafts_total",
            "counter",
            "Number of spec decoding drafts.",
            &|m| m.spec_drafts.to_string(),
        );
        family(
            &mut out,
            "vllm:spec_decode_num_draft_tokens_total",
            "counter",
            "Number of draft tokens.",
            &|m| m.spec_draft_tokens.to_string(),
        );
        family(
            &mut out,
            "vllm:spec_decode_num_accepted_tokens_total",
            "counter",
            "Number of accepted tokens.",
            &|m| m.spec_accepted_tokens.to_string(),
        );
    }
    type Family = (&'static str, &'static str, fn(&Metrics) -> &Histogram);
    let histograms: [Family; 4] = [
        (
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            |m| &m.ttft,
        ),
        (
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            |m| &m.itl,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            |m| &m.e2e,
        ),
        (
            "srv_sim:schedule_lateness_seconds",
            "How late srv-sim's engine published tokens against its own schedule.",
            |m| &m.lateness,
        ),
    ];
    for (name, help, get) in histograms {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (m, l) in engines.iter().zip(&labels) {
            get(m).render(&mut out, name, l);
        }
    }
    family(
        &mut out,
        "srv_sim:schedule_lateness_max_seconds",
        "gauge",
        "Largest lateness of the engine against its own schedule.",
        &|m| format!("{:?}", m.max_lateness_s),
    );
    family(
        &mut out,
        "srv_sim:prefix_cache_resets_total",
        "counter",
        "Times the prefix cache was emptied (/reset_prefix_cache, /flush_cache).",
        &|m| m.prefix_resets.to_string(),
    );
    family(
        &mut out,
        "srv_sim:engine_steps_total",
        "counter",
        "Engine steps (schedule events in fixed-latency mode).",
        &|m| m.engine_steps.to_string(),
    );
    out
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
}
