//! The writer's metrics read back as values ([`Snapshot`]): what the demo shows of writers
//! that run in its own process, without rendering the exposition and parsing it back.

use std::collections::BTreeMap;

use super::Counts;

/// The writer's figures at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Received, written, dropped by reason, in flight.
    pub counts: Counts,
    /// Throttled (429) requests, all partition key ranges.
    pub throttled: u64,
    /// Lateness from the device time to the write's outcome: cumulative buckets (upper
    /// bound in seconds, observations at or below it), the last bound infinite.
    pub lateness_device: Vec<(f64, u64)>,
    /// For the Event Hubs source: whether this replica reads each partition it has read.
    pub partitions_owned: BTreeMap<String, bool>,
    /// For the Event Hubs source: events of each partition after the consumer group's
    /// checkpoint.
    pub lag_events: BTreeMap<String, i64>,
    /// Whether the source is connected (for MQTT: subscribed).
    pub source_connected: bool,
}

impl Snapshot {
    /// The partitions this replica reads now.
    pub fn owned_partitions(&self) -> Vec<String> {
        self.partitions_owned
            .iter()
            .filter(|(_, owned)| **owned)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Several replicas' figures added up: counts and lateness buckets sum (the same
    /// bounds in every replica); partitions, lags and connections are per replica and
    /// stay empty.
    pub fn sum<'a>(snapshots: impl IntoIterator<Item = &'a Snapshot>) -> Snapshot {
        let mut total = Snapshot::default();
        for s in snapshots {
            let c = &mut total.counts;
            c.received += s.counts.received;
            c.positions += s.counts.positions;
            c.written += s.counts.written;
            c.history_written += s.counts.history_written;
            c.in_flight += s.counts.in_flight;
            c.history_dropped += s.counts.history_dropped;
            c.read_again += s.counts.read_again;
            for (reason, n) in &s.counts.dropped {
                *c.dropped.entry(*reason).or_default() += n;
            }
            total.throttled += s.throttled;
            if total.lateness_device.is_empty() {
                total.lateness_device = s.lateness_device.clone();
            } else {
                for (sum, (_, n)) in total.lateness_device.iter_mut().zip(&s.lateness_device) {
                    sum.1 += n;
                }
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DocumentKind, DropReason, Metrics};
    use super::*;
    use std::time::Duration;

    #[test]
    fn reads_back_what_was_counted_and_adds_up() {
        let m = Metrics::new();
        m.received();
        m.received();
        m.written(DocumentKind::Latest);
        m.dropped(DropReason::Stale);
        m.set_throttled("0", 3);
        m.set_throttled("1", 2);
        m.set_partition_owned("2", true);
        m.set_partition_owned("0", false);
        m.set_lag_events("2", 17);
        m.read_again("2");
        m.set_source_connected(true);
        m.lateness(Duration::ZERO, Duration::from_millis(40));
        let s = m.snapshot();
        assert_eq!((s.counts.received, s.counts.written), (2, 1));
        assert_eq!(s.counts.dropped(DropReason::Stale), 1);
        assert_eq!(s.throttled, 5);
        assert_eq!(s.owned_partitions(), ["2"]);
        assert!(!s.partitions_owned["0"]);
        assert_eq!(s.counts.read_again, 1);
        assert_eq!(s.lag_events, BTreeMap::from([("2".to_owned(), 17)]));
        assert!(s.source_connected);
        // 0.04 s: first counted under the bound 0.05.
        assert_eq!(s.lateness_device[1], (0.025, 0));
        assert_eq!(s.lateness_device[2], (0.05, 1));
        assert_eq!(s.lateness_device.last(), Some(&(f64::INFINITY, 1)));

        let both = Snapshot::sum([&s, &s]);
        assert_eq!((both.counts.received, both.throttled), (4, 10));
        assert_eq!(both.counts.dropped(DropReason::Stale), 2);
        assert_eq!(both.counts.read_again, 2);
        assert_eq!(both.lateness_device.last(), Some(&(f64::INFINITY, 2)));
        assert!(both.partitions_owned.is_empty());
    }
}
