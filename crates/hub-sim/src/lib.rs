//! A local Azure IoT Hub for development and tests, held to Microsoft's own SDKs.
//!
//! Devices connect over MQTT 3.1.1 on TLS (or on WebSockets at `/$iothub/websocket`) with a
//! SAS token or a registered X.509 certificate; every accepted message is routed to one
//! partition of the built-in Event Hubs-compatible endpoint, which consumers read over AMQP 1.0
//! (CBS, management, partition receivers with filters and owner levels).
//!
//! ```no_run
//! # async fn demo() -> Result<(), hub_sim::HubError> {
//! let hub = hub_sim::HubSim::start(hub_sim::HubConfig::new("/tmp/hub-state")).await?;
//! let connection_string = hub.add_device("drone-1")?;
//! println!("{connection_string} on {}", hub.mqtt_addr());
//! hub.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Modules: [`registry`] (devices), [`sas`] (tokens), [`tls`] (the CA and certificates),
//! [`mqtt`] (the device side), [`routing`] (partitions), [`amqp`] (the consumer side), [`faults`], [`stats`], [`state`]
//! (the state directory).

mod admin;
pub mod amqp;
pub mod faults;
pub mod mqtt;
pub mod registry;
pub mod routing;
pub mod sas;
mod shared;
mod sim;
pub mod state;
pub mod stats;
pub mod tls;

pub use faults::FaultSettings;
pub use sim::{HubConfig, HubError, HubSim};
pub use stats::Stats;
