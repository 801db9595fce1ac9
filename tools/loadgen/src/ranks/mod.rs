//! loadgen from many machines at once, under the launchers people already run (mpirun, srun)
//! or started by hand (`--rank R --world N --coordinator HOST:PORT`). Each process is one rank
//! and takes its share of every point: `-c 256` over 4 ranks is 64 each (a remainder goes to
//! the first ranks), `-r 100` is 25 req/s each from an arrival stream of its own (independent
//! Poisson streams add up to a Poisson stream at the asked rate; constant arrivals are
//! interleaved by starting rank r r/rate later), `-n` and `--warmup` counts are split the same
//! way, and each rank draws from a seed of its own derived from the job's (`--seed`, else one
//! rank 0 draws and tells the others).
//!
//! Points are synchronized through rank 0 ([`link`]): every rank says it is ready, rank 0
//! names an instant a moment ahead on its clock, and each rank starts then on its own clock
//! corrected by the offset measured at the rendezvous. After a point each rank sends rank 0
//! its summary; rank 0 merges them exactly (the shared statistics, as summarize merges), writes
//! the merged summary and sends it back, so every rank goes on (or stops a ramp) on the same
//! merged figures. A rank that dies or goes silent fails the point on every rank, naming it.
//!
//! The hooks in `run/point.rs` are few: [`Ranks::share`] for a point's load,
//! [`Ranks::start_together`] before each phase, [`Ranks::finish`] after the point's summary.
//! The rank's start (the job from rank 0, its labels) is `run/entry.rs`.

pub mod link;

use crate::pacing::{Arrival, Load};
use crate::stop::{Ended, Stop};
use crate::telemetry::Telemetry;
use clap::ValueEnum;
use link::{Inbound, Link, tag};
use serde::{Deserialize, Serialize};
use servbench::cli;
use servbench::jsonl::RecordWriter;
use servbench::load::Budget;
use servbench::ranks::clock::{self, Offset};
use servbench::ranks::{self as shared, Detected};
use servbench::record::{self, Labels, PointStop, RankPart, SummaryRecord, Workload};
use servbench::stats::{PointStats, Slo};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// Where the ranks' records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum RankOutput {
    /// Every rank's records on rank 0's stdout, each line whole (launchers merge the ranks'
    /// stdouts and could cut long lines into each other).
    #[default]
    Rank0,
    /// Each rank's records on its own stdout (one file per rank: `srun --output=run-%t.jsonl`,
    /// one SSH session per host); rank 0's also holds the merged summaries.
    Each,
}

/// The flags of a job of several loadgens.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Several machines (mpirun, srun, or by hand)")]
pub struct RankArgs {
    /// This process's rank in a job started by hand (with --world and --coordinator); mpirun
    /// and srun say it themselves
    #[arg(long)]
    pub rank: Option<usize>,
    /// Processes in the job started by hand; --world 1 runs alone even under a launcher
    #[arg(long)]
    pub world: Option<usize>,
    /// HOST:PORT where rank 0 listens and the other ranks join, reachable from every rank
    #[arg(long, env = "LOADGEN_COORDINATOR")]
    pub coordinator: Option<String>,
    /// Where the ranks' records go: rank0 (all on rank 0's stdout) or each (every rank on its own)
    #[arg(long, value_enum, default_value = "rank0")]
    pub rank_output: RankOutput,
    /// How long rank 0 waits for every rank to join (and the others for rank 0)
    #[arg(long, default_value = "120s", value_parser = servbench::cli::parse_duration)]
    pub rank_timeout: Duration,
}

/// How far ahead of now rank 0 sets a start: long enough for the word to reach every rank.
const START_AHEAD_MS: f64 = 100.0;

/// This process as one rank of a job.
pub struct Ranks {
    link: Arc<Link>,
    inbox: UnboundedReceiver<Inbound>,
    stop: Stop,
    clock: Offset,
    output: RankOutput,
    job_seed: u64,
    /// Synchronizations so far (both ends count them, so a message out of step is caught).
    seq: u64,
    /// When this rank started its last phase (unix ms, own clock, less a planned offset).
    started_unix_ms: f64,
}

