//! A Cosmos DB (NoSQL API) REST client on reqwest (rustls) and tokio, built for write-heavy
//! ingestion:
//! - the account client ([`CosmosClient`]), authorized by the master key or Entra ID tokens
//!   ([`Credential`]), one connection pool, one retry loop every request goes through
//!   ([`RetryPolicy`]), and the priority level its requests carry ([`Priority`]);
//! - a container ([`ContainerClient`]): its setup (hash v2 partition key, spatial index,
//!   TTL), its partition key ranges ([`RangeMap`]), point operations with ETag preconditions on
//!   any [`PartitionKey`] (a string or the undefined key);
//! - the partition-aware bulk writer ([`BulkWriter`]): per-range AIMD concurrency, retries of
//!   every transient per-operation failure, and one final [`Outcome`] per operation;
//! - queries on one partition or fanned out over every range with a bounded degree of
//!   parallelism ([`QueryScope`], [`QueryOptions`]), and reads that report their RU, calls and
//!   429s ([`ReadCost`]).
//!
//! The wire format itself (signatures, EPK hashing, batch bodies, resource bodies) lives in
//! `cosmos-wire`, shared with the local endpoint.

mod bulk;
mod change_feed;
mod client;
mod container;
mod credential;
mod error;
mod fanout;
mod partition_key;
mod query;
mod ranges;
mod request;
mod retry;

pub use bulk::{
    BulkClosed, BulkConfig, BulkOperation, BulkOutcomes, BulkStats, BulkWriter, FinalError,
    Outcome, RangeStats,
};
pub use change_feed::{FeedPage, FeedPosition};
pub use client::{CosmosClient, CosmosConfig};
pub use container::{ContainerClient, ContainerSetup, ReadResponse, WriteResponse};
pub use cosmos_wire::auth::MasterKey;
pub use cosmos_wire::batch::OperationType;
pub use cosmos_wire::priority::Priority;
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
