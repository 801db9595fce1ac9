//! srv-sim speaking SGLang's self-report (`--self-report-as sglang`) tells the truth of its own
//! model in SGLang's words: every step it runs is in its `Prefill batch` / `Decode batch` lines
//! (read back with shared's SGLang reader), every finished request has a `Req Time Stats` line
//! whose rid is the answer's id, its FLOP counters are one series per TP rank, and its startup
//! lines read back as SGLang's phases with their durations, old wording and new.

mod common;
use common::*;
use servbench::startup::{PhaseScan, SGLANG};
use servbench::steplog::{LogFormat, read_window};
use std::process::{Command, Stdio};

/// The `key=` figure (up to `ms`, `,` or `)`) of a time stats line.
fn field(line: &str, key: &str) -> String {
    let at = line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len();
    line[at..]
        .split([',', ')'])
        .next()
        .unwrap()
        .trim_end_matches("ms")
        .to_string()
}

#[test]
fn speaking_sglang_srv_sim_logs_every_step_and_request_and_counts_per_tp_rank() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sim.log");
    let sim = start_logged(
        &[
            "--self-report-as",
            "sglang",
            "--decode-log-interval",
            "1",
            "--enable-request-time-stats-logging",
            "--enable-mfu-metrics",
            "--no-enable-prefix-caching",
            "--tp",
            "2",
        ],
        &log,
    );
    let (requests, max_tokens) = (3u64, 8u64);
    let mut answers = Vec::new();
    let mut prompt_tokens = 0;
    for _ in 0..requests {
        let x = post(
            sim.port,
            "/v1/completions",
            &completion_body(16, max_tokens as u32, true),
        );
        assert_eq!(x.status, 200);
        let chunks = x.chunks();
        let last = &chunks.last().unwrap().1;
        assert!(last.get("metrics").is_none(), "SGLang's answers carry none");
        prompt_tokens += last["usage"]["prompt_tokens"].as_u64().unwrap();
        let id = chunks[0].1["id"].as_str().unwrap().to_string();
        answers.push((id, ms(chunks.last().unwrap().0 - x.sent)));
    }
    let metrics = get(sim.port, "/metrics").1;
    let text = std::fs::read_to_string(&log).unwrap();
    // Every step srv-sim ran is in the log: one prefill step per request, then its decodes.
    let ran = metric(&metrics, "srv_sim:engine_steps_total");
    let read = read_window(
        &text,
        60.0,
        30.0,
        &LogFormat {
            decode_log_interval: 1,
        },
    )
    .unwrap()
    .steps;
    assert_eq!(ran, (requests * max_tokens) as f64);
    assert_eq!(read.steps, requests * max_tokens, "{text}");
    assert_eq!(read.ctx_tokens_total, prompt_tokens);
    assert_eq!(read.gen_tokens_total, requests * (max_tokens - 1));
    assert_eq!(read.source, "sglang");
    // Each request's time stats, by the id its client saw.
    for (id, e2e_ms) in &answers {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("Req Time Stats(rid={id},")))
            .unwrap_or_else(|| panic!("no time stats for {id} in {text}"));
        assert!(line.contains(" TP0] "), "{line}");
        assert_eq!(field(line, "output len="), max_tokens.to_string());
        let queue: f64 = field(line, "queue_duration=").parse().unwrap();
        let forward: f64 = field(line, "forward_duration=").parse().unwrap();
        assert!(forward > 0.0 && queue + forward <= *e2e_ms + 0.01, "{line}");
    }
    // The counters: one series per TP rank, each the same work per GPU.
    let ranks: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with("sglang:estimated_flops_per_gpu_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ranks.len(), 2, "{metrics}");
    assert!(ranks[0] > 0.0 && ranks[0] == ranks[1], "{ranks:?}");
    assert!(metrics.contains("tp_rank=\"1\"} "), "{metrics}");
    assert!(!metrics.contains("vllm:"), "{metrics}");
}

#[test]
fn sglangs_startup_lines_read_back_with_their_durations_old_and_new() {
    for (speaks, capture) in [
        (
            "sglang",
            "Capture target decode CUDA graph end. elapsed=0.50 s",
        ),
        (
            "sglang-0.5.10",
            "Capture cuda graph end. Time elapsed: 0.50 s.",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sim.log");
        let sim = start_logged(&["--self-report-as", speaks, "--startup", "2s"], &log);
        drop(sim);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains(capture), "{text}");
        let mut scan = PhaseScan::new(&[SGLANG]);
        scan.feed(text.as_bytes(), 10.0);
        let (phases, refused) = scan.finish(10.0);
        assert!(refused.is_empty(), "{refused:?}");
        let took = |name: &str| {
            phases
                .iter()
                .find(|p| p.name == name)
                .unwrap_or_else(|| panic!("{name} in {phases:?}"))
                .took_s
        };
        assert_eq!(took("weights"), Some(0.5), "{speaks}");
        assert_eq!(took("graph_capture"), Some(0.5), "{speaks}");
        assert_eq!(took("ready"), None);
    }
}

#[test]
fn each_engines_flags_are_refused_in_the_others_voice() {
    for (args, says) in [
        (
            &[
                "--self-report-as",
                "sglang",
                "--enable-logging-iteration-details",
            ][..],
            "--enable-logging-iteration-details is vLLM's",
        ),
        (
            &["--decode-log-interval", "5"][..],
            "give --self-report-as sglang",
        ),
        (
            &["--self-report-as", "sglang", "--decode-log-interval", "0"][..],
            "at least 1",
        ),
        (
            &["--self-report-as", "sglang", "--metrics-names", "vllm"][..],
            "drop --metrics-names",
        ),
    ] {
        let out = Command::new(testkit::bin("srv-sim"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
