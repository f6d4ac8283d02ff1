//! The Event Hubs adapter for IoT Hub's built-in endpoint: how a received event becomes a
//! [`Message`], and which position of each partition may be checkpointed.
//!
//! - Identity: the `iothub-connection-device-id` system property (the identity the hub
//!   authenticated), never the payload.
//! - Times: the event's enqueued time (`x-opt-enqueued-time`) is the message's enqueued
//!   time; the device's `iothub-creation-time-utc` application property is informational
//!   (the payload's `ts` is the device time the pipeline uses).
//! - Checkpoints: [`PartitionCheckpoints`] keeps each partition's events in order and
//!   releases a checkpoint only up to the last event whose outcome is final and all of
//!   whose predecessors are final, so a restart resumes after written events only.
//!
//! The adapter works on [`EventParts`], the fields the SDK's [`ReceivedEventData`]
//! exposes (`system_properties()`, `enqueued_time()`, `sequence_number()`, `offset()`,
//! `event_data().properties()`, `event_data().body()`), taken by
//! [`EventParts::of_received`]; the checkpoint store is [`store::CosmosCheckpointStore`];
//! the source that runs the SDK's `EventProcessor` is [`processor::EventHubsSource`].

pub mod processor;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use azure_messaging_eventhubs::models::{AmqpSimpleValue, AmqpValue, ReceivedEventData};
use bytes::Bytes;
use chrono::{DateTime, Utc};

use super::{Ack, AckQueue, AckSink, Message};
use crate::metrics::Metrics;

/// The system property carrying the device identity IoT Hub authenticated.
pub const DEVICE_ID_PROPERTY: &str = "iothub-connection-device-id";
/// The application property a device may set with its own send time.
pub const CREATION_TIME_PROPERTY: &str = "iothub-creation-time-utc";

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
    /// String-valued system properties (message annotations).
    pub system_properties: HashMap<String, String>,
    /// String-valued application properties.
    pub application_properties: HashMap<String, String>,
    /// The body.
    pub body: Option<Bytes>,
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

/// A position in a partition, as checkpoints record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPosition {
    /// Sequence number.
    pub sequence_number: i64,
    /// Offset.
    pub offset: Option<String>,
}

