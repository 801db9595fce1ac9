//! Energy per token beside tokens/s per GPU: loadgen samples the server's GPUs (a stand-in
//! nvidia-smi first on PATH: GPU 0 draws 512.5 W throughout, GPU 1 reports no power), and
//! summarize's `j_per_tok` is each GPU's mean power x the point's duration, summed, over its
//! output tokens; `tok_s_per_gpu` the output rate over the GPUs sampled.

use testkit::{FakeNvidiaSmi, srv_sim};

fn column(csv: &str, name: &str) -> f64 {
    let mut lines = csv
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = header
        .iter()
        .position(|h| h.trim() == name)
        .unwrap_or_else(|| panic!("no {name} in {csv}"));
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    row[at]
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e} in {csv}"))
}

#[test]
fn joules_per_token_are_the_sampled_power_over_the_point_per_output_token() {
    let smi = FakeNvidiaSmi::new();
    let (_sim, url) = srv_sim(&[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.jsonl");
    let args = [
        "--url",
        &url,
        "--duration",
        "600ms",
        "--max-tokens",
        "16",
        "--scrape-interval",
        "100ms",
        "--gpu-host",
        "localhost",
        "--gpus",
        "0",
        "-c",
        "2",
    ];
    let out = testkit::cmd("loadgen")
        .args(args)
        .env("PATH", smi.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&file, &out.stdout).unwrap();
    let s = testkit::json_lines(&out.stdout)
        .into_iter()
        .find(|r| r["kind"] == "summary")
        .unwrap();
    let (duration, tokens, tok_s) = (
        s["duration_s"].as_f64().unwrap(),
        s["output_tokens"].as_f64().unwrap(),
        s["output_tok_s"].as_f64().unwrap(),
    );
    assert_eq!(s["gpus"][0]["power_w"]["mean"], 512.5, "{s}");
    let sum = testkit::cmd("summarize")
        .arg(&file)
        .args(["--format", "csv", "--cols", "tok_s,tok_s_per_gpu,j_per_tok"])
        .output()
        .unwrap();
    assert!(
        sum.status.success(),
        "{}",
        String::from_utf8_lossy(&sum.stderr)
    );
    let csv = String::from_utf8(sum.stdout).unwrap();
    let j = column(&csv, "j_per_tok");
    let expected = 512.5 * duration / tokens;
    assert!(
        (j - expected).abs() <= 1e-6 * expected.max(1.0),
        "{j} against {expected}: {csv}"
    );
    let per_gpu = column(&csv, "tok_s_per_gpu");
    assert!(
        (per_gpu - tok_s).abs() <= 1e-6 * tok_s,
        "one GPU: {per_gpu} against {tok_s}"
    );
}
