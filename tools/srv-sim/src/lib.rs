//! srv-sim: a simulated LLM inference server. It speaks vLLM's OpenAI-compatible HTTP API and
//! behaves like an engine under load (continuous batching, FCFS queueing, a KV-cache budget,
//! chunked prefill, tensor/pipeline-parallel costs, speculative decoding) with every step's
//! duration taken from the hardware's roofline; or, in fixed-latency mode, it holds an exact
//! TTFT and inter-token latency per request as ground truth for load generators. Faults
//! (errors, crashes, stalls, resets, slow startup) can be injected for other tools' tests.
//!
//! Modules: [`tokens`] (the tokenization rule and generated text), [`api`] (wire format),
//! [`engine`] (the step loop and the fixed schedule), [`cost`] (the step cost model),
//! [`metrics`] (Prometheus text), [`prefix`] (the prefix cache), [`http`] (the server).

pub mod api;
pub mod calibrate;
pub mod clock;
pub mod cost;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod predict;
pub mod prefix;
pub mod progress;
pub mod selfreport;
pub mod tls;
pub mod tokens;

use anyhow::Context as _;
use cost::{PlanInputs, Roofline};
use engine::{CostModel, Engine, EngineConfig, Spec, Timing};
use http::{App, AppConfig, Faults};
use servbench::cli::{self, Exit};
use servbench::presets::{self, Comm, Deployment, Layout, MeasuredCurve};
use servbench::record::SimPlanRecord;
use std::sync::Arc;
use std::time::{Duration, Instant};

const EXAMPLES: &str = "\
Examples:
  srv-sim --port 8000                                  # Llama-3.1-8B on one H100, modelled
  srv-sim --model llama-3.1-70b --hardware h200 --tp 4 --dry-run
  srv-sim --model qwen3-32b --hardware rtx-pro-6000 --tp 8 --dry-run --comm-from coll.jsonl
  srv-sim --print-card rtx-pro-6000 > my-box.json    # edit, then --hardware-file my-box.json
  srv-sim --port 0 --ttft 200ms --itl 10ms             # exact latencies (ground truth)
  srv-sim --itl 0 & loadgen --url http://127.0.0.1:8000 -c 1..256 --max-tokens 256 | summarize
  srv-sim --fail-rate 0.05 --reset-rate 0.01 --stall-after 100

