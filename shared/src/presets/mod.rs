//! Hardware and model presets, the roofline and the communication model over them: the one
//! definition that srv-sim's cost model, summarize's efficiency figures and collbench's decode
//! question share.
//!
//! - [`cards`]: what a GPU box (its interconnect topology included) and a model are, and the
//!   built-in presets, each citing its sources;
//! - [`roofline`]: a [`Deployment`] (model, hardware, layout, rates, communication) and the cost
//!   of a step on it;
//! - [`comm`]: what one allreduce costs, modelled from the topology the way NCCL picks its
//!   algorithm, or read off a curve collbench measured;
//! - [`pd`]: disaggregated prefill/decode layouts and the KV hand-off between them;
//! - [`verdict`]: the one answer to "communication or compute?" for a decode step.

pub mod cards;
pub mod comm;
pub mod gemm;
pub mod pd;
pub mod roofline;
pub mod verdict;

pub use cards::{
    Hardware, Interconnect, Level, LinkKind, ModelCard, Moe, WeightFormat, hardware_presets,
    model_presets,
};
pub use comm::{Algo, AllreduceCost, MeasuredCurve};
pub use gemm::GemmCurve;
pub use pd::{KvTransfer, PdLayout, first_gpu, kv_transfer};
pub use roofline::{Comm, Deployment, Gemm, Layout, MEMORY_UTILIZATION, Rates, StepCost, StepWork};
pub use verdict::{Bound, ComputeParts, StepBasis, StepParts, StepVerdict};

use std::path::Path;

/// The fixed per-step scheduling overhead srv-sim adds by default and summarize's modelled step
/// limit counts: a step of a real engine costs more than its kernels.
pub const DEFAULT_STEP_OVERHEAD_US: f64 = 100.0;

/// Looks a hardware preset up by name, or reads a JSON card when `arg` names a file.
pub fn load_hardware(arg: &str) -> Result<Hardware, String> {
    let hw: Hardware = load(
        arg,
        hardware_presets(),
        |h: &Hardware| h.name.clone(),
        "hardware",
    )?;
    hw.check().map_err(|e| format!("{arg}: {e}"))?;
    Ok(hw)
}

/// Looks a model preset up by name, or reads a JSON card when `arg` names a file.
pub fn load_model(arg: &str) -> Result<ModelCard, String> {
    let model: ModelCard = load(
        arg,
        model_presets(),
        |m: &ModelCard| m.name.clone(),
        "model",
    )?;
    model.check().map_err(|e| format!("{arg}: {e}"))?;
    Ok(model)
}

