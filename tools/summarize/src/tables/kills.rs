//! srv-kill's `kill` records: what was stopped, how, and whether the port came free.

use crate::notes::note::Facts;
use crate::render::{Cell, Column, Table};
use crate::tables::view::View;
use servbench::record::KillRecord;

/// The kills.
pub fn section(facts: &Facts, _view: &View) -> Vec<Table> {
    match facts.inputs.kills.as_slice() {
        [] => Vec::new(),
        kills => vec![kill_table(kills)],
    }
}

pub fn kill_table(kills: &[KillRecord]) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut table = Table::new(
        "kills",
        vec![
            col("target", "target"),
            col("host", "host"),
            col("matched", "matched"),
            col("signals", "signals"),
            col("survivors", "survivors"),
            col("port_free", "port free"),
            col("elapsed_s", "elapsed s"),
            col("status", "status"),
        ],
    );
    for k in kills {
        table.push(
            vec![
                Cell::Text(k.target.clone()),
                Cell::Text(k.host.clone()),
                Cell::int(k.matched.len()),
                Cell::Text(if k.signals.is_empty() {
                    "-".into()
                } else {
                    k.signals.join(",")
                }),
                Cell::int(k.survivors.len()),
                k.port_free.map_or(Cell::Empty, |f| {
                    Cell::Text(if f { "yes" } else { "no" }.into())
                }),
                Cell::num(Some(k.elapsed_s)),
                Cell::Text(match (&k.error, k.ok) {
                    (Some(e), _) => format!("FAILED: {e}"),
                    (None, true) => "ok".into(),
                    (None, false) => "FAILED".into(),
                }),
            ],
            0,
        );
    }
    table
}
