//! The running writer: [`Writer::start`] checks the settings and the container
//! ([`guard`]), wires source, pipeline, sink and metrics together and starts the task that
//! runs them until the orderly shutdown ([`shutdown`]), logging a summary of the counts
//! on an interval ([`summary`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cosmos::BulkConfig;
use telemetry::DocumentLayout;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{NewestWins, SourceSpec, WriterConfig};
use crate::metrics::server::{self, Limits};
use crate::metrics::{Counts, Metrics};
use crate::pipeline::PipelineSettings;
use crate::pipeline::reject::Rejects;
use crate::sink::{CosmosSink, Encoder, HistoryFormat, SinkSettings};
use crate::source::Source;
use crate::source::eventhubs::{CheckpointContainer, EventHubsSource};
use crate::source::mqtt::{MqttSettings, MqttSource};

mod guard;
mod shutdown;
mod summary;

pub use guard::{StartError, cosmos_client, open_container, patch_in_batches};
pub use shutdown::RunError;

/// Drones whose high-water mark is remembered.
const HIGH_WATER_CAPACITY: usize = 200_000;

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
    probe_addr: Option<SocketAddr>,
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
        let min_write_interval = config.min_write_interval;
        let history_hold = config.history.map(|h| h.hold);
        Writer::start_inner(config, bulk, move |metrics| {
            let source: Box<dyn Source> = match spec {
                None => {
                    return Err(StartError::Config(
                        "WRITER_SOURCE is not set: mqtt://host:port, or an Event Hubs connection string".into(),
                    ));
                }
                Some(SourceSpec::Mqtt(url)) => {
                    if !min_write_interval.is_zero() {
                        tracing::warn!(
                            min_write_interval = ?min_write_interval,
                            receive_maximum,
                            "MIN_WRITE_INTERVAL keeps a drone's messages unacknowledged until its next write, and the broker sends at most MQTT_RECEIVE_MAXIMUM unacknowledged: keep it above the drones of this writer times MIN_WRITE_INTERVAL over their report interval (1,000 drones every 5 s with 30s: 6,000), or the stream slows to the releases"
                        );
                    }
                    if let Some(hold) = history_hold {
                        tracing::warn!(
                            history_hold = ?hold,
                            receive_maximum,
                            "HISTORY_HOLD keeps a position's message unacknowledged until its track segment is written, and the broker sends at most MQTT_RECEIVE_MAXIMUM unacknowledged: keep it above the drones of this writer times HISTORY_HOLD over their report interval (1,000 drones every 5 s with 2m: 24,000), or the stream slows to the segment writes"
                        );
                    }
                    let settings = MqttSettings {
                        receive_maximum,
                        ..MqttSettings::from_url(&url.0, client_id, share_group, &mqtt_tls)
                            .map_err(|e| StartError::Config(e.to_string()))?
                    };
                    Box::new(MqttSource::new(settings, metrics))
                }
                Some(SourceSpec::EventHubs(connection)) => {
                    if let Some(hold) = history_hold {
                        tracing::info!(
                            history_hold = ?hold,
                            "HISTORY_HOLD: each partition's checkpoint lags up to the hold behind its newest event, and a restart reads that much again (merged into the segments by seq, no duplicate)"
                        );
                    }
                    let checkpoints = match eventhubs.blob_checkpoints.clone() {
                        Some(blob) => CheckpointContainer::Blob(blob),
                        None => CheckpointContainer::Cosmos {
                            client: cosmos_client(&cosmos)?,
                            database: cosmos.database.clone(),
                            create_if_missing: cosmos.create_if_missing,
                        },
                    };
                    Box::new(EventHubsSource::new(
                        connection,
                        eventhubs,
                        checkpoints,
                        metrics,
                    ))
                }
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
        let rejects = Rejects::new(metrics.clone(), config.dead_letter.as_ref())
            .map_err(StartError::DeadLetter)?;
        let stall_after = config.healthz_stall_after;
        let metrics_addr = listen(
            "METRICS_ADDR",
            config.metrics_addr,
            server::metrics_router(metrics.clone(), stall_after),
            server::metrics_limits(config.metrics_header_timeout),
            &stop,
        )
        .await?;
        let probe_addr = listen(
            "PROBE_ADDR",
            config.probe_addr,
            server::probes_router(metrics.clone(), stall_after),
            server::probe_limits(config.metrics_header_timeout),
            &stop,
        )
        .await?;
        let mut encoder = Encoder::new(
            layout,
            newest_wins == NewestWins::Patch,
            config.history.map(|h| HistoryFormat {
                span: h.segment_span,
                ttl: h.ttl,
            }),
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
                segment_hold: config.history.map_or(Duration::ZERO, |h| h.hold),
            },
            metrics.clone(),
            rejects.clone(),
        );
        metrics.set_ready(true);
        let task = tokio::spawn(shutdown::run(
            source,
            sink,
            PipelineSettings {
                staleness: config.staleness,
                batch_max_messages: config.batch_max_messages,
                queue_max_bytes: config.source_max_bytes,
                min_write_interval: config.min_write_interval,
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
            probe_addr,
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

    /// The address the probes' listener (`/healthz`, `/readyz`) is bound to.
    pub fn probe_addr(&self) -> Option<SocketAddr> {
        self.probe_addr
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

/// Serves `router` at `addr` (the setting `name`) until `stop`; the bound address.
async fn listen(
    name: &'static str,
    addr: Option<SocketAddr>,
    router: axum::Router,
    limits: Limits,
    stop: &CancellationToken,
) -> Result<Option<SocketAddr>, StartError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let listener = server::bind(addr)
        .await
        .map_err(|source| StartError::Listen { name, addr, source })?;
    let bound = listener.local_addr().ok();
    tokio::spawn(server::serve(listener, router, limits, stop.child_token()));
    Ok(bound)
}