/// What rank 0 tells every rank before the first point.
#[derive(Serialize, Deserialize)]
pub(crate) struct Job {
    pub url: String,
    pub from: String,
    /// The upstream `server` record's labels, which every rank's records inherit.
    pub labels: Option<Labels>,
    /// The job's seed: `--seed`, else the one rank 0 drew (each rank derives its own from it).
    pub seed: u64,
}

/// Joins the job when this process is one rank of several (flags, or mpirun's, a PMI
/// launcher's or srun's variables); `None` when it runs alone.
pub fn join(a: &RankArgs, fingerprint: u64) -> anyhow::Result<Option<Ranks>> {
    let flags = shared::Flags {
        rank: a.rank,
        world: a.world,
        coordinator: a.coordinator.clone(),
    };
    let env = |k: &str| std::env::var(k).ok();
    let Detected::Rank(id) = shared::detect(&flags, &[], "LOADGEN_COORDINATOR", env)? else {
        return Ok(None);
    };
    let stop = Stop::new();
    let forward = a.rank_output == RankOutput::Rank0;
    let c = link::connect(&id, fingerprint, a.rank_timeout, stop.clone(), forward)
        .map_err(|e| link::join_error(id.rank, e))?;
    Ok(Some(Ranks {
        link: c.link,
        inbox: c.inbox,
        stop,
        clock: c.clock,
        output: a.rank_output,
        // Set from rank 0's word (the job's message) before the first point.
        job_seed: 0,
        seq: 0,
        started_unix_ms: 0.0,
    }))
}

impl Ranks {
    pub fn rank(&self) -> usize {
        self.link.rank
    }

    pub fn world(&self) -> usize {
        self.link.world
    }

    /// The job's seed (`--seed` or rank 0's draw), the same on every rank.
    pub fn job_seed(&self) -> u64 {
        self.job_seed
    }

    /// This rank's seed, derived from the job's.
    pub fn seed(&self) -> u64 {
        shared::rank_seed(self.job_seed, self.rank())
    }

    /// The first failure of the job noticed here (a rank gone or failed), naming the rank.
    pub fn failed(&self) -> Option<String> {
        self.link.failed()
    }

    /// This rank's part of a point's load and budget (see [`share_of`]).
    pub fn share(&self, load: &Load, budget: Budget) -> (Load, Budget) {
        share_of(load, budget, self.world(), self.rank())
    }

    /// Waits until every rank is ready, then until the instant rank 0 names (on this rank's
    /// clock, corrected by its offset; for constant arrivals rank r goes r/rate later, so the
    /// ranks' sends interleave). `total` is the point's whole load.
    pub async fn start_together(&mut self, total: &Load) -> anyhow::Result<()> {
        self.seq += 1;
        let seq = self.seq;
        let at_ms = if self.rank() == 0 {
            for _ in 1..self.world() {
                self.expect_seq(tag::READY, seq).await?;
            }
            let at = clock::unix_ms() + START_AHEAD_MS;
            let mut body = seq.to_le_bytes().to_vec();
            body.extend_from_slice(&at.to_le_bytes());
            self.link.broadcast(tag::START, &body)?;
            at
        } else {
            self.link.send(0, tag::READY, &seq.to_le_bytes())?;
            let body = self.expect_seq(tag::START, seq).await?;
            let at = f64::from_le_bytes(body[8..16].try_into()?);
            at + self.clock.offset_ms
        };
        let planned_ms = match *total {
            Load::Open {
                rate_rps,
                arrival: Arrival::Constant,
                ..
            } => self.rank() as f64 * 1000.0 / rate_rps,
            _ => 0.0,
        };
        wait_until_unix(at_ms + planned_ms, &self.stop).await;
        self.started_unix_ms = clock::unix_ms() - planned_ms;
        self.check()
    }

    /// Adds this rank's part to its summary of a point (`share` is its load).
    pub fn annotate(&self, s: &mut SummaryRecord, share: &Load) {
        let (c, r) = match *share {
            Load::Closed { concurrency } => (Some(concurrency), None),
            Load::Open { rate_rps, .. } => (None, Some(rate_rps)),
            Load::Trace { .. } => (None, None),
        };
        s.ranks = Some(RankPart {
            world: self.world() as u32,
            merged: false,
            share_concurrency: c,
            share_rate_rps: r,
            start_unix_ms: self.started_unix_ms,
            clock_offset_ms: Some(self.clock.offset_ms),
            clock_rtt_ms: Some(self.clock.rtt_ms),
            start_spread_ms: None,
        });
        s.workload.seed = Some(self.seed());
    }

