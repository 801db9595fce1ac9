//! Records that parse but whose content is unusable, as a user's damaged file holds them: each
//! is a malformed line named by its place (skipped with a warning, exit 2 under `--strict`),
//! and never the end of everything else the input holds.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn summarize(args: &[&str]) -> Output {
    Command::new(testkit::bin("summarize"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run summarize")
}

/// The clean fixture's summary records, the second one's TTFT histogram replaced by text that
/// is not base64; written to a file. Returns its path, how many summaries it holds and the
/// damaged one's concurrency.
fn damaged(dir: &std::path::Path) -> (PathBuf, usize, u64) {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clean.jsonl");
    let mut summaries: Vec<Value> = std::fs::read_to_string(fixture)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == "summary")
        .collect();
    assert!(summaries.len() >= 3, "the fixture has summaries");
    summaries[1]["hist"]["ttft_ms"] = Value::from("HISTFAAAA");
    let text: String = summaries.iter().map(|r| format!("{r}\n")).collect();
    let file = dir.join("damaged.jsonl");
    std::fs::write(&file, text).unwrap();
    let conc = summaries[1]["point"]["concurrency"].as_u64().unwrap();
    (file, summaries.len(), conc)
}

#[test]
fn a_summary_whose_histogram_does_not_decode_is_a_malformed_line_named_by_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let (file, summaries, damaged_conc) = damaged(dir.path());
    let path = file.to_str().unwrap();
    let place = format!("{path}:2: summary record of point 1 has a bad histogram");

    let out = summarize(&["--format", "json", path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("warning: skipping malformed line: {place}")),
        "{err}"
    );
    // Every other point is still summarized (the fixture's points differ in concurrency).
    let table: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let concs: Vec<u64> = table["tables"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["rows"].as_array().unwrap())
        .map(|r| r["conc"].as_u64().unwrap())
        .collect();
    assert_eq!(concs.len(), summaries - 1, "{concs:?}");
    assert!(
        !concs.contains(&damaged_conc),
        "the damaged point is skipped: {concs:?}"
    );

    let out = summarize(&["--strict", path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("summarize: error: {place}")),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing summarized under --strict");
}
