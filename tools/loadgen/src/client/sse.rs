//! Incremental server-sent-events parsing of streams (the events of every API), and the
//! reading of OpenAI-style chunks, without allocating per
//! token: bytes are scanned where they arrived (only a line split across two reads is copied),
//! and each `data:` payload is read by a [`ChunkReader`] that keeps only what the metrics need
//! (is there content, reasoning content, usage, an error) and where the content's text lies:
//! `sse/scan.rs` is the strict walk of a chunk's JSON, `sse/shape.rs` replays the shapes a
//! stream's chunks repeat without walking them again, serde reads what the walk refuses (and
//! words why it is malformed).

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use std::fmt;

/// Splits a byte stream into SSE fields, line by line.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The start of a line whose end has not arrived yet.
    partial: Vec<u8>,
    /// The event being read was named `event: error`.
    error_event: bool,
    /// ... and has had a `data:` line.
    error_data: bool,
}

/// One field of the stream that matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field<'a> {
    /// A `data:` payload.
    Data(&'a [u8]),
    /// An error in the stream's own framing: an `error:` field (llama-server before
    /// ggml-org/llama.cpp#16109) or the data of an `event: error` (empty when it had none).
    Error(&'a [u8]),
}

impl SseParser {
    /// Feeds the next bytes; calls `on_field` with each complete `data:` payload and each error
    /// field (comment lines, `id:`/`retry:` lines, other event names and blank lines are
    /// skipped). Returns early when `on_field` says so.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_field: impl FnMut(Field) -> bool) -> bool {
        if !self.partial.is_empty() {
            match memchr_nl(bytes) {
                None => {
                    self.partial.extend_from_slice(bytes);
                    return true;
                }
                Some(i) => {
                    self.partial.extend_from_slice(&bytes[..i]);
                    bytes = &bytes[i + 1..];
                    let line = std::mem::take(&mut self.partial);
                    let go_on = self.field(&line).is_none_or(&mut on_field);
                    // Keep the allocation for the next split line.
                    self.partial = line;
                    self.partial.clear();
                    if !go_on {
                        return false;
                    }
                }
            }
        }
        while let Some(i) = memchr_nl(bytes) {
            if let Some(field) = self.field(&bytes[..i])
                && !on_field(field)
            {
                return false;
            }
            bytes = &bytes[i + 1..];
        }
        self.partial.extend_from_slice(bytes);
        true
    }

    /// Bytes of an unfinished line (a stream that ends here ended mid-event).
    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    /// The field of one line (`\r` stripped, one optional space after the colon).
    fn field<'a>(&mut self, line: &'a [u8]) -> Option<Field<'a>> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            // The end of an event: an `event: error` without data still failed.
            let bare = self.error_event && !self.error_data;
            (self.error_event, self.error_data) = (false, false);
            return bare.then_some(Field::Error(b""));
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let rest = &line[i + 1..];
                (&line[..i], rest.strip_prefix(b" ").unwrap_or(rest))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" if self.error_event => {
                self.error_data = true;
                Some(Field::Error(value))
            }
            b"data" => Some(Field::Data(value)),
            b"error" => Some(Field::Error(value)),
            b"event" => {
                self.error_event = value.trim_ascii() == b"error";
                None
            }
            _ => None,
        }
    }
}

fn memchr_nl(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

/// What one `data:` payload carried, as far as the metrics care.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Non-empty `text` (completions) or `delta.content` (chat).
    pub content: bool,
    /// Non-empty `delta.reasoning_content` / `delta.reasoning`.
    pub reasoning: bool,
    /// A non-empty `delta.tool_calls` list: the answer is a tool call (agentic streams carry
    /// no content then), and counts as answer tokens.
    pub tool_calls: bool,
    /// `usage.completion_tokens` where the chunk carried usage.
    pub completion_tokens: Option<u32>,
    pub prompt_tokens: Option<u32>,
    /// `usage.prompt_tokens_details.cached_tokens`: prompt tokens served from the prefix cache.
    pub cached_tokens: Option<u32>,
    /// The chunk was an error object.
    pub error: bool,
    /// The first choice carried a `finish_reason` (`stop`, `length`, ...): the answer is
    /// complete, `[DONE]` or not.
    pub finished: bool,
    /// `[DONE]`.
    pub done: bool,
    /// The chunk carried the engine's own timing (vLLM's `metrics`, llama-server's
    /// `timings`): read by [`crate::client::server_timing`].
    pub server_timing: bool,
}

