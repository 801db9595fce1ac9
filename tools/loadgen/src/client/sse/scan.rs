//! The strict general walk of one chunk's JSON: it walks the structure, compares only the keys
//! the metrics need, and skips every other value without decoding its text (about 2x cheaper
//! than serde). While it walks it can record the chunk's shape (`Recorder`): every byte
//! outside its scalar values, and the role each scalar played, which `shape.rs` replays on the
//! next chunks of that shape without walking them.

use super::{Event, Reply};

/// Deeper than any chunk nests (serde_json stops at 128 too): a hostile line of brackets is
/// malformed, not a stack overflow.
const MAX_DEPTH: u32 = 128;

/// What a scalar value meant to the walk, so that a replay can give it the same meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Any scalar, skipped.
    Skip,
    /// Only `null`: where anything else would be walked as an object or a list.
    Null,
    /// Any scalar but `null` (a scalar `error`, `metrics`, `timings`: the flag it set holds).
    NotNull,
    /// `text` of the first choice: content, and the reply's first part.
    Text,
    /// `delta.content` of the first choice: content, and the reply's second part.
    DeltaContent,
    Reasoning,
    Finish,
    Completion,
    Prompt,
    Cached,
}

/// One scalar of a shape: where it lay in the recorded chunk, and its role.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    pub start: u32,
    pub end: u32,
    pub role: Role,
    /// The first slot from here on that is not skipped (`slots.len()` if none): the recorded
    /// bytes up to it are compared in one piece, as skipped values (ids, object names,
    /// models, nulls, times) mostly repeat. Identical bytes walk identically: a string that
    /// starts with the same quoted bytes ends where it did, a number before the same next
    /// byte too.
    pub run_to: u32,
}

/// A chunk's shape, as it is recorded: the chunk itself and its scalars.
#[derive(Debug, Default)]
pub(super) struct Recorder {
    pub orig: Vec<u8>,
    pub slots: Vec<Slot>,
}

pub(super) struct Scan<'a, 'r> {
    pub b: &'a [u8],
    pub i: usize,
    depth: u32,
    rec: Option<&'r mut Recorder>,
}

/// Walks one chunk; `rec` (cleared first) records its shape as it goes.
pub(super) fn chunk<'a>(b: &'a [u8], rec: Option<&mut Recorder>) -> Option<(Event, Reply<'a>)> {
    let mut rec = rec;
    if let Some(r) = rec.as_deref_mut() {
        r.orig.clear();
        r.slots.clear();
    }
    let mut s = Scan::new(b, rec);
    let mut ev = Event::default();
    let mut reply = Reply::default();
    s.ws();
    s.object(|s, key| match key {
        b"choices" => {
            if s.null_as(Role::Null) {
                return Some(());
            }
            let mut first = true;
            s.array(|s| {
                if !first {
                    return s.skip_value(Role::Skip);
                }
                first = false;
                s.object(|s, key| match key {
                    b"text" => {
                        let (some, raw) = s.text(Role::Text)?;
                        ev.content |= some;
                        reply.parts[0] = raw.or(reply.parts[0]);
                        Some(())
                    }
                    b"finish_reason" => {
                        ev.finished |= s.text(Role::Finish)?.0;
                        Some(())
                    }
                    b"delta" => {
                        if s.null_as(Role::Null) {
                            return Some(());
                        }
                        s.object(|s, key| match key {
                            b"content" => {
                                let (some, raw) = s.text(Role::DeltaContent)?;
                                ev.content |= some;
                                reply.parts[1] = raw.or(reply.parts[1]);
                                Some(())
                            }
                            b"reasoning_content" | b"reasoning" => {
                                ev.reasoning |= s.text(Role::Reasoning)?.0;
                                Some(())
                            }
                            b"tool_calls" => {
                                ev.tool_calls |= s.list()?;
                                Some(())
                            }
                            _ => s.skip_value(Role::Skip),
                        })
                    }
                    _ => s.skip_value(Role::Skip),
                })
            })
        }
        b"usage" => {
            if s.null_as(Role::Null) {
                return Some(());
            }
            s.object(|s, key| match key {
                b"completion_tokens" => {
                    ev.completion_tokens = s.count(Role::Completion)?;
                    Some(())
                }
                b"prompt_tokens" => {
                    ev.prompt_tokens = s.count(Role::Prompt)?;
                    Some(())
                }
                b"prompt_tokens_details" => {
                    if s.null_as(Role::Null) {
                        return Some(());
                    }
                    s.object(|s, key| match key {
                        b"cached_tokens" => {
                            ev.cached_tokens = s.count(Role::Cached)?;
                            Some(())
                        }
                        _ => s.skip_value(Role::Skip),
                    })
                }
                _ => s.skip_value(Role::Skip),
            })
        }
        b"metrics" | b"timings" => {
            if !s.null_as(Role::Null) {
                ev.server_timing = true;
                s.skip_value(Role::NotNull)?;
            }
            Some(())
        }
        b"error" => {
            if !s.null_as(Role::Null) {
                ev.error = true;
                s.skip_value(Role::NotNull)?;
            }
            Some(())
        }
        _ => s.skip_value(Role::Skip),
    })?;
    s.ws();
    (s.i == s.b.len()).then_some((ev, reply))
}

