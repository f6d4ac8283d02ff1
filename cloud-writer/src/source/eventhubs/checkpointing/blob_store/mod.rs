//! The Event Hubs checkpoint store in Azure Blob Storage, in the layout every Event Hubs
//! SDK shares (Python `azure-eventhub-checkpointstoreblob`, JS
//! `@azure/eventhubs-checkpointstore-blob`, .NET, Java) and KEDA's `azure-eventhub`
//! scaler reads, so that they can read and take over this writer's checkpoints and the
//! other way round.
//!
//! One container; per partition an empty blob
//! `{namespace}/{event hub}/{consumer group}/checkpoint/{partition}` with metadata
//! `offset` and `sequencenumber`, and one `.../ownership/{partition}` with metadata
//! `ownerid` (empty when unowned), names in lower case. A claim naming the ETag it last
//! saw sets the ownership's metadata with `If-Match`; a first claim creates the blob with
//! `If-None-Match: *`; 412, 409 or 404 means another processor won, and the claim is left
//! out of the result (the SDK's contract). Beside them, this writer's own
//! `.../handover/{partition}` blobs (metadata `claim`: `super::handover`), which the SDKs
//! do not list. [`BlobCheckpointStore`] implements the SDK's
//! [`CheckpointStore`]; [`client`] sends the requests, [`shared_key`] signs them,
//! [`listing`] reads List Blobs.

mod client;
mod listing;
mod shared_key;

use std::collections::HashMap;
use std::time::SystemTime;

use azure_core::http::Etag;
use azure_core::time::OffsetDateTime;
use azure_messaging_eventhubs::CheckpointStore;
use azure_messaging_eventhubs::models::{Checkpoint, Ownership};
use reqwest::{Method, StatusCode};

pub use client::BlobError;
use client::ContainerClient;
use listing::ListedBlob;

use super::store::{Scope, Store, azure_error, claim_each};
use crate::config::BlobCheckpoints;

const CHECKPOINT: &str = "checkpoint";
const OWNERSHIP: &str = "ownership";
const HANDOVER: &str = "handover";

/// Checkpoints and ownerships as blobs of one container.
#[derive(Debug, Clone)]
pub struct BlobCheckpointStore {
    client: ContainerClient,
}

/// The blob name prefix of `kind` in `scope`, in lower case as the SDKs write it.
fn prefix(scope: &Scope, kind: &str) -> String {
    format!("{}/{kind}/", scope.key())
}

fn http_time(text: Option<&str>) -> Option<OffsetDateTime> {
    text.and_then(|t| httpdate::parse_http_date(t).ok())
        .map(OffsetDateTime::from)
}

impl BlobCheckpointStore {
    /// Opens the store of `settings`: checks that the container exists, and creates it
    /// when missing if the settings hold a key.
    pub async fn open(settings: &BlobCheckpoints) -> Result<Self, BlobError> {
        let client = ContainerClient::new(settings)?;
        let mut url = client.container_url();
        url.query_pairs_mut().append_pair("restype", "container");
        match client
            .send(
                "read the checkpoint container",
                Method::GET,
                url.clone(),
                &[],
            )
            .await
        {
            Ok(_) => {}
            Err(err) if err.status() == Some(StatusCode::NOT_FOUND) => {
                if !settings.may_create_container() {
                    return Err(BlobError::ContainerMissing {
                        container: settings.container.clone(),
                    });
                }
                tracing::info!(container = %settings.container, "creating the checkpoint container");
                match client
                    .send("create the checkpoint container", Method::PUT, url, &[])
                    .await
                {
                    Ok(_) => {}
                    // Another replica created it meanwhile.
                    Err(err) if err.status() == Some(StatusCode::CONFLICT) => {}
                    Err(err) => return Err(err),
                }
            }
            Err(err) => return Err(err),
        }
        Ok(BlobCheckpointStore { client })
    }

