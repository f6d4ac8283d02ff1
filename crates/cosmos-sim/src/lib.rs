//! A local Cosmos DB (NoSQL API) endpoint that behaves like the service where it matters for
//! this project: master-key signatures, partition key ranges split over the EPK space, request
//! units charged per operation, a per-partition RU budget that throttles with 429/3200,
//! transactional and range-targeted bulk batches, conditional patch, the SQL subset with
//! spatial functions, and faults (latency, 503s, timeouts, splits, RU/s changes) switchable
//! while it runs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), cosmos_sim::SimError> {
//! let sim = cosmos_sim::CosmosSim::builder().partitions(4).ru_per_sec(10_000.0).start().await?;
//! println!("endpoint {} key {}", sim.endpoint(), sim.key());
//! sim.split_range("db", "positions", "0").ok();
//! let heat = sim.stats();
//! # drop(heat);
//! sim.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Modules: [`store`] (databases, containers, ranges, documents), [`docs`] (document
//! operations and batches), [`raw`] (the write path over raw JSON bytes), [`patch`], [`query`]
//! (SQL), [`ru`] (the RU model and budgets),
//! [`faults`], [`stats`], the HTTP server and its admin endpoints (see the README).

pub mod docs;
mod error;
pub mod faults;
pub mod patch;
pub mod query;
pub mod raw;
pub mod ru;
mod server;
mod shared;
mod sim;
pub mod stats;
pub mod store;

pub use error::SimError;
pub use faults::FaultSettings;
pub use sim::{CosmosSim, CosmosSimBuilder};
pub use stats::{ContainerStats, PartitionStats, Stats};
