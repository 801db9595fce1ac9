//! Notes that look across runs and loads, as real workflows produce them: rows that never had
//! their concurrency in flight, speculative gains that vanish under load, and how far a result
//! moves from one run (`run=` label) to the next. Like every note, each is a small function
//! over the points, tested on a fixture where it fires and one where it stays silent.

use crate::input::metrics::Metric;
use crate::input::points::{Point, point_name};
use crate::notes::note::Facts;
use crate::notes::words::{RUN_LABEL, TPC_ABOVE, load_name, series, series_name, without_run};
use crate::render::human;
use servbench::record::Labels;
use servbench::stats::MeanCi;
use std::collections::BTreeMap;

/// A speculative gain (tokens per chunk above 1) that falls below this share of its gain at the
/// lightest load has collapsed.
pub const SPEC_GAIN_KEPT: f64 = 0.5;

/// A row whose concurrency was never in flight: fewer requests per run than the concurrency.
pub fn too_few_requests(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let hits: Vec<String> = points
        .iter()
        .filter_map(|p| {
            let c = u64::from(p.params.concurrency?);
            let fewest = p.repeats.iter().map(|s| s.requests).min()?;
            (fewest < c).then(|| format!("{} ({fewest} requests)", point_name(p, &keys.varying)))
        })
        .collect();
    if hits.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "fewer requests than the concurrency at {}: at most that many were ever in flight, so those rows are not at their concurrency; give loadgen -n at least the concurrency (several times it, for a steady state)",
        hits.join(", ")
    )]
}

/// Speculative decoding (several tokens per chunk) that gains at light load and stops gaining
/// as the load rises: the engine verifies fewer drafts per step under load, or turns
/// speculation off.
pub fn spec_gain_collapses(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let mut out = Vec::new();
    for s in series(points) {
        let tpc: Vec<Option<f64>> = s.iter().map(|p| p.mean(Metric::TPC)).collect();
        let (Some(first), Some((last_i, last))) = (
            tpc[0],
            tpc.iter()
                .enumerate()
                .rev()
                .find_map(|(i, t)| t.map(|t| (i, t))),
        ) else {
            continue;
        };
        let gain = first - 1.0;
        if first <= TPC_ABOVE || last_i == 0 || last - 1.0 >= SPEC_GAIN_KEPT * gain {
            continue;
        }
        out.push(format!(
            "speculative gain collapses with load{}: {:.2} tokens per chunk at {} but {:.2} at {}: under load the engine verifies fewer drafts (or turns speculation off), so at high concurrency speculation buys little; compare TPOT with it off there",
            series_name(s[0], keys),
            first,
            load_name(s[0]),
            last,
            load_name(s[last_i]),
        ));
    }
    out
}

/// Per point, the mean and 95% interval across runs labelled apart (`run=1..N`): how much a
/// result moves from one launch to the next.
pub fn across_runs(facts: &Facts) -> Vec<String> {
    let points = facts.points;
    let mut groups: BTreeMap<Labels, BTreeMap<_, Vec<&Point>>> = BTreeMap::new();
    for p in points.iter().filter(|p| {
        p.labels.contains_key(RUN_LABEL) && !p.partial && p.repeats.iter().any(|s| s.ok > 0)
    }) {
        groups
            .entry(without_run(&p.labels))
            .or_default()
            .entry(p.params.sort_key())
            .or_default()
            .push(p);
    }
    let mut out = Vec::new();
    for (labels, by_point) in groups {
        let mut runs: Vec<&str> = by_point
            .values()
            .flatten()
            .filter_map(|p| p.labels.get(RUN_LABEL).map(String::as_str))
            .collect();
        runs.sort_unstable();
        runs.dedup();
        if runs.len() < 2 {
            continue;
        }
        let figure = |ps: &[&Point], m: Metric| {
            let values: Vec<f64> = ps.iter().filter_map(|p| p.mean(m)).collect();
            MeanCi::of(&values).filter(|c| c.n >= 2)
        };
        let rows: Vec<String> = by_point
            .values()
            .filter_map(|ps| {
                let tok = figure(ps, Metric::TOK_S)?;
                let mut row = format!("{} {} tok/s ({} runs)", load_name(ps[0]), pm(&tok), tok.n);
                if let Some(tpot) = figure(ps, Metric::TPOT_P50) {
                    row.push_str(&format!(", TPOT p50 {} ms", pm(&tpot)));
                }
                Some(row)
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let group: Vec<String> = labels
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "engine" | "model"))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push(format!(
            "run to run{} ({RUN_LABEL}={}), mean ± 95% CI over runs: {}",
            if group.is_empty() {
                String::new()
            } else {
                format!(" ({})", group.join(" "))
            },
            runs.join(","),
            rows.join("; ")
        ));
    }
    out
}

/// `204 ± 3.1`.
fn pm(c: &MeanCi) -> String {
    format!("{} ± {}", human(c.mean), human(c.half_width.unwrap_or(0.0)))
}
