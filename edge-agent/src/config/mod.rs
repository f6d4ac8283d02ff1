//! The agent's settings as the binary reads them: [`Settings`], the command line /
//! environment / TOML file form, layered by [`settings::layer`] and checked into the
//! [`AgentConfig`] the library runs on (each component's part of it lives beside the
//! component: [`crate::source::SourceConfig`], [`crate::buffer::BufferConfig`],
//! [`crate::transport::TransportConfig`]).
//!
//! Precedence: command-line flag, then environment variable, then the config file
//! (`--config FILE` or `EDGE_AGENT_CONFIG`), then the default. A wrong setting is a
//! [`ConfigError`] that names the setting and says what to fix; so is a variable with one of
//! the agent's prefixes that is none of its settings ([`env_names`], [`Settings::resolve_in`]),
//! and a required setting that is missing ([`POSITION_SOURCE`](Settings::position_source)
//! has no default: the simulator runs only when named). Durations take the one
//! form of every program (`5`, `5s`, `500ms`, `2m`). Secrets (the connection string, the
//! key, the broker's password) come from the environment, a `*_FILE` or the config file,
//! never from a flag, and are held in [`Secret`] and [`SecretBytes`], whose `Debug` output
//! is redacted.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::agent::{AgentConfig, DEFAULT_BACKLOG_RATE, DEFAULT_CLOCK_MAX_SKEW};
use crate::buffer::{BufferConfig, DEFAULT_BUFFER_MAX_BYTES, MIN_BUFFER_MAX_BYTES};
use crate::cadence::RemoteConfig;
use crate::cadence::{Cadence, CadenceError, Interval};
use crate::transport::sas::{ConnectionStringError, DeviceConnectionString};
use crate::transport::{Auth, Endpoint, SasConfig, TransportConfig, X509Config};
use crate::twin::DEFAULT_REPORTED_MIN_INTERVAL;
use retry_backoff::BackoffConfig;

use settings::EnvNames;
pub use settings::{DurationSetting, Secret};

/// The connection string's variable, read with its `_FILE` form by
/// [`settings::secret_from_env`] (a secret is never a flag).
pub const CONNECTION_STRING: &str = "IOTHUB_DEVICE_CONNECTION_STRING";
/// The variable of the DPS enrollment group's key (a secret).
pub const DPS_GROUP_KEY: &str = "DPS_GROUP_KEY";
/// The variable of the drone's own DPS key (a secret).
pub const DPS_DEVICE_KEY: &str = "DPS_DEVICE_KEY";
/// The variable of the plain broker's password (a secret).
pub const MQTT_PASSWORD: &str = "MQTT_PASSWORD";

