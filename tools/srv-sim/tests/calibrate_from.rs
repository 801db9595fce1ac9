//! `loadgen --step-grid` into `srv-sim --calibrate-from`, against an engine whose truth is
//! known: srv-sim serving (launched by srv-launch `--self-report`, so it logs every step) with a
//! calibration card the fit never sees, a hidden 1.5 ms step overhead and 80 us of attention per
//! 1000 KV-cache tokens. The grid's cells come from the engine's step log (the modelled step
//! times, whatever the box's load), so the fit must recover both within 5%, and a prediction
//! from the grid must land within 1% of the hidden engine's own (both in virtual time; the
//! served sweep against the prediction is scripts/bench-predict.sh's figure, not a test's).
//! A hidden front end (20 ms, 2 ms per stream in flight, 10 ms per 1000 prompt tokens), held by
//! the served srv-sim before each request's queue, is recovered from the grid's requests (their
//! TTFT less the engine's) beside loopback HTTP's own.
//! A grid that is not one is refused naming the file.

use serde_json::Value;
use testkit::{json_lines, num, of_kind, sh};

const HIDDEN_OVERHEAD_US: f64 = 1500.0;
const HIDDEN_ATTENTION_US: f64 = 80.0;
/// fixed_ms, per_stream_ms, per_prompt_ktok_ms.
const HIDDEN_FRONT_END: [(&str, f64); 3] = [
    ("fixed_ms", 20.0),
    ("per_stream_ms", 2.0),
    ("per_prompt_ktok_ms", 10.0),
];

/// The hidden card, with `front_end` where given, written to `name` in `dir`.
fn hidden_card(dir: &std::path::Path, name: &str, front_end: Option<&Value>) -> String {
    let mut card = serde_json::json!({
        "hardware": "h100", "model": "llama-3.1-8b",
        "step_overhead_us": HIDDEN_OVERHEAD_US, "bandwidth_fraction": 1.0,
        "flops_fraction": 1.0, "prefill_efficiency": 1.0,
        "attention_us_per_kv_ktok": HIDDEN_ATTENTION_US, "fitted_on": "hidden",
    });
    if let Some(f) = front_end {
        card["front_end"] = f.clone();
    }
    let path = dir.join(name);
    std::fs::write(&path, card.to_string()).unwrap();
    path.display().to_string()
}

/// The grid loadgen measures at `inputs` against srv-sim serving `card`.
fn measure_grid(dir: &std::path::Path, card: &str, inputs: &str) -> (String, Vec<Value>) {
    let d = dir.display();
    let out = sh(&format!(
        "srv-launch sim --self-report -- --calibration {card} > {d}/server.jsonl && \
         loadgen --step-grid -c 1,16 --input-len {inputs} --max-tokens 16 --duration 300ms \
           < {d}/server.jsonl > {d}/grid.jsonl; \
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
    let hidden = hidden_card(dir.path(), "hidden.json", None);
    let (grid, cells) = measure_grid(dir.path(), &hidden, "64,512,2048");
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

    // Predicted from the grid against the hidden engine's own prediction (with the front end
    // fitted to loopback HTTP's time, which the served engine's clients saw): within 1%.
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
        &[
            "--predict",
            "--calibration",
            &hidden_card(dir.path(), "truth.json", Some(&card["front_end"])),
        ][..],
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
fn a_step_grid_recovers_a_hidden_front_end_per_stream_and_prompt_token() {
    let dir = tempfile::tempdir().unwrap();
    let hidden =
        serde_json::Map::from_iter(HIDDEN_FRONT_END.map(|(k, v)| (k.to_string(), Value::from(v))));
    let hidden = hidden_card(dir.path(), "hidden.json", Some(&Value::Object(hidden)));
    let (grid, _) = measure_grid(dir.path(), &hidden, "64,2048");
    let out = sim(&["--calibrate-from", &grid]);
    let card: Value = serde_json::from_slice(&out.stdout).expect("the card is JSON");
    // The front end: each term within 25% (the served count of streams lags a step, and
    // loopback HTTP's own time, 1-3 ms in a debug build on a busy box, joins the fixed one).
    let front_end = &card["front_end"];
    for (k, hidden) in HIDDEN_FRONT_END {
        let fitted = num(front_end, &format!("/{k}"));
        let slack = if k == "fixed_ms" { 3.0 } else { 0.0 };
        assert!(
            fitted >= hidden * 0.75 && fitted <= hidden * 1.25 + slack,
            "front end {k}: {fitted} against a hidden {hidden}: {front_end}"
        );
    }
    assert_eq!(
        card["front_end_points"].as_array().unwrap().len(),
        2 * 2 + 2
    );
    // Each grid point's front end is printed, measured against modelled.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("front end at C="))
            .count(),
        2 * 2 + 2,
        "{err}"
    );
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

#[test]
fn a_cards_front_end_delays_each_predicted_first_token_by_its_streams_and_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let hidden =
        serde_json::Map::from_iter(HIDDEN_FRONT_END.map(|(k, v)| (k.to_string(), Value::from(v))));
    let with = hidden_card(dir.path(), "with.json", Some(&Value::Object(hidden)));
    let without = hidden_card(dir.path(), "without.json", None);
    let ttft = |card: &str, c: &str| {
        let out = sim(&[
            "--predict",
            "--calibration",
            card,
            "-c",
            c,
            "-n",
            "16",
            "--input-len",
            "300",
            "--max-tokens",
            "32",
            "--no-requests",
        ]);
        num(
            of_kind(&json_lines(&out.stdout), "summary")[0],
            "/ttft_ms/mean",
        )
    };
    // C=1: 20 ms + 2 ms for its one stream + 10 ms per 1000 of its 300 prompt tokens. C=8:
    // each wave of eight re-sent requests leaves the front end together, at eight streams.
    for (c, want) in [("1", 25.0), ("8", 20.0 + 16.0 + 3.0)] {
        let added = ttft(&with, c) - ttft(&without, c);
        assert!(
            (added - want).abs() < 0.5,
            "C={c}: {added} ms added, not {want}"
        );
    }
}
