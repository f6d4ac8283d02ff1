//! A local Cosmos DB (NoSQL API) endpoint that behaves like the service where it matters for
//! this project: master-key signatures, Entra ID tokens with data-plane roles, partition key
//! ranges split over the EPK space, request units charged per operation, a per-partition RU budget that throttles with 429/3200,
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
//! The crate's surface is the running endpoint ([`CosmosSim`], built by [`CosmosSimBuilder`]),
//! the Entra ID it trusts ([`EntraTrust`], [`DataRole`]), its faults ([`FaultSettings`]), what it has served ([`Stats`]) and its errors ([`SimError`]);
//! the REST API it serves is described in the README.

mod document_ops;
mod endpoint_state;
mod entra;
mod error;
mod faults;
mod query;
mod raw;
mod ru;
mod server;
mod sim;
mod stats;
mod store;
mod value_patch;

pub use entra::{COSMOS_AUDIENCE, DataRole, EntraTrust};
pub use error::SimError;
pub use faults::{FaultSettings, MAX_DOCUMENT_BYTES};
pub use sim::{CosmosSim, CosmosSimBuilder};
pub use stats::{ContainerStats, PartitionStats, Stats};
