//! The decode step of every point, judged once: "communication or compute?" from the step the
//! run measured (TPOT p50, times the tokens a speculative verify step emits), with the shared
//! verdict (`servbench::presets::verdict`). The budget notes under the load points and the
//! decode table's notes both print these verdicts, so one screen gives one answer per point.
//!
//! The parts: the allreduces from collbench `decode` records of the same model, TP and batch,
//! else the `coll` curve (the inputs', else `--comm-from`'s), else (only when GEMMs were
//! measured, to complete the budget) the card's topology model; the GEMMs and launch overhead
//! from the `gemm_step` of the model at the point's TP nearest its batch.
//!
//! Where the engine logged its steps (the summaries' `engine_steps`), the step judged is the
//! engine's own decode step at the point's batch (its length from the steps: their own lengths
//! where logged, else their rate over the busy time; never vLLM's logged elapsed time, which is
//! the engine core's wait for a result), beside the client's TPOT; a point
//! with no parts measured gets the engine's step beside the TPOT alone ([`engine_step_lines`]).

use crate::input::Inputs;
use crate::input::metrics::Metric;
use crate::input::points::{Keys, Point, point_name, records_model};
use crate::render::human;
use crate::roofline::Roofline;
use crate::roofline::spec::{SpecTokens, spec_tokens};
use servbench::presets::{ComputeParts, Layout, MeasuredCurve, StepBasis, StepParts, StepVerdict};
use servbench::record::{CollBackend, GemmBackend, GemmStepRecord};

/// Where a point's allreduce time comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum AllreduceFrom {
    /// collbench `decode` records of the same model, TP and batch, on this backend.
    Decode(CollBackend),
    /// A curve of `coll` records.
    Curve(MeasuredCurve),
    /// The card's topology model.
    Modelled,
    /// TP=1: none.
    None,
}

/// A point's decode step as the engine's step log gives it, mean over the repeats that logged
/// steps.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineStep {
    /// The decode step's length at `batch`: the decode-only steps' own lengths where the lines
    /// carry them, else the busy window over the steps (the step's length as the steps' rate
    /// gives it).
    pub ms: f64,
    /// The batch it is at: the point's, where the engine's decode steps reached it, else their
    /// mean batch.
    pub batch: f64,
    /// Decode-only steps, and all steps, of the repeats.
    pub decode_steps: u64,
    pub steps: u64,
    /// The step timed by the steps' rate over the busy window (no step's own length logged).
    pub from_rate: bool,
    /// vLLM's logged "iteration elapsed time", mean: the engine core's wait for the step's
    /// result, said under that name and never as the step.
    pub result_wait_ms: Option<f64>,
}

/// The engine's decode step of `p` at `batch` requests, from its step log.
pub fn engine_step(p: &Point, batch: u32) -> Option<EngineStep> {
    let logs: Vec<&servbench::record::EngineSteps> = p
        .repeats
        .iter()
        .filter_map(|s| s.engine_steps.as_ref())
        .collect();
    let at: Vec<(f64, f64, bool)> = logs
        .iter()
        .filter_map(|e| {
            let (ms, b) = e.decode_step_at(batch)?;
            Some((ms, b, e.step_from_window()))
        })
        .collect();
    if at.is_empty() {
        return None;
    }
    let n = at.len() as f64;
    let waits: Vec<f64> = logs
        .iter()
        .filter_map(|e| Some(e.result_wait_ms?.mean))
        .collect();
    Some(EngineStep {
        ms: at.iter().map(|x| x.0).sum::<f64>() / n,
        batch: at.iter().map(|x| x.1).sum::<f64>() / n,
        decode_steps: logs.iter().map(|e| e.decode_steps).sum(),
        steps: logs.iter().map(|e| e.steps).sum(),
        from_rate: at.iter().any(|x| x.2),
        result_wait_ms: (!waits.is_empty()).then(|| waits.iter().sum::<f64>() / waits.len() as f64),
    })
}