/// A setting that stops the agent at start, with what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A setting has a value that cannot be used.
    #[error("{setting}: {problem}")]
    Invalid {
        /// The setting (environment variable name).
        setting: &'static str,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// A required setting is absent.
    #[error("{setting} is required: {hint}")]
    Missing {
        /// The setting (environment variable name).
        setting: &'static str,
        /// How to provide it.
        hint: &'static str,
    },
    /// The connection string is wrong.
    #[error("IOTHUB_DEVICE_CONNECTION_STRING: {0}")]
    ConnectionString(#[from] ConnectionStringError),
    /// A secret's variable or file cannot be read.
    #[error(transparent)]
    Secret(#[from] settings::SecretError),
    /// Variables with the agent's prefixes that are none of its settings.
    #[error(transparent)]
    Unknown(#[from] settings::UnknownVariables),
    /// A required setting is absent, and a variable that looks like it is set.
    #[error("{missing}; {variable} is set: did you mean {setting}?")]
    Lookalike {
        /// The [`ConfigError::Missing`] error.
        missing: Box<ConfigError>,
        /// The variable that is set.
        variable: String,
        /// The setting it probably meant.
        setting: &'static str,
    },
}

fn invalid(setting: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        setting,
        problem: problem.into(),
    }
}

/// The settings as given on the command line, in the environment or in the config file;
/// every field is optional here, [`Settings::resolve`] applies defaults and checks.
#[derive(Clone, Default, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Position source (required): `mavlink`, `gpsd`, or `sim` for a simulated drone.
    #[arg(long, env = "POSITION_SOURCE")]
    pub position_source: Option<String>,
    /// MAVLink connection string: `udpin:0.0.0.0:14550`, `udpout:HOST:PORT`, `tcpin:0.0.0.0:5760`, `tcpout:HOST:PORT`, `serial:/dev/ttyAMA0:921600`.
    #[arg(long, env = "MAVLINK_ADDRESS")]
    pub mavlink_address: Option<String>,
    /// The vehicle's MAVLink system id (1-255); default: the first autopilot heard.
    #[arg(long, env = "MAVLINK_SYSTEM_ID")]
    pub mavlink_system_id: Option<u8>,
    /// A file holding the MAVLink 2 signing key (64 hexadecimal digits): only frames
    /// signed with it are read, and the agent's own are signed.
    #[arg(long, env = "MAVLINK_SIGNING_KEY_FILE")]
    pub mavlink_signing_key_file: Option<PathBuf>,
    /// gpsd's address: `HOST:PORT`, `HOST` (port 2947) or `[IPv6]:PORT` [default: 127.0.0.1:2947]
    #[arg(long, env = "GPSD_ADDRESS")]
    pub gpsd_address: Option<String>,
    /// Simulator: home latitude, degrees.
    #[arg(long, env = "SIM_HOME_LAT", allow_hyphen_values = true)]
    pub sim_home_lat: Option<f64>,
    /// Simulator: home longitude, degrees.
    #[arg(long, env = "SIM_HOME_LON", allow_hyphen_values = true)]
    pub sim_home_lon: Option<f64>,
    /// Simulator: route seed (the same seed flies the same route).
    #[arg(long, env = "SIM_SEED")]
    pub sim_seed: Option<u64>,
    /// Simulator: ground speed, m/s.
    #[arg(long, env = "SIM_SPEED_MPS")]
    pub sim_speed_mps: Option<f64>,
    /// Simulator: time speed-up factor.
    #[arg(long, env = "SIM_SPEEDUP")]
    pub sim_speedup: Option<f64>,
    /// Time between reports (`5`, `5s`, `500ms`), default 5 s.
    #[arg(long, env = "REPORT_INTERVAL")]
    pub report_interval: Option<DurationSetting>,
    /// Time between publishes (`30s`), default the report interval: longer publishes the
    /// samples since the last publish in one batch of at most 4 KB (writers that read
    /// batches only).
    #[arg(long, env = "PUBLISH_EVERY")]
    pub publish_every: Option<DurationSetting>,
    /// Age after which a fix counts as lost, default twice the interval.
    #[arg(long, env = "MAX_FIX_AGE")]
    pub max_fix_age: Option<DurationSetting>,
    /// GPS time and the board clock may differ by this before the board clock is corrected (default 2s).
    #[arg(long, env = "CLOCK_MAX_SKEW")]
    pub clock_max_skew: Option<DurationSetting>,
    /// IoT Hub device connection string (environment or config file only: never on the command line).
    #[arg(skip)]
    #[serde(rename = "iothub_device_connection_string")]
    pub connection_string: Option<Secret>,
    /// IoT Hub transport: `mqtt` (TLS on 8883) or `websockets` (WSS on 443).
    #[arg(long, env = "IOTHUB_TRANSPORT")]
    pub iothub_transport: Option<String>,
    /// The CA (PEM) that signed the hub's certificate, trusted instead of the system's
    /// roots: a gateway's or a local hub's.
    #[arg(long, env = "IOTHUB_CA_FILE")]
    pub iothub_ca_file: Option<PathBuf>,
    /// The hub's port, for a gateway or a local hub [default: 8883, websockets 443]
    #[arg(long, env = "IOTHUB_PORT")]
    pub iothub_port: Option<u16>,
    /// SAS token lifetime (default 1h).
    #[arg(long, env = "SAS_TOKEN_TTL")]
    pub sas_token_ttl: Option<DurationSetting>,
    /// Fraction of the token lifetime after which the agent reconnects with a fresh token (default 0.8).
    #[arg(long, env = "SAS_RENEW_FRACTION")]
    pub sas_renew_fraction: Option<f64>,
    /// X.509 client certificate (PEM), instead of SAS.
    #[arg(long, env = "X509_CERT_FILE")]
    pub x509_cert_file: Option<PathBuf>,
    /// X.509 client private key (PEM).
    #[arg(long, env = "X509_KEY_FILE")]
    pub x509_key_file: Option<PathBuf>,
    /// Plain MQTT broker URL for local use, `mqtt://HOST:PORT` (instead of IoT Hub).
    #[arg(long, env = "MQTT_URL")]
    pub mqtt_url: Option<String>,
    /// Device id in plain MQTT mode (IoT Hub takes it from the connection string).
    #[arg(long, env = "DEVICE_ID")]
    pub device_id: Option<String>,
    /// Store-and-forward directory.
    #[arg(long, env = "BUFFER_DIR")]
    pub buffer_dir: Option<PathBuf>,
    /// Store-and-forward size bound, bytes.
    #[arg(long, env = "BUFFER_MAX_BYTES")]
    pub buffer_max_bytes: Option<u64>,
    /// `fsync` every buffered record (default true).
    #[arg(long, env = "BUFFER_FSYNC")]
    pub buffer_fsync: Option<bool>,
    /// Backlog messages per second at most after a reconnect.
    #[arg(long, env = "BACKLOG_RATE")]
    pub backlog_rate: Option<f64>,
    /// Reconnect backoff: first window (default 1s).
    #[arg(long, env = "RECONNECT_BASE")]
    pub reconnect_base: Option<DurationSetting>,
    /// Reconnect backoff: largest window (default 60s).
    #[arg(long, env = "RECONNECT_CAP")]
    pub reconnect_cap: Option<DurationSetting>,
    /// MQTT keep-alive in whole seconds (default 60s, at most 1177s for IoT Hub).
    #[arg(long, env = "MQTT_KEEP_ALIVE")]
    pub mqtt_keep_alive: Option<DurationSetting>,
    /// Status file, rewritten as JSON after every interval.
    #[arg(long, env = "STATUS_FILE")]
    pub status_file: Option<PathBuf>,
    /// `on`: the device twin's desired `reportInterval` and `publishEvery` override the
    /// local ones (IoT Hub only); `off`: the local configuration only, twin changes refused
    /// (default on).
    #[arg(long, env = "REMOTE_CONFIG")]
    pub remote_config: Option<RemoteConfig>,
    /// Least time between two reports of the agent's state in the twin's reported
    /// properties (default 60s); acknowledgements of desired changes go at once.
    #[arg(long, env = "REPORTED_MIN_INTERVAL")]
    pub reported_min_interval: Option<DurationSetting>,
    /// Onboard through the Device Provisioning Service with this ID scope (instead of
    /// IOTHUB_DEVICE_CONNECTION_STRING), with DPS_GROUP_KEY or DPS_DEVICE_KEY.
    #[arg(long, env = "DPS_ID_SCOPE")]
    pub dps_id_scope: Option<String>,
    /// The drone's DPS registration id [default: `drone-` and the first 16 characters of /etc/machine-id].
    #[arg(long, env = "DPS_REGISTRATION_ID")]
    pub dps_registration_id: Option<String>,
    /// The DPS endpoint, `host` or `host:port` [default: global.azure-devices-provisioning.net:8883].
    #[arg(long, env = "DPS_ENDPOINT")]
    pub dps_endpoint: Option<String>,
    /// The enrollment group's primary key, from which the drone derives its own
    /// (environment, `_FILE` or config file only: never on the command line).
    #[arg(skip)]
    pub dps_group_key: Option<Secret>,
    /// The drone's own DPS key (environment, `_FILE` or config file only).
    #[arg(skip)]
    pub dps_device_key: Option<Secret>,
    /// The drone's certificate chain (PEM, leaf first, common name = registration id) for
    /// X.509 attestation with DPS, and then for the hub.
    #[arg(long, env = "DPS_CERT_FILE")]
    pub dps_cert_file: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, env = "DPS_KEY_FILE")]
    pub dps_key_file: Option<PathBuf>,
    // The drone's own credentials and what it trusts (kept together).
    /// `true` lets DPS_GROUP_KEY be on the drone (labs and demos only): whoever reads the
    /// group key from one drone can derive every drone's key [default: false].
    #[arg(long, env = "DPS_GROUP_KEY_ON_DEVICE")]
    pub dps_group_key_on_device: Option<bool>,
    /// The hubs DPS may assign: a domain suffix (`.azure-devices.net`) or a host name and
    /// its subdomains (a local hub's) [default: .azure-devices.net].
    #[arg(long, env = "DPS_ALLOWED_HUB_SUFFIX")]
    pub dps_allowed_hub_suffix: Option<String>,
    /// The user name on the MQTT_URL broker (with MQTT_PASSWORD; Mosquitto's ACL of
    /// `deploy/mosquitto` wants the device id).
    #[arg(long, env = "MQTT_USERNAME")]
    pub mqtt_username: Option<String>,
    /// The password on the MQTT_URL broker (environment, `_FILE` or config file only).
    #[arg(skip)]
    pub mqtt_password: Option<Secret>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("position_source", &self.position_source)
            .field(
                "connection_string",
                &self.connection_string.as_ref().map(|_| "<redacted>"),
            )
            .field("mqtt_url", &self.mqtt_url)
            .field("device_id", &self.device_id)
            .field("buffer_dir", &self.buffer_dir)
            .finish_non_exhaustive()
    }
}

