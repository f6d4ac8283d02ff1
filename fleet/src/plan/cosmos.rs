//! Cosmos DB: the throughput to provision, the physical partitions it and the storage imply,
//! and where a container needs a support request.

use serde::Serialize;

use super::history::HistoryPlan;
use super::limits::Limits;

/// Throughput is provisioned in steps of 100 RU/s, at least 400 RU/s for a container
/// ("Azure Cosmos DB service quotas", minimum throughput).
pub const RU_STEP: f64 = 100.0;
const RU_MIN: f64 = 400.0;

/// Cosmos DB.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CosmosPlan {
    /// Request units per second to provision (in each region).
    pub ru_per_sec: f64,
    /// Of which the writes spend at the steady load.
    pub write_ru_per_sec: f64,
    /// Storage, GB (in each region).
    pub storage_gb: f64,
    /// Physical partitions the throughput and the storage imply.
    pub physical_partitions: u64,
    /// Which of the two sets them.
    pub partitions_by: PartitionsBy,
    /// The throughput is past the container's quota: a support request must raise it.
    pub needs_support_request: bool,
    /// The history's share, when kept.
    pub history: Option<HistoryPlan>,
}

/// What sets the physical partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionsBy {
    /// The provisioned RU/s.
    Throughput,
    /// The storage.
    Storage,
}

/// The container for `needed` RU/s (the writes, `write_ru_per_sec`, and the reads with
/// headroom) and `storage_gb`.
pub fn plan(
    needed: f64,
    write_ru_per_sec: f64,
    storage_gb: f64,
    history: Option<HistoryPlan>,
    limits: &Limits,
) -> CosmosPlan {
    let floor = RU_MIN.max(storage_gb * limits.cosmos.min_ru_per_gb);
    let ru_per_sec = ((needed.max(floor) / RU_STEP).ceil() * RU_STEP).max(RU_MIN);
    let p = &limits.cosmos_partitions;
    let by_ru = (ru_per_sec / p.ru_per_partition).ceil() as u64;
    let by_storage = (storage_gb / p.gb_per_partition).ceil() as u64;
    CosmosPlan {
        ru_per_sec,
        write_ru_per_sec,
        storage_gb,
        physical_partitions: by_ru.max(by_storage).max(1),
        partitions_by: if by_storage > by_ru {
            PartitionsBy::Storage
        } else {
            PartitionsBy::Throughput
        },
        needs_support_request: ru_per_sec > limits.cosmos.max_ru_per_container,
        history,
    }
}
