//! Comparisons: two runs (`--compare base new`) or the values of one label (`--compare-by
//! engine`), matching points side by side with the ratio new/base. A change is called real
//! only when it exceeds the runs' own noise: |new - base| > sqrt(hw_base² + hw_new²), where hw
//! is the half-width of each side's 95% interval (from repeats when present, else from the
//! run's own spread; see [`crate::input::metrics::Metric::single_run_noise`]), and by at least
//! [`MIN_EFFECT`] (with repeats on both sides) or [`MIN_EFFECT_SINGLE`] (without: one run's
//! spread shows sampling noise only, not how much a rerun moves).

pub mod agreement;
pub mod env_diff;
pub mod model_vs_reality;
pub mod pd;

use crate::input::metrics::{Better, Metric};
use crate::input::param::{Param, Params};
use crate::input::points::{Keys, Point, SampleKind, point_name};
use crate::render::{Cell, Column, Table};
use servbench::cli;
use servbench::record::Labels;
use std::collections::{BTreeMap, BTreeSet};

/// A change smaller than this share never counts as real, however tight the intervals: a
/// 1% move at a bounded tail is statistics, not news.
pub const MIN_EFFECT: f64 = 0.02;

/// The floor when either side is a single run: its spread says nothing about run-to-run
/// variation (machine load, server state), which on real runs is a few percent.
pub const MIN_EFFECT_SINGLE: f64 = 0.05;

pub const DEFAULT_METRICS: [Metric; 4] = [
    Metric::TOK_S,
    Metric::TTFT_P50,
    Metric::TTFT_P99,
    Metric::TPOT_P50,
];

/// The judged shares a comparison adds where both sides carry them at some point: a faster
/// run that answers worse shows in the same table as its speed.
pub const JUDGED_METRICS: [Metric; 2] = [Metric::ACCURACY, Metric::JSON_VALID];

/// The comparison's metrics: those asked for, then each of [`JUDGED_METRICS`] not among them
/// that some point of each side carries.
pub fn with_judged(metrics: &[Metric], base: &[Point], new: &[Point]) -> Vec<Metric> {
    let carried = |points: &[Point], m: Metric| points.iter().any(|p| p.mean(m).is_some());
    let mut out = metrics.to_vec();
    for m in JUDGED_METRICS {
        if !out.contains(&m) && carried(base, m) && carried(new, m) {
            out.push(m);
        }
    }
    out
}

/// How a metric moved between base and new.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Better,
    Worse,
    /// Within the runs' noise.
    Noise,
    /// Different, but neither run says how noisy it is.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    pub base: f64,
    pub new: f64,
    pub ratio: f64,
    pub verdict: Verdict,
}

/// Compares one metric of two measurements of the same point.
pub fn change(m: Metric, base: &Point, new: &Point) -> Option<Change> {
    change_scaled(m, (base, 1.0), (new, 1.0))
}

/// [`change`] of the metric times a factor on each side (its noise scaled alike): tok/s per
/// GPU of two layouts with different GPU counts.
pub fn change_scaled(m: Metric, base: (&Point, f64), new: (&Point, f64)) -> Option<Change> {
    let ((base, sb), (new, sn)) = (base, new);
    let (b, n) = (base.mean(m)? * sb, new.mean(m)? * sn);
    let ratio = if b != 0.0 { n / b } else { f64::NAN };
    let repeated = base.repeats.len() > 1 && new.repeats.len() > 1;
    let floor = if repeated {
        MIN_EFFECT
    } else {
        MIN_EFFECT_SINGLE
    };
    let verdict = match (base.noise(m).map(|x| x * sb), new.noise(m).map(|x| x * sn)) {
        _ if (n - b).abs() <= floor * b.abs() => Verdict::Noise,
        // One side's noise unknown (too few samples for a tail): no claim either way.
        (None, _) | (_, None) => Verdict::Unknown,
        (Some(nb), Some(nn)) => {
            let noise = (nb.powi(2) + nn.powi(2)).sqrt();
            if (n - b).abs() <= noise {
                Verdict::Noise
            } else if (n > b) == (m.better() == Better::Higher) {
                Verdict::Better
            } else {
                Verdict::Worse
            }
        }
    };
    Some(Change {
        base: b,
        new: n,
        ratio,
        verdict,
    })
}

fn ratio_text(c: &Change) -> String {
    let mark = match c.verdict {
        Verdict::Better => " better",
        Verdict::Worse => " worse",
        Verdict::Noise => " ~",
        Verdict::Unknown => " ?",
    };
    if c.ratio.is_finite() {
        format!("{:.2}x{mark}", c.ratio)
    } else {
        format!("-{mark}")
    }
}

