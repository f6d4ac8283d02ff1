//! The MQTT connection in IoT Hub's device dialect (or plain MQTT for local brokers).
//!
//! One task per agent owns the connection: it connects, reports what happens as
//! link events, and reconnects with exponential backoff and full jitter
//! ([`retry_backoff`]). Each connection ("link") gets a fresh rumqttc client and event
//! loop, so nothing queued for a dead link is ever sent on the next one: whatever was not
//! acknowledged is sent again from the disk buffer by the agent.
//!
//! IoT Hub dialect (protocols.md; learn.microsoft.com "Communicate with an IoT hub
//! using MQTT"): client id = device id; username
//! `{hub}/{deviceId}/?api-version=2021-04-12`; password = a SAS token made for this
//! connection ([`sas`]), or none with an X.509 client certificate; TLS on 8883 verified
//! against the system's roots, or WebSockets at `wss://{hub}:443/$iothub/websocket`;
//! QoS 1 for positions; clean session (its own disk buffer, not the broker session, carries
//! unacknowledged messages). On IoT Hub each link also subscribes to the device twin and
//! direct methods and reads the twin ([`cloud`]); in plain MQTT mode it subscribes to
//! nothing. With SAS the link is closed and
//! reopened with a fresh token at [`SasConfig::renew_fraction`] of the
//! token's lifetime, before the hub would disconnect the device at expiry.

mod cloud;
mod config;
mod inflight;
pub mod sas;
mod tls;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use rumqttc::{
    AsyncClient, ConnectReturnCode, ConnectionError, Event, EventLoop, Incoming, MqttOptions,
    Outgoing, QoS, SubscribeReasonCode, Transport,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::clock::Clock;
use crate::status::{ConnectionState, StatusCell};
pub(crate) use cloud::{
    CloudEvent, CloudLink, Desired, MAX_METHOD_PAYLOAD, MethodRequest, Rid, Twin,
};
pub use config::{Auth, BrokerAuth, Endpoint, Login, SasConfig, TransportConfig, X509Config};
use inflight::Inflight;
use retry_backoff::Backoff;
pub use tls::TlsError;

/// The `api-version` IoT Hub's MQTT username carries.
pub const IOTHUB_API_VERSION: &str = "2021-04-12";

/// The largest MQTT packet sent or read: IoT Hub's 256 KB message limit plus the topic
/// (a twin document is at most 32 KB desired and 32 KB reported; a method payload 128 KB).
const MAX_PACKET: usize = 256 * 1024 + 4096;

/// Requests the client queues beyond the in-flight publishes: room for the twin and method
/// messages while positions fill every in-flight slot.
const CONTROL_QUEUE: usize = 16;

/// The device-to-cloud topic of a message made at `created`, with the content type,
/// content encoding and creation time properties:
/// `devices/{id}/messages/events/$.ct=application%2Fjson&$.ce=utf-8&iothub-creation-time-utc=...`.
pub fn event_topic(device_id: &str, created: DateTime<Utc>) -> String {
    format!(
        "devices/{device_id}/messages/events/$.ct=application%2Fjson&$.ce=utf-8&iothub-creation-time-utc={}",
        azure_text::uri::encode_component(&created.to_rfc3339_opts(SecondsFormat::Millis, true))
    )
}

/// The MQTT username IoT Hub expects.
pub fn iothub_username(hub_host: &str, device_id: &str) -> String {
    format!("{hub_host}/{device_id}/?api-version={IOTHUB_API_VERSION}")
}

/// What happens on the connection, for the agent. `link` numbers the connections of
/// one agent; events of an older link are stale.
#[derive(Debug)]
pub(crate) enum LinkEvent {
    /// Connected (CONNACK): publish through `publisher`.
    Up { link: u64, publisher: Publisher },
    /// The broker acknowledged the publish of buffered record `record`.
    Acked { link: u64, record: u64 },
    /// The link is gone; unacknowledged publishes of it will not be acknowledged.
    Down { link: u64 },
    /// The hub sent something on the twin or method topics (IoT Hub only).
    Cloud { link: u64, event: CloudEvent },
}

/// Publishes buffered records on one link and knows which of them await their PUBACK;
/// the packet ids stay inside the transport ([`inflight`]).
#[derive(Debug, Clone)]
pub(crate) struct Publisher {
    client: AsyncClient,
    inflight: Arc<Mutex<Inflight>>,
}

impl Publisher {
    /// Hands record `record` to the client as a QoS 1 publish on `topic`; `false` if the
    /// link is closing (the record stays buffered for the next one).
    pub(crate) fn publish(&self, record: u64, topic: String, payload: Vec<u8>) -> bool {
        let mut inflight = self.inflight.lock().expect("inflight lock");
        // Queued before the client can report its packet id, under the same lock.
        inflight.queued(record);
        match self
            .client
            .try_publish(topic, QoS::AtLeastOnce, false, payload)
        {
            Ok(()) => true,
            Err(err) => {
                tracing::debug!(%err, record, "publish not queued");
                inflight.unqueue_last(record);
                false
            }
        }
    }

