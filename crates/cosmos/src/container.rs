//! One container: setting it up, reading its definition and partition key ranges, and the
//! point operations on its documents (create, upsert, read, replace, patch, delete) with ETag
//! preconditions. Point operations take any [`PartitionKey`]: a string (`&str` converts) or
//! the undefined key of documents that lack the container's key path.

use std::sync::Arc;

use bytes::Bytes;
use cosmos_wire::headers;
use cosmos_wire::resources::{
    ContainerProperties, PartitionKeyDefinition, PartitionKeyRange, PartitionKeyRanges,
    PatchRequest,
};
use reqwest::Method;
use serde_json::json;

use crate::ranges::RangeMap;
use crate::request::{RawResponse, RequestSpec, path_segment};
use crate::{CosmosClient, CosmosError, PartitionKey, Priority};

/// How to create a container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSetup {
    /// The partition key path, e.g. `/deviceId` (hash version 2).
    pub partition_key_path: String,
    /// Path of a GeoJSON property to index spatially (Point and Polygon), e.g. `/location`,
    /// in the default indexing policy (every path indexed).
    pub location_path: Option<String>,
    /// An indexing policy to create the container with instead of the default one.
    pub indexing_policy: Option<serde_json::Value>,
    /// Default time to live of documents, in seconds (-1: expiry on, no default).
    pub default_ttl: Option<i64>,
    /// Provisioned throughput (RU/s) of the container.
    pub throughput: Option<u32>,
}

impl ContainerSetup {
    /// A container keyed on `partition_key_path`, with no spatial index, no expiry and the
    /// database's throughput.
    pub fn new(partition_key_path: impl Into<String>) -> Self {
        Self {
            partition_key_path: partition_key_path.into(),
            location_path: None,
            indexing_policy: None,
            default_ttl: None,
            throughput: None,
        }
    }

    /// The same, created with `policy` as its indexing policy.
    pub fn with_indexing_policy(self, policy: serde_json::Value) -> Self {
        Self {
            indexing_policy: Some(policy),
            ..self
        }
    }

    /// The container body this setup creates.
    pub(crate) fn properties(&self, id: &str) -> ContainerProperties {
        let mut policy = json!({
            "indexingMode": "consistent",
            "automatic": true,
            "includedPaths": [{ "path": "/*" }],
            "excludedPaths": [{ "path": "/\"_etag\"/?" }],
        });
        if let Some(location) = &self.location_path {
            policy["spatialIndexes"] = json!([{
                "path": format!("{}/*", location.trim_end_matches('/')),
                "types": ["Point", "Polygon"],
            }]);
        }
        ContainerProperties {
            id: id.to_string(),
            partition_key: PartitionKeyDefinition::hash_v2(&self.partition_key_path),
            indexing_policy: Some(self.indexing_policy.clone().unwrap_or(policy)),
            default_ttl: self.default_ttl,
        }
    }
}

/// The answer to a write (create, upsert, replace, patch, delete).
#[derive(Debug, Clone, PartialEq)]
pub struct WriteResponse {
    /// HTTP status (200, 201 or 204).
    pub status: u16,
    /// The document's new ETag (none after a delete).
    pub etag: Option<String>,
    /// RU the write cost.
    pub request_charge: f64,
    /// The document as stored (empty after a delete).
    pub body: Bytes,
}

/// The answer to a point read.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadResponse {
    /// The document's ETag.
    pub etag: Option<String>,
    /// RU the read cost.
    pub request_charge: f64,
    /// The document.
    pub body: Bytes,
}

impl ReadResponse {
    /// Decodes the document.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, CosmosError> {
        serde_json::from_slice(&self.body).map_err(|source| CosmosError::Decode {
            what: "document",
            source,
        })
    }
}

impl From<RawResponse> for ReadResponse {
    fn from(r: RawResponse) -> Self {
        Self {
            etag: r.etag,
            request_charge: r.request_charge,
            body: r.body,
        }
    }
}

impl From<RawResponse> for WriteResponse {
    fn from(r: RawResponse) -> Self {
        Self {
            status: r.status,
            etag: r.etag,
            request_charge: r.request_charge,
            body: r.body,
        }
    }
}

impl CosmosClient {
    /// A client for one container.
    pub fn container(&self, database: &str, container: &str) -> ContainerClient {
        ContainerClient::new(self.clone(), database, container)
    }
}

/// A client for one container. Cheap to clone; clones share the partition key range cache.
#[derive(Debug, Clone)]
pub struct ContainerClient {
    client: CosmosClient,
    database: String,
    container: String,
    /// `/dbs/{db}/colls/{coll}`, percent-encoded.
    coll_path: Arc<str>,
    ranges: Arc<tokio::sync::Mutex<Option<Arc<RangeMap>>>>,
}

impl ContainerClient {
    fn new(client: CosmosClient, database: &str, container: &str) -> Self {
        let coll_path = format!(
            "/dbs/{}/colls/{}",
            path_segment(database),
            path_segment(container)
        );
        Self {
            client,
            database: database.to_string(),
            container: container.to_string(),
            coll_path: coll_path.into(),
            ranges: Arc::default(),
        }
    }

