//! loadgen: drives an OpenAI-compatible inference server with streaming requests and measures
//! what a user of it sees (TTFT, ITL, TPOT, E2E, throughput, goodput), as `request` and
//! `summary` records. The measuring is the point: chunks are timed as their bytes arrive,
//! open-loop latency counts from the intended send time, the client's own CPU cost is recorded.

//!
//! Layout: `client/` (one request over HTTP/1.1: the pool, TLS, the SSE scanner, the body),
//! `workload/` (what the requests are made of, behind one trait), `modes/` (sweep, ramp,
//! find-max), `run/` (the run and its points: the dispatcher, the request tasks, the
//! dead-server watch), `ranks/` (one rank of several), `telemetry/` (the server's metrics and
//! GPUs), `plan/` (the one place these flags are read: [`Args::plan`] into the run's `Plan`,
//! validated once in `plan/limits.rs`), `pacing.rs` (send times), `stop.rs` (the stop switch).

pub mod client;
pub mod modes;
pub mod pacing;
pub mod plan;
pub mod ranks;
pub mod run;
pub mod stop;
pub mod telemetry;
pub mod workload;

use clap::Parser;
pub use client::body::Api;
use servbench::cli::{CommonArgs, SshArgs};
use std::time::Duration;

/// A whole list in one flag value (`1,2,4` or `1..256`); an alias so clap takes it as one value.
pub type U32List = Vec<u32>;
/// A list of numbers in one flag value (`5,10,20`).
pub type F64List = Vec<f64>;

/// `--warmup`: a request count (`20`) or a time (`10s`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Warmup {
    Requests(u64),
    Time(Duration),
}

pub fn parse_warmup(s: &str) -> Result<Warmup, String> {
    if let Ok(n) = s.trim().parse::<u64>() {
        return Ok(Warmup::Requests(n));
    }
    servbench::cli::parse_duration(s).map(Warmup::Time)
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("expected 'Name: value', got '{s}'")),
    }
}

const AFTER_HELP: &str = "\
Examples:
  loadgen --url http://127.0.0.1:8000 -c 1..64 --input-len 1000 --max-tokens 256 -n 200
  srv-launch sim | loadgen -c 1,8 --prompts builtin | srv-kill | summarize
  loadgen --url http://gpu1:8000 -r 5,10,20 --arrival poisson --duration 60s --slo ttft_ms=500,tpot_ms=50
  loadgen --url http://gpu1:8000 --ramp -c 8 --input-len 3000 --max-tokens 512 --duration 30s
  loadgen --url http://gpu1:8000 --api chat --extra-body '{\"chat_template_kwargs\":{\"enable_thinking\":false}}' -c 8
  loadgen --url http://gpu1:8000 --prefix-groups 8 --prefix-len 2048 --input-len 2560 -c 1,8,32 --flush-cache --engine vllm
  loadgen --url https://gateway.example:443 --cacert ca.pem --no-stream -c 4
  loadgen --url http://gpu1:8000 -c 8 --turns 5 --think-time 2s --input-len 200 --max-tokens 100 --api chat
  loadgen --url http://gpu1:8000 --trace mooncake_trace.jsonl --trace-speed 2
  loadgen --url http://gpu1:8000 --find-max rate -r 4 --slo ttft_ms=500,tpot_ms=50 --duration 30s
  loadgen --url http://gpu1:8000 --step-grid -c 1,4,16 --input-len 128,1024 --max-tokens 64 -n 32 > grid.jsonl
  mpirun --host a,b,c -np 3 loadgen --coordinator a:29500 --url http://gpu1:8000 -c 256 | summarize

The target is --url or the `server` record on stdin; there is no default (a pipe that ends
without a server record means the launch failed upstream: exit 1, nothing sent).

Records (stdout, JSON lines): one `request` per finished request (--no-requests to omit),
one `summary` per sweep point, one `ramp` per --ramp, one `search` per --find-max, one `step_cell` per --step-grid cell. Progress goes to stderr (a terminal only).
Under mpirun or srun (or --rank/--world) each process takes its share of every point; rank 0
writes every rank's records and each point's merged summary.
Exit: 0 ok, 1 every request of a point failed or the server went down (partial summary
written), or stdin ended without a server record, 2 bad usage, 130 interrupted (partial summary written).";

/// Drive an OpenAI-compatible server with streaming requests and measure TTFT, ITL, TPOT and throughput.
#[derive(Debug, Clone, Parser)]
#[command(name = "loadgen", version, after_help = AFTER_HELP)]
pub struct Args {
    /// Server base URL (default: the `server` record on stdin; without either, loadgen refuses to run)
    #[arg(long)]
    pub url: Option<String>,
    /// API to load
    #[arg(long, value_enum, default_value = "completions")]
    pub api: Api,
    /// Model name (default: the first one /v1/models lists)
    #[arg(long)]
    pub model: Option<String>,
    /// Extra request header (repeatable), e.g. --header 'Authorization: Bearer KEY'
    #[arg(long = "header", value_name = "NAME: VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// API key sent as a bearer token (unless --header sets Authorization)
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// https: trust only the CA certificates in this PEM file (default: the system's roots)
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub cacert: Option<String>,
    /// https: do not verify the server's certificate (encrypted, but not authenticated)
    #[arg(long)]
    pub insecure: bool,
    /// The server's engine, for --flush-cache (default: the server record's engine)
    #[arg(long, value_enum, value_name = "ENGINE")]
    pub engine: Option<servbench::engines::EnginePreset>,

