//! The load's flags, declared once: loadgen and srv-sim (`--predict`) both flatten [`LoadArgs`],
//! so a flag means the same in both, has one `--help` text, and is checked by one rule
//! ([`LoadArgs::check`]); a summary describes the load by [`LoadArgs::describe`].

use super::points::{Budget, Load};
use super::ramp;
use super::search::{self, RATE_LIMIT, Var};
use super::{Arrival, Think, Turns};
use crate::cli;
use crate::record::SummaryRecord;
use crate::stats::Slo;
use std::time::Duration;

/// A whole list in one flag value (`1,2,4` or `1..256`); an alias so clap takes it as one value.
pub type U32List = Vec<u32>;
/// A list of numbers in one flag value (`5,10,20`).
pub type F64List = Vec<f64>;

/// The load: arrival, sweep, lengths, budget, ramp and find-max.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Closed loop: requests in flight, a list or doubling range (1,4,16 or 1..256)
    #[arg(short = 'c', long, value_parser = cli::u32_list)]
    pub concurrency: Option<U32List>,
    /// Open loop: requests per second, a list (5,10,20)
    #[arg(short = 'r', long, value_parser = cli::f64_list, conflicts_with = "concurrency")]
    pub rate: Option<F64List>,
    /// Open-loop arrivals: poisson, constant or gamma:SHAPE
    #[arg(long, default_value = "poisson", value_parser = Arrival::parse)]
    pub arrival: Arrival,
    /// Open loop or trace: at most this many requests in flight (waiting for a slot counts
    /// into latency)
    #[arg(long)]
    pub max_concurrency: Option<u32>,
    /// Double the concurrency from the first -c value until errors, saturation or an --slo stop it
    #[arg(long, conflicts_with = "rate")]
    pub ramp: bool,
    /// --ramp: stop when the error rate passes this fraction
    #[arg(long, default_value_t = 0.01, value_parser = parse_share)]
    pub max_error_rate: f64,
    /// --ramp: stop when output throughput gains less than this fraction over the previous level
    #[arg(long, default_value_t = 0.05, value_parser = parse_finite)]
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
    pub find_max: Option<Var>,
    /// --find-max: end when the first failing load is within this share above the passing one
    #[arg(long, default_value_t = 0.05)]
    pub find_max_precision: f64,
    /// --find-max: tries of one load at most, when its result is too close to the target to call
    #[arg(long, default_value_t = 3)]
    pub find_max_tries: u32,
    /// --find-max: the highest load tried (default: --ramp-max for concurrency, 10000 req/s)
    #[arg(long)]
    pub find_max_limit: Option<f64>,
    /// Requests per point (default: max(100, 4 x concurrency), or 10 s of an open-loop rate;
    /// with --turns, sessions)
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Time per point instead of a request count (30s, 2m): sending stops then, in-flight requests finish
    #[arg(long, value_parser = cli::parse_duration, conflicts_with = "requests")]
    pub duration: Option<Duration>,
    /// Run each point K times (summaries then give a confidence interval)
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Prompt lengths in tokens as the server counts them, a list (1000,30000; default 256)
    #[arg(long, value_parser = cli::u32_list)]
    pub input_len: Option<U32List>,
    /// Output tokens per request, a list (default 256); loadgen forces them with ignore_eos +
    /// min_tokens unless --allow-eos
    #[arg(long, value_parser = cli::u32_list)]
    pub max_tokens: Option<U32List>,
    /// Synthetic prompts share their first N tokens (prefix caching); otherwise each is unique
    #[arg(long, default_value_t = 0)]
    pub shared_prefix: u32,
    /// Prefix-cache workload: synthetic prompts in G groups, each group sharing its own prefix
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
    /// Empty the server's prefix cache before each point
    #[arg(long)]
    pub flush_cache: bool,
    /// Conversations: turns per session, N or LO..HI (or `all` of a --prompts file's turns)
    #[arg(long, value_parser = Turns::parse)]
    pub turns: Option<Turns>,
    /// Conversations: pause between a reply and the next turn, e.g. 2s or 500ms..3s
    #[arg(long, default_value = "0s", value_parser = Think::parse, requires = "turns")]
    pub think_time: Think,
    /// Replay a trace: Mooncake-style JSON lines, or CSV with timestamp and lengths
    #[arg(long, value_name = "FILE")]
    pub trace: Option<String>,
    /// --trace: play this many times as fast as recorded, a list (0.5,1,2)
    #[arg(long, default_value = "1", value_parser = cli::f64_list, requires = "trace")]
    pub trace_speed: F64List,
    /// --trace: tokens per hash_ids block (Mooncake 512)
    #[arg(long, default_value_t = 512, requires = "trace")]
    pub trace_block: u32,
    /// Goodput objectives: ttft_ms=500,tpot_ms=50 (also itl_ms, e2e_ms)
    #[arg(long, value_parser = Slo::parse)]
    pub slo: Option<Slo>,
}

