//! Serving connections (HTTP/1.1, keep-alive, by `http_serve`) and the way of one request:
//! admin requests aside, counted by priority, faults injected, credential checked, priority
//! checked, body read within its limit, a token's role checked, routed.

use super::reply::Reply;
use super::{admin, auth, faults, headers, routes};
use crate::endpoint_state::EndpointState;
use bytes::Bytes;
use cosmos_wire::batch::MAX_BODY_BYTES;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use http_serve::Limits;
use hyper::body::Incoming;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Request bodies larger than this are refused before parsing (413).
const MAX_REQUEST_BYTES: usize = MAX_BODY_BYTES + 64 * 1024;

/// How long open connections may finish their requests once the endpoint stops.
const GRACE: Duration = Duration::from_secs(10);

/// Serves connections until `stop`, then lets open ones finish within [`GRACE`].
pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<EndpointState>,
    stop: CancellationToken,
) {
    let service = tower::service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(handle(state, req).await) }
    });
    let limits = Limits {
        grace: GRACE,
        ..Limits::LOCAL
    };
    if let Err(e) = http_serve::serve(listener, service, limits, None, stop).await {
        tracing::warn!(error = %e, "the endpoint stopped serving");
    }
}

async fn handle(state: Arc<EndpointState>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    if parts.uri.path().starts_with("/_admin") {
        let body = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => return Reply::error(413, 0, "request body too large").into_response(),
        };
        return admin::handle(&state, &parts.method, parts.uri.path(), &body).into_response();
    }
    let priority = headers::priority(&parts.headers);
    state
        .counters
        .request(priority.as_ref().copied().unwrap_or_default());
    if let Some(reply) = faults::inject(&state).await {
        return reply.into_response();
    }
    let caller =
        match auth::authenticate(&state, &parts.method, parts.uri.path(), &parts.headers).await {
            Ok(caller) => caller,
            Err(reply) => return reply.into_response(),
        };
    let priority = match priority {
        Ok(p) => p,
        Err(reply) => return reply.into_response(),
    };
    let body = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return Reply::error(
                413,
                0,
                format!("Request size is too large: at most {MAX_BODY_BYTES} bytes."),
            )
            .into_response();
        }
    };
    let segments = routes::segments(parts.uri.path());
    let target = routes::Target::of(&parts.method, &segments, &parts.headers);
    if let Err(reply) = auth::authorize(
        &caller,
        target.need(),
        &parts.method,
        parts.uri.path(),
        &body,
    ) {
        return reply.into_response();
    }
    let reply = routes::route(
        &state,
        target,
        &parts.method,
        parts.uri.path(),
        &parts.headers,
        priority,
        &body,
    );
    if reply.status == 429 {
        state.counters.throttled_request(priority);
    }
    reply.into_response()
}
