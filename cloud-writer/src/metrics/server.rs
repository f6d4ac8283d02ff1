//! The writer's two HTTP listeners, routed by axum: `/metrics` for the scraper, and
//! `/healthz` with `/readyz` for kubelet's probes on a port of their own, so that
//! connections held open on the metrics port never make the probes time out (and the
//! writer restarted over and over).
//!
//! Both are hardened for a port anyone on the network can reach, by `http_serve` (axum-server):
//! a request's headers must arrive within a timeout, connections beyond a cap wait in the
//! listen backlog instead of growing the process, and accept errors (out of file
//! descriptors) are retried after a pause instead of in a spin. `/healthz` fails when work
//! is pending and no outcome was reached for a while ([`Metrics::is_live`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
pub use http_serve::Limits;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Metrics;

/// The scrape endpoint's limits: 64 connections, closed at once on shutdown; the header
/// timeout is `METRICS_HEADER_TIMEOUT`.
pub fn metrics_limits(header_timeout: Duration) -> Limits {
    Limits {
        header_timeout,
        max_connections: 64,
        grace: Duration::ZERO,
    }
}

/// The probes' limits: kubelet sends its headers at once and probes one at a time (16
/// connections); the header timeout is `METRICS_HEADER_TIMEOUT` too.
pub fn probe_limits(header_timeout: Duration) -> Limits {
    Limits {
        max_connections: 16,
        ..metrics_limits(header_timeout)
    }
}

/// What the handlers read.
#[derive(Clone)]
struct Endpoint {
    metrics: Arc<Metrics>,
    stall_after: Duration,
}

/// `/metrics`; the liveness gauge it carries follows `stall_after`.
pub fn metrics_router(metrics: Arc<Metrics>, stall_after: Duration) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .with_state(Endpoint {
            metrics,
            stall_after,
        })
}

/// `/healthz` (failing after `stall_after` without progress while work is pending) and
/// `/readyz`.
pub fn probes_router(metrics: Arc<Metrics>, stall_after: Duration) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Endpoint {
            metrics,
            stall_after,
        })
}

async fn metrics_text(State(endpoint): State<Endpoint>) -> impl IntoResponse {
    endpoint.metrics.update_health(endpoint.stall_after);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        endpoint.metrics.render(),
    )
}

async fn healthz(State(endpoint): State<Endpoint>) -> (StatusCode, String) {
    if endpoint.metrics.is_live(endpoint.stall_after) {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "no progress for {:?} with work pending\n",
                endpoint.stall_after
            ),
        )
    }
}

async fn readyz(State(endpoint): State<Endpoint>) -> (StatusCode, &'static str) {
    if endpoint.metrics.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    if let Err(err) = http_serve::serve(listener, router, limits, None, shutdown).await {
        tracing::error!(error = %err, "a metrics listener stopped");
    }
}

