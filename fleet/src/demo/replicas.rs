//! The demo's cloud writer replicas: one on the MQTT path, two on the hub's Event Hubs
//! endpoint sharing its partitions through the checkpoint store on the local Cosmos
//! endpoint (each its own owner id, as two processes are).
//!
//! Each replica is a `cloud_writer::Writer` on a tokio runtime of its own, so that a
//! replica can be killed in-process as a process kill would: the runtime is dropped with
//! every task of the writer (source, processor, readers, pipeline, sink) mid-flight, its
//! connections close, nothing is drained, checkpointed or released, and its ownerships
//! stay in the checkpoint store until they expire. (The cloud-writer integration tests
//! kill a real `cloud-writer` process with SIGKILL; this is the same thing without a
//! second binary.) Owns starting, stopping and killing them, and reading their metrics:
//! counts, which partitions each owns, every partition's lag.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cloud_writer::Snapshot;
use cloud_writer::{Counts, Metrics, Writer, WriterConfig};
use cosmos::BulkConfig;
use cosmos_sim::CosmosSim;
use std::sync::Arc;
use tokio::runtime::Runtime;

use super::scenario::{Scenario, serial_bulk_config};
use super::transport::{HUB_PARTITIONS, Transport};
use super::writer::config_for;
use super::{DemoConfig, DemoError};
use crate::view::{ReplicaState, ReplicaView};

/// A writer replica on its own runtime.
pub(super) struct Replica {
    name: String,
    runtime: Option<Runtime>,
    writer: Option<Writer>,
    metrics: Arc<Metrics>,
    state: ReplicaState,
}

impl Replica {
    /// Starts a writer named `name` on a runtime of one worker thread.
    pub(super) async fn start(
        name: &str,
        config: WriterConfig,
        bulk: BulkConfig,
    ) -> Result<Replica, DemoError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .enable_all()
            .build()?;
        let started = runtime.spawn(Writer::start_with_bulk(config, bulk)).await;
        let writer = match started {
            Ok(Ok(writer)) => writer,
            failed => {
                // A runtime cannot be dropped inside another one's task.
                runtime.shutdown_background();
                return Err(match failed {
                    Ok(Err(refused)) => DemoError::WriterStart(refused),
                    _ => DemoError::Config("the writer's start panicked".to_owned()),
                });
            }
        };
        Ok(Replica {
            name: name.to_owned(),
            runtime: Some(runtime),
            metrics: writer.metrics().clone(),
            writer: Some(writer),
            state: ReplicaState::Running,
        })
    }

    /// Its metrics, read back (after a kill, what it had done by then).
    pub(super) fn snapshot(&self) -> Snapshot {
        self.metrics.snapshot()
    }

    /// Its counts (after a kill, what it had done by then).
    pub(super) fn counts(&self) -> Counts {
        self.metrics.counts()
    }

    /// The partitions it reads now.
    pub(super) fn owned(&self) -> BTreeSet<String> {
        if self.state != ReplicaState::Running {
            return BTreeSet::new();
        }
        self.snapshot().owned_partitions().into_iter().collect()
    }

    /// As the view shows it.
    pub(super) fn view(&self) -> ReplicaView {
        ReplicaView {
            name: self.name.clone(),
            state: self.state,
            owned: self.owned().into_iter().collect(),
        }
    }

    /// Its name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Whether it still runs.
    pub(super) fn running(&self) -> bool {
        self.state == ReplicaState::Running
    }

    /// Kills it: the runtime and every task on it are dropped at once.
    pub(super) fn kill(&mut self) {
        self.writer = None;
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        self.state = ReplicaState::Killed;
    }

    /// Stops it in order: drains, checkpoints, releases its partitions.
    pub(super) async fn stop(&mut self) -> Result<(), DemoError> {
        let result = match self.writer.take() {
            Some(writer) => {
                writer.shutdown();
                writer.wait().await.map(|_| ())
            }
            None => Ok(()),
        };
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        if self.state == ReplicaState::Running {
            self.state = ReplicaState::Stopped;
        }
        result.map_err(DemoError::from)
    }
}

impl Drop for Replica {
    /// A runtime cannot be dropped inside another one's task: let it go in the background.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The replicas of a run.
#[derive(Default)]
pub(super) struct Replicas {
    list: Vec<Replica>,
}

impl Replicas {
    /// Adds a started replica.
    pub(super) fn push(&mut self, replica: Replica) {
        self.list.push(replica);
    }

    /// Replica `index`.
    pub(super) fn get(&self, index: usize) -> Option<&Replica> {
        self.list.get(index)
    }

    /// Every replica.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Replica> {
        self.list.iter()
    }