Tokens: a token is a whitespace-separated word; a prompt of N words is N tokens.
stderr says `srv-sim: listening on http://HOST:PORT` (https:// with --ssl-certfile) once bound; poll GET /health for readiness.";

/// A simulated LLM inference server (OpenAI-compatible, vLLM-shaped), timed by a roofline cost
/// model or by fixed latencies, with fault injection.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "srv-sim", version, after_help = EXAMPLES)]
pub struct Config {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one; read it from the stderr line)
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Serve HTTPS with this PEM certificate chain (vLLM's flag; needs --ssl-keyfile)
    #[arg(long, value_name = "FILE", requires = "ssl_keyfile")]
    pub ssl_certfile: Option<String>,
    /// The private key (PEM) of --ssl-certfile
    #[arg(long, value_name = "FILE", requires = "ssl_certfile")]
    pub ssl_keyfile: Option<String>,
    /// Model name the API reports and accepts (default: the model preset's name)
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,
    /// Model preset: llama-3.1-8b, llama-3.1-70b, qwen3-32b, qwen3-30b-a3b, deepseek-v3, kimi-k2,
    /// kimi-k2-nvfp4 (--list-presets)
    #[arg(
        long,
        value_name = "PRESET",
        default_value = "llama-3.1-8b",
        conflicts_with = "model_card"
    )]
    pub model: String,
    /// Model card JSON file (the fields of servbench::presets::ModelCard)
    #[arg(long, value_name = "FILE.json")]
    pub model_card: Option<String>,
    /// Hardware preset: h100, h200, a100-80g, l40s, rtx-pro-6000, rtx-pro-6000-switch
    /// (--list-presets)
    #[arg(
        long,
        value_name = "PRESET",
        default_value = "h100",
        conflicts_with = "hardware_file"
    )]
    pub hardware: String,
    /// Hardware card JSON file (the fields of servbench::presets::Hardware)
    #[arg(long, value_name = "FILE.json")]
    pub hardware_file: Option<String>,
    /// Tensor-parallel degree
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// Pipeline-parallel degree
    #[arg(long, default_value_t = 1)]
    pub pp: u32,
    /// Requests per pipeline micro-batch (SGLang's --pp-max-micro-batch-size): at most pp x N
    /// requests run at once per engine
    #[arg(long, value_name = "N")]
    pub pp_max_micro_batch: Option<u32>,
    /// Allreduce times measured by collbench (its `coll` records, at the --tp rank count)
    /// instead of the hardware card's topology model; or, in a file without allreduce records,
    /// srv-launch's `server` record whose host topology gives the TP group's links
    #[arg(long, value_name = "COLL.jsonl")]
    pub comm_from: Option<String>,
    /// With --comm-from's host topology: the GPUs of the TP group (default: the server
    /// record's --gpus when it has --tp of them, else the best-connected --tp GPUs)
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub tp_gpus: Vec<u32>,
    /// GPUs in all: a multiple of tp x pp; the multiple runs data-parallel engine replicas
    #[arg(long, value_name = "N")]
    pub gpus: Option<u32>,
    /// Requests running at once per engine (default 256; unlimited in fixed-latency mode)
    #[arg(long, value_name = "N")]
    pub max_running_requests: Option<u32>,
    /// KV-cache capacity in tokens (default: what fits beside the weights at 90% of memory)
    #[arg(long, value_name = "N")]
    pub kv_cache_tokens: Option<u64>,
    /// Token budget of one engine step: decode tokens first, chunked prefill in the rest
    #[arg(long, value_name = "N", default_value_t = 8192)]
    pub max_prefill_tokens: u32,
    /// Longest prompt + completion accepted (longer requests get a 400)
    #[arg(long, value_name = "N", default_value_t = 131_072)]
    pub max_model_len: u32,
    /// max_tokens when a request gives none
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub default_max_tokens: u32,
    /// Fixed scheduling overhead added to every engine step
    #[arg(long, value_name = "DUR", value_parser = cli::parse_duration, default_value = "100us")]
    pub step_overhead: Duration,
    /// /health answers 503 (and generation requests 503) for this long after start
    #[arg(long, value_name = "DUR", value_parser = cli::parse_duration, default_value = "0s")]
    pub startup: Duration,
    /// Fixed-latency mode: time to the first chunk, from arrival (bypasses the cost model)
    #[arg(long, value_name = "DUR", value_parser = cli::parse_duration)]
    pub ttft: Option<Duration>,
    /// Fixed-latency mode: gap between chunks; 0 streams as fast as possible
    #[arg(long, value_name = "DUR", value_parser = cli::parse_duration)]
    pub itl: Option<Duration>,
    /// Fixed-latency mode: tokens per SSE chunk
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub tokens_per_chunk: u32,
    /// Speculative decoding: draft tokens verified per step
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub spec_tokens: u32,
    /// Speculative decoding: probability each draft token is accepted (the chain stops at the first rejection)
    #[arg(long, value_name = "A", default_value_t = 0.7)]
    pub spec_accept: f64,
    /// Whose names /metrics uses: vllm (vllm:..., counters) or sglang (sglang:..., its buckets, spec figures as gauges)
    #[arg(long, value_enum, value_name = "ENGINE", default_value = "vllm")]
    pub metrics_names: metrics::MetricNames,
    #[command(flatten)]
    pub faults: Faults,
    #[command(flatten)]
    pub self_report: selfreport::SelfReport,
    #[command(flatten)]
    pub predict: predict::PredictArgs,
    #[command(flatten)]
    pub calibration: calibrate::CalibrateArgs,
    /// Turn prefix caching off (vLLM's spelling; on by default, as in vLLM)
    #[arg(long)]
    pub no_enable_prefix_caching: bool,
    /// Report each request's cached prompt tokens in `usage.prompt_tokens_details.cached_tokens`
    /// (vLLM's flag; off by default, as in vLLM)
    #[arg(long)]
    pub enable_prompt_tokens_details: bool,
    /// Seed for generated text, faults and speculative acceptance
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Async runtime threads (1: a single-threaded runtime, best on one pinned core), at most 1024
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub threads: usize,
    /// Close a connection that sends no complete request head for this long (idle between
    /// requests, or sending its headers slowly), or whose request body stalls this long; 0: never
    #[arg(long, value_name = "DUR", value_parser = cli::parse_duration, default_value = "60s")]
    pub idle_timeout: Duration,
    /// Run under SCHED_FIFO (needs root or CAP_SYS_NICE) so timing holds on a busy machine
    #[arg(long)]
    pub realtime: bool,
    /// Print the cost model's figures as one JSON line and exit
    #[arg(long)]
    pub dry_run: bool,
    /// Context length (tokens) for --dry-run's decode figures
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub dry_run_context: u64,
    /// Add a label to the --dry-run record (repeatable): --label layout=tp4
    #[arg(long = "label", value_name = "K=V", value_parser = cli::parse_label)]
    pub labels: Vec<(String, String)>,
    /// Print the names of the built-in model and hardware presets and exit
    #[arg(long)]
    pub list_presets: bool,
    /// Print a built-in model or hardware preset as the JSON card to start your own from, and exit
    #[arg(long, value_name = "PRESET")]
    pub print_card: Option<String>,
}

