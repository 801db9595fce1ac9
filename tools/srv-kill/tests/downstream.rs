//! srv-kill kills first, whatever happens downstream: a reader that is gone, a full disk, a
//! line of input that is not UTF-8. Each is reported after the kill, with an honest exit code.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use testkit::servers::{server_record, sleeping_server};
use testkit::{bash, cmd, wait_gone};

#[test]
fn srv_kill_into_a_full_disk_kills_first_then_fails_with_one_line() {
    let server = sleeping_server();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("server.jsonl");
    std::fs::write(&rec, server_record(server.pid()) + "\n").unwrap();
    let out = bash(&format!(
        "srv-kill --grace 1s < {} > /dev/full; echo \"rc=$?\"",
        rec.display()
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        wait_gone(&[server.pid()], Duration::from_secs(2)),
        "the server was left running: {stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "rc=1",
        "{stderr}"
    );
    let error = testkit::the_error_line(&stderr);
    assert!(
        error.starts_with("srv-kill: error: cannot write to stdout: No space left on device")
            && error.contains("the kill itself was done (every target ended as asked)"),
        "{stderr}"
    );
}

#[test]
fn srv_kill_whose_reader_is_gone_still_kills_and_exits_by_the_kill() {
    // `... | srv-kill | summarize --cols typo`: the reader exits at once, before any record.
    let server = sleeping_server();
    let mut child = cmd("srv-kill")
        .args(["--grace", "1s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stdin = child.stdin.take().unwrap();
    // A record to pass on first: its write meets the closed pipe before the server record.
    writeln!(stdin, r#"{{"kind":"note","v":1,"ts":"t","labels":{{}}}}"#).unwrap();
    writeln!(stdin, "{}", server_record(server.pid())).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        wait_gone(&[server.pid()], Duration::from_secs(2)),
        "the server was left running: {stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "", "a closed pipe is quiet");

    // The kill's own failure still decides the exit code when the reader is gone.
    let gone = {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let out = bash(&format!(
        "srv-kill --pid {gone} </dev/null | true; echo \"rc=${{PIPESTATUS[0]}}\""
    ));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "rc=1");
}

#[test]
fn a_line_that_is_not_utf8_is_skipped_with_its_place_and_the_kill_goes_on() {
    let server = sleeping_server();
    let mut input =
        b"{\"kind\":\"note\",\"v\":1,\"ts\":\"t\",\"labels\":{\"x\":\"\xff\xfe\"}}\n".to_vec();
    input.extend_from_slice(server_record(server.pid()).as_bytes());
    input.push(b'\n');
    let run = |strict: bool| {
        let mut c = cmd("srv-kill");
        c.args(["--grace", "1s"]);
        if strict {
            c.arg("--strict");
        }
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&input).unwrap();
        child.wait_with_output().unwrap()
    };

    // --strict: exit 2 naming the place, nothing killed.
    let out = run(true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("srv-kill: error: stdin:1: not valid UTF-8"),
        "{stderr}"
    );
    assert!(testkit::alive(server.pid()));

    // By default: a warning naming the place, and the rest of the input (the kill) goes on.
    let out = run(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("srv-kill: warning: skipping malformed line: stdin:1: not valid UTF-8"),
        "{stderr}"
    );
    assert!(wait_gone(&[server.pid()], Duration::from_secs(2)));
    let records = testkit::json_lines(&out.stdout);
    // The server record passed on (marked killed) and its kill record; the bad line is not.
    assert_eq!(
        records.len(),
        2,
        "the bad line is not passed on: {records:?}"
    );
    assert_eq!(records[0]["killed"], true);
    assert_eq!(records[1]["ok"], true);
}
