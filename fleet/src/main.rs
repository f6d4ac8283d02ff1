//! `fleet`: the demo (`fleet demo`) and the load generator (`fleet loadgen`).

use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use std::io::IsTerminal as _;

use fleet::{Broker, BrokerKind};
use fleet::{DemoConfig, HubKind, Indexing, Output, Scenario};
use fleet::{LoadgenConfig, Target};

/// Drone fleet telemetry: the demo and the load generator.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole pipeline here: local IoT Hub (or an MQTT broker), local Cosmos
    /// endpoint, simulated fleet, cloud writer replicas; show it live and report.
    Demo(DemoArgs),
    /// Publish N simulated drones' positions at a rate to an MQTT broker and report.
    Loadgen(LoadgenArgs),
    /// What to provision for a fleet (IoT Hub, Event Hubs partitions, writers, Cosmos DB)
    /// and what it costs a month, from published quotas, the figures measured here and a
    /// dated price table.
    Plan(PlanArgs),
}

/// On or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Switch {
    On,
    Off,
}

#[derive(Debug, Args)]
struct PlanArgs {
    /// Drones in the fleet.
    #[arg(long)]
    drones: u64,
    /// How often each drone reports its position (the agent's REPORT_INTERVAL).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    report_interval: Duration,
    /// The agent's PUBLISH_EVERY: the samples since the last publish in one message every
    /// this often (e.g. `30s`) [default: every sample alone]
    #[arg(long, value_parser = parse_duration)]
    publish_every: Option<Duration>,
    /// The container's indexing policy, a JSON file (the `indexingPolicy` of `az cosmosdb
    /// sql container show`) [default: the project's, deploy/cosmos/indexing-policy.json]
    #[arg(long)]
    indexing_policy: Option<std::path::PathBuf>,
    /// The writer's MIN_WRITE_INTERVAL: each drone written at most once per this interval
    /// (e.g. `30s`) [default: every position]
    #[arg(long, value_parser = parse_duration)]
    min_write_interval: Option<Duration>,
    /// Keep the history of every position for this long (the writer's history in track
    /// segments, with its HISTORY_TTL), e.g. `7d`.
    #[arg(long, value_parser = parse_duration)]
    history: Option<Duration>,
    /// With --history: the stretch of device time one segment holds (the writer's
    /// HISTORY_SEGMENT_SPAN).
    #[arg(long, default_value = "2m", value_parser = parse_duration, requires = "history")]
    segment_span: Duration,
    /// With --history: the longest the writer holds a position for its segment's write (the
    /// writer's HISTORY_HOLD; the segment span: one write per segment) [default: 2m, at most
    /// the span]
    #[arg(long, value_parser = parse_duration, requires = "history")]
    history_hold: Option<Duration>,
    /// Regions of the Cosmos DB account.
    #[arg(long, default_value_t = 1)]
    regions: u32,
    /// Request units per second the read side spends (fleet-api, dashboards).
    #[arg(long, default_value_t = 0.0)]
    read_ru_per_sec: f64,
    /// The device twin and direct methods: `on` (the agent reads and reports its twin
    /// whenever it runs on IoT Hub) plans the standard tier and counts their messages;
    /// `off` plans telemetry only and considers the basic tier too.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    control_plane: Switch,
    /// Connections a drone makes a day (each reads the whole twin).
    #[arg(long, default_value_t = fleet::ControlPlane::default().reconnections)]
    reconnections_per_day: f64,
    /// Reported patches of its state a drone sends a day (at most 1,440 with the agent's
    /// REPORTED_MIN_INTERVAL of 60s).
    #[arg(long, default_value_t = fleet::ControlPlane::default().reported_patches)]
    reported_patches_per_day: f64,
    /// Desired-property changes per drone a day.
    #[arg(long, default_value_t = fleet::ControlPlane::default().desired_changes)]
    desired_changes_per_day: f64,
    /// Direct method calls per drone a day.
    #[arg(long, default_value_t = fleet::ControlPlane::default().methods)]
    methods_per_day: f64,
    /// The price table [default: the shipped deploy/prices.toml].
    #[arg(long)]
    prices: Option<std::path::PathBuf>,
    /// The published limits planned with, a copy of deploy/limits.toml with those Microsoft
    /// raised for this subscription [default: the shipped deploy/limits.toml].
    #[arg(long)]
    limits: Option<std::path::PathBuf>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Which field lesson to show.
    #[arg(long, value_enum, default_value = "bulk")]
    scenario: Scenario,
    /// Drones in the fleet.
    #[arg(long, default_value_t = 1_000)]
    drones: usize,
    /// How long the fleet flies, wall time (e.g. `60s`, `2m`).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
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
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    ownership_expiry: Duration,
    /// The drones' PUBLISH_EVERY, flight time: the samples since the last publish in one
    /// batch every this often (e.g. `30s`) [default: every sample alone]
    #[arg(long, value_parser = parse_duration)]
    publish_every: Option<Duration>,
    /// The writers' MIN_WRITE_INTERVAL, flight time (e.g. `30s`) [default: every position]
    #[arg(long, value_parser = parse_duration)]
    min_write_interval: Option<Duration>,
    /// The container's indexing policy: the project's, or Cosmos DB's default (every path).
    #[arg(long, value_enum, default_value = "project")]
    indexing_policy: Indexing,
    /// The writers keep every position's history for this long (HISTORY, HISTORY_TTL), e.g.
    /// `7d`; the report sets its RU and bytes per drone-hour beside the plan's.
    #[arg(long, value_parser = parse_duration)]
    history: Option<Duration>,
    /// Run the alerter too: a fence across the fleet's area and a silent-drone rule, a few
    /// drones' agents killed mid-flight, the alerts taken by a local webhook receiver.
    #[arg(long)]
    alerts: bool,
    /// With `--alerts`: how many drones' agents are killed (the last of the fleet).
    #[arg(long, default_value_t = 3, requires = "alerts")]
    alerts_kill: usize,
    /// With `--alerts`: the silent rule's silentAfter, flight time (e.g. `60s`).
    #[arg(long, default_value = "60s", value_parser = parse_duration, requires = "alerts")]
    alerts_silent_after: Duration,
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
    api_addr: std::net::SocketAddr,
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
    report_json: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("iothub").args(["device_connection_strings", "dps_id_scope"])))]
