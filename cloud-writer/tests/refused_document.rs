//! A document Cosmos DB refuses on its own, among good ones, end to end (Mosquitto, the
//! writer, the local endpoint): it is dead-lettered, counted by its reason, acknowledged (the
//! broker does not deliver it again), and the stream goes on.
//!
//! The refused document: too large. The service refuses a document over 2 MB with 413, which
//! a position (at most 256 KiB of message, a few hundred bytes of document) never reaches,
//! so the local endpoint's limit is lowered at run time (`maxDocumentBytes`) to below the
//! document of a drone with a long id (IoT Hub allows 128 characters) and above everyone
//! else's. (`@vercel/cosmosdb-server` has no document size limit and nothing else that
//! refuses one of the writer's documents alone, so this runs against the local endpoint
//! only.)

mod common;

use std::time::Duration;
use test_harness::eventually;

use chrono::{TimeDelta, Utc};
use cloud_writer::Counts;
use cloud_writer::DropReason;
use common::*;
use serde_json::Value;

/// A device id of IoT Hub's longest, 128 characters.
fn refused() -> String {
    format!("drone-{}", "7".repeat(122))
}

/// Above the fleet's documents (about 260 bytes), below the long id's (about 500).
const MAX_DOCUMENT_BYTES: u64 = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_too_large_alone_is_dead_lettered_acknowledged_and_the_stream_goes_on() {
    let (broker, sim, mut settings) = broker_and_endpoint("refused").await;
    let dir = tempfile::tempdir().unwrap();
    let dead_letters = dir.path().join("dead-letter.jsonl");
    settings.dead_letter_file = Some(dead_letters.clone());
    let writer = start_writer(settings.clone()).await;
    sim.set_faults(cosmos_sim::FaultSettings {
        max_document_bytes: Some(MAX_DOCUMENT_BYTES),
        ..Default::default()
    });
    let refused = refused();

    // The refused drone's position first, then a fleet: everything after it must be written.
    let now = Utc::now();
    let fleet = scenario(150, 3, now);
    let mut messages = vec![Publish {
        device: refused.clone(),
        payload: wire(&refused, 1, now - TimeDelta::seconds(20), 10.0, 20.0),
    }];
    messages.extend(fleet.messages.iter().cloned());
    publish(broker.port(), "fleet-refused", &messages).await;
    let total = messages.len() as u64;
    let counts = wait_final(&writer, total).await;

    // Counted by its reason, and nothing else dropped but the fleet's own bad messages.
    assert_eq!(
        counts.dropped(DropReason::DocumentTooLarge),
        1,
        "{counts:?}"
    );
    assert_eq!(counts.dropped(DropReason::Stale), fleet.stale, "{counts:?}");
    assert_eq!(
        counts.dropped(DropReason::Invalid),
        fleet.invalid,
        "{counts:?}"
    );
    assert_eq!(
        counts.dropped(DropReason::Spoofed),
        fleet.spoofed,
        "{counts:?}"
    );
    assert_eq!(
        counts.written + counts.dropped(DropReason::Superseded),
        fleet.fresh,
        "{counts:?}"
    );
    assert_eq!(writer.metrics().blocked(), None);
    // The stream went on: every other drone is at its newest position.
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "refused")).await;
    assert_newest(&docs, &fleet.expected);

    // Dead-lettered: one line naming the reason and the device, with the document's start.
    let lines: Vec<Value> = std::fs::read_to_string(&dead_letters)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let refused_lines: Vec<&Value> = lines
        .iter()
        .filter(|l| l["reason"] == DropReason::DocumentTooLarge.as_str())
        .collect();
    assert_eq!(refused_lines.len(), 1, "{lines:?}");
    assert_eq!(refused_lines[0]["identity"], refused.as_str());
    let excerpt = refused_lines[0]["excerpt"].as_str().unwrap();
    assert!(
        excerpt.starts_with(&format!("{{\"id\":\"{refused}\"")),
        "{}",
        refused_lines[0]
    );
    assert!(
        refused_lines[0]["detail"]
            .as_str()
            .unwrap()
            .contains(&refused),
        "{}",
        refused_lines[0]
    );

    // Acknowledged: a writer on the same persistent session gets a newer position of the
    // refused drone and nothing before it (the broker delivers a topic's messages in order,
    // so an unacknowledged one would come first).
    writer.shutdown();
    writer.wait().await.unwrap();
    let writer = start_writer(settings).await;
    let newer = [Publish {
        device: refused.clone(),
        payload: wire(&refused, 2, now, 10.0, 20.0),
    }];
    publish(broker.port(), "fleet-refused", &newer).await;
    let counts: Counts = eventually(
        "the newer position to have a final outcome",
        Duration::from_secs(60),
        async || writer.counts(),
        |c| c.finished() >= 1 && c.in_flight == 0,
    )
    .await;
    assert_eq!(counts.received, 1, "delivered again: {counts:?}");
    assert_eq!(
        counts.dropped(DropReason::DocumentTooLarge),
        1,
        "{counts:?}"
    );
    writer.shutdown();
    writer.wait().await.unwrap();
}
