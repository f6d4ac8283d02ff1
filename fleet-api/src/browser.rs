//! The browser's rules: which other origins may call the API (CORS: none unless
//! `API_CORS_ORIGINS` lists them) and the security headers every answer carries.
//!
//! Every answer says `nosniff`, may not be framed, sends no referrer, is not stored in
//! caches (answers hold positions) and, unless the route set its own (the map's), has a
//! content security policy that allows nothing: a JSON answer opened in a browser runs
//! nothing. Strict-Transport-Security is left to the TLS terminator in front of the API.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use tower_http::cors::CorsLayer;

use crate::access::API_KEY_HEADER;

/// The policy of answers that are not the map's: nothing may load or run.
const NOTHING_POLICY: &str = "default-src 'none'; frame-ancestors 'none'";

/// The cost headers a script of another origin may read.
const EXPOSED: [&str; 4] = [
    "x-query-request-charge",
    "x-query-calls",
    "x-query-throttled",
    "x-query-parallelism",
];

/// CORS for `origins` (each `scheme://host[:port]`): the reads, with the credential headers;
/// `None` (no CORS headers: browsers keep other origins out) when none is listed.
pub fn cors(origins: &[HeaderValue]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    Some(
        CorsLayer::new()
            .allow_origin(origins.to_vec())
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static(API_KEY_HEADER),
            ])
            .expose_headers(EXPOSED.map(HeaderName::from_static))
            .max_age(Duration::from_secs(600)),
    )
}

/// Middleware: the security headers, on every answer (a route's own policy kept).
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
        (header::CONTENT_SECURITY_POLICY, NOTHING_POLICY),
    ] {
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    }
    response
}