/// A share from 0 to 1 (`--max-error-rate`): NaN or 5 would make every level fail or none.
fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}': a share from 0 to 1 (0.01: 1%)")),
    }
}

/// A finite number (`--min-gain`): NaN would never call a level saturated.
fn parse_finite(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("'{s}': a finite number (0.05: 5%)")),
    }
}

/// The finest `--find-max-precision`: two loads 0.1% apart give the same measurement within
/// its noise, and a finer search only bisects towards adjacent floats.
const MIN_PRECISION: f64 = 0.001;

/// The slowest `--rate`: below it the first send is so far off that its time overflows.
const MIN_RATE: f64 = 0.001;

/// Unique words each synthetic prompt has after its shared prefix.
pub const UNIQUE_TOKENS: u32 = 8;

impl LoadArgs {
    /// The first load flag given on the command line, as people spell it (for a tool that
    /// takes them only in one mode: srv-sim without `--predict`).
    pub fn first_given(&self) -> Option<&'static str> {
        let given = [
            (self.concurrency.is_some(), "-c"),
            (self.rate.is_some(), "-r"),
            (self.max_concurrency.is_some(), "--max-concurrency"),
            (self.ramp, "--ramp"),
            (self.find_max.is_some(), "--find-max"),
            (self.requests.is_some(), "-n"),
            (self.duration.is_some(), "--duration"),
            (self.input_len.is_some(), "--input-len"),
            (self.max_tokens.is_some(), "--max-tokens"),
            (self.prefix_groups.is_some(), "--prefix-groups"),
            (self.flush_cache, "--flush-cache"),
            (self.turns.is_some(), "--turns"),
            (self.trace.is_some(), "--trace"),
            (self.slo.is_some(), "--slo"),
        ];
        given.iter().find(|(g, _)| *g).map(|(_, flag)| *flag)
    }

    /// Every rule of the load flags, one usage line naming the flag for the first broken.
    /// `prompts`: the tool's `--prompts` (loadgen's prompt files), where it has one.
    pub fn check(&self, prompts: Option<&str>) -> anyhow::Result<()> {
        if self.repeat == 0 {
            return Err(cli::usage("--repeat must be at least 1"));
        }
        if let Some(r) = &self.rate
            && r.iter().any(|x| !(x.is_finite() && *x > 0.0))
        {
            return Err(cli::usage(
                "--rate values must be positive requests per second",
            ));
        }
        if let Some(&r) = self.rate.iter().flatten().find(|&&r| r < MIN_RATE) {
            return Err(cli::usage(format!(
                "--rate {r:e}: at least {MIN_RATE} requests per second (one each 1000 s)"
            )));
        }
        if self.concurrency.as_ref().is_some_and(|c| c.contains(&0))
            || self.max_concurrency == Some(0)
        {
            return Err(cli::usage("concurrency must be at least 1"));
        }
        if self.requests == Some(0) {
            return Err(cli::usage("-n must be at least 1"));
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err(cli::usage("--duration must be above 0s"));
        }
        if self.max_tokens.as_ref().is_some_and(|m| m.contains(&0)) {
            return Err(cli::usage("--max-tokens must be at least 1"));
        }
        let most = super::trace::MAX_INPUT_LEN;
        if let Some(&n) = self.input_len.iter().flatten().find(|&&n| n > most) {
            return Err(cli::usage(format!(
                "--input-len {n}: at most {most} tokens (beyond any model's context)"
            )));
        }
        if self.max_concurrency.is_some()
            && self.rate.is_none()
            && self.trace.is_none()
            && self.find_max != Some(Var::Rate)
        {
            return Err(cli::usage(
                "--max-concurrency caps an open loop (-r) or a trace (--trace): a closed loop's cap is -c",
            ));
        }
        self.prefixes()?;
        self.trace_rules(prompts)?;
        self.conversations(prompts)?;
        self.search()
    }

    fn prefixes(&self) -> anyhow::Result<()> {
        if self.prefix_groups == Some(0) {
            return Err(cli::usage("--prefix-groups must be at least 1"));
        }
        if let Some(p) = self.prefix_len {
            let lens = self.input_len.clone().unwrap_or_else(|| vec![256]);
            if let Some(&l) = lens.iter().find(|&&l| l < p.saturating_add(UNIQUE_TOKENS)) {
                return Err(cli::usage(format!(
                    "--prefix-len {p} leaves {} tokens of --input-len {l} for the unique suffix; at least {UNIQUE_TOKENS} are needed",
                    l.saturating_sub(p)
                )));
            }
        }
        Ok(())
    }

    fn trace_rules(&self, prompts: Option<&str>) -> anyhow::Result<()> {
        if self.trace.is_none() {
            return Ok(());
        }
        let clash = [
            (self.input_len.is_some(), "--input-len"),
            (self.max_tokens.is_some(), "--max-tokens"),
            (prompts.is_some(), "--prompts"),
            (self.turns.is_some(), "--turns"),
            (self.concurrency.is_some(), "-c"),
            (self.rate.is_some(), "-r"),
            (self.find_max.is_some(), "--find-max"),
            (self.ramp, "--ramp"),
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
        Ok(())
    }

    fn conversations(&self, prompts: Option<&str>) -> anyhow::Result<()> {
        if self.turns.is_some() && prompts == Some("builtin") {
            return Err(cli::usage(
                "--turns needs synthetic prompts (--input-len) or a conversations file (--prompts FILE), not the built-in prompts",
            ));
        }
        if self.turns == Some(Turns::All) && prompts.is_none() {
            return Err(cli::usage(
                "--turns all takes every turn of a conversations file (--prompts FILE); synthetic conversations need a count (--turns 3) or a range (--turns 2..6)",
            ));
        }
        if self.turns.is_some() && self.ramp {
            return Err(cli::usage(
                "--ramp cannot run conversations (--turns); use -c with a list",
            ));
        }
        Ok(())
    }

    /// `--find-max` and `--slo-attainment`.
    fn search(&self) -> anyhow::Result<()> {
        if let Some(var) = self.find_max {
            if self.slo.is_none() {
                return Err(cli::usage(
                    "--find-max needs the objectives to meet: --slo ttft_ms=...,tpot_ms=...",
                ));
            }
            let (given, flag, other) = match var {
                Var::Rate => (
                    self.rate.as_ref().map(Vec::len),
                    "-r",
                    self.concurrency.is_some().then_some("-c"),
                ),
                Var::Concurrency => (
                    self.concurrency.as_ref().map(Vec::len),
                    "-c",
                    self.rate.is_some().then_some("-r"),
                ),
            };
            if given.is_some_and(|n| n > 1) {
                return Err(cli::usage(format!(
                    "--find-max starts from one {flag} value (the first load tried), not a list"
                )));
            }
            if let Some(other) = other {
                return Err(cli::usage(format!(
                    "--find-max {} varies {flag}; {other} does not apply",
                    var.field()
                )));
            }
            if !(self.find_max_precision >= MIN_PRECISION && self.find_max_precision < 1.0) {
                return Err(cli::usage(format!(
                    "--find-max-precision is a share from {MIN_PRECISION} (0.1%) to below 1 (0.05: 5%): finer than a load point can tell apart"
                )));
            }
            if self.find_max_tries == 0 {
                return Err(cli::usage("--find-max-tries must be at least 1"));
            }
            if self
                .find_max_limit
                .is_some_and(|l| !(l.is_finite() && l >= 1.0))
            {
                return Err(cli::usage("--find-max-limit must be at least 1"));
            }
        }
        if !(self.slo_attainment > 0.0 && self.slo_attainment <= 1.0) {
            return Err(cli::usage(
                "--slo-attainment is a share above 0, at most 1 (0.9: 90%)",
            ));
        }
        Ok(())
    }

    /// The summary's description of the load a point ran under `load`: its arrivals and cap,
    /// the trace it replayed, its prefix groups and its conversations (the sessions counted
    /// from the summary's turn-1 requests).
    pub fn describe(&self, load: &Load, s: &mut SummaryRecord) {
        match *load {
            Load::Open {
                arrival,
                max_concurrency,
                ..
            } => {
                s.workload.arrival = Some(arrival.into());
                s.workload.max_concurrency = max_concurrency;
            }
            Load::Trace {
                max_concurrency, ..
            } => {
                s.workload.trace = self.trace.clone();
                s.workload.trace_rows = Some(s.requests);
                s.workload.max_concurrency = max_concurrency;
            }
            Load::Closed { .. } => {}
        }
        s.workload.prefix_groups = self.prefix_groups;
        s.workload.prefix_len = self.prefix_len;
        if let Some(turns) = self.turns {
            s.workload.turns = Some(turns.text());
            s.workload.think_time = Some(self.think_time.text());
            s.workload.sessions = Some(
                s.by_turn
                    .iter()
                    .find(|t| t.turn == 1)
                    .map_or(0, |t| t.requests),
            );
        }
    }
}

