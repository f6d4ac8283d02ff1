//! The checkpoint state of the partitions this replica reads, and its writing to the
//! checkpoint store: which position of each reading may be checkpointed (the last event
//! whose outcome is final and all of whose predecessors are final), which sequence number
//! was last written, and the highest one taken.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::store::{Scope, SharedStore};
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

/// The checkpoints of every partition this replica reads, kept across the source's
/// sessions: one [`PartitionQueue`] per reading of a partition, and what was written to
/// the store and taken from the hub per partition.
#[derive(Debug)]
pub struct PartitionCheckpoints {
    store: SharedStore,
    scope: Scope,
    metrics: Arc<Metrics>,
    partitions: Mutex<HashMap<String, Partition>>,
}

/// What is known of one partition.
#[derive(Debug)]
struct Partition {
    /// The reading opened last, until it ends.
    current: Option<PartitionQueue>,
    /// Readings running (a partition opened again may briefly have two).
    readings: usize,
    /// The sequence number last written as its checkpoint, while it is read.
    written: Option<i64>,
    /// The highest sequence number taken from it, in any reading.
    taken: Arc<AtomicI64>,
}

impl Default for Partition {
    fn default() -> Self {
        Partition {
            current: None,
            readings: 0,
            written: None,
            taken: Arc::new(AtomicI64::new(i64::MIN)),
        }
    }
}

/// The events of one reading of a partition, in the order read, and its releasable
/// checkpoint. Each reading (a receiver, from the partition's checkpoint on) has its own
/// queue: events of an earlier reading never let a later one's checkpoint skip ahead.
#[derive(Debug, Clone)]
pub struct PartitionQueue {
    queue: Arc<Queue>,
    /// The partition's highest sequence number taken, shared by its readings.
    taken: Arc<AtomicI64>,
}

#[derive(Debug)]
struct Queue {
    id: String,
    state: Mutex<QueueState>,
    /// Woken when the last pending event's outcome is final.
    finished: Notify,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct QueueState {
    queue: AckQueue<EventPosition>,
    /// The newest position whose event and predecessors are all final.
    checkpoint: Option<EventPosition>,
}

impl AckSink for Queue {
    fn done(&self, index: u64) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(last) = state.queue.complete(index).pop() {
            state.checkpoint = Some(last);
        }
        let pending = state.queue.len();
        self.metrics.set_ack_lag(&self.id, pending);
        drop(state);
        // Only an empty queue is waited for (`settled`): the notifier's lock is not taken
        // on every acknowledgement.
        if pending == 0 {
            self.finished.notify_waiters();
        }
    }
}

impl PartitionQueue {
    /// The partition.
    pub fn id(&self) -> &str {
        &self.queue.id
    }

    fn state(&self) -> MutexGuard<'_, QueueState> {
        self.queue.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enters the next event of this reading; its [`Ack`] advances the checkpoint once
    /// final.
    pub fn enter(&self, position: EventPosition) -> Ack {
        let index = self.state().queue.push(position);
        Ack::new(self.queue.clone(), index)
    }

    /// Records that event `sequence_number` was taken; true when a reading of the
    /// partition had taken it before (it is read again).
    pub fn take(&self, sequence_number: i64) -> bool {
        self.taken.fetch_max(sequence_number, Ordering::Relaxed) >= sequence_number
    }

    /// The position to checkpoint: the last event of this reading whose outcome and
    /// whose predecessors' outcomes are all final.
    pub fn checkpoint(&self) -> Option<EventPosition> {
        self.state().checkpoint.clone()
    }