    /// Every replica's metrics added up: counts and lateness buckets.
    pub(super) fn snapshot(&self) -> Snapshot {
        let each: Vec<Snapshot> = self.list.iter().map(Replica::snapshot).collect();
        Snapshot::sum(&each)
    }

    /// The counts of all replicas, added up.
    pub(super) fn counts(&self) -> Counts {
        self.snapshot().counts
    }

    /// Which replica owns which partition.
    pub(super) fn views(&self) -> Vec<ReplicaView> {
        self.list.iter().map(Replica::view).collect()
    }

    /// Every partition's lag in events, as the running replicas report it (the largest).
    pub(super) fn lag(&self) -> BTreeMap<String, i64> {
        let mut lag = BTreeMap::new();
        for replica in self.list.iter().filter(|r| r.running()) {
            for (partition, events) in replica.snapshot().lag_events {
                let entry = lag.entry(partition).or_insert(i64::MIN);
                *entry = (*entry).max(events);
            }
        }
        lag
    }

    /// Whether the running replicas own `partitions` partitions between them, each once.
    pub(super) fn cover(&self, partitions: usize) -> bool {
        let mut all = BTreeSet::new();
        let mut owned = 0;
        for replica in self.list.iter().filter(|r| r.running()) {
            let mine = replica.owned();
            owned += mine.len();
            all.extend(mine);
        }
        all.len() == partitions && owned == partitions
    }

    /// Kills replica `index` (see [`Replica::kill`]).
    pub(super) fn kill(&mut self, index: usize) {
        if let Some(replica) = self.list.get_mut(index) {
            replica.kill();
        }
    }

    /// Whether every running replica has an outcome for everything it received.
    pub(super) fn drained(&self) -> bool {
        self.list.iter().filter(|r| r.running()).all(|r| {
            let counts = r.counts();
            counts.finished() >= counts.positions
        })
    }

    /// Stops every replica still running, in order; the first failure is returned.
    pub(super) async fn stop(&mut self) -> Result<(), DemoError> {
        for replica in &self.list {
            if let Some(writer) = &replica.writer {
                writer.shutdown();
            }
        }
        let mut result = Ok(());
        for replica in &mut self.list {
            let stopped = replica.stop().await;
            if result.is_ok() {
                result = stopped;
            }
        }
        result
    }
}

/// Waits until the replicas read every partition between them, `share` each. (A replica
/// whose AMQP session cannot attach receivers rebuilds it by itself: the Event Hubs source
/// takes a partition lost twice before any event as a broken session.)
async fn balance(replicas: &Replicas, share: usize) -> Result<(), DemoError> {
    let balanced = poll_until(Duration::from_secs(60), || {
        replicas.cover(HUB_PARTITIONS) && replicas.iter().all(|r| r.owned().len() == share)
    })
    .await;
    if balanced {
        return Ok(());
    }
    Err(DemoError::Config(format!(
        "the writer replicas did not share the hub's {HUB_PARTITIONS} partitions ({share} each) within 60 s: {:?}",
        replicas.views()
    )))
}

/// Polls `condition` every 50 ms until it holds; false after `timeout`.
pub(super) async fn poll_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut poll = tokio::time::interval(Duration::from_millis(50));
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        poll.tick().await;
    }
}

/// Starts the writers of the topology: on the MQTT path one, subscribed; on the hub two,
/// `writer-a` first (it claims every partition) and then `writer-b`, returning once each
/// reads its share, so that no partition moves while the fleet flies.
pub(super) async fn start_replicas(
    config: &DemoConfig,
    transport: &Transport,
    sim: &CosmosSim,
) -> Result<Replicas, DemoError> {
    let writer_config = config_for(config, &transport.writer_source(), sim);
    let bulk = match config.scenario {
        Scenario::Serial => serial_bulk_config(),
        Scenario::Bulk | Scenario::HotPartition | Scenario::ReplicaKilled => {
            cloud_writer::internals::bulk_config(writer_config.max_in_flight)
        }
    };
    let mut replicas = Replicas::default();
    if transport.broker().is_some() {
        let writer = Replica::start("writer", writer_config, bulk).await?;
        let subscribed = poll_until(Duration::from_secs(10), || {
            writer.snapshot().source_connected
        })
        .await;
        if !subscribed {
            return Err(DemoError::Config(
                "the cloud writer did not subscribe to the broker within 10 s".to_owned(),
            ));
        }
        replicas.push(writer);
        return Ok(replicas);
    }
    replicas.push(Replica::start("writer-a", writer_config.clone(), bulk.clone()).await?);
    balance(&replicas, HUB_PARTITIONS).await?;
    replicas.push(Replica::start("writer-b", writer_config.clone(), bulk.clone()).await?);
    balance(&replicas, HUB_PARTITIONS / 2).await?;
    Ok(replicas)
}
