//! The P:D comparison across runs: `summarize --compare run-1p1d.jsonl run-2p1d.jsonl` puts
//! two disaggregated layouts side by side per load point (tok/s, tok/s per GPU, TTFT p50/p90
//! and its five parts, TPOT) and names which layout wins where and what limits each. On real
//! pipelines (`srv-launch sim --pd 1p1d` and `--pd 2p1d` | loadgen | srv-kill), and on the
//! README's example as printed (tests/fixtures/pd_1p1d.jsonl and pd_2p1d.jsonl: the same
//! pipelines with 2,000-token prompts and at most 8 running requests per decode server).

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::*;
use serde_json::Value;
use summarize::compare::pd::RunLayout;
use summarize::input;
use testkit::{bash, stderr};

/// The P:D table of `summarize --compare base new --format json` (run in `dir`).
fn pd_table(dir: &std::path::Path, base: &str, new: &str) -> Value {
    let out = testkit::run_in(
        dir,
        "summarize",
        &["--compare", base, new, "--format", "json"],
    )
    .ok()
    .out();
    let report: Value = serde_json::from_str(&out).unwrap();
    report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "P:D layouts, times in ms")
        .cloned()
        .unwrap_or_else(|| panic!("no P:D table in {out}"))
}

fn num(row: &Value, col: &str) -> f64 {
    row[col]
        .as_f64()
        .unwrap_or_else(|| panic!("{col} in {row}"))
}

#[test]
fn two_real_p_d_layouts_side_by_side_name_the_decode_queue_that_limits_2p1d() {
    let dir = tempfile::tempdir().unwrap();
    for layout in ["1p1d", "2p1d"] {
        // At most 4 running requests per decode server: at C=16 two prefill servers hand the
        // one decode server more than it runs, so its queue grows.
        let out = bash(&format!(
            "set -o pipefail; srv-launch sim --pd {layout} -- --hardware rtx-pro-6000 \
             --enable-per-request-metrics --max-running-requests 4 \
             | loadgen -c 1,16 -n 32 --input-len 2000 --max-tokens 32 \
             | srv-kill > {}/run-{layout}.jsonl",
            dir.path().display()
        ));
        assert!(out.status.success(), "{layout}: {}", stderr(&out));
    }
    let t = pd_table(dir.path(), "run-1p1d.jsonl", "run-2p1d.jsonl");
    assert_eq!(
        t["context"]["base"], "1p1d:run-1p1d.jsonl",
        "the layout from the server records: {t}"
    );
    let rows = t["rows"].as_array().unwrap();
    let seen: Vec<(i64, &str, i64)> = rows
        .iter()
        .map(|r| {
            (
                r["conc"].as_i64().unwrap(),
                r["layout"].as_str().unwrap(),
                r["gpus"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (1, "1p1d", 2),
            (1, "2p1d", 3),
            (16, "1p1d", 2),
            (16, "2p1d", 3)
        ],
        "each point's two layouts side by side, GPUs from the members: {t}"
    );
    for r in rows {
        let per_gpu = num(r, "tok_s") / num(r, "gpus");
        assert!((num(r, "tok_s_per_gpu") - per_gpu).abs() < 1e-3, "{r}");
        let parts: f64 = [
            "prefill_queue_ms",
            "prefill_ms",
            "kv_transfer_ms",
            "decode_queue_ms",
            "first_decode_ms",
        ]
        .iter()
        .map(|c| num(r, c))
        .sum();
        assert!(parts > 0.0 && parts <= num(r, "ttft_p90") * 1.5, "{r}");
        assert!(num(r, "ttft_p50") <= num(r, "ttft_p90"), "{r}");
    }
    let notes: Vec<&str> = t["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let at16 = notes
        .iter()
        .find(|n| n.contains("at C=16") || n.starts_with("At C=16"))
        .unwrap_or_else(|| panic!("a note for C=16: {notes:?}"));
    assert!(
        at16.contains("2p1d: decode queue")
            || at16.contains("2p1d loses there to its decode queue"),
        "2p1d's decode side limits it at C=16: {at16}"
    );
    assert!(at16.contains("add a decode instance"), "{at16}");
    assert!(
        at16.contains("1p1d: prefill") || at16.contains("1p1d loses there to its prefill"),
        "1p1d's prefill side limits it at C=16: {at16}"
    );
}

#[test]
fn a_runs_layout_and_gpus_come_from_its_members_records() {
    for (name, layout, gpus) in [("pd_1p1d.jsonl", "1p1d", 2), ("pd_2p1d.jsonl", "2p1d", 3)] {
        let mut inputs = input::Inputs::default();
        input::load_one(name, read(name).as_bytes(), true, None, &mut inputs).unwrap();
        let run = RunLayout::of(&inputs.servers, &points(name)).unwrap();
        assert_eq!((run.name(), run.gpus), (layout.to_string(), gpus));
        // Without the server records, the points' `pd` label and tp x pp say the same.
        let run = RunLayout::of(&[], &points(name)).unwrap();
        assert_eq!((run.name(), run.gpus), (layout.to_string(), gpus));
    }
    // A server alone against a group: `colocated`, on its one GPU.
    let t = pd_table(&fixtures(), "pipeline.jsonl", "pd_1p1d.jsonl");
    assert_eq!(
        (&t["rows"][0]["layout"], &t["rows"][0]["gpus"]),
        (&Value::from("colocated"), &Value::from(1)),
        "{t}"
    );
    assert_eq!(t["rows"][1]["layout"], "1p1d");
    // Two runs of one layout are told apart by their side.
    let t = pd_table(&fixtures(), "pd_2p1d.jsonl", "pd_2p1d.jsonl");
    assert_eq!(t["rows"][0]["layout"], "2p1d base");
    assert_eq!(t["rows"][1]["layout"], "2p1d new");
}

/// The README's P:D example is what summarize prints for its fixtures, line for line.
#[test]
fn the_readmes_p_d_comparison_is_printed_as_shown() {
    const COMMAND: &str = "$ summarize --compare pd_1p1d.jsonl pd_2p1d.jsonl";
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let block = readme
        .split_once(&format!("{COMMAND}\n"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .unwrap_or_else(|| panic!("README shows `{COMMAND}` in a block"))
        .0;
    let shown = &block[block
        .find("# P:D layouts")
        .expect("the P:D table in the block")..];
    let out = summarize(&["--compare", "pd_1p1d.jsonl", "pd_2p1d.jsonl"])
        .ok()
        .out();
    let printed = &out[out.find("# P:D layouts").expect("a P:D table")..];
    assert_eq!(shown, printed);
    assert!(
        printed.contains("2p1d: TTFT p50 -56% at C=16 against 1p1d")
            && printed.contains("2p1d: decode queue now 49% of TTFT: add a decode instance"),
        "{printed}"
    );
}
