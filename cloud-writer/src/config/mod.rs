//! Configuration: command-line flags, environment variables and a TOML file, resolved
//! into one typed [`WriterConfig`]: `given` holds the settings as given and their checks,
//! `resolved` the configuration the writer runs with, `source` the source setting,
//! `checkpoint_blob` the Event Hubs checkpoint store's; `tests` checks them all.
//!
//! Precedence: flag, then environment variable, then the file given by `--config`
//! (`WRITER_CONFIG`), then the default. File keys are the environment variable names in
//! lower case (`cosmos_endpoint = "https://..."`). Durations take the one form of every
//! program (`5`, `5s`, `500ms`, `2m`). Secrets (`COSMOS_KEY`, `CHECKPOINT_BLOB_CONNECTION_STRING`, and `WRITER_SOURCE`, which
//! may be an Event Hubs connection string or a URL with a password) come from the
//! environment, a `*_FILE` or the config file, never from a flag; they are held in
//! [`Secret`] and never appear in logs or `Debug` output.

mod checkpoint_blob;
mod given;
mod resolved;
mod source;
#[cfg(test)]
mod tests;

pub use checkpoint_blob::{BlobAuth, BlobCheckpoints, CheckpointStoreKind};
pub use given::Settings;
#[cfg(feature = "test-support")]
pub use resolved::SOURCE_MAX_BYTES_FLOOR;
pub use resolved::{
    CosmosSettings, DEFAULT_MQTT_RECEIVE_MAXIMUM, DEFAULT_SEGMENT_HOLD, DEFAULT_SEGMENT_SPAN,
    DeadLetterSettings, EventHubsSettings, LoadBalancing, MqttTls, NewestWins, StartAt,
    WriterConfig, read_key_file,
};
pub use settings::{DurationSetting, Secret};
pub use source::{EventHubsAuth, EventHubsConnection, SourceSpec};
