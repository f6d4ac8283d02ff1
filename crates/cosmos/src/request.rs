//! The shape of one REST request and of its response, as the client sends and reads them:
//! method, percent-encoded path, headers, body and retry flags; status, substatus, charge,
//! retry-after, ETag, continuation and body; and the error a failed response becomes.

use std::time::Duration;

use bytes::Bytes;
use cosmos_wire::headers;
use cosmos_wire::resources::ErrorBody;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};

use crate::{CosmosError, ServiceError};

/// What the client needs to send one request.
#[derive(Debug, Clone)]
pub(crate) struct RequestSpec {
    pub method: Method,
    /// The URL path, with names already percent-encoded (see [`path_segment`]).
    pub path: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Option<Bytes>,
    /// Whether a timeout or broken connection may be retried (the request may have been applied).
    pub idempotent: bool,
    /// Whether a 410 range move is retried as is; not for requests aimed at a range id, which
    /// must be re-routed instead.
    pub retry_range_gone: bool,
    /// A time limit other than the client's.
    pub timeout: Option<Duration>,
}

impl RequestSpec {
    pub(crate) fn new(method: Method, path: String) -> Self {
        let idempotent = method != Method::POST && method != Method::PATCH;
        Self {
            method,
            path,
            headers: Vec::new(),
            body: None,
            idempotent,
            retry_range_gone: true,
            timeout: None,
        }
    }

    pub(crate) fn header(mut self, name: &'static str, value: &str) -> Result<Self, CosmosError> {
        let value = HeaderValue::from_str(value)
            .map_err(|_| CosmosError::Config(format!("value of header {name} is not valid")))?;
        self.headers.push((HeaderName::from_static(name), value));
        Ok(self)
    }

    pub(crate) fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = Some(body.into());
        self
    }

    pub(crate) fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    pub(crate) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    pub(crate) fn retry_range_gone(mut self, retry: bool) -> Self {
        self.retry_range_gone = retry;
        self
    }
}

/// A response whatever its status, with the headers every caller reads.
#[derive(Debug, Clone)]
pub(crate) struct RawResponse {
    pub status: u16,
    pub substatus: u32,
    pub request_charge: f64,
    pub activity_id: Option<String>,
    pub retry_after: Option<Duration>,
    pub etag: Option<String>,
    pub continuation: Option<String>,
    pub body: Bytes,
}

impl RawResponse {
    pub(crate) fn read_headers(status: StatusCode, h: &HeaderMap) -> Self {
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
        Self {
            status: status.as_u16(),
            substatus: text(headers::SUBSTATUS)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            request_charge: text(headers::REQUEST_CHARGE)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0),
            activity_id: text(headers::ACTIVITY_ID).map(str::to_string),
            retry_after: text(headers::RETRY_AFTER_MS)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .map(|ms| Duration::from_micros((ms * 1000.0) as u64)),
            etag: text(headers::ETAG).map(str::to_string),
            continuation: text(headers::CONTINUATION).map(str::to_string),
            body: Bytes::new(),
        }
    }

    /// Whether the status is a success (2xx).
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The response as a [`CosmosError`], for a non-success status.
    pub fn to_error(&self) -> CosmosError {
        let message = match serde_json::from_slice::<ErrorBody>(&self.body) {
            Ok(body) => body.message,
            Err(_) => String::from_utf8_lossy(&self.body[..self.body.len().min(512)]).into_owned(),
        };
        CosmosError::Service(ServiceError {
            status: self.status,
            substatus: self.substatus,
            activity_id: self.activity_id.clone(),
            request_charge: self.request_charge,
            retry_after: self.retry_after,
            message,
        })
    }

    /// `Ok(self)` for a success, else the error.
    pub fn into_result(self) -> Result<Self, CosmosError> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(self.to_error())
        }
    }
}

/// Percent-encodes one name (database, container, document id) for a URL path.
pub(crate) fn path_segment(name: &str) -> String {
    azure_text::uri::encode_component(name)
}
