//! Each API's body and event reader against the wire format its docs give.

use super::*;
use crate::client::body::{BodySpec, Template};

fn body(api: Api, prompt: PromptText) -> Value {
    let (t, warnings) = Template::new(&BodySpec {
        api,
        model: "m".into(),
        adapters: Vec::new(),
        stream: api.generates(),
        force_length: true,
        usage_per_chunk: true,
        temperature: None,
        top_p: None,
        extra: None,
        response_format: None,
    });
    assert!(warnings.is_empty(), "{warnings:?}");
    serde_json::from_slice(&t.build(0, &prompt, 8)).unwrap()
}

#[test]
fn each_api_puts_the_prompt_and_the_length_where_its_docs_say() {
    let text = || PromptText::Text("hi".into());
    let chat =
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]);
    let v = body(Api::Responses, text());
    assert_eq!(
        (&v["input"], &v["max_output_tokens"]),
        (&json!("hi"), &json!(8))
    );
    assert!(v.get("stream_options").is_none() && v.get("max_tokens").is_none());
    assert_eq!(v["stream"], true);
    let v = body(Api::Responses, PromptText::Messages(chat.clone()));
    assert_eq!(v["input"], chat);
    let v = body(Api::Messages, PromptText::Messages(chat.clone()));
    assert_eq!(v["system"], "be brief");
    assert_eq!(v["messages"], json!([{"role": "user", "content": "hi"}]));
    assert_eq!((&v["max_tokens"], &v["stream"]), (&json!(8), &json!(true)));
    assert!(v.get("stream_options").is_none());
    let v = body(Api::Embeddings, text());
    assert_eq!(v, json!({"model": "m", "input": "hi"}));
    let v = body(Api::Completions, PromptText::Messages(chat));
    assert_eq!(v["prompt"], "be brief\n\nhi");
    assert_eq!(v["stream_options"]["include_usage"], true);
}

/// Reads a stream's payloads with `api`'s reader: the events, and the reply text.
fn read(api: Api, payloads: &[&str]) -> (Vec<Event>, String) {
    let mut openai = ChunkReader::default();
    let mut text = String::new();
    let events = payloads
        .iter()
        .map(|p| {
            let c = api.wire().event(&mut openai, p.as_bytes()).unwrap();
            c.reply.append_to(&mut text);
            c.event
        })
        .collect();
    (events, text)
}

#[test]
fn responses_events_give_text_reasoning_and_usage() {
    let (ev, text) = read(
        Api::Responses,
        &[
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"r","usage":null}}"#,
            r#"{"type":"response.reasoning_summary_text.delta","sequence_number":1,"delta":"hm"}"#,
            r#"{"type":"response.output_text.delta","sequence_number":2,"item_id":"i","output_index":0,"content_index":0,"delta":"Hel\"lo"}"#,
            r#"{"type":"response.output_text.delta","sequence_number":3,"delta":""}"#,
            r#"{"type":"response.function_call_arguments.delta","sequence_number":4,"delta":"{\"a\""}"#,
            r#"{"type":"response.completed","sequence_number":5,"response":{"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":4},"output_tokens":7,"total_tokens":19}}}"#,
        ],
    );
    assert_eq!(text, "Hel\"lo");
    assert_eq!(ev[0], Event::default());
    assert!(ev[1].reasoning && !ev[1].content);
    assert!(ev[2].content && ev[2].has_answer());
    assert!(!ev[3].has_content());
    assert!(ev[4].tool_calls);
    let end = ev[5];
    assert!(end.finished && !end.done);
    assert_eq!(
        (end.prompt_tokens, end.completion_tokens, end.cached_tokens),
        (Some(12), Some(7), Some(4))
    );
    let (ev, _) = read(
        Api::Responses,
        &[
            r#"{"type":"response.failed","response":{"error":{"message":"boom"}}}"#,
            r#"{"type":"error","message":"x"}"#,
        ],
    );
    assert!(ev[0].error && ev[1].error);
}

#[test]
fn messages_events_give_text_reasoning_and_the_counts() {
    let (ev, text) = read(
        Api::Messages,
        &[
            r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":10,"cache_read_input_tokens":20,"output_tokens":1}}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"so"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi \u00e9"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"x\""}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":9}}"#,
            r#"{"type":"message_stop"}"#,
        ],
    );
    assert_eq!(text, "Hi é");
    assert_eq!(
        (ev[0].prompt_tokens, ev[0].cached_tokens),
        (Some(30), Some(20))
    );
    assert_eq!(
        ev[0].completion_tokens, None,
        "message_start's output_tokens is not the count"
    );
    assert_eq!(ev[1], Event::default());
    assert!(ev[3].reasoning && ev[4].content && ev[5].tool_calls);
    assert!(ev[6].finished && ev[6].completion_tokens == Some(9));
    assert!(ev[7].done);
}

/// A bad event is one line saying why: a delta that is not text, a count that is not a count,
/// an event without its type.
#[test]
fn a_malformed_event_of_each_api_says_why() {
    for (api, bad, says) in [
        (
            Api::Responses,
            r#"{"type":"response.output_text.delta","delta":5}"#,
            "invalid type",
        ),
        (
            Api::Responses,
            r#"{"type":"response.output_text.delta"}"#,
            "without its delta",
        ),
        (
            Api::Responses,
            r#"{"sequence_number":1,"delta":"x"}"#,
            "missing field `type`",
        ),
        (
            Api::Responses,
            r#"{"type":"response.completed","response":{"usage":{"output_tokens":-3}}}"#,
            "invalid value",
        ),
        (
            Api::Messages,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta"}}"#,
            "without its text",
        ),
        (
            Api::Messages,
            r#"{"type":"message_delta","usage":{"output_tokens":1.5}}"#,
            "invalid type",
        ),
        (Api::Messages, "{not json", "key must be a string"),
    ] {
        let e = api
            .wire()
            .event(&mut ChunkReader::default(), bad.as_bytes())
            .unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn whole_answers_give_their_counts_and_text() {
    let mut reply = String::new();
    let a = Api::Responses
        .wire()
        .answer(
            &json!({"output": [{"type": "message", "content": [{"type": "output_text", "text": "a b"}]}],
                    "usage": {"input_tokens": 3, "output_tokens": 2}}),
            Some(&mut reply),
        )
        .unwrap();
    assert_eq!(
        (
            a.usage.prompt_tokens,
            a.usage.completion_tokens,
            reply.as_str()
        ),
        (Some(3), Some(2), "a b")
    );
    let a = Api::Messages
        .wire()
        .answer(
            &json!({"content": [{"type": "text", "text": "c"}], "usage": {"input_tokens": 3, "output_tokens": 1}}),
            None,
        )
        .unwrap();
    assert_eq!(
        (a.usage.prompt_tokens, a.usage.completion_tokens),
        (Some(3), Some(1))
    );
    let a = Api::Embeddings
        .wire()
        .answer(
            &json!({"data": [{"embedding": [0.5]}, {"embedding": [0.25]}], "usage": {"prompt_tokens": 9}}),
            None,
        )
        .unwrap();
    assert_eq!(
        (a.inputs, a.usage.prompt_tokens, a.usage.completion_tokens),
        (Some(2), Some(9), Some(0))
    );
    let e = Api::Embeddings
        .wire()
        .answer(&json!({"data": [], "usage": {"prompt_tokens": 9}}), None)
        .unwrap_err();
    assert!(e.contains("without its vectors"), "{e}");
}
