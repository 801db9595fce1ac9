//! `srv-sim --gemm-from FILE`: collbench's `gemm_step` records replace the roofline's weight
//! GEMMs (interpolated by batch), attention and the step overhead stay modelled; a bad file is
//! one file:line error; records of another model are refused or left out with a warning; and
//! `--calibrate` takes the GEMMs as measured and still recovers a hidden step overhead.
//! The records are written in collbench's documented shape (its CPU backend takes seconds per
//! step of an 8B model, too slow here).

mod common;
use common::{
    CALIBRATION_LOAD, LLAMA_8B_ON_A100, completion_body, get, llama_sim, metric, post, start,
};
use serde_json::{Value, json};
use testkit::num;
use testkit::{json_lines, of_kind};

/// One `gemm_step` record as `collbench gemm` writes it.
fn gemm_step(model: &str, tp: u32, batch: u32, us: f64) -> String {
    let dist = json!({"n":2,"mean":us + 10.0,"stddev":1.0,"min":us,"p50":us,"p90":us + 20.0,
        "p95":us + 20.0,"p99":us + 20.0,"p999":us + 20.0,"max":us + 20.0});
    json!({"kind":"gemm_step","v":1,"ts":"2026-12-01T05:02:22.061Z","labels":{},"backend":"cpu",
        "device":"AMD EPYC, 2 threads","model":model,"hardware":"a100-80g","tp":tp,"batch":batch,
        "dtype":"f32","gemms_per_step":128,"flops_per_step":6.9e9,"bytes_per_step":1.39e10,
        "gemm_us_per_step":us,"sequence_us":dist,"launch_overhead_us_per_step":10.0,
        "roofline_us_per_step":4168.4})
    .to_string()
}

fn write(dir: &std::path::Path, name: &str, lines: &[String]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path.display().to_string()
}

/// Batch 1 measured twice (3000 and 3200 us: 3100 read), then 7 and 2048 tokens.
fn llama_gemms(dir: &std::path::Path) -> String {
    write(
        dir,
        "gemm.jsonl",
        &[
            gemm_step("llama-3.1-8b", 1, 1, 3000.0),
            gemm_step("llama-3.1-8b", 1, 7, 6100.0),
            gemm_step("llama-3.1-8b", 1, 1, 3200.0),
            gemm_step("llama-3.1-8b", 1, 2048, 60000.0),
        ],
    )
}

fn plan(args: &[&str]) -> (Value, String) {
    let out = llama_sim(&[&["--dry-run"][..], args].concat());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let records = json_lines(&out.stdout);
    (of_kind(&records, "sim_plan")[0].clone(), err)
}

#[test]
fn a_dry_run_with_gemm_from_times_the_gemm_part_as_measured_and_the_rest_as_modelled() {
    let dir = tempfile::tempdir().unwrap();
    let gemms = llama_gemms(dir.path());
    let (modelled, _) = plan(&[]);
    let (measured, _) = plan(&["--gemm-from", &gemms]);
    assert_eq!(modelled["compute_source"], "model");
    assert!(modelled.get("decode_gemm_ms").is_none(), "{modelled}");
    let source = measured["compute_source"].as_str().unwrap();
    assert_eq!(
        source,
        format!("measured: {gemms} (batches 1-2048 (3 points))")
    );
    // Batch 1: the mean of its two records.
    let gemm = num(&measured, "decode_gemm_ms");
    assert!((gemm - 3.1).abs() < 1e-12, "{gemm}");
    // The weights left memory and compute: what remains is attention over the KV cache.
    let kv = num(&measured, "kv_bytes_per_token") * num(&measured, "context_tokens");
    let weights = num(&measured, "active_weight_bytes_per_token");
    let share = num(&measured, "decode_memory_ms") / num(&modelled, "decode_memory_ms");
    assert!((share - kv / (kv + weights)).abs() < 1e-9, "{share}");
    assert!(num(&measured, "decode_compute_ms") < num(&modelled, "decode_compute_ms"));
    // The step: measured GEMMs, then the overlapped rest, the allreduces and the overhead.
    let rest = num(&measured, "decode_memory_ms").max(num(&measured, "decode_compute_ms"))
        + num(&measured, "decode_comm_ms")
        + num(&measured, "step_overhead_ms");
    let step = num(&measured, "decode_step_ms");
    assert!(
        (step - (gemm + rest)).abs() < 1e-9,
        "{step} vs {gemm} + {rest}"
    );
}