    /// Waits until every event this reading took is final, at most `within`; true if
    /// they all are.
    pub async fn settled(&self, within: Duration) -> bool {
        let wait = async {
            loop {
                let finished = self.queue.finished.notified();
                if self.state().queue.is_empty() {
                    return;
                }
                finished.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }
}

impl PartitionCheckpoints {
    /// The checkpoints of `scope`, written to `store`, reporting lag to `metrics`.
    pub fn new(store: SharedStore, scope: Scope, metrics: Arc<Metrics>) -> Self {
        PartitionCheckpoints {
            store,
            scope,
            metrics,
            partitions: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Partition>> {
        self.partitions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a reading of `partition_id`: a new queue, now the partition's current one.
    /// True with it when no other reading of the partition runs.
    pub fn open(&self, partition_id: &str) -> (PartitionQueue, bool) {
        let mut partitions = self.lock();
        let partition = partitions.entry(partition_id.to_owned()).or_default();
        let queue = PartitionQueue {
            queue: Arc::new(Queue {
                id: partition_id.to_owned(),
                state: Mutex::default(),
                finished: Notify::new(),
                metrics: self.metrics.clone(),
            }),
            taken: partition.taken.clone(),
        };
        partition.current = Some(queue.clone());
        partition.readings += 1;
        (queue, partition.readings == 1)
    }

    /// Whether `queue` is the only reading of its partition that runs.
    pub fn only_reading(&self, queue: &PartitionQueue) -> bool {
        self.lock()
            .get(queue.id())
            .is_none_or(|partition| partition.readings <= 1)
    }

    /// Ends a reading whose partition was lost: its pending events are forgotten
    /// (another reading goes on from the last checkpoint), and so is the partition's
    /// written checkpoint once no other reading of it runs. True when that was the
    /// partition's last reading.
    pub fn close(&self, queue: &PartitionQueue) -> bool {
        let last = {
            let mut partitions = self.lock();
            let partition = partitions.entry(queue.id().to_owned()).or_default();
            if partition
                .current
                .as_ref()
                .is_some_and(|current| Arc::ptr_eq(&current.queue, &queue.queue))
            {
                partition.current = None;
            }
            match partition.readings {
                0 => false,
                1 => {
                    partition.readings = 0;
                    partition.written = None;
                    true
                }
                _ => {
                    partition.readings -= 1;
                    false
                }
            }
        };
        let mut state = queue.state();
        state.queue.reset();
        state.checkpoint = None;
        drop(state);
        if last {
            self.metrics.set_ack_lag(queue.id(), 0);
        }
        last
    }

    /// The source stopped: no partition is read any more. Returns those that were.
    pub fn stop_reading(&self) -> Vec<String> {
        self.lock()
            .iter_mut()
            .filter(|(_, partition)| partition.readings > 0)
            .map(|(id, partition)| {
                partition.readings = 0;
                id.clone()
            })
            .collect()
    }

    /// Writes a reading's checkpoint if its final position moved past the last one written.
    pub async fn flush(&self, queue: &PartitionQueue) {
        let Some(position) = queue.checkpoint() else {
            return;
        };
        let partition = queue.id();
        let written = self.lock().get(partition).and_then(|p| p.written);
        if written.is_some_and(|seq| seq >= position.sequence_number) {
            return;
        }
        let checkpoint = self.scope.checkpoint(
            partition,
            Some(position.sequence_number),
            position.offset.clone(),
        );
        match self.store.update_checkpoint(checkpoint).await {
            Ok(()) => {
                tracing::debug!(%partition, sequence_number = position.sequence_number, "checkpoint written");
                self.lock().entry(partition.to_owned()).or_default().written =
                    Some(position.sequence_number);
            }
            Err(err) => {
                tracing::warn!(%partition, error = %err, "checkpoint not written; trying again at the next interval");
            }
        }
    }

    /// Records that this replica's reading of `partition` ended, checkpointed, for the
    /// new owner's claim with ETag `claim`, which waits for it (`super::handover`).
    pub async fn hand_over(&self, partition: &str, claim: &str) {
        let recorded = self.store.hand_over(&self.scope, partition, claim).await;
        not_recorded(partition, recorded);
    }

    /// Records that this replica's reading of `partition` ended, checkpointed, for
    /// whichever claim holds the partition now (the processor revoked it, or another
    /// owner's receiver displaced this one, before the takeover watch saw the claim).
    pub async fn hand_over_to_owner(&self, partition: &str) {
        let scope = &self.scope;
        let listed = self
            .store
            .list_ownerships(&scope.namespace, &scope.event_hub, &scope.consumer_group)
            .await;
        let claim = listed.map(|ownerships| {
            ownerships
                .into_iter()
                .find(|o| o.partition_id == partition)
                .and_then(|o| o.etag)
        });
        let recorded = match claim {
            Ok(Some(claim)) => self.store.hand_over(scope, partition, claim.as_ref()).await,
            Ok(None) => Ok(()),
            Err(err) => Err(err),
        };
        not_recorded(partition, recorded);
    }

    /// The current reading of every partition.
    fn current(&self) -> Vec<PartitionQueue> {
        self.lock()
            .values()
            .filter_map(|partition| partition.current.clone())
            .collect()
    }

    /// Writes the checkpoint of every partition's current reading (the last ones, once
    /// the pipeline has drained at stop).
    pub async fn flush_current(&self) {
        for queue in self.current() {
            self.flush(&queue).await;
        }
    }

    /// Every partition's checkpointed sequence number in the store, this replica's or not.
    pub async fn stored(&self) -> azure_core::Result<HashMap<String, Option<i64>>> {
        let scope = &self.scope;
        Ok(self
            .store
            .list_checkpoints(&scope.namespace, &scope.event_hub, &scope.consumer_group)
            .await?
            .into_iter()
            .map(|c| (c.partition_id, c.sequence_number))
            .collect())
    }
}

/// Warns of a handover that could not be recorded.
fn not_recorded(partition: &str, recorded: azure_core::Result<()>) {
    if let Err(err) = recorded {
        tracing::warn!(%partition, error = %err, "handover not recorded: the new owner opens the partition after its wait");
    }
}

#[cfg(test)]
impl PartitionCheckpoints {
    /// Checkpoints whose store is never reached, for tests that write none.
    pub(in crate::source::eventhubs) fn unwritten(metrics: Arc<Metrics>) -> Self {
        let key = cosmos::MasterKey::from_base64(cosmos_wire::auth::EMULATOR_KEY).unwrap();
        let client = cosmos::CosmosClient::new(cosmos::CosmosConfig::new(
            "http://127.0.0.1:9".parse().unwrap(),
            cosmos::Credential::MasterKey(key),
        ))
        .unwrap();
        PartitionCheckpoints::new(
            Arc::new(super::cosmos_store::CosmosCheckpointStore::new(
                client.container("telemetry", "checkpoints"),
            )),
            Scope::new("hub.servicebus.windows.net", "hub", "$Default"),
            metrics,
        )
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

    /// The partitions whose current reading is checkpointed at stop.
    fn listed(checkpoints: &PartitionCheckpoints) -> Vec<String> {
        let mut listed: Vec<String> = checkpoints
            .current()
            .iter()
            .map(|q| q.id().to_owned())
            .collect();
        listed.sort();
        listed
    }

    #[test]
    fn checkpoint_advances_only_over_final_outcomes_in_order() {
        let checkpoints = PartitionCheckpoints::unwritten(Arc::new(Metrics::new()));
        let ((one, _), (two, _)) = (checkpoints.open("1"), checkpoints.open("2"));
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
        assert_eq!(listed(&checkpoints), ["1", "2"]);
    }

    #[test]
    fn a_closed_reading_forgets_pending_events() {
        let checkpoints = PartitionCheckpoints::unwritten(Arc::new(Metrics::new()));
        let (queue, claimed) = checkpoints.open("3");
        assert!(claimed);
        let m = enter(&queue, 1);
        assert!(checkpoints.close(&queue), "its only reading");
        m.finish();
        assert_eq!(queue.checkpoint(), None);
        assert!(listed(&checkpoints).is_empty());
        assert!(checkpoints.stop_reading().is_empty());
    }

    /// A partition opened again (its receiver failed and the processor opened a new one)
    /// while the earlier reading still ends: the earlier reading's events, pending in the
    /// pipeline, never let the new reading's checkpoint pass them, and the earlier
    /// reading's end leaves the new one listed.
    #[test]
    fn a_new_reading_of_a_partition_has_its_own_queue() {
        let checkpoints = PartitionCheckpoints::unwritten(Arc::new(Metrics::new()));
        let (first, _) = checkpoints.open("0");
        let pending = enter(&first, 10);
        let (second, claimed) = checkpoints.open("0");
        assert!(!claimed, "the first reading still runs");
        let again = enter(&second, 10);
        let next = enter(&second, 11);
        assert!(!checkpoints.close(&first), "the second reading still runs");
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
        assert_eq!(listed(&checkpoints), ["0"]);
        assert_eq!(checkpoints.stop_reading(), ["0"]);
    }

    /// A reading taken over waits for its events in flight: settled once each is final,
    /// whatever the order; an abandoned one (never final) holds it until the bound.
    #[tokio::test(start_paused = true)]
    async fn a_reading_settles_when_its_events_in_flight_are_final() {
        let checkpoints = PartitionCheckpoints::unwritten(Arc::new(Metrics::new()));
        let (queue, _) = checkpoints.open("0");
        assert!(queue.settled(Duration::ZERO).await, "nothing in flight");
        let (m1, m2) = (enter(&queue, 1), enter(&queue, 2));
        // Paused clock: the sleeps order the outcomes at known instants, no real wait.
        let finishing = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            m2.finish();
            tokio::time::sleep(Duration::from_millis(300)).await;
            m1.finish();
        };
        let started = tokio::time::Instant::now();
        let (settled, ()) = tokio::join!(queue.settled(Duration::from_secs(1)), finishing);
        assert!(settled);
        assert_eq!(started.elapsed(), Duration::from_millis(600));
        assert_eq!(queue.checkpoint().unwrap().sequence_number, 2);

        drop(enter(&queue, 3));
        let started = tokio::time::Instant::now();
        assert!(!queue.settled(Duration::from_secs(1)).await);
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    /// Events taken by any reading of a partition are known as read again by the next.
    #[test]
    fn taken_events_are_shared_by_the_readings_of_a_partition() {
        let checkpoints = PartitionCheckpoints::unwritten(Arc::new(Metrics::new()));
        let (first, _) = checkpoints.open("0");
        let (other, _) = checkpoints.open("1");
        assert!(!first.take(10));
        assert!(!first.take(11));
        assert!(!other.take(11));
        assert!(checkpoints.close(&first));
        let (second, _) = checkpoints.open("0");
        assert!(second.take(10));
        assert!(second.take(11));
        assert!(!second.take(12));
    }

    /// What a reading writes to the store: never below what another reading of the
    /// partition wrote while both run; once the partition's last reading ends, what was
    /// written is forgotten, and the next reading writes its checkpoint whatever it is.
    #[tokio::test]
    async fn an_earlier_reading_never_moves_the_written_checkpoint_back() {
        let (_sim, store) =
            crate::source::eventhubs::checkpointing::cosmos_store::CosmosCheckpointStore::on_local_endpoint().await;
        let checkpoints = PartitionCheckpoints::new(
            Arc::new(store),
            Scope::new("hub.servicebus.windows.net", "hub", "$Default"),
            Arc::new(Metrics::new()),
        );
        let stored = async |checkpoints: &PartitionCheckpoints| {
            checkpoints
                .stored()
                .await
                .unwrap()
                .get("0")
                .copied()
                .flatten()
        };
        let (first, _) = checkpoints.open("0");
        let (second, _) = checkpoints.open("0");
        enter(&first, 10).finish();
        enter(&second, 20).finish();
        checkpoints.flush(&second).await;
        assert_eq!(stored(&checkpoints).await, Some(20));
        checkpoints.flush(&first).await;
        assert_eq!(stored(&checkpoints).await, Some(20));
        assert!(!checkpoints.close(&second));
        checkpoints.flush(&first).await;
        assert_eq!(stored(&checkpoints).await, Some(20));
        assert!(checkpoints.close(&first));
        let (third, claimed) = checkpoints.open("0");
        assert!(claimed);
        enter(&third, 15).finish();
        checkpoints.flush_current().await;
        assert_eq!(stored(&checkpoints).await, Some(15));
    }
}