impl Event {
    /// Carries tokens of any kind: an answer's, a tool call's or reasoning.
    pub fn has_content(&self) -> bool {
        self.content || self.reasoning || self.tool_calls
    }

    /// Carries tokens of the answer (content or a tool call), not reasoning only.
    pub fn has_answer(&self) -> bool {
        self.content || self.tool_calls
    }
}

/// Classifies one payload; `Err` with a short reason when it is not JSON.
pub fn classify(payload: &[u8]) -> Result<Event, String> {
    read(payload).map(|c| c.event)
}

/// One payload read: its event, and where its content text lies in it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Classified<'a> {
    pub event: Event,
    pub reply: Reply<'a>,
}

/// The content text of a chunk as the scanner found it: the first choice's `text` and
/// `delta.content` strings, raw (quoted, escapes as they are), borrowed from the payload; or,
/// from the readers of other APIs' events (`wire/`), the text they decoded.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reply<'a> {
    parts: [Option<&'a [u8]>; 2],
    decoded: Option<std::borrow::Cow<'a, str>>,
}

impl<'a> Reply<'a> {
    /// Text already decoded.
    pub fn decoded(text: std::borrow::Cow<'a, str>) -> Reply<'a> {
        Reply {
            parts: [None, None],
            decoded: Some(text),
        }
    }

    /// Appends the decoded text (`text`, then `delta.content`) to `out`; a string that is not
    /// valid JSON text (a raw control character, a bad escape, a lone surrogate, not UTF-8)
    /// appends nothing of this chunk, as serde would have refused the whole chunk.
    pub fn append_to(&self, out: &mut String) {
        let mut decoded: [Option<std::borrow::Cow<str>>; 2] = [None, None];
        for (raw, dec) in self.parts.iter().zip(decoded.iter_mut()) {
            if let Some(raw) = raw {
                match decode_string(raw) {
                    Some(text) => *dec = Some(text),
                    None => return,
                }
            }
        }
        for text in decoded.into_iter().flatten() {
            out.push_str(&text);
        }
        if let Some(text) = &self.decoded {
            out.push_str(text);
        }
    }
}

/// A raw JSON string (with its quotes) decoded: borrowed where it has no escape.
fn decode_string(raw: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    let inner = raw.get(1..raw.len().checked_sub(1)?)?;
    if memchr::memchr(b'\\', inner).is_none() && inner.iter().all(|&c| c >= 0x20) {
        return std::str::from_utf8(inner)
            .ok()
            .map(std::borrow::Cow::Borrowed);
    }
    serde_json::from_slice::<String>(raw)
        .ok()
        .map(std::borrow::Cow::Owned)
}

/// Reads one stream's payloads: `[DONE]`, or a chunk by a shape learned from this stream's
/// earlier chunks or by the strict walk (both also give its content's place), or by serde
/// where the walk refuses it (serde words the error). A chunk only serde accepts carries no
/// reply text.
#[derive(Debug, Default)]
pub struct ChunkReader {
    shapes: shape::Shapes,
}

impl ChunkReader {
    pub fn read<'a>(&mut self, payload: &'a [u8]) -> Result<Classified<'a>, String> {
        read_with(payload, |chunk| self.shapes.read(chunk))
    }
}

/// One payload read alone: by the strict walk, nothing learned.
pub fn read(payload: &[u8]) -> Result<Classified<'_>, String> {
    read_with(payload, |chunk| scan::chunk(chunk, None))
}