    /// This container through [`CosmosClient::with_priority`]: every request it sends (and
    /// its clones send) is marked `priority`; the range cache is shared.
    pub fn with_priority(&self, priority: Priority) -> Self {
        Self {
            client: self.client.with_priority(priority),
            ..self.clone()
        }
    }

    /// This container through [`CosmosClient::with_throttle_wait`].
    pub fn with_throttle_wait(&self, wait: std::time::Duration) -> Self {
        Self {
            client: self.client.with_throttle_wait(wait),
            ..self.clone()
        }
    }

    /// The account client.
    pub fn client(&self) -> &CosmosClient {
        &self.client
    }

    /// The database's name.
    pub fn database(&self) -> &str {
        &self.database
    }

    pub(crate) fn docs_path(&self) -> String {
        format!("{}/docs", self.coll_path)
    }

    pub(crate) fn doc_path(&self, id: &str) -> String {
        format!("{}/docs/{}", self.coll_path, path_segment(id))
    }

    /// Creates the container unless it exists, and the database first when that is missing;
    /// returns the container's properties (the existing ones if it existed: compare their
    /// partition key with what you expect).
    pub async fn create_if_missing(
        &self,
        setup: &ContainerSetup,
    ) -> Result<ContainerProperties, CosmosError> {
        let body = serde_json::to_vec(&setup.properties(&self.container))
            .expect("container properties serialize");
        let mut spec = RequestSpec::new(
            Method::POST,
            format!("/dbs/{}/colls", path_segment(&self.database)),
        )
        .body(body)
        .idempotent(true);
        if let Some(ru) = setup.throughput {
            spec = spec.header(headers::OFFER_THROUGHPUT, &ru.to_string())?;
        }
        let mut response = self.client.execute(&spec).await?;
        if response.status == 404 {
            // The database is missing: one more request, only on the first start.
            self.client
                .create_database_if_missing(&self.database)
                .await?;
            response = self.client.execute(&spec).await?;
        }
        if response.status == 409 {
            return self.properties().await;
        }
        decode(&response.into_result()?.body, "container")
    }

    /// The container's properties (404 if it does not exist: see [`CosmosError::is_not_found`]).
    pub async fn properties(&self) -> Result<ContainerProperties, CosmosError> {
        let spec = RequestSpec::new(Method::GET, self.coll_path.to_string());
        let response = self.client.execute(&spec).await?.into_result()?;
        decode(&response.body, "container")
    }

    /// All partition key ranges of the container, following continuation pages.
    pub(crate) async fn partition_key_ranges(&self) -> Result<Vec<PartitionKeyRange>, CosmosError> {
        let mut ranges = Vec::new();
        let mut continuation: Option<String> = None;
        loop {
            let mut spec = RequestSpec::new(Method::GET, format!("{}/pkranges", self.coll_path));
            if let Some(token) = &continuation {
                spec = spec.header(headers::CONTINUATION, token)?;
            }
            let response = self.client.execute(&spec).await?.into_result()?;
            let page: PartitionKeyRanges = decode(&response.body, "partition key ranges")?;
            ranges.extend(page.ranges);
            match response.continuation {
                Some(token) if !token.is_empty() => continuation = Some(token),
                _ => return Ok(ranges),
            }
        }
    }

    /// The cached range map, fetched on first use.
    pub async fn range_map(&self) -> Result<Arc<RangeMap>, CosmosError> {
        let mut cached = self.ranges.lock().await;
        if let Some(map) = &*cached {
            return Ok(map.clone());
        }
        let map = Arc::new(RangeMap::new(self.partition_key_ranges().await?)?);
        *cached = Some(map.clone());
        Ok(map)
    }

    /// Fetches the range map again (after a split).
    pub async fn refresh_ranges(&self) -> Result<Arc<RangeMap>, CosmosError> {
        self.refresh_range_map(None).await
    }

    /// Fetches the range map again (after a split), unless another caller already replaced
    /// the map `stale` since it was read.
    pub(crate) async fn refresh_range_map(
        &self,
        stale: Option<&Arc<RangeMap>>,
    ) -> Result<Arc<RangeMap>, CosmosError> {
        let mut cached = self.ranges.lock().await;
        if let (Some(current), Some(stale)) = (&*cached, stale)
            && !Arc::ptr_eq(current, stale)
        {
            return Ok(current.clone());
        }
        let map = Arc::new(RangeMap::new(self.partition_key_ranges().await?)?);
        tracing::info!(container = %self.container, ranges = map.len(), "partition key ranges refreshed");
        *cached = Some(map.clone());
        Ok(map)
    }

