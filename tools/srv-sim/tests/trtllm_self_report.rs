//! srv-sim speaking TensorRT-LLM's self-report (`--self-report-as trtllm` with the LLM-API
//! options file srv-launch `--self-report` writes) tells the truth of its own model in
//! trtllm-serve's shapes: each finished request's timing once at `GET /perf_metrics` under the
//! id its answer carries, one iteration-stats object per step at `GET /metrics` and one
//! `iter = N` line per step in its log, the two agreeing step for step.

mod common;
use common::*;
use serde_json::Value;

fn json_list(port: u16, path: &str) -> Vec<Value> {
    let (status, body) = get(port, path);
    assert_eq!(status, 200, "{path}: {body}");
    match serde_json::from_str(&body) {
        Ok(Value::Array(a)) => a,
        other => panic!("{path} is not a JSON list: {other:?}: {body}"),
    }
}

#[test]
fn srv_sim_speaks_trtllms_perf_metrics_iteration_stats_and_log() {
    let dir = tempfile::tempdir().unwrap();
    let (log, options) = (dir.path().join("sim.log"), dir.path().join("opts.yaml"));
    std::fs::write(&options, servbench::engines::TRTLLM_SELF_REPORT.text).unwrap();
    let sim = start_logged(
        &[
            "--self-report-as",
            "trtllm",
            "--extra_llm_api_options",
            options.to_str().unwrap(),
            "--no-enable-prefix-caching",
        ],
        &log,
    );
    // Nothing finished yet: both reads are empty lists, as trtllm-serve's.
    assert!(json_list(sim.port, "/perf_metrics").is_empty());
    json_list(sim.port, "/metrics");
    let (requests, max_tokens) = (3, 8u32);
    let mut seen = Vec::new();
    for _ in 0..requests {
        let x = post(
            sim.port,
            "/v1/completions",
            &completion_body(16, max_tokens, true),
        );
        assert_eq!(x.status, 200);
        let chunks = x.chunks();
        let id = chunks[0].1["id"].as_str().unwrap().to_string();
        assert!(chunks.iter().all(|(_, c)| c["id"] == id.as_str()));
        let tokens = x.token_events();
        let client_ttft_ms = ms(tokens[0].0 - x.sent);
        let client_e2e_ms = ms(tokens.last().unwrap().0 - x.sent);
        seen.push((id, client_ttft_ms, client_e2e_ms));
    }
    let perf = json_list(sim.port, "/perf_metrics");
    assert_eq!(perf.len(), requests, "{perf:?}");
    for (p, (id, client_ttft, client_e2e)) in perf.iter().zip(&seen) {
        // The answer's id is trtllm-serve's `cmpl-{request_id}`.
        assert_eq!(format!("cmpl-{}", p["request_id"]), *id, "{p}");
        let t = &p["perf_metrics"]["timing_metrics"];
        let s = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("no {k} in {t}"));
        let (arrival, scheduled, first, last) = (
            s("arrival_time"),
            s("first_scheduled_time"),
            s("first_token_time"),
            s("last_token_time"),
        );
        assert!(
            arrival <= scheduled && scheduled <= first && first <= last,
            "{t}"
        );
        // The engine's TTFT and its whole request fit inside what the client saw.
        assert!(
            (first - arrival) * 1e3 <= *client_ttft,
            "{t} vs {client_ttft} ms"
        );
        assert!(
            (last - arrival) * 1e3 <= *client_e2e,
            "{t} vs {client_e2e} ms"
        );
        assert!(last > first, "{max_tokens} tokens take decode steps: {t}");
    }
    // A read takes what it returned.
    assert!(json_list(sim.port, "/perf_metrics").is_empty());

    // Each step is one iteration-stats object and one log line, the same step.
    let stats = json_list(sim.port, "/metrics");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" iter = ")).collect();
    assert!(!stats.is_empty());
    assert_eq!(stats.len(), lines.len(), "{text}");
    let fmt = servbench::steplog::LogFormat::default();
    let mut gen_tokens = 0;
    for (st, line) in stats.iter().zip(&lines) {
        let (read, source) = servbench::steplog::parse_step_line(line, &fmt);
        assert_eq!(source, "trtllm", "{line}");
        let servbench::steplog::StepLine::Step(step) = read else {
            panic!("not read as a step: {line}: {read:?}")
        };
        let ib = &st["inflightBatchingStats"];
        assert_eq!(
            u64::from(step.ctx_requests),
            ib["numContextRequests"],
            "{line} / {st}"
        );
        assert_eq!(
            u64::from(step.ctx_tokens),
            ib["numCtxTokens"],
            "{line} / {st}"
        );
        assert_eq!(
            u64::from(step.gen_requests),
            ib["numGenRequests"],
            "{line} / {st}"
        );
        let host = step.host_step_ms.unwrap();
        let latency = st["iterLatencyMS"].as_f64().unwrap();
        assert!((host - latency).abs() < 1e-6, "{line} / {st}");
        gen_tokens += u64::from(step.gen_tokens);
    }
    // Every token after each request's first came from a decode step.
    assert_eq!(gen_tokens, requests as u64 * u64::from(max_tokens - 1));
    assert!(
        lines[0].contains("prev_device_step_time = N/A"),
        "{}",
        lines[0]
    );
}

