//! The partitions of each hub's built-in Event Hubs endpoint, chosen from the hub's load and
//! the writers that read it. The count is fixed when the hub is created, so the plan rounds
//! up to a power of two: room to grow without a new hub.

use serde::Serialize;

use super::limits::Limits;

/// The built-in endpoint of each hub.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventHubsPlan {
    /// Partitions of each hub's endpoint (chosen when the hub is created).
    pub partitions: u64,
    /// Why that many.
    pub reason: PartitionReason,
    /// Events a second into each hub's endpoint.
    pub events_per_sec: f64,
    /// Bytes a second into each hub's endpoint.
    pub bytes_per_sec: f64,
}

/// What set the partition count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "by")]
pub enum PartitionReason {
    /// The load and the writers fit the default.
    Default,
    /// Each writer replica reads at least one partition.
    Writers {
        /// Replicas per hub.
        replicas: u64,
    },
    /// The ingress one partition takes.
    Load {
        /// Partitions the events and bytes need.
        needed: u64,
    },
    /// More than a hub may have: the hub is capped, and a fleet this busy needs more hubs.
    Capped {
        /// Partitions the load or the writers need.
        needed: u64,
    },
}

/// The fewest hubs whose endpoints take `events_per_sec` events of `bytes_per_event` in all,
/// read by `replicas` writer replicas in all, within a hub's partitions.
pub fn hubs_needed(
    events_per_sec: f64,
    bytes_per_event: f64,
    replicas: f64,
    limits: &Limits,
) -> u64 {
    let eh = &limits.eventhubs;
    let partitions = (events_per_sec / eh.events_per_partition_sec)
        .max(events_per_sec * bytes_per_event / eh.bytes_per_partition_sec)
        .max(replicas);
    ((partitions / limits.iothub.max_partitions as f64).ceil() as u64).max(1)
}

/// The partitions for a hub taking `events_per_sec` events of `bytes_per_event`, read by
/// `replicas` writers.
pub fn plan(
    events_per_sec: f64,
    bytes_per_event: f64,
    replicas: u64,
    limits: &Limits,
) -> EventHubsPlan {
    let eh = &limits.eventhubs;
    let bytes_per_sec = events_per_sec * bytes_per_event;
    let by_load = (events_per_sec / eh.events_per_partition_sec)
        .max(bytes_per_sec / eh.bytes_per_partition_sec)
        .ceil() as u64;
    let (default, max) = (
        limits.iothub.default_partitions,
        limits.iothub.max_partitions,
    );
    let needed = by_load.max(replicas);
    let reason = if needed > max {
        PartitionReason::Capped { needed }
    } else if needed <= default {
        PartitionReason::Default
    } else if by_load >= replicas {
        PartitionReason::Load { needed: by_load }
    } else {
        PartitionReason::Writers { replicas }
    };
    EventHubsPlan {
        partitions: needed.next_power_of_two().clamp(default, max),
        reason,
        events_per_sec,
        bytes_per_sec,
    }
}

impl PartitionReason {
    /// The reason as the plan prints it.
    pub fn text(&self, plan: &EventHubsPlan, limits: &Limits) -> String {
        let eh = &limits.eventhubs;
        let mb = |bytes: f64| bytes / (1u64 << 20) as f64;
        let load = format!(
            "{:.0} events/s, {:.1} MB/s a hub at {} events/s or {:.0} MB/s a partition",
            plan.events_per_sec,
            mb(plan.bytes_per_sec),
            eh.events_per_partition_sec,
            mb(eh.bytes_per_partition_sec)
        );
        match self {
            PartitionReason::Default => format!("the default: {load}"),
            PartitionReason::Writers { replicas } => {
                format!("{replicas} writer replicas each read one at least; {load}")
            }
            PartitionReason::Load { needed } => {
                format!("{needed} for {load}, rounded up to a power of two")
            }
            PartitionReason::Capped { needed } => format!(
                "WARNING: {needed} needed ({load}) but a hub has at most {}: plan more hubs",
                limits.iothub.max_partitions
            ),
        }
    }
}