#[test]
fn a_step_between_measured_batches_reads_the_linear_interpolation() {
    let dir = tempfile::tempdir().unwrap();
    let gemms = llama_gemms(dir.path());
    // Three drafts: one verify step of 4 tokens, halfway between batch 1 (3100) and 7 (6100).
    let spec = ["--spec-tokens", "3", "--spec-accept", "0.5"];
    let (p, _) = plan(&[&spec[..], &["--gemm-from", &gemms]].concat());
    let verify_ms = num(&p, "spec_tokens_per_step") / num(&p, "spec_single_stream_tok_s") * 1e3;
    // Without TP the verify step's non-GEMM part is the decode step's (same KV, no allreduce).
    let rest = num(&p, "decode_step_ms") - num(&p, "decode_gemm_ms");
    let gemm = verify_ms - rest;
    assert!((gemm - 4.6).abs() < 1e-9, "{gemm}");
}

#[test]
fn a_bad_gemm_record_is_one_error_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.jsonl",
        &[
            gemm_step("llama-3.1-8b", 1, 1, 3000.0),
            gemm_step("llama-3.1-8b", 1, 8, 4000.0)
                .replace(r#""gemm_us_per_step":4000.0"#, r#""gemm_us_per_step":-5.0"#),
        ],
    );
    let out = llama_sim(&["--dry-run", "--gemm-from", &bad]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(&format!("{bad}:2")), "{err}");
    assert!(err.contains("gemm_us_per_step"), "{err}");
    assert!(out.stdout.is_empty());
    let garbled = write(dir.path(), "garbled.jsonl", &["{not json".into()]);
    let out = llama_sim(&["--dry-run", "--gemm-from", &garbled]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{garbled}:1")), "{err}");
}

#[test]
fn gemm_records_of_another_model_are_refused_alone_and_left_out_with_a_warning_beside_ours() {
    let dir = tempfile::tempdir().unwrap();
    let qwen = gemm_step("qwen3-32b", 2, 1, 9000.0);
    let theirs = write(dir.path(), "qwen.jsonl", std::slice::from_ref(&qwen));
    let out = llama_sim(&["--dry-run", "--gemm-from", &theirs]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("gemm_step records of qwen3-32b at tp 2 only"),
        "{err}"
    );
    assert!(
        err.contains("collbench gemm --model llama-3.1-8b --tp 1"),
        "{err}"
    );
    let mixed = write(
        dir.path(),
        "mixed.jsonl",
        &[qwen, gemm_step("llama-3.1-8b", 1, 1, 3000.0)],
    );
    let (p, err) = plan(&["--gemm-from", &mixed]);
    assert_eq!(err.matches("left out").count(), 1, "{err}");
    assert!(
        err.contains("1 gemm_step record(s) of another model or TP"),
        "{err}"
    );
    assert!((num(&p, "decode_gemm_ms") - 3.0).abs() < 1e-12, "{p}");
}

