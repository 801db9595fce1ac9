//! HTTPS end to end: srv-sim serving TLS with a certificate made here (a CA and a leaf for
//! localhost and 127.0.0.1, by rcgen); loadgen trusts it through `--cacert` or the system's
//! store (`SSL_CERT_FILE`), refuses it clearly without, and skips the check with `--insecure`.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use servbench::record::SummaryRecord;
use std::path::{Path, PathBuf};
use testkit::{Call, call};

/// Writes ca.pem, cert.pem and key.pem into `dir`.
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "servbench test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&paths.0, ca_cert.pem()).unwrap();
    std::fs::write(&paths.1, leaf_cert.pem()).unwrap();
    std::fs::write(&paths.2, leaf_key.serialize_pem()).unwrap();
    paths
}

#[test]
fn https_works_with_cacert_and_fails_clearly_without() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let (ca, cert, key) = (
        ca.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
    );
    let (_sim, url) = testkit::srv_sim(&[
        "--ttft",
        "5ms",
        "--itl",
        "1ms",
        "--ssl-certfile",
        cert,
        "--ssl-keyfile",
        key,
    ]);
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let load = [
        "-c",
        "2",
        "-n",
        "6",
        "--input-len",
        "32",
        "--max-tokens",
        "8",
    ];

    // The system store must not hold our CA unless the test puts it there.
    let loadgen = |target: &str| -> Call { call("loadgen").no_system_ca().url(target).args(load) };

    // Trusted through --cacert, by IP address and by name.
    let localhost = url.replace("127.0.0.1", "localhost");
    for target in [url.as_str(), localhost.as_str()] {
        let out = loadgen(target).args(["--cacert", ca]).run();
        let err = out.err();
        assert!(out.status.success(), "{target}: {err}");
        let s = out.one::<SummaryRecord>();
        assert_eq!((s.ok, s.prompt_len_exact), (6, 6), "{s:?}");
        assert!(s.ttft_ms.as_ref().unwrap().p50 >= 5.0, "{s:?}");
    }

    // Without it the server's certificate is not trusted: one line saying so and what to do.
    let out = loadgen(&url).run();
    let err = out.err();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("TLS handshake with")
            && err.contains("not signed by a CA loadgen trusts")
            && err.contains("--cacert FILE"),
        "{err}"
    );
    assert_eq!(
        err.lines().filter(|l| l.contains("error")).count(),
        1,
        "{err}"
    );

    // The system's store is read (SSL_CERT_FILE as OpenSSL reads it).
    let out = loadgen(&url).env("SSL_CERT_FILE", ca).run_ok();
    assert_eq!(out.one::<SummaryRecord>().ok, 6);

    // --insecure: encrypted, unauthenticated, spelled out.
    let out = loadgen(&url).args(["--insecure"]).run_ok();
    assert_eq!(out.one::<SummaryRecord>().ok, 6);

    // A CA file that is not one, and TLS flags on a plain http URL: refused in one line.
    let out = call("loadgen")
        .no_system_ca()
        .url(&url)
        .args(["--cacert", key])
        .run();
    let err = out.err();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("--cacert {key}")), "{err}");
    let out = call("loadgen")
        .no_system_ca()
        .url("http://127.0.0.1:9")
        .args(["--insecure"])
        .run();
    let err = out.err();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("apply to https:// URLs only"), "{err}");
}