/// Every key TensorRT-LLM's own binding test asserts in an iteration-stats object (the
/// verbatim sample) is in srv-sim's.
#[test]
fn srv_sim_iteration_stats_have_every_key_trtllms_own_test_asserts() {
    let dir = tempfile::tempdir().unwrap();
    let (log, options) = (dir.path().join("sim.log"), dir.path().join("opts.yaml"));
    std::fs::write(&options, "enable_iter_perf_stats: true\n").unwrap();
    let sim = start_logged(
        &[
            "--self-report-as",
            "trtllm",
            "--extra_llm_api_options",
            options.to_str().unwrap(),
        ],
        &log,
    );
    assert_eq!(
        post(sim.port, "/v1/completions", &completion_body(4, 2, false)).status,
        200
    );
    let stats = json_list(sim.port, "/metrics");
    let sample =
        include_str!("../../../shared/tests/fixtures/engine-self-report/trtllm_self_report.txt");
    let mut keys = 0;
    // The lines after "keys asserted by TRT-LLM's own binding test".
    let listed = sample
        .lines()
        .skip_while(|l| !l.contains("keys asserted"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with('"'));
    for l in listed {
        let (parent, names) = match l.split_once(":{") {
            Some((p, rest)) => (Some(p.trim().trim_matches('"')), rest),
            None => (None, l),
        };
        for k in names
            .split(',')
            .map(|k| k.trim().trim_matches(['"', '}', ' ']))
        {
            if k.is_empty() || k == "..." {
                continue;
            }
            let obj = parent.map_or(&stats[0], |p| &stats[0][p]);
            assert!(obj.get(k).is_some(), "no {parent:?}.{k} in {}", stats[0]);
            keys += 1;
        }
    }
    assert!(keys >= 18, "read only {keys} keys from the sample");
    // Without return_perf_metrics there is nothing at /perf_metrics.
    assert!(json_list(sim.port, "/perf_metrics").is_empty());
    // Nor a log line without print_iter_log.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(" iter = "), "{text}");
}

#[test]
fn vllms_flags_with_trtllms_self_report_are_refused() {
    for args in [
        &["--self-report-as", "trtllm", "--enable-mfu-metrics"][..],
        &["--extra_llm_api_options", "x.yaml"][..],
    ] {
        let out = testkit::run("srv-sim", args);
        assert_eq!(out.code(), Some(2), "{args:?}: {}", out.err());
        assert_eq!(out.err().lines().count(), 1, "{}", out.err());
    }
}
