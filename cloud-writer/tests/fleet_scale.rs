//! The production path at fleet scale: 1,000 drones publish through the local IoT Hub
//! (`crates/hub-sim`) with SAS tokens over TLS, 20 of them real `edge-agent` processes and
//! the other 980 the edge-agent library's agents in this process (the same code, as the
//! demo runs them); two `cloud-writer` processes share the hub's 4 partitions through the
//! SDK's `EventProcessor` and the Cosmos checkpoint store, and write to the local Cosmos
//! endpoint. Every drone ends at the newest position the hub accepted from it, and the
//! replicas' outcomes, summed, account for exactly what the hub accepted: received once
//! each, and written, superseded, stale or invalid (no other outcome).

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::{KEY, container, free_port, latest_documents};
use cosmos_sim::CosmosSim;
use edge_agent::{Agent, CancellationToken};
use hub_sim::{HubConfig, HubSim};

const BIN: &str = env!("CARGO_BIN_EXE_cloud-writer");
/// Drones in all, and how many of them are `edge-agent` processes.
const DRONES: usize = 1_000;
const PROCESSES: usize = 20;
/// Every drone reports this often, for [`FLYING`] once all are connected.
const INTERVAL: &str = "1s";
const FLYING: Duration = Duration::from_secs(15);
/// Outcomes a valid fleet's positions may have.
const EXPECTED_OUTCOMES: [&str; 3] = ["superseded", "stale", "invalid"];

/// The edge-agent binary: `EDGE_AGENT_BIN`, or the one cargo builds beside this package's
/// (`cargo test --workspace` builds both). A binary older than the agent's sources is
/// refused, so that the test never runs yesterday's agent.
fn edge_agent_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("EDGE_AGENT_BIN") {
        return path.into();
    }
    let path = Path::new(BIN).with_file_name("edge-agent");
    let hint = "build it with `cargo build -p edge-agent` (`cargo test --workspace` does), or name one in EDGE_AGENT_BIN";
    let built = path
        .metadata()
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: {hint}", path.display()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for dir in [
        "edge-agent/src",
        "crates/telemetry/src",
        "crates/settings/src",
        "crates/client-tls/src",
    ] {
        if let Some((newest, file)) = newest_file(&root.join(dir)) {
            assert!(
                newest <= built,
                "{} is older than {}: {hint}",
                path.display(),
                file.display()
            );
        }
    }
    path
}

/// The most recently modified file under `dir`, with its time.
fn newest_file(dir: &Path) -> Option<(SystemTime, PathBuf)> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let candidate = if path.is_dir() {
            newest_file(&path)
        } else {
            entry.metadata().ok()?.modified().ok().map(|t| (t, path))
        };
        if let Some(c) = candidate
            && newest.as_ref().is_none_or(|n| c.0 > n.0)
        {
            newest = Some(c);
        }
    }
    newest
}

/// Lets this process hold the in-process drones' sockets and buffer files (and the hub's
/// side of every connection): the soft open-file limit raised to the hard one.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Sends SIGTERM to `child`.
fn terminate(child: &Child) {
    // SAFETY: kill(2) with plain integers.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
}

