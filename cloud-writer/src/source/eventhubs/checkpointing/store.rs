//! The checkpoint store the source runs with, through one trait ([`Store`]: the SDK's
//! [`CheckpointStore`] and the handover records); the [`Scope`] its records belong to; the one claim loop
//! both stores run ([`claim_each`]); and giving a replica's partitions up in either
//! ([`relinquish`], through the SDK's [`CheckpointStore`] trait alone).

use std::collections::HashMap;
use std::sync::Arc;

use azure_messaging_eventhubs::CheckpointStore;
use azure_messaging_eventhubs::models::{Checkpoint, Ownership};

use azure_core::error::ErrorKind as AzureErrorKind;
use azure_core::http::Etag;
use azure_core::time::OffsetDateTime;

/// A consumer scope: which hub and consumer group the documents belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// Fully qualified namespace, e.g. `myhub.servicebus.windows.net`.
    pub namespace: String,
    /// Event hub name.
    pub event_hub: String,
    /// Consumer group.
    pub consumer_group: String,
}

impl Scope {
    /// A scope from its three names.
    pub fn new(namespace: &str, event_hub: &str, consumer_group: &str) -> Self {
        Scope {
            namespace: namespace.to_owned(),
            event_hub: event_hub.to_owned(),
            consumer_group: consumer_group.to_owned(),
        }
    }

    /// The partition key value of this scope (case-insensitive names, as the service's).
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}",
            self.namespace.to_lowercase(),
            self.event_hub.to_lowercase(),
            self.consumer_group.to_lowercase()
        )
    }

    /// A checkpoint of `partition_id` in this scope.
    pub fn checkpoint(
        &self,
        partition_id: &str,
        sequence_number: Option<i64>,
        offset: Option<String>,
    ) -> Checkpoint {
        Checkpoint {
            fully_qualified_namespace: self.namespace.clone(),
            event_hub_name: self.event_hub.clone(),
            consumer_group: self.consumer_group.clone(),
            partition_id: partition_id.to_owned(),
            offset,
            sequence_number,
        }
    }

    /// An ownership of `partition_id` in this scope, as a store read it.
    pub fn ownership(
        &self,
        partition_id: String,
        owner_id: Option<String>,
        etag: Option<String>,
        last_modified_time: Option<OffsetDateTime>,
    ) -> Ownership {
        Ownership {
            fully_qualified_namespace: self.namespace.clone(),
            event_hub_name: self.event_hub.clone(),
            consumer_group: self.consumer_group.clone(),
            partition_id,
            owner_id,
            etag: etag.map(Etag::from),
            last_modified_time,
        }
    }
}

/// A store's failure as the SDK's [`CheckpointStore`] reports it.
pub(super) fn azure_error(
    err: impl std::error::Error + Send + Sync + 'static,
) -> azure_core::Error {
    azure_core::Error::new(AzureErrorKind::Io, err)
}

/// Claims each of `ownerships` in turn with `claim` (which answers `None` when another
/// processor won it); the ones won, as the SDK's [`CheckpointStore::claim_ownership`]
/// returns them.
pub(super) async fn claim_each<'a, E, F>(
    ownerships: &'a [Ownership],
    claim: impl Fn(&'a Ownership) -> F,
) -> azure_core::Result<Vec<Ownership>>
where
    E: std::error::Error + Send + Sync + 'static,
    F: Future<Output = Result<Option<Ownership>, E>>,
{
    let mut claimed = Vec::with_capacity(ownerships.len());
    for wanted in ownerships {
        if let Some(ownership) = claim(wanted).await.map_err(azure_error)? {
            claimed.push(ownership);
        }
    }
    Ok(claimed)
}

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
