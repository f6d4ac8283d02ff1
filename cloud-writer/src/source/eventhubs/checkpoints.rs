//! Which position of each partition may be checkpointed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::metrics::Metrics;
use crate::source::{Ack, AckQueue, AckSink};

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

    /// Enters the next event of this reading; its [`Ack`] advances the checkpoint once
    /// final.
    pub fn enter(&self, position: EventPosition) -> Ack {
        let index = self
            .partition
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .queue
            .push(position);
        Ack::new(self.partition.clone(), index)
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
    use super::*;

    /// Enters event `seq` of `queue`, at offset `seq * 512`.
    fn enter(queue: &PartitionQueue, seq: i64) -> Ack {
        queue.enter(EventPosition {
            sequence_number: seq,
            offset: Some(format!("{}", seq * 512)),
        })
    }

    #[test]
    fn checkpoint_advances_only_over_final_outcomes_in_order() {
        let tracker = PartitionCheckpoints::new(Arc::new(Metrics::new()));
        let (one, two) = (tracker.open("1"), tracker.open("2"));
        let m1 = enter(&one, 100);
        let m2 = enter(&one, 101);
        let m3 = enter(&one, 102);
        let other = enter(&two, 5);
        assert_eq!(one.checkpoint(), None);
        m3.finish();
        assert_eq!(one.checkpoint(), None, "102 is final but 100 is not");
        m1.finish();
        assert_eq!(one.checkpoint().unwrap().sequence_number, 100);
        // An abandoned outcome (shutdown) never checkpoints.
        drop(m2);
        assert_eq!(one.checkpoint().unwrap().sequence_number, 100);
        other.finish();
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
        let m = enter(&queue, 1);
        tracker.release(&queue);
        m.finish();
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
        let pending = enter(&first, 10);
        let second = tracker.open("0");
        let again = enter(&second, 10);
        let next = enter(&second, 11);
        tracker.release(&first);
        next.finish();
        assert_eq!(
            second.checkpoint(),
            None,
            "10 is not final in the new reading"
        );
        pending.finish();
        assert_eq!(second.checkpoint(), None);
        again.finish();
        assert_eq!(second.checkpoint().unwrap().sequence_number, 11);
        let listed: Vec<String> = tracker.queues().iter().map(|q| q.id().to_owned()).collect();
        assert_eq!(listed, ["0"]);
    }
}
