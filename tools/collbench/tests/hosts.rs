//! `--hosts`: ranks started over SSH through the loopback sshd that scripts/setup/sshd.sh
//! starts (SERVBENCH_SSH_PORT, _KEY, _USER, _KNOWN_HOSTS). Two "hosts" are two names of the
//! same loopback server, so the SSH path, the coordinator address and the records' host count
//! are all exercised.

use servbench::record::{CollRecord, Record};
use testkit::{Run, call, sshd};

/// collbench with `args` across two "hosts" of the loopback sshd, 127.0.0.1 and `second`, its
/// key and a copy of its known_hosts (plus `ssh` options).
fn across_two_hosts(second: &str, ssh: &[&str], args: &[&str]) -> Run {
    let s = sshd();
    let dir = tempfile::tempdir().unwrap();
    let kh = s.known_hosts_copy(dir.path());
    let hosts = format!("{u}@127.0.0.1:{p},{u}@{second}:{p}", u = s.user, p = s.port);
    call("collbench")
        .args([
            "--hosts",
            &hosts,
            "--identity",
            &s.key,
            "--known-hosts",
            &kh,
        ])
        .args(ssh)
        .args(args)
        .run()
}

#[test]
fn a_run_across_two_hosts_over_ssh() {
    let out = across_two_hosts(
        "localhost",
        &["--accept-new-host"],
        &[
            "--coll",
            "allgather",
            "-b",
            "8",
            "-e",
            "2M",
            "-f",
            "64",
            "-n",
            "2",
            "--label",
            "run=ssh",
        ],
    );
    let err = out.err();
    assert!(out.status.success(), "{err}");
    let colls = out.of::<CollRecord>();
    assert_eq!(colls.len(), 4, "{}", out.out());
    for c in &colls {
        assert_eq!((c.ranks, c.hosts, c.wrong), (2, 2, 0), "{c:?}");
        assert_eq!(c.labels.get("run").map(String::as_str), Some("ssh"));
    }
    assert!(colls[3].bytes > 1 << 20);
    assert!(
        matches!(out.records().last(), Some(Record::CollRun(_))),
        "{}",
        out.out()
    );
    // Rank 0's table comes back on stderr.
    assert!(err.contains("# Avg bus bandwidth"), "{err}");
}

#[test]
fn a_missing_remote_binary_is_reported_and_fails() {
    let out = across_two_hosts(
        "127.0.0.1",
        &[],
        &[
            "--remote-bin",
            "/nonexistent/collbench",
            "-b",
            "8",
            "-e",
            "8",
            "--timeout",
            "5s",
        ],
    );
    let err = out.err();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/nonexistent/collbench"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn an_unreachable_host_is_a_usage_error_naming_it() {
    let s = sshd();
    let port = testkit::free_port();
    let out = call("collbench")
        .args([
            "--hosts",
            &format!("{}@127.0.0.1:{port}", s.user),
            "--identity",
            &s.key,
        ])
        .args([
            "--known-hosts",
            &s.known_hosts,
            "--connect-timeout",
            "2s",
            "-b",
            "8",
            "-e",
            "8",
        ])
        .run();
    let err = out.err();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&port.to_string()), "{err}");
}
