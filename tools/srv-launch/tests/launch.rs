//! srv-launch with real servers on 127.0.0.1: a slow-loading server (503 then 200), one that
//! dies during startup, a taken port (refused, or --replace), timeouts, pass-through, and the
//! record driving srv-kill.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};
use testkit::{
    alive, cmd, free_port, http_server, json_lines, kill_records, matched_pids, sh_cmd, wait_gone,
};

/// A stand-in engine: /health answers 503 for `delay` seconds, then 200; /v1/models lists
/// "tiny"; POST /v1/completions answers one token.
const SLOW_SERVER: &str = r#"
import http.server, json, sys, time
port, delay = int(sys.argv[1]), float(sys.argv[2])
t0 = time.time()
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/health":
            ready = time.time() - t0 >= delay
            self.reply(200 if ready else 503, {"status": "ok" if ready else "loading"})
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        else:
            self.reply(404, {})
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.rfile.read(n)
        self.reply(200, {"choices": [{"text": " hi", "index": 0, "finish_reason": "length"}]})
    def log_message(self, *a):
        print("request", *a, flush=True)
print("loading weights ...", flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

fn write_slow_server(dir: &std::path::Path) -> String {
    let path = dir.join("slow_server.py");
    std::fs::write(&path, SLOW_SERVER).unwrap();
    path.display().to_string()
}

fn kill_record(record: &serde_json::Value) -> std::process::Output {
    let mut child = cmd("srv-kill")
        .args(["--grace", "5s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.as_mut().unwrap(), "{record}").unwrap();
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

#[test]
fn readiness_waits_for_a_slow_server_and_the_record_drives_srv_kill() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_slow_server(dir.path());
    let log = dir.path().join("server.log");
    let out = testkit::call("srv-launch")
        .args([
            "--cmd",
            &format!("exec python3 {script} {{port}} 3"),
            "--ready-url",
            "http://127.0.0.1:{port}/health",
            "--probe",
            "--log",
            log.to_str().unwrap(),
            "--name",
            "slow",
            "--env",
            "SLOW_TEST=1",
            "--label",
            "run=a",
        ])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let recs = json_lines(&out.stdout);
    assert_eq!(recs.len(), 1, "one server record");
    let r = &recs[0];
    assert_eq!(r["kind"], "server");
    assert_eq!(r["engine"], "cmd");
    assert_eq!(r["host"], "localhost");
    assert_eq!(r["labels"]["run"], "a");
    assert_eq!(r["served_model"], "tiny");
    let ready_s = r["ready_s"].as_f64().unwrap();
    assert!(ready_s >= 3.0, "ready before /health said 200: {ready_s}");
    // No preset, so no phase lines known: only the time to ready.
    assert_eq!(r["startup"], serde_json::json!({"ready_s": ready_s}), "{r}");
    let pid = r["pid"].as_u64().unwrap() as u32;
    let port = r["port"].as_u64().unwrap() as u16;
    assert_eq!(r["pgid"].as_u64(), Some(pid as u64), "own process group");
    assert_eq!(r["url"], format!("http://127.0.0.1:{port}"));
    assert!(r["command"].as_str().unwrap().contains(&port.to_string()));
    assert!(
        stderr.contains("waiting for cmd"),
        "a progress line: {stderr}"
    );

    // Detached: alive after srv-launch exited, own session, stdin /dev/null, output in the log,
    // the launch marker and --env in its environment.
    assert!(alive(pid));
    let stat = testkit::proc_stat(pid).expect("the server's /proc/PID/stat");
    assert_eq!(stat.session, pid, "session leader");
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/fd/0"))
            .unwrap()
            .to_str(),
        Some("/dev/null")
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/fd/1")).unwrap(),
        log
    );
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let env = String::from_utf8_lossy(&env);
    assert!(env.contains("SLOW_TEST=1"));
    assert!(env.contains(&format!(
        "SERVBENCH_LAUNCH_ID={}",
        r["launch_id"].as_str().unwrap()
    )));
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("loading weights")
    );

    let killed = kill_record(r);
    assert_eq!(
        killed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&killed.stderr)
    );
    let k = &kill_records(&killed.stdout)[0];
    assert_eq!(k["ok"], true);
    assert_eq!(k["port_free"], true);
    assert_eq!(k["labels"]["run"], "a");
    assert!(wait_gone(&[pid], Duration::from_secs(2)));
}

