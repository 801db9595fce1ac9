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
//! target, engine and labels from the flags and stdin; signals), `probe.rs` (the model, how
//! the server counts tokens), `point.rs` (one point: warmup, phase, summary), `dispatch.rs`
//! (the dispatch loop), `inflight.rs` (the request tasks), `health.rs` (the dead-server
//! watch), `progress.rs` (the progress line, client CPU), `flush.rs` (`--flush-cache`),
//! `downstream.rs` (the watch on stdout's reader).

pub mod dispatch;
pub mod downstream;
pub mod entry;
pub mod flush;
pub mod health;
pub mod inflight;
pub mod point;
pub mod probe;
pub mod progress;
pub mod setup;

pub use setup::Setup;

use crate::Args;
use crate::client::http::Pool;
use crate::limits;
use crate::run::dispatch::Context;
use crate::run::flush::Flusher;
use crate::run::point::Run;
use crate::run::probe::{Aligner, Model};
use crate::stop::until_stopped;
use crate::telemetry::{self, Telemetry};
use anyhow::Context as _;
use servbench::cli::{self, Exit};
use servbench::jsonl::RecordWriter;
use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

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
            setup::watch_signals(setup.stop.clone());
        }
        let _watch = setup
            .watch_stdout
            .then(|| downstream::Watch::start(setup.stop.clone()));
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
