//! The demo's alerts (`--alerts`): the alerter following the positions' change feed while
//! the fleet flies, judging by a fence across the fleet's area and a silent-drone rule,
//! delivering to the demo's webhook receiver ([`receiver`]); a few drones' agents killed
//! mid-flight; and what the receiver took, for the report.
//!
//! - The fence: a band across the fleet's area, east to west, about its centre's latitude,
//!   written to the geofences container as fleet-api stores a fence (so the live map shows
//!   it, and fleet-api's `/api/alerts` lists the alerts).
//! - The rules file, in the run's temporary directory: the geofence rule (a margin) and the
//!   silent rule (`silentAfter` in flight time, scaled to wall time like the cutoff).
//! - The alerter: the `alerter` program's own `run`, in this process on a runtime of its
//!   own, as the writers run, with short lease and sweep intervals, from the feed's
//!   beginning.
//! - The kill: at a quarter of the flight the last drones' agents are aborted as a process
//!   kill would stop them (their tasks dropped mid-flight: nothing flushed, connections
//!   cut). They are the last of the fleet, so that the drones the hub's twins retune (the
//!   first) are not among them.
//! - The end: once every killed drone's silent alert arrived (bounded), the alerter stops,
//!   before the fleet, whose stopped agents would otherwise all turn silent.

mod receiver;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use cosmos::{ContainerSetup, CosmosClient, CosmosConfig, Credential, MasterKey};
use cosmos_sim::CosmosSim;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::fleet::{Fleet, device_id};
use super::{CONTAINER, DATABASE, DemoConfig, DemoError, Scenario};
use crate::report::{AlertReport, ReceivedAlert};
use receiver::Receiver;

/// The fence's id.
const FENCE: &str = "fleet-band";
/// The geofence rule's name.
const FENCE_RULE: &str = "fleet-band";
/// The silent rule's name.
const SILENT_RULE: &str = "silent";
/// The fence's container, fleet-api's and the alerter's default.
const FENCE_CONTAINER: &str = "geofences";
/// The band's height, north to south, metres.
const BAND_M: f64 = 600.0;
/// How far past the area's radius the band reaches east and west, metres (routes reach
/// about 1.5 km past their centres).
const BAND_OVERHANG_M: f64 = 2_000.0;
/// The geofence rule's margin, metres.
const MARGIN_M: f64 = 25.0;
/// Metres per degree of latitude.
const METRES_PER_DEGREE: f64 = 111_320.0;
/// How long past `silentAfter` the end waits for the killed drones' silent alerts.
const SILENT_WAIT: Duration = Duration::from_secs(30);
/// The webhook's HMAC key (a local demo's).
const SECRET: &str = "fleet-demo-webhook-secret";

/// The alerts part of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertsConfig {
    /// Drones whose agents are killed mid-flight (the last of the fleet).
    pub kill: usize,
    /// The silent rule's `silentAfter`, flight time.
    pub silent_after: Duration,
}

impl Default for AlertsConfig {
    /// Three drones killed; silent after a minute of flight (twelve reports missed).
    fn default() -> Self {
        AlertsConfig {
            kill: 3,
            silent_after: Duration::from_secs(60),
        }
    }
}

impl AlertsConfig {
    /// Checks the settings against the run's.
    pub(super) fn check(&self, config: &DemoConfig) -> Result<(), String> {
        if config.scenario == Scenario::HotPartition {
            return Err(
                "--alerts needs positions keyed on /deviceId: not with hot-partition".into(),
            );
        }
        let drones = config.drones;
        if self.kill == 0 || self.kill > drones / 2 {
            return Err(format!(
                "--alerts-kill must be between 1 and half the fleet ({})",
                drones / 2
            ));
        }
        if self.silent_after < super::REPORT_INTERVAL * 3 {
            return Err(
                "--alerts-silent-after must be at least three report intervals (15s)".into(),
            );
        }
        Ok(())
    }
}

/// The alerter, the receiver and the kill, while the fleet flies.
pub(super) struct Alerts {
    receiver: Receiver,
    runtime: tokio::runtime::Runtime,
    alerter: tokio::task::JoinHandle<anyhow::Result<()>>,
    stop: CancellationToken,
    killed: Vec<String>,
    kill_at: Duration,
    killed_at: Option<Duration>,
    silent_after: Duration,
    extent: String,
}

