//! HTTPS: the TLS side of the connection pool, on rustls (ring). The server's certificate is
//! checked against the system's roots (as `SSL_CERT_FILE`/`SSL_CERT_DIR` or the distribution's
//! bundle give them), or against `--cacert FILE` alone, or not at all with `--insecure`. ALPN
//! offers HTTP/1.1 only: the pool speaks HTTP/1.1 with keep-alive over TLS as over TCP.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;

/// Which certificates a server may present.
#[derive(Debug, Clone, PartialEq)]
pub enum Trust {
    /// Those signed by a root in the system's store.
    System,
    /// Those signed by a certificate in this PEM file (`--cacert`), and no others.
    CaFile(String),
    /// Any (`--insecure`): encrypted, but the server is not authenticated.
    Insecure,
}

/// A TLS connector for `trust`; the error is one line naming the file or the store.
pub fn connector(trust: &Trust) -> Result<tokio_rustls::TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let mut config = match trust {
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
        Trust::CaFile(path) => {
            let mut roots = RootCertStore::empty();
            let pem = servbench::files::read(path, servbench::files::FileKind::Certificates)
                .map_err(|e| format!("--cacert: {e}"))?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("--cacert {path}: not PEM certificates: {e}"))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!(
                    "--cacert {path}: no certificate in it (expected PEM: -----BEGIN CERTIFICATE-----)"
                ));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::System => {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                let why = found
                    .errors
                    .first()
                    .map_or("none found".to_string(), |e| e.to_string());
                return Err(format!(
                    "no CA certificates in the system's store ({why}); pass --cacert FILE with the server's CA"
                ));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The name the certificate must carry: the URL's host (an IP address without its brackets).
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_string())
        .map_err(|e| format!("{host}: not a TLS server name: {e}"))
}

/// `--insecure`: accepts every certificate; handshake signatures are still checked, so the
/// session is encrypted with whoever answered.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
