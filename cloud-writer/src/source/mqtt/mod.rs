//! The MQTT source: any MQTT 5 broker (Mosquitto 2.x, or a bridge of IoT Hub traffic).
//!
//! Subscribes at QoS 1 to `devices/+/messages/events/#` (as `$share/{group}/...` when a
//! share group is configured, so that replicas split the load) with a persistent session
//! (`clean_start = false` and a session that does not expire, a fixed client id per
//! replica). PUBACKs are manual and in order: a message is acknowledged only when it and
//! every earlier message of the same connection are final, so the broker redelivers
//! whatever was not written after a writer crash or a broker restart. The device identity
//! is the topic's second segment.
//!
//! The event loop is polled all the time, also while the pipeline is full, so keep-alive
//! pings and PUBACKs flow and a slow Cosmos DB does not make the broker drop the session
//! (and deliver everything again). The writer, not the broker's configuration, bounds
//! what arrives meanwhile: the CONNECT's Receive Maximum ([`MqttSettings::receive_maximum`])
//! is how many unacknowledged messages the broker may send, and since every message stays
//! unacknowledged until its outcome is final, messages that do not fit in the byte-bounded
//! queue wait here, in order, at most that many of them, each at most
//! [`MAX_INCOMING_PACKET`] bytes (which the CONNECT announces as its Maximum Packet Size).
//! A broker that sends more than the Receive Maximum (Mosquitto before 2.0.13 does once
//! acknowledgements flow while a backlog is queued: each PUBACK of the oldest message lets
//! up to another Receive Maximum in) is warned about, and the source stops reading while
//! more than `SOURCE_MAX_BYTES` wait here, so memory stays bounded at the cost of
//! keep-alive should Cosmos DB stall just then.
//! A PUBACK is only ever sent on the connection that delivered its message: after a
//! reconnect the broker may have given the packet id to another message.
//!
//! This file reads and acknowledges; `connect` holds the settings and the CONNECT they
//! make, and which refusals of the connection are retried.

mod connect;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use retry_backoff::Backoff;
use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::v5::{Packet, Publish, SubscribeReasonCode};
use rumqttc::v5::mqttbytes::{self, QoS};
use rumqttc::v5::{AsyncClient, ConnectionError, Event, Request, StateError};
use tokio::sync::mpsc;

use super::queue::{QueueSender, Reservation, message_bytes};
use super::{
    Ack, AckQueue, AckSink, Message, RECONNECT_BACKOFF, Source, SourceControl, SourceError,
};
use crate::metrics::{DropReason, Metrics};
#[cfg(feature = "test-support")]
pub use connect::TOPIC_FILTER;
pub use connect::{MAX_INCOMING_PACKET, MqttSettings};
use connect::{REQUEST_CHANNEL, options, refusal_passes};

/// The device id of an IoT Hub device-to-cloud topic `devices/{id}/messages/events/...`.
pub fn identity_of_topic(topic: &str) -> Option<&str> {
    let rest = topic.strip_prefix("devices/")?;
    let (id, rest) = rest.split_once('/')?;
    (rest.starts_with("messages/events") && !id.is_empty()).then_some(id)
}

/// The MQTT source.
pub struct MqttSource {
    settings: MqttSettings,
    metrics: Arc<Metrics>,
}

impl MqttSource {
    /// A source with these settings, reporting to `metrics`.
    pub fn new(settings: MqttSettings, metrics: Arc<Metrics>) -> Self {
        MqttSource { settings, metrics }
    }
}

/// The in-order PUBACK queue of the current connection.
struct Acker {
    /// The current connection's number and its packet ids, in order of arrival.
    queue: Mutex<(u64, AckQueue<u16>)>,
    /// PUBACKs to send, in order, with the number of the connection they belong to.
    tx: mpsc::UnboundedSender<(u64, u16)>,
    metrics: Arc<Metrics>,
}