impl LoadArgs {
    /// `--ramp`'s first concurrency (the first `-c`, else 1) and its rules from the flags.
    pub fn ramp_rules(&self) -> (u32, ramp::Rules) {
        let first = self.concurrency.as_ref().and_then(|c| c.first().copied());
        let rules = ramp::Rules {
            max_error_rate: self.max_error_rate,
            slo_attainment: self.slo_attainment,
            min_gain: self.min_gain,
            max_concurrency: self.ramp_max,
        };
        (first.unwrap_or(1), rules)
    }

    /// `--find-max VAR`'s rules from the flags: it starts at the first `-r`/`-c` (else 1) and
    /// goes up to `--find-max-limit` (default `--ramp-max` for concurrency, [`RATE_LIMIT`]).
    pub fn search_rules(&self, var: Var) -> search::Rules {
        let start = match var {
            Var::Rate => self.rate.as_ref().and_then(|r| r.first().copied()),
            Var::Concurrency => self
                .concurrency
                .as_ref()
                .and_then(|c| c.first().copied())
                .map(f64::from),
        };
        search::Rules {
            var,
            target: self.slo_attainment,
            precision: self.find_max_precision,
            max_tries: self.find_max_tries,
            start: start.unwrap_or(1.0),
            limit: self.find_max_limit.unwrap_or(match var {
                Var::Rate => RATE_LIMIT,
                Var::Concurrency => f64::from(self.ramp_max),
            }),
        }
    }

