//! HTTPS end to end: srv-sim serving TLS with a certificate made here (a CA and a leaf for
//! localhost and 127.0.0.1, by rcgen); loadgen trusts it through `--cacert` or the system's
//! store (`SSL_CERT_FILE`), refuses it clearly without, and skips the check with `--insecure`.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

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

fn loadgen(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = testkit::cmd("loadgen");
    c.args(args).stdin(Stdio::null());
    // The system store must not hold our CA unless a test puts it there.
    c.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run loadgen")
}

fn summary(out: &Output) -> Value {
    let recs = testkit::json_lines(&out.stdout);
    recs.into_iter()
        .find(|r| r["kind"] == "summary")
        .unwrap_or_else(|| panic!("no summary: {}", String::from_utf8_lossy(&out.stderr)))
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

    // Trusted through --cacert, by IP address and by name.
    let localhost = url.replace("127.0.0.1", "localhost");
    for target in [url.as_str(), localhost.as_str()] {
        let mut args = vec!["--url", target, "--cacert", ca];
        args.extend(load);
        let out = loadgen(&args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{target}: {err}");
        let s = summary(&out);
        assert_eq!(
            (s["ok"].as_u64(), s["prompt_len_exact"].as_u64()),
            (Some(6), Some(6)),
            "{s}"
        );
        assert!(s["ttft_ms"]["p50"].as_f64().unwrap() >= 5.0, "{s}");
    }

    // Without it the server's certificate is not trusted: one line saying so and what to do.
    let mut args = vec!["--url", url.as_str()];
    args.extend(load);
    let out = loadgen(&args, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
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
    let out = loadgen(&args, &[("SSL_CERT_FILE", ca)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary(&out)["ok"], 6);

    // --insecure: encrypted, unauthenticated, spelled out.
    let mut insecure = args.clone();
    insecure.push("--insecure");
    let out = loadgen(&insecure, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary(&out)["ok"], 6);

    // A CA file that is not one, and TLS flags on a plain http URL: refused in one line.
    let out = loadgen(&["--url", &url, "--cacert", key], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("--cacert {key}")), "{err}");
    let out = loadgen(&["--url", "http://127.0.0.1:9", "--insecure"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("apply to https:// URLs only"), "{err}");
}
