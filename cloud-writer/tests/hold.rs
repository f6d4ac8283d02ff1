//! Refusals that would hit every write hold the stream instead of dropping it: the
//! container deleted and created again mid-stream, the account key rotated mid-stream (the
//! writer is given the new key through COSMOS_KEY_FILE), and an outage (every request
//! answered 503). MQTT from Mosquitto into the local endpoint: while held nothing more is
//! written or acknowledged (the broker keeps the messages), `/readyz` answers 503 and
//! `writer_blocked` names the reason; afterwards every drone is at its newest position and
//! nothing was dropped as a failed write. An outage longer than STALE_AFTER is one hold
//! and one resumption.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use test_harness::eventually;

use chrono::{TimeDelta, Utc};
use cloud_writer::{DropReason, HoldReason};
use cloud_writer::{DurationSetting, NewestWins, Settings};
use common::hold::{assert_held, hold_mid_stream, metrics_text, wait_probed_again};
use common::segments::segments_by_sdk;
use common::*;
use cosmos_sim::CosmosSim;
use serde_json::Value;

const ROTATED: &str = "cm90YXRlZCBrZXkgb2YgdGhlIGxvY2FsIGVuZHBvaW50";

/// Gives the writer its key in a file holding `contents` instead of in `settings`; the
/// file lives as long as the directory returned.
fn key_in_file(settings: &mut Settings, contents: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("cosmos-key");
    std::fs::write(&key_file, contents).unwrap();
    settings.cosmos_key = None;
    settings.cosmos_key_file = Some(key_file.clone());
    (dir, key_file)
}

/// A client of `container` signing with the rotated key.
fn rotated_reader(sim: &CosmosSim, container: &str) -> cosmos::ContainerClient {
    cosmos::CosmosClient::new(cosmos::CosmosConfig::new(
        sim.endpoint().parse().unwrap(),
        cosmos::Credential::MasterKey(cosmos::MasterKey::from_base64(ROTATED).unwrap()),
    ))
    .unwrap()
    .container("telemetry", container)
}

/// Checks that `docs` hold each drone's newest position of the two rounds.
fn assert_newest_of_both(docs: &HashMap<String, Value>, first: &Scenario, second: &Scenario) {
    let mut expected = first.expected.clone();
    expected.extend(second.expected.clone());
    assert_newest(docs, &expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_deleted_and_created_again_mid_stream_loses_nothing() {
    let (broker, sim, settings) = broker_and_endpoint("recreated").await;
    let writer = start_writer(settings).await;
    let (_, second) = hold_mid_stream(
        &writer,
        &broker,
        &sim,
        HoldReason::ContainerMissing,
        || sim.delete_container("telemetry", "recreated").unwrap(),
        || {
            sim.create_container("telemetry", "recreated", "/deviceId")
                .unwrap()
        },
    )
    .await;
    // The first round went with the deleted container.
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "recreated")).await;
    assert_newest(&docs, &second.expected);
    writer.shutdown();
    writer.wait().await.unwrap();
}

/// An outage: the endpoint answers every request 503 from mid-stream on, then recovers. The
/// writer holds the stream (`unavailable`) and resumes by itself; every drone ends at its
/// newest position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cosmos_unavailable_mid_stream_holds_the_stream_and_resumes_by_itself() {
    let (broker, sim, settings) = broker_and_endpoint("outage").await;
    let writer = start_writer(settings).await;
    let (first, second) = hold_mid_stream(
        &writer,
        &broker,
        &sim,
        HoldReason::Unavailable,
        || sim.set_error_rate_503(1.0),
        || sim.set_error_rate_503(0.0),
    )
    .await;
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "outage")).await;
    assert_newest_of_both(&docs, &first, &second);
    writer.shutdown();
    writer.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rotated_mid_stream_holds_the_stream_until_the_key_file_has_the_new_key() {
    let (broker, sim, mut settings) = broker_and_endpoint("rotated").await;
    let (_dir, key_file) = key_in_file(&mut settings, &format!("{KEY}\n"));
    settings.newest_wins = Some(NewestWins::Etag);
    let writer = start_writer(settings).await;
    let (first, second) = hold_mid_stream(
        &writer,
        &broker,
        &sim,
        HoldReason::Unauthorized,
        || sim.rotate_key(ROTATED).unwrap(),
        || std::fs::write(&key_file, ROTATED).unwrap(),
    )
    .await;
    let docs = latest_documents(&rotated_reader(&sim, "rotated")).await;
    assert_newest_of_both(&docs, &first, &second);
    writer.shutdown();
    writer.wait().await.unwrap();
}

