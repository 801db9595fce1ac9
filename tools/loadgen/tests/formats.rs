//! What servers answer that loadgen must read right: usage counts that are not token counts
//! (streamed or whole), errors in the stream's own framing, tool-call-only streams, replies
//! without end in a conversation, a chunk nested past any bound. Each against a hostile
//! stand-in server (`hostile`).

mod hostile;

use hostile::{Answer, chunk};
use serde_json::Value;
use servbench::record::{ErrorClass, RequestRecord, SummaryRecord};
use testkit::loadgen_at;

/// Every run's flags besides the test's own: one at a time, no telemetry, a bounded request.
const BASE: &[&str] = &["--no-metrics", "--no-gpu", "-c", "1", "--timeout", "30s"];

/// The one request record of a run with one prompt, `prompt`.
fn request(url: &str, prompt: &str, args: &[&str]) -> RequestRecord {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.jsonl");
    std::fs::write(&p, format!("{}\n", serde_json::json!({"prompt": prompt}))).unwrap();
    let mut all = vec!["--prompts", p.to_str().unwrap(), "-n", "1"];
    all.extend_from_slice(args);
    loadgen_at(url, BASE, &all).one::<RequestRecord>()
}

/// The request's error class, where it failed.
fn failed_as(r: &RequestRecord) -> Option<ErrorClass> {
    r.error.as_ref().map(|e| e.class)
}

/// The request's error message ("" where it did not fail).
fn message(r: &RequestRecord) -> &str {
    r.error.as_ref().map_or("", |e| e.message.as_str())
}

fn prompt_of(req: &Value) -> String {
    req["prompt"].as_str().unwrap_or_default().to_string()
}

/// Usage as the prompt says (a JSON value), whole or streamed.
fn usage_as_asked(_path: &str, req: &Value) -> Answer {
    let usage = prompt_of(req);
    let usage = if usage == "none" {
        String::new()
    } else {
        format!(r#","usage":{{"prompt_tokens":3,"completion_tokens":{usage}}}"#)
    };
    if req["stream"] == Value::Bool(true) {
        Answer::Stream(vec![
            chunk(req, " a"),
            chunk(req, " b"),
            format!(r#"data: {{"choices":[]{usage}}}"#),
            "data: [DONE]".into(),
        ])
    } else {
        Answer::Json(
            200,
            format!(
                r#"{{"choices":[{{"index":0,"text":" a b","finish_reason":"length"}}]{usage}}}"#
            ),
        )
    }
}

#[test]
fn usage_that_is_not_a_token_count_is_a_protocol_error_streamed_or_whole() {
    let server = hostile::start(usage_as_asked);
    for usage in ["-7", "1e30", "3.7", "4294967296"] {
        for stream in [true, false] {
            let args: &[&str] = if stream { &[] } else { &["--no-stream"] };
            let r = request(&server.url(), usage, args);
            assert_eq!(
                failed_as(&r),
                Some(ErrorClass::Protocol),
                "usage {usage}, stream {stream}: {r:?}"
            );
        }
    }
    // Without usage a stream counts its chunks; a whole answer has no count at all.
    let r = request(&server.url(), "none", &[]);
    assert!(r.error.is_none() && r.output_tokens == 2, "{r:?}");
    let r = request(&server.url(), "none", &["--no-stream"]);
    assert_eq!(failed_as(&r), Some(ErrorClass::Protocol), "{r:?}");
    assert!(message(&r).contains("completion_tokens"), "{r:?}");
    let r = request(&server.url(), "2", &["--no-stream"]);
    assert!(r.error.is_none() && r.output_tokens == 2, "{r:?}");
}

/// An error in the stream's framing, as old llama-server (`error:`) or `event: error` send it.
fn framing_error(_path: &str, req: &Value) -> Answer {
    let error = r#"{"code":500,"message":"the KV cache is full","type":"server_error"}"#;
    let tail = match prompt_of(req).as_str() {
        "field" => vec![format!("error: {error}"), String::new()],
        _ => vec![
            "event: error".into(),
            format!("data: {error}"),
            String::new(),
        ],
    };
    let mut lines = vec![chunk(req, " a")];
    lines.extend(tail);
    Answer::Stream(lines)
}

#[test]
fn an_sse_error_field_or_event_fails_the_request() {
    let server = hostile::start(framing_error);
    for form in ["field", "event"] {
        let r = request(&server.url(), form, &[]);
        assert_eq!(failed_as(&r), Some(ErrorClass::Protocol), "{form}: {r:?}");
        let msg = message(&r);
        assert!(msg.contains("KV cache is full"), "{form}: {msg}");
    }
}

/// A chat answer that is only a tool call, in four deltas.
fn tool_call(_path: &str, _req: &Value) -> Answer {
    let delta = |d: Value| {
        format!(
            "data: {}\n",
            serde_json::json!({"choices": [{"index": 0, "delta": d}]})
        )
    };
    Answer::Stream(vec![
        delta(serde_json::json!({"role": "assistant", "content": null})),
        delta(
            serde_json::json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
        ),
        delta(
            serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]}),
        ),
        delta(
            serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Oslo\"}"}}]}),
        ),
        format!(
            "data: {}\n",
            serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 9, "completion_tokens": 3}})
        ),
        "data: [DONE]".into(),
    ])
}

