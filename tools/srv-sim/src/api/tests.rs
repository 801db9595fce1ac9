//! The wire formats' requests and events, checked as JSON.

use super::*;

fn limits() -> Limits {
    Limits {
        served_model: "m".into(),
        adapters: vec!["sql".into()],
        max_model_len: 100,
        default_max_tokens: 16,
        image_token_px: None,
    }
}

#[test]
fn chunks_are_valid_json_events() {
    let req = parse_generate(
        Endpoint::Chat,
        br#"{"messages":[{"role":"user","content":"a b c"}],"max_tokens":3,"stream":true,
            "stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#,
        &limits(),
    )
    .unwrap();
    assert_eq!(req.prompt_tokens, 3);
    let f = Formatter::new(Endpoint::Chat, 7, 1, "\"m\"", &req);
    let mut out = Vec::new();
    f.start(&mut out);
    f.token_chunk(&mut out, &[" ka", " lo"], false, 2);
    f.token_chunk(&mut out, &[" mi"], true, 3);
    f.finish(&mut out, 3, &crate::progress::Progress::new(3));
    let text = String::from_utf8(out).unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 5);
    for e in &events[..4] {
        let v: Value = serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(v["model"], "m");
    }
    let last: Value = serde_json::from_str(&events[2][6..]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(last["usage"]["completion_tokens"], 3);
    assert_eq!(events[4], "data: [DONE]");
}

#[test]
fn rejects_what_it_cannot_do() {
    let l = limits();
    for bad in [
        &b"not json"[..],
        br#"[1]"#,
        br#"{"prompt":"a","n":2}"#,
        br#"{"prompt":5}"#,
        br#"{"prompt":"a","max_tokens":-1}"#,
        br#"{"prompt":"a","max_tokens":0}"#,
        br#"{"prompt":"a","max_tokens":5,"min_tokens":6}"#,
        br#"{"prompt":"a","max_tokens":100}"#,
        br#"{"prompt":"a","stream_options":{"include_usage":true}}"#,
        br#"{"prompt":"a","stop":["x"]}"#,
        br#"{"prompt":["a","b"]}"#,
        br#"{"prompt":"a","temperature":"hot"}"#,
    ] {
        let err = parse_generate(Endpoint::Completions, bad, &l).unwrap_err();
        assert_eq!(err.status, 400, "{}", String::from_utf8_lossy(bad));
    }
    let err =
        parse_generate(Endpoint::Completions, br#"{"prompt":"a","model":"x"}"#, &l).unwrap_err();
    assert_eq!(err.status, 404);
    let ok = parse_generate(
        Endpoint::Completions,
        br#"{"prompt":[1,2,3],"ignore_eos":true,"temperature":0}"#,
        &l,
    )
    .unwrap();
    assert_eq!((ok.prompt_tokens, ok.max_tokens), (3, 16));
}

/// A stream's events as (SSE event name, data as JSON).
fn events(out: &[u8]) -> Vec<(Option<String>, Value)> {
    let text = String::from_utf8(out.to_vec()).unwrap();
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let mut name = None;
            let mut data = Value::Null;
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap_or_else(|e| panic!("{d}: {e}"));
                }
            }
            (name, data)
        })
        .collect()
}

/// The events of a whole stream of three tokens in two chunks for `body` at `endpoint`.
fn stream_of(endpoint: Endpoint, body: &[u8]) -> Vec<(Option<String>, Value)> {
    let req = parse_generate(endpoint, body, &limits()).unwrap();
    assert_eq!((req.prompt_tokens, req.max_tokens), (4, 3), "{endpoint:?}");
    let f = Formatter::new(endpoint, 7, 1, "\"m\"", &req);
    let mut out = Vec::new();
    f.start(&mut out);
    f.token_chunk(&mut out, &[" ka", " lo"], false, 2);
    f.token_chunk(&mut out, &[" mi"], true, 3);
    f.finish(&mut out, 3, &crate::progress::Progress::new(3));
    events(&out)
}

#[test]
fn responses_events_are_typed_numbered_and_end_with_the_usage() {
    let ev = stream_of(
        Endpoint::Responses,
        br#"{"input":[{"role":"user","content":[{"type":"input_text","text":"a b c d"}]}],"max_output_tokens":3,"stream":true}"#,
    );
    let kinds: Vec<&str> = ev.iter().map(|e| e.1["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.completed"
        ]
    );
    for (i, (name, data)) in ev.iter().enumerate() {
        assert_eq!(name.as_deref(), data["type"].as_str());
        assert_eq!(data["sequence_number"], i);
    }
    assert_eq!(ev[4].1["delta"], " ka lo");
    let usage = &ev[6].1["response"]["usage"];
    assert_eq!(
        (
            usage["input_tokens"].as_u64(),
            usage["output_tokens"].as_u64()
        ),
        (Some(4), Some(3))
    );
}

#[test]
fn messages_events_carry_text_deltas_and_the_counts() {
    let ev = stream_of(
        Endpoint::Messages,
        br#"{"system":"a b","messages":[{"role":"user","content":"c d"}],"max_tokens":3,"stream":true}"#,
    );
    let kinds: Vec<&str> = ev.iter().map(|e| e.1["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &ev {
        assert_eq!(name.as_deref(), data["type"].as_str());
    }
    assert_eq!(ev[0].1["message"]["usage"]["input_tokens"], 4);
    assert_eq!(
        ev[3].1["delta"],
        json!({"type": "text_delta", "text": " mi"})
    );
    assert_eq!(ev[5].1["usage"]["output_tokens"], 3);
    assert_eq!(ev[5].1["delta"]["stop_reason"], "max_tokens");
}

#[test]
fn structured_answers_stream_as_valid_events_whose_text_is_the_json() {
    let req = parse_generate(
        Endpoint::Chat,
        br#"{"messages":[{"role":"user","content":"a b"}],"max_tokens":40,"stream":true,
            "response_format":{"type":"json_schema","json_schema":{"name":"p","schema":
            {"type":"object","properties":{"k":{"type":"string","enum":["x \"y\""]}}}}}}"#,
        &limits(),
    )
    .unwrap();
    let schema = req.json_schema.clone().expect("the schema is kept");
    let words = structured::answer(&schema, 3, false);
    let escaped: Vec<String> = words.iter().map(|w| structured::escaped(w)).collect();
    let f = Formatter::new(Endpoint::Chat, 7, 1, "\"m\"", &req);
    let mut out = Vec::new();
    let n = escaped.len() as u32;
    for (i, w) in escaped.iter().enumerate() {
        f.token_chunk(&mut out, &[w], i as u32 + 1 == n, i as u32 + 1);
    }
    let text = String::from_utf8(out).unwrap();
    let content: String = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let v: Value = serde_json::from_str(&e[6..]).unwrap_or_else(|err| panic!("{e}: {err}"));
            v["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let answer: Value = serde_json::from_str(&content).unwrap();
    assert_eq!(answer, json!({"k": "x \"y\""}));
    // What srv-sim cannot follow is a 400 before any token.
    let e = parse_generate(
        Endpoint::Chat,
        br#"{"messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema",
            "json_schema":{"name":"p","schema":{"anyOf":[{"type":"string"}]}}}}"#,
        &limits(),
    )
    .unwrap_err();
    assert_eq!(e.status, 400);
    assert!(e.message.contains("'anyOf'"), "{}", e.message);
}
