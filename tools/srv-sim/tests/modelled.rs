//! The modelled engine against its own `--dry-run`: the single-stream decode rate through the
//! real HTTP stream, throughput and queueing under concurrency, TP/PP directions, speculative
//! decoding, the KV-cache budget, MoE and data-parallel replicas.

mod common;
use common::*;
use std::time::{Duration, Instant};
use testkit::num;
use testkit::{check, holds_in_one_of_three};

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    realtime_thread();
    guard
}

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = LLAMA_8B_ON_A100.to_vec();
    v.push("--realtime");
    v.extend_from_slice(extra);
    v
}

/// Decode tokens/s of one stream: tokens after the first over the time they took.
fn decode_rate(port: u16, prompt_words: usize, max_tokens: u32) -> f64 {
    let x = post(
        port,
        "/v1/completions",
        &completion_body(prompt_words, max_tokens, true),
    );
    assert_eq!(x.status, 200);
    assert_eq!(x.generated_tokens(), max_tokens as usize);
    x.decode_tok_s()
}

#[test]
fn single_stream_decode_rate_matches_the_dry_run_within_5_percent() {
    let _serial = serial();
    let plan = dry_run(&[LLAMA_8B_ON_A100, &["--dry-run-context", "64"]].concat());
    let predicted = plan["single_stream_tok_s"].as_f64().unwrap();
    let roofline = plan["roofline_tok_s"].as_f64().unwrap();
    assert!(predicted > 50.0 && predicted < 200.0, "{plan}");
    holds_in_one_of_three("single-stream decode rate", || {
        let sim = start(&args(&[]));
        let rates: Vec<f64> = (0..3).map(|_| decode_rate(sim.port, 16, 80)).collect();
        let measured = median(rates.clone());
        let vs_plan = measured / predicted - 1.0;
        let vs_roofline = measured / roofline - 1.0;
        check("off the dry run", vs_plan, vs_plan.abs() < 0.05)?;
        check("off the roofline", vs_roofline, vs_roofline.abs() < 0.05)?;
        Ok(format!(
            "measured {measured:.2} tok/s ({rates:.2?}), dry run {predicted:.2}, roofline \
             {roofline:.2}"
        ))
    });
}

/// Runs `clients` closed-loop clients, `each` requests apiece; returns (tokens/s, median TTFT ms).
fn load(port: u16, clients: usize, each: usize, max_tokens: u32) -> (f64, f64) {
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            std::thread::spawn(move || {
                realtime_thread();
                let mut ttfts = Vec::new();
                for _ in 0..each {
                    let x = post(
                        port,
                        "/v1/completions",
                        &completion_body(16, max_tokens, true),
                    );
                    assert_eq!(x.generated_tokens(), max_tokens as usize);
                    ttfts.push(ms(x.token_events()[0].0 - x.sent));
                }
                ttfts
            })
        })
        .collect();
    let ttfts: Vec<f64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let tokens = (clients * each) as f64 * f64::from(max_tokens);
    (tokens / start.elapsed().as_secs_f64(), median(ttfts))
}

#[test]
fn throughput_grows_with_concurrency_and_saturates_past_max_running_requests() {
    let _serial = serial();
    let mut sim = None;
    holds_in_one_of_three("throughput and TTFT against concurrency", || {
        let fresh = start(&args(&["--max-running-requests", "4"]));
        let port = fresh.port;
        sim = Some(fresh);
        let (t1, ttft1) = load(port, 1, 2, 24);
        let (t4, ttft4) = load(port, 4, 2, 24);
        let (t16, ttft16) = load(port, 16, 2, 24);
        // Memory-bound decode: four streams share each weight read, so ~4x the tokens per
        // second. Past the running limit the extra requests queue: no more throughput, much
        // longer TTFT.
        check("C=4 over C=1 tok/s", t4 / t1, t4 > 3.2 * t1)?;
        check("C=16 over C=4 tok/s", t16 / t4, t16 < 1.25 * t4)?;
        check("C=16 over C=4 TTFT", ttft16 / ttft4, ttft16 > 3.0 * ttft4)?;
        Ok(format!(
            "C=1 {t1:.0} tok/s, TTFT {ttft1:.1} ms; C=4 {t4:.0} / {ttft4:.1}; C=16 {t16:.0} / \
             {ttft16:.1}"
        ))
    });
    let sim = sim.expect("one attempt ran");
    let (_, metrics) = get(sim.port, "/metrics");
    assert_eq!(
        metric(&metrics, "vllm:request_success_total"),
        2.0 + 8.0 + 32.0
    );
    assert_eq!(
        metric(&metrics, "vllm:generation_tokens_total"),
        42.0 * 24.0
    );
}

