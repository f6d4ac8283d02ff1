//! The Event Hubs checkpoint store of this project, in a small Cosmos DB container
//! (partition key `/scope`), because the blob checkpoint store crate does not resolve
//! with the Event Hubs crate version that accepts connection strings.
//!
//! [`CosmosCheckpointStore`] implements the SDK's [`CheckpointStore`], so the SDK's
//! `EventProcessor` balances partitions between replicas through it. One logical
//! partition per consumer scope (`{namespace}/{event hub}/{consumer group}`), holding one
//! `checkpoint-{partition}` and one `ownership-{partition}` document per Event Hubs
//! partition, and a `handover-{partition}` document once a replica handed the partition
//! over (`super::handover`). Ownership claims are optimistic: a claim that names the ETag it last saw
//! is a Replace with `ifMatch`, a first claim a Create; a 412 or 409 means another
//! replica won, and the claim is left out of the result (the SDK's contract).

use std::collections::HashMap;

use azure_core::http::Etag;
use azure_core::time::OffsetDateTime;
use azure_messaging_eventhubs::CheckpointStore;
use azure_messaging_eventhubs::models::{Checkpoint, Ownership};
use cosmos::{
    ContainerClient, ContainerSetup, CosmosClient, CosmosError, QueryRequest, QueryScope,
};
use serde::{Deserialize, Serialize};

use super::store::{Scope, Store, azure_error, claim_each};

/// The partition key path of the checkpoint container.
pub const SCOPE_PATH: &str = "/scope";

/// Why the checkpoint container cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The container does not exist and may not be created.
    #[error(
        "the checkpoint container {database}/{container} does not exist: create it with partition key {SCOPE_PATH}, set EVENTHUBS_CHECKPOINT_CONTAINER to an existing one, or set COSMOS_CREATE_IF_MISSING=true"
    )]
    Missing {
        /// Database.
        database: String,
        /// Container.
        container: String,
    },
    /// The container is partitioned on another path.
    #[error(
        "the checkpoint container {container} is partitioned on {path}, not {SCOPE_PATH}: set EVENTHUBS_CHECKPOINT_CONTAINER to a container partitioned on {SCOPE_PATH} (or a new name, with COSMOS_CREATE_IF_MISSING=true)"
    )]
    WrongPartitionKey {
        /// Container.
        container: String,
        /// Its partition key path(s).
        path: String,
    },
    /// Cosmos DB failed.
    #[error(transparent)]
    Cosmos(#[from] CosmosError),
}

/// The stored document.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Doc {
    id: String,
    scope: String,
    kind: String,
    partition_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sequence_number: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    offset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner_id: Option<String>,
    /// Of a handover: the ETag of the claim the partition was handed over for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claim: Option<String>,
    #[serde(rename = "_etag", default, skip_serializing)]
    etag: Option<String>,
    #[serde(rename = "_ts", default, skip_serializing)]
    ts: Option<i64>,
}

const CHECKPOINT: &str = "checkpoint";
const OWNERSHIP: &str = "ownership";
const HANDOVER: &str = "handover";

/// Checkpoints and ownerships in a Cosmos DB container partitioned on `SCOPE_PATH`.
#[derive(Debug, Clone)]
pub struct CosmosCheckpointStore {
    container: ContainerClient,
}

fn timestamp(ts: Option<i64>) -> Option<OffsetDateTime> {
    ts.and_then(|ts| OffsetDateTime::from_unix_timestamp(ts).ok())
}

impl CosmosCheckpointStore {
    /// A store in `container` (partitioned on [`SCOPE_PATH`]).
    pub fn new(container: ContainerClient) -> Self {
        CosmosCheckpointStore { container }
    }

