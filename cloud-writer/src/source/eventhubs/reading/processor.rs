//! How the Event Hubs source runs the SDK's `EventProcessor` on IoT Hub's built-in
//! endpoint (a connection string), with the checkpoint store in Blob Storage or Cosmos DB, so that several
//! writer replicas share the partitions: balanced by the processor every
//! `EVENTHUBS_LOAD_BALANCING_INTERVAL`, a dead replica's ownerships taken over after
//! `EVENTHUBS_OWNERSHIP_EXPIRY`, each partition read by this replica's
//! [`partitions`] readers from its checkpoint on.
//!
//! A session is one consumer connection with its processor, its readers and its lag
//! monitor ([`lag`]). When the processor fails (the checkpoint store refusing,
//! the hub out of reach), the session ends: its readings are checkpointed as far as they
//! are final and forgotten, `source_connected` turns 0, a line per load-balancing interval
//! says why, and a new session starts after a backoff, resuming from the checkpoints under
//! the same owner id, so the ownerships that did not expire meanwhile are still this
//! replica's. A receiver that fails alone is opened again by the processor at its next
//! balancing; a partition whose readings end twice in a row before any event ends the
//! session too (its AMQP session is broken: [`SessionHealth`]), and so do receivers that
//! wait for events the hub holds and are delivered none (stalled: [`stall`]). Only a hub
//! that refuses the connection string (key, policy or entity) before any session ran stops
//! the source, with a message naming the setting.
//!
//! On stop the readers stop taking events and the processor stops renewing; once the
//! pipeline has drained, every partition is checkpointed a last time and given up in the
//! checkpoint store, so the other replicas take them at their next balancing rather than
//! after the ownership expiry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use azure_messaging_eventhubs::models::StartPositions;
use azure_messaging_eventhubs::{
    ConsumerClient, EventHubsError, EventProcessor, ProcessorStrategy, StartLocation, StartPosition,
};
use entra_credential::EntraCredential;
use tokio_util::sync::CancellationToken;

use super::failure::{Failure, Reporter, SessionEnd, SessionHealth, cause_of};
use super::lag::Monitor;
use super::partitions::{self, Readers};
use super::stall::Readings;
use crate::config::{
    EventHubsAuth, EventHubsConnection, EventHubsSettings, LoadBalancing, StartAt,
};
use crate::metrics::{Metrics, SessionBreak};
use crate::source::eventhubs::checkpointing::checkpoints::PartitionCheckpoints;
use crate::source::eventhubs::checkpointing::handover::Handovers;
use crate::source::eventhubs::checkpointing::store::{self, Scope, SharedStore};
use crate::source::eventhubs::checkpointing::takeover::{Takeovers, Watch};
use crate::source::eventhubs::checkpointing::{self, CheckpointContainer};
use crate::source::queue::QueueSender;
use crate::source::{RECONNECT_BACKOFF, SourceControl, SourceError};
use retry_backoff::Backoff;

