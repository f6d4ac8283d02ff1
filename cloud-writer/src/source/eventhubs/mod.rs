//! The Event Hubs source: reads IoT Hub's built-in endpoint with the SDK's
//! `EventProcessor`, which shares the partitions between writer replicas through a
//! checkpoint store ([`stores`]: in Blob Storage in the layout of every Event Hubs SDK,
//! [`blob_store`], or in Cosmos DB, [`store`]), and checkpoints each partition only up to the
//! last event whose outcome is final and all of whose predecessors are final, so that a
//! restart resumes after written events only.

mod balance;
pub mod blob_store;
mod checkpoints;
mod event;
mod failure;
mod handover;
mod lag;
mod partitions;
mod processor;
mod stall;
pub mod store;
mod stores;
mod takeover;
pub mod transfer;

use std::sync::Arc;

use cosmos::CosmosClient;

use crate::config::BlobCheckpoints;
use futures::FutureExt;
use futures::future::BoxFuture;

use crate::config::{EventHubsConnection, EventHubsSettings};
use crate::metrics::Metrics;
use crate::source::queue::QueueSender;
use crate::source::{Source, SourceControl, SourceError};

/// Where the checkpoints and ownerships live.
#[derive(Debug, Clone)]
pub enum CheckpointContainer {
    /// A Cosmos DB container (named by `EVENTHUBS_CHECKPOINT_CONTAINER`).
    Cosmos {
        /// The Cosmos DB account.
        client: CosmosClient,
        /// Database.
        database: String,
        /// Create the container when missing.
        create_if_missing: bool,
    },
    /// A Blob Storage container, in the layout every Event Hubs SDK shares.
    Blob(BlobCheckpoints),
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
