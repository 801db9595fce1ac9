//! The cards: what a GPU box and a model are, as far as the roofline and the communication model
//! need, and the built-in presets. Cards are data a user edits (`srv-sim --print-card NAME`
//! prints one as JSON); unknown fields are refused so a typo is not silently a default. Every
//! figure that is calibrated rather than read off a datasheet or a config.json names where it
//! comes from in the card's `source`.

use serde::{Deserialize, Serialize};

/// How weights are stored: the bytes one weight costs, scales included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormat {
    Bf16,
    /// FP8 E4M3 with one FP32 scale per 128x128 block (DeepSeek-V3 / Kimi-K2 checkpoints).
    Fp8,
    /// NVIDIA NVFP4: E2M1 values, one FP8 E4M3 scale per 16 (plus a per-tensor FP32 scale).
    Nvfp4,
    /// OCP MXFP4: E2M1 values, one E8M0 scale per 32.
    Mxfp4,
}

impl WeightFormat {
    /// Bytes per weight, block scales included.
    pub fn bytes_per_weight(self) -> f64 {
        match self {
            WeightFormat::Bf16 => 2.0,
            WeightFormat::Fp8 => 1.0 + 4.0 / (128.0 * 128.0),
            WeightFormat::Nvfp4 => 0.5 + 1.0 / 16.0,
            WeightFormat::Mxfp4 => 0.5 + 1.0 / 32.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Bf16 => "bf16",
            WeightFormat::Fp8 => "fp8",
            WeightFormat::Nvfp4 => "nvfp4",
            WeightFormat::Mxfp4 => "mxfp4",
        }
    }
}

/// What joins the GPUs of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    /// NVLink (through NVSwitch or bridges): NCCL may use its LL128 protocol.
    Nvlink,
    /// PCIe only: NCCL chooses among Ring/Tree x LL/Simple (LL128 needs NVLink).
    Pcie,
}

/// One level of a node's topology: the GPUs inside one domain of it (a PCIe switch, a CPU
/// socket, the node), and what a collective step that crosses into it costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    pub name: String,
    /// GPUs in one domain of this level (consecutive GPU indices).
    pub gpus: u32,
    /// One ring step whose slowest link crosses this level, with NCCL's low-latency (LL)
    /// protocol, in µs (NCCL's per-hop latency; SHM and cross-socket paths cost more).
    pub hop_us: f64,
    /// Bus bandwidth of a large allreduce spanning this level, GB/s (nccl-tests' busbw).
    pub busbw_gbps: f64,
}

/// The GPU-to-GPU fabric of one node: nested levels, innermost first, the last spanning the
/// node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interconnect {
    pub name: String,
    pub kind: LinkKind,
    pub levels: Vec<Level>,
    /// NVLink SHARP (NVSwitch multicast, Hopper and later): its bus bandwidth, GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvls_busbw_gbps: Option<f64>,
}

impl Interconnect {
    /// The innermost level whose domain holds `gpus` consecutive GPUs (the outermost when none
    /// does: a group larger than the node is treated as the node, multi-node is not modelled).
    pub fn level_for(&self, gpus: u32) -> &Level {
        self.levels
            .iter()
            .find(|l| l.gpus >= gpus)
            .or(self.levels.last())
            .expect("an interconnect has at least one level (checked when loaded)")
    }

    /// The level joining GPU `a` and GPU `b` (consecutive placement).
    pub fn level_between(&self, a: u32, b: u32) -> &Level {
        self.levels
            .iter()
            .find(|l| a / l.gpus.max(1) == b / l.gpus.max(1))
            .or(self.levels.last())
            .expect("an interconnect has at least one level (checked when loaded)")
    }
}

/// A GPU and the node it sits in. Bandwidths in GB/s (1e9 bytes/s), compute in TFLOP/s (1e12),
/// dense (no sparsity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    pub name: String,
    /// HBM/GDDR bandwidth per GPU.
    pub mem_bw_gbps: f64,
    /// Dense BF16 tensor throughput per GPU.
    pub bf16_tflops: f64,
    /// Dense FP8 tensor throughput per GPU, where the GPU has FP8 tensor cores.
    #[serde(default)]
    pub fp8_tflops: Option<f64>,
    /// Dense FP4 tensor throughput per GPU, where the GPU has FP4 tensor cores.
    #[serde(default)]
    pub fp4_tflops: Option<f64>,
    pub mem_bytes: u64,
    /// GPUs in one node.
    pub gpus: u32,
    pub interconnect: Interconnect,
    /// Where each figure comes from.
    #[serde(default)]
    pub source: String,
}

