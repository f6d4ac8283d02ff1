//! The cloud writer: consumes drone positions from IoT Hub's Event Hubs-compatible
//! endpoint or an MQTT broker, drops stale and bad ones (counted, never silently), and
//! writes each drone's newest position into Cosmos DB as a GeoJSON document.
//!
//! Layout (source → pipeline → sink):
//! - [`source`]: the [`source::Source`] trait, MQTT ([`source::mqtt`]) and the Event Hubs
//!   adapter ([`source::eventhubs`]); in-order acknowledgement.
//! - [`pipeline`]: decode, identity check, staleness, coalescing, rejects; the [`pipeline::Sink`]
//!   contract it hands positions ([`pipeline::PositionWrite`]) to.
//! - [`sink`]: the Cosmos DB bulk sink and its newest-wins state machine.
//! - [`metrics`], [`config`], [`writer`] (the running component), [`import`] (backfill).
//!
//! Running a writer in-process:
//! ```no_run
//! # async fn demo(config: cloud_writer::config::WriterConfig) -> anyhow::Result<()> {
//! let writer = cloud_writer::Writer::start(config).await?;
//! // ... later:
//! writer.shutdown();
//! let counts = writer.wait().await?;
//! println!("{} written", counts.written);
//! # Ok(()) }
//! ```

pub mod config;
pub mod import;
pub mod metrics;
pub mod pipeline;
pub mod sink;
pub mod source;
pub mod writer;

pub use config::{Settings, WriterConfig};
pub use metrics::{Counts, DropReason, HoldReason, Metrics, UnknownDropReason};
pub use writer::{RunError, StartError, Writer};