/// Polls `condition` every 50 ms until it holds; panics with `what` and the last value
/// after `timeout`.
async fn wait_for<T: std::fmt::Debug>(
    what: &str,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> T,
    condition: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let value = probe().await;
        if condition(&value) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {timeout:?}; last {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `cloud-writer` process reading the hub.
struct Replica {
    child: Child,
    metrics_port: u16,
    log: PathBuf,
}

impl Replica {
    fn start(name: &str, hub: &HubSim, sim: &CosmosSim, dir: &Path) -> Replica {
        let metrics_port = free_port();
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(BIN)
            .env_clear()
            .env("COSMOS_ENDPOINT", sim.endpoint())
            .env("COSMOS_KEY", KEY)
            .env("COSMOS_DATABASE", "telemetry")
            .env("COSMOS_CONTAINER", "positions")
            .env("COSMOS_CREATE_IF_MISSING", "true")
            .env("WRITER_SOURCE", hub.eventhub_connection_string())
            .env("EVENTHUBS_START_POSITION", "earliest")
            .env("EVENTHUBS_LOAD_BALANCING_INTERVAL", "2s")
            .env("EVENTHUBS_OWNERSHIP_EXPIRY", "10s")
            .env("METRICS_ADDR", format!("127.0.0.1:{metrics_port}"))
            .env("RUST_LOG", "warn,cloud_writer=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Replica {
            child,
            metrics_port,
            log,
        }
    }

    /// Its counters (messages received, documents written, drops by reason) and the
    /// partitions it reads.
    async fn counts(&self) -> Counts {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        let Ok(response) = reqwest::get(&url).await else {
            return Counts::default();
        };
        let text = response.text().await.unwrap_or_default();
        let mut counts = Counts::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value: u64 = value.parse::<f64>().unwrap_or(0.0) as u64;
            if name == "cloud_writer_messages_received_total" {
                counts.received += value;
            } else if name.starts_with("cloud_writer_documents_written_total") {
                counts.written += value;
            } else if let Some(labels) = name.strip_prefix("cloud_writer_messages_dropped_total{") {
                let reason = labels
                    .split("reason=\"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .unwrap_or("?");
                if value > 0 {
                    *counts.dropped.entry(reason.to_owned()).or_default() += value;
                }
            }
        }
        (counts.owned, counts.ownership_changes) = self.ownership();
        counts
    }

    /// The partitions it reads and the changes so far, from its log: a partition is read
    /// from "reading partition" until "partition lost" or "partition closed".
    fn ownership(&self) -> (BTreeSet<String>, u64) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let (mut owned, mut changes) = (BTreeSet::new(), 0);
        for line in text.lines() {
            let Some(at) = line.find("partition=") else {
                continue;
            };
            let id = line[at + "partition=".len()..]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_owned();
            if line.contains("reading partition") {
                owned.insert(id);
                changes += 1;
            } else if line.contains("partition lost") || line.contains("partition closed") {
                owned.remove(&id);
                changes += 1;
            }
        }
        (owned, changes)
    }
}

impl Drop for Replica {
    /// Stops the process; when the test failed, shows its log.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- {} ---\n{log}", self.log.display());
        }
    }
}

/// A replica's counters and partitions, or their sums.
#[derive(Debug, Default, Clone, PartialEq)]
struct Counts {
    received: u64,
    written: u64,
    dropped: BTreeMap<String, u64>,
    /// The partitions it reads.
    owned: BTreeSet<String>,
    /// Partitions claimed, lost and released so far.
    ownership_changes: u64,
}

impl Counts {
    fn settled(&self) -> u64 {
        self.written + self.dropped.values().sum::<u64>()
    }

    fn plus(mut self, other: &Counts) -> Counts {
        self.received += other.received;
        self.written += other.written;
        for (reason, n) in &other.dropped {
            *self.dropped.entry(reason.clone()).or_default() += n;
        }
        self
    }
}

/// A drone's position as `common::assert_newest` checks it: (deviceTimeMs, seq, lat, lon).
type Newest = HashMap<String, (i64, u64, f64, f64)>;

