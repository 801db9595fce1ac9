//! `--compare predicted.jsonl measured.jsonl` as model against reality: srv-sim's prediction on
//! one side, a "measurement" on the other (srv-sim's prediction of an engine with a 20 ms step
//! overhead, labelled as measured): the title says so, each figure's MAPE and worst point are
//! named, and the point where the engine lost most of the predicted throughput gets its note.

use std::process::Command;

fn predict(dir: &std::path::Path, name: &str, extra: &[&str], measured: bool) -> String {
    let out = Command::new(testkit::bin("srv-sim"))
        .args([
            "--predict",
            "-c",
            "1,8",
            "--input-len",
            "64",
            "--max-tokens",
            "16",
            "-n",
            "16",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut text = String::from_utf8(out.stdout).unwrap();
    if measured {
        text = text.replace(r#""source":"predicted""#, r#""source":"measured""#);
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_prediction_against_a_measurement_reads_as_model_vs_reality_with_the_worst_point_named() {
    let dir = tempfile::tempdir().unwrap();
    let model = predict(dir.path(), "predicted.jsonl", &[], false);
    let real = predict(
        dir.path(),
        "measured.jsonl",
        &["--step-overhead", "20ms"],
        true,
    );
    let out = Command::new(testkit::bin("summarize"))
        .args(["--compare", &model, &real])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("# model vs reality"), "{text}");
    assert!(
        text.contains("model vs reality, out tok/s: the model is off the measurement by"),
        "{text}"
    );
    assert!(
        text.contains("(MAPE over 2 point(s)); worst at C="),
        "{text}"
    );
    assert!(text.contains("the engine lost "), "{text}");
    assert!(text.contains("against the calibrated prediction"), "{text}");
    // Two measurements compared are not a model against reality.
    let other = predict(dir.path(), "other.jsonl", &["--step-overhead", "1ms"], true);
    let plain = Command::new(testkit::bin("summarize"))
        .args(["--compare", &other, &real])
        .output()
        .unwrap();
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(plain.starts_with("# comparison"), "{plain}");
    assert!(!plain.contains("model vs reality"), "{plain}");
}

/// Two predictions compared were headed "model vs reality" and scored by MAPE against the
/// "measurement" (the other prediction): the header says two predictions are compared, and no
/// line calls either one reality. A measurement as base and a prediction as new is reality
/// against the model, and says so.
#[test]
fn the_compare_header_says_what_it_compares() {
    let dir = tempfile::tempdir().unwrap();
    let a = predict(dir.path(), "a.jsonl", &[], false);
    let b = predict(dir.path(), "b.jsonl", &["--step-overhead", "5ms"], false);
    let compare = |base: &str, new: &str| -> String {
        let out = Command::new(testkit::bin("summarize"))
            .args(["--compare", base, new])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let two = compare(&a, &b);
    assert!(two.starts_with("# two predictions"), "{two}");
    assert!(!two.contains("reality"), "{two}");
    assert!(!two.contains("measurement"), "{two}");
    let real = predict(
        dir.path(),
        "measured.jsonl",
        &["--step-overhead", "20ms"],
        true,
    );
    let reversed = compare(&real, &a);
    assert!(reversed.starts_with("# reality vs model"), "{reversed}");
    assert!(
        reversed.contains("the model is off the measurement by"),
        "{reversed}"
    );
}