impl Config {
    /// Fixed-latency mode: `--ttft` or `--itl` given.
    pub fn fixed_latency(&self) -> bool {
        self.ttft.is_some() || self.itl.is_some()
    }

    fn check(&self) -> anyhow::Result<()> {
        let prob = |name: &str, p: f64| {
            if (0.0..=1.0).contains(&p) {
                Ok(())
            } else {
                Err(cli::usage(format!(
                    "{name} must be a probability in [0, 1], got {p}"
                )))
            }
        };
        prob("--fail-rate", self.faults.fail_rate)?;
        prob("--reset-rate", self.faults.reset_rate)?;
        prob("--spec-accept", self.spec_accept)?;
        if self.tp == 0 || self.pp == 0 {
            return Err(cli::usage("--tp and --pp must be at least 1"));
        }
        if let Some(g) = self.gpus
            && (g == 0 || g % (self.tp * self.pp) != 0)
        {
            return Err(cli::usage(format!(
                "--gpus {g} must be a multiple of --tp x --pp = {} (the multiple is data-parallel replicas)",
                self.tp * self.pp
            )));
        }
        if self.tokens_per_chunk == 0 {
            return Err(cli::usage("--tokens-per-chunk must be at least 1"));
        }
        if self.max_running_requests == Some(0) {
            return Err(cli::usage("--max-running-requests must be at least 1"));
        }
        if self.max_prefill_tokens == 0 {
            return Err(cli::usage("--max-prefill-tokens must be at least 1"));
        }
        if !(1..=1024).contains(&self.threads) {
            return Err(cli::usage(format!(
                "--threads {}: between 1 and 1024",
                self.threads
            )));
        }
        if self.pp_max_micro_batch == Some(0) {
            return Err(cli::usage("--pp-max-micro-batch must be at least 1"));
        }
        if self.pp_max_micro_batch.is_some() && self.pp == 1 {
            return Err(cli::usage(
                "--pp-max-micro-batch caps pipeline micro-batches: give --pp 2 or more",
            ));
        }
        if !self.tp_gpus.is_empty() && self.comm_from.is_none() {
            return Err(cli::usage(
                "--tp-gpus names the TP group's GPUs in --comm-from's host topology: give --comm-from SERVER.jsonl",
            ));
        }
        if self.comm_from.is_some() && self.tp == 1 {
            return Err(cli::usage(
                "--comm-from replaces the tensor-parallel allreduces: give --tp 2 or more",
            ));
        }
        if self.faults.engine_panic_after.is_some() && self.fixed_latency() {
            return Err(cli::usage(
                "--engine-panic-after injects a panic into the modelled engine: drop --ttft/--itl",
            ));
        }
        if self.spec_tokens > 0 && self.fixed_latency() {
            return Err(cli::usage(
                "--spec-tokens applies to the modelled engine; in fixed-latency mode use --tokens-per-chunk",
            ));
        }
        Ok(())
    }

