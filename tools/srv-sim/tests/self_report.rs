//! srv-sim with vLLM's self-report flags tells the truth of its own model: every step it runs
//! is one `Iteration(N)` line in its log (vLLM's format), with the step time its cost model
//! gave; its FLOP and byte counters are those steps' compute and memory times at the card's
//! rates; each answer's `metrics` (vLLM's shape) fits inside what the client saw.

mod common;
use common::*;
use std::process::{Command, Stdio};

/// (context requests, context tokens, generation requests, generation tokens, elapsed ms) of
/// each `Iteration(N)` line.
fn steps(log: &str) -> Vec<(u64, u64, u64, u64, f64)> {
    log.lines()
        .filter_map(|l| l.split_once(": Iteration(").map(|(_, rest)| rest))
        .map(|rest| {
            let nums: Vec<f64> = rest
                .split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter(|s| !s.is_empty())
                .filter_map(|s| s.parse().ok())
                .collect();
            (
                nums[1] as u64,
                nums[2] as u64,
                nums[3] as u64,
                nums[4] as u64,
                nums[5],
            )
        })
        .collect()
}

#[test]
fn srv_sim_logs_every_step_and_counts_its_cost_models_work() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sim.log");
    let sim = start_logged(
        &[
            "--enable-per-request-metrics",
            "--enable-logging-iteration-details",
            "--enable-mfu-metrics",
            "--no-enable-prefix-caching",
        ],
        &log,
    );
    let (requests, max_tokens) = (3u64, 8u64);
    let mut prompt_tokens = 0;
    for _ in 0..requests {
        let x = post(
            sim.port,
            "/v1/completions",
            &completion_body(16, max_tokens as u32, true),
        );
        assert_eq!(x.status, 200);
        let chunks = x.chunks();
        let tokens = x.token_events();
        let client_ttft_ms = ms(tokens[0].0 - x.sent);
        let last = &chunks.last().unwrap().1;
        prompt_tokens += last["usage"]["prompt_tokens"].as_u64().unwrap();
        let m = &last["metrics"];
        let (queue, ttft, generation, itl) = (
            m["queue_time_ms"].as_f64().unwrap(),
            m["time_to_first_token_ms"].as_f64().unwrap(),
            m["generation_time_ms"].as_f64().unwrap(),
            m["mean_itl_ms"].as_f64().unwrap(),
        );
        assert!(queue >= 0.0 && ttft > 0.0, "{m}");
        assert!(
            queue + ttft <= client_ttft_ms,
            "{m} vs client {client_ttft_ms} ms"
        );
        assert!(
            (itl - generation / (max_tokens - 1) as f64).abs() < 1e-9,
            "{m}"
        );
        assert!(
            queue + ttft + generation <= ms(chunks.last().unwrap().0 - x.sent),
            "{m}"
        );
    }
    let metrics = get(sim.port, "/metrics").1;
    let text = std::fs::read_to_string(&log).unwrap();
    let steps = steps(&text);
    // Sequential requests: one prefill step (its first token) and max_tokens - 1 decode steps each.
    assert_eq!(steps.len() as u64, requests * max_tokens, "{text}");
    let sum = |f: fn(&(u64, u64, u64, u64, f64)) -> u64| steps.iter().map(f).sum::<u64>();
    assert_eq!(sum(|s| s.0), requests);
    assert_eq!(sum(|s| s.1), prompt_tokens);
    assert_eq!(sum(|s| s.2), requests * (max_tokens - 1));
    assert_eq!(sum(|s| s.3), requests * (max_tokens - 1));
    // Llama-3.1-8B on one H100 is memory-bound at these sizes: each step is its bytes at
    // 3350 GB/s plus srv-sim's 0.1 ms overhead; the log rounds each step to 0.01 ms.
    let read_bytes = metric(&metrics, "vllm:estimated_read_bytes_per_gpu_total");
    let flops = metric(&metrics, "vllm:estimated_flops_per_gpu_total");
    assert_eq!(
        metric(&metrics, "vllm:estimated_write_bytes_per_gpu_total"),
        0.0
    );
    let logged_ms: f64 = steps.iter().map(|s| s.4).sum();
    let modelled_ms = read_bytes / 3350e9 * 1e3 + steps.len() as f64 * 0.1;
    assert!(
        (logged_ms - modelled_ms).abs() <= steps.len() as f64 * 0.005 + 1e-6,
        "steps {logged_ms} ms, counters {modelled_ms} ms"
    );
    assert!(flops > 0.0 && flops / 989e12 * 1e3 < logged_ms, "{flops}");
}

#[test]
fn without_the_flags_srv_sim_says_nothing_about_itself() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sim.log");
    let sim = start_logged(&[], &log);
    let x = post(sim.port, "/v1/completions", &completion_body(4, 3, false));
    assert!(x.json().get("metrics").is_none(), "{}", x.json());
    assert!(!get(sim.port, "/metrics").1.contains("estimated_"));
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("Iteration(")
    );
}

/// `--predict --enable-logging-iteration-details` logs its virtual steps in the server's format:
/// at C=1 (each request alone on an idle engine, whatever the machine's load) they are the steps
/// the server ran for the same loadgen load, one for one, with the same step times.
#[test]
fn a_prediction_logs_the_steps_the_server_ran_under_loadgen_at_c1() {
    let preset = LLAMA_8B_ON_A100;
    let load = [
        "-c",
        "1",
        "-n",
        "3",
        "--input-len",
        "64",
        "--max-tokens",
        "4",
        "--seed",
        "3",
    ];
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sim.log");
    let sim = start_logged(
        &[preset, &["--enable-logging-iteration-details"]].concat(),
        &log,
    );
    loadgen_against(&sim, &load);
    drop(sim);
    let served = steps(&std::fs::read_to_string(&log).unwrap());
    let predicted = Command::new(testkit::bin("srv-sim"))
        .args(preset)
        .args(["--predict", "--enable-logging-iteration-details"])
        .args(load)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(predicted.status.success());
    let predicted = steps(&String::from_utf8_lossy(&predicted.stderr));
    // Each request: its prompt's step (which samples the first token), then three decodes.
    assert_eq!(served.len(), 12, "{served:?}");
    assert_eq!(predicted, served);
}
