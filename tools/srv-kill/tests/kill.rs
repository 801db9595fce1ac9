//! srv-kill against real process trees on this machine: TERM-ignoring children, a child that
//! calls setsid, pid reuse, --match safety, nothing matched, pass-through, --port, --dry-run.

use servbench::exec::{Exec, Local};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::{Guard, alive, cmd, free_port, http_server, json_lines, matched_pids, sh, wait_gone};

/// Waits until `path` holds `n` lines (pids written by a test tree) and returns them.
fn wait_pids(path: &std::path::Path, n: usize) -> Vec<u32> {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let pids: Vec<u32> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.len() >= n {
            return pids;
        }
        assert!(Instant::now() < end, "tree did not start: {pids:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A server record for a running pid, as srv-launch writes it.
fn server_record(pid: u32, start_ticks: u64, port: u16) -> String {
    serde_json::json!({
        "kind": "server", "v": 1, "ts": "2026-11-30T00:00:00.000Z",
        "labels": {"engine": "cmd", "run": "t"},
        "engine": "cmd", "host": "localhost", "pid": pid, "pgid": pid,
        "start_ticks": start_ticks, "port": port, "url": format!("http://127.0.0.1:{port}"),
        "command": "test tree", "log": "/dev/null", "ready_s": 0.1
    })
    .to_string()
}

/// A tree in its own session: a leader that ignores TERM, a TERM-ignoring child, a grandchild,
/// and a child that calls setsid itself. Writes the pids of all four to `pids`.
fn spawn_tree(pids: &std::path::Path) -> Guard {
    let script = format!(
        r#"trap '' TERM
echo $$ >> {f}
sh -c 'trap "" TERM; echo $$ >> {f}; sleep 120 & echo $! >> {f}; wait' &
setsid sh -c 'echo $$ >> {f}; exec sleep 120' &
wait"#,
        f = pids.display()
    );
    let mut c = Command::new("setsid");
    c.arg("sh").arg("-c").arg(script);
    Guard::spawn(c)
}

#[test]
fn a_tree_with_term_ignoring_children_and_a_setsid_child_is_killed_completely() {
    let dir = tempfile::tempdir().unwrap();
    let pids_file = dir.path().join("pids");
    let _guard = spawn_tree(&pids_file);
    let pids = wait_pids(&pids_file, 4);
    // The setsid'd child left the session; srv-kill must still find it (through ppid).
    let leader = pids[0];
    let start = Local.start_ticks(leader).unwrap().unwrap();
    let record = dir.path().join("server.jsonl");
    std::fs::write(&record, server_record(leader, start, 0) + "\n").unwrap();

    let out = testkit::call("srv-kill")
        .args([
            "--from",
            record.to_str().unwrap(),
            "--grace",
            "1s",
            "--label",
            "k=v",
        ])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let recs = json_lines(&out.stdout);
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r["kind"], "kill");
    assert_eq!(r["ok"], true);
    assert_eq!(r["signals"], serde_json::json!(["TERM", "KILL"]));
    assert_eq!(r["survivors"], serde_json::json!([]));
    assert_eq!(
        r["labels"]["run"], "t",
        "labels inherited from the server record"
    );
    assert_eq!(r["labels"]["k"], "v");
    let matched = matched_pids(r);
    for p in &pids {
        assert!(matched.contains(p), "pid {p} not matched: {matched:?}");
    }
    assert!(
        wait_gone(&pids, Duration::from_secs(2)),
        "survivors among {pids:?}"
    );
}

#[test]
fn a_record_whose_start_time_differs_is_refused_and_the_stranger_lives() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new("sleep");
    c.arg("60");
    let stranger = Guard::spawn(c);
    let pid = stranger.pid();
    let start = Local.start_ticks(pid).unwrap().unwrap();
    let record = dir.path().join("server.jsonl");
    std::fs::write(&record, server_record(pid, start + 1, 0) + "\n").unwrap();

    let out = testkit::call("srv-kill")
        .args(["--from", record.to_str().unwrap(), "--grace", "1s"])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("another process"), "stderr: {stderr}");
    let recs = json_lines(&out.stdout);
    assert_eq!(recs[0]["ok"], false);
    assert_eq!(recs[0]["matched"], serde_json::json!([]));
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(pid), "the stranger was killed");
}

