//! The Cosmos DB (NoSQL API) REST wire protocol, shared by the client (`cosmos`) and the local
//! endpoint (`cosmos-sim`) so that both sides speak from one definition.
//!
//! It owns the pieces both sides must agree on byte for byte, and does no I/O:
//! - [`auth`]: the master-key signature, the `Authorization` header, and how a request path
//!   maps to the resource type and link that are signed;
//! - [`epk`]: the effective partition key (hash version 2) and partition key range arithmetic;
//! - [`batch`]: the JSON of transactional batch and bulk requests and of their per-operation results;
//! - [`priority`]: the priority level of priority-based execution;
//! - [`headers`] and [`status`]: header names, and the status and substatus codes clients act on;
//! - [`resources`]: account, database, container and partition key range bodies;
//! - [`indexing`] and [`charges`]: a container's indexing policy, the indexed terms it makes
//!   of a document, and what the service charges a write for them.

pub mod auth;
pub mod batch;
pub mod charges;
pub mod epk;
pub mod headers;
pub mod indexing;
pub mod priority;
pub mod resources;
pub mod status;

/// The REST API version this project speaks (the one current SDKs send).
pub const API_VERSION: &str = "2020-07-15";

/// Formats a time as the RFC 1123 date that `x-ms-date` carries, e.g. `Thu, 27 Apr 2017 00:51:12 GMT`.
pub fn http_date(time: std::time::SystemTime) -> String {
    httpdate::fmt_http_date(time)
}
