//! Observability: device messages and connections accepted and refused by reason,
//! provisioning registrations assigned and refused by reason, twin operations and method
//! calls, AMQP deliveries, and per partition depth and last sequence number, as a [`Stats`] value and as
//! Prometheus text.

use crate::partitions::{PartitionInfo, Partitions};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Counters by name; the hub adds to them.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    values: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
}

impl Counters {
    /// Adds `n` to counter `name` with label `reason` ("" for none).
    pub(crate) fn add(&self, name: &'static str, reason: &'static str, n: u64) {
        *self.values.lock().entry((name, reason)).or_default() += n;
    }
}

/// What the hub has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Device messages enqueued.
    pub messages_accepted: u64,
    /// Device messages refused (the connection closed), by reason.
    pub messages_refused: BTreeMap<String, u64>,
    /// Device messages the throttle held back.
    pub messages_throttled: u64,
    /// Device connections accepted.
    pub connections_accepted: u64,
    /// Device connections refused or closed by the hub, by reason.
    pub connections_refused: BTreeMap<String, u64>,
    /// Registrations the provisioning service assigned.
    pub registrations_assigned: u64,
    /// Registrations (or their connections) the provisioning service refused, by reason.
    pub registrations_refused: BTreeMap<String, u64>,
    /// Events delivered over AMQP.
    pub events_delivered: u64,
    /// AMQP requests refused (CBS, management, links), by reason.
    pub amqp_refused: BTreeMap<String, u64>,
    /// CBS tokens accepted (`put-token` answered 202).
    pub amqp_tokens_accepted: u64,
    /// Receivers' links the hub ended with an error, by reason (`stolen`: another receiver
    /// took the partition; `token_expired`: the connection's token ran out unrenewed).
    pub amqp_links_dropped: BTreeMap<String, u64>,
    /// Twin operations served, by operation (`get`, `patch_reported`, `service_get`,
    /// `update`, `replace`).
    pub twin_operations: BTreeMap<String, u64>,
    /// Twin changes refused (over 32 KB, not JSON), by section.
    pub twin_operations_refused: BTreeMap<String, u64>,
    /// Direct method requests sent to devices.
    pub method_calls: u64,
    /// Per partition.
    pub partitions: Vec<PartitionStats>,
}

/// One partition's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionStats {
    /// Partition id.
    pub id: usize,
    /// Events kept.
    pub depth: usize,
    /// The last sequence number enqueued, -1 if none.
    pub last_sequence_number: i64,
}

impl Stats {
    pub(crate) fn collect(counters: &Counters, partitions: &Partitions) -> Stats {
        let mut stats = Stats::default();
        for (&(name, reason), &value) in counters.values.lock().iter() {
            let by_reason = |map: &mut BTreeMap<String, u64>| {
                map.insert(reason.to_owned(), value);
            };
            match name {
                "messages_accepted" => stats.messages_accepted = value,
                "messages_refused" => by_reason(&mut stats.messages_refused),
                "messages_throttled" => stats.messages_throttled = value,
                "connections_accepted" => stats.connections_accepted = value,
                "connections_refused" => by_reason(&mut stats.connections_refused),
                "registrations_assigned" => stats.registrations_assigned = value,
                "registrations_refused" => by_reason(&mut stats.registrations_refused),
                "events_delivered" => stats.events_delivered = value,
                "amqp_refused" => by_reason(&mut stats.amqp_refused),
                "amqp_tokens_accepted" => stats.amqp_tokens_accepted = value,
                "amqp_links_dropped" => by_reason(&mut stats.amqp_links_dropped),
                "twin_operations" => by_reason(&mut stats.twin_operations),
                "twin_operations_refused" => by_reason(&mut stats.twin_operations_refused),
                "method_calls" => stats.method_calls = value,
                _ => {}
            }
        }
        stats.partitions = (0..partitions.count())
            .filter_map(|id| {
                let info: PartitionInfo = partitions.get(id)?.info();
                Some(PartitionStats {
                    id,
                    depth: info.depth,
                    last_sequence_number: info.last_sequence_number,
                })
            })
            .collect();
        stats
    }

    /// Prometheus text exposition.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, rows: Vec<(String, u64)>| {
            let _ = writeln!(
                out,
                "# HELP hub_sim_{name} {help}\n# TYPE hub_sim_{name} counter"
            );
            for (labels, value) in rows {
                let _ = writeln!(out, "hub_sim_{name}{labels} {value}");
            }
        };
        let reasons = |map: &BTreeMap<String, u64>| {
            map.iter()
                .map(|(r, v)| (format!("{{reason=\"{r}\"}}"), *v))
                .collect::<Vec<_>>()
        };
        counter(
            "messages_accepted_total",
            "Device messages enqueued.",
            vec![(String::new(), self.messages_accepted)],
        );
        counter(
            "messages_refused_total",
            "Device messages refused, by reason.",
            reasons(&self.messages_refused),
        );
        counter(
            "messages_throttled_total",
            "Device messages held back by the throttle.",
            vec![(String::new(), self.messages_throttled)],
        );
        counter(
            "connections_accepted_total",
            "Device connections accepted.",
            vec![(String::new(), self.connections_accepted)],
        );
        counter(
            "connections_refused_total",
            "Device connections refused or closed by the hub, by reason.",
            reasons(&self.connections_refused),
        );
        counter(
            "registrations_assigned_total",
            "Registrations the provisioning service assigned.",
            vec![(String::new(), self.registrations_assigned)],
        );
        counter(
            "registrations_refused_total",
            "Registrations the provisioning service refused, by reason.",
            reasons(&self.registrations_refused),
        );
        counter(
            "events_delivered_total",
            "Events delivered over AMQP.",
            vec![(String::new(), self.events_delivered)],
        );
        counter(
            "amqp_refused_total",
            "AMQP requests refused, by reason.",
            reasons(&self.amqp_refused),
        );
        counter(
            "amqp_tokens_accepted_total",
            "CBS tokens accepted.",
            vec![(String::new(), self.amqp_tokens_accepted)],
        );
        counter(
            "amqp_links_dropped_total",
            "Receivers' links the hub ended with an error, by reason.",
            reasons(&self.amqp_links_dropped),
        );
        counter(
            "twin_operations_total",
            "Twin operations served, by operation.",
            self.twin_operations
                .iter()
                .map(|(op, v)| (format!("{{operation=\"{op}\"}}"), *v))
                .collect(),
        );
        counter(
            "twin_operations_refused_total",
            "Twin changes refused, by section.",
            reasons(&self.twin_operations_refused),
        );
        counter(
            "method_calls_total",
            "Direct method requests sent to devices.",
            vec![(String::new(), self.method_calls)],
        );
        for (name, help, value) in [
            (
                "partition_depth",
                "Events kept per partition.",
                (|p: &PartitionStats| p.depth as i64) as fn(&PartitionStats) -> i64,
            ),
            (
                "partition_last_sequence_number",
                "Last sequence number enqueued per partition.",
                |p: &PartitionStats| p.last_sequence_number,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP hub_sim_{name} {help}\n# TYPE hub_sim_{name} gauge"
            );
            for p in &self.partitions {
                let _ = writeln!(out, "hub_sim_{name}{{partition=\"{}\"}} {}", p.id, value(p));
            }
        }
        out
    }
}