    /// How many records await their PUBACK on this link.
    pub(crate) fn in_flight(&self) -> usize {
        self.inflight.lock().expect("inflight lock").len()
    }

    /// Whether `record` is on this link and not yet acknowledged.
    pub(crate) fn carries(&self, record: u64) -> bool {
        self.inflight
            .lock()
            .expect("inflight lock")
            .contains(record)
    }

    /// Applies one of the client's events; the record a PUBACK acknowledges, if any.
    fn on_event(&self, event: &Event) -> Option<u64> {
        let mut inflight = self.inflight.lock().expect("inflight lock");
        let outcome = match event {
            // Packet id 0: a QoS 0 publish (twin and method messages), no buffered record.
            Event::Outgoing(Outgoing::Publish(0)) => Ok(None),
            Event::Outgoing(Outgoing::Publish(pkid)) => inflight.written(*pkid).map(|()| None),
            Event::Outgoing(Outgoing::AwaitAck(pkid)) => inflight.held(*pkid).map(|()| None),
            Event::Incoming(Incoming::PubAck(ack)) => inflight.acked(ack.pkid).map(Some),
            _ => Ok(None),
        };
        // A client or broker that breaks the protocol: the records stay buffered and
        // are sent again on the next link if never acknowledged.
        outcome
            .inspect_err(|err| tracing::warn!(%err, "MQTT event ignored"))
            .ok()
            .flatten()
    }
}

/// Why the transport cannot be set up (a configuration problem, reported at start).
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The TLS setup failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// Makes the client and event loop of each link: endpoint, TLS (loaded once) and fresh
/// credentials.
pub struct Dialer {
    config: TransportConfig,
    device_id: String,
    transport: Transport,
    clock: Clock,
}

/// The connection of one agent, before it runs.
pub(crate) struct Connection {
    dialer: Dialer,
    status: StatusCell,
    events: mpsc::Sender<LinkEvent>,
}

/// How one link ended.
struct LinkEnd {
    connected: bool,
    planned: bool,
    /// The hub refused the credentials at CONNECT (not authorized, bad user name or password).
    credentials_refused: bool,
    reason: String,
}

/// Why a connection stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionEnd {
    /// Shut down, or the agent stopped listening.
    Stopped,
    /// The hub refused the credentials `TransportConfig::refusals_before_giving_up` times
    /// in a row: they are no longer this device's (deleted, disabled, moved).
    CredentialsRefused,
}

impl Dialer {
    /// Prepares the links of `device_id` (loads TLS roots and client certificates once).
    pub fn new(
        config: TransportConfig,
        device_id: String,
        clock: Clock,
    ) -> Result<Dialer, TransportError> {
        let transport = match &config.endpoint {
            Endpoint::Tcp { .. } => Transport::Tcp,
            Endpoint::Tls { .. } => Transport::Tls(tls::configuration(&config, &clock)?),
            // `ws://` (no TLS) is for local brokers and tests; IoT Hub is always `wss://`.
            Endpoint::WebSocket { url } if url.starts_with("ws://") => Transport::Ws,
            Endpoint::WebSocket { .. } => Transport::Wss(tls::configuration(&config, &clock)?),
        };
        Ok(Dialer {
            config,
            device_id,
            transport,
            clock,
        })
    }

