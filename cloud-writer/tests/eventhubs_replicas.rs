//! Writer replicas on the local IoT Hub's Event Hubs endpoint (`crates/hub-sim`), as real
//! `cloud-writer` processes sharing its 4 partitions through the SDK's `EventProcessor` and
//! the Cosmos checkpoint store (`crates/cosmos-sim`) or, where a test says so, the Blob
//! Storage one (Azurite), with short balancing settings
//! (interval 1 s, ownership expiry 4 s, checkpoint interval 1 s):
//!
//! - two replicas balance 2 and 2; one killed with SIGKILL mid-stream: its partitions move to
//!   the other after the ownership expiry (the time is printed), nothing is lost and no
//!   drone's document ever goes backwards;
//! - a replica stopped with SIGTERM gives its partitions up: the other owns them within
//!   about one balancing interval, far less than the expiry;
//! - the hub's AMQP side restarted and every device connection dropped mid-stream: the
//!   writer and the agents recover by themselves, nothing is lost;
//! - the hub's receivers stalled mid-stream (attached, delivering nothing): the writer
//!   counts the stall and reads on through a new connection, nothing lost or read again;
//! - a writer restarted on the same consumer group reads again nothing after a graceful
//!   stop, and after SIGKILL at most what arrived in the last checkpoint interval.
//!
//! Positions enter the hub as it enqueues a SAS device's message (the routing the MQTT
//! side uses), except in the fault test, where edge-agent agents publish over MQTT.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_harness::eventually;

use azure_messaging_eventhubs::CheckpointStore;
use chrono::Utc;
use cloud_writer::Secret;
use cloud_writer::internals::EventHubsConnection;
use cloud_writer::internals::{
    BlobAuth, BlobCheckpointStore, BlobCheckpoints, CosmosCheckpointStore,
};
use common::replica::{Counts, Replica, hub_events, newest_accepted, watch_documents};
use common::{KEY, container, device, latest_documents, newest_written, wire};
use cosmos::{CosmosClient, CosmosConfig, Credential, MasterKey};
use cosmos_sim::CosmosSim;
use edge_agent::{Agent, CancellationToken};
use hub_sim::{AuthMethod, Event, Incoming};
use hub_sim::{HubConfig, HubSim};
use test_harness::Azurite;

/// Balancing every second, ownerships expiring after 4 s, checkpoints every second.
const FAST: [(&str, &str); 3] = [
    ("EVENTHUBS_LOAD_BALANCING_INTERVAL", "1s"),
    ("EVENTHUBS_OWNERSHIP_EXPIRY", "4s"),
    ("EVENTHUBS_CHECKPOINT_INTERVAL", "1s"),
];
/// The checkpoint interval of [`FAST`].
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Drones of the routed streams, and how often each reports.
const DRONES: usize = 100;
const EVERY: Duration = Duration::from_millis(250);
/// Generous bound for anything the test waits for.
const PATIENCE: Duration = Duration::from_secs(120);

/// Where the replicas keep their checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    /// The Cosmos container `checkpoints` on the local Cosmos endpoint.
    Cosmos,
    /// The blob container `checkpoints` on Azurite.
    Blob,
}

/// The local hub and Cosmos endpoint, Azurite for blob checkpoints, and a directory for logs.
struct Rig {
    hub: Arc<HubSim>,
    sim: CosmosSim,
    azurite: Option<Azurite>,
    dir: tempfile::TempDir,
}

impl Rig {
    /// A hub with `devices` registered devices (`drone-N`) and a 4-range Cosmos endpoint,
    /// with the Cosmos checkpoint store.
    async fn start(devices: usize) -> Rig {
        Rig::with_store(devices, StoreKind::Cosmos).await
    }

