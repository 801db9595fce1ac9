//! srv-sim: a simulated LLM inference server. It speaks vLLM's OpenAI-compatible HTTP API and
//! behaves like an engine under load (continuous batching, FCFS queueing, a KV-cache budget,
//! chunked prefill, tensor/pipeline-parallel costs, speculative decoding) with every step's
//! duration taken from the hardware's roofline; or, in fixed-latency mode, it holds an exact
//! TTFT and inter-token latency per request as ground truth for load generators. Faults
//! (errors, crashes, stalls, resets, slow startup) can be injected for other tools' tests.
//!
//! Modules: [`args`] (the command line, read there only) and [`plan`] (what it asks for,
//! validated once), [`tokens`] (the tokenization rule and generated text), [`api`] (wire formats, one file per API),
//! [`engine`] (the step loop and the fixed schedule; [`abandoned`] what it does with a request
//! whose client went away; [`lora`] its adapter slots) on a [`clock`], [`cost`] (the step cost
//! model), [`metrics`] (Prometheus text), [`selfreport`] (vLLM's self-report flags; [`trtllm`]
//! TensorRT-LLM's), [`step`]
//! (the shapes those four share, below them all), [`prefix`] (the prefix cache), [`http`] (the
//! server), [`pd`] (one role of a disaggregated prefill/decode layout) and [`proxy`] (its front),
//! [`predict`] and [`calibrate`] (virtual-time runs of the modelled engine), [`search`] (the layout to launch), [`grid`] (the
//! step cost fitted to a measured step grid), [`nelder`] (the fits' minimiser).

pub mod abandoned;
pub mod api;
pub mod args;
pub mod calibrate;
pub mod clock;
pub mod cost;
pub mod engine;
pub mod frontend;
pub mod grid;
pub mod http;
pub mod lora;
pub mod metrics;
pub mod nelder;
pub mod pd;
pub mod plan;
pub mod predict;
pub mod prefix;
pub mod progress;
pub mod proxy;
pub mod request;
pub mod search;
pub mod selfreport;
pub mod sglang;
pub mod startup;
pub mod step;
pub mod steploop;
pub mod textapi;
pub mod tls;
pub mod tokens;
pub mod trtllm;

pub use args::Args;
pub use plan::Plan;

use cost::Roofline;
use engine::{Engine, EngineConfig, Timing};
use http::{App, AppConfig};
use plan::{Action, Command};
use servbench::cli::{self, Exit};
use servbench::presets;
use std::sync::Arc;
use std::time::{Duration, Instant};
use step::CostModel;

/// `--engine-panic-after N`: the cost model for N steps, then a panic on the engine thread.
struct PanicAfter {
    cost: Roofline,
    steps_left: std::cell::Cell<u64>,
}

impl CostModel for PanicAfter {
    fn step_time(&self, shape: &step::StepShape) -> Duration {
        let left = self.steps_left.get();
        if left == 0 {
            panic!("--engine-panic-after: the injected engine panic");
        }
        self.steps_left.set(left - 1);
        self.cost.step_time(shape)
    }

    fn step_counts(&self, shape: &step::StepShape) -> step::StepCounts {
        self.cost.step_counts(shape)
    }

    fn micro_batches(&self) -> u32 {
        self.cost.micro_batches()
    }
}

/// Runs srv-sim: `--dry-run` prints the cost model's figures; otherwise it serves until killed.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    let plan = match args.plan()? {
        Command::ListPresets => {
            let (models, hardware) = presets::preset_names();
            return print_text(&format!(
                "models: {}\nhardware: {}\n(srv-sim --print-card NAME prints one as a JSON card)\n",
                models.join(" "),
                hardware.join(" ")
            ));
        }
        Command::PrintCard(name) => {
            let card =
                presets::print_card(&name).map_err(|e| cli::usage(format!("--print-card: {e}")))?;
            return print_text(&format!("{card}\n"));
        }
        Command::Run(plan) => plan,
    };
    let roofline = plan.roofline()?;
    match &plan.action {
        Action::DryRun { context } => {
            let record = plan.dry_run(&roofline, *context);
            if let Some(why) = &record.fit_note {
                cli::warn(format!("does not fit: {why}"));
            }
            let mut out = servbench::jsonl::RecordWriter::stdout();
            out.emit(&record)?;
            Ok(Exit::Ok)
        }
        Action::Predict => predict::run(&plan.predict, plan.predict_engine(roofline)?),
        Action::Calibrate(path) => {
            let engine = plan.predict_engine(roofline)?;
            calibrate::run(&plan.calibration, path, engine)
        }
        Action::CalibrateFrom(path) => grid::run(
            &plan.calibration,
            path,
            &roofline,
            plan.engine.max_step_tokens,
        ),
        Action::Search => search::run(&plan),
        Action::Serve if plan.pd.role == Some(pd::PdRole::Proxy) => proxy::run(&plan),
        Action::Serve => serve(&plan, roofline),
    }
}

