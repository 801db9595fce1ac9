//! The command line, read here only: clap's [`Args`], validated once by [`Args::plan`] into the
//! immutable [`Plan`] the rest of srv-sim reads.

use crate::calibrate::CalibrateArgs;
use crate::engine::Spec;
use crate::http::Faults;
use crate::metrics::MetricNames;
use crate::pd::PdArgs;
use crate::plan::{Action, Command, EnginePlan, FixedLatency, ModelPlan, Plan, ServerPlan};
use crate::predict::PredictArgs;
use crate::search::SearchArgs;
use crate::selfreport::{SelfReport, SelfReportAs};
use crate::trtllm;
use servbench::cli;
use servbench::presets::Layout;
use std::time::Duration;

const EXAMPLES: &str = "\
Examples:
  srv-sim --port 8000                                  # Llama-3.1-8B on one H100, modelled
  srv-sim --model llama-3.1-70b --hardware h200 --tp 4 --dry-run
  srv-sim --model qwen3-32b --hardware rtx-pro-6000 --tp 8 --dry-run --comm-from coll.jsonl
  srv-sim --print-card rtx-pro-6000 > my-box.json    # edit, then --hardware-file my-box.json
  srv-sim --port 0 --ttft 200ms --itl 10ms             # exact latencies (ground truth)
  srv-sim --itl 0 & loadgen --url http://127.0.0.1:8000 -c 1..256 --max-tokens 256 | summarize
  srv-sim --fail-rate 0.05 --reset-rate 0.01 --stall-after 100
  srv-sim --port 8100 --pd-role prefill --enable-per-request-metrics &
  srv-sim --port 8200 --pd-role decode --enable-per-request-metrics &
  srv-sim --port 8000 --pd-role proxy --prefill-url http://127.0.0.1:8100 --decode-url http://127.0.0.1:8200