impl Acker {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, AckQueue<u16>)> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection ended: forget its pending messages (the broker delivers them
    /// again) and start counting the next one. Returns the new connection's number.
    fn next_connection(&self) -> u64 {
        let mut queue = self.lock();
        queue.0 += 1;
        queue.1.reset();
        self.metrics.set_ack_lag("mqtt", 0);
        queue.0
    }

    /// Enters a packet id of the current connection; returns its index and how many
    /// messages of the connection are now unacknowledged.
    fn push(&self, pkid: u16) -> (u64, usize) {
        let mut queue = self.lock();
        let index = queue.1.push(pkid);
        let unacknowledged = queue.1.len();
        self.metrics.set_ack_lag("mqtt", unacknowledged);
        (index, unacknowledged)
    }
}

impl AckSink for Acker {
    fn done(&self, index: u64) {
        let mut queue = self.lock();
        let connection = queue.0;
        for pkid in queue.1.complete(index) {
            // The receiver only goes when the source has stopped; the broker redelivers.
            let _ = self.tx.send((connection, pkid));
        }
        self.metrics.set_ack_lag("mqtt", queue.1.len());
    }
}

impl Source for MqttSource {
    fn kind(&self) -> &'static str {
        "mqtt"
    }

    fn run(
        self: Box<Self>,
        tx: QueueSender,
        control: SourceControl,
    ) -> BoxFuture<'static, Result<(), SourceError>> {
        run(*self, tx, control).boxed()
    }
}

/// A PUBACK request for `pkid`.
fn puback(pkid: u16) -> Publish {
    let mut publish = Publish::new("", QoS::AtLeastOnce, Vec::new(), None);
    publish.pkid = pkid;
    publish
}

/// Messages received but not yet in the queue (it is full), in order. The event loop
/// goes on being polled meanwhile, so pings and PUBACKs flow; the Receive Maximum
/// bounds how many arrive.
#[derive(Default)]
struct Waiting {
    messages: VecDeque<Message>,
    bytes: usize,
}

impl Waiting {
    fn push(&mut self, message: Message) {
        self.bytes += message_bytes(&message);
        self.messages.push_back(message);
    }

    fn pop(&mut self) -> Option<Message> {
        let message = self.messages.pop_front()?;
        self.bytes -= message_bytes(&message);
        Some(message)
    }

    fn front_bytes(&self) -> Option<usize> {
        self.messages.front().map(message_bytes)
    }

    /// Forgets every waiting message (their connection ended: they come again).
    fn clear(&mut self) {
        self.messages.clear();
        self.bytes = 0;
    }
}