    /// After a point: rank 0 gathers every rank's summary, merges them, writes the merged
    /// summary to `out` and sends it back; the others send theirs and receive it. Every rank
    /// returns the merged summary and how the point ended by it.
    pub async fn merge<W: Write>(
        &mut self,
        own: SummaryRecord,
        slo: Option<&Slo>,
        out: &mut RecordWriter<W>,
        telemetry: Option<&Telemetry>,
    ) -> anyhow::Result<(SummaryRecord, Ended)> {
        // A rank's own part is written whatever happens to the others (rank 0's once the
        // others are in, with the server's window).
        if self.rank() != 0 {
            out.emit(&own)?;
        }
        if let Err(e) = self.check() {
            if self.rank() == 0 {
                out.emit(&own)?;
            }
            return Err(e);
        }
        self.seq += 1;
        let merged = match self.rank() {
            0 => self.gather(own, slo, out, telemetry).await?,
            _ => self.send_and_receive(&own).await?,
        };
        let ended = ended_by(&merged);
        Ok((merged, ended))
    }

    /// Rank 0's side of [`Ranks::merge`]: every other rank's part of this step, the server's
    /// window ended on the job's tokens, rank 0's part and the merged summary written and the
    /// merged one sent to every rank.
    async fn gather<W: Write>(
        &mut self,
        own: SummaryRecord,
        slo: Option<&Slo>,
        out: &mut RecordWriter<W>,
        telemetry: Option<&Telemetry>,
    ) -> anyhow::Result<SummaryRecord> {
        let seq = self.seq;
        let mut parts = vec![own];
        let mut gathered = Ok(());
        for _ in 1..self.world() {
            // Decoded as a record of any schema this build reads (a rank of an older build
            // sends its summary in that schema's shape).
            let part = self
                .expect_seq(tag::SUMMARY, seq)
                .await
                .and_then(|body| record::decode_kind(&body[8..]).map_err(anyhow::Error::from));
            match part {
                Ok(part) => parts.push(part),
                Err(e) => {
                    gathered = Err(e);
                    break;
                }
            }
        }
        // Every rank has finished: the server's window of the job's point ends now, on the
        // job's tokens; rank 0's own summary carries it (and the merged one from it).
        if let (Some(t), Ok(())) = (telemetry, &gathered) {
            let tele = t.end(parts.iter().map(|p| p.output_tokens).sum()).await;
            let own = &mut parts[0];
            (own.server, own.gpus) = (tele.server, tele.gpus);
            own.telemetry_cpu_s = Some(tele.cpu_s);
        }
        // Rank 0's own part is kept even when another rank failed.
        out.emit(&parts[0])?;
        gathered?;
        let merged = merge_parts(&parts, slo, self.job_seed)?;
        out.emit(&merged)?;
        self.link.broadcast(tag::MERGED, &stepped(seq, &merged)?)?;
        Ok(merged)
    }

    /// Another rank's side of [`Ranks::merge`]: its part sent to rank 0, the merged summary
    /// received.
    async fn send_and_receive(&mut self, own: &SummaryRecord) -> anyhow::Result<SummaryRecord> {
        let seq = self.seq;
        self.link.send(0, tag::SUMMARY, &stepped(seq, own)?)?;
        let body = self.expect_seq(tag::MERGED, seq).await?;
        record::decode_kind(&body[8..]).map_err(|e| {
            anyhow::anyhow!(
                "the merged summary of point {seq} from rank 0 is not a summary record: {e} \
                 (rank 0 and this rank run different loadgen builds?)"
            )
        })
    }

