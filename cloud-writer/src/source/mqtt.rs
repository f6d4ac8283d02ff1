//! The MQTT source: any MQTT 3.1.1 broker (Mosquitto, or a bridge of IoT Hub traffic).
//!
//! Subscribes at QoS 1 to `devices/+/messages/events/#` (as `$share/{group}/...` when a
//! share group is configured, so that replicas split the load) with a persistent session
//! (`clean_session = false`, a fixed client id per replica). PUBACKs are manual and in
//! order: a message is acknowledged only when it and every earlier message of the same
//! connection are final, so the broker redelivers whatever was not written after a
//! writer crash or a broker restart. The device identity is the topic's second segment.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use rumqttc::{AsyncClient, ConnectReturnCode, Event, MqttOptions, Packet, Publish, QoS};
use tokio::sync::mpsc;
use url::Url;

use super::{Ack, AckQueue, AckSink, Message, Source, SourceControl, SourceError};
use crate::metrics::Metrics;

/// The topic filter devices publish under (IoT Hub's device-to-cloud topic).
pub const TOPIC_FILTER: &str = "devices/+/messages/events/#";

/// Largest incoming packet accepted from the broker: above the wire limit, so that an
/// oversize message reaches the pipeline and is counted instead of closing the connection.
const MAX_INCOMING_PACKET: usize = 1024 * 1024;

/// Settings of the MQTT source.
#[derive(Debug, Clone)]
pub struct MqttSettings {
    /// Broker host.
    pub host: String,
    /// Broker port.
    pub port: u16,
    /// The client id: fixed per replica, so that its persistent session survives restarts.
    pub client_id: String,
    /// Shared subscription group (`$share/{group}/...`), for several replicas.
    pub share_group: Option<String>,
    /// Optional user name and password.
    pub credentials: Option<(String, crate::config::Secret)>,
    /// MQTT keep-alive.
    pub keep_alive: Duration,
}

impl MqttSettings {
    /// Settings for an `mqtt://[user:password@]host[:port]` URL.
    pub fn from_url(
        url: &Url,
        client_id: String,
        share_group: Option<String>,
    ) -> Result<Self, SourceError> {
        if url.scheme() != "mqtt" && url.scheme() != "tcp" {
            return Err(SourceError::Config(format!(
                "WRITER_SOURCE scheme '{}' is not mqtt://",
                url.scheme()
            )));
        }
        let host = url
            .host_str()
            .ok_or_else(|| SourceError::Config("WRITER_SOURCE mqtt:// URL has no host".into()))?
            .to_string();
        let credentials = (!url.username().is_empty()).then(|| {
            (
                url.username().to_string(),
                crate::config::Secret::new(url.password().unwrap_or_default()),
            )
        });
        Ok(MqttSettings {
            host,
            port: url.port().unwrap_or(1883),
            client_id,
            share_group,
            credentials,
            keep_alive: Duration::from_secs(30),
        })
    }

    /// The subscription filter: [`TOPIC_FILTER`], shared when a group is set.
    pub fn filter(&self) -> String {
        match &self.share_group {
            Some(group) => format!("$share/{group}/{TOPIC_FILTER}"),
            None => TOPIC_FILTER.to_string(),
        }
    }
}

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
    /// The current connection's packet ids, in order of arrival.
    queue: Mutex<AckQueue<u16>>,
    /// PUBACKs to send, in order.
    tx: mpsc::UnboundedSender<u16>,
    metrics: Arc<Metrics>,
}

impl AckSink for Acker {
    fn done(&self, index: u64) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        for pkid in queue.complete(index) {
            // The sender only fails when the source has stopped; the broker redelivers.
            let _ = self.tx.send(pkid);
        }
        self.metrics.set_ack_lag("mqtt", queue.len());
    }
}

impl Source for MqttSource {
    fn kind(&self) -> &'static str {
        "mqtt"
    }

    fn run(
        self: Box<Self>,
        tx: mpsc::Sender<Message>,
        control: SourceControl,
    ) -> BoxFuture<'static, Result<(), SourceError>> {
        run(*self, tx, control).boxed()
    }
}

fn options(settings: &MqttSettings) -> MqttOptions {
    let mut options = MqttOptions::new(&settings.client_id, &settings.host, settings.port);
    options
        .set_keep_alive(settings.keep_alive)
        .set_clean_session(false)
        .set_manual_acks(true)
        .set_max_packet_size(MAX_INCOMING_PACKET, 64 * 1024)
        .set_request_channel_capacity(4096);
    if let Some((user, password)) = &settings.credentials {
        options.set_credentials(user, password.expose());
    }
    options
}

