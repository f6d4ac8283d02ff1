//! TLS for IoT Hub and `mqtts://` brokers: the server is verified against the system's root certificates (the OS
//! store, or `SSL_CERT_FILE`/`SSL_CERT_DIR`), or against `IOTHUB_CA_FILE` alone (a gateway's
//! or a local hub's or broker's CA); with X.509 authentication, or a broker's client
//! certificate, the client presents its certificate chain and key (PEM files). The server's certificate is checked at the agent's clock's time:
//! a board still in 1970 would find every certificate not valid yet. The PEM handling is
//! `client-tls`'s, shared with the writer's `mqtts://` source.

pub use client_tls::TlsError;
use std::sync::Arc;

use client_tls::{CheckTime, Identity, Trust};
use rumqttc::TlsConfiguration;

use super::config::{Auth, TransportConfig};
use crate::clock::Clock;

/// The rustls configuration for a transport's trust and authentication.
pub(super) fn configuration(
    config: &TransportConfig,
    clock: &Clock,
) -> Result<TlsConfiguration, TlsError> {
    let identity = match &config.auth {
        Auth::X509(x509) => Some(Identity {
            cert_path: x509.cert_path.clone(),
            key_path: x509.key_path.clone(),
        }),
        Auth::Broker(broker) => broker.identity.clone(),
        Auth::Sas(_) => None,
    };
    let trust = match &config.ca_file {
        Some(ca) => Trust::CaFile(ca.clone()),
        None => Trust::System,
    };
    let clock = clock.clone();
    let at: CheckTime = Arc::new(move || clock.now().into());
    client_tls::mqtt_tls(&trust, identity.as_ref(), Some(&at))
}
