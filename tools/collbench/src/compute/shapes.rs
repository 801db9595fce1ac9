//! The GEMMs of one decode step, from a model card and a tensor-parallel degree: per layer and
//! TP shard, what one GPU multiplies when `batch` sequences each make one token.
//!
//! Every product is `Y[m x n] = X[m x k] . W[k x n]`: `m` tokens, `k` input features, `n`
//! output features. Megatron-style sharding (Megatron-LM, arXiv:1909.08053 sec. 3): QKV and
//! gate/up split their outputs over the TP ranks (column parallel), the attention output and
//! down projections their inputs (row parallel, followed by the allreduce). KV heads split
//! while `tp <= kv_heads` and are replicated beyond, as vLLM and SGLang do.
//!
//! MoE layers: the router is replicated; the `batch x top-k` (token, expert) pairs spread
//! over the experts they touch (expected distinct experts under uniform routing, rounded, the
//! same formula as the roofline's `ModelCard::experts_touched`), as evenly as whole tokens
//! allow, each expert's intermediate width split over the TP ranks; shared experts are one
//! dense MLP as wide as all of them. Not listed (they are "the rest" of a step): attention
//! over the KV cache, norms, the embedding and the LM head. Multi-head latent attention
//! (DeepSeek-V3, Kimi-K2) is listed as plain attention projections of the card's head count.

use servbench::presets::ModelCard;
use servbench::record::GemmName;

/// One GEMM of a decode step and how often a step runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GemmShape {
    /// `qkv`, `attn_out`, `gate_up`, `down`, `router`, `expert_gate_up`, `expert_down`,
    /// `shared_gate_up`, `shared_down`, or `custom` (`--shape`).
    pub name: GemmName,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// Instances per layer (experts with this many tokens; 1 otherwise).
    pub per_layer: u32,
    /// Layers that run it.
    pub layers: u32,
}

impl GemmShape {
    /// Calls per decode step.
    pub fn per_step(&self) -> u64 {
        u64::from(self.per_layer) * u64::from(self.layers)
    }

    /// Floating-point operations of one call: 2 m n k.
    pub fn flops(&self) -> f64 {
        2.0 * f64::from(self.m) * f64::from(self.n) * f64::from(self.k)
    }

    /// Bytes one call must move at least: both operands read, the result written.
    pub fn bytes(&self, in_bytes: f64, out_bytes: f64) -> f64 {
        let (m, n, k) = (f64::from(self.m), f64::from(self.n), f64::from(self.k));
        (m * k + k * n) * in_bytes + m * n * out_bytes
    }

    /// Weight elements of one call (`k x n`).
    pub fn weights(&self) -> u64 {
        u64::from(self.k) * u64::from(self.n)
    }

    /// `MxNxK`, as `--shape` takes it.
    pub fn dims(&self) -> String {
        format!("{}x{}x{}", self.m, self.n, self.k)
    }
}

/// Parses `--shape MxNxK` (e.g. `64x28672x4096`).
pub fn parse_shape(s: &str) -> Result<GemmShape, String> {
    let dims: Vec<u32> = s
        .split('x')
        .map(|d| d.trim().parse::<u32>().ok().filter(|&v| v > 0))
        .collect::<Option<_>>()
        .filter(|d: &Vec<u32>| d.len() == 3)
        .ok_or_else(|| {
            format!("'{s}' is not MxNxK with positive whole numbers, e.g. 64x28672x4096")
        })?;
    Ok(GemmShape {
        name: GemmName::Custom,
        m: dims[0],
        n: dims[1],
        k: dims[2],
        per_layer: 1,
        layers: 1,
    })
}

fn split(what: &str, total: u32, tp: u32, card: &str) -> Result<u32, String> {
    if !total.is_multiple_of(tp) {
        return Err(format!(
            "{card}: {what} {total} does not split over --tp {tp} (choose a TP degree dividing it)"
        ));
    }
    Ok(total / tp)
}

/// Width of one routed expert's MLP: the card's `expert_params` is 3 x hidden x this.
pub fn expert_intermediate(model: &ModelCard) -> Option<u32> {
    let moe = model.moe.as_ref()?;
    Some((moe.expert_params / (3.0 * f64::from(model.hidden))).round() as u32)
}

