//! Test support shared by every integration test: locate the real binaries the workspace
//! built, run shell pipelines with them on PATH, find free loopback ports, and make sure every
//! process a test starts is ended (by pid) when the test ends, pass or fail.

pub mod collected;
pub mod nvml;
pub mod run;
pub mod servers;
pub mod smi;
pub mod stand_in;
pub mod startup;
pub mod tty;

pub use collected::Collected;
pub use run::{
    Call, Run, Spawned, call, loadgen, loadgen_at, loadgen_ok, loadgen_within, ok, run, run_cmd,
    run_cmd_within, run_in, run_ok, stderr,
};
pub use stand_in::StandIn;

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod host_box;
pub mod hostile;
pub mod own_sshd;

/// The directory holding the workspace's built binaries (`target/debug` or `target/release`).
pub fn bin_dir() -> PathBuf {
    // Test executables live in target/<profile>/deps/.
    let exe = std::env::current_exe().expect("test executable path");
    let mut dir = exe.parent().expect("deps dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// Path of a workspace binary; panics with the fix when it was not built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} not built: run `cargo build --workspace --bins` (scripts/test.sh does) before the tests",
        path.display()
    );
    path
}

/// A `Command` for a workspace binary.
pub fn cmd(name: &str) -> Command {
    Command::new(bin(name))
}

/// Runs `script` with `sh -c`, the workspace binaries first on PATH, as a user would type it.
pub fn sh(script: &str) -> Output {
    sh_cmd(script).output().expect("run sh")
}

/// [`sh`], which must exit 0 (else the test fails showing its stderr).
#[track_caller]
pub fn sh_ok(script: &str) -> Output {
    let out = sh(script);
    assert!(
        out.status.success(),
        "`{script}` failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `sh -c` command [`sh`] runs, to add stdin or environment first.
pub fn sh_cmd(script: &str) -> Command {
    shell_cmd("sh", script)
}

/// Like [`sh`], under bash with `pipefail` off, for scripts that read `PIPESTATUS`.
pub fn bash(script: &str) -> Output {
    shell_cmd("bash", script).output().expect("run bash")
}

fn shell_cmd(shell: &str, script: &str) -> Command {
    let path = std::env::var("PATH").unwrap_or_default();
    let mut c = Command::new(shell);
    c.arg("-c")
        .arg(script)
        .env("PATH", format!("{}:{path}", bin_dir().display()));
    c
}

/// Stdout lines parsed as JSON (each must be a JSON object: stdout carries records only).
pub fn json_lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {l}"))
        })
        .collect()
}

/// Every tool that reads records on stdin, as a shell line that reads them and stops soon
/// (one size, one request; no server needed for the input's error to show).
pub const RECORD_READERS: [&str; 4] = [
    "srv-kill --missing-ok",
    "summarize",
    "collbench -np 1 -b 8 -e 8 -n 1 -w 0",
    "loadgen -n 1",
];

/// The one line of `stderr` that says `error:`; panics, showing stderr, unless there is
/// exactly one (a tool's failure is one line).
#[track_caller]
pub fn the_error_line(stderr: &str) -> &str {
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(errors.len(), 1, "not one error line: {stderr}");
    errors[0]
}

/// The number at `at` in `v`: a top-level key (`"duration_s"`), a JSON pointer
/// (`"/ttft_ms/p50"`, `"/gpus/0/power_w/mean"`) or `""` for `v` itself; panics naming the
/// place and the value when it is absent or not a number.
#[track_caller]
pub fn num(v: &serde_json::Value, at: &str) -> f64 {
    let found = if at.is_empty() || at.starts_with('/') {
        v.pointer(at)
    } else {
        v.get(at)
    };
    found
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {at} in {v}"))
}

/// srv-kill's kill records in its output (it passes the server records it was given on
/// before them, marked killed).
pub fn kill_records(stdout: &[u8]) -> Vec<serde_json::Value> {
    json_lines(stdout)
        .into_iter()
        .filter(|r| r["kind"] == "kill")
        .collect()
}

/// The records of one kind among a tool's output, in order.
pub fn of_kind<'a>(records: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

/// A port that was free on 127.0.0.1 a moment ago, chosen the way srv-launch chooses one
/// (below the ephemeral range, so the test's own client connections cannot take it).
pub fn free_port() -> u16 {
    use servbench::exec::Exec;
    servbench::exec::Local
        .free_port()
        .expect("find a free port on 127.0.0.1")
}

