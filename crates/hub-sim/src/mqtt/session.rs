//! One device connection after TLS (and WebSocket) setup: CONNECT and its decision, then
//! publishes (telemetry to the partitions, `$iothub/` twin and method topics to
//! [`crate::hub::twin::device`]), subscriptions, pings and the publishes the hub queues for the
//! session (desired notifications, method requests) until the device leaves or the hub
//! closes the connection (a rule broken, the token expired, the same device connected again, or the
//! drop-all fault). A CONNECT whose user name names a registration goes to the provisioning
//! service ([`crate::dps`]) instead.

use super::connect::authenticate;
use super::topic::{apply_properties, may_subscribe, telemetry_properties};
use crate::dps::protocol::registration_login;
use crate::dps::service::Dps;
use crate::hub::Hub;
use crate::hub::Subscription;
use crate::hub::twin::Outbound;
use crate::mqtt_codec::{MAX_PAYLOAD, ReadError, read_packet, write};
use crate::partitions::Incoming;
use crate::sas::now_secs;
use crate::tls::thumbprint;
use bytes::BytesMut;
use rumqttc::mqttbytes::QoS;
use rumqttc::mqttbytes::v4::{
    ConnAck, ConnectReturnCode, Packet, PingResp, PubAck, Publish, SubAck, SubscribeReasonCode,
    UnsubAck,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// How long a new connection has to send CONNECT.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Publishes the hub may queue for one session (desired notifications, method requests);
/// a session that lets it fill is closed.
const OUTBOUND_QUEUE: usize = 64;

/// What a subscription filter subscribes to, of what the hub sends unasked.
fn subscription_of(filter: &str) -> Option<Subscription> {
    if filter.starts_with("$iothub/twin/PATCH/properties/desired/") {
        Some(Subscription::Desired)
    } else if filter.starts_with("$iothub/methods/POST/") {
        Some(Subscription::Methods)
    } else {
        None
    }
}

/// Writes a publish from the hub (QoS 0: the device reads its twin after a reconnection).
async fn write_outbound<W: AsyncWrite + Unpin>(
    writer: &mut W,
    message: Outbound,
) -> std::io::Result<()> {
    let publish = Publish::from_bytes(message.topic, QoS::AtMostOnce, message.payload);
    write(writer, |b| publish.write(b)).await
}

/// Writes the PUBACKs of the oldest unacknowledged publishes whose events are readable
/// (durable, with a data directory): every sequence number below `readable`.
async fn ack_readable<W: AsyncWrite + Unpin>(
    writer: &mut W,
    unacked: &mut VecDeque<(u16, i64)>,
    readable: i64,
) -> std::io::Result<()> {
    let mut out = BytesMut::new();
    while let Some(&(pkid, sequence)) = unacked.front() {
        if sequence >= readable {
            break;
        }
        PubAck::new(pkid)
            .write(&mut out)
            .map_err(std::io::Error::other)?;
        unacked.pop_front();
    }
    if out.is_empty() {
        return Ok(());
    }
    writer.write_all(&out).await?;
    writer.flush().await
}

/// Why the hub ended a connection (counted under `connections_refused`).
fn close_reason(e: ReadError) -> &'static str {
    match e {
        ReadError::Closed => "",
        ReadError::TooLarge => "payload_too_large",
        ReadError::Malformed => "malformed_packet",
    }
}