fn read_with<'a>(
    payload: &'a [u8],
    scan: impl FnOnce(&'a [u8]) -> Option<(Event, Reply<'a>)>,
) -> Result<Classified<'a>, String> {
    let trimmed = payload.trim_ascii();
    if trimmed == b"[DONE]" {
        return Ok(Classified {
            event: Event {
                done: true,
                ..Event::default()
            },
            reply: Reply::default(),
        });
    }
    match scan(trimmed) {
        Some((event, reply)) => Ok(Classified { event, reply }),
        None => classify_serde(trimmed).map(|event| Classified {
            event,
            reply: Reply::default(),
        }),
    }
}

/// The reference classification, by serde (slower: it validates every string).
pub fn classify_serde(trimmed: &[u8]) -> Result<Event, String> {
    let chunk: Chunk = serde_json::from_slice(trimmed).map_err(|e| e.to_string())?;
    let mut ev = Event {
        error: chunk.error.is_some(),
        server_timing: chunk.metrics.is_some() || chunk.timings.is_some(),
        ..Event::default()
    };
    if let Some(choice) = chunk.choices.0 {
        ev.content = choice.text.0;
        ev.finished = choice.finish_reason.0;
        if let Some(delta) = choice.delta {
            ev.content |= delta.content.0;
            ev.reasoning = delta.reasoning_content.0 || delta.reasoning.0;
            ev.tool_calls = delta.tool_calls.is_some_and(|t| !t.is_empty());
        }
    }
    if let Some(usage) = chunk.usage {
        ev.completion_tokens = usage.completion_tokens;
        ev.prompt_tokens = usage.prompt_tokens;
        ev.cached_tokens = usage.prompt_tokens_details.and_then(|d| d.cached_tokens);
    }
    Ok(ev)
}

/// A `usage` object's counts, read by the rule a stream's usage chunk is read by (`null` or
/// absent: none); `Err` names why it is not usage.
pub fn usage(v: &serde_json::Value) -> Result<Event, String> {
    if v.is_null() {
        return Ok(Event::default());
    }
    let u = Usage::deserialize(v).map_err(|e| e.to_string())?;
    Ok(Event {
        completion_tokens: u.completion_tokens,
        prompt_tokens: u.prompt_tokens,
        cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
        ..Event::default()
    })
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: FirstChoice,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(default)]
    metrics: Option<IgnoredAny>,
    #[serde(default)]
    timings: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    completion_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    text: NonEmpty,
    #[serde(default)]
    finish_reason: NonEmpty,
    #[serde(default)]
    delta: Option<Delta>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: NonEmpty,
    #[serde(default)]
    reasoning_content: NonEmpty,
    #[serde(default)]
    reasoning: NonEmpty,
    #[serde(default)]
    tool_calls: Option<Vec<IgnoredAny>>,
}

/// Whether a string field is present and non-empty, read without keeping the string.
#[derive(Default)]
struct NonEmpty(bool);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NonEmpty;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<NonEmpty, E> {
                Ok(NonEmpty(!s.is_empty()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_none<E: de::Error>(self) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<NonEmpty, D::Error> {
                d.deserialize_any(V)
            }
        }
        d.deserialize_option(V)
    }
}

/// The first element of `choices` (streams carry one), read without a Vec.
#[derive(Default)]
struct FirstChoice(Option<Choice>);

impl<'de> Deserialize<'de> for FirstChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstChoice;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of choices")
            }
            fn visit_unit<E: de::Error>(self) -> Result<FirstChoice, E> {
                Ok(FirstChoice(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FirstChoice, A::Error> {
                let first = seq.next_element::<Choice>()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_any(V)
    }
}

/// The text a content chunk carries (`text`, or `delta.content`; reasoning is left out, as
/// chat history leaves it out), appended to `out`: a conversation resends its replies. The
/// stream reads it from its [`Classified`] at once; this is the same for one payload alone.
pub fn append_reply(payload: &[u8], out: &mut String) {
    if let Ok(c) = read(payload) {
        c.reply.append_to(out);
    }
}

mod scan;
mod shape;

#[cfg(test)]
mod tests;
