//! The MQTT connection's settings, as the agent runs it: where, how to authenticate, how to
//! retry.

use std::path::PathBuf;
use std::time::Duration;

use retry_backoff::BackoffConfig;
use settings::{Secret, SecretBytes};

/// The MQTT connection: where, how to authenticate, how to retry.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// How to reach the broker.
    pub endpoint: Endpoint,
    /// How to authenticate.
    pub auth: Auth,
    /// MQTT keep-alive (IoT Hub allows at most 1177 s).
    pub keep_alive: Duration,
    /// Time allowed for TCP, TLS and MQTT connect.
    pub connect_timeout: Duration,
    /// Reconnect backoff.
    pub backoff: BackoffConfig,
    /// Publishes awaiting PUBACK at most.
    pub max_inflight: u16,
    /// The CA (PEM) to trust for TLS instead of the system's roots: a gateway's, a local
    /// hub's.
    pub ca_file: Option<PathBuf>,
    /// Give the credentials up after the hub refused them this many times in a row
    /// (a device onboarded through DPS registers again); `None`: keep trying.
    pub refusals_before_giving_up: Option<u32>,
}

impl TransportConfig {
    /// Plain MQTT to `host:port`, no login, default timings.
    pub fn plain(host: &str, port: u16) -> TransportConfig {
        TransportConfig {
            endpoint: Endpoint::Tcp {
                host: host.to_owned(),
                port,
            },
            auth: Auth::Broker(BrokerAuth::default()),
            keep_alive: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            backoff: BackoffConfig::default(),
            max_inflight: 10,
            refusals_before_giving_up: None,
            ca_file: None,
        }
    }
}

/// How the agent reaches the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// MQTT over plain TCP (local brokers).
    Tcp {
        /// Host name or address.
        host: String,
        /// Port, usually 1883.
        port: u16,
    },
    /// MQTT over TLS (IoT Hub: port 8883), server verified against the system's roots.
    Tls {
        /// Host name, also the TLS server name.
        host: String,
        /// Port.
        port: u16,
    },
    /// MQTT over WebSockets over TLS (IoT Hub: `wss://{host}:443/$iothub/websocket`);
    /// a `ws://` URL goes without TLS (local brokers).
    WebSocket {
        /// The WebSocket URL.
        url: String,
    },
}

/// How the agent authenticates.
#[derive(Debug, Clone)]
pub enum Auth {
    /// A plain broker's login and client certificate, each if given (none: anonymous).
    Broker(BrokerAuth),
    /// IoT Hub SAS: a token made from the device key, renewed before it expires.
    Sas(SasConfig),
    /// IoT Hub X.509: a client certificate in TLS, no password.
    X509(X509Config),
}

/// A plain broker's authentication: a user name and password, a client certificate in
/// TLS (`mqtts://`), both, or neither.
#[derive(Debug, Clone, Default)]
pub struct BrokerAuth {
    /// The login of CONNECT.
    pub login: Option<Login>,
    /// The client certificate and key.
    pub identity: Option<client_tls::Identity>,
}

/// A user name and password for CONNECT.
#[derive(Debug, Clone)]
pub struct Login {
    /// The user name.
    pub username: String,
    /// The password (redacted in `Debug`).
    pub password: Secret,
}

/// IoT Hub SAS authentication.
#[derive(Debug, Clone)]
pub struct SasConfig {
    /// The hub host name (`{hub}.azure-devices.net`), part of the username and the token.
    pub hub_host: String,
    /// The device key (decoded).
    pub key: SecretBytes,
    /// How long each token is valid.
    pub token_ttl: Duration,
    /// At which fraction of the token's lifetime the agent reconnects with a fresh one.
    pub renew_fraction: f64,
}

/// IoT Hub X.509 authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X509Config {
    /// The hub host name, part of the username.
    pub hub_host: String,
    /// The client certificate chain, PEM.
    pub cert_path: PathBuf,
    /// The client private key, PEM.
    pub key_path: PathBuf,
}

impl Auth {
    /// The IoT Hub host name if this is an IoT Hub authentication.
    pub fn hub_host(&self) -> Option<&str> {
        match self {
            Auth::Broker(_) => None,
            Auth::Sas(sas) => Some(&sas.hub_host),
            Auth::X509(x509) => Some(&x509.hub_host),
        }
    }
}
