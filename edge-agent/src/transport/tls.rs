//! TLS for IoT Hub: the server is verified against the system's root certificates (the OS
//! store, or `SSL_CERT_FILE`/`SSL_CERT_DIR`); with X.509 authentication the client presents
//! its certificate chain and key (PEM files). The PEM handling is `client-tls`'s, shared
//! with the writer's `mqtts://` source.

pub use client_tls::TlsError;
use client_tls::{Identity, Trust};
use rumqttc::TlsConfiguration;

use crate::config::Auth;

/// The rustls configuration for `auth`.
pub(super) fn configuration(auth: &Auth) -> Result<TlsConfiguration, TlsError> {
    let identity = match auth {
        Auth::X509(x509) => Some(Identity {
            cert_path: x509.cert_path.clone(),
            key_path: x509.key_path.clone(),
        }),
        Auth::Anonymous | Auth::Sas(_) => None,
    };
    client_tls::mqtt_tls(&Trust::System, identity.as_ref())
}
