//! `srv-sim --predict`: the modelled engine run in virtual time under the load loadgen would
//! apply, writing loadgen's `request` and `summary` records labelled `source=predicted`, so
//! summarize tabulates a prediction and `--compare`s it with a measurement unchanged. The engine
//! is the server's own step loop ([`crate::engine::run_modelled`]) on a virtual clock
//! ([`load::VirtualClock`]); the statistics are shared's one implementation.

mod gap;
pub mod load;
mod modes;
mod pd;
mod trace;

use crate::cost::Roofline;
use crate::engine::{ModelledConfig, Spec, run_modelled};
use crate::metrics::Metrics;
use crate::prefix::PrefixCache;
use load::{PointLoad, Prompts, VirtualClock};
use servbench::cli::{self, Exit};
use servbench::jsonl::RecordWriter;
use servbench::load::search::Tally;
use servbench::load::{Budget, Load, LoadArgs};
use servbench::presets::PdLayout;
use servbench::record::{Labels, PointKey};
use servbench::stats::PointStats;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The label every predicted record carries (`source=predicted`), so a prediction and a
/// measurement read side by side stay apart.
pub const SOURCE_LABEL: &str = "source";
pub const PREDICTED: &str = "predicted";

/// `--predict` and the load it applies: loadgen's load flags, declared once in shared.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Predict a loadgen sweep in virtual time (--predict)")]
pub struct PredictArgs {
    /// Run the modelled engine in virtual time under the load below and write loadgen's
    /// request and summary records (labelled source=predicted) instead of serving
    #[arg(long)]
    pub predict: bool,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Write the summaries only, no request records
    #[arg(long, requires = "predict")]
    pub no_requests: bool,
    /// The modelled client's overhead: from a request's send to the engine's queue (HTTP,
    /// parsing); 0 puts a closed loop's next request into the very step that freed its slot
    #[arg(long, value_name = "DUR", value_parser = cli::parse_duration, default_value = "200us")]
    pub request_latency: Duration,
    /// The modelled client's time per finished stream: streams that end in the same step are
    /// taken one after another, this far apart (its record written, its next request sent)
    #[arg(long, value_name = "DUR", value_parser = cli::parse_duration, default_value = "100us")]
    pub client_gap: Duration,
    /// The client gap and request latency measured from a loadgen run (its closed-loop
    /// requests' server_timing: serve with --enable-per-request-metrics) instead of
    /// --client-gap and --request-latency
    #[arg(
        long,
        value_name = "RUN.jsonl",
        requires = "predict",
        conflicts_with_all = ["client_gap", "request_latency"]
    )]
    pub client_gap_from: Option<String>,
    /// Predict a disaggregated layout: x prefill and y decode engines of --tp x --pp each, on
    /// consecutive GPUs (prefill first, as srv-launch --pd splits them), with each request's KV
    /// transfer over the card's link between them and its TTFT split in server_timing
    #[arg(long, value_name = "xPyD", requires = "predict")]
    pub pd: Option<PdLayout>,
}

/// What `--predict` needs from the rest of srv-sim's configuration.
#[derive(Clone)]
pub struct Engine {
    pub roofline: Roofline,
    pub max_step_tokens: u32,
    pub kv_cache_tokens: u64,
    pub max_running: Option<u32>,
    pub spec: Option<Spec>,
    pub seed: u64,
    pub max_model_len: u32,
    pub prefix_caching: bool,
    pub model_name: String,
    pub labels: Labels,
    /// The modelled client (--request-latency, --client-gap).
    pub request_latency: Duration,
    pub client_gap: Duration,
    /// `--enable-logging-iteration-details`: the sweep's virtual steps on stderr, one line each
    /// in the server's (vLLM's) format, each point's from Iteration(0), so a prediction's steps
    /// can be laid beside a served run's log.
    pub log_steps: bool,
    /// `--pd`: the disaggregated layout, each member laid out as the roofline's deployment.
    pub pd: Option<PdLayout>,
}

