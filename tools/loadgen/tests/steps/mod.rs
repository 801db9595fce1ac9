//! What the step-log tests share (engine_steps.rs, trtllm_self_report.rs): the run's records
//! by kind, each point's `engine_steps` checked against the server's log, and a hand-made
//! `server` record whose log is a path of the test's own.

#![allow(dead_code)]

use servbench::record::{EngineSteps, SummaryRecord};
use std::path::{Path, PathBuf};

/// The records of `kind` in a run's output, typed.
pub fn records<T: serde::de::DeserializeOwned>(text: &str, kind: &str) -> Vec<T> {
    text.lines()
        .filter(|l| l.contains(&format!(r#""kind":"{kind}""#)))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every point's `engine_steps`: each summary has them, together they hold every step the
/// server logged (`logged` lines of `log`: no step ran outside a point), and the first point,
/// one request at a time, `first` steps.
pub fn every_points_steps<'a>(
    points: &'a [SummaryRecord],
    logged: usize,
    log: &str,
    first: u64,
) -> Vec<&'a EngineSteps> {
    let steps: Vec<&EngineSteps> = points
        .iter()
        .map(|s| {
            s.engine_steps
                .as_ref()
                .expect("engine_steps in every summary")
        })
        .collect();
    assert_eq!(
        steps.iter().map(|e| e.steps).sum::<u64>(),
        logged as u64,
        "{log}"
    );
    assert_eq!(steps[0].steps, first);
    steps
}

/// A `server` record (schema `v`) for the srv-sim at `url` that says it logs its steps, its
/// log at `log`: written to DIR/server.jsonl, whose path is returned.
pub fn server_logging_to(dir: &Path, url: &str, log: &Path, v: u32) -> PathBuf {
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let record = serde_json::json!({
        "kind": "server", "v": v, "ts": "2026-12-02T00:00:00.000Z", "engine": "sim",
        "host": "localhost", "pid": 1, "pgid": 1, "start_ticks": 1, "port": port,
        "url": url, "command": "srv-sim --enable-logging-iteration-details",
        "log": log.to_str().unwrap(), "ready_s": 0.1,
        "argv": ["srv-sim", "--enable-logging-iteration-details"]
    });
    let server = dir.join("server.jsonl");
    std::fs::write(&server, format!("{record}\n")).unwrap();
    server
}
