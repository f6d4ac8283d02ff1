//! The demo: the whole pipeline on this machine, in one process.
//!
//! An MQTT broker (embedded, or Mosquitto), the local Cosmos endpoint (`cosmos-sim`, with
//! request units, several partitions and per-request latency), a fleet of simulated drones
//! running the real edge-agent code (simulated position source, plain MQTT, a disk buffer
//! in a temporary directory, time accelerated), and the real cloud writer, all started
//! here. While it runs the live view ([`crate::view`]) shows the field metrics and the read
//! API serves the live map of the fleet ([`crate::api`]); at the end the report
//! ([`crate::report`]) sums them up and answers a spatial query through the API.
//!
//! The scenarios put the field lessons side by side:
//! - [`Scenario::Bulk`]: the writer's bulk path keeps up with the fleet.
//! - [`Scenario::Serial`]: one write at a time: lateness climbs to the cutoff, stale drops.
//! - [`Scenario::HotPartition`]: the container is partitioned on a path the documents do
//!   not carry; the writer's guard refuses to start. Forced past the guard
//!   ([`DemoConfig::force`], the writer's `WRITER_FORCE_MISSING_PARTITION_KEY`), the writer
//!   sends every document under the undefined partition key, so the heat map shows one hot
//!   range taking every write and throttling (429s) while the others idle.
//!
//! Time: drones fly `speedup` times faster than real time and report every
//! `5 s / speedup`, so a minute shows minutes of flight. The staleness cutoff (5 minutes of
//! flight time) is scaled the same way, so that falling behind shows within the run.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cloud_writer::{StartError, Writer};
use cosmos_sim::CosmosSim;
use edge_agent::{Agent, AgentConfig, AgentHandle, SimConfig, SourceConfig};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::api::ServedApi;
use crate::broker::{Broker, BrokerKind};
use crate::geo::distance_m;
use crate::prom::{self, Scrape};
use crate::report::{DemoReport, PartitionTotals, SpatialAnswer, TimelinePoint};
use crate::view::{Painter, RangeLoad, Snapshot};
use crate::writer_metrics::names;

/// The database the demo writes to.
pub const DATABASE: &str = "telemetry";
/// The container the demo writes to.
pub const CONTAINER: &str = "positions";
/// The partition key path the documents carry the device id at.
pub const DEVICE_KEY: &str = "/deviceId";
/// The container key of the hot-partition scenario: a path the writer never fills.
pub const MISSING_KEY: &str = "/droneId";
/// How often drones report, in flight time.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(5);
/// The staleness cutoff, in flight time.
pub const CUTOFF: Duration = Duration::from_secs(5 * 60);
/// The radius of the spatial query.
pub const QUERY_RADIUS_M: f64 = 1_000.0;

/// Which field lesson the run shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// The writer's bulk path: batches per partition key range, adaptive concurrency.
    #[default]
    Bulk,
    /// One write at a time.
    Serial,
    /// The container is partitioned on a key the documents lack.
    HotPartition,
}

impl Scenario {
    /// The scenario's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Bulk => "bulk",
            Scenario::Serial => "serial",
            Scenario::HotPartition => "hot-partition",
        }
    }

    /// What the scenario shows.
    pub fn claim(self) -> &'static str {
        match self {
            Scenario::Bulk => {
                "bulk writes per partition key range keep up: written follows received, lateness stays low, no drops"
            }
            Scenario::Serial => {
                "one write at a time falls behind: lateness climbs to the cutoff and stale positions are dropped (counted)"
            }
            Scenario::HotPartition => {
                "the container's partition key is a path the documents lack: the writer's guard refuses to start"
            }
        }
    }
}

/// How the view is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Redrawn in place (a terminal).
    Terminal,
    /// One summary line per interval.
    Lines,
    /// Nothing while running (tests, benches).
    Quiet,
}

