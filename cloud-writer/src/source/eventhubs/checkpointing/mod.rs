//! Checkpointing: where the Event Hubs source keeps each partition's checkpoint and
//! owner, and how replicas share and hand over the partitions through them.
//!
//! - this file: which store the writer chose ([`CheckpointContainer`]) and its opening.
//! - [`store`]: the store trait ([`store::Store`]), the [`Scope`] of its records, the one
//!   claim loop both stores run, giving partitions up.
//! - [`cosmos_store`]: the store in a Cosmos DB container of this project's layout.
//! - [`blob_store`]: the store in Blob Storage, in the layout every Event Hubs SDK shares.
//! - [`checkpoints`]: which position of each partition read here may be checkpointed, and
//!   its writing.
//! - [`handover`]: the store as the SDK's processor sees it; a moved partition opens only
//!   once its previous owner handed it over.
//! - [`takeover`]: ending the readings of partitions another replica claimed.
//! - [`balance`]: which partitions a replica steals from which owner.
//! - [`transfer`]: showing and copying checkpoints by hand (`cloud-writer checkpoints`).

mod balance;
pub(crate) mod blob_store;
pub(super) mod checkpoints;
pub(crate) mod cosmos_store;
pub(super) mod handover;
pub(super) mod store;
pub(super) mod takeover;
pub mod transfer;

pub use store::Scope;

use std::sync::Arc;

use cosmos::CosmosClient;

use crate::config::{BlobCheckpoints, EventHubsSettings};
use blob_store::{BlobCheckpointStore, BlobError};
use cosmos_store::{CosmosCheckpointStore, StoreError};
use store::SharedStore;

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

/// Why the checkpoint store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The Cosmos DB container is missing, unreachable or of another layout.
    #[error("the Cosmos DB checkpoint container: {0}")]
    Cosmos(#[from] StoreError),
    /// The blob container is missing or unreachable, or its settings are wrong.
    #[error("the Blob Storage checkpoint container: {0}")]
    Blob(#[from] BlobError),
}

/// Opens the store `checkpoints` names (the Cosmos container's name from `settings`).
pub async fn open(
    checkpoints: &CheckpointContainer,
    settings: &EventHubsSettings,
) -> Result<SharedStore, OpenError> {
    match checkpoints {
        CheckpointContainer::Cosmos {
            client,
            database,
            create_if_missing,
        } => CosmosCheckpointStore::open(
            client,
            database,
            &settings.checkpoint_container,
            *create_if_missing,
        )
        .await
        .map(|store| Arc::new(store) as SharedStore)
        .map_err(OpenError::from),
        CheckpointContainer::Blob(blob) => BlobCheckpointStore::open(blob)
            .await
            .map(|store| Arc::new(store) as SharedStore)
            .map_err(OpenError::from),
    }
}
