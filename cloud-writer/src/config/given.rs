//! The writer's settings as given: [`Settings`], every setting from a flag, the environment
//! or the TOML file (layered by [`settings::layer`]), resolved into a [`WriterConfig`] with
//! its defaults and checks; secrets are refused as flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;
use settings::{
    AccountAuth, ConfigError, DurationSetting, LogFormat, Secret, cosmos_account,
    cosmos_key_from_env,
};
use telemetry::{PartitionKeyPath, StalenessPolicy};
use url::Url;

use super::checkpoint_blob::{BlobCheckpoints, CheckpointStoreKind};
use super::resolved::{
    Balancing, CosmosSettings, DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_LOAD_BALANCING_INTERVAL,
    DEFAULT_MQTT_RECEIVE_MAXIMUM, DEFAULT_OWNERSHIP_EXPIRY, DEFAULT_SEGMENT_HOLD,
    DEFAULT_SEGMENT_SPAN, DeadLetterSettings, EventHubsSettings, HistorySettings, LoadBalancing,
    MqttTls, NewestWins, SOURCE_MAX_BYTES_FLOOR, StartAt, WriterConfig, read_key_file,
};
use super::source::SourceSpec;

settings::with_cosmos_account! {
    /// Every setting as given by flags, environment or file; `None` when not given. The Cosmos
    /// DB account's settings come first, declared once for every program
    /// ([`settings::with_cosmos_account!`]).
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Settings {
        /// File holding the Cosmos DB account key (instead of COSMOS_KEY); read again when Cosmos
        /// DB refuses the key (401/403), so a rotated key is taken without a restart.
        #[arg(long, env = "COSMOS_KEY_FILE")]
        pub cosmos_key_file: Option<PathBuf>,
        /// Partition key path the documents carry the device id at [default: /deviceId]
        #[arg(long, env = "COSMOS_PARTITION_KEY_PATH")]
        pub cosmos_partition_key_path: Option<String>,
        /// Create the database and container when missing, with the indexing policy of
        /// deploy/cosmos/indexing-policy.json [default: false]
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
        /// MQTT Receive Maximum: most unacknowledged messages the broker may send at once
        /// (1 to 65535) [default: 2000]
        #[arg(long, env = "MQTT_RECEIVE_MAXIMUM")]
        pub mqtt_receive_maximum: Option<u16>,
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
        /// Where the Event Hubs checkpoints and ownerships are kept: blob (Azure Blob Storage,
        /// the layout of every Event Hubs SDK and KEDA) or cosmos [default: blob when a
        /// storage account is given, else cosmos]
        #[arg(long, env = "EVENTHUBS_CHECKPOINT_STORE")]
        pub eventhubs_checkpoint_store: Option<CheckpointStoreKind>,
        /// Storage account connection string of the blob checkpoint store (environment,
        /// CHECKPOINT_BLOB_CONNECTION_STRING_FILE or file only).
        #[arg(skip)]
        pub checkpoint_blob_connection_string: Option<Secret>,
        /// Blob service URL of the blob checkpoint store, reached with Entra ID
        #[arg(long, env = "CHECKPOINT_BLOB_ACCOUNT_URL")]
        pub checkpoint_blob_account_url: Option<Url>,
        /// Blob container of the checkpoints and ownerships (required with blob)
        #[arg(long, env = "CHECKPOINT_BLOB_CONTAINER")]
        pub checkpoint_blob_container: Option<String>,
        /// The address the Event Hubs client dials instead of the namespace's (an AMQP proxy or
        /// a private link), e.g. amqps://proxy.example:5671 [default: the namespace; for a
        /// connection string with UseDevelopmentEmulator=true, amqp:// to its Endpoint]
        #[arg(long, env = "EVENTHUBS_CUSTOM_ENDPOINT")]
        pub eventhubs_custom_endpoint: Option<Url>,
        /// How often each replica balances the partitions and renews its ownerships [default: 10s]
        #[arg(long, env = "EVENTHUBS_LOAD_BALANCING_INTERVAL")]
        pub eventhubs_load_balancing_interval: Option<DurationSetting>,
        /// How long an ownership holds without renewal: the partitions of a replica that died
        /// move after it; longer than the interval [default: 30s]
        #[arg(long, env = "EVENTHUBS_OWNERSHIP_EXPIRY")]
        pub eventhubs_ownership_expiry: Option<DurationSetting>,
        /// greedy (take the whole fair share at once) or balanced (one partition per interval)
        /// [default: greedy]
        #[arg(long, env = "EVENTHUBS_LOAD_BALANCING_STRATEGY")]
        pub eventhubs_load_balancing_strategy: Option<LoadBalancing>,
        /// How often each partition's checkpoint is written (up to its last final event) [default: 5s]
        #[arg(long, env = "EVENTHUBS_CHECKPOINT_INTERVAL")]
        pub eventhubs_checkpoint_interval: Option<DurationSetting>,
        /// Positions later than this are dropped as stale [default: 5m]
        #[arg(long, env = "STALE_AFTER")]
        pub stale_after: Option<DurationSetting>,
        /// At most one write per drone per this interval, of its newest position (the
        /// positions it supersedes are acknowledged with that write); 0 writes every
        /// position [default: 0]
        #[arg(long, env = "MIN_WRITE_INTERVAL")]
        pub min_write_interval: Option<DurationSetting>,
        /// Device times further ahead of now are rejected [default: 2m]
        #[arg(long, env = "FUTURE_TOLERANCE")]
        pub future_tolerance: Option<DurationSetting>,
        /// Prometheus metrics at /metrics [default: 0.0.0.0:9464]; "off" disables
        #[arg(long, env = "METRICS_ADDR")]
        pub metrics_addr: Option<String>,
        /// Kubelet's probes, /healthz and /readyz [default: 0.0.0.0:9465]; "off" disables
        #[arg(long, env = "PROBE_ADDR")]
        pub probe_addr: Option<String>,
        /// How newest-wins is enforced: patch or etag [default: patch]
        #[arg(long, env = "NEWEST_WINS")]
        pub newest_wins: Option<NewestWins>,
        /// Also keep every fresh position in its drone's track segments [default: false]
        #[arg(long, env = "HISTORY")]
        pub history: Option<bool>,
        /// Time to live of track segments, e.g. 7d (needs TTL on the container)
        #[arg(long, env = "HISTORY_TTL")]
        pub history_ttl: Option<DurationSetting>,
        /// Device time one track segment holds, 10s to 1h [default: 5m]
        #[arg(long, env = "HISTORY_SEGMENT_SPAN")]
        pub history_segment_span: Option<DurationSetting>,
        /// Longest a position is held, unacknowledged, for its segment write, at most the
        /// span [default: 2m]
        #[arg(long, env = "HISTORY_HOLD")]
        pub history_hold: Option<DurationSetting>,
        /// Append rejected messages to this JSONL file.
        #[arg(long, env = "DEAD_LETTER_FILE")]
        pub dead_letter_file: Option<PathBuf>,
        /// The dead-letter file rotates to FILE.1 past this many bytes [default: 67108864]
        #[arg(long, env = "DEAD_LETTER_MAX_BYTES")]
        pub dead_letter_max_bytes: Option<u64>,
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
        /// A request's headers must reach the metrics and probe ports within this [default: 10s]
        #[arg(long, env = "METRICS_HEADER_TIMEOUT")]
        pub metrics_header_timeout: Option<DurationSetting>,
    }
}

