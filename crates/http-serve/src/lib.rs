//! The small HTTP/1.1 endpoints of the programs and of the local stand-ins (metrics,
//! probes, admin and simulated APIs), served by axum-server as fleet-api's API is:
//! - a request's headers must arrive within [`Limits::header_timeout`] (hyper's timer),
//!   or the connection is closed;
//! - at most [`Limits::max_connections`] connections are served at once: one more waits
//!   accepted for a free slot, the rest wait in the listen backlog, so held connections
//!   never grow the process;
//! - TLS when given a rustls configuration;
//! - on `shutdown`, no new connection is accepted and open ones have [`Limits::grace`]
//!   to finish.
//!
//! A failed accept (out of descriptors) is retried by axum-server after 50 ms, not in a
//! spin. Accepted connections send without delay (`TCP_NODELAY`): an answer is one write.

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::{Accept, DefaultAcceptor};
use axum_server::tls_rustls::RustlsAcceptor;
use hyper_util::rt::TokioTimer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::{CancellationToken, PollSemaphore};
use tower::Service;

pub use axum_server::tls_rustls::RustlsConfig;

/// Limits of one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request's headers must arrive within this, or the connection is closed.
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long open connections may finish after the shutdown.
    pub grace: Duration,
}

impl Limits {
    /// A local stand-in's: headers within 10 s, connections without a cap, closed at once
    /// on shutdown.
    pub const LOCAL: Limits = Limits {
        header_timeout: Duration::from_secs(10),
        max_connections: Semaphore::MAX_PERMITS,
        grace: Duration::ZERO,
    };
}

/// Serves `service` on `listener` within `limits`, over TLS with `tls`, until `shutdown`.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    limits: Limits,
    tls: Option<RustlsConfig>,
    shutdown: CancellationToken,
) -> io::Result<()>
where
    S: Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: Send,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let handle = axum_server::Handle::new();
    let stopping = tokio::spawn({
        let handle = handle.clone();
        async move {
            shutdown.cancelled().await;
            handle.graceful_shutdown(Some(limits.grace));
        }
    });
    let server = axum_server::from_tcp(listener.into_std()?).handle(handle);
    let make = Capped::new(service, limits.max_connections);
    let served = match tls {
        None => {
            let mut server = server.acceptor(NoDelay(DefaultAcceptor));
            configure(&mut server, &limits);
            server.serve(make).await
        }
        Some(config) => {
            let acceptor = RustlsAcceptor::new(config)
                .handshake_timeout(limits.header_timeout)
                .acceptor(NoDelay(DefaultAcceptor));
            let mut server = server.acceptor(acceptor);
            configure(&mut server, &limits);
            server.serve(make).await
        }
    };
    stopping.abort();
    served
}

fn configure<A>(server: &mut axum_server::Server<A>, limits: &Limits) {
    server
        .http_builder()
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
}

/// Sets `TCP_NODELAY` on each accepted connection, then lets `A` accept it.
#[derive(Debug, Clone)]
struct NoDelay<A>(A);

impl<A: Accept<TcpStream, S>, S> Accept<TcpStream, S> for NoDelay<A> {
    type Stream = A::Stream;
    type Service = A::Service;
    type Future = A::Future;

    fn accept(&self, stream: TcpStream, service: S) -> A::Future {
        let _ = stream.set_nodelay(true);
        self.0.accept(stream, service)
    }
}

/// Makes a connection's service once a slot is free: axum-server asks it to be ready
/// after each accept, so beyond the cap the next accept waits.
struct Capped<S> {
    service: S,
    slots: PollSemaphore,
    slot: Option<OwnedSemaphorePermit>,
}

impl<S> Capped<S> {
    fn new(service: S, max_connections: usize) -> Self {
        Capped {
            service,
            slots: PollSemaphore::new(Arc::new(Semaphore::new(max_connections.max(1)))),
            slot: None,
        }
    }
}

impl<S: Clone, T> Service<T> for Capped<S> {
    type Response = Slotted<S>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Slotted<S>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.slot.is_none() {
            // The semaphore is never closed.
            self.slot = std::task::ready!(self.slots.poll_acquire(cx));
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: T) -> Self::Future {
        std::future::ready(Ok(Slotted {
            service: self.service.clone(),
            _slot: Arc::new(self.slot.take().expect("called when ready")),
        }))
    }
}

/// A connection's service, holding its slot until the connection and its requests end.
#[derive(Clone)]
struct Slotted<S> {
    service: S,
    _slot: Arc<OwnedSemaphorePermit>,
}

impl<S: Service<R>, R> Service<R> for Slotted<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.service.call(request)
    }
}
