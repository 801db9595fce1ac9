//! The engine's step log read for each point, against srv-sim's truth: launched by srv-launch
//! `--self-report` (which adds vLLM's `--enable-logging-iteration-details`), srv-sim logs every
//! step it runs, and each point's `engine_steps` are exactly the step lines its window holds:
//! their count, their times, their tokens. A server that does not log its steps gives no
//! `engine_steps` and, when it was started to log them, one note. A server on another host has
//! its log read over SSH (the loopback sshd).

mod steps;

use servbench::record::SummaryRecord;
use steps::{every_points_steps, records, server_logging_to};
use testkit::sh;

/// (context requests, context tokens, generation requests, generation tokens, ms) of every
/// `Iteration(N)` line of srv-sim's log, in order: the test's own reading of the lines.
fn logged(log: &str) -> Vec<(u64, u64, u64, u64, f64)> {
    log.lines()
        .filter_map(|l| l.split_once(": Iteration(").map(|(_, rest)| rest))
        .map(|rest| {
            let n: Vec<f64> = rest
                .split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter_map(|s| s.parse().ok())
                .collect();
            (n[1] as u64, n[2] as u64, n[3] as u64, n[4] as u64, n[5])
        })
        .collect()
}

fn summaries(text: &str) -> Vec<SummaryRecord> {
    records(text, "summary")
}

#[test]
fn each_points_engine_steps_are_the_step_lines_srv_sim_logged_in_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let (requests, max_tokens) = (8u64, 8u64);
    let out = sh(&format!(
        "srv-launch sim --self-report > {d}/server.jsonl && \
         loadgen -c 1,4 -n {requests} --max-tokens {max_tokens} < {d}/server.jsonl > {d}/run.jsonl; \
         rc=$?; srv-kill --from {d}/server.jsonl > /dev/null; exit $rc"
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let server: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("server.jsonl")).unwrap())
            .unwrap();
    let log = std::fs::read_to_string(server["log"].as_str().unwrap()).unwrap();
    let lines = logged(&log);
    let points = summaries(&std::fs::read_to_string(dir.path().join("run.jsonl")).unwrap());
    assert_eq!(points.len(), 2);
    // No step of srv-sim's ran outside a point (no warmup; the prompt probes only tokenize);
    // one request at a time: a prefill step (its first token) and max_tokens - 1 decode steps.
    let steps = every_points_steps(&points, lines.len(), &log, requests * max_tokens);
    let mut at = 0;
    for (s, e) in points.iter().zip(&steps) {
        let mine = &lines[at..at + e.steps as usize];
        at += e.steps as usize;
        let ms: Vec<f64> = mine.iter().map(|l| l.4).collect();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // vLLM's elapsed times, kept as what they are: the engine core's wait for each result.
        let wait = e.result_wait_ms.expect("the logged elapsed times");
        assert!(close(wait.sum, ms.iter().sum()), "{e:?}");
        assert!(close(wait.mean, ms.iter().sum::<f64>() / ms.len() as f64));
        assert_eq!(wait.max, ms.iter().copied().fold(0.0, f64::max));
        // The step: the point's busy window over its steps.
        assert!(e.busy_s > 0.0 && e.busy_s <= e.window_s, "{e:?}");
        assert!(
            close(e.step_ms_mean * e.steps as f64, e.busy_s * 1e3),
            "{e:?}"
        );
        assert!(close(e.steps_per_s * e.busy_s, e.steps as f64), "{e:?}");
        assert_eq!(e.ctx_tokens_total, mine.iter().map(|l| l.1).sum::<u64>());
        assert_eq!(e.gen_tokens_total, mine.iter().map(|l| l.3).sum::<u64>());
        // Each request's prefill makes its first token, each decode step one more.
        assert_eq!(
            e.gen_tokens_total + mine.iter().map(|l| l.0).sum::<u64>(),
            s.output_tokens
        );
        assert_eq!(e.ctx_tokens_total, s.prompt_tokens);
        assert_eq!((e.malformed_lines, e.log_cut), (0, false));
    }
    let c1 = steps[0];
    assert_eq!(
        (c1.decode_steps, c1.decode_full_batch),
        (requests * (max_tokens - 1), Some(1))
    );
    assert_eq!(c1.prefill_share, 1.0 / max_tokens as f64);
    assert_eq!(steps[1].decode_full_batch, Some(4));
    assert!(!stderr.contains("engine step log"), "{stderr}");
}

