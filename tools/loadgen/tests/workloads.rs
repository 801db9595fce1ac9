//! The workloads people run, end to end with the real binary: request-body passthrough
//! (`--extra-body`, `--temperature`, `--top-p`) as a capture server receives it, prefix-cache
//! groups against srv-sim's own hit counters, `--flush-cache` through each engine's endpoint,
//! and `--no-stream`.

mod server;

use serde_json::{Value, json};
use server::Behavior;
use testkit::of_kind;
use testkit::{loadgen, loadgen_ok};

/// The generation requests' bodies the capture server received.
fn generation_bodies(srv: &server::TestServer) -> Vec<Value> {
    srv.captured()
        .into_iter()
        .filter(|c| c.path.starts_with("/v1/") && c.path.contains("completions"))
        .map(|c| c.body)
        .collect()
}

#[test]
fn extra_body_arrives_merged_and_loadgen_keeps_what_it_measures() {
    let srv = server::start(Behavior::default());
    let (_, recs, err) = loadgen_ok(&[
        "--url",
        &srv.url(),
        "--api",
        "chat",
        "-n",
        "3",
        "--input-len",
        "20",
        "--max-tokens",
        "4",
        "--extra-body",
        r#"{"chat_template_kwargs":{"enable_thinking":false},"stream_options":{"include_usage":false},"max_tokens":99,"top_k":20,"temperature":0.3}"#,
        "--top-p",
        "0.95",
    ]).parts();
    let bodies = generation_bodies(&srv);
    assert_eq!(bodies.len(), 3);
    for b in &bodies {
        assert_eq!(b["chat_template_kwargs"], json!({"enable_thinking": false}));
        assert_eq!(b["top_k"], json!(20));
        assert_eq!(b["temperature"], json!(0.3));
        assert_eq!(b["top_p"], json!(0.95));
        // Ours win: the output length forced, usage asked for, in every request.
        assert_eq!(b["max_tokens"], json!(4));
        assert_eq!(b["min_tokens"], json!(4));
        assert_eq!(b["stream_options"]["include_usage"], json!(true));
        assert_eq!(b["stream"], json!(true));
        assert_eq!(b["model"], json!("fake-model"));
    }
    assert!(
        err.contains(r#"--extra-body sets "max_tokens""#)
            && err.contains(r#"--extra-body sets "stream_options.include_usage""#),
        "{err}"
    );
    // Each warning once, not once per point or request.
    assert_eq!(err.matches("--extra-body sets").count(), 2, "{err}");
    let s = of_kind(&recs, "summary")[0];
    assert_eq!(
        s["workload"]["extra_body"]["chat_template_kwargs"]["enable_thinking"],
        false
    );
    assert_eq!(
        (
            s["workload"]["temperature"].as_f64(),
            s["workload"]["top_p"].as_f64()
        ),
        (Some(0.3), Some(0.95))
    );
    assert_eq!(s["workload"]["stream"], true);

    // From a file, and --temperature beating the file's temperature.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body.json");
    std::fs::write(&file, r#"{"temperature": 0.9, "seed": 7}"#).unwrap();
    let before = generation_bodies(&srv).len();
    let (_, recs, err) = loadgen_ok(&[
        "--url",
        &srv.url(),
        "-n",
        "1",
        "--input-len",
        "8",
        "--max-tokens",
        "2",
        "--extra-body",
        &format!("@{}", file.display()),
        "--temperature",
        "0.7",
    ])
    .parts();
    assert!(!err.contains("--extra-body sets"), "{err}");
    let b = &generation_bodies(&srv)[before];
    assert_eq!(
        (b["temperature"].clone(), b["seed"].clone()),
        (json!(0.7), json!(7))
    );
    assert_eq!(of_kind(&recs, "summary")[0]["workload"]["temperature"], 0.7);

    // Bad input: one line naming the flag (and the file).
    for (value, says) in [
        ("[1,2]".to_string(), "expected a JSON object"),
        ("{oops".to_string(), "not JSON"),
        (
            "@/nonexistent/body.json".to_string(),
            "cannot read /nonexistent/body.json",
        ),
    ] {
        let out = loadgen(&["--url", &srv.url(), "--extra-body", &value]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--extra-body") && err.contains(says), "{err}");
    }
}

#[test]
fn flush_cache_calls_the_engine_endpoint_before_each_point() {
    let srv = server::start(Behavior::default());
    let (_, recs, err) = loadgen_ok(&[
        "--url",
        &srv.url(),
        "--engine",
        "vllm",
        "--flush-cache",
        "-c",
        "1,2",
        "-n",
        "3",
        "--input-len",
        "8",
        "--max-tokens",
        "2",
        "--warmup",
        "1",
    ])
    .parts();
    assert!(!err.contains("flush"), "{err}");
    // Per point: the reset, then the warmup request, then the point's three (telemetry's
    // /metrics scrapes aside).
    let order: Vec<String> = srv
        .captured()
        .into_iter()
        .map(|c| c.path)
        .filter(|p| p != "/v1/models" && p != "/tokenize" && p != "/metrics")
        .collect();
    let reset = "/reset_prefix_cache".to_string();
    let generate = "/v1/completions".to_string();
    let point: Vec<String> = [&reset, &generate, &generate, &generate, &generate]
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(order, [point.clone(), point].concat());
    for s in of_kind(&recs, "summary") {
        assert_eq!(s["workload"]["cache_flushed"], true, "{s}");
    }

    // A server without the endpoint (this one answers 404 to SGLang's): one warning for the
    // run, and every summary says the cache was not emptied.
    let out = loadgen(&[
        "--url",
        &srv.url(),
        "--engine",
        "sglang",
        "--flush-cache",
        "-c",
        "1,2",
        "-n",
        "2",
        "--input-len",
        "8",
        "--max-tokens",
        "2",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("--flush-cache").count(), 1, "{err}");
    assert!(err.contains("POST /flush_cache answered HTTP 404"), "{err}");
    let recs = testkit::json_lines(&out.stdout);
    let summaries = of_kind(&recs, "summary");
    assert_eq!(summaries.len(), 2);
    assert!(
        summaries
            .iter()
            .all(|s| s["workload"]["cache_flushed"] == false)
    );

    // An engine with no such endpoint at all: one warning saying so.
    let out = loadgen(&[
        "--url",
        &srv.url(),
        "--engine",
        "trtllm",
        "--flush-cache",
        "-c",
        "1,2",
        "-n",
        "1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("--flush-cache").count(), 1, "{err}");
    assert!(err.contains("trtllm has no endpoint"), "{err}");

    // Without an engine to go by: refused up front.
    let out = loadgen(&["--url", &srv.url(), "--flush-cache"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--flush-cache") && err.contains("--engine"),
        "{err}"
    );
}

/// A plain GET over its own connection; the body.
fn http_get(url: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// Scrapes srv-sim's prefix counters: (queries, hits, resets).
fn prefix_counters(url: &str) -> (f64, f64, f64) {
    let text = http_get(url, "/metrics");
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    (
        value("vllm:prefix_cache_queries_total"),
        value("vllm:prefix_cache_hits_total"),
        value("srv_sim:prefix_cache_resets_total"),
    )
}

#[test]
fn prefix_groups_give_the_stated_hit_rate_in_srv_sim() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    // 4 groups sharing 512 of 640 tokens: after each group's first request, 80% of every
    // prompt is cached.
    let common = [
        "--url",
        url.as_str(),
        "--prefix-groups",
        "4",
        "--prefix-len",
        "512",
        "--input-len",
        "640",
        "--max-tokens",
        "4",
        "-n",
        "100",
    ];
    let before = prefix_counters(&url);
    let mut args = common.to_vec();
    args.extend(["-c", "1,4", "--flush-cache", "--engine", "sim"]);
    let (_, recs, _) = loadgen_ok(&args).parts();
    let after = prefix_counters(&url);
    let summaries = of_kind(&recs, "summary");
    assert_eq!(summaries.len(), 2);
    let stated: Vec<f64> = summaries
        .iter()
        .map(|s| s["workload"]["prefix_hit_rate_expected"].as_f64().unwrap())
        .collect();
    // Cold start of each point: 4 of its 100 requests miss.
    for s in &stated {
        assert!((s - 0.96 * 0.8).abs() < 1e-9, "{stated:?}");
    }
    for s in &summaries {
        assert_eq!(
            (
                s["workload"]["prefix_groups"].as_u64(),
                s["workload"]["prefix_len"].as_u64()
            ),
            (Some(4), Some(512))
        );
        assert_eq!(s["workload"]["cache_flushed"], true);
    }
    let measured = (after.1 - before.1) / (after.0 - before.0);
    let expected = stated.iter().sum::<f64>() / stated.len() as f64;
    assert!(
        (measured - expected).abs() < 0.02,
        "srv-sim measured {measured:.4}, loadgen stated {expected:.4}"
    );
    assert_eq!(after.2 - before.2, 2.0, "one reset per point");

    // Without --flush-cache the second point rides on the first one's cache, and says so.
    let before = prefix_counters(&url);
    let mut args = common.to_vec();
    // Another seed: other prefixes than the run above cached.
    args.extend(["-c", "2", "--repeat", "2", "--seed", "1"]);
    let (_, recs, _) = loadgen_ok(&args).parts();
    let after = prefix_counters(&url);
    let stated: Vec<f64> = of_kind(&recs, "summary")
        .iter()
        .map(|s| s["workload"]["prefix_hit_rate_expected"].as_f64().unwrap())
        .collect();
    assert!((stated[1] - 0.8).abs() < 1e-9, "{stated:?}");
    let measured = (after.1 - before.1) / (after.0 - before.0);
    let expected = (stated[0] + stated[1]) / 2.0;
    assert!(
        (measured - expected).abs() < 0.02,
        "srv-sim measured {measured:.4}, loadgen stated {expected:.4}"
    );

    // A prefix that leaves no unique suffix is refused.
    let out = loadgen(&[
        "--url",
        &url,
        "--prefix-groups",
        "2",
        "--prefix-len",
        "636",
        "--input-len",
        "640",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--prefix-len 636"), "{err}");
}

#[test]
fn no_stream_measures_e2e_and_tokens_and_leaves_ttft_out() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "50ms", "--itl", "5ms"]);
    let (_, recs, _) = loadgen_ok(&[
        "--url",
        &url,
        "--no-stream",
        "-c",
        "2",
        "-n",
        "4",
        "--input-len",
        "32",
        "--max-tokens",
        "11",
    ])
    .parts();
    let reqs = of_kind(&recs, "request");
    assert_eq!(reqs.len(), 4);
    for r in &reqs {
        assert!(r.get("ttft_ms").is_none(), "TTFT absent, not zero: {r}");
        assert!(
            r.get("tpot_ms").is_none() && r.get("itl_ms").is_none(),
            "{r}"
        );
        assert_eq!(r["output_tokens"], 11, "{r}");
        assert_eq!(r["output_tokens_source"], "usage", "{r}");
        assert_eq!(r["prompt_tokens"], 32, "{r}");
        // 50 ms to the first token and 10 gaps of 5 ms: the whole answer after ~100 ms.
        let e2e = r["e2e_ms"].as_f64().unwrap();
        assert!((100.0..2000.0).contains(&e2e), "{r}");
    }
    let s = of_kind(&recs, "summary")[0];
    assert_eq!(
        (s["ok"].as_u64(), s["output_tokens"].as_u64()),
        (Some(4), Some(44))
    );
    assert!(
        s.get("ttft_ms").is_none() && s.get("tpot_ms").is_none(),
        "{s}"
    );
    assert!(s["e2e_ms"]["n"] == 4, "{s}");
    assert_eq!(s["workload"]["stream"], false);

    // An SLO on what a non-streaming request cannot show is refused.
    let out = loadgen(&["--url", &url, "--no-stream", "--slo", "ttft_ms=100"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--no-stream"), "{err}");
}
