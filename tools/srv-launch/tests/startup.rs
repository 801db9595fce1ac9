//! The startup in phases: srv-launch reads the server's log while it waits and writes each
//! phase the engine reported into the `server` record. srv-sim `--startup 4s` logs vLLM's lines
//! at known shares of the 4 s (its src/startup.rs), so each phase is checked exactly: its name,
//! its order, the duration the engine printed, seen no earlier than it was written and no
//! later than ready. Here and over the loopback sshd.

use std::process::Stdio;
use testkit::startup::startup_phases;
use testkit::{bin_dir, cmd, json_lines, kill_records, sshd, stderr};

/// srv-sim's phases for `--startup 4s`: name, written at (s after its start), printed duration.
const SIM_4S: &[(&str, f64, Option<f64>)] = &[
    ("load_start", 0.0, None),
    ("weights", 1.0, Some(1.0)),
    ("compile", 2.0, Some(1.0)),
    ("graph_capture", 3.0, Some(1.0)),
    ("kv_cache", 3.5, None),
    ("engine_init", 3.5, Some(2.5)),
    ("listening", 4.0, None),
    ("ready", 4.0, None),
];

fn check_sim_phases(r: &serde_json::Value) {
    let names: Vec<&str> = SIM_4S.iter().map(|p| p.0).collect();
    let got = startup_phases(r, &names);
    for ((name, at_s, took_s), (_, written_at, printed)) in got.iter().zip(SIM_4S) {
        // srv-launch's clock starts before srv-sim's, and a line is seen after it is written.
        assert!(
            at_s >= written_at,
            "{name} seen at {at_s} s, written at {written_at} s: {r}"
        );
        assert_eq!(took_s, printed, "{name}: {r}");
    }
    assert!(r["ready_s"].as_f64().unwrap() >= 4.0, "{r}");
}

fn kill(r: &serde_json::Value, ssh: &[&str]) {
    let out = cmd("srv-kill")
        .args(ssh)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            writeln!(c.stdin.take().unwrap(), "{r}")?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(kill_records(&out.stdout)[0]["ok"], true, "{}", stderr(&out));
}

#[test]
fn srv_sim_startup_phases_are_in_the_server_record_and_a_reused_logs_old_lines_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sim.log");
    // The previous run's lines in the same --log: not this startup's.
    std::fs::write(
        &log,
        "Loading weights took 99.00 seconds\nINFO:     Application startup complete.\n",
    )
    .unwrap();
    let out = testkit::call("srv-launch")
        .args([
            "sim",
            "--log",
            log.to_str().unwrap(),
            "--",
            "--startup",
            "4s",
        ])
        .run();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = &json_lines(&out.stdout)[0];
    check_sim_phases(r);
    kill(r, &[]);
}

#[test]
fn srv_sim_startup_phases_are_read_from_the_log_over_ssh() {
    let s = sshd();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("remote-sim.log");
    let sim = bin_dir().join("srv-sim");
    let ssh = ["--identity", &s.key, "--known-hosts", &s.known_hosts];
    let out = testkit::call("srv-launch")
        .args(["sim", "--host", &s.target])
        .args(ssh)
        .args(["--bin", sim.to_str().unwrap(), "--bind", "127.0.0.1"])
        .args(["--log", log.to_str().unwrap(), "--", "--startup", "4s"])
        .run();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = &json_lines(&out.stdout)[0];
    assert_eq!(r["host"], s.target.as_str());
    check_sim_phases(r);
    // The record names its host; srv-kill reaches it with the same keys.
    kill(r, &ssh);
}