impl crate::Plan {
    /// The engine `--predict` runs: the server's modelled engine, one replica.
    pub(crate) fn predict_engine(&self, roofline: Roofline) -> anyhow::Result<Engine> {
        if self.engine.fixed_latency() {
            return Err(cli::usage(
                "--predict runs the modelled engine: drop --ttft/--itl (fixed latencies need no prediction)",
            ));
        }
        if self.engine.replicas > 1 {
            return Err(cli::usage(
                "--predict models one engine replica: drop --gpus (data-parallel replicas are not predicted)",
            ));
        }
        let faults = &self.server.faults;
        if faults.fail_rate > 0.0
            || faults.reset_rate > 0.0
            || faults.crash_after.is_some()
            || faults.stall_after.is_some()
            || faults.engine_panic_after.is_some()
        {
            return Err(cli::usage(
                "--predict does not model injected faults: drop --fail-rate, --reset-rate, --crash-after, --stall-after and --engine-panic-after",
            ));
        }
        if let Some(pd) = self.predict.pd {
            let (per, hw) = (roofline.dep.layout.gpus(), &roofline.dep.hw);
            if pd.servers() * per > hw.gpus {
                return Err(cli::usage(format!(
                    "--pd {pd} of --tp {} --pp {} needs {} GPUs: a {} node has {}",
                    roofline.dep.layout.tp,
                    roofline.dep.layout.pp,
                    pd.servers() * per,
                    hw.name,
                    hw.gpus
                )));
            }
            if self.self_report.enable_logging_iteration_details {
                return Err(cli::usage(
                    "--pd predicts several engines: drop --enable-logging-iteration-details (its step log is one engine's)",
                ));
            }
        }
        let kv_cache_tokens = self.kv_budget(&roofline)?.unwrap_or(u64::MAX);
        let measured = match &self.predict.client_gap_from {
            Some(path) => {
                let m = gap::measure(path)?;
                servbench::diag::info(format!(
                    "--client-gap-from {path}: client gap {} us, request latency {} us (mean of {} spacings within a wave over {} re-sent requests; median of each TTFT less the engine's)",
                    m.gap.as_micros(),
                    m.request_latency.as_micros(),
                    m.spacings,
                    m.resent
                ));
                Some(m)
            }
            None => None,
        };
        // The grid's front end is the measured request latency, by the streams in flight.
        let request_latency = match &measured {
            Some(_) if !roofline.front_end.is_zero() => {
                servbench::diag::info(
                    "--client-gap-from: the request latency is the calibration's front end, per stream in flight and prompt token, not the file's median",
                );
                Duration::ZERO
            }
            Some(m) => m.request_latency,
            None => self.predict.request_latency,
        };
        Ok(Engine {
            model_name: self
                .server
                .served_model_name
                .clone()
                .unwrap_or_else(|| roofline.dep.model.name.clone()),
            roofline,
            max_step_tokens: self.engine.max_step_tokens,
            kv_cache_tokens,
            max_running: self.engine.max_running,
            spec: self.engine.spec,
            seed: self.engine.seed,
            max_model_len: self.engine.max_model_len,
            prefix_caching: self.engine.prefix_caching,
            labels: self.labels.clone(),
            request_latency,
            client_gap: measured.as_ref().map_or(self.predict.client_gap, |m| m.gap),
            log_steps: self.self_report.enable_logging_iteration_details,
            pd: self.predict.pd,
        })
    }
}

impl PredictArgs {
    /// The load's rules (loadgen's, from shared) and what --predict does not model.
    pub fn check(&self) -> anyhow::Result<()> {
        self.load.check(None)?;
        // A point's records are held until it ends: a budget beyond memory is refused at once
        // (a --duration's is stopped at the same bound as it runs).
        let most_tokens = self.outputs().into_iter().max().unwrap_or(256);
        for pace in self.load.loads() {
            if let Some(Budget::Requests(n)) = self.load.budget(&pace)
                && n.saturating_mul(u64::from(most_tokens)) > load::MAX_POINT_TOKENS
            {
                let asked = match (self.load.requests, pace) {
                    (Some(_), _) => format!("-n {n}"),
                    (None, Load::Closed { concurrency }) => {
                        format!("{n} requests (the default of -c {concurrency})")
                    }
                    (None, _) => format!("{n} requests (the default of the rate)"),
                };
                return Err(cli::usage(format!(
                    "{asked} of {most_tokens} output tokens: a predicted point holds its records until it ends, at most {} output tokens: lower -n",
                    load::MAX_POINT_TOKENS
                )));
            }
        }
        Ok(())
    }

    fn inputs(&self) -> Vec<u32> {
        self.load.input_len.clone().unwrap_or_else(|| vec![256])
    }

    fn outputs(&self) -> Vec<u32> {
        self.load.max_tokens.clone().unwrap_or_else(|| vec![256])
    }

