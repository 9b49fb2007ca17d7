//! What an HTTPS check needs from a TLS stack, as two traits. The node hands its runner an
//! implementation ([`Runner::with_tls`](crate::Runner::with_tls); `stator-tls` is rustls on
//! the *ring* provider), so this crate — and the controller above it, whose reconciler owns
//! the runner — compiles no TLS library. A runner without one fails every HTTPS probe with
//! the reason "no TLS client for an HTTPS check".

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use stator_config::{Config, TlsSpec};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A future boxed for a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A TLS stack for HTTPS checks.
pub trait Tls: Send + Sync + fmt::Debug {
    /// The client an HTTPS check of `spec` uses, built once when the check starts (trust
    /// anchors read then). A client that could not be built fails each probe with the reason.
    fn client(&self, spec: &TlsSpec) -> Arc<dyn TlsClient>;

    /// Every HTTPS check's `ca_file` in `config` can be read and holds usable certificates;
    /// otherwise the first one that cannot, as (field path, reason). Run at start and on
    /// reload, so that a bad file is refused with its field path instead of failing every
    /// probe.
    fn check_ca_files(&self, config: &Config) -> Result<(), (String, String)>;
}

/// An HTTPS check's client.
pub trait TlsClient: Send + Sync + fmt::Debug {
    /// Runs the TLS handshake over `stream` to `address`. The error is a short reason for the
    /// check's status (`TLS handshake failed: invalid peer certificate: UnknownIssuer`).
    fn connect(
        &self,
        stream: TcpStream,
        address: IpAddr,
    ) -> BoxFuture<'_, Result<Box<dyn TlsStream>, String>>;
}

/// A TLS session the probe speaks HTTP over.
pub trait TlsStream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> TlsStream for T {}
