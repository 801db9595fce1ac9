//! A real vLLM: its CPU build (scripts/setup/vllm.sh) serving a tiny random-weights Llama with
//! a tokenizer of its own. srv-launch's `vllm` preset as users run it, loadgen's measurements on
//! the real engine (exact prompt lengths through `/tokenize`, forced output lengths, usage in
//! every chunk, several tokens per chunk), srv-kill of the whole tree (API server, EngineCore,
//! Worker), the engine dying mid-run, and the README's pipelines.
//!
//! One engine at a time (each takes a core for a minute or more to start on a 2-core machine),
//! a small KV cache (the wrapper sets VLLM_CPU_KVCACHE_SPACE=1) and short lengths. Every step
//! is bounded in time; assertions are about behaviour, never speed.

use serde_json::Value;
use servbench::engines;
use servbench::procs::LAUNCH_ID_VAR;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use testkit::of_kind;
use testkit::{
    Guard, bin_dir, cmd, free_port, json_lines, kill_records, matched_pids, setup_env, wait_gone,
};

/// The engine's own flags in every launch: a short context keeps the KV cache and warm-up small.
const ENGINE_ARGS: &[&str] = &["--max-model-len", "1024"];
/// How long a whole launch-load-kill pipeline may take before the test calls it hung.
const PIPELINE_LIMIT: Duration = Duration::from_secs(15 * 60);

static ENGINE: Mutex<()> = Mutex::new(());

/// Serializes the tests that start an engine (a failed test must not block the others).
fn one_engine_at_a_time() -> MutexGuard<'static, ()> {
    ENGINE.lock().unwrap_or_else(|e| e.into_inner())
}

fn model() -> String {
    setup_env("SERVBENCH_TINY_HF", "vllm")
}

/// PATH with the workspace's binaries and the setup's `vllm` command first.
fn path_env() -> String {
    format!(
        "{}:{}:{}",
        bin_dir().display(),
        setup_env("SERVBENCH_VLLM_BIN", "vllm"),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn tool(name: &str) -> Command {
    let mut c = cmd(name);
    c.env("PATH", path_env());
    c
}

/// Runs `script` under `sh -c` as a user would, stdout and stderr to files in `dir`; a run
/// still going after `limit` is killed (its process group) and fails the test as hung.
fn run_bounded(script: &str, dir: &Path, limit: Duration) -> Output {
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(script)
        .env("PATH", path_env())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut g = Guard::spawn(c);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = g.child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let stderr = std::fs::read_to_string(&err).unwrap_or_default();
            drop(g);
            panic!("hung: `{script}` still running after {limit:?}; stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    Output {
        status,
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read(&err).unwrap(),
    }
}

/// Ends whatever a test's launch left, pass or fail: srv-kill on the server record teed to
/// `file` (the launch id there finds workers that outlived their parent).
struct Leftovers(PathBuf);

impl Drop for Leftovers {
    fn drop(&mut self) {
        if self.0.exists() {
            let _ = tool("srv-kill")
                .args(["--missing-ok", "--grace", "5s", "--from"])
                .arg(&self.0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// One HTTP/1.1 exchange with `Connection: close`: status and body (dechunked crudely: the
/// callers look for JSON objects or whole metric lines in it).
fn http(url: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    let hostport = url.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(hostport).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, rest) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, rest.to_string())
}

fn json_body(body: &str) -> Value {
    serde_json::from_str(&body[body.find('{').unwrap()..=body.rfind('}').unwrap()]).unwrap()
}

/// A live process: pid, parent, command line (a title set by setproctitle shows here), and
/// whether its environment carries `marker`.
#[derive(Debug, Clone)]
struct Proc {
    pid: u32,
    ppid: u32,
    cmdline: String,
    marked: bool,
}

fn processes(marker: &str) -> Vec<Proc> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
            continue;
        }
        let ppid = fields.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .replace('\0', " ")
                    .trim()
                    .to_string()
            })
            .unwrap_or_default();
        let marked = std::fs::read(format!("/proc/{pid}/environ"))
            .map(|env| env.split(|&b| b == 0).any(|e| e == marker.as_bytes()))
            .unwrap_or(false);
        out.push(Proc {
            pid,
            ppid,
            cmdline,
            marked,
        });
    }
    out
}

