//! `srv-sim --predict`: the modelled engine run in virtual time under the load loadgen would
//! apply, writing loadgen's `request` and `summary` records labelled `source=predicted`, so
//! summarize tabulates a prediction and `--compare`s it with a measurement unchanged. The engine
//! is the server's own step loop ([`crate::engine::run_modelled`]) on a virtual clock
//! ([`load::VirtualClock`]); the statistics are shared's one implementation.

mod gap;
pub mod load;
mod trace;

use crate::cost::Roofline;
use crate::engine::{ModelledConfig, Spec, run_modelled};
use crate::metrics::Metrics;
use crate::prefix::PrefixCache;
use load::{Budget, Pace, PointLoad, Prompts, VirtualClock};
use servbench::cli::{self, Exit};
use servbench::jsonl::RecordWriter;
use servbench::load::{Arrival, Think, Turns};
use servbench::record::{Labels, PointKey};
use servbench::stats::{PointStats, Slo};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The label every predicted record carries (`source=predicted`), so a prediction and a
/// measurement read side by side stay apart.
pub const SOURCE_LABEL: &str = "source";
pub const PREDICTED: &str = "predicted";

/// A whole list in one flag value (`1,2,4` or `1..256`); an alias so clap takes it as one value.
type U32List = Vec<u32>;
type F64List = Vec<f64>;

/// `--predict` and the load it applies, under loadgen's flag names and meanings.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Predict a loadgen sweep in virtual time (--predict)")]
pub struct PredictArgs {
    /// Run the modelled engine in virtual time under the load below and write loadgen's
    /// request and summary records (labelled source=predicted) instead of serving
    #[arg(long)]
    pub predict: bool,
    /// Closed loop: requests in flight, a list or doubling range (1,4,16 or 1..256)
    #[arg(short = 'c', long, value_parser = cli::u32_list, requires = "predict")]
    pub concurrency: Option<U32List>,
    /// Open loop: requests per second, a list (5,10,20)
    #[arg(short = 'r', long, value_parser = cli::f64_list, conflicts_with = "concurrency", requires = "predict")]
    pub rate: Option<F64List>,
    /// Open-loop arrivals: poisson, constant or gamma:SHAPE
    #[arg(long, default_value = "poisson", value_parser = Arrival::parse)]
    pub arrival: Arrival,
    /// Open loop or trace: at most this many requests in flight (waiting for a slot counts
    /// into latency)
    #[arg(long, requires = "predict")]
    pub max_concurrency: Option<u32>,
    /// Requests per point (default: max(100, 4 x concurrency), or 10 s of an open-loop rate;
    /// with --turns, sessions)
    #[arg(short = 'n', long, requires = "predict")]
    pub requests: Option<u64>,
    /// Time per point instead of a request count: sending stops then, in-flight requests finish
    #[arg(long, value_parser = cli::parse_duration, conflicts_with = "requests", requires = "predict")]
    pub duration: Option<Duration>,
    /// Run each point K times
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Prompt lengths in tokens, a list (default 256)
    #[arg(long, value_parser = cli::u32_list, requires = "predict")]
    pub input_len: Option<U32List>,
    /// Output tokens per request, a list (default 256)
    #[arg(long, value_parser = cli::u32_list, requires = "predict")]
    pub max_tokens: Option<U32List>,
    /// Prompts share their first N tokens (prefix caching); otherwise each is unique
    #[arg(long, default_value_t = 0)]
    pub shared_prefix: u32,
    /// Prompts in G groups, each group sharing its own first --prefix-len tokens
    #[arg(
        long,
        value_name = "G",
        requires = "prefix_len",
        conflicts_with = "shared_prefix"
    )]
    pub prefix_groups: Option<u32>,
    /// Tokens of each group's prefix; the rest of --input-len is unique to each request
    #[arg(long, value_name = "P", requires = "prefix_groups")]
    pub prefix_len: Option<u32>,
    /// Empty the prefix cache before each point
    #[arg(long, requires = "predict")]
    pub flush_cache: bool,
    /// Conversations: turns per session, N or LO..HI
    #[arg(long, value_parser = Turns::parse, requires = "predict")]
    pub turns: Option<Turns>,
    /// Conversations: the pause between a reply and the next turn (2s, or 500ms..3s)
    #[arg(long, default_value = "0s", value_parser = Think::parse, requires = "turns")]
    pub think_time: Think,
    /// Service-level objectives for goodput (ttft_ms=500,tpot_ms=50)
    #[arg(long, value_parser = Slo::parse, requires = "predict")]
    pub slo: Option<Slo>,
    /// Replay a trace (Mooncake-style JSON lines, or CSV with timestamp and lengths): each row
    /// at its offset with its lengths, as loadgen --trace
    #[arg(long, value_name = "FILE", requires = "predict")]
    pub trace: Option<String>,
    /// --trace: play it this many times as fast as recorded, a list (0.5,1,2)
    #[arg(long, default_value = "1", value_parser = cli::f64_list, requires = "trace")]
    pub trace_speed: F64List,
    /// --trace: tokens per hash_ids block (Mooncake 512)
    #[arg(long, default_value_t = 512, requires = "trace")]
    pub trace_block: u32,
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
            request_latency: measured
                .as_ref()
                .map_or(self.predict.request_latency, |m| m.request_latency),
            client_gap: measured.as_ref().map_or(self.predict.client_gap, |m| m.gap),
            log_steps: self.self_report.enable_logging_iteration_details,
        })
    }
}