    /// The roofline for the chosen model, hardware and layout.
    pub fn roofline(&self) -> anyhow::Result<Roofline> {
        let model = presets::load_model(self.model_card.as_deref().unwrap_or(&self.model))
            .map_err(|e| cli::usage(format!("--model: {e}")))?;
        let hw = presets::load_hardware(self.hardware_file.as_deref().unwrap_or(&self.hardware))
            .map_err(|e| cli::usage(format!("--hardware: {e}")))?;
        let layout = Layout {
            tp: self.tp,
            pp: self.pp,
        };
        if layout.gpus() > hw.gpus {
            return Err(cli::usage(format!(
                "--tp {} x --pp {} needs {} GPUs in one node, and a {} node has {}: multi-node layouts are not modelled (use --gpus for data-parallel replicas)",
                self.tp,
                self.pp,
                layout.gpus(),
                hw.name,
                hw.gpus
            )));
        }
        let mut dep = Deployment::new(model, hw, layout);
        if let Some(path) = &self.comm_from
            && let Some((interconnect, comm)) =
                topology_comm(path, self.tp, &self.tp_gpus, &dep.hw.interconnect)?
        {
            dep.hw.interconnect = interconnect;
            dep.comm = comm;
        } else if let Some(path) = &self.comm_from {
            dep.comm = measured_comm(path, self.tp)?;
            // A decode step of the most requests running carries the largest allreduce that
            // decode pays (prefill chunks, larger still, are bandwidth-bound either way).
            let decode_tokens = self
                .max_running()
                .unwrap_or(self.max_prefill_tokens)
                .min(self.max_prefill_tokens);
            if let Comm::Measured { curve, .. } = &dep.comm
                && let Some(w) =
                    curve.extrapolation_warning(dep.model.allreduce_bytes(decode_tokens))
            {
                cli::warn(format!("--comm-from {path}: {w}"));
            }
        }
        let mut roofline = Roofline {
            dep,
            step_overhead: self.step_overhead,
            prefill_efficiency: 1.0,
        };
        if let Some(path) = &self.calibration.calibration {
            let card = calibrate::Calibration::load(path)?;
            if card.hardware != roofline.dep.hw.name {
                cli::warn(format!(
                    "--calibration {path} was fitted on {}, applied here to {}",
                    card.hardware, roofline.dep.hw.name
                ));
            }
            card.apply(&mut roofline);
        }
        Ok(roofline)
    }

    /// The KV-cache budget in tokens: --kv-cache-tokens, else what fits beside the weights
    /// (fixed-latency mode: none unless given).
    fn kv_budget(&self, roofline: &Roofline) -> anyhow::Result<Option<u64>> {
        if self.fixed_latency() {
            return Ok(self.kv_cache_tokens);
        }
        Ok(Some(match self.kv_cache_tokens {
            Some(n) => n,
            None => roofline.kv_capacity_tokens().ok_or_else(|| {
                let why = roofline.fit_problem(self.max_model_len).unwrap_or_default();
                cli::usage(format!("{why}; or give --kv-cache-tokens"))
            })?,
        }))
    }

    fn replicas(&self) -> u32 {
        self.gpus.map_or(1, |g| g / (self.tp * self.pp))
    }

    /// Requests running at once per engine: --max-running-requests (default 256; unlimited
    /// in fixed-latency mode), capped at pp x --pp-max-micro-batch.
    pub fn max_running(&self) -> Option<u32> {
        let base = match self.max_running_requests {
            Some(n) => Some(n),
            None if self.fixed_latency() => None,
            None => Some(256),
        };
        match (base, self.pp_max_micro_batch) {
            (b, Some(m)) => Some(b.unwrap_or(u32::MAX).min(m.saturating_mul(self.pp))),
            (b, None) => b,
        }
    }
}

/// `--engine-panic-after N`: the cost model for N steps, then a panic on the engine thread.
struct PanicAfter {
    cost: Roofline,
    steps_left: std::cell::Cell<u64>,
}

impl CostModel for PanicAfter {
    fn step_time(&self, shape: &engine::StepShape) -> Duration {
        let left = self.steps_left.get();
        if left == 0 {
            panic!("--engine-panic-after: the injected engine panic");
        }
        self.steps_left.set(left - 1);
        self.cost.step_time(shape)
    }

    fn step_counts(&self, shape: &engine::StepShape) -> selfreport::StepCounts {
        self.cost.step_counts(shape)
    }
}

/// `--comm-from FILE` without allreduce records but with a host topology (srv-launch's
/// `server` record): the card's interconnect as the TP group's GPUs see it; `None` otherwise.
fn topology_comm(
    path: &str,
    tp: u32,
    tp_gpus: &[u32],
    card: &presets::Interconnect,
) -> anyhow::Result<Option<(presets::Interconnect, Comm)>> {
    let coll = presets::comm::coll_records_from(path)
        .map_err(|e| cli::usage(format!("--comm-from: {e}")))?;
    if coll
        .iter()
        .any(|c| c.op == servbench::record::CollOp::Allreduce)
    {
        return Ok(None);
    }
    let Some((host, server_gpus)) = servbench::host::topo::host_from_records(path)
        .map_err(|e| cli::usage(format!("--comm-from: {e}")))?
    else {
        return Ok(None);
    };
    let given = if !tp_gpus.is_empty() {
        tp_gpus.to_vec()
    } else if server_gpus.len() == tp as usize {
        server_gpus
    } else {
        Vec::new()
    };
    let group = servbench::host::topo::tp_group(&host, &given, tp)
        .map_err(|e| cli::usage(format!("--comm-from {path} --tp-gpus: {e}")))?;
    let (interconnect, across) = servbench::host::topo::interconnect_for(card, &host, &group);
    let list: Vec<String> = group.iter().map(u32::to_string).collect();
    let place = if across {
        "across sockets"
    } else {
        "one socket"
    };
    Ok(Some((
        interconnect,
        Comm::Topology {
            from: format!("{path} (GPUs {}, {place})", list.join(",")),
        },
    )))
}

