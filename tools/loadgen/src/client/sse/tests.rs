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
        let fast = scan::chunk(line.as_bytes(), None).map(|c| c.0);
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

/// The scalars a replayed chunk may carry where its shape had others: every kind, the empty
/// and escaped strings, numbers the counts refuse, and things that are not scalars or not JSON.
const SCALARS: &[&str] = &[
    r#""x""#,
    r#""""#,
    r#""a\"b""#,
    r#""\\""#,
    r#""\u0041\n""#,
    "null",
    "true",
    "false",
    "0",
    "12",
    "-3",
    "1.5e3",
    "4294967296",
    "05",
    "{}",
    "[]",
    "[1]",
    r#"{"a":1}"#,
    "nul",
    r#""cut"#,
    "",
];

/// The usual value at each place of [`templated`] (indices into [`SCALARS`]).
const USUAL: [usize; 14] = [0, 9, 8, 0, 2, 5, 15, 5, 4, 9, 9, 8, 5, 5];

/// A chunk with a scalar at each of the places the walk gives a meaning (and some it skips):
/// the usual ones with `edits` (place, scalar) made.
fn templated(edits: &[(usize, usize)], sp: &str) -> String {
    let mut v = USUAL;
    for &(at, k) in edits {
        v[at % v.len()] = k % SCALARS.len();
    }
    let s = |k: usize| SCALARS[v[k]];
    format!(
        r#"{{"id":{},"created":{},{sp}"choices":[{{"index":{},"text":{},"delta":{{"content":{},"reasoning_content":{},"tool_calls":{}}},"finish_reason":{}}},{{"text":{}}}],"usage":{{"prompt_tokens":{},"completion_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}}}}},"error":{},"metrics":{}}}"#,
        s(0),
        s(1),
        s(2),
        s(3),
        s(4),
        s(5),
        s(6),
        s(7),
        s(8),
        s(9),
        s(10),
        s(11),
        s(12),
        s(13),
    )
}

type Edits = Vec<(usize, usize)>;

fn edits(most: usize) -> impl proptest::strategy::Strategy<Value = Edits> {
    proptest::collection::vec((0usize..14, 0usize..SCALARS.len()), 0..=most)
}

proptest::proptest! {
    /// A chunk replayed against a shape learned from another chunk of the same template gets
    /// exactly what the walk gives it (and serde where the walk refuses it), whatever its
    /// scalars: a replay never accepts what the walk refuses nor reads a value otherwise.
    #[test]
    fn a_replayed_chunk_reads_as_the_walk_reads_it(
        first in edits(2),
        next in proptest::collection::vec(edits(4), 1..6),
        sp in "[ ]{0,1}",
        cut in proptest::option::of(0usize..400),
    ) {
        let mut shapes = shape::Shapes::default();
        let mut reader = ChunkReader::default();
        let learn = templated(&first, "");
        proptest::prop_assert_eq!(shapes.read(learn.as_bytes()), scan::chunk(learn.as_bytes(), None));
        proptest::prop_assert_eq!(reader.read(learn.as_bytes()), read_walked(&learn));
        for e in &next {
            let mut line = templated(e, &sp);
            if let Some(cut) = cut {
                line.truncate(cut.min(line.len()));
            }
            let walked = scan::chunk(line.as_bytes(), None);
            proptest::prop_assert_eq!(shapes.read(line.as_bytes()), walked, "{}", line);
            proptest::prop_assert_eq!(reader.read(line.as_bytes()), read_walked(&line), "{}", line);
        }
    }
}