struct LoadgenArgs {
    /// The broker, `mqtt://host:port`; `embedded` starts an embedded broker for the run.
    #[arg(long, env = "FLEET_URL", default_value = "mqtt://127.0.0.1:1883")]
    url: String,
    /// Publish to IoT Hub instead: a file of device connection strings
    /// (`HostName=...;DeviceId=...;SharedAccessKey=...`), one per line and drone.
    #[arg(long, env = "FLEET_DEVICE_CONNECTION_STRINGS", conflicts_with = "url")]
    device_connection_strings: Option<std::path::PathBuf>,
    /// Publish to IoT Hub through DPS instead: its ID scope. Each drone registers as
    /// `{id-prefix}{index:05}` in the symmetric-key enrollment group whose key
    /// --dps-group-key-file holds, with the key derived from it, and publishes to the hub
    /// DPS assigned it, as the edge agent onboards.
    #[arg(
        long,
        env = "DPS_ID_SCOPE",
        conflicts_with = "url",
        requires = "dps_group_key_file"
    )]
    dps_id_scope: Option<String>,
    /// With --dps-id-scope: the file holding the enrollment group's primary key (a key is
    /// never given on the command line).
    #[arg(long, env = "DPS_GROUP_KEY_FILE", requires = "dps_id_scope")]
    dps_group_key_file: Option<std::path::PathBuf>,
    /// With --dps-id-scope: DPS as `host:port` [default: global.azure-devices-provisioning.net:8883].
    #[arg(long, env = "DPS_ENDPOINT", requires = "dps_id_scope")]
    dps_endpoint: Option<String>,
    /// With --dps-id-scope: the hubs DPS may assign, a domain suffix or a local hub's host
    /// name [default: .azure-devices.net].
    #[arg(long, env = "DPS_ALLOWED_HUB_SUFFIX", requires = "dps_id_scope")]
    dps_allowed_hub_suffix: Option<String>,
    /// With --device-connection-strings or --dps-id-scope: the CA (PEM) that signed the
    /// hub's (and DPS's) certificate, trusted instead of the system's roots (a gateway's,
    /// or a local hub's `ca.pem`).
    #[arg(long, env = "IOTHUB_CA_FILE", requires = "iothub")]
    iothub_ca_file: Option<std::path::PathBuf>,
    /// With --device-connection-strings or --dps-id-scope: the hub's MQTT port [default: 8883].
    #[arg(long, env = "IOTHUB_PORT", requires = "iothub")]
    iothub_port: Option<u16>,
    /// Number of drones, one MQTT connection each (with connection strings: at most one
    /// per line; through DPS: those that registered).
    #[arg(long, default_value_t = 100)]
    drones: usize,
    /// Messages per second over all drones.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Stop after this many messages in total.
    #[arg(long)]
    count: Option<u64>,
    /// Stop after this long (e.g. `30s`, `2m`).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// A cloud writer's Prometheus endpoint, e.g. `http://127.0.0.1:9464/metrics`: adds what
    /// the writer received, wrote, dropped and was throttled during the run.
    #[arg(long, env = "FLEET_WRITER_METRICS")]
    writer_metrics: Option<String>,
    /// Device ids are `{prefix}{index:05}`.
    #[arg(long, default_value = "loadgen-")]
    id_prefix: String,
    /// Write the report as JSON to this file as well.
    #[arg(long)]
    report_json: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        // Colour codes only for a person at a terminal, not in files or log collectors.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // The Event Hubs SDK warns of every receiver link an owner level takes
                // over, which is how the replicas hand partitions over: errors only.
                .unwrap_or_else(|_| "warn,rumqttd=off,azure_messaging_eventhubs=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nstopping (Ctrl-C again to abort)...");
                shutdown.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        }
    });
    match cli.command {
        Command::Demo(args) => run_demo(args, shutdown).await,
        Command::Loadgen(args) => run_loadgen(args, shutdown).await,
        Command::Plan(args) => run_plan(args),
    }
}

