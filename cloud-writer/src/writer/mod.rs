//! The running writer: the startup guard, the wiring of source, pipeline, sink and
//! metrics, and the orderly shutdown.
//!
//! The guard refuses a container partitioned on a path the documents do not carry. With
//! `WRITER_FORCE_MISSING_PARTITION_KEY` it writes anyway, as a misconfigured writer would:
//! every document goes under the undefined partition key, so one physical partition takes
//! every write (the field's hot partition).
//!
//! Shutdown (SIGTERM, or [`Writer::shutdown`]): the source stops taking messages, the
//! pipeline finishes its batch, the sink drives every in-flight write to its final
//! outcome, the source acknowledges (PUBACK, checkpoint) what became final, and the
//! writer returns.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cosmos::{
    BulkConfig, ContainerClient, ContainerSetup, CosmosClient, CosmosConfig, CosmosError,
    Credential, MasterKey,
};
use telemetry::{DocumentLayout, PartitionKeyPath};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{CosmosSettings, NewestWins, SourceSpec, WriterConfig};
use crate::metrics::server::{self, ServeSettings};
use crate::metrics::{Counts, DropReason, HoldReason, Metrics};
use crate::pipeline::reject::Rejects;
use crate::pipeline::{self, PipelineSettings};
use crate::sink::{CosmosSink, Encoder, SinkSettings};
use crate::source::eventhubs::processor::{CheckpointContainer, EventHubsSource};
use crate::source::mqtt::{MqttSettings, MqttSource};
use crate::source::{Source, SourceControl, SourceError, queue};

/// Drones whose high-water mark is remembered.
const HIGH_WATER_CAPACITY: usize = 200_000;
/// Longest wait for in-flight writes at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the writer cannot start. Each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The container is partitioned on a path the documents do not carry.
    #[error(
        "container '{container}' is partitioned on '{container_path}', but this writer puts the device id at '{configured}' (and /deviceId): every document would land in one logical partition. Set COSMOS_PARTITION_KEY_PATH={container_path} so that documents carry the device id there, or use a container partitioned on /deviceId (WRITER_FORCE_MISSING_PARTITION_KEY=true writes anyway, into that one partition)"
    )]
    PartitionKeyMismatch {
        /// The container.
        container: String,
        /// The container's partition key path.
        container_path: String,
        /// COSMOS_PARTITION_KEY_PATH.
        configured: String,
    },
    /// The container's partition key path cannot be carried by any document layout.
    #[error(
        "container '{container}' has the partition key path '{path}', which documents cannot carry: {reason}"
    )]
    UnusableContainerPath {
        /// The container.
        container: String,
        /// Its path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The database or container does not exist.
    #[error(
        "database '{database}' or container '{container}' does not exist at {endpoint}: create it (partition key /deviceId), or set COSMOS_CREATE_IF_MISSING=true"
    )]
    Missing {
        /// The database.
        database: String,
        /// The container.
        container: String,
        /// The account endpoint.
        endpoint: String,
    },
    /// A setting is unusable.
    #[error("{0}")]
    Config(String),
    /// Cosmos DB could not be reached or refused.
    #[error("Cosmos DB: {0}")]
    Cosmos(#[from] CosmosError),
    /// The metrics listener could not be bound.
    #[error("cannot listen on METRICS_ADDR {addr}: {source}")]
    Metrics {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The dead-letter file cannot be opened.
    #[error("cannot open DEAD_LETTER_FILE: {0}")]
    DeadLetter(std::io::Error),
}

/// Why a running writer stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// In-flight writes did not finish within the drain timeout.
    #[error(
        "in-flight writes did not finish within {0:?}; their messages were not acknowledged and will be delivered again"
    )]
    DrainTimeout(Duration),
    /// Stopped while holding the stream (Cosmos DB refused every write).
    #[error(
        "stopped while holding the stream ({0}): the positions not written were not acknowledged and will be delivered again"
    )]
    Held(HoldReason),
    /// A task panicked.
    #[error("a writer task failed: {0}")]
    Task(String),
}

