//! The demo's settings: the scenario, the fleet and its cadences, the hub or broker, the
//! local Cosmos DB endpoint, the alerts, the live map and where the report goes.

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use fleet::{AlertsConfig, BrokerKind, DemoConfig, HubKind, Indexing, Output, Scenario};
use settings::DurationSetting;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Which field lesson to show.
    #[arg(long, value_enum, default_value = "bulk")]
    scenario: Scenario,
    /// Drones in the fleet.
    #[arg(long, default_value_t = 1_000)]
    drones: usize,
    /// How long the fleet flies, wall time (e.g. `60s`, `2m`).
    #[arg(long, default_value = "60s")]
    duration: DurationSetting,
    /// Flight seconds per wall second (reports every 5 s of flight; the 5-minute cutoff
    /// scales the same way).
    #[arg(long, default_value_t = 10.0)]
    speedup: f64,
    /// Where the drones publish and the writers read: `iothub`, the local IoT Hub in this
    /// process (SAS over TLS, its 4-partition Event Hubs endpoint, two writer replicas),
    /// or `mqtt`, an MQTT broker (plain MQTT, one writer).
    #[arg(long, value_enum, default_value = "iothub")]
    hub: HubKind,
    /// With `--hub mqtt`: the broker, embedded (in this process) or the system's mosquitto.
    #[arg(long, value_enum, default_value = "embedded")]
    broker: BrokerKind,
    /// On the hub: how long a writer replica's partition ownership holds without renewal
    /// (a killed replica's partitions move after it), e.g. `10s`.
    #[arg(long, default_value = "10s")]
    ownership_expiry: DurationSetting,
    /// The drones' PUBLISH_EVERY, flight time: the samples since the last publish in one
    /// batch every this often (e.g. `30s`) [default: every sample alone]
    #[arg(long)]
    publish_every: Option<DurationSetting>,
    /// The writers' MIN_WRITE_INTERVAL, flight time (e.g. `30s`) [default: every position]
    #[arg(long)]
    min_write_interval: Option<DurationSetting>,
    /// The container's indexing policy: the project's, or Cosmos DB's default (every path).
    #[arg(long, value_enum, default_value = "project")]
    indexing_policy: Indexing,
    /// The writers keep every position's history for this long (HISTORY, HISTORY_TTL), e.g.
    /// `7d`; the report sets its RU and bytes per drone-hour beside the plan's.
    #[arg(long)]
    history: Option<DurationSetting>,
    /// Run the alerter too: a fence across the fleet's area and a silent-drone rule, a few
    /// drones' agents killed mid-flight, the alerts taken by a local webhook receiver.
    #[arg(long)]
    alerts: bool,
    /// With `--alerts`: how many drones' agents are killed (the last of the fleet).
    #[arg(long, default_value_t = 3, requires = "alerts")]
    alerts_kill: usize,
    /// With `--alerts`: the silent rule's silentAfter, flight time (e.g. `60s`).
    #[arg(long, default_value = "60s", requires = "alerts")]
    alerts_silent_after: DurationSetting,
    /// Physical partitions of the container.
    #[arg(long, default_value_t = 4)]
    partitions: usize,
    /// Provisioned RU/s of the container, split evenly over its partitions.
    #[arg(long, default_value_t = 40_000.0)]
    ru_per_sec: f64,
    /// Latency the local endpoint adds to every request, milliseconds.
    #[arg(long, default_value_t = 5)]
    latency_ms: u64,
    /// With `--scenario hot-partition`: override the writer's partition key guard
    /// (WRITER_FORCE_MISSING_PARTITION_KEY), so that every document goes into one partition.
    #[arg(long)]
    force: bool,
    /// Print one summary line per second instead of redrawing the view.
    #[arg(long)]
    lines: bool,
    /// Where the live map and the read API are served while the demo runs (a free port
    /// when this one is taken).
    #[arg(long, default_value = "127.0.0.1:8080")]
    api_addr: SocketAddr,
    /// The live map's base map: an XYZ tile URL template with {z}, {x} and {y}, as
    /// fleet-api's MAP_TILE_URL [default: none, a plain background; the demo needs no network]
    #[arg(long, env = "MAP_TILE_URL")]
    map_tiles: Option<String>,
    /// What the map shows for the base map, as its provider asks (MAP_TILE_ATTRIBUTION)
    /// [default: the tile server's origin]
    #[arg(long, env = "MAP_TILE_ATTRIBUTION", requires = "map_tiles")]
    map_tiles_attribution: Option<String>,
    /// The centre of the fleet's area, `LAT,LON` in degrees, e.g. `47.14,9.52` to fly over a
    /// base map's area [default: 47.6062,-122.3321, Seattle]
    #[arg(long, value_parser = parse_area, allow_hyphen_values = true)]
    area: Option<(f64, f64)>,
    /// Write the report (with the timeline) as JSON to this file as well.
    #[arg(long)]
    report_json: Option<PathBuf>,
}

/// The demo to run and where its report goes besides standard output.
#[derive(Debug)]
pub struct Demo {
    /// The run.
    pub config: DemoConfig,
    /// Write the report as JSON to this file as well.
    pub report_json: Option<PathBuf>,
}

impl DemoArgs {
    /// The demo's configuration: the view redrawn at a terminal unless `--lines` asks for
    /// lines, the base map checked as fleet-api checks it.
    pub fn demo(self) -> anyhow::Result<Demo> {
        let terminal = std::io::stdout().is_terminal() && !self.lines;
        let map_tiles =
            fleet_api::map_tiles(self.map_tiles, self.map_tiles_attribution, None, None)?;
        let config = DemoConfig {
            scenario: self.scenario,
            drones: self.drones,
            duration: self.duration.get(),
            speedup: self.speedup,
            broker: self.broker,
            hub: self.hub,
            ownership_expiry: self.ownership_expiry.get(),
            publish_every: self.publish_every.map(DurationSetting::get),
            min_write_interval: self.min_write_interval.map(DurationSetting::get),
            indexing: self.indexing_policy,
            history: self.history.map(DurationSetting::get),
            alerts: self.alerts.then_some(AlertsConfig {
                kill: self.alerts_kill,
                silent_after: self.alerts_silent_after.get(),
            }),
            partitions: self.partitions,
            ru_per_sec: self.ru_per_sec,
            latency: Duration::from_millis(self.latency_ms),
            force: self.force,
            api_addr: self.api_addr,
            map_tiles,
            home: self.area.unwrap_or(DemoConfig::default().home),
            output: if terminal {
                Output::Terminal
            } else {
                Output::Lines
            },
            ..DemoConfig::default()
        };
        Ok(Demo {
            config,
            report_json: self.report_json,
        })
    }
}

/// `LAT,LON` in degrees: latitude within -80..=80 (where the map's projection holds),
/// longitude within -180..=180.
fn parse_area(text: &str) -> Result<(f64, f64), String> {
    let (lat, lon) = text
        .split_once(',')
        .ok_or_else(|| format!("{text:?} is not LAT,LON"))?;
    let degrees = |part: &str| {
        part.trim()
            .parse::<f64>()
            .map_err(|e| format!("{part:?} in {text:?}: {e}"))
    };
    let (lat, lon) = (degrees(lat)?, degrees(lon)?);
    if !(-80.0..=80.0).contains(&lat) || !(-180.0..=180.0).contains(&lon) {
        return Err(format!("{text:?} is outside -80..=80, -180..=180 degrees"));
    }
    Ok((lat, lon))
}
