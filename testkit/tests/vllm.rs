//! A real vLLM: its CPU build (scripts/setup/vllm.sh) serving a tiny random-weights Llama with
//! a tokenizer of its own. srv-launch's `vllm` preset as users run it, loadgen's measurements on
//! the real engine (exact prompt lengths through `/tokenize`, forced output lengths, usage in
//! every chunk, several tokens per chunk), srv-kill of the whole tree (API server, EngineCore,
//! Worker); the engine dying mid-run and the README's pipelines are in vllm_pipeline.rs, the
//! workloads (prefix cache, conversations) in vllm_workloads.rs, the engine's setup in
//! real_vllm/.
//!
//! One engine at a time (each takes a core for a minute or more to start on a 2-core machine),
//! a small KV cache (the wrapper sets VLLM_CPU_KVCACHE_SPACE=1) and short lengths. Every step
//! is bounded in time; assertions are about behaviour, never speed.

mod real_vllm;

use real_vllm::*;
use servbench::engines;
use std::process::{Command, Stdio};
use std::time::Duration;
use testkit::of_kind;
use testkit::{free_port, wait_gone};

#[test]
fn vllm_preset_launches_serves_loadgen_exactly_and_srv_kill_ends_the_whole_tree() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers(dir.path().join("server.jsonl"));
    let preset = engines::engine("vllm").unwrap();
    let model = model();
    let port = free_port();
    // The engine sends four tokens per chunk (after the first alone): multi-token chunks on
    // purpose, so the counting of tokens, chunks, ITL and TPOT is checked exactly.
    let mut engine_args = ENGINE_ARGS.to_vec();
    engine_args.extend(["--stream-interval", "4"]);
    let (r, stderr) = launch(dir.path(), port, &engine_args);

    // The record.
    let url = format!("http://127.0.0.1:{port}");
    assert_eq!(r["kind"], "server");
    assert_eq!(r["engine"], "vllm");
    assert_eq!(r["model"], model.as_str());
    assert_eq!(
        r["served_model"],
        model.as_str(),
        "/v1/models lists the path"
    );
    assert_eq!(r["host"], "localhost");
    assert_eq!(u(&r["port"]), u64::from(port));
    assert_eq!(r["url"], url.as_str());
    assert_eq!(
        r["command"],
        format!(
            // Per-request metrics are on in every vLLM launch (the flag's price is within the
            // noise: srv-launch's README).
            "vllm serve {model} --host 127.0.0.1 --port {port} --enable-per-request-metrics {}",
            engine_args.join(" ")
        )
        .as_str()
    );
    for (k, v) in [
        ("engine", "vllm"),
        ("model", model.as_str()),
        ("tp", "1"),
        ("pp", "1"),
        ("run", "vllm"),
    ] {
        assert_eq!(r["labels"][k], v, "{r}");
    }
    let pid = u(&r["pid"]) as u32;
    assert_eq!(
        u(&r["pgid"]),
        u64::from(pid),
        "the server leads its own group"
    );
    assert!(u(&r["start_ticks"]) > 0);
    assert!(r["ready_s"].as_f64().unwrap() > 0.0);
    assert!(stderr.contains(&format!("vllm ready at {url}")), "{stderr}");

    // Ready means ready: /health, /v1/models, and the log line the preset names came first.
    assert_eq!(http(&url, "GET", "/health", None).0, 200);
    let (status, body) = http(&url, "GET", "/v1/models", None);
    assert_eq!(status, 200);
    assert_eq!(json_body(&body)["data"][0]["id"], model.as_str());
    let log = std::fs::read_to_string(r["log"].as_str().unwrap()).unwrap();
    assert!(
        log.contains(preset.ready_line.unwrap()),
        "the log lacks the preset's ready line: {}",
        &log[log.len().saturating_sub(2000)..]
    );

    // The startup in phases, from the CPU build's own lines: the weights' and the engine
    // init's durations as it printed them; its compile warm-up prints none, and it captures
    // no graphs.
    let phases = testkit::startup::startup_phases(
        &r,
        &[
            "load_start",
            "weights",
            "compile",
            "kv_cache",
            "engine_init",
            "listening",
            "ready",
        ],
    );
    let took = |name: &str| phases.iter().find(|p| p.0 == name).and_then(|p| p.2);
    assert!(
        took("weights").is_some() && took("engine_init").is_some(),
        "{phases:?}"
    );
    assert_eq!(took("compile"), None, "{phases:?}");

    // The process tree: the API server, EngineCore and its Worker, each titled as the preset
    // says, all carrying the launch id srv-kill looks for.
    let marker = launch_marker(&r);
    let procs = tree(pid, &marker);
    for title in preset.worker_titles {
        assert!(
            procs.iter().any(|p| p.cmdline.starts_with(title)),
            "no process titled {title} under pid {pid}: {procs:?}"
        );
    }
    assert!(procs.iter().all(|p| p.marked), "{procs:?}");
    let mut tree_pids: Vec<u32> = procs.iter().map(|p| p.pid).collect();
    tree_pids.sort_unstable();

    // loadgen, completions: a concurrency sweep over two prompt lengths, every prompt exactly
    // on target (aligned through vLLM's /tokenize), every output exactly 9 tokens.
    let completions = loadgen_exact(
        &url,
        &[
            "-c",
            "1,4",
            "-n",
            "8",
            "--input-len",
            "40,200",
            "--max-tokens",
            "9",
        ],
    );
    assert_eq!(of_kind(&completions, "summary").len(), 4);
    check_exact_run(&completions, 9);
    // With --stream-interval 4, 9 tokens come as 1 + 4 + 4: three chunks, two gaps.
    for r in of_kind(&completions, "request") {
        assert_eq!(u(&r["chunks"]), 3, "{r}");
        assert_eq!(u(&r["output_tokens_chunks"]), 3, "{r}");
    }
    for s in of_kind(&completions, "summary") {
        assert_eq!(s["tokens_per_chunk"], 3.0, "{s}");
        assert_eq!(s["workload"]["api"], "completions");
        assert_eq!(s["model"], model.as_str());
    }

    // Chat: the prompt counted with the chat template, as the server applies it.
    let chat = loadgen_exact(
        &url,
        &[
            "--api",
            "chat",
            "-c",
            "2",
            "-n",
            "4",
            "--input-len",
            "64",
            "--max-tokens",
            "6",
        ],
    );
    check_exact_run(&chat, 6);
    assert_eq!(of_kind(&chat, "summary")[0]["workload"]["api"], "chat");

    // Open loop: a rate instead of a concurrency.
    let open = loadgen_exact(
        &url,
        &[
            "-r",
            "4",
            "--arrival",
            "constant",
            "-n",
            "6",
            "--input-len",
            "32",
            "--max-tokens",
            "5",
        ],
    );
    check_exact_run(&open, 5);
    let s = of_kind(&open, "summary")[0];
    assert_eq!(s["point"]["rate_rps"], 4.0, "{s}");
    assert_eq!(u(&s["requests"]), 6, "{s}");

    // The lengths came from the engine's own count: its access log shows loadgen's /tokenize
    // calls (the fallback, probe completions, would not be exact with every tokenizer).
    let log = std::fs::read_to_string(r["log"].as_str().unwrap()).unwrap();
    assert!(
        log.contains("\"POST /tokenize HTTP/1.1\" 200"),
        "no /tokenize in the access log"
    );

    // The tokenizer keeps distinct prompts distinct: vLLM's prefix cache (on by default) found
    // next to nothing to reuse. (A vocabulary that mapped the words to one [UNK] id made every
    // prompt the same token sequence, and most prompt tokens cache hits.)
    let (_, metrics) = http(&url, "GET", "/metrics", None);
    let (hits, queries) = (
        metric(&metrics, "vllm:prefix_cache_hits_total"),
        metric(&metrics, "vllm:prefix_cache_queries_total"),
    );
    assert!(
        queries > 0.0 && hits <= 0.05 * queries,
        "prefix cache hits {hits} of {queries}"
    );

    // srv-kill finds the same tree by port and by command line, and signals nothing in a dry run.
    let (code, by_port, err) = srv_kill(&["--port", &port.to_string(), "--dry-run"], None);
    assert_eq!(code, Some(0), "{err}");
    let (code, by_match, err) = srv_kill(
        &[&format!("--match=vllm.* --port {port}( |$)"), "--dry-run"],
        None,
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(sorted_pids(&by_port[0]), tree_pids, "{}", by_port[0]);
    assert_eq!(sorted_pids(&by_match[0]), tree_pids, "{}", by_match[0]);
    assert_eq!(by_port[0]["dry_run"], true);
    assert!(
        procs.iter().all(|p| testkit::alive(p.pid)),
        "a dry run killed"
    );

    // srv-kill from the record: every process gone, the port free.
    let (code, kills, err) = srv_kill(&["--grace", "30s"], Some(&r));
    assert_eq!(code, Some(0), "{err}");
    let k = &kills[0];
    assert_eq!(k["ok"], true, "{k}");
    assert_eq!(k["port_free"], true, "{k}");
    assert_eq!(k["survivors"].as_array().unwrap().len(), 0, "{k}");
    assert_eq!(sorted_pids(k), tree_pids, "{k}");
    let commands: Vec<&str> = k["matched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["command"].as_str().unwrap())
        .collect();
    for title in preset.worker_titles {
        assert!(commands.iter().any(|c| c.starts_with(title)), "{k}");
    }
    assert!(wait_gone(&tree_pids, Duration::from_secs(10)), "{k}");
    assert!(of_launch(&r).is_empty(), "{:?}", of_launch(&r));
    assert!(port_free(port));

    // A second kill of the same record finds nothing, and says so.
    let (code, kills, err) = srv_kill(&[], Some(&r));
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(kills[0]["ok"], false, "{}", kills[0]);
    assert_eq!(kills[0]["error"], "nothing matched", "{}", kills[0]);
    assert!(err.contains("nothing matched"), "{err}");
}

#[test]
fn vllm_launch_with_a_bad_engine_flag_exits_1_with_the_log_tail() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("bad.log");
    let out = tool("srv-launch")
        .args(["vllm", "--model", &model(), "--timeout", "5m", "--log"])
        .arg(&log)
        .args(["--", "--no-such-flag"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "no record for a server that never served"
    );
    assert!(stderr.contains("vllm exited during startup"), "{stderr}");
    assert!(stderr.contains("--- last "), "the log's tail: {stderr}");
    assert!(
        stderr.contains("unrecognized arguments: --no-such-flag"),
        "vLLM's own complaint, from the log: {stderr}"
    );
}

#[test]
fn vllm_preset_flags_are_flags_of_the_real_engine() {
    let _one = one_engine_at_a_time();
    // Every flag the preset (and the README's vLLM lines) give `vllm serve` is in its --help.
    let preset = engines::engine("vllm").unwrap();
    let out = Command::new("vllm")
        .args(["serve", "--help"])
        .env("PATH", path_env())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(preset.program, ["vllm", "serve"]);
    assert_eq!(preset.model, engines::ModelArg::Positional);
    assert!(help.contains("[model_tag]"), "positional model: {help}");
    let flags = [
        Some(preset.host_flag),
        Some(preset.port_flag),
        preset.tp_flag,
        preset.pp_flag,
        Some("--max-num-seqs"),
        Some("--max-model-len"),
    ];
    for flag in flags.into_iter().flatten() {
        assert!(help.contains(&format!("[{flag} ")), "{flag} not in: {help}");
    }
}
