//! Newest wins, whatever the order positions reach the sink in: in flight together
//! (ascending, descending, shuffled), replayed after a restart (a new sink without
//! memory), and written by two replicas at once. Both mechanisms (conditional patch,
//! ETag) against the local endpoint.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use cloud_writer::config::NewestWins;
use cloud_writer::metrics::Metrics;
use cloud_writer::pipeline::PositionWrite;
use cloud_writer::sink::cosmos::{CosmosSink, SinkSettings};
use cloud_writer::sink::encode::Encoder;
use cloud_writer::source::Ack;
use cloud_writer::writer::{bulk_config, cosmos_client, open_container};
use common::*;
use cosmos::ContainerClient;
use cosmos_sim::CosmosSim;
use telemetry::{DocumentLayout, Position, StalenessPolicy};

struct Fixture {
    sim: CosmosSim,
    container: ContainerClient,
}

async fn fixture(name: &str) -> Fixture {
    // Latency makes batches overlap in flight.
    let sim = CosmosSim::builder()
        .partitions(2)
        .ru_per_sec(f64::INFINITY)
        .latency(Duration::from_millis(5))
        .start()
        .await
        .unwrap();
    let config = settings(&sim.endpoint(), "mqtt://127.0.0.1:1", name)
        .resolve()
        .unwrap();
    let client = cosmos_client(&config.cosmos).unwrap();
    let container = open_container(&client, &config.cosmos, &DocumentLayout::default(), None)
        .await
        .unwrap();
    Fixture { sim, container }
}

fn sink(fixture: &Fixture, mode: NewestWins) -> (CosmosSink, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let sink = CosmosSink::start(
        fixture.container.clone(),
        Encoder::new(DocumentLayout::default(), mode == NewestWins::Patch, None),
        SinkSettings {
            newest_wins: mode,
            staleness: StalenessPolicy::default(),
            high_water_capacity: 1000,
            bulk: bulk_config(1000),
        },
        metrics.clone(),
    );
    (sink, metrics)
}

fn position(device: &str, seq: u64, base: DateTime<Utc>) -> PositionWrite {
    PositionWrite {
        position: Position {
            device_id: device.into(),
            seq,
            ts: base + TimeDelta::seconds(seq as i64),
            lat: seq as f64 / 100.0,
            lon: 1.0,
            alt_m: None,
            heading_deg: None,
            speed_mps: None,
            battery_pct: Some(50),
        },
        enqueued: None,
        received_at: Instant::now(),
        ack: Ack::none(),
    }
}

async fn stored_seq(container: &ContainerClient, device: &str) -> u64 {
    let read = container
        .read(device, device)
        .await
        .unwrap()
        .expect("document exists");
    let doc: serde_json::Value = read.json().unwrap();
    doc["seq"].as_u64().unwrap()
}

/// Each drone gets positions 1..=n in its own order, every one submitted without
/// waiting for the others.
async fn in_flight_together(mode: NewestWins) {
    let fixture = fixture(&format!("inflight-{mode:?}")).await;
    let (sink, metrics) = sink(&fixture, mode);
    let base = Utc::now() - TimeDelta::seconds(60);
    let n = 20u64;
    let orders: [(&str, Vec<u64>); 3] = [
        ("ascending", (1..=n).collect()),
        ("descending", (1..=n).rev().collect()),
        (
            "shuffled",
            vec![
                7, 20, 1, 13, 2, 19, 5, 11, 3, 17, 4, 9, 6, 15, 8, 14, 10, 16, 12, 18,
            ],
        ),
    ];
    // Interleave the drones so that their positions share batches.
    for i in 0..n as usize {
        for (device, order) in &orders {
            sink.write(position(device, order[i], base)).await;
        }
    }
    sink.close().await;
    let counts = metrics.counts();
    assert_eq!(
        counts.written + counts.dropped("superseded"),
        3 * n,
        "{counts:?}"
    );
    assert_eq!(counts.dropped("write_failed"), 0);
    for (device, _) in &orders {
        assert_eq!(stored_seq(&fixture.container, device).await, n, "{device}");
    }
    drop(fixture.sim);
}

/// Newest positions written, then a new sink (a restarted writer: no memory) replays
/// older ones: every replayed one is superseded and nothing moves back.
async fn replay_after_restart(mode: NewestWins) {
    let fixture = fixture(&format!("replay-{mode:?}")).await;
    let base = Utc::now() - TimeDelta::seconds(60);
    let (first, _) = sink(&fixture, mode);
    for d in 0..10 {
        first.write(position(&format!("d{d}"), 10, base)).await;
    }
    first.close().await;
    let (second, metrics) = sink(&fixture, mode);
    for seq in (1..10).rev() {
        for d in 0..10 {
            second.write(position(&format!("d{d}"), seq, base)).await;
        }
    }
    // The same newest position again (an exact replay) is no change either.
    second.write(position("d0", 10, base)).await;
    second.close().await;
    let counts = metrics.counts();
    assert_eq!(counts.written, 0, "{counts:?}");
    assert_eq!(counts.dropped("superseded"), 91);
    for d in 0..10 {
        assert_eq!(stored_seq(&fixture.container, &format!("d{d}")).await, 10);
    }
}

/// Two replicas write interleaved positions of the same drones at once.
async fn two_replicas(mode: NewestWins) {
    let fixture = fixture(&format!("replicas-{mode:?}")).await;
    let base = Utc::now() - TimeDelta::seconds(60);
    let (a, ma) = sink(&fixture, mode);
    let (b, mb) = sink(&fixture, mode);
    let feed = |sink: CosmosSink, odd: bool| async move {
        for seq in 1..=30u64 {
            if (seq % 2 == 1) == odd {
                for d in 0..5 {
                    sink.write(position(&format!("r{d}"), seq, base)).await;
                }
            }
        }
        sink.close().await;
    };
    tokio::join!(feed(a, true), feed(b, false));
    let (ca, cb) = (ma.counts(), mb.counts());
    assert_eq!(
        ca.written + cb.written + ca.dropped("superseded") + cb.dropped("superseded"),
        150
    );
    assert_eq!(ca.dropped("write_failed") + cb.dropped("write_failed"), 0);
    for d in 0..5 {
        assert_eq!(stored_seq(&fixture.container, &format!("r{d}")).await, 30);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_positions_in_flight_together_end_with_the_newest() {
    in_flight_together(NewestWins::Patch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_positions_in_flight_together_end_with_the_newest() {
    in_flight_together(NewestWins::Etag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_replay_after_restart_moves_nothing_back() {
    replay_after_restart(NewestWins::Patch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_replay_after_restart_moves_nothing_back() {
    replay_after_restart(NewestWins::Etag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_two_replicas_at_once_end_with_the_newest() {
    two_replicas(NewestWins::Patch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_two_replicas_at_once_end_with_the_newest() {
    two_replicas(NewestWins::Etag).await;
}