/// The newest position of each drone among the events the hub accepted, and the number
/// of events.
fn newest_accepted(hub: &HubSim) -> (Newest, u64) {
    let mut newest = Newest::new();
    let mut events_seen = 0;
    for index in 0..hub.partitions().count() {
        let mut events = Vec::new();
        hub.partitions()
            .get(index)
            .unwrap()
            .read(0, usize::MAX, &mut events);
        for event in events {
            events_seen += 1;
            let body: serde_json::Value = serde_json::from_slice(&event.message.body).unwrap();
            assert_eq!(body["deviceId"], &*event.message.device_id);
            let seq = body["seq"].as_u64().unwrap();
            let ts = chrono::DateTime::parse_from_rfc3339(body["ts"].as_str().unwrap())
                .unwrap()
                .timestamp_millis();
            let position = (
                ts,
                seq,
                body["lat"].as_f64().unwrap(),
                body["lon"].as_f64().unwrap(),
            );
            let entry = newest
                .entry(event.message.device_id.to_string())
                .or_insert(position);
            if seq > entry.1 {
                *entry = position;
            }
        }
    }
    (newest, events_seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_drones_through_the_hub_and_two_writer_replicas() {
    raise_open_file_limit();
    let agent_bin = edge_agent_bin();
    let dir = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(dir.path().join("hub"));
    config.devices = DRONES;
    config.device_prefix = "drone-".into();
    let hub = HubSim::start(config).await.unwrap();
    let state = hub.config().state_dir.clone();
    let ca = state.join("ca.pem");
    let connection_strings: Vec<String> = std::fs::read_to_string(state.join("devices.txt"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(connection_strings.len(), DRONES);
    let sim = CosmosSim::builder()
        .partitions(4)
        .ru_per_sec(f64::INFINITY)
        .start()
        .await
        .unwrap();

    // Replica a claims the 4 partitions; replica b then takes its share (the processor's
    // greedy balancing: b claims up to 2 at once, and its receivers' owner level detaches
    // a's). The drones start only once each replica reads its 2 (a has seen 2 of its
    // receivers detached), so that no partition moves while positions flow.
    let a = Replica::start("writer-a", &hub, &sim, dir.path());
    wait_for(
        "replica a reading the 4 partitions",
        Duration::from_secs(60),
        async || a.counts().await,
        |c| c.owned.len() == 4,
    )
    .await;
    let b = Replica::start("writer-b", &hub, &sim, dir.path());
    let started = Instant::now();
    let balanced = wait_for(
        "replica b taking 2 partitions from replica a",
        Duration::from_secs(60),
        async || (a.counts().await, b.counts().await),
        |(a, b)| a.owned.len() == 2 && b.owned.len() == 2 && a.owned.is_disjoint(&b.owned),
    )
    .await;
    eprintln!(
        "partitions {:?} moved from replica a to b in {:.1} s",
        balanced.1.owned,
        started.elapsed().as_secs_f64()
    );

    // The fleet: 20 agent processes and 980 agents in this process, SAS over TLS.
    let stop = CancellationToken::new();
    let mut processes = Vec::new();
    for (i, cs) in connection_strings[..PROCESSES].iter().enumerate() {
        let child = Command::new(&agent_bin)
            .env_clear()
            .env("IOTHUB_DEVICE_CONNECTION_STRING", cs)
            .env("IOTHUB_CA_FILE", &ca)
            .env("IOTHUB_PORT", hub.mqtt_addr().port().to_string())
            .env("POSITION_SOURCE", "sim")
            .env("SIM_SEED", i.to_string())
            .env("REPORT_INTERVAL", INTERVAL)
            .env("BUFFER_DIR", dir.path().join(format!("agent-{i}")))
            .env("BUFFER_FSYNC", "false")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join(format!("agent-{i}.log"))).unwrap())
            .spawn()
            .unwrap();
        processes.push(child);
    }
    let interval: settings::DurationSetting = INTERVAL.parse().unwrap();
    let mut agents = Vec::new();
    for (i, cs) in connection_strings.iter().enumerate().skip(PROCESSES) {
        let settings = edge_agent::config::Settings {
            connection_string: Some(edge_agent::config::Secret::new(cs.as_str())),
            iothub_ca_file: Some(ca.clone()),
            iothub_port: Some(hub.mqtt_addr().port()),
            position_source: Some("sim".into()),
            sim_seed: Some(i as u64),
            report_interval: Some(interval),
            buffer_dir: Some(dir.path().join(format!("agent-{i}"))),
            buffer_fsync: Some(false),
            ..edge_agent::config::Settings::default()
        };
        let agent = Agent::new(settings.resolve().unwrap()).unwrap();
        // Started over one interval, so that the drones do not report in lock-step.
        let delay = interval.get().mul_f64(i as f64 / DRONES as f64);
        let stop = stop.clone();
        agents.push(tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return,
            }
            agent.run(stop).await.unwrap();
        }));
    }
    let flying = Instant::now();
    wait_for(
        "every drone connected",
        Duration::from_secs(120),
        async || hub.connected_devices(),
        |n| *n == DRONES,
    )
    .await;
    eprintln!(
        "{DRONES} drones connected in {:.1} s",
        flying.elapsed().as_secs_f64()
    );
    // The flight: a fixed time once all are up (the scenario's length, not a wait for
    // something), then until every drone has had a position accepted.
    tokio::time::sleep(FLYING).await;
    wait_for(
        "every drone to have published",
        Duration::from_secs(60),
        async || newest_accepted(&hub).0.len(),
        |n| *n == DRONES,
    )
    .await;

    // Land: the processes on SIGTERM, the rest by their token.
    for child in &processes {
        terminate(child);
    }
    stop.cancel();
    for agent in agents {
        agent.await.unwrap();
    }
    for mut child in processes {
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "an agent process exited with {status}");
    }

    // What the hub accepted is what was published.
    let stats = hub.stats();
    assert!(stats.messages_refused.is_empty(), "{stats:?}");
    let (expected, events) = newest_accepted(&hub);
    assert_eq!(events, stats.messages_accepted);
    assert_eq!(expected.len(), DRONES, "every drone published");
    let published = stats.messages_accepted;
    eprintln!(
        "published {published} positions in {:.1} s",
        flying.elapsed().as_secs_f64()
    );

    let counts = wait_for(
        "both replicas to have a final outcome for every position",
        Duration::from_secs(120),
        async || (a.counts().await, b.counts().await),
        |(a, b)| {
            let sum = a.clone().plus(b);
            sum.received >= published && sum.settled() >= sum.received
        },
    )
    .await;
    let sum = counts.0.clone().plus(&counts.1);
    eprintln!("replica a {:?}; replica b {:?}", counts.0, counts.1);
    assert_eq!(sum.received, published, "received once each: {counts:?}");
    let others: Vec<_> = sum
        .dropped
        .keys()
        .filter(|r| !EXPECTED_OUTCOMES.contains(&r.as_str()))
        .collect();
    assert!(others.is_empty(), "unexpected outcomes: {counts:?}");
    assert_eq!(sum.settled(), published, "{counts:?}");
    // Both replicas wrote, from their own partitions.
    assert!(counts.0.written > 0 && counts.1.written > 0, "{counts:?}");
    // No partition moved after the balancing.
    assert_eq!(counts.0.owned, balanced.0.owned, "{counts:?}");
    assert_eq!(counts.1.owned, balanced.1.owned, "{counts:?}");
    assert_eq!(
        counts.0.ownership_changes + counts.1.ownership_changes,
        balanced.0.ownership_changes + balanced.1.ownership_changes,
        "{counts:?}"
    );

    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "positions")).await;
    common::assert_newest(&docs, &expected);

    // Both replicas stop cleanly.
    let (mut a, mut b) = (a, b);
    for replica in [&mut a, &mut b] {
        terminate(&replica.child);
    }
    for replica in [&mut a, &mut b] {
        let log = replica.log.clone();
        let child = &mut replica.child;
        let status = wait_for(
            "a replica to stop on SIGTERM",
            Duration::from_secs(60),
            async || child.try_wait().unwrap(),
            Option::is_some,
        )
        .await
        .unwrap();
        assert!(
            status.success(),
            "{status}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
    sim.shutdown().await;
    hub.shutdown().await;
}
