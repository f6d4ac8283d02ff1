//! The writer's two HTTP listeners, routed by axum: `/metrics` for the scraper, and
//! `/healthz` with `/readyz` for kubelet's probes on a port of their own, so that
//! connections held open on the metrics port never make the probes time out (and the
//! writer restarted over and over).
//!
//! Both are hardened for a port anyone on the network can reach: a request's headers must arrive
//! within a timeout, connections beyond a cap wait in the listen backlog instead of
//! growing the process, and accept errors (out of file descriptors) back off
//! ([`ACCEPT_BACKOFF`]) instead of spinning. `axum::serve` offers neither the header timeout
//! nor the cap, so the accept loop is ours and each connection is served by hyper with the
//! router as its service. `/healthz` fails when work is pending and no outcome was reached
//! for a while ([`Metrics::is_live`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::service::TowerToHyperService;
use retry_backoff::{Backoff, BackoffConfig};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Metrics;

/// Limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A request's headers must arrive within this, or the connection is closed.
    pub header_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
}

impl Limits {
    /// The scrape endpoint's: 10 s for headers, 64 connections.
    pub const METRICS: Limits = Limits {
        header_timeout: Duration::from_secs(10),
        max_connections: 64,
    };
    /// The probes': kubelet sends its headers at once and probes one at a time (5 s, 16).
    pub const PROBES: Limits = Limits {
        header_timeout: Duration::from_secs(5),
        max_connections: 16,
    };
}

/// The wait after failed accepts: the window from 5 ms doubling up to 1 s (full jitter).
pub const ACCEPT_BACKOFF: BackoffConfig = BackoffConfig {
    base: Duration::from_millis(5),
    cap: Duration::from_secs(1),
};

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
    let service = TowerToHyperService::new(router);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut backoff = Backoff::new(ACCEPT_BACKOFF);
    loop {
        // A free slot first: beyond the cap, connections wait unaccepted.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
            () = shutdown.cancelled() => return,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    backoff.reset();
                    accepted
                }
                Err(err) => {
                    // Out of descriptors or memory: wait before trying again.
                    let delay = backoff.next_delay();
                    tracing::warn!(error = %err, retry_in = ?delay, "metrics listener accept failed");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = shutdown.cancelled() => return,
                    }
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let service = service.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let io = hyper_util::rt::TokioIo::new(stream);
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(io, service);
            tokio::select! {
                _ = connection => {}
                () = shutdown.cancelled() => {}
            }
        });
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
        } = start(Limits::METRICS, Duration::ZERO).await;
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
        } = start(Limits::METRICS, Duration::ZERO).await;
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
        } = start(
            Limits {
                header_timeout: timeout,
                ..Limits::METRICS
            },
            Duration::from_secs(60),
        )
        .await;
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
                header_timeout: Duration::from_secs(60),
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
