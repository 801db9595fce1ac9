//! The chunks of a stream come in a few shapes that repeat (an engine writes every content
//! chunk from one template: the same keys in the same order, only the scalar values differ).
//! The first chunk of a shape is walked by the strict scanner (`scan.rs`), which records the
//! shape: its bytes outside the scalars and each scalar's role. The next chunks are replayed
//! against it: the recorded bytes compared as they are, each scalar read by the walk's own
//! routine for its role. A chunk that replays to its end is byte for byte one the walk takes
//! the same path through (same keys, same structure, same scalar kinds where the path
//! depends on them), so it gets the walk's answer; anything else goes to the walk.
//!
//! A stream keeps its own shapes (its ids, model and times repeat in every chunk, so most of
//! a chunk compares in a few pieces), a few of them, each reusing its buffers: no allocation
//! per chunk once they are learned.

use super::scan::{self, Recorder, Role, Scan};
use super::{Event, Reply};

/// Shapes kept: an engine's stream has two to four (the first chunk, content, the finishing
/// one, usage).
const SHAPES: usize = 6;
/// Room made at once for a shape's scalars: an engine's chunk has 8 to 14.
const SLOTS_RESERVED: usize = 16;
/// A chunk longer than this is walked every time: content chunks are a few hundred bytes.
const MAX_SHAPE_BYTES: usize = 4096;

#[derive(Debug, Default)]
struct Shape {
    rec: Recorder,
    /// What the chunk's structure alone said (tool calls, server timing, an error).
    fixed: Event,
    /// `rec` holds a whole chunk's shape.
    valid: bool,
}

/// The shapes learned from one stream's chunks.
#[derive(Debug, Default)]
pub(super) struct Shapes {
    list: Vec<Shape>,
}

impl Shapes {
    /// How many shapes this holds (a replayed chunk learns none).
    #[cfg(test)]
    pub fn learned(&self) -> usize {
        self.list.iter().filter(|s| s.valid).count()
    }

    /// One chunk's event and reply: replayed against a shape learned here, or walked (and its
    /// shape learned); `None` when the walk refuses it.
    pub fn read<'a>(&mut self, b: &'a [u8]) -> Option<(Event, Reply<'a>)> {
        for k in 0..self.list.len() {
            if let Some(got) = self.list[k].replay(b) {
                // The shapes most chunks have move to the front.
                if k > 0 {
                    self.list.swap(k, k - 1);
                }
                return Some(got);
            }
        }
        if b.len() > MAX_SHAPE_BYTES {
            return scan::chunk(b, None);
        }
        // A malformed chunk's place is taken by the next one.
        if self.list.len() < SHAPES && self.list.last().is_none_or(|s| s.valid) {
            let mut shape = Shape::default();
            // One allocation each for a chunk's scalars and bytes, not one per doubling.
            shape.rec.slots.reserve(SLOTS_RESERVED);
            shape.rec.orig.reserve(b.len());
            self.list.push(shape);
        }
        let shape = self.list.last_mut()?;
        let got = scan::chunk(b, Some(&mut shape.rec));
        shape.valid = got.is_some();
        if let Some((ev, _)) = got {
            shape.rec.orig.extend_from_slice(b);
            let slots = &mut shape.rec.slots;
            let mut run_to = slots.len() as u32;
            for k in (0..slots.len()).rev() {
                if slots[k].role != Role::Skip {
                    run_to = k as u32;
                }
                slots[k].run_to = run_to;
            }
            shape.fixed = Event {
                tool_calls: ev.tool_calls,
                server_timing: ev.server_timing,
                error: ev.error,
                ..Event::default()
            };
        }
        got
    }
}