    /// After a point: this rank's part annotated and merged with the others' (see
    /// [`Ranks::merge`]); the merged summary, how the point ended by it and its requests that
    /// met every `--slo` (so a search decides the same on every rank).
    pub async fn finish<W: Write>(
        &mut self,
        mut summary: SummaryRecord,
        share: &Load,
        slo: Option<&Slo>,
        out: &mut RecordWriter<W>,
        telemetry: Option<&Telemetry>,
    ) -> anyhow::Result<(SummaryRecord, Ended, u64)> {
        self.annotate(&mut summary, share);
        let (merged, ended) = self.merge(summary, slo, out, telemetry).await?;
        // Read back from the merged summary, the same on every rank.
        let good = PointStats::from_summary(&merged)
            .map_err(cli::failure)?
            .good;
        Ok((merged, ended, good))
    }

    /// Labels for a record of the whole job (rank 0's ramp record): without `rank` and `host`.
    pub fn job_labels(labels: &Labels) -> Labels {
        let mut l = labels.clone();
        l.remove(servbench::record::label::RANK);
        l.remove(servbench::record::label::HOST);
        l
    }

    fn check(&self) -> anyhow::Result<()> {
        match self.link.failed() {
            Some(why) => Err(cli::failure(why)),
            None => Ok(()),
        }
    }

    /// The next message, which must be `t` for synchronization `seq`; returns its body
    /// (sequence number included). A lost rank or this run's stop ends the wait.
    async fn expect_seq(&mut self, t: u8, seq: u64) -> anyhow::Result<Vec<u8>> {
        let (from, body) = tokio::select! {
            m = self.inbox.recv() => match m {
                Some(Inbound::Msg { from, tag: got, body }) if got == t => (from, body),
                Some(Inbound::Msg { from, tag: got, .. }) => {
                    return Err(self.out_of_step(from, format!("message {got} where {t} was due")));
                }
                Some(Inbound::Lost(why)) => return Err(cli::failure(why)),
                None => return Err(cli::failure("the connections to the other ranks are gone")),
            },
            _ = self.stop.wait() => {
                return Err(match self.link.failed() {
                    Some(why) => cli::failure(why),
                    None => cli::Interrupted.into(),
                });
            }
        };
        let got = body
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
        if got != Some(seq) {
            return Err(self.out_of_step(from, format!("step {got:?} where {seq} was due")));
        }
        Ok(body)
    }

    fn out_of_step(&self, from: usize, what: String) -> anyhow::Error {
        let msg = format!("{} is out of step: {what}", self.link.name(from));
        self.link.fail(msg.clone());
        cli::failure(msg)
    }

    /// Rank 0: tells every rank the job (before the first point).
    pub(crate) fn tell_job(&mut self, job: &Job) -> anyhow::Result<()> {
        self.job_seed = job.seed;
        self.link.broadcast(tag::JOB, &serde_json::to_vec(job)?)?;
        Ok(())
    }

    /// The other ranks: the job rank 0 tells (before the first point).
    pub(crate) fn hear_job(&mut self) -> anyhow::Result<Job> {
        let (_, body) = self.blocking_expect(tag::JOB)?;
        let job: Job = serde_json::from_slice(&body)?;
        self.job_seed = job.seed;
        Ok(job)
    }

    /// Where the ranks' records go.
    pub fn output(&self) -> RankOutput {
        self.output
    }

    /// The stop every rank's run shares (pulled when a rank fails).
    pub fn stop(&self) -> Stop {
        self.stop.clone()
    }

    /// The connections to the other ranks.
    pub(crate) fn link(&self) -> Arc<Link> {
        self.link.clone()
    }

    /// Before the runtime starts: the next message, which must be `t`.
    fn blocking_expect(&mut self, t: u8) -> anyhow::Result<(usize, Vec<u8>)> {
        match self.inbox.blocking_recv() {
            Some(Inbound::Msg {
                from,
                tag: got,
                body,
            }) if got == t => Ok((from, body)),
            Some(Inbound::Msg { from, tag: got, .. }) => {
                Err(self.out_of_step(from, format!("message {got} where {t} was due")))
            }
            Some(Inbound::Lost(why)) => Err(cli::failure(why)),
            None => Err(cli::failure("the connections to the other ranks are gone")),
        }
    }
}

