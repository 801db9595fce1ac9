//! The engine's own steps and counters in summarize, against srv-sim's cost model (srv-launch
//! `--self-report`: its step log and its FLOP and byte counters): the points table's engine
//! step columns are the summaries' `engine_steps`; the decode budget puts the engine's decode
//! step beside the client's TPOT, split into collbench's measured parts where there are some;
//! MBU and MFU are the cost model's own figures.

use serde_json::Value;
use testkit::{json_lines, num, of_kind, sh};

/// The number just before `unit` after `after` in `text`.
fn number_before(text: &str, after: &str, unit: &str) -> f64 {
    let rest = &text[text
        .find(after)
        .unwrap_or_else(|| panic!("no {after:?}: {text}"))
        + after.len()..];
    let head = &rest[..rest
        .find(unit)
        .unwrap_or_else(|| panic!("no {unit:?}: {rest}"))];
    head.trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no number before {unit:?}: {rest}"))
}

/// Printed to three significant digits: within half of the third digit.
fn printed_as(printed: f64, value: f64) -> bool {
    (printed - value).abs() <= value.abs() * 5e-3 + 1e-9
}

/// srv-launch sim `launch` --self-report, a C=1 and a C=4 point, srv-kill: the records, the server's
/// record and srv-sim's plan (`--dry-run`: its per-step overhead).
fn sim_run(dir: &std::path::Path, launch: &str) -> (Vec<Value>, Value, Value) {
    let d = dir.display();
    let out = sh(&format!(
        "srv-launch sim {launch} --self-report > {d}/server.jsonl && \
         loadgen -c 1,4 -n 8 --max-tokens 8 --input-len 64 < {d}/server.jsonl > {d}/run.jsonl; \
         rc=$?; srv-kill --from {d}/server.jsonl > /dev/null; srv-sim --dry-run > {d}/plan.jsonl; exit $rc"
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |f: &str| json_lines(&std::fs::read(dir.join(f)).unwrap());
    (
        read("run.jsonl"),
        read("server.jsonl")[0].clone(),
        read("plan.jsonl")[0].clone(),
    )
}

#[test]
fn the_engine_step_columns_note_and_mbu_are_srv_sims_own_figures() {
    let dir = tempfile::tempdir().unwrap();
    let (records, _server, plan) = sim_run(dir.path(), "");
    let run = dir.path().join("run.jsonl");
    let out = sh(&format!(
        "summarize {} --roofline llama-3.1-8b@h100 --wide",
        run.display()
    ));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for header in ["eng step ms", "eng steps/s", "eng TF/s/GPU", "eng GB/s/GPU"] {
        assert!(text.contains(header), "{header} missing:\n{text}");
    }
    let overhead_ms = plan["step_overhead_ms"].as_f64().unwrap();
    for s in of_kind(&records, "summary") {
        let c = s["point"]["concurrency"].as_u64().unwrap();
        let e = &s["engine_steps"];
        // The note puts the engine's step at the point's batch beside the TPOT: the step's
        // length from the busy window over the steps (vLLM's logged time is only its wait).
        let note = text
            .lines()
            .find(|l| l.starts_with(&format!("note: C={c}: engine step")))
            .unwrap_or_else(|| panic!("no engine step note at C={c}:\n{text}"));
        assert_eq!(e["decode_full_batch"], c, "{e}");
        let step = number_before(note, "engine step", " ms at batch");
        // srv-sim waits out each step (no --async-scheduling): its logged waits fill its busy
        // time, so they are its steps' own lengths; the decode steps' at the point's batch.
        assert!(
            printed_as(step, num(e, "decode_full_batch_ms_mean")),
            "{note} vs {e}"
        );
        assert!(
            note.contains(&format!(
                "at batch {c} (its step log: {} decode steps of {}; the engine core's wait for a step's result ",
                e["decode_steps"], e["steps"]
            )),
            "{note}"
        );
        let tpot = number_before(note, "TPOT p50", " ms)");
        assert!(
            printed_as(tpot, s["tpot_ms"]["p50"].as_f64().unwrap()),
            "{note}"
        );
        // TPOT and step printed alike read as equal, never as "0 ms below" (regression).
        assert_eq!(
            tpot == step,
            note.contains("the client's TPOT equals the engine's step"),
            "{note}"
        );
        assert!(!note.contains(" is 0 ms "), "{note}");

        // The counters are the cost model's: each step's memory time at 3350 GB/s and its
        // compute time at 989 TFLOP/s. Every step here is memory-bound, so its logged time is
        // its memory time plus the overhead: MBU is the steps' memory time over the point.
        let duration_ms = s["duration_s"].as_f64().unwrap() * 1e3;
        let srv = &s["server"];
        let bytes = srv["est_read_bytes_per_gpu"].as_f64().unwrap();
        let flops = srv["est_flops_per_gpu"].as_f64().unwrap();
        let memory_ms = num(&e["result_wait_ms"], "sum") - num(e, "steps") * overhead_ms;
        let logged_rounding = num(e, "steps") * 0.005;
        assert!(
            (bytes / 3350e9 * 1e3 - memory_ms).abs() <= logged_rounding + 1e-6,
            "counters {bytes} B vs the step log's {memory_ms} ms of memory time"
        );
        let mbu_note = text
            .lines()
            .find(|l| l.starts_with("note: MBU") && l.contains(&format!(" at C={c} ")))
            .unwrap_or_else(|| panic!("no MBU note at C={c}:\n{text}"));
        let mbu = number_before(mbu_note, "MBU", "%");
        let mfu = number_before(mbu_note, "MFU", "%");
        assert!(
            printed_as(mbu, bytes / 3350e9 / (duration_ms / 1e3) * 100.0),
            "{mbu_note}"
        );
        assert!(
            (mbu - memory_ms / duration_ms * 100.0).abs()
                <= mbu * 5e-3 + logged_rounding / duration_ms * 100.0,
            "MBU {mbu}% vs the cost model's memory time {memory_ms} ms of {duration_ms} ms"
        );
        assert!(
            printed_as(mfu, flops / 989e12 / (duration_ms / 1e3) * 100.0),
            "{mbu_note}"
        );
        assert!(mbu_note.contains("memory-bound"), "{mbu_note}");
        // The columns: the same counters per second, the step log's mean and rate.
        let row: Vec<&str> = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&c.to_string()))
            .unwrap()
            .split_whitespace()
            .collect();
        let n = row.len();
        // ... eng TF/s/GPU, eng GB/s/GPU, eng step ms, eng steps/s, then the roofline's columns.
        let at = |header: &str| -> f64 {
            let headers: Vec<&str> = text
                .lines()
                .find(|l| l.starts_with("C "))
                .unwrap()
                .split("  ")
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .collect();
            assert_eq!(headers.len(), n, "{headers:?} vs {row:?}");
            row[headers.iter().position(|h| *h == header).unwrap()]
                .parse()
                .unwrap()
        };
        assert!(
            printed_as(at("eng step ms"), num(e, "step_ms_mean")),
            "{text}"
        );
        assert!(
            printed_as(at("eng steps/s"), num(e, "steps_per_s")),
            "{text}"
        );
        assert!(
            printed_as(at("eng GB/s/GPU"), bytes / (duration_ms / 1e3) / 1e9),
            "{text}"
        );
        assert!(
            printed_as(at("eng TF/s/GPU"), flops / (duration_ms / 1e3) / 1e12),
            "{text}"
        );
    }
    assert!(!text.contains("not available"), "{text}");
}