    /// Opens the store in `database`/`container`, creating the container when missing
    /// and `create` is set; checks its partition key path.
    pub async fn open(
        client: &CosmosClient,
        database: &str,
        container: &str,
        create: bool,
    ) -> Result<Self, StoreError> {
        let client_container = client.container(database, container);
        let properties = match client_container.properties().await {
            Ok(properties) => properties,
            Err(err) if err.is_not_found() && create => {
                tracing::info!(%database, %container, "creating the checkpoint container");
                client_container
                    .create_if_missing(&ContainerSetup::new(SCOPE_PATH))
                    .await?
            }
            Err(err) if err.is_not_found() => {
                return Err(StoreError::Missing {
                    database: database.into(),
                    container: container.into(),
                });
            }
            Err(err) => return Err(err.into()),
        };
        if properties.partition_key.paths != [SCOPE_PATH] {
            return Err(StoreError::WrongPartitionKey {
                container: container.into(),
                path: properties.partition_key.paths.join(","),
            });
        }
        Ok(CosmosCheckpointStore::new(client_container))
    }

    /// Records that a replica ended its reading of `partition` in `scope` for the claim
    /// with ETag `claim` (a `handover-{partition}` document).
    pub(super) async fn hand_over(
        &self,
        scope: &Scope,
        partition: &str,
        claim: &str,
    ) -> Result<(), CosmosError> {
        let key = scope.key();
        let doc = Doc {
            id: format!("{HANDOVER}-{partition}"),
            scope: key.clone(),
            kind: HANDOVER.into(),
            partition_id: partition.to_owned(),
            sequence_number: None,
            offset: None,
            owner_id: None,
            claim: Some(claim.to_owned()),
            etag: None,
            ts: None,
        };
        let body = serde_json::to_vec(&doc).expect("a handover serializes");
        self.container.upsert(key.as_str(), &body).await?;
        Ok(())
    }

    /// The claim each partition of `scope` was last handed over for.
    pub(super) async fn handed_over(
        &self,
        scope: &Scope,
    ) -> Result<HashMap<String, String>, CosmosError> {
        Ok(self
            .list(scope, HANDOVER)
            .await?
            .into_iter()
            .filter_map(|d| Some((d.partition_id, d.claim?)))
            .collect())
    }

    async fn list(&self, scope: &Scope, kind: &str) -> Result<Vec<Doc>, CosmosError> {
        // The scope filter repeats the partition key the query is sent to: servers that
        // route by the query text (`@vercel/cosmosdb-server`) need it.
        let query = QueryRequest {
            query: "SELECT * FROM c WHERE c.scope = @scope AND c.kind = @kind".into(),
            parameters: vec![
                cosmos::QueryParameter {
                    name: "@scope".into(),
                    value: scope.key().into(),
                },
                cosmos::QueryParameter {
                    name: "@kind".into(),
                    value: kind.into(),
                },
            ],
        };
        let response = self
            .container
            .query(&query, QueryScope::Partition(scope.key()))
            .await?;
        response
            .documents
            .into_iter()
            .map(|d| {
                serde_json::from_value(d).map_err(|source| CosmosError::Decode {
                    what: "checkpoint document",
                    source,
                })
            })
            .collect()
    }

