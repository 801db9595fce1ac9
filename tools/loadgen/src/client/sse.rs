//! Incremental server-sent-events parsing of OpenAI-style streams, without allocating per
//! token: bytes are scanned where they arrived (only a line split across two reads is copied),
//! and each `data:` payload is classified by a borrowed serde pass that keeps only what the
//! metrics need: is there content, reasoning content, usage, an error.

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
                                b"tool_calls" => {
                                    ev.tool_calls |= s.list()?;
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
            b"metrics" | b"timings" => {
                if !s.null() {
                    ev.server_timing = true;
                    s.skip_value()?;
                }
                Some(())
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

    /// The first `"` or `\\` in `b`. Most strings of a chunk are short keys and values: their
    /// first bytes are searched eight at a time in a register, sooner than a vector search is
    /// set up; past them, memchr2.
    pub(super) fn quote_or_backslash(b: &[u8]) -> Option<usize> {
        const SHORT: usize = 64;
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        // High bit set in each byte of `w` equal to `c` (the lowest set one exactly: borrows
        // only run upwards from a true match).
        let eq = |w: u64, c: u8| {
            let x = w ^ (ONES * u64::from(c));
            x.wrapping_sub(ONES) & !x & HIGH
        };
        let head = &b[..b.len().min(SHORT)];
        let mut words = head.chunks_exact(8);
        for (k, w) in words.by_ref().enumerate() {
            let w = u64::from_le_bytes(w.try_into().ok()?);
            let hit = eq(w, b'"') | eq(w, b'\\');
            if hit != 0 {
                return Some(k * 8 + (hit.trailing_zeros() / 8) as usize);
            }
        }
        let tail = words.remainder();
        let done = head.len() - tail.len();
        if let Some(k) = tail.iter().position(|&c| c == b'"' || c == b'\\') {
            return Some(done + k);
        }
        memchr::memchr2(b'"', b'\\', &b[head.len()..]).map(|k| head.len() + k)
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
                // A payload cut right after a backslash has no end: not a chunk.
                let at = quote_or_backslash(self.b.get(self.i..)?)?;
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

        /// A list or null: whether it is a non-empty list.
        fn list(&mut self) -> Option<bool> {
            if self.null() {
                return Some(false);
            }
            let mut n = 0usize;
            self.array(|s| {
                n += 1;
                s.skip_value()
            })?;
            Some(n > 0)
        }

        /// An unsigned integer or null.
        fn count(&mut self) -> Option<Option<u32>> {
            if self.null() {
                return Some(None);
            }
            let start = self.i;
            // The digits' value, as `u32::from_str` reads them: none or past u32 is no count.
            let mut n: u32 = 0;
            while let Some(d @ b'0'..=b'9') = self.peek() {
                n = n.checked_mul(10)?.checked_add(u32::from(d - b'0'))?;
                self.i += 1;
            }
            if self.i == start || matches!(self.peek(), Some(b'.' | b'e' | b'E' | b'-' | b'+')) {
                return None;
            }
            Some(Some(n))
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
                    // An integer (ids, timestamps, counts): what `f64::from_str` accepts
                    // without parsing it; anything else is parsed.
                    let run = &self.b[start..self.i];
                    let digits = run.strip_prefix(b"-").unwrap_or(run);
                    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
                        return Some(());
                    }
                    std::str::from_utf8(run)
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
/// chat history leaves it out), appended to `out`: a conversation resends its replies. Only
/// conversations read it; the metrics never decode text.
pub fn append_reply(payload: &[u8], out: &mut String) {
    #[derive(serde::Deserialize)]
    struct Chunk<'a> {
        #[serde(default, borrow)]
        choices: Vec<TextChoice<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct TextChoice<'a> {
        #[serde(default, borrow)]
        text: Option<std::borrow::Cow<'a, str>>,
        #[serde(default, borrow)]
        delta: Option<TextDelta<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct TextDelta<'a> {
        #[serde(default, borrow)]
        content: Option<std::borrow::Cow<'a, str>>,
    }
    let Ok(chunk) = serde_json::from_slice::<Chunk>(payload.trim_ascii()) else {
        return;
    };
    if let Some(c) = chunk.choices.into_iter().next() {
        if let Some(t) = c.text {
            out.push_str(&t);
        }
        if let Some(t) = c.delta.and_then(|d| d.content) {
            out.push_str(&t);
        }
    }
}

#[cfg(test)]
mod tests;
