//! `--step-grid`: the engine's step time at controlled shapes, for `srv-sim --calibrate-from`.
//! For one prompt length L and output length M, each `-c` batch B is a closed-loop point that
//! holds B requests decoding at a context of L + M/2 on average; then (for the first
//! `--max-tokens` only) one request at a time with one output token times L's prefill. Each is
//! a normal point (its `request` and `summary` records are written as usual), followed by one
//! `step_cell` record: from the engine's step log where its lines give each step's own length
//! (decode-only steps at the full batch; the prefill steps of each request), else from the
//! client's TPOT or TTFT.

use crate::client::body::Bodies;
use crate::pacing::Load;
use crate::run::point::{Run, Work};
use crate::stop::stopped;
use servbench::cli;
use servbench::record::{PointKey, StepCellRecord, StepPhase, StepSource, SummaryRecord, now_ts};
use std::io::Write;
use std::sync::Arc;

impl<W: Write> Run<'_, W> {
    /// The cells of one prompt and output length: a decode cell per batch, then the prefill
    /// cell when `prefill`.
    pub(crate) async fn step_grid(
        &mut self,
        batches: &[u32],
        prefill: bool,
        index: &mut u32,
        key: PointKey,
        work: &Work,
    ) -> anyhow::Result<()> {
        let stop = self.ctx.stop.clone();
        let prefill_work = Work {
            bodies: Arc::new(Bodies {
                template: work.bodies.template.clone(),
                lora: work.bodies.lora.clone(),
                max_tokens: 1,
                max_given: true,
            }),
            workload: work.workload.clone(),
        };
        let loads = batches
            .iter()
            .map(|&b| (StepPhase::Decode, b))
            .chain(prefill.then_some((StepPhase::Prefill, 1)));
        for (phase, concurrency) in loads {
            for repeat in 0..self.plan.budget.repeat {
                if self.ranks.is_none() && stop.is_stopped() {
                    return Err(stopped(&stop));
                }
                let mut k = key.clone();
                k.index = *index;
                k.repeat = repeat;
                *index += 1;
                let (w, max_tokens) = match phase {
                    StepPhase::Prefill => {
                        k.max_tokens = Some(1);
                        (&prefill_work, 1)
                    }
                    _ => (work, work.bodies.max_tokens),
                };
                let p = self.point(k, Load::Closed { concurrency }, w).await?;
                self.check_point(&p)?;
                let Some(labels) = self.job_labels() else {
                    continue;
                };
                match cell(&p.summary, phase.clone(), max_tokens) {
                    Some(mut c) => {
                        c.labels = labels;
                        self.out.emit(&c)?;
                    }
                    None => cli::info(format!(
                        "note: point {}: no {phase} step time (no engine step log and no {} figures): no step_cell",
                        p.summary.point.index,
                        if phase == StepPhase::Prefill {
                            "TTFT"
                        } else {
                            "TPOT"
                        }
                    )),
                }
            }
        }
        Ok(())
    }
}

