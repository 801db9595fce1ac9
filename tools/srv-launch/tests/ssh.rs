//! srv-launch and srv-kill over a real OpenSSH server on 127.0.0.1 (scripts/setup/sshd.sh):
//! the server survives the SSH session, srv-kill over SSH stops it, and every refusal (unknown
//! or changed host key, wrong key, nothing listening, missing program) is a clear exit 2.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use testkit::stderr;
use testkit::{alive, cmd, free_port, json_lines, kill_records, sshd};

/// A Python the remote (non-interactive, default PATH) shell can run: the absolute path.
fn python() -> String {
    let out = Command::new("sh")
        .args(["-c", "command -v python3"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn parent_of(pid: u32) -> Option<u32> {
    testkit::proc_stat(pid).map(|s| s.ppid)
}

#[test]
fn launch_over_ssh_outlives_the_session_and_srv_kill_over_ssh_stops_it() {
    let s = sshd();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("remote.log");
    let out = testkit::call("srv-launch")
        .args(s.host_flags())
        .args([
            "--cmd",
            &format!("exec {} -m http.server {{port}} --bind 127.0.0.1", python()),
            "--ready-url",
            "http://127.0.0.1:{port}/",
            "--log",
            log.to_str().unwrap(),
            "-v",
        ])
        .run();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = json_lines(&out.stdout);
    let r = &recs[0];
    assert_eq!(r["host"], s.target.as_str());
    assert_eq!(r["labels"]["host"], s.target.as_str());
    let pid = r["pid"].as_u64().unwrap() as u32;
    assert_eq!(r["pgid"].as_u64(), Some(pid as u64));
    assert!(stderr(&out).contains("running on"), "-v prints the command");

    // srv-launch and its SSH session are gone; the server lives on, adopted by init, not sshd.
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(pid), "the server died with the SSH session");
    // Adopted by init (or a subreaper), not held by an sshd session process.
    let parent = parent_of(pid).expect("parent");
    let parent_comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).unwrap_or_default();
    assert!(
        !parent_comm.contains("sshd") && !parent_comm.starts_with("sh"),
        "parent {parent} {parent_comm}"
    );

    let mut child = cmd("srv-kill")
        .args([
            "--identity",
            &s.key,
            "--known-hosts",
            &s.known_hosts,
            "--grace",
            "5s",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.as_mut().unwrap(), "{r}").unwrap();
    drop(child.stdin.take());
    let killed = child.wait_with_output().unwrap();
    assert_eq!(killed.status.code(), Some(0), "{}", stderr(&killed));
    let k = &kill_records(&killed.stdout)[0];
    assert_eq!(k["host"], s.target.as_str());
    assert_eq!(k["ok"], true);
    assert_eq!(k["port_free"], true);
    assert!(
        testkit::wait_gone(&[pid], Duration::from_secs(3)),
        "srv-kill over SSH left the server running"
    );
}

#[test]
fn match_over_ssh_spares_the_ssh_session_running_it() {
    let s = sshd();
    let token = format!("ssh-match-token-{}", std::process::id());
    let mut c = Command::new("sh");
    c.arg("-c").arg(format!("sleep 60; : {token}"));
    let victim = testkit::Guard::spawn(c);
    std::thread::sleep(Duration::from_millis(200));
    let out = testkit::call("srv-kill")
        .args(s.host_flags())
        .args(["--match", &token, "--grace", "2s"])
        .run();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let k = &json_lines(&out.stdout)[0];
    let matched = k["matched"].as_array().unwrap();
    assert!(
        matched
            .iter()
            .any(|m| m["pid"].as_u64() == Some(victim.pid() as u64)),
        "{matched:?}"
    );
    // Only the victim and its child: not srv-kill, not the remote shell, not sshd.
    for m in matched {
        let c = m["command"].as_str().unwrap();
        assert!(c.contains(&token) || c == "sleep 60", "matched {c}");
        assert!(
            !c.contains("srv-kill") && !c.contains("sshd"),
            "matched {c}"
        );
    }
}

#[test]
fn an_unknown_host_key_is_refused_and_accept_new_host_trusts_it() {
    let s = sshd();
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("known_hosts");
    std::fs::write(&empty, "").unwrap();
    let kill = |extra: &[&str]| {
        testkit::call("srv-kill")
            .args(["--host", &s.target, "--identity", &s.key])
            .args(["--known-hosts", empty.to_str().unwrap()])
            .args(["--match", "no-such-process-4711", "--missing-ok"])
            .args(extra)
            .run()
    };
    let out = kill(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown host key") && err.contains("--accept-new-host"),
        "{err}"
    );

    let out = kill(&["--accept-new-host"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written = std::fs::read_to_string(&empty).unwrap();
    assert!(
        written.contains(&format!("[127.0.0.1]:{} ssh-ed25519 ", s.port)),
        "{written}"
    );
    // Now known: accepted without the flag.
    let out = kill(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // srv-launch refuses the same way.
    std::fs::write(&empty, "").unwrap();
    let out = testkit::call("srv-launch")
        .args(["--host", &s.target, "--identity", &s.key])
        .args(["--known-hosts", empty.to_str().unwrap()])
        .args([
            "--cmd",
            "sleep 1",
            "--ready-url",
            "http://127.0.0.1:{port}/",
        ])
        .run();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("srv-launch: error: ssh "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_changed_host_key_is_refused() {
    let s = sshd();
    let dir = tempfile::tempdir().unwrap();
    // Another ed25519 key under this host's name: what a man in the middle looks like.
    let other = dir.path().join("other");
    let keygen = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-f",
            other.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(keygen.status.success());
    let pubkey = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let fields: Vec<&str> = pubkey.split_whitespace().collect();
    let kh = dir.path().join("known_hosts");
    std::fs::write(
        &kh,
        format!("[127.0.0.1]:{} {} {}\n", s.port, fields[0], fields[1]),
    )
    .unwrap();
    let out = testkit::call("srv-kill")
        .args(["--host", &s.target, "--identity", &s.key])
        .args(["--known-hosts", kh.to_str().unwrap(), "--accept-new-host"])
        .args(["--match", "no-such-process-4711"])
        .run();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("HOST KEY CHANGED"), "{err}");
}

#[test]
fn a_wrong_key_is_a_clear_auth_error() {
    let s = sshd();
    let out = testkit::call("srv-launch")
        .args(["--host", &s.target, "--identity", &s.wrong_key])
        .args(["--known-hosts", &s.known_hosts])
        .args([
            "--cmd",
            "sleep 1",
            "--ready-url",
            "http://127.0.0.1:{port}/",
        ])
        .run();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("authentication failed") && err.contains(&s.wrong_key),
        "{err}"
    );
}

#[test]
fn nothing_listening_and_a_missing_remote_program_are_clear_errors() {
    let s = sshd();
    let port = free_port();
    let out = testkit::call("srv-kill")
        .args(["--host", &format!("127.0.0.1:{port}"), "--identity", &s.key])
        .args(["--pid", "1"])
        .run();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("connection refused"), "{err}");

    let out = testkit::call("srv-launch")
        .args([
            "vllm",
            "--model",
            "m",
            "--host",
            &s.target,
            "--identity",
            &s.key,
        ])
        .args(["--known-hosts", &s.known_hosts])
        .run();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("'vllm' not found on"), "{err}");
}

#[test]
fn an_engine_over_ssh_waits_for_readiness_and_binds_all_interfaces() {
    let s = sshd();
    let sim = testkit::bin("srv-sim").display().to_string();
    let out = testkit::call("srv-launch")
        .args([
            "sim",
            "--bin",
            &sim,
            "--host",
            &s.target,
            "--identity",
            &s.key,
        ])
        .args(["--known-hosts", &s.known_hosts, "--probe"])
        .args(["--", "--startup", "2s"])
        .run();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r = &json_lines(&out.stdout)[0];
    assert!(r["ready_s"].as_f64().unwrap() >= 2.0, "{r}");
    let command = r["command"].as_str().unwrap();
    assert!(command.contains("--host 0.0.0.0 --port "), "{command}");
    // Clients reach it at the SSH host's address.
    assert!(r["url"].as_str().unwrap().starts_with("http://127.0.0.1:"));
    let pid = r["pid"].as_u64().unwrap() as u32;
    let out = testkit::call("srv-kill")
        .args(s.host_flags())
        .args(["--pid", &pid.to_string()])
        .run();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_lines(&out.stdout)[0]["ok"], true);
    assert!(!alive(pid));
}
