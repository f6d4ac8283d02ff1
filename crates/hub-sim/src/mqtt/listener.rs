//! Accepts device connections: TLS (with an optional client certificate), then for the
//! WebSocket port the HTTP upgrade at `/$iothub/websocket` (subprotocol `mqtt`), then hands the
//! byte stream to [`super::session::serve`].

use super::session;
use crate::dps::service::Dps;
use crate::hub::Hub;
use async_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use async_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use ws_stream_tungstenite::WsStream;

/// The path IoT Hub serves MQTT over WebSockets on.
pub const WEBSOCKET_PATH: &str = "/$iothub/websocket";
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Which framing a listener expects after TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// MQTT directly over TLS (port 8883).
    Mqtt,
    /// MQTT over WebSockets over TLS (port 443).
    WebSocket,
}

/// Accepts connections on `listener` until `stop` is cancelled.
pub(crate) async fn run(
    hub: Arc<Hub>,
    dps: Arc<Dps>,
    listener: TcpListener,
    tls: TlsAcceptor,
    framing: Framing,
    stop: CancellationToken,
) {
    loop {
        let (tcp, _) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let hub = hub.clone();
        let dps = dps.clone();
        let tls = tls.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = handle(hub, dps, tcp, tls, framing) => {}
            }
        });
    }
}

#[allow(clippy::result_large_err)] // the signature tungstenite's callback requires
fn upgrade(request: &Request, mut response: Response) -> Result<Response, ErrorResponse> {
    if request.uri().path() != WEBSOCKET_PATH {
        let mut refusal = ErrorResponse::new(Some(format!("only {WEBSOCKET_PATH} is served")));
        *refusal.status_mut() = StatusCode::NOT_FOUND;
        return Err(refusal);
    }
    let offers_mqtt = request
        .headers()
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case("mqtt"));
    if offers_mqtt {
        response
            .headers_mut()
            .insert("sec-websocket-protocol", HeaderValue::from_static("mqtt"));
    }
    Ok(response)
}

async fn handle(hub: Arc<Hub>, dps: Arc<Dps>, tcp: TcpStream, tls: TlsAcceptor, framing: Framing) {
    let _ = tcp.set_nodelay(true);
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp)).await {
        Ok(Ok(stream)) => stream,
        _ => {
            hub.counters.add("connections_refused", "tls_handshake", 1);
            return;
        }
    };
    let chain: Vec<Vec<u8>> = stream
        .get_ref()
        .1
        .peer_certificates()
        .map(|chain| chain.iter().map(|cert| cert.to_vec()).collect())
        .unwrap_or_default();
    match framing {
        Framing::Mqtt => session::serve(hub, dps, stream, chain).await,
        Framing::WebSocket => {
            let upgraded = tokio::time::timeout(
                HANDSHAKE_TIMEOUT,
                async_tungstenite::tokio::accept_hdr_async(stream, upgrade),
            )
            .await;
            match upgraded {
                Ok(Ok(ws)) => session::serve(hub, dps, WsStream::new(ws), chain).await,
                _ => hub
                    .counters
                    .add("connections_refused", "websocket_handshake", 1),
            }
        }
    }
}
