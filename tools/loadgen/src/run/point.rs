//! One point of the run: its warmup, the measured phase through the dispatcher, and its
//! summary from the collector (the `request` records written as requests finish). As one rank
//! of several, the point's part is this rank's share, started together with the others, and
//! the summary the merged one.

use crate::Warmup;
use crate::client::body::Bodies;
use crate::client::inflight::Finished;
use crate::client::request::{RequestMeta, to_record};
use crate::pacing::Load;
use crate::plan::Plan;
use crate::ranks::{Hooks, Ranks};
use crate::run::dispatch::{Context, Phase};
use crate::run::flush::Flusher;
use crate::run::progress::{Progress, cpu_seconds};
use crate::stop::{Ended, stopped, until_stopped};
use crate::telemetry::steplog::StepLog;
use crate::telemetry::trtllm::{PointReport, TrtllmReport};
use crate::telemetry::{PointTelemetry, Telemetry};
use crate::workload::Workload;
use crate::workload::align::Aligner;
use servbench::cli;
use servbench::jsonl::RecordWriter;
use servbench::load::Budget;
use servbench::record::{ErrorClass, Labels, PointKey, PointStop, RequestRecord, SummaryRecord};
use servbench::stats::PointStats;
use servbench::stats::busy::BusyWindow;
use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

/// The most request records of a point held for the engine's report (TensorRT-LLM's
/// `/perf_metrics` keeps as many at most under srv-launch `--self-report`); later ones are
/// written as they finish, without it.
const MAX_HELD: usize = 65_536;
/// The longest one read of the engine's report may take.
const REPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) struct Run<'a, W: Write> {
    pub(crate) plan: Plan,
    pub(crate) ctx: Context,
    pub(crate) labels: Labels,
    pub(crate) out: &'a mut RecordWriter<W>,
    pub(crate) model: String,
    pub(crate) first_errors: BTreeSet<ErrorClass>,
    pub(crate) aligner: Aligner,
    pub(crate) flusher: Option<Flusher>,
    /// The server's metrics and GPUs, read on a thread of their own.
    pub(crate) telemetry: Option<Telemetry>,
    /// A P/D group's prefill and decode servers behind the target, each one's metrics read too.
    pub(crate) pd_members: crate::telemetry::members::Members,
    /// The server's step log, read at each point's edges.
    pub(crate) steplog: Option<StepLog>,
    /// TensorRT-LLM's `/perf_metrics` and iteration stats, read at each point's edges.
    pub(crate) trtllm: Option<TrtllmReport>,
    /// Warnings already given (each once per run).
    pub(crate) warned: BTreeSet<String>,
    /// Prefix groups sent since the cache was last emptied, by (group, prefix words).
    pub(crate) warm: BTreeSet<(u32, usize)>,
    /// The server's context length, where /v1/models says.
    pub(crate) max_model_len: Option<u32>,
    /// This process as one rank of several, when it is.
    pub(crate) ranks: Option<Ranks>,
}

/// What a point's requests are made of.
pub(crate) struct Work {
    pub(crate) bodies: Arc<Bodies>,
    pub(crate) workload: Arc<dyn Workload>,
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

    /// Marks the prefix groups the first `n` requests of a phase used as cached; returns how
    /// many of them were not cached before.
    fn touch_groups(&mut self, n: u64, work: &Work) -> u64 {
        let warmed = work.workload.groups_warmed(n);
        warmed.into_iter().filter(|g| self.warm.insert(*g)).count() as u64
    }

