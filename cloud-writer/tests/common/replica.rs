//! `cloud-writer` processes reading the local hub's Event Hubs endpoint, as operators run
//! replicas: started with the binary cargo built, read through their metrics endpoint,
//! stopped with SIGTERM or killed with SIGKILL; and what the hub holds, to check them by.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use test_harness::eventually;

use cloud_writer::DropReason;
use cosmos_sim::CosmosSim;
use hub_sim::HubSim;
use hub_sim::{AuthMethod, Event, Incoming};

use super::{KEY, free_port};

/// The writer binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_cloud-writer");

/// Sends `signal` to `child`.
fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) with plain integers.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
}

/// Sends SIGTERM to `child`.
pub fn terminate(child: &Child) {
    signal(child, libc::SIGTERM);
}

/// A `cloud-writer` process reading the hub.
pub struct Replica {
    /// The process.
    pub child: Child,
    metrics_port: u16,
    probe_port: u16,
    /// Its log (stderr).
    pub log: PathBuf,
}

impl Replica {
    /// Starts a replica writing to container `positions` of `sim`, from the earliest event,
    /// balancing every 2 s with a 10 s ownership expiry; `env` overrides or adds settings.
    pub fn start(
        name: &str,
        hub: &HubSim,
        sim: &CosmosSim,
        dir: &Path,
        env: &[(&str, &str)],
    ) -> Replica {
        let (metrics_port, probe_port) = (free_port(), free_port());
        let log = dir.join(format!("{name}.log"));
        let mut command = Command::new(BIN);
        command
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
            .env("PROBE_ADDR", format!("127.0.0.1:{probe_port}"))
            .env("RUST_LOG", "warn,cloud_writer=info");
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Replica {
            child,
            metrics_port,
            probe_port,
            log,
        }
    }

    /// Its checkpoint lag of each partition (`cloud_writer_eventhubs_lag_events`), empty
    /// while it does not answer.
    pub async fn lag_events(&self) -> BTreeMap<String, i64> {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        let Ok(response) = reqwest::get(&url).await else {
            return BTreeMap::new();
        };
        let text = response.text().await.unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("cloud_writer_eventhubs_lag_events{partition=\"")?;
                let (partition, value) = rest.split_once("\"} ")?;
                Some((partition.to_owned(), value.parse::<f64>().ok()? as i64))
            })
            .collect()
    }

    /// Its counters and partitions from its metrics endpoint (all zero while it does not
    /// answer).
    pub async fn counts(&self) -> Counts {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        let Ok(response) = reqwest::get(&url).await else {
            return Counts::default();
        };
        Counts::of_metrics(&response.text().await.unwrap_or_default())
    }

    /// Whether its `/readyz` answers 200.
    pub async fn ready(&self) -> bool {
        let url = format!("http://127.0.0.1:{}/readyz", self.probe_port);
        reqwest::get(&url)
            .await
            .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
    }

    /// Kills it with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits (polling, at most `timeout`) until it exited successfully.
    pub async fn stop(&mut self, timeout: Duration) {
        terminate(&self.child);
        self.exited(timeout).await;
    }

    /// Waits (polling, at most `timeout`) until it exited successfully.
    pub async fn exited(&mut self, timeout: Duration) {
        let child = &mut self.child;
        let status = eventually(
            "a replica to stop on SIGTERM",
            timeout,
            async || child.try_wait().unwrap(),
            Option::is_some,
        )
        .await
        .unwrap();
        assert!(
            status.success(),
            "{status}: {}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }
}

impl Drop for Replica {
    /// Stops the process; when the test failed, shows its log.
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- {} ---\n{log}", self.log.display());
        }
    }
}

/// A replica's counters and partitions, or their sums.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Counts {
    /// Messages received.
    pub received: u64,
    /// Of those, events this process had already taken and received again.
    pub read_again: u64,
    /// Latest-position documents written.
    pub written: u64,
    /// Positions newly stored in track segments.
    pub history_written: u64,
    /// Messages received but not yet checkpointed, over its partitions.
    pub unacknowledged: u64,
    /// Messages dropped, by reason.
    pub dropped: BTreeMap<DropReason, u64>,
    /// The partitions it owns (`eventhubs_partition_owned` 1).
    pub owned: BTreeSet<String>,
    /// Partitions claimed, lost and released so far.
    pub ownership_changes: u64,
    /// Whether its source is connected.
    pub connected: bool,
    /// Breaks of its source's connection or of a partition's receiver, by cause.
    pub session_breaks: BTreeMap<String, u64>,
}