    /// Like [`Rig::start`], the replicas keeping their checkpoints in `store`.
    async fn with_store(devices: usize, store: StoreKind) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let mut config = HubConfig::new(dir.path().join("hub"));
        config.devices = devices;
        config.device_prefix = "drone-".into();
        let hub = Arc::new(HubSim::start(config).await.unwrap());
        let sim = CosmosSim::unthrottled().await.unwrap();
        let azurite = (store == StoreKind::Blob).then(|| Azurite::start().unwrap());
        Rig {
            hub,
            sim,
            azurite,
            dir,
        }
    }

    fn replica(&self, name: &str, env: &[(&str, &str)]) -> Replica {
        let connection = self.azurite.as_ref().map(Azurite::connection_string);
        let mut env = env.to_vec();
        if let Some(connection) = &connection {
            env.push(("CHECKPOINT_BLOB_CONNECTION_STRING", connection));
            env.push(("CHECKPOINT_BLOB_CONTAINER", "checkpoints"));
        }
        Replica::start(name, &self.hub, &self.sim, self.dir.path(), &env)
    }

    /// One replica with the [`FAST`] settings, once it reads the 4 partitions.
    async fn sole_writer(&self) -> Replica {
        let writer = self.replica("writer", &FAST);
        eventually(
            "the writer owning the 4 partitions",
            PATIENCE,
            async || writer.counts().await,
            |c| c.owned.len() == 4 && c.connected,
        )
        .await;
        writer
    }

    /// Every partition's events, by partition id.
    fn events(&self) -> HashMap<String, Vec<Arc<Event>>> {
        hub_events(&self.hub)
    }

    /// Events enqueued so far, all partitions.
    fn enqueued(&self) -> u64 {
        self.events().values().map(|e| e.len() as u64).sum()
    }

    /// The sequence number each partition's checkpoint names.
    async fn checkpoints(&self) -> HashMap<String, i64> {
        let key = MasterKey::from_base64(KEY).unwrap();
        let client = CosmosClient::new(CosmosConfig::new(
            self.sim.endpoint().parse().unwrap(),
            Credential::MasterKey(key),
        ))
        .unwrap();
        let store: Box<dyn CheckpointStore> = match &self.azurite {
            None => Box::new(
                CosmosCheckpointStore::open(&client, "telemetry", "checkpoints", false)
                    .await
                    .unwrap(),
            ),
            Some(azurite) => Box::new(
                BlobCheckpointStore::open(&BlobCheckpoints {
                    endpoint: azurite.blob_endpoint().parse().unwrap(),
                    auth: BlobAuth::SharedKey {
                        account: Azurite::ACCOUNT.into(),
                        key: Secret::new(Azurite::KEY),
                    },
                    container: "checkpoints".into(),
                })
                .await
                .unwrap(),
            ),
        };
        let hub = EventHubsConnection::parse(&self.hub.eventhub_connection_string()).unwrap();
        store
            .list_checkpoints(&hub.namespace, &hub.entity_path, "$Default")
            .await
            .unwrap()
            .into_iter()
            .filter_map(|c| Some((c.partition_id, c.sequence_number?)))
            .collect()
    }

    /// Whether every drone's document holds its newest position among `expected`.
    async fn newest_written(&self, expected: &HashMap<String, (i64, u64, f64, f64)>) -> bool {
        let docs =
            latest_documents(&container(&self.sim.endpoint(), "telemetry", "positions")).await;
        newest_written(&docs, expected)
    }

    /// Positions of [`DRONES`] drones, each one every [`EVERY`], routed into the hub until
    /// the returned token is cancelled; the task returns the last seq of every drone.
    fn stream(&self, first_seq: u64) -> (CancellationToken, tokio::task::JoinHandle<u64>) {
        let stop = CancellationToken::new();
        let hub = self.hub.clone();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut ticker = tokio::time::interval(EVERY);
                let mut seq = first_seq - 1;
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return seq,
                        _ = ticker.tick() => {}
                    }
                    seq += 1;
                    route_round(&hub, seq);
                }
            }
        });
        (stop, task)
    }

    async fn shutdown(self) {
        self.sim.shutdown().await;
        if let Ok(hub) = Arc::try_unwrap(self.hub) {
            hub.shutdown().await;
        }
    }
}

/// Position `seq` of every drone, timed now, enqueued as the hub does for a SAS device.
fn route_round(hub: &HubSim, seq: u64) {
    let now = Utc::now();
    for d in 0..DRONES {
        let id = device(d);
        let (lat, lon) = (47.0 + d as f64 * 1e-3, -122.0 + seq as f64 * 1e-5);
        let mut message = Incoming::new(&id, wire(&id, seq, now, lat, lon));
        message.auth = AuthMethod::Sas;
        hub.partitions().route(message);
    }
}

