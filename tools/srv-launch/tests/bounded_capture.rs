//! srv-launch's environment capture against programs that are not well (tried-to-break-it-3.md
//! G8, L2, L3): an nvidia-smi that hangs, prints without end or exits 1, here and over the
//! loopback sshd; an engine whose `--version` ignores SIGTERM; a `--cmd` server without
//! `/version`. The record is written within the capture's bound with what could be learned,
//! a signal during the capture stops the server and exits 130, and nothing is left running.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use testkit::smi::{HostileSmi, Smi};
use testkit::stderr;
use testkit::{cmd, json_lines, sshd, wait_gone};

/// The capture's documented bound (15 s) and startup, with generous slack for a loaded machine.
const WITHIN: Duration = Duration::from_secs(60);

fn ssh_flags() -> Vec<String> {
    let s = sshd();
    vec![
        "--host".into(),
        s.target,
        "--identity".into(),
        s.key,
        "--known-hosts".into(),
        s.known_hosts,
    ]
}

/// Stops the server a record names, with srv-kill (over SSH with `ssh`).
fn kill(record: &serde_json::Value, ssh: &[String]) {
    let ssh: Vec<&str> = ssh.iter().map(String::as_str).collect();
    testkit::servers::srv_kill(record, &ssh);
    assert!(wait_gone(
        &[record["pid"].as_u64().unwrap() as u32],
        Duration::from_secs(5)
    ));
}

fn run_timed(c: &mut Command) -> (Output, Duration) {
    let started = Instant::now();
    let out = c.stdin(Stdio::null()).output().expect("run srv-launch");
    (out, started.elapsed())
}

#[test]
fn a_hung_endless_or_failing_nvidia_smi_leaves_the_gpu_fields_out_within_the_bound() {
    for remote in [false, true] {
        for kind in [Smi::Hangs, Smi::PrintsForever, Smi::Fails] {
            let smi = HostileSmi::new(kind);
            let ssh = if remote { ssh_flags() } else { Vec::new() };
            let mut c = cmd("srv-launch");
            c.args(&ssh);
            if remote {
                c.args(["--bin", testkit::bin("srv-sim").to_str().unwrap()])
                    .args(["--nvidia-smi", &smi.program()]);
            } else {
                c.env("PATH", smi.path());
            }
            let (out, took) = run_timed(c.arg("sim"));
            let what = format!("{kind:?} remote={remote}");
            assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
            assert!(took < WITHIN, "{what}: {took:?}");
            let r = &json_lines(&out.stdout)[0];
            let env = &r["env"];
            assert!(env.get("gpu_model").is_none(), "{what}: {env}");
            assert!(env.get("driver_version").is_none(), "{what}: {env}");
            // What could be learned still is.
            assert_eq!(env["engine_version"], env!("CARGO_PKG_VERSION"), "{what}");
            assert!(env.get("kernel").is_some(), "{what}: {env}");
            assert!(!smi.runs().is_empty(), "{what}: the stand-in was asked");
            assert!(smi.none_left_running(Duration::from_secs(10)), "{what}");
            kill(r, &ssh);
        }
    }
}

/// srv-launch started with piped output; returns once `ready_line` is on stderr, with the
/// server's pid from that line and the rest of stderr still being read.
fn launch_until_ready(c: &mut Command) -> (Child, u32, std::thread::JoinHandle<String>) {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let pid = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("srv-launch ended before ready: {seen}"))
            .unwrap();
        seen.push_str(&line);
        seen.push('\n');
        // "sim ready at URL after 0.1s (pid N on localhost, log ...)"
        if let Some(rest) = line.split(" ready at ").nth(1) {
            let pid = rest.split("(pid ").nth(1).and_then(|r| r.split(' ').next());
            break pid
                .and_then(|p| p.parse::<u32>().ok())
                .expect("pid in the ready line");
        }
    };
    let rest = std::thread::spawn(move || {
        let mut all = seen;
        for l in lines.map_while(Result::ok) {
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    (child, pid, rest)
}

#[test]
fn a_signal_while_the_environment_is_recorded_stops_the_server_and_exits_130() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let smi = HostileSmi::new(Smi::Hangs);
        let (child, server, err) =
            launch_until_ready(cmd("srv-launch").arg("sim").env("PATH", smi.path()));
        // The capture is under way once the stand-in runs.
        let end = Instant::now() + WITHIN;
        while smi.runs().is_empty() {
            assert!(Instant::now() < end, "nvidia-smi never asked");
            std::thread::sleep(Duration::from_millis(20));
        }
        let signalled = Instant::now();
        // SAFETY: a signal to the srv-launch child this test spawned.
        unsafe { libc::kill(child.id() as i32, sig) };
        let out = child.wait_with_output().unwrap();
        let took = signalled.elapsed();
        let err = err.join().unwrap();
        assert_eq!(out.status.code(), Some(130), "signal {sig}: {err}");
        assert!(out.stdout.is_empty(), "no record for a stopped server");
        assert!(err.contains("interrupted while recording"), "{err}");
        assert!(err.contains("killed it"), "{err}");
        // Well before the capture's own bound: the signal is not left waiting.
        assert!(took < WITHIN, "{took:?}");
        assert!(
            wait_gone(&[server], Duration::from_secs(5)),
            "server {server} left"
        );
        assert!(smi.none_left_running(Duration::from_secs(10)));
    }
}

/// A stand-in vLLM: `--version` ignores SIGTERM and never ends (recording its pid); `serve`
/// answers /health and /v1/models on its --port, and has no /version.
const ENGINE_IGNORING_TERM: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then
  trap '' TERM
  echo $$ >> "$(dirname "$0")/version-pids"
  exec sleep 3600
fi
exec python3 - "$@" <<'EOF'
import http.server, json, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/health": {}, "/v1/models": {"data": [{"id": "m"}]}}.get(self.path)
        data = json.dumps(body or {}).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
EOF
"#;

#[test]
fn an_engine_version_that_ignores_sigterm_is_killed_and_left_out() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("vllm");
    std::fs::write(&engine, ENGINE_IGNORING_TERM).unwrap();
    std::fs::set_permissions(&engine, std::fs::Permissions::from_mode(0o755)).unwrap();
    let smi = HostileSmi::new(Smi::Fails);
    let (out, took) = run_timed(
        cmd("srv-launch")
            .args(["vllm", "--model", "m", "--bin", engine.to_str().unwrap()])
            .env("PATH", smi.path()),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(took < WITHIN, "{took:?}");
    let r = &json_lines(&out.stdout)[0];
    assert!(r["env"].get("engine_version").is_none(), "{r}");
    let pids: Vec<u32> = std::fs::read_to_string(dir.path().join("version-pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    assert_eq!(pids.len(), 1, "--version was asked once");
    // SIGKILL after the grace period: it is gone, not left behind.
    assert!(
        wait_gone(&pids, Duration::from_secs(10)),
        "--version left running"
    );
    kill(r, &[]);
}

#[test]
fn a_cmd_servers_engine_version_is_never_its_shells_error() {
    let (out, _) = run_timed(cmd("srv-launch").args([
        "--cmd",
        "exec python3 -m http.server {port} --bind 127.0.0.1",
        "--ready-url",
        "http://127.0.0.1:{port}/",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = &json_lines(&out.stdout)[0];
    // It has no /version, and `sh --version` names no engine.
    assert!(r["env"].get("engine_version").is_none(), "{r}");
    assert!(r["env"].get("kernel").is_some(), "{r}");
    kill(r, &[]);
}