settings::layered!(Settings {
    position_source,
    mavlink_address,
    mavlink_system_id,
    mavlink_signing_key_file,
    gpsd_address,
    sim_home_lat,
    sim_home_lon,
    sim_seed,
    sim_speed_mps,
    sim_speedup,
    report_interval,
    publish_every,
    max_fix_age,
    clock_max_skew,
    connection_string,
    iothub_transport,
    iothub_ca_file,
    iothub_port,
    sas_token_ttl,
    sas_renew_fraction,
    x509_cert_file,
    x509_key_file,
    mqtt_url,
    device_id,
    buffer_dir,
    buffer_max_bytes,
    buffer_fsync,
    backlog_rate,
    reconnect_base,
    reconnect_cap,
    mqtt_keep_alive,
    status_file,
    remote_config,
    reported_min_interval,
    dps_id_scope,
    dps_registration_id,
    dps_endpoint,
    dps_group_key,
    dps_device_key,
    dps_cert_file,
    dps_key_file,
    dps_group_key_on_device,
    dps_allowed_hub_suffix,
    mqtt_username,
    mqtt_password,
});

/// The agent's environment variables, whose prefixes mark a variable as the agent's:
/// every setting's (the flags' `env`), the connection string's with its `_FILE` form, and
/// those of `command`, the binary's whole command line (`EDGE_AGENT_CONFIG`, `LOG_JSON`).
pub fn env_names(command: &clap::Command) -> EnvNames {
    use clap::Args as _;
    EnvNames::settings(&Settings::augment_args(clap::Command::new("settings")))
        .secret(CONNECTION_STRING)
        .secret(DPS_GROUP_KEY)
        .secret(DPS_DEVICE_KEY)
        .secret(MQTT_PASSWORD)
        .program(command)
}

