//! The Event Hubs source: reads IoT Hub's built-in endpoint with the SDK's
//! `EventProcessor` ([`reading`]), which shares the partitions between writer replicas
//! through a checkpoint store ([`checkpointing`]: in Blob Storage in the layout of every
//! Event Hubs SDK, or in Cosmos DB), and checkpoints each partition only up to the last
//! event whose outcome is final and all of whose predecessors are final, so that a
//! restart resumes after written events only.
//!
//! - this file: the source's face ([`EventHubsSource`]).
//! - [`reading`]: the processor, its partitions' readings, events as messages, lag, stall
//!   and failures.
//! - [`checkpointing`]: the store trait and its two stores, claims, handover, takeover,
//!   balance, and which position may be checkpointed.
//!
//! The path of a position, file by file. A file counts when a function in it takes,
//! holds or returns the event, its message, its position write, its acknowledgement or
//! the checkpoint made of it; types only declared there and derived counts (metrics,
//! high-water marks) do not. Counted with the default settings (Cosmos DB checkpoints,
//! no `MIN_WRITE_INTERVAL`): 15 files.
//!
//! | Step | Files |
//! |---|---|
//! | read | `reading/processor.rs`, `reading/partitions.rs`, `reading/event.rs` |
//! | acknowledge in order | `checkpointing/checkpoints.rs`, `source/mod.rs` |
//! | queue | `source/queue.rs` |
//! | judge, coalesce, hand off | `pipeline/mod.rs`, `pipeline/validate.rs` |
//! | write | `sink/cosmos/mod.rs`, `engine.rs`, `encode.rs`, `newest_wins.rs`, `in_flight.rs` |
//! | checkpoint | `checkpointing/store.rs` (`Scope::checkpoint`), `checkpointing/cosmos_store.rs` |
//!
//! With the blob store, `blob_store/mod.rs` and `client.rs` (and `shared_key.rs` with an
//! account key) stand in for `cosmos_store.rs`. `MIN_WRITE_INTERVAL` adds
//! `pipeline/spacing.rs`.

pub(crate) mod checkpointing;
mod reading;

pub use checkpointing::CheckpointContainer;

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::config::{EventHubsConnection, EventHubsSettings};
use crate::metrics::Metrics;
use crate::source::queue::QueueSender;
use crate::source::{Source, SourceControl, SourceError};

/// The Event Hubs source.
#[derive(Debug)]
pub struct EventHubsSource {
    connection: EventHubsConnection,
    settings: EventHubsSettings,
    checkpoints: CheckpointContainer,
    metrics: Arc<Metrics>,
}

impl EventHubsSource {
    /// A source reading the hub of `connection` with `settings`, keeping checkpoints in
    /// `checkpoints`.
    pub fn new(
        connection: EventHubsConnection,
        settings: EventHubsSettings,
        checkpoints: CheckpointContainer,
        metrics: Arc<Metrics>,
    ) -> Self {
        EventHubsSource {
            connection,
            settings,
            checkpoints,
            metrics,
        }
    }
}

impl Source for EventHubsSource {
    fn kind(&self) -> &'static str {
        "eventhubs"
    }

    fn run(
        self: Box<Self>,
        tx: QueueSender,
        control: SourceControl,
    ) -> BoxFuture<'static, Result<(), SourceError>> {
        let EventHubsSource {
            connection,
            settings,
            checkpoints,
            metrics,
        } = *self;
        reading::run(connection, settings, checkpoints, metrics, tx, control).boxed()
    }
}
