//! The real pipeline: srv-sim (fixed latency) | loadgen | summarize. summarize's statistics
//! from loadgen's `request` records must equal loadgen's own `summary` records, and the table
//! must show the latencies the server was told to produce.

use std::process::{Command, Stdio};
use std::time::Duration;
use summarize::input;
use summarize::input::points;

/// Starts srv-sim on a free port with fixed latencies; returns the guard and its URL.
fn start_sim() -> (testkit::Guard, String) {
    testkit::srv_sim(&["--ttft", "20ms", "--itl", "2ms"])
}

#[test]
fn summarize_recomputes_exactly_what_loadgen_summarized() {
    let (_sim, url) = start_sim();
    let out = Command::new(testkit::bin("loadgen"))
        .args([
            "--url",
            &url,
            "-c",
            "1,4",
            "-n",
            "24",
            "--max-tokens",
            "16",
            "--input-len",
            "32",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run loadgen");
    assert!(
        out.status.success(),
        "loadgen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let requests: String = text
        .lines()
        .filter(|l| l.starts_with("{\"kind\":\"request\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let summaries: Vec<servbench::record::SummaryRecord> = text
        .lines()
        .filter_map(|l| match servbench::record::Record::parse(l) {
            Ok(servbench::record::Record::Summary(s)) => Some(*s),
            _ => None,
        })
        .collect();
    assert_eq!(summaries.len(), 2, "{text}");
    let mut inputs = input::Inputs::default();
    input::load_one("loadgen", requests.as_bytes(), true, None, &mut inputs).unwrap();
    let ours = points::build(&inputs, &[], None);
    assert_eq!(ours.len(), 2);
    for (p, s) in ours.iter().zip(&summaries) {
        let r = &p.repeats[0];
        assert_eq!(r.point.concurrency, s.point.concurrency);
        assert_eq!(
            (r.requests, r.ok, r.output_tokens),
            (s.requests, s.ok, s.output_tokens)
        );
        assert_eq!(r.ttft_ms, s.ttft_ms);
        assert_eq!(r.itl_ms, s.itl_ms);
        assert_eq!(r.tpot_ms, s.tpot_ms);
        assert_eq!(r.e2e_ms, s.e2e_ms);
        assert_eq!(r.output_tok_s, s.output_tok_s);
        assert_eq!(r.steady_output_tok_s, s.steady_output_tok_s);
        // The server was told: 20 ms to the first token, 2 ms between tokens.
        let ttft = r.ttft_ms.unwrap().p50;
        let itl = r.itl_ms.unwrap().p50;
        // Wide bounds: a busy 2-core box delays the client, never speeds it up.
        assert!((19.0..80.0).contains(&ttft), "TTFT p50 {ttft}");
        assert!((1.5..10.0).contains(&itl), "ITL p50 {itl}");
    }
    // And the pipeline as a person types it.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.jsonl");
    std::fs::write(&file, &text).unwrap();
    let table = testkit::cmd("summarize")
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(table.status.success());
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(
        table.contains("# load points") && table.contains("TTFT p50 ms"),
        "{table}"
    );
}

/// srv-sim crashes in the second point: loadgen stops that point as `server_down`, and
/// summarize says the server went down there; it blames neither the tokenizer (the refused
/// requests had no prompt length) nor preemption (the lower throughput of a dying point).
#[test]
fn a_server_down_point_is_named_and_blamed_on_neither_tokenizer_nor_preemption() {
    // 400 requests at C=1, then 100 at C=4 and the crash: 300 planned requests are left,
    // more than loadgen sends at a refused port before it calls the server down.
    let (_sim, url) = testkit::srv_sim(&["--ttft", "1ms", "--itl", "1ms", "--crash-after", "500"]);
    let mut child = Command::new(testkit::bin("loadgen"))
        .args(["--url", &url, "-c", "1,4", "-n", "400"])
        .args(["--input-len", "32", "--max-tokens", "4"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run loadgen");
    let out = testkit::wait_output(&mut child, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.jsonl");
    std::fs::write(&file, &out.stdout).unwrap();
    let table = testkit::cmd("summarize")
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{text}");
    assert!(text.contains("the server went down during C=4"), "{text}");
    assert!(text.contains("C=4"), "{text}");
    for blame in ["tokenizer", "preemption", "prompts missed"] {
        assert!(!text.contains(blame), "{blame}: {text}");
    }
}
