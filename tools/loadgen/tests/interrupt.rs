//! Ctrl-C/SIGTERM at every moment of a run: while nothing is in flight (an open-loop gap, a
//! trace's gap, a conversation's think time) as much as mid-request. Each time: the point's
//! summary is partial and says `interrupted`, no next point starts, exit 130. The signal is
//! sent once loadgen has written the records named (never after a guessed sleep).

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use testkit::of_kind;

/// Starts loadgen with `args`; returns it and its stdout's records as they come.
fn start(args: &[&str]) -> (Child, mpsc::Receiver<Value>) {
    let mut child = testkit::cmd("loadgen")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start loadgen");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    (child, rx)
}

/// Waits for `n` records of `kind` (all records seen so far come back), then sends `sig`;
/// returns every record written and the exit code.
fn signal_after(
    args: &[&str],
    kind: &str,
    n: usize,
    sig: i32,
) -> (Option<i32>, Vec<Value>, String) {
    send_after(args, kind, n, |pid| {
        // SAFETY: signalling the child this test spawned, by its pid.
        unsafe {
            libc::kill(pid as i32, sig);
        }
    })
}

/// [`signal_after`], with `send` given loadgen's pid to signal it.
fn send_after(
    args: &[&str],
    kind: &str,
    n: usize,
    send: impl FnOnce(u32),
) -> (Option<i32>, Vec<Value>, String) {
    let (mut child, rx) = start(args);
    let mut recs = Vec::new();
    while recs.iter().filter(|r: &&Value| r["kind"] == kind).count() < n {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(v) => recs.push(v),
            Err(_) => {
                let _ = child.kill();
                panic!("loadgen {args:?} wrote no {n} {kind} record(s) within 20 s: {recs:?}");
            }
        }
    }
    send(child.id());
    let out = testkit::wait_output(&mut child, Duration::from_secs(20));
    recs.extend(rx.try_iter());
    (
        out.status.code(),
        recs,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The one summary written is partial, says interrupted, and no other point ran; exit 130.
fn assert_cut_once(what: &str, code: Option<i32>, recs: &[Value], err: &str) {
    let sums = of_kind(recs, "summary");
    assert_eq!(code, Some(130), "{what}: exit; stderr: {err}");
    assert_eq!(sums.len(), 1, "{what}: no next point: {sums:?}");
    assert_eq!(sums[0]["partial"], true, "{what}: {}", sums[0]);
    assert_eq!(sums[0]["stopped_by"], "interrupted", "{what}: {}", sums[0]);
    assert_eq!(sums[0]["point"]["index"], 0, "{what}");
}

#[test]
fn a_signal_in_an_open_loop_gap_cuts_the_point_and_runs_no_next_one() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    // Was a race (2 in 3 lost): tried three times, with each signal.
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGINT] {
        let (code, recs, err) = signal_after(
            &[
                "--url",
                &url,
                "-r",
                "0.2,5",
                "--arrival",
                "constant",
                "-n",
                "3",
                "--input-len",
                "8",
                "--max-tokens",
                "4",
                "--no-metrics",
            ],
            "request",
            1,
            sig,
        );
        assert_cut_once("open loop at 0.2 req/s", code, &recs, &err);
        assert_eq!(of_kind(&recs, "request").len(), 1);
    }
}

#[test]
fn a_signal_in_a_trace_gap_cuts_the_point() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("gap.jsonl");
    let rows = [0, 200, 60_000]
        .iter()
        .map(|ts| format!(r#"{{"timestamp":{ts},"input_length":16,"output_length":4}}"#))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&trace, rows).unwrap();
    // Was a race: tried three times.
    for _ in 0..3 {
        let (code, recs, err) = signal_after(
            &[
                "--url",
                &url,
                "--trace",
                trace.to_str().unwrap(),
                "--trace-speed",
                "1,2",
                "--no-metrics",
            ],
            "request",
            2,
            libc::SIGINT,
        );
        assert_cut_once("trace with a 60 s gap", code, &recs, &err);
        assert_eq!(of_kind(&recs, "request").len(), 2);
    }
}

#[test]
fn a_signal_in_think_time_cuts_the_point() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    // Was a race: tried three times.
    for _ in 0..3 {
        let (code, recs, err) = signal_after(
            &[
                "--url",
                &url,
                "--api",
                "chat",
                "-c",
                "2,4",
                "-n",
                "2",
                "--turns",
                "3",
                "--think-time",
                "60s",
                "--input-len",
                "8",
                "--max-tokens",
                "4",
                "--no-metrics",
            ],
            "request",
            2,
            libc::SIGINT,
        );
        assert_cut_once("conversations thinking for 60 s", code, &recs, &err);
        assert_eq!(of_kind(&recs, "request").len(), 2, "first turns only");
    }
}

/// I2 still holds: a Ctrl-C during a `--find-max` probe ends the search as interrupted, with
/// the probe's point partial, exit 130.
#[test]
fn a_signal_mid_find_max_writes_an_interrupted_search() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    let (code, recs, err) = signal_after(
        &[
            "--url",
            &url,
            "--find-max",
            "concurrency",
            "-c",
            "2",
            "--duration",
            "30s",
            "--slo",
            "ttft_ms=500",
            "--input-len",
            "8",
            "--max-tokens",
            "4",
            "--no-metrics",
        ],
        "request",
        3,
        libc::SIGINT,
    );
    assert_cut_once("--find-max concurrency", code, &recs, &err);
    let search = of_kind(&recs, "search");
    assert_eq!(search.len(), 1, "{recs:?}");
    assert_eq!(search[0]["stopped_by"], "interrupted", "{}", search[0]);
}

/// BROKE 2 (TIMEOUT): GNU `timeout` sends TERM to loadgen and then to its whole group, so two
/// TERMs come at once from one sender. They are one delivery, not "again to quit now": the
/// partial summary is written (2 in 10 runs lost it).
#[test]
fn a_timeout_wrapper_signalling_twice_keeps_the_partial_summary() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    let args = [
        "--url",
        &url,
        "-c",
        "2",
        "--duration",
        "60s",
        "--input-len",
        "8",
        "--max-tokens",
        "4",
        "--no-metrics",
    ];
    // What `timeout` does, without its timing: two TERMs from one process, back to back.
    for _ in 0..3 {
        let (code, recs, err) = send_after(&args, "request", 2, |pid| {
            let sent = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("kill -TERM {pid}; kill -TERM {pid}"))
                .status()
                .unwrap();
            assert!(sent.success());
        });
        assert_cut_once("two TERMs from one sender", code, &recs, &err);
    }
    // And `timeout` itself, as the report ran it.
    for _ in 0..3 {
        let out = testkit::bash(&format!(
            "timeout 2 loadgen {} --no-requests; echo \"rc=$?\" >&2",
            args.join(" ")
        ));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("rc=124"), "{err}");
        let recs = testkit::json_lines(&out.stdout);
        let sums = of_kind(&recs, "summary");
        assert_eq!(sums.len(), 1, "the partial summary was lost: {err}");
        assert_eq!(sums[0]["stopped_by"], "interrupted", "{}", sums[0]);
    }
}
