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
//! validated once in `plan/limits.rs`), `pacing.rs` (send times), `stop.rs` (the stop switch),
//! `cancel.rs` and `lora.rs` (which requests are abandoned, which adapter each names).

pub mod cancel;
pub mod client;
pub mod lora;
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
use servbench::load::LoadArgs;
use std::time::Duration;

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

fn parse_response_format(
    s: &str,
) -> Result<std::sync::Arc<servbench::load::schema::ResponseFormat>, String> {
    servbench::load::schema::ResponseFormat::read(s).map(std::sync::Arc::new)
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

    #[command(flatten)]
    pub load: LoadArgs,
    /// Step grid: for each -c batch and --input-len context, the engine's decode step time
    /// (one `step_cell` each), then each prompt's prefill alone (-c 1, one output token)
    #[arg(long, conflicts_with_all = ["rate", "ramp", "find_max"])]
    pub step_grid: bool,
    /// Before each point, this many requests (20) or this long (10s), not counted
    #[arg(long, value_parser = parse_warmup)]
    pub warmup: Option<Warmup>,

    /// Let the model stop before max_tokens (no ignore_eos/min_tokens)
    #[arg(long)]
    pub allow_eos: bool,
    /// Merged into every request body: a JSON object, or @FILE.json (loadgen's own fields win)
    #[arg(long, value_name = "JSON|@FILE", value_parser = client::body::ExtraBody::parse)]
    pub extra_body: Option<client::body::ExtraBody>,
    /// Sampling temperature of every request (default 0)
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Nucleus sampling top_p of every request
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Images in every chat request (--api chat): N synthetic PNGs of --image-size as data
    /// URLs, different in every request; the server counts their tokens (`prompt_tokens`)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub images: u32,
    /// Size of each --images image, WIDTHxHEIGHT in pixels
    #[arg(long, value_name = "WxH", default_value = "512x512", value_parser = client::image::ImageSize::parse)]
    pub image_size: client::image::ImageSize,
    /// Non-streaming requests: E2E and token counts only (no TTFT, ITL or TPOT)
    #[arg(long)]
    pub no_stream: bool,
    /// Prompts from a file (JSON lines with prompt or messages, or ShareGPT JSON), or `builtin`
    #[arg(long, conflicts_with_all = ["prefix_groups", "shared_prefix"])]
    pub prompts: Option<String>,
    /// Eval questions (JSON lines: prompt or messages, and answer) as the workload, at
    /// temperature 0 and cycled (each once without -n/--duration): each request record carries
    /// its verdict, each summary the accuracy
    #[arg(long, value_name = "FILE", conflicts_with_all = ["prompts", "input_len", "trace", "turns", "prefix_groups", "shared_prefix", "step_grid", "temperature", "top_p"])]
    pub eval: Option<String>,
    /// How an --eval answer is judged where its line says not (`match`)
    #[arg(long, value_enum, default_value = "number", requires = "eval")]
    pub eval_match: servbench::load::eval::Match,
    /// Request records carry each reply's text, one string per chunk (`output_pieces`); --eval
    /// records it always
    #[arg(long)]
    pub record_text: bool,
    /// A JSON schema every answer must follow: sent as `response_format` (json_schema, as vLLM
    /// and SGLang take it) and each whole answer checked against it; request records carry
    /// the verdict (`json`) and the text, summaries the validity rate (`json_validity`)
    #[arg(long, value_name = "FILE", value_parser = parse_response_format, conflicts_with = "step_grid")]
    pub response_format: Option<std::sync::Arc<servbench::load::schema::ResponseFormat>>,
    /// Seed of every random choice (prompts, arrivals); default: a fresh one per run (a rerun
    /// against a warm server must not find its prompts cached); recorded in summaries
    #[arg(long)]
    pub seed: Option<u64>,
    /// Cancel this share of the requests on purpose (0.25): the client disconnects from each
    /// --cancel-after it left; which ones follows --seed. Their records are `cancelled`, not
    /// failures, and the summary's latencies are the others'
    #[arg(long, value_name = "P", value_parser = cancel::Cancel::parse_rate, requires = "cancel_after", conflicts_with_all = ["turns", "step_grid"])]
    pub cancel_rate: Option<f64>,
    /// When a cancelled request is abandoned, after it left: 200ms, or 100ms..500ms (uniform)
    #[arg(long, value_name = "DUR", value_parser = servbench::load::Think::parse, requires = "cancel_rate")]
    pub cancel_after: Option<servbench::load::Think>,
    /// LoRA adapters the requests name as their `model`, as the server serves them
    /// (sql-lora,chat-lora): the summary breaks its figures down per adapter
    #[arg(long, value_name = "NAME,...", value_delimiter = ',', value_parser = lora::LoraMix::parse_name, conflicts_with_all = ["turns", "step_grid"])]
    pub lora: Vec<String>,
    /// How requests are spread over --lora's adapters (which, by --seed)
    #[arg(
        long,
        value_enum,
        value_name = "HOW",
        default_value_t,
        requires = "lora"
    )]
    pub lora_assignment: lora::Assignment,
    /// --lora-assignment zipf: adapter k (from 1) drawn with weight 1/k^S (default 1.0)
    #[arg(long, value_name = "S", value_parser = lora::LoraMix::parse_exponent, requires = "lora")]
    pub lora_zipf_exponent: Option<f64>,
    /// Do not ask for usage in every chunk (vLLM's continuous_usage_stats)
    #[arg(long)]
    pub no_usage_per_chunk: bool,

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
