//! The demo's sampler: turns the writer replicas' metrics (added up), their partitions
//! and the endpoint's statistics into the live view's snapshots, the report's timeline
//! and its totals.

use std::collections::HashMap;
use std::time::Duration;

use super::replicas::Replicas;
use super::{CONTAINER, DATABASE, DemoConfig};
use cloud_writer::Snapshot as WriterSnapshot;

use crate::onboard::RegistrationTotals;
use crate::prom;
use crate::report::{DemoReport, PartitionTotals, TimelinePoint};
use crate::view::{RangeLoad, Snapshot};

/// Turns the writer's metrics and the endpoint's statistics into view snapshots and the
/// report's timeline.
pub(super) struct Sampler {
    label: String,
    speedup: f64,
    cutoff_secs: f64,
    last_at: Duration,
    last_received: f64,
    last_written: f64,
    last_lateness: Vec<(f64, f64)>,
    last_ru: HashMap<String, f64>,
    peak_ru: HashMap<String, f64>,
    timeline: Vec<TimelinePoint>,
    registration: Option<RegistrationTotals>,
}

impl Sampler {
    /// A sampler for `config`'s run, whose drones registered as `registration` says (on
    /// the hub).
    pub(super) fn new(config: &DemoConfig, registration: Option<RegistrationTotals>) -> Sampler {
        Sampler {
            label: config.label(),
            speedup: config.speedup,
            cutoff_secs: config.cutoff().as_secs_f64(),
            last_at: Duration::ZERO,
            last_received: 0.0,
            last_written: 0.0,
            last_lateness: Vec::new(),
            last_ru: HashMap::new(),
            peak_ru: HashMap::new(),
            timeline: Vec::new(),
            registration,
        }
    }

    /// The snapshot at `elapsed`; also appends a timeline point.
    pub(super) fn sample(
        &mut self,
        elapsed: Duration,
        replicas: &Replicas,
        stats: &cosmos_sim::Stats,
        published: u64,
    ) -> Snapshot {
        let writer = replicas.snapshot();
        let dt = (elapsed - self.last_at).as_secs_f64().max(1e-3);
        let received = writer.counts.positions as f64;
        let written = written(&writer) as f64;
        let lateness = buckets(&writer);
        let interval = prom::bucket_delta(&lateness, &self.last_lateness);
        let drops = writer.counts.dropped.clone();
        let mut ranges = Vec::new();
        let mut throttled = 0;
        if let Some(container) = stats.container(DATABASE, CONTAINER) {
            for p in container.partitions.iter().filter(|p| p.live) {
                let before = self.last_ru.insert(p.id.clone(), p.ru_total).unwrap_or(0.0);
                let rate = (p.ru_total - before).max(0.0) / dt;
                let peak = self.peak_ru.entry(p.id.clone()).or_insert(0.0);
                *peak = peak.max(rate);
                throttled += p.throttled;
                ranges.push(RangeLoad {
                    range: p.id.clone(),
                    ru_per_sec: rate,
                    capacity: p.ru_budget_per_sec,
                    throttled: p.throttled,
                });
            }
        }
        let snap = Snapshot {
            scenario: self.label.clone(),
            registration: self.registration.clone(),
            elapsed,
            speedup: self.speedup,
            msgs_per_sec: (received - self.last_received).max(0.0) / dt,
            published,
            received: received as u64,
            written: written as u64,
            lateness_p50: prom::quantile(&interval, 0.50),
            lateness_p99: prom::quantile(&interval, 0.99),
            cutoff_secs: self.cutoff_secs,
            throttled,
            ru_per_range: ranges,
            drops,
            replicas: replicas.views(),
            partition_lag: replicas.lag(),
            remote_config: None,
        };
        self.timeline.push(TimelinePoint {
            t: elapsed.as_secs_f64(),
            received_per_sec: snap.msgs_per_sec,
            written_per_sec: (written - self.last_written).max(0.0) / dt,
            lateness_p50: snap.lateness_p50,
            lateness_p99: snap.lateness_p99,
            dropped: snap.drops.values().sum(),
            throttled,
            ru_per_sec: snap.ru_per_range.iter().map(|r| r.ru_per_sec).collect(),
        });
        self.last_at = elapsed;
        self.last_received = received;
        self.last_written = written;
        self.last_lateness = lateness;
        snap
    }

    /// Fills the report's totals from the final metrics and statistics.
    pub(super) fn finish(
        self,
        report: &mut DemoReport,
        writer: &WriterSnapshot,
        stats: &cosmos_sim::Stats,
    ) {
        report.received = writer.counts.positions;
        report.written = written(writer);
        report.dropped = writer
            .counts
            .dropped
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(reason, n)| (*reason, *n))
            .collect();
        report.writer_throttled = writer.throttled;
        let lateness = buckets(writer);
        report.lateness_p50 = prom::quantile(&lateness, 0.50);
        report.lateness_p99 = prom::quantile(&lateness, 0.99);
        // While the fleet flew (the last interval sample), not counting the final drain.
        report.written_per_sec = self.last_written / self.last_at.as_secs_f64().max(1e-3);
        if let Some(container) = stats.container(DATABASE, CONTAINER) {
            for p in container.partitions.iter().filter(|p| p.live) {
                report.endpoint_throttled += p.throttled;
                report.partitions_detail.push(PartitionTotals {
                    range: p.id.clone(),
                    ru_total: p.ru_total,
                    peak_ru_per_sec: self.peak_ru.get(&p.id).copied().unwrap_or(0.0),
                    capacity: p.ru_budget_per_sec,
                    documents: p.documents,
                    throttled: p.throttled,
                });
            }
        }
        report.timeline = self.timeline;
    }
}

/// Documents written, latest positions and history alike (the exposition's
/// `documents_written_total` over both kinds).
fn written(writer: &WriterSnapshot) -> u64 {
    writer.counts.written + writer.counts.history_written
}

/// The device-to-written lateness buckets as the quantile helpers take them.
fn buckets(writer: &WriterSnapshot) -> Vec<(f64, f64)> {
    writer
        .lateness_device
        .iter()
        .map(|&(le, n)| (le, n as f64))
        .collect()
}
