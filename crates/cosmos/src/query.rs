//! SQL queries: on one logical partition, or fanned out to every partition key range in
//! parallel, each followed through its continuation pages, and merged. RU and calls are
//! counted per query.
//!
//! The fan-out concatenates the ranges' results in range order: `ORDER BY`, `TOP`, `DISTINCT`
//! and aggregates apply within each range only.

use bytes::Bytes;
use cosmos_wire::batch::partition_key_json;
use cosmos_wire::headers;
use cosmos_wire::resources::{DocumentFeed, QueryRequest};
use cosmos_wire::status::{Disposition, disposition};
use reqwest::Method;
use serde_json::Value;

use crate::client::RequestSpec;
use crate::container::decode;
use crate::{ContainerClient, CosmosError};

/// Where a query runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryScope {
    /// The one logical partition of this key.
    Partition(String),
    /// Every partition key range, in parallel.
    AllRanges,
}

/// The merged result of a query.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueryResponse {
    /// The documents (or projected values).
    pub documents: Vec<Value>,
    /// RU the query cost over all its calls.
    pub request_charge: f64,
    /// HTTP requests the query took (pages times ranges, retries included).
    pub calls: u32,
}

impl QueryResponse {
    fn absorb(&mut self, other: QueryResponse) {
        self.documents.extend(other.documents);
        self.request_charge += other.request_charge;
        self.calls += other.calls;
    }
}

/// How often a fan-out is restarted after its range map turned out stale.
const MAX_RANGE_REFRESHES: usize = 3;

enum Target<'a> {
    Partition(&'a str),
    Range(&'a str),
}

impl ContainerClient {
    /// Runs a query on one partition or on all ranges.
    pub async fn query(
        &self,
        query: &QueryRequest,
        scope: QueryScope,
    ) -> Result<QueryResponse, CosmosError> {
        let body = Bytes::from(serde_json::to_vec(query).expect("a query serializes"));
        match scope {
            QueryScope::Partition(key) => self.query_pages(&body, Target::Partition(&key)).await,
            QueryScope::AllRanges => self.query_all_ranges(&body).await,
        }
    }

    async fn query_all_ranges(&self, body: &Bytes) -> Result<QueryResponse, CosmosError> {
        let mut map = self.range_map().await?;
        let mut total = QueryResponse::default();
        for _ in 0..MAX_RANGE_REFRESHES {
            let pages = futures::future::join_all(
                map.ranges()
                    .iter()
                    .map(|range| self.query_pages(body, Target::Range(&range.id))),
            )
            .await;
            let mut merged = QueryResponse::default();
            let mut stale = None;
            for page in pages {
                match page {
                    Ok(response) => merged.absorb(response),
                    Err(e) if e.disposition() == Disposition::RangeGone => stale = Some(e),
                    Err(e) => return Err(e),
                }
            }
            if stale.is_none() {
                total.absorb(merged);
                return Ok(total);
            }
            // Count what the discarded attempt cost, then run it again on the new ranges.
            total.request_charge += merged.request_charge;
            total.calls += merged.calls;
            map = self.refresh_range_map(Some(&map)).await?;
        }
        Err(CosmosError::Protocol(format!(
            "partition key ranges kept moving during the query ({MAX_RANGE_REFRESHES} refreshes)"
        )))
    }

    async fn query_pages(
        &self,
        body: &Bytes,
        target: Target<'_>,
    ) -> Result<QueryResponse, CosmosError> {
        let mut result = QueryResponse::default();
        let mut continuation: Option<String> = None;
        loop {
            let mut spec = RequestSpec::new(Method::POST, self.docs_path())
                .header(headers::IS_QUERY, "True")?
                .header("content-type", "application/query+json")?
                .body(body.clone())
                .idempotent(true);
            spec = match target {
                Target::Partition(key) => {
                    spec.header(headers::PARTITION_KEY, &partition_key_json(key))?
                }
                Target::Range(id) => spec
                    .header(headers::PARTITION_KEY_RANGE_ID, id)?
                    .header(headers::QUERY_ENABLE_CROSS_PARTITION, "True")?
                    .retry_range_gone(false),
            };
            if let Some(token) = &continuation {
                spec = spec.header(headers::CONTINUATION, token)?;
            }
            let response = self.client().execute(&spec).await?;
            result.calls += 1;
            result.request_charge += response.request_charge;
            if disposition(response.status, response.substatus) != Disposition::Success {
                return Err(response.to_error());
            }
            let page: DocumentFeed = decode(&response.body, "query")?;
            result.documents.extend(page.documents);
            match response.continuation {
                Some(token) if !token.is_empty() => continuation = Some(token),
                _ => return Ok(result),
            }
        }
    }
}
