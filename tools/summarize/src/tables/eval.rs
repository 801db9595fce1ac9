//! `loadgen --eval` points: the accuracy of their answers beside the load that produced them
//! (over every repeat of a point), so a faster setting that answers worse shows in the same
//! report.

use crate::input::points::{Keys, Point, point_name};
use crate::notes::note::Facts;
use crate::render::{Cell, Column, Table};
use crate::tables::view::View;
use servbench::record::EvalSummary;

/// The eval table, where some point asked eval questions.
pub fn section(facts: &Facts, _view: &View) -> Vec<Table> {
    eval_table(facts.points).into_iter().collect()
}

fn col(name: &str, header: &str) -> Column {
    Column {
        name: name.into(),
        header: header.into(),
    }
}

/// One row per point that asked eval questions, or `None` when none did.
pub fn eval_table(points: &[Point]) -> Option<Table> {
    let varying = Keys::of(points).varying;
    let mut table = Table::new(
        "eval",
        vec![
            col("point", "point"),
            col("judged", "judged"),
            col("correct", "correct"),
            col("not_judged", "not judged"),
            col("accuracy", "accuracy %"),
        ],
    );
    for (group, p) in points.iter().enumerate() {
        let mut all: Option<EvalSummary> = None;
        for e in p.repeats.iter().filter_map(|s| s.eval.as_ref()) {
            all.get_or_insert_default().merge(e);
        }
        let Some(e) = all else { continue };
        table.push(
            vec![
                Cell::Text(point_name(p, &varying)),
                Cell::int(e.judged),
                Cell::int(e.correct),
                Cell::int(e.not_judged),
                e.accuracy.map_or(Cell::Empty, |a| Cell::Fixed {
                    value: 100.0 * a,
                    decimals: 1,
                }),
            ],
            group,
        );
    }
    if table.rows.is_empty() {
        return None;
    }
    table.notes.push(
        "loadgen --eval: accuracy = correct / judged; not judged: requests with no whole answer (failed or cancelled)".into(),
    );
    Some(table)
}
