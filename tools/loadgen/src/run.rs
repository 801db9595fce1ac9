//! The run: finds the target and model, aligns prompt lengths, then walks the sweep matrix.
//! Every load mode feeds one dispatcher loop ([`crate::dispatch`]); finished requests come back
//! to one collector here that writes `request` records and builds the point's `summary` with
//! the shared statistics. Ctrl-C/SIGTERM stops any phase, start-up included: no new requests,
//! in-flight ones get `--grace`, a partial summary, exit 130; a second one exits at once. A
//! stdout nobody reads any more stops everything at once (there is nobody to tell). A server
//! found down ends the point (partial, `stopped_by: server_down`) and the run with exit 1.

use crate::body::{BodySpec, Template};
use crate::dispatch::{Budget, Context, Ended, Finished, Maker, Phase, Source, Stop};
use crate::exec::{RequestMeta, to_record};
use crate::flush::Flusher;
use crate::http::Pool;
use crate::limits;
use crate::pacing::Load;
use crate::probe::{self, Aligner, Model};
use crate::progress::{Progress, cpu_seconds};
use crate::ranks::{Hooks, Ranks};
use crate::telemetry::{self, PointTelemetry, Telemetry};
use crate::workload;
use crate::{Args, Warmup};
use anyhow::Context as _;
use servbench::cli::{self, Exit};
use servbench::jsonl::RecordWriter;
use servbench::record::{ErrorClass, Labels, PointKey, PointStop, SummaryRecord};
use servbench::stats::PointStats;
use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

pub use crate::setup::{Setup, main};

/// The whole run: the model, every sweep point (or ramp), their records to `out`.
pub fn run<W: Write>(
    mut args: Args,
    setup: Setup,
    out: &mut RecordWriter<W>,
) -> anyhow::Result<Exit> {
    limits::validate(&args)?;
    limits::fit_open_files(&mut args, servbench::rlimit::raise_nofile_limit())?;
    // Before anything reads it (one rank of several has the job's seed already).
    args.draw_seed();
    // Of several ranks, rank 0 alone empties the cache (before the point's common start) and
    // watches the server: one server, one view of it.
    let first = setup.ranks.as_ref().is_none_or(|r| r.rank() == 0);
    let flusher = Flusher::for_run(args.flush_cache && first, setup.engine)?;
    let telemetry = match first {
        true => Telemetry::start(telemetry::plan(
            &args,
            &setup.target,
            setup.server.as_ref(),
        )?),
        false => None,
    };
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get().min(8)));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        if setup.signals {
            crate::setup::watch_signals(setup.stop.clone());
        }
        let _watch = setup
            .watch_stdout
            .then(|| crate::downstream::Watch::start(setup.stop.clone()));
        let pool = Arc::new(Pool::new(setup.target));
        let stop = setup.stop.clone();
        let found = probe::find_model(&pool, args.model.as_deref(), args.timeout);
        let Model {
            name: model,
            max_model_len,
        } = until_stopped(&stop, found).await?;
        limits::check_lengths(&args, max_model_len)?;
        let ctx = Context {
            pool: pool.clone(),
            path: args.api.path(),
            stream: !args.no_stream,
            timeout: args.timeout,
            grace: args.grace,
            seq: Arc::new(AtomicU64::new(0)),
            stop: setup.stop,
        };
        let mut aligner = Aligner::new(
            pool,
            args.api,
            model.clone(),
            args.prefix_len.unwrap_or(args.shared_prefix),
            args.seed(),
            args.timeout,
        );
        aligner.extra = args.extra_body.clone();
        let mut run = Run {
            args,
            ctx,
            labels: setup.labels,
            out,
            model,
            first_errors: BTreeSet::new(),
            aligner,
            flusher,
            warned: BTreeSet::new(),
            warm: BTreeSet::new(),
            replay: None,
            max_model_len,
            ranks: setup.ranks,
            telemetry,
        };
        // Each rank draws its own prompts and arrivals; the aligner's shared prefix stays common.
        if let Some(r) = &run.ranks {
            run.args.seed = Some(r.seed());
        }
        let exit = run.all().await;
        // Upstream records still on their way pass on, after a Ctrl-C too (then bounded by
        // the drain rule: servbench::interrupt).
        let interrupted = matches!(&exit, Err(e) if e.is::<cli::Interrupted>());
        if let Some(upstream) = setup.upstream
            && (exit.is_ok() || interrupted)
        {
            upstream.finish()?;
        }
        exit
    })
}

