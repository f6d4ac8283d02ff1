//! `hub-sim`: the local IoT Hub (with its provisioning service) as a standalone server,
//! `hub-sim device add` to register devices and `hub-sim enrollment add` to enroll them for
//! provisioning, in its state directory (also while it runs).

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use hub_sim::{
    DataDir, EnrollmentId, Enrollments, HubConfig, HubSim, Registry, Retention,
    device_connection_string, ensure_dir,
};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// A local IoT Hub: devices over MQTT (TLS, WebSockets; SAS or X.509), the built-in
/// Event Hubs endpoint over AMQP.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Manage devices in a state directory.
    #[command(subcommand)]
    Device(DeviceCommand),
    /// Manage the provisioning service's enrollments in a state directory.
    #[command(subcommand)]
    Enrollment(EnrollmentCommand),
}

#[derive(Debug, Subcommand)]
enum EnrollmentCommand {
    /// Enrolls a group; a symmetric-key group's primary key is printed on standard output
    /// (a member's key is base64(HMAC-SHA256(base64decode(key), registration id))).
    Add {
        /// The hub's state directory.
        #[arg(long, env = "HUB_SIM_STATE_DIR")]
        state_dir: PathBuf,
        /// The enrollment group's name.
        #[arg(long)]
        group: String,
        /// An X.509 group: the CA or intermediate certificate (PEM file) members' chains lead to.
        #[arg(long)]
        x509_ca: Option<PathBuf>,
        /// Enroll it disabled (its members are refused).
        #[arg(long)]
        disabled: bool,
    },
}

#[derive(Debug, Subcommand)]
enum DeviceCommand {
    /// Registers a device and prints its connection string (SAS) or registers a thumbprint.
    Add {
        /// The hub's state directory.
        #[arg(long, env = "HUB_SIM_STATE_DIR")]
        state_dir: PathBuf,
        /// Register an X.509 device by its certificate's SHA-256 thumbprint (hex) instead.
        #[arg(long)]
        x509_thumbprint: Option<String>,
        /// The device id.
        id: String,
    },
}

#[derive(Debug, Args)]
struct RunArgs {
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

/// The host a running (or earlier) hub wrote into its service connection string.
fn host_of(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join("service-connection-string");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{}: start the hub once with this --state-dir",
            path.display()
        )
    })?;
    azure_text::connection_string::value_ignore_case(&text, "HostName")
        .map(str::to_owned)
        .with_context(|| format!("{} has no HostName", path.display()))
}

fn device_add(state_dir: &Path, id: &str, thumbprint: Option<&str>) -> anyhow::Result<()> {
    let registry = Registry::open(&state_dir.join("registry.json"))?;
    match thumbprint {
        Some(thumbprint) => {
            registry.add_x509(id, thumbprint)?;
            println!("registered X.509 device {id}");
        }
        None => {
            let key = registry.add_sas(id)?;
            let host = host_of(state_dir)?;
            println!("{}", device_connection_string(&host, id, &key));
        }
    }
    Ok(())
}

fn enrollment_add(
    state_dir: &Path,
    group: &str,
    x509_ca: Option<&Path>,
    disabled: bool,
) -> anyhow::Result<()> {
    ensure_dir(state_dir)?;
    let enrollments = Enrollments::open(&state_dir.join("enrollments.json"))?;
    match x509_ca {
        Some(path) => {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("{}: the group's CA certificate", path.display()))?;
            enrollments.add_x509_group(group, &pem)?;
            eprintln!("enrolled X.509 group {group}");
        }
        None => println!("{}", enrollments.add_symmetric_key_group(group)?),
    }
    if disabled {
        enrollments.set_enabled(&EnrollmentId::Group(group.to_owned()), false)?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Device(DeviceCommand::Add {
            state_dir,
            x509_thumbprint,
            id,
        })) => return device_add(&state_dir, &id, x509_thumbprint.as_deref()),
        Some(Command::Enrollment(EnrollmentCommand::Add {
            state_dir,
            group,
            x509_ca,
            disabled,
        })) => return enrollment_add(&state_dir, &group, x509_ca.as_deref(), disabled),
        None => {}
    }
    let run = cli.run;
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
    let hub = HubSim::start(config)
        .await
        .context("hub-sim did not start")?;
    println!(
        "hub-sim: MQTT/TLS {} WebSockets {} AMQP {} state {}",
        hub.mqtt_addr(),
        hub.ws_addr(),
        hub.amqp_addr(),
        state_dir.display()
    );
    println!(
        "hub-sim: provisioning {} ID scope {}",
        hub.dps_addr(),
        hub.id_scope()
    );
    if let Some(tls) = hub.amqp_tls_addr() {
        println!("hub-sim: AMQP/TLS {tls}");
    }
    if let Some(admin) = hub.admin_addr() {
        println!("hub-sim: admin http://{admin}/metrics");
    }
    tokio::signal::ctrl_c().await?;
    hub.shutdown().await;
    Ok(())
}
