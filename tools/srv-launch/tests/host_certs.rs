//! Host certificates as OpenSSH trusts them, against real sshd servers presenting certificates
//! made by `ssh-keygen -s` (HostCertificate): a `@cert-authority` line for the host trusts a
//! valid certificate for it, whatever the CA's key type; a certificate for another name, an
//! expired one, or one by another CA is refused in one line, even with --accept-new-host, and
//! nothing is appended; with no CA line at all, --accept-new-host pins the plain key once.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use testkit::cmd;
use testkit::own_sshd::{OwnSshd, key_pair, public_key_fields, ssh_keygen};
use testkit::stderr;

/// A server whose ed25519 host key carries a certificate signed by `ca` for `principals`,
/// valid over `validity` (ssh-keygen -V).
fn certified_server(dir: &Path, ca: &Path, principals: &str, validity: &str) -> OwnSshd {
    let host = key_pair(dir, "host", "ed25519");
    let pubkey = format!("{}.pub", host.display());
    ssh_keygen(&[
        "-q",
        "-s",
        ca.to_str().unwrap(),
        "-I",
        "test-host",
        "-h",
        "-n",
        principals,
        "-V",
        validity,
        &pubkey,
    ]);
    let cert = format!("{}-cert.pub", host.display());
    OwnSshd::start(dir, &[&host], &[&format!("HostCertificate {cert}")])
}

fn connect(server: &OwnSshd, known_hosts: &Path, accept_new: bool) -> Output {
    let mut c = cmd("srv-kill");
    c.args(["--host", &server.target, "--identity", &server.key])
        .arg("--known-hosts")
        .arg(known_hosts)
        .args([
            "--match",
            "no-such-process-4711",
            "--missing-ok",
            "--dry-run",
        ])
        .env_remove("SERVBENCH_SSH_KNOWN_HOSTS")
        .stdin(Stdio::null());
    if accept_new {
        c.arg("--accept-new-host");
    }
    c.output().unwrap()
}

fn ca_line(pattern: &str, ca: &Path) -> String {
    format!("@cert-authority {pattern} {}\n", public_key_fields(ca))
}

#[test]
fn a_valid_host_certificate_from_a_known_ca_is_trusted_for_every_ca_key_type() {
    for ca_type in ["ed25519", "ecdsa", "rsa"] {
        let dir = tempfile::tempdir().unwrap();
        let ca = key_pair(dir.path(), "ca", ca_type);
        let server = certified_server(dir.path(), &ca, "gpu1.lab,127.0.0.1", "-5m:+1h");
        let kh = dir.path().join("known_hosts");
        // The CA's pattern names the host without its port, as CA lines usually do.
        let text = ca_line("127.0.0.1,*.lab", &ca);
        std::fs::write(&kh, &text).unwrap();
        for accept_new in [false, true] {
            let out = connect(&server, &kh, accept_new);
            assert_eq!(out.status.code(), Some(0), "{ca_type} CA: {}", stderr(&out));
        }
        assert_eq!(
            std::fs::read_to_string(&kh).unwrap(),
            text,
            "nothing appended"
        );
    }
}

#[test]
fn a_host_certificate_for_another_name_expired_or_by_another_ca_is_refused_and_never_appended() {
    let dir = tempfile::tempdir().unwrap();
    let ca = key_pair(dir.path(), "ca", "ed25519");
    let other_ca = key_pair(dir.path(), "other_ca", "ed25519");
    let cases: [(&str, &str, &Path, &str); 3] = [
        (
            "other.example",
            "-5m:+1h",
            &ca,
            "is for other.example, not for 127.0.0.1",
        ),
        ("127.0.0.1", "20200101:20200102", &ca, "expired at"),
        (
            "127.0.0.1",
            "-5m:+1h",
            &other_ca,
            "which no @cert-authority line for the host holds",
        ),
    ];
    for (i, (principals, validity, signer, why)) in cases.into_iter().enumerate() {
        let sub: PathBuf = dir.path().join(format!("case{i}"));
        std::fs::create_dir(&sub).unwrap();
        let server = certified_server(&sub, signer, principals, validity);
        let kh = sub.join("known_hosts");
        let text = ca_line("*", &ca);
        std::fs::write(&kh, &text).unwrap();
        for accept_new in [false, true] {
            let out = connect(&server, &kh, accept_new);
            let err = stderr(&out);
            assert_eq!(
                out.status.code(),
                Some(2),
                "case {i}, accept {accept_new}: {err}"
            );
            assert!(
                err.contains("HOST CERTIFICATE REFUSED") && err.contains(why),
                "case {i}: {err}"
            );
            assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        }
        assert_eq!(
            std::fs::read_to_string(&kh).unwrap(),
            text,
            "case {i}: nothing appended"
        );
    }
}

#[test]
fn without_a_ca_line_accept_new_host_pins_the_certified_plain_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let ca = key_pair(dir.path(), "ca", "ed25519");
    let server = certified_server(dir.path(), &ca, "127.0.0.1", "-5m:+1h");
    let kh = dir.path().join("known_hosts");
    let out = connect(&server, &kh, true);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let pinned = std::fs::read_to_string(&kh).unwrap();
    let host_key = public_key_fields(&dir.path().join("host"));
    assert_eq!(pinned, format!("[127.0.0.1]:{} {host_key}\n", server.port));
    // Pinned: the next runs connect without the flag and append nothing.
    for accept_new in [false, true] {
        let out = connect(&server, &kh, accept_new);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    assert_eq!(std::fs::read_to_string(&kh).unwrap(), pinned);
}