/// A small card: every GEMM of its step takes microseconds on a CPU.
const TINY: &str = r#"{"name":"tiny","layers":2,"hidden":256,"heads":4,"kv_heads":2,"head_dim":64,"params":2.5e6,"weight_format":"bf16","intermediate":512}"#;

#[test]
fn the_decode_budget_splits_the_engines_own_step_into_the_measured_parts() {
    let dir = tempfile::tempdir().unwrap();
    // srv-sim at TP=2, so the step has allreduces to measure.
    let (records, _, _) = sim_run(dir.path(), "--tp 2");
    let card = dir.path().join("tiny.json");
    std::fs::write(&card, TINY).unwrap();
    let d = dir.path().display();
    let out = sh(&format!(
        "collbench decode --model {d}/tiny.json --hardware h100 --tp 2 --batch 1 --compute -n 3 -w 1 > {d}/decode.jsonl && \
         summarize {d}/run.jsonl {d}/decode.jsonl --roofline {d}/tiny.json@h100 --wide"
    ));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c1 = of_kind(&records, "summary")
        .into_iter()
        .find(|s| s["point"]["concurrency"] == 1)
        .unwrap()
        .clone();
    let line = text
        .lines()
        .find(|l| l.starts_with("note: C=1: engine step"))
        .unwrap_or_else(|| panic!("no budget line at C=1:\n{text}"));
    let step = number_before(line, "engine step", " ms at batch");
    assert!(
        printed_as(step, num(&c1["engine_steps"], "decode_full_batch_ms_mean")),
        "{line}"
    );
    for part in [
        "at batch 1 (its step log:",
        "TPOT p50",
        "): allreduce ",
        "(measured by collbench decode over tcp",
        "GEMMs ",
        "launch overhead ",
        "measured step (the engine's mean decode step at batch 1, from its step log)",
    ] {
        assert!(line.contains(part), "{part:?} missing: {line}");
    }
    // One line per point: no TPOT-only line beside the one with the parts.
    assert_eq!(text.matches("C=1: engine step").count(), 1, "{text}");
    assert!(!line.contains("no allreduce or GEMM measurement"), "{line}");
}