#[test]
fn a_server_started_to_log_steps_that_logs_none_gets_one_note_and_no_engine_steps() {
    // A record that says its server logs steps, with a log that has none: srv-sim without the
    // flag, started by hand, its log a file of our own.
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = testkit::srv_sim(&[]);
    let log = dir.path().join("server.log");
    std::fs::write(&log, "INFO not a step line\n").unwrap();
    let server = server_logging_to(dir.path(), &url, &log, 1);
    let out = sh(&format!(
        "loadgen -c 1,2 -n 2 --max-tokens 2 < {}",
        server.display()
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let points = summaries(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(points.len(), 2);
    assert!(points.iter().all(|s| s.engine_steps.is_none()));
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("engine step log"))
        .collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(notes[0].contains("no step line"), "{stderr}");
}

#[test]
fn a_remote_servers_step_log_is_read_over_ssh() {
    // srv-sim here, its log a file of ours, and a record that names the loopback sshd as its
    // host: loadgen reads the log's size and bytes over SSH, as for a server on another box.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sim.log");
    let port = testkit::free_port();
    let mut cmd = std::process::Command::new(testkit::bin("srv-sim"));
    cmd.args([
        "--port",
        &port.to_string(),
        "--enable-logging-iteration-details",
    ])
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap());
    let _sim = testkit::Guard::spawn(cmd);
    assert!(
        testkit::wait_port(port, std::time::Duration::from_secs(20)),
        "srv-sim never listened"
    );
    let sshd = testkit::sshd();
    let url = format!("http://127.0.0.1:{port}");
    let record = serde_json::json!({
        "kind": "server", "v": 1, "ts": "2026-12-02T00:00:00.000Z", "engine": "sim",
        "host": sshd.target, "pid": 1, "pgid": 1, "start_ticks": 1, "port": port,
        "url": url, "command": "srv-sim --enable-logging-iteration-details",
        "log": log.to_str().unwrap(), "ready_s": 0.1,
        "argv": ["srv-sim", "--enable-logging-iteration-details"]
    });
    let server = dir.path().join("server.jsonl");
    std::fs::write(&server, format!("{record}\n")).unwrap();
    let out = sh(&format!(
        "loadgen -c 1 -n 3 --max-tokens 4 --identity {} --known-hosts {} < {}",
        sshd.key,
        sshd.known_hosts,
        server.display()
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let points = summaries(&String::from_utf8_lossy(&out.stdout));
    let e = points[0]
        .engine_steps
        .as_ref()
        .expect("engine_steps over SSH");
    let lines = logged(&std::fs::read_to_string(&log).unwrap());
    assert_eq!((e.steps, lines.len() as u64), (3 * 4, 3 * 4), "{stderr}");
    let wait = e.result_wait_ms.expect("the logged elapsed times");
    assert!(
        (wait.sum - lines.iter().map(|l| l.4).sum::<f64>()).abs() < 1e-9,
        "{e:?}"
    );
    assert!(!stderr.contains("engine step log"), "{stderr}");
}

#[test]
fn sl_dp2_each_data_parallel_engines_steps_are_read_apart() {
    // srv-sim with two data-parallel replicas: each logs its own `Engine 00k:` lines into the
    // one log, and each point gives each engine's steps and rate, their sum named as a sum.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let out = sh(&format!(
        "srv-launch sim --self-report -- --gpus 2 > {d}/server.jsonl && \
         loadgen -c 4 -n 16 --max-tokens 8 < {d}/server.jsonl > {d}/run.jsonl; \
         rc=$?; srv-kill --from {d}/server.jsonl > /dev/null; exit $rc"
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let server: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("server.jsonl")).unwrap())
            .unwrap();
    let log = std::fs::read_to_string(server["log"].as_str().unwrap()).unwrap();
    let points = summaries(&std::fs::read_to_string(dir.path().join("run.jsonl")).unwrap());
    let e = points[0].engine_steps.as_ref().expect("engine_steps");
    assert_eq!((e.engines, e.per_engine.len()), (2, 2), "{e:?}");
    for p in &e.per_engine {
        let mine = log
            .lines()
            .filter(|l| l.contains(&format!("Engine {:03}: Iteration(", p.engine)))
            .count() as u64;
        // Each engine's own lines, none of the other's.
        assert_eq!(p.steps, mine, "engine {}: {e:?}", p.engine);
        assert!((p.steps_per_s * e.busy_s - p.steps as f64).abs() < 1e-6);
    }
    assert_eq!(e.steps, e.per_engine.iter().map(|p| p.steps).sum::<u64>());
    let sum: f64 = e.per_engine.iter().map(|p| p.steps_per_s).sum();
    assert!((e.steps_per_s - sum).abs() < 1e-9, "{e:?}");
    // The step is each engine's, not the pool's: about twice the pooled figure.
    let pooled_ms = e.busy_s * 1e3 / e.steps as f64;
    assert!(e.step_ms_mean > 1.5 * pooled_ms, "{e:?}");
}

#[test]
fn steplog_fifo_a_server_log_that_is_a_fifo_does_not_hang_the_point() {
    // A record whose log is a named pipe with no writer: opening it would block forever. The
    // point ends on time, with one note and no engine_steps.
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = testkit::srv_sim(&[]);
    let fifo = dir.path().join("slfifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let server = server_logging_to(dir.path(), &url, &fifo, 3);
    let out = sh(&format!(
        "timeout 60 loadgen -c 2 --duration 1s --max-tokens 4 --input-len 8 --no-requests < {}",
        server.display()
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let points = summaries(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(points.len(), 1, "{stderr}");
    assert!(points[0].engine_steps.is_none());
    assert!(stderr.contains("not a regular file"), "{stderr}");
}
