//! The roofline cost model of one engine step, built on the shared arithmetic in
//! `servbench::presets` (bytes over bandwidth against FLOPs over compute per GPU of the TP group,
//! two allreduces per layer over the card's topology or a measured curve, MoE reading only
//! touched experts) plus what an engine adds: pipeline micro-batches with their bubble, prefill
//! attention, and a fixed per-step overhead.

use crate::step::{CostModel, StepCounts, StepShape};
use servbench::presets::{self, Comm, Deployment, StepWork, WeightFormat};
use servbench::record::{AllreduceAlgo, Extra, Labels, SCHEMA_VERSION, SimPlanRecord, now_ts};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Roofline {
    pub dep: Deployment,
    pub step_overhead: Duration,
    /// Prefill's achieved FLOP rate over decode's (1 unless a calibration card says otherwise):
    /// prefill chunks' compute time is divided by it.
    pub prefill_efficiency: f64,
    /// Seconds per KV-cache token a step's attention reads, beyond the roofline's bytes and
    /// FLOPs (0 unless a calibration from a step grid says otherwise).
    pub attention_s_per_kv_token: f64,
    /// The server in front of the engine (zero unless a calibration from a step grid says
    /// otherwise): each request's time from the client to the queue and back.
    pub front_end: crate::frontend::FrontEnd,
}

/// What `--dry-run`'s record is computed for, beside the cost model itself.
#[derive(Debug, Clone, Default)]
pub struct PlanInputs {
    /// Context length of the decode figures.
    pub context: u64,
    pub data_parallel: u32,
    pub max_model_len: u32,
    /// Requests running at once per engine, after the micro-batch cap.
    pub max_running: u32,
    pub pp_max_micro_batch: Option<u32>,
    pub labels: Labels,
}

impl Roofline {
    /// Seconds for one step (a pipelined round: `Deployment::round_cost`), by cause, plus the
    /// attention FLOPs of prefill chunks.
    pub fn step_cost(&self, shape: &StepShape) -> presets::StepCost {
        let dep = &self.dep;
        let micro = dep.micro_batches(shape.split_seqs());
        let round = dep.round_cost(shape.split_seqs(), shape.work);
        let prefill_attention = 4.0
            * f64::from(dep.model.heads)
            * f64::from(dep.model.head_dim)
            * f64::from(dep.model.layers)
            * (shape.prefill_attention_pairs as f64 / f64::from(micro))
            / f64::from(dep.layout.tp.max(1))
            / dep.rates.flops(WeightFormat::Bf16);
        // Linear FLOPs go with tokens: the prefill chunks' share of them runs at its efficiency.
        let tokens = f64::from(shape.work.decode_seqs + shape.work.prefill_tokens).max(1.0);
        let prefill_share = f64::from(shape.work.prefill_tokens) / tokens;
        // Measured GEMMs were timed at the step's token count: no efficiency applies to them,
        // and compute_s then holds attention only.
        let slower = match dep.gemm {
            presets::Gemm::Model => 1.0 + prefill_share * (1.0 / self.prefill_efficiency - 1.0),
            presets::Gemm::Measured { .. } => 1.0,
        };
        presets::StepCost {
            compute_s: round.compute_s * slower + prefill_attention / self.prefill_efficiency,
            ..round
        }
    }

