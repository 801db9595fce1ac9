//! Cards and measured curves that are no model of anything are refused naming the file, and an
//! engine that dies takes the server with it (issue 21 section 5: C1-C5, D1).

mod common;
use common::*;
use std::time::{Duration, Instant};

/// A real two-rank curve from collbench, as JSON values.
fn measured_curve() -> Vec<serde_json::Value> {
    let out = testkit::cmd("collbench")
        .args(["-np", "2", "--mode", "latency", "-b", "1K", "-e", "16K"])
        .args(["-n", "5", "-w", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    testkit::json_lines(&out.stdout)
}

fn write_lines(path: &std::path::Path, records: &[serde_json::Value]) {
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// C1-C4: a negative, zero or huge mean, 0 bytes, or wrong results became 413 tok/s instead
/// of 6.3, nulls, or an engine panic behind a healthy /health. Now the dry run and the server
/// both refuse the file at the line, exit 2, before listening.
#[test]
fn hostile_comm_from_records_are_refused_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = measured_curve();
    let first_coll = good.iter().position(|r| r["kind"] == "coll").unwrap();
    type Spoil = fn(&mut serde_json::Value);
    let cases: [(&str, Spoil, &str); 5] = [
        (
            "neg",
            |r| r["time_us"]["mean"] = (-1000.0).into(),
            "time_us.mean is -1000",
        ),
        (
            "zero",
            |r| r["time_us"]["mean"] = 0.0.into(),
            "time_us.mean is 0",
        ),
        (
            "big",
            |r| r["time_us"]["mean"] = 1e308.into(),
            "time_us.mean is 1e308",
        ),
        ("bytes", |r| r["bytes"] = 0.into(), "bytes is 0"),
        ("wrong", |r| r["wrong"] = 12345.into(), "wrong is 12345"),
    ];
    for (name, spoil, want) in cases {
        let mut records = good.clone();
        spoil(&mut records[first_coll]);
        let path = dir.path().join(format!("{name}.jsonl"));
        write_lines(&path, &records);
        let p = path.to_str().unwrap();
        let at = format!("--comm-from: {p}:{}: {want}", first_coll + 1);
        for serve in [false, true] {
            let mut args = vec!["--tp", "2", "--comm-from", p];
            if serve {
                args.extend(["--port", "0"]);
            } else {
                args.push("--dry-run");
            }
            let out = testkit::run("srv-sim", &args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name} serve={serve}: {err}");
            assert!(
                err.contains(&at) && !err.contains("listening"),
                "{name} serve={serve}: {err}"
            );
            assert!(out.stdout.is_empty());
        }
    }
    // The untouched curve still runs.
    let path = dir.path().join("good.jsonl");
    write_lines(&path, &good);
    let plan = dry_run(&["--tp", "2", "--comm-from", path.to_str().unwrap()]);
    assert!(plan["roofline_tok_s"].as_f64().unwrap() > 0.0, "{plan}");
}

/// C5: one size measured was extrapolated to megabytes without a word.
#[test]
fn a_comm_from_curve_of_one_size_is_used_with_a_warning_that_it_is_extrapolated() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = measured_curve();
    let first = records
        .iter()
        .find(|r| r["kind"] == "coll")
        .unwrap()
        .clone();
    records.retain(|r| r["kind"] != "coll" || r["bytes"] == first["bytes"]);
    let path = dir.path().join("one.jsonl");
    write_lines(&path, &records);
    let out = testkit::run(
        "srv-sim",
        &[
            "--dry-run",
            "--tp",
            "2",
            "--comm-from",
            path.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "srv-sim: warning: --comm-from {}: one size measured ({} B): every other size is extrapolated",
            path.display(),
            first["bytes"]
        )) && err.contains("collbench -np 2 --mode latency"),
        "{err}"
    );
}

/// D1: model cards were not checked: a negative params gave a negative roofline (and an
/// engine panic when serving), layers 0 a KV cache of u64::MAX tokens.
#[test]
fn hostile_model_cards_are_refused_naming_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let card = testkit::run("srv-sim", &["--print-card", "llama-3.1-8b"]);
    assert!(card.status.success());
    let card: serde_json::Value = serde_json::from_slice(&card.stdout).unwrap();
    let cases: [(&str, serde_json::Value, &str); 3] = [
        ("params", (-8e9).into(), "params is -8000000000"),
        ("layers", 0.into(), "layers is 0"),
        ("kv_heads", 0.into(), "kv_heads is 0"),
    ];
    for (field, value, want) in cases {
        let mut bad = card.clone();
        bad[field] = value;
        let path = dir.path().join(format!("{field}.json"));
        std::fs::write(&path, bad.to_string()).unwrap();
        let p = path.to_str().unwrap();
        for serve in [false, true] {
            let mode = if serve { "--port" } else { "--dry-run" };
            let mut args = vec!["--model-card", p, mode];
            if serve {
                args.push("0");
            }
            let out = testkit::run("srv-sim", &args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{field}: {err}");
            assert!(
                err.starts_with(&format!("srv-sim: error: --model: {p}: {want}")),
                "{field}: {err}"
            );
        }
    }
}

/// An engine-thread panic (as a step time Duration could not hold once caused) left HTTP up:
/// /health said 200 and every request hung. Now the process ends, non-zero, and a client sees
/// a dead server.
#[test]
fn an_engine_thread_panic_ends_srv_sim_instead_of_leaving_a_healthy_server_that_never_answers() {
    let mut sim = start(&["--engine-panic-after", "0"]);
    assert_eq!(get(sim.port, "/health").0, 200);
    let port = sim.port;
    // The request's first step panics the engine; the answer never completes.
    let client =
        std::thread::spawn(move || post(port, "/v1/completions", &completion_body(4, 8, true)));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = sim.guard.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "srv-sim still running 10 s after its engine thread panicked"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(101), "{status}");
    let answer = client.join().unwrap();
    assert!(
        answer.truncated || answer.token_events().is_empty(),
        "the request completed: {answer:?}"
    );
    // Nobody answers /health any more.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    // The flag belongs to the modelled engine.
    let out = testkit::run(
        "srv-sim",
        &["--ttft", "1ms", "--engine-panic-after", "1", "--port", "0"],
    );
    assert_eq!(out.status.code(), Some(2));
}
