//! `--ramp`'s run loop: doubles the concurrency, each level a normal point (as one rank of
//! several, judged on the merged figures), until a rule of shared's `load::ramp` stops it; ends with
//! one `ramp` record.

use crate::pacing::Load;
use crate::run::point::{PointOutcome, Run, Work};
use crate::stop::Ended;
use servbench::cli;
use servbench::load::ramp::{self, Rules, Verdict};
use servbench::load::search::Tally;
use servbench::record::{PointKey, RampLevel};
use std::io::Write;

impl<W: Write> Run<'_, W> {
    /// `--ramp`: doubles the concurrency until a rule stops it; writes the `ramp` record (also
    /// when a stop or a server gone down ends it, which then ends the run as for a point).
    pub(crate) async fn ramp(
        &mut self,
        first: u32,
        rules: Rules,
        index: &mut u32,
        key: PointKey,
        work: &Work,
    ) -> anyhow::Result<()> {
        let mut levels: Vec<RampLevel> = Vec::new();
        let mut concurrency = first;
        let (stopped_by, reason, cut) = loop {
            let mut tok_s = 0.0;
            let mut req_s = 0.0;
            let mut tries: Vec<Tally> = Vec::new();
            let mut cut: Option<PointOutcome> = None;
            for repeat in 0..self.plan.budget.repeat {
                let mut k = key.clone();
                k.index = *index;
                k.repeat = repeat;
                *index += 1;
                let p = self.point(k, Load::Closed { concurrency }, work).await?;
                if p.ended == Ended::Completed {
                    self.check_point(&p)?;
                }
                let s = &p.summary;
                tok_s += s.output_tok_s / f64::from(self.plan.budget.repeat);
                req_s += s.req_s / f64::from(self.plan.budget.repeat);
                tries.push(super::tally(&p));
                if p.ended != Ended::Completed {
                    cut = Some(p);
                    break;
                }
            }
            let slo = self.plan.slo.is_some();
            levels.push(ramp::level(concurrency, tok_s, req_s, &tries, slo));
            match cut.as_ref().map(|p| &p.ended) {
                Some(Ended::ServerDown(why)) => {
                    break ("server_down".to_string(), why.clone(), cut);
                }
                Some(Ended::RankFailed(why)) => {
                    break ("rank_failed".to_string(), why.clone(), cut);
                }
                Some(_) => {
                    break (
                        "interrupted".to_string(),
                        format!("interrupted at concurrency {concurrency}"),
                        cut,
                    );
                }
                None => {}
            }
            match rules.judge(&levels) {
                Verdict::Next(next) => concurrency = next,
                Verdict::Stop { rule, reason } => break (rule.to_string(), reason, None),
            }
        };
        // One decision for the whole job: every rank judged the same merged figures, rank 0 writes it.
        let Some(labels) = self.job_labels() else {
            return cut.map_or(Ok(()), |p| self.check_point(&p));
        };
        let record = rules.record(labels, key, levels, &stopped_by, reason);
        cli::info(format!(
            "ramp stopped ({}): {}; best concurrency {}",
            record.stopped_by,
            record.reason,
            record
                .best_concurrency
                .map_or("none".to_string(), |c| c.to_string())
        ));
        self.out.emit(&record)?;
        match cut {
            Some(p) => self.check_point(&p),
            None => Ok(()),
        }
    }
}
