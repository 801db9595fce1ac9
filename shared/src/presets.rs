//! Hardware and model presets, and the roofline arithmetic over them: the one definition that
//! srv-sim's cost model, summarize's efficiency figures and collbench's decode question share.
//!
//! Everything is per step of a transformer forward pass: bytes that must cross HBM (weights once
//! per step, each sequence's KV cache), FLOPs over the tensor cores, and for tensor parallelism
//! two allreduces per layer (Megatron: after attention and after the MLP). A step takes the
//! larger of memory and compute time, plus communication. Sources for the formulas: kipply,
//! "Transformer Inference Arithmetic" (2022); Pope et al., arXiv:2211.05102; Megatron-LM,
//! arXiv:1909.08053 sec. 3; GPipe, arXiv:1811.06965. Sources for each preset's numbers are
//! cited beside it.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// A GPU and the link between GPUs of one node. Bandwidths in GB/s (1e9 bytes/s), compute in
/// TFLOP/s (1e12), dense (no sparsity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    pub name: String,
    /// HBM/GDDR bandwidth per GPU.
    pub mem_bw_gbps: f64,
    /// Dense BF16 tensor throughput per GPU.
    pub bf16_tflops: f64,
    /// Dense FP8 tensor throughput per GPU, where the GPU has FP8 tensor cores.
    #[serde(default)]
    pub fp8_tflops: Option<f64>,
    pub mem_bytes: u64,
    /// GPU-to-GPU link (NVLink, PCIe): one direction, per GPU.
    pub link_name: String,
    pub link_bw_gbps: f64,
    /// Latency of one small collective step over the link (NCCL-like software included).
    pub link_latency_us: f64,
}

const GB: u64 = 1_000_000_000;

/// Built-in hardware presets.
pub fn hardware_presets() -> Vec<Hardware> {
    let hw = |name: &str, bw, bf16, fp8, mem_gb: u64, link: &str, link_bw, lat| Hardware {
        name: name.to_string(),
        mem_bw_gbps: bw,
        bf16_tflops: bf16,
        fp8_tflops: fp8,
        mem_bytes: mem_gb * GB,
        link_name: link.to_string(),
        link_bw_gbps: link_bw,
        link_latency_us: lat,
    };
    vec![
        // NVIDIA H100 SXM5 datasheet: 3.35 TB/s HBM3, 989 TFLOPS BF16 / 1,979 FP8 dense
        // (half the "with sparsity" figures), 80 GB; NVLink 4: 900 GB/s total = 450 per direction.
        hw(
            "h100",
            3350.0,
            989.0,
            Some(1979.0),
            80,
            "nvlink4",
            450.0,
            8.0,
        ),
        // NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e, 141 GB, same tensor cores and NVLink as H100.
        hw(
            "h200",
            4800.0,
            989.0,
            Some(1979.0),
            141,
            "nvlink4",
            450.0,
            8.0,
        ),
        // NVIDIA A100 80GB SXM datasheet: 2,039 GB/s, 312 TFLOPS BF16 dense, no FP8;
        // NVLink 3: 600 GB/s total = 300 per direction.
        hw("a100-80g", 2039.0, 312.0, None, 80, "nvlink3", 300.0, 10.0),
        // NVIDIA L40S datasheet: 864 GB/s GDDR6, 362 TFLOPS BF16 / 733 FP8 dense, 48 GB;
        // no NVLink: PCIe Gen4 x16, ~32 GB/s per direction.
        hw("l40s", 864.0, 362.0, Some(733.0), 48, "pcie4", 32.0, 20.0),
        // NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet: 1,792 GB/s GDDR7, 96 GB;
        // ~504 TFLOPS BF16 and ~1,007 FP8 dense (quarter/half of the 4 PFLOPS sparse FP4
        // headline); PCIe Gen5 x16, ~64 GB/s per direction.
        hw(
            "rtx-pro-6000",
            1792.0,
            504.0,
            Some(1007.0),
            96,
            "pcie5",
            64.0,
            15.0,
        ),
    ]
}

