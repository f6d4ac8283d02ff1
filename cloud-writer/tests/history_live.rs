//! History as track segments through the live path: `cloud-writer` processes reading the
//! local hub's Event Hubs endpoint (`crates/hub-sim`) into the local Cosmos endpoint, the
//! segments read back with the official `@azure/cosmos` SDK (`tests/sdk/track_segments.mjs`),
//! not with the writer's own decoder.
//!
//! - 20 drones x 120 positions 5 s apart (device time): history adds at most 1.0 RU per
//!   position (the endpoint's charges for segment documents) and stores at most a fifth of
//!   the bytes of a document per position; every position is in exactly one segment.
//! - A writer killed with SIGKILL while it holds positions for their segments (the checkpoint
//!   not advanced past them), restarted: every position sent is in a segment, none twice,
//!   each drone's track in order across segments. Event Hubs rather than MQTT: its
//!   checkpoints are the writer's only record of what it took, so a restart reads again
//!   from the last checkpoint, which is what a killed writer's held positions rely on (an MQTT
//!   persistent session would test the broker's redelivery instead).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use cloud_writer::DropReason;
use common::replica::{Replica, hub_and_endpoint};
use common::segments::{Segment, segments_by_sdk};
use common::*;
use cosmos_sim::CosmosSim;
use hub_sim::{AuthMethod, HubSim, Incoming};
use test_harness::eventually;

const DRONES: usize = 20;
const POSITIONS: u64 = 120;
/// Bytes of one document per position as stored, system properties included (the import
/// test computes it: `cargo test -p cloud-writer --test import history_in_segments`).
const DOCUMENT_PER_POSITION_BYTES: f64 = 474.0;

/// Routes positions `seqs` of every drone into the hub, 5 s apart from `base` (device time),
/// as devices authenticated with SAS send them.
fn route(hub: &HubSim, base: DateTime<Utc>, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        for d in 0..DRONES {
            let id = device(d);
            let ts = base + TimeDelta::seconds(seq as i64 * 5);
            let (lat, lon) = (47.6 + d as f64 * 1e-3, -122.3 + seq as f64 * 1e-4);
            let mut message = Incoming::new(&id, wire(&id, seq, ts, lat, lon));
            message.auth = AuthMethod::Sas;
            hub.partitions().route(message);
        }
    }
}

/// Checks that every drone's track is exactly positions 1..=POSITIONS sent from `base`:
/// each position in one segment, once, in its segment's stretch, and the segments in
/// stretch order give the positions in order.
fn assert_tracks(segments: &[Segment], base: DateTime<Utc>) {
    let mut by_drone: BTreeMap<&str, Vec<&Segment>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for segment in segments {
        by_drone
            .entry(&segment.device_id)
            .or_default()
            .push(segment);
        for &(seq, _) in &segment.points {
            assert!(
                seen.insert((segment.device_id.clone(), seq)),
                "{} seq {seq} stored twice",
                segment.device_id
            );
        }
    }
    assert_eq!(by_drone.len(), DRONES, "drones with a track");
    for (drone, mut stretches) in by_drone {
        stretches.sort_by_key(|s| s.start_ms);
        let track: Vec<(u64, i64)> = stretches
            .iter()
            .flat_map(|s| {
                for &(seq, time) in &s.points {
                    assert!(
                        (s.start_ms..s.end_ms).contains(&time),
                        "{drone} seq {seq} at {time} outside [{}, {})",
                        s.start_ms,
                        s.end_ms
                    );
                }
                s.points.iter().copied()
            })
            .collect();
        let sent: Vec<(u64, i64)> = (1..=POSITIONS)
            .map(|seq| {
                let ts = base + TimeDelta::seconds(seq as i64 * 5);
                (seq, ts.timestamp_millis())
            })
            .collect();
        assert_eq!(track, sent, "{drone}: its track is what it sent, in order");
    }
}

/// RU charged for segment documents in container `positions`: everything history adds
/// (the latest documents are written as they are without history).
fn segment_charges(sim: &CosmosSim) -> f64 {
    sim.stats()
        .container("telemetry", "positions")
        .map_or(0.0, |c| {
            c.partitions
                .iter()
                .filter_map(|p| p.ru_by_kind.get("segment"))
                .sum()
        })
}

