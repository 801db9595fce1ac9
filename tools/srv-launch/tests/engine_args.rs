//! Every command the sglang and vllm presets build, parsed by the engine's own argument parser
//! (SGLang's ServerArgs from PyPI's sglang, vLLM's `vllm serve` from its CPU build: both set up
//! by scripts/setup/sglang.sh, no GPU, nothing started): each is accepted and read as meant
//! (the TP and PP degrees the flags say), with the engine flags people pass after `--` for data,
//! expert and pipeline parallelism and speculative decoding; a flag the engine does not know is
//! refused, so the check is real.

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

/// `srv-launch ENGINE --model M ARGS --dry-run`: the argv it would run.
fn dry_run(engine: &str, args: &[&str]) -> Vec<String> {
    let out = testkit::call("srv-launch")
        .args([
            engine,
            "--model",
            "org/model",
            "--port",
            "30000",
            "--dry-run",
        ])
        .args(args)
        .run();
    assert!(
        out.status.success(),
        "srv-launch {engine} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON array")
}

/// Parses each command line with `engine`'s own parser (scripts/setup/engine_args.py).
fn parse(engine: &str, lines: &[Vec<String>]) -> Vec<Value> {
    let tool = testkit::setup_env("SERVBENCH_ENGINE_ARGS", "sglang");
    let mut child = Command::new(tool)
        .arg(engine)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the engine's parser");
    let input = serde_json::to_vec(lines).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = testkit::wait_output(&mut child, std::time::Duration::from_secs(600));
    assert!(
        out.status.success(),
        "{engine} parser: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON results");
    assert_eq!(results.len(), lines.len());
    results
}

