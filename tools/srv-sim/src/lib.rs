//! srv-sim: a simulated LLM inference server. It speaks vLLM's OpenAI-compatible HTTP API and
//! behaves like an engine under load (continuous batching, FCFS queueing, a KV-cache budget,
//! chunked prefill, tensor/pipeline-parallel costs, speculative decoding) with every step's
//! duration taken from the hardware's roofline; or, in fixed-latency mode, it holds an exact
//! TTFT and inter-token latency per request as ground truth for load generators. Faults
//! (errors, crashes, stalls, resets, slow startup) can be injected for other tools' tests.
//!
//! Modules: [`tokens`] (the tokenization rule and generated text), [`api`] (wire format),
//! [`engine`] (the step loop and the fixed schedule), [`cost`] (the step cost model),
//! [`metrics`] (Prometheus text), [`http`] (the server).

pub mod api;
pub mod cost;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod tokens;

use anyhow::Context as _;
use cost::Roofline;
use engine::{Engine, EngineConfig, Spec, Timing};
use http::{App, Faults};
use servbench::cli::{self, Exit};
use servbench::presets::{self, Layout};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything srv-sim is told on its command line.
#[derive(Debug, Clone)]
pub struct Config {
    pub host: String,
    pub port: u16,
    pub served_model_name: Option<String>,
    /// A model preset name or a JSON model card path.
    pub model: String,
    /// A hardware preset name or a JSON hardware card path.
    pub hardware: String,
    pub tp: u32,
    pub pp: u32,
    pub gpus: Option<u32>,
    pub max_running_requests: Option<u32>,
    pub kv_cache_tokens: Option<u64>,
    pub max_prefill_tokens: u32,
    pub max_model_len: u32,
    pub default_max_tokens: u32,
    pub step_overhead: Duration,
    pub startup: Duration,
    pub ttft: Option<Duration>,
    pub itl: Option<Duration>,
    pub tokens_per_chunk: u32,
    pub spec_tokens: u32,
    pub spec_accept: f64,
    pub faults: Faults,
    pub seed: u64,
    pub threads: usize,
    /// Run srv-sim's threads under SCHED_FIFO so deadlines hold on a busy machine.
    pub realtime: bool,
    pub dry_run: bool,
    /// Context length `--dry-run` computes its decode figures at.
    pub dry_run_context: u64,
    /// Labels of the --dry-run record.
    pub labels: servbench::record::Labels,
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
        if self.spec_tokens > 0 && self.fixed_latency() {
            return Err(cli::usage(
                "--spec-tokens applies to the modelled engine; in fixed-latency mode use --tokens-per-chunk",
            ));
        }
        Ok(())
    }

    /// The roofline for the chosen model, hardware and layout.
    pub fn roofline(&self) -> anyhow::Result<Roofline> {
        Ok(Roofline {
            model: presets::load_model(&self.model)
                .map_err(|e| cli::usage(format!("--model: {e}")))?,
            hardware: presets::load_hardware(&self.hardware)
                .map_err(|e| cli::usage(format!("--hardware: {e}")))?,
            layout: Layout {
                tp: self.tp,
                pp: self.pp,
            },
            step_overhead: self.step_overhead,
        })
    }

    fn replicas(&self) -> u32 {
        self.gpus.map_or(1, |g| g / (self.tp * self.pp))
    }
}

/// Runs srv-sim: `--dry-run` prints the cost model's figures; otherwise it serves until killed.
pub fn run(config: Config) -> anyhow::Result<Exit> {
    config.check()?;
    let roofline = config.roofline()?;
    if config.dry_run {
        let plan = roofline.plan(config.dry_run_context);
        let mut fields = serde_json::to_value(&plan)?;
        if let Some(obj) = fields.as_object_mut() {
            obj.insert("data_parallel".into(), config.replicas().into());
            obj.insert("max_model_len".into(), config.max_model_len.into());
            if config.spec_tokens > 0 {
                // One stream with speculative decoding: each step verifies 1 + K tokens and
                // emits 1 + accepted on average.
                let spec = Spec {
                    tokens: config.spec_tokens,
                    accept: config.spec_accept,
                };
                let mut shape = Roofline::decode_shape(1, config.dry_run_context);
                shape.work.prefill_tokens = config.spec_tokens;
                let step_s = roofline.step_s(&shape);
                obj.insert(
                    "spec_tokens_per_step".into(),
                    spec.mean_tokens_per_step().into(),
                );
                obj.insert(
                    "spec_single_stream_tok_s".into(),
                    (spec.mean_tokens_per_step() / step_s).into(),
                );
            }
        }
        // Shaped like a record (kind first, then v and ts) so other tools pass it through.
        let body = fields.to_string();
        let labels = serde_json::to_string(&config.labels)?;
        let line = format!(
            "{{\"kind\":\"sim_plan\",\"v\":{},\"ts\":\"{}\",\"labels\":{labels},{}",
            servbench::record::SCHEMA_VERSION,
            servbench::record::now_ts(),
            &body[1..]
        );
        let mut out = servbench::jsonl::RecordWriter::stdout();
        out.write_raw(&line)?;
        return Ok(Exit::Ok);
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
    let served = config
        .served_model_name
        .clone()
        .unwrap_or_else(|| roofline.model.name.clone());
    let spec = (config.spec_tokens > 0).then_some(Spec {
        tokens: config.spec_tokens,
        accept: config.spec_accept,
    });
    let kv_cache_tokens = if config.fixed_latency() {
        config.kv_cache_tokens
    } else {
        Some(match config.kv_cache_tokens {
            Some(n) => n,
            None => roofline.kv_capacity_tokens().ok_or_else(|| {
                cli::usage(format!(
                    "{} ({:.1} GB of weights) does not fit on {} x{} at tp={} pp={}: raise --tp or --pp, or give --kv-cache-tokens",
                    roofline.model.name,
                    roofline.model.weight_bytes_total() / 1e9,
                    roofline.hardware.name,
                    config.tp * config.pp,
                    config.tp,
                    config.pp
                ))
            })?,
        })
    };
    let engines: Vec<Engine> = (0..config.replicas())
        .map(|replica| {
            let timing = if config.fixed_latency() {
                Timing::Fixed {
                    ttft: config.ttft.unwrap_or_default(),
                    itl: config.itl.unwrap_or_default(),
                    tokens_per_chunk: config.tokens_per_chunk,
                }
            } else {
                Timing::Modelled {
                    cost: Box::new(roofline.clone()),
                    max_step_tokens: config.max_prefill_tokens,
                    kv_cache_tokens: kv_cache_tokens.unwrap_or(u64::MAX),
                    spec,
                }
            };
            let max_running = match config.max_running_requests {
                Some(n) => Some(n),
                None if config.fixed_latency() => None,
                None => Some(256),
            };
            Engine::start(EngineConfig {
                timing,
                max_running,
                seed: config.seed ^ u64::from(replica),
            })
        })
        .collect();
    let app = Arc::new(App::new(
        engines,
        api::Limits {
            served_model: served,
            max_model_len: config.max_model_len,
            default_max_tokens: config.default_max_tokens,
        },
        Instant::now() + config.startup,
        config.faults.clone(),
        config.seed,
        if config.fixed_latency() {
            config.tokens_per_chunk
        } else {
            u32::MAX
        },
        kv_cache_tokens,
        spec.is_some(),
    ));

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
        cli::info(format!("listening on http://{local}"));
        http::serve(listener, app).await?;
        Ok(Exit::Ok)
    })
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
