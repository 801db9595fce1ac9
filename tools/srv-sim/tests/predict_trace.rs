//! `srv-sim --predict --trace FILE`: a trace's rows replayed in virtual time, read by the reader
//! loadgen uses (`servbench::load::trace`): one request record per row with the row's lengths,
//! sent at the row's offset at each `--trace-speed`, a summary summarize tabulates, the same
//! error lines as loadgen's for a bad file, and agreement with the real server replaying the
//! same trace through the real loadgen.

mod common;
use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use testkit::num;
use testkit::{check, holds_in_one_of_three, json_lines, of_kind};

// LLAMA_8B_ON_A100 (common): ~8 ms decode steps, 50-110 ms prefills of these rows.

/// (offset ms, input, output): rows 1 and 3 share their two blocks, row 4 the first of them.
const ROWS: &[(u64, u32, u32)] = &[
    (1000, 1024, 16),
    (1150, 300, 32),
    (1400, 1024, 8),
    (1420, 700, 24),
    (1900, 64, 40),
    (2300, 2000, 12),
];

/// The rows as a Mooncake trace (hash ids in blocks of 512).
fn trace() -> (tempfile::TempDir, String) {
    let ids = ["[7, 8]", "null", "[7, 8]", "[7, 9]", "null", "null"];
    let text: String = ROWS
        .iter()
        .zip(ids)
        .map(|((at, i, o), ids)| {
            format!(
                "{{\"timestamp\": {at}, \"input_length\": {i}, \"output_length\": {o}, \"hash_ids\": {ids}}}\n"
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap().to_string();
    (dir, path)
}

#[test]
fn a_predicted_trace_is_one_record_per_row_with_its_lengths_at_its_offsets() {
    let (_dir, path) = trace();
    let out = predict(&["--trace", &path, "--trace-speed", "1,2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = json_lines(&out.stdout);
    let summaries = of_kind(&recs, "summary");
    assert_eq!(summaries.len(), 2);
    for (point, speed) in [(0, 1.0), (1, 2.0)] {
        let mut requests: Vec<&Value> = of_kind(&recs, "request")
            .into_iter()
            .filter(|r| r["point"]["index"] == point)
            .collect();
        requests.sort_by(|a, b| num(a, "/intended_ms").total_cmp(&num(b, "/intended_ms")));
        assert_eq!(requests.len(), ROWS.len(), "one record per row");
        for (r, &(at, input, output)) in requests.iter().zip(ROWS) {
            assert_eq!(r["point"]["trace_speed"], speed, "{r}");
            assert_eq!(r["labels"]["source"], "predicted", "{r}");
            assert!(r.get("error").is_none(), "{r}");
            // Offsets from the first row, at the played speed, in virtual time: exact.
            let want = (at - ROWS[0].0) as f64 / speed;
            assert!((num(r, "/intended_ms") - want).abs() < 1e-6, "{r}");
            assert_eq!(
                (
                    r["prompt_tokens"].as_u64(),
                    r["prompt_tokens_target"].as_u64(),
                    r["output_tokens"].as_u64(),
                    r["max_tokens"].as_u64()
                ),
                (
                    Some(u64::from(input)),
                    Some(u64::from(input)),
                    Some(u64::from(output)),
                    Some(u64::from(output))
                ),
                "{r}"
            );
        }
        let s = summaries[point as usize];
        assert_eq!(s["point"]["trace_speed"], speed, "{s}");
        assert!(s["point"].get("concurrency").is_none(), "{s}");
        assert_eq!(s["workload"]["trace"], path.as_str(), "{s}");
        assert_eq!(
            (s["workload"]["trace_rows"].as_u64(), s["ok"].as_u64()),
            (Some(6), Some(6))
        );
        // Row 3 repeats row 1's blocks after row 1 ended: its prompt is cached, its first token
        // comes in a fraction of row 1's time.
        if point == 0 {
            let (cold, warm) = (num(requests[0], "/ttft_ms"), num(requests[2], "/ttft_ms"));
            assert!(warm < cold / 2.0, "cached {warm} ms, cold {cold} ms");
        }
    }
    let table = Command::new(testkit::bin("summarize"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(&out.stdout)?;
            c.wait_with_output()
        })
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{text}");
    assert!(
        text.contains("trace speed") && text.contains("source=predicted"),
        "{text}"
    );
}

#[test]
fn a_capped_trace_sends_a_row_when_a_slot_frees_with_its_latency_from_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("burst.csv");
    std::fs::write(
        &path,
        "timestamp,input_length,output_length\n0,128,8\n0,128,8\n0.001,128,8\n",
    )
    .unwrap();
    let out = predict(&["--trace", path.to_str().unwrap(), "--max-concurrency", "1"]);
    assert!(out.status.success());
    let recs = json_lines(&out.stdout);
    let mut requests = of_kind(&recs, "request");
    requests.sort_by_key(|r| r["id"].as_u64());
    assert_eq!(requests.len(), 3);
    for (r, at) in requests.iter().zip([0.0, 0.0, 1.0]) {
        assert!((num(r, "/intended_ms") - at).abs() < 1e-9, "{r}");
    }
    for w in requests.windows(2) {
        // One in flight: the next row leaves when the last one's stream ends, and its latency
        // runs from its own offset.
        let end = num(w[0], "/intended_ms") + num(w[0], "/e2e_ms");
        let sent = num(w[1], "/intended_ms") + num(w[1], "/send_lag_ms");
        assert!(
            (sent - end).abs() < 1e-6,
            "sent {sent} ms, previous ended {end} ms"
        );
        assert!(
            num(w[1], "/ttft_ms") > num(w[1], "/send_lag_ms"),
            "{}",
            w[1]
        );
    }
    assert_eq!(
        of_kind(&recs, "summary")[0]["workload"]["max_concurrency"],
        1
    );
}

#[test]
fn a_bad_trace_is_loadgens_error_line_and_trace_refuses_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"timestamp\": 0, \"input_length\": 8, \"output_length\": 2}\n{\"timestamp\": 1, \"output_length\": 4}\n",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    for (args, needle) in [
        (
            &["--trace", bad][..],
            "bad.jsonl:2: needs a number \"input_length\"",
        ),
        (
            &["--trace", bad, "--input-len", "8"][..],
            "cannot be combined with --input-len",
        ),
        (
            &["--trace", bad, "-c", "4"][..],
            "cannot be combined with -c",
        ),
        (
            &["-c", "4", "--max-concurrency", "2"][..],
            "--max-concurrency caps",
        ),
    ] {
        let out = predict(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_predicted_trace_agrees_with_the_server_replaying_it_under_loadgen() {
    let (_dir, path) = trace();
    let load = [
        "--trace",
        path.as_str(),
        "--trace-speed",
        "1,2",
        "--seed",
        "3",
    ];
    let out = predict(&load);
    assert!(out.status.success());
    let predicted_recs = json_lines(&out.stdout);
    let predicted = figures(&predicted_recs);
    holds_in_one_of_three("predicted trace against measured", || {
        let sim = start(&[LLAMA_8B_ON_A100, &["--realtime", "--seed", "3"]].concat());
        let measured_recs = loadgen_against(&sim, &load);
        // The same requests: a row's lengths at its offset, in both.
        let rows = |recs: &[Value]| {
            let mut v: Vec<(u64, u64, u64, u64)> = of_kind(recs, "request")
                .iter()
                .map(|r| {
                    (
                        r["point"]["index"].as_u64().unwrap(),
                        num(r, "/intended_ms").round() as u64,
                        r["prompt_tokens"].as_u64().unwrap(),
                        r["output_tokens"].as_u64().unwrap(),
                    )
                })
                .collect();
            v.sort();
            v
        };
        assert_eq!(rows(&predicted_recs), rows(&measured_recs));
        let measured = figures(&measured_recs);
        let mut said = Vec::new();
        for ((p, m), speed) in predicted.iter().zip(&measured).zip([1, 2]) {
            let off = |a: f64, b: f64| b / a - 1.0;
            let (tok, ttft, tpot) = (off(p.0, m.0), off(p.1, m.1), off(p.2, m.2));
            check(&format!("x{speed} tok/s off"), tok, tok.abs() < 0.05)?;
            check(&format!("x{speed} TPOT p50 off"), tpot, tpot.abs() < 0.05)?;
            check(&format!("x{speed} TTFT mean off"), ttft, ttft.abs() < 0.25)?;
            said.push(format!(
                "x{speed}: tok/s {tok:+.3}, TPOT {tpot:+.3}, TTFT {ttft:+.3}"
            ));
        }
        Ok(said.join("; "))
    });
}
