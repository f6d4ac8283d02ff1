//! The hot partition of the field: a container partitioned on a path the documents lack.
//! The startup guard refuses it; forced past the guard, the writer sends every document
//! under the undefined partition key, so one physical partition takes every write.

mod common;

use chrono::{Duration as ChronoDuration, Utc};
use cloud_writer::DropReason;
use cloud_writer::{StartError, Writer};
use common::*;
use cosmos::PartitionKey;
use cosmos_sim::CosmosSim;
use std::time::Duration;
use test_harness::Mosquitto;
use test_harness::eventually;

const DRONES: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_writer_puts_every_document_in_the_one_undefined_partition() {
    let broker = Mosquitto::start().unwrap();
    // 4 ranges of 400 RU/s: one of them alone takes a fleet's writes and throttles.
    let sim = CosmosSim::builder()
        .partitions(4)
        .ru_per_sec(1_600.0)
        .start()
        .await
        .unwrap();
    sim.create_container("telemetry", "hot", "/droneId")
        .unwrap();
    let base = settings(&sim.endpoint(), &broker.url(), "hot");

    // By default the guard refuses, naming the container's path and the setting.
    let refusal = Writer::start(base.clone().resolve().unwrap())
        .await
        .expect_err("the guard refuses a container keyed on a path the documents lack");
    assert!(
        matches!(refusal, StartError::PartitionKeyMismatch { .. }),
        "{refusal}"
    );
    let message = refusal.to_string();
    assert!(message.contains("'/droneId'"), "{message}");
    assert!(
        message.contains("COSMOS_PARTITION_KEY_PATH=/droneId"),
        "{message}"
    );
    // The override needs the patch mode (the etag mode reads by the device's partition).
    let mut etag = base.clone();
    etag.writer_force_missing_partition_key = Some(true);
    etag.newest_wins = Some(cloud_writer::NewestWins::Etag);
    let refusal = Writer::start(etag.resolve().unwrap()).await.unwrap_err();
    assert!(matches!(refusal, StartError::Config(_)), "{refusal}");
    // History documents under the undefined key would fill one logical partition: refused.
    let mut history = base.clone();
    history.writer_force_missing_partition_key = Some(true);
    history.history = Some(true);
    let refusal = Writer::start(history.resolve().unwrap()).await.unwrap_err();
    assert!(matches!(refusal, StartError::Config(_)), "{refusal}");
    let message = refusal.to_string();
    assert!(
        message.contains("HISTORY") && message.contains("WRITER_FORCE_MISSING_PARTITION_KEY"),
        "{message}"
    );

    let mut forced = base;
    forced.writer_force_missing_partition_key = Some(true);
    let writer = start_writer(forced).await;

    // Two positions per drone, the second one newer: Create, then the conditional Patch,
    // both under [{}].
    let now = Utc::now();
    for (seq, at) in [(1, now - ChronoDuration::seconds(5)), (2, now)] {
        let messages: Vec<Publish> = (0..DRONES)
            .map(|d| Publish {
                device: device(d),
                payload: wire(&device(d), seq, at, 10.0 + d as f64 * 1e-3, 20.0),
            })
            .collect();
        publish(broker.port(), &format!("fleet-hot-{seq}"), &messages).await;
        let target = DRONES as u64 * seq;
        eventually(
            "every position of the round written",
            Duration::from_secs(90),
            async || writer.counts(),
            |c| c.written + c.dropped(DropReason::Superseded) >= target && c.in_flight == 0,
        )
        .await;
    }
    let counts = writer.counts();
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::Stale), 0, "{counts:?}");

    // One physical partition, the undefined key's, holds every document and took every
    // throttle; the others hold nothing.
    let client = container(&sim.endpoint(), "telemetry", "hot");
    let hot = client
        .range_map()
        .await
        .unwrap()
        .range_of_key(&PartitionKey::Undefined)
        .id
        .clone();
    let stats = sim.stats();
    let partitions = &stats.container("telemetry", "hot").unwrap().partitions;
    for p in partitions.iter().filter(|p| p.live) {
        if p.id == hot {
            assert_eq!(p.documents, DRONES, "{p:?}");
            assert!(p.throttled > 0, "the hot partition throttled: {p:?}");
        } else {
            assert_eq!((p.documents, p.throttled), (0, 0), "{p:?}");
        }
    }

    // The documents lack /droneId and hold the newest position of each drone.
    let docs = latest_documents(&client).await;
    assert_eq!(docs.len(), DRONES);
    for doc in docs.values() {
        assert!(doc.get("droneId").is_none(), "{doc}");
        assert_eq!(doc["seq"], 2, "{doc}");
    }
    writer.shutdown();
    writer.wait().await.unwrap();
}
