//! Configuration: command-line flags, environment variables and a TOML file, resolved
//! into one typed [`WriterConfig`].
//!
//! Precedence: flag, then environment variable, then the file given by `--config`
//! (`WRITER_CONFIG`), then the default. File keys are the environment variable names in
//! lower case (`cosmos_endpoint = "https://..."`). Durations take the one form of every
//! program (`5`, `5s`, `500ms`, `2m`). Secrets (`COSMOS_KEY`, and `WRITER_SOURCE`, which
//! may be an Event Hubs connection string or a URL with a password) come from the
//! environment, a `*_FILE` or the config file, never from a flag; they are held in
//! [`Secret`] and never appear in logs or `Debug` output.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;
use telemetry::{PartitionKeyPath, StalenessPolicy};
use url::Url;

pub use settings::{ConfigError, DurationSetting, LogFormat, Secret};
use settings::{cosmos_account, cosmos_key_from_env};

/// The smallest `SOURCE_MAX_BYTES` (a few hundred positions).
pub const SOURCE_MAX_BYTES_FLOOR: usize = 64 * 1024;

/// How "newest wins" is enforced on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NewestWins {
    /// A conditional patch per position (`deviceTimeMs`/`seq` condition), Create when
    /// absent: one operation per position in bulk. Needs batch Patch (Cosmos DB, the
    /// local endpoint).
    #[default]
    Patch,
    /// Read the stored document, then Replace with its ETag (`ifMatch`) or Create;
    /// retried on 412/409. For servers without batch Patch (`@vercel/cosmosdb-server`).
    Etag,
}