fn run_plan(args: PlanArgs) -> anyhow::Result<()> {
    let tiers: Vec<_> = fleet::TIERS.iter().map(|t| t.name).collect();
    let prices = match &args.prices {
        Some(path) => fleet::Prices::read(path, &tiers)?,
        None => fleet::Prices::parse(fleet::SHIPPED_PRICES, "deploy/prices.toml", &tiers)?,
    };
    let limits = match &args.limits {
        Some(path) => fleet::Limits::read(path)?,
        None => fleet::Limits::shipped(),
    };
    anyhow::ensure!(args.drones > 0, "--drones must be at least 1");
    for (flag, value) in [
        ("--reconnections-per-day", args.reconnections_per_day),
        ("--reported-patches-per-day", args.reported_patches_per_day),
        ("--desired-changes-per-day", args.desired_changes_per_day),
        ("--methods-per-day", args.methods_per_day),
    ] {
        anyhow::ensure!(
            value >= 0.0 && value.is_finite(),
            "{flag} must be a number of 0 or more, e.g. 24"
        );
    }
    anyhow::ensure!(
        !args.report_interval.is_zero(),
        "--report-interval must be longer than 0, e.g. 5s"
    );
    let publish_every = args.publish_every.unwrap_or(args.report_interval);
    anyhow::ensure!(
        args.segment_span >= args.report_interval,
        "--segment-span must be at least --report-interval ({:?}), e.g. 5m",
        args.report_interval
    );
    anyhow::ensure!(
        args.history_hold
            .is_none_or(|hold| hold <= args.segment_span),
        "--history-hold must be at most --segment-span ({:?}), as the writer's HISTORY_HOLD, e.g. 2m",
        args.segment_span
    );
    anyhow::ensure!(
        publish_every >= args.report_interval,
        "--publish-every must be at least --report-interval ({:?}), e.g. 30s",
        args.report_interval
    );
    let indexing_policy = match &args.indexing_policy {
        None => telemetry::indexing_policy(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--indexing-policy {}", path.display()))?;
            let policy: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("--indexing-policy {}: not JSON", path.display()))?;
            cloud_writer::internals::policy_cost(&policy, &telemetry::DocumentLayout::default())
                .map_err(|e| anyhow::anyhow!("--indexing-policy {}: {e}", path.display()))?;
            policy
        }
    };
    let fleet = fleet::Fleet {
        drones: args.drones,
        report_interval: args.report_interval,
        publish_every,
        min_write_interval: args.min_write_interval.unwrap_or_default(),
        history: args.history.map(|kept| fleet::History {
            kept,
            segment_span: args.segment_span,
            hold: args
                .history_hold
                .unwrap_or(fleet::DEFAULT_HISTORY_HOLD.min(args.segment_span)),
        }),
        regions: args.regions,
        read_ru_per_sec: args.read_ru_per_sec,
        control_plane: (args.control_plane == Switch::On).then_some(fleet::ControlPlane {
            reconnections: args.reconnections_per_day,
            reported_patches: args.reported_patches_per_day,
            desired_changes: args.desired_changes_per_day,
            methods: args.methods_per_day,
        }),
        indexing_policy,
    };
    let planned = fleet::plan(&fleet, &prices, &limits);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&planned)?);
    } else {
        print!("{}", fleet::plan_text(&fleet, &planned, &prices, &limits));
    }
    Ok(())
}

