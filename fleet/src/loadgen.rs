//! The load generator: N simulated drones publishing wire messages (v1) at a total rate
//! to an MQTT broker, bounded in count and in time, reporting the run's figures.
//!
//! Every drone has its own MQTT connection (client id = device id), made by the edge
//! agent's transport ([`edge_agent::Dialer`]: plain MQTT, or IoT Hub over TLS
//! with SAS tokens from device connection strings, trusting the system's roots or a given
//! CA, on port 8883 or a given one, as the agent does; or, onboarded through DPS, each drone
//! registering in a symmetric-key enrollment group as the agent does ([`crate::onboard`])
//! and connecting to the hub it was assigned), and publishes at QoS 1 to IoT Hub's
//! device-to-cloud topic ([`edge_agent::event_topic`]), so the same run works
//! against IoT Hub and against any broker the cloud writer reads. Positions come from the
//! edge agent's simulated routes ([`edge_agent::SimRoute`], seeded by the drone's index).
//! The drones' publications are spread evenly over each interval (no lock-step bursts).
//! A run longer than a SAS token's renewal time reconnects each drone with a fresh token.
//! The report gives messages sent and acknowledged, throughput, and publish latency (PUBLISH written to PUBACK
//! received) p50/p99; with a writer's metrics endpoint, also what the writer received and
//! wrote, its drops by reason, its throttled requests and its lateness.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use rumqttc::{Event, EventLoop, Outgoing, Packet, QoS};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use edge_agent::Clock;
use edge_agent::DEFAULT_CLOCK_MAX_SKEW;
use edge_agent::SimRoute;
use edge_agent::{Dialer, event_topic};
use edge_agent::{Secret, Settings as AgentSettings};
use edge_agent::{SimConfig, TransportConfig};

use crate::onboard::{self, RegistrationTotals, Registrations};
use crate::writer_metrics::{WriterFigures, WriterScraper};

/// Where the drones publish.
#[derive(Debug, Clone)]
pub enum Target {
    /// A plain MQTT broker; device ids are `{id_prefix}{index:05}`.
    Mqtt {
        /// Host.
        host: String,
        /// Port.
        port: u16,
    },
    /// IoT Hub: one device connection string per drone (the drone count is at most their
    /// number), MQTT over TLS with SAS tokens, as the edge agent connects.
    IotHub {
        /// `HostName=...;DeviceId=...;SharedAccessKey=...`, one per drone.
        connection_strings: Vec<String>,
        /// The CA (PEM) that signed the hub's certificate, trusted instead of the system's
        /// roots: a gateway's or a local hub's (the agent's `IOTHUB_CA_FILE`).
        ca_file: Option<PathBuf>,
        /// The hub's MQTT port when it is not 8883 (the agent's `IOTHUB_PORT`).
        port: Option<u16>,
    },
    /// IoT Hub through DPS: each drone registers as `{id_prefix}{index:05}` in a
    /// symmetric-key enrollment group with the key derived from the group's, then publishes
    /// to the hub it was assigned, as the edge agent onboards.
    Dps {
        /// The DPS instance's ID scope (the agent's `DPS_ID_SCOPE`).
        id_scope: String,
        /// The enrollment group's primary key (the agent's `DPS_GROUP_KEY`).
        group_key: Secret,
        /// `host:port` of DPS (the agent's `DPS_ENDPOINT`).
        endpoint: String,
        /// The CA (PEM) that signed DPS's and the hub's certificates, trusted instead of
        /// the system's roots (the agent's `IOTHUB_CA_FILE`).
        ca_file: Option<PathBuf>,
        /// The assigned hub's MQTT port when it is not 8883 (the agent's `IOTHUB_PORT`).
        port: Option<u16>,
        /// The hubs DPS may assign (the agent's `DPS_ALLOWED_HUB_SUFFIX`).
        allowed_hub_suffix: Option<String>,
    },
}

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadgenConfig {
    /// Where to publish.
    pub target: Target,
    /// Number of drones (connections).
    pub drones: usize,
    /// Total messages per second over all drones.
    pub rate: f64,
    /// Stop after this many messages in total (`None`: only the duration bounds the run).
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Duration,
    /// Device ids are `{prefix}{index:05}`.
    pub id_prefix: String,
    /// Where the drones fly (each drone's route is seeded by its index).
    pub sim: SimConfig,
    /// Scrape this Prometheus endpoint of a cloud writer before and after the run.
    pub writer_metrics: Option<String>,
    /// How long to wait for outstanding PUBACKs and for the writer to catch up at the end.
    pub drain: Duration,
}