/// The text of a string-valued AMQP value (string or symbol).
fn text_of_value(value: &AmqpValue) -> Option<String> {
    match value {
        AmqpValue::String(text) => Some(text.clone()),
        AmqpValue::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}

/// The text of a string-valued AMQP application property (string or symbol).
fn text_of_simple_value(value: &AmqpSimpleValue) -> Option<String> {
    match value {
        AmqpSimpleValue::String(text) => Some(text.clone()),
        AmqpSimpleValue::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}

impl EventParts {
    /// The parts of an event the SDK received from partition `partition_id`: its
    /// string-valued system properties (message annotations) and application properties.
    pub fn of_received(partition_id: &str, event: &ReceivedEventData) -> Self {
        let data = event.event_data();
        EventParts {
            partition_id: partition_id.to_owned(),
            sequence_number: event.sequence_number(),
            offset: event.offset().clone(),
            enqueued_time: event.enqueued_time(),
            system_properties: event
                .system_properties()
                .iter()
                .filter_map(|(name, value)| Some((name.clone(), text_of_value(value)?)))
                .collect(),
            application_properties: data
                .properties()
                .into_iter()
                .flatten()
                .filter_map(|(name, value)| Some((name.clone(), text_of_simple_value(value)?)))
                .collect(),
            body: data.body().map(Bytes::copy_from_slice),
        }
    }

    /// The device identity, if the hub set it.
    pub fn identity(&self) -> Option<&str> {
        self.system_properties
            .get(DEVICE_ID_PROPERTY)
            .map(String::as_str)
            .filter(|id| !id.is_empty())
    }

    /// The enqueued time as UTC.
    pub fn enqueued_utc(&self) -> Option<DateTime<Utc>> {
        self.enqueued_time.map(DateTime::<Utc>::from)
    }

    /// The device's own send time, if it set `iothub-creation-time-utc`.
    pub fn creation_time(&self) -> Option<DateTime<Utc>> {
        self.application_properties
            .get(CREATION_TIME_PROPERTY)
            .and_then(|t| telemetry::time::parse_rfc3339(t).ok())
    }
}

/// The in-order checkpoint positions of every partition this replica reads.
#[derive(Debug, Clone)]
pub struct PartitionCheckpoints {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    partitions: Mutex<HashMap<String, Arc<Partition>>>,
    metrics: Arc<Metrics>,
}

/// One partition's queue and its releasable checkpoint.
#[derive(Debug)]
struct Partition {
    id: String,
    state: Mutex<PartitionState>,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct PartitionState {
    queue: AckQueue<EventPosition>,
    /// The newest position whose event and predecessors are all final.
    checkpoint: Option<EventPosition>,
}

impl AckSink for Partition {
    fn done(&self, index: u64) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(last) = state.queue.complete(index).pop() {
            state.checkpoint = Some(last);
        }
        self.metrics.set_ack_lag(&self.id, state.queue.len());
    }
}

impl PartitionCheckpoints {
    /// Checkpoint tracking reporting lag to `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        PartitionCheckpoints {
            inner: Arc::new(Inner {
                partitions: Mutex::new(HashMap::new()),
                metrics,
            }),
        }
    }

    fn partition(&self, id: &str) -> Arc<Partition> {
        let mut partitions = self
            .inner
            .partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        partitions
            .entry(id.to_owned())
            .or_insert_with(|| {
                Arc::new(Partition {
                    id: id.to_owned(),
                    state: Mutex::default(),
                    metrics: self.inner.metrics.clone(),
                })
            })
            .clone()
    }

    /// Turns an event into a message whose [`Ack`] advances its partition's checkpoint.
    /// An event without identity is entered too (and its outcome is final at once: it
    /// is dropped and counted by the caller), so that it does not hold the checkpoint back.
    pub fn message_of(&self, event: &EventParts) -> Result<Message, (EventError, Ack)> {
        let sequence_number = event.sequence_number.ok_or_else(|| {
            (
                EventError::NoSequenceNumber(event.partition_id.clone()),
                Ack::none(),
            )
        })?;
        let partition = self.partition(&event.partition_id);
        let index = partition
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .queue
            .push(EventPosition {
                sequence_number,
                offset: event.offset.clone(),
            });
        let ack = Ack::new(partition, index);
        let Some(identity) = event.identity() else {
            return Err((
                EventError::NoIdentity {
                    partition_id: event.partition_id.clone(),
                    sequence_number: event.sequence_number,
                },
                ack,
            ));
        };
        Ok(Message {
            identity: identity.to_owned(),
            payload: event.body.clone().unwrap_or_default(),
            enqueued_time: event.enqueued_utc(),
            received_at: Instant::now(),
            ack,
        })
    }

    /// The position to checkpoint for `partition_id`: the last event whose outcome and
    /// whose predecessors' outcomes are all final.
    pub fn checkpoint(&self, partition_id: &str) -> Option<EventPosition> {
        let partitions = self
            .inner
            .partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let partition = partitions.get(partition_id)?;
        let state = partition.state.lock().unwrap_or_else(|e| e.into_inner());
        state.checkpoint.clone()
    }

    /// The partitions this replica has read since they were last released.
    pub fn partitions(&self) -> Vec<String> {
        self.inner
            .partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Forgets a partition's pending events (ownership lost: another replica goes on
    /// from the last checkpoint).
    pub fn release(&self, partition_id: &str) {
        if let Some(partition) = self
            .inner
            .partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(partition_id)
        {
            partition
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .queue
                .reset();
        }
    }
}

/// Received events shaped as the SDK presents them, for tests.
#[cfg(test)]
pub(crate) mod test_events {
    use std::time::{Duration, SystemTime};

    use azure_core_amqp::message::{AmqpAnnotations, AmqpApplicationProperties, AmqpMessageBody};
    use azure_core_amqp::{AmqpMessage, AmqpSymbol, AmqpTimestamp};
    use azure_messaging_eventhubs::models::{AmqpSimpleValue, AmqpValue};

    use super::{CREATION_TIME_PROPERTY, DEVICE_ID_PROPERTY};

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
            CREATION_TIME_PROPERTY.into(),
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
    use std::time::Duration;

    use super::test_events::amqp_message;
    use super::*;

    /// An event shaped as IoT Hub delivers it on the built-in endpoint.
    fn event(partition: &str, seq: i64, device: Option<&str>) -> EventParts {
        let mut system_properties = HashMap::new();
        if let Some(device) = device {
            system_properties.insert(DEVICE_ID_PROPERTY.to_string(), device.to_string());
            system_properties.insert("iothub-auth-method".into(), "{\"scope\":\"device\"}".into());
            system_properties.insert("iothub-message-source".into(), "Telemetry".into());
        }
        let mut application_properties = HashMap::new();
        application_properties.insert(
            CREATION_TIME_PROPERTY.into(),
            "2026-11-22T09:15:02.100Z".into(),
        );
        EventParts {
            partition_id: partition.into(),
            sequence_number: Some(seq),
            offset: Some(format!("{}", seq * 512)),
            enqueued_time: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_338_903_100)),
            system_properties,
            application_properties,
            body: Some(Bytes::from_static(b"{}")),
        }
    }

    #[test]
    fn identity_and_times_come_from_the_hub() {
        let tracker = PartitionCheckpoints::new(Arc::new(Metrics::new()));
        let message = tracker.message_of(&event("0", 7, Some("drone-9"))).unwrap();
        assert_eq!(message.identity, "drone-9");
        assert_eq!(
            message.enqueued_time,
            Some("2026-11-22T09:15:03.100Z".parse().unwrap())
        );
        assert_eq!(
            event("0", 7, None).creation_time(),
            Some("2026-11-22T09:15:02.100Z".parse().unwrap())
        );
        let (err, ack) = tracker.message_of(&event("0", 8, None)).unwrap_err();
        assert!(matches!(err, EventError::NoIdentity { .. }));
        ack.finish();
    }

    #[test]
    fn received_events_become_messages_with_the_hub_identity_and_times() {
        let tracker = PartitionCheckpoints::new(Arc::new(Metrics::new()));
        let received =
            ReceivedEventData::from(amqp_message(41, Some("drone-7"), 1_795_338_903_100));
        let parts = EventParts::of_received("3", &received);
        assert_eq!(parts.sequence_number, Some(41));
        assert_eq!(parts.offset.as_deref(), Some("13120"));
        assert_eq!(parts.identity(), Some("drone-7"));
        assert_eq!(
            parts.creation_time(),
            Some("2026-11-22T09:15:02.100Z".parse().unwrap())
        );
        let message = tracker.message_of(&parts).unwrap();
        assert_eq!(message.identity, "drone-7");
        assert_eq!(
            message.enqueued_time,
            Some("2026-11-22T09:15:03.100Z".parse().unwrap())
        );
        assert_eq!(&message.payload[..], b"{\"v\":1}");
        message.ack.finish();
        assert_eq!(
            tracker.checkpoint("3"),
            Some(EventPosition {
                sequence_number: 41,
                offset: Some("13120".into())
            })
        );

        // A message without the device identity (not a device-to-cloud message) is not
        // turned into a message, but once counted it lets the checkpoint move past it.
        let anonymous = ReceivedEventData::from(amqp_message(42, None, 1_795_338_904_000));
        let next = ReceivedEventData::from(amqp_message(43, Some("drone-8"), 1_795_338_904_100));
        let (err, ack) = tracker
            .message_of(&EventParts::of_received("3", &anonymous))
            .unwrap_err();
        assert!(matches!(err, EventError::NoIdentity { .. }), "{err}");
        let next = tracker
            .message_of(&EventParts::of_received("3", &next))
            .unwrap();
        next.ack.finish();
        assert_eq!(tracker.checkpoint("3").unwrap().sequence_number, 41);
        ack.finish();
        assert_eq!(tracker.checkpoint("3").unwrap().sequence_number, 43);
    }

    #[test]
    fn checkpoint_advances_only_over_final_outcomes_in_order() {
        let tracker = PartitionCheckpoints::new(Arc::new(Metrics::new()));
        let m1 = tracker.message_of(&event("1", 100, Some("a"))).unwrap();
        let m2 = tracker.message_of(&event("1", 101, Some("b"))).unwrap();
        let m3 = tracker.message_of(&event("1", 102, Some("c"))).unwrap();
        let other = tracker.message_of(&event("2", 5, Some("a"))).unwrap();
        assert_eq!(tracker.checkpoint("1"), None);
        m3.ack.finish();
        assert_eq!(tracker.checkpoint("1"), None, "102 is final but 100 is not");
        m1.ack.finish();
        assert_eq!(tracker.checkpoint("1").unwrap().sequence_number, 100);
        // An abandoned outcome (shutdown) never checkpoints.
        drop(m2.ack);
        assert_eq!(tracker.checkpoint("1").unwrap().sequence_number, 100);
        other.ack.finish();
        assert_eq!(
            tracker.checkpoint("2"),
            Some(EventPosition {
                sequence_number: 5,
                offset: Some("2560".into())
            })
        );
    }

    #[test]
    fn released_partition_forgets_pending_events() {
        let tracker = PartitionCheckpoints::new(Arc::new(Metrics::new()));
        let m = tracker.message_of(&event("3", 1, Some("a"))).unwrap();
        tracker.release("3");
        m.ack.finish();
        assert_eq!(tracker.checkpoint("3"), None);
    }
}
