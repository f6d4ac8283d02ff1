//! The demo's final report: the run's settings, the field metrics over the whole run, the
//! heat map totals, the timeline (for plots), and the answer to the spatial query. Printed
//! as text and optionally written as JSON (`--report-json`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use cloud_writer::DropReason;
use serde::Serialize;

mod alerts;
mod cost;

pub use crate::remote_config::RemoteConfig;
pub use alerts::{AlertReport, ReceivedAlert};
pub use cost::{CostComparison, HistoryCost, HistoryPerDrone, PerDroneCost};

use crate::onboard::Onboarding;
use crate::view::{ReplicaState, bar};

/// Everything a demo run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DemoReport {
    /// The scenario's name.
    pub scenario: String,
    /// What the scenario shows.
    pub claim: String,
    /// Drones flown.
    pub drones: usize,
    /// Time acceleration.
    pub speedup: f64,
    /// Wall seconds the fleet flew.
    pub wall_secs: f64,
    /// Where the drones published and the writers read: the local IoT Hub, or the MQTT
    /// broker (`embedded` or `mosquitto`).
    pub broker: String,
    /// On the hub: the drones' registrations through its provisioning service.
    pub registration: Option<Onboarding>,
    /// Physical partitions of the container.
    pub partitions: usize,
    /// Provisioned RU/s of the container.
    pub provisioned_ru_per_sec: f64,
    /// Latency the endpoint adds to each request, milliseconds.
    pub endpoint_latency_ms: u64,
    /// How the writer wrote (`bulk`, or the serial emulation).
    pub write_mode: String,
    /// The staleness cutoff, wall seconds.
    pub cutoff_secs: f64,
    /// The writer's refusal at start, when its guard stopped it.
    pub guard_refusal: Option<String>,
    /// Positions the drones published (seen by an observer on the broker).
    pub published: u64,
    /// Positions the writer received.
    pub received: u64,
    /// Documents the writer wrote.
    pub written: u64,
    /// Positions dropped, by reason.
    pub dropped: BTreeMap<DropReason, u64>,
    /// Requests or operations the writer saw throttled (429).
    pub writer_throttled: u64,
    /// Operations the endpoint answered 429.
    pub endpoint_throttled: u64,
    /// Documents written per wall second while the fleet flew.
    pub written_per_sec: f64,
    /// Lateness p50 over the whole run, seconds.
    pub lateness_p50: Option<f64>,
    /// Lateness p99 over the whole run, seconds.
    pub lateness_p99: Option<f64>,
    /// Per partition key range: RU, documents, throttles.
    pub partitions_detail: Vec<PartitionTotals>,
    /// One point per view interval.
    pub timeline: Vec<TimelinePoint>,
    /// Where the read API and the live map were served during the run.
    pub api_url: Option<String>,
    /// The spatial query and its answer.
    pub query: Option<SpatialAnswer>,
    /// Per writer replica: what it did and which partitions it read.
    pub replicas: Vec<ReplicaTotals>,
    /// The killed replica's partitions moving to the other (scenario `replica-killed`).
    pub partition_move: Option<PartitionMove>,
    /// Positions a killed replica had received but not finished: read again by the other
    /// replica from the last checkpoint, so counted twice in `received`.
    pub abandoned: u64,
    /// Every drone's document against its newest published position.
    pub newest: Option<NewestCheck>,
    /// What the run cost per drone, beside what `fleet plan` predicts.
    pub cost: Option<CostComparison>,
    /// On the hub: the drones whose report interval was set through their twins.
    pub remote_config: Option<RemoteConfig>,
    /// With `--alerts`: what the alerter delivered to the demo's webhook receiver.
    pub alerts: Option<AlertReport>,
}

/// One writer replica's part.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaTotals {
    /// Its name.
    pub name: String,
    /// Stopped in order, or killed.
    pub state: ReplicaState,
    /// Positions it received.
    pub received: u64,
    /// Documents it wrote.
    pub written: u64,
    /// Positions it dropped (all reasons).
    pub dropped: u64,
    /// The Event Hubs partitions it read last (before its stop, or before it was killed).
    pub partitions: Vec<String>,
}

/// A killed replica's partitions moving to the one left.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionMove {
    /// The killed replica.
    pub killed: String,
    /// The partitions it read.
    pub partitions: Vec<String>,
    /// When it was killed, wall seconds into the flight.
    pub killed_at_secs: f64,
    /// The ownership expiry, seconds: the earliest its partitions can move.
    pub ownership_expiry_secs: f64,
    /// From the kill until the replica left read every partition; `None` if that did not
    /// happen before the run ended.
    pub moved_after_secs: Option<f64>,
}

/// Every drone's latest document compared with the newest position it published.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NewestCheck {
    /// Drones that published.
    pub drones: usize,
    /// Drones whose document holds their newest published position.
    pub at_newest: usize,
    /// Drones whose document is older (device id, document seq, newest seq).
    pub behind: Vec<(String, u64, u64)>,
    /// Drones without a document.
    pub missing: Vec<String>,
}

