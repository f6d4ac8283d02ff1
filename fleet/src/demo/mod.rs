//! The demo: the whole pipeline on this machine, in one process.
//!
//! The production topology by default ([`HubKind::Iothub`]): the local IoT Hub
//! (`hub-sim`), a fleet of simulated drones running the real edge-agent code (simulated
//! position source; each onboarded through the hub's Device Provisioning Service, one
//! symmetric-key enrollment group for the fleet, registering with its derived key as the
//! agent does, [`crate::onboard`], then connecting to the hub it was assigned with the SAS
//! connection string of its assignment over TLS that trusts the hub's CA; a disk buffer in
//! a temporary directory; time accelerated), two real cloud writer replicas sharing the
//! hub's 4-partition Event Hubs endpoint through the checkpoint store, and the local Cosmos
//! endpoint (`cosmos-sim`, with request units, several partitions and per-request latency),
//! all started here. With [`HubKind::Mqtt`] the drones publish plain MQTT to a broker
//! (embedded, or Mosquitto) and one writer subscribes. While it runs the live view
//! ([`crate::view`]) shows the drones registered, the field metrics, every partition's lag
//! and which replica reads it, and the read API serves the live map of the fleet
//! ([`crate::api`]); at the end the report ([`crate::report`]) sums them up, checks every
//! drone's document against its newest published position and answers a spatial query
//! through the API.
//!
//! On the hub, at a third of the flight, a tenth of the fleet (at most 100 drones) is told
//! `reportInterval` = 1 s of flight through the hub's service REST API (`remote.rs`): the view
//! and the report show their message rate before and after, every acknowledgement read back
//! from their twins, and what the five-fold rate costs in IoT Hub messages.
//!
//! The scenarios put the field lessons side by side:
//! - [`Scenario::Bulk`]: the writer's bulk path keeps up with the fleet.
//! - [`Scenario::Serial`]: one write at a time: lateness climbs to the cutoff, stale drops.
//! - [`Scenario::HotPartition`]: the container is partitioned on a path the documents do
//!   not carry; the writer's guard refuses to start. Forced past the guard
//!   ([`DemoConfig::force`], the writer's `WRITER_FORCE_MISSING_PARTITION_KEY`), the writer
//!   sends every document under the undefined partition key, so the heat map shows one hot
//!   range taking every write and throttling (429s) while the others idle.
//! - [`Scenario::ReplicaKilled`]: at a third of the flight the second writer replica is
//!   killed as a process kill would (its runtime dropped: nothing drained, checkpointed
//!   or released); its partitions move to the other once its ownerships expire, and the
//!   report says how long that took and that nothing was lost.
//!
//! With [`DemoConfig::alerts`] the alerter runs too, a few drones' agents are killed, and
//! the report lists the alerts a local webhook receiver took (`alerts/`).
//!
//! Time: drones fly `speedup` times faster than real time and report every
//! `5 s / speedup`, so a minute shows minutes of flight. The staleness cutoff (5 minutes of
//! flight time) is scaled the same way, so that falling behind shows within the run.

mod alerts;
mod cost;
mod fleet;
mod history;
mod kill;
mod observer;
mod remote;
mod replicas;
mod sampler;
mod scenario;
mod transport;
mod writer;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cloud_writer::StartError;
use cosmos_sim::CosmosSim;
use edge_agent::SimConfig;
use tokio_util::sync::CancellationToken;

use crate::api::ServedApi;
use crate::broker::BrokerKind;
use crate::report::{DemoReport, ReplicaTotals};
use crate::view::Painter;