impl Alerts {
    /// Writes the fence and the rules, starts the receiver and the alerter.
    pub(super) async fn start(
        config: &DemoConfig,
        alerts: &AlertsConfig,
        sim: &CosmosSim,
        work: &Path,
    ) -> Result<Alerts, DemoError> {
        let fail =
            |what: &str, e: &dyn std::fmt::Display| DemoError::Alerts(format!("{what}: {e}"));
        let extent = write_fence(config, sim)
            .await
            .map_err(|e| fail("writing the fence", &e))?;
        let silent_after = alerts.silent_after.div_f64(config.speedup);
        let rules = work.join("alert-rules.json");
        let text = json!({"rules": [
            {"name": FENCE_RULE, "kind": "geofence", "fences": [FENCE], "marginM": MARGIN_M},
            {"name": SILENT_RULE, "kind": "silent", "silentAfter": format!("{}ms", silent_after.as_millis())},
        ]});
        std::fs::write(&rules, text.to_string())?;
        let receiver = Receiver::start(SECRET).await?;
        let duration = |d: Duration| Some(settings::DurationSetting(d));
        let given = alerter::Settings {
            cosmos_endpoint: Some(sim.endpoint().parse().expect("the endpoint is a URL")),
            cosmos_key: Some(settings::Secret::new(sim.key())),
            cosmos_database: Some(DATABASE.to_owned()),
            cosmos_container: Some(CONTAINER.to_owned()),
            cosmos_geofence_container: Some(FENCE_CONTAINER.to_owned()),
            alert_rules_file: Some(rules),
            alert_webhook_urls: Some(receiver.url().to_owned()),
            alert_webhook_secret: Some(settings::Secret::new(SECRET)),
            alert_instance: Some("alerter-demo".to_owned()),
            alert_feed_start: Some(alerter::FeedStart::Beginning),
            alert_feed_poll: duration(Duration::from_millis(100)),
            alert_lease_interval: duration(Duration::from_secs(1)),
            alert_lease_expiry: duration(Duration::from_secs(10)),
            alert_silent_sweep: duration(Duration::from_millis(250).min(silent_after / 4)),
            alert_retry_for: duration(Duration::from_secs(10)),
            alert_dead_letter_file: Some(work.join("alerts-dead-letter.jsonl")),
            alert_metrics_addr: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            ..alerter::Settings::default()
        };
        let resolved = given
            .resolve()
            .map_err(|e| fail("the alerter's settings", &e))?;
        let stop = CancellationToken::new();
        // Its own runtime, as a process of its own: the fleet's load does not starve its
        // lease renewals.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("alerter")
            .enable_all()
            .build()?;
        let alerter = runtime.spawn(alerter::run(resolved, stop.clone()));
        let killed = (0..alerts.kill)
            .map(|i| device_id(config.drones - 1 - i))
            .collect();
        Ok(Alerts {
            receiver,
            runtime,
            alerter,
            stop,
            killed,
            kill_at: config.duration / 4,
            killed_at: None,
            silent_after,
            extent,
        })
    }

    /// When into the flight the agents are killed.
    pub(super) fn kill_at(&self) -> Duration {
        self.kill_at
    }

    /// Whether the kill is still to come.
    pub(super) fn kill_pending(&self) -> bool {
        self.killed_at.is_none()
    }

    /// Kills the agents of the drones chosen, `into` the flight.
    pub(super) fn kill(&mut self, fleet: &mut Fleet, into: Duration) {
        fleet.kill(&self.killed);
        self.killed_at = Some(into);
        tracing::info!(drones = ?self.killed, "drone agents killed");
    }