/// Positions held until they are older than STALE_AFTER are dropped from the latest
/// document as `stale_in_retry`, not `stale` (a late arrival), and counted. History keeps
/// every one: a position the sink took before the hold and one that waited for the hold to
/// open are both in their track segments (staleness is the latest document's rule).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_that_turn_stale_while_held_are_counted_apart_from_late_arrivals() {
    const STALE_AFTER: Duration = Duration::from_secs(10);
    let (broker, sim, mut settings) = broker_and_endpoint("turned-stale").await;
    let (_dir, key_file) = key_in_file(&mut settings, KEY);
    settings.history = Some(true);
    settings.history_hold = Some(DurationSetting(Duration::from_secs(1)));
    settings.stale_after = Some(DurationSetting(STALE_AFTER));
    let writer = start_writer(settings).await;

    sim.rotate_key(ROTATED).unwrap();
    let at = Utc::now();
    let messages: Vec<Publish> = (0..20)
        .map(|d| Publish {
            device: device(d),
            payload: wire(&device(d), 1, at, 1.0, 2.0),
        })
        .collect();
    publish(broker.port(), "fleet-stale", &messages).await;
    eventually(
        "the writer to hold the stream",
        Duration::from_secs(30),
        async || writer.metrics().blocked(),
        |b| *b == Some(HoldReason::Unauthorized),
    )
    .await;
    // Held until the positions are past STALE_AFTER.
    let stale_at = at + TimeDelta::from_std(STALE_AFTER + Duration::from_secs(1)).unwrap();
    eventually(
        "the held positions to turn stale",
        STALE_AFTER * 3,
        async || Utc::now(),
        |now| *now > stale_at,
    )
    .await;
    std::fs::write(&key_file, ROTATED).unwrap();
    let counts = wait_final(&writer, 20).await;
    assert_eq!(counts.dropped(DropReason::StaleInRetry), 20, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::Stale), 0, "{counts:?}");
    assert_eq!(counts.written, 0, "{counts:?}");
    let counts = eventually(
        "every position in a segment",
        Duration::from_secs(30),
        async || writer.counts(),
        |c| c.history_written + c.history_dropped == 20,
    )
    .await;
    assert_eq!(counts.history_written, 20, "{counts:?}");
    let segments = segment_points(&sim, ROTATED, "turned-stale").await;
    assert_eq!(segments.len(), 20, "{segments:?}");
    writer.shutdown();
    writer.wait().await.unwrap();
}

