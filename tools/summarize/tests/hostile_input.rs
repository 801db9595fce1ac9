//! Records that parse but whose content is unusable, as a user's damaged file holds them: each
//! is a malformed line named by its place (skipped with a warning, exit 2 under `--strict`),
//! and never the end of everything else the input holds.

use serde_json::Value;
use std::path::PathBuf;

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

    let out = testkit::run("summarize", &["--format", "json", path]);
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

    let out = testkit::run("summarize", &["--strict", path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("summarize: error: {place}")),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing summarized under --strict");
}

/// Request records whose times cannot be real (a negative TTFT, an E2E of 1e300 ms) were
/// folded into the histograms and showed a TTFT of 1.8e16 ms: each is a malformed line named
/// by its place, the point is summarized from the others, and `--strict` refuses the file.
#[test]
fn a_request_whose_latency_cannot_be_real_is_a_malformed_line_named_by_its_place() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clean.jsonl");
    let mut requests: Vec<Value> = std::fs::read_to_string(fixture)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == "request" && r["point"]["index"] == 0)
        .collect();
    let n = requests.len();
    assert!(n >= 4, "the fixture's first point has requests");
    requests[1]["ttft_ms"] = Value::from(-5.0);
    requests[2]["e2e_ms"] = Value::from(1e300);
    let text: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("times.jsonl");
    std::fs::write(&file, text).unwrap();
    let path = file.to_str().unwrap();

    let out = testkit::run(
        "summarize",
        &[
            "--format",
            "json",
            "--cols",
            "conc,requests,ttft_min,e2e_max",
            path,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("{path}:2: ttft_ms -5.0 is not a latency")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{path}:3: e2e_ms 1e300 is not a latency")),
        "{err}"
    );
    let table: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let rows: Vec<&Value> = table["tables"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["rows"].as_array().unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        rows[0]["requests"].as_u64(),
        Some(n as u64 - 2),
        "{:?}",
        rows[0]
    );
    assert!(rows[0]["ttft_min"].as_f64().unwrap() > 0.0, "{:?}", rows[0]);
    assert!(rows[0]["e2e_max"].as_f64().unwrap() < 1e4, "{:?}", rows[0]);

    let out = testkit::run("summarize", &["--strict", path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(&format!("summarize: error: {path}:2: ttft_ms -5.0")),
        "{err}"
    );
}

#[test]
fn a_line_without_end_is_bounded_and_what_came_before_is_summarized() {
    let clean = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clean.jsonl");
    let clean = clean.to_str().unwrap();
    let out = testkit::run("summarize", &[clean, "/dev/zero"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("/dev/zero:1: a line longer than 256 MiB") && err.contains("not read"),
        "{err}"
    );
    assert!(!out.stdout.is_empty(), "the table of the records before it");
    let out = testkit::run("summarize", &["--strict", clean, "/dev/zero"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/dev/zero:1:"));
}