/// What the run asks of its ranks at each point, whether it has any (`None`: it runs alone,
/// and each hook is the plain behaviour).
pub(crate) trait Hooks {
    /// This process's part of a point: the whole one alone, its share as one rank of several.
    fn part(&self, total: &Load, budget: Budget) -> (Load, Budget);
    /// As one rank of several: wait for the others and start at the agreed instant.
    async fn start_together(&mut self, total: &Load) -> anyhow::Result<()>;
    /// A rank of the job died or failed: how that ended the phase.
    fn failure(&self) -> Option<Ended>;
}

impl Hooks for Option<Ranks> {
    fn part(&self, total: &Load, budget: Budget) -> (Load, Budget) {
        match self {
            Some(r) => r.share(total, budget),
            None => (*total, budget),
        }
    }

    async fn start_together(&mut self, total: &Load) -> anyhow::Result<()> {
        match self {
            Some(r) => r.start_together(total).await,
            None => Ok(()),
        }
    }

    fn failure(&self) -> Option<Ended> {
        self.as_ref()?.failed().map(Ended::RankFailed)
    }
}

/// Rank `rank`'s part of a point's load and budget over `world` ranks: concurrency and an
/// open loop's cap split with the remainder on the first ranks; a closed loop's request count
/// split in proportion to the ranks' slots (so the ranks finish together and the point sends
/// all it asked, also with fewer slots than ranks), an open loop's and a trace's evenly; the
/// rate split evenly, a time budget kept. A rank whose concurrency share is 0 sends nothing.
pub fn share_of(load: &Load, budget: Budget, world: usize, rank: usize) -> (Load, Budget) {
    let part = |n: u64| shared::share(n, world, rank);
    let even = match budget {
        Budget::Requests(n) => Budget::Requests(part(n)),
        time => time,
    };
    match *load {
        Load::Closed { concurrency } => {
            let total = u64::from(concurrency);
            let c = part(total);
            let budget = match budget {
                _ if c == 0 => Budget::Requests(0),
                // Slots of the ranks before this one, and to its end: the parts telescope to n.
                Budget::Requests(n) => {
                    let before: u64 = (0..rank).map(|r| shared::share(total, world, r)).sum();
                    let at =
                        |slots: u64| (u128::from(n) * u128::from(slots) / u128::from(total)) as u64;
                    Budget::Requests(at(before + c) - at(before))
                }
                time => time,
            };
            (
                Load::Closed {
                    concurrency: c as u32,
                },
                budget,
            )
        }
        Load::Open {
            rate_rps,
            arrival,
            max_concurrency,
        } => {
            // At least one slot each: a cap of 0 would stall the rank's whole stream.
            let cap = max_concurrency.map(|m| (part(u64::from(m)) as u32).max(1));
            let share = Load::Open {
                rate_rps: rate_rps / world.max(1) as f64,
                arrival,
                max_concurrency: cap,
            };
            (share, even)
        }
        Load::Trace {
            speed,
            max_concurrency,
        } => {
            // The rows go round the ranks by index (the replay's stride), all at the trace's times.
            let cap = max_concurrency.map(|m| (part(u64::from(m)) as u32).max(1));
            let share = Load::Trace {
                speed,
                max_concurrency: cap,
            };
            (share, even)
        }
    }
}

/// Rank 0's merge of every rank's summary of a point: the shared statistics' exact merge
/// (what summarize does with the same summaries), then the figures only the parts know.
pub fn merge_parts(
    parts: &[SummaryRecord],
    slo: Option<&Slo>,
    job_seed: u64,
) -> anyhow::Result<SummaryRecord> {
    let first = &parts[0];
    let mut stats = PointStats::new();
    for p in parts {
        stats.merge(&PointStats::from_summary(p).map_err(cli::failure)?);
    }
    let partial = parts.iter().any(|p| p.partial);
    let labels = Ranks::job_labels(&first.labels);
    let mut m = stats.to_summary(first.point.clone(), labels, partial, slo);
    if let Some((i, p)) = parts
        .iter()
        .enumerate()
        .find(|(_, p)| p.stopped_by.is_some())
    {
        m.stopped_by = p.stopped_by;
        let why = p.stop_reason.clone().unwrap_or_else(|| "stopped".into());
        m.stop_reason = Some(format!("rank {i}: {why}"));
    }
    let cpu: Vec<f64> = parts.iter().filter_map(|p| p.client_cpu_s).collect();
    m.client_cpu_s = (cpu.len() == parts.len()).then(|| cpu.iter().sum());
    m.model = first.model.clone();
    describe_merged(&mut m, parts, job_seed);
    // Each start on rank 0's clock: own reading less its measured offset.
    let starts: Vec<f64> = parts
        .iter()
        .filter_map(|p| p.ranks.as_ref())
        .map(|r| r.start_unix_ms - r.clock_offset_ms.unwrap_or(0.0))
        .collect();
    let earliest = starts.iter().copied().fold(f64::INFINITY, f64::min);
    let latest = starts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    m.ranks = Some(RankPart {
        world: parts.len() as u32,
        merged: true,
        start_unix_ms: if earliest.is_finite() { earliest } else { 0.0 },
        start_spread_ms: (starts.len() == parts.len()).then_some(latest - earliest),
        ..RankPart::default()
    });
    Ok(m)
}

