//! The Event Hubs source: runs the SDK's `EventProcessor` on IoT Hub's built-in endpoint
//! (a connection string), with the checkpoint store in Cosmos DB, so that several writer
//! replicas share the partitions.
//!
//! Each partition the processor hands this replica is read by its own task (on a thread
//! of its own with a single-threaded runtime, because the SDK's partition event stream
//! is not `Send`), which turns
//! events into [`Message`](crate::source::Message)s ([`PartitionCheckpoints::message_of`]) and writes the
//! partition's checkpoint every `EVENTHUBS_CHECKPOINT_INTERVAL`, only up to the last event whose
//! outcome and whose predecessors' outcomes are final. A partition that is lost (another
//! replica claimed it, or the receiver failed) is checkpointed as far as it is final and
//! forgotten: its pending events come again to whoever reads it next. On stop, the tasks
//! stop taking events, and once the pipeline has drained, every partition is
//! checkpointed a last time.
//!
//! A failure of the processor itself (its checkpoint store unreachable, the hub refusing
//! the connection) ends the source with an error, so the writer exits non-zero and is
//! restarted; nothing is lost, since checkpoints only cover written events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use azure_messaging_eventhubs::models::{ReceivedEventData, StartPositions};
use azure_messaging_eventhubs::processor::PartitionClient;
use azure_messaging_eventhubs::{
    CheckpointStore, ConsumerClient, EventHubsError, EventProcessor, ProcessorStrategy,
    StartLocation, StartPosition,
};
use cosmos::CosmosClient;
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinSet, LocalSet};
use tokio_util::sync::CancellationToken;

use super::store::{CosmosCheckpointStore, Scope};
use super::{EventParts, PartitionCheckpoints};
use crate::config::{EventHubsConnection, EventHubsSettings, LoadBalancing, StartAt};
use crate::metrics::Metrics;
use crate::source::queue::QueueSender;
use crate::source::{Source, SourceControl, SourceError};

/// A duration as the SDK takes it (saturating: the settings are far below its range).
fn sdk_duration(duration: Duration) -> azure_core::time::Duration {
    azure_core::time::Duration::try_from(duration).unwrap_or(azure_core::time::Duration::MAX)
}

/// Where the checkpoint container lives.
#[derive(Debug, Clone)]
pub struct CheckpointContainer {
    /// The Cosmos DB account.
    pub client: CosmosClient,
    /// Database.
    pub database: String,
    /// Create the container when missing.
    pub create_if_missing: bool,
}

/// The Event Hubs source.
#[derive(Debug)]
pub struct EventHubsSource {
    connection: EventHubsConnection,
    settings: EventHubsSettings,
    checkpoints: CheckpointContainer,
    metrics: Arc<Metrics>,
}

impl EventHubsSource {
    /// A source reading the hub of `connection` with `settings`, keeping checkpoints in
    /// `checkpoints`.
    pub fn new(
        connection: EventHubsConnection,
        settings: EventHubsSettings,
        checkpoints: CheckpointContainer,
        metrics: Arc<Metrics>,
    ) -> Self {
        EventHubsSource {
            connection,
            settings,
            checkpoints,
            metrics,
        }
    }
}

impl Source for EventHubsSource {
    fn kind(&self) -> &'static str {
        "eventhubs"
    }

    fn run(
        self: Box<Self>,
        tx: QueueSender,
        control: SourceControl,
    ) -> BoxFuture<'static, Result<(), SourceError>> {
        run(*self, tx, control).boxed()
    }
}

/// The SDK's start position of a partition without checkpoint. Exclusive, because the
/// SDK carries `inclusive` over to the position it takes from a checkpoint, which names
/// the last event already written.
pub fn start_position(start: StartAt) -> StartPosition {
    StartPosition {
        location: match start {
            StartAt::Earliest => StartLocation::Earliest,
            StartAt::Latest => StartLocation::Latest,
            StartAt::EnqueuedAfter(time) => StartLocation::EnqueuedTime(time.into()),
        },
        inclusive: false,
    }
}

/// This replica's owner id in the checkpoint store. The SDK's processor takes the AMQP
/// connection's name for it, which is the client's application id: one name shared by
/// every replica would make them all one owner, each reading every partition. So it is
/// the host name (which pod owns which partition) and a random part (two replicas on one
/// host, or a restarted one, are different owners).
pub fn owner_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into());
    format!("cloud-writer-{host}-{:08x}", rand::random::<u32>())
}

