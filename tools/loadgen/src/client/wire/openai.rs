//! OpenAI's completions and chat APIs, as vLLM, SGLang, llama-server and TensorRT-LLM serve
//! them: `prompt` or `messages`, `max_tokens`, and `data:` chunks read by the SSE scanner
//! (`sse.rs`), ending with `[DONE]`.

use super::{Answer, Form, PromptText, Wire, as_text, json_string, put_messages};
use crate::client::sse::{self, ChunkReader, Classified};
use serde_json::{Value, json};

pub(super) struct Completions;
pub(super) struct Chat;

impl Wire for Completions {
    fn name(&self) -> &'static str {
        "completions"
    }

    fn path(&self) -> &'static str {
        "/v1/completions"
    }

    fn max_tokens_key(&self) -> Option<&'static str> {
        Some("max_tokens")
    }

    fn stream_options(&self) -> bool {
        true
    }

    fn form(&self) -> Form {
        Form::Text
    }

    fn put_prompt(&self, out: &mut Vec<u8>, prompt: &PromptText, _: &[String]) {
        out.extend_from_slice(b"\"prompt\":");
        json_string(out, &as_text(prompt));
    }

    fn event<'a>(
        &self,
        openai: &mut ChunkReader,
        payload: &'a [u8],
    ) -> Result<Classified<'a>, String> {
        openai.read(payload)
    }

    fn answer(&self, v: &Value, reply: Option<&mut String>) -> Result<Answer, String> {
        answer(v, reply)
    }
}

impl Wire for Chat {
    fn name(&self) -> &'static str {
        "chat"
    }

    fn path(&self) -> &'static str {
        "/v1/chat/completions"
    }

    fn max_tokens_key(&self) -> Option<&'static str> {
        Some("max_tokens")
    }

    fn stream_options(&self) -> bool {
        true
    }

    fn form(&self) -> Form {
        Form::Messages
    }

    fn put_prompt(&self, out: &mut Vec<u8>, prompt: &PromptText, images: &[String]) {
        out.extend_from_slice(b"\"messages\":");
        if images.is_empty() {
            return put_messages(out, prompt);
        }
        // The images follow the last message's text, as `image_url` parts.
        let mut messages = match prompt {
            PromptText::Text(t) => json!([{"role": "user", "content": t}]),
            PromptText::Messages(m) => m.clone(),
        };
        if let Some(last) = messages.as_array_mut().and_then(|l| l.last_mut()) {
            let mut parts = match last["content"].take() {
                Value::String(t) => vec![json!({"type": "text", "text": t})],
                Value::Array(parts) => parts,
                _ => Vec::new(),
            };
            parts.extend(
                images
                    .iter()
                    .map(|url| json!({"type": "image_url", "image_url": {"url": url}})),
            );
            last["content"] = Value::Array(parts);
        }
        let _ = serde_json::to_writer(out, &messages);
    }

    fn event<'a>(
        &self,
        openai: &mut ChunkReader,
        payload: &'a [u8],
    ) -> Result<Classified<'a>, String> {
        openai.read(payload)
    }

    fn answer(&self, v: &Value, reply: Option<&mut String>) -> Result<Answer, String> {
        answer(v, reply)
    }
}

/// A whole completions or chat answer: its `usage` by the rule a stream's usage chunk is read
/// by (counts that are not token counts make it malformed), and the first choice's
/// `message.content` (chat) or `text` (completions), as the stream's content would have given.
fn answer(v: &Value, reply: Option<&mut String>) -> Result<Answer, String> {
    let usage = sse::usage(&v["usage"]).map_err(|why| {
        format!(
            "malformed usage in answer ({why}): {}",
            servbench::jsonl::excerpt(&v["usage"].to_string(), 120)
        )
    })?;
    if let Some(reply) = reply {
        let choice = &v["choices"][0];
        let text = choice["message"]["content"].as_str();
        reply.push_str(text.or(choice["text"].as_str()).unwrap_or_default());
    }
    Ok(Answer {
        usage,
        inputs: None,
    })
}
