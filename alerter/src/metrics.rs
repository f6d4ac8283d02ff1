//! The alerter's Prometheus metrics, served as text at `/metrics` (beside `/healthz`):
//! alerts by rule, kind and outcome (`delivered` or `dead_lettered`, counted per alert once
//! every destination has it), changes judged, RU spent per purpose (feed, leases, state,
//! silence sweep, alert records), leases held, and rules files that did not load.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::Router;
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use serde_json::Value;

/// How an alert's delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every destination took it.
    Delivered,
    /// A destination refused it, or kept failing past `ALERT_RETRY_FOR`: it is in the
    /// dead-letter file.
    DeadLettered,
}

impl Outcome {
    /// Its name in metrics and alert records.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::DeadLettered => "dead_lettered",
        }
    }
}

/// What the RU went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Reading the positions' change feed.
    Feed,
    /// Creating, reading, renewing and checkpointing leases.
    Leases,
    /// Reading and writing the drones' judging state.
    State,
    /// The query for silent drones.
    Sweep,
    /// Recording alerts for fleet-api.
    Records,
}

impl Purpose {
    fn label(self) -> &'static str {
        match self {
            Purpose::Feed => "feed",
            Purpose::Leases => "leases",
            Purpose::State => "state",
            Purpose::Sweep => "sweep",
            Purpose::Records => "records",
        }
    }
}

type AlertLabels = [(&'static str, String); 3];

/// The metrics of one alerter.
pub struct Metrics {
    registry: Registry,
    alerts: Family<AlertLabels, Counter>,
    changes: Counter,
    request_charge: Family<[(&'static str, &'static str); 1], Counter<f64, AtomicU64>>,
    leases: Gauge,
    rules_failures: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let alerts = Family::<AlertLabels, Counter>::default();
        registry.register(
            "alerter_alerts",
            "Alerts by rule, kind and outcome (delivered, dead_lettered)",
            alerts.clone(),
        );
        let changes = Counter::default();
        registry.register(
            "alerter_changes",
            "Changed documents read from the change feed and judged",
            changes.clone(),
        );
        let request_charge = Family::default();
        registry.register(
            "alerter_request_charge",
            "RU spent, by purpose (feed, leases, state, sweep, records)",
            request_charge.clone(),
        );
        let leases = Gauge::default();
        registry.register(
            "alerter_leases_held",
            "Leases this instance holds",
            leases.clone(),
        );
        let rules_failures = Counter::default();
        registry.register(
            "alerter_rules_load_failures",
            "Rules files that changed but could not be used",
            rules_failures.clone(),
        );
        Metrics {
            registry,
            alerts,
            changes,
            request_charge,
            leases,
            rules_failures,
        }
    }
}

impl Metrics {
    /// Counts the outcome of an alert's CloudEvent.
    pub fn alert(&self, event: &Value, outcome: Outcome) {
        let data = |key: &str| event["data"][key].as_str().unwrap_or_default().to_string();
        self.alerts
            .get_or_create(&[
                ("rule", data("rule")),
                ("kind", data("alert")),
                ("outcome", outcome.label().to_string()),
            ])
            .inc();
    }

    /// Counts `n` changes judged.
    pub fn changes(&self, n: usize) {
        self.changes.inc_by(n as u64);
    }

    /// Counts RU spent on `purpose`.
    pub fn charge(&self, purpose: Purpose, ru: f64) {
        self.request_charge
            .get_or_create(&[("purpose", purpose.label())])
            .inc_by(ru);
    }

    /// Sets the leases held.
    pub fn leases_held(&self, n: usize) {
        self.leases.set(n as i64);
    }

    /// Counts a rules file that could not be used.
    pub fn rules_failed(&self) {
        self.rules_failures.inc();
    }

    /// The text exposition.
    pub fn text(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String does not fail");
        out
    }
}

/// Serves `/metrics`, and `/healthz` (200 while the process serves: the liveness probe),
/// on `listener` until `stop`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move { metrics.text() }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

/// Where `/metrics` listens by default.
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9466);
