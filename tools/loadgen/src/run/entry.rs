//! The binary's start: alone, the target from `--url` or the `server` record on stdin; as one
//! rank of several ([`crate::ranks`]), rank 0 resolves the target and tells the others the job
//! (its target, labels and seed), then every rank runs its share.

use crate::Args;
use crate::plan::Plan;
use crate::ranks::link::{Sink, finish_wait};
use crate::ranks::{Job, RankOutput, Ranks};
use crate::run::run_plan;
use crate::run::setup::{Setup, target, upstream, watch_signals};
use crate::stop::Stop;
use servbench::cli::{self, Exit};
use servbench::jsonl::RecordWriter;
use servbench::ranks as shared;
use servbench::record::{inherit_labels, label};
use std::time::Duration;

/// Entry point from main: the target from `--url` or the `server` record on stdin, records to
/// stdout, Ctrl-C/SIGTERM as the stop. One rank of several runs through [`crate::ranks`].
pub fn main(args: Args) -> anyhow::Result<Exit> {
    let plan = args.plan()?;
    if let Some(ranks) = crate::ranks::join(&plan.ranks, plan.fingerprint)? {
        return rank(plan, ranks);
    }
    let mut out = RecordWriter::stdout();
    // Caught before upstream is read: a Ctrl-C while srv-launch's record is on its way still
    // passes it on (srv-kill downstream needs it), then ends the run.
    let stop = Stop::new();
    watch_signals(stop.clone());
    let up = upstream(&plan, &mut out)?;
    if stop.is_stopped() {
        return Err(cli::Interrupted.into());
    }
    let setup = Setup {
        target: target(&plan, &up.url, up.from)?,
        engine: up.engine,
        labels: up.labels_with(plan.labels.clone()),
        stop,
        signals: false,
        watch_stdout: true,
        upstream: up.background,
        ranks: None,
        server: up.server,
        pd_members: up.pd_members,
    };
    run_plan(plan, setup, &mut out)
}

/// loadgen's main as one rank: rank 0 takes the target from `--url` or stdin (passing
/// upstream records on) and tells the others; then every rank runs the sweep.
fn rank(plan: Plan, ranks: Ranks) -> anyhow::Result<Exit> {
    let link = ranks.link();
    let result = match rank_main(plan, ranks) {
        // A rank that failed or vanished stopped this one: say that, not "interrupted".
        Err(e) if e.downcast_ref::<cli::Interrupted>().is_some() => match link.failed() {
            Some(why) => Err(cli::failure(why)),
            None => Err(e),
        },
        other => other,
    };
    if let Err(e) = &result
        && link.failed().is_none()
        && !matches!(e.downcast_ref::<servbench::jsonl::OutputError>(), Some(o) if o.is_closed())
    {
        link.fail(format!("{} failed: {e:#}", link.name(link.rank)));
    }
    link.finish(finish_wait(Duration::from_secs(5)));
    result
}

fn rank_main(plan: Plan, mut ranks: Ranks) -> anyhow::Result<Exit> {
    let mut out = RecordWriter::stdout();
    let rank = ranks.rank();
    // Only rank 0 empties the server's cache (before the point's common start) and watches the
    // server (its engine, its server record).
    let (job, background, engine, server) = if rank == 0 {
        let up = upstream(&plan, &mut out)?;
        let job = Job {
            url: up.url,
            from: up.from.to_string(),
            labels: up.server_labels,
            seed: plan.seed,
        };
        ranks.tell_job(&job)?;
        (job, up.background, up.engine, up.server)
    } else {
        (ranks.hear_job()?, None, None, None)
    };
    // Every rank's seeds derive from rank 0's: the job is reproducible from the one seed its
    // merged summaries record.
    let plan = plan.for_rank(job.seed, rank);
    let own = plan.labels.clone();
    let mut labels = match &job.labels {
        Some(up) => inherit_labels(up, &own),
        None => own,
    };
    labels.insert(label::RANK.into(), rank.to_string());
    labels
        .entry(label::HOST.into())
        .or_insert_with(shared::hostname);
    let from = if rank == 0 {
        job.from.clone()
    } else {
        format!("{} (from rank 0)", job.from)
    };
    let gathered = (rank != 0 && ranks.output() == RankOutput::Rank0).then(|| ranks.link());
    let setup = Setup {
        target: target(&plan, &job.url, &from)?,
        engine,
        labels,
        stop: ranks.stop(),
        signals: true,
        watch_stdout: gathered.is_none(),
        upstream: background,
        ranks: Some(ranks),
        server,
        // One view of the server, rank 0's merged one: the members are not read apart.
        pd_members: Vec::new(),
    };
    match gathered {
        Some(link) => run_plan(plan, setup, &mut RecordWriter::new(Sink::new(link))),
        None => run_plan(plan, setup, &mut out),
    }
}
