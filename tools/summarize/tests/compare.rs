//! summarize --compare on recorded inputs (tests/fixtures): a real change is told from noise,
//! points are matched by label, and on real runs the faster server is found and a rerun is
//! called noise.

#[path = "support/synth.rs"]
mod synth;

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::*;
use summarize::compare;
use synth::TS;
use testkit::ok;

#[test]
fn compare_flags_a_20_percent_change_and_ignores_noise() {
    let base = points("compare_base.jsonl");
    let faster = points("compare_faster.jsonl");
    let rerun = points("compare_rerun.jsonl");
    for m in compare::DEFAULT_METRICS {
        for (b, n) in base.iter().zip(&faster) {
            let c = compare::change(m, b, n).unwrap();
            assert_eq!(c.verdict, compare::Verdict::Better, "{} {c:?}", m.name());
        }
        for (b, n) in base.iter().zip(&rerun) {
            let c = compare::change(m, b, n).unwrap();
            assert_eq!(c.verdict, compare::Verdict::Noise, "{} {c:?}", m.name());
        }
    }
    let text = ok(&summarize(&[
        "--compare",
        "compare_base.jsonl",
        "compare_faster.jsonl",
        "--format",
        "csv",
    ]));
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert!(rows.iter().all(|r| r.contains("1.20x better")), "{text}");
    let text = ok(&summarize(&[
        "--compare",
        "compare_base.jsonl",
        "compare_rerun.jsonl",
    ]));
    assert!(
        !text.contains("better") || text.contains("0 point(s) better"),
        "{text}"
    );
    assert!(text.contains("4 within noise"), "{text}");
}

#[test]
fn compare_by_label_matches_points_across_its_values() {
    let text = ok(&summarize(&[
        "engines.jsonl",
        "--compare-by",
        "engine=vllm",
    ]));
    assert!(text.contains("base=engine=vllm"), "{text}");
    assert!(text.contains("engine=sglang"), "{text}");
    assert!(text.contains("better"), "{text}");
    let bad = summarize(&["clean.jsonl", "--compare-by", "engine"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("summarize: error: --compare-by engine"));
}

/// Real runs: `loadgen -c 1,4 -n 100 --max-tokens 16 --input-len 32 --no-requests` against
/// `srv-sim --ttft 10ms --itl 2ms` (base, rerun; `--repeat 3` for repeats) and against
/// `srv-sim --ttft 8.333ms --itl 1.667ms` (faster), on a busy 2-core machine.
#[test]
fn compare_on_real_runs_finds_the_faster_server_and_calls_a_rerun_noise() {
    let base = points("loadgen_base.jsonl");
    let faster = points("loadgen_faster.jsonl");
    let rerun = points("loadgen_rerun.jsonl");
    for (b, n) in base.iter().zip(&faster) {
        for m in [
            summarize::input::metrics::Metric::TTFT_P50,
            summarize::input::metrics::Metric::TPOT_P50,
        ] {
            let c = compare::change(m, b, n).unwrap();
            assert_eq!(c.verdict, compare::Verdict::Better, "{} {c:?}", m.name());
            assert!((0.80..0.87).contains(&c.ratio), "{} {c:?}", m.name());
        }
    }
    for (b, n) in base.iter().zip(&rerun) {
        for m in compare::DEFAULT_METRICS {
            let c = compare::change(m, b, n).unwrap();
            assert!(
                matches!(
                    c.verdict,
                    compare::Verdict::Noise | compare::Verdict::Unknown
                ),
                "a rerun is not a change: {} {c:?}",
                m.name()
            );
        }
    }
    // 100 requests cannot bound a p99 (a p50 they can): no noise estimate, so no claim.
    let run = &base[0].repeats[0];
    assert_eq!(run.ok, 100);
    assert_eq!(
        summarize::input::metrics::Metric::TTFT_P99.single_run_noise(run),
        None
    );
    assert!(
        summarize::input::metrics::Metric::TTFT_P50
            .single_run_noise(run)
            .is_some()
    );
    let repeats = points("loadgen_repeats.jsonl");
    assert!(repeats.iter().all(|p| p.repeats.len() == 3));
    let text = ok(&summarize(&["loadgen_repeats.jsonl"]));
    assert!(text.contains(" ± "), "{text}");
}

#[test]
fn compare_shows_what_changed_in_the_servers_environment_above_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let server = |driver: &str, flags: &[&str]| {
        let mut argv = vec!["vllm", "serve", "m", "--port", "8000"];
        argv.extend_from_slice(flags);
        serde_json::json!({
            "kind": "server", "v": 1, "ts": TS, "labels": {}, "engine": "vllm", "model": "m",
            "host": "gpu1", "pid": 7, "pgid": 7, "start_ticks": 1, "port": 8000,
            "url": "http://127.0.0.1:8000", "command": argv.join(" "), "log": "/tmp/l",
            "ready_s": 30.0, "argv": argv,
            "env": {"engine_version": "0.11.0", "gpu_model": "NVIDIA H100 80GB HBM3",
                    "gpu_count": 8, "driver_version": driver, "cuda_version": "12.4",
                    "kernel": "6.1.0", "cpu_model": "AMD EPYC 9654", "hostname": "gpu1"}
        })
        .to_string()
    };
    let write = |name: &str, server: String, fixture: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{server}\n{}", read(fixture))).unwrap();
        path.to_string_lossy().into_owned()
    };
    let base = write(
        "base.jsonl",
        server("550.54.15", &["--max-num-seqs", "256"]),
        "compare_base.jsonl",
    );
    let new = write(
        "new.jsonl",
        server("560.35.03", &["--max-num-seqs", "512", "--enforce-eager"]),
        "compare_faster.jsonl",
    );
    let text = ok(&summarize(&["--compare", &base, &new]));
    let env_at = text.find("# environment differences").expect(&text);
    let cmp_at = text.find("# comparison").expect(&text);
    assert!(env_at < cmp_at, "{text}");
    let env = &text[env_at..cmp_at];
    assert!(
        env.contains("driver") && env.contains("550.54.15") && env.contains("560.35.03"),
        "{env}"
    );
    assert!(env.contains("--max-num-seqs 256"), "{env}");
    assert!(env.contains("--enforce-eager --max-num-seqs 512"), "{env}");
    assert!(
        !env.contains("CUDA") && !env.contains("--port"),
        "unchanged: {env}"
    );
    // Without server records there is no such table.
    let text = ok(&summarize(&[
        "--compare",
        fixture("compare_base.jsonl").to_str().unwrap(),
        fixture("compare_faster.jsonl").to_str().unwrap(),
    ]));
    assert!(!text.contains("environment"), "{text}");
}
