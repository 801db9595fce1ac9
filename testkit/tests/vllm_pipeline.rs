//! A real vLLM (see vllm.rs) in whole pipelines: the README's launch, sweep, kill and summarize
//! leaving nothing running, and the EngineCore killed mid-run failing the requests in flight and
//! stopping the point.

mod real_vllm;

use real_vllm::*;
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};
use testkit::of_kind;
use testkit::{Guard, free_port, json_lines, matched_pids, wait_gone};

#[test]
fn vllm_pipeline_launch_sweep_builtin_prompts_kill_summarize_leaves_nothing_running() {
    // The hand run of the issue, as a user types it: launch, sweep C=1,4, the README's "is the
    // server still healthy?" check on the built-in prompts, kill, summarize.
    let run = pipeline(
        "",
        "loadgen -c 1,4 -n 8 --input-len 128 --max-tokens 16 | loadgen --prompts builtin -n 5",
    );
    let (table, records) = (&run.table, &run.records);

    // srv-kill consumes the server record; the tee before loadgen kept it.
    let r = &run.server;
    let sweep: Vec<Value> = records
        .iter()
        .filter(|x| x["kind"] != "summary" || x["point"]["input_len"] == 128)
        .filter(|x| x["kind"] != "request" || x["prompt_tokens_target"] == 128)
        .cloned()
        .collect();
    assert_eq!(of_kind(&sweep, "summary").len(), 2);
    check_exact_run(&sweep, 16);
    // The server's side of each point, from vLLM's own /metrics (loadgen scrapes it by
    // default): its figures under our names, and its token counters agree with the client's
    // within 1% (exactly, on this engine).
    for s in of_kind(&sweep, "summary") {
        let server = &s["server"];
        assert_eq!(server["engine"], "vllm", "{s}");
        for (theirs, ours) in [
            ("generation_tokens", "output_tokens"),
            ("prompt_tokens", "prompt_tokens"),
        ] {
            let (a, b) = (server[theirs].as_f64().unwrap(), s[ours].as_f64().unwrap());
            assert!((a - b).abs() <= 0.01 * b, "{theirs} {a} vs {ours} {b}: {s}");
        }
        assert_eq!(server["requests"], s["ok"], "{s}");
        assert_eq!(server["preemptions"], 0, "{s}");
        assert!(server["prefix_hit_rate"].is_number(), "{s}");
        for h in ["ttft_ms", "itl_ms", "e2e_ms"] {
            assert!(server[h]["mean"].as_f64().unwrap() > 0.0, "{h}: {s}");
        }
        assert_eq!(server["ttft_ms"]["n"], s["ok"], "{s}");
    }
    // The environment srv-launch recorded: vLLM's /version, and the flags it was given.
    assert!(
        !r["env"]["engine_version"].as_str().unwrap_or("").is_empty(),
        "{r}"
    );
    assert!(
        r["argv"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--max-model-len"),
        "{r}"
    );
    // The built-in prompts: each runs to its own max_tokens (forced: no early EOS).
    let builtin: Vec<&Value> = of_kind(records, "request")
        .into_iter()
        .filter(|x| x.get("prompt_tokens_target").is_none())
        .collect();
    assert_eq!(builtin.len(), 5);
    for b in &builtin {
        assert!(b.get("error").is_none(), "{b}");
        assert_eq!(b["output_tokens"], b["max_tokens"], "{b}");
    }

    // Nothing left: the kill record's processes are gone, no process carries the launch id,
    // the port is free.
    let kill = of_kind(records, "kill")[0];
    assert_eq!(kill["ok"], true, "{kill}");
    assert_eq!(kill["port_free"], true, "{kill}");
    assert!(
        matched_pids(kill).len() >= 3,
        "API server, EngineCore, Worker: {kill}"
    );
    // Gone at the moment srv-kill said so (issue 39 item 6): no thread of any of them runs.
    assert!(wait_gone(&matched_pids(kill), Duration::ZERO), "{kill}");
    assert!(of_launch(r).is_empty(), "{:?}", of_launch(r));
    assert!(port_free(u(&r["port"]) as u16));

    // The table: both sweep points at 128 prompt tokens and 16 out, and no note that prompts
    // missed their length.
    let rows = table
        .lines()
        .filter(|l| {
            l.split_whitespace().take(3).eq(["128", "16", "1"])
                || l.split_whitespace().take(3).eq(["128", "16", "4"])
        })
        .count();
    assert_eq!(rows, 2, "{table}");
    assert!(!table.contains("missed their target length"), "{table}");
    assert!(table.contains("# kills"), "{table}");
}

#[test]
fn vllm_engine_core_killed_mid_run_fails_requests_in_flight_stops_the_point_and_leaves_nothing() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let server = dir.path().join("server.jsonl");
    let status_file = dir.path().join("status");
    let _leftovers = Leftovers(server.clone());
    let port = free_port();
    // More requests than the engine could serve before it is killed: the point can only end
    // because the server went down.
    let script = format!(
        "srv-launch vllm --model {model} --port {port} -- {args} | tee {server} \
         | loadgen -c 4 -n 5000 --input-len 32 --max-tokens 900 | srv-kill --grace 10s; \
         echo \"${{PIPESTATUS[*]}}\" > {status}",
        model = model(),
        args = ENGINE_ARGS.join(" "),
        server = server.display(),
        status = status_file.display(),
    );
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(&script)
        .env("PATH", path_env())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let mut pipeline = Guard::spawn(c);
    let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();

    // Wait until the engine is generating for loadgen's requests, then kill its EngineCore.
    let start = Instant::now();
    let url = format!("http://127.0.0.1:{port}");
    let r = loop {
        assert!(
            start.elapsed() < PIPELINE_LIMIT,
            "no load started: {}",
            stderr()
        );
        assert!(
            pipeline.child.try_wait().unwrap().is_none(),
            "the pipeline ended before the engine was killed: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
        let Ok(text) = std::fs::read_to_string(&server) else {
            continue;
        };
        let Some(r) = json_lines(text.as_bytes()).pop() else {
            continue;
        };
        // A request mid-stream: one that has had its first token (the TTFT histogram counted
        // it) and has not finished (the E2E one has not). Running alone is not enough: closed-
        // loop requests start in step, and a kill between two of their batches finds every
        // running request still in prefill, with nothing streamed yet.
        // Seen twice, 300 ms apart: the engine's first token reaches the client a moment after
        // /metrics counts it, and a kill in that moment leaves no request streaming on the
        // client's side (a 900-token stream outlasts the wait by seconds).
        let streaming_now = || {
            let (_, metrics) = http(&url, "GET", "/metrics", None);
            let streaming = metric(&metrics, "vllm:time_to_first_token_seconds_count")
                - metric(&metrics, "vllm:e2e_request_latency_seconds_count");
            metric(&metrics, "vllm:num_requests_running") >= 1.0 && streaming >= 1.0
        };
        if streaming_now() {
            std::thread::sleep(Duration::from_millis(300));
            if streaming_now() {
                break r;
            }
        }
    };
    let pid = u(&r["pid"]) as u32;
    let marker = launch_marker(&r);
    let procs = tree(pid, &marker);
    let core = procs
        .iter()
        .find(|p| p.cmdline.starts_with("VLLM::EngineCore"))
        .unwrap_or_else(|| panic!("no EngineCore under {pid}: {procs:?}"));
    // SAFETY: kill(2) on a process this test's pipeline started.
    assert_eq!(unsafe { libc::kill(core.pid as i32, libc::SIGKILL) }, 0);

    // Nothing hangs: loadgen's point ends and srv-kill runs.
    let limit = Duration::from_secs(5 * 60);
    let killed_at = Instant::now();
    while pipeline.child.try_wait().unwrap().is_none() {
        assert!(
            killed_at.elapsed() < limit,
            "hung after the EngineCore died: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let stdout = std::fs::read(&out_path).unwrap();
    let records = json_lines(&stdout);
    let stderr = stderr();
    // Short enough to survive in a CI log's tail: the summary and the last lines of stderr.
    let shown = || {
        let summary = records.iter().find(|r| r["kind"] == "summary");
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        let tail: Vec<String> = tail
            .iter()
            .rev()
            .map(|l| l.chars().take(240).collect())
            .collect();
        format!("summary: {summary:?}\nstderr tail:\n{}", tail.join("\n"))
    };
    // srv-launch succeeded, loadgen says the point failed (exit 1), srv-kill found the tree.
    let status = std::fs::read_to_string(&status_file).unwrap();
    let codes: Vec<&str> = status.split_whitespace().collect();
    assert_eq!(codes[..3], ["0", "0", "1"], "{}", shown());

    // The point stopped because the server went down, and says so; every request it sent is
    // recorded once.
    let s = of_kind(&records, "summary")[0];
    assert_eq!(s["partial"], true, "{s}");
    assert_eq!(s["stopped_by"], "server_down", "{s}");
    assert!(
        s["stop_reason"].as_str().unwrap().contains("server down"),
        "{s}"
    );
    let requests = of_kind(&records, "request");
    assert_eq!(requests.len() as u64, u(&s["requests"]), "{}", shown());
    assert!(requests.len() < 5000, "{s}");
    let mut ids: Vec<u64> = requests.iter().map(|x| u(&x["id"])).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), requests.len(), "a request recorded twice");
    assert_eq!(u(&s["ok"]) + u(&s["errors"]), u(&s["requests"]), "{s}");

    // The requests in flight when the engine died fail as the server reported it: an error
    // event inside the open stream, or the stream cut. None is counted as a success with fewer
    // tokens; the ones sent after fail as HTTP 500 while the API server still answers, then
    // as refused connections.
    let failed: Vec<&&Value> = requests
        .iter()
        .filter(|x| x.get("error").is_some())
        .collect();
    // In flight = its stream was open (HTTP 200) when the engine died: it fails inside the
    // stream, with an error event or the stream cut. Whether its first token had reached the
    // client by then is the kill's timing (on a loaded machine the API server forwards tokens
    // late, and CI's run killed while every open stream was still empty), so it is not
    // required; a request that had tokens must fail the same way.
    let class = |x: &Value| x["error"]["class"].as_str().unwrap().to_string();
    let in_stream = failed
        .iter()
        .filter(|x| matches!(class(x).as_str(), "protocol" | "reset"))
        .count();
    assert!(
        in_stream > 0,
        "no request failed inside its open stream: {} failed, the first {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    for x in failed.iter().filter(|x| x["ttft_ms"].is_number()) {
        assert!(matches!(class(x).as_str(), "protocol" | "reset"), "{x}");
    }
    for x in &failed {
        let class = x["error"]["class"].as_str().unwrap();
        assert!(
            matches!(class, "protocol" | "reset" | "http_5xx" | "connect"),
            "{x}"
        );
    }
    assert!(u(&s["errors_by_class"]["connect"]) > 0, "{s}");
    for x in requests.iter().filter(|x| x.get("error").is_none()) {
        assert_eq!(u(&x["output_tokens"]), 900, "{x}");
    }
    // Requests that never got a prompt count (HTTP 500, refused) are no prompt-length misses,
    // and summarize names the point's end instead of blaming the tokenizer.
    let counted = requests
        .iter()
        .filter(|x| x["prompt_tokens"].is_number())
        .count();
    assert_eq!(u(&s["prompt_len_targeted"]), counted as u64, "{s}");
    assert_eq!(s["prompt_len_exact"], s["prompt_len_targeted"], "{s}");
    let table = tool("summarize").arg(&out_path).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(!table.contains("missed their target length"), "{table}");
    assert!(table.contains("server down"), "{table}");

    // The pipeline's srv-kill leaves nothing of the launch running (the Worker outlives its
    // EngineCore, reparented), and the port free.
    let kill = of_kind(&records, "kill")[0];
    assert!(
        kill["ok"] == true || kill["error"] == "nothing matched",
        "{kill}"
    );
    let pids: Vec<u32> = procs.iter().map(|p| p.pid).collect();
    assert!(wait_gone(&pids, Duration::from_secs(10)), "{kill}");
    assert!(of_launch(&r).is_empty(), "{:?}", of_launch(&r));
    assert!(port_free(port));
}