impl NewestCheck {
    /// Whether every drone is at its newest position.
    pub fn all_newest(&self) -> bool {
        self.drones > 0 && self.at_newest == self.drones
    }
}

/// One partition key range over the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PartitionTotals {
    /// Range id.
    pub range: String,
    /// RU consumed in total.
    pub ru_total: f64,
    /// Highest RU/s over one view interval.
    pub peak_ru_per_sec: f64,
    /// The range's provisioned RU/s.
    pub capacity: f64,
    /// Documents stored at the end.
    pub documents: usize,
    /// Operations answered 429.
    pub throttled: u64,
}

/// The run at one view interval.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TimelinePoint {
    /// Wall seconds since the fleet started.
    pub t: f64,
    /// Positions received per second.
    pub received_per_sec: f64,
    /// Documents written per second.
    pub written_per_sec: f64,
    /// Lateness p50 of the interval, seconds.
    pub lateness_p50: Option<f64>,
    /// Lateness p99 of the interval, seconds.
    pub lateness_p99: Option<f64>,
    /// Drops so far (all reasons).
    pub dropped: u64,
    /// 429s so far (endpoint).
    pub throttled: u64,
    /// RU/s per range over the interval.
    pub ru_per_sec: Vec<f64>,
}

/// The answer to "which drones are within R metres of this point".
#[derive(Debug, Clone, Default, Serialize)]
pub struct SpatialAnswer {
    /// The request sent to the read API.
    pub request: String,
    /// Latitude of the point.
    pub lat: f64,
    /// Longitude of the point.
    pub lon: f64,
    /// The radius in metres.
    pub radius_m: f64,
    /// The drones found, nearest first: device id and distance in metres.
    pub drones: Vec<(String, f64)>,
    /// RU the query cost.
    pub request_charge: f64,
    /// HTTP calls the query took (one per range, plus pages).
    pub calls: u32,
    /// The drones within the radius by the last positions the fleet published (an
    /// independent check: the writer's drops explain any difference).
    pub expected_from_published: usize,
    /// Drones within the radius by their last published position that the query did not
    /// return.
    pub missing: Vec<String>,
    /// Drones the query returned that are not within the radius by their last published
    /// position.
    pub unexpected: Vec<String>,
}

impl DemoReport {
    /// The busiest range (most RU over the run) against the others: a hot partition shows
    /// as one range with every write and every 429 while the rest idle. `None` with fewer
    /// than two ranges or no RU.
    pub fn busiest_range_line(&self) -> Option<String> {
        let total_ru: f64 = self.partitions_detail.iter().map(|p| p.ru_total).sum();
        if self.partitions_detail.len() < 2 || total_ru <= 0.0 {
            return None;
        }
        let busiest = self
            .partitions_detail
            .iter()
            .max_by(|a, b| a.ru_total.total_cmp(&b.ru_total))?;
        let others = self
            .partitions_detail
            .iter()
            .filter(|p| p.range != busiest.range);
        let (mut peak, mut docs, mut throttled) = (0.0f64, 0, 0);
        for p in others {
            peak = peak.max(p.peak_ru_per_sec);
            docs += p.documents;
            throttled += p.throttled;
        }
        Some(format!(
            "busiest range {}: {:.0}% of the RU, {} docs, {} 429s; the other {} ranges: peak {:.0} RU/s, {} docs, {} 429s",
            busiest.range,
            100.0 * busiest.ru_total / total_ru,
            busiest.documents,
            busiest.throttled,
            self.partitions_detail.len() - 1,
            peak,
            docs,
            throttled
        ))
    }

    /// The replicas, the partition move and the accounting of a kill, the newest check.
    fn render_replicas(&self, s: &mut String) {
        for r in &self.replicas {
            let _ = writeln!(
                s,
                "replica {}{}: received {}   written {}   dropped {}{}",
                r.name,
                if r.state == ReplicaState::Killed {
                    " (killed)"
                } else {
                    ""
                },
                r.received,
                r.written,
                r.dropped,
                if r.partitions.is_empty() {
                    String::new()
                } else {
                    format!("   partitions [{}]", r.partitions.join(","))
                }
            );
        }
        if let Some(m) = &self.partition_move {
            let _ = match m.moved_after_secs {
                Some(after) => writeln!(
                    s,
                    "replica {} killed at {:.1} s: its partitions [{}] moved to the other in {after:.1} s (ownership expiry {:.0} s)",
                    m.killed,
                    m.killed_at_secs,
                    m.partitions.join(","),
                    m.ownership_expiry_secs
                ),
                None => writeln!(
                    s,
                    "replica {} killed at {:.1} s: its partitions [{}] did NOT move within the run (ownership expiry {:.0} s)",
                    m.killed,
                    m.killed_at_secs,
                    m.partitions.join(","),
                    m.ownership_expiry_secs
                ),
            };
            let finished = self.written + self.dropped.values().sum::<u64>();
            let _ = writeln!(
                s,
                "accounting: received {} = published {} + {} read again after the move (or acknowledged too late for a stopping drone to count); written + dropped {} = received - {} abandoned in flight by the killed replica",
                self.received,
                self.published,
                self.received.saturating_sub(self.published),
                finished,
                self.abandoned
            );
        }
        if let Some(n) = &self.newest {
            if n.all_newest() {
                let _ = writeln!(
                    s,
                    "every drone at its newest position: {} of {} (nothing lost)",
                    n.at_newest, n.drones
                );
            } else {
                let _ = writeln!(
                    s,
                    "NOT every drone at its newest position: {} of {}; behind {:?}; missing {:?}",
                    n.at_newest,
                    n.drones,
                    n.behind.iter().take(5).collect::<Vec<_>>(),
                    n.missing.iter().take(5).collect::<Vec<_>>()
                );
            }
        }
    }