#[test]
fn a_server_that_dies_during_startup_is_exit_1_with_its_log_tail() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("dies.log");
    let script = "for i in $(seq 1 40); do echo \"init line $i\"; done; sleep 1; echo 'fatal: CUDA out of memory (test)'; exit 3";
    let out = testkit::call("srv-launch")
        .args([
            "--cmd",
            script,
            "--ready-url",
            "http://127.0.0.1:{port}/health",
        ])
        .args(["--log", log.to_str().unwrap(), "--timeout", "60s"])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "no record for a dead server");
    assert!(
        stderr.contains("fatal: CUDA out of memory (test)"),
        "{stderr}"
    );
    assert!(stderr.contains("exited during startup"), "{stderr}");
    // The last 30 lines: line 40 down to line 12 plus the fatal line; line 1 is not shown.
    assert!(stderr.contains("init line 12\n"), "{stderr}");
    assert!(!stderr.contains("init line 1\n"), "{stderr}");
}

#[test]
fn a_taken_port_is_refused_and_replace_kills_the_holder_first() {
    let port = free_port();
    let holder = http_server(port);

    let launch = |extra: &[&str]| {
        testkit::call("srv-launch")
            .args([
                "--cmd",
                "exec python3 -m http.server {port} --bind 127.0.0.1",
            ])
            .args([
                "--ready-url",
                "http://127.0.0.1:{port}/",
                "--port",
                &port.to_string(),
            ])
            .args(extra)
            .run()
    };
    let out = launch(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("already in use") && stderr.contains("--replace"),
        "{stderr}"
    );
    assert!(alive(holder.pid()), "refusing must not kill");

    let out = launch(&["--replace"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        wait_gone(&[holder.pid()], Duration::from_secs(2)),
        "holder still alive"
    );
    let r = &json_lines(&out.stdout)[0];
    assert_eq!(r["port"], port);
    let killed = kill_record(r);
    assert_eq!(killed.status.code(), Some(0));
}

#[test]
fn a_server_that_timed_out_is_killed_unless_keep_on_timeout() {
    // No record names a server that never got ready: left running, nothing downstream
    // (srv-kill in the pipeline) would stop it. So it is killed by default.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("never.log");
    let pid_file = dir.path().join("pid");
    let out = testkit::call("srv-launch")
        .args([
            "--cmd",
            &format!("echo $$ > {}; exec sleep 61", pid_file.display()),
            "--ready-url",
            "http://127.0.0.1:{port}/",
        ])
        .args(["--timeout", "1s", "--log", log.to_str().unwrap()])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("not ready after") && stderr.contains("killed it"),
        "{stderr}"
    );
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_gone(&[pid], Duration::from_secs(2)),
        "a server that timed out was left running"
    );

    let out = testkit::call("srv-launch")
        .args([
            "--cmd",
            "exec sleep 60",
            "--ready-url",
            "http://127.0.0.1:{port}/",
        ])
        .args(["--timeout", "1s", "--keep-on-timeout"])
        .args(["--log", log.to_str().unwrap()])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("not ready after") && stderr.contains("left running"),
        "{stderr}"
    );
    let pid: u32 = stderr
        .split("srv-kill --pid ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .expect("the message names the pid");
    assert!(alive(pid));
    let k = testkit::call("srv-kill")
        .args(["--pid", &pid.to_string(), "--grace", "2s"])
        .run();
    assert_eq!(k.status.code(), Some(0));
    assert!(wait_gone(&[pid], Duration::from_secs(2)));
}

