//! The roofline of one engine step: bytes that must cross memory (weights once per step, each
//! sequence's KV cache) over bandwidth, against FLOPs over tensor throughput, per GPU of a
//! tensor-parallel group, plus the allreduces (two per layer) and pipeline hand-offs.
//!
//! What it runs on is a [`Deployment`]: a model card on a hardware card in a [`Layout`], with
//! the [`Rates`] the step is limited by (the card's datasheet figures unless measured ones
//! replace them) and a [`Comm`] (the topology model, or a measured allreduce curve).
//! Sources for the formulas: kipply, "Transformer Inference Arithmetic" (2022); Pope et al.,
//! arXiv:2211.05102; Megatron-LM, arXiv:1909.08053 sec. 3; GPipe, arXiv:1811.06965.

use super::cards::{Hardware, ModelCard, WeightFormat};
use super::comm::{Algo, AllreduceCost, MeasuredCurve};
use crate::record::{Labels, label};
use serde::{Deserialize, Serialize};

/// How the model is split over GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Tensor-parallel degree: GPUs sharing every layer.
    pub tp: u32,
    /// Pipeline-parallel degree: stages of consecutive layers.
    pub pp: u32,
}

impl Default for Layout {
    fn default() -> Self {
        Layout { tp: 1, pp: 1 }
    }
}

impl Layout {
    /// The degree label `key` (`tp`, `pp`) gives: None where absent, the value as written
    /// where it is not a whole number of at least 1.
    pub fn degree<'a>(labels: &'a Labels, key: &str) -> Option<Result<u32, &'a str>> {
        labels
            .get(key)
            .map(|v| v.trim().parse().ok().filter(|n| *n >= 1).ok_or(v.as_str()))
    }

    /// The layout the `tp` and `pp` labels name (srv-launch writes both), each 1 where absent
    /// or not a degree; a reader that must refuse a bad label reads [`Layout::degree`].
    pub fn from_labels(labels: &Labels) -> Layout {
        let degree = |key| {
            Layout::degree(labels, key)
                .and_then(Result::ok)
                .unwrap_or(1)
        };
        Layout {
            tp: degree(label::TP),
            pp: degree(label::PP),
        }
    }

    pub fn gpus(&self) -> u32 {
        self.tp.max(1) * self.pp.max(1)
    }
}

/// The rates a step is limited by, per GPU. [`Rates::datasheet`] takes the hardware card's;
/// a measurement (device bandwidth, GEMM throughput) may replace any of them, and `source`
/// then says so.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    pub mem_bw_gbps: f64,
    /// Dense tensor throughput by weight format, TFLOP/s.
    pub bf16_tflops: f64,
    pub fp8_tflops: f64,
    pub fp4_tflops: f64,
    /// `datasheet`, or what was measured and where.
    pub source: String,
}

impl Rates {
    pub fn datasheet(hw: &Hardware) -> Rates {
        Rates {
            mem_bw_gbps: hw.mem_bw_gbps,
            bf16_tflops: hw.tflops(WeightFormat::Bf16),
            fp8_tflops: hw.tflops(WeightFormat::Fp8),
            fp4_tflops: hw.tflops(WeightFormat::Nvfp4),
            source: "datasheet".into(),
        }
    }

    /// FLOP/s for weights stored in `format`.
    pub fn flops(&self, format: WeightFormat) -> f64 {
        1e12 * match format {
            WeightFormat::Bf16 => self.bf16_tflops,
            WeightFormat::Fp8 => self.fp8_tflops,
            WeightFormat::Nvfp4 | WeightFormat::Mxfp4 => self.fp4_tflops,
        }
    }
}

/// Where allreduce times come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Comm {
    /// The hardware card's topology, through NCCL's cost model.
    Model,
    /// A curve collbench measured (a measured curve beats the model), and where it was read.
    Measured { curve: MeasuredCurve, from: String },
    /// The card's model over the levels a host record's topology matrix gives the GPUs of the
    /// TP group (the card's interconnect is replaced by the group's), and what it was read as.
    Topology { from: String },
}

impl Comm {
    /// `model` or `measured: FILE (tcp, 2 ranks, latency mode, mean)`.
    pub fn describe(&self) -> String {
        self.source().to_string()
    }

    /// Where the allreduce times come from (`sim_plan.comm_source`).
    pub fn source(&self) -> crate::record::CommSource {
        use crate::record::CommSource;
        match self {
            Comm::Model => CommSource::Model,
            Comm::Measured { curve, from } => {
                CommSource::Measured(format!("{from} ({})", curve.describe()))
            }
            Comm::Topology { from } => CommSource::Topology(from.clone()),
        }
    }
}