    /// The step's duration in seconds, overhead included.
    pub fn step_s(&self, shape: &StepShape) -> f64 {
        self.step_cost(shape).total_s()
            + self.step_overhead.as_secs_f64()
            + shape.work.kv_tokens as f64 * self.attention_s_per_kv_token
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
            max_micro_batches: None,
        }
    }

    /// GPU memory per GPU the engine may use (the shared fit logic: summarize's advice reads
    /// the same).
    pub fn usable_bytes_per_gpu(&self) -> f64 {
        self.dep.usable_bytes_per_gpu()
    }

    /// Weight bytes each GPU holds.
    pub fn weight_bytes_per_gpu(&self) -> f64 {
        self.dep.weight_bytes_per_gpu()
    }

    /// KV-cache tokens that fit beside the weights (None: the weights alone do not fit).
    pub fn kv_capacity_tokens(&self) -> Option<u64> {
        self.dep.kv_capacity_tokens()
    }

    /// Why this layout cannot serve `max_model_len`-token requests, if it cannot.
    pub fn fit_problem(&self, max_model_len: u32) -> Option<String> {
        self.dep.fit_problem(max_model_len)
    }

    /// The `sim_plan` record `--dry-run` writes, for one stream.
    pub fn plan(&self, inputs: PlanInputs) -> SimPlanRecord {
        let dep = &self.dep;
        let context = inputs.context;
        let one = self.step_cost(&Self::decode_shape(1, context));
        let step_s = self.step_s(&Self::decode_shape(1, context));
        let pp = f64::from(dep.layout.pp.max(1));
        let tp = dep.layout.tp.max(1);
        let allreduce = dep.allreduce(dep.model.allreduce_bytes(1));
        let fit_note = self.fit_problem(inputs.max_model_len);
        SimPlanRecord {
            v: SCHEMA_VERSION,
            ts: now_ts(),
            labels: inputs.labels,
            model: dep.model.name.clone(),
            hardware: dep.hw.name.clone(),
            tp: dep.layout.tp,
            pp: dep.layout.pp,
            data_parallel: inputs.data_parallel,
            max_model_len: inputs.max_model_len,
            weight_bytes: dep.model.weight_bytes_total(),
            weight_bytes_per_gpu: self.weight_bytes_per_gpu(),
            active_weight_bytes_per_token: dep.model.weight_bytes_read(1),
            kv_bytes_per_token: dep.model.kv_bytes_per_token(),
            kv_cache_tokens: self.kv_capacity_tokens(),
            context_tokens: context,
            decode_step_ms: step_s * 1e3,
            decode_memory_ms: one.memory_s * 1e3,
            decode_compute_ms: one.compute_s * 1e3,
            decode_comm_ms: one.comm_s * 1e3,
            step_overhead_ms: self.step_overhead.as_secs_f64() * 1e3,
            roofline_tok_s: dep.single_stream_tok_s(context),
            single_stream_tok_s: 1.0 / step_s,
            pipeline_bubble_at_batch_1: (pp - 1.0) / pp,
            compute_bound_batch: dep.compute_bound_batch(context),
            weight_format: dep.model.weight_formats(),
            usable_bytes_per_gpu: self.usable_bytes_per_gpu(),
            fits: fit_note.is_none(),
            fit_note,
            max_running_requests: inputs.max_running,
            pp_max_micro_batch: inputs.pp_max_micro_batch,
            memory_bound_tok_s: dep.memory_bound_tok_s(1, context),
            allreduces_per_step: if tp > 1 {
                dep.model.allreduces_per_step()
            } else {
                0
            },
            allreduce_bytes: dep.model.allreduce_bytes(1),
            allreduce_us: allreduce.us,
            allreduce_algo: if tp > 1 {
                allreduce.algo.wire()
            } else {
                AllreduceAlgo::NoAllreduce
            },
            comm_level: (tp > 1 && matches!(dep.comm, Comm::Model | Comm::Topology { .. }))
                .then(|| dep.hw.interconnect.level_for(tp).name.clone()),
            comm_source: dep.comm.source(),
            compute_source: dep.gemm.source(),
            decode_gemm_ms: matches!(dep.gemm, presets::Gemm::Measured { .. })
                .then_some(one.gemm_s * 1e3),
            spec_tokens_per_step: None,
            spec_single_stream_tok_s: None,
            extra: Extra::new(),
        }
    }
}

impl CostModel for Roofline {
    fn step_time(&self, shape: &StepShape) -> Duration {
        // Cards and measured curves are checked at load; a step time that still comes out
        // negative, NaN or past Duration's range is a bug, and the panic ends srv-sim
        // (engine::ExitOnPanic) instead of leaving every request hanging.
        let s = self.step_s(shape);
        Duration::try_from_secs_f64(s).unwrap_or_else(|e| {
            panic!(
                "the cost model gave a step of {s} s for {} sequences ({e}): a card or --comm-from value is out of range",
                shape.seqs
            )
        })
    }

