//! nccl-tests' table of collbench's `coll` records, with a hardware card the share of the link
//! their ranks span.

use crate::notes::note::{Facts, Under};
use crate::render::{Cell, Column, Table, human};
use crate::tables::view::View;
use servbench::presets::Hardware;
use servbench::record::{CollRecord, CollRunRecord};

/// The collectives, with the share of the link where a hardware card is given.
pub fn section(facts: &Facts, view: &View) -> Vec<Table> {
    let inputs = facts.inputs;
    if inputs.coll.is_empty() && inputs.coll_runs.is_empty() {
        return Vec::new();
    }
    let mut t = coll_table(&inputs.coll, &inputs.coll_runs, facts.card());
    t.notes.extend(view.notes_under(Under::Collectives, facts));
    vec![t]
}

/// nccl-tests' table: size, count, type, time, algbw, busbw, #wrong, per op/backend/ranks.
pub fn coll_table(coll: &[CollRecord], runs: &[CollRunRecord], hw: Option<&Hardware>) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut table = Table::new(
        "collectives",
        vec![
            col("op", "op"),
            col("backend", "backend"),
            col("ranks", "ranks"),
            col("mode", "mode"),
            col("bytes", "size B"),
            col("count", "count"),
            col("dtype", "type"),
            col("time_us", "time us"),
            col("algbw_gbps", "algbw GB/s"),
            col("busbw_gbps", "busbw GB/s"),
            col("wrong", "#wrong"),
        ],
    );
    let mut sorted: Vec<&CollRecord> = coll.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.op, &a.backend, a.ranks, &a.mode, a.bytes)
            .cmp(&(&b.op, &b.backend, b.ranks, &b.mode, b.bytes))
    });
    let mut group = 0;
    let mut prev = None;
    for c in &sorted {
        let k = (&c.op, &c.backend, c.ranks, &c.mode);
        if prev.is_some_and(|p| p != k) {
            group += 1;
        }
        prev = Some(k);
        table.push(
            vec![
                Cell::Text(c.op.to_string()),
                Cell::Text(c.backend.to_string()),
                Cell::int(c.ranks),
                Cell::Text(c.mode.to_string()),
                Cell::int(c.bytes),
                Cell::int(c.count),
                Cell::Text(c.dtype.to_string()),
                // nccl-tests reports the average time; our record's mean is that figure.
                Cell::num(Some(c.time_us.mean)),
                Cell::num(Some(c.algbw_gbps)),
                Cell::num(Some(c.busbw_gbps)),
                Cell::int(c.wrong),
            ],
            group,
        );
    }
    if let Some(hw) = hw {
        add_link_share(&mut table, &sorted, hw);
    }
    for r in runs {
        table.notes.push(format!(
            "{} {} over {} ranks: average bus bandwidth {} GB/s over {} sizes, {}",
            r.op,
            r.backend,
            r.ranks,
            human(r.avg_busbw_gbps),
            r.sizes,
            if r.wrong == 0 {
                "every result checked OK".to_string()
            } else {
                format!("{} wrong elements: FAILED", r.wrong)
            }
        ));
    }
    table
}

/// Adds `% link` to the collectives table: busbw over the bus bandwidth of the topology level
/// the record's ranks span on the hardware card.
pub fn add_link_share(table: &mut Table, coll_in_order: &[&CollRecord], hw: &Hardware) {
    table.columns.push(Column {
        name: "link_pct".into(),
        header: "% link".into(),
    });
    let levels: Vec<String> = hw
        .interconnect
        .levels
        .iter()
        .map(|l| format!("{} {} GB/s", l.name, human(l.busbw_gbps)))
        .collect();
    table.context.push((
        "link".into(),
        format!("{}: {}", hw.interconnect.name, levels.join(", ")),
    ));
    for (row, c) in table.rows.iter_mut().zip(coll_in_order) {
        let level = hw.interconnect.level_for(c.ranks);
        row.push(Cell::pct(Some(100.0 * c.busbw_gbps / level.busbw_gbps)));
    }
}
