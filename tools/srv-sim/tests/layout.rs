//! Layouts as the hardware's topology makes them: TP over PCIe across sockets against
//! NVSwitch, a measured allreduce curve replacing the model, the pipeline micro-batch cap, weight
//! formats that fit or do not, and cards printed to start from.

mod common;
use common::*;
use std::process::Command;
use std::time::Instant;
use testkit::num;
use testkit::{check, holds_in_one_of_three};

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    realtime_thread();
    guard
}

/// Decode tokens/s of one stream through HTTP: tokens after the first over the time they took.
fn decode_rate(port: u16, max_tokens: u32) -> f64 {
    let x = post(
        port,
        "/v1/completions",
        &completion_body(8, max_tokens, true),
    );
    assert_eq!(x.status, 200);
    assert_eq!(x.generated_tokens(), max_tokens as usize);
    x.decode_tok_s()
}

/// The notes' finding: one stream of Qwen3-32B on 8 RTX PRO 6000 over PCIe across two sockets
/// is no faster at TP8 than at TP4 (the allreduces cross the sockets); on H200 over NVSwitch
/// TP8 is faster. In the dry run, and measured through HTTP.
#[test]
fn tp8_is_no_faster_than_tp4_over_dual_socket_pcie_and_faster_over_nvswitch() {
    let _serial = serial();
    let layout = |hw: &str, tp: &str| {
        vec![
            "--model".to_string(),
            "qwen3-32b".into(),
            "--hardware".into(),
            hw.into(),
            "--tp".into(),
            tp.into(),
            "--dry-run-context".into(),
            "40".into(),
        ]
    };
    let plan = |hw: &str, tp: &str| {
        let args = layout(hw, tp);
        dry_run(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (pcie4, pcie8) = (plan("rtx-pro-6000", "4"), plan("rtx-pro-6000", "8"));
    let (nv4, nv8) = (plan("h200", "4"), plan("h200", "8"));
    let rate = |p: &serde_json::Value| num(p, "single_stream_tok_s");
    assert!(rate(&pcie8) <= rate(&pcie4), "{pcie4}\n{pcie8}");
    assert!(rate(&nv8) > rate(&nv4), "{nv4}\n{nv8}");
    // Why: TP8's allreduces cross the sockets, ~70 us each against ~14 inside one.
    assert_eq!(pcie8["comm_level"], "cross-socket");
    assert_eq!(pcie4["comm_level"], "switch");
    assert!(num(&pcie8, "allreduce_us") > 4.0 * num(&pcie4, "allreduce_us"));
    assert!(num(&pcie8, "decode_memory_ms") < 0.51 * num(&pcie4, "decode_memory_ms"));

    let measured = |hw: &str, tp: &str| {
        let mut args = layout(hw, tp);
        args.truncate(6);
        args.push("--realtime".into());
        let sim = start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let rates: Vec<f64> = (0..3).map(|_| decode_rate(sim.port, 30)).collect();
        median(rates)
    };
    holds_in_one_of_three("TP4 vs TP8 over PCIe and NVSwitch, measured", || {
        let (p4, p8) = (measured("rtx-pro-6000", "4"), measured("rtx-pro-6000", "8"));
        let (n4, n8) = (measured("h200", "4"), measured("h200", "8"));
        check("rtx-pro-6000 TP8 over TP4", p8 / p4, p8 <= p4)?;
        check("h200 TP8 over TP4", n8 / n4, n8 > n4)?;
        Ok(format!(
            "rtx-pro-6000 TP4 {p4:.1} TP8 {p8:.1} tok/s; h200 TP4 {n4:.1} TP8 {n8:.1} tok/s"
        ))
    });
}

/// collbench's records, measured on this machine, replace the modelled allreduce: the dry
/// run's communication time becomes 2 x layers x the measured mean at the step's size.
#[test]
fn comm_from_collbench_records_changes_the_dry_runs_communication_to_the_measured_one() {
    let dir = tempfile::tempdir().unwrap();
    let coll = dir.path().join("coll.jsonl");
    let out = testkit::cmd("collbench")
        .args([
            "-np", "2", "--mode", "latency", "-b", "1K", "-e", "64K", "-f", "2",
        ])
        .args(["-n", "10", "-w", "2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&coll, &out.stdout).unwrap();
    let records = testkit::json_lines(&out.stdout);
    // llama-3.1-8b at batch 1: 4096 x 2 B = 8 KiB, one of the measured sizes.
    let at_8k = records
        .iter()
        .find(|r| r["kind"] == "coll" && r["bytes"] == 8192)
        .expect("an 8 KiB record");
    let mean = at_8k["time_us"]["mean"].as_f64().unwrap();

    let base = ["--model", "llama-3.1-8b", "--hardware", "h100", "--tp", "2"];
    let modelled = dry_run(&base);
    let path = coll.to_str().unwrap();
    let measured = dry_run(&[&base[..], &["--comm-from", path]].concat());
    assert_eq!(modelled["comm_source"], "model");
    let source = measured["comm_source"].as_str().unwrap();
    assert!(
        source.starts_with("measured: ") && source.contains("tcp, 2 ranks, latency mode, mean"),
        "{source}"
    );
    assert_eq!(measured["allreduce_algo"], "measured");
    assert!((num(&measured, "allreduce_us") - mean).abs() < 1e-9 * mean);
    let comm = num(&measured, "decode_comm_ms");
    assert!(
        (comm - 64.0 * mean / 1000.0).abs() < 1e-9 * comm,
        "{measured}"
    );
    assert_ne!(comm, num(&modelled, "decode_comm_ms"));
    assert_eq!(
        num(&measured, "decode_memory_ms"),
        num(&modelled, "decode_memory_ms")
    );

    // The tcp backend is said to be no GPU figure; records at another rank count are refused.
    let run = |extra: &[&str]| {
        Command::new(testkit::bin("srv-sim"))
            .args(["--dry-run", "--model", "llama-3.1-8b", "--comm-from", path])
            .args(extra)
            .output()
            .unwrap()
    };
    let ok = run(&["--tp", "2"]);
    assert!(String::from_utf8_lossy(&ok.stderr).contains("says nothing about NCCL on GPUs"));
    let wrong = run(&["--tp", "4"]);
    assert_eq!(wrong.status.code(), Some(2));
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        err.starts_with("srv-sim: error: --comm-from ")
            && err.contains("at 2 rank(s) only")
            && err.contains("collbench -np 4"),
        "{err}"
    );
}

#[test]
fn comm_from_a_file_without_end_is_one_error_naming_its_bound() {
    let out = Command::new(testkit::bin("srv-sim"))
        .args(["--dry-run", "--tp", "2", "--comm-from", "/dev/zero"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--comm-from: /dev/zero:1: a line longer than 256 MiB"),
        "{err}"
    );
}

/// Runs `clients` closed-loop clients, 2 requests of 24 tokens each; returns output tokens/s.
fn throughput(port: u16, clients: usize) -> f64 {
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            std::thread::spawn(move || {
                realtime_thread();
                for _ in 0..2 {
                    let x = post(port, "/v1/completions", &completion_body(16, 24, true));
                    assert_eq!(x.generated_tokens(), 24);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    (clients * 2 * 24) as f64 / start.elapsed().as_secs_f64()
}

/// SGLang's `pp_max_micro_batch_size = 8` at PP8: at most 8 requests per micro-batch, so 64
/// run at once. Throughput rises while concurrency fills the stages and stops past 8 per stage
/// (C=64); without the cap, 128 streams keep gaining.
#[test]
fn pp8_with_micro_batch_cap_8_stops_rising_past_8_per_stage() {
    let _serial = serial();
    let base = [
        "--model",
        "llama-3.1-8b",
        "--hardware",
        "l40s",
        "--pp",
        "8",
        "--realtime",
    ];
    let plan = dry_run(&[&base[..6], &["--pp-max-micro-batch", "8"]].concat());
    assert_eq!(plan["max_running_requests"], 64);
    assert_eq!(plan["pp_max_micro_batch"], 8);
    assert_eq!(num(&plan, "pipeline_bubble_at_batch_1"), 7.0 / 8.0);
    let capped = start(&[&base[..], &["--pp-max-micro-batch", "8"]].concat());
    let free = start(&base);
    holds_in_one_of_three(
        "PP8 throughput against concurrency, capped at 8 per stage",
        || {
            let c8 = throughput(capped.port, 8);
            let c64 = throughput(capped.port, 64);
            let c128 = throughput(capped.port, 128);
            let free128 = throughput(free.port, 128);
            check("capped C=64 over C=8", c64 / c8, c64 > 4.0 * c8)?;
            check("capped C=128 over C=64", c128 / c64, c128 < 1.2 * c64)?;
            check(
                "uncapped C=128 over capped C=128",
                free128 / c128,
                free128 > 1.5 * c128,
            )?;
            Ok(format!(
                "capped: C=8 {c8:.0}, C=64 {c64:.0}, C=128 {c128:.0} tok/s; uncapped C=128 {free128:.0}"
            ))
        },
    );
}

#[test]
fn a_dry_run_that_does_not_fit_says_so_and_nvfp4_kimi_fits_8_x_96_gb() {
    let run = |model: &str| {
        Command::new(testkit::bin("srv-sim"))
            .args(["--dry-run", "--model", model, "--hardware", "rtx-pro-6000"])
            .args(["--tp", "8"])
            .output()
            .unwrap()
    };
    let fp8 = run("kimi-k2");
    assert!(fp8.status.success());
    let plan = &testkit::json_lines(&fp8.stdout)[0];
    assert_eq!(plan["fits"], false);
    assert!(plan["kv_cache_tokens"].is_null());
    let note = plan["fit_note"].as_str().unwrap();
    assert!(note.contains("128.3 GB of weights per GPU"), "{note}");
    assert!(String::from_utf8_lossy(&fp8.stderr).contains("warning: does not fit: kimi-k2"));

    let fp4 = run("kimi-k2-nvfp4");
    let plan = &testkit::json_lines(&fp4.stdout)[0];
    assert_eq!(plan["fits"], true, "{plan}");
    assert_eq!(plan["weight_format"], "fp8 + nvfp4 experts");
    assert!(plan["kv_cache_tokens"].as_u64().unwrap() > 131_072);
    assert!(fp4.stderr.is_empty());

    // Serving a layout whose weights do not fit is refused with the same reason.
    let serve = Command::new(testkit::bin("srv-sim"))
        .args([
            "--port",
            "0",
            "--model",
            "kimi-k2",
            "--hardware",
            "rtx-pro-6000",
        ])
        .args(["--tp", "8"])
        .output()
        .unwrap();
    assert_eq!(serve.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&serve.stderr).contains("128.3 GB of weights per GPU"));
}

/// A card printed by --print-card is the JSON a user edits: here, a dual-socket box whose
/// socket link is as fast as its switches, where TP8 wins again.
#[test]
fn printed_cards_load_back_edited_and_presets_are_listed() {
    let list = Command::new(testkit::bin("srv-sim"))
        .arg("--list-presets")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("kimi-k2-nvfp4") && text.contains("rtx-pro-6000-switch"),
        "{text}"
    );
    let card = Command::new(testkit::bin("srv-sim"))
        .args(["--print-card", "rtx-pro-6000"])
        .output()
        .unwrap();
    assert!(card.status.success());
    let mut hw: serde_json::Value = serde_json::from_slice(&card.stdout).unwrap();
    assert!(hw["source"].as_str().unwrap().contains("rtx6kpro"));
    hw["name"] = "fast-sockets".into();
    hw["interconnect"]["levels"][1]["hop_us"] = 1.1.into();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("box.json");
    std::fs::write(&path, serde_json::to_string_pretty(&hw).unwrap()).unwrap();
    let p = path.to_str().unwrap();
    let rate = |tp: &str| {
        num(
            &dry_run(&["--model", "qwen3-32b", "--hardware-file", p, "--tp", tp]),
            "single_stream_tok_s",
        )
    };
    assert!(rate("8") > rate("4"));
    let missing = Command::new(testkit::bin("srv-sim"))
        .args(["--print-card", "h300"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("rtx-pro-6000"));
}
