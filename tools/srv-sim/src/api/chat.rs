//! `/v1/chat/completions`: `messages`, `max_completion_tokens` or `max_tokens`, and
//! `chat.completion.chunk` events (the assistant's role first, then `delta.content`).

use super::{ApiError, Formatter, Limits, Prompt, Wire, as_u32, field, type_name};
use crate::progress::Progress;
use serde_json::{Map, Value, json};

pub(super) struct Chat;

impl Wire for Chat {
    fn path(&self) -> &'static str {
        "/v1/chat/completions"
    }

    fn prompt(&self, obj: &Map<String, Value>, limits: &Limits) -> Result<Prompt, ApiError> {
        match field(obj, "messages") {
            Some(m) => messages_of(m, limits.image_token_px),
            None => Err(ApiError::bad_request("'messages' is required")),
        }
    }

    fn max_tokens(&self, obj: &Map<String, Value>) -> Result<Option<u32>, ApiError> {
        match as_u32(obj, "max_completion_tokens")? {
            Some(n) => Ok(Some(n)),
            None => as_u32(obj, "max_tokens"),
        }
    }

    fn id(&self, n: u64) -> String {
        format!("chatcmpl-sim{n:016x}")
    }

    fn trtllm_id(&self, n: u64) -> String {
        format!("chatcmpl-{n}")
    }

    fn head(&self, id: &str, created: u64, model_json: &str) -> String {
        super::openai_head(id, "chat.completion.chunk", created, model_json)
    }

    /// The assistant role and empty content.
    fn start(&self, f: &Formatter, out: &mut Vec<u8>) {
        out.extend_from_slice(f.head.as_bytes());
        out.extend_from_slice(
            br#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"stop_reason":null}]"#,
        );
        if f.continuous_usage {
            out.push(b',');
            f.usage(out, 0);
        }
        out.extend_from_slice(b"}\n\n");
    }

    fn token(&self, f: &Formatter, out: &mut Vec<u8>, text: &[&str], last: bool, generated: u32) {
        let choice = br#"{"index":0,"delta":{"content":""#;
        super::openai_chunk(f, out, choice, text, b"\"}", last, generated);
    }

    fn finish(&self, f: &Formatter, out: &mut Vec<u8>, completion: u32, progress: &Progress) {
        super::openai_finish(f, out, completion, progress);
    }

    fn whole(&self, f: &Formatter, text: &str, completion: u32) -> Value {
        json!({
            "id": f.id, "object": "chat.completion", "created": f.created, "model": f.model(),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                         "logprobs": null, "finish_reason": "length", "stop_reason": null}],
            "usage": f.usage_json(completion),
        })
    }
}

/// The text of chat `messages`: every message's text content, joined by newlines (roles and
/// templates add no tokens).
pub fn messages_text(messages: &Value) -> Result<String, ApiError> {
    messages_content(messages, None).map(|(text, _)| text)
}

/// The text of chat `messages` and the prompt tokens of their images, counted by the card's
/// `image_token_px` (`None`: images are refused).
pub fn messages_content(messages: &Value, px: Option<u32>) -> Result<(String, u32), ApiError> {
    let Some(list) = messages.as_array().filter(|l| !l.is_empty()) else {
        return Err(ApiError::bad_request(
            "'messages' must be a non-empty list of {\"role\", \"content\"} objects",
        ));
    };
    let mut text = String::new();
    let mut images = 0u32;
    for (i, m) in list.iter().enumerate() {
        let Some(obj) = m.as_object() else {
            return Err(ApiError::bad_request(format!(
                "messages[{i}] must be an object"
            )));
        };
        if !obj.get("role").is_some_and(Value::is_string) {
            return Err(ApiError::bad_request(format!(
                "messages[{i}].role must be a string"
            )));
        }
        match obj.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                text.push_str(s);
                text.push('\n');
            }
            Some(Value::Array(parts)) => {
                for (j, part) in parts.iter().enumerate() {
                    match (
                        part.get("type").and_then(Value::as_str),
                        part.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) => {
                            text.push_str(t);
                            text.push('\n');
                        }
                        (Some("image_url"), _) => {
                            let at = format!("messages[{i}].content[{j}]");
                            let n = super::image::tokens(part, px, &at)?;
                            images = images.saturating_add(n);
                        }
                        _ => {
                            return Err(ApiError::bad_request(format!(
                                "messages[{i}].content[{j}]: only text and image_url parts are supported by srv-sim"
                            )));
                        }
                    }
                }
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "messages[{i}].content must be a string or a list of text parts, got {}",
                    type_name(other)
                )));
            }
        }
    }
    Ok((text, images))
}

/// Chat `messages` as a prompt: their text's tokens and their images'.
pub fn messages_of(messages: &Value, px: Option<u32>) -> Result<Prompt, ApiError> {
    let (text, images) = messages_content(messages, px)?;
    let mut prompt = super::text_prompt(&text, 0xC4A7);
    prompt.tokens = prompt.tokens.saturating_add(images);
    Ok(prompt)
}
