//! Prefix caching as vLLM does it: a prompt is cut into blocks of [`BLOCK_TOKENS`] tokens, each
//! full block named by a hash chained over every token before it, so two prompts share a block
//! hash exactly when they share the tokens up to its end. A request's cached tokens are its
//! leading blocks already in the cache; they skip prefill. The cache holds whole blocks, evicts
//! the least recently used past its capacity, and is emptied by `POST /reset_prefix_cache`
//! (vLLM) or `/flush_cache` (SGLang).
//!
//! Simplifications (README "What is modelled"): a request's blocks enter the cache when it
//! arrives, not when its prefill has computed them, so a request arriving while another with
//! the same prefix is still prefilling hits too; cached blocks still count in the KV budget of
//! every request that uses them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Tokens per cache block (vLLM's default `--block-size`).
pub const BLOCK_TOKENS: u32 = 16;

/// A cache holding at most this many tokens when no KV budget bounds it (fixed-latency mode).
pub const UNBOUNDED_TOKENS: u64 = 1 << 22;

/// The chained hashes of a prompt's full blocks, from its token hashes in order (the partial
/// last block is never cached, as in vLLM).
pub fn block_hashes(tokens: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut out = Vec::new();
    let mut h: u64 = 0x5eed_b10c;
    let mut n = 0u32;
    for t in tokens {
        h = crate::tokens::splitmix64(h ^ t);
        n += 1;
        if n == BLOCK_TOKENS {
            out.push(h);
            n = 0;
        }
    }
    out
}

/// The block hashes of a text under srv-sim's tokenization rule (a token is a word).
pub fn text_blocks(text: &str) -> Vec<u64> {
    block_hashes(
        text.split_whitespace()
            .map(|w| crate::tokens::fnv1a(w.as_bytes())),
    )
}

/// One engine's prefix cache and its counters (vLLM's `prefix_cache_queries`/`hits`, in tokens).
#[derive(Debug)]
pub struct PrefixCache {
    /// Block hash to the stamp of its last use.
    blocks: HashMap<u64, u64>,
    /// Stamp to block hash: the oldest first, for eviction.
    lru: BTreeMap<u64, u64>,
    clock: u64,
    capacity_blocks: usize,
    /// Prompt tokens looked up.
    pub queries: u64,
    /// Of those, tokens found cached.
    pub hits: u64,
    /// Times the cache was emptied on request.
    pub resets: u64,
    /// Cached over prompt tokens of the latest request (SGLang's `cache_hit_rate` gauge is the
    /// latest prefill batch's).
    pub last_hit_rate: f64,
}

impl PrefixCache {
    /// A cache of at most `capacity_tokens` tokens (whole blocks); 0 caches nothing.
    pub fn new(capacity_tokens: u64) -> PrefixCache {
        PrefixCache {
            blocks: HashMap::new(),
            lru: BTreeMap::new(),
            clock: 0,
            capacity_blocks: (capacity_tokens / u64::from(BLOCK_TOKENS)) as usize,
            queries: 0,
            hits: 0,
            resets: 0,
            last_hit_rate: 0.0,
        }
    }

    /// A request of `prompt_tokens` tokens with these block hashes arrives: returns its cached
    /// tokens (its leading blocks found, at most `prompt_tokens - 1`: the last prompt token is
    /// always computed, it yields the first output token) and caches all of its blocks.
    pub fn admit(&mut self, blocks: &[u64], prompt_tokens: u32) -> u32 {
        self.queries += u64::from(prompt_tokens);
        let found = blocks
            .iter()
            .take_while(|b| self.blocks.contains_key(b))
            .count() as u32;
        let usable = prompt_tokens.saturating_sub(1) / BLOCK_TOKENS;
        let cached = found.min(usable) * BLOCK_TOKENS;
        self.hits += u64::from(cached);
        self.last_hit_rate = f64::from(cached) / f64::from(prompt_tokens.max(1));
        for &b in blocks {
            self.touch(b);
        }
        cached
    }

    fn touch(&mut self, block: u64) {
        if self.capacity_blocks == 0 {
            return;
        }
        self.clock += 1;
        if let Some(old) = self.blocks.insert(block, self.clock) {
            self.lru.remove(&old);
        }
        self.lru.insert(self.clock, block);
        while self.blocks.len() > self.capacity_blocks {
            let Some((_, oldest)) = self.lru.pop_first() else {
                break;
            };
            self.blocks.remove(&oldest);
        }
    }

    /// Empties the cache (the counters stay: they are Prometheus counters).
    pub fn reset(&mut self) {
        self.blocks.clear();
        self.lru.clear();
        self.resets += 1;
    }
}

/// Looks a request up in engine `engine`'s cache (and caches it): its cached tokens (0 when
/// prefix caching is off: no caches).
pub fn admit(caches: &[Mutex<PrefixCache>], engine: usize, blocks: &[u64], tokens: u32) -> u32 {
    caches.get(engine).map_or(0, |c| {
        c.lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(blocks, tokens)
    })
}

/// Empties every engine's cache (`/reset_prefix_cache`, `/flush_cache`).
pub fn reset_all(caches: &[Mutex<PrefixCache>]) {
    for c in caches {
        c.lock().unwrap_or_else(|p| p.into_inner()).reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(prefix: &str, n: usize, tail: &str) -> String {
        let mut s: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
        s.push(tail.to_string());
        s.join(" ")
    }

    #[test]
    fn shared_prefixes_hit_in_whole_blocks_and_reset_empties() {
        let mut c = PrefixCache::new(1 << 20);
        // 40 shared words, then a different tail: two full shared blocks (32 tokens).
        let a = words("w", 40, "a");
        let b = words("w", 40, "b");
        assert_eq!(c.admit(&text_blocks(&a), 41), 0);
        assert_eq!(c.admit(&text_blocks(&b), 41), 32);
        assert_eq!((c.queries, c.hits), (82, 32));
        // The same prompt again: every full block, but never the last token.
        let exact = words("x", 31, "y");
        c.admit(&text_blocks(&exact), 32);
        assert_eq!(c.admit(&text_blocks(&exact), 32), 16);
        c.reset();
        assert_eq!(c.admit(&text_blocks(&b), 41), 0);
        assert_eq!(c.resets, 1);
    }

    #[test]
    fn a_block_matches_only_after_an_equal_prefix() {
        let mut c = PrefixCache::new(1 << 20);
        let a = words("w", 32, "z");
        let shifted = format!("q {a}");
        c.admit(&text_blocks(&a), 33);
        assert_eq!(c.admit(&text_blocks(&shifted), 34), 0);
    }

    #[test]
    fn least_recently_used_blocks_leave_first() {
        // Room for two blocks.
        let mut c = PrefixCache::new(32);
        let a = text_blocks(&words("a", 16, "."));
        let b = text_blocks(&words("b", 16, "."));
        let d = text_blocks(&words("d", 16, "."));
        c.admit(&a, 17);
        c.admit(&b, 17);
        c.admit(&a, 17); // a is now the most recent
        c.admit(&d, 17); // evicts b
        assert_eq!(c.admit(&a, 17), 16);
        assert_eq!(c.admit(&b, 17), 0);
        assert_eq!(PrefixCache::new(0).admit(&a, 17), 0);
    }
}