/// Waits until something accepts connections on 127.0.0.1:port.
pub fn wait_port(port: u16, timeout: Duration) -> bool {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Waits for a spawned child, reading its piped stdout and stderr meanwhile (so it never
/// blocks on a full pipe); past `limit` the child is killed and the test fails saying so.
pub fn wait_output(child: &mut Child, limit: Duration) -> Output {
    use std::io::Read;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let err = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
            panic!("{limit:?} passed and the process had not exited; its stderr: {err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Owns a child process and its process group: both are killed (by pid) when dropped.
pub struct Guard {
    pub child: Child,
}

impl Guard {
    /// Spawns `c` in a process group of its own, so the guard can end its whole tree.
    pub fn spawn(mut c: Command) -> Guard {
        use std::os::unix::process::CommandExt;
        c.process_group(0).stdin(Stdio::null());
        Guard {
            child: c.spawn().expect("spawn child"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) on the group we created; harmless if it is already gone.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts srv-sim on a free port with `args` (stderr read on: srv-sim never blocks on it);
/// returns its guard and base URL once it listens.
pub fn srv_sim(args: &[&str]) -> (Guard, String) {
    use std::io::{BufRead, BufReader};
    let mut c = cmd("srv-sim");
    c.args(["--port", "0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut guard = Guard::spawn(c);
    let mut lines = BufReader::new(guard.child.stderr.take().expect("srv-sim stderr")).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("srv-sim exited before listening")
            .expect("read srv-sim's stderr");
        // http://, or https:// with --ssl-certfile.
        if let Some(at) = line.find("listening on http") {
            break line[at + "listening on ".len()..].trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (guard, url)
}

/// A plain HTTP server (python3 -m http.server) listening on 127.0.0.1:port, for tests that
/// need some process holding a port; ended with its guard.
pub fn http_server(port: u16) -> Guard {
    python_http_server(port, None)
}

/// [`http_server`] serving the files in `dir` (a stand-in exporter's page, say).
pub fn http_server_of(dir: &std::path::Path, port: u16) -> Guard {
    python_http_server(port, Some(dir))
}

fn python_http_server(port: u16, dir: Option<&std::path::Path>) -> Guard {
    let mut c = Command::new("python3");
    c.args([
        "-m",
        "http.server",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if let Some(dir) = dir {
        c.arg("--directory").arg(dir);
    }
    let server = Guard::spawn(c);
    assert!(
        wait_port(port, Duration::from_secs(20)),
        "python3 -m http.server did not listen on {port}"
    );
    server
}

/// One HTTP/1.1 exchange with `Connection: close`: status and body (dechunked crudely: the
/// callers look for JSON objects or whole metric lines in it).
pub fn http(
    url: &str,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> (u16, String) {
    let hostport = url.strip_prefix("http://").unwrap();
    let mut s = std::net::TcpStream::connect(hostport).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(serde_json::Value::to_string).unwrap_or_default();
    use std::io::{Read, Write};
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

/// The JSON object in an HTTP body read by [`http`] (between its first `{` and last `}`: the
/// body may be chunked).
pub fn json_body(body: &str) -> serde_json::Value {
    serde_json::from_str(&body[body.find('{').unwrap()..=body.rfind('}').unwrap()]).unwrap()
}

/// The fields of `/proc/PID/stat` the tests read (those after the parenthesized command name).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcStat {
    /// `R`, `S`, `Z` (a zombie), `X` (dead), ...
    pub state: String,
    pub ppid: u32,
    /// The process group.
    pub pgrp: u32,
    pub session: u32,
}

/// `/proc/PID/stat` read, or None when no such process exists.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()?
        .split_whitespace()
        .take(4)
        .collect();
    let [state, ppid, pgrp, session] = fields[..] else {
        return None;
    };
    Some(ProcStat {
        state: state.to_string(),
        ppid: ppid.parse().ok()?,
        pgrp: pgrp.parse().ok()?,
        session: session.parse().ok()?,
    })
}

/// Sends `sig` (`INT`, `TERM`) to `pid` from a `kill` process of its own, as a user's second
/// `kill` or a terminal's second Ctrl-C is a second delivery: two signals from one sender
/// within `servbench::interrupt::SAME_DELIVERY` are one (a `timeout` wrapper's TERM to the
/// process and then to its group), so a test's "second signal" must not come from the test
/// process that sent the first.
pub fn signal_from_another_sender(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -s {sig} {pid} failed");
}

/// True while a process with this pid exists and has not ended: not a zombie, or a zombie
/// leader with a thread still running (the process is still exiting, holding its memory).
pub fn alive(pid: u32) -> bool {
    let Some(stat) = proc_stat(pid) else {
        return false;
    };
    if stat.state != "Z" && stat.state != "X" {
        return true;
    }
    std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| {
        tasks.flatten().any(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .is_ok_and(|s| servbench::procs::task_lives(&s))
        })
    })
}

/// The value of an environment variable a setup script exports (`scripts/setup/<script>.sh`);
/// panics with the fix when it is missing, so a test never passes for want of its setup.
pub fn setup_env(var: &str, script: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{var} is not set: run the tests with scripts/test.sh, or first \
             `eval \"$(scripts/setup/{script}.sh start)\"`"
        ),
    }
}

/// The loopback OpenSSH server `scripts/setup/sshd.sh` starts, as the variables it exports
/// name it. [`sshd`] panics with the fix when the setup has not run.
#[derive(Debug, Clone)]
pub struct Sshd {
    /// `user@127.0.0.1:port`.
    pub target: String,
    pub user: String,
    pub port: String,
    /// A private key the server accepts.
    pub key: String,
    /// A key the server refuses.
    pub wrong_key: String,
    /// A known_hosts file holding the server's host key (as `[127.0.0.1]:port`).
    pub known_hosts: String,
}

impl Sshd {
    /// `--host TARGET --identity KEY --known-hosts FILE`: how srv-launch and srv-kill reach it.
    pub fn host_flags(&self) -> [&str; 6] {
        [
            "--host",
            &self.target,
            "--identity",
            &self.key,
            "--known-hosts",
            &self.known_hosts,
        ]
    }
}

/// The loopback sshd the test setup started (see [`Sshd`]).
pub fn sshd() -> Sshd {
    let var = |name: &str| setup_env(name, "sshd");
    Sshd {
        target: var("SERVBENCH_SSH_TARGET"),
        user: var("SERVBENCH_SSH_USER"),
        port: var("SERVBENCH_SSH_PORT"),
        key: var("SERVBENCH_SSH_KEY"),
        wrong_key: var("SERVBENCH_SSH_WRONG_KEY"),
        known_hosts: var("SERVBENCH_SSH_KNOWN_HOSTS"),
    }
}

impl Sshd {
    /// A private copy of the known_hosts file in `dir`, for a test that adds host keys to it
    /// (`--accept-new-host`) without touching the one other tests share.
    pub fn known_hosts_copy(&self, dir: &std::path::Path) -> String {
        let path = dir.join("known_hosts");
        std::fs::copy(&self.known_hosts, &path).expect("copy known_hosts");
        path.to_string_lossy().into_owned()
    }
}

/// How many fresh runs a timing claim gets: see [`holds_in_one_of_three`].
pub const TIMING_ATTEMPTS: usize = 3;

/// Runs a timing measurement until one run meets its claim, at most [`TIMING_ATTEMPTS`] times.
/// A 2-core virtual machine now and then loses whole milliseconds to its host, which no program
/// can hold against; a program that is really late or wrong misses in every attempt. `attempt`
/// returns the figures it measured, or the miss (from [`check`]); every attempt is printed.
/// Functional assertions inside `attempt` (status, counts) panic at once, as anywhere.
pub fn holds_in_one_of_three(what: &str, mut attempt: impl FnMut() -> Result<String, String>) {
    let mut misses = Vec::new();
    for n in 1..=TIMING_ATTEMPTS {
        match attempt() {
            Ok(figures) => {
                eprintln!("{what}: attempt {n}: {figures}");
                return;
            }
            Err(miss) => {
                eprintln!("{what}: attempt {n} missed: {miss}");
                misses.push(miss);
            }
        }
    }
    panic!(
        "{what}: missed in all {TIMING_ATTEMPTS} attempts: {}",
        misses.join("; ")
    );
}

/// Ok when the figure `holds`, else the miss in words with its value.
pub fn check(what: &str, value: f64, holds: bool) -> Result<(), String> {
    if holds {
        Ok(())
    } else {
        Err(format!("{what}: {value:.3}"))
    }
}

/// Waits until none of `pids` is alive (zombies count as gone); false when `timeout` passes.
pub fn wait_gone(pids: &[u32], timeout: Duration) -> bool {
    let end = std::time::Instant::now() + timeout;
    loop {
        if pids.iter().all(|p| !alive(*p)) {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pids a `kill` record says were signalled.
pub fn matched_pids(kill: &serde_json::Value) -> Vec<u32> {
    kill["matched"]
        .as_array()
        .unwrap_or_else(|| panic!("no matched list in {kill}"))
        .iter()
        .map(|m| m["pid"].as_u64().expect("matched pid") as u32)
        .collect()
}

/// Checks the records of a `loadgen --turns 3` run of `sessions` sessions against a real
/// engine that counts prompts and reports cached tokens: every turn recorded once with its
/// session and index, each turn's prompt holding the previous turn's prompt and reply plus a
/// new message (the server counted more than both), and each later turn finding the earlier
/// ones in the prefix cache (more than half the previous prompt, more than the turn before);
/// the summary's per-turn figures grow the same way.
pub fn check_conversation(records: &[serde_json::Value], sessions: u64) {
    use serde_json::Value;
    let u = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    let of_kind = |k: &str| -> Vec<&Value> { records.iter().filter(|r| r["kind"] == k).collect() };
    let requests = of_kind("request");
    assert_eq!(requests.len() as u64, 3 * sessions, "{records:?}");
    let mut turns = std::collections::BTreeMap::new();
    for r in &requests {
        assert!(r.get("error").is_none(), "{r}");
        turns.insert((u(&r["session"]), u(&r["turn"])), *r);
    }
    assert_eq!(
        turns.len(),
        requests.len(),
        "one record per session and turn"
    );
    for s in 0..sessions {
        for t in 2..=3 {
            let (prev, this) = (turns[&(s, t - 1)], turns[&(s, t)]);
            let (p0, out0, p1) = (
                u(&prev["prompt_tokens"]),
                u(&prev["output_tokens"]),
                u(&this["prompt_tokens"]),
            );
            assert!(
                p1 > p0 + out0,
                "turn {t} holds turn {}: {prev} {this}",
                t - 1
            );
            let cached = u(&this["cached_tokens"]);
            assert!(2 * cached > p0 && cached <= p0 + out0, "{prev} {this}");
            assert!(cached > u(&prev["cached_tokens"]), "{prev} {this}");
        }
    }
    let s = of_kind("summary")[0];
    assert_eq!(s["workload"]["turns"], "3", "{s}");
    assert_eq!(u(&s["workload"]["sessions"]), sessions, "{s}");
    let by_turn = s["by_turn"].as_array().unwrap();
    assert_eq!(by_turn.len(), 3, "{s}");
    let mean = |t: &Value, f: &str| t[f].as_f64().unwrap();
    for w in by_turn.windows(2) {
        assert!(
            mean(&w[1], "prompt_tokens_mean") > mean(&w[0], "prompt_tokens_mean"),
            "{s}"
        );
        assert!(
            mean(&w[1], "cached_tokens_mean") > mean(&w[0], "cached_tokens_mean"),
            "{s}"
        );
    }
}

/// A stand-in for nvidia-smi (nvidia-smi is not ours, and this machine has no GPU): two GPUs
/// with fixed figures, answering the telemetry query (`--query-gpu=index,name,utilization.gpu,
/// ...`, `-i` selecting GPUs), the inventory query (`index,name,driver_version`) and the bare
/// banner with its CUDA version, as nvidia-smi prints them. GPU 0 is busy, GPU 1 idle with no
/// power reading (`[N/A]`, as some boards report). Like the real one it has no energy counter
/// (NVML has: [`nvml::NvmlStandIn`]); driver 580's exact fields are [`nvml::NVIDIA_SMI_580`].
pub const FAKE_NVIDIA_SMI: &str = r#"#!/bin/sh
gpus() {
  echo "0, NVIDIA H100 80GB HBM3, 87, 71234, 512.5, 1980, 61"
  echo "1, NVIDIA H100 80GB HBM3, 3, 1024, [N/A], 345, 35"
}
case "$*" in
  *--query-gpu=index,name,utilization.gpu,memory.used,power.draw,clocks.sm,temperature.gpu*)
    sel=$(echo "$*" | sed -n 's/.* -i \([0-9,]*\).*/\1/p')
    gpus | while IFS= read -r line; do
      i=${line%%,*}
      case ",$sel," in ,,|*",$i,"*) echo "$line" ;; esac
    done ;;
  *--query-gpu=index,name,driver_version*)
    echo "0, NVIDIA H100 80GB HBM3, 550.54.15"
    echo "1, NVIDIA H100 80GB HBM3, 550.54.15" ;;
  "")
    echo "| NVIDIA-SMI 550.54.15      Driver Version: 550.54.15      CUDA Version: 12.4     |" ;;
  *) echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
"#;

/// [`FAKE_NVIDIA_SMI`] written as `DIR/bin/nvidia-smi` in a fresh temporary directory; put
/// [`StandIn::bin`] first on PATH (so a real GPU machine's nvidia-smi is never asked), or
/// name [`StandIn::program`] where PATH cannot be set (over SSH).
pub struct FakeNvidiaSmi(pub StandIn);

impl FakeNvidiaSmi {
    pub fn new() -> FakeNvidiaSmi {
        FakeNvidiaSmi(StandIn::new("nvidia-smi", FAKE_NVIDIA_SMI))
    }
}

impl std::ops::Deref for FakeNvidiaSmi {
    type Target = StandIn;
    fn deref(&self) -> &StandIn {
        &self.0
    }
}

impl Default for FakeNvidiaSmi {
    fn default() -> FakeNvidiaSmi {
        FakeNvidiaSmi::new()
    }
}