/// Every setting as given by flags, environment or file; `None` when not given.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Cosmos DB account endpoint, e.g. https://myaccount.documents.azure.com:443/
    #[arg(long, env = "COSMOS_ENDPOINT")]
    pub cosmos_endpoint: Option<Url>,
    /// Cosmos DB account key (environment or file only).
    #[arg(skip)]
    pub cosmos_key: Option<Secret>,
    /// File holding the Cosmos DB account key (instead of COSMOS_KEY); read again when Cosmos
    /// DB refuses the key (401/403), so a rotated key is taken without a restart.
    #[arg(long, env = "COSMOS_KEY_FILE")]
    pub cosmos_key_file: Option<PathBuf>,
    /// Database name [default: telemetry]
    #[arg(long, env = "COSMOS_DATABASE")]
    pub cosmos_database: Option<String>,
    /// Container name [default: positions]
    #[arg(long, env = "COSMOS_CONTAINER")]
    pub cosmos_container: Option<String>,
    /// Partition key path the documents carry the device id at [default: /deviceId]
    #[arg(long, env = "COSMOS_PARTITION_KEY_PATH")]
    pub cosmos_partition_key_path: Option<String>,
    /// Accept self-signed certificates (local emulators only: a loopback endpoint, or
    /// COSMOS_ALLOW_INSECURE).
    #[arg(long, env = "COSMOS_ACCEPT_INVALID_CERTS")]
    pub cosmos_accept_invalid_certs: Option<bool>,
    /// Allow http:// or unchecked certificates for an endpoint that is not on this host
    /// (a Cosmos emulator elsewhere on a private network) [default: false]
    #[arg(long, env = "COSMOS_ALLOW_INSECURE")]
    pub cosmos_allow_insecure: Option<bool>,
    /// Create the database and container when missing [default: false]
    #[arg(long, env = "COSMOS_CREATE_IF_MISSING")]
    pub cosmos_create_if_missing: Option<bool>,
    /// Throughput (RU/s) of a container this writer creates.
    #[arg(long, env = "COSMOS_THROUGHPUT")]
    pub cosmos_throughput: Option<u32>,
    /// Write even when the documents lack the container's partition key: all of them land in
    /// one (undefined) logical partition, so one physical partition takes every write and
    /// throttles. For demonstrating the hot partition only [default: false]
    #[arg(
        long = "force-missing-partition-key",
        env = "WRITER_FORCE_MISSING_PARTITION_KEY",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub writer_force_missing_partition_key: Option<bool>,
    /// Source: mqtt://host:port. An Event Hubs connection string or a URL with a password
    /// is a secret: WRITER_SOURCE or WRITER_SOURCE_FILE in the environment, or the file.
    #[arg(long = "source")]
    pub writer_source: Option<Secret>,
    /// MQTT shared subscription group, so that replicas split the load.
    #[arg(long, env = "MQTT_SHARE_GROUP")]
    pub mqtt_share_group: Option<String>,
    /// MQTT client id, fixed per replica [default: cloud-writer-$HOSTNAME]
    #[arg(long, env = "MQTT_CLIENT_ID")]
    pub mqtt_client_id: Option<String>,
    /// mqtts:// only: the CA (PEM) that signed the broker's certificate [default: the
    /// system's roots]
    #[arg(long, env = "MQTT_CA_FILE")]
    pub mqtt_ca_file: Option<PathBuf>,
    /// mqtts:// only: a client certificate (PEM) to present, with MQTT_CLIENT_KEY_FILE
    #[arg(long, env = "MQTT_CLIENT_CERT_FILE")]
    pub mqtt_client_cert_file: Option<PathBuf>,
    /// mqtts:// only: the client certificate's private key (PEM)
    #[arg(long, env = "MQTT_CLIENT_KEY_FILE")]
    pub mqtt_client_key_file: Option<PathBuf>,
    /// Event Hubs consumer group [default: $Default]
    #[arg(long, env = "EVENTHUBS_CONSUMER_GROUP")]
    pub eventhubs_consumer_group: Option<String>,
    /// Where a partition without checkpoint starts: earliest, latest, or an RFC 3339 time [default: latest]
    #[arg(long, env = "EVENTHUBS_START_POSITION")]
    pub eventhubs_start_position: Option<String>,
    /// Container of the Event Hubs checkpoints and ownerships [default: checkpoints]
    #[arg(long, env = "EVENTHUBS_CHECKPOINT_CONTAINER")]
    pub eventhubs_checkpoint_container: Option<String>,
    /// The address the Event Hubs client dials instead of the namespace's (an AMQP proxy or
    /// a private link), e.g. amqps://proxy.example:5671 [default: the namespace; for a
    /// connection string with UseDevelopmentEmulator=true, amqp:// to its Endpoint]
    #[arg(long, env = "EVENTHUBS_CUSTOM_ENDPOINT")]
    pub eventhubs_custom_endpoint: Option<Url>,
    /// Positions later than this are dropped as stale [default: 5m]
    #[arg(long, env = "STALE_AFTER")]
    pub stale_after: Option<DurationSetting>,
    /// Device times further ahead of now are rejected [default: 2m]
    #[arg(long, env = "FUTURE_TOLERANCE")]
    pub future_tolerance: Option<DurationSetting>,
    /// Prometheus metrics, /healthz and /readyz [default: 0.0.0.0:9464]; "off" disables
    #[arg(long, env = "METRICS_ADDR")]
    pub metrics_addr: Option<String>,
    /// How newest-wins is enforced: patch or etag [default: patch]
    #[arg(long, env = "NEWEST_WINS")]
    pub newest_wins: Option<NewestWins>,
    /// Also write every fresh position as its own history document [default: false]
    #[arg(long, env = "HISTORY")]
    pub history: Option<bool>,
    /// Time to live of history documents, e.g. 7d (needs TTL on the container)
    #[arg(long, env = "HISTORY_TTL")]
    pub history_ttl: Option<DurationSetting>,
    /// Append rejected messages to this JSONL file.
    #[arg(long, env = "DEAD_LETTER_FILE")]
    pub dead_letter_file: Option<PathBuf>,
    /// Most messages per pipeline batch [default: 2000]
    #[arg(long, env = "BATCH_MAX_MESSAGES")]
    pub batch_max_messages: Option<usize>,
    /// Longest wait to fill a batch [default: 20ms]
    #[arg(long, env = "BATCH_LINGER")]
    pub batch_linger: Option<DurationSetting>,
    /// Most positions being written at once [default: 20000]
    #[arg(long, env = "MAX_IN_FLIGHT")]
    pub max_in_flight: Option<usize>,
    /// Interval of the summary log line [default: 10s]
    #[arg(long, env = "SUMMARY_INTERVAL")]
    pub summary_interval: Option<DurationSetting>,
    /// Log format: text or json [default: text]
    #[arg(long, env = "LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Bytes the queue between source and pipeline holds at most [default: 67108864]
    #[arg(long, env = "SOURCE_MAX_BYTES")]
    pub source_max_bytes: Option<usize>,
    /// /healthz fails after this long without progress while work is pending [default: 10m]
    #[arg(long, env = "HEALTHZ_STALL_AFTER")]
    pub healthz_stall_after: Option<DurationSetting>,
}

macro_rules! merge_fields {
    ($self:ident, $other:ident, $($field:ident),* $(,)?) => {
        Settings { $($field: $self.$field.or($other.$field)),* }
    };
}

/// Whether `url` names this host (`localhost`, `127.0.0.0/8`, `::1`).
fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

impl Settings {
    /// Fills every setting not given here from `other`.
    pub fn or(self, other: Settings) -> Settings {
        merge_fields!(
            self,
            other,
            cosmos_endpoint,
            cosmos_key,
            cosmos_key_file,
            cosmos_database,
            cosmos_container,
            cosmos_partition_key_path,
            cosmos_accept_invalid_certs,
            cosmos_allow_insecure,
            cosmos_create_if_missing,
            cosmos_throughput,
            writer_force_missing_partition_key,
            writer_source,
            mqtt_share_group,
            mqtt_client_id,
            mqtt_ca_file,
            mqtt_client_cert_file,
            mqtt_client_key_file,
            eventhubs_consumer_group,
            eventhubs_start_position,
            eventhubs_checkpoint_container,
            eventhubs_custom_endpoint,
            stale_after,
            future_tolerance,
            metrics_addr,
            newest_wins,
            history,
            history_ttl,
            dead_letter_file,
            batch_max_messages,
            batch_linger,
            max_in_flight,
            summary_interval,
            log_format,
            source_max_bytes,
            healthz_stall_after,
        )
    }

