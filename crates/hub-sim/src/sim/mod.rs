//! The running hub: its settings, starting the listeners on the hub's data every server serves
//! ([`crate::hub`]), and the library API (addresses, connection strings, enrollment groups,
//! partitions, stats, shutdown); the calls only tests make are in `test_support`, behind the
//! `test-support` feature.

#[cfg(feature = "test-support")]
mod test_support;

use crate::admin::Admin;
use crate::amqp::consumer::Owners;
use crate::amqp::entra::{EntraAccess, EntraTrust};
use crate::amqp::server::AmqpServer;
use crate::amqp::shared::AmqpShared;
use crate::dps::service::Dps;
use crate::dps::{DpsConfig, DpsError};
use crate::faults::Faults;
use crate::hub::twin::events::{Events, Route};
use crate::hub::twin::store::Twins;
use crate::hub::{DeviceSessions, Hub};
use crate::mqtt::https::Https;
use crate::mqtt::listener::{self, Framing};
use crate::partitions::disk::DiskError;
use crate::partitions::{DataDir, Partitions, Retention, now_ms};
use crate::registry::{Registry, RegistryError};
use crate::state_dir::{self, PolicyKeys, StateError};
use crate::stats::{Counters, Stats};
use crate::tls::{Ca, TlsError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Why the hub could not start or act.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The Entra ID issuer's discovery document or keys could not be read.
    #[error("cannot read the Entra ID issuer's keys: {0}")]
    Entra(String),
    /// A run-time Entra ID change on a hub that takes no tokens.
    #[cfg(feature = "test-support")]
    #[error("the hub takes no Entra ID tokens (start it with HubConfig::entra)")]
    NoEntraTrust,
    /// The state directory.
    #[error(transparent)]
    State(#[from] StateError),
    /// The registry.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Certificates or TLS.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The data directory.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// The provisioning service.
    #[error(transparent)]
    Dps(#[from] DpsError),
    /// A port could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// Settings of a hub (see the binary's `--help` for each).
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Where the CA, keys, registry and client files live.
    pub state_dir: PathBuf,
    /// The hub's name (the Event Hubs entity path).
    pub hub_name: String,
    /// The host name clients use (certificate name, user names, token resources).
    pub host: String,
    /// The address to bind.
    pub bind: IpAddr,
    /// Partitions of the built-in endpoint.
    pub partitions: usize,
    /// MQTT over TLS port (0: any free port).
    pub mqtt_port: u16,
    /// MQTT over WebSockets port (0: any free port).
    pub ws_port: u16,
    /// Admin HTTP port (faults, devices, metrics); `None`: no admin endpoint.
    pub admin_port: Option<u16>,
    /// AMQP (plain, as Microsoft's emulator) port of the built-in endpoint (0: any free port).
    pub amqp_port: u16,
    /// AMQP over TLS port of the built-in endpoint, as the service's 5671 (0: any free port;
    /// `None`: no TLS listener). The server certificate is the one of the MQTT side, signed
    /// by `ca.pem`.
    pub amqp_tls_port: Option<u16>,
    /// Retention per partition.
    pub retention: Retention,
    /// Where the partitions are kept on disk, so that a restart loses nothing acknowledged;
    /// `None`: in memory only.
    pub data_dir: Option<DataDir>,
    /// Devices to register at start, `{prefix}{i}` for i in 0..n, listed in `devices.txt`.
    pub devices: usize,
    /// Prefix of those devices' ids.
    pub device_prefix: String,
    /// The provisioning service (`src/dps/`).
    pub dps: DpsConfig,
    /// The built-in endpoint plays an Event Hubs namespace that takes Entra ID tokens
    /// (`src/amqp/entra.rs`); `None`: shared access signatures only, as IoT Hub's.
    pub entra: Option<EntraTrust>,
    /// Holds the answer to a client's detach of a `$cbs` or `$management` link for 100 ms,
    /// for clients on fe2o3-amqp 0.16 without the fix the workspace carries
    /// (`vendor/fe2o3-amqp/PATCHED.md`), whose session ends with `UnattachedHandle` when
    /// the answer arrives after the link was dropped. Off by default: Event Hubs answers at
    /// once.
    pub unattached_handle_workaround: bool,
    /// Routes of non-telemetry events to the built-in endpoint (`src/hub/twin/events.rs`);
    /// none by default, as an IoT hub without such routes.
    pub routes: Vec<Route>,
}

impl HubConfig {
    /// Defaults: hub `hub-sim`, host `localhost`, 4 partitions, any free ports on 127.0.0.1.
    pub fn new(state_dir: impl Into<PathBuf>) -> HubConfig {
        HubConfig {
            state_dir: state_dir.into(),
            hub_name: "hub-sim".into(),
            host: "localhost".into(),
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            partitions: 4,
            mqtt_port: 0,
            ws_port: 0,
            amqp_port: 0,
            amqp_tls_port: None,
            admin_port: None,
            retention: Retention::default(),
            data_dir: None,
            devices: 0,
            device_prefix: "device-".into(),
            dps: DpsConfig::default(),
            entra: None,
            unattached_handle_workaround: false,
            routes: Vec::new(),
        }
    }
}

/// A running hub. Dropping it does not stop it: call [`HubSim::shutdown`].
pub struct HubSim {
    hub: Arc<Hub>,
    config: HubConfig,
    keys: PolicyKeys,
    ca: Ca,
    mqtt_addr: SocketAddr,
    ws_addr: SocketAddr,
    dps: Arc<Dps>,
    dps_addr: SocketAddr,
    amqp: Arc<AmqpServer>,
    /// The Entra ID roles, changed at run time by tests.
    #[cfg(feature = "test-support")]
    entra: Option<Arc<EntraAccess>>,
    admin_addr: Option<SocketAddr>,
    stop: CancellationToken,
}

async fn bind(ip: IpAddr, port: u16) -> Result<(TcpListener, SocketAddr), HubError> {
    let addr = SocketAddr::new(ip, port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| HubError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| HubError::Bind { addr, source })?;
    Ok((listener, local))
}

impl HubSim {
    /// Starts a hub: prepares the state directory, binds every port, writes the client files.
    pub async fn start(config: HubConfig) -> Result<HubSim, HubError> {
        let dir = config.state_dir.clone();
        state_dir::ensure_dir(&dir)?;
        let ca = Ca::load_or_create(&dir)?;
        let keys = state_dir::policy_keys(&dir)?;
        let registry = Registry::open(&dir.join("registry.json"))?;
        let mut device_lines = String::new();
        for i in 0..config.devices {
            let id = format!("{}{i}", config.device_prefix);
            let key = registry.add_sas(&id)?;
            device_lines.push_str(&state_dir::device_connection_string(
                &config.host,
                &id,
                &key,
            ));
            device_lines.push('\n');
        }
        if config.devices > 0 {
            state_dir::write(&dir.join("devices.txt"), &device_lines)?;
        }
        let tls = tokio_rustls::TlsAcceptor::from(ca.server_config(&config.host)?);
        let (mqtt_listener, mqtt_addr) = bind(config.bind, config.mqtt_port).await?;
        let (ws_listener, ws_addr) = bind(config.bind, config.ws_port).await?;
        let partitions = match config.data_dir.clone() {
            Some(data) => {
                let (count, retention) = (config.partitions, config.retention);
                tokio::task::spawn_blocking(move || Partitions::open(count, retention, &data))
                    .await
                    .expect("reading the data directory does not panic")?
            }
            None => Partitions::new(config.partitions, config.retention),
        };
        let hub = Arc::new(Hub {
            host: config.host.clone(),
            registry,
            partitions,
            faults: Faults::default(),
            counters: Counters::default(),
            sessions: DeviceSessions::default(),
            twins: Twins::open(&dir.join("twins"))?,
            methods: Default::default(),
            events: Events::new(&config.hub_name, &config.routes),
        });
        let dps = Arc::new(Dps::open(&dir, config.dps.clone(), hub.clone())?);
        let stop = CancellationToken::new();
        let https = Arc::new(Https {
            hub: hub.clone(),
            dps: dps.clone(),
            policy_keys: [
                ("iothubowner", &keys.iothubowner),
                ("service", &keys.service),
            ]
            .into_iter()
            .map(|(name, key)| {
                let key = BASE64
                    .decode(key)
                    .expect("the policy keys the hub made are base64");
                (name, key)
            })
            .collect(),
            stop: stop.clone(),
        });
        let mut listeners = vec![
            (mqtt_listener, Framing::Mqtt),
            (ws_listener, Framing::Https(https)),
        ];
        let dps_addr = match config.dps.port {
            Some(port) => {
                let (listener, addr) = bind(config.bind, port).await?;
                listeners.push((listener, Framing::Mqtt));
                addr
            }
            None => mqtt_addr,
        };
        for (listener, framing) in listeners {
            tokio::spawn(listener::run(
                hub.clone(),
                dps.clone(),
                listener,
                tls.clone(),
                framing,
                stop.clone(),
            ));
        }
        let amqp_addr = SocketAddr::new(config.bind, config.amqp_port);
        let amqp_tls = config
            .amqp_tls_port
            .map(|port| (SocketAddr::new(config.bind, port), tls.clone()));
        let entra = match config.entra.clone() {
            Some(trust) => Some(Arc::new(
                EntraAccess::start(trust)
                    .await
                    .map_err(|e| HubError::Entra(e.to_string()))?,
            )),
            None => None,
        };
        let amqp = AmqpServer::start(
            AmqpShared {
                hub: hub.clone(),
                hub_name: config.hub_name.clone(),
                key: keys.service.clone(),
                entra: entra.clone(),
                owners: Owners::default(),
                created_ms: now_ms(),
                unattached_handle_workaround: config.unattached_handle_workaround,
            },
            amqp_addr,
            amqp_tls,
            stop.clone(),
        )
        .await
        .map_err(|source| HubError::Bind {
            addr: amqp_addr,
            source,
        })?;
        let amqp = Arc::new(amqp);
        let admin_addr = match config.admin_port {
            Some(port) => {
                let (listener, addr) = bind(config.bind, port).await?;
                let admin = Arc::new(Admin {
                    hub: hub.clone(),
                    dps: dps.clone(),
                    amqp: amqp.clone(),
                });
                tokio::spawn(crate::admin::run(admin, listener, stop.clone()));
                Some(addr)
            }
            None => None,
        };
        state_dir::write(
            &dir.join("eventhub-connection-string"),
            &state_dir::eventhub_connection_string(
                &config.host,
                amqp.addr().port(),
                &keys.service,
                &config.hub_name,
            ),
        )?;
        if let Some(port) = amqp.tls_addr().map(|a| a.port()) {
            state_dir::write(
                &dir.join("eventhub-tls-connection-string"),
                &state_dir::eventhub_tls_connection_string(
                    &config.host,
                    port,
                    &keys.service,
                    &config.hub_name,
                ),
            )?;
        }
        state_dir::write(
            &dir.join("service-connection-string"),
            &state_dir::service_connection_string(&config.host, &keys.iothubowner),
        )?;
        tracing::info!(mqtt = %mqtt_addr, websocket = %ws_addr, dps = %dps_addr, id_scope = %dps.id_scope, amqp = %amqp.addr(), hub = %config.hub_name, "hub-sim listening");
        Ok(HubSim {
            hub,
            config,
            keys,
            ca,
            mqtt_addr,
            ws_addr,
            dps,
            dps_addr,
            amqp,
            #[cfg(feature = "test-support")]
            entra,
            admin_addr,
            stop,
        })
    }

    /// The settings it runs with.
    pub fn config(&self) -> &HubConfig {
        &self.config
    }

    /// The MQTT over TLS address.
    pub fn mqtt_addr(&self) -> SocketAddr {
        self.mqtt_addr
    }

    /// The HTTPS address (IoT Hub's 443): MQTT over WebSockets at `/$iothub/websocket`
    /// and the service REST API (`/twins/{id}`, `/twins/{id}/methods`).
    pub fn ws_addr(&self) -> SocketAddr {
        self.ws_addr
    }

    /// The hub's `iothubowner` connection string (also in `service-connection-string`);
    /// its REST API is served on [`HubSim::ws_addr`].
    pub fn service_connection_string(&self) -> String {
        state_dir::service_connection_string(&self.config.host, &self.keys.iothubowner)
    }

    /// The admin endpoint's address, if it was asked for.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The AMQP address of the built-in endpoint.
    pub fn amqp_addr(&self) -> SocketAddr {
        self.amqp.addr()
    }

    /// The built-in endpoint's connection string (`service` policy, emulator form).
    pub fn eventhub_connection_string(&self) -> String {
        state_dir::eventhub_connection_string(
            &self.config.host,
            self.amqp.addr().port(),
            &self.keys.service,
            &self.config.hub_name,
        )
    }

    /// The AMQP over TLS address of the built-in endpoint, if it was asked for.
    pub fn amqp_tls_addr(&self) -> Option<SocketAddr> {
        self.amqp.tls_addr()
    }

    /// The CA certificate clients trust, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca.cert_pem
    }

    /// The provisioning service's address (the MQTT address unless `dps.port` was given).
    pub fn dps_addr(&self) -> SocketAddr {
        self.dps_addr
    }

    /// The provisioning service's ID scope (also in the state directory's `dps-id-scope`).
    pub fn id_scope(&self) -> &str {
        &self.dps.id_scope
    }

    /// Enrolls a symmetric-key group (or finds it) and returns its primary key, from which
    /// each member's key is derived ([`crate::derive_device_key`]).
    pub fn add_symmetric_key_group(&self, name: &str) -> Result<String, HubError> {
        Ok(self
            .dps
            .enrollments
            .add_symmetric_key_group(name)
            .map_err(DpsError::from)?)
    }

    /// Enrolls an X.509 group whose members present chains leading to `ca_pem` (a root or
    /// intermediate CA certificate).
    pub fn add_x509_group(&self, name: &str, ca_pem: &str) -> Result<(), HubError> {
        Ok(self
            .dps
            .enrollments
            .add_x509_group(name, ca_pem)
            .map_err(DpsError::from)?)
    }

    /// The partitions of the built-in endpoint (read them, or fill them directly).
    pub fn partitions(&self) -> &Partitions {
        &self.hub.partitions
    }

    /// Counters and partition state now.
    pub fn stats(&self) -> Stats {
        Stats::collect(&self.hub.counters, &self.hub.partitions)
    }

    /// Stops every listener and connection, and with a data directory writes what is pending
    /// and closes it (the same directory can then be opened again).
    pub async fn shutdown(self) {
        self.stop.cancel();
        let hub = self.hub.clone();
        let _ = tokio::task::spawn_blocking(move || hub.partitions.close()).await;
    }
}
