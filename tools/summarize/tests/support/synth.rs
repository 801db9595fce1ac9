//! Synthetic records for tests, fixtures and the speed benchmark: a small closed-loop server
//! model (prefill, per-token decode that slows past a saturation point, optional collapse,
//! jitter, injected failures) run through the shared record types and the shared statistics,
//! so its `request` and `summary` lines are what loadgen writes for such a server.
//! Deterministic: the same spec gives the same bytes.
//!
//! Test-side code: the fixture generator (`examples/gen_fixtures.rs`) and the tests include
//! this file by path, so it is not part of the summarize library.

// Each includer uses a part of it.
#![allow(dead_code)]

use servbench::record::{
    BucketDist, CollRecord, CollRunRecord, Dist, ErrorClass, GaugeStats, GpuStats, KillRecord,
    KilledProcess, Labels, PointKey, RequestError, RequestRecord, ServerRecord, ServerStats,
    SpecStats, SummaryRecord, TokenSource, to_line_with_kind,
};
use servbench::stats::PointStats;

/// The timestamp every synthetic record carries (fixtures stay byte-stable).
pub const TS: &str = "2026-11-30T17:00:00.000Z";

/// splitmix64: tiny, deterministic, good enough for jitter.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// 1 +/- `rel` (uniform).
    pub fn jitter(&mut self, rel: f64) -> f64 {
        1.0 + rel * (2.0 * self.unit() - 1.0)
    }
}

/// How the simulated server behaves.
#[derive(Debug, Clone)]
pub struct ServerModel {
    /// Prefill time at low load, ms.
    pub ttft_ms: f64,
    /// Extra prefill time per concurrent request (queueing for the prefill slot), ms.
    pub ttft_per_conc_ms: f64,
    /// Decode time per token at low load, ms.
    pub itl_ms: f64,
    /// Past this concurrency the step time grows with the batch: throughput is flat.
    pub saturate_at: f64,
    /// Past this concurrency the step time grows faster still: throughput falls.
    pub collapse_at: Option<f64>,
    /// Relative jitter of every time.
    pub jitter: f64,
    pub tokens_per_chunk: u32,
    /// Every Nth request fails with a timeout.
    pub error_every: Option<u64>,
    /// Every Nth request is cancelled by the client (`--cancel-rate`) [`CANCEL_AFTER_MS`] after
    /// it left, with its first token.
    pub cancel_every: Option<u64>,
    /// Every Nth request waits 20x longer for its first token.
    pub ttft_tail_every: Option<u64>,
    /// Send lag of every request, ms.
    pub send_lag_ms: f64,
    /// Every Nth prompt is 3 tokens off its target.
    pub prompt_off_every: Option<u64>,
    /// Every Nth output stops at half its max_tokens.
    pub short_output_every: Option<u64>,
    /// Per-request overhead added to TTFT for outputs at or below this length, ms (to build a
    /// server where shorter outputs are slower).
    pub short_output_penalty: Option<(u32, f64)>,
    /// The server's own view loadgen would have scraped (summaries' `server` and `gpus`).
    pub server: Option<ServerView>,
}

/// What the simulated server's `/metrics` and GPUs say about each point.
#[derive(Debug, Clone)]
pub struct ServerView {
    /// Speculative acceptance (α, 3 draft tokens) at C=1, and what it loses per doubling.
    pub spec: (f64, f64),
    /// From this concurrency on the KV cache is full and the scheduler preempts.
    pub kv_full_from: Option<u32>,
    /// Mean GPU utilization at C=1, %; it climbs 10 points per doubling, up to 97.
    pub gpu_util_c1: f64,
    /// The engine's mean TTFT as a share of the client's.
    pub ttft_share: f64,
    /// The server counts this share more output tokens than the client.
    pub token_excess: f64,
    /// Unique prompts (loadgen expected no prefix hits) of which the server's prefix cache
    /// served this share: a rerun of the same seed.
    pub prefix_hits_unexpected: Option<f64>,
    /// From this concurrency on `/metrics` stops answering mid-point (`server.incomplete`).
    pub metrics_silent_from: Option<u32>,
    /// From this concurrency on loadgen dropped samples it did not believe: a `server.notes`
    /// line and one on GPU 1's (as loadgen writes them for NaN gauges and negative power).
    pub samples_dropped_from: Option<u32>,
}