/// The labels that name a whole side (the same on all its points): they differ between runs
/// by design (`run=base`), so matching ignores them.
fn run_labels(points: &[Point]) -> BTreeSet<String> {
    let keys = Keys::of(points);
    keys.constant
        .iter()
        .map(|(k, _)| k.clone())
        .filter(|k| Param::parse(k).is_none())
        .collect()
}

fn stripped(p: &Point, drop: &BTreeSet<String>) -> (Labels, Params) {
    let mut labels = p.labels.clone();
    labels.retain(|k, _| !drop.contains(k));
    (labels, p.params.without(drop))
}

/// The point parameters (input or output length, trace speed, images) each side holds one value of,
/// a different one: two runs of another workload. Matching ignores them (the comparison is on
/// the rest) and a note names them, rather than no row matching at all.
fn differing_params(base: &[Point], new: &[Point]) -> Vec<(String, String, String)> {
    let (b, n) = (Keys::of(base), Keys::of(new));
    [Param::In, Param::Out, Param::Speed, Param::Images]
        .map(Param::key)
        .iter()
        .filter_map(|k| {
            let value = |keys: &Keys| {
                keys.constant
                    .iter()
                    .find(|(c, _)| c == k)
                    .map(|(_, v)| v.clone())
            };
            match (value(&b), value(&n)) {
                (Some(x), Some(y)) if x != y => Some((k.to_string(), x, y)),
                _ => None,
            }
        })
        .collect()
}

/// One comparison between a base and a new set of points, matched by what is left of their
/// labels after `drop`, and by their parameters.
struct Pairing<'a> {
    pairs: Vec<(String, &'a Point, &'a Point)>,
    only_base: Vec<&'a Point>,
    only_new: Vec<&'a Point>,
}

fn pair<'a>(base: &'a [Point], new: &'a [Point], drop: &BTreeSet<String>) -> Pairing<'a> {
    let index: BTreeMap<(Labels, Params), &Point> =
        new.iter().map(|p| (stripped(p, drop), p)).collect();
    let mut used = BTreeSet::new();
    let mut pairs = Vec::new();
    let mut only_base = Vec::new();
    for b in base {
        let k = stripped(b, drop);
        match index.get(&k) {
            Some(n) => {
                used.insert(k);
                pairs.push((String::new(), b, *n));
            }
            None => only_base.push(b),
        }
    }
    let only_new = new
        .iter()
        .filter(|p| !used.contains(&stripped(p, drop)))
        .collect();
    Pairing {
        pairs,
        only_base,
        only_new,
    }
}

/// The keys a comparison's rows are told apart by: those that vary over the base points, and
/// the load.
fn key_columns(pairing: &Pairing) -> Vec<String> {
    let all: Vec<Point> = pairing.pairs.iter().map(|(_, b, _)| (*b).clone()).collect();
    let mut key_cols: Vec<String> = Keys::of(&all).varying;
    for load in Param::LOADS.map(Param::key) {
        if all.iter().any(|p| p.key_value(load).is_some()) && !key_cols.iter().any(|k| k == load) {
            key_cols.push(load.to_string());
        }
    }
    key_cols
}

fn key_column(k: &str) -> Column {
    Column {
        name: k.to_string(),
        // The comparison names the trace speed column by its key.
        header: match Param::parse(k) {
            Some(Param::Speed) | None => k.to_string(),
            Some(param) => param.header().into(),
        },
    }
}

/// A row's cells of `key_cols` (see [`key_columns`]).
fn key_cells(p: &Point, key_cols: &[String]) -> Vec<Cell> {
    key_cols
        .iter()
        .map(|k| match p.key_value(k) {
            Some(v) => crate::tables::points::key_cell(k, v),
            None => Cell::Empty,
        })
        .collect()
}

