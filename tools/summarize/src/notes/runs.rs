//! Notes that look across runs and loads, as real workflows produce them: rows that never had
//! their concurrency in flight, speculative gains that vanish under load, and how far a result
//! moves from one run (`run=` label) to the next. Like every note, each is a small function
//! over the points, tested on a fixture where it fires and one where it stays silent.

use crate::input::metrics::{Metric, Scalar};
use crate::input::param::is_load_key;
use crate::input::points::{Point, point_name};
use crate::notes::note::Facts;
use crate::notes::words::{RUN_LABEL, TPC_ABOVE, load_name, series, series_name, without_run};
use crate::render::human;
use crate::roofline::spec::spec_tokens;
use servbench::record::Labels;
use servbench::stats::MeanCi;
use std::collections::{BTreeMap, BTreeSet};

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
/// speculation off. A series whose server view shows no speculation at any load is not
/// speculating, whatever its chunks carry (srv-sim and engines batch a stream's tokens into one
/// chunk when the client or the box falls behind), as [`spec_tokens`] reads it.
pub fn spec_gain_collapses(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let mut out = Vec::new();
    for s in series(points) {
        let server_seen = s
            .iter()
            .any(|p| p.repeats.iter().any(|r| r.server.is_some()));
        if server_seen && s.iter().all(|p| spec_tokens(p).is_none()) {
            continue;
        }
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

/// A speculative run's gain over the plain runs at the lightest load, below which (a 10%
/// faster stream) the note has no gain to see fall.
pub const SPEC_GAIN_MIN: f64 = 0.10;

/// A speculative run beside runs without speculation at the same loads and labels (`run`
/// aside, and the labels that tell the two apart: a key whose values on the speculative points
/// are none of the plain points', such as `spec=eagle3` against none or `spec=off`): each
/// stream's decode rate (1000 / TPOT p50) over the plain runs' mean at each load. A gain of
/// 10% or more (beyond the points' noise) at the lightest load that keeps less than half of
/// itself ([`SPEC_GAIN_KEPT`]) at the heaviest gets a note. The acceptance can
/// hold while the gain goes (the campaign's EAGLE-3: 2.2 tokens per chunk at every load, 1.65x
/// at C=1 and ~1.0x at C=32): the verify step's extra tokens cost more as the batch grows.
pub fn spec_gain_falls(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let rate = Metric::Scalar(Scalar::StreamTokS);
    let (spec, plain): (Vec<&Point>, Vec<&Point>) =
        points.iter().partition(|p| spec_tokens(p).is_some());
    let apart = telling_apart(&spec, &plain);
    // A plain run by the labels that vary (its `run=2`), without its load.
    let name = |p: &Point| -> String {
        let parts: Vec<String> = keys
            .varying
            .iter()
            .filter(|k| !is_load_key(k))
            .filter_map(|k| Some(format!("{k}={}", p.labels.get(k)?)))
            .collect();
        parts.join(" ")
    };
    let mut out = Vec::new();
    for s in series(points) {
        if s.iter().any(|p| spec_tokens(p).is_none()) {
            continue;
        }
        // Per load: (the point, its rate, the plain points beside it and their mean rate).
        let gains: Vec<(&Point, f64, Vec<&Point>, f64)> = s
            .iter()
            .filter_map(|sp| {
                let beside: Vec<&Point> = plain
                    .iter()
                    .filter(|q| q.params == sp.params && agree(&q.labels, &sp.labels, &apart))
                    .copied()
                    .collect();
                let rates: Vec<f64> = beside.iter().filter_map(|q| q.mean(rate)).collect();
                let base =
                    (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64)?;
                Some((*sp, sp.mean(rate)?, beside, base))
            })
            .filter(|(_, _, _, base)| *base > 0.0)
            .collect();
        let (Some(light), Some(heavy)) = (gains.first(), gains.last()) else {
            continue;
        };
        let (g0, g1) = (light.1 / light.3, heavy.1 / heavy.3);
        let noise = |p: &Point| p.noise(rate).unwrap_or(0.0).powi(2);
        let light_noise = (noise(light.0) + light.2.iter().map(|q| noise(q)).sum::<f64>()).sqrt();
        if std::ptr::eq(light.0, heavy.0)
            || g0 < 1.0 + SPEC_GAIN_MIN
            || light.1 - light.3 <= light_noise
            || g1 - 1.0 >= SPEC_GAIN_KEPT * (g0 - 1.0)
        {
            continue;
        }
        let mut plain_names: Vec<String> = light
            .2
            .iter()
            .map(|q| name(q))
            .filter(|n| !n.is_empty())
            .collect();
        plain_names.dedup();
        let at = |(p, r, _, base): &(&Point, f64, Vec<&Point>, f64)| {
            format!(
                "{:.2}x at {} (TPOT p50 {} against {} ms)",
                r / base,
                load_name(p),
                human(1000.0 / r),
                human(1000.0 / base)
            )
        };
        let series = series_name(s[0], keys);
        let series = series
            .trim_start()
            .trim_start_matches('(')
            .trim_end_matches(')');
        let against = match plain_names.join(", ") {
            n if n.is_empty() => "against the runs without it".to_string(),
            n => format!("against {n} without it"),
        };
        let who = match series {
            "" => against,
            s => format!("{s}, {against}"),
        };
        out.push(format!(
            "speculative gain falls with load ({who}): each stream decodes {} but {}: the verify step's draft tokens cost more as the batch grows (more experts read, more FLOPs) while saving no more steps, so speculation pays at light load only; turn it off (or draft fewer tokens) above the load where the gain ends",
            at(light),
            at(heavy),
        ));
    }
    out
}

/// The label keys whose values (absent counting as one) on `a` are none of those on `b`.
fn telling_apart(a: &[&Point], b: &[&Point]) -> BTreeSet<String> {
    let keys: BTreeSet<&String> = a.iter().chain(b).flat_map(|p| p.labels.keys()).collect();
    keys.into_iter()
        .filter(|k| {
            let values = |side: &[&Point]| -> BTreeSet<Option<String>> {
                side.iter().map(|p| p.labels.get(*k).cloned()).collect()
            };
            values(a).is_disjoint(&values(b))
        })
        .cloned()
        .collect()
}

/// Whether two points' labels agree on every key, `run` and the keys in `apart` aside.
fn agree(a: &Labels, b: &Labels, apart: &BTreeSet<String>) -> bool {
    a.keys()
        .chain(b.keys())
        .filter(|k| k.as_str() != RUN_LABEL && !apart.contains(*k))
        .all(|k| a.get(k) == b.get(k))
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