/// A Cosmos DB client for the writer's settings.
pub fn cosmos_client(settings: &CosmosSettings) -> Result<CosmosClient, StartError> {
    let key = MasterKey::from_base64(settings.key.expose())
        .map_err(|e| StartError::Config(format!("COSMOS_KEY is not a base64 account key: {e}")))?;
    let mut config = CosmosConfig::new(settings.endpoint.clone(), Credential::MasterKey(key));
    config.accept_invalid_certs = settings.accept_invalid_certs;
    if let Some(insecure) = &settings.insecure {
        tracing::warn!("{insecure}");
    }
    Ok(CosmosClient::new(config)?)
}

/// A container that passed the startup guard, or was forced past it.
#[derive(Debug, Clone)]
pub struct OpenedContainer {
    /// The container.
    pub container: ContainerClient,
    /// The documents lack the container's partition key (forced past the guard): they go
    /// under the undefined key, all into one logical partition.
    pub missing_partition_key: bool,
}

/// The startup guard: opens the container (creating database and container when told
/// to), and checks that the documents of `layout` carry its partition key. When they do
/// not, it refuses, unless `settings.force_missing_partition_key` says to write anyway
/// (with a loud warning).
pub async fn open_container(
    client: &CosmosClient,
    settings: &CosmosSettings,
    layout: &DocumentLayout,
    default_ttl: Option<i64>,
) -> Result<OpenedContainer, StartError> {
    let container = client.container(&settings.database, &settings.container);
    let properties = match container.properties().await {
        Ok(properties) => properties,
        Err(err) if err.is_not_found() && settings.create_if_missing => {
            client
                .create_database_if_missing(&settings.database)
                .await?;
            let setup = ContainerSetup {
                partition_key_path: settings.partition_key_path.to_string(),
                location_path: Some("/location".into()),
                default_ttl,
                throughput: settings.throughput,
            };
            tracing::info!(database = %settings.database, container = %settings.container, "creating the container");
            container.create_if_missing(&setup).await?
        }
        Err(err) if err.is_not_found() => {
            return Err(StartError::Missing {
                database: settings.database.clone(),
                container: settings.container.clone(),
                endpoint: settings.endpoint.to_string(),
            });
        }
        Err(err) => return Err(err.into()),
    };
    let path_text = properties
        .partition_key
        .paths
        .first()
        .cloned()
        .unwrap_or_default();
    let container_path: PartitionKeyPath =
        path_text
            .parse()
            .map_err(|e: telemetry::document::PartitionKeyPathError| {
                StartError::UnusableContainerPath {
                    container: settings.container.clone(),
                    path: path_text.clone(),
                    reason: e.to_string(),
                }
            })?;
    let single = properties.partition_key.paths.len() == 1;
    if single && layout.carries(&container_path) {
        return Ok(OpenedContainer {
            container,
            missing_partition_key: false,
        });
    }
    let refusal = StartError::PartitionKeyMismatch {
        container: settings.container.clone(),
        container_path: properties.partition_key.paths.join(","),
        configured: layout.partition_key_path().to_string(),
    };
    // The undefined key has one component: a hierarchical key is not forced.
    if !(single && settings.force_missing_partition_key) {
        return Err(refusal);
    }
    tracing::warn!(
        container = %settings.container,
        container_path = %container_path,
        "WRITER_FORCE_MISSING_PARTITION_KEY is set, so the startup guard is overridden: {refusal}. \
         Every document goes under the undefined partition key: ONE physical partition takes \
         every write and throttles (HTTP 429) while the others idle, and adding RU/s does not help"
    );
    Ok(OpenedContainer {
        container,
        missing_partition_key: true,
    })
}

