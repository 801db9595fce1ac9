//! HTTPS: the TLS side of the connection pool, on rustls (ring). The server's certificate is
//! checked against the system's roots (as `SSL_CERT_FILE`/`SSL_CERT_DIR` or the distribution's
//! bundle give them), or against `--cacert FILE` alone, or not at all with `--insecure`; a
//! certificate that is itself in the trusted set is accepted as pinned (see `CaOrPinned`). ALPN
//! offers HTTP/1.1 only: the pool speaks HTTP/1.1 with keep-alive over TLS as over TCP.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_name};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
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
            let pem = servbench::files::read(path, servbench::files::FileKind::Certificates)
                .map_err(|e| format!("--cacert: {e}"))?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("--cacert {path}: not PEM certificates: {e}"))?;
            let verifier = CaOrPinned::new(certs, &provider)
                .ok_or_else(|| {
                    format!(
                        "--cacert {path}: no certificate in it (expected PEM: -----BEGIN CERTIFICATE-----)"
                    )
                })?
                .map_err(|e| format!("--cacert {path}: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth()
        }
        Trust::System => {
            let found = rustls_native_certs::load_native_certs();
            let why = found
                .errors
                .first()
                .map_or("none found".to_string(), |e| e.to_string());
            let verifier = CaOrPinned::new(found.certs, &provider)
                .ok_or_else(|| {
                    format!(
                        "no CA certificates in the system's store ({why}); pass --cacert FILE with the server's CA"
                    )
                })?
                .map_err(|e| format!("the system's CA store: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth()
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

/// The trusted certificates: a server certificate is accepted when it chains to one of them
/// (webpki), or when it is exactly one of them (pinned: the self-signed certificate `openssl req
/// -x509` makes is also a CA, `CA:TRUE`, which webpki refuses as a server's own, while curl,
/// Python and OpenSSL trust it when it is in the CA file). A pinned certificate must still be
/// valid now (webpki checks that before anything else, so those errors are never excused) and
/// carry the name connected to.
#[derive(Debug)]
struct CaOrPinned {
    chain: Arc<WebPkiServerVerifier>,
    trusted: Vec<CertificateDer<'static>>,
}

impl CaOrPinned {
    /// None when no certificate in `certs` parses as a trust anchor.
    fn new(
        certs: Vec<CertificateDer<'static>>,
        provider: &Arc<rustls::crypto::CryptoProvider>,
    ) -> Option<Result<CaOrPinned, String>> {
        let mut roots = RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(certs.iter().cloned());
        if added == 0 {
            return None;
        }
        Some(
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map(|chain| CaOrPinned {
                    chain,
                    trusted: certs,
                })
                .map_err(|e| e.to_string()),
        )
    }
}

/// The chain errors a pinned certificate is excused: it is its own anchor, whatever its issuer
/// or its basicConstraints say.
fn excused_when_pinned(e: &rustls::Error) -> bool {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => true,
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => {
            other.to_string().contains("CaUsedAsEndEntity")
        }
        _ => false,
    }
}

impl ServerCertVerifier for CaOrPinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .chain
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(e)
                if excused_when_pinned(&e)
                    && self
                        .trusted
                        .iter()
                        .any(|c| c.as_ref() == end_entity.as_ref()) =>
            {
                let parsed = ParsedCertificate::try_from(end_entity)?;
                verify_server_name(&parsed, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
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