/// The demo's settings.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Which lesson.
    pub scenario: Scenario,
    /// Drones in the fleet.
    pub drones: usize,
    /// How long the fleet flies (wall time).
    pub duration: Duration,
    /// Flight seconds per wall second.
    pub speedup: f64,
    /// The broker.
    pub broker: BrokerKind,
    /// Physical partitions of the container.
    pub partitions: usize,
    /// Provisioned RU/s of the container (split evenly over its partitions).
    pub ru_per_sec: f64,
    /// Latency the endpoint adds to every request (an in-region round trip).
    pub latency: Duration,
    /// View interval.
    pub tick: Duration,
    /// How the view is shown.
    pub output: Output,
    /// The centre of the fleet's area and of the spatial query.
    pub home: (f64, f64),
    /// Radius within which drones' routes are centred, metres.
    pub area_radius_m: f64,
    /// With [`Scenario::HotPartition`]: override the writer's partition key guard, so that
    /// it writes every document into the one undefined partition.
    pub force: bool,
    /// Where the read API and the live map are served while the demo runs (a free port
    /// of the same interface when this one is taken).
    pub api_addr: SocketAddr,
}

impl Default for DemoConfig {
    /// 1,000 drones for 60 s at 10x (10 minutes of flight, 2,000 positions/s), 4 partitions
    /// of 10,000 RU/s each, 5 ms per request.
    fn default() -> Self {
        let sim = SimConfig::default();
        DemoConfig {
            scenario: Scenario::Bulk,
            drones: 1_000,
            duration: Duration::from_secs(60),
            speedup: 10.0,
            broker: BrokerKind::Embedded,
            partitions: 4,
            ru_per_sec: 40_000.0,
            latency: Duration::from_millis(5),
            tick: Duration::from_secs(1),
            output: Output::Lines,
            home: (sim.home_lat, sim.home_lon),
            area_radius_m: sim.area_radius_m,
            force: false,
            api_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
        }
    }
}

impl DemoConfig {
    /// The report interval of each drone, wall time.
    pub fn interval(&self) -> Duration {
        REPORT_INTERVAL.div_f64(self.speedup)
    }

    /// The staleness cutoff, wall time.
    pub fn cutoff(&self) -> Duration {
        CUTOFF.div_f64(self.speedup)
    }

    /// Whether the writer is forced past its guard (the forced hot-partition run).
    fn forced(&self) -> bool {
        self.force && self.scenario == Scenario::HotPartition
    }

    /// The run's name: the scenario's, with `--force` when forced.
    pub fn label(&self) -> String {
        if self.forced() {
            format!("{} --force", self.scenario.name())
        } else {
            self.scenario.name().to_owned()
        }
    }

