//! What the server holds every connection to, plain or TLS: at most `API_MAX_CONNECTIONS` at
//! once (one more is closed at once), a request's headers within `API_HEADER_TIMEOUT` (also
//! the first bytes of a new connection, and the next request of an idle one), and a client
//! that takes no write for `API_STREAM_STALL` dropped.
//!
//! The connections are accepted by axum-server, configured here: its hyper builder carries
//! the header timeout, and an acceptor ([`Guarded`]) takes a connection's permit and wraps
//! its stream in [`Bounded`], which keeps the two deadlines hyper has none for (the bytes
//! before hyper reads a head, and a write that does not go through). Each request of a
//! connection carries its [`Link`], so that a stream dropped for a stall can be counted.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::{Extension, Router};
use axum_server::accept::{Accept, DefaultAcceptor};
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use futures::future::BoxFuture;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tower::Layer as _;

/// How long open connections may finish after the shutdown.
const GRACE: Duration = Duration::from_secs(10);
/// The most a connection buffers of an answer it has not yet written (hyper's write buffer).
const WRITE_BUFFER: usize = 64 * 1024;
/// What an HTTP/2 connection starts with; hyper reads up to it to tell the versions apart.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The limits of every connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    /// How long a client has to send a request's headers (`API_HEADER_TIMEOUT`).
    pub header_timeout: Duration,
    /// How long a client may take no write before it is dropped (`API_STREAM_STALL`).
    pub stall: Duration,
    /// Connections open at once (`API_MAX_CONNECTIONS`).
    pub max_connections: usize,
}

impl Default for Serving {
    /// Headers within 10 s, writes taken within 30 s, 1,024 connections.
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            stall: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

/// A connection as its requests see it.
#[derive(Debug, Default)]
pub struct Link {
    stalled: AtomicBool,
}

impl Link {
    /// Whether the connection was dropped because its client took no write.
    pub fn stalled(&self) -> bool {
        self.stalled.load(Ordering::Relaxed)
    }
}

/// Serves `router` on `listener` within `serving`'s limits, over TLS with `tls`, until
/// `shutdown` is cancelled; then open connections have `GRACE` to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    serving: Serving,
    tls: Option<RustlsConfig>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let handle = axum_server::Handle::new();
    tokio::spawn({
        let handle = handle.clone();
        async move {
            shutdown.cancelled().await;
            handle.graceful_shutdown(Some(GRACE));
        }
    });
    let server = axum_server::from_tcp(listener.into_std()?).handle(handle);
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    match tls {
        None => {
            let mut server = server.acceptor(Guarded::new(DefaultAcceptor, &serving));
            configure(server.http_builder(), &serving);
            server.serve(service).await
        }
        Some(config) => {
            let tls = RustlsAcceptor::new(config).handshake_timeout(serving.header_timeout);
            let mut server = server.acceptor(Guarded::new(tls, &serving));
            configure(server.http_builder(), &serving);
            server.serve(service).await
        }
    }
}

/// hyper's part: the header timeout (on its timer) and a bounded write buffer.
fn configure(builder: &mut Builder<TokioExecutor>, serving: &Serving) {
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(serving.header_timeout)
        .max_buf_size(WRITE_BUFFER);
}

/// Takes a connection's permit (none left: the connection is closed), then lets `inner`
/// accept it (the TLS handshake), and bounds its stream.
#[derive(Debug, Clone)]
pub struct Guarded<A> {
    inner: A,
    permits: Arc<Semaphore>,
    serving: Serving,
}

impl<A> Guarded<A> {
    fn new(inner: A, serving: &Serving) -> Self {
        Self {
            inner,
            permits: Arc::new(Semaphore::new(serving.max_connections)),
            serving: serving.clone(),
        }
    }
}

impl<A, S> Accept<TcpStream, S> for Guarded<A>
where
    A: Accept<TcpStream, S>,
    A::Future: Send + 'static,
    A::Stream: Unpin + Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = Bounded<A::Stream>;
    type Service = <Extension<Arc<Link>> as tower::Layer<A::Service>>::Service;
    type Future = BoxFuture<'static, io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            tracing::debug!("API_MAX_CONNECTIONS connections are open: closing a new one");
            return Box::pin(std::future::ready(Err(io::Error::other(
                "every connection is taken (API_MAX_CONNECTIONS)",
            ))));
        };
        let accepted = self.inner.accept(stream, service);
        let serving = self.serving.clone();
        Box::pin(async move {
            let (stream, service) = accepted.await?;
            let link = Arc::new(Link::default());
            let stream = Bounded {
                inner: stream,
                _permit: permit,
                opening: Some(Opening {
                    deadline: Box::pin(tokio::time::sleep(serving.header_timeout)),
                    preface: 0,
                }),
                stall: serving.stall,
                stalled_since: None,
                link: link.clone(),
            };
            Ok((stream, Extension(link).layer(service)))
        })
    }
}

/// A new connection's first bytes: due by `deadline` while they could still be the start of
/// HTTP/2's preface (`preface` bytes of it so far), before hyper reads a head.
struct Opening {
    deadline: Pin<Box<Sleep>>,
    preface: usize,
}

/// A connection's stream, holding its permit: its first bytes due within the header timeout,
/// and each write taken within the stall limit.
pub struct Bounded<S> {
    inner: S,
    _permit: OwnedSemaphorePermit,
    opening: Option<Opening>,
    stall: Duration,
    stalled_since: Option<Pin<Box<Sleep>>>,
    link: Arc<Link>,
}

impl<S> Bounded<S> {
    /// `polled`, a write's progress: pending for longer than the stall limit is an error.
    fn watch<T>(
        &mut self,
        polled: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled_since = None;
            return polled;
        }
        let stall = self.stall;
        let since = self
            .stalled_since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        if since.as_mut().poll(cx).is_ready() {
            self.link.stalled.store(true, Ordering::Relaxed);
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no write within API_STREAM_STALL",
            )));
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let Some(opening) = &mut this.opening else {
            return polled;
        };
        match &polled {
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                let end = opening.preface + read.len();
                if end < H2_PREFACE.len()
                    && !read.is_empty()
                    && H2_PREFACE[opening.preface..end] == *read
                {
                    opening.preface = end;
                } else {
                    // hyper knows the version now, and holds the head to its own timeout.
                    this.opening = None;
                }
            }
            Poll::Pending if opening.deadline.as_mut().poll(cx).is_ready() => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no request within API_HEADER_TIMEOUT",
                )));
            }
            _ => {}
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(polled, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(polled, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(polled, cx)
    }
}
