//! The wire formats' requests and events, checked as JSON.

use super::*;

fn limits() -> Limits {
    Limits {
        served_model: "m".into(),
        max_model_len: 100,
        default_max_tokens: 16,
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
