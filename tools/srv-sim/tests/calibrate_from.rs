//! `loadgen --step-grid` into `srv-sim --calibrate-from`, against an engine whose truth is
//! known: srv-sim serving (launched by srv-launch `--self-report`, so it logs every step) with a
//! calibration card the fit never sees, a hidden 1.5 ms step overhead and 80 us of attention per
//! 1000 KV-cache tokens. The grid's cells come from the engine's step log (the modelled step
//! times, whatever the box's load), so the fit must recover both within 5%, and a prediction
//! from the grid must land within 1% of the hidden engine's own (both in virtual time; the
//! served sweep against the prediction is scripts/bench-predict.sh's figure, not a test's).
//! A grid that is not one is refused naming the file.

use serde_json::Value;
use testkit::{json_lines, num, of_kind, sh};

const HIDDEN_OVERHEAD_US: f64 = 1500.0;
const HIDDEN_ATTENTION_US: f64 = 80.0;

fn hidden_card(dir: &std::path::Path) -> String {
    let card = serde_json::json!({
        "hardware": "h100", "model": "llama-3.1-8b",
        "step_overhead_us": HIDDEN_OVERHEAD_US, "bandwidth_fraction": 1.0,
        "flops_fraction": 1.0, "prefill_efficiency": 1.0,
        "attention_us_per_kv_ktok": HIDDEN_ATTENTION_US, "fitted_on": "hidden",
    });
    let path = dir.join("hidden.json");
    std::fs::write(&path, card.to_string()).unwrap();
    path.display().to_string()
}

/// The grid loadgen measures against srv-sim serving the hidden card.
fn measure_grid(dir: &std::path::Path) -> (String, Vec<Value>) {
    let hidden = hidden_card(dir);
    let d = dir.display();
    let out = sh(&format!(
        "srv-launch sim --self-report -- --calibration {hidden} > {d}/server.jsonl && \
         loadgen --step-grid -c 1,16 --input-len 64,512,2048 --max-tokens 16 --duration 300ms \
           --no-requests < {d}/server.jsonl > {d}/grid.jsonl; \
         rc=$?; srv-kill --from {d}/server.jsonl > /dev/null; exit $rc"
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read(dir.join("grid.jsonl")).unwrap();
    let cells: Vec<Value> = of_kind(&json_lines(&text), "step_cell")
        .into_iter()
        .cloned()
        .collect();
    (format!("{d}/grid.jsonl"), cells)
}

fn sim(args: &[&str]) -> std::process::Output {
    let out = testkit::cmd("srv-sim").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "srv-sim {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn a_step_grid_recovers_a_hidden_overhead_and_attention_and_predicts_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let (grid, cells) = measure_grid(dir.path());
    // A decode cell per batch and prompt, a prefill cell per prompt, all from the step log.
    assert_eq!(cells.len(), 2 * 3 + 3, "{cells:?}");
    for c in &cells {
        assert_eq!(c["source"], "engine_steps", "{c}");
        assert!(num(c, "/step_ms") > 0.0);
    }
    let prefill: Vec<&Value> = cells.iter().filter(|c| c["phase"] == "prefill").collect();
    assert_eq!(prefill.len(), 3);
    assert!(prefill.iter().all(|c| c["batch"] == 1 && c["chunks"] == 1));

    let out = sim(&["--calibrate-from", &grid]);
    let card: Value = serde_json::from_slice(&out.stdout).expect("the card is JSON");
    let off = |k: &str, want: f64| num(&card, &format!("/{k}")) / want - 1.0;
    let overhead = off("step_overhead_us", HIDDEN_OVERHEAD_US);
    let attention = off("attention_us_per_kv_ktok", HIDDEN_ATTENTION_US);
    assert!(
        overhead.abs() < 0.05 && attention.abs() < 0.05,
        "overhead {:+.1}%, attention {:+.1}%: {card}",
        overhead * 100.0,
        attention * 100.0
    );
    assert_eq!(card["cells"].as_array().unwrap().len(), cells.len());
    // Each cell's residual is printed.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines().filter(|l| l.contains(": measured ")).count(),
        cells.len(),
        "{err}"
    );

    // Predicted from the grid against the hidden engine's own prediction: within 1%.
    let load = [
        "-c",
        "1,8",
        "--input-len",
        "300",
        "--max-tokens",
        "64",
        "-n",
        "16",
    ];
    let truth = sim(&[
        &["--predict", "--calibration", &hidden_card(dir.path())][..],
        &load,
    ]
    .concat());
    let fitted = sim(&[&["--predict", "--calibrate-from", &grid][..], &load].concat());
    let (truth, fitted) = (json_lines(&truth.stdout), json_lines(&fitted.stdout));
    let (truth, fitted) = (of_kind(&truth, "summary"), of_kind(&fitted, "summary"));
    assert_eq!(truth.len(), 2);
    for (t, f) in truth.iter().zip(&fitted) {
        for at in ["/output_tok_s", "/ttft_ms/mean", "/tpot_ms/mean"] {
            let e = num(f, at) / num(t, at) - 1.0;
            assert!(
                e.abs() < 0.01,
                "{at} {:+.2}% at C={}",
                e * 100.0,
                t["point"]["concurrency"]
            );
        }
    }
}

#[test]
fn a_file_with_no_step_cell_or_a_cell_that_is_no_step_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "{\"kind\":\"kill\",\"v\":2,\"ts\":\"2026-12-04T00:00:00.000Z\",\"pid\":1,\"signal\":\"TERM\",\"outcome\":\"gone\"}\n").unwrap();
    let out = testkit::cmd("srv-sim")
        .args(["--calibrate-from", empty.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("holds no step_cell record"), "{err}");

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"kind\":\"step_cell\",\"v\":2,\"ts\":\"2026-12-04T00:00:00.000Z\",\"phase\":\"decode\",\"batch\":4,\"input_len\":64,\"max_tokens\":16,\"context_tokens\":72,\"step_ms\":-1,\"step_ms_stddev\":0,\"samples\":3,\"source\":\"engine_steps\",\"point_index\":7}\n").unwrap();
    let out = testkit::cmd("srv-sim")
        .args(["--calibrate-from", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("step_cell of point 7: step_ms -1"), "{err}");
}