/// Where the GEMM part of a step comes from.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Gemm {
    /// The roofline: weight bytes over bandwidth against FLOPs over peak.
    #[default]
    Model,
    /// collbench's `gemm_step` records (its GEMM time replaces the roofline's), and where
    /// they were read.
    Measured {
        curve: super::GemmCurve,
        from: String,
    },
}

impl Gemm {
    /// Where the GEMM times come from (`sim_plan.compute_source`).
    pub fn source(&self) -> crate::record::ComputeSource {
        use crate::record::ComputeSource;
        match self {
            Gemm::Model => ComputeSource::Model,
            Gemm::Measured { curve, from } => {
                ComputeSource::Measured(format!("{from} ({})", curve.describe()))
            }
        }
    }
}

/// The work of one engine step (or micro-batch) on one pipeline stage.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepWork {
    /// Sequences producing one token each (decode).
    pub decode_seqs: u32,
    /// Prompt tokens processed this step (chunked prefill).
    pub prefill_tokens: u32,
    /// KV-cache tokens read by attention, summed over the step's sequences.
    pub kv_tokens: u64,
}

/// The time one step takes, by cause, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct StepCost {
    /// Bytes moved per GPU over its memory bandwidth.
    pub memory_s: f64,
    /// FLOPs per GPU over its tensor throughput.
    pub compute_s: f64,
    /// Tensor-parallel allreduces (and pipeline hand-offs).
    pub comm_s: f64,
    /// Measured GEMMs (`Gemm::Measured`; 0 otherwise): the weights' bytes and FLOPs are then
    /// out of `memory_s` and `compute_s`, which hold attention over the KV cache only.
    pub gemm_s: f64,
}

impl StepCost {
    /// Roofline: memory and compute overlap, communication and measured GEMMs do not.
    pub fn total_s(&self) -> f64 {
        self.gemm_s + self.memory_s.max(self.compute_s) + self.comm_s
    }

    pub fn compute_bound(&self) -> bool {
        self.compute_s > self.memory_s
    }
}

impl ModelCard {
    /// KV-cache bytes per token of context (all layers).
    pub fn kv_bytes_per_token(&self) -> f64 {
        let per_layer = self.kv_elems_per_layer.map_or(
            2.0 * f64::from(self.kv_heads) * f64::from(self.head_dim),
            f64::from,
        );
        f64::from(self.layers) * per_layer * self.kv_bytes
    }

    /// GPUs of a TP group the KV cache splits over: KV heads split while tp <= kv_heads and
    /// are replicated beyond; a latent cache (MLA) is shared by all heads, so every rank holds
    /// it whole.
    pub fn kv_split(&self, tp: u32) -> f64 {
        if self.kv_elems_per_layer.is_some() {
            1.0
        } else {
            f64::from(tp.max(1).min(self.kv_heads.max(1)))
        }
    }

    fn routed_params_per_expert_layer(&self) -> f64 {
        self.moe
            .as_ref()
            .map_or(0.0, |m| f64::from(m.moe_layers) * m.expert_params)
    }

    /// Parameters that are always used (everything but routed experts).
    pub fn dense_params(&self) -> f64 {
        match &self.moe {
            None => self.params,
            Some(m) => self.params - self.routed_params_per_expert_layer() * f64::from(m.experts),
        }
    }

    /// Parameters one token uses.
    pub fn active_params(&self) -> f64 {
        match &self.moe {
            None => self.params,
            Some(m) => {
                self.dense_params()
                    + self.routed_params_per_expert_layer() * f64::from(m.experts_per_token)
            }
        }
    }

    /// The format of the routed experts.
    pub fn expert_format(&self) -> WeightFormat {
        self.expert_format.unwrap_or(self.weight_format)
    }

    /// `fp8`, or `fp8 + nvfp4 experts`.
    pub fn formats(&self) -> String {
        self.weight_formats().to_string()
    }

    /// The weights' format, and the experts' where it differs (`sim_plan.weight_format`).
    pub fn weight_formats(&self) -> crate::record::WeightFormats {
        let name = |f: WeightFormat| crate::record::WeightFormatName::parse(f.name());
        crate::record::WeightFormats {
            weights: name(self.weight_format),
            experts: match self.expert_format {
                Some(e) if e != self.weight_format && self.moe.is_some() => Some(name(e)),
                _ => None,
            },
        }
    }

