//! The roofline per row: each row judged in the layout its records carry, two limits side by
//! side, no share above 100%, the single-stream note against the memory-bound limit, measured
//! allreduce curves, and honest decode budgets.
//!
//! `tp_sweep_pcie.jsonl` is real: `TPS='1 4 8' LOADGEN_ARGS='-c 1 -n 4 --max-tokens 24
//! --input-len 32 --no-requests' scripts/tp-sweep.sh sim --model qwen3-32b -- --hardware
//! rtx-pro-6000` (srv-launch labels each server tp=N, loadgen carries the labels on).

#[path = "support/fixtures.rs"]
mod fixtures;

#[path = "support/synth.rs"]
mod synth;

use fixtures::summarize;
use serde_json::Value;
use servbench::record::Labels;
use testkit::num;
use testkit::ok;

/// The load-points table of `--format json` output: its rows, context and notes.
fn points_table(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let doc: Value = serde_json::from_str(&ok(&summarize(&all))).unwrap();
    doc["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"].as_str().unwrap_or("").starts_with("load points"))
        .cloned()
        .expect("a load points table")
}

/// Every row was judged as TP=1 (327% and 552% "of the limit" on a TP4/TP8 sweep): now each
/// row's `tp` label gives its layout and its own limits, and no share is above 100%.
#[test]
fn each_row_is_judged_in_its_own_layout_from_its_tp_label() {
    let t = points_table(&[
        "tp_sweep_pcie.jsonl",
        "--roofline",
        "qwen3-32b@rtx-pro-6000",
    ]);
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{t}");
    let by_tp = |tp: &str| rows.iter().find(|r| r["tp"] == tp).expect(tp);
    // 65.6 GB of BF16 weights over 1,792 GB/s per GPU, split over the TP group.
    for (tp, limit) in [("1", 27.3), ("4", 109.2), ("8", 218.4)] {
        let mem = num(by_tp(tp), "mem_limit_tok_s");
        assert!((mem / limit - 1.0).abs() < 0.01, "tp={tp}: {mem}");
        assert!(num(by_tp(tp), "step_limit_tok_s") <= mem);
    }
    for r in rows {
        for share in ["mem_pct", "step_pct"] {
            assert!(num(r, share) <= 100.0, "{share} in {r}");
        }
    }
    // Measured (srv-sim): one stream is slower at TP8 than at TP4 over dual-socket PCIe.
    assert!(num(by_tp("8"), "stream_tok_s") < num(by_tp("4"), "stream_tok_s"));
    let context = t["context"]["roofline"].as_str().unwrap();
    assert!(
        context.contains("TP=1 PP=1, TP=4 PP=1, TP=8 PP=1"),
        "{context}"
    );
    let notes = t["notes"].to_string();
    assert!(!notes.contains("impossible"), "{notes}");
    assert!(notes.contains("single stream at tp=8"), "{notes}");
    assert!(notes.contains("the modelled step explains it"), "{notes}");
}

