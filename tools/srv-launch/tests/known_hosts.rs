//! known_hosts as OpenSSH reads it, against the real loopback sshd (scripts/setup/sshd.sh, on a
//! port other than 22): a revoked key is refused even with --accept-new-host, and a new entry
//! never corrupts a last line without a newline (the port rule: tests/host_keys.rs).

use std::process::Command;
use testkit::sshd;
use testkit::stderr;

/// The server's host key as known_hosts writes it: `ssh-ed25519 AAAA...`.
fn host_key_fields() -> String {
    let line = std::fs::read_to_string(sshd().known_hosts).unwrap();
    line.split_whitespace()
        .skip(1)
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// srv-kill over SSH with nothing to kill: it connects, checks the host key, and stops.
fn connect(known_hosts: &std::path::Path, extra: &[&str]) -> testkit::Run {
    let s = sshd();
    testkit::call("srv-kill")
        .args(["--host", &s.target, "--identity", &s.key])
        .args(["--known-hosts", known_hosts.to_str().unwrap()])
        .args(["--match", "no-such-process-4711", "--missing-ok"])
        .args(extra)
        .run()
}

#[test]
fn a_revoked_host_key_is_refused_even_with_accept_new_host() {
    let s = sshd();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    let key = host_key_fields();
    // Revoked for every host, and also listed as this host's key: revocation wins.
    let text = format!("@revoked * {key}\n[127.0.0.1]:{} {key}\n", s.port);
    std::fs::write(&kh, &text).unwrap();
    for extra in [&[][..], &["--accept-new-host"][..]] {
        let out = connect(&kh, extra);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(
            err.contains("REVOKED HOST KEY") && err.contains(&format!("{}:1", kh.display())),
            "{extra:?}: {err}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&kh).unwrap(),
        text,
        "nothing appended"
    );
}

#[test]
fn accept_new_host_puts_the_new_entry_on_a_line_of_its_own() {
    let s = sshd();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    // Another host's entry as the last line, without a final newline.
    let other = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(dir.path().join("other"))
        .output()
        .unwrap();
    assert!(other.status.success());
    let pubkey = std::fs::read_to_string(dir.path().join("other.pub")).unwrap();
    let fields: Vec<&str> = pubkey.split_whitespace().collect();
    let before = format!("gpu9.example.org {} {}", fields[0], fields[1]);
    std::fs::write(&kh, &before).unwrap();

    let out = connect(&kh, &["--accept-new-host"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let after = std::fs::read_to_string(&kh).unwrap();
    let lines: Vec<&str> = after.lines().collect();
    assert_eq!(lines[0], before, "the previous entry is intact: {after}");
    assert_eq!(
        lines[1],
        format!("[127.0.0.1]:{} {}", s.port, host_key_fields()),
        "{after}"
    );
    assert!(after.ends_with('\n'));
    // Both entries read back: the new one trusts this host without the flag.
    let out = connect(&kh, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // And OpenSSH's own reader finds the other host's entry unharmed.
    let found = Command::new("ssh-keygen")
        .args(["-F", "gpu9.example.org", "-f"])
        .arg(&kh)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&found.stdout).contains(fields[1]),
        "{}",
        String::from_utf8_lossy(&found.stdout)
    );
}