impl Default for LoadgenConfig {
    fn default() -> Self {
        LoadgenConfig {
            target: Target::Mqtt {
                host: "127.0.0.1".to_owned(),
                port: 1883,
            },
            drones: 100,
            rate: 100.0,
            count: None,
            duration: Duration::from_secs(10),
            id_prefix: "loadgen-".to_owned(),
            sim: SimConfig::default(),
            writer_metrics: None,
            drain: Duration::from_secs(5),
        }
    }
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    Config(String),
    /// A drone's connection settings are unusable (e.g. a malformed connection string).
    #[error("drone {index}: {message}")]
    Drone {
        /// The drone's index (line of the connection string file, from 0).
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The writer's metrics endpoint could not be read.
    #[error(transparent)]
    Writer(#[from] crate::writer_metrics::ScrapeError),
}

/// The figures of one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadReport {
    /// Drones (connections) that took part.
    pub drones: usize,
    /// Through DPS: the drones' registrations.
    pub registration: Option<RegistrationTotals>,
    /// Messages handed to the MQTT clients.
    pub sent: u64,
    /// Messages the broker acknowledged (PUBACK).
    pub acked: u64,
    /// Connection errors seen (each followed by a reconnect).
    pub connection_errors: u64,
    /// Seconds from the first publication to the last acknowledgement.
    pub elapsed_secs: f64,
    /// Acknowledged messages per second.
    pub acked_per_sec: f64,
    /// Publish latency (PUBLISH written to PUBACK) p50, seconds.
    pub publish_latency_p50: Option<f64>,
    /// Publish latency p99, seconds.
    pub publish_latency_p99: Option<f64>,
    /// What the writer did during the run, when its metrics were given.
    pub writer: Option<WriterFigures>,
}

impl LoadReport {
    /// The report as text lines.
    pub fn lines(&self) -> Vec<String> {
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |s| format!("{:.2} ms", s * 1e3));
        let mut lines: Vec<String> = self.registration.iter().map(|r| r.line()).collect();
        lines.extend([
            format!(
                "drones {}   sent {}   acked {}   connection errors {}",
                self.drones, self.sent, self.acked, self.connection_errors
            ),
            format!(
                "throughput {:.0} msg/s over {:.1} s   publish latency p50 {}   p99 {}",
                self.acked_per_sec,
                self.elapsed_secs,
                ms(self.publish_latency_p50),
                ms(self.publish_latency_p99)
            ),
        ]);
        if let Some(writer) = &self.writer {
            lines.extend(writer.lines());
        }
        lines
    }
}

/// Counters shared by the drones of a run.
#[derive(Debug, Default)]
struct Counters {
    /// Messages claimed from the count budget and handed to a client.
    sent: AtomicU64,
    acked: AtomicU64,
    connection_errors: AtomicU64,
    /// Unix-epoch-free instant of the last PUBACK, in microseconds since the run start.
    last_ack_us: AtomicU64,
}

/// Runs the load: returns when the count or the duration is reached (or `shutdown` is
/// cancelled) and every acknowledgement has arrived or the drain time has passed.
pub async fn run(
    config: LoadgenConfig,
    shutdown: CancellationToken,
) -> Result<LoadReport, LoadgenError> {
    if config.drones == 0 {
        return Err(LoadgenError::Config(
            "--drones must be at least 1".to_owned(),
        ));
    }
    if !(config.rate.is_finite() && config.rate > 0.0) {
        return Err(LoadgenError::Config(
            "--rate must be a positive number".to_owned(),
        ));
    }
    let scraper = config.writer_metrics.as_deref().map(WriterScraper::new);
    let before = match &scraper {
        Some(s) => Some(s.scrape().await?),
        None => None,
    };

    let (links, registration) = links(&config).await?;
    let drones_count = links.len();
    let counters = Arc::new(Counters::default());
    let stop_sending = shutdown.child_token();
    let interval = Duration::from_secs_f64(drones_count as f64 / config.rate);
    let start = Instant::now();
    let deadline = start + config.duration;
    let mut drones = tokio::task::JoinSet::new();
    // Simulated drones stamp with this host's clock, as it is.
    let clock = Clock::new(DEFAULT_CLOCK_MAX_SKEW);
    for (index, (device_id, transport)) in links.into_iter().enumerate() {
        let dialer = Dialer::new(transport, device_id.clone(), clock.clone()).map_err(|e| {
            LoadgenError::Drone {
                index,
                message: e.to_string(),
            }
        })?;
        let route = SimRoute::new(&SimConfig {
            seed: index as u64,
            ..config.sim.clone()
        });
        let drone = Drone {
            device_id,
            dialer,
            route,
            drain: config.drain,
            count: config.count,
            counters: counters.clone(),
            start,
            first_send: start + interval.mul_f64(index as f64 / drones_count as f64),
            interval,
        };
        drones.spawn(drone.run(deadline, stop_sending.clone()));
    }
    let mut latencies: Vec<f64> = Vec::new();
    while let Some(joined) = drones.join_next().await {
        if let Ok(samples) = joined {
            latencies.extend(samples);
        }
    }
    let sent = counters.sent.load(Ordering::Relaxed);
    let acked = counters.acked.load(Ordering::Relaxed);
    let elapsed = Duration::from_micros(counters.last_ack_us.load(Ordering::Relaxed))
        .max(Duration::from_millis(1));
    latencies.sort_by(f64::total_cmp);
    let writer = match (&scraper, before) {
        (Some(s), Some(before)) => Some(s.wait_caught_up(&before, acked, config.drain).await?),
        _ => None,
    };
    Ok(LoadReport {
        drones: drones_count,
        registration,
        sent,
        acked,
        connection_errors: counters.connection_errors.load(Ordering::Relaxed),
        elapsed_secs: elapsed.as_secs_f64(),
        acked_per_sec: acked as f64 / elapsed.as_secs_f64(),
        publish_latency_p50: percentile(&latencies, 0.50),
        publish_latency_p99: percentile(&latencies, 0.99),
        writer,
    })
}