/// Each variant: srv-launch's arguments, and the values the engine must read from them.
type Variant = (&'static [&'static str], Vec<(&'static str, Value)>);

fn check(engine: &str, skip: usize, variants: &[Variant], refused: &[&str]) {
    let mut lines: Vec<Vec<String>> = variants
        .iter()
        .map(|(args, _)| dry_run(engine, args)[skip..].to_vec())
        .collect();
    lines.push(dry_run(engine, refused)[skip..].to_vec());
    let results = parse(engine, &lines);
    for ((args, want), (line, got)) in variants.iter().zip(lines.iter().zip(&results)) {
        assert_eq!(
            got["ok"], true,
            "{engine} refused {line:?} (srv-launch {args:?}): {got}"
        );
        for (key, value) in want {
            assert_eq!(
                &got["parsed"][key], value,
                "{engine} {line:?}: {key} in {got}"
            );
        }
    }
    let last = results.last().unwrap();
    assert_eq!(last["ok"], false, "{engine} accepted {:?}", lines.last());
    assert!(
        last["error"]
            .as_str()
            .unwrap()
            .contains("unrecognized arguments"),
        "{last}"
    );
}

#[test]
fn every_sglang_preset_command_is_accepted_by_sglangs_own_parser() {
    use serde_json::json;
    let variants: &[Variant] = &[
        (
            &[],
            vec![
                ("model_path", json!("org/model")),
                ("host", json!("127.0.0.1")),
                ("port", json!(30000)),
                ("tp_size", json!(1)),
            ],
        ),
        (
            &[
                "--bind",
                "0.0.0.0",
                "--tp",
                "8",
                "--",
                "--mem-fraction-static",
                "0.85",
            ],
            vec![("host", json!("0.0.0.0")), ("tp_size", json!(8))],
        ),
        (
            &[
                "--tp",
                "4",
                "--pp",
                "2",
                "--",
                "--pp-max-micro-batch-size",
                "4",
            ],
            vec![
                ("tp_size", json!(4)),
                ("pp_size", json!(2)),
                ("pp_max_micro_batch_size", json!(4)),
            ],
        ),
        (
            &["--tp", "8", "--", "--dp-size", "2", "--enable-dp-attention"],
            vec![("tp_size", json!(8)), ("dp_size", json!(2))],
        ),
        (
            &["--tp", "8", "--", "--ep-size", "8"],
            vec![("ep_size", json!(8))],
        ),
        (
            &[
                "--",
                "--speculative-algorithm",
                "EAGLE",
                "--speculative-draft-model-path",
                "org/draft",
                "--speculative-num-steps",
                "3",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "4",
            ],
            vec![
                ("speculative_algorithm", json!("EAGLE")),
                ("speculative_num_steps", json!(3)),
            ],
        ),
        (
            &["--self-report"],
            vec![
                ("enable_metrics", json!(true)),
                ("enable_mfu_metrics", json!(true)),
                ("enable_request_time_stats_logging", json!(true)),
            ],
        ),
    ];
    // `python3 -m sglang.launch_server` comes first.
    check("sglang", 3, variants, &["--", "--no-such-sglang-flag", "1"]);
}

#[test]
fn every_vllm_preset_command_is_accepted_by_vllms_own_parser() {
    use serde_json::json;
    let variants: &[Variant] = &[
        (
            &[],
            vec![
                ("model_tag", json!("org/model")),
                ("host", json!("127.0.0.1")),
                ("port", json!(30000)),
                ("tensor_parallel_size", json!(1)),
                // Measured free (scripts/bench-self-report-cost.sh): on in every launch.
                ("enable_per_request_metrics", json!(true)),
                ("enable_logging_iteration_details", json!(false)),
                ("enable_mfu_metrics", json!(false)),
            ],
        ),
        (
            &["--", "--no-enable-per-request-metrics"],
            vec![("enable_per_request_metrics", json!(false))],
        ),
        (
            &["--tp", "4", "--", "--max-num-seqs", "256"],
            vec![("tensor_parallel_size", json!(4))],
        ),
        (
            &["--tp", "2", "--pp", "2", "--", "--max-model-len", "1024"],
            vec![
                ("tensor_parallel_size", json!(2)),
                ("pipeline_parallel_size", json!(2)),
            ],
        ),
        (
            &["--", "--data-parallel-size", "2"],
            vec![("data_parallel_size", json!(2))],
        ),
        (
            &["--tp", "2", "--", "--enable-expert-parallel"],
            vec![("enable_expert_parallel", json!(true))],
        ),
        (
            &[
                "--",
                "--speculative-config",
                r#"{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}"#,
            ],
            vec![],
        ),
        (
            &["--self-report", "--", "--max-model-len", "1024"],
            vec![
                ("enable_per_request_metrics", json!(true)),
                ("enable_logging_iteration_details", json!(true)),
                ("enable_mfu_metrics", json!(true)),
            ],
        ),
    ];
    // `vllm` comes first, then `serve MODEL ...`.
    check("vllm", 1, variants, &["--", "--no-such-vllm-flag", "1"]);
}

/// `--pd 2p1d`: every prefill and decode server's command, as the group would run it, is
/// accepted by the engine's own parser and read as meant (vLLM: the connector and its
/// directory; SGLang: the disaggregation mode and each prefill server's bootstrap port).
#[test]
fn every_pd_member_command_is_accepted_by_the_engines_own_parser() {
    for (engine, skip) in [("vllm", 1), ("sglang", 3)] {
        let out = testkit::call("srv-launch")
            .args([engine, "--model", "org/model", "--pd", "2p1d", "--dry-run"])
            .run_ok();
        let lines: Vec<Vec<String>> = out
            .out()
            .lines()
            .map(|l| serde_json::from_str::<Vec<String>>(l).unwrap()[skip..].to_vec())
            .collect();
        assert_eq!(lines.len(), 4, "three servers and the proxy: {}", out.out());
        let members = &lines[..3];
        let results = parse(engine, members);
        for (line, got) in members.iter().zip(&results) {
            assert_eq!(got["ok"], true, "{engine} refused {line:?}: {got}");
        }
        let parsed: Vec<&Value> = results.iter().map(|r| &r["parsed"]).collect();
        if engine == "sglang" {
            let modes: Vec<&Value> = parsed.iter().map(|p| &p["disaggregation_mode"]).collect();
            assert_eq!(modes, ["prefill", "prefill", "decode"], "{parsed:?}");
            let ports: Vec<&Value> = parsed[..2]
                .iter()
                .map(|p| &p["disaggregation_bootstrap_port"])
                .collect();
            assert_ne!(ports[0], ports[1], "a bootstrap port each: {ports:?}");
            // The router (run as `sh -c 'exec ...'`) is told each prefill server's URL and
            // its bootstrap port.
            let router = out.out().lines().nth(3).unwrap().to_string();
            for (m, port) in members[..2].iter().zip(&ports) {
                let at = m.iter().position(|a| a == "--port").unwrap();
                assert!(
                    router.contains(&format!("--prefill http://127.0.0.1:{} {port}", m[at + 1])),
                    "{router}"
                );
            }
        } else {
            for p in &parsed {
                let kv = p["kv_transfer_config"].to_string();
                assert!(
                    kv.contains("ExampleConnector") && kv.contains("kv_both"),
                    "{p}"
                );
            }
        }
    }
}