async fn run(
    source: MqttSource,
    tx: mpsc::Sender<Message>,
    control: SourceControl,
) -> Result<(), SourceError> {
    let MqttSource { settings, metrics } = source;
    let (client, mut eventloop) = AsyncClient::new(options(&settings), 4096);
    let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<u16>();
    let acker = Arc::new(Acker {
        queue: Mutex::new(AckQueue::default()),
        tx: ack_tx,
        metrics: metrics.clone(),
    });
    // Sends PUBACKs; the event loop below carries them to the broker.
    let ack_client = client.clone();
    let ack_drained = control.drained.clone();
    let ack_task = tokio::spawn(async move {
        let send = |pkid: u16| {
            let mut publish = Publish::new("", QoS::AtLeastOnce, Vec::new());
            publish.pkid = pkid;
            let client = ack_client.clone();
            async move { client.ack(&publish).await.is_ok() }
        };
        loop {
            tokio::select! {
                pkid = ack_rx.recv() => match pkid {
                    Some(pkid) if send(pkid).await => {}
                    _ => break,
                },
                () = ack_drained.cancelled() => {
                    while let Ok(pkid) = ack_rx.try_recv() {
                        if !send(pkid).await {
                            break;
                        }
                    }
                    break;
                }
            }
        }
    });
    let filter = settings.filter();
    let mut backoff = Backoff::default();
    // Dropped on stop, which ends the pipeline's input.
    let mut tx = Some(tx);
    tracing::info!(host = %settings.host, port = settings.port, client_id = %settings.client_id, %filter, "connecting to the MQTT broker");
    let result = loop {
        let event = tokio::select! {
            biased;
            () = control.drained.cancelled() => break Ok(()),
            () = control.stop.cancelled(), if tx.is_some() => {
                tx = None;
                tracing::info!("MQTT source: no longer taking messages");
                continue;
            }
            event = eventloop.poll() => event,
        };
        match event {
            Ok(Event::Incoming(Packet::ConnAck(connack))) => {
                if connack.code != ConnectReturnCode::Success {
                    break Err(SourceError::Failed(format!(
                        "the broker refused the connection: {:?}",
                        connack.code
                    )));
                }
                backoff.reset();
                // Unacknowledged messages of the previous connection come again.
                acker
                    .queue
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .reset();
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
                    .all(|code| matches!(code, rumqttc::SubscribeReasonCode::Success(_)));
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
                let Some(sender) = &tx else {
                    // Not acknowledged: the broker delivers it again later.
                    continue;
                };
                let Some(message) = message_of(&publish, &acker) else {
                    // Not a device-to-cloud topic: acknowledge so it does not come back.
                    let index = acker
                        .queue
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(publish.pkid);
                    metrics.dropped("unroutable");
                    tracing::warn!(topic = %publish.topic, "message on an unexpected topic dropped");
                    acker.done(index);
                    continue;
                };
                metrics.received();
                if sender.send(message).await.is_err() {
                    break Ok(());
                }
            }
            Ok(_) => {}
            Err(err) => {
                metrics.set_source_connected(false);
                if control.stop.is_cancelled() {
                    break Ok(());
                }
                let delay = backoff.next();
                tracing::warn!(error = %err, retry_in = ?delay, "MQTT connection lost; reconnecting");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = control.drained.cancelled() => break Ok(()),
                }
            }
        }
    };
    // Send the queued PUBACKs, then disconnect (the persistent session keeps the rest).
    let flush = async {
        let _ = ack_task.await;
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
                Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect)) | Err(_) => break,
                Ok(_) => {}
            },
        }
    }
    metrics.set_source_connected(false);
    result
}

/// The message of a publish, entered into the connection's ack queue.
fn message_of(publish: &Publish, acker: &Arc<Acker>) -> Option<Message> {
    let identity = identity_of_topic(&publish.topic)?.to_string();
    let index = acker
        .queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(publish.pkid);
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
        ack,
    })
}

/// Exponential reconnect backoff with full jitter, 100 ms to 10 s.
#[derive(Debug, Default)]
struct Backoff {
    attempt: u32,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let cap = 100u64.saturating_mul(1 << self.attempt.min(7)).min(10_000);
        self.attempt += 1;
        Duration::from_millis(rand::random_range(cap / 2..=cap))
    }

    fn reset(&mut self) {
        self.attempt = 0;
    }
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

    #[test]
    fn shared_filter_names_the_group() {
        let url = Url::parse("mqtt://user:pw@broker:1884").unwrap();
        let mut settings = MqttSettings::from_url(&url, "w-1".into(), None).unwrap();
        assert_eq!(settings.port, 1884);
        assert_eq!(settings.filter(), "devices/+/messages/events/#");
        settings.share_group = Some("writers".into());
        assert_eq!(
            settings.filter(),
            "$share/writers/devices/+/messages/events/#"
        );
        assert!(!format!("{settings:?}").contains("pw"));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let mut backoff = Backoff::default();
        let first = backoff.next();
        assert!(first <= Duration::from_millis(100));
        for _ in 0..20 {
            assert!(backoff.next() <= Duration::from_secs(10));
        }
        backoff.reset();
        assert!(backoff.next() <= Duration::from_millis(100));
    }
}