impl PredictArgs {
    /// Flags that make no sense with --predict, and a load that is not complete.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.repeat == 0 {
            return Err(cli::usage("--repeat must be at least 1"));
        }
        if self.concurrency.as_ref().is_some_and(|c| c.contains(&0)) {
            return Err(cli::usage("-c: a concurrency must be at least 1"));
        }
        if let Some(r) = &self.rate
            && let Some(bad) = r.iter().find(|r| !(r.is_finite() && **r > 0.0))
        {
            return Err(cli::usage(format!(
                "-r {bad}: a rate must be a positive number of requests per second"
            )));
        }
        if self.max_concurrency == Some(0) || self.requests == Some(0) {
            return Err(cli::usage(
                "--max-concurrency and -n must be at least 1 where given",
            ));
        }
        if self.prefix_groups == Some(0) {
            return Err(cli::usage("--prefix-groups must be at least 1"));
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err(cli::usage("--duration must be above 0s"));
        }
        if self.max_concurrency.is_some() && self.rate.is_none() && self.trace.is_none() {
            return Err(cli::usage(
                "--max-concurrency caps an open loop (-r) or a trace (--trace): a closed loop's cap is -c",
            ));
        }
        if self.trace.is_some() {
            // loadgen's own refusals, in its words.
            let clash = [
                (self.input_len.is_some(), "--input-len"),
                (self.max_tokens.is_some(), "--max-tokens"),
                (self.turns.is_some(), "--turns"),
                (self.concurrency.is_some(), "-c"),
                (self.rate.is_some(), "-r"),
            ];
            if let Some((_, flag)) = clash.iter().find(|(given, _)| *given) {
                return Err(cli::usage(format!(
                    "--trace sets the times and lengths of every request; it cannot be combined with {flag}"
                )));
            }
            if self.shared_prefix > 0 || self.prefix_groups.is_some() {
                return Err(cli::usage(
                    "--trace's hash_ids say which prompts share prefixes: drop --shared-prefix and --prefix-groups",
                ));
            }
            if self
                .trace_speed
                .iter()
                .any(|x| !(x.is_finite() && *x > 0.0))
            {
                return Err(cli::usage(
                    "--trace-speed values must be positive (2: twice as fast)",
                ));
            }
            if self.trace_block == 0 {
                return Err(cli::usage("--trace-block must be at least 1 token"));
            }
        }
        Ok(())
    }

    fn inputs(&self) -> Vec<u32> {
        self.input_len.clone().unwrap_or_else(|| vec![256])
    }

    fn outputs(&self) -> Vec<u32> {
        self.max_tokens.clone().unwrap_or_else(|| vec![256])
    }

    /// The load levels: closed-loop concurrencies or open-loop rates (default C=1).
    fn paces(&self) -> Vec<Pace> {
        match &self.rate {
            Some(rates) => rates
                .iter()
                .map(|&rate_rps| Pace::Open {
                    rate_rps,
                    arrival: self.arrival,
                    max_concurrency: self.max_concurrency,
                })
                .collect(),
            None => self
                .concurrency
                .clone()
                .unwrap_or_else(|| vec![1])
                .into_iter()
                .map(|slots| Pace::Closed { slots })
                .collect(),
        }
    }

    /// Requests (sessions with --turns) or sending time of a point, as loadgen's defaults.
    fn budget(&self, pace: Pace) -> Budget {
        if let Some(d) = self.duration {
            return Budget::Time(d);
        }
        let conversations = self.turns.is_some();
        Budget::Requests(self.requests.unwrap_or(match pace {
            Pace::Closed { slots } => {
                servbench::load::default_closed_requests(slots, conversations)
            }
            Pace::Open { rate_rps, .. } => servbench::load::default_open_requests(rate_rps),
            // A trace's budget is its rows (`trace::run` counts them).
            Pace::Trace { .. } => u64::MAX,
        }))
    }

    fn prompts(&self) -> Prompts {
        match (self.prefix_groups, self.prefix_len) {
            (Some(groups), Some(len)) => Prompts::Groups { groups, len },
            _ if self.shared_prefix > 0 => Prompts::Shared(self.shared_prefix),
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
    if let Some(path) = &args.trace {
        return trace::run(args, path, &engine, &labels, cache.as_mut(), &mut out);
    }
    let mut index = 0u32;
    for input_len in args.inputs() {
        for max_tokens in args.outputs() {
            for pace in args.paces() {
                for repeat in 0..args.repeat {
                    let point = PointKey {
                        index,
                        concurrency: match pace {
                            Pace::Closed { slots } => Some(slots),
                            Pace::Open { .. } | Pace::Trace { .. } => None,
                        },
                        rate_rps: match pace {
                            Pace::Open { rate_rps, .. } => Some(rate_rps),
                            Pace::Closed { .. } | Pace::Trace { .. } => None,
                        },
                        input_len: Some(input_len),
                        max_tokens: Some(max_tokens),
                        repeat,
                        trace_speed: None,
                    };
                    index += 1;
                    if args.flush_cache
                        && let Some(c) = cache.as_mut()
                    {
                        c.reset();
                    }
                    let load = PointLoad {
                        point: point.clone(),
                        labels: labels.clone(),
                        pace,
                        budget: args.budget(pace),
                        input_len,
                        max_tokens,
                        prompts: args.prompts(),
                        turns: args.turns.map(|t| (t, args.think_time)),
                        trace: None,
                        seed: engine.seed,
                        request_latency: engine.request_latency,
                        client_gap: engine.client_gap,
                        max_model_len: engine.max_model_len,
                        kv_cache_tokens: engine.kv_cache_tokens,
                    };
                    write_point(args, load, cache.as_mut(), &engine, &mut out)?;
                }
            }
        }
    }
    Ok(Exit::Ok)
}

/// Predicts one point and writes its request records (unless --no-requests) and summary.
fn write_point(
    args: &PredictArgs,
    load: PointLoad,
    cache: Option<&mut PrefixCache>,
    engine: &Engine,
    out: &mut RecordWriter<std::io::Stdout>,
) -> anyhow::Result<()> {
    let (point, labels, pace) = (load.point.clone(), load.labels.clone(), load.pace);
    let records = predict_point(load, cache, engine, engine.log_steps);
    let mut stats = PointStats::new();
    for r in &records {
        stats.add_request(r, args.slo.as_ref());
        if !args.no_requests {
            out.emit(r)?;
        }
    }
    let mut summary = stats.to_summary(point, labels, false, args.slo.as_ref());
    describe(args, pace, engine, &mut summary);
    out.emit(&summary)?;
    Ok(())
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
        pace: Pace::Closed { slots: concurrency },
        budget: Budget::Requests(requests),
        input_len,
        max_tokens,
        prompts: Prompts::Unique,
        turns: None,
        trace: None,
        seed: engine.seed,
        request_latency: engine.request_latency,
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
    let mut clock = VirtualClock::new(load, cache);
    let metrics = Arc::new(Mutex::new(Metrics::new(crate::metrics::MetricNames::Vllm)));
    run_modelled(
        &mut clock,
        metrics,
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
            .for_engine(0),
        },
    );
    let mut records = clock.records;
    records.sort_by_key(|r| r.id);
    records
}