impl Default for ServerView {
    fn default() -> Self {
        ServerView {
            spec: (0.7, 0.0),
            kv_full_from: None,
            gpu_util_c1: 70.0,
            ttft_share: 0.95,
            token_excess: 0.0,
            prefix_hits_unexpected: None,
            metrics_silent_from: None,
            samples_dropped_from: None,
        }
    }
}

impl ServerView {
    /// The `server` and `gpus` objects of a point at concurrency `conc` with client summary `s`.
    pub fn fill(&self, conc: u32, s: &mut SummaryRecord) {
        let doublings = f64::from(conc.max(1)).log2();
        let full = self.kv_full_from.is_some_and(|f| conc >= f);
        let dropped = self.samples_dropped_from.is_some_and(|f| conc >= f);
        let alpha = (self.spec.0 - self.spec.1 * doublings).clamp(0.0, 1.0);
        let accepted: f64 = (1..=3).map(|i| alpha.powi(i)).sum();
        let gauge = |mean: f64, max: f64| Some(GaugeStats { mean, max });
        let kv = if full {
            0.99
        } else {
            (0.05 + 0.1 * doublings).min(0.9)
        };
        s.server = Some(ServerStats {
            engine: "vllm".into(),
            scrapes: 12,
            gauge_samples: 10,
            running: gauge(f64::from(conc) * 0.95, f64::from(conc)),
            waiting: gauge(0.0, 0.0),
            kv_usage: gauge(kv * 0.8, kv),
            preemptions: Some(if full { u64::from(conc) * 2 } else { 0 }),
            spec: Some(SpecStats {
                chain_alpha: Some(alpha),
                draft_acceptance: Some(accepted / 3.0),
                mean_accepted_len: Some(1.0 + accepted),
                draft_len: Some(3.0),
                per_position: vec![alpha; 3],
                drafts: Some(s.output_tokens / 3),
                from: "counters".into(),
            }),
            prompt_tokens: Some(s.prompt_tokens),
            generation_tokens: Some(
                (s.output_tokens as f64 * (1.0 + self.token_excess)).round() as u64
            ),
            requests: Some(s.ok),
            aborted: Some(0),
            ttft_ms: s.ttft_ms.map(|d| BucketDist {
                n: d.n,
                mean: d.mean * self.ttft_share,
                p50: d.p50 * self.ttft_share,
                p90: d.p90 * self.ttft_share,
                p99: d.p99 * self.ttft_share,
            }),
            prefix_hit_rate: self.prefix_hits_unexpected,
            incomplete: self.metrics_silent_from.is_some_and(|f| conc >= f),
            notes: dropped
                .then(|| {
                    "vllm:num_requests_running: not a finite number (4 samples): left out".into()
                })
                .into_iter()
                .collect(),
            ..ServerStats::default()
        });
        if self.prefix_hits_unexpected.is_some() {
            s.workload.prefix_hit_rate_expected = Some(0.0);
            s.workload.seed = Some(42);
        }
        let util = (self.gpu_util_c1 + 10.0 * doublings).min(97.0);
        s.gpus = (0..2)
            .map(|index| GpuStats {
                index,
                name: Some("NVIDIA H100 80GB HBM3".into()),
                samples: 10,
                util_pct: gauge(util, (util + 3.0).min(100.0)),
                power_w: gauge(200.0 + 4.0 * util, 250.0 + 4.0 * util),
                notes: (dropped && index == 1)
                    .then(|| "power_w outside 0 to 100000 (3 samples, first -5): left out".into())
                    .into_iter()
                    .collect(),
                ..GpuStats::default()
            })
            .collect();
    }
}

impl Default for ServerModel {
    fn default() -> Self {
        ServerModel {
            ttft_ms: 40.0,
            ttft_per_conc_ms: 0.0,
            itl_ms: 4.0,
            saturate_at: 1e9,
            collapse_at: None,
            jitter: 0.1,
            tokens_per_chunk: 1,
            error_every: None,
            cancel_every: None,
            ttft_tail_every: None,
            send_lag_ms: 0.05,
            prompt_off_every: None,
            short_output_every: None,
            short_output_penalty: None,
            server: None,
        }
    }
}

