//! HTTPS with certificates made the way people make them, and the hint each failure gets:
//! the self-signed certificate `openssl req -x509` makes (also a CA, CA:TRUE) is trusted when
//! given to --cacert, as curl and Python trust it; a certificate for another name says so (not
//! "pass --cacert"); a plain-HTTP server behind https:// and an HTTPS server behind http://
//! each get one line naming the scheme to use.

use servbench::record::SummaryRecord;
use std::path::{Path, PathBuf};
use std::process::Command;
use testkit::Run;

/// `openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -addext subjectAltName=SAN`:
/// writes NAME.pem and NAME.key in `dir`.
fn openssl_self_signed(dir: &Path, name: &str, san: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            &format!("subjectAltName={san}"),
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

fn serve_tls(cert: &Path, key: &Path) -> (testkit::Guard, String) {
    testkit::srv_sim(&[
        "--ttft",
        "2ms",
        "--itl",
        "1ms",
        "--ssl-certfile",
        cert.to_str().unwrap(),
        "--ssl-keyfile",
        key.to_str().unwrap(),
    ])
}

/// Every run's load: three small requests, one at a time.
const BASE: &[&str] = &[
    "-c",
    "1",
    "-n",
    "3",
    "--input-len",
    "16",
    "--max-tokens",
    "4",
];

/// loadgen against `url` trusting only the certificates `extra` names.
fn trusting_only(url: &str, extra: &[&str]) -> Run {
    testkit::call("loadgen")
        .no_system_ca()
        .url(url)
        .args(BASE)
        .args(extra)
        .run()
}

#[test]
fn an_openssl_self_signed_ca_certificate_given_to_cacert_is_trusted_as_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = openssl_self_signed(dir.path(), "c", "DNS:localhost,IP:127.0.0.1");
    let (_sim, url) = serve_tls(&cert, &key);
    let localhost = url.replace("127.0.0.1", "localhost");
    for target in [url.as_str(), localhost.as_str()] {
        let out = trusting_only(target, &["--cacert", cert.to_str().unwrap()]);
        assert!(out.status.success(), "{target}: {}", out.err());
        assert_eq!(out.one::<SummaryRecord>().ok, 3, "{target}: {}", out.err());
    }
    // Pinning is exact: another certificate made the same way is not this server's.
    let (other, _) = openssl_self_signed(dir.path(), "other", "DNS:localhost,IP:127.0.0.1");
    let out = trusting_only(&url, &["--cacert", other.to_str().unwrap()]);
    let err = out.err();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the server presents a CA certificate as its own")
            && err.contains("pass that very certificate with --cacert to pin it"),
        "{err}"
    );
}

#[test]
fn a_certificate_for_another_name_names_the_mismatch_and_not_cacert() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = openssl_self_signed(dir.path(), "c", "DNS:other.example");
    let (_sim, url) = serve_tls(&cert, &key);
    let out = trusting_only(&url, &["--cacert", cert.to_str().unwrap()]);
    let err = out.err();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the certificate is for other names than 127.0.0.1")
            && !err.contains("pass --cacert"),
        "{err}"
    );
}

#[test]
fn plain_http_behind_https_and_https_behind_http_each_name_the_scheme_to_use() {
    let (_plain, plain_url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    let https_url = plain_url.replace("http://", "https://");
    let out = trusting_only(&https_url, &["--insecure"]);
    let err = out.err();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the server answered in plain HTTP, not TLS: use an http:// URL"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = openssl_self_signed(dir.path(), "c", "DNS:localhost,IP:127.0.0.1");
    let (_tls, tls_url) = serve_tls(&cert, &key);
    let http_url = tls_url.replace("https://", "http://");
    let out = trusting_only(&http_url, &[]);
    let err = out.err();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("if it serves TLS, use an https:// URL"),
        "{err}"
    );
}
