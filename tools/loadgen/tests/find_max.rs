//! `--find-max` against srv-sim with a capacity known in advance: in fixed-latency mode with
//! `--max-running-requests M`, each request holds a slot for TTFT + (tokens - 1) x ITL, so the
//! server completes at most M / that many requests a second, and past it the queue (and TTFT)
//! grows without bound.

use serde_json::Value;
use std::process::Stdio;

fn loadgen(args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let out = testkit::cmd("loadgen")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run loadgen");
    (
        out.status.code(),
        testkit::json_lines(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn kinds<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

#[test]
fn find_max_rate_lands_within_its_precision_of_a_known_capacity() {
    // 10 slots, each request 40 ms + 5 x 12 ms = 100 ms: capacity 100 requests a second.
    let (_sim, url) = testkit::srv_sim(&[
        "--ttft",
        "40ms",
        "--itl",
        "12ms",
        "--max-running-requests",
        "10",
    ]);
    let capacity = 100.0;
    let (code, recs, err) = loadgen(&[
        "--url",
        &url,
        "--find-max",
        "rate",
        "-r",
        "30",
        "--arrival",
        "constant",
        "--duration",
        "2s",
        "--input-len",
        "8",
        "--max-tokens",
        "6",
        // 15 ms of slack over the 40 ms TTFT: a queue that grows for 2 s passes it quickly.
        "--slo",
        "ttft_ms=55",
        "--find-max-precision",
        "0.05",
        "--no-requests",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let search = kinds(&recs, "search");
    assert_eq!(search.len(), 1, "{err}");
    let s = search[0];
    assert_eq!(s["var"], "rate_rps");
    assert_eq!(s["stopped_by"], "converged", "{s}");
    let lo = s["max_passing"].as_f64().unwrap();
    let hi = s["first_failing"].as_f64().unwrap();
    assert!(hi <= lo * 1.05 + 1e-9, "bracket within 5%: {lo}..{hi}");
    assert!(
        (lo - capacity).abs() <= 0.05 * capacity,
        "max passing {lo} req/s is not within 5% of the capacity {capacity}: {s}"
    );
    // Every probe was a normal point with its summary; the probes' points are those points.
    let summaries = kinds(&recs, "summary");
    let points: Vec<u64> = s["probes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            p["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
        })
        .collect();
    assert_eq!(points.len(), summaries.len());
    for (i, p) in points.iter().enumerate() {
        assert_eq!(summaries[i]["point"]["index"].as_u64(), Some(*p));
        assert!(summaries[i]["goodput_req_s"].is_number());
    }
    assert!(err.contains("find-max stopped (converged)"), "{err}");
}

#[test]
fn find_max_concurrency_finds_the_slots() {
    // 4 slots: a 5th request in flight waits a whole request (30 ms) for its first token.
    let (_sim, url) = testkit::srv_sim(&[
        "--ttft",
        "20ms",
        "--itl",
        "5ms",
        "--max-running-requests",
        "4",
    ]);
    let (code, recs, err) = loadgen(&[
        "--url",
        &url,
        "--find-max",
        "concurrency",
        "-c",
        "1",
        "-n",
        "60",
        "--input-len",
        "8",
        "--max-tokens",
        "3",
        "--slo",
        "ttft_ms=35",
        "--slo-attainment",
        "0.99",
        "--no-requests",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let s = kinds(&recs, "search")[0];
    assert_eq!(s["var"], "concurrency");
    assert_eq!(s["max_passing"], 4.0, "{s}");
    assert_eq!(s["first_failing"], 5.0, "{s}");
}

#[test]
fn find_max_refuses_what_it_cannot_search() {
    for (args, want) in [
        (&["--find-max", "rate"][..], "--slo"),
        (
            &["--find-max", "rate", "--slo", "ttft_ms=5", "-r", "1,2"],
            "one -r value",
        ),
        (
            &["--find-max", "rate", "--slo", "ttft_ms=5", "-c", "2"],
            "-c",
        ),
        (&["--find-max", "load", "--slo", "ttft_ms=5"], "rate"),
        (
            &[
                "--find-max",
                "rate",
                "--slo",
                "ttft_ms=5",
                "--find-max-precision",
                "2",
            ],
            "precision",
        ),
        (
            &["--find-max", "concurrency", "--ramp", "--slo", "ttft_ms=5"],
            "--ramp",
        ),
    ] {
        let (code, recs, err) = loadgen(&[&["--url", "http://127.0.0.1:9"][..], args].concat());
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(recs.is_empty());
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
