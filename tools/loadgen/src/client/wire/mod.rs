//! The APIs loadgen loads, each one file behind [`Wire`] and one line in [`Api::wire`]: where
//! its body keeps the prompt and the output length, how its stream's events read (content,
//! reasoning, usage, errors, the end) and where a whole answer keeps its counts and text.
//! TTFT, ITL and TPOT mean the same for every streaming API: the first and the gaps between
//! the events that carry answer (or reasoning) text.

use crate::client::sse::{ChunkReader, Classified, Event};
use serde_json::{Value, json};

mod embeddings;
mod messages;
mod openai;
mod responses;

/// Which API the load uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Api {
    /// POST /v1/completions with `prompt`.
    Completions,
    /// POST /v1/chat/completions with `messages`.
    Chat,
    /// POST /v1/responses (OpenAI's Responses API) with `input`: typed events.
    Responses,
    /// POST /v1/messages (Anthropic's Messages API) with `messages`: named events.
    Messages,
    /// POST /v1/embeddings with `input`: no stream, no output; latency and inputs/s.
    Embeddings,
}

impl Api {
    /// The one place an API meets its wire format.
    pub fn wire(self) -> &'static dyn Wire {
        match self {
            Api::Completions => &openai::Completions,
            Api::Chat => &openai::Chat,
            Api::Responses => &responses::Responses,
            Api::Messages => &messages::Messages,
            Api::Embeddings => &embeddings::Embeddings,
        }
    }

    pub fn path(self) -> &'static str {
        self.wire().path()
    }

    pub fn name(self) -> &'static str {
        self.wire().name()
    }

    /// The API generates tokens (embeddings do not: no output length, no stream).
    pub fn generates(self) -> bool {
        self.wire().max_tokens_key().is_some()
    }
}

/// How an API carries a prompt: one text, or a list of `{role, content}` messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Text,
    Messages,
}

/// One prompt as the request body will carry it.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptText {
    Text(String),
    Messages(Value),
}

/// What a whole (unstreamed) answer says.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// Its token counts, read by the rule a stream's usage is read by.
    pub usage: Event,
    /// Embeddings: the vectors it carried.
    pub inputs: Option<u32>,
}

/// One API's wire format.
pub trait Wire: Sync {
    /// `--api`'s name for it.
    fn name(&self) -> &'static str;
    /// The route, `/v1/...`.
    fn path(&self) -> &'static str;
    /// The body's output-length field (`None`: the API generates nothing).
    fn max_tokens_key(&self) -> Option<&'static str>;
    /// Usage in a stream is asked for with OpenAI's `stream_options` (and vLLM's
    /// `continuous_usage_stats`); other APIs always send it.
    fn stream_options(&self) -> bool {
        false
    }
    /// The prompt's form: a chat form is counted by `/tokenize` as messages.
    fn form(&self) -> Form;
    /// Appends the prompt's fields (`"prompt":...`), without a comma before or after, with
    /// `images` (PNG data URLs: chat only, the flags refuse them elsewhere).
    fn put_prompt(&self, out: &mut Vec<u8>, prompt: &PromptText, images: &[String]);
    /// Reads one `data:` payload of a stream (`openai`: the stream's chunk reader, which
    /// learns the shapes OpenAI chunks repeat); `Err` says why it is malformed.
    fn event<'a>(
        &self,
        openai: &mut ChunkReader,
        payload: &'a [u8],
    ) -> Result<Classified<'a>, String>;
    /// Reads a whole answer's counts, and its text into `reply` where given; `Err` is the
    /// record's message.
    fn answer(&self, v: &Value, reply: Option<&mut String>) -> Result<Answer, String>;
}

/// A JSON string literal of `s`.
pub fn json_string(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(out, s);
}

/// Chat messages as one text prompt: their text contents, blank-line separated.
pub fn joined(m: &Value) -> String {
    m.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.get("content").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The prompt as the text form of a body carries it.
fn as_text(prompt: &PromptText) -> std::borrow::Cow<'_, str> {
    match prompt {
        PromptText::Text(t) => t.into(),
        PromptText::Messages(m) => joined(m).into(),
    }
}

/// Appends `prompt` as a list of messages (a text is one user message).
fn put_messages(out: &mut Vec<u8>, prompt: &PromptText) {
    match prompt {
        PromptText::Text(t) => {
            out.extend_from_slice(b"[{\"role\":\"user\",\"content\":");
            json_string(out, t);
            out.extend_from_slice(b"}]");
        }
        PromptText::Messages(m) => {
            let _ = serde_json::to_writer(out, m);
        }
    }
}

/// Sets `prompt` or `messages` in a JSON body (`/tokenize`'s), by the form.
pub fn put_prompt(b: &mut Value, form: Form, prompt: &PromptText) {
    match (form, prompt) {
        (Form::Text, p) => b["prompt"] = json!(as_text(p)),
        (Form::Messages, PromptText::Messages(m)) => b["messages"] = m.clone(),
        (Form::Messages, PromptText::Text(t)) => {
            b["messages"] = json!([{"role": "user", "content": t}]);
        }
    }
}

#[cfg(test)]
mod tests;