    /// A sweep's loads: each `-r` rate (open loop), each `--trace-speed`, or each `-c`
    /// (default: one request in flight).
    pub fn loads(&self) -> Vec<Load> {
        match (&self.rate, &self.concurrency) {
            (Some(rates), _) => rates
                .iter()
                .map(|&rate_rps| Load::Open {
                    rate_rps,
                    arrival: self.arrival,
                    max_concurrency: self.max_concurrency,
                })
                .collect(),
            _ if self.trace.is_some() => self
                .trace_speed
                .iter()
                .map(|&speed| Load::Trace {
                    speed,
                    max_concurrency: self.max_concurrency,
                })
                .collect(),
            (None, Some(c)) => c
                .iter()
                .map(|&concurrency| Load::Closed { concurrency })
                .collect(),
            (None, None) => vec![Load::Closed { concurrency: 1 }],
        }
    }

    /// A point's budget by the flags: `--duration`, else `-n`, else a count from the load
    /// (sessions with `--turns`). `None` for a trace without either: its rows are its budget.
    pub fn budget(&self, load: &Load) -> Option<Budget> {
        if let Some(d) = self.duration {
            return Some(Budget::Time(d));
        }
        let conversations = self.turns.is_some();
        Some(Budget::Requests(self.requests.or(match *load {
            Load::Closed { concurrency } => {
                Some(super::default_closed_requests(concurrency, conversations))
            }
            Load::Open { rate_rps, .. } => Some(super::default_open_requests(rate_rps)),
            Load::Trace { .. } => None,
        })?))
    }
}
