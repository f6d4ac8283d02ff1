//! The writer's metrics (Prometheus text exposition); [`server`] serves them with
//! `/healthz` and `/readyz`.
//!
//! Every drop is counted with its [`DropReason`] and every hold with its [`HoldReason`]
//! (each set's label values defined once, in `reason`); received versus written, lateness,
//! Cosmos DB status codes, RU per partition key range (the heat map), in-flight and backlog
//! gauges, the bytes held in the source queue, acknowledgement lag per source partition,
//! the answers of `/readyz` and `/healthz` as gauges (for alert rules), and the Event Hubs
//! source's ownership and lag ([`eventhubs`]). The names are listed in the crate's
//! settings and operations guides.
//!
//! - this file: the registry ([`Metrics`]) and what records into it.
//! - `reason`: the label values of drops, holds and the source's events.
//! - `eventhubs`: the Event Hubs source's metrics.
//! - `health`: the rule behind `/readyz` and `/healthz`, and their gauges.
//! - `histogram`: the lateness histogram, its buckets readable.
//! - `counts`: the counts read back, for the tests, the summary and the import.
//! - `snapshot`: the metrics read back as values, for the demo.
//! - [`server`]: the HTTP listeners of `/metrics` and the probes.
//! - `tests`: the exposition and the liveness rule.

mod counts;
mod eventhubs;
mod health;
mod histogram;
mod reason;
pub mod server;
mod snapshot;

pub use counts::Counts;
pub use histogram::BucketHistogram;
pub use reason::{
    DocumentKind, DropReason, HoldReason, OwnershipChange, SessionBreak, UnknownDropReason,
};
pub use snapshot::Snapshot;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use telemetry::wire::InvalidReason;

use self::eventhubs::EventHubsFamilies;
use self::reason::InvalidLabel;