async fn run_demo(args: DemoArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    raise_open_file_limit();
    let terminal = std::io::stdout().is_terminal() && !args.lines;
    let map_tiles = fleet_api::map_tiles(args.map_tiles, args.map_tiles_attribution, None, None)?;
    let config = DemoConfig {
        scenario: args.scenario,
        drones: args.drones,
        duration: args.duration,
        speedup: args.speedup,
        broker: args.broker,
        hub: args.hub,
        ownership_expiry: args.ownership_expiry,
        publish_every: args.publish_every,
        min_write_interval: args.min_write_interval,
        indexing: args.indexing_policy,
        history: args.history,
        alerts: args.alerts.then_some(fleet::AlertsConfig {
            kill: args.alerts_kill,
            silent_after: args.alerts_silent_after,
        }),
        partitions: args.partitions,
        ru_per_sec: args.ru_per_sec,
        latency: Duration::from_millis(args.latency_ms),
        force: args.force,
        api_addr: args.api_addr,
        map_tiles,
        home: args.area.unwrap_or(DemoConfig::default().home),
        output: if terminal {
            Output::Terminal
        } else {
            Output::Lines
        },
        ..DemoConfig::default()
    };
    println!(
        "demo: scenario {} - {}\n{} drones at {}x for {:?} ({}), {} partitions, {} RU/s, {} ms per request; Ctrl-C stops",
        config.label(),
        config.claim(),
        config.drones,
        config.speedup,
        config.duration,
        match args.hub {
            HubKind::Iothub => "local IoT Hub, two writer replicas".to_owned(),
            HubKind::Mqtt => format!("{} MQTT broker, one writer", args.broker.name()),
        },
        config.partitions,
        config.ru_per_sec,
        args.latency_ms
    );
    let report = fleet::run_demo(config, shutdown).await?;
    print!("{}", report.render());
    if let Some(path) = args.report_json {
        std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(())
}

/// A thousand drones hold two thousand sockets in this process: lift the soft limit on
/// open files to the hard limit.
fn raise_open_file_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

async fn run_loadgen(args: LoadgenArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut _broker = None;
    let target = if let Some(path) = &args.device_connection_strings {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Target::IotHub {
            connection_strings: text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned)
                .collect(),
            ca_file: args.iothub_ca_file.clone(),
            port: args.iothub_port,
        }
    } else if let Some(id_scope) = &args.dps_id_scope {
        let path = args
            .dps_group_key_file
            .as_ref()
            .context("--dps-group-key-file is required with --dps-id-scope")?;
        let key = std::fs::read_to_string(path)
            .with_context(|| format!("reading the group key from {}", path.display()))?;
        anyhow::ensure!(
            !key.trim().is_empty(),
            "{} is empty: it holds the enrollment group's primary key",
            path.display()
        );
        Target::Dps {
            id_scope: id_scope.clone(),
            group_key: edge_agent::Secret::new(key.trim()),
            endpoint: args.dps_endpoint.clone().unwrap_or_else(|| {
                format!("{}:{}", edge_agent::GLOBAL_ENDPOINT, edge_agent::DPS_PORT)
            }),
            ca_file: args.iothub_ca_file.clone(),
            port: args.iothub_port,
            allowed_hub_suffix: args.dps_allowed_hub_suffix.clone(),
        }
    } else if args.url == "embedded" {
        let broker = tokio::task::spawn_blocking(|| Broker::start(BrokerKind::Embedded))
            .await?
            .context("starting the embedded broker")?;
        let addr = broker.addr();
        _broker = Some(broker);
        Target::Mqtt {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    } else {
        let (host, port) = parse_mqtt_url(&args.url)?;
        Target::Mqtt { host, port }
    };
    let destination = match &target {
        Target::Mqtt { host, port } => format!("mqtt://{host}:{port}"),
        Target::IotHub {
            connection_strings, ..
        } => {
            format!(
                "IoT Hub ({} device connection strings)",
                connection_strings.len()
            )
        }
        Target::Dps {
            id_scope, endpoint, ..
        } => format!("IoT Hub through DPS at {endpoint} (ID scope {id_scope})"),
    };
    let drones = match &target {
        Target::Mqtt { .. } | Target::Dps { .. } => args.drones,
        Target::IotHub {
            connection_strings, ..
        } => args.drones.min(connection_strings.len()),
    };
    let config = LoadgenConfig {
        target,
        drones,
        rate: args.rate,
        count: args.count,
        duration: args.duration,
        id_prefix: args.id_prefix,
        writer_metrics: args.writer_metrics,
        ..LoadgenConfig::default()
    };
    eprintln!(
        "loadgen: {} drones, {} msg/s, to {destination}, for at most {:?}{}",
        config.drones,
        config.rate,
        config.duration,
        config
            .count
            .map_or(String::new(), |c| format!(" or {c} messages"))
    );
    let report = fleet::run_loadgen(config, shutdown).await?;
    for line in report.lines() {
        println!("{line}");
    }
    if let Some(path) = args.report_json {
        std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Splits `mqtt://host:port` (port 1883 when absent).
fn parse_mqtt_url(url: &str) -> anyhow::Result<(String, u16)> {
    let rest = url.strip_prefix("mqtt://").with_context(|| {
        format!("broker URL {url:?} must look like mqtt://host:port (or be `embedded`)")
    })?;
    let rest = rest.trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((host, port)) => Ok((
            host.to_owned(),
            port.parse()
                .with_context(|| format!("port {port:?} in {url:?} is not a number"))?,
        )),
        None => Ok((rest.to_owned(), 1883)),
    }
}

/// A duration flag in the one form of every program (`60`, `60s`, `2m`).
fn parse_duration(text: &str) -> Result<Duration, settings::DurationError> {
    text.parse::<settings::DurationSetting>()
        .map(settings::DurationSetting::get)
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