/// Events of `partitions` after each one's checkpoint (all of a partition without one).
fn events_after<'a>(
    events: &HashMap<String, Vec<Arc<Event>>>,
    partitions: impl IntoIterator<Item = &'a String>,
    checkpoints: &HashMap<String, i64>,
) -> u64 {
    partitions
        .into_iter()
        .map(|p| {
            let after = checkpoints.get(p).copied().unwrap_or(-1);
            events[p]
                .iter()
                .filter(|e| e.sequence_number > after)
                .count() as u64
        })
        .sum()
}

/// Replica a reading the 4 partitions, then replica b taking 2 of them; returns both with
/// the partitions each owns, read from their `eventhubs_partition_owned` metrics.
async fn balanced_pair(rig: &Rig, env: &[(&str, &str)]) -> (Replica, Replica, Counts, Counts) {
    let a = rig.replica("writer-a", env);
    eventually(
        "replica a owning the 4 partitions",
        PATIENCE,
        async || a.counts().await,
        |c| c.owned.len() == 4,
    )
    .await;
    let b = rig.replica("writer-b", env);
    let (on_a, on_b) = eventually(
        "replicas a and b owning 2 partitions each",
        PATIENCE,
        async || (a.counts().await, b.counts().await),
        |(a, b)| a.owned.len() == 2 && b.owned.len() == 2 && a.owned.is_disjoint(&b.owned),
    )
    .await;
    (a, b, on_a, on_b)
}

/// Waits until `replica` has a final outcome for at least `reads` events, nothing pending,
/// and every drone at its newest position in `expected`.
async fn settled(
    rig: &Rig,
    replica: &Replica,
    reads: u64,
    expected: &HashMap<String, (i64, u64, f64, f64)>,
) -> Counts {
    eventually(
        "every event read, with a final outcome, every drone at its newest position",
        PATIENCE,
        async || {
            let counts = replica.counts().await;
            let newest = rig.newest_written(expected).await;
            (counts, newest)
        },
        |(c, newest)| *newest && c.received >= reads && c.settled() == c.received,
    )
    .await
    .0
}

/// Which replica takes over a stopped one's partitions, and how fast.
enum Stop {
    Kill,
    Term,
}

/// Two balanced replicas under a stream; a is stopped mid-stream; b takes its partitions,
/// and reads exactly the events after a's checkpoints: nothing lost, no document backwards.
/// Returns how long the move took.
async fn replica_stops_mid_stream(how: Stop, env: &[(&str, &str)], store: StoreKind) -> Duration {
    let rig = Rig::with_store(0, store).await;
    let (mut a, b, on_a, on_b) = balanced_pair(&rig, env).await;
    let (stop_stream, stream) = rig.stream(1);
    let (stop_watch, watch) = watch_documents(rig.sim.endpoint());
    let before = eventually(
        "both replicas writing",
        PATIENCE,
        async || (a.counts().await, b.counts().await),
        |(a, b)| a.written >= 200 && b.written >= 200,
    )
    .await;
    let stopped = Instant::now();
    match how {
        Stop::Kill => a.kill(),
        Stop::Term => {
            a.stop(PATIENCE).await;
        }
    }
    let exited = stopped.elapsed();
    // a writes nothing more: its checkpoints are where b starts reading its partitions.
    let checkpoints = rig.checkpoints().await;
    eventually(
        "replica b owning the 4 partitions",
        PATIENCE,
        async || b.counts().await,
        |c| c.owned.len() == 4,
    )
    .await;
    let moved = stopped.elapsed();
    eprintln!(
        "partitions {:?} moved from replica a to b {:.2} s after a was {} ({:.2} s to exit); settings {env:?}",
        on_a.owned,
        moved.as_secs_f64(),
        match how {
            Stop::Kill => "killed (SIGKILL)",
            Stop::Term => "stopped (SIGTERM)",
        },
        exited.as_secs_f64()
    );
    // The stream goes on through b alone: 1,000 more positions.
    let at_move = rig.enqueued();
    eventually(
        "1,000 more positions after the move",
        PATIENCE,
        async || rig.enqueued(),
        |n| *n >= at_move + 1_000,
    )
    .await;
    stop_stream.cancel();
    stream.await.unwrap();

    let (expected, accepted) = newest_accepted(&rig.hub);
    assert_eq!(expected.len(), DRONES);
    let events = rig.events();
    let on_b_reads = events_after(&events, &on_b.owned, &HashMap::new());
    let after_checkpoints = events_after(&events, &on_a.owned, &checkpoints);
    let counts = settled(&rig, &b, on_b_reads + after_checkpoints, &expected).await;
    stop_watch.cancel();
    let (reads, backwards) = watch.await.unwrap();
    eprintln!(
        "hub accepted {accepted}; replica a had settled {} when stopped (its checkpoints cover {} events); replica b {counts:?}; documents read {reads} times",
        before.0.settled(),
        accepted - on_b_reads - after_checkpoints
    );
    // b read its own partitions whole and a's from a's checkpoints on, each event once.
    assert_eq!(
        counts.received,
        on_b_reads + after_checkpoints,
        "{counts:?}"
    );
    assert!(
        backwards.is_empty(),
        "documents went backwards: {backwards:?}"
    );
    assert!(reads >= 10, "the documents were read {reads} times only");
    let mut b = b;
    b.stop(PATIENCE).await;
    rig.shutdown().await;
    moved
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_partitions_move_and_nothing_is_lost() {
    replica_stops_mid_stream(Stop::Kill, &FAST, StoreKind::Cosmos).await;
}

/// The same with the checkpoints and ownerships in Blob Storage (Azurite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_blob_checkpoints_a_killed_replicas_partitions_move_and_nothing_is_lost() {
    replica_stops_mid_stream(Stop::Kill, &FAST, StoreKind::Blob).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_gives_its_partitions_up_before_they_expire() {
    gives_up_before_expiry(StoreKind::Cosmos).await;
}

/// The same with the ownerships in Blob Storage (Azurite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_blob_checkpoints_a_stopped_replica_gives_its_partitions_up_before_they_expire() {
    gives_up_before_expiry(StoreKind::Blob).await;
}

