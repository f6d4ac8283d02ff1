//! The AMQP listeners: plain (as Microsoft's emulator) and optionally TLS (as the service, on
//! its own port), connections (SASL, then CBS), sessions, and the dispatch of each attaching
//! link by its address to [`super::links`]. Both can be stopped and started again on the same
//! ports while the hub runs.

use super::consumer::{epoch_of, parse_address};
use super::links::{self, NodeKind, Replies};
use super::requests::ConnectionAuth;
use super::sasl::CbsSasl;
use super::shared::AmqpShared;
use fe2o3_amqp::acceptor::{
    ConnectionAcceptor, LinkAcceptor, LinkEndpoint, ListenerSessionHandle, SessionAcceptor,
};
use fe2o3_amqp::types::definitions::Fields;
use fe2o3_amqp::types::messaging::TargetArchetype;
use fe2o3_amqp::types::performatives::Attach;
use fe2o3_amqp::types::primitives::{Symbol, Value};
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// The idle time-out the hub announces (clients send empty frames well within it).
const IDLE_TIME_OUT_MS: u32 = 240_000;

/// The properties of OPEN, BEGIN and ATTACH. pyamqp indexes these performatives' fields up
/// to the last one (properties), so they are always sent in full.
fn product() -> Fields {
    let mut fields = Fields::new();
    fields.insert(Symbol::from("product"), Value::String("hub-sim".into()));
    fields
}

/// The most links per session, stated explicitly in BEGIN.
const HANDLE_MAX: u32 = 65_535;
/// How long a TLS client has to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The AMQP server: started, stopped and started again on its addresses.
pub(crate) struct AmqpServer {
    shared: Arc<AmqpShared>,
    addr: SocketAddr,
    /// The TLS listener's address and acceptor, if it has one.
    tls: Option<(SocketAddr, TlsAcceptor)>,
    running: Mutex<Option<CancellationToken>>,
    hub_stop: CancellationToken,
}

impl AmqpServer {
    /// Binds `addr` (plain) and, if given, `tls`'s address (TLS with its acceptor), and
    /// starts serving.
    pub(crate) async fn start(
        shared: AmqpShared,
        addr: SocketAddr,
        tls: Option<(SocketAddr, TlsAcceptor)>,
        hub_stop: CancellationToken,
    ) -> std::io::Result<AmqpServer> {
        let listener = TcpListener::bind(addr).await?;
        let tls_listener = match &tls {
            Some((tls_addr, acceptor)) => {
                let listener = TcpListener::bind(tls_addr).await?;
                Some((listener.local_addr()?, listener, acceptor.clone()))
            }
            None => None,
        };
        let server = AmqpServer {
            shared: Arc::new(shared),
            addr: listener.local_addr()?,
            tls: tls_listener
                .as_ref()
                .map(|(addr, _, acceptor)| (*addr, acceptor.clone())),
            running: Mutex::new(None),
            hub_stop,
        };
        server.serve(listener, tls_listener.map(|(_, l, a)| (l, a)));
        Ok(server)
    }

    fn serve(&self, listener: TcpListener, tls: Option<(TcpListener, TlsAcceptor)>) {
        let stop = self.hub_stop.child_token();
        *self.running.lock() = Some(stop.clone());
        tokio::spawn(accept_loop(
            self.shared.clone(),
            listener,
            None,
            stop.clone(),
        ));
        if let Some((listener, acceptor)) = tls {
            tokio::spawn(accept_loop(
                self.shared.clone(),
                listener,
                Some(acceptor),
                stop,
            ));
        }
    }

    /// The bound plain address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound TLS address, if there is one.
    pub(crate) fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls.as_ref().map(|(addr, _)| *addr)
    }

    /// Closes the listeners and every AMQP connection.
    pub(crate) fn stop(&self) {
        if let Some(stop) = self.running.lock().take() {
            stop.cancel();
        }
    }

    /// Starts serving again on the same addresses (after [`AmqpServer::stop`]).
    pub(crate) async fn restart(&self) -> std::io::Result<()> {
        self.stop();
        let listener = TcpListener::bind(self.addr).await?;
        let tls = match &self.tls {
            Some((addr, acceptor)) => Some((TcpListener::bind(addr).await?, acceptor.clone())),
            None => None,
        };
        self.serve(listener, tls);
        Ok(())
    }
}

async fn accept_loop(
    shared: Arc<AmqpShared>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    stop: CancellationToken,
) {
    loop {
        let tcp = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!(error = %e, "AMQP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let (shared, stop) = (shared.clone(), stop.clone());
        match tls.clone() {
            None => {
                tokio::spawn(connection(shared, tcp, stop));
            }
            Some(acceptor) => {
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => connection(shared, stream, stop).await,
                        _ => shared.hub.counters.add("amqp_refused", "tls_handshake", 1),
                    }
                });
            }
        }
    }
}