/// The `q` quantile of sorted samples (nearest rank).
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The device id and transport settings of each drone, made by the edge agent's own
/// configuration code (the same checks and defaults as a real agent); through DPS, of the
/// drones that registered, with the registrations' totals.
async fn links(
    config: &LoadgenConfig,
) -> Result<(Vec<(String, TransportConfig)>, Option<RegistrationTotals>), LoadgenError> {
    let (settings, registration): (Vec<AgentSettings>, _) = match &config.target {
        Target::Mqtt { host, port } => (
            (0..config.drones)
                .map(|index| AgentSettings {
                    mqtt_url: Some(format!("mqtt://{host}:{port}")),
                    device_id: Some(format!("{}{index:05}", config.id_prefix)),
                    ..AgentSettings::default()
                })
                .collect(),
            None,
        ),
        Target::IotHub {
            connection_strings,
            ca_file,
            port,
        } => (
            connection_strings
                .iter()
                .take(config.drones)
                .map(|cs| AgentSettings {
                    connection_string: Some(Secret::new(cs.as_str())),
                    iothub_ca_file: ca_file.clone(),
                    iothub_port: *port,
                    ..AgentSettings::default()
                })
                .collect(),
            None,
        ),
        Target::Dps {
            id_scope,
            group_key,
            endpoint,
            ca_file,
            port,
            allowed_hub_suffix,
        } => {
            let group = AgentSettings {
                dps_id_scope: Some(id_scope.clone()),
                dps_group_key: Some(group_key.clone()),
                // A lab: every simulated drone derives its key from the group's.
                dps_group_key_on_device: Some(true),
                dps_allowed_hub_suffix: allowed_hub_suffix.clone(),
                dps_endpoint: Some(endpoint.clone()),
                iothub_ca_file: ca_file.clone(),
                ..AgentSettings::default()
            };
            let ids: Vec<String> = (0..config.drones)
                .map(|index| format!("{}{index:05}", config.id_prefix))
                .collect();
            let registrations = Registrations::new(ids.len());
            let provisioned = onboard::register_fleet(&group, &ids, &registrations).await;
            let settings = provisioned
                .into_iter()
                .flatten()
                .map(|s| AgentSettings {
                    iothub_port: *port,
                    ..s
                })
                .collect();
            (settings, Some(registrations.totals()))
        }
    };
    if settings.is_empty() {
        return Err(LoadgenError::Config(match &registration {
            Some(r) => format!("no drones: none registered ({})", r.line()),
            None => "no drones: the connection string file is empty".to_owned(),
        }));
    }
    let links = settings
        .into_iter()
        .enumerate()
        .map(|(index, mut s)| {
            // The load generator keeps nothing on disk and its drones are simulated; both
            // settings are required, and unused here.
            s.buffer_dir = Some(std::env::temp_dir());
            s.position_source = Some("sim".into());
            let agent = s.resolve().map_err(|e| LoadgenError::Drone {
                index,
                message: e.to_string(),
            })?;
            Ok((agent.device_id, agent.transport))
        })
        .collect::<Result<_, LoadgenError>>()?;
    Ok((links, registration))
}

/// What a drone's connection reports.
enum LinkEvent {
    /// A PUBLISH with this packet id was written.
    Written(u16),
    /// The broker acknowledged this packet id.
    Acked(u16),
    /// The connection failed (it is made again after a pause).
    Failed(String),
}

