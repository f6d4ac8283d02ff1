//! The audit of every request: one structured log line (target `fleet_api::audit`) with who
//! asked, the route, what the read cost (RU and Cosmos DB calls) and the outcome (status),
//! and the count of requests per route, role and status.
//!
//! Who asked is what the route's guard let in: `key:NAME`, `token:SUBJECT` or `anonymous`,
//! and `none` where no caller is known (an open route, or a credential refused with 401).
//! The route is the path as routed (`/api/drones/:id`, never the id), `unmatched` for a
//! path no route has.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::access::Caller;
use crate::metrics::Metrics;

/// Middleware: logs and counts the request once its answer is made.
pub async fn audit(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(request).await;
    let caller = response.extensions().get::<Caller>();
    let identity = caller.map_or_else(|| "none".to_string(), |c| c.identity.to_string());
    let role = caller.map_or("none", Caller::role_name);
    let number = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let status = response.status().as_u16();
    tracing::info!(
        target: "fleet_api::audit",
        identity,
        role,
        method = %method,
        route,
        status,
        ru = number("x-query-request-charge"),
        calls = number("x-query-calls"),
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    metrics.record_access(&route, role, status);
    response
}