/// Track segment writes refused by an outage (every request answered 503 once the latest
/// documents are written and while the positions are held for their segments): the stream
/// holds for `unavailable` as it does for the latest documents, nothing is acknowledged
/// or dropped, and once the endpoint answers again every position lands in its segment.
/// The segments' request units are counted under `kind="history"`, as much as the
/// endpoint charged for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_writes_refused_hold_the_stream_and_land_afterwards() {
    const DRONES: usize = 20;
    const PER_DRONE: u64 = 3;
    const TOTAL: u64 = DRONES as u64 * PER_DRONE;
    let (broker, sim, mut settings) = broker_and_endpoint("segments-held").await;
    settings.history = Some(true);
    // Long enough to refuse the writes before the segments fall due.
    settings.history_hold = Some(DurationSetting(Duration::from_secs(15)));
    let writer = start_writer(settings).await;
    // Every position of a drone in one stretch (the segments' span is 5 minutes), so no
    // segment falls due before the hold.
    let now = Utc::now();
    let stretch = now.timestamp_millis() / 300_000 * 300_000;
    let first = (now.timestamp_millis() - 10_000).max(stretch);
    let step = (now.timestamp_millis() - first) / PER_DRONE as i64;
    let messages: Vec<Publish> = (1..=PER_DRONE)
        .flat_map(|seq| {
            let at =
                chrono::DateTime::from_timestamp_millis(first + step * (seq as i64 - 1)).unwrap();
            (0..DRONES).map(move |d| Publish {
                device: device(d),
                payload: wire(&device(d), seq, at, 1.0 + seq as f64 * 1e-3, 2.0),
            })
        })
        .collect();
    publish(broker.port(), "fleet-segments", &messages).await;
    let latest = eventually(
        "the latest documents to be written",
        Duration::from_secs(30),
        async || writer.counts(),
        |c| c.written + c.dropped(DropReason::Superseded) == TOTAL && c.in_flight == 0,
    )
    .await;
    assert_eq!(
        latest.history_written, 0,
        "held for their segments: {latest:?}"
    );

    sim.set_error_rate_503(1.0);
    eventually(
        "the writer to hold the stream for the segments",
        Duration::from_secs(120),
        async || writer.metrics().blocked(),
        |b| *b == Some(HoldReason::Unavailable),
    )
    .await;
    // Held: no segment written, no message acknowledged, however often it probes.
    wait_probed_again(&sim).await;
    let held = writer.counts();
    assert_eq!(held.history_written, 0, "{held:?}");
    assert_eq!(held.history_dropped, 0, "{held:?}");
    assert!(held.in_flight > 0, "{held:?}");
    assert_eq!(
        mqtt_acknowledgements(&writer).1,
        TOTAL,
        "acknowledged while held"
    );

    sim.set_error_rate_503(0.0);
    let counts = eventually(
        "every position in its segment",
        Duration::from_secs(60),
        async || writer.counts(),
        |c| c.history_written == TOTAL && c.in_flight == 0,
    )
    .await;
    assert_eq!(counts.history_dropped, 0, "{counts:?}");
    assert_eq!(writer.metrics().blocked(), None);
    eventually(
        "every message acknowledged",
        Duration::from_secs(30),
        async || mqtt_acknowledgements(&writer).1,
        |unacknowledged| *unacknowledged == 0,
    )
    .await;
    let segments = segment_points(&sim, KEY, "segments-held").await;
    assert_eq!(segments.len(), DRONES, "{segments:?}");
    for (device, seqs) in &segments {
        assert_eq!(seqs, &(1..=PER_DRONE).collect::<Vec<_>>(), "{device}");
    }
    // The segments' RU: counted by the writer as the endpoint charged them.
    let text = writer.metrics().render();
    let counted: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("cloud_writer_cosmos_request_units_total{")
                && l.contains("kind=\"history\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let charged: f64 = sim
        .stats()
        .containers
        .iter()
        .filter(|c| c.container == "segments-held")
        .flat_map(|c| &c.partitions)
        .filter_map(|p| p.ru_by_kind.get("segment"))
        .sum();
    assert!(charged > 0.0, "{text}");
    assert!(
        (counted - charged).abs() <= 0.01 * charged,
        "the writer counted {counted} RU of segments, the endpoint charged {charged}: {text}"
    );
    writer.shutdown();
    writer.wait().await.unwrap();
}

/// The points' `seq` of each drone's track segments in `telemetry`/`container`, in the
/// segments' order, read with the official SDK signing with `key`.
async fn segment_points(
    sim: &CosmosSim,
    key: &str,
    container: &str,
) -> std::collections::BTreeMap<String, Vec<u64>> {
    let mut segments = segments_by_sdk(sim, key, container).await;
    segments.sort_by_key(|s| s.start_ms);
    let mut seqs = std::collections::BTreeMap::<String, Vec<u64>>::new();
    for segment in segments {
        seqs.entry(segment.device_id)
            .or_default()
            .extend(segment.points.iter().map(|&(seq, _)| seq));
    }
    seqs
}

/// SIGTERM (here: `shutdown`) while the stream is held stops at once, with an error that
/// says the positions not written were not acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_while_held_acknowledges_nothing_and_says_so() {
    let (broker, sim, settings) = broker_and_endpoint("stopped").await;
    let writer = start_writer(settings).await;
    sim.rotate_key(ROTATED).unwrap();
    let s = scenario(50, 2, Utc::now());
    publish(broker.port(), "fleet-stop", &s.messages).await;
    assert_held(&writer, &sim, HoldReason::Unauthorized).await;
    writer.shutdown();
    let error = writer.wait().await.unwrap_err();
    assert!(
        matches!(
            error,
            cloud_writer::RunError::Held(HoldReason::Unauthorized)
        ),
        "{error}"
    );
}

