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
    memchr::memchr(b'\n', bytes)
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
    /// `usage.prompt_tokens_details.cached_tokens`: prompt tokens served from the prefix cache.
    pub cached_tokens: Option<u32>,
    /// The chunk was an error object.
    pub error: bool,
    /// The first choice carried a `finish_reason` (`stop`, `length`, ...): the answer is
    /// complete, `[DONE]` or not.
    pub finished: bool,
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
    // The fast scanner reads the usual chunk shapes; anything it is unsure of goes to serde,
    // which also words the error for a malformed one.
    match scan::chunk(trimmed) {
        Some(ev) => Ok(ev),
        None => classify_serde(trimmed),
    }
}

/// The reference classification, by serde (slower: it validates every string).
pub fn classify_serde(trimmed: &[u8]) -> Result<Event, String> {
    let chunk: Chunk = serde_json::from_slice(trimmed).map_err(|e| e.to_string())?;
    let mut ev = Event {
        error: chunk.error.is_some(),
        ..Event::default()
    };
    if let Some(choice) = chunk.choices.0 {
        ev.content = choice.text.0;
        ev.finished = choice.finish_reason.0;
        if let Some(delta) = choice.delta {
            ev.content |= delta.content.0;
            ev.reasoning = delta.reasoning_content.0 || delta.reasoning.0;
        }
    }
    if let Some(usage) = chunk.usage {
        ev.completion_tokens = usage.completion_tokens;
        ev.prompt_tokens = usage.prompt_tokens;
        ev.cached_tokens = usage.prompt_tokens_details.and_then(|d| d.cached_tokens);
    }
    Ok(ev)
}

/// A byte-level scanner for one chunk's JSON: it walks the structure, compares only the keys
/// the metrics need, and skips every other value without decoding or validating its text
/// (about 3x cheaper than serde here, which is most of the client's CPU per token).
mod scan {
    use super::Event;

