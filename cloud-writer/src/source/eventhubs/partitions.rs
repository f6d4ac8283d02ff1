//! The partition readers of the Event Hubs source: each partition the SDK's processor
//! hands this replica is read by a task of its own (on one thread with a single-threaded
//! runtime, because the SDK's partition event stream is not `Send`), which turns events
//! into [`Message`](crate::source::Message)s and writes the partition's checkpoint every
//! `EVENTHUBS_CHECKPOINT_INTERVAL`, only up to the last event whose outcome and whose
//! predecessors' outcomes are final.
//!
//! A reading ends when the partition is lost (another replica took it over and its
//! receiver displaced this one, the receiver failed, or the processor failed and the
//! source rebuilds it): it is checkpointed as far as it is final and forgotten, its pending
//! events come again to whoever reads the partition next. When the source stops, a
//! reading ends without forgetting anything: once the pipeline has drained, the source
//! checkpoints every partition a last time and gives it up.
//!
//! The SDK's receiver recovers a dropped link by attaching again with the filter it was
//! opened with, so after a hub restart it delivers again from where the reading began:
//! events at or below the last sequence number taken are skipped here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use azure_messaging_eventhubs::models::ReceivedEventData;
use azure_messaging_eventhubs::processor::PartitionClient;
use azure_messaging_eventhubs::{CheckpointStore, EventHubsError};
use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinSet, LocalSet};
use tokio_util::sync::CancellationToken;

use super::checkpoints::{PartitionCheckpoints, PartitionQueue};
use super::event::EventParts;
use super::failure::SessionHealth;
use super::store::{CosmosCheckpointStore, Scope};
use crate::metrics::{DropReason, Metrics, OwnershipChange};
use crate::source::SourceError;
use crate::source::queue::QueueSender;

/// What the partition readers of a source share, across its processor's rebuilds.
pub(super) struct Shared {
    pub(super) store: CosmosCheckpointStore,
    pub(super) scope: Scope,
    pub(super) tracker: PartitionCheckpoints,
    /// The sequence number last written as each partition's checkpoint.
    written: Mutex<HashMap<String, i64>>,
    /// Readings running per partition (a partition opened again may briefly have two).
    readings: Mutex<HashMap<String, usize>>,
    /// The highest sequence number this process has taken from each partition, in any
    /// reading: an event at or below it is read again.
    taken: Mutex<HashMap<String, Arc<AtomicI64>>>,
    pub(super) metrics: Arc<Metrics>,
    /// How often a partition's checkpoint is written (`EVENTHUBS_CHECKPOINT_INTERVAL`).
    checkpoint_interval: Duration,
}

/// How a reading ended.
#[derive(Debug)]
enum ReadEnd {
    /// The source stops, or the processor is rebuilt.
    Cancelled,
    /// The stream failed or closed after `events` events: the partition is lost.
    Lost { why: String, events: u64 },
}

impl Shared {
    /// State shared by the readers of the partitions of `scope`.
    pub(super) fn new(
        store: CosmosCheckpointStore,
        scope: Scope,
        metrics: Arc<Metrics>,
        checkpoint_interval: Duration,
    ) -> Self {
        Shared {
            store,
            scope,
            tracker: PartitionCheckpoints::new(metrics.clone()),
            written: Mutex::default(),
            readings: Mutex::default(),
            taken: Mutex::default(),
            metrics,
            checkpoint_interval,
        }
    }

    /// Writes a reading's checkpoint if its final position moved past the last one written.
    pub(super) async fn flush(&self, queue: &PartitionQueue) {
        let Some(position) = queue.checkpoint() else {
            return;
        };
        let partition = queue.id();
        let already = self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(partition)
            .copied();
        if already.is_some_and(|seq| seq >= position.sequence_number) {
            return;
        }
        let checkpoint = self.scope.checkpoint(
            partition,
            Some(position.sequence_number),
            position.offset.clone(),
        );
        match CheckpointStore::update_checkpoint(&self.store, checkpoint).await {
            Ok(()) => {
                tracing::debug!(%partition, sequence_number = position.sequence_number, "checkpoint written");
                self.written
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(partition.to_owned(), position.sequence_number);
            }
            Err(err) => {
                tracing::warn!(%partition, error = %err, "checkpoint not written; trying again at the next interval");
            }
        }
    }