/// Routed mixture-of-experts layers. Shared (always-on) experts count as dense parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub experts: u32,
    /// Routed experts each token uses (top-k).
    pub experts_per_token: u32,
    /// Layers that are MoE (the rest are dense).
    pub moe_layers: u32,
    /// Parameters of one routed expert in one layer (3 x hidden x expert intermediate).
    pub expert_params: f64,
}

/// A model's shape, as far as the roofline needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    pub name: String,
    pub layers: u32,
    /// Model (residual stream) width: the size of each TP allreduce per token.
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// All parameters.
    pub params: f64,
    /// Bytes per weight (2 for BF16, 1 for FP8).
    pub weight_bytes: f64,
    /// Bytes per KV-cache element.
    #[serde(default = "two")]
    pub kv_bytes: f64,
    /// KV-cache elements per token per layer when not 2 x kv_heads x head_dim (MLA caches a
    /// compressed latent instead).
    #[serde(default)]
    pub kv_elems_per_layer: Option<u32>,
    /// Bytes per activation element (what the allreduces carry).
    #[serde(default = "two")]
    pub act_bytes: f64,
    #[serde(default)]
    pub moe: Option<Moe>,
}

fn two() -> f64 {
    2.0
}

/// Built-in model presets.
pub fn model_presets() -> Vec<ModelCard> {
    let dense = |name: &str, layers, hidden, heads, kv_heads, params: f64| ModelCard {
        name: name.to_string(),
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim: 128,
        params,
        weight_bytes: 2.0,
        kv_bytes: 2.0,
        kv_elems_per_layer: None,
        act_bytes: 2.0,
        moe: None,
    };
    vec![
        // meta-llama/Llama-3.1-8B config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads,
        // head_dim 128; 8.03 B parameters (model card), BF16.
        dense("llama-3.1-8b", 32, 4096, 32, 8, 8.03e9),
        // meta-llama/Llama-3.1-70B config.json: 80 layers, hidden 8192, 64 heads, 8 KV heads;
        // 70.6 B parameters, BF16.
        dense("llama-3.1-70b", 80, 8192, 64, 8, 70.6e9),
        // Qwen/Qwen3-32B config.json: 64 layers, hidden 5120, 64 heads, 8 KV heads, head_dim
        // 128; 32.8 B parameters, BF16 (the Qwen3 dense model nearest the 20-30 B class).
        dense("qwen3-32b", 64, 5120, 64, 8, 32.8e9),
        // Qwen/Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 32 heads, 4 KV heads, 128
        // experts, top-8, moe_intermediate 768; 30.5 B total, 3.3 B active, BF16.
        ModelCard {
            heads: 32,
            kv_heads: 4,
            moe: Some(Moe {
                experts: 128,
                experts_per_token: 8,
                moe_layers: 48,
                expert_params: 3.0 * 2048.0 * 768.0,
            }),
            ..dense("qwen3-30b-a3b", 48, 2048, 32, 4, 30.5e9)
        },
        // deepseek-ai/DeepSeek-V3 config.json: 61 layers (first 3 dense), hidden 7168, 128
        // heads, MLA with kv_lora_rank 512 + rope dim 64 cached per layer, 256 routed experts
        // top-8 plus 1 shared, moe_intermediate 2048; 671 B total, 37 B active; FP8 weights.
        ModelCard {
            name: "deepseek-v3".to_string(),
            layers: 61,
            hidden: 7168,
            heads: 128,
            kv_heads: 128,
            head_dim: 128,
            params: 671e9,
            weight_bytes: 1.0,
            kv_bytes: 2.0,
            kv_elems_per_layer: Some(512 + 64),
            act_bytes: 2.0,
            moe: Some(Moe {
                experts: 256,
                experts_per_token: 8,
                moe_layers: 58,
                expert_params: 3.0 * 7168.0 * 2048.0,
            }),
        },
        // moonshotai/Kimi-K2-Instruct config.json: the DeepSeek-V3 architecture with 384 routed
        // experts (top-8, 1 shared), 64 heads, 61 layers (first dense); 1.04 T total, 32 B
        // active; FP8 weights.
        ModelCard {
            name: "kimi-k2".to_string(),
            layers: 61,
            hidden: 7168,
            heads: 64,
            kv_heads: 64,
            head_dim: 128,
            params: 1.04e12,
            weight_bytes: 1.0,
            kv_bytes: 2.0,
            kv_elems_per_layer: Some(512 + 64),
            act_bytes: 2.0,
            moe: Some(Moe {
                experts: 384,
                experts_per_token: 8,
                moe_layers: 60,
                expert_params: 3.0 * 7168.0 * 2048.0,
            }),
        },
    ]
}