/// A start-up step (a probe, aligning prompts) that gives way to the run's stop.
pub(crate) async fn until_stopped<T>(
    stop: &Stop,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::select! {
        r = work => r,
        _ = stop.wait() => Err(stopped(stop)),
    }
}

/// The error a stopped run ends with: interrupted (exit 130), or for a stdout nobody reads,
/// the quiet end of a closed pipe.
fn stopped(stop: &Stop) -> anyhow::Error {
    if stop.is_aborted() {
        servbench::jsonl::OutputError::Closed.into()
    } else {
        cli::Interrupted.into()
    }
}

pub(crate) struct Run<'a, W: Write> {
    pub(crate) args: Args,
    pub(crate) ctx: Context,
    pub(crate) labels: Labels,
    pub(crate) out: &'a mut RecordWriter<W>,
    model: String,
    first_errors: BTreeSet<ErrorClass>,
    pub(crate) aligner: Aligner,
    flusher: Option<Flusher>,
    /// The server's metrics and GPUs, read on a thread of their own.
    telemetry: Option<Telemetry>,
    /// Warnings already given (each once per run).
    warned: BTreeSet<String>,
    /// Prefix groups sent since the cache was last emptied, by (group, prefix words).
    warm: BTreeSet<(u32, usize)>,
    /// `--trace`, once read.
    pub(crate) replay: Option<Arc<crate::trace::Replay>>,
    /// The server's context length, where /v1/models says.
    pub(crate) max_model_len: Option<u32>,
    /// This process as one rank of several, when it is.
    pub(crate) ranks: Option<Ranks>,
}

/// What a point's requests are made of.
pub(crate) struct Work {
    template: Arc<Template>,
    max_tokens: u32,
    source: Arc<Source>,
    /// `--max-tokens` was given: it overrides a prompt file's own `max_tokens`.
    max_given: bool,
}

/// What a point gave.
pub(crate) struct PointOutcome {
    pub(crate) summary: SummaryRecord,
    pub(crate) ended: Ended,
    pub(crate) first_failure: Option<(ErrorClass, String)>,
    /// Requests that succeeded and met every `--slo`.
    pub(crate) good: u64,
}