settings::layered!(Settings {
    cosmos_endpoint,
    cosmos_auth,
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
    mqtt_receive_maximum,
    mqtt_ca_file,
    mqtt_client_cert_file,
    mqtt_client_key_file,
    eventhubs_consumer_group,
    eventhubs_start_position,
    eventhubs_checkpoint_container,
    eventhubs_checkpoint_store,
    checkpoint_blob_connection_string,
    checkpoint_blob_account_url,
    checkpoint_blob_container,
    eventhubs_custom_endpoint,
    eventhubs_load_balancing_interval,
    eventhubs_ownership_expiry,
    eventhubs_load_balancing_strategy,
    eventhubs_checkpoint_interval,
    stale_after,
    min_write_interval,
    future_tolerance,
    metrics_addr,
    probe_addr,
    newest_wins,
    history,
    history_ttl,
    history_segment_span,
    history_hold,
    dead_letter_file,
    dead_letter_max_bytes,
    batch_max_messages,
    batch_linger,
    max_in_flight,
    summary_interval,
    log_format,
    source_max_bytes,
    healthz_stall_after,
    metrics_header_timeout,
});

impl Settings {
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

    /// The secrets, which have no flag: `COSMOS_KEY`, `WRITER_SOURCE` and
    /// `CHECKPOINT_BLOB_CONNECTION_STRING`, each from its
    /// environment variable or the file its `*_FILE` variable names (`-`: standard input).
    pub fn secrets_from_env() -> Result<Settings, ConfigError> {
        Ok(Settings {
            cosmos_key: cosmos_key_from_env()?,
            writer_source: settings::secret_from_env("WRITER_SOURCE")?,
            checkpoint_blob_connection_string: settings::secret_from_env(
                "CHECKPOINT_BLOB_CONNECTION_STRING",
            )?,
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
        let (endpoint, auth) = cosmos_account(self.cosmos_endpoint, self.cosmos_auth, key)?;
        let create_if_missing = self.cosmos_create_if_missing.unwrap_or(false);
        if create_if_missing && matches!(auth, AccountAuth::Entra) {
            return Err(ConfigError::Invalid {
                name: "COSMOS_CREATE_IF_MISSING",
                message: "Entra ID identities cannot create databases or containers through Cosmos DB's data plane: create them with `az cosmosdb sql container create` (or Bicep, Terraform) and leave COSMOS_CREATE_IF_MISSING unset, or use COSMOS_AUTH=key".into(),
            });
        }
        let accept_invalid_certs = self.cosmos_accept_invalid_certs.unwrap_or(false);
        let insecure = settings::insecure_transport(
            &endpoint,
            accept_invalid_certs,
            self.cosmos_allow_insecure.unwrap_or(false),
        )?;
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
        let min_write_interval = self.min_write_interval.map_or(Duration::ZERO, |d| d.0);
        if min_write_interval >= staleness.stale_after {
            return Err(ConfigError::Invalid {
                name: "MIN_WRITE_INTERVAL",
                message: format!(
                    "{min_write_interval:?} would hold positions until they are stale (STALE_AFTER {:?}): write 30s, or anything shorter than STALE_AFTER",
                    staleness.stale_after
                ),
            });
        }
        let metrics_addr = listen_addr("METRICS_ADDR", self.metrics_addr.as_deref(), 9464)?;
        let probe_addr = listen_addr("PROBE_ADDR", self.probe_addr.as_deref(), 9465)?;
        // Port 0 asks for any free port: two listeners, never the same.
        if metrics_addr.is_some_and(|a| a.port() != 0) && metrics_addr == probe_addr {
            return Err(ConfigError::Invalid {
                name: "PROBE_ADDR",
                message: "must differ from METRICS_ADDR, so that scrapes never hold the probes' connections: write 0.0.0.0:9465".into(),
            });
        }
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
        let segment_span = self
            .history_segment_span
            .map_or(DEFAULT_SEGMENT_SPAN, |d| d.0);
        if !(Duration::from_secs(10)..=Duration::from_secs(3600)).contains(&segment_span) {
            return Err(ConfigError::Invalid {
                name: "HISTORY_SEGMENT_SPAN",
                message: format!(
                    "{segment_span:?} is outside 10s to 1h: a shorter span writes a segment for every few positions, a longer one grows past the sizes where Cosmos DB's write charge climbs (32 KB: a drone reporting every second fills 1h with 200 KB); write 2m"
                ),
            });
        }
        let segment_hold = self.history_hold.map_or(DEFAULT_SEGMENT_HOLD, |d| d.0);
        if segment_hold > segment_span {
            return Err(ConfigError::Invalid {
                name: "HISTORY_HOLD",
                message: format!(
                    "{segment_hold:?} is longer than HISTORY_SEGMENT_SPAN ({segment_span:?}): a stretch is written when its drone moves to the next one anyway, so a longer hold only delays acknowledgements; write 2m, or at most the span"
                ),
            });
        }
        let dead_letter = match (self.dead_letter_file, self.dead_letter_max_bytes) {
            (_, Some(0)) => {
                return Err(ConfigError::Invalid {
                    name: "DEAD_LETTER_MAX_BYTES",
                    message: "must be at least 1: write 67108864 (64 MiB) or leave it out".into(),
                });
            }
            (Some(file), max_bytes) => Some(DeadLetterSettings {
                file,
                max_bytes: max_bytes.unwrap_or(DeadLetterSettings::DEFAULT_MAX_BYTES),
            }),
            (None, Some(_)) => {
                return Err(ConfigError::Invalid {
                    name: "DEAD_LETTER_MAX_BYTES",
                    message: "applies to DEAD_LETTER_FILE, which is not set: set both, or neither"
                        .into(),
                });
            }
            (None, None) => None,
        };
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
        let mqtt_receive_maximum = self
            .mqtt_receive_maximum
            .unwrap_or(DEFAULT_MQTT_RECEIVE_MAXIMUM);
        if mqtt_receive_maximum == 0 {
            return Err(ConfigError::Invalid {
                name: "MQTT_RECEIVE_MAXIMUM",
                message: "must be between 1 and 65535".into(),
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
                auth,
                key_file: self.cosmos_key_file,
                database: self.cosmos_database.unwrap_or_else(|| "telemetry".into()),
                container: self.cosmos_container.unwrap_or_else(|| "positions".into()),
                partition_key_path,
                accept_invalid_certs,
                insecure,
                create_if_missing,
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
            mqtt_receive_maximum,
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
                blob_checkpoints: BlobCheckpoints::resolve(
                    self.eventhubs_checkpoint_store,
                    self.checkpoint_blob_connection_string,
                    self.checkpoint_blob_account_url,
                    self.checkpoint_blob_container,
                )?,
                custom_endpoint: self.eventhubs_custom_endpoint,
                balancing: Balancing::resolve(
                    self.eventhubs_load_balancing_interval,
                    self.eventhubs_ownership_expiry,
                    self.eventhubs_load_balancing_strategy,
                )?,
                checkpoint_interval: positive(
                    "EVENTHUBS_CHECKPOINT_INTERVAL",
                    self.eventhubs_checkpoint_interval,
                    DEFAULT_CHECKPOINT_INTERVAL,
                )?,
            },
            staleness,
            metrics_addr,
            probe_addr,
            newest_wins: self.newest_wins.unwrap_or_default(),
            history: self.history.unwrap_or(false).then_some(HistorySettings {
                ttl: history_ttl,
                segment_span,
                hold: segment_hold,
            }),
            dead_letter,
            batch_max_messages,
            min_write_interval,
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
            metrics_header_timeout: self
                .metrics_header_timeout
                .map_or(Duration::from_secs(10), |d| d.0),
        })
    }
}

/// A listener's address, `off` for none, `default_port` on all interfaces when not given.
fn listen_addr(
    name: &'static str,
    given: Option<&str>,
    default_port: u16,
) -> Result<Option<SocketAddr>, ConfigError> {
    match given {
        Some("off") => Ok(None),
        Some(addr) => addr.parse().map(Some).map_err(|e| ConfigError::Invalid {
            name,
            message: format!(
                "'{addr}' is not an address such as 0.0.0.0:{default_port}, or off ({e})"
            ),
        }),
        None => Ok(Some(SocketAddr::from(([0, 0, 0, 0], default_port)))),
    }
}

impl Balancing {
    /// The settings given, with defaults; refuses an expiry not longer than the interval.
    pub fn resolve(
        interval: Option<DurationSetting>,
        expiry: Option<DurationSetting>,
        strategy: Option<LoadBalancing>,
    ) -> Result<Self, ConfigError> {
        let interval = positive(
            "EVENTHUBS_LOAD_BALANCING_INTERVAL",
            interval,
            DEFAULT_LOAD_BALANCING_INTERVAL,
        )?;
        let ownership_expiry = positive(
            "EVENTHUBS_OWNERSHIP_EXPIRY",
            expiry,
            DEFAULT_OWNERSHIP_EXPIRY,
        )?;
        if ownership_expiry <= interval {
            return Err(ConfigError::Invalid {
                name: "EVENTHUBS_OWNERSHIP_EXPIRY",
                message: format!(
                    "{ownership_expiry:?} is not longer than EVENTHUBS_LOAD_BALANCING_INTERVAL ({interval:?}): every ownership would expire before its renewal and the replicas would take partitions from each other at every interval. Set EVENTHUBS_OWNERSHIP_EXPIRY to at least twice the interval (e.g. {:?}), or shorten the interval",
                    interval * 3
                ),
            });
        }
        Ok(Balancing {
            interval,
            ownership_expiry,
            strategy: strategy.unwrap_or_default(),
        })
    }
}

/// A duration setting that must be above zero, or its default.
fn positive(
    name: &'static str,
    value: Option<DurationSetting>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match value.map(DurationSetting::get) {
        None => Ok(default),
        Some(d) if d.is_zero() => Err(ConfigError::Invalid {
            name,
            message: format!("must be longer than zero (default {default:?})"),
        }),
        Some(d) => Ok(d),
    }
}
