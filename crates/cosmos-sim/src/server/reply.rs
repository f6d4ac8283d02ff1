//! A response under construction and how it goes on the wire: the service's error body and
//! headers (`x-ms-request-charge` on every response, activity id, session token, substatus,
//! retry-after).

use crate::document_ops::Outcome;
use crate::ru;
use bytes::Bytes;
use cosmos_wire::headers as h;
use cosmos_wire::resources::ErrorBody;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// A response under construction.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) substatus: u32,
    charge: f64,
    pub(super) retry_after_ms: Option<u64>,
    headers: Vec<(&'static str, String)>,
    pub(super) body: Vec<u8>,
}

impl Reply {
    /// A JSON body, as it is.
    pub(super) fn json(status: u16, charge: f64, body: Vec<u8>) -> Self {
        Self {
            status,
            substatus: 0,
            charge,
            retry_after_ms: None,
            headers: Vec::new(),
            body,
        }
    }

    /// A JSON value.
    pub(super) fn value(status: u16, charge: f64, body: &Value) -> Self {
        Self::json(
            status,
            charge,
            serde_json::to_vec(body).expect("a JSON value serializes"),
        )
    }

    /// The service's error body: `{"code","message"}`.
    pub(super) fn error(status: u16, substatus: u32, message: impl Into<String>) -> Self {
        let body = ErrorBody {
            code: code_name(status).to_string(),
            message: message.into(),
        };
        Self {
            substatus,
            ..Self::json(
                status,
                0.0,
                serde_json::to_vec(&body).expect("serializable"),
            )
        }
    }

    /// The answer to one document operation: its document and ETag, or its error.
    pub(super) fn from_outcome(o: &Outcome) -> Self {
        if o.is_success() {
            let mut r = Self::json(
                o.status,
                o.charge,
                o.doc
                    .as_ref()
                    .map(|d| d.json().to_vec())
                    .unwrap_or_default(),
            );
            if let Some(d) = &o.doc {
                r.headers.push((h::ETAG, d.etag().to_string()));
            }
            return r;
        }
        let mut r = Self::error(o.status, o.substatus, o.message.clone().unwrap_or_default());
        r.charge = o.charge;
        r.retry_after_ms = o.retry_after.map(ru::retry_after_ms);
        r
    }

    /// Adds a header.
    pub(super) fn header(mut self, name: &'static str, value: String) -> Self {
        self.headers.push((name, value));
        self
    }

    /// The HTTP response.
    pub(super) fn into_response(self) -> Response<Full<Bytes>> {
        static ACTIVITY: AtomicU64 = AtomicU64::new(1);
        let mut resp = Response::new(Full::new(Bytes::from(self.body)));
        *resp.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let hm = resp.headers_mut();
        hm.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let mut charge = String::with_capacity(12);
        let _ = write!(charge, "{}", self.charge);
        hm.insert(
            h::REQUEST_CHARGE,
            HeaderValue::from_str(&charge).expect("a number is a valid header"),
        );
        let activity = ACTIVITY.fetch_add(1, Ordering::Relaxed);
        hm.insert(
            h::ACTIVITY_ID,
            HeaderValue::from_str(&format!("00000000-0000-0000-0000-{activity:012x}"))
                .expect("valid"),
        );
        hm.insert(h::SESSION_TOKEN, HeaderValue::from_static("0:-1#1"));
        if self.substatus != 0 {
            hm.insert(h::SUBSTATUS, HeaderValue::from(self.substatus));
        }
        if let Some(ms) = self.retry_after_ms {
            hm.insert(h::RETRY_AFTER_MS, HeaderValue::from(ms));
        }
        for (name, value) in self.headers {
            if let Ok(v) = HeaderValue::from_str(&value) {
                hm.insert(name, v);
            }
        }
        resp
    }
}

fn code_name(status: u16) -> &'static str {
    match status {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        408 => "RequestTimeout",
        409 => "Conflict",
        410 => "Gone",
        412 => "PreconditionFailed",
        413 => "RequestEntityTooLarge",
        424 => "FailedDependency",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalServerError",
    }
}
