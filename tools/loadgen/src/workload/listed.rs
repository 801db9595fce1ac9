//! Listed prompts (`--prompts FILE` or `builtin`): taken in a seeded shuffled order, each with
//! its own `max_tokens` unless `--max-tokens` overrides it.

use super::prompts::Entry;
use super::{Prepared, Unit, Workload};
use crate::client::body::Bodies;
use std::sync::Arc;

pub struct Listed {
    pub entries: Arc<Vec<Entry>>,
    /// Request `seq` gets `entries[order[seq % len]]`.
    pub order: Arc<Vec<usize>>,
}

impl Workload for Listed {
    fn next(&self, seq: u64, id: u64, bodies: &Arc<Bodies>) -> Unit {
        let e = &self.entries[self.order[(seq % self.order.len() as u64) as usize]];
        let max_tokens = bodies.max_for(e.max_tokens);
        Unit::Request(Prepared {
            body: bodies.build(id, &e.prompt, max_tokens),
            target: None,
            max_tokens,
            at_s: None,
            question: None,
        })
    }
}