/// The TLS stack of the AMQP connection builds its configuration from the process-wide
/// rustls provider; with two providers compiled in (ring for HTTPS, aws-lc-rs for the
/// AMQP crates), rustls cannot pick one, so this process names it.
pub fn install_tls_provider() {
    // Err: one is installed already, which is all that is needed.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What every partition task shares.
struct Shared {
    store: CosmosCheckpointStore,
    scope: Scope,
    tracker: PartitionCheckpoints,
    /// The sequence number last written as each partition's checkpoint.
    written: Mutex<HashMap<String, i64>>,
    metrics: Arc<Metrics>,
    /// How often a partition's checkpoint is written (`EVENTHUBS_CHECKPOINT_INTERVAL`).
    checkpoint_interval: Duration,
}

impl Shared {
    /// Writes the partition's checkpoint if its final position moved since the last write.
    async fn flush(&self, partition: &str) {
        let Some(position) = self.tracker.checkpoint(partition) else {
            return;
        };
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

    /// Forgets a lost partition.
    fn release(&self, partition: &str) {
        self.tracker.release(partition);
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(partition);
        self.metrics.set_ack_lag(partition, 0);
    }

    /// Sends one event on as a message; false when the pipeline no longer takes any.
    async fn forward(
        &self,
        partition: &str,
        event: &ReceivedEventData,
        tx: &QueueSender,
        reading: &CancellationToken,
    ) -> bool {
        let parts = EventParts::of_received(partition, event);
        match self.tracker.message_of(&parts) {
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
                self.metrics.dropped("unroutable");
                tracing::warn!(error = %err, "event dropped");
                ack.finish();
                true
            }
        }
    }
}

async fn run(
    source: EventHubsSource,
    tx: QueueSender,
    control: SourceControl,
) -> Result<(), SourceError> {
    let EventHubsSource {
        connection,
        settings,
        checkpoints,
        metrics,
    } = source;
    let store = CosmosCheckpointStore::open(
        &checkpoints.client,
        &checkpoints.database,
        &settings.checkpoint_container,
        checkpoints.create_if_missing,
    )
    .await
    .map_err(|e| SourceError::Config(e.to_string()))?;
    install_tls_provider();
    let hub = format!("{}/{}", connection.namespace, connection.entity_path);
    tracing::info!(%hub, consumer_group = %settings.consumer_group, "connecting to Event Hubs");
    // Connecting retries for up to a minute: a stop meanwhile ends the source at once.
    let owner = owner_id();
    tracing::info!(%owner, "owner id of this replica in the checkpoint store");
    let mut builder = ConsumerClient::builder()
        .with_consumer_group(settings.consumer_group.clone())
        .with_application_id(owner);
    if let Some(endpoint) = connection.dial_endpoint(settings.custom_endpoint.as_ref()) {
        tracing::info!(%endpoint, "dialling a custom Event Hubs endpoint");
        builder = builder.with_custom_endpoint(endpoint);
    }
    let open = builder.open_with_connection_string(connection.raw.expose(), None);
    let opened = tokio::select! {
        opened = open => opened,
        () = control.stop.cancelled() => return Ok(()),
    };
    let consumer = opened
        .map_err(|e| {
            SourceError::Failed(format!(
                "cannot connect to Event Hubs {hub}: {e} (check WRITER_SOURCE: the built-in endpoint's Event Hub-compatible connection string, and EVENTHUBS_CONSUMER_GROUP)"
            ))
        })?;
    let balancing = settings.balancing;
    let build = EventProcessor::builder()
        .with_update_interval(sdk_duration(balancing.interval))
        .with_partition_expiration_duration(sdk_duration(balancing.ownership_expiry))
        .with_load_balancing_strategy(match balancing.strategy {
            LoadBalancing::Greedy => ProcessorStrategy::Greedy,
            LoadBalancing::Balanced => ProcessorStrategy::Balanced,
        })
        .with_start_positions(StartPositions {
            per_partition: HashMap::new(),
            default: start_position(settings.start_position),
        })
        .build(consumer, Arc::new(store.clone()));
    let built = tokio::select! {
        built = build => built,
        () = control.stop.cancelled() => return Ok(()),
    };
    let processor = built.map_err(|e| {
        SourceError::Failed(format!(
            "cannot start the Event Hubs processor on {hub}: {e}"
        ))
    })?;
    let shared = Arc::new(Shared {
        store,
        scope: Scope::new(
            &connection.namespace,
            &connection.entity_path,
            &settings.consumer_group,
        ),
        tracker: PartitionCheckpoints::new(metrics.clone()),
        written: Mutex::default(),
        metrics: metrics.clone(),
        checkpoint_interval: settings.checkpoint_interval,
    });
    let reading = control.stop.child_token();
    let (clients, readers_done) = spawn_readers(shared.clone(), tx, reading.clone())?;
    let mut processor_task = tokio::spawn({
        let processor = processor.clone();
        async move { processor.run().await }
    });
    metrics.set_source_connected(true);
    tracing::info!(%hub, "Event Hubs processor running");
    let result = loop {
        tokio::select! {
            biased;
            () = reading.cancelled() => break Ok(()),
            joined = &mut processor_task => {
                let why = match joined {
                    Ok(Ok(())) => "it stopped".to_owned(),
                    Ok(Err(err)) => err.to_string(),
                    Err(err) => err.to_string(),
                };
                break Err(SourceError::Failed(format!("the Event Hubs processor failed: {why}")));
            }
            client = processor.next_partition_client() => match client {
                Ok(client) => {
                    if clients.send(client).is_err() {
                        break Err(SourceError::Failed("the partition readers stopped".into()));
                    }
                }
                Err(err) => break Err(SourceError::Failed(format!("the Event Hubs processor failed: {err}"))),
            },
        }
    };
    tracing::info!("Event Hubs source: no longer taking events");
    reading.cancel();
    let _ = processor.shutdown().await;
    // The readers end, dropping the last senders of the pipeline's input.
    drop(clients);
    let _ = readers_done.await;
    // Every taken event's outcome is final (or abandoned): checkpoint what was written.
    control.drained.cancelled().await;
    for partition in shared.tracker.partitions() {
        shared.flush(&partition).await;
    }
    processor_task.abort();
    metrics.set_source_connected(false);
    result
}

/// Starts the thread that reads the partitions sent to the returned channel, each in a
/// task of its own, until the channel closes and every task has ended (then the
/// returned receiver resolves).
fn spawn_readers(
    shared: Arc<Shared>,
    tx: QueueSender,
    reading: CancellationToken,
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
                                tasks.spawn_local(read_partition(client, shared.clone(), tx.clone(), reading.clone()));
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

/// Reads one partition until it is lost or the source stops.
async fn read_partition(
    client: Arc<PartitionClient>,
    shared: Arc<Shared>,
    tx: QueueSender,
    reading: CancellationToken,
) {
    let partition = client.get_partition_id().to_owned();
    tracing::info!(%partition, "reading partition");
    shared
        .read(&partition, client.stream_events(), &tx, &reading)
        .await;
    // Closing removes it from the processor, which may hand it out again later.
    if let Ok(client) = Arc::try_unwrap(client) {
        if let Err(err) = client.close().await {
            tracing::debug!(%partition, error = %err, "closing the partition receiver failed");
        }
    }
}

impl Shared {
    /// Reads a partition's events until the stream ends (the partition is lost) or
    /// `reading` is cancelled, checkpointing every [`Shared::checkpoint_interval`]. A lost
    /// partition is checkpointed as far as it is final, then forgotten (its other events
    /// come again to the next reader).
    async fn read(
        &self,
        partition: &str,
        events: impl Stream<Item = Result<ReceivedEventData, EventHubsError>>,
        tx: &QueueSender,
        reading: &CancellationToken,
    ) {
        futures::pin_mut!(events);
        let mut ticker = tokio::time::interval(self.checkpoint_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = reading.cancelled() => return,
                _ = ticker.tick() => self.flush(partition).await,
                event = events.next() => match event {
                    Some(Ok(event)) => {
                        if !self.forward(partition, &event, tx, reading).await {
                            return;
                        }
                    }
                    Some(Err(err)) => {
                        tracing::info!(%partition, error = %err, "partition lost");
                        break;
                    }
                    None => {
                        tracing::info!(%partition, "partition closed");
                        break;
                    }
                },
            }
        }
        self.flush(partition).await;
        self.release(partition);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use cosmos::{CosmosConfig, Credential, MasterKey};
    use cosmos_sim::CosmosSim;

    use super::*;
    use crate::source::Message;
    use crate::source::eventhubs::test_events::amqp_message;

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

    #[test]
    fn start_positions_are_exclusive() {
        assert_eq!(
            start_position(StartAt::Earliest),
            StartPosition {
                location: StartLocation::Earliest,
                inclusive: false
            }
        );
        let at = "2026-11-22T09:00:00Z".parse().unwrap();
        assert_eq!(
            start_position(StartAt::EnqueuedAfter(at)).location,
            StartLocation::EnqueuedTime(at.into())
        );
    }

    /// A partition read from SDK events: its checkpoint in the Cosmos store follows the
    /// final outcomes in order, and a lost partition is checkpointed and forgotten.
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
        let shared = Shared {
            store: store.clone(),
            scope: Scope::new("hub.servicebus.windows.net", "hub", "$Default"),
            tracker: PartitionCheckpoints::new(metrics.clone()),
            written: Mutex::default(),
            metrics: metrics.clone(),
            checkpoint_interval: Duration::from_millis(20),
        };
        // Events 10..=13 of partition 4 (11 without a device identity), then the
        // partition stays open until `lose` fires.
        let events: Vec<Result<ReceivedEventData, EventHubsError>> = [
            (10, Some("a")),
            (11, None),
            (12, Some("b")),
            (13, Some("c")),
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
            shared.flush("4").await;
            assert_eq!(checkpoint_of(&store, "4").await, None);
            // 10 final, 11 dropped and counted, 12 pending: checkpoint 11.
            a.ack.finish();
            wait_for_checkpoint(&store, "4", 11).await;
            b.ack.finish();
            wait_for_checkpoint(&store, "4", 13).await;
            assert_eq!(metrics.counts().dropped("unroutable"), 1);
            let _ = lose.send(());
        };
        tokio::join!(shared.read("4", stream, &tx, &reading), pipeline);
        // Lost: forgotten, with its checkpoint kept.
        assert!(shared.tracker.partitions().is_empty());
        assert_eq!(checkpoint_of(&store, "4").await, Some(13));
    }
}