/// Binds a listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::metrics::{DocumentKind, HoldReason};

    /// The writer's two listeners.
    struct Served {
        metrics: SocketAddr,
        probes: SocketAddr,
        state: Arc<Metrics>,
        shutdown: CancellationToken,
    }

    async fn start(limits: Limits, stall_after: Duration) -> Served {
        let state = Arc::new(Metrics::new());
        let shutdown = CancellationToken::new();
        let mut addrs = Vec::new();
        for router in [
            metrics_router(state.clone(), stall_after),
            probes_router(state.clone(), stall_after),
        ] {
            let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            addrs.push(listener.local_addr().unwrap());
            tokio::spawn(serve(listener, router, limits, shutdown.clone()));
        }
        Served {
            metrics: addrs[0],
            probes: addrs[1],
            state,
            shutdown,
        }
    }

    /// The status line of a GET on a new connection.
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        request(&mut stream, path).await
    }

    async fn request(stream: &mut TcpStream, path: &str) -> String {
        let text = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response.lines().next().unwrap_or_default().to_string()
    }

    /// Opens a connection and sends half a request's headers.
    async fn slowloris(addr: SocketAddr) -> TcpStream {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        stream
    }

    #[tokio::test]
    async fn healthz_turns_failing_when_progress_stops_with_work_pending() {
        let Served {
            probes: addr,
            state: metrics,
            shutdown,
            ..
        } = start(metrics_limits(Duration::from_secs(10)), Duration::ZERO).await;
        assert!(get(addr, "/healthz").await.contains("200"));
        metrics.set_in_flight(1);
        assert!(get(addr, "/healthz").await.contains("503"));
        metrics.written(DocumentKind::Latest);
        assert!(get(addr, "/healthz").await.contains("200"));
        assert!(get(addr, "/healthz").await.contains("503"));
        metrics.set_in_flight(0);
        assert!(get(addr, "/healthz").await.contains("200"));
        shutdown.cancel();
    }

    /// The body of a GET of `/metrics`.
    async fn scrape(addr: SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let text = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    /// The alert rules read `/readyz` and `/healthz` from these two gauges.
    #[tokio::test]
    async fn metrics_carry_the_answers_of_readyz_and_healthz() {
        let Served {
            metrics: addr,
            probes,
            state: metrics,
            shutdown,
        } = start(metrics_limits(Duration::from_secs(10)), Duration::ZERO).await;
        let text = scrape(addr).await;
        assert!(text.contains("\ncloud_writer_ready 0\n"), "{text}");
        assert!(text.contains("\ncloud_writer_live 1\n"), "{text}");
        metrics.set_ready(true);
        metrics.set_source_connected(true);
        let text = scrape(addr).await;
        assert!(text.contains("\ncloud_writer_ready 1\n"), "{text}");
        assert!(get(probes, "/readyz").await.contains("200"));
        // A replica without a partition while some are free to own is not ready.
        metrics.set_source_assigned(false);
        assert!(get(probes, "/readyz").await.contains("503"));
        metrics.set_source_assigned(true);
        metrics.set_blocked(Some(HoldReason::Unavailable));
        metrics.set_in_flight(1);
        let text = scrape(addr).await;
        assert!(text.contains("\ncloud_writer_ready 0\n"), "{text}");
        assert!(text.contains("\ncloud_writer_live 0\n"), "{text}");
        assert!(get(probes, "/readyz").await.contains("503"));
        assert!(get(probes, "/healthz").await.contains("503"));
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_connection_sending_partial_headers_is_closed_after_the_timeout() {
        let timeout = Duration::from_millis(300);
        let Served {
            metrics: addr,
            shutdown,
            ..
        } = start(metrics_limits(timeout), Duration::from_secs(60)).await;
        let started = StdInstant::now();
        let mut stream = slowloris(addr).await;
        let mut rest = Vec::new();
        // The server closes it (at most answering 408); it never answers the request.
        // Closed (or reset): either way the read ends.
        let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
            .await
            .expect("the server closes a connection whose headers do not arrive");
        assert!(started.elapsed() >= timeout);
        let text = String::from_utf8_lossy(&rest);
        assert!(!text.contains("200 OK"), "{text}");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_wait_until_one_closes() {
        let Served {
            metrics: addr,
            probes,
            shutdown,
            ..
        } = start(
            Limits {
                max_connections: 2,
                ..metrics_limits(Duration::from_secs(60))
            },
            Duration::from_secs(60),
        )
        .await;
        let first = slowloris(addr).await;
        let _second = slowloris(addr).await;
        // The probes' port is not the one held: kubelet's probes still answer.
        assert!(get(probes, "/healthz").await.contains("200"));
        assert!(get(probes, "/readyz").await.contains("503"));
        // A third scrape is not served while both slots are taken...
        let mut third = tokio::spawn(get(addr, "/metrics"));
        let waited = tokio::time::timeout(Duration::from_millis(500), &mut third).await;
        assert!(waited.is_err(), "served beyond the cap");
        // ...and is once a slot frees.
        drop(first);
        let status = tokio::time::timeout(Duration::from_secs(10), third)
            .await
            .expect("served once a connection closed")
            .unwrap();
        assert!(status.contains("200"), "{status}");
        shutdown.cancel();
    }
}