fn table_for(
    title: &str,
    context: Vec<(String, String)>,
    pairing: &Pairing,
    metrics: &[Metric],
    versus_col: bool,
) -> Table {
    let key_cols = key_columns(pairing);
    let mut columns = Vec::new();
    if versus_col {
        columns.push(Column {
            name: "new".into(),
            header: "new".into(),
        });
    }
    columns.extend(key_cols.iter().map(|k| key_column(k)));
    for m in metrics {
        for (suffix, head) in [("base", "base"), ("new", "new"), ("ratio", "new/base")] {
            columns.push(Column {
                name: format!("{}_{suffix}", m.name()),
                header: format!("{} {head}", m.header()),
            });
        }
    }
    let mut table = Table::new(title, columns);
    table.context = context;
    let mut tallies: Vec<(usize, usize, usize, usize, Vec<f64>)> =
        vec![(0, 0, 0, 0, Vec::new()); metrics.len()];
    for (group, (versus, b, n)) in pairing.pairs.iter().enumerate() {
        let mut row = Vec::new();
        if versus_col {
            row.push(Cell::Text(versus.clone()));
        }
        row.extend(key_cells(b, &key_cols));
        for (i, m) in metrics.iter().enumerate() {
            match change(*m, b, n) {
                Some(c) => {
                    row.push(Cell::num(Some(c.base)));
                    row.push(Cell::num(Some(c.new)));
                    row.push(Cell::Text(ratio_text(&c)));
                    match c.verdict {
                        Verdict::Better => tallies[i].0 += 1,
                        Verdict::Worse => tallies[i].1 += 1,
                        Verdict::Noise => tallies[i].2 += 1,
                        Verdict::Unknown => tallies[i].3 += 1,
                    }
                    if c.ratio.is_finite() && c.ratio > 0.0 {
                        tallies[i].4.push(c.ratio);
                    }
                }
                None => row.extend([Cell::Empty, Cell::Empty, Cell::Empty]),
            }
        }
        // Comparing by label: one group per base point, so text output keeps them apart.
        table.push(row, if versus_col { group } else { 0 });
    }
    for (m, (better, worse, same, unknown, ratios)) in metrics.iter().zip(&tallies) {
        if ratios.is_empty() {
            continue;
        }
        let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        let unknown = if *unknown > 0 {
            format!(", {unknown} unknown")
        } else {
            String::new()
        };
        table.notes.push(format!(
            "{}: {better} point(s) better, {worse} worse, {same} within noise{unknown}; geometric mean ratio {:.2}x",
            m.header(),
            geo
        ));
    }
    table.notes.push(
        "better/worse: the change exceeds both runs' noise (95% intervals combined: repeats' CI, else the run's own time blocks (batch means) or its spread over its waves) and 5% (2% with repeats on both sides); ~: within that; ?: too few samples to know the noise (a p99 needs 500+ requests, or 100+ in time blocks)".to_string(),
    );
    if metrics.iter().any(|m| JUDGED_METRICS.contains(m)) {
        table.notes.push(
            "accuracy % (--eval) and JSON valid % (--response-format): shares of each side's judged answers, whose noise is the 95% Wilson interval of that count (each answer judged on its own)".to_string(),
        );
    }
    if let Some(basis) = samples_note(pairing) {
        table.notes.push(basis);
    }
    let names = |ps: &[&Point]| -> String {
        let varying = Keys::of(&ps.iter().map(|p| (*p).clone()).collect::<Vec<_>>()).varying;
        ps.iter()
            .map(|p| point_name(p, &varying))
            .collect::<Vec<_>>()
            .join("; ")
    };
    if !pairing.only_base.is_empty() {
        table.notes.push(format!(
            "only in base (not compared): {}",
            names(&pairing.only_base)
        ));
    }
    if !pairing.only_new.is_empty() {
        table.notes.push(format!(
            "only in new (not compared): {}",
            names(&pairing.only_new)
        ));
    }
    table
}

/// How many independent samples the verdicts rest on, by kind: repeats, a run's time blocks,
/// or (points too short for blocks) its waves.
fn samples_note(pairing: &Pairing) -> Option<String> {
    let mut by_kind: BTreeMap<SampleKind, (usize, usize)> = BTreeMap::new();
    for (_, b, n) in &pairing.pairs {
        for (count, kind) in [b.samples(), n.samples()] {
            let e = by_kind.entry(kind).or_insert((count, count));
            *e = (e.0.min(count), e.1.max(count));
        }
    }
    let range = |(lo, hi): (usize, usize)| match lo == hi {
        true => lo.to_string(),
        false => format!("{lo}-{hi}"),
    };
    let parts: Vec<String> = by_kind
        .into_iter()
        .map(|(kind, r)| match kind {
            SampleKind::Repeats => format!("{} repeats per point", range(r)),
            SampleKind::Blocks => format!(
                "{} time blocks per run (batch means: each block two latencies or longer)",
                range(r)
            ),
            SampleKind::Waves => format!(
                "{} waves per run (points too short for time blocks, or recorded without them: the requests of one wave count once, its window over its mean latency)",
                range(r)
            ),
        })
        .collect();
    (!parts.is_empty()).then(|| format!("verdicts rest on {}", parts.join("; ")))
}

/// Two runs' points matched: by what is left of their labels once those naming a whole side
/// are dropped, and by their parameters less those each side holds one different value of
/// (returned: key, base value, new value).
fn pair_sides<'a>(
    base: &'a [Point],
    new: &'a [Point],
) -> (Pairing<'a>, Vec<(String, String, String)>) {
    let mut drop = run_labels(base);
    drop.extend(run_labels(new));
    let differ = differing_params(base, new);
    drop.extend(differ.iter().map(|(k, _, _)| k.clone()));
    (pair(base, new, &drop), differ)
}