/// Longest wait for a client to close its connection.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A duration as the SDK takes it (saturating: the settings are far below its range).
fn sdk_duration(duration: Duration) -> azure_core::time::Duration {
    azure_core::time::Duration::try_from(duration).unwrap_or(azure_core::time::Duration::MAX)
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

/// What every session of the source uses.
struct Context {
    connection: EventHubsConnection,
    /// The writer's Entra ID credential, for a namespace read with tokens.
    credential: Option<Arc<EntraCredential>>,
    settings: EventHubsSettings,
    /// This replica's owner id.
    owner: String,
    /// `namespace/event hub`, for logs.
    hub: String,
    store: SharedStore,
    scope: Scope,
    checkpoints: Arc<PartitionCheckpoints>,
    metrics: Arc<Metrics>,
    tx: QueueSender,
}

impl Context {
    /// Opens a client of the hub named `application_id` (for the processor's client, the
    /// owner id).
    async fn open(&self, application_id: String) -> Result<ConsumerClient, EventHubsError> {
        let mut builder = ConsumerClient::builder()
            .with_consumer_group(self.settings.consumer_group.clone())
            .with_application_id(application_id);
        if let Some(endpoint) = self
            .connection
            .dial_endpoint(self.settings.custom_endpoint.as_ref())
        {
            builder = builder.with_custom_endpoint(endpoint);
        }
        match (&self.connection.auth, &self.credential) {
            (EventHubsAuth::SharedAccessKey { raw, .. }, _) => {
                builder
                    .open_with_connection_string(raw.expose(), None)
                    .await
            }
            (EventHubsAuth::Entra, Some(credential)) => {
                builder
                    .open(
                        &self.connection.namespace,
                        self.connection.entity_path.clone(),
                        credential.for_azure_sdk(),
                    )
                    .await
            }
            (EventHubsAuth::Entra, None) => unreachable!("run() builds the credential"),
        }
    }

    /// Builds the processor on `consumer`, using the checkpoint store through `handovers`.
    async fn processor(
        &self,
        consumer: ConsumerClient,
        handovers: Handovers,
    ) -> Result<Arc<EventProcessor>, EventHubsError> {
        let balancing = self.settings.balancing;
        EventProcessor::builder()
            .with_update_interval(sdk_duration(balancing.interval))
            .with_partition_expiration_duration(sdk_duration(balancing.ownership_expiry))
            .with_load_balancing_strategy(match balancing.strategy {
                LoadBalancing::Greedy => ProcessorStrategy::Greedy,
                LoadBalancing::Balanced => ProcessorStrategy::Balanced,
            })
            .with_start_positions(StartPositions {
                per_partition: Default::default(),
                default: start_position(self.settings.start_position),
            })
            .build(consumer, Arc::new(handovers))
            .await
    }
}

/// Closes a client in the background, at most [`CLOSE_TIMEOUT`]: a hub that does not
/// answer the detach of a link never holds the source up.
fn close_client(client: ConsumerClient) {
    tokio::spawn(async move {
        if let Ok(Err(err)) = tokio::time::timeout(CLOSE_TIMEOUT, client.close()).await {
            tracing::debug!(error = %err, "closing an Event Hubs client failed");
        }
    });
}

pub(in crate::source::eventhubs) async fn run(
    connection: EventHubsConnection,
    settings: EventHubsSettings,
    checkpoints: CheckpointContainer,
    metrics: Arc<Metrics>,
    tx: QueueSender,
    control: SourceControl,
) -> Result<(), SourceError> {
    let store = checkpointing::open(&checkpoints, &settings)
        .await
        .map_err(|e| SourceError::Config(e.to_string()))?;
    install_tls_provider();
    let credential = match connection.auth {
        EventHubsAuth::Entra => {
            let source = entra_credential::Source::from_env()
                .map_err(|e| SourceError::Config(e.to_string()))?;
            tracing::info!(credential = %source, "Event Hubs: Entra ID tokens");
            Some(Arc::new(
                EntraCredential::new(source).map_err(|e| SourceError::Config(e.to_string()))?,
            ))
        }
        EventHubsAuth::SharedAccessKey { .. } => None,
    };
    let owner = owner_id();
    let hub = format!("{}/{}", connection.namespace, connection.entity_path);
    tracing::info!(%hub, consumer_group = %settings.consumer_group, %owner, "connecting to Event Hubs");
    if let Some(endpoint) = connection.dial_endpoint(settings.custom_endpoint.as_ref()) {
        tracing::info!(%endpoint, "dialling a custom Event Hubs endpoint");
    }
    let scope = Scope::new(
        &connection.namespace,
        &connection.entity_path,
        &settings.consumer_group,
    );
    let checkpoints = Arc::new(PartitionCheckpoints::new(
        store.clone(),
        scope.clone(),
        metrics.clone(),
    ));
    let interval = settings.balancing.interval;
    let ctx = Context {
        connection,
        credential,
        settings,
        owner,
        hub,
        store,
        scope,
        checkpoints,
        metrics: metrics.clone(),
        tx,
    };
    // Not ready before this replica reads a partition or finds none free.
    metrics.set_source_assigned(false);
    let mut backoff = Backoff::new(RECONNECT_BACKOFF);
    let mut reporter = Reporter {
        every: interval,
        last: None,
        quiet: 0,
    };
    let mut ran = false;
    let result = loop {
        let started = Instant::now();
        match session(&ctx, &control.stop, &mut ran).await {
            SessionEnd::Stopped => break Ok(()),
            SessionEnd::Failed(failure) => {
                metrics.set_source_connected(false);
                metrics.session_break(failure.what);
                if failure.refused && !ran {
                    let check = match ctx.connection.auth {
                        EventHubsAuth::SharedAccessKey { .. } => {
                            "WRITER_SOURCE, the built-in endpoint's Event Hub-compatible connection string (its SharedAccessKey, a policy with the Service connect or Listen right, and EntityPath)"
                        }
                        EventHubsAuth::Entra => {
                            "that the writer's identity has the role \"Azure Event Hubs Data Receiver\" on the event hub or its namespace (az role assignment create), its tenant (AZURE_TENANT_ID), and WRITER_SOURCE (sb://{namespace}/{event hub})"
                        }
                    };
                    break Err(SourceError::Failed(format!(
                        "the hub {} refused the connection ({}): check {check}, and EVENTHUBS_CONSUMER_GROUP",
                        ctx.hub, failure.cause
                    )));
                }
                if failure.refused {
                    // A token the hub no longer takes: the next session asks for a new one.
                    if let Some(credential) = &ctx.credential {
                        credential.renew();
                    }
                }
                if started.elapsed() >= interval {
                    backoff.reset();
                }
                let delay = backoff.next_delay();
                reporter.failed(&ctx.hub, &failure, delay);
                if control
                    .stop
                    .run_until_cancelled(tokio::time::sleep(delay))
                    .await
                    .is_none()
                {
                    break Ok(());
                }
            }
        }
    };
    tracing::info!("Event Hubs source: no longer taking events");
    metrics.set_source_connected(false);
    // The last sender of the pipeline's input goes: the pipeline drains.
    drop(ctx.tx);
    control.drained.cancelled().await;
    // Every taken event's outcome is final (or abandoned): checkpoint what was written,
    // then give the partitions up.
    ctx.checkpoints.flush_current().await;
    if ran {
        give_up(&ctx.store, &ctx.scope, &ctx.owner).await;
        partitions::released(&ctx.checkpoints, &metrics);
    }
    result
}

/// Gives this replica's partitions up in the checkpoint store, so that the other
/// replicas take them at their next balancing.
async fn give_up(store: &SharedStore, scope: &Scope, owner: &str) {
    match store::relinquish(&**store, scope, owner).await {
        Ok(partitions) => {
            tracing::info!(
                ?partitions,
                "partitions given up: the other replicas take them at their next balancing"
            );
        }
        Err(err) => {
            tracing::warn!(error = %err, "partitions not given up: the other replicas take them once the ownerships expire (EVENTHUBS_OWNERSHIP_EXPIRY)");
        }
    }
}

/// One session: a consumer connection, its processor, the readers of the partitions it
/// hands this replica, and the lag monitor; until the source stops or the processor fails.
/// Sets `ran` once the processor runs (the hub took the connection string).
async fn session(ctx: &Context, stop: &CancellationToken, ran: &mut bool) -> SessionEnd {
    // A client of its own for the management requests (partition ids, then the lag):
    // the processor takes its client.
    let monitor = match stop
        .run_until_cancelled(ctx.open(format!("{}-monitor", ctx.owner)))
        .await
    {
        None => return SessionEnd::Stopped,
        Some(Err(err)) => return Failure::of(SessionBreak::Connect, &err),
        Some(Ok(client)) => client,
    };
    let partitions = match stop
        .run_until_cancelled(monitor.get_eventhub_properties())
        .await
    {
        Some(Ok(properties)) => properties.partition_ids,
        other => {
            close_client(monitor);
            return match other {
                Some(Err(err)) => Failure::of(SessionBreak::HubSilent, &err),
                _ => SessionEnd::Stopped,
            };
        }
    };
    let takeovers = Takeovers::default();
    let handovers = Handovers::new(
        ctx.store.clone(),
        ctx.owner.clone(),
        ctx.settings.balancing.ownership_expiry,
        partitions.len(),
        takeovers.clone(),
    );
    let processor = match stop
        .run_until_cancelled(async {
            let consumer = ctx.open(ctx.owner.clone()).await?;
            ctx.processor(consumer, handovers).await
        })
        .await
    {
        Some(Ok(processor)) => processor,
        other => {
            close_client(monitor);
            return match other {
                Some(Err(err)) => Failure::of(SessionBreak::ProcessorStart, &err),
                _ => SessionEnd::Stopped,
            };
        }
    };
    let reading = stop.child_token();
    let health = SessionHealth::default();
    let progress = Readings::default();
    let readers = Readers {
        checkpoints: ctx.checkpoints.clone(),
        metrics: ctx.metrics.clone(),
        checkpoint_interval: ctx.settings.checkpoint_interval,
        tx: ctx.tx.clone(),
        reading: reading.clone(),
        stop: stop.clone(),
        health: health.clone(),
        takeovers: takeovers.clone(),
        progress: progress.clone(),
    };
    let (clients, readers_done) = match readers.spawn() {
        Ok(readers) => readers,
        Err(err) => {
            close_client(monitor);
            return SessionEnd::Failed(Failure {
                what: SessionBreak::ReadersStart,
                cause: err.to_string(),
                refused: false,
            });
        }
    };
    *ran = true;
    let mut processor_task = tokio::spawn({
        let processor = processor.clone();
        async move { processor.run().await }
    });
    let takeover_task = tokio::spawn(
        Watch {
            store: ctx.store.clone(),
            scope: ctx.scope.clone(),
            owner: ctx.owner.clone(),
            interval: ctx.settings.balancing.interval,
            expiry: ctx.settings.balancing.ownership_expiry,
            partitions: partitions.clone(),
            metrics: ctx.metrics.clone(),
        }
        .run(takeovers, reading.clone()),
    );
    let monitor_task = tokio::spawn(
        Monitor {
            hub: monitor,
            partitions,
            checkpoints: ctx.checkpoints.clone(),
            metrics: ctx.metrics.clone(),
            interval: ctx.settings.balancing.interval,
            readings: progress,
            health: health.clone(),
        }
        .run(reading.clone()),
    );
    tracing::info!(hub = %ctx.hub, "Event Hubs processor running");
    let failed = |what: SessionBreak, cause: String| {
        SessionEnd::Failed(Failure {
            what,
            cause,
            refused: false,
        })
    };
    let end = loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break SessionEnd::Stopped,
            (what, cause) = health.broken() => break failed(what, cause),
            joined = &mut processor_task => {
                let cause = match joined {
                    Ok(Ok(())) => "it stopped".to_owned(),
                    Ok(Err(err)) => cause_of(&err),
                    Err(err) => err.to_string(),
                };
                break failed(SessionBreak::ProcessorFailed, cause);
            }
            client = processor.next_partition_client() => match client {
                Ok(client) => {
                    if clients.send(client).is_err() {
                        break failed(SessionBreak::ReadersStopped, String::new());
                    }
                }
                Err(err) => break failed(SessionBreak::ProcessorFailed, cause_of(&err)),
            },
        }
    };
    // No more renewals or receivers; the readers end (keeping their events when the
    // source stops, else checkpointing and forgetting them).
    reading.cancel();
    processor_task.abort();
    let _ = processor_task.await;
    drop(clients);
    let _ = readers_done.await;
    if let Ok(client) = monitor_task.await {
        close_client(client);
    }
    let _ = takeover_task.await;
    match Arc::try_unwrap(processor) {
        Ok(processor) => {
            tokio::spawn(async move {
                if let Ok(Err(err)) = tokio::time::timeout(CLOSE_TIMEOUT, processor.close()).await {
                    tracing::debug!(error = %err, "closing the processor failed");
                }
            });
        }
        Err(_) => {
            tracing::debug!("the processor is still shared; its connection is left to the hub")
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