impl<W: Write> Run<'_, W> {
    async fn all(&mut self) -> anyhow::Result<Exit> {
        if let Some(path) = self.args.trace.clone() {
            self.replay = Some(self.replay(&path).await?);
        }
        let replay = self.replay.clone();
        let listed = match self.args.prompts.as_deref() {
            _ if replay.is_some() => None,
            None => None,
            Some("builtin") => Some(workload::builtin()),
            // Conversations read the file's every user turn (conversation::source).
            Some(_) if self.args.turns.is_some() => Some(Vec::new()),
            Some(path) => Some(crate::prompt_files::read_prompts_file(path).map_err(cli::usage)?),
        };
        let input_lens: Vec<Option<u32>> = match (&self.args.input_len, &listed) {
            // A trace's rows have lengths of their own.
            _ if replay.is_some() => vec![None],
            (Some(l), _) => l.iter().copied().map(Some).collect(),
            (None, Some(_)) => vec![None],
            // Neither given: synthetic prompts of 256 tokens.
            (None, None) => vec![Some(256)],
        };
        let max_tokens: Vec<Option<u32>> = match &self.args.max_tokens {
            Some(m) => m.iter().copied().map(Some).collect(),
            None => vec![None],
        };
        let mut index = 0u32;
        let stop = self.ctx.stop.clone();
        for &input_len in &input_lens {
            let source = match (input_len, &listed, &replay) {
                (_, _, Some(r)) => Source::Trace(r.clone()),
                (Some(n), _, _) => Source::Synthetic(
                    until_stopped(&stop, async { Ok(self.aligner.align(n).await) }).await?,
                ),
                (None, Some(entries), _) => Source::Listed(
                    Arc::new(entries.clone()),
                    Arc::new(workload::shuffled_order(entries.len(), self.args.seed())),
                ),
                (None, None, None) => unreachable!("input_lens has Some when there is no list"),
            };
            let source = Arc::new(crate::conversation::source(&self.args, source)?);
            for &max in &max_tokens {
                let (template, warnings) = Template::new(&BodySpec {
                    api: self.args.api,
                    model: self.model.clone(),
                    stream: !self.args.no_stream,
                    force_length: (input_len.is_some() || replay.is_some()) && !self.args.allow_eos,
                    usage_per_chunk: !self.args.no_usage_per_chunk,
                    temperature: self.args.temperature,
                    top_p: self.args.top_p,
                    extra: self.args.extra_body.clone(),
                });
                for w in warnings {
                    self.warn_once(w);
                }
                let work = Work {
                    template: Arc::new(template),
                    max_tokens: max.unwrap_or(256),
                    source: source.clone(),
                    max_given: max.is_some(),
                };
                let key = PointKey {
                    index: 0,
                    concurrency: None,
                    rate_rps: None,
                    input_len,
                    max_tokens: max.or(input_len.map(|_| 256)).filter(|_| replay.is_none()),
                    repeat: 0,
                    trace_speed: None,
                };
                if self.args.ramp {
                    self.ramp(&mut index, key, &work).await?;
                    continue;
                }
                if let Some(var) = self.args.find_max {
                    self.find_max(var, &mut index, key, &work).await?;
                    continue;
                }
                for load in self.loads() {
                    for repeat in 0..self.args.repeat {
                        let mut key = key.clone();
                        key.index = index;
                        key.repeat = repeat;
                        index += 1;
                        // A stop after the last point ended: no next point, not even an empty
                        // one (the ranks of a job decide together, in the phase; a ramp or a
                        // search writes its record from the cut point).
                        if self.ranks.is_none() && stop.is_stopped() {
                            return Err(stopped(&stop));
                        }
                        let p = self.point(key, load, &work).await?;
                        self.check_point(&p)?;
                    }
                }
            }
        }
        Ok(Exit::Ok)
    }

    /// Labels for a record of the whole job (a ramp's, a search's): `None` on a rank other than
    /// 0, which writes none (every rank decided the same from the merged figures).
    pub(crate) fn job_labels(&self) -> Option<Labels> {
        match &self.ranks {
            Some(r) if r.rank() != 0 => None,
            Some(_) => Some(Ranks::job_labels(&self.labels)),
            None => Some(self.labels.clone()),
        }
    }

    pub(crate) fn warn_once(&mut self, message: String) {
        if self.warned.insert(message.clone()) {
            cli::warn(message);
        }
    }

    /// Marks the prefix groups the first `n` requests of a phase used as cached (request `id`
    /// is in group `id % G`); returns how many of them were not cached before.
    fn touch_groups(&mut self, n: u64, work: &Work) -> u64 {
        let (Some(groups), Source::Synthetic(s)) = (self.args.prefix_groups, work.source.as_ref())
        else {
            return 0;
        };
        (0..n.min(u64::from(groups)))
            .filter(|&g| self.warm.insert((g as u32, s.shared_prefix_words)))
            .count() as u64
    }

    /// The point's expected prefix-cache hit rate: of `n` requests, all but the `cold` ones
    /// find their group's prefix cached, which is this share of their prompt. Synthetic
    /// prompts without a shared prefix or groups are unique: 0, so a server that reports hits
    /// (a rerun of the same `--seed` against a warm cache) is noticed downstream.
    fn expected_hit_rate(&self, n: u64, cold: u64, work: &Work) -> Option<f64> {
        let Source::Synthetic(s) = work.source.as_ref() else {
            return None;
        };
        if self.args.prefix_groups.is_none() && s.shared_prefix_words == 0 {
            return (n > 0).then_some(0.0);
        }
        (self.args.prefix_groups.is_some() && n > 0).then(|| {
            (n - cold.min(n)) as f64 / n as f64 * s.shared_prefix_words as f64
                / s.words.len().max(1) as f64
        })
    }

    /// What the summary says about the requests' bodies and the workload.
    fn describe(&self, s: &mut SummaryRecord, work: &Work) {
        s.stream = Some(!self.args.no_stream);
        s.temperature = work.template.temperature();
        s.top_p = work.template.top_p();
        s.extra_body = self
            .args
            .extra_body
            .as_ref()
            .map(|e| serde_json::Value::Object(e.0.clone()));
        s.prefix_groups = self.args.prefix_groups;
        s.prefix_len = self.args.prefix_len;
    }

    fn loads(&self) -> Vec<Load> {
        match (&self.args.rate, &self.args.concurrency) {
            (Some(rates), _) => rates
                .iter()
                .map(|&rate_rps| Load::Open {
                    rate_rps,
                    arrival: self.args.arrival,
                    max_concurrency: self.args.max_concurrency,
                })
                .collect(),
            _ if self.args.trace.is_some() => crate::trace::loads(&self.args),
            (None, Some(c)) => c
                .iter()
                .map(|&concurrency| Load::Closed { concurrency })
                .collect(),
            (None, None) => vec![Load::Closed { concurrency: 1 }],
        }
    }

    /// The run goes on after a point only when it ran its course with a success: exit 130
    /// after a stop, exit 1 with a clear message when the server went down or every request
    /// of the point failed.
    pub(crate) fn check_point(&self, p: &PointOutcome) -> anyhow::Result<()> {
        match &p.ended {
            Ended::Stopped => return Err(stopped(&self.ctx.stop)),
            Ended::ServerDown(why) => {
                return Err(cli::failure(format!(
                    "{why}; point {} stopped after {} requests ({} ok), its summary is partial",
                    p.summary.point.index, p.summary.requests, p.summary.ok
                )));
            }
            Ended::RankFailed(why) => return Err(cli::failure(why.clone())),
            Ended::Completed => {}
        }
        if p.summary.ok > 0 || p.summary.requests == 0 {
            return Ok(());
        }
        let (class, msg) = p
            .first_failure
            .clone()
            .unwrap_or((ErrorClass::Other, String::new()));
        Err(cli::failure(if class == ErrorClass::Connect {
            format!("no server answering at {}: {msg}", self.ctx.pool.target.url)
        } else {
            format!(
                "every request of point {} failed ({} of them); first: {class}: {msg}",
                p.summary.point.index, p.summary.requests
            )
        }))
    }

    fn budget(&self, load: &Load) -> Budget {
        if let Some(b) = crate::trace::budget(self.replay.as_deref(), &self.args, load)
            .or_else(|| crate::conversation::budget(&self.args, load))
        {
            return b;
        }
        if let Some(d) = self.args.duration {
            return Budget::Time(d);
        }
        Budget::Requests(self.args.requests.unwrap_or(match *load {
            Load::Closed { concurrency } => (u64::from(concurrency) * 4).max(100),
            Load::Open { rate_rps, .. } => ((rate_rps * 10.0).ceil() as u64).max(10),
            Load::Trace { .. } => unreachable!("a trace's budget is its rows"),
        }))
    }

    /// Empties the server's prefix cache (`--flush-cache`): whether it was, None without the flag.
    async fn flush(&mut self) -> anyhow::Result<Option<bool>> {
        let Some(flusher) = self.flusher.as_mut() else {
            return Ok(None);
        };
        let mut warning = None;
        let done = until_stopped(&self.ctx.stop, async {
            Ok(flusher
                .flush(&self.ctx.pool, self.args.timeout, &mut |w| {
                    warning = Some(w)
                })
                .await)
        })
        .await?;
        if let Some(w) = warning {
            self.warn_once(w);
        }
        if done {
            self.warm.clear();
        }
        Ok(Some(done))
    }

    /// Runs one sweep point (after its warmup) and writes its summary.
    pub(crate) async fn point(
        &mut self,
        mut key: PointKey,
        load: Load,
        work: &Work,
    ) -> anyhow::Result<PointOutcome> {
        match load {
            Load::Closed { concurrency } => key.concurrency = Some(concurrency),
            Load::Open { rate_rps, .. } => key.rate_rps = Some(rate_rps),
            Load::Trace { speed, .. } => key.trace_speed = Some(speed),
        }
        let cache_flushed = self.flush().await?;
        let maker = Arc::new(Maker {
            template: work.template.clone(),
            max_tokens: work.max_tokens,
            source: work.source.as_ref().clone(),
            seed: self.args.seed(),
            max_given: work.max_given,
            groups: self.args.prefix_groups.unwrap_or(0),
        });
        let ctx = self.ctx.clone();
        let seed = self.args.arrival_seed(&key);
        // One rank of several takes its share of the point (`total` names the point).
        let total = load;
        let (load, budget) = self.ranks.part(&total, self.budget(&total));
        if let Some(w) = self.args.warmup {
            let budget = match w {
                Warmup::Requests(n) => Budget::Requests(n),
                Warmup::Time(d) => Budget::Time(d),
            };
            if !matches!(budget, Budget::Requests(0)) {
                self.ranks.start_together(&total).await?;
                let warmup = Phase {
                    load,
                    budget: self.ranks.part(&total, budget).1,
                    arrival_seed: seed ^ 0xa11,
                    maker: maker.clone(),
                };
                let mut sent = 0u64;
                let ended = ctx.phase(warmup, &mut |_, _| sent += 1).await;
                self.touch_groups(sent, work);
                if ended != Ended::Completed {
                    if ctx.stop.is_aborted() {
                        return Err(stopped(&ctx.stop));
                    }
                    let ended = self.ranks.failure().unwrap_or(ended);
                    let mut summary = self.summary(&PointStats::new(), key, &ended, 0.0, &total);
                    self.describe(&mut summary, work);
                    summary.cache_flushed = cache_flushed;
                    return self.finish_point(summary, ended, None, 0, &load).await;
                }
            }
        }
        if let Some(n) = load
            .slots()
            .filter(|_| !matches!(budget, Budget::Requests(0)))
        {
            // Bounded by --timeout per connection, and given up at a stop.
            tokio::select! {
                _ = ctx.pool.prewarm(n as usize, self.args.timeout) => {}
                _ = ctx.stop.wait() => {}
            }
        }
        if let Some(t) = &self.telemetry {
            // Bounded (the scrape timeout; the GPU host's connection before the first point),
            // and given up at a stop.
            tokio::select! {
                _ = t.begin() => {}
                _ = ctx.stop.wait() => {}
            }
        }
        self.ranks.start_together(&total).await?;
        let cpu_before = cpu_seconds();
        let mut stats = PointStats::new();
        let mut first_failure = None;
        let slo = self.args.slo.clone();
        let labels = self.labels.clone();
        let write_requests = !self.args.no_requests;
        let progress = Progress::new(&key, &budget);
        let out = &mut *self.out;
        let first_errors = &mut self.first_errors;
        let stop = ctx.stop.clone();
        let mut write_error: Option<anyhow::Error> = None;
        let mut on_done = |f: Finished, point_start: Instant| {
            let meta = RequestMeta {
                point: key.clone(),
                id: f.id,
                point_start,
                intended: f.intended,
                dispatched: f.dispatched,
                prompt_tokens_target: f.target,
                max_tokens: Some(f.max_tokens),
                turn: f.turn,
            };
            let rec = to_record(meta, f.outcome, &labels);
            stats.add_request(&rec, slo.as_ref());
            if let Some(e) = &rec.error {
                if first_failure.is_none() {
                    first_failure = Some((e.class, e.message.clone()));
                }
                if first_errors.insert(e.class) {
                    cli::warn(format!(
                        "first {} error: request {}: {}",
                        e.class, rec.id, e.message
                    ));
                }
            }
            progress.tick(&stats);
            if write_requests
                && write_error.is_none()
                && let Err(e) = out.emit(&rec)
            {
                // Nothing more can be delivered: stop sending and cancel what is in flight.
                write_error = Some(e.into());
                stop.abort();
            }
        };
        let measured = Phase {
            load,
            budget,
            arrival_seed: seed,
            maker,
        };
        let ended = ctx.phase(measured, &mut on_done).await;
        progress.finish();
        if let Some(e) = write_error {
            return Err(e);
        }
        if ctx.stop.is_aborted() {
            return Err(stopped(&ctx.stop));
        }
        // As one rank of several, rank 0 ends the server's window once every rank has finished
        // (in the merge).
        let tele = match &self.telemetry {
            Some(t) if self.ranks.is_none() => t.end(stats.output_tokens).await,
            _ => PointTelemetry::default(),
        };
        let cpu = cpu_seconds() - cpu_before - tele.cpu_s;
        let ended = self.ranks.failure().unwrap_or(ended);
        let mut summary = self.summary(&stats, key, &ended, cpu, &total);
        self.describe(&mut summary, work);
        summary.cache_flushed = cache_flushed;
        let cold = self.touch_groups(stats.requests, work);
        summary.prefix_hit_rate_expected = self.expected_hit_rate(stats.requests, cold, work);
        if self.telemetry.is_some() && self.ranks.is_none() {
            summary.telemetry_cpu_s = Some(tele.cpu_s);
        }
        (summary.server, summary.gpus) = (tele.server, tele.gpus);
        self.finish_point(summary, ended, first_failure, stats.good, &load)
            .await
    }

    /// Writes the point's summary (as one rank of several: its part, then the merged one
    /// decides how the point ended on every rank).
    async fn finish_point(
        &mut self,
        summary: SummaryRecord,
        ended: Ended,
        first_failure: Option<(ErrorClass, String)>,
        good: u64,
        share: &Load,
    ) -> anyhow::Result<PointOutcome> {
        let slo = self.args.slo.as_ref();
        let (summary, ended, good) = self
            .ranks
            .finish(
                summary,
                (ended, good),
                share,
                slo,
                self.out,
                self.telemetry.as_ref(),
            )
            .await?;
        Ok(PointOutcome {
            summary,
            ended,
            first_failure,
            good,
        })
    }

    fn summary(
        &self,
        stats: &PointStats,
        key: PointKey,
        ended: &Ended,
        cpu: f64,
        load: &Load,
    ) -> SummaryRecord {
        let partial = *ended != Ended::Completed;
        let mut s = stats.to_summary(key, self.labels.clone(), partial, self.args.slo.as_ref());
        match ended {
            Ended::Completed => {}
            Ended::Stopped => s.stopped_by = Some(PointStop::Interrupted),
            Ended::ServerDown(why) => {
                s.stopped_by = Some(PointStop::ServerDown);
                s.stop_reason = Some(why.clone());
            }
            Ended::RankFailed(why) => {
                s.stopped_by = Some(PointStop::RankFailed);
                s.stop_reason = Some(why.clone());
            }
        }
        s.client_cpu_s = Some(cpu);
        s.model = Some(self.model.clone());
        s.api = Some(self.args.api.name().to_string());
        s.seed = Some(self.args.seed());
        if let Load::Open {
            arrival,
            max_concurrency,
            ..
        } = load
        {
            s.arrival = Some(arrival.name());
            s.max_concurrency = *max_concurrency;
        }
        crate::conversation::describe(&self.args, &mut s);
        crate::trace::describe(&self.args, load, &mut s);
        s
    }
}

impl Args {
    fn arrival_seed(&self, key: &PointKey) -> u64 {
        self.seed() ^ (u64::from(key.index) << 32) ^ u64::from(key.repeat)
    }

    /// The run's seed: `--seed`, else the one [`Args::draw_seed`] drew as the run started.
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or_default()
    }

    /// Without `--seed`, draws the run's seed: a fresh one each run, so a rerun against the
    /// same server sends prompts its prefix cache has not seen. 53 bits, so that every JSON
    /// reader (jq, JavaScript) gives the recorded seed back exactly for `--seed`.
    pub fn draw_seed(&mut self) -> u64 {
        *self.seed.get_or_insert_with(|| rand::random::<u64>() >> 11)
    }
}
