//! `--hosts`: ranks started over SSH through the loopback sshd that scripts/setup/sshd.sh
//! starts (SERVBENCH_SSH_PORT, _KEY, _USER, _KNOWN_HOSTS). Two "hosts" are two names of the
//! same loopback server, so the SSH path, the coordinator address and the records' host count
//! are all exercised.

use testkit::{cmd, json_lines, sshd};

#[test]
fn a_run_across_two_hosts_over_ssh() {
    let s = sshd();
    let dir = tempfile::tempdir().unwrap();
    let kh = s.known_hosts_copy(dir.path());
    let hosts = format!(
        "{u}@127.0.0.1:{p},{u}@localhost:{p}",
        u = s.user,
        p = s.port
    );
    let out = cmd("collbench")
        .args([
            "--hosts",
            &hosts,
            "--identity",
            &s.key,
            "--known-hosts",
            &kh,
            "--accept-new-host",
        ])
        .args([
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
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let recs = json_lines(&out.stdout);
    let colls: Vec<_> = recs.iter().filter(|r| r["kind"] == "coll").collect();
    assert_eq!(colls.len(), 4, "{recs:?}");
    for c in &colls {
        assert_eq!(c["ranks"], 2, "{c}");
        assert_eq!(c["hosts"], 2, "{c}");
        assert_eq!(c["wrong"], 0, "{c}");
        assert_eq!(c["labels"]["run"], "ssh");
    }
    assert!(colls[3]["bytes"].as_u64().unwrap() > 1 << 20);
    assert_eq!(recs.last().unwrap()["kind"], "coll_run");
    // Rank 0's table comes back on stderr.
    assert!(err.contains("# Avg bus bandwidth"), "{err}");
}

#[test]
fn a_missing_remote_binary_is_reported_and_fails() {
    let s = sshd();
    let dir = tempfile::tempdir().unwrap();
    let kh = s.known_hosts_copy(dir.path());
    let hosts = format!(
        "{u}@127.0.0.1:{p},{u}@127.0.0.1:{p}",
        u = s.user,
        p = s.port
    );
    let out = cmd("collbench")
        .args([
            "--hosts",
            &hosts,
            "--identity",
            &s.key,
            "--known-hosts",
            &kh,
        ])
        .args([
            "--remote-bin",
            "/nonexistent/collbench",
            "-b",
            "8",
            "-e",
            "8",
            "--timeout",
            "5s",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/nonexistent/collbench"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn an_unreachable_host_is_a_usage_error_naming_it() {
    let s = sshd();
    let port = testkit::free_port();
    let out = cmd("collbench")
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
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&port.to_string()), "{err}");
}