impl ServerModel {
    fn step_ms(&self, conc: f64) -> f64 {
        let mut f = (conc / self.saturate_at).max(1.0);
        if let Some(c) = self.collapse_at
            && conc > c
        {
            f *= (conc / c).powf(1.5);
        }
        self.itl_ms * f
    }
}

/// A closed-loop sweep to simulate.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub labels: Labels,
    pub concurrency: Vec<u32>,
    /// Open-loop rates (req/s); when given, they replace the concurrency sweep.
    pub rates: Vec<f64>,
    pub input_len: u32,
    pub max_tokens: Vec<u32>,
    pub requests_per_point: u64,
    pub repeats: u32,
    pub seed: u64,
    /// Write `request` records (else only summaries).
    pub requests: bool,
    /// Write `summary` records.
    pub summaries: bool,
    /// Mark the last point's summary partial.
    pub partial_last: bool,
}

impl Default for Sweep {
    fn default() -> Self {
        Sweep {
            labels: Labels::from([
                ("engine".to_string(), "sim".to_string()),
                ("model".to_string(), "llama-3.1-8b".to_string()),
            ]),
            concurrency: vec![1, 2, 4, 8],
            rates: Vec::new(),
            input_len: 128,
            max_tokens: vec![32],
            requests_per_point: 40,
            repeats: 1,
            seed: 1,
            requests: true,
            summaries: true,
            partial_last: false,
        }
    }
}

/// One simulated request of a point (closed loop: `conc` slots back to back).
pub fn simulate_point(
    model: &ServerModel,
    point: &PointKey,
    labels: &Labels,
    n: u64,
    rng: &mut Rng,
) -> Vec<RequestRecord> {
    let conc = point.concurrency.unwrap_or(1).max(1);
    let max_tokens = point.max_tokens.unwrap_or(32).max(1);
    let input_len = point.input_len.unwrap_or(128);
    let mut slots = vec![0.0f64; conc as usize];
    // Open loop: sends on a fixed schedule; the load the server sees is Little's law's.
    let open = point.rate_rps.filter(|r| *r > 0.0);
    let load = match open {
        Some(r) => (r * (model.ttft_ms + f64::from(max_tokens) * model.itl_ms) / 1000.0).max(1.0),
        None => f64::from(conc),
    };
    let mut out = Vec::with_capacity(n as usize);
    for id in 0..n {
        let (slot, &free) = slots
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .unwrap_or((0, &0.0));
        let intended = open.map_or(free, |r| id as f64 * 1000.0 / r);
        let nth = |every: Option<u64>| every.is_some_and(|e| e > 0 && (id + 1) % e == 0);
        let mut ttft =
            (model.ttft_ms + model.ttft_per_conc_ms * f64::from(conc)) * rng.jitter(model.jitter);
        if let Some((len, extra)) = model.short_output_penalty
            && max_tokens <= len
        {
            ttft += extra;
        }
        if nth(model.ttft_tail_every) {
            ttft *= 20.0;
        }
        let prompt_tokens = if nth(model.prompt_off_every) {
            input_len + 3
        } else {
            input_len
        };
        let mut record = RequestRecord {
            v: 1,
            ts: TS.to_string(),
            labels: labels.clone(),
            point: point.clone(),
            id,
            intended_ms: round3(intended),
            send_lag_ms: round3(model.send_lag_ms * rng.jitter(0.5)),
            ttft_ms: None,
            ttft_reasoning_ms: None,
            ttfo_ms: None,
            reasoning_tokens: None,
            e2e_ms: None,
            tpot_ms: None,
            itl_ms: Vec::new(),
            chunks: 0,
            output_tokens: 0,
            output_tokens_source: Some(TokenSource::Usage),
            output_tokens_chunks: None,
            prompt_tokens: Some(prompt_tokens),
            prompt_tokens_target: Some(input_len),
            max_tokens: Some(max_tokens),
            inputs: None,
            images: None,
            error: None,
            cancelled_after_ms: None,
            adapter: None,
            session: None,
            turn: None,
            cached_tokens: None,
            server_timing: None,
            response_id: None,
            output_pieces: None,
            eval: None,
            json: None,
            extra: Default::default(),
        };
        if nth(model.error_every) {
            let e2e = 30_000.0;
            record.error = Some(RequestError {
                class: ErrorClass::Timeout,
                message: "no complete answer within 30s".into(),
                http_status: None,
            });
            record.e2e_ms = Some(e2e);
            slots[slot] = intended + e2e;
            out.push(record);
            continue;
        }
        if nth(model.cancel_every) {
            let end = ttft.max(CANCEL_AFTER_MS);
            record.cancelled_after_ms = Some(CANCEL_AFTER_MS);
            record.ttft_ms = Some(round3(ttft));
            record.e2e_ms = Some(round3(end));
            (record.chunks, record.output_tokens) = (1, 1);
            slots[slot] = intended + end;
            out.push(record);
            continue;
        }
        let tokens = if nth(model.short_output_every) {
            (max_tokens / 2).max(1)
        } else {
            max_tokens
        };
        let tpc = model.tokens_per_chunk.max(1);
        let chunks = tokens.div_ceil(tpc);
        let step = model.step_ms(load);
        let itl: Vec<f64> = (1..chunks)
            .map(|_| round3(step * f64::from(tpc) * rng.jitter(model.jitter)))
            .collect();
        let ttft = round3(ttft);
        let e2e = round3(ttft + itl.iter().sum::<f64>());
        record.ttft_ms = Some(ttft);
        record.e2e_ms = Some(e2e);
        record.tpot_ms = (tokens > 1).then(|| round3((e2e - ttft) / f64::from(tokens - 1)));
        record.itl_ms = itl;
        record.chunks = chunks;
        record.output_tokens = tokens;
        slots[slot] = intended + e2e;
        out.push(record);
    }
    out
}

