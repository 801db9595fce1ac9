//! Host keys of every type, against real OpenSSH servers on loopback: a server holding
//! ed25519, ECDSA and RSA host keys is trusted through whichever one known_hosts holds (what
//! OpenSSH before 8.5 recorded was often ECDSA or RSA), a truly changed key is still refused,
//! and known_hosts is found where OpenSSH looks by default and read with its port rule.

use std::path::Path;
use std::process::{Output, Stdio};
use testkit::own_sshd::{OwnSshd, key_pair, public_key_fields};
use testkit::stderr;
use testkit::{cmd, sshd};

/// srv-kill over SSH with nothing to kill: it connects, checks the host key, and stops.
fn connect(target: &str, key: &str, known_hosts: Option<&Path>, home: Option<&Path>) -> Output {
    let mut c = cmd("srv-kill");
    c.args(["--host", target, "--identity", key])
        .args([
            "--match",
            "no-such-process-4711",
            "--missing-ok",
            "--dry-run",
        ])
        .env_remove("SERVBENCH_SSH_KNOWN_HOSTS")
        .stdin(Stdio::null());
    if let Some(kh) = known_hosts {
        c.arg("--known-hosts").arg(kh);
    }
    if let Some(home) = home {
        c.env("HOME", home);
    }
    c.output().unwrap()
}

#[test]
fn a_host_known_only_by_its_ecdsa_or_rsa_key_connects_and_a_changed_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let types = ["ed25519", "ecdsa", "rsa"];
    let host_keys: Vec<_> = types
        .iter()
        .map(|t| key_pair(dir.path(), &format!("host_{t}"), t))
        .collect();
    let refs: Vec<&Path> = host_keys.iter().map(|p| p.as_path()).collect();
    let server = OwnSshd::start(dir.path(), &refs, &[]);
    let name = format!("[127.0.0.1]:{}", server.port);
    for (t, host_key) in types.iter().zip(&host_keys) {
        let kh = dir.path().join(format!("known_hosts_{t}"));
        std::fs::write(&kh, format!("{name} {}\n", public_key_fields(host_key))).unwrap();
        let out = connect(&server.target, &server.key, Some(&kh), None);
        assert_eq!(
            out.status.code(),
            Some(0),
            "only the {t} key known: {}",
            stderr(&out)
        );
        // A key of the same type that is not the server's is a changed key.
        let other = key_pair(dir.path(), &format!("other_{t}"), t);
        std::fs::write(&kh, format!("{name} {}\n", public_key_fields(&other))).unwrap();
        for extra in [None, Some("--accept-new-host")] {
            let mut c = cmd("srv-kill");
            c.args(["--host", &server.target, "--identity", &server.key])
                .arg("--known-hosts")
                .arg(&kh)
                .args([
                    "--match",
                    "no-such-process-4711",
                    "--missing-ok",
                    "--dry-run",
                ])
                .args(extra)
                .stdin(Stdio::null());
            let out = c.output().unwrap();
            let err = stderr(&out);
            assert_eq!(
                out.status.code(),
                Some(2),
                "changed {t} key, {extra:?}: {err}"
            );
            assert!(
                err.contains("HOST KEY CHANGED") && err.contains(&format!("{}:1", kh.display())),
                "{t}: {err}"
            );
        }
    }
}

#[test]
fn a_server_without_the_known_key_type_is_refused_naming_the_types_known() {
    let dir = tempfile::tempdir().unwrap();
    let ed25519 = key_pair(dir.path(), "host_ed25519", "ed25519");
    let server = OwnSshd::start(dir.path(), &[&ed25519], &[]);
    let ecdsa = key_pair(dir.path(), "known_ecdsa", "ecdsa");
    let kh = dir.path().join("known_hosts");
    let line = format!(
        "[127.0.0.1]:{} {}\n",
        server.port,
        public_key_fields(&ecdsa)
    );
    std::fs::write(&kh, &line).unwrap();
    let out = connect(&server.target, &server.key, Some(&kh), None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("HOST KEY CHANGED")
            && err.contains("only ecdsa-sha2-nistp256 key(s)")
            && err.contains("only a ssh-ed25519 key"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&kh).unwrap(),
        line,
        "nothing appended"
    );
}

#[test]
fn an_entry_without_a_port_is_used_off_port_22_when_no_entry_names_the_port() {
    let s = sshd();
    assert_ne!(s.port, "22", "the test sshd must listen off port 22");
    let server_key = std::fs::read_to_string(&s.known_hosts).unwrap();
    let fields: Vec<&str> = server_key.split_whitespace().skip(1).take(2).collect();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    // As ssh does (OpenSSH 9): the plain entry vouches for the key on any port...
    std::fs::write(&kh, format!("127.0.0.1 {}\n", fields.join(" "))).unwrap();
    let out = connect(&s.target, &s.key, Some(&kh), None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // ...but a `[addr]:port` entry with another key decides alone: changed.
    let other = key_pair(dir.path(), "other", "ed25519");
    std::fs::write(
        &kh,
        format!(
            "[127.0.0.1]:{} {}\n127.0.0.1 {}\n",
            s.port,
            public_key_fields(&other),
            fields.join(" ")
        ),
    )
    .unwrap();
    let out = connect(&s.target, &s.key, Some(&kh), None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("HOST KEY CHANGED") && err.contains(&format!("{}:1", kh.display())),
        "{err}"
    );
    // And a plain entry with another key is no evidence for this port: unknown, not changed.
    std::fs::write(&kh, format!("127.0.0.1 {}\n", public_key_fields(&other))).unwrap();
    let out = connect(&s.target, &s.key, Some(&kh), None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown host key"), "{err}");
}

#[test]
fn known_hosts2_in_the_home_directory_is_read_by_default() {
    let s = sshd();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    let out = connect(&s.target, &s.key, None, Some(home.path()));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown host key") && err.contains(".ssh/known_hosts2"),
        "the message names the files read: {err}"
    );
    std::fs::copy(&s.known_hosts, home.path().join(".ssh/known_hosts2")).unwrap();
    let out = connect(&s.target, &s.key, None, Some(home.path()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !home.path().join(".ssh/known_hosts").exists(),
        "nothing written"
    );
}