impl Counts {
    /// The counters of a Prometheus text exposition of the writer.
    pub fn of_metrics(text: &str) -> Counts {
        let mut counts = Counts::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value: u64 = value.parse::<f64>().unwrap_or(0.0) as u64;
            let label = |key: &str| {
                name.split(&format!("{key}=\""))
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .unwrap_or("?")
                    .to_owned()
            };
            if name == "cloud_writer_messages_received_total" {
                counts.received += value;
            } else if name == "cloud_writer_documents_written_total{kind=\"latest\"}" {
                counts.written += value;
            } else if name == "cloud_writer_documents_written_total{kind=\"history\"}" {
                counts.history_written += value;
            } else if name.starts_with("cloud_writer_checkpoint_lag{") {
                counts.unacknowledged += value;
            } else if name == "cloud_writer_source_connected" {
                counts.connected = value == 1;
            } else if name.starts_with("cloud_writer_messages_dropped_total{") {
                if value > 0 {
                    let reason = label("reason").parse().expect("a drop reason");
                    *counts.dropped.entry(reason).or_default() += value;
                }
            } else if name.starts_with("cloud_writer_eventhubs_partition_owned{") {
                if value == 1 {
                    counts.owned.insert(label("partition"));
                }
            } else if name.starts_with("cloud_writer_eventhubs_ownership_changes_total{") {
                counts.ownership_changes += value;
            } else if name.starts_with("cloud_writer_eventhubs_events_read_again_total{") {
                counts.read_again += value;
            } else if name.starts_with("cloud_writer_eventhubs_session_breaks_total{") && value > 0
            {
                counts.session_breaks.insert(label("cause"), value);
            }
        }
        counts
    }

    /// Messages with a final outcome.
    pub fn settled(&self) -> u64 {
        self.written + self.dropped.values().sum::<u64>()
    }

    /// The sums of both.
    pub fn plus(mut self, other: &Counts) -> Counts {
        self.received += other.received;
        self.read_again += other.read_again;
        self.written += other.written;
        self.history_written += other.history_written;
        self.unacknowledged += other.unacknowledged;
        for (reason, n) in &other.dropped {
            *self.dropped.entry(*reason).or_default() += n;
        }
        for (cause, n) in &other.session_breaks {
            *self.session_breaks.entry(cause.clone()).or_default() += n;
        }
        self
    }
}

/// A drone's position as `common::assert_newest` checks it: (deviceTimeMs, seq, lat, lon).
pub type Newest = HashMap<String, (i64, u64, f64, f64)>;

/// A fresh directory with a local hub in it (the writers' logs go there too), and a local
/// Cosmos endpoint that does not throttle.
pub async fn hub_and_endpoint() -> (tempfile::TempDir, HubSim, CosmosSim) {
    let dir = tempfile::tempdir().unwrap();
    let hub = HubSim::start(hub_sim::HubConfig::new(dir.path().join("hub")))
        .await
        .unwrap();
    let sim = CosmosSim::unthrottled().await.unwrap();
    (dir, hub, sim)
}

/// A local hub, a local Cosmos endpoint and Azurite, for writers that keep their
/// checkpoints in Blob Storage.
pub struct BlobRig {
    /// Where the hub and the writers' logs live.
    pub dir: tempfile::TempDir,
    /// The hub.
    pub hub: HubSim,
    /// The Cosmos endpoint.
    pub sim: CosmosSim,
    /// The storage emulator.
    pub azurite: test_harness::Azurite,
}

impl BlobRig {
    /// Starts the three.
    pub async fn start() -> BlobRig {
        let (dir, hub, sim) = hub_and_endpoint().await;
        let azurite = test_harness::Azurite::start().unwrap();
        BlobRig {
            dir,
            hub,
            sim,
            azurite,
        }
    }

    /// A writer process keeping its checkpoints in blob `container`, balancing and
    /// checkpointing every second, ownerships expiring after 4 s.
    pub fn writer(&self, name: &str, container: &str) -> Replica {
        self.writer_with(name, container, &[])
    }

