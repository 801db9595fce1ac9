//! Tables for loadgen's workload modes: conversation points turn by turn (turn 1's cold prompt
//! against later turns' growing, mostly cached history), LoRA mixes adapter by adapter, and
//! `--find-max` searches (the highest
//! load that met the SLO, the first that did not).

use crate::input::points::{Keys, Point, point_name};
use crate::notes::note::Facts;
use crate::render::{Cell, Column, Table};
use crate::tables::view::View;
use servbench::record::SearchRecord;

/// Conversation points turn by turn.
pub fn turns(facts: &Facts, _view: &View) -> Vec<Table> {
    turns_table(facts.points).into_iter().collect()
}

/// LoRA-mix points adapter by adapter.
pub fn adapters(facts: &Facts, _view: &View) -> Vec<Table> {
    adapters_table(facts.points).into_iter().collect()
}

/// The `--find-max` searches.
pub fn searches(facts: &Facts, _view: &View) -> Vec<Table> {
    match facts.inputs.searches.as_slice() {
        [] => Vec::new(),
        searches => vec![search_table(searches)],
    }
}

fn col(name: &str, header: &str) -> Column {
    Column {
        name: name.into(),
        header: header.into(),
    }
}

/// One row per turn index of every conversation point (first repeat), or `None` when no point
/// ran conversations.
pub fn turns_table(points: &[Point]) -> Option<Table> {
    let varying = Keys::of(points).varying;
    let mut table = Table::new(
        "turns",
        vec![
            col("point", "point"),
            col("turn", "turn"),
            col("requests", "requests"),
            col("ttft_p50", "TTFT p50 ms"),
            col("ttft_p99", "TTFT p99 ms"),
            col("e2e_p50", "E2E p50 ms"),
            col("prompt", "prompt tok"),
            col("cached", "cached tok"),
        ],
    );
    for (group, p) in points.iter().enumerate() {
        let Some(s) = p.repeats.first().filter(|s| !s.by_turn.is_empty()) else {
            continue;
        };
        let name = point_name(p, &varying);
        for t in &s.by_turn {
            table.push(
                vec![
                    Cell::Text(name.clone()),
                    Cell::int(t.turn),
                    Cell::int(t.requests),
                    Cell::num(t.ttft_ms.map(|d| d.p50)),
                    Cell::num(t.ttft_ms.map(|d| d.p99)),
                    Cell::num(t.e2e_ms.map(|d| d.p50)),
                    Cell::num(t.prompt_tokens_mean),
                    Cell::num(t.cached_tokens_mean),
                ],
                group,
            );
        }
        let first = s.by_turn.first().and_then(|t| t.ttft_ms.map(|d| d.p50));
        let later: Vec<f64> = s.by_turn[1..]
            .iter()
            .filter_map(|t| t.ttft_ms.map(|d| d.p50))
            .collect();
        if let (Some(first), Some(last)) = (first, later.last()) {
            table.notes.push(format!(
                "{name}: TTFT p50 {} ms at turn 1, {} ms at turn {} ({} sessions)",
                crate::render::human(first),
                crate::render::human(*last),
                s.by_turn.last().map_or(0, |t| t.turn),
                s.workload.sessions.unwrap_or(s.by_turn[0].requests)
            ));
        }
    }
    (!table.rows.is_empty()).then_some(table)
}

/// One row per adapter of every LoRA-mix point (first repeat), or `None` when no point named
/// adapters. A note per point names the adapter of the highest TTFT p50 against the lowest.
pub fn adapters_table(points: &[Point]) -> Option<Table> {
    let varying = Keys::of(points).varying;
    let mut table = Table::new(
        "adapters",
        vec![
            col("point", "point"),
            col("adapter", "adapter"),
            col("requests", "requests"),
            col("share", "share %"),
            col("ttft_p50", "TTFT p50 ms"),
            col("ttft_p99", "TTFT p99 ms"),
            col("tpot_p50", "TPOT p50 ms"),
            col("tok_s", "out tok/s"),
        ],
    );
    for (group, p) in points.iter().enumerate() {
        let Some(s) = p.repeats.first().filter(|s| !s.by_adapter.is_empty()) else {
            continue;
        };
        let name = point_name(p, &varying);
        let total: u64 = s.by_adapter.iter().map(|a| a.requests).sum();
        for a in &s.by_adapter {
            table.push(
                vec![
                    Cell::Text(name.clone()),
                    Cell::Text(a.adapter.clone()),
                    Cell::int(a.requests),
                    Cell::num(Some(100.0 * a.requests as f64 / total.max(1) as f64)),
                    Cell::num(a.ttft_ms.map(|d| d.p50)),
                    Cell::num(a.ttft_ms.map(|d| d.p99)),
                    Cell::num(a.tpot_ms.map(|d| d.p50)),
                    Cell::num(Some(a.output_tok_s)),
                ],
                group,
            );
        }
        let p50 = |a: &&servbench::record::AdapterSummary| a.ttft_ms.map(|d| d.p50);
        let ranked = s.by_adapter.iter().filter(|a| p50(a).is_some());
        let slow = ranked.clone().max_by(|a, b| {
            p50(a)
                .partial_cmp(&p50(b))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let fast = ranked.min_by(|a, b| {
            p50(a)
                .partial_cmp(&p50(b))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        // A note where one adapter's first tokens come a tenth later or more than another's.
        if let (Some(slow), Some(fast)) = (slow, fast)
            && p50(&slow).unwrap_or_default() > 1.1 * p50(&fast).unwrap_or_default()
        {
            table.notes.push(format!(
                "{name}: TTFT p50 {} ms for {} against {} ms for {} ({} adapters, {})",
                crate::render::human(p50(&slow).unwrap_or_default()),
                slow.adapter,
                crate::render::human(p50(&fast).unwrap_or_default()),
                fast.adapter,
                s.by_adapter.len(),
                s.workload
                    .lora_assignment
                    .as_deref()
                    .unwrap_or("assignment unknown")
            ));
        }
    }
    (!table.rows.is_empty()).then_some(table)
}

/// loadgen's `--find-max` outcomes.
pub fn search_table(searches: &[SearchRecord]) -> Table {
    let mut table = Table::new(
        "searches",
        vec![
            col("var", "varies"),
            col("slo", "SLO"),
            col("target", "attainment"),
            col("probes", "probes"),
            col("max_passing", "max passing"),
            col("first_failing", "first failing"),
            col("stopped_by", "stopped by"),
        ],
    );
    for s in searches {
        table.push(
            vec![
                Cell::Text(s.var.to_string()),
                Cell::Text(s.slo.clone()),
                Cell::num(Some(s.slo_attainment)),
                Cell::int(s.probes.len()),
                Cell::num(s.max_passing),
                Cell::num(s.first_failing),
                Cell::Text(s.stopped_by.to_string()),
            ],
            0,
        );
        table
            .notes
            .push(format!("search stopped ({}): {}", s.stopped_by, s.reason));
    }
    table
}
