//! Synthetic prompts of an aligned token length (`--input-len`), each unique after an optional
//! shared prefix (`--shared-prefix`), or in prefix groups (`--prefix-groups G --prefix-len P`:
//! request `id` of a phase is in group `id % G`, each group with its own prefix).

use super::prompts::Synthetic;
use super::{Prepared, Unit, Workload};
use crate::client::body::Bodies;
use crate::client::body::PromptText;
use std::sync::Arc;

pub struct SyntheticPrompts {
    pub prompt: Arc<Synthetic>,
    pub seed: u64,
    /// `--prefix-groups` (0: none).
    pub groups: u32,
}

impl Workload for SyntheticPrompts {
    fn next(&self, seq: u64, id: u64, bodies: &Arc<Bodies>) -> Unit {
        let group = (self.groups > 0).then(|| (id % u64::from(self.groups)) as u32);
        let text = self.prompt.text(Some(seq), group, self.seed);
        Unit::Request(Prepared {
            body: bodies.build(id, &PromptText::Text(text), bodies.max_tokens),
            target: Some(self.prompt.target_tokens),
            max_tokens: bodies.max_tokens,
            at_s: None,
            question: None,
        })
    }

    fn groups_warmed(&self, n: u64) -> Vec<(u32, usize)> {
        (0..n.min(u64::from(self.groups)))
            .map(|g| (g as u32, self.prompt.shared_prefix_words))
            .collect()
    }

    /// Of `n` requests, all but the `cold` ones find their group's prefix cached, which is
    /// this share of their prompt. Without a shared prefix or groups the prompts are unique:
    /// 0, so a server that reports hits (a rerun of the same `--seed` against a warm cache) is
    /// noticed downstream.
    fn expected_hit_rate(&self, n: u64, cold: u64) -> Option<f64> {
        let s = &self.prompt;
        if self.groups == 0 && s.shared_prefix_words == 0 {
            return (n > 0).then_some(0.0);
        }
        (self.groups > 0 && n > 0).then(|| {
            (n - cold.min(n)) as f64 / n as f64 * s.shared_prefix_words as f64
                / s.words.len().max(1) as f64
        })
    }
}