    /// Refuses a secret given as a flag (these settings must be the command line's alone):
    /// a flag is visible to every user of the machine in the process list. `--source` may
    /// name an `mqtt://` URL without a password; the message never repeats the value.
    pub fn refuse_secret_flags(&self) -> Result<(), ConfigError> {
        let Some(source) = &self.writer_source else {
            return Ok(());
        };
        match SourceSpec::parse(source.expose()) {
            Ok(SourceSpec::Mqtt(url)) if url.0.password().is_none() => Ok(()),
            Ok(_) => Err(ConfigError::Invalid {
                name: "--source",
                message: "this source holds a secret (a connection string or a password): set WRITER_SOURCE or WRITER_SOURCE_FILE in the environment, or writer_source in the config file, not a flag".into(),
            }),
            Err(err) => Err(err),
        }
    }

    /// Reads a TOML file of settings; an error names the line and key, never the value.
    pub fn from_file(path: &Path) -> Result<Settings, ConfigError> {
        Ok(settings::read_toml(path)?)
    }

    /// The secrets, which have no flag: `COSMOS_KEY` and `WRITER_SOURCE`, each from its
    /// environment variable or the file its `*_FILE` variable names (`-`: standard input).
    pub fn secrets_from_env() -> Result<Settings, ConfigError> {
        Ok(Settings {
            cosmos_key: cosmos_key_from_env()?,
            writer_source: settings::secret_from_env("WRITER_SOURCE")?,
            ..Settings::default()
        })
    }

    /// Resolves into a typed configuration, applying defaults and checking values.
    pub fn resolve(self) -> Result<WriterConfig, ConfigError> {
        let key = match (self.cosmos_key, &self.cosmos_key_file) {
            (Some(key), _) => Some(key),
            (None, Some(path)) => Some(read_key_file(path)?),
            (None, None) => None,
        };
        let (endpoint, key) = cosmos_account(self.cosmos_endpoint, key)?;
        let accept_invalid_certs = self.cosmos_accept_invalid_certs.unwrap_or(false);
        let plain_http = endpoint.scheme() == "http";
        let insecure = if (plain_http || accept_invalid_certs) && !is_loopback(&endpoint) {
            let what = if plain_http {
                "a plain http:// endpoint"
            } else {
                "COSMOS_ACCEPT_INVALID_CERTS"
            };
            if !self.cosmos_allow_insecure.unwrap_or(false) {
                return Err(ConfigError::Invalid {
                    name: "COSMOS_ENDPOINT",
                    message: format!(
                        "{what} is allowed only for an endpoint on this host (localhost, 127.0.0.1, ::1): the account key and every document would cross the network unprotected. Use https:// with a trusted certificate, or set COSMOS_ALLOW_INSECURE=true for an emulator on a private network"
                    ),
                });
            }
            Some(format!(
                "{what} to {} (COSMOS_ALLOW_INSECURE): the traffic to Cosmos DB is not protected",
                endpoint.host_str().unwrap_or_default()
            ))
        } else {
            None
        };
        let partition_key_path = self
            .cosmos_partition_key_path
            .as_deref()
            .unwrap_or("/deviceId")
            .parse::<PartitionKeyPath>()
            .map_err(|e| ConfigError::Invalid {
                name: "COSMOS_PARTITION_KEY_PATH",
                message: e.to_string(),
            })?;
        let source = self
            .writer_source
            .map(|source| SourceSpec::parse(source.expose()))
            .transpose()?;
        let staleness = StalenessPolicy {
            stale_after: self
                .stale_after
                .map_or(StalenessPolicy::default().stale_after, |d| d.0),
            future_tolerance: self
                .future_tolerance
                .map_or(StalenessPolicy::default().future_tolerance, |d| d.0),
        };
        let metrics_addr = match self.metrics_addr.as_deref() {
            Some("off") => None,
            Some(addr) => Some(addr.parse().map_err(|e| ConfigError::Invalid {
                name: "METRICS_ADDR",
                message: format!("'{addr}' is not an address such as 0.0.0.0:9464 ({e})"),
            })?),
            None => Some(SocketAddr::from(([0, 0, 0, 0], 9464))),
        };
        let history_ttl = self
            .history_ttl
            .map(|d| {
                u32::try_from(d.0.as_secs())
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| ConfigError::Invalid {
                        name: "HISTORY_TTL",
                        message: "must be between 1 second and about 136 years".into(),
                    })
            })
            .transpose()?;
        let batch_max_messages = self.batch_max_messages.unwrap_or(2000);
        let max_in_flight = self.max_in_flight.unwrap_or(20_000);
        if batch_max_messages == 0 || max_in_flight == 0 {
            return Err(ConfigError::Invalid {
                name: "BATCH_MAX_MESSAGES/MAX_IN_FLIGHT",
                message: "must be at least 1".into(),
            });
        }
        let source_max_bytes = self.source_max_bytes.unwrap_or(64 * 1024 * 1024);
        if source_max_bytes < SOURCE_MAX_BYTES_FLOOR {
            return Err(ConfigError::Invalid {
                name: "SOURCE_MAX_BYTES",
                message: format!(
                    "{source_max_bytes} is below the smallest budget, {SOURCE_MAX_BYTES_FLOOR} bytes"
                ),
            });
        }
        let mqtt_tls = MqttTls {
            ca_file: self.mqtt_ca_file,
            identity: match (self.mqtt_client_cert_file, self.mqtt_client_key_file) {
                (Some(cert_path), Some(key_path)) => Some(client_tls::Identity {
                    cert_path,
                    key_path,
                }),
                (None, None) => None,
                _ => {
                    return Err(ConfigError::Invalid {
                        name: "MQTT_CLIENT_CERT_FILE",
                        message: "a client certificate needs both MQTT_CLIENT_CERT_FILE and MQTT_CLIENT_KEY_FILE".into(),
                    });
                }
            },
        };
        let hostname = std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into());
        Ok(WriterConfig {
            cosmos: CosmosSettings {
                endpoint,
                key,
                key_file: self.cosmos_key_file,
                database: self.cosmos_database.unwrap_or_else(|| "telemetry".into()),
                container: self.cosmos_container.unwrap_or_else(|| "positions".into()),
                partition_key_path,
                accept_invalid_certs,
                insecure,
                create_if_missing: self.cosmos_create_if_missing.unwrap_or(false),
                throughput: self.cosmos_throughput,
                force_missing_partition_key: self
                    .writer_force_missing_partition_key
                    .unwrap_or(false),
            },
            source,
            mqtt_tls,
            mqtt_share_group: self.mqtt_share_group.filter(|g| !g.is_empty()),
            mqtt_client_id: self
                .mqtt_client_id
                .unwrap_or_else(|| format!("cloud-writer-{hostname}")),
            eventhubs: EventHubsSettings {
                consumer_group: self
                    .eventhubs_consumer_group
                    .unwrap_or_else(|| "$Default".into()),
                start_position: self
                    .eventhubs_start_position
                    .as_deref()
                    .map_or(Ok(StartAt::Latest), str::parse)
                    .map_err(|message| ConfigError::Invalid {
                        name: "EVENTHUBS_START_POSITION",
                        message,
                    })?,
                checkpoint_container: self
                    .eventhubs_checkpoint_container
                    .unwrap_or_else(|| "checkpoints".into()),
                custom_endpoint: self.eventhubs_custom_endpoint,
            },
            staleness,
            metrics_addr,
            newest_wins: self.newest_wins.unwrap_or_default(),
            history: self
                .history
                .unwrap_or(false)
                .then_some(HistorySettings { ttl: history_ttl }),
            dead_letter_file: self.dead_letter_file,
            batch_max_messages,
            batch_linger: self.batch_linger.map_or(Duration::from_millis(20), |d| d.0),
            max_in_flight,
            summary_interval: self
                .summary_interval
                .map_or(Duration::from_secs(10), |d| d.0),
            log_format: self.log_format.unwrap_or_default(),
            source_max_bytes,
            healthz_stall_after: self
                .healthz_stall_after
                .map_or(Duration::from_secs(600), |d| d.0),
        })
    }
}