#[test]
fn tensor_and_pipeline_parallel_move_the_figures_in_the_documented_direction() {
    let _serial = serial();
    let m = ["--model", "llama-3.1-70b", "--hardware", "h200"];
    let tp2 = dry_run(&[&m[..], &["--tp", "2"]].concat());
    let tp4 = dry_run(&[&m[..], &["--tp", "4"]].concat());
    let pp2 = dry_run(&[&m[..], &["--tp", "2", "--pp", "2"]].concat());
    // TP: each GPU reads half the bytes, allreduces are added; the step gets shorter.
    assert!(num(&tp4, "decode_memory_ms") < 0.51 * num(&tp2, "decode_memory_ms"));
    assert!(num(&tp4, "decode_comm_ms") > num(&tp2, "decode_comm_ms"));
    assert!(num(&tp4, "decode_step_ms") < num(&tp2, "decode_step_ms"));
    assert!(num(&tp4, "single_stream_tok_s") > num(&tp2, "single_stream_tok_s"));
    assert!(num(&tp4, "kv_cache_tokens") > num(&tp2, "kv_cache_tokens"));
    // PP: one stream gains nothing (stages run in turn, plus hand-offs), capacity grows,
    // and with one request half of each round is bubble.
    assert!(num(&pp2, "decode_step_ms") >= num(&tp2, "decode_step_ms"));
    assert!(num(&pp2, "kv_cache_tokens") > num(&tp2, "kv_cache_tokens"));
    assert_eq!(num(&pp2, "pipeline_bubble_at_batch_1"), 0.5);

    // Measured through HTTP: TP=2 speeds one stream up by the dry-run's ratio.
    let small = [
        "--model",
        "llama-3.1-8b",
        "--hardware",
        "l40s",
        "--realtime",
        "--dry-run-context",
        "32",
    ];
    let plan1 = dry_run(&small);
    let plan2 = dry_run(&[&small[..], &["--tp", "2"]].concat());
    let want = num(&plan2, "single_stream_tok_s") / num(&plan1, "single_stream_tok_s");
    assert!(want > 1.5, "{want}");
    let one = start(
        &small[..4]
            .iter()
            .chain(&["--realtime"])
            .copied()
            .collect::<Vec<_>>(),
    );
    let r1 = decode_rate(one.port, 8, 30);
    drop(one);
    let two = start(
        &small[..4]
            .iter()
            .chain(&["--realtime", "--tp", "2"])
            .copied()
            .collect::<Vec<_>>(),
    );
    let r2 = decode_rate(two.port, 8, 30);
    assert!(
        ((r2 / r1) / want - 1.0).abs() < 0.05,
        "tp2/tp1 {:.3} vs dry-run {want:.3}",
        r2 / r1
    );

    // Measured PP bubble: with 4 stages, 4 concurrent streams fill the pipeline for the same
    // per-stream rate as one stream alone (each round lasts the same), so 4x the throughput.
    let pp = start(&args(&["--pp", "4"]));
    let (t1, _) = load(pp.port, 1, 1, 24);
    let (t4, _) = load(pp.port, 4, 1, 24);
    assert!(t4 > 3.2 * t1, "pp=4: C=4 {t4:.0} vs C=1 {t1:.0} tok/s");
}

#[test]
fn speculative_decoding_sends_several_tokens_per_chunk() {
    let _serial = serial();
    let sim = start(&args(&[
        "--spec-tokens",
        "3",
        "--spec-accept",
        "0.7",
        "--seed",
        "3",
    ]));
    let mut sizes = Vec::new();
    let mut rates = Vec::new();
    for _ in 0..4 {
        let x = post(sim.port, "/v1/completions", &completion_body(8, 100, true));
        let usage = x.chunks().last().unwrap().1["usage"]["completion_tokens"]
            .as_u64()
            .unwrap();
        assert_eq!(usage, 100);
        let t = x.token_events();
        let n: usize = t.iter().map(|(_, s)| s.split_whitespace().count()).sum();
        assert_eq!(n, 100);
        rates.push(99.0 / (t[t.len() - 1].0 - t[0].0).as_secs_f64());
        sizes.extend(
            t.iter()
                .skip(1)
                .map(|(_, s)| s.split_whitespace().count() as f64),
        );
    }
    let mean = sizes.iter().sum::<f64>() / sizes.len() as f64;
    let expected = 1.0 + 0.7 + 0.49 + 0.343;
    assert!(
        (mean / expected - 1.0).abs() < 0.15,
        "mean tokens per chunk {mean:.2}, want ~{expected:.2}"
    );
    assert!(sizes.contains(&1.0) && sizes.contains(&4.0));
    let plan = dry_run(
        &[
            LLAMA_8B_ON_A100,
            &["--spec-tokens", "3", "--spec-accept", "0.7"],
        ]
        .concat(),
    );
    assert!((plan["spec_tokens_per_step"].as_f64().unwrap() - expected).abs() < 1e-9);
    assert!(
        plan["spec_single_stream_tok_s"].as_f64().unwrap()
            > 2.0 * plan["single_stream_tok_s"].as_f64().unwrap()
    );
    let (_, metrics) = get(sim.port, "/metrics");
    let drafts = metric(&metrics, "vllm:spec_decode_num_drafts_total");
    let accepted = metric(&metrics, "vllm:spec_decode_num_accepted_tokens_total");
    assert!(drafts > 0.0 && accepted > 0.0);
    assert_eq!(
        metric(&metrics, "vllm:spec_decode_num_draft_tokens_total"),
        3.0 * drafts
    );
}