/// `root` and every live process below it.
fn tree(root: u32, marker: &str) -> Vec<Proc> {
    let all = processes(marker);
    let mut keep: Vec<Proc> = all.iter().filter(|p| p.pid == root).cloned().collect();
    let mut i = 0;
    while i < keep.len() {
        let parent = keep[i].pid;
        keep.extend(all.iter().filter(|p| p.ppid == parent).cloned());
        i += 1;
    }
    keep
}

/// Live processes that carry a launch's id in their environment.
fn of_launch(server: &Value) -> Vec<Proc> {
    let marker = launch_marker(server);
    processes(&marker)
        .into_iter()
        .filter(|p| p.marked)
        .collect()
}

fn launch_marker(server: &Value) -> String {
    format!("{LAUNCH_ID_VAR}={}", server["launch_id"].as_str().unwrap())
}

/// The value of the first sample of `name` in a Prometheus text page (0 when absent).
fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn port_free(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_err()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Checks loadgen's records of one run against the real engine: every request succeeded, its
/// prompt exactly on target as vLLM counts it, exactly `max_tokens` tokens (from usage), ITL
/// one gap per chunk, TPOT per token; each summary agrees with its requests.
fn check_exact_run(records: &[Value], max_tokens: u64) {
    let requests = of_kind(records, "request");
    let summaries = of_kind(records, "summary");
    assert!(!summaries.is_empty(), "no summary");
    for r in &requests {
        assert!(r.get("error").is_none(), "{r}");
        assert_eq!(r["prompt_tokens"], r["prompt_tokens_target"], "{r}");
        assert_eq!(u(&r["output_tokens"]), max_tokens, "{r}");
        assert_eq!(r["output_tokens_source"], "usage", "{r}");
        let chunks = u(&r["chunks"]);
        assert!((1..=max_tokens).contains(&chunks), "{r}");
        let gaps = r["itl_ms"].as_array().map_or(0, Vec::len) as u64;
        assert_eq!(gaps, chunks - 1, "one ITL gap per chunk: {r}");
        // Chunks disagree with usage exactly when a chunk carried more than one token.
        match r.get("output_tokens_chunks") {
            Some(c) => assert_eq!(u(c), chunks, "{r}"),
            None => assert_eq!(chunks, max_tokens, "{r}"),
        }
        let (ttft, e2e, tpot) = (
            r["ttft_ms"].as_f64().unwrap(),
            r["e2e_ms"].as_f64().unwrap(),
            r["tpot_ms"].as_f64().unwrap(),
        );
        let per_token = (e2e - ttft) / (max_tokens - 1) as f64;
        assert!((tpot - per_token).abs() < 1e-6 * per_token.max(1.0), "{r}");
    }
    for s in &summaries {
        let n = u(&s["requests"]);
        let mine: Vec<_> = requests
            .iter()
            .filter(|r| r["point"] == s["point"])
            .collect();
        assert_eq!(mine.len() as u64, n, "{s}");
        assert_eq!(u(&s["ok"]), n, "{s}");
        assert_eq!(u(&s["errors"]), 0, "{s}");
        assert_eq!(u(&s["prompt_len_targeted"]), n, "{s}");
        assert_eq!(u(&s["prompt_len_exact"]), n, "{s}");
        assert_eq!(u(&s["output_len_mismatch"]), 0, "{s}");
        assert_eq!(u(&s["output_tokens"]), n * max_tokens, "{s}");
        let chunks: u64 = mine.iter().map(|r| u(&r["chunks"])).sum();
        let tpc = s["tokens_per_chunk"].as_f64().unwrap();
        assert!(
            (tpc - (n * max_tokens) as f64 / chunks as f64).abs() < 1e-9,
            "{s}"
        );
        assert_eq!(
            u(&s["itl_ms"]["n"]),
            chunks - n,
            "ITL counted per chunk: {s}"
        );
        assert_eq!(u(&s["tpot_ms"]["n"]), n, "{s}");
    }
}

/// srv-launch vllm as users run it: its `server` record, or the test fails with its stderr.
fn launch(dir: &Path, port: u16, engine_args: &[&str]) -> (Value, String) {
    let log = dir.join("vllm.log");
    let out = tool("srv-launch")
        .args(["vllm", "--model", &model(), "--port", &port.to_string()])
        .arg("--log")
        .arg(&log)
        .args(["--timeout", "10m", "--label", "run=vllm", "--"])
        .args(engine_args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        std::fs::write(dir.join("server.jsonl"), &out.stdout).unwrap();
    }
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let records = json_lines(&out.stdout);
    assert_eq!(records.len(), 1, "{stderr}");
    (records[0].clone(), stderr)
}

fn loadgen(url: &str, args: &[&str]) -> Vec<Value> {
    let out = tool("loadgen")
        .args(["--url", url])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "loadgen {args:?}: {stderr}");
    assert!(
        !stderr.contains("closest the server counted"),
        "loadgen {args:?} missed a prompt length: {stderr}"
    );
    json_lines(&out.stdout)
}

