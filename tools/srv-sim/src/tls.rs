//! HTTPS (`--ssl-certfile`, `--ssl-keyfile`, vLLM's flags): the same HTTP/1.1 server behind a
//! TLS acceptor (rustls on ring), so clients can be tested and benchmarked over TLS.

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// An acceptor for the certificate chain and key in these PEM files; the error names the file.
pub fn acceptor(certfile: &str, keyfile: &str) -> Result<tokio_rustls::TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certfile)
        .map_err(|e| format!("--ssl-certfile {certfile}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--ssl-certfile {certfile}: not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "--ssl-certfile {certfile}: no certificate in it (expected PEM: -----BEGIN CERTIFICATE-----)"
        ));
    }
    let key = PrivateKeyDer::from_pem_file(keyfile)
        .map_err(|e| format!("--ssl-keyfile {keyfile}: no private key read: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("--ssl-certfile {certfile} with --ssl-keyfile {keyfile}: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