    fn prompts(&self) -> Prompts {
        match (self.load.prefix_groups, self.load.prefix_len) {
            (Some(groups), Some(len)) => Prompts::Groups { groups, len },
            _ if self.load.shared_prefix > 0 => Prompts::Shared(self.load.shared_prefix),
            _ => Prompts::Unique,
        }
    }
}

/// Runs the sweep: every combination of input length, output length and load level (or each
/// `--trace-speed`), in loadgen's order, each point on a fresh engine (the prefix cache lives
/// across points, as a server's does, unless --flush-cache).
pub fn run(args: &PredictArgs, engine: Engine) -> anyhow::Result<Exit> {
    args.check()?;
    let mut out = RecordWriter::stdout();
    let mut labels = engine.labels.clone();
    labels.insert(SOURCE_LABEL.into(), PREDICTED.into());
    let mut cache = engine
        .prefix_caching
        .then(|| PrefixCache::new(engine.kv_cache_tokens));
    if let Some(path) = &args.load.trace {
        return trace::run(args, path, &engine, &labels, cache.as_mut(), &mut out);
    }
    let mut index = 0u32;
    for input_len in args.inputs() {
        for max_tokens in args.outputs() {
            let key = PointKey {
                input_len: Some(input_len),
                max_tokens: Some(max_tokens),
                ..PointKey::default()
            };
            // Each point in loadgen's order: the next index, on a fresh engine.
            let mut measure = |pace: Load, repeat: u32| {
                let point = PointKey {
                    index,
                    concurrency: match pace {
                        Load::Closed { concurrency } => Some(concurrency),
                        Load::Open { .. } | Load::Trace { .. } => None,
                    },
                    rate_rps: match pace {
                        Load::Open { rate_rps, .. } => Some(rate_rps),
                        Load::Closed { .. } | Load::Trace { .. } => None,
                    },
                    repeat,
                    ..key.clone()
                };
                index += 1;
                if args.load.flush_cache
                    && let Some(c) = cache.as_mut()
                {
                    c.reset();
                }
                let load = PointLoad {
                    point,
                    labels: labels.clone(),
                    pace,
                    // A trace's budget is its rows (`trace::run` counts them).
                    budget: args
                        .load
                        .budget(&pace)
                        .unwrap_or(Budget::Requests(u64::MAX)),
                    input_len,
                    max_tokens,
                    prompts: args.prompts(),
                    turns: args.load.turns.map(|t| (t, args.load.think_time)),
                    trace: None,
                    seed: engine.seed,
                    request_latency: engine.request_latency,
                    front_end: engine.roofline.front_end,
                    client_gap: engine.client_gap,
                    max_model_len: engine.max_model_len,
                    kv_cache_tokens: engine.kv_cache_tokens,
                };
                write_point(args, load, cache.as_mut(), &engine, &mut out)
            };
            if args.load.ramp {
                let (first, rules) = args.load.ramp_rules();
                let slo = args.load.slo.is_some();
                let (levels, rule, reason) =
                    modes::ramp(first, &rules, args.load.repeat, slo, &mut measure)?;
                let record = rules.record(labels.clone(), key, levels, rule, reason);
                out.emit(&record)?;
            } else if let Some(var) = args.load.find_max {
                let rules = args.load.search_rules(var);
                let open = (args.load.arrival, args.load.max_concurrency);
                let (probes, outcome) = modes::find_max(&rules, open, &mut measure)?;
                let slo = args.load.slo.as_ref();
                out.emit(&rules.record(labels.clone(), key, slo, probes, outcome))?;
            } else {
                for pace in args.load.loads() {
                    for repeat in 0..args.load.repeat {
                        measure(pace, repeat)?;
                    }
                }
            }
        }
    }
    Ok(Exit::Ok)
}

/// Predicts one point and writes its request records (unless --no-requests) and summary;
/// returns the summary and the point's level as `--ramp` and `--find-max` judge it.
fn write_point(
    args: &PredictArgs,
    load: PointLoad,
    cache: Option<&mut PrefixCache>,
    engine: &Engine,
    out: &mut RecordWriter<std::io::Stdout>,
) -> anyhow::Result<(servbench::record::SummaryRecord, Tally)> {
    let (point, labels, pace) = (load.point.clone(), load.labels.clone(), load.pace);
    let records = predict_point(load, cache, engine, engine.log_steps);
    let mut stats = PointStats::new();
    for r in &records {
        stats.add_request(r, args.load.slo.as_ref());
        if !args.no_requests {
            out.emit(r)?;
        }
    }
    let mut summary = stats.to_summary(point, labels, false, args.load.slo.as_ref());
    describe(args, &pace, engine, &mut summary);
    out.emit(&summary)?;
    let tally = Tally::of(&summary, stats.good);
    Ok((summary, tally))
}

