//! srv-sim's prefix cache through HTTP: hits counted under vLLM's metric names in whole blocks,
//! cached tokens skip prefill (a long shared prompt's TTFT drops), and both reset endpoints
//! (vLLM's and SGLang's) empty it.

mod common;
use common::*;
use testkit::{check, holds_in_one_of_three};

fn body(words: &[String], max_tokens: u32) -> String {
    format!(
        r#"{{"prompt":"{}","max_tokens":{max_tokens},"stream":true}}"#,
        words.join(" ")
    )
}

/// `shared` words common to every prompt of the test, then `unique` words of prompt `id`.
fn prompt(shared: usize, unique: usize, id: usize) -> Vec<String> {
    (0..shared)
        .map(|i| format!("s{i}"))
        .chain((0..unique).map(|i| format!("u{id}x{i}")))
        .collect()
}

fn counters(port: u16) -> (f64, f64, f64) {
    let (status, text) = get(port, "/metrics");
    assert_eq!(status, 200);
    (
        metric(&text, "vllm:prefix_cache_queries_total"),
        metric(&text, "vllm:prefix_cache_hits_total"),
        metric(&text, "srv_sim:prefix_cache_resets_total"),
    )
}

#[test]
fn shared_prefixes_hit_in_blocks_and_the_reset_endpoints_empty_the_cache() {
    let sim = start(&["--ttft", "1ms", "--itl", "0"]);
    // 100 shared words = 6 full blocks of 16 (96 tokens) before the prompts differ.
    let first = post(sim.port, "/v1/completions", &body(&prompt(100, 20, 0), 2));
    assert_eq!(first.status, 200);
    assert_eq!(counters(sim.port), (120.0, 0.0, 0.0));
    post(sim.port, "/v1/completions", &body(&prompt(100, 20, 1), 2));
    assert_eq!(counters(sim.port), (240.0, 96.0, 0.0));

    // vLLM's endpoint: POST, 200 with an empty body; nothing is cached after it.
    let reset = post(sim.port, "/reset_prefix_cache", "");
    assert_eq!((reset.status, reset.body.len()), (200, 0));
    post(sim.port, "/v1/completions", &body(&prompt(100, 20, 2), 2));
    assert_eq!(counters(sim.port), (360.0, 96.0, 1.0));

    // SGLang's, GET or POST; chat prompts are cached by their text.
    let chat = |id: usize| {
        format!(
            r#"{{"messages":[{{"role":"user","content":"{}"}}],"max_tokens":2}}"#,
            prompt(100, 20, id).join(" ")
        )
    };
    assert_eq!(get(sim.port, "/flush_cache").0, 200);
    post(sim.port, "/v1/chat/completions", &chat(3));
    post(sim.port, "/v1/chat/completions", &chat(4));
    assert_eq!(counters(sim.port), (600.0, 192.0, 2.0));
    assert_eq!(post(sim.port, "/flush_cache", "").status, 200);
    assert_eq!(counters(sim.port).2, 3.0);
    assert_eq!(get(sim.port, "/reset_prefix_cache").0, 405);
}

#[test]
fn prefix_caching_can_be_turned_off() {
    let sim = start(&["--ttft", "1ms", "--itl", "0", "--no-enable-prefix-caching"]);
    for id in 0..2 {
        post(sim.port, "/v1/completions", &body(&prompt(64, 4, id), 2));
    }
    assert_eq!(counters(sim.port), (0.0, 0.0, 0.0));
}

/// The modelled engine: a cached prefix is not prefilled again, so the second of two prompts
/// sharing 8,000 of 8,016 tokens gets its first token far sooner (llama-3.1-70b prefills
/// 8,000 tokens in about half a second on one H200 at the roofline).
#[test]
fn cached_tokens_skip_prefill() {
    let sim = start(&[
        "--model",
        "llama-3.1-70b",
        "--hardware",
        "h200",
        "--tp",
        "2",
        "--realtime",
    ]);
    holds_in_one_of_three("cached prefix TTFT", || {
        assert_eq!(post(sim.port, "/flush_cache", "").status, 200);
        let ttft = |id: usize| {
            let x = post(sim.port, "/v1/completions", &body(&prompt(8000, 16, id), 2));
            assert_eq!(x.status, 200);
            ms(x.token_events()[0].0 - x.sent)
        };
        let cold = ttft(0);
        let warm = ttft(1);
        check("cold TTFT (ms)", cold, cold > 100.0)?;
        check("warm TTFT over cold", warm / cold, warm < cold / 5.0)?;
        Ok(format!("cold {cold:.1} ms, warm {warm:.1} ms"))
    });
}

