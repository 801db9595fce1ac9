//! The HTTP API against the real binary: routes, response shapes, SSE framing, usage,
//! tokenization agreeing with usage, deterministic text, metrics, and 400s for bad requests.

mod common;
use common::*;
use serde_json::Value;

#[test]
fn routes_and_shapes_match_vllm() {
    let sim = start(&[
        "--ttft",
        "0",
        "--itl",
        "0",
        "--served-model-name",
        "sim-model",
    ]);
    let p = sim.port;

    assert_eq!(get(p, "/health").0, 200);
    let (status, models) = get(p, "/v1/models");
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "sim-model");

    // /tokenize counts words, and usage agrees with it.
    let prompt = "one two three four five six seven";
    let tok = post(
        p,
        "/tokenize",
        &format!(r#"{{"prompt":"{prompt}","return_token_strs":true}}"#),
    )
    .json();
    assert_eq!(tok["count"], 7);
    assert_eq!(tok["tokens"].as_array().unwrap().len(), 7);
    assert_eq!(tok["token_strs"][2], "three");
    assert!(tok["max_model_len"].as_u64().unwrap() > 0);
    let chat_tok = post(
        p,
        "/tokenize",
        r#"{"messages":[{"role":"user","content":"a b c"},{"role":"assistant","content":"d"}]}"#,
    )
    .json();
    assert_eq!(chat_tok["count"], 4);

    let done = post(
        p,
        "/v1/completions",
        &format!(r#"{{"prompt":"{prompt}","max_tokens":9,"temperature":0.7}}"#),
    );
    assert_eq!(done.status, 200, "{}", String::from_utf8_lossy(&done.body));
    let v = done.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["model"], "sim-model");
    assert_eq!(v["usage"]["prompt_tokens"], 7);
    assert_eq!(v["usage"]["completion_tokens"], 9);
    assert_eq!(v["usage"]["total_tokens"], 16);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    // The generated text tokenizes back to completion_tokens.
    let text = v["choices"][0]["text"].as_str().unwrap();
    let back = post(
        p,
        "/tokenize",
        &serde_json::json!({"prompt": text}).to_string(),
    )
    .json();
    assert_eq!(back["count"], 9);

    let chat = post(
        p,
        "/v1/chat/completions",
        r#"{"model":"sim-model","messages":[{"role":"user","content":"hi there"}],"max_completion_tokens":4}"#,
    )
    .json();
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["choices"][0]["message"]["role"], "assistant");
    assert_eq!(chat["usage"]["prompt_tokens"], 2);
    assert_eq!(chat["usage"]["completion_tokens"], 4);

    // Token-id prompts count their ids; detokenize round-trips the count.
    let ids = post(
        p,
        "/v1/completions",
        r#"{"prompt":[1,2,3,4,5],"max_tokens":1}"#,
    )
    .json();
    assert_eq!(ids["usage"]["prompt_tokens"], 5);
    let detok = post(p, "/detokenize", r#"{"tokens":[1,2,3,900000]}"#).json();
    let again = post(
        p,
        "/tokenize",
        &serde_json::json!({"prompt": detok["prompt"]}).to_string(),
    )
    .json();
    assert_eq!(again["count"], 4);
}

