//! The load generator's settings: where the drones publish (an MQTT broker, IoT Hub with
//! device connection strings, or IoT Hub through DPS), how many at which rate for how long,
//! the writer's metrics endpoint and where the report goes.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use fleet::{LoadgenConfig, Target};
use settings::DurationSetting;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("iothub").args(["device_connection_strings", "dps_id_scope"])))]
pub struct LoadgenArgs {
    /// The broker, `mqtt://host:port`; `embedded` starts an embedded broker for the run.
    #[arg(long, env = "FLEET_URL", default_value = "mqtt://127.0.0.1:1883")]
    url: String,
    /// Publish to IoT Hub instead: a file of device connection strings
    /// (`HostName=...;DeviceId=...;SharedAccessKey=...`), one per line and drone.
    #[arg(long, env = "FLEET_DEVICE_CONNECTION_STRINGS", conflicts_with = "url")]
    device_connection_strings: Option<PathBuf>,
    /// Publish to IoT Hub through DPS instead: its ID scope. Each drone registers as
    /// `{id-prefix}{index:05}` in the symmetric-key enrollment group whose key
    /// --dps-group-key-file holds, with the key derived from it, and publishes to the hub
    /// DPS assigned it, as the edge agent onboards.
    #[arg(
        long,
        env = "DPS_ID_SCOPE",
        conflicts_with = "url",
        requires = "dps_group_key_file"
    )]
    dps_id_scope: Option<String>,
    /// With --dps-id-scope: the file holding the enrollment group's primary key (a key is
    /// never given on the command line).
    #[arg(long, env = "DPS_GROUP_KEY_FILE", requires = "dps_id_scope")]
    dps_group_key_file: Option<PathBuf>,
    /// With --dps-id-scope: DPS as `host:port` [default: global.azure-devices-provisioning.net:8883].
    #[arg(long, env = "DPS_ENDPOINT", requires = "dps_id_scope")]
    dps_endpoint: Option<String>,
    /// With --dps-id-scope: the hubs DPS may assign, a domain suffix or a local hub's host
    /// name [default: .azure-devices.net].
    #[arg(long, env = "DPS_ALLOWED_HUB_SUFFIX", requires = "dps_id_scope")]
    dps_allowed_hub_suffix: Option<String>,
    /// With --device-connection-strings or --dps-id-scope: the CA (PEM) that signed the
    /// hub's (and DPS's) certificate, trusted instead of the system's roots (a gateway's,
    /// or a local hub's `ca.pem`).
    #[arg(long, env = "IOTHUB_CA_FILE", requires = "iothub")]
    iothub_ca_file: Option<PathBuf>,
    /// With --device-connection-strings or --dps-id-scope: the hub's MQTT port [default: 8883].
    #[arg(long, env = "IOTHUB_PORT", requires = "iothub")]
    iothub_port: Option<u16>,
    /// Number of drones, one MQTT connection each (with connection strings: at most one
    /// per line; through DPS: those that registered).
    #[arg(long, default_value_t = 100)]
    drones: usize,
    /// Messages per second over all drones.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Stop after this many messages in total.
    #[arg(long)]
    count: Option<u64>,
    /// Stop after this long (e.g. `30s`, `2m`).
    #[arg(long, default_value = "10s")]
    duration: DurationSetting,
    /// A cloud writer's Prometheus endpoint, e.g. `http://127.0.0.1:9464/metrics`: adds what
    /// the writer received, wrote, dropped and was throttled during the run.
    #[arg(long, env = "FLEET_WRITER_METRICS")]
    writer_metrics: Option<String>,
    /// Device ids are `{prefix}{index:05}`.
    #[arg(long, default_value = "loadgen-")]
    id_prefix: String,
    /// Write the report as JSON to this file as well.
    #[arg(long)]
    report_json: Option<PathBuf>,
}

/// The load generator's run and where its report goes besides standard output.
#[derive(Debug)]
pub struct Loadgen {
    /// The run.
    pub config: LoadgenConfig,
    /// Write the report as JSON to this file as well.
    pub report_json: Option<PathBuf>,
}

impl LoadgenArgs {
    /// Where the drones publish, as the flags say (the connection strings and the group key
    /// read from their files); `None` for `--url embedded`, a broker started for the run.
    pub fn target(&self) -> anyhow::Result<Option<Target>> {
        if let Some(path) = &self.device_connection_strings {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            return Ok(Some(Target::IotHub {
                connection_strings: text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_owned)
                    .collect(),
                ca_file: self.iothub_ca_file.clone(),
                port: self.iothub_port,
            }));
        }
        if let Some(id_scope) = &self.dps_id_scope {
            let path = self
                .dps_group_key_file
                .as_ref()
                .context("--dps-group-key-file is required with --dps-id-scope")?;
            let key = std::fs::read_to_string(path)
                .with_context(|| format!("reading the group key from {}", path.display()))?;
            anyhow::ensure!(
                !key.trim().is_empty(),
                "{} is empty: it holds the enrollment group's primary key",
                path.display()
            );
            return Ok(Some(Target::Dps {
                id_scope: id_scope.clone(),
                group_key: edge_agent::Secret::new(key.trim()),
                endpoint: self.dps_endpoint.clone().unwrap_or_else(|| {
                    format!("{}:{}", edge_agent::GLOBAL_ENDPOINT, edge_agent::DPS_PORT)
                }),
                ca_file: self.iothub_ca_file.clone(),
                port: self.iothub_port,
                allowed_hub_suffix: self.dps_allowed_hub_suffix.clone(),
            }));
        }
        if self.url == "embedded" {
            return Ok(None);
        }
        let (host, port) = parse_mqtt_url(&self.url)?;
        Ok(Some(Target::Mqtt { host, port }))
    }

    /// The run against `target`: with connection strings, at most one drone a line.
    pub fn loadgen(self, target: Target) -> Loadgen {
        let drones = match &target {
            Target::Mqtt { .. } | Target::Dps { .. } => self.drones,
            Target::IotHub {
                connection_strings, ..
            } => self.drones.min(connection_strings.len()),
        };
        Loadgen {
            config: LoadgenConfig {
                target,
                drones,
                rate: self.rate,
                count: self.count,
                duration: self.duration.get(),
                id_prefix: self.id_prefix,
                writer_metrics: self.writer_metrics,
                ..LoadgenConfig::default()
            },
            report_json: self.report_json,
        }
    }
}

/// Splits `mqtt://host:port` (port 1883 when absent).
fn parse_mqtt_url(url: &str) -> anyhow::Result<(String, u16)> {
    let rest = url.strip_prefix("mqtt://").with_context(|| {
        format!("broker URL {url:?} must look like mqtt://host:port (or be `embedded`)")
    })?;
    let rest = rest.trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((host, port)) => Ok((
            host.to_owned(),
            port.parse()
                .with_context(|| format!("port {port:?} in {url:?} is not a number"))?,
        )),
        None => Ok((rest.to_owned(), 1883)),
    }
}
