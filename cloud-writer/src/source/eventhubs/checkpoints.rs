//! Which position of each partition may be checkpointed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::event::{EventError, EventParts};
use crate::metrics::Metrics;
use crate::source::{Ack, AckQueue, AckSink, Message};

/// A position in a partition, as checkpoints record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPosition {
    /// Sequence number.
    pub sequence_number: i64,
    /// Offset.
    pub offset: Option<String>,
}

/// The in-order checkpoint positions of every partition this replica reads: one
/// [`PartitionQueue`] per reading of a partition, the current one of each partition
/// listed here.
#[derive(Debug, Clone)]
pub struct PartitionCheckpoints {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    partitions: Mutex<HashMap<String, PartitionQueue>>,
    metrics: Arc<Metrics>,
}

/// The events of one reading of a partition, in the order read, and its releasable
/// checkpoint. Each reading (a receiver, from the partition's checkpoint on) has its own
/// queue: events of an earlier reading never let a later one's checkpoint skip ahead.
#[derive(Debug, Clone)]
pub struct PartitionQueue {
    partition: Arc<Partition>,
}

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

impl PartitionQueue {
    /// The partition.
    pub fn id(&self) -> &str {
        &self.partition.id
    }

    /// Turns an event into a message whose [`Ack`] advances this queue's checkpoint.
    /// An event without identity is entered too (and its outcome is final at once: it
    /// is dropped and counted by the caller), so that it does not hold the checkpoint back.
    pub fn message_of(&self, event: EventParts) -> Result<Message, (EventError, Ack)> {
        let Some(sequence_number) = event.sequence_number else {
            return Err((
                EventError::NoSequenceNumber(event.partition_id),
                Ack::none(),
            ));
        };
        let enqueued_time = event.enqueued_utc();
        let index = self
            .partition
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .queue
            .push(EventPosition {
                sequence_number,
                offset: event.offset,
            });
        let ack = Ack::new(self.partition.clone(), index);
        let Some(identity) = event.device_id.filter(|id| !id.is_empty()) else {
            return Err((
                EventError::NoIdentity {
                    partition_id: event.partition_id,
                    sequence_number: Some(sequence_number),
                },
                ack,
            ));
        };
        Ok(Message {
            identity,
            payload: event.body.unwrap_or_default(),
            enqueued_time,
            received_at: Instant::now(),
            ack,
        })
    }