/// `--compare base.jsonl new.jsonl`.
pub fn compare_sides(
    base: &[Point],
    new: &[Point],
    base_name: &str,
    new_name: &str,
    metrics: &[Metric],
) -> Table {
    let (pairing, differ) = pair_sides(base, new);
    let mut table = table_for(
        "comparison",
        vec![
            ("base".into(), base_name.into()),
            ("new".into(), new_name.into()),
        ],
        &pairing,
        metrics,
        false,
    );
    // The title says what is compared: a prediction against a measurement either way round
    // (scored as the model's error), two predictions (nothing there is reality), or two runs.
    let sides = (
        model_vs_reality::is_prediction(base),
        model_vs_reality::is_prediction(new),
    );
    let model_real: Option<Vec<(&Point, &Point)>> = match sides {
        (true, false) => Some(pairing.pairs.iter().map(|(_, b, n)| (*b, *n)).collect()),
        (false, true) => Some(pairing.pairs.iter().map(|(_, b, n)| (*n, *b)).collect()),
        _ => None,
    };
    table.title = match sides {
        (true, true) => "two predictions (srv-sim --predict on both sides)",
        (true, false) => "model vs reality",
        (false, true) => "reality vs model",
        (false, false) => "comparison",
    }
    .into();
    if let Some(pairs) = model_real {
        let notes = model_vs_reality::notes(&pairs, metrics);
        table.notes.splice(0..0, notes);
    }
    for (k, b, n) in differ {
        let what = match Param::parse(&k) {
            Some(Param::In) => "input length (tokens)",
            Some(Param::Out) => "output length (max_tokens)",
            _ => "trace speed",
        };
        table.notes.insert(
            0,
            format!("the runs differ in {what}: base {k}={b}, new {k}={n}; points are matched on the rest, so each ratio includes that difference"),
        );
    }
    table
}

/// `--compare-by LABEL[=BASE]`: the base is the given value, else the first in sort order;
/// every other value is compared with it.
pub fn compare_by_label(points: &[Point], spec: &str, metrics: &[Metric]) -> anyhow::Result<Table> {
    let (label, base_value) = match spec.split_once('=') {
        Some((l, v)) => (l.trim(), Some(v.to_string())),
        None => (spec.trim(), None),
    };
    let values: BTreeSet<String> = points
        .iter()
        .filter_map(|p| p.labels.get(label).cloned())
        .collect();
    if values.len() < 2 {
        return Err(cli::usage(format!(
            "--compare-by {label}: the records carry {} value(s) of label '{label}' ({}); it needs two or more (add them with --label {label}=... on each run)",
            values.len(),
            values.iter().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    let base_value = match base_value {
        Some(v) if values.contains(&v) => v,
        Some(v) => {
            return Err(cli::usage(format!(
                "--compare-by {label}={v}: no record has {label}={v}; values: {}",
                values.iter().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        None => values.iter().next().cloned().unwrap_or_default(),
    };
    let side = |v: &str| -> Vec<Point> {
        points
            .iter()
            .filter(|p| p.labels.get(label).map(String::as_str) == Some(v))
            .cloned()
            .collect()
    };
    let base = side(&base_value);
    let mut drop: BTreeSet<String> = BTreeSet::from([label.to_string()]);
    let mut all = Pairing {
        pairs: Vec::new(),
        only_base: Vec::new(),
        only_new: Vec::new(),
    };
    let others: Vec<(String, Vec<Point>)> = values
        .iter()
        .filter(|v| **v != base_value)
        .map(|v| (v.clone(), side(v)))
        .collect();
    // Labels that name a whole side (other than the compared one) are ignored too.
    let common: BTreeSet<String> = run_labels(&base);
    for (_, ps) in &others {
        drop.extend(run_labels(ps).intersection(&common).cloned());
    }
    for (v, ps) in &others {
        let p = pair(&base, ps, &drop);
        all.pairs.extend(
            p.pairs
                .into_iter()
                .map(|(_, b, n)| (format!("{label}={v}"), b, n)),
        );
        all.only_new.extend(p.only_new);
        all.only_base.extend(p.only_base);
    }
    // Sort by the base point, so each base point's comparisons sit together.
    all.pairs.sort_by(|a, b| {
        (&a.1.labels, a.1.params.sort_key()).cmp(&(&b.1.labels, b.1.params.sort_key()))
    });
    let mut table = table_for(
        &format!("comparison by {label}"),
        vec![("base".into(), format!("{label}={base_value}"))],
        &all,
        metrics,
        true,
    );
    // Groups: one per base point, when each has several comparisons.
    if others.len() < 2 {
        return Ok(table);
    }
    let mut g = 0;
    for i in 0..all.pairs.len() {
        if i > 0 && !std::ptr::eq(all.pairs[i].1, all.pairs[i - 1].1) {
            g += 1;
        }
        table.groups[i] = g;
    }
    Ok(table)
}
