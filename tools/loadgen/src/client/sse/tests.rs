use super::*;

fn payloads(chunks: &[&[u8]]) -> Vec<String> {
    let mut p = SseParser::default();
    let mut out = Vec::new();
    for c in chunks {
        p.feed(c, |f| {
            out.push(match f {
                Field::Data(d) => String::from_utf8_lossy(d).into_owned(),
                Field::Error(e) => format!("ERROR {}", String::from_utf8_lossy(e)),
            });
            true
        });
    }
    out
}

proptest::proptest! {
    /// The fast scanner and serde agree on every chunk shape, odd spacing and escapes
    /// included; where the scanner declines, serde decides.
    #[test]
    fn scanner_agrees_with_serde(
        content in proptest::option::of("[ a-z\\\\\"\n]{0,6}"),
        reasoning in proptest::option::of("[a-z]{0,3}"),
        text_form in proptest::bool::ANY,
        usage in proptest::option::of((0u32..100_000, 0u32..5000)),
        cached in proptest::option::of(proptest::option::of(0u32..100_000)),
        extra_choice in proptest::bool::ANY,
        finish in proptest::option::of("[a-z]{0,6}"),
        error in proptest::bool::ANY,
        sp in "[ \n]{0,2}",
    ) {
        let js = |s: &Option<String>| match s {
            Some(s) => serde_json::to_string(s).unwrap(),
            None => "null".to_string(),
        };
        let choice = if text_form {
            format!(r#"{{"index":0,"text":{sp}{},"logprobs":null,"finish_reason":{}}}"#, js(&content), js(&finish))
        } else {
            format!(
                r#"{{"index":0,"delta":{{"role":"assistant","content":{},"reasoning_content":{sp}{}}},"finish_reason":{sp}{}}}"#,
                js(&content), js(&reasoning), js(&finish)
            )
        };
        let more = if extra_choice { r#",{"text":"zz","index":1}"# } else { "" };
        let usage = match usage {
            Some((p, c)) => {
                let details = match cached {
                    None => String::new(),
                    Some(None) => r#","prompt_tokens_details":null"#.to_string(),
                    Some(Some(n)) => format!(r#","prompt_tokens_details":{{"audio_tokens":null,"cached_tokens":{sp}{n}}}"#),
                };
                format!(r#"{{"prompt_tokens":{p},"completion_tokens":{c},"total_tokens":{}{details}}}"#, p + c)
            }
            None => "null".into(),
        };
        let err = if error { r#","error":{"message":"x","code":[1,-2.5e3,true]}"# } else { "" };
        let line = format!(r#"{{"id":"c-1","created":17,{sp}"choices":[{choice}{more}],"usage":{usage}{err}}}"#);
        let fast = scan::chunk(line.as_bytes());
        let slow = classify_serde(line.as_bytes()).unwrap();
        proptest::prop_assert_eq!(fast, Some(slow), "{}", line);
    }
}

#[test]
fn lines_split_anywhere_are_joined() {
    let whole = b"data: {\"a\":1}\n\n: keep-alive\n\ndata:[DONE]\r\n\r\n";
    let want = vec!["{\"a\":1}".to_string(), "[DONE]".to_string()];
    assert_eq!(payloads(&[whole]), want);
    for cut in 1..whole.len() {
        let (a, b) = whole.split_at(cut);
        assert_eq!(payloads(&[a, b]), want, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = whole.chunks(1).collect();
    assert_eq!(payloads(&bytes), want);
}

#[test]
fn an_error_field_or_an_error_event_is_an_error_not_data() {
    // llama-server before #16109: `error:` as a field of its own.
    let old_llama = b"data: {\"choices\":[]}\n\nerror: {\"code\":500,\"message\":\"boom\"}\n\n";
    assert_eq!(
        payloads(&[old_llama]),
        vec![
            "{\"choices\":[]}".to_string(),
            "ERROR {\"code\":500,\"message\":\"boom\"}".to_string()
        ]
    );
    let named =
        b"event: error\ndata: {\"message\":\"x\"}\n\nevent: error\n\nevent: ping\ndata: {}\n\n";
    assert_eq!(
        payloads(&[named]),
        vec![
            "ERROR {\"message\":\"x\"}".to_string(),
            "ERROR ".to_string(),
            "{}".to_string()
        ]
    );
    for cut in 1..named.len() {
        let (a, b) = named.split_at(cut);
        assert_eq!(payloads(&[a, b]), payloads(&[named]), "cut at {cut}");
    }
}

#[test]
fn a_tool_call_delta_carries_answer_tokens() {
    let call = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}"#;
    let args = r#"{"choices":[{"delta":{"content":null,"tool_calls":[{"index":0,"function":{"arguments":"{\"x\": 1}"}}]}}]}"#;
    for payload in [call, args] {
        let want = Event {
            tool_calls: true,
            ..Event::default()
        };
        assert_eq!(classify(payload.as_bytes()).unwrap(), want, "{payload}");
        assert_eq!(classify_serde(payload.as_bytes()).unwrap(), want);
        assert!(want.has_content() && want.has_answer());
    }
    let empty = r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#;
    assert_eq!(classify(empty.as_bytes()).unwrap(), Event::default());
    assert_eq!(classify_serde(empty.as_bytes()).unwrap(), Event::default());
}

#[test]
fn events_are_classified() {
    let cases: &[(&str, Event)] = &[
        (
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            Event::default(),
        ),
        (
            r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#,
            Event::default(),
        ),
        (
            r#"{"choices":[{"delta":{"content":"hi\n\"x\""},"finish_reason":null}]}"#,
            Event {
                content: true,
                ..Event::default()
            },
        ),
        (
            r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#,
            Event {
                reasoning: true,
                ..Event::default()
            },
        ),
        (
            r#"{"choices":[{"delta":{"reasoning":"hmm","content":null}}]}"#,
            Event {
                reasoning: true,
                ..Event::default()
            },
        ),
        (
            r#"{"choices":[{"text":"abc","index":0}],"usage":null}"#,
            Event {
                content: true,
                ..Event::default()
            },
        ),
        (
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}"#,
            Event {
                completion_tokens: Some(34),
                prompt_tokens: Some(12),
                ..Event::default()
            },
        ),
        (
            r#"{"choices":[],"usage":{"prompt_tokens":600,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":512}}}"#,
            Event {
                completion_tokens: Some(4),
                prompt_tokens: Some(600),
                cached_tokens: Some(512),
                ..Event::default()
            },
        ),
        (
            r#"{"choices":[{"text":"a"},{"text":""}],"usage":{"completion_tokens":3}}"#,
            Event {
                content: true,
                completion_tokens: Some(3),
                ..Event::default()
            },
        ),
        (
            r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#,
            Event {
                finished: true,
                ..Event::default()
            },
        ),
        (
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":null}"#,
            Event {
                finished: true,
                ..Event::default()
            },
        ),
        (
            r#"{"error":{"message":"boom","code":500}}"#,
            Event {
                error: true,
                ..Event::default()
            },
        ),
        (
            "[DONE]",
            Event {
                done: true,
                ..Event::default()
            },
        ),
    ];
    for (payload, want) in cases {
        assert_eq!(classify(payload.as_bytes()).unwrap(), *want, "{payload}");
        if *payload != "[DONE]" {
            assert_eq!(
                classify_serde(payload.as_bytes()).unwrap(),
                *want,
                "{payload}"
            );
        }
    }
    for bad in [
        "{not json",
        "{\"choices\": [oops",
        "{\"choices\":[]",
        "{} x",
        "",
        "{\"a\":tru}",
    ] {
        assert!(classify(bad.as_bytes()).is_err(), "{bad}");
    }
}

#[test]
fn reply_text_is_the_content_without_reasoning() {
    let mut out = String::new();
    for p in [
        r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
        r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#,
        r#"{"choices":[{"delta":{"content":" Hello \"you\""}}]}"#,
        r#"{"choices":[{"index":0,"text":" there\n"}]}"#,
        r#"{"choices":[],"usage":{"completion_tokens":3}}"#,
        "{not json",
    ] {
        append_reply(p.as_bytes(), &mut out);
    }
    assert_eq!(out, " Hello \"you\" there\n");
}

/// A string cut right after its backslash (`{"text":"\`) stepped past the payload's end.
#[test]
fn a_payload_cut_after_a_backslash_is_malformed_not_a_panic() {
    for p in [r#"{"choices":[{"text":"\"#, r#"{"a":"\"#, r#"{"a":"x\"#] {
        assert!(classify(p.as_bytes()).is_err(), "{p}");
    }
}

proptest::proptest! {
    /// The scanner's search for a string's end finds what memchr2 finds, at any length and
    /// any position (the register search's words, its tail, and memchr2 past them).
    #[test]
    fn the_string_end_search_agrees_with_memchr2(
        bytes in proptest::collection::vec(proptest::prop_oneof![
            proptest::strategy::Just(b'"'),
            proptest::strategy::Just(b'\\'),
            proptest::strategy::Just(0x80u8),
            proptest::arbitrary::any::<u8>()
        ], 0..200),
        skip in 0usize..200,
    ) {
        // Mostly strings without a hit for a while: drop the hits in the first `skip` bytes.
        let b: Vec<u8> = bytes
            .iter()
            .enumerate()
            .map(|(i, &c)| if i < skip && (c == b'"' || c == b'\\') { b'x' } else { c })
            .collect();
        proptest::prop_assert_eq!(
            scan::quote_or_backslash(&b),
            memchr::memchr2(b'"', b'\\', &b)
        );
    }
}