    /// What the run shows.
    pub fn claim(&self) -> &'static str {
        if self.forced() {
            "forced past the guard, the writer sends every document under the undefined partition key: one range takes every write and throttles (429s) while the others idle"
        } else {
            self.scenario.claim()
        }
    }

    fn check(&self) -> Result<(), DemoError> {
        let bad = |m: &str| Err(DemoError::Config(m.to_owned()));
        if self.drones == 0 {
            return bad("--drones must be at least 1");
        }
        if !(self.speedup.is_finite() && self.speedup >= 1.0 && self.speedup <= 600.0) {
            return bad("--speedup must be between 1 and 600");
        }
        if self.partitions == 0 || self.partitions > 64 {
            return bad("--partitions must be between 1 and 64");
        }
        if self.ru_per_sec.is_nan() || self.ru_per_sec <= 0.0 {
            return bad("--ru-per-sec must be positive");
        }
        if self.duration.is_zero() {
            return bad("--duration must be positive");
        }
        if self.force && self.scenario != Scenario::HotPartition {
            return bad("--force only applies to --scenario hot-partition");
        }
        Ok(())
    }
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    Config(String),
    /// The broker did not start.
    #[error(transparent)]
    Broker(#[from] crate::broker::BrokerError),
    /// The local Cosmos endpoint did not start.
    #[error("the local Cosmos endpoint did not start: {0}")]
    Sim(#[from] cosmos_sim::SimError),
    /// The writer failed while running.
    #[error("the cloud writer failed: {0}")]
    Writer(#[from] cloud_writer::RunError),
    /// A drone could not be set up.
    #[error("drone {device}: {source}")]
    Agent {
        /// The device id.
        device: String,
        /// Why.
        source: edge_agent::AgentError,
    },
    /// The read API could not be served, or its spatial query failed.
    #[error("the read API: {0}")]
    Api(#[from] crate::api::ApiError),
    /// A file or directory could not be made.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Runs the demo until its duration passes or `shutdown` is cancelled, and returns the
/// report. The view is painted as `config.output` says.
pub async fn run(config: DemoConfig, shutdown: CancellationToken) -> Result<DemoReport, DemoError> {
    config.check()?;
    let kind = config.broker;
    let broker = tokio::task::spawn_blocking(move || Broker::start(kind))
        .await
        .expect("the broker start does not panic")?;
    let sim = CosmosSim::builder()
        .partitions(config.partitions)
        .ru_per_sec(config.ru_per_sec)
        .latency(config.latency)
        .start()
        .await?;
    let container_key = match config.scenario {
        Scenario::HotPartition => MISSING_KEY,
        Scenario::Bulk | Scenario::Serial => DEVICE_KEY,
    };
    sim.create_container(DATABASE, CONTAINER, container_key)?;
    let api = ServedApi::start(&sim, DATABASE, CONTAINER, config.api_addr).await?;
    if config.output != Output::Quiet {
        println!(
            "demo: the live map and the read API at {}/ while the demo runs",
            api.url()
        );
    }

    let mut report = DemoReport {
        scenario: config.label(),
        claim: config.claim().to_owned(),
        drones: config.drones,
        speedup: config.speedup,
        broker: broker.kind().name().to_owned(),
        partitions: config.partitions,
        provisioned_ru_per_sec: config.ru_per_sec,
        endpoint_latency_ms: config.latency.as_millis() as u64,
        write_mode: write_mode(&config).to_owned(),
        cutoff_secs: config.cutoff().as_secs_f64(),
        api_url: Some(api.url().to_owned()),
        ..DemoReport::default()
    };

    let writer_config = writer_config(&config, &broker, &sim);
    let bulk = match config.scenario {
        Scenario::Serial => serial_bulk_config(),
        Scenario::Bulk | Scenario::HotPartition => {
            cloud_writer::writer::bulk_config(writer_config.max_in_flight)
        }
    };
    let writer = match Writer::start_with_bulk(writer_config, bulk).await {
        Ok(writer) => writer,
        Err(
            refusal @ (StartError::PartitionKeyMismatch { .. }
            | StartError::UnusableContainerPath { .. }),
        ) => {
            report.guard_refusal = Some(refusal.to_string());
            sim.shutdown().await;
            return Ok(report);
        }
        Err(other) => return Err(DemoError::Config(other.to_string())),
    };

    if !wait_until_subscribed(&writer, Duration::from_secs(10)).await {
        return Err(DemoError::Config(
            "the cloud writer did not subscribe to the broker within 10 s".to_owned(),
        ));
    }
    let observer = Observer::start(&broker).await;
    let work = tempfile::tempdir()?;
    let fleet_stop = CancellationToken::new();
    let fleet = start_fleet(&config, &broker, work.path(), &fleet_stop)?;

    let started = Instant::now();
    let mut sampler = Sampler::new(&config);
    let mut painter = Painter::new(config.output == Output::Terminal);
    let mut ticker = tokio::time::interval_at((started + config.tick).into(), config.tick);
    let deadline = tokio::time::sleep_until((started + config.duration).into());
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                let snap = sampler.sample(started.elapsed(), &writer_scrape(&writer), &sim.stats(), fleet.published());
                if config.output != Output::Quiet {
                    painter.paint(&snap);
                }
            }
            () = &mut deadline => break,
            () = shutdown.cancelled() => break,
        }
    }
    report.wall_secs = started.elapsed().as_secs_f64();

    // Stop the fleet, let the writer finish what it received (bounded), stop the writer.
    fleet_stop.cancel();
    let published = fleet.stop().await;
    settle(
        &writer,
        published,
        config.cutoff() + Duration::from_secs(5),
        &shutdown,
    )
    .await;
    let metrics = writer.metrics().clone();
    writer.shutdown();
    writer.wait().await?;
    let scrape = Scrape::parse(&metrics.render()).unwrap_or_default();
    observer.stop();

    sampler.finish(&mut report, &scrape, &sim.stats());
    report.published = published;
    report.query = Some(spatial_query(&config, &api, &observer).await?);
    drop(api);
    sim.shutdown().await;
    Ok(report)
}

/// The serial writer: the bulk writer held to one operation per request and one
/// operation inside it at a time, so every position waits for the previous one's round
/// trip (what a function upserting each message in turn does).
fn serial_bulk_config() -> cosmos::BulkConfig {
    cosmos::BulkConfig {
        max_operations: 1,
        max_concurrency_per_range: 1,
        initial_concurrency: 1,
        queue_capacity: 1,
        ..cosmos::BulkConfig::default()
    }
}

/// How the scenario's writer writes.
fn write_mode(config: &DemoConfig) -> &'static str {
    if config.forced() {
        return "bulk, forced past the guard: every document under the undefined partition key [{}]";
    }
    match config.scenario {
        Scenario::Bulk | Scenario::HotPartition => "bulk (batches per partition key range)",
        Scenario::Serial => "serial (one operation per request, one request at a time)",
    }
}