impl EngineStep {
    /// `engine step 5 ms at batch 8 (its step log: 120 decode steps of 128, the step from
    /// their rate; the engine core's wait for a result 0.03 ms, not the step; TPOT p50 5.2 ms)`;
    /// a speculative point's step is a verify step, beside TPOT x its tokens per step.
    fn words(&self, tpot_ms: f64, spec: Option<&SpecTokens>) -> String {
        let client = match spec {
            None => format!("TPOT p50 {} ms", human(tpot_ms)),
            Some(s) => format!(
                "TPOT p50 {} ms x {:.2} tokens per verify step = {} ms",
                human(tpot_ms),
                s.per_step,
                human(tpot_ms * s.per_step)
            ),
        };
        let timed = if self.from_rate {
            ", the step from their rate over the busy time"
        } else {
            ""
        };
        let wait = self.result_wait_ms.map_or(String::new(), |w| {
            format!(
                "; the engine core's wait for a step's result {} ms, not the step",
                human(w)
            )
        });
        format!(
            "engine step {} ms at batch {} (its step log: {} decode steps of {}{timed}{wait}; {client})",
            human(self.ms),
            batch_words(self.batch),
            self.decode_steps,
            self.steps,
        )
    }
}

/// A batch as a whole number where it is one (the point's), else its mean.
fn batch_words(batch: f64) -> String {
    if batch.fract() == 0.0 {
        format!("{batch:.0}")
    } else {
        format!("{} (mean)", human(batch))
    }
}

/// The engine's step beside the client's TPOT for each point that logged steps and whose
/// budget is not printed with its parts (`judged` names the points that are).
pub fn engine_step_lines(points: &[Point], judged: &[String]) -> Vec<String> {
    let keys = Keys::of(points);
    points
        .iter()
        .filter_map(|p| {
            let name = point_name(p, &keys.varying);
            if judged.contains(&name) {
                return None;
            }
            let tpot = p.mean(Metric::TPOT_P50).filter(|t| *t > 0.0)?;
            let e = engine_step(p, p.params.concurrency.unwrap_or(1).max(1))?;
            // A verify step emits several tokens: the client's step is TPOT times them.
            let spec = spec_tokens(p);
            let (client, what) = match &spec {
                None => (tpot, "the client's TPOT"),
                Some(s) => (tpot * s.per_step, "the client's step (TPOT x tokens per step)"),
            };
            // Judged on the figures as printed, so the note never reads "0 ms below".
            let relation = if human(client) == human(e.ms) {
                format!("{what} equals the engine's step")
            } else if client > e.ms {
                format!(
                    "{what} is {} ms above the engine's step (streaming, detokenization, the frontend)",
                    human(client - e.ms)
                )
            } else {
                format!(
                    "{what} is {} ms below the engine's step (the client's p50 against the steps' mean)",
                    human(e.ms - client)
                )
            };
            Some(format!(
                "{name}: {}: {relation}; no allreduce or GEMM measurement to split the step (collbench decode or gemm_step records, with --roofline)",
                e.words(tpot, spec.as_ref()),
            ))
        })
        .collect()
}

/// The GEMMs' measurement a point's budget uses.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmFrom {
    pub backend: GemmBackend,
    /// The batch they were measured at, when it is not the point's.
    pub batch: Option<u32>,
}

/// One point's decode step and its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct PointStep {
    pub name: String,
    pub batch: u32,
    pub tp: u32,
    /// The model it is judged as (the roofline's, else the point's `model` label).
    pub model: String,
    pub layers: u32,
    pub allreduce_bytes: f64,
    pub allreduce_from: AllreduceFrom,
    pub tpot_ms: f64,
    pub spec: Option<SpecTokens>,
    pub gemm: Option<GemmFrom>,
    /// The engine's own decode step, where it logged its steps: the step judged.
    pub engine: Option<EngineStep>,
    pub verdict: StepVerdict,
}

/// The `gemm_step` record of `model` at `tp` nearest `batch` (exact first).
fn nearest_step<'a>(
    steps: &'a [GemmStepRecord],
    model: &str,
    tp: u32,
    batch: u32,
) -> Option<&'a GemmStepRecord> {
    steps
        .iter()
        .filter(|s| s.model == model && s.tp == tp)
        .min_by_key(|s| s.batch.abs_diff(batch))
}

/// Every point's step, judged once. Without a roofline only `decode` records can time the
/// allreduces (the card gives the sizes of a `coll` curve and the model).
pub fn judge_points(points: &[Point], inputs: &Inputs, roof: Option<&Roofline>) -> Vec<PointStep> {
    let keys = Keys::of(points);
    points
        .iter()
        .filter_map(|p| judge_point(p, &keys, inputs, roof))
        .collect()
}

