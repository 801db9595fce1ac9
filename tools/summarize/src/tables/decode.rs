//! collbench's `decode` records: the allreduce budget of a decode step per batch, with the
//! verdict the load point of that model, TP and batch got.

use crate::notes::note::Facts;
use crate::render::{Cell, Column, Table, human};
use crate::roofline::step::PointStep;
use crate::tables::view::View;
use servbench::presets::{StepBasis, StepParts, StepVerdict};
use servbench::record::{CollBackend, DecodeRecord};

/// collbench's decode budgets, each with its point's verdict.
pub fn section(facts: &Facts, _view: &View) -> Vec<Table> {
    match facts.inputs.decode.as_slice() {
        [] => Vec::new(),
        decode => vec![decode_table(decode, &facts.steps)],
    }
}

/// collbench's decode question, one row per batch: the allreduce each decode step pays, times
/// the allreduces per step, against the step of the model. The verdict under each row is the
/// one the load point of that model, TP and batch got (from its measured step), else the
/// modelled step's, labelled as such; `comm %` divides by the same step as that verdict (it
/// divided by collbench's modelled step while the note judged the measured one: 93.5% above a
/// note saying 26%), and the header says which step each batch's share is of.
pub fn decode_table(decode: &[DecodeRecord], steps: &[PointStep]) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut table = Table::new(
        "decode allreduce budget",
        vec![
            col("model", "model"),
            col("hardware", "hardware"),
            col("backend", "backend"),
            col("tp", "TP"),
            col("batch", "batch"),
            col("allreduce_bytes", "allreduce B"),
            col("allreduces_per_step", "per step"),
            col("allreduce_us_mean", "allreduce mean us"),
            col("comm_ms_per_token", "comm ms/token"),
            col("step_roofline_ms", "roofline step ms"),
            col("comm_pct", "comm %"),
            col("wrong", "#wrong"),
        ],
    );
    let (mut measured, mut modelled) = (Vec::new(), Vec::new());
    for d in decode {
        let judged = judged_at(d, steps);
        let comm_ms = d.comm_us_per_token / 1000.0;
        let step_ms = match judged {
            Some(step) => {
                measured.push(format!("batch {} ({})", d.batch, step.name));
                step.verdict.parts.step_ms
            }
            None => {
                modelled.push(format!("batch {}", d.batch));
                (d.comm_us_per_token + d.step_roofline_us) / 1000.0
            }
        };
        table.push(
            vec![
                Cell::Text(d.model.clone()),
                Cell::Text(d.hardware.clone()),
                Cell::Text(d.backend.to_string()),
                Cell::int(d.tp),
                Cell::int(d.batch),
                Cell::int(d.allreduce_bytes),
                Cell::int(d.allreduces_per_step),
                // Nothing measured (TP1 runs no allreduce): no mean.
                Cell::num((d.allreduce_us.n > 0).then_some(d.allreduce_us.mean)),
                Cell::num(Some(d.comm_us_per_token * 1e-3)),
                Cell::num(Some(d.step_roofline_us * 1e-3)),
                comm_share(comm_ms, step_ms),
                Cell::int(d.wrong),
            ],
            0,
        );
        table.notes.push(decode_note(d, steps));
    }
    // comm ms/token is allreduces_per_step x the mean (collbench decode's figure, and what
    // summarize's decode budget reads): a step pays the sum of its allreduces.
    table.context.push((
        "statistic".into(),
        "mean allreduce time (a step pays their sum)".into(),
    ));
    let mut of = Vec::new();
    if !measured.is_empty() {
        of.push(format!(
            "of the measured step (the run's, as its note says) at {}",
            measured.join(", ")
        ));
    }
    if !modelled.is_empty() {
        of.push(format!(
            "of the modelled step (comm + roofline step; no run measured it) at {}",
            modelled.join(", ")
        ));
    }
    table.context.push(("comm %".into(), of.join("; ")));
    if decode
        .iter()
        .any(|d| d.backend == CollBackend::Tcp && d.allreduces_per_step > 0)
    {
        table.notes.push(
            "the tcp backend measured these allreduces: processes over TCP on this box, which says nothing about NCCL on GPUs; run collbench decode --backend nccl on the GPU host for the real budget".into(),
        );
    }
    table
}

/// The load point that measured a decode record's model, TP and batch, if any.
fn judged_at<'a>(d: &DecodeRecord, steps: &'a [PointStep]) -> Option<&'a PointStep> {
    steps
        .iter()
        .find(|s| s.model == d.model && s.tp == d.tp && s.batch == d.batch)
}

/// The allreduces' share of the step, as the verdict reads it: `over` where they exceed the
/// whole step beyond 3% (the verdict's "no verdict": not measured where the step was).
fn comm_share(comm_ms: f64, step_ms: f64) -> Cell {
    match crate::roofline::share(comm_ms, step_ms) {
        Some(s) if step_ms > 0.0 => Cell::pct(Some(100.0 * s)),
        _ => Cell::Text("over".into()),
    }
}

/// The verdict of one decode record's batch: the matching point's, or the modelled step's.
fn decode_note(d: &DecodeRecord, steps: &[PointStep]) -> String {
    let comm_ms = d.comm_us_per_token / 1000.0;
    let point = judged_at(d, steps);
    if d.allreduces_per_step == 0 {
        let alone = format!("batch {}: no allreduce at TP{}", d.batch, d.tp);
        return match point {
            Some(step) => format!("{alone}, judged at {}: {}", step.name, step.verdict.text()),
            None => format!(
                "{alone}: the step is its compute alone, {} ms modelled (roofline; no run measured this batch)",
                human(d.step_roofline_us / 1000.0)
            ),
        };
    }
    if let Some(step) = point {
        return format!(
            "batch {}: allreduce {} ms per step, judged at {}: {}",
            d.batch,
            human(comm_ms),
            step.name,
            step.verdict.text()
        );
    }
    let verdict = StepVerdict::judge(StepParts {
        step_ms: (d.comm_us_per_token + d.step_roofline_us) / 1000.0,
        basis: StepBasis::Modelled,
        allreduce_ms: comm_ms,
        compute: None,
    });
    format!(
        "batch {}: allreduce {} ms per step: {}",
        d.batch,
        human(comm_ms),
        verdict.text()
    )
}
