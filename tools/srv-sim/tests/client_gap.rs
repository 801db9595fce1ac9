//! `srv-sim --predict --client-gap-from RUN.jsonl`: the modelled client's gap measured from a
//! real loadgen run on srv-sim (its re-sent requests' arrivals at the engine, from each
//! answer's `metrics`), and the one-line refusals of a file it cannot measure.

mod common;
use common::*;
use std::process::{Command, Output, Stdio};

const PRESET: [&str; 4] = ["--model", "llama-3.1-8b", "--hardware", "h100"];
const LOAD: [&str; 8] = [
    "-c",
    "8",
    "-n",
    "32",
    "--input-len",
    "64",
    "--max-tokens",
    "16",
];

fn predict_from(run: &std::path::Path) -> Output {
    Command::new(testkit::bin("srv-sim"))
        .args(PRESET)
        .args(["--predict", "--seed", "3"])
        .args(LOAD)
        .arg("--client-gap-from")
        .arg(run)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The `client gap G us, request latency L us (median of S spacings ... over R re-sent
/// requests; ...)` line: (G, L, S, R).
fn measured_line(stderr: &str) -> (u64, u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains(": client gap "))
        .unwrap_or_else(|| panic!("no client gap line in: {stderr}"));
    let nums: Vec<u64> = line
        .rsplit_once(": client gap ")
        .unwrap()
        .1
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    (nums[0], nums[1], nums[2], nums[3])
}

#[test]
fn the_client_gap_measured_from_a_loadgen_run_is_non_negative_and_below_its_mean_request_time() {
    let sim = start(&[&PRESET[..], &["--enable-per-request-metrics"]].concat());
    let out = Command::new(testkit::bin("loadgen"))
        .args([
            "--url",
            &format!("http://127.0.0.1:{}", sim.port),
            "--no-metrics",
        ])
        .args(LOAD)
        .args(["--seed", "3"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(sim);
    let records = testkit::json_lines(&out.stdout);
    let e2e: Vec<f64> = records
        .iter()
        .filter(|r| r["kind"] == "request")
        .map(|r| r["e2e_ms"].as_f64().expect("e2e_ms"))
        .collect();
    assert_eq!(e2e.len(), 32);
    let mean_e2e_us = e2e.iter().sum::<f64>() / 32.0 * 1e3;
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.jsonl");
    std::fs::write(&run, &out.stdout).unwrap();

    let predicted = predict_from(&run);
    let stderr = String::from_utf8_lossy(&predicted.stderr);
    assert!(predicted.status.success(), "{stderr}");
    let (gap_us, latency_us, spacings, resent) = measured_line(&stderr);
    // Every request past the first C was sent into a freed slot; the spacings are of
    // consecutive ones, so at most one fewer.
    assert_eq!(resent, 24, "{stderr}");
    assert!(spacings < resent, "{stderr}");
    assert!(
        (gap_us as f64) < mean_e2e_us,
        "{gap_us} us against {mean_e2e_us} us"
    );
    // Each request's TTFT less the engine's is at most its TTFT, below its end: so the median
    // of the one is at most the median of the other, whatever the machine's load.
    let mut sorted = e2e.clone();
    sorted.sort_by(f64::total_cmp);
    let median_e2e_us = sorted[15] * 1e3;
    assert!(
        (latency_us as f64) <= median_e2e_us,
        "{latency_us} us against {median_e2e_us} us"
    );
    let summaries = testkit::json_lines(&predicted.stdout)
        .into_iter()
        .filter(|r| r["kind"] == "summary")
        .count();
    assert_eq!(summaries, 1);
}

#[test]
fn a_malformed_run_file_is_refused_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.jsonl");
    std::fs::write(&run, "\n{\"kind\":\"request\", \"id\": \"x\"}\n").unwrap();
    let out = predict_from(&run);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--client-gap-from") && stderr.contains(&format!("{}:2", run.display())),
        "{stderr}"
    );
}