async fn run(
    source: MqttSource,
    tx: QueueSender,
    control: SourceControl,
) -> Result<(), SourceError> {
    let MqttSource { settings, metrics } = source;
    let (client, mut eventloop) = AsyncClient::new(options(&settings), REQUEST_CHANNEL);
    let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<(u64, u16)>();
    let acker = Arc::new(Acker {
        queue: Mutex::new((0, AckQueue::default())),
        tx: ack_tx,
        metrics: metrics.clone(),
    });
    let filter = settings.filter();
    let mut backoff = Backoff::new(RECONNECT_BACKOFF);
    // The connection whose PUBACKs may be sent; 0 before the first CONNACK.
    let mut connection = 0;
    // PUBACKs of the current connection not yet handed to the event loop.
    let mut acks: VecDeque<u16> = VecDeque::new();
    let mut waiting = Waiting::default();
    // Above this, the event loop is no longer polled until the queue takes some: only a
    // broker that sends more than the Receive Maximum gets there (see the README).
    let waiting_limit = tx.budget();
    let mut warned_window = false;
    // Dropped on stop, which ends the pipeline's input.
    let mut tx = Some(tx);
    tracing::info!(host = %settings.host, port = settings.port, client_id = %settings.client_id, %filter, "connecting to the MQTT broker");
    let result = loop {
        // Hand the PUBACKs to the event loop as far as its request channel takes them.
        while let Some(&pkid) = acks.front() {
            if client.try_ack(&puback(pkid)).is_err() {
                break;
            }
            acks.pop_front();
        }
        let poll_events = waiting.bytes < waiting_limit;
        let front_bytes = waiting.front_bytes();
        let event = tokio::select! {
            biased;
            () = control.drained.cancelled() => break Ok(()),
            () = control.stop.cancelled(), if tx.is_some() => {
                tx = None;
                // Not acknowledged: the broker delivers them again later.
                waiting.clear();
                tracing::info!("MQTT source: no longer taking messages");
                continue;
            }
            Some((of, pkid)) = ack_rx.recv() => {
                if of == connection {
                    acks.push_back(pkid);
                }
                continue;
            }
            reservation = reserve(tx.as_ref(), front_bytes), if front_bytes.is_some() && tx.is_some() => {
                match reservation.and_then(|r| waiting.pop().map(|m| (r, m))) {
                    Some((reservation, message)) => {
                        if reservation.send(message).is_err() {
                            break Ok(());
                        }
                    }
                    None => break Ok(()),
                }
                continue;
            }
            event = eventloop.poll(), if poll_events => event,
        };
        match event {
            Ok(Event::Incoming(Packet::ConnAck(connack))) => {
                backoff.reset();
                // Nothing of an earlier connection goes out on this one: its PUBACKs
                // would name packet ids the broker may have given to other messages,
                // and its messages not yet taken come again.
                connection = acker.next_connection();
                acks.clear();
                waiting.clear();
                eventloop.state.events.clear();
                eventloop
                    .pending
                    .retain(|request| !matches!(request, Request::PubAck(_)));
                tracing::info!(session_present = connack.session_present, "MQTT connected");
                // The request channel is drained by this loop: subscribe from another task.
                let client = client.clone();
                let filter = filter.clone();
                tokio::spawn(async move {
                    if let Err(err) = client.subscribe(filter, QoS::AtLeastOnce).await {
                        tracing::warn!(error = %err, "MQTT subscribe request failed");
                    }
                });
            }
            Ok(Event::Incoming(Packet::SubAck(suback))) => {
                let granted = suback
                    .return_codes
                    .iter()
                    .all(|code| matches!(code, SubscribeReasonCode::Success(_)));
                if !granted {
                    break Err(SourceError::Failed(format!(
                        "the broker refused the subscription to {filter}: {:?}",
                        suback.return_codes
                    )));
                }
                // Ready once subscribed: messages published from now on reach this writer.
                metrics.set_source_connected(true);
                tracing::info!(%filter, "MQTT subscribed");
            }
            Ok(Event::Incoming(Packet::Publish(publish))) => {
                if tx.is_none() {
                    // Not acknowledged: the broker delivers it again later.
                    continue;
                }
                let (index, unacknowledged) = acker.push(publish.pkid);
                if unacknowledged > usize::from(settings.receive_maximum) && !warned_window {
                    warned_window = true;
                    tracing::warn!(
                        unacknowledged,
                        receive_maximum = settings.receive_maximum,
                        "the broker sends more unacknowledged messages than the Receive Maximum allows (Mosquitto before 2.0.13 does once acknowledgements flow with a backlog queued): beyond SOURCE_MAX_BYTES waiting the source stops reading, and keep-alive can lapse while Cosmos DB is slow; use a broker that honours MQTT 5 flow control"
                    );
                }
                let Some(message) = message_of(&publish, &acker, index) else {
                    // Not a device-to-cloud topic: acknowledge so it does not come back.
                    metrics.dropped(DropReason::Unroutable);
                    tracing::warn!(topic = %String::from_utf8_lossy(&publish.topic), "message on an unexpected topic dropped");
                    acker.done(index);
                    continue;
                };
                metrics.received();
                waiting.push(message);
            }
            Ok(_) => {}
            Err(ConnectionError::ConnectionRefused(code)) if !refusal_passes(code) => {
                break Err(SourceError::Failed(format!(
                    "the broker refused the connection: {code:?}; a retry would be refused the same way (check the credentials, the client id and the broker's access rules)"
                )));
            }
            Err(err) => {
                metrics.set_source_connected(false);
                // The connection's unacknowledged messages come again on the next one.
                connection = acker.next_connection();
                acks.clear();
                waiting.clear();
                if control.stop.is_cancelled() {
                    break Ok(());
                }
                let delay = backoff.next_delay();
                if let ConnectionError::MqttState(StateError::Deserialization(
                    mqttbytes::Error::PayloadSizeLimitExceeded { pkt_size, .. },
                )) = &err
                {
                    tracing::error!(
                        size = pkt_size,
                        limit = MAX_INCOMING_PACKET,
                        retry_in = ?delay,
                        "the broker sent a packet over the Maximum Packet Size the writer announced (the 256 KiB wire limit plus topic); it holds the stream until removed: set the broker's max_packet_size (Mosquitto) so that devices cannot publish it"
                    );
                } else {
                    tracing::warn!(error = %err, retry_in = ?delay, "MQTT connection lost; reconnecting");
                }
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = control.drained.cancelled() => break Ok(()),
                }
            }
        }
    };
    // Send the PUBACKs of what became final, then disconnect (the persistent session
    // keeps the rest).
    while let Ok((of, pkid)) = ack_rx.try_recv() {
        if of == connection {
            acks.push_back(pkid);
        }
    }
    let flush = async {
        for pkid in acks {
            if client.ack(&puback(pkid)).await.is_err() {
                break;
            }
        }
        let _ = client.disconnect().await;
    };
    tokio::pin!(flush);
    let deadline = tokio::time::sleep(Duration::from_secs(5));
    tokio::pin!(deadline);
    let mut flushed = false;
    loop {
        tokio::select! {
            () = &mut deadline => break,
            () = &mut flush, if !flushed => flushed = true,
            event = eventloop.poll() => match event {
                Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_) => break,
                Ok(_) => {}
            },
        }
    }
    metrics.set_source_connected(false);
    result
}

