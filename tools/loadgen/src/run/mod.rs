//! The run: finds the target and model, aligns prompt lengths, then the mode (`modes/`) walks
//! its points, each run by [`point`]: one dispatcher loop (`dispatch.rs`) fed by the point's
//! workload (`workload/`), its finished requests back to one collector that writes `request`
//! records and builds the point's `summary` with the shared statistics. Ctrl-C/SIGTERM stops
//! any phase, start-up included: no new requests, in-flight ones get `--grace`, a partial
//! summary, exit 130; a second one exits at once. A stdout nobody reads any more stops
//! everything at once (there is nobody to tell). A server found down ends the point (partial,
//! `stopped_by: server_down`) and the run with exit 1.
//!
//! Files: `entry.rs` (the binary's start, alone or as one rank of several), `setup.rs` (the
//! target, engine and labels from the flags and stdin; signals), `probe.rs` (the model the
//! server serves), `point.rs` (one point: warmup, phase, summary), `dispatch.rs` (the dispatch
//! loop, its request tasks in `client/inflight.rs`), `health.rs` (the dead-server watch),
//! `progress.rs` (the progress line, client CPU), `flush.rs` (`--flush-cache`),
//! `downstream.rs` (the watch on stdout's reader).

pub mod dispatch;
pub mod downstream;
pub mod entry;
pub mod flush;
pub mod health;
pub mod point;
pub mod probe;
pub mod progress;
pub mod setup;

pub use setup::Setup;

use crate::Args;
use crate::client::http::Pool;
use crate::plan::Plan;
use crate::run::dispatch::Context;
use crate::run::flush::Flusher;
use crate::run::point::Run;
use crate::run::probe::Model;
use crate::stop::until_stopped;
use crate::telemetry::steplog::StepLog;
use crate::telemetry::trtllm::TrtllmReport;
use crate::telemetry::{self, Telemetry};
use crate::workload::align::Aligner;
use anyhow::Context as _;
use servbench::cli::{self, Exit};
use servbench::jsonl::RecordWriter;
use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// The whole run: the model, every sweep point (or ramp), their records to `out`.
/// A library caller's entry: the flags' plan, then [`run_plan`].
pub fn run<W: Write>(args: Args, setup: Setup, out: &mut RecordWriter<W>) -> anyhow::Result<Exit> {
    run_plan(args.plan()?, setup, out)
}

/// The whole run of `plan` (one rank's, for one of several).
pub fn run_plan<W: Write>(
    plan: Plan,
    setup: Setup,
    out: &mut RecordWriter<W>,
) -> anyhow::Result<Exit> {
    // Of several ranks, rank 0 alone empties the cache (before the point's common start) and
    // watches the server: one server, one view of it.
    let first = setup.ranks.as_ref().is_none_or(|r| r.rank() == 0);
    let flusher = Flusher::for_run(plan.flush_cache && first, setup.engine)?;
    let telemetry = match first {
        true => Telemetry::start(telemetry::plan(
            &plan.telemetry,
            &setup.target,
            setup.server.as_ref(),
        )?),
        false => None,
    };
    let pd_members = match first {
        true => telemetry::members::Members::start(&plan.telemetry, &setup.pd_members)?,
        false => telemetry::members::Members::default(),
    };
    // One server, one view of its steps: a single process's run only (ranks: not read).
    let steplog = match setup.ranks.is_none() {
        true => StepLog::for_server(setup.server.as_ref(), &plan.telemetry.ssh),
        false => None,
    };
    // TensorRT-LLM's report is emptied by each read: one reader, as for the step log.
    let trtllm = match setup.ranks.is_none() {
        true => TrtllmReport::for_server(setup.server.as_ref()),
        false => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(plan.threads)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        if setup.signals {
            setup::watch_signals(setup.stop.clone());
        }
        let _watch = setup
            .watch_stdout
            .then(|| downstream::Watch::start(setup.stop.clone()));
        let pool = Arc::new(Pool::new(setup.target));
        let stop = setup.stop.clone();
        let found = probe::find_model(&pool, plan.body.model.as_deref(), plan.timeout);
        let Model {
            name: model,
            max_model_len,
        } = until_stopped(&stop, found).await?;
        plan.lengths.check(max_model_len)?;
        let ctx = Context {
            pool: pool.clone(),
            api: plan.body.api,
            stream: plan.body.stream,
            timeout: plan.timeout,
            record_text: plan.record_text,
            grace: plan.grace,
            seq: Arc::new(AtomicU64::new(0)),
            stop: setup.stop,
        };
        let mut aligner = Aligner::new(
            pool,
            plan.body.api,
            model.clone(),
            plan.body.shared_prefix,
            // The job's: the shared prefix is common to every rank.
            plan.job_seed,
            plan.timeout,
        );
        aligner.extra = plan.body.extra.clone();
        let mut run = Run {
            plan,
            ctx,
            labels: setup.labels,
            out,
            model,
            first_errors: BTreeSet::new(),
            aligner,
            flusher,
            warned: BTreeSet::new(),
            warm: BTreeSet::new(),
            max_model_len,
            ranks: setup.ranks,
            telemetry,
            pd_members,
            steplog,
            trtllm,
        };
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
