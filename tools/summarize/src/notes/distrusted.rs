//! Notes on telemetry loadgen read but did not believe: `/metrics` going silent mid-point
//! (`server.incomplete`), and the samples it dropped (`server.notes`, `gpus[].notes`: non-finite,
//! negative or out-of-range values, duplicate series). The figures those samples would have made
//! are absent from the table; these notes say why, so an empty cell is never a silent one.

use crate::input::points::Point;
use crate::notes::note::Facts;
use crate::notes::words::load_name;

/// Each distinct line once, with the points it came from, in the points' order.
fn grouped(points: &[Point], lines: impl Fn(&Point) -> Vec<String>) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for p in points {
        let name = load_name(p);
        for line in lines(p) {
            let at = match out.iter().position(|(l, _)| *l == line) {
                Some(i) => i,
                None => {
                    out.push((line, Vec::new()));
                    out.len() - 1
                }
            };
            if !out[at].1.contains(&name) {
                out[at].1.push(name.clone());
            }
        }
    }
    out
}

/// `/metrics` stopped answering during a point: its server figures end at the last scrape.
pub fn metrics_went_silent(facts: &Facts) -> Vec<String> {
    let points = facts.points;
    let silent: Vec<String> = points
        .iter()
        .filter(|p| {
            p.repeats
                .iter()
                .any(|s| s.server.as_ref().is_some_and(|v| v.incomplete))
        })
        .map(load_name)
        .collect();
    if silent.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "the server stopped answering /metrics during {}: its server figures cover each such point only up to the last answered scrape",
        silent.join(", ")
    )]
}

/// Samples loadgen dropped as not believable, server and GPU, each line once with its points.
pub fn samples_not_believed(facts: &Facts) -> Vec<String> {
    let points = facts.points;
    let server = grouped(points, |p| {
        p.repeats
            .iter()
            .filter_map(|s| s.server.as_ref())
            .flat_map(|v| v.notes.iter().cloned())
            .collect()
    });
    let gpus = grouped(points, |p| {
        p.repeats
            .iter()
            .flat_map(|s| s.gpus.iter())
            .flat_map(|g| g.notes.iter().map(move |n| format!("GPU {}: {n}", g.index)))
            .collect()
    });
    let mut out = Vec::new();
    for (what, lines) in [("/metrics", server), ("GPU telemetry", gpus)] {
        for (line, names) in lines {
            out.push(format!(
                "{what} samples not believed at {}: {line}",
                names.join(", ")
            ));
        }
    }
    out
}
