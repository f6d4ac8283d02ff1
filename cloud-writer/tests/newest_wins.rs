//! Newest wins, whatever the order positions reach the sink in: in flight together
//! (ascending, descending, shuffled), replayed after a restart (a new sink without
//! memory), an offline buffer replayed newest first, and written by two replicas at once.
//! Both mechanisms (conditional patch, ETag) against the local endpoint. Also: a newer
//! position without an optional field leaves no older value of it behind, a drone's
//! first document costs one Create, and a Replace sent again after a refusal keeps its
//! `ifMatch`.

mod common;

use std::sync::Arc;
use std::time::Duration;
use test_harness::eventually;

use chrono::{DateTime, TimeDelta, Utc};
use cloud_writer::Metrics;
use cloud_writer::NewestWins;
use cloud_writer::internals::PositionWrite;
use cloud_writer::internals::bulk_config;
use cloud_writer::internals::{CosmosSink, Encoder, SinkSettings};
use cloud_writer::{DropReason, HoldReason};
use common::sink::{latent_endpoint, position_write, sink_settings, start_sink, writer_container};
use common::*;
use cosmos::ContainerClient;
use cosmos_sim::CosmosSim;
use telemetry::DocumentLayout;

struct Fixture {
    sim: CosmosSim,
    container: ContainerClient,
}

async fn fixture(name: &str) -> Fixture {
    let sim = latent_endpoint().await;
    let container = writer_container(&sim, name).await;
    Fixture { sim, container }
}

fn sink(fixture: &Fixture, mode: NewestWins) -> (CosmosSink, Arc<Metrics>) {
    start_sink(&fixture.container, sink_settings(mode))
}

fn position(device: &str, seq: u64, base: DateTime<Utc>) -> PositionWrite {
    let ts = base + TimeDelta::seconds(seq as i64);
    position_write(device, seq, ts, seq as f64 / 100.0, 1.0)
}

async fn stored_seq(container: &ContainerClient, device: &str) -> u64 {
    stored(container, device).await["seq"].as_u64().unwrap()
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
        counts.written + counts.dropped(DropReason::Superseded),
        3 * n,
        "{counts:?}"
    );
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0);
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
    assert_eq!(counts.dropped(DropReason::Superseded), 91);
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
        ca.written
            + cb.written
            + ca.dropped(DropReason::Superseded)
            + cb.dropped(DropReason::Superseded),
        150
    );
    assert_eq!(
        ca.dropped(DropReason::WriteFailed) + cb.dropped(DropReason::WriteFailed),
        0
    );
    for d in 0..5 {
        assert_eq!(stored_seq(&fixture.container, &format!("r{d}")).await, 30);
    }
}

/// An agent back online replays its buffer newest first, each position reaching the
/// writer after the previous one is stored (separate batches): only the first is written.
async fn offline_buffer_newest_first(mode: NewestWins) {
    let fixture = fixture(&format!("offline-{mode:?}")).await;
    let base = Utc::now() - TimeDelta::seconds(60);
    let (sink, metrics) = sink(&fixture, mode);
    // The live position, then the buffer from newest to oldest.
    for seq in [40, 30, 29, 28, 20, 10, 1] {
        sink.write(position("buffered", seq, base)).await;
        sink.wait_idle().await;
        assert_eq!(stored_seq(&fixture.container, "buffered").await, 40);
    }
    // A restarted writer (no high-water mark) gets the same replay again.
    let (restarted, restarted_metrics) = self::sink(&fixture, mode);
    for seq in [39, 30, 2] {
        restarted.write(position("buffered", seq, base)).await;
        restarted.wait_idle().await;
    }
    restarted.close().await;
    sink.close().await;
    let counts = metrics.counts();
    assert_eq!(counts.written, 1, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::Superseded), 6);
    let counts = restarted_metrics.counts();
    assert_eq!(counts.written, 0, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::Superseded), 3);
    assert_eq!(stored_seq(&fixture.container, "buffered").await, 40);
}

/// A newer position that lacks optional fields the stored one has: the stored document
/// ends without them (absent or null), whichever write path applies it.
async fn omitted_optional_fields_do_not_survive(mode: NewestWins) {
    let fixture = fixture(&format!("optional-{mode:?}")).await;
    let base = Utc::now() - TimeDelta::seconds(60);
    let (sink, _) = sink(&fixture, mode);
    let mut full = position("opt", 1, base);
    full.position.alt_m = Some(120.5);
    full.position.speed_mps = Some(9.0);
    full.enqueued = Some(base + TimeDelta::seconds(2));
    sink.write(full).await;
    sink.wait_idle().await;
    let doc = stored(&fixture.container, "opt").await;
    assert_eq!(doc["altM"], 120.5);
    assert!(doc["enqueuedTimeMs"].is_i64());
    // Newer, with the battery only.
    sink.write(position("opt", 2, base)).await;
    sink.close().await;
    let doc = stored(&fixture.container, "opt").await;
    assert_eq!(doc["seq"], 2);
    for field in ["altM", "speedMps", "enqueuedTime", "enqueuedTimeMs"] {
        assert!(
            doc.get(field).is_none_or(serde_json::Value::is_null),
            "{field} kept from the older position: {doc}"
        );
    }
    assert_eq!(doc["batteryPct"], 50);
}

