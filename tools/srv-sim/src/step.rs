//! The shapes the engine, its cost model, its metrics and its self-report share: a request as
//! the engine receives it ([`Submit`]), the work of one step ([`StepShape`]), what a step costs
//! ([`CostModel`], [`StepCounts`]) and the work counters `/metrics` shows ([`EstCounters`]).
//! They sit below every module that uses them, so the engine, the metrics and the self-report
//! each depend on this file and not on one another.

use crate::progress::Progress;
use servbench::presets::StepWork;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request handed to the engine.
#[derive(Debug)]
pub struct Submit {
    pub progress: Arc<Progress>,
    pub prompt_tokens: u32,
    /// Leading prompt tokens found in the prefix cache (the `prefix` module): no prefill for them.
    pub cached: u32,
    pub arrival: Instant,
    /// The request's id as the client sees it (the answer's `id`), where the engine logs it
    /// (SGLang's time stats).
    pub rid: Option<String>,
    /// An embeddings request (`/v1/embeddings`): its one token marks the end of its prefill and
    /// is no generated output (in no generation counter, TTFT or ITL histogram).
    pub pooling: bool,
    /// The LoRA adapter it names (an index into `--lora`), `None` for the base model.
    pub adapter: Option<u32>,
}

/// The work in one engine step, as the cost model sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepShape {
    /// Requests taking part in the step (decoding or prefilling): pipeline micro-batches split these.
    pub seqs: u32,
    /// Decode sequences, prompt-chunk tokens (plus speculative verify tokens beyond the first of
    /// each decoding sequence) and KV tokens read, in the shared roofline's terms.
    pub work: StepWork,
    /// (prompt token, earlier token) pairs prefill attention computes this step: a chunk of c
    /// tokens after p already prefilled attends to c x (p + (c+1)/2) positions.
    pub prefill_attention_pairs: u64,
    /// Micro-batches the step may split into at most: a pipelined round launched while others
    /// are in flight has only the free ones (None: as many as the pipeline has stages).
    pub max_micro_batches: Option<u32>,
}

impl StepShape {
    /// Tokens pushed through the model this step.
    pub fn tokens(&self) -> u32 {
        self.work.decode_seqs + self.work.prefill_tokens
    }

    /// The sequences as the pipeline splits them: at most one micro-batch each, and no more
    /// micro-batches than the step may use.
    pub fn split_seqs(&self) -> u32 {
        self.max_micro_batches
            .map_or(self.seqs, |cap| self.seqs.min(cap.max(1)))
    }
}

/// Estimated work of one step per GPU, from the cost model.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepCounts {
    pub flops_per_gpu: f64,
    pub read_bytes_per_gpu: f64,
    pub write_bytes_per_gpu: f64,
}

/// Duration of one engine step for a shape of work.
pub trait CostModel: Send {
    fn step_time(&self, shape: &StepShape) -> Duration;
    /// The step's FLOPs and bytes per GPU (`--enable-mfu-metrics`); none by default.
    fn step_counts(&self, _shape: &StepShape) -> StepCounts {
        StepCounts::default()
    }
    /// Micro-batches one step (a pipelined round) holds at most: the pipeline's stages (1
    /// without PP). Each has the engine's whole token budget, as each of vLLM's in-flight
    /// batches and each of SGLang's PP micro-batches is scheduled with its own.
    fn micro_batches(&self) -> u32 {
        1
    }
}

/// The counters `/metrics` shows with `--enable-mfu-metrics`: the steps' [`StepCounts`] so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EstCounters {
    pub flops: f64,
    pub read_bytes: f64,
    pub write_bytes: f64,
}

impl EstCounters {
    /// Adds one step's work.
    pub fn add(&mut self, step: StepCounts) {
        self.flops += step.flops_per_gpu;
        self.read_bytes += step.read_bytes_per_gpu;
        self.write_bytes += step.write_bytes_per_gpu;
    }
}