    struct Scan<'a> {
        b: &'a [u8],
        i: usize,
    }

    pub fn chunk(b: &[u8]) -> Option<Event> {
        let mut s = Scan { b, i: 0 };
        let mut ev = Event::default();
        s.ws();
        s.object(|s, key| match key {
            b"choices" => {
                if s.null() {
                    return Some(());
                }
                let mut first = true;
                s.array(|s| {
                    if !first {
                        return s.skip_value();
                    }
                    first = false;
                    s.object(|s, key| match key {
                        b"text" => {
                            ev.content |= s.text()?;
                            Some(())
                        }
                        b"finish_reason" => {
                            ev.finished |= s.text()?;
                            Some(())
                        }
                        b"delta" => {
                            if s.null() {
                                return Some(());
                            }
                            s.object(|s, key| match key {
                                b"content" => {
                                    ev.content |= s.text()?;
                                    Some(())
                                }
                                b"reasoning_content" | b"reasoning" => {
                                    ev.reasoning |= s.text()?;
                                    Some(())
                                }
                                _ => s.skip_value(),
                            })
                        }
                        _ => s.skip_value(),
                    })
                })
            }
            b"usage" => {
                if s.null() {
                    return Some(());
                }
                s.object(|s, key| match key {
                    b"completion_tokens" => {
                        ev.completion_tokens = s.count()?;
                        Some(())
                    }
                    b"prompt_tokens" => {
                        ev.prompt_tokens = s.count()?;
                        Some(())
                    }
                    b"prompt_tokens_details" => {
                        if s.null() {
                            return Some(());
                        }
                        s.object(|s, key| match key {
                            b"cached_tokens" => {
                                ev.cached_tokens = s.count()?;
                                Some(())
                            }
                            _ => s.skip_value(),
                        })
                    }
                    _ => s.skip_value(),
                })
            }
            b"error" => {
                if !s.null() {
                    ev.error = true;
                    s.skip_value()?;
                }
                Some(())
            }
            _ => s.skip_value(),
        })?;
        s.ws();
        (s.i == s.b.len()).then_some(ev)
    }

    impl<'a> Scan<'a> {
        fn ws(&mut self) {
            while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
                self.i += 1;
            }
        }

        fn peek(&self) -> Option<u8> {
            self.b.get(self.i).copied()
        }

        fn eat(&mut self, c: u8) -> Option<()> {
            self.ws();
            (self.peek()? == c).then(|| self.i += 1)
        }

        fn literal(&mut self, word: &[u8]) -> bool {
            let hit = self.b[self.i..].starts_with(word);
            if hit {
                self.i += word.len();
            }
            hit
        }

        fn null(&mut self) -> bool {
            self.ws();
            self.literal(b"null")
        }

        /// A string's raw bytes (escapes left as they are), the cursor after its closing quote.
        fn string(&mut self) -> Option<&'a [u8]> {
            self.eat(b'"')?;
            let start = self.i;
            loop {
                let at = memchr::memchr2(b'"', b'\\', &self.b[self.i..])?;
                self.i += at;
                if self.b[self.i] == b'"' {
                    self.i += 1;
                    return Some(&self.b[start..self.i - 1]);
                }
                self.i += 2;
            }
        }

        /// A string or null value: whether it is a non-empty string.
        fn text(&mut self) -> Option<bool> {
            if self.null() {
                return Some(false);
            }
            self.string().map(|s| !s.is_empty())
        }

        /// An unsigned integer or null.
        fn count(&mut self) -> Option<Option<u32>> {
            if self.null() {
                return Some(None);
            }
            let start = self.i;
            while let Some(b'0'..=b'9') = self.peek() {
                self.i += 1;
            }
            if matches!(self.peek(), Some(b'.' | b'e' | b'E' | b'-' | b'+')) {
                return None;
            }
            std::str::from_utf8(&self.b[start..self.i])
                .ok()?
                .parse()
                .ok()
                .map(Some)
        }

        fn object(&mut self, mut f: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
            self.eat(b'{')?;
            self.ws();
            if self.peek()? == b'}' {
                self.i += 1;
                return Some(());
            }
            loop {
                self.ws();
                let key = self.string()?;
                self.eat(b':')?;
                self.ws();
                f(self, key)?;
                self.ws();
                match self.peek()? {
                    b',' => self.i += 1,
                    b'}' => {
                        self.i += 1;
                        return Some(());
                    }
                    _ => return None,
                }
            }
        }

        fn array(&mut self, mut f: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
            self.eat(b'[')?;
            self.ws();
            if self.peek()? == b']' {
                self.i += 1;
                return Some(());
            }
            loop {
                self.ws();
                f(self)?;
                self.ws();
                match self.peek()? {
                    b',' => self.i += 1,
                    b']' => {
                        self.i += 1;
                        return Some(());
                    }
                    _ => return None,
                }
            }
        }

        fn skip_value(&mut self) -> Option<()> {
            self.ws();
            match self.peek()? {
                b'"' => self.string().map(|_| ()),
                b'{' => self.object(|s, _| s.skip_value()),
                b'[' => self.array(|s| s.skip_value()),
                b't' => self.literal(b"true").then_some(()),
                b'f' => self.literal(b"false").then_some(()),
                b'n' => self.literal(b"null").then_some(()),
                b'-' | b'0'..=b'9' => {
                    let start = self.i;
                    while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
                        self.i += 1;
                    }
                    std::str::from_utf8(&self.b[start..self.i])
                        .ok()?
                        .parse::<f64>()
                        .ok()
                        .map(|_| ())
                }
                _ => None,
            }
        }
    }
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

    proptest::proptest! {
        /// The fast scanner and serde agree on every chunk shape, odd spacing and escapes
        /// included; where the scanner declines, serde decides.
        #[test]
        fn scanner_agrees_with_serde(
            content in proptest::option::of("[ a-z\\\\\"\n]{0,6}"),
            reasoning in proptest::option::of("[a-z]{0,3}"),
            text_form in proptest::bool::ANY,
            usage in proptest::option::of((0u32..100_000, 0u32..5000)),
            cached in proptest::option::of(proptest::option::of(0u32..100_000)),
            extra_choice in proptest::bool::ANY,
            finish in proptest::option::of("[a-z]{0,6}"),
            error in proptest::bool::ANY,
            sp in "[ \n]{0,2}",
        ) {
            let js = |s: &Option<String>| match s {
                Some(s) => serde_json::to_string(s).unwrap(),
                None => "null".to_string(),
            };
            let choice = if text_form {
                format!(r#"{{"index":0,"text":{sp}{},"logprobs":null,"finish_reason":{}}}"#, js(&content), js(&finish))
            } else {
                format!(
                    r#"{{"index":0,"delta":{{"role":"assistant","content":{},"reasoning_content":{sp}{}}},"finish_reason":{sp}{}}}"#,
                    js(&content), js(&reasoning), js(&finish)
                )
            };
            let more = if extra_choice { r#",{"text":"zz","index":1}"# } else { "" };
            let usage = match usage {
                Some((p, c)) => {
                    let details = match cached {
                        None => String::new(),
                        Some(None) => r#","prompt_tokens_details":null"#.to_string(),
                        Some(Some(n)) => format!(r#","prompt_tokens_details":{{"audio_tokens":null,"cached_tokens":{sp}{n}}}"#),
                    };
                    format!(r#"{{"prompt_tokens":{p},"completion_tokens":{c},"total_tokens":{}{details}}}"#, p + c)
                }
                None => "null".into(),
            };
            let err = if error { r#","error":{"message":"x","code":[1,-2.5e3,true]}"# } else { "" };
            let line = format!(r#"{{"id":"c-1","created":17,{sp}"choices":[{choice}{more}],"usage":{usage}{err}}}"#);
            let fast = scan::chunk(line.as_bytes());
            let slow = classify_serde(line.as_bytes()).unwrap();
            proptest::prop_assert_eq!(fast, Some(slow), "{}", line);
        }
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
                r#"{"choices":[],"usage":{"prompt_tokens":600,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":512}}}"#,
                Event {
                    completion_tokens: Some(4),
                    prompt_tokens: Some(600),
                    cached_tokens: Some(512),
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
                r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#,
                Event {
                    finished: true,
                    ..Event::default()
                },
            ),
            (
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":null}"#,
                Event {
                    finished: true,
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
            if *payload != "[DONE]" {
                assert_eq!(
                    classify_serde(payload.as_bytes()).unwrap(),
                    *want,
                    "{payload}"
                );
            }
        }
        for bad in [
            "{not json",
            "{\"choices\": [oops",
            "{\"choices\":[]",
            "{} x",
            "",
            "{\"a\":tru}",
        ] {
            assert!(classify(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