Tokens: a token is a whitespace-separated word; a prompt of N words is N tokens.
stderr says `srv-sim: listening on http://HOST:PORT` (https:// with --ssl-certfile) once bound; poll GET /health for readiness.";

/// A simulated LLM inference server (OpenAI-compatible, vLLM-shaped), timed by a roofline cost
/// model or by fixed latencies, with fault injection.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "srv-sim", version, after_help = EXAMPLES)]
pub struct Args {
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
    /// Model preset: llama-3.1-8b, llama-3.1-70b, qwen3-32b, qwen2.5-vl-7b, qwen3-30b-a3b,
    /// deepseek-v3, kimi-k2, kimi-k2-nvfp4 (--list-presets)
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
    /// GEMM times per decode step measured by collbench (its `gemm_step` records of this
    /// model at --tp) instead of the roofline's weight reads and FLOPs; attention, allreduces
    /// and the step overhead stay modelled
    #[arg(long, value_name = "GEMM.jsonl")]
    pub gemm_from: Option<String>,
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
    /// Token budget of one engine step (of each micro-batch of a --pp round): decode tokens
    /// first, chunked prefill in the rest
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
    /// Keep decoding a running request whose client disconnected for N more engine steps (chunks
    /// with --ttft/--itl), or to its end (`end`), holding its slot and KV as an engine that
    /// notices late or never; 0 stops it at once, as vLLM does
    #[arg(long, value_name = "N|end", default_value = "0", value_parser = crate::engine::Abandoned::parse)]
    pub decode_abandoned: crate::engine::Abandoned,
    /// LoRA adapters served under these model names beside the model (sql-lora,chat-lora);
    /// any other name is a 404, as vLLM answers
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub lora: Vec<String>,
    /// Adapters one batch may hold, and adapter slots on the GPU (an LRU of loaded adapters),
    /// as vLLM's --max-loras
    #[arg(long, value_name = "N", default_value_t = crate::lora::DEFAULT_MAX_LORAS, value_parser = clap::value_parser!(u32).range(1..=1024), requires = "lora")]
    pub max_loras: u32,
    /// Time to load an adapter not in a slot, added to the step that needs it (TTFT with
    /// --ttft/--itl); default 4ms: a rank-16 adapter of an 8B model over PCIe Gen4
    #[arg(long, value_name = "DUR", value_parser = cli::parse_duration, requires = "lora")]
    pub lora_swap: Option<Duration>,
    /// Whose names /metrics uses: vllm (vllm:..., counters) or sglang (sglang:..., its buckets, spec figures as gauges); default: --self-report-as's
    #[arg(long, value_enum, value_name = "ENGINE")]
    pub metrics_names: Option<MetricNames>,
    #[command(flatten)]
    pub faults: Faults,
    #[command(flatten)]
    pub self_report: SelfReport,
    /// TensorRT-LLM's LLM-API options file, read for its self-report keys
    /// (`return_perf_metrics`, `perf_metrics_max_requests`, `enable_iter_perf_stats`,
    /// `print_iter_log`), with --self-report-as trtllm
    #[arg(long = "extra_llm_api_options", value_name = "FILE")]
    pub extra_llm_api_options: Option<String>,
    #[command(flatten)]
    pub predict: PredictArgs,
    #[command(flatten)]
    pub calibration: CalibrateArgs,
    #[command(flatten)]
    pub search: SearchArgs,
    #[command(flatten)]
    pub pd: PdArgs,
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

impl Args {
    /// Fixed-latency mode: `--ttft` or `--itl` given.
    fn fixed_latency(&self) -> bool {
        self.ttft.is_some() || self.itl.is_some()
    }

    /// The validated plan: `--list-presets` and `--print-card` first (they need nothing else),
    /// then every flag checked once, in the order srv-sim has always reported them.
    pub fn plan(self) -> anyhow::Result<Command> {
        if self.list_presets {
            return Ok(Command::ListPresets);
        }
        if let Some(name) = self.print_card {
            return Ok(Command::PrintCard(name));
        }
        self.check()?;
        let trtllm = match (self.self_report.self_report_as, &self.extra_llm_api_options) {
            (SelfReportAs::Vllm | SelfReportAs::Sglang | SelfReportAs::Sglang0510, _) => None,
            (SelfReportAs::Trtllm, None) => Some(trtllm::Options::default()),
            (SelfReportAs::Trtllm, Some(path)) => {
                Some(trtllm::Options::read(path).map_err(cli::usage)?)
            }
        };
        let fixed = self.fixed_latency().then(|| FixedLatency {
            ttft: self.ttft.unwrap_or_default(),
            itl: self.itl.unwrap_or_default(),
            tokens_per_chunk: self.tokens_per_chunk,
        });
        let pd = self.pd.plan()?;
        let max_running = self.max_running();
        let replicas = self.gpus.map_or(1, |g| g / (self.tp * self.pp));
        let action = if self.dry_run {
            Action::DryRun {
                context: self.dry_run_context,
            }
        } else if self.search.search {
            Action::Search
        } else if self.predict.predict {
            Action::Predict
        } else if let Some(path) = &self.calibration.calibrate {
            Action::Calibrate(path.clone())
        } else if let Some(path) = &self.calibration.calibrate_from {
            Action::CalibrateFrom(path.clone())
        } else {
            Action::Serve
        };
        Ok(Command::Run(Box::new(Plan {
            action,
            model: ModelPlan {
                model: self.model_card.unwrap_or(self.model),
                hardware: self.hardware_file.unwrap_or(self.hardware),
                layout: Layout {
                    tp: self.tp,
                    pp: self.pp,
                },
                comm_from: self.comm_from,
                gemm_from: self.gemm_from,
                tp_gpus: self.tp_gpus,
                step_overhead: self.step_overhead,
                calibration: self.calibration.calibration.clone(),
                calibrate_from: self.calibration.calibrate_from.clone(),
            },
            engine: EnginePlan {
                fixed,
                max_step_tokens: self.max_prefill_tokens,
                max_running,
                kv_cache_tokens: self.kv_cache_tokens,
                max_model_len: self.max_model_len,
                spec: (self.spec_tokens > 0).then_some(Spec {
                    tokens: self.spec_tokens,
                    accept: self.spec_accept,
                }),
                replicas,
                pp_max_micro_batch: self.pp_max_micro_batch,
                prefix_caching: !self.no_enable_prefix_caching,
                metrics_names: self
                    .metrics_names
                    .unwrap_or(self.self_report.self_report_as.metric_names()),
                seed: self.seed,
                abandoned: self.decode_abandoned,
                lora: (!self.lora.is_empty()).then(|| crate::plan::LoraPlan {
                    adapters: self.lora.clone(),
                    max_loras: self.max_loras,
                    swap: self.lora_swap.unwrap_or(crate::lora::DEFAULT_SWAP),
                }),
            },
            server: ServerPlan {
                host: self.host,
                port: self.port,
                tls: self.ssl_certfile.zip(self.ssl_keyfile),
                served_model_name: self.served_model_name,
                default_max_tokens: self.default_max_tokens,
                startup: self.startup,
                idle_timeout: (!self.idle_timeout.is_zero()).then_some(self.idle_timeout),
                threads: self.threads,
                realtime: self.realtime,
                prompt_tokens_details: self.enable_prompt_tokens_details,
                faults: self.faults,
            },
            self_report: self.self_report,
            trtllm,
            pd,
            predict: self.predict,
            calibration: self.calibration,
            labels: self.labels.into_iter().collect(),
        })))
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
        prob("--invalid-json-rate", self.faults.invalid_json_rate)?;
        prob("--spec-accept", self.spec_accept)?;
        if self.search.search {
            // The search sets the load itself: only the lengths and the SLO are its.
            let mut rest = self.predict.load.clone();
            (rest.input_len, rest.max_tokens, rest.slo) = (None, None, None);
            if let Some(flag) = rest.first_given() {
                return Err(cli::usage(format!(
                    "{flag}: --search finds each layout's load itself; it takes --input-len, --max-tokens and --slo"
                )));
            }
        } else if !self.predict.predict
            && let Some(flag) = self.predict.load.first_given()
        {
            return Err(cli::usage(format!(
                "{flag} is a load to predict: give --predict"
            )));
        }
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
        if self.gemm_from.is_some() && self.fixed_latency() {
            return Err(cli::usage(
                "--gemm-from replaces the cost model's GEMM times: drop --ttft/--itl",
            ));
        }
        if self.faults.engine_panic_after.is_some() && self.fixed_latency() {
            return Err(cli::usage(
                "--engine-panic-after injects a panic into the modelled engine: drop --ttft/--itl",
            ));
        }
        let r = &self.self_report;
        if r.self_report_as == SelfReportAs::Trtllm
            && (r.enable_per_request_metrics
                || r.enable_logging_iteration_details
                || r.enable_mfu_metrics
                || r.async_scheduling)
        {
            return Err(cli::usage(
                "--self-report-as trtllm takes TensorRT-LLM's self-report in --extra_llm_api_options FILE, not vLLM's --enable-* flags",
            ));
        }
        if self.extra_llm_api_options.is_some() && r.self_report_as != SelfReportAs::Trtllm {
            return Err(cli::usage(
                "--extra_llm_api_options is TensorRT-LLM's: give --self-report-as trtllm",
            ));
        }
        if let Some(why) = self.self_report.misspoken() {
            return Err(cli::usage(why));
        }
        let speaks = self.self_report.self_report_as;
        if let Some(names) = self.metrics_names
            && names != speaks.metric_names()
            && speaks.sglang().is_some()
        {
            return Err(cli::usage(format!(
                "--metrics-names {names:?} with --self-report-as sglang: SGLang's /metrics uses its own names (drop --metrics-names)"
            )));
        }
        if self.fixed_latency()
            && (self.self_report.decode_log_interval.is_some()
                || self.self_report.enable_request_time_stats_logging)
        {
            return Err(cli::usage(
                "--decode-log-interval and --enable-request-time-stats-logging log the modelled engine's steps and requests: drop --ttft/--itl",
            ));
        }
        if self.spec_tokens > 0 && self.fixed_latency() {
            return Err(cli::usage(
                "--spec-tokens applies to the modelled engine; in fixed-latency mode use --tokens-per-chunk",
            ));
        }
        Ok(())
    }

    /// Requests running at once per engine: --max-running-requests (default 256; unlimited
    /// in fixed-latency mode), capped at pp x --pp-max-micro-batch.
    fn max_running(&self) -> Option<u32> {
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