impl Hardware {
    /// What is wrong with a card that parsed, if anything.
    pub fn check(&self) -> Result<(), String> {
        let ic = &self.interconnect;
        if ic.levels.is_empty() {
            return Err("interconnect.levels is empty: give at least one level".into());
        }
        if ic.levels.windows(2).any(|w| w[1].gpus <= w[0].gpus) {
            return Err("interconnect.levels must go from the innermost (fewest GPUs) out".into());
        }
        if ic
            .levels
            .iter()
            .any(|l| l.gpus == 0 || l.busbw_gbps <= 0.0 || l.hop_us < 0.0)
        {
            return Err(
                "every interconnect level needs gpus > 0, busbw_gbps > 0, hop_us >= 0".into(),
            );
        }
        if self.mem_bw_gbps <= 0.0 || self.bf16_tflops <= 0.0 || self.gpus == 0 {
            return Err("mem_bw_gbps, bf16_tflops and gpus must be positive".into());
        }
        Ok(())
    }

    /// Dense tensor throughput for weights in `format`, TFLOP/s: a GPU without tensor cores for
    /// a format runs it at the next wider one it has.
    pub fn tflops(&self, format: WeightFormat) -> f64 {
        match format {
            WeightFormat::Bf16 => self.bf16_tflops,
            WeightFormat::Fp8 => self.fp8_tflops.unwrap_or(self.bf16_tflops),
            WeightFormat::Nvfp4 | WeightFormat::Mxfp4 => self
                .fp4_tflops
                .or(self.fp8_tflops)
                .unwrap_or(self.bf16_tflops),
        }
    }
}

/// Routed mixture-of-experts layers. Shared (always-on) experts count as dense parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub experts: u32,
    /// Routed experts each token uses (top-k).
    pub experts_per_token: u32,
    /// Layers that are MoE (the rest are dense).
    pub moe_layers: u32,
    /// Parameters of one routed expert in one layer (3 x hidden x expert intermediate).
    pub expert_params: f64,
    /// Shared (always-on) experts per MoE layer, each as wide as a routed one.
    #[serde(default)]
    pub shared_experts: u32,
}

/// A model's shape, as far as the roofline needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// How the weights are stored.
    pub weight_format: WeightFormat,
    /// How the routed experts are stored, when not as the rest (NVFP4 experts beside FP8
    /// attention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_format: Option<WeightFormat>,
    /// Bytes per KV-cache element.
    #[serde(default = "two")]
    pub kv_bytes: f64,
    /// KV-cache elements per token per layer when not 2 x kv_heads x head_dim. A latent cache
    /// (MLA) is shared by all heads, so every TP rank holds it whole.
    #[serde(default)]
    pub kv_elems_per_layer: Option<u32>,
    /// Bytes per activation element (what the allreduces carry).
    #[serde(default = "two")]
    pub act_bytes: f64,
    #[serde(default)]
    pub moe: Option<Moe>,
    /// Width of a dense MLP (config.json's `intermediate_size`; for MoE models the dense
    /// layers'): the GEMM shapes of a step need it (collbench gemm), the roofline does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intermediate: Option<u32>,
    /// A vision-language model: the side in pixels of one image token once the vision
    /// encoder's patches are merged, so a W x H image is ceil(W/p) x ceil(H/p) prompt tokens
    /// (Qwen2.5-VL: 14-pixel patches merged 2 x 2, 28). Absent: the model takes no images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_token_px: Option<u32>,
    /// Where the figures come from.
    #[serde(default)]
    pub source: String,
}

fn two() -> f64 {
    2.0
}

