//! Energy per token beside tokens/s per GPU: loadgen samples the server's GPUs (a stand-in
//! nvidia-smi first on PATH: GPU 0 draws 512.5 W throughout, and its energy counter advances
//! by a known step at each read, or answers `[N/A]`, or goes backwards), and summarize's
//! `j_per_tok` is each GPU's energy over the point over its output tokens: the counter's
//! difference where it is usable, else the mean power x the point's duration, and a note says
//! which; `tok_s_per_gpu` the output rate over the GPUs sampled.

use serde_json::Value;
use testkit::{FAKE_ENERGY_STEP_MJ, FakeNvidiaSmi, srv_sim};

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

/// One loadgen point on GPU 0 of `smi`: its summary, stderr, and summarize's csv and text.
struct Run {
    summary: Value,
    stderr: String,
    csv: String,
    text: String,
}

fn run(smi: &FakeNvidiaSmi) -> Run {
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
    let out = testkit::call("loadgen")
        .args(args)
        .env("PATH", smi.path())
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
fn joules_per_token_come_from_the_energy_counter_that_advanced_by_a_known_step() {
    let smi = FakeNvidiaSmi::new();
    let r = run(&smi);
    let s = &r.summary;
    let gpu = &s["gpus"][0];
    // Read once when the point started and once after it ended: one step apart.
    let step_j = FAKE_ENERGY_STEP_MJ as f64 / 1000.0;
    assert_eq!(gpu["energy_source"], "counter", "{s}");
    assert_eq!(gpu["energy_j"].as_f64(), Some(step_j), "{s}");
    assert!(!r.stderr.contains("GPU energy"), "{}", r.stderr);
    let tokens = s["output_tokens"].as_f64().unwrap();
    let j = column(&r.csv, "j_per_tok");
    assert!(
        close(j, step_j / tokens),
        "{j} against {step_j} J / {tokens}: {}",
        r.csv
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

/// The sampled power integrated: 512.5 W x the point's duration over its output tokens.
fn assert_sampled_power(r: &Run) {
    let s = &r.summary;
    assert_eq!(s["gpus"][0]["power_w"]["mean"], 512.5, "{s}");
    assert_eq!(s["gpus"][0]["energy_source"], "sampled_power", "{s}");
    assert!(s["gpus"][0].get("energy_j").is_none(), "{s}");
    let (duration, tokens) = (
        s["duration_s"].as_f64().unwrap(),
        s["output_tokens"].as_f64().unwrap(),
    );
    let j = column(&r.csv, "j_per_tok");
    let expected = 512.5 * duration / tokens;
    assert!(close(j, expected), "{j} against {expected}: {}", r.csv);
    assert!(
        r.text.contains(
            "energy per token (j_per_tok) from the GPUs' sampled power integrated over the point"
        ),
        "{}",
        r.text
    );
}

#[test]
fn an_energy_counter_at_n_a_falls_back_to_the_sampled_power_with_one_note() {
    let smi = FakeNvidiaSmi::new();
    smi.set_energy_step("[N/A]");
    let r = run(&smi);
    assert_sampled_power(&r);
    let note = "note: GPU energy: GPU 0: its energy counter gave no number ([N/A]";
    assert_eq!(r.stderr.matches(note).count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("energy_source sampled_power"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_energy_counter_that_goes_backwards_falls_back_and_is_noted() {
    let smi = FakeNvidiaSmi::new();
    smi.set_energy_step("-1000");
    let r = run(&smi);
    assert_sampled_power(&r);
    assert!(
        r.stderr
            .contains("note: GPU energy: GPU 0: its energy counter went backwards from"),
        "{}",
        r.stderr
    );
}

/// An nvidia-smi from before the energy counter field rejects the query as nvidia-smi does an
/// unknown field (a line saying so, exit 2): one note saying the counters cannot be read, no
/// more counter reads, and the point's energy is the sampled power's.
#[test]
fn an_nvidia_smi_that_rejects_the_counter_field_falls_back_with_one_note() {
    let older = testkit::FAKE_NVIDIA_SMI.replacen(
        "case \"$*\" in\n",
        "case \"$*\" in\n  *total_energy_consumption*)\n    \
         echo 'Field \"total_energy_consumption\" is not a valid field to query.'\n    \
         exit 2 ;;\n",
        1,
    );
    assert_ne!(older, testkit::FAKE_NVIDIA_SMI, "the rejection was put in");
    let smi = FakeNvidiaSmi(testkit::StandIn::new("nvidia-smi", &older));
    let r = run(&smi);
    assert_sampled_power(&r);
    let note = "note: GPU energy: the energy counters (total_energy_consumption) cannot be read";
    assert_eq!(r.stderr.matches(note).count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("is not a valid field"), "{}", r.stderr);
}
