//! The Event Hubs checkpoint store of this project, in a small Cosmos DB container
//! (partition key `/scope`), because the blob checkpoint store crate does not resolve
//! with the Event Hubs crate version that accepts connection strings.
//!
//! One logical partition per consumer scope (`{namespace}/{event hub}/{consumer group}`),
//! holding one `checkpoint-{partition}` and one `ownership-{partition}` document per
//! Event Hubs partition. Ownership claims are optimistic: a claim that names the ETag it
//! last saw is a Replace with `ifMatch`, a first claim a Create; a 412 or 409 means
//! another replica won, and the claim is left out of the result (the SDK's contract).

use cosmos::{ContainerClient, CosmosError, QueryRequest, QueryScope};
use serde::{Deserialize, Serialize};

/// The partition key path of the checkpoint container.
pub const SCOPE_PATH: &str = "/scope";

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
    /// The partition key value of this scope.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}",
            self.namespace.to_lowercase(),
            self.event_hub.to_lowercase(),
            self.consumer_group.to_lowercase()
        )
    }
}

/// A checkpoint: where a partition's processing resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The Event Hubs partition.
    pub partition_id: String,
    /// Sequence number of the last processed event.
    pub sequence_number: Option<i64>,
    /// Offset of the last processed event.
    pub offset: Option<String>,
}

/// Who owns a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// The Event Hubs partition.
    pub partition_id: String,
    /// The owning processor.
    pub owner_id: Option<String>,
    /// The document's ETag when read; a claim with it succeeds only if nobody claimed since.
    pub etag: Option<String>,
    /// Last change, Unix seconds (the server's `_ts`).
    pub last_modified: Option<i64>,
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
    #[serde(rename = "_etag", default, skip_serializing)]
    etag: Option<String>,
    #[serde(rename = "_ts", default, skip_serializing)]
    ts: Option<i64>,
}

/// Checkpoints and ownerships in a Cosmos DB container partitioned on [`SCOPE_PATH`].
#[derive(Debug, Clone)]
pub struct CosmosCheckpointStore {
    container: ContainerClient,
}

impl CosmosCheckpointStore {
    /// A store in `container`.
    pub fn new(container: ContainerClient) -> Self {
        CosmosCheckpointStore { container }
    }

    async fn list(&self, scope: &Scope, kind: &str) -> Result<Vec<Doc>, CosmosError> {
        let query = QueryRequest {
            query: "SELECT * FROM c WHERE c.kind = @kind".into(),
            parameters: vec![cosmos::QueryParameter {
                name: "@kind".into(),
                value: kind.into(),
            }],
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

    /// The checkpoints of every partition of the scope.
    pub async fn list_checkpoints(&self, scope: &Scope) -> Result<Vec<Checkpoint>, CosmosError> {
        Ok(self
            .list(scope, "checkpoint")
            .await?
            .into_iter()
            .map(|d| Checkpoint {
                partition_id: d.partition_id,
                sequence_number: d.sequence_number,
                offset: d.offset,
            })
            .collect())
    }

    /// The ownerships of every partition of the scope.
    pub async fn list_ownerships(&self, scope: &Scope) -> Result<Vec<Ownership>, CosmosError> {
        Ok(self
            .list(scope, "ownership")
            .await?
            .into_iter()
            .map(|d| Ownership {
                partition_id: d.partition_id,
                owner_id: d.owner_id,
                etag: d.etag,
                last_modified: d.ts,
            })
            .collect())
    }

    /// Records a partition's checkpoint.
    pub async fn update_checkpoint(
        &self,
        scope: &Scope,
        checkpoint: &Checkpoint,
    ) -> Result<(), CosmosError> {
        let doc = Doc {
            id: format!("checkpoint-{}", checkpoint.partition_id),
            scope: scope.key(),
            kind: "checkpoint".into(),
            partition_id: checkpoint.partition_id.clone(),
            sequence_number: checkpoint.sequence_number,
            offset: checkpoint.offset.clone(),
            owner_id: None,
            etag: None,
            ts: None,
        };
        let body = serde_json::to_vec(&doc).expect("a checkpoint serializes");
        self.container.upsert(&scope.key(), &body).await?;
        Ok(())
    }

    /// Claims partitions; returns the claims that succeeded, with their new ETags.
    pub async fn claim_ownership(
        &self,
        scope: &Scope,
        claims: &[Ownership],
    ) -> Result<Vec<Ownership>, CosmosError> {
        let key = scope.key();
        let mut claimed = Vec::new();
        for claim in claims {
            let doc = Doc {
                id: format!("ownership-{}", claim.partition_id),
                scope: key.clone(),
                kind: "ownership".into(),
                partition_id: claim.partition_id.clone(),
                sequence_number: None,
                offset: None,
                owner_id: claim.owner_id.clone(),
                etag: None,
                ts: None,
            };
            let body = serde_json::to_vec(&doc).expect("an ownership serializes");
            let result = match &claim.etag {
                Some(etag) => {
                    self.container
                        .replace(&key, &doc.id, &body, Some(etag))
                        .await
                }
                None => self.container.create(&key, &body).await,
            };
            match result {
                Ok(written) => {
                    let stored: Option<Doc> = serde_json::from_slice(&written.body).ok();
                    claimed.push(Ownership {
                        etag: written
                            .etag
                            .or_else(|| stored.as_ref().and_then(|d| d.etag.clone())),
                        last_modified: stored.and_then(|d| d.ts),
                        ..claim.clone()
                    });
                }
                Err(err) if err.is_precondition_failed() || err.is_conflict() => {
                    tracing::debug!(partition = %claim.partition_id, "ownership claimed by another processor");
                }
                Err(err) => return Err(err),
            }
        }
        Ok(claimed)
    }
}
