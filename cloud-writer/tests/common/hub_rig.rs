//! The local hub with its Event Hubs endpoint, the local Cosmos endpoint and, where a
//! test asks, Azurite, for tests that run `cloud-writer` replicas on the hub's 4 partitions
//! with short balancing settings ([`FAST`]), under a stream of [`DRONES`] drones.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use test_harness::eventually;

use azure_messaging_eventhubs::CheckpointStore;
use cloud_writer::Secret;
use cloud_writer::internals::{
    BlobAuth, BlobCheckpointStore, BlobCheckpoints, CosmosCheckpointStore, EventHubsConnection,
};
use cosmos::{CosmosClient, CosmosConfig, Credential, MasterKey};
use cosmos_sim::CosmosSim;
use hub_sim::{Event, HubConfig, HubSim};
use test_harness::Azurite;
use tokio_util::sync::CancellationToken;

use super::replica::{Counts, Replica, hub_events, route_round};
use super::{KEY, container, latest_documents, newest_written};

/// Balancing every second, ownerships expiring after 4 s, checkpoints every second.
pub const FAST: [(&str, &str); 3] = [
    ("EVENTHUBS_LOAD_BALANCING_INTERVAL", "1s"),
    ("EVENTHUBS_OWNERSHIP_EXPIRY", "4s"),
    ("EVENTHUBS_CHECKPOINT_INTERVAL", "1s"),
];
/// The checkpoint interval of [`FAST`].
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Drones of the routed streams, and how often each reports.
pub const DRONES: usize = 100;
pub const EVERY: Duration = Duration::from_millis(250);
/// Generous bound for anything the test waits for.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Where the replicas keep their checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// The Cosmos container `checkpoints` on the local Cosmos endpoint.
    Cosmos,
    /// The blob container `checkpoints` on Azurite.
    Blob,
}

/// The local hub and Cosmos endpoint, Azurite for blob checkpoints, and a directory for logs.
pub struct Rig {
    pub hub: Arc<HubSim>,
    pub sim: CosmosSim,
    pub azurite: Option<Azurite>,
    pub dir: tempfile::TempDir,
}

impl Rig {
    /// A hub with `devices` registered devices (`drone-N`) and a 4-range Cosmos endpoint,
    /// with the Cosmos checkpoint store.
    pub async fn start(devices: usize) -> Rig {
        Rig::with_store(devices, StoreKind::Cosmos).await
    }

    /// Like [`Rig::start`], the replicas keeping their checkpoints in `store`.
    pub async fn with_store(devices: usize, store: StoreKind) -> Rig {
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

    pub fn replica(&self, name: &str, env: &[(&str, &str)]) -> Replica {
        let connection = self.azurite.as_ref().map(Azurite::connection_string);
        let mut env = env.to_vec();
        if let Some(connection) = &connection {
            env.push(("CHECKPOINT_BLOB_CONNECTION_STRING", connection));
            env.push(("CHECKPOINT_BLOB_CONTAINER", "checkpoints"));
        }
        Replica::start(name, &self.hub, &self.sim, self.dir.path(), &env)
    }

    /// One replica with the [`FAST`] settings, once it reads the 4 partitions.
    pub async fn sole_writer(&self) -> Replica {
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
    pub fn events(&self) -> HashMap<String, Vec<Arc<Event>>> {
        hub_events(&self.hub)
    }

    /// Events enqueued so far, all partitions.
    pub fn enqueued(&self) -> u64 {
        self.events().values().map(|e| e.len() as u64).sum()
    }

    /// The sequence number each partition's checkpoint names.
    pub async fn checkpoints(&self) -> HashMap<String, i64> {
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
    pub async fn newest_written(&self, expected: &HashMap<String, (i64, u64, f64, f64)>) -> bool {
        let docs =
            latest_documents(&container(&self.sim.endpoint(), "telemetry", "positions")).await;
        newest_written(&docs, expected)
    }

    /// Positions of [`DRONES`] drones, each one every [`EVERY`], routed into the hub until
    /// the returned token is cancelled; the task returns the last seq of every drone.
    pub fn stream(&self, first_seq: u64) -> (CancellationToken, tokio::task::JoinHandle<u64>) {
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
                    route_round(&hub, DRONES, seq);
                }
            }
        });
        (stop, task)
    }

    pub async fn shutdown(self) {
        self.sim.shutdown().await;
        if let Ok(hub) = Arc::try_unwrap(self.hub) {
            hub.shutdown().await;
        }
    }
}

/// Events of `partitions` after each one's checkpoint (all of a partition without one).
pub fn events_after<'a>(
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

/// Waits until `replica` has a final outcome for at least `reads` events, nothing pending,
/// and every drone at its newest position in `expected`.
pub async fn settled(
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