/// Whether the server takes Patch operations in batches: a Patch of a document that does
/// not exist is answered 404 by one that does, while one without Patch in batches (e.g.
/// `@vercel/cosmosdb-server`) refuses the whole batch with 400.
pub async fn patch_in_batches(
    container: &ContainerClient,
    undefined_key: bool,
) -> Result<bool, StartError> {
    const PROBE_ID: &str = "cloud-writer-patch-check";
    let (writer, mut outcomes) = container.bulk_writer::<()>(BulkConfig::default());
    let op = cosmos::BulkOperation {
        kind: cosmos::OperationType::Patch,
        partition_key: if undefined_key {
            cosmos::PartitionKey::Undefined
        } else {
            PROBE_ID.into()
        },
        id: Some(PROBE_ID.into()),
        body: bytes::Bytes::from_static(
            br#"{"operations":[{"op":"set","path":"/patchCheck","value":1}],"condition":"from c where false"}"#,
        ),
        if_match: None,
        context: (),
    };
    if writer.submit(op).await.is_err() {
        return Err(StartError::Config("the bulk writer closed at start".into()));
    }
    writer.close().await;
    let Some(outcome) = outcomes.next().await else {
        return Err(StartError::Config("the Patch check got no outcome".into()));
    };
    match (outcome.status, outcome.whole_request) {
        (400, true) => Ok(false),
        (401 | 403, _) => Err(StartError::Config(format!(
            "Cosmos DB refuses the account key ({}): set COSMOS_KEY (or COSMOS_KEY_FILE) to the account's current key",
            outcome.status
        ))),
        _ => Ok(true),
    }
}

/// The bulk writer settings the writer uses.
pub fn bulk_config(max_in_flight: usize) -> BulkConfig {
    BulkConfig {
        queue_capacity: max_in_flight.max(cosmos_wire::batch::MAX_OPERATIONS),
        max_concurrency_per_range: 32,
        initial_concurrency: 4,
        ..BulkConfig::default()
    }
}

/// A running writer.
#[derive(Debug)]
pub struct Writer {
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    metrics_addr: Option<SocketAddr>,
    task: JoinHandle<Result<(), RunError>>,
}

impl Writer {
    /// Checks the settings and the container (the startup guard), binds the metrics
    /// listener, connects the source named by `config.source` and starts writing.
    pub async fn start(config: WriterConfig) -> Result<Writer, StartError> {
        let bulk = bulk_config(config.max_in_flight);
        Writer::start_with_bulk(config, bulk).await
    }

    /// Like [`Writer::start`], with the bulk writer's settings given instead of derived
    /// from `config.max_in_flight`: e.g. one operation at a time, to compare serial
    /// writing with bulk writing (the fleet demo's `serial` scenario).
    pub async fn start_with_bulk(
        config: WriterConfig,
        bulk: BulkConfig,
    ) -> Result<Writer, StartError> {
        let spec = config.source.clone();
        let client_id = config.mqtt_client_id.clone();
        let receive_maximum = config.mqtt_receive_maximum;
        let share_group = config.mqtt_share_group.clone();
        let mqtt_tls = config.mqtt_tls.clone();
        let eventhubs = config.eventhubs.clone();
        let cosmos = config.cosmos.clone();
        Writer::start_inner(config, bulk, move |metrics| {
            let source: Box<dyn Source> = match spec {
                None => {
                    return Err(StartError::Config(
                        "WRITER_SOURCE is not set: mqtt://host:port, or an Event Hubs connection string".into(),
                    ));
                }
                Some(SourceSpec::Mqtt(url)) => {
                    let settings = MqttSettings {
                        receive_maximum,
                        ..MqttSettings::from_url(&url.0, client_id, share_group, &mqtt_tls)
                            .map_err(|e| StartError::Config(e.to_string()))?
                    };
                    Box::new(MqttSource::new(settings, metrics))
                }
                Some(SourceSpec::EventHubs(connection)) => Box::new(EventHubsSource::new(
                    connection,
                    eventhubs,
                    CheckpointContainer {
                        client: cosmos_client(&cosmos)?,
                        database: cosmos.database.clone(),
                        create_if_missing: cosmos.create_if_missing,
                    },
                    metrics,
                )),
            };
            Ok(source)
        })
        .await
    }