    /// Waits until every killed drone's silent alert arrived (or [`SILENT_WAIT`] past
    /// `silentAfter`, or the user asked to stop), stops the alerter, and says what the
    /// receiver took.
    pub(super) async fn finish(self, shutdown: &CancellationToken) -> AlertReport {
        let deadline = Instant::now() + self.silent_after + SILENT_WAIT;
        let mut poll = tokio::time::interval(Duration::from_millis(100));
        while self.killed_at.is_some()
            && Instant::now() < deadline
            && !shutdown.is_cancelled()
            && !self.alerter.is_finished()
            && !self
                .receiver
                .read(|r| self.killed.iter().all(|d| r.silent_of(d) > 0))
        {
            poll.tick().await;
        }
        self.stop.cancel();
        let alerter_error = match self.alerter.await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("{e:#}")),
            Err(e) => Some(e.to_string()),
        };
        // A runtime cannot be dropped inside another one's task.
        self.runtime.shutdown_background();
        let mut report = self.receiver.read(|r| summary(r, &self.killed));
        report.webhook = self.receiver.url().to_owned();
        report.fence = FENCE.to_owned();
        report.fence_extent = self.extent;
        report.fence_rule = FENCE_RULE.to_owned();
        report.silent_rule = SILENT_RULE.to_owned();
        report.silent_after_secs = self.silent_after.as_secs_f64();
        report.killed = self.killed;
        report.killed_at_secs = self.killed_at.map(|d| d.as_secs_f64());
        report.alerter_error = alerter_error;
        report
    }
}

/// The counts of what the receiver took, the killed drones' silent alerts apart.
fn summary(received: &receiver::Received, killed: &[String]) -> AlertReport {
    let mut report = AlertReport {
        refused: received.refused,
        ..AlertReport::default()
    };
    for id in &received.order {
        let arrival = &received.by_id[id];
        let data = &arrival.event["data"];
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let alert = ReceivedAlert {
            id: id.clone(),
            rule: text(&data["rule"]),
            alert: text(&data["alert"]),
            device: text(&data["deviceId"]),
            fence: data["fence"].as_str().map(str::to_owned),
            device_time: text(&data["deviceTime"]),
            deliveries: arrival.times,
        };
        report.deliveries += arrival.times;
        *report
            .by_rule
            .entry(alert.rule.clone())
            .or_default()
            .entry(alert.alert.clone())
            .or_default() += 1;
        if arrival.differed {
            report.conflicting.push(id.clone());
        } else if arrival.times > 1 {
            report.repeated.insert(id.clone(), arrival.times);
        }
        if alert.alert == "silent" {
            if killed.contains(&alert.device) {
                *report
                    .silent_of_killed
                    .entry(alert.device.clone())
                    .or_default() += 1;
            } else if !report.silent_live.contains(&alert.device) {
                report.silent_live.push(alert.device.clone());
            }
        }
        report.alerts.push(alert);
    }
    report
}

/// Writes the band across the fleet's area to the geofences container as fleet-api's
/// `PUT /api/geofences/{id}` stores a fence (the container made as it makes it); returns
/// the band in words.
async fn write_fence(config: &DemoConfig, sim: &CosmosSim) -> Result<String, cosmos::CosmosError> {
    let key = MasterKey::from_base64(sim.key()).expect("the endpoint's key is base64");
    let client = CosmosClient::new(CosmosConfig::new(
        sim.endpoint().parse().expect("the endpoint is a URL"),
        Credential::MasterKey(key),
    ))?;
    let fences = client.container(DATABASE, FENCE_CONTAINER);
    fences
        .create_if_missing(&ContainerSetup::new("/id"))
        .await?;
    let (lat, lon) = config.home;
    let half_width_m = config.area_radius_m + BAND_OVERHANG_M;
    let dlat = BAND_M / 2.0 / METRES_PER_DEGREE;
    let dlon = half_width_m / (METRES_PER_DEGREE * lat.to_radians().cos());
    let (south, north, west, east) = (lat - dlat, lat + dlat, lon - dlon, lon + dlon);
    let ring = [
        [west, south],
        [east, south],
        [east, north],
        [west, north],
        [west, south],
    ];
    let doc = json!({
        "id": FENCE, "kind": "geofence",
        "geometry": {"type": "Polygon", "coordinates": [ring]}, "properties": {},
        "updatedAt": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    });
    fences
        .upsert(
            FENCE,
            &serde_json::to_vec(&doc).expect("a JSON value serializes"),
        )
        .await?;
    Ok(format!(
        "a band {BAND_M:.0} m by {:.1} km across the area, latitude {south:.4} to {north:.4}",
        2.0 * half_width_m / 1000.0
    ))
}
