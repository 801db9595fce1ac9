//! Energy per token beside tokens/s per GPU: loadgen samples the server's GPU 0 through NVML
//! (a stand-in `libnvidia-ml.so.1` first in LD_LIBRARY_PATH: the H200 drawing 669.4 W, its
//! energy counter advancing with that power over real time, or standing still, reading all
//! ones, missing, going backwards), or through driver 580's nvidia-smi where NVML does not
//! start; summarize's `j_per_tok` is each GPU's energy over the point over its output tokens:
//! the counter's difference where it is believed, else the mean power x the point's duration,
//! and a note says which; `tok_s_per_gpu` the output rate over the GPUs sampled.

use serde_json::Value;
use testkit::nvml::{NVIDIA_SMI_580, NvmlMode, NvmlStandIn};
use testkit::srv_sim;

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

/// One loadgen point on GPU 0: its summary, stderr, and summarize's csv and text.
struct Run {
    summary: Value,
    stderr: String,
    csv: String,
    text: String,
}

/// One point with NVML in `mode` and driver 580's nvidia-smi (strict about its fields) the
/// only nvidia-smi on PATH.
fn run(nvml: &NvmlStandIn, mode: NvmlMode) -> Run {
    let (_sim, url) = srv_sim(&[]);
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(NVIDIA_SMI_580, bin.join("nvidia-smi")).unwrap();
    let file = dir.path().join("run.jsonl");
    let args = [
        "--url",
        &url,
        "--duration",
        "1500ms",
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
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = testkit::call("loadgen")
        .args(args)
        .env("PATH", path)
        .envs(nvml.env(mode))
        .run_ok();
    std::fs::write(&file, &out.stdout).unwrap();
    let summary = testkit::json_lines(&out.stdout)
        .into_iter()
        .find(|r| r["kind"] == "summary")
        .unwrap();
    let summarize = |args: &[&str]| {
        testkit::call("summarize")
            .arg(&file)
            .args(args)
            .run_ok()
            .out()
    };
    Run {
        csv: summarize(&["--format", "csv", "--cols", "tok_s,tok_s_per_gpu,j_per_tok"]),
        text: summarize(&["--cols", "tok_s,j_per_tok"]),
        summary,
        stderr: out.err(),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

#[test]
fn joules_per_token_come_from_the_nvml_energy_counter() {
    let nvml = NvmlStandIn::new();
    let r = run(&nvml, NvmlMode::H200);
    let s = &r.summary;
    let gpu = &s["gpus"][0];
    assert_eq!(gpu["energy_source"], "counter", "{s}");
    assert_eq!(gpu["power_w"]["mean"], 669.4, "{s}");
    // The counter advanced with 669.4 W between its read when the point started and its read
    // after it ended: that interval holds the point, and is not much longer.
    let energy = gpu["energy_j"].as_f64().unwrap();
    let duration = s["duration_s"].as_f64().unwrap();
    let held = energy / 669.4;
    assert!(
        held >= 0.9 * duration && held <= duration + 1.0,
        "{energy} J is {held} s of 669.4 W against a point of {duration} s"
    );
    assert!(!r.stderr.contains("GPU energy"), "{}", r.stderr);
    assert!(!r.stderr.contains("NVML"), "{}", r.stderr);
    let calls = nvml.calls();
    let reads = calls
        .iter()
        .filter(|c| *c == "nvmlDeviceGetTotalEnergyConsumption")
        .count();
    assert_eq!(reads, 2, "read when the point started and after it ended");
    let tokens = s["output_tokens"].as_f64().unwrap();
    let j = column(&r.csv, "j_per_tok");
    assert!(
        close(j, energy / tokens),
        "{j} against {energy} J / {tokens}"
    );
    let per_gpu = column(&r.csv, "tok_s_per_gpu");
    let tok_s = s["output_tok_s"].as_f64().unwrap();
    assert!(close(per_gpu, tok_s), "one GPU: {per_gpu} against {tok_s}");
    assert!(
        r.text
            .contains("energy per token (j_per_tok) from the GPUs' energy counters: C=2"),
        "{}",
        r.text
    );
}

/// The sampled power integrated: `watts` x the point's duration over its output tokens.
fn assert_sampled_power(r: &Run, watts: f64) {
    let s = &r.summary;
    assert_eq!(s["gpus"][0]["power_w"]["mean"], watts, "{s}");
    assert_eq!(s["gpus"][0]["energy_source"], "sampled_power", "{s}");
    assert!(s["gpus"][0].get("energy_j").is_none(), "{s}");
    let (duration, tokens) = (
        s["duration_s"].as_f64().unwrap(),
        s["output_tokens"].as_f64().unwrap(),
    );
    let j = column(&r.csv, "j_per_tok");
    let expected = watts * duration / tokens;
    assert!(close(j, expected), "{j} against {expected}: {}", r.csv);
    assert!(
        r.text.contains(
            "energy per token (j_per_tok) from the GPUs' sampled power integrated over the point"
        ),
        "{}",
        r.text
    );
}

/// Where NVML does not start (no driver), the GPUs are read through nvidia-smi, one line says
/// so, and the energy is the sampled power's (nvidia-smi has no energy counter).
#[test]
fn nvml_absent_falls_back_to_nvidia_smi_with_one_line() {
    let nvml = NvmlStandIn::new();
    let r = run(&nvml, NvmlMode::NoDriver);
    assert_sampled_power(&r, 669.4);
    let line = "note: GPU telemetry through nvidia-smi: NVML (libnvidia-ml.so.1) did not start";
    assert_eq!(r.stderr.matches(line).count(), 1, "{}", r.stderr);
    assert_eq!(
        r.stderr.matches("NVML").count(),
        1,
        "one line: {}",
        r.stderr
    );
    assert_eq!(nvml.calls(), vec!["nvmlInit_v2"]);
    // Driver 580's nvidia-smi answered every field asked (it exits 2 for any it does not list).
    assert!(!r.stderr.contains("not a valid field"), "{}", r.stderr);
    let reasons = &r.summary["gpus"][0]["clocks_event_reasons"];
    assert_eq!(
        reasons["sw_power_cap"], r.summary["gpus"][0]["samples"],
        "{reasons}"
    );
}

/// ENERGY-FROZEN (tried-to-break-it-4.md, BROKE 3): a counter that stood still over a point
/// while the GPU drew 300 W gave 0 J (`energy_source: counter`) and halved J/tok silently.
#[test]
fn energy_frozen_a_counter_standing_still_under_power_falls_back_to_sampled_power() {
    let nvml = NvmlStandIn::new();
    let r = run(&nvml, NvmlMode::Frozen);
    assert_sampled_power(&r, 300.0);
    let note = "note: GPU energy: GPU 0: its energy counter stood still at 2477213 mJ for";
    assert_eq!(r.stderr.matches(note).count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("while its power read 300 W"),
        "{}",
        r.stderr
    );
}

/// ENERGY-FROZEN's reproduction read all ones at both edges: no reading, not 0 J.
#[test]
fn energy_frozen_a_counter_reading_all_ones_falls_back_to_sampled_power() {
    let nvml = NvmlStandIn::new();
    let r = run(&nvml, NvmlMode::Huge);
    assert_sampled_power(&r, 669.4);
    assert!(
        r.stderr
            .contains("its energy counter read 1.8446744073709552e19 mJ, past any GPU's lifetime"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_gpu_without_an_energy_counter_falls_back_to_the_sampled_power_with_one_note() {
    let nvml = NvmlStandIn::new();
    let r = run(&nvml, NvmlMode::NoEnergy);
    assert_sampled_power(&r, 669.4);
    let note = "note: GPU energy: GPU 0: its energy counter gave no number";
    assert_eq!(r.stderr.matches(note).count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("energy_source sampled_power"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_energy_counter_that_goes_backwards_falls_back_and_is_noted() {
    let nvml = NvmlStandIn::new();
    let r = run(&nvml, NvmlMode::Backwards);
    assert_sampled_power(&r, 669.4);
    assert!(
        r.stderr
            .contains("note: GPU energy: GPU 0: its energy counter went backwards from"),
        "{}",
        r.stderr
    );
}
