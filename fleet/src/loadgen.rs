//! The load generator: N simulated drones publishing wire messages (v1) at a total rate
//! to an MQTT broker, bounded in count and in time, reporting the run's figures.
//!
//! Every drone has its own MQTT connection (client id = device id) and publishes at
//! QoS 1 to `devices/{id}/messages/events/`, IoT Hub's device-to-cloud topic, so the same
//! run works against any broker the cloud writer reads. The drones' publications are
//! spread evenly over each interval (no lock-step bursts). The report gives messages
//! sent and acknowledged, throughput, and publish latency (PUBLISH written to PUBACK
//! received) p50/p99; with a writer's metrics endpoint, also what the writer received and
//! wrote, its drops by reason, its throttled requests and its lateness.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use rumqttc::{AsyncClient, Event, MqttOptions, Outgoing, Packet, QoS};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::area::FleetArea;
use crate::writer_metrics::{WriterFigures, WriterScraper};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadgenConfig {
    /// Broker host.
    pub host: String,
    /// Broker port.
    pub port: u16,
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
    /// Where the drones fly.
    pub area: FleetArea,
    /// Scrape this Prometheus endpoint of a cloud writer before and after the run.
    pub writer_metrics: Option<String>,
    /// How long to wait for outstanding PUBACKs and for the writer to catch up at the end.
    pub drain: Duration,
}

impl Default for LoadgenConfig {
    fn default() -> Self {
        LoadgenConfig {
            host: "127.0.0.1".to_owned(),
            port: 1883,
            drones: 100,
            rate: 100.0,
            count: None,
            duration: Duration::from_secs(10),
            id_prefix: "loadgen-".to_owned(),
            area: FleetArea::default(),
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
    /// The writer's metrics endpoint could not be read.
    #[error(transparent)]
    Writer(#[from] crate::writer_metrics::ScrapeError),
}

/// The figures of one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadReport {
    /// Drones (connections) that took part.
    pub drones: usize,
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
        let mut lines = vec![
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
        ];
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

    let counters = Arc::new(Counters::default());
    let stop_sending = shutdown.child_token();
    let interval = Duration::from_secs_f64(config.drones as f64 / config.rate);
    let start = Instant::now();
    let deadline = start + config.duration;
    let mut drones = tokio::task::JoinSet::new();
    for index in 0..config.drones {
        let drone = Drone {
            device_id: format!("{}{index:05}", config.id_prefix),
            index,
            config: config.clone(),
            counters: counters.clone(),
            start,
            first_send: start + interval.mul_f64(index as f64 / config.drones as f64),
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
        drones: config.drones,
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

/// One simulated drone of the load generator.
struct Drone {
    device_id: String,
    index: usize,
    config: LoadgenConfig,
    counters: Arc<Counters>,
    start: Instant,
    first_send: Instant,
    interval: Duration,
}

impl Drone {
    /// Publishes until the deadline, the count budget or `stop`; then waits (at most the
    /// drain time) for its acknowledgements. Returns its publish latencies in seconds.
    async fn run(self, deadline: Instant, stop: CancellationToken) -> Vec<f64> {
        let mut options = MqttOptions::new(&self.device_id, &self.config.host, self.config.port);
        options.set_keep_alive(Duration::from_secs(30));
        options.set_clean_session(true);
        options.set_max_packet_size(
            telemetry::wire::MAX_MESSAGE_BYTES + 1024,
            telemetry::wire::MAX_MESSAGE_BYTES + 1024,
        );
        let (client, mut eventloop) = AsyncClient::new(options, 64);
        let topic = format!("devices/{}/messages/events/", self.device_id);
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
            tokio::select! {
                _ = ticker.tick(), if sending => {
                    if Instant::now() >= deadline || stop.is_cancelled() || !self.claim() {
                        sending = false;
                        drain_until = Some(Instant::now() + self.config.drain);
                        continue;
                    }
                    seq += 1;
                    let payload = self.position(seq);
                    if client.try_publish(&topic, QoS::AtLeastOnce, false, payload).is_ok() {
                        outstanding += 1;
                    } else {
                        // The request queue is full: the connection is down or too slow.
                        self.counters.sent.fetch_sub(1, Ordering::Relaxed);
                    }
                }
                _ = stop.cancelled(), if sending => {
                    sending = false;
                    drain_until = Some(Instant::now() + self.config.drain);
                }
                _ = tokio::time::sleep_until(drain_until.unwrap_or(deadline).into()), if drain_until.is_some() => {}
                event = eventloop.poll() => match event {
                    Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                        written_at.insert(pkid, Instant::now());
                    }
                    Ok(Event::Incoming(Packet::PubAck(ack))) => {
                        if let Some(at) = written_at.remove(&ack.pkid) {
                            latencies.push(at.elapsed().as_secs_f64());
                        }
                        outstanding = outstanding.saturating_sub(1);
                        self.counters.acked.fetch_add(1, Ordering::Relaxed);
                        let since = self.start.elapsed().as_micros() as u64;
                        self.counters.last_ack_us.fetch_max(since, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(err) => {
                        self.counters.connection_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(device = %self.device_id, error = %err, "connection error");
                        tokio::time::sleep(Duration::from_millis(200)).await;
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
        if self.config.count.is_some_and(|count| taken >= count) {
            self.counters.sent.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The encoded wire message of this drone's position number `seq`.
    fn position(&self, seq: u64) -> Vec<u8> {
        let flight_secs = self.start.elapsed().as_secs_f64();
        let (lat, lon, heading) =
            self.config
                .area
                .orbit(self.index, self.config.drones, flight_secs);
        telemetry::Position {
            device_id: self.device_id.clone(),
            seq,
            ts: Utc::now(),
            lat,
            lon,
            alt_m: Some(120.0),
            heading_deg: Some(heading),
            speed_mps: Some(12.0),
            battery_pct: Some(100 - (seq % 80) as u8),
        }
        .encode()
        .expect("generated positions are valid")
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
