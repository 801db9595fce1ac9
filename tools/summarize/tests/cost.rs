//! `--gpu-hour-cost USD`: each load point's dollars per million output tokens, in the table
//! and on the plot's per-GPU panel, from srv-sim's records of a TP 1, 2, 4 sweep
//! (tests/fixtures/tp_sweep_sim.jsonl, recorded by record-real.sh).

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::summarize;
use serde_json::Value;

/// The rows of the load-points table of a `--format json` run.
fn point_rows(args: &[&str]) -> Vec<Value> {
    let run = summarize(&[args, &["--format", "json"]].concat()).ok();
    let out: Value = serde_json::from_str(&run.out()).unwrap();
    let table = out["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "load points")
        .unwrap_or_else(|| panic!("no load points table: {out}"))
        .clone();
    table["rows"].as_array().unwrap().clone()
}

#[test]
fn each_point_costs_the_gpu_hour_over_its_output_tokens_per_gpu() {
    let rows = point_rows(&[
        "tp_sweep_sim.jsonl",
        "--gpu-hour-cost",
        "2.49",
        "--cols",
        "label:tp,conc,tok_s",
    ]);
    assert_eq!(rows.len(), 12, "{rows:?}");
    for row in &rows {
        // srv-sim's records sample no GPUs: the row's GPUs are its tp (pp 1).
        let tp: f64 = row["tp"].as_str().unwrap().parse().unwrap();
        let tok_s = row["tok_s"].as_f64().unwrap();
        let cost = row["usd_per_mtok"].as_f64().unwrap();
        let want = 2.49 / 3600.0 / (tok_s / tp) * 1e6;
        assert!(
            (cost - want).abs() <= 1e-3 * want,
            "{row}: {cost} against {want}"
        );
    }
    // Twice the price (written with its dollar sign), twice the cost.
    let double = point_rows(&[
        "tp_sweep_sim.jsonl",
        "--gpu-hour-cost",
        "$4.98",
        "--cols",
        "label:tp,conc,tok_s",
    ]);
    for (a, b) in rows.iter().zip(&double) {
        let (a, b) = (a["usd_per_mtok"].as_f64(), b["usd_per_mtok"].as_f64());
        assert!((b.unwrap() / a.unwrap() - 2.0).abs() < 1e-3, "{a:?} {b:?}");
    }
}

#[test]
fn without_the_flag_there_is_no_cost_column() {
    let rows = point_rows(&["tp_sweep_sim.jsonl", "--cols", "label:tp,conc,tok_s"]);
    assert!(rows.iter().all(|r| r.get("usd_per_mtok").is_none()));
    let text = summarize(&["tp_sweep_sim.jsonl"]).ok().out();
    assert!(!text.contains("$/M"), "{text}");
}

#[test]
fn the_text_table_says_the_price_and_how_gpus_were_counted() {
    let text = summarize(&["tp_sweep_sim.jsonl", "--gpu-hour-cost", "2.49"])
        .ok()
        .out();
    let title = text
        .lines()
        .find(|l| l.starts_with("# load points"))
        .unwrap();
    assert!(
        title.contains("cost=$2.49 per GPU-hour over each row's GPUs"),
        "{title}"
    );
    assert!(text.contains("$/M out tok"), "{text}");
}

#[test]
fn a_cost_that_is_not_a_positive_finite_number_is_refused_naming_the_flag() {
    for bad in ["0", "-1", "nan", "inf", "two"] {
        let flag = format!("--gpu-hour-cost={bad}");
        let run = summarize(&["tp_sweep_sim.jsonl", &flag]);
        assert_eq!(run.code(), Some(2), "{bad}: {}", run.err());
        let line = testkit::the_error_line(&run.err()).to_string();
        assert!(
            line.contains("--gpu-hour-cost") && line.contains(&format!("'{bad}'")),
            "{line}"
        );
        assert!(run.out().is_empty(), "{bad}: {}", run.out());
    }
}

#[test]
fn the_per_gpu_panel_labels_each_point_with_its_cost() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("cost.svg");
    let svg_arg = svg.to_str().unwrap();
    summarize(&[
        "tp_sweep_sim.jsonl",
        "--gpu-hour-cost",
        "2.49",
        "--plot",
        svg_arg,
    ])
    .ok();
    let drawn = std::fs::read_to_string(&svg).unwrap();
    let rows = point_rows(&["tp_sweep_sim.jsonl", "--gpu-hour-cost", "2.49"]);
    for row in &rows {
        let (tp, conc) = (row["tp"].as_str().unwrap(), &row["conc"]);
        let cost = row["usd_per_mtok"].as_f64().unwrap();
        let label = format!("tp={tp} C={conc} ${}/M", summarize::render::human(cost));
        assert!(drawn.contains(&label), "no {label:?} in the plot");
    }
}