/// Positions stored in segments (each segment's `n`), read with the project's client.
async fn stored_positions(sim: &CosmosSim) -> u64 {
    let query = cosmos::QueryRequest {
        query: "SELECT c.n FROM c WHERE c.kind = 'segment'".into(),
        parameters: vec![],
    };
    container(&sim.endpoint(), "telemetry", "positions")
        .query(&query, cosmos::QueryScope::AllRanges)
        .await
        .map_or(0, |r| {
            r.documents.iter().filter_map(|d| d["n"].as_u64()).sum()
        })
}

/// History settings of these tests; positions 10 minutes old are fresh.
fn history(hold: &str) -> Vec<(&'static str, String)> {
    vec![
        ("HISTORY", "true".into()),
        ("HISTORY_TTL", "7d".into()),
        ("HISTORY_SEGMENT_SPAN", "2m".into()),
        ("HISTORY_HOLD", hold.into()),
        ("STALE_AFTER", "1h".into()),
        ("EVENTHUBS_CHECKPOINT_INTERVAL", "1s".into()),
    ]
}

fn env<'a>(settings: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    settings.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_history_in_segments_costs_under_one_ru_per_position() {
    let (dir, hub, sim) = hub_and_endpoint().await;
    let base = Utc::now() - TimeDelta::minutes(12);
    route(&hub, base, 1..=POSITIONS);
    let total = DRONES as u64 * POSITIONS;

    // A stretch is written when its drone moves to the next one; the last after 5 s.
    let settings = history("5s");
    let writer = Replica::start("live", &hub, &sim, dir.path(), &env(&settings));
    let counts = eventually(
        "every position stored in a segment and checkpointed",
        Duration::from_secs(120),
        async || writer.counts().await,
        |c| c.received == total && c.history_written == total && c.unacknowledged == 0,
    )
    .await;
    // Older positions are superseded as latest documents, never dropped from history.
    assert!(
        counts.dropped.keys().all(|r| *r == DropReason::Superseded),
        "{counts:?}"
    );

    let ru = segment_charges(&sim) / total as f64;
    let segments = segments_by_sdk(&sim, KEY, "positions").await;
    let bytes = segments.iter().map(|s| s.bytes).sum::<usize>() as f64 / total as f64;
    println!(
        "live history: {ru:.3} RU and {bytes:.1} bytes per position ({} segments; one document per position: {DOCUMENT_PER_POSITION_BYTES} bytes)",
        segments.len()
    );
    assert_tracks(&segments, base);
    assert!(segments.iter().all(|s| s.ttl == Some(604_800)));
    assert!(ru <= 1.0, "{ru} RU per position");
    assert!(
        bytes <= DOCUMENT_PER_POSITION_BYTES / 5.0,
        "{bytes} bytes per position"
    );
    drop(writer);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_killed_while_holding_positions_for_segments_loses_none() {
    let (dir, hub, sim) = hub_and_endpoint().await;
    let base = Utc::now() - TimeDelta::minutes(12);
    let half = POSITIONS / 2;
    let first = DRONES as u64 * half;
    route(&hub, base, 1..=half);

    // Held for the whole span: each drone's last stretch of the first half waits for
    // positions that come only after the kill.
    let settings = history("2m");
    let mut killed = Replica::start("killed", &hub, &sim, dir.path(), &env(&settings));
    let held = eventually(
        "the writer to hold positions for their segments, their events not checkpointed",
        Duration::from_secs(60),
        async || killed.counts().await,
        |c| c.received == first && c.history_written > 0 && c.unacknowledged > 0,
    )
    .await;
    killed.kill();
    let stored = stored_positions(&sim).await;
    assert!(
        stored < first,
        "nothing held at the kill: {stored} stored, {held:?}"
    );

    let settings = history("5s");
    let restarted = Replica::start("restarted", &hub, &sim, dir.path(), &env(&settings));
    route(&hub, base, half + 1..=POSITIONS);
    let total = DRONES as u64 * POSITIONS;
    eventually(
        "every position in a segment after the restart",
        Duration::from_secs(120),
        async || stored_positions(&sim).await,
        |n| *n >= total,
    )
    .await;
    let after = eventually(
        "the restarted writer to checkpoint everything",
        Duration::from_secs(60),
        async || restarted.counts().await,
        |c| c.unacknowledged == 0 && c.history_written + stored >= total,
    )
    .await;
    // It read again what the killed writer held (its events were not checkpointed).
    assert!(
        after.received > total - first,
        "nothing read again: {after:?}"
    );
    let segments = segments_by_sdk(&sim, KEY, "positions").await;
    assert_tracks(&segments, base);
    assert_eq!(stored_positions(&sim).await, total);
    drop(restarted);
    hub.shutdown().await;
}