/// `--comm-from FILE`: the allreduce curve collbench measured at `tp` ranks.
fn measured_comm(path: &str, tp: u32) -> anyhow::Result<Comm> {
    let coll = presets::comm::coll_records_from(path)
        .map_err(|e| cli::usage(format!("--comm-from: {e}")))?;
    let curve = MeasuredCurve::from_records(&coll, tp, true).ok_or_else(|| {
        let mut ranks: Vec<u32> = coll
            .iter()
            .filter(|c| c.op == servbench::record::CollOp::Allreduce)
            .map(|c| c.ranks)
            .collect();
        ranks.sort_unstable();
        ranks.dedup();
        let found = if ranks.is_empty() {
            "no allreduce records".to_string()
        } else {
            format!(
                "allreduce at {} rank(s) only",
                ranks
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        cli::usage(format!(
            "--comm-from {path}: {found}, and --tp {tp} needs allreduce measured at {tp} ranks (collbench -np {tp} --mode latency -b 1K -e 4M)"
        ))
    })?;
    if let Some(caveat) = curve.tcp_caveat() {
        cli::warn(format!("--comm-from {path}: {caveat}"));
    }
    Ok(Comm::Measured {
        curve,
        from: path.to_string(),
    })
}

/// Runs srv-sim: `--dry-run` prints the cost model's figures; otherwise it serves until killed.
pub fn run(config: Config) -> anyhow::Result<Exit> {
    if config.list_presets {
        let (models, hardware) = presets::preset_names();
        return print_text(&format!(
            "models: {}\nhardware: {}\n(srv-sim --print-card NAME prints one as a JSON card)\n",
            models.join(" "),
            hardware.join(" ")
        ));
    }
    if let Some(name) = &config.print_card {
        let card =
            presets::print_card(name).map_err(|e| cli::usage(format!("--print-card: {e}")))?;
        return print_text(&format!("{card}\n"));
    }
    config.check()?;
    let roofline = config.roofline()?;
    if config.dry_run {
        let plan = dry_run(&config, &roofline);
        if let Some(why) = &plan.fit_note {
            cli::warn(format!("does not fit: {why}"));
        }
        let mut out = servbench::jsonl::RecordWriter::stdout();
        out.emit(&plan)?;
        return Ok(Exit::Ok);
    }
    if config.predict.predict {
        return predict::run(&config.predict, config.predict_engine(roofline)?);
    }
    if let Some(path) = &config.calibration.calibrate {
        let engine = config.predict_engine(roofline)?;
        return calibrate::run(&config.calibration, path, engine);
    }

    if config.realtime {
        // Before any thread starts: the engine and runtime threads inherit the policy.
        if let Err(e) = realtime() {
            cli::warn(format!(
                "--realtime: cannot switch to SCHED_FIFO ({e}); deadlines may slip on a busy machine \
                 (needs root or CAP_SYS_NICE)"
            ));
        }
    }
    tokens::warm_up();
    // One descriptor per connection: take what the hard limit allows.
    servbench::rlimit::raise_nofile_limit();
    let served = config
        .served_model_name
        .clone()
        .unwrap_or_else(|| roofline.dep.model.name.clone());
    let spec = (config.spec_tokens > 0).then_some(Spec {
        tokens: config.spec_tokens,
        accept: config.spec_accept,
    });
    let kv_cache_tokens = config.kv_budget(&roofline)?;
    let engines: Vec<Engine> = (0..config.replicas())
        .map(|replica| {
            let timing = if config.fixed_latency() {
                Timing::Fixed {
                    ttft: config.ttft.unwrap_or_default(),
                    itl: config.itl.unwrap_or_default(),
                    tokens_per_chunk: config.tokens_per_chunk,
                }
            } else {
                let cost: Box<dyn CostModel> = match config.faults.engine_panic_after {
                    Some(steps) => Box::new(PanicAfter {
                        cost: roofline.clone(),
                        steps_left: std::cell::Cell::new(steps),
                    }),
                    None => Box::new(roofline.clone()),
                };
                Timing::Modelled {
                    cost,
                    max_step_tokens: config.max_prefill_tokens,
                    kv_cache_tokens: kv_cache_tokens.unwrap_or(u64::MAX),
                    spec,
                }
            };
            Engine::start(EngineConfig {
                timing,
                max_running: config.max_running(),
                seed: config.seed ^ u64::from(replica),
                names: config.metrics_names,
                report: config.self_report.for_engine(replica),
            })
        })
        .collect();
    let mut app = App::new(AppConfig {
        engines,
        limits: api::Limits {
            served_model: served,
            max_model_len: config.max_model_len,
            default_max_tokens: config.default_max_tokens,
        },
        ready_at: Instant::now() + config.startup,
        faults: config.faults.clone(),
        seed: config.seed,
        chunk_cap: if config.fixed_latency() {
            config.tokens_per_chunk
        } else {
            u32::MAX
        },
        kv_cache_tokens,
        spec_decoding: spec.is_some(),
    });
    let idle = (!config.idle_timeout.is_zero()).then_some(config.idle_timeout);
    app.body_timeout = idle;
    app.prompt_tokens_details = config.enable_prompt_tokens_details;
    app.per_request_metrics = config.self_report.enable_per_request_metrics;
    if !config.no_enable_prefix_caching {
        let tokens = kv_cache_tokens.unwrap_or(prefix::UNBOUNDED_TOKENS);
        app.prefix = (0..config.replicas())
            .map(|_| std::sync::Mutex::new(prefix::PrefixCache::new(tokens)))
            .collect();
    }
    if let (Some(cert), Some(key)) = (&config.ssl_certfile, &config.ssl_keyfile) {
        app.tls = Some(tls::acceptor(cert, key).map_err(cli::usage)?);
    }
    let scheme = if app.tls.is_some() { "https" } else { "http" };
    let app = Arc::new(app);

    let runtime = if config.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.threads)
            .enable_all()
            .build()
    }
    .context("start the async runtime")?;
    runtime.block_on(async move {
        let addr = format!("{}:{}", config.host, config.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| cli::failure(format!("cannot listen on {addr}: {e}")))?;
        let local = listener.local_addr()?;
        // The one line launchers may read; readiness itself is GET /health.
        cli::info(format!("listening on {scheme}://{local}"));
        http::serve(listener, app, idle).await?;
        Ok(Exit::Ok)
    })
}