use alerts::Alerts;
pub use alerts::AlertsConfig;
pub use fleet::device_id;
use fleet::{onboard_fleet, start_fleet};
use kill::Kill;
use observer::{newest_check, spatial_query};
use remote::Remote;
pub use remote::switched;
use replicas::{Replicas, start_replicas};
use sampler::Sampler;
pub use scenario::Scenario;
use scenario::write_mode;
pub use transport::HubKind;
use transport::Transport;
pub use writer::{BALANCING_INTERVAL, wait_until_subscribed, writer_config};

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
    /// The live map's base map (`--map-tiles`); `None`: a plain background, no network.
    pub map_tiles: Option<fleet_api::MapTiles>,
    /// Where the drones publish and the writers read: the local IoT Hub (two writer
    /// replicas on its Event Hubs endpoint) or an MQTT broker (one writer).
    pub hub: HubKind,
    /// On the hub: how long a replica's partition ownership holds without renewal (a
    /// killed replica's partitions move after it).
    pub ownership_expiry: Duration,
    /// The agents' `PUBLISH_EVERY`, flight time: the samples since the last publish in one
    /// batch; `None` publishes every sample alone.
    pub publish_every: Option<Duration>,
    /// The writers' `MIN_WRITE_INTERVAL`, flight time; `None` writes every position.
    pub min_write_interval: Option<Duration>,
    /// The container's indexing policy.
    pub indexing: Indexing,
    /// The writers keep every position's history for this long (`HISTORY`, `HISTORY_TTL`);
    /// `None`: no history.
    pub history: Option<Duration>,
    /// The alerter, a fence, a silent rule and drones killed mid-flight; `None`: no alerts.
    pub alerts: Option<AlertsConfig>,
}

/// The indexing policy of the demo's container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Indexing {
    /// The project's (`deploy/cosmos/indexing-policy.json`), as the writer creates a
    /// container with.
    #[default]
    Project,
    /// Cosmos DB's default: every path.
    CosmosDefault,
}

