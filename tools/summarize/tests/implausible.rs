//! summarize tells two runs apart and refuses what no measurement can say: two loadgen runs
//! appended to one file (or a line repeated) are noticed at their file:line and kept apart,
//! and a record with impossible figures (more successes than requests, four billion tokens,
//! a first token after the end, a ramp without levels, a search whose bounds cross, a GEMM in
//! negative time) is a malformed line: named, skipped, exit 2 under --strict.

use serde_json::Value;
use std::path::{Path, PathBuf};
use testkit::stderr;

fn write(dir: &Path, name: &str, lines: &[String]) -> String {
    let path: PathBuf = dir.join(name);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// A real line of a kind, as the README's record section shows it.
fn readme_line(kind: &str) -> Value {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let prefix = format!("{{\"kind\":\"{kind}\"");
    let line = readme
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {kind} line in README"));
    serde_json::from_str(line).unwrap()
}

/// Twenty short requests, two at a time, without telemetry: their stdout lines.
fn loadgen_run(url: &str) -> Vec<String> {
    const BASE: &[&str] = &[
        "-c",
        "2",
        "-n",
        "20",
        "--max-tokens",
        "4",
        "--input-len",
        "16",
        "--no-metrics",
    ];
    let out = testkit::loadgen_at(url, BASE, &[]).ok().out();
    out.lines().map(str::to_string).collect()
}

/// The table's rows as JSON (`--format json`).
fn rows(path: &str, cols: &str) -> Vec<Value> {
    let out = testkit::run("summarize", &[path, "--format", "json", "--cols", cols]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["tables"][0]["rows"].as_array().unwrap().clone()
}

#[test]
fn two_runs_appended_to_one_file_are_named_and_kept_apart() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let first = loadgen_run(&url);
    let one = write(dir.path(), "one.jsonl", &first);
    // One run: as today, no word, one row of 20 requests.
    let clean = testkit::run("summarize", &["--strict", &one]);
    assert!(clean.status.success(), "{}", stderr(&clean));
    assert!(!stderr(&clean).contains("two runs"), "{}", stderr(&clean));
    assert_eq!(rows(&one, "requests,req_s").len(), 1);

    let mut both = first.clone();
    both.extend(loadgen_run(&url));
    let appended = write(dir.path(), "run.jsonl", &both);
    let out = testkit::run("summarize", &[&appended]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The second run's first line is named.
    let at = format!("run.jsonl:{}: request id", first.len() + 1);
    assert!(stderr(&out).contains(&at), "{at}: {}", stderr(&out));
    assert!(
        stderr(&out).contains("two runs in one input"),
        "{}",
        stderr(&out)
    );
    let table = rows(&appended, "requests,req_s");
    assert_eq!(table.len(), 2, "two runs, two rows: {table:?}");
    for row in &table {
        assert_eq!(row["requests"], 20, "never 40 merged: {table:?}");
    }
    // --strict refuses, naming the place.
    let strict = testkit::run("summarize", &["--strict", &appended]);
    assert_eq!(strict.status.code(), Some(2), "{}", stderr(&strict));
    assert!(stderr(&strict).contains(&at), "{}", stderr(&strict));

    // A request line repeated is the same: noticed, never counted twice in one point.
    let mut repeated = first.clone();
    let request = repeated
        .iter()
        .position(|l| l.contains("\"kind\":\"request\""))
        .unwrap();
    repeated.insert(request + 1, repeated[request].clone());
    let dup = write(dir.path(), "dup.jsonl", &repeated);
    let out = testkit::run("summarize", &[&dup]);
    assert!(
        stderr(&out).contains(&format!("dup.jsonl:{}: request id", request + 2)),
        "{}",
        stderr(&out)
    );
    let total: u64 = rows(&dup, "requests")
        .iter()
        .map(|r| r["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 21, "the repeat is kept apart, the run keeps its 20");
    assert!(rows(&dup, "requests").iter().any(|r| r["requests"] == 20));
}

/// Each mutation of a real line makes it implausible: summarize names it by file:line and
/// skips it, and --strict exits 2; the line as it was is read as today.
fn refused(kind: &str, clean: Value, mutate: impl Fn(&mut Value), says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let ok = write(dir.path(), "clean.jsonl", &[clean.to_string()]);
    let out = testkit::run("summarize", &["--strict", &ok]);
    assert!(out.status.success(), "{kind} clean: {}", stderr(&out));
    let mut bad = clean.clone();
    mutate(&mut bad);
    let path = write(
        dir.path(),
        "bad.jsonl",
        &[clean.to_string(), bad.to_string()],
    );
    let out = testkit::run("summarize", &[&path]);
    let err = stderr(&out);
    assert!(out.status.success(), "{kind}: {err}");
    assert!(
        err.contains(&format!(
            "bad.jsonl:2: {}",
            if kind == "request" { "" } else { "implausible" }
        )) && err.contains(says),
        "{kind}: {says}: {err}"
    );
    let strict = testkit::run("summarize", &["--strict", &path]);
    assert_eq!(strict.status.code(), Some(2), "{kind}: {}", stderr(&strict));
    assert!(
        stderr(&strict).contains("bad.jsonl:2:"),
        "{}",
        stderr(&strict)
    );
}

#[test]
fn impossible_counts_and_times_are_named_and_skipped() {
    let summary = readme_line("summary");
    // U3: more successes than requests (errors underflowed to 9223372036854775807).
    refused(
        "summary",
        summary.clone(),
        |s| s["ok"] = 1000.into(),
        "ok 1000, errors 0 and cancelled 0 of 4 requests",
    );
    // U4: four billion tokens in a request; a first token after the request's end.
    let request = readme_line("request");
    refused(
        "request",
        request.clone(),
        |r| r["output_tokens"] = 4_000_000_000u64.into(),
        "output_tokens 4000000000 is more than any request holds",
    );
    refused(
        "request",
        request,
        |r| r["ttft_ms"] = 500.0.into(),
        "ttft_ms 500 is after the request's end",
    );
    // U6: a ramp with no levels; a search whose bounds cross, with no probes.
    refused(
        "ramp",
        readme_line("ramp"),
        |r| r["levels"] = Value::Array(vec![]),
        "a ramp with no levels",
    );
    refused(
        "search",
        readme_line("search"),
        |s| {
            s["max_passing"] = 50.0.into();
            s["first_failing"] = 10.0.into();
        },
        "max_passing 50 is not below first_failing 10",
    );
    refused(
        "search",
        readme_line("search"),
        |s| s["probes"] = Value::Array(vec![]),
        "a search with bounds but no probes",
    );
    // U7: a GEMM in negative time at negative TFLOP/s, against a card with no peaks.
    refused(
        "gemm",
        readme_line("gemm"),
        |g| {
            g["time_us"]["mean"] = (-1.0).into();
            g["tflops"] = (-100.0).into();
        },
        "time_us (mean -1.0",
    );
    refused(
        "gemm",
        readme_line("gemm"),
        |g| g["peak_tflops"] = 0.0.into(),
        "peak_tflops 0.0 is not a finite figure > 0",
    );
}