impl ModelCard {
    /// What is wrong with a card that parsed, if anything, naming the field: every count the
    /// roofline divides by or multiplies with is positive, heads group evenly over the KV
    /// heads, and a MoE block's experts fit its layers.
    pub fn check(&self) -> Result<(), String> {
        let counts = [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
        ];
        if let Some((field, _)) = counts.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{field} is 0: it must be at least 1"));
        }
        let positive = [
            ("params", self.params),
            ("kv_bytes", self.kv_bytes),
            ("act_bytes", self.act_bytes),
        ];
        if let Some((field, v)) = positive.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            return Err(format!("{field} is {v}: it must be a positive number"));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(format!(
                "heads {} is not a multiple of kv_heads {}: each KV head serves a whole group of heads",
                self.heads, self.kv_heads
            ));
        }
        if self.kv_elems_per_layer == Some(0) {
            return Err("kv_elems_per_layer is 0: leave it out, or give at least 1".into());
        }
        if self.intermediate == Some(0) {
            return Err(
                "intermediate is 0: leave it out, or give config.json's intermediate_size".into(),
            );
        }
        if let Some(moe) = &self.moe {
            if moe.experts == 0 || moe.experts_per_token == 0 || moe.moe_layers == 0 {
                return Err(
                    "moe.experts, moe.experts_per_token and moe.moe_layers must be at least 1"
                        .into(),
                );
            }
            if moe.experts_per_token > moe.experts {
                return Err(format!(
                    "moe.experts_per_token {} is more than moe.experts {}",
                    moe.experts_per_token, moe.experts
                ));
            }
            if moe.moe_layers > self.layers {
                return Err(format!(
                    "moe.moe_layers {} is more than layers {}",
                    moe.moe_layers, self.layers
                ));
            }
            if !(moe.expert_params.is_finite() && moe.expert_params > 0.0) {
                return Err(format!(
                    "moe.expert_params is {}: it must be a positive number",
                    moe.expert_params
                ));
            }
        }
        Ok(())
    }
}

const GB: u64 = 1_000_000_000;

/// NCCL's figures the presets build on (NVIDIA/nccl src/graph/tuning.cc and topo.cc).
const NCCL_SOURCE: &str = "NCCL tuning.cc: base latency Ring LL 6.6 us, per-hop LL 0.6 (NVLink) / 1.0 (PCI); topo.cc: PCIe Gen4 x16 24 GB/s, Gen5 48 GB/s";