/// Where messages come from.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceSpec {
    /// An MQTT broker, `mqtt://[user:password@]host[:port]` (the password is redacted in `Debug`).
    Mqtt(MqttUrl),
    /// IoT Hub's built-in Event Hubs-compatible endpoint.
    EventHubs(EventHubsConnection),
}

/// An `mqtt://` URL whose `Debug` hides the password.
#[derive(Clone, PartialEq)]
pub struct MqttUrl(pub Url);

impl fmt::Debug for MqttUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.clone();
        if shown.password().is_some() {
            let _ = shown.set_password(Some("redacted"));
        }
        write!(f, "{shown}")
    }
}

/// The parts of an Event Hubs connection string the writer uses.
#[derive(Clone, PartialEq)]
pub struct EventHubsConnection {
    /// The fully qualified namespace, e.g. `myhub.servicebus.windows.net`.
    pub namespace: String,
    /// `SharedAccessKeyName`.
    pub key_name: String,
    /// `EntityPath`: the event hub.
    pub entity_path: String,
    /// With `UseDevelopmentEmulator=true` (a local emulator, or `hub-sim`): the Endpoint's
    /// host and port as a plain AMQP address, `amqp://localhost:5672`.
    pub emulator_endpoint: Option<String>,
    /// The whole connection string (for the SDK).
    pub raw: Secret,
}

impl fmt::Debug for EventHubsConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventHubsConnection")
            .field("namespace", &self.namespace)
            .field("key_name", &self.key_name)
            .field("entity_path", &self.entity_path)
            .field("emulator_endpoint", &self.emulator_endpoint)
            .finish_non_exhaustive()
    }
}

/// The shape of an Event Hubs connection string, for messages.
const CONNECTION_STRING_SHAPE: &str = "Endpoint=sb://{namespace}.servicebus.windows.net/;SharedAccessKeyName=...;SharedAccessKey=...;EntityPath=...";

