//! The Event Hubs adapter for IoT Hub's built-in endpoint: how a received event becomes a
//! [`Message`], and which position of each partition may be checkpointed.
//!
//! - Identity: the `iothub-connection-device-id` system property (the identity the hub
//!   authenticated), never the payload.
//! - Times: the event's enqueued time (`x-opt-enqueued-time`) is the message's enqueued
//!   time; the device's `iothub-creation-time-utc` application property is informational
//!   (the payload's `ts` is the device time the pipeline uses).
//! - Checkpoints: [`checkpoints::PartitionCheckpoints`] keeps each partition's events in order (one
//!   [`checkpoints::PartitionQueue`] per reading of the partition) and releases a checkpoint only up to
//!   the last event whose outcome is final and all of whose predecessors are final, so a
//!   restart resumes after written events only.
//!
//! The adapter works on [`event::EventParts`], the fields of the SDK's [`ReceivedEventData`] it
//! uses, taken by [`event::EventParts::of_received`]: `enqueued_time()`, `sequence_number()`,
//! `offset()`, and from the raw AMQP message the device identity annotation, the creation
//! time application property and the body (not through the SDK's `system_properties()`
//! and `event_data()`, which copy every annotation and property into maps per event); the checkpoint store is [`store::CosmosCheckpointStore`];
//! the source that runs the SDK's `EventProcessor` is [`EventHubsSource`], its
//! partition readers are in [`partitions`], the lag of every partition in [`lag`].

mod checkpoints;
mod event;
mod failure;
mod lag;
mod partitions;
mod processor;
pub mod store;

use std::sync::Arc;

use cosmos::CosmosClient;
use futures::FutureExt;
use futures::future::BoxFuture;

use crate::config::{EventHubsConnection, EventHubsSettings};
use crate::metrics::Metrics;
use crate::source::queue::QueueSender;
use crate::source::{Source, SourceControl, SourceError};

/// Where the checkpoint container lives.
#[derive(Debug, Clone)]
pub struct CheckpointContainer {
    /// The Cosmos DB account.
    pub client: CosmosClient,
    /// Database.
    pub database: String,
    /// Create the container when missing.
    pub create_if_missing: bool,
}

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
        processor::run(*self, tx, control).boxed()
    }
}
