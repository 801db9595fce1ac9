//! The roofline cost model of one engine step, built on the shared arithmetic in
//! `servbench::presets` (bytes over bandwidth against FLOPs over compute per GPU of the TP group,
//! two allreduces per layer, MoE reading only touched experts) plus what an engine adds:
//! pipeline micro-batches with their bubble, prefill attention, and a fixed per-step overhead.

use crate::engine::{CostModel, StepShape};
use servbench::presets::{self, Hardware, Layout, ModelCard, StepWork};
use servbench::record::{Extra, Labels, SCHEMA_VERSION, SimPlanRecord, now_ts};
use std::time::Duration;

/// vLLM's default `gpu_memory_utilization`: the share of GPU memory the engine may use.
pub const MEMORY_UTILIZATION: f64 = 0.9;

#[derive(Debug, Clone)]
pub struct Roofline {
    pub model: ModelCard,
    pub hardware: Hardware,
    pub layout: Layout,
    pub step_overhead: Duration,
}

impl Roofline {
    /// Seconds for one step, by cause.
    pub fn step_cost(&self, shape: &StepShape) -> presets::StepCost {
        let pp = self.layout.pp.max(1);
        // Pipeline: the step's sequences split into up to `pp` micro-batches; each crosses every
        // stage in turn, and a stage works on one micro-batch at a time. A round (one token for
        // every sequence) lasts pp stage-times of one micro-batch; with fewer micro-batches
        // than stages, stages idle: the bubble, 1 - micro_batches/pp of the round.
        let micro = shape.seqs.clamp(1, pp);
        let part = StepWork {
            decode_seqs: shape.work.decode_seqs.div_ceil(micro),
            prefill_tokens: shape.work.prefill_tokens.div_ceil(micro),
            kv_tokens: shape.work.kv_tokens.div_ceil(u64::from(micro)),
        };
        let stage = presets::stage_cost(&self.model, &self.hardware, self.layout, part);
        let tokens = part.decode_seqs + part.prefill_tokens;
        let stages = f64::from(pp);
        let prefill_attention = 4.0
            * f64::from(self.model.heads)
            * f64::from(self.model.head_dim)
            * f64::from(self.model.layers)
            * (shape.prefill_attention_pairs as f64 / f64::from(micro))
            / f64::from(self.layout.tp.max(1))
            / self.hardware.flops_for(&self.model);
        let handoffs = (stages - 1.0) * self.hardware.p2p_s(self.model.allreduce_bytes(tokens));
        presets::StepCost {
            memory_s: stage.memory_s * stages,
            compute_s: stage.compute_s * stages + prefill_attention,
            comm_s: stage.comm_s * stages + handoffs,
        }
    }

    /// The step's duration in seconds, overhead included.
    pub fn step_s(&self, shape: &StepShape) -> f64 {
        self.step_cost(shape).total_s() + self.step_overhead.as_secs_f64()
    }

    /// A decode step of `batch` sequences at `context` tokens each.
    pub fn decode_shape(batch: u32, context: u64) -> StepShape {
        StepShape {
            seqs: batch,
            work: StepWork {
                decode_seqs: batch,
                prefill_tokens: 0,
                kv_tokens: u64::from(batch) * context,
            },
            prefill_attention_pairs: 0,
        }
    }

    /// KV-cache tokens that fit beside the weights (None: the weights alone do not fit).
    pub fn kv_capacity_tokens(&self) -> Option<u64> {
        let tp = self.layout.tp.max(1);
        let pp = self.layout.pp.max(1);
        let per_gpu_free = self.hardware.mem_bytes as f64 * MEMORY_UTILIZATION
            - self.model.weight_bytes_total() / f64::from(tp * pp);
        if per_gpu_free <= 0.0 {
            return None;
        }
        // Each GPU holds its stage's layers and its share of the KV heads (replicated past kv_heads).
        let kv_split = f64::from(tp.min(self.model.kv_heads.max(1)));
        let per_gpu_per_token = self.model.kv_bytes_per_token() / f64::from(pp) / kv_split;
        Some((per_gpu_free / per_gpu_per_token) as u64)
    }