/// Publishes one fresh position per drone (seq 1, 2, ...) every 250 ms until `stop`;
/// returns the messages published and the last seq.
async fn publish_rounds(port: u16, drones: usize, stop: Arc<AtomicBool>) -> (u64, u64) {
    let mut seq = 0;
    while !stop.load(Ordering::Acquire) {
        seq += 1;
        let at = Utc::now();
        let round: Vec<Publish> = (0..drones)
            .map(|d| Publish {
                device: device(d),
                payload: wire(&device(d), seq, at, 1.0, 2.0),
            })
            .collect();
        publish(port, "fleet-rounds", &round).await;
        // The pace of the fleet, not a synchronisation.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (seq * drones as u64, seq)
}

/// An outage much longer than STALE_AFTER, with positions arriving throughout, is one hold
/// and one resumption: the parked positions turn stale and are dropped (`stale_in_retry`,
/// acknowledged) while held, but the gate stays shut until a probe gets through, so nothing
/// is written and the writer does not resume and hold again in between. Afterwards the
/// fresh positions are written and every drone is at its newest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_longer_than_stale_after_is_one_hold_and_one_resumption() {
    const STALE_AFTER: Duration = Duration::from_secs(3);
    const DRONES: usize = 20;
    let (broker, sim, mut settings) = broker_and_endpoint("long-outage").await;
    settings.stale_after = Some(DurationSetting(STALE_AFTER));
    let writer = start_writer(settings).await;
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = tokio::spawn(publish_rounds(broker.port(), DRONES, stop.clone()));
    eventually(
        "the first positions to be written",
        Duration::from_secs(30),
        async || writer.counts(),
        |c| c.written >= DRONES as u64,
    )
    .await;

    sim.set_error_rate_503(1.0);
    eventually(
        "the writer to hold the stream",
        Duration::from_secs(60),
        async || writer.metrics().blocked(),
        |b| *b == Some(HoldReason::Unavailable),
    )
    .await;
    let held = writer.counts();
    let began = Instant::now();
    // Held at least five times STALE_AFTER, and until parked positions turned stale and
    // were dropped (writes the bulk writer was retrying when the hold began are parked only
    // when their retry budget runs out, up to a minute later). Both are lower bounds: a slow
    // machine takes longer, within a generous limit. Throughout, the hold stands and
    // nothing is written.
    let during = eventually(
        "parked positions dropped as stale while held",
        Duration::from_secs(300),
        async || {
            let counts = writer.counts();
            assert_eq!(
                writer.metrics().blocked(),
                Some(HoldReason::Unavailable),
                "the hold ended while Cosmos DB was down, {:?} in: {counts:?}",
                began.elapsed()
            );
            assert_eq!(
                counts.written, held.written,
                "written while held: {counts:?}"
            );
            counts
        },
        |c| {
            c.dropped(DropReason::StaleInRetry) > held.dropped(DropReason::StaleInRetry)
                && began.elapsed() >= STALE_AFTER * 5
        },
    )
    .await;
    assert_eq!(writer.metrics().holds(), 1, "{during:?}");

    sim.set_error_rate_503(0.0);
    eventually(
        "the writer to resume",
        Duration::from_secs(60),
        async || writer.metrics().blocked(),
        Option::is_none,
    )
    .await;
    // Positions published after the resumption are written; then the fleet stops.
    let resumed = writer.counts();
    eventually(
        "fresh positions to be written",
        Duration::from_secs(60),
        async || writer.counts(),
        |c| c.written >= resumed.written + DRONES as u64,
    )
    .await;
    stop.store(true, Ordering::Release);
    let (published, newest) = publisher.await.unwrap();
    let counts = wait_final(&writer, published).await;

    let text = metrics_text(writer.metrics_addr().unwrap()).await;
    assert!(
        text.contains("cloud_writer_writer_holds_total{reason=\"unavailable\"} 1"),
        "exactly one hold: {text}"
    );
    assert_eq!(writer.metrics().holds(), 1, "{counts:?}");
    assert_eq!(writer.metrics().blocked(), None);
    assert!(writer.metrics().is_ready());
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0, "{counts:?}");
    let accounted = [
        DropReason::Superseded,
        DropReason::Stale,
        DropReason::StaleInRetry,
    ]
    .into_iter()
    .map(|r| counts.dropped(r))
    .sum::<u64>();
    assert_eq!(
        counts.finished(),
        counts.written + accounted,
        "dropped for another reason: {counts:?}"
    );
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "long-outage")).await;
    assert_eq!(docs.len(), DRONES, "one document per drone");
    for (device, doc) in &docs {
        assert_eq!(doc["seq"], newest, "{device}: {doc}");
    }
    writer.shutdown();
    writer.wait().await.unwrap();
}