#[test]
fn match_never_kills_srv_kill_or_its_caller() {
    let token = format!("srvkill-token-{}", std::process::id());
    // The victim carries the token in its command line, and so do srv-kill and the calling shell.
    let mut c = Command::new("sh");
    c.arg("-c").arg(format!("sleep 60; : {token}"));
    let victim = Guard::spawn(c);
    let vpid = victim.pid();
    std::thread::sleep(Duration::from_millis(200));

    let out = sh(&format!(
        "srv-kill --match '{token}' --grace 2s; echo caller-survived rc=$?"
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("caller-survived rc=0"),
        "stdout: {stdout} stderr: {stderr}"
    );
    let recs: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 1);
    let matched = recs[0]["matched"].as_array().unwrap();
    assert!(
        matched
            .iter()
            .any(|m| m["pid"].as_u64() == Some(vpid as u64)),
        "victim not matched: {matched:?}"
    );
    assert!(
        matched
            .iter()
            .all(|m| !m["command"].as_str().unwrap().contains("srv-kill")),
        "srv-kill or its caller matched: {matched:?}"
    );
    assert!(wait_gone(&[vpid], Duration::from_secs(2)));
}

#[test]
fn nothing_matched_is_exit_1_and_missing_ok_makes_it_0() {
    // A pid that existed and is gone now.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();

    let out = testkit::call("srv-kill")
        .args(["--pid", &pid.to_string()])
        .run();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing matched"), "stderr: {stderr}");
    let recs = json_lines(&out.stdout);
    assert_eq!(recs[0]["ok"], false);
    assert_eq!(recs[0]["error"], "nothing matched");

    let out = testkit::call("srv-kill")
        .args(["--match", "no-such-process-anywhere-4711", "--missing-ok"])
        .run();
    assert_eq!(out.status.code(), Some(0));

    // An empty pipeline input: nothing to kill.
    let out = testkit::call("srv-kill").run();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing matched"));
}

#[test]
fn missing_ok_excuses_nothing_matched_but_not_a_refusal() {
    // The shell running srv-kill is its caller: refused, which --missing-ok must not hide.
    let out = sh("srv-kill --pid $$ --missing-ok </dev/null");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let recs = json_lines(&out.stdout);
    assert_eq!(recs[0]["ok"], false);
    let error = recs[0]["error"].as_str().unwrap();
    assert!(error.starts_with("refused: "), "{error}");
    assert!(recs[0]["matched"].as_array().unwrap().is_empty());
}

#[test]
fn in_a_pipeline_other_records_pass_through_and_the_kill_waits_for_the_end_of_input() {
    let mut c = Command::new("sleep");
    c.arg("60");
    let server = Guard::spawn(c);
    let pid = server.pid();
    let start = Local.start_ticks(pid).unwrap().unwrap();
    let note = r#"{"kind":"note","v":1,"ts":"2026-11-30T00:00:00.000Z","labels":{},"text":"kept"}"#;

    let mut child = cmd("srv-kill")
        .args(["--grace", "1s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", server_record(pid, start, 0)).unwrap();
    writeln!(stdin, "{note}").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(alive(pid), "killed before the input ended");
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], note, "pass-through is byte for byte");
    // The server record comes after the kill, marked killed, before its kill record.
    let server: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(
        (&server["kind"], &server["killed"]),
        (&"server".into(), &true.into())
    );
    let kill: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(kill["kind"], "kill");
    assert_eq!(kill["ok"], true);
    assert_eq!(kill["signals"], serde_json::json!(["TERM"]));
    assert!(wait_gone(&[pid], Duration::from_secs(1)));
}

#[test]
fn port_target_kills_the_listener_and_checks_the_port_is_free() {
    let port = free_port();
    let server = http_server(port);

    // --dry-run lists it and signals nothing.
    let out = testkit::call("srv-kill")
        .args(["--port", &port.to_string(), "--dry-run"])
        .run();
    assert_eq!(out.status.code(), Some(0));
    let recs = json_lines(&out.stdout);
    assert_eq!(recs[0]["signals"], serde_json::json!([]));
    assert_eq!(
        recs[0]["matched"][0]["pid"].as_u64(),
        Some(server.pid() as u64)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("would kill"));
    assert!(alive(server.pid()));

    let out = testkit::call("srv-kill")
        .args(["--port", &port.to_string(), "--grace", "5s"])
        .run();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = json_lines(&out.stdout);
    assert_eq!(recs[0]["port"], port);
    assert_eq!(recs[0]["port_free"], true);
    assert!(wait_gone(&[server.pid()], Duration::from_secs(1)));
}

#[test]
fn bad_usage_is_exit_2() {
    let out = cmd("srv-kill")
        .args(["--match", "("])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("srv-kill: error: --match"));
}

/// A host that cannot be reached is one error line (exit 2), not a warning per target and
/// then the same words again; the record still says what was not killed.
#[test]
fn an_unreachable_host_is_one_error_line() {
    let port = free_port();
    let out = testkit::call("srv-kill")
        .args(["--host", &format!("127.0.0.1:{port}"), "--pid", "12345"])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("srv-kill: error: ") && stderr.contains(&port.to_string()),
        "{stderr}"
    );
    let recs = json_lines(&out.stdout);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["ok"], false);
}