/// Looks a hardware preset up by name, or reads a JSON card when `arg` names a file.
pub fn load_hardware(arg: &str) -> Result<Hardware, String> {
    load(
        arg,
        hardware_presets(),
        |h: &Hardware| h.name.clone(),
        "hardware",
    )
}

/// Looks a model preset up by name, or reads a JSON card when `arg` names a file.
pub fn load_model(arg: &str) -> Result<ModelCard, String> {
    load(
        arg,
        model_presets(),
        |m: &ModelCard| m.name.clone(),
        "model",
    )
}

fn load<T: serde::de::DeserializeOwned>(
    arg: &str,
    presets: Vec<T>,
    name: impl Fn(&T) -> String,
    what: &str,
) -> Result<T, String> {
    if arg.ends_with(".json") || Path::new(arg).is_file() {
        let text = std::fs::read_to_string(arg).map_err(|e| format!("cannot read {arg}: {e}"))?;
        return serde_json::from_str(&text).map_err(|e| format!("{arg}: not a {what} card: {e}"));
    }
    let key = arg.to_ascii_lowercase();
    let names: Vec<String> = presets.iter().map(&name).collect();
    presets.into_iter().find(|p| name(p) == key).ok_or_else(|| {
        format!(
            "unknown {what} preset '{arg}': use one of {} or a JSON card file",
            names.join(", ")
        )
    })
}

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
}

