//! The Event Hubs source: reads IoT Hub's built-in endpoint with the SDK's
//! `EventProcessor`, which shares the partitions between writer replicas through a
//! checkpoint store in Cosmos DB ([`store`]), and checkpoints each partition only up to the
//! last event whose outcome is final and all of whose predecessors are final, so that a
//! restart resumes after written events only.

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
