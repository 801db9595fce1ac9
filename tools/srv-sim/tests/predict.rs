//! `srv-sim --predict`: the modelled engine in virtual time under loadgen's load. Its records
//! are loadgen's (summarize tabulates them), a single stream steps at the dry run's rate, a
//! conversation's prompts and cached tokens are what the real server reports, open-loop sends
//! follow the arrival process, and the prediction agrees with the real server driven by the real
//! loadgen at C=1 and C=8.

mod common;
use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use testkit::num;
use testkit::{check, holds_in_one_of_three, json_lines, of_kind};

fn records(args: &[&str]) -> Vec<Value> {
    let out = predict(args);
    assert!(
        out.status.success(),
        "srv-sim --predict {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_lines(&out.stdout)
}

/// Two points, C=1 and 8, of 16 requests of 64 tokens in and 16 out.
const SWEEP: &[&str] = &[
    "-c",
    "1,8",
    "--input-len",
    "64",
    "--max-tokens",
    "16",
    "-n",
    "16",
];

#[test]
fn predicted_records_are_loadgens_and_summarize_tabulates_them() {
    let recs = records(SWEEP);
    let requests = of_kind(&recs, "request");
    let summaries = of_kind(&recs, "summary");
    assert_eq!((requests.len(), summaries.len()), (32, 2));
    for r in &requests {
        assert_eq!(r["labels"]["source"], "predicted", "{r}");
        assert!(r.get("error").is_none(), "{r}");
        assert_eq!(
            (r["output_tokens"].as_u64(), r["prompt_tokens"].as_u64()),
            (Some(16), Some(64))
        );
        assert_eq!(
            r["itl_ms"].as_array().unwrap().len(),
            15,
            "one gap per token after the first"
        );
        let (ttft, e2e, tpot) = (num(r, "/ttft_ms"), num(r, "/e2e_ms"), num(r, "/tpot_ms"));
        assert!((tpot - (e2e - ttft) / 15.0).abs() < 1e-9, "{r}");
    }
    for (s, c) in summaries.iter().zip([1, 8]) {
        assert_eq!(s["point"]["concurrency"], c);
        assert_eq!(
            (s["requests"].as_u64(), s["ok"].as_u64()),
            (Some(16), Some(16))
        );
        let tok_s = num(s, "/output_tokens") / num(s, "/duration_s");
        assert!((num(s, "/output_tok_s") / tok_s - 1.0).abs() < 1e-9, "{s}");
    }
    // More in flight: more tokens per second, each request slower to its first token.
    assert!(num(summaries[1], "/output_tok_s") > 4.0 * num(summaries[0], "/output_tok_s"));
    assert!(num(summaries[1], "/ttft_ms/p50") > num(summaries[0], "/ttft_ms/p50"));
    let out = predict(SWEEP);
    let mut sum = Command::new(testkit::bin("summarize"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    sum.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    let table = sum.wait_with_output().unwrap();
    assert!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    let text = String::from_utf8_lossy(&table.stdout);
    let rows = text
        .lines()
        .filter(|l| l.trim_start().starts_with(['1', '8']))
        .count();
    assert!(rows >= 2, "a row per point: {text}");
}

#[test]
fn a_predicted_single_stream_steps_at_the_dry_run_rate() {
    let plan = dry_run(&[LLAMA_8B_ON_A100, &["--dry-run-context", "72"]].concat());
    let step_ms = plan["decode_step_ms"].as_f64().unwrap();
    let recs = records(&[
        "-c",
        "1",
        "--input-len",
        "64",
        "--max-tokens",
        "16",
        "-n",
        "4",
    ]);
    for r in of_kind(&recs, "request") {
        // Contexts 64..80 read next to nothing beside the weights: the step is the dry run's.
        let tpot = num(r, "/tpot_ms");
        assert!(
            (tpot / step_ms - 1.0).abs() < 0.001,
            "TPOT {tpot} ms, dry run {step_ms} ms"
        );
        // A request sent as the last one ended reaches an idle engine: its prompt is one step.
        assert!(num(r, "/ttft_ms") < 2.0 * step_ms, "{r}");
    }
}

#[test]
fn a_predicted_conversation_resends_its_history_and_hits_the_prefix_cache() {
    // As the real server answers loadgen's 3-turn conversation (loadgen README): prompts of
    // 64, 136 and 208 tokens with 0, 64 and 128 cached.
    let recs = records(&[
        "-c",
        "2",
        "-n",
        "2",
        "--turns",
        "3",
        "--think-time",
        "50ms",
        "--input-len",
        "64",
        "--max-tokens",
        "8",
    ]);
    let mut requests = of_kind(&recs, "request");
    assert_eq!(requests.len(), 6);
    requests.sort_by_key(|r| (r["session"].as_u64(), r["turn"].as_u64()));
    for (r, (turn, prompt, cached)) in requests
        .iter()
        .zip([(1, 64, 0), (2, 136, 64), (3, 208, 128)].repeat(2))
    {
        assert_eq!(r["turn"], turn, "{r}");
        assert_eq!(r["prompt_tokens"], prompt, "{r}");
        assert_eq!(r["cached_tokens"], cached, "{r}");
    }
    // Each turn is sent its think time after the previous reply ended.
    let (t1, t2) = (requests[0], requests[1]);
    let gap = num(t2, "/intended_ms") - num(t1, "/intended_ms") - num(t1, "/e2e_ms");
    assert!((gap - 50.0).abs() < 1e-6, "think time {gap} ms");
    let summary = of_kind(&recs, "summary")[0];
    assert_eq!(
        (
            summary["workload"]["turns"].as_str(),
            summary["workload"]["sessions"].as_u64()
        ),
        (Some("3"), Some(2))
    );
}

#[test]
fn predicted_open_loop_sends_follow_the_arrival_process_and_groups_share_their_prefix() {
    // Two requests a second, each over long before the next: every TTFT is its own prefill.
    let recs = records(&[
        "-r",
        "2",
        "--arrival",
        "constant",
        "-n",
        "8",
        "--input-len",
        "4096",
        "--max-tokens",
        "4",
        "--prefix-groups",
        "2",
        "--prefix-len",
        "4032",
    ]);
    let requests = of_kind(&recs, "request");
    assert_eq!(requests.len(), 8);
    for (i, r) in requests.iter().enumerate() {
        assert!(
            (num(r, "/intended_ms") - 500.0 * i as f64).abs() < 1e-6,
            "{r}"
        );
        // Each group's first request prefills 4096 tokens; the others find the group's prefix
        // cached (4032 tokens, whole blocks) and prefill 64.
        if i >= 2 {
            let (cached, cold) = (num(r, "/ttft_ms"), num(requests[i % 2], "/ttft_ms"));
            assert!(cached < cold / 5.0, "{cached} ms against {cold} ms cold");
        }
    }
    assert_eq!(
        of_kind(&recs, "summary")[0]["workload"]["arrival"],
        "constant"
    );
}

#[test]
fn predict_refuses_what_it_does_not_model_and_load_flags_need_it() {
    for (args, needle) in [
        (
            &["--predict", "--ttft", "10ms"][..],
            "fixed latencies need no prediction",
        ),
        (&["--predict", "--gpus", "2"][..], "data-parallel replicas"),
        (&["--predict", "--fail-rate", "0.1"][..], "injected faults"),
        (&["--predict", "-c", "0"][..], "at least 1"),
        (&["-c", "4"][..], "--predict"),
    ] {
        let out = Command::new(testkit::bin("srv-sim"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn the_prediction_agrees_with_the_server_under_loadgen_at_c1_and_c8() {
    let load = [
        "-c",
        "1,8",
        "--input-len",
        "64",
        "--max-tokens",
        "32",
        "-n",
        "16",
        "--seed",
        "3",
    ];
    let predicted = figures(&records(&load));
    holds_in_one_of_three("predicted against measured", || {
        let sim = start(&[LLAMA_8B_ON_A100, &["--realtime", "--seed", "3"]].concat());
        let measured = figures(&loadgen_against(&sim, &load));
        let mut said = Vec::new();
        for ((p, m), c) in predicted.iter().zip(&measured).zip([1, 8]) {
            let off = |a: f64, b: f64| b / a - 1.0;
            let (tok, ttft, tpot) = (off(p.0, m.0), off(p.1, m.1), off(p.2, m.2));
            check(&format!("C={c} tok/s off"), tok, tok.abs() < 0.05)?;
            check(&format!("C={c} TPOT p50 off"), tpot, tpot.abs() < 0.05)?;
            check(&format!("C={c} TTFT mean off"), ttft, ttft.abs() < 0.25)?;
            said.push(format!(
                "C={c}: tok/s {tok:+.3}, TPOT {tpot:+.3}, TTFT {ttft:+.3}"
            ));
        }
        Ok(said.join("; "))
    });
}

/// The load flags are declared once (shared's `LoadArgs`), so each has one help text: loadgen's
/// `--help` and srv-sim's say the same of every one of them.
#[test]
fn the_load_flags_have_one_help_text_in_loadgen_and_srv_sim() {
    use clap::Args;
    let cmd = servbench::load::LoadArgs::augment_args(clap::Command::new("load"));
    let longs: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(|l| format!("--{l}"))
        .collect();
    assert!(longs.len() >= 25, "{longs:?}");
    let help = |bin: &str| {
        let out = Command::new(testkit::bin(bin))
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "{bin} --help");
        String::from_utf8(out.stdout).unwrap()
    };
    let (loadgen, sim) = (help("loadgen"), help("srv-sim"));
    for long in &longs {
        let said = help_of(&loadgen, long);
        assert!(said.len() >= 2, "{long} in loadgen --help: {said:?}");
        assert_eq!(said, help_of(&sim, long), "{long}");
    }
}

/// A flag's block of `--help`: its line (indented less than the text under it) and the text
/// under it, up to the blank line.
fn help_of(help: &str, long: &str) -> Vec<String> {
    let names = |l: &str| -> bool {
        let text = l.trim_start();
        let head = text.split(" <").next().unwrap_or_default();
        l.len() - text.len() < 8 && head.split(", ").any(|n| n == long)
    };
    help.lines()
        .skip_while(|l| !names(l))
        .take_while(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// PREDICT-N (round 4): `--predict -n 4000000000` held every record of its point in memory
/// until it ended (2.3 GB in 15 s, nothing written). A point beyond the bound a prediction
/// holds is refused in one line, at once; so is a default budget beyond it (-c 4000000000).
#[test]
fn predict_n_a_point_beyond_what_memory_holds_is_refused_in_one_line() {
    for (args, needle) in [
        (&["-c", "1", "-n", "4000000000"][..], "-n 4000000000"),
        (&["-c", "4000000000"][..], "-c 4000000000"),
    ] {
        let out = predict(&[args, &["--max-tokens", "16", "--input-len", "64"]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(needle) && err.contains("lower -n"),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// Each micro-batch of a pipelined round has the whole token budget, as vLLM's PP batches and
/// SGLang's PP micro-batches each do: at PP8 a wave of 63 prompts of 512 tokens (32256 tokens,
/// four times one micro-batch's 8192, within seven) is prefilled in one round, not four. The
/// wave's first request, sent alone 2 us ahead of the rest, has a round of its own, but a
/// pipelined engine takes the rest into the first stage as soon as that round's one
/// micro-batch has left it (one stage-time, 1/8 of its round), into the 7 micro-batches still
/// free: the wave's TTFT is the request latency, 1/8 of the lone round and the wave's round,
/// not the two rounds end to end.
#[test]
fn pp_micro_batches_each_prefill_a_whole_budget_in_one_round() {
    let out = predict_on(
        &[
            "--model",
            "llama-3.1-70b",
            "--hardware",
            "h200",
            "--pp",
            "8",
        ],
        &[
            "-c",
            "64",
            "-n",
            "64",
            "--input-len",
            "512",
            "--max-tokens",
            "2",
            "--enable-logging-iteration-details",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // (context requests, context tokens, elapsed ms) of each step with prefill.
    let field = |line: &str, after: &str, upto: &str| -> f64 {
        let rest = &line[line.find(after).unwrap_or_else(|| panic!("{line}")) + after.len()..];
        rest[..rest.find(upto).unwrap()].trim().parse().unwrap()
    };
    let prefills: Vec<(f64, f64, f64)> = err
        .lines()
        .filter(|l| l.contains("Iteration("))
        .map(|l| {
            (
                field(l, "): ", " context requests"),
                field(l, "requests, ", " context tokens"),
                field(l, "elapsed time: ", " ms"),
            )
        })
        .filter(|p| p.1 > 0.0)
        .collect();
    let shape: Vec<(f64, f64)> = prefills.iter().map(|p| (p.0, p.1)).collect();
    assert_eq!(shape, [(1.0, 512.0), (63.0, 32256.0)], "{err}");
    let recs = json_lines(&out.stdout);
    let mut ttft: Vec<f64> = of_kind(&recs, "request")
        .iter()
        .map(|r| num(r, "/ttft_ms"))
        .collect();
    ttft.sort_by(f64::total_cmp);
    // From the point's start: the modelled request latency (200 us), then the lone round
    // (73.9 ms); the wave enters the pipeline one stage-time (73.9 / 8 = 9.2 ms) after it and
    // is back a round later (664 ms: 7 micro-batches of 9 prompts).
    let (lone, round) = (prefills[0].2, prefills[1].2);
    let (first, wave) = (0.2 + lone, 0.2 + lone / 8.0 + round);
    assert!((ttft[0] - first).abs() < 0.02, "{ttft:?} vs {first}");
    for t in &ttft[1..] {
        assert!((t - wave).abs() < 0.02, "{t} vs {wave}");
    }
}