impl EventHubsConnection {
    /// Parses an Event Hubs connection string with the SDK's parser (so that what is
    /// accepted here, the SDK accepts), requiring a key and an `EntityPath`.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            name: "WRITER_SOURCE",
            message,
        };
        let parsed: azure_messaging_eventhubs::ConnectionString = text.parse().map_err(
            |e: azure_core::Error| {
                invalid(format!(
                    "not a usable Event Hubs connection string ({e}); expected {CONNECTION_STRING_SHAPE}"
                ))
            },
        )?;
        let (Some(key_name), Some(_)) = (
            parsed.shared_access_key_name.clone(),
            parsed.shared_access_key.as_ref(),
        ) else {
            return Err(invalid(format!(
                "the Event Hubs connection string needs SharedAccessKeyName and SharedAccessKey (a policy with the Service connect or Listen right); expected {CONNECTION_STRING_SHAPE}"
            )));
        };
        let Some(entity_path) = parsed.entity_path.clone() else {
            return Err(invalid(format!(
                "the Event Hubs connection string has no EntityPath: use the IoT hub's built-in endpoint's Event Hub-compatible connection string, {CONNECTION_STRING_SHAPE}"
            )));
        };
        let value_of = |name: &str| {
            text.split(';').find_map(|part| {
                let (key, value) = part.split_once('=')?;
                key.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_string())
            })
        };
        let emulator_endpoint = value_of("UseDevelopmentEmulator")
            .filter(|v| v.eq_ignore_ascii_case("true"))
            .and_then(|_| value_of("Endpoint"))
            .and_then(|endpoint| {
                let host = endpoint
                    .split_once("://")
                    .map_or(endpoint.as_str(), |(_, h)| h);
                let host = host.trim_end_matches('/');
                (!host.is_empty()).then(|| format!("amqp://{host}"))
            });
        Ok(EventHubsConnection {
            namespace: parsed.fully_qualified_namespace.clone(),
            key_name,
            entity_path,
            emulator_endpoint,
            raw: Secret::new(text),
        })
    }

    /// The address the client dials: `custom` when given, the Endpoint as plain AMQP for a
    /// development emulator (as Microsoft's emulator speaks), else the SDK's default
    /// (`amqps://` to the namespace).
    pub fn dial_endpoint(&self, custom: Option<&Url>) -> Option<String> {
        custom
            .map(Url::to_string)
            .or_else(|| self.emulator_endpoint.clone())
    }
}

impl SourceSpec {
    /// Parses `WRITER_SOURCE`.
    pub fn parse(text: &str) -> Result<SourceSpec, ConfigError> {
        let text = text.trim();
        if text.starts_with("mqtt://") || text.starts_with("tcp://") || text.starts_with("mqtts://")
        {
            let url = Url::parse(text).map_err(|e| ConfigError::Invalid {
                name: "WRITER_SOURCE",
                message: format!("not an mqtt://host:port or mqtts://host:port URL: {e}"),
            })?;
            if url.host_str().is_none() {
                return Err(ConfigError::Invalid {
                    name: "WRITER_SOURCE",
                    message: "the mqtt:// URL has no host".into(),
                });
            }
            return Ok(SourceSpec::Mqtt(MqttUrl(url)));
        }
        if text.split(';').any(|part| {
            part.trim_start()
                .to_ascii_lowercase()
                .starts_with("endpoint=")
        }) {
            return EventHubsConnection::parse(text).map(SourceSpec::EventHubs);
        }
        Err(ConfigError::Invalid {
            name: "WRITER_SOURCE",
            message: "expected mqtt://host:port or an Event Hubs connection string (Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...;EntityPath=...)".into(),
        })
    }
}

/// Reads the account key from COSMOS_KEY_FILE (surrounding whitespace trimmed).
pub fn read_key_file(path: &Path) -> Result<Secret, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Invalid {
        name: "COSMOS_KEY_FILE",
        message: format!("cannot read {}: {e}", path.display()),
    })?;
    Ok(Secret::new(text.trim()))
}

/// The Cosmos DB side.
#[derive(Debug, Clone)]
pub struct CosmosSettings {
    /// Account endpoint.
    pub endpoint: Url,
    /// Account key.
    pub key: Secret,
    /// The file the key was read from (COSMOS_KEY_FILE), read again on a 401/403.
    pub key_file: Option<PathBuf>,
    /// Database.
    pub database: String,
    /// Container of the position documents.
    pub container: String,
    /// Where the documents carry the device id; must match the container's key path.
    pub partition_key_path: PartitionKeyPath,
    /// Accept self-signed certificates (emulators only).
    pub accept_invalid_certs: bool,
    /// What is unprotected about a remote endpoint that COSMOS_ALLOW_INSECURE let through,
    /// for a warning at start; `None` when the endpoint is protected or on this host.
    pub insecure: Option<String>,
    /// Create database and container when missing.
    pub create_if_missing: bool,
    /// RU/s of a container created here.
    pub throughput: Option<u32>,
    /// Write into the undefined partition key when the documents lack the container's key,
    /// instead of refusing to start (WRITER_FORCE_MISSING_PARTITION_KEY).
    pub force_missing_partition_key: bool,
}

/// TLS of an `mqtts://` source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MqttTls {
    /// The CA that signed the broker's certificate; `None` trusts the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The client certificate and key to present, for brokers that require one.
    pub identity: Option<client_tls::Identity>,
}

/// Where an Event Hubs partition without checkpoint starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The oldest event the hub retains.
    Earliest,
    /// Events enqueued from now on.
    Latest,
    /// Events enqueued after this time.
    EnqueuedAfter(chrono::DateTime<chrono::Utc>),
}