#[test]
fn upstream_records_pass_through_before_the_server_record() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_slow_server(dir.path());
    let note = r#"{"kind":"note","v":1,"ts":"2026-11-30T00:00:00.000Z","labels":{"x":"1"}}"#;
    let mut c = sh_cmd(&format!(
        "echo '{note}' | srv-launch --cmd 'exec python3 {script} {{port}} 0' \
         --ready-url 'http://127.0.0.1:{{port}}/health' | srv-kill --grace 2s"
    ));
    let out = c.stdin(Stdio::null()).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    // The upstream note first, then srv-kill's: the server record passed on (marked killed),
    // then its kill record.
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], note);
    let server: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(server["kind"], "server");
    assert_eq!(server["killed"], true);
    let kill: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(kill["kind"], "kill");
    assert_eq!(kill["ok"], true);
}

#[test]
fn a_missing_engine_program_and_bad_usage_are_exit_2() {
    let out = testkit::call("srv-launch")
        .args(["vllm", "--model", "m", "--bin", "/nonexistent/vllm"])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not found on localhost"), "{stderr}");

    let out = testkit::call("srv-launch")
        .args(["llama-cpp", "--model", "x.gguf", "--tp", "2"])
        .run();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tensor"));

    let out = testkit::call("srv-launch").arg("--help").run();
    assert!(String::from_utf8_lossy(&out.stdout).contains("srv-launch sim | loadgen"));
}

/// `--timeout 0s` started a server, gave up at once and left it running: a zero (or a huge)
/// timeout is refused before anything starts, in one line.
#[test]
fn a_zero_or_huge_timeout_is_refused_before_any_server_starts() {
    for (value, says) in [
        ("0s", "must be more than 0"),
        ("1e30", "longer than a year"),
    ] {
        let out = testkit::call("srv-launch")
            .args(["sim", "--timeout", value])
            .run();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{value}: {stderr}");
        assert!(stderr.contains(says), "{value}: {stderr}");
        assert!(out.stdout.is_empty(), "{value}: no server record");
    }
}

#[test]
fn engine_choices_are_the_engine_table() {
    let names = servbench::engines::names();
    let out = testkit::call("srv-launch").arg("--help").run();
    let help = String::from_utf8_lossy(&out.stdout);
    let out = testkit::call("srv-launch").arg("no-such-engine").run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("'no-such-engine'"), "{stderr}");
    for name in names {
        assert!(help.contains(name), "--help lacks {name}: {help}");
        assert!(stderr.contains(name), "the error lacks {name}: {stderr}");
    }
}

#[test]
fn readiness_waits_for_a_slow_srv_sim_and_maps_the_shared_flags() {
    let out = testkit::call("srv-launch")
        .args([
            "sim",
            "--tp",
            "2",
            "--model",
            "llama-3.1-70b",
            "--label",
            "run=sim",
        ])
        .args(["--", "--hardware", "h200", "--startup", "5s"])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let r = &json_lines(&out.stdout)[0];
    assert!(
        r["ready_s"].as_f64().unwrap() >= 5.0,
        "ready before srv-sim loaded: {r}"
    );
    assert!(
        stderr.contains("waiting for sim"),
        "a progress line: {stderr}"
    );
    assert_eq!(r["engine"], "sim");
    assert_eq!(r["labels"]["tp"], "2");
    assert_eq!(r["labels"]["model"], "llama-3.1-70b");
    assert_eq!(r["labels"]["run"], "sim");
    let command = r["command"].as_str().unwrap();
    assert!(
        command.contains("srv-sim --model llama-3.1-70b --host 127.0.0.1 --port ")
            && command.ends_with("--tp 2 --hardware h200 --startup 5s"),
        "{command}"
    );
    let killed = kill_record(r);
    assert_eq!(killed.status.code(), Some(0));
    assert_eq!(kill_records(&killed.stdout)[0]["ok"], true);
}