    /// A client and event loop for a new link, and when to renew its credentials.
    pub fn dial(&self) -> (AsyncClient, EventLoop, Option<Duration>) {
        let (options, renew_after) = self.options();
        let capacity = usize::from(self.config.max_inflight) + CONTROL_QUEUE;
        let (client, mut eventloop) = AsyncClient::new(options, capacity);
        eventloop
            .network_options
            .set_connection_timeout(self.config.connect_timeout.as_secs().max(1));
        (client, eventloop, renew_after)
    }

    /// Connects once and waits for CONNACK; `Err` names why the connection failed.
    pub async fn check(&self) -> Result<(), String> {
        let (_client, mut eventloop, _) = self.dial();
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Incoming::ConnAck(_))) => return Ok(()),
                Ok(_) => {}
                Err(err) => return Err(err.to_string()),
            }
        }
    }

    /// The options of the next link, and when to renew its credentials.
    fn options(&self) -> (MqttOptions, Option<Duration>) {
        let (host, port) = match &self.config.endpoint {
            Endpoint::Tcp { host, port } | Endpoint::Tls { host, port } => (host.clone(), *port),
            Endpoint::WebSocket { url } => (url.clone(), 443),
        };
        let mut options = MqttOptions::new(&self.device_id, host, port);
        options
            .set_transport(self.transport.clone())
            .set_keep_alive(self.config.keep_alive)
            .set_clean_session(true)
            .set_inflight(self.config.max_inflight.max(1))
            .set_max_packet_size(MAX_PACKET, MAX_PACKET);
        let mut renew_after = None;
        match &self.config.auth {
            Auth::Broker(broker) => {
                if let Some(login) = &broker.login {
                    options.set_credentials(&login.username, login.password.expose());
                }
            }
            Auth::X509(x509) => {
                options.set_credentials(iothub_username(&x509.hub_host, &self.device_id), "");
            }
            Auth::Sas(sas_config) => {
                // The agent's clock: a board still in 1970 would sign expired tokens.
                let now = self.clock.now().timestamp().max(0).unsigned_abs();
                let expiry = now + sas_config.token_ttl.as_secs();
                let token = sas::sas_token(
                    &sas::resource_uri(&sas_config.hub_host, &self.device_id),
                    sas_config.key.expose(),
                    expiry,
                );
                options.set_credentials(
                    iothub_username(&sas_config.hub_host, &self.device_id),
                    token,
                );
                renew_after = Some(sas_config.token_ttl.mul_f64(sas_config.renew_fraction));
            }
        }
        (options, renew_after)
    }
}

impl Connection {
    /// A connection that reports to `events`.
    pub(crate) fn new(
        dialer: Dialer,
        status: StatusCell,
        events: mpsc::Sender<LinkEvent>,
    ) -> Connection {
        Connection {
            dialer,
            status,
            events,
        }
    }

    /// Connects, reconnects and reports until `shutdown`, until the agent stops listening,
    /// or until the hub refused the credentials too often in a row.
    pub(crate) async fn run(self, shutdown: CancellationToken) -> ConnectionEnd {
        let end = tokio::select! {
            () = shutdown.cancelled() => ConnectionEnd::Stopped,
            end = self.run_links() => end,
        };
        self.status
            .update(|s| s.connection = ConnectionState::Stopped);
        end
    }

