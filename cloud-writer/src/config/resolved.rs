//! The writer's configuration as it runs: [`WriterConfig`] and its parts (Cosmos DB, the
//! MQTT source's TLS, Event Hubs, history), with what they need at run time (the key file
//! read again after a refusal).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use settings::{AccountAuth, ConfigError, LogFormat, Secret};
use telemetry::{PartitionKeyPath, StalenessPolicy};
use url::Url;

use super::checkpoint_blob::BlobCheckpoints;
use super::source::SourceSpec;

/// The default `MQTT_RECEIVE_MAXIMUM`: unacknowledged messages the broker may send at
/// once. With in-order acknowledgement after the write, one connection's throughput is
/// about this many messages per write latency (the batch linger plus a bulk round trip:
/// 2,000 per ~25 ms is 80,000/s), and messages beyond the queue take at most this many
/// of the broker's largest packets: about 600 KB of 300-byte positions, 640 MiB if every
/// message were at the wire limit (256 KiB plus topic), which the broker's own
/// `max_packet_size` for devices lowers.
pub const DEFAULT_MQTT_RECEIVE_MAXIMUM: u16 = 2000;

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
    /// How requests are authorized: the account key, or Entra ID tokens (COSMOS_AUTH).
    pub auth: AccountAuth,
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
    /// Cosmos container of checkpoints and ownerships.
    pub checkpoint_container: String,
    /// The Blob Storage checkpoint store instead of the Cosmos container, if chosen.
    pub blob_checkpoints: Option<BlobCheckpoints>,
    /// The address to dial instead of the namespace's, if any.
    pub custom_endpoint: Option<Url>,
    /// How the replicas share the partitions.
    pub balancing: Balancing,
    /// How often each partition's checkpoint is written.
    pub checkpoint_interval: Duration,
}

impl EventHubsSettings {
    /// The settings of a consumer group with every other setting at its default.
    pub fn new(consumer_group: &str, start_position: StartAt) -> Self {
        EventHubsSettings {
            consumer_group: consumer_group.into(),
            start_position,
            checkpoint_container: "checkpoints".into(),
            blob_checkpoints: None,
            custom_endpoint: None,
            balancing: Balancing::default(),
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
        }
    }
}

/// The default `EVENTHUBS_LOAD_BALANCING_INTERVAL`: a new replica gets its share, and a
/// replica's surplus moves, within about one interval.
pub const DEFAULT_LOAD_BALANCING_INTERVAL: Duration = Duration::from_secs(10);
/// The default `EVENTHUBS_OWNERSHIP_EXPIRY`: three renewals may fail before a replica's
/// partitions move; a killed replica's partitions move after it.
pub const DEFAULT_OWNERSHIP_EXPIRY: Duration = Duration::from_secs(30);
/// The default `EVENTHUBS_CHECKPOINT_INTERVAL`.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);

/// How a replica claims partitions (the SDK's `ProcessorStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadBalancing {
    /// Claim the whole fair share at once (unowned, expired, then taken from replicas
    /// above their share): a new or restarted replica is at full share after one interval.
    #[default]
    Greedy,
    /// Claim one partition per interval: less contention when many replicas start at
    /// once, a slower balance.
    Balanced,
}

/// The partition sharing between replicas: the SDK processor's update interval, ownership
/// expiry and strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balancing {
    /// How often ownerships are balanced and renewed.
    pub interval: Duration,
    /// How long an ownership holds without renewal.
    pub ownership_expiry: Duration,
    /// Greedy or balanced.
    pub strategy: LoadBalancing,
}

impl Default for Balancing {
    fn default() -> Self {
        Balancing {
            interval: DEFAULT_LOAD_BALANCING_INTERVAL,
            ownership_expiry: DEFAULT_OWNERSHIP_EXPIRY,
            strategy: LoadBalancing::Greedy,
        }
    }
}

/// History mode: every fresh position also kept in its drone's track segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistorySettings {
    /// `ttl` of track segments, in seconds.
    pub ttl: Option<u32>,
    /// Device time one segment holds.
    pub segment_span: Duration,
    /// Longest a position is held for its segment write.
    pub hold: Duration,
}

/// `HISTORY_SEGMENT_SPAN` by default: 24 positions of a drone reporting every 5 s (about
/// 1.5 KB), 120 of one reporting every second (about 7 KB), well under the 32 KB past which
/// Cosmos DB's write charge climbs steeply. As long as the hold: each segment is written
/// once (`fleet plan`: a week of history adds 15 % to a million drones' RU/s, where a
/// 5-minute span written three times adds 28 %).
pub const DEFAULT_SEGMENT_SPAN: Duration = Duration::from_secs(120);

/// `HISTORY_HOLD` by default: the span, so that a segment is written once; a message waits
/// at most this long for its acknowledgement or checkpoint.
pub const DEFAULT_SEGMENT_HOLD: Duration = Duration::from_secs(120);

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
    /// MQTT Receive Maximum: most unacknowledged messages the broker may send at once.
    pub mqtt_receive_maximum: u16,
    /// TLS of an `mqtts://` source: the roots to trust and the certificate to present.
    pub mqtt_tls: MqttTls,
    /// Event Hubs consumer settings.
    pub eventhubs: EventHubsSettings,
    /// The staleness rule.
    pub staleness: StalenessPolicy,
    /// Metrics listener; `None` disables it.
    pub metrics_addr: Option<SocketAddr>,
    /// Probes listener (`/healthz`, `/readyz`); `None` disables it.
    pub probe_addr: Option<SocketAddr>,
    /// How newest-wins is enforced.
    pub newest_wins: NewestWins,
    /// History mode.
    pub history: Option<HistorySettings>,
    /// Dead-letter JSONL file.
    pub dead_letter: Option<DeadLetterSettings>,
    /// Most messages per pipeline batch.
    pub batch_max_messages: usize,
    /// At most one write per drone per this interval (zero: no limit).
    pub min_write_interval: Duration,
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
    /// A request's headers must reach the metrics and probe ports within this.
    pub metrics_header_timeout: Duration,
}

/// Where rejected messages are appended, and the size at which the file rotates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterSettings {
    /// The JSONL file; the previous one is kept as `FILE.1`.
    pub file: PathBuf,
    /// The file rotates when the next line would take it past this.
    pub max_bytes: u64,
}

impl DeadLetterSettings {
    /// 64 MiB: with `FILE.1`, at most 128 MiB on disk.
    pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
}
