//! What the container's indexing policy costs the writer, on the local endpoint that charges
//! writes as Microsoft publishes it (a size-based charge and 0.2 RU per indexed term a write
//! adds or removes): the same drones' positions written through the writer's sink into a
//! container it created (`COSMOS_CREATE_IF_MISSING`: `deploy/cosmos/indexing-policy.json`)
//! and into one with Cosmos DB's default policy (every path indexed). A drone's new position
//! costs at least 30 % less under the project's policy.

mod common;

use std::time::{Duration, Instant};
use test_harness::eventually;

use chrono::{TimeDelta, Utc};
use cloud_writer::internals::{Ack, CosmosSink, PositionWrite};
use cloud_writer::{Metrics, NewestWins};
use common::sink::{sink_settings, start_sink, writer_container};
use common::*;
use cosmos_sim::CosmosSim;
use telemetry::Position;

const DRONES: usize = 100;

/// Writes one position of every drone (its `seq`th) through `sink` and waits until all
/// are written.
async fn round(sink: &CosmosSink, metrics: &Metrics, seq: u64) {
    let base = Utc::now() - TimeDelta::seconds(60);
    for d in 0..DRONES {
        sink.write(PositionWrite {
            position: Position {
                device_id: device(d),
                seq,
                ts: base + TimeDelta::seconds(5 * seq as i64),
                lat: 47.6 + d as f64 / 1000.0,
                lon: -122.3 + seq as f64 / 1000.0,
                alt_m: Some(100.0 + seq as f64),
                heading_deg: Some(90.0),
                speed_mps: Some(10.0 + seq as f64),
                battery_pct: Some(90 - seq as u8),
                gnss: Default::default(),
            },
            enqueued: Some(base + TimeDelta::seconds(5 * seq as i64 + 1)),
            received_at: Instant::now(),
            ack: Ack::none(),
        })
        .await;
    }
    eventually(
        "the round written",
        Duration::from_secs(30),
        async || metrics.counts().written,
        |w| *w == seq * DRONES as u64,
    )
    .await;
}

/// RU per drone of its first position (a create) and of its next (a patch) in `name`,
/// through one sink, as a running writer writes them.
async fn per_position(sim: &CosmosSim, name: &str) -> (f64, f64) {
    let container = writer_container(sim, name).await;
    let (sink, metrics) = start_sink(&container, sink_settings(NewestWins::Patch));
    let start = charged(sim, name);
    round(&sink, &metrics, 1).await;
    let created = charged(sim, name);
    // The service stamps `_ts` in seconds, and a drone's next report comes 5 s later: its
    // new position changes `_ts` too, so the round starts in a later second.
    let first_second = Utc::now().timestamp();
    eventually(
        "the next second",
        Duration::from_secs(2),
        async || Utc::now().timestamp(),
        |now| *now > first_second,
    )
    .await;
    round(&sink, &metrics, 2).await;
    let patched = charged(sim, name);
    sink.close().await;
    let n = DRONES as f64;
    ((created - start) / n, (patched - created) / n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_costs_at_least_30_percent_less_under_the_projects_indexing_policy() {
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    // Made before the writer starts, with the service's default policy; the writer creates
    // the other.
    sim.create_container("telemetry", "indexed", "/deviceId")
        .unwrap();
    let (default_create, default_patch) = per_position(&sim, "indexed").await;
    let (create, patch) = per_position(&sim, "positions").await;
    eprintln!(
        "RU per position: default policy create {default_create:.2}, patch {default_patch:.2}; \
         the project's create {create:.2}, patch {patch:.2}"
    );
    assert!(
        patch <= 0.7 * default_patch,
        "a new position costs {patch:.2} RU under the project's policy, {default_patch:.2} under the default"
    );
    assert!(create < default_create);
}
