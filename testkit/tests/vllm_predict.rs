//! srv-sim's published error against the real vLLM CPU build: scripts/predict-error-vllm.sh
//! launches vLLM, measures a short sweep, calibrates srv-sim on two of its points, predicts the
//! sweep and prints the error table. The test checks the script ran end to end and produced the
//! table and the card, or that the calibration ran and named the measurements it refused to fit
//! (on a busy box the measured figures are noise; exit 3); the error margins themselves are what
//! the table reports (README), not something asserted.

use std::process::Command;
use std::time::{Duration, Instant};
use testkit::{Guard, bin_dir, setup_env};

#[test]
fn the_vllm_prediction_error_script_prints_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let root = bin_dir().join("../..");
    let mut c = Command::new("bash");
    c.arg(root.join("scripts/predict-error-vllm.sh"))
        .arg(dir.path())
        .env("BIN", bin_dir())
        .env("SERVBENCH_TINY_HF", setup_env("SERVBENCH_TINY_HF", "vllm"))
        .env(
            "SERVBENCH_VLLM_BIN",
            setup_env("SERVBENCH_VLLM_BIN", "vllm"),
        )
        .stdout(std::fs::File::create(dir.path().join("table.md")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap());
    let mut g = Guard::spawn(c);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = g.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15 * 60),
            "the script is still running after 15 minutes"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    // The sweep was measured either way: the two calibration points and the 20 of the sweep.
    let measured = std::fs::read_to_string(dir.path().join("measured.jsonl")).unwrap_or_default();
    let summaries = measured
        .lines()
        .filter(|l| l.contains(r#""kind":"summary""#));
    assert_eq!(summaries.count(), 22, "{stderr}");
    if status.code() == Some(3) {
        // A busy box measures noise the cost model cannot fit: the calibration says which figure
        // at which point it does not trust, and nothing is predicted from it. Accuracy is the
        // script's figure (README), not this test's.
        assert!(
            stderr.contains("the fit leaves") && stderr.contains("no card written"),
            "{stderr}"
        );
        assert!(
            stderr.contains("predict-error-vllm: the calibration was refused"),
            "{stderr}"
        );
        return;
    }
    assert!(status.success(), "{stderr}");
    let table = std::fs::read_to_string(dir.path().join("table.md")).unwrap();
    assert!(table.starts_with("| in | out | C |"), "{table}");
    // Every measured point has its row: 2 input x 2 output lengths x 5 concurrencies.
    let rows = table
        .lines()
        .filter(|l| l.starts_with("| 64 |") || l.starts_with("| 256 |"));
    assert_eq!(rows.count(), 20, "{table}");
    assert!(table.contains("MAPE over 20 points: tok/s "), "{table}");
    assert!(table.contains("median APE: tok/s "), "{table}");
    assert!(table.contains("worst: "), "{table}");
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("card.json")).unwrap()).unwrap();
    assert!(card["step_overhead_us"].as_f64().is_some(), "{card}");
}