/// Room in the queue for `bytes`; `None` once the queue is closed. Pending forever
/// without a queue (never polled then: its branch is disabled).
async fn reserve(tx: Option<&QueueSender>, bytes: Option<usize>) -> Option<Reservation> {
    match (tx, bytes) {
        (Some(tx), Some(bytes)) => tx.reserve(bytes).await.ok(),
        _ => std::future::pending().await,
    }
}

/// The message of a publish entered into the connection's ack queue at `index`; `None`
/// when its topic is not a device-to-cloud topic.
fn message_of(publish: &Publish, acker: &Arc<Acker>, index: u64) -> Option<Message> {
    let topic = std::str::from_utf8(&publish.topic).ok()?;
    let identity = identity_of_topic(topic)?.to_string();
    let sink: Arc<dyn AckSink> = acker.clone();
    let ack = if publish.qos == QoS::AtMostOnce {
        // Nothing to acknowledge; keep the queue moving.
        acker.done(index);
        Ack::none()
    } else {
        Ack::new(sink, index)
    };
    Some(Message {
        identity,
        payload: publish.payload.clone(),
        enqueued_time: None,
        received_at: Instant::now(),
        kind: Default::default(),
        ack,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_comes_from_the_topic() {
        assert_eq!(
            identity_of_topic("devices/drone-1/messages/events/"),
            Some("drone-1")
        );
        assert_eq!(
            identity_of_topic("devices/d:2/messages/events/$.ct=application%2Fjson"),
            Some("d:2")
        );
        assert_eq!(identity_of_topic("devices//messages/events/"), None);
        assert_eq!(identity_of_topic("devices/x/messages/devicebound/"), None);
        assert_eq!(identity_of_topic("other/x/messages/events/"), None);
    }
}