#[test]
fn the_usual_template_is_a_chunk_and_replays() {
    let line = templated(&[], "");
    let (ev, reply) = scan::chunk(line.as_bytes(), None).expect("a chunk");
    assert!(ev.content && !ev.reasoning && !ev.finished && !ev.error && !ev.server_timing);
    assert_eq!(ev.completion_tokens, Some(12));
    assert_eq!(reply.parts, [Some(&br#""x""#[..]), Some(&br#""a\"b""#[..])]);
    // Learned once, then replayed: the same answer either way, edited values read anew.
    let edited = templated(&[(3, 1), (10, 8), (7, 0)], "");
    let mut shapes = shape::Shapes::default();
    for l in [&line, &line, &edited] {
        assert_eq!(shapes.read(l.as_bytes()), scan::chunk(l.as_bytes(), None));
    }
    assert_eq!(
        shapes.learned(),
        1,
        "the second and the edited chunk were replays"
    );
    let (ev, _) = shapes.read(edited.as_bytes()).expect("a chunk");
    assert!(ev.content && ev.finished && ev.completion_tokens == Some(0));
}

/// What `read` gives without any learned shape (the walk, then serde).
fn read_walked(line: &str) -> Result<Classified<'_>, String> {
    match scan::chunk(line.trim().as_bytes(), None) {
        Some((event, reply)) => Ok(Classified { event, reply }),
        None => classify_serde(line.trim().as_bytes()).map(|event| Classified {
            event,
            reply: Reply::default(),
        }),
    }
}

#[test]
fn the_shapes_of_each_engines_stream_replay_to_the_walks_answer() {
    let stream = [
        r#"{"id":"cmpl-1","object":"text_completion","created":17,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":3,"total_tokens":4,"completion_tokens":1}}"#,
        r#"{"id":"cmpl-2","object":"text_completion","created":18,"model":"m","choices":[{"index":0,"text":" \"b\"\n","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}"#,
        r#"{"id":"cmpl-2","object":"text_completion","created":18,"model":"m","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":7}],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}"#,
        r#"{"id":"cmpl-2","object":"text_completion","created":18,"model":"m","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":-2}}"#,
        r#"{"id":"cmpl-2","object":"text_completion","created":18,"model":"m","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}} x"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":null},"finish_reason":null}],"usage":null}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"role":null,"content":" hi","tool_calls":null},"finish_reason":null}],"usage":null}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"role":null,"content":" hi","tool_calls":[{"index":0}]},"finish_reason":null}],"usage":null}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"role":null,"content":" hi","tool_calls":null},"finish_reason":null}],"usage":{"completion_tokens":5}}"#,
        r#"{"choices":[],"usage":{"completion_tokens":4,"prompt_tokens":34,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"prompt_n":18}}"#,
        r#"{"choices":[],"usage":{"completion_tokens":4,"prompt_tokens":34,"prompt_tokens_details":{"cached_tokens":9}},"timings":null}"#,
        r#"{"error":"boom"}"#,
        r#"{"error":null}"#,
    ];
    let mut shapes = shape::Shapes::default();
    for line in &stream[..3] {
        assert_eq!(
            shapes.read(line.as_bytes()),
            scan::chunk(line.as_bytes(), None)
        );
    }
    assert_eq!(
        shapes.learned(),
        1,
        "the second and the finishing chunk were replays"
    );
    for _ in 0..2 {
        for line in stream {
            let walked = scan::chunk(line.as_bytes(), None);
            assert_eq!(shapes.read(line.as_bytes()), walked, "{line}");
        }
    }
    let mut out = String::new();
    for line in &stream[..3] {
        append_reply(line.as_bytes(), &mut out);
    }
    assert_eq!(out, " a \"b\"\n");
}

/// The walk recursed once per bracket without a bound: a hostile line of brackets overflowed
/// the stack instead of being a malformed chunk.
#[test]
fn a_deeply_nested_chunk_is_malformed_not_a_stack_overflow() {
    let deep = format!(r#"{{"logprobs":{}"#, "[".repeat(1 << 20));
    assert!(classify(deep.as_bytes()).is_err());
    let nested = format!(r#"{{"a":{}1{}}}"#, "[".repeat(100), "]".repeat(100));
    assert_eq!(classify(nested.as_bytes()), Ok(Event::default()));
}
