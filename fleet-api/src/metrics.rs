//! The API's Prometheus metrics, per route: requests by status, RU per operation, Cosmos
//! calls per operation, latency, and 429s the reads met; every request (refusals included) by
//! routed path, the caller's role and status; the reads refused by the budgets
//! ([`crate::budget`]) by reason; and what the live stream's change-feed follower costs and
//! how far behind each range is; API key file versions that did not load. Served as text at
//! `/metrics`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use cosmos::ReadCost;

type RouteLabel = [(&'static str, &'static str); 1];
type RouteStatus = [(&'static str, String); 2];
type RouteRoleStatus = [(&'static str, String); 3];

/// Buckets of RU per operation: a point read is about 1 RU, a fan-out tens to hundreds.
const RU_BUCKETS: [f64; 10] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];
/// Buckets of calls per operation: 1 for a point read, one per range for a fan-out.
const CALL_BUCKETS: [f64; 9] = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0];
/// Buckets of latency, seconds.
const LATENCY_BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Clone)]
struct Buckets(&'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// Why the API refused a read before asking Cosmos DB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The caller's identity had spent its RU budget (429).
    IdentityBudget,
    /// Every fan-out query slot stayed taken (503).
    Concurrency,
    /// The caller held as many fan-out queries as one caller may (429).
    CallerConcurrency,
    /// The caller held as many live streams as one caller may (429).
    CallerStreams,
}

impl Refused {
    fn label(self) -> &'static str {
        match self {
            Refused::IdentityBudget => "identity_budget",
            Refused::Concurrency => "concurrency",
            Refused::CallerConcurrency => "caller_concurrency",
            Refused::CallerStreams => "caller_streams",
        }
    }
}

/// Where a tile the API serves came from ([`crate::tiles`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileSource {
    /// The API's cache: no tile server request.
    Cache,
    /// The tile server: one request, billed by Azure Maps.
    Server,
    /// The tile server has no such tile (404).
    Missing,
    /// The tile server failed or answered something unusable (502).
    Failed,
    /// Not asked: the caller's tile rate was spent (429).
    Refused,
}

impl TileSource {
    fn label(self) -> &'static str {
        match self {
            TileSource::Cache => "cache",
            TileSource::Server => "server",
            TileSource::Missing => "missing",
            TileSource::Failed => "failed",
            TileSource::Refused => "refused",
        }
    }
}

/// The metrics of one API. Cheap to update from any request.
pub struct Metrics {
    registry: Registry,
    requests: Family<RouteStatus, Counter>,
    request_charge: Family<RouteLabel, Histogram, Buckets>,
    calls: Family<RouteLabel, Histogram, Buckets>,
    latency: Family<RouteLabel, Histogram, Buckets>,
    throttled: Family<RouteLabel, Counter>,
    by_role: Family<RouteRoleStatus, Counter>,
    refused: Family<[(&'static str, &'static str); 1], Counter>,
    feed_charge: Counter<f64, AtomicU64>,
    feed_moves: Counter,
    feed_behind: Family<[(&'static str, String); 1], Gauge<f64, AtomicU64>>,
    stalled_streams: Counter,
    unusable_charges: Counter,
    tiles: Family<[(&'static str, &'static str); 1], Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            request_charge: Family::new_with_constructor(Buckets(&RU_BUCKETS)),
            calls: Family::new_with_constructor(Buckets(&CALL_BUCKETS)),
            latency: Family::new_with_constructor(Buckets(&LATENCY_BUCKETS)),
            throttled: Family::default(),
            by_role: Family::default(),
            refused: Family::default(),
            feed_charge: Counter::default(),
            feed_moves: Counter::default(),
            feed_behind: Family::default(),
            stalled_streams: Counter::default(),
            unusable_charges: Counter::default(),
            tiles: Family::default(),
        };
        let r = &mut metrics.registry;
        r.register(
            "fleet_api_requests",
            "API requests by route and HTTP status",
            metrics.requests.clone(),
        );
        r.register(
            "fleet_api_request_charge",
            "Cosmos DB request units per API operation, by route",
            metrics.request_charge.clone(),
        );
        r.register(
            "fleet_api_cosmos_calls",
            "Cosmos DB HTTP calls per API operation (ranges, pages and retries), by route",
            metrics.calls.clone(),
        );
        r.register(
            "fleet_api_request_duration_seconds",
            "Time to answer an API request, by route",
            metrics.latency.clone(),
        );
        r.register(
            "fleet_api_cosmos_throttled",
            "Cosmos DB calls answered 429 (and retried after their retry-after), by route",
            metrics.throttled.clone(),
        );
        r.register(
            "fleet_api_requests_by_role",
            "Every request, refusals included, by routed path, the caller's role and HTTP status",
            metrics.by_role.clone(),
        );
        r.register(
            "fleet_api_refused",
            "Reads refused before Cosmos DB was asked, by reason: identity_budget (429, the caller's RU budget spent), concurrency (503, no fan-out slot), caller_concurrency (429, the caller's own fan-out slots taken) or caller_streams (429, the caller's own streams open)",
            metrics.refused.clone(),
        );
        r.register(
            "fleet_api_feed_request_charge",
            "Cosmos DB request units the live stream's change-feed follower spent (its snapshot query and feed pages), whoever watches",
            metrics.feed_charge.clone(),
        );
        r.register(
            "fleet_api_feed_moves",
            "Drone moves the change-feed follower took (newer positions)",
            metrics.feed_moves.clone(),
        );
        r.register(
            "fleet_api_feed_behind_seconds",
            "Per partition key range: seconds since the follower last read the range's feed to its end (0: caught up)",
            metrics.feed_behind.clone(),
        );
        r.register(
            "fleet_api_stream_stalled",
            "Live streams dropped because their client took no write for API_STREAM_STALL",
            metrics.stalled_streams.clone(),
        );
        r.register(
            "fleet_api_charge_not_finite",
            "Request charges Cosmos DB reported that are not finite numbers, left out of the budgets",
            metrics.unusable_charges.clone(),
        );
        r.register(
            "fleet_api_map_tiles",
            "Base map tiles asked of the API, by source: cache, server (one tile server request), missing (404), failed (502) or refused (429, the caller's tile rate)",
            metrics.tiles.clone(),
        );
        metrics
    }
}