/// Built-in hardware presets.
pub fn hardware_presets() -> Vec<Hardware> {
    let level = |name: &str, gpus, hop_us, busbw_gbps| Level {
        name: name.to_string(),
        gpus,
        hop_us,
        busbw_gbps,
    };
    let nvswitch = |name: &str, hop_us, busbw, nvls: Option<f64>| Interconnect {
        name: name.to_string(),
        kind: LinkKind::Nvlink,
        levels: vec![level("nvswitch", 8, hop_us, busbw)],
        nvls_busbw_gbps: nvls,
    };
    // The dual-socket PCIe box of the original notes: 4 GPUs behind each socket's switch, the
    // rest across the socket link (NCCL falls back to host shared memory there).
    let dual_socket = |name: &str, inner: Level, cross: Level| Interconnect {
        name: name.to_string(),
        kind: LinkKind::Pcie,
        levels: vec![inner, cross],
        nvls_busbw_gbps: None,
    };
    let hopper = |name: &str, bw, mem_gb: u64, source: &str| Hardware {
        name: name.to_string(),
        mem_bw_gbps: bw,
        bf16_tflops: 989.0,
        fp8_tflops: Some(1979.0),
        fp4_tflops: None,
        mem_bytes: mem_gb * GB,
        gpus: 8,
        interconnect: nvswitch("NVLink 4 via NVSwitch (HGX 8-GPU)", 1.0, 370.0, Some(480.0)),
        source: format!(
            "{source}; allreduce hop 1.0 us calibrated to 8x H100 torch.distributed NCCL 16 KB = 20.7 us (ByteDance-Seed/Triton-distributed#57); busbw 370 GB/s ring, NVLS 480 (NVIDIA/nccl#1455)"
        ),
    };
    let rtx_pro_6000 = |name: &str, interconnect: Interconnect, source: &str| Hardware {
        name: name.to_string(),
        mem_bw_gbps: 1792.0,
        bf16_tflops: 504.0,
        fp8_tflops: Some(1007.0),
        fp4_tflops: Some(2015.0),
        mem_bytes: 96 * GB,
        gpus: 8,
        interconnect,
        source: format!(
            "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet: 1,792 GB/s GDDR7, 96 GB, 4 PFLOPS FP4 with sparsity (2 dense; FP8 and BF16 half and a quarter of that); {source}"
        ),
    };
    vec![
        hopper(
            "h100",
            3350.0,
            80,
            "NVIDIA H100 SXM5 datasheet: 3.35 TB/s HBM3, 989 TFLOPS BF16 / 1,979 FP8 dense, 80 GB",
        ),
        hopper(
            "h200",
            4800.0,
            141,
            "NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e, 141 GB, H100's tensor cores and NVLink",
        ),
        Hardware {
            name: "a100-80g".into(),
            mem_bw_gbps: 2039.0,
            bf16_tflops: 312.0,
            fp8_tflops: None,
            fp4_tflops: None,
            mem_bytes: 80 * GB,
            gpus: 8,
            interconnect: nvswitch("NVLink 3 via NVSwitch (HGX A100)", 0.6, 240.0, None),
            source: format!(
                "NVIDIA A100 80GB SXM datasheet: 2,039 GB/s, 312 TFLOPS BF16 dense, no FP8; NVLink 3 300 GB/s per direction, busbw taken at 0.8 of it (H100 reaches 370 of 450); no NVLS before Hopper; {NCCL_SOURCE}"
            ),
        },
        Hardware {
            name: "l40s".into(),
            mem_bw_gbps: 864.0,
            bf16_tflops: 362.0,
            fp8_tflops: Some(733.0),
            fp4_tflops: None,
            mem_bytes: 48 * GB,
            gpus: 8,
            interconnect: dual_socket(
                "PCIe Gen4, 2 sockets x 4 GPUs",
                level("socket", 4, 1.0, 24.0),
                level("cross-socket", 8, 3.6, 16.0),
            ),
            source: format!(
                "NVIDIA L40S datasheet: 864 GB/s GDDR6, 362 TFLOPS BF16 / 733 FP8 dense, 48 GB, no NVLink; {NCCL_SOURCE}; cross-socket hop as the RTX PRO 6000 calibration (3.6 us, from measured allreduces), inter-socket bandwidth AMD 16 GB/s (topo.cc)"
            ),
        },
        rtx_pro_6000(
            "rtx-pro-6000",
            dual_socket(
                "PCIe Gen5, 2 sockets x 4 GPUs behind one switch each",
                level("switch", 4, 1.1, 40.0),
                level("cross-socket", 8, 3.6, 22.2),
            ),
            "calibrated on measured NCCL allreduces of an 8x RTX PRO 6000 dual-socket box with Broadcom switches (voipmonitor/rtx6kpro @29f3863 hardware/asus-esc8000a-e13p-broadcom-switches.md): switch hop 1.1 us, so 4 ranks on one socket give 13.2-15.4 us at 256 B-32 KB as measured there; cross-socket hop 3.6 us, so 8 ranks give 57.6 / 58.3 / 67.3 us at 4 / 8 / 64 KB against 57.2 / 57.6 / 67.8 measured, and a Kimi-K2 14 KiB allreduce ~59 us (122 per step: ~7.2 ms). The notes' 8.9 ms per step is the BF16 GEMMs and the allreduces together, an upper bound of 73 us per allreduce, not a measurement of it. busbw 37.6-41.1 GB/s on one switch tuned, 22.2 GB/s default NCCL dual-socket (rtx6kpro hardware/pcie-bandwidth.md)",
        ),
        rtx_pro_6000(
            "rtx-pro-6000-switch",
            Interconnect {
                name: "PCIe Gen5, 8 GPUs behind switches on one CPU".into(),
                kind: LinkKind::Pcie,
                levels: vec![level("switches", 8, 1.25, 40.0)],
                nvls_busbw_gbps: None,
            },
            "hop 1.25 us: 8 ranks 256 B-64 KB = 24.1-24.6 us on 3 Gen5 switches and one CPU; busbw 37.6-41.1 GB/s tuned (voipmonitor/rtx6kpro hardware/pcie-bandwidth.md)",
        ),
    ]
}

