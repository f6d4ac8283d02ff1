//! The client's typed errors: a service answer that is not a success (with everything the
//! service said about it), and the transport, configuration and decoding failures around it.

use std::time::Duration;

use cosmos_wire::status::{Disposition, disposition};

/// An error answer of the service: HTTP status, substatus, activity id, RU charge and message.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceError {
    /// HTTP status.
    pub status: u16,
    /// `x-ms-substatus`, 0 when absent.
    pub substatus: u32,
    /// `x-ms-activity-id`, for support and logs.
    pub activity_id: Option<String>,
    /// RU the failed request cost.
    pub request_charge: f64,
    /// `x-ms-retry-after-ms`, on 429.
    pub retry_after: Option<Duration>,
    /// The `message` of the error body, or the body itself when it is not the usual JSON.
    pub message: String,
}

/// Errors of the Cosmos DB client.
#[derive(Debug, thiserror::Error)]
pub enum CosmosError {
    /// The service answered with an error status.
    #[error(
        "Cosmos DB answered {} (substatus {}, activity {}): {}",
        .0.status, .0.substatus, .0.activity_id.as_deref().unwrap_or("-"), .0.message
    )]
    Service(ServiceError),
    /// The request did not complete within the configured request timeout.
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    /// Connecting, sending or receiving failed.
    #[error("transport error: {0}")]
    Transport(#[source] reqwest::Error),
    /// A response body could not be decoded.
    #[error("cannot decode the {what} response: {source}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// The service's answer breaks the protocol (e.g. a batch result count that does not match).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// A setting is wrong; the message says what to fix.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A name (database, container or document id) that no URL can address: `.` or `..`
    /// name the resource above it once a URL is resolved. Refused before anything is sent.
    #[error("the name in {0} is . or .., which would address another resource")]
    InvalidName(String),
    /// The token credential failed to produce a token.
    #[error("credential failed: {0}")]
    Credential(String),
}

impl CosmosError {
    /// The HTTP status, for service errors.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Service(e) => Some(e.status),
            _ => None,
        }
    }

    /// The substatus, for service errors (0 when none).
    pub fn substatus(&self) -> u32 {
        match self {
            Self::Service(e) => e.substatus,
            _ => 0,
        }
    }

    /// Whether the resource does not exist (404).
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// Whether the partition key range a request named split or moved (410, substatus
    /// 1002 and the like): the request goes to the range's children.
    pub fn is_range_gone(&self) -> bool {
        matches!(self.disposition(), Disposition::RangeGone)
    }

    /// Whether it already exists (409).
    pub fn is_conflict(&self) -> bool {
        self.status() == Some(409)
    }

    /// Whether an ETag or patch condition did not hold (412).
    pub fn is_precondition_failed(&self) -> bool {
        self.status() == Some(412)
    }

    /// What a retry policy should do with this error.
    pub(crate) fn disposition(&self) -> Disposition {
        match self {
            Self::Service(e) => disposition(e.status, e.substatus),
            Self::Timeout(_) => Disposition::Transient,
            // A connection that broke may not have delivered the request: worth another try.
            Self::Transport(e) if !e.is_builder() => Disposition::Transient,
            _ => Disposition::Permanent,
        }
    }
}
