//! Accepts device connections: TLS (with an optional client certificate), then on the MQTT
//! port the device session ([`super::session::serve`]), and on the HTTPS port (IoT Hub's
//! 443) HTTP: WebSocket upgrades at `/$iothub/websocket` become device sessions, other
//! requests go to the service REST API ([`crate::mqtt::https`]).

use super::https::{self, Https};
use super::session;
use crate::dps::service::Dps;
use crate::hub::Hub;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a listener serves after TLS.
#[derive(Clone)]
pub(crate) enum Framing {
    /// MQTT directly over TLS (port 8883).
    Mqtt,
    /// HTTPS (port 443): MQTT over WebSockets and the service REST API.
    Https(Arc<Https>),
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
        let framing = framing.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = handle(hub, dps, tcp, tls, framing) => {}
            }
        });
    }
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
        Framing::Https(https) => https::serve(https, stream, chain).await,
    }
}