    /// Closed loop: requests in flight, a list or doubling range (1,4,16 or 1..256)
    #[arg(short = 'c', long, value_parser = servbench::cli::u32_list)]
    pub concurrency: Option<U32List>,
    /// Open loop: requests per second, a list (5,10,20)
    #[arg(short = 'r', long, value_parser = servbench::cli::f64_list, conflicts_with = "concurrency")]
    pub rate: Option<F64List>,
    /// Open-loop arrivals: poisson, constant or gamma:SHAPE
    #[arg(long, default_value = "poisson", value_parser = pacing::Arrival::parse)]
    pub arrival: pacing::Arrival,
    /// Open loop: at most this many requests in flight (waiting for a slot counts into latency)
    #[arg(long)]
    pub max_concurrency: Option<u32>,
    /// Double the concurrency from the first -c value until errors, saturation or an --slo stop it
    #[arg(long, conflicts_with = "rate")]
    pub ramp: bool,
    /// --ramp: stop when the error rate passes this fraction
    #[arg(long, default_value_t = 0.01)]
    pub max_error_rate: f64,
    /// --ramp: stop when output throughput gains less than this fraction over the previous level
    #[arg(long, default_value_t = 0.05)]
    pub min_gain: f64,
    /// --ramp: the highest concurrency tried
    #[arg(long, default_value_t = 16384)]
    pub ramp_max: u32,
    /// --ramp and --find-max with --slo: the share of requests that must meet the SLO
    #[arg(long, default_value_t = 0.9)]
    pub slo_attainment: f64,
    /// Search for the highest rate or concurrency meeting --slo (from the first -r/-c value)
    #[arg(
        long,
        value_enum,
        value_name = "rate|concurrency",
        conflicts_with = "ramp"
    )]
    pub find_max: Option<modes::search::Var>,
    /// Step grid: for each -c batch and --input-len context, the engine's decode step time
    /// (one `step_cell` each), then each prompt's prefill alone (-c 1, one output token)
    #[arg(long, conflicts_with_all = ["rate", "ramp", "find_max"])]
    pub step_grid: bool,
    /// --find-max: end when the first failing load is within this share above the passing one
    #[arg(long, default_value_t = 0.05)]
    pub find_max_precision: f64,
    /// --find-max: tries of one load at most, when its result is too close to the target to call
    #[arg(long, default_value_t = 3)]
    pub find_max_tries: u32,
    /// --find-max: the highest load tried (default: --ramp-max for concurrency, 10000 req/s)
    #[arg(long)]
    pub find_max_limit: Option<f64>,
    /// Requests per point (default: max(100, 4 x concurrency), or 10 s of an open-loop rate)
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Time per point instead of a request count (30s, 2m): sending stops then, in-flight requests finish
    #[arg(long, value_parser = servbench::cli::parse_duration, conflicts_with = "requests")]
    pub duration: Option<Duration>,
    /// Before each point, this many requests (20) or this long (10s), not counted
    #[arg(long, value_parser = parse_warmup)]
    pub warmup: Option<Warmup>,
    /// Run each point K times (summaries then give a confidence interval)
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,

    /// Prompt lengths in tokens as the server counts them, a list (1000,30000)
    #[arg(long, value_parser = servbench::cli::u32_list)]
    pub input_len: Option<U32List>,
    /// Output tokens per request, a list; forced with ignore_eos + min_tokens unless --allow-eos
    #[arg(long, value_parser = servbench::cli::u32_list)]
    pub max_tokens: Option<U32List>,
    /// Let the model stop before max_tokens (no ignore_eos/min_tokens)
    #[arg(long)]
    pub allow_eos: bool,
    /// Synthetic prompts share their first N tokens (prefix caching); otherwise each is unique
    #[arg(long, default_value_t = 0)]
    pub shared_prefix: u32,
    /// Prefix-cache workload: synthetic prompts in G groups, each group sharing its own prefix
    #[arg(long, value_name = "G", requires = "prefix_len", conflicts_with_all = ["prompts", "shared_prefix"])]
    pub prefix_groups: Option<u32>,
    /// Tokens of each group's prefix; the rest of --input-len is unique to each request
    #[arg(long, value_name = "P", requires = "prefix_groups")]
    pub prefix_len: Option<u32>,
    /// Empty the server's prefix cache before each point, through its engine's endpoint
    #[arg(long)]
    pub flush_cache: bool,
    /// Merged into every request body: a JSON object, or @FILE.json (loadgen's own fields win)
    #[arg(long, value_name = "JSON|@FILE", value_parser = client::body::ExtraBody::parse)]
    pub extra_body: Option<client::body::ExtraBody>,
    /// Sampling temperature of every request (default 0)
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Nucleus sampling top_p of every request
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Non-streaming requests: E2E and token counts only (no TTFT, ITL or TPOT)
    #[arg(long)]
    pub no_stream: bool,
    /// Prompts from a file (JSON lines with prompt or messages, or ShareGPT JSON), or `builtin`
    #[arg(long)]
    pub prompts: Option<String>,
    /// Conversations: turns per session, N or LO..HI (or `all` of a --prompts file's turns)
    #[arg(long, value_parser = workload::conversation::Turns::parse)]
    pub turns: Option<workload::conversation::Turns>,
    /// Conversations: pause between a reply and the next turn, e.g. 2s or 500ms..3s
    #[arg(long, default_value = "0s", value_parser = workload::conversation::Think::parse, requires = "turns")]
    pub think_time: workload::conversation::Think,
    /// Replay a trace: Mooncake-style JSON lines, or CSV with timestamp and lengths
    #[arg(long, value_name = "FILE")]
    pub trace: Option<String>,
    /// --trace: play this many times as fast as recorded, a list (0.5,1,2)
    #[arg(long, default_value = "1", value_parser = servbench::cli::f64_list, requires = "trace")]
    pub trace_speed: F64List,
    /// --trace: tokens per hash_ids block (Mooncake 512)
    #[arg(long, default_value_t = 512, requires = "trace")]
    pub trace_block: u32,
    /// Seed of every random choice (prompts, arrivals); default: a fresh one per run (a rerun
    /// against a warm server must not find its prompts cached); recorded in summaries
    #[arg(long)]
    pub seed: Option<u64>,
    /// Do not ask for usage in every chunk (vLLM's continuous_usage_stats)
    #[arg(long)]
    pub no_usage_per_chunk: bool,

    /// Goodput objectives: ttft_ms=500,tpot_ms=50 (also itl_ms, e2e_ms)
    #[arg(long, value_parser = servbench::stats::Slo::parse)]
    pub slo: Option<servbench::stats::Slo>,
    /// Per-request time limit
    #[arg(long, default_value = "600s", value_parser = servbench::cli::parse_positive_duration)]
    pub timeout: Duration,
    /// After Ctrl-C/SIGTERM, how long in-flight requests may finish
    #[arg(long, default_value = "5s", value_parser = servbench::cli::parse_duration)]
    pub grace: Duration,
    /// Leave out the per-request records
    #[arg(long)]
    pub no_requests: bool,
    /// Runtime worker threads, 1 to 1024 (default: available cores, at most 8)
    #[arg(long)]
    pub threads: Option<usize>,

    /// The server's Prometheus metrics, scraped during every point (default: the server URL's /metrics)
    #[arg(long, value_name = "URL", help_heading = "Server telemetry")]
    pub metrics_url: Option<String>,
    /// Do not scrape the server's metrics
    #[arg(
        long,
        conflicts_with = "metrics_url",
        help_heading = "Server telemetry"
    )]
    pub no_metrics: bool,
    /// How often metrics are scraped and GPUs sampled while a point runs
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = servbench::cli::parse_duration, help_heading = "Server telemetry")]
    pub scrape_interval: Duration,
    /// Sample GPUs on this host: localhost (through NVML, else nvidia-smi) or [user@]host[:port] (nvidia-smi over SSH) (default: the server record's host)
    #[arg(long, value_name = "HOST", help_heading = "Server telemetry")]
    pub gpu_host: Option<String>,
    /// nvidia-smi to run on the GPU host, where it is not on PATH (default: nvidia-smi; naming one also skips NVML here)
    #[arg(long, value_name = "PROGRAM", help_heading = "Server telemetry")]
    pub nvidia_smi: Option<String>,
    /// GPU indices to sample, e.g. 0,1 (default: the server record's gpus, else every GPU)
    #[arg(long, value_name = "LIST", help_heading = "Server telemetry")]
    pub gpus: Option<String>,
    /// Read the GPUs from a DCGM exporter's /metrics instead of nvidia-smi (e.g. http://gpu1:9400/metrics)
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "gpu_host",
        help_heading = "Server telemetry"
    )]
    pub gpu_metrics: Option<String>,
    /// No GPU telemetry
    #[arg(long, conflicts_with_all = ["gpu_host", "gpu_metrics"], help_heading = "Server telemetry")]
    pub no_gpu: bool,
    #[command(flatten)]
    pub ssh: SshArgs,

    #[command(flatten)]
    pub common: CommonArgs,

    #[command(flatten)]
    pub ranks: ranks::RankArgs,
}
