//! The demo's cloud writer: its configuration for the scenario, and reading its progress
//! (subscribed, settled) from its metrics.

use std::time::{Duration, Instant};

use cloud_writer::Writer;
use cosmos_sim::CosmosSim;
use tokio_util::sync::CancellationToken;

use super::scenario::Scenario;
use super::{CONTAINER, DATABASE, DemoConfig};
use crate::broker::Broker;
use crate::prom::Scrape;
use crate::writer_metrics::names;

/// The writer's configuration for the scenario: the MQTT source on the broker, the
/// endpoint's container ([`DATABASE`]/[`CONTAINER`]), the scaled cutoff, no metrics
/// listener (the demo reads the metrics in-process); forced past the partition key guard
/// in the forced hot-partition run.
pub fn writer_config(
    config: &DemoConfig,
    broker: &Broker,
    sim: &CosmosSim,
) -> cloud_writer::WriterConfig {
    let settings = cloud_writer::Settings {
        cosmos_endpoint: Some(sim.endpoint().parse().expect("the endpoint is a URL")),
        cosmos_key: Some(cloud_writer::config::Secret::new(sim.key())),
        cosmos_database: Some(DATABASE.to_owned()),
        cosmos_container: Some(CONTAINER.to_owned()),
        writer_source: Some(cloud_writer::config::Secret::new(broker.url())),
        mqtt_client_id: Some("cloud-writer-demo".to_owned()),
        metrics_addr: Some("off".to_owned()),
        writer_force_missing_partition_key: Some(config.forced()),
        summary_interval: Some(cloud_writer::config::DurationSetting(Duration::from_secs(
            3600,
        ))),
        ..cloud_writer::Settings::default()
    };
    let mut writer = settings
        .resolve()
        .expect("the demo's writer settings are complete and valid");
    writer.staleness.stale_after = config.cutoff();
    if config.scenario == Scenario::Serial {
        // One message per pipeline batch: no coalescing of a drone's positions either.
        writer.batch_max_messages = 1;
    }
    writer
}

/// Waits until the writer's source is connected and subscribed (its metric says so), so
/// that nothing published from then on is missed; false on timeout.
pub async fn wait_until_subscribed(writer: &Writer, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut poll = tokio::time::interval(Duration::from_millis(10));
    while Instant::now() < deadline {
        if writer_scrape(writer).sum(names::SOURCE_CONNECTED, &[]) >= 1.0 {
            return true;
        }
        poll.tick().await;
    }
    false
}

/// The writer's metrics, parsed.
pub(super) fn writer_scrape(writer: &Writer) -> Scrape {
    Scrape::parse(&writer.metrics().render()).unwrap_or_default()
}

/// Waits until the writer has a final outcome for every position the fleet published
/// (or `limit` passes, or the user asks to stop).
pub(super) async fn settle(
    writer: &Writer,
    published: u64,
    limit: Duration,
    shutdown: &CancellationToken,
) {
    let deadline = Instant::now() + limit;
    let mut poll = tokio::time::interval(Duration::from_millis(100));
    while Instant::now() < deadline && !shutdown.is_cancelled() {
        let counts = writer.counts();
        if counts.received >= published && counts.finished() >= counts.received {
            return;
        }
        poll.tick().await;
    }
}