#[test]
fn streams_are_framed_like_vllm() {
    let sim = start(&["--ttft", "0", "--itl", "1ms"]);
    let p = sim.port;

    // Chat: a role-only first chunk, one token per chunk, finish_reason on the last token,
    // a usage chunk with empty choices, then [DONE].
    let x = post(
        p,
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"a b c"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}"#,
    );
    assert_eq!(x.status, 200);
    assert!(
        x.headers
            .to_ascii_lowercase()
            .contains("content-type: text/event-stream")
    );
    let raw = String::from_utf8(x.body.clone()).unwrap();
    assert!(raw.starts_with("data: {"), "{raw}");
    assert!(raw.ends_with("data: [DONE]\n\n"), "{raw}");
    let chunks = x.chunks();
    assert_eq!(chunks.len(), 1 + 5 + 1);
    assert_eq!(
        chunks[0].1["choices"][0]["delta"],
        serde_json::json!({"role":"assistant","content":""})
    );
    for (_, c) in &chunks[1..6] {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(
            tokens_in(c["choices"][0]["delta"]["content"].as_str().unwrap()),
            1
        );
    }
    assert_eq!(chunks[4].1["choices"][0]["finish_reason"], Value::Null);
    assert_eq!(chunks[5].1["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[6].1["choices"], serde_json::json!([]));
    assert_eq!(chunks[6].1["usage"]["prompt_tokens"], 3);
    assert_eq!(chunks[6].1["usage"]["completion_tokens"], 5);
    assert!(chunks.iter().all(|(_, c)| c["id"] == chunks[0].1["id"]));

    // Completions without include_usage: no usage chunk; with continuous_usage_stats: on every chunk.
    let plain = post(
        p,
        "/v1/completions",
        r#"{"prompt":"x","max_tokens":3,"stream":true}"#,
    );
    let chunks = plain.chunks();
    assert_eq!(chunks.len(), 3);
    assert!(chunks.iter().all(|(_, c)| c.get("usage").is_none()));
    assert_eq!(chunks[2].1["choices"][0]["finish_reason"], "length");
    let cont = post(
        p,
        "/v1/completions",
        r#"{"prompt":"x y","max_tokens":3,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#,
    );
    let chunks = cont.chunks();
    assert_eq!(chunks.len(), 4);
    for (i, (_, c)) in chunks[..3].iter().enumerate() {
        assert_eq!(c["usage"]["completion_tokens"], i as u64 + 1);
        assert_eq!(c["usage"]["prompt_tokens"], 2);
    }
}

fn tokens_in(text: &str) -> usize {
    text.split_whitespace().count()
}

#[test]
fn generated_text_is_deterministic_for_a_seed() {
    let body = r#"{"prompt":"the same prompt","max_tokens":20}"#;
    let text = |seed: &str| {
        let sim = start(&["--ttft", "0", "--itl", "0", "--seed", seed]);
        let a = post(sim.port, "/v1/completions", body).json()["choices"][0]["text"].clone();
        let b = post(sim.port, "/v1/completions", body).json()["choices"][0]["text"].clone();
        assert_eq!(a, b, "same server, same prompt");
        a
    };
    let first = text("7");
    assert_eq!(first, text("7"), "same seed, new process");
    assert_ne!(first, text("8"), "another seed");
}

#[test]
fn malformed_requests_get_400_and_the_server_survives() {
    let sim = start(&["--ttft", "0", "--itl", "0", "--max-model-len", "1000"]);
    let p = sim.port;
    let bad = [
        ("/v1/completions", "not json at all"),
        ("/v1/completions", ""),
        ("/v1/completions", "[1,2,3]"),
        ("/v1/completions", r#"{"max_tokens":3}"#),
        ("/v1/completions", r#"{"prompt":{"a":1}}"#),
        ("/v1/completions", r#"{"prompt":"a","max_tokens":"ten"}"#),
        ("/v1/completions", r#"{"prompt":"a","max_tokens":-5}"#),
        ("/v1/completions", r#"{"prompt":"a","max_tokens":0}"#),
        ("/v1/completions", r#"{"prompt":"a","max_tokens":2000}"#),
        (
            "/v1/completions",
            r#"{"prompt":"a","max_tokens":5,"min_tokens":9}"#,
        ),
        ("/v1/completions", r#"{"prompt":"a","n":4}"#),
        ("/v1/completions", r#"{"prompt":"a","echo":true}"#),
        ("/v1/completions", r#"{"prompt":"a","logprobs":5}"#),
        ("/v1/completions", r#"{"prompt":"a","stop":["zz"]}"#),
        ("/v1/completions", r#"{"prompt":"a","stream":"yes"}"#),
        (
            "/v1/completions",
            r#"{"prompt":"a","stream_options":{"include_usage":true}}"#,
        ),
        ("/v1/completions", r#"{"prompt":"a","temperature":-1}"#),
        ("/v1/chat/completions", r#"{"messages":[]}"#),
        ("/v1/chat/completions", r#"{"messages":"hi"}"#),
        (
            "/v1/chat/completions",
            r#"{"messages":[{"content":"no role"}]}"#,
        ),
        (
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#,
        ),
        (
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function"}]}"#,
        ),
        ("/tokenize", r#"{"prompt":5}"#),
        ("/tokenize", "{"),
        ("/detokenize", r#"{"tokens":[-1]}"#),
    ];
    for (path, body) in bad {
        let x = post(p, path, body);
        assert_eq!(
            x.status,
            400,
            "{path} {body}: {}",
            String::from_utf8_lossy(&x.body)
        );
        let err = x.json();
        assert_eq!(err["error"]["code"], 400, "{body}");
        assert_eq!(err["error"]["type"], "BadRequestError");
        assert!(!err["error"]["message"].as_str().unwrap().is_empty());
    }
    let unknown_model = post(p, "/v1/completions", r#"{"model":"other","prompt":"a"}"#);
    assert_eq!(unknown_model.status, 404);
    assert_eq!(get(p, "/nowhere").0, 404);
    assert_eq!(get(p, "/v1/completions").0, 405);
    // Broken HTTP itself: hyper answers 400 and closes; the server goes on.
    let garbage = raw(p, b"THIS IS NOT HTTP\r\n\r\n");
    assert_eq!(garbage.status, 400);
    let truncated_body = raw(
        p,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{\"prompt\"",
    );
    assert_ne!(truncated_body.status, 200);
    assert!(testkit::alive(sim.guard.pid()));
    assert_eq!(
        post(
            p,
            "/v1/completions",
            r#"{"prompt":"still fine","max_tokens":2}"#
        )
        .status,
        200
    );
}

#[test]
fn metrics_use_vllm_names_and_count_tokens() {
    let sim = start(&["--ttft", "5ms", "--itl", "1ms"]);
    let p = sim.port;
    for _ in 0..3 {
        assert_eq!(
            post(p, "/v1/completions", &completion_body(10, 4, true)).status,
            200
        );
    }
    let (status, text) = get(p, "/metrics");
    assert_eq!(status, 200);
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ] {
        metric(&text, name);
    }
    assert_eq!(metric(&text, "vllm:prompt_tokens_total"), 30.0);
    assert_eq!(metric(&text, "vllm:generation_tokens_total"), 12.0);
    assert_eq!(metric(&text, "vllm:num_requests_running"), 0.0);
    assert_eq!(metric(&text, "vllm:time_to_first_token_seconds_count"), 3.0);
    assert_eq!(metric(&text, "vllm:inter_token_latency_seconds_count"), 9.0);
    // srv-sim never answers before its --ttft (5 ms): no TTFT in the 1 ms bucket, all three in
    // +Inf. An upper bound (say, all within 10 ms) would be a timing claim a busy box breaks.
    let ttft_bucket = |le: &str| {
        format!(
            "vllm:time_to_first_token_seconds_bucket{{model_name=\"llama-3.1-8b\",engine=\"0\",le=\"{le}\"}}"
        )
    };
    assert!(
        text.contains(&format!("{} 0\n", ttft_bucket("0.001"))),
        "{text}"
    );
    assert!(
        text.contains(&format!("{} 3\n", ttft_bucket("+Inf"))),
        "{text}"
    );
    assert!(text.contains("vllm:request_success_total{model_name=\"llama-3.1-8b\",engine=\"0\",finished_reason=\"length\"} 3"));
    // Each family is declared once (valid Prometheus exposition).
    let types = text
        .lines()
        .filter(|l| l.starts_with("# TYPE vllm:generation_tokens_total "))
        .count();
    assert_eq!(types, 1);
}