    /// Expected distinct routed experts per MoE layer that `tokens` tokens touch, with uniform
    /// routing: E x (1 - (1 - k/E)^tokens).
    pub fn experts_touched(&self, tokens: u32) -> f64 {
        match &self.moe {
            None => 0.0,
            Some(m) => {
                let e = f64::from(m.experts);
                let k = f64::from(m.experts_per_token);
                e * (1.0 - (1.0 - k / e).powi(tokens as i32))
            }
        }
    }

    fn bytes(&self, dense_params: f64, expert_params: f64) -> f64 {
        dense_params * self.weight_format.bytes_per_weight()
            + expert_params * self.expert_format().bytes_per_weight()
    }

    /// All weight bytes.
    pub fn weight_bytes_total(&self) -> f64 {
        self.bytes(self.dense_params(), self.params - self.dense_params())
    }

    /// Weight bytes a step of `tokens` tokens must read (MoE: only touched experts).
    pub fn weight_bytes_read(&self, tokens: u32) -> f64 {
        let routed = self.routed_params_per_expert_layer() * self.experts_touched(tokens.max(1));
        self.bytes(self.dense_params(), routed)
    }

    /// Tensor-parallel allreduces in one step through every layer: two per layer (Megatron:
    /// after attention and after the MLP), whatever the step's size.
    pub fn allreduces_per_step(&self) -> u32 {
        2 * self.layers
    }

    /// Bytes of one tensor-parallel allreduce for a step of `tokens` tokens.
    pub fn allreduce_bytes(&self, tokens: u32) -> f64 {
        f64::from(tokens) * f64::from(self.hidden) * self.act_bytes
    }
}

/// vLLM's default `gpu_memory_utilization`: the share of GPU memory the engine may use.
pub const MEMORY_UTILIZATION: f64 = 0.9;

/// A model on a machine in a layout: what the roofline is computed for.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    pub model: ModelCard,
    pub hw: Hardware,
    pub layout: Layout,
    pub rates: Rates,
    pub comm: Comm,
    pub gemm: Gemm,
}

impl Deployment {
    /// Datasheet rates and the modelled interconnect.
    pub fn new(model: ModelCard, hw: Hardware, layout: Layout) -> Deployment {
        let rates = Rates::datasheet(&hw);
        Deployment {
            model,
            hw,
            layout,
            rates,
            comm: Comm::Model,
            gemm: Gemm::Model,
        }
    }