#[test]
fn a_run_without_the_engines_timing_is_refused_saying_how_to_serve_it() {
    // A prediction's own records carry no server_timing, as loadgen's against a server
    // without --enable-per-request-metrics.
    let run = Command::new(testkit::bin("srv-sim"))
        .args(PRESET)
        .arg("--predict")
        .args(LOAD)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(run.status.success());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    std::fs::write(&path, &run.stdout).unwrap();
    let out = predict_from(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--enable-per-request-metrics"), "{stderr}");
}

#[test]
fn a_measured_client_refuses_an_explicit_request_latency() {
    // --client-gap-from measures the request latency too: a given one would be dropped unsaid.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(testkit::bin("srv-sim"))
        .args(PRESET)
        .arg("--predict")
        .args(LOAD)
        .args(["--request-latency", "1ms", "--client-gap-from"])
        .arg(dir.path().join("run.jsonl"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot be used with") && stderr.contains("--request-latency"),
        "{stderr}"
    );
}

/// A real loadgen run on srv-sim answering with its per-request metrics: its records.
fn served_run() -> Vec<serde_json::Value> {
    let sim = start(&[&PRESET[..], &["--enable-per-request-metrics"]].concat());
    let out = Command::new(testkit::bin("loadgen"))
        .args(["--url", &format!("http://127.0.0.1:{}", sim.port)])
        .args(["--no-metrics", "--seed", "3"])
        .args(LOAD)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    testkit::json_lines(&out.stdout)
}

/// `records` edited by `edit` (each request and its id), predicted from: its stderr.
fn predicted_from_edited(
    records: &[serde_json::Value],
    edit: impl Fn(&mut serde_json::Value, u64),
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.jsonl");
    let mut text = String::new();
    for r in records {
        let mut r = r.clone();
        if r["kind"] == "request" {
            let id = r["id"].as_u64().unwrap();
            edit(&mut r, id);
        }
        text.push_str(&format!("{r}\n"));
    }
    std::fs::write(&run, text).unwrap();
    let out = predict_from(&run);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    stderr
}

/// CG-bad (round 4): requests whose engine TTFT exceeds the client's gave a request latency of
/// 0 us, unsaid. They are left out, and a warning says how many.
#[test]
fn cg_bad_requests_whose_engine_ttft_exceeds_the_clients_are_left_out_and_counted() {
    let records = served_run();
    let stderr = predicted_from_edited(&records, |r, id| {
        if id % 2 == 0 {
            r["server_timing"]["ttft_ms"] = serde_json::json!(1e9);
        }
    });
    assert!(
        stderr.contains("16 request(s) whose engine TTFT exceeds the client's left out"),
        "{stderr}"
    );
    let (_, latency_us, _, resent) = measured_line(&stderr);
    assert!(latency_us > 0, "{stderr}");
    // Of the 24 re-sent (ids 8..32), the odd ones are left.
    assert_eq!(resent, 12, "{stderr}");
}

/// CG-slow (round 4): client TTFTs of 2.8 hours were taken as a request latency of 10^10 us
/// (a predicted TTFT p50 of 10,003 s). A latency longer than the run's median request time is
/// bounded to it, with a warning.
#[test]
fn cg_slow_an_implausible_request_latency_is_bounded_with_a_warning() {
    let records = served_run();
    let mut e2e: Vec<f64> = records
        .iter()
        .filter(|r| r["kind"] == "request")
        .map(|r| r["e2e_ms"].as_f64().unwrap())
        .collect();
    e2e.sort_by(f64::total_cmp);
    let stderr = predicted_from_edited(&records, |r, _| {
        r["ttft_ms"] = serde_json::json!(1e7);
    });
    assert!(
        stderr.contains("is longer than the run's median request time")
            && stderr.contains("bounded"),
        "{stderr}"
    );
    let (_, latency_us, _, _) = measured_line(&stderr);
    assert!(
        latency_us as f64 <= e2e[15] * 1e3 + 1.0,
        "{latency_us} us against a median request time of {} ms",
        e2e[15]
    );
}
