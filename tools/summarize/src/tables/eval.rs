//! Points whose answers were judged: `loadgen --eval`'s accuracy and `--response-format`'s
//! JSON validity, beside the load that produced them (over every repeat of a point), so a
//! faster setting that answers worse shows in the same report. One table per kind of
//! judgement, each a row of [`JUDGED`].

use crate::input::points::{Keys, Point, point_name};
use crate::notes::note::Facts;
use crate::render::{Cell, Column, Table};
use crate::tables::view::View;
use servbench::record::{EvalSummary, SummaryRecord};

/// What a kind of judgement counts, and how its table says it.
struct Judged {
    table: &'static str,
    /// The summary's counts of this judgement.
    of: fn(&SummaryRecord) -> Option<&EvalSummary>,
    /// What a right answer is called.
    right: &'static str,
    /// The rate's column: its name and header.
    rate: (&'static str, &'static str),
    note: &'static str,
}

const JUDGED: &[Judged] = &[
    Judged {
        table: "eval",
        of: |s| s.eval.as_ref(),
        right: "correct",
        rate: ("accuracy", "accuracy %"),
        note: "loadgen --eval: accuracy = correct / judged; not judged: requests with no whole answer (failed or cancelled)",
    },
    Judged {
        table: "json validity",
        of: |s| s.json_validity.as_ref(),
        right: "valid",
        rate: ("valid_rate", "valid %"),
        note: "loadgen --response-format: valid = the answer is JSON that follows the schema; valid % = valid / judged; not judged: requests with no whole answer (failed or cancelled)",
    },
];

/// The tables of judged answers, where some point's were.
pub fn section(facts: &Facts, _view: &View) -> Vec<Table> {
    JUDGED
        .iter()
        .filter_map(|j| judged_table(facts.points, j))
        .collect()
}

fn col(name: &str, header: &str) -> Column {
    Column {
        name: name.into(),
        header: header.into(),
    }
}

/// One row per point whose answers were judged so, or `None` when none were.
fn judged_table(points: &[Point], j: &Judged) -> Option<Table> {
    let varying = Keys::of(points).varying;
    let (right, (rate, rate_header)) = (j.right, j.rate);
    let mut table = Table::new(
        j.table,
        vec![
            col("point", "point"),
            col("judged", "judged"),
            col(right, right),
            col("not_judged", "not judged"),
            col(rate, rate_header),
        ],
    );
    for (group, p) in points.iter().enumerate() {
        let mut all: Option<EvalSummary> = None;
        for e in p.repeats.iter().filter_map(j.of) {
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
    table.notes.push(j.note.into());
    Some(table)
}
