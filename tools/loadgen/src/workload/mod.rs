//! What a point's requests are made of, behind one small trait the dispatcher does not see
//! through: a [`Workload`] yields the next unit (one request, or a session of turns it runs
//! itself), its budget for a load, and its part of the point's summary. Each workload is one
//! file: `synthetic.rs` (prompts of an aligned token length, prefix groups among them),
//! `listed.rs` (`--prompts`), `trace.rs` (`--trace`), `conversation.rs` (`--turns`), `eval.rs` (`--eval`);
//! `registry.rs` picks the one the flags ask for. Shared material: `prompts.rs` (the
//! vocabulary, synthetic text, the built-in prompts), `prompt_files.rs` (prompt files),
//! `align.rs` (synthetic prompt lengths aligned to the server's token count).

pub mod align;
pub mod conversation;
pub mod eval;
pub mod listed;
pub mod prompt_files;
pub mod prompts;
pub mod registry;
pub mod synthetic;
pub mod trace;

use crate::client::body::Bodies;
use crate::client::inflight::{InFlight, Slot};
use crate::pacing::Load;
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use servbench::load::Budget;

/// `-n` and `--duration`, which a workload with a budget of its own reads its own way.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked {
    pub requests: Option<u64>,
    pub duration: Option<Duration>,
}

/// One request ready to go: its body and what the record should say it asked for.
pub struct Prepared {
    pub body: Bytes,
    pub target: Option<u32>,
    pub max_tokens: u32,
    /// A trace row's send time, seconds from the trace's start.
    pub at_s: Option<f64>,
    /// `--eval`: the question it asks, to judge its answer by.
    pub question: Option<Arc<servbench::load::eval::Expected>>,
}

/// A unit the dispatcher starts: one request, or a session the workload runs itself (holding
/// its slot from its first turn to its last).
pub enum Unit {
    Request(Prepared),
    Session(Box<dyn Session>),
}

/// A future the dispatcher spawns.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A session of several requests: it sends them through `lane` (each finished one to the
/// collector) and frees `slot` when it ends.
pub trait Session: Send {
    fn run(self: Box<Self>, lane: Arc<InFlight>, slot: Slot) -> Task;
}

/// A point's workload.
pub trait Workload: Send + Sync {
    /// The phase's `id`-th unit, the run's `seq`-th (unique across the run).
    fn next(&self, seq: u64, id: u64, bodies: &Arc<Bodies>) -> Unit;

    /// Its own budget for a point of `load`; `None`: the run's rule (`-n`, `--duration`, or
    /// a count from the load).
    fn budget(&self, _load: &Load, _asked: Asked) -> Option<Budget> {
        None
    }

    /// Prefix-cache bookkeeping: the (group, prefix words) the first `n` requests of a phase
    /// warm (request `id` is in group `id % G`); none without groups.
    fn groups_warmed(&self, _n: u64) -> Vec<(u32, usize)> {
        Vec::new()
    }

    /// The point's expected prefix-cache hit rate, of `n` requests of which `cold` found their
    /// group's prefix not cached; `None` where the workload cannot say.
    fn expected_hit_rate(&self, _n: u64, _cold: u64) -> Option<f64> {
        None
    }
}
