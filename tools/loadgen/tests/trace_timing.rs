//! The timing claim of trace replay, in a test binary of its own so no sibling test competes
//! for the two cores while it runs: a trace compressed to 2,000 requests a second is sent on
//! its rows' times.

use serde_json::{Value, json};
use testkit::{check, holds_in_one_of_three};

/// A trace compressed to 2,000 requests a second: every request leaves within a millisecond
/// of its row's time (send lag p99 < 1 ms), like the open loop's sends.
#[test]
fn compressed_trace_sends_keep_their_times_at_2000_per_second() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "0ms", "--itl", "0ms"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("fast.jsonl");
    // 2,000 rows 10 ms apart (20 s of trace) with jitter, played 20x: 2,000 req/s for 1 s.
    let rows: String = (0..2000u64)
        .map(|i| {
            let ts = i * 10 + (i * 7919) % 9;
            json!({"timestamp": ts, "input_length": 16, "output_length": 2}).to_string() + "\n"
        })
        .collect();
    std::fs::write(&trace, rows).unwrap();
    let trace = trace.to_str().unwrap();
    holds_in_one_of_three("trace send lag at 2,000 req/s", || {
        let out = testkit::loadgen(&[
            "--url",
            &url,
            "--trace",
            trace,
            "--trace-speed",
            "20",
            "--no-requests",
        ]);
        let recs = testkit::json_lines(&out.stdout);
        let s: &Value = recs
            .iter()
            .find(|r| r["kind"] == "summary")
            .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
        let p99 = s["send_lag_ms"]["p99"].as_f64().unwrap();
        let rate = s["requests"].as_f64().unwrap() / s["duration_s"].as_f64().unwrap();
        check("send lag p99 (ms)", p99, p99 < 1.0)?;
        check("errors", s["errors"].as_f64().unwrap(), s["errors"] == 0)?;
        Ok(format!("send lag p99 {p99:.3} ms at {rate:.0} req/s"))
    });
}
