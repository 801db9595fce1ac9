//! The `server` record is the only handle anyone has on a launched server: when it cannot be
//! delivered (a full disk, a reader that is already gone), srv-launch stops the server it
//! started instead of leaving it running unseen, and says so.

use std::time::Duration;
use testkit::{alive, bash, wait_gone};

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
fn a_server_record_lost_to_a_full_disk_stops_the_server_and_fails_with_one_line() {
    let out = bash("srv-launch sim -- --ttft 1ms --itl 0 > /dev/full; echo \"rc=$?\"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let pid = ready_pid(&stderr);
    assert!(
        wait_gone(&[pid], Duration::from_secs(2)),
        "server {pid} left running with its record lost: {stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "rc=1",
        "{stderr}"
    );
    let error = testkit::the_error_line(&stderr);
    assert!(
        error.starts_with("srv-launch: error: cannot write to stdout: No space left on device")
            && error.contains(&format!(
                "the server record is lost, so the server was stopped: killed it (pid {pid})"
            )),
        "{stderr}"
    );
}

#[test]
fn a_reader_gone_before_the_server_record_stops_the_server_and_is_exit_0() {
    // `srv-launch sim | loadgen --typo`: the reader has exited before the record is written.
    let mut child = testkit::call("srv-launch")
        .args(["sim", "--", "--ttft", "1ms", "--itl", "0"])
        .spawn();
    drop(child.stdout.take());
    let out = child.wait(testkit::run::RUN_LIMIT);
    let stderr = out.err();
    let pid = ready_pid(&stderr);
    assert!(
        wait_gone(&[pid], Duration::from_secs(2)),
        "server {pid} left running with nobody holding its record: {stderr}"
    );
    assert!(!alive(pid));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "srv-launch: the next tool exited before reading the server record, so the server was stopped: killed it (pid {pid})"
        )),
        "{stderr}"
    );
}