    /// The highest sequence number this process has taken from `partition`, shared by its
    /// readings.
    fn taken(&self, partition: &str) -> Arc<AtomicI64> {
        self.taken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(partition.to_owned())
            .or_insert_with(|| Arc::new(AtomicI64::new(i64::MIN)))
            .clone()
    }

    /// A reading of `partition` starts: claimed, if no other reading of it runs.
    fn claimed(&self, partition: &str) {
        let mut readings = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        let count = readings.entry(partition.to_owned()).or_default();
        *count += 1;
        if *count == 1 {
            self.metrics.set_partition_owned(partition, true);
            self.metrics
                .ownership_change(partition, OwnershipChange::Claimed);
        }
    }

    /// A reading ended without the source stopping: it is forgotten, and the partition
    /// is lost once no other reading of it runs.
    fn lost(&self, queue: &PartitionQueue) {
        let partition = queue.id();
        self.tracker.release(queue);
        let mut readings = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        let Some(count) = readings.get_mut(partition) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            readings.remove(partition);
            self.written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(partition);
            self.metrics.set_ack_lag(partition, 0);
            self.metrics.set_partition_owned(partition, false);
            self.metrics
                .ownership_change(partition, OwnershipChange::Lost);
        }
    }

    /// The source stopped and gave its partitions up: every partition still read is
    /// released.
    pub(super) fn released(&self) {
        let mut readings = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        for (partition, _) in readings.drain() {
            self.metrics.set_partition_owned(&partition, false);
            self.metrics
                .ownership_change(&partition, OwnershipChange::Released);
        }
    }

    /// Sends one event on as a message; false when the pipeline no longer takes any.
    async fn forward(
        &self,
        queue: &PartitionQueue,
        event: &ReceivedEventData,
        tx: &QueueSender,
        reading: &CancellationToken,
    ) -> bool {
        match EventParts::of_received(queue.id(), event).into_message(queue) {
            Ok(message) => {
                self.metrics.received();
                tokio::select! {
                    sent = tx.send(message) => sent.is_ok(),
                    // Not sent: its acknowledgement is abandoned, the event comes again.
                    () = reading.cancelled() => false,
                }
            }
            Err((err, ack)) => {
                // Not a device message: dropped and counted, so it does not hold the
                // checkpoint back.
                self.metrics.dropped(DropReason::Unroutable);
                tracing::warn!(error = %err, "event dropped");
                ack.finish();
                true
            }
        }
    }

    /// Reads a partition's events into `queue` until the stream ends (the partition is
    /// lost) or `reading` is cancelled, checkpointing every interval. Events at or below
    /// the last sequence number this reading took (a receiver that attached again from
    /// where it was opened) are skipped; events an earlier reading took (the partition
    /// came back, or the source rebuilt its session) are taken again and counted as read
    /// again.
    async fn read(
        &self,
        queue: &PartitionQueue,
        events: impl Stream<Item = Result<ReceivedEventData, EventHubsError>>,
        tx: &QueueSender,
        reading: &CancellationToken,
    ) -> ReadEnd {
        futures::pin_mut!(events);
        let mut ticker = tokio::time::interval(self.checkpoint_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_taken: Option<i64> = None;
        let taken = self.taken(queue.id());
        let mut skipped = 0u64;
        let mut events_read = 0u64;
        loop {
            tokio::select! {
                biased;
                () = reading.cancelled() => return ReadEnd::Cancelled,
                _ = ticker.tick() => self.flush(queue).await,
                event = events.next() => match event {
                    Some(Ok(event)) => {
                        events_read += 1;
                        let seq = event.sequence_number();
                        if let (Some(seq), Some(last)) = (seq, last_taken) {
                            if seq <= last {
                                if skipped == 0 {
                                    tracing::info!(partition = %queue.id(), from = seq, taken = last, "the receiver delivers again events already taken (it attached again from where it was opened); skipping them");
                                }
                                skipped += 1;
                                continue;
                            }
                        }
                        if skipped > 0 {
                            tracing::info!(partition = %queue.id(), skipped, "caught up with the events already taken");
                            skipped = 0;
                        }
                        if let Some(seq) = seq {
                            if taken.fetch_max(seq, Ordering::Relaxed) >= seq {
                                self.metrics.read_again(queue.id());
                            }
                        }
                        last_taken = seq.or(last_taken);
                        if !self.forward(queue, &event, tx, reading).await {
                            return ReadEnd::Cancelled;
                        }
                    }
                    Some(Err(err)) => return ReadEnd::Lost { why: err.to_string(), events: events_read },
                    None => return ReadEnd::Lost { why: "the receiver closed".into(), events: events_read },
                },
            }
        }
    }
}

