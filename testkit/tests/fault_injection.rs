//! Faults, injected the way users meet them. Every tool, through the shared reader and writer: a
//! full disk on stdout is one error line and exit 1 (only a closed pipe is a quiet success), and a
//! line of input that is not UTF-8 is a malformed line like any other (`source:line`, exit 2 under
//! `--strict`), never the end of the input. The main pipeline, `srv-launch sim | loadgen |
//! srv-kill | summarize`, under each of srv-sim's injected faults and with the last reader
//! failing (a usage error, a full disk): whatever goes wrong, no server is left running, every
//! finished request is recorded exactly once (its point's summary counts it), and each tool's
//! exit code says what happened to it.

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use testkit::of_kind;
use testkit::stderr;
use testkit::{alive, bash, json_lines, sh, wait_gone};

/// A record of a kind no tool knows: passed on by every tool that passes records on.
const NOTE: &str =
    r#"{"kind":"note","v":1,"ts":"2026-11-30T17:00:00.000Z","labels":{},"text":"kept"}"#;

/// Lines of `stderr` that are error lines.
fn error_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(": error: ")).collect()
}

#[test]
fn a_full_disk_is_one_error_line_and_exit_1_in_every_tool() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("server.jsonl");
    let launch = sh(&format!(
        "srv-launch sim -- --ttft 1ms --itl 0 > {}",
        rec.display()
    ));
    assert!(launch.status.success(), "{}", stderr(&launch));
    let rec = rec.display();
    let cases = [
        ("srv-sim", "srv-sim --dry-run".to_string()),
        ("summarize", format!("summarize {rec}")),
        (
            "collbench",
            "collbench -np 1 -b 8 -e 8 -n 1 -w 0".to_string(),
        ),
        (
            "loadgen",
            format!("loadgen -n 2 --max-tokens 4 --prompts builtin < {rec}"),
        ),
        (
            "srv-launch",
            "srv-launch sim -- --ttft 1ms --itl 0".to_string(),
        ),
        // Last: it stops the server the others used.
        ("srv-kill", format!("srv-kill --from {rec} --grace 2s")),
    ];
    for (tool, command) in cases {
        let stdin = if command.contains('<') {
            ""
        } else {
            "</dev/null"
        };
        let out = bash(&format!("{command} {stdin} > /dev/full; echo \"rc=$?\""));
        let err = stderr(&out);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "rc=1",
            "{tool}: a full disk is not a success: {err}"
        );
        let errors = error_lines(&err);
        assert_eq!(errors.len(), 1, "{tool}: one error line: {err}");
        assert!(
            errors[0].starts_with(&format!(
                "{tool}: error: cannot write to stdout: No space left on device"
            )),
            "{tool}: the line names the write failure: {err}"
        );
    }
}

#[test]
fn one_line_that_is_not_utf8_is_a_malformed_line_in_every_tool() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.jsonl");
    let mut input =
        b"{\"kind\":\"note\",\"v\":1,\"ts\":\"t\",\"labels\":{\"bad\":\"\xc3\x28\"}}\n".to_vec();
    input.extend_from_slice(format!("{NOTE}\n").as_bytes());
    std::fs::write(&file, &input).unwrap();
    let file = file.display();
    for tool in testkit::RECORD_READERS {
        let strict = sh(&format!("{tool} --strict < {file}"));
        let err = stderr(&strict);
        assert_eq!(strict.status.code(), Some(2), "{tool} --strict: {err}");
        assert_eq!(err.lines().count(), 1, "{tool}: one error line: {err}");
        let name = tool.split(' ').next().unwrap();
        assert!(
            err.starts_with(&format!("{name}: error: stdin:1: not valid UTF-8")),
            "{tool}: the error names the place: {err}"
        );
    }
    // Without --strict: a warning naming the place, and the rest of the input goes on.
    for tool in [
        "srv-kill --missing-ok",
        "collbench -np 1 -b 8 -e 8 -n 1 -w 0",
    ] {
        let out = sh(&format!("{tool} < {file}"));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{tool}: {err}");
        assert!(
            err.contains("warning: skipping malformed line: stdin:1: not valid UTF-8"),
            "{tool}: {err}"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.lines().next(),
            Some(NOTE),
            "{tool}: the next line goes on"
        );
    }
    // loadgen reads its server record after the bad line and runs; summarize tabulates what
    // follows it: each warns with the place and goes on.
    let bytes = std::fs::read(dir.path().join("in.jsonl")).unwrap();
    let launched = sh("srv-launch sim -- --ttft 1ms --itl 0");
    assert!(launched.status.success(), "{}", stderr(&launched));
    let with_server = dir.path().join("with_server.jsonl");
    std::fs::write(
        &with_server,
        [bytes.clone(), launched.stdout.clone()].concat(),
    )
    .unwrap();
    let load = sh(&format!(
        "loadgen -n 2 --max-tokens 2 --input-len 16 < {}",
        with_server.display()
    ));
    let kill = testkit::cmd("srv-kill")
        .args(["--grace", "2s"])
        .stdin(std::fs::File::open(&with_server).unwrap())
        .output()
        .unwrap();
    assert_eq!(kill.status.code(), Some(0), "{}", stderr(&kill));
    let err = stderr(&load);
    assert_eq!(load.status.code(), Some(0), "loadgen: {err}");
    assert!(
        err.contains("loadgen: warning: skipping malformed line: stdin:1: not valid UTF-8"),
        "loadgen: {err}"
    );
    let records = json_lines(&load.stdout);
    assert_eq!(records[0]["text"], "kept", "loadgen: the next line goes on");
    let summary: Vec<&Value> = records.iter().filter(|r| r["kind"] == "summary").collect();
    assert_eq!(summary.len(), 1, "loadgen ran: {err}");
    assert_eq!(summary[0]["ok"], 2, "{}", summary[0]);
    let run = dir.path().join("run.jsonl");
    std::fs::write(&run, [bytes, load.stdout].concat()).unwrap();
    let table = sh(&format!("summarize < {}", run.display()));
    let err = stderr(&table);
    assert_eq!(table.status.code(), Some(0), "summarize: {err}");
    assert!(
        err.contains("summarize: warning: skipping malformed line: stdin:1: not valid UTF-8"),
        "summarize: {err}"
    );
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("# load points"),
        "summarize tabulated the rest"
    );
    // srv-launch forwards upstream records while it works, through the same reader.
    let out = sh(&format!(
        "srv-launch sim -- --ttft 1ms --itl 0 < {file} | srv-kill --grace 2s"
    ));
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("srv-launch: warning: skipping malformed line: stdin:1: not valid UTF-8"),
        "{err}"
    );
    let records = json_lines(&out.stdout);
    assert_eq!(
        records.iter().filter(|r| r["kind"] == "note").count(),
        1,
        "{records:?}"
    );
    assert_eq!(records.last().unwrap()["ok"], true);
}