/// The workload of a merged summary: what every rank asked alike (rank 0's; its
/// `cache_flushed` too, the one rank that empties the cache) with the job's seed, counts summed,
/// the expected prefix hit rate weighted by requests. Per-turn and per-adapter figures stay in
/// the ranks' own summaries (their percentiles cannot be merged from the summaries).
fn describe_merged(m: &mut SummaryRecord, parts: &[SummaryRecord], job_seed: u64) {
    let first = &parts[0];
    // Rank 0 alone watched the server and its GPUs.
    m.server = first.server.clone();
    m.gpus = first.gpus.clone();
    m.telemetry_cpu_s = first.telemetry_cpu_s;
    let sum = |f: fn(&Workload) -> Option<u64>| -> Option<u64> {
        parts
            .iter()
            .map(|p| f(&p.workload))
            .try_fold(0, |a, x| Some(a + x?))
    };
    m.by_turn = Vec::new();
    m.by_adapter = Vec::new();
    let requests: u64 = parts.iter().map(|p| p.requests).sum();
    let prefix_hit_rate_expected = parts
        .iter()
        .map(|p| {
            p.workload
                .prefix_hit_rate_expected
                .map(|h| h * p.requests as f64)
        })
        .try_fold(0.0, |a, x| Some(a + x?))
        .map(|w| {
            if requests > 0 {
                w / requests as f64
            } else {
                0.0
            }
        });
    m.workload = Workload {
        seed: Some(job_seed),
        sessions: sum(|w| w.sessions),
        trace_rows: sum(|w| w.trace_rows),
        prefix_hit_rate_expected,
        ..first.workload.clone()
    };
}

/// A summary as one step's message: the step (8 bytes, little-endian), then its JSON.
fn stepped(seq: u64, summary: &SummaryRecord) -> anyhow::Result<Vec<u8>> {
    let mut body = seq.to_le_bytes().to_vec();
    serde_json::to_writer(&mut body, summary)?;
    Ok(body)
}

/// How a point ended, by its merged summary: the same on every rank.
fn ended_by(merged: &SummaryRecord) -> Ended {
    let why = || merged.stop_reason.clone().unwrap_or_default();
    match merged.stopped_by {
        Some(PointStop::ServerDown) => Ended::ServerDown(why()),
        Some(PointStop::Interrupted) => Ended::Stopped,
        Some(PointStop::RankFailed) => Ended::RankFailed(why()),
        _ => Ended::Completed,
    }
}

/// Waits until the wall clock reads `at_ms`: the runtime timer to within 1.5 ms, then
/// yielding until the instant (as the dispatcher waits for a send). A stop ends the wait.
async fn wait_until_unix(at_ms: f64, stop: &Stop) {
    const COARSE: Duration = Duration::from_micros(1500);
    let ahead = at_ms - clock::unix_ms();
    if ahead <= 0.0 {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs_f64(ahead / 1000.0);
    if let Some(coarse) = deadline.checked_sub(COARSE) {
        tokio::select! {
            _ = tokio::time::sleep_until(coarse.into()) => {}
            _ = stop.wait() => return,
        }
    }
    while Instant::now() < deadline && !stop.is_stopped() {
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests;