/// Starts the thread that reads the partitions sent to the returned channel, each in a
/// task of its own, until the channel closes and every task has ended (then the
/// returned receiver resolves). `reading` ends the readings (cancelled when the source
/// stops or rebuilds its processor); `stop` tells the two apart; `health` learns how
/// readings end.
pub(super) fn spawn_readers(
    shared: Arc<Shared>,
    tx: QueueSender,
    reading: CancellationToken,
    stop: CancellationToken,
    health: SessionHealth,
) -> Result<
    (
        mpsc::UnboundedSender<Arc<PartitionClient>>,
        oneshot::Receiver<()>,
    ),
    SourceError,
> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SourceError::Failed(format!("cannot start the partition readers: {e}")))?;
    let (clients_tx, mut clients) = mpsc::unbounded_channel::<Arc<PartitionClient>>();
    let (done_tx, done) = oneshot::channel();
    std::thread::Builder::new()
        .name("eventhubs-partitions".into())
        .spawn(move || {
            LocalSet::new().block_on(&runtime, async move {
                let mut tasks = JoinSet::new();
                loop {
                    tokio::select! {
                        client = clients.recv() => match client {
                            Some(client) => {
                                tasks.spawn_local(read_partition(client, shared.clone(), tx.clone(), reading.clone(), stop.clone(), health.clone()));
                            }
                            None => break,
                        },
                        Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                    }
                }
                drop(tx);
                while tasks.join_next().await.is_some() {}
            });
            let _ = done_tx.send(());
        })
        .map_err(|e| SourceError::Failed(format!("cannot start the partition readers: {e}")))?;
    Ok((clients_tx, done))
}

