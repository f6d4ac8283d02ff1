//! A local Azure IoT Hub for development and tests, held to Microsoft's own SDKs.
//!
//! Devices connect over MQTT 3.1.1 on TLS (or on WebSockets at `/$iothub/websocket`) with a
//! SAS token or a registered X.509 certificate; every accepted message is routed to one
//! partition of the built-in Event Hubs-compatible endpoint, which consumers read over AMQP 1.0
//! (CBS, management, partition receivers with filters and owner levels).
//!
//! ```no_run
//! # async fn demo() -> Result<(), hub_sim::HubError> {
//! let mut config = hub_sim::HubConfig::new("/tmp/hub-state");
//! config.devices = 2; // device-0 and device-1, their connection strings in devices.txt
//! let hub = hub_sim::HubSim::start(config).await?;
//! println!("devices on {}, events at {}", hub.mqtt_addr(), hub.eventhub_connection_string());
//! hub.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Devices have twins and answer direct methods (`src/hub/twin/`): over MQTT on their
//! `$iothub/` topics, and for the solution over the REST API on the HTTPS port.
//!
//! Registering devices reach a local Device Provisioning Service on the same listeners
//! (`src/dps/`), which assigns them to this hub or to other hubs of the process linked to it.
//!
//! Modules: `registry` (devices), `sas` (tokens), `tls` (the CA and certificates),
//! `mqtt` (the device side), `hub/twin` (twins, direct methods, the service REST API,
//! routed events), `dps` (provisioning), `partitions` (the built-in endpoint's stream), `amqp` (the
//! consumer side), `faults`, `stats`, `state_dir` (the files kept across starts).
//! They are private; the root re-exports what the binary, the tests and the other crates use.
//!
//! The cargo feature `test-support` (off by default) adds the calls only tests make: devices,
//! enrollments and linked hubs set up directly, twins and direct methods from the service side,
//! role assignments, the AMQP side stopped and started, and fault switches.

mod admin;
mod amqp;
mod dps;
mod faults;
mod hub;
mod mqtt;
mod mqtt_codec;
mod partitions;
mod registry;
mod sas;
mod sim;
mod state_dir;
mod stats;
mod tls;

pub use amqp::entra::{EVENTHUBS_AUDIENCE, EntraTrust, EventHubsRole};
pub use dps::enrollment::{Enrollments, derive_device_key};
pub use dps::{Allocation, EnrollmentId};
use hub::twin;
pub use partitions::disk::DEFAULT_SEGMENT_BYTES;
pub use partitions::{AuthMethod, DataDir, Event, Incoming, MessageSource, Retention, stable_hash};
pub use registry::Registry;
pub use sas::{SasToken, make_token, new_key, now_secs};
pub use sim::{HubConfig, HubError, HubSim};
pub use state_dir::{device_connection_string, ensure_dir};
pub use stats::Stats;
pub use tls::{Ca, thumbprint};
pub use twin::events::Route;
pub use twin::methods::{MethodError, MethodResponse, MethodTimeouts};
pub use twin::store::TwinError;