/// Under `--metrics-names sglang` the same hits are `sglang:cached_tokens_total`, over
/// `sglang:prompt_tokens_total` (SGLang's ratio), and `sglang:cache_hit_rate` is the latest
/// request's share.
#[test]
fn sglang_names_count_cached_tokens_and_the_latest_hit_rate() {
    let sim = start(&["--ttft", "1ms", "--itl", "0", "--metrics-names", "sglang"]);
    post(sim.port, "/v1/completions", &body(&prompt(100, 20, 0), 2));
    post(sim.port, "/v1/completions", &body(&prompt(100, 20, 1), 2));
    let (status, text) = get(sim.port, "/metrics");
    assert_eq!(status, 200);
    assert!(!text.contains("vllm:"), "{text}");
    assert_eq!(metric(&text, "sglang:cached_tokens_total"), 96.0);
    assert_eq!(metric(&text, "sglang:prompt_tokens_total"), 240.0);
    assert_eq!(metric(&text, "sglang:cache_hit_rate"), 0.8);
    assert_eq!(post(sim.port, "/flush_cache", "").status, 200);
    let (_, text) = get(sim.port, "/metrics");
    assert_eq!(metric(&text, "srv_sim:prefix_cache_resets_total"), 1.0);
}

/// `--enable-prompt-tokens-details` (vLLM's flag): each answer's usage says how many prompt
/// tokens came from the cache, streamed and not; without it the field is absent or null, as in
/// vLLM by default.
#[test]
fn prompt_tokens_details_report_each_requests_cached_tokens_when_asked() {
    let usage_of = |ex: &Exchange| -> serde_json::Value {
        let text = String::from_utf8_lossy(&ex.body).into_owned();
        let json = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .rfind(|l| l.contains("\"usage\""))
            .map(str::to_string)
            .unwrap_or(text);
        serde_json::from_str::<serde_json::Value>(&json).unwrap()["usage"].clone()
    };
    let streamed = |words: &[String]| {
        format!(
            r#"{{"prompt":"{}","max_tokens":2,"stream":true,"stream_options":{{"include_usage":true}}}}"#,
            words.join(" ")
        )
    };
    let whole = |words: &[String]| {
        format!(
            r#"{{"prompt":"{}","max_tokens":2,"stream":false}}"#,
            words.join(" ")
        )
    };
    let sim = start(&[
        "--ttft",
        "1ms",
        "--itl",
        "0",
        "--enable-prompt-tokens-details",
    ]);
    let first = post(sim.port, "/v1/completions", &streamed(&prompt(100, 20, 0)));
    assert_eq!(
        usage_of(&first)["prompt_tokens_details"]["cached_tokens"],
        0
    );
    // 100 shared words: 6 whole blocks of 16 are cached for the next prompt.
    let second = post(sim.port, "/v1/completions", &streamed(&prompt(100, 20, 1)));
    assert_eq!(
        usage_of(&second)["prompt_tokens_details"]["cached_tokens"],
        96
    );
    let third = post(sim.port, "/v1/completions", &whole(&prompt(100, 20, 2)));
    assert_eq!(
        usage_of(&third)["prompt_tokens_details"]["cached_tokens"],
        96
    );

    let plain = start(&["--ttft", "1ms", "--itl", "0"]);
    post(
        plain.port,
        "/v1/completions",
        &streamed(&prompt(100, 20, 0)),
    );
    let again = post(
        plain.port,
        "/v1/completions",
        &streamed(&prompt(100, 20, 1)),
    );
    assert!(usage_of(&again).get("prompt_tokens_details").is_none());
    let whole_again = post(plain.port, "/v1/completions", &whole(&prompt(100, 20, 2)));
    assert!(usage_of(&whole_again)["prompt_tokens_details"].is_null());
}
