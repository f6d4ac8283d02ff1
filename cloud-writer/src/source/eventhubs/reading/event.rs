//! How a received event becomes a [`Message`]. Its identity is the
//! `iothub-connection-device-id` system property (the identity the hub authenticated),
//! never the payload; its enqueued time is the hub's (`x-opt-enqueued-time`). The fields
//! `iothub-message-source` annotation and the events' application properties tell positions
//! from the connection state and twin change events IoT Hub routes ([`MessageKind`]). The fields
//! are read from the raw AMQP message, not through the SDK's `system_properties()` and
//! `event_data()`, which copy every annotation and property into maps per event.

use std::time::{Instant, SystemTime};

use azure_core_amqp::AmqpMessage;
use azure_core_amqp::message::{AmqpAnnotationKey, AmqpMessageBody};
use azure_messaging_eventhubs::models::{AmqpSimpleValue, AmqpValue, ReceivedEventData};
use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::source::eventhubs::checkpointing::checkpoints::{EventPosition, PartitionQueue};
use crate::source::{Ack, HubEvent, Message, MessageKind};

/// The system property carrying the device identity IoT Hub authenticated.
pub const DEVICE_ID_PROPERTY: &str = "iothub-connection-device-id";
/// The system property naming the message source (`Telemetry`, `deviceConnectionStateEvents`, ...).
pub const MESSAGE_SOURCE_PROPERTY: &str = "iothub-message-source";

/// The fields of one received event the writer uses, as the SDK presents them.
#[derive(Debug, Clone, PartialEq)]
pub struct EventParts {
    /// The partition it came from.
    pub partition_id: String,
    /// Its sequence number in the partition.
    pub sequence_number: Option<i64>,
    /// Its offset in the partition.
    pub offset: Option<String>,
    /// When the hub enqueued it.
    pub enqueued_time: Option<SystemTime>,
    /// The [`DEVICE_ID_PROPERTY`] system property (message annotation), when a string.
    pub device_id: Option<String>,
    /// The body (a single binary section, as the SDK's `EventData` takes it).
    pub body: Option<Bytes>,
    /// What the event carries ([`MESSAGE_SOURCE_PROPERTY`] and application properties).
    pub kind: MessageKind,
}

/// Why an event cannot become a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// No `iothub-connection-device-id`: not a device-to-cloud message of IoT Hub.
    #[error(
        "event {sequence_number:?} of partition {partition_id} has no {DEVICE_ID_PROPERTY} system property"
    )]
    NoIdentity {
        /// The partition.
        partition_id: String,
        /// The event's sequence number.
        sequence_number: Option<i64>,
    },
    /// No sequence number: the event's position cannot be checkpointed.
    #[error("event of partition {0} has no sequence number")]
    NoSequenceNumber(String),
}

