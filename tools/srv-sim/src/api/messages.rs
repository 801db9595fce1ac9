//! `/v1/messages`, Anthropic's Messages API as vLLM serves it: `messages` (content a string or
//! `text` blocks) with an optional top-level `system`, `max_tokens`, and named events:
//! `message_start` (the message, its usage's `input_tokens`), `content_block_start`, one
//! `content_block_delta` (`text_delta`) per chunk, `content_block_stop`, `message_delta`
//! (`stop_reason`, the usage's `output_tokens`), `message_stop`.

use super::{
    ApiError, Bytes, Formatter, Limits, Prompt, Wire, as_u32, field, text_prompt, type_name,
};
use crate::progress::Progress;
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

pub(super) struct Messages;

impl Wire for Messages {
    fn path(&self) -> &'static str {
        "/v1/messages"
    }

    fn prompt(&self, obj: &Map<String, Value>, _: &Limits) -> Result<Prompt, ApiError> {
        let mut text = match field(obj, "system") {
            None => String::new(),
            Some(Value::String(s)) => format!("{s}\n"),
            Some(Value::Array(blocks)) => {
                super::messages_text(&json!([{"role": "system", "content": blocks}]))?
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "'system' must be a string or a list of text blocks, got {}",
                    type_name(other)
                )));
            }
        };
        match field(obj, "messages") {
            Some(m) => text.push_str(&super::messages_text(m)?),
            None => return Err(ApiError::bad_request("'messages' is required")),
        }
        Ok(text_prompt(&text, 0xA7C1))
    }

    fn max_tokens(&self, obj: &Map<String, Value>) -> Result<Option<u32>, ApiError> {
        as_u32(obj, "max_tokens")
    }

    fn id(&self, n: u64) -> String {
        format!("msg_sim{n:016x}")
    }

    fn trtllm_id(&self, n: u64) -> String {
        format!("msg-{n}")
    }

    fn head(&self, _id: &str, _created: u64, _model_json: &str) -> String {
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"".to_string()
    }

    fn start(&self, f: &Formatter, out: &mut Vec<u8>) {
        let message = message(f, json!([]), Value::Null, 0);
        event(out, "message_start", &format!(",\"message\":{message}"));
        event(
            out,
            "content_block_start",
            ",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}",
        );
    }

    fn token(&self, f: &Formatter, out: &mut Vec<u8>, text: &[&str], _last: bool, _generated: u32) {
        out.extend_from_slice(f.head.as_bytes());
        for t in text {
            out.extend_from_slice(t.as_bytes());
        }
        out.extend_from_slice(b"\"}}\n\n");
    }

    fn finish(&self, _f: &Formatter, out: &mut Vec<u8>, completion: u32, _progress: &Progress) {
        event(out, "content_block_stop", ",\"index\":0");
        let delta = format!(
            ",\"delta\":{{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{completion}}}"
        );
        event(out, "message_delta", &delta);
        event(out, "message_stop", "");
    }

    fn whole(&self, f: &Formatter, text: &str, completion: u32) -> Value {
        let content = json!([{"type": "text", "text": text}]);
        message(f, content, json!("max_tokens"), completion)
    }
}

/// One event: `event: KIND`, then its data with `rest` (`,"key":value...`) after the type.
fn event(out: &mut Vec<u8>, kind: &str, rest: &str) {
    let _ = write!(
        Bytes(out),
        "event: {kind}\ndata: {{\"type\":\"{kind}\"{rest}}}\n\n"
    );
}

fn message(f: &Formatter, content: Value, stop_reason: Value, completion: u32) -> Value {
    let mut usage = json!({"input_tokens": f.prompt_tokens, "output_tokens": completion});
    if let Some(c) = f.cached_tokens {
        usage["cache_read_input_tokens"] = json!(c);
    }
    json!({"id": f.id, "type": "message", "role": "assistant", "model": f.model(),
           "content": content, "stop_reason": stop_reason, "stop_sequence": null, "usage": usage})
}
