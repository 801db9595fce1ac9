//! loadgen's reads on the server's host over SSH when that host's login is not clean
//! (tried-to-break-it-4.md): SSH-log-banner and SSH-log-close (the engine step log of a server
//! record whose host prints a banner, or ends the session), SSH-close-gpu (`--gpu-host` on a
//! host that ends the session). Each host is an OpenSSH server of the test's own on 127.0.0.1.

use std::time::Duration;
use testkit::own_sshd::{BANNER_LOGIN, CLOSE_LOGIN, LoginSshd};

/// srv-sim writing its step lines to `log`, on a free port; its guard and URL.
fn sim_with_a_step_log(log: &std::path::Path) -> (testkit::Guard, u16) {
    let port = testkit::free_port();
    let mut cmd = std::process::Command::new(testkit::bin("srv-sim"));
    cmd.args([
        "--port",
        &port.to_string(),
        "--enable-logging-iteration-details",
    ])
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(log).unwrap());
    let guard = testkit::Guard::spawn(cmd);
    assert!(
        testkit::wait_port(port, Duration::from_secs(20)),
        "srv-sim never listened"
    );
    (guard, port)
}

/// A server record for the srv-sim on `port` whose log is `log` on `host`.
fn record(host: &LoginSshd, port: u16, log: &std::path::Path) -> String {
    serde_json::json!({
        "kind": "server", "v": 1, "ts": "2026-12-02T00:00:00.000Z", "engine": "sim",
        "host": host.sshd.target, "pid": 1, "pgid": 1, "start_ticks": 1, "port": port,
        "url": format!("http://127.0.0.1:{port}"),
        "command": "srv-sim --enable-logging-iteration-details",
        "log": log.to_str().unwrap(), "ready_s": 0.1,
        "argv": ["srv-sim", "--enable-logging-iteration-details"]
    })
    .to_string()
        + "\n"
}

fn load(host: &LoginSshd, record: String) -> testkit::run::Run {
    testkit::call("loadgen")
        .args(["-c", "1", "-n", "3", "--max-tokens", "4", "--no-gpu"])
        .args([
            "--identity",
            &host.sshd.key,
            "--known-hosts",
            &host.known_hosts,
        ])
        .stdin(record)
        .within(Duration::from_secs(90))
        .run()
}

/// SSH-log-banner: the log's size was parsed from all of stdout, banner included, and the log
/// was called missing ("it does not exist").
#[test]
fn a_step_log_on_a_host_with_a_login_banner_is_read_past_the_banner() {
    let dir = tempfile::tempdir().unwrap();
    let host = LoginSshd::start(dir.path(), BANNER_LOGIN);
    let log = dir.path().join("sim.log");
    let (_sim, port) = sim_with_a_step_log(&log);
    let run = load(&host, record(&host, port, &log));
    let (code, _, stderr) = run.texts();
    assert_eq!(code, Some(0), "{stderr}");
    let summary = run
        .values()
        .into_iter()
        .find(|v| v["kind"] == "summary")
        .unwrap();
    let lines = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(": Iteration("))
        .count();
    assert!(lines > 0);
    assert_eq!(summary["engine_steps"]["steps"], lines, "{summary}");
    assert!(!stderr.contains("engine step log"), "{stderr}");
}

/// SSH-log-close: a host that ran none of the command is "could not be read", not a log that
/// does not exist.
#[test]
fn a_step_log_on_a_host_that_ends_the_session_could_not_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let host = LoginSshd::start(dir.path(), CLOSE_LOGIN);
    let log = dir.path().join("sim.log");
    let (_sim, port) = sim_with_a_step_log(&log);
    let run = load(&host, record(&host, port, &log));
    let (code, _, stderr) = run.texts();
    assert_eq!(code, Some(0), "{stderr}");
    let note = stderr
        .lines()
        .find(|l| l.contains("note: engine step log"))
        .unwrap_or_else(|| panic!("no note: {stderr}"));
    assert!(
        note.contains("cannot read what it is") && note.contains("ran none of the command"),
        "{note}"
    );
    assert!(!note.contains("does not exist"), "{note}");
}

/// SSH-close-gpu: `--gpu-host` on a host that ran nothing gave no GPUs and no note.
#[test]
fn gpu_telemetry_on_a_host_that_ends_the_session_is_noted() {
    let dir = tempfile::tempdir().unwrap();
    let host = LoginSshd::start(dir.path(), CLOSE_LOGIN);
    let (_sim, url) = testkit::srv_sim(&["--ttft", "1ms", "--itl", "0"]);
    let run = testkit::call("loadgen")
        .url(&url)
        .args(["-c", "1", "-n", "3", "--max-tokens", "4", "--no-metrics"])
        .args(["--gpu-host", &host.sshd.target])
        .args([
            "--identity",
            &host.sshd.key,
            "--known-hosts",
            &host.known_hosts,
        ])
        .within(Duration::from_secs(90))
        .run();
    let (code, _, stderr) = run.texts();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("no GPU telemetry") && l.contains("ran none of the command")),
        "{stderr}"
    );
}