/// One connection of a drone, its event loop polled by a task of its own: a poll is not
/// cancelled when the drone's ticker fires, which would drop a TLS handshake half done
/// (the broker then sees a failed handshake and a second connection). Dropping it stops
/// the task.
struct Link {
    events: mpsc::UnboundedReceiver<LinkEvent>,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    fn drive(mut eventloop: EventLoop) -> Link {
        let (tx, events) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                let event = match eventloop.poll().await {
                    Ok(Event::Outgoing(Outgoing::Publish(pkid))) => LinkEvent::Written(pkid),
                    Ok(Event::Incoming(Packet::PubAck(ack))) => LinkEvent::Acked(ack.pkid),
                    Ok(_) => continue,
                    Err(err) => {
                        if tx.send(LinkEvent::Failed(err.to_string())).is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        Link { events, task }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One simulated drone of the load generator.
struct Drone {
    device_id: String,
    dialer: Dialer,
    route: SimRoute,
    drain: Duration,
    count: Option<u64>,
    counters: Arc<Counters>,
    start: Instant,
    first_send: Instant,
    interval: Duration,
}

impl Drone {
    /// Publishes until the deadline, the count budget or `stop`; then waits (at most the
    /// drain time) for its acknowledgements. Returns its publish latencies in seconds.
    async fn run(self, deadline: Instant, stop: CancellationToken) -> Vec<f64> {
        let (mut client, eventloop, mut renew_after) = self.dialer.dial();
        let mut link = Link::drive(eventloop);
        let mut link_started = Instant::now();
        let mut written_at: HashMap<u16, Instant> = HashMap::new();
        let mut latencies = Vec::new();
        let mut outstanding = 0u64;
        let mut ticker = tokio::time::interval_at(self.first_send.into(), self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seq = 0u64;
        let mut sending = true;
        let mut drain_until = None;
        loop {
            if !sending && outstanding == 0 {
                break;
            }
            if drain_until.is_some_and(|until| Instant::now() >= until) {
                break;
            }
            if renew_after.is_some_and(|after| link_started.elapsed() >= after) {
                // A fresh SAS token before the hub disconnects us; unacknowledged
                // publishes of the old link are given up (counted as not acknowledged).
                let _ = client.try_disconnect();
                let eventloop;
                (client, eventloop, renew_after) = self.dialer.dial();
                link = Link::drive(eventloop);
                link_started = Instant::now();
                written_at.clear();
                outstanding = 0;
            }
            tokio::select! {
                _ = ticker.tick(), if sending => {
                    if Instant::now() >= deadline || stop.is_cancelled() || !self.claim() {
                        sending = false;
                        drain_until = Some(Instant::now() + self.drain);
                        continue;
                    }
                    seq += 1;
                    let now = Utc::now();
                    let payload = self.position(seq, now);
                    let topic = event_topic(&self.device_id, now);
                    if client.try_publish(topic, QoS::AtLeastOnce, false, payload).is_ok() {
                        outstanding += 1;
                    } else {
                        // The request queue is full: the connection is down or too slow.
                        self.counters.sent.fetch_sub(1, Ordering::Relaxed);
                    }
                }
                _ = stop.cancelled(), if sending => {
                    sending = false;
                    drain_until = Some(Instant::now() + self.drain);
                }
                _ = tokio::time::sleep_until(drain_until.unwrap_or(deadline).into()), if drain_until.is_some() => {}
                Some(event) = link.events.recv() => match event {
                    LinkEvent::Written(pkid) => {
                        written_at.insert(pkid, Instant::now());
                    }
                    LinkEvent::Acked(pkid) => {
                        if let Some(at) = written_at.remove(&pkid) {
                            latencies.push(at.elapsed().as_secs_f64());
                        }
                        outstanding = outstanding.saturating_sub(1);
                        self.counters.acked.fetch_add(1, Ordering::Relaxed);
                        let since = self.start.elapsed().as_micros() as u64;
                        self.counters.last_ack_us.fetch_max(since, Ordering::Relaxed);
                    }
                    LinkEvent::Failed(error) => {
                        self.counters.connection_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(device = %self.device_id, %error, "connection error");
                    }
                }
            }
        }
        let _ = client.try_disconnect();
        latencies
    }

    /// Takes one message from the run's count budget.
    fn claim(&self) -> bool {
        let taken = self.counters.sent.fetch_add(1, Ordering::Relaxed);
        if self.count.is_some_and(|count| taken >= count) {
            self.counters.sent.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The encoded wire message of this drone's position number `seq`, taken `now`.
    fn position(&self, seq: u64, now: chrono::DateTime<Utc>) -> Vec<u8> {
        self.route
            .fix_after(self.start.elapsed(), now)
            .position(&self.device_id, seq, now)
            .encode()
            .expect("simulated positions are valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_uses_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 0.5), Some(50.0));
        assert_eq!(percentile(&samples, 0.99), Some(99.0));
        assert_eq!(percentile(&samples, 1.0), Some(100.0));
        assert_eq!(percentile(&samples, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
