//! The MQTT broker the demo and the load generator talk to: an embedded `rumqttd` broker
//! running inside this process (nothing to install), or the system's Mosquitto with a
//! generated config (`--broker mosquitto`).
//!
//! Both listen on a free port of 127.0.0.1 and are ready (accepting TCP connections) when
//! [`Broker::start`] returns. Devices publish over MQTT 3.1.1 and the cloud writer
//! subscribes over MQTT 5: Mosquitto serves both on one port, the embedded broker on two
//! ([`Broker::addr`] for devices, [`Broker::writer_url`] for the writer). The embedded broker lives until the process exits (rumqttd
//! has no shutdown); Mosquitto stops when the [`Broker`] drops.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rumqttd::{ConnectionSettings, RouterConfig, ServerSettings};

/// Which broker to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BrokerKind {
    /// `rumqttd` inside this process.
    #[default]
    Embedded,
    /// The system's `mosquitto` binary with a generated config.
    Mosquitto,
}

/// Why a broker did not start.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// No free port could be found, or a socket call failed.
    #[error("cannot find a free port on 127.0.0.1: {0}")]
    Port(#[source] std::io::Error),
    /// The embedded broker did not accept connections in time.
    #[error("the embedded MQTT broker did not accept connections on {addr} within {timeout:?}")]
    NotReady {
        /// The address it was told to listen on.
        addr: SocketAddr,
        /// How long we waited.
        timeout: Duration,
    },
    /// Mosquitto could not be started.
    #[error("cannot start mosquitto: {0}")]
    Mosquitto(#[from] local_peers::PeerError),
}

/// A running broker.
pub struct Broker {
    addr: SocketAddr,
    /// The MQTT 5 listener the writer subscribes at (`addr` for Mosquitto).
    writer_addr: SocketAddr,
    kind: BrokerKind,
    /// Keeps Mosquitto running; `None` for the embedded broker.
    _mosquitto: Option<local_peers::Mosquitto>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("addr", &self.addr)
            .field("kind", &self.kind)
            .finish()
    }
}

/// How long a freshly started embedded broker may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Fresh ports tried when another process takes the chosen one first.
const PORT_ATTEMPTS: usize = 3;

impl BrokerKind {
    /// The broker's name: `embedded` or `mosquitto`.
    pub fn name(self) -> &'static str {
        match self {
            BrokerKind::Embedded => "embedded",
            BrokerKind::Mosquitto => "mosquitto",
        }
    }
}

impl Broker {
    /// Starts a broker of `kind` on a free port of 127.0.0.1 and waits until it accepts
    /// connections.
    pub fn start(kind: BrokerKind) -> Result<Broker, BrokerError> {
        match kind {
            BrokerKind::Embedded => {
                let mut last = None;
                for _ in 0..PORT_ATTEMPTS {
                    match start_embedded() {
                        Ok((addr, writer_addr)) => {
                            return Ok(Broker {
                                addr,
                                writer_addr,
                                kind,
                                _mosquitto: None,
                            });
                        }
                        Err(err @ BrokerError::NotReady { .. }) => last = Some(err),
                        Err(err) => return Err(err),
                    }
                }
                Err(last.expect("at least one attempt was made"))
            }
            BrokerKind::Mosquitto => {
                let mosquitto = local_peers::MosquittoConfig::default()
                    .persistence(false)
                    .start()?;
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, mosquitto.port()));
                Ok(Broker {
                    addr,
                    writer_addr: addr,
                    kind,
                    _mosquitto: Some(mosquitto),
                })
            }
        }
    }

    /// The address devices (MQTT 3.1.1 clients) connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Which broker this is.
    pub fn kind(&self) -> BrokerKind {
        self.kind
    }

    /// The broker's URL for devices, `mqtt://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("mqtt://{}", self.addr)
    }

    /// The URL the cloud writer subscribes at: the MQTT 5 listener.
    pub fn writer_url(&self) -> String {
        format!("mqtt://{}", self.writer_addr)
    }
}

/// The embedded broker's configuration: an MQTT 3.1.1 listener on `addr` for devices and an
/// MQTT 5 one on `writer_addr` for the writer, limits generous enough for thousands of
/// drones and a subscriber that falls minutes behind.
fn embedded_config(addr: SocketAddr, writer_addr: SocketAddr) -> rumqttd::Config {
    let connections = ConnectionSettings {
        connection_timeout_ms: 60_000,
        max_payload_size: telemetry::wire::MAX_MESSAGE_BYTES,
        max_inflight_count: 1_000,
        auth: None,
        external_auth: None,
        dynamic_filters: true,
    };
    let server = |name: &str, listen| ServerSettings {
        name: name.to_owned(),
        listen,
        tls: None,
        next_connection_delay_ms: 0,
        connections: connections.clone(),
    };
    rumqttd::Config {
        id: 0,
        router: RouterConfig {
            max_connections: 100_000,
            // Messages in flight towards one subscriber (the cloud writer).
            max_outgoing_packet_count: 1_000,
            // The commit log keeps what a slow subscriber has not read yet: 16 x 64 MiB holds
            // minutes of a large fleet, so a subscriber that falls behind sees lateness grow
            // instead of losing messages in the broker.
            max_segment_size: 64 << 20,
            max_segment_count: 16,
            ..RouterConfig::default()
        },
        v4: Some(HashMap::from([("v4".to_owned(), server("v4", addr))])),
        v5: Some(HashMap::from([(
            "v5".to_owned(),
            server("v5", writer_addr),
        )])),
        ..rumqttd::Config::default()
    }
}

/// Starts rumqttd on two fresh free ports in its own threads; returns the devices' and the
/// writer's addresses once both accept.
fn start_embedded() -> Result<(SocketAddr, SocketAddr), BrokerError> {
    let addr = free_port().map_err(BrokerError::Port)?;
    let writer_addr = free_port().map_err(BrokerError::Port)?;
    let mut broker = rumqttd::Broker::new(embedded_config(addr, writer_addr));
    std::thread::Builder::new()
        .name("mqtt-broker".to_owned())
        .spawn(move || {
            if let Err(err) = broker.start() {
                tracing::error!(error = %err, "embedded MQTT broker stopped");
            }
        })
        .map_err(BrokerError::Port)?;
    let deadline = Instant::now() + READY_TIMEOUT;
    for listener in [addr, writer_addr] {
        loop {
            if TcpStream::connect_timeout(&listener, Duration::from_millis(200)).is_ok() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(BrokerError::NotReady {
                    addr: listener,
                    timeout: READY_TIMEOUT,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok((addr, writer_addr))
}

/// A port of 127.0.0.1 that was free a moment ago.
fn free_port() -> std::io::Result<SocketAddr> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()
}