impl Settings {
    /// [`Settings::resolve`] in an environment whose variable names are `vars`: first a
    /// variable with one of the agent's prefixes that is none of its settings (`names`,
    /// from [`env_names`]) stops the agent with the setting it probably meant; then a
    /// missing required setting names the variable that looks like it (`SOURCE` for
    /// `POSITION_SOURCE`).
    pub fn resolve_in(self, names: &EnvNames, vars: &[String]) -> Result<AgentConfig, ConfigError> {
        names.check(vars.iter().map(String::as_str))?;
        self.resolve().map_err(|err| {
            let ConfigError::Missing { setting, .. } = err else {
                return err;
            };
            match names.lookalike(setting, vars.iter().map(String::as_str)) {
                Some(variable) => ConfigError::Lookalike {
                    missing: Box::new(err),
                    variable: variable.to_owned(),
                    setting,
                },
                None => err,
            }
        })
    }

    /// Applies defaults and checks every setting.
    pub fn resolve(self) -> Result<AgentConfig, ConfigError> {
        let cadence = Cadence::new(
            self.report_interval
                .map_or(DEFAULT_REPORT_INTERVAL, DurationSetting::get),
            self.publish_every.map(DurationSetting::get),
        )
        .map_err(cadence_error)?;
        let report_interval = cadence.report_interval();
        let max_fix_age = match self.max_fix_age {
            Some(age) => positive("MAX_FIX_AGE", age.get())?,
            None => report_interval * 2,
        };
        let clock_max_skew = positive(
            "CLOCK_MAX_SKEW",
            self.clock_max_skew
                .map_or(DEFAULT_CLOCK_MAX_SKEW, DurationSetting::get),
        )?;
        let source = self.source()?;
        let (device_id, mut transport) = self.transport()?;
        let backoff = BackoffConfig {
            base: positive(
                "RECONNECT_BASE",
                self.reconnect_base
                    .map_or(Duration::from_secs(1), DurationSetting::get),
            )?,
            cap: positive(
                "RECONNECT_CAP",
                self.reconnect_cap
                    .map_or(Duration::from_secs(60), DurationSetting::get),
            )?,
        };
        if backoff.cap < backoff.base {
            return Err(invalid("RECONNECT_CAP", "must be at least RECONNECT_BASE"));
        }
        transport.backoff = backoff;
        if let Some(keep_alive) = self.mqtt_keep_alive {
            let keep_alive = keep_alive.get();
            if keep_alive.subsec_nanos() != 0 || !(5..=1177).contains(&keep_alive.as_secs()) {
                return Err(invalid(
                    "MQTT_KEEP_ALIVE",
                    format!(
                        "{keep_alive:?} is not whole seconds within 5s..=1177s (IoT Hub's limit)"
                    ),
                ));
            }
            transport.keep_alive = keep_alive;
        }
        let dir = self.buffer_dir.ok_or(ConfigError::Missing {
            setting: "BUFFER_DIR",
            hint: "set it to a writable directory that survives reboots, e.g. /var/lib/edge-agent",
        })?;
        let max_bytes = self.buffer_max_bytes.unwrap_or(DEFAULT_BUFFER_MAX_BYTES);
        if max_bytes < MIN_BUFFER_MAX_BYTES {
            return Err(invalid(
                "BUFFER_MAX_BYTES",
                format!("{max_bytes} is below the minimum of {MIN_BUFFER_MAX_BYTES} bytes"),
            ));
        }
        let backlog_rate = self.backlog_rate.unwrap_or(DEFAULT_BACKLOG_RATE);
        if !(backlog_rate.is_finite() && backlog_rate > 0.0) {
            return Err(invalid(
                "BACKLOG_RATE",
                "must be a positive number of messages per second",
            ));
        }
        Ok(AgentConfig {
            device_id,
            source,
            report_interval,
            publish_every: cadence.publish_every(),
            max_fix_age,
            clock_max_skew,
            buffer: BufferConfig {
                dir,
                max_bytes,
                fsync: self.buffer_fsync.unwrap_or(true),
            },
            transport,
            backlog_rate,
            status_file: self.status_file,
            remote_config: self.remote_config.unwrap_or_default(),
            reported_min_interval: positive(
                "REPORTED_MIN_INTERVAL",
                self.reported_min_interval
                    .map_or(DEFAULT_REPORTED_MIN_INTERVAL, DurationSetting::get),
            )?,
        })
    }

