//! loadgen end to end: the real binary against a raw-socket streaming server in this process
//! that records what it really did, so every figure is checked against the truth (errors,
//! signals and usage are in loadgen_errors.rs).

mod server;

use servbench::record::{RequestRecord, TokenSource};
use server::{Behavior, Usage};
use std::time::Duration;
use testkit::loadgen_ok;
use testkit::num;
use testkit::of_kind;
use testkit::{check, holds_in_one_of_three};

fn mean(xs: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.into_iter().collect();
    v.iter().sum::<f64>() / v.len() as f64
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn ttft_and_itl_match_fixed_latency_truth() {
    let srv = server::paced(60, 10);
    for c in ["1", "4"] {
        holds_in_one_of_three(&format!("loadgen vs truth, c={c}"), || {
            let before = srv.truths().len();
            let recs = loadgen_ok(&[
                "--url",
                &srv.url(),
                "-c",
                c,
                "-n",
                "8",
                "--input-len",
                "40",
                "--max-tokens",
                "20",
            ])
            .values();
            let truth = &srv.truths()[before..];
            let reqs = of_kind(&recs, "request");
            assert_eq!(reqs.len(), 8);
            assert_eq!(truth.len(), 8);
            let lg_ttft: Vec<f64> = reqs.iter().map(|r| num(r, "ttft_ms")).collect();
            let true_ttft: Vec<f64> = truth.iter().map(|t| t.ttft_ms).collect();
            let lg_itl: Vec<f64> = reqs
                .iter()
                .flat_map(|r| r["itl_ms"].as_array().unwrap().iter().map(|v| num(v, "")))
                .collect();
            let true_itl: Vec<f64> = truth
                .iter()
                .flat_map(|t| t.itl_ms.iter().copied())
                .collect();
            let mut worst_tpot_err: f64 = 0.0;
            for r in &reqs {
                assert_eq!(r["output_tokens"], 20);
                assert_eq!(r["chunks"], 20);
                assert_eq!(r["itl_ms"].as_array().unwrap().len(), 19);
                assert_eq!(r["output_tokens_source"], "usage");
                let tpot = num(r, "tpot_ms");
                let want = (num(r, "e2e_ms") - num(r, "ttft_ms")) / 19.0;
                assert!((tpot - want).abs() < 1e-6);
                worst_tpot_err = worst_tpot_err.max((tpot - 10.0).abs());
            }
            let s = of_kind(&recs, "summary")[0];
            assert_eq!(s["ok"], 8);
            assert_eq!(s["point"]["concurrency"], c.parse::<u32>().unwrap());
            let sum_ttft = num(s, "/ttft_ms/mean");
            let records_ttft = mean(lg_ttft.iter().copied());
            assert!(
                (sum_ttft - records_ttft).abs() < 0.1,
                "summary mean {sum_ttft} vs records {records_ttft}"
            );
            assert!(s["hist"]["ttft_ms"].as_str().unwrap().starts_with("HISTF"));
            assert!(num(s, "client_cpu_s") > 0.0);

            // Medians within 1 ms (the acceptance figure), means within 2 ms. loadgen's clock
            // starts before its bytes leave, the server's once it has read them, so loadgen may
            // only be later, never earlier.
            let ttft_median = median(&lg_ttft) - median(&true_ttft);
            let ttft_mean = records_ttft - mean(true_ttft.iter().copied());
            let itl_median = (median(&lg_itl) - median(&true_itl)).abs();
            let itl_mean = (mean(lg_itl.iter().copied()) - mean(true_itl.iter().copied())).abs();
            check(
                "TTFT median minus truth (ms)",
                ttft_median,
                (-0.5..1.0).contains(&ttft_median),
            )?;
            check(
                "TTFT mean minus truth (ms)",
                ttft_mean,
                (-0.5..2.0).contains(&ttft_mean),
            )?;
            check("ITL median error (ms)", itl_median, itl_median < 1.0)?;
            check("ITL mean error (ms)", itl_mean, itl_mean < 1.0)?;
            check(
                "worst TPOT error (ms)",
                worst_tpot_err,
                worst_tpot_err < 1.0,
            )?;
            Ok(format!(
                "TTFT median {ttft_median:+.3} ms and mean {ttft_mean:+.3} ms off the truth, ITL \
                 median {itl_median:.3} ms and mean {itl_mean:.3} ms off, TPOT within \
                 {worst_tpot_err:.3} ms"
            ))
        });
    }
}

#[test]
fn multi_token_chunks_count_tokens_not_chunks() {
    let srv = server::start(Behavior {
        ttft: Duration::from_millis(30),
        itl: Duration::from_millis(20),
        tokens_per_chunk: 4,
        usage: Usage::PerChunk,
        ..Behavior::default()
    });
    holds_in_one_of_three("multi-token chunks vs truth", || {
        let before = srv.truths().len();
        let recs = loadgen_ok(&["--url", &srv.url(), "-n", "3", "--max-tokens", "16"]).values();
        let truth = &srv.truths()[before..];
        let reqs = of_kind(&recs, "request");
        assert_eq!(reqs.len(), truth.len());
        let s = of_kind(&recs, "summary")[0];
        assert_eq!(num(s, "tokens_per_chunk"), 4.0);
        assert_eq!(s["output_tokens"], 48);
        let (mut worst_itl, mut worst_tpot): (f64, f64) = (0.0, 0.0);
        // One at a time (-c 1): records and the server's truths are in the same order.
        for (r, t) in reqs.iter().zip(truth) {
            assert_eq!(r["output_tokens"], 16, "{r}");
            assert_eq!(r["chunks"], 4);
            assert_eq!(r["output_tokens_source"], "usage");
            // Chunk count and usage disagree: flagged.
            assert_eq!(r["output_tokens_chunks"], 4);
            let itl: Vec<f64> = r["itl_ms"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| num(v, ""))
                .collect();
            assert_eq!(itl.len(), 3, "one gap per chunk, not per token");
            let err = (mean(itl.iter().copied()) - mean(t.itl_ms.iter().copied())).abs();
            worst_itl = worst_itl.max(err);
            // TPOT per token: (e2e - ttft) / (16 - 1): the three chunk gaps over 15 tokens.
            let tpot = num(r, "tpot_ms");
            let want = t.itl_ms.iter().sum::<f64>() / 15.0;
            worst_tpot = worst_tpot.max((tpot - want).abs());
        }
        check("worst ITL-per-chunk error (ms)", worst_itl, worst_itl < 1.0)?;
        check("worst TPOT error (ms)", worst_tpot, worst_tpot < 0.1)?;
        Ok(format!(
            "ITL per chunk within {worst_itl:.3} ms of the truth, TPOT within {worst_tpot:.3} ms"
        ))
    });
}

#[test]
fn role_only_first_chunk_is_not_the_first_token() {
    let srv = server::start(Behavior {
        ttft: Duration::from_millis(80),
        itl: Duration::from_millis(5),
        role_first: true,
        ..Behavior::default()
    });
    let recs = loadgen_ok(&[
        "--url",
        &srv.url(),
        "--api",
        "chat",
        "-n",
        "3",
        "--max-tokens",
        "5",
    ]);
    for r in recs.of::<RequestRecord>() {
        let ttft = r.ttft_ms.expect("a ttft");
        assert!(ttft >= 79.0, "role-only chunk counted: ttft {ttft}");
        assert_eq!(r.chunks, 5);
        assert_eq!(r.output_tokens, 5);
    }
}

#[test]
fn usage_in_the_final_chunk_moves_neither_ttft_nor_e2e() {
    let srv = server::start(Behavior {
        ttft: Duration::from_millis(30),
        itl: Duration::from_millis(5),
        usage: Usage::Final {
            delay: Duration::from_millis(150),
        },
        ..Behavior::default()
    });
    let recs = loadgen_ok(&["--url", &srv.url(), "-n", "2", "--max-tokens", "4"]);
    for r in recs.of::<RequestRecord>() {
        let (ttft, e2e) = (r.ttft_ms.expect("a ttft"), r.e2e_ms.expect("an e2e"));
        // The usage chunk comes 150 ms after the last token: counted, it would put e2e at
        // least 150 ms past the first token. Bounds a busy box's lateness cannot reach.
        assert!((29.0..150.0).contains(&ttft), "ttft {ttft}");
        assert!(
            e2e - ttft < 150.0,
            "e2e moved by the usage chunk: {ttft} {e2e}"
        );
        assert_eq!(r.output_tokens, 4);
        assert_eq!(r.output_tokens_source, Some(TokenSource::Usage));
        assert!(r.output_tokens_chunks.is_none());
    }
    // Usage on the last content chunk (llama-server) works the same.
    let srv = server::start(Behavior {
        usage: Usage::LastContent,
        ..Behavior::default()
    });
    let recs = loadgen_ok(&["--url", &srv.url(), "-n", "2", "--max-tokens", "6"]);
    for r in recs.of::<RequestRecord>() {
        assert_eq!(r.output_tokens, 6);
        assert_eq!(r.output_tokens_source, Some(TokenSource::Usage));
    }
    // No usage at all: counted from chunks, and the record says so.
    let srv = server::start(Behavior {
        usage: Usage::None,
        ..Behavior::default()
    });
    let recs = loadgen_ok(&["--url", &srv.url(), "-n", "2", "--max-tokens", "6"]);
    for r in recs.of::<RequestRecord>() {
        assert_eq!(r.output_tokens, 6);
        assert_eq!(r.output_tokens_source, Some(TokenSource::Chunks));
    }
}

#[test]
fn exact_input_lengths_via_tokenize_or_probes() {
    for tokenize in [true, false] {
        let srv = server::start(Behavior {
            ttft: Duration::from_millis(1),
            itl: Duration::from_millis(1),
            tokenize,
            ..Behavior::default()
        });
        let recs = loadgen_ok(&[
            "--url",
            &srv.url(),
            "-c",
            "2",
            "-n",
            "6",
            "--input-len",
            "37,300",
            "--max-tokens",
            "2",
            "--shared-prefix",
            "10",
        ])
        .values();
        let reqs = of_kind(&recs, "request");
        assert_eq!(reqs.len(), 12);
        for r in &reqs {
            assert_eq!(
                r["prompt_tokens"], r["prompt_tokens_target"],
                "tokenize={tokenize}: {r}"
            );
        }
        for s in of_kind(&recs, "summary") {
            assert_eq!(s["prompt_len_exact"], 6);
            assert_eq!(s["prompt_len_targeted"], 6);
        }
    }
}

#[test]
fn open_loop_latency_includes_the_wait_for_a_send_slot() {
    let srv = server::paced(100, 1);
    // Sends are due every 50 ms but one slot frees only every ~100 ms: request i waits ~50*i ms.
    let recs = loadgen_ok(&[
        "--url",
        &srv.url(),
        "-r",
        "20",
        "--arrival",
        "constant",
        "--max-concurrency",
        "1",
        "-n",
        "6",
        "--max-tokens",
        "2",
    ])
    .values();
    let reqs = of_kind(&recs, "request");
    assert_eq!(reqs.len(), 6);
    for r in &reqs {
        let id = r["id"].as_u64().unwrap() as f64;
        let intended = num(r, "intended_ms");
        assert!(
            (intended - 50.0 * id).abs() < 1.0,
            "intended {intended} for request {id}"
        );
        let ttft = num(r, "ttft_ms");
        assert!(
            ttft >= 100.0 + 50.0 * id - 5.0,
            "request {id}: ttft {ttft} lacks the slot wait"
        );
    }
    let s = of_kind(&recs, "summary")[0];
    assert_eq!(num(s, "/point/rate_rps"), 20.0);
    assert_eq!(s["workload"]["arrival"], "constant");
    assert_eq!(s["workload"]["max_concurrency"], 1);
}

#[test]
fn open_loop_follows_absolute_deadlines() {
    let srv = server::paced(2, 1);
    let recs = loadgen_ok(&[
        "--url",
        &srv.url(),
        "-r",
        "200",
        "--arrival",
        "constant",
        "-n",
        "100",
        "--max-tokens",
        "2",
    ])
    .values();
    let reqs = of_kind(&recs, "request");
    assert_eq!(reqs.len(), 100);
    for r in &reqs {
        let id = r["id"].as_u64().unwrap() as f64;
        assert!((num(r, "intended_ms") - 5.0 * id).abs() < 0.01);
    }
    // On a quiet machine the lag is tens of microseconds; allow a loaded box its hiccups.
    let s = of_kind(&recs, "summary")[0];
    assert!(num(s, "/send_lag_ms/p50") < 2.0, "{}", s["send_lag_ms"]);
}

#[test]
fn ramp_stops_on_saturation_and_names_the_best_level() {
    // One generation at a time: throughput cannot grow with concurrency.
    let srv = server::start(Behavior {
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(1),
        serial: true,
        ..Behavior::default()
    });
    let recs = loadgen_ok(&[
        "--url",
        &srv.url(),
        "--ramp",
        "-c",
        "1",
        "-n",
        "12",
        "--max-tokens",
        "4",
        "--no-requests",
    ])
    .values();
    assert!(of_kind(&recs, "request").is_empty());
    let ramp = of_kind(&recs, "ramp");
    assert_eq!(ramp.len(), 1);
    let r = ramp[0];
    assert_eq!(r["stopped_by"], "saturated", "{r}");
    let levels = r["levels"].as_array().unwrap();
    assert!(levels.len() >= 2);
    assert_eq!(levels[0]["concurrency"], 1);
    assert_eq!(levels[1]["concurrency"], 2);
    assert_eq!(of_kind(&recs, "summary").len(), levels.len());
    assert!(r["best_concurrency"].as_u64().is_some());
}

#[test]
fn warmup_is_not_counted_and_repeats_are_numbered() {
    let srv = server::paced(2, 1);
    let recs = loadgen_ok(&[
        "--url",
        &srv.url(),
        "-c",
        "1,2",
        "-n",
        "3",
        "--warmup",
        "2",
        "--repeat",
        "2",
        "--max-tokens",
        "3",
    ])
    .values();
    // 4 points x (2 warmup + 3 counted) generation requests reached the server.
    assert_eq!(srv.requests.load(std::sync::atomic::Ordering::SeqCst), 20);
    assert_eq!(of_kind(&recs, "request").len(), 12);
    let points: Vec<(u64, u64, u64)> = of_kind(&recs, "summary")
        .iter()
        .map(|s| {
            assert_eq!(s["requests"], 3);
            (
                s["point"]["index"].as_u64().unwrap(),
                s["point"]["concurrency"].as_u64().unwrap(),
                s["point"]["repeat"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(points, vec![(0, 1, 0), (1, 1, 1), (2, 2, 0), (3, 2, 1)]);
}

#[test]
fn duration_bounds_a_point() {
    let srv = server::paced(20, 5);
    let started = std::time::Instant::now();
    let recs = loadgen_ok(&[
        "--url",
        &srv.url(),
        "-c",
        "2",
        "--duration",
        "1s",
        "--max-tokens",
        "4",
    ])
    .values();
    assert!(started.elapsed() < Duration::from_secs(10));
    let s = of_kind(&recs, "summary")[0];
    assert_eq!(s["partial"], false);
    let n = s["requests"].as_u64().unwrap();
    // ~35 ms per request, 2 at a time, for 1 s: tens of requests, and every one finished.
    assert!((10..=80).contains(&n), "{n} requests");
    assert_eq!(s["ok"].as_u64().unwrap(), n);
    assert!(num(s, "duration_s") >= 0.9);
}
