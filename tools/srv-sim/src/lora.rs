//! `--lora NAME,... --max-loras N --lora-swap DUR`: LoRA adapters served under their own model
//! names, as vLLM's `--lora-modules` serves them, with vLLM's two limits that make an adapter
//! mix cost time: a batch holds requests of at most `--max-loras` adapters (a request of
//! another waits, and requests behind it are admitted past it), and the engine's GPU has
//! that many adapter slots, an LRU of the adapters loaded; a batch that needs an adapter not
//! loaded first copies it in, `--lora-swap` per adapter, which lengthens that step (and, with
//! fixed latencies, that request's TTFT).
//!
//! The swap's default, [`DEFAULT_SWAP`]: a rank-16 adapter on every linear layer of an 8B Llama
//! (32 layers x 16 x (4096+4096 + 4096+1024 + 4096+1024 + 4096+4096 + 2 x (4096+14336) +
//! 14336+4096) = 42M parameters, 84 MB in BF16) copied host to GPU over PCIe Gen4 x16 at about
//! 25 GB/s: 3.4 ms, rounded up for the copy's set-up. An adapter read from disk first (vLLM's
//! CPU cache missed) costs more: give `--lora-swap` the figure of the box at hand.

use std::time::Duration;

/// `--lora-swap`'s default (the module's note says where it comes from).
pub const DEFAULT_SWAP: Duration = Duration::from_millis(4);

/// `--max-loras`' default: vLLM's.
pub const DEFAULT_MAX_LORAS: u32 = 1;

/// The request's `model`: the served model (`Some(None)`), an adapter (`Some(Some(k))`, its
/// index in `--lora`), or nothing served (`None`: 404, as vLLM answers).
pub fn named(model: &str, served: &str, adapters: &[String]) -> Option<Option<u32>> {
    if model == served {
        return Some(None);
    }
    let k = adapters.iter().position(|a| a == model)?;
    Some(Some(k as u32))
}

/// An engine's adapter slots: which adapters are loaded, and which the batch being formed
/// holds.
#[derive(Debug, Clone)]
pub struct Slots {
    max: usize,
    swap: Duration,
    /// (adapter, the load round it was last used in): at most `max`.
    loaded: Vec<(u32, u64)>,
    round: u64,
    /// The adapters of the batch being formed, each once.
    active: Vec<u32>,
    /// Adapters copied in so far.
    pub swaps: u64,
}

impl Slots {
    pub fn new(max_loras: u32, swap: Duration) -> Slots {
        let max = max_loras.max(1) as usize;
        Slots {
            max,
            swap,
            loaded: Vec::with_capacity(max),
            round: 0,
            active: Vec::with_capacity(max),
            swaps: 0,
        }
    }

    /// Starts forming a batch: the adapters of the requests already in it (`None`: the base
    /// model, which needs no slot).
    pub fn begin(&mut self, adapters: impl Iterator<Item = Option<u32>>) {
        self.active.clear();
        for a in adapters.flatten() {
            if !self.active.contains(&a) {
                self.active.push(a);
            }
        }
    }

    /// Whether a request of `adapter` may join the batch (vLLM: its adapter is in it already,
    /// or the batch has fewer than `--max-loras`); it joins when it may.
    pub fn join(&mut self, adapter: Option<u32>) -> bool {
        let Some(a) = adapter else { return true };
        if self.active.contains(&a) {
            return true;
        }
        if self.active.len() >= self.max {
            return false;
        }
        self.active.push(a);
        true
    }

    /// Loads the batch's adapters that are not loaded, each into the slot of the adapter least
    /// recently used and not in the batch: the time the copies take.
    pub fn load(&mut self) -> Duration {
        self.round += 1;
        let mut spent = Duration::ZERO;
        for &a in &self.active {
            if let Some(slot) = self.loaded.iter_mut().find(|(l, _)| *l == a) {
                slot.1 = self.round;
                continue;
            }
            let entry = (a, self.round);
            if self.loaded.len() < self.max {
                self.loaded.push(entry);
            } else if let Some(victim) = self
                .loaded
                .iter_mut()
                .filter(|(l, _)| !self.active.contains(l))
                .min_by_key(|(_, used)| *used)
            {
                *victim = entry;
            }
            self.swaps += 1;
            spent += self.swap;
        }
        spent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWAP: Duration = Duration::from_millis(4);

    #[test]
    fn adapters_are_served_under_their_names_beside_the_model() {
        let adapters = ["sql".to_string(), "chat".to_string()];
        assert_eq!(named("base", "base", &adapters), Some(None));
        assert_eq!(named("chat", "base", &adapters), Some(Some(1)));
        assert_eq!(named("other", "base", &adapters), None);
        assert_eq!(named("sql", "base", &[]), None);
    }

    #[test]
    fn a_batch_holds_at_most_max_loras_adapters_and_the_base_model_always() {
        let mut s = Slots::new(2, SWAP);
        s.begin([Some(0), None, Some(0)].into_iter());
        assert!(s.join(Some(1)));
        assert!(!s.join(Some(2)));
        assert!(s.join(Some(0)) && s.join(Some(1)) && s.join(None));
    }

    #[test]
    fn an_adapter_not_loaded_costs_a_swap_and_evicts_the_least_recently_used() {
        let mut s = Slots::new(2, SWAP);
        let batch = |s: &mut Slots, adapters: &[u32]| {
            s.begin(adapters.iter().map(|&a| Some(a)));
            s.load()
        };
        assert_eq!(batch(&mut s, &[0, 1]), SWAP * 2);
        assert_eq!(batch(&mut s, &[1, 0]), Duration::ZERO);
        // 1 was used after 0 was... both in the same round; 0 then alone: 1 is the LRU.
        assert_eq!(batch(&mut s, &[0]), Duration::ZERO);
        assert_eq!(batch(&mut s, &[0, 2]), SWAP);
        assert_eq!(batch(&mut s, &[0]), Duration::ZERO);
        assert_eq!(batch(&mut s, &[1]), SWAP);
        assert_eq!(batch(&mut s, &[2]), SWAP);
        assert_eq!(s.swaps, 5);
    }
}
