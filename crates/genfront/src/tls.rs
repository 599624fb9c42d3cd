//! TLS on the listener (`--tls-cert`, `--tls-key`): rustls (ring provider) through
//! `tokio-rustls`, plugged into the serving loop as an [`Acceptor`], so every connection limit
//! of [`crate::serving`] applies unchanged and the handshake runs in the connection's own task
//! under `--header-read-timeout`.
//!
//! ALPN offers `h2` and `http/1.1`; the serving loop's auto builder reads the connection's
//! preface, so both protocols are served on the one port as over plain TCP.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::serving::{Acceptor, TcpAcceptor};

/// A rustls server configuration from a PEM certificate chain and its PEM private key (PKCS#8,
/// PKCS#1 or SEC1), TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`, no client certificates.
///
/// # Errors
/// A file that cannot be read, holds no certificate or key, or a key that does not match.
pub fn server_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read --tls-cert {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("invalid PEM in --tls-cert {}", cert.display()))?;
    if chain.is_empty() {
        anyhow::bail!("--tls-cert {} holds no certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("cannot read a private key from --tls-key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("--tls-cert and --tls-key do not form a usable certificate")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// TCP connections, each served over TLS after its handshake.
pub struct TlsAcceptor {
    tcp: TcpAcceptor,
    tls: tokio_rustls::TlsAcceptor,
}

impl TlsAcceptor {
    /// TLS with `config` over the connections of `tcp`.
    pub fn new(tcp: TcpAcceptor, config: Arc<rustls::ServerConfig>) -> Self {
        Self {
            tcp,
            tls: tokio_rustls::TlsAcceptor::from(config),
        }
    }
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("tcp", &self.tcp)
            .finish()
    }
}

impl Acceptor for TlsAcceptor {
    type Raw = tokio::net::TcpStream;
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

    fn accept(&mut self) -> Pin<Box<dyn Future<Output = std::io::Result<Self::Raw>> + Send + '_>> {
        self.tcp.accept()
    }

    fn handshake(
        &self,
        raw: Self::Raw,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Self::Io>> + Send + 'static>> {
        let accept = self.tls.accept(raw);
        Box::pin(accept)
    }
}