impl Shape {
    fn replay<'a>(&self, b: &'a [u8]) -> Option<(Event, Reply<'a>)> {
        if !self.valid {
            return None;
        }
        let (orig, slots) = (&self.rec.orig[..], &self.rec.slots[..]);
        let (mut ev, mut reply) = (self.fixed, Reply::default());
        let mut s = Scan::new(b, None);
        // `done`: the recorded bytes matched so far (the end of the last slot replayed).
        let (mut k, mut done) = (0usize, 0usize);
        while k < slots.len() {
            let slot = slots[k];
            if slot.role == Role::Skip {
                // Skipped values and the bytes between them, up to the next slot that means
                // something, as they were.
                let to = slot.run_to as usize;
                let upto = slots.get(to).map_or(orig.len(), |t| t.start as usize);
                let piece = &orig[done..upto];
                if b.len() - s.i >= piece.len() && same(&b[s.i..s.i + piece.len()], piece) {
                    s.i += piece.len();
                    let Some(&next) = slots.get(to) else {
                        return (s.i == b.len()).then_some((ev, reply));
                    };
                    value(&mut s, next.role, &mut ev, &mut reply)?;
                    (k, done) = (to + 1, next.end as usize);
                    continue;
                }
            }
            let lit = &orig[done..slot.start as usize];
            if !same(b.get(s.i..s.i + lit.len())?, lit) {
                return None;
            }
            s.i += lit.len();
            if slot.role == Role::Skip {
                let was = &orig[slot.start as usize..slot.end as usize];
                let number = matches!(was.first(), Some(b'-' | b'0'..=b'9'));
                if b.len() - s.i >= was.len()
                    && same(&b[s.i..s.i + was.len()], was)
                    && !(number && b.get(s.i + was.len()).is_some_and(|&c| number_byte(c)))
                {
                    s.i += was.len();
                } else {
                    s.scalar()?;
                }
            } else {
                value(&mut s, slot.role, &mut ev, &mut reply)?;
            }
            (k, done) = (k + 1, slot.end as usize);
        }
        let tail = &orig[done..];
        (b.len() == s.i + tail.len() && same(&b[s.i..], tail)).then_some((ev, reply))
    }
}

/// A scalar that means something, read here as the walk reads it for its role.
#[inline]
fn value<'a>(
    s: &mut Scan<'a, '_>,
    role: Role,
    ev: &mut Event,
    reply: &mut Reply<'a>,
) -> Option<()> {
    match role {
        Role::Skip => s.scalar()?,
        Role::Null => s.b[s.i..].starts_with(b"null").then(|| s.i += 4)?,
        Role::NotNull => {
            if s.b[s.i..].starts_with(b"null") {
                return None;
            }
            s.scalar()?
        }
        Role::Text | Role::DeltaContent => {
            let (some, raw) = s.text(role)?;
            ev.content |= some;
            let part = usize::from(role == Role::DeltaContent);
            reply.parts[part] = raw.or(reply.parts[part]);
        }
        Role::Reasoning => ev.reasoning |= s.text(role)?.0,
        Role::Finish => ev.finished |= s.text(role)?.0,
        Role::Completion => ev.completion_tokens = s.count(role)?,
        Role::Prompt => ev.prompt_tokens = s.count(role)?,
        Role::Cached => ev.cached_tokens = s.count(role)?,
    }
    Some(())
}

/// A byte the walk reads as part of a number.
#[inline]
fn number_byte(c: u8) -> bool {
    matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
}

/// `a == b` for two slices of one length; the short ones (most of a shape's pieces are a key
/// and its punctuation) compared as two overlapping words instead of a call to memcmp.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let w8 = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or([0; 8]));
    let w4 = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap_or([0; 4]));
    match n {
        0 => true,
        1..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => w4(a, 0) == w4(b, 0) && w4(a, n - 4) == w4(b, n - 4),
        8..=64 => {
            let mut at = 0;
            while at + 8 < n {
                if w8(a, at) != w8(b, at) {
                    return false;
                }
                at += 8;
            }
            w8(a, n - 8) == w8(b, n - 8)
        }
        _ => a == b,
    }
}