impl Metrics {
    /// Serves `failures` as the count of API key file versions that did not load.
    pub fn count_key_file_failures(&mut self, failures: Counter) {
        self.registry.register(
            "fleet_api_key_file_reload_failures",
            "API key file versions that could not be read or did not parse (the last good keys stayed in service)",
            failures,
        );
    }

    /// Records a change-feed read that cost `charge` RU; for a feed page, its range and how
    /// long since the range was last read to its end.
    pub fn record_feed(&self, charge: f64, range: Option<(&str, f64)>) {
        self.feed_charge.inc_by(charge);
        if let Some((range, behind_secs)) = range {
            self.feed_behind
                .get_or_create(&[("range", range.to_string())])
                .set(behind_secs);
        }
    }

    /// Counts a drone move the follower took.
    pub fn record_move(&self) {
        self.feed_moves.inc();
    }

    /// Records one answered request of `route`.
    pub fn record(&self, route: &'static str, status: u16, cost: Option<&ReadCost>, secs: f64) {
        let label = [("route", route)];
        self.requests
            .get_or_create(&[("route", route.to_string()), ("status", status.to_string())])
            .inc();
        self.latency.get_or_create(&label).observe(secs);
        if let Some(cost) = cost {
            self.request_charge
                .get_or_create(&label)
                .observe(cost.request_charge);
            self.calls
                .get_or_create(&label)
                .observe(f64::from(cost.calls));
            self.throttled
                .get_or_create(&label)
                .inc_by(u64::from(cost.throttled));
        }
    }

    /// Records one request of the routed path `route` by a caller holding `role` (the
    /// audit's count; `route` is a path template, so the label's values are bounded).
    pub fn record_access(&self, route: &str, role: &'static str, status: u16) {
        self.by_role
            .get_or_create(&[
                ("route", route.to_string()),
                ("role", role.to_string()),
                ("status", status.to_string()),
            ])
            .inc();
    }

    /// Counts one read refused before Cosmos DB was asked.
    pub fn record_refusal(&self, why: Refused) {
        self.refused.get_or_create(&[("reason", why.label())]).inc();
    }

    /// Counts one tile asked of the API.
    pub fn record_tile(&self, source: TileSource) {
        self.tiles
            .get_or_create(&[("source", source.label())])
            .inc();
    }

    /// Counts a live stream dropped because its client stopped taking writes.
    pub fn record_stalled_stream(&self) {
        self.stalled_streams.inc();
    }

    /// Counts a request charge that is not a finite number.
    pub fn record_unusable_charge(&self) {
        self.unusable_charges.inc();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String does not fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_cost_per_route() {
        let m = Metrics::default();
        let cost = ReadCost {
            request_charge: 12.5,
            calls: 4,
            throttled: 1,
            ..ReadCost::default()
        };
        m.record("near", 200, Some(&cost), 0.02);
        m.record("near", 400, None, 0.001);
        let text = m.render();
        assert!(
            text.contains("fleet_api_requests_total{route=\"near\",status=\"200\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("fleet_api_requests_total{route=\"near\",status=\"400\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("fleet_api_request_charge_sum{route=\"near\"} 12.5"),
            "{text}"
        );
        assert!(
            text.contains("fleet_api_cosmos_calls_sum{route=\"near\"} 4"),
            "{text}"
        );
        assert!(
            text.contains("fleet_api_cosmos_throttled_total{route=\"near\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("fleet_api_request_duration_seconds_count{route=\"near\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn counts_requests_by_route_role_and_status() {
        let m = Metrics::default();
        m.record_access("/api/drones", "Fleet.Read", 200);
        m.record_access("/api/drones", "Fleet.Read", 200);
        m.record_access("/api/drones", "none", 401);
        let text = m.render();
        let line = |role: &str, status: u16, n: u32| {
            format!(
                "fleet_api_requests_by_role_total{{route=\"/api/drones\",role=\"{role}\",status=\"{status}\"}} {n}"
            )
        };
        assert!(text.contains(&line("Fleet.Read", 200, 2)), "{text}");
        assert!(text.contains(&line("none", 401, 1)), "{text}");
    }
}