#[test]
fn kv_cache_budget_rejects_what_never_fits_and_queues_what_does_not_fit_yet() {
    let _serial = serial();
    let sim = start(&args(&["--kv-cache-tokens", "200"]));
    let too_big = post(sim.port, "/v1/completions", &completion_body(150, 60, true));
    assert_eq!(too_big.status, 400);
    assert!(String::from_utf8_lossy(&too_big.body).contains("KV"));
    // Three requests of 70 + 30 tokens: two fit at once, the third waits for one to finish.
    let port = sim.port;
    let threads: Vec<_> = (0..3)
        .map(|i| {
            std::thread::sleep(Duration::from_millis(if i == 0 { 0 } else { 3 }));
            std::thread::spawn(move || {
                realtime_thread();
                let x = post(port, "/v1/completions", &completion_body(70, 30, true));
                ms(x.token_events()[0].0 - x.sent)
            })
        })
        .collect();
    let mut ttfts: Vec<f64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    ttfts.sort_by(f64::total_cmp);
    // 30 tokens at ~8 ms a step: the third starts ~240 ms late.
    assert!(ttfts[1] < 60.0 && ttfts[2] > 200.0, "{ttfts:?}");
}

#[test]
fn moe_reads_only_active_experts_and_data_parallel_replicas_share_the_load() {
    let _serial = serial();
    let ds = dry_run(&["--model", "deepseek-v3", "--hardware", "h200", "--tp", "8"]);
    let active = ds["active_weight_bytes_per_token"].as_f64().unwrap();
    let total = ds["weight_bytes"].as_f64().unwrap();
    assert!(active < total / 10.0, "{ds}");

    let sim = start(&args(&["--gpus", "2"]));
    for _ in 0..4 {
        assert_eq!(
            post(sim.port, "/v1/completions", &completion_body(4, 3, false)).status,
            200
        );
    }
    let (_, metrics) = get(sim.port, "/metrics");
    for engine in ["0", "1"] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("vllm:generation_tokens_total{")
                    && l.contains(&format!("engine=\"{engine}\""))
            })
            .unwrap_or_else(|| panic!("engine {engine} missing"));
        assert!(line.ends_with(" 6"), "{line}");
    }
}

#[test]
fn model_and_hardware_cards_from_json_files() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.json");
    std::fs::write(
        &model,
        r#"{"name":"tiny-1b","layers":16,"hidden":2048,"heads":32,"kv_heads":8,"head_dim":64,"params":1.0e9,"weight_format":"bf16"}"#,
    )
    .unwrap();
    let hw = dir.path().join("gpu.json");
    std::fs::write(
        &hw,
        r#"{"name":"my-gpu","mem_bw_gbps":1000.0,"bf16_tflops":100.0,"mem_bytes":24000000000,"gpus":4,"interconnect":{"name":"pcie4","kind":"pcie","levels":[{"name":"host","gpus":4,"hop_us":1.0,"busbw_gbps":24.0}]}}"#,
    )
    .unwrap();
    let plan = dry_run(&[
        "--model-card",
        model.to_str().unwrap(),
        "--hardware-file",
        hw.to_str().unwrap(),
        "--step-overhead",
        "0s",
        "--dry-run-context",
        "0",
    ]);
    assert_eq!(plan["model"], "tiny-1b");
    assert_eq!(plan["hardware"], "my-gpu");
    // 2 GB of weights over 1 TB/s: 2 ms per step, 500 tok/s.
    let tok_s = plan["single_stream_tok_s"].as_f64().unwrap();
    assert!((tok_s - 500.0).abs() < 1.0, "{plan}");
    // A bad card is a usage error naming the file.
    std::fs::write(&model, "{}").unwrap();
    let out = std::process::Command::new(testkit::bin("srv-sim"))
        .args(["--dry-run", "--model-card", model.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("srv-sim: error: --model: ") && err.contains("tiny.json"),
        "{err}"
    );
}