/// When a cancelled request (`ServerModel::cancel_every`) is abandoned, ms after it left.
pub const CANCEL_AFTER_MS: f64 = 60.0;

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The lines (requests, then the point's summary) of a whole sweep.
pub fn sweep_lines(sweep: &Sweep, model: &ServerModel) -> Vec<String> {
    let mut rng = Rng::new(sweep.seed);
    let mut lines = Vec::new();
    let mut index = 0;
    let loads: Vec<(Option<u32>, Option<f64>)> = if sweep.rates.is_empty() {
        sweep.concurrency.iter().map(|&c| (Some(c), None)).collect()
    } else {
        sweep.rates.iter().map(|&r| (None, Some(r))).collect()
    };
    let total = sweep.max_tokens.len() * loads.len() * sweep.repeats as usize;
    let mut done = 0;
    for &max_tokens in &sweep.max_tokens {
        for &(concurrency, rate_rps) in &loads {
            for repeat in 0..sweep.repeats {
                done += 1;
                let point = PointKey {
                    index,
                    concurrency,
                    rate_rps,
                    input_len: Some(sweep.input_len),
                    max_tokens: Some(max_tokens),
                    repeat,
                    trace_speed: None,
                    images: None,
                };
                index += 1;
                let reqs = simulate_point(
                    model,
                    &point,
                    &sweep.labels,
                    sweep.requests_per_point,
                    &mut rng,
                );
                let mut stats = PointStats::new();
                for r in &reqs {
                    stats.add_request(r, None);
                    if sweep.requests {
                        lines.push(to_line_with_kind(r).expect("records serialize"));
                    }
                }
                if sweep.summaries {
                    let partial = sweep.partial_last && done == total;
                    let mut s = stats.to_summary(point, sweep.labels.clone(), partial, None);
                    s.ts = TS.to_string();
                    if let Some(view) = &model.server {
                        view.fill(concurrency.unwrap_or(1), &mut s);
                    }
                    if let Some(every) = model.cancel_every {
                        s.workload.cancel_rate = Some(1.0 / every as f64);
                        s.workload.cancel_after = Some(format!("{CANCEL_AFTER_MS}ms"));
                    }
                    lines.push(to_line_with_kind(&s).expect("records serialize"));
                }
            }
        }
    }
    lines
}

/// nccl-tests style allreduce records over `ranks` ranks, sizes 8 B .. `max_bytes` (x4),
/// with a link of `link_gbps` and latency `alpha_us`.
pub fn coll_lines(
    labels: &Labels,
    ranks: u32,
    max_bytes: u64,
    link_gbps: f64,
    alpha_us: f64,
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut bytes = 8u64;
    let factor = 2.0 * f64::from(ranks - 1) / f64::from(ranks);
    let mut busbw_sum = 0.0;
    let mut sizes = 0;
    while bytes <= max_bytes {
        // t = alpha + factor * S / B  (ring model)
        let t_us = alpha_us + factor * bytes as f64 / (link_gbps * 1e3);
        let algbw = bytes as f64 / (t_us * 1e3);
        let busbw = algbw * factor;
        busbw_sum += busbw;
        sizes += 1;
        let rec = CollRecord {
            v: 1,
            ts: TS.to_string(),
            labels: labels.clone(),
            op: "allreduce".into(),
            backend: "tcp".into(),
            algo: "ring".into(),
            ranks,
            hosts: 1,
            bytes,
            count: bytes / 4,
            dtype: "float".into(),
            redop: "sum".into(),
            mode: "latency".into(),
            time_us: Dist {
                n: 20,
                mean: round3(t_us),
                stddev: round3(t_us * 0.02),
                min: round3(t_us * 0.97),
                p50: round3(t_us),
                p90: round3(t_us * 1.02),
                p95: round3(t_us * 1.03),
                p99: round3(t_us * 1.05),
                p999: round3(t_us * 1.05),
                max: round3(t_us * 1.05),
            },
            algbw_gbps: round3(algbw),
            busbw_gbps: round3(busbw),
            wrong: 0,
            checked: true,
            iters: 20,
            warmup: 5,
            root: None,
            lost_core_waits: None,
            extra: Default::default(),
        };
        lines.push(to_line_with_kind(&rec).expect("records serialize"));
        bytes *= 4;
    }
    let run = CollRunRecord {
        v: 1,
        ts: TS.to_string(),
        labels: labels.clone(),
        op: "allreduce".into(),
        backend: "tcp".into(),
        ranks,
        sizes,
        avg_busbw_gbps: round3(busbw_sum / f64::from(sizes)),
        wrong: 0,
        hosts: 1,
        error: None,
        extra: Default::default(),
    };
    lines.push(to_line_with_kind(&run).expect("records serialize"));
    lines
}

/// A `server` record and the `kill` record that ended it.
pub fn lifecycle_lines(labels: &Labels) -> Vec<String> {
    let server = ServerRecord {
        v: 1,
        ts: TS.to_string(),
        labels: labels.clone(),
        engine: "sim".into(),
        model: Some("llama-3.1-8b".into()),
        host: "localhost".into(),
        pid: 4242,
        pgid: 4242,
        start_ticks: 123_456,
        port: 8000,
        url: "http://127.0.0.1:8000".into(),
        command: "srv-sim --port 8000".into(),
        log: "/tmp/srv-sim-8000.log".into(),
        ready_s: 1.25,
        launch_id: Some("4242-1".into()),
        served_model: Some("llama-3.1-8b".into()),
        gpus: None,
        name: None,
        argv: Vec::new(),
        env: None,
        self_report: false,
        self_report_flags: Vec::new(),
        startup: None,
        killed: false,
        pd: None,
        extra: Default::default(),
    };
    let kill = KillRecord {
        v: 1,
        ts: TS.to_string(),
        labels: labels.clone(),
        target: "server pid 4242".into(),
        host: "localhost".into(),
        matched: vec![KilledProcess {
            pid: 4242,
            command: "srv-sim --port 8000".into(),
        }],
        signals: vec!["TERM".into()],
        survivors: Vec::new(),
        port: Some(8000),
        port_free: Some(true),
        gpu_used_before_bytes: None,
        gpu_used_after_bytes: None,
        gpu_released: None,
        gpu_warning: None,
        refused: None,
        dry_run: false,
        elapsed_s: 0.21,
        ok: true,
        error: None,
        extra: Default::default(),
    };
    vec![
        to_line_with_kind(&server).expect("records serialize"),
        to_line_with_kind(&kill).expect("records serialize"),
    ]
}