/// Built-in model presets.
pub fn model_presets() -> Vec<ModelCard> {
    let dense =
        |name: &str, layers, hidden, heads, kv_heads, intermediate, params: f64, source: &str| {
            ModelCard {
                name: name.to_string(),
                layers,
                hidden,
                heads,
                kv_heads,
                head_dim: 128,
                params,
                weight_format: WeightFormat::Bf16,
                expert_format: None,
                kv_bytes: 2.0,
                kv_elems_per_layer: None,
                act_bytes: 2.0,
                moe: None,
                intermediate: Some(intermediate),
                image_token_px: None,
                source: source.to_string(),
            }
        };
    // The DeepSeek-V3 architecture: MLA caching a 512 latent + 64 rope dims per layer, routed
    // experts of 3 x 7168 x 2048, FP8 weights.
    let deepseek_like = |name: &str, heads, params, experts, moe_layers, source: &str| ModelCard {
        name: name.to_string(),
        layers: 61,
        hidden: 7168,
        heads,
        kv_heads: heads,
        head_dim: 128,
        params,
        weight_format: WeightFormat::Fp8,
        expert_format: None,
        kv_bytes: 2.0,
        kv_elems_per_layer: Some(512 + 64),
        act_bytes: 2.0,
        moe: Some(Moe {
            experts,
            experts_per_token: 8,
            moe_layers,
            expert_params: 3.0 * 7168.0 * 2048.0,
            shared_experts: 1,
        }),
        // The dense layers' MLP (intermediate_size in both configs).
        intermediate: Some(18432),
        image_token_px: None,
        source: source.to_string(),
    };
    // Kimi-K2's parameters, counted from its config.json because the published "1T total" is
    // rounded: routed 60 x 384 x 44.04 M = 1014.69 B; attention (q_lora 1536, kv_lora 512,
    // 64 heads) 101.1 M x 61 = 6.17 B; shared experts 60 x 44.04 M = 2.64 B; dense first
    // layer 3 x 7168 x 18432 = 0.40 B; router 0.17 B; embeddings and head 2 x 163840 x 7168 =
    // 2.35 B. Total 1026.4 B, active 32.9 B (published: 32 B activated).
    const KIMI_PARAMS: f64 = 1026.4e9;
    const KIMI_SOURCE: &str = "moonshotai/Kimi-K2-Instruct config.json: 61 layers (first dense), hidden 7168, 64 heads, MLA kv_lora 512 + rope 64, 384 routed experts top-8 + 1 shared, moe_intermediate 2048; parameters counted from it (1026.4 B total, 32.9 B active)";
    vec![
        dense(
            "llama-3.1-8b",
            32,
            4096,
            32,
            8,
            14336,
            8.03e9,
            "meta-llama/Llama-3.1-8B config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads, head_dim 128, intermediate 14336; 8.03 B parameters (model card), BF16",
        ),
        dense(
            "llama-3.1-70b",
            80,
            8192,
            64,
            8,
            28672,
            70.6e9,
            "meta-llama/Llama-3.1-70B config.json: 80 layers, hidden 8192, 64 heads, 8 KV heads, intermediate 28672; 70.6 B parameters, BF16",
        ),
        dense(
            "qwen3-32b",
            64,
            5120,
            64,
            8,
            25600,
            32.8e9,
            "Qwen/Qwen3-32B config.json: 64 layers, hidden 5120, 64 heads, 8 KV heads, head_dim 128, intermediate 25600; 32.8 B parameters, BF16",
        ),
        ModelCard {
            image_token_px: Some(28),
            ..dense(
                "qwen2.5-vl-7b",
                28,
                3584,
                28,
                4,
                18944,
                8.29e9,
                "Qwen/Qwen2.5-VL-7B-Instruct config.json: 28 layers, hidden 3584, 28 heads, 4 KV heads, head_dim 128, intermediate 18944; vision patch_size 14, spatial_merge_size 2 (28 px per image token); 8.29 B parameters with the vision encoder, BF16",
            )
        },
        ModelCard {
            moe: Some(Moe {
                experts: 128,
                experts_per_token: 8,
                moe_layers: 48,
                expert_params: 3.0 * 2048.0 * 768.0,
                shared_experts: 0,
            }),
            ..dense(
                "qwen3-30b-a3b",
                48,
                2048,
                32,
                4,
                6144,
                30.5e9,
                "Qwen/Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 32 heads, 4 KV heads, 128 experts top-8, moe_intermediate 768, no shared expert (intermediate 6144 unused: every layer is MoE); 30.5 B total, 3.3 B active, BF16",
            )
        },
        deepseek_like(
            "deepseek-v3",
            128,
            671e9,
            256,
            58,
            "deepseek-ai/DeepSeek-V3 config.json: 61 layers (first 3 dense), hidden 7168, 128 heads, MLA kv_lora 512 + rope 64, 256 routed experts top-8 + 1 shared, moe_intermediate 2048; 671 B total, 37 B active; FP8 weights",
        ),
        deepseek_like("kimi-k2", 64, KIMI_PARAMS, 384, 60, KIMI_SOURCE),
        ModelCard {
            expert_format: Some(WeightFormat::Nvfp4),
            source: format!(
                "{KIMI_SOURCE}; routed experts in NVFP4 (4-bit + an FP8 scale per 16 = 0.5625 B), the rest FP8: 582 GB, fits 8 x 96 GB"
            ),
            ..deepseek_like("kimi-k2-nvfp4", 64, KIMI_PARAMS, 384, 60, "")
        },
    ]
}