    /// `qwen3-32b on rtx-pro-6000 (TP=8)`, with PP when there is any.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} on {} (TP={}",
            self.model.name, self.hw.name, self.layout.tp
        );
        if self.layout.pp > 1 {
            s.push_str(&format!(" PP={}", self.layout.pp));
        }
        s.push(')');
        s
    }

    /// One allreduce of `bytes` over the TP group.
    pub fn allreduce(&self, bytes: f64) -> AllreduceCost {
        let tp = self.layout.tp.max(1);
        if tp <= 1 {
            return AllreduceCost {
                us: 0.0,
                algo: Algo::RingLl,
            };
        }
        match &self.comm {
            Comm::Model | Comm::Topology { .. } => self.hw.interconnect.allreduce(tp, bytes),
            Comm::Measured { curve, .. } => AllreduceCost {
                us: curve.us_at(bytes),
                algo: Algo::Measured,
            },
        }
    }

    /// The pipeline hand-offs of one pass through every stage, in seconds: from stage s's
    /// first GPU to stage s+1's (consecutive placement), each over the level joining them.
    pub fn handoffs_s(&self, bytes: f64) -> f64 {
        let tp = self.layout.tp.max(1);
        (1..self.layout.pp.max(1))
            .map(|s| self.hw.interconnect.p2p_us((s - 1) * tp, s * tp, bytes))
            .sum::<f64>()
            * 1e-6
    }

    /// The cost of one step's work on ONE pipeline stage (1/pp of the layers), per GPU of its
    /// TP group.
    pub fn stage_cost(&self, work: StepWork) -> StepCost {
        let model = &self.model;
        let tp = f64::from(self.layout.tp.max(1));
        let stage = 1.0 / f64::from(self.layout.pp.max(1));
        let tokens = work.decode_seqs + work.prefill_tokens;
        if tokens == 0 {
            return StepCost::default();
        }
        let weight_bytes = model.weight_bytes_read(tokens) * stage / tp;
        let kv_bytes = work.kv_tokens as f64 * model.kv_bytes_per_token() * stage
            / model.kv_split(self.layout.tp);
        // Measured GEMMs cover the weights' reads and FLOPs; attention stays modelled.
        let (weight_bytes, gemm_s) = match &self.gemm {
            Gemm::Model => (weight_bytes, 0.0),
            Gemm::Measured { curve, .. } => (0.0, curve.us_at(tokens, &self.rates) * 1e-6 * stage),
        };
        let memory_s = (weight_bytes + kv_bytes) / (self.rates.mem_bw_gbps * 1e9);
        // 2 FLOPs per parameter per token, each part at its format's rate; attention: QK^T
        // and AV over the KV, each 2 x heads x head_dim FLOPs per cached token per layer.
        let t = f64::from(tokens);
        let dense = 2.0 * model.dense_params() * t / self.rates.flops(model.weight_format);
        let routed = 2.0 * (model.active_params() - model.dense_params()) * t
            / self.rates.flops(model.expert_format());
        let attention = 4.0
            * f64::from(model.heads)
            * f64::from(model.head_dim)
            * f64::from(model.layers)
            * work.kv_tokens as f64
            / self.rates.flops(WeightFormat::Bf16);
        let linear = match self.gemm {
            Gemm::Model => dense + routed,
            Gemm::Measured { .. } => 0.0,
        };
        let compute_s = (linear + attention) * stage / tp;
        let allreduces = f64::from(model.allreduces_per_step()) * stage;
        let comm_s = allreduces * self.allreduce(model.allreduce_bytes(tokens)).us * 1e-6;
        StepCost {
            memory_s,
            compute_s,
            comm_s,
            gemm_s,
        }
    }

    /// The cost of a whole decode step for `batch` sequences of `context` tokens each, through
    /// every pipeline stage in turn (a single micro-batch: what one token of one stream waits
    /// for).
    pub fn decode_step(&self, batch: u32, context: u64) -> StepCost {
        let work = StepWork {
            decode_seqs: batch,
            prefill_tokens: 0,
            kv_tokens: u64::from(batch) * context,
        };
        let stage = self.stage_cost(work);
        let stages = f64::from(self.layout.pp.max(1));
        StepCost {
            memory_s: stage.memory_s * stages,
            compute_s: stage.compute_s * stages,
            comm_s: stage.comm_s * stages + self.handoffs_s(self.model.allreduce_bytes(batch)),
            gemm_s: stage.gemm_s * stages,
        }
    }

    /// Micro-batches a pipelined engine splits `seqs` sequences into: one per stage at most.
    pub fn micro_batches(&self, seqs: u32) -> u32 {
        seqs.clamp(1, self.layout.pp.max(1))
    }

    /// One round of a pipelined engine (one token for each of `seqs` sequences doing `work`):
    /// the sequences split into up to pp micro-batches, each crosses every stage in turn and a
    /// stage works on one micro-batch at a time, so the round lasts pp stage-times of one
    /// micro-batch plus the hand-offs. With fewer micro-batches than stages the stages idle:
    /// the bubble. Without PP this is one step.
    pub fn round_cost(&self, seqs: u32, work: StepWork) -> StepCost {
        let micro = self.micro_batches(seqs);
        let part = StepWork {
            decode_seqs: work.decode_seqs.div_ceil(micro),
            prefill_tokens: work.prefill_tokens.div_ceil(micro),
            kv_tokens: work.kv_tokens.div_ceil(u64::from(micro)),
        };
        let stage = self.stage_cost(part);
        let stages = f64::from(self.layout.pp.max(1));
        let tokens = part.decode_seqs + part.prefill_tokens;
        StepCost {
            memory_s: stage.memory_s * stages,
            compute_s: stage.compute_s * stages,
            comm_s: stage.comm_s * stages + self.handoffs_s(self.model.allreduce_bytes(tokens)),
            gemm_s: stage.gemm_s * stages,
        }
    }

    /// The decode round of `batch` streams at `context` tokens each: what each stream waits
    /// for per token.
    pub fn decode_round(&self, batch: u32, context: u64) -> StepCost {
        let work = StepWork {
            decode_seqs: batch,
            prefill_tokens: 0,
            kv_tokens: u64::from(batch) * context,
        };
        self.round_cost(batch, work)
    }

    /// A speculative verify round: each of `batch` streams checks `drafts` draft tokens beside
    /// its own token. The tokens beyond the first are pushed through the model like prompt
    /// tokens (as srv-sim runs them): the weights are read once, the FLOPs grow.
    pub fn verify_round(&self, batch: u32, context: u64, drafts: u32) -> StepCost {
        let work = StepWork {
            decode_seqs: batch,
            prefill_tokens: batch.saturating_mul(drafts),
            kv_tokens: u64::from(batch) * context,
        };
        self.round_cost(batch, work)
    }

    /// GPU memory per GPU the engine may use.
    pub fn usable_bytes_per_gpu(&self) -> f64 {
        self.hw.mem_bytes as f64 * MEMORY_UTILIZATION
    }

    /// Weight bytes each GPU holds.
    pub fn weight_bytes_per_gpu(&self) -> f64 {
        self.model.weight_bytes_total() / f64::from(self.layout.gpus())
    }

    /// KV-cache tokens that fit beside the weights (None: the weights alone do not fit).
    pub fn kv_capacity_tokens(&self) -> Option<u64> {
        let per_gpu_free = self.usable_bytes_per_gpu() - self.weight_bytes_per_gpu();
        if per_gpu_free <= 0.0 {
            return None;
        }
        // Each GPU holds its stage's layers and its share of the KV (see ModelCard::kv_split).
        let per_gpu_per_token = self.model.kv_bytes_per_token()
            / f64::from(self.layout.pp.max(1))
            / self.model.kv_split(self.layout.tp);
        Some((per_gpu_free / per_gpu_per_token) as u64)
    }

    /// Whether the weights fit this layout's GPUs at all (what srv-sim refuses to start
    /// without): the layouts advice may name.
    pub fn weights_fit(&self) -> bool {
        self.kv_capacity_tokens().is_some()
    }

    /// Why this layout cannot serve `max_model_len`-token requests, if it cannot: the weights
    /// do not fit, or the KV cache left holds less than one such request.
    pub fn fit_problem(&self, max_model_len: u32) -> Option<String> {
        let gpus = self.layout.gpus();
        match self.kv_capacity_tokens() {
            None => Some(format!(
                "{} needs {:.1} GB of weights per GPU at tp={} pp={} ({:.0} GB in {}), more than the {:.1} GB usable of a {:.0} GB {}: raise --tp or --pp, or use a smaller weight format",
                self.model.name,
                self.weight_bytes_per_gpu() / 1e9,
                self.layout.tp,
                self.layout.pp,
                self.model.weight_bytes_total() / 1e9,
                self.model.formats(),
                self.usable_bytes_per_gpu() / 1e9,
                self.hw.mem_bytes as f64 / 1e9,
                self.hw.name,
            )),
            Some(kv) if kv < u64::from(max_model_len) => Some(format!(
                "the KV cache left beside the weights on {gpus} GPU(s) holds {kv} tokens, less than one request of --max-model-len {max_model_len}: lower --max-model-len or add GPUs"
            )),
            Some(_) => None,
        }
    }

    /// Per-stream decode limit from memory alone (weights + KV per token over bandwidth), at
    /// `batch` sequences of `context` tokens, tokens/s.
    pub fn memory_bound_tok_s(&self, batch: u32, context: u64) -> f64 {
        1.0 / self.decode_step(batch, context).memory_s
    }

    /// Per-stream decode limit of the full modelled step (memory or compute, communication)
    /// plus `overhead_s` per step, tokens/s.
    pub fn step_tok_s(&self, batch: u32, context: u64, overhead_s: f64) -> f64 {
        1.0 / (self.decode_step(batch, context).total_s() + overhead_s)
    }

    /// The single-stream decode limit in tokens/s at `context` tokens of context.
    pub fn single_stream_tok_s(&self, context: u64) -> f64 {
        self.step_tok_s(1, context, 0.0)
    }

    /// The smallest batch at which a decode step turns compute-bound (None past 65,536).
    pub fn compute_bound_batch(&self, context: u64) -> Option<u32> {
        let bound = |b: u32| self.decode_step(b, context).compute_bound();
        if !bound(65_536) {
            return None;
        }
        // Memory time per sequence grows no faster than compute, so the crossing is unique.
        let (mut lo, mut hi) = (1u32, 65_536u32);
        if bound(lo) {
            return Some(lo);
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if bound(mid) { hi = mid } else { lo = mid }
        }
        Some(hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_reads_its_degree_labels_and_takes_1_where_they_are_absent_or_no_degree() {
        let labels = |pairs: &[(&str, &str)]| -> Labels {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let l = labels(&[("tp", "2"), ("pp", " 3 ")]);
        assert_eq!(Layout::from_labels(&l), Layout { tp: 2, pp: 3 });
        assert_eq!(Layout::from_labels(&labels(&[])), Layout { tp: 1, pp: 1 });
        let bad = labels(&[("tp", "0"), ("pp", "x")]);
        assert_eq!(Layout::from_labels(&bad), Layout { tp: 1, pp: 1 });
        assert_eq!(Layout::degree(&bad, label::PP), Some(Err("x")));
        assert_eq!(Layout::degree(&bad, label::TP), Some(Err("0")));
        assert_eq!(Layout::degree(&l, label::TP), Some(Ok(2)));
        assert_eq!(Layout::degree(&l, label::EP), None);
    }
}
