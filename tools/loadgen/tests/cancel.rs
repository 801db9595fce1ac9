//! `--cancel-rate` against the real srv-sim: the abandoned streams are counted exactly, apart
//! from failures, and the harm of a server that keeps decoding them (srv-sim's
//! `--decode-abandoned end`) shows in the other requests' TTFT, and not when it stops at once.

use servbench::record::{RequestRecord, SummaryRecord};
use testkit::run::{in_the_schema, summarize_table};
use testkit::{check, holds_in_one_of_three, loadgen, srv_sim};

/// srv-sim holds 4 requests at once, 40 ms to the first token, then one every 10 ms: a request
/// of 30 tokens takes 330 ms; a cancelled one is abandoned 80 ms after it left.
const SIM: &[&str] = &[
    "--ttft",
    "40ms",
    "--itl",
    "10ms",
    "--max-running-requests",
    "4",
];

/// 24 requests, 4 at a time, with `extra` flags: the summary, the requests, every line.
fn run_lines(url: &str, extra: &[&str]) -> (SummaryRecord, Vec<RequestRecord>, String) {
    let mut args = vec![
        "--url",
        url,
        "-c",
        "4",
        "-n",
        "24",
        "--input-len",
        "16",
        "--max-tokens",
        "30",
        "--seed",
        "5",
    ];
    args.extend_from_slice(extra);
    let out = loadgen(&args).ok();
    (
        out.one::<SummaryRecord>(),
        out.of::<RequestRecord>(),
        out.out(),
    )
}

fn run(url: &str, extra: &[&str]) -> (SummaryRecord, Vec<RequestRecord>) {
    let (s, reqs, _) = run_lines(url, extra);
    (s, reqs)
}

const CANCEL: &[&str] = &["--cancel-rate", "0.25", "--cancel-after", "80ms"];

#[test]
fn cancelled_streams_are_counted_exactly_apart_from_failures_and_the_same_again_by_seed() {
    let (_sim, url) = srv_sim(SIM);
    let (s, reqs, lines) = run_lines(&url, CANCEL);
    for (i, line) in lines.lines().enumerate() {
        in_the_schema(line, &format!("loadgen stdout:{}", i + 1));
    }
    // A quarter of 24, exactly: one in every four, none of them a failure.
    assert_eq!((s.requests, s.ok, s.errors, s.cancelled), (24, 18, 0, 6));
    assert!(s.errors_by_class.is_empty(), "{:?}", s.errors_by_class);
    assert_eq!(s.workload.cancel_rate, Some(0.25));
    assert_eq!(s.workload.cancel_after.as_deref(), Some("80ms"));
    let cancelled: Vec<&RequestRecord> = reqs.iter().filter(|r| r.is_cancelled()).collect();
    assert_eq!(cancelled.len(), 6);
    let ids: Vec<u64> = cancelled.iter().map(|r| r.id).collect();
    for w in ids.windows(2) {
        assert_eq!(w[1] - w[0], 4, "spread evenly: {ids:?}");
    }
    for r in &cancelled {
        assert!(r.error.is_none(), "not a failure: {r:?}");
        assert_eq!(r.cancelled_after_ms, Some(80.0));
        // What it received by then: the first token at 40 ms, a few more, not all 30.
        let e2e = r.e2e_ms.unwrap();
        assert!(e2e >= 80.0, "disconnected 80 ms after it left: {r:?}");
        assert!(r.ttft_ms.is_some() && r.output_tokens < 30, "{r:?}");
        assert!(r.tpot_ms.is_none(), "no TPOT of a stream cut short: {r:?}");
    }
    // The summary's latencies are the others' only: 18 TTFTs, every answer whole.
    assert_eq!(s.ttft_ms.as_ref().unwrap().n, 18);
    assert_eq!(s.output_tokens, 18 * 30);
    // The same seed abandons the same requests.
    let (_, again) = run(&url, CANCEL);
    let again: Vec<u64> = again
        .iter()
        .filter(|r| r.is_cancelled())
        .map(|r| r.id)
        .collect();
    assert_eq!(again, ids);
    // summarize counts them apart too, and does not take the server's tokens of the streams
    // it decoded for them for a tokenizer mismatch.
    let table = summarize_table(&lines);
    assert!(
        table.contains(
            "requests cancelled on purpose (--cancel-rate) at C=4 (6 of 24, abandoned after 80ms)"
        ),
        "{table}"
    );
    assert!(!table.contains("token counts disagree"), "{table}");
    assert!(!table.contains("requests failed"), "{table}");
    // The timeline marks them cancelled, not ok.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.jsonl");
    std::fs::write(&file, &lines).unwrap();
    let timeline = testkit::run::run(
        "summarize",
        &[
            file.to_str().unwrap(),
            "--plot",
            "-",
            "--plot-kind",
            "timeline",
        ],
    )
    .ok()
    .out();
    let marked = timeline
        .lines()
        .filter(|l| l.ends_with(" cancelled"))
        .count();
    assert_eq!(marked, 6, "{timeline}");
}

/// The other requests' mean TTFT, ms: without cancellation, with it against a server that stops
/// an abandoned stream at once, and with it against one that decodes it to its end.
fn ttft_mean(url: &str, cancel: bool) -> f64 {
    let (s, _) = run(url, if cancel { CANCEL } else { &[] });
    assert_eq!(s.cancelled, if cancel { 6 } else { 0 });
    s.ttft_ms.unwrap().mean
}

#[test]
fn a_server_that_keeps_decoding_abandoned_streams_delays_the_others_first_tokens() {
    let (_stops, stops) = srv_sim(SIM);
    let keeps_args: Vec<&str> = SIM
        .iter()
        .copied()
        .chain(["--decode-abandoned", "end"])
        .collect();
    let (_keeps, keeps) = srv_sim(&keeps_args);
    holds_in_one_of_three(
        "TTFT of the others, abandoned streams decoded or not",
        || {
            let base = ttft_mean(&stops, false);
            let stopped = ttft_mean(&stops, true);
            let kept = ttft_mean(&keeps, true);
            // srv-sim frees an abandoned slot at its next token (10 ms): the others wait at most
            // that. Decoded to the end, an abandoned stream holds its slot 250 ms more, and the
            // requests sent meanwhile queue behind it.
            check("TTFT without cancelling (ms)", base, base < 80.0)?;
            check(
                "TTFT, abandoned streams stopped (ms)",
                stopped,
                stopped < base + 20.0,
            )?;
            check(
                "TTFT, abandoned streams decoded (ms)",
                kept,
                kept > stopped + 40.0,
            )?;
            Ok(format!(
                "TTFT mean: {base:.1} ms without, {stopped:.1} ms stopped, {kept:.1} ms decoded"
            ))
        },
    );
}

#[test]
fn cancel_flags_are_checked_before_anything_is_sent() {
    for (args, says) in [
        (
            &["--cancel-rate", "1.5", "--cancel-after", "1s"][..],
            "--cancel-rate",
        ),
        (&["--cancel-rate", "0.5"][..], "--cancel-after"),
        (&["--cancel-after", "1s"][..], "--cancel-rate"),
        (
            &["--cancel-rate", "0.5", "--cancel-after", "soon"][..],
            "--cancel-after",
        ),
    ] {
        let mut all = vec!["--url", "http://127.0.0.1:9", "-n", "1"];
        all.extend_from_slice(args);
        let (code, _, err) = loadgen(&all).parts();
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} names {says}: {err}");
    }
}
