//! The writer's Cosmos DB sink on its own, as the sink tests run it: over a container the
//! writer opened on the local endpoint, with the settings they share, fed positions that
//! need no acknowledgement.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cloud_writer::internals::{
    Ack, CosmosSink, Encoder, PositionWrite, Rejects, SinkSettings, bulk_config, cosmos_client,
    open_container,
};
use cloud_writer::{Metrics, NewestWins};
use cosmos::ContainerClient;
use cosmos_sim::CosmosSim;
use telemetry::{DocumentLayout, Position, StalenessPolicy};

use super::settings;

/// A local endpoint of two ranges that does not throttle and answers after 5 ms (so that
/// batches overlap in flight).
pub async fn latent_endpoint() -> CosmosSim {
    CosmosSim::builder()
        .partitions(2)
        .ru_per_sec(f64::INFINITY)
        .latency(Duration::from_millis(5))
        .start()
        .await
        .unwrap()
}

/// Container `name` on `sim`, opened (and created) as the writer opens it.
pub async fn writer_container(sim: &CosmosSim, name: &str) -> ContainerClient {
    let config = settings(&sim.endpoint(), "mqtt://127.0.0.1:1", name)
        .resolve()
        .unwrap();
    let client = cosmos_client(&config.cosmos).unwrap();
    open_container(&client, &config.cosmos, &DocumentLayout::default(), None)
        .await
        .unwrap()
        .container
}

/// The tests' sink settings in `mode`: default staleness, 1000 high-water marks, 1000
/// writes in flight, no key file, no history.
pub fn sink_settings(mode: NewestWins) -> SinkSettings {
    SinkSettings {
        newest_wins: mode,
        staleness: StalenessPolicy::default(),
        high_water_capacity: 1000,
        bulk: bulk_config(1000),
        key_file: None,
        segment_hold: Duration::ZERO,
    }
}

/// A sink over `container` with `settings` (patch documents encoded in the patch mode),
/// and its metrics.
pub fn start_sink(
    container: &ContainerClient,
    settings: SinkSettings,
) -> (CosmosSink, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let patch = settings.newest_wins == NewestWins::Patch;
    let sink = CosmosSink::start(
        container.clone(),
        Encoder::new(DocumentLayout::default(), patch, None),
        settings,
        metrics.clone(),
        Rejects::new(metrics.clone(), None).unwrap(),
    );
    (sink, metrics)
}

/// A position of `device` at `lat`, `lon` with its battery at 50 % and no other optional
/// field, as the sink takes it (acknowledged to no one).
pub fn position_write(
    device: &str,
    seq: u64,
    ts: DateTime<Utc>,
    lat: f64,
    lon: f64,
) -> PositionWrite {
    PositionWrite {
        position: Position {
            device_id: device.into(),
            seq,
            ts,
            lat,
            lon,
            alt_m: None,
            heading_deg: None,
            speed_mps: None,
            battery_pct: Some(50),
            gnss: Default::default(),
        },
        enqueued: None,
        received_at: Instant::now(),
        ack: Ack::none(),
    }
}
