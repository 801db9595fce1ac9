//! srv-sim's `--dry-run` plans (`sim_plan` records) side by side: one row per layout, so
//! TP4/TP8/PP8 dry runs of one model compare at a glance (fits, weights per GPU, KV cache, the
//! batch-1 step by cause, the allreduce, one stream's rate).

use crate::notes::note::Facts;
use crate::render::{Cell, Column, Table, human};
use crate::tables::view::View;
use servbench::record::{Record, SimPlanRecord};

/// srv-sim's plans.
pub fn section(facts: &Facts, _view: &View) -> Vec<Table> {
    let plans = facts.inputs.kept(|r| match r {
        Record::SimPlan(p) => Some(p),
        _ => None,
    });
    match plans.as_slice() {
        [] => Vec::new(),
        plans => vec![plan_table(plans)],
    }
}

pub fn plan_table(plans: &[&SimPlanRecord]) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut t = Table::new(
        "srv-sim plans",
        vec![
            col("model", "model"),
            col("hardware", "hardware"),
            col("tp", "TP"),
            col("pp", "PP"),
            col("dp", "DP"),
            col("fits", "fits"),
            col("weight_gb_per_gpu", "weights GB/GPU"),
            col("kv_cache_tokens", "KV tokens"),
            col("decode_step_ms", "step ms"),
            col("decode_memory_ms", "memory ms"),
            col("decode_compute_ms", "compute ms"),
            col("decode_comm_ms", "comm ms"),
            col("allreduce_us", "allreduce us"),
            col("allreduce_algo", "algo"),
            col("single_stream_tok_s", "tok/s/stream"),
            col("memory_bound_tok_s", "mem limit"),
            col("max_running_requests", "max running"),
        ],
    );
    let mut sorted: Vec<&SimPlanRecord> = plans.to_vec();
    sorted.sort_by(|a, b| {
        (&a.model, &a.hardware, a.tp * a.pp, a.tp, a.pp).cmp(&(
            &b.model,
            &b.hardware,
            b.tp * b.pp,
            b.tp,
            b.pp,
        ))
    });
    for p in &sorted {
        t.push(
            vec![
                Cell::Text(p.model.clone()),
                Cell::Text(p.hardware.clone()),
                Cell::int(p.tp),
                Cell::int(p.pp),
                Cell::int(p.data_parallel),
                Cell::Text(if p.fits { "yes" } else { "no" }.into()),
                Cell::num(Some(p.weight_bytes_per_gpu / 1e9)),
                p.kv_cache_tokens.map_or(Cell::Empty, Cell::int),
                Cell::num(Some(p.decode_step_ms)),
                Cell::num(Some(p.decode_memory_ms)),
                Cell::num(Some(p.decode_compute_ms)),
                Cell::num(Some(p.decode_comm_ms)),
                Cell::num(Some(p.allreduce_us)),
                Cell::Text(p.allreduce_algo.to_string()),
                Cell::num(Some(p.single_stream_tok_s)),
                Cell::num(Some(p.memory_bound_tok_s)),
                Cell::int(p.max_running_requests),
            ],
            0,
        );
    }
    for p in sorted.iter().filter(|p| !p.fits) {
        if let Some(why) = &p.fit_note {
            t.notes.push(format!(
                "{} TP={} PP={} does not fit: {why}",
                p.model, p.tp, p.pp
            ));
        }
    }
    if let Some(best) = sorted
        .iter()
        .filter(|p| p.fits)
        .max_by(|a, b| a.single_stream_tok_s.total_cmp(&b.single_stream_tok_s))
        && sorted.iter().filter(|p| p.fits).count() > 1
    {
        t.notes.push(format!(
            "fastest single stream among the layouts that fit: {} TP={} PP={} at {} tok/s (modelled)",
            best.model,
            best.tp,
            best.pp,
            human(best.single_stream_tok_s)
        ));
    }
    t
}
