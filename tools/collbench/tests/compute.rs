//! The compute half: `collbench gemm`, `collbench limits` and `decode --compute` on the CPU
//! backend (the same harness, shapes and records a GPU gets), and the cuBLAS backend on a
//! machine without CUDA (one line naming the library, exit 2, nothing measured).

use serde_json::Value;
use testkit::of_kind;
use testkit::stderr;
use testkit::{cmd, json_lines};

/// A card small enough that every GEMM of its step takes microseconds, with a dense layer,
/// a MoE layer and a shared expert.
const TINY_MOE: &str = r#"{"name":"tiny-moe","layers":2,"hidden":128,"heads":2,"kv_heads":1,"head_dim":64,"params":1e6,"weight_format":"bf16","intermediate":256,"moe":{"experts":8,"experts_per_token":2,"moe_layers":1,"expert_params":49152,"shared_experts":1}}"#;

fn card(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("tiny-moe.json");
    std::fs::write(&path, TINY_MOE).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn gemm_writes_each_shape_and_a_step_whose_sums_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let card = card(&dir);
    let out = cmd("collbench")
        .args([
            "gemm", "--model", &card, "--batch", "1,3", "-n", "3", "-w", "1",
        ])
        .args(["--step-iters", "2", "--threads", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let recs = json_lines(&out.stdout);
    let steps = of_kind(&recs, "gemm_step");
    assert_eq!(steps.len(), 2, "one step per batch: {recs:?}");
    for step in steps {
        let batch = step["batch"].as_u64().unwrap();
        let gemms: Vec<&Value> = of_kind(&recs, "gemm")
            .into_iter()
            .filter(|g| g["batch"] == batch)
            .collect();
        // qkv, attn_out (2 layers), gate_up, down (1 dense), router, experts, shared (1 MoE).
        let calls: u64 = gemms.iter().map(|g| g["per_step"].as_u64().unwrap()).sum();
        assert_eq!(step["gemms_per_step"].as_u64().unwrap(), calls);
        let expert_tokens: u64 = gemms
            .iter()
            .filter(|g| g["name"] == "expert_down")
            .map(|g| g["m"].as_u64().unwrap() * g["per_step"].as_u64().unwrap())
            .sum();
        assert_eq!(
            expert_tokens,
            batch * 2,
            "batch x top-2 tokens reach experts"
        );
        let sum: f64 = gemms
            .iter()
            .map(|g| g["time_us"]["mean"].as_f64().unwrap() * g["per_step"].as_f64().unwrap())
            .sum();
        let gemm_us = step["gemm_us_per_step"].as_f64().unwrap();
        assert!(
            (sum - gemm_us).abs() < 1e-6 * gemm_us.max(1.0),
            "{sum} {gemm_us}"
        );
        let launch = step["launch_overhead_us_per_step"].as_f64().unwrap();
        let seq = step["sequence_us"]["mean"].as_f64().unwrap();
        assert!((launch - (seq - gemm_us).max(0.0)).abs() < 1e-6, "{step}");
        assert_eq!(step["sequence_us"]["n"], 2);
        // No CUDA graph on the cores; each call timed alone there, and the record says so.
        assert!(step.get("graph_us").is_none(), "{step}");
        for g in &gemms {
            assert_eq!(
                (&g["timing"], &g["calls_per_sample"]),
                (&"per_call".into(), &1.into())
            );
            assert_eq!(g["backend"], "cpu");
            assert_eq!(g["dtype"], "f32");
            assert_eq!(g["card_dtype"], "bf16");
            assert_eq!(g["time_us"]["n"], 3);
            let (m, n, k) = (
                g["m"].as_f64().unwrap(),
                g["n"].as_f64().unwrap(),
                g["k"].as_f64().unwrap(),
            );
            let us = g["time_us"]["mean"].as_f64().unwrap();
            let tflops = g["tflops"].as_f64().unwrap();
            assert!((tflops - 2.0 * m * n * k / us / 1e6).abs() < 1e-9 * tflops.max(1e-9));
        }
    }
    let err = stderr(&out);
    assert!(
        err.contains("expert_gate_up") && err.contains("launch overhead"),
        "{err}"
    );
}

#[test]
fn a_shape_by_hand_is_timed_without_a_card() {
    let out = cmd("collbench")
        .args(["gemm", "--shape", "8x64x32,1x16x16", "-n", "2", "-w", "0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let recs = json_lines(&out.stdout);
    assert_eq!(recs.len(), 2, "no step record without a card: {recs:?}");
    assert_eq!(
        (&recs[0]["m"], &recs[0]["n"], &recs[0]["k"]),
        (&8.into(), &64.into(), &32.into())
    );
    assert!(
        recs.iter()
            .all(|r| r["name"] == "custom" && r.get("model").is_none())
    );
}

#[test]
fn limits_on_the_cpu_measure_bandwidth_and_the_call_overhead() {
    let out = cmd("collbench")
        .args([
            "limits", "--bytes", "8M", "-n", "3", "-w", "1", "--label", "box=ci",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let recs = json_lines(&out.stdout);
    assert_eq!(recs.len(), 1);
    let l = &recs[0];
    assert_eq!(
        (l["kind"].as_str(), l["backend"].as_str()),
        (Some("device_limits"), Some("cpu"))
    );
    assert_eq!(l["bytes"], 8 << 20);
    assert_eq!(l["labels"]["box"], "ci");
    for f in ["copy_gbps", "read_gbps"] {
        assert!(l[f].as_f64().unwrap() > 0.0, "{f}: {l}");
    }
    // copy counts bytes read and written.
    let copy_us = l["copy_us"]["mean"].as_f64().unwrap();
    let want = 2.0 * (8 << 20) as f64 / (copy_us * 1e-6) / 1e9;
    assert!((l["copy_gbps"].as_f64().unwrap() - want).abs() < 1e-9 * want);
    assert!(
        l.get("launch_sync_us").is_none(),
        "no launch round trip on a CPU"
    );
}

#[test]
fn decode_compute_times_both_halves_of_the_same_step() {
    let dir = tempfile::tempdir().unwrap();
    let card = card(&dir);
    let out = cmd("collbench")
        .args(["decode", "--model", &card, "--tp", "2", "--batch", "1,2"])
        .args(["-n", "2", "-w", "1", "--compute", "--step-iters", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let recs = json_lines(&out.stdout);
    assert_eq!(of_kind(&recs, "decode").len(), 2);
    let steps = of_kind(&recs, "gemm_step");
    assert_eq!(steps.len(), 2);
    for s in steps {
        assert_eq!(
            (s["tp"].as_u64(), s["model"].as_str()),
            (Some(2), Some("tiny-moe"))
        );
    }
    // TP2 halves the shards: the qkv of 2 heads + 2 x 1 replicated KV head, 64 wide.
    let qkv = of_kind(&recs, "gemm")
        .into_iter()
        .find(|g| g["name"] == "qkv")
        .unwrap();
    assert_eq!(
        (qkv["n"].as_u64(), qkv["k"].as_u64()),
        (Some((1 + 2) * 64), Some(128))
    );
}

/// A TP1 engine runs no allreduce: `decode --tp 1` measures none (no rank is started, no
/// socket opened), says so in one line, and its records carry communication 0 beside the
/// compute half alone; summarize's budget and verdict say the same.
#[test]
fn decode_at_tp_1_counts_no_allreduce_and_keeps_the_compute_half_alone() {
    let dir = tempfile::tempdir().unwrap();
    let card = card(&dir);
    let out = cmd("collbench")
        .args(["decode", "--model", &card, "--tp", "1", "--batch", "1,2"])
        .args(["-n", "2", "-w", "1", "--compute", "--step-iters", "1"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let said: Vec<&str> = err.lines().filter(|l| l.contains("allreduce")).collect();
    assert_eq!(
        said,
        vec![
            "collbench: --tp 1: a TP1 step runs no allreduce, so none is measured: communication 0, the step is its compute half alone"
        ],
        "{err}"
    );
    let recs = json_lines(&out.stdout);
    let decode = of_kind(&recs, "decode");
    assert_eq!(decode.len(), 2, "{recs:?}");
    for d in &decode {
        assert_eq!(d["tp"], 1, "{d}");
        assert_eq!(d["allreduces_per_step"], 0, "{d}");
        assert_eq!(d["allreduce_bytes"], 0, "{d}");
        assert_eq!(d["allreduce_us"]["n"], 0, "{d}");
        assert_eq!(d["algo"], "none", "{d}");
        for zero in [
            "comm_us_per_token",
            "comm_us_per_token_p99",
            "comm_fraction",
        ] {
            assert_eq!(d[zero].as_f64(), Some(0.0), "{zero}: {d}");
        }
        assert!(d["step_roofline_us"].as_f64().unwrap() > 0.0, "{d}");
    }
    assert_eq!(of_kind(&recs, "gemm_step").len(), 2, "the compute half");
    // summarize: communication 0 in the budget (no mean where nothing ran), the compute alone
    // in the verdict, and no word of a tcp measurement that did not happen.
    let file = dir.path().join("tp1.jsonl");
    std::fs::write(&file, &out.stdout).unwrap();
    let text = testkit::call("summarize").arg(&file).run_ok().out();
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("tiny-moe")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    for row in rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        // model hardware backend TP batch B per-step mean comm-ms roofline comm-% #wrong
        assert_eq!(
            (cells[6], cells[7], cells[8], cells[10]),
            ("0", "-", "0", "0.0"),
            "{row}"
        );
    }
    assert!(
        text.contains("note: batch 1: no allreduce at TP1: the step is its compute alone"),
        "{text}"
    );
    assert!(!text.contains("the tcp backend measured"), "{text}");
}

#[test]
/// What the device needs (CUDA 13: libcublas.so.13 in PyTorch's wheels) is among the names
/// looked for, and the line names every one, so a user sees which to provide.
fn cublas_without_cuda_names_every_library_file_it_looked_for_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let card = card(&dir);
    for args in [
        vec!["gemm", "--compute-backend", "cublas", "--shape", "8x8x8"],
        vec!["limits", "--compute-backend", "cublas"],
        // Known before any allreduce runs.
        vec![
            "decode",
            "--model",
            &card,
            "--tp",
            "2",
            "--compute",
            "--compute-backend",
            "cublas",
        ],
    ] {
        let out = cmd("collbench")
            .args(&args)
            .env("LD_LIBRARY_PATH", "/nonexistent")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one error line: {err}");
        assert!(
            err.starts_with("collbench: error: --compute-backend cublas: cannot load"),
            "{err}"
        );
        assert!(
            err.contains("cannot load the CUDA driver: looked for libcuda.so ")
                && err.contains(" libcuda.so.1 "),
            "{err}"
        );
        assert!(
            err.contains("cannot load cuBLAS: looked for libcublas.so ")
                && err.contains(" libcublas.so.13 ")
                && err.contains(" libcublas.so.12 "),
            "{err}"
        );
        assert!(err.contains("LD_LIBRARY_PATH"), "{err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn bad_compute_input_is_one_line_and_exit_2() {
    for (args, needle) in [
        (vec!["gemm", "--shape", "8x0x8"], "MxNxK"),
        (
            vec!["gemm", "--model", "llama-3.1-8b", "--tp", "3"],
            "heads 32 does not split over --tp 3",
        ),
        (
            vec!["gemm", "--shape", "8x8x8", "--gemm-dtype", "bf16"],
            "computes in f32",
        ),
        (vec!["gemm"], "--model"),
        (vec!["gemm", "--model", "gpt-9"], "unknown model preset"),
        (vec!["limits", "--bytes", "4K"], "at least 1M"),
    ] {
        let out = cmd("collbench").args(&args).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
