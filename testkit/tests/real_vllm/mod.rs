//! The real vLLM the vllm*.rs tests start, and how they read it: its CPU build through
//! srv-launch's preset, one engine at a time, every run bounded, its process tree and metrics.

// Each includer uses a part of it.
#![allow(dead_code)]

use serde_json::Value;
use servbench::procs::LAUNCH_ID_VAR;
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use testkit::of_kind;
use testkit::{Guard, bin_dir, cmd, json_lines, kill_records, matched_pids, setup_env};
// Each includer uses a part of it (as with dead_code above).
#[allow(unused_imports)]
pub use testkit::{http, json_body};

/// The engine's own flags in every launch: a short context keeps the KV cache and warm-up small.
pub const ENGINE_ARGS: &[&str] = &["--max-model-len", "1024"];
/// How long a whole launch-load-kill pipeline may take before the test calls it hung.
pub const PIPELINE_LIMIT: Duration = Duration::from_secs(15 * 60);

pub static ENGINE: Mutex<()> = Mutex::new(());

/// Serializes the tests that start an engine (a failed test must not block the others).
pub fn one_engine_at_a_time() -> MutexGuard<'static, ()> {
    ENGINE.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn model() -> String {
    setup_env("SERVBENCH_TINY_HF", "vllm")
}

/// PATH with the workspace's binaries and the setup's `vllm` command first.
pub fn path_env() -> String {
    format!(
        "{}:{}:{}",
        bin_dir().display(),
        setup_env("SERVBENCH_VLLM_BIN", "vllm"),
        std::env::var("PATH").unwrap_or_default()
    )
}

pub fn tool(name: &str) -> Command {
    let mut c = cmd(name);
    c.env("PATH", path_env());
    c
}

/// Runs `script` under `sh -c` as a user would, stdout and stderr to files in `dir`; a run
/// still going after `limit` is killed (its process group) and fails the test as hung.
pub fn run_bounded(script: &str, dir: &Path, limit: Duration) -> Output {
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

/// What a whole launch-load-kill-summarize pipeline left ([`pipeline`]). Holds the engine
/// lock and the launch's [`Leftovers`] until dropped.
pub struct Pipeline {
    /// The server record srv-launch wrote (teed before the load: srv-kill consumes it).
    pub server: Value,
    /// Every record that reached summarize.
    pub records: Vec<Value>,
    /// summarize's table.
    pub table: String,
    pub stderr: String,
    // Dropped in this order: the launch's leftovers ended, its files removed, the lock freed.
    _leftovers: Leftovers,
    _dir: tempfile::TempDir,
    _one: MutexGuard<'static, ()>,
}

/// `srv-launch vllm LAUNCH --model M -- ENGINE_ARGS | tee server | LOAD | srv-kill | tee records
/// | summarize`, as a user types it, one engine at a time and within [`PIPELINE_LIMIT`]; it
/// must succeed.
pub fn pipeline(launch: &str, load: &str) -> Pipeline {
    let one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let server = dir.path().join("server.jsonl");
    let records = dir.path().join("records.jsonl");
    let leftovers = Leftovers(server.clone());
    let script = format!(
        "srv-launch vllm {launch} --model {model} -- {args} | tee {server} | {load} \
         | srv-kill | tee {records} | summarize",
        model = model(),
        args = ENGINE_ARGS.join(" "),
        server = server.display(),
        records = records.display(),
    );
    let out = run_bounded(&script, dir.path(), PIPELINE_LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    Pipeline {
        server: json_lines(&std::fs::read(&server).unwrap())[0].clone(),
        records: json_lines(&std::fs::read(&records).unwrap()),
        table: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
        _leftovers: leftovers,
        _dir: dir,
        _one: one,
    }
}

/// Ends whatever a test's launch left, pass or fail: srv-kill on the server record teed to
/// `file` (the launch id there finds workers that outlived their parent).
pub struct Leftovers(pub PathBuf);

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

/// A live process: pid, parent, command line (a title set by setproctitle shows here), and
/// whether its environment carries `marker`.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub cmdline: String,
    pub marked: bool,
}

pub fn processes(marker: &str) -> Vec<Proc> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Some(stat) = testkit::proc_stat(pid) else {
            continue;
        };
        if matches!(stat.state.as_str(), "Z" | "X") {
            continue;
        }
        let ppid = stat.ppid;
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
pub fn tree(root: u32, marker: &str) -> Vec<Proc> {
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
pub fn of_launch(server: &Value) -> Vec<Proc> {
    let marker = launch_marker(server);
    processes(&marker)
        .into_iter()
        .filter(|p| p.marked)
        .collect()
}

pub fn launch_marker(server: &Value) -> String {
    format!("{LAUNCH_ID_VAR}={}", server["launch_id"].as_str().unwrap())
}

/// The value of the first sample of `name` in a Prometheus text page (0 when absent).
pub fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

pub fn port_free(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_err()
}

pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Checks loadgen's records of one run against the real engine: every request succeeded, its
/// prompt exactly on target as vLLM counts it, exactly `max_tokens` tokens (from usage), ITL
/// one gap per chunk, TPOT per token; each summary agrees with its requests.
pub fn check_exact_run(records: &[Value], max_tokens: u64) {
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
pub fn launch(dir: &Path, port: u16, engine_args: &[&str]) -> (Value, String) {
    launch_model(dir, port, &model(), engine_args)
}

/// [`launch`] of `model`.
pub fn launch_model(dir: &Path, port: u16, model: &str, engine_args: &[&str]) -> (Value, String) {
    let log = dir.join("vllm.log");
    let out = tool("srv-launch")
        .args(["vllm", "--model", model, "--port", &port.to_string()])
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

/// loadgen against the engine, which must exit 0 having met every prompt length it aimed at.
pub fn loadgen_exact(url: &str, args: &[&str]) -> Vec<Value> {
    let out = testkit::call("loadgen")
        .env("PATH", path_env())
        .url(url)
        .args(args)
        .run_ok();
    let stderr = out.err();
    assert!(
        !stderr.contains("closest the server counted"),
        "loadgen {args:?} missed a prompt length: {stderr}"
    );
    out.values()
}

pub fn srv_kill(args: &[&str], stdin: Option<&Value>) -> (Option<i32>, Vec<Value>, String) {
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

pub fn sorted_pids(kill: &Value) -> Vec<u32> {
    let mut p = matched_pids(kill);
    p.sort_unstable();
    p
}