impl StepCost {
    /// Roofline: memory and compute overlap, communication does not.
    pub fn total_s(&self) -> f64 {
        self.memory_s.max(self.compute_s) + self.comm_s
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

    /// All weight bytes.
    pub fn weight_bytes_total(&self) -> f64 {
        self.params * self.weight_bytes
    }

    /// Parameters that are always used (everything but routed experts).
    fn dense_params(&self) -> f64 {
        match &self.moe {
            None => self.params,
            Some(m) => {
                self.params - f64::from(m.moe_layers) * f64::from(m.experts) * m.expert_params
            }
        }
    }

    /// Parameters one token uses.
    pub fn active_params(&self) -> f64 {
        match &self.moe {
            None => self.params,
            Some(m) => {
                self.dense_params()
                    + f64::from(m.moe_layers) * f64::from(m.experts_per_token) * m.expert_params
            }
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

    /// Weight bytes a step of `tokens` tokens must read (MoE: only touched experts).
    pub fn weight_bytes_read(&self, tokens: u32) -> f64 {
        let params = match &self.moe {
            None => self.params,
            Some(m) => {
                self.dense_params()
                    + f64::from(m.moe_layers)
                        * self.experts_touched(tokens.max(1))
                        * m.expert_params
            }
        };
        params * self.weight_bytes
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

impl Hardware {
    /// Tensor throughput for the model's weight type, in FLOP/s.
    pub fn flops_for(&self, model: &ModelCard) -> f64 {
        let tflops = match self.fp8_tflops {
            Some(fp8) if model.weight_bytes <= 1.0 => fp8,
            _ => self.bf16_tflops,
        };
        tflops * 1e12
    }

    /// Ring allreduce of `bytes` over `ranks` GPUs: latency + 2(n-1)/n x bytes / bandwidth.
    pub fn allreduce_s(&self, ranks: u32, bytes: f64) -> f64 {
        if ranks <= 1 {
            return 0.0;
        }
        let n = f64::from(ranks);
        self.link_latency_us * 1e-6 + 2.0 * (n - 1.0) / n * bytes / (self.link_bw_gbps * 1e9)
    }

    /// A point-to-point hand-off of `bytes` between pipeline stages.
    pub fn p2p_s(&self, bytes: f64) -> f64 {
        self.link_latency_us * 1e-6 + bytes / (self.link_bw_gbps * 1e9)
    }
}

/// The cost of one step's work on ONE pipeline stage (1/pp of the layers), per GPU of its TP
/// group. KV heads split across TP ranks while tp <= kv_heads, and are replicated beyond.
pub fn stage_cost(model: &ModelCard, hw: &Hardware, layout: Layout, work: StepWork) -> StepCost {
    let tp = f64::from(layout.tp.max(1));
    let stage = 1.0 / f64::from(layout.pp.max(1));
    let tokens = work.decode_seqs + work.prefill_tokens;
    if tokens == 0 {
        return StepCost::default();
    }
    let kv_split = tp.min(f64::from(model.kv_heads.max(1)));
    let weight_bytes = model.weight_bytes_read(tokens) * stage / tp;
    let kv_bytes = work.kv_tokens as f64 * model.kv_bytes_per_token() * stage / kv_split;
    let memory_s = (weight_bytes + kv_bytes) / (hw.mem_bw_gbps * 1e9);
    // 2 FLOPs per parameter per token, plus attention: QK^T and AV over the KV each
    // 2 x heads x head_dim FLOPs per cached token per layer.
    let linear = 2.0 * model.active_params() * f64::from(tokens);
    let attention = 4.0
        * f64::from(model.heads)
        * f64::from(model.head_dim)
        * f64::from(model.layers)
        * work.kv_tokens as f64;
    let compute_s = (linear + attention) * stage / tp / hw.flops_for(model);
    let allreduces = f64::from(model.allreduces_per_step()) * stage;
    let comm_s = allreduces * hw.allreduce_s(layout.tp, model.allreduce_bytes(tokens));
    StepCost {
        memory_s,
        compute_s,
        comm_s,
    }
}

/// The cost of a whole decode step for `batch` sequences of `context` tokens each, through
/// every pipeline stage in turn (a single micro-batch: what one token of one stream waits for).
pub fn decode_step(
    model: &ModelCard,
    hw: &Hardware,
    layout: Layout,
    batch: u32,
    context: u64,
) -> StepCost {
    let work = StepWork {
        decode_seqs: batch,
        prefill_tokens: 0,
        kv_tokens: u64::from(batch) * context,
    };
    let stage = stage_cost(model, hw, layout, work);
    let stages = f64::from(layout.pp.max(1));
    let handoffs = (stages - 1.0) * hw.p2p_s(model.allreduce_bytes(batch));
    StepCost {
        memory_s: stage.memory_s * stages,
        compute_s: stage.compute_s * stages,
        comm_s: stage.comm_s * stages + handoffs,
    }
}

/// The single-stream decode limit in tokens/s at `context` tokens of context.
pub fn single_stream_tok_s(model: &ModelCard, hw: &Hardware, layout: Layout, context: u64) -> f64 {
    1.0 / decode_step(model, hw, layout, 1, context).total_s()
}

/// The smallest batch at which a decode step turns compute-bound (None past 65,536).
pub fn compute_bound_batch(
    model: &ModelCard,
    hw: &Hardware,
    layout: Layout,
    context: u64,
) -> Option<u32> {
    let bound = |b: u32| decode_step(model, hw, layout, b, context).compute_bound();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> ModelCard {
        load_model(name).unwrap()
    }
    fn hw(name: &str) -> Hardware {
        load_hardware(name).unwrap()
    }

    #[test]
    fn presets_resolve_and_unknown_names_list_the_choices() {
        for m in [
            "llama-3.1-8b",
            "llama-3.1-70b",
            "qwen3-32b",
            "deepseek-v3",
            "kimi-k2",
        ] {
            model(m);
        }
        for h in ["h100", "h200", "a100-80g", "l40s", "rtx-pro-6000"] {
            hw(h);
        }
        let err = load_model("gpt-9").unwrap_err();
        assert!(
            err.contains("llama-3.1-8b") && err.contains("JSON card"),
            "{err}"
        );
    }

    #[test]
    fn kv_bytes_match_published_figures() {
        // Llama-3-70B: 80 x 2 x 8 x 128 x 2 B = 320 KiB per token.
        assert_eq!(model("llama-3.1-70b").kv_bytes_per_token(), 327_680.0);
        // DeepSeek-V3 MLA: 61 x 576 x 2 B.
        assert_eq!(
            model("deepseek-v3").kv_bytes_per_token(),
            61.0 * 576.0 * 2.0
        );
    }

    #[test]
    fn moe_active_params_match_the_model_cards() {
        let ds = model("deepseek-v3");
        let active = ds.active_params() / 1e9;
        assert!((active - 37.0).abs() < 1.5, "deepseek-v3 active {active} B");
        let qwen = model("qwen3-30b-a3b");
        let active = qwen.active_params() / 1e9;
        assert!(
            (active - 3.3).abs() < 0.5,
            "qwen3-30b-a3b active {active} B"
        );
        // One token touches exactly k experts; many tokens approach all of them.
        assert!((ds.experts_touched(1) - 8.0).abs() < 1e-9);
        assert!(ds.experts_touched(4096) > 255.0);
        assert!(ds.weight_bytes_read(64) > ds.weight_bytes_read(1));
    }

    #[test]
    fn single_stream_limit_is_bandwidth_over_bytes() {
        // Llama-3.1-8B on H100, tiny context: ~3.35e12 / 16.06e9 = ~209 tok/s.
        let tok_s = single_stream_tok_s(&model("llama-3.1-8b"), &hw("h100"), Layout::default(), 1);
        assert!((tok_s - 3.35e12 / 16.06e9).abs() < 1.0, "{tok_s}");
    }

    #[test]
    fn tensor_parallel_splits_bytes_and_adds_allreduce() {
        let (m, h) = (model("llama-3.1-70b"), hw("h200"));
        let tp1 = decode_step(&m, &h, Layout { tp: 1, pp: 1 }, 1, 1000);
        let tp8 = decode_step(&m, &h, Layout { tp: 8, pp: 1 }, 1, 1000);
        assert!((tp1.memory_s / tp8.memory_s - 8.0).abs() < 0.01);
        assert_eq!(tp1.comm_s, 0.0);
        // 160 allreduces of 16 KiB, latency-dominated: ~1.3 ms.
        assert!(
            tp8.comm_s > 160.0 * 8e-6 && tp8.comm_s < 160.0 * 9e-6,
            "{}",
            tp8.comm_s
        );
        assert!(tp8.total_s() < tp1.total_s());
    }

    #[test]
    fn pipeline_parallel_does_not_speed_up_one_stream() {
        let (m, h) = (model("llama-3.1-8b"), hw("h100"));
        let pp1 = decode_step(&m, &h, Layout { tp: 1, pp: 1 }, 1, 100);
        let pp4 = decode_step(&m, &h, Layout { tp: 1, pp: 4 }, 1, 100);
        assert!((pp4.memory_s - pp1.memory_s).abs() < 1e-12);
        assert!(pp4.total_s() > pp1.total_s());
    }

    #[test]
    fn decode_turns_compute_bound_near_the_ridge_point() {
        // Dense BF16 weights alone: ridge ~ FLOPS / BW x bytes/2 = 989e12 / 3.35e12 = ~295.
        let b =
            compute_bound_batch(&model("llama-3.1-8b"), &hw("h100"), Layout::default(), 1).unwrap();
        assert!((250..=320).contains(&b), "{b}");
        // Long contexts keep decode memory-bound for longer.
        let long =
            compute_bound_batch(&model("llama-3.1-8b"), &hw("h100"), Layout::default(), 8192);
        assert!(long.is_none_or(|l| l > b));
    }

    #[test]
    fn json_cards_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.json");
        let mut card = hw("h100");
        card.name = "my-gpu".into();
        std::fs::write(&path, serde_json::to_string(&card).unwrap()).unwrap();
        assert_eq!(load_hardware(path.to_str().unwrap()).unwrap(), card);
        std::fs::write(&path, "{}").unwrap();
        assert!(
            load_hardware(path.to_str().unwrap())
                .unwrap_err()
                .contains("not a hardware card")
        );
    }
}