/// The first `"` or `\\` in `b`. Most strings of a chunk are short keys and values: their
/// first bytes are searched eight at a time in a register, sooner than a vector search is
/// set up; past them, memchr2.
#[inline]
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

impl<'a, 'r> Scan<'a, 'r> {
    pub fn new(b: &'a [u8], rec: Option<&'r mut Recorder>) -> Self {
        Scan {
            b,
            i: 0,
            depth: 0,
            rec,
        }
    }

    /// The scalar that started at `start` and ended here played `role`.
    #[inline(always)]
    fn mark(&mut self, start: usize, role: Role) {
        if let Some(r) = self.rec.as_deref_mut() {
            r.slots.push(Slot {
                start: start as u32,
                end: self.i as u32,
                role,
                run_to: 0,
            });
        }
    }

    #[inline]
    pub fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.i += 1)
    }

    #[inline]
    fn literal(&mut self, word: &[u8]) -> bool {
        let hit = self.b[self.i..].starts_with(word);
        if hit {
            self.i += word.len();
        }
        hit
    }

    /// A `null` here (recorded as a scalar of `role`), or nothing consumed but whitespace.
    #[inline]
    fn null_as(&mut self, role: Role) -> bool {
        self.ws();
        let start = self.i;
        let hit = self.literal(b"null");
        if hit {
            self.mark(start, role);
        }
        hit
    }

    /// A string with its quotes (escapes left as they are), the cursor after its closing quote.
    #[inline]
    pub fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i - 1;
        loop {
            // A payload cut right after a backslash has no end: not a chunk.
            let at = quote_or_backslash(self.b.get(self.i..)?)?;
            self.i += at;
            if self.b[self.i] == b'"' {
                self.i += 1;
                return Some(&self.b[start..self.i]);
            }
            self.i += 2;
        }
    }

    /// A string or null value: whether it is a non-empty string, and the string.
    #[inline]
    pub fn text(&mut self, role: Role) -> Option<(bool, Option<&'a [u8]>)> {
        self.ws();
        let start = self.i;
        let got = if self.literal(b"null") {
            (false, None)
        } else {
            let s = self.string()?;
            (s.len() > 2, Some(s))
        };
        self.mark(start, role);
        Some(got)
    }

    /// A list or null: whether it is a non-empty list.
    fn list(&mut self) -> Option<bool> {
        if self.null_as(Role::Null) {
            return Some(false);
        }
        let mut n = 0usize;
        self.array(|s| {
            n += 1;
            s.skip_value(Role::Skip)
        })?;
        Some(n > 0)
    }

    /// An unsigned integer or null.
    #[inline]
    pub fn count(&mut self, role: Role) -> Option<Option<u32>> {
        self.ws();
        let start = self.i;
        let n = if self.literal(b"null") {
            None
        } else {
            // The digits' value, as `u32::from_str` reads them: none or past u32 is no count.
            let mut n: u32 = 0;
            while let Some(d @ b'0'..=b'9') = self.peek() {
                n = n.checked_mul(10)?.checked_add(u32::from(d - b'0'))?;
                self.i += 1;
            }
            if self.i == start || matches!(self.peek(), Some(b'.' | b'e' | b'E' | b'-' | b'+')) {
                return None;
            }
            Some(n)
        };
        self.mark(start, role);
        Some(n)
    }

    fn object(&mut self, mut f: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            self.depth -= 1;
            return Some(());
        }
        loop {
            self.ws();
            let key = self.string()?;
            let key = &key[1..key.len() - 1];
            self.eat(b':')?;
            self.ws();
            f(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, mut f: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            self.depth -= 1;
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
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Any value; a scalar one is recorded as `role` (those inside a list or object as skipped).
    fn skip_value(&mut self, role: Role) -> Option<()> {
        self.ws();
        match self.peek()? {
            b'{' => self.object(|s, _| s.skip_value(Role::Skip)),
            b'[' => self.array(|s| s.skip_value(Role::Skip)),
            _ => {
                let start = self.i;
                self.scalar()?;
                self.mark(start, role);
                Some(())
            }
        }
    }

    /// A string, number, `true`, `false` or `null` here: checked, not decoded.
    #[inline]
    pub fn scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
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