/// One run of the pipeline: each tool's exit code and what passed between them.
struct Run {
    /// Exit codes of srv-launch, loadgen, srv-kill and (when it runs) summarize.
    codes: Vec<i32>,
    launch: Vec<Value>,
    load: Vec<Value>,
    kill: Vec<Value>,
    stderr: String,
}

/// How the pipeline ends after srv-kill.
enum Reader<'a> {
    /// `| summarize ARGS`.
    Summarize(&'a str),
    /// srv-kill writes to `/dev/full`.
    FullDisk,
}

/// Runs the pipeline with `fault` given to srv-sim, `loadgen` flags, and `reader` after srv-kill;
/// `tee` keeps what each stage wrote (it passes everything on unchanged). Each stage is bounded
/// by `timeout`, so a hang fails the test instead of stalling it. Exit codes: srv-launch,
/// loadgen, srv-kill and, when it runs, summarize.
fn pipeline(fault: &str, loadgen: &str, reader: Reader) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let (tail, codes) = match reader {
        Reader::Summarize(args) => (
            format!("| tee {d}/kill.jsonl | timeout 60 summarize {args} > {d}/table.txt",),
            "${PIPESTATUS[0]} ${PIPESTATUS[2]} ${PIPESTATUS[4]} ${PIPESTATUS[6]}",
        ),
        Reader::FullDisk => (
            "> /dev/full".to_string(),
            "${PIPESTATUS[0]} ${PIPESTATUS[2]} ${PIPESTATUS[4]}",
        ),
    };
    let out = bash(&format!(
        "timeout 60 srv-launch sim --timeout 30s -- --ttft 1ms --itl 1ms {fault} | tee {d}/launch.jsonl \
         | timeout 60 loadgen {loadgen} | tee {d}/load.jsonl \
         | timeout 60 srv-kill --grace 2s {tail}; echo \"{codes}\""
    ));
    let codes: Vec<i32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .collect();
    let read = |name: &str| json_lines(&std::fs::read(dir.path().join(name)).unwrap_or_default());
    Run {
        codes,
        launch: read("launch.jsonl"),
        load: read("load.jsonl"),
        kill: read("kill.jsonl"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
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
        // to kill (1): both true. srv-sim serves on for 100 ms after the crashing request
        // (about 15 more at -c 2), so the point is long enough that the crash leaves plenty
        // of its requests to fail (with -n 24 only 2 were sometimes left: not a pattern).
        ("crash", "--crash-after 6", [0, 1, 1, 0]),
    ];
    for (case, fault, want) in cases {
        let load = if case == "crash" {
            load.replace("-n 24", "-n 64")
        } else {
            load.to_string()
        };
        let run = pipeline(fault, &load, Reader::Summarize(""));
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
/// still kills the server and ends quietly at the closed pipe (0), loadgen's run is whole. Or
/// srv-kill's own disk is full: it still kills, then says so in one line (1).
#[test]
fn the_pipeline_whose_last_reader_fails_still_kills_the_server() {
    let load = "-c 2 -n 8 --max-tokens 4 --input-len 16";
    let run = pipeline("", load, Reader::Summarize("--cols typo"));
    assert_eq!(run.codes, [0, 0, 0, 2], "{}", run.stderr);
    let summaries = check("reader fails", &run);
    assert_eq!(summaries[0]["ok"], 8);
    assert!(run.stderr.contains("summarize: error:"), "{}", run.stderr);
    let server = of_kind(&run.launch, "server");
    assert!(!alive(server[0]["pid"].as_u64().unwrap() as u32));

    let run = pipeline("", load, Reader::FullDisk);
    assert_eq!(run.codes, [0, 0, 1], "{}", run.stderr);
    let summaries = check("srv-kill's disk is full", &run);
    assert_eq!(summaries[0]["ok"], 8);
    let errors = error_lines(&run.stderr);
    assert_eq!(errors.len(), 1, "one error line: {}", run.stderr);
    assert!(
        errors[0].starts_with("srv-kill: error: cannot write to stdout: No space left on device"),
        "{}",
        run.stderr
    );
    let server = of_kind(&run.launch, "server");
    assert!(!alive(server[0]["pid"].as_u64().unwrap() as u32));
}
