//! What a request brings before it is served, and how long it may take: its client's
//! address ([`ClientAddr`]; the forwarded one only from a trusted proxy), its body in full
//! within `API_BODY_TIMEOUT` (before any budget or fan-out slot is taken), and its answer
//! within `API_REQUEST_TIMEOUT` (a live stream's events are not bounded, only its start).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::body::HttpBody as _;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;
use serde_json::json;

use crate::geo::MAX_BODY_BYTES;

/// The address a request came from: the peer's, or, when the peer is a trusted proxy, the
/// nearest address in `X-Forwarded-For` that is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientAddr(pub IpAddr);

/// The client of a request from `peer` with `headers`, trusting the proxies in `trusted`.
/// Each proxy appends the address it was asked from, so the list is read from its end.
fn client_of(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    let mut client = peer;
    if !is_trusted(&client) {
        return client;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    for hop in hops.into_iter().rev() {
        // Anything else than an address: the last trusted hop is the client.
        let Ok(ip) = hop.trim().parse::<IpAddr>() else {
            return client;
        };
        client = ip;
        if !is_trusted(&client) {
            return client;
        }
    }
    client
}

/// Middleware: puts the request's [`ClientAddr`] in (when the server gave the peer's).
pub async fn client_address(
    State(trusted): State<Arc<[IpNet]>>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(ConnectInfo(peer)) = request.extensions().get::<ConnectInfo<SocketAddr>>() {
        let client = client_of(peer.ip(), request.headers(), &trusted);
        request.extensions_mut().insert(ClientAddr(client));
    }
    next.run(request).await
}

fn refused(status: StatusCode, code: &str, message: String) -> Response {
    let mut response = (
        status,
        axum::Json(json!({"error": code, "message": message})),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Middleware: reads a request's body in full within `limit` (408 past it; 413 past
/// [`MAX_BODY_BYTES`]), so that what follows holds no slot while a client trickles it.
pub async fn whole_body(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    if request.body().size_hint().exact() == Some(0) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(limit, axum::body::to_bytes(body, MAX_BODY_BYTES)).await
    {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
            );
        }
        Err(_) => {
            return refused(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} (API_BODY_TIMEOUT); send it at once",
                    settings::DurationSetting(limit)
                ),
            );
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Middleware: an answer that has not begun within `limit` is given up (503).
pub async fn answer_within(
    State(limit): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let mut response = refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!(
                    "no answer within {} (API_REQUEST_TIMEOUT); retry after Retry-After",
                    settings::DurationSetting(limit)
                ),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarded(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", value.parse().unwrap());
        headers
    }

    #[test]
    fn the_forwarded_address_counts_only_from_a_trusted_proxy() {
        let proxy: IpAddr = "10.0.0.7".parse().unwrap();
        let trusted: Vec<IpNet> = vec!["10.0.0.0/24".parse().unwrap()];
        let headers = forwarded("203.0.113.9, 198.51.100.4, 10.0.0.3");
        // From a trusted proxy: the nearest untrusted hop, not what the client wrote first.
        assert_eq!(
            client_of(proxy, &headers, &trusted),
            "198.51.100.4".parse::<IpAddr>().unwrap()
        );
        // From anyone else: the peer, whatever it forwards.
        let stranger: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(client_of(stranger, &headers, &trusted), stranger);
        // No proxy trusted (the default): the peer.
        assert_eq!(client_of(proxy, &headers, &[]), proxy);
        // A hop that is not an address: the last trusted one.
        let garbled = forwarded("203.0.113.9, unknown");
        assert_eq!(client_of(proxy, &garbled, &trusted), proxy);
    }
}