fn srv_kill(args: &[&str], stdin: Option<&Value>) -> (Option<i32>, Vec<Value>, String) {
    let mut c = tool("srv-kill");
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    if let Some(rec) = stdin {
        writeln!(child.stdin.as_mut().unwrap(), "{rec}").unwrap();
        drop(child.stdin.take());
    }
    let out = child.wait_with_output().unwrap();
    // Only the kill records: srv-kill passes the server record it was given on before them.
    (
        out.status.code(),
        kill_records(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sorted_pids(kill: &Value) -> Vec<u32> {
    let mut p = matched_pids(kill);
    p.sort_unstable();
    p
}

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
            "vllm serve {model} --host 127.0.0.1 --port {port} {}",
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
    let completions = loadgen(
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
        assert_eq!(s["api"], "completions");
        assert_eq!(s["model"], model.as_str());
    }

    // Chat: the prompt counted with the chat template, as the server applies it.
    let chat = loadgen(
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
    assert_eq!(of_kind(&chat, "summary")[0]["api"], "chat");

    // Open loop: a rate instead of a concurrency.
    let open = loadgen(
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
fn vllm_pipeline_launch_sweep_builtin_prompts_kill_summarize_leaves_nothing_running() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let server = dir.path().join("server.jsonl");
    let records = dir.path().join("records.jsonl");
    let _leftovers = Leftovers(server.clone());
    // The hand run of the issue, as a user types it: launch, sweep C=1,4, the README's "is the
    // server still healthy?" check on the built-in prompts, kill, summarize.
    let script = format!(
        "srv-launch vllm --model {model} -- {args} | tee {server} \
         | loadgen -c 1,4 -n 8 --input-len 128 --max-tokens 16 \
         | loadgen --prompts builtin -n 5 \
         | srv-kill | tee {records} | summarize",
        model = model(),
        args = ENGINE_ARGS.join(" "),
        server = server.display(),
        records = records.display(),
    );
    let out = run_bounded(&script, dir.path(), PIPELINE_LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");

    // srv-kill consumes the server record; the tee before loadgen kept it.
    let r = json_lines(&std::fs::read(&server).unwrap())[0].clone();
    let records = json_lines(&std::fs::read(&records).unwrap());
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
    let builtin: Vec<&Value> = of_kind(&records, "request")
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
    let kill = of_kind(&records, "kill")[0];
    assert_eq!(kill["ok"], true, "{kill}");
    assert_eq!(kill["port_free"], true, "{kill}");
    assert!(
        matched_pids(kill).len() >= 3,
        "API server, EngineCore, Worker: {kill}"
    );
    assert!(wait_gone(&matched_pids(kill), Duration::from_secs(10)));
    assert!(of_launch(&r).is_empty(), "{:?}", of_launch(&r));
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
    let in_flight: Vec<&&&Value> = failed.iter().filter(|x| x["ttft_ms"].is_number()).collect();
    assert!(
        !in_flight.is_empty(),
        "no request was streaming: {} failed, the first {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    for x in &in_flight {
        let class = x["error"]["class"].as_str().unwrap();
        assert!(matches!(class, "protocol" | "reset"), "{x}");
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

/// loadgen `--flush-cache` and `--prefix-groups` on the real vLLM (its reset endpoint is served
/// with VLLM_SERVER_DEV_MODE=1): the cache is emptied before each point, and vLLM's own prefix
/// counters agree with the hit rate loadgen states. The prefixes are 256 tokens, whole blocks of
/// any usual block size: the CPU build caches in larger blocks than the GPU default of 16 (a
/// 64-token prefix hit nothing there).
#[test]
fn flush_cache_and_prefix_groups_on_the_real_vllm() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers(dir.path().join("server.jsonl"));
    let port = free_port();
    let out = tool("srv-launch")
        .args(["vllm", "--model", &model(), "--port", &port.to_string()])
        .args(["--env", "VLLM_SERVER_DEV_MODE=1", "--timeout", "10m", "--"])
        .args(ENGINE_ARGS)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(dir.path().join("server.jsonl"), &out.stdout).unwrap();
    let r = json_lines(&out.stdout)[0].clone();
    let url = format!("http://127.0.0.1:{port}");
    let counters = || {
        let (_, page) = http(&url, "GET", "/metrics", None);
        (
            metric(&page, "vllm:prefix_cache_queries_total"),
            metric(&page, "vllm:prefix_cache_hits_total"),
        )
    };
    let before = counters();
    let records = loadgen(
        &url,
        &[
            "--engine",
            "vllm",
            "--flush-cache",
            "--prefix-groups",
            "2",
            "--prefix-len",
            "256",
            "--input-len",
            "384",
            "--max-tokens",
            "2",
            "-c",
            "1,2",
            "-n",
            "6",
        ],
    );
    let after = counters();
    let summaries = of_kind(&records, "summary");
    assert_eq!(summaries.len(), 2);
    let mut stated = 0.0;
    for s in &summaries {
        assert_eq!(s["cache_flushed"], true, "{s}");
        stated += s["prefix_hit_rate_expected"].as_f64().unwrap() / 2.0;
    }
    let measured = (after.1 - before.1) / (after.0 - before.0);
    assert!(
        (measured - stated).abs() < 0.05,
        "vLLM counted a hit rate of {measured:.3}, loadgen stated {stated:.3}"
    );
    let (code, _, err) = srv_kill(&[], Some(&r));
    assert_eq!(code, Some(0), "{err}");
}

/// A 3-turn conversation (`--turns 3`) on the real vLLM, chat and completions: each turn
/// resends the history, vLLM counts it (prompt tokens grow by the reply and a new message) and
/// reports its prefix cache serving the earlier turns (`--enable-prompt-tokens-details`:
/// `usage.prompt_tokens_details.cached_tokens`; its CPU build caches whole 128-token blocks).
#[test]
fn three_turn_conversation_on_the_real_vllm_resends_the_history() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers(dir.path().join("server.jsonl"));
    let port = free_port();
    let mut args = ENGINE_ARGS.to_vec();
    args.push("--enable-prompt-tokens-details");
    let (r, _) = launch(dir.path(), port, &args);
    let url = format!("http://127.0.0.1:{port}");
    let hits = || {
        let (_, page) = http(&url, "GET", "/metrics", None);
        metric(&page, "vllm:prefix_cache_hits_total")
    };
    for api in ["chat", "completions"] {
        let before = hits();
        let records = loadgen(
            &url,
            &[
                "--api",
                api,
                "-c",
                "2",
                "-n",
                "2",
                "--turns",
                "3",
                "--input-len",
                "200",
                "--max-tokens",
                "4",
            ],
        );
        testkit::check_conversation(&records, 2);
        // Turn 1 of each session is exactly on target as vLLM counts it.
        let s = of_kind(&records, "summary")[0];
        assert_eq!(u(&s["prompt_len_exact"]), 2, "{api}: {s}");
        assert!(hits() > before, "{api}: vLLM's prefix cache counted no hit");
    }
    let (code, _, err) = srv_kill(&[], Some(&r));
    assert_eq!(code, Some(0), "{err}");
}