    /// The position to checkpoint: the last event of this reading whose outcome and
    /// whose predecessors' outcomes are all final.
    pub fn checkpoint(&self) -> Option<EventPosition> {
        self.partition
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .checkpoint
            .clone()
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PartitionQueue>> {
        self.inner
            .partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a reading of `partition_id`: a new queue, now the partition's current one.
    pub fn open(&self, partition_id: &str) -> PartitionQueue {
        let queue = PartitionQueue {
            partition: Arc::new(Partition {
                id: partition_id.to_owned(),
                state: Mutex::default(),
                metrics: self.inner.metrics.clone(),
            }),
        };
        self.lock().insert(partition_id.to_owned(), queue.clone());
        queue
    }

    /// The current reading of every partition, for the last checkpoints at shutdown.
    pub fn queues(&self) -> Vec<PartitionQueue> {
        self.lock().values().cloned().collect()
    }

    /// Ends a reading (its partition lost): its pending events are forgotten (another
    /// reading goes on from the last checkpoint), and the partition is no longer listed
    /// unless a newer reading of it is current.
    pub fn release(&self, queue: &PartitionQueue) {
        {
            let mut partitions = self.lock();
            if partitions
                .get(queue.id())
                .is_some_and(|current| Arc::ptr_eq(&current.partition, &queue.partition))
            {
                partitions.remove(queue.id());
            }
        }
        let mut state = queue
            .partition
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        state.queue.reset();
        state.checkpoint = None;
    }
}

#[cfg(test)]
mod tests {
    use azure_messaging_eventhubs::models::ReceivedEventData;

    use super::*;
    use crate::source::eventhubs::event::test_events::{amqp_message, event};

    #[test]
    fn identity_and_times_come_from_the_hub() {
        let tracker = PartitionCheckpoints::new(Arc::new(Metrics::new()));
        let queue = tracker.open("0");
        let message = queue.message_of(event("0", 7, Some("drone-9"))).unwrap();
        assert_eq!(message.identity, "drone-9");
        assert_eq!(
            message.enqueued_time,
            Some("2026-11-22T09:15:03.100Z".parse().unwrap())
        );
        assert_eq!(
            event("0", 7, None).creation_time(),
            Some("2026-11-22T09:15:02.100Z".parse().unwrap())
        );
        let (err, ack) = queue.message_of(event("0", 8, None)).unwrap_err();
        assert!(matches!(err, EventError::NoIdentity { .. }));
        ack.finish();
    }

    #[test]
    fn received_events_become_messages_with_the_hub_identity_and_times() {
        let queue = PartitionCheckpoints::new(Arc::new(Metrics::new())).open("3");
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
        let message = queue.message_of(parts).unwrap();
        assert_eq!(message.identity, "drone-7");
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
        let (err, ack) = queue
            .message_of(EventParts::of_received("3", &anonymous))
            .unwrap_err();
        assert!(matches!(err, EventError::NoIdentity { .. }), "{err}");
        let next = queue
            .message_of(EventParts::of_received("3", &next))
            .unwrap();
        next.ack.finish();
        assert_eq!(queue.checkpoint().unwrap().sequence_number, 41);
        ack.finish();
        assert_eq!(queue.checkpoint().unwrap().sequence_number, 43);
    }

    #[test]
    fn checkpoint_advances_only_over_final_outcomes_in_order() {
        let tracker = PartitionCheckpoints::new(Arc::new(Metrics::new()));
        let (one, two) = (tracker.open("1"), tracker.open("2"));
        let m1 = one.message_of(event("1", 100, Some("a"))).unwrap();
        let m2 = one.message_of(event("1", 101, Some("b"))).unwrap();
        let m3 = one.message_of(event("1", 102, Some("c"))).unwrap();
        let other = two.message_of(event("2", 5, Some("a"))).unwrap();
        assert_eq!(one.checkpoint(), None);
        m3.ack.finish();
        assert_eq!(one.checkpoint(), None, "102 is final but 100 is not");
        m1.ack.finish();
        assert_eq!(one.checkpoint().unwrap().sequence_number, 100);
        // An abandoned outcome (shutdown) never checkpoints.
        drop(m2.ack);
        assert_eq!(one.checkpoint().unwrap().sequence_number, 100);
        other.ack.finish();
        assert_eq!(
            two.checkpoint(),
            Some(EventPosition {
                sequence_number: 5,
                offset: Some("2560".into())
            })
        );
        let mut listed: Vec<String> = tracker.queues().iter().map(|q| q.id().to_owned()).collect();
        listed.sort();
        assert_eq!(listed, ["1", "2"]);
    }

    #[test]
    fn released_reading_forgets_pending_events() {
        let tracker = PartitionCheckpoints::new(Arc::new(Metrics::new()));
        let queue = tracker.open("3");
        let m = queue.message_of(event("3", 1, Some("a"))).unwrap();
        tracker.release(&queue);
        m.ack.finish();
        assert_eq!(queue.checkpoint(), None);
        assert!(tracker.queues().is_empty());
    }

    /// A partition opened again (its receiver failed and the processor opened a new one)
    /// while the earlier reading still ends: the earlier reading's events, pending in the
    /// pipeline, never let the new reading's checkpoint pass them, and the earlier
    /// reading's release leaves the new one listed.
    #[test]
    fn a_new_reading_of_a_partition_has_its_own_queue() {
        let tracker = PartitionCheckpoints::new(Arc::new(Metrics::new()));
        let first = tracker.open("0");
        let pending = first.message_of(event("0", 10, Some("a"))).unwrap();
        let second = tracker.open("0");
        let again = second.message_of(event("0", 10, Some("a"))).unwrap();
        let next = second.message_of(event("0", 11, Some("b"))).unwrap();
        tracker.release(&first);
        next.ack.finish();
        assert_eq!(
            second.checkpoint(),
            None,
            "10 is not final in the new reading"
        );
        pending.ack.finish();
        assert_eq!(second.checkpoint(), None);
        again.ack.finish();
        assert_eq!(second.checkpoint().unwrap().sequence_number, 11);
        let listed: Vec<String> = tracker.queues().iter().map(|q| q.id().to_owned()).collect();
        assert_eq!(listed, ["0"]);
    }
}