/// A replica stopped with SIGTERM mid-stream: its partitions move within the ownership
/// expiry, which only its release can do.
async fn gives_up_before_expiry(store: StoreKind) {
    // A long expiry, so that a move within it can only be the release.
    let expiry = Duration::from_secs(20);
    let env = [
        ("EVENTHUBS_LOAD_BALANCING_INTERVAL", "1s"),
        ("EVENTHUBS_OWNERSHIP_EXPIRY", "20s"),
        ("EVENTHUBS_CHECKPOINT_INTERVAL", "1s"),
    ];
    let moved = replica_stops_mid_stream(Stop::Term, &env, store).await;
    assert!(
        moved < expiry,
        "the partitions moved after {moved:?}, not before the ownership expiry ({expiry:?})"
    );
}

/// A writer writes a stream and is stopped (`how`) once it has received every event (and,
/// before SIGTERM, given each a final outcome); a new writer starts on the same consumer
/// group and reads exactly the events after the first one's checkpoints, all of which the
/// first had received: its replays. Returns them, and how many events the first writer
/// received in the last `window` before the stop (sampled from its metrics).
async fn restart(how: Stop, env: &[(&str, &str)], window: Duration) -> (u64, u64) {
    let rig = Rig::start(0).await;
    let mut first = rig.replica("writer-1", env);
    eventually(
        "the first writer owning the 4 partitions",
        PATIENCE,
        async || first.counts().await,
        |c| c.owned.len() == 4,
    )
    .await;
    let (stop_stream, stream) = rig.stream(1);
    // The first writer's received count over time.
    let mut received: Vec<(Instant, u64)> = Vec::new();
    eventually(
        "the first writer writing 4,000 positions (10 s of the stream)",
        PATIENCE,
        async || {
            let counts = first.counts().await;
            received.push((Instant::now(), counts.received));
            counts
        },
        |c| c.written >= 4_000,
    )
    .await;
    stop_stream.cancel();
    let last_seq = stream.await.unwrap();
    let enqueued = rig.enqueued();
    eventually(
        "the first writer having received every event (and, before SIGTERM, settled them)",
        PATIENCE,
        async || {
            let counts = first.counts().await;
            received.push((Instant::now(), counts.received));
            counts
        },
        |c| c.received == enqueued && (matches!(how, Stop::Kill) || c.settled() == enqueued),
    )
    .await;
    let stopped = Instant::now();
    match how {
        Stop::Kill => first.kill(),
        Stop::Term => first.stop(PATIENCE).await,
    }
    let before_window = received
        .iter()
        .rev()
        .find(|(at, _)| *at + window <= stopped)
        .map_or(0, |(_, n)| *n);
    let recent = enqueued - before_window;
    let checkpoints = rig.checkpoints().await;
    let events = rig.events();
    let partitions: BTreeSet<String> = events.keys().cloned().collect();
    let replays = events_after(&events, &partitions, &checkpoints);

    // The second writer, and one more round of new positions.
    let second = rig.replica("writer-2", env);
    route_round(&rig.hub, last_seq + 1);
    let (expected, accepted) = newest_accepted(&rig.hub);
    let counts = settled(&rig, &second, replays + DRONES as u64, &expected).await;
    let read_again = counts.received - DRONES as u64;
    eprintln!(
        "hub accepted {accepted}; after {} the second writer read {} events: {read_again} again (the first writer received {recent} in the last {window:?} before the stop), {DRONES} new",
        match how {
            Stop::Kill => "SIGKILL",
            Stop::Term => "SIGTERM",
        },
        counts.received
    );
    assert_eq!(read_again, replays, "{counts:?}");
    let mut second = second;
    second.stop(PATIENCE).await;
    rig.shutdown().await;
    (read_again, recent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_graceful_stop_nothing_is_read_again() {
    // Checkpoints at an hour: only the stop's last checkpoint can spare the replays.
    let env = [
        ("EVENTHUBS_LOAD_BALANCING_INTERVAL", "1s"),
        ("EVENTHUBS_OWNERSHIP_EXPIRY", "4s"),
        ("EVENTHUBS_CHECKPOINT_INTERVAL", "1h"),
    ];
    let (read_again, _) = restart(Stop::Term, &env, CHECKPOINT_INTERVAL).await;
    assert_eq!(read_again, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_at_most_the_last_checkpoint_interval_is_read_again() {
    // What the first writer received in the last checkpoint interval, and 1 s more for
    // those events' outcomes and the checkpoint's write on busy cores.
    let window = CHECKPOINT_INTERVAL + Duration::from_secs(1);
    let (read_again, recent) = restart(Stop::Kill, &FAST, window).await;
    assert!(
        read_again <= recent,
        "{read_again} events read again, more than the {recent} received in the last {window:?}"
    );
}

/// Agents publishing through the hub (SAS over TLS) into one writer: the hub's AMQP side
/// stops and every device connection drops at once, mid-stream; the agents connect again
/// and go on publishing while the writer cannot read; the AMQP side starts again and the
/// writer resumes by itself. Every drone's every seq reached the hub, and every drone ends
/// at its newest position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_and_the_agents_recover_from_a_hub_restart() {
    const AGENTS: usize = 20;
    let rig = Rig::start(AGENTS).await;
    let hub = &rig.hub;
    let state = hub.config().state_dir.clone();
    let ca = state.join("ca.pem");
    let writer = rig.sole_writer().await;

    let stop = CancellationToken::new();
    let interval: settings::DurationSetting = "200ms".parse().unwrap();
    let mut agents = Vec::new();
    let connection_strings = std::fs::read_to_string(state.join("devices.txt")).unwrap();
    for (i, cs) in connection_strings.lines().enumerate() {
        let settings = edge_agent::Settings {
            connection_string: Some(edge_agent::Secret::new(cs)),
            iothub_ca_file: Some(ca.clone()),
            iothub_port: Some(hub.mqtt_addr().port()),
            position_source: Some("sim".into()),
            sim_seed: Some(i as u64),
            report_interval: Some(interval),
            buffer_dir: Some(rig.dir.path().join(format!("agent-{i}"))),
            buffer_fsync: Some(false),
            ..edge_agent::Settings::default()
        };
        let agent = Agent::new(settings.resolve().unwrap()).unwrap();
        agents.push(tokio::spawn(agent.run(stop.clone())));
    }
    assert_eq!(agents.len(), AGENTS);
    eventually(
        "the agents' positions written",
        PATIENCE,
        async || writer.counts().await,
        |c| c.written >= 200,
    )
    .await;

    // The fault: no Event Hubs endpoint, no device connection.
    hub.stop_amqp();
    hub.drop_device_connections();
    let at_fault = hub.stats().messages_accepted;
    eventually(
        "the writer seeing the hub out of reach",
        PATIENCE,
        async || writer.counts().await,
        |c| !c.connected,
    )
    .await;
    eventually(
        "the agents connected again and publishing while the writer cannot read",
        PATIENCE,
        async || (hub.connected_devices(), hub.stats().messages_accepted),
        |(connected, accepted)| *connected == AGENTS && *accepted >= at_fault + 200,
    )
    .await;
    assert_eq!(
        hub.stats().connections_refused.get("dropped_by_fault"),
        Some(&(AGENTS as u64)),
        "{:?}",
        hub.stats()
    );
    hub.restart_amqp().await.unwrap();
    let restarted = Instant::now();
    let at_restart = hub.stats().messages_accepted;
    eventually(
        "the writer reading again past the restart",
        PATIENCE,
        async || writer.counts().await,
        |c| c.connected && c.received >= at_restart,
    )
    .await;
    eprintln!(
        "the writer read again past the restart {:.1} s after it",
        restarted.elapsed().as_secs_f64()
    );
    stop.cancel();
    for agent in agents {
        agent.await.unwrap().unwrap();
    }

    // Every seq each drone sent reached the hub (at least once), none missing.
    let mut seqs: HashMap<String, BTreeSet<u64>> = HashMap::new();
    for event in rig.events().values().flatten() {
        let body: serde_json::Value = serde_json::from_slice(&event.message.body).unwrap();
        seqs.entry(event.message.device_id.to_string())
            .or_default()
            .insert(body["seq"].as_u64().unwrap());
    }
    assert_eq!(seqs.len(), AGENTS);
    for (drone, seqs) in &seqs {
        let (first, last) = (*seqs.first().unwrap(), *seqs.last().unwrap());
        assert!(first <= 1, "{drone} starts at seq {first}");
        assert_eq!(
            seqs.len() as u64,
            last - first + 1,
            "{drone}: a seq between {first} and {last} is missing"
        );
    }
    let (expected, accepted) = newest_accepted(hub);
    let counts = settled(&rig, &writer, accepted, &expected).await;
    eprintln!(
        "hub accepted {accepted} ({} while the AMQP side was down); the writer {counts:?}: {} read again",
        at_restart - at_fault,
        counts.received - accepted
    );
    let mut writer = writer;
    writer.stop(PATIENCE).await;
    rig.shutdown().await;
}

/// A writer reading the 4 partitions under a stream; the hub stalls its receivers (they
/// stay attached and deliver nothing, as one writer's did for minutes after another's
/// AMQP session dropped). The writer sees its readers wait for events the hub holds,
/// counts the stall and reads on through a new connection: every event read exactly once,
/// every drone at its newest position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_receivers_are_replaced_through_a_new_connection() {
    let rig = Rig::start(0).await;
    let writer = rig.sole_writer().await;
    let (stop_stream, stream) = rig.stream(1);
    eventually(
        "positions written",
        PATIENCE,
        async || writer.counts().await,
        |c| c.written >= 200,
    )
    .await;
    rig.hub.stall_receivers();
    let stalled = Instant::now();
    let at_stall = rig.enqueued();
    let counts = eventually(
        "the writer reading past the stall",
        PATIENCE,
        async || writer.counts().await,
        |c| c.received > at_stall,
    )
    .await;
    eprintln!(
        "the writer read past the stall {:.1} s after it; session breaks {:?}",
        stalled.elapsed().as_secs_f64(),
        counts.session_breaks
    );
    assert_eq!(
        counts.session_breaks.get("receivers_stalled"),
        Some(&1),
        "{counts:?}"
    );
    stop_stream.cancel();
    stream.await.unwrap();
    let (expected, accepted) = newest_accepted(&rig.hub);
    let counts = settled(&rig, &writer, accepted, &expected).await;
    assert_eq!(
        (counts.received, counts.read_again),
        (accepted, 0),
        "every event read once: {counts:?}"
    );
    let mut writer = writer;
    writer.stop(PATIENCE).await;
    rig.shutdown().await;
}