/// Reads one partition until it is lost, the processor is rebuilt or the source stops.
async fn read_partition(
    client: Arc<PartitionClient>,
    shared: Arc<Shared>,
    tx: QueueSender,
    reading: CancellationToken,
    stop: CancellationToken,
    health: SessionHealth,
) {
    let partition = client.get_partition_id().to_owned();
    tracing::info!(%partition, "reading partition");
    let queue = shared.tracker.open(&partition);
    shared.claimed(&partition);
    let end = shared
        .read(&queue, client.stream_events(), &tx, &reading)
        .await;
    if !stop.is_cancelled() {
        let why = match end {
            ReadEnd::Lost { why, events } => {
                health.reading_ended(&partition, events, &why);
                why
            }
            ReadEnd::Cancelled => "the processor is rebuilt".into(),
        };
        tracing::info!(%partition, %why, "partition lost");
        shared.flush(&queue).await;
        shared.lost(&queue);
    }
    // Closing removes it from the processor, which may hand it out again later.
    if let Ok(client) = Arc::try_unwrap(client) {
        if let Err(err) = client.close().await {
            tracing::debug!(%partition, error = %err, "closing the partition receiver failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use cosmos::{CosmosClient, CosmosConfig, Credential, MasterKey};
    use cosmos_sim::CosmosSim;

    use super::*;
    use crate::source::Message;
    use crate::source::eventhubs::event::test_events::amqp_message;

    async fn checkpoint_of(store: &CosmosCheckpointStore, partition: &str) -> Option<i64> {
        store
            .list_checkpoints("hub.servicebus.windows.net", "hub", "$Default")
            .await
            .unwrap()
            .into_iter()
            .find(|c| c.partition_id == partition)
            .and_then(|c| c.sequence_number)
    }

    async fn wait_for_checkpoint(store: &CosmosCheckpointStore, partition: &str, seq: i64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = checkpoint_of(store, partition).await;
            if now == Some(seq) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "checkpoint {now:?}, expected {seq}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A partition read from SDK events: its checkpoint in the Cosmos store follows the
    /// final outcomes in order, events delivered again (a receiver that attached again
    /// from where it was opened) are skipped, and a lost partition is checkpointed and
    /// forgotten, with its ownership metrics; when it comes back, the events taken before
    /// are taken again and counted as read again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn partition_checkpoints_follow_final_outcomes_in_order() {
        let sim = CosmosSim::builder().start().await.unwrap();
        let key = MasterKey::from_base64(cosmos_wire::auth::EMULATOR_KEY).unwrap();
        let client = CosmosClient::new(CosmosConfig::new(
            sim.endpoint().parse().unwrap(),
            Credential::MasterKey(key),
        ))
        .unwrap();
        let store = CosmosCheckpointStore::open(&client, "telemetry", "checkpoints", true)
            .await
            .unwrap();
        let metrics = Arc::new(Metrics::new());
        let shared = Shared::new(
            store.clone(),
            Scope::new("hub.servicebus.windows.net", "hub", "$Default"),
            metrics.clone(),
            Duration::from_millis(20),
        );
        // Events 10..=13 of partition 4 (11 without a device identity), then 10 and 12
        // again (a receiver attached again from its first position), then the partition
        // stays open until `lose` fires.
        let events: Vec<Result<ReceivedEventData, EventHubsError>> = [
            (10, Some("a")),
            (11, None),
            (12, Some("b")),
            (13, Some("c")),
            (10, Some("a")),
            (12, Some("b")),
        ]
        .into_iter()
        .map(|(seq, device)| Ok(amqp_message(seq, device, 1_795_338_903_000).into()))
        .collect();
        let (lose, lost) = oneshot::channel::<()>();
        let stream = futures::stream::iter(events).chain(
            futures::stream::once(async move {
                let _ = lost.await;
            })
            .filter_map(|()| async { None }),
        );
        let (tx, mut rx) = crate::source::queue::channel(1 << 20, metrics.clone());
        let reading = CancellationToken::new();
        let queue = shared.tracker.open("4");
        shared.claimed("4");
        let pipeline = async {
            let mut messages: Vec<Message> = Vec::new();
            for _ in 0..3 {
                messages.push(rx.recv().await.unwrap());
            }
            let identities: Vec<&str> = messages.iter().map(|m| m.identity.as_str()).collect();
            assert_eq!(identities, ["a", "b", "c"]);
            let c = messages.pop().unwrap();
            let b = messages.pop().unwrap();
            let a = messages.pop().unwrap();
            // 13 final before 10: nothing to checkpoint yet.
            c.ack.finish();
            shared.flush(&queue).await;
            assert_eq!(checkpoint_of(&store, "4").await, None);
            // 10 final, 11 dropped and counted, 12 pending: checkpoint 11.
            a.ack.finish();
            wait_for_checkpoint(&store, "4", 11).await;
            b.ack.finish();
            wait_for_checkpoint(&store, "4", 13).await;
            assert_eq!(metrics.counts().dropped(DropReason::Unroutable), 1);
            let _ = lose.send(());
        };
        let (end, ()) = tokio::join!(shared.read(&queue, stream, &tx, &reading), pipeline);
        assert!(matches!(end, ReadEnd::Lost { .. }), "{end:?}");
        // Nothing delivered again reached the pipeline.
        assert!(rx.is_empty());
        assert_eq!(metrics.counts().received, 3);
        shared.lost(&queue);
        // Lost: forgotten, with its checkpoint kept.
        assert!(shared.tracker.queues().is_empty());
        assert_eq!(checkpoint_of(&store, "4").await, Some(13));
        let text = metrics.render();
        for needle in [
            "cloud_writer_eventhubs_partition_owned{partition=\"4\"} 0",
            "cloud_writer_eventhubs_ownership_changes_total{partition=\"4\",change=\"claimed\"} 1",
            "cloud_writer_eventhubs_ownership_changes_total{partition=\"4\",change=\"lost\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        assert_eq!(metrics.counts().read_again, 0);

        // The partition comes back from 12: 12 and 13 are taken again and counted as read
        // again, 14 is new.
        let queue = shared.tracker.open("4");
        shared.claimed("4");
        let again =
            futures::stream::iter([(12, "b"), (13, "c"), (14, "d")].map(|(seq, device)| {
                Ok(amqp_message(seq, Some(device), 1_795_338_903_000).into())
            }));
        let end = shared.read(&queue, again, &tx, &reading).await;
        assert!(matches!(end, ReadEnd::Lost { .. }), "{end:?}");
        let counts = metrics.counts();
        assert_eq!((counts.received, counts.read_again), (6, 2));
        assert_eq!(rx.len(), 3);
        assert!(
            metrics
                .render()
                .contains("cloud_writer_eventhubs_events_read_again_total{partition=\"4\"} 2")
        );
    }
}
