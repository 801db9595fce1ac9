//! Incremental server-sent-events parsing of OpenAI-style streams, without allocating per
//! token: bytes are scanned where they arrived (only a line split across two reads is copied),
//! and each `data:` payload is classified by a borrowed serde pass that keeps only what the
//! metrics need: is there content, reasoning content, usage, an error.

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use std::fmt;

/// Splits a byte stream into SSE `data:` payloads, line by line.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The start of a line whose end has not arrived yet.
    partial: Vec<u8>,
}

impl SseParser {
    /// Feeds the next bytes; calls `on_data` with each complete `data:` payload (comment lines,
    /// `event:`/`id:` lines and blank lines are skipped). Returns early when `on_data` says so.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_data: impl FnMut(&[u8]) -> bool) -> bool {
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
                    let go_on = line_payload(&line).is_none_or(&mut on_data);
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
            if let Some(payload) = line_payload(&bytes[..i])
                && !on_data(payload)
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
}

fn memchr_nl(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// The payload of a `data:` line (one optional space after the colon, `\r` stripped).
fn line_payload(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let rest = line.strip_prefix(b"data:")?;
    Some(rest.strip_prefix(b" ").unwrap_or(rest))
}

/// What one `data:` payload carried, as far as the metrics care.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Non-empty `text` (completions) or `delta.content` (chat).
    pub content: bool,
    /// Non-empty `delta.reasoning_content` / `delta.reasoning`.
    pub reasoning: bool,
    /// `usage.completion_tokens` where the chunk carried usage.
    pub completion_tokens: Option<u32>,
    pub prompt_tokens: Option<u32>,
    /// The chunk was an error object.
    pub error: bool,
    /// `[DONE]`.
    pub done: bool,
}

impl Event {
    pub fn has_content(&self) -> bool {
        self.content || self.reasoning
    }
}

/// Classifies one payload; `Err` with a short reason when it is not JSON.
pub fn classify(payload: &[u8]) -> Result<Event, String> {
    let trimmed = payload.trim_ascii();
    if trimmed == b"[DONE]" {
        return Ok(Event {
            done: true,
            ..Event::default()
        });
    }
    let chunk: Chunk = serde_json::from_slice(trimmed).map_err(|e| e.to_string())?;
    let mut ev = Event {
        error: chunk.error.is_some(),
        ..Event::default()
    };
    if let Some(choice) = chunk.choices.0 {
        ev.content = choice.text.0;
        if let Some(delta) = choice.delta {
            ev.content |= delta.content.0;
            ev.reasoning = delta.reasoning_content.0 || delta.reasoning.0;
        }
    }
    if let Some(usage) = chunk.usage {
        ev.completion_tokens = usage.completion_tokens;
        ev.prompt_tokens = usage.prompt_tokens;
    }
    Ok(ev)
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: FirstChoice,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    completion_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    text: NonEmpty,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn payloads(chunks: &[&[u8]]) -> Vec<String> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |d| {
                out.push(String::from_utf8_lossy(d).into_owned());
                true
            });
        }
        out
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
                r#"{"choices":[{"text":"a"},{"text":""}],"usage":{"completion_tokens":3}}"#,
                Event {
                    content: true,
                    completion_tokens: Some(3),
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
        }
        assert!(classify(b"{not json").is_err());
    }
}