    /// Like [`Writer::start`], with the source built by `make_source` (given the
    /// writer's metrics) instead of `config.source`.
    pub async fn start_with(
        config: WriterConfig,
        make_source: impl FnOnce(Arc<Metrics>) -> Result<Box<dyn Source>, StartError>,
    ) -> Result<Writer, StartError> {
        let bulk = bulk_config(config.max_in_flight);
        Writer::start_inner(config, bulk, make_source).await
    }

    async fn start_inner(
        config: WriterConfig,
        bulk: BulkConfig,
        make_source: impl FnOnce(Arc<Metrics>) -> Result<Box<dyn Source>, StartError>,
    ) -> Result<Writer, StartError> {
        let metrics = Arc::new(Metrics::new());
        let stop = CancellationToken::new();
        let layout = DocumentLayout::new(config.cosmos.partition_key_path.clone());
        let client = cosmos_client(&config.cosmos)?;
        let default_ttl = config.history.and_then(|h| h.ttl).map(|_| -1);
        if config.cosmos.force_missing_partition_key && config.newest_wins == NewestWins::Etag {
            return Err(StartError::Config(
                "WRITER_FORCE_MISSING_PARTITION_KEY needs NEWEST_WINS=patch: the etag mode reads a drone's document by a query on its device id's partition".into(),
            ));
        }
        if config.cosmos.force_missing_partition_key && config.history.is_some() {
            return Err(StartError::Config(
                "WRITER_FORCE_MISSING_PARTITION_KEY cannot be used with HISTORY=true: every history document would go under the undefined partition key, one logical partition that fills up (20 GB) and then refuses every write. Unset HISTORY or WRITER_FORCE_MISSING_PARTITION_KEY".into(),
            ));
        }
        let opened = open_container(&client, &config.cosmos, &layout, default_ttl).await?;
        let mut newest_wins = config.newest_wins;
        if newest_wins == NewestWins::Patch
            && !patch_in_batches(&opened.container, opened.missing_partition_key).await?
        {
            if opened.missing_partition_key {
                return Err(StartError::Config(
                    "the server does not support Patch in batches, so this writer needs NEWEST_WINS=etag, which WRITER_FORCE_MISSING_PARTITION_KEY does not allow".into(),
                ));
            }
            tracing::warn!(
                "the server refuses Patch in batches: falling back to NEWEST_WINS=etag (read, then Replace with ifMatch); set NEWEST_WINS=etag to say so and skip this check"
            );
            metrics.set_newest_wins_fallback(true);
            newest_wins = NewestWins::Etag;
        }
        let source = make_source(metrics.clone())?;
        let rejects = Rejects::new(metrics.clone(), config.dead_letter_file.as_deref())
            .map_err(StartError::DeadLetter)?;
        let metrics_addr = match config.metrics_addr {
            Some(addr) => {
                let listener = server::bind(addr)
                    .await
                    .map_err(|source| StartError::Metrics { addr, source })?;
                let bound = listener.local_addr().ok();
                tokio::spawn(server::serve(
                    listener,
                    metrics.clone(),
                    ServeSettings::new(config.healthz_stall_after),
                    stop.child_token(),
                ));
                bound
            }
            None => None,
        };
        let mut encoder = Encoder::new(
            layout,
            newest_wins == NewestWins::Patch,
            config.history.map(|h| h.ttl),
        );
        if opened.missing_partition_key {
            encoder = encoder.with_undefined_partition_key();
        }
        let sink = CosmosSink::start(
            opened.container,
            encoder,
            SinkSettings {
                newest_wins,
                staleness: config.staleness,
                high_water_capacity: HIGH_WATER_CAPACITY,
                bulk,
                key_file: config.cosmos.key_file.clone(),
            },
            metrics.clone(),
            rejects.clone(),
        );
        metrics.set_ready(true);
        let task = tokio::spawn(run(
            source,
            sink,
            PipelineSettings {
                staleness: config.staleness,
                batch_max_messages: config.batch_max_messages,
                queue_max_bytes: config.source_max_bytes,
            },
            rejects,
            metrics.clone(),
            stop.clone(),
            config.summary_interval,
        ));
        Ok(Writer {
            metrics,
            stop,
            metrics_addr,
            task,
        })
    }

