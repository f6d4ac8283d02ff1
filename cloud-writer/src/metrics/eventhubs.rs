//! The Event Hubs source's metrics: which partitions this replica owns and how its
//! ownership changed, every partition's checkpoint lag in events, the events read again
//! after a partition changed hands, and the breaks of the source's connection and
//! receivers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::RwLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Label, Metrics, OwnershipChange, SessionBreak, Typed, label, remember};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ChangeLabels {
    partition: String,
    change: OwnershipChange,
}

/// The Event Hubs families, registered with the writer's others.
#[derive(Default)]
pub(super) struct EventHubsFamilies {
    owned: Family<Label, Gauge>,
    lag_events: Family<Label, Gauge>,
    ownership_changes: Family<ChangeLabels, Counter>,
    read_again: Family<Label, Counter>,
    session_breaks: Family<Typed<SessionBreak>, Counter>,
    /// The partitions seen (labels of the families above): a family's label sets cannot
    /// be listed.
    partitions: RwLock<BTreeSet<String>>,
}

impl EventHubsFamilies {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "eventhubs_partition_owned",
            "1 while this replica reads the Event Hubs partition, 0 after it lost or released it",
            self.owned.clone(),
        );
        r.register(
            "eventhubs_lag_events",
            "Events of the partition enqueued after this consumer group's checkpoint (every partition of the hub)",
            self.lag_events.clone(),
        );
        r.register(
            "eventhubs_ownership_changes",
            "Changes of this replica's partition ownership, by partition and change (claimed, lost, released)",
            self.ownership_changes.clone(),
        );
        r.register(
            "eventhubs_events_read_again",
            "Events of the partition this process had already taken in an earlier reading and received again (counted in messages_received too)",
            self.read_again.clone(),
        );
        for cause in SessionBreak::ALL {
            let _ = self.session_breaks.get_or_create(&[("cause", cause)]);
        }
        r.register(
            "eventhubs_session_breaks",
            "Breaks of the Event Hubs source's connection (rebuilt after a backoff) and failures of a partition's receiver not displaced by another owner, by cause",
            self.session_breaks.clone(),
        );
    }

    fn of_partitions<T>(&self, read: impl Fn(&str) -> Option<T>) -> BTreeMap<String, T> {
        let partitions = self.partitions.read().unwrap_or_else(|e| e.into_inner());
        partitions
            .iter()
            .filter_map(|p| Some((p.clone(), read(p)?)))
            .collect()
    }

    /// Whether this replica owns each partition seen.
    pub(super) fn owned(&self) -> BTreeMap<String, bool> {
        self.of_partitions(|p| Some(self.owned.get(&label("partition", p))?.get() == 1))
    }

    /// The checkpoint lag of each partition seen.
    pub(super) fn lag_events(&self) -> BTreeMap<String, i64> {
        self.of_partitions(|p| Some(self.lag_events.get(&label("partition", p))?.get()))
    }

    /// Events read again, all partitions.
    pub(super) fn read_again_total(&self) -> u64 {
        self.of_partitions(|p| Some(self.read_again.get(&label("partition", p))?.get()))
            .values()
            .sum()
    }
}

impl Metrics {
    /// Whether this replica reads Event Hubs partition `partition`.
    pub fn set_partition_owned(&self, partition: &str, owned: bool) {
        remember(&self.eventhubs.partitions, partition);
        self.eventhubs
            .owned
            .get_or_create(&label("partition", partition))
            .set(i64::from(owned));
    }

    /// One change of this replica's ownership of `partition`.
    pub fn ownership_change(&self, partition: &str, change: OwnershipChange) {
        self.eventhubs
            .ownership_changes
            .get_or_create(&ChangeLabels {
                partition: partition.to_owned(),
                change,
            })
            .inc();
    }

    /// One break of the source's connection, or of a partition's receiver.
    pub fn session_break(&self, cause: SessionBreak) {
        self.eventhubs
            .session_breaks
            .get_or_create(&[("cause", cause)])
            .inc();
    }

    /// One event of `partition` received again: this process had taken it in an earlier
    /// reading of the partition.
    pub fn read_again(&self, partition: &str) {
        remember(&self.eventhubs.partitions, partition);
        self.eventhubs
            .read_again
            .get_or_create(&label("partition", partition))
            .inc();
    }

    /// Events of `partition` enqueued after the consumer group's checkpoint.
    pub fn set_lag_events(&self, partition: &str, events: i64) {
        remember(&self.eventhubs.partitions, partition);
        self.eventhubs
            .lag_events
            .get_or_create(&label("partition", partition))
            .set(events);
    }
}