#[test]
fn a_tp_label_that_disagrees_with_the_flag_is_an_error() {
    let out = summarize(&[
        "tp_sweep_pcie.jsonl",
        "--roofline",
        "qwen3-32b@rtx-pro-6000",
        "--tp",
        "4",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("summarize: error: --tp 4 disagrees with the tp=1 label of point tp=1")
            && err.contains("drop --tp"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // Records without the label take the flag.
    let t = points_table(&[
        "clean.jsonl",
        "--roofline",
        "llama-3.1-8b@h200",
        "--tp",
        "2",
    ]);
    let context = t["context"]["roofline"].as_str().unwrap();
    assert!(
        context.contains("in TP=2 PP=1") && context.contains("else --tp 2 --pp 1"),
        "{context}"
    );
    // PP fills in the same way: one stream gains nothing from stages (same memory-bound limit,
    // a slower step with the hand-offs); four streams fill four stages.
    let pp1 = points_table(&["clean.jsonl", "--roofline", "llama-3.1-8b@h200"]);
    let pp4 = points_table(&[
        "clean.jsonl",
        "--roofline",
        "llama-3.1-8b@h200",
        "--pp",
        "4",
    ]);
    assert!(
        pp4["context"]["roofline"]
            .as_str()
            .unwrap()
            .contains("in TP=1 PP=4")
    );
    let row = |t: &Value, c: u64| {
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["conc"] == c)
            .cloned()
            .unwrap()
    };
    let (a, b) = (row(&pp1, 1), row(&pp4, 1));
    assert!((num(&a, "mem_limit_tok_s") / num(&b, "mem_limit_tok_s") - 1.0).abs() < 1e-6);
    assert!(num(&b, "step_limit_tok_s") < num(&a, "step_limit_tok_s"));
    let (a, b) = (row(&pp1, 4), row(&pp4, 4));
    assert!((num(&a, "mem_limit_tok_s") / num(&b, "mem_limit_tok_s") - 1.0).abs() < 0.01);
}

/// The notes' headline: one stream of the Kimi-K2-class model at 36 tok/s on TP8 over 8 RTX PRO
/// 6000 is a small share of the memory-bound limit, read off the `tp=8` label without any flag.
/// The model is the NVFP4 one (routed experts at 0.5625 B per weight): FP8 Kimi-K2 does not fit
/// 8 x 96 GB, so srv-sim refuses that layout (and `--roofline kimi-k2@rtx-pro-6000` warns). NVFP4
/// experts read ~591 tok/s worth of bytes per stream at this context, so 36 tok/s is 6%.
#[test]
fn kimi_single_stream_reads_its_share_of_the_memory_bound_limit() {
    let t = points_table(&[
        "kimi_tp8_single_stream.jsonl",
        "--roofline",
        "kimi-k2-nvfp4@rtx-pro-6000",
    ]);
    let row = &t["rows"][0];
    let mem = num(row, "mem_limit_tok_s");
    assert!((mem / 591.0 - 1.0).abs() < 0.02, "{row}");
    assert!((num(row, "mem_pct") - 6.1).abs() < 0.5, "{row}");
    let notes = t["notes"].to_string();
    assert!(
        notes.contains(
            "single stream at C=1 decodes 36.0 tok/s: 6% of the memory-bound limit of 591 tok/s"
        ) && notes.contains("(TP=8)")
            && notes.contains("look at the engine"),
        "{notes}"
    );
}

/// A rate above a limit is never printed as a share: the cell says `over` and a note blames
/// the card, the layout or the data (here the card: an L40S has half the bandwidth).
#[test]
fn a_rate_above_the_limit_is_a_note_not_a_share() {
    let text = ok(&summarize(&[
        "tp_sweep_pcie.jsonl",
        "--roofline",
        "qwen3-32b@l40s",
    ]));
    assert!(text.contains(" over "), "{text}");
    let t = points_table(&["tp_sweep_pcie.jsonl", "--roofline", "qwen3-32b@l40s"]);
    for r in t["rows"].as_array().unwrap() {
        for share in ["mem_pct", "step_pct"] {
            match &r[share] {
                Value::String(s) => assert_eq!(s, "over"),
                v => assert!(v.as_f64().unwrap() <= 100.0, "{share} in {r}"),
            }
        }
    }
    assert_eq!(t["rows"][0]["mem_pct"], "over", "{t}");
    assert!(
        text.contains("note: tp=1 decodes 27.3 tok/s per stream")
            && text.contains("the memory-bound limit (weights + KV over bandwidth) of 13.2 tok/s")
            && text.contains("impossible, so the card"),
        "{text}"
    );
}

fn write_coll(dir: &tempfile::TempDir, ranks: u32, alpha_us: f64) -> String {
    let lines = synth::coll_lines(&Labels::new(), ranks, 1 << 20, 10.0, alpha_us);
    let path = dir.path().join(format!("coll{ranks}.jsonl"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path.to_str().unwrap().to_string()
}

/// `--comm-from` puts a measured curve in the modelled step of rows at its rank count.
#[test]
fn comm_from_replaces_the_modelled_allreduce_in_the_step_limit() {
    let dir = tempfile::tempdir().unwrap();
    let coll = write_coll(&dir, 8, 150.0);
    let args = [
        "tp_sweep_pcie.jsonl",
        "--roofline",
        "qwen3-32b@rtx-pro-6000",
    ];
    let modelled = points_table(&args);
    let measured = points_table(&[&args[..], &["--comm-from", &coll]].concat());
    let step = |t: &Value, tp: &str| {
        let rows = t["rows"].as_array().unwrap();
        num(
            rows.iter().find(|r| r["tp"] == tp).unwrap(),
            "step_limit_tok_s",
        )
    };
    // TP8: 128 allreduces at ~151 us measured instead of ~70 modelled: a slower step.
    assert!(step(&measured, "8") < 0.8 * step(&modelled, "8"));
    // TP4 was not measured: still the model.
    assert_eq!(step(&measured, "4"), step(&modelled, "4"));
    let context = measured["context"]["roofline"].as_str().unwrap();
    assert!(
        context.contains("measured: ") && context.contains("tcp, 8 ranks, latency mode, mean"),
        "{context}"
    );
}

/// A budget from the tcp backend says so; allreduces above 100% of the measured step get no
/// verdict (the measurement does not belong to this server), never "communication-bound".
#[test]
fn decode_budget_labels_the_tcp_backend_and_refuses_shares_above_100() {
    let dir = tempfile::tempdir().unwrap();
    let slow = write_coll(&dir, 2, 200.0);
    let args = [
        "clean.jsonl",
        &slow,
        "--roofline",
        "llama-3.1-8b@h200",
        "--tp",
        "2",
    ];
    let text = ok(&summarize(&args));
    assert!(
        text.contains("no verdict: the allreduces")
            && text.contains("so they were not measured on this server's GPUs at its layout"),
        "{text}"
    );
    assert!(!text.contains("communication-bound"), "{text}");
    assert!(
        text.contains("allreduce as measured: tcp, 2 ranks, latency mode, mean")
            && text.contains("says nothing about NCCL on GPUs"),
        "{text}"
    );
    let fast = write_coll(&dir, 2, 2.0);
    let text = ok(&summarize(&[
        "clean.jsonl",
        &fast,
        "--roofline",
        "llama-3.1-8b@h200",
        "--tp",
        "2",
    ]));
    assert!(text.contains("not communication-bound"), "{text}");
    assert!(!text.contains("no verdict"), "{text}");
}