/// The writer's configuration for the scenario: the MQTT source on the broker, the
/// endpoint's container ([`DATABASE`]/[`CONTAINER`]), the scaled cutoff, no metrics
/// listener (the demo reads the metrics in-process); forced past the partition key guard
/// in the forced hot-partition run.
pub fn writer_config(
    config: &DemoConfig,
    broker: &Broker,
    sim: &CosmosSim,
) -> cloud_writer::WriterConfig {
    let settings = cloud_writer::Settings {
        cosmos_endpoint: Some(sim.endpoint().parse().expect("the endpoint is a URL")),
        cosmos_key: Some(cloud_writer::config::Secret::new(sim.key())),
        cosmos_database: Some(DATABASE.to_owned()),
        cosmos_container: Some(CONTAINER.to_owned()),
        writer_source: Some(cloud_writer::config::Secret::new(broker.url())),
        mqtt_client_id: Some("cloud-writer-demo".to_owned()),
        metrics_addr: Some("off".to_owned()),
        writer_force_missing_partition_key: Some(config.forced()),
        summary_interval: Some(cloud_writer::config::DurationSetting(Duration::from_secs(
            3600,
        ))),
        ..cloud_writer::Settings::default()
    };
    let mut writer = settings
        .resolve()
        .expect("the demo's writer settings are complete and valid");
    writer.staleness.stale_after = config.cutoff();
    if config.scenario == Scenario::Serial {
        // One message per pipeline batch: no coalescing of a drone's positions either.
        writer.batch_max_messages = 1;
    }
    writer
}

/// Waits until the writer's source is connected and subscribed (its metric says so), so
/// that nothing published from then on is missed; false on timeout.
pub async fn wait_until_subscribed(writer: &Writer, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut poll = tokio::time::interval(Duration::from_millis(10));
    while Instant::now() < deadline {
        if writer_scrape(writer).sum(names::SOURCE_CONNECTED, &[]) >= 1.0 {
            return true;
        }
        poll.tick().await;
    }
    false
}

/// The writer's metrics, parsed.
fn writer_scrape(writer: &Writer) -> Scrape {
    Scrape::parse(&writer.metrics().render()).unwrap_or_default()
}