/// Serves until killed: one engine per data-parallel replica behind the HTTP server.
fn serve(plan: &Plan, roofline: Roofline) -> anyhow::Result<Exit> {
    let (engine, server) = (&plan.engine, &plan.server);
    if server.realtime {
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
    let served = server
        .served_model_name
        .clone()
        .unwrap_or_else(|| roofline.dep.model.name.clone());
    let kv_cache_tokens = plan.kv_budget(&roofline)?;
    let started = Instant::now();
    let trtllm = plan.trtllm.map(|o| {
        let kv = kv_cache_tokens.unwrap_or(u64::from(engine.max_model_len));
        let running = engine.max_running.map_or(0, u64::from);
        Arc::new(trtllm::Report::new(o, started, kv, running))
    });
    let engines: Vec<Engine> = (0..engine.replicas)
        .map(|replica| {
            let timing = match engine.fixed {
                Some(fixed) => Timing::Fixed {
                    ttft: fixed.ttft,
                    itl: fixed.itl,
                    tokens_per_chunk: fixed.tokens_per_chunk,
                },
                None => {
                    let cost: Box<dyn CostModel> = match server.faults.engine_panic_after {
                        Some(steps) => Box::new(PanicAfter {
                            cost: roofline.clone(),
                            steps_left: std::cell::Cell::new(steps),
                        }),
                        None => Box::new(roofline.clone()),
                    };
                    Timing::Modelled {
                        cost,
                        max_step_tokens: engine.max_step_tokens,
                        kv_cache_tokens: kv_cache_tokens.unwrap_or(u64::MAX),
                        spec: engine.spec,
                    }
                }
            };
            Engine::start(EngineConfig {
                timing,
                max_running: engine.max_running,
                seed: engine.seed ^ u64::from(replica),
                names: engine.metrics_names,
                tp_ranks: plan.model.layout.tp,
                report: plan
                    .self_report
                    .for_engine(sglang::Ranks {
                        engine: replica,
                        engines: engine.replicas,
                        tp: plan.model.layout.tp,
                    })
                    .with_trtllm(trtllm.clone()),
                abandoned: engine.abandoned,
                lora: engine
                    .lora
                    .as_ref()
                    .map(|l| lora::Slots::new(l.max_loras, l.swap)),
            })
        })
        .collect();
    let mut app = App::new(AppConfig {
        engines,
        limits: api::Limits {
            served_model: served,
            adapters: engine
                .lora
                .as_ref()
                .map_or_else(Vec::new, |l| l.adapters.clone()),
            max_model_len: engine.max_model_len,
            default_max_tokens: server.default_max_tokens,
            image_token_px: roofline.dep.model.image_token_px,
        },
        ready_at: started + server.startup,
        faults: server.faults.clone(),
        seed: engine.seed,
        chunk_cap: engine.fixed.map_or(u32::MAX, |f| f.tokens_per_chunk),
        kv_cache_tokens,
        spec_decoding: engine.spec.is_some(),
    });
    let idle = server.idle_timeout;
    app.body_timeout = idle;
    app.prompt_tokens_details = server.prompt_tokens_details;
    app.per_request_metrics = plan.self_report.enable_per_request_metrics;
    app.trtllm = trtllm;
    app.log_rids = plan.self_report.wants_rid();
    app.front_end = frontend::Gate::new(roofline.front_end);
    if engine.prefix_caching {
        let tokens = kv_cache_tokens.unwrap_or(prefix::UNBOUNDED_TOKENS);
        app.prefix = (0..engine.replicas)
            .map(|_| std::sync::Mutex::new(prefix::PrefixCache::new(tokens)))
            .collect();
    }
    app.pd = pd::Side {
        role: plan.pd.role,
        link: (plan.pd.role == Some(pd::PdRole::Decode))
            .then(|| pd::KvLink::new(roofline.dep.clone())),
        engine_id: format!("srv-sim-{}", app.limits.served_model),
        tp: plan.model.layout.tp,
        listening: std::sync::OnceLock::new(),
    };
    if let Some((cert, key)) = &server.tls {
        app.tls = Some(tls::acceptor(cert, key).map_err(cli::usage)?);
    }
    let scheme = if app.tls.is_some() { "https" } else { "http" };
    let logged = Arc::clone(&app.startup_logged);
    if !server.startup.is_zero() {
        logged.store(false, std::sync::atomic::Ordering::SeqCst);
    }
    let served_model = app.limits.served_model.clone();
    let app = Arc::new(app);

    let runtime = server.runtime()?;
    let addr = format!("{}:{}", server.host, server.port);
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| cli::failure(format!("cannot listen on {addr}: {e}")))?;
        let local = listener.local_addr()?;
        let _ = app.pd.listening.set((local.ip().to_string(), local.port()));
        // The one line launchers may read; readiness itself is GET /health.
        cli::info(format!("listening on {scheme}://{local}"));
        if !server.startup.is_zero() {
            startup::log_phases(
                started,
                startup::Facts {
                    startup: server.startup,
                    url: &format!("{scheme}://{local}"),
                    model: &served_model,
                    kv_cache_tokens: kv_cache_tokens.unwrap_or(u64::from(engine.max_model_len)),
                    max_model_len: engine.max_model_len,
                },
                plan.self_report.self_report_as.sglang().map(|w| {
                    let ranks = sglang::Ranks {
                        engine: 0,
                        engines: engine.replicas,
                        tp: plan.model.layout.tp,
                    };
                    (w, ranks)
                }),
                logged,
            );
        }
        http::serve(listener, app, idle).await?;
        Ok(Exit::Ok)
    })
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