#[test]
fn a_tool_call_only_stream_has_a_first_token_and_gaps() {
    let server = hostile::start(tool_call);
    let r = request(&server.url(), "weather?", &["--api", "chat"]);
    assert!(r.error.is_none(), "{r:?}");
    assert_eq!(r.chunks, 3, "{r:?}");
    assert!(
        r.ttft_ms.is_some(),
        "a tool call's first delta is a first token: {r:?}"
    );
    assert_eq!(r.itl_ms.len(), 2, "{r:?}");
    assert!(r.tpot_ms.is_some(), "{r:?}");
}

/// A stream that never ends and ignores max_tokens (2 KB a chunk).
fn endless(_path: &str, req: &Value) -> Answer {
    Answer::Endless(chunk(req, &" t".repeat(1000)).trim_end().to_string())
}

#[test]
fn a_conversation_against_a_server_ignoring_max_tokens_fails_at_the_reply_bound() {
    let server = hostile::start(endless);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.jsonl");
    std::fs::write(
        &p,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]}\n",
    )
    .unwrap();
    let out = loadgen_at(
        &server.url(),
        BASE,
        &[
            "--api",
            "chat",
            "--turns",
            "2",
            "-n",
            "1",
            "--max-tokens",
            "4",
            "--prompts",
            p.to_str().unwrap(),
        ],
    );
    let reqs = out.of::<RequestRecord>();
    assert_eq!(reqs.len(), 1, "no turn after a failed one: {}", out.err());
    let r = &reqs[0];
    assert_eq!(
        failed_as(r),
        Some(ErrorClass::Protocol),
        "bounded, not a timeout: {r:?}"
    );
    assert!(message(r).contains("longer than 16 MiB"), "{r:?}");
}

/// A reasoning model: two reasoning chunks, then three of the answer, 20 ms apart.
fn reasoning(_path: &str, _req: &Value) -> Answer {
    let delta = |d: Value| {
        format!(
            "data: {}\n",
            serde_json::json!({"choices": [{"index": 0, "delta": d}]})
        )
    };
    let mut lines = vec![
        delta(serde_json::json!({"reasoning_content": "think"})),
        delta(serde_json::json!({"reasoning_content": " more"})),
    ];
    lines.extend((0..3).map(|_| delta(serde_json::json!({"content": " ok"}))));
    lines.push(format!(
        "data: {}\n",
        serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 5}})
    ));
    lines.push("data: [DONE]".into());
    Answer::Paced(lines, std::time::Duration::from_millis(20))
}

#[test]
fn a_reasoning_answer_records_its_first_answer_token_and_reasoning_share() {
    let server = hostile::start(reasoning);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.jsonl");
    std::fs::write(&p, "{\"prompt\":\"why?\"}\n").unwrap();
    let prompts = ["--api", "chat", "--prompts", p.to_str().unwrap()];
    let out = loadgen_at(&server.url(), BASE, &[&prompts[..], &["-n", "2"]].concat());
    let reqs = out.of::<RequestRecord>();
    assert_eq!(reqs.len(), 2, "{}", out.err());
    for r in &reqs {
        let (ttft, ttfo) = (r.ttft_ms.unwrap(), r.ttfo_ms.unwrap());
        assert_eq!(r.ttft_reasoning_ms, r.ttft_ms, "{r:?}");
        assert!(
            ttfo >= ttft + 30.0,
            "two reasoning chunks 20 ms apart come first: {r:?}"
        );
        assert_eq!(r.reasoning_tokens, Some(2), "{r:?}");
    }
    let summary = &out.of::<SummaryRecord>()[0];
    assert_eq!(
        summary.ttfo_ms.as_ref().map(|d| d.n),
        Some(2),
        "{summary:?}"
    );
    assert_eq!(summary.reasoning_share, Some(0.4), "{summary:?}");
    // summarize shows both where the model reasoned.
    let table = summarize(&out.stdout);
    assert!(
        table.contains("TTFO p50 ms") && table.contains("reasoning %"),
        "{table}"
    );
    let row = table.lines().last().unwrap();
    assert!(
        row.split_whitespace().any(|c| c == "40.0" || c == "40"),
        "{table}"
    );
    // Without reasoning neither appears.
    let server = hostile::start(tool_call);
    let r = request(&server.url(), "x", &["--api", "chat"]);
    assert!(r.ttfo_ms.is_none() && r.reasoning_tokens.is_none(), "{r:?}");
    let out = loadgen_at(&server.url(), BASE, &[&prompts[..], &["-n", "1"]].concat());
    let table = summarize(&out.stdout);
    assert!(
        table.contains("TTFT p50") && !table.contains("TTFO") && !table.contains("reasoning"),
        "{table}"
    );
}

/// summarize's table of these records.
fn summarize(records: &[u8]) -> String {
    testkit::call("summarize")
        .args(["--no-notes"])
        .stdin(records)
        .run_ok()
        .out()
}

/// A content chunk, then one nested a million brackets deep.
fn nested_deep(_path: &str, req: &Value) -> Answer {
    Answer::Stream(vec![
        chunk(req, " a"),
        format!(r#"data: {{"logprobs":{}"#, "[".repeat(1 << 20)),
        "data: [DONE]".into(),
    ])
}

/// The chunk scanner recursed once per bracket: a hostile chunk nested a million deep
/// overflowed the request task's stack and killed loadgen instead of failing the request.
#[test]
fn a_chunk_nested_a_million_deep_fails_the_request_as_malformed() {
    let server = hostile::start(nested_deep);
    let r = request(&server.url(), "x", &[]);
    assert_eq!(failed_as(&r), Some(ErrorClass::Protocol), "{r:?}");
    let msg = message(&r);
    assert!(msg.contains("malformed SSE data"), "{msg}");
    assert_eq!(r.chunks, 1, "{r:?}");
}
