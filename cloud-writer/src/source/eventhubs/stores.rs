//! The checkpoint store the source runs with, through one trait ([`Store`]: the SDK's
//! [`CheckpointStore`] and the handover records; this project's Cosmos DB container, or
//! Blob Storage in the SDKs' layout), opened from the [`CheckpointContainer`] the writer
//! chose ([`open`]), and giving a replica's partitions up in
//! either ([`relinquish`], through the SDK's [`CheckpointStore`] trait alone).

use std::collections::HashMap;
use std::sync::Arc;

use azure_messaging_eventhubs::CheckpointStore;
use azure_messaging_eventhubs::models::Ownership;

use super::CheckpointContainer;
use super::blob_store::BlobCheckpointStore;
use super::store::{CosmosCheckpointStore, Scope, azure_error};
use crate::config::EventHubsSettings;

/// A checkpoint store the source runs with: the SDK's [`CheckpointStore`] and, beside
/// it, the handover records of this writer (`super::handover`).
#[async_trait::async_trait]
pub trait Store: CheckpointStore + std::fmt::Debug {
    /// Records that this replica ended its reading of `partition` in `scope`, and
    /// checkpointed it, for the claim with ETag `claim` (the new owner's, which waits for
    /// it: `super::handover`).
    async fn hand_over(
        &self,
        scope: &Scope,
        partition: &str,
        claim: &str,
    ) -> azure_core::Result<()>;

    /// The claim each partition of `scope` was last handed over for, its ETag as
    /// recorded.
    async fn handovers(&self, scope: &Scope) -> azure_core::Result<HashMap<String, String>>;

    /// The claim each partition of `scope` was last handed over for, its ETag without
    /// quotes.
    async fn handed_over(&self, scope: &Scope) -> azure_core::Result<HashMap<String, String>> {
        Ok(self
            .handovers(scope)
            .await?
            .into_iter()
            .map(|(partition, claim)| (partition, unquoted(&claim).to_owned()))
            .collect())
    }
}

/// The checkpoint store of a running source, shared by its parts.
pub type SharedStore = Arc<dyn Store>;

/// Opens the store `checkpoints` names (the Cosmos container's name from `settings`).
pub async fn open(
    checkpoints: &CheckpointContainer,
    settings: &EventHubsSettings,
) -> Result<SharedStore, String> {
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
        .map_err(|e| e.to_string()),
        CheckpointContainer::Blob(blob) => BlobCheckpointStore::open(blob)
            .await
            .map(|store| Arc::new(store) as SharedStore)
            .map_err(|e| e.to_string()),
    }
}

#[async_trait::async_trait]
impl Store for CosmosCheckpointStore {
    async fn hand_over(
        &self,
        scope: &Scope,
        partition: &str,
        claim: &str,
    ) -> azure_core::Result<()> {
        CosmosCheckpointStore::hand_over(self, scope, partition, claim)
            .await
            .map_err(azure_error)
    }

    async fn handovers(&self, scope: &Scope) -> azure_core::Result<HashMap<String, String>> {
        CosmosCheckpointStore::handed_over(self, scope)
            .await
            .map_err(azure_error)
    }
}

#[async_trait::async_trait]
impl Store for BlobCheckpointStore {
    async fn hand_over(
        &self,
        scope: &Scope,
        partition: &str,
        claim: &str,
    ) -> azure_core::Result<()> {
        BlobCheckpointStore::hand_over(self, scope, partition, claim)
            .await
            .map_err(azure_error)
    }

    async fn handovers(&self, scope: &Scope) -> azure_core::Result<HashMap<String, String>> {
        BlobCheckpointStore::handed_over(self, scope)
            .await
            .map_err(azure_error)
    }
}

/// An ETag without the quotes some stores and listings give it.
pub fn unquoted(etag: &str) -> &str {
    etag.trim_matches('"')
}

/// Gives up `owner`'s partitions in `scope`: each of its ownerships is claimed, with the
/// ETag it was listed with, as one without owner, which the SDKs' load balancers take as
/// unowned, so that another replica claims it at its next balancing instead of waiting
/// for the ownership to expire. An ownership another replica claimed meanwhile (its ETag
/// moved on) is left alone: a new owner's claim is never overwritten. Returns the
/// partitions given up.
pub async fn relinquish(
    store: &dyn CheckpointStore,
    scope: &Scope,
    owner: &str,
) -> azure_core::Result<Vec<String>> {
    let mut released = Vec::new();
    let ownerships = store
        .list_ownerships(&scope.namespace, &scope.event_hub, &scope.consumer_group)
        .await?;
    for ownership in ownerships {
        if ownership.owner_id.as_deref() != Some(owner) || ownership.etag.is_none() {
            continue;
        }
        let unowned = Ownership {
            owner_id: None,
            last_modified_time: None,
            ..ownership
        };
        if !store
            .claim_ownership(std::slice::from_ref(&unowned))
            .await?
            .is_empty()
        {
            released.push(unowned.partition_id);
        }
    }
    released.sort();
    Ok(released)
}