/// The summary's description of the workload, as loadgen writes it.
fn describe(
    args: &PredictArgs,
    pace: Pace,
    engine: &Engine,
    s: &mut servbench::record::SummaryRecord,
) {
    s.model = Some(engine.model_name.clone());
    s.workload.api = Some("completions".into());
    s.workload.seed = Some(engine.seed);
    s.workload.stream = Some(true);
    s.workload.temperature = Some(0.0);
    if let Pace::Open {
        arrival,
        max_concurrency,
        ..
    } = pace
    {
        s.workload.arrival = Some(arrival.into());
        s.workload.max_concurrency = max_concurrency;
    }
    if let Pace::Trace {
        max_concurrency, ..
    } = pace
    {
        s.workload.trace = args.trace.clone();
        s.workload.trace_rows = Some(s.requests);
        s.workload.max_concurrency = max_concurrency;
    }
    s.workload.prefix_groups = args.prefix_groups;
    s.workload.prefix_len = args.prefix_len;
    s.workload.cache_flushed = args.flush_cache.then_some(true);
    if let Some(turns) = args.turns {
        s.workload.turns = Some(turns.text());
        s.workload.think_time = Some(args.think_time.text());
        s.workload.sessions = Some(
            s.by_turn
                .iter()
                .find(|t| t.turn == 1)
                .map_or(0, |t| t.requests),
        );
    }
}