/// The GEMMs of one decode step of `batch` sequences on one GPU of a `tp`-way group.
pub fn step_gemms(model: &ModelCard, tp: u32, batch: u32) -> Result<Vec<GemmShape>, String> {
    let card = model.name.as_str();
    if tp == 0 || batch == 0 {
        return Err("--tp and --batch must be at least 1".into());
    }
    let (hidden, hd) = (model.hidden, model.head_dim);
    let heads = split("heads", model.heads, tp, card)?;
    let kv_heads = if tp <= model.kv_heads {
        split("kv_heads", model.kv_heads, tp, card)?
    } else {
        1
    };
    let moe_layers = model.moe.as_ref().map_or(0, |m| m.moe_layers);
    let dense_layers = model.layers.saturating_sub(moe_layers);
    let mut out = Vec::new();
    let mut push = |name, m, n, k, per_layer, layers| {
        if layers > 0 && per_layer > 0 {
            out.push(GemmShape {
                name,
                m,
                n,
                k,
                per_layer,
                layers,
            });
        }
    };
    let b = batch;
    push(
        GemmName::Qkv,
        b,
        (heads + 2 * kv_heads) * hd,
        hidden,
        1,
        model.layers,
    );
    push(GemmName::AttnOut, b, hidden, heads * hd, 1, model.layers);
    if dense_layers > 0 {
        let inter = model.intermediate.ok_or_else(|| {
            format!(
                "{card}: the card has no `intermediate` (the dense MLP width, config.json's intermediate_size): add it to time the MLP GEMMs"
            )
        })?;
        let inter = split("intermediate", inter, tp, card)?;
        push(GemmName::GateUp, b, 2 * inter, hidden, 1, dense_layers);
        push(GemmName::Down, b, hidden, inter, 1, dense_layers);
    }
    if let Some(moe) = &model.moe {
        let inter = split(
            "expert intermediate",
            expert_intermediate(model).unwrap_or(0),
            tp,
            card,
        )?;
        let layers = moe.moe_layers;
        push(GemmName::Router, b, moe.experts, hidden, 1, layers);
        let pairs = b * moe.experts_per_token;
        let touched = (model.experts_touched(b).round() as u32).clamp(
            moe.experts_per_token.min(moe.experts),
            moe.experts.min(pairs),
        );
        // pairs = base x touched + extra: `extra` experts get one token more.
        let (base, extra) = (pairs / touched, pairs % touched);
        for (m, count) in [(base + 1, extra), (base, touched - extra)] {
            push(GemmName::ExpertGateUp, m, 2 * inter, hidden, count, layers);
            push(GemmName::ExpertDown, m, hidden, inter, count, layers);
        }
        if moe.shared_experts > 0 {
            let shared = moe.shared_experts * inter;
            push(GemmName::SharedGateUp, b, 2 * shared, hidden, 1, layers);
            push(GemmName::SharedDown, b, hidden, shared, 1, layers);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use servbench::presets::load_model;

    fn dims(shapes: &[GemmShape]) -> Vec<(&str, u32, u32, u32, u32, u32)> {
        shapes
            .iter()
            .map(|s| (s.name.as_str(), s.m, s.n, s.k, s.per_layer, s.layers))
            .collect()
    }

    #[test]
    fn llama_8b_tp1_matches_its_config() {
        // hidden 4096, 32 heads x 128, 8 KV heads, intermediate 14336, 32 layers.
        let m = load_model("llama-3.1-8b").unwrap();
        let s = step_gemms(&m, 1, 1).unwrap();
        assert_eq!(
            dims(&s),
            vec![
                ("qkv", 1, (32 + 2 * 8) * 128, 4096, 1, 32),
                ("attn_out", 1, 4096, 4096, 1, 32),
                ("gate_up", 1, 2 * 14336, 4096, 1, 32),
                ("down", 1, 4096, 14336, 1, 32),
            ]
        );
        // The step's weights are the model's less the embedding and LM head (2 x 128256 x 4096).
        let weights: u64 = s.iter().map(|g| g.weights() * g.per_step()).sum();
        let embed = 2.0 * 128_256.0 * 4096.0;
        assert!(
            ((weights as f64 + embed) / 8.03e9 - 1.0).abs() < 0.01,
            "{weights}"
        );
    }

    #[test]
    fn llama_8b_tp2_halves_each_shard_and_keeps_the_batch() {
        let m = load_model("llama-3.1-8b").unwrap();
        let s = step_gemms(&m, 2, 8).unwrap();
        assert_eq!(
            dims(&s),
            vec![
                ("qkv", 8, (16 + 2 * 4) * 128, 4096, 1, 32),
                ("attn_out", 8, 4096, 2048, 1, 32),
                ("gate_up", 8, 14336, 4096, 1, 32),
                ("down", 8, 4096, 7168, 1, 32),
            ]
        );
        // Past the KV heads they are replicated: TP16 keeps one KV head per rank.
        let s = step_gemms(&m, 16, 1).unwrap();
        assert_eq!((s[0].n, s[0].k), ((2 + 2) * 128, 4096));
        let err = step_gemms(&m, 3, 1).unwrap_err();
        assert!(err.contains("heads 32 does not split over --tp 3"), "{err}");
    }

    #[test]
    fn qwen3_moe_spreads_tokens_over_the_experts_they_touch() {
        // Qwen3-30B-A3B: hidden 2048, 32 heads, 4 KV heads, 48 MoE layers, 128 experts top-8,
        // expert intermediate 768, no shared expert, no dense layer.
        let m = load_model("qwen3-30b-a3b").unwrap();
        assert_eq!(expert_intermediate(&m), Some(768));
        let s = step_gemms(&m, 1, 1).unwrap();
        assert_eq!(
            dims(&s),
            vec![
                ("qkv", 1, (32 + 8) * 128, 2048, 1, 48),
                ("attn_out", 1, 2048, 4096, 1, 48),
                ("router", 1, 128, 2048, 1, 48),
                ("expert_gate_up", 1, 1536, 2048, 8, 48),
                ("expert_down", 1, 2048, 768, 8, 48),
            ]
        );
        // Batch 8: 64 pairs over 128 x (1 - (120/128)^8) = 51.6 -> 52 experts: 12 of them get
        // two tokens, 40 get one. TP2 halves each expert's width.
        let s = step_gemms(&m, 2, 8).unwrap();
        assert_eq!(
            dims(&s)[2..],
            vec![
                ("router", 8, 128, 2048, 1, 48),
                ("expert_gate_up", 2, 768, 2048, 12, 48),
                ("expert_down", 2, 2048, 384, 12, 48),
                ("expert_gate_up", 1, 768, 2048, 40, 48),
                ("expert_down", 1, 2048, 384, 40, 48),
            ]
        );
        let pairs: u32 = s
            .iter()
            .filter(|g| g.name == "expert_down")
            .map(|g| g.m * g.per_layer)
            .sum();
        assert_eq!(pairs, 8 * 8);
    }

    #[test]
    fn kimi_k2_has_a_dense_layer_and_a_shared_expert() {
        // 61 layers, the first dense (intermediate 18432); 384 experts top-8 of width 2048,
        // one shared expert; TP8 as the reference's worked example: gate+up 7168 -> 512.
        let m = load_model("kimi-k2").unwrap();
        let s = step_gemms(&m, 8, 1).unwrap();
        assert_eq!(
            dims(&s),
            vec![
                ("qkv", 1, (8 + 2 * 8) * 128, 7168, 1, 61),
                ("attn_out", 1, 7168, 1024, 1, 61),
                ("gate_up", 1, 2 * 2304, 7168, 1, 1),
                ("down", 1, 7168, 2304, 1, 1),
                ("router", 1, 384, 7168, 1, 60),
                ("expert_gate_up", 1, 512, 7168, 8, 60),
                ("expert_down", 1, 7168, 256, 8, 60),
                ("shared_gate_up", 1, 512, 7168, 1, 60),
                ("shared_down", 1, 7168, 256, 1, 60),
            ]
        );
    }

    #[test]
    fn shapes_parse_and_a_card_without_the_mlp_width_says_what_to_add() {
        let s = parse_shape("64x28672x4096").unwrap();
        assert_eq!(
            (s.m, s.n, s.k, s.flops()),
            (64, 28672, 4096, 2.0 * 64.0 * 28672.0 * 4096.0)
        );
        assert!(parse_shape("64x0x2").is_err() && parse_shape("8x8").is_err());
        let mut m = load_model("llama-3.1-8b").unwrap();
        m.intermediate = None;
        assert!(
            step_gemms(&m, 1, 1)
                .unwrap_err()
                .contains("intermediate_size")
        );
    }
}
