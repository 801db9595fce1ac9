//! The simulated tokenizer and the simulated model's output, both deterministic so a client can
//! build a prompt of exactly N tokens without asking the server.
//!
//! Rule: **a token is a whitespace-separated word** (Unicode whitespace, as `str::split_whitespace`).
//! `"a b  c"` is 3 tokens, `""` is 0. A prompt given as token ids (`[1, 2, 3]`) counts its ids.
//! Chat prompts count the words of every message's text content; roles and templates add nothing.
//! Generated tokens are words from a fixed vocabulary, each with one leading space, so the
//! generated text tokenizes back to exactly `completion_tokens` tokens.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Words the simulated model emits (ids `0..VOCAB_WORDS`); any other word gets an id above.
pub const VOCAB_WORDS: u32 = 4096;
/// Ids for words outside the vocabulary are hashed into `VOCAB_WORDS..VOCAB_SIZE`.
pub const VOCAB_SIZE: u32 = 128_000;

struct Vocab {
    /// Each word with its leading space (the form the model emits).
    spaced: Vec<String>,
    ids: HashMap<String, u32>,
}

fn vocab() -> &'static Vocab {
    static VOCAB: OnceLock<Vocab> = OnceLock::new();
    VOCAB.get_or_init(|| {
        // Two consonant-vowel syllables: 70 x 70 = 4900 distinct pronounceable words.
        const C: &[u8] = b"bdfgklmnprstvz";
        const V: &[u8] = b"aeiou";
        let syllable = |i: u32| {
            let i = i as usize;
            [C[i % C.len()] as char, V[(i / C.len()) % V.len()] as char]
        };
        let mut spaced = Vec::with_capacity(VOCAB_WORDS as usize);
        let mut ids = HashMap::with_capacity(VOCAB_WORDS as usize);
        for i in 0..VOCAB_WORDS {
            let mut w = String::with_capacity(5);
            w.push(' ');
            w.extend(syllable(i % 70));
            w.extend(syllable(i / 70));
            ids.insert(w[1..].to_string(), i);
            spaced.push(w);
        }
        Vocab { spaced, ids }
    })
}

/// Builds the vocabulary now, so the first request does not pay for it (it would show as TTFT).
pub fn warm_up() {
    vocab();
}

/// Number of tokens in `text` under the rule above.
pub fn count(text: &str) -> u32 {
    text.split_whitespace().count() as u32
}

/// The id of one word: its vocabulary index, or a stable hash above the vocabulary.
pub fn token_id(word: &str) -> u32 {
    match vocab().ids.get(word) {
        Some(&id) => id,
        None => VOCAB_WORDS + (fnv1a(word.as_bytes()) % u64::from(VOCAB_SIZE - VOCAB_WORDS)) as u32,
    }
}

/// Token ids of `text`.
pub fn tokenize(text: &str) -> Vec<u32> {
    text.split_whitespace().map(token_id).collect()
}

/// The words of `text`, for `/tokenize`'s `token_strs`.
pub fn token_strs(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// Text for token ids: vocabulary words (ids wrap modulo the vocabulary), space-separated, so
/// `count(detokenize(ids)) == ids.len()`.
pub fn detokenize(ids: &[u64]) -> String {
    let v = vocab();
    let mut out = String::new();
    for id in ids {
        out.push_str(&v.spaced[(id % u64::from(VOCAB_WORDS)) as usize]);
    }
    out.trim_start().to_string()
}

/// The generated token at `position` for a request whose text seed is `seed`: ` word`.
pub fn generated(seed: u64, position: u32) -> &'static str {
    let i = splitmix64(seed ^ u64::from(position).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    &vocab().spaced[(i % u64::from(VOCAB_WORDS)) as usize]
}

/// FNV-1a, 64 bit: a stable hash for prompts and words (std's hasher is randomized per process).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// SplitMix64: the one small deterministic mixer used for seeds, faults and acceptance draws.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in [0, 1) from a 64-bit hash.
pub fn unit(hash: u64) -> f64 {
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_tokens() {
        assert_eq!(count("a b  c\n d"), 4);
        assert_eq!(count(""), 0);
        assert_eq!(tokenize("hello world hello").len(), 3);
        assert_eq!(tokenize("x y")[0], tokenize("x")[0]);
    }

    #[test]
    fn generated_text_tokenizes_back() {
        let text: String = (0..100).map(|p| generated(42, p)).collect();
        assert_eq!(count(&text), 100);
        let again: String = (0..100).map(|p| generated(42, p)).collect();
        assert_eq!(text, again);
        let other: String = (0..100).map(|p| generated(43, p)).collect();
        assert_ne!(text, other);
        // Vocabulary words map to their own ids and back.
        let ids: Vec<u64> = tokenize(&text).into_iter().map(u64::from).collect();
        assert!(ids.iter().all(|&i| i < u64::from(VOCAB_WORDS)));
        assert_eq!(detokenize(&ids), text.trim_start());
    }

    #[test]
    fn vocabulary_is_distinct() {
        assert_eq!(vocab().ids.len(), VOCAB_WORDS as usize);
    }
}