fn load<T: serde::de::DeserializeOwned>(
    arg: &str,
    presets: Vec<T>,
    name: impl Fn(&T) -> String,
    what: &str,
) -> Result<T, String> {
    if arg.ends_with(".json") || Path::new(arg).is_file() {
        let text = crate::files::read_text(arg, crate::files::FileKind::Card)?;
        return serde_json::from_str(&text).map_err(|e| {
            format!("{arg}: not a {what} card: {e} (start from one: srv-sim --print-card NAME)")
        });
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

/// The built-in preset `name` (model or hardware) as the pretty JSON card a user edits.
pub fn print_card(name: &str) -> Result<String, String> {
    let key = name.to_ascii_lowercase();
    let json = if let Some(m) = model_presets().into_iter().find(|m| m.name == key) {
        serde_json::to_string_pretty(&m)
    } else if let Some(h) = hardware_presets().into_iter().find(|h| h.name == key) {
        serde_json::to_string_pretty(&h)
    } else {
        let (models, hw) = preset_names();
        return Err(format!(
            "no preset named '{name}': models {}; hardware {}",
            models.join(", "),
            hw.join(", ")
        ));
    };
    json.map_err(|e| e.to_string())
}

/// The names of the built-in presets: (models, hardware).
pub fn preset_names() -> (Vec<String>, Vec<String>) {
    (
        model_presets().into_iter().map(|m| m.name).collect(),
        hardware_presets().into_iter().map(|h| h.name).collect(),
    )
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
    fn dep(m: &str, h: &str, tp: u32, pp: u32) -> Deployment {
        Deployment::new(model(m), hw(h), Layout { tp, pp })
    }

    #[test]
    fn presets_resolve_and_unknown_names_list_the_choices() {
        let (models, hws) = preset_names();
        for m in &models {
            model(m);
            assert!(!model(m).source.is_empty(), "{m} cites no source");
        }
        for h in &hws {
            assert!(!hw(h).source.is_empty(), "{h} cites no source");
        }
        assert!(models.len() >= 7 && hws.len() >= 6);
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
        // The latent is not split by TP; KV heads are, up to kv_heads.
        assert_eq!(model("deepseek-v3").kv_split(8), 1.0);
        assert_eq!(model("llama-3.1-70b").kv_split(16), 8.0);
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

    /// The preset once took the rounded "1.04 T" total, leaving 25 B of dense parameters and
    /// 46.5 B active where Kimi-K2 activates 32 B: every Kimi roofline was 40% too slow.
    #[test]
    fn kimi_k2_activates_32b_not_the_rounded_totals_remainder() {
        let k = model("kimi-k2");
        let active = k.active_params() / 1e9;
        assert!((active - 32.9).abs() < 0.5, "kimi-k2 active {active} B");
        assert!((k.dense_params() / 1e9 - 11.7).abs() < 0.3);
    }

    #[test]
    fn weight_formats_count_their_scales_and_nvfp4_kimi_fits_8_x_96_gb() {
        assert_eq!(WeightFormat::Nvfp4.bytes_per_weight(), 0.5625);
        assert_eq!(WeightFormat::Mxfp4.bytes_per_weight(), 0.53125);
        assert!(WeightFormat::Fp8.bytes_per_weight() > 1.0);
        let fp8 = model("kimi-k2").weight_bytes_total();
        let fp4 = model("kimi-k2-nvfp4").weight_bytes_total();
        let box_bytes = 8.0 * hw("rtx-pro-6000").mem_bytes as f64;
        assert!(fp8 > box_bytes, "fp8 Kimi: {fp8}");
        assert!(fp4 < 0.8 * box_bytes, "nvfp4 Kimi: {fp4}");
        assert_eq!(model("kimi-k2-nvfp4").formats(), "fp8 + nvfp4 experts");
        // FP4 tensor cores run the experts' FLOPs faster; a GPU without them falls back.
        assert!(hw("rtx-pro-6000").tflops(WeightFormat::Nvfp4) > 1900.0);
        assert_eq!(hw("h100").tflops(WeightFormat::Nvfp4), 1979.0);
        assert_eq!(hw("a100-80g").tflops(WeightFormat::Fp8), 312.0);
    }

    #[test]
    fn single_stream_limit_is_bandwidth_over_bytes() {
        // Llama-3.1-8B on H100, tiny context: ~3.35e12 / 16.06e9 = ~209 tok/s.
        let tok_s = dep("llama-3.1-8b", "h100", 1, 1).single_stream_tok_s(1);
        assert!((tok_s - 3.35e12 / 16.06e9).abs() < 1.0, "{tok_s}");
    }

    #[test]
    fn tensor_parallel_splits_bytes_and_adds_allreduce() {
        let tp1 = dep("llama-3.1-70b", "h200", 1, 1).decode_step(1, 1000);
        let tp8 = dep("llama-3.1-70b", "h200", 8, 1).decode_step(1, 1000);
        assert!((tp1.memory_s / tp8.memory_s - 8.0).abs() < 0.01);
        assert_eq!(tp1.comm_s, 0.0);
        // 160 allreduces of 16 KiB, latency-dominated, ~20.7 us each over NVSwitch at 8
        // ranks (the h200 card's calibration): ~3.3 ms.
        assert!(
            tp8.comm_s > 160.0 * 19e-6 && tp8.comm_s < 160.0 * 23e-6,
            "{}",
            tp8.comm_s
        );
        assert!(tp8.total_s() < tp1.total_s());
    }

    /// The notes' finding: over PCIe across two sockets, TP8's allreduces cost more than the
    /// halved weight reads save, so one stream of Qwen3-32B is faster at TP4; over NVSwitch
    /// TP8 wins; on a single-CPU switch box it wins too.
    #[test]
    fn tp8_loses_to_tp4_over_dual_socket_pcie_and_wins_over_nvswitch() {
        let tok_s = |h: &str, tp| dep("qwen3-32b", h, tp, 1).single_stream_tok_s(1024);
        assert!(tok_s("rtx-pro-6000", 8) < tok_s("rtx-pro-6000", 4));
        assert!(tok_s("h200", 8) > tok_s("h200", 4));
        assert!(tok_s("rtx-pro-6000-switch", 8) > tok_s("rtx-pro-6000-switch", 4));
    }

    #[test]
    fn pipeline_parallel_does_not_speed_up_one_stream() {
        let pp1 = dep("llama-3.1-8b", "h100", 1, 1).decode_step(1, 100);
        let pp4 = dep("llama-3.1-8b", "h100", 1, 4).decode_step(1, 100);
        assert!((pp4.memory_s - pp1.memory_s).abs() < 1e-12);
        assert!(pp4.total_s() > pp1.total_s());
    }

    #[test]
    fn decode_turns_compute_bound_near_the_ridge_point() {
        // Dense BF16 weights alone: ridge ~ FLOPS / BW x bytes/2 = 989e12 / 3.35e12 = ~295.
        let d = dep("llama-3.1-8b", "h100", 1, 1);
        let b = d.compute_bound_batch(1).unwrap();
        assert!((250..=320).contains(&b), "{b}");
        // Long contexts keep decode memory-bound for longer.
        let long = d.compute_bound_batch(8192);
        assert!(long.is_none_or(|l| l > b));
    }

    #[test]
    fn measured_curve_replaces_the_modelled_allreduce() {
        use crate::record::{CollRecord, Record};
        let line = r#"{"kind":"coll","v":1,"ts":"t","labels":{},"op":"allreduce","backend":"tcp","algo":"ring","ranks":2,"hosts":1,"bytes":8192,"count":2048,"dtype":"f32","redop":"sum","mode":"latency","time_us":{"n":5,"mean":500.0,"stddev":0.0,"min":1.0,"p50":400.0,"p90":1.0,"p95":1.0,"p99":1.0,"p999":1.0,"max":1.0},"algbw_gbps":0.1,"busbw_gbps":0.1,"wrong":0,"checked":true,"iters":5,"warmup":1}"#;
        let Record::Coll(c) = Record::parse(line).unwrap() else {
            panic!()
        };
        let coll: Vec<CollRecord> = vec![c];
        let mut d = dep("llama-3.1-8b", "h100", 2, 1);
        let modelled = d.decode_step(1, 100).comm_s;
        d.comm = Comm::Measured {
            curve: MeasuredCurve::from_records(&coll, 2, true).unwrap(),
            from: "coll.jsonl".into(),
        };
        let measured = d.decode_step(1, 100).comm_s;
        // 64 allreduces at the measured mean, 500 us.
        assert!((measured - 64.0 * 500e-6).abs() < 1e-9, "{measured}");
        assert!(measured > 10.0 * modelled);
        assert!(
            d.comm
                .describe()
                .contains("coll.jsonl (tcp, 2 ranks, latency mode, mean)")
        );
    }

    #[test]
    fn cards_print_as_json_that_loads_back_and_refuse_unknown_fields() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["rtx-pro-6000", "kimi-k2-nvfp4"] {
            let path = dir.path().join(format!("{name}.json"));
            std::fs::write(&path, print_card(name).unwrap()).unwrap();
            let p = path.to_str().unwrap();
            if name == "rtx-pro-6000" {
                assert_eq!(load_hardware(p).unwrap(), hw(name));
            } else {
                assert_eq!(load_model(p).unwrap(), model(name));
            }
        }
        assert!(print_card("nope").unwrap_err().contains("qwen3-32b"));
        let path = dir.path().join("old.json");
        std::fs::write(
            &path,
            r#"{"name":"x","layers":1,"hidden":1,"heads":1,"kv_heads":1,"head_dim":1,"params":1.0,"weight_bytes":2.0}"#,
        )
        .unwrap();
        let err = load_model(path.to_str().unwrap()).unwrap_err();
        assert!(
            err.contains("weight_bytes") && err.contains("--print-card"),
            "{err}"
        );
        let mut bad = hw("h100");
        bad.interconnect.levels.clear();
        std::fs::write(&path, serde_json::to_string(&bad).unwrap()).unwrap();
        assert!(
            load_hardware(path.to_str().unwrap())
                .unwrap_err()
                .contains("levels")
        );
    }

    /// D1: a negative `params` gave a negative roofline and an engine panic, `layers: 0` a
    /// KV cache of u64::MAX tokens, `kv_heads: 0` a division by zero: each is refused at load,
    /// naming the file and the field, as a bad hardware card is.
    #[test]
    fn a_model_card_with_a_count_or_size_that_is_not_positive_is_refused_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        let p = path.to_str().unwrap();
        type Spoil = fn(&mut ModelCard);
        let cases: [(&str, Spoil); 7] = [
            ("params is -8000000000", |m| m.params = -8e9),
            ("layers is 0", |m| m.layers = 0),
            ("kv_heads is 0", |m| m.kv_heads = 0),
            ("head_dim is 0", |m| m.head_dim = 0),
            ("act_bytes is 0", |m| m.act_bytes = 0.0),
            ("not a multiple of kv_heads", |m| m.kv_heads = 3),
            ("intermediate is 0", |m| m.intermediate = Some(0)),
        ];
        for (want, spoil) in cases {
            let mut m = model("llama-3.1-8b");
            spoil(&mut m);
            std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
            let err = load_model(p).unwrap_err();
            assert!(
                err.starts_with(&format!("{p}: ")) && err.contains(want),
                "{want}: {err}"
            );
        }
        let mut moe = model("qwen3-30b-a3b");
        moe.moe.as_mut().unwrap().experts_per_token = 129;
        std::fs::write(&path, serde_json::to_string(&moe).unwrap()).unwrap();
        assert!(
            load_model(p)
                .unwrap_err()
                .contains("moe.experts_per_token 129")
        );
        // Every preset passes.
        for m in preset_names().0 {
            model(&m).check().unwrap();
        }
    }
}