/// A drone this writer has not written yet starts with a Create: a new document costs
/// one operation; once written, the drone's next position is one conditional Patch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_new_drones_cost_one_create_each() {
    let fixture = fixture("create-first").await;
    let base = Utc::now() - TimeDelta::seconds(60);
    let (sink, metrics) = sink(&fixture, NewestWins::Patch);
    for d in 0..50 {
        sink.write(position(&format!("new{d}"), 1, base)).await;
    }
    sink.wait_idle().await;
    let ops = fixture.sim.stats().operations;
    assert_eq!(ops.get("create"), Some(&50), "{ops:?}");
    assert_eq!(ops.get("patch"), None, "{ops:?}");
    for d in 0..50 {
        sink.write(position(&format!("new{d}"), 2, base)).await;
    }
    sink.close().await;
    let ops = fixture.sim.stats().operations;
    assert_eq!(ops.get("create"), Some(&50), "{ops:?}");
    assert_eq!(ops.get("patch"), Some(&50), "{ops:?}");
    assert_eq!(metrics.counts().written, 100);
    assert_eq!(stored_seq(&fixture.container, "new7").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_offline_buffer_replayed_newest_first_moves_nothing_back() {
    offline_buffer_newest_first(NewestWins::Patch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_offline_buffer_replayed_newest_first_moves_nothing_back() {
    offline_buffer_newest_first(NewestWins::Etag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_newer_position_without_optional_fields_clears_them() {
    omitted_optional_fields_do_not_survive(NewestWins::Patch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_newer_position_without_optional_fields_clears_them() {
    omitted_optional_fields_do_not_survive(NewestWins::Etag).await;
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

/// A Replace refused (here: the key was rotated) is parked with its `ifMatch`; meanwhile
/// another writer stores a newer position. When the Replace goes out again it must stay
/// conditional: answered 412, the sink reads again and finds its position superseded.
/// Sent unconditionally, it would move the drone back to the older position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_replace_sent_again_after_a_refusal_keeps_its_if_match() {
    const ROTATED: &str = "cm90YXRlZCBrZXkgb2YgdGhlIGxvY2FsIGVuZHBvaW50";
    let fixture = fixture("etag-if-match").await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("cosmos-key");
    std::fs::write(&key_file, KEY).unwrap();
    let settings = SinkSettings {
        key_file: Some(key_file.clone()),
        ..sink_settings(NewestWins::Etag)
    };
    let (sink, metrics) = start_sink(&fixture.container, settings);
    let base = Utc::now() - TimeDelta::seconds(60);
    sink.write(position("d", 1, base)).await;
    sink.wait_idle().await;
    assert_eq!(stored_seq(&fixture.container, "d").await, 1);

    // The sink knows the ETag of seq 1, so seq 3 goes out as Replace with ifMatch: refused.
    fixture.sim.rotate_key(ROTATED).unwrap();
    sink.write(position("d", 3, base)).await;
    eventually(
        "the refused Replace to hold the stream",
        Duration::from_secs(10),
        async || metrics.blocked(),
        |b| *b == Some(HoldReason::Unauthorized),
    )
    .await;
    assert!(!metrics.is_ready());
    assert_eq!(sink.in_flight(), 1, "parked, not acknowledged");

    // Another writer stores seq 5 meanwhile.
    let other = cosmos::CosmosClient::new(cosmos::CosmosConfig::new(
        fixture.sim.endpoint().parse().unwrap(),
        cosmos::Credential::MasterKey(cosmos::MasterKey::from_base64(ROTATED).unwrap()),
    ))
    .unwrap()
    .container("telemetry", "etag-if-match");
    let newer = Encoder::new(DocumentLayout::default(), false, None)
        .latest(&position("d", 5, base).position, None);
    other.upsert("d", &newer).await.unwrap();

    // The writer is given the new key: the parked Replace goes out again, with its ifMatch.
    std::fs::write(&key_file, ROTATED).unwrap();
    sink.wait_idle().await;
    assert_eq!(metrics.blocked(), None);
    let counts = metrics.counts();
    assert_eq!(counts.dropped(DropReason::Superseded), 1, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0, "{counts:?}");
    assert_eq!(
        stored_seq(&other, "d").await,
        5,
        "the older position overwrote the newer"
    );
    sink.close().await;
}

/// A restarted writer in the ETag mode: every drone's Create meets 409 and the position
/// goes on to a read. Positions waiting for or doing their read count against the
/// in-flight limit (MAX_IN_FLIGHT, the bulk writer's queue capacity), so memory stays
/// bounded however far the reads lag behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_reads_count_inside_the_in_flight_limit() {
    const DRONES: usize = 1000;
    const LIMIT: usize = 100;
    let fixture = fixture("etag-reads-bounded").await;
    let base = Utc::now() - TimeDelta::seconds(60);
    let (first, _) = sink(&fixture, NewestWins::Etag);
    for d in 0..DRONES {
        first.write(position(&format!("r{d}"), 1, base)).await;
    }
    first.close().await;

    let settings = SinkSettings {
        high_water_capacity: 10_000,
        bulk: bulk_config(LIMIT),
        ..sink_settings(NewestWins::Etag)
    };
    let (restarted, metrics) = start_sink(&fixture.container, settings);
    let mut most = 0;
    for d in 0..DRONES {
        restarted.write(position(&format!("r{d}"), 2, base)).await;
        most = most.max(restarted.in_flight());
    }
    restarted.close().await;
    assert!(most <= LIMIT, "{most} positions in flight, limit {LIMIT}");
    let counts = metrics.counts();
    assert_eq!(counts.written, DRONES as u64, "{counts:?}");
    for d in [0, DRONES / 2, DRONES - 1] {
        assert_eq!(stored_seq(&fixture.container, &format!("r{d}")).await, 2);
    }
}