    /// The report as text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let secs = |v: Option<f64>| match v {
            None => "-".to_owned(),
            Some(v) if v < 1.0 => format!("{:.0} ms", v * 1e3),
            Some(v) => format!("{v:.1} s"),
        };
        let _ = writeln!(s, "=== report: scenario {} ===", self.scenario);
        let _ = writeln!(s, "{}", self.claim);
        let _ = writeln!(
            s,
            "fleet: {} drones, {}x time ({:.0} s wall = {:.1} min of flight), through {}",
            self.drones,
            self.speedup,
            self.wall_secs,
            self.wall_secs * self.speedup / 60.0,
            self.broker
        );
        let _ = writeln!(
            s,
            "cosmos: {} partitions, {:.0} RU/s provisioned, {} ms per request; writer: {}; cutoff {}",
            self.partitions,
            self.provisioned_ru_per_sec,
            self.endpoint_latency_ms,
            self.write_mode,
            secs(Some(self.cutoff_secs))
        );
        if let Some(onboarding) = &self.registration {
            let _ = writeln!(s, "{}", onboarding.line());
        }
        if let Some(refusal) = &self.guard_refusal {
            let _ = writeln!(s, "writer refused to start (the guard):\n  {refusal}");
            return s;
        }
        let dropped: u64 = self.dropped.values().sum();
        let _ = writeln!(
            s,
            "published {}   received {}   written {}   dropped {}{}",
            self.published,
            self.received,
            self.written,
            dropped,
            if dropped == 0 {
                String::new()
            } else {
                let reasons: Vec<String> = self
                    .dropped
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(r, n)| format!("{r} {n}"))
                    .collect();
                format!(" ({})", reasons.join(", "))
            }
        );
        let _ = writeln!(
            s,
            "written/s {:.0}   lateness p50 {}   p99 {}   429s: endpoint {}, writer {}",
            self.written_per_sec,
            secs(self.lateness_p50),
            secs(self.lateness_p99),
            self.endpoint_throttled,
            self.writer_throttled
        );
        let _ = writeln!(s, "heat map (peak RU/s per range over one interval):");
        for p in &self.partitions_detail {
            let _ = writeln!(
                s,
                "  {:>4} |{}| peak {:>7.0} / {:<6.0} total {:>9.0} RU  docs {:>5}  429s {}",
                p.range,
                bar(p.peak_ru_per_sec, p.capacity),
                p.peak_ru_per_sec,
                p.capacity,
                p.ru_total,
                p.documents,
                p.throttled
            );
        }
        if let Some(line) = self.busiest_range_line() {
            let _ = writeln!(s, "{line}");
        }
        self.render_replicas(&mut s);
        if let Some(cost) = &self.cost {
            cost.render(&mut s);
        }
        if let Some(remote) = &self.remote_config {
            remote.render(&mut s);
        }
        if let Some(alerts) = &self.alerts {
            alerts.render(&mut s);
        }
        if let Some(q) = &self.query {
            let _ = writeln!(
                s,
                "drones within {:.0} m of ({:.5}, {:.5}): {} (by the last published positions: {}); {:.2} RU, {} calls",
                q.radius_m,
                q.lat,
                q.lon,
                q.drones.len(),
                q.expected_from_published,
                q.request_charge,
                q.calls
            );
            if !q.missing.is_empty() || !q.unexpected.is_empty() {
                let _ = writeln!(
                    s,
                    "  differences (positions the writer dropped): {} not found ({}), {} found at an older position ({})",
                    q.missing.len(),
                    first_ids(&q.missing),
                    q.unexpected.len(),
                    first_ids(&q.unexpected)
                );
            }
            let _ = writeln!(s, "  GET {}", q.request);
            for (id, d) in q.drones.iter().take(20) {
                let _ = writeln!(s, "  {id:<14} {d:>6.0} m");
            }
            if q.drones.len() > 20 {
                let _ = writeln!(s, "  ... and {} more", q.drones.len() - 20);
            }
        }
        s
    }
}

/// The first few ids of a list, for one line of text.
fn first_ids(ids: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = ids
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > SHOWN {
        text.push_str(", ...");
    }
    text
}

#[cfg(test)]
mod tests;
