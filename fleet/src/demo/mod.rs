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

mod fleet;
mod observer;
mod sampler;
mod scenario;
mod writer;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cloud_writer::{StartError, Writer};
use cosmos_sim::CosmosSim;
use edge_agent::SimConfig;
use tokio_util::sync::CancellationToken;

use crate::api::ServedApi;
use crate::broker::{Broker, BrokerKind};
use crate::prom::Scrape;
use crate::report::DemoReport;
use crate::view::Painter;

pub use fleet::device_id;
use fleet::start_fleet;
use observer::{Observer, spatial_query};
use sampler::Sampler;
pub use scenario::Scenario;
use scenario::{serial_bulk_config, write_mode};
use writer::{settle, writer_scrape};
pub use writer::{wait_until_subscribed, writer_config};

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
