//! Speculative runs against the roofline (issue 22, item 2): a stream that emits several tokens
//! per verify step rightly beats the one-token-per-step limit, so its limits are the verify
//! step's cost over the tokens per step (the server's acceptance figures, else tokens per
//! chunk), and the header says which; a run of one token per step keeps the plain limits.

use serde_json::Value;
use std::process::{Command, Stdio};
use testkit::num;

/// srv-sim modelling Llama-3.1-8B on one H100, `extra` added; loadgen at C=1 (128 tokens: 32
/// verify steps of 4 with every draft accepted); the summarize text and load-points JSON table.
fn run(extra: &[&str]) -> (String, Value) {
    let mut args = vec!["--model", "llama-3.1-8b", "--hardware", "h100"];
    args.extend(extra);
    let (_sim, url) = testkit::srv_sim(&args);
    let load = Command::new(testkit::bin("loadgen"))
        .args(["--url", &url, "-c", "1", "-n", "3", "--max-tokens", "129"])
        .args(["--input-len", "64", "--no-requests"])
        .stdin(Stdio::null())
        .output()
        .expect("run loadgen");
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    std::fs::write(&path, &load.stdout).unwrap();
    let path = path.to_str().unwrap();
    let summarize = |format: &str| {
        let out = Command::new(testkit::bin("summarize"))
            .args([path, "--roofline", "llama-3.1-8b@h100", "--format", format])
            .stdin(Stdio::null())
            .output()
            .expect("run summarize");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let doc: Value = serde_json::from_str(&summarize("json")).unwrap();
    let table = doc["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "load points")
        .cloned()
        .expect("load points");
    (summarize("text"), table)
}

/// With 4 tokens per verify step the stream decodes ~4x the one-token limit: it read "over" and
/// "impossible, so the card, the layout or the data is wrong". Now it is a share of the
/// speculative limit, from the server's mean accepted length.
#[test]
fn a_speculative_stream_is_judged_against_the_verify_step_not_called_impossible() {
    let (text, table) = run(&["--spec-tokens", "3", "--spec-accept", "1"]);
    assert!(!text.contains("impossible"), "{text}");
    for share in ["mem_pct", "step_pct"] {
        assert!(
            table["rows"][0][share].is_number(),
            "{share} is no share: {table}"
        );
    }
    let spec = table["context"]["speculative"]
        .as_str()
        .unwrap_or_else(|| panic!("no speculative context: {table}"));
    assert!(
        spec.contains("limits are the verify step over the tokens it emits")
            && spec.contains("the server's mean accepted length"),
        "{spec}"
    );
    let row = &table["rows"][0];
    let (rate, limit) = (num(row, "stream_tok_s"), num(row, "step_limit_tok_s"));
    // srv-sim runs the modelled verify step: the stream is at its speculative limit.
    let share = num(row, "step_pct");
    assert!((90.0..=100.0).contains(&share), "{row}");
    // One token per ~4.9 ms step is ~204 tok/s; four per verify step is well above it.
    assert!(rate > 600.0, "{row}");
    assert!(limit > rate * 0.9, "{row}");
}

/// One token per step: no speculative context, the plain limits (the clean case).
#[test]
fn a_plain_stream_keeps_the_one_token_per_step_limits() {
    let (text, table) = run(&[]);
    assert!(table["context"]["speculative"].is_null(), "{table}");
    assert!(!text.contains("verify step"), "{text}");
    let share = num(&table, "/rows/0/step_pct");
    assert!((90.0..=100.0).contains(&share), "{table}");
}