    /// [`BlobRig::writer`] with `env` overriding or adding settings.
    pub fn writer_with(&self, name: &str, container: &str, env: &[(&str, &str)]) -> Replica {
        let connection = self.azurite.connection_string();
        let mut settings = vec![
            ("CHECKPOINT_BLOB_CONNECTION_STRING", connection.as_str()),
            ("CHECKPOINT_BLOB_CONTAINER", container),
            ("EVENTHUBS_LOAD_BALANCING_INTERVAL", "1s"),
            ("EVENTHUBS_OWNERSHIP_EXPIRY", "4s"),
            ("EVENTHUBS_CHECKPOINT_INTERVAL", "1s"),
        ];
        settings.extend_from_slice(env);
        Replica::start(name, &self.hub, &self.sim, self.dir.path(), &settings)
    }
}

/// One position of each of `drones` drones (`common::device(0..drones)`), all with `seq`,
/// routed into the hub as devices authenticated with SAS send them.
pub fn route_round(hub: &HubSim, drones: usize, seq: u64) {
    let now = chrono::Utc::now();
    for d in 0..drones {
        let id = super::device(d);
        let mut message = Incoming::new(&id, super::wire(&id, seq, now, 47.0, -122.0));
        message.auth = AuthMethod::Sas;
        hub.partitions().route(message);
    }
}

/// `per_drone` positions of each of `drones` drones, 5 s apart and the last one
/// `30 - 5 * per_drone` s old, routed into the hub as devices authenticated with SAS send
/// them; the newest of each drone.
pub fn route_recent(hub: &HubSim, drones: usize, per_drone: u64) -> Newest {
    let now = chrono::Utc::now();
    let mut newest = Newest::new();
    for d in 0..drones {
        let id = super::device(d);
        for seq in 1..=per_drone {
            let ts = now - chrono::Duration::seconds(30 - 5 * seq as i64);
            let (lat, lon) = (47.6 + d as f64 * 1e-3, -122.3 + seq as f64 * 1e-4);
            let mut message = Incoming::new(&id, super::wire(&id, seq, ts, lat, lon));
            message.auth = AuthMethod::Sas;
            hub.partitions().route(message);
            newest.insert(id.clone(), (ts.timestamp_millis(), seq, lat, lon));
        }
    }
    newest
}

/// Every event the hub's partitions hold, by partition id.
pub fn hub_events(hub: &HubSim) -> HashMap<String, Vec<Arc<Event>>> {
    let partitions = hub.partitions();
    (0..partitions.count())
        .map(|index| {
            let mut events = Vec::new();
            partitions
                .get(index)
                .unwrap()
                .read(0, usize::MAX, &mut events);
            (index.to_string(), events)
        })
        .collect()
}

/// The newest position of each drone among the events the hub accepted, and the number
/// of events.
pub fn newest_accepted(hub: &HubSim) -> (Newest, u64) {
    let mut newest = Newest::new();
    let mut events_seen = 0;
    for events in hub_events(hub).into_values() {
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

/// Reads every drone's document every 100 ms until cancelled; tells how many reads were
/// made and each time a drone's stored (deviceTimeMs, seq) went backwards.
pub fn watch_documents(
    endpoint: String,
) -> (
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<(u64, Vec<String>)>,
) {
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move {
            let positions = super::container(&endpoint, "telemetry", "positions");
            let mut seen: HashMap<String, (i64, u64)> = HashMap::new();
            let (mut reads, mut backwards) = (0, Vec::new());
            while !stop.is_cancelled() {
                for (id, doc) in super::latest_documents(&positions).await {
                    let now = (
                        doc["deviceTimeMs"].as_i64().unwrap(),
                        doc["seq"].as_u64().unwrap(),
                    );
                    if let Some(before) = seen.insert(id.clone(), now)
                        && now < before
                    {
                        backwards.push(format!("{id}: {before:?} -> {now:?}"));
                    }
                }
                reads += 1;
                // The pace of the reader, not a synchronisation: it samples real processes'
                // documents as they change.
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
            (reads, backwards)
        }
    });
    (stop, task)
}

/// What a replica that exited reported receiving in its last log line (`stopped`,
/// `received=N`), if it got that far.
pub fn received_at_exit(log: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().rev().find(|l| l.contains("stopped"))?;
    // The log may carry ANSI colour codes around `=`.
    let plain: String = strip_ansi(line);
    let rest = plain.split("received=").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// `text` without its ANSI colour codes.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