#[test]
fn interrupted_while_waiting_kills_the_unannounced_server_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let child = cmd("srv-launch")
        .args([
            "--cmd",
            &format!("echo $$ > {}; exec sleep 60", pid_file.display()),
            "--ready-url",
            "http://127.0.0.1:{port}/",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    let server: u32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < end, "server never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: SIGTERM to the srv-launch child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains("interrupted") && stderr.contains("killed it"),
        "{stderr}"
    );
    assert!(wait_gone(&[server], Duration::from_secs(2)));
}

#[test]
fn a_worker_that_left_the_session_and_was_orphaned_is_found_by_the_launch_marker() {
    // Like sglang's schedulers: a worker in a session of its own whose parent exited, so
    // neither the process group, the session nor the ppid chain leads to it any more.
    let dir = tempfile::tempdir().unwrap();
    let orphan_file = dir.path().join("orphan");
    let cmdline = format!(
        "(setsid sh -c 'echo $$ > {}; exec sleep 60' &); exec python3 -m http.server {{port}} --bind 127.0.0.1",
        orphan_file.display()
    );
    let out = testkit::call("srv-launch")
        .args(["--cmd", &cmdline, "--ready-url", "http://127.0.0.1:{port}/"])
        .run();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = &json_lines(&out.stdout)[0];
    let orphan: u32 = std::fs::read_to_string(&orphan_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stat = testkit::proc_stat(orphan).expect("the orphan's /proc/PID/stat");
    let server = r["pid"].as_u64().unwrap() as u32;
    assert_ne!(stat.ppid, server, "the orphan's parent is not the server");
    assert_ne!(stat.pgrp, server, "the orphan left the process group");
    assert_ne!(stat.session, server, "the orphan left the session");

    let killed = kill_record(r);
    assert_eq!(killed.status.code(), Some(0));
    let k = &kill_records(&killed.stdout)[0];
    let matched = matched_pids(k);
    assert!(matched.contains(&orphan), "orphan not matched: {matched:?}");
    assert!(
        wait_gone(&[orphan], Duration::from_secs(2)),
        "the orphan survived"
    );
}

#[test]
fn an_idle_stdin_pipe_that_never_closes_does_not_hold_srv_launch() {
    // A script's or SSH session's inherited stdin: open, silent. srv-launch must still finish.
    let mut child = cmd("srv-launch")
        .arg("sim")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _keep_open = child.stdin.take();
    let end = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("srv-launch waited for a stdin that never ends");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let killed = kill_record(&r);
    assert_eq!(killed.status.code(), Some(0));
}

/// BROKE 7 (LAUNCH-FIFO): a `--log` that is a FIFO blocked open(2) forever, deaf to Ctrl-C and
/// SIGTERM. LF-full: `--log /dev/full` lost every line and printed NULs as "the log". A log
/// that exists and is not a regular file is refused, naming the flag, before anything starts.
#[test]
fn a_log_that_is_a_fifo_or_a_device_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("lfifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let pid_file = dir.path().join("pid");
    for (log, kind) in [
        (fifo.to_str().unwrap(), "fifo"),
        ("/dev/full", "character special file"),
    ] {
        let run = testkit::call("srv-launch")
            .args([
                "--cmd",
                &format!("echo $$ > {}; exec sleep 30", pid_file.display()),
                "--ready-url",
                "http://127.0.0.1:{port}/",
            ])
            .args(["--timeout", "20s", "--log", log])
            .within(Duration::from_secs(15))
            .run();
        let (code, stdout, stderr) = run.texts();
        assert_eq!(code, Some(2), "{log}: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        let line = testkit::the_error_line(&stderr);
        assert!(
            line.starts_with(&format!(
                "srv-launch: error: --log {log} exists and is not a regular file ({kind} on localhost)"
            )),
            "{line}"
        );
        assert!(!pid_file.exists(), "{log}: the server was started");
    }
}
