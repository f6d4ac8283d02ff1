//! The demo's cloud writer: its configuration for the scenario and the topology, and
//! waiting until it has subscribed.

use std::time::{Duration, Instant};

use cloud_writer::Writer;
use cosmos_sim::CosmosSim;

use super::scenario::Scenario;
use super::{CONTAINER, DATABASE, DemoConfig};
use crate::broker::Broker;

/// How often the demo's replicas balance and renew their partition ownerships.
pub const BALANCING_INTERVAL: Duration = Duration::from_secs(2);

/// The writer's configuration for the scenario on the MQTT path (see `config_for`).
pub fn writer_config(
    config: &DemoConfig,
    broker: &Broker,
    sim: &CosmosSim,
) -> cloud_writer::WriterConfig {
    config_for(config, &broker.writer_url(), sim)
}

/// The writer's configuration for the scenario: the source `source` (a broker's URL or
/// the hub's Event Hubs connection string; on Event Hubs from the earliest event, the
/// checkpoints in the endpoint's database, balancing every [`BALANCING_INTERVAL`],
/// ownerships expiring after the demo's `ownership_expiry`), the endpoint's container
/// ([`DATABASE`]/[`CONTAINER`]), the scaled cutoff, no metrics listener (the demo reads
/// the metrics in-process); forced past the partition key guard in the forced
/// hot-partition run.
pub(super) fn config_for(
    config: &DemoConfig,
    source: &str,
    sim: &CosmosSim,
) -> cloud_writer::WriterConfig {
    let duration = |d: Duration| Some(cloud_writer::DurationSetting(d));
    let settings = cloud_writer::Settings {
        cosmos_endpoint: Some(sim.endpoint().parse().expect("the endpoint is a URL")),
        cosmos_key: Some(cloud_writer::Secret::new(sim.key())),
        cosmos_database: Some(DATABASE.to_owned()),
        cosmos_container: Some(CONTAINER.to_owned()),
        // The checkpoint container is made at the first start.
        cosmos_create_if_missing: Some(true),
        writer_source: Some(cloud_writer::Secret::new(source)),
        mqtt_client_id: Some("cloud-writer-demo".to_owned()),
        eventhubs_start_position: Some("earliest".to_owned()),
        eventhubs_load_balancing_interval: duration(BALANCING_INTERVAL),
        eventhubs_ownership_expiry: duration(config.ownership_expiry),
        metrics_addr: Some("off".to_owned()),
        probe_addr: Some("off".to_owned()),
        writer_force_missing_partition_key: Some(config.forced()),
        summary_interval: duration(Duration::from_secs(3600)),
        history: Some(config.history.is_some()),
        history_ttl: config.history.map(cloud_writer::DurationSetting),
        ..cloud_writer::Settings::default()
    };
    let mut writer = settings
        .resolve()
        .expect("the demo's writer settings are complete and valid");
    writer.staleness.stale_after = config.cutoff();
    if let Some(interval) = config.min_write_interval {
        writer.min_write_interval = interval.div_f64(config.speedup);
    }
    if let Some(history) = writer.history.as_mut() {
        // Device time is wall time here: the stretches shrink with the clock, so that a
        // segment holds as many positions as the plan's.
        history.segment_span = cloud_writer::DEFAULT_SEGMENT_SPAN.div_f64(config.speedup);
        history.hold = cloud_writer::DEFAULT_SEGMENT_HOLD.div_f64(config.speedup);
    }
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
        if writer.metrics().snapshot().source_connected {
            return true;
        }
        poll.tick().await;
    }
    false
}