    /// Every blob whose name starts with `prefix`, with its metadata, page by page.
    async fn list(&self, prefix: &str) -> Result<Vec<ListedBlob>, BlobError> {
        let mut blobs = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut url = self.client.container_url();
            {
                let mut query = url.query_pairs_mut();
                query
                    .append_pair("restype", "container")
                    .append_pair("comp", "list")
                    .append_pair("prefix", prefix)
                    .append_pair("include", "metadata");
                if let Some(marker) = &marker {
                    query.append_pair("marker", marker);
                }
            }
            let response = self
                .client
                .send("list the checkpoint blobs", Method::GET, url, &[])
                .await?;
            let page = listing::parse(&response.text().await?)?;
            blobs.extend(page.blobs);
            match page.next_marker {
                Some(next) => marker = Some(next),
                None => return Ok(blobs),
            }
        }
    }

    /// Records that a replica ended its reading of `partition` in `scope` for the claim
    /// with ETag `claim`: an empty blob `.../handover/{partition}` with metadata `claim`
    /// (the ETag without its quotes).
    pub async fn hand_over(
        &self,
        scope: &Scope,
        partition: &str,
        claim: &str,
    ) -> Result<(), BlobError> {
        let name = format!("{}{partition}", prefix(scope, HANDOVER));
        self.client
            .send(
                "record a handover",
                Method::PUT,
                self.client.blob_url(&name),
                &[("x-ms-blob-type", "BlockBlob"), ("x-ms-meta-claim", claim)],
            )
            .await?;
        Ok(())
    }

    /// The claim (its ETag, as recorded) each partition of `scope` was last handed over
    /// for.
    pub async fn handed_over(&self, scope: &Scope) -> Result<HashMap<String, String>, BlobError> {
        Ok(self
            .list(&prefix(scope, HANDOVER))
            .await?
            .iter()
            .filter_map(|blob| {
                let claim = metadata(&blob.metadata, "claim")?;
                Some((partition_of(blob), claim.to_owned()))
            })
            .collect())
    }

    /// Claims one partition; `None` when another processor claimed it first.
    async fn claim(&self, claim: &Ownership) -> Result<Option<Ownership>, BlobError> {
        let scope = Scope::new(
            &claim.fully_qualified_namespace,
            &claim.event_hub_name,
            &claim.consumer_group,
        );
        let name = format!("{}{}", prefix(&scope, OWNERSHIP), claim.partition_id);
        let mut url = self.client.blob_url(&name);
        let owner = claim.owner_id.as_deref().unwrap_or("");
        let etag = claim.etag.as_ref().map(|e| e.to_string());
        let result = match &etag {
            Some(etag) => {
                url.query_pairs_mut().append_pair("comp", "metadata");
                self.client
                    .send(
                        "renew an ownership",
                        Method::PUT,
                        url,
                        &[("if-match", etag), ("x-ms-meta-ownerid", owner)],
                    )
                    .await
            }
            None => {
                self.client
                    .send(
                        "claim an ownership",
                        Method::PUT,
                        url,
                        &[
                            ("if-none-match", "*"),
                            ("x-ms-blob-type", "BlockBlob"),
                            ("x-ms-meta-ownerid", owner),
                        ],
                    )
                    .await
            }
        };
        match result {
            Ok(response) => {
                let header = |name: &str| {
                    response
                        .headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                };
                Ok(Some(Ownership {
                    etag: header("etag").map(Etag::from),
                    last_modified_time: http_time(header("last-modified").as_deref())
                        .or_else(|| Some(OffsetDateTime::from(SystemTime::now()))),
                    ..claim.clone()
                }))
            }
            // 412: the ETag moved on; 409: a first claim lost the race to create;
            // 404: the ownership named by the ETag is gone.
            Err(err)
                if matches!(
                    err.status(),
                    Some(
                        StatusCode::PRECONDITION_FAILED
                            | StatusCode::CONFLICT
                            | StatusCode::NOT_FOUND
                    )
                ) =>
            {
                tracing::debug!(partition = %claim.partition_id, "ownership claimed by another processor");
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }
}

/// The partition id of a listed blob: the last part of its name.
fn partition_of(blob: &ListedBlob) -> String {
    blob.name.rsplit('/').next().unwrap_or_default().to_owned()
}

fn metadata<'a>(metadata: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    metadata
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

#[async_trait::async_trait]
impl CheckpointStore for BlobCheckpointStore {
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
        let blobs = self
            .list(&prefix(&scope, CHECKPOINT))
            .await
            .map_err(azure_error)?;
        Ok(blobs
            .iter()
            .map(|blob| {
                scope.checkpoint(
                    &partition_of(blob),
                    metadata(&blob.metadata, "sequencenumber").and_then(|s| s.parse().ok()),
                    metadata(&blob.metadata, "offset").map(str::to_owned),
                )
            })
            .collect())
    }

    async fn list_ownerships(
        &self,
        namespace: &str,
        event_hub_name: &str,
        consumer_group: &str,
    ) -> azure_core::Result<Vec<Ownership>> {
        let scope = Scope::new(namespace, event_hub_name, consumer_group);
        let blobs = self
            .list(&prefix(&scope, OWNERSHIP))
            .await
            .map_err(azure_error)?;
        Ok(blobs
            .iter()
            .map(|blob| {
                scope.ownership(
                    partition_of(blob),
                    metadata(&blob.metadata, "ownerid").map(str::to_owned),
                    blob.etag.clone(),
                    http_time(blob.last_modified.as_deref()),
                )
            })
            .collect())
    }

    async fn update_checkpoint(&self, checkpoint: Checkpoint) -> azure_core::Result<()> {
        let scope = Scope::new(
            &checkpoint.fully_qualified_namespace,
            &checkpoint.event_hub_name,
            &checkpoint.consumer_group,
        );
        let name = format!("{}{}", prefix(&scope, CHECKPOINT), checkpoint.partition_id);
        let offset = checkpoint.offset.unwrap_or_default();
        let sequence_number = checkpoint
            .sequence_number
            .map(|n| n.to_string())
            .unwrap_or_default();
        self.client
            .send(
                "write a checkpoint",
                Method::PUT,
                self.client.blob_url(&name),
                &[
                    ("x-ms-blob-type", "BlockBlob"),
                    ("x-ms-meta-offset", &offset),
                    ("x-ms-meta-sequencenumber", &sequence_number),
                ],
            )
            .await
            .map_err(azure_error)?;
        Ok(())
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
