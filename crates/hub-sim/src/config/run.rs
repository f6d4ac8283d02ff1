//! The server's settings: ports, names, retention, the data directory and the devices
//! registered at start.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use hub_sim::{DataDir, HubConfig, Retention};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Where the CA, keys, device registry and client files live.
    #[arg(long, env = "HUB_SIM_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// The hub's name (the Event Hubs entity path).
    #[arg(long, env = "HUB_SIM_HUB_NAME", default_value = "hub-sim")]
    hub_name: String,
    /// The host name clients use (certificate, user names, tokens).
    #[arg(long, env = "HUB_SIM_HOST", default_value = "localhost")]
    host: String,
    /// Address to bind.
    #[arg(long, env = "HUB_SIM_BIND", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Partitions of the built-in endpoint.
    #[arg(long, env = "HUB_SIM_PARTITIONS", default_value_t = 4)]
    partitions: usize,
    /// MQTT over TLS port.
    #[arg(long, env = "HUB_SIM_MQTT_PORT", default_value_t = 8883)]
    mqtt_port: u16,
    /// A port of its own for the provisioning service (MQTT over TLS). Registrations reach
    /// the MQTT and WebSocket ports in any case: the CONNECT's user name tells them apart.
    #[arg(long, env = "HUB_SIM_DPS_PORT")]
    dps_port: Option<u16>,
    /// HTTPS port (IoT Hub's 443): MQTT over WebSockets at /$iothub/websocket and the
    /// service REST API (twins, direct methods).
    #[arg(long, env = "HUB_SIM_WS_PORT", default_value_t = 443)]
    ws_port: u16,
    /// Route non-telemetry events to the built-in endpoint, as IoT Hub routes with these
    /// data sources do: `connection-state`, `twin-changes` (repeat the flag, or comma-separated
    /// in the environment). None by default, as a hub without such routes.
    #[arg(
        long = "route",
        env = "HUB_SIM_ROUTES",
        value_enum,
        value_delimiter = ','
    )]
    routes: Vec<hub_sim::Route>,
    /// AMQP port of the built-in Event Hubs endpoint (plain, as Microsoft's emulator).
    #[arg(long, env = "HUB_SIM_AMQP_PORT", default_value_t = 5672)]
    amqp_port: u16,
    /// AMQP over TLS port of the built-in endpoint (the service's is 5671), with the server
    /// certificate signed by ca.pem; writes eventhub-tls-connection-string. Off when not given.
    #[arg(long, env = "HUB_SIM_AMQP_TLS_PORT")]
    amqp_tls_port: Option<u16>,
    /// Answer clients' detaches of $cbs and $management links after 100 ms, for clients on
    /// fe2o3-amqp 0.16 without upstream's fix (their session ends with UnattachedHandle when
    /// the answer comes after the link was dropped). Event Hubs answers at once.
    #[arg(long, env = "HUB_SIM_UNATTACHED_HANDLE_WORKAROUND")]
    unattached_handle_workaround: bool,
    /// Admin HTTP port (faults, devices, metrics; no authentication). Off when not given.
    #[arg(long, env = "HUB_SIM_ADMIN_PORT")]
    admin_port: Option<u16>,
    /// Events kept per partition at most.
    #[arg(long, env = "HUB_SIM_RETAIN_EVENTS", default_value_t = Retention::default().max_events)]
    retain_events: usize,
    /// Body bytes kept per partition at most.
    #[arg(long, env = "HUB_SIM_RETAIN_BYTES", default_value_t = Retention::default().max_bytes)]
    retain_bytes: usize,
    /// Keep the partitions on disk here, so that a restart loses no event the hub
    /// acknowledged (a device's PUBACK waits until its message is durable). In memory only
    /// when not given.
    #[arg(long, env = "HUB_SIM_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// With --data-dir: the size at which a partition's log starts a new segment file
    /// (retention deletes whole segments).
    #[arg(long, env = "HUB_SIM_SEGMENT_BYTES", default_value_t = hub_sim::DEFAULT_SEGMENT_BYTES)]
    segment_bytes: u64,
    /// Devices to register at start (listed with their connection strings in devices.txt).
    #[arg(long, env = "HUB_SIM_DEVICES", default_value_t = 0)]
    devices: usize,
    /// Prefix of those devices' ids (`{prefix}{i}`).
    #[arg(long, env = "HUB_SIM_DEVICE_PREFIX", default_value = "device-")]
    device_prefix: String,
}

impl RunArgs {
    /// The hub's configuration; the state directory is required.
    pub fn hub_config(self) -> anyhow::Result<HubConfig> {
        let run = self;
        let state_dir = run
            .state_dir
            .context("--state-dir (or HUB_SIM_STATE_DIR) is required: where the hub keeps its CA, keys and client files")?;
        let mut config = HubConfig::new(&state_dir);
        config.hub_name = run.hub_name;
        config.host = run.host;
        config.bind = run.bind;
        config.partitions = run.partitions;
        config.mqtt_port = run.mqtt_port;
        config.ws_port = run.ws_port;
        config.amqp_port = run.amqp_port;
        config.amqp_tls_port = run.amqp_tls_port;
        config.admin_port = run.admin_port;
        config.unattached_handle_workaround = run.unattached_handle_workaround;
        config.routes = run.routes;
        config.retention = Retention {
            max_events: run.retain_events,
            max_bytes: run.retain_bytes,
        };
        config.data_dir = run.data_dir.map(|dir| DataDir {
            dir,
            segment_bytes: run.segment_bytes,
        });
        config.devices = run.devices;
        config.device_prefix = run.device_prefix;
        config.dps.port = run.dps_port;
        Ok(config)
    }
}
