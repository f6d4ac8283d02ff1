//! The cloud writer: consumes drone positions from IoT Hub's Event Hubs-compatible
//! endpoint or an MQTT broker, drops stale and bad ones (counted, never silently), and
//! writes each drone's newest position into Cosmos DB as a GeoJSON document.
//!
//! The API is small: a [`Writer`] started from a [`WriterConfig`] (resolved from
//! [`Settings`]), its [`Metrics`] and the [`Counts`] and [`Snapshot`] read back from them,
//! with the reasons a message is dropped ([`DropReason`]) or the stream held
//! ([`HoldReason`]).
//!
//! Inside, the data path is in the folder names: `source` (MQTT and Event Hubs, in-order
//! acknowledgement) → `pipeline` (decode, identity, staleness, coalescing, rejects; the
//! `Sink` contract it hands positions to) → `sink` (the Cosmos DB bulk sink and its
//! newest-wins state machine); `writer` wires them, `metrics` and `config` serve all three,
//! `import` backfills from a file.
//!
//! Running a writer in-process:
//! ```no_run
//! # async fn demo(config: cloud_writer::WriterConfig) -> anyhow::Result<()> {
//! let writer = cloud_writer::Writer::start(config).await?;
//! // ... later:
//! writer.shutdown();
//! let counts = writer.wait().await?;
//! println!("{} written", counts.written);
//! # Ok(()) }
//! ```

mod config;
mod import;
mod metrics;
mod pipeline;
mod sink;
mod source;
mod writer;

pub use config::{
    DEFAULT_SEGMENT_HOLD, DEFAULT_SEGMENT_SPAN, DurationSetting, NewestWins, Secret, Settings,
    WriterConfig,
};
pub use metrics::{Counts, DropReason, HoldReason, Metrics, Snapshot, UnknownDropReason};
pub use writer::{RunError, StartError, Writer};

/// The parts below the API that the command (`import`, `check`, `checkpoints`) and the
/// demo's load tools reach, and, with the cargo feature `test-support`, those only the
/// integration tests and the benches reach. Not an API: it follows the code.
#[doc(hidden)]
pub mod internals {
    pub use crate::config::{CheckpointStoreKind, SourceSpec};
    pub use crate::import::FileSource;
    pub use crate::sink::policy_cost;
    pub use crate::source::eventhubs::checkpointing::blob_store::BlobCheckpointStore;
    pub use crate::source::eventhubs::checkpointing::cosmos_store::CosmosCheckpointStore;
    pub use crate::source::eventhubs::checkpointing::{Scope, transfer};
    pub use crate::writer::{bulk_config, cosmos_client, open_container, patch_in_batches};

    #[cfg(feature = "test-support")]
    pub use for_tests::*;

    /// What only the integration tests and the benches reach.
    #[cfg(feature = "test-support")]
    mod for_tests {
        pub use crate::config::{
            BlobAuth, BlobCheckpoints, EventHubsConnection, EventHubsSettings,
            SOURCE_MAX_BYTES_FLOOR, StartAt,
        };
        pub use crate::pipeline::Coalescer;
        pub use crate::pipeline::agent::{AgentFact, ConnectionOp, TwinOp};
        pub use crate::pipeline::reject::Rejects;
        pub use crate::pipeline::{AgentWrite, PositionWrite, prepare_batch};
        pub use crate::sink::{CosmosSink, Encoder, HistoryFormat, SinkSettings};
        pub use crate::source::eventhubs::{CheckpointContainer, EventHubsSource};
        pub use crate::source::mqtt::{MqttSettings, MqttSource, TOPIC_FILTER};
        pub use crate::source::queue::channel;
        pub use crate::source::{
            Ack, HubEvent, Message, MessageKind, Source, SourceControl, SourceError,
        };
    }
}
