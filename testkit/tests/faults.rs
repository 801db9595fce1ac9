//! Faults every tool meets the same way, through the shared reader and writer: a full disk on
//! stdout is one error line and exit 1 (only a closed pipe is a quiet success), and a line of
//! input that is not UTF-8 is a malformed line like any other (`source:line`, exit 2 under
//! `--strict`), never the end of the input.

use testkit::{bash, json_lines, sh};

/// A record of a kind no tool knows: passed on by every tool that passes records on.
const NOTE: &str =
    r#"{"kind":"note","v":1,"ts":"2026-11-30T17:00:00.000Z","labels":{},"text":"kept"}"#;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

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
    for tool in [
        "srv-kill --missing-ok",
        "summarize",
        "collbench -np 1 -b 8 -e 8 -n 1 -w 0",
        "loadgen -n 1",
    ] {
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

/// The pid srv-launch's "ready" line names (`... (pid N on localhost, ...`).
fn ready_pid(stderr: &str) -> u32 {
    stderr
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no ready line naming the pid: {stderr}"))
}

#[test]
fn the_whole_pipeline_with_its_reader_failing_leaves_no_server_running_and_honest_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("stderr");
    let launch_err = dir.path().join("launch.err");
    for (reader, want) in [
        // The last reader dies at once on a usage error; srv-kill's kill went through: 0, 2.
        ("| summarize --cols typo", "0 0 0 2"),
        // The last tool's own disk is full: srv-kill still kills, then says so: 1.
        ("> /dev/full", "0 0 1"),
    ] {
        let out = bash(&format!(
            "srv-launch sim -- --ttft 1ms --itl 0 2> {launch} \
             | loadgen -c 2 -n 8 --max-tokens 4 --prompts builtin 2>> {err} \
             | srv-kill --grace 2s 2>> {err} {reader} 2>> {err}; \
             echo \"status=${{PIPESTATUS[*]}}\"",
            launch = launch_err.display(),
            err = err.display()
        ));
        let stderr = std::fs::read_to_string(&err).unwrap_or_default();
        let launched = std::fs::read_to_string(&launch_err).unwrap();
        let pid = ready_pid(&launched);
        assert!(
            testkit::wait_gone(&[pid], std::time::Duration::from_secs(2)),
            "{reader}: server {pid} left running: {stderr}"
        );
        let report = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            report.trim(),
            format!("status={want}"),
            "{reader}: exit codes: {stderr}"
        );
    }
}
