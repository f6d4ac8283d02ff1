//! Small, I/O-free pieces that the project's network clients and local stand-ins share, so
//! that each is written once:
//! - [`backoff`]: exponential backoff with jitter, and a server's retry-after, for every
//!   reconnect and retry (the agent's link and sources, the writer's MQTT source, the Cosmos
//!   client);
//! - [`connection_string`]: the `Key=Value;...` parts of Azure connection strings, under the
//!   agent's device string and the writer's Event Hubs string;
//! - [`uri`]: percent-encoding as JavaScript's `encodeURIComponent` does it, which the Azure
//!   SDKs apply to Cosmos DB authorization headers and ids and to IoT Hub and Event Hubs SAS
//!   tokens.

pub mod backoff;
pub mod connection_string;
pub mod uri;
