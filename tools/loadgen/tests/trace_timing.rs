//! Trace replay's schedule: a trace compressed to 2,000 requests a second is sent on its rows'
//! times. What holds on a busy box is checked here: every row is sent, each intended at its
//! row's time over the speed-up and none before it, and the point lasts at least the trace.
//! How late the sends are (send lag p99 below 1 ms) is a speed goal, measured on a quiet box by
//! `scripts/bench-loadgen.sh` ("trace at 2000 req/s send lag"), not asserted here.

use serde_json::json;
use servbench::record::{RequestRecord, SummaryRecord};

#[test]
fn compressed_trace_sends_keep_their_times_at_2000_per_second() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "0ms", "--itl", "0ms"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("fast.jsonl");
    // 2,000 rows 10 ms apart (20 s of trace) with jitter, played 20x: 2,000 req/s for 1 s.
    let times: Vec<u64> = (0..2000u64).map(|i| i * 10 + (i * 7919) % 9).collect();
    let rows: String = times
        .iter()
        .map(|ts| {
            json!({"timestamp": ts, "input_length": 16, "output_length": 2}).to_string() + "\n"
        })
        .collect();
    std::fs::write(&trace, rows).unwrap();
    let out = testkit::loadgen(&[
        "--url",
        &url,
        "--trace",
        trace.to_str().unwrap(),
        "--trace-speed",
        "20",
    ]);
    let s = out.one::<SummaryRecord>();
    assert_eq!((s.requests, s.errors), (2000, 0), "{}", out.err());
    let mut sent: Vec<RequestRecord> = out.of::<RequestRecord>();
    assert_eq!(sent.len(), 2000);
    sent.sort_by(|a, b| a.intended_ms.total_cmp(&b.intended_ms));
    let first = times[0] as f64 / 20.0;
    for (r, ts) in sent.iter().zip(&times) {
        let want = *ts as f64 / 20.0 - first;
        assert!(
            (r.intended_ms - want).abs() < 0.01,
            "row at {ts} ms intended at {} ms, not {want}",
            r.intended_ms
        );
        let lag = r.send_lag_ms;
        assert!(lag.is_finite() && lag >= 0.0, "sent before its time: {r:?}");
    }
    let span_s = (times[1999] - times[0]) as f64 / 20.0 / 1000.0;
    assert!(
        s.duration_s >= span_s * 0.99,
        "the point took {} s for a {span_s} s schedule: sent ahead of it",
        s.duration_s
    );
}