    pub(crate) fn document_request(
        &self,
        method: Method,
        path: String,
        partition_key: PartitionKey,
        if_match: Option<&str>,
    ) -> Result<RequestSpec, CosmosError> {
        let mut spec = RequestSpec::new(method, path)
            .header(headers::PARTITION_KEY, &partition_key.to_json())?;
        if let Some(etag) = if_match {
            spec = spec.header(headers::IF_MATCH, etag)?;
        }
        Ok(spec)
    }

    async fn write(&self, spec: RequestSpec) -> Result<WriteResponse, CosmosError> {
        Ok(self.client.execute(&spec).await?.into_result()?.into())
    }

    /// Creates or replaces a document (`doc` is its JSON, with `id` and the partition key;
    /// without the key for [`PartitionKey::Undefined`]).
    pub async fn upsert(
        &self,
        partition_key: impl Into<PartitionKey>,
        doc: &[u8],
    ) -> Result<WriteResponse, CosmosError> {
        let spec = self
            .document_request(Method::POST, self.docs_path(), partition_key.into(), None)?
            .header(headers::IS_UPSERT, "True")?
            .body(Bytes::copy_from_slice(doc))
            .idempotent(true);
        self.write(spec).await
    }

    /// Creates a document; 409 if one with its id exists.
    pub async fn create(
        &self,
        partition_key: impl Into<PartitionKey>,
        doc: &[u8],
    ) -> Result<WriteResponse, CosmosError> {
        let spec = self
            .document_request(Method::POST, self.docs_path(), partition_key.into(), None)?
            .body(Bytes::copy_from_slice(doc));
        self.write(spec).await
    }

    /// Replaces an existing document; 404 if it does not exist, 412 if `if_match` does not
    /// match its ETag.
    pub async fn replace(
        &self,
        partition_key: impl Into<PartitionKey>,
        id: &str,
        doc: &[u8],
        if_match: Option<&str>,
    ) -> Result<WriteResponse, CosmosError> {
        let spec = self
            .document_request(
                Method::PUT,
                self.doc_path(id),
                partition_key.into(),
                if_match,
            )?
            .body(Bytes::copy_from_slice(doc));
        self.write(spec).await
    }

    /// Applies patch operations; 404 if the document does not exist, 412 if `if_match` or
    /// the request's condition does not hold.
    pub async fn patch(
        &self,
        partition_key: impl Into<PartitionKey>,
        id: &str,
        patch: &PatchRequest,
        if_match: Option<&str>,
    ) -> Result<WriteResponse, CosmosError> {
        let body = serde_json::to_vec(patch).expect("a patch request serializes");
        let spec = self
            .document_request(
                Method::PATCH,
                self.doc_path(id),
                partition_key.into(),
                if_match,
            )?
            .header("content-type", "application/json_patch+json")?
            .body(body);
        self.write(spec).await
    }

    /// Deletes a document; 404 if it does not exist.
    pub async fn delete(
        &self,
        partition_key: impl Into<PartitionKey>,
        id: &str,
        if_match: Option<&str>,
    ) -> Result<WriteResponse, CosmosError> {
        let spec = self.document_request(
            Method::DELETE,
            self.doc_path(id),
            partition_key.into(),
            if_match,
        )?;
        self.write(spec).await
    }

    /// Reads a document; `None` if it does not exist.
    pub async fn read(
        &self,
        partition_key: impl Into<PartitionKey>,
        id: &str,
    ) -> Result<Option<ReadResponse>, CosmosError> {
        let spec =
            self.document_request(Method::GET, self.doc_path(id), partition_key.into(), None)?;
        let response = self.client.execute(&spec).await?;
        if response.status == 404 {
            return Ok(None);
        }
        Ok(Some(response.into_result()?.into()))
    }
}

/// Decodes a JSON response body.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    body: &[u8],
    what: &'static str,
) -> Result<T, CosmosError> {
    serde_json::from_slice(body).map_err(|source| CosmosError::Decode { what, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_builds_hash_v2_key_spatial_index_and_ttl() {
        let setup = ContainerSetup {
            default_ttl: Some(86_400),
            location_path: Some("/location".into()),
            ..ContainerSetup::new("/deviceId")
        };
        let json = serde_json::to_value(setup.properties("positions")).unwrap();
        assert_eq!(json["id"], "positions");
        assert_eq!(
            json["partitionKey"],
            json!({"paths":["/deviceId"],"kind":"Hash","version":2})
        );
        assert_eq!(
            json["indexingPolicy"]["spatialIndexes"],
            json!([{"path":"/location/*","types":["Point","Polygon"]}])
        );
        assert_eq!(json["defaultTtl"], 86_400);

        let plain = ContainerSetup {
            location_path: None,
            default_ttl: None,
            ..setup.clone()
        };
        let json = serde_json::to_value(plain.properties("p")).unwrap();
        assert!(json["indexingPolicy"].get("spatialIndexes").is_none());
        assert!(json.get("defaultTtl").is_none());

        let policy = json!({"indexingMode": "none"});
        let json = serde_json::to_value(setup.with_indexing_policy(policy.clone()).properties("p"))
            .unwrap();
        assert_eq!(json["indexingPolicy"], policy);
    }
}