    /// The step's compute and memory times at the card's rates, per GPU of one stage: its
    /// FLOPs at the weight format's peak and its bytes at the memory bandwidth, so MFU and MBU
    /// over a point are those times' shares of it (the weights' included under --gemm-from).
    fn step_counts(&self, shape: &StepShape) -> StepCounts {
        // Measured GEMMs still did the weights' FLOPs and reads: count them as the roofline
        // does, so MFU and MBU say the same work whoever timed it.
        let cost = match &self.dep.gemm {
            presets::Gemm::Model => self.step_cost(shape),
            presets::Gemm::Measured { .. } => {
                let mut modelled = self.clone();
                modelled.dep.gemm = presets::Gemm::Model;
                modelled.step_cost(shape)
            }
        };
        let stages = f64::from(self.dep.layout.pp.max(1));
        StepCounts {
            flops_per_gpu: cost.compute_s * self.dep.rates.flops(self.dep.model.weight_format)
                / stages,
            read_bytes_per_gpu: cost.memory_s * self.dep.rates.mem_bw_gbps * 1e9 / stages,
            write_bytes_per_gpu: 0.0,
        }
    }

    fn micro_batches(&self) -> u32 {
        self.dep.layout.pp.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servbench::presets::Layout;

    fn roofline(model: &str, hw: &str, tp: u32, pp: u32) -> Roofline {
        Roofline {
            dep: Deployment::new(
                presets::load_model(model).unwrap(),
                presets::load_hardware(hw).unwrap(),
                Layout { tp, pp },
            ),
            step_overhead: Duration::ZERO,
            prefill_efficiency: 1.0,
            attention_s_per_kv_token: 0.0,
            front_end: Default::default(),
        }
    }

    #[test]
    fn batch_one_matches_the_shared_roofline() {
        for (tp, pp) in [(1, 1), (2, 1), (1, 2), (2, 2)] {
            let r = roofline("llama-3.1-70b", "h200", tp, pp);
            let ours = r.step_s(&Roofline::decode_shape(1, 100));
            let shared = r.dep.decode_step(1, 100).total_s();
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
    fn a_round_with_fewer_free_micro_batches_splits_its_work_over_them() {
        // A PP8 round launched while one micro-batch is in flight has 7 for its 63 prompts.
        let pp8 = roofline("llama-3.1-70b", "h200", 1, 8);
        let mut shape = StepShape {
            seqs: 63,
            work: StepWork {
                decode_seqs: 0,
                prefill_tokens: 63 * 512,
                kv_tokens: 0,
            },
            prefill_attention_pairs: 0,
            max_micro_batches: None,
        };
        let eight = pp8.step_s(&shape);
        shape.max_micro_batches = Some(7);
        let seven = pp8.step_s(&shape);
        // Compute-bound: 4608 tokens a micro-batch instead of 4032, a round 8/7 as long.
        assert!(
            (seven / eight - 8.0 / 7.0).abs() < 0.01,
            "{seven} vs {eight}"
        );
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
        let big = roofline("llama-3.1-70b", "h100", 1, 1);
        assert!(big.kv_capacity_tokens().is_none());
        assert!(big.fit_problem(1024).unwrap().contains("raise --tp"));
        // FP8 Kimi-K2 does not fit 8 x 96 GB; NVFP4 experts do, with room for long requests.
        assert!(
            roofline("kimi-k2", "rtx-pro-6000", 8, 1)
                .fit_problem(1024)
                .is_some()
        );
        assert_eq!(
            roofline("kimi-k2-nvfp4", "rtx-pro-6000", 8, 1).fit_problem(131_072),
            None
        );
        // Weights fit, but not one max-length request's KV.
        let tight = roofline("llama-3.1-70b", "h100", 2, 1);
        assert!(
            tight
                .fit_problem(100_000_000)
                .unwrap()
                .contains("--max-model-len")
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
