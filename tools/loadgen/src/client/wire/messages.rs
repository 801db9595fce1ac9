//! Anthropic's Messages API (`/v1/messages`), as Anthropic and vLLM serve it: `messages` (a
//! system message goes to the top-level `system`), `max_tokens`, and named events whose `data`
//! names its `type` too: text in `content_block_delta` (`delta.type` `text_delta`), reasoning
//! (`thinking_delta`), a tool call's input (`input_json_delta`); the prompt's tokens in
//! `message_start`'s `message.usage` (`input_tokens`, plus `cache_read_input_tokens` and
//! `cache_creation_input_tokens`, which Anthropic counts apart: the cache reads are the cached
//! tokens), the output's in `message_delta`'s `usage.output_tokens` (cumulative) beside its
//! `stop_reason`; `message_stop` ends the stream; `error` events are errors.

use super::{Answer, Form, PromptText, Wire, json_string, put_messages};
use crate::client::sse::{ChunkReader, Classified, Event, Reply};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;

pub(super) struct Messages;

impl Wire for Messages {
    fn name(&self) -> &'static str {
        "messages"
    }

    fn path(&self) -> &'static str {
        "/v1/messages"
    }

    fn max_tokens_key(&self) -> Option<&'static str> {
        Some("max_tokens")
    }

    fn form(&self) -> Form {
        Form::Messages
    }

    fn put_prompt(&self, out: &mut Vec<u8>, prompt: &PromptText, _: &[String]) {
        let list = match prompt {
            PromptText::Messages(Value::Array(list)) => list,
            _ => {
                out.extend_from_slice(b"\"messages\":");
                return put_messages(out, prompt);
            }
        };
        let is_system = |m: &&Value| m["role"] == "system";
        let system: Vec<&str> = list
            .iter()
            .filter(is_system)
            .filter_map(|m| m["content"].as_str())
            .collect();
        if !system.is_empty() {
            out.extend_from_slice(b"\"system\":");
            json_string(out, &system.join("\n\n"));
            out.push(b',');
        }
        out.extend_from_slice(b"\"messages\":");
        let rest: Vec<&Value> = list.iter().filter(|m| !is_system(m)).collect();
        let _ = serde_json::to_writer(out, &rest);
    }

    fn event<'a>(&self, _: &mut ChunkReader, payload: &'a [u8]) -> Result<Classified<'a>, String> {
        let ev: Ev = serde_json::from_slice(payload.trim_ascii()).map_err(|e| e.to_string())?;
        let mut event = Event::default();
        let mut reply = Reply::default();
        match ev.kind.as_ref() {
            "content_block_delta" => {
                let Some(d) = ev.delta else {
                    return Err("a content_block_delta event without its delta".into());
                };
                let given = |s: Option<Cow<'a, str>>, what: &str| {
                    s.ok_or_else(|| format!("a {what} without its text"))
                };
                match d.kind.as_deref() {
                    Some("text_delta") => {
                        let text = given(d.text, "text_delta")?;
                        event.content = !text.is_empty();
                        reply = Reply::decoded(text);
                    }
                    Some("thinking_delta") => {
                        event.reasoning = !given(d.thinking, "thinking_delta")?.is_empty();
                    }
                    Some("input_json_delta") => {
                        event.tool_calls = !given(d.partial_json, "input_json_delta")?.is_empty();
                    }
                    _ => {}
                }
            }
            "message_start" => {
                if let Some(u) = ev.message.and_then(|m| m.usage) {
                    read_prompt_usage(&mut event, &u);
                }
            }
            "message_delta" => {
                event.finished = ev.delta.is_some_and(|d| d.stop_reason.is_some());
                event.completion_tokens = ev.usage.and_then(|u| u.output_tokens);
            }
            "message_stop" => event.done = true,
            "error" => event.error = true,
            _ => {}
        }
        Ok(Classified { event, reply })
    }

    fn answer(&self, v: &Value, reply: Option<&mut String>) -> Result<Answer, String> {
        let mut usage = Event::default();
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            let u = Usage::deserialize(u).map_err(|e| {
                format!(
                    "malformed usage in answer ({e}): {}",
                    servbench::jsonl::excerpt(&u.to_string(), 120)
                )
            })?;
            read_prompt_usage(&mut usage, &u);
            usage.completion_tokens = u.output_tokens;
        }
        if let Some(reply) = reply {
            for block in v["content"].as_array().into_iter().flatten() {
                if block["type"] == "text" {
                    reply.push_str(block["text"].as_str().unwrap_or_default());
                }
            }
        }
        Ok(Answer {
            usage,
            inputs: None,
        })
    }
}

/// The prompt's tokens: Anthropic counts the cache's reads and writes apart from `input_tokens`.
fn read_prompt_usage(event: &mut Event, u: &Usage) {
    let cached = u.cache_read_input_tokens;
    event.prompt_tokens = u.input_tokens.map(|n| {
        n.saturating_add(cached.unwrap_or(0))
            .saturating_add(u.cache_creation_input_tokens.unwrap_or(0))
    });
    event.cached_tokens = cached;
}

#[derive(Deserialize)]
struct Ev<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    message: Option<Message>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default)]
    cache_read_input_tokens: Option<u32>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u32>,
}
