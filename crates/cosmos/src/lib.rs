//! A Cosmos DB (NoSQL API) REST client on reqwest (rustls) and tokio, built for write-heavy
//! ingestion:
//! - [`client`]: the account client, master-key or Entra ID auth ([`credential`]), the shared
//!   connection pool, the retry loop every request goes through ([`retry`]); `request` is
//!   the shape of one request and its response;
//! - [`container`]: container setup (hash v2 partition key, spatial index, TTL), its definition
//!   and partition key ranges ([`ranges`]), and point operations with ETag preconditions;
//! - [`partition_key`]: partition key values, a string or the undefined key;
//! - [`bulk`]: the partition-aware bulk writer with per-range AIMD concurrency, retries of
//!   every transient per-operation failure, and one final outcome per operation;
//! - [`query`]: where a query runs and its plain answer;
//! - [`fanout`]: running queries on one partition or fanned out over every range with a
//!   bounded degree of parallelism, and reads that report their RU, calls and 429s.
//!
//! The wire format itself (signatures, EPK hashing, batch bodies, resource bodies) lives in
//! `cosmos-wire`, shared with the local endpoint.

pub mod bulk;
pub mod client;
pub mod container;
pub mod credential;
mod error;
pub mod fanout;
pub mod partition_key;
pub mod query;
pub mod ranges;
mod request;
pub mod retry;

pub use bulk::{
    BulkClosed, BulkConfig, BulkOperation, BulkOutcomes, BulkStats, BulkWriter, FinalError,
    Outcome, RangeStats,
};
pub use client::{CosmosClient, CosmosConfig};
pub use container::{ContainerClient, ContainerSetup, ReadResponse, WriteResponse};
pub use cosmos_wire::auth::MasterKey;
pub use cosmos_wire::batch::OperationType;
pub use cosmos_wire::resources::{
    ContainerProperties, PartitionKeyDefinition, PartitionKeyRange, PatchOperation, PatchRequest,
    QueryParameter, QueryRequest,
};
pub use credential::{Credential, TokenCredential};
pub use error::{CosmosError, ServiceError};
pub use fanout::{CountedQuery, QueryOptions, ReadCost, ReadFailure};
pub use partition_key::PartitionKey;
pub use query::{QueryResponse, QueryScope};
pub use ranges::RangeMap;
pub use retry::RetryPolicy;