#[test]
fn calibrate_with_gemm_from_keeps_the_measured_gemms_and_recovers_the_hidden_overhead() {
    let dir = tempfile::tempdir().unwrap();
    let gemms = llama_gemms(dir.path());
    // The "real engine": srv-sim itself with a 2 ms step overhead the fit is not told.
    let out = llama_sim(
        &[
            &["--predict", "--step-overhead", "2ms", "--gemm-from", &gemms][..],
            CALIBRATION_LOAD,
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut text = String::new();
    for mut r in json_lines(&out.stdout) {
        r["labels"] = json!({"run": "measured"});
        text.push_str(&format!("{r}\n"));
    }
    let run = dir.path().join("measured.jsonl");
    std::fs::write(&run, text).unwrap();
    let out = llama_sim(&["--calibrate", run.to_str().unwrap(), "--gemm-from", &gemms]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let card: Value = serde_json::from_slice(&out.stdout).expect("the card is JSON");
    assert_eq!(
        card["gemm_from"],
        format!("measured: {gemms} (batches 1-2048 (3 points))")
    );
    let overhead = num(&card, "step_overhead_us");
    assert!((overhead / 2000.0 - 1.0).abs() < 0.05, "{overhead}: {card}");
    for p in card["points"].as_array().unwrap() {
        for i in 0..3 {
            let off = p["modelled"][i].as_f64().unwrap() / p["measured"][i].as_f64().unwrap() - 1.0;
            assert!(off.abs() < 0.05, "{off:+.3} at {p}");
        }
    }
}

#[test]
fn served_with_gemm_from_the_flop_and_byte_counters_still_count_the_weights() {
    let dir = tempfile::tempdir().unwrap();
    let gemms = llama_gemms(dir.path());
    // The same requests, one after another: the same steps, whoever times their GEMMs.
    let counters = |extra: &[&str]| {
        let sim = start(&[&["--enable-mfu-metrics"][..], LLAMA_8B_ON_A100, extra].concat());
        for _ in 0..2 {
            let x = post(sim.port, "/v1/completions", &completion_body(16, 4, true));
            assert_eq!(x.status, 200);
        }
        let metrics = get(sim.port, "/metrics").1;
        (
            metric(&metrics, "vllm:estimated_flops_per_gpu_total"),
            metric(&metrics, "vllm:estimated_read_bytes_per_gpu_total"),
        )
    };
    let (flops, bytes) = counters(&[]);
    let (measured_flops, measured_bytes) = counters(&["--gemm-from", &gemms]);
    assert!(flops > 0.0 && bytes > 0.0);
    assert!(
        (measured_flops / flops - 1.0).abs() < 1e-9,
        "{measured_flops} vs {flops}"
    );
    assert!(
        (measured_bytes / bytes - 1.0).abs() < 1e-9,
        "{measured_bytes} vs {bytes}"
    );
}

/// The H200's measured GEMMs (collbench on a real H200, batches 1, 8 and 64 of llama-3.1-8b):
/// held flat past batch 64, a C=64 wave's 8,192-token prefill step cost what a 64-sequence
/// decode step costs and the predicted sweep doubled its tok/s. Scaled with its FLOPs, the
/// prefill step costs many decode steps, and srv-sim says how it read it.
#[test]
fn with_the_h200s_measured_gemms_a_c64_prefill_step_costs_more_than_a_decode_step() {
    let gemms = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/tests/fixtures/gemm_step_h200.jsonl"
    );
    let out = testkit::call("srv-sim")
        .args(["--model", "llama-3.1-8b", "--hardware", "h200"])
        .args(["--predict", "--gemm-from", gemms, "-c", "64", "-n", "64"])
        .args(["--input-len", "1024", "--max-tokens", "16", "--no-requests"])
        .arg("--enable-logging-iteration-details")
        .run();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("a 8192-token step is") && err.contains("batch 64's"),
        "the extrapolation is said: {err}"
    );
    let steps: Vec<(u32, u32, f64)> = err
        .lines()
        .filter_map(
            |l| match servbench::steplog::parse_step_line(l, &Default::default()).0 {
                // srv-sim runs its steps synchronously: its logged wait is the whole step.
                servbench::steplog::StepLine::Step(s) => {
                    Some((s.ctx_tokens, s.gen_requests, s.result_wait_ms?))
                }
                _ => None,
            },
        )
        .collect();
    let longest_prefill = steps
        .iter()
        .filter(|s| s.0 >= 4096)
        .map(|s| s.2)
        .fold(0.0, f64::max);
    let decode: Vec<f64> = steps
        .iter()
        .filter(|s| s.0 == 0 && s.1 == 64)
        .map(|s| s.2)
        .collect();
    assert!(!decode.is_empty(), "no 64-sequence decode step: {steps:?}");
    let decode_ms = decode.iter().sum::<f64>() / decode.len() as f64;
    assert!(
        longest_prefill > 10.0 * decode_ms,
        "a prefill step of 4096+ tokens {longest_prefill} ms against a 64-sequence decode step {decode_ms} ms"
    );
}