    /// Claims one partition; `None` when another processor claimed it first.
    async fn claim(&self, claim: &Ownership) -> Result<Option<Ownership>, CosmosError> {
        let key = Scope::new(
            &claim.fully_qualified_namespace,
            &claim.event_hub_name,
            &claim.consumer_group,
        )
        .key();
        let doc = Doc {
            id: format!("{OWNERSHIP}-{}", claim.partition_id),
            scope: key.clone(),
            kind: OWNERSHIP.into(),
            partition_id: claim.partition_id.clone(),
            sequence_number: None,
            offset: None,
            owner_id: claim.owner_id.clone(),
            claim: None,
            etag: None,
            ts: None,
        };
        let body = serde_json::to_vec(&doc).expect("an ownership serializes");
        let result = match &claim.etag {
            Some(etag) => {
                self.container
                    .replace(key.as_str(), &doc.id, &body, Some(etag.as_ref()))
                    .await
            }
            None => self.container.create(key.as_str(), &body).await,
        };
        match result {
            Ok(written) => {
                let stored: Option<Doc> = serde_json::from_slice(&written.body).ok();
                let etag = written
                    .etag
                    .or_else(|| stored.as_ref().and_then(|d| d.etag.clone()));
                Ok(Some(Ownership {
                    etag: etag.map(Etag::from),
                    last_modified_time: timestamp(stored.and_then(|d| d.ts))
                        .or_else(|| Some(OffsetDateTime::now_utc())),
                    ..claim.clone()
                }))
            }
            // 412: the ETag moved on; 409: a first claim lost the race to create;
            // 404: the ownership named by the ETag is gone.
            Err(err) if err.is_precondition_failed() || err.is_conflict() || err.is_not_found() => {
                tracing::debug!(partition = %claim.partition_id, "ownership claimed by another processor");
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }
}

#[async_trait::async_trait]
impl CheckpointStore for CosmosCheckpointStore {
    async fn claim_ownership(
        &self,
        ownerships: &[Ownership],
    ) -> azure_core::Result<Vec<Ownership>> {
        claim_each(ownerships, |claim| self.claim(claim)).await
    }

    async fn list_checkpoints(
        &self,
        namespace: &str,
        event_hub_name: &str,
        consumer_group: &str,
    ) -> azure_core::Result<Vec<Checkpoint>> {
        let scope = Scope::new(namespace, event_hub_name, consumer_group);
        let docs = self.list(&scope, CHECKPOINT).await.map_err(azure_error)?;
        Ok(docs
            .into_iter()
            .map(|d| scope.checkpoint(&d.partition_id, d.sequence_number, d.offset))
            .collect())
    }

    async fn list_ownerships(
        &self,
        namespace: &str,
        event_hub_name: &str,
        consumer_group: &str,
    ) -> azure_core::Result<Vec<Ownership>> {
        let scope = Scope::new(namespace, event_hub_name, consumer_group);
        let docs = self.list(&scope, OWNERSHIP).await.map_err(azure_error)?;
        Ok(docs
            .into_iter()
            .map(|d| scope.ownership(d.partition_id, d.owner_id, d.etag, timestamp(d.ts)))
            .collect())
    }

    async fn update_checkpoint(&self, checkpoint: Checkpoint) -> azure_core::Result<()> {
        let key = Scope::new(
            &checkpoint.fully_qualified_namespace,
            &checkpoint.event_hub_name,
            &checkpoint.consumer_group,
        )
        .key();
        let doc = Doc {
            id: format!("{CHECKPOINT}-{}", checkpoint.partition_id),
            scope: key.clone(),
            kind: CHECKPOINT.into(),
            partition_id: checkpoint.partition_id,
            sequence_number: checkpoint.sequence_number,
            offset: checkpoint.offset,
            owner_id: None,
            claim: None,
            etag: None,
            ts: None,
        };
        let body = serde_json::to_vec(&doc).expect("a checkpoint serializes");
        self.container
            .upsert(key.as_str(), &body)
            .await
            .map_err(azure_error)?;
        Ok(())
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

#[cfg(test)]
impl CosmosCheckpointStore {
    /// A store in a new container on a new local endpoint, for the source's unit tests; the
    /// endpoint lives as long as the first value.
    pub(in crate::source::eventhubs) async fn on_local_endpoint() -> (cosmos_sim::CosmosSim, Self) {
        let sim = cosmos_sim::CosmosSim::builder().start().await.unwrap();
        let key = cosmos::MasterKey::from_base64(cosmos_wire::auth::EMULATOR_KEY).unwrap();
        let client = CosmosClient::new(cosmos::CosmosConfig::new(
            sim.endpoint().parse().unwrap(),
            cosmos::Credential::MasterKey(key),
        ))
        .unwrap();
        let store = Self::open(&client, "telemetry", "checkpoints", true)
            .await
            .unwrap();
        (sim, store)
    }
}