    /// The device id and the transport: IoT Hub if a connection string is set, plain
    /// MQTT if `MQTT_URL` is.
    fn transport(&self) -> Result<(String, TransportConfig), ConfigError> {
        match (&self.connection_string, &self.mqtt_url) {
            (Some(_), Some(_)) => Err(invalid(
                "MQTT_URL",
                "set either IOTHUB_DEVICE_CONNECTION_STRING (IoT Hub) or MQTT_URL (local broker), not both",
            )),
            (None, None) => Err(ConfigError::Missing {
                setting: "IOTHUB_DEVICE_CONNECTION_STRING",
                hint: "set it (HostName=...;DeviceId=...;SharedAccessKey=...), or MQTT_URL and DEVICE_ID for a local broker",
            }),
            (None, Some(url)) => {
                let device_id = self.device_id.clone().ok_or(ConfigError::Missing {
                    setting: "DEVICE_ID",
                    hint: "plain MQTT mode needs the device id (IoT Hub mode reads it from the connection string)",
                })?;
                telemetry::wire::check_device_id(&device_id)
                    .map_err(|err| invalid("DEVICE_ID", err.to_string()))?;
                Ok((device_id, self.broker(&BrokerUrl::parse(url)?)?))
            }
            (Some(cs), None) => {
                for (setting, set) in [
                    ("MQTT_USERNAME", self.mqtt_username.is_some()),
                    (MQTT_PASSWORD, self.mqtt_password.is_some()),
                ] {
                    if set {
                        return Err(invalid(
                            setting,
                            "it is the MQTT_URL broker's login; IoT Hub's comes from the connection string: remove it",
                        ));
                    }
                }
                let cs = DeviceConnectionString::parse(cs.expose())?;
                let auth = self.iothub_auth(&cs)?;
                let endpoint = match self.iothub_transport.as_deref().unwrap_or("mqtt") {
                    "mqtt" => Endpoint::Tls {
                        host: cs.host.clone(),
                        port: self.iothub_port.unwrap_or(8883),
                    },
                    "websockets" => Endpoint::WebSocket {
                        url: format!(
                            "wss://{}:{}/$iothub/websocket",
                            cs.host,
                            self.iothub_port.unwrap_or(443)
                        ),
                    },
                    other => {
                        return Err(invalid(
                            "IOTHUB_TRANSPORT",
                            format!("`{other}` is not `mqtt` or `websockets`"),
                        ));
                    }
                };
                if let Some(ca) = &self.iothub_ca_file {
                    if !ca.is_file() {
                        return Err(invalid(
                            "IOTHUB_CA_FILE",
                            format!("{} is not a readable file", ca.display()),
                        ));
                    }
                }
                let transport = TransportConfig {
                    endpoint,
                    auth,
                    ca_file: self.iothub_ca_file.clone(),
                    ..TransportConfig::plain(&cs.host, 8883)
                };
                Ok((cs.device_id, transport))
            }
        }
    }