/// Waits until the writer has a final outcome for every position the fleet published
/// (or `limit` passes, or the user asks to stop).
async fn settle(writer: &Writer, published: u64, limit: Duration, shutdown: &CancellationToken) {
    let deadline = Instant::now() + limit;
    let mut poll = tokio::time::interval(Duration::from_millis(100));
    while Instant::now() < deadline && !shutdown.is_cancelled() {
        let counts = writer.counts();
        if counts.received >= published && counts.finished() >= counts.received {
            return;
        }
        poll.tick().await;
    }
}

/// The running fleet.
struct Fleet {
    handles: Vec<AgentHandle>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Fleet {
    /// Positions the broker acknowledged, over all drones.
    fn published(&self) -> u64 {
        self.handles.iter().map(|h| h.status().acked).sum()
    }

    /// Waits for every agent to stop (after the stop token was cancelled); returns the
    /// positions the broker acknowledged.
    async fn stop(mut self) -> u64 {
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
        self.published()
    }
}

/// The device id of drone `index`.
pub fn device_id(index: usize) -> String {
    format!("drone-{index:05}")
}

/// Starts the drones: each a real edge agent with the simulated source (its own route,
/// seeded by its index), plain MQTT to the broker, and a disk buffer under `work`. Their
/// starts are spread over one report interval so that they do not report in lock-step.
fn start_fleet(
    config: &DemoConfig,
    broker: &Broker,
    work: &std::path::Path,
    stop: &CancellationToken,
) -> Result<Fleet, DemoError> {
    let interval = config.interval();
    let host = broker.addr().ip().to_string();
    let port = broker.addr().port();
    let mut fleet = Fleet {
        handles: Vec::with_capacity(config.drones),
        tasks: Vec::with_capacity(config.drones),
    };
    for index in 0..config.drones {
        let device = device_id(index);
        let mut agent_config = AgentConfig::simulated(&device, &host, port, work.join(&device));
        agent_config.source = SourceConfig::Sim(SimConfig {
            home_lat: config.home.0,
            home_lon: config.home.1,
            area_radius_m: config.area_radius_m,
            seed: index as u64,
            speedup: config.speedup,
            ..SimConfig::default()
        });
        agent_config.report_interval = interval;
        agent_config.max_fix_age = interval * 4;
        // A simulation: the buffer is a temporary directory, no fsync per record.
        agent_config.buffer.fsync = false;
        let agent = Agent::new(agent_config).map_err(|source| DemoError::Agent {
            device: device.clone(),
            source,
        })?;
        fleet.handles.push(agent.handle());
        let delay = interval.mul_f64(index as f64 / config.drones as f64);
        let stop = stop.clone();
        fleet.tasks.push(tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return,
            }
            if let Err(err) = agent.run(stop).await {
                tracing::warn!(error = %err, "drone stopped");
            }
        }));
    }
    Ok(fleet)
}

/// Turns the writer's metrics and the endpoint's statistics into view snapshots and the
/// report's timeline.
struct Sampler {
    label: String,
    speedup: f64,
    cutoff_secs: f64,
    last_at: Duration,
    last_received: f64,
    last_written: f64,
    last_lateness: Vec<(f64, f64)>,
    last_ru: HashMap<String, f64>,
    peak_ru: HashMap<String, f64>,
    timeline: Vec<TimelinePoint>,
}

impl Sampler {
    fn new(config: &DemoConfig) -> Sampler {
        Sampler {
            label: config.label(),
            speedup: config.speedup,
            cutoff_secs: config.cutoff().as_secs_f64(),
            last_at: Duration::ZERO,
            last_received: 0.0,
            last_written: 0.0,
            last_lateness: Vec::new(),
            last_ru: HashMap::new(),
            peak_ru: HashMap::new(),
            timeline: Vec::new(),
        }
    }

