//! The demo's scenarios: which field lesson a run shows, what it claims, and how its
//! writer writes (bulk, or one operation at a time).

use serde::Serialize;

use super::DemoConfig;

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
    /// Bulk writing; mid-run one of the two writer replicas is killed (on the hub only).
    ReplicaKilled,
}

impl Scenario {
    /// The scenario's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Bulk => "bulk",
            Scenario::Serial => "serial",
            Scenario::HotPartition => "hot-partition",
            Scenario::ReplicaKilled => "replica-killed",
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
            Scenario::ReplicaKilled => {
                "a writer replica killed mid-run: its partitions move to the other after the ownership expiry, and nothing is lost"
            }
        }
    }
}

/// The serial writer: the bulk writer held to one operation per request and one
/// operation inside it at a time, so every position waits for the previous one's round
/// trip (what a function upserting each message in turn does).
pub(super) fn serial_bulk_config() -> cosmos::BulkConfig {
    cosmos::BulkConfig {
        max_operations: 1,
        max_concurrency_per_range: 1,
        initial_concurrency: 1,
        queue_capacity: 1,
        ..cosmos::BulkConfig::default()
    }
}

/// How the scenario's writer writes.
pub(super) fn write_mode(config: &DemoConfig) -> &'static str {
    if config.forced() {
        return "bulk, forced past the guard: every document under the undefined partition key [{}]";
    }
    match config.scenario {
        Scenario::Bulk | Scenario::HotPartition | Scenario::ReplicaKilled => {
            "bulk (batches per partition key range)"
        }
        Scenario::Serial => "serial (one operation per request, one request at a time)",
    }
}