fn judge_point(
    p: &Point,
    keys: &Keys,
    inputs: &Inputs,
    roof: Option<&Roofline>,
) -> Option<PointStep> {
    let tpot_ms = p.mean(Metric::TPOT_P50).filter(|t| *t > 0.0)?;
    let batch = p.params.concurrency.unwrap_or(1).max(1);
    let (model, tp) = match roof {
        Some(r) => (
            r.model.name.clone(),
            r.layout_of(p, keys).unwrap_or_default().tp,
        ),
        None => (
            records_model(p)?.to_string(),
            Layout::from_labels(&p.labels).tp,
        ),
    };
    let gemm_step = nearest_step(&inputs.gemm_steps, &model, tp, batch);
    let decode = inputs
        .decode
        .iter()
        .find(|d| d.model == model && d.tp == tp && d.batch == batch);
    let (layers, bytes) = match (roof, decode) {
        (Some(r), _) => (r.model.layers, r.model.allreduce_bytes(batch)),
        (None, Some(d)) => (d.allreduces_per_step / 2, d.allreduce_bytes as f64),
        (None, None) => (0, 0.0),
    };
    let (allreduce_ms, allreduce_from) = if tp <= 1 {
        gemm_step?;
        (0.0, AllreduceFrom::None)
    } else if let Some(d) = decode {
        (
            f64::from(d.allreduces_per_step) * d.allreduce_us.mean / 1000.0,
            AllreduceFrom::Decode(d.backend.clone()),
        )
    } else {
        let r = roof?;
        let coll = match &r.comm_from {
            Some((from, _)) if inputs.coll.is_empty() => from.as_slice(),
            _ => inputs.coll.as_slice(),
        };
        match MeasuredCurve::from_records(coll, tp, false) {
            Some(curve) => (
                f64::from(r.model.allreduces_per_step()) * curve.us_at(bytes) / 1000.0,
                AllreduceFrom::Curve(curve),
            ),
            None => {
                gemm_step?;
                (r.limits(p, keys).step.comm_s * 1e3, AllreduceFrom::Modelled)
            }
        }
    };
    let spec = spec_tokens(p);
    let engine = engine_step(p, batch);
    let basis = match (&engine, &spec) {
        (Some(e), _) => StepBasis::Measured(format!(
            "the engine's mean decode step at batch {}, from its step log",
            batch_words(e.batch)
        )),
        (None, None) => StepBasis::Measured("TPOT p50".into()),
        (None, Some(s)) => StepBasis::Measured(format!(
            "TPOT p50 {} ms x {:.2} tokens per verify step, from {}",
            human(tpot_ms),
            s.per_step,
            s.from
        )),
    };
    let verdict = StepVerdict::judge(StepParts {
        step_ms: match &engine {
            Some(e) => e.ms,
            None => tpot_ms * spec.as_ref().map_or(1.0, |s| s.per_step),
        },
        basis,
        allreduce_ms,
        compute: gemm_step.map(|s| ComputeParts {
            gemm_ms: s.gemm_us_per_step / 1000.0,
            launch_ms: s.launch_overhead_us_per_step / 1000.0,
            on_cpu: s.backend == GemmBackend::Cpu,
        }),
    });
    Some(PointStep {
        name: point_name(p, &keys.varying),
        batch,
        tp,
        model,
        layers,
        allreduce_bytes: bytes,
        allreduce_from,
        tpot_ms,
        spec,
        gemm: gemm_step.map(|s| GemmFrom {
            backend: s.backend.clone(),
            batch: (s.batch != batch).then_some(s.batch),
        }),
        engine,
        verdict,
    })
}