/// The `sim_plan` record `--dry-run` writes: the cost model's figures for the layout.
fn dry_run(config: &Config, roofline: &Roofline) -> SimPlanRecord {
    let mut plan = roofline.plan(PlanInputs {
        context: config.dry_run_context,
        data_parallel: config.replicas(),
        max_model_len: config.max_model_len,
        max_running: config.max_running().unwrap_or(u32::MAX),
        pp_max_micro_batch: config.pp_max_micro_batch,
        labels: config.labels.iter().cloned().collect(),
    });
    if config.spec_tokens > 0 {
        // One stream with speculative decoding: each step verifies 1 + K tokens and emits
        // 1 + accepted on average.
        let spec = Spec {
            tokens: config.spec_tokens,
            accept: config.spec_accept,
        };
        let mut shape = Roofline::decode_shape(1, config.dry_run_context);
        shape.work.prefill_tokens = config.spec_tokens;
        let step_s = roofline.step_s(&shape);
        plan.spec_tokens_per_step = Some(spec.mean_tokens_per_step());
        plan.spec_single_stream_tok_s = Some(spec.mean_tokens_per_step() / step_s);
    }
    plan
}

/// Text for people on stdout (--list-presets, --print-card): not a record stream.
fn print_text(text: &str) -> anyhow::Result<Exit> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(servbench::jsonl::OutputError::from_io)?;
    Ok(Exit::Ok)
}

/// Puts the calling thread (and the threads it starts later) on SCHED_FIFO priority 20: timer
/// wake-ups then preempt ordinary work, so a loaded machine does not delay tokens. srv-sim's
/// threads sleep between deadlines, so this takes CPU only when there is work.
fn realtime() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 20 };
    // SAFETY: sched_setscheduler on this thread (pid 0) with a valid parameter struct.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
