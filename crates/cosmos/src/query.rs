//! SQL queries: where one runs ([`QueryScope`]: one logical partition, or every partition key
//! range) and its plain answer ([`QueryResponse`]: the documents, RU and calls).
//! [`ContainerClient::query`](crate::ContainerClient::query) runs one through the fan-out of
//! [`crate::fanout`], which concatenates the ranges' results in range order: `ORDER BY`, `TOP`,
//! `DISTINCT` and aggregates apply within each range only.

use serde_json::Value;

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