impl PointStep {
    /// Where the allreduce figure came from, in words (the tcp backend named as not NCCL).
    fn allreduce_words(&self) -> String {
        match &self.allreduce_from {
            AllreduceFrom::Decode(CollBackend::Tcp) => {
                "measured by collbench decode over tcp between processes, not NCCL on GPUs".into()
            }
            AllreduceFrom::Decode(b) => format!("measured by collbench decode, {b}"),
            AllreduceFrom::Curve(c) => {
                let mut s = format!("allreduce as measured: {}", c.describe());
                if c.ranks != self.tp {
                    s.push_str(&format!(
                        " (measured over {} ranks, the model runs TP={})",
                        c.ranks, self.tp
                    ));
                }
                if let Some(tcp) = c.tcp_caveat() {
                    s.push_str(&format!("; {tcp}"));
                }
                s
            }
            AllreduceFrom::Modelled => "modelled".into(),
            AllreduceFrom::None => "none at TP=1".into(),
        }
    }

    /// The note under the load points: with measured GEMMs the whole step split into its parts
    /// (the rest only where the parts were counted), else the allreduces beside the step.
    pub fn line(&self) -> String {
        let v = &self.verdict;
        if let Some(e) = &self.engine {
            return self.engine_line(e);
        }
        if self.gemm.is_none() {
            return format!(
                "{}: allreduce {} ms per step (2 x {} layers x {} at batch {}; {}): {}",
                self.name,
                human(v.parts.allreduce_ms),
                self.layers,
                size(self.allreduce_bytes),
                self.batch,
                self.allreduce_words(),
                v.text()
            );
        };
        let compute = v.parts.compute.as_ref();
        let gemm_from = self.gemm_words().unwrap_or_default();
        let rest = if v.counted.is_some() {
            format!(
                ", the rest {} ms (attention, sampling, scheduling)",
                human(v.rest_ms)
            )
        } else {
            String::new()
        };
        let of = match &self.spec {
            None => format!("{} ms TPOT", human(self.tpot_ms)),
            Some(s) => format!(
                "{} ms verify step (TPOT {} ms x {:.2} tokens per step, from {})",
                human(v.parts.step_ms),
                human(self.tpot_ms),
                s.per_step,
                s.from
            ),
        };
        format!(
            "{}: per step at batch {}: allreduce {} ms ({}), GEMMs {} ms ({gemm_from}), launch overhead {} ms (measured){rest} of a {of}: {}",
            self.name,
            self.batch,
            human(v.parts.allreduce_ms),
            self.allreduce_words(),
            human(compute.map_or(0.0, |c| c.gemm_ms)),
            human(compute.map_or(0.0, |c| c.launch_ms)),
            v.text()
        )
    }
}

impl PointStep {
    fn gemm_words(&self) -> Option<String> {
        let gemm = self.gemm.as_ref()?;
        Some(match (&gemm.backend, gemm.batch) {
            (GemmBackend::Cpu, Some(b)) => format!("measured on the CPU at batch {b}"),
            (GemmBackend::Cpu, None) => "measured on the CPU".to_string(),
            (_, Some(b)) => format!("measured at batch {b}"),
            _ => "measured".to_string(),
        })
    }

    /// The budget of the engine's own step: `C=8: engine step 27.4 ms at batch 8 (its step
    /// log ...; TPOT p50 ...): allreduce 8.9 ms (measured ...), GEMMs ..., the rest ...: verdict`.
    fn engine_line(&self, e: &EngineStep) -> String {
        let v = &self.verdict;
        let mut parts = vec![format!(
            "allreduce {} ms ({})",
            human(v.parts.allreduce_ms),
            self.allreduce_words()
        )];
        if let (Some(from), Some(c)) = (self.gemm_words(), v.parts.compute.as_ref()) {
            parts.push(format!("GEMMs {} ms ({from})", human(c.gemm_ms)));
            parts.push(format!(
                "launch overhead {} ms (measured)",
                human(c.launch_ms)
            ));
        }
        if v.counted.is_some() {
            parts.push(format!(
                "the rest {} ms (attention, sampling, scheduling)",
                human(v.rest_ms)
            ));
        }
        format!(
            "{}: {}: {}: {}",
            self.name,
            e.words(self.tpot_ms, self.spec.as_ref()),
            parts.join(", "),
            v.text()
        )
    }
}

pub fn size(bytes: f64) -> String {
    if bytes >= 1048576.0 {
        format!("{} MiB", human(bytes / 1048576.0))
    } else if bytes >= 1024.0 {
        format!("{} KiB", human(bytes / 1024.0))
    } else {
        format!("{} B", human(bytes))
    }
}
