//! # stator-tls — the TLS side of HTTPS checks: rustls on the *ring* provider
//!
//! Layer: beside `stator-health`, whose [`Tls`] trait it implements ([`Rustls`]); the node
//! (`stator-node`) hands it to the health-check runner. The one place rustls lives in the
//! node, so that the controller and the probes' scheduling compile without it.
//!
//!
//! - **Trust anchors**: the system's (`rustls-native-certs`: `/etc/ssl/certs` on Debian,
//!   what `update-ca-certificates` maintains), loaded once per process, plus the check's
//!   `ca_file` (PEM, any number of certificates), read when the check starts.
//! - **Server name**: the check's `sni` (or its `Host` header's name) is sent in SNI and the
//!   certificate must be valid for it; without one, no SNI is sent and the certificate must
//!   name the backend's IP address (as `curl https://10.1.1.11/` would require).
//! - **`verify = false`** accepts any certificate chain and name, but still checks the
//!   handshake's signatures with the certificate's key (so it is still a TLS session, only
//!   not an authenticated one).
//! - ALPN offers `http/1.1` only: the probe speaks HTTP/1.1.
//!
//! A problem with the configuration of a check (an unreadable `ca_file`) does not stop the
//! node here: every probe of that check fails with the reason. The controller also refuses a
//! start or reload whose `ca_file` it cannot read ([`load_ca_file`], called by `host`), so
//! that problem is normally met with a field path before any check starts.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use stator_config::TlsSpec;
use stator_health::tls::{BoxFuture, Tls, TlsClient, TlsStream as Stream};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// rustls on *ring*, with the system's trust anchors: the node's [`Tls`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Rustls;

impl Tls for Rustls {
    fn client(&self, spec: &TlsSpec) -> Arc<dyn TlsClient> {
        Arc::new(RustlsClient::new(spec))
    }

    fn check_ca_files(&self, config: &stator_config::Config) -> Result<(), (String, String)> {
        check_ca_files(config)
    }
}

/// How an HTTPS check opens its sessions: built once when the check starts.
#[derive(Debug, Clone)]
pub struct RustlsClient {
    /// The client configuration, or why it could not be built (every probe fails with it).
    config: Result<Arc<ClientConfig>, String>,
    /// The name for SNI and verification; the backend's address when `None`.
    server_name: Option<String>,
}

impl TlsClient for RustlsClient {
    fn connect(
        &self,
        stream: TcpStream,
        address: IpAddr,
    ) -> BoxFuture<'_, Result<Box<dyn Stream>, String>> {
        Box::pin(async move {
            let s = RustlsClient::connect(self, stream, address).await?;
            Ok(Box::new(s) as Box<dyn Stream>)
        })
    }
}

impl RustlsClient {
    /// The client of a check's `spec`.
    pub fn new(spec: &TlsSpec) -> Self {
        Self {
            config: client_config(spec).map(Arc::new),
            server_name: spec.server_name.clone(),
        }
    }

    /// Runs the TLS handshake over `stream` to `address`. The error is a short reason for the
    /// check's status (`TLS handshake failed: invalid peer certificate: UnknownIssuer`).
    pub async fn connect(
        &self,
        stream: TcpStream,
        address: IpAddr,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        let config = self.config.as_ref().map_err(Clone::clone)?;
        let name = match &self.server_name {
            Some(n) => ServerName::try_from(n.clone())
                .map_err(|e| format!("server name {n:?} is not usable for TLS: {e}"))?,
            None => ServerName::IpAddress(address.into()),
        };
        TlsConnector::from(Arc::clone(config))
            .connect(name, stream)
            .await
            .map_err(|e| {
                let unknown_issuer = e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                    .is_some_and(|r| {
                        matches!(
                            r,
                            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
                        )
                    });
                let hint = if unknown_issuer {
                    " (the issuer is neither a system trust anchor nor in the check's ca_file)"
                } else {
                    ""
                };
                format!("TLS handshake failed: {e}{hint}")
            })
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The system's trust anchors, loaded once. Certificates the system store holds but rustls
/// cannot use are skipped (and logged once), as browsers do.
fn system_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!(error = %e, "reading the system's trust anchors");
        }
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!(
                "no system trust anchors found (install ca-certificates): HTTPS checks verify \
                 only against their ca_file"
            );
        }
        tracing::debug!(added, ignored, "system trust anchors loaded");
        roots
    })
}

/// Reads the certificates of a PEM file (at least one). Used by the host checks at start and
/// reload, and by each check when it starts.
pub fn load_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{} is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    let mut probe = RootCertStore::empty();
    for c in &certs {
        probe
            .add(c.clone())
            .map_err(|e| format!("{}: a certificate is not usable: {e}", path.display()))?;
    }
    Ok(certs)
}

fn client_config(spec: &TlsSpec) -> Result<ClientConfig, String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let mut config = if spec.verify {
        let mut roots = system_roots().clone();
        if let Some(path) = &spec.ca_file {
            for cert in load_ca_file(path)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// `verify = false`: any certificate and name is accepted; handshake signatures are still
/// checked against the presented certificate's key.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
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
        verify_tls12_signature(
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
        verify_tls13_signature(
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

/// Every HTTPS check's `ca_file` in `config` can be read and holds usable certificates;
/// otherwise the first one that cannot, as (field path, reason). Run at start and on reload,
/// so that a bad file is refused with its field path instead of failing every probe.
pub fn check_ca_files(config: &stator_config::Config) -> Result<(), (String, String)> {
    for (i, pool) in config.pools.iter().enumerate() {
        let Some(stator_config::HealthSpec {
            probe: stator_config::Probe::Https(h),
            ..
        }) = &pool.health
        else {
            continue;
        };
        if let Some(path) = &h.tls.ca_file {
            load_ca_file(path).map_err(|reason| (format!("pool[{i}].health.ca_file"), reason))?;
        }
    }
    Ok(())
}
