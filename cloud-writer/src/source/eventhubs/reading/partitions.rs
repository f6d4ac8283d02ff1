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
//! events come again to whoever reads the partition next. Lost to another owner, it first
//! stops counting as owned and lets its events in flight reach their outcome, then
//! checkpoints and hands the partition over to the new owner, which waits for that
//! (`super::super::checkpointing::handover`). When the source stops, a reading ends without forgetting
//! anything: once the pipeline has drained, the source checkpoints every partition a last
//! time and gives it up.
//!
//! The SDK's receiver recovers a dropped link by attaching again with the filter it was
//! opened with, so after a hub restart it delivers again from where the reading began:
//! events at or below the last sequence number taken are skipped here.

use std::sync::Arc;
use std::time::Duration;

use azure_messaging_eventhubs::EventHubsError;
use azure_messaging_eventhubs::error::ErrorKind;
use azure_messaging_eventhubs::models::ReceivedEventData;
use azure_messaging_eventhubs::processor::PartitionClient;
use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinSet, LocalSet};
use tokio_util::sync::CancellationToken;

use super::event::EventParts;
use super::failure::SessionHealth;
use super::stall::{Progress, Readings};
use crate::metrics::{DropReason, Metrics, OwnershipChange, SessionBreak};
use crate::source::SourceError;
use crate::source::eventhubs::checkpointing::checkpoints::{PartitionCheckpoints, PartitionQueue};
use crate::source::eventhubs::checkpointing::takeover::Takeovers;
use crate::source::queue::QueueSender;

/// How long a reading taken over by another replica waits for its events in flight to
/// reach their outcome before its last checkpoint: a batch's write to Cosmos DB, with room
/// for throttling retries.
const SETTLE: Duration = Duration::from_millis(500);

/// The partition readers of one session and what they share.
#[derive(Clone)]
pub(super) struct Readers {
    /// The partitions' checkpoints, kept across sessions.
    pub(super) checkpoints: Arc<PartitionCheckpoints>,
    pub(super) metrics: Arc<Metrics>,
    /// How often a partition's checkpoint is written (`EVENTHUBS_CHECKPOINT_INTERVAL`).
    pub(super) checkpoint_interval: Duration,
    /// The pipeline's input.
    pub(super) tx: QueueSender,
    /// Ends the readings: cancelled when the source stops or the session ends.
    pub(super) reading: CancellationToken,
    /// Cancelled when the source stops, which ends a reading without forgetting it.
    pub(super) stop: CancellationToken,
    /// Learns how readings end.
    pub(super) health: SessionHealth,
    /// Ends the readings of partitions another replica took over.
    pub(super) takeovers: Takeovers,
    /// Each reading's progress, for the stall watchdog.
    pub(super) progress: Readings,
}

/// How a reading ended.
#[derive(Debug)]
enum ReadEnd {
    /// The source stops, or the processor is rebuilt.
    Cancelled,
    /// The stream failed or closed after `events` events: the partition is lost, displaced
    /// by another owner's receiver (or revoked by the processor) or not.
    Lost {
        why: String,
        events: u64,
        displaced: bool,
    },
    /// The checkpoint store names another owner: the partition is lost.
    TakenOver,
}

/// The source stopped and gave its partitions up: every partition still read is
/// released.
pub(super) fn released(checkpoints: &PartitionCheckpoints, metrics: &Metrics) {
    for partition in checkpoints.stop_reading() {
        metrics.set_partition_owned(&partition, false);
        metrics.ownership_change(&partition, OwnershipChange::Released);
    }
}

impl Readers {
    /// Starts a reading of `partition`: claimed, if no other reading of it runs.
    fn open(&self, partition: &str) -> PartitionQueue {
        let (queue, first) = self.checkpoints.open(partition);
        // Owned even if an earlier reading, ending, stopped counting it (`stopped`).
        self.metrics.set_partition_owned(partition, true);
        if first {
            self.metrics
                .ownership_change(partition, OwnershipChange::Claimed);
        }
        queue
    }

    /// A reading no longer takes events: the partition stops counting as owned here if
    /// no other reading of it runs, before its last checkpoint is written (which a new
    /// owner waits for), so that no two replicas count it at once.
    fn stopped(&self, queue: &PartitionQueue) {
        if self.checkpoints.only_reading(queue) {
            self.metrics.set_partition_owned(queue.id(), false);
        }
    }

    /// A reading ended without the source stopping: it is forgotten, and the partition
    /// is lost once no other reading of it runs.
    fn lost(&self, queue: &PartitionQueue) {
        if self.checkpoints.close(queue) {
            let partition = queue.id();
            self.metrics.set_partition_owned(partition, false);
            self.metrics
                .ownership_change(partition, OwnershipChange::Lost);
        }
    }