    fn iothub_auth(&self, cs: &DeviceConnectionString) -> Result<Auth, ConfigError> {
        match (&self.x509_cert_file, &self.x509_key_file, &cs.key) {
            (Some(cert_path), Some(key_path), _) => {
                for (setting, path) in [("X509_CERT_FILE", cert_path), ("X509_KEY_FILE", key_path)]
                {
                    if !path.is_file() {
                        return Err(invalid(
                            setting,
                            format!("{} is not a readable file", path.display()),
                        ));
                    }
                }
                Ok(Auth::X509(X509Config {
                    hub_host: cs.host.clone(),
                    cert_path: cert_path.clone(),
                    key_path: key_path.clone(),
                }))
            }
            (Some(_), None, _) | (None, Some(_), _) => Err(invalid(
                "X509_CERT_FILE",
                "X.509 needs both X509_CERT_FILE and X509_KEY_FILE",
            )),
            (None, None, Some(key)) => {
                let ttl = self
                    .sas_token_ttl
                    .map_or(Duration::from_secs(3600), DurationSetting::get);
                if ttl < Duration::from_secs(60) {
                    return Err(invalid(
                        "SAS_TOKEN_TTL",
                        format!("{ttl:?} is too short; use at least 60s"),
                    ));
                }
                let renew_fraction = self.sas_renew_fraction.unwrap_or(0.8);
                if !(0.1..=0.95).contains(&renew_fraction) {
                    return Err(invalid("SAS_RENEW_FRACTION", "must be within 0.1..=0.95"));
                }
                Ok(Auth::Sas(SasConfig {
                    hub_host: cs.host.clone(),
                    key: key.clone(),
                    token_ttl: ttl,
                    renew_fraction,
                }))
            }
            (None, None, None) => Err(ConfigError::Missing {
                setting: "IOTHUB_DEVICE_CONNECTION_STRING",
                hint: "the connection string has no SharedAccessKey: add it, or set X509_CERT_FILE and X509_KEY_FILE",
            }),
        }
    }
}

/// The default `REPORT_INTERVAL`.
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// A cadence the agent cannot run, as the setting at fault.
fn cadence_error(err: CadenceError) -> ConfigError {
    let setting = match err.interval() {
        Interval::Report => "REPORT_INTERVAL",
        Interval::Publish => "PUBLISH_EVERY",
    };
    invalid(setting, err.to_string())
}

/// Checks that a duration setting is above zero.
fn positive(setting: &'static str, duration: Duration) -> Result<Duration, ConfigError> {
    if duration.is_zero() {
        return Err(invalid(setting, "must be longer than zero"));
    }
    Ok(duration)
}

mod broker;
mod dps;
mod source;
use broker::BrokerUrl;
#[cfg(test)]
mod tests;