async fn connection<Io>(shared: Arc<AmqpShared>, io: Io, stop: CancellationToken)
where
    Io: AsyncRead + AsyncWrite + Send + Unpin + std::fmt::Debug + 'static,
{
    let acceptor = ConnectionAcceptor::builder()
        .container_id("hub-sim")
        // pyamqp reads the idle time-out field of OPEN unconditionally: always send it.
        .idle_time_out(IDLE_TIME_OUT_MS)
        .properties(product())
        .sasl_acceptor(CbsSasl)
        .build();
    let mut connection = tokio::select! {
        _ = stop.cancelled() => return,
        accepted = acceptor.accept(io) => match accepted {
            Ok(connection) => connection,
            Err(e) => {
                tracing::debug!(error = %e, "AMQP connection not opened");
                return;
            }
        },
    };
    let auth = Arc::new(ConnectionAuth::default());
    // pyamqp takes handle-max from BEGIN as sent: an omitted (default) one breaks it.
    let sessions = SessionAcceptor::builder()
        .handle_max(HANDLE_MAX)
        .properties(product())
        .build();
    loop {
        let incoming = tokio::select! {
            _ = stop.cancelled() => break,
            incoming = connection.next_incoming_session() => match incoming {
                Some(incoming) => incoming,
                None => break,
            },
        };
        match sessions
            .accept_incoming_session(incoming, &mut connection)
            .await
        {
            Ok(session) => {
                tokio::spawn(session_loop(
                    shared.clone(),
                    auth.clone(),
                    session,
                    stop.clone(),
                ));
            }
            Err(e) => tracing::debug!(error = %e, "AMQP session not begun"),
        }
    }
    let _ = connection.close().await;
}

#[allow(irrefutable_let_patterns)] // `Coordinator` exists only with fe2o3's transaction feature
fn target_address(attach: &Attach) -> Option<String> {
    let target = attach.target.as_deref()?;
    if let TargetArchetype::Target(target) = target {
        target.address.clone()
    } else {
        None
    }
}

async fn session_loop(
    shared: Arc<AmqpShared>,
    auth: Arc<ConnectionAuth>,
    mut session: ListenerSessionHandle,
    stop: CancellationToken,
) {
    // Every settle mode a client asks for is taken, as the service does; what the hub's
    // senders then send is said in [`links`].
    let acceptor = LinkAcceptor::builder().properties(product()).build();
    let replies = Replies::default();
    // Cancelled once the client has ended the session (see `links::answer_detach`).
    let ended = CancellationToken::new();
    loop {
        let attach = tokio::select! {
            _ = stop.cancelled() => break,
            attach = session.next_incoming_attach() => match attach {
                Some(attach) => attach,
                None => break,
            },
        };
        let source = attach.source.as_deref().cloned();
        let source_address = source.as_ref().and_then(|s| s.address.clone());
        let epoch = epoch_of(attach.properties.as_ref());
        let settled = links::presettled(&attach.snd_settle_mode);
        let target = target_address(&attach);
        let link = match acceptor.accept_incoming_attach(attach, &mut session).await {
            Ok(link) => link,
            Err(e) => {
                tracing::debug!(error = %e, "AMQP link not attached");
                continue;
            }
        };
        let (shared, auth, replies, stop) =
            (shared.clone(), auth.clone(), replies.clone(), stop.clone());
        match link {
            LinkEndpoint::Receiver(receiver) => match target.as_deref().and_then(NodeKind::of) {
                Some(node) => {
                    tokio::spawn(links::request_link(
                        receiver,
                        node,
                        shared,
                        auth,
                        replies,
                        ended.clone(),
                    ));
                }
                None => {
                    shared.hub.counters.add("amqp_refused", "link_not_found", 1);
                    let error = fe2o3_amqp::types::definitions::Error::new(
                        fe2o3_amqp::types::definitions::AmqpError::NotFound,
                        Some(format!("hub-sim does not receive on {target:?}")),
                        None,
                    );
                    tokio::spawn(async move {
                        let _ = receiver.close_with_error(error).await;
                    });
                }
            },
            LinkEndpoint::Sender(sender) => {
                let address = source_address.unwrap_or_default();
                if let Some(node) = NodeKind::of(&address) {
                    tokio::spawn(links::reply_link(
                        sender,
                        node,
                        replies,
                        settled,
                        shared.unattached_handle_workaround,
                        ended.clone(),
                    ));
                } else if let Some(partition) = parse_address(&address) {
                    let receiver = links::PartitionReceiver {
                        address: partition,
                        source,
                        epoch,
                        settled,
                    };
                    tokio::spawn(links::partition_link(sender, receiver, shared, auth, stop));
                } else {
                    tokio::spawn(async move {
                        let text = format!("no entity at {address}");
                        links::refuse_sender(sender, &shared, "link_not_found", text).await;
                    });
                }
            }
        }
    }
    ended.cancel();
    let _ = session.end().await;
}