/// Serves one device (or registration) connection. `client_chain` is the TLS client
/// certificate chain presented, leaf first (DER), empty if none.
pub(crate) async fn serve<S>(hub: Arc<Hub>, dps: Arc<Dps>, stream: S, client_chain: Vec<Vec<u8>>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let connect =
        match tokio::time::timeout(CONNECT_TIMEOUT, read_packet(&mut reader, &mut buf)).await {
            Ok(Ok(Packet::Connect(connect))) => connect,
            _ => {
                hub.counters.add("connections_refused", "no_connect", 1);
                return;
            }
        };
    let registration = connect
        .login
        .as_ref()
        .and_then(|login| registration_login(&login.username));
    if registration.is_some() {
        return crate::dps::session::serve(&dps, reader, writer, buf, connect, client_chain).await;
    }
    let client_cert = client_chain.first().map(|leaf| thumbprint(leaf));
    let decision = authenticate(
        &hub.registry,
        &hub.host,
        &connect.client_id,
        connect.login.as_ref(),
        client_cert.as_deref(),
        now_secs(),
    );
    let auth = match decision {
        Ok(auth) => auth,
        Err(refusal) => {
            hub.counters.add("connections_refused", refusal.reason, 1);
            tracing::info!(client = %connect.client_id, reason = refusal.reason, "connection refused");
            let _ = write(&mut writer, |b| ConnAck::new(refusal.code, false).write(b)).await;
            return;
        }
    };
    let (outbound, mut outbound_rx) = tokio::sync::mpsc::channel(OUTBOUND_QUEUE);
    let (conn_id, kicked, subscriptions) = hub.sessions.register(&auth.device_id, outbound);
    if write(&mut writer, |b| {
        ConnAck::new(ConnectReturnCode::Success, false).write(b)
    })
    .await
    .is_err()
    {
        hub.sessions.unregister(&auth.device_id, conn_id);
        return;
    }
    hub.counters.add("connections_accepted", "", 1);
    tracing::debug!(device = %auth.device_id, "device connected");
    hub.twins.touch(&auth.device_id);
    hub.events
        .connection_state(&hub.partitions, &auth.device_id, true);

    let device: Arc<str> = auth.device_id.as_str().into();
    let expiry = auth.expiry.map(|se| {
        let left = UNIX_EPOCH + Duration::from_secs(se);
        let left = left
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        tokio::time::Instant::now() + left
    });
    let keep_alive = match connect.keep_alive {
        0 => None,
        secs => Some(Duration::from_millis(u64::from(secs) * 1500)),
    };
    let mut drops = hub.faults.device_drops();
    // A QoS 1 publish is acknowledged once its event is readable (durable, with a data
    // directory); the device's later publishes are read meanwhile, so one write to disk
    // covers many of them.
    let partition = hub
        .partitions
        .get(hub.partitions.partition_of(&device))
        .expect("partition_of names a partition");
    let mut readable = partition.watch();
    let mut unacked: VecDeque<(u16, i64)> = VecDeque::new();
    // The sequence number of this session's last telemetry event: a twin or method publish
    // is acknowledged after it, as MQTT keeps PUBACKs in publish order.
    let mut last_sequence = -1;
    let far = tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 86_400);
    // Keep-alive counts the device's packets only, not what the hub writes to it.
    let mut last_inbound = tokio::time::Instant::now();
    let reason: &'static str = loop {
        let idle_deadline = keep_alive.map_or(far, |k| last_inbound + k);
        let packet = tokio::select! {
            _ = kicked.cancelled() => break if subscriptions.overflowed() {
                "outbound_queue_full"
            } else {
                "replaced_by_new_connection"
            },
            _ = drops.changed() => break "dropped_by_fault",
            _ = tokio::time::sleep_until(expiry.unwrap_or(far)) => break "token_expired",
            _ = tokio::time::sleep_until(idle_deadline) => break "keep_alive_timeout",
            Some(message) = outbound_rx.recv() => {
                if write_outbound(&mut writer, message).await.is_err() {
                    break "";
                }
                continue;
            }
            changed = readable.changed(), if !unacked.is_empty() => {
                let next = *readable.borrow_and_update();
                if changed.is_err() || ack_readable(&mut writer, &mut unacked, next).await.is_err() {
                    break "";
                }
                continue;
            }
            packet = read_packet(&mut reader, &mut buf) => packet,
        };
        let packet = match packet {
            Ok(packet) => packet,
            Err(e) => break close_reason(e),
        };
        last_inbound = tokio::time::Instant::now();
        let written = match packet {
            Packet::Publish(publish) => {
                if publish.qos == QoS::ExactlyOnce {
                    hub.counters.add("messages_refused", "qos2", 1);
                    break "qos2";
                }
                if publish.payload.len() > MAX_PAYLOAD {
                    hub.counters.add("messages_refused", "payload_too_large", 1);
                    break "payload_too_large";
                }
                if publish.topic.starts_with("$iothub/") {
                    let answer = match crate::hub::twin::device::handle(
                        &hub,
                        &device,
                        &publish.topic,
                        publish.payload,
                    ) {
                        Ok(answer) => answer,
                        Err(e) => {
                            hub.counters.add("messages_refused", e.reason(), 1);
                            break e.reason();
                        }
                    };
                    if let Some(answer) = answer
                        && write_outbound(&mut writer, answer).await.is_err()
                    {
                        break "";
                    }
                    if publish.qos == QoS::AtLeastOnce {
                        unacked.push_back((publish.pkid, last_sequence));
                        let next = *readable.borrow_and_update();
                        if ack_readable(&mut writer, &mut unacked, next).await.is_err() {
                            break "";
                        }
                    }
                    continue;
                }
                let pairs = match telemetry_properties(&publish.topic, &device) {
                    Ok(pairs) => pairs,
                    Err(_) => {
                        hub.counters.add("messages_refused", "topic", 1);
                        break "topic";
                    }
                };
                let mut message = Incoming::new(&device, publish.payload);
                message.device_id = device.clone();
                message.auth = auth.method;
                apply_properties(&mut message, pairs);
                if hub.faults.admit().await {
                    hub.counters.add("messages_throttled", "", 1);
                }
                let (_, event) = hub.partitions.route(message);
                last_sequence = event.sequence_number;
                hub.counters.add("messages_accepted", "", 1);
                if publish.qos == QoS::AtLeastOnce {
                    unacked.push_back((publish.pkid, event.sequence_number));
                    let next = *readable.borrow_and_update();
                    ack_readable(&mut writer, &mut unacked, next).await
                } else {
                    Ok(())
                }
            }
            Packet::Subscribe(subscribe) => {
                let codes = subscribe
                    .filters
                    .iter()
                    .map(|f| {
                        if may_subscribe(&f.path, &device) {
                            if let Some(which) = subscription_of(&f.path) {
                                hub.sessions.subscribe(&subscriptions, which, true);
                            }
                            SubscribeReasonCode::Success(match f.qos {
                                QoS::AtMostOnce => QoS::AtMostOnce,
                                _ => QoS::AtLeastOnce,
                            })
                        } else {
                            SubscribeReasonCode::Failure
                        }
                    })
                    .collect();
                write(&mut writer, |b| SubAck::new(subscribe.pkid, codes).write(b)).await
            }
            Packet::Unsubscribe(unsubscribe) => {
                for which in unsubscribe.topics.iter().filter_map(|t| subscription_of(t)) {
                    hub.sessions.subscribe(&subscriptions, which, false);
                }
                write(&mut writer, |b| UnsubAck::new(unsubscribe.pkid).write(b)).await
            }
            Packet::PingReq => write(&mut writer, |b| PingResp.write(b)).await,
            Packet::PubAck(_) => Ok(()),
            Packet::Disconnect => break "",
            _ => break "protocol_violation",
        };
        if written.is_err() {
            break "";
        }
    };
    hub.sessions.unregister(&device, conn_id);
    hub.methods.abandon(&device, conn_id);
    hub.twins.touch(&device);
    hub.events.connection_state(&hub.partitions, &device, false);
    if !reason.is_empty() {
        hub.counters.add("connections_refused", reason, 1);
        tracing::info!(device = %device, reason, "connection closed by the hub");
    }
    let _ = writer.shutdown().await;
}
