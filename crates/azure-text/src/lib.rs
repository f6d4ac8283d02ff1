//! Text formats the Azure SDKs share, written once for the project's clients and local
//! stand-ins:
//! - [`uri`]: percent-encoding as JavaScript's `encodeURIComponent` does it, which the Azure
//!   SDKs apply to Cosmos DB authorization headers and ids and to IoT Hub and Event Hubs SAS
//!   tokens;
//! - [`connection_string`]: the `Key=Value;...` parts of Azure connection strings (IoT Hub
//!   device strings, Event Hubs strings).

pub mod connection_string;
pub mod uri;
