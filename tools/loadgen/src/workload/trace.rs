//! Trace replay (`--trace FILE`): requests sent at the times a production trace recorded, with
//! its input and output lengths, and prompts that share prefixes where the trace says they did.
//! The file is read by `servbench::load::trace` (its formats, bounds and error lines), the
//! reader srv-sim's `--predict --trace` uses too.
//!
//! Prompts: the words of a block are drawn from a generator seeded by the block's id (and
//! `--seed`), so equal ids give equal text and a partial last block is a prefix of the whole
//! one; rows without ids get words of their own. Each word is one token with the usual BPE
//! tokenizers; the tokens the server adds around a prompt (BOS, a chat template), measured once
//! before the first point, are taken off the last block so the server counts the row's length.

use super::prompts::VOCAB;
use super::{Asked, Budget, Prepared, Unit, Workload};
use crate::client::body::Bodies;
use crate::client::body::PromptText;
use crate::pacing::Load;
use crate::stop::{Stop, until_stopped};
use crate::workload::align::Aligner;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
pub use servbench::load::trace::{Row, Trace, read};
use std::sync::Arc;

/// Salt of the words of a row without hash ids, so they never equal a hash block's.
const UNIQUE: u64 = 0x7261_6e64_6f6d_0001;

/// A trace's prompts as text (loadgen sends words; srv-sim's prediction needs only lengths).
pub trait TracePrompts {
    /// The prompt of row `i`, `overhead` tokens (the server's own around any prompt) shorter
    /// than the row's length, taken off the end so shared prefixes stay whole.
    fn prompt(&self, i: usize, overhead: u32, seed: u64) -> String;
}

impl TracePrompts for Trace {
    fn prompt(&self, i: usize, overhead: u32, seed: u64) -> String {
        let row = &self.rows[i];
        let mut left = row.input_len.saturating_sub(overhead).max(1) as usize;
        let mut out = String::with_capacity(left * 7);
        let words = |rng: &mut StdRng, n: usize, out: &mut String| {
            for _ in 0..n {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(VOCAB[rng.random_range(0..VOCAB.len())]);
            }
        };
        let block = self.block.max(1) as usize;
        for &id in &row.hash_ids {
            if left == 0 {
                break;
            }
            let n = left.min(block);
            let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ id);
            words(&mut rng, n, &mut out);
            left -= n;
        }
        if left > 0 {
            let mut rng = StdRng::seed_from_u64(seed ^ UNIQUE ^ (i as u64).rotate_left(20));
            words(&mut rng, left, &mut out);
        }
        out
    }
}

/// A trace ready to replay: its rows, and how its prompts are made.
pub struct Replay {
    /// `--trace`, as given.
    pub path: String,
    pub trace: Arc<Trace>,
    /// Tokens the server adds around any prompt, taken off each prompt's end.
    pub overhead: u32,
    pub seed: u64,
    /// As rank `.0` of `.1`: this process sends rows `.0`, `.0 + .1`, ... (alone: `(0, 1)`).
    pub rows_of: (u64, u64),
}

impl Workload for Replay {
    /// Row `id` (the phase's `id`-th request) as a request: its prompt, output length and send
    /// time.
    fn next(&self, _seq: u64, id: u64, bodies: &Arc<Bodies>) -> Unit {
        let (rank, world) = self.rows_of;
        let i = ((rank + id * world.max(1)) % self.trace.rows.len() as u64) as usize;
        let row = &self.trace.rows[i];
        let text = self.trace.prompt(i, self.overhead, self.seed);
        let max_tokens = row.output_len.max(1);
        Unit::Request(Prepared {
            body: bodies.build(id, &PromptText::Text(text), max_tokens),
            target: Some(row.input_len),
            max_tokens,
            at_s: Some(row.at_s),
            question: None,
        })
    }

    /// A trace point's budget: its rows, never past the trace's end (`-n` takes the first
    /// rows, `--duration` the rows due within it at the point's speed).
    fn budget(&self, load: &Load, asked: Asked) -> Option<Budget> {
        let Load::Trace { speed, .. } = load else {
            return None;
        };
        let rows = self
            .trace
            .rows_within(asked.duration.map(|d| d.as_secs_f64()), *speed) as u64;
        Some(Budget::Requests(
            asked.requests.map_or(rows, |n| n.min(rows)),
        ))
    }
}

/// Reads `--trace` and learns how many tokens the server adds around a prompt (a short
/// synthetic prompt aligned to its count, less its words), so the rows' lengths hold. Rows
/// the server's `max_model_len` cannot hold are left out. `seed`: the job's (a hash id names
/// the same words on every rank); `rows_of`: this rank's rows.
pub async fn replay(
    path: &str,
    block: u32,
    aligner: &mut Aligner,
    stop: &Stop,
    max_model_len: Option<u32>,
    seed: u64,
    rows_of: (u64, u64),
) -> anyhow::Result<Replay> {
    let mut trace = read(path, block).map_err(servbench::cli::usage)?;
    for note in &trace.notes {
        servbench::cli::warn(note);
    }
    const PROBE: u32 = 64;
    let aligned = until_stopped(stop, async { Ok(aligner.align(PROBE).await) }).await?;
    let overhead = PROBE.saturating_sub(aligned.words.len() as u32);
    if let Some(limit) = max_model_len {
        // The server refuses such a row: it is not built (a prompt of millions of tokens)
        // only to be refused.
        if let Some(note) = trace
            .keep_servable(path, limit)
            .map_err(servbench::cli::usage)?
        {
            servbench::cli::warn(note);
        }
    }
    Ok(Replay {
        path: path.to_string(),
        trace: Arc::new(trace),
        overhead,
        seed,
        rows_of,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_hash_ids_share_token_prefixes() {
        let row = |ids: &[u64], input_len| Row {
            at_s: 0.0,
            input_len,
            output_len: 1,
            hash_ids: ids.to_vec(),
        };
        let t = Trace {
            rows: vec![
                row(&[1, 2, 3], 40),
                row(&[1, 2, 4], 36),
                row(&[1, 5], 20),
                row(&[], 40),
                row(&[], 40),
            ],
            block: 16,
            notes: Vec::new(),
        };
        let words = |i: usize, overhead| -> Vec<String> {
            t.prompt(i, overhead, 9)
                .split(' ')
                .map(str::to_string)
                .collect()
        };
        let (a, b, c) = (words(0, 0), words(1, 0), words(2, 0));
        assert_eq!((a.len(), b.len(), c.len()), (40, 36, 20));
        assert_eq!(a[..32], b[..32], "blocks 1 and 2 shared");
        assert_ne!(a[32..36], b[32..36], "block 3 differs");
        assert_eq!(a[..16], c[..16]);
        assert_ne!(a[16..20], c[16..20]);
        // A partial block is a prefix of the whole one; the overhead comes off the end.
        assert_eq!(words(0, 4)[..], a[..36]);
        assert_eq!(words(0, 40).len(), 1, "never empty");
        // Rows without ids share nothing with each other.
        assert_ne!(words(3, 0)[..4], words(4, 0)[..4]);
        assert_eq!(t.prompt(0, 0, 9), t.prompt(0, 0, 9), "reproducible");
        assert_ne!(t.prompt(0, 0, 9), t.prompt(0, 0, 10), "seeded");
    }
}
