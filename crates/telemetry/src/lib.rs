//! Drone telemetry formats shared by the edge agent and the cloud writer. No I/O.
//!
//! - [`wire`]: the device-to-cloud JSON message (version 1), its validation and codec.
//! - [`document`]: the Cosmos DB documents (latest position, history) and the partition
//!   key path they carry.
//! - [`geo`]: great-circle distance between two positions.
//! - [`indexing`]: the indexing policy of a positions container.
//! - [`order`]: the order of one drone's positions behind every "newest wins" decision.
//! - [`staleness`]: the rule deciding whether a position is fresh enough to write.
//! - [`time`]: the RFC 3339 time form the formats read and write.

#![warn(missing_docs)]

pub mod document;
pub mod geo;
pub mod indexing;
pub mod order;
pub mod staleness;
pub mod time;
pub mod wire;

pub use document::{DocumentLayout, PartitionKeyPath};
pub use indexing::indexing_policy;
pub use order::PositionOrder;
pub use staleness::{Freshness, StalenessPolicy};
pub use wire::{FixType, Gnss, Invalid, Position};