/// srv-sim's steps at a known length: a tiny card whose GEMMs take microseconds, and a fixed
/// per-step overhead of this much.
const STEP_MS: f64 = 20.0;

#[test]
fn an_async_engines_logged_wait_is_not_taken_for_its_step() {
    // srv-sim with vLLM's --async-scheduling logs each step's elapsed time as an async engine
    // does (its core's wait for a result launched earlier, 0.03 ms) while its steps take 20 ms.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    std::fs::write(dir.path().join("tiny.json"), TINY).unwrap();
    let out = sh(&format!(
        "srv-launch sim --self-report -- --model-card {d}/tiny.json --step-overhead {STEP_MS}ms --async-scheduling > {d}/server.jsonl && \
         loadgen -c 4 -n 16 --max-tokens 8 --input-len 16 < {d}/server.jsonl > {d}/run.jsonl; \
         rc=$?; srv-kill --from {d}/server.jsonl > /dev/null; [ $rc = 0 ] && summarize {d}/run.jsonl"
    ));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records = json_lines(&std::fs::read(dir.path().join("run.jsonl")).unwrap());
    let summary = of_kind(&records, "summary")[0].clone();
    let e = &summary["engine_steps"];
    // The wait, under its own name, exactly as logged.
    assert!(
        (num(&e["result_wait_ms"], "mean") - 0.03).abs() < 1e-12,
        "{e}"
    );
    assert_eq!(num(&e["result_wait_ms"], "max"), 0.03, "{e}");
    // The step: the busy time over the steps, srv-sim's 20 ms within 10%.
    let step = num(e, "step_ms_mean");
    assert!((step - STEP_MS).abs() <= STEP_MS * 0.1, "{e}");
    // The note and the column say the step, and name the wait apart.
    let note = text
        .lines()
        .find(|l| l.starts_with("note: C=4: engine step"))
        .unwrap_or_else(|| panic!("no engine step note:\n{text}"));
    assert!(
        printed_as(number_before(note, "engine step", " ms at batch"), step),
        "{note}"
    );
    let wait = number_before(note, "wait for a step's result", " ms, not the step");
    assert!(printed_as(wait, 0.03), "{note}");
    assert!(!note.contains("engine step 0.03"), "{note}");
}