/// The text of a string-valued AMQP value (string or symbol).
fn text_of_value(value: &AmqpValue) -> Option<String> {
    match value {
        AmqpValue::String(text) => Some(text.clone()),
        AmqpValue::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}

/// The text of the message annotation `name`, when a string or symbol.
fn annotation_text(message: &AmqpMessage, name: &str) -> Option<String> {
    message
        .message_annotations
        .as_ref()?
        .0
        .iter()
        .find_map(|(key, value)| match key {
            AmqpAnnotationKey::Symbol(symbol) if symbol.0 == name => Some(value),
            _ => None,
        })
        .and_then(text_of_value)
}

/// The text of the application property `name`, when a string or symbol.
fn property_text(message: &AmqpMessage, name: &str) -> Option<String> {
    match message.application_properties.as_ref()?.0.get(name)? {
        AmqpSimpleValue::String(text) => Some(text.clone()),
        AmqpSimpleValue::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}

impl EventParts {
    /// The parts of an event the SDK received from partition `partition_id`.
    pub fn of_received(partition_id: &str, event: &ReceivedEventData) -> Self {
        let message = event.raw_amqp_message();
        let body = match &message.body {
            AmqpMessageBody::Binary(sections) if sections.len() == 1 => {
                Some(Bytes::copy_from_slice(&sections[0]))
            }
            _ => None,
        };
        EventParts {
            partition_id: partition_id.to_owned(),
            sequence_number: event.sequence_number(),
            offset: event.offset().clone(),
            enqueued_time: event.enqueued_time(),
            device_id: annotation_text(message, DEVICE_ID_PROPERTY),
            body,
            kind: MessageKind::of_source(
                annotation_text(message, MESSAGE_SOURCE_PROPERTY).as_deref(),
                || HubEvent {
                    op_type: property_text(message, "opType"),
                    operation_timestamp: property_text(message, "operationTimestamp"),
                    module_id: property_text(message, "moduleId"),
                },
            ),
        }
    }

    /// The message of this event, whose [`Ack`] advances `queue`'s checkpoint. An event
    /// without identity is entered too (and its outcome is final at once: it is dropped
    /// and counted by the caller), so that it does not hold the checkpoint back.
    pub fn into_message(self, queue: &PartitionQueue) -> Result<Message, (EventError, Ack)> {
        let Some(sequence_number) = self.sequence_number else {
            return Err((EventError::NoSequenceNumber(self.partition_id), Ack::none()));
        };
        let enqueued_time = self.enqueued_utc();
        let ack = queue.enter(EventPosition {
            sequence_number,
            offset: self.offset,
        });
        let Some(identity) = self.device_id.filter(|id| !id.is_empty()) else {
            return Err((
                EventError::NoIdentity {
                    partition_id: self.partition_id,
                    sequence_number: Some(sequence_number),
                },
                ack,
            ));
        };
        Ok(Message {
            identity,
            payload: self.body.unwrap_or_default(),
            enqueued_time,
            received_at: Instant::now(),
            kind: self.kind,
            ack,
        })
    }

    /// The enqueued time as UTC.
    pub fn enqueued_utc(&self) -> Option<DateTime<Utc>> {
        self.enqueued_time.map(DateTime::<Utc>::from)
    }
}

/// Received events shaped as the SDK presents them, for tests.
#[cfg(test)]
pub(crate) mod test_events {
    use std::time::{Duration, SystemTime};

    use azure_core_amqp::message::{AmqpAnnotations, AmqpApplicationProperties, AmqpMessageBody};
    use azure_core_amqp::{AmqpMessage, AmqpSymbol, AmqpTimestamp};
    use azure_messaging_eventhubs::models::{AmqpSimpleValue, AmqpValue};

    use bytes::Bytes;

    use super::{DEVICE_ID_PROPERTY, EventParts, MessageKind};

    /// An event shaped as IoT Hub delivers it on the built-in endpoint.
    pub(crate) fn event(partition: &str, seq: i64, device: Option<&str>) -> EventParts {
        EventParts {
            partition_id: partition.into(),
            sequence_number: Some(seq),
            offset: Some(format!("{}", seq * 512)),
            enqueued_time: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_338_903_100)),
            device_id: device.map(str::to_owned),
            body: Some(Bytes::from_static(b"{}")),
            kind: MessageKind::Telemetry,
        }
    }

    /// A message as IoT Hub's built-in endpoint delivers it over AMQP: the Event Hubs
    /// annotations (`x-opt-*`), IoT Hub's system properties as message annotations, the
    /// device's `iothub-creation-time-utc` as an application property, a binary body.
    pub(crate) fn amqp_message(seq: i64, device: Option<&str>, enqueued_ms: u64) -> AmqpMessage {
        let mut annotations = AmqpAnnotations::new();
        let symbol = |name: &str| AmqpSymbol(name.into());
        annotations.insert(symbol("x-opt-sequence-number"), AmqpValue::Long(seq));
        annotations.insert(
            symbol("x-opt-offset"),
            AmqpValue::String(format!("{}", seq * 320)),
        );
        let enqueued = SystemTime::UNIX_EPOCH + Duration::from_millis(enqueued_ms);
        annotations.insert(
            symbol("x-opt-enqueued-time"),
            AmqpValue::TimeStamp(AmqpTimestamp(Some(enqueued))),
        );
        annotations.insert(
            symbol("iothub-enqueuedtime"),
            AmqpValue::TimeStamp(AmqpTimestamp(Some(enqueued))),
        );
        if let Some(device) = device {
            annotations.insert(symbol(DEVICE_ID_PROPERTY), AmqpValue::String(device.into()));
            annotations.insert(
                symbol("iothub-connection-auth-method"),
                AmqpValue::String("{\"scope\":\"device\",\"type\":\"sas\"}".into()),
            );
        }
        annotations.insert(
            symbol("iothub-message-source"),
            AmqpValue::String("Telemetry".into()),
        );
        let mut properties = AmqpApplicationProperties::new();
        properties.insert(
            "iothub-creation-time-utc".into(),
            AmqpSimpleValue::String("2026-11-22T09:15:02.100Z".into()),
        );
        AmqpMessage::builder()
            .with_message_annotations(annotations)
            .with_application_properties(properties)
            .with_body(AmqpMessageBody::Binary(vec![b"{\"v\":1}".to_vec()]))
            .build()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::test_events::{amqp_message, event};
    use super::*;
    use crate::metrics::Metrics;
    use crate::source::eventhubs::checkpointing::checkpoints::PartitionCheckpoints;

    #[test]
    fn identity_and_times_come_from_the_hub() {
        let (queue, _) = PartitionCheckpoints::unwritten(Arc::new(Metrics::new())).open("0");
        let message = event("0", 7, Some("drone-9")).into_message(&queue).unwrap();
        assert_eq!(message.identity, "drone-9");
        assert_eq!(
            message.enqueued_time,
            Some("2026-11-22T09:15:03.100Z".parse().unwrap())
        );
        let (err, ack) = event("0", 8, None).into_message(&queue).unwrap_err();
        assert!(matches!(err, EventError::NoIdentity { .. }));
        ack.finish();
    }

    #[test]
    fn received_events_become_messages_with_the_hub_identity_and_times() {
        let (queue, _) = PartitionCheckpoints::unwritten(Arc::new(Metrics::new())).open("3");
        let received =
            ReceivedEventData::from(amqp_message(41, Some("drone-7"), 1_795_338_903_100));
        let parts = EventParts::of_received("3", &received);
        assert_eq!(parts.sequence_number, Some(41));
        assert_eq!(parts.offset.as_deref(), Some("13120"));
        assert_eq!(parts.device_id.as_deref(), Some("drone-7"));
        let message = parts.into_message(&queue).unwrap();
        assert_eq!(message.identity, "drone-7");
        // The hub's enqueued time, not the device's `iothub-creation-time-utc` (09:15:02.100).
        assert_eq!(
            message.enqueued_time,
            Some("2026-11-22T09:15:03.100Z".parse().unwrap())
        );
        assert_eq!(&message.payload[..], b"{\"v\":1}");
        message.ack.finish();
        assert_eq!(
            queue.checkpoint(),
            Some(EventPosition {
                sequence_number: 41,
                offset: Some("13120".into())
            })
        );

        // A message without the device identity (not a device-to-cloud message) is not
        // turned into a message, but once counted it lets the checkpoint move past it.
        let anonymous = ReceivedEventData::from(amqp_message(42, None, 1_795_338_904_000));
        let next = ReceivedEventData::from(amqp_message(43, Some("drone-8"), 1_795_338_904_100));
        let (err, ack) = EventParts::of_received("3", &anonymous)
            .into_message(&queue)
            .unwrap_err();
        assert!(matches!(err, EventError::NoIdentity { .. }), "{err}");
        let next = EventParts::of_received("3", &next)
            .into_message(&queue)
            .unwrap();
        next.ack.finish();
        assert_eq!(queue.checkpoint().unwrap().sequence_number, 41);
        ack.finish();
        assert_eq!(queue.checkpoint().unwrap().sequence_number, 43);
    }

    #[test]
    fn routed_events_are_told_apart_by_their_message_source() {
        // The connection state event of "IoT Hub non-telemetry event schemas" (its example).
        let mut message = amqp_message(72, Some("contoso-device-1"), 1_654_109_018_176);
        let annotations = message.message_annotations.as_mut().unwrap();
        let source = azure_core_amqp::AmqpSymbol(MESSAGE_SOURCE_PROPERTY.into());
        annotations.0.remove(&AmqpAnnotationKey::Symbol(source));
        annotations.insert(
            azure_core_amqp::AmqpSymbol(MESSAGE_SOURCE_PROPERTY.into()),
            AmqpValue::String("deviceConnectionStateEvents".into()),
        );
        let properties = message.application_properties.as_mut().unwrap();
        for (name, value) in [
            ("hubName", "contoso-routing-hub"),
            ("deviceId", "contoso-device-1"),
            ("opType", "deviceDisconnected"),
            ("iothub-message-schema", "deviceConnectionStateNotification"),
            ("operationTimestamp", "2022-06-01T18:43:04.5561024Z"),
        ] {
            properties.insert(name.into(), AmqpSimpleValue::String(value.into()));
        }
        let parts = EventParts::of_received("0", &ReceivedEventData::from(message));
        assert_eq!(
            parts.kind,
            MessageKind::ConnectionState(Box::new(HubEvent {
                op_type: Some("deviceDisconnected".into()),
                operation_timestamp: Some("2022-06-01T18:43:04.5561024Z".into()),
                module_id: None,
            }))
        );
        let telemetry = ReceivedEventData::from(amqp_message(73, Some("d"), 1_654_109_018_176));
        assert_eq!(
            EventParts::of_received("0", &telemetry).kind,
            MessageKind::Telemetry
        );
        let lifecycle = MessageKind::of_source(Some("deviceLifecycleEvents"), HubEvent::default);
        assert_eq!(
            lifecycle,
            MessageKind::Other("deviceLifecycleEvents".into())
        );
        assert_eq!(
            MessageKind::of_source(None, HubEvent::default),
            MessageKind::Telemetry
        );
    }
}
