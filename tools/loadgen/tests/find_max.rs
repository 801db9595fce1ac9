//! `--find-max` against srv-sim with a capacity known in advance: in fixed-latency mode with
//! `--max-running-requests M`, each request holds a slot for TTFT + (tokens - 1) x ITL, so the
//! server completes at most M / that many requests a second, and past it the queue (and TTFT)
//! grows without bound.

use testkit::loadgen;
use testkit::of_kind;
use testkit::{check, holds_in_one_of_three};

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
    // Whether the search lands there rests on latencies a loaded machine can disturb: a
    // timing claim, held in one of three runs.
    holds_in_one_of_three("--find-max rate against a capacity of 100 req/s", || {
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
            // 30 ms of slack over the 40 ms TTFT: past the capacity by 2%, the queue that grows
            // for 2 s takes more than a tenth of the requests past it.
            "--slo",
            "ttft_ms=70",
            "--find-max-precision",
            "0.05",
            "--no-requests",
        ])
        .parts();
        assert_eq!(code, Some(0), "{err}");
        let search = of_kind(&recs, "search");
        assert_eq!(search.len(), 1, "{err}");
        let s = search[0];
        assert_eq!(s["var"], "rate_rps");
        // Every probe was a normal point with its summary; the probes' points are those.
        let summaries = of_kind(&recs, "summary");
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
        check("converged", 0.0, s["stopped_by"] == "converged")?;
        let lo = s["max_passing"].as_f64().unwrap_or(0.0);
        let hi = s["first_failing"].as_f64().unwrap_or(0.0);
        assert!(hi <= lo * 1.05 + 1e-9, "bracket within 5%: {lo}..{hi}");
        check(
            "max passing req/s within 5% of 100",
            lo,
            (lo - capacity).abs() <= 0.05 * capacity,
        )?;
        Ok(format!(
            "{lo} req/s met the SLO, {hi} did not, in {} probes",
            points.len()
        ))
    });
}

#[test]
fn find_max_concurrency_finds_the_slots() {
    // 4 slots: a 5th request in flight waits a whole request (30 ms) for its first token, so
    // about one request in five misses a 42 ms TTFT objective.
    let (_sim, url) = testkit::srv_sim(&[
        "--ttft",
        "20ms",
        "--itl",
        "5ms",
        "--max-running-requests",
        "4",
    ]);
    holds_in_one_of_three("--find-max concurrency against 4 slots", || {
        let (code, recs, err) = loadgen(&[
            "--url",
            &url,
            "--find-max",
            "concurrency",
            "-c",
            "1",
            "-n",
            "100",
            "--input-len",
            "8",
            "--max-tokens",
            "3",
            "--slo",
            "ttft_ms=42",
            "--slo-attainment",
            "0.95",
            "--no-requests",
        ])
        .parts();
        assert_eq!(code, Some(0), "{err}");
        let s = of_kind(&recs, "search")[0];
        assert_eq!(s["var"], "concurrency");
        let lo = s["max_passing"].as_f64().unwrap_or(0.0);
        check("max passing concurrency", lo, lo == 4.0)?;
        assert_eq!(s["first_failing"], 5.0, "{s}");
        Ok(format!("{} probes", s["probes"].as_array().unwrap().len()))
    });
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
        let (code, recs, err) =
            loadgen(&[&["--url", "http://127.0.0.1:9"][..], args].concat()).parts();
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(recs.is_empty());
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