/// The cell a point's summary gives: from its engine steps where they cover the phase, else
/// from the client's figures; None when neither does.
pub(crate) fn cell(s: &SummaryRecord, phase: StepPhase, max_tokens: u32) -> Option<StepCellRecord> {
    let input_len = s.point.input_len?;
    let batch = s.point.concurrency?;
    let steps = s.engine_steps.as_ref();
    let mut c = StepCellRecord {
        v: servbench::record::SCHEMA_VERSION,
        ts: now_ts(),
        labels: Default::default(),
        phase: phase.clone(),
        batch,
        input_len,
        max_tokens,
        context_tokens: f64::from(input_len),
        step_ms: 0.0,
        step_ms_stddev: 0.0,
        samples: 0,
        source: StepSource::EngineSteps,
        chunks: None,
        chunk_tokens: None,
        point_index: s.point.index,
        extra: Default::default(),
    };
    let finite = |v: f64| v.is_finite() && v > 0.0;
    if phase == StepPhase::Prefill {
        // Every step of a one-token request is its prefill (chunks of it included).
        // From the steps' own lengths only (a wait of an async engine is not its step).
        let engine = steps
            .filter(|e| e.steps > 0 && e.gen_requests_mean == 0.0 && s.ok > 0)
            .and_then(|e| Some((e, e.prefill_step_ms_mean?)));
        if let Some((e, step_ms)) = engine {
            let chunks = (e.steps as f64 / s.ok as f64).round().max(1.0) as u32;
            c.step_ms = step_ms * e.steps as f64 / s.ok as f64;
            c.step_ms_stddev = e.step_ms_stddev.unwrap_or(0.0) * f64::from(chunks).sqrt();
            c.samples = s.ok;
            c.chunks = Some(chunks);
            c.chunk_tokens = Some(input_len.div_ceil(chunks));
        } else {
            let t = s.ttft_ms.as_ref()?;
            c.source = StepSource::ClientTtft;
            (c.step_ms, c.step_ms_stddev, c.samples) = (t.mean, t.stddev, t.n);
        }
    } else {
        // Decode steps alone, at the batch held: their context is the prompt plus, on
        // average over the window, half the output.
        c.context_tokens = f64::from(input_len) + f64::from(max_tokens) / 2.0;
        let engine = steps.and_then(|e| {
            Some((
                e.decode_full_batch?,
                e.decode_full_batch_ms_mean?,
                e.decode_full_batch_ms_stddev.unwrap_or(0.0),
                e.decode_steps,
            ))
        });
        if let Some((full, ms, sd, n)) = engine.filter(|&(full, ..)| full > 0) {
            c.batch = full.min(batch);
            (c.step_ms, c.step_ms_stddev, c.samples) = (ms, sd, n);
        } else {
            let t = s.tpot_ms.as_ref()?;
            c.source = StepSource::ClientTpot;
            (c.step_ms, c.step_ms_stddev, c.samples) = (t.mean, t.stddev, t.n);
        }
    }
    (finite(c.step_ms) && c.step_ms_stddev.is_finite()).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use servbench::record::{Dist, EngineSteps, Step};

    fn summary(concurrency: u32, ok: u64, steps: Option<EngineSteps>) -> SummaryRecord {
        let dist = |mean: f64| Dist {
            n: ok,
            mean,
            stddev: 0.5,
            ..Dist::default()
        };
        let mut s: SummaryRecord = serde_json::from_value(serde_json::json!({
            "ts": "2026-12-04T00:00:00.000Z",
            "point": {"index": 3, "concurrency": concurrency, "input_len": 100, "max_tokens": 20},
            "requests": ok, "ok": ok, "errors": 0, "duration_s": 1.0, "output_tokens": 0,
            "prompt_tokens": 0, "req_s": 1.0, "output_tok_s": 1.0, "total_tok_s": 1.0,
        }))
        .unwrap();
        s.ttft_ms = Some(dist(40.0));
        s.tpot_ms = Some(dist(12.0));
        s.engine_steps = steps;
        s
    }

    /// A step whose line carries its own length.
    fn step(ctx: u32, decoding: u32, ms: f64) -> Step {
        Step {
            count: 1,
            ctx_requests: u32::from(ctx > 0),
            ctx_tokens: ctx,
            gen_requests: decoding,
            gen_tokens: decoding,
            length_ms: Some(ms),
            ..Step::default()
        }
    }

    #[test]
    fn a_decode_cell_takes_the_full_batch_decode_steps_else_the_clients_tpot() {
        // Prefill steps and a smaller batch's steps are not the cell's.
        let steps = [
            step(100, 0, 30.0),
            step(0, 4, 9.0),
            step(0, 4, 11.0),
            step(0, 3, 5.0),
        ];
        let e = EngineSteps::of_steps("vllm", &steps, 1.0, 1.0);
        let c = cell(&summary(4, 8, Some(e)), StepPhase::Decode, 20).unwrap();
        assert_eq!((c.batch, c.step_ms, c.step_ms_stddev), (4, 10.0, 1.0));
        assert_eq!((c.context_tokens, c.samples), (110.0, 3));
        assert_eq!(c.source, StepSource::EngineSteps);
        let c = cell(&summary(4, 8, None), StepPhase::Decode, 20).unwrap();
        assert_eq!((c.step_ms, c.source), (12.0, StepSource::ClientTpot));
    }

    #[test]
    fn a_prefill_cell_sums_each_prompts_chunks_else_takes_the_clients_ttft() {
        // Two prompts of 100 tokens, each in two chunks of at most 50.
        let steps = [step(50, 0, 10.0), step(50, 0, 14.0)].repeat(2);
        let e = EngineSteps::of_steps("vllm", &steps, 1.0, 1.0);
        let c = cell(&summary(1, 2, Some(e)), StepPhase::Prefill, 1).unwrap();
        assert_eq!(
            (c.step_ms, c.chunks, c.chunk_tokens),
            (24.0, Some(2), Some(50))
        );
        assert_eq!((c.context_tokens, c.batch), (100.0, 1));
        let c = cell(&summary(1, 2, None), StepPhase::Prefill, 1).unwrap();
        assert_eq!((c.step_ms, c.source), (40.0, StepSource::ClientTtft));
    }

    #[test]
    fn an_async_engines_logged_waits_are_not_a_cells_step() {
        // Each step logged as a 0.03 ms wait, no step's own length: the client's figures.
        let waits: Vec<Step> = (0..8)
            .map(|_| Step {
                length_ms: None,
                result_wait_ms: Some(0.03),
                ..step(0, 4, 0.0)
            })
            .collect();
        let e = EngineSteps::of_steps("vllm", &waits, 1.0, 1.0);
        let c = cell(&summary(4, 8, Some(e.clone())), StepPhase::Decode, 20).unwrap();
        assert_eq!((c.step_ms, c.source), (12.0, StepSource::ClientTpot));
        let c = cell(&summary(1, 2, Some(e)), StepPhase::Prefill, 1).unwrap();
        assert_eq!(c.source, StepSource::ClientTtft);
    }
}