    /// The `sim_plan` record `--dry-run` writes, for one stream at `context` tokens, on a
    /// server of `data_parallel` replicas accepting `max_model_len` tokens.
    pub fn plan(
        &self,
        context: u64,
        data_parallel: u32,
        max_model_len: u32,
        labels: Labels,
    ) -> SimPlanRecord {
        let one = self.step_cost(&Self::decode_shape(1, context));
        let step_s = one.total_s() + self.step_overhead.as_secs_f64();
        let pp = f64::from(self.layout.pp.max(1));
        SimPlanRecord {
            v: SCHEMA_VERSION,
            ts: now_ts(),
            labels,
            model: self.model.name.clone(),
            hardware: self.hardware.name.clone(),
            tp: self.layout.tp,
            pp: self.layout.pp,
            data_parallel,
            max_model_len,
            weight_bytes: self.model.weight_bytes_total(),
            weight_bytes_per_gpu: self.model.weight_bytes_total()
                / f64::from(self.layout.tp * self.layout.pp),
            active_weight_bytes_per_token: self.model.weight_bytes_read(1),
            kv_bytes_per_token: self.model.kv_bytes_per_token(),
            kv_cache_tokens: self.kv_capacity_tokens(),
            context_tokens: context,
            decode_step_ms: step_s * 1e3,
            decode_memory_ms: one.memory_s * 1e3,
            decode_compute_ms: one.compute_s * 1e3,
            decode_comm_ms: one.comm_s * 1e3,
            step_overhead_ms: self.step_overhead.as_secs_f64() * 1e3,
            roofline_tok_s: presets::single_stream_tok_s(
                &self.model,
                &self.hardware,
                self.layout,
                context,
            ),
            single_stream_tok_s: 1.0 / step_s,
            pipeline_bubble_at_batch_1: (pp - 1.0) / pp,
            compute_bound_batch: presets::compute_bound_batch(
                &self.model,
                &self.hardware,
                self.layout,
                context,
            ),
            spec_tokens_per_step: None,
            spec_single_stream_tok_s: None,
            extra: Extra::new(),
        }
    }
}

impl CostModel for Roofline {
    fn step_time(&self, shape: &StepShape) -> Duration {
        Duration::from_secs_f64(self.step_s(shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roofline(model: &str, hw: &str, tp: u32, pp: u32) -> Roofline {
        Roofline {
            model: presets::load_model(model).unwrap(),
            hardware: presets::load_hardware(hw).unwrap(),
            layout: Layout { tp, pp },
            step_overhead: Duration::ZERO,
        }
    }

    #[test]
    fn batch_one_matches_the_shared_roofline() {
        for (tp, pp) in [(1, 1), (2, 1), (1, 2), (2, 2)] {
            let r = roofline("llama-3.1-70b", "h200", tp, pp);
            let ours = r.step_s(&Roofline::decode_shape(1, 100));
            let shared = presets::decode_step(&r.model, &r.hardware, r.layout, 1, 100).total_s();
            assert!(
                (ours - shared).abs() < 1e-9,
                "tp{tp} pp{pp}: {ours} vs {shared}"
            );
        }
    }

    #[test]
    fn pipeline_bubble_fills_with_micro_batches() {
        let pp1 = roofline("llama-3.1-8b", "h100", 1, 1);
        let pp4 = roofline("llama-3.1-8b", "h100", 1, 4);
        // Memory-bound: one stream gains nothing from stages.
        let one = Roofline::decode_shape(1, 100);
        assert!(pp4.step_s(&one) >= pp1.step_s(&one));
        // Compute-bound batch: four micro-batches keep four stages busy, ~4x faster per step.
        let big = Roofline::decode_shape(4096, 100);
        let ratio = pp1.step_s(&big) / pp4.step_s(&big);
        assert!(ratio > 3.5, "{ratio}");
    }

    #[test]
    fn kv_capacity_grows_with_gpus_and_fails_when_weights_do_not_fit() {
        let one = roofline("llama-3.1-8b", "h100", 1, 1)
            .kv_capacity_tokens()
            .unwrap();
        let two = roofline("llama-3.1-8b", "h100", 2, 1)
            .kv_capacity_tokens()
            .unwrap();
        assert!(two > 2 * one);
        assert!(
            roofline("llama-3.1-70b", "h100", 1, 1)
                .kv_capacity_tokens()
                .is_none()
        );
    }

    #[test]
    fn moe_step_reads_more_experts_with_more_tokens() {
        let r = roofline("deepseek-v3", "h200", 8, 1);
        let b1 = r.step_cost(&Roofline::decode_shape(1, 100)).memory_s;
        let b64 = r.step_cost(&Roofline::decode_shape(64, 100)).memory_s;
        assert!(b64 > 5.0 * b1, "{b1} {b64}");
    }
}