type Label = [(&'static str, String); 1];
type Labels2 = [(&'static str, String); 2];
/// One label whose values are a [`DropReason`], [`HoldReason`] or [`DocumentKind`].
type Typed<T> = [(&'static str, T); 1];

/// The writer's metrics. Cheap to update from any task.
pub struct Metrics {
    registry: Registry,
    received: Counter,
    positions: Counter,
    written: Family<Typed<DocumentKind>, Counter>,
    dropped: Family<Typed<DropReason>, Counter>,
    invalid: Family<Typed<InvalidLabel>, Counter>,
    lateness_enqueued: BucketHistogram,
    lateness_device: BucketHistogram,
    cosmos_ops: Family<Labels2, Counter>,
    ru: Family<Labels2, Counter<f64, AtomicU64>>,
    throttled: Family<Label, Counter>,
    in_flight: Gauge,
    backlog: Gauge,
    ack_lag: Family<Label, Gauge>,
    source_connected: Gauge,
    source_assigned: Gauge,
    queue_bytes: Gauge,
    queue_bytes_peak: Gauge,
    queue_budget: Gauge,
    blocked: Family<Typed<HoldReason>, Gauge>,
    holds: Family<Typed<HoldReason>, Counter>,
    history_dropped: Family<Typed<DropReason>, Counter>,
    dead_letters_rotated_away: Counter,
    fallback: Gauge,
    ready_gauge: Gauge,
    live_gauge: Gauge,
    eventhubs: EventHubsFamilies,
    /// The partition key ranges seen (labels of `ru` and `throttled`): a family's label
    /// sets cannot be listed.
    ranges: RwLock<BTreeSet<String>>,
    ready: AtomicBool,
    /// The outcome count last seen by [`Metrics::is_live`] and when it last changed.
    progress: Mutex<(u64, Instant)>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn label(name: &'static str, value: impl Into<String>) -> Label {
    [(name, value.into())]
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Upper bounds (seconds) of the lateness histograms: fine below a second, where the
/// end-to-end target sits (p99 under 1 s, so 1.0 is a bound), then every minute up to the
/// 5-minute cutoff (so an alert can tell lateness approaching it) and past it.
static LATENESS_BUCKETS: [f64; 23] = [
    0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 0.9, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 180.0, 240.0, 300.0, 600.0,
];

impl Metrics {
    /// All metrics, registered, with every drop reason pre-created at zero.
    pub fn new() -> Self {
        let lateness = || BucketHistogram::new(&LATENESS_BUCKETS);
        let mut m = Metrics {
            registry: Registry::with_prefix("cloud_writer"),
            received: Counter::default(),
            positions: Counter::default(),
            written: Family::default(),
            dropped: Family::default(),
            invalid: Family::default(),
            lateness_enqueued: lateness(),
            lateness_device: lateness(),
            cosmos_ops: Family::default(),
            ru: Family::default(),
            throttled: Family::default(),
            in_flight: Gauge::default(),
            backlog: Gauge::default(),
            ack_lag: Family::default(),
            source_connected: Gauge::default(),
            source_assigned: Gauge::default(),
            queue_bytes: Gauge::default(),
            queue_bytes_peak: Gauge::default(),
            queue_budget: Gauge::default(),
            blocked: Family::default(),
            holds: Family::default(),
            history_dropped: Family::default(),
            dead_letters_rotated_away: Counter::default(),
            fallback: Gauge::default(),
            ready_gauge: Gauge::default(),
            live_gauge: Gauge::default(),
            eventhubs: EventHubsFamilies::default(),
            ranges: RwLock::default(),
            ready: AtomicBool::new(false),
            progress: Mutex::new((0, Instant::now())),
        };
        for reason in HoldReason::ALL {
            let _ = m.blocked.get_or_create(&[("reason", reason)]);
            let _ = m.holds.get_or_create(&[("reason", reason)]);
        }
        for reason in DropReason::ALL {
            let _ = m.dropped.get_or_create(&[("reason", reason)]);
        }
        for reason in InvalidReason::ALL {
            let _ = m.invalid.get_or_create(&[("reason", InvalidLabel(reason))]);
        }
        for kind in DocumentKind::ALL {
            let _ = m.written.get_or_create(&[("kind", kind)]);
        }
        let r = &mut m.registry;
        r.register(
            "messages_received",
            "Messages received from the source",
            m.received.clone(),
        );
        r.register(
            "positions_received",
            "Positions the received messages carried (a batch carries several; each position is written, superseded or dropped)",
            m.positions.clone(),
        );
        r.register(
            "documents_written",
            "Documents written, by kind (latest, agent; history: positions newly stored in track segments)",
            m.written.clone(),
        );
        r.register(
            "messages_dropped",
            "Messages not written, by reason",
            m.dropped.clone(),
        );
        r.register(
            "messages_invalid",
            "Invalid messages, by validation reason",
            m.invalid.clone(),
        );
        r.register(
            "lateness_enqueued_to_written_seconds",
            "From the hub's enqueued time (else receipt) to the write's outcome",
            m.lateness_enqueued.clone(),
        );
        r.register(
            "lateness_device_to_written_seconds",
            "From the device time to the write's outcome",
            m.lateness_device.clone(),
        );
        r.register(
            "cosmos_operations",
            "Cosmos DB bulk operation outcomes, by status and substatus",
            m.cosmos_ops.clone(),
        );
        r.register(
            "cosmos_request_units",
            "Request units consumed, by partition key range (the heat map) and kind of document written",
            m.ru.clone(),
        );
        r.register(
            "cosmos_throttled",
            "Throttled (429) Cosmos DB requests, by partition key range",
            m.throttled.clone(),
        );
        r.register("in_flight", "Positions being written", m.in_flight.clone());
        r.register(
            "backlog",
            "Messages received and waiting for the pipeline",
            m.backlog.clone(),
        );
        r.register(
            "checkpoint_lag",
            "Messages received but not yet acknowledged or checkpointed, by source partition",
            m.ack_lag.clone(),
        );
        r.register(
            "source_connected",
            "1 while the source is connected",
            m.source_connected.clone(),
        );
        m.source_assigned.set(1);
        r.register(
            "source_assigned",
            "1 while the source has its share of the work: an Event Hubs replica owns a partition, or every partition has another current owner (always 1 for MQTT)",
            m.source_assigned.clone(),
        );
        r.register(
            "source_queue_bytes",
            "Bytes held in the queue between source and pipeline",
            m.queue_bytes.clone(),
        );
        r.register(
            "source_queue_bytes_peak",
            "Most bytes the queue between source and pipeline has held",
            m.queue_bytes_peak.clone(),
        );
        r.register(
            "source_queue_budget_bytes",
            "The byte budget of the queue between source and pipeline (SOURCE_MAX_BYTES)",
            m.queue_budget.clone(),
        );
        r.register(
            "writer_blocked",
            "1 while the writer holds the stream because Cosmos DB refuses every write, by reason",
            m.blocked.clone(),
        );
        r.register(
            "writer_holds",
            "Times the writer began to hold the stream, by reason (one per outage, not per probe)",
            m.holds.clone(),
        );
        r.register(
            "history_dropped",
            "Positions not stored in track segments, by reason",
            m.history_dropped.clone(),
        );
        r.register(
            "dead_letters_rotated_away",
            "Dead-letter lines deleted when the file rotated past DEAD_LETTER_MAX_BYTES",
            m.dead_letters_rotated_away.clone(),
        );
        r.register(
            "newest_wins_fallback",
            "1 when the writer fell back to NEWEST_WINS=etag because the server has no Patch in batches",
            m.fallback.clone(),
        );
        r.register(
            "ready",
            "1 while /readyz answers 200: started, source connected, stream not held (updated when /metrics is scraped)",
            m.ready_gauge.clone(),
        );
        r.register(
            "live",
            "1 while /healthz answers 200: no work pending, or an outcome within HEALTHZ_STALL_AFTER (updated when /metrics is scraped)",
            m.live_gauge.clone(),
        );
        m.eventhubs.register(r);
        m
    }

    /// Holds the stream for `reason`, or resumes with `None`.
    pub fn set_blocked(&self, reason: Option<HoldReason>) {
        for r in HoldReason::ALL {
            let value = i64::from(reason == Some(r));
            self.blocked.get_or_create(&[("reason", r)]).set(value);
        }
    }

    /// The writer began to hold the stream for `reason`.
    pub fn hold_started(&self, reason: HoldReason) {
        self.holds.get_or_create(&[("reason", reason)]).inc();
    }

    /// Times the writer began to hold the stream, all reasons.
    pub fn holds(&self) -> u64 {
        HoldReason::ALL
            .into_iter()
            .map(|r| self.holds.get_or_create(&[("reason", r)]).get())
            .sum()
    }

    /// Why the stream is held, if it is.
    pub fn blocked(&self) -> Option<HoldReason> {
        HoldReason::ALL
            .into_iter()
            .find(|r| self.blocked.get_or_create(&[("reason", *r)]).get() == 1)
    }

    /// One position not stored in a track segment, for `reason`.
    pub fn history_dropped(&self, reason: DropReason) {
        self.history_dropped
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    /// `lines` dead-letter lines deleted by a rotation.
    pub fn dead_letters_rotated_away(&self, lines: u64) {
        self.dead_letters_rotated_away.inc_by(lines);
    }

    /// Records that the writer fell back from Patch to the ETag mode.
    pub fn set_newest_wins_fallback(&self, fell_back: bool) {
        self.fallback.set(i64::from(fell_back));
    }

    /// One message received.
    pub fn received(&self) {
        self.received.inc();
    }

    /// A received message carried `n` positions.
    pub fn positions_received(&self, n: usize) {
        self.positions.inc_by(n as u64);
    }

    /// One document of `kind` written.
    pub fn written(&self, kind: DocumentKind) {
        self.written.get_or_create(&[("kind", kind)]).inc();
    }

    /// `n` positions newly stored in track segments (counted as `kind="history"`).
    pub fn history_written(&self, n: u64) {
        self.written
            .get_or_create(&[("kind", DocumentKind::History)])
            .inc_by(n);
    }

    /// One message dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) {
        self.dropped.get_or_create(&[("reason", reason)]).inc();
    }

    /// One message invalid for `reason`.
    pub fn invalid(&self, reason: InvalidReason) {
        self.invalid
            .get_or_create(&[("reason", InvalidLabel(reason))])
            .inc();
    }

    /// Lateness of one write's outcome.
    pub fn lateness(&self, enqueued_to_written: Duration, device_to_written: Duration) {
        self.lateness_enqueued
            .observe(enqueued_to_written.as_secs_f64());
        self.lateness_device
            .observe(device_to_written.as_secs_f64());
    }

    /// One bulk operation's final status.
    pub fn cosmos_op(&self, status: u16, substatus: u32) {
        self.cosmos_ops
            .get_or_create(&[
                ("status", status.to_string()),
                ("substatus", substatus.to_string()),
            ])
            .inc();
    }

    /// Request units charged on partition key range `range` for writing a document of
    /// `kind` (`history`: track segments, their reads after a conflict included).
    pub fn request_units(&self, range: &str, kind: DocumentKind, charge: f64) {
        if charge > 0.0 {
            remember(&self.ranges, range);
            self.ru
                .get_or_create(&[
                    ("range", range.to_owned()),
                    ("kind", kind.as_str().to_owned()),
                ])
                .inc_by(charge);
        }
    }

    /// Sets the throttle count of a range to `total` (from the bulk writer's statistics).
    pub fn set_throttled(&self, range: &str, total: u64) {
        remember(&self.ranges, range);
        let counter = self.throttled.get_or_create(&label("range", range));
        let now = counter.get();
        if total > now {
            counter.inc_by(total - now);
        }
    }

    /// Positions being written.
    #[cfg(test)]
    pub fn set_in_flight(&self, n: usize) {
        self.in_flight.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Adds to the positions being written.
    pub fn add_in_flight(&self, delta: i64) {
        self.in_flight.inc_by(delta);
    }

    /// Messages waiting for the pipeline.
    pub fn set_backlog(&self, n: usize) {
        self.backlog.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Messages not yet acknowledged on source partition `partition`.
    pub fn set_ack_lag(&self, partition: &str, n: usize) {
        self.ack_lag
            .get_or_create(&label("partition", partition))
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Whether the source is connected.
    pub fn set_source_connected(&self, connected: bool) {
        self.source_connected.set(i64::from(connected));
    }

    /// Sets whether the source has its share of the work (`source_assigned`).
    pub fn set_source_assigned(&self, assigned: bool) {
        self.source_assigned.set(i64::from(assigned));
    }

    /// Bytes held in the source queue now, and the most it has held.
    pub fn set_source_queue_bytes(&self, held: usize, peak: usize) {
        self.queue_bytes
            .set(i64::try_from(held).unwrap_or(i64::MAX));
        self.queue_bytes_peak
            .set(i64::try_from(peak).unwrap_or(i64::MAX));
    }

    /// The source queue's byte budget.
    pub fn set_source_queue_budget(&self, bytes: usize) {
        self.queue_budget
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// The counts, read back.
    pub fn counts(&self) -> Counts {
        let kind = |k| self.written.get_or_create(&[("kind", k)]).get();
        let dropped = |family: &Family<Typed<DropReason>, Counter>, r| {
            family.get_or_create(&[("reason", r)]).get()
        };
        Counts {
            received: self.received.get(),
            positions: self.positions.get(),
            written: kind(DocumentKind::Latest),
            history_written: kind(DocumentKind::History),
            agent_written: kind(DocumentKind::Agent),
            dropped: DropReason::ALL
                .into_iter()
                .map(|r| (r, dropped(&self.dropped, r)))
                .collect(),
            invalid: InvalidReason::ALL
                .into_iter()
                .map(|r| {
                    (
                        r,
                        self.invalid
                            .get_or_create(&[("reason", InvalidLabel(r))])
                            .get(),
                    )
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
            in_flight: self.in_flight.get(),
            history_dropped: DropReason::ALL
                .into_iter()
                .map(|r| dropped(&self.history_dropped, r))
                .sum(),
            read_again: self.eventhubs.read_again_total(),
        }
    }

    /// Throttled requests of all ranges.
    pub fn throttled_total(&self) -> u64 {
        let ranges = self.ranges.read().unwrap_or_else(|e| e.into_inner());
        ranges
            .iter()
            .filter_map(|r| Some(self.throttled.get(&label("range", r.as_str()))?.get()))
            .sum()
    }

    /// The values the demo shows, read back from the metrics themselves.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            counts: self.counts(),
            throttled: self.throttled_total(),
            lateness_device: self.lateness_device.cumulative(),
            partitions_owned: self.eventhubs.owned(),
            lag_events: self.eventhubs.lag_events(),
            source_connected: self.source_connected.get() == 1,
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// Adds `value` to the set of label values seen, taking the write lock only the first time.
fn remember(seen: &RwLock<BTreeSet<String>>, value: &str) {
    if !seen
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .contains(value)
    {
        seen.write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(value.to_owned());
    }
}

#[cfg(test)]
mod tests;
