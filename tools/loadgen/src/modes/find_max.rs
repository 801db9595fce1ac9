//! `--find-max rate|concurrency`: runs the probes shared's `load::search` asks for, each a normal
//! point (its records written like any other), and ends with one `search` record. A stop or a
//! server gone down ends the search like a point: the record says so and keeps what was found.
//! As ranks of several, every rank runs its share of each probe and decides on the merged
//! figures (the same on every rank); rank 0 alone writes the `search` record.

use crate::pacing::Arrival;
use crate::pacing::Load;
use crate::run::point::{Run, Work};
use crate::stop::Ended;
use servbench::cli;
use servbench::load::search::{self, Decision, Rules, Step, Var};
use servbench::record::{ErrorClass, PointKey, SearchProbe};
use std::io::Write;

impl<W: Write> Run<'_, W> {
    /// Searches for the highest load meeting `--slo` for one workload (`key`); `open`: the
    /// arrivals and cap of a rate search's open loop.
    pub(crate) async fn find_max(
        &mut self,
        rules: Rules,
        open: (Arrival, Option<u32>),
        index: &mut u32,
        key: PointKey,
        work: &Work,
    ) -> anyhow::Result<()> {
        let var = rules.var;
        let (arrival, max_concurrency) = open;
        let mut probes: Vec<SearchProbe> = Vec::new();
        let mut cut = None;
        let outcome = 'search: loop {
            let load = match rules.next(&probes) {
                Step::Probe(load) => load,
                Step::Done(o) => break o,
            };
            let mut tries = Vec::new();
            let mut points = Vec::new();
            let passed = loop {
                let mut k = key.clone();
                k.index = *index;
                k.repeat = tries.len() as u32;
                *index += 1;
                points.push(k.index);
                let l = match var {
                    Var::Rate => Load::Open {
                        rate_rps: load,
                        arrival,
                        max_concurrency,
                    },
                    Var::Concurrency => Load::Closed {
                        concurrency: load as u32,
                    },
                };
                let p = self.point(k, l, work).await?;
                if p.ended != Ended::Completed {
                    cut = Some(p);
                    break 'search search::Outcome {
                        stopped_by: "interrupted",
                        reason: String::new(),
                        max_passing: None,
                        first_failing: None,
                    };
                }
                // Nothing answering at all ends the run; failures under load are a failed probe.
                if p.first_failure
                    .as_ref()
                    .is_some_and(|f| f.0 == ErrorClass::Connect)
                {
                    self.check_point(&p)?;
                }
                tries.push(super::tally(&p));
                match rules.decide(&tries) {
                    Decision::Repeat => continue,
                    Decision::Pass => break true,
                    Decision::Fail => break false,
                }
            };
            let probe = search::probe(load, points, &tries, passed);
            cli::info(format!(
                "find-max: {} {} the SLO ({:.1}% of {} requests{})",
                var.show(load),
                if passed { "met" } else { "missed" },
                probe.slo_attainment * 100.0,
                probe.requests,
                match tries.len() {
                    1 => String::new(),
                    n => format!(", {n} tries"),
                },
            ));
            probes.push(probe);
        };
        let outcome = match &cut {
            None => outcome,
            Some(p) => {
                // What the probes decided so far stands.
                let (max_passing, first_failing) = search::bracket(&probes);
                let (stopped_by, reason) = match &p.ended {
                    Ended::ServerDown(why) => ("server_down", why.clone()),
                    Ended::RankFailed(why) => ("rank_failed", why.clone()),
                    _ => ("interrupted", "interrupted during a probe".to_string()),
                };
                search::Outcome {
                    stopped_by,
                    reason,
                    max_passing,
                    first_failing,
                }
            }
        };
        // One search for the whole job: every rank decided on the same merged figures.
        let Some(labels) = self.job_labels() else {
            return cut.map_or(Ok(()), |p| self.check_point(&p));
        };
        let record = rules.record(labels, key, self.plan.slo.as_ref(), probes, outcome);
        cli::info(format!(
            "find-max stopped ({}): {}",
            record.stopped_by, record.reason
        ));
        self.out.emit(&record)?;
        match cut {
            Some(p) => self.check_point(&p),
            None => Ok(()),
        }
    }
}