/// The summary of one closed-loop point of `requests` requests, predicted on a fresh engine
/// and prefix cache (what `--calibrate` sets against each measured point).
pub fn predict_closed(
    engine: &Engine,
    concurrency: u32,
    requests: u64,
    input_len: u32,
    max_tokens: u32,
) -> servbench::record::SummaryRecord {
    let point = PointKey {
        concurrency: Some(concurrency),
        input_len: Some(input_len),
        max_tokens: Some(max_tokens),
        ..PointKey::default()
    };
    let load = PointLoad {
        point: point.clone(),
        labels: Labels::new(),
        pace: Load::Closed { concurrency },
        budget: Budget::Requests(requests),
        input_len,
        max_tokens,
        prompts: Prompts::Unique,
        turns: None,
        trace: None,
        seed: engine.seed,
        request_latency: engine.request_latency,
        front_end: engine.roofline.front_end,
        client_gap: engine.client_gap,
        max_model_len: engine.max_model_len,
        kv_cache_tokens: engine.kv_cache_tokens,
    };
    let mut cache = engine
        .prefix_caching
        .then(|| PrefixCache::new(engine.kv_cache_tokens));
    let mut stats = PointStats::new();
    for r in predict_point(load, cache.as_mut(), engine, false) {
        stats.add_request(&r, None);
    }
    stats.to_summary(point, Labels::new(), false, None)
}

/// One point: the engine on a virtual clock until the client's load is over (its steps logged
/// with `log_steps`).
fn predict_point(
    load: PointLoad,
    cache: Option<&mut PrefixCache>,
    engine: &Engine,
    log_steps: bool,
) -> Vec<servbench::record::RequestRecord> {
    let clock_index = load.point.index;
    let mut clock = VirtualClock::new(load, cache);
    let mut timings = match engine.pd {
        Some(layout) => pd::run(&mut clock, engine, layout),
        None => {
            let metrics = Arc::new(Mutex::new(Metrics::new(crate::metrics::MetricNames::Vllm)));
            run_modelled(&mut clock, metrics, modelled(engine, log_steps));
            std::collections::HashMap::new()
        }
    };
    if clock.capped() {
        cli::warn(format!(
            "point {}: stopped sending at {} output tokens, the most a predicted point holds in memory: a shorter --duration or a lower load",
            clock_index,
            load::MAX_POINT_TOKENS
        ));
    }
    let mut records = clock.records;
    records.sort_by_key(|r| r.id);
    for r in &mut records {
        r.server_timing = timings.remove(&r.id);
    }
    records
}

/// The modelled engine's settings for a prediction (its steps logged with `log_steps`).
fn modelled(engine: &Engine, log_steps: bool) -> ModelledConfig {
    ModelledConfig {
        cost: Box::new(engine.roofline.clone()),
        max_step_tokens: engine.max_step_tokens,
        kv_cache_tokens: engine.kv_cache_tokens,
        spec: engine.spec,
        max_running: engine.max_running,
        seed: engine.seed,
        // A prediction writes records, and its step log where asked; no counters.
        report: crate::selfreport::SelfReport {
            enable_logging_iteration_details: log_steps,
            ..Default::default()
        }
        .for_engine(crate::sglang::Ranks::default()),
        // A prediction's clients never go away.
        abandoned: crate::engine::Abandoned::Stop,
        // A prediction's requests name the base model.
        lora: None,
    }
}

/// The summary's description of the workload, as loadgen writes it (the load's part from
/// shared).
fn describe(
    args: &PredictArgs,
    pace: &Load,
    engine: &Engine,
    s: &mut servbench::record::SummaryRecord,
) {
    s.model = Some(engine.model_name.clone());
    s.workload.api = Some("completions".into());
    s.workload.seed = Some(engine.seed);
    s.workload.stream = Some(true);
    s.workload.temperature = Some(0.0);
    args.load.describe(pace, s);
    s.workload.cache_flushed = args.load.flush_cache.then_some(true);
}
