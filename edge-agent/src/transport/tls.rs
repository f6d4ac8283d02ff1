//! TLS for IoT Hub: the server is verified against the system's root certificates
//! (`rustls-native-certs`: the OS store, or `SSL_CERT_FILE`/`SSL_CERT_DIR`); with X.509
//! authentication the client presents its certificate chain and key (PEM files).

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rumqttc::TlsConfiguration;
use rumqttc::tokio_rustls::rustls::{ClientConfig, RootCertStore};

use crate::config::Auth;

/// Why TLS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// No usable root certificate was found on the system.
    #[error(
        "no system root certificates found (install ca-certificates, or set SSL_CERT_FILE): {0}"
    )]
    NoRoots(String),
    /// A PEM file cannot be read or holds nothing usable.
    #[error("{path}: {problem}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// rustls refused the client certificate and key.
    #[error("the X.509 client certificate and key do not work together: {0}")]
    ClientAuth(String),
}

fn pem_error(path: &Path, problem: impl Into<String>) -> TlsError {
    TlsError::Pem {
        path: path.to_owned(),
        problem: problem.into(),
    }
}

/// The rustls configuration for `auth`.
pub(super) fn configuration(auth: &Auth) -> Result<TlsConfiguration, TlsError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs()
        .map_err(|err| TlsError::NoRoots(err.to_string()))?;
    let (added, _ignored) = roots.add_parsable_certificates(native);
    if added == 0 {
        return Err(TlsError::NoRoots("the store is empty".into()));
    }
    let builder = ClientConfig::builder().with_root_certificates(roots);
    let config = match auth {
        Auth::X509(x509) => {
            let chain = read_pem(&x509.cert_path, |reader| {
                rustls_pemfile::certs(reader).collect::<Result<Vec<_>, _>>()
            })?;
            if chain.is_empty() {
                return Err(pem_error(&x509.cert_path, "no CERTIFICATE block found"));
            }
            let key = read_pem(&x509.key_path, rustls_pemfile::private_key)?
                .ok_or_else(|| pem_error(&x509.key_path, "no private key block found"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|err| TlsError::ClientAuth(err.to_string()))?
        }
        Auth::Anonymous | Auth::Sas(_) => builder.with_no_client_auth(),
    };
    Ok(TlsConfiguration::Rustls(Arc::new(config)))
}

fn read_pem<T>(
    path: &Path,
    parse: impl FnOnce(&mut dyn std::io::BufRead) -> std::io::Result<T>,
) -> Result<T, TlsError> {
    let file = File::open(path).map_err(|err| pem_error(path, err.to_string()))?;
    parse(&mut BufReader::new(file)).map_err(|err| pem_error(path, err.to_string()))
}
