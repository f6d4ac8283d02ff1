//! Which checkpoint store the source runs with ([`Store`]: this project's Cosmos DB
//! container, or Blob Storage in the SDKs' layout), opened from the
//! [`CheckpointContainer`] the writer chose, and giving a replica's partitions up in
//! either ([`relinquish`], through the SDK's [`CheckpointStore`] trait alone).

use std::collections::HashMap;

use azure_messaging_eventhubs::CheckpointStore;
use azure_messaging_eventhubs::models::{Checkpoint, Ownership};

use super::CheckpointContainer;
use super::blob_store::BlobCheckpointStore;
use super::store::{CosmosCheckpointStore, Scope, azure_error};
use crate::config::EventHubsSettings;

/// The checkpoint store of a running source.
#[derive(Debug, Clone)]
pub enum Store {
    /// A Cosmos DB container of this project's layout.
    Cosmos(CosmosCheckpointStore),
    /// Blob Storage, in the layout every Event Hubs SDK shares.
    Blob(BlobCheckpointStore),
}

impl Store {
    /// Opens the store `checkpoints` names (the Cosmos container's name from `settings`).
    pub async fn open(
        checkpoints: &CheckpointContainer,
        settings: &EventHubsSettings,
    ) -> Result<Store, String> {
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
            .map(Store::Cosmos)
            .map_err(|e| e.to_string()),
            CheckpointContainer::Blob(blob) => BlobCheckpointStore::open(blob)
                .await
                .map(Store::Blob)
                .map_err(|e| e.to_string()),
        }
    }

    /// Records that this replica ended its reading of `partition` in `scope`, and
    /// checkpointed it, for the claim with ETag `claim` (the new owner's, which waits for
    /// it: `super::handover`).
    pub async fn hand_over(
        &self,
        scope: &Scope,
        partition: &str,
        claim: &str,
    ) -> azure_core::Result<()> {
        match self {
            Store::Cosmos(store) => store
                .hand_over(scope, partition, claim)
                .await
                .map_err(azure_error),
            Store::Blob(store) => store
                .hand_over(scope, partition, claim)
                .await
                .map_err(azure_error),
        }
    }

    /// The claim each partition of `scope` was last handed over for, its ETag without
    /// quotes.
    pub async fn handed_over(&self, scope: &Scope) -> azure_core::Result<HashMap<String, String>> {
        let handed = match self {
            Store::Cosmos(store) => store.handed_over(scope).await.map_err(azure_error),
            Store::Blob(store) => store.handed_over(scope).await.map_err(azure_error),
        }?;
        Ok(handed
            .into_iter()
            .map(|(partition, claim)| (partition, unquoted(&claim).to_owned()))
            .collect())
    }

    fn inner(&self) -> &dyn CheckpointStore {
        match self {
            Store::Cosmos(store) => store,
            Store::Blob(store) => store,
        }
    }
}

#[async_trait::async_trait]
impl CheckpointStore for Store {
    async fn claim_ownership(
        &self,
        ownerships: &[Ownership],
    ) -> azure_core::Result<Vec<Ownership>> {
        self.inner().claim_ownership(ownerships).await
    }

    async fn list_checkpoints(
        &self,
        namespace: &str,
        event_hub_name: &str,
        consumer_group: &str,
    ) -> azure_core::Result<Vec<Checkpoint>> {
        self.inner()
            .list_checkpoints(namespace, event_hub_name, consumer_group)
            .await
    }

    async fn list_ownerships(
        &self,
        namespace: &str,
        event_hub_name: &str,
        consumer_group: &str,
    ) -> azure_core::Result<Vec<Ownership>> {
        self.inner()
            .list_ownerships(namespace, event_hub_name, consumer_group)
            .await
    }

    async fn update_checkpoint(&self, checkpoint: Checkpoint) -> azure_core::Result<()> {
        self.inner().update_checkpoint(checkpoint).await
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
