//! srv-launch and srv-kill over hosts whose SSH login is not clean (tried-to-break-it-4.md,
//! SSH-BANNER and SSH-close): a `ForceCommand` that prints a banner before every command, one
//! that ends the session right after auth, one that swallows the launch's output. Each is an
//! OpenSSH server of the test's own on 127.0.0.1 (testkit::own_sshd::LoginSshd).

use std::time::Duration;
use testkit::own_sshd::{BANNER_LOGIN, CLOSE_LOGIN, LoginSshd};
use testkit::{alive, wait_gone};

/// BROKE 1 (SSH-BANNER): the pid was parsed from the whole of stdout, so a banner made the
/// launch fail with the server left running and no record.
#[test]
fn a_banner_before_the_pid_does_not_hide_the_launched_server() {
    let dir = tempfile::tempdir().unwrap();
    let host = LoginSshd::start(dir.path(), BANNER_LOGIN);
    let sim = testkit::bin("srv-sim");
    let launch = testkit::call("srv-launch")
        .args(["sim", "--bin", sim.to_str().unwrap()])
        .args(host.host_flags())
        .args(["--timeout", "60s"])
        .within(Duration::from_secs(90))
        .run();
    let (code, stdout, stderr) = launch.texts();
    assert_eq!(code, Some(0), "{stderr}");
    let record = testkit::json_lines(stdout.as_bytes()).remove(0);
    let pid = record["pid"].as_u64().unwrap() as u32;
    assert!(alive(pid), "{record}");
    // The record's start time is the server's: the stat read came through the banner too.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let ticks: u64 = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(record["start_ticks"].as_u64(), Some(ticks));

    let kill = testkit::call("srv-kill")
        .args(["--grace", "2s", "--identity", &host.sshd.key])
        .args(["--known-hosts", &host.known_hosts])
        .stdin(stdout.clone())
        .within(Duration::from_secs(60))
        .run();
    let (code, kill_out, stderr) = kill.texts();
    assert_eq!(code, Some(0), "{stderr}");
    let kills = testkit::kill_records(kill_out.as_bytes());
    assert_eq!(kills[0]["ok"], true, "{}", kills[0]);
    assert!(wait_gone(&[pid], Duration::from_secs(2)), "left running");
}

/// SSH-BANNER's other half: when no pid can be read at all, what was launched is found by its
/// launch id and killed, and the error says so (it was left running, unseen).
#[test]
fn a_launch_whose_pid_cannot_be_read_is_found_by_its_launch_id_and_killed() {
    let dir = tempfile::tempdir().unwrap();
    // A login that eats the output of the one command that starts the server.
    let host = LoginSshd::start(
        dir.path(),
        "case \"$SSH_ORIGINAL_COMMAND\" in\n\
         *servbench-launched-pid*) sh -c \"$SSH_ORIGINAL_COMMAND\" >/dev/null ;;\n\
         *) exec sh -c \"$SSH_ORIGINAL_COMMAND\" ;;\nesac",
    );
    let pid_file = dir.path().join("pid");
    let launch = testkit::call("srv-launch")
        .args([
            "--cmd",
            &format!("echo $$ > {}; exec sleep 60", pid_file.display()),
            "--ready-url",
            "http://127.0.0.1:{port}/",
        ])
        .args(host.host_flags())
        .within(Duration::from_secs(60))
        .run();
    let (code, stdout, stderr) = launch.texts();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let line = testkit::the_error_line(&stderr);
    assert!(line.contains("found by its launch id and killed"), "{line}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("the server was started")
        .trim()
        .parse()
        .unwrap();
    assert!(
        line.contains(&pid.to_string()),
        "the line names the pid: {line}"
    );
    assert!(wait_gone(&[pid], Duration::from_secs(2)), "left running");
}

/// SSH-close and SSH-close-kill: a session that ends after auth ran none of the command. That
/// was "no free port found" and "cannot read the remote process table (no /proc?): " with an
/// empty reason; it is said as it is.
#[test]
fn a_login_that_ends_the_session_is_named_not_taken_for_a_busy_host() {
    let dir = tempfile::tempdir().unwrap();
    let host = LoginSshd::start(dir.path(), CLOSE_LOGIN);
    let sim = testkit::bin("srv-sim");
    let launch = testkit::call("srv-launch")
        .args(["sim", "--bin", sim.to_str().unwrap()])
        .args(host.host_flags())
        .within(Duration::from_secs(60))
        .run();
    let kill = testkit::call("srv-kill")
        .args(["--match", "no-such-process-4711"])
        .args(host.host_flags())
        .within(Duration::from_secs(60))
        .run();
    let said = |line: &str| {
        line.contains("the remote ran none of the command (exit status 0, stdout '')")
            && line.contains("ForceCommand or login script")
            && !line.contains("no free port")
            && !line.contains("no /proc")
    };
    let (code, _, stderr) = launch.texts();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(said(testkit::the_error_line(&stderr)), "{stderr}");
    // srv-kill: the target's kill record carries it, and its warning line says it.
    let (code, stdout, stderr) = kill.texts();
    assert_eq!(code, Some(1), "{stderr}");
    let kills = testkit::kill_records(stdout.as_bytes());
    assert!(said(kills[0]["error"].as_str().unwrap()), "{}", kills[0]);
    assert!(stderr.lines().any(said), "{stderr}");
}