impl Indexing {
    /// The `indexingPolicy` of the container.
    pub fn policy(self) -> serde_json::Value {
        match self {
            Indexing::Project => telemetry::indexing_policy(),
            Indexing::CosmosDefault => cosmos_wire::indexing::default_policy(),
        }
    }
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
            map_tiles: None,
            hub: HubKind::Iothub,
            ownership_expiry: Duration::from_secs(10),
            publish_every: None,
            min_write_interval: None,
            indexing: Indexing::Project,
            history: None,
            alerts: None,
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
        if self.scenario == Scenario::ReplicaKilled && self.hub != HubKind::Iothub {
            return bad(
                "--scenario replica-killed needs the hub's two writer replicas, not --hub mqtt",
            );
        }
        if self.publish_every.is_some_and(|p| p < REPORT_INTERVAL) {
            return bad("--publish-every must be at least the report interval (5s), e.g. 30s");
        }
        if self.min_write_interval.is_some_and(|m| m >= CUTOFF) {
            return bad("--min-write-interval must be shorter than the cutoff (5m), e.g. 30s");
        }
        if let Some(alerts) = &self.alerts {
            alerts.check(self).map_err(DemoError::Config)?;
        }
        if self.ownership_expiry < BALANCING_INTERVAL * 2 {
            return bad("--ownership-expiry must be at least twice the balancing interval (2 s)");
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
    /// The local IoT Hub did not start.
    #[error("the local IoT Hub did not start: {0}")]
    Hub(String),
    /// A writer replica did not start.
    #[error("the cloud writer did not start: {0}")]
    WriterStart(#[from] StartError),
    /// The local Cosmos endpoint did not start.
    #[error("the local Cosmos endpoint did not start: {0}")]
    Sim(#[from] cosmos_sim::SimError),
    /// The writer failed while running.
    #[error("the cloud writer failed: {0}")]
    Writer(#[from] cloud_writer::RunError),
    /// A drone's agent settings are refused.
    #[error("drone {device}: {reason}")]
    AgentSetup {
        /// The device id.
        device: String,
        /// Why.
        reason: String,
    },
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
    /// The alerts part could not be set up.
    #[error("the alerts: {0}")]
    Alerts(String),
    /// The history documents could not be read back.
    #[error("reading the history back: {0}")]
    History(cosmos::CosmosError),
}

/// Runs the demo until its duration passes or `shutdown` is cancelled, and returns the
/// report. The view is painted as `config.output` says.
pub async fn run(config: DemoConfig, shutdown: CancellationToken) -> Result<DemoReport, DemoError> {
    config.check()?;
    let work = tempfile::tempdir()?;
    let mut transport = Transport::start(config.hub, config.broker, work.path()).await?;
    let sim = CosmosSim::builder()
        .partitions(config.partitions)
        .ru_per_sec(config.ru_per_sec)
        .latency(config.latency)
        .start()
        .await?;
    let container_key = match config.scenario {
        Scenario::HotPartition => MISSING_KEY,
        Scenario::Bulk | Scenario::Serial | Scenario::ReplicaKilled => DEVICE_KEY,
    };
    sim.create_container_indexed(
        DATABASE,
        CONTAINER,
        container_key,
        Some(&config.indexing.policy()),
    )?;
    let api = ServedApi::start(
        &sim,
        DATABASE,
        CONTAINER,
        config.api_addr,
        config.map_tiles.clone(),
    )
    .await?;
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
        broker: transport.name(),
        partitions: config.partitions,
        provisioned_ru_per_sec: config.ru_per_sec,
        endpoint_latency_ms: config.latency.as_millis() as u64,
        write_mode: write_mode(&config).to_owned(),
        cutoff_secs: config.cutoff().as_secs_f64(),
        api_url: Some(api.url().to_owned()),
        ..DemoReport::default()
    };

    let mut replicas = match start_replicas(&config, &transport, &sim).await {
        Ok(replicas) => replicas,
        Err(DemoError::WriterStart(
            refusal @ (StartError::PartitionKeyMismatch { .. }
            | StartError::UnusableContainerPath { .. }),
        )) => {
            report.guard_refusal = Some(refusal.to_string());
            sim.shutdown().await;
            transport.shutdown().await;
            return Ok(report);
        }
        Err(other) => return Err(other),
    };

    let mut alerts = match &config.alerts {
        Some(a) => Some(Alerts::start(&config, a, &sim, work.path()).await?),
        None => None,
    };
    report.registration = onboard_fleet(&config, &mut transport).await?;
    if let Some(onboarding) = report
        .registration
        .as_ref()
        .filter(|_| config.output != Output::Quiet)
    {
        println!("demo: {}", onboarding.line());
    }
    transport.observe().await;
    let fleet_stop = CancellationToken::new();
    let mut fleet = start_fleet(&config, &transport, work.path(), &fleet_stop)?;
    let mut remote = match transport.hub() {
        Some(hub) => Some(Remote::new(&config, hub)?),
        None => None,
    };

    let started = Instant::now();
    let mut sampler = Sampler::new(
        &config,
        report.registration.as_ref().map(|o| o.totals.clone()),
    );
    let mut painter = Painter::new(config.output == Output::Terminal);
    let mut ticker = tokio::time::interval_at((started + config.tick).into(), config.tick);
    let mut kill =
        (config.scenario == Scenario::ReplicaKilled).then(|| Kill::at(config.duration / 3));
    let mut watch = tokio::time::interval(Duration::from_millis(50));
    let deadline = tokio::time::sleep_until((started + config.duration).into());
    tokio::pin!(deadline);
    let switch_at = tokio::time::sleep_until((started + config.duration / 3).into());
    tokio::pin!(switch_at);
    let kill_drones_at = started + alerts.as_ref().map_or(config.duration, Alerts::kill_at);
    let kill_drones = tokio::time::sleep_until(kill_drones_at.into());
    tokio::pin!(kill_drones);
    loop {
        tokio::select! {
            () = &mut switch_at, if remote.as_ref().is_some_and(Remote::pending) => {
                if let Some(remote) = &mut remote {
                    remote.switch(started.elapsed(), &fleet);
                }
            }
            _ = ticker.tick() => {
                let elapsed = started.elapsed();
                let mut snap = sampler.sample(elapsed, &replicas, &sim.stats(), fleet.published());
                snap.remote_config = remote.as_mut().and_then(|r| r.live(elapsed, &fleet));
                if config.output != Output::Quiet {
                    painter.paint(&snap);
                }
            }
            _ = watch.tick(), if kill.as_ref().is_some_and(Kill::pending) => {
                if let Some(kill) = &mut kill {
                    kill.watch(&mut replicas, started);
                }
            }
            () = &mut kill_drones, if alerts.as_ref().is_some_and(Alerts::kill_pending) => {
                if let Some(alerts) = &mut alerts {
                    alerts.kill(&mut fleet, started.elapsed());
                }
            }
            () = &mut deadline => break,
            () = shutdown.cancelled() => break,
        }
    }
    if let Some(alerts) = alerts {
        // Before the fleet stops: its stopped agents would all turn silent.
        report.alerts = Some(alerts.finish(&shutdown).await);
    }
    report.wall_secs = started.elapsed().as_secs_f64();
    let flight_end = std::time::SystemTime::now();

    // Stop the fleet, let the writers finish what they received (bounded), stop them.
    fleet_stop.cancel();
    let published = fleet.stop().await;
    let limit = config.cutoff() + config.ownership_expiry + Duration::from_secs(30);
    settle(
        &mut replicas,
        published,
        &mut kill,
        started,
        limit,
        &shutdown,
    )
    .await;
    report.replicas = replicas
        .iter()
        .map(|r| {
            let counts = r.counts();
            ReplicaTotals {
                name: r.name().to_owned(),
                state: r.view().state,
                received: counts.positions,
                written: counts.written,
                dropped: counts.dropped.values().sum(),
                partitions: match &kill {
                    Some(k) if k.victim == r.name() => k.partitions.clone(),
                    _ => r.view().owned,
                },
            }
        })
        .collect();
    report.abandoned = replicas
        .iter()
        .filter(|r| !r.running())
        .map(|r| {
            let counts = r.counts();
            counts.positions.saturating_sub(counts.finished())
        })
        .sum();
    replicas.stop().await?;
    let writers = replicas.snapshot();
    let published_positions = transport.published();

    let stats = sim.stats();
    // Read after the stats, so that reading them back is not counted as their cost.
    let stored_history = match config.history {
        Some(_) => Some(history::stored(&sim).await.map_err(DemoError::History)?),
        None => None,
    };
    sampler.finish(&mut report, &writers, &stats);
    if let (Some(remote), Some(hub)) = (remote, transport.hub()) {
        report.remote_config = remote.finish(hub, flight_end).await;
    }
    report.cost = cost::compare(
        &config,
        report.wall_secs,
        &published_positions,
        &writers.counts,
        &stats,
        stored_history.as_ref(),
        report.remote_config.as_ref(),
    );
    report.published = published;
    report.partition_move = kill.map(|k| k.report(config.ownership_expiry));
    report.query = Some(spatial_query(&config, &api, &published_positions).await?);
    report.newest = Some(newest_check(&api, &published_positions).await?);

    drop(api);
    sim.shutdown().await;
    transport.shutdown().await;
    Ok(report)
}

/// Waits until the writers have a final outcome for every position the fleet published
/// (or `limit` passes, or the user asks to stop): every position received, every running
/// replica drained, on the hub every partition checkpointed up to its end (no lag) and a
/// killed replica's partitions moved (the kill still watched meanwhile).
async fn settle(
    replicas: &mut Replicas,
    published: u64,
    kill: &mut Option<Kill>,
    started: Instant,
    limit: Duration,
    shutdown: &CancellationToken,
) {
    let deadline = Instant::now() + limit;
    let mut poll = tokio::time::interval(Duration::from_millis(100));
    while Instant::now() < deadline && !shutdown.is_cancelled() {
        if let Some(kill) = kill.as_mut().filter(|k| k.pending()) {
            kill.watch(replicas, started);
        }
        let lag = replicas.lag();
        let caught_up = lag.values().all(|events| *events <= 0);
        if replicas.counts().positions >= published
            && replicas.drained()
            && caught_up
            && kill.as_ref().is_none_or(|k| !k.pending())
        {
            return;
        }
        poll.tick().await;
    }
}
