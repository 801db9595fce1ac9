//! srv-sim's published error against the real vLLM CPU build: scripts/predict-error-vllm.sh
//! launches vLLM, measures a step grid and the sweep, calibrates srv-sim on the grid, predicts
//! the sweep and prints the table of every point. The test checks the script ran end to end and
//! produced the table and the card, or that the calibration ran and named the cells it refused
//! to fit (on a busy box the measured figures are noise; exit 3); the error margins themselves
//! are what the table reports (srv-sim's README), never asserted here.

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
            start.elapsed() < Duration::from_secs(30 * 60),
            "the script is still running after 30 minutes"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    // The grid and the sweep were measured either way: 3 prompt lengths x (3 batches and the
    // prefill series) and 6 concurrencies x 3 prompt lengths.
    let measured = std::fs::read_to_string(dir.path().join("measured.jsonl")).unwrap_or_default();
    let count = |kind: &str| {
        measured
            .lines()
            .filter(|l| l.contains(&format!(r#""kind":"{kind}""#)))
            .count()
    };
    assert_eq!(count("summary"), 12 + 18, "{stderr}");
    assert_eq!(count("step_cell"), 12, "{stderr}");
    if status.code() == Some(3) {
        // A busy box measures noise the cost model cannot fit: the calibration says which figure
        // at which point it does not trust, and nothing is predicted from it. Accuracy is the
        // script's figure (README), not this test's.
        assert!(
            stderr.contains("off the fitted step cost") && stderr.contains("no card"),
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
    // Every point has its row: 3 input lengths x 6 concurrencies, output 128.
    let rows = table.lines().filter(|l| {
        ["| 64 | 128 |", "| 512 | 128 |", "| 2048 | 128 |"]
            .iter()
            .any(|p| l.starts_with(p))
    });
    assert_eq!(rows.count(), 18, "{table}");
    assert!(table.contains(" of 18 points"), "{table}");
    assert!(table.contains("per figure: tok/s "), "{table}");
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("card.json")).unwrap()).unwrap();
    assert!(card["step_overhead_us"].as_f64().is_some(), "{card}");
}
