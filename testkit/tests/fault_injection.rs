//! The main pipeline, `srv-launch sim | loadgen | srv-kill | summarize`, under each of srv-sim's
//! injected faults and with the last reader failing. Whatever goes wrong: no server is left
//! running, every finished request is recorded exactly once (its point's summary counts it),
//! and each tool's exit code says what happened to it.

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use testkit::{alive, bash, json_lines, wait_gone};

/// One run of the pipeline: each tool's exit code and what passed between them.
struct Run {
    /// Exit codes of srv-launch, loadgen, srv-kill and summarize.
    codes: [i32; 4],
    launch: Vec<Value>,
    load: Vec<Value>,
    kill: Vec<Value>,
    stderr: String,
}

/// Runs the pipeline with `fault` given to srv-sim, `loadgen` flags, and `summarize` flags;
/// `tee` keeps what each stage wrote (it passes everything on unchanged). Each stage is bounded
/// by `timeout`, so a hang fails the test instead of stalling it.
fn pipeline(fault: &str, loadgen: &str, summarize: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let out = bash(&format!(
        "timeout 60 srv-launch sim --timeout 30s -- --ttft 1ms --itl 1ms {fault} | tee {d}/launch.jsonl \
         | timeout 60 loadgen {loadgen} | tee {d}/load.jsonl \
         | timeout 60 srv-kill --grace 2s | tee {d}/kill.jsonl \
         | timeout 60 summarize {summarize} > {d}/table.txt; \
         echo \"${{PIPESTATUS[0]}} ${{PIPESTATUS[2]}} ${{PIPESTATUS[4]}} ${{PIPESTATUS[6]}}\""
    ));
    let codes: Vec<i32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .collect();
    let read = |name: &str| json_lines(&std::fs::read(dir.path().join(name)).unwrap_or_default());
    Run {
        codes: codes.try_into().expect("four exit codes"),
        launch: read("launch.jsonl"),
        load: read("load.jsonl"),
        kill: read("kill.jsonl"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn of_kind<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

/// What every case must hold: the server is gone, and each point's finished requests are
/// recorded once each, as many as its summary counts. Returns the summaries.
fn check(case: &str, run: &Run) -> Vec<Value> {
    let server = of_kind(&run.launch, "server");
    assert_eq!(server.len(), 1, "{case}: {}", run.stderr);
    let pid = server[0]["pid"].as_u64().unwrap() as u32;
    assert!(
        wait_gone(&[pid], Duration::from_secs(5)),
        "{case}: the server (pid {pid}) was left running: {}",
        run.stderr
    );
    let mut ids: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for r in of_kind(&run.load, "request") {
        ids.entry(r["point"]["index"].as_u64().unwrap())
            .or_default()
            .push(r["id"].as_u64().unwrap());
    }
    let summaries: Vec<Value> = of_kind(&run.load, "summary").into_iter().cloned().collect();
    assert!(!summaries.is_empty(), "{case}: {}", run.stderr);
    for s in &summaries {
        let point = s["point"]["index"].as_u64().unwrap();
        let mut got = ids.remove(&point).unwrap_or_default();
        got.sort_unstable();
        let n = got.len();
        got.dedup();
        assert_eq!(got.len(), n, "{case}: a request recorded twice");
        assert_eq!(
            n as u64,
            s["requests"].as_u64().unwrap(),
            "{case}: point {point}: records vs its summary"
        );
    }
    assert!(ids.is_empty(), "{case}: requests of no summary: {ids:?}");
    summaries
}

#[test]
fn every_srv_sim_fault_through_the_whole_pipeline() {
    let load = "-c 2 -n 24 --max-tokens 8 --input-len 16 --timeout 2s";
    // (case, srv-sim flags, exit codes of srv-launch, loadgen, srv-kill, summarize)
    let cases = [
        ("no fault", "", [0, 0, 0, 0]),
        ("slow startup", "--startup 1s", [0, 0, 0, 0]),
        ("HTTP 500/503", "--fail-rate 0.3", [0, 0, 0, 0]),
        ("connection resets", "--reset-rate 0.3", [0, 0, 0, 0]),
        // Stalled streams time out (--timeout 2s); the stalled server is killed.
        ("stalls", "--stall-after 20", [0, 0, 0, 0]),
        // The server dies: loadgen says the server went down (1), and srv-kill finds nothing
        // to kill (1): both true.
        ("crash", "--crash-after 6", [0, 1, 1, 0]),
    ];
    for (case, fault, want) in cases {
        let run = pipeline(fault, load, "");
        assert_eq!(run.codes, want, "{case}: {}", run.stderr);
        let summaries = check(case, &run);
        let s = &summaries[0];
        let by = &s["errors_by_class"];
        let count = |class: &str| by[class].as_u64().unwrap_or(0);
        match case {
            "HTTP 500/503" => assert!(count("http_5xx") > 0, "{case}: {s}"),
            "connection resets" => assert!(count("reset") > 0, "{case}: {s}"),
            "stalls" => assert!(count("timeout") > 0 && s["ok"] == 20, "{case}: {s}"),
            "crash" => {
                assert_eq!(s["stopped_by"], "server_down", "{case}: {s}");
                assert_eq!(s["partial"], true, "{case}: {s}");
            }
            _ => assert_eq!(s["ok"], 24, "{case}: {s}"),
        }
        if case != "crash" {
            assert_eq!(s["requests"], 24, "{case}: every planned request recorded");
        }
        let kills = of_kind(&run.kill, "kill");
        assert_eq!(kills.len(), 1, "{case}: {}", run.stderr);
        assert_eq!(kills[0]["ok"], case != "crash", "{case}: {}", kills[0]);
    }
}

/// The last reader fails at once (`summarize --cols typo`): summarize says so (2), srv-kill
/// still kills the server and ends quietly at the closed pipe (0), loadgen's run is whole.
#[test]
fn the_pipeline_whose_last_reader_fails_still_kills_the_server() {
    let run = pipeline("", "-c 2 -n 8 --max-tokens 4 --input-len 16", "--cols typo");
    assert_eq!(run.codes, [0, 0, 0, 2], "{}", run.stderr);
    let summaries = check("reader fails", &run);
    assert_eq!(summaries[0]["ok"], 8);
    assert!(run.stderr.contains("summarize: error:"), "{}", run.stderr);
    let server = of_kind(&run.launch, "server");
    assert!(!alive(server[0]["pid"].as_u64().unwrap() as u32));
}
