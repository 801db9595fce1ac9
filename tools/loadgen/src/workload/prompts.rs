//! What each request asks for: synthetic prompts of an exact token length (as the server counts
//! it), optionally in prefix groups, prompts from a file (JSON lines or ShareGPT), or the
//! built-in set. The request body around a prompt is built in `client/body.rs`.
//!
//! Exact lengths: a synthetic prompt is a sequence of common English words, each one token with
//! its leading space in the usual BPE tokenizers. The word count is aligned once per target
//! length against the server's own count (`/tokenize`, else `usage.prompt_tokens` of probe
//! requests), then each request swaps a few words after the shared prefix for others drawn from
//! the same vocabulary: the length holds and no two requests share a prefix by accident.

use crate::client::body::PromptText;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Words that are one token each (with their leading space) in common tokenizers.
pub(crate) const VOCAB: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "people", "year",
    "new", "first", "world", "state", "city", "water", "house", "school", "day", "night", "home",
    "light", "small", "large", "long", "little", "good", "great", "old", "young", "high", "low",
    "work", "life", "hand", "part", "place", "case", "week", "company", "system", "program",
    "question", "number", "group", "problem", "fact", "money", "story", "month", "book", "eye",
    "job", "word", "business", "side", "kind", "head", "power", "war", "family", "music", "market",
    "river", "tree", "road", "table", "window", "door", "paper", "game", "song",
];

/// Unique words per request, right after the shared prefix.
const UNIQUE_WORDS: usize = 8;

/// A prompt from a file or the built-in set.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub prompt: PromptText,
    pub max_tokens: Option<u32>,
}

/// The synthetic prompt for one target length: word indices into [`VOCAB`].
#[derive(Debug, Clone)]
pub struct Synthetic {
    pub target_tokens: u32,
    pub words: Vec<u16>,
    /// Leading words every request keeps (`--shared-prefix`), or that each prefix group
    /// replaces with its own (`--prefix-len`).
    pub shared_prefix_words: usize,
}

impl Synthetic {
    /// A starting guess: `words` words drawn from the seed.
    pub fn new(target_tokens: u32, words: usize, shared_prefix_words: usize, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_f1e6);
        let words = (0..words.max(1))
            .map(|_| rng.random_range(0..VOCAB.len()) as u16)
            .collect();
        Synthetic {
            target_tokens,
            words,
            shared_prefix_words,
        }
    }

    /// Lengthens or shortens to `n` words, keeping the words already there.
    pub fn resize(&mut self, n: usize, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed ^ n as u64);
        let n = n.max(1);
        while self.words.len() < n {
            self.words.push(rng.random_range(0..VOCAB.len()) as u16);
        }
        self.words.truncate(n);
    }

    /// The text of request `id` (`None`: the aligned base itself), in prefix group `group`
    /// where there are groups: the group's own words replace the shared prefix.
    pub fn text(&self, id: Option<u64>, group: Option<u32>, seed: u64) -> String {
        let mut words = self.words.clone();
        if let Some(g) = group {
            let mut rng = StdRng::seed_from_u64(
                seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x9e0f ^ (u64::from(g) << 20),
            );
            let end = self.shared_prefix_words.min(words.len());
            for w in &mut words[..end] {
                *w = rng.random_range(0..VOCAB.len()) as u16;
            }
        }
        if let Some(id) = id {
            let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ id);
            let from = self.shared_prefix_words.min(words.len());
            let to = (from + UNIQUE_WORDS).min(words.len());
            for w in &mut words[from..to] {
                *w = rng.random_range(0..VOCAB.len()) as u16;
            }
        }
        let mut out = String::with_capacity(words.len() * 6);
        for (i, w) in words.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(VOCAB[*w as usize]);
        }
        out
    }
}

/// The built-in prompts: one each of code, explanation, arithmetic, poem and JSON, for the quick
/// "is the server healthy" check.
pub fn builtin() -> Vec<Entry> {
    let e = |p: &str, max: u32| Entry {
        prompt: PromptText::Text(p.to_string()),
        max_tokens: Some(max),
    };
    vec![
        e(
            "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring and two doctests.",
            256,
        ),
        e(
            "Explain to a new engineer why a hash map lookup is O(1) on average but O(n) in the worst case.",
            256,
        ),
        e(
            "What is 37 * 43 + 128 / 4? Show each step of the arithmetic, then give the final answer on its own line.",
            128,
        ),
        e(
            "Write a short poem of eight lines about a lighthouse keeper on the last night before the light is automated.",
            160,
        ),
        e(
            "Return a JSON object describing three fictional books, each with title, author, year and a list of genres. Output only the JSON.",
            256,
        ),
    ]
}

/// Deterministic order of listed prompts: request `id` gets `order[id % len]`.
pub fn shuffled_order(len: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    order.shuffle(&mut StdRng::seed_from_u64(seed));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_requests_differ_but_keep_word_count_and_prefix() {
        let mut s = Synthetic::new(100, 100, 20, 7);
        s.resize(120, 7);
        let base = s.text(None, None, 7);
        let a = s.text(Some(1), None, 7);
        let b = s.text(Some(2), None, 7);
        assert_ne!(a, b);
        assert_eq!(a.split(' ').count(), 120);
        assert_eq!(b.split(' ').count(), 120);
        let prefix = |t: &str| t.split(' ').take(20).collect::<Vec<_>>().join(" ");
        assert_eq!(prefix(&a), prefix(&base));
        assert_eq!(a, s.text(Some(1), None, 7), "reproducible from the seed");
    }

    #[test]
    fn prefix_groups_share_their_own_prefix_only() {
        let s = Synthetic::new(100, 100, 40, 3);
        let words = |t: String| t.split(' ').map(str::to_string).collect::<Vec<_>>();
        let g0a = words(s.text(Some(1), Some(0), 3));
        let g0b = words(s.text(Some(2), Some(0), 3));
        let g1 = words(s.text(Some(3), Some(1), 3));
        assert_eq!(g0a.len(), 100);
        assert_eq!(g0a[..40], g0b[..40]);
        assert_ne!(g0a[40..48], g0b[40..48], "unique words after the prefix");
        assert_ne!(g0a[..40], g1[..40]);
        assert_eq!(g0a[48..], g1[48..], "the aligned rest is the same for all");
    }
}
