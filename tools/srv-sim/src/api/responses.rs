//! `/v1/responses`, OpenAI's Responses API as vLLM serves it: `input` (a string, or a list of
//! `{role, content}` items whose content is a string or `input_text` parts),
//! `max_output_tokens`, and typed events, each `event: TYPE` with `data: {"type": TYPE,
//! "sequence_number": N, ...}`: `response.created`, `response.in_progress`,
//! `response.output_item.added`, `response.content_part.added`, one `response.output_text.delta`
//! per chunk, then `response.completed` with the usage (`input_tokens`, `output_tokens`,
//! `input_tokens_details.cached_tokens`). No `[DONE]`: the stream ends after the last event.

use super::{
    ApiError, Bytes, Formatter, Limits, Prompt, Wire, as_u32, field, text_prompt, type_name,
};
use crate::progress::Progress;
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

pub(super) struct Responses;

impl Wire for Responses {
    fn path(&self) -> &'static str {
        "/v1/responses"
    }

    fn prompt(&self, obj: &Map<String, Value>, _: &Limits) -> Result<Prompt, ApiError> {
        match field(obj, "input") {
            Some(input) => Ok(text_prompt(&input_text(input)?, 0x9E5F)),
            None => Err(ApiError::bad_request("'input' is required")),
        }
    }

    fn max_tokens(&self, obj: &Map<String, Value>) -> Result<Option<u32>, ApiError> {
        as_u32(obj, "max_output_tokens")
    }

    fn id(&self, n: u64) -> String {
        format!("resp_sim{n:016x}")
    }

    fn trtllm_id(&self, n: u64) -> String {
        format!("resp-{n}")
    }

    /// The part every text delta repeats after its sequence number.
    fn head(&self, id: &str, _created: u64, _model_json: &str) -> String {
        format!(",\"item_id\":\"msg_{id}\",\"output_index\":0,\"content_index\":0,\"delta\":\"")
    }

    fn start(&self, f: &Formatter, out: &mut Vec<u8>) {
        let response = response(f, "in_progress", json!([]), Value::Null);
        for kind in ["response.created", "response.in_progress"] {
            event(f, out, kind, &format!(",\"response\":{response}"));
        }
        let item = json!({"id": format!("msg_{}", f.id), "type": "message", "status": "in_progress",
                          "role": "assistant", "content": []});
        event(
            f,
            out,
            "response.output_item.added",
            &format!(",\"output_index\":0,\"item\":{item}"),
        );
        event(
            f,
            out,
            "response.content_part.added",
            &format!(
                ",\"item_id\":\"msg_{}\",\"output_index\":0,\"content_index\":0,\"part\":{{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}",
                f.id
            ),
        );
    }

    fn token(&self, f: &Formatter, out: &mut Vec<u8>, text: &[&str], _last: bool, _generated: u32) {
        let seq = f.next_seq();
        let _ = write!(
            Bytes(out),
            "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{seq}"
        );
        out.extend_from_slice(f.head.as_bytes());
        for t in text {
            out.extend_from_slice(t.as_bytes());
        }
        out.extend_from_slice(b"\",\"logprobs\":[]}\n\n");
    }

    fn finish(&self, f: &Formatter, out: &mut Vec<u8>, completion: u32, _progress: &Progress) {
        let response = response(f, "completed", json!([]), usage(f, completion));
        event(
            f,
            out,
            "response.completed",
            &format!(",\"response\":{response}"),
        );
    }

    fn whole(&self, f: &Formatter, text: &str, completion: u32) -> Value {
        let output = json!([{"id": format!("msg_{}", f.id), "type": "message", "status": "completed",
                             "role": "assistant",
                             "content": [{"type": "output_text", "text": text, "annotations": []}]}]);
        response(f, "completed", output, usage(f, completion))
    }
}

/// One event: `event: KIND`, then its data with `rest` (`,"key":value...`) after the number.
fn event(f: &Formatter, out: &mut Vec<u8>, kind: &str, rest: &str) {
    let seq = f.next_seq();
    let _ = write!(
        Bytes(out),
        "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{seq}{rest}}}\n\n"
    );
}

fn response(f: &Formatter, status: &str, output: Value, usage: Value) -> Value {
    json!({"id": f.id, "object": "response", "created_at": f.created, "model": f.model(),
           "status": status, "output": output, "usage": usage})
}

fn usage(f: &Formatter, completion: u32) -> Value {
    json!({
        "input_tokens": f.prompt_tokens,
        "input_tokens_details": {"cached_tokens": f.cached_tokens.unwrap_or(0)},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u64::from(f.prompt_tokens) + u64::from(completion),
    })
}

/// The text of `input`: the string, or every item's text content joined by newlines.
fn input_text(input: &Value) -> Result<String, ApiError> {
    let items = match input {
        Value::String(s) => return Ok(s.clone()),
        Value::Array(items) if !items.is_empty() => items,
        other => {
            return Err(ApiError::bad_request(format!(
                "'input' must be a string or a non-empty list of items, got {}",
                type_name(other)
            )));
        }
    };
    let mut text = String::new();
    for (i, item) in items.iter().enumerate() {
        match item.get("content") {
            Some(Value::String(s)) => text.push_str(s),
            Some(Value::Array(parts)) => {
                for (j, part) in parts.iter().enumerate() {
                    match (
                        part.get("type").and_then(Value::as_str),
                        part.get("text").and_then(Value::as_str),
                    ) {
                        (Some("input_text" | "output_text" | "text"), Some(t)) => text.push_str(t),
                        _ => {
                            return Err(ApiError::bad_request(format!(
                                "input[{i}].content[{j}]: only input_text parts are supported by srv-sim"
                            )));
                        }
                    }
                }
            }
            _ => {
                return Err(ApiError::bad_request(format!(
                    "input[{i}] must be a {{\"role\", \"content\"}} item with text content"
                )));
            }
        }
        text.push('\n');
    }
    Ok(text)
}
