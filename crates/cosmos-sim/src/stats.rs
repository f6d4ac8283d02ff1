//! What the endpoint has served: requests, operations by kind, throttling (and how much of it
//! fell on low-priority requests), and the partition heat map (RU consumed per physical
//! partition per second).

use crate::store::Store;
use cosmos_wire::epk::u128_to_boundary;
use cosmos_wire::priority::Priority;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Account-wide counters.
#[derive(Debug, Default)]
pub struct Counters {
    requests: AtomicU64,
    throttled_requests: AtomicU64,
    low_priority_requests: AtomicU64,
    throttled_low_priority_requests: AtomicU64,
    operations: Mutex<BTreeMap<&'static str, u64>>,
}

impl Counters {
    /// Counts one HTTP request.
    pub fn request(&self, priority: Priority) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if priority == Priority::Low {
            self.low_priority_requests.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one request answered 429 as a whole.
    pub fn throttled_request(&self, priority: Priority) {
        self.throttled_requests.fetch_add(1, Ordering::Relaxed);
        if priority == Priority::Low {
            self.throttled_low_priority_requests
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts `n` operations of a kind (`create`, `upsert`, `read`, `query`, ...).
    pub fn operations(&self, kind: &'static str, n: u64) {
        *self.operations.lock().entry(kind).or_default() += n;
    }
}

/// A snapshot of everything served.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// HTTP requests received (admin requests excluded).
    pub requests: u64,
    /// Requests answered 429 as a whole.
    pub throttled_requests: u64,
    /// Of the requests, those marked low priority (`x-ms-cosmos-priority-level: Low`); the
    /// others are high priority.
    pub low_priority_requests: u64,
    /// Of the requests answered 429, those marked low priority.
    pub throttled_low_priority_requests: u64,
    /// Operations served by kind (a batch counts each of its operations).
    pub operations: BTreeMap<String, u64>,
    /// Operations answered 429, per operation (inside batches too), all containers.
    pub throttled_operations: u64,
    /// Of those, low-priority operations.
    pub throttled_low_priority_operations: u64,
    /// Per container.
    pub containers: Vec<ContainerStats>,
}

/// One container's partitions.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// Database name.
    pub database: String,
    /// Container name.
    pub container: String,
    /// Provisioned RU/s.
    pub ru_per_sec: f64,
    /// Live ranges first (ordered by EPK), then the ones split away.
    pub partitions: Vec<PartitionStats>,
}

/// One physical partition.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionStats {
    /// Range id.
    pub id: String,
    /// Lowest EPK.
    pub min_inclusive: String,
    /// EPK past the range.
    pub max_exclusive: String,
    /// False once split away.
    pub live: bool,
    /// Its share of the provisioned RU/s.
    pub ru_budget_per_sec: f64,
    /// Documents stored.
    pub documents: usize,
    /// RU charged in total.
    pub ru_total: f64,
    /// Of which, by the `kind` member of the document operated on (`""`: none, or a query).
    pub ru_by_kind: BTreeMap<String, f64>,
    /// Operations served.
    pub operations: u64,
    /// Operations answered 429.
    pub throttled: u64,
    /// Of those, low-priority operations.
    pub throttled_low_priority: u64,
    /// The heat map row: `[unix second, RU]`, oldest first (last 300 seconds with activity).
    pub ru_per_second: Vec<(u64, f64)>,
}

impl Stats {
    /// Collects a snapshot.
    pub fn collect(store: &Store, counters: &Counters) -> Self {
        let mut containers = Vec::new();
        for (db_name, db) in store.databases.read().iter() {
            for (name, c) in db.containers.read().iter() {
                let ranges = c.ranges.read();
                let partitions = ranges
                    .live
                    .iter()
                    .map(|r| (r, true))
                    .chain(ranges.gone.iter().map(|r| (r, false)))
                    .map(|(r, live)| {
                        let p = r.part.lock();
                        PartitionStats {
                            id: r.id.clone(),
                            min_inclusive: u128_to_boundary(r.min),
                            max_exclusive: u128_to_boundary(r.max),
                            live,
                            ru_budget_per_sec: p.bucket.rate(),
                            documents: p.document_count(),
                            ru_total: p.counters.ru_total,
                            ru_by_kind: p.counters.ru_by_kind.clone(),
                            operations: p.counters.operations,
                            throttled: p.counters.throttled,
                            throttled_low_priority: p.counters.throttled_low_priority,
                            ru_per_second: p.counters.history.iter().copied().collect(),
                        }
                    })
                    .collect();
                containers.push(ContainerStats {
                    database: db_name.clone(),
                    container: name.clone(),
                    ru_per_sec: c.ru_per_sec(),
                    partitions,
                });
            }
        }
        Self {
            requests: counters.requests.load(Ordering::Relaxed),
            throttled_requests: counters.throttled_requests.load(Ordering::Relaxed),
            low_priority_requests: counters.low_priority_requests.load(Ordering::Relaxed),
            throttled_low_priority_requests: counters
                .throttled_low_priority_requests
                .load(Ordering::Relaxed),
            operations: counters
                .operations
                .lock()
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            throttled_operations: containers
                .iter()
                .flat_map(|c: &ContainerStats| c.partitions.iter())
                .map(|p| p.throttled)
                .sum(),
            throttled_low_priority_operations: containers
                .iter()
                .flat_map(|c: &ContainerStats| c.partitions.iter())
                .map(|p| p.throttled_low_priority)
                .sum(),
            containers,
        }
    }

    /// The partitions of one container.
    pub fn container(&self, database: &str, container: &str) -> Option<&ContainerStats> {
        self.containers
            .iter()
            .find(|c| c.database == database && c.container == container)
    }

    /// Prometheus text exposition of the counters.
    pub fn to_prometheus(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "# TYPE cosmos_sim_requests_total counter");
        let _ = writeln!(s, "cosmos_sim_requests_total {}", self.requests);
        let _ = writeln!(s, "# TYPE cosmos_sim_operations_total counter");
        for (kind, n) in &self.operations {
            let _ = writeln!(s, "cosmos_sim_operations_total{{kind=\"{kind}\"}} {n}");
        }
        let _ = writeln!(s, "# TYPE cosmos_sim_partition_ru_total counter");
        let _ = writeln!(s, "# TYPE cosmos_sim_partition_throttled_total counter");
        let _ = writeln!(
            s,
            "# TYPE cosmos_sim_partition_throttled_low_priority_total counter"
        );
        for c in &self.containers {
            for p in &c.partitions {
                let labels = format!(
                    "database=\"{}\",container=\"{}\",range=\"{}\"",
                    c.database, c.container, p.id
                );
                let _ = writeln!(
                    s,
                    "cosmos_sim_partition_ru_total{{{labels}}} {}",
                    p.ru_total
                );
                let _ = writeln!(
                    s,
                    "cosmos_sim_partition_throttled_total{{{labels}}} {}",
                    p.throttled
                );
                let _ = writeln!(
                    s,
                    "cosmos_sim_partition_throttled_low_priority_total{{{labels}}} {}",
                    p.throttled_low_priority
                );
            }
        }
        s
    }
}