    async fn run_links(&self) -> ConnectionEnd {
        let mut backoff = Backoff::new(self.dialer.config.backoff);
        let mut delay = Duration::ZERO;
        let mut refusals = 0;
        for link in 1.. {
            if !delay.is_zero() {
                self.status
                    .update(|s| s.connection = ConnectionState::Backoff);
                tokio::time::sleep(delay).await;
            }
            self.status.update(|s| {
                s.connection = ConnectionState::Connecting;
                s.connect_attempts += 1;
            });
            let (client, mut eventloop, renew_after) = self.dialer.dial();
            let Some(end) = self.drive(link, &client, &mut eventloop, renew_after).await else {
                return ConnectionEnd::Stopped;
            };
            drop(eventloop);
            if end.connected && self.events.send(LinkEvent::Down { link }).await.is_err() {
                return ConnectionEnd::Stopped;
            }
            refusals = if end.credentials_refused {
                refusals + 1
            } else {
                0
            };
            if self
                .dialer
                .config
                .refusals_before_giving_up
                .is_some_and(|limit| refusals >= limit)
            {
                tracing::error!(
                    link,
                    refusals,
                    reason = %end.reason,
                    "the hub refuses this device's credentials: giving them up"
                );
                return ConnectionEnd::CredentialsRefused;
            }
            delay = if end.planned {
                tracing::info!(link, "reconnecting with fresh credentials");
                backoff.reset();
                Duration::ZERO
            } else {
                if end.connected {
                    backoff.reset();
                }
                let delay = backoff.next_delay();
                tracing::warn!(link, reason = %end.reason, ?delay, "MQTT connection lost; retrying");
                self.status
                    .update(|s| s.last_error = Some(format!("mqtt: {}", end.reason)));
                delay
            };
        }
        ConnectionEnd::Stopped
    }

    /// Polls one link until it fails; `None` if the agent stopped listening.
    async fn drive(
        &self,
        link: u64,
        client: &AsyncClient,
        eventloop: &mut EventLoop,
        renew_after: Option<Duration>,
    ) -> Option<LinkEnd> {
        let mut connected = false;
        let mut planned = false;
        let publisher = Publisher {
            client: client.clone(),
            inflight: Arc::default(),
        };
        // The twin and methods exist on IoT Hub only.
        let cloud = self
            .dialer
            .config
            .auth
            .hub_host()
            .is_some()
            .then(|| CloudLink::new(client.clone()));
        // Ends with the link (dropped on return).
        let mut _renewal = None;
        loop {
            let event = match eventloop.poll().await {
                Ok(event) => event,
                Err(err) => {
                    let credentials_refused = matches!(
                        err,
                        ConnectionError::ConnectionRefused(
                            ConnectReturnCode::NotAuthorized
                                | ConnectReturnCode::BadUserNamePassword
                        )
                    );
                    return Some(LinkEnd {
                        connected,
                        planned,
                        credentials_refused,
                        reason: err.to_string(),
                    });
                }
            };
            let report = match event {
                Event::Incoming(Incoming::ConnAck(_)) => {
                    connected = true;
                    self.status.update(|s| {
                        s.connection = ConnectionState::Connected;
                        s.connections += 1;
                    });
                    tracing::info!(link, "MQTT connected");
                    _renewal = renew_after.map(|after| renew_later(client.clone(), after));
                    if let Some(cloud) = &cloud {
                        cloud.subscribe();
                    }
                    LinkEvent::Up {
                        link,
                        publisher: publisher.clone(),
                    }
                }
                Event::Outgoing(Outgoing::Disconnect) => {
                    planned = true;
                    continue;
                }
                Event::Incoming(Incoming::SubAck(ack)) => {
                    let Some(cloud) = &cloud else { continue };
                    let granted = ack
                        .return_codes
                        .iter()
                        .all(|code| matches!(code, SubscribeReasonCode::Success(_)));
                    if !granted {
                        tracing::warn!(
                            link,
                            "the hub refused the twin and method topics (a basic tier hub?): the agent keeps its local settings"
                        );
                        continue;
                    }
                    cloud.read_twin();
                    LinkEvent::Cloud {
                        link,
                        event: CloudEvent::Ready(cloud.clone()),
                    }
                }
                Event::Incoming(Incoming::Publish(publish)) => {
                    match cloud.as_ref().and_then(|cloud| cloud.incoming(&publish)) {
                        Some(event) => LinkEvent::Cloud { link, event },
                        None => continue,
                    }
                }
                other => match publisher.on_event(&other) {
                    Some(record) => LinkEvent::Acked { link, record },
                    None => continue,
                },
            };
            if self.events.send(report).await.is_err() {
                return None;
            }
        }
    }
}

/// Closes the link after `after`, so that it reopens with fresh credentials.
fn renew_later(client: AsyncClient, after: Duration) -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(tokio::spawn(async move {
        tokio::time::sleep(after).await;
        // The link may be gone already; then there is nothing to renew.
        let _ = client.disconnect().await;
    }))
}

#[cfg(test)]
mod tests;