    /// The writer's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        self.metrics.counts()
    }

    /// The address the metrics listener is bound to (useful with port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// A token that stops the writer when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Starts the orderly shutdown.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }

    /// Waits until the writer has stopped (after [`Writer::shutdown`] or a source failure).
    pub async fn wait(self) -> Result<Counts, RunError> {
        let result = self.task.await.map_err(|e| RunError::Task(e.to_string()))?;
        self.stop.cancel();
        result.map(|()| self.metrics.counts())
    }
}

async fn run(
    source: Box<dyn Source>,
    sink: CosmosSink,
    settings: PipelineSettings,
    rejects: Rejects,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    summary_interval: Duration,
) -> Result<(), RunError> {
    let (tx, rx) = queue::channel(settings.queue_max_bytes, metrics.clone());
    let control = SourceControl {
        stop: stop.clone(),
        drained: CancellationToken::new(),
    };
    let kind = source.kind();
    let source_task = tokio::spawn(source.run(tx, control.clone()));
    let summary = tokio::spawn(summarise(metrics.clone(), summary_interval, stop.clone()));
    let mut pipeline_task =
        tokio::spawn(pipeline::run(rx, sink, settings, rejects, metrics.clone()));
    tracing::info!(source = kind, "writer running");
    // The pipeline ends when the source drops its sender (stop, or failure).
    let drained = tokio::select! {
        joined = &mut pipeline_task => joined.map_err(|e| RunError::Task(e.to_string())),
        () = stop.cancelled() => match metrics.blocked() {
            Some(reason) => {
                // Nothing can be finished while Cosmos DB refuses every write.
                pipeline_task.abort();
                let _ = (&mut pipeline_task).await;
                Err(RunError::Held(reason))
            }
            None => {
                tracing::info!("shutting down: finishing in-flight writes");
                match tokio::time::timeout(DRAIN_TIMEOUT, &mut pipeline_task).await {
                    Ok(joined) => joined.map_err(|e| RunError::Task(e.to_string())),
                    Err(_) => {
                        pipeline_task.abort();
                        Err(RunError::DrainTimeout(DRAIN_TIMEOUT))
                    }
                }
            }
        },
    };
    control.drained.cancel();
    stop.cancel();
    let source_result = source_task
        .await
        .map_err(|e| RunError::Task(e.to_string()))?;
    let _ = summary.await;
    log_summary(&metrics, None);
    metrics.set_ready(false);
    drained?;
    source_result.map_err(RunError::from)
}

async fn summarise(metrics: Arc<Metrics>, interval: Duration, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut last = metrics.counts();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => return,
        }
        let now = metrics.counts();
        log_summary(&metrics, Some((&last, interval)));
        last = now;
    }
}

fn log_summary(metrics: &Metrics, since: Option<(&Counts, Duration)>) {
    let c = metrics.counts();
    let rate = since.map_or(0.0, |(last, interval)| {
        (c.received - last.received) as f64 / interval.as_secs_f64()
    });
    tracing::info!(
        received = c.received,
        written = c.written,
        history_written = c.history_written,
        superseded = c.dropped(DropReason::Superseded),
        stale = c.dropped(DropReason::Stale),
        invalid = c.dropped(DropReason::Invalid),
        spoofed = c.dropped(DropReason::Spoofed),
        from_future = c.dropped(DropReason::FromFuture),
        write_failed = c.dropped(DropReason::WriteFailed),
        stale_in_retry = c.dropped(DropReason::StaleInRetry),
        refused = c.dropped(DropReason::DocumentTooLarge)
            + c.dropped(DropReason::DocumentMalformed)
            + c.dropped(DropReason::DocumentRefused),
        history_dropped = c.history_dropped,
        held = metrics.blocked().map_or("no", HoldReason::as_str),
        in_flight = c.in_flight,
        throttled = metrics.throttled_total(),
        received_per_s = rate,
        "summary"
    );
}
