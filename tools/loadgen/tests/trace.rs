//! Trace replay (`--trace`) end to end: requests leave at the trace's times (scaled by
//! `--trace-speed`), with the trace's lengths, and prompts whose equal hash ids share prefixes.

mod server;

use serde_json::{Value, json};
use testkit::of_kind;
use testkit::{loadgen, loadgen_ok};

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// Mooncake-style rows: (timestamp ms, input length, output length, hash ids).
fn mooncake(rows: &[(u64, u32, u32, &[u64])]) -> String {
    rows.iter()
        .map(|(ts, i, o, ids)| {
            json!({"timestamp": ts, "input_length": i, "output_length": o, "hash_ids": ids})
                .to_string()
                + "\n"
        })
        .collect()
}

#[test]
fn requests_leave_at_the_traces_times_with_its_lengths() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    // Irregular gaps, out of order in the file, in milliseconds.
    let trace = write(
        &dir,
        "t.jsonl",
        &mooncake(&[
            (1000, 30, 3, &[]),
            (1400, 20, 2, &[]),
            (1050, 25, 4, &[]),
            (2600, 40, 1, &[]),
        ]),
    );
    let out = loadgen(&["--url", &url, "--trace", &trace, "--trace-speed", "1,4"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not in time order"), "{err}");
    let recs = testkit::json_lines(&out.stdout);
    for (index, speed) in [(0, 1.0), (1, 4.0)] {
        let mut reqs: Vec<&Value> = of_kind(&recs, "request")
            .into_iter()
            .filter(|r| r["point"]["index"] == index)
            .collect();
        reqs.sort_by_key(|r| r["id"].as_u64());
        let got: Vec<(f64, u64, u64)> = reqs
            .iter()
            .map(|r| {
                (
                    r["intended_ms"].as_f64().unwrap(),
                    r["prompt_tokens"].as_u64().unwrap(),
                    r["output_tokens"].as_u64().unwrap(),
                )
            })
            .collect();
        let want = [(0.0, 30, 3), (50.0, 25, 4), (400.0, 20, 2), (1600.0, 40, 1)];
        for ((t, i, o), (wt, wi, wo)) in got.iter().zip(want) {
            // Intended times are the trace's, exactly (the deadlines, not when they went).
            assert!((t - wt / speed).abs() < 1e-6, "speed {speed}: {got:?}");
            assert_eq!((*i, *o), (wi, wo), "srv-sim counts the row's lengths");
        }
        let s = of_kind(&recs, "summary")
            .into_iter()
            .find(|s| s["point"]["index"] == index)
            .unwrap();
        assert_eq!(s["point"]["trace_speed"], json!(speed));
        assert_eq!(s["workload"]["trace_rows"], 4);
        assert_eq!(s["prompt_len_exact"], 4);
        assert!(
            s["workload"]["trace"]
                .as_str()
                .unwrap()
                .ends_with("t.jsonl")
        );
        assert!(s["point"].get("input_len").is_none(), "{s}");
    }
}

/// The rows' prompts are told apart by their lengths, all different, not by the order the
/// capture server saw them in: on a busy box a row sent 10 ms later may arrive first.
#[test]
fn equal_hash_ids_send_equal_prefixes() {
    let srv = server::paced(1, 1);
    let dir = tempfile::tempdir().unwrap();
    let rows: [(u64, u32, u32, &[u64]); 4] = [
        (0, 40, 2, &[7, 8, 9]),
        (10, 36, 2, &[7, 8, 10]),
        (20, 20, 2, &[7, 11]),
        (30, 28, 2, &[]),
    ];
    let trace = write(&dir, "t.jsonl", &mooncake(&rows));
    loadgen_ok(&[
        "--url",
        &srv.url(),
        "--trace",
        &trace,
        "--trace-block",
        "16",
    ])
    .values();
    let captured: Vec<Vec<String>> = srv
        .captured()
        .into_iter()
        .filter(|c| c.path == "/v1/completions" && c.body["stream"] == json!(true))
        .map(|c| {
            c.body["prompt"]
                .as_str()
                .unwrap()
                .split(' ')
                .map(str::to_string)
                .collect()
        })
        .collect();
    assert_eq!(captured.len(), 4);
    // The capture server counts one BOS token more than the words: the last block gives it up.
    let prompts: Vec<&Vec<String>> = rows
        .iter()
        .map(|(_, len, _, _)| {
            let of_row: Vec<_> = captured
                .iter()
                .filter(|p| p.len() == *len as usize - 1)
                .collect();
            assert_eq!(of_row.len(), 1, "one prompt of {len} tokens");
            of_row[0]
        })
        .collect();
    let common = |a: &[String], b: &[String]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    // (A word drawn alike by chance may lengthen a common run by one or two.)
    assert!(
        (32..35).contains(&common(prompts[0], prompts[1])),
        "two blocks shared"
    );
    assert!(
        (16..19).contains(&common(prompts[0], prompts[2])),
        "one block shared"
    );
    assert!(common(prompts[0], prompts[3]) < 3, "no ids: nothing shared");
}

#[test]
fn azure_csv_times_are_dates_and_bad_traces_name_the_line() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "1ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let csv = write(
        &dir,
        "azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,48,3\n2023-11-16 18:17:04.1319600,31,2\n",
    );
    let recs = loadgen_ok(&["--url", &url, "--trace", &csv, "--trace-speed", "0.5"]).values();
    let reqs = of_kind(&recs, "request");
    assert_eq!(reqs.len(), 2);
    let t = reqs
        .iter()
        .map(|r| r["intended_ms"].as_f64().unwrap())
        .fold(0.0, f64::max);
    // (Dates are read as seconds since 1970 in an f64: a tenth of a microsecond is lost.)
    assert!(
        (t - 304.0).abs() < 1e-3,
        "152 ms apart, played at half speed: {t}"
    );

    let bad = write(
        &dir,
        "bad.jsonl",
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1]}\n",
    );
    let out = loadgen(&["--url", &url, "--trace", &bad]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bad.jsonl:1:") && err.contains("--trace-block"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for (args, want) in [
        (&["--trace", &csv, "-c", "4"][..], "-c"),
        (&["--trace", &csv, "--input-len", "4"], "--input-len"),
        (&["--trace", &csv, "--trace-speed", "0"], "positive"),
        (&["--trace-speed", "2"], "--trace"),
    ] {
        let out = loadgen(&[&["--url", &url][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
