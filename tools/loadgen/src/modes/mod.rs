//! The load modes: each walks its points, every point run by `run/point.rs`. `sweep.rs` the
//! sweep matrix (`-c`, `-r`, `--trace-speed`, `--repeat`), `ramp.rs` (`--ramp`: doubling the
//! concurrency until a rule of shared's `load::ramp` stops it), `find_max.rs` (`--find-max`:
//! the probes shared's `load::search` asks for), `step_grid.rs` (`--step-grid`: a `step_cell`
//! per batch and context, and each prompt's prefill). Ramp and find-max judge a level by one
//! tally ([`Tally`]).

pub mod find_max;
pub mod ramp;
pub mod step_grid;
pub mod sweep;

use crate::client::body::{Bodies, BodySpec, Template};
use crate::plan::Mode;
use crate::run::point::{PointOutcome, Run, Work};
use crate::workload::registry::Catalog;
use servbench::cli::Exit;
use servbench::load::search::Tally;
use servbench::record::PointKey;
use std::io::Write;
use std::sync::Arc;

/// A point's level as ramp and find-max judge it.
pub(crate) fn tally(p: &PointOutcome) -> Tally {
    Tally::of(&p.summary, p.good)
}

impl<W: Write> Run<'_, W> {
    /// Every point of the run: for each prompt length and output length, the mode's points.
    pub(crate) async fn all(&mut self) -> anyhow::Result<Exit> {
        let stop = self.ctx.stop.clone();
        // Ranks share the job's seed for a trace: a hash id names the same words on every rank.
        let job = match &self.ranks {
            Some(r) => (r.job_seed(), (r.rank() as u64, r.world() as u64)),
            None => (self.plan.job_seed, (0, 1)),
        };
        let catalog = Catalog::open(
            self.plan.workload.clone(),
            self.plan.seed,
            job,
            &mut self.aligner,
            &stop,
            self.max_model_len,
        )
        .await?;
        let max_tokens = self.plan.body.max_tokens.clone();
        let mut index = 0u32;
        for input_len in catalog.input_lens() {
            let workload = catalog
                .workload(input_len, &mut self.aligner, &stop)
                .await?;
            for &max in &max_tokens {
                let body = &self.plan.body;
                let (template, warnings) = Template::new(&BodySpec {
                    api: body.api,
                    model: self.model.clone(),
                    adapters: self
                        .plan
                        .lora
                        .as_ref()
                        .map_or_else(Vec::new, |m| m.names.to_vec()),
                    stream: body.stream,
                    // A structured answer ends where its JSON does (ignore_eos would run on).
                    force_length: catalog.exact_lengths(input_len)
                        && !body.allow_eos
                        && body.response_format.is_none(),
                    usage_per_chunk: body.usage_per_chunk,
                    temperature: body.temperature,
                    top_p: body.top_p,
                    extra: body.extra.clone(),
                    response_format: body.response_format.as_ref().map(|f| f.body()),
                });
                for w in warnings {
                    self.warn_once(w);
                }
                let template = match self.plan.body.images {
                    Some(images) => template.with_images(images, self.plan.job_seed),
                    None => template,
                };
                let work = Work {
                    bodies: Arc::new(Bodies {
                        template,
                        lora: self.plan.lora.clone().map(|m| (m, self.plan.seed)),
                        max_tokens: max.unwrap_or(256),
                        max_given: max.is_some(),
                    }),
                    workload: workload.clone(),
                };
                let key = PointKey {
                    index: 0,
                    concurrency: None,
                    rate_rps: None,
                    input_len,
                    max_tokens: max
                        .or(input_len.map(|_| 256))
                        .filter(|_| !catalog.is_trace() && self.plan.body.api.generates()),
                    repeat: 0,
                    trace_speed: None,
                    images: self.plan.body.images.map(|i| i.count),
                };
                match self.plan.mode.clone() {
                    Mode::Ramp { first, rules } => {
                        self.ramp(first, rules, &mut index, key, &work).await?
                    }
                    Mode::FindMax {
                        rules,
                        arrival,
                        max_concurrency,
                    } => {
                        let open = (arrival, max_concurrency);
                        self.find_max(rules, open, &mut index, key, &work).await?
                    }
                    Mode::Sweep { loads } => self.sweep(&loads, &mut index, key, &work).await?,
                    Mode::StepGrid { batches } => {
                        let prefill = max == max_tokens[0];
                        self.step_grid(&batches, prefill, &mut index, key, &work)
                            .await?
                    }
                }
            }
        }
        Ok(Exit::Ok)
    }
}
