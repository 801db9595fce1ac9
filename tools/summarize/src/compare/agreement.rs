//! Greedy agreement of two runs (`--compare A B` of runs made with `loadgen --seed S
//! --record-text`, or `--eval`, at temperature 0): per point, the share of requests whose text
//! is identical (however the server cut it into chunks), matched by point and request id and successful on both sides, and for those
//! that differ the median index of base's piece (a token with most servers) where they part.
//! A lossless change (speculative decoding on and off, TP4 and TP8) answers 100% the same; a
//! lossy one's drift is a number.

use crate::input::param::{Param, Params};
use crate::input::{Acc, Inputs};
use crate::render::{Cell, Column, Table};
use servbench::record::first_difference;
use std::collections::BTreeMap;

/// One side's points that recorded text, by (point, repeat).
type Texts<'a> = BTreeMap<(Params, u32), &'a Acc>;

fn texts(inputs: &Inputs) -> Texts<'_> {
    let mut out = BTreeMap::new();
    for (key, acc) in &inputs.points {
        if !acc.texts.is_empty() {
            // Labels are the run's (`run=base`): the point is its parameters.
            out.entry((key.params, key.repeat)).or_insert(acc);
        }
    }
    out
}

/// A side's `--eval` accuracy at a point, in percent.
fn accuracy(acc: &Acc) -> Cell {
    let eval = acc.stats().and_then(|s| s.eval.as_ref());
    match eval.and_then(|e| e.accuracy) {
        Some(a) => Cell::Fixed {
            value: 100.0 * a,
            decimals: 1,
        },
        None => Cell::Empty,
    }
}

/// One point's agreement.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    /// Requests successful on both sides with the same id.
    pub matched: u64,
    pub identical: u64,
    /// Of those that differ, the median index (from 0) of base's piece where they part.
    pub first_difference_p50: Option<f64>,
}

pub fn agreement(a: &BTreeMap<u64, Vec<String>>, b: &BTreeMap<u64, Vec<String>>) -> Agreement {
    let (mut matched, mut identical) = (0, 0);
    let mut firsts = Vec::new();
    for (id, ta) in a {
        let Some(tb) = b.get(id) else { continue };
        matched += 1;
        match first_difference(ta, tb) {
            None => identical += 1,
            Some(i) => firsts.push(i as f64),
        }
    }
    firsts.sort_by(f64::total_cmp);
    let n = firsts.len();
    let first_difference_p50 = (n > 0).then(|| (firsts[(n - 1) / 2] + firsts[n / 2]) / 2.0);
    Agreement {
        matched,
        identical,
        first_difference_p50,
    }
}

fn point_name(p: &Params, repeat: u32) -> String {
    let mut parts: Vec<String> = Param::ALL
        .iter()
        .filter_map(|k| k.value(p).map(|v| k.name_part(&v)))
        .collect();
    if repeat > 0 {
        parts.push(format!("repeat {repeat}"));
    }
    parts.join(" ")
}

/// The agreement table of the points both runs recorded text at; none where they share none.
pub fn table(base: &Inputs, new: &Inputs) -> Option<Table> {
    let (b, n) = (texts(base), texts(new));
    let column = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut t = Table::new(
        "greedy agreement",
        vec![
            column("point", "point"),
            column("matched", "requests"),
            column("identical_pct", "identical %"),
            column("first_diff_p50", "first diff token p50"),
            column("accuracy_base", "accuracy % base"),
            column("accuracy_new", "accuracy % new"),
        ],
    );
    for (key, bt) in &b {
        let Some(nt) = n.get(key) else { continue };
        let a = agreement(&bt.texts, &nt.texts);
        if a.matched == 0 {
            continue;
        }
        t.push(
            vec![
                Cell::Text(point_name(&key.0, key.1)),
                Cell::int(a.matched),
                Cell::Fixed {
                    value: 100.0 * a.identical as f64 / a.matched as f64,
                    decimals: 1,
                },
                a.first_difference_p50
                    .map_or(Cell::Empty, |v| Cell::Num { value: v, ci: None }),
                accuracy(bt),
                accuracy(nt),
            ],
            0,
        );
    }
    if t.rows.is_empty() {
        return None;
    }
    t.notes.push(
        "requests matched by point and request id, successful on both sides (run both with the same --seed at temperature 0); identical: the same text, however it was cut into chunks; first diff token: of those that differ, the median position (from 0, in base's chunks) of the chunk where they part; accuracy: --eval's correct / judged, where the runs asked eval questions".into(),
    );
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_counts_identical_replies_and_the_median_first_difference() {
        let t = |s: &[&str]| s.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let a = BTreeMap::from([
            (0, t(&["a", "b", "c"])),
            (1, t(&["a", "b", "c"])),
            (2, t(&["a", "b", "c"])),
            (3, t(&["a", "b", "c"])),
            (9, t(&["z"])),
        ]);
        // Request 0: the same text in other chunks, identical.
        let b = BTreeMap::from([
            (0, t(&["ab", "c"])),
            (1, t(&["a", "x", "c"])),
            (2, t(&["y", "b", "c"])),
            (3, t(&["a", "b"])),
        ]);
        let got = agreement(&a, &b);
        assert_eq!((got.matched, got.identical), (4, 1));
        // First differences at 1, 0 and 2: the median is 1.
        assert_eq!(got.first_difference_p50, Some(1.0));
        assert_eq!(agreement(&a, &a).first_difference_p50, None);
    }
}
