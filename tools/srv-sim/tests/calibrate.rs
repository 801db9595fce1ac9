//! `srv-sim --calibrate`: a fit to measured points that the card reproduces, a fit that cannot
//! explain a figure refused naming it, and a calibration card that is checked when read.
//! The "measured" points are an engine whose truth is known: srv-sim's own prediction with a
//! 2 ms step overhead the card does not know, relabelled as a measurement.

mod common;

use common::{CALIBRATION_LOAD, llama_sim};
use serde_json::Value;
use testkit::num;
use testkit::{json_lines, of_kind};

const LOAD: &[&str] = CALIBRATION_LOAD;

/// Points of an engine with a 2 ms step overhead, as a measured run would hold them.
fn measured(dir: &std::path::Path, edit: impl Fn(&mut Value)) -> String {
    let out = llama_sim(&[&["--predict", "--step-overhead", "2ms"][..], LOAD].concat());
    assert!(out.status.success());
    let mut text = String::new();
    for mut r in json_lines(&out.stdout) {
        r["labels"] = serde_json::json!({"run": "measured"});
        edit(&mut r);
        text.push_str(&format!("{r}\n"));
    }
    let path = dir.join("measured.jsonl");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_calibration_on_two_points_reproduces_them_and_the_card_applies() {
    let dir = tempfile::tempdir().unwrap();
    let run = measured(dir.path(), |_| {});
    let out = llama_sim(&["--calibrate", &run]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let card: Value = serde_json::from_slice(&out.stdout).expect("the card is JSON");
    assert_eq!(card["hardware"], "a100-80g");
    assert_eq!(card["points"].as_array().unwrap().len(), 2);
    for k in [
        "step_overhead_us",
        "bandwidth_fraction",
        "flops_fraction",
        "prefill_efficiency",
    ] {
        assert!(num(&card, &format!("/{k}")) > 0.0, "{k}: {card}");
    }
    let path = dir.path().join("card.json");
    std::fs::write(&path, &out.stdout).unwrap();
    // The card applied: the prediction lands on the measured points.
    let again = llama_sim(
        &[
            &["--predict", "--calibration", path.to_str().unwrap()][..],
            LOAD,
        ]
        .concat(),
    );
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let truth = json_lines(&std::fs::read(&run).unwrap());
    let fitted = json_lines(&again.stdout);
    for (m, p) in of_kind(&truth, "summary")
        .iter()
        .zip(of_kind(&fitted, "summary"))
    {
        for fig in ["/output_tok_s", "/ttft_ms/p50", "/tpot_ms/p50"] {
            let off = num(p, fig) / num(m, fig) - 1.0;
            assert!(off.abs() < 0.05, "{fig} {off:+.3} at {}", m["point"]);
        }
    }
}

#[test]
fn a_fit_that_cannot_explain_a_figure_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // TTFT at C=8 ten times what any overhead or fraction can make of it beside the others.
    let run = measured(dir.path(), |r| {
        if r["kind"] == "summary" && r["point"]["concurrency"] == 8 {
            let v = num(r, "/ttft_ms/p50");
            r["ttft_ms"]["p50"] = serde_json::json!(v * 10.0);
        }
    });
    let out = llama_sim(&["--calibrate", &run]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The fit splits the difference: the figure named is a TTFT, at one point or the other.
    assert!(err.contains("the fit leaves TTFT p50 at C="), "{err}");
    assert!(err.contains("in=256 out=32"), "{err}");
    assert!(err.contains("no card written"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_calibration_card_with_a_figure_out_of_range_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(
        &path,
        r#"{"hardware":"a100-80g","model":"llama-3.1-8b","step_overhead_us":100,"bandwidth_fraction":-1,"flops_fraction":0.5,"prefill_efficiency":1,"fitted_on":"x","points":[]}"#,
    )
    .unwrap();
    let out = llama_sim(&["--dry-run", "--calibration", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bandwidth_fraction is -1"), "{err}");
}