    /// The snapshot at `elapsed`; also appends a timeline point.
    fn sample(
        &mut self,
        elapsed: Duration,
        writer: &Scrape,
        stats: &cosmos_sim::Stats,
        published: u64,
    ) -> Snapshot {
        let dt = (elapsed - self.last_at).as_secs_f64().max(1e-3);
        let received = writer.sum(names::RECEIVED, &[]);
        let written = writer.sum(names::WRITTEN, &[]);
        let lateness = writer.buckets(names::LATENESS);
        let interval = prom::bucket_delta(&lateness, &self.last_lateness);
        let drops: BTreeMap<String, u64> = writer
            .by_label(names::DROPPED, "reason")
            .into_iter()
            .map(|(reason, n)| (reason, n as u64))
            .collect();
        let mut ranges = Vec::new();
        let mut throttled = 0;
        if let Some(container) = stats.container(DATABASE, CONTAINER) {
            for p in container.partitions.iter().filter(|p| p.live) {
                let before = self.last_ru.insert(p.id.clone(), p.ru_total).unwrap_or(0.0);
                let rate = (p.ru_total - before).max(0.0) / dt;
                let peak = self.peak_ru.entry(p.id.clone()).or_insert(0.0);
                *peak = peak.max(rate);
                throttled += p.throttled;
                ranges.push(RangeLoad {
                    range: p.id.clone(),
                    ru_per_sec: rate,
                    capacity: p.ru_budget_per_sec,
                    throttled: p.throttled,
                });
            }
        }
        let snap = Snapshot {
            scenario: self.label.clone(),
            elapsed,
            speedup: self.speedup,
            msgs_per_sec: (received - self.last_received).max(0.0) / dt,
            published,
            received: received as u64,
            written: written as u64,
            lateness_p50: prom::quantile(&interval, 0.50),
            lateness_p99: prom::quantile(&interval, 0.99),
            cutoff_secs: self.cutoff_secs,
            throttled,
            ru_per_range: ranges,
            drops,
        };
        self.timeline.push(TimelinePoint {
            t: elapsed.as_secs_f64(),
            received_per_sec: snap.msgs_per_sec,
            written_per_sec: (written - self.last_written).max(0.0) / dt,
            lateness_p50: snap.lateness_p50,
            lateness_p99: snap.lateness_p99,
            dropped: snap.drops.values().sum(),
            throttled,
            ru_per_sec: snap.ru_per_range.iter().map(|r| r.ru_per_sec).collect(),
        });
        self.last_at = elapsed;
        self.last_received = received;
        self.last_written = written;
        self.last_lateness = lateness;
        snap
    }

    /// Fills the report's totals from the final metrics and statistics.
    fn finish(self, report: &mut DemoReport, writer: &Scrape, stats: &cosmos_sim::Stats) {
        report.received = writer.sum(names::RECEIVED, &[]) as u64;
        report.written = writer.sum(names::WRITTEN, &[]) as u64;
        report.dropped = writer
            .by_label(names::DROPPED, "reason")
            .into_iter()
            .filter(|(_, n)| *n > 0.0)
            .map(|(reason, n)| (reason, n as u64))
            .collect();
        report.writer_throttled = writer.sum(names::THROTTLED, &[]) as u64;
        let lateness = writer.buckets(names::LATENESS);
        report.lateness_p50 = prom::quantile(&lateness, 0.50);
        report.lateness_p99 = prom::quantile(&lateness, 0.99);
        // While the fleet flew (the last interval sample), not counting the final drain.
        report.written_per_sec = self.last_written / self.last_at.as_secs_f64().max(1e-3);
        if let Some(container) = stats.container(DATABASE, CONTAINER) {
            for p in container.partitions.iter().filter(|p| p.live) {
                report.endpoint_throttled += p.throttled;
                report.partitions_detail.push(PartitionTotals {
                    range: p.id.clone(),
                    ru_total: p.ru_total,
                    peak_ru_per_sec: self.peak_ru.get(&p.id).copied().unwrap_or(0.0),
                    capacity: p.ru_budget_per_sec,
                    documents: p.documents,
                    throttled: p.throttled,
                });
            }
        }
        report.timeline = self.timeline;
    }
}