    /// Sends one event on as a message; false when the pipeline no longer takes any.
    async fn forward(&self, queue: &PartitionQueue, event: &ReceivedEventData) -> bool {
        match EventParts::of_received(queue.id(), event).into_message(queue) {
            Ok(message) => {
                self.metrics.received();
                tokio::select! {
                    sent = self.tx.send(message) => sent.is_ok(),
                    // Not sent: its acknowledgement is abandoned, the event comes again.
                    () = self.reading.cancelled() => false,
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
    /// lost) or the reading is cancelled, checkpointing every interval. Events at or below
    /// the last sequence number this reading took (a receiver that attached again from
    /// where it was opened) are skipped; events an earlier reading took (the partition
    /// came back, or the source rebuilt its session) are taken again and counted as read
    /// again.
    async fn read(
        &self,
        queue: &PartitionQueue,
        events: impl Stream<Item = Result<ReceivedEventData, EventHubsError>>,
        taken_over: &CancellationToken,
        progress: &Progress,
    ) -> ReadEnd {
        futures::pin_mut!(events);
        let mut ticker = tokio::time::interval(self.checkpoint_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_taken: Option<i64> = None;
        let mut skipped = 0u64;
        let mut events_read = 0u64;
        loop {
            progress.ready();
            tokio::select! {
                biased;
                () = self.reading.cancelled() => return ReadEnd::Cancelled,
                () = taken_over.cancelled() => return ReadEnd::TakenOver,
                _ = ticker.tick() => {
                    progress.checkpointing(true);
                    self.checkpoints.flush(queue).await;
                    progress.checkpointing(false);
                }
                event = events.next() => match event {
                    Some(Ok(event)) => {
                        events_read += 1;
                        let seq = event.sequence_number();
                        progress.arrived(seq);
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
                        if seq.is_some_and(|seq| queue.take(seq)) {
                            self.metrics.read_again(queue.id());
                        }
                        last_taken = seq.or(last_taken);
                        if !self.forward(queue, &event).await {
                            return ReadEnd::Cancelled;
                        }
                    }
                    Some(Err(err)) => return ReadEnd::Lost {
                        why: err.to_string(),
                        events: events_read,
                        displaced: matches!(err.kind, ErrorKind::ConsumerDisconnected(_)),
                    },
                    None => return ReadEnd::Lost {
                        why: "the receiver closed".into(),
                        events: events_read,
                        displaced: false,
                    },
                },
            }
        }
    }

    /// Starts the thread that reads the partitions sent to the returned channel, each in
    /// a task of its own, until the channel closes and every task has ended (then the
    /// returned receiver resolves).
    pub(super) fn spawn(
        self,
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
                                    tasks.spawn_local(self.clone().read_partition(client));
                                }
                                None => break,
                            },
                            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                        }
                    }
                    drop(self);
                    while tasks.join_next().await.is_some() {}
                });
                let _ = done_tx.send(());
            })
            .map_err(|e| SourceError::Failed(format!("cannot start the partition readers: {e}")))?;
        Ok((clients_tx, done))
    }

    /// Reads one partition until it is lost, the processor is rebuilt or the source stops.
    async fn read_partition(self, client: Arc<PartitionClient>) {
        let partition = client.get_partition_id().to_owned();
        if self.takeovers.forsaken(&partition) {
            tracing::info!(%partition, "partition claimed by another replica before its reading here began: not read");
            close(client, &partition);
            return;
        }
        tracing::info!(%partition, "reading partition");
        let queue = self.open(&partition);
        let reading = self.takeovers.reading(&partition);
        let progress = self.progress.begin(&partition);
        let end = self
            .read(
                &queue,
                client.stream_events(),
                &reading.taken_over,
                &progress,
            )
            .await;
        self.progress.ended(&partition, &progress);
        self.takeovers.ended(&partition, &reading);
        if !self.stop.is_cancelled() {
            self.stopped(&queue);
            // Another owner has the partition (its claim seen by the watch, or its
            // receiver displacing this one, or the processor revoking it): it waits for
            // this reading's last checkpoint (`handover.rs`), which the events in flight
            // reach first, so that none is read again.
            let handing_over = matches!(
                end,
                ReadEnd::TakenOver
                    | ReadEnd::Lost {
                        displaced: true,
                        ..
                    }
            );
            let why = match end {
                ReadEnd::Lost {
                    why,
                    events,
                    displaced,
                } => {
                    if !displaced {
                        self.metrics.session_break(SessionBreak::ReceiverFailed);
                        self.health.reading_failed(&partition, events, &why);
                    }
                    why
                }
                ReadEnd::TakenOver => "the checkpoint store names another owner".into(),
                ReadEnd::Cancelled => "the processor is rebuilt".into(),
            };
            tracing::info!(%partition, %why, "partition lost");
            if handing_over && !queue.settled(SETTLE).await {
                tracing::info!(%partition, within = ?SETTLE, "taken over with events still in flight: the new owner reads them again");
            }
            self.checkpoints.flush(&queue).await;
            if handing_over {
                match reading.claim() {
                    Some(claim) => self.checkpoints.hand_over(&partition, claim).await,
                    None => self.checkpoints.hand_over_to_owner(&partition).await,
                }
            }
            self.lost(&queue);
        }
        close(client, &partition);
    }
}

