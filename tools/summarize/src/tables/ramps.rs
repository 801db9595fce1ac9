//! loadgen's `ramp` records: what stopped each `--ramp` and the best level it found.

use crate::notes::note::Facts;
use crate::render::{Cell, Column, Table};
use crate::tables::view::View;
use servbench::record::RampRecord;

/// The ramps.
pub fn section(facts: &Facts, _view: &View) -> Vec<Table> {
    match facts.inputs.ramps.as_slice() {
        [] => Vec::new(),
        ramps => vec![ramp_table(ramps)],
    }
}

/// loadgen's `--ramp` outcomes: what stopped each ramp and the best level it found.
pub fn ramp_table(ramps: &[RampRecord]) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut table = Table::new(
        "ramps",
        vec![
            col("in", "in tok"),
            col("out", "out tok"),
            col("levels", "levels"),
            col("last_conc", "last C"),
            col("stopped_by", "stopped by"),
            col("best_conc", "best C"),
            col("best_tok_s", "best out tok/s"),
        ],
    );
    let opt_int = |v: Option<u32>| v.map_or(Cell::Empty, Cell::int);
    for r in ramps {
        table.push(
            vec![
                opt_int(r.point.input_len),
                opt_int(r.point.max_tokens),
                Cell::int(r.levels.len()),
                opt_int(r.levels.last().map(|l| l.concurrency)),
                Cell::Text(r.stopped_by.to_string()),
                opt_int(r.best_concurrency),
                Cell::num(r.best_output_tok_s),
            ],
            0,
        );
        table.notes.push(format!("ramp stopped: {}", r.reason));
    }
    table
}