    /// What the summary says about the requests' bodies and the workload.
    fn describe(&self, s: &mut SummaryRecord, work: &Work, load: &Load) {
        self.plan.load.describe(load, s);
        s.workload.stream = Some(self.plan.body.stream);
        s.workload.temperature = work.bodies.template.temperature();
        s.workload.top_p = work.bodies.template.top_p();
        s.workload.eval = self
            .plan
            .workload
            .eval
            .as_ref()
            .map(|(file, _)| file.clone());
        s.workload.response_format = self
            .plan
            .body
            .response_format
            .as_ref()
            .map(|f| f.file.clone());
        s.workload.extra_body = self
            .plan
            .body
            .extra
            .as_ref()
            .map(|e| serde_json::Value::Object(e.0.clone()));
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
        // Requests cancelled on purpose are no failures: only a point of failures is one.
        if p.summary.ok > 0 || p.summary.errors == 0 {
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

    fn budget(&self, load: &Load, work: &Work) -> Budget {
        let asked = self.plan.budget.asked;
        if let Some(b) = work.workload.budget(load, asked) {
            return b;
        }
        match self.plan.load.budget(load) {
            Some(b) => b,
            None => unreachable!("a trace's budget is its rows"),
        }
    }

    /// Empties the server's prefix cache (`--flush-cache`): whether it was, None without the flag.
    async fn flush(&mut self) -> anyhow::Result<Option<bool>> {
        let Some(flusher) = self.flusher.as_mut() else {
            return Ok(None);
        };
        let mut warning = None;
        let done = until_stopped(&self.ctx.stop, async {
            Ok(flusher
                .flush(&self.ctx.pool, self.plan.timeout, &mut |w| {
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
        let ctx = self.ctx.clone();
        let seed = self.plan.arrival_seed(key.index, key.repeat);
        // One rank of several takes its share of the point (`total` names the point).
        let total = load;
        let (load, budget) = self.ranks.part(&total, self.budget(&total, work));
        if let Some(w) = self.plan.budget.warmup {
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
                    work: work.workload.clone(),
                    bodies: work.bodies.clone(),
                    cancel: None,
                };
                let mut sent = 0u64;
                let ended = ctx.phase(warmup, &mut |_, _| sent += 1).await;
                self.touch_groups(sent, work);
                if ended != Ended::Completed {
                    if ctx.stop.is_aborted() {
                        return Err(stopped(&ctx.stop));
                    }
                    let ended = self.ranks.failure().unwrap_or(ended);
                    let mut summary = self.summary(&PointStats::new(), key, &ended, 0.0);
                    self.describe(&mut summary, work, &total);
                    summary.workload.cache_flushed = cache_flushed;
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
                _ = ctx.pool.prewarm(n as usize, self.plan.timeout) => {}
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
        if !self.pd_members.is_empty() {
            tokio::select! {
                _ = self.pd_members.begin() => {}
                _ = ctx.stop.wait() => {}
            }
        }
        if let Some(log) = &mut self.steplog {
            // Bounded reads (the log's size), before any request of the point is sent.
            tokio::task::block_in_place(|| log.begin());
        }
        if let Some(t) = &mut self.trtllm {
            // Bounded (the scrape timeout), and given up at a stop.
            tokio::select! {
                _ = t.begin(&ctx.pool, REPORT_TIMEOUT.min(self.plan.timeout)) => {}
                _ = ctx.stop.wait() => {}
            }
        }
        self.ranks.start_together(&total).await?;
        let cpu_before = cpu_seconds();
        let mut stats = PointStats::new();
        // The wall time with a request in flight: the engine's steps are over it.
        let mut busy = BusyWindow::new();
        let mut first_failure = None;
        let slo = self.plan.slo.clone();
        let generates = self.plan.body.api.generates();
        let images = self.plan.body.images.map(|i| i.count);
        // The adapter each request named, as its body did (`Bodies::build`).
        let lora = self.plan.lora.clone().map(|m| (m, self.plan.seed));
        let response_format = self.plan.body.response_format.clone();
        let labels = self.labels.clone();
        let write_requests = self.plan.write_requests;
        let progress = Progress::new(&key, &budget);
        let out = &mut *self.out;
        let first_errors = &mut self.first_errors;
        let stop = ctx.stop.clone();
        let mut write_error: Option<anyhow::Error> = None;
        // Records the engine's report is joined to at the point's end, held until then.
        // (TensorRT-LLM's `/perf_metrics`; SGLang's time stats in its log.)
        let joins =
            self.trtllm.is_some() || self.steplog.as_ref().is_some_and(StepLog::joins_requests);
        let mut held: Option<Vec<RequestRecord>> = joins.then(Vec::new);
        let mut point_started: Option<Instant> = None;
        let mut on_done = |f: Finished, point_start: Instant| {
            point_started.get_or_insert(point_start);
            let meta = RequestMeta {
                point: key.clone(),
                id: f.id,
                point_start,
                intended: f.intended,
                dispatched: f.dispatched,
                // The server counts the images by its own rule: the text alone was aligned.
                prompt_tokens_target: f.target.filter(|_| images.is_none()),
                max_tokens: generates.then_some(f.max_tokens),
                images,
                turn: f.turn,
            };
            // Only a whole answer is judged: a failed or cancelled one has none.
            let whole = f.outcome.failure.is_none() && f.outcome.abandoned_after.is_none();
            let verdict = f
                .question
                .as_ref()
                .map(|q| q.judge(f.outcome.reply_text().filter(|_| whole)));
            let json = response_format
                .as_ref()
                .map(|r| r.judge(f.outcome.reply_text().filter(|_| whole)));
            let mut rec = to_record(meta, f.outcome, &labels);
            rec.eval = verdict;
            rec.json = json;
            rec.adapter = lora
                .as_ref()
                .map(|(m, seed)| m.name(*seed, rec.id).to_string());
            if let Some(e2e) = rec.e2e_ms {
                busy.add(rec.intended_ms + rec.send_lag_ms, rec.intended_ms + e2e);
            }
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
            if let Some(h) = held.as_mut().filter(|h| h.len() < MAX_HELD) {
                h.push(rec);
                return;
            }
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
            work: work.workload.clone(),
            bodies: work.bodies.clone(),
            cancel: self.plan.cancel,
        };
        let ended = ctx.phase(measured, &mut on_done).await;
        progress.finish();
        let mut report = PointReport::default();
        let busy_s = busy.total() / 1e3;
        // The log's window is read before the join: SGLang's time stats are in it.
        if let (Some(log), Some(at)) = (self.steplog.as_mut(), point_started) {
            log.point_started(at);
        }
        let logged = self
            .steplog
            .as_mut()
            .filter(|_| !ctx.stop.is_aborted())
            .and_then(|log| tokio::task::block_in_place(|| log.end(key.index, busy_s)));
        let logged_timings = self
            .steplog
            .as_mut()
            .map(StepLog::take_timings)
            .unwrap_or_default();
        if let Some(held) = held {
            // Joined, then written: after a stop too (without the read then).
            if let Some(t) = self.trtllm.as_mut().filter(|_| !ctx.stop.is_aborted()) {
                tokio::select! {
                    r = t.end(&ctx.pool, REPORT_TIMEOUT.min(self.plan.timeout)) => report = r,
                    _ = ctx.stop.wait() => {}
                }
            }
            let mut missing = 0;
            let n = held.len() as u64;
            for mut rec in held {
                let found = rec
                    .response_id
                    .as_deref()
                    .and_then(|id| report.timing_of(id).or_else(|| logged_timings.get(id)));
                match found {
                    Some(t) if rec.server_timing.is_none() => {
                        rec.server_timing = Some(t.clone());
                        stats.ttft_split.add(&rec);
                    }
                    Some(_) => {}
                    None => missing += u64::from(rec.is_ok()),
                }
                if write_requests
                    && write_error.is_none()
                    && let Err(e) = out.emit(&rec)
                {
                    write_error = Some(e.into());
                }
            }
            if let Some(t) = self.trtllm.as_mut().filter(|_| !ctx.stop.is_aborted()) {
                t.unjoined(missing, n);
            }
            if let Some(log) = self.steplog.as_mut().filter(|l| l.joins_requests()) {
                log.unjoined(key.index, missing, n);
            }
        }
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
        let (pd_members, members_cpu_s) = match self.ranks.is_none() {
            true => self.pd_members.end().await,
            false => (Vec::new(), 0.0),
        };
        // TensorRT-LLM's iteration stats where it gave them, else its log.
        let engine_steps = self
            .trtllm
            .as_mut()
            .and_then(|t| t.steps(&report, key.index, busy_s))
            .or(logged);
        let cpu = cpu_seconds() - cpu_before - tele.cpu_s - members_cpu_s;
        let ended = self.ranks.failure().unwrap_or(ended);
        let mut summary = self.summary(&stats, key, &ended, cpu);
        self.describe(&mut summary, work, &total);
        summary.workload.cache_flushed = cache_flushed;
        let cold = self.touch_groups(stats.requests, work);
        summary.workload.prefix_hit_rate_expected =
            work.workload.expected_hit_rate(stats.requests, cold);
        if self.telemetry.is_some() && self.ranks.is_none() {
            summary.telemetry_cpu_s = Some(tele.cpu_s + members_cpu_s);
        }
        summary.pd_members = pd_members;
        (summary.server, summary.gpus) = (tele.server, tele.gpus);
        summary.engine_steps = engine_steps;
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
        let slo = self.plan.slo.as_ref();
        let (summary, ended, good) = match &mut self.ranks {
            None => {
                self.out.emit(&summary)?;
                (summary, ended, good)
            }
            Some(r) => {
                r.finish(summary, share, slo, self.out, self.telemetry.as_ref())
                    .await?
            }
        };
        Ok(PointOutcome {
            summary,
            ended,
            first_failure,
            good,
        })
    }

    fn summary(&self, stats: &PointStats, key: PointKey, ended: &Ended, cpu: f64) -> SummaryRecord {
        let partial = *ended != Ended::Completed;
        let mut s = stats.to_summary(key, self.labels.clone(), partial, self.plan.slo.as_ref());
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
        s.workload.api = Some(self.plan.body.api.name().into());
        s.workload.seed = Some(self.plan.seed);
        if let Some(m) = &self.plan.lora {
            s.workload.lora = m.names.to_vec();
            s.workload.lora_assignment = Some(m.assignment_text());
        }
        if let Some(c) = self.plan.cancel {
            s.workload.cancel_rate = Some(c.rate);
            s.workload.cancel_after = Some(c.after.text());
        }
        s
    }
}
