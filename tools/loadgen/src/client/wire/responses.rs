//! OpenAI's Responses API (`/v1/responses`), as OpenAI and vLLM serve it: `input` (the text, or
//! the messages as input items), `max_output_tokens`, and typed events whose `data` names its
//! `type`: text in `response.output_text.delta` (`delta`), reasoning in
//! `response.reasoning_text.delta` and `response.reasoning_summary_text.delta`, a tool call's
//! arguments in `response.function_call_arguments.delta`; the usage (`input_tokens`,
//! `output_tokens`, `input_tokens_details.cached_tokens`) in the `response` of
//! `response.completed` (or `response.incomplete`, its end when `max_output_tokens` ran out),
//! after which the stream ends (no `[DONE]`); `response.failed` and `error` are errors.

use super::{Answer, Form, PromptText, Wire, json_string, put_messages};
use crate::client::sse::{ChunkReader, Classified, Event, Reply};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;

pub(super) struct Responses;

impl Wire for Responses {
    fn name(&self) -> &'static str {
        "responses"
    }

    fn path(&self) -> &'static str {
        "/v1/responses"
    }

    fn max_tokens_key(&self) -> Option<&'static str> {
        Some("max_output_tokens")
    }

    fn form(&self) -> Form {
        Form::Messages
    }

    fn put_prompt(&self, out: &mut Vec<u8>, prompt: &PromptText, _: &[String]) {
        out.extend_from_slice(b"\"input\":");
        match prompt {
            PromptText::Text(t) => json_string(out, t),
            PromptText::Messages(_) => put_messages(out, prompt),
        }
    }

    fn event<'a>(&self, _: &mut ChunkReader, payload: &'a [u8]) -> Result<Classified<'a>, String> {
        let ev: Ev = serde_json::from_slice(payload.trim_ascii()).map_err(|e| e.to_string())?;
        let mut event = Event::default();
        let mut reply = Reply::default();
        let delta = |ev: &Ev<'a>| -> Result<Cow<'a, str>, String> {
            ev.delta
                .clone()
                .ok_or_else(|| format!("a {} event without its delta", ev.kind))
        };
        match ev.kind.as_ref() {
            "response.output_text.delta" | "response.refusal.delta" => {
                let text = delta(&ev)?;
                event.content = !text.is_empty();
                reply = Reply::decoded(text);
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                event.reasoning = !delta(&ev)?.is_empty();
            }
            "response.function_call_arguments.delta" => {
                event.tool_calls = !delta(&ev)?.is_empty();
            }
            "response.completed" | "response.incomplete" => {
                event.finished = true;
                let usage = ev.response.and_then(|r| r.usage);
                if let Some(u) = usage {
                    read_usage(&mut event, u);
                }
            }
            "response.failed" | "error" => event.error = true,
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
            read_usage(&mut usage, u);
        }
        if let Some(reply) = reply {
            for item in v["output"].as_array().into_iter().flatten() {
                for part in item["content"].as_array().into_iter().flatten() {
                    if part["type"] == "output_text" {
                        reply.push_str(part["text"].as_str().unwrap_or_default());
                    }
                }
            }
        }
        Ok(Answer {
            usage,
            inputs: None,
        })
    }
}

fn read_usage(event: &mut Event, u: Usage) {
    event.prompt_tokens = u.input_tokens;
    event.completion_tokens = u.output_tokens;
    event.cached_tokens = u.input_tokens_details.and_then(|d| d.cached_tokens);
}

#[derive(Deserialize)]
struct Ev<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    response: Option<Response>,
}

#[derive(Deserialize)]
struct Response {
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
    input_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<u32>,
}