/// Per device id: the order, latitude and longitude of its newest position.
type LastPositions = HashMap<String, (telemetry::PositionOrder, f64, f64)>;

/// The last position each drone published, as seen by a subscriber on the broker: the
/// independent check of the spatial query's answer.
struct Observer {
    last: Arc<Mutex<LastPositions>>,
    stop: CancellationToken,
}

impl Observer {
    /// Subscribes (QoS 1, so nothing is lost on the way) and returns once subscribed.
    async fn start(broker: &Broker) -> Observer {
        let mut options = MqttOptions::new("fleet-observer", "127.0.0.1", broker.addr().port());
        options.set_keep_alive(Duration::from_secs(30));
        options.set_max_packet_size(1 << 20, 1 << 20);
        let (client, mut events) = AsyncClient::new(options, 1024);
        let last = Arc::new(Mutex::new(HashMap::new()));
        let stop = CancellationToken::new();
        let (subscribed_tx, subscribed) = tokio::sync::oneshot::channel();
        let _ = client
            .subscribe("devices/+/messages/events/#", QoS::AtLeastOnce)
            .await;
        tokio::spawn({
            let last = last.clone();
            let stop = stop.clone();
            async move {
                let mut subscribed_tx = Some(subscribed_tx);
                loop {
                    let event = tokio::select! {
                        () = stop.cancelled() => break,
                        event = events.poll() => event,
                    };
                    match event {
                        Ok(Event::Incoming(Packet::SubAck(_))) => {
                            if let Some(tx) = subscribed_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(Event::Incoming(Packet::Publish(p))) => {
                            if let Ok(pos) = telemetry::wire::decode(&p.payload) {
                                let order = pos.order();
                                let mut last = last.lock().expect("observer lock");
                                let entry = last
                                    .entry(pos.device_id)
                                    .or_insert((order, pos.lat, pos.lon));
                                if order >= entry.0 {
                                    *entry = (order, pos.lat, pos.lon);
                                }
                            }
                        }
                        Ok(_) => {}
                        Err(err) => {
                            tracing::debug!(error = %err, "observer connection");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
                let _ = client.disconnect().await;
            }
        });
        let _ = tokio::time::timeout(Duration::from_secs(10), subscribed).await;
        Observer { last, stop }
    }

    fn stop(&self) {
        self.stop.cancel();
    }

    /// Drones whose last published position is within `radius_m` of `point`, sorted.
    fn within(&self, point: (f64, f64), radius_m: f64) -> Vec<String> {
        let mut ids: Vec<String> = self
            .last
            .lock()
            .expect("observer lock")
            .iter()
            .filter(|(_, (_, lat, lon))| distance_m(point, (*lat, *lon)) < radius_m)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }
}

/// Asks the read API which drones are within [`QUERY_RADIUS_M`] of the fleet's home (a
/// fan-out over the partitions), and checks the answer against the observer's.
async fn spatial_query(
    config: &DemoConfig,
    api: &ServedApi,
    observer: &Observer,
) -> Result<SpatialAnswer, DemoError> {
    let (lat, lon) = config.home;
    let answer = api.near((lat, lon), QUERY_RADIUS_M).await?;
    let drones = answer.drones;
    let expected = observer.within((lat, lon), QUERY_RADIUS_M);
    let found: std::collections::BTreeSet<&str> =
        drones.iter().map(|(id, _)| id.as_str()).collect();
    let missing = expected
        .iter()
        .filter(|id| !found.contains(id.as_str()))
        .cloned()
        .collect();
    let unexpected = found
        .iter()
        .filter(|id| expected.binary_search_by(|e| e.as_str().cmp(id)).is_err())
        .map(|id| (*id).to_owned())
        .collect();
    Ok(SpatialAnswer {
        request: answer.request,
        lat,
        lon,
        radius_m: QUERY_RADIUS_M,
        drones,
        request_charge: answer.request_charge,
        calls: answer.calls,
        expected_from_published: expected.len(),
        missing,
        unexpected,
    })
}
