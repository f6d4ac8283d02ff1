//! The Event Hubs source: reads IoT Hub's built-in endpoint with the SDK's
//! `EventProcessor` ([`reading`]), which shares the partitions between writer replicas
//! through a checkpoint store ([`checkpointing`]: in Blob Storage in the layout of every
//! Event Hubs SDK, or in Cosmos DB), and checkpoints each partition only up to the last
//! event whose outcome is final and all of whose predecessors are final, so that a
//! restart resumes after written events only.

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
