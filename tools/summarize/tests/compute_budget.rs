//! The decode budget from real measurements: collbench's allreduces and GEMMs of one step
//! (`decode --compute`, tcp and CPU backends), a measured TPOT from loadgen against srv-sim,
//! and summarize splitting the step into parts that add up to that TPOT.

use std::process::{Command, Stdio};

/// A small card: every GEMM of its step takes microseconds on a CPU.
const TINY: &str = r#"{"name":"tiny","layers":2,"hidden":256,"heads":4,"kv_heads":2,"head_dim":64,"params":2.5e6,"weight_format":"bf16","intermediate":512}"#;

fn run(cmd: &mut Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().expect("start");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The numbers in `ms` fields of the budget line, in order: allreduce, GEMMs, launch, rest, TPOT
/// (the verdict after the TPOT names the step again).
fn parts(line: &str) -> Vec<f64> {
    let budget = &line[..line.find(" TPOT").unwrap_or(line.len())];
    budget
        .split(" ms")
        .filter_map(|chunk| chunk.rsplit(' ').next()?.parse::<f64>().ok())
        .collect()
}

#[test]
fn the_decode_budget_shows_every_part_and_sums_to_the_measured_tpot() {
    let dir = tempfile::tempdir().unwrap();
    let card = dir.path().join("tiny.json");
    std::fs::write(&card, TINY).unwrap();
    let card = card.to_str().unwrap();
    let decode = run(testkit::cmd("collbench").args([
        "decode",
        "--model",
        card,
        "--hardware",
        "h100",
        "--tp",
        "2",
        "--batch",
        "1",
        "--compute",
        "-n",
        "3",
        "-w",
        "1",
    ]));
    let kinds: Vec<String> = testkit::json_lines(decode.as_bytes())
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect();
    for kind in ["decode", "gemm", "gemm_step"] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind}: {kinds:?}");
    }
    // A step of 400 ms per token: far above what the tiny step's parts take, even on a busy
    // 2-core box where a tcp allreduce between two ranks has taken 40-63 ms.
    let (_sim, url) = testkit::srv_sim(&["--ttft", "1ms", "--itl", "400ms"]);
    let load = run(testkit::cmd("loadgen").args([
        "--url",
        &url,
        "-c",
        "1",
        "-n",
        "2",
        "--max-tokens",
        "6",
        "--prompts",
        "builtin",
    ]));
    let files = dir.path().join("all.jsonl");
    std::fs::write(&files, format!("{decode}{load}")).unwrap();
    let text = run(testkit::cmd("summarize").args([
        files.to_str().unwrap(),
        "--roofline",
        &format!("{card}@h100"),
        "--tp",
        "2",
    ]));
    let line = text
        .lines()
        .find(|l| l.contains("per step at batch 1"))
        .unwrap_or_else(|| panic!("no budget line: {text}"));
    for part in [
        "allreduce",
        "(measured",
        "GEMMs",
        "measured on the CPU",
        "launch overhead",
        "the rest",
        "TPOT",
    ] {
        assert!(line.contains(part), "{part}: {line}");
    }
    let p = parts(line);
    assert_eq!(p.len(), 5, "{line}");
    let (sum, tpot) = (p[0] + p[1] + p[2] + p[3], p[4]);
    assert!(tpot > 300.0, "{line}");
    // Each part is printed to three significant digits.
    assert!((sum - tpot).abs() <= 0.01 * tpot, "{sum} vs {tpot}: {line}");
}