impl FromStr for StartAt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "earliest" => Ok(StartAt::Earliest),
            "latest" => Ok(StartAt::Latest),
            time => time
                .parse::<chrono::DateTime<chrono::Utc>>()
                .map(StartAt::EnqueuedAfter)
                .map_err(|e| {
                    format!(
                        "'{time}' is not earliest, latest or an RFC 3339 time such as 2026-11-22T09:00:00Z ({e})"
                    )
                }),
        }
    }
}

/// Event Hubs consumer settings.
#[derive(Debug, Clone, PartialEq)]
pub struct EventHubsSettings {
    /// Consumer group.
    pub consumer_group: String,
    /// Where a partition without checkpoint starts.
    pub start_position: StartAt,
    /// Container of checkpoints and ownerships.
    pub checkpoint_container: String,
    /// The address to dial instead of the namespace's, if any.
    pub custom_endpoint: Option<Url>,
}

/// History mode: every fresh position also as its own document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistorySettings {
    /// `ttl` of history documents, in seconds.
    pub ttl: Option<u32>,
}

/// The resolved configuration of a writer.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Cosmos DB.
    pub cosmos: CosmosSettings,
    /// Where messages come from (`None` for `import`, which reads a file).
    pub source: Option<SourceSpec>,
    /// MQTT shared subscription group.
    pub mqtt_share_group: Option<String>,
    /// MQTT client id.
    pub mqtt_client_id: String,
    /// TLS of an `mqtts://` source: the roots to trust and the certificate to present.
    pub mqtt_tls: MqttTls,
    /// Event Hubs consumer settings.
    pub eventhubs: EventHubsSettings,
    /// The staleness rule.
    pub staleness: StalenessPolicy,
    /// Metrics listener; `None` disables it.
    pub metrics_addr: Option<SocketAddr>,
    /// How newest-wins is enforced.
    pub newest_wins: NewestWins,
    /// History mode.
    pub history: Option<HistorySettings>,
    /// Dead-letter JSONL file.
    pub dead_letter_file: Option<PathBuf>,
    /// Most messages per pipeline batch.
    pub batch_max_messages: usize,
    /// Longest wait to fill a batch.
    pub batch_linger: Duration,
    /// Most positions being written at once.
    pub max_in_flight: usize,
    /// Summary log interval.
    pub summary_interval: Duration,
    /// Log format.
    pub log_format: LogFormat,
    /// The byte budget of the queue between source and pipeline.
    pub source_max_bytes: usize,
    /// `/healthz` fails after this long without progress while work is pending.
    pub healthz_stall_after: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Settings {
        Settings {
            cosmos_endpoint: Some(Url::parse("http://127.0.0.1:8081").unwrap()),
            cosmos_key: Some(Secret::new("a2V5")),
            writer_source: Some(Secret::new("mqtt://127.0.0.1:1883")),
            ..Settings::default()
        }
    }

    #[test]
    fn defaults_apply() {
        let config = base().resolve().unwrap();
        assert_eq!(config.cosmos.database, "telemetry");
        assert_eq!(config.cosmos.container, "positions");
        assert_eq!(config.cosmos.partition_key_path.to_string(), "/deviceId");
        assert_eq!(config.staleness.stale_after, Duration::from_secs(300));
        assert_eq!(config.newest_wins, NewestWins::Patch);
        assert!(config.history.is_none());
        assert_eq!(config.metrics_addr, Some("0.0.0.0:9464".parse().unwrap()));
    }

    #[test]
    fn flags_and_env_win_over_the_file() {
        let file: Settings = toml::from_str(
            "cosmos_database = \"fromfile\"\ncosmos_container = \"c\"\nstale_after = \"90s\"\n",
        )
        .unwrap();
        let given = Settings {
            cosmos_database: Some("fromflag".into()),
            ..base()
        };
        let config = given.or(file).resolve().unwrap();
        assert_eq!(config.cosmos.database, "fromflag");
        assert_eq!(config.cosmos.container, "c");
        assert_eq!(config.staleness.stale_after, Duration::from_secs(90));
    }

    #[test]
    fn force_missing_partition_key_is_off_unless_asked() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            settings: Settings,
        }
        let parse = |args: &[&str]| {
            let cli = <Cli as clap::Parser>::try_parse_from(args).unwrap();
            cli.settings.or(base()).resolve().unwrap()
        };
        assert!(!parse(&["w"]).cosmos.force_missing_partition_key);
        let flag = parse(&["w", "--force-missing-partition-key"]);
        assert!(flag.cosmos.force_missing_partition_key);
        let off = parse(&["w", "--force-missing-partition-key", "false"]);
        assert!(!off.cosmos.force_missing_partition_key);
        let file: Settings = toml::from_str("writer_force_missing_partition_key = true").unwrap();
        assert!(
            file.or(base())
                .resolve()
                .unwrap()
                .cosmos
                .force_missing_partition_key
        );
    }

    #[test]
    fn durations_take_the_one_form() {
        let file: Settings =
            toml::from_str("stale_after = 90\nbatch_linger = \"5ms\"\nsummary_interval = \"1m\"")
                .unwrap();
        let config = file.or(base()).resolve().unwrap();
        assert_eq!(config.staleness.stale_after, Duration::from_secs(90));
        assert_eq!(config.batch_linger, Duration::from_millis(5));
        assert_eq!(config.summary_interval, Duration::from_secs(60));
    }

    #[test]
    fn a_secret_source_is_refused_as_a_flag() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            settings: Settings,
        }
        let parse = |source: &str| {
            <Cli as clap::Parser>::try_parse_from(["w", "--source", source])
                .unwrap()
                .settings
                .refuse_secret_flags()
        };
        assert!(parse("mqtt://broker:1883").is_ok());
        for secret in [
            "mqtt://user:hunter2@broker:1883",
            "Endpoint=sb://hub.servicebus.windows.net/;SharedAccessKeyName=service;SharedAccessKey=c2VjcmV0S2V5;EntityPath=hub",
        ] {
            let err = parse(secret).err().unwrap().to_string();
            assert!(err.contains("WRITER_SOURCE_FILE"), "{err}");
            assert!(
                !err.contains("hunter2") && !err.contains("c2VjcmV0S2V5"),
                "{err}"
            );
        }
    }

    #[test]
    fn insecure_endpoints_only_on_this_host_unless_allowed() {
        let with = |endpoint: &str, invalid_certs: bool, allow: bool| {
            Settings {
                cosmos_endpoint: Some(Url::parse(endpoint).unwrap()),
                cosmos_accept_invalid_certs: Some(invalid_certs),
                cosmos_allow_insecure: Some(allow),
                ..base()
            }
            .resolve()
        };
        for local in [
            "http://127.0.0.1:8081",
            "https://localhost:8081",
            "http://[::1]:8081",
        ] {
            assert!(
                with(local, true, false).unwrap().cosmos.insecure.is_none(),
                "{local}"
            );
        }
        assert!(with("https://acct.documents.azure.com", false, false).is_ok());
        for remote in ["http://cosmos.internal:8081", "https://10.0.0.5:8081"] {
            let plain = remote.starts_with("http:");
            let err = with(remote, !plain, false).unwrap_err().to_string();
            assert!(err.contains("COSMOS_ALLOW_INSECURE"), "{err}");
            let allowed = with(remote, !plain, true).unwrap();
            assert!(allowed.cosmos.insecure.is_some(), "{remote}");
        }
    }

    #[test]
    fn unknown_file_keys_are_errors() {
        assert!(toml::from_str::<Settings>("cosmos_databse = \"x\"").is_err());
    }

    #[test]
    fn source_budget_and_stall_time_have_defaults_and_a_floor() {
        let config = base().resolve().unwrap();
        assert_eq!(config.source_max_bytes, 64 * 1024 * 1024);
        assert_eq!(config.healthz_stall_after, Duration::from_secs(600));
        let file: Settings =
            toml::from_str("source_max_bytes = 1048576\nhealthz_stall_after = \"90s\"\n").unwrap();
        let config = file.or(base()).resolve().unwrap();
        assert_eq!(config.source_max_bytes, 1 << 20);
        assert_eq!(config.healthz_stall_after, Duration::from_secs(90));
        let err = Settings {
            source_max_bytes: Some(1000),
            ..base()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(err.contains("SOURCE_MAX_BYTES"), "{err}");
    }

    #[test]
    fn missing_and_bad_settings_name_the_variable() {
        let err = Settings::default().resolve().unwrap_err().to_string();
        assert!(err.contains("COSMOS_ENDPOINT"), "{err}");
        let err = Settings {
            cosmos_partition_key_path: Some("deviceId".into()),
            ..base()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(err.contains("COSMOS_PARTITION_KEY_PATH"), "{err}");
        let err = Settings {
            writer_source: Some(Secret::new("http://x")),
            ..base()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(err.contains("WRITER_SOURCE"), "{err}");
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let config = Settings {
            writer_source: Some(Secret::new(
                "Endpoint=sb://hub.servicebus.windows.net/;SharedAccessKeyName=service;SharedAccessKey=c2VjcmV0S2V5;EntityPath=hub",
            )),
            ..base()
        };
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("c2VjcmV0S2V5") && !shown.contains("a2V5"),
            "{shown}"
        );
        let resolved = config.resolve().unwrap();
        let shown = format!("{resolved:?}");
        assert!(
            !shown.contains("c2VjcmV0S2V5") && !shown.contains("a2V5"),
            "{shown}"
        );
        let Some(SourceSpec::EventHubs(hub)) = resolved.source else {
            panic!("not event hubs")
        };
        assert_eq!(hub.namespace, "hub.servicebus.windows.net");
        assert_eq!(hub.entity_path, "hub");
        let mqtt = SourceSpec::parse("mqtt://u:hunter2@broker:1883").unwrap();
        assert!(!format!("{mqtt:?}").contains("hunter2"));
    }

    #[test]
    fn an_emulator_string_is_dialled_as_plain_amqp_unless_a_custom_endpoint_is_set() {
        let parse = |text: &str| match SourceSpec::parse(text).unwrap() {
            SourceSpec::EventHubs(connection) => connection,
            other => panic!("{other:?}"),
        };
        let emulator = parse(
            "Endpoint=sb://localhost:5673;SharedAccessKeyName=service;SharedAccessKey=c2VjcmV0;EntityPath=hub;UseDevelopmentEmulator=true",
        );
        assert_eq!(
            emulator.dial_endpoint(None).as_deref(),
            Some("amqp://localhost:5673")
        );
        let proxy = Url::parse("amqps://proxy.example:5671").unwrap();
        assert_eq!(
            emulator.dial_endpoint(Some(&proxy)).as_deref(),
            Some("amqps://proxy.example:5671")
        );
        let hub = parse(
            "Endpoint=sb://hub.servicebus.windows.net/;SharedAccessKeyName=service;SharedAccessKey=c2VjcmV0;EntityPath=hub",
        );
        assert_eq!(hub.dial_endpoint(None), None);
        assert_eq!(
            hub.dial_endpoint(Some(&proxy)).as_deref(),
            Some("amqps://proxy.example:5671")
        );
        let off = parse(
            "Endpoint=sb://localhost:5673;SharedAccessKeyName=service;SharedAccessKey=c2VjcmV0;EntityPath=hub;UseDevelopmentEmulator=false",
        );
        assert_eq!(off.dial_endpoint(None), None);
    }

    #[test]
    fn start_position_is_earliest_latest_or_a_time() {
        let start = |text: &str| {
            Settings {
                eventhubs_start_position: Some(text.into()),
                ..base()
            }
            .resolve()
            .map(|c| c.eventhubs.start_position)
        };
        assert_eq!(
            base().resolve().unwrap().eventhubs.start_position,
            StartAt::Latest
        );
        assert_eq!(start("earliest").unwrap(), StartAt::Earliest);
        assert_eq!(
            start("2026-11-22T09:00:00Z").unwrap(),
            StartAt::EnqueuedAfter("2026-11-22T09:00:00Z".parse().unwrap())
        );
        let err = start("yesterday").unwrap_err().to_string();
        assert!(err.contains("EVENTHUBS_START_POSITION"), "{err}");
    }

    mod connection_strings {
        use proptest::prelude::*;

        use super::super::*;

        const PARTS: [&str; 4] = [
            "Endpoint",
            "SharedAccessKeyName",
            "SharedAccessKey",
            "EntityPath",
        ];

        fn parts() -> impl Strategy<Value = (String, String, String, String)> {
            (
                "[a-z][a-z0-9-]{2,20}",
                "[A-Za-z][A-Za-z0-9]{0,11}",
                "[A-Za-z0-9+/]{8,43}=?",
                "[a-z0-9][a-z0-9-]{0,19}",
            )
        }

        fn text(fields: &[(&str, String)], trailing: bool) -> String {
            let mut text = fields
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join(";");
            if trailing {
                text.push(';');
            }
            text
        }

        proptest! {
            /// Any order, a trailing ';', unknown keys: the parts come out, the key never
            /// shows in Debug output.
            #[test]
            fn parses_the_parts_in_any_order(
                (ns, key_name, key, hub) in parts(),
                order in Just(vec![0usize, 1, 2, 3, 4]).prop_shuffle(),
                trailing in any::<bool>(),
            ) {
                let values = [
                    format!("sb://{ns}.servicebus.windows.net/"),
                    key_name.clone(),
                    key.clone(),
                    hub.clone(),
                    "x".to_string(),
                ];
                let names = ["Endpoint", "SharedAccessKeyName", "SharedAccessKey", "EntityPath", "Unknown"];
                let fields: Vec<(&str, String)> = order.iter().map(|&i| (names[i], values[i].clone())).collect();
                let text = text(&fields, trailing);
                let SourceSpec::EventHubs(hub_connection) = SourceSpec::parse(&text).unwrap() else {
                    panic!("not Event Hubs: {text}");
                };
                prop_assert_eq!(&hub_connection.namespace, &format!("{ns}.servicebus.windows.net"));
                prop_assert_eq!(&hub_connection.key_name, &key_name);
                prop_assert_eq!(&hub_connection.entity_path, &hub);
                prop_assert_eq!(hub_connection.raw.expose(), text.trim());
                let shown = format!("{hub_connection:?}");
                prop_assert!(!shown.contains(&key), "{}", shown);
            }

            /// Without one of its four parts, the string is refused, the message names
            /// WRITER_SOURCE and the part, and never shows the key.
            #[test]
            fn refuses_a_string_missing_a_part(
                (ns, key_name, key, hub) in parts(),
                missing in 0usize..4,
            ) {
                let values = [format!("sb://{ns}.servicebus.windows.net/"), key_name, key.clone(), hub];
                let fields: Vec<(&str, String)> = (0..4)
                    .filter(|&i| i != missing)
                    .map(|i| (PARTS[i], values[i].clone()))
                    .collect();
                let err = SourceSpec::parse(&text(&fields, false)).unwrap_err().to_string();
                prop_assert!(err.contains("WRITER_SOURCE"), "{}", err);
                prop_assert!(err.contains(PARTS[missing]), "{}", err);
                prop_assert!(!err.contains(&key), "{}", err);
            }
        }
    }
}