/// Closes a partition's client, which removes it from the processor: it may hand the
/// partition out again later. The receiver's detach waits for the hub's answer, which a
/// stalled connection never gives, so the close goes on beside the readings (on their
/// thread) instead of holding up the reading's end, and with it a session that ends because
/// its receivers stalled; a close still waiting when the session ends is dropped with its
/// connection.
fn close(client: Arc<PartitionClient>, partition: &str) {
    let Ok(client) = Arc::try_unwrap(client) else {
        return;
    };
    let partition = partition.to_owned();
    tokio::task::spawn_local(async move {
        if let Err(err) = client.close().await {
            tracing::debug!(%partition, error = %err, "closing the partition receiver failed");
        }
    });
}

#[cfg(test)]
mod tests {

    use azure_messaging_eventhubs::CheckpointStore;

    use super::*;
    use crate::source::Message;
    use crate::source::eventhubs::checkpointing::cosmos_store::CosmosCheckpointStore;
    use crate::source::eventhubs::checkpointing::store::Scope;
    use crate::source::eventhubs::reading::event::test_events::amqp_message;

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
        test_harness::eventually(
            "the checkpoint",
            Duration::from_secs(30),
            async || checkpoint_of(store, partition).await,
            |&now| now == Some(seq),
        )
        .await;
    }

    /// A partition read from SDK events: its checkpoint in the Cosmos store follows the
    /// final outcomes in order, events delivered again (a receiver that attached again
    /// from where it was opened) are skipped, and a lost partition is checkpointed and
    /// forgotten, with its ownership metrics; when it comes back, the events taken before
    /// are taken again and counted as read again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn partition_checkpoints_follow_final_outcomes_in_order() {
        let (_sim, store) = CosmosCheckpointStore::on_local_endpoint().await;
        let metrics = Arc::new(Metrics::new());
        let (tx, mut rx) = crate::source::queue::channel(1 << 20, metrics.clone());
        let readers = Readers {
            checkpoints: Arc::new(PartitionCheckpoints::new(
                Arc::new(store.clone()),
                Scope::new("hub.servicebus.windows.net", "hub", "$Default"),
                metrics.clone(),
            )),
            metrics: metrics.clone(),
            checkpoint_interval: Duration::from_millis(20),
            tx,
            reading: CancellationToken::new(),
            stop: CancellationToken::new(),
            health: SessionHealth::default(),
            takeovers: Takeovers::default(),
            progress: Readings::default(),
        };
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
        let queue = readers.open("4");
        let never = CancellationToken::new();
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
            readers.checkpoints.flush(&queue).await;
            assert_eq!(checkpoint_of(&store, "4").await, None);
            // 10 final, 11 dropped and counted, 12 pending: checkpoint 11.
            a.ack.finish();
            wait_for_checkpoint(&store, "4", 11).await;
            b.ack.finish();
            wait_for_checkpoint(&store, "4", 13).await;
            assert_eq!(metrics.counts().dropped(DropReason::Unroutable), 1);
            let _ = lose.send(());
        };
        let progress = Progress::default();
        let (end, ()) = tokio::join!(readers.read(&queue, stream, &never, &progress), pipeline);
        assert!(matches!(end, ReadEnd::Lost { .. }), "{end:?}");
        // Nothing delivered again reached the pipeline.
        assert!(rx.is_empty());
        assert_eq!(metrics.counts().received, 3);
        readers.lost(&queue);
        // Lost: no longer read, with its checkpoint kept.
        assert!(readers.checkpoints.stop_reading().is_empty());
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
        let queue = readers.open("4");
        let never = CancellationToken::new();
        let again =
            futures::stream::iter([(12, "b"), (13, "c"), (14, "d")].map(|(seq, device)| {
                Ok(amqp_message(seq, Some(device), 1_795_338_903_000).into())
            }));
        let end = readers
            .read(&queue, again, &never, &Progress::default())
            .await;
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
