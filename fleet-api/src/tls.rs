//! HTTPS for the API and the map: the certificate and key files (`API_TLS_CERT_FILE`,
//! `API_TLS_KEY_FILE`), read at start and again whenever either file changes, and the server
//! that answers over them.
//!
//! A renewed certificate (cert-manager rewriting a Kubernetes secret, certbot renewing a
//! file) is served from the next handshake on, without a restart ([`crate::reload`]: two
//! `stat` calls a handshake, microseconds against its milliseconds). A pair that does not
//! load (a key written before its certificate, a key that does not match) leaves the last
//! good pair in service and is logged; it is read again once the files change again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::reload::Reloading;
use crate::serving::Serving;

/// The certificate chain and private key files, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (`API_TLS_CERT_FILE`).
    pub cert: PathBuf,
    /// The private key, PKCS#8, PKCS#1 or SEC1 (`API_TLS_KEY_FILE`).
    pub key: PathBuf,
}

/// Why a certificate and key could not be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{0} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate(PathBuf),
    /// The key file holds no PEM private key, or one rustls cannot use.
    #[error("{path} holds no usable PEM private key: {message}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The key is not the certificate's.
    #[error("the key in {key} does not belong to the certificate in {cert}: {message}")]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's finding.
        message: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

fn load(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let cert_pem = read(&files.cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| TlsError::NoCertificate(files.cert.clone()))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(files.cert.clone()));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(&files.key)?).map_err(|e| TlsError::Key {
        path: files.key.clone(),
        message: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError::Mismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
            message: e.to_string(),
        },
        other => TlsError::Key {
            path: files.key.clone(),
            message: other.to_string(),
        },
    })
}

/// Answers every handshake with the newest pair of files that loads.
#[derive(Debug)]
struct ReloadingCert(Reloading<CertifiedKey>);

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }
}

/// The server side of TLS over `files`, read now (an error names the file and what is wrong).
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (pair, for_load) = (files.clone(), provider.clone());
    let resolver = ReloadingCert(Reloading::start(
        "TLS certificate",
        vec![files.cert.clone(), files.key.clone()],
        move || load(&pair, &for_load),
    )?);
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `router` over TLS on `listener` within `serving`'s limits until `shutdown` is
/// cancelled.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: Arc<ServerConfig>,
    serving: Serving,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let config = RustlsConfig::from_config(config);
    crate::serving::serve(listener, router, serving, Some(config), shutdown).await
}
