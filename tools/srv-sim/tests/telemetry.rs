//! /metrics as the truth of the engine's model: preemption under a small KV budget, the KV
//! usage it is driven by, speculative decoding per draft position, and SGLang's names.

mod common;
use common::*;
use std::time::{Duration, Instant};

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = LLAMA_8B_ON_A100.to_vec();
    v.extend_from_slice(extra);
    v
}

/// Sends `n` streaming requests at once; returns each one's completion token count.
fn concurrent(port: u16, n: usize, prompt_words: usize, max_tokens: u32) -> Vec<u64> {
    let threads: Vec<_> = (0..n)
        .map(|_| {
            std::thread::spawn(move || {
                let x = post(
                    port,
                    "/v1/completions",
                    &completion_body(prompt_words, max_tokens, true),
                );
                assert_eq!(x.status, 200);
                x.chunks().last().unwrap().1["usage"]["completion_tokens"]
                    .as_u64()
                    .unwrap()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn a_small_kv_budget_preempts_and_every_request_still_completes() {
    // 8 requests of 20 + 100 tokens need 968 KV tokens at the end; 400 hold about three.
    let sim = start(&args(&["--kv-cache-tokens", "400"]));
    let port = sim.port;
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let w = watching.clone();
    let watcher = std::thread::spawn(move || {
        let mut max_usage: f64 = 0.0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while w.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
            let (_, text) = get(port, "/metrics");
            max_usage = max_usage.max(metric(&text, "vllm:kv_cache_usage_perc"));
            std::thread::sleep(Duration::from_millis(5));
        }
        max_usage
    });
    let tokens = concurrent(port, 8, 20, 100);
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let max_usage = watcher.join().unwrap();
    assert_eq!(
        tokens,
        vec![100; 8],
        "a preempted request resumes and finishes"
    );
    let (_, text) = get(port, "/metrics");
    let preemptions = metric(&text, "vllm:num_preemptions_total");
    assert!(preemptions > 0.0, "no preemption:\n{text}");
    // Recomputation is prefill work, not generation: every token is counted once.
    assert_eq!(metric(&text, "vllm:generation_tokens_total"), 800.0);
    assert_eq!(metric(&text, "vllm:prompt_tokens_total"), 160.0);
    assert!(
        (0.95..=1.0).contains(&max_usage),
        "max KV usage {max_usage}"
    );
    assert_eq!(metric(&text, "vllm:kv_cache_usage_perc"), 0.0);

    // One request at a time never preempts.
    let quiet = start(&args(&["--kv-cache-tokens", "400"]));
    assert_eq!(concurrent(quiet.port, 1, 20, 100), vec![100]);
    let (_, text) = get(quiet.port, "/metrics");
    assert_eq!(metric(&text, "vllm:num_preemptions_total"), 0.0);
}

/// Polls `name` every 5 ms while `work` runs; returns its largest value and `work`'s result.
fn max_while<T>(port: u16, name: &'static str, work: impl FnOnce() -> T) -> (f64, T) {
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let w = watching.clone();
    let watcher = std::thread::spawn(move || {
        let mut max: f64 = 0.0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while w.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
            let (_, text) = get(port, "/metrics");
            max = max.max(metric(&text, name));
            std::thread::sleep(Duration::from_millis(5));
        }
        max
    });
    let out = work();
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    (watcher.join().unwrap(), out)
}

/// A cached prefix skips prefill but its blocks are KV the request holds: a 200-token prompt
/// with 192 tokens cached, decoding 200 tokens in a 1,000-token budget, reaches 0.4 usage (not
/// 0.21, as if only the computed tokens were held).
#[test]
fn cached_prefix_tokens_are_held_in_the_kv_cache() {
    let sim = start(&args(&["--kv-cache-tokens", "1000"]));
    assert_eq!(concurrent(sim.port, 1, 200, 1), vec![1]);
    let (max_usage, tokens) = max_while(sim.port, "vllm:kv_cache_usage_perc", || {
        concurrent(sim.port, 1, 200, 200)
    });
    assert_eq!(tokens, vec![200]);
    let (_, text) = get(sim.port, "/metrics");
    assert_eq!(metric(&text, "vllm:prefix_cache_hits_total"), 192.0);
    assert!(
        (0.35..=0.401).contains(&max_usage),
        "max KV usage {max_usage}"
    );
}

/// Prefix caching and preemption together: 8 prompts of 40 equal words (32 tokens cached for
/// every request after the first) in a budget too small for their 100 output tokens each.
#[test]
fn preemption_with_cached_prefixes_still_completes_every_request() {
    let sim = start(&args(&["--kv-cache-tokens", "400"]));
    let (max_usage, tokens) = max_while(sim.port, "vllm:kv_cache_usage_perc", || {
        concurrent(sim.port, 8, 40, 100)
    });
    assert_eq!(tokens, vec![100; 8]);
    let (_, text) = get(sim.port, "/metrics");
    assert_eq!(metric(&text, "vllm:prefix_cache_hits_total"), 7.0 * 32.0);
    assert!(metric(&text, "vllm:num_preemptions_total") > 0.0, "{text}");
    assert_eq!(metric(&text, "vllm:generation_tokens_total"), 800.0);
    assert_eq!(metric(&text, "vllm:prompt_tokens_total"), 320.0);
    assert!(
        (0.95..=1.0).contains(&max_usage),
        "max KV usage {max_usage}"
    );
    assert_eq!(metric(&text, "vllm:kv_cache_usage_perc"), 0.0);
}

/// Value of the sample of `name` whose labels contain `label`.
fn labelled(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} with {label} missing in:\n{text}"))
}

#[test]
fn speculative_counters_per_position_follow_the_acceptance_chain() {
    let sim = start(&args(&[
        "--spec-tokens",
        "3",
        "--spec-accept",
        "0.7",
        "--seed",
        "5",
    ]));
    concurrent(sim.port, 8, 8, 200);
    let (_, text) = get(sim.port, "/metrics");
    let drafts = metric(&text, "vllm:spec_decode_num_drafts_total");
    let accepted = metric(&text, "vllm:spec_decode_num_accepted_tokens_total");
    let per_pos: Vec<f64> = (0..3)
        .map(|i| {
            labelled(
                &text,
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                &format!("position=\"{i}\""),
            )
        })
        .collect();
    assert_eq!(per_pos.iter().sum::<f64>(), accepted);
    // Position i is accepted when every draft token up to it is: A^(i+1) of the drafts.
    for (i, &n) in per_pos.iter().enumerate() {
        let want = 0.7f64.powi(i as i32 + 1);
        assert!(
            (n / drafts - want).abs() < 0.05,
            "position {i}: {}",
            n / drafts
        );
    }
}

#[test]
fn sglang_names_carry_the_same_truth() {
    let sim = start(&args(&[
        "--metrics-names",
        "sglang",
        "--spec-tokens",
        "3",
        "--spec-accept",
        "0.7",
    ]));
    let tokens = concurrent(sim.port, 4, 10, 150);
    assert_eq!(tokens, vec![150; 4]);
    let (_, text) = get(sim.port, "/metrics");
    assert!(!text.contains("vllm:"), "{text}");
    assert_eq!(metric(&text, "sglang:prompt_tokens_total"), 40.0);
    assert_eq!(metric(&text, "sglang:generation_tokens_total"), 600.0);
    assert_eq!(metric(&text, "sglang:num_requests_total"), 4.0);
    assert_eq!(metric(&text, "sglang:num_retracted_requests_total"), 0.0);
    assert_eq!(metric(&text, "sglang:num_running_reqs"), 0.0);
    assert_eq!(
        metric(&text, "sglang:time_to_first_token_seconds_count"),
        4.0
    );
    // SGLang's own buckets, not vLLM's.
    assert!(text.contains("sglang:inter_token_latency_seconds_bucket{model_name=\"llama-3.1-8b\",dp_rank=\"0\",le=\"0.002\"}"));
    // Gauges over the last 40 verify steps: 1 + A + A^2 + A^3 tokens per verify, and
    // (A + A^2 + A^3) / 3 of the draft tokens accepted.
    let length = metric(&text, "sglang:spec_accept_length");
    let rate = metric(&text, "sglang:spec_accept_rate");
    assert!((length - 2.533).abs() < 0.35, "accept length {length}");
    assert!((rate - 0.511).abs() < 0.12, "accept rate {rate}");
    assert!(
        (rate * 3.0 + 1.0 - length).abs() < 1e-9,
        "{rate} vs {length}"
    );
}
