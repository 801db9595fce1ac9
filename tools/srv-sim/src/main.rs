use clap::Parser;
use servbench::cli::{self, parse_duration};
use srv_sim::Config;
use srv_sim::http::Faults;
use std::process::ExitCode;
use std::time::Duration;

const EXAMPLES: &str = "\
Examples:
  srv-sim --port 8000                                  # Llama-3.1-8B on one H100, modelled
  srv-sim --model llama-3.1-70b --hardware h200 --tp 4 --dry-run
  srv-sim --port 0 --ttft 200ms --itl 10ms             # exact latencies (ground truth)
  srv-sim --itl 0 & loadgen --url http://127.0.0.1:8000 -c 1..256 --max-tokens 256 | summarize
  srv-sim --fail-rate 0.05 --reset-rate 0.01 --stall-after 100

Tokens: a token is a whitespace-separated word; a prompt of N words is N tokens.
stderr says `srv-sim: listening on http://HOST:PORT` once bound; poll GET /health for readiness.";

/// A simulated LLM inference server (OpenAI-compatible, vLLM-shaped), timed by a roofline cost
/// model or by fixed latencies, with fault injection.
#[derive(Debug, Parser)]
#[command(name = "srv-sim", version, after_help = EXAMPLES)]
struct Args {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one; read it from the stderr line)
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Model name the API reports and accepts (default: the model preset's name)
    #[arg(long, value_name = "NAME")]
    served_model_name: Option<String>,
    /// Model preset: llama-3.1-8b, llama-3.1-70b, qwen3-32b, qwen3-30b-a3b, deepseek-v3, kimi-k2
    #[arg(
        long,
        value_name = "PRESET",
        default_value = "llama-3.1-8b",
        conflicts_with = "model_card"
    )]
    model: String,
    /// Model card JSON file (the fields of servbench::presets::ModelCard)
    #[arg(long, value_name = "FILE.json")]
    model_card: Option<String>,
    /// Hardware preset: h100, h200, a100-80g, l40s, rtx-pro-6000
    #[arg(
        long,
        value_name = "PRESET",
        default_value = "h100",
        conflicts_with = "hardware_file"
    )]
    hardware: String,
    /// Hardware card JSON file (the fields of servbench::presets::Hardware)
    #[arg(long, value_name = "FILE.json")]
    hardware_file: Option<String>,
    /// Tensor-parallel degree
    #[arg(long, default_value_t = 1)]
    tp: u32,
    /// Pipeline-parallel degree
    #[arg(long, default_value_t = 1)]
    pp: u32,
    /// GPUs in all: a multiple of tp x pp; the multiple runs data-parallel engine replicas
    #[arg(long, value_name = "N")]
    gpus: Option<u32>,
    /// Requests running at once per engine (default 256; unlimited in fixed-latency mode)
    #[arg(long, value_name = "N")]
    max_running_requests: Option<u32>,
    /// KV-cache capacity in tokens (default: what fits beside the weights at 90% of memory)
    #[arg(long, value_name = "N")]
    kv_cache_tokens: Option<u64>,
    /// Token budget of one engine step: decode tokens first, chunked prefill in the rest
    #[arg(long, value_name = "N", default_value_t = 8192)]
    max_prefill_tokens: u32,
    /// Longest prompt + completion accepted (longer requests get a 400)
    #[arg(long, value_name = "N", default_value_t = 131_072)]
    max_model_len: u32,
    /// max_tokens when a request gives none
    #[arg(long, value_name = "N", default_value_t = 16)]
    default_max_tokens: u32,
    /// Fixed scheduling overhead added to every engine step
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "100us")]
    step_overhead: Duration,
    /// /health answers 503 (and generation requests 503) for this long after start
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "0s")]
    startup: Duration,
    /// Fixed-latency mode: time to the first chunk, from arrival (bypasses the cost model)
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    ttft: Option<Duration>,
    /// Fixed-latency mode: gap between chunks; 0 streams as fast as possible
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    itl: Option<Duration>,
    /// Fixed-latency mode: tokens per SSE chunk
    #[arg(long, value_name = "K", default_value_t = 1)]
    tokens_per_chunk: u32,
    /// Speculative decoding: draft tokens verified per step
    #[arg(long, value_name = "K", default_value_t = 0)]
    spec_tokens: u32,
    /// Speculative decoding: probability each draft token is accepted (the chain stops at the first rejection)
    #[arg(long, value_name = "A", default_value_t = 0.7)]
    spec_accept: f64,
    /// Probability a generation request is answered HTTP 500 or 503 at once
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    fail_rate: f64,
    /// After N generation requests, the next one crashes the process halfway through its stream
    #[arg(long, value_name = "N")]
    crash_after: Option<u64>,
    /// After N generation requests, every later one stops sending halfway and keeps the connection open
    #[arg(long, value_name = "N")]
    stall_after: Option<u64>,
    /// Probability a generation request's connection is reset (TCP RST) halfway through
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    reset_rate: f64,
    /// Seed for generated text, faults and speculative acceptance
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Async runtime threads (1: a single-threaded runtime, best on one pinned core)
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
    /// Run under SCHED_FIFO (needs root or CAP_SYS_NICE) so timing holds on a busy machine
    #[arg(long)]
    realtime: bool,
    /// Print the cost model's figures as one JSON line and exit
    #[arg(long)]
    dry_run: bool,
    /// Context length (tokens) for --dry-run's decode figures
    #[arg(long, value_name = "N", default_value_t = 1024)]
    dry_run_context: u64,
    /// Add a label to the --dry-run record (repeatable): --label layout=tp4
    #[arg(long = "label", value_name = "K=V", value_parser = servbench::cli::parse_label)]
    labels: Vec<(String, String)>,
}

fn main() -> ExitCode {
    cli::main("srv-sim", || {
        let Some(a) = cli::parse_args::<Args>()? else {
            return Ok(cli::Exit::Ok);
        };
        srv_sim::run(Config {
            host: a.host,
            port: a.port,
            served_model_name: a.served_model_name,
            model: a.model_card.unwrap_or(a.model),
            hardware: a.hardware_file.unwrap_or(a.hardware),
            tp: a.tp,
            pp: a.pp,
            gpus: a.gpus,
            max_running_requests: a.max_running_requests,
            kv_cache_tokens: a.kv_cache_tokens,
            max_prefill_tokens: a.max_prefill_tokens,
            max_model_len: a.max_model_len,
            default_max_tokens: a.default_max_tokens,
            step_overhead: a.step_overhead,
            startup: a.startup,
            ttft: a.ttft,
            itl: a.itl,
            tokens_per_chunk: a.tokens_per_chunk,
            spec_tokens: a.spec_tokens,
            spec_accept: a.spec_accept,
            faults: Faults {
                fail_rate: a.fail_rate,
                crash_after: a.crash_after,
                stall_after: a.stall_after,
                reset_rate: a.reset_rate,
            },
            seed: a.seed,
            threads: a.threads,
            realtime: a.realtime,
            dry_run: a.dry_run,
            dry_run_context: a.dry_run_context,
            labels: a.labels.into_iter().collect(),
        })
    })
}
